#!/bin/bash
# issue5_run.sh: issue 5's device evidence in one call, FLA's Triton compilation spread over processes:
# FLA's layers with rewy swapped in (one pytest process per operator, in parallel), the FLA comparison of
# GDN2, the Python overhead probe and the example's GPU training run. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/rewy-out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
RB=${RB:-build/cuda-on}
export FLA_DISABLE_BACKEND_DISPATCH=1 REWY_FLA_ONE_CONFIG=1 PYTHONPATH=$PWD/python:$PWD/.ref/fla-src \
  REWY_LIBRARY=$PWD/$RB/librewy.so TRITON_CACHE_DIR=$PWD/.fla-cache/triton
T=${T:-380}
# the overhead probe first, alone: Triton compiling in other processes would slow the host
timeout 150 python3 -m rewy._overhead --device cuda > "$OUT/overhead.log" 2>&1
for op in delta gdn kda gdn2; do
  timeout $T python3 -m pytest -q -rs -s "tests/python/test_fla_layers.py::test_layer_output[$op]" \
    "tests/python/test_fla_layers.py::test_layer_gradients[$op]" > "$OUT/layers_$op.log" 2>&1 &
done
timeout $T python3 -m pytest -q -rs -s tests/python/test_fla.py -k gdn2 > "$OUT/fla_gdn2.log" 2>&1 &
timeout 300 $RB/tests/cuda/test_cuda > "$OUT/test_cuda.log" 2>&1 &
timeout 200 python3 examples/train_lm.py --device cuda --out "$OUT/loss_curves_gpu.png" > "$OUT/train_lm_gpu.log" 2>&1
wait
echo "== test_cuda: $(tail -1 "$OUT/test_cuda.log")"; grep -E "FAIL|CUDA error" "$OUT/test_cuda.log" | head
echo "== train_lm: $(tail -3 "$OUT/train_lm_gpu.log" | tr '\r' '\n' | tail -3)"
for f in "$OUT"/layers_*.log "$OUT"/fla_gdn2.log; do
  echo "== $f"; grep -E "rel err|passed|failed|skipped|SKIP|Error" "$f" | head -12
done
echo "== overhead"; cat "$OUT/overhead.log"
eval "${EXTRA:-true}"
