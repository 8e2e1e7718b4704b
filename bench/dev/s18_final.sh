#!/bin/bash
# Session 18, one device call: rebuild (sm_90a); the random campaign, test_cuda and saved_check (CPU-bound oracle)
# beside the end-to-end benchmark's FLA compile; then e2e's timed runs. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"; cd "$(dirname "$0")/../.."
export CUDA_HOME=/usr/local/cuda
B=build/cuda-on; T=$B/tests/cuda; t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
make -j16 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B lib $T/test_cuda $T/test_random \
  $T/saved_check > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build ok $(el)"
: > $OUT/summary.txt
run() { local name=$1; shift; ( env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? :: $(tail -1 $OUT/$name.log)" >> $OUT/summary.txt ) & }
for s in 0 500 1000 1500; do run rnd$s $T/test_random --seed 1 --start $s --count 500; done
run rndg $T/test_random --seed 2 --count 300 --all-gates
run test_cuda $T/test_cuda
( $T/saved_check > $OUT/saved.log 2>&1; echo "saved_check rc=$? :: $(tail -1 $OUT/saved.log)" >> $OUT/summary.txt ) &
mkdir -p .fla-cache/triton
PYTHONUNBUFFERED=1 REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python:$PWD/.ref/fla-src FLA_DISABLE_BACKEND_DISPATCH=1 \
  TRITON_CACHE_DIR=$PWD/.fla-cache/triton TRITON_CACHE_AUTOTUNING=1 timeout ${E2E_TIMEOUT:-420} python3 bench/e2e.py \
  --flashqla off --batch 2 --deadline ${E2E_DEADLINE:-380} --json $OUT/e2e.json --png $OUT/e2e_loss.png > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(el)"
wait
grep -h "^FAIL configuration" $OUT/rnd*.log | head -20
grep -h -v "^\s*$" $OUT/saved.log | head -16
echo "-----"; sort $OUT/summary.txt; tail -30 $OUT/e2e.log; echo "total $(el)"
