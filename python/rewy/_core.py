"""The core op: one delta-rule chunk forward and backward through librewy.

This is MATH §1 for all four operators at once; the operator only decides which of the
gates g, beta, b, w are present (rewy.h's table). Everything FLA does around the kernels
(l2norm, gate activation, beta sigmoid) is plain differentiable torch code in rewy.ops.

`_forward` and `_backward` below fill rewy_fwd_params / rewy_bwd_params from a plan (`_plan`)
and call the library; the forward returns the library's `saved` buffer (a uint8 tensor) for
the backward. They are reached two ways:
  * eagerly through `eager` and `_ChunkFunction`, a plain torch.autograd.Function (cheapest
    per call), on a plan that rewy.ops looked up with its argument checks;
  * under torch.compile through the torch.library custom ops rewy::chunk_fwd and
    rewy::chunk_bwd (`forward`, `backward`), which have fake implementations and a registered
    autograd formula (`_pullback`);
  * under torch.func transforms and for meta tensors through `_FuncFunction`, an
    autograd.Function with setup_context (functorch requires one) that calls the same custom
    ops, whose vmap rules run the library once per vmapped slice.
Nothing here syncs with a device: sizes come from shapes, and varlen plans use a host copy
of cu_seqlens.

Per-call cost matters here (a layer calls this once per step and direction, issue 5): the
eager path gets its config and sizes from a cache (rewy.ops._CALLS, _PLANS), keeps them on the
autograd node for the backward, builds the params structs in one copy (_lib.fwd_params), calls
the C++ Function.apply without its Python wrapper, and reads the CUDA stream without creating a
torch Stream object.
"""
import ctypes
from ctypes import addressof, byref, c_float, c_int32, c_size_t
from typing import Optional

import torch
from torch import Tensor

from . import _lib
from ._lib import Config

# float64 runs on the CPU backend only (the library refuses it on CUDA with its own message)
DTYPES = {torch.float32: _lib.F32, torch.bfloat16: _lib.BF16, torch.float16: _lib.F16, torch.float64: _lib.F64}


def state_dtype(dtype):
    """The dtype of gates and states (g, h0, ht and their gradients) for elements of dtype: fp32,
    fp64 with fp64 elements (rewy.h)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _ptr(t):
    """The address of t's data, 0 (NULL) for None."""
    return 0 if t is None else t.data_ptr()


# torch.cuda.current_stream(device).cuda_stream builds a torch.cuda.Stream object per call (several
# µs); the raw query returns the same cudaStream_t as an int. CPU-only builds of torch lack it, and
# never need it (only CUDA tensors ask).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _cuda_stream(t):
    """The current CUDA stream of CUDA tensor t's device, as the cudaStream_t address."""
    if _raw_stream is None:
        return torch.cuda.current_stream(t.device).cuda_stream
    return _raw_stream(t.get_device())


def l2norm(x, rstd, dy, out, eps):
    """rewy_l2norm_forward (dy None: out = x normalised, rstd = the row scales unless None) or
    _backward (x is the forward's y, rstd its row scales; out = dx) over the last dimension; the
    tensors contiguous, of one device, x/dy/out of one dtype, rstd fp32 (fp64 with fp64)."""
    cuda = x.is_cuda
    rows, dim = x.numel() // x.shape[-1], x.shape[-1]
    be, dt, stream = _lib.BACKEND_CUDA if cuda else _lib.BACKEND_CPU, DTYPES[x.dtype], _cuda_stream(x) if cuda else None
    if dy is None:
        status = _lib.lib().rewy_l2norm_forward(be, dt, rows, dim, eps, x.data_ptr(), out.data_ptr(), _ptr(rstd),
                                                stream)
        name = "rewy_l2norm_forward"
    else:
        status = _lib.lib().rewy_l2norm_backward(be, dt, rows, dim, x.data_ptr(), rstd.data_ptr(), dy.data_ptr(),
                                                 out.data_ptr(), stream)
        name = "rewy_l2norm_backward"
    if status != _lib.OK:
        raise _lib.error(status, f"{name}: rows {rows}, dim {dim}, eps {eps}, {x.dtype} on {x.device}",
                         device_failure=status == _lib.ERR_BACKEND and cuda)


_GATE_WS = {}   # (rows, heads, dim) -> rewy_gate_workspace_size


def gate(g, A_log, dt_bias, dy=None):
    """rewy_gate_forward (dy None: y = −exp(A_log)·softplus(g + dt_bias), fp32) or _backward (dg in g's
    dtype, dA_log, ddt_bias (None without dt_bias), fp32) of g [rows, heads, dim] (the last two
    dimensions of g as the library reads them); A_log fp32 [heads], dt_bias fp32 [heads·dim] or None,
    dy fp32; all contiguous, on g's device."""
    cuda = g.is_cuda
    heads, dim = g.shape[-2], g.shape[-1]
    rows = g.numel() // (heads * dim) if heads * dim else 0
    be, dt, stream = _lib.BACKEND_CUDA if cuda else _lib.BACKEND_CPU, DTYPES[g.dtype], _cuda_stream(g) if cuda else None
    L = _lib.lib()
    if dy is None:
        y = torch.empty(g.shape, dtype=torch.float32, device=g.device)
        status = L.rewy_gate_forward(be, dt, rows, heads, dim, g.data_ptr(), A_log.data_ptr(), _ptr(dt_bias),
                                     y.data_ptr(), stream)
        out, name = y, "rewy_gate_forward"
    else:
        key = (rows, heads, dim)
        n = _GATE_WS.get(key)
        if n is None:
            size = c_size_t(0)
            status, n = L.rewy_gate_workspace_size(rows, heads, dim, byref(size)), size.value
            if status != _lib.OK:
                raise _lib.error(status, f"rewy_gate_workspace_size: rows {rows}, heads {heads}, dim {dim}")
            _remember(_GATE_WS, key, n)
        ws = torch.empty(n, dtype=torch.uint8, device=g.device)
        dg, dA = torch.empty_like(g), torch.empty(heads, dtype=torch.float32, device=g.device)
        ddt = None if dt_bias is None else torch.empty(heads * dim, dtype=torch.float32, device=g.device)
        status = L.rewy_gate_backward(be, dt, rows, heads, dim, g.data_ptr(), A_log.data_ptr(), _ptr(dt_bias),
                                      dy.data_ptr(), dg.data_ptr(), dA.data_ptr(), _ptr(ddt), ws.data_ptr(), n, stream)
        out, name = (dg, dA, ddt), "rewy_gate_backward"
    if status != _lib.OK:
        raise _lib.error(status, f"{name}: rows {rows}, heads {heads}, dim {dim}, {g.dtype} on {g.device}",
                         device_failure=status == _lib.ERR_BACKEND and cuda)
    return out


def zero_scale(scale):
    """True where scale is 0 as the library reads it (an fp32 rewy_config.scale: 1e-50 is 0 too).

    The C API reads scale = 0 as K^-1/2; from Python a 0 means 0, as in FLA (only None means
    K^-1/2). Then o = S^T (0 q) = 0 and dq = 0, while the final state does not depend on scale:
    the library runs with scale 1, o is zeroed, and the backward sees do = 0 and zeroes dq, so
    the other gradients flow only through the final state (exactly, MATH §1)."""
    return c_float(scale).value == 0.0


def config(op, q, v, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, policy, bwd_algo, state_v_first,
           real=True):
    """rewy_config from the tensors' shapes. real=False (fake tensors) leaves out the pointers
    to cu_seqlens and the CUDA stream; only sizes can be asked of such a config. A zero scale
    (zero_scale) is given to the library as 1."""
    B, T, H, K = map(int, q.shape)        # int(): under dynamic shapes this specializes
    HV, V = int(v.shape[2]), int(v.shape[3])
    cuda = q.device.type == "cuda"
    cfg = Config(op, _lib.BACKEND_CUDA if cuda else _lib.BACKEND_CPU, DTYPES[q.dtype], B, T, H, HV, K, V,
                 chunk_size, 1.0 if zero_scale(scale) else scale)
    cfg.policy, cfg.bwd_algo, cfg.state_v_first = policy, bwd_algo, state_v_first
    if cu_seqlens is not None:
        cfg.num_seqs = int(cu_seqlens.shape[0]) - 1
        if real:
            cfg.cu_seqlens, cfg.cu_seqlens_host = cu_seqlens.data_ptr(), _ptr(cu_seqlens_cpu)
    if real and cuda:
        cfg.stream = _cuda_stream(q)
    return cfg


_INT32_MIN, _INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _int32(t):
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def seqlens_int32(prefix, cu_seqlens, cu_seqlens_cpu, cuda):
    """(cu_seqlens, its host copy) as the int32 tensors librewy reads: the host copy only for the
    CUDA backend (made here when not given, which syncs), None for the CPU backend (cu_seqlens is
    host memory). int64 offsets outside int32 raise ValueError instead of wrapping (2^32 + 50 would
    read as 50); they are checked on the host, where the library reads them too."""
    if cu_seqlens is None:
        return None, None
    if cuda:
        host = cu_seqlens.cpu() if cu_seqlens_cpu is None else cu_seqlens_cpu
    else:
        host = None
    probe = cu_seqlens if host is None else host
    if probe.dtype == torch.int64:
        lo, hi = torch.aminmax(probe)
        if lo.item() < _INT32_MIN or hi.item() > _INT32_MAX:
            bad = (lo if lo.item() < _INT32_MIN else hi).item()
            raise ValueError(f"{prefix}cu_seqlens holds {bad}, outside int32 (librewy's sequence offsets are "
                             f"int32: [{_INT32_MIN}, {_INT32_MAX}])")
    return _int32(cu_seqlens).contiguous(), None if host is None else _int32(host).contiguous()


def state_shape(q, v, cu_seqlens, state_v_first):
    K, HV, V = q.shape[3], v.shape[2], v.shape[3]
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return (N, HV) + ((V, K) if state_v_first else (K, V))


_SIZES = {}  # config fields that sizes depend on -> (saved, fwd workspace, bwd workspace) bytes
_CACHE_MAX = 1024  # entries per cache; a full cache is cleared (new shapes every step, e.g. varlen T)


def _remember(cache, key, value):
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


def sizes(cfg):
    """(status, (saved, fwd workspace, bwd workspace) bytes), cached per shape and options.

    With varlen the saved size depends on how T splits into sequences, which fake tensors
    (torch.compile) cannot read. Sizing for the split with the most chunks, N-1 one-token
    sequences and one long one (Σ⌈l_i/BT⌉ ≤ N + ⌊(T-N)/BT⌋), gives fake and real calls the
    same shapes and is always large enough.
    """
    key = (cfg.op, cfg.backend, cfg.dtype, cfg.B, cfg.T, cfg.H, cfg.HV, cfg.K, cfg.V, cfg.chunk_size,
           cfg.num_seqs, cfg.policy, cfg.state_v_first,
           torch.get_num_threads())  # CPU workspaces scale with OpenMP threads (one runtime with torch's)
    found = _SIZES.get(key)
    if found is not None:
        return _lib.OK, found
    probe = Config.from_buffer_copy(cfg)
    if cfg.num_seqs > 0:
        N, T = cfg.num_seqs, cfg.T
        worst = (c_int32 * (N + 1))(*range(N), T)
        probe.cu_seqlens = probe.cu_seqlens_host = addressof(worst)
    L = _lib.lib()
    result = [_lib.size_query(fn, probe) for fn in (L.rewy_saved_size, L.rewy_fwd_workspace_size,
                                                     L.rewy_bwd_workspace_size)]
    for status, _ in result:
        if status != _lib.OK:
            return status, None
    found = tuple(n for _, n in result)
    _remember(_SIZES, key, found)
    return _lib.OK, found


# ------------------------------------------------------------------------------------------
# the two library calls

_PLANS = {}  # shapes and options -> plan (below)


def _plan(op, q, v, cu_seqlens, scale, chunk_size, policy, bwd_algo, state_v_first):
    """The plan of one problem: (bytes of its Config without the per-call pointers, cu_seqlens and
    the stream; (saved, fwd workspace, bwd workspace) bytes; final-state shape; size-query status;
    whether scale is zero (zero_scale)), built once per shape and options.

    After a failed size query the sizes are None (and nothing is cached), for the call to report on
    its params through the library's validation."""
    key = (op, q.dtype, q.device, q.shape, v.shape, None if cu_seqlens is None else cu_seqlens.shape[0],
           scale, chunk_size, policy, bwd_algo, state_v_first,
           torch.get_num_threads())  # CPU workspaces scale with OpenMP threads (as in sizes)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    cfg = config(op, q, v, cu_seqlens, None, scale, chunk_size, policy, bwd_algo, state_v_first, real=False)
    status, n = sizes(cfg)
    plan = (bytes(cfg), n, state_shape(q, v, cu_seqlens, state_v_first), status, zero_scale(scale))
    if status == _lib.OK:
        _remember(_PLANS, key, plan)
    return plan


def _set_pointers(cfg, q, cu_seqlens, cu_seqlens_cpu):
    """The per-call fields of a config (within a params struct): cu_seqlens and the CUDA stream."""
    if cu_seqlens is not None:
        cfg.cu_seqlens, cfg.cu_seqlens_host = cu_seqlens.data_ptr(), _ptr(cu_seqlens_cpu)
    if q.is_cuda:
        cfg.stream = _cuda_stream(q)


def forward(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
            b: Optional[Tensor], w: Optional[Tensor], h0: Optional[Tensor],
            cu_seqlens: Optional[Tensor], cu_seqlens_cpu: Optional[Tensor],
            op: int, scale: float, chunk_size: int, policy: int, bwd_algo: int,
            state_v_first: bool, output_final_state: bool) -> tuple[Tensor, Tensor, Tensor]:
    """rewy_forward: o, the final state (empty unless output_final_state) and the saved buffer.

    This is the custom op rewy::chunk_fwd: its saved buffer is zeroed, so that the bytes the
    library leaves unwritten (padding, varlen worst-case room) are deterministic, as
    torch.library.opcheck and compiled graphs compare whole outputs."""
    cu_seqlens, cu_seqlens_cpu = seqlens_int32("rewy: ", cu_seqlens, cu_seqlens_cpu, q.is_cuda)
    plan = _plan(op, q, v, cu_seqlens, scale, chunk_size, policy, bwd_algo, state_v_first)
    o = torch.empty_like(v, dtype=q.dtype, memory_format=torch.contiguous_format)
    o, ht, saved = _forward(plan, o, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, output_final_state,
                            True)
    if ht is None:   # an op returns tensors only
        ht = torch.empty(0, dtype=state_dtype(q.dtype), device=q.device)
    return o, ht, saved


def _forward(plan, o, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, output_final_state, zero_saved):
    """rewy_forward of a plan into o: (o, the final state or None unless output_final_state (no
    allocation for it), the saved buffer), with the saved buffer left uninitialised unless zero_saved.
    The eager path never shows the saved buffer to anyone but rewy_backward, which reads only what
    rewy_forward wrote (the C tests poison it); zeroing it would cost a memset of the whole buffer per call."""
    cfg, n, ht_shape, status, zero = plan
    L = _lib.lib()
    device = q.device
    ht = torch.empty(ht_shape, dtype=state_dtype(q.dtype), device=device) if output_final_state else None
    if n is None:   # a failed size query: the library's validation says why
        p = _lib.fwd_params(cfg, q.data_ptr(), k.data_ptr(), v.data_ptr(), _ptr(g), _ptr(beta), _ptr(b), _ptr(w),
                            _ptr(h0), o.data_ptr(), _ptr(ht), 0, 0, 0, 0)
        _set_pointers(p.cfg, q, cu_seqlens, cu_seqlens_cpu)
        _lib.check(status, p, L.rewy_validate_fwd)
    saved = (torch.zeros if zero_saved else torch.empty)(n[0], dtype=torch.uint8, device=device)
    ws = torch.empty(max(n[1], 16), dtype=torch.uint8, device=device)
    # (the optional pointers written out, not through _ptr: a call each costs per call)
    p = _lib.fwd_params(cfg, q.data_ptr(), k.data_ptr(), v.data_ptr(), 0 if g is None else g.data_ptr(),
                        0 if beta is None else beta.data_ptr(), 0 if b is None else b.data_ptr(),
                        0 if w is None else w.data_ptr(), 0 if h0 is None else h0.data_ptr(), o.data_ptr(),
                        0 if ht is None else ht.data_ptr(), saved.data_ptr(), ws.data_ptr(), n[1], n[0])
    if cu_seqlens is not None or q.is_cuda:
        _set_pointers(p.cfg, q, cu_seqlens, cu_seqlens_cpu)
    status = L.rewy_forward(byref(p))
    if status != _lib.OK:
        _lib.check(status, p, L.rewy_validate_fwd)
    if zero:   # scale 0: o = S^T (0 q) = 0 (the library ran with scale 1, zero_scale; its o, which in
        o.zero_()  # fp16 may overflow where 0 · q would not, is discarded)
    return o, ht, saved


def _grad_buffer(t):
    # t is contiguous (the library reads it as such), so empty_like's default (its layout) is a
    # contiguous buffer; asking for memory_format=torch.contiguous_format costs more per call
    return None if t is None else torch.empty_like(t)


def backward(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
             b: Optional[Tensor], w: Optional[Tensor], h0: Optional[Tensor],
             cu_seqlens: Optional[Tensor], cu_seqlens_cpu: Optional[Tensor], saved: Tensor,
             do: Tensor, dht: Optional[Tensor],
             op: int, scale: float, chunk_size: int, policy: int, bwd_algo: int,
             state_v_first: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """rewy_backward: dq, dk, dv, dg, dbeta, db, dw, dh0 (None where the input is None)."""
    cu_seqlens, cu_seqlens_cpu = seqlens_int32("rewy: ", cu_seqlens, cu_seqlens_cpu, q.is_cuda)
    return _backward(_plan(op, q, v, cu_seqlens, scale, chunk_size, policy, bwd_algo, state_v_first),
                     q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht)


def _backward(plan, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht):
    """rewy_backward of a plan."""
    cfg, n, _, status, zero = plan
    L = _lib.lib()
    if zero:   # scale 0: o does not depend on the inputs, so only the final state carries gradients
        do = torch.zeros_like(do)
    grads = (_grad_buffer(q), _grad_buffer(k), _grad_buffer(v), _grad_buffer(g), _grad_buffer(beta),
             _grad_buffer(b), _grad_buffer(w), _grad_buffer(h0))
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), _ptr(g), _ptr(beta), _ptr(b), _ptr(w), _ptr(h0),
            saved.data_ptr(), saved.numel(), do.data_ptr(), _ptr(dht), *map(_ptr, grads))
    if n is None:   # a failed size query: the library's validation says why
        p = _lib.bwd_params(cfg, *ptrs, 0, 0)
        _set_pointers(p.cfg, q, cu_seqlens, cu_seqlens_cpu)
        _lib.check(status, p, L.rewy_validate_bwd)
    ws = torch.empty(max(n[2], 16), dtype=torch.uint8, device=q.device)
    p = _lib.bwd_params(cfg, *ptrs, ws.data_ptr(), n[2])
    if cu_seqlens is not None or q.is_cuda:
        _set_pointers(p.cfg, q, cu_seqlens, cu_seqlens_cpu)
    status = L.rewy_backward(byref(p))
    if status != _lib.OK:
        _lib.check(status, p, L.rewy_validate_bwd)
    if zero:   # dq = 0 (the library's value from do = 0 already is, but for Inf or NaN in S)
        grads[0].zero_()
    return grads


# ------------------------------------------------------------------------------------------
# autograd: the custom op's formula and the eager Function, on one preparation of do and dht

def _save(ctx, tensors, options, output):
    """The custom op's setup_context. tensors: q k v g beta b w h0 cu_seqlens cu_seqlens_cpu;
    options: the 7 other arguments."""
    ctx.save_for_backward(*tensors, output[2])
    ctx.args, ctx.output_final_state = options[:6], options[6]
    ctx.mark_non_differentiable(output[2])


def _gradients_in(ctx, do, dht, q, v):
    """do and dht as rewy_backward reads them: contiguous, do in q's dtype (zeros where o was
    unused: eagerly, gradients of unused outputs are not materialized), dht None unless asked for."""
    dht = dht.contiguous() if ctx.output_final_state and dht is not None else None
    if do is None:
        do = torch.zeros_like(v, dtype=q.dtype, memory_format=torch.contiguous_format)
    elif do.dtype != q.dtype:
        do = do.to(q.dtype)
    return do.contiguous(), dht


def _pullback(ctx, do, dht, _dsaved, chunk_bwd_op=None):
    """The custom op's autograd formula (torch.compile's route), and with chunk_bwd_op the
    backward of _FuncFunction (torch.func's)."""
    q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved = ctx.saved_tensors
    do, dht = _gradients_in(ctx, do, dht, q, v)
    grads = (chunk_bwd_op or torch.ops.rewy.chunk_bwd)(
        q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht, *ctx.args)  # empty tensors: None
    grads = tuple(None if t is None else d for t, d in zip((q, k, v, g, beta, b, w, h0), grads))
    return grads + (None,) * 9   # cu_seqlens, cu_seqlens_cpu and the 7 options


class _ChunkFunction(torch.autograd.Function):
    """The eager route: inputs q k v g beta b w h0 (None where absent), then one tuple `rest` of
    the plan (_plan), cu_seqlens, cu_seqlens_cpu and output_final_state (Function.apply costs per
    argument; cu_seqlens needs no gradient, and save_for_backward keeps it like any other tensor).
    The ctx keeps the plan, so the backward needs no lookup."""
    @staticmethod
    def forward(ctx, q, k, v, g, beta, b, w, h0, rest):
        plan, cu_seqlens, cu_seqlens_cpu, output_final_state = rest
        # o: v is contiguous and of q's dtype (the caller checked and made it so), so empty_like's
        # default layout is the contiguous buffer the library writes, at less cost per call
        output = _forward(plan, torch.empty_like(v), q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu,
                          output_final_state, False)
        ctx.save_for_backward(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, output[2])
        ctx.plan, ctx.output_final_state = plan, output_final_state
        # no zero-filled gradients for unused outputs (the saved buffer's would be a memset of it;
        # the uint8 saved buffer is non-differentiable by its dtype)
        ctx.set_materialize_grads(False)
        return output

    @staticmethod
    def backward(ctx, do, dht, _dsaved):
        q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved = ctx.saved_tensors
        do, dht = _gradients_in(ctx, do, dht, q, v)
        # None where the input is None; then None for `rest`
        return _backward(ctx.plan, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht) + (None,)


# torch.autograd.Function.apply is a Python wrapper of the C++ apply (torch._C._FunctionBase.apply,
# private) that, outside functorch transforms (torch.func), only unwraps "dead" functorch wrappers
# (tensors that escaped a finished transform) through a generator over the arguments: about 3.5 µs of
# a 25 µs eager forward on a CPU VM (torch 2.13). The eager path calls the C++ apply directly. While a
# transform is active (transforms_active) rewy.ops calls _FuncFunction over the custom ops instead,
# so _ChunkFunction never sees functorch wrappers. A dead wrapper passed in is not unwrapped; reading its data pointer fails loudly.
try:
    _function_apply = super(torch.autograd.Function, _ChunkFunction).apply
    transforms_active = torch._C._are_functorch_transforms_active
except AttributeError:   # a torch without these private names: the public apply, and the custom ops always
    _function_apply, transforms_active = _ChunkFunction.apply, (lambda: True)


# the custom ops, for torch.compile, torch.func and meta tensors (an op returns tensors only: empty
# ones stand for None)
chunk_fwd = torch.library.custom_op("rewy::chunk_fwd", forward, mutates_args=())
chunk_bwd = torch.library.custom_op(
    "rewy::chunk_bwd", lambda *args: tuple(args[0].new_empty(0) if d is None else d for d in backward(*args)),
    mutates_args=(), schema=torch.library.infer_schema(backward, mutates_args=()))
chunk_fwd.register_autograd(
    _pullback, setup_context=lambda ctx, inputs, output: _save(ctx, inputs[:10], inputs[10:], output))


def _vmap_by_slices(op, n_out):
    """The vmap rule of a custom op: op once per index of the vmapped dimension, outputs stacked
    along dimension 0. The library takes one problem per call; folding the vmapped dimension into B
    would fail with cu_seqlens or an unbatched input, and vmap's use here (per-sample gradients)
    needs results, not speed."""
    def rule(info, in_dims, *args):
        outs = [op(*[a if d is None else a.select(d, i).contiguous() for a, d in zip(args, in_dims)])
                for i in range(info.batch_size)]
        return tuple(torch.stack(x) for x in zip(*outs)), (0,) * n_out
    return rule


chunk_fwd.register_vmap(_vmap_by_slices(chunk_fwd, 3))
chunk_bwd.register_vmap(_vmap_by_slices(chunk_bwd, 8))


class _FuncBackward(torch.autograd.Function):
    """rewy::chunk_bwd under torch.func: the backward runs inside the grad transform on tensors
    that require gradients there, and functorch refuses a custom op's own autograd (it has no
    setup_context). Gradients of gradients are not provided: asking for them is an error."""
    generate_vmap_rule = True

    @staticmethod
    def forward(*args):   # chunk_bwd's 19 arguments
        return chunk_bwd(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("rewy: gradients of rewy's gradients (double backward, torch.func.hessian) "
                                  "are not supported")


class _FuncFunction(torch.autograd.Function):
    """The route under torch.func transforms and for meta tensors: rewy::chunk_fwd in an
    autograd.Function with setup_context, which functorch requires (a custom op's registered
    autograd has none: torch.func.grad refuses it, torch 2.13). Its forward and backward call only
    the custom ops, which have vmap rules, so torch generates the Function's own (vmap, and
    per-sample gradients as vmap(grad(f)))."""
    generate_vmap_rule = True

    @staticmethod
    def forward(*args):   # chunk_fwd's 17 arguments
        return chunk_fwd(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save(ctx, inputs[:10], inputs[10:], output)

    @staticmethod
    def backward(ctx, do, dht, dsaved):
        return _pullback(ctx, do, dht, dsaved, _FuncBackward.apply)

    @staticmethod
    def jvp(ctx, *tangents):
        raise NotImplementedError("rewy: forward-mode AD (torch.func.jvp, jacfwd) is not supported; "
                                  "reverse mode (torch.func.grad, vjp, jacrev) is")


func_apply = _FuncFunction.apply


def _fake_sizes(cfg):
    status, n = sizes(cfg)
    if status != _lib.OK:
        # the library's validation names the field; it checks the config before any pointer
        buf = ctypes.create_string_buffer(512)
        p = _lib.fwd_params(bytes(cfg), *[0] * 14)
        if _lib.lib().rewy_validate_fwd(byref(p), buf, len(buf)) == status:
            raise _lib.error(status, buf.value.decode())
        raise _lib.error(status, "size query failed for op=%d B=%d T=%d H=%d HV=%d K=%d V=%d chunk_size=%d"
                         % (cfg.op, cfg.B, cfg.T, cfg.H, cfg.HV, cfg.K, cfg.V, cfg.chunk_size))
    return n


@chunk_fwd.register_fake
def _(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, op, scale, chunk_size, policy, bwd_algo,
      state_v_first, output_final_state):
    cfg = config(op, q, v, cu_seqlens, None, scale, chunk_size, policy, bwd_algo, state_v_first, real=False)
    o = q.new_empty(v.shape)
    ht = q.new_empty(state_shape(q, v, cu_seqlens, state_v_first) if output_final_state else (0,),
                     dtype=state_dtype(q.dtype))
    return o, ht, q.new_empty(_fake_sizes(cfg)[0], dtype=torch.uint8)


@chunk_bwd.register_fake
def _(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht, op, scale, chunk_size, policy,
      bwd_algo, state_v_first):
    return tuple(q.new_empty(0) if t is None else _grad_buffer(t) for t in (q, k, v, g, beta, b, w, h0))


def eager(plan, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, output_final_state):
    """The core op outside torch.compile and torch.func transforms, on real tensors and a plan from
    _plan for them (rewy.ops checked them): (o, the final state or None unless output_final_state)."""
    # (the inputs that may need gradients written out: a loop or any() costs more per call)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (g is not None and g.requires_grad)
                                    or (beta is not None and beta.requires_grad)
                                    or (b is not None and b.requires_grad) or (w is not None and w.requires_grad)
                                    or (h0 is not None and h0.requires_grad)):
        o, ht, _ = _function_apply(q, k, v, g, beta, b, w, h0, (plan, cu_seqlens, cu_seqlens_cpu,
                                                                output_final_state))
    else:
        o, ht, _ = _forward(plan, torch.empty_like(v), q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu,
                            output_final_state, False)
    return o, ht
