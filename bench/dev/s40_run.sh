#!/bin/bash
# Session 40's device script: policy R's sequence split (src/cuda/segments.cu, MATH §11d; REWY_CUDA_SEG=n forces
# segments of n chunks where they apply, K = V = 128). One sm_90a build (build/d: test_cuda, variant_time) from
# .carry/s40.tar.xz if carried (built here from the same tree), else built there. Modes, in the order given (output
# also in $OUT/run.log):
#   smoke  one small call with segments of 2 chunks (a hang ends at its timeout, and the script), then test_cuda --v128
#   oracle test_cuda with segments forced: the whole matrix at 2 chunks, --quick at 1, at 2 with the fused pass off (the
#          windows one after the other), at 3 with the warp-specialized forward; then the defaults (--quick)
#   oracle_min  the first three of those
#   san    racecheck and memcheck of test_cuda --v128 with segments of 2 chunks
#   time   GPU-bound ms fwd/bwd at the long shapes: default | segments of $L1 | of $L2 chunks (per shape below)
#   kern   each kernel's device time at GDN (1,8192,16), default and with segments of 16 chunks
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1
B=build/d
source bench/dev/device_helpers.sh
device_build .carry/s40.tar.xz "$@"
VT=$B/bench/dev/variant_time
for mode in "$@"; do case $mode in
smoke)
  smoke REWY_CUDA_SEG=2 ;;
oracle|oracle_min)
  oracle REWY_CUDA_SEG=2; oracle REWY_CUDA_SEG=1 -- --quick; oracle REWY_CUDA_SEG=2 REWY_CUDA_REV_WS=0 -- --quick
  [ $mode = oracle ] && { oracle REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1 -- --quick; oracle -- --quick; } ;;
san)
  san racecheck REWY_CUDA_SEG=2 -- --v128; san memcheck REWY_CUDA_SEG=2 -- --v128 ;;
time)
  echo "| op | shape | default | segments a | segments b |" > /tmp/tab.txt
  for op in ${SEG_OPS:-gdn delta}; do for sl in ${SEG_SHAPES:-1x8192x16:16:8 2x16384x8:32:16 4x4096x16:32:16}; do
    IFS=: read s la lb <<< "$sl"
    echo "| $op | $s | $(gb $VT $op ${s//x/ }) | $la: $(gb REWY_CUDA_SEG=$la $VT $op ${s//x/ }) | $lb: $(gb REWY_CUDA_SEG=$lb $VT $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done
  cat /tmp/tab.txt ;;
kern)
  for e in REWY_CUDA_SEG=0 REWY_CUDA_SEG=16; do echo "[kernels gdn 1 8192 16 $e]"
    ( export $e; kernel_table $VT gdn 1 8192 16 ) | kernel_sums | head -12
  done ;;
esac; done
echo "done $(el)"
