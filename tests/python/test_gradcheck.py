"""torch.autograd.gradcheck on small shapes, two ways.

fp64 (REWY_F64, CPU backend): rewy itself in float64 (elements, gates and states all double),
at gradcheck's default tolerances: the true check of the autograd wiring (which gradient goes
to which input, GVA sums, h0/final state, varlen, FLA's transforms). The library computes F64
with the fp64 token recurrence, so this checks the Python package, not the chunk kernels.

fp32 (the chunk kernels): rewy wrapped as f64 → fp32 → rewy → f64, with gradcheck comparing
its analytic gradients with central differences of that fp32 function. fp32 rounding limits
the tolerances to eps=3e-3, atol=1e-4, rtol=1e-3; test_gradcheck_is_sensitive shows that
these still reject a gradient that is off by 1% in any single input. The fp64 reference
itself is gradchecked at the default tolerances, and test_ops.py compares rewy to it on
larger shapes.
"""
import pytest
import torch

from helpers import FN, OPS, make_inputs, rel_err
from reference import reference

TOL = dict(eps=3e-3, atol=1e-4, rtol=1e-3)


def through_fp32(op, names, **kwargs):
    def f(*xs):
        o, ht = FN[op](**{n: x.float() for n, x in zip(names, xs)}, output_final_state=True, **kwargs)
        return o.double(), ht.double()
    return f


def small(op, **kw):
    """T=20 over chunks of 16 (a full chunk and a tail), GVA 1→2 heads, K=4 > V=3, with h0."""
    x = make_inputs(op, B=1, T=20, H=1, HV=2, K=4, V=3, **kw)
    return list(x), [t.requires_grad_() for t in x.values()]


@pytest.mark.parametrize("backward", ["rewy", "wy"])
@pytest.mark.parametrize("op", OPS)
def test_gradcheck(op, backward):
    names, xs = small(op)
    assert torch.autograd.gradcheck(through_fp32(op, names, chunk_size=16, backward=backward), xs, **TOL)


def test_gradcheck_policy_a_varlen():
    names, xs = small("kda", N=3)
    cu = torch.tensor([0, 3, 17, 20])
    f = through_fp32("kda", names, chunk_size=16, cu_seqlens=cu, disable_recompute=True)
    assert torch.autograd.gradcheck(f, xs, **TOL)


def test_gradcheck_gdn_with_fla_options():
    """l2norm, in-kernel gate with A_log and dt_bias, β sigmoid with negative eigenvalues."""
    x = make_inputs("gdn", B=1, T=20, H=1, HV=2, K=4, V=3, raw_gate=True, raw_qk=True)
    x["beta"] = torch.randn(x["beta"].shape, dtype=torch.float64)
    x["A_log"] = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    x["dt_bias"] = torch.tensor([0.3, -0.2], dtype=torch.float64)
    f = through_fp32("gdn", list(x), chunk_size=16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                     use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()], **TOL)


@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_gradcheck_kda_gate(lower_bound):
    x = make_inputs("kda", B=1, T=20, H=1, HV=2, K=4, V=3, raw_gate=True)
    x["A_log"] = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    x["dt_bias"] = 0.3 * torch.randn(8, dtype=torch.float64)
    f = through_fp32("kda", list(x), chunk_size=16, use_gate_in_kernel=True, lower_bound=lower_bound)
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()], **TOL)


class _OffByOnePercent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.01


def test_gradcheck_is_sensitive():
    """At these tolerances, a 1% error in the gradient of any one input is caught."""
    names, xs = small("gdn2")
    f = through_fp32("gdn2", names, chunk_size=16)
    for i, name in enumerate(names):
        def wrong(*ys, i=i):
            ys = list(ys)
            ys[i] = _OffByOnePercent.apply(ys[i])
            return f(*ys)
        assert not torch.autograd.gradcheck(wrong, xs, raise_exception=False, **TOL), name


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_reference(op):
    """The fp64 reference's own autograd, at gradcheck's default tolerances."""
    x = make_inputs(op, B=1, T=6, H=1, HV=2, K=3, V=2)
    names = list(x)

    def f(*xs):
        return reference(op, **dict(zip(names, xs)))
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()])


# ------------------------------------------------------------------------------------------
# a true fp64 gradcheck: REWY_F64 on the CPU backend, at tolerances 100 and 1000 times tighter
# than gradcheck's defaults (atol 1e-5, rtol 1e-3): central differences with eps 1e-6 are
# good to about 1e-10 on these smooth functions

TOL64 = dict(atol=1e-8, rtol=1e-6)

def fp64_call(op, names, **kwargs):
    def f(*xs):
        return FN[op](**dict(zip(names, xs)), output_final_state=True, chunk_size=16, **kwargs)
    return f


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_fp64(op, varlen):
    """rewy in fp64 at gradcheck's default tolerances: grouped heads (1 → 2), h0 and the final
    state, a full chunk and a tail; varlen: three sequences (one inside a chunk, one across two)."""
    kw = dict(B=1, N=3) if varlen else dict(B=2)
    x = make_inputs(op, T=20, H=1, HV=2, K=4, V=3, **kw)
    f = fp64_call(op, list(x), **(dict(cu_seqlens=torch.tensor([0, 3, 17, 20])) if varlen else {}))
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()], **TOL64)


@pytest.mark.parametrize("options", [
    dict(disable_recompute=True, backward="wy", state_v_first=True, scale=0.7),
    dict(scale=0.0)])
def test_gradcheck_fp64_options(options):
    """Policy A, the WY backward, states [N,HV,V,K] and a given scale (0 included) in fp64."""
    x = make_inputs("kda", B=1, T=20, H=1, HV=2, K=4, V=3)
    if options.get("state_v_first"):
        x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    f = fp64_call("kda", list(x), **options)
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()], **TOL64)


def test_gradcheck_fp64_with_fla_options():
    """l2norm, the in-kernel gate with A_log and dt_bias, β sigmoid with negative eigenvalues, in fp64."""
    x = make_inputs("gdn", B=1, T=20, H=1, HV=2, K=4, V=3, raw_gate=True, raw_qk=True)
    x["beta"] = torch.randn(x["beta"].shape, dtype=torch.float64)
    x["A_log"] = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    x["dt_bias"] = torch.tensor([0.3, -0.2], dtype=torch.float64)
    f = fp64_call("gdn", list(x), use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                  use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in x.values()], **TOL64)


@pytest.mark.parametrize("op", OPS)
def test_fp64_matches_the_reference(op):
    """fp64 outputs and gradients agree with reference.py to 1e-12 (fp32 would be about 1e-7)."""
    x = {n: t.requires_grad_() for n, t in make_inputs(op, B=1, T=40, H=1, HV=2, K=8, V=4, N=2).items()}
    cu = torch.tensor([0, 13, 40])
    o, ht = FN[op](**x, output_final_state=True, cu_seqlens=cu, chunk_size=16)
    ro, rht = reference(op, **x, cu_seqlens=cu.tolist())
    assert o.dtype == ht.dtype == torch.float64
    grads = torch.autograd.grad(o.square().sum() + ht.sum(), list(x.values()))
    ref_grads = torch.autograd.grad(ro.square().sum() + rht.sum(), list(x.values()))
    for n, a, b in [("o", o, ro), ("ht", ht, rht)] + list(zip(x, grads, ref_grads)):
        assert rel_err(a, b) < 1e-12, (n, rel_err(a, b))


def test_gradcheck_fp64_is_sensitive():
    """At TOL64, a 1e-5 relative error in the gradient of any one input is caught."""
    x = make_inputs("gdn2", B=1, T=20, H=1, HV=2, K=4, V=3)
    names, xs = list(x), [t.requires_grad_() for t in x.values()]
    f = fp64_call("gdn2", names)

    class OffBy1e5(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            return y.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * (1 + 1e-5)

    for i, name in enumerate(names):
        def wrong(*ys, i=i):
            ys = list(ys)
            ys[i] = OffBy1e5.apply(ys[i])
            return f(*ys)
        assert not torch.autograd.gradcheck(wrong, xs, raise_exception=False, **TOL64), name
