#!/bin/bash
# Session 41's kernel A/B: the forward's kkt (kkt_fast_kernel without C_q) at three and four blocks an SM, and with its
# eight warps all forming L. Builds made here and carried in .carry/s41k.tar.xz (variant_time of build/d: main, three
# blocks; build/k4, k5: four, five; build/k4s: four with the split, and its test_cuda). Modes, in the order given:
#   time    GPU-bound forward ms (variant_time) of each build at the large shapes, GDN and DeltaNet
#   kern    kkt_fast_kernel's device time (ncu) of each build at GDN (8,2048,32)
#   oracle  test_cuda of build/k4s: the whole matrix at the defaults
# and for dev/rv-r-on-chip (the fused reverse pass forming R from S_c; .carry/s41r.tar.xz: build/d's variant_time
# (main) and build/r's test_cuda and variant_time):
#   rv_oracle  test_cuda of build/r: the whole matrix, and segments of 2 chunks (--quick)
#   rv_san     racecheck and memcheck of build/r's test_cuda --v128, at the defaults and with segments of 2
#   rv_time    GPU-bound ms, main | candidate: the large grids at the defaults, the long shapes with segments
#   rv_kern    reverse_ws_kernel's and the recompute's device time (ncu), main | candidate, GDN (8,2048,32)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=build/k4s
source bench/dev/device_helpers.sh
case "${1:-}" in rv_*) B=build/r; [ -x $B/tests/cuda/test_cuda ] || tar xJf .carry/s41r.tar.xz ;;
*) [ -x $B/tests/cuda/test_cuda ] || tar xJf .carry/s41k.tar.xz ;; esac
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
rv_oracle)
  TC_LIMIT=200 oracle -- ; oracle REWY_CUDA_SEG=2 -- --quick ;;
rv_san)
  SAN_LIMIT=200 san racecheck -- --v128; san memcheck -- --v128; SAN_LIMIT=200 san racecheck REWY_CUDA_SEG=2 -- --v128 ;;
rv_time)
  for op in gdn delta; do
    for s in 8x2048x32 16x1024x16; do
      echo "| $op | $s | $(gb build/d/bench/dev/variant_time $op ${s//x/ }) | $(gb build/r/bench/dev/variant_time $op ${s//x/ }) |"; done
    for sl in 1x8192x16:16 2x16384x8:32; do IFS=: read s l <<< "$sl"
      echo "| $op | $s seg $l | $(gb REWY_CUDA_SEG=$l build/d/bench/dev/variant_time $op ${s//x/ }) | $(gb REWY_CUDA_SEG=$l build/r/bench/dev/variant_time $op ${s//x/ }) |"; done
  done ;;
rv_kern)
  for b in d r; do echo "[$b]"; kernel_table build/$b/bench/dev/variant_time gdn 8 2048 32 | grep -E "reverse_ws|state_scan"; done ;;
esac; done
echo "done $(el)"
