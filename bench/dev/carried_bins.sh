# carried_bins.sh: sourced by the device scripts that run binaries built here (s20_*.sh): the repository root,
# $OUT, an elapsed-time helper, the binaries from .carry/bins.tar.xz (librewy.so, test_cuda, test_random) and
# the environment that points Python at them. B = the build folder, T = its CUDA tests.
set -u; cd "$(dirname "${BASH_SOURCE[1]}")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
# everything the script prints also goes to $OUT/run.log as it is printed: $OUT comes back from a call that runs past
# its limit, its stdout does not (session 25 lost a whole call's output that way)
exec > >(tee -a $OUT/run.log) 2>&1
tar xJf .carry/bins.tar.xz; B=build/cuda-on; T=$B/tests/cuda
export REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python
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
