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
 * H_q's diagonal h_ii (factor γ_i/γ_i = 1) stays out of these products: it adds scale·h_ii k_i to q̄ and
 * h_ii Q_i to k̄ directly and nothing to Ḡ, where its two terms (in qk⊙Q and yk⊙k) cancel exactly. Through
 * the two tf32 products, with K⊙ζ and Q⊙α rounded differently, they left ~1e-5 in every ḡ of the chunk
 * (pullback.cu's header has the case).
 * (α = e^{G−c}, ζ = e^{c−G}, midpoint center c per chunk and feature. When the chunk's half range
 * exceeds vec_centered's limit, this general kernel takes exact pairwise exponents; the fast kernel
 * below takes the blocked form of MATH §6, as the CPU's INTRA_BLOCKED.)
 *   q̄ = scale·qk,  k̄ = ek⊙b + yk,  b̄ = ek⊙k,  Ḡ = ek⊙b⊙k − yk⊙k + qk⊙Q
 *   Ḡ_{n−1} += diag(S̄⁺S_cᵀ)⊙γ_n + Σ_j F_j⊙F̄_j,   ḡ = reverse in-chunk cumsum of Ḡ
 *   KDA: β̄ = Σ_K b̄ + Σ_V W̄_e;  GDN2: b̄ [K] and w̄ = W̄_e [V] independently.
 * q̄, k̄ of grouped value heads (HV > H) go to fp32 partials and vec_gva_sum_kernel adds them in
 * a fixed order (deterministic).
 *
 * One block per (chunk, value head), 256 threads. V in 32-column slabs, K in 32-feature slabs;
 * all products are bgemm (tf32 tensor cores, fp32 accumulation) with epilogues that accumulate
 * into shared fp32 tiles. Correctness-first: plain loads, no prefetch. This is the general path
 * (fp32 inputs, other sizes); vec_pullback_fast_kernel below is the 2-byte, chunk-64, K ≤ 128 path. */
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
    int Dm, Hm, As, Pv, Rv, Ov, Bv, Scs, Sbs, acc3, kab, mid, stv, keyv, rdb, hd, red, total;
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
    L.hd = o; o += MAXBT;                /* H_q's diagonal */
    L.red = o; o += 32;
    L.total = o;
    return L;
}

template <class T>
__global__ void __launch_bounds__(VP_THREADS)
vec_pullback_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const T *b, const T *w,
                    const float *Gc, const float *A, const T *do_, const state_t *Sc, const state_t *Sbar,
                    const rp_t *R, const rp_t *PR, int wy, float *Wbar, float *acc, T *dq, T *dk, T *dv,
                    T *dbeta, T *db, T *dw, const float *graw, float *dg) {
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
    float *hd = sm + L.hd;
    float *Zs = ek, *Es = yk, *Tm = ek; /* WY aliases (used before pass B) */
    float *Ab = Ka;

    const size_t tok0 = (size_t)ci.tok0, ch = (size_t)c * p.HV + hv;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const float *Gch = Gc + ch * BT * Kp;
    const PbSlices<T> hs = pb_slices<T>(p, ch, tok0, hv, R, PR, Sc, Sbar, do_, v); /* this chunk and value head's */
    const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
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
    const bool centered = vec_centered(p, half_range);

    /* ---- pass A, over V slabs: P (WY: AᵀR̄), v̄, w̄, Σ_V W̄_e; D ← P Rᵀ (WY: Ā ← R̄ Zᵀ); H_q ← Ō Rᵀ ---- */
    for (int v0 = 0; v0 < p.V; v0 += VPV) {
        __syncthreads();
        copy_tile_to(Rv, VLDK, BT, VPV, hs.R, p.V, n, v0, p.V);
        copy_tile_to(wy ? Bv : Pv, VLDK, BT, VPV, hs.PR, p.V, n, v0, p.V);
        for (int e = tid; e < BT * VPV; e += blockDim.x) {
            const int i = e / VPV, j = e - i * VPV, ve = v0 + j;
            const bool ok = i < n && ve < p.V;
            Ov[i * VLDK + j] = ok ? ld<T>(hs.dO + i * rsv + ve) : 0.f;
            if (wy) Zs[i * VLDK + j] = ok ? vg_write<T>(p, beta, w, tok0 + i, hv, ve) * ld<T>(hs.v + i * rsv + ve) : 0.f;
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
                        const float pv = Pv[row * VLDK + j], vv = ld<T>(hs.v + row * rsv + ve);
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
                copy_tile_to(Bv, VLDK, BT, VPV, hs.PR, p.V, n, v0, p.V);
                copy_tile<state_t>(Scs, VLDS, VKB, VPV, hs.Sc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
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
    /* masks: D strict (ReWY: D = −𝓛_<(P Rᵀ); WY: 𝓛_<(M̄)), H_q strict with its diagonal apart in hd (see the header) */
    for (int e = tid; e < MAXBT * MAXBT; e += blockDim.x) {
        const int i = e / MAXBT, j = e - i * MAXBT;
        const float d = Dm[i * LDN + j];
        Dm[i * LDN + j] = (i < n && j < i) ? (wy ? d : -d) : 0.f;
        if (j == i) hd[i] = i < n ? Hm[i * LDN + i] : 0.f;
        if (!(i < n && j < i)) Hm[i * LDN + j] = 0.f;
    }

    /* ---- pass B, over 32-feature slabs ---- */
    for (int k0 = 0; k0 < Kp; k0 += VKB) {
        __syncthreads();
        for (int e = tid; e < 3 * MAXBT * VLDK; e += blockDim.x) ek[e] = 0.f;
        if (tid < VKB) stv[tid] = 0.f;
        /* Ē_dir (ReWY: −P S_cᵀ), Ō S_cᵀ, F̄ = R S̄⁺ᵀ, diag(S̄⁺ S_cᵀ) */
        for (int v0 = 0; v0 < p.V; v0 += VPV) {
            __syncthreads();
            copy_tile_to(Rv, VLDK, BT, VPV, hs.R, p.V, n, v0, p.V);
            if (!wy) copy_tile_to(Pv, VLDK, BT, VPV, hs.PR, p.V, n, v0, p.V);
            copy_tile<state_t>(Scs, VLDS, VKB, VPV, hs.Sc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
            copy_tile<state_t>(Sbs, VLDS, VKB, VPV, hs.Sb + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
            for (int e = tid; e < BT * VPV; e += blockDim.x) {
                const int i = e / VPV, j = e - i * VPV;
                Ov[i * VLDK + j] = (i < n && v0 + j < p.V) ? ld<T>(hs.dO + i * rsv + v0 + j) : 0.f;
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
                    /* H_q's diagonal: q̄ += scale·h_ii k_i, k̄ += h_ii Q_i, nothing to Ḡ */
                    const float dqv = sc * (qq + hd[row] * kv), dkv = e_ * bv + y + hd[row] * qs, dbv = e_ * kv;
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
                const size_t x = ((tok0 + i) * p.HV + hv) * p.K + k0 + tid;
                dg[x] = rewy_gate_grad(graw[x], s, p.zero_h0 && ci.idx == 0 && i == 0); /* floored, or first from 0 (gates.h) */
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

/* ==== The fast path: 2-byte inputs, chunk 64, K ≤ KS ∈ {64, 128}, V a multiple of 8 ====
 * Same math as vec_pullback_kernel above (its header names every term), laid out like
 * pullback_fast_kernel (pullback.cu): one block of 16 warps per (chunk, value head); warp w owns
 * rows 16(w%4)… and a quarter (w/4) of the columns of every K-wide result and of the 64×64 ones,
 * and keeps them in registers as mma fragments over the whole chunk:
 *   Eh: P S_cᵀ (ReWY; Ē_dir = −Eh) or, WY, R̄ S_cᵀ = −W̄ and then Ē_dir = Aᵀ W̄;   Qh: Ō S_cᵀ;
 *   Fh: F̄ = R S̄⁺ᵀ;   Dh: P Rᵀ (WY: R̄ Zᵀ, then AᵀĀAᵀ);   Hh: Ō Rᵀ.
 * The V slabs (64 columns) are read once. After the V loop the feature-local factors are applied
 * element by element from the chunk's G tile (fp32, resident): Eh ← γ⊙Ē_dir, Qh ← γ⊙Qh,
 * Fh ← e^{G_n−G}⊙F̄, and the intra terms join through one temporary fragment at a time:
 *   Eh += α⊙(D (K⊙ζ)),  Qh += α⊙(H_q (K⊙ζ)),  Fh += ζ⊙(Dᵀ(b⊙K⊙α) + H_qᵀ(Q⊙α)),
 * with the scaled operands formed once in shared memory as fp32, transposed ([feature][token]:
 * k-contiguous B operands), and D, H_q stored masked with their transposes (k-contiguous A
 * operands). The triangular masks bound the inner dimension: D, H_q rows i0… need tokens < i0+16,
 * their transposes tokens ≥ i0. Chunks too wide for one center (half range over vec_centered's limit:
 * strong decay, resets; most chunks of real KDA gates) take the blocked form of MATH §6 (INTRA_BLOCKED of
 * src/cpu/chunk_common.c): the same products cut into 16×16 tiles of D, H_q (a 16-token block is a warp's row
 * tile), operands built once with a reference per block and feature (its midpoint center, or its block ends
 * when its own half range is over the limit), one exponential per output element and tile, every factor
 * ≤ 1 off the diagonal; per-element exponents only over a diagonal tile whose own half range is over the
 * limit, and pairwise loops over the whole chunk only for gates rising (g > 0) past the limit. The
 * products and their load balance are those of the centered path. The epilogue forms q̄, k̄,
 * b̄, Ḡ from the registers; β̄ and the reverse cumsum of Ḡ (segmented over 512/KS row segments)
 * are fixed-order reductions. WY forms P = AᵀR̄ and Z = w⊙V per slab and, after the V loop,
 * Ā = R̄Zᵀ + W̄Eᵀ, D = 𝓛_<(−AᵀĀAᵀ) and Ē_dir = AᵀW̄ with W̄ in shared memory.
 * V-slab copies run one slab ahead of the math with the schedule and barriers of pullback_fast_kernel
 * (pullback.cu). The double-buffered set is fixed at compile time (vf_db): the block's size is set by the
 * K-side stage (Dm … Qa) and the G tile, so ReWY double-buffers all six tiles at no extra cost at K = 128
 * (224,896 B; 151,680 B at K = 64); WY keeps A clear of the V slabs and of its W̄ stage, which leaves room
 * for two buffers of Ō, S_c, S̄⁺ only at K = 128 (224,896 B): R̄ and V take the next slab's copy at the mid
 * barrier B2, R at the top of its own slab; at K = 64 WY double-buffers everything (178,304 B). P (or R̄) and
 * R are bf16 tiles (rp_t), so the V-slab products run on bf_mma for bf16 inputs. */
constexpr int VF_THREADS = 512;
constexpr int VF_NW = VF_THREADS / 32;
constexpr int VF_BV = 64;          /* V slab */
constexpr int VF_LDF = VF_BV + 4;  /* fp32 V-slab tiles [64][68] */
constexpr int VF_LDH = VF_BV + 8;  /* 16-bit and state V-slab tiles [rows][72] */
constexpr int VF_LDR = sizeof(rp_t) == 2 ? VF_LDH : VF_LDF; /* rp_t V-slab tiles: P (or R̄), R */
constexpr int VF_BLK = 16;         /* blocked path (MATH §6): tokens per block = the warps' row tiles */
constexpr int VF_NB = MAXBT / VF_BLK;
constexpr int VF_LN = MAXBT + 8;   /* n×n fp32 tiles and transposed K-side operands [KS][72] (≡ 8 mod 32 words) */

/* byte offsets of the fast vector pullback's shared memory */
struct VfLayout {
    int slab[SL_NT][2];                  /* V-slab tiles PR (P; WY R̄), V, R, Ō, S_c, S̄⁺: buffers 0, 1 (equal: one) */
    int db;                              /* double-buffered V-slab tiles (bit set over SL_*) */
    int Ps, Zs;                          /* WY: P = AᵀR̄, w⊙V of the slab (computed) */
    int Stg, Ab, Tm, Wb, Es, As;         /* after the V loop: K, Q, b staged (input type); WY */
    int Dm, Dt, Hm, Ht, Kz, Bk, Qa, Gb;  /* K side (Gb: Ḡ tile over Kz at the end) */
    int Gs, sf, total;                   /* resident: G tile, small arrays */
    int stg, nn, kt, gt;                 /* region sizes */
};
__host__ __device__ constexpr VfLayout vf_layout(int KS, bool wy, unsigned db) {
    VfLayout L = {};
    const int f = MAXBT * VF_LDF * 4, hh = MAXBT * VF_LDH * 2, s = KS * VF_LDH * (int)sizeof(state_t);
    L.nn = MAXBT * VF_LN * 4;
    L.kt = KS * VF_LN * 4;
    L.stg = MAXBT * (KS + 8) * 2;
    L.gt = MAXBT * (KS + 4) * 4;
    const int r = MAXBT * VF_LDR * (int)sizeof(rp_t);
    const int sz[SL_NT] = {r, hh, r, hh, s, s};
    L.db = (int)db;
    int o = place_slabs(L.slab, sz, db, 0);
    L.Ps = o; o += wy ? r : 0; /* WY: P slab (ReWY: P is the PR tile) */
    L.Zs = o; o += wy ? f : 0; /* WY: w⊙V slab */
    const int x1 = o;
    o = 0;
    L.Stg = o; o += 3 * L.stg;
    L.Ab = o; o += wy ? L.nn : 0;
    L.Tm = o; o += wy ? L.nn : 0;
    L.Wb = o; o += wy ? L.gt : 0;
    L.Es = o; o += wy ? L.gt : 0;
    L.As = x1 > o ? x1 : o;    /* WY: A, clear of the V slabs and of the W̄ stage; dead before the K side */
    const int a_end = L.As + (wy ? L.nn : 0);
    o = 0;
    L.Dm = o; o += L.nn;
    L.Dt = o; o += L.nn;
    L.Hm = o; o += L.nn;
    L.Ht = o; o += L.nn;
    L.Kz = o; o += L.kt;
    L.Bk = o; o += L.kt;
    L.Qa = o; o += L.kt;
    L.Gb = L.Kz;
    o = o > a_end ? o : a_end;
    L.Gs = o; o += L.gt;
    /* mid, stv [KS]; keyp [4][KS]; segs [512]; rowg, rdb, hd [64]; redb [4][64]; red [32] */
    L.sf = o; o += 4 * (6 * KS + VF_THREADS + 3 * MAXBT + 4 * MAXBT + 32);
    L.total = o;
    return L;
}
/* The double-buffered V-slab tiles of the fast kernel: the first set of sl_db_pref whose layout fits an
 * H200/H100 block (232,448 B). Launches check the device (smem_optin) and otherwise take the general kernel. */
__host__ __device__ constexpr unsigned vf_db(int KS, bool wy) {
    for (int i = 0; i < SL_NPREF; i++)
        if (vf_layout(KS, wy, sl_db_pref(i)).total <= 232448) return sl_db_pref(i);
    return 0u;
}
__host__ __device__ constexpr VfLayout vf_layout(int KS, bool wy) { return vf_layout(KS, wy, vf_db(KS, wy)); }

/* two adjacent outputs (j, j+1) of a row; `two`: j+1 exists; `pair`: one 4-byte store (aligned) */
template <class T>
__device__ __forceinline__ void vf_st2(T *dst, float x, float y, bool two, bool pair) {
    typedef typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type T2;
    if (two && pair) {
        T2 v;
        st<T>(reinterpret_cast<T *>(&v), x);
        st<T>(reinterpret_cast<T *>(&v) + 1, y);
        *reinterpret_cast<T2 *>(dst) = v;
    } else {
        st<T>(dst, x);
        if (two) st<T>(dst + 1, y);
    }
}

template <class T, int KS, bool WY>
__global__ void __launch_bounds__(VF_THREADS)
vec_pullback_fast_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const T *b, const T *w,
                         const float *Gc, const float *A, const T *do_, const state_t *Sc, const state_t *Sbar,
                         const rp_t *R, const rp_t *PR, float *acc, T *dq, T *dk, T *dv, T *dbeta, T *db, T *dw,
                         const float *graw, float *dg) {
    extern __shared__ __align__(16) char smc[];
    constexpr int NSK = KS / 32;           /* 8-column blocks per warp in the K-wide results (KS/4 columns) */
    constexpr int NSN = 2;                 /* … in the 64×64 results (16 columns) */
    constexpr int LN = VF_LN, LDG = KS + 4, LDS = KS + 8;
    constexpr int LP = VF_THREADS / KS;    /* threads per feature in the per-feature stages (4 or 8) */
    constexpr VfLayout L = vf_layout(KS, WY);
    static_assert(KS == 64 || KS == 128, "K slab");
    static_assert(3 * L.stg <= 4 * L.nn, "the staged K, Q, b lie under Dm..Ht (dead before those are written)");
    static_assert(L.gt <= L.kt, "the Ḡ tile fits over Kz");
    static_assert(L.total <= 232448, "shared memory");
    static_assert(VF_NB * KS <= VF_THREADS && VF_NB <= 4, "the block centers fit in segs; redb holds VF_NB × VF_NW");
    static_assert(VF_BLK == 16 && VF_NB == 4, "the blocked path's blocks are the warps' 16-row tiles (rt = warp & 3)");
    const int c = blockIdx.x, hv = blockIdx.y, h = hv / p.G, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n, tok0 = ci.tok0;
    if (n == 0) return;
    float *Zs = reinterpret_cast<float *>(smc + L.Zs);
    T *Kst = reinterpret_cast<T *>(smc + L.Stg);   /* [64][KS+8] row-major, input type */
    T *Qst = Kst + MAXBT * LDS, *Bst = Qst + MAXBT * LDS;
    float *Ab = reinterpret_cast<float *>(smc + L.Ab), *Tm = reinterpret_cast<float *>(smc + L.Tm);
    float *Wb = reinterpret_cast<float *>(smc + L.Wb), *Es = reinterpret_cast<float *>(smc + L.Es);
    float *As = reinterpret_cast<float *>(smc + L.As);
    float *Dm = reinterpret_cast<float *>(smc + L.Dm), *Dt = reinterpret_cast<float *>(smc + L.Dt);
    float *Hm = reinterpret_cast<float *>(smc + L.Hm), *Ht = reinterpret_cast<float *>(smc + L.Ht);
    float *Kz = reinterpret_cast<float *>(smc + L.Kz), *Bk = reinterpret_cast<float *>(smc + L.Bk);
    float *Qa = reinterpret_cast<float *>(smc + L.Qa), *Gbt = reinterpret_cast<float *>(smc + L.Gb);
    float *Gs = reinterpret_cast<float *>(smc + L.Gs); /* [64][KS+4] G of the chunk (rows ≥ n, features ≥ Kp zero) */
    float *mid = reinterpret_cast<float *>(smc + L.sf), *stv = mid + KS, *keyp = stv + KS;
    float *segs = keyp + 4 * KS, *rowg = segs + VF_THREADS, *rdb = rowg + MAXBT, *redb = rdb + MAXBT;
    float *red = redb + 4 * MAXBT, *hd = red + 32; /* hd [64]: H_q's diagonal */
    float *cblk = segs; /* [VF_NB][KS] block centers (blocked path); segs is written only by the final cumsum */

    const int rt = warp & 3, cq = warp >> 2;  /* this warp's row tile and column quarter */
    const int i0 = rt * 16, jk = cq * (KS / 4), jn = cq * 16;
    const size_t ch = (size_t)c * p.HV + hv;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V, rsb = (size_t)p.HV * p.K;
    const float *Gch = Gc + ch * MAXBT * p.Kp;
    const PbSlices<T> hs = pb_slices<T>(p, ch, tok0, hv, R, PR, Sc, Sbar, do_, v); /* this chunk and value head's */
    const T *kc = k + ((size_t)tok0 * p.H + h) * p.K, *qc = q + ((size_t)tok0 * p.H + h) * p.K;
    const T *bc = b ? b + ((size_t)tok0 * p.HV + hv) * p.K : nullptr; /* GDN2 erase gate rows */
    const T *wc = w ? w + (size_t)tok0 * rsv + (size_t)hv * p.V : nullptr; /* GDN2 write gate rows */
    const float sc = p.scale;
    const int lf = tid / LP, lpart = tid % LP; /* per-feature stages: feature lf, LP lanes per feature */

    /* ---- setup: G tile, A (WY), the row gate β (KDA; erase = write = β) ---- */
    copy_tile<float>(Gs, LDG, MAXBT, KS, Gch, p.Kp, n, 0, p.Kp);
    if (WY) copy_tile<float>(As, LN, MAXBT, MAXBT, A + ch * MAXBT * MAXBT, MAXBT, MAXBT, 0, MAXBT);
    if (tid < MAXBT) {
        rowg[tid] = (beta && tid < n) ? ld<T>(beta + ((size_t)tok0 + tid) * p.HV + hv) : 0.f;
        rdb[tid] = 0.f;
    }

    float Eh[4][4] = {}, Qh[4][4] = {}, Fh[4][4] = {}, Dh[4][4] = {}, Hh[4][4] = {};
    float lam = 0.f; /* ⟨S̄⁺, S_c⟩ of feature lf, this thread's columns */

    /* copies of V slab sl's tiles in `set` (bits SL_*) into the buffers slab sl uses */
    const int ns = ceil_div(p.V, VF_BV);
    auto issue = [&](unsigned set, int sl) {
        copy_slab<T, VF_BV, VF_LDR, VF_LDH, KS, VF_THREADS>(smc, L.slab, set, sl, p, n, hs);
    };
    constexpr unsigned one_early = slab_early((unsigned)L.db); /* single PR, V tiles: refilled from B2 */
    issue(SL_ALL, 0); /* slab 0, in one group with the setup copies above; waited on at the top of slab 0 */
    cp_async_commit();

    /* ---- the V slabs: every product with a V-long inner dimension ----
     * Copies run one slab ahead, as in pullback_fast_kernel (pullback.cu; its header gives the schedule
     * and the barriers B1, B2, B3). */
    for (int sl = 0; sl < ns; sl++) {
        const int v0 = sl * VF_BV, b = sl & 1;
        slab_top(issue, (unsigned)L.db, sl, ns);
        const auto [Prs, Rs, Os, Vs, Scs, Sbs] = slab_tiles<T>(smc, L.slab, b); /* slab sl's tiles */
        const rp_t *Xs = Prs;                                              /* WY: R̄ */
        rp_t *Ps = WY ? reinterpret_cast<rp_t *>(smc + L.Ps) : Prs;        /* P */
        if (WY) { /* P = Aᵀ R̄,  Z = w⊙V */
            bgemm<VF_NW>(MAXBT, VF_BV, MAXBT, As, 1, LN, Xs, VF_LDR, 1,
                         [&](int i, int j, float cc) { st<rp_t>(Ps + i * VF_LDR + j, cc); });
            for (int e = tid; e < MAXBT * VF_BV; e += VF_THREADS) {
                const int i = e / VF_BV, j = e - i * VF_BV;
                float z = 0.f;
                if (i < n && v0 + j < p.V)
                    z = (wc ? ld<T>(wc + i * rsv + v0 + j) : rowg[i]) * ldf(Vs + i * VF_LDH + j);
                Zs[i * VF_LDF + j] = z;
            }
            __syncthreads();
        }
        { /* v̄ = w⊙P, w̄ = P⊙v (GDN2), ⟨P, v⟩ for β̄ (KDA): eight columns per thread, eight threads per row */
            const int i = tid >> 3, j = (tid & 7) * 8;
            float s = 0.f;
            if (i < n && v0 + j < p.V) {
                uint4 pk, pw;
                T *o8 = reinterpret_cast<T *>(&pk), *w8 = reinterpret_cast<T *>(&pw);
#pragma unroll
                for (int m = 0; m < 8; m++) {
                    const float pv = ldf(Ps + i * VF_LDR + j + m), vv = ldf(Vs + i * VF_LDH + j + m);
                    const float wg = wc ? ld<T>(wc + i * rsv + v0 + j + m) : rowg[i];
                    st<T>(o8 + m, wg * pv);
                    st<T>(w8 + m, pv * vv);
                    s += pv * vv;
                }
                const size_t go = ((size_t)tok0 + i) * rsv + (size_t)hv * p.V + v0 + j;
                *reinterpret_cast<uint4 *>(dv + go) = pk;
                if (dw) *reinterpret_cast<uint4 *>(dw + go) = pw;
            }
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            if ((tid & 7) == 0) rdb[i] += s;
        }
        { /* diag(S̄⁺ S_cᵀ): feature lf, VF_BV/LP columns per thread */
            constexpr int LC = VF_BV / LP;
            const state_t *x = Scs + lf * VF_LDH + lpart * LC, *y = Sbs + lf * VF_LDH + lpart * LC;
#pragma unroll
            for (int m = 0; m < LC; m++) lam += ldf(x + m) * ldf(y + m);
        }
        if (WY) {
            pf_mma<NSN, true, true>(Dh, VF_BV, Xs, VF_LDR, 1, Zs, 1, VF_LDF, i0, jn);   /* R̄ Zᵀ */
            pf_mma<NSK, true, true>(Eh, VF_BV, Xs, VF_LDR, 1, Scs, 1, VF_LDH, i0, jk);  /* R̄ S_cᵀ = −W̄ */
        } else {
            pf_mma<NSN, true, true>(Dh, VF_BV, Ps, VF_LDR, 1, Rs, 1, VF_LDR, i0, jn);   /* P Rᵀ */
            pf_mma<NSK, true, true>(Eh, VF_BV, Ps, VF_LDR, 1, Scs, 1, VF_LDH, i0, jk);  /* P S_cᵀ = −Ē_dir */
        }
        if constexpr (one_early != 0u) {
            __syncthreads(); /* B2: PR, V (and WY's P, Z) are read no more in this slab */
            if (sl + 1 < ns) issue(one_early, sl + 1);
            cp_async_commit();
        }
        /* second half: R, Ō, S_c, S̄⁺ only */
        pf_mma<NSN, true, true>(Hh, VF_BV, Os, VF_LDH, 1, Rs, 1, VF_LDR, i0, jn);       /* Ō Rᵀ */
        pf_mma<NSK, true, true>(Qh, VF_BV, Os, VF_LDH, 1, Scs, 1, VF_LDH, i0, jk);      /* Ō S_cᵀ */
        pf_mma<NSK, true, true>(Fh, VF_BV, Rs, VF_LDR, 1, Sbs, 1, VF_LDH, i0, jk);      /* F̄ = R S̄⁺ᵀ */
        __syncthreads(); /* B3: slab sl's buffers are free (the next top refills them) */
    }
    cp_async_wait_group<0>(); /* none in flight (the last slab issued none): the stages below go over the V slabs */

    /* ---- per feature: ⟨S̄⁺, S_c⟩, centers (same rule as vec_intra.cu), the chunk's half range ---- */
#pragma unroll
    for (int o = 1; o < LP; o <<= 1) lam += __shfl_xor_sync(0xffffffffu, lam, o);
    if (lpart == 0) stv[lf] = lam;
    {
        /* the chunk's range (min and max are exact in any order: the centered path's mid is unchanged) and, for
         * the blocked path, each 16-token block's center cblk and half range and the feature's rise (the sum
         * of its positive gate increments: 0 for log gates ≤ 0) */
        float lo = INFINITY, hi = -INFINITY, rise = 0.f;
#pragma unroll
        for (int bk = 0; bk < VF_NB; bk++) {
            float bl = INFINITY, bh = -INFINITY;
            for (int i = bk * VF_BLK + lpart; i < min(n, (bk + 1) * VF_BLK); i += LP) {
                const float x = Gs[i * LDG + lf];
                bl = fminf(bl, x);
                bh = fmaxf(bh, x);
                if (i > 0) rise += fmaxf(x - Gs[(i - 1) * LDG + lf], 0.f);
            }
#pragma unroll
            for (int o = 1; o < LP; o <<= 1) {
                bl = fminf(bl, __shfl_xor_sync(0xffffffffu, bl, o));
                bh = fmaxf(bh, __shfl_xor_sync(0xffffffffu, bh, o));
            }
            lo = fminf(lo, bl);
            hi = fmaxf(hi, bh);
            const bool some = bk * VF_BLK < n; /* an empty block: center 0, half range 0 (never read) */
            if (lpart == 0) cblk[bk * KS + lf] = some ? 0.5f * (bh + bl) : 0.f;
            float bhr = some ? 0.5f * (bh - bl) : 0.f;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) bhr = fmaxf(bhr, __shfl_xor_sync(0xffffffffu, bhr, o));
            if (lane == 0) redb[bk * VF_NW + warp] = bhr;
        }
#pragma unroll
        for (int o = 1; o < LP; o <<= 1) rise += __shfl_xor_sync(0xffffffffu, rise, o);
        if (lpart == 0) mid[lf] = 0.5f * (hi + lo);
        float hr = 0.5f * (hi - lo);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            hr = fmaxf(hr, __shfl_xor_sync(0xffffffffu, hr, o));
            rise = fmaxf(rise, __shfl_xor_sync(0xffffffffu, rise, o));
        }
        if (lane == 0) {
            red[warp] = hr;
            red[VF_NW + warp] = rise;
        }
    }
    /* K, Q (and b) of the chunk, row-major, for the K-side operands (the V slabs are dead: the loop ended
     * with a barrier) */
    copy_tile<T>(Kst, LDS, MAXBT, KS, kc, rsk, n, 0, p.K);
    copy_tile<T>(Qst, LDS, MAXBT, KS, qc, rsk, n, 0, p.K);
    if (bc) copy_tile<T>(Bst, LDS, MAXBT, KS, bc, rsb, n, 0, p.K);
    if (WY) {
        pf_each<NSN>(i0, jn, Dh, [&](int i, int j, int s, int e) { Ab[i * LN + j] = Dh[s][e]; });   /* R̄ Zᵀ */
        pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) { Wb[i * LDG + j] = -Eh[s][e]; }); /* W̄ */
    }
    cp_async_wait();
    __syncthreads();
    float half_range = 0.f;
#pragma unroll
    for (int wi = 0; wi < VF_NW; wi++) half_range = fmaxf(half_range, red[wi]);
    const bool centered = vec_centered(p, half_range);
    /* Not centered: blocked (MATH §6, as INTRA_BLOCKED of src/cpu/chunk_common.c) unless the gates rise
     * (g > 0, outside MATH §1) by more than the limit, then the whole-chunk pairwise loops. diag_pw bit B:
     * block B's own half range is over the limit (per-element exponents for its diagonal tile). These
     * reads of redb come before the chain rule's barrier; redb is written again only after it. */
    bool blocked = false;
    unsigned diag_pw = 0u;
    if (!centered) {
        const float lim = VEC_CENTER_LIMIT - 0.5f * fabsf(logf(fabsf(p.scale))); /* vec_centered's bound */
        float rise = 0.f;
#pragma unroll
        for (int wi = 0; wi < VF_NW; wi++) rise = fmaxf(rise, red[VF_NW + wi]);
        blocked = rise <= fmaxf(lim, 0.f);
#pragma unroll
        for (int bk = 0; bk < VF_NB; bk++) {
            float bh = 0.f;
#pragma unroll
            for (int wi = 0; wi < VF_NW; wi++) bh = fmaxf(bh, redb[bk * VF_NW + wi]);
            if (!vec_centered(p, bh)) diag_pw |= 1u << bk;
        }
    }
    /* The blocked path's per-(block, feature) references: r_B for block B as the columns J of D, H_q
     * (Kz = K⊙e^{r_B−G}), r'_B for B as their rows I (Bk, Qa ∝ e^{G−r'_B}): the block's midpoint center
     * c_B, or, for a block over the limit, its end ε_B and the end ε_{B−1} of the block before (0 for B = 0). */
    auto vf_rref = [&](int bk, int d) -> float {
        return ((diag_pw >> bk) & 1u) ? Gs[min(bk * VF_BLK + VF_BLK - 1, n - 1) * LDG + d] : cblk[bk * KS + d];
    };
    auto vf_cref = [&](int bk, int d) -> float {
        return ((diag_pw >> bk) & 1u) ? (bk ? Gs[(bk * VF_BLK - 1) * LDG + d] : 0.f) : cblk[bk * KS + d];
    };

    /* ---- WY: Ā = R̄ Zᵀ + W̄ Eᵀ (E = b⊙K⊙γ), Ē_dir = Aᵀ W̄ (into Eh), AᵀĀAᵀ = −M̄ (into Dh) ---- */
    if (WY) {
        for (int e = tid; e < MAXBT * KS; e += VF_THREADS) {
            const int i = e / KS, d = e - i * KS;
            float x = 0.f;
            if (i < n && d < p.K)
                x = (bc ? ldf(Bst + i * LDS + d) : rowg[i]) * ldf(Kst + i * LDS + d) * expf(Gs[i * LDG + d]);
            Es[i * LDG + d] = x;
        }
#pragma unroll
        for (int s = 0; s < 4; s++) Eh[s][0] = Eh[s][1] = Eh[s][2] = Eh[s][3] = 0.f;
        pf_mma<NSK, false, false>(Eh, MAXBT, As, 1, LN, Wb, LDG, 1, i0, jk);
        __syncthreads();
        bgemm<VF_NW>(MAXBT, MAXBT, KS, Wb, LDG, 1, Es, 1, LDG, [&](int i, int j, float cc) { Ab[i * LN + j] += cc; });
        __syncthreads();
        bgemm<VF_NW>(MAXBT, MAXBT, MAXBT, As, 1, LN, Ab, LN, 1, [&](int i, int j, float cc) { Tm[i * LN + j] = cc; });
        __syncthreads();
#pragma unroll
        for (int s = 0; s < 4; s++) Dh[s][0] = Dh[s][1] = Dh[s][2] = Dh[s][3] = 0.f;
        pf_mma<NSN, true, true>(Dh, MAXBT, Tm, LN, 1, As, 1, LN, i0, jn);
        __syncthreads(); /* the K-side operands go over Ab … As */
    }

    /* ---- K-side operands, transposed [feature][token] fp32: K⊙ζ, b⊙K⊙α, Q⊙α (Q = scale·q);
     * blocked: the same with each token's block references (vf_rref, vf_cref: K⊙e^{r_B−G}, b⊙K⊙e^{G−r'_B},
     * Q⊙e^{G−r'_B}); whole-chunk pairwise: K, b⊙K, Q (that path applies the pairwise exponents itself) ---- */
    for (int e = tid; e < MAXBT * KS; e += VF_THREADS) {
        const int j = e % MAXBT, d = e / MAXBT;
        float kz = 0.f, bk = 0.f, qa = 0.f;
        if (j < n && d < p.K) {
            const float kv = ldf(Kst + j * LDS + d), bv = bc ? ldf(Bst + j * LDS + d) : rowg[j];
            const float qv = sc * ldf(Qst + j * LDS + d);
            float a = 1.f, z = 1.f;
            if (centered) {
                const float x = Gs[j * LDG + d] - mid[d];
                a = expf(x);
                z = expf(-x);
            } else if (blocked) {
                const int bk_ = j / VF_BLK;
                const float G = Gs[j * LDG + d];
                z = expf(vf_rref(bk_, d) - G); /* ≤ e^{h_B} (centered block) or ≤ 1 (ε_B: G's minimum in B) */
                a = expf(G - vf_cref(bk_, d)); /* ≤ e^{h_B} or ≤ 1 (ε_{B−1} ≥ G in B) */
            }
            kz = kv * z;
            bk = bv * kv * a;
            qa = qv * a;
        }
        Kz[d * LN + j] = kz;
        Bk[d * LN + j] = bk;
        Qa[d * LN + j] = qa;
    }
    __syncthreads(); /* the staged K, Q, b are dead: Dm … Ht go over them */
    /* D = −𝓛_<(Dh) (ReWY: Dh = P Rᵀ; WY: Dh = AᵀĀAᵀ = −M̄), H_q = 𝓛_<(Ō Rᵀ), each with its transpose; H_q's
     * diagonal apart in hd (vec_pullback_kernel's header: it joins q̄, k̄ in the epilogue, never Ḡ) */
    pf_each<NSN>(i0, jn, Dh, [&](int i, int j, int s, int e) {
        const float d = (i < n && j < i) ? -Dh[s][e] : 0.f;
        const float hq = (i < n && j < i) ? Hh[s][e] : 0.f;
        if (j == i) hd[i] = i < n ? Hh[s][e] : 0.f;
        Dm[i * LN + j] = d;
        Dt[j * LN + i] = d;
        Hm[i * LN + j] = hq;
        Ht[j * LN + i] = hq;
    });
    /* feature-local scaling: ek = Ē_dir⊙γ, qk = (Ō S_cᵀ)⊙γ, yk = F̄⊙e^{G_n−G}; Σ_i k⊙yk (endpoint key term,
     * before the intra terms join yk) per column of this warp's row tile */
    {
        const float sE = WY ? 1.f : -1.f;
        float kcol[4][2] = {};
        pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) {
            float ev = 0.f, qv = 0.f, fv = 0.f;
            if (i < n && j < p.K) {
                const float G = Gs[i * LDG + j], gam = expf(G);
                ev = sE * Eh[s][e] * gam;
                qv = Qh[s][e] * gam;
                fv = Fh[s][e] * expf(Gs[(n - 1) * LDG + j] - G);
                kcol[s][e & 1] += ld<T>(kc + i * rsk + j) * fv;
            }
            Eh[s][e] = ev;
            Qh[s][e] = qv;
            Fh[s][e] = fv;
        });
#pragma unroll
        for (int s = 0; s < NSK; s++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                float x = kcol[s][u];
                x += __shfl_xor_sync(0xffffffffu, x, 4);
                x += __shfl_xor_sync(0xffffffffu, x, 8);
                x += __shfl_xor_sync(0xffffffffu, x, 16);
                if (g == 0) keyp[rt * KS + jk + 8 * s + 2 * t + u] = x;
            }
    }
    __syncthreads();

    /* ---- matrix intra (§6) ---- */
    if (centered) {
        float tm[4][4];
        auto zero = [&]() {
#pragma unroll
            for (int s = 0; s < 4; s++) tm[s][0] = tm[s][1] = tm[s][2] = tm[s][3] = 0.f;
        };
        /* acc += (α or ζ) ⊙ tm */
        auto fold = [&](float (&a)[4][4], bool alpha) {
            pf_each<NSK>(i0, jk, a, [&](int i, int j, int s, int e) {
                if (i < n && j < p.K) {
                    const float x = Gs[i * LDG + j] - mid[j];
                    a[s][e] += expf(alpha ? x : -x) * tm[s][e];
                }
            });
        };
        zero(); /* ek += α⊙(D (K⊙ζ)) */
        pf_mma<NSK, true, true>(tm, i0 + 16, Dm, LN, 1, Kz, 1, LN, i0, jk);
        fold(Eh, true);
        zero(); /* qk += α⊙(H_q (K⊙ζ)) */
        pf_mma<NSK, true, true>(tm, i0 + 16, Hm, LN, 1, Kz, 1, LN, i0, jk);
        fold(Qh, true);
        zero(); /* yk += ζ⊙(Dᵀ(b⊙K⊙α) + H_qᵀ(Q⊙α)) */
        pf_mma<NSK, true, true>(tm, MAXBT - i0, Dt + i0, LN, 1, Bk + i0, 1, LN, i0, jk);
        pf_mma<NSK, true, true>(tm, MAXBT - i0, Ht + i0, LN, 1, Qa + i0, 1, LN, i0, jk);
        fold(Fh, false);
    } else if (blocked) {
        /* Blocked form (MATH §6, end; mirrors INTRA_BLOCKED of src/cpu/chunk_common.c: blocked_apply,
         * blocked_apply_t, diag_apply, diag_apply_t). Blocks of VF_BLK = 16 tokens are the warps' row tiles:
         * this warp's rows i0… are block I = rt for the row side (Eh, Qh: γ⊙(D Y), γ⊙(H_q Y)) and block J = rt
         * for the column side (Fh: (Dᵀ E)⊘γ, (H_qᵀ Q_g)⊘γ). Per 16×16 tile of D, H_q one product of inner
         * dimension 16 and one exponential per output element:
         *   row side, J ≤ I:     Eh_i += e^{G_i − r_J} ⊙ (D[I,J] Kz_J),   Qh_i += e^{G_i − r_J} ⊙ (H_q[I,J] Kz_J)
         *   column side, I ≥ J:  Fh_j += e^{r'_I − G_j} ⊙ (D[I,J]ᵀ Bk_I + H_q[I,J]ᵀ Qa_I)
         * with Kz_J = K⊙e^{r_J − G}, Bk_I = b⊙K⊙e^{G − r'_I}, Qa_I = Q⊙e^{G − r'_I} (built above). The
         * references (vf_rref, vf_cref) of a block B whose half range h_B is within the limit are its midpoint
         * center c_B (r_B = r'_B = c_B: its diagonal tile is exactly the centered form, α ⊙ (D (K⊙ζ)) over the
         * block, and its operands are ≤ e^{h_B}); a block over the limit takes its block ends instead,
         * r_B = ε_B (G at its last token), r'_B = ε_{B−1} (ε_{−1} = 0, G before the chunk), its operands ≤ 1,
         * and its diagonal tile takes per-element exponents (below). Why no factor can overflow (log gates
         * ≤ 0, so G is non-increasing and c_B, ε_B lie between G at B's first token and ε_B = min_B G):
         *   e^{G_i − r_J}, i in a later block I > J: G_i ≤ ε_J ≤ r_J, so ≤ 1 (≤ e^{−h_J} for r_J = c_J);
         *   e^{r'_I − G_j}, j in an earlier block J < I: r'_I ≤ G at I's first token ≤ ε_{I−1} ≤ G_j, so ≤ 1;
         *   the diagonal tiles' α, ζ and the operands: ≤ e^{h_B} ≤ e^{limit} (centered blocks) or ≤ 1.
         * (rise > 0, gates outside MATH §1: every bound above gains a factor ≤ e^{rise} ≤ e^{limit}, as in the
         * CPU; wider rises took the pairwise loops.) This is the CPU's factorisation with the middle factor
         * e^{ε_{I−1} − ε_J} and the block's own offset e^{ε_J − c_J} folded into one per-(row, J) exponential
         * instead of a rebuilt operand, so the K-side tiles are built once and shared by all warps. A factor
         * ≤ 1 that underflows drops only terms whose exact decay e^{G_i − G_j} ≤ e^{G_i − r_J + h_J} is below
         * e^{−87 + limit} ≈ e^{−47} of |D||K| (and of |H_q||Q|): far under the products' tf32 rounding. */
        if (i0 < n) { /* warp-uniform: a block wholly past the chunk's end has no rows */
            const bool diag_el = (diag_pw >> rt) & 1u;
            float te[4][4];
            for (int bj = 0; bj <= rt; bj++) { /* row side, column block J = bj */
                if (bj == rt && diag_el) { /* per-element exponents over the diagonal tile, e^{G_i − G_m} ≤ 1 (token
                                              * m outermost: the accumulators keep static indices) */
                    for (int m = i0; m < min(n, i0 + VF_BLK); m++)
                        pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) {
                            if (m <= i && i < n && j < p.K) {
                                const float f = expf(Gs[i * LDG + j] - Gs[m * LDG + j]) * ld<T>(kc + m * rsk + j);
                                Eh[s][e] += Dm[i * LN + m] * f; /* D_ii = 0 */
                                Qh[s][e] += Hm[i * LN + m] * f;
                            }
                        });
                    continue;
                }
                /* acc += e^{G_i − r_J} ⊙ tile (the factor formed again for Qh: one temporary live, not two) */
                auto fold = [&](float (&a)[4][4]) {
                    pf_each<NSK>(i0, jk, a, [&](int i, int j, int s, int e) {
                        if (i < n && j < p.K) a[s][e] += expf(Gs[i * LDG + j] - vf_rref(bj, j)) * te[s][e];
                    });
                };
#pragma unroll
                for (int s = 0; s < 4; s++) te[s][0] = te[s][1] = te[s][2] = te[s][3] = 0.f;
                pf_mma<NSK, true, true>(te, VF_BLK, Dm + bj * VF_BLK, LN, 1, Kz + bj * VF_BLK, 1, LN, i0, jk);
                fold(Eh);
#pragma unroll
                for (int s = 0; s < 4; s++) te[s][0] = te[s][1] = te[s][2] = te[s][3] = 0.f;
                pf_mma<NSK, true, true>(te, VF_BLK, Hm + bj * VF_BLK, LN, 1, Kz + bj * VF_BLK, 1, LN, i0, jk);
                fold(Qh);
            }
            for (int bi = rt; bi < VF_NB && bi * VF_BLK < n; bi++) { /* column side, row block I = bi */
                if (bi == rt && diag_el) { /* per-element exponents over the diagonal tile, e^{G_m − G_j} ≤ 1 */
                    for (int m = i0; m < min(n, i0 + VF_BLK); m++)
                        pf_each<NSK>(i0, jk, Fh, [&](int i, int j, int s, int e) {
                            if (m >= i && i < n && j < p.K) {
                                const float f = expf(Gs[m * LDG + j] - Gs[i * LDG + j]);
                                const float bv = bc ? ld<T>(bc + m * rsb + j) : rowg[m];
                                const float x = Dt[i * LN + m] * bv * ld<T>(kc + m * rsk + j) +
                                                Ht[i * LN + m] * sc * ld<T>(qc + m * rsk + j);
                                Fh[s][e] += x * f;
                            }
                        });
                    continue;
                }
#pragma unroll
                for (int s = 0; s < 4; s++) te[s][0] = te[s][1] = te[s][2] = te[s][3] = 0.f;
                pf_mma<NSK, true, true>(te, VF_BLK, Dt + bi * VF_BLK, LN, 1, Bk + bi * VF_BLK, 1, LN, i0, jk);
                pf_mma<NSK, true, true>(te, VF_BLK, Ht + bi * VF_BLK, LN, 1, Qa + bi * VF_BLK, 1, LN, i0, jk);
                pf_each<NSK>(i0, jk, Fh, [&](int i, int j, int s, int e) {
                    if (i < n && j < p.K) Fh[s][e] += expf(vf_cref(bi, j) - Gs[i * LDG + j]) * te[s][e];
                });
            }
        }
    } else {
        /* exact pairwise exponents: every factor e^{G_i − G_j}, i ≥ j, is ≤ 1 for log gates ≤ 0 (only chunks
         * whose gates rise, g > 0, by more than the limit come here) */
        pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) {
            if (i >= n || j >= p.K) return;
            const float Gi = Gs[i * LDG + j];
            float se = 0.f, sq = 0.f, sy = 0.f;
            for (int m = 0; m <= i; m++) {
                const float f = expf(Gi - Gs[m * LDG + j]) * Kz[j * LN + m];
                se += Dm[i * LN + m] * f; /* D_ii = 0 */
                sq += Hm[i * LN + m] * f;
            }
            for (int m = i; m < n; m++) {
                const float f = expf(Gs[m * LDG + j] - Gi);
                sy += (Dt[i * LN + m] * Bk[j * LN + m] + Ht[i * LN + m] * Qa[j * LN + m]) * f;
            }
            Eh[s][e] += se;
            Qh[s][e] += sq;
            Fh[s][e] += sy;
        });
    }
    __syncthreads(); /* the Ḡ tile goes over Kz */

    /* ---- chain rule to the inputs, from the registers: q̄ = scale·(qk + h_ii k), k̄ = ek⊙b + yk + h_ii Q, b̄ = ek⊙k,
     * Ḡ = ek⊙b⊙k − yk⊙k + qk⊙Q; after this Eh holds b̄, Fh k̄, Qh q̄ ---- */
    float sb[2] = {0.f, 0.f};
    pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) {
        float gb = 0.f;
        if (i < n && j < p.K) {
            const float kk = ld<T>(kc + i * rsk + j), bb = bc ? ld<T>(bc + i * rsb + j) : rowg[i];
            const float qs = sc * ld<T>(qc + i * rsk + j);
            const float ek = Eh[s][e], yk = Fh[s][e], qk = Qh[s][e];
            const float dbv = ek * kk;
            sb[e >> 1] += dbv;
            gb = ek * bb * kk - yk * kk + qk * qs;
            Eh[s][e] = dbv;
            Fh[s][e] = ek * bb + yk + hd[i] * qs;
            Qh[s][e] = sc * (qk + hd[i] * kk);
        }
        Gbt[i * LDG + j] = gb;
    });
    {
        const bool pair = (p.K & 1) == 0; /* then (row, even j) pairs are 4-byte aligned */
        pf_each<NSK>(i0, jk, Eh, [&](int i, int j, int s, int e) {
            if ((e & 1) || i >= n || j >= p.K) return;
            const bool two = j + 1 < p.K;
            if (p.G == 1) {
                const size_t o = ((size_t)(tok0 + i) * p.H + h) * p.K + j;
                vf_st2<T>(dq + o, Qh[s][e], Qh[s][e + 1], two, pair);
                vf_st2<T>(dk + o, Fh[s][e], Fh[s][e + 1], two, pair);
            } else { /* GVA: fp32 partials, summed over the group by vec_gva_sum_kernel */
                const size_t ao = (ch * MAXBT + i) * p.Kp + j, half = (size_t)p.NC * p.HV * MAXBT * p.Kp;
                acc[ao] = Qh[s][e];
                acc[half + ao] = Fh[s][e];
                if (two) {
                    acc[ao + 1] = Qh[s][e + 1];
                    acc[half + ao + 1] = Fh[s][e + 1];
                }
            }
            if (db) vf_st2<T>(db + ((size_t)(tok0 + i) * p.HV + hv) * p.K + j, Eh[s][e], Eh[s][e + 1], two, pair);
        });
    }
#pragma unroll
    for (int u = 0; u < 2; u++) sb[u] = sum4(sb[u]);
    if (t == 0) {
        redb[cq * MAXBT + i0 + g] = sb[0];
        redb[cq * MAXBT + i0 + g + 8] = sb[1];
    }
    __syncthreads();

    /* ---- β̄ = Σ_V W̄_e + Σ_K b̄ (KDA); ḡ = reverse in-chunk cumsum of Ḡ, over NSEG row segments, with
     * Ḡ_{n−1} += diag(S̄⁺S_cᵀ)⊙γ_n + Σ_j k_j⊙yk_j ---- */
    if (dbeta && tid < n) {
        float x = rdb[tid];
#pragma unroll
        for (int u = 0; u < 4; u++) x += redb[u * MAXBT + tid];
        st<T>(dbeta + ((size_t)tok0 + tid) * p.HV + hv, x);
    }
    constexpr int NSEG = VF_THREADS / KS, RS = MAXBT / NSEG;
    const int cd = tid % KS, seg = tid / KS, r0 = seg * RS, r1 = min(r0 + RS, n);
    {
        float s = 0.f;
        for (int i = r0; i < r1; i++) s += Gbt[i * LDG + cd];
        segs[seg * KS + cd] = s;
    }
    __syncthreads();
    if (dg && cd < p.K && r0 < n) {
        float s = stv[cd] * expf(Gs[(n - 1) * LDG + cd]);
        float kv = 0.f;
#pragma unroll
        for (int u = 0; u < 4; u++) kv += keyp[u * KS + cd];
        s += kv;
        for (int u = NSEG - 1; u > seg; u--) s += segs[u * KS + cd];
        for (int i = r1 - 1; i >= r0; i--) {
            s += Gbt[i * LDG + cd];
            const size_t x = ((size_t)(tok0 + i) * p.HV + hv) * p.K + cd;
            dg[x] = rewy_gate_grad(graw[x], s, p.zero_h0 && ci.idx == 0 && i == 0); /* floored, or first from 0 (gates.h) */
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const void *beta, const void *b,
                       const void *w, const float *Gc, const float *A, const void *do_, const state_t *Sc,
                       const state_t *Sbar, const rp_t *R, const rp_t *PR, int wy, float *Wbar, float *acc, void *dq,
                       void *dk, void *dv, void *dbeta, void *db, void *dw, const float *graw, float *dg, cudaStream_t s) {
    if constexpr (sizeof(T) == 2) {
        /* the fast path (see vec_pullback_fast_kernel) where its tiles apply and its shared memory fits */
        auto aligned = [](const void *x, uintptr_t a) { return ((uintptr_t)x & (a - 1)) == 0; };
        const bool al = aligned(dv, 16) && (!dw || aligned(dw, 16)) && aligned(dq, 4) && aligned(dk, 4) &&
                        (!db || aligned(db, 4));
        if (p.BT == MAXBT && p.K <= 128 && p.V % 8 == 0 && al) {
            bool launched = false;
            auto go = [&](auto ks, auto wyc) {
                constexpr int KS = decltype(ks)::value;
                constexpr bool WY = decltype(wyc)::value;
                constexpr size_t sm = vf_layout(KS, WY).total;
                if (sm > p.plan.smem_optin || ensure_smem<vec_pullback_fast_kernel<T, KS, WY>>(sm) != cudaSuccess) return;
                vec_pullback_fast_kernel<T, KS, WY><<<dim3(p.NC, p.HV), VF_THREADS, sm, s>>>(
                    p, (const T *)q, (const T *)k, (const T *)v, (const T *)beta, (const T *)b, (const T *)w, Gc, A,
                    (const T *)do_, Sc, Sbar, R, PR, acc, (T *)dq, (T *)dk, (T *)dv, (T *)dbeta, (T *)db, (T *)dw, graw, dg);
                launched = true;
            };
            using K64 = std::integral_constant<int, 64>;
            using K128 = std::integral_constant<int, 128>;
            if (p.K <= 64) wy ? go(K64{}, std::true_type{}) : go(K64{}, std::false_type{});
            else wy ? go(K128{}, std::true_type{}) : go(K128{}, std::false_type{});
            if (launched) {
                cudaError_t e = cudaGetLastError();
                if (e != cudaSuccess || p.G == 1) return e;
                vec_gva_sum_kernel<T><<<dim3(p.NC, p.H), 256, 0, s>>>(p, acc, (T *)dq, (T *)dk);
                return cudaGetLastError();
            }
        }
    }
    const size_t smem = sizeof(float) * (size_t)vp_layout(p.Kp, wy).total;
    cudaError_t e = ensure_smem<vec_pullback_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    vec_pullback_kernel<T><<<grid, VP_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v,
                                                          (const T *)beta, (const T *)b, (const T *)w, Gc, A,
                                                          (const T *)do_, Sc, Sbar, R, PR, wy, Wbar, acc, (T *)dq,
                                                          (T *)dk, (T *)dv, (T *)dbeta, (T *)db, (T *)dw, graw, dg);
    e = cudaGetLastError();
    if (e != cudaSuccess || p.G == 1) return e;
    vec_gva_sum_kernel<T><<<dim3(p.NC, p.H), 256, 0, s>>>(p, acc, (T *)dq, (T *)dk);
    return cudaGetLastError();
}

cudaError_t launch_vec_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                                const void *beta, const void *b, const void *w, const float *Gc, const float *A,
                                const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R,
                                const rp_t *PR, int wy, float *Wbar, float *acc, void *dq, void *dk, void *dv,
                                void *dbeta, void *db, void *dw, const float *graw, float *dg, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) {
        return run<decltype(t)>(p, q, k, v, beta, b, w, Gc, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta,
                                db, dw, graw, dg, s);
    });
}

} // namespace rewy_cuda
