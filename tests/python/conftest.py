import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))   # helpers.py, reference.py

# The fp64 reference is thousands of tiny ops; torch's intra-op threads only add overhead there.
torch.set_num_threads(1)
