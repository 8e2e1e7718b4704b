#!/bin/bash
# variants_run.sh: one device call comparing prebuilt library variants (each built here into build/<name>,
# carried): per variant test_cuda (worst error / tolerance over the matrix) and bench_gpu.py (rewy only).
#   VARIANTS="cuda-dev cuda-grid" OPS=gdn SHAPES=8x2048x32,2x16384x8 PROFILE=8x2048x32 bench/dev/variants_run.sh
set -u
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
echo "== $(date -u '+%F %T UTC') $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for vname in ${VARIANTS}; do
  RB=build/$vname
  if [ "${TEST:-1}" = 1 ]; then
    LD_LIBRARY_PATH=$PWD/$RB timeout 200 $RB/tests/cuda/test_cuda > "$OUT/test_$vname.log" 2>&1
    echo "[$vname] test rc=$? $(tail -1 "$OUT/test_$vname.log")"
    awk '/worst err\/tol/ { for (i = 1; i <= NF; i++) { if ($i == "fwd") f = ($(i+1) > f ? $(i+1) : f);
         if ($i == "WY") w = ($(i+1) > w ? $(i+1) : w); if ($i == "ReWY") r = ($(i+1) > r ? $(i+1) : r) } }
         END { printf "[%s] max worst err/tol: fwd %.3f WY %.3f ReWY %.3f\n", v, f, w, r }' v=$vname "$OUT/test_$vname.log"
    grep -E "FAIL" "$OUT/test_$vname.log" | head -5
  fi
  REWY_LIBRARY=$PWD/$RB/librewy.so timeout 300 python3 bench/bench_gpu.py --impl rewy --reps 30 --ops ${OPS:-gdn} \
    --shapes ${SHAPES:-8x2048x32} --profile "${PROFILE:-}" > "$OUT/bench_$vname.log" 2>&1
  echo "[$vname] bench rc=$?"; grep -vE "^\s*$" "$OUT/bench_$vname.log" | tail -${TAILN:-30}
done
