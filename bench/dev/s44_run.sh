#!/bin/bash
# Session 44's device calls. Carry .carry/s44b.tar.xz (or s44a), for sm_90a: build/i (dev/fwd-seg after session 43's mend: the
# maps T saved by the forward for the backward's combine) librewy.so, variant_time, test_cuda; build/g (session 43's
# 03a5f16, main's kernels before the kkt merge) variant_time as the baseline. Modes, in the order given:
#   oracle, san, time, kern, api   as bench/dev/s43_run.sh's, on $B (build/i) against $F (build/g)
#   grid   GPU-bound ms (fwd/bwd) of $B at the large grids under forced plans: (4,4096,16) with its time windows (the
#          default), segments of 32, 16 and 8 chunks, the fused reverse pass without windows; (8,2048,32) and
#          (16,1024,16) at their defaults and with 2 segments; GDN and DeltaNet
#   accept issue 24's benchmark (s41_api.sh's warm and run) of $B's library against FlashQLA alone (carry .peers too;
#          FLA's numbers stand from session 41): FlashQLA compiled by a process a shape while test_cuda checks $B on the GPU
#          (--quick with segments of 2 chunks, with and without the forward's; racecheck of --v128 with them), then grid4,
#          then the benchmark
#   val    the saved maps' checks alone: test_cuda --quick with segments of 2 chunks, with and without the forward's,
#          racecheck of --v128 with them; GPU-bound ms of $F and $B at the segments' shapes; then grid4
#   tl     val's timings alone (no checks), then grid4
#   grid4  grid's (4,4096,16) alone, without segments of 8
#   host   the Python API's host time (bench/dev/host_profile.py: rewy against an empty autograd.Function, cProfile)
#          at GDN (1,2048,4), and every kernel of its forward and backward (peer_profile.py) there and at (8,2048,32)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=${B:-build/i}; F=${F:-build/g}
source bench/dev/device_helpers.sh
unpack_bins ${CARRY:-s44b}
for mode in "$@"; do case $mode in
grid|grid4)
  for op in gdn delta; do
    if [ $mode = grid4 ]; then s="4 4096 16"
      echo "| $op | 4,4096,16 | win $(gb $VT $op $s) | seg32 $(gb env REWY_CUDA_SEG=32 $VT $op $s) | seg16 $(gb env REWY_CUDA_SEG=16 $VT $op $s) | rev $(gb env REWY_CUDA_WIN=0 REWY_CUDA_REV_WS=1 $VT $op $s) |"
      continue; fi
    s="4 4096 16"
    echo "| $op | 4,4096,16 | win $(gb $VT $op $s) | seg32 $(gb env REWY_CUDA_SEG=32 $VT $op $s) | seg16 $(gb env REWY_CUDA_SEG=16 $VT $op $s) | seg8 $(gb env REWY_CUDA_SEG=8 $VT $op $s) | rev $(gb env REWY_CUDA_WIN=0 REWY_CUDA_REV_WS=1 $VT $op $s) |"
    s="8 2048 32"; echo "| $op | 8,2048,32 | def $(gb $VT $op $s) | seg16 $(gb env REWY_CUDA_SEG=16 $VT $op $s) |"
    s="16 1024 16"; echo "| $op | 16,1024,16 | def $(gb $VT $op $s) | seg8 $(gb env REWY_CUDA_SEG=8 $VT $op $s) |"
  done ;;
val|tl)
  if [ $mode = val ]; then
    TC_LIMIT=80 oracle REWY_CUDA_SEG=2 -- --quick; TC_LIMIT=80 oracle REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0 -- --quick
    SAN_LIMIT=130 san racecheck REWY_CUDA_SEG=2 -- --v128
  fi
  for op in gdn delta; do for s in 1x8192x16 2x16384x8; do
    echo "| $op | $s | $(gb $F/bench/dev/variant_time $op ${s//x/ }) | $(gb $VT $op ${s//x/ }) |"
  done; done
  [ "${GRID:-1}" = 0 ] || bash $0 grid4 ;;
accept)
  B=$B TC_LIMIT=90 bash -c 'source bench/dev/device_helpers.sh; t0='$t0'; oracle REWY_CUDA_SEG=2 -- --quick
    oracle REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0 -- --quick; SAN_LIMIT=150 san racecheck REWY_CUDA_SEG=2 -- --v128' \
    > $OUT/checks.log 2>&1 &
  export OUT REWY_LIB=$PWD/$B/librewy.so WARM_PEERS=flashqla IMPLS=rewy,flashqla WARM_LIMIT=300 API_LIMIT=${API_LIMIT:-200}
  bash bench/dev/s41_api.sh warm; wait; cat $OUT/checks.log
  bash $0 grid4
  bash bench/dev/s41_api.sh run ;;
host)
  export REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python
  timeout 120 python3 bench/dev/host_profile.py 1x2048x4 2>&1 | head -60
  for sh in 1x2048x4 8x2048x32; do timeout 90 python3 bench/dev/peer_profile.py gdn $sh rewy 2>&1 | tail -30; done ;;
*) B=$B F=$F CARRY=${CARRY:-s44b} bash bench/dev/s43_run.sh $mode ;;
esac; done
echo "done $(el)"
