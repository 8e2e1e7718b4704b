# device_helpers.sh: what the device scripts share (sourced by carried_bins.sh and s36_run.sh, from the repository root).
# gb ENV… TOOL ARGS…: the GPU-bound ms of variant_time's forward and backward, "fwd/bwd/"
gb() { timeout 40 env "$@" 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | awk '{print $NF}' | tr '\n' '/'; }
# kernel_table TOOL ARGS…: each kernel's device time in one run of TOOL (ncu, clocks and caches left alone; TOOL's
# `once` mode: one forward and one backward), one line a kernel
kernel_table() {
  timeout 90 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv "$@" once 2>/dev/null |
    python3 -c "
import csv, sys
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith('\"'))]
h = rows[0]; n = h.index('Kernel Name'); m = h.index('Metric Value')
for r in rows[1:]: print('%9.1f us  %s' % (float(r[m].replace(',', '')) / 1e3, r[n][:100]))"
}
