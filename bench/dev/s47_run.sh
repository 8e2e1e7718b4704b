#!/bin/bash
# Session 47's device calls. Builds for sm_90a made here (librewy.so, test_cuda, variant_time), carried:
#   .carry/s47i.tar.xz  build/i: main with session 46's six kernel commits (16b539b … 9be4469; main's src since)
#   .carry/s47w.tar.xz  build/w: build/i's tree with bench/dev/s47_winrev.patch (`git am`; the branch dev/s47-winrev)
#   .carry/s46a.tar.xz  build/m: main 66fd20b, before those commits (session 46's; for err, where carried)
# Modes, in the order given:
#   err     the worst error ÷ MATH §10 bound of test_cuda --quick's cases with the fused reverse pass forced
#           (REWY_CUDA_REV_WS=1, where session 46's bf16 P = Aᵀ R̄ runs), m against i: the five worst ReWY cases of each
#   prof    Nsight's source counters of kkt_fast at GDN (8,2048,32) in build/i (device_helpers.sh's source_counters:
#           $OUT/kkt_fast.csv, .txt, for ncu_sass_summary.py --lines against build/i's kkt_inverse.o here)
#   winrev  the checks and times of bench/dev/s47_winrev.patch (carry .carry/s47w.tar.xz and s47i): the mode's comment
#   warm, bench  issue 24's whole benchmark with FLA and FlashQLA, in two calls on one warm machine (the modes' comment)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
[ -x build/m/tests/cuda/test_cuda ] || [ ! -f .carry/s46a.tar.xz ] || tar xJf .carry/s46a.tar.xz
[ -x build/i/tests/cuda/test_cuda ] || [ ! -f .carry/s47i.tar.xz ] || tar xJf .carry/s47i.tar.xz
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
winrev) # build/w (.carry/s47w.tar.xz): bench/dev/s47_winrev.patch on this commit: the fused pass inside the time windows;
  # chain_ws's 64-column value tile (the forward where the chain rule takes 64 columns, the recompute where two blocks a
  # walk fit one wave; REWY_CUDA_FWD_CHAIN=64 with REWY_CUDA_FWD_WS=1, REWY_CUDA_REC_VT=64/128 force them); the test-only
  # REWY_CUDA_REV_RF=1 (the fused pass forms R, the recompute stores S_c alone). test_cuda --quick under each; racecheck
  # and memcheck of --v128; GPU-bound ms of main (build/i) against it and its variants; kernel times
  [ -x build/w/tests/cuda/test_cuda ] || tar xJf .carry/s47w.tar.xz
  export TB=build/w TC_LIMIT=80
  oracle -- --quick; oracle REWY_CUDA_WIN=2 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128 -- --quick
  oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0 -- --quick; oracle REWY_CUDA_SEG=2 -- --quick
  oracle REWY_CUDA_SEG=2 REWY_CUDA_REC_VT=128 -- --quick; oracle REWY_CUDA_REV_RF=1 -- --quick
  oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_RF=1 -- --quick; oracle REWY_CUDA_FWD_WS=1 -- --quick
  oracle REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64 -- --quick; oracle REWY_CUDA_REV_WS=1 -- --quick
  oracle REWY_CUDA_REV_WS=1 REWY_CUDA_REC_VT=128 -- --quick
  SAN_LIMIT=100 san racecheck REWY_CUDA_WIN=2 -- --v128
  SAN_LIMIT=100 san racecheck REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64 -- --v128
  SAN_LIMIT=80 san memcheck REWY_CUDA_WIN=2 REWY_CUDA_REV_RF=1 -- --v128
  unset TB
  W=build/w/bench/dev/variant_time
  echo "| op | shape | main | this | its windows' pair (REV_WS=0) | R formed (REV_RF=1) | recompute at 128 (REC_VT=128) |"
  for op in gdn delta; do for sh in ${SHAPES:-4x4096x16 8x2048x32 16x1024x16 1x8192x16}; do
    a=${sh//x/ }
    echo "| $op | $sh | $(gb build/i/bench/dev/variant_time $op $a) | $(gb $W $op $a) | $(gb env REWY_CUDA_REV_WS=0 $W $op $a) | $(gb env REWY_CUDA_REV_RF=1 $W $op $a) | $(gb env REWY_CUDA_REC_VT=128 $W $op $a) |"
  done; done
  for e in "" REWY_CUDA_REV_RF=1; do echo "kernels (8,2048,32) [$e]"; kernel_table env $e $W gdn 8 2048 32 | kernel_sums; done
  echo "kernels (4,4096,16): main, this"; kernel_table build/i/bench/dev/variant_time gdn 4 4096 16 | kernel_sums
  kernel_table $W gdn 4 4096 16 | kernel_sums ;;
warm|bench) # issue 24's whole benchmark of build/$AB (default w) with FLA and FlashQLA: `warm` (every peer kernel
  # compiled, a process a shape, then FLA's autotune; about 9 minutes) in one call, `bench` in the next on the warm
  # machine (its caches in .fla-cache/). Carry .peers, .carry/e2e/fla.tar.xz (.ref/peer_fla.sh) and the build's archive
  AB=${AB:-w}; [ -x build/$AB/librewy.so ] || tar xJf .carry/s47$AB.tar.xz
  export OUT REWY_LIB=$PWD/build/$AB/librewy.so IMPLS=rewy,fla,flashqla
  if [ $mode = warm ]; then WARM_PEERS="flashqla fla" bash bench/dev/s41_api.sh warm
  else API_LIMIT=${API_LIMIT:-540} bash bench/dev/s41_api.sh run; rm -rf $OUT/warm; fi ;;
prof)
  B=build/i source_counters kkt_fast_kernel kkt_fast -- build/i/bench/dev/variant_time gdn 8 2048 32 once ;;
esac; done
echo "done $(el)"
