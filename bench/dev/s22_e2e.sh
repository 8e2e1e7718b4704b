#!/bin/bash
# Session 22, one device call: campaign configuration 610 of seed 3 (its one failure) in detail, then DeltaNet end to
# end with the noise floor: bench/e2e.py --impls fla,fla-noise,rewy,rewy-a (FLA from weights perturbed by one bf16 ulp:
# how far such a difference moves FLA's own curve; R against A: rewy's own rounding floor). Carried:
# .carry/bins.tar.xz (librewy.so, test_cuda, test_random built here for sm_90a), .carry/e2e/fla.tar.xz (FLA, #640 off).
source "$(dirname "$0")/carried_bins.sh"
timeout 60 $T/test_random --seed 3 --start 610 --count 1 --verbose > $OUT/cfg610.log 2>&1; echo "cfg 610 rc=$?"
grep -E "FAIL|dg|dq|dk|dv|dbeta|lens|seq" $OUT/cfg610.log | head -20
mkdir -p /tmp/fla /tmp/e2e .fla-cache/triton && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PYTHONPATH=$PWD/python:/tmp/fla PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton \
  TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-540} python3 bench/e2e.py --flashqla off --models ${MODELS:-delta} \
  --batch 4 --deadline ${E2E_DEADLINE:-520} --json /tmp/e2e/e2e.json --png /tmp/e2e/e2e_loss.png \
  ${E2E_ARGS:---impls fla,fla-noise,rewy,rewy-a} > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(el)"; cp /tmp/e2e/e2e.json /tmp/e2e/e2e_loss.png $OUT/ 2>/dev/null; tail -25 $OUT/e2e.log
