"""The Python package's edge cases (issue 25, item 4), each shown against the fp64 reference
(reference.py, MATH §10 bounds through helpers.check) or as a clear error:

    scale = 0                     honoured: o = 0 and dq = 0 exactly, the rest through the final state
    int64 cu_seqlens beyond int32 ValueError (they used to wrap: 2^32 + 50 read as 50)
    K = 0 (or V, T)               the library's own ValueError, on CPU and meta tensors
    meta tensors                  outputs and gradients of the right shapes, dtypes and device
    torch.func                    grad, vmap and vmap(grad) give the eager results, jacrev the
                                  reference's Jacobian (fp64); jvp and gradients of gradients
                                  raise NotImplementedError
    fp64 and int64 offsets        the custom ops pass torch.library.opcheck with them
(the fp64 gradcheck is in test_gradcheck.py)
"""
import pytest
import torch

import rewy
from helpers import DEVICES, FN, OPS, check, make_inputs, run
from reference import reference

ORDER = ("q", "k", "v", "g", "beta", "b", "w", "initial_state")   # each function's tensor arguments, in order


def small(op, **kw):
    """T=40 over chunks of 16 (two full chunks and a tail), GVA 1→2 heads, with h0."""
    return make_inputs(op, B=kw.pop("B", 1), T=40, H=1, HV=2, K=8, V=4, **kw)


# ------------------------------------------------------------------------------------------
# scale = 0: FLA keeps a given scale (only None means K^-1/2); the C API's 0 means K^-1/2

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [0.0, 1e-50])   # 1e-50 is 0 in the library's fp32 scale
@pytest.mark.parametrize("op", OPS)
def test_scale_zero_is_honoured(op, scale, device):
    r = run(op, small(op), device=device, scale=scale, chunk_size=16)
    assert not r["o"][0].any() and not r["q"][0].any()          # exact zeros
    assert r["k"][1].norm() > 0.1 and r["k"][0].norm() > 0.1     # k still gets gradients, through ht
    check(r)
    # and None still means K^-1/2: o is not zero then
    assert rewy.chunk_gated_delta_rule(**{n: t.float() for n, t in small("gdn").items()})[0].abs().max() > 0.01


def test_scale_zero_without_final_state_gives_zero_gradients():
    """o = 0 whatever the inputs, and no final state is returned: every gradient is exactly 0."""
    r = run("gdn2", small("gdn2"), scale=0, chunk_size=16, output_final_state=False)
    for n, (x, _) in r.items():
        assert not x.any(), n
    check(r)


def test_scale_zero_under_torch_compile():
    """The custom op's route (torch.compile) honours 0 as the eager one does."""
    torch._dynamo.reset()
    x = {n: t.float().requires_grad_() for n, t in small("kda").items()}
    fn = torch.compile(lambda **kw: rewy.chunk_kda(**kw, scale=0.0, output_final_state=True, chunk_size=16),
                       fullgraph=True, backend="aot_eager")
    o, ht = fn(**x)
    (ht.sum() + o.sum()).backward()
    ref = {n: t.detach().clone().requires_grad_() for n, t in x.items()}
    ro, rht = rewy.chunk_kda(**ref, scale=0.0, output_final_state=True, chunk_size=16)
    (rht.sum() + ro.sum()).backward()
    assert not o.any() and not x["q"].grad.any()
    torch.testing.assert_close(ht, rht)
    for n in x:
        torch.testing.assert_close(x[n].grad, ref[n].grad, msg=n)


# ------------------------------------------------------------------------------------------
# cu_seqlens: int64 offsets are range-checked, never truncated to int32

def varlen_inputs(op="gdn"):
    return {n: t.float() for n, t in make_inputs(op, B=1, T=100, N=2, h0=False).items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("host_copy", [False, True])
@pytest.mark.parametrize("bad", [2 ** 32 + 50, -2 ** 32 + 50])   # both wrap to 50 in int32
def test_int64_cu_seqlens_beyond_int32(bad, host_copy, device):
    """Checked where the library reads the offsets: cu_seqlens on the CPU, the host copy
    cu_seqlens_cpu (given, or made) for CUDA tensors."""
    cu = torch.tensor([0, bad, 100])
    extra = dict(cu_seqlens_cpu=cu) if host_copy else {}
    with pytest.raises(ValueError, match=f"chunk_gated_delta_rule: cu_seqlens holds {bad}, outside int32"):
        rewy.chunk_gated_delta_rule(**{n: t.to(device) for n, t in varlen_inputs().items()},
                                    cu_seqlens=cu.to(device), **extra)


def test_int64_cu_seqlens_beyond_int32_in_the_custom_op():
    """torch.compile and torch.func hand int64 offsets to rewy::chunk_fwd, which checks them too."""
    x = varlen_inputs()
    with pytest.raises(ValueError, match=r"rewy: cu_seqlens holds 4294967346, outside int32"):
        torch.ops.rewy.chunk_fwd(x["q"], x["k"], x["v"], x["g"], x["beta"], None, None, None,
                                 torch.tensor([0, 2 ** 32 + 50, 100]), None, 1, 0.25, 64, 0, 0, False, False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_cu_seqlens_in_range_match_the_reference(dtype, device):
    cu = torch.tensor([0, 37, 100], dtype=dtype)
    check(run("kda", make_inputs("kda", B=1, T=100, N=2, K=8, V=4), device=device, cu_seqlens=cu, chunk_size=16))


# ------------------------------------------------------------------------------------------
# zero-sized dimensions: the library's own message, not a ZeroDivisionError

@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dims,name", [(dict(K=0, h0=False), "K"), (dict(V=0), "V"), (dict(T=0), "T")])
def test_zero_dimension(dims, name, device):
    x = {n: t.float().to(device) for n, t in make_inputs("kda", **dims).items()}
    with pytest.raises(ValueError, match=rf"rewy: {name} must be > 0 \(got 0\)"):
        rewy.chunk_kda(**x)


# ------------------------------------------------------------------------------------------
# meta tensors: shapes only (torch's fake implementation of the custom ops), gradients included

@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_meta_tensors(op, varlen):
    kw = dict(B=1, N=2) if varlen else {}
    x = {n: t.bfloat16() if n in ("q", "k", "v") else t.float() for n, t in make_inputs(op, T=20, **kw).items()}
    extra = dict(cu_seqlens=torch.tensor([0, 7, 20]), output_final_state=True, chunk_size=16) if varlen else \
        dict(output_final_state=True, chunk_size=16)
    o, ht = FN[op](**x, **extra)   # the CPU call, for the shapes and dtypes to expect
    meta = {n: t.to("meta").requires_grad_() for n, t in x.items()}
    mo, mht = FN[op](**meta, **{n: (t.to("meta") if isinstance(t, torch.Tensor) else t) for n, t in extra.items()})
    for m, c in ((mo, o), (mht, ht)):
        assert m.device.type == "meta" and m.shape == c.shape and m.dtype == c.dtype
    (mo.float().sum() + mht.sum()).backward()
    for n, t in meta.items():
        assert t.grad is not None and t.grad.device.type == "meta" and t.grad.shape == t.shape, n


# ------------------------------------------------------------------------------------------
# torch.func: grad, vmap and per-sample gradients (vmap of grad) through rewy's own backward

def positional(op, x):
    names = [n for n in ORDER if n in x]
    return names, [x[n] for n in names]


def loss_fn(op, names, **kwargs):
    def loss(*xs):
        o, ht = FN[op](**dict(zip(names, xs)), output_final_state=True, chunk_size=16, **kwargs)
        return o.square().sum() + ht.square().sum()
    return loss


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_func_grad(op, device):
    """torch.func.grad gives the eager autograd's gradients bit for bit, and these are within
    MATH §10 of the fp64 reference."""
    x = {n: t.float().to(device) for n, t in small(op).items()}
    names, xs = positional(op, x)
    loss = loss_fn(op, names)
    grads = torch.func.grad(loss, argnums=tuple(range(len(xs))))(*xs)
    leaves = [t.clone().requires_grad_() for t in xs]
    eager = torch.autograd.grad(loss(*leaves), leaves)
    for n, a, b in zip(names, grads, eager):
        assert torch.equal(a, b), n
    r = run(op, small(op), device=device, chunk_size=16)   # the eager gradients against the reference
    check({n: r[n] for n in names})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_func_vmap(op, device):
    """vmap over a leading dimension gives each slice's own call (varlen: per-sample offsets)."""
    x = {n: t.float().to(device) for n, t in make_inputs(op, B=1, T=30, N=2, K=8, V=4).items()}
    names, xs = positional(op, x)
    batch = [torch.stack([t, 0.5 * t, -t]) for t in xs]
    cu = torch.tensor([[0, 11, 30], [0, 16, 30], [0, 1, 30]], device=device)

    def f(c, *ys):
        return FN[op](**dict(zip(names, ys)), cu_seqlens=c, output_final_state=True, chunk_size=16)
    o, ht = torch.func.vmap(f)(cu, *batch)
    for i in range(3):
        oi, hi = f(cu[i], *[t[i] for t in batch])
        assert torch.equal(o[i], oi) and torch.equal(ht[i], hi), i


@pytest.mark.parametrize("op", ["gdn", "gdn2"])
def test_func_per_sample_gradients(op):
    """vmap(grad(loss)) and grad(sum of vmap(loss)): each sample's eager gradients, bit for bit;
    an input vmapped over (in_dims None) shares one value."""
    x = {n: t.float() for n, t in small(op).items()}
    names, xs = positional(op, x)
    batch = [torch.stack([t, 0.5 * t]) for t in xs[:-1]]   # h0 is shared
    h0 = xs[-1]
    loss = loss_fn(op, names)
    argnums = tuple(range(len(xs)))
    per_sample = torch.func.vmap(torch.func.grad(loss, argnums=argnums),
                                 in_dims=(0,) * len(batch) + (None,))(*batch, h0)
    summed = torch.func.grad(lambda *ys: torch.func.vmap(loss, in_dims=(0,) * len(batch) + (None,))(*ys).sum(),
                             argnums=argnums)(*batch, h0)
    for i in range(2):
        leaves = [t[i].clone().requires_grad_() for t in batch] + [h0.clone().requires_grad_()]
        eager = torch.autograd.grad(loss(*leaves), leaves)
        for n, a, b in zip(names, per_sample, eager):
            assert torch.equal(a[i], b), (n, i)
        for n, a, b in zip(names[:-1], summed, eager):
            assert torch.equal(a[i], b), (n, i)


@pytest.mark.parametrize("op", OPS)
def test_func_jacrev_fp64(op):
    """torch.func.jacrev (vmap over the backward with batched cotangents and unbatched saved
    tensors) in fp64: the Jacobian of o and the final state in q and h0 equals reference.py's."""
    x = make_inputs(op, B=1, T=6, H=1, HV=2, K=3, V=2)
    rest = {n: t for n, t in x.items() if n not in ("q", "initial_state")}

    def f(q, h0):
        return FN[op](q, **rest, initial_state=h0, output_final_state=True, chunk_size=16)

    def ref(q, h0):
        return reference(op, q, **rest, initial_state=h0)
    J = torch.func.jacrev(f, argnums=(0, 1))(x["q"], x["initial_state"])
    J_ref = torch.func.jacrev(ref, argnums=(0, 1))(x["q"], x["initial_state"])
    for out, out_ref in zip(J, J_ref):
        for a, b in zip(out, out_ref):
            assert a.shape == b.shape and (a - b).abs().max() < 1e-13


def test_func_forward_mode_and_double_backward_are_clear_errors():
    x = {n: t.float() for n, t in small("gdn").items()}
    names, xs = positional("gdn", x)
    loss = loss_fn("gdn", names)
    with pytest.raises(NotImplementedError, match="rewy: forward-mode AD"):
        torch.func.jvp(lambda q: loss(q, *xs[1:]), (xs[0],), (torch.ones_like(xs[0]),))
    with pytest.raises(NotImplementedError, match="rewy: gradients of rewy's gradients"):
        torch.func.grad(lambda q: torch.func.grad(loss)(q, *xs[1:]).sum())(xs[0])


# ------------------------------------------------------------------------------------------
# the custom ops under torch.library's checks with the new inputs: fp64 (states double),
# int64 cu_seqlens (converted inside the op), scale 0

@pytest.mark.parametrize("case", ["fp64", "int64_cu_seqlens", "scale0"])
def test_opcheck_new_inputs(case):
    dtype = torch.float64 if case == "fp64" else torch.float32
    x = {n: t.to(dtype).requires_grad_() for n, t in make_inputs("kda", B=1, T=20, K=8, V=4, N=2).items()}
    cu = torch.tensor([0, 7, 20], dtype=torch.int64 if case == "int64_cu_seqlens" else torch.int32)
    args = [x["q"], x["k"], x["v"], x["g"], x["beta"], None, None, x["initial_state"], cu, None,
            2, 0.0 if case == "scale0" else 0.3, 16, 0, 0, False, True]
    torch.library.opcheck(torch.ops.rewy.chunk_fwd.default, args)
    o, ht, saved = torch.ops.rewy.chunk_fwd(*args)
    assert ht.dtype == dtype and o.dtype == dtype
    bwd_args = args[:10] + [saved, torch.randn_like(o), torch.randn_like(ht)] + args[10:16]
    torch.library.opcheck(torch.ops.rewy.chunk_bwd.default, [a.detach() if isinstance(a, torch.Tensor) else a
                                                             for a in bwd_args])
