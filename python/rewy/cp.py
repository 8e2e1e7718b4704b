"""Context parallelism: sequences split over the ranks of a torch.distributed process group.

Each rank holds one contiguous segment of the tokens and runs rewy on it; the ranks exchange
per-head K×K and K×V summaries of their segments so that every output, final state and gradient
is the single-process one (docs/CP.md; the math is docs/MATH.md §11). Shaped like FLA's cp_context:

    import rewy.cp as cp
    ctx = cp.build_cp_context(cu_seqlens_global, group)       # varlen: B = 1, global offsets
    ctx = cp.build_cp_context(None, group)                     # or: every batch row split over the ranks
    o, ht = cp.chunk_gated_delta_rule(q, k, v, g, beta, cp_context=ctx, output_final_state=True)

q, k, v and the gates are the rank's own tokens. initial_state and the returned final states are
per local sequence ([N_local, HV, K, V], the rows of ctx.cu_seqlens_cpu, or of the batch): a sequence
begun on an earlier rank takes its start state from the exchange (its initial_state row is not
read and gets a zero gradient); a sequence going on past this rank returns its state at the
segment's end (a gradient given for it is exact, like any other).

How (MATH §11): a piece of a sequence maps its start state affinely, S_end = T S_start + X. T does
not depend on the values, so T is the final state of a run with v = 0 from h0 = I, and X is the
final state of a run from h0 = 0. The forward all-gathers (T, X) of the piece that leaves each rank,
folds them in rank order into each rank's start state and runs the rank's incoming piece from it.
The reverse pass is the transposed map, S̄_start = Tᵀ S̄_end + X̄, with X̄ = Σ_t q̃_t do_tᵀ: q̃_t =
T_{≤t}ᵀ q_t · scale is the output of the v = 0, h0 = I run, so X̄ costs one product, no extra
backward. The backward all-gathers X̄ (plus Tᵀ of the incoming piece's own final-state gradient),
folds from the last rank down into each rank's final-state gradient, and runs the local backward
with it. Only a sequence that crosses a rank boundary takes part; the others run as usual.

Use torch.distributed's collectives only (gloo on CPU tensors, NCCL on CUDA tensors). Every rank of
the group must make the same calls (forward and backward), with the same B, HV, K, V and dtypes.
"""
import bisect
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import ops

PER_TOKEN = ("g", "beta", "b", "w")   # the gate tensors sliced with the tokens


@dataclass(frozen=True, eq=False)   # (eq=False: tensor fields; a context is its own identity)
class CPContext:
    """A rank's place in the global token sequence (FLA's FLACPContext, plus what rewy needs).

    cu_seqlens / cu_seqlens_cpu are the rank-local offsets (as FLA's); None without varlen.
    carry_in: the first local sequence began on an earlier rank. carry_out: the last local
    sequence goes on to a later rank. bounds: the segments' global token offsets (world_size + 1)."""
    group: object
    rank: int
    world_size: int
    cu_seqlens: object = None
    cu_seqlens_cpu: object = None
    global_cu_seqlens: object = None
    bounds: tuple = None
    first_seq: int = 0
    carry_in: bool = False
    carry_out: bool = False
    conv1d_kernel_size: object = None   # FLA's field for its convolution; rewy's functions do not read it

    @property
    def num_seqs(self):
        return 0 if self.cu_seqlens_cpu is None else len(self.cu_seqlens_cpu) - 1

    @property
    def is_cp_enabled(self):
        return self.world_size > 1


def build_cp_context(cu_seqlens=None, group=None, conv1d_kernel_size=None, cu_seqlens_cpu=None, bounds=None):
    """The context of this rank in `group` (None: the default group).

    cu_seqlens: the global offsets [N+1] before the split (B = 1), or None: every row of a batch is
    one sequence split over the ranks, each rank holding any number of its tokens.
    bounds: the global token offsets of the ranks' segments [world_size + 1] (varlen only); None
    splits the tokens evenly, which needs the total divisible by world_size (as FLA)."""
    name = "build_cp_context"
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{name}: torch.distributed is not initialized (call init_process_group first)")
    if group is None:
        group = dist.group.WORLD
    R, r = dist.get_world_size(group), dist.get_rank(group)
    if r < 0:
        raise ValueError(f"{name}: this process is not a member of the group")
    if cu_seqlens is None:
        if bounds is not None or cu_seqlens_cpu is not None:
            raise ValueError(f"{name}: bounds and cu_seqlens_cpu need cu_seqlens (the global offsets)")
        return CPContext(group, r, R, carry_in=r > 0, carry_out=r < R - 1, conv1d_kernel_size=conv1d_kernel_size)
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name}: cu_seqlens must be a torch.Tensor (got {type(cu_seqlens).__name__})")
    host = cu_seqlens if cu_seqlens_cpu is None else cu_seqlens_cpu
    if host.dtype not in (torch.int32, torch.int64) or host.dim() != 1 or host.shape[0] < 2:
        raise ValueError(f"{name}: cu_seqlens must be a 1-D int32 or int64 tensor [N+1] "
                         f"(got {host.dtype} {list(host.shape)})")
    cu = [int(x) for x in host.cpu().tolist()]
    if cu[0] != 0 or any(b <= a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"{name}: cu_seqlens must start at 0 and increase strictly (got {cu[:8]}...)")
    local, first, carry_in, carry_out, bounds = segment_layout(cu, R, r, bounds)
    return CPContext(group, r, R, local.to(cu_seqlens.device), local, torch.tensor(cu), bounds, first,
                     carry_in=carry_in, carry_out=carry_out, conv1d_kernel_size=conv1d_kernel_size)


def segment_layout(cu, R, r, bounds=None):
    """Rank r's part of the global offsets cu (a list) split at bounds (None: evenly over R ranks):
    (local offsets int32 [N_local+1], global index of its first sequence, carry_in, carry_out, bounds)."""
    name = "build_cp_context"
    total = cu[-1]
    if bounds is None:
        if total % R:
            raise ValueError(f"{name}: the total number of tokens ({total}) must be divisible by the world "
                             f"size ({R}) for an even split (or pass bounds)")
        bounds = [total // R * i for i in range(R + 1)]
    bounds = tuple(int(x) for x in bounds)
    if len(bounds) != R + 1 or bounds[0] != 0 or bounds[-1] != total or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"{name}: bounds must be {R + 1} strictly increasing offsets from 0 to {total} "
                         f"(got {list(bounds)})")
    a, e = bounds[r], bounds[r + 1]
    first = bisect.bisect_right(cu, a) - 1   # the sequence holding token a
    last = bisect.bisect_left(cu, e) - 1     # the sequence holding token e − 1
    local = torch.tensor([0] + [c - a for c in cu[first + 1:last + 1]] + [e - a], dtype=torch.int32)
    return local, first, cu[first] < a, cu[last + 1] > e, bounds


def _all_gather(t, group):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return parts


class _Plan:
    """One call's fixed parts: the function, its non-tensor options, the context and the layout."""

    def __init__(self, fn, ctx, names, kwargs, v_first):
        self.fn, self.ctx, self.names, self.kwargs, self.v_first = fn, ctx, names, kwargs, v_first

    def kfirst(self, s):
        """A state in the user's layout as [.., K, V] (and back: the transpose is its own inverse)."""
        return s.transpose(-1, -2) if self.v_first else s

    def call(self, x, lo, hi, initial_state, cu=None, **replace):
        """fn on tokens [lo, hi) of the local inputs x (tensors by name), returning (o, final states)."""
        args = {n: (t[:, lo:hi] if n in PER_TOKEN or n in ("q", "k", "v") else t)
                for n, t in x.items() if n != "initial_state" and t is not None}
        args.update(replace)
        if cu is not None:   # varlen: device offsets and their host copy (no sync on CUDA)
            args["cu_seqlens"], args["cu_seqlens_cpu"] = cu.to(x["q"].device), cu
        return self.fn(**args, initial_state=initial_state, output_final_state=True, **self.kwargs)


class _ContextParallel(torch.autograd.Function):
    """The rank's segment: forward and backward with the exchanges (MATH §11)."""

    @staticmethod
    def forward(ctx, plan, *tensors):
        c = plan.ctx
        x = {n: (t.detach().requires_grad_(need) if t is not None else None)
             for n, t, need in zip(plan.names, tensors, ctx.needs_input_grad[1:])}
        q, v = x["q"], x["v"]
        B, T, HV, V, K = q.shape[0], q.shape[1], v.shape[2], v.shape[3], q.shape[3]
        sd = torch.float64 if q.dtype == torch.float64 else torch.float32   # the state dtype
        varlen = c.cu_seqlens_cpu is not None
        L0 = int(c.cu_seqlens_cpu[1]) if varlen else T    # the first local piece's tokens
        N0 = 1 if varlen else B                           # its states
        spanning = c.carry_in and c.carry_out and (not varlen or c.num_seqs == 1)
        grad = any(ctx.needs_input_grad[1:])   # (False under no_grad: the local calls then save nothing)

        # 1. The incoming piece's summaries, without grad: T and q̃ from v = 0, h0 = I; X from h0 = 0
        #    (X only where the piece also leaves the rank: otherwise nobody reads it).
        T_in = q_tilde = X_in = None
        if c.carry_in:
            with torch.no_grad():
                eye = torch.eye(K, dtype=sd, device=q.device).expand(N0, HV, K, K).contiguous()
                zeros = {"v": q.new_zeros(B, L0, HV, K)}
                if x.get("w") is not None:   # (GDN2's write gate scales v: any value does for v = 0)
                    zeros["w"] = x["w"].new_zeros(B, L0, HV, K)
                q_tilde, ht = plan.call(x, 0, L0, eye, **zeros)
                T_in = plan.kfirst(ht)
                if spanning:
                    X_in = plan.kfirst(plan.call(x, 0, L0, None)[1])

        # 2. The sequences that start on this rank need nobody: run them now, with grad.
        lo = L0 if c.carry_in else 0
        rest = None
        if lo < T:
            cu = (c.cu_seqlens_cpu[1:] - L0 if c.carry_in else c.cu_seqlens_cpu) if varlen else None
            with torch.set_grad_enabled(grad):   # (the slices too: they are on the graph)
                h0 = x["initial_state"]
                if h0 is not None and c.carry_in:
                    h0 = h0[1:]   # (the carried-in sequence's row is not read)
                rest = plan.call(x, lo, T, h0, cu)

        # 3. Forward exchange: rank i's leaving state is S_end(i) = T_i S_start(i) + X_i. T_i = 0
        #    where the leaving sequence started on rank i (X_i is then its final state), and (0, 0)
        #    where no sequence leaves rank i, which restarts the fold at zero.
        T_out = torch.zeros(N0, HV, K, K, dtype=sd, device=q.device)
        X_out = torch.zeros(N0, HV, K, V, dtype=sd, device=q.device)
        if c.carry_out:
            if spanning:
                T_out, X_out = T_in, X_in
            else:
                X_out = plan.kfirst(rest[1][-N0:]).detach().to(sd)
        Ts, Xs = [], []
        for part in _all_gather(torch.cat([T_out.reshape(-1), X_out.reshape(-1)]), c.group):
            Ts.append(part[:T_out.numel()].view(T_out.shape))
            Xs.append(part[T_out.numel():].view(X_out.shape))

        # 4. The incoming piece from its true start state S_start(r) = T_{r−1} S_start(r−1) + X_{r−1}.
        first = None
        if c.carry_in:
            S = torch.zeros_like(X_out)
            for i in range(c.rank):
                S = Ts[i] @ S + Xs[i]
            with torch.set_grad_enabled(grad):
                first = plan.call(x, 0, L0, plan.kfirst(S).contiguous())
        pieces = [p for p in (first, rest) if p is not None]
        o = torch.cat([p[0].detach() for p in pieces], dim=1)
        ht = torch.cat([p[1].detach() for p in pieces], dim=0)
        ctx.plan, ctx.x, ctx.pieces, ctx.Ts = plan, x, (first, rest), Ts
        ctx.T_in, ctx.q_tilde, ctx.L0, ctx.N0 = T_in, q_tilde, L0, N0
        return o, ht

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dht):
        plan, c, x, L0, N0 = ctx.plan, ctx.plan.ctx, ctx.x, ctx.L0, ctx.N0
        first, rest = ctx.pieces
        sd = ctx.Ts[0].dtype
        # 1. This rank's reverse summary: the gradient reaching the incoming piece's start from its
        #    own outputs, X̄ + T_inᵀ dht_in (X̄ = Σ_t q̃_t do_tᵀ, the dh0 of a backward with dht = 0).
        Xb = torch.zeros(N0, *ctx.Ts[0].shape[1:3], do.shape[-1], dtype=sd, device=do.device)
        if c.carry_in:
            Xb = (torch.einsum("nthk,nthv->nhkv", ctx.q_tilde.to(sd), do[:, :L0].to(sd))
                  + ctx.T_in.transpose(-1, -2) @ plan.kfirst(dht[:N0]).to(sd))
        # 2. Reverse exchange and fold from the last rank down: S̄_end(r) = S̄_start(r+1) =
        #    T_{r+1}ᵀ S̄_end(r+1) + X̄b_{r+1} (T_i is the forward's: nonzero only where a piece spans rank i).
        Xbs = _all_gather(Xb, c.group)
        G = torch.zeros_like(Xb)
        for i in range(c.world_size - 1, c.rank, -1):
            G = ctx.Ts[i].transpose(-1, -2) @ G + Xbs[i]
        if c.carry_out:
            dht = dht.clone()
            dht[-N0:] += plan.kfirst(G).to(dht.dtype)
        # 3. The local backward with the true final-state gradients.
        outs, grads = [], []
        if first is not None:
            outs += list(first)
            grads += [do[:, :L0], dht[:N0]]
        if rest is not None:
            outs += list(rest)
            grads += [do[:, L0:] if first is not None else do, dht[N0:] if first is not None else dht]
        leaves = [t for t in x.values() if t is not None and t.requires_grad]
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
                   if pairs and leaves else [None] * len(leaves))
        return (None,) + tuple(next(got) if t is not None and t.requires_grad else None for t in x.values())


def _run(name, fn, cp_context, q, k, v, gates, scale, initial_state, output_final_state, kwargs):
    if cp_context is None:   # no context: the ordinary call
        return fn(q, k, v, **gates, scale=scale, initial_state=initial_state,
                  output_final_state=output_final_state, **kwargs)
    c = cp_context
    if not isinstance(c, CPContext):
        raise TypeError(f"{name}: cp_context must be a rewy.cp.CPContext from rewy.cp.build_cp_context "
                        f"(got {type(c).__name__})")
    for n in ("cu_seqlens", "cu_seqlens_cpu", "chunk_indices"):
        if kwargs.get(n) is not None:
            raise ValueError(f"{name}: with cp_context, {n} comes from the context (pass the global "
                             f"cu_seqlens to build_cp_context)")
        kwargs.pop(n, None)
    for n, t in (("q", q), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise (ValueError if isinstance(t, torch.Tensor) else TypeError)(
                f"{name}: {n} must be a 4-D tensor (got {list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__})")
    if c.cu_seqlens_cpu is not None:
        length = c.bounds[c.rank + 1] - c.bounds[c.rank]
        if q.shape[0] != 1 or q.shape[1] != length:
            raise ValueError(f"{name}: with varlen cp_context, rank {c.rank} holds [1, {length}, ...] tokens "
                             f"(got q {list(q.shape)})")
    elif q.shape[1] < 1:
        raise ValueError(f"{name}: every rank needs at least one token (got q {list(q.shape)})")
    n_local = c.num_seqs if c.cu_seqlens_cpu is not None else q.shape[0]
    if isinstance(initial_state, torch.Tensor) and (initial_state.dim() != 4 or initial_state.shape[0] != n_local):
        raise ValueError(f"{name}: with cp_context, initial_state holds this rank's {n_local} local sequences "
                         f"[{n_local}, HV, K, V] (got {list(initial_state.shape)})")
    v_first = bool(kwargs.get("state_v_first") or kwargs.get("transpose_state_layout"))
    tensors = dict(q=q, k=k, v=v, **gates, initial_state=initial_state)
    tensors.update((n, kwargs.pop(n)) for n in [n for n, t in kwargs.items() if isinstance(t, torch.Tensor)])
    kwargs["scale"] = scale
    plan = _Plan(fn, c, list(tensors), kwargs, v_first)
    o, ht = _ContextParallel.apply(plan, *tensors.values())
    return o, (ht if output_final_state else None)


# ------------------------------------------------------------------------------------------
# rewy.ops's four functions with cp_context (without it, they are the ordinary calls)

def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cp_context=None,
                     **kwargs):
    return _run("chunk_delta_rule", ops.chunk_delta_rule, cp_context, q, k, v, dict(beta=beta), scale,
                initial_state, output_final_state, kwargs)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cp_context=None, **kwargs):
    return _run("chunk_gated_delta_rule", ops.chunk_gated_delta_rule, cp_context, q, k, v, dict(g=g, beta=beta),
                scale, initial_state, output_final_state, kwargs)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cp_context=None,
              **kwargs):
    return _run("chunk_kda", ops.chunk_kda, cp_context, q, k, v, dict(g=g, beta=beta), scale, initial_state,
                output_final_state, kwargs)


def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False, cp_context=None,
               **kwargs):
    return _run("chunk_gdn2", ops.chunk_gdn2, cp_context, q, k, v, dict(g=g, b=b, w=w), scale, initial_state,
                output_final_state, kwargs)


chunk_gdn = chunk_gated_delta_rule
