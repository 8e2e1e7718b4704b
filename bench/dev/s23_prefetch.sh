#!/bin/bash
# Session 23, last call: chain_pair with its chunk-table entries loaded a step ahead and store_staged's shared reads
# before its stores (the two stall sources s23_profile.sh found), on the __expf build. The oracle matrix (default and
# the 128-column chains), then device time and ncu per kernel at GDN and DeltaNet (4,4096,16). About 2 minutes.
source "$(dirname "$0")/carried_bins.sh"
for v in REWY_CUDA_CHAIN=2 ""; do
  env $v timeout 60 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$v] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6
done
V=$B/bench/dev/variant_time
for op in gdn delta; do echo "[$op 4 4096 16] $(timeout 30 $V $op 4 4096 16 | grep -E 'forward|backward' | tr -s ' ' | tr '\n' ' ')"; done
echo "[ncu gdn 4 4096 16]"; kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "[gdn 4 4096 16 FWD_CHAIN=64] $(REWY_CUDA_FWD_CHAIN=64 timeout 30 $V gdn 4 4096 16 | grep forward | tr -s ' ')"
echo "total $(el)"
