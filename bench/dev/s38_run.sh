#!/bin/bash
# Session 38's device script: the warp-specialized pullback (src/cuda/pullback_ws.cu, REWY_CUDA_PB_WS=1) against
# pullback_fast (the default). One sm_90a build (build/d: test_cuda, variant_time) from .carry/s38.tar.xz if carried
# (built here from the same tree), else built there. Modes, in the order given (output also in $OUT/run.log):
#   smoke  one small forced call (a hang ends at its timeout, and the script), then test_cuda --v128 forced
#   oracle test_cuda with the kernel forced: the whole matrix, time windows (--quick), beside the ws pair (--v128)
#   time   GPU-bound ms fwd/bwd, default | forced, GDN and DeltaNet at $SHAPES; the pullback kernels' device time at
#          GDN (8,2048,32) and (4,4096,16) both ways
#   san    racecheck and memcheck of test_cuda --v128 with the kernel forced
#   dflt   test_cuda at the defaults (the plan checks)
#   final  the kernel as the default (K = V = 128): test_cuda at the defaults (whole matrix), with pullback_fast
#          (REWY_CUDA_PB_WS=0, --v128) and with time windows (--quick); racecheck and memcheck at the defaults and racecheck
#          with REWY_CUDA_PB_WS=0 (--v128); GPU-bound ms default | REWY_CUDA_PB_WS=0 at $SHAPES; each kernel's device
#          time in one call at GDN (8,2048,32) and (4,4096,16)
#   ab     GPU-bound ms of the backward forced, this build against build/old's variant_time (.carry/old.tar.xz, an earlier
#          form of the kernel), GDN and DeltaNet at $SHAPES, and the pullback's device time at GDN (8,2048,32) both
#   ab2    build/v (.carry/v.tar.xz: a variant built here on a dev branch) against this build: GPU-bound ms at $SHAPES
#          (GDN; DeltaNet at the first three), then build/v's test_cuda (whole matrix; windows --quick), racecheck
#          and memcheck (--v128)
#   profile Nsight's source counters of the kernel forced at GDN (8,2048,32): $OUT/pb.csv (per SASS instruction),
#          $OUT/pb.txt (sections)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1
B=build/d
source bench/dev/device_helpers.sh
device_build .carry/s38.tar.xz "$@"
F=REWY_CUDA_PB_WS=1 VT=$B/bench/dev/variant_time
for mode in "$@"; do case $mode in
smoke)
  smoke $F ;;
oracle)
  oracle $F; oracle REWY_CUDA_WIN=3 $F -- --quick; oracle REWY_CUDA_CHAIN_WS=1 $F -- --v128 ;;
time)
  echo "| op | shape | default | $F |" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    row $op $s "$VT" "$F $VT" | tee -a /tmp/tab.txt
  done; done
  for sh in "8 2048 32" "4 4096 16"; do for e in REWY_CUDA_PB_WS=0 $F; do echo "[kernels gdn $sh $e]"
    ( export $e; kernel_table $VT gdn $sh ) | grep -i pullback
  done; done
  cat /tmp/tab.txt ;;
san)
  san racecheck $F -- --v128; san memcheck $F -- --v128 ;;
dflt)
  oracle -- ;;
final)
  F0=REWY_CUDA_PB_WS=0
  oracle --; oracle $F0 -- --v128; oracle REWY_CUDA_WIN=3 -- --quick
  san racecheck -- --v128; san memcheck -- --v128; san racecheck $F0 -- --v128
  echo "| op | shape | default | $F0 |" > /tmp/tab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    row $op $s "$VT" "$F0 $VT" | tee -a /tmp/tab.txt
  done; done
  for sh in "8 2048 32" "4 4096 16"; do echo "[kernels gdn $sh]"
    kernel_table $VT gdn $sh | kernel_sums | head -9
  done
  cat /tmp/tab.txt ;;
ab)
  tar xJf .carry/old.tar.xz
  echo "| op | shape | old | new |" > /tmp/ab.txt
  for op in gdn delta; do for s in ${SHAPES:-$SUITE_SHAPES}; do
    row $op $s "$F build/old/variant_time" "$F $VT" | tee -a /tmp/ab.txt
  done; done
  for t in build/old/variant_time $VT; do echo "[kernels gdn 8 2048 32 $t]"
    ( export $F; kernel_table $t gdn 8 2048 32 ) | grep -i pullback
  done
  cat /tmp/ab.txt ;;
ab2)
  tar xJf .carry/v.tar.xz
  echo "| op | shape | this build | build/v |" > /tmp/ab.txt
  for s in ${SHAPES:-$SUITE_SHAPES} delta:8x2048x32 delta:16x1024x16 delta:4x4096x16; do
    op=gdn; [ "${s%%:*}" = delta ] && { op=delta; s=${s#*:}; }
    row $op $s "$VT" build/v/bench/dev/variant_time | tee -a /tmp/ab.txt
  done
  TB=build/v oracle --; TB=build/v oracle REWY_CUDA_WIN=3 -- --quick
  TB=build/v san racecheck -- --v128; TB=build/v san memcheck -- --v128
  cat /tmp/ab.txt ;;
profile)
  source_counters pullback_ws pb $F -- $VT gdn 8 2048 32 once ;;
esac; done
echo "total $(el)"
