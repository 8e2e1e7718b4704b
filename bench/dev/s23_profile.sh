#!/bin/bash
# Prepared in session 22 for the next device call: where a chain step's time goes. Our forward scan and policy R's
# chain pair take about 5 µs a chunk step at GDN (4,4096,16) (ncu: 345 and 454 µs over 64 chunks), in the mma.sync
# and the one-warpgroup wgmma form alike, where FLA's fwd_h takes 1.7 µs (docs/PERF.md, session 22). Source counters
# of one launch each (bench/dev/ncu_source.sh), then the stall summary per opcode and the worst instructions.
# Then campaign seeds 4 and 5. Carried: .carry/bins.tar.xz (librewy.so, test_random built here for sm_90a).
source "$(dirname "$0")/carried_bins.sh"
RB=$B bash bench/dev/ncu_source.sh "state_scan_kernel" fwd_scan gdn 4x4096x16
RB=$B bash bench/dev/ncu_source.sh "chain_pair_kernel" chain gdn 4x4096x16
for k in fwd_scan chain; do echo "== $k"; python3 bench/dev/ncu_sass_summary.py $OUT/$k.csv 15 | head -40; done
# how often ḡ's conditioning (DESIGN.md, "S̄⁺ in bf16 and ḡ's conditioning") shows: two more campaign seeds
for seed in 4 5; do
  for st in 0 500 1000 1500; do timeout 120 $T/test_random --seed $seed --start $st --count 500 > /tmp/rnd$seed.$st.log 2>&1 & done
done; wait
cat /tmp/rnd*.log > $OUT/campaign.log; grep -h "^FAIL configuration" $OUT/campaign.log | head; grep -h "configurations run" $OUT/campaign.log
echo "total $(el)"
