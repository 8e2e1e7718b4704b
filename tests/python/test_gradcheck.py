"""torch.autograd.gradcheck in float64 on small shapes.

What is checked, honestly: librewy computes in fp32 (it takes no fp64 input), so rewy is
wrapped as f64 → fp32 → rewy → f64 and gradcheck compares its analytic gradients with
central differences of that fp32 function. fp32 rounding limits the tolerances to eps=3e-3,
atol=1e-4, rtol=1e-3; test_gradcheck_is_sensitive shows that these still reject a gradient
that is off by 1% in any single input. The fp64 reference itself is gradchecked at the
default (tight) tolerances, and test_ops.py compares rewy to it on larger shapes.
"""
import pytest
import torch

from helpers import FN, OPS, make_inputs
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
