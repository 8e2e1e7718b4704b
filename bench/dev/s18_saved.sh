#!/bin/bash
# Session 18: saved_check after its exit-code fix, and three campaign failures again, verbose.
set -u; cd "$(dirname "$0")/../.."; export CUDA_HOME=/usr/local/cuda; B=build/cuda-on; T=$B/tests/cuda
make -j16 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B lib $T/test_random $T/saved_check > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
$T/saved_check 2>&1 | tail -8
for s in 86 1169 844; do $T/test_random --seed 1 --start $s --count 1 --verbose 2>&1 | grep -E "FAIL|rel" | head -8; done
