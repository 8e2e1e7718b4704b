"""The core op: one delta-rule chunk forward and backward through librewy.

This is MATH §1 for all four operators at once; the operator only decides which of the
gates g, beta, b, w are present (rewy.h's table). Everything FLA does around the kernels
(l2norm, gate activation, beta sigmoid) is plain differentiable torch code in rewy.ops.

Both directions are torch.library custom ops (rewy::chunk_fwd, rewy::chunk_bwd) with fake
implementations and an autograd formula, so they trace under torch.compile. The forward
returns the library's `saved` buffer (a uint8 tensor) for the backward. Nothing here syncs
with a device: sizes come from shapes, and varlen plans use a host copy of cu_seqlens.
"""
from ctypes import addressof, byref, c_int32
from typing import Optional

import torch
from torch import Tensor

from . import _lib
from ._lib import BwdParams, Config, FwdParams

DTYPES = {torch.float32: _lib.F32, torch.bfloat16: _lib.BF16, torch.float16: _lib.F16}


def _ptr(t):
    return None if t is None else t.data_ptr()


def config(op, q, v, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, policy, bwd_algo, state_v_first,
           stream=False):
    """rewy_config from the tensors' shapes; stream=True asks for the current CUDA stream."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    cuda = q.device.type == "cuda"
    cfg = Config(op=op, backend=_lib.BACKEND_CUDA if cuda else _lib.BACKEND_CPU, dtype=DTYPES[q.dtype],
                 B=B, T=T, H=H, HV=HV, K=K, V=V, chunk_size=chunk_size, scale=scale,
                 policy=policy, bwd_algo=bwd_algo, state_v_first=int(state_v_first))
    if cu_seqlens is not None:
        cfg.num_seqs = cu_seqlens.shape[0] - 1
        cfg.cu_seqlens = _ptr(cu_seqlens)
        cfg.cu_seqlens_host = _ptr(cu_seqlens_cpu)
    if stream and cuda:
        cfg.stream = torch.cuda.current_stream(q.device).cuda_stream
    return cfg


def num_states(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


def state_shape(q, v, cu_seqlens, state_v_first):
    K, HV, V = q.shape[3], v.shape[2], v.shape[3]
    return (num_states(q, cu_seqlens), HV) + ((V, K) if state_v_first else (K, V))


def saved_bytes(cfg):
    """rewy_saved_size for the worst case of the config's shape.

    With varlen the size may depend on how T splits into sequences, which fake tensors
    (torch.compile) cannot read. Sizing for the split with the most chunks, N-1 one-token
    sequences and one long one (Σ⌈l_i/BT⌉ ≤ N + ⌊(T-N)/BT⌋), gives fake and real calls the
    same shape and is always large enough.
    """
    if cfg.num_seqs <= 0 or cfg.cu_seqlens is None:
        return _lib.size_query(_lib.lib().rewy_saved_size, cfg)
    N, T = cfg.num_seqs, cfg.T
    worst = (c_int32 * (N + 1))(*(list(range(N)) + [T]))
    probe = Config.from_buffer_copy(cfg)
    probe.cu_seqlens = probe.cu_seqlens_host = addressof(worst)
    return _lib.size_query(_lib.lib().rewy_saved_size, probe)


def _fake_size(cfg, what, status, n):
    if status != _lib.OK:
        raise _lib.error(status, "%s size query failed for op=%d B=%d T=%d H=%d HV=%d K=%d V=%d chunk_size=%d"
                         % (what, cfg.op, cfg.B, cfg.T, cfg.H, cfg.HV, cfg.K, cfg.V, cfg.chunk_size))
    return n


# ------------------------------------------------------------------------------------------
# forward

@torch.library.custom_op("rewy::chunk_fwd", mutates_args=())
def chunk_fwd(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
              b: Optional[Tensor], w: Optional[Tensor], h0: Optional[Tensor],
              cu_seqlens: Optional[Tensor], cu_seqlens_cpu: Optional[Tensor],
              op: int, scale: float, chunk_size: int, policy: int, bwd_algo: int,
              state_v_first: bool, output_final_state: bool) -> tuple[Tensor, Tensor, Tensor]:
    """o, final state (empty unless output_final_state) and the saved buffer."""
    L = _lib.lib()
    cfg = config(op, q, v, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, policy, bwd_algo, state_v_first,
                 stream=True)
    o = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    ht = (torch.empty(state_shape(q, v, cu_seqlens, state_v_first), dtype=torch.float32, device=q.device)
          if output_final_state else q.new_empty(0, dtype=torch.float32))
    p = FwdParams(cfg=cfg, q=_ptr(q), k=_ptr(k), v=_ptr(v), g=_ptr(g), beta=_ptr(beta), b=_ptr(b), w=_ptr(w),
                  h0=_ptr(h0), o=_ptr(o), ht=_ptr(ht) if output_final_state else None)
    status, n_saved = saved_bytes(cfg)
    _lib.check(status, p, L.rewy_validate_fwd)
    status, n_ws = _lib.size_query(L.rewy_fwd_workspace_size, cfg)
    _lib.check(status, p, L.rewy_validate_fwd)
    saved = torch.empty(n_saved, dtype=torch.uint8, device=q.device)
    ws = torch.empty(max(n_ws, 16), dtype=torch.uint8, device=q.device)
    p.saved, p.saved_bytes, p.workspace, p.workspace_bytes = _ptr(saved), n_saved, _ptr(ws), n_ws
    _lib.check(L.rewy_forward(byref(p)), p, L.rewy_validate_fwd)
    return o, ht, saved


@chunk_fwd.register_fake
def _(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, op, scale, chunk_size, policy, bwd_algo,
      state_v_first, output_final_state):
    cfg = config(op, q, v, cu_seqlens, None, scale, chunk_size, policy, bwd_algo, state_v_first)
    n_saved = _fake_size(cfg, "saved", *saved_bytes(cfg))
    o = q.new_empty(v.shape)
    ht = q.new_empty(state_shape(q, v, cu_seqlens, state_v_first) if output_final_state else (0,),
                     dtype=torch.float32)
    return o, ht, q.new_empty(n_saved, dtype=torch.uint8)


# ------------------------------------------------------------------------------------------
# backward

def _like(t, ref=None):
    """Gradient buffer shaped like t, or an empty placeholder where the input is None."""
    if t is None:
        return ref.new_empty(0)
    return torch.empty_like(t, memory_format=torch.contiguous_format)


@torch.library.custom_op("rewy::chunk_bwd", mutates_args=())
def chunk_bwd(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
              b: Optional[Tensor], w: Optional[Tensor], h0: Optional[Tensor],
              cu_seqlens: Optional[Tensor], cu_seqlens_cpu: Optional[Tensor], saved: Tensor,
              do: Tensor, dht: Optional[Tensor],
              op: int, scale: float, chunk_size: int, policy: int, bwd_algo: int,
              state_v_first: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv, dg, dbeta, db, dw, dh0; an empty tensor stands for an absent input's gradient."""
    L = _lib.lib()
    cfg = config(op, q, v, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, policy, bwd_algo, state_v_first,
                 stream=True)
    grads = dq, dk, dv, dg, dbeta, db, dw, dh0 = [_like(t, q) for t in (q, k, v, g, beta, b, w, h0)]
    p = BwdParams(cfg=cfg, q=_ptr(q), k=_ptr(k), v=_ptr(v), g=_ptr(g), beta=_ptr(beta), b=_ptr(b), w=_ptr(w),
                  h0=_ptr(h0), saved=_ptr(saved), saved_bytes=saved.numel(), do_=_ptr(do), dht=_ptr(dht),
                  dq=_ptr(dq), dk=_ptr(dk), dv=_ptr(dv), dg=_ptr(dg) if g is not None else None,
                  dbeta=_ptr(dbeta) if beta is not None else None, db=_ptr(db) if b is not None else None,
                  dw=_ptr(dw) if w is not None else None, dh0=_ptr(dh0) if h0 is not None else None)
    status, n_ws = _lib.size_query(L.rewy_bwd_workspace_size, cfg)
    _lib.check(status, p, L.rewy_validate_bwd)
    ws = torch.empty(max(n_ws, 16), dtype=torch.uint8, device=q.device)
    p.workspace, p.workspace_bytes = _ptr(ws), n_ws
    _lib.check(L.rewy_backward(byref(p)), p, L.rewy_validate_bwd)
    return tuple(grads)


@chunk_bwd.register_fake
def _(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved, do, dht, op, scale, chunk_size, policy,
      bwd_algo, state_v_first):
    return tuple(_like(t, q) for t in (q, k, v, g, beta, b, w, h0))


# ------------------------------------------------------------------------------------------
# autograd: the backward op is the pullback of the forward op

_TENSOR_INPUTS = 10  # q k v g beta b w h0 cu_seqlens cu_seqlens_cpu, then 7 non-tensor arguments


def _setup_context(ctx, inputs, output):
    *tensors, op, scale, chunk_size, policy, bwd_algo, state_v_first, output_final_state = inputs
    ctx.save_for_backward(*tensors, output[2])
    ctx.args = (op, scale, chunk_size, policy, bwd_algo, state_v_first)
    ctx.output_final_state = output_final_state
    ctx.mark_non_differentiable(output[2])


def _backward(ctx, do, dht, _dsaved):
    q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved = ctx.saved_tensors
    dht = dht.contiguous() if ctx.output_final_state and dht is not None else None
    grads = torch.ops.rewy.chunk_bwd(q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, saved,
                                     do.to(q.dtype).contiguous(), dht, *ctx.args)
    inputs = (q, k, v, g, beta, b, w, h0)
    grads = tuple(None if t is None else d for t, d in zip(inputs, grads))
    return grads + (None,) * (2 + 7)


chunk_fwd.register_autograd(_backward, setup_context=_setup_context)
