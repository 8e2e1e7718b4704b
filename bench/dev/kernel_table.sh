# kernel_table.sh: sourced by the device scripts (carried_bins.sh, s36_run.sh).
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
