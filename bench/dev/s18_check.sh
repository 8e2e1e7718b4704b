#!/bin/bash
# Session 18 device check: build (sm_90a), the oracle matrix with the forced plan variants, the random campaign,
# determinism, saved-record check, sizes, compute-sanitizer, Python on CUDA, exports/install. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"; cd "$(dirname "$0")/../.."
export CUDA_HOME=/usr/local/cuda
B=build/cuda-on; T=$B/tests/cuda
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) $(git rev-parse --short HEAD 2>/dev/null)"
make -j16 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B lib $T/test_cuda $T/test_random \
  $T/test_determinism $T/saved_check $B/tests/test_sizes > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build ok $(el)"
run() { local name=$1; shift; ( env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? :: $(tail -1 $OUT/$name.log)" >> $OUT/summary.txt ) & }
: > $OUT/summary.txt
run test_cuda $T/test_cuda
for e in REWY_CUDA_CHAIN=1 REWY_CUDA_CHAIN=2 REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_WG=1 "REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1" REWY_CUDA_SCAN_WF=0; do
  run "tc_${e//[= ]/_}" $e $T/test_cuda; done
for s in 0 500 1000 1500; do run rnd$s $T/test_random --seed 1 --start $s --count 500; done
run rnd_gates $T/test_random --seed 2 --count 300 --all-gates
run determinism $T/test_determinism
run saved_check $T/saved_check
run sizes $B/tests/test_sizes
wait; echo "tests done $(el)"
run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick
run racecheck REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick
run racecheck_ch2 REWY_CUDA_CHAIN=2 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick
run memcheck_rnd compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_random --quick --all-gates
run memcheck_det compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_determinism --quick
run pytest REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python python3 -m pytest -q -x -p no:cacheprovider tests/python --ignore=tests/python/test_fla.py --ignore=tests/python/test_fla_layers.py --ignore=tests/python/test_cp.py --ignore=tests/python/test_fla_patch.py
wait; echo "sanitizers+pytest done $(el)"
make CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B check-exports test-install > $OUT/install.log 2>&1; echo "exports/install rc=$? :: $(tail -2 $OUT/install.log | tr '\n' ' ')" >> $OUT/summary.txt
grep -h -E "^FAIL|FAIL |DIFFERS|ERROR SUMMARY: [1-9]|Hazard|failed|error" $OUT/*.log | grep -v " 0 failed" | head -40
echo "-----"; sort $OUT/summary.txt; echo "total $(el)"
