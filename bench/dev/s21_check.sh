#!/bin/bash
# Session 21, one device call: the ḡ fix of the general pullbacks (H_q's diagonal out of the tf32 products) on the
# three campaign configurations it was made for, the oracle matrix and the random campaign; then (E2E=1) DeltaNet
# end to end with the noise-floor run (bench/e2e.py --impls fla,rewy,fla-noise). Carried: .carry/bins.tar.xz
# (librewy.so, test_cuda, test_random built here for sm_90a) and .carry/e2e/fla.tar.xz (FLA with its #640 check off).
source "$(dirname "$0")/carried_bins.sh"
for i in 724 1760 1211; do
  timeout 60 $T/test_random --seed 1 --start $i --count 1 --verbose > /tmp/cfg$i.log 2>&1
  echo "cfg $i rc=$? $(tail -1 /tmp/cfg$i.log)"; cat /tmp/cfg$i.log >> $OUT/configs.log
done
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 $T/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(tail -1 $OUT/test_cuda.log) $(el)"
  grep -E "FAIL" $OUT/test_cuda.log | head -10
fi
for s in 0 500 1000 1500; do timeout 200 $T/test_random --seed 1 --start $s --count 500 > /tmp/rnd$s.log 2>&1 & done; wait
cat /tmp/rnd*.log > $OUT/campaign.log
grep -h "^FAIL configuration" $OUT/campaign.log | head -30; grep -h "configurations run" $OUT/campaign.log; echo "campaign $(el)"
if [ "${E2E:-0}" = 1 ]; then
  mkdir -p /tmp/fla /tmp/e2e .fla-cache/triton && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
  PYTHONPATH=$PWD/python:/tmp/fla PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton \
    TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-420} python3 bench/e2e.py --flashqla off --models ${MODELS:-delta} \
    --batch 4 --deadline ${E2E_DEADLINE:-400} --json /tmp/e2e/e2e.json --png /tmp/e2e/e2e_loss.png \
    ${E2E_ARGS:---impls fla,rewy,fla-noise} > $OUT/e2e.log 2>&1
  echo "e2e rc=$? $(el)"; cp /tmp/e2e/e2e.json /tmp/e2e/e2e_loss.png $OUT/ 2>/dev/null; tail -8 $OUT/e2e.log
fi
echo "total $(el)"
