/* pullback.cu: the per-chunk local pullback of M R = Z − E S (MATH §4) fused with the
 * output-gradient consumers (§3, §5), Gram elimination for ḡ (§7), the reverse in-chunk
 * cumsum of ḡ and the GVA group sums of q̄, k̄. One block per (chunk, query/key head); the
 * block walks the HV/H value heads of its group.
 *
 * ReWY (cfg.bwd_algo = REWY_BWD_REWY), with P = Aᵀ R̄ from the reverse scan:
 *   D = −𝓛_<(P Rᵀ)  (2),   Ē_dir = −P S_cᵀ  (3)
 * WY (REWY_BWD_WY), from R̄: Z̄ = P = Aᵀ R̄ (6), W̄ = −R̄ S_cᵀ (1), Ā = R̄ Zᵀ + W̄ Eᵀ (2)(3),
 *   M̄ = −Aᵀ Ā Aᵀ (4)(5), D = 𝓛_<(M̄), Ē_dir = Aᵀ W̄ (7).
 * Shared by both (scalar gate, Γ = D ⊙ e^{G_i−G_j}, Γ_H = H_q ⊙ e^{G_i−G_j}; Q = scale·q):
 *   H_q = 𝓛_≤(Ō Rᵀ), Xo = Ō S_cᵀ, Xf = R S̄⁺ᵀ (= F̄), Xp = −Ē_dir
 *   T1 = Γ K, T2 = Γᵀ(β⊙K), T3 = Γ_H K, T4 = Γ_Hᵀ Q
 *   dq = scale (γ Xo + T3)
 *   dk = −βγ Xp + β T1 + T2 + T4 + e^{G_n−G} Xf
 *   dv = β P,  dβ = ⟨k, −γ Xp + T1⟩ + ⟨P, v⟩                 (exact at β = 0)
 *   Ḡ  = ⟨k, −βγ Xp + β T1 − T2 − T4 − e^{G_n−G} Xf⟩ + ⟨Q, γ Xo + T3⟩,
 *   Ḡ_{n} += γ_n ⟨S̄⁺, S_c⟩ + Σ_j e^{G_n−G_j} ⟨k_j, Xf_j⟩,   dg = reverse cumsum of Ḡ in the chunk.
 * Tiles: V in 32-column slabs, K in 32-column slabs; all products on the tensor cores (tf32). */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int PB_THREADS = 256;
constexpr int PB_NW = PB_THREADS / 32;
static_assert(LDN * MAXBT <= 2 * MAXBT * LDK, "Tm must fit in Xo..Xf");

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

__device__ float block_sum(float x, float *red) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < PB_NW; w++) s += red[w];
    return s;
}

template <class T>
__global__ void __launch_bounds__(PB_THREADS)
pullback_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const float *Gc, const float *A,
                const T *do_, const state_t *Sc, const state_t *Sbar, const float *R, const float *PR, int wy,
                float *Wbar, float *acc, T *dq, T *dk, T *dv, T *dbeta, float *dg) {
    extern __shared__ __align__(16) float sm[];
    const int c = blockIdx.x, h = blockIdx.y, BT = p.BT, Kp = p.Kp, tid = threadIdx.x;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n, tok0 = ci.tok0;
    if (n == 0) return;
    float *Dm = sm;                    /* [64][LDN] Γ */
    float *Hm = Dm + MAXBT * LDN;      /* [64][LDN] Γ_H */
    float *Pt = Hm + MAXBT * LDN;      /* [64][LDV]; T1 in pass B */
    float *Rt = Pt + MAXBT * LDV;      /* T3 in pass B */
    float *Xp = Rt + MAXBT * LDV;      /* [64][LDK] */
    float *Xo = Xp + MAXBT * LDK;
    float *Xf = Xo + MAXBT * LDK;
    float *Kbt = Xf + MAXBT * LDK;
    float *T2 = Kbt + MAXBT * LDK;
    float *T4 = T2 + MAXBT * LDK;
    float *Gs = T4 + MAXBT * LDK;
    float *bs = Gs + MAXBT;
    float *rdb = bs + MAXBT;
    float *rdg = rdb + MAXBT;
    float *red = rdg + MAXBT;          /* [64] */
    T *Ot = reinterpret_cast<T *>(red + 64);          /* [64][LDVT] */
    T *Vt = Ot + MAXBT * LDVT;                        /* [64][LDVT] */
    T *Kt = Vt + MAXBT * LDVT;                        /* [64][LDKT] */
    T *Qt = Kt + MAXBT * LDKT;
    state_t *Sct = reinterpret_cast<state_t *>(Qt + MAXBT * LDKT); /* [BK][LDVT] */
    state_t *Sbt = Sct + BK * LDVT;
    float *As = reinterpret_cast<float *>(Sbt + BK * LDVT);          /* WY only */
    float *Ab = As + MAXBT * LDN;
    float *Zt = Ab + MAXBT * LDN;
    float *Bt = Zt + MAXBT * LDV;
    float *Wsm = Bt + MAXBT * LDV;     /* WY, Kp <= 128: W̄ [64][Kp+4] in shared memory */
    float *T1 = Pt, *T3 = Rt;
    float *Tm = Xo;                    /* WY: Aᵀ Ā, [64][LDN] fits in Xo..Xf */
    const bool wsm = Kp <= WBAR_SMEM_MAX_KP;
    const int ldw = wsm ? Kp + 4 : Kp;

    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int row = tid >> 2, part = tid & 3;
    const T *kc = k + ((size_t)tok0 * p.H + h) * p.K, *qc = q + ((size_t)tok0 * p.H + h) * p.K;

    for (int r = 0; r < p.G; r++) {
        const int hv = h * p.G + r;
        const size_t ch = (size_t)c * p.HV + hv;
        const float *Rc = R + ch * BT * p.V, *PRc = PR + ch * BT * p.V;
        const state_t *Scc = Sc + ch * p.K * p.V, *Sbc = Sbar + ch * p.K * p.V;
        const T *doc = do_ + (size_t)tok0 * rsv + (size_t)hv * p.V, *vc = v + (size_t)tok0 * rsv + (size_t)hv * p.V;
        for (int i = tid; i < MAXBT; i += blockDim.x) {
            const int ii = min(i, n - 1);
            Gs[i] = (p.gated && Gc) ? Gc[(size_t)(tok0 + ii) * p.HV + hv] : 0.f;
            bs[i] = i < n ? ld<T>(beta + (size_t)(tok0 + i) * p.HV + hv) : 0.f;
            rdb[i] = 0.f;
            rdg[i] = 0.f;
        }
        for (int e = tid; e < MAXBT * LDN; e += blockDim.x) {
            Dm[e] = 0.f;
            Hm[e] = 0.f;
            if (wy) Ab[e] = 0.f;
        }
        if (wy) copy_tile<float>(As, LDN, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        __syncthreads();
        const float gl = Gs[n - 1], gn = expf(gl);

        /* ---- phase 1: over V slabs: P (WY: Aᵀ R̄), dv, ⟨P,v⟩, P Rᵀ (ReWY) / R̄ Zᵀ (WY), Ō Rᵀ ---- */
        for (int v0 = 0; v0 < p.V; v0 += BV) {
            copy_tile<T>(Ot, LDVT, BT, BV, doc, rsv, n, v0, p.V);
            copy_tile<T>(Vt, LDVT, BT, BV, vc, rsv, n, v0, p.V);
            copy_tile<float>(Rt, LDV, BT, BV, Rc, p.V, n, v0, p.V);
            copy_tile<float>(wy ? Bt : Pt, LDV, BT, BV, PRc, p.V, n, v0, p.V);
            cp_async_wait();
            __syncthreads();
            if (wy) {
                for (int e = tid; e < BT * BV; e += blockDim.x) {
                    const int i = e / BV, j = e - i * BV;
                    Zt[i * LDV + j] = bs[i] * ldf(Vt + i * LDVT + j);
                }
                bgemm<PB_NW>(BT, BV, BT, As, 1, LDN, Bt, LDV, 1, [&](int i, int j, float cc) { Pt[i * LDV + j] = cc; });
                __syncthreads();
            }
            {
                float s = 0.f;
                if (row < n) {
                    const size_t vb = (size_t)(tok0 + row) * rsv + (size_t)hv * p.V + v0;
                    for (int jj = 0; jj < BV / 4; jj++) {
                        const int j = part * (BV / 4) + jj;
                        if (v0 + j < p.V) {
                            const float pv = Pt[row * LDV + j];
                            st<T>(dv + vb + j, bs[row] * pv);
                            s += pv * ldf(Vt + row * LDVT + j);
                        }
                    }
                }
                s = quad_sum(s);
                if (part == 0 && row < n) rdb[row] += s;
            }
            if (!wy)
                bgemm<PB_NW>(BT, BT, BV, Pt, LDV, 1, Rt, 1, LDV, [&](int i, int j, float cc) { Dm[i * LDN + j] += cc; });
            else
                bgemm<PB_NW>(BT, BT, BV, Bt, LDV, 1, Zt, 1, LDV, [&](int i, int j, float cc) { Ab[i * LDN + j] += cc; });
            bgemm<PB_NW>(BT, BT, BV, Ot, LDVT, 1, Rt, 1, LDV, [&](int i, int j, float cc) { Hm[i * LDN + j] += cc; });
            __syncthreads();
        }

        /* ---- WY pass A: W̄ = −R̄ S_cᵀ (kept), Ā += W̄ Eᵀ; then M̄ = −Aᵀ Ā Aᵀ ---- */
        if (wy) {
            float *Wc = wsm ? Wsm : Wbar + ch * BT * Kp;
            for (int k0 = 0; k0 < Kp; k0 += BK) {
                for (int e = tid; e < MAXBT * LDK; e += blockDim.x) Xp[e] = 0.f;
                for (int v0 = 0; v0 < p.V; v0 += BV) {
                    copy_tile<float>(Bt, LDV, BT, BV, PRc, p.V, n, v0, p.V);
                    copy_tile<state_t>(Sct, LDVT, BK, BV, Scc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                    cp_async_wait();
                    __syncthreads();
                    bgemm<PB_NW>(BT, BK, BV, Bt, LDV, 1, Sct, 1, LDVT, [&](int i, int j, float cc) { Xp[i * LDK + j] += cc; });
                    __syncthreads();
                }
                copy_tile<T>(Kt, LDKT, BT, BK, kc, rsk, n, k0, p.K);
                cp_async_wait();
                __syncthreads();
                for (int e = tid; e < BT * BK; e += blockDim.x) {
                    const int i = e / BK, j = e - i * BK;
                    Kbt[i * LDK + j] = bs[i] * expf(Gs[i]) * ldf(Kt + i * LDKT + j);
                    Wc[(size_t)i * ldw + k0 + j] = -Xp[i * LDK + j];
                }
                __syncthreads();
                bgemm<PB_NW>(BT, BT, BK, Xp, LDK, 1, Kbt, 1, LDK, [&](int i, int j, float cc) { Ab[i * LDN + j] -= cc; });
                __syncthreads();
            }
            bgemm<PB_NW>(BT, BT, BT, As, 1, LDN, Ab, LDN, 1, [&](int i, int j, float cc) { Tm[i * LDN + j] = cc; });
            __syncthreads();
            bgemm<PB_NW>(BT, BT, BT, Tm, LDN, 1, As, 1, LDN, [&](int i, int j, float cc) { Dm[i * LDN + j] = -cc; });
            __syncthreads();
        }
        /* masks and decay: Γ = D ⊙ e^{G_i−G_j} (strict), Γ_H = H_q ⊙ e^{G_i−G_j} (inclusive) */
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            const float f = (i < n && j <= i) ? expf(Gs[i] - Gs[j]) : 0.f;
            const float d = Dm[i * LDN + j];
            Dm[i * LDN + j] = j < i ? (wy ? d : -d) * f : 0.f;
            Hm[i * LDN + j] *= f;
        }
        __syncthreads();

        /* ---- pass B: over K slabs ---- */
        float lam = 0.f, endp = 0.f;
        for (int k0 = 0; k0 < Kp; k0 += BK) {
            for (int e = tid; e < MAXBT * LDK; e += blockDim.x) {
                if (!wy) Xp[e] = 0.f;
                Xo[e] = 0.f;
                Xf[e] = 0.f;
            }
            for (int v0 = 0; v0 < p.V; v0 += BV) {
                copy_tile<T>(Ot, LDVT, BT, BV, doc, rsv, n, v0, p.V);
                copy_tile<float>(Rt, LDV, BT, BV, Rc, p.V, n, v0, p.V);
                if (!wy) copy_tile<float>(Pt, LDV, BT, BV, PRc, p.V, n, v0, p.V);
                copy_tile<state_t>(Sct, LDVT, BK, BV, Scc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                copy_tile<state_t>(Sbt, LDVT, BK, BV, Sbc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                cp_async_wait();
                __syncthreads();
                for (int e = tid; e < BK * BV; e += blockDim.x) {
                    const int kk = e / BV, j = e - kk * BV;
                    lam += ldf(Sct + kk * LDVT + j) * ldf(Sbt + kk * LDVT + j);
                }
                if (!wy)
                    bgemm<PB_NW>(BT, BK, BV, Pt, LDV, 1, Sct, 1, LDVT, [&](int i, int j, float cc) { Xp[i * LDK + j] += cc; });
                bgemm<PB_NW>(BT, BK, BV, Ot, LDVT, 1, Sct, 1, LDVT, [&](int i, int j, float cc) { Xo[i * LDK + j] += cc; });
                bgemm<PB_NW>(BT, BK, BV, Rt, LDV, 1, Sbt, 1, LDVT, [&](int i, int j, float cc) { Xf[i * LDK + j] += cc; });
                __syncthreads();
            }
            copy_tile<T>(Kt, LDKT, BT, BK, kc, rsk, n, k0, p.K);
            copy_tile<T>(Qt, LDKT, BT, BK, qc, rsk, n, k0, p.K);
            if (wy) {
                const float *Wc = wsm ? Wsm : Wbar + ch * BT * Kp;
                for (int e = tid; e < BT * BK; e += blockDim.x) {
                    const int i = e / BK, j = e - i * BK;
                    T1[i * LDK + j] = Wc[(size_t)i * ldw + k0 + j];
                }
            }
            cp_async_wait();
            __syncthreads();
            if (wy)
                bgemm<PB_NW>(BT, BK, BT, As, 1, LDN, T1, LDK, 1, [&](int i, int j, float cc) { Xp[i * LDK + j] = -cc; });
            for (int e = tid; e < BT * BK; e += blockDim.x) {
                const int i = e / BK, j = e - i * BK;
                Kbt[i * LDK + j] = bs[i] * ldf(Kt + i * LDKT + j);
            }
            __syncthreads();
            bgemm<PB_NW>(BT, BK, BT, Dm, LDN, 1, Kt, LDKT, 1, [&](int i, int j, float cc) { T1[i * LDK + j] = cc; });
            bgemm<PB_NW>(BT, BK, BT, Dm, 1, LDN, Kbt, LDK, 1, [&](int i, int j, float cc) { T2[i * LDK + j] = cc; });
            bgemm<PB_NW>(BT, BK, BT, Hm, LDN, 1, Kt, LDKT, 1, [&](int i, int j, float cc) { T3[i * LDK + j] = cc; });
            bgemm<PB_NW>(BT, BK, BT, Hm, 1, LDN, Qt, LDKT, 1, [&](int i, int j, float cc) { T4[i * LDK + j] = p.scale * cc; });
            __syncthreads();
            {
                float sdb = 0.f, sdg = 0.f;
                if (row < n) {
                    const float gi = expf(Gs[row]), eF = expf(gl - Gs[row]), b = bs[row];
                    const size_t qb = ((size_t)(tok0 + row) * p.H + h) * p.K;
                    const size_t ab = (((size_t)c * p.H + h) * BT + row) * Kp;
                    for (int jj = 0; jj < BK / 4; jj++) {
                        const int j = part * (BK / 4) + jj, d = k0 + j;
                        if (d >= p.K) break;
                        const int o = row * LDK + j;
                        const float kv = ldf(Kt + row * LDKT + j), qv = p.scale * ldf(Qt + row * LDKT + j);
                        const float xp = Xp[o], xo = Xo[o], xf = Xf[o];
                        const float t1 = T1[o], t2 = T2[o], t3 = T3[o], t4 = T4[o];
                        float dqv = p.scale * (gi * xo + t3);
                        float dkv = -b * gi * xp + b * t1 + t2 + t4 + eF * xf;
                        sdb += (t1 - gi * xp) * kv;
                        sdg += (b * (t1 - gi * xp) - t2 - t4 - eF * xf) * kv + (gi * xo + t3) * qv;
                        endp += eF * xf * kv;
                        if (p.G == 1) {
                            st<T>(dq + qb + d, dqv);
                            st<T>(dk + qb + d, dkv);
                        } else {
                            float *aq = acc + ab + d;
                            float *ak = acc + (size_t)p.NC * p.H * BT * Kp + ab + d;
                            if (r > 0) {
                                dqv += *aq;
                                dkv += *ak;
                            }
                            if (r == p.G - 1) {
                                st<T>(dq + qb + d, dqv);
                                st<T>(dk + qb + d, dkv);
                            } else {
                                *aq = dqv;
                                *ak = dkv;
                            }
                        }
                    }
                }
                sdb = quad_sum(sdb);
                sdg = quad_sum(sdg);
                if (part == 0 && row < n) {
                    rdb[row] += sdb;
                    rdg[row] += sdg;
                }
            }
            __syncthreads();
        }
        const float lam_all = block_sum(lam, red);
        const float endp_all = block_sum(endp, red + 8);
        if (tid == 0) {
            if (dbeta)
                for (int i = 0; i < n; i++) st<T>(dbeta + (size_t)(tok0 + i) * p.HV + hv, rdb[i]);
            if (p.gated && dg) {
                float s = gn * lam_all + endp_all;
                for (int i = n - 1; i >= 0; i--) {
                    s += rdg[i];
                    dg[(size_t)(tok0 + i) * p.HV + hv] = s;
                }
            }
        }
        __syncthreads();
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const void *beta, const float *Gc,
                       const float *A, const void *do_, const state_t *Sc, const state_t *Sbar, const float *R,
                       const float *PR, int wy, float *Wbar, float *acc, void *dq, void *dk, void *dv, void *dbeta,
                       float *dg, cudaStream_t s) {
    size_t fl = 2 * MAXBT * LDN + 2 * MAXBT * LDV + 6 * MAXBT * LDK + 4 * MAXBT + 64;
    size_t bytes = fl * sizeof(float) + sizeof(T) * (2 * MAXBT * LDVT + 2 * MAXBT * LDKT) + sizeof(state_t) * 2 * BK * LDVT;
    if (wy) bytes += sizeof(float) * (2 * MAXBT * LDN + 2 * MAXBT * LDV + (p.Kp <= WBAR_SMEM_MAX_KP ? MAXBT * (p.Kp + 4) : 0));
    const size_t smem = bytes;
    auto kern = pullback_kernel<T>;
    cudaError_t e = ensure_smem<pullback_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.H);
    kern<<<grid, PB_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, (const T *)beta, Gc, A,
                                        (const T *)do_, Sc, Sbar, R, PR, wy, Wbar, acc, (T *)dq, (T *)dk, (T *)dv,
                                        (T *)dbeta, dg);
    return cudaGetLastError();
}

cudaError_t launch_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                            const void *beta, const float *Gc, const float *A, const void *do_,
                            const state_t *Sc, const state_t *Sbar, const float *R, const float *PR, int wy,
                            float *Wbar, float *acc, void *dq, void *dk, void *dv, void *dbeta, float *dg,
                            cudaStream_t s) {
    switch (dt) {
    case REWY_BF16:
        return run<__nv_bfloat16>(p, q, k, v, beta, Gc, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta, dg, s);
    case REWY_F16:
        return run<__half>(p, q, k, v, beta, Gc, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta, dg, s);
    default:
        return run<float>(p, q, k, v, beta, Gc, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta, dg, s);
    }
}

} // namespace rewy_cuda
