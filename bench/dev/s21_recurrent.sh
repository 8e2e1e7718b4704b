#!/bin/bash
# Session 21, second check call: the fp32 token recurrence for K < 16 (recurrent.cu, never run on a GPU before) —
# the oracle matrix with its new K < 16 cases, the same forced at every K (REWY_CUDA_RECURRENT=1), the random
# campaign, determinism and compute-sanitizer on the forced path — beside DeltaNet's end-to-end noise-floor run
# (e2e.py --impls fla,fla-noise,rewy; started first, so its FLA autotuning shares the GPU with the tests: its
# tok/s are not a standing, its losses are what it is for). Carried: .carry/bins.tar.xz, .carry/e2e/fla.tar.xz.
source "$(dirname "$0")/carried_bins.sh"
mkdir -p /tmp/fla /tmp/e2e .fla-cache/triton && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
PYTHONPATH=$PWD/python:/tmp/fla PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton \
  TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-400} python3 bench/e2e.py --flashqla off --models delta --batch 4 \
  --prewarm off --deadline ${E2E_DEADLINE:-380} --json /tmp/e2e/e2e.json --png /tmp/e2e/e2e_loss.png \
  --impls fla,fla-noise,rewy > $OUT/e2e.log 2>&1 &
E2E_PID=$!
timeout 120 $T/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(tail -1 $OUT/test_cuda.log) $(el)"
grep -E "FAIL" $OUT/test_cuda.log | head -8
REWY_CUDA_RECURRENT=1 timeout 120 $T/test_cuda > $OUT/test_cuda_rec.log 2>&1; echo "test_cuda (recurrent forced) rc=$? $(tail -1 $OUT/test_cuda_rec.log) $(el)"
grep -E "FAIL" $OUT/test_cuda_rec.log | head -8
for s in 0 500 1000 1500; do timeout 120 $T/test_random --seed 1 --start $s --count 500 > /tmp/rnd$s.log 2>&1 & done; wait $(jobs -p | grep -v $E2E_PID) 2>/dev/null
sleep 1; cat /tmp/rnd*.log > $OUT/campaign.log
grep -h "^FAIL configuration" $OUT/campaign.log | head -20; grep -h "configurations run" $OUT/campaign.log; echo "campaign $(el)"
{
REWY_CUDA_RECURRENT=1 timeout 40 $T/test_determinism --quick 2>&1 | tail -1
REWY_CUDA_RECURRENT=1 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "ERROR SUMMARY|passed" | tail -2
REWY_CUDA_RECURRENT=1 REWY_TEST_NO_GRAPH=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "RACECHECK SUMMARY|passed" | tail -2
} > $OUT/sanitizer.log 2>&1; cat $OUT/sanitizer.log; echo "sanitizers $(el)"
wait $E2E_PID; echo "e2e rc=$? $(el)"; cp /tmp/e2e/e2e.json /tmp/e2e/e2e_loss.png $OUT/ 2>/dev/null; tail -6 $OUT/e2e.log
echo "total $(el)"
