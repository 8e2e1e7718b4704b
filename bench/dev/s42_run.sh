#!/bin/bash
# Session 42's device calls. Carry .carry/s42.tar.xz: variant_time of build/d (main), of build/k4s (dev/kkt-occupancy:
# the forward's kkt at four blocks an SM, all eight warps forming L) and of build/s (dev/seg-lean: the fused reverse
# pass forms R itself; segments by default where their rule fires, with their lean workspace), with the test_cuda of
# k4s and s. Modes, in the order given:
#   quick    test_cuda --quick of build/s at the defaults, and with segments of 2 chunks
#   time     GPU-bound ms (fwd/bwd), main | seg-lean: the suite's large grids and long shapes, GDN and DeltaNet
#   kkt      GPU-bound ms, main | kkt-occupancy: GDN at the four large shapes; then kkt_fast_kernel's device time (ncu)
#   kern     each kernel's device time (ncu) of build/s at GDN (1,8192,16) (segments) and (8,2048,32)
#   oracle   test_cuda of build/s: the whole matrix at the defaults, then with segments of 2 chunks (--quick)
#   san      racecheck and memcheck of build/s's test_cuda --v128, at the defaults and with segments of 2
#   koracle  test_cuda of build/k4s: the whole matrix
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=build/s
source bench/dev/device_helpers.sh
[ -x build/s/tests/cuda/test_cuda ] || tar xJf .carry/s42.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
VD=build/d/bench/dev/variant_time VS=build/s/bench/dev/variant_time VK=build/k4s/bench/dev/variant_time
for mode in "$@"; do case $mode in
quick)
  TC_LIMIT=100 oracle -- --quick; TC_LIMIT=100 oracle REWY_CUDA_SEG=2 -- --quick ;;
time)
  for op in gdn delta; do for s in 1x8192x16 2x16384x8 4x4096x16 8x2048x32 16x1024x16 1x2048x4; do
    row $op $s $VD $VS; done; done ;;
kkt)
  for s in 8x2048x32 16x1024x16 4x4096x16 1x8192x16; do row gdn $s $VD $VK; done
  for b in d k4s; do echo "[$b] $(kernel_table build/$b/bench/dev/variant_time gdn 8 2048 32 | grep kkt_fast)"; done ;;
kern)
  for s in "1 8192 16" "8 2048 32"; do echo "[s $s]"; kernel_table $VS gdn $s | kernel_sums | head -12; done ;;
oracle)
  TC_LIMIT=220 oracle -- ; TC_LIMIT=100 oracle REWY_CUDA_SEG=2 -- --quick ;;
san)
  SAN_LIMIT=200 san racecheck -- --v128; SAN_LIMIT=120 san memcheck -- --v128; SAN_LIMIT=200 san racecheck REWY_CUDA_SEG=2 -- --v128
  SAN_LIMIT=120 san memcheck REWY_CUDA_SEG=2 -- --v128 ;;
koracle)
  TB=build/k4s TC_LIMIT=220 oracle -- ;;
esac; done
echo "done $(el)"
