#!/bin/bash
# FLA for the device runs, in the ignored .ref/fla-src: its fla/ package from a git mirror (the `fetch` tool's
# github:fla-org/flash-linear-attention gives /work/.mirror/fla-org+flash-linear-attention/repo), with the one check
# that refuses its GDN backward on Hopper with Triton < 3.7.1 (its #640: wrong results there) turned off, so that it
# can be timed; never a correctness reference (the fp64 oracle is). Then .carry/e2e/fla.tar.xz for `run`'s carry.
#   bench/dev/fla_ref.sh /work/.mirror/fla-org+flash-linear-attention/repo
set -eu; cd "$(dirname "$0")/../.."
MIRROR=${1:?the FLA git mirror}
rm -rf .ref/fla-src && mkdir -p .ref/fla-src .carry/e2e
git -C "$MIRROR" archive HEAD fla | tar x -C .ref/fla-src
python3 - <<'PY'
p = '.ref/fla-src/fla/ops/common/chunk_o.py'
s = open(p).read()
old = "    if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:\n        raise"
assert s.count(old) == 1, "FLA's #640 check moved: look at chunk_bwd_dqkwg in " + p
s = s.replace(old, "    if False and g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:  "
                   "# rewy: #640 check off, timing only\n        raise")
open(p, 'w').write(s)
PY
tar cJf .carry/e2e/fla.tar.xz -C .ref/fla-src fla
echo "FLA $(git -C "$MIRROR" rev-parse --short HEAD) in .ref/fla-src, #640 check off; .carry/e2e/fla.tar.xz"
