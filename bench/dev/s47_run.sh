#!/bin/bash
# Session 47's device calls: session 46's six kernel commits (bench/dev/s46_kernels.patch) built here for sm_90a as
# build/i (librewy.so, test_cuda, variant_time; carry .carry/s47i.tar.xz) against main's build/m (.carry/s46a.tar.xz).
# Modes, in the order given:
#   err     the worst error ÷ MATH §10 bound of test_cuda --quick's cases with the fused reverse pass forced
#           (REWY_CUDA_REV_WS=1, where session 46's bf16 P = Aᵀ R̄ runs), m against i: the five worst ReWY cases of each
#   accept  issue 24's benchmark of build/i (bench_api.py through s41_api.sh: FlashQLA compiled a process a shape, then
#           rewy against FlashQLA, GDN and DeltaNet, the six shapes); carry .peers too. Beside FlashQLA's compile: test_cuda
#           --quick and memcheck of --v128 at the defaults, then Nsight's source counters of kkt_fast at GDN (8,2048,32)
#           ($OUT/kkt_fast.csv, .txt; for ncu_sass_summary.py --lines against build/i's kkt_inverse.o here)
#   prof    that profile of kkt_fast alone
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
[ -x build/m/tests/cuda/test_cuda ] || [ ! -f .carry/s46a.tar.xz ] || tar xJf .carry/s46a.tar.xz
[ -x build/i/tests/cuda/test_cuda ] || tar xJf .carry/s47i.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for mode in "$@"; do case $mode in
err)
  for b in m i; do
    [ -x build/$b/tests/cuda/test_cuda ] || continue
    REWY_CUDA_REV_WS=1 timeout 60 build/$b/tests/cuda/test_cuda --quick > $OUT/err_$b.log 2>&1
    echo "[$b] rc=$? $(tail -1 $OUT/err_$b.log); worst ReWY err/tol:"
    awk '/worst err\/tol/ {for (i = 1; i < NF; i++) if ($i == "ReWY") r = $(i + 1); print r, $0}' $OUT/err_$b.log |
      sort -rn | head -5 | cut -c1-150
  done ;;
accept)
  B=build/i TC_LIMIT=90 bash -c 'source bench/dev/device_helpers.sh; t0='$t0'; oracle -- --quick
    SAN_LIMIT=120 san memcheck -- --v128; OUT='$OUT' source_counters kkt_fast_kernel kkt_fast -- $B/bench/dev/variant_time gdn 8 2048 32 once' \
    > $OUT/checks.log 2>&1 &
  export OUT REWY_LIB=$PWD/build/i/librewy.so WARM_PEERS=flashqla IMPLS=rewy,flashqla WARM_LIMIT=280 API_LIMIT=${API_LIMIT:-220}
  bash bench/dev/s41_api.sh warm; wait; cat $OUT/checks.log
  bash bench/dev/s41_api.sh run
  rm -rf $OUT/warm $OUT/err_*.log $OUT/*.ncu-rep ;; # (their lines are in run.log; at most 8 files come back)
prof) # kkt_fast's source counters alone (accept's third check)
  B=build/i source_counters kkt_fast_kernel kkt_fast -- build/i/bench/dev/variant_time gdn 8 2048 32 once ;;
esac; done
echo "done $(el)"
