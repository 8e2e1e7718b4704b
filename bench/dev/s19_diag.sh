#!/bin/bash
# Session 19, call 1: saved_check after b62cf2d, the 20 failing configurations of session 18's campaign
# (seed 1) verbose, and the all-gates campaign (seed 2, 300) to name its 3 failures. Binaries built here
# (sm_90a) and carried as .carry/bins.tar.xz. Verbose tables under $OUT.
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -x build/cuda-on/tests/cuda/test_random ] || tar xJf .carry/bins.tar.xz; T=build/cuda-on/tests/cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== saved_check"; $T/saved_check 2>&1 | tail -6
for s in 86 1169 844 234 386 635 707 724 749 754 861 912 922 1192 1211 1307 1618 1731 1760 1876; do
  $T/test_random --seed 1 --start $s --count 1 --verbose > $OUT/v1_$s.txt 2>&1
done
cat $OUT/v1_*.txt > $OUT/verbose_seed1.txt; rm $OUT/v1_*.txt
grep -E "^FAIL configuration" $OUT/verbose_seed1.txt
for s0 in 0 100 200; do timeout 200 $T/test_random --seed 2 --start $s0 --count 100 --all-gates > $OUT/ag$s0.txt 2>&1 & done; wait
cat $OUT/ag0.txt $OUT/ag100.txt $OUT/ag200.txt > $OUT/allgates.txt; rm $OUT/ag*0.txt
grep -E "^FAIL configuration|configurations run" $OUT/allgates.txt
for s in $(grep -oE "^FAIL configuration [0-9]+" $OUT/allgates.txt | awk '{print $3}'); do
  $T/test_random --seed 2 --start $s --count 1 --all-gates --verbose >> $OUT/verbose_seed2.txt 2>&1
done
echo done
