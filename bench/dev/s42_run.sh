#!/bin/bash
# Session 42's device calls. Carry .carry/s42b.tar.xz: variant_time and librewy.so of build/d (session 41's main) and of
# build/s (4715917, the code of dev/s42-next: main's segments by default, with their lean workspace and R formed in the
# fused pass under segments only, plus the forward's kkt at four blocks an SM and the combine by 16 columns), with
# build/s's test_cuda. Modes, in the order given:
#   quick   test_cuda --quick of build/s at the defaults, and with segments of 2 chunks
#   time    GPU-bound ms (fwd/bwd), main | seg-lean, through the C API (variant_time): the suite, GDN and DeltaNet
#   api     bench/bench_api.py with rewy alone (its public Python functions), main's library then seg-lean's: GPU-bound
#           ms, per-call medians and peak backward memory over the suite
#   kern    each kernel's device time (ncu) of build/s at GDN (1,8192,16) (segments)
#   oracle  test_cuda of build/s: the whole matrix at the defaults, then with segments of 2 chunks (--quick)
#   san     racecheck and memcheck of build/s's test_cuda --v128, at the defaults and with segments of 2; racecheck
#           with the warp-specialized forward (its kkt without C_q)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=build/s
source bench/dev/device_helpers.sh
[ -x build/s/tests/cuda/test_cuda ] || tar xJf .carry/s42b.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
VD=build/d/bench/dev/variant_time VS=build/s/bench/dev/variant_time
for mode in "$@"; do case $mode in
quick)
  TC_LIMIT=100 oracle -- --quick; TC_LIMIT=100 oracle REWY_CUDA_SEG=2 -- --quick ;;
time)
  for op in gdn delta; do for s in ${SUITE_SHAPES}; do row $op $s $VD $VS; done; done ;;
api)
  for b in d s; do
    REWY_LIBRARY=$PWD/build/$b/librewy.so PYTHONPATH=$PWD/python timeout 150 python3 bench/bench_api.py --impls rewy \
      --json $OUT/api_$b.jsonl > $OUT/api_$b.log 2>&1
    echo "[$b] rc=$? $(el)"; grep -vE "^\s*$" $OUT/api_$b.log | tail -32
  done ;;
kern)
  kernel_table $VS gdn 1 8192 16 | kernel_sums | head -12 ;;
oracle)
  TC_LIMIT=220 oracle -- ; TC_LIMIT=100 oracle REWY_CUDA_SEG=2 -- --quick ;;
san)
  for env in "" REWY_CUDA_SEG=2; do
    SAN_LIMIT=200 san racecheck $env -- --v128; SAN_LIMIT=120 san memcheck $env -- --v128
  done
  SAN_LIMIT=150 san racecheck REWY_CUDA_FWD_WS=1 -- --v128 ;;
esac; done
echo "done $(el)"
