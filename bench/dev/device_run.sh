#!/bin/bash
# device_run.sh: one device call = build, CUDA tests, compute-sanitizer, benchmark; logs under $OUT.
#   bench/dev/device_run.sh [build] [test] [sanitize] [fla-warm] [bench] [bench-rewy] [pytest] [overhead]   (default: build test sanitize)
# RB=build/cuda-vec picks another prebuilt library (default build/cuda-on); BENCH_ARGS adds bench_gpu.py options.
# FLA (the ignored copy under .ref/fla-src) must be carried to the device for 'bench'.
set -u
OUT=${OUT:-/tmp/rewy-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
steps="${*:-build test sanitize}"
RB=${RB:-build/cuda-on}
[ -x /usr/local/cuda/bin/nvcc ] && export CUDA_HOME=/usr/local/cuda
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/build/devlibs
summary="$OUT/summary.txt"
: > "$summary"
log() { echo "$*" | tee -a "$summary"; }
log "== $(date -u '+%F %T UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) nvcc $(nvcc --version | tail -1)"
for s in $steps; do
  t0=$(date +%s)
  case $s in
  build)
    # The device has no network to install OpenBLAS (pass BLAS=0 when building there): by default use the $RB prebuilt
    # here (make CUDA=1 BLAS=0 BUILD=$RB lib $RB/tests/cuda/test_cuda), carrying $RB/librewy.so and $RB/tests/cuda
    # (the test finds the library through its rpath; the static archive and objects need not travel).
    if [ "${BUILD_ON_DEVICE:-0}" = 1 ]; then
      make -j16 CUDA=1 BLAS=0 BUILD=$RB lib > "$OUT/build.log" 2>&1 &&
      make CUDA=1 BLAS=0 BUILD=$RB $RB/tests/cuda/test_cuda >> "$OUT/build.log" 2>&1
      rc=$?; log "build rc=$rc ($(($(date +%s)-t0)) s)"; [ $rc = 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
    else
      log "build: using the carried prebuilt $RB (BUILD_ON_DEVICE=1 to rebuild there)"
      [ -x $RB/tests/cuda/test_cuda ] || { log "no prebuilt test_cuda"; exit 1; }
    fi ;;
  test)
    timeout 400 $RB/tests/cuda/test_cuda > "$OUT/test_cuda.log" 2>&1
    rc=$?; log "test_cuda rc=$rc ($(($(date +%s)-t0)) s): $(tail -1 "$OUT/test_cuda.log")"
    grep -E "FAIL|graph|CUDA error" "$OUT/test_cuda.log" | head -40
    # the scans' wider value tiles (the test shapes take 16 on their own) and the forward scan's 8-warp blocks
    # and the wgmma scans (REWY_CUDA_SCAN_WG=1; 64 columns as two warpgroups per block, or one with WG2=0)
    # the forward scan's own output (the test shapes' grids are too small to take it unless told)
    # policy R's register chains (chain_scan.cu): 64-column blocks (=1) and the default's 128-column blocks (=2)
    for ch in 1 2; do
      REWY_CUDA_CHAIN=$ch timeout 400 $RB/tests/cuda/test_cuda > "$OUT/test_cuda_chain$ch.log" 2>&1
      log "test_cuda REWY_CUDA_CHAIN=$ch rc=$?: $(tail -1 "$OUT/test_cuda_chain$ch.log")"
      grep -E "FAIL|CUDA error" "$OUT/test_cuda_chain$ch.log" | head -20
    done
    for bv in 16 64; do
      REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=$bv timeout 400 $RB/tests/cuda/test_cuda > "$OUT/test_cuda_out$bv.log" 2>&1
      log "test_cuda REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=$bv rc=$?: $(tail -1 "$OUT/test_cuda_out$bv.log")"
      grep -E "FAIL|CUDA error" "$OUT/test_cuda_out$bv.log" | head -20
    done
    for bv in 32 64 64w8 wg16 wg32 wg64 wg64x1; do
      w8=0; [ $bv = 64w8 ] && w8=1
      wg=0; case $bv in wg*) wg=1;; esac
      wg2=1; [ $bv = wg64x1 ] && wg2=0
      b=${bv%w8}; b=${b#wg}; b=${b%x1}
      REWY_CUDA_SCAN_BV=$b REWY_CUDA_SCAN_8W=$w8 REWY_CUDA_SCAN_WG=$wg REWY_CUDA_SCAN_WG2=$wg2 timeout 400 $RB/tests/cuda/test_cuda > "$OUT/test_cuda_bv$bv.log" 2>&1
      log "test_cuda REWY_CUDA_SCAN_BV=$b REWY_CUDA_SCAN_8W=$w8 REWY_CUDA_SCAN_WG=$wg REWY_CUDA_SCAN_WG2=$wg2 rc=$?: $(tail -1 "$OUT/test_cuda_bv$bv.log")"
      grep -E "FAIL|CUDA error" "$OUT/test_cuda_bv$bv.log" | head -20
    done ;;
  sanitize)
    timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $RB/tests/cuda/test_cuda --quick > "$OUT/memcheck.log" 2>&1
    rc=$?; log "memcheck rc=$rc ($(($(date +%s)-t0)) s): $(grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1)"
    t0=$(date +%s)
    REWY_TEST_NO_GRAPH=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $RB/tests/cuda/test_cuda --quick > "$OUT/racecheck.log" 2>&1
    rc=$?; log "racecheck rc=$rc ($(($(date +%s)-t0)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/racecheck.log" | tail -1)"
    t0=$(date +%s)
    REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=64 REWY_TEST_NO_GRAPH=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $RB/tests/cuda/test_cuda --quick > "$OUT/racecheck64.log" 2>&1
    rc=$?; log "racecheck (64-column scan tiles) rc=$rc ($(($(date +%s)-t0)) s): $(grep -E "RACECHECK SUMMARY" "$OUT/racecheck64.log" | tail -1)"
    t0=$(date +%s)
    REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1 REWY_TEST_NO_GRAPH=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $RB/tests/cuda/test_cuda --quick > "$OUT/racecheck64w8.log" 2>&1
    rc=$?; log "racecheck (64-column tiles, 8-warp forward scan) rc=$rc ($(($(date +%s)-t0)) s): $(grep -E "RACECHECK SUMMARY" "$OUT/racecheck64w8.log" | tail -1)"
    t0=$(date +%s)
    REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64 REWY_TEST_NO_GRAPH=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $RB/tests/cuda/test_cuda --quick > "$OUT/racecheckwg.log" 2>&1
    rc=$?; log "racecheck (wgmma scans, 64-column tiles) rc=$rc ($(($(date +%s)-t0)) s): $(grep -E "RACECHECK SUMMARY" "$OUT/racecheckwg.log" | tail -1)" ;;
  bench-rewy)
    REWY_LIBRARY=$PWD/$RB/librewy.so timeout 300 python3 bench/bench_gpu.py --impl rewy --reps 30 ${BENCH_ARGS:-} \
      --json "$OUT/bench_rewy.jsonl" > "$OUT/bench_rewy.log" 2>&1
    rc=$?; log "bench-rewy rc=$rc ($(($(date +%s)-t0)) s)"; tail -40 "$OUT/bench_rewy.log" ;;
  fla-warm)
    # FLA's autotuning in minutes (session 17): twelve processes, one per (op, shape), fill Triton's compile cache in
    # parallel with their autotune results discarded (taken under load: TRITON_CACHE_AUTOTUNING=0); then one process on
    # the idle GPU autotunes every row from compile-cache hits and keeps FLA's choices on disk for 'bench'.
    mkdir -p .fla-cache/triton "$OUT/fla-warm"
    export TRITON_CACHE_DIR=$PWD/.fla-cache/triton FLA_DISABLE_BACKEND_DISPATCH=1
    for op in deltanet gdn; do for sh in 1x2048x4 1x8192x16 4x4096x16 8x2048x32 2x16384x8 16x1024x16; do
      PYTHONPATH=$PWD/.ref/fla-src TRITON_CACHE_AUTOTUNING=0 REWY_LIBRARY=$PWD/$RB/librewy.so timeout 420 \
        python3 bench/bench_gpu.py --impl fla --ops $op --shapes $sh --reps 1 --profile '' > "$OUT/fla-warm/$op-$sh.log" 2>&1 &
    done; done
    wait
    PYTHONPATH=$PWD/.ref/fla-src TRITON_CACHE_AUTOTUNING=1 REWY_LIBRARY=$PWD/$RB/librewy.so timeout 300 \
      python3 bench/bench_gpu.py --impl fla --reps 3 --profile '' > "$OUT/fla-warm.log" 2>&1
    rc=$?; log "fla-warm rc=$rc ($(($(date +%s)-t0)) s)" ;;
  bench)
    # FLA's autotuning (about 130 s per new shape) is kept on disk by Triton (TRITON_CACHE_AUTOTUNING) and its
    # results come back as $OUT/fla-autotune.tgz: unpack it into .fla-cache and carry .fla-cache next time, and
    # FLA only compiles its chosen configs. The results are FLA's own choices on this GPU, so timings stay fair.
    mkdir -p .fla-cache/triton
    TRITON_CACHE_DIR=$PWD/.fla-cache/triton TRITON_CACHE_AUTOTUNING=1 FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=$PWD/.ref/fla-src REWY_LIBRARY=$PWD/$RB/librewy.so \
      timeout ${BENCH_TIMEOUT:-500} python3 bench/bench_gpu.py --impl rewy,fla --reps 30 --time-limit ${BENCH_LIMIT:-420} --profile '' ${BENCH_ARGS:-} \
      --json "$OUT/bench.jsonl" > "$OUT/bench.log" 2>&1
    rc=$?; log "bench rc=$rc ($(($(date +%s)-t0)) s)"; tail -45 "$OUT/bench.log"
    (cd .fla-cache && find triton -name '*autotune*.json' | tar czf "$OUT/fla-autotune.tgz" -T -) ;;
  pytest)
    FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=$PWD/python:$PWD/.ref/fla-src REWY_LIBRARY=$PWD/$RB/librewy.so \
      timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -rs ${PYTEST_ARGS:-tests/python} > "$OUT/pytest.log" 2>&1
    rc=$?; log "pytest rc=$rc ($(($(date +%s)-t0)) s): $(tail -1 "$OUT/pytest.log")"
    grep -E "^FAILED|^ERROR|Error|rel err" "$OUT/pytest.log" | head -40 ;;
  overhead)
    PYTHONPATH=$PWD/python REWY_LIBRARY=$PWD/$RB/librewy.so timeout 120 python3 -m rewy._overhead --device cuda \
      > "$OUT/overhead.log" 2>&1
    rc=$?; log "overhead rc=$rc ($(($(date +%s)-t0)) s)"; cat "$OUT/overhead.log" ;;
  esac
done
cat "$summary"
