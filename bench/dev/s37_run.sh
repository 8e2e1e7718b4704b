#!/bin/bash
# Session 37's device script. One sm_90a build (build/d: test_cuda, variant_time), from .carry/s37.tar.xz if carried
# (built here from the same tree), else built there, unless the modes are `probe` alone. Modes, in the order given (output also in $OUT/run.log):
#   probe  bench/dev/wgmma_tma_probe.cu: 128-B-swizzled tensor-map tiles into wgmma, and a producer warp's ring bandwidth
#   race   racecheck of both ws blocks forced (test_cuda --v128), then memcheck of the same
#   base   GPU-bound ms fwd/bwd of the defaults, GDN and DeltaNet at $SHAPES
#   oracle test_cuda at the defaults (the whole matrix), then with both ws blocks forced (--v128)
#   tma    the ws blocks' tensor copies (src/cuda/tma.cuh): oracle with both forced (whole matrix, then time windows
#          --quick), racecheck and memcheck (--v128), GPU-bound ms of the ws blocks' default shapes
#   where  GPU-bound ms fwd/bwd at $SHAPES, default and both ws blocks forced
#   p80    test_cuda of an sm_80-only build (compute_80 PTX, JIT at load; .carry/p80.tar.xz)
#   profile each kernel's time in one call, and Nsight's source counters of the ws blocks ($OUT/fwd.*, pair.*; the
#          per-line export is untried since session 37's, which wrote the source without counters)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1
B=build/d
source bench/dev/device_helpers.sh
device_build .carry/s37.tar.xz "$@"
W="REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1"
for mode in "$@"; do case $mode in
probe)
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_tma_probe bench/dev/wgmma_tma_probe.cu 2>&1 |
    grep -v C75; timeout 60 /tmp/wgmma_tma_probe ;;
race)
  san racecheck $W -- --v128; san memcheck $W -- --v128 ;;
base)
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    echo "| $op | $s | $(gb $B/bench/dev/variant_time $op ${s//x/ }) |"
  done; done ;;
oracle)
  oracle --; oracle $W -- --v128 ;;
tma)
  oracle $W; oracle REWY_CUDA_WIN=3 $W -- --quick; san racecheck $W -- --v128; san memcheck $W -- --v128
  for s in gdn:8x2048x32 gdn:16x1024x16 gdn:4x4096x16 delta:8x2048x32 delta:16x1024x16 delta:4x4096x16; do
    echo "| ${s%%:*} | ${s#*:} | $(gb $B/bench/dev/variant_time ${s%%:*} $(echo ${s#*:} | tr x ' ')) |"
  done ;;
p80) # the sm_80 code alone (build/p80: compute_80 PTX only, carried in .carry/p80.tar.xz, JIT-compiled for this GPU at
  # load): test_cuda takes the paths an A100 takes (no wgmma kernel runs)
  tar xJf .carry/p80.tar.xz
  timeout ${P80_LIMIT:-300} build/p80/tests/cuda/test_cuda > /tmp/p80.log 2>&1
  echo "test_cuda [sm_80 PTX] rc=$? $(tail -1 /tmp/p80.log) $(el)"; grep -E "FAIL" /tmp/p80.log | head -6 ;;
profile) # where the ws blocks' time goes now: each kernel's device time in one forward and backward (GDN (8,2048,32) and
  # (4,4096,16)), then Nsight's source counters of the forward block at (8,2048,32) and the pair at (4,4096,16):
  # $OUT/fwd.csv, pair.csv (per SASS instruction), fwd.txt, pair.txt (sections)
  for sh in "8 2048 32" "4 4096 16"; do echo "[kernels gdn $sh]"
    kernel_table $B/bench/dev/variant_time gdn $sh | kernel_sums | head -9
  done
  for x in "fwd chain_ws_kernel 8 2048 32" "pair chain_pair_ws_kernel 4 4096 16"; do set -- $x
    timeout 200 ncu --clock-control none -k "regex:$2" -c 1 --section SourceCounters --section WarpStateStats \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats \
      --section Occupancy -o /tmp/$1 -f $B/bench/dev/variant_time gdn $3 $4 $5 once > /dev/null 2>&1
    # per SASS instruction with its source line (session 37's per-CUDA-line export came back without counters)
    ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass > $OUT/$1.csv 2>&1
    ncu -i /tmp/$1.ncu-rep > $OUT/$1.txt 2>&1
    echo "[$1] $(el)"; grep -E "Duration|Issued Warp|No Eligible|Registers Per|Throughput" $OUT/$1.txt | head -10
  done ;;
where) # where the ws blocks win now: GPU-bound ms fwd/bwd, default | both forced, at $SHAPES
  echo "| op | shape | default | ws forced |"
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    echo "| $op | $s | $(gb $B/bench/dev/variant_time $op ${s//x/ }) | $(gb $W $B/bench/dev/variant_time $op ${s//x/ }) |"
  done; done ;;
esac; done
echo "total $(el)"
