"""The core op under torch.library's checks and torch.compile (fullgraph, CPU)."""
import pytest
import torch

import rewy
from helpers import FN, GATES, OPS, make_inputs

_POLICY_R, _BWD_REWY, _OP = 0, 0, dict(delta=0, gdn=1, kda=2, gdn2=3)


def core_args(op, varlen=False):
    x = {n: t.float() for n, t in make_inputs(op, B=1 if varlen else 2, T=20, K=8, V=4,
                                              N=2 if varlen else None).items()}
    gates = {n: x.get(n) for n in ("g", "beta", "b", "w")}
    cu = torch.tensor([0, 7, 20], dtype=torch.int32) if varlen else None
    return [x["q"], x["k"], x["v"], gates["g"], gates["beta"], gates["b"], gates["w"], x["initial_state"], cu, None,
            _OP[op], 0.3, 16, _POLICY_R, _BWD_REWY, False, True]


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_opcheck_forward(op, varlen):
    """Schema, fake (meta) implementation, autograd registration, AOT dispatch."""
    args = core_args(op, varlen)
    for i in (0, 1, 2, 3, 4, 5, 6, 7):
        if args[i] is not None:
            args[i] = args[i].requires_grad_()
    torch.library.opcheck(torch.ops.rewy.chunk_fwd.default, args)


@pytest.mark.parametrize("op", OPS)
def test_opcheck_backward(op):
    args = core_args(op)
    o, ht, saved = torch.ops.rewy.chunk_fwd(*args)
    bwd_args = args[:10] + [saved, torch.randn_like(o), torch.randn_like(ht)] + args[10:16]
    torch.library.opcheck(torch.ops.rewy.chunk_bwd.default, bwd_args)


def _layer(q, k, v, a, beta_logits, A_log, dt_bias, h0):
    """An FLA-style call with every torch-side transform in the graph."""
    o, ht = rewy.chunk_gated_delta_rule(q, k, v, a, beta_logits, initial_state=h0, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                        use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, chunk_size=16)
    return (o.square().sum() + ht.sum()), o


def _layer_inputs():
    x = {n: t.float() for n, t in make_inputs("gdn", T=40, raw_gate=True, raw_qk=True).items()}
    x["beta"] = torch.randn_like(x["beta"])
    return [x["q"], x["k"], x["v"], x["g"], x["beta"], torch.zeros(2) - 0.5, torch.ones(2) * 0.1,
            x["initial_state"]]


def test_torch_compile_fullgraph():
    """fullgraph=True: no graph break anywhere in the forward or the backward."""
    torch._dynamo.reset()
    eager_in = [t.clone().requires_grad_() for t in _layer_inputs()]
    comp_in = [t.detach().clone().requires_grad_() for t in eager_in]
    loss, o = _layer(*eager_in)
    loss.backward()
    compiled = torch.compile(_layer, fullgraph=True, backend="inductor")
    closs, co = compiled(*comp_in)
    closs.backward()
    torch.testing.assert_close(co, o, rtol=1e-5, atol=1e-5)
    for a, b in zip(comp_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_torch_compile_each_operator(op):
    """Each operator's public function traces without graph breaks (aot_eager backend)."""
    torch._dynamo.reset()
    x = {n: t.float().requires_grad_() for n, t in make_inputs(op, T=20).items()}
    fn = torch.compile(lambda **kw: FN[op](**kw, output_final_state=True, chunk_size=16), fullgraph=True,
                       backend="aot_eager")
    o, ht = fn(**x)
    (o.sum() + ht.sum()).backward()
    ref = {n: t.detach().clone().requires_grad_() for n, t in x.items()}
    ro, rht = FN[op](**ref, output_final_state=True, chunk_size=16)
    (ro.sum() + rht.sum()).backward()
    torch.testing.assert_close(o, ro)
    for n in x:
        torch.testing.assert_close(x[n].grad, ref[n].grad, msg=n)
    assert set(GATES[op]) <= set(x)
