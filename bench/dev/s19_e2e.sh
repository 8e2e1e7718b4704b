#!/bin/bash
# Session 19: the end-to-end benchmark alone on the machine (issue 27). Carried: .carry/e2e (librewy.so built
# here for sm_90a, xz; FLA's fla/ package with the #640 check disabled, tar.xz) and .peers (FlashQLA + TileLang).
# The three FLA compiles and FlashQLA's JIT run as e2e.py's parallel prewarm. Logs, JSON, PNG under $OUT;
# the Triton and TileLang caches come back as tarballs when small enough, for a later call.
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
export CUDA_HOME=/usr/local/cuda
mkdir -p build/cuda-on /tmp/fla && xz -dc .carry/e2e/librewy.so.xz > build/cuda-on/librewy.so && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PP=$PWD/python:/tmp/fla
if [ -f .peers/peers-site.tar.xz ] && [ "${FLASHQLA:-on}" = on ]; then tar xJf .peers/peers-site.tar.xz -C /tmp && PP=$PP:/tmp/site; QLA=on; else QLA=off; fi
[ -f .carry/e2e/triton.tar.xz ] && mkdir -p /tmp/triton && tar xJf .carry/e2e/triton.tar.xz -C /tmp/triton
[ -f .carry/e2e/tilelang.tar.xz ] && mkdir -p /tmp/tlcache && tar xJf .carry/e2e/tilelang.tar.xz -C /tmp/tlcache
echo "unpacked $(( $(date +%s) - t0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
PYTHONUNBUFFERED=1 REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONPATH=$PP FLA_DISABLE_BACKEND_DISPATCH=1 \
  TRITON_CACHE_DIR=/tmp/triton TRITON_CACHE_AUTOTUNING=1 TILELANG_CACHE_DIR=/tmp/tlcache timeout ${E2E_TIMEOUT:-540} \
  python3 bench/e2e.py --flashqla $QLA --models ${MODELS:-gdn,delta,kda} --batch 2 --deadline ${E2E_DEADLINE:-500} \
  --json $OUT/e2e.json --png $OUT/e2e_loss.png ${E2E_ARGS:-} > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(( $(date +%s) - t0 )) s"
for d in triton tlcache; do [ -d /tmp/$d ] && tar cf - -C /tmp/$d . | xz -1 -T16 > $OUT/$d.tar.xz; done
ls -la $OUT; grep -h -E "Error|error" $OUT/warm-*.log | tail -5
cat $OUT/e2e.log | tail -40
