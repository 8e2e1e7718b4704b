# fp64 prototype of the CUDA kernels' chunk algebra (scalar gate), checked against autograd
# through the token recurrence. Not a test of the CUDA code; a check of the formulas it uses.
import torch, math
torch.manual_seed(0)
dt = torch.float64

def recur(q, k, v, g, beta, h0, scale):
    T, K = k.shape; V = v.shape[1]
    S = h0.clone(); outs = []
    for t in range(T):
        S = torch.exp(g[t]) * S
        r = beta[t] * v[t] - beta[t] * (S.T @ k[t])
        S = S + torch.outer(k[t], r)
        outs.append(S.T @ (scale * q[t]))
    return torch.stack(outs), S

def chunk_fwd_bwd(q, k, v, g, beta, h0, scale, do, dht, BT, wy=False):
    T, K = k.shape; V = v.shape[1]
    Q = q * scale
    chunks = [(s, min(T, s + BT)) for s in range(0, T, BT)]
    S = h0.clone(); Scs = []; Rs = []; Gs = []; As = []; Cqs = []; o = torch.zeros(T, V, dtype=dt)
    for (a, b) in chunks:
        n = b - a; G = torch.cumsum(g[a:b], 0); gam = torch.exp(G)
        dG = G[:, None] - G[None, :]
        L = torch.tril(beta[a:b, None] * (k[a:b] @ k[a:b].T) * torch.exp(dG), -1)
        A = torch.linalg.inv(torch.eye(n, dtype=dt) + L)
        Cq = torch.tril((Q[a:b] @ k[a:b].T) * torch.exp(dG))
        X = beta[a:b, None] * v[a:b] - (beta[a:b] * gam)[:, None] * (k[a:b] @ S)
        R = A @ X
        o[a:b] = gam[:, None] * (Q[a:b] @ S) + Cq @ R
        Scs.append(S); Rs.append(R); Gs.append(G); As.append(A); Cqs.append(Cq)
        S = gam[-1] * S + k[a:b].T @ (torch.exp(G[-1] - G)[:, None] * R)
    ht = S
    # reverse scan
    Sb = dht.clone(); Sbp = [None] * len(chunks); Ps = [None] * len(chunks); Rbs = [None] * len(chunks)
    for c in reversed(range(len(chunks))):
        a, b = chunks[c]; G = Gs[c]; gam = torch.exp(G)
        Sbp[c] = Sb
        Rb = torch.exp(G[-1] - G)[:, None] * (k[a:b] @ Sb) + Cqs[c].T @ do[a:b]
        P = As[c].T @ Rb
        Ps[c] = P; Rbs[c] = Rb
        Sb = gam[-1] * Sb + Q[a:b].T @ (gam[:, None] * do[a:b]) - k[a:b].T @ ((beta[a:b] * gam)[:, None] * P)
    dh0 = Sb
    dq = torch.zeros_like(q); dk = torch.zeros_like(k); dv = torch.zeros_like(v); db = torch.zeros_like(beta); dg = torch.zeros_like(g)
    for c, (a, b) in enumerate(chunks):
        n = b - a; G = Gs[c]; gam = torch.exp(G); E_ = torch.exp(G[:, None] - G[None, :])
        Sc = Scs[c]; Sbn = Sbp[c]; R = Rs[c]; P = Ps[c]; Ob = do[a:b]; kk = k[a:b]; QQ = Q[a:b]; bb = beta[a:b]
        if wy:
            A = As[c]; Rb = Rbs[c]; Z = bb[:, None] * v[a:b]; E = (bb * gam)[:, None] * kk
            Wb = -Rb @ Sc.T
            Ab = Rb @ Z.T + Wb @ E.T
            Mb = -A.T @ Ab @ A.T
            D = torch.tril(Mb, -1)
            P = A.T @ Rb
            Xp = -(A.T @ Wb)
        else:
            D = -torch.tril(P @ R.T, -1)
            Xp = P @ Sc.T
        Hq = torch.tril(Ob @ R.T)
        GD = D * E_; GH = Hq * torch.tril(E_)
        GD = torch.tril(GD, -1)
        Xo = Ob @ Sc.T; Xf = R @ Sbn.T
        lam = (Sbn * Sc).sum()
        T1 = GD @ kk; T2 = GD.T @ (bb[:, None] * kk); T3 = GH @ kk; T4 = GH.T @ QQ
        eF = torch.exp(G[-1] - G)
        dq[a:b] = scale * (gam[:, None] * Xo + T3)
        dk[a:b] = -(bb * gam)[:, None] * Xp + bb[:, None] * T1 + T2 + T4 + eF[:, None] * Xf
        dv[a:b] = bb[:, None] * P
        db[a:b] = (-gam[:, None] * Xp * kk).sum(1) + (T1 * kk).sum(1) + (P * v[a:b]).sum(1)
        Gb = (-(bb * gam)[:, None] * Xp * kk).sum(1) + bb * (T1 * kk).sum(1) - (T2 * kk).sum(1) - (T4 * kk).sum(1) \
            - eF * (Xf * kk).sum(1) + gam * (Xo * QQ).sum(1) + (T3 * QQ).sum(1)
        Gb[-1] += gam[-1] * lam + (eF * (kk * Xf).sum(1)).sum()
        dg[a:b] = torch.flip(torch.cumsum(torch.flip(Gb, [0]), 0), [0])
    return o, ht, dq, dk, dv, dg, db, dh0

def rel(a, b):  # relative error; absolute where the reference is zero (T = 1 with beta = 0: dk = dv = 0)
    n = b.norm()
    return ((a - b).norm() / n).item() if n > 0 else (a - b).abs().max().item()

for (T, K, V, BT, wy) in [(1, 8, 8, 4, False), (37, 12, 10, 16, False), (64, 16, 8, 16, True), (100, 16, 24, 32, True), (100, 16, 24, 64, False)]:
    q = torch.nn.functional.normalize(torch.randn(T, K, dtype=dt), dim=-1).requires_grad_()
    k = torch.nn.functional.normalize(torch.randn(T, K, dtype=dt), dim=-1).requires_grad_()
    v = torch.randn(T, V, dtype=dt).requires_grad_()
    g = (torch.nn.functional.logsigmoid(torch.randn(T, dtype=dt)) / 4).requires_grad_()
    beta = (0.1 + 0.8 * torch.rand(T, dtype=dt)); beta[::3] = 0; beta = beta.requires_grad_()
    h0 = (0.1 * torch.randn(K, V, dtype=dt)).requires_grad_()
    scale = K ** -0.5
    o, ht = recur(q, k, v, g, beta, h0, scale)
    do = torch.randn_like(o); dht = 0.1 * torch.randn_like(ht)
    grads = torch.autograd.grad((o * do).sum() + (ht * dht).sum(), (q, k, v, g, beta, h0))
    res = chunk_fwd_bwd(q.detach(), k.detach(), v.detach(), g.detach(), beta.detach(), h0.detach(), scale, do, dht, BT, wy)
    ref = (o, ht) + grads
    names = ["o", "ht", "dq", "dk", "dv", "dg", "db", "dh0"]
    refmap = dict(zip(["o", "ht", "dq", "dk", "dv", "dg", "db", "dh0"], [ref[0], ref[1], ref[2], ref[3], ref[4], ref[5], ref[6], ref[7]]))
    print(T, K, V, BT, "wy" if wy else "rewy", " ".join(f"{nm}={rel(r, refmap[nm]):.1e}" for nm, r in zip(names, res)))
