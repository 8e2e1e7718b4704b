#!/bin/bash
# Session 34: main's binaries (.carry/bins.tar.xz) on the device, one mode a call (each under 600 s); output also in
# $OUT/run.log.
#   verify   the oracle matrix (test_cuda) at the default and under each ';'-separated forcing of TEST_ENV; memcheck and
#            racecheck (--quick) under the forcing RACE_ENV; each kernel's device time (ncu) at the shapes of KSHAPES
#   ws       the warp-specialized chains (chain_ws.cu: REWY_CUDA_FWD_WS, REWY_CUDA_CHAIN_WS): the oracle under the forcings
#            of WS_TEST_ENV, GPU-bound ms of the default and under each forcing of WS_ALT at SHAPES, memcheck and
#            racecheck with both forced, each kernel's device time at KSHAPES with both forced
source "$(dirname "$0")/carried_bins.sh"
V=$B/bench/dev/variant_time
SHAPES=${SHAPES:-"1x2048x4 1x8192x16 4x4096x16 8x2048x32 2x16384x8 16x1024x16"}
ktab() { for s in ${KSHAPES:-8x2048x32 16x1024x16 4x4096x16}; do
  echo "[ncu $1 $s${2:+, $2}]"; ( [ -n "${2:-}" ] && export $2; kernel_table $V $1 ${s//x/ } ) | awk '{k = substr($0, index($0, "us") + 4);
    sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
    END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn | head -${KTOP:-12}
done; }
# the oracle at the default and under each forcing; HUNG=1 when one ran past its limit (a kernel that never returns:
# the later steps skip the forcings then)
HUNG=0
oracle() { IFS=';' read -ra TES <<< "$1"; for te in "" "${TES[@]}"; do
  env $te timeout ${TC_LIMIT:-100} $T/test_cuda > /tmp/tc.log 2>&1; rc=$?; echo "test_cuda [$te] rc=$rc $(tail -1 /tmp/tc.log) $(el)"
  [ $rc -eq 124 ] && HUNG=1
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
  # the oracle at the default and with both kernels forced (alone; with one-chunk windows, whose checkpoints the forward
  # writes and whose carry the pair reads and writes). Session 34 measured the binaries of c53609e, where =2 was the
  # forward with Q S after K S (now its only form) and =1 the forward with both issued at once (deleted)
  oracle "${WS_TEST_ENV:-REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1;REWY_CUDA_FWD_WS=1 REWY_CUDA_WIN=1 REWY_CUDA_CHAIN_WS=1}"
  [ $HUNG -eq 1 ] && { echo "a forced oracle run hung: no timings"; exit 1; }
  gb() { timeout 30 env "$@" 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | awk '{print $NF}' | tr '\n' '/'; }
  WS_ALT=${WS_ALT:-REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1;REWY_CUDA_FWD_WS=0 REWY_CUDA_CHAIN_WS=0}
  IFS=';' read -ra ALTS <<< "$WS_ALT"
  echo "GPU-bound ms, fwd/bwd: default | $WS_ALT" > /tmp/tab.txt
  for op in gdn delta; do for s in $SHAPES; do
    line="| $op | $s | $(gb $V $op ${s//x/ }) |"
    for a in "${ALTS[@]}"; do line="$line $(gb $a $V $op ${s//x/ }) |"; done
    echo "$line" | tee -a /tmp/tab.txt
  done; done
  sanit "REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1"
  [ -n "${KSHAPES:-}" ] && KTOP=6 ktab gdn "REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1"
  cat /tmp/tab.txt ;;
esac; done
echo "total $(el)"
