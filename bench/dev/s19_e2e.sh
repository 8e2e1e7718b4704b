#!/bin/bash
# Session 19: the end-to-end benchmark alone on the machine (issue 27). Carried: .carry/e2e (librewy.so built
# here for sm_90a, xz; FLA's fla/ package with the #640 check disabled, tar.xz) and .peers (FlashQLA + TileLang).
# e2e.py's parallel prewarm compiles FLA (and FlashQLA) for MODELS; WARM_EXTRA=kda:fla compiles another model's
# FLA kernels beside it, into the Triton cache under .fla-cache (kept on a warm machine), for the next call.
# PRE=1: the CUDA l2norm tests and bench/dev/layer_profile.py first. Logs, JSON, PNG under $OUT.
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
export CUDA_HOME=/usr/local/cuda
mkdir -p build/cuda-on /tmp/fla .fla-cache/triton .fla-cache/tl
xz -dc .carry/e2e/librewy.so.xz > build/cuda-on/librewy.so && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PP=$PWD/python:/tmp/fla; QLA=off
if [ -f .peers/peers-site.tar.xz ] && [ "${FLASHQLA:-on}" = on ]; then tar xJf .peers/peers-site.tar.xz -C /tmp && PP=$PP:/tmp/site; QLA=on; fi
echo "unpacked $(( $(date +%s) - t0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
export REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 \
  TRITON_CACHE_DIR=$PWD/.fla-cache/triton TILELANG_CACHE_DIR=$PWD/.fla-cache/tl
if [ "${PRE:-1}" = 1 ]; then
  PYTHONPATH=$PWD/python timeout 60 python3 -m pytest -q -k "cuda or errors" tests/python/test_transforms.py 2>&1 | tail -2
fi
if [ "${PROFILE:-0}" = 1 ]; then
  PYTHONPATH=$PWD/python timeout 90 python3 bench/dev/layer_profile.py > $OUT/profile.txt 2>&1
  grep -E "whole call|total" $OUT/profile.txt
fi
for w in ${WARM_EXTRA:-}; do
  PYTHONPATH=$PP TRITON_CACHE_AUTOTUNING=0 FLA_CACHE_RESULTS=0 python3 bench/e2e.py --batch ${BATCH:-4} --models ${w%%:*} \
    --warm-only $w --prewarm off > $OUT/warm-extra-${w%%:*}.log 2>&1 &
done
PYTHONPATH=$PP TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-540} python3 bench/e2e.py --flashqla $QLA \
  --models ${MODELS:-gdn,delta,kda} --batch ${BATCH:-4} --deadline ${E2E_DEADLINE:-500} --prewarm ${PREWARM:-auto} \
  --json $OUT/e2e.json --png $OUT/e2e_loss.png ${E2E_ARGS:-} > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(( $(date +%s) - t0 )) s"
wait
tail -qn1 $OUT/warm-extra-*.log 2>/dev/null; grep -h -E "Error" $OUT/warm-*.log | tail -5
tail -25 $OUT/e2e.log
if [ "${PROFILE:-0}" = 2 ]; then
  PYTHONPATH=$PWD/python timeout 90 python3 bench/dev/layer_profile.py > $OUT/profile.txt 2>&1
  grep -E "whole call|total" $OUT/profile.txt
fi
