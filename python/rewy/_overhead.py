"""Python overhead per call: the public API against the bare ctypes call of librewy.

    python -m rewy._overhead              # prints median µs per forward and backward call

Both sides run the same problem (tiny by default, so that the C work is small) on the same
inputs; the bare side calls rewy_forward / rewy_backward through ctypes on prefilled
parameter structs and preallocated buffers, so the difference is what the package adds:
argument checks, autograd bookkeeping, allocations through PyTorch, and filling the structs.

Three figures per direction:
  raw     API − bare C: everything between the caller and the C call;
  floor   the same call through an empty torch.autograd.Function that only allocates the
          outputs (forward) or the gradients (backward): PyTorch's own cost, paid by any op
          written in Python (FLA's too); for the backward it is the autograd engine's floor;
  rewy    raw − floor: what rewy's own Python code adds.
The backward is timed twice: through the autograd engine (torch.autograd.grad on a fresh
graph), and as the direct call of rewy's backward function on a recorded graph node, which
is the time rewy's code takes per backward call ("direct − bare C"; no engine floor in it).
Samples of all the timings are taken in interleaved rounds, so that drift in the machine's
load falls on each of them alike.
"""
import statistics
import time
from ctypes import byref

import torch

from . import _core, _lib
from .ops import chunk_gated_delta_rule


def _sample_ns(fn, n, prepare=None):
    """n timings of fn() in ns; prepare() (untimed) runs before each."""
    times = []
    for _ in range(n):
        if prepare is not None:
            prepare()
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return times


def measure(B=1, T=16, H=1, K=16, V=16, repeat=1000, warmup=100, device="cpu", rounds=5):
    """Median µs per call (GDN, fp32) of: api_forward, bare_forward, floor_forward, api_backward
    (through the autograd engine), bare_backward, floor_backward and direct_backward (rewy's
    backward function called on a graph node), and the differences: overhead_* = api − bare
    (raw), rewy_* = api − bare − floor, rewy_backward_direct = direct_backward − bare_backward."""
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

    def engine_backward():
        torch.autograd.grad(state["o"], leaves, do)
        sync()

    # rewy's backward function called directly on a recorded node (the node is the ctx), with
    # the gradients the engine hands it: do, and None for the unused final state and saved buffer
    state["direct_o"] = chunk_gated_delta_rule(*leaves)[0]   # kept alive with its graph
    node = state["direct_o"].grad_fn
    assert isinstance(node, _core._ChunkFunction._backward_cls), type(node)

    def direct_backward():
        _core._ChunkFunction.backward(node, do, None, None)
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

    def floor_forward():
        Floor.apply(*leaves)

    def floor_prepare():
        state["o"] = Floor.apply(*leaves)[0]

    # name -> (timed function, untimed preparation); backwards through the engine get a fresh graph
    timed = dict(api_forward=(api_forward, None), bare_forward=(bare_forward, None),
                 floor_forward=(floor_forward, None), api_backward=(engine_backward, api_prepare),
                 bare_backward=(bare_backward, None), floor_backward=(engine_backward, floor_prepare),
                 direct_backward=(direct_backward, None))
    samples = {key: [] for key in timed}
    per_round = max(1, repeat // rounds)
    for _ in range(rounds):
        for key, (fn, prepare) in timed.items():
            _sample_ns(fn, max(1, warmup // rounds), prepare)
            samples[key] += _sample_ns(fn, per_round, prepare)
    res = {key: statistics.median(times) / 1e3 for key, times in samples.items()}
    for d in ("forward", "backward"):
        res["overhead_" + d] = res["api_" + d] - res["bare_" + d]
        res["rewy_" + d] = res["overhead_" + d] - res["floor_" + d]
    res["rewy_backward_direct"] = res["direct_backward"] - res["bare_backward"]
    res["shape"] = dict(B=B, T=T, H=H, K=K, V=V, device=str(device))
    res["samples"] = per_round * rounds
    return res


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    r = measure(repeat=args.repeat, device=args.device)
    print(f"shape {r['shape']}  (chunk_gated_delta_rule, fp32, median of {r['samples']} calls in 5 interleaved "
          f"rounds; torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"{'':20s}{'API':>9s}{'bare C':>9s}{'raw':>9s}{'floor':>9s}{'rewy':>9s}   µs per call")
    print(f"{'forward':20s}{r['api_forward']:9.1f}{r['bare_forward']:9.1f}{r['overhead_forward']:9.1f}"
          f"{r['floor_forward']:9.1f}{r['rewy_forward']:9.1f}")
    print(f"{'backward (engine)':20s}{r['api_backward']:9.1f}{r['bare_backward']:9.1f}{r['overhead_backward']:9.1f}"
          f"{r['floor_backward']:9.1f}{r['rewy_backward']:9.1f}")
    print(f"{'backward (direct)':20s}{r['direct_backward']:9.1f}{r['bare_backward']:9.1f}"
          f"{r['rewy_backward_direct']:9.1f}{'-':>9s}{r['rewy_backward_direct']:9.1f}")
    print("raw = API − bare C;  rewy = raw − floor (floor: an empty torch.autograd.Function allocating the same\n"
          "outputs/gradients; for the engine backward, PyTorch's autograd engine floor);  direct: rewy's backward\n"
          "function called on a graph node, without the engine")


if __name__ == "__main__":
    main()
