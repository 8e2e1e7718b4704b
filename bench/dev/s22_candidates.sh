#!/bin/bash
# A record of session 22: REWY_CUDA_CHAIN=3 lost and is gone (docs/PERF.md, history); the other variants remain.
# Prepared in session 21 for the next device call: branch s22-candidates = main + vec-fast-hdiag (H_q's diagonal out of
# the fast vector pullback's tf32 products; test_cuda's cases_tiny_dg) + chain-2sm (REWY_CUDA_CHAIN=3: single-stage
# 64-column chain blocks, two per SM; bench/dev/variant_time), none of it run on a GPU yet. Build here, then carry:
#   make -j2 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=build/cuda-on lib \
#     build/cuda-on/tests/cuda/test_cuda build/cuda-on/tests/cuda/test_random build/cuda-on/bench/dev/variant_time
#   tar cf - build/cuda-on/librewy.so build/cuda-on/tests/cuda/test_cuda build/cuda-on/tests/cuda/test_random \
#     build/cuda-on/bench/dev/variant_time | xz -9 -T2 > .carry/bins.tar.xz
# Then: the oracle matrix (default and CHAIN=3), the campaign, the sanitizers on CHAIN=3, and the variants' device
# time at the models' shape (GDN, DeltaNet (4,4096,16), model-like gates). Logs under $OUT; about 4 minutes.
source "$(dirname "$0")/carried_bins.sh"
timeout 120 $T/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $(tail -1 $OUT/test_cuda.log) $(el)"
grep -E "FAIL" $OUT/test_cuda.log | head -8
REWY_CUDA_CHAIN=3 timeout 120 $T/test_cuda > $OUT/test_cuda_chain3.log 2>&1
echo "test_cuda CHAIN=3 rc=$? $(tail -1 $OUT/test_cuda_chain3.log) $(el)"; grep -E "FAIL" $OUT/test_cuda_chain3.log | head -8
for s in 0 500 1000 1500; do timeout 120 $T/test_random --seed 1 --start $s --count 500 > /tmp/rnd$s.log 2>&1 & done; wait
cat /tmp/rnd*.log > $OUT/campaign.log; grep -h "^FAIL configuration" $OUT/campaign.log | head; grep -h "configurations run" $OUT/campaign.log
{ REWY_CUDA_CHAIN=3 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "ERROR SUMMARY" | tail -1
  REWY_CUDA_CHAIN=3 REWY_TEST_NO_GRAPH=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "RACECHECK SUMMARY" | tail -1
} > $OUT/sanitizers.log; cat $OUT/sanitizers.log; echo "sanitizers $(el)"
V=$B/bench/dev/variant_time
for op in gdn delta; do
  for v in "" REWY_CUDA_CHAIN=3 REWY_CUDA_CHAIN=2 REWY_CUDA_SCAN_8W=1 REWY_CUDA_SCAN_BV=32 REWY_CUDA_SCAN_OUT=0 \
           REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BESIDE=0; do
    echo "[$op ${v:-default}]"; env $v timeout 60 $V $op 4 4096 16 | tail -3
  done
done 2>&1 | tee $OUT/variants.log
# per-kernel device time (ncu, one forward and one backward each, clocks and caches left alone): GDN (4,4096,16)
for v in "" REWY_CUDA_CHAIN=3 REWY_CUDA_SCAN_OUT=0; do
  echo "[ncu gdn ${v:-default}]"; ( [ -n "$v" ] && export $v; kernel_table $V gdn 4 4096 16 )
done 2>&1 | tee $OUT/kernels.log
echo "total $(el)"
