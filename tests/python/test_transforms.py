"""FLA's input transforms in rewy.ops: l2norm through the library (rewy_l2norm_forward / _backward) against the fp64 formula
and the plain torch reference, on both backends; the errors of the C entry points; the gate's recompute."""
import ctypes

import pytest
import torch

from helpers import DEVICES
from rewy import _lib, ops

TOL = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}   # relative L2 (MATH §10 for 16-bit)


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def fp64(x, dy, eps):
    x = x.double().requires_grad_()
    y = x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)
    y.backward(dy.double())
    return y.detach(), x.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 37, 3, 128), (1, 5, 2, 1), (3, 7, 1, 100), (1, 2, 1, 257), (0, 4, 2, 8),
                                   (1, 33, 1, 64), (1, 3, 1, 1024), (2, 5, 3, 24)])
def test_l2norm_matches_fp64(device, dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g).to(device, dtype)
    x.view(-1, shape[-1])[:1] *= 1e-4   # a row near zero: eps matters there
    dy = torch.randn(shape, generator=g).to(device, dtype)
    xr = x.clone().requires_grad_()
    y = ops.l2norm(xr)
    y.backward(dy)
    if x.numel() == 0:
        assert y.shape == x.shape and xr.grad.shape == x.shape
        return
    y64, dx64 = fp64(x.cpu(), dy.cpu(), 1e-6)
    assert y.dtype == dtype and rel(y.cpu(), y64) <= TOL[dtype]
    assert rel(xr.grad.cpu(), dx64) <= TOL[dtype] * 2
    # the torch reference (FLA's formula) agrees too
    xt = x.clone().requires_grad_()
    ops.l2norm_reference(xt).backward(dy)
    assert rel(xr.grad.cpu(), xt.grad.double().cpu()) <= TOL[dtype] * 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_l2norm_misaligned_and_in_place(device, dtype):
    """CUDA's 16-byte vector kernel takes aligned rows whose length is a multiple of the vector; a tensor one
    element into its storage takes the plain kernel. Both give the fp64 result; in place gives the same bits."""
    from rewy import _core
    g = torch.Generator().manual_seed(5)
    base = torch.randn(1 + 9 * 128, generator=g).to(device, dtype)
    for x in (base[1:].view(9, 128), base[:-1].view(9, 128)):   # misaligned, aligned
        y64, _ = fp64(x.cpu(), torch.zeros(9, 128), 1e-6)
        y, rstd = torch.empty_like(x), torch.empty(9, device=device)
        _core.l2norm(x, rstd, None, y, 1e-6)
        assert rel(y.cpu(), y64) <= TOL[dtype]
        z = x.clone()   # aligned: in place and out of place take the same kernel, so the same bits
        yz = torch.empty_like(z)
        _core.l2norm(z, None, None, yz, 1e-6)
        _core.l2norm(z, None, None, z, 1e-6)
        assert torch.equal(z, yz)


def test_l2norm_fp64_gradcheck():
    x = torch.randn(3, 4, 2, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ops.l2norm(t, 1e-3), (x,))


def test_l2norm_errors():
    lib = _lib.lib()
    buf, rs = (ctypes.c_float * 8)(), (ctypes.c_float * 2)()
    p, r = ctypes.addressof(buf), ctypes.addressof(rs)
    cpu, f32 = _lib.BACKEND_CPU, _lib.F32
    fwd, bwd = lib.rewy_l2norm_forward, lib.rewy_l2norm_backward
    assert fwd(cpu, f32, 2, 4, 1e-6, p, p, r, None) == _lib.OK
    assert fwd(cpu, f32, 2, 4, 1e-6, p, p, None, None) == _lib.OK          # rstd optional in the forward
    assert bwd(cpu, f32, 2, 4, p, r, p, p, None) == _lib.OK
    assert bwd(cpu, f32, 2, 4, p, None, p, p, None) == _lib.ERR_NULL_POINTER   # required in the backward
    assert bwd(cpu, f32, 2, 4, p, r, None, p, None) == _lib.ERR_NULL_POINTER
    assert fwd(cpu, f32, 2, 0, 1e-6, p, p, r, None) == _lib.ERR_BAD_SHAPE
    assert fwd(cpu, f32, -1, 4, 1e-6, p, p, r, None) == _lib.ERR_BAD_SHAPE
    assert fwd(cpu, f32, 2, 4, -1.0, p, p, r, None) == _lib.ERR_BAD_SHAPE
    assert fwd(cpu, f32, 2, 4, float("nan"), p, p, r, None) == _lib.ERR_BAD_SHAPE
    assert fwd(cpu, 7, 2, 4, 1e-6, p, p, r, None) == _lib.ERR_BAD_DTYPE
    assert fwd(5, f32, 2, 4, 1e-6, p, p, r, None) == _lib.ERR_BAD_ENUM
    assert fwd(cpu, f32, 2, 4, 1e-6, None, p, r, None) == _lib.ERR_NULL_POINTER
    assert fwd(cpu, f32, 2, 4, 1e-6, p + 1, p, r, None) == _lib.ERR_MISALIGNED
    assert fwd(cpu, f32, 2, 4, 1e-6, p, p, r + 2, None) == _lib.ERR_MISALIGNED
    assert fwd(cpu, f32, 1 << 62, 1 << 20, 1e-6, p, p, r, None) == _lib.ERR_BAD_SHAPE
    assert fwd(cpu, f32, 0, 4, 1e-6, None, None, None, None) == _lib.OK
    if not lib.rewy_has_cuda():
        assert fwd(_lib.BACKEND_CUDA, f32, 2, 4, 1e-6, p, p, r, None) == _lib.ERR_BACKEND
    else:   # fp64 is the CPU backend's alone
        assert fwd(_lib.BACKEND_CUDA, _lib.F64, 2, 4, 1e-6, p, p, r, None) == _lib.ERR_BAD_DTYPE


def test_l2norm_in_place_and_values():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    y = torch.empty_like(x)
    from rewy import _core
    rstd = torch.empty(2)
    _core.l2norm(x, rstd, None, y, 1e-30)
    assert torch.allclose(y[0], torch.tensor([0.6, 0.8])) and torch.allclose(rstd[0], torch.tensor(0.2))
    _core.l2norm(x, None, None, x, 0.0)   # in place, no rstd; the zero row gives 0 · inf = NaN with eps = 0, as FLA's
    assert torch.allclose(x[0], torch.tensor([0.6, 0.8])) and torch.isnan(x[1]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_l2norm_keeps_y_not_x(device):
    """The backward holds the output (which the core op saves too), not the raw input."""
    x = torch.randn(4, 8, 2, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = ops.l2norm(x)
    saved = {t.data_ptr() for t in y.grad_fn.saved_tensors}
    assert y.data_ptr() in saved and x.data_ptr() not in saved


def test_gate_keeps_no_fp32_temporaries(monkeypatch):
    """With the gate in the call (KDA: g [B,T,HV,K]), the autograd graph keeps the raw gate input and no fp32
    gate-sized tensor: _Gate keeps the raw g, and the core op a marker where it saves the gate, which its backward
    forms again from the raw g (ops._saved_as_recompute). The gradients are those of the plain formula (the sums
    over tokens in another order: to fp32 rounding)."""
    torch.manual_seed(0)
    B, T, H, K = 1, 40, 2, 16
    q, k, v = (torch.randn(B, T, H, K, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(B, T, H, K, dtype=torch.bfloat16, requires_grad=True)
    beta = torch.rand(B, T, H, dtype=torch.bfloat16, requires_grad=True)
    A_log = torch.rand(H).log().requires_grad_()
    dt_bias = torch.randn(H * K, requires_grad=True)
    saved, core_saved = [], []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    real = ops._saved_as_recompute

    def spy(y, recompute):   # what the core op's hooks keep: tensors as (shape, dtype), the marker as "marker"
        hooks = real(y, recompute)
        inner = hooks.pack_hook

        def pack_core(t):
            x = inner(t)
            core_saved.append((tuple(t.shape), t.dtype) if isinstance(x, torch.Tensor) else "marker")
            return x
        hooks.pack_hook = pack_core
        return hooks
    monkeypatch.setattr(ops, "_saved_as_recompute", spy)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        o, _ = ops.chunk_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True)
    assert ((B * T, H, K), torch.bfloat16) in saved and core_saved.count("marker") == 1, (saved, core_saved)
    assert not [s for s in saved + core_saved if s == ((B, T, H, K), torch.float32)], (saved, core_saved)
    o.float().sum().backward()
    got = [t.grad.clone() for t in (g, A_log, dt_bias)]
    for t in (g, A_log, dt_bias):
        t.grad = None
    gp = ops.gate(g, A_log, dt_bias)   # the plain formula, then the core op on its result
    o2, _ = ops.chunk_kda(q, k, v, gp, beta)
    o2.float().sum().backward()
    for a, b in zip(got, (g.grad, A_log.grad, dt_bias.grad)):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert rel(a.float(), b.double()) <= (8e-3 if a.dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 37, 3, 16), (1, 300, 2, 128), (2, 50, 4), (1, 7, 3, 5), (1, 1, 1, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_gate_library_matches_fp64(device, dtype, shape, bias):
    """rewy_gate_forward / _backward (the eager gate of use_gate_in_kernel) against the formula in fp64: y, the
    raw g's gradient and the sums for A_log and dt_bias; rows around the slices (rewy_gate_slices), GDN's
    [B,T,HV] gate, widths that take the CUDA scalar kernel (5 columns), softplus past its threshold."""
    gen = torch.Generator().manual_seed(sum(shape) + bias)
    HV = shape[2]
    K = shape[3] if len(shape) > 3 else 1
    g = (torch.randn(shape, generator=gen) * 4 - 2)
    g.view(-1)[::11] += 22.0   # softplus(x) = x there
    g = g.to(device, dtype).requires_grad_()
    A_log = torch.rand(HV, generator=gen).mul(15).add(1).log().to(device).requires_grad_()
    dt_bias = torch.randn(HV * K if len(shape) > 3 else HV, generator=gen).to(device).requires_grad_() if bias else None
    dy = torch.randn(shape, generator=gen).to(device)
    y = ops._gate_fused(g, A_log, dt_bias, None)[0]
    assert y.dtype == torch.float32 and y.shape == g.shape
    y.backward(dy)
    # fp64 reference on the same rounded inputs
    g64 = g.detach().double().cpu().requires_grad_()
    A64 = A_log.detach().double().cpu().requires_grad_()
    b64 = dt_bias.detach().double().cpu().requires_grad_() if bias else None
    y64 = ops.gate(g64, A64, b64)
    y64.backward(dy.double().cpu())
    assert rel(y.detach().cpu(), y64.detach()) <= 1e-6
    assert rel(g.grad.cpu(), g64.grad) <= TOL[dtype]
    assert rel(A_log.grad.cpu(), A64.grad) <= 1e-5
    if bias:
        assert rel(dt_bias.grad.cpu(), b64.grad) <= 1e-5
    # bitwise repeat
    g2 = g.detach().clone().requires_grad_()
    A2 = A_log.detach().clone().requires_grad_()
    ops._gate_fused(g2, A2, None if dt_bias is None else dt_bias.detach(), None)[0].backward(dy)
    assert torch.equal(g2.grad, g.grad) and torch.equal(A2.grad, A_log.grad)


def test_gate_library_errors():
    lib = _lib.lib()
    n = ctypes.c_size_t(0)
    assert lib.rewy_gate_workspace_size(10, 2, 3, ctypes.byref(n)) == _lib.OK and n.value == 2 * 4 * 6
    assert lib.rewy_gate_workspace_size(-1, 2, 3, ctypes.byref(n)) == _lib.ERR_BAD_SHAPE
    buf = (ctypes.c_float * 64)()
    p = ctypes.addressof(buf)
    assert lib.rewy_gate_forward(_lib.BACKEND_CPU, _lib.F64, 2, 2, 2, p, p, None, p, None) == _lib.ERR_BAD_DTYPE
    assert lib.rewy_gate_forward(_lib.BACKEND_CPU, _lib.F32, 2, 2, 2, None, p, None, p, None) == _lib.ERR_NULL_POINTER
    assert lib.rewy_gate_backward(_lib.BACKEND_CPU, _lib.F32, 2, 2, 2, p, p, None, p, p + 128, None, None, p, 4,
                                  None) == _lib.ERR_WORKSPACE


def test_gate_recompute_is_exact_and_guarded():
    """The core op's backward with the gate formed again gives the very gradients of the call that keeps it, and an
    in-place change of the raw g between forward and backward is an error, as autograd makes it."""
    torch.manual_seed(1)
    B, T, H, K = 1, 70, 2, 8
    mk = lambda *s: torch.randn(*s, dtype=torch.bfloat16)
    q, k, v, g0 = mk(B, T, H, K), mk(B, T, H, K), mk(B, T, H, K), mk(B, T, H, K)
    beta = torch.rand(B, T, H, dtype=torch.bfloat16)
    A_log, dt_bias = torch.rand(H).log(), torch.randn(H * K)
    grads = []
    for keep in (False, True):
        g = g0.clone().requires_grad_()
        qq = q.clone().requires_grad_()
        if keep:   # the gate as a plain input: the core op saves it
            with torch.no_grad():
                gp = ops._gate_fused(g, A_log, dt_bias, None)[0]
            gp.requires_grad_()
            o, _ = ops.chunk_kda(qq, k, v, gp, beta)
        else:
            o, _ = ops.chunk_kda(qq, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True)
        o.float().square().sum().backward()
        grads.append(qq.grad)
    assert torch.equal(grads[0], grads[1])
    g = g0.clone().requires_grad_()
    o, _ = ops.chunk_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True)
    with torch.no_grad():
        g.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.float().sum().backward()
