"""Context parallelism (rewy.cp, issue 28) on CPU with gloo, at 2 and 4 processes.

Each world size launches its processes once (this file run as a script: one rank each, a FileStore
rendezvous, no fixed port) and every rank runs every case on its own tokens. The ranks' outputs and
gradients come back as files; here they are put together in global order and compared with the
single-process rewy call (the same fp32 arithmetic: a tight bound) and with the fp64 reference
(MATH §10 bounds). Cases: one sequence per batch row split over all ranks, varlen sequences crossing
rank boundaries (one spanning a whole rank, uneven bounds), grouped value heads, nonzero h0 and a
final-state gradient, every operator, state_v_first, in-kernel gates with A_log/dt_bias.
"""
import datetime
import os
import subprocess
import sys
import time

import pytest
import torch

import rewy.cp as cp
from helpers import FN, TOL, make_inputs, rel_err
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
}
WORLD_SIZES = [2, 4]
TIMEOUT_S = 240


def _inputs(name):
    """The global inputs of a case (fp64, as the reference takes them) and the call's options."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
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


def _cotangents(name, o_shape, ht_shape):
    gen = torch.Generator().manual_seed(123)
    return (torch.randn(o_shape, generator=gen, dtype=torch.float64),
            0.1 * torch.randn(ht_shape, generator=gen, dtype=torch.float64))


def _layout(name, R):
    """Per rank: (token bounds [a, e), global index of its first sequence, its sequence count,
    global index of each local sequence that ends on this rank) from the same context math."""
    op, B, T, H, HV, K, V, cu, bounds, _ = CASES[name]
    if cu is None:
        return None
    bounds = (bounds or {}).get(R) or [T // R * i for i in range(R + 1)]
    return bounds


def _worker(rank, R, store, out_dir):
    """One rank: every case on its own tokens; results saved to out_dir/rank{r}.pt."""
    torch.set_num_threads(1)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=R,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S // 2))
    results = {}
    try:
        for name in CASES:
            op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
            x, opts = _inputs(name)
            bounds = _layout(name, R)
            ctx = (cp.build_cp_context(None) if cu is None else
                   cp.build_cp_context(torch.tensor(cu, dtype=torch.int32), bounds=bounds))
            if cu is None:   # even split of each row, the remainder on the last rank
                step = T // R
                a, e = step * rank, (T if rank == R - 1 else step * (rank + 1))
                rows = slice(0, B)
            else:
                a, e = bounds[rank], bounds[rank + 1]
                rows = slice(ctx.first_seq, ctx.first_seq + ctx.num_seqs)
            leaves = {}
            for n, t in x.items():
                t = t.to(torch.float32)
                if n == "initial_state":
                    t = t[rows]
                elif n not in ("A_log", "dt_bias"):
                    t = t[:, a:e]
                leaves[n] = t.contiguous().requires_grad_()
            o, ht = getattr(cp, FN[op].__name__)(**leaves, output_final_state=True, cp_context=ctx, **opts)
            do, dht = _cotangents(name, (B, T) + tuple(o.shape[2:]), (x["initial_state"].shape[0],) + tuple(ht.shape[1:]))
            # the final-state gradient only for the rows whose sequences end here (the others are
            # boundary states, not part of the single-process loss)
            dht_local = dht[rows].clone()
            if ctx.carry_out:
                dht_local[-(B if cu is None else 1):] = 0
            loss = (o * do[:, a:e].float()).sum() + (ht * dht_local.float()).sum()
            grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
            grads = [torch.zeros_like(t) if d is None else d for t, d in zip(leaves.values(), grads)]   # unread h0
            results[name] = dict(o=o.detach(), ht=ht.detach(), carry_in=ctx.carry_in, carry_out=ctx.carry_out,
                                 first_seq=ctx.first_seq, grads=dict(zip(leaves, grads)))
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.destroy_process_group()


def _launch(R, tmp):
    """Run the R ranks; returns [results of rank 0, ..., rank R−1]. Fails with the ranks' stderr."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(cp.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"   # loopback: no dependence on how the host name resolves
    store = os.path.join(tmp, "store")
    procs = [subprocess.Popen([sys.executable, __file__, str(r), str(R), store, tmp], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(R)]
    deadline, logs = time.monotonic() + TIMEOUT_S, []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0].decode(errors="replace"))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"context-parallel ranks (R={R}) ran past {TIMEOUT_S} s")
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
    def get(R):
        if R not in _RUNS:
            _RUNS[R] = _launch(R, str(tmp_path_factory.mktemp(f"cp{R}")))
        return _RUNS[R]
    return get


def _single(name):
    """The single-process rewy call (fp32) and the fp64 reference, with the same loss."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    x, opts = _inputs(name)
    kw = dict(opts) if cu is None else dict(opts, cu_seqlens=torch.tensor(cu, dtype=torch.int32))
    leaves = {n: t.float().requires_grad_() for n, t in x.items()}
    o, ht = FN[op](**leaves, output_final_state=True, **kw)
    ref_leaves = {n: t.clone().requires_grad_() for n, t in x.items()}
    ref_o, ref_ht = reference(op, **ref_leaves, **dict(kw, cu_seqlens=cu))
    do, dht = _cotangents(name, ref_o.shape, ref_ht.shape)
    out = {}
    for key, lv, (oo, hh) in (("rewy", leaves, (o, ht)), ("ref", ref_leaves, (ref_o, ref_ht))):
        loss = (oo * do.to(oo.dtype)).sum() + (hh * dht.to(hh.dtype)).sum()
        out[key] = dict(o=oo.detach(), ht=hh.detach(), **dict(zip(lv, torch.autograd.grad(loss, list(lv.values())))))
    return out


def _assemble(name, ranks):
    """The ranks' results in global order: outputs and per-token gradients by token, final states
    and h0 gradients by sequence (from the rank where it ends, resp. starts), A_log/dt_bias summed."""
    op, B, T, H, HV, K, V, cu, _, opts = CASES[name]
    res = [r[name] for r in ranks]
    out = dict(o=torch.cat([r["o"] for r in res], dim=1))
    for n in res[0]["grads"]:
        gs = [r["grads"][n] for r in res]
        if n in ("A_log", "dt_bias"):
            out[n] = sum(gs)
        elif n != "initial_state":
            out[n] = torch.cat(gs, dim=1)
    hts, dh0s = [], []
    if cu is None:   # one sequence per row: it starts on the first rank and ends on the last
        res_ = []
        hts, dh0s = [res[-1]["ht"]], [res[0]["grads"]["initial_state"]]
    else:
        res_ = res
    for r in res_:   # each rank's local sequences: the carried-in one started earlier, the carried-out one ends later
        n_local = r["ht"].shape[0]
        for j in range(n_local):
            if not (r["carry_out"] and j == n_local - 1):
                hts.append(r["ht"][j:j + 1])
            if not (r["carry_in"] and j == 0):
                dh0s.append(r["grads"]["initial_state"][j:j + 1])
    out["ht"], out["initial_state"] = torch.cat(hts), torch.cat(dh0s)
    return out, res


@pytest.mark.parametrize("R", WORLD_SIZES)
@pytest.mark.parametrize("name", list(CASES))
def test_cp_matches_single_process(runs, R, name):
    """Every output, final state and gradient of the R ranks, put together, against the single-process
    call (fp32 both: the split changes only the summation order) and against the fp64 reference."""
    got, res = _assemble(name, runs(R))
    single = _single(name)
    assert set(got) == set(single["rewy"]), (set(got), set(single["rewy"]))
    for n, x in got.items():
        assert torch.isfinite(x).all(), f"{n}: non-finite values"
        assert x.shape == single["rewy"][n].shape, (n, x.shape, single["rewy"][n].shape)
        err = rel_err(x, single["rewy"][n])
        assert err <= 1e-5, f"{n}: relative error {err:.3g} against the single-process call"
        ref_err = rel_err(x, single["ref"][n])
        bound = TOL[n] * 0.5   # fp32 elements: half the MATH §10 bound, as the fp32 rows of test_ops
        assert ref_err <= bound, f"{n}: relative error {ref_err:.3g} > {bound:.3g} against the fp64 reference"
    # the h0 row of a sequence carried in from an earlier rank is not read: its gradient is zero
    for r in res:
        if r["carry_in"]:
            assert r["grads"]["initial_state"][0 if CASES[name][7] is not None else slice(None)].abs().max() == 0


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
