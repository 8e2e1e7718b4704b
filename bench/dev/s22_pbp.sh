#!/bin/bash
# A record of session 22: the variant it measured lost and is gone (docs/PERF.md, history); its force no longer exists.
# Session 22: ReWY's P = Aᵀ R̄ inside the fast pullback (Plan::pb_p, default where it fits) against its own pass
# (REWY_CUDA_PB_P=0, pullback_p.cu): the oracle matrix both ways and with the 64-column chains, the campaign, the
# variants' device time at GDN/DeltaNet (4,4096,16) and the per-kernel table, then the sanitizers on the default.
# Carried: .carry/bins.tar.xz (librewy.so, test_cuda, test_random, variant_time built here for sm_90a).
source "$(dirname "$0")/carried_bins.sh"
for v in "" REWY_CUDA_PB_P=0 REWY_CUDA_CHAIN=1; do
  env $v timeout 120 $T/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda ${v:-default} rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL|plan \(" /tmp/tc.log | head -6; cat /tmp/tc.log >> $OUT/test_cuda.log
done
for s in 0 500 1000 1500; do timeout 120 $T/test_random --seed 3 --start $s --count 500 > /tmp/rnd$s.log 2>&1 & done; wait
cat /tmp/rnd*.log > $OUT/campaign.log; grep -h "^FAIL configuration" $OUT/campaign.log | head; grep -h "configurations run" $OUT/campaign.log
V=$B/bench/dev/variant_time
for op in gdn delta; do
  for v in "" REWY_CUDA_PB_P=0; do
    for shape in "4 4096 16" "1 8192 16" "8 2048 32"; do
      echo "[$op ${v:-default} $shape]"; env $v timeout 60 $V $op $shape | tail -2
    done
  done
done 2>&1 | tee $OUT/variants.log
for v in "" REWY_CUDA_PB_P=0; do
  echo "[ncu gdn ${v:-default}]"; ( [ -n "$v" ] && export $v; kernel_table $V gdn 4 4096 16 )
done 2>&1 | tee $OUT/kernels.log
echo "timing done $(el)"
{ timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "ERROR SUMMARY" | tail -1
  REWY_TEST_NO_GRAPH=1 timeout ${RACE_S:-200} compute-sanitizer --tool racecheck --error-exitcode 9 $T/test_cuda --quick 2>&1 | grep -E "RACECHECK SUMMARY|passed" | tail -2
} > $OUT/sanitizers.log; cat $OUT/sanitizers.log; echo "total $(el)"
