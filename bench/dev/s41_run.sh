#!/bin/bash
# Session 41's kernel A/B: the forward's kkt (kkt_fast_kernel without C_q) at three and four blocks an SM, and with its
# eight warps all forming L. Builds made here and carried in .carry/s41k.tar.xz (variant_time of build/d: main, three
# blocks; build/k4, k5: four, five; build/k4s: four with the split, and its test_cuda). Modes, in the order given:
#   time    GPU-bound forward ms (variant_time) of each build at the large shapes, GDN and DeltaNet
#   kern    kkt_fast_kernel's device time (ncu) of each build at GDN (8,2048,32)
#   oracle  test_cuda of build/k4s: the whole matrix at the defaults
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=build/k4s
source bench/dev/device_helpers.sh
[ -x $B/tests/cuda/test_cuda ] || tar xJf .carry/s41k.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILDS=${BUILDS:-d k4 k5 k4s}
for mode in "$@"; do case $mode in
time)
  for op in gdn delta; do for s in 8x2048x32 16x1024x16 4x4096x16 1x8192x16; do
    line="| $op | $s |"
    for b in $BUILDS; do line="$line $(gb build/$b/bench/dev/variant_time $op ${s//x/ }) |"; done
    echo "$line"
  done; done ;;
kern)
  for b in $BUILDS; do echo "[$b] $(kernel_table build/$b/bench/dev/variant_time gdn 8 2048 32 | grep kkt_fast)"; done ;;
oracle)
  TC_LIMIT=200 oracle -- ;;
esac; done
echo "done $(el)"
