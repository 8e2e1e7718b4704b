#!/bin/bash
# Session 26: policy R's time windows (Plan::win) on the device, in two calls (each under 600 s).
#   bash bench/dev/s26_win.sh check   the oracle matrix at the default and under each window forcing of `make test-cuda`,
#                                     memcheck with windows over the scan pair and over the register chains
#   bash bench/dev/s26_win.sh time    GPU-bound forward/backward ms and the workspace at the long suite shapes, windows
#                                     off / the default / 8-chunk windows; racecheck; the random campaign with windows
# Carried: .carry/bins.tar.xz (librewy.so, test_cuda, test_random, variant_time for sm_90a). Output also in $OUT/run.log.
source "$(dirname "$0")/carried_bins.sh"
if [ "${1:-check}" = check ]; then
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
    for e in REWY_CUDA_WIN=0 "" REWY_CUDA_WIN=8; do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'win [0-9]+|bwd [0-9.]+ MiB|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [${e:-default}] $r"
    done
  done; done
  echo "$(el)"
  env REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1 REWY_TEST_NO_GRAPH=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
  echo "racecheck [WIN=1 CHAIN=1] rc=$? $(grep 'RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  REWY_CUDA_WIN=1 timeout 120 $T/test_random --seed 5 --count 400 > /tmp/tr.log 2>&1
  echo "test_random [WIN=1, seed 5, 400] rc=$? $(tail -1 /tmp/tr.log) $(el)"; grep -B2 -A3 FAIL /tmp/tr.log | head -20
fi
echo "total $(el)"
