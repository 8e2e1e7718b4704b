#!/bin/bash
# Session 48's device calls. Build for sm_90a made here (librewy.so, test_cuda, variant_time), carried:
#   .carry/s48x.tar.xz  build/x: main b9a0aa7 (session 47's windowed fused pass and 64-column chain_ws landed; policy R's
#                       fused pass forms R wherever it runs); session 48's check, bench, epi ran it (since deleted)
#   .carry/s48y.tar.xz  build/y: build/x's with the masked decay as one helper (ws.cuh's ws_masked_decay): main's src
#                       since 41eb1a5
# check and bench run build/$AB (AB=y by default; AB=x as session 48 ran them).
#   (session 48's epi, segt and pair modes ran their builds x, z and p once; z's and p's patches landed in session 49,
#   whose bench/dev/s49_run.sh checked them, and the modes are gone: git log of this file)
# Modes, in the order given:
#   check  test_cuda --quick at the defaults and under each path the landed commits touch, racecheck of the fused pass in
#          windows; beside them (carry .peers) FlashQLA's kernels compiled for the suite, a process a shape
#          (s41_api.sh warm with WARM_PEERS=flashqla), for `bench` on the same warm machine
#   bench  issue 24's benchmark, rewy and FlashQLA (no FLA: its autotune does not fit this session's device time), GDN and
#          DeltaNet at the six shapes (s41_api.sh run)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
AB=${AB:-y}; [ -x build/$AB/tests/cuda/test_cuda ] || tar xJf .carry/s48$AB.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
export REWY_LIB=$PWD/build/$AB/librewy.so IMPLS=rewy,flashqla
for mode in "$@"; do case $mode in
check)
  warm_bg
  export TB=build/$AB TC_LIMIT=80
  oracle -- --quick; oracle REWY_CUDA_WIN=2 -- --quick; oracle REWY_CUDA_SEG=2 -- --quick
  oracle REWY_CUDA_REV_WS=1 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0 -- --quick
  oracle REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128 -- --quick
  SAN_LIMIT=120 san racecheck REWY_CUDA_WIN=2 -- --v128
  unset TB
  echo "| op | shape | fwd/bwd GPU-bound ms |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32; do
    echo "| $op | $sh | $(gb build/$AB/bench/dev/variant_time $op ${sh//x/ }) |"; done; done
  warm_wait; echo "checked $(el)" ;;
bench)
  OPS=gdn,deltanet API_LIMIT=${API_LIMIT:-500} bash bench/dev/s41_api.sh run; rm -rf $OUT/warm $OUT/fq ;;
esac; done
echo "done $(el)"
