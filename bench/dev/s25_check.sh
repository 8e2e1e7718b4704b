#!/bin/bash
# Session 25's second device call (after s24_run.sh), about 6 minutes: the checks on the tree since session 23's last
# device run that s24_run.sh does not make: the 128-column pair (70bcc68's chunk-table prefetch and staged stores),
# memcheck and racecheck on the pair and on the forward chain, the campaign, test_cuda as sm_80 PTX (--quick,
# JIT-compiled on the H200), and ncu per kernel (default against the forward chain at the plan's width).
# s24_check.sh trimmed to fit the session's device time. Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh).
source "$(dirname "$0")/carried_bins.sh"
timeout 90 env REWY_CUDA_CHAIN=2 $T/test_cuda > /tmp/tc.log 2>&1
echo "test_cuda [CHAIN=2] rc=$? $(tail -1 /tmp/tc.log) $(el)"; grep -E "FAIL" /tmp/tc.log | head -6
for run in "racecheck REWY_CUDA_CHAIN=2" "memcheck REWY_CUDA_CHAIN=2" "racecheck REWY_CUDA_FWD_CHAIN=1" \
           "racecheck REWY_CUDA_FWD_CHAIN=64"; do
  set -- $run
  env $2 REWY_TEST_NO_GRAPH=1 timeout 100 compute-sanitizer --tool $1 --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "$1 [$2] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
done
timeout 60 $T/test_random --seed 4 --count 400 > /tmp/tr.log 2>&1; echo "campaign seed 4 rc=$? $(tail -1 /tmp/tr.log) $(el)"
timeout 150 build/cuda-80/tests/cuda/test_cuda --quick > /tmp/t80.log 2>&1
echo "test_cuda sm_80 PTX --quick rc=$? $(tail -1 /tmp/t80.log) $(el)"; grep -E "FAIL" /tmp/t80.log | head -4
V=$B/bench/dev/variant_time
echo "[ncu gdn 4 4096 16]"; kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "[ncu gdn 4 4096 16 FWD_CHAIN=1]"; REWY_CUDA_FWD_CHAIN=1 kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "[ncu delta 4 4096 16 FWD_CHAIN=1]"; REWY_CUDA_FWD_CHAIN=1 kernel_table $V delta 4 4096 16 | sed 's/(Prob.*//'
echo "total $(el)"
