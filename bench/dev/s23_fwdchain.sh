#!/bin/bash
# Session 23: the forward pass as the register chain (chain_scan.cu's forward half alone, one warp per 16 value
# columns, 16/32/64 columns per block) then output.cu, against the fused-output scan (REWY_CUDA_FWD_CHAIN, test-forced;
# the default is unchanged). Built here for sm_90a and carried in .carry/bins.tar.xz (carried_bins.sh). The oracle
# matrix with it forced at each width, the sanitizers, then device time at the six shapes and ncu per kernel at
# (4,4096,16). About 6 minutes.
source "$(dirname "$0")/carried_bins.sh"
for v in REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN=32 REWY_CUDA_FWD_CHAIN=64 "REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_CHAIN=2"; do
  env $v timeout 120 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda $v rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6; cat /tmp/tc.log >> $OUT/test_cuda.log
done
{ REWY_CUDA_FWD_CHAIN=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "ERROR SUMMARY" | tail -1
  REWY_CUDA_FWD_CHAIN=64 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "ERROR SUMMARY" | tail -1
  REWY_CUDA_FWD_CHAIN=1 REWY_TEST_NO_GRAPH=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "RACECHECK SUMMARY" | tail -1
} > $OUT/sanitizers.log 2>&1; cat $OUT/sanitizers.log; echo "sanitizers $(el)"
V=$B/bench/dev/variant_time
for op in gdn delta; do
  for sh in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
    for v in REWY_CUDA_FWD_CHAIN=0 REWY_CUDA_FWD_CHAIN=1; do
      echo "[$op $sh $v] $(env $v timeout 60 $V $op $sh | grep forward)"
    done
  done
done 2>&1 | tee $OUT/variants.log
for v in REWY_CUDA_FWD_CHAIN=0 REWY_CUDA_FWD_CHAIN=1; do
  echo "[ncu gdn 4x4096x16 $v]"; ( export $v; kernel_table $V gdn 4 4096 16 )
  echo "[ncu delta 2x16384x8 $v]"; ( export $v; kernel_table $V delta 2 16384 8 )
done 2>&1 | tee $OUT/kernels.log
echo "total $(el)"
