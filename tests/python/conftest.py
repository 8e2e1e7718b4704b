import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))   # helpers.py, reference.py

# The fp64 reference is thousands of tiny ops; torch's intra-op threads only add overhead there.
torch.set_num_threads(1)

# REWY_FLA_ONE_CONFIG=1 (device runs of test_fla*.py): FLA's Triton kernels take the first of
# their autotuning configs instead of timing them all, which otherwise costs minutes per new
# shape. A config changes speed, not the math; these tests compare values only.
if os.environ.get("REWY_FLA_ONE_CONFIG") == "1":
    try:
        import triton

        _autotune = triton.autotune

        def _first_config(configs, *args, **kwargs):
            return _autotune(list(configs)[:1], *args, **kwargs)

        triton.autotune = _first_config
    except ImportError:
        pass
