#!/bin/bash
# Session 20's last device call: the gate table in the workspaces (KDA/GDN2 policy R) and rewy_gate_* (CUDA
# kernels), built here for sm_90a and carried as .carry/bins.tar.xz (librewy.so, test_cuda, test_random; see
# s20_verify.sh for the build). The oracle matrix, memcheck, the CUDA transform tests (l2norm, gate) also under
# memcheck and racecheck, rewy's KDA layer call at B = 4, and
# 500 configurations of the random campaign. Logs under $OUT.
source "$(dirname "$0")/carried_bins.sh"
timeout 120 $T/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(tail -1 $OUT/test_cuda.log) $(el)"
grep -E "FAIL" $OUT/test_cuda.log | head -10
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(el)"
timeout 60 python3 -m pytest -q -k "cuda" tests/python/test_transforms.py 2>&1 | tail -3
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m pytest -q -k "cuda and gate_library and (shape1 or shape3)" \
    tests/python/test_transforms.py > $OUT/$tool-gate.log 2>&1
  echo "$tool gate rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool-gate.log | tail -1) $(tail -1 $OUT/$tool-gate.log) $(el)"
done
for b in 4; do timeout 60 python3 bench/dev/layer_profile.py kda $b > $OUT/profile-kda$b.txt 2>&1
  grep -E "whole call|ms x" $OUT/profile-kda$b.txt | head -14 | cut -c1-140; done
for s in 0; do timeout 60 $T/test_random --seed 1 --start $s --count 500 > $OUT/rnd$s.log 2>&1 & done; wait
grep -h "^FAIL configuration" $OUT/rnd*.log | cut -c1-120; grep -h "configurations run" $OUT/rnd*.log
echo "total $(el)"
