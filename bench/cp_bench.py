#!/usr/bin/env python3
"""cp_bench.py: context parallelism (rewy.cp, issue 28): one sequence of T tokens on 2 GPUs against 1 GPU,
with FLA's cp_context beside it at the same shape.

    REWY_LIBRARY=$PWD/build/cuda-on/librewy.so PYTHONPATH=$PWD/python python3 bench/cp_bench.py
    ... --T 65536,131072,262144 --op gdn --H 16 --K 128 --V 128 --reps 10 --impl rewy,fla --json
    ... --device cpu --T 1024 --H 2 --K 32 --V 32 --reps 2 --impl rewy     (a smoke run: gloo on CPU)

Per T: inputs as bench_gpu.py (feature-normalized Gaussian q/k, Gaussian v, g = logsigmoid(x)/16, beta
in [0.1, 0.9]; bf16 on CUDA, fp32 on CPU; no h0, no final state, B = 1). The 1-GPU run is the ordinary
call on rank 0 (the other rank waits); the CP run splits the tokens evenly over --world ranks (NCCL, one
GPU each). A step is forward + backward (torch.autograd.backward(o, do)); its time is the median over
--reps of the slowest rank's wall time (synchronized, host included). Throughput = T / step time.
The CP gradients (dq, dk, dv, dg, dbeta, gathered in token order) are compared with the 1-GPU ones
of the same implementation (relative L2 error; bf16 rounding differs, so expect ~1e-3, not 0).
Acceptance (issue 28): rewy's CP speedup >= 1.8x at T >= 64k on 2 GPUs, gradients matching.
Output: one table row per (impl, T); JSON lines with --json.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))


def inputs(op, T, H, K, V, device, dtype, seed=0):
    """The full sequence, identical on every rank (same generator seed on each device)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*s):
        return torch.randn(*s, generator=gen, device=device, dtype=torch.float32)

    q, k = F.normalize(randn(1, T, H, K), dim=-1), F.normalize(randn(1, T, H, K), dim=-1)
    gshape = (1, T, H) if op == "gdn" else (1, T, H, K)
    x = dict(q=q.to(dtype), k=k.to(dtype), v=randn(1, T, H, V).to(dtype),
             g=F.logsigmoid(randn(*gshape)) / 16,
             beta=(0.1 + 0.8 * torch.rand(1, T, H, generator=gen, device=device)).to(dtype))
    return x, randn(1, T, H, V).to(dtype)


def functions(impl, op):
    """(single-device function, CP function, context builder) of an implementation."""
    if impl == "rewy":
        import rewy.cp as cp
        fn = {"gdn": cp.chunk_gated_delta_rule, "kda": cp.chunk_kda}[op]
        return fn, fn, lambda T, group: cp.build_cp_context(None, group)
    from fla.ops.cp import build_cp_context
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.kda import chunk_kda
    fn = {"gdn": chunk_gated_delta_rule, "kda": chunk_kda}[op]
    return fn, fn, lambda T, group: build_cp_context(
        torch.tensor([0, T], dtype=torch.long, device=torch.cuda.current_device()), group=group)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(step, reps, device, group):
    """Median over reps of the slowest rank's time of step() (after two warm-up steps)."""
    for _ in range(2):
        step()
    times = []
    for _ in range(reps):
        dist.barrier(group)
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        t = torch.tensor([time.perf_counter() - t0], device=device if device == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        times.append(t.item())
    return statistics.median(times)


def run_step(fn, x, do, **kw):
    """One forward + backward from fresh leaves; returns the gradients."""
    leaves = {n: t.detach().requires_grad_() for n, t in x.items()}
    o, _ = fn(**leaves, **kw)
    torch.autograd.backward(o, do)
    return {n: t.grad for n, t in leaves.items()}


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def worker(rank, world, store, args):
    device = args.device
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method="file://" + store,
                            rank=rank, world_size=world, timeout=datetime.timedelta(minutes=10))
    group = dist.group.WORLD
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rows = []
    for impl in args.impl.split(","):
        try:
            single_fn, cp_fn, context = functions(impl, args.op)
        except ImportError as e:
            if rank == 0:
                print(f"{impl}: not importable ({e}); skipped", flush=True)
            continue
        for T in (int(t) for t in args.T.split(",")):
            x, do = inputs(args.op, T, args.H, args.K, args.V, device, dtype)
            # 1 device: rank 0 runs, the others wait at the barriers (their steps are empty)
            single = {}

            def one():
                if rank == 0:
                    single.update(run_step(single_fn, x, do))
            t1 = timed(one, args.reps, device, group)
            # world devices: an even split of the tokens
            n = T // world
            a, e = rank * n, (rank + 1) * n
            xl = {k: t[:, a:e].contiguous() for k, t in x.items()}
            ctx = context(T, group)
            local = {}

            def many():
                local.update(run_step(cp_fn, xl, do[:, a:e].contiguous(), cp_context=ctx))
            tw = timed(many, args.reps, device, group)
            # gradients: gather the local ones in token order on every rank, compare on rank 0
            errs = {}
            for k in sorted(local):
                parts = [torch.empty_like(local[k][:, :n]) for _ in range(world)]
                dist.all_gather(parts, local[k].contiguous(), group=group)
                if rank == 0:
                    errs[k] = rel(torch.cat(parts, dim=1), single[k])
            if rank == 0:
                row = dict(impl=impl, op=args.op, T=T, H=args.H, K=args.K, V=args.V, world=world,
                           ms_1=1e3 * t1, ms_cp=1e3 * tw, tok_s_1=T / t1, tok_s_cp=T / tw, speedup=t1 / tw,
                           grad_rel_err=max(errs.values()), grad_errs=errs)
                rows.append(row)
                print(f"{impl:5s} {args.op:4s} T={T:7d} H={args.H} K={args.K} V={args.V}  1 dev {row['ms_1']:9.2f} ms "
                      f"({row['tok_s_1'] / 1e6:6.2f} Mtok/s)  {world} dev {row['ms_cp']:9.2f} ms "
                      f"({row['tok_s_cp'] / 1e6:6.2f} Mtok/s)  speedup {row['speedup']:5.2f}x  "
                      f"grad rel err {row['grad_rel_err']:.2e}", flush=True)
                if args.json:
                    print(json.dumps(row), flush=True)
            del x, do, xl, single, local
            if device == "cuda":
                torch.cuda.empty_cache()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", default="65536,131072,262144")
    p.add_argument("--op", default="gdn", choices=["gdn", "kda"])
    p.add_argument("--H", type=int, default=16)
    p.add_argument("--K", type=int, default=128)
    p.add_argument("--V", type=int, default=128)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--impl", default="rewy,fla")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if any(int(t) % args.world for t in args.T.split(",")):
        raise SystemExit(f"cp_bench: every T must be divisible by --world {args.world}")
    if args.device == "cuda" and torch.cuda.device_count() < args.world:
        raise SystemExit(f"cp_bench: needs {args.world} GPUs (found {torch.cuda.device_count()})")
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(worker, args=(args.world, os.path.join(tmp, "store"), args), nprocs=args.world)


if __name__ == "__main__":
    main()
