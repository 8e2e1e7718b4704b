# device_helpers.sh: what the device scripts share (sourced by carried_bins.sh and s36_run.sh … s38_run.sh, from the
# repository root, after they set t0 and OUT).
# el: seconds since t0
el() { echo "$(( $(date +%s) - t0 )) s"; }
# the suite's shapes (B x T x H): the scripts' SHAPES where the caller names none
SUITE_SHAPES="8x2048x32 16x1024x16 4x4096x16 1x8192x16 2x16384x8 1x2048x4"
# device_build CARRY MODES…: build/d ($B) for sm_90a (librewy.so, test_cuda, variant_time) from CARRY (a tar.xz built
# here from the same tree) if carried, else built there (about 110–145 s); none where the modes are `probe` alone.
# Then the elapsed time and the card's name.
device_build() {
  local carry=$1; shift
  if [ "${*:-}" = probe ]; then :; elif [ -f "$carry" ]; then tar xJf "$carry"; else
    make -j16 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=$B lib $B/tests/cuda/test_cuda \
      $B/bench/dev/variant_time > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
  fi
  echo "built $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
}
# unpack_bins CARRY: the binaries of $B from .carry/CARRY.tar.xz unless its test_cuda is there (a warm machine keeps
# them), then the elapsed time and the card's name; VT is $B's variant_time
unpack_bins() {
  [ -x $B/tests/cuda/test_cuda ] || tar xJf .carry/$1.tar.xz
  echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  VT=$B/bench/dev/variant_time
}
# oracle ENV… [-- ARGS]: test_cuda of build $TB (default $B) with ENV (ARGS: --quick, --v128), its last line and failures
oracle() {
  local a=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done; [ $# -gt 0 ] && shift
  env "${a[@]}" timeout ${TC_LIMIT:-150} ${TB:-$B}/tests/cuda/test_cuda "$@" > /tmp/tc.log 2>&1
  echo "test_cuda [${a[*]} $*] rc=$? $(tail -1 /tmp/tc.log) $(el)"
  grep -E "FAIL" /tmp/tc.log | head -6
}
# oracle_par TB P SETTING…: test_cuda --quick of build TB under each SETTING (an ENV list; " " for none), P processes at a
# time, each setting's last line and first failures as it ends (logs in /tmp/m)
oracle_par() {
  local tb=$1 np=$2; shift 2; mkdir -p /tmp/m
  printf '%s\n' "$@" | xargs -P "$np" -d '\n' -I{} bash -c 'e="$1"; l="/tmp/m/${2//\//_}${e// /_}.log"
    env $e timeout ${TC_LIMIT:-60} "$2/tests/cuda/test_cuda" --quick > "$l" 2>&1
    echo "rc=$? [$e] $(tail -1 "$l")"; grep -m4 FAIL "$l"' _ {} "$tb"
}
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
# kernel_sums: kernel_table's lines summed by kernel (its launches counted), the largest first
kernel_sums() {
  awk '{k = substr($0, index($0, "us") + 4); sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
    END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn
}
# row OP SHAPE LEFT RIGHT: a table row of gb's fwd/bwd ms for LEFT and RIGHT ("ENV… TOOL" each, split on spaces)
row() { echo "| $1 | $2 | $(gb $3 $1 ${2//x/ }) | $(gb $4 $1 ${2//x/ }) |"; }
# san TOOL ENV… -- ARGS: compute-sanitizer TOOL (memcheck, racecheck) over test_cuda of build $TB (default $B) with ENV,
# without graph capture (ARGS: --quick, --v128); its summary line and the first reports
san() {
  local tool=$1; shift; local a=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done; [ $# -gt 0 ] && shift
  env "${a[@]}" REWY_TEST_NO_GRAPH=1 timeout ${SAN_LIMIT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
    ${TB:-$B}/tests/cuda/test_cuda "$@" > /tmp/cs.log 2>&1
  echo "$tool [${a[*]} $*] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  grep -E -A3 "Error|Race|Hazard" /tmp/cs.log | head -24
}
# source_counters KERNEL NAME ENV… -- TOOL ARGS…: Nsight's source counters and sections of the first launch of the kernel
# whose name matches KERNEL in one run of TOOL with ENV: $OUT/NAME.csv (per SASS instruction), $OUT/NAME.txt (sections)
source_counters() {
  local kern=$1 name=$2; shift 2; local a=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done; shift
  env "${a[@]}" timeout 200 ncu --clock-control none -k "regex:$kern" -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats \
    --section Occupancy -o /tmp/$name -f "$@" > /dev/null 2>&1
  ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass > $OUT/$name.csv 2>&1
  ncu -i /tmp/$name.ncu-rep > $OUT/$name.txt 2>&1
  echo "[profile] $(el)"; grep -E "Duration|Issued Warp|No Eligible|Registers Per|Throughput" $OUT/$name.txt | head -12
}
# smoke ENV…: one small GDN call of variant_time ($VT) with ENV (a hang ends at its timeout, and the script), then
# test_cuda --v128 with ENV
smoke() {
  timeout 20 env "$@" $VT gdn 2 512 4 > /tmp/sm.log 2>&1; local rc=$?; echo "smoke rc=$rc $(el)"
  tail -3 /tmp/sm.log; [ $rc = 0 ] || exit 1
  TC_LIMIT=60 oracle "$@" -- --v128
}
# warm_bg: FlashQLA's kernels compiled for the suite in the background (s41_api.sh warm with WARM_PEERS=flashqla, a
# process a shape), where .peers is carried, for a later `s41_api.sh run` on the same warm machine; warm_wait waits for
# that pid alone (a bare wait also waits for a script's log tee, which ends only with the script)
warm_bg() {
  [ -f .peers/peers-site.tar.xz ] || return 0
  (OUT=$OUT/fq WARM_PEERS=flashqla bash bench/dev/s41_api.sh warm > /tmp/warm.log 2>&1; echo "warm rc=$?") &
  WARM_PID=$!
}
warm_wait() { [ -z "${WARM_PID:-}" ] || wait $WARM_PID; }
