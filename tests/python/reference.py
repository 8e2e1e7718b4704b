"""The fp64 reference for the Python tests: MATH §1's token recurrence, in plain torch.

Written independently of rewy (it imports nothing from it): FLA's input transforms (l2norm,
in-kernel gates, beta sigmoid) are restated here from FLA's definitions, and torch autograd
through this code gives the reference gradient of every input.
"""
import torch
import torch.nn.functional as F


def recurrence(q, k, v, g, b, w, scale, h0=None, cu_seqlens=None, state_v_first=False):
    """MATH §1 in the generic vector form, one token at a time:

        S⁻_t = Diag(exp g_t) S_{t−1}
        r_t  = w_t ⊙ v_t − S⁻_tᵀ (b_t ⊙ k_t)
        S_t  = S⁻_t + k_t r_tᵀ
        o_t  = S_tᵀ (scale · q_t)

    q, k [B,T,H,K]; v, w [B,T,HV,V]; g, b [B,T,HV,K]; h0 [N,HV,K,V] (or [N,HV,V,K] with
    state_v_first). Value head h reads query/key head h // (HV/H). Returns o [B,T,HV,V] and
    the final states [N,HV,K,V] (same layout as h0).
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
    # sequences: whole batch rows, or the packed pieces of row 0
    if cu_seqlens is None:
        pieces = [(slice(None), 0, T)]
    else:
        cu = [int(x) for x in cu_seqlens]
        pieces = [(slice(0, 1), cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    if h0 is not None and state_v_first:
        h0 = h0.transpose(-1, -2)
    outs, finals = [], []
    for n, (rows, t0, t1) in enumerate(pieces):
        S = q.new_zeros(q[rows].shape[0], HV, K, V)
        if h0 is not None:
            S = S + (h0 if cu_seqlens is None else h0[n:n + 1])
        o = []
        for t in range(t0, t1):
            S = S * g[rows, t].exp()[..., None]
            r = w[rows, t] * v[rows, t] - torch.einsum("nhkv,nhk->nhv", S, b[rows, t] * k[rows, t])
            S = S + k[rows, t][..., None] * r[..., None, :]
            o.append(torch.einsum("nhkv,nhk->nhv", S, scale * q[rows, t]))
        outs.append(torch.stack(o, 1))
        finals.append(S)
    ht = torch.cat(finals, 0)
    return torch.cat(outs, 1), (ht.transpose(-1, -2) if state_v_first else ht)


# FLA's input transforms, restated

def l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gdn_gate(g, A_log, dt_bias=None):          # g [B,T,HV], A_log [HV], dt_bias [HV]
    x = g if dt_bias is None else g + dt_bias
    return -A_log.exp() * F.softplus(x)


def kda_gate(g, A_log=None, dt_bias=None, lower_bound=None):  # g [B,T,HV,K], A_log [HV], dt_bias [HV*K]
    HV, K = g.shape[2:]
    x = g if dt_bias is None else g + dt_bias.view(HV, K)
    if lower_bound is not None:
        return lower_bound * torch.sigmoid(x if A_log is None else A_log.exp()[:, None] * x)
    return -A_log.exp()[:, None] * F.softplus(x)


def reference(op, q, k, v, g=None, beta=None, b=None, w=None, scale=None, initial_state=None,
              cu_seqlens=None, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
              lower_bound=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False):
    """The four operators as FLA defines them (op: 'delta', 'gdn', 'kda', 'gdn2'), mapped onto
    the vector form of `recurrence` (rewy.h's table). Returns (o, final state)."""
    K, V = q.shape[-1], v.shape[-1]
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    if use_gate_in_kernel:
        g = gdn_gate(g, A_log, dt_bias) if op == "gdn" else kda_gate(g, A_log, dt_bias, lower_bound)
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta) * (2 if allow_neg_eigval else 1)
    if op == "delta":
        g = torch.zeros_like(v[..., :1]).expand(*v.shape[:3], K)
    elif op == "gdn":
        g = g[..., None].expand(*g.shape, K)
    if op != "gdn2":
        b = beta[..., None].expand(*beta.shape, K)
        w = beta[..., None].expand(*beta.shape, V)
    scale = K ** -0.5 if scale is None else scale
    return recurrence(q, k, v, g, b, w, scale, initial_state, cu_seqlens, state_v_first)
