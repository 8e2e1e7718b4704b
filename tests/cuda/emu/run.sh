#!/bin/bash
# Host SIMT emulation of the vector-gate CUDA kernels (src/cuda/vec_*.cu) against the CPU backend,
# for machines without a GPU: one std::thread per CUDA thread, std::barrier for __syncthreads and
# warp collectives, mma.m16n8k8 tf32 emulated per fragment (low 13 bits dropped), cp.async as a
# plain copy, shared memory filled with NaN before every block. It checks the kernels' indexing,
# barriers and math, not timing, shared-memory budgets, cp.async ordering or coalescing.
# Usage (repository root): tests/cuda/emu/run.sh [case index]; EMU_ASAN=1 builds with AddressSanitizer
# and UBSan (global buffers and each block's shared memory sized exactly as the launchers size them).
set -euo pipefail
cd "$(dirname "$0")/../../.."
make -s BUILD=build lib >/dev/null
python3 tests/cuda/emu/gen.py build/emu
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BLAS=""
syms=$(nm build/librewy.a 2>/dev/null || true)
[[ $syms == *"U cblas_sgemm"* ]] && BLAS="-L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas"
SAN=""
[[ "${EMU_ASAN:-0}" == 1 ]] && SAN="-fsanitize=address,undefined" && export ASAN_OPTIONS=detect_leaks=0
g++ -std=c++20 -O1 -g -w $SAN -Iinclude -Isrc -I"$CUDA_HOME/include" -Ibuild/emu -Itests/cuda/emu tests/cuda/emu/driver.cpp \
    build/librewy.a $BLAS -fopenmp -pthread -o build/emu/driver
exec build/emu/driver "$@"
