#!/bin/bash
# Session 41: issue 24's acceptance benchmark (bench/bench_api.py: rewy's public Python functions, FLA and FlashQLA
# in one process) over the whole suite, in two device calls on one warm machine.
# Carried: .carry/e2e (librewy.so.xz: `xz -T2 -6 -kc build/d/librewy.so`; fla.tar.xz from .ref/peer_fla.sh: FLA
# bc3b101d with its #640 check off, timed only) and .peers (peers-site.tar.xz from bench/dev/peers_pack.sh).
#   warm: every peer kernel compiled at once, one process a shape (FlashQLA's TileLang kernels, about 150 s a
#     shape alone; FLA's Triton configs with their autotune results discarded, taken under load), then one pass on
#     the idle GPU that autotunes FLA from the compile cache and keeps its choices. Caches in .fla-cache/ (ignored),
#     which a warm machine keeps for the next call.
#     WARM_PEERS=flashqla: FlashQLA's alone (no FLA, no autotune pass; then run with IMPLS=rewy,flashqla).
#   run [OPS=gdn,deltanet] [SHAPES=...] [IMPLS=rewy,fla,flashqla]: the benchmark (REWY_LIB: another librewy.so); its table and acceptance lines come back in $OUT.
#   prof [PROF_SHAPES=8x2048x32,4x4096x16]: each kernel's device time (bench/dev/peer_profile.py, torch.profiler), rewy
#     and FlashQLA, GDN, forward and backward; FlashQLA compiled first, a process a shape in parallel.
#   oracle: test_cuda (from .carry/s41.tar.xz: build/d's test_cuda and variant_time for sm_90a, built here) at the
#     defaults, the whole matrix, and --quick with segments of 3 chunks beside the warp-specialized forward.
#   bash bench/dev/s41_api.sh MODE…      (in the order given)
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
B=build/d
source bench/dev/device_helpers.sh
SUITE=1x2048x4,1x8192x16,4x4096x16,8x2048x32,2x16384x8,16x1024x16
mkdir -p build/cuda-on /tmp/fla .fla-cache/triton .fla-cache/tl
LIB=${REWY_LIB:-$PWD/build/cuda-on/librewy.so} # REWY_LIB: a library already here (then .carry/e2e need not come)
[ -f $LIB ] || xz -dc .carry/e2e/librewy.so.xz > $LIB
[ -d /tmp/fla/fla ] || [ ! -f .carry/e2e/fla.tar.xz ] || tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
[ -d /tmp/site ] || tar xJf .peers/peers-site.tar.xz -C /tmp
echo "unpacked $(el); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); rewy $(git rev-parse --short HEAD 2>/dev/null)"
export CUDA_HOME=/usr/local/cuda REWY_LIBRARY=$LIB PYTHONUNBUFFERED=1 \
  FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton TILELANG_CACHE_DIR=$PWD/.fla-cache/tl \
  PYTHONPATH=$PWD/python:/tmp/fla:/tmp/site
API="python3 bench/bench_api.py"
for mode in "$@"; do case $mode in
warm)
  mkdir -p $OUT/warm
  for sh in ${SUITE//,/ }; do for peer in ${WARM_PEERS:-flashqla fla}; do
    TRITON_CACHE_AUTOTUNING=0 FLA_CACHE_RESULTS=0 timeout ${WARM_LIMIT:-330} $API --ops gdn,deltanet --shapes $sh \
      --impls rewy,$peer --reps 1 --calls 1 --batches 1 --warmup 1 > $OUT/warm/$peer-$sh.log 2>&1 &
  done; done
  wait; echo "compiled $(el)"; tail -n 3 $OUT/warm/*.log
  [[ " ${WARM_PEERS:-fla} " == *" fla "* ]] || continue
  TRITON_CACHE_AUTOTUNING=1 timeout ${TUNE_LIMIT:-220} $API --ops gdn,deltanet --shapes $SUITE --impls rewy,fla,flashqla \
    --reps 1 --calls 1 --batches 1 --warmup 1 > $OUT/tune.log 2>&1
  echo "autotuned rc=$? $(el)"; tail -n 30 $OUT/tune.log
  du -sh .fla-cache/* ;;
run)
  TRITON_CACHE_AUTOTUNING=1 timeout ${API_LIMIT:-560} $API --ops ${OPS:-gdn,deltanet} --shapes ${SHAPES:-$SUITE} \
    --impls ${IMPLS:-rewy,fla,flashqla} --json $OUT/bench_api.jsonl > $OUT/bench_api.log 2>&1
  echo "bench_api rc=$? $(el)"; cat $OUT/bench_api.log ;;
prof)
  PS=${PROF_SHAPES:-8x2048x32,4x4096x16}
  for sh in ${PS//,/ }; do
    timeout 300 $API --ops gdn --shapes $sh --impls rewy,flashqla --reps 1 --calls 1 --batches 1 --warmup 1 > $OUT/pw-$sh.log 2>&1 &
  done; wait; echo "compiled $(el)"
  for sh in ${PS//,/ }; do timeout 120 python3 bench/dev/peer_profile.py gdn $sh rewy,flashqla 2>&1 | tee $OUT/prof-$sh.log; done ;;
oracle)
  [ -x $B/tests/cuda/test_cuda ] || tar xJf .carry/s41.tar.xz
  TC_LIMIT=300 oracle -- ; oracle REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1 -- --quick ;;
esac; done
echo "done $(el)"
