#!/usr/bin/env python3
"""bench_api.py: issue 24's acceptance benchmark. rewy through its public Python functions (autograd, as users
call it), FLA and FlashQLA in the same process, on the same inputs.

Operators: GDN (rewy.chunk_gated_delta_rule; FLA's and FlashQLA's functions of that name) and DeltaNet
(rewy.chunk_delta_rule, FLA's chunk_delta_rule, FlashQLA's GDN with g = 0). Suite (B,T,H): (1,2048,4)
(1,8192,16) (4,4096,16) (8,2048,32) (2,16384,8) (16,1024,16), K = V = 128, bf16. Inputs: bench_gpu.py's
make_inputs (feature-normalized Gaussian q, k; Gaussian v; g = logsigmoid(x)/16; β in [0.1, 0.9]; h0 = 0.1·N(0,1)
given, the final state requested; dO = N(0,1) and the final state's gradient 0.1·N(0,1) given).

Per (operator, shape, implementation):
- forward: the call under no_grad; backward: torch.autograd.grad of (o, h_T) into q, k, v, g, β, h0 from a
  fresh forward graph (rewy's policy R: its recompute is in the backward);
- events: median of --reps CUDA-event timings of one call (host launch cost included);
- GPU-bound: --calls calls back to back between two events, one sync, median of --batches batches, per call
  (the backward's graphs are built first, then their backwards run back to back);
- peak: the rise of allocated memory during one backward; saved: what the forward leaves allocated for it (its
  outputs and saved tensors). The rise alone favors a forward that keeps more (FlashQLA's GDN at (1,8192,16) once rose
  by 80 MiB, less than dq, dk, dv themselves, session 30): saved + peak is the backward's whole footprint.
Then the acceptance lines of issue 24 (PASS / FAIL / n.a. where an implementation is missing).

    FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=python:.ref/fla-src[:FlashQLA's site] \\
        REWY_LIBRARY=build/cuda-on/librewy.so python3 bench/bench_api.py [--ops gdn,deltanet] [--shapes 4x4096x16]
    python3 bench/bench_api.py --selftest      (CPU, tiny shapes, rewy and stand-ins: the pipeline only)

FLA's GDN backward refuses Hopper with Triton < 3.7.1 (its #640, wrong results there): time it from a copy with
that check off (.ref/peer_fla.sh), never as a reference. FLA autotunes on its first call per shape and
FlashQLA compiles for about 150 s per shape (keep TILELANG_CACHE_DIR between calls): the warm-up calls absorb
both, so run few shapes per device call on a cold cache (--shapes).
"""
import argparse, json, math, os, statistics, sys, time

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from bench_gpu import SUITE, make_inputs  # noqa: E402  (the suite and its inputs, as bench_gpu.py times them)

OPS = ("gdn", "deltanet")


# ------------------------------------------------------------------------------------------ implementations
# Each maker returns f(x) -> (o, h_T) for op, or raises ImportError when the package is not there.

def rewy_impl(op, **options):
    import rewy
    if op == "gdn":
        return lambda x: rewy.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"],
                                                     output_final_state=True, **options)
    return lambda x: rewy.chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], initial_state=x["h0"],
                                           output_final_state=True, **options)


def fla_impl(op):
    if op == "gdn":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as f
        return lambda x: f(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], output_final_state=True)
    from fla.ops.delta_rule import chunk_delta_rule as f
    return lambda x: f(x["q"], x["k"], x["v"], x["beta"], initial_state=x["h0"], output_final_state=True)


def flashqla_impl(op):
    import flash_qla

    def f(x):
        g = x["g"] if op == "gdn" else torch.zeros_like(x["beta"], dtype=torch.float32)   # DeltaNet: GDN at g = 0
        return flash_qla.chunk_gated_delta_rule(q=x["q"], k=x["k"], v=x["v"], g=g, beta=x["beta"],
                                                initial_state=x["h0"], output_final_state=True)
    return f


IMPLS = {"rewy": rewy_impl, "fla": fla_impl, "flashqla": flashqla_impl}


# ------------------------------------------------------------------------------------------ timing

class Clock:
    """CUDA events on a GPU; the host clock with a sync on the CPU (the self-test)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def span(self, fn):
        """ms of fn() from its start to the end of its device work"""
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b)
        t = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t)


def leaves(x):
    """x with every input that has a gradient as a fresh leaf requiring it"""
    return {n: (t.detach().requires_grad_() if t is not None else None) for n, t in x.items()}


def grad_names(x):
    return [n for n in ("q", "k", "v", "g", "beta", "h0") if x[n] is not None]


def backward(x, out, do, dht):
    o, ht = out
    return torch.autograd.grad((o, ht), [x[n] for n in grad_names(x)], (do, dht))


def measure(f, x, do, dht, clock, a):
    """{fwd_ms, fwd_gb_ms, bwd_ms, bwd_gb_ms, peak_mib, o}: events, GPU-bound and peak as the docstring says"""
    r = {}
    with torch.no_grad():
        for _ in range(a.warmup):
            out = f(x)
        clock.sync()
        r["o"] = out[0].float()
        r["fwd_ms"] = statistics.median(clock.span(lambda: f(x)) for _ in range(a.reps))

        def fwd_batch():
            for _ in range(a.calls):
                f(x)
        r["fwd_gb_ms"] = statistics.median(clock.span(fwd_batch) for _ in range(a.batches)) / a.calls
    for _ in range(a.warmup):
        xl = leaves(x)
        backward(xl, f(xl), do, dht)
    clock.sync()
    ts = []
    for _ in range(a.reps):
        xl = leaves(x)
        out = f(xl)
        clock.sync()
        ts.append(clock.span(lambda: backward(xl, out, do, dht)))
    r["bwd_ms"] = statistics.median(ts)
    gb = []
    for _ in range(a.batches):
        graphs = []
        for _ in range(a.calls):
            xl = leaves(x)
            graphs.append((xl, f(xl)))
        clock.sync()

        def bwd_batch():
            for xl, out in graphs:
                backward(xl, out, do, dht)
        gb.append(clock.span(bwd_batch) / a.calls)
        del graphs
    r["bwd_gb_ms"] = statistics.median(gb)
    if clock.cuda:
        xl = leaves(x)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = f(xl)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        backward(xl, out, do, dht)
        torch.cuda.synchronize()
        r["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        r["saved_mib"] = (base - before) / 2**20
    else:
        r["peak_mib"] = r["saved_mib"] = float("nan")
    return r


# ------------------------------------------------------------------------------------------ acceptance

def geomean(xs):
    return math.exp(sum(math.log(v) for v in xs) / len(xs)) if xs else float("nan")


def ratios(res, op, key, other, shapes):
    """other's time ÷ rewy's, per shape where both ran"""
    out = []
    for s in shapes:
        a, b = res.get((op, s, "rewy")), res.get((op, s, other))
        if a and b:
            out.append(b[key] / a[key])
    return out


def acceptance(res, shapes):
    """issue 24's acceptance lines: (name, value text, verdict)"""
    lines = []

    def check(name, xs, ok, want):
        full = len(xs) == len(shapes)
        verdict = "n.a." if not xs else ("PASS" if ok(xs) and full else "FAIL" if not ok(xs) else "partial")
        lines.append((name, "geomean %.3f, min %.3f over %d shapes (%s)" % (geomean(xs), min(xs), len(xs), want)
                      if xs else "missing", verdict))

    q = ratios(res, "gdn", "bwd_gb_ms", "flashqla", shapes)
    check("GDN backward R, GPU-bound, × FlashQLA", q, lambda xs: geomean(xs) >= 1.0 and min(xs) >= 0.9,
          "want geomean ≥ 1.0, none < 0.9")
    f = ratios(res, "gdn", "bwd_gb_ms", "fla", shapes)
    check("GDN backward R, GPU-bound, × FLA", f, lambda xs: geomean(xs) >= 2.5 and min(xs) >= 1.0,
          "want geomean ≥ 2.5, none < 1")
    d = ratios(res, "deltanet", "bwd_gb_ms", "fla", shapes)
    check("DeltaNet backward, GPU-bound, × FLA", d, lambda xs: geomean(xs) >= 2.0, "want geomean ≥ 2")
    for op in OPS:
        fq = ratios(res, op, "fwd_gb_ms", "flashqla", shapes)
        check("%s forward, GPU-bound, × FlashQLA" % op, fq, lambda xs: geomean(xs) >= 1.0, "want geomean ≥ 1")
        ff = ratios(res, op, "fwd_gb_ms", "fla", shapes)
        check("%s forward, GPU-bound, × FLA" % op, ff, lambda xs: geomean(xs) >= 1.5, "want geomean ≥ 1.5")
    for s in [(1, 8192, 16), (4, 4096, 16)]:
        a, b = res.get(("gdn", s, "rewy")), res.get(("gdn", s, "flashqla"))
        if a and b and not math.isnan(a["peak_mib"]):
            lines.append(("GDN peak backward MiB at %s" % (s,), "rewy %.1f, FlashQLA %.1f (want ≤; saved + peak: %.1f, %.1f)" %
                          (a["peak_mib"], b["peak_mib"], a.get("saved_mib", math.nan) + a["peak_mib"],
                           b.get("saved_mib", math.nan) + b["peak_mib"]),
                          "PASS" if a["peak_mib"] <= b["peak_mib"] else "FAIL"))
        else:
            lines.append(("GDN peak backward MiB at %s" % (s,), "missing", "n.a."))
    return lines


# ------------------------------------------------------------------------------------------ main

def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="gdn,deltanet")
    ap.add_argument("--shapes", default="", help="BxTxH,… (default: the suite)")
    ap.add_argument("--impls", default="rewy,fla,flashqla", help="rewy first; the others where they import")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--calls", type=int, default=10, help="calls back to back in one GPU-bound batch")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--V", type=int, default=128)
    ap.add_argument("--json", default="", help="write the rows as JSON lines here")
    ap.add_argument("--selftest", action="store_true",
                    help="CPU: tiny shapes, rewy against itself under other names (policy A, WY): the pipeline only")
    a = ap.parse_args(argv)
    if a.selftest:
        a.reps, a.calls, a.batches, a.warmup, a.K, a.V = 2, 2, 2, 1, 32, 16
    return a


def main(argv=None):
    a = parse(argv)
    ops = [o for o in a.ops.split(",") if o]
    for o in ops:
        if o not in OPS:
            raise SystemExit("--ops: gdn, deltanet (got %r)" % o)
    if a.selftest:
        device = torch.device("cpu")
        shapes = [(1, 100, 2), (2, 64, 1)]
        makers = {"rewy": rewy_impl,
                  "fla": lambda op: rewy_impl(op, disable_recompute=True),       # stand-ins: the pipeline only
                  "flashqla": lambda op: rewy_impl(op, backward="wy")}
    else:
        if not torch.cuda.is_available():
            raise SystemExit("bench_api.py times GPUs (--selftest runs the pipeline on the CPU)")
        device = torch.device("cuda")
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s] or SUITE
        makers = {n: IMPLS[n] for n in a.impls.split(",") if n}
    if "rewy" not in makers:
        raise SystemExit("--impls must include rewy (the ratios are against it)")
    clock = Clock(device)
    res, rows = {}, []
    print("%-9s %-12s %-9s %9s %9s %9s %9s %9s %9s %9s" % ("op", "B,T,H", "impl", "fwd ms", "fwd GB", "bwd ms", "bwd GB",
                                                            "peak MiB", "saved MiB", "o rel"))
    for op in ops:
        fns = {}
        for name, make in makers.items():
            try:
                fns[name] = make(op)
            except ImportError as e:
                print("  (%s: %s does not import: %s)" % (op, name, e))
        for s in shapes:
            B, T, H = s
            x, do, dht = make_inputs(op, B, T, H, a.K, a.V, seed=sum(s), dev=device.type)
            ref_o = None
            for name, f in fns.items():
                try:
                    r = measure(f, x, do, dht, clock, a)
                except Exception as e:   # a peer that refuses a shape (or FLA's #640 check) costs its row only
                    print("%-9s %-12s %-9s failed: %s: %s" % (op, "%d,%d,%d" % s, name, type(e).__name__, str(e)[:120]))
                    continue
                o = r.pop("o")
                if ref_o is None:
                    ref_o = o
                r["o_rel"] = float((o - ref_o).norm() / ref_o.norm().clamp_min(1e-30))
                res[(op, s, name)] = r
                rows.append(dict(op=op, shape=list(s), impl=name, **r))
                print("%-9s %-12s %-9s %9.3f %9.3f %9.3f %9.3f %9.1f %9.1f %9.1e" % (
                    op, "%d,%d,%d" % s, name, r["fwd_ms"], r["fwd_gb_ms"], r["bwd_ms"], r["bwd_gb_ms"], r["peak_mib"],
                    r["saved_mib"], r["o_rel"]), flush=True)
    print("\nacceptance (issue 24; × = other's GPU-bound time ÷ rewy's):")
    lines = acceptance(res, shapes)
    for name, text, verdict in lines:
        print("  %-7s %-44s %s" % (verdict, name, text))
    if a.selftest:
        want = len(ops) * len(shapes) * len(makers)
        bad = [r for r in rows if not r["o_rel"] <= 1e-5]
        if len(rows) != want or bad or any(v == "n.a." for _, _, v in lines[:3]):
            raise SystemExit("selftest: failed (%d of %d rows, %d disagreeing outputs)" % (len(rows), want, len(bad)))
        print("selftest: passed")
    if a.json:
        with open(a.json, "w") as fh:
            meta = dict(torch=torch.__version__, device=torch.cuda.get_device_name() if clock.cuda else "cpu",
                        time=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
            try:
                import rewy
                meta["library"] = rewy.library_path()
            except Exception:
                pass
            fh.write(json.dumps(dict(meta=meta)) + "\n")
            for row in rows:
                fh.write(json.dumps(row) + "\n")
            for name, text, verdict in lines:
                fh.write(json.dumps(dict(acceptance=name, value=text, verdict=verdict)) + "\n")
    return res, lines


if __name__ == "__main__":
    main()
