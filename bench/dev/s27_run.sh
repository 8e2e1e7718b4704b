#!/bin/bash
# Sessions 26–28: policy R's time windows (Plan::win) on the device, one mode a call (each under 600 s). Carried:
# .carry/bins.tar.xz (bench/dev/s24_build.sh). Output also in $OUT/run.log. Modes run in the order given. Session 28 made them the default and
# moved the forward's checkpoints into its one walk (Prob::ck). (Session 27's warp-specialized chains and persistent
# pullback, measured and dropped, kept their modes on the branch dev/chain-ws-pb-persist.)
#   check   the oracle matrix (test_cuda) at the default and under window forcings over each forward path (plain scan
#           and output, register chain, fused-output scan), memcheck
#   check2  more forcings (64-column forward chain, register chains), memcheck, the random campaign with windows
#   race    racecheck with windows
#   fwd     the forward chain (A-and-V form) forced at each width on the oracle matrix, then GPU-bound ms (session 31)
#   time    GPU-bound forward/backward ms and the layout's MiB at the long suite shapes, windows off / default
#   kernels each kernel's summed device time and launches at GDN (4,4096,16) (ncu), windows off and by default
#   prof    ncu sections of the forward's kkt_fast and chain at GDN (4,4096,16) (session 30)
#   src     source counters of one launch (KREGEX) at GDN (4,4096,16) (session 30)
#   kkt     session 30's kkt_fast by row strips (.carry/bins_kkt.tar.xz): oracle, sanitizers, times against main's
#   sm80    test_cuda built as sm_80 PTX, default and with the chains forced (session 31)
#   api     the public Python API (bench/bench_api.py, rewy alone): times and peak memory
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
for mode in ${@:-check}; do case $mode in
check)
  matrix "" REWY_CUDA_WIN=1 "REWY_CUDA_WIN=3 REWY_CUDA_FWD_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1"
  sanitize memcheck "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1"
  echo "$(el)" ;;
check2)
  matrix "REWY_CUDA_WIN=2 REWY_CUDA_FWD_CHAIN=64" "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_OUT=0 REWY_CUDA_CHAIN=1"
  sanitize memcheck REWY_CUDA_WIN=1
  REWY_CUDA_WIN=1 timeout 120 $T/test_random --seed 6 --count 300 > /tmp/tr.log 2>&1
  echo "test_random [WIN=1, seed 6, 300] rc=$? $(tail -1 /tmp/tr.log) $(el)"; grep -B2 -A3 FAIL /tmp/tr.log | head -20 ;;
race)
  sanitize racecheck REWY_CUDA_WIN=1 ;;
fwd) # session 31: the forward chain's A-and-V form, forced onto test_cuda's small grids at each width, and its times
  matrix "REWY_CUDA_WIN=2 REWY_CUDA_FWD_CHAIN=64" "REWY_CUDA_FWD_CHAIN=16" "REWY_CUDA_FWD_CHAIN=32" "REWY_CUDA_WIN=2 REWY_CUDA_FWD_CHAIN=128"
  sanitize memcheck REWY_CUDA_FWD_CHAIN=128
  for op in gdn delta; do for s in ${TSHAPES:-4x4096x16 8x2048x32 16x1024x16 1x8192x16}; do s=${s//x/ }
    r=$(timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
    echo "[$op $s] $r"
  done; done ;;
time)
  for op in gdn delta; do for s in "1 8192 16" "4 4096 16" "2 16384 8"; do
    for e in REWY_CUDA_WIN=0 REWY_TEST_DEFAULT=1; do
      r=$(env $e timeout 30 $V $op $s 2>&1 | tr -s ' ' | grep -oE 'win [0-9]+|own layout: saved [0-9.]+, bwd [0-9.]+ MiB|(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [$e] $r"
    done
  done; done ;;
kernels) # where the windows' backward time goes: each kernel's device time (ncu), windows off and by default
  for e in REWY_CUDA_WIN=0 REWY_TEST_DEFAULT=1; do
    echo "[ncu gdn 4 4096 16, $e]"; ( export $e; kernel_table $V gdn 4 4096 16 | awk '{k = substr($0, index($0, "us") + 4);
      sub(/^void /, "", k); sub(/[<(].*/, "", k); t[k] += $1; n[k]++}
      END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn )
  done ;;
prof) # session 30: where kernels (KREGEX; default the forward's two) spend their time at GDN (4,4096,16): ncu sections, one launch each
  for k in ${KREGEX:-kkt_fast chain_pair}; do
    timeout 120 ncu --clock-control none -k "regex:$k" -c 1 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats --section Occupancy \
      --section ComputeWorkloadAnalysis $V gdn 4 4096 16 once > $OUT/prof_$k.txt 2>&1
    echo "[ncu $k] rc=$? $(el)"; grep -E "^  [A-Za-z]|Duration|Throughput|Issued|Eligible|Stall|Pipe|Occupancy|Registers|Shared Memory Config|Block Size|Grid Size" $OUT/prof_$k.txt | grep -vE "^\s*$" | head -60
  done ;;
src) # session 30: source counters of kernel launches (KREGEX, space-separated, default kkt_fast) at GDN (4,4096,16): per SASS and
     # per CUDA line tables under $OUT (read them here with bench/dev/ncu_sass_summary.py)
  for kr in ${KREGEX:-kkt_fast}; do nm=src_${kr//[^a-z_]/}
  timeout 200 ncu --clock-control none -k "regex:$kr" -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -o /tmp/$nm -f $V gdn 4 4096 16 once > /dev/null 2>&1
  echo "[ncu src $kr] rc=$? $(el)"
  ncu -i /tmp/$nm.ncu-rep --page source --csv --print-source sass > $OUT/$nm.csv 2>&1
  ncu -i /tmp/$nm.ncu-rep --page source --csv --print-source cuda > $OUT/$nm.cuda.csv 2>&1
  python3 bench/dev/ncu_sass_summary.py $OUT/$nm.csv 25 | head -60; done ;;
kkt) # session 30: a candidate's binaries (.carry/bins_kkt.tar.xz, build/kkt) against main's (build/cuda-on): oracle,
     # sanitizers, GPU-bound times, and the device time of the kernels KGREP names (default kkt_fast). CAND_ENV: forcings
     # for the candidate's runs only (a test-forced candidate, e.g. REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN_A=1);
     # CAND_BINS: its pack (default .carry/bins_kkt.tar.xz), whose paths are build/kkt/...; CAND_TEST_ENV: forcings for
     # its oracle and sanitizer runs only, ';'-separated, each run once (default: CAND_ENV; session 31: a default-on
     # candidate whose kernels the test shapes reach only when forced, e.g. "REWY_CUDA_FWD_CHAIN=64;REWY_CUDA_FWD_CHAIN=128")
  tar xJf ${CAND_BINS:-.carry/bins_kkt.tar.xz}; N=build/kkt; CE=${CAND_ENV:-}
  IFS=';' read -ra TES <<< "${CAND_TEST_ENV:-$CE}"; [ ${#TES[@]} -eq 0 ] && TES=("")
  for te in "${TES[@]}"; do
    for e in "" REWY_CUDA_WIN=1; do
      env $te $e timeout 100 $N/tests/cuda/test_cuda > /tmp/tc.log 2>&1; echo "new test_cuda [$te $e] rc=$? $(tail -1 /tmp/tc.log) $(el)"
      grep -E "FAIL" /tmp/tc.log | head -4
    done
    env $te REWY_TEST_NO_GRAPH=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $N/tests/cuda/test_cuda --quick > /tmp/cs.log 2>&1
    echo "new memcheck [$te] rc=$? $(grep -E 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done
  TE=${TES[0]}
  env $TE timeout 100 $N/tests/cuda/test_random --seed 7 --count 150 > /tmp/tr.log 2>&1
  echo "new test_random [seed 7, 150] rc=$? $(tail -1 /tmp/tr.log) $(el)"
  for op in gdn delta; do for s in ${TSHAPES:-4x4096x16 8x2048x32 16x1024x16 1x8192x16}; do s=${s//x/ }
    for vt in $V $N/bench/dev/variant_time; do
      ce=; [ $vt != $V ] && ce=$CE
      r=$(env $ce timeout 30 $vt $op $s 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | tr '\n' ' ')
      echo "[$op $s] [${vt%%/bench*}] $r"
    done
  done; done
  for vt in $V $N/bench/dev/variant_time; do
    ce=; [ $vt != $V ] && ce=$CE
    echo "[ncu gdn 4 4096 16, ${vt%%/bench*}]"; ( [ -n "$ce" ] && export $ce; kernel_table $vt gdn 4 4096 16 ) | grep -E "${KGREP:-kkt_fast}"
  done
  echo "$(el)"
  env $TE REWY_TEST_NO_GRAPH=1 timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 $N/tests/cuda/test_cuda --quick > /tmp/cs.log 2>&1
  echo "new racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)" ;;
sm80) # session 31: test_cuda as sm_80 PTX (JIT-compiled here with __CUDA_ARCH__ = 800: the mma.sync paths, no wgmma),
      # at the default and with the register chains forced (build/cuda-80 in .carry/bins.tar.xz)
  for e in "" "REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_CHAIN=1" "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1"; do
    env $e timeout 200 build/cuda-80/tests/cuda/test_cuda --quick > /tmp/t80.log 2>&1
    echo "sm_80 PTX test_cuda --quick [$e] rc=$? $(tail -1 /tmp/t80.log) $(el)"; grep -E "FAIL" /tmp/t80.log | head -3
  done ;;
api)
  timeout 250 python3 bench/bench_api.py --ops gdn,deltanet --impls rewy > /tmp/api.log 2>&1
  echo "bench_api rc=$? $(el)"; tail -30 /tmp/api.log ;;
esac; done
echo "total $(el)"
