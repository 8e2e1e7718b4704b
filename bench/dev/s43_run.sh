#!/bin/bash
# Session 43's device calls. Carry .carry/s43a.tar.xz, for sm_90a: build/f (dev/fwd-seg's 4104a67: the forward's sequence
# split, Plan::fwd_seg) librewy.so and variant_time; build/g (03a5f16: and the combine's loads ahead of its products) the
# same and test_cuda. Or CARRY=s43b B=build/h F=build/g: .carry/s43b.tar.xz, build/h (51accd7: the maps T saved by the
# forward for the backward's combine, and the kkt of s42b's build/s) librewy.so, variant_time, test_cuda, and build/g's
# librewy.so and variant_time. With .carry/s42b.tar.xz too (session 42's build/s: dev/s42-next, the forward's kkt at four
# blocks an SM and the combine by 16 columns) the modes s42kern and s42san. Modes, in the order given:
#   oracle  test_cuda of $B: the whole matrix at the defaults; segments of 2 chunks (--quick), with the forward's
#           segments and (REWY_CUDA_FWD_WS=0) without them
#   time    GPU-bound ms (fwd/bwd) through the C API (variant_time): $B with the forward's segments off
#           (REWY_CUDA_FWD_WS=0: main's forward at the segments' shapes) | $F | $B, GDN and DeltaNet at
#           (1,8192,16), (2,16384,8); then the suite, GDN, $B
#   kern    each kernel's device time (ncu) of $B at GDN (1,8192,16) and (2,16384,8), forward and backward
#   san     racecheck and memcheck of test_cuda --v128 with segments of 2 chunks
#   s42kern each kernel's device time of build/s at GDN (8,2048,32) and (1,8192,16) (kkt, the combine by 16 columns)
#   s42san  racecheck of build/s's test_cuda --v128 with the warp-specialized forward (its kkt without C_q)
#   api     bench/bench_api.py --impls rewy with $B's library: GPU-bound ms, per-call medians, peak memory
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=${B:-build/g}; F=${F:-build/f}
source bench/dev/device_helpers.sh
unpack_bins ${CARRY:-s43a}
for mode in "$@"; do case $mode in
oracle)
  TC_LIMIT=150 oracle -- ; TC_LIMIT=100 oracle REWY_CUDA_SEG=2 -- --quick
  TC_LIMIT=100 oracle REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0 -- --quick ;;
time)
  for op in gdn delta; do for s in 1x8192x16 2x16384x8; do
    echo "| $op | $s | $(gb env REWY_CUDA_FWD_WS=0 $VT $op ${s//x/ }) | $(gb $F/bench/dev/variant_time $op ${s//x/ }) | $(gb $VT $op ${s//x/ }) |"
  done; done
  for s in ${SUITE_SHAPES}; do echo "| gdn | $s | $(gb $VT gdn ${s//x/ }) |"; done ;;
kern)
  for s in 1x8192x16 2x16384x8; do echo "[$s]"; kernel_table $VT gdn ${s//x/ } | kernel_sums | head -14; done ;;
san)
  SAN_LIMIT=200 san racecheck REWY_CUDA_SEG=2 -- --v128; SAN_LIMIT=150 san memcheck REWY_CUDA_SEG=2 -- --v128 ;;
s42kern)
  [ -x build/s/tests/cuda/test_cuda ] || tar xJf .carry/s42b.tar.xz
  for s in 8x2048x32 1x8192x16; do echo "[s42 $s]"; kernel_table build/s/bench/dev/variant_time gdn ${s//x/ } | kernel_sums | head -8; done ;;
s42san)
  [ -x build/s/tests/cuda/test_cuda ] || tar xJf .carry/s42b.tar.xz
  TB=build/s SAN_LIMIT=150 san racecheck REWY_CUDA_FWD_WS=1 -- --v128 ;;
api)
  REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python timeout 170 python3 bench/bench_api.py --impls rewy \
    --json $OUT/api_$(basename $B).jsonl > $OUT/api_$(basename $B).log 2>&1
  echo "api rc=$? $(el)"; grep -vE "^\s*$" $OUT/api_$(basename $B).log | tail -36 ;;
esac; done
echo "done $(el)"
