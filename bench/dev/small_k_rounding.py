"""Why the random campaign's K ≤ 4 configurations fail on the GPU (issue 25): the chunk form of DeltaNet in fp32
with chosen intermediates rounded to bf16, against the token recurrence in fp64 on the same rounded inputs.
Relative L2 error of o, mean of 4 seeds (T = 256, chunk 64, V = 48):

    K     fp32     S_c      R (v_new)  C_q      W, U     all four
    1     2.9e-7   1.2e-4   9.6e-3     2.9e-7   9.7e-3   1.04e-2
    2     2.8e-7   2.6e-4   7.0e-3     5.6e-3   6.8e-3   1.00e-2
    4     2.6e-7   3.7e-4   5.1e-3     4.5e-3   5.1e-3   8.0e-3
    16    2.3e-7   8.8e-4   2.9e-3     2.4e-3   2.9e-3   4.7e-3
    128   2.6e-7   1.7e-3   1.9e-3     1.1e-3   1.9e-3   3.2e-3

With one to four features a chunk erases nearly all of S_c, so o = Q S_c + C_q R is a difference of two terms
much larger than o, and the roundings of R = U − W S_c (and of W, U) are amplified against it; the chunk state's
own rounding is harmless. Keeping W, U and R in fp32 for small K (the general kernels: rp_t and the W/U operand
copies as template parameters) brings K = 1 to 1e-4 and K = 2..8 to 0.3–0.6 % (C_q still bf16).
    python3 bench/dev/small_k_rounding.py
"""
import torch

def bf(x): return x.to(torch.bfloat16).to(x.dtype)
def run(K, V=48, T=256, BT=64, round_set=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(T, K, generator=g, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(T, K, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(T, V, generator=g, dtype=torch.float64)
    beta = 0.1 + 0.8 * torch.rand(T, generator=g, dtype=torch.float64)
    q, k, v, beta = bf(q), bf(k), bf(v), bf(beta)
    # exact recurrence
    S = torch.zeros(K, V, dtype=torch.float64); o_ref = torch.zeros(T, V, dtype=torch.float64)
    for t in range(T):
        S = S + beta[t] * torch.outer(k[t], v[t] - k[t] @ S)
        o_ref[t] = q[t] @ S
    # chunk form in fp32
    f = torch.float32
    qf, kf, vf, bf_ = q.to(f), k.to(f), v.to(f), beta.to(f)
    S = torch.zeros(K, V, dtype=f); o = torch.zeros(T, V, dtype=f)
    for c0 in range(0, T, BT):
        Q, Kc, Vc, B = qf[c0:c0+BT], kf[c0:c0+BT], vf[c0:c0+BT], bf_[c0:c0+BT]
        n = Q.shape[0]
        M = torch.eye(n, dtype=f) + torch.tril(B[:, None] * (Kc @ Kc.T), -1)
        A = torch.linalg.inv(M)
        W = A @ (B[:, None] * Kc); U = A @ (B[:, None] * Vc)
        if 'WU' in round_set: W, U = bf(W), bf(U)
        Sc = bf(S) if 'S' in round_set else S
        R = U - W @ Sc
        if 'R' in round_set: R = bf(R)
        Cq = torch.tril(Q @ Kc.T)
        if 'Cq' in round_set: Cq = bf(Cq)
        o[c0:c0+n] = Q @ Sc + Cq @ R
        S = Sc + Kc.T @ R if 'S' in round_set else S + Kc.T @ R
    return ((o.double() - o_ref).norm() / o_ref.norm()).item()
for K in (1, 2, 4, 16, 128):
    row = {rs: sum(run(K, round_set=rs, seed=s) for s in range(4)) / 4 for rs in [(), ('S',), ('R',), ('Cq',), ('WU',), ('S','R','Cq','WU')]}
    print(K, '  '.join(f"{'+'.join(k) or 'fp32'}={v:.2e}" for k, v in row.items()))
