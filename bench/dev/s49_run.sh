#!/bin/bash
# Session 49's and 50's device calls. Builds for sm_90a made here (librewy.so, test_cuda, variant_time), carried as one
# archive (xz with a large dictionary and the same file of each build side by side, so that builds differing in a few
# kernels cost little more than one):
#   session 49, .carry/s49yq.tar.xz (gone): build/y main 944e326; build/q main a1c97a8 (y with session 48's two patches
#     and seg_combine's 16-column blocks)
#   session 50, .carry/s50all.tar.xz (25.5 MB): build/q main 06d04ab; a, c, d: q with the patches of the modes below;
#     t: the trace build's variant_time
# Modes, in the order given:
#   all    build/q: test_cuda --quick at the defaults, with segments (the forward's maps, and without them), in windows
#          (pairs by default there, forced on and off); memcheck with segments, racecheck in windows (--v128); GPU-bound
#          ms of y and q (and q without pairs) at the four shapes the patches reach; kernel times of q at (1,8192,16) and
#          (4,4096,16). Beside them (carry .peers) FlashQLA's kernels compiled for the suite, for `bench`
#   (the patches of a16, ck and kkt5 are gone since session 51: the first landed, the others lost; their builds remain
#   in .carry/s50all.tar.xz where it is kept)
#   a16    build/a (.carry/s50all.tar.xz, with q: main 06d04ab): q with bench/dev/s50_a16.patch (the saved A in bf16,
#          with session 50's fix of state_scan_wg's copy; branch dev/s50-a16); test_cuda --quick under make
#          test-cuda's whole matrix, q against a, memcheck (racecheck too with A16_FULL=1); beside them (carry .peers
#          too: 63.3 MB in all) FlashQLA's kernels compiled for
#          `AB=a bash bench/dev/s49_run.sh bench` on the same warm machine. Session 50 ran it without the fix: the wgmma
#          scans and the segments failed, all else passed
#   ck     build/c (in .carry/s50all.tar.xz too): q with bench/dev/s50_ck.patch (the forward chain's window checkpoint
#          stored beside the next chunk's K S; branch dev/s50-ck): test_cuda --quick at the defaults, in windows and with
#          segments, racecheck of --v128 in windows; GPU-bound ms of q and c where the forward has windows
#   kkt5   build/d (in .carry/s50all.tar.xz too): q with bench/dev/s50_kkt5.patch (kkt_fast at five blocks an SM
#          where it forms A alone; branch dev/s50-kkt5):
#          test_cuda --quick at the defaults and in windows; GPU-bound ms of q and d at the three large grids, kkt's time
#   trace  build/t (in .carry/s50all.tar.xz: variant_time alone): main 06d04ab with bench/dev/s50_trace.patch
#          (clock64 at each role's meeting points in block 0 of the forward chain, printed after each launch: never to
#          land); one forward and backward at the three large grids, the mean step and each event's offset from BAR_S
#   s51    session 51, .carry/s51.tar.xz (21.8 MB): q (main 06d04ab) as in s50all; s: main 261de35 with the three
#          patches above stacked (branch dev/s51-all); r: s with kkt's streamed A (kkt_stream_kernel, the branch's
#          head). test_cuda --quick of r under make test-cuda's whole matrix, memcheck and racecheck (windows,
#          --v128), GPU-bound ms of q, s and r at the three large grids; FlashQLA's kernels compiled beside, for
#          `AB=r ... bench` next on the same warm machine
#   s51b   .carry/s51b.tar.xz: q; u: main 261de35 with s50_ck and s50_kkt5 (branch dev/s51-ck-k5); w: u with the bf16 A
#          and its widening copy's loads batched (branch dev/s51-a16w; s lost 8-17 % of the backward at the segments'
#          shapes to the one-load-at-a-time widening). The matrix of u and w, memcheck and racecheck of w, GPU-bound ms
#          of q, u and w; with S51B_BENCH=1 then issue 24's benchmark (rewy and FlashQLA) on u and on w, twice each
#   s51v   .carry/s51v.tar.xz: q and v: main b7352f9 with the bf16 A and its batched widening alone (branch
#          dev/s51-land, what lands): the matrix of v, GPU-bound ms of q and v at two shapes
#   s52    next session's, .carry/s52.tar.xz (25.3 MB; with .peers 62.3 MB and the tree about 3 more): m = main (the bf16 A
#          landed); four patches on it, each built here and not yet run: x = bench/dev/s51_tri.patch (tri_inverse64's
#          T2 split over P1–P3; branch dev/s51-tri), k = s51_trimma.patch (the same split with P1–P4 on the tensor cores
#          as tf32 hi/lo pairs; dev/s51-trimma; it replaces x where it wins), y = s51_swbf.patch (state_scan_wg's A X
#          on bf16 operands; dev/s51-swbf), z = s51_walkws.patch (the forward segments' walks on chain_ws's recompute
#          form, Plan::seg_walk_ws; dev/s51-walkws). The matrix of x, k, y and z; GPU-bound ms of all five (x, k: every
#          forward's kkt, and KDA's intra, which variant_time does not time; y: the SCAN_WG scan and, without z, the
#          segments' walks; z: the segments' forward); kernel sums of m, k and z at two shapes; FlashQLA compiled
#          beside (with .peers), for s52bench next on the same warm machine
#   s52san the sanitizers of s52's builds where each reaches
#   s52bench  with .peers too: FlashQLA compiled (warm_bg, or already, on the same warm machine), then issue 24's
#          benchmark (rewy and FlashQLA) on each build of BUILDS (default "m k z"), twice
#   warmfla  FLA compiled and autotuned for the suite (carry .carry/e2e/fla.tar.xz and .peers;
#          s50all too only where it is not unpacked yet: the three come near the 64 MiB a call carries with the tree)
#   bench  issue 24's benchmark on build/$AB (q by default), rewy and FlashQLA (IMPLS=rewy,fla,flashqla: FLA too, after
#          warmfla), GDN and DeltaNet at the six shapes
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; t0=$(date +%s)
exec > >(tee -a $OUT/run.log) 2>&1 # the log comes back in $OUT from a call that runs past its limit
source bench/dev/device_helpers.sh
[ -x build/q/tests/cuda/test_cuda ] || [ ! -f .carry/s49yq.tar.xz ] || tar xJf .carry/s49yq.tar.xz
echo "unpacked $(el); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
AB=${AB:-q}; export REWY_LIB=$PWD/build/$AB/librewy.so IMPLS=${IMPLS:-rewy,flashqla}
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
    "REWY_CUDA_SEG=2 REWY_CUDA_SEG_WALK=0" "REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0" "REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128"
    "REWY_CUDA_SEG=2 REWY_CUDA_REC_VT=128"
    "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64" "REWY_CUDA_WIN=2 REWY_CUDA_REV_PAIR=0" "REWY_CUDA_WIN=1 REWY_CUDA_REV_PAIR=1")
for mode in "$@"; do case $mode in
all)
  warm_bg
  export TB=build/q TC_LIMIT=45
  oracle -- --quick; oracle REWY_CUDA_SEG=2 -- --quick; oracle REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0 -- --quick
  oracle REWY_CUDA_WIN=2 -- --quick; oracle REWY_CUDA_WIN=1 REWY_CUDA_REV_PAIR=1 -- --quick
  oracle REWY_CUDA_WIN=2 REWY_CUDA_REV_PAIR=0 -- --quick
  SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --quick
  SAN_LIMIT=90 san racecheck REWY_CUDA_WIN=2 -- --v128
  unset TB
  echo "| op | shape | y fwd/bwd | q fwd/bwd | q, REV_PAIR=0 |"
  for op in gdn delta; do for sh in 1x8192x16 2x16384x8 4x4096x16 8x2048x32; do a=${sh//x/ }
    echo "| $op | $sh | $(gb build/y/bench/dev/variant_time $op $a) | $(gb build/q/bench/dev/variant_time $op $a) | $(gb env REWY_CUDA_REV_PAIR=0 build/q/bench/dev/variant_time $op $a) |"
  done; done
  for sh in "1 8192 16" "4 4096 16"; do echo "kernels q gdn $sh"; kernel_table build/q/bench/dev/variant_time gdn $sh | kernel_sums; done
  warm_wait; tail -3 /tmp/warm.log; echo "checked $(el)" ;;
a16)
  # build/a: the saved A in bf16 (Layout::a16) against build/q (main 06d04ab). test_cuda --quick under make test-cuda's
  # whole matrix of settings, six processes at a time (oracle_par); memcheck and racecheck; GPU-bound ms of q and a
  [ -x build/a/tests/cuda/test_cuda ] || tar xJf .carry/s50all.tar.xz
  warm_bg # FlashQLA's kernels compiled beside the checks, for `AB=a ... bench` next
  oracle_par build/a 6 "${MATRIX[@]}"
  echo "matrix $(el)"
  echo "| op | shape | q fwd/bwd | a fwd/bwd |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32 16x1024x16; do row $op $sh build/q/bench/dev/variant_time build/a/bench/dev/variant_time; done; done
  export TB=build/a
  SAN_LIMIT=50 san memcheck -- --quick
  [ -n "${A16_FULL:-}" ] && SAN_LIMIT=70 san racecheck REWY_CUDA_WIN=2 -- --v128
  unset TB
  warm_wait; echo "checked $(el)" ;;
ck)
  [ -x build/c/tests/cuda/test_cuda ] || tar xJf .carry/s50all.tar.xz
  oracle_par build/c 5 " " REWY_CUDA_WIN=1 REWY_CUDA_WIN=2 "REWY_CUDA_WIN=3 REWY_CUDA_FWD_WS=1" REWY_CUDA_SEG=2
  TB=build/c SAN_LIMIT=90 san racecheck REWY_CUDA_WIN=2 REWY_CUDA_FWD_WS=1 -- --v128
  echo "| op | shape | q fwd/bwd | c fwd/bwd |"
  for op in gdn delta; do for sh in 1x8192x16 4x4096x16 2x16384x8; do
    row $op $sh build/q/bench/dev/variant_time build/c/bench/dev/variant_time; done; done
  echo "checked $(el)" ;;
kkt5)
  [ -x build/d/tests/cuda/test_cuda ] || tar xJf .carry/s50all.tar.xz
  TB=build/d TC_LIMIT=60 oracle -- --quick; TB=build/d TC_LIMIT=60 oracle REWY_CUDA_WIN=2 -- --quick
  echo "| op | shape | q fwd/bwd | d fwd/bwd |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32 16x1024x16; do
    row $op $sh build/q/bench/dev/variant_time build/d/bench/dev/variant_time; done; done
  for b in q d; do echo "kkt, build $b, gdn 4 4096 16:"; kernel_table build/$b/bench/dev/variant_time gdn 4 4096 16 | kernel_sums | grep kkt; done
  echo "checked $(el)" ;;
trace)
  [ -x build/t/bench/dev/variant_time ] || tar xJf .carry/s50all.tar.xz
  for sh in "4 4096 16" "16 1024 16" "8 2048 32"; do echo "gdn $sh"
    timeout 60 build/t/bench/dev/variant_time gdn $sh once 2>&1 | grep -A20 -m1 "ws trace" | grep -v "^GDN"; done
  echo "traced $(el)" ;;
s51)
  [ -x build/r/tests/cuda/test_cuda ] || tar xJf .carry/s51.tar.xz
  warm_bg
  oracle_par build/r 6 "${MATRIX[@]}"
  echo "matrix $(el)"
  export TB=build/r
  SAN_LIMIT=50 san memcheck -- --quick
  SAN_LIMIT=90 san racecheck REWY_CUDA_WIN=2 REWY_CUDA_FWD_WS=1 -- --v128
  unset TB
  echo "| op | shape | q (main) | s (a16, ck, kkt5) | r (s, streamed kkt) |"
  for op in gdn delta; do for sh in 4x4096x16 8x2048x32 16x1024x16; do a=${sh//x/ }; r="| $op | $sh |"
    for b in q s r; do r="$r $(gb build/$b/bench/dev/variant_time $op $a) |"; done; echo "$r"; done; done
  for b in q r; do echo "kernels $b gdn 4 4096 16"; kernel_table build/$b/bench/dev/variant_time gdn 4 4096 16 | kernel_sums | head -6; done
  warm_wait; tail -2 /tmp/warm.log; echo "checked $(el)" ;;
s51b)
  [ -x build/w/tests/cuda/test_cuda ] || tar xJf .carry/s51b.tar.xz
  [ -n "${S51B_BENCH:-}" ] && warm_bg
  for b in u w; do oracle_par build/$b 6 "${MATRIX[@]}" | sed "s/^/$b /" | grep -v "^$b rc=0"; echo "matrix $b $(el)"; done
  export TB=build/w
  SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --v128
  SAN_LIMIT=90 san racecheck REWY_CUDA_SEG=2 -- --v128
  unset TB
  echo "| op | shape | q (main) | u (ck, kkt5) | w (u, bf16 A) |"
  for sh in gdn:1x8192x16 gdn:2x16384x8 gdn:4x4096x16 gdn:8x2048x32 gdn:16x1024x16 delta:4x4096x16; do op=${sh%:*}; sh=${sh#*:}
    row3=$(for b in q u w; do echo -n " $(gb build/$b/bench/dev/variant_time $op ${sh//x/ }) |"; done); echo "| $op | $sh |$row3"
  done
  echo "checked $(el)"
  [ -z "${S51B_BENCH:-}" ] && exit 0
  warm_wait; tail -1 /tmp/warm.log
  for ab in u w u w; do echo "== bench $ab"; REWY_LIB=$PWD/build/$ab/librewy.so OPS=gdn,deltanet API_LIMIT=100 \
    bash bench/dev/s41_api.sh run | grep -E "^(gdn|deltanet) .*rewy|PASS|FAIL"; cp $OUT/bench_api.jsonl $OUT/bench_$ab.$(el | tr -d ' ').jsonl; done ;;
s51v)
  [ -x build/v/tests/cuda/test_cuda ] || tar xJf .carry/s51v.tar.xz
  oracle_par build/v 6 "${MATRIX[@]}" | grep -v "^rc=0"; echo "matrix v, ${#MATRIX[@]} settings $(el)"
  for sh in gdn:4x4096x16 gdn:1x8192x16; do op=${sh%:*}; sh=${sh#*:}; row $op $sh build/q/bench/dev/variant_time build/v/bench/dev/variant_time; done ;;
s52)
  [ -x build/z/tests/cuda/test_cuda ] || tar xJf .carry/s52.tar.xz
  warm_bg
  for b in x k y z; do oracle_par build/$b 6 "${MATRIX[@]}" | sed "s/^/$b /" | grep -v "^$b rc=0"; echo "matrix $b $(el)"; done
  echo "| op | shape | m (main) | x (tri) | k (trimma) | y (swbf) | z (walkws) |"
  for sh in gdn:1x8192x16 gdn:2x16384x8 gdn:4x4096x16 gdn:8x2048x32 gdn:16x1024x16 delta:4x4096x16 delta:1x8192x16; do
    op=${sh%:*}; sh=${sh#*:}
    r=$(for b in m x k y z; do echo -n " $(gb build/$b/bench/dev/variant_time $op ${sh//x/ }) |"; done); echo "| $op | $sh |$r"
  done
  for b in m k; do echo "kernels $b gdn 4 4096 16"; kernel_table build/$b/bench/dev/variant_time gdn 4 4096 16 | kernel_sums | head -6; done
  for b in m z; do echo "kernels $b gdn 1 8192 16"; kernel_table build/$b/bench/dev/variant_time gdn 1 8192 16 | kernel_sums | head -9; done
  warm_wait; tail -1 /tmp/warm.log; echo "checked $(el)" ;;
s52san)
  [ -x build/z/tests/cuda/test_cuda ] || tar xJf .carry/s52.tar.xz
  TB=build/k SAN_LIMIT=60 san memcheck -- --quick; TB=build/k SAN_LIMIT=90 san racecheck REWY_CUDA_FWD_WS=1 -- --v128
  TB=build/y SAN_LIMIT=60 san memcheck REWY_CUDA_SCAN_WG=1 -- --quick
  TB=build/y SAN_LIMIT=90 san racecheck REWY_CUDA_SEG=2 REWY_CUDA_SEG_WALK=0 -- --v128
  TB=build/z SAN_LIMIT=60 san memcheck REWY_CUDA_SEG=2 -- --v128; TB=build/z SAN_LIMIT=90 san racecheck REWY_CUDA_SEG=2 -- --v128
  echo "checked $(el)" ;;
s52bench)
  [ -x build/z/tests/cuda/test_cuda ] || tar xJf .carry/s52.tar.xz
  [ -f /tmp/warm.log ] || { warm_bg; warm_wait; } # (s52 compiled FlashQLA beside its checks on a warm machine)
  tail -1 /tmp/warm.log
  for ab in ${BUILDS:-m k z} ${BUILDS:-m k z}; do echo "== bench $ab"; REWY_LIB=$PWD/build/$ab/librewy.so OPS=gdn,deltanet \
    API_LIMIT=100 bash bench/dev/s41_api.sh run | grep -E "^(gdn|deltanet) |PASS|FAIL"; cp $OUT/bench_api.jsonl $OUT/bench_$ab.$(el | tr -d ' ').jsonl; done ;;
warmfla)
  # FLA's Triton kernels compiled (a process a shape) and then autotuned on the idle GPU (s41_api.sh warm; about 9
  # minutes; carry .carry/e2e/fla.tar.xz), for `IMPLS=rewy,fla,flashqla AB=a ... bench` on the same warm machine
  OUT=$OUT/fla WARM_PEERS=fla bash bench/dev/s41_api.sh warm 2>&1 | tail -40 ;;
bench)
  OPS=gdn,deltanet API_LIMIT=${API_LIMIT:-500} bash bench/dev/s41_api.sh run; rm -rf $OUT/warm $OUT/fq ;;
esac; done
echo "done $(el)"
