#!/bin/bash
# Sessions 26–27: policy R's time windows (Plan::win) on the device, one mode a call (each under 600 s). Carried:
# .carry/bins.tar.xz (bench/dev/s24_build.sh). Output also in $OUT/run.log. (Session 27's warp-specialized chains and
# persistent pullback, measured and dropped, kept their modes on the branch dev/chain-ws-pb-persist.)
#   check1  the oracle matrix (test_cuda) at the default and under the first window forcings of `make test-cuda`
#   check2  the other window forcings (32-column and 8-warp scans included), memcheck
#   time    racecheck first; GPU-bound forward/backward ms at the long suite shapes with windows off / 4 (the proposed
#           default) / 8; the random campaign with windows
#   api     the public Python API (bench/bench_api.py, rewy alone): the library against librewy_win.so (windows as its
#           default, measurement only): times and peak memory
source "$(dirname "$0")/carried_bins.sh"
V=$B/bench/dev/variant_time
matrix() { # test_cuda under each forcing given
  for e in "$@"; do
    env $e timeout 100 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$e] rc=$? $(tail -1 /tmp/tc.log) $(el)"
    grep -E "FAIL|windows of" /tmp/tc.log | head -4
  done
}
sanitize() { # TOOL then forcings: compute-sanitizer TOOL over test_cuda --quick under each
  local tool=$1; shift
  for e in "$@"; do
    env $e REWY_TEST_NO_GRAPH=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
    echo "$tool [$e] rc=$? $(grep -E '(ERROR|RACECHECK) SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done
}
case "${1:-check1}" in
check1)
  matrix "" REWY_CUDA_WIN=1 REWY_CUDA_WIN=3 "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_WF=0" "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" \
    "REWY_CUDA_WIN=3 REWY_CUDA_CHAIN=2" ;;
check2)
  matrix "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1" "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=64" \
    "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=32" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1"
  sanitize memcheck REWY_CUDA_WIN=1 "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1" ;;
time)
  sanitize racecheck "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" REWY_CUDA_WIN=1
  for op in gdn delta; do for s in "4 4096 16" "1 8192 16" "2 16384 8"; do
    q=$(( $(echo $s | cut -d' ' -f2) / 256 )) # a quarter of a sequence's chunks: the proposed default
    for e in REWY_CUDA_WIN=0 REWY_CUDA_WIN=$q REWY_CUDA_WIN=$((q / 2)); do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'win [0-9]+|own layout: saved [0-9.]+, bwd [0-9.]+ MiB|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [$e] $r"
    done
  done; done
  echo "$(el)"
  REWY_CUDA_WIN=1 timeout 120 $T/test_random --seed 5 --count 400 > /tmp/tr.log 2>&1
  echo "test_random [WIN=1, seed 5, 400] rc=$? $(tail -1 /tmp/tr.log) $(el)"; grep -B2 -A3 FAIL /tmp/tr.log | head -20 ;;
api)
  for lib in librewy.so librewy_win.so; do
    REWY_LIBRARY=$PWD/$B/$lib timeout 250 python3 bench/bench_api.py --ops gdn,deltanet --impls rewy \
      --shapes 4x4096x16,1x8192x16,2x16384x8 > /tmp/api.log 2>&1
    echo "bench_api [$lib] rc=$? $(el)"; tail -24 /tmp/api.log
  done ;;
esac
echo "total $(el)"
