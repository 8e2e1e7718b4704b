# rewy: build, check, benchmark, test.
#   make run        build, `rewy check` + a short `rewy bench` (under 90 s on 2 cores; the GPU suite when a GPU
#                   is present)
#   make bench      the longer CPU benchmark: `rewy bench` on its default shapes, both policies (minutes)
#   make test       C tests (plain and ASan+UBSan), a fixed libFuzzer run over the C API (test-fuzz),
#                   CUDA compile check, Python tests (CPU); `make fuzz` fuzzes longer
#   make test-cuda  device tests: C tests (bitwise determinism among them) + compute-sanitizer + Python
#                   tests on CUDA (needs a GPU; BLAS=0 where OpenBLAS cannot be installed)
#   make test-cuda-random  2,000 random configurations on the device against the fp64 oracle
#   make test-fla   rewy against FLA (functions and FLA's layers; needs a GPU and FLA on PYTHONPATH)
# OpenBLAS is installed from Debian when missing (see BLAS below).

SHELL   := /bin/bash
CC      ?= cc
NVCC    ?= nvcc
PYTHON  ?= python3
BUILD   ?= build
CUDA    ?= 0
PREFIX  ?= /usr/local
# the version from rewy.h; the soname carries its major number
VERSION   := $(shell sed -n 's/.*REWY_VERSION_STRING "\(.*\)".*/\1/p' include/rewy.h)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))

WARN     = -Wall -Wextra -Werror
# -fno-trapping-math: we never use FP exceptions; it lets compare-selects vectorise
# -fvisibility=hidden: librewy.so exports only what rewy.h marks REWY_API (make check-exports)
CFLAGS_BASE = -std=c11 $(WARN) -fPIC -fvisibility=hidden -fopenmp -fno-trapping-math -Iinclude -Isrc
CFLAGS  ?= -O2 -g
# OpenBLAS's OpenMP build: called inside our OpenMP regions it runs single-threaded,
# where the pthread build would oversubscribe the cores.
BLASDIR  = /usr/lib/x86_64-linux-gnu/openblas-openmp
# BLAS=1 links OpenBLAS, BLAS=0 uses plain-loop products. Left unset, OpenBLAS is installed
# from Debian when missing (once, as the Makefile is read), and BLAS=0 is the fallback on a
# machine that cannot install it (e.g. a GPU host without a network).
ifndef BLAS
BLAS := $(shell test -f $(BLASDIR)/libopenblas.so || { timeout 120 apt-get install -y -q libopenblas-openmp-dev || \
          { timeout 120 apt-get update -q && timeout 120 apt-get install -y -q libopenblas-openmp-dev; }; } >/dev/null 2>&1; \
          test -f $(BLASDIR)/libopenblas.so && echo 1 || echo 0)
endif
ifeq ($(BLAS),1)
LDLIBS   = -L$(BLASDIR) -Wl,-rpath,$(BLASDIR) -lopenblas -lm -fopenmp
else
$(info BLAS=0: the CPU backend uses plain-loop products instead of OpenBLAS)
CFLAGS_BASE += -DREWY_NO_CBLAS
LDLIBS   = -lm -fopenmp
endif
SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

# NVARCH: the GPU targets (CI compiles both; a device-only build may pass just sm_90a to halve
# the library, e.g. to carry it to a lent machine)
NVARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
NVFLAGS  = -O3 -std=c++17 -lineinfo -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Iinclude -Isrc $(NVARCH) \
           --expt-relaxed-constexpr -Werror all-warnings

LIB_SRC  = src/api.c src/backend.c src/convert.c $(wildcard src/cpu/*.c)
# the fp64 oracle and the accuracy harness: used by the tests and the CLI, not part of the library
CHECK_SRC = $(wildcard src/check/*.c)
CU_SRC   = $(wildcard src/cuda/*.cu)
TEST_SRC = $(wildcard tests/test_*.c)
TESTS    = $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
ASAN_TESTS = $(patsubst tests/%.c,$(BUILD)/asan/tests/%,$(TEST_SRC))
HDRS     = include/rewy.h $(wildcard src/*.h src/cpu/*.h src/check/*.h)

LIB_OBJ  = $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
ASAN_OBJ = $(patsubst %.c,$(BUILD)/asan/%.o,$(LIB_SRC))
CHECK_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(CHECK_SRC))
ASAN_CHECK_OBJ = $(patsubst %.c,$(BUILD)/asan/%.o,$(CHECK_SRC))
CU_OBJ   = $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRC))

ifeq ($(CUDA),1)
# /usr/local/cuda when present: `which nvcc` may find a wrapper script outside the toolkit
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(shell which $(NVCC))))
CFLAGS_BASE += -DREWY_WITH_CUDA
LIB_OBJ  += $(CU_OBJ)
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
endif

.PHONY: all lib run test emu-recurrent emu-windows test-c test-asan test-python cuda-compile test-cuda test-fla bench clean check-exports install test-install test-fuzz fuzz test-cuda-random e2e bench-api

all: lib $(BUILD)/rewy

lib: $(BUILD)/librewy.a $(BUILD)/librewy.so

$(BUILD)/%.o: %.c $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/asan/%.o: %.c $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O1 -g $(SAN) -c $< -o $@

$(BUILD)/src/cuda/%.o: src/cuda/%.cu $(HDRS) $(wildcard src/cuda/*.cuh src/cuda/*.h) Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# archives made afresh (ar would keep the member of a deleted source)
$(BUILD)/librewy.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# The soname carries the major version (librewy.so.0); the librewy.so.0 link beside it lets programs
# linked with -L$(BUILD) -lrewy (the device tests) find it. --exclude-libs: the static CUDA
# runtime's symbols stay inside.
$(BUILD)/librewy.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,librewy.so.$(SOVERSION) -Wl,--exclude-libs,ALL -o $@ $^ $(LDLIBS)
	ln -sf librewy.so $(BUILD)/librewy.so.$(SOVERSION)

$(BUILD)/asan/librewy.a: $(ASAN_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/librewy_check.a: $(CHECK_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/asan/librewy_check.a: $(ASAN_CHECK_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/rewy: tools/rewy.c $(BUILD)/librewy_check.a $(BUILD)/librewy.a $(HDRS)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(BUILD)/librewy_check.a $(BUILD)/librewy.a $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/librewy_check.a $(BUILD)/librewy.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Itests $< $(BUILD)/librewy_check.a $(BUILD)/librewy.a $(LDLIBS) -o $@

$(BUILD)/asan/tests/%: tests/%.c $(BUILD)/asan/librewy_check.a $(BUILD)/asan/librewy.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O1 -g $(SAN) -Itests $< $(BUILD)/asan/librewy_check.a $(BUILD)/asan/librewy.a $(LDLIBS) $(SAN) -o $@

# The main job: check the chunk paths against the oracle (one line per case), then a short benchmark
# (8 rows of a second or two, each printed as it finishes), within 90 s on 2 cores from a built tree.
# OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to its SSE3 (Prescott)
# kernels, 2-3x slower; name the core from the CPU's flags unless the caller did.
BLAS_CORE = $(shell grep -q -w avx512f /proc/cpuinfo 2>/dev/null && echo SkylakeX || \
              (grep -q -w avx2 /proc/cpuinfo 2>/dev/null && echo Haswell))

run: all
	$(BUILD)/rewy check --brief
	OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-$(BLAS_CORE)} $(BUILD)/rewy bench --policy both --shape 1x2048x4 --reps 5 --max-seconds 3
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(MAKE) CUDA=1 BUILD=build/cuda-on lib && \
	  impl=rewy; extra=; $(PYTHON) -c "import fla" 2>/dev/null && impl=rewy,fla && extra="--rounds 3 --graph"; \
	  FLA_DISABLE_BACKEND_DISPATCH=1 REWY_LIBRARY=$(CURDIR)/build/cuda-on/librewy.so $(PYTHON) bench/bench_gpu.py --impl $$impl $$extra; fi

# The CLI's lists and error messages (issue 26), in seconds: lists run every item, a bad shape names its field.
check-cli: $(BUILD)/rewy
	@set -e; r=$(BUILD)/rewy; fail() { echo "check-cli: $$1"; exit 1; }; \
	  $$r check --brief --op gdn,kda --shape 1x64x2,2x40x2 --policy R | tail -1 | grep -q "^4/4 cases passed: PASS" \
	    || fail "check --op gdn,kda over two shapes did not pass 4 cases"; \
	  ! $$r check --shape 1x0x2 > /dev/null 2>&1 || fail "check accepted T = 0"; \
	  $$r check --shape 1x0x2 2>&1 | grep -q "T = 0 must be positive" || fail "no field named for T = 0"; \
	  $$r check --brief --op gdn --policy R --HV 3 --shape 1x64x2 | grep -q "HV = 3 is not a multiple of H = 2" \
	    || fail "no field named for HV = 3, H = 2"; \
	  $$r check --op gdn,foo 2>&1 | grep -q "unknown operator 'foo'" || fail "unknown operator not named"; \
	  test "$$($$r bench --op gdn,kda --shape 1x128x1 --K 32 --V 32 --reps 1 | grep -c -E '^(gdn|kda) ')" = 2 \
	    || fail "bench --op gdn,kda did not give two rows"; \
	  echo "rewy CLI: lists and error messages as expected"

# The longer CPU benchmark (several minutes on 2 cores): the default shapes (1x2048x4, 1x8192x16), both policies.
bench: all
	OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-$(BLAS_CORE)} $(BUILD)/rewy bench --policy both --reps 11 --max-seconds 40

test: test-c emu-recurrent emu-windows check-cli check-exports test-install test-asan test-fuzz cuda-compile test-python

# The CUDA token recurrence (src/cuda/recurrent.cu, the plan's path for K < 16) emulated on the host against the fp64
# oracle through the accuracy harness: its per-column arithmetic is the kernels' own (recurrent_step.h), so a
# machine without a GPU checks the math and the algorithm's indexing (tests/cuda/emu_recurrent.cpp).
CXX ?= c++
$(BUILD)/tests/cuda/emu_recurrent: tests/cuda/emu_recurrent.cpp src/cuda/recurrent_step.h $(BUILD)/librewy_check.a \
                                   $(BUILD)/librewy.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(WARN) -O2 -g -fopenmp -Iinclude -Isrc -Itests $< $(BUILD)/librewy_check.a $(BUILD)/librewy.a \
	  $(LDLIBS) -o $@

emu-recurrent: $(BUILD)/tests/cuda/emu_recurrent
	$<

# Policy R's time windows: their index arithmetic (src/cuda/windows.h, the kernels' and the planner's own) walked on
# the host over random batches: every chunk once, every checkpoint the backward starts from written by the forward
# (tests/cuda/emu_windows.cpp).
$(BUILD)/tests/cuda/emu_windows: tests/cuda/emu_windows.cpp src/cuda/windows.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(WARN) -O2 -g -Isrc $< -o $@

emu-windows: $(BUILD)/tests/cuda/emu_windows
	$<

# librewy.so exports exactly the functions that rewy.h declares REWY_API: no internals (hidden
# visibility), none missing
check-exports: $(BUILD)/librewy.so
	@nm -D --defined-only $< | awk '{print $$3}' | sort > $(BUILD)/exports.txt
	@sed -n 's/^REWY_API [^(]*\b\(rewy_[a-z0-9_]*\)(.*/\1/p' include/rewy.h | sort > $(BUILD)/exports.expected
	@if grep -v '^rewy_' $(BUILD)/exports.txt; then echo "librewy.so exports the symbols above, outside rewy_*"; exit 1; fi
	@diff $(BUILD)/exports.expected $(BUILD)/exports.txt || { echo "librewy.so's exports differ from \
	  rewy.h's REWY_API functions (<: declared only, >: exported only)"; exit 1; }
	@echo "librewy.so exports rewy.h's $$(wc -l < $(BUILD)/exports.txt) functions and nothing else"

# make install PREFIX=/path (default /usr/local; DESTDIR stages): include/rewy.h, lib/librewy.so.$(VERSION)
# with its soname link librewy.so.$(SOVERSION) and the link librewy.so for -lrewy, lib/librewy.a, and
# lib/pkgconfig/rewy.pc from rewy.pc.in with this build's libraries (LDLIBS: OpenBLAS, OpenMP, and with
# CUDA=1 the CUDA runtime) as what the static archive needs.
PREFIX_ABS = $(abspath $(PREFIX))
install: lib
	install -d $(DESTDIR)$(PREFIX_ABS)/include $(DESTDIR)$(PREFIX_ABS)/lib/pkgconfig
	install -m 644 include/rewy.h $(DESTDIR)$(PREFIX_ABS)/include/rewy.h
	install -m 755 $(BUILD)/librewy.so $(DESTDIR)$(PREFIX_ABS)/lib/librewy.so.$(VERSION)
	ln -sf librewy.so.$(VERSION) $(DESTDIR)$(PREFIX_ABS)/lib/librewy.so.$(SOVERSION)
	ln -sf librewy.so.$(SOVERSION) $(DESTDIR)$(PREFIX_ABS)/lib/librewy.so
	install -m 644 $(BUILD)/librewy.a $(DESTDIR)$(PREFIX_ABS)/lib/librewy.a
	sed -e 's|@PREFIX@|$(PREFIX_ABS)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@BLAS@|$(BLAS)|' -e 's|@CUDA@|$(CUDA)|' \
	  -e 's|@LIBS_PRIVATE@|$(strip $(LDLIBS))|' rewy.pc.in > $(DESTDIR)$(PREFIX_ABS)/lib/pkgconfig/rewy.pc

# The C example (the README's "Using it from C" shows it, checked first) built against a fresh install under $(BUILD)/prefix
# through pkg-config, as a user would: linked to librewy.so (found through rewy.pc's rpath), and
# statically to librewy.a (pkg-config --static); both must run and print "all finite".
test-install: lib
	@awk '/^## Using it from C/ {s = 1} s && /^```c$$/ {p = 1; next} p && /^```$$/ {exit} p' README.md | \
	  diff - examples/c/gdn_cpu.c || { echo "README.md's C program differs from examples/c/gdn_cpu.c (diff above)"; exit 1; }
	@command -v pkg-config >/dev/null || { timeout 120 apt-get install -y -q pkgconf || { timeout 120 apt-get update -q && \
	  timeout 120 apt-get install -y -q pkgconf; }; } >/dev/null 2>&1 || { echo "test-install needs pkg-config (Debian: pkgconf)"; exit 1; }
	@rm -rf $(BUILD)/prefix
	@$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(BUILD)/prefix >/dev/null
	@set -eo pipefail; export PKG_CONFIG_PATH=$(CURDIR)/$(BUILD)/prefix/lib/pkgconfig; \
	  $(CC) -std=c11 $(WARN) examples/c/gdn_cpu.c -o $(BUILD)/prefix/gdn_cpu $$(pkg-config --cflags --libs rewy); \
	  $(CC) -std=c11 $(WARN) $$(pkg-config --cflags --libs rewy) examples/c/gdn_cpu.c -o $(BUILD)/prefix/gdn_cpu_flags_first; \
	  $(CC) -std=c11 $(WARN) examples/c/gdn_cpu.c -o $(BUILD)/prefix/gdn_cpu_static \
	    $$(pkg-config --static --cflags --libs rewy | sed 's/-lrewy/-l:librewy.a/'); \
	  so=$$(ldd $(BUILD)/prefix/gdn_cpu | grep -o '/[^ ]*librewy.so.$(SOVERSION)'); \
	  test "$$so" = $(CURDIR)/$(BUILD)/prefix/lib/librewy.so.$(SOVERSION) || { echo "gdn_cpu loads '$$so'"; exit 1; }; \
	  ! ldd $(BUILD)/prefix/gdn_cpu_static | grep librewy || { echo "gdn_cpu_static is linked to librewy.so"; exit 1; }; \
	  for x in gdn_cpu gdn_cpu_flags_first gdn_cpu_static; do echo "== $$x (installed, pkg-config)"; \
	    $(BUILD)/prefix/$$x | tee $(BUILD)/prefix/$$x.out; tail -1 $(BUILD)/prefix/$$x.out | grep -qx 'all finite'; done

test-c: lib $(TESTS) $(BUILD)/rewy
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done

# ASan + UBSan builds of the same C tests (smaller case matrix: REWY_TEST_QUICK=1).
test-asan: $(ASAN_TESTS)
	@set -e; for t in $(ASAN_TESTS); do echo "== $$t (asan+ubsan)"; \
	  REWY_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $$t; done

# CI has no GPU but must compile every CUDA file of the library for sm_80 and sm_90a (the standalone
# probes of bench/dev are not the library: bench/README.md gives their own build lines).
cuda-compile: $(CU_OBJ)
	@echo "compiled $(words $(CU_OBJ)) CUDA files for sm_80 and sm_90a"

test-python: lib
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	@$(PYTHON) -c "import pytest" 2>/dev/null || $(PYTHON) -m pip install -q pytest
	REWY_LIBRARY=$(CURDIR)/$(BUILD)/librewy.so PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q tests/python

# the device tests that test-cuda runs (test_determinism among them); the random campaign has its own target
CUDA_TESTS = $(filter-out %/test_random,$(patsubst tests/cuda/%.c,build/cuda-on/tests/cuda/%,$(wildcard tests/cuda/test_*.c)))

test-cuda:
	$(MAKE) CUDA=1 BUILD=build/cuda-on lib
	$(MAKE) CUDA=1 BUILD=build/cuda-on $(patsubst tests/cuda/%.c,build/cuda-on/tests/cuda/%,$(wildcard tests/cuda/test_*.c)) \
	  build/cuda-on/tests/cuda/saved_check build/cuda-on/tests/test_sizes
	@# the saved-record check traps the CUDA context on a mismatch: its own program, one child process per case
	build/cuda-on/tests/cuda/saved_check
	build/cuda-on/tests/test_sizes
	@# REWY_CUDA_*: the tests' forced plan choices (tests/cuda_force.h, src/cuda/rewy_test.h: the library reads no
	@# environment); test_cuda first checks that they reach the plan.
	@# the test shapes are small: the scans take 16-column value tiles there unless told (REWY_CUDA_SCAN_BV), the
	@# forward scan's 8-warp blocks of 64 columns only where told (REWY_CUDA_SCAN_8W), and the wgmma scans (sm_90a)
	@# only where told (REWY_CUDA_SCAN_WG; at 64 columns as two warpgroups per block where V allows); the bf16
	@# forward scans on mma.sync write the output themselves (instead of output.cu) on grids of at least one
	@# block per two SMs, on the test shapes only where told (REWY_CUDA_SCAN_OUT=1), reading W and U from kkt_inverse
	@# where K and V allow (REWY_CUDA_SCAN_WU=0: A and V instead); the policy-R reverse scan at 16 columns runs the W
	@# chain with P formed afterwards (REWY_CUDA_SCAN_WF=0: P in the chain); the fused-output scan with W and U at 16
	@# columns starts beside kkt_inverse and waits on its ready flags (REWY_CUDA_SCAN_BESIDE=0: after it); policy R's
	@# register chains (chain_scan.cu) run on the test shapes only where told (REWY_CUDA_CHAIN=1: 64-column blocks,
	@# =2: the 128-column blocks the default takes on larger grids; REWY_CUDA_CHAIN_BULK=0: lean_tile's cp.async instead
	@# of sm_90's bulk copies); the plain fp32 token recurrence (recurrent.cu), the
	@# plan's path for K < 16, runs the whole matrix where told (REWY_CUDA_RECURRENT=1: at every K, a cross-check); the
	@# forward as the register chain with its output, the default where 16-column blocks would fill the SMs, on the test
	@# shapes only where told (REWY_CUDA_FWD_CHAIN=1: the plan's width, =32, =64, =128 (the widths the default takes:
	@# 128 at V = 128 on grids of at least one block an SM at that width); REWY_CUDA_FWD_WS=1, REWY_CUDA_CHAIN_WS=1: that
	@# chain and policy R's two chains as the warp-specialized wgmma kernels of chain_ws.cu wherever they apply (V = 128,
	@# sm_90a; by default only in place of the register chains' 128-column blocks on larger grids); policy R's
	@# time windows (the default on long sequences; REWY_CUDA_WIN=n chunks a window: the test shapes' 4 chunks a sequence
	@# in 4, 2 or 3 + 1 windows) over the scan pair, the register chains, and the checkpoints of the forward's scan,
	@# fused-output scan and chain; the scalar-gate ReWY pullback as the warp-specialized kernel (pullback_ws.cu, the
	@# default at K = V = 128 from an sm_90a binary; REWY_CUDA_PB_WS=0: pullback_fast there); the reverse scan and that
	@# pullback fused (reverse_ws.cu, the default on the large grids and in time windows; REWY_CUDA_REV_WS=1: wherever it
	@# applies; =0 with windows: their pair of chains, the path of pointers the fused pass cannot take), its recompute's
	@# value tile (REWY_CUDA_REC_VT=64 or 128), its pairs (two blocks a walk in windows, the default on the test shapes;
	@# REWY_CUDA_REV_PAIR=0: one), the forward chain's 64-column tile (REWY_CUDA_FWD_WS=1 with
	@# REWY_CUDA_FWD_CHAIN=64); policy R's sequence split (segments.cu; REWY_CUDA_SEG=n chunks a segment at K = V = 128,
	@# the forward's too; with REWY_CUDA_REV_WS=0 its windows one after the other, the path of pointers the fused pass
	@# cannot take; with REWY_CUDA_FWD_WS=0 the forward's one walk, the path of pointers its chain cannot take)
	@set -eo pipefail; for t in $(CUDA_TESTS); do echo "== $$t"; $$t; \
	  for e in REWY_CUDA_RECURRENT=1 REWY_CUDA_WIN=1 REWY_CUDA_WIN=3 "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_WF=0" \
	    "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1" "REWY_CUDA_WIN=3 REWY_CUDA_CHAIN=2" "REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1" \
	    "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1" "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=64" "REWY_CUDA_WIN=1 REWY_CUDA_SCAN_BV=32" \
	    "REWY_CUDA_WIN=2 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1" REWY_CUDA_FWD_CHAIN=1 REWY_CUDA_FWD_CHAIN=32 REWY_CUDA_FWD_CHAIN=64 REWY_CUDA_FWD_CHAIN=128 "REWY_CUDA_WIN=2 REWY_CUDA_FWD_CHAIN=128" REWY_CUDA_FWD_WS=1 "REWY_CUDA_WIN=2 REWY_CUDA_FWD_WS=1" REWY_CUDA_CHAIN_WS=1 "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN_WS=1" REWY_CUDA_CHAIN=1 REWY_CUDA_CHAIN=2 "REWY_CUDA_CHAIN=1 REWY_CUDA_CHAIN_BULK=0" "REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=2 REWY_CUDA_CHAIN_BULK=0" REWY_CUDA_SCAN_WF=0 REWY_CUDA_SCAN_OUT=1 "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_WU=0" "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BESIDE=0" "REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=64" REWY_CUDA_SCAN_BV=32 REWY_CUDA_SCAN_BV=64 "REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1" REWY_CUDA_SCAN_WG=1 \
	    "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=32" "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64" \
	    "REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_WG2=0" REWY_CUDA_PB_WS=0 "REWY_CUDA_WIN=3 REWY_CUDA_PB_WS=0" REWY_CUDA_REV_WS=1 "REWY_CUDA_REV_WS=1 REWY_CUDA_SCAN_WG=1" \
	    REWY_CUDA_SEG=1 REWY_CUDA_SEG=2 "REWY_CUDA_SEG=3 REWY_CUDA_FWD_WS=1" "REWY_CUDA_SEG=2 REWY_CUDA_REV_WS=0" \
	    "REWY_CUDA_SEG=2 REWY_CUDA_FWD_WS=0" "REWY_CUDA_WIN=2 REWY_CUDA_REV_WS=0" \
	    "REWY_CUDA_WIN=2 REWY_CUDA_REC_VT=128" \
	    "REWY_CUDA_SEG=2 REWY_CUDA_REC_VT=128" "REWY_CUDA_FWD_WS=1 REWY_CUDA_FWD_CHAIN=64" \
	    "REWY_CUDA_WIN=2 REWY_CUDA_REV_PAIR=0" "REWY_CUDA_WIN=1 REWY_CUDA_REV_PAIR=1"; do \
	    echo "== $$t, $$e"; env $$e $$t | tail -1; done; \
	  echo "== $$t --quick under compute-sanitizer memcheck, racecheck"; \
	  compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_RECURRENT=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_RECURRENT=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_CHAIN=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_WIN=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_WIN=1 REWY_CUDA_CHAIN=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_WIN=1 REWY_CUDA_FWD_CHAIN=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_WIN=2 REWY_CUDA_SCAN_OUT=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_WIN=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_CHAIN=64 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_CHAIN=128 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_CHAIN=128 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_WS=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_FWD_WS=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_CHAIN_WS=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_CHAIN_WS=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  compute-sanitizer --tool memcheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_PB_WS=0 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_REV_WS=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_REV_WS=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_SEG=2 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_SEG=2 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --v128 | tail -2; \
	  REWY_CUDA_CHAIN=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_CHAIN=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_CHAIN=2 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_SCAN_OUT=1 compute-sanitizer --tool memcheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_SCAN_OUT=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_SCAN_OUT=1 REWY_CUDA_SCAN_BV=64 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_SCAN_BV=64 REWY_CUDA_SCAN_8W=1 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; \
	  REWY_CUDA_SCAN_WG=1 REWY_CUDA_SCAN_BV=64 REWY_TEST_NO_GRAPH=1 compute-sanitizer --tool racecheck --error-exitcode 9 $$t --quick | tail -2; done
	@# the Python tests on CUDA tensors (the comparisons against FLA are test-fla's: Triton compiles for minutes)
	REWY_LIBRARY=$(CURDIR)/build/cuda-on/librewy.so PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q -rs tests/python \
	  --ignore=tests/python/test_fla.py --ignore=tests/python/test_fla_layers.py

# The random campaign on the device (issue 25): RANDOM_COUNT random valid configurations against the fp64
# oracle (tests/cuda/test_random.c; 2,000 take under 3 minutes on an H200 host, the host oracle dominating),
# then its quick part (24 smaller ones) under compute-sanitizer memcheck. RANDOM_SEED picks another campaign.
RANDOM_SEED  ?= 1
RANDOM_COUNT ?= 2000
test-cuda-random:
	$(MAKE) CUDA=1 BUILD=build/cuda-on lib build/cuda-on/tests/cuda/test_random
	build/cuda-on/tests/cuda/test_random --seed $(RANDOM_SEED) --count $(RANDOM_COUNT)
	@set -o pipefail; echo "== test_random --quick under compute-sanitizer memcheck"; \
	  compute-sanitizer --tool memcheck --error-exitcode 9 build/cuda-on/tests/cuda/test_random --quick \
	  --seed $(RANDOM_SEED) | tail -3

# rewy against FLA itself (functions and FLA's own layers), on a GPU with FLA on PYTHONPATH
# (e.g. PYTHONPATH=.ref/fla-src). Expect about ten minutes of Triton compilation on a fresh machine.
test-fla:
	$(MAKE) CUDA=1 BUILD=build/cuda-on lib
	REWY_LIBRARY=$(CURDIR)/build/cuda-on/librewy.so PYTHONPATH=$(CURDIR)/python$${PYTHONPATH:+:$$PYTHONPATH} \
	  FLA_DISABLE_BACKEND_DISPATCH=1 REWY_FLA_ONE_CONFIG=1 $(PYTHON) -m pytest -q -rs -s tests/python/test_fla.py \
	  tests/python/test_fla_layers.py

# End to end (issue 27), on a GPU with FLA in .ref/fla-src: FLA's GatedDeltaNet, DeltaNet and KDA models trained
# 200 steps with FLA's kernels, then with rewy.patch_fla() (and FlashQLA for GDN when flash_qla imports); a table
# (tok/s, ratio, peak memory, attention share, losses, agreement), e2e.json and e2e_loss.png in $OUT where set
# (the device machine), else build/e2e/e2e.json and docs/e2e_loss.png.
# About 8 minutes; FLA's compiled kernels and autotune choices stay in .fla-cache (carry it to save the compiles).
# Uses a prebuilt $(E2E_LIB) (built with CUDA=1 when missing). E2E_ARGS: bench/e2e.py options (--help).
E2E_LIB  ?= build/cuda-on/librewy.so
E2E_ARGS ?=
e2e:
	@test -f $(E2E_LIB) || $(MAKE) -j16 CUDA=1 BUILD=$(patsubst %/,%,$(dir $(E2E_LIB))) lib
	@mkdir -p .fla-cache/triton
	REWY_LIBRARY=$(CURDIR)/$(E2E_LIB) PYTHONPATH=$(CURDIR)/python:$(CURDIR)/.ref/fla-src$${PYTHONPATH:+:$$PYTHONPATH} \
	  FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$(CURDIR)/.fla-cache/triton TRITON_CACHE_AUTOTUNING=1 \
	  $(PYTHON) bench/e2e.py $(E2E_ARGS)

# Issue 24's acceptance benchmark, on a GPU with FLA in .ref/fla-src (.ref/peer_fla.sh) and FlashQLA where
# it imports (PEERS_SITE: its unpacked site-packages, bench/dev/peers_pack.sh): rewy's public Python
# functions, FLA and FlashQLA in one process, GDN and DeltaNet on the six shapes; the acceptance lines last.
# FLA autotunes and FlashQLA compiles (about 150 s a shape; keep TILELANG_CACHE_DIR) on their first calls.
# API_ARGS: bench/bench_api.py options (--shapes, --ops, --impls, --json).
PEERS_SITE ?=
API_ARGS   ?=
bench-api:
	@test -f $(E2E_LIB) || $(MAKE) -j16 CUDA=1 BUILD=$(patsubst %/,%,$(dir $(E2E_LIB))) lib
	@mkdir -p .fla-cache/triton .fla-cache/tl
	REWY_LIBRARY=$(CURDIR)/$(E2E_LIB) PYTHONPATH=$(CURDIR)/python:$(CURDIR)/.ref/fla-src$(if $(PEERS_SITE),:$(PEERS_SITE))$${PYTHONPATH:+:$$PYTHONPATH} \
	  FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=$(CURDIR)/.fla-cache/triton TRITON_CACHE_AUTOTUNING=1 \
	  TILELANG_CACHE_DIR=$(CURDIR)/.fla-cache/tl $(PYTHON) bench/bench_api.py $(API_ARGS)

# (a shorter stem than $(BUILD)/tests/%, so make prefers this rule for the device tests)
# Linked against librewy.a: the device tests reach the test-only plan override (src/cuda/rewy_test.h) and the
# oracle reaches the fp64 recurrence, neither of which librewy.so exports (only rewy.h's functions are).
$(BUILD)/tests/cuda/%: tests/cuda/%.c $(BUILD)/librewy_check.a $(BUILD)/librewy.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -DREWY_WITH_CUDA $(CFLAGS) -Itests -I$(CUDA_HOME)/include $< $(BUILD)/librewy_check.a \
	  $(BUILD)/librewy.a $(LDLIBS) -o $@

# bench/dev's C tools (variant_time: a plan variant's device time), linked like the device tests
$(BUILD)/bench/dev/%: bench/dev/%.c $(BUILD)/librewy.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -DREWY_WITH_CUDA $(CFLAGS) -Itests -I$(CUDA_HOME)/include $< $(BUILD)/librewy.a $(LDLIBS) -lm -o $@

# ---- Fuzzing (issue 25): libFuzzer over the C API on the CPU backend under ASan + UBSan
# (tests/fuzz/fuzz_api.c; seeds in tests/fuzz/corpus). make test-fuzz (in make test): FUZZ_RUNS
# executions from a fixed seed; make fuzz: FUZZ_SECONDS of fuzzing, the corpus kept in
# $(BUILD)/fuzz/corpus. A crash input lands in $(BUILD)/fuzz/crash-*: add it to tests/fuzz/corpus.
# clang with its libFuzzer runtime and its OpenMP (libomp) is installed from Debian when missing,
# as OpenBLAS is. The fuzz build takes plain-loop products (REWY_NO_CBLAS): ASan then sees every
# access, and OpenBLAS's libgomp does not meet clang's libomp in one process.
# (-Wno-pass-failed: at -O1 clang reports the `omp simd` loops it leaves scalar.)
FUZZ_CC      ?= clang
FUZZ_RUNS    ?= 1200
FUZZ_SECONDS ?= 1800
FUZZ_CFLAGS   = $(filter-out -DREWY_WITH_CUDA,$(CFLAGS_BASE)) -DREWY_NO_CBLAS -O1 -g $(SAN) -Wno-pass-failed
FUZZ_OBJ      = $(patsubst %.c,$(BUILD)/fuzz/%.o,$(LIB_SRC) $(CHECK_SRC))
# test-fuzz runs one OpenMP thread: under ASan the small problems' parallel regions cost three times the
# work (the seeds: 8.7 s of CPU with one thread, 32 s with two); make fuzz takes two, so that the
# per-thread workspace slots are exercised too
FUZZ_ENV      = ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
FUZZ_ARGS     = -max_len=48 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/

$(BUILD)/fuzz/.toolchain:
	@mkdir -p $(dir $@)
	@printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return omp_get_max_threads() < 0; }\n' > $(BUILD)/fuzz/probe.c
	@probe() { $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -fopenmp $(BUILD)/fuzz/probe.c -o $(BUILD)/fuzz/probe >/dev/null 2>&1; }; \
	  probe || { { command -v $(FUZZ_CC) || timeout 300 apt-get install -y -q clang || { timeout 120 apt-get update -q && \
	    timeout 300 apt-get install -y -q clang; }; v=$$($(FUZZ_CC) -dumpversion | cut -d. -f1); \
	    timeout 300 apt-get install -y -q libclang-rt-$$v-dev libomp-$$v-dev; } >/dev/null 2>&1; probe; } || \
	  { echo "fuzz: needs $(FUZZ_CC) with libFuzzer and OpenMP (Debian: clang libclang-rt-N-dev libomp-N-dev)"; exit 1; }
	@touch $@

$(BUILD)/fuzz/%.o: %.c $(HDRS) Makefile | $(BUILD)/fuzz/.toolchain
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(BUILD)/fuzz/fuzz_api: tests/fuzz/fuzz_api.c $(FUZZ_OBJ) $(HDRS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -lm -fopenmp -o $@

test-fuzz: $(BUILD)/fuzz/fuzz_api
	@rm -rf $(BUILD)/fuzz/run && mkdir -p $(BUILD)/fuzz/run
	$(FUZZ_ENV) OMP_NUM_THREADS=1 $< -seed=1 -runs=$(FUZZ_RUNS) $(FUZZ_ARGS) $(BUILD)/fuzz/run tests/fuzz/corpus

fuzz: $(BUILD)/fuzz/fuzz_api
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_ENV) OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive $< -max_total_time=$(FUZZ_SECONDS) $(FUZZ_ARGS) \
	  $(BUILD)/fuzz/corpus tests/fuzz/corpus

clean:
	rm -rf $(BUILD) build
