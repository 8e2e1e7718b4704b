#!/bin/bash
# The next device call after session 25 (about 5 minutes): the two-warp 16-column forward chain (REWY_CUDA_FWD_KW=2,
# written in session 25 after its device time was spent), checked and timed.
# 1. The oracle matrix with it forced (FWD_CHAIN=1 takes 16 columns on the test shapes), memcheck and racecheck.
# 2. GPU-bound forward ms at the shapes where the plan keeps the fused-output scan (the chain's 16-column blocks
#    lost there in session 25): default, the one-warp chain, the two-warp chain; GDN and DeltaNet.
# Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh at the current tree). Output also in $OUT/run.log.
source "$(dirname "$0")/carried_bins.sh"
F="REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_KW=2"
env $F timeout 90 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$F] rc=$? $(tail -1 /tmp/tc.log) $(el)"
grep -E "FAIL|plan:" /tmp/tc.log | head -6
env $F timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
echo "memcheck [$F] rc=$? $(grep 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"
env $F REWY_TEST_NO_GRAPH=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
echo "racecheck [$F] rc=$? $(grep 'RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
V=$B/bench/dev/variant_time
for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "2 16384 8"; do
  a=$(timeout 20 $V $op $s | grep forward | tr -s ' ')
  b=$(REWY_CUDA_FWD_CHAIN=1 timeout 20 $V $op $s | grep forward | tr -s ' ')
  c=$(env $F timeout 20 $V $op $s | grep -oE 'kw [0-9]|forward.*' | tr -s ' ' | tr '\n' ' ')
  echo "[$op $s] default: $a | chain 16: $b | two warps: $c"
done; done
echo "total $(el)"
