"""Shared test machinery: MATH §10 inputs, running rewy and the fp64 reference, the error metric."""
import pytest
import torch
import torch.nn.functional as F

import rewy
from reference import reference

FN = {"delta": rewy.chunk_delta_rule, "gdn": rewy.chunk_gated_delta_rule, "kda": rewy.chunk_kda,
      "gdn2": rewy.chunk_gdn2}
OPS = list(FN)
GATES = {"delta": ("beta",), "gdn": ("g", "beta"), "kda": ("g", "beta"), "gdn2": ("g", "b", "w")}

# MATH §10: relative L2 error bounds against the fp64 reference
TOL = dict(o=0.008, ht=0.008, q=0.008, k=0.008, v=0.008, initial_state=0.008,
           g=0.02, beta=0.02, b=0.02, w=0.02, A_log=0.02, dt_bias=0.02)
# inputs kept in fp32 whatever the element type (rewy.h: gates and states are fp32)
FP32_INPUTS = ("g", "initial_state", "A_log", "dt_bias")

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not (torch.cuda.is_available() and rewy.has_cuda()),
                                                     reason="needs a CUDA device and librewy built with CUDA=1"))
DEVICES = ["cpu", CUDA]


def make_inputs(op, B=2, T=100, H=2, HV=None, K=32, V=24, N=None, h0=True, seed=0, raw_gate=False,
                raw_qk=False):
    """MATH §10 inputs in fp64: feature-normalized Gaussian q/k, Gaussian v, log gates
    log σ(x)/16, β/b/w uniform in [0.1, 0.9], h0 Gaussian × 0.1. raw_gate/raw_qk give the
    pre-activation inputs of use_gate_in_kernel / use_qk_l2norm_in_kernel instead."""
    gen = torch.Generator().manual_seed(seed)
    HV = HV or H
    N = N or B

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def uniform(*shape):
        return 0.1 + 0.8 * torch.rand(*shape, generator=gen, dtype=torch.float64)

    x = dict(q=randn(B, T, H, K), k=randn(B, T, H, K), v=randn(B, T, HV, V))
    if not raw_qk:
        x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    if op != "delta":
        gshape = (B, T, HV) if op == "gdn" else (B, T, HV, K)
        x["g"] = randn(*gshape) if raw_gate else F.logsigmoid(randn(*gshape)) / 16
    if op == "gdn2":
        x["b"], x["w"] = uniform(B, T, HV, K), uniform(B, T, HV, V)
    else:
        x["beta"] = uniform(B, T, HV)
    if h0:
        x["initial_state"] = 0.1 * randn(N, HV, K, V)
    return x


def run(op, inputs, dtype=torch.float32, device="cpu", seed=1, output_final_state=True, **kwargs):
    """Run rewy and the fp64 reference on the same (rounded) inputs.

    Returns {name: (rewy value, reference value)} for o, ht and the gradient of every input in
    `inputs` under the loss Σ o⊙do + Σ ht⊙dht with Gaussian do and dht (× 0.1)."""
    leaves = {n: t.to(device, torch.float32 if n in FP32_INPUTS else dtype).requires_grad_()
              for n, t in inputs.items()}
    ref_leaves = {n: t.detach().cpu().double().requires_grad_() for n, t in leaves.items()}
    ref_kwargs = {n: kwargs[n] for n in ("scale", "cu_seqlens", "use_qk_l2norm_in_kernel", "use_gate_in_kernel",
                                         "lower_bound", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
                                         "state_v_first") if n in kwargs}
    if "cu_seqlens" in ref_kwargs:
        ref_kwargs["cu_seqlens"] = ref_kwargs["cu_seqlens"].tolist()
    if "cu_seqlens" in kwargs:
        kwargs = dict(kwargs, cu_seqlens=kwargs["cu_seqlens"].to(device))

    o, ht = FN[op](**leaves, output_final_state=output_final_state, **kwargs)
    ref_o, ref_ht = reference(op, **ref_leaves, **ref_kwargs)

    gen = torch.Generator().manual_seed(seed)
    do = torch.randn(ref_o.shape, generator=gen, dtype=torch.float64)
    dht = 0.1 * torch.randn(ref_ht.shape, generator=gen, dtype=torch.float64)
    loss = (o * do.to(device, o.dtype)).sum()
    ref_loss = (ref_o * do).sum()
    out = dict(o=(o, ref_o))
    if output_final_state:
        loss = loss + (ht * dht.to(device)).sum()
        ref_loss = ref_loss + (ref_ht * dht).sum()
        out["ht"] = (ht, ref_ht)
    else:
        assert ht is None
    grads = torch.autograd.grad(loss, list(leaves.values()))
    ref_grads = torch.autograd.grad(ref_loss, list(ref_leaves.values()))
    for n, d, rd in zip(leaves, grads, ref_grads):
        out[n] = (d, rd)
    return out


def rel_err(x, ref):
    """‖x − ref‖ / ‖ref‖, or max |x − ref| where ‖ref‖ is tiny (MATH §10)."""
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    diff = (x - ref).norm().item()
    scale = ref.norm().item()
    return diff / scale if scale > 1e-6 else (x - ref).abs().max().item()


def check(results, factor=1.0, tol=None):
    """Every value finite and within MATH §10's bound (times factor: < 1 tightens for fp32)."""
    for n, (x, ref) in results.items():
        assert torch.isfinite(x).all(), f"{n}: non-finite values"
        err = rel_err(x, ref)
        bound = (tol or TOL)[n if n in TOL else "o"] * factor
        assert err <= bound, f"{n}: relative error {err:.3g} > {bound:.3g}"


def fla_gdn_bwd_known_wrong():
    """FLA's GDN backward gives wrong results on Hopper with Triton in [3.4, 3.7.1) (FLA issue #640);
    an unpatched FLA refuses to run it there. Such gradients are not compared with (skips, never passes)."""
    import triton
    if not torch.cuda.is_available():
        return False
    ver = tuple(int(x) for x in triton.__version__.split(".")[:3] if x.isdigit())
    return torch.cuda.get_device_capability()[0] == 9 and (3, 4, 0) <= ver < (3, 7, 1)
