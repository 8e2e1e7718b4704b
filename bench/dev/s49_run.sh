#!/bin/bash
# Sessions 49 to 53's device calls (the earlier modes went with their patches and archives; `git log` has them).
# Builds for sm_90a made here (librewy.so, test_cuda, variant_time), carried as one archive .carry/$ARCH.tar.xz (xz with
# a large dictionary and the same file of each build side by side, so that builds differing in a few kernels cost
# little more than one), unpacked under build/<letter>:
#   s54all (about 27 MB, the default): build/m, main 6c1cb1b's code (session 52's landings, the walk mode's deletion and
#     the review's mends; the code of main since); f = m with bench/dev/s53_fwdtr.patch (the transposed chains); c = m
#     with bench/dev/s52_combmma.patch (seg_combine on the tensor cores; dev/s52-combmma); t, the trace build's
#     variant_time (mode trace). None has run on a GPU. Carry it without .peers (the two come to about 69 MB)
#   s54f (about 12 MB): f alone, for fqbench with .peers (about 54 MB with the tree)
# Modes, in the order given:
#   s54    session 53's builds (.carry/s54all.tar.xz, about 27 MB: carry it without .peers): m (main 6c1cb1b's code), f = m
#          with bench/dev/s53_fwdtr.patch (branch dev/s53-fwdtr: chain_tr_kernel, the forward chain with Sᵀ in registers,
#          and chain_tr_rec_kernel, the recompute form likewise; in f REWY_CUDA_FWD_TR=0 and REWY_CUDA_REC_TR=0 run the old
#          chain_ws_kernel, FWD_TR=2 the new forward with C_q first), c = m with combmma, t (trace): f's --v128 under
#          the new forms first (a hang shows there), then GPU-bound ms of m, f, f FWD_TR=2, f with the old kernels, c
#          (LEAN=1: only m, f and f FWD_TR=2, for a short budget)
#   s54min  the least budget's s54: f's --v128 under FWD_WS=1 and SEG=2, GPU-bound ms of m and f at five shapes
#   s54fq  all of f's steps in one call (with .peers; s54f.tar.xz): smoke, GPU-bound ms against its old kernels,
#          s54quick, issue 24's benchmark beside FlashQLA
#   s54quick  f's default and new settings' matrix (14 of them), memcheck and racecheck: s54check for a short budget
#   s54check  f's whole matrix (with its new settings), c's segment settings, sanitizers of f
#   trace  build/t (in .carry/s54all.tar.xz: variant_time alone): main 6c1cb1b with bench/dev/s50_trace.patch
#          (branch dev/s52-trace; clock64 at each role's meeting points in block 0 of the forward chain, printed after
#          each launch: never to land); one forward and backward at the three large grids, the mean step and each event's offset from BAR_S
#   check  GPU-bound ms (variant_time, C API) of each build of BUILDS (default "m") at seven shapes, then make
#          test-cuda's matrix of settings on each build of MAT (default m), then its sanitizers (memcheck and racecheck with
#          segments and with the forward's warp-specialized chain); session 52 ran it (as s52lean) on main 6d3de73's
#          m and five builds of patches, landed since (PERF.md, session 52). The landing build l (.carry/s55l.tar.xz:
#          main with bench/dev/s54_land.patch): ARCH=s55l BUILDS=l MAT=l ... check
#   fqbench  with .peers too: FlashQLA compiled (or already, on the same warm machine), then issue 24's benchmark
#          (rewy and FlashQLA) on each build of BUILDS (default "m"), twice
#   warmfla  FLA compiled and autotuned for the suite (carry .carry/e2e/fla.tar.xz and .peers;
#          s50all too only where it is not unpacked yet: the three come near the 64 MiB a call carries with the tree)
#   bench  issue 24's benchmark on build/$AB (m by default), rewy and FlashQLA
#          (IMPLS=rewy,fla,flashqla: FLA too, after warmfla), GDN and DeltaNet at the six shapes
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
AB=${AB:-m}; export REWY_LIB=$PWD/build/$AB/librewy.so IMPLS=${IMPLS:-rewy,flashqla}
# make test-cuda's matrix of settings (ENV lists; " " for none), for oracle_par
MATRIX=(" " REWY_CUDA_WIN=1 REWY_CUDA_WIN=3 "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_WF=0" "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1"
    "REWY_CUDA_WIN=3 REWY_CUDA_CHAIN=2" "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1" "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1"
    "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=64" "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=32"
    "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1" REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN=32
    REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_FWD_CHAIN=128 "REWY_CUDA_WIN=2 REWY_CUDA_FWD_CHAIN=128" REWY_CUDA_FWD_WS=1
    "REWY_CUDA_WIN=2 REWY_CUDA_FWD_WS=1" REWY_CUDA_CHAIN_WS=1 "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN_WS=1" REWY_CUDA_CHAIN=1
    REWY_CUDA_CHAIN=2 "REWY_CUDA_CHAIN=1 REWY_CUDA_CHAIN_BULK=0" "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=2 REWY_CUDA_CHAIN_BULK=0"
    REWY_CUDA_SCAN_WF=0 REWY_CUDA_SCAN_OUT=1 "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_WU=0"
    "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BESIDE=0" "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=64" REWY_CUDA_SCAN_BV=32
    REWY_CUDA_SCAN_BV=64 "REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1" REWY_CUDA_SCAN_WG=1 "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=32"
    "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64" "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_WG2=0" REWY_CUDA_PB_WS=0
    "REWY_CUDA_WIN=3 REWY_CUDA_PB_WS=0" REWY_CUDA_REV_WS=1 "REWY_CUDA_REV_WS=1 REWY_CUDA_SCAN_WG=1" REWY_CUDA_SEG=1
    REWY_CUDA_SEG=2 "REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1" "REWY_CUDA_SEG=2 REWY_CUDA_REV_WS=0" "REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0"
    "REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0" "REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128"
    "REWY_CUDA_SEG=2 REWY_CUDA_REC_VT=128"
    "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64" "REWY_CUDA_WIN=2 REWY_CUDA_REV_PAIR=0" "REWY_CUDA_WIN=1 REWY_CUDA_REV_PAIR=1")
# and dev/s53-fwdtr's (its Makefile has them): the old forward chain, the transposed one with C_q first
MATRIX_TR=("REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_TR=0" "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_FWD_TR=0"
    "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_TR=2" "REWY_CUDA_SEG=2 REWY_CUDA_FWD_TR=2"
    "REWY_CUDA_WIN=2 REWY_CUDA_REC_TR=0" "REWY_CUDA_SEG=2 REWY_CUDA_REC_TR=0" "REWY_CUDA_SEG=3 REWY_CUDA_REC_TR=0")
# smoke_f SETTING…: f's test_cuda --v128 under each setting (an ENV list), its last line and first failures; FOK=0
# where one fails (f's kernels forced where --v128's small shapes would not take them)
smoke_f() {
  local e r; for e in "$@"; do env $e timeout 60 build/f/tests/cuda/test_cuda --v128 > /tmp/v.log 2>&1; r=$?
    [ $r = 0 ] || FOK=0; echo "f [$e] --v128 rc=$r $(tail -1 /tmp/v.log) $(el)"; grep -m6 FAIL /tmp/v.log; done
}
# gb_table COLUMN… -- SHAPE…: gb's fwd/bwd ms, a row per shape (op:BxTxH), a column per "ENV…|build" (- for no ENV)
gb_table() {
  local cols=() c e sh op r; while [ "$1" != -- ]; do cols+=("$1"); shift; done; shift
  echo "| op | shape |$(for c in "${cols[@]}"; do l=${c#*|}; [ "${c%|*}" = - ] || l+=" ${c%|*}"; echo -n " $l |"; done)"
  for sh in "$@"; do op=${sh%:*}; sh=${sh#*:}; r=""
    for c in "${cols[@]}"; do e=${c%|*}; r+=" $(gb ${e#-} build/${c#*|}/bench/dev/variant_time $op ${sh//x/ }) |"; done
    echo "| $op | $sh |$r"; done; echo "timed $(el)"
}
# fq_bench BUILD…: issue 24's benchmark (rewy and $IMPLS' peers) of each build's librewy.so in turn, its table and
# acceptance lines, its records in $OUT (FlashQLA compiled first: warm_bg)
fq_bench() {
  local ab; for ab in "$@"; do echo "== bench $ab"; REWY_LIB=$PWD/build/$ab/librewy.so OPS=gdn,deltanet API_LIMIT=100 \
    bash bench/dev/s41_api.sh run | grep -E "^(gdn|deltanet) |PASS|FAIL"; cp $OUT/bench_api.jsonl $OUT/bench_$ab.$(el | tr -d ' ').jsonl
  done
}
# f's short check (s54quick, s54fq): its default and new settings' matrix, then memcheck and racecheck of the new kernels
s54quick() {
  oracle_par build/f 6 " " "${MATRIX_TR[@]}" REWY_CUDA_SEG=1 REWY_CUDA_FWD_WS=1 "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64" \
    | sed "s/^/f /" | grep -v "^f rc=0"; echo "matrix f (short) $(el)"
  TB=build/f SAN_LIMIT=80 san memcheck REWY_CUDA_FWD_WS=1 REWY_CUDA_SEG=2 -- --v128
  TB=build/f SAN_LIMIT=80 san racecheck REWY_CUDA_FWD_WS=1 -- --v128; TB=build/f SAN_LIMIT=60 san racecheck REWY_CUDA_SEG=2 -- --v128
  echo "checked $(el)"
}
for mode in "$@"; do case $mode in
trace)
  [ -x build/t/bench/dev/variant_time ] || tar xJf .carry/${ARCH:-s54all}.tar.xz
  for sh in "4 4096 16" "16 1024 16" "8 2048 32"; do echo "gdn $sh"
    timeout 60 build/t/bench/dev/variant_time gdn $sh once 2>&1 | grep -A20 -m1 "ws trace" | grep -v "^GDN"; done
  echo "traced $(el)" ;;
s54)
  [ -x build/f/tests/cuda/test_cuda ] || tar xJf .carry/s54all.tar.xz
  FOK=1; smoke_f REWY_CUDA_FWD_WS=1 "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64" "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_TR=2" \
    REWY_CUDA_SEG=2 "REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=1" # (f is timed only if all pass)
  # f's new kernels against its old ones on the same inputs (variant_time diff): where an output differs
  for e in "REWY_CUDA_FWD_WS=1:gdn" "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64:gdn" "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_TR=2:gdn" \
      "REWY_CUDA_FWD_WS=1:delta" "REWY_CUDA_SEG=2:gdn" "REWY_CUDA_WIN=2:gdn"; do
    echo "diff [${e%:*}] ${e#*:} 2 1000 4"; env ${e%:*} timeout 30 build/f/bench/dev/variant_time ${e#*:} 2 1000 4 diff 2>&1 | tail -9
  done
  [ -n "${NOTIME:-}" ] && { echo "smoked $(el)"; exit 0; } # (NOTIME=1: the smoke and diff runs alone)
  # the timed columns, "ENV…|build" (- for none): f's only where all its smoke runs passed; f's old kernels and c unless LEAN
  cols=("-|m"); [ $FOK = 1 ] && cols+=("-|f" "REWY_CUDA_FWD_TR=2|f")
  [ -z "${LEAN:-}" ] && { [ $FOK = 1 ] && cols+=("REWY_CUDA_FWD_TR=0 REWY_CUDA_REC_TR=0|f"); cols+=("-|c"); }
  gb_table "${cols[@]}" -- gdn:4x4096x16 gdn:8x2048x32 gdn:16x1024x16 gdn:1x8192x16 gdn:2x16384x8 delta:4x4096x16 \
    delta:8x2048x32 ;;
s54check)
  [ -x build/f/tests/cuda/test_cuda ] || tar xJf .carry/s54all.tar.xz
  oracle_par build/f 6 "${MATRIX[@]}" "${MATRIX_TR[@]}" | sed "s/^/f /" | grep -v "^f rc=0"; echo "matrix f $(el)"
  oracle_par build/c 6 REWY_CUDA_SEG=1 REWY_CUDA_SEG=2 "REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1" "REWY_CUDA_SEG=2 REWY_CUDA_REV_WS=0" \
    "REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0" "REWY_CUDA_SEG=2 REWY_CUDA_REC_VT=128" | sed "s/^/c /" | grep -v "^c rc=0"; echo "segments c $(el)"
  TB=build/f SAN_LIMIT=90 san memcheck -- --v128; TB=build/f SAN_LIMIT=90 san racecheck -- --v128
  TB=build/f SAN_LIMIT=90 san racecheck REWY_CUDA_FWD_TR=2 -- --v128; TB=build/f SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --v128
  TB=build/f SAN_LIMIT=60 san racecheck REWY_CUDA_SEG=2 -- --v128; TB=build/f SAN_LIMIT=60 san racecheck REWY_CUDA_WIN=2 -- --v128
  echo "checked $(el)" ;;
s54min) # the least budget's s54: f's --v128 under its two new kernels, then GPU-bound ms of m and f at five shapes
  [ -x build/f/tests/cuda/test_cuda ] || tar xJf .carry/s54all.tar.xz
  smoke_f REWY_CUDA_FWD_WS=1 REWY_CUDA_SEG=2
  gb_table "-|m" "-|f" -- gdn:4x4096x16 gdn:8x2048x32 gdn:16x1024x16 gdn:1x8192x16 delta:4x4096x16 ;;
s54fq) # all of f's steps in one call (carry .carry/s54f.tar.xz and .peers; AB=f): FlashQLA compiled in the background
  # while f's --v128 runs under its new kernels, f's GPU-bound ms beside its old kernels (REWY_CUDA_FWD_TR=0
  # REWY_CUDA_REC_TR=0: main's), and s54quick's checks; then issue 24's benchmark of f and FlashQLA, twice
  [ -x build/f/tests/cuda/test_cuda ] || tar xJf .carry/s54f.tar.xz
  export REWY_LIB=$PWD/build/f/librewy.so; [ -f /tmp/warm.log ] || warm_bg
  smoke_f REWY_CUDA_FWD_WS=1 REWY_CUDA_SEG=2 "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_TR=2"
  gb_table "REWY_CUDA_FWD_TR=0 REWY_CUDA_REC_TR=0|f" "-|f" "REWY_CUDA_FWD_TR=2|f" -- gdn:4x4096x16 gdn:8x2048x32 \
    gdn:16x1024x16 gdn:1x8192x16 gdn:2x16384x8 gdn:1x2048x4 delta:4x4096x16
  s54quick
  warm_wait; tail -1 /tmp/warm.log
  fq_bench f f ;;
s54quick) s54quick ;;
check)
  for b in ${BUILDS:-m} ${MAT:-m}; do [ -x build/$b/tests/cuda/test_cuda ] || tar xJf .carry/${ARCH:-s54all}.tar.xz; done
  gb_table $(for b in ${BUILDS:-m}; do echo "-|$b"; done) -- gdn:4x4096x16 gdn:1x8192x16 gdn:2x16384x8 gdn:8x2048x32 \
    gdn:16x1024x16 delta:4x4096x16 delta:1x8192x16
  for M in ${MAT:-m}; do
    oracle_par build/$M 6 "${MATRIX[@]}" | sed "s/^/$M /" | grep -v "^$M rc=0"; echo "matrix $M $(el)"
    TB=build/$M SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --v128; TB=build/$M SAN_LIMIT=60 san racecheck REWY_CUDA_SEG=2 -- --v128
    TB=build/$M SAN_LIMIT=60 san memcheck -- --quick; TB=build/$M SAN_LIMIT=60 san racecheck REWY_CUDA_FWD_WS=1 -- --v128
    TB=build/$M SAN_LIMIT=60 san racecheck REWY_CUDA_WIN=2 -- --v128
  done; echo "checked $(el)" ;;
fqbench)
  for b in ${BUILDS:-m}; do [ -f build/$b/librewy.so ] || tar xJf .carry/${ARCH:-s54all}.tar.xz; done
  [ -f /tmp/warm.log ] || { warm_bg; warm_wait; } # FlashQLA's kernels, compiled once a warm machine
  tail -1 /tmp/warm.log
  fq_bench ${BUILDS:-m} ${BUILDS:-m} ;;
warmfla)
  # FLA's Triton kernels compiled (a process a shape) and then autotuned on the idle GPU (s41_api.sh warm; about 9
  # minutes; carry .carry/e2e/fla.tar.xz), for `IMPLS=rewy,fla,flashqla AB=a ... bench` on the same warm machine
  OUT=$OUT/fla WARM_PEERS=fla bash bench/dev/s41_api.sh warm 2>&1 | tail -40 ;;
bench)
  OPS=gdn,deltanet API_LIMIT=${API_LIMIT:-500} bash bench/dev/s41_api.sh run; rm -rf $OUT/warm $OUT/fq ;;
esac; done
echo "done $(el)"
