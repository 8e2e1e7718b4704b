#!/bin/bash
# Session 34: main's binaries (.carry/bins.tar.xz) on the device, one mode a call (each under 600 s); output also in
# $OUT/run.log.
#   verify   the oracle matrix (test_cuda) at the default and under each ';'-separated forcing of TEST_ENV; memcheck and
#            racecheck (--quick) under the forcing RACE_ENV; each kernel's device time (ncu) at the shapes of KSHAPES
#   ws       the warp-specialized forward chain (REWY_CUDA_FWD_WS=1): oracle, memcheck, racecheck, GPU-bound ms against
#            the default at SHAPES, and both chains' device time at KSHAPES
source "$(dirname "$0")/carried_bins.sh"
V=$B/bench/dev/variant_time
SHAPES=${SHAPES:-"1x2048x4 1x8192x16 4x4096x16 8x2048x32 2x16384x8 16x1024x16"}
ktab() { for s in ${KSHAPES:-8x2048x32 16x1024x16 4x4096x16}; do
  echo "[ncu $1 $s${2:+, $2}]"; ( [ -n "${2:-}" ] && export $2; kernel_table $V $1 ${s//x/ } ) | awk '{k = substr($0, index($0, "us") + 4);
    sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
    END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn | head -${KTOP:-12}
done; }
oracle() { IFS=';' read -ra TES <<< "$1"; for te in "" "${TES[@]}"; do
  env $te timeout ${TC_LIMIT:-100} $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$te] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -4
done; }
sanit() { for tool in memcheck racecheck; do
  env $1 REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-150} compute-sanitizer --tool $tool --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "$tool [$1] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
done; }
for mode in ${@:-verify}; do case $mode in
verify)
  KTOP=8 ktab gdn
  oracle "${TEST_ENV:-}"
  sanit "${RACE_ENV:-REWY_CUDA_CHAIN=2}" ;;
ws)
  # the oracle at the default and with the kernel forced (alone; with two-chunk windows, whose checkpoints it writes)
  oracle "REWY_CUDA_FWD_WS=1;REWY_CUDA_FWD_WS=2 REWY_CUDA_WIN=2"
  gb() { timeout 40 env "$@" 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | awk '{print $NF}' | tr '\n' '/'; }
  echo "GPU-bound ms, fwd/bwd: default | REWY_CUDA_FWD_WS=1 | =2 (Q S after K S)" > /tmp/tab.txt
  for op in gdn delta; do for s in $SHAPES; do
    echo "| $op | $s | $(gb $V $op ${s//x/ }) | $(gb REWY_CUDA_FWD_WS=1 $V $op ${s//x/ }) | $(gb REWY_CUDA_FWD_WS=2 $V $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done
  env REWY_CUDA_FWD_WS=1 REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-150} compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "memcheck [REWY_CUDA_FWD_WS=1] rc=$? $(grep -E 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"
  [ -n "${KSHAPES:-}" ] && KTOP=4 ktab gdn REWY_CUDA_FWD_WS=1
  cat /tmp/tab.txt ;;
esac; done
echo "total $(el)"
