#!/bin/bash
# Session 24: the binaries for the next device calls, built here (about 12 minutes on 2 cores): librewy.so, test_cuda,
# test_random and variant_time for sm_90a (build/cuda-on); test_cuda as sm_80 PTX (build/cuda-80, s24_check.sh). Packed into .carry/bins.tar.xz; FLA goes beside it in .carry/e2e/fla.tar.xz
# (.ref/peer_fla.sh).
set -eu; cd "$(dirname "$0")/../.."
ARCH="-gencode arch=compute_90a,code=sm_90a"
make -j2 CUDA=1 BLAS=0 NVARCH="$ARCH" BUILD=build/cuda-on lib build/cuda-on/tests/cuda/test_cuda \
  build/cuda-on/tests/cuda/test_random build/cuda-on/bench/dev/variant_time > /tmp/s24_build.log 2>&1
# test_cuda as sm_80 PTX alone (JIT-compiled on the H200 with __CUDA_ARCH__ = 800): the sm_80 paths, on the device
make -j2 CUDA=1 BLAS=0 NVARCH="-gencode arch=compute_80,code=compute_80" BUILD=build/cuda-80 \
  build/cuda-80/tests/cuda/test_cuda >> /tmp/s24_build.log 2>&1
B=build/cuda-on; mkdir -p .carry
# one xz stream with the largest dictionary: the binaries share most of their device code (about 40 MB each)
tar cf - $B/librewy.so $B/tests/cuda/test_cuda $B/tests/cuda/test_random $B/bench/dev/variant_time \
  build/cuda-80/tests/cuda/test_cuda | xz -9 -T1 > .carry/bins.tar.xz
# the library alone for the public-API benchmark beside FLA and FlashQLA (bench/dev/s24_api.sh)
mkdir -p .carry/e2e && xz -9 -T1 -c $B/librewy.so > .carry/e2e/librewy.so.xz
[ -f .carry/e2e/fla.tar.xz ] || echo "no .carry/e2e/fla.tar.xz: run .ref/peer_fla.sh with the FLA mirror"
ls -la .carry .carry/e2e
