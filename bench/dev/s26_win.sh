#!/bin/bash
# Session 26: policy R's time windows (Plan::win) on the device, in three calls (each under 600 s).
#   bash bench/dev/s26_win.sh check   the oracle matrix at the default and under each window forcing of `make test-cuda`,
#                                     memcheck with windows over the scan pair and over the register chains
#   bash bench/dev/s26_win.sh time    GPU-bound forward/backward ms at the long suite shapes, windows off / 4 windows
#                                     (the proposed default) / 8; racecheck; the random campaign with windows
#   bash bench/dev/s26_win.sh api     the public Python API (bench/bench_api.py, rewy alone): the library against
#                                     librewy_win.so (windows as its default, measurement only): times and peak memory
# Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh). Output also in $OUT/run.log.
source "$(dirname "$0")/carried_bins.sh"
if [ "${1:-check}" = api ]; then
  for lib in librewy.so librewy_win.so; do
    REWY_LIBRARY=$PWD/$B/$lib timeout 250 python3 bench/bench_api.py --ops gdn,deltanet --impls rewy \
      --shapes 4x4096x16,1x8192x16,2x16384x8 > /tmp/api.log 2>&1
    echo "bench_api [$lib] rc=$? $(el)"; tail -24 /tmp/api.log
  done
elif [ "${1:-check}" = check ]; then
  for e in "" REWY_CUDA_WIN=1 REWY_CUDA_WIN=3 "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_WF=0" "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" \
    "REWY_CUDA_WIN=3 REWY_CUDA_CHAIN=2" "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1" \
    "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=64"; do
    env $e timeout 100 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$e] rc=$? $(tail -1 /tmp/tc.log) $(el)"
    grep -E "FAIL|windows of" /tmp/tc.log | head -4
  done
  for e in REWY_CUDA_WIN=1 "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1"; do
    env $e timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
    echo "memcheck [$e] rc=$? $(grep 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done
else
  V=$B/bench/dev/variant_time
  for op in gdn delta; do for s in "4 4096 16" "1 8192 16" "2 16384 8"; do
    q=$(( $(echo $s | cut -d' ' -f2) / 256 )) # a quarter of a sequence's chunks: the proposed default
    for e in REWY_CUDA_WIN=0 REWY_CUDA_WIN=$q REWY_CUDA_WIN=$((q / 2)); do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'win [0-9]+|own layout: saved [0-9.]+, bwd [0-9.]+ MiB|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [$e] $r"
    done
  done; done
  echo "$(el)"
  env REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1 REWY_TEST_NO_GRAPH=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "racecheck [WIN=1 CHAIN=1] rc=$? $(grep 'RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  REWY_CUDA_WIN=1 timeout 120 $T/test_random --seed 5 --count 400 > /tmp/tr.log 2>&1
  echo "test_random [WIN=1, seed 5, 400] rc=$? $(tail -1 /tmp/tr.log) $(el)"; grep -B2 -A3 FAIL /tmp/tr.log | head -20
fi
echo "total $(el)"
