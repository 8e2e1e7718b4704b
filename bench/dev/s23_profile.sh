#!/bin/bash
# Prepared in session 22 for the next device call: where a chain step's time goes. Our forward scan and policy R's
# chain pair take about 5 µs a chunk step at GDN (4,4096,16) (ncu: 345 and 454 µs over 64 chunks), in the mma.sync
# and the one-warpgroup wgmma form alike, where FLA's fwd_h takes 1.7 µs (docs/PERF.md, session 22). Source counters
# of one launch each (bench/dev/ncu_source.sh), then the stall summary per opcode and the worst instructions.
# Carried: .carry/bins.tar.xz (librewy.so built here for sm_90a; session 23: with gexp as __expf).
source "$(dirname "$0")/carried_bins.sh"
RB=$B bash bench/dev/ncu_source.sh "state_scan_kernel" fwd_scan gdn 4x4096x16
RB=$B bash bench/dev/ncu_source.sh "chain_pair_kernel" chain gdn 4x4096x16
for k in fwd_scan chain; do echo "== $k"; python3 bench/dev/ncu_sass_summary.py $OUT/$k.csv 15 | head -40; done
echo "total $(el)"
