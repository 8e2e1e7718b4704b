"""one_step.py OP BxTxH [policy]: one rewy forward and one backward (R or A), nothing else: a clean
target for Nsight Compute (every kernel launched once, in pipeline order)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_gpu as bg  # noqa: E402

op, shape = sys.argv[1], sys.argv[2]
pol = sys.argv[3] if len(sys.argv) > 3 else "R"
B, T, H = (int(v) for v in shape.split("x"))
rw = bg.Rewy(os.environ["REWY_LIBRARY"])
x, do, dht = bg.make_inputs(op, B, T, H, 128, 128)
c = rw.cfg(op, B, T, H, 128, 128, pol, "rewy")
o, ht, saved = rw.forward(c, x)
rw.backward(c, x, saved, do, dht)
torch.cuda.synchronize()
