#!/bin/bash
# Session 39's device script: the fused reverse pass (src/cuda/reverse_ws.cu: the reverse scan and the warp-specialized
# pullback in one kernel; REWY_CUDA_REV_WS=1 forces it wherever it applies, =0 keeps the two kernels). One sm_90a build
# (build/d: test_cuda, variant_time) from .carry/s39.tar.xz if carried (built here from the same tree), else built
# there. Modes, in the order given (output also in $OUT/run.log):
#   smoke  one small forced call (a hang ends at its timeout, and the script), then test_cuda --v128 forced
#   oracle test_cuda with the kernel forced (the whole matrix), then at the defaults
#   san    racecheck and memcheck of test_cuda --v128 with the kernel forced
#   time   GPU-bound ms fwd/bwd, default | REWY_CUDA_REV_WS=0, GDN and DeltaNet at $SHAPES; each kernel's device time in
#          one call at GDN (8,2048,32) both ways
#   ab2    build/v (.carry/v.tar.xz: a variant built here on a dev branch before this kernel) against this build without
#          the fused pass: GPU-bound ms, then build/v's test_cuda (whole matrix) and racecheck, memcheck (--v128)
#   final  test_cuda at the defaults (whole matrix: the test shapes' grids take the two kernels), forced, and with time
#          windows (--quick); racecheck and memcheck of --v128 forced; GPU-bound ms default | REWY_CUDA_REV_WS=0 at
#          $SHAPES; each kernel's device time at GDN (8,2048,32)
#   last   test_cuda forced (whole matrix: pullback_ws at its grouped heads, the fused pass elsewhere), racecheck and
#          memcheck forced (--v128), and GPU-bound ms at $SHAPES: default | REWY_CUDA_REV_WS=0 | build/old (.carry/old.tar.xz)
#   ab     GPU-bound ms at $SHAPES, build/old and build/pf (.carry/old.tar.xz, pf.tar.xz: variant_time of earlier forms of
#          the kernel, built here) against this build (AB_KERNELS=1: and the kernel's device time at GDN (8,2048,32) each)
#   profile Nsight's source counters of the kernel at GDN (8,2048,32): $OUT/rv.csv (per SASS instruction), $OUT/rv.txt
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1
B=build/d
source bench/dev/device_helpers.sh
device_build .carry/s39.tar.xz "$@"
F=REWY_CUDA_REV_WS=1 F0=REWY_CUDA_REV_WS=0 VT=$B/bench/dev/variant_time
for mode in "$@"; do case $mode in
smoke)
  smoke $F ;;
oracle)
  oracle $F; oracle -- ;;
san)
  san racecheck $F -- --v128; san memcheck $F -- --v128 ;;
time)
  echo "| op | shape | default | $F0 |" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    row $op $s "$VT" "$F0 $VT" | tee -a /tmp/tab.txt
  done; done
  for e in $F $F0; do echo "[kernels gdn 8 2048 32 $e]"
    ( export $e; kernel_table $VT gdn 8 2048 32 ) | kernel_sums | head -8
  done
  cat /tmp/tab.txt ;;
ab2)
  tar xJf .carry/v.tar.xz
  echo "| op | shape | this build, $F0 | build/v |" > /tmp/ab.txt
  for s in ${SHAPES:-$SUITE_SHAPES} delta:8x2048x32 delta:16x1024x16; do
    op=gdn; [ "${s%%:*}" = delta ] && { op=delta; s=${s#*:}; }
    row $op $s "$F0 $VT" build/v/bench/dev/variant_time | tee -a /tmp/ab.txt
  done
  TB=build/v oracle --; TB=build/v san racecheck -- --v128; TB=build/v san memcheck -- --v128
  cat /tmp/ab.txt ;;
final)
  oracle --; oracle $F; oracle REWY_CUDA_WIN=3 -- --quick
  san racecheck $F -- --v128; san memcheck $F -- --v128
  echo "| op | shape | default | $F0 |" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    row $op $s "$VT" "$F0 $VT" | tee -a /tmp/tab.txt
  done; done
  echo "[kernels gdn 8 2048 32]"; kernel_table $VT gdn 8 2048 32 | kernel_sums | head -6
  cat /tmp/tab.txt ;;
last)
  oracle $F; san racecheck $F -- --v128; san memcheck $F -- --v128
  tar xJf .carry/old.tar.xz
  echo "| op | shape | default | $F0 | build/old |" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    echo "| $op | $s | $(gb $VT $op ${s//x/ }) | $(gb $F0 $VT $op ${s//x/ }) | $(gb build/old/bench/dev/variant_time $op ${s//x/ }) |" | tee -a /tmp/tab.txt
  done; done
  cat /tmp/tab.txt ;;
ab)
  for t in old pf; do [ -f .carry/$t.tar.xz ] && tar xJf .carry/$t.tar.xz; done
  echo "| op | shape | build/old | build/pf | this build |" > /tmp/ab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    echo "| $op | $s | $(gb build/old/bench/dev/variant_time $op ${s//x/ }) | $(gb build/pf/bench/dev/variant_time $op ${s//x/ }) | $(gb $VT $op ${s//x/ }) |" | tee -a /tmp/ab.txt
  done; done
  [ -n "${AB_KERNELS:-}" ] && for t in build/old/bench/dev/variant_time build/pf/bench/dev/variant_time $VT; do
    echo "[kernels gdn 8 2048 32 $t]"; kernel_table $t gdn 8 2048 32 | grep reverse_ws
  done
  cat /tmp/ab.txt ;;
profile)
  source_counters reverse_ws rv -- $VT gdn 8 2048 32 once ;;
esac; done
echo "total $(el)"
