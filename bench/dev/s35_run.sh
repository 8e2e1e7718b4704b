#!/bin/bash
# Session 35: main's binaries (.carry/bins.tar.xz, build/cuda-on) and the candidate's (.carry/cand.tar.xz, build/cq: C_q
# formed inside chain_ws.cu's blocks, kkt without it) on the device, one or more modes a call, the most valuable first
# (output also in $OUT/run.log):
#   profile  Nsight source counters of main's warp-specialized chains at their default shapes: the forward at GDN
#            (8,2048,32), the pair at GDN (4,4096,16); per-line tables in $OUT (ncu_source.sh)
#   cand     the candidate's oracle matrix with both ws kernels forced; GPU-bound ms, main against the candidate, at
#            SHAPES (the ws kernels forced in both: FORCE)
#   verify   the oracle matrix at the default (main, then the candidate); racecheck and memcheck of the V = 128 cases
#            with both ws kernels forced (main, then the candidate)
source "$(dirname "$0")/carried_bins.sh"
[ -f .carry/cand.tar.xz ] && tar xJf .carry/cand.tar.xz
C=build/cq
SHAPES=${SHAPES:-"8x2048x32 16x1024x16 4x4096x16 1x8192x16"}
FORCE=${FORCE:-REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1}
oracle() { # oracle BUILD ENV…
  local b=$1; shift
  env "$@" timeout ${TC_LIMIT:-150} $b/tests/cuda/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda $b [$*] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -4
}
for mode in ${@:-profile cand verify}; do case $mode in
dflt)
  # the second candidate (C_q in the forward block only; the plan's gate flag; the forward ws for DeltaNet too): both
  # builds at their defaults, the six shapes; then the candidate's oracle (default, both ws forced), its sanitizers
  # (forward ws forced), and the source counters of its forward block at GDN (8,2048,32)
  echo "GPU-bound ms fwd/bwd, defaults: main | candidate" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES6:-8x2048x32 16x1024x16 4x4096x16 1x8192x16 2x16384x8 1x2048x4}; do
    echo "| $op | $s | $(gb $B/bench/dev/variant_time $op ${s//x/ }) | $(gb $C/bench/dev/variant_time $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done
  oracle $C; oracle $C $FORCE
  for tool in racecheck memcheck; do
    env REWY_CUDA_FWD_WS=1 REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
      $C/tests/cuda/test_cuda --v128 > /tmp/cs.log 2>&1
    echo "$tool $C [REWY_CUDA_FWD_WS=1] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done
  cat /tmp/tab.txt
  RB=$C bash bench/dev/ncu_source.sh chain_ws_kernel ws_fwd gdn 8x2048x32; echo "$(el)" ;;
profile)
  RB=$B bash bench/dev/ncu_source.sh chain_ws_kernel ws_fwd gdn 8x2048x32; echo "$(el)"
  RB=$B bash bench/dev/ncu_source.sh chain_pair_ws_kernel ws_pair gdn 4x4096x16; echo "$(el)" ;;
cand)
  oracle $C $FORCE
  echo "GPU-bound ms fwd/bwd [$FORCE]: main | candidate" > /tmp/tab.txt
  for op in gdn delta; do for s in $SHAPES; do
    echo "| $op | $s | $(gb $FORCE $B/bench/dev/variant_time $op ${s//x/ }) | $(gb $FORCE $C/bench/dev/variant_time $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done
  for b in $B $C; do echo "[ncu $b gdn 8x2048x32, $FORCE]"
    ( export $FORCE; kernel_table $b/bench/dev/variant_time gdn 8 2048 32 ) | awk '{k = substr($0, index($0, "us") + 4);
      sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
      END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn | head -8
  done
  cat /tmp/tab.txt ;;
verify)
  oracle $B; oracle $C
  for b in $B $C; do for tool in racecheck memcheck; do
    env $FORCE REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
      $b/tests/cuda/test_cuda --v128 > /tmp/cs.log 2>&1
    echo "$tool $b [$FORCE] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done; done ;;
esac; done
echo "total $(el)"
