#!/bin/bash
# issue4_run.sh: issue 4's evidence (KDA, GDN2 against FLA in one process, six shapes, both policies), on the device.
#   bench/dev/issue4_run.sh tune    FLA's autotuning for H = 8 (2,16384,8), the one H not yet in .fla-cache
#                                   (about 4 min for KDA; GDN2 reuses most of KDA's kernels); unpack the returned
#                                   fla-autotune.tgz into .fla-cache
#   bench/dev/issue4_run.sh all     test_cuda, then both ops on all six shapes (every H cached: about 3 min)
# Carry RB's librewy.so and tests/cuda, .ref and .fla-cache. Results: $OUT/{kda,gdn2}/bench.{log,jsonl}.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rewy-out}
export OUT RB=${RB:-build/cuda-on}
shapes=1x2048x4,1x8192x16,4x4096x16,8x2048x32,2x16384x8,16x1024x16
case ${1:-all} in
tune)
  BENCH_ARGS="--ops kda,gdn2 --shapes 2x16384x8" BENCH_TIMEOUT=560 BENCH_LIMIT=500 bash bench/dev/device_run.sh bench ;;
all)
  bash bench/dev/device_run.sh test > /dev/null; head -2 "$OUT/summary.txt"
  for op in kda gdn2; do
    BENCH_ARGS="--ops $op --shapes $shapes" BENCH_TIMEOUT=250 BENCH_LIMIT=200 bash bench/dev/device_run.sh bench > /dev/null
    mkdir -p "$OUT/$op" && mv "$OUT/bench.log" "$OUT/bench.jsonl" "$OUT/$op/"
    grep -E "^\| $op |geomean" "$OUT/$op/bench.log"
  done ;;
esac
