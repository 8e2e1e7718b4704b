#!/bin/bash
# The first device call after session 24 (which had none), about 9 minutes: is the forward register chain with its
# output (REWY_CUDA_FWD_CHAIN) correct and faster, and what does it give FLA's GDN model end to end?
# 1. FLA's GDN and DeltaNet models compile in the background (Triton cache under .fla-cache).
# 2. The oracle matrix: default (which carries 70bcc68's chain_pair change, never run before), the forward chain at
#    the plan's width and at 64 columns; memcheck on the latter; the gate tests (session 24's gate kernels).
# 3. GPU-bound forward ms, default against the forward chain at the plan's width, GDN and DeltaNet, six shapes.
# 4. bench/e2e.py, GDN then DeltaNet (as far as the call's time reaches), FLA then rewy in one process each, with
#    librewy_fo.so (the forward chain as default) where step 2 passed, else librewy.so.
# Carried: .carry (bins.tar.xz from bench/dev/s24_build.sh, e2e/fla.tar.xz from .ref/peer_fla.sh).
# Then bench/dev/s24_check.sh (the rest: CHAIN=2, campaign, racecheck, ncu) if the budget allows.
source "$(dirname "$0")/carried_bins.sh"
mkdir -p /tmp/fla /tmp/e2e .fla-cache/triton && tar xJf .carry/e2e/fla.tar.xz -C /tmp/fla
FLAENV="PYTHONPATH=$PWD/python:/tmp/fla FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$PWD/.fla-cache/triton"
for m in gdn delta; do
  env $FLAENV TRITON_CACHE_AUTOTUNING=0 FLA_CACHE_RESULTS=0 timeout 300 python3 bench/e2e.py --batch 4 --models $m \
    --warm-only $m:fla --prewarm off > $OUT/warm-$m.log 2>&1 &
done
ok=1
for v in "" REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN=64; do
  env $v timeout 90 $T/test_cuda > /tmp/tc.log 2>&1; rc=$?; echo "test_cuda [$v] rc=$rc $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6
  [ -n "$v" ] && [ $rc != 0 ] && ok=0
done
REWY_CUDA_FWD_CHAIN=64 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T/test_cuda --quick > /tmp/cs.log 2>&1
rc=$?; echo "memcheck [FWD_CHAIN=64] rc=$rc $(grep 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"; [ $rc != 0 ] && ok=0
PYTHONPATH=$PWD/python timeout 120 python3 -m pytest -q -k "gate" tests/python/test_transforms.py > /tmp/gate.log 2>&1
echo "gate tests rc=$? $(tail -1 /tmp/gate.log) $(el)"   # the session-24 gate kernels (GDN's narrow rows)
wait; echo "warm: $(tail -qn1 $OUT/warm-*.log | tr '\n' ' ') $(el)"
V=$B/bench/dev/variant_time
for op in gdn delta; do for s in "1 2048 4" "1 8192 16" "4 4096 16" "8 2048 32" "2 16384 8" "16 1024 16"; do
  a=$(timeout 30 $V $op $s | grep forward | tr -s ' ')
  f=$(REWY_CUDA_FWD_CHAIN=1 timeout 30 $V $op $s | grep -oE 'fwd_chain [0-9]+|forward.*' | tr -s ' ' | tr '\n' ' ')
  echo "[$op $s] default: $a | chain: $f"
done; done
LIB=$PWD/$B/librewy.so # (session 25: the forward chain is the default on large grids; no separate build)
left=$(( 585 - ($(date +%s) - t0) )); echo "e2e with $(basename $LIB), $left s left $(el)"
env $FLAENV REWY_LIBRARY=$LIB PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1 timeout $left python3 bench/e2e.py --flashqla off \
  --models gdn,delta --batch 4 --prewarm off --deadline $(( left - 15 )) --json $OUT/e2e.json --png $OUT/e2e_loss.png \
  --impls fla,rewy > $OUT/e2e.log 2>&1
echo "e2e rc=$? $(el)"; tail -20 $OUT/e2e.log
