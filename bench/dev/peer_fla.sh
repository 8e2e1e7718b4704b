#!/bin/bash
# FLA for timing beside rewy (never as a reference): its fla/ package at bc3b101d, from a git mirror of
# fla-org/flash-linear-attention, into .ref/fla-src (git-ignored), with the one check that refuses its gated backward on
# Hopper with Triton < 3.7.1 (its #640: wrong results there) turned off; then packed as .carry/e2e/fla.tar.xz for the
# device (bench/dev/s41_api.sh).
#   bench/dev/peer_fla.sh /path/to/flash-linear-attention.git
set -eu; cd "$(dirname "$0")/../.."
src=${1:?"a git directory of fla-org/flash-linear-attention"}
rm -rf .ref/fla-src && mkdir -p .ref/fla-src .carry/e2e
git -C "$src" archive bc3b101d fla | tar x -C .ref/fla-src
f=.ref/fla-src/fla/ops/common/chunk_o.py
grep -q "if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:" $f
sed -i 's/    if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:/    if False:  # rewy: #640 check off, timed only/' $f
tar cJf .carry/e2e/fla.tar.xz -C .ref/fla-src fla
ls -la .carry/e2e/fla.tar.xz
