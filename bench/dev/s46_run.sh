#!/bin/bash
# Session 46's device calls. Carry .carry/s46a.tar.xz (build/m: main 66fd20b's librewy.so, test_cuda, variant_time for
# sm_90a) and .carry/s46b.tar.xz (build/g: gexp by ex2.approx.ftz and reverse_ws's branch-free C_q mask and dv stores;
# build/d: that and reverse_ws's P = Aᵀ R̄ in bf16), built here. Modes, in the order given:
#   time   GPU-bound ms (fwd/bwd, variant_time) of m, g and d at the large grids and the segments' shapes, GDN and
#          DeltaNet; each kernel's time at GDN (8,2048,32) for m and d
#   check  test_cuda --quick of d at the defaults, with segments of 2 chunks (reverse_ws's RF form) and with the fused
#          pass forced wherever it applies; g's --quick
#   san    racecheck and memcheck of d's --v128, with and without segments of 2 chunks
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
for c in s46a s46b; do [ -x build/${c/s46a/m}/tests/cuda/test_cuda ] || tar xJf .carry/$c.tar.xz; done
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
vt() { echo build/$1/bench/dev/variant_time; }
for mode in "$@"; do case $mode in
time)
  echo "| op | shape | m fwd/bwd | g | d |"
  for op in gdn delta; do for sh in ${SHAPES:-8x2048x32 16x1024x16 1x8192x16 2x16384x8 4x4096x16}; do
    echo "| $op | $sh | $(gb $(vt m) $op ${sh//x/ }) | $(gb $(vt g) $op ${sh//x/ }) | $(gb $(vt d) $op ${sh//x/ }) |"
  done; done
  for b in m d; do echo "kernels [$b]"; kernel_table $(vt $b) gdn 8 2048 32 | kernel_sums; done ;;
check)
  B=build/d; TC_LIMIT=90 oracle -- --quick; TC_LIMIT=90 oracle REWY_CUDA_SEG=2 -- --quick
  TC_LIMIT=90 oracle REWY_CUDA_REV_WS=1 -- --quick; TB=build/g TC_LIMIT=90 oracle -- --quick ;;
san)
  B=build/d; SAN_LIMIT=140 san racecheck -- --v128; SAN_LIMIT=140 san racecheck REWY_CUDA_SEG=2 -- --v128
  SAN_LIMIT=100 san memcheck REWY_CUDA_REV_WS=1 -- --v128; SAN_LIMIT=100 san memcheck REWY_CUDA_SEG=2 -- --v128 ;;
esac; done
echo "done $(el)"
