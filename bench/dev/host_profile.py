"""Where the host time of rewy's Python calls goes (issue 24: the small shape's GPU-bound backward through the Python API
is about twice the C API's). For GDN at one shape: the host time of a forward and of a backward (torch.autograd.grad, as
bench_api.py calls it) without a sync, the same for an empty autograd.Function with the same outputs (PyTorch's floor),
then cProfile's heaviest functions over many backward calls. Device-only.
    python3 bench/dev/host_profile.py 1x2048x4 [calls]"""
import cProfile, os, pstats, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from bench_api import IMPLS, leaves, backward  # noqa: E402
from bench_gpu import make_inputs  # noqa: E402

B, T, H = (int(v) for v in sys.argv[1].split("x"))
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
x, do, dht = make_inputs("gdn", B, T, H, 128, 128, seed=1, dev="cuda")
f = IMPLS["rewy"]("gdn")


class Floor(torch.autograd.Function):
    """no work: the outputs and gradients rewy's function allocates"""
    @staticmethod
    def forward(ctx, q, k, v, g, beta, h0):
        ctx.save_for_backward(q, k, v, g, beta, h0)
        return torch.empty_like(v), torch.empty_like(h0)

    @staticmethod
    def backward(ctx, do, dht):
        return tuple(torch.empty_like(t) for t in ctx.saved_tensors)


def floor_f(x):
    return Floor.apply(x["q"], x["k"], x["v"], x["g"], x["beta"], x["h0"])


def host_us(fn, n):
    """median host µs of fn() over n calls, the device kept ahead of the host by syncs every 20 calls"""
    ts = []
    for i in range(n):
        if i % 20 == 0:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        ts.append(1e6 * (time.perf_counter() - t))
    torch.cuda.synchronize()
    return statistics.median(ts)


for name, fn in (("rewy", f), ("floor", floor_f)):
    for _ in range(5):
        xl = leaves(x)
        backward(xl, fn(xl), do, dht)
    with torch.no_grad():
        fw = host_us(lambda: fn(x), calls)
    graphs = [(lambda xl: (xl, fn(xl)))(leaves(x)) for _ in range(calls)]
    it = iter(graphs)

    def one():
        xl, out = next(it)
        backward(xl, out, do, dht)
    bw = host_us(one, calls)
    print("%-6s GDN %s: host µs a call: forward %.1f (no_grad), backward %.1f (autograd.grad)" % (name, sys.argv[1], fw, bw))
    del graphs

graphs = [(lambda xl: (xl, f(xl)))(leaves(x)) for _ in range(calls)]
it = iter(graphs)
torch.cuda.synchronize()
pr = cProfile.Profile()
pr.enable()
for xl, out in graphs:
    backward(xl, out, do, dht)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
