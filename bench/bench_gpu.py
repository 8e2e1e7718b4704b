#!/usr/bin/env python3
"""bench_gpu.py: rewy (CUDA C, through its C API) and FLA (Triton) on one GPU, same process, same inputs.

Suite (B,T,H) = (1,2048,4) (1,8192,16) (4,4096,16) (8,2048,32) (2,16384,8) (16,1024,16), K = V = 128, bf16,
all four operators (--ops). Inputs as in docs/MATH.md §10: feature-normalized Gaussian q/k,
Gaussian v, g = logsigmoid(x)/16 (per channel for KDA/GDN2; --gates model: as FLA's layers make them),
beta (GDN2: b, w) in [0.1, 0.9],
h0 = 0.1 N(0,1), final state requested. FLA's policy A is its disable_recompute=True (KDA, GDN2).

Boundaries (as the FLA baseline): forward = the call that returns o and ht (rewy: rewy_forward with
its saved buffer and workspace allocated through PyTorch; FLA: the autograd call under no_grad).
Backward = everything that produces dq, dk, dv, dg, dbeta, dh0 from (do, dht): rewy_backward with
its workspace and gradient tensors allocated through PyTorch (policy R includes the recompute);
FLA: torch.autograd.grad of (o, ht). Peak backward memory = max allocated during one backward minus
allocated before it. Times: median of --reps CUDA-event timings after warm-up; with --graph also the
median of --reps timed replays of the call captured as a CUDA graph (GPU time without host launch cost).

Environment: REWY_LIBRARY (default build/cuda-on/librewy.so); FLA from PYTHONPATH with
FLA_DISABLE_BACKEND_DISPATCH=1 (set here). Output: a table on stdout and JSON lines (--json).
"""
import argparse, ctypes, json, math, os, statistics, sys, time

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
import torch
import torch.nn.functional as F

SUITE = [(1, 2048, 4), (1, 8192, 16), (4, 4096, 16), (8, 2048, 32), (2, 16384, 8), (16, 1024, 16)]

# ------------------------------------------------------------------------------------------ C API
# The package's ctypes binding (python/rewy/_lib.py, checked against rewy.h by tests/python/test_abi.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from rewy import _lib  # noqa: E402

OP = {"deltanet": _lib.OP_DELTANET, "gdn": _lib.OP_GDN, "kda": _lib.OP_KDA, "gdn2": _lib.OP_GDN2}
VEC = ("kda", "gdn2")    # per-channel gates g [B,T,H,K]
POL = {"R": _lib.POLICY_R, "A": _lib.POLICY_A}
ALGO = {"rewy": _lib.BWD_REWY, "wy": _lib.BWD_WY}


def ptr(t):
    return None if t is None else t.data_ptr()


class Rewy:
    def __init__(self, path):
        os.environ["REWY_LIBRARY"] = path    # the library _lib loads
        self.lib = _lib.lib()
        assert self.lib.rewy_has_cuda(), "librewy was built without CUDA"

    def cfg(self, op, B, T, H, K, V, policy="R", algo="rewy"):
        c = _lib.Config()
        c.op, c.backend, c.dtype = OP[op], _lib.BACKEND_CUDA, _lib.BF16
        c.B, c.T, c.H, c.HV, c.K, c.V = B, T, H, H, K, V
        c.chunk_size, c.policy, c.bwd_algo = 64, POL[policy], ALGO[algo]
        c.stream = torch.cuda.current_stream().cuda_stream
        return c

    def size(self, fn, c):
        n = ctypes.c_size_t()
        st = getattr(self.lib, fn)(ctypes.byref(c), ctypes.byref(n))
        assert st == 0, self.lib.rewy_strerror(st)
        return n.value

    def check(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what}: {self.lib.rewy_strerror(st).decode()}")

    def forward(self, c, x):
        """x: dict of inputs. Returns o, ht, saved (the saved buffer is the autograd context)."""
        dev = x["q"].device
        saved = torch.empty(self.size("rewy_saved_size", c), dtype=torch.uint8, device=dev)
        ws = torch.empty(self.size("rewy_fwd_workspace_size", c), dtype=torch.uint8, device=dev)
        o = torch.empty_like(x["v"])
        ht = torch.empty_like(x["h0"])
        c.stream = torch.cuda.current_stream().cuda_stream  # the stream at call time (graph capture uses a side stream)
        p = _lib.FwdParams()
        p.cfg = c
        p.q, p.k, p.v, p.g, p.beta, p.h0 = ptr(x["q"]), ptr(x["k"]), ptr(x["v"]), ptr(x.get("g")), ptr(x.get("beta")), ptr(x["h0"])
        p.b, p.w = ptr(x.get("b")), ptr(x.get("w"))
        p.o, p.ht, p.saved, p.workspace = ptr(o), ptr(ht), ptr(saved), ptr(ws)
        p.saved_bytes, p.workspace_bytes = saved.numel(), ws.numel()
        self.check(self.lib.rewy_forward(ctypes.byref(p)), "rewy_forward")
        return o, ht, saved

    def backward(self, c, x, saved, do, dht):
        dev = x["q"].device
        ws = torch.empty(self.size("rewy_bwd_workspace_size", c), dtype=torch.uint8, device=dev)
        dq, dk, dv = torch.empty_like(x["q"]), torch.empty_like(x["k"]), torch.empty_like(x["v"])
        dg = torch.empty_like(x["g"]) if x.get("g") is not None else None
        like = lambda n: torch.empty_like(x[n]) if x.get(n) is not None else None
        dbeta, db, dw, dh0 = like("beta"), like("b"), like("w"), torch.empty_like(x["h0"])
        c.stream = torch.cuda.current_stream().cuda_stream
        p = _lib.BwdParams()
        p.cfg = c
        p.q, p.k, p.v, p.g, p.beta, p.h0 = ptr(x["q"]), ptr(x["k"]), ptr(x["v"]), ptr(x.get("g")), ptr(x.get("beta")), ptr(x["h0"])
        p.b, p.w, p.db, p.dw = ptr(x.get("b")), ptr(x.get("w")), ptr(db), ptr(dw)
        p.saved, p.saved_bytes = ptr(saved), saved.numel()
        p.do_, p.dht = ptr(do), ptr(dht)
        p.dq, p.dk, p.dv, p.dg, p.dbeta, p.dh0 = ptr(dq), ptr(dk), ptr(dv), ptr(dg), ptr(dbeta), ptr(dh0)
        p.workspace, p.workspace_bytes = ptr(ws), ws.numel()
        self.check(self.lib.rewy_backward(ctypes.byref(p)), "rewy_backward")
        return dq, dk, dv, dg, dbeta, db, dw, dh0


# ------------------------------------------------------------------------------------------ inputs
def model_gates(shape, H, gen, dev):
    """Log gates as FLA's layers make them at initialisation: −exp(A_log)·softplus(x + dt_bias), A = e^{A_log} in
    [1, 16] per head, dt_bias the inverse softplus of dt in [0.001, 0.1] (log-uniform) per channel, x ~ N(0, 1).
    Far stronger than logsigmoid/16: per-token decays down to about −1.6 (docs/PERF.md, end to end)."""
    A = 1 + 15 * torch.rand(H, device=dev, generator=gen)
    dt = torch.exp(math.log(1e-3) + (math.log(0.1) - math.log(1e-3)) * torch.rand(shape[2:], device=dev, generator=gen))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    x = torch.randn(*shape, device=dev, generator=gen)
    return -A.view((H,) + (1,) * (len(shape) - 3)) * F.softplus(x + dt_bias)


GATES = "weak"   # --gates


def make_inputs(op, B, T, H, K, V, seed=0, dev="cuda"):
    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16
    unif = lambda *shape: (0.1 + 0.8 * torch.rand(*shape, device=dev, generator=gen)).to(bf)
    gshape = (B, T, H, K) if op in VEC else (B, T, H)
    x = {
        "q": F.normalize(torch.randn(B, T, H, K, device=dev, generator=gen), dim=-1).to(bf),
        "k": F.normalize(torch.randn(B, T, H, K, device=dev, generator=gen), dim=-1).to(bf),
        "v": torch.randn(B, T, H, V, device=dev, generator=gen).to(bf),
        "beta": unif(B, T, H) if op != "gdn2" else None,
        "b": unif(B, T, H, K) if op == "gdn2" else None,
        "w": unif(B, T, H, V) if op == "gdn2" else None,
        "h0": 0.1 * torch.randn(B, H, K, V, device=dev, generator=gen),
        "g": None if op == "deltanet" else model_gates(gshape, H, gen, dev) if GATES == "model"
             else F.logsigmoid(torch.randn(*gshape, device=dev, generator=gen)) / 16,
    }
    do = torch.randn(B, T, H, V, device=dev, generator=gen).to(bf)
    dht = 0.1 * torch.randn(B, H, K, V, device=dev, generator=gen)
    return x, do, dht


def cuda_time(fn, reps, warmup=3, samples=None):
    """Median of reps CUDA-event timings of fn after warmup calls; the timings are appended to samples if given."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = [] if samples is None else samples
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def graph_time(fn, reps, warmup=3):
    """Median of reps CUDA-event timings of one replay of fn captured as a CUDA graph: GPU time without the
    host's launch overhead (Python, ctypes, Triton's launcher), the same for both sides. None if fn cannot
    be captured."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
    except Exception as e:  # noqa: BLE001 (report, do not stop the benchmark)
        print(f"# graph capture failed: {type(e).__name__}: {str(e)[:120]}")
        torch.cuda.synchronize()
        return None
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    del out, g
    return statistics.median(ts)


def peak_mib(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / 2**20


# ------------------------------------------------------------------------------------------ FLA
def fla_fns(op, x, do, dht, disable_recompute=False):
    if op == "kda":
        from fla.ops.kda import chunk_kda as f

        def call(xx):
            return f(xx["q"], xx["k"], xx["v"], xx["g"], xx["beta"], initial_state=xx["h0"], output_final_state=True,
                     disable_recompute=disable_recompute)
        names = ["q", "k", "v", "g", "beta", "h0"]
    elif op == "gdn2":
        from fla.ops.gdn2 import chunk_gdn2 as f

        def call(xx):
            return f(xx["q"], xx["k"], xx["v"], xx["g"], xx["b"], xx["w"], initial_state=xx["h0"],
                     output_final_state=True, disable_recompute=disable_recompute)
        names = ["q", "k", "v", "g", "b", "w", "h0"]
    elif op == "gdn":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as f

        def call(xx):
            return f(xx["q"], xx["k"], xx["v"], xx["g"], xx["beta"], initial_state=xx["h0"], output_final_state=True)
        names = ["q", "k", "v", "g", "beta", "h0"]
    else:
        from fla.ops.delta_rule import chunk_delta_rule as f

        def call(xx):
            return f(xx["q"], xx["k"], xx["v"], xx["beta"], initial_state=xx["h0"], output_final_state=True)
        names = ["q", "k", "v", "beta", "h0"]
    xg = {n: x[n].detach().clone().requires_grad_(True) for n in names}

    def fwd():
        with torch.no_grad():
            return call(xg)

    def fwd_bwd_parts():
        o, ht = call(xg)
        return o, ht

    state = {}

    def prep():
        state["o"], state["ht"] = fwd_bwd_parts()

    def bwd():
        return torch.autograd.grad((state["o"], state["ht"]), [xg[n] for n in names], (do, dht), retain_graph=True)
    return fwd, prep, bwd, call, xg


# ------------------------------------------------------------------------------------------ flops
def flop_model(op, B, T, H, K, V, n=64):
    """FLOP (2 per MAC) of each rewy kernel, whole problem, chunk n. Returns dict kernel -> flops."""
    NC = B * H * math.ceil(T / n)
    return {
        "kkt_inverse / vec_intra (fwd: L, A, C_q)": NC * (4 * n * n * K + n ** 3 / 3),
        "kkt_inverse / vec_intra (bwd: C_q)": NC * (2 * n * n * K),
        "state_scan (E S, A X, Fᵀ R)": NC * (4 * n * K * V + 2 * n * n * V),
        "output (Q_g S_c, C_q R)": NC * (2 * n * K * V + 2 * n * n * V),
        "bwd_state_scan (F S̄⁺, C_qᵀŌ, AᵀR̄, Q_gᵀŌ, EᵀP)": NC * (6 * n * K * V + 4 * n * n * V),
        # ReWY: P Rᵀ, P S_cᵀ (P = AᵀR̄ is in the scan), plus the shared consumers
        "pullback(ReWY)": NC * (6 * n * K * V + 4 * n * n * V + 8 * n * n * K),
        # WY: R̄S_cᵀ, R̄Zᵀ, W̄Eᵀ, Aᵀ·Ā·Aᵀ (2), AᵀR̄, AᵀW̄, plus the shared consumers ŌRᵀ, ŌS_cᵀ, RS̄⁺ᵀ, 4 n×n×K
        "pullback(WY)": NC * (6 * n * K * V + 6 * n * n * V + 12 * n * n * K + 4 * n ** 3),
    }


def scan_bv(B, H, V, sms):
    """The scans' value tile, as the library's scan_bv (common.cuh) picks it for B sequences of H heads."""
    sh = B * H
    if 4 * sh * math.ceil(V / 64) >= 3 * sms:
        return 64
    return 16 if sh * math.ceil(V / 32) < sms else 32


def bytes_model(op, B, T, H, K, V, n=64, bv=None, bk=32):
    """Approximate DRAM/L2 bytes moved by each kernel (bf16 inputs, fp32 A/C_q, bf16 R/P (rp_t) and
    chunk states), counting each V-tile's reload of the K-side tiles (bv: the scans' value tile; None:
    the library's choice on this GPU)."""
    if bv is None:
        bv = scan_bv(B, H, V, torch.cuda.get_device_properties(0).multi_processor_count)
    NC = B * H * math.ceil(T / n)
    nvt, nvo = math.ceil(V / bv), math.ceil(V / 64)
    kt, nn = n * K * 2, n * n * 4
    return {
        "kkt_inverse / vec_intra (fwd: L, A, C_q)": NC * (2 * kt + 2 * nn + 2 * n * 4),
        "state_scan (E S, A X, Fᵀ R)": NC * nvt * (kt + nn + n * bv * 2 + K * bv * 2 + n * bv * 2),
        "output (Q_g S_c, C_q R)": NC * nvo * (kt + K * 64 * 2 + nn + n * 64 * 2 + n * 64 * 2),
        "bwd_state_scan (F S̄⁺, C_qᵀŌ, AᵀR̄, Q_gᵀŌ, EᵀP)": NC * nvt * (2 * kt + 2 * nn + n * bv * 2 + K * bv * 2 + n * bv * 2),
        "pullback(ReWY)": NC * ((1 + math.ceil(K / bk)) * (2 * n * V * 2 + n * V * 2) + 2 * K * V * 2) + B * T * H * (4 * K * 2 + 2 * V * 2 + 8),
    }


def profile_kernels(rw, op, B, T, H, K, V):
    """Kernel times (ms) of one rewy forward + backward (R, ReWY and WY) with torch.profiler."""
    from torch.profiler import profile, ProfilerActivity
    x, do, dht = make_inputs(op, B, T, H, K, V)
    out = {}
    for tag, pol, algo in (("R/ReWY", "R", "rewy"), ("R/WY", "R", "wy")):
        c = rw.cfg(op, B, T, H, K, V, pol, algo)
        for _ in range(3):
            o, ht, saved = rw.forward(c, x)
            rw.backward(c, x, saved, do, dht)
        torch.cuda.synchronize()
        reps = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                o, ht, saved = rw.forward(c, x)
                rw.backward(c, x, saved, do, dht)
            torch.cuda.synchronize()
        d = {}
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0)
            if t and e.count:
                d[e.key] = (t / e.count / 1000.0, e.count / reps)
        out[tag] = d
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="gdn,deltanet")
    ap.add_argument("--shapes", default="all", help="'all' or e.g. 1x2048x4,8x2048x32")
    ap.add_argument("--impl", default="rewy,fla")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default="8x2048x32", help="shapes for the per-kernel profile, comma-separated ('' = none)")
    ap.add_argument("--time-limit", type=float, default=1e9, help="stop starting new shapes after this many seconds")
    ap.add_argument("--rounds", type=int, default=0,
                    help="with both impls: N more rounds of forward and backward R timings, rewy and FLA alternating "
                         "(a drift of the GPU or of FLA's launch cost then hits both sides alike); *_il columns")
    ap.add_argument("--graph", action="store_true",
                    help="also time forward and backward R as CUDA-graph replays (both sides; *_graph columns)")
    ap.add_argument("--gates", choices=("weak", "model"), default="weak",
                    help="weak: logsigmoid(x)/16 (MATH §10's inputs); model: as FLA's layers make them (model_gates)")
    a = ap.parse_args()
    global GATES
    GATES = a.gates
    t_start = time.time()
    K = V = 128
    shapes = SUITE if a.shapes == "all" else [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    impls = a.impl.split(",")
    lib = os.environ.get("REWY_LIBRARY", os.path.join(os.path.dirname(__file__), "..", "build", "cuda-on", "librewy.so"))
    rw = Rewy(lib)
    dev = torch.cuda.get_device_name()
    vers = {"torch": torch.__version__, "rewy": rw.lib.rewy_version().decode()}
    try:
        import triton
        vers["triton"] = triton.__version__
    except Exception:
        pass
    if "fla" in impls:
        import fla
        vers["fla"] = getattr(fla, "__version__", "?")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} {dev} {vers}")
    jf = open(a.json, "a") if a.json else None
    rows = []
    for op in a.ops.split(","):
        for (B, T, H) in shapes:
            if time.time() - t_start > a.time_limit:
                print(f"# time limit: skipping {op} {B},{T},{H}")
                continue
            x, do, dht = make_inputs(op, B, T, H, K, V)
            r = {"op": op, "B": B, "T": T, "H": H}
            if "rewy" in impls:
                c = rw.cfg(op, B, T, H, K, V, "R", "rewy")
                r["rewy_fwd"] = cuda_time(lambda: rw.forward(c, x), a.reps)
                o, ht, saved = rw.forward(c, x)
                for pol in ("R", "A"):
                    for algo in ("rewy", "wy"):
                        cb = rw.cfg(op, B, T, H, K, V, pol, algo)
                        _, _, sv = rw.forward(cb, x)
                        r[f"rewy_bwd_{pol}_{algo}"] = cuda_time(lambda: rw.backward(cb, x, sv, do, dht), a.reps)
                        if algo == "rewy":
                            r[f"rewy_peak_{pol}"] = peak_mib(lambda: rw.backward(cb, x, sv, do, dht))
                            # the ReWY / WY pullbacks must agree (fp32 working matrices both ways)
                            gr = rw.backward(cb, x, sv, do, dht)
                            gw = rw.backward(rw.cfg(op, B, T, H, K, V, pol, "wy"), x, sv, do, dht)
                            r[f"rewy_wy_vs_rewy_{pol}"] = max(((a_ - b_).float().norm() / b_.float().norm().clamp_min(1e-30)).item()
                                                              for a_, b_ in zip(gr, gw) if a_ is not None)
                        del sv
                if a.graph:
                    r["rewy_fwd_graph"] = graph_time(lambda: rw.forward(c, x), a.reps)
                    cb = rw.cfg(op, B, T, H, K, V, "R", "rewy")
                    _, _, sv = rw.forward(cb, x)
                    r["rewy_bwd_R_graph"] = graph_time(lambda: rw.backward(cb, x, sv, do, dht), a.reps)
                    del sv
                cA = rw.cfg(op, B, T, H, K, V, "A", "rewy")
                r["rewy_fwd_A"] = cuda_time(lambda: rw.forward(cA, x), a.reps)
                r["rewy_o"] = o.float()
                r["rewy_ht"] = ht
                del saved
            if "fla" in impls:
                fwd, prep, bwd, call, xg = fla_fns(op, x, do, dht)
                t0 = time.time()
                o_f, ht_f = fwd()
                prep()
                bwd()
                torch.cuda.synchronize()
                r["fla_warmup_s"] = time.time() - t0
                r["fla_fwd"] = cuda_time(fwd, a.reps)
                prep()
                r["fla_bwd"] = cuda_time(bwd, a.reps)
                r["fla_peak"] = peak_mib(bwd)
                if a.graph:
                    r["fla_fwd_graph"] = graph_time(fwd, a.reps)
                    prep()
                    r["fla_bwd_graph"] = graph_time(bwd, a.reps)
                if op in VEC:   # FLA's policy A: disable_recompute=True (same kernels, already tuned)
                    fwdA, prepA, bwdA, _, xgA = fla_fns(op, x, do, dht, disable_recompute=True)
                    r["fla_fwd_A"] = cuda_time(fwdA, a.reps)
                    prepA()
                    r["fla_bwd_A"] = cuda_time(bwdA, a.reps)
                    r["fla_peak_A"] = peak_mib(bwdA)
                    del xgA
                if a.rounds and "rewy" in impls:
                    # interleaved rounds: each round times rewy and FLA back to back; medians over all rounds
                    cb = rw.cfg(op, B, T, H, K, V, "R", "rewy")
                    _, _, sv = rw.forward(cb, x)
                    il = {k: [] for k in ("rewy_fwd_il", "fla_fwd_il", "rewy_bwd_il", "fla_bwd_il")}
                    for _ in range(a.rounds):
                        cuda_time(lambda: rw.forward(c, x), a.reps, 1, il["rewy_fwd_il"])
                        cuda_time(fwd, a.reps, 1, il["fla_fwd_il"])
                        cuda_time(lambda: rw.backward(cb, x, sv, do, dht), a.reps, 1, il["rewy_bwd_il"])
                        prep()
                        cuda_time(bwd, a.reps, 1, il["fla_bwd_il"])
                    r.update({k: statistics.median(v) for k, v in il.items()})
                    del sv
                if "rewy_o" in r:
                    r["o_rel_diff_vs_fla"] = ((r["rewy_o"] - o_f.float()).norm() / o_f.float().norm()).item()
                    r["ht_rel_diff_vs_fla"] = ((r["rewy_ht"] - ht_f.float()).norm() / ht_f.float().norm()).item()
                del xg
            r.pop("rewy_o", None)
            r.pop("rewy_ht", None)
            rows.append(r)
            line = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
            print(line, flush=True)
            if jf:
                jf.write(json.dumps({**r, "device": dev, **vers}) + "\n")
                jf.flush()
            torch.cuda.empty_cache()
    # summary table
    print()
    print("| op | B,T,H | rewy fwd | FLA fwd | fwd × | rewy bwd R | rewy bwd A | FLA bwd | bwd × (R) | FLA bwd A | bwd × (A) | rewy WY bwd R | ReWY gain | peak R MiB | peak A MiB | FLA peak MiB | FLA peak A MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    geo = {}
    for r in rows:
        f = lambda k: r.get(k, float("nan"))
        fx = f("fla_fwd") / f("rewy_fwd")
        bx = f("fla_bwd") / f("rewy_bwd_R_rewy")
        bxa = f("fla_bwd_A") / f("rewy_bwd_A_rewy")
        gain = f("rewy_bwd_R_wy") / f("rewy_bwd_R_rewy")
        geo.setdefault(r["op"], []).append((fx, bx, gain, bxa))
        print(f"| {r['op']} | {r['B']},{r['T']},{r['H']} | {f('rewy_fwd'):.3f} | {f('fla_fwd'):.3f} | {fx:.2f} | "
              f"{f('rewy_bwd_R_rewy'):.3f} | {f('rewy_bwd_A_rewy'):.3f} | {f('fla_bwd'):.3f} | {bx:.2f} | "
              f"{f('fla_bwd_A'):.3f} | {bxa:.2f} | "
              f"{f('rewy_bwd_R_wy'):.3f} | {gain:.2f} | {f('rewy_peak_R'):.1f} | {f('rewy_peak_A'):.1f} | "
              f"{f('fla_peak'):.1f} | {f('fla_peak_A'):.1f} |")
    def side_table(tag, keys, label, note=""):
        """forward and backward R, rewy against FLA, from the row keys (rewy fwd, FLA fwd, rewy bwd, FLA bwd)"""
        print()
        print(f"| op | B,T,H | rewy fwd ({label}) | FLA fwd ({label}) | fwd × | rewy bwd R ({label}) | FLA bwd ({label}) | bwd × (R) |{note}")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            f = lambda k: r.get(k) if r.get(k) is not None else float("nan")
            rf, ff, rb, fb = (f(k) for k in keys)
            geo.setdefault((tag, r["op"]), []).append((ff / rf, fb / rb))
            print(f"| {r['op']} | {r['B']},{r['T']},{r['H']} | {rf:.3f} | {ff:.3f} | {ff / rf:.2f} | "
                  f"{rb:.3f} | {fb:.3f} | {fb / rb:.2f} |")

    if a.graph:
        side_table("graph", ("rewy_fwd_graph", "fla_fwd_graph", "rewy_bwd_R_graph", "fla_bwd_graph"), "graph")
    if a.rounds and any("rewy_bwd_il" in r for r in rows):
        side_table("interleaved", ("rewy_fwd_il", "fla_fwd_il", "rewy_bwd_il", "fla_bwd_il"), "il",
                   f"  ({a.rounds} interleaved rounds of {a.reps})")

    def gmean(xs):
        """geometric mean, lowest value and count of the finite ratios (a shape without FLA has none)"""
        xs = [x for x in xs if x == x and x > 0]
        if not xs:
            return "—"
        return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f} (n={len(xs)}, lowest {min(xs):.2f})"

    for op, v in geo.items():
        if isinstance(op, tuple):
            print(f"geomean {op[1]} ({'graph replay' if op[0] == 'graph' else 'interleaved rounds'}): fwd FLA/rewy {gmean([t[0] for t in v])}, bwd(R) FLA/rewy {gmean([t[1] for t in v])}")
            continue
        gm = [gmean([t[i] for t in v]) for i in range(4)]
        print(f"geomean {op}: fwd FLA/rewy {gm[0]}, bwd(R) FLA/rewy {gm[1]}, bwd(A) FLA/rewy {gm[3]}, WY/ReWY {gm[2]}")
    for shape in filter(None, a.profile.split(",")):
        B, T, H = (int(v) for v in shape.split("x"))
        for op in a.ops.split(","):
            prof = profile_kernels(rw, op, B, T, H, K, V)
            fm, bm = flop_model(op, B, T, H, K, V), bytes_model(op, B, T, H, K, V)
            print(f"\nper-kernel ({op} {B},{T},{H}, K=V=128): name, ms per call, calls per fwd+bwd")
            for tag, d in prof.items():
                for name, (ms, calls) in sorted(d.items(), key=lambda kv: -kv[1][0]):
                    print(f"  {tag:7s} {ms:8.4f} ms x{calls}  {name[:90]}")
            if jf:
                jf.write(json.dumps({"profile": prof, "op": op, "B": B, "T": T, "H": H, "flops": fm, "bytes": bm}) + "\n")


if __name__ == "__main__":
    main()
