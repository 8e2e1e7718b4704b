#!/bin/bash
# Issue 24's acceptance benchmark on the device (bench/bench_api.py): rewy's public Python functions, FLA and FlashQLA
# in one process. Carried (64 MiB in all): .carry/e2e (librewy.so.xz: `xz -9 -T1 -k build/cuda-on/librewy.so`, moved
# there; fla.tar.xz from .ref/peer_fla.sh) and .peers (peers-site.tar.xz from bench/dev/peers_pack.sh, and
# tl-cache.tar.xz where an earlier call returned one: FlashQLA's compiled kernels). FlashQLA compiles about 150 s a
# shape on first use, so a cold call covers two or three shapes (SHAPES); the TileLang cache comes back under $OUT as
# tl-cache.tar.xz for the next call (move it into .peers). FLA's compile and autotune land in .fla-cache.
#   SHAPES=4x4096x16,1x8192x16 OPS=gdn,deltanet [IMPLS=rewy,flashqla] bash bench/dev/s24_api.sh
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
mkdir -p build/cuda-on /tmp/fla .fla-cache/triton /tmp/tlcache
xz -dc .carry/e2e/librewy.so.xz > build/cuda-on/librewy.so && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PP=$PWD/python:/tmp/fla
if [ -f .peers/peers-site.tar.xz ]; then tar xJf .peers/peers-site.tar.xz -C /tmp && PP=$PP:/tmp/site; fi
[ -f .peers/tl-cache.tar.xz ] && tar xJf .peers/tl-cache.tar.xz -C /tmp/tlcache
echo "unpacked $(el); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
export CUDA_HOME=/usr/local/cuda REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONUNBUFFERED=1 \
  FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton TRITON_CACHE_AUTOTUNING=1 \
  TILELANG_CACHE_DIR=/tmp/tlcache
PYTHONPATH=$PP timeout ${API_TIMEOUT:-540} python3 bench/bench_api.py --ops ${OPS:-gdn,deltanet} \
  --shapes ${SHAPES:-4x4096x16,1x8192x16} --impls ${IMPLS:-rewy,fla,flashqla} --json $OUT/bench_api.jsonl > $OUT/bench_api.log 2>&1
echo "bench_api rc=$? $(el)"; cat $OUT/bench_api.log | tail -40
tar cJf $OUT/tl-cache.tar.xz -C /tmp/tlcache . 2>/dev/null; ls -la $OUT/tl-cache.tar.xz
