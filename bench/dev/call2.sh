# one-off device call: per-kernel profile, ncu stall reasons, Python CUDA + FLA tests, overhead
export RB=build/cuda-vec
REWY_LIBRARY=$PWD/$RB/librewy.so timeout 150 python3 bench/bench_gpu.py --impl rewy --reps 5 --ops gdn,kda --shapes 1x8192x16 --profile 1x8192x16 > $OUT/prof.log 2>&1; echo prof rc=$?
grep -A30 "per-kernel" $OUT/prof.log | grep -v "^$" | head -60
timeout 120 ncu --clock-control none -k regex:"state_scan|pullback" -c 4 --section WarpStateStats --section SchedulerStats --section Occupancy --section SpeedOfLight \
  env REWY_LIBRARY=$PWD/$RB/librewy.so python3 bench/bench_gpu.py --impl rewy --reps 1 --ops gdn --shapes 1x8192x16 --profile= > $OUT/ncu.log 2>&1; echo ncu rc=$?
grep -E "  [a-z_]*(state_scan|pullback)|Stall|Issued Warp|No Eligible|Achieved Occupancy|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Block Limit" $OUT/ncu.log | head -60
export FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=$PWD/python:$PWD/.ref/fla-src REWY_LIBRARY=$PWD/$RB/librewy.so
timeout 60 python3 -m pytest -q -rs tests/python/test_ops.py tests/python/test_cuda.py -k cuda > $OUT/pytest_cuda.log 2>&1; echo "pytest cuda rc=$? $(tail -1 $OUT/pytest_cuda.log)"
timeout 200 python3 -m pytest -q -rs -s tests/python/test_fla.py tests/python/test_fla_layers.py > $OUT/pytest_fla.log 2>&1; echo "pytest fla rc=$? $(tail -1 $OUT/pytest_fla.log)"
grep -E "rel err|^FAILED|^SKIPPED|Error" $OUT/pytest_fla.log | head -40
timeout 60 python3 -m rewy._overhead --device cuda > $OUT/overhead.log 2>&1; echo overhead rc=$?; cat $OUT/overhead.log
