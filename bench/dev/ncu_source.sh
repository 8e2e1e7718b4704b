#!/bin/bash
# ncu_source.sh KERNEL_REGEX NAME [ops] [shape]: one launch of a rewy kernel under Nsight Compute with
# source counters; writes $OUT/NAME.csv (per-SASS-instruction table), $OUT/NAME.cuda.csv (per source line)
# and $OUT/NAME.txt (sections).
set -u
RB=${RB:-build/cuda-on}
ops=${3:-gdn}; shape=${4:-1x8192x16}
cmd=(env REWY_LIBRARY=$PWD/$RB/librewy.so python3 bench/bench_gpu.py --impl rewy --reps 1 --ops $ops --shapes $shape --profile=)
timeout 200 ncu --clock-control none -k "regex:$1" -c 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section LaunchStats --section Occupancy -o /tmp/$2 -f "${cmd[@]}" > /dev/null 2>&1
ncu -i /tmp/$2.ncu-rep --page source --csv --print-source sass > $OUT/$2.csv 2>&1
# the same counters per CUDA source line (the library is built with -lineinfo)
ncu -i /tmp/$2.ncu-rep --page source --csv --print-source cuda > $OUT/$2.cuda.csv 2>&1
ncu -i /tmp/$2.ncu-rep > $OUT/$2.txt 2>&1
echo "$2: $(wc -l < $OUT/$2.csv) sass rows"; grep -E "Duration|Issued Warp|No Eligible|Registers Per|Achieved Occ|Stall" $OUT/$2.txt | head -12
