#!/bin/bash
# Session 33: a candidate's binaries (CAND_BINS, paths build/kkt/...) against main's (.carry/bins.tar.xz, build/cuda-on)
# on the device, one mode a call (each under 600 s). Output also in $OUT/run.log.
#   cand    the candidate's oracle matrix (test_cuda) under each ';'-separated forcing of CAND_TEST_ENV; GPU-bound ms
#           at the six suite shapes (GDN, DeltaNet) of main's build and of the candidate's under each forcing of
#           CAND_ALT; the device time of the kernels KGREP names at GDN (4,4096,16) (main's, the candidate's under
#           NCU_ALT's forcings; KGREP=none: no kernel times); memcheck under the first two forcings of CAND_TEST_ENV
#   race    racecheck of the candidate under each forcing of CAND_TEST_ENV
#   kernels main's kernel table (ncu, one forward and one backward) at the shapes of KSHAPES
source "$(dirname "$0")/carried_bins.sh"
V=$B/bench/dev/variant_time
SHAPES=${SHAPES:-"1x2048x4 1x8192x16 4x4096x16 8x2048x32 2x16384x8 16x1024x16"}
unpack_cand() { tar xJf ${CAND_BINS:?}; N=build/kkt; IFS=';' read -ra TES <<< "${CAND_TEST_ENV:-}"; [ ${#TES[@]} -eq 0 ] && TES=(""); }
for mode in ${@:-cand}; do case $mode in
cand)
  unpack_cand
  for te in "${TES[@]}"; do
    env $te timeout 120 $N/tests/cuda/test_cuda > /tmp/tc.log 2>&1; echo "new test_cuda [$te] rc=$? $(tail -1 /tmp/tc.log) $(el)"
    grep -E "FAIL" /tmp/tc.log | head -4
  done
  # GPU-bound ms of main's build, the candidate's at its default (CAND_DEFAULT=1) and under each ';'-separated forcing
  # of CAND_ALT (a column each)
  IFS=';' read -ra ALTS <<< "${CAND_ALT:-}"
  echo "GPU-bound ms, fwd/bwd: main, ${CAND_DEFAULT:+cand, }then cand under: ${CAND_ALT:-}" > /tmp/tab.txt
  gb() { timeout 40 env "$@" 2>&1 | tr -s ' ' | grep -oE '(forward|backward) median [0-9.]+ ms, GPU-bound [0-9.]+' | awk '{print $NF}' | tr '\n' '/'; }
  for op in gdn delta; do for s in $SHAPES; do
    line="| $op | $s | $(gb $V $op ${s//x/ }) |"
    [ -n "${CAND_DEFAULT:-}" ] && line="$line $(gb $N/bench/dev/variant_time $op ${s//x/ }) |"
    for a in "${ALTS[@]}"; do line="$line $(gb $a $N/bench/dev/variant_time $op ${s//x/ }) |"; done
    echo "$line" | tee -a /tmp/tab.txt
  done; done
  # the device time of the kernels KGREP names at GDN (4,4096,16): main's, then the candidate's under each ';'-separated
  # forcing of NCU_ALT
  [ "${KGREP:-}" != none ] && { echo "[ncu gdn 4 4096 16, main]"; kernel_table $V gdn 4 4096 16 | grep -E "${KGREP:-chain_pair}"; }
  IFS=';' read -ra NALTS <<< "${NCU_ALT:-}"
  for a in "${NALTS[@]}"; do
    echo "[ncu gdn 4 4096 16, cand, $a]"; ( export $a; kernel_table $N/bench/dev/variant_time gdn 4 4096 16 ) | grep -E "${KGREP:-chain_pair}"
  done
  for te in "${TES[@]:0:2}"; do
    env $te REWY_TEST_NO_GRAPH=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $N/tests/cuda/test_cuda --quick > /tmp/cs.log 2>&1
    echo "new memcheck [$te] rc=$? $(grep -E 'ERROR SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done
  echo "$(el)"; cat /tmp/tab.txt ;;
race)
  unpack_cand
  for te in "${TES[@]}"; do
    env $te REWY_TEST_NO_GRAPH=1 timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 $N/tests/cuda/test_cuda --quick > /tmp/cs.log 2>&1
    echo "new racecheck [$te] rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/cs.log | tail -1) $(el)"
  done ;;
kernels)
  for s in ${KSHAPES:-8x2048x32 1x8192x16}; do
    echo "[ncu gdn $s, main]"; kernel_table $V gdn ${s//x/ } | awk '{k = substr($0, index($0, "us") + 4);
      sub(/^void /, "", k); sub(/[(].*/, "", k); t[k] += $1; n[k]++}
      END {for (k in t) printf "%9.1f us  %3d launches  %s\n", t[k], n[k], k}' | sort -rn
  done ;;
esac; done
echo "total $(el)"
