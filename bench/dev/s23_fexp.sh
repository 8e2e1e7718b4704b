#!/bin/bash
# Session 23, third call: gexp as __expf (ex2.approx of x·log2 e) instead of expf. Static PTX of the forward chain's
# loop: 1,683 → 1,468 instructions (bench/dev/ptx_loop_count.py); GDN's chain step measured 1.2–1.3 µs longer than
# DeltaNet's (s23_width.sh). Carried: .carry/bins.tar.xz (main's kernels with expf, the baseline, build/cuda-on) and
# .carry/bins_fexp.tar.xz (__expf, build/fexp). The oracle matrix and the campaign on __expf, then GPU-bound time of
# both builds at the six shapes (GDN; DeltaNet takes no exponential), and the forward chain on __expf.
source "$(dirname "$0")/carried_bins.sh"
mkdir -p build/fexp; tar xJf .carry/bins_fexp.tar.xz --transform 's,build/cuda-on,build/fexp,'
F=build/fexp
for v in "" REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_CHAIN=2; do
  env $v timeout 120 $F/tests/cuda/test_cuda > /tmp/tc.log 2>&1; echo "test_cuda [$v] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6; cat /tmp/tc.log >> $OUT/test_cuda.log
done
for st in 0 500 1000 1500; do timeout 120 $F/tests/cuda/test_random --seed 1 --start $st --count 500 > /tmp/rnd$st.log 2>&1 & done; wait
cat /tmp/rnd*.log > $OUT/campaign.log; grep -h "^FAIL configuration" $OUT/campaign.log | head; grep -h "configurations run" $OUT/campaign.log
echo "campaign $(el)"
for sh in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
  echo "[gdn $sh expf]   $(timeout 60 $B/bench/dev/variant_time gdn $sh | grep -E 'forward|backward' | tr -s ' ' | tr '\n' ' ')"
  echo "[gdn $sh __expf] $(timeout 60 $F/bench/dev/variant_time gdn $sh | grep -E 'forward|backward' | tr -s ' ' | tr '\n' ' ')"
  echo "[gdn $sh __expf fwd chain] $(REWY_CUDA_FWD_CHAIN=1 timeout 60 $F/bench/dev/variant_time gdn $sh | grep forward | tr -s ' ')"
done 2>&1 | tee $OUT/times.log
for v in REWY_CUDA_FWD_CHAIN=0 REWY_CUDA_FWD_CHAIN=64; do
  echo "[ncu __expf gdn 4x4096x16 $v]"; ( export $v; kernel_table $F/bench/dev/variant_time gdn 4 4096 16 )
done 2>&1 | sed 's/(Prob.*//' | tee $OUT/kernels.log
echo "total $(el)"
