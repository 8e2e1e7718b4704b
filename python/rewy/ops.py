"""FLA-compatible chunk functions: chunk_delta_rule, chunk_gated_delta_rule, chunk_kda, chunk_gdn2.

Each public function only names its operator's gates (rewy.h's table, MATH §1):

    operator                 g (natural log, per token)   b (erase)   w (write)
    chunk_delta_rule         none                         β           β
    chunk_gated_delta_rule   [B,T,HV] scalar per head      β           β
    chunk_kda                [B,T,HV,K]                    β           β
    chunk_gdn2               [B,T,HV,K]                    b [..,K]    w [..,V]

and hands everything to `_delta_rule`, which checks the arguments, applies FLA's input
transforms as plain differentiable torch code (l2norm, gate activation, beta sigmoid), and
calls the core op (rewy._core), whose backward is the library's. Gradients therefore follow
FLA's conventions: dg w.r.t. the per-token natural-log gate as passed (or its raw input with
use_gate_in_kernel), dβ w.r.t. β as passed (or its logits), dq/dk w.r.t. the pre-l2norm q/k.

scale is FLA's: None means K^-1/2, any other value is used as given, 0 included (o = 0 then).
cu_seqlens may be int32 or int64; int64 offsets beyond int32 are an error (librewy reads int32).
Meta tensors give outputs (and gradients) of the right shapes; torch.func.grad and vmap work.

rewy-only keyword arguments, accepted by all four functions:
    backward="rewy" | "wy"     which pullback of M R = Z − E S the backward runs (MATH §4b / §4a)
    disable_recompute=bool     policy A (True: save chunk states) or R (False, default), MATH §8
    chunk_size=16 | 32 | 64    (FLA's option, extended to every operator)
    state_v_first=bool         states [N,HV,V,K] instead of [N,HV,K,V]
"""
import torch
import torch.nn.functional as F

from . import _core, _lib
from ._core import DTYPES, state_shape

_BACKWARD = {"rewy": _lib.BWD_REWY, "wy": _lib.BWD_WY}


# ------------------------------------------------------------------------------------------
# FLA's input transforms, in torch (autograd gives their backward)

def _at_least_fp32(t):
    """t in fp32, or fp64 where it is fp64: FLA's transforms compute in fp32, and fp64 inputs keep
    their precision (the fp64 backend and gradcheck)."""
    return t if t.dtype == torch.float64 else t.float()


def l2norm(x, eps=1e-6):
    """x / sqrt(Σ x² + eps) over the last dimension, computed in fp32 (FLA's l2norm_fwd; fp64 in fp64).

    One library pass forward and one backward (rewy_l2norm_forward / _backward, _L2Norm), where FLA
    fuses this into its kernels; the plain torch code below (l2norm_reference) under torch.compile,
    torch.func transforms and for meta tensors."""
    if (x.dtype in DTYPES and x.dim() > 0 and x.shape[-1] > 0 and not x.is_meta and x.device.type in ("cpu", "cuda")
            and not torch.compiler.is_compiling() and not _core.transforms_active()
            and not (x.is_cuda and x.dtype == torch.float64)):
        return _L2Norm.apply(x, eps)
    return l2norm_reference(x, eps)


def l2norm_reference(x, eps=1e-6):
    """l2norm in plain differentiable torch code (six kernels forward and their autograd backward)."""
    x32 = _at_least_fp32(x)
    return (x32 * torch.rsqrt((x32 * x32).sum(-1, keepdim=True) + eps)).to(x.dtype)


class _L2Norm(torch.autograd.Function):
    """l2norm through the library. It saves its output y and the row scales r, not x: the core op
    that follows saves y anyway (the same tensor), so q and k are kept once, as FLA keeps them.
    dx = r·(dy − y·(y·dy)) (rewy.h)."""

    @staticmethod
    def forward(ctx, x, eps):
        x = x.contiguous()
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[:-1], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32,
                           device=x.device)
        _core.l2norm(x, rstd, None, y, float(eps))
        ctx.save_for_backward(y, rstd)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        y, rstd = ctx.saved_tensors
        dx = torch.empty_like(y)
        _core.l2norm(y, rstd, dy.contiguous(), dx, 0.0)
        return dx, None


def gate(g, A_log=None, dt_bias=None, lower_bound=None):
    """FLA's in-kernel gate; g is [B,T,HV] (GDN, dt_bias [HV]) or [B,T,HV,K] (KDA/GDN2, dt_bias [HV*K]).

        g' = −exp(A_log) · softplus(g + dt_bias)               (softplus threshold 20)
        g' = lower_bound · σ(exp(A_log) · (g + dt_bias))       with lower_bound
        g' = lower_bound · σ(g + dt_bias)                      with lower_bound and no A_log
    """
    HV = g.shape[2]
    per_head = (HV,) + (1,) * (g.dim() - 3)   # A_log broadcasts over K
    x = _at_least_fp32(g)   # (fp32 as FLA; fp64 for fp64 gates)
    if dt_bias is not None:
        x = x + dt_bias.to(x.dtype).view(g.shape[2:])
    if lower_bound is not None:
        if A_log is not None:
            x = A_log.to(x.dtype).exp().view(per_head) * x
        return lower_bound * torch.sigmoid(x)
    return -A_log.to(x.dtype).exp().view(per_head) * F.softplus(x)


class _Gate(torch.autograd.Function):
    """gate() without lower_bound, through the library (rewy_gate_forward / _backward): one pass each way,
    from the raw g, which it keeps (no fp32 copy of the [B,T,HV,K] gate). In PyTorch the same gate took
    about twenty elementwise and reduction passes over fp32 copies (1.1 ms a layer call in FLA's 0.55B
    KDA model, B = 4, T = 4096, H200). prep: g as [rows, HV, K], A_log and dt_bias in fp32 (_gate_fused)."""

    @staticmethod
    def forward(ctx, g, A_log, dt_bias, prep):
        g3, A, bias = prep
        ctx.save_for_backward(g3, A, bias)
        # the shapes and dtypes of their gradients (A_log [HV]; dt_bias [HV] or [HV·K], any view of it)
        ctx.like = [(t.shape, t.dtype) for t in (A_log, dt_bias) if t is not None]
        return _core.gate(g3, A, bias).view(g.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        g3, A, bias = ctx.saved_tensors
        dg, dA, ddt = _core.gate(g3, A, bias, dy.float().contiguous().view(g3.shape))
        (a_shape, a_dtype), *bias_like = ctx.like
        return (dg.view(dy.shape), dA.view(a_shape).to(a_dtype),
                None if ddt is None else ddt.view(bias_like[0][0]).to(bias_like[0][1]), None)


def _gate_fused(g, A_log, dt_bias, lower_bound):
    """gate() for eager calls: (the gate, a function that forms it again or None). Through the library
    where it applies (the softplus form with A_log, g in fp32/bf16/fp16 on a backend the library has;
    _Gate), else gate() itself (no recompute). torch.compile and torch.func take gate()."""
    if (lower_bound is not None or A_log is None or g.dtype not in (torch.float32, torch.bfloat16, torch.float16)
            or g.device.type not in ("cpu", "cuda") or g.numel() == 0):
        return gate(g, A_log, dt_bias, lower_bound), None
    g3 = g.detach().contiguous().view(-1, g.shape[2], g.shape[3] if g.dim() > 3 else 1)
    A = A_log.detach().float().contiguous()
    bias = None if dt_bias is None else dt_bias.detach().float().contiguous()
    return _Gate.apply(g, A_log, dt_bias, (g3, A, bias)), lambda: _core.gate(g3, A, bias).view(g.shape)


def _saved_as_recompute(y, recompute):
    """For the core op's call: where it saves the gate y (the tensor _Gate returned), keep a marker and form
    y again (recompute()) when the backward unpacks it. The raw g that recompute() reads is kept by _Gate
    anyway, so a [B,T,HV,K] KDA or GDN2 layer keeps no fp32 gate between its forward and backward (134 MB
    a layer call at (4,4096,16)), for one more gate pass (0.12 ms there) in its backward. If g is changed
    in place in between, _Gate's own backward reports it, as autograd does."""
    marker = object()

    def pack(t):
        return marker if t.data_ptr() == y.data_ptr() and t.shape == y.shape and t.dtype == y.dtype else t

    def unpack(x):
        return recompute() if x is marker else x
    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def beta_activation(beta, allow_neg_eigval):
    """σ(β), or 2σ(β) so that the eigenvalues 1 − β of the transition may be negative."""
    return torch.sigmoid(_at_least_fp32(beta)).mul(2.0 if allow_neg_eigval else 1.0).to(beta.dtype)


# ------------------------------------------------------------------------------------------
# argument checks (the library checks values given a config; shapes and devices are ours)

def _check_arg(name, n, t, q, device, shape, kind):
    """One argument n = t (not None) of a call on q: type, device, dtype (kind "qkv": q's;
    "float"; "int": 1-D int32/int64 [N+1]) and, where shape is given, shape."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {n} must be a torch.Tensor (got {type(t).__name__})")
    if n == "cu_seqlens_cpu":
        if t.device.type != "cpu":
            raise TypeError(f"{name}: cu_seqlens_cpu must be a CPU tensor (got {t.device})")
    elif t.device != device:
        raise TypeError(f"{name}: all tensors must be on one device, but q is on {device} and {n} is on {t.device}")
    if kind == "qkv":
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: q, k and v must have one dtype (q is {q.dtype}, {n} is {t.dtype})")
    elif kind == "float":
        if not t.is_floating_point():
            raise TypeError(f"{name}: {n} must be a floating-point tensor (got {t.dtype})")
    elif t.dtype not in (torch.int32, torch.int64) or t.dim() != 1 or t.shape[0] < 2:
        raise (ValueError if t.dtype in (torch.int32, torch.int64) else TypeError)(
            f"{name}: {n} must be a 1-D int32 or int64 tensor [N+1] (got {t.dtype} {list(t.shape)})")
    if shape is not None and t.shape != shape:
        raise ValueError(f"{name}: {n} must have shape {list(shape)} (got {list(t.shape)})")


def _check_tensors(name, q, k, v, g, beta, b, w, initial_state, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu,
                   op, state_v_first):
    for n, t in (("q", q), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise (ValueError if isinstance(t, torch.Tensor) else TypeError)(
                f"{name}: {n} must be a 4-D tensor [B, T, {'H, K' if n == 'q' else 'HV, V'}] "
                f"(got {list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__})")
    B, T, H, K = q.shape
    Bv, Tv, HV, V = v.shape
    if Bv != B or Tv != T:
        raise ValueError(f"{name}: v must be [B, T, HV, V] = [{B}, {T}, HV, V] (got {list(v.shape)})")
    dtype, device = q.dtype, q.device
    if dtype not in DTYPES:
        raise TypeError(f"{name}: q must be float32, bfloat16, float16 or float64 (got {q.dtype})")
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name}: cu_seqlens must be a torch.Tensor (got {type(cu_seqlens).__name__})")
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"{name}: the batch size is expected to be 1 rather than {B} when using "
                         f"`cu_seqlens`; flatten variable-length inputs before processing")
    # each present argument in turn: name, tensor, expected shape or None, what its dtype must be
    # (one call per present argument: no table of the absent ones is built per call)
    _check_arg(name, "k", k, q, device, (B, T, H, K), "qkv")
    _check_arg(name, "v", v, q, device, None, "qkv")
    if g is not None:
        _check_arg(name, "g", g, q, device, (B, T, HV) if op == _lib.OP_GDN else (B, T, HV, K), "float")
    if beta is not None:
        _check_arg(name, "beta", beta, q, device, (B, T, HV), "float")
    if b is not None:
        _check_arg(name, "b", b, q, device, (B, T, HV, K), "float")
    if w is not None:
        _check_arg(name, "w", w, q, device, (B, T, HV, V), "float")
    for n, t, kind in (("initial_state", initial_state, "float"), ("A_log", A_log, "float"),
                       ("dt_bias", dt_bias, "float"), ("cu_seqlens", cu_seqlens, "int"),
                       ("cu_seqlens_cpu", cu_seqlens_cpu, "int")):
        if t is not None:
            _check_arg(name, n, t, q, device,
                       state_shape(q, v, cu_seqlens, state_v_first) if n == "initial_state" else None, kind)
    if cu_seqlens_cpu is not None and (cu_seqlens is None or cu_seqlens_cpu.shape != cu_seqlens.shape):
        raise ValueError(f"{name}: cu_seqlens_cpu must be a host copy of cu_seqlens "
                         f"(shape {list(cu_seqlens_cpu.shape)}, cu_seqlens {cu_seqlens if cu_seqlens is None else list(cu_seqlens.shape)})")
    if A_log is not None and A_log.numel() != HV:
        raise ValueError(f"{name}: A_log must have HV = {HV} elements (got shape {list(A_log.shape)})")
    n_bias = HV if op == _lib.OP_GDN else HV * K
    if dt_bias is not None and dt_bias.numel() != n_bias:
        raise ValueError(f"{name}: dt_bias must have {n_bias} elements "
                         f"({'HV' if op == _lib.OP_GDN else 'HV*K'}; got shape {list(dt_bias.shape)})")


def _check_options(name, use_gate_in_kernel, A_log, dt_bias, lower_bound, safe_gate,
                   use_beta_sigmoid_in_kernel, allow_neg_eigval, backward):
    if backward not in _BACKWARD:
        raise ValueError(f"{name}: backward must be 'rewy' or 'wy' (got {backward!r})")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError(f"{name}: `allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`")
    if use_gate_in_kernel:
        if A_log is None and lower_bound is None:
            raise ValueError(f"{name}: `A_log` must be provided when `use_gate_in_kernel=True` "
                             f"(and `lower_bound` is not set)")
        if safe_gate and lower_bound is None:
            raise ValueError(f"{name}: `lower_bound` must be specified when `safe_gate=True` and "
                             f"`use_gate_in_kernel=True`")
        if safe_gate and not -5 <= lower_bound < 0:
            raise ValueError(f"{name}: `lower_bound` must be in the safe range [-5, 0), got {lower_bound}")
    else:
        for n, x in (("A_log", A_log), ("dt_bias", dt_bias), ("lower_bound", lower_bound)):
            if x is not None:
                raise ValueError(f"{name}: `{n}` only applies with `use_gate_in_kernel=True` "
                                 f"(rewy does not ignore it silently)")


def _rewy_kwargs(name, kwargs, state_v_first, disable_recompute, fla_kwargs=()):
    """Pop the keyword-only options of **kwargs; anything left over is an error, never ignored."""
    opts = dict(chunk_size=64, backward="rewy", state_v_first=state_v_first, disable_recompute=disable_recompute)
    for n in fla_kwargs:
        opts[n] = None
    if not kwargs:   # the common call: every option at its default
        return opts
    if "head_first" in kwargs:
        raise ValueError(f"{name}: head_first has been removed (as in FLA); inputs are [B, T, H, ...]")
    if "transpose_state_layout" in kwargs:   # FLA's deprecated name of state_v_first
        if state_v_first:
            raise ValueError(f"{name}: cannot pass both `state_v_first` and `transpose_state_layout`")
        opts["state_v_first"] = kwargs.pop("transpose_state_layout")
    for n in opts:
        opts[n] = kwargs.pop(n, opts[n])
    if kwargs:
        raise TypeError(f"{name}() got unexpected keyword argument(s) {', '.join(map(repr, kwargs))}; "
                        f"rewy accepts FLA's options and backward=, disable_recompute=, chunk_size=, "
                        f"state_v_first=")
    return opts


def _unsupported(name, **options):
    for n, (value, why) in options.items():
        if value:
            raise NotImplementedError(f"{name}: `{n}` is not supported by rewy ({why})")


# ------------------------------------------------------------------------------------------
# the one generic function behind the four operators

def _to(t, dtype):
    """t.to(dtype).contiguous(), skipping the .to() call where it changes nothing (it costs a dispatch)."""
    if t is None:
        return None
    if t.dtype != dtype:
        t = t.to(dtype)
    return t.contiguous()


# The eager path's per-call checks and plan in one dictionary lookup (issue 5: a layer calls this once
# per step): a call whose arguments have the signature of one seen before (each tensor's type, shape,
# dtype and device, and the options the checks and the plan read) passed _check_tensors then, and
# gets that call's plan (_core._plan) without building it again. Anything else, including an
# argument without those attributes, takes the full checks, whose messages say what is wrong.
_CALLS = {}   # call signature -> _core plan; bounded like _core's caches


def _sig(t):
    return type(t), t.shape, t.dtype, t.device


def _lookup(op, q, k, v, g, beta, b, w, initial_state, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu,
            scale, chunk_size, disable_recompute, state_v_first, backward):
    """(signature, plan or None) of a call; (None, None) where no signature can be formed (an
    argument that is not a tensor, an unhashable or non-number option: the full checks report
    those, and a tensor scale is kept out of the cache)."""
    if scale is not None and type(scale) is not float and type(scale) is not int:
        return None, None
    try:
        key = (op, scale, chunk_size, disable_recompute, state_v_first, backward, torch.get_num_threads(),
               type(q), q.shape, q.dtype, q.device, type(k), k.shape, k.dtype, k.device,
               type(v), v.shape, v.dtype, v.device,
               # (False for an absent argument: no call of _sig)
               g is not None and _sig(g), beta is not None and _sig(beta), b is not None and _sig(b),
               w is not None and _sig(w), initial_state is not None and _sig(initial_state),
               A_log is not None and _sig(A_log), dt_bias is not None and _sig(dt_bias),
               cu_seqlens is not None and _sig(cu_seqlens), cu_seqlens_cpu is not None and _sig(cu_seqlens_cpu))
        return key, _CALLS.get(key)
    except (AttributeError, TypeError):
        return None, None


def _scale(K, scale):
    """The query scale: FLA's K^-1/2 where scale is None, else the value as given, 0 included (the C
    API's scale = 0 means K^-1/2; rewy._core runs a Python 0 as an exact 0). K = 0 gets 1 here, for
    the library's validation to report K instead of a ZeroDivisionError."""
    if scale is None:
        return K ** -0.5 if K > 0 else 1.0
    return float(scale)


def _delta_rule(name, op, q, k, v, g=None, beta=None, b=None, w=None, *, scale=None, initial_state=None,
                output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                A_log=None, dt_bias=None, lower_bound=None, safe_gate=False, use_beta_sigmoid_in_kernel=False,
                allow_neg_eigval=False, cu_seqlens=None, cu_seqlens_cpu=None, disable_recompute=False,
                state_v_first=False, kwargs=None, fla_kwargs=()):
    """The four operators' common body. kwargs: the public function's **kwargs, FLA's options among
    them named by fla_kwargs (passed on as a dict: expanding options into keywords costs per call)."""
    chunk_size, backward = 64, "rewy"
    if kwargs:   # options given as keywords beyond the public signature (the common call has none)
        opts = _rewy_kwargs(name, kwargs, state_v_first, disable_recompute, fla_kwargs)
        chunk_size, backward = opts["chunk_size"], opts["backward"]
        state_v_first, disable_recompute = opts["state_v_first"], opts["disable_recompute"]
        use_gate_in_kernel = bool(opts.get("use_gate_in_kernel", use_gate_in_kernel))
        A_log, dt_bias = opts.get("A_log"), opts.get("dt_bias")
    # The custom ops (torch.ops.rewy) run the call under torch.compile (the checks run every time:
    # they are traced once, and shapes may be symbolic), under torch.func transforms (whose wrapped
    # tensors have no data pointer: _core._FuncFunction, with vmap rules) and on meta tensors (no
    # data: the ops' fake implementation gives the outputs). Everything else runs eagerly.
    compiling = torch.compiler.is_compiling()
    via_ops = compiling or _core.transforms_active()
    key, plan = (None, None) if via_ops else _lookup(
        op, q, k, v, g, beta, b, w, initial_state, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu, scale, chunk_size,
        disable_recompute, state_v_first, backward)
    if plan is None:
        _check_tensors(name, q, k, v, g, beta, b, w, initial_state, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu,
                       op, state_v_first)
        via_ops = via_ops or q.is_meta   # (a plan found is never a meta call's: those are not remembered)
    _check_options(name, use_gate_in_kernel, A_log, dt_bias, lower_bound, safe_gate,
                   use_beta_sigmoid_in_kernel, allow_neg_eigval, backward)

    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    fp64 = q.dtype == torch.float64
    if fp64:
        # rewy_config.scale is a C float: an fp64 call scales q here, in fp64 (o = Sᵀ(scale·q)), and
        # runs the library with scale 1, so that K^-1/2 is not rounded to fp32
        q, scale = q * _scale(q.shape[-1], scale), 1.0
    state_dtype = torch.float64 if fp64 else torch.float32   # of gates and states (rewy.h)
    regate = None   # with the gate in the call: a function that forms it again (_saved_as_recompute)
    if g is not None:
        if use_gate_in_kernel:
            g, regate = (gate(g, A_log, dt_bias, lower_bound), None) if via_ops else \
                _gate_fused(g, A_log, dt_bias, lower_bound)
        g = _to(g, state_dtype)
    if beta is not None:
        if use_beta_sigmoid_in_kernel:
            beta = beta_activation(beta, allow_neg_eigval)
        beta = _to(beta, q.dtype)
    if b is not None:
        b = _to(b, q.dtype)
    if w is not None:
        w = _to(w, q.dtype)
    h0 = _to(initial_state, state_dtype)
    if cu_seqlens is not None:
        if not via_ops:   # int32, range-checked (int64 offsets beyond int32 are an error, not wrapped)
            cu_seqlens, cu_seqlens_cpu = _core.seqlens_int32(name + ": ", cu_seqlens, cu_seqlens_cpu, q.is_cuda)
        elif q.is_cuda and cu_seqlens_cpu is None:
            # the custom ops convert and check the offsets where they hold values; the CUDA backend plans
            # from a host copy (traced as a copy under torch.compile; eagerly, without one, this syncs)
            cu_seqlens_cpu = cu_seqlens.cpu()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()

    if plan is None:
        options = (_scale(q.shape[-1], scale), int(chunk_size),
                   _lib.POLICY_A if disable_recompute else _lib.POLICY_R, _BACKWARD[backward], bool(state_v_first))
        if via_ops:
            o, ht, _ = (torch.ops.rewy.chunk_fwd if compiling else _core.func_apply)(
                q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, op, *options, bool(output_final_state))
            return o, (ht if output_final_state else None)
        plan = _core._plan(op, q, v, cu_seqlens, *options)
        if plan[1] is not None and key is not None:   # (a failed size query is reported by the call)
            _core._remember(_CALLS, key, plan)
    if regate is not None and g.dim() == 4 and torch.is_grad_enabled():   # KDA, GDN2: their gate is [B,T,HV,K]
        with _saved_as_recompute(g, regate):
            return _core.eager(plan, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, bool(output_final_state))
    return _core.eager(plan, q, k, v, g, beta, b, w, h0, cu_seqlens, cu_seqlens_cpu, bool(output_final_state))


# ------------------------------------------------------------------------------------------
# FLA's four entry points: names, argument order and defaults as in fla.ops

def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """DeltaNet: S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,  o_t = S_tᵀ (scale q_t).

    q, k [B,T,H,K]; v [B,T,HV,V]; beta [B,T,HV]. Returns (o [B,T,HV,V] in q.dtype, final state
    [N,HV,K,V] fp32 (fp64 for float64 inputs, CPU only) or None). As fla.ops.delta_rule.chunk_delta_rule,
    plus rewy's keywords.
    """
    name = "chunk_delta_rule"
    return _delta_rule(name, _lib.OP_DELTANET, q, k, v, beta=beta, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                       cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, kwargs=kwargs)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None, **kwargs):
    """Gated DeltaNet: the delta rule with a scalar decay exp(g_t) per head, g [B,T,HV].

    kwargs as FLA: use_gate_in_kernel, A_log [HV], dt_bias [HV], chunk_size; plus rewy's keywords.
    chunk_indices is FLA's cached chunk table, derived from cu_seqlens; rewy derives its own.
    """
    name = "chunk_gated_delta_rule"
    if cp_context is not None:
        _unsupported(name, cp_context=(True, "context parallelism"))
    return _delta_rule(name, _lib.OP_GDN, q, k, v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                       use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                       cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, state_v_first=state_v_first,
                       kwargs=kwargs, fla_kwargs=("use_gate_in_kernel", "A_log", "dt_bias"))


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False,
              return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, **kwargs):
    """Kimi Delta Attention: per-channel decay Diag(exp g_t), g [B,T,HV,K].

    kwargs as FLA: A_log [HV], dt_bias [HV*K], chunk_size; plus rewy's keywords. safe_gate only
    selects FLA kernels for bounded gates; rewy's matrix intra is safe for any gate (MATH §6),
    so it changes nothing here beyond FLA's lower_bound check.
    """
    name = "chunk_kda"
    if cp_context is not None or return_intermediate_states:
        _unsupported(name, cp_context=(cp_context is not None, "context parallelism"),
                     return_intermediate_states=(return_intermediate_states, "chunk states are not returned"))
    return _delta_rule(name, _lib.OP_KDA, q, k, v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                       use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound, safe_gate=safe_gate,
                       use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                       cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, disable_recompute=disable_recompute,
                       state_v_first=state_v_first, kwargs=kwargs, fla_kwargs=("A_log", "dt_bias"))


def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None,
               safe_gate=False, lower_bound=None, disable_recompute=False, return_intermediate_states=False,
               state_v_first=False, **kwargs):
    """GDN2: per-channel decay g [B,T,HV,K], erase gate b [B,T,HV,K], write gate w [B,T,HV,V]:
    S_t = (I − k_t (b_t⊙k_t)ᵀ) Diag(e^{g_t}) S_{t−1} + k_t (w_t⊙v_t)ᵀ.

    kwargs as FLA: A_log [HV], dt_bias [HV*K], chunk_size (rewy also takes 16 and 32); plus rewy's keywords.
    """
    name = "chunk_gdn2"
    if return_intermediate_states:
        _unsupported(name, return_intermediate_states=(True, "chunk states are not returned"))
    return _delta_rule(name, _lib.OP_GDN2, q, k, v, g=g, b=b, w=w, scale=scale, initial_state=initial_state,
                       output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                       use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound, safe_gate=safe_gate,
                       cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, disable_recompute=disable_recompute,
                       state_v_first=state_v_first, kwargs=kwargs, fla_kwargs=("A_log", "dt_bias"))


chunk_gdn = chunk_gated_delta_rule
