#!/bin/bash
# Session 24's second prepared call (after s24_run.sh; session 24 itself had no device): the rest of the checks on
# the tree since session 23's last device run (chain_pair's chunk-table entries a step ahead and store_staged's reads
# before its stores, 70bcc68; the forward register chain with its output, REWY_CUDA_FWD_CHAIN, default off): the
# oracle matrix (the 128-column chains, the forward chain at 32 columns), the campaign,
# memcheck and racecheck on both chains, test_cuda as sm_80 PTX (--quick), and last device times (default against the
# forward chain at 64 columns) and ncu per kernel. About 9 minutes. Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh).
source "$(dirname "$0")/carried_bins.sh"
for v in REWY_CUDA_CHAIN=2 REWY_CUDA_FWD_CHAIN=32; do   # (default, FWD_CHAIN=1 and 64: s24_run.sh)
  env $v timeout 90 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$v] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6
done
timeout 120 $T/test_random --seed 4 --count 1000 > /tmp/tr.log 2>&1; echo "campaign seed 4 rc=$? $(tail -1 /tmp/tr.log) $(el)"
for run in "memcheck REWY_CUDA_CHAIN=2" "racecheck REWY_CUDA_CHAIN=2" "racecheck REWY_CUDA_FWD_CHAIN=64" \
           "memcheck REWY_CUDA_FWD_CHAIN=1" "racecheck REWY_CUDA_FWD_CHAIN=1"; do
  set -- $run
  env $2 REWY_TEST_NO_GRAPH=1 timeout 150 compute-sanitizer --tool $1 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "$1 [$2] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
done
# the sm_80 paths (store_t's shuffled stores, no wgmma, no dependent launch): test_cuda built as compute_80 PTX,
# JIT-compiled here on first use of each kernel
for v in "" REWY_CUDA_FWD_CHAIN=1; do
  env $v timeout 180 build/cuda-80/tests/cuda/test_cuda --quick > /tmp/t80.log 2>&1
  echo "test_cuda sm_80 PTX --quick [$v] rc=$? $(tail -1 /tmp/t80.log) $(el)"; grep -E "FAIL" /tmp/t80.log | head -4
done
V=$B/bench/dev/variant_time
for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
  echo "[$op $s] $(timeout 30 $V $op $s | grep -E 'forward|backward' | tr -s ' ' | tr '\n' ' ')"
  for w in 64; do echo "  [FWD_CHAIN=$w] $(REWY_CUDA_FWD_CHAIN=$w timeout 30 $V $op $s | grep forward | tr -s ' ')"; done
done; done
echo "[ncu gdn 4 4096 16]"; kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "[ncu gdn 4 4096 16 FWD_CHAIN=64]"; REWY_CUDA_FWD_CHAIN=64 kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "[ncu delta 4 4096 16]"; kernel_table $V delta 4 4096 16 | sed 's/(Prob.*//'
echo "total $(el)"
