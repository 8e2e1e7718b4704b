#!/bin/bash
# FlashQLA (Qwen's TileLang kernels for GDN on Hopper, MIT) and the packages it needs that the GPU machine lacks, as
# one site-packages folder packed into .peers/peers-site.tar.xz (about 52 MB: it fits a device call's carry beside
# librewy.so). The wheels are fetched for the GPU machine's Python (3.12, x86-64 Linux), not for this one, and only
# unpacked: nothing is installed here. On the device: tar xJf .peers/peers-site.tar.xz -C /tmp, then /tmp/site goes
# on PYTHONPATH (bench/dev/s24_api.sh, make bench-api PEERS_SITE=/tmp/site). About 3 minutes (mostly xz).
#   bench/dev/peers_pack.sh [DEST]      (default .peers, git-ignored)
set -eu; cd "$(dirname "$0")/../.."
dest=$(readlink -f "${1:-.peers}"); work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plats=""; for p in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17; do plats="$plats --platform ${p}_x86_64"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plats \
  --platform manylinux2014_x86_64 -d "$work/wheels" \
  flash-qla==0.1.3 tilelang==0.1.15 "apache-tvm-ffi>=0.1.11,<0.1.13" "z3-solver>=4.13.0,<4.15.5" torch-c-dlpack-ext
mkdir -p "$work/site" "$dest"
for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/site"; done
# z3-solver's data folder (its command-line binary and C headers, 22 MB) is not imported: left out, so that the
# pack fits a call's carry beside librewy.so and the TileLang cache
tar cJf "$dest/peers-site.tar.xz" -C "$work" --exclude="site/z3_solver-*.data" site
ls -la "$dest/peers-site.tar.xz"
