# carried_bins.sh: sourced by the device scripts that run binaries built here (s20_*.sh): the repository root,
# $OUT, an elapsed-time helper, the binaries from .carry/bins.tar.xz (librewy.so, test_cuda, test_random) and
# the environment that points Python at them. B = the build folder, T = its CUDA tests.
set -u; cd "$(dirname "${BASH_SOURCE[1]}")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
# everything the script prints also goes to $OUT/run.log as it is printed: $OUT comes back from a call that runs past
# its limit, its stdout does not (session 25 lost a whole call's output that way)
exec > >(tee -a $OUT/run.log) 2>&1
tar xJf .carry/bins.tar.xz; B=build/cuda-on; T=$B/tests/cuda
export REWY_LIBRARY=$PWD/$B/librewy.so PYTHONPATH=$PWD/python
source bench/dev/device_helpers.sh # (the working directory is the repository root here)
