#!/bin/bash
# Session 48's device calls. Build for sm_90a made here (librewy.so, test_cuda, variant_time), carried:
#   .carry/s48x.tar.xz  build/x: main b9a0aa7 (session 47's windowed fused pass and 64-column chain_ws landed; policy R's
#                       fused pass forms R wherever it runs); session 48's check, bench, epi ran it (since deleted)
#   .carry/s48y.tar.xz  build/y: build/x's with the masked decay as one helper (ws.cuh's ws_masked_decay): main's src
#                       since 41eb1a5
# check and bench run build/$AB (AB=y by default; AB=x as session 48 ran them).
#   .carry/s48z.tar.xz  build/z: build/y's with session 48's segt patch (landed in session 49 as 3d49768): the
#                       backward's segment maps from the forward (its T saved, read transposed by the combine; the
#                       backward's homogeneous walks return at once). Not run in session 48 (no device time left)
#   .carry/s48p.tar.xz  build/p: main's (build/y's) with session 48's pair patch (landed in session 49 as a1c97a8): the
#                       fused pass as a pair of blocks a walk in time windows. Not run in session 48. Both patches
#                       apply together with `git am -3` (segt first)
# Modes, in the order given:
#   check  test_cuda --quick at the defaults and under each path the landed commits touch, racecheck of the fused pass in
#          windows; beside them (carry .peers) FlashQLA's kernels compiled for the suite, a process a shape
#          (s41_api.sh warm with WARM_PEERS=flashqla), for `bench` on the same warm machine
#   epi    build/y: test_cuda --quick where each of the helper's three callers runs, racecheck, GPU-bound ms of x and y
#   segt   build/z: test_cuda --quick with segments (the forward's maps, and without them: REWY_CUDA_FWD_WS=0), memcheck;
#          GPU-bound ms of y and z at the two shapes that take segments
#   pair   build/p: test_cuda --quick in windows (pairs by default there), forced both ways, and at the defaults;
#          racecheck and memcheck of --v128 in windows; GPU-bound ms of y and p at (4,4096,16) and (8,2048,32), and p
#          with REWY_CUDA_REV_PAIR=0; kernel times at (4,4096,16)
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
  if [ -f .peers/peers-site.tar.xz ]; then
    (OUT=$OUT/fq WARM_PEERS=flashqla bash bench/dev/s41_api.sh warm > /tmp/warm.log 2>&1; echo "warm rc=$?") &
    warm=$!
  fi
  export TB=build/$AB TC_LIMIT=80
  oracle -- --quick; oracle REWY_CUDA_WIN=2 -- --quick; oracle REWY_CUDA_SEG=2 -- --quick
  oracle REWY_CUDA_REV_WS=1 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0 -- --quick
  oracle REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128 -- --quick
  SAN_LIMIT=120 san racecheck REWY_CUDA_WIN=2 -- --v128
  unset TB
  echo "| op | shape | fwd/bwd GPU-bound ms |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32; do
    echo "| $op | $sh | $(gb build/$AB/bench/dev/variant_time $op ${sh//x/ }) |"; done; done
  # (wait for the warm-up's pid alone: a bare wait also waits for the log's tee, which ends with the script)
  [ -z "${warm:-}" ] || wait $warm; echo "checked $(el)" ;;
epi)
  [ -x build/y/tests/cuda/test_cuda ] || tar xJf .carry/s48y.tar.xz
  export TB=build/y TC_LIMIT=80
  oracle -- --quick; oracle REWY_CUDA_FWD_WS=1 -- --quick; oracle REWY_CUDA_REV_WS=1 -- --quick
  oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0 -- --quick; oracle REWY_CUDA_SEG=2 -- --quick
  SAN_LIMIT=100 san racecheck REWY_CUDA_REV_WS=1 REWY_CUDA_FWD_WS=1 -- --v128
  unset TB
  echo "| op | shape | x fwd/bwd | y fwd/bwd |"
  for op in gdn delta; do for sh in 8x2048x32 4x4096x16 16x1024x16; do a=${sh//x/ }
    echo "| $op | $sh | $(gb build/x/bench/dev/variant_time $op $a) | $(gb build/y/bench/dev/variant_time $op $a) |"
  done; done ;;
segt)
  for b in y z; do [ -x build/$b/tests/cuda/test_cuda ] || tar xJf .carry/s48$b.tar.xz; done
  export TB=build/z TC_LIMIT=40
  oracle REWY_CUDA_SEG=2 -- --quick; oracle REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0 -- --quick
  oracle REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1 -- --quick; oracle -- --quick
  echo "| op | shape | y fwd/bwd | z fwd/bwd |"
  for op in gdn delta; do for sh in 1x8192x16 2x16384x8; do a=${sh//x/ }
    echo "| $op | $sh | $(gb build/y/bench/dev/variant_time $op $a) | $(gb build/z/bench/dev/variant_time $op $a) |"
  done; done
  SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --quick
  unset TB ;;
pair)
  for b in y p; do [ -x build/$b/tests/cuda/test_cuda ] || tar xJf .carry/s48$b.tar.xz; done
  export TB=build/p TC_LIMIT=40
  oracle REWY_CUDA_WIN=2 -- --quick; oracle REWY_CUDA_WIN=1 REWY_CUDA_REV_PAIR=1 -- --quick
  oracle REWY_CUDA_WIN=3 -- --quick; oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_PAIR=0 -- --quick; oracle -- --quick
  SAN_LIMIT=100 san racecheck REWY_CUDA_WIN=2 -- --v128
  SAN_LIMIT=60 san memcheck REWY_CUDA_WIN=1 -- --v128
  unset TB
  echo "| op | shape | y fwd/bwd | p fwd/bwd | p, REV_PAIR=0 |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32; do a=${sh//x/ }
    echo "| $op | $sh | $(gb build/y/bench/dev/variant_time $op $a) | $(gb build/p/bench/dev/variant_time $op $a) | $(gb env REWY_CUDA_REV_PAIR=0 build/p/bench/dev/variant_time $op $a) |"
  done; done
  kernel_table build/p/bench/dev/variant_time gdn 4 4096 16 | kernel_sums ;;
bench)
  OPS=gdn,deltanet API_LIMIT=${API_LIMIT:-500} bash bench/dev/s41_api.sh run; rm -rf $OUT/warm $OUT/fq ;;
esac; done
echo "done $(el)"
