#!/bin/bash
# Session 23, second call: the forward chain's width. s23_fwdchain.sh showed the plan's 32-column blocks at (4,4096,16)
# (128 64-column blocks were fewer than the 132 SMs) taking 3.7 µs a step, and 16-column blocks 1.7 µs with one block
# per SM: the step looks bound by each block's K and W tile reads from L2, as the scans were (common.cuh, scan_bv).
# Forward device time at 32 and 64 columns, and ncu per kernel.
source "$(dirname "$0")/carried_bins.sh"
V=$B/bench/dev/variant_time
for op in gdn delta; do
  for sh in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
    for v in REWY_CUDA_FWD_CHAIN=16 REWY_CUDA_FWD_CHAIN=32 REWY_CUDA_FWD_CHAIN=64; do
      echo "[$op $sh $v] $(env $v timeout 60 $V $op $sh | grep forward)"
    done
  done
done 2>&1 | tee $OUT/width.log
for sh in "4 4096 16" "1 8192 16" "8 2048 32"; do
  for v in REWY_CUDA_FWD_CHAIN=0 REWY_CUDA_FWD_CHAIN=16 REWY_CUDA_FWD_CHAIN=64; do
    echo "[ncu gdn $sh $v]"; ( export $v; kernel_table $V gdn $sh | head -4 )
  done
done 2>&1 | tee $OUT/kernels.log
echo "total $(el)"
