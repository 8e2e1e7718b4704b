#!/bin/bash
# Session 46's device calls. The kernel changes were six commits on 66fd20b's src, landed on main in session 47
# (16b539b … 9be4469) after this script's `final` ran on an H100: d = commits 1–2 (gexp by ex2.approx.ftz, branch-free
# C_q mask and dv stores, the bf16 P = Aᵀ R̄), e = d and 3 (the L2 prefetch), f = e and 4 (stmatrix/ldmatrix fragments
# in reverse_ws, pullback_ws), h = f and 5 (chain_ws's); i = all six (session 47's .carry/s47i.tar.xz: also the
# librewy.so). To rebuild a carry: check out the commit, then make -j CUDA=1 BLAS=0
# NVARCH="-gencode arch=compute_90a,code=sm_90a" BUILD=build/h lib build/h/tests/cuda/test_cuda
# build/h/bench/dev/variant_time, and pack build/h's two binaries as .carry/s46c.tar.xz (build/m from 66fd20b likewise).
# Builds for sm_90a made here and carried (test_cuda, variant_time):
#   .carry/s46a.tar.xz  build/m: main 66fd20b
#   .carry/s46b.tar.xz  build/d: gexp by ex2.approx.ftz, reverse_ws's branch-free C_q mask and dv stores, and its
#                       P = Aᵀ R̄ in bf16
#   .carry/s46c.tar.xz  build/e: d and reverse_ws's L2 prefetch of the next chunk's tiles; build/f: e and the
#                       fragments by stmatrix/ldmatrix in reverse_ws and pullback_ws; build/h: f and chain_ws's
#                       by stmatrix
# (each unpacked if carried and not yet there). Modes, in the order given:
#   time   GPU-bound ms (fwd/bwd, variant_time) of each of BUILDS (default "m d e f h") at the large grids and the segments'
#          shapes (SHAPES), GDN and DeltaNet; each kernel's time at GDN (8,2048,32) for each of KB (default "m e h")
#   final  the check before the patch lands ($B: build/h unless given): test_cuda --quick of $B with the forward chain
#          and the fused pass forced; BUILDS' GPU-bound times (default m and $B; "m d e f h" where this session's carries
#          are there) and KB's kernels (m, $B); --quick with segments of 2 chunks; racecheck of --v128 with both
#          forced; --quick at the defaults (pullback_ws); memcheck of --v128 with segments
#   lean   final's for less device time: the forced --quick, m against $B at four shapes and $B's kernels, --quick
#          with segments, the racecheck
#   prof   Nsight Compute's per-SASS source counters of one launch of each of PROF_KERNELS (default reverse_ws, chain_ws,
#          kkt_fast) in $B at GDN (8,2048,32) (device_helpers.sh's source_counters): KERNEL.csv in $OUT, for
#          ncu_sass_summary.py --lines against the objects
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
for c in a:m b:d c:h; do
  [ -f .carry/s46${c%:*}.tar.xz ] && [ ! -x build/${c#*:}/tests/cuda/test_cuda ] && tar xJf .carry/s46${c%:*}.tar.xz
done
[ -f .carry/s47i.tar.xz ] && [ ! -x build/i/tests/cuda/test_cuda ] && tar xJf .carry/s47i.tar.xz # session 47: all six
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
B=${B:-build/h}
vt() { echo build/$1/bench/dev/variant_time; }
time_table() {
  echo "| op | shape | ${BUILDS:-m d e f h} (fwd/bwd ms each) |"
  for op in gdn delta; do for sh in ${SHAPES:-8x2048x32 16x1024x16 1x8192x16 2x16384x8 4x4096x16}; do
    r="| $op | $sh |"; for b in ${BUILDS:-m d e f h}; do r="$r $(gb $(vt $b) $op ${sh//x/ }) |"; done; echo "$r"
  done; done
  for b in ${KB:-m e h}; do echo "kernels [$b]"; kernel_table $(vt $b) gdn 8 2048 32 | kernel_sums; done
}
for mode in "$@"; do case $mode in
time) time_table ;;
final|lean) # lean: the first four steps, m against $B at four shapes and $B's kernels
  TC_LIMIT=100 oracle REWY_CUDA_FWD_WS=1 REWY_CUDA_REV_WS=1 -- --quick
  if [ $mode = lean ]; then BUILDS="m ${B#build/}" KB=${B#build/} SHAPES=${SHAPES:-8x2048x32 16x1024x16 1x8192x16 4x4096x16} time_table
  else BUILDS=${BUILDS:-m ${B#build/}} KB=${KB:-m ${B#build/}} time_table; fi
  TC_LIMIT=90 oracle REWY_CUDA_SEG=2 -- --quick
  SAN_LIMIT=100 san racecheck REWY_CUDA_FWD_WS=1 REWY_CUDA_REV_WS=1 -- --v128
  [ $mode = lean ] && continue
  TC_LIMIT=80 oracle -- --quick
  SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --v128 ;;
prof)
  for k in ${PROF_KERNELS:-reverse_ws chain_ws kkt_fast}; do source_counters "${k}_kernel" $k -- $B/bench/dev/variant_time gdn 8 2048 32 once; done ;;
esac; done
echo "done $(el)"
