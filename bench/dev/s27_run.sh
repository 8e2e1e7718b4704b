#!/bin/bash
# Sessions 26–27: policy R's time windows (Plan::win), the persistent pullback (Plan::pb_persist) and the warp-specialized
# chains (Plan::fwd_ws, bwd_ws) on the device, one
# mode a call (each under 600 s). Carried: .carry/bins.tar.xz (bench/dev/s24_build.sh). Output also in $OUT/run.log.
#   check1  the oracle matrix (test_cuda) at the default and under the first window forcings of `make test-cuda`
#   check2  the other window forcings, the persistent pullback's (3 blocks: each walks several units; one per SM),
#           memcheck of both
#   time    racecheck of both first; GPU-bound forward/backward ms at the long suite shapes with windows off / 4 (the
#           proposed default) / 8; the random campaign with windows
#   pb      the persistent pullback against the plain one: GPU-bound backward ms at the six suite shapes (GDN, DeltaNet),
#           then each kernel's time at GDN (4,4096,16) both ways (ncu)
#   ws      the warp-specialized chains (chain_ws.cu): the oracle matrix (also with time windows), memcheck, racecheck,
#           synccheck (a hang shows as the step's timeout)
#   wst     their GPU-bound forward and backward ms at the six shapes against the default, and each kernel's time at
#           GDN (4,4096,16) both ways
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
    "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=32" REWY_CUDA_PB_PERSIST=3 REWY_CUDA_PB_PERSIST=1 "REWY_CUDA_PB_PERSIST=2 REWY_CUDA_WIN=3"
  sanitize memcheck REWY_CUDA_WIN=1 "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" REWY_CUDA_PB_PERSIST=3 ;;
time)
  sanitize racecheck "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" REWY_CUDA_PB_PERSIST=3
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
pb)
  for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
    for e in REWY_CUDA_PB_PERSIST=0 REWY_CUDA_PB_PERSIST=1; do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'pb_persist [0-9]+|backward median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [$e] $r"
    done
  done; done
  for e in REWY_CUDA_PB_PERSIST=0 REWY_CUDA_PB_PERSIST=1; do
    echo "kernels, GDN (4,4096,16) [$e]"; (export $e; kernel_table $V gdn 4 4096 16)
  done ;;
ws)
  WS="REWY_CUDA_FWD_WS=1 REWY_CUDA_BWD_WS=1"
  matrix "$WS" "$WS REWY_CUDA_WIN=1"
  sanitize memcheck "$WS"
  sanitize racecheck "$WS"
  sanitize synccheck "$WS" ;;
ws1) # one call that says most if only one is lent: the matrix, GDN times at the six shapes, memcheck, the matrix with windows
  WS="REWY_CUDA_FWD_WS=1 REWY_CUDA_BWD_WS=1"
  matrix "$WS"
  for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
    for e in "REWY_CUDA_FWD_WS=0 REWY_CUDA_BWD_WS=0" "$WS"; do
      r=$(env $e timeout 30 $V gdn $s 2>&1 | tr -s ' ' | grep -oE 'fwd_ws [0-9]+ bwd_ws [0-9]+|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[gdn $s] [$e] $r"
    done
  done
  echo "$(el)"
  sanitize memcheck "$WS"
  matrix "$WS REWY_CUDA_WIN=1" ;;
wst)
  WS="REWY_CUDA_FWD_WS=1 REWY_CUDA_BWD_WS=1"
  for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
    for e in "REWY_CUDA_FWD_WS=0 REWY_CUDA_BWD_WS=0" "$WS"; do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'fwd_chain [0-9]+ fwd_ws [0-9]+ bwd_ws [0-9]+|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [$e] $r"
    done
  done; done
  for e in "REWY_CUDA_FWD_WS=0 REWY_CUDA_BWD_WS=0" "$WS"; do
    echo "kernels, GDN (4,4096,16) [$e]"; (export $e; kernel_table $V gdn 4 4096 16)
  done ;;
diag) # each kernel's time, the default against the ws chains, at GDN (1,8192,16) and (4,4096,16)
  for s in "1 8192 16" "4 4096 16"; do for e in "REWY_CUDA_FWD_WS=0 REWY_CUDA_BWD_WS=0" "REWY_CUDA_FWD_WS=1 REWY_CUDA_BWD_WS=1"; do
    echo "kernels, GDN ($s) [$e]"; (export $e; kernel_table $V gdn $s)
  done; done ;;
api)
  for lib in librewy.so librewy_win.so; do
    REWY_LIBRARY=$PWD/$B/$lib timeout 250 python3 bench/bench_api.py --ops gdn,deltanet --impls rewy \
      --shapes 4x4096x16,1x8192x16,2x16384x8 > /tmp/api.log 2>&1
    echo "bench_api [$lib] rc=$? $(el)"; tail -24 /tmp/api.log
  done ;;
esac
echo "total $(el)"
