#!/bin/bash
# Session 36: the wgmma pullback (pullback_wg.cu, REWY_CUDA_PB_WG=1) against pullback_fast (the default) on the device.
# The kernel lost and was deleted (docs/PERF.md, session 36): run this from a checkout of 9cd3bf5 (its second form; the
# first form, with 32-column slabs, is f1c90eb). One build (sm_90a) for both: from .carry/s36.tar.xz if carried
# (build/d: librewy.so, test_cuda, variant_time), else built here. Modes, the most valuable first (output also in $OUT/run.log):
#   oracle  test_cuda with the kernel forced (whole matrix), then with time windows (--quick) and with the ws pair beside
#           it (--v128)
#   time    GPU-bound ms, forward / backward, default | forced, GDN and DeltaNet at SHAPES; ncu's per-kernel table of
#           one call at GDN (8,2048,32) both ways
#   san     memcheck and racecheck of test_cuda --quick with the kernel forced
#   dflt    test_cuda at the default (the plan checks)
#   profile Nsight source counters of the kernel at GDN (8,2048,32)
#   probe   build and run bench/dev/wgmma_tma_probe.cu (alone, `bash bench/dev/s36_run.sh probe` builds no library)
#   epi     (main after 6eb213b) chain_ws.cu's epilogue changes: oracle with both ws kernels forced, GPU-bound ms
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1
B=build/d
source bench/dev/device_helpers.sh
device_build .carry/s36.tar.xz "$@"
F=REWY_CUDA_PB_WG=1
for mode in ${@:-oracle time san}; do case $mode in
oracle)
  oracle $F; oracle REWY_CUDA_WIN=3 $F -- --quick; oracle REWY_CUDA_CHAIN_WS=1 $F -- --v128 ;;
time)
  echo "GPU-bound ms fwd/bwd: default | $F" > /tmp/tab.txt
  for rep in $(seq ${REPS:-1}); do for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    echo "| $op | $s | $(gb $B/bench/dev/variant_time $op ${s//x/ }) | $(gb $F $B/bench/dev/variant_time $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done; done
  for e in "" $F; do echo "[ncu gdn 8x2048x32 $e]"
    ( [ -n "$e" ] && export $e; kernel_table $B/bench/dev/variant_time gdn 8 2048 32 ) | awk '{k = substr($0, index($0, "us") + 4);
      sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
      END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn | head -8
  done
  cat /tmp/tab.txt ;;
san)
  for tool in memcheck racecheck; do
    env $F REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-120} compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/tests/cuda/test_cuda --quick > /tmp/cs.log 2>&1
    echo "$tool [$F] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
    grep -E "Error|Race|Hazard" /tmp/cs.log | head -4
  done ;;
dflt)
  oracle -- ;;
epi) # the ws blocks with V's and U's fragments loaded during the product and C_q's epilogue without branches: the
  # oracle with both ws kernels forced (--v128), GPU-bound ms at the shapes they take by default, then the whole
  # matrix with both forced (against session 36's earlier calls' default numbers on the same kind of card)
  W="REWY_CUDA_FWD_WS=1 REWY_CUDA_CHAIN_WS=1"
  oracle $W -- --v128
  for s in gdn:8x2048x32 gdn:16x1024x16 gdn:4x4096x16 delta:8x2048x32 delta:16x1024x16 delta:4x4096x16; do
    echo "| ${s%%:*} | ${s#*:} | $(gb $B/bench/dev/variant_time ${s%%:*} $(echo ${s#*:} | tr x ' ')) |"
  done
  oracle $W ;;
probe) # bench/dev/wgmma_tma_probe.cu: swizzled tensor-map tiles into wgmma, and a producer-warp ring's bandwidth
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_tma_probe bench/dev/wgmma_tma_probe.cu 2>&1 |
    grep -v C75; timeout 60 /tmp/wgmma_tma_probe ;;
profile) # Nsight source counters of the kernel at GDN (8,2048,32): $OUT/pw.txt (sections), pw.cuda.csv, pw.csv
  timeout 240 ncu --clock-control none -k "regex:pullback_wg" -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats \
    --section Occupancy -o /tmp/pw -f env $F $B/bench/dev/variant_time gdn 8 2048 32 once > /dev/null 2>&1
  ncu -i /tmp/pw.ncu-rep --page source --csv --print-source cuda > $OUT/pw.cuda.csv 2>&1
  ncu -i /tmp/pw.ncu-rep --page source --csv --print-source sass > $OUT/pw.csv 2>&1
  ncu -i /tmp/pw.ncu-rep > $OUT/pw.txt 2>&1
  grep -E "Duration|Issued Warp|No Eligible|Registers Per|Achieved Occ|Throughput|Stall" $OUT/pw.txt | head -30 ;;
esac; done
echo "total $(el)"
