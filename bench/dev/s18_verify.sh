#!/bin/bash
# Session 18, second device check: rebuild (sm_90a), the random campaign (2,000 + 300 with every gate regime),
# test_cuda, test_determinism, saved_check with its messages. Leaves build/cuda-on for the e2e call.
set -u
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"; cd "$(dirname "$0")/../.."
export CUDA_HOME=/usr/local/cuda
B=build/cuda-on; T=$B/tests/cuda; t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
make -j16 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B lib $T/test_cuda $T/test_random \
  $T/test_determinism $T/saved_check > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build ok $(el)"
: > $OUT/summary.txt
run() { local name=$1; shift; ( env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? :: $(tail -1 $OUT/$name.log)" >> $OUT/summary.txt ) & }
for s in 0 500 1000 1500; do run rnd$s $T/test_random --seed 1 --start $s --count 500; done
run rndg $T/test_random --seed 2 --count 300 --all-gates
run test_cuda $T/test_cuda
run determinism $T/test_determinism
wait
$T/saved_check > $OUT/saved.log 2>&1; echo "saved_check rc=$? :: $(tail -1 $OUT/saved.log)" >> $OUT/summary.txt
grep -h "^FAIL configuration" $OUT/rnd*.log | head -30
grep -h -v "^\s*$" $OUT/saved.log | head -20
echo "-----"; sort $OUT/summary.txt; echo "total $(el)"
