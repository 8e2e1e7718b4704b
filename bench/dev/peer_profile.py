"""Per-kernel device times of one forward and one backward (torch.profiler) for rewy and its peers through the public
functions bench_api.py times (IMPLS there: rewy, fla, flashqla), after a warm-up (FLA's autotuning, FlashQLA's
compile: keep their caches as bench/dev/s41_api.sh does). Device-only; the peers from their ignored copies.
    python3 bench/dev/peer_profile.py gdn 8x2048x32 rewy,flashqla     (fla: FLA's, from .ref/fla-src)"""
import os, sys
import torch
from torch.profiler import profile, ProfilerActivity

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from bench_api import IMPLS, leaves, backward  # noqa: E402
from bench_gpu import make_inputs  # noqa: E402

op, shape = sys.argv[1], sys.argv[2]
impls = sys.argv[3].split(",") if len(sys.argv) > 3 else ["rewy", "flashqla"]
B, T, H = (int(v) for v in shape.split("x"))
x, do, dht = make_inputs(op, B, T, H, 128, 128, seed=sum((B, T, H)), dev="cuda")


def table(title, fn, reps=5):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = sorted(((e.device_time_total / reps / 1000, e.count / reps, e.key) for e in prof.key_averages()
                   if e.device_time_total > 0), reverse=True)
    print("%s: %.3f ms of kernels a call" % (title, sum(r[0] for r in rows)))
    for ms, n, key in rows[:12]:
        print("  %8.3f ms %4.1f×  %s" % (ms, n, key[:110]))


for name in impls:
    f = IMPLS[name](op)
    for _ in range(3):  # warm-up: compile, autotune
        xl = leaves(x)
        backward(xl, f(xl), do, dht)
    with torch.no_grad():
        table("%s %s %s forward" % (name, op, shape), lambda: f(x))
    graphs = []
    for _ in range(5):
        xl = leaves(x)
        graphs.append((xl, f(xl)))
    it = iter(graphs)

    def one():
        xl, out = next(it)
        backward(xl, out, do, dht)
    table("%s %s %s backward" % (name, op, shape), one)
