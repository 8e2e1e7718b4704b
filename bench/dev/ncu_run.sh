#!/bin/bash
# ncu_run.sh: Nsight Compute sections for the rewy kernels on one shape (device only).
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"; cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build/devlibs
SHAPE=${1:-8x2048x32}
timeout 300 ncu --target-processes all -k regex:"kkt_inverse|state_scan|pullback" -c ${NCU_COUNT:-5} \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  env REWY_LIBRARY=$PWD/build/cuda-on/librewy.so python3 bench/bench_gpu.py --impl rewy --shapes $SHAPE --ops gdn --reps 1 --profile '' \
  > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "rewy_cuda::|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Block Limit|Dynamic Shared" "$OUT/ncu.txt" | cut -c1-150 | head -150
