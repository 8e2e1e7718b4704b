#!/bin/bash
# Session 20: the 16-byte-vector CUDA l2norm on the H200. Carried: .carry/lib.so.xz (librewy.so built here for
# sm_90a). Its tests on CUDA (also under memcheck), then rewy's whole layer call at the e2e models' batch (B = 4).
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT build/cuda-on; t0=$(date +%s)
xz -dc .carry/lib.so.xz > build/cuda-on/librewy.so
export REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONPATH=$PWD/python
timeout 120 python3 -m pytest -q -k "cuda or errors or gate" tests/python/test_transforms.py 2>&1 | tail -2
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -k "cuda and l2norm" \
  tests/python/test_transforms.py > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(tail -1 $OUT/memcheck.log) $(( $(date +%s) - t0 )) s"
timeout 150 python3 bench/dev/layer_profile.py ${OPS:-gdn,delta} 4 > $OUT/profile.txt 2>&1
grep -E "whole call|l2norm|ms x1 " $OUT/profile.txt | cut -c1-150
echo "total $(( $(date +%s) - t0 )) s"
