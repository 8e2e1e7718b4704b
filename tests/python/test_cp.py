"""Context parallelism (rewy.cp, issue 28) on CPU with gloo, at 2 and 4 processes (and with NCCL on 2 GPUs
where a machine has them: make test-cuda).

Each (device, world size) launches its processes once (this file run as a script: one rank each, a FileStore
rendezvous, no fixed port) and every rank runs every case on its own tokens. The ranks' outputs and
gradients come back as files; here they are put together in global order and compared with the
single-process rewy call (SINGLE_BOUND) and with the fp64 reference (MATH §10 bounds), and, with
gradients on the boundary states too, with the segments called one after another in one process.
Cases: one sequence per batch row split over all ranks, varlen sequences crossing rank boundaries
(one spanning a whole rank, uneven bounds, a one-token sequence), grouped value heads, nonzero h0
and final-state gradients, every operator, state_v_first, in-kernel gates with A_log/dt_bias, bf16.
"""
import datetime
import os
import subprocess
import sys
import time

import pytest
import torch

import rewy
import rewy.cp as cp
from helpers import FN, FP32_INPUTS, TOL, make_inputs, rel_err
from reference import reference

# name: (op, B, T, H, HV, K, V, global cu_seqlens or None, bounds per world size or None, options)
CASES = {
    "gdn_rows": ("gdn", 2, 200, 2, 2, 32, 24, None, None, {}),
    "delta_rows_grouped": ("delta", 1, 160, 1, 2, 16, 32, None, None, {}),
    "kda_varlen_grouped": ("kda", 1, 240, 2, 4, 32, 16, [0, 37, 150, 151, 240], None, {}),
    "gdn2_varlen_v_first": ("gdn2", 1, 240, 2, 2, 16, 16, [0, 100, 130, 240], None, dict(state_v_first=True)),
    "gdn_varlen_bounds_gate": ("gdn", 1, 240, 2, 2, 32, 32, [0, 37, 150, 151, 240],
                               {2: [0, 150, 240], 4: [0, 37, 100, 151, 240]},
                               dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)),
    "kda_varlen_bf16": ("kda", 1, 256, 2, 2, 32, 32, [0, 90, 256], None, dict(dtype=torch.bfloat16)),
}
# Bounds against the single-process call. fp32: the split changes only the summation order (seen:
# <= 7e-7). bf16 elements (q, k, v, beta; gates and states stay fp32): the bf16 roundings of the
# pieces' outputs and gradients and of the boundary term's q̃ differ from the single call's (seen:
# <= 1e-3), half MATH §10's o bound
SINGLE_BOUND = {torch.float32: 1e-5, torch.bfloat16: 4e-3}
# (device, processes): gloo on CPU; NCCL with one GPU per process where a machine has them
RUNS = [pytest.param(("cpu", 2), id="cpu-2"), pytest.param(("cpu", 4), id="cpu-4"),
        pytest.param(("cuda", 2), id="cuda-2", marks=pytest.mark.skipif(
            not (torch.cuda.device_count() >= 2 and rewy.has_cuda()),
            reason="needs 2 CUDA devices and librewy built with CUDA=1"))]
TIMEOUT_S = 240


def _inputs(name):
    """The global inputs of a case (fp64, as the reference takes them) and the call's options."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    opts = {n: o for n, o in opts.items() if n != "dtype"}
    gate = opts.get("use_gate_in_kernel", False)
    x = make_inputs(op, B=B, T=T, H=H, HV=HV, K=K, V=V, N=None if cu is None else len(cu) - 1,
                    seed=len(name), raw_gate=gate, raw_qk=opts.get("use_qk_l2norm_in_kernel", False))
    if gate:   # GDN's in-kernel gate: A_log and dt_bias [HV], both with gradients
        gen = torch.Generator().manual_seed(7)
        x["A_log"] = torch.rand(HV, generator=gen, dtype=torch.float64).log()
        x["dt_bias"] = 0.5 * torch.randn(HV, generator=gen, dtype=torch.float64)
    if opts.get("state_v_first"):
        x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    return x, opts


def _dtype(name):
    return CASES[name][9].get("dtype", torch.float32)


def _leaf(name, n, t, device="cpu"):
    """A leaf in the case's element type; gates, states and A_log/dt_bias fp32 (rewy.h)."""
    return t.to(device, torch.float32 if n in FP32_INPUTS else _dtype(name)).contiguous().requires_grad_()


def _cpu(t):
    return t.detach().cpu()


def _cotangents(name, o_shape, ht_shape, seed=123):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(o_shape, generator=gen, dtype=torch.float64),
            0.1 * torch.randn(ht_shape, generator=gen, dtype=torch.float64))


def _rank_layout(name, R, r):
    """Rank r's tokens [a, e), its rows of the global states, its local offsets (None without varlen),
    carry_in, carry_out: the rows of a batch split evenly (the remainder on the last rank), or
    rewy.cp's own varlen layout (bounds of the case, or even)."""
    op, B, T, H, HV, K, V, cu, bounds, _ = CASES[name]
    if cu is None:
        step = T // R
        return step * r, (T if r == R - 1 else step * (r + 1)), slice(0, B), None, r > 0, r < R - 1
    local, first, carry_in, carry_out, bounds = cp.segment_layout(cu, R, r, (bounds or {}).get(R))
    return bounds[r], bounds[r + 1], slice(first, first + len(local) - 1), local, carry_in, carry_out


def _local(name, x, a, e, rows, device="cpu"):
    """Rank-local leaves: tokens [a, e), state rows `rows`, A_log/dt_bias whole."""
    return {n: _leaf(name, n, (t[rows] if n == "initial_state" else t if n in ("A_log", "dt_bias") else t[:, a:e]),
                     device) for n, t in x.items()}


def _worker(rank, R, device, store, out_dir):
    """One rank: every case on its own tokens, twice: with the final-state gradient only on the rows
    whose sequences end here ("final": the single-process loss) and on every row, boundary states
    included ("all"). Results saved to out_dir/rank{r}.pt."""
    torch.set_num_threads(1)
    import torch.distributed as dist
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group("nccl" if device != "cpu" else "gloo", init_method="file://" + store, rank=rank, world_size=R,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S // 2))
    results = {}
    try:
        for name in CASES:
            op, B, T, H, HV, K, V, cu, bounds, opts = CASES[name]
            x, opts = _inputs(name)
            ctx = (cp.build_cp_context(None) if cu is None else
                   cp.build_cp_context(torch.tensor(cu, dtype=torch.int32, device=device), bounds=(bounds or {}).get(R)))
            a, e, rows, _, carry_in, carry_out = _rank_layout(name, R, rank)
            assert (carry_in, carry_out) == (ctx.carry_in, ctx.carry_out)
            for kind in ("final", "all"):
                leaves = _local(name, x, a, e, rows, device)
                o, ht = getattr(cp, FN[op].__name__)(**leaves, output_final_state=True, cp_context=ctx, **opts)
                do, dht = _cotangents(name, (B, T) + tuple(o.shape[2:]), x["initial_state"].shape)
                dht = dht[rows].clone()
                if kind == "all":
                    dht = _cotangents(name, (1,), ht.shape, seed=1000 + rank)[1]
                elif carry_out:   # a boundary state is not an output of the single-process call
                    dht[-(B if cu is None else 1):] = 0
                loss = (o * do[:, a:e].to(device, torch.float32)).sum() + (ht * dht.to(device, torch.float32)).sum()
                grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
                grads = [torch.zeros_like(t) if d is None else d for t, d in zip(leaves.values(), grads)]  # unread h0
                results[name, kind] = dict(o=_cpu(o), ht=_cpu(ht), grads={n: _cpu(d) for n, d in zip(leaves, grads)})
            with torch.no_grad():   # inference: the same values, nothing kept for a backward
                o, ht = getattr(cp, FN[op].__name__)(**leaves, output_final_state=True, cp_context=ctx, **opts)
                results[name, "no_grad"] = dict(o=_cpu(o), ht=_cpu(ht), grad_fn=o.grad_fn is not None)
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.destroy_process_group()


def _launch(device, R, tmp):
    """Run the R ranks; returns [results of rank 0, ..., rank R−1]. Fails with the ranks' stderr."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(cp.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"   # loopback: no dependence on how the host name resolves
    store = os.path.join(tmp, "store")
    procs = [subprocess.Popen([sys.executable, __file__, str(r), str(R), device, store, tmp], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(R)]
    deadline, logs = time.monotonic() + TIMEOUT_S, []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0].decode(errors="replace"))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"context-parallel ranks ({device}, R={R}) ran past {TIMEOUT_S} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        pytest.fail("\n".join(f"rank {r} exit {p.returncode}:\n{log[-3000:]}" for r, (p, log)
                              in enumerate(zip(procs, logs))))
    return [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(R)]


_RUNS = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    def get(run):
        if run not in _RUNS:
            _RUNS[run] = _launch(*run, str(tmp_path_factory.mktemp(f"cp-{run[0]}-{run[1]}")))
        return _RUNS[run]
    return get


_SINGLE = {}


def _single(name, device):
    """The single-process rewy call (on device: cuda means cuda:0) and the fp64 reference, with the
    "final" loss; everything returned on the CPU."""
    if (name, device) in _SINGLE:
        return _SINGLE[name, device]
    device = "cuda:0" if device == "cuda" else device
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    x, opts = _inputs(name)
    kw = dict(opts) if cu is None else dict(opts, cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device))
    leaves = {n: _leaf(name, n, t, device) for n, t in x.items()}
    o, ht = FN[op](**leaves, output_final_state=True, **kw)
    ref_leaves = {n: t.clone().requires_grad_() for n, t in x.items()}
    ref_o, ref_ht = reference(op, **ref_leaves, **dict(kw, cu_seqlens=cu))
    do, dht = _cotangents(name, ref_o.shape, ref_ht.shape)
    out = {}
    for key, lv, (oo, hh) in (("rewy", leaves, (o, ht)), ("ref", ref_leaves, (ref_o, ref_ht))):
        loss = (oo * do.to(hh.device, hh.dtype)).sum() + (hh * dht.to(hh.device, hh.dtype)).sum()
        grads = torch.autograd.grad(loss, list(lv.values()))
        out[key] = dict(o=_cpu(oo), ht=_cpu(hh), **{n: _cpu(d) for n, d in zip(lv, grads)})
    _SINGLE[name, device] = out
    return out


def _serial(name, R, device):
    """The "all" loss without rewy.cp: the ranks' segments called one after another in this process,
    each carried-in state taken from the previous segment's call on the autograd graph (so the
    gradients of boundary states go through the library's own dh0). Per rank: o, ht; and the grads."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    x, opts = _inputs(name)
    device = "cuda:0" if device == "cuda" else device
    leaves = {n: _leaf(name, n, t, device) for n, t in x.items()}
    do = _cotangents(name, (B, T, HV, V), x["initial_state"].shape)[0].to(device, torch.float32)
    loss, outs, carried = 0, [], None
    for r in range(R):
        a, e, rows, local, carry_in, carry_out = _rank_layout(name, R, r)
        args = {n: (t if n in ("A_log", "dt_bias", "initial_state") else t[:, a:e]) for n, t in leaves.items()}
        h0 = leaves["initial_state"][rows]
        args["initial_state"] = torch.cat([carried, h0[1:]]) if carry_in and cu is not None else carried if carry_in else h0
        kw = dict(opts) if local is None else dict(opts, cu_seqlens=local.to(device))
        o, ht = FN[op](**args, output_final_state=True, **kw)
        carried = ht[-(B if cu is None else 1):]
        dht = _cotangents(name, (1,), ht.shape, seed=1000 + r)[1].to(device, torch.float32)
        loss = loss + (o * do[:, a:e]).sum() + (ht * dht).sum()
        outs.append((_cpu(o), _cpu(ht)))
    return outs, {n: _cpu(d) for n, d in zip(leaves, torch.autograd.grad(loss, list(leaves.values())))}


def _assemble(name, R, ranks, kind):
    """The ranks' results in global order: outputs and per-token gradients by token, h0 gradients
    summed into the global rows, A_log/dt_bias summed; final states ("final") by sequence, from the
    rank where it ends."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    res = [r[name, kind] for r in ranks]
    out = dict(o=torch.cat([r["o"] for r in res], dim=1))
    for n, g in res[0]["grads"].items():
        if n in ("A_log", "dt_bias"):
            out[n] = sum(r["grads"][n] for r in res)
        elif n == "initial_state":
            out[n] = torch.zeros((B if cu is None else len(cu) - 1,) + g.shape[1:])
            for r, x in enumerate(res):
                out[n][_rank_layout(name, R, r)[2]] += x["grads"][n]
        else:
            out[n] = torch.cat([r["grads"][n] for r in res], dim=1)
    hts = []   # the final states: every row of a rank but the one carried on to the next rank
    for r, x in enumerate(res):
        carry_out = _rank_layout(name, R, r)[5]
        hts.append(x["ht"][:-(B if cu is None else 1)] if carry_out else x["ht"])
    out["ht"] = torch.cat(hts)
    return out


def _compare(got, want, bound, what):
    assert set(got) == set(want), (set(got), set(want))
    for n, x in got.items():
        assert torch.isfinite(x).all(), f"{n}: non-finite values"
        assert x.shape == want[n].shape, (n, x.shape, want[n].shape)
        err = rel_err(x, want[n])
        b = bound(n)
        assert err <= b, f"{n}: relative error {err:.3g} > {b:.3g} against {what}"


def _bound(name, device):
    """The bound against the single-process call and the serial segments: SINGLE_BOUND on CPU; on
    CUDA (whose fp32 products may round differently from a different start state) half MATH §10's."""
    tight = SINGLE_BOUND[_dtype(name)]
    return (lambda n: tight) if device == "cpu" else (lambda n: TOL[n] * 0.5)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", list(CASES))
def test_cp_matches_single_process(runs, run, name):
    """Every output, final state and gradient of the ranks, put together, against the single-process
    call and against the fp64 reference (half the MATH §10 bound for fp32 elements, as the fp32 rows
    of test_ops; the bound itself for bf16)."""
    device, R = run
    got = _assemble(name, R, runs(run), "final")
    single = _single(name, device)
    _compare(got, single["rewy"], _bound(name, device), "the single-process call")
    _compare(got, single["ref"], lambda n: TOL[n] * (0.5 if _dtype(name) == torch.float32 else 1), "the fp64 reference")
    # the h0 row of a sequence carried in from an earlier rank is not read: its gradient is zero;
    # under no_grad, the same outputs and states (bit for bit on CPU)
    for r, x in enumerate(runs(run)):
        assert not x[name, "no_grad"]["grad_fn"]
        for n in ("o", "ht"):
            if device == "cpu":
                torch.testing.assert_close(x[name, "no_grad"][n], x[name, "all"][n], rtol=0, atol=0)
            else:
                _compare({n: x[name, "no_grad"][n]}, {n: x[name, "all"][n]}, _bound(name, device), "the grad run")
        a, e, rows, local, carry_in, carry_out = _rank_layout(name, R, r)
        if carry_in:
            assert x[name, "final"]["grads"]["initial_state"][:1 if local is not None else None].abs().max() == 0


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", list(CASES))
def test_cp_boundary_states(runs, run, name):
    """A final-state gradient on every rank's every state, boundary states included: each rank's
    outputs and states (boundary ones too) and every gradient against the segments called one after
    another in one process, the carried state on the autograd graph."""
    device, R = run
    res = [x[name, "all"] for x in runs(run)]
    outs, grads = _serial(name, R, device)
    for r, (x, (o, ht)) in enumerate(zip(res, outs)):
        _compare(dict(o=x["o"], ht=x["ht"]), dict(o=o, ht=ht), _bound(name, device), f"the serial segments (rank {r})")
    got = _assemble(name, R, runs(run), "all")
    del got["o"], got["ht"]
    _compare(got, grads, _bound(name, device), "the serial segments")


def _fake_context(**kw):
    """A context as build_cp_context would give rank 1 of 2 (the argument checks run before any collective)."""
    return cp.CPContext(group=None, rank=1, world_size=2, **kw)


def test_cp_argument_errors():
    x = _local("gdn_rows", make_inputs("gdn", B=1, T=20, H=1, K=16, V=16, h0=False), 0, 20, slice(0, 1))
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"])
    with pytest.raises(TypeError, match="cp_context must be a rewy.cp.CPContext"):
        cp.chunk_gated_delta_rule(*args, cp_context=object())
    ctx = _fake_context(carry_in=True)
    with pytest.raises(ValueError, match="cu_seqlens comes from the context"):
        cp.chunk_gated_delta_rule(*args, cp_context=ctx, cu_seqlens=torch.tensor([0, 20]))
    local, first, carry_in, carry_out, bounds = cp.segment_layout([0, 30, 40], 2, 1)
    ctx = _fake_context(cu_seqlens=local, cu_seqlens_cpu=local, bounds=bounds, first_seq=first, carry_in=carry_in)
    with pytest.raises(ValueError, match=r"rank 1 holds \[1, 20, \.\.\.\] tokens"):
        cp.chunk_gated_delta_rule(x["q"][:, :10], x["k"][:, :10], x["v"][:, :10], x["g"][:, :10], x["beta"][:, :10],
                                  cp_context=ctx)
    with pytest.raises(ValueError, match=r"initial_state holds this rank's 2 local sequences"):
        cp.chunk_gated_delta_rule(*args, cp_context=ctx, initial_state=torch.zeros(1, 1, 16, 16))
    with pytest.raises(ValueError, match="divisible by the world size"):
        cp.segment_layout([0, 7, 41], 2, 0)
    with pytest.raises(ValueError, match="bounds must be 3 strictly increasing offsets"):
        cp.segment_layout([0, 7, 40], 2, 0, bounds=[0, 40, 40])
    # without a context, the ordinary call
    o, _ = cp.chunk_gated_delta_rule(*args)
    torch.testing.assert_close(o, rewy_ops_gdn(*args)[0], rtol=0, atol=0)


def rewy_ops_gdn(*args):
    return FN["gdn"](*args)


def test_segment_layout():
    """Rank-local offsets and carries of global offsets [0, 37, 150, 151, 240] over 4 even segments."""
    got = [cp.segment_layout([0, 37, 150, 151, 240], 4, r) for r in range(4)]
    assert [g[0].tolist() for g in got] == [[0, 37, 60], [0, 60], [0, 30, 31, 60], [0, 60]]
    assert [(g[1], g[2], g[3]) for g in got] == [(0, False, True), (1, True, True), (1, True, True), (3, True, False)]


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
