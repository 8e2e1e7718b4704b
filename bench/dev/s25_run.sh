#!/bin/bash
# Session 25's first device call (session 24 had none; this one's device starts were refused twice, so one call does
# what s24_run.sh and s24_check.sh split): the tree since session 23's last device run, tested and timed.
# 1. The oracle matrix: default (70bcc68's chain_pair prefetch and staged stores, 2b48062's gate kernels), the
#    forward chain at the plan's width and at 64 columns, the 128-column pair; the gate tests (pytest).
# 2. memcheck on the forward chain, racecheck on it and on the pair; the campaign; test_cuda as sm_80 PTX.
# 3. GPU-bound forward ms, default against the forward chain at the plan's width, GDN and DeltaNet, six shapes;
#    ncu per kernel at GDN (4,4096,16) with the forward chain.
# Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh). In session 25 this call ran past 600 s in the sm_80 PTX
# step (its JIT compile of every kernel takes minutes): give that step a call of its own (T80=500).
source "$(dirname "$0")/carried_bins.sh"
for v in "" REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_CHAIN=2; do
  env $v timeout 90 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$v] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6
done
PYTHONPATH=$PWD/python timeout 120 python3 -m pytest -q -x -k "gate" tests/python/test_transforms.py > /tmp/gate.log 2>&1
echo "gate tests rc=$? $(tail -1 /tmp/gate.log) $(el)"; grep -E "FAIL|Error" /tmp/gate.log | head -4
V=$B/bench/dev/variant_time
for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
  a=$(timeout 30 $V $op $s | grep -E 'forward' | tr -s ' ')
  f=$(REWY_CUDA_FWD_CHAIN=1 timeout 30 $V $op $s | grep -oE 'fwd_chain [0-9]+|forward.*' | tr -s ' ' | tr '\n' ' ')
  echo "[$op $s] default: $a | chain: $f"
done; done
echo "$(el)"
for run in "memcheck REWY_CUDA_FWD_CHAIN=64" "racecheck REWY_CUDA_FWD_CHAIN=1" "racecheck REWY_CUDA_CHAIN=2"; do
  set -- $run
  env $2 REWY_TEST_NO_GRAPH=1 timeout 100 compute-sanitizer --tool $1 --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "$1 [$2] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
done
timeout 60 $T/test_random --seed 4 --count 400 > /tmp/tr.log 2>&1; echo "campaign seed 4 rc=$? $(tail -1 /tmp/tr.log) $(el)"
timeout ${T80:-120} build/cuda-80/tests/cuda/test_cuda --quick > /tmp/t80.log 2>&1
echo "test_cuda sm_80 PTX --quick rc=$? $(tail -1 /tmp/t80.log) $(el)"; grep -E "FAIL" /tmp/t80.log | head -4
echo "[ncu gdn 4 4096 16 FWD_CHAIN=1]"; REWY_CUDA_FWD_CHAIN=1 kernel_table $V gdn 4 4096 16 | sed 's/(Prob.*//'
echo "total $(el)"
