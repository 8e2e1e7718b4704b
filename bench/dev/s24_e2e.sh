#!/bin/bash
# Session 24, second call on the warm machine (after s24_check.sh filled FLA's Triton cache for GDN): FLA's
# GatedDeltaNet model trained with FLA's kernels and with rewy swapped in (patch_fla), B = 4, T = 4096, 200 steps,
# one process, FLA first. Carried: .carry/bins.tar.xz (librewy.so), .carry/e2e/fla.tar.xz (FLA, #640 check off).
source "$(dirname "$0")/carried_bins.sh"
mkdir -p /tmp/fla /tmp/e2e .fla-cache/triton && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PYTHONPATH=$PWD/python:/tmp/fla PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton \
  TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-560} python3 bench/e2e.py --flashqla off --models ${MODELS:-gdn} \
  --batch 4 --prewarm off --deadline ${E2E_DEADLINE:-540} --json /tmp/e2e/e2e.json --png /tmp/e2e/e2e_loss.png \
  ${E2E_ARGS:---impls fla,rewy} > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(el)"; cp /tmp/e2e/e2e.json /tmp/e2e/e2e_loss.png $OUT/ 2>/dev/null; tail -30 $OUT/e2e.log
