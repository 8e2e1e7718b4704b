"""The four FLA-compatible functions against the fp64 token recurrence (reference.py), for the
outputs and every gradient, with MATH §10's bounds (fp32 runs are held 100× tighter)."""
import pytest
import torch

import rewy
from reference import reference
from helpers import DEVICES, FN, OPS, check, make_inputs, rel_err, run

FP32 = 0.01  # fp32 inputs on the CPU backend: bounds × 0.01 (observed errors are ~1e-7)
# The CUDA backend takes fp32 inputs through tf32 tensor-core products and keeps chunk states in
# bf16 (common.cuh: state_t), so there fp32 inputs get MATH §10's bounds as they are.


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backward", ["rewy", "wy"])
@pytest.mark.parametrize("disable_recompute", [False, True], ids=["policyR", "policyA"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("op", OPS)
def test_against_reference(op, dtype, disable_recompute, backward, device):
    """T=100 (a tail chunk at 64), K=32 ≠ V=24, initial and final state, both policies and pullbacks."""
    results = run(op, make_inputs(op), dtype, device, backward=backward, disable_recompute=disable_recompute)
    check(results, FP32 if dtype == torch.float32 and device == "cpu" else 1.0)


@pytest.mark.parametrize("op", OPS)
def test_fp16(op):
    check(run(op, make_inputs(op, T=40), torch.float16))


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
@pytest.mark.parametrize("op", OPS)
def test_chunk_sizes(op, chunk_size):
    check(run(op, make_inputs(op, T=45, K=20, V=12), chunk_size=chunk_size), FP32)


@pytest.mark.parametrize("H,HV", [(1, 2), (2, 6)])
@pytest.mark.parametrize("op", OPS)
def test_grouped_value_heads(op, H, HV):
    """GVA: value head h reads query/key head h // (HV/H); dq, dk sum over each group."""
    check(run(op, make_inputs(op, T=40, H=H, HV=HV)), FP32)


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("disable_recompute", [False, True], ids=["policyR", "policyA"])
@pytest.mark.parametrize("op", OPS)
def test_varlen(op, disable_recompute, cu_dtype):
    """Packed sequences (one of length 1, one longer than a chunk) with a state per sequence."""
    cu = torch.tensor([0, 7, 8, 80, 100], dtype=cu_dtype)
    x = make_inputs(op, B=1, T=100, N=4)
    check(run(op, x, cu_seqlens=cu, disable_recompute=disable_recompute), FP32)


def test_varlen_with_host_copy():
    cu = torch.tensor([0, 30, 64, 90])
    x = make_inputs("kda", B=1, T=90, N=3)
    check(run("kda", x, cu_seqlens=cu, cu_seqlens_cpu=cu.clone()), FP32)


@pytest.mark.parametrize("op", OPS)
def test_state_v_first(op):
    """States [N, HV, V, K]: h0 is read, ht written and dh0 returned in that layout."""
    x = make_inputs(op, T=40)
    x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    check(run(op, x, state_v_first=True), FP32)


@pytest.mark.parametrize("op", OPS)
def test_without_states(op):
    """No initial state, no final state: returns (o, None)."""
    check(run(op, make_inputs(op, T=40, h0=False), output_final_state=False), FP32)


@pytest.mark.parametrize("op", OPS)
def test_qk_l2norm(op):
    """use_qk_l2norm_in_kernel: q/(‖q‖²+1e-6)^½ in the call; dq, dk w.r.t. the raw q, k."""
    check(run(op, make_inputs(op, T=40, raw_qk=True), use_qk_l2norm_in_kernel=True), FP32)


def test_scale():
    check(run("gdn", make_inputs("gdn", T=40), scale=0.3), FP32)


@pytest.mark.parametrize("dt_bias", [True, False])
def test_gdn_gate_in_kernel(dt_bias):
    """g' = −exp(A_log) · softplus(g + dt_bias), A_log and dt_bias [HV]; gradients for both."""
    x = make_inputs("gdn", T=40, HV=4, raw_gate=True)
    gen = torch.Generator().manual_seed(3)
    x["A_log"] = torch.rand(4, generator=gen, dtype=torch.float64).log()
    if dt_bias:
        x["dt_bias"] = torch.randn(4, generator=gen, dtype=torch.float64)
    check(run("gdn", x, use_gate_in_kernel=True), FP32)


@pytest.mark.parametrize("variant", ["softplus", "softplus_no_bias", "lower_bound", "lower_bound_no_A_log"])
@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_vector_gate_in_kernel(op, variant):
    """KDA/GDN2 gates: −exp(A_log)·softplus(g + dt_bias), or lower_bound·σ(exp(A_log)(g + dt_bias)),
    or lower_bound·σ(g + dt_bias) without A_log; A_log [HV], dt_bias [HV*K]."""
    HV, K = 2, 32
    x = make_inputs(op, T=40, HV=HV, K=K, raw_gate=True)
    gen = torch.Generator().manual_seed(3)
    if variant != "lower_bound_no_A_log":
        x["A_log"] = torch.rand(HV, generator=gen, dtype=torch.float64).log()
    if variant != "softplus_no_bias":
        x["dt_bias"] = torch.randn(HV * K, generator=gen, dtype=torch.float64)
    kwargs = dict(lower_bound=-5.0) if variant.startswith("lower_bound") else {}
    check(run(op, x, use_gate_in_kernel=True, **kwargs), FP32)


def test_kda_safe_gate():
    """safe_gate only selects FLA kernels; rewy is exact either way (FLA's lower_bound check kept)."""
    x = make_inputs("kda", T=40, raw_gate=True)
    check(run("kda", x, use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True), FP32)


@pytest.mark.parametrize("allow_neg_eigval", [False, True])
@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_beta_sigmoid(op, allow_neg_eigval):
    """β = σ(x) (or 2σ(x)); dβ w.r.t. the logits x."""
    x = make_inputs(op, T=40)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    check(run(op, x, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=allow_neg_eigval), FP32)


def test_fla_layer_call():
    """The exact call of FLA's GatedDeltaNet layer: l2norm, gate in kernel, β sigmoid, state_v_first."""
    x = make_inputs("gdn", T=40, HV=4, raw_gate=True, raw_qk=True)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    x["A_log"] = torch.rand(4, dtype=torch.float64).log()
    x["dt_bias"] = torch.randn(4, dtype=torch.float64)
    check(run("gdn", x, torch.bfloat16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True))


# ------------------------------------------------------------------------------------------
# edge cases of MATH §10

@pytest.mark.parametrize("beta", [0.0, 1e-8])
@pytest.mark.parametrize("op", ["delta", "gdn", "kda"])
def test_zero_and_tiny_beta(op, beta):
    """β = 0 writes nothing; dβ must stay exact there (no division by β)."""
    x = make_inputs(op, T=40)
    x["beta"][:, ::3] = beta
    check(run(op, x), FP32)


@pytest.mark.parametrize("op", ["gdn", "kda", "gdn2"])
def test_strong_decay_and_resets(op):
    """Log gates down to −8 per token, and −1000 hard resets (varlen tests' sequence starts)."""
    x = make_inputs(op, T=100, raw_gate=True)
    x["g"] = -8 * torch.rand_like(x["g"])
    x["g"][:, [0, 37, 70]] = -1000.0
    check(run(op, x))


# ------------------------------------------------------------------------------------------
# conventions of the call

@pytest.mark.parametrize("op", OPS)
def test_dtypes_of_results(op):
    """o in q's dtype; final state and dh0 fp32; each gradient in its input's dtype."""
    x = make_inputs(op, T=20)
    leaves = {n: t.to(torch.bfloat16).requires_grad_() for n, t in x.items()}
    o, ht = FN[op](**leaves, output_final_state=True)
    assert o.dtype == torch.bfloat16 and ht.dtype == torch.float32
    (o.float().sum() + ht.sum()).backward()
    for n, t in leaves.items():
        assert t.grad is not None and t.grad.dtype == t.dtype, n
    leaves["initial_state"] = x["initial_state"].float().requires_grad_()
    o, ht = FN[op](**leaves, output_final_state=True)
    (o.float().sum() + ht.sum()).backward()
    assert leaves["initial_state"].grad.dtype == torch.float32


@pytest.mark.parametrize("op", OPS)
def test_positional_arguments(op):
    """FLA's argument order: (q, k, v, [g,] beta | g, b, w, scale, initial_state, output_final_state)."""
    x = {n: t.float() for n, t in make_inputs(op, T=20).items()}
    args = [x[n] for n in ("q", "k", "v") + {"delta": ("beta",), "gdn": ("g", "beta"), "kda": ("g", "beta"),
                                             "gdn2": ("g", "b", "w")}[op]]
    o1, h1 = FN[op](*args, 0.2, x["initial_state"], True)
    o2, h2 = FN[op](**x, scale=0.2, output_final_state=True)
    assert torch.equal(o1, o2) and torch.equal(h1, h2)


def test_non_contiguous_inputs():
    x = {n: t.float() for n, t in make_inputs("kda", T=30).items()}
    strided = {n: t.transpose(1, 2).contiguous().transpose(1, 2) if t.dim() == 4 and n != "initial_state" else t
               for n, t in x.items()}
    assert not strided["q"].is_contiguous()
    o1, _ = rewy.chunk_kda(**x)
    o2, _ = rewy.chunk_kda(**strided)
    assert torch.equal(o1, o2)


@pytest.mark.parametrize("disable_recompute", [False, True], ids=["policyR", "policyA"])
@pytest.mark.parametrize("op", OPS)
def test_backward_algorithms_agree(op, disable_recompute):
    """ReWY and conventional WY compute the same gradients (MATH §4: only the rounding differs)."""
    x = make_inputs(op, T=100)
    a = run(op, x, backward="rewy", disable_recompute=disable_recompute)
    b = run(op, x, backward="wy", disable_recompute=disable_recompute)
    for n in a:
        assert rel_err(a[n][0], b[n][0]) < 1e-5, n


def test_gradient_of_final_state_only():
    """A loss on ht alone: do is zero, dht carries everything."""
    x = {n: t.float().requires_grad_() for n, t in make_inputs("gdn", T=40).items()}
    _, ht = rewy.chunk_gated_delta_rule(**x, output_final_state=True)
    ht.square().sum().backward()
    ref = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    ref_grads = torch.autograd.grad(reference("gdn", **ref)[1].square().sum(), list(ref.values()),
                                    materialize_grads=True)
    assert x["q"].grad.abs().max() == 0            # q only reaches o
    for n, rg in zip(ref, ref_grads):
        assert rel_err(x[n].grad, rg) < 1e-4, n


def test_library_info():
    assert rewy.library_version() == "0.1.0"
    assert isinstance(rewy.has_cuda(), bool)


def test_thread_count_change():
    """CPU workspace sizes follow the OpenMP thread count; changing it between calls still works."""
    x = {n: t.float() for n, t in make_inputs("gdn", T=30).items()}
    before = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            outs.append(rewy.chunk_gated_delta_rule(**x)[0])
    finally:
        torch.set_num_threads(before)
    assert all(torch.allclose(o, outs[0], rtol=1e-5, atol=1e-6) for o in outs)
