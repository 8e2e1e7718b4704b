"""Python overhead per call: the public API against the bare ctypes call of librewy.

    python -m rewy._overhead              # prints median µs per forward and backward call

Both sides run the same problem (tiny by default, so that the C work is small) on the same
inputs; the bare side calls rewy_forward / rewy_backward through ctypes on prefilled
parameter structs and preallocated buffers, so the difference is what the package adds:
argument checks, the torch.library custom op dispatch, autograd bookkeeping, allocations
through PyTorch, and filling the structs.
"""
import statistics
import time
from ctypes import byref

import torch

from . import _core, _lib
from .ops import chunk_gated_delta_rule


def _median_us(fn, repeat, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def measure(B=1, T=16, H=1, K=16, V=16, repeat=1000, warmup=100, device="cpu"):
    """Median µs of: API forward, bare forward, API backward, bare backward (GDN, fp32)."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=gen)) / 16
    beta = torch.rand(B, T, H, generator=gen)
    do = torch.randn(B, T, H, V, generator=gen)
    q, k, v, g, beta, do = (t.to(device) for t in (q, k, v, g, beta, do))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)

    # the public API
    def api_forward():
        chunk_gated_delta_rule(*leaves)
        sync()

    state = {}

    def api_prepare():
        state["o"] = chunk_gated_delta_rule(*leaves)[0]

    def api_backward():
        torch.autograd.grad(state["o"], leaves, do)
        sync()

    # the bare ctypes calls, on buffers allocated once
    L = _lib.lib()
    scale = K ** -0.5
    cfg = _core.config(_lib.OP_GDN, q, v, None, None, scale, 64, _lib.POLICY_R, _lib.BWD_REWY, False)
    _, (n_saved, n_fws, n_bws) = _core.sizes(cfg)
    o = torch.empty_like(v)
    saved, fws, bws = (torch.empty(max(n, 16), dtype=torch.uint8, device=device) for n in (n_saved, n_fws, n_bws))
    grads = [torch.empty_like(t) for t in (q, k, v, g, beta)]
    P = _core._ptr
    fp = _lib.FwdParams(cfg=cfg, q=P(q), k=P(k), v=P(v), g=P(g), beta=P(beta), o=P(o), saved=P(saved),
                        saved_bytes=n_saved, workspace=P(fws), workspace_bytes=n_fws)
    bp = _lib.BwdParams(cfg=cfg, q=P(q), k=P(k), v=P(v), g=P(g), beta=P(beta), saved=P(saved),
                        saved_bytes=n_saved, do_=P(do), dq=P(grads[0]), dk=P(grads[1]), dv=P(grads[2]),
                        dg=P(grads[3]), dbeta=P(grads[4]), workspace=P(bws), workspace_bytes=n_bws)
    fwd, bwd = L.rewy_forward, L.rewy_backward
    assert fwd(byref(fp)) == _lib.OK and bwd(byref(bp)) == _lib.OK

    def bare_forward():
        fwd(byref(fp))
        sync()

    def bare_backward():
        bwd(byref(bp))
        sync()

    # PyTorch's own floor: an autograd.Function that allocates the same outputs and gradients
    # and calls nothing (any op implemented in Python pays this; FLA's wrappers too)
    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            ctx.save_for_backward(*xs)
            return torch.empty_like(xs[2]), torch.empty(0), torch.empty(0, dtype=torch.uint8)

        @staticmethod
        def backward(ctx, do_, *_):
            return tuple(torch.empty_like(x) for x in ctx.saved_tensors)

    def floor_prepare():
        state["o"] = Floor.apply(*leaves)[0]

    res = dict(api_forward=_median_us(api_forward, repeat, warmup), bare_forward=_median_us(bare_forward, repeat, warmup),
               bare_backward=_median_us(bare_backward, repeat, warmup),
               floor_forward=_median_us(lambda: Floor.apply(*leaves), repeat, warmup))
    # backward: time only the gradient call, with a fresh graph built (untimed) before each call
    for key, prepare in (("api_backward", api_prepare), ("floor_backward", floor_prepare)):
        for _ in range(warmup):
            prepare()
            api_backward()
        times = []
        for _ in range(repeat):
            prepare()
            t0 = time.perf_counter_ns()
            api_backward()
            times.append(time.perf_counter_ns() - t0)
        res[key] = statistics.median(times) / 1e3
    for d in ("forward", "backward"):
        res["overhead_" + d] = res["api_" + d] - res["bare_" + d]
    res["shape"] = dict(B=B, T=T, H=H, K=K, V=V, device=str(device))
    return res


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    r = measure(repeat=args.repeat, device=args.device)
    print(f"shape {r['shape']}  (chunk_gated_delta_rule, fp32, median of {args.repeat})")
    for d in ("forward", "backward"):
        print(f"{d:9s} API {r['api_' + d]:8.1f} µs   bare C {r['bare_' + d]:8.1f} µs   "
              f"Python overhead {r['overhead_' + d]:8.1f} µs   (of which PyTorch's autograd.Function "
              f"floor {r['floor_' + d]:6.1f} µs)")


if __name__ == "__main__":
    main()
