#!/bin/bash
# Session 45's device calls. Carry .carry/s45a.tar.xz (build/m: main's librewy.so, test_cuda, variant_time for sm_90a,
# built here) and, for accept, .peers (FlashQLA without z3's unused data: 38 MB). Modes, in the order given:
#   accept  test_cuda of main on the GPU (--quick at the defaults and with segments of 2 chunks; racecheck of --v128 with
#           them) while FlashQLA compiles (a process a shape); then issue 24's benchmark (s41_api.sh run, rewy against
#           FlashQLA; FLA's numbers stand from session 41), then grid4
#   grid4   GPU-bound ms (fwd/bwd) at (4,4096,16) under forced plans: time windows (the default), segments of 32 and 16
#           chunks, the fused reverse pass without windows; GDN and DeltaNet
#   prof    Nsight Compute's source counters of one launch of each of PROF_KERNELS (default reverse_ws; chain_ws too)
#           at GDN (8,2048,32) (variant_time's `once`; device_helpers.sh's source_counters): the per-SASS tables in $OUT
#           (KERNEL.csv), their summaries (bench/dev/ncu_sass_summary.py) printed
#   rec     (carry .carry/s45c.tar.xz, CARRY=s45c: build/n, chain_ws.cu's recompute form behind that build's test-only
#           switch REWY_CUDA_REC_WS=1, and build/o with it on by default; the switch was removed once the form won)
#           test_cuda --quick with the form over the fused reverse pass (REWY_CUDA_REV_WS=1) and over segments of 2
#           chunks; GPU-bound ms (fwd/bwd) without and with it at the fused pass's shapes; each kernel's time at GDN
#           (8,2048,32) both ways; racecheck and memcheck of --v128 with it; build/o's --quick at the defaults and with
#           REWY_CUDA_REV_WS=1; the whole matrix last (FULL_LIMIT). REC_LEAN=1: no kernel times, no memcheck;
#           REC_SHAPES: the timed shapes
#   other modes: bench/dev/s44_run.sh's, with B
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
# B: the build in the carried archive (build/m in s45a for accept; build/n in s45c for rec and prof)
B=${B:-build/n}
source bench/dev/device_helpers.sh
unpack_bins ${CARRY:-s45a}
for mode in "$@"; do case $mode in
accept)
  B=$B TC_LIMIT=90 bash -c 'source bench/dev/device_helpers.sh; t0='$t0'; oracle -- --quick; oracle REWY_CUDA_SEG=2 -- --quick
    SAN_LIMIT=150 san racecheck REWY_CUDA_SEG=2 -- --v128' > $OUT/checks.log 2>&1 &
  export OUT REWY_LIB=$PWD/$B/librewy.so WARM_PEERS=flashqla IMPLS=rewy,flashqla WARM_LIMIT=280 API_LIMIT=${API_LIMIT:-200}
  bash bench/dev/s41_api.sh warm; wait; cat $OUT/checks.log
  bash bench/dev/s41_api.sh run
  B=$B bash bench/dev/s44_run.sh grid4 ;;
rec)
  R="REWY_CUDA_REC_WS=1 REWY_CUDA_REV_WS=1"
  TC_LIMIT=100 oracle $R -- --quick; TC_LIMIT=100 oracle REWY_CUDA_REC_WS=1 REWY_CUDA_SEG=2 -- --quick
  for op in gdn delta; do for sh in ${REC_SHAPES:-8x2048x32 16x1024x16 1x8192x16 2x16384x8}; do
    echo "| $op | $sh | $(gb $VT $op ${sh//x/ }) | $(gb env REWY_CUDA_REC_WS=1 $VT $op ${sh//x/ }) |"
  done; done
  [ "${REC_LEAN:-0}" = 1 ] ||
    for e in "" REWY_CUDA_REC_WS=1; do echo "kernels [$e]"; kernel_table env $e $VT gdn 8 2048 32 | kernel_sums; done
  SAN_LIMIT=100 san racecheck $R -- --v128; [ "${REC_LEAN:-0}" = 1 ] || SAN_LIMIT=70 san memcheck $R -- --v128
  # build/o (s45c): the same tree with the recompute form on by default where the fused pass runs under policy R
  if [ -x build/o/tests/cuda/test_cuda ]; then TB=build/o TC_LIMIT=60 oracle -- --quick; TB=build/o TC_LIMIT=60 oracle REWY_CUDA_REV_WS=1 -- --quick; fi
  [ "${FULL_LIMIT:-0}" = 0 ] || TC_LIMIT=$FULL_LIMIT oracle $R -- ;;
prof)
  for k in ${PROF_KERNELS:-reverse_ws}; do
    source_counters "${k}_kernel" $k -- $VT gdn 8 2048 32 once
    python3 bench/dev/ncu_sass_summary.py $OUT/$k.csv 15 2>&1 | head -30 | cut -c1-170
  done ;;
*) B=$B CARRY=${CARRY:-s45a} bash bench/dev/s44_run.sh $mode ;;
esac; done
echo "done $(el)"
