"""rewy's attention call as FLA's layers make it (B=2, T=4096, 16 heads of 128, bf16; q/k l2norm, gate and β
sigmoid in the call, states [V,K], no h0, no final state): GPU-bound fwd+bwd time of the whole call and of the
core op alone (inputs already normalized / activated), then the per-kernel table of the whole call.
    REWY_LIBRARY=build/cuda-on/librewy.so PYTHONPATH=python python3 bench/dev/layer_profile.py [gdn,delta,kda] [B]
(B = 4 is the e2e models' batch)"""
import sys
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
import rewy
from rewy import ops

B, T, H, D = int(sys.argv[2]) if len(sys.argv) > 2 else 2, 4096, 16, 128
dev = torch.device("cuda")


def inputs(op, seed=0):
    torch.manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16)
    x = dict(q=F.silu(r(B, T, H, D)), k=F.silu(r(B, T, H, D)), v=F.silu(r(B, T, H, D)))
    if op == "gdn":
        x.update(g=r(B, T, H), beta=r(B, T, H), A_log=torch.rand(H, device=dev).log(), dt_bias=torch.randn(H, device=dev))
    elif op == "kda":
        x.update(g=r(B, T, H, D), beta=r(B, T, H), A_log=torch.rand(H, device=dev).log(),
                 dt_bias=torch.randn(H * D, device=dev))
    else:
        x.update(beta=r(B, T, H).sigmoid())
    return x


def whole(op, x):
    if op == "gdn":
        return ops.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                                          use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                          use_beta_sigmoid_in_kernel=True, state_v_first=True)[0]
    if op == "kda":
        return ops.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                             use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                             state_v_first=True)[0]
    return ops.chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], use_qk_l2norm_in_kernel=True)[0]


def core(op, x):
    """the same call with its transforms done beforehand (outside the timing)"""
    q, k = ops.l2norm(x["q"]).detach().requires_grad_(), ops.l2norm(x["k"]).detach().requires_grad_()
    if op == "delta":
        return lambda: ops.chunk_delta_rule(q, k, x["v"], x["beta"])[0]
    g = ops.gate(x["g"], x["A_log"], x["dt_bias"]).detach().requires_grad_()
    beta = x["beta"].float().sigmoid().to(torch.bfloat16).detach().requires_grad_()
    f = ops.chunk_gated_delta_rule if op == "gdn" else ops.chunk_kda
    return lambda: f(q, k, x["v"], g, beta, state_v_first=True)[0]


def gpu_ms(fn, n=10, batches=5):
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return sorted(ts)[len(ts) // 2]


for op in (sys.argv[1] if len(sys.argv) > 1 else "gdn,delta,kda").split(","):
    x = inputs(op)
    for t in x.values():
        if t.is_floating_point():
            t.requires_grad_()
    do = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    fw = lambda: whole(op, x)
    step = lambda: fw().backward(do)
    c = core(op, x)
    cstep = lambda: c().backward(do)
    print(f"{op} ({B},{T},{H}): whole call fwd {gpu_ms(lambda: fw()):.3f} ms, fwd+bwd {gpu_ms(step):.3f} ms; "
          f"core op fwd {gpu_ms(lambda: c()):.3f} ms, fwd+bwd {gpu_ms(cstep):.3f} ms", flush=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    rows = sorted(((e.device_time_total / 5 / 1000, e.count / 5, e.key) for e in prof.key_averages()
                   if e.device_time_total > 0), reverse=True)
    print(f"  per kernel, whole call fwd+bwd: total {sum(r[0] for r in rows):.3f} ms")
    for ms, n, k in rows[:22]:
        print(f"  {ms:8.4f} ms x{n:.0f}  {k[:100]}")
