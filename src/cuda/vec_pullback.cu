/* vec_pullback.cu: per chunk and value head, the vector-gate backward after the reverse scan
 * (MATH §3–§6), mirroring chunk_backward() of src/cpu/chunk_bwd.c:
 *
 *   ReWY (P = AᵀR̄ from the scan):  D = −𝓛_<(P Rᵀ),  Ē_dir = −P S_cᵀ
 *   WY (R̄ from the scan):          P = AᵀR̄, W̄ = −R̄ S_cᵀ, Ā = R̄ Zᵀ + W̄ Eᵀ, D = 𝓛_<(−AᵀĀAᵀ), Ē_dir = AᵀW̄
 *   both:  H_q = 𝓛_≤(Ō Rᵀ),  F̄ = R S̄⁺ᵀ,  V̄ = P⊙w,  W̄_e = P⊙v
 *
 * Bounded feature-local forms (never Y = K⊘γ or E⊘γ):
 *   ek = Ē⊙γ  = Ē_dir⊙γ + α⊙(D (K⊙ζ))
 *   yk = Ȳ⊘γ  = F̄⊙e^{G_n−G} + ζ⊙(Dᵀ(b⊙K⊙α)) + ζ⊙(H_qᵀ(Q⊙α))
 *   qk = Q̄_g⊙γ = (Ō S_cᵀ)⊙γ + α⊙(H_q (K⊙ζ))
 * (α = e^{G−c}, ζ = e^{c−G}, midpoint center c per chunk and feature; exact pairwise exponents
 * instead when the chunk's half range exceeds VEC_CENTER_LIMIT, as in vec_intra.cu.)
 *   q̄ = scale·qk,  k̄ = ek⊙b + yk,  b̄ = ek⊙k,  Ḡ = ek⊙b⊙k − yk⊙k + qk⊙Q
 *   Ḡ_{n−1} += diag(S̄⁺S_cᵀ)⊙γ_n + Σ_j F_j⊙F̄_j,   ḡ = reverse in-chunk cumsum of Ḡ
 *   KDA: β̄ = Σ_K b̄ + Σ_V W̄_e;  GDN2: b̄ [K] and w̄ = W̄_e [V] independently.
 * q̄, k̄ of grouped value heads (HV > H) go to fp32 partials and vec_gva_sum_kernel adds them in
 * a fixed order (deterministic).
 *
 * One block per (chunk, value head), 256 threads. V in 32-column slabs, K in 32-feature slabs;
 * all products are bgemm (tf32 tensor cores, fp32 accumulation) with epilogues that accumulate
 * into shared fp32 tiles. Correctness-first: plain loads, no prefetch. */
#include "vec_kernels.cuh"

namespace rewy_cuda {

constexpr int VP_THREADS = 256;
constexpr int VP_NW = VP_THREADS / 32;
constexpr int VP_PARTS = VP_THREADS / MAXBT; /* threads per row in the row-wise stages (4) */
constexpr int VPV = 32;                      /* V slab */
static_assert(VPV % VP_PARTS == 0 && VKB % VP_PARTS == 0, "row-wise stages split a slab evenly");
static_assert(MAXBT * LDN <= 3 * MAXBT * VLDK && MAXBT * LDN <= 2 * MAXBT * VLDK, "aliases must fit");

__device__ __forceinline__ float vp_quad_sum(float x) {
#pragma unroll
    for (int o = 1; o < VP_PARTS; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* shared memory, in floats */
struct VpLayout {
    int Dm, Hm, As, Pv, Rv, Ov, Bv, Scs, Sbs, acc3, kab, mid, stv, keyv, rdb, red, total;
};
__host__ __device__ inline VpLayout vp_layout(int Kp, int wy) {
    VpLayout L;
    int o = 0;
    L.Dm = o; o += MAXBT * LDN;
    L.Hm = o; o += MAXBT * LDN;
    L.As = o; o += wy ? MAXBT * LDN : 0;
    L.Pv = o; o += MAXBT * VLDK;
    L.Rv = o; o += MAXBT * VLDK;
    L.Ov = o; o += MAXBT * VLDK;
    L.Bv = o; o += MAXBT * VLDK;         /* WY: R̄ slab; pass B: G slab */
    L.Scs = o; o += VKB * VLDS;          /* state_t [32][VLDS] (sized in floats: fits fp32 states too) */
    L.Sbs = o; o += VKB * VLDS;
    L.acc3 = o; o += 3 * MAXBT * VLDK;   /* ek, yk, qk; WY: Z slab, E slab, then Tm [64][LDN] */
    L.kab = o; o += 2 * MAXBT * VLDK;    /* Ka, Kb; WY: Ā [64][LDN] */
    L.mid = o; o += Kp;
    L.stv = o; o += VKB;
    L.keyv = o; o += VKB;
    L.rdb = o; o += MAXBT;
    L.red = o; o += 32;
    L.total = o;
    return L;
}

template <class T>
__global__ void __launch_bounds__(VP_THREADS)
vec_pullback_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const T *b, const T *w,
                    const float *Gc, const float *A, const T *do_, const state_t *Sc, const state_t *Sbar,
                    const float *R, const float *PR, int wy, float *Wbar, float *acc, T *dq, T *dk, T *dv,
                    T *dbeta, T *db, T *dw, float *dg) {
    extern __shared__ __align__(16) float sm[];
    const int c = blockIdx.x, hv = blockIdx.y, h = hv / p.G, BT = p.BT, Kp = p.Kp, tid = threadIdx.x;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n;
    if (n == 0) return;
    const VpLayout L = vp_layout(Kp, wy);
    float *Dm = sm + L.Dm, *Hm = sm + L.Hm, *As = sm + L.As;
    float *Pv = sm + L.Pv, *Rv = sm + L.Rv, *Ov = sm + L.Ov, *Bv = sm + L.Bv;
    state_t *Scs = reinterpret_cast<state_t *>(sm + L.Scs), *Sbs = reinterpret_cast<state_t *>(sm + L.Sbs);
    float *ek = sm + L.acc3, *yk = ek + MAXBT * VLDK, *qk = yk + MAXBT * VLDK;
    float *Ka = sm + L.kab, *Kb = Ka + MAXBT * VLDK;
    float *mid = sm + L.mid, *stv = sm + L.stv, *keyv = sm + L.keyv, *rdb = sm + L.rdb, *red = sm + L.red;
    float *Zs = ek, *Es = yk, *Tm = ek; /* WY aliases (used before pass B) */
    float *Ab = Ka;

    const size_t tok0 = (size_t)ci.tok0, ch = (size_t)c * p.HV + hv;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const float *Gch = Gc + ch * BT * Kp, *Rc = R + ch * BT * p.V, *PRc = PR + ch * BT * p.V;
    const state_t *Scc = Sc + ch * p.K * p.V, *Sbc = Sbar + ch * p.K * p.V;
    const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
    const T *doc = do_ + tok0 * rsv + (size_t)hv * p.V, *vc = v + tok0 * rsv + (size_t)hv * p.V;
    float *Wc = Wbar ? Wbar + ch * BT * Kp : nullptr;
    const float sc = p.scale;
    const int row = tid / VP_PARTS, part = tid % VP_PARTS;

    /* ---- setup: zero the n×n accumulators, centers (same rule as vec_intra.cu) ---- */
    for (int e = tid; e < MAXBT * LDN; e += blockDim.x) {
        Dm[e] = 0.f;
        Hm[e] = 0.f;
        if (wy) Ab[e] = 0.f;
    }
    for (int i = tid; i < MAXBT; i += blockDim.x) rdb[i] = 0.f;
    if (wy) copy_tile<float>(As, LDN, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
    float hmax = 0.f;
    for (int d = tid; d < Kp; d += blockDim.x) {
        float lo = Gch[d], hi = lo;
        for (int i = 1; i < n; i++) {
            const float x = Gch[(size_t)i * Kp + d];
            lo = fminf(lo, x);
            hi = fmaxf(hi, x);
        }
        mid[d] = 0.5f * (hi + lo);
        hmax = fmaxf(hmax, 0.5f * (hi - lo));
    }
    for (int o = 16; o > 0; o >>= 1) hmax = fmaxf(hmax, __shfl_xor_sync(0xffffffffu, hmax, o));
    if ((tid & 31) == 0) red[tid >> 5] = hmax;
    cp_async_wait();
    __syncthreads();
    float half_range = 0.f;
    for (int wi = 0; wi < VP_NW; wi++) half_range = fmaxf(half_range, red[wi]);
    const bool centered = half_range <= VEC_CENTER_LIMIT;

    /* ---- pass A, over V slabs: P (WY: AᵀR̄), v̄, w̄, Σ_V W̄_e; D ← P Rᵀ (WY: Ā ← R̄ Zᵀ); H_q ← Ō Rᵀ ---- */
    for (int v0 = 0; v0 < p.V; v0 += VPV) {
        __syncthreads();
        copy_tile<float>(Rv, VLDK, BT, VPV, Rc, p.V, n, v0, p.V);
        copy_tile<float>(wy ? Bv : Pv, VLDK, BT, VPV, PRc, p.V, n, v0, p.V);
        for (int e = tid; e < BT * VPV; e += blockDim.x) {
            const int i = e / VPV, j = e - i * VPV, ve = v0 + j;
            const bool ok = i < n && ve < p.V;
            Ov[i * VLDK + j] = ok ? ld<T>(doc + i * rsv + ve) : 0.f;
            if (wy) Zs[i * VLDK + j] = ok ? vg_write<T>(p, beta, w, tok0 + i, hv, ve) * ld<T>(vc + i * rsv + ve) : 0.f;
        }
        cp_async_wait();
        __syncthreads();
        if (wy) {
            bgemm<VP_NW>(BT, VPV, BT, As, 1, LDN, Bv, VLDK, 1, [&](int i, int j, float cc) { Pv[i * VLDK + j] = cc; });
            __syncthreads();
        }
        {
            float s = 0.f;
            if (row < n) {
                for (int jj = 0; jj < VPV / VP_PARTS; jj++) {
                    const int j = part * (VPV / VP_PARTS) + jj, ve = v0 + j;
                    if (ve < p.V) {
                        const float pv = Pv[row * VLDK + j], vv = ld<T>(vc + row * rsv + ve);
                        const size_t o = (tok0 + row) * rsv + (size_t)hv * p.V + ve;
                        st<T>(dv + o, vg_write<T>(p, beta, w, tok0 + row, hv, ve) * pv);
                        if (dw) st<T>(dw + o, pv * vv);
                        s += pv * vv;
                    }
                }
            }
            s = vp_quad_sum(s);
            if (part == 0 && row < n) rdb[row] += s;
        }
        if (!wy) bgemm<VP_NW>(BT, BT, VPV, Pv, VLDK, 1, Rv, 1, VLDK, [&](int i, int j, float cc) { Dm[i * LDN + j] += cc; });
        else bgemm<VP_NW>(BT, BT, VPV, Bv, VLDK, 1, Zs, 1, VLDK, [&](int i, int j, float cc) { Ab[i * LDN + j] += cc; });
        bgemm<VP_NW>(BT, BT, VPV, Ov, VLDK, 1, Rv, 1, VLDK, [&](int i, int j, float cc) { Hm[i * LDN + j] += cc; });
    }

    /* ---- WY: W̄ = −R̄ S_cᵀ (workspace), Ā += W̄ Eᵀ, D = −Aᵀ Ā Aᵀ ---- */
    if (wy) {
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            for (int v0 = 0; v0 < p.V; v0 += VPV) {
                __syncthreads();
                copy_tile<float>(Bv, VLDK, BT, VPV, PRc, p.V, n, v0, p.V);
                copy_tile<state_t>(Scs, VLDS, VKB, VPV, Scc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                cp_async_wait();
                __syncthreads();
                bgemm<VP_NW>(BT, VKB, VPV, Bv, VLDK, 1, Scs, 1, VLDS, [&](int i, int j, float cc) {
                    float *x = Wc + (size_t)i * Kp + k0 + j;
                    *x = (v0 == 0 ? 0.f : *x) - cc;
                });
            }
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float x = 0.f;
                if (i < n && d < p.K)
                    x = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * ld<T>(kc + i * rsk + d) * expf(Gch[(size_t)i * Kp + d]);
                Es[i * VLDK + dd] = x;
            }
            __syncthreads();
            bgemm<VP_NW>(BT, BT, VKB, Wc + k0, Kp, 1, Es, 1, VLDK, [&](int i, int j, float cc) { Ab[i * LDN + j] += cc; });
        }
        __syncthreads();
        bgemm<VP_NW>(BT, BT, BT, As, 1, LDN, Ab, LDN, 1, [&](int i, int j, float cc) { Tm[i * LDN + j] = cc; });
        __syncthreads();
        bgemm<VP_NW>(BT, BT, BT, Tm, LDN, 1, As, 1, LDN, [&](int i, int j, float cc) { Dm[i * LDN + j] = -cc; });
    }
    __syncthreads();
    /* masks: D strict (ReWY: D = −𝓛_<(P Rᵀ); WY: 𝓛_<(M̄)), H_q inclusive */
    for (int e = tid; e < MAXBT * MAXBT; e += blockDim.x) {
        const int i = e / MAXBT, j = e - i * MAXBT;
        const float d = Dm[i * LDN + j];
        Dm[i * LDN + j] = (i < n && j < i) ? (wy ? d : -d) : 0.f;
        if (!(i < n && j <= i)) Hm[i * LDN + j] = 0.f;
    }

    /* ---- pass B, over 32-feature slabs ---- */
    for (int k0 = 0; k0 < Kp; k0 += VKB) {
        __syncthreads();
        for (int e = tid; e < 3 * MAXBT * VLDK; e += blockDim.x) ek[e] = 0.f;
        if (tid < VKB) stv[tid] = 0.f;
        /* Ē_dir (ReWY: −P S_cᵀ), Ō S_cᵀ, F̄ = R S̄⁺ᵀ, diag(S̄⁺ S_cᵀ) */
        for (int v0 = 0; v0 < p.V; v0 += VPV) {
            __syncthreads();
            copy_tile<float>(Rv, VLDK, BT, VPV, Rc, p.V, n, v0, p.V);
            if (!wy) copy_tile<float>(Pv, VLDK, BT, VPV, PRc, p.V, n, v0, p.V);
            copy_tile<state_t>(Scs, VLDS, VKB, VPV, Scc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
            copy_tile<state_t>(Sbs, VLDS, VKB, VPV, Sbc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
            for (int e = tid; e < BT * VPV; e += blockDim.x) {
                const int i = e / VPV, j = e - i * VPV;
                Ov[i * VLDK + j] = (i < n && v0 + j < p.V) ? ld<T>(doc + i * rsv + v0 + j) : 0.f;
            }
            cp_async_wait();
            __syncthreads();
            if (!wy)
                bgemm<VP_NW>(BT, VKB, VPV, Pv, VLDK, 1, Scs, 1, VLDS, [&](int i, int j, float cc) { ek[i * VLDK + j] -= cc; });
            bgemm<VP_NW>(BT, VKB, VPV, Ov, VLDK, 1, Scs, 1, VLDS, [&](int i, int j, float cc) { qk[i * VLDK + j] += cc; });
            bgemm<VP_NW>(BT, VKB, VPV, Rv, VLDK, 1, Sbs, 1, VLDS, [&](int i, int j, float cc) { yk[i * VLDK + j] += cc; });
            if (tid < VKB) {
                float s = 0.f;
                for (int j = 0; j < VPV; j++) s += ldf(Sbs + tid * VLDS + j) * ldf(Scs + tid * VLDS + j);
                stv[tid] += s;
            }
        }
        __syncthreads();
        /* WY: Ē_dir = Aᵀ W̄ */
        if (wy) {
            bgemm<VP_NW>(BT, VKB, BT, As, 1, LDN, Wc + k0, Kp, 1, [&](int i, int j, float cc) { ek[i * VLDK + j] += cc; });
            __syncthreads();
        }
        /* feature-local scaling: ek = Ē_dir⊙γ, qk = (Ō S_cᵀ)⊙γ, yk = F̄⊙e^{G_n−G}; G slab → Bv */
        for (int e = tid; e < BT * VKB; e += blockDim.x) {
            const int i = e / VKB, dd = e - i * VKB, d = k0 + dd, o = i * VLDK + dd;
            const float G = Gch[(size_t)i * Kp + d];
            Bv[o] = G;
            if (i < n && d < p.K) {
                const float gam = expf(G);
                ek[o] *= gam;
                qk[o] *= gam;
                yk[o] *= expf(Gch[(size_t)(n - 1) * Kp + d] - G);
            } else {
                ek[o] = 0.f;
                qk[o] = 0.f;
                yk[o] = 0.f;
            }
        }
        __syncthreads();
        /* endpoint key term Σ_j F_j⊙F̄_j = Σ_j k_j ⊙ yk_j (before the intra terms join yk) */
        if (tid < VKB) {
            float s = 0.f;
            if (k0 + tid < p.K)
                for (int i = 0; i < n; i++) s += ld<T>(kc + i * rsk + k0 + tid) * yk[i * VLDK + tid];
            keyv[tid] = s;
        }
        /* matrix intra (§6) */
        if (centered) {
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd, o = i * VLDK + dd;
                float ka = 0.f, kb = 0.f;
                if (i < n && d < p.K) {
                    const float kv = ld<T>(kc + i * rsk + d), G = Bv[o];
                    ka = kv * expf(mid[d] - G);                                              /* K⊙ζ */
                    kb = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * kv * expf(G - mid[d]);   /* b⊙K⊙α */
                }
                Ka[o] = ka;
                Kb[o] = kb;
            }
            __syncthreads();
            /* ek += α⊙(D (K⊙ζ)),  qk += α⊙(H_q (K⊙ζ)),  yk += ζ⊙(Dᵀ(b⊙K⊙α)) */
            bgemm<VP_NW>(BT, VKB, BT, Dm, LDN, 1, Ka, VLDK, 1, [&](int i, int j, float cc) {
                ek[i * VLDK + j] += expf(Bv[i * VLDK + j] - mid[k0 + j]) * cc;
            });
            bgemm<VP_NW>(BT, VKB, BT, Hm, LDN, 1, Ka, VLDK, 1, [&](int i, int j, float cc) {
                qk[i * VLDK + j] += expf(Bv[i * VLDK + j] - mid[k0 + j]) * cc;
            });
            bgemm<VP_NW>(BT, VKB, BT, Dm, 1, LDN, Kb, VLDK, 1, [&](int i, int j, float cc) {
                yk[i * VLDK + j] += expf(mid[k0 + j] - Bv[i * VLDK + j]) * cc;
            });
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd, o = i * VLDK + dd;
                Kb[o] = (i < n && d < p.K) ? sc * ld<T>(qc + i * rsk + d) * expf(Bv[o] - mid[d]) : 0.f; /* Q⊙α */
            }
            __syncthreads();
            /* yk += ζ⊙(H_qᵀ(Q⊙α)) */
            bgemm<VP_NW>(BT, VKB, BT, Hm, 1, LDN, Kb, VLDK, 1, [&](int i, int j, float cc) {
                yk[i * VLDK + j] += expf(mid[k0 + j] - Bv[i * VLDK + j]) * cc;
            });
        } else {
            /* exact pairwise exponents: every factor e^{G_i − G_j}, i ≥ j, is ≤ 1 for log gates ≤ 0 */
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd, o = i * VLDK + dd;
                float kv = 0.f, be = 0.f;
                if (i < n && d < p.K) {
                    kv = ld<T>(kc + i * rsk + d);
                    be = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * kv;
                }
                Ka[o] = kv;
                Kb[o] = be;
            }
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd, o = i * VLDK + dd;
                if (i >= n || d >= p.K) continue;
                const float Gi = Bv[o];
                float se = 0.f, sq = 0.f, sy = 0.f;
                for (int j = 0; j <= i; j++) {
                    const float f = expf(Gi - Bv[j * VLDK + dd]) * Ka[j * VLDK + dd];
                    se += Dm[i * LDN + j] * f; /* D_ii = 0 */
                    sq += Hm[i * LDN + j] * f;
                }
                for (int m = i; m < n; m++) {
                    const float f = expf(Bv[m * VLDK + dd] - Gi);
                    sy += (Dm[m * LDN + i] * Kb[m * VLDK + dd] + Hm[m * LDN + i] * sc * ld<T>(qc + m * rsk + d)) * f;
                }
                ek[o] += se;
                qk[o] += sq;
                yk[o] += sy;
            }
        }
        __syncthreads();
        /* chain rule to the inputs (row-wise: 4 threads per row, fixed order) */
        {
            float sdb = 0.f;
            if (row < n) {
                const size_t tok = tok0 + row;
                for (int jj = 0; jj < VKB / VP_PARTS; jj++) {
                    const int dd = part * (VKB / VP_PARTS) + jj, d = k0 + dd, o = row * VLDK + dd;
                    if (d >= p.K) break;
                    const float kv = ld<T>(kc + row * rsk + d), bv = vg_erase<T>(p, beta, b, tok, hv, d);
                    const float qs = sc * ld<T>(qc + row * rsk + d);
                    const float e_ = ek[o], y = yk[o], qq = qk[o];
                    const float dqv = sc * qq, dkv = e_ * bv + y, dbv = e_ * kv;
                    if (db) st<T>(db + (tok * p.HV + hv) * p.K + d, dbv);
                    sdb += dbv;
                    float Gb = e_ * bv * kv - y * kv + qq * qs;
                    if (row == n - 1) Gb += stv[dd] * expf(Gch[(size_t)(n - 1) * Kp + d]) + keyv[dd];
                    Ka[o] = Gb;
                    if (p.G == 1) {
                        const size_t qo = (tok * p.H + h) * p.K + d;
                        st<T>(dq + qo, dqv);
                        st<T>(dk + qo, dkv);
                    } else {
                        const size_t ao = (ch * BT + row) * Kp + d;
                        acc[ao] = dqv;
                        acc[(size_t)p.NC * p.HV * BT * Kp + ao] = dkv;
                    }
                }
            }
            sdb = vp_quad_sum(sdb);
            if (part == 0 && row < n) rdb[row] += sdb;
        }
        __syncthreads();
        /* ḡ: reverse in-chunk cumsum of Ḡ, per feature */
        if (tid < VKB && k0 + tid < p.K) {
            float s = 0.f;
            for (int i = n - 1; i >= 0; i--) {
                s += Ka[i * VLDK + tid];
                dg[((tok0 + i) * p.HV + hv) * p.K + k0 + tid] = s;
            }
        }
    }
    __syncthreads();
    if (dbeta)
        for (int i = tid; i < n; i += blockDim.x) st<T>(dbeta + (tok0 + i) * p.HV + hv, rdb[i]);
}

/* q̄, k̄ of grouped value heads: sum the fp32 partials of the HV/H value heads of each query/key head. */
template <class T>
__global__ void vec_gva_sum_kernel(Prob p, const float *acc, T *dq, T *dk) {
    const int c = blockIdx.x, h = blockIdx.y;
    const ChunkInfo ci = p.ctab[c];
    const size_t half = (size_t)p.NC * p.HV * p.BT * p.Kp;
    for (int e = threadIdx.x; e < ci.n * p.K; e += blockDim.x) {
        const int i = e / p.K, d = e - i * p.K;
        float sq = 0.f, sk = 0.f;
        for (int r = 0; r < p.G; r++) {
            const size_t ao = (((size_t)c * p.HV + h * p.G + r) * p.BT + i) * p.Kp + d;
            sq += acc[ao];
            sk += acc[half + ao];
        }
        const size_t qo = (((size_t)ci.tok0 + i) * p.H + h) * p.K + d;
        st<T>(dq + qo, sq);
        st<T>(dk + qo, sk);
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const void *beta, const void *b,
                       const void *w, const float *Gc, const float *A, const void *do_, const state_t *Sc,
                       const state_t *Sbar, const float *R, const float *PR, int wy, float *Wbar, float *acc, void *dq,
                       void *dk, void *dv, void *dbeta, void *db, void *dw, float *dg, cudaStream_t s) {
    const size_t smem = sizeof(float) * (size_t)vp_layout(p.Kp, wy).total;
    cudaError_t e = ensure_smem<vec_pullback_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    vec_pullback_kernel<T><<<grid, VP_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v,
                                                          (const T *)beta, (const T *)b, (const T *)w, Gc, A,
                                                          (const T *)do_, Sc, Sbar, R, PR, wy, Wbar, acc, (T *)dq,
                                                          (T *)dk, (T *)dv, (T *)dbeta, (T *)db, (T *)dw, dg);
    e = cudaGetLastError();
    if (e != cudaSuccess || p.G == 1) return e;
    vec_gva_sum_kernel<T><<<dim3(p.NC, p.H), 256, 0, s>>>(p, acc, (T *)dq, (T *)dk);
    return cudaGetLastError();
}

cudaError_t launch_vec_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                                const void *beta, const void *b, const void *w, const float *Gc, const float *A,
                                const void *do_, const state_t *Sc, const state_t *Sbar, const float *R,
                                const float *PR, int wy, float *Wbar, float *acc, void *dq, void *dk, void *dv,
                                void *dbeta, void *db, void *dw, float *dg, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) {
        return run<decltype(t)>(p, q, k, v, beta, b, w, Gc, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta,
                                db, dw, dg, s);
    });
}

} // namespace rewy_cuda
