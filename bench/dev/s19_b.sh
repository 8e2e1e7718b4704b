#!/bin/bash
# Session 19, call B: the in-model profile of rewy's attention call (layer_profile.py), then issue 25's
# diagnostics (s19_diag.sh). Carried: .carry/bins.tar.xz (librewy.so, test_random, saved_check; sm_90a).
set -u; cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
tar xJf .carry/bins.tar.xz
REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONPATH=$PWD/python timeout 150 python3 bench/dev/layer_profile.py 2>&1 | tee $OUT/profile.txt
bash bench/dev/s19_diag.sh 2>&1 | tee $OUT/diag.txt
