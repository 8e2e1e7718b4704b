#!/bin/bash
# Prepared in session 19 for the next device call, after merging branch kda-blocked-cuda (the GPU blocked intra,
# compiled but never run): build here, then carry the binaries, e.g.
#   make -j2 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=build/cuda-on lib \
#     build/cuda-on/tests/cuda/test_cuda build/cuda-on/tests/cuda/test_random
#   tar cf - build/cuda-on/librewy.so build/cuda-on/tests/cuda/test_cuda build/cuda-on/tests/cuda/test_random | xz -9 -T1 > .carry/bins.tar.xz
# (xz -9: its 64 MiB window shares the identical CUDA code of the three files; about 14 MB).
# Then: the oracle matrix (KDA/GDN2 strong decay and resets now take the blocked kernels), memcheck and racecheck,
# the CUDA l2norm (y form) and gate tests, the random campaign, rewy's layer call per operator. Logs under $OUT.
source "$(dirname "$0")/carried_bins.sh"
timeout 400 $T/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(tail -1 $OUT/test_cuda.log) $(el)"
grep -E "FAIL" $OUT/test_cuda.log | head -20
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(el)"
REWY_TEST_NO_GRAPH=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -1) $(el)"
timeout 60 python3 -m pytest -q -k "cuda or errors or gate" tests/python/test_transforms.py 2>&1 | tail -1
for s in 0 500 1000 1500; do timeout 200 $T/test_random --seed 1 --start $s --count 500 > $OUT/rnd$s.log 2>&1 & done; wait
grep -h "^FAIL configuration" $OUT/rnd*.log | head -30; grep -h "configurations run" $OUT/rnd*.log
timeout 90 python3 bench/dev/layer_profile.py > $OUT/profile.txt 2>&1; grep -E "whole call|  [0-9.]+ ms x" $OUT/profile.txt | head -30
echo "total $(el)"
