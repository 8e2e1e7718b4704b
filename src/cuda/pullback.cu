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
 * This general kernel takes Γ_H's diagonal (h_ii, decay e^0 = 1) out of T3, T4: it adds scale·h_ii k_i to dq
 * and scale·h_ii q_i to dk directly, and nothing to Ḡ, where its two terms ⟨Q, T3⟩ and −⟨k, T4⟩ cancel
 * exactly. Through two tf32 products with fp32 q, k they left a residual of ~1e-5 (tf32's 2^-11 of
 * h_ii⟨q, k⟩) in every ḡ of the chunk, larger than the whole ḡ where the states before a chunk's last
 * write are near 0 (issue 25's campaign). The fast kernel's bf16 operands make both products exact.
 * Tiles: V in 64-column slabs; K in 64-column slabs (32 for WY and for fp32 inputs, to fit shared
 * memory). Every product runs on the tensor cores (tf32) and its epilogue adds its terms straight
 * into four [64][bk] accumulators (k̄, q̄, and per-element β̄ and Ḡ terms), so no product result is
 * kept; row sums at the end of each K slab are deterministic (fixed lanes, no atomics). */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int PB_THREADS = 512;
constexpr int PB_PARTS = PB_THREADS / MAXBT; /* threads per row in the row-wise stages */
constexpr int PB_NW = PB_THREADS / 32;
constexpr int PBV = 64;        /* V slab of the pullback */
constexpr int PLDV = PBV + 4;  /* fp32 V tiles */
constexpr int PLDVT = PBV + 8; /* input-type / state V tiles */
static_assert(LDN <= 4 * (32 + 4) && PLDV <= 4 * (32 + 4), "Bt, Tm must fit in the four accumulators");

/* sum over the PB_PARTS adjacent lanes that share a row */
__device__ __forceinline__ float quad_sum(float x) {
#pragma unroll
    for (int o = 1; o < PB_PARTS; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
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

/* Shared-memory layout of the pullback (floats unless noted); bk = K slab (64, or 32 for WY / fp32). */
struct PbLayout {
    int bk, ldk2, ldkt, off_T, off_S, off_WY, total_bytes;
};
__host__ __device__ inline PbLayout pb_layout(int elem_bytes, int wy, int Kp) {
    PbLayout L;
    L.bk = (elem_bytes == 2 && !wy) ? 64 : 32;
    L.ldk2 = L.bk + 4;
    L.ldkt = L.bk + 8;
    /* fp32: Dm, Hm [64][LDN]; Pt, Rt [64][PLDV]; Kbt + 4 accumulators [64][ldk2]; G/β, eF, γ, rdb, rdg, red, hd */
    const int nf = 2 * MAXBT * LDN + 2 * MAXBT * PLDV + 5 * MAXBT * L.ldk2 + 8 * MAXBT;
    L.off_T = nf * 4;
    /* input type: Ot, Vt [64][PLDVT]; Kt, Qt [64][ldkt] */
    const int nt = 2 * MAXBT * PLDVT + 2 * MAXBT * L.ldkt;
    L.off_S = L.off_T + nt * elem_bytes;
    /* state_t: Sct, Sbt [bk][PLDVT] */
    L.off_WY = L.off_S + 2 * L.bk * PLDVT * (int)sizeof(state_t);
    int total = L.off_WY;
    if (wy) total += 4 * (2 * MAXBT * LDN + (wbar_in_smem(Kp, elem_bytes) ? MAXBT * (Kp + 4) : 0));
    L.total_bytes = total;
    return L;
}

template <class T>
__global__ void __launch_bounds__(PB_THREADS)
pullback_kernel(Prob p, const T *q, const T *k, const T *v, const float *GB, const float *A,
                const T *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, int wy,
                float *Wbar, float *acc, T *dq, T *dk, T *dv, T *dbeta, const float *graw, float *dg) {
    extern __shared__ __align__(16) float sm[];
    const int c = slot_chunk(p, blockIdx.x), h = blockIdx.y, BT = p.BT, Kp = p.Kp, tid = threadIdx.x; /* grid: chunk_slots */
    if (c < 0) return;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n, tok0 = ci.tok0;
    if (n == 0) return;
    const PbLayout L = pb_layout(sizeof(T), wy, Kp);
    const int bk = L.bk, ldk2 = L.ldk2, ldkt = L.ldkt;
    float *Dm = sm;                    /* [64][LDN] Γ */
    float *Hm = Dm + MAXBT * LDN;      /* [64][LDN] Γ_H */
    float *Pt = Hm + MAXBT * LDN;      /* [64][PLDV] P (ReWY from the scan; WY Aᵀ R̄) */
    float *Rt = Pt + MAXBT * PLDV;     /* [64][PLDV] R */
    float *Kbt = Rt + MAXBT * PLDV;    /* [64][ldk2] β ⊙ K (WY pass A: βγ ⊙ K) */
    float *dKa = Kbt + MAXBT * ldk2;   /* accumulators [64][ldk2]: k̄, q̄, per-element β̄ and Ḡ terms */
    float *dQa = dKa + MAXBT * ldk2;
    float *dBa = dQa + MAXBT * ldk2;
    float *dGa = dBa + MAXBT * ldk2;
    float *Gs = dGa + MAXBT * ldk2;    /* [2][64]: G then β (from GB) */
    float *bs = Gs + BT;
    float *gam = Gs + 2 * MAXBT;       /* γ_i */
    float *eFr = gam + MAXBT;          /* e^{G_n − G_i} */
    float *rdb = eFr + MAXBT;
    float *rdg = rdb + MAXBT;
    float *red = rdg + MAXBT;          /* [64] */
    float *hd = red + MAXBT;           /* [64] H_q's diagonal */
    T *Ot = reinterpret_cast<T *>(reinterpret_cast<char *>(sm) + L.off_T); /* [64][PLDVT] */
    T *Vt = Ot + MAXBT * PLDVT;
    T *Kt = Vt + MAXBT * PLDVT;                                            /* [64][ldkt] */
    T *Qt = Kt + MAXBT * ldkt;
    state_t *Sct = reinterpret_cast<state_t *>(reinterpret_cast<char *>(sm) + L.off_S); /* [bk][PLDVT] */
    state_t *Sbt = Sct + bk * PLDVT;
    float *As = reinterpret_cast<float *>(reinterpret_cast<char *>(sm) + L.off_WY);     /* WY only */
    float *Ab = As + MAXBT * LDN;
    float *Wsm = Ab + MAXBT * LDN;     /* WY, wbar_in_smem: W̄ [64][Kp+4] */
    float *Bt = dKa;                   /* WY phase 1 / pass A: R̄ tile [64][PLDV] over the accumulators */
    float *Tm = dKa;                   /* WY: Aᵀ Ā [64][LDN] over the accumulators */
    const bool wsm = wbar_in_smem(Kp, sizeof(T));
    const int ldw = wsm ? Kp + 4 : Kp;

    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int row = tid / PB_PARTS, part = tid % PB_PARTS;
    const T *kc = k + ((size_t)tok0 * p.H + h) * p.K, *qc = q + ((size_t)tok0 * p.H + h) * p.K;
    const float sc = p.scale;

    for (int r = 0; r < p.G; r++) {
        const int hv = h * p.G + r;
        /* G, β, A (and W̄ scratch) by chunk; the scans' R, P (R̄), S_c, S̄⁺ by workspace slot (blockIdx.x) */
        const size_t ch = (size_t)c * p.HV + hv, cs = (size_t)blockIdx.x * p.HV + hv;
        const PbSlices<T> hs = pb_slices<T>(p, cs, tok0, hv, R, PR, Sc, Sbar, do_, v); /* this chunk and value head's */
        float *Wc = wsm ? Wsm : Wbar + ch * BT * Kp;
        copy_tile<float>(Gs, 2 * BT, 1, 2 * BT, GB + ch * 2 * BT, 2 * BT, 1, 0, 2 * BT);
        if (wy) copy_a_tile<0, PB_THREADS>(As, LDN, A, p, ch, BT);
        for (int e = tid; e < MAXBT * LDN; e += blockDim.x) {
            Dm[e] = 0.f;
            Hm[e] = 0.f;
            if (wy) Ab[e] = 0.f;
        }
        for (int i = tid; i < MAXBT; i += blockDim.x) {
            rdb[i] = 0.f;
            rdg[i] = 0.f;
        }
        cp_async_wait();
        __syncthreads();
        const float gl = Gs[n - 1], gn = expf(gl);
        for (int i = tid; i < BT; i += blockDim.x) {
            gam[i] = expf(Gs[i]);
            eFr[i] = i < n ? expf(gl - Gs[i]) : 0.f;
        }

        /* ---- phase 1: over V slabs: P (WY: Aᵀ R̄), dv, ⟨P,v⟩, P Rᵀ (ReWY) / R̄ Zᵀ (WY), Ō Rᵀ ---- */
        for (int v0 = 0; v0 < p.V; v0 += PBV) {
            copy_tile<T>(Ot, PLDVT, BT, PBV, hs.dO, rsv, n, v0, p.V);
            copy_tile<T>(Vt, PLDVT, BT, PBV, hs.v, rsv, n, v0, p.V);
            copy_tile_to(Rt, PLDV, BT, PBV, hs.R, p.V, n, v0, p.V);
            copy_tile_to(wy ? Bt : Pt, PLDV, BT, PBV, hs.PR, p.V, n, v0, p.V);
            cp_async_wait();
            __syncthreads();
            if (wy) {
                bgemm<PB_NW>(BT, PBV, BT, As, 1, LDN, Bt, PLDV, 1, [&](int i, int j, float cc) { Pt[i * PLDV + j] = cc; });
                __syncthreads();
            }
            {
                float s = 0.f;
                if (row < n) {
                    const size_t vb = (size_t)(tok0 + row) * rsv + (size_t)hv * p.V + v0;
                    for (int jj = 0; jj < PBV / PB_PARTS; jj++) {
                        const int j = part * (PBV / PB_PARTS) + jj;
                        if (v0 + j < p.V) {
                            const float pv = Pt[row * PLDV + j];
                            st<T>(dv + vb + j, bs[row] * pv);
                            s += pv * ldf(Vt + row * PLDVT + j);
                        }
                    }
                }
                s = quad_sum(s);
                if (part == 0 && row < n) rdb[row] += s;
            }
            if (!wy)
                bgemm<PB_NW>(BT, BT, PBV, Pt, PLDV, 1, Rt, 1, PLDV, [&](int i, int j, float cc) { Dm[i * LDN + j] += cc; });
            else /* Ā += R̄ Zᵀ, Z = β ⊙ V */
                bgemm<PB_NW>(BT, BT, PBV, Bt, PLDV, 1, Vt, 1, PLDVT, [&](int i, int j, float cc) { Ab[i * LDN + j] += bs[j] * cc; });
            bgemm<PB_NW>(BT, BT, PBV, Ot, PLDVT, 1, Rt, 1, PLDV, [&](int i, int j, float cc) { Hm[i * LDN + j] += cc; });
            __syncthreads();
        }

        /* ---- WY pass A: W̄ = −R̄ S_cᵀ (kept), Ā += W̄ Eᵀ; then M̄ = −Aᵀ Ā Aᵀ ---- */
        if (wy) {
            for (int k0 = 0; k0 < Kp; k0 += bk) {
                for (int v0 = 0; v0 < p.V; v0 += PBV) {
                    copy_tile_to(Bt, PLDV, BT, PBV, hs.PR, p.V, n, v0, p.V);
                    copy_tile<state_t>(Sct, PLDVT, bk, PBV, hs.Sc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                    cp_async_wait();
                    __syncthreads();
                    bgemm<PB_NW>(BT, bk, PBV, Bt, PLDV, 1, Sct, 1, PLDVT, [&](int i, int j, float cc) {
                        float *w = Wc + (size_t)i * ldw + k0 + j;
                        *w = (v0 == 0 ? 0.f : *w) - cc;
                    });
                    __syncthreads();
                }
                copy_tile<T>(Kt, ldkt, BT, bk, kc, rsk, n, k0, p.K);
                cp_async_wait();
                __syncthreads();
                for (int e = tid; e < BT * bk; e += blockDim.x) {
                    const int i = e / bk, j = e - i * bk;
                    Kbt[i * ldk2 + j] = bs[i] * gam[i] * ldf(Kt + i * ldkt + j);
                }
                __syncthreads();
                bgemm<PB_NW>(BT, BT, bk, Wc + k0, ldw, 1, Kbt, 1, ldk2, [&](int i, int j, float cc) { Ab[i * LDN + j] += cc; });
                __syncthreads();
            }
            bgemm<PB_NW>(BT, BT, BT, As, 1, LDN, Ab, LDN, 1, [&](int i, int j, float cc) { Tm[i * LDN + j] = cc; });
            __syncthreads();
            bgemm<PB_NW>(BT, BT, BT, Tm, LDN, 1, As, 1, LDN, [&](int i, int j, float cc) { Dm[i * LDN + j] = -cc; });
            __syncthreads();
        }
        /* masks and decay: Γ = D ⊙ e^{G_i−G_j} (strict), Γ_H = H_q ⊙ e^{G_i−G_j} (strict here; its diagonal, decay
         * e^0 = 1, kept apart in hd: see the header) */
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            const float f = (i < n && j < i) ? expf(Gs[i] - Gs[j]) : 0.f;
            const float d = Dm[i * LDN + j];
            Dm[i * LDN + j] = j < i ? (wy ? d : -d) * f : 0.f;
            if (j == i) hd[i] = i < n ? Hm[i * LDN + i] : 0.f;
            Hm[i * LDN + j] *= f;
        }
        __syncthreads();

        /* ---- pass B: over K slabs; every product's epilogue adds its terms to the accumulators ---- */
        float lam = 0.f, endp = 0.f;
        for (int k0 = 0; k0 < Kp; k0 += bk) {
            for (int e = tid; e < MAXBT * ldk2; e += blockDim.x) {
                dKa[e] = 0.f;
                dQa[e] = 0.f;
                dBa[e] = 0.f;
                dGa[e] = 0.f;
            }
            copy_tile<T>(Kt, ldkt, BT, bk, kc, rsk, n, k0, p.K);
            copy_tile<T>(Qt, ldkt, BT, bk, qc, rsk, n, k0, p.K);
            /* Ē_dir = −Xp: contributions of xp to k̄, β̄, Ḡ */
            auto on_xp = [&](int i, int j, float xp) {
                const float kv = ldf(Kt + i * ldkt + j), bg = bs[i] * gam[i];
                const int o = i * ldk2 + j;
                dKa[o] -= bg * xp;
                dBa[o] -= gam[i] * xp * kv;
                dGa[o] -= bg * xp * kv;
            };
            for (int v0 = 0; v0 < p.V; v0 += PBV) {
                copy_tile<T>(Ot, PLDVT, BT, PBV, hs.dO, rsv, n, v0, p.V);
                copy_tile_to(Rt, PLDV, BT, PBV, hs.R, p.V, n, v0, p.V);
                if (!wy) copy_tile_to(Pt, PLDV, BT, PBV, hs.PR, p.V, n, v0, p.V);
                copy_tile<state_t>(Sct, PLDVT, bk, PBV, hs.Sc + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                copy_tile<state_t>(Sbt, PLDVT, bk, PBV, hs.Sb + (size_t)k0 * p.V, p.V, p.K - k0, v0, p.V);
                cp_async_wait();
                __syncthreads();
                for (int e = tid; e < bk * PBV; e += blockDim.x) {
                    const int kk = e / PBV, j = e - kk * PBV;
                    lam += ldf(Sct + kk * PLDVT + j) * ldf(Sbt + kk * PLDVT + j);
                }
                if (!wy) bgemm<PB_NW>(BT, bk, PBV, Pt, PLDV, 1, Sct, 1, PLDVT, on_xp);
                /* Xo = Ō S_cᵀ */
                bgemm<PB_NW>(BT, bk, PBV, Ot, PLDVT, 1, Sct, 1, PLDVT, [&](int i, int j, float xo) {
                    const int o = i * ldk2 + j;
                    dQa[o] += sc * gam[i] * xo;
                    dGa[o] += gam[i] * xo * sc * ldf(Qt + i * ldkt + j);
                });
                /* Xf = R S̄⁺ᵀ (F̄) */
                bgemm<PB_NW>(BT, bk, PBV, Rt, PLDV, 1, Sbt, 1, PLDVT, [&](int i, int j, float xf) {
                    const int o = i * ldk2 + j;
                    const float t = eFr[i] * xf, kv = ldf(Kt + i * ldkt + j);
                    dKa[o] += t;
                    dGa[o] -= t * kv;
                    endp += t * kv;
                });
                __syncthreads();
            }
            /* WY: Xp = −Aᵀ W̄ */
            if (wy) bgemm<PB_NW>(BT, bk, BT, As, 1, LDN, Wc + k0, ldw, 1, [&](int i, int j, float cc) { on_xp(i, j, -cc); });
            for (int e = tid; e < BT * bk; e += blockDim.x) {
                const int i = e / bk, j = e - i * bk;
                Kbt[i * ldk2 + j] = bs[i] * ldf(Kt + i * ldkt + j);
            }
            __syncthreads();
            /* T1 = Γ K */
            bgemm<PB_NW>(BT, bk, BT, Dm, LDN, 1, Kt, ldkt, 1, [&](int i, int j, float t) {
                const int o = i * ldk2 + j;
                const float kv = ldf(Kt + i * ldkt + j);
                dKa[o] += bs[i] * t;
                dBa[o] += t * kv;
                dGa[o] += bs[i] * t * kv;
            });
            /* T2 = Γᵀ (β ⊙ K) */
            bgemm<PB_NW>(BT, bk, BT, Dm, 1, LDN, Kbt, ldk2, 1, [&](int i, int j, float t) {
                const int o = i * ldk2 + j;
                dKa[o] += t;
                dGa[o] -= t * ldf(Kt + i * ldkt + j);
            });
            /* T3 = Γ_H K */
            bgemm<PB_NW>(BT, bk, BT, Hm, LDN, 1, Kt, ldkt, 1, [&](int i, int j, float t) {
                const int o = i * ldk2 + j;
                dQa[o] += sc * t;
                dGa[o] += t * sc * ldf(Qt + i * ldkt + j);
            });
            /* T4 = Γ_Hᵀ Q */
            bgemm<PB_NW>(BT, bk, BT, Hm, 1, LDN, Qt, ldkt, 1, [&](int i, int j, float t) {
                const int o = i * ldk2 + j;
                t *= sc;
                dKa[o] += t;
                dGa[o] -= t * ldf(Kt + i * ldkt + j);
            });
            __syncthreads();
            {
                float sdb = 0.f, sdg = 0.f;
                const int per = bk / PB_PARTS;
                if (row < n) {
                    const size_t qb = ((size_t)(tok0 + row) * p.H + h) * p.K;
                    const size_t ab = (((size_t)c * p.H + h) * BT + row) * Kp;
                    for (int jj = 0; jj < per; jj++) {
                        const int j = part * per + jj, d = k0 + j;
                        if (d >= p.K) break;
                        const int o = row * ldk2 + j;
                        /* Γ_H's diagonal: q̄ += scale·h_ii k_i, k̄ += scale·h_ii q_i, nothing to Ḡ */
                        const float hq = sc * hd[row];
                        float dqv = dQa[o] + hq * ldf(Kt + row * ldkt + j), dkv = dKa[o] + hq * ldf(Qt + row * ldkt + j);
                        sdb += dBa[o];
                        sdg += dGa[o];
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
        const float endp_all = block_sum(endp, red + 32);
        if (tid == 0) {
            if (dbeta)
                for (int i = 0; i < n; i++) st<T>(dbeta + (size_t)(tok0 + i) * p.HV + hv, rdb[i]);
            if (p.gated && dg) {
                float s = gn * lam_all + endp_all;
                for (int i = n - 1; i >= 0; i--) {
                    s += rdg[i];
                    const size_t th = (size_t)(tok0 + i) * p.HV + hv;
                    dg[th] = rewy_gate_grad(graw[th], s, p.zero_h0 && ci.idx == 0 && i == 0); /* floored, or first from 0 (gates.h) */
                }
            }
        }
        __syncthreads();
    }
}

/* ==== The fast path: 2-byte inputs, chunk 64, K ≤ 128, V a multiple of 8 ====
 * Same math as pullback_kernel above (its header names every term); what differs is where the
 * partial results live. The four K-wide results are kept in registers, one warp tile each, over
 * the whole chunk:
 *   B̂ = −γ⊙(P S_cᵀ) + Γ K                 (k̄ = β⊙B̂ + Ĉ + F̂,  β̄ = ⟨k, B̂⟩ + ⟨P, v⟩)
 *   Ĉ = Γ_βᵀ K + Γ_H'ᵀ Q                   Γ_β = diag(β) Γ, Γ_H' = scale·Γ_H
 *   F̂ = e^{G_n−G}⊙(R S̄⁺ᵀ)                 (the Xf term)
 *   Q̂ = scale·γ⊙(Ō S_cᵀ) + Γ_H' K          (q̄ = Q̂)
 *   Ḡ = ⟨k, β⊙B̂ − Ĉ − F̂⟩ + ⟨q, Q̂⟩,  Ḡ_n += γ_n⟨S̄⁺, S_c⟩ + Σ ⟨k, F̂⟩
 * Row scalings are applied to the per-warp results (rows are fixed per lane), the V-long products' once
 * after their sums over the slabs, so no scaled copy of any tile is made. D = P Rᵀ and H_q = Ō Rᵀ are also
 * register accumulators over the V slabs; the V slabs are read once. WY (the 7-product comparison) forms
 * P = AᵀR̄ per slab and, after the V loop, Ā = R̄Zᵀ + W̄Eᵀ, D = −AᵀĀAᵀ and Aᵀ W̄ in place of P S_cᵀ;
 * everything else is shared.
 * One block of 16 warps per (chunk, key head); warp w owns rows 16(w%4)… and a quarter of the
 * columns of every K-wide result (and of the 64×64 ones).
 *
 * V-slab copies run one slab ahead of the math (cp.async groups). The six tiles of a slab (SL_PR …
 * SL_SB, common.cuh) have two buffers each where shared memory allows (PfLayout::db; slab sl uses
 * buffer sl & 1) and one otherwise; pf_pick takes the first set of sl_db_pref that fits the device.
 * Per slab sl (groups commit in this order; an empty group is complete at once):
 *   top:  [single-buffered late tiles (R, Ō, S_c, S̄⁺) of slab sl] commit;
 *         [double-buffered tiles of slab sl+1 → buffer (sl+1)&1] commit;
 *         wait_group 1 (all but the group just committed: slab sl's copies, wherever issued, are in);
 *   B1    __syncthreads: every thread's copies of slab sl are visible; from here the slab is read.
 *   first half: (WY: P = AᵀR̄ → Ps, barrier), dv and ⟨P, v⟩, ⟨S̄⁺, S_c⟩, P Rᵀ / R̄ Zᵀ, P S_cᵀ / R̄ S_cᵀ.
 *   B2    (only when PR or V is single-buffered) __syncthreads: PR, V and Ps are read no more in this
 *         slab; then [those tiles of slab sl+1] commit.
 *   second half: Ō Rᵀ, Ō S_cᵀ, R S̄⁺ᵀ (R, Ō, S_c, S̄⁺ only).
 *   B3    __syncthreads: all reads of slab sl's buffers are done; the next top overwrites buffer sl&1
 *         (double: with slab sl+2's copy) or the single ones (with slab sl+1's).
 * A copy into a buffer is thus always issued after the barrier that ends its previous reads (B3 of
 * the slab before for the top's copies, B2 of this slab for the early ones), and read only after the
 * B1 that follows the wait on its group. The last slab issues nothing, so no copy is in flight when Γ …
 * (and W̄, Ā, T in WY) go over region X after the loop's final B3. With bf16 P (or R̄) and R (rp_t) and
 * bf16 Γ tiles, both algorithms double-buffer all six tiles at K = 128 on an H200 (232,448 B): ReWY
 * 186,496 B, WY 213,120 B (with the extra R̄ → P tile and A); at K = 64 133,248 and 159,872 B. A device
 * with less shared memory (A100: 166,912 B) takes a smaller set or single buffers.
 * Operand types: every V-slab product but WY's R̄ Zᵀ (β_j scaling later) has bf16 operands for bf16 inputs
 * (P, R: rp_t; Ō, V, S_c, S̄⁺) and runs on bf_mma; so do the four K-side products with bf16 Γ tiles
 * (pf_gam_t). fp16 inputs take tf32 products (pf_mma's fallback). */
constexpr int PF_THREADS = 512;
constexpr int PF_NW = PF_THREADS / 32;
constexpr int PF_BV = 64;          /* V slab */
constexpr int PF_LDF = PF_BV + 4;  /* fp32 [64][68] tiles (also the n×n ones) */
constexpr int PF_LDH = PF_BV + 8;  /* 16-bit [rows][72] tiles */
constexpr int PF_LDR = sizeof(rp_t) == 2 ? PF_LDH : PF_LDF; /* rp_t tiles: P (or R̄), R */
/* Γ, Γ_βᵀ, Γ_H', Γ_H'ᵀ, the n×n coefficients of the four K-side products, are formed in fp32 registers and
 * stored for those products in bf16 when the inputs are bf16, as FLA rounds its ds, dA to the input type
 * before its products with K and Q: the products then run on bf_mma. -DREWY_CUDA_PB_GAMMA_F32 keeps them
 * fp32 (tf32 products), as do other input types. */
#ifdef REWY_CUDA_PB_GAMMA_F32
constexpr bool PB_GAMMA_BF16 = false;
#else
constexpr bool PB_GAMMA_BF16 = true;
#endif
template <class T>
using pf_gam_t = typename std::conditional<PB_GAMMA_BF16 && std::is_same<T, __nv_bfloat16>::value, __nv_bfloat16, float>::type;
template <class T> constexpr int pf_ldg() { return sizeof(pf_gam_t<T>) == 2 ? PF_LDH : PF_LDF; }

__host__ __device__ constexpr int pf_ldk(int KS) { return KS + 8; } /* K, Q [64][KS+8]: conflict-free epilogue reads */

/* byte offsets of the fast pullback's shared memory. The six V-slab tiles (SL_PR … SL_SB, common.cuh)
 * have two buffers each where `db` has their bit (slab s uses buffer s & 1), else one (both entries equal). */
struct PfLayout {
    int slab[SL_NT][2];                      /* V-slab tiles (region X): PR (P; WY R̄), V, R, Ō, S_c, S̄⁺ */
    int db;                                  /* double-buffered tiles (bit set over SL_*) */
    int Ps;                                  /* WY: P = Aᵀ R̄ of the slab (computed; region X) */
    int Gm, Gbt, Hm, Ht, Ab, Tm, Wb;         /* after the V loop, over region X */
    int Ks, Qs, As, sf, total;               /* resident */
};
__host__ __device__ inline PfLayout pf_layout(int KS, bool wy, unsigned db, int gsz) {
    PfLayout L = {};
    const int f = MAXBT * PF_LDF * 4, h = MAXBT * PF_LDH * 2, s = KS * PF_LDH * 2;
    const int gm = MAXBT * (gsz == 2 ? PF_LDH : PF_LDF) * gsz; /* a Γ tile (pf_gam_t) */
    const int r = MAXBT * PF_LDR * (int)sizeof(rp_t);
    const int sz[SL_NT] = {r, h, r, h, s, s};
    L.db = (int)db;
    int o = place_slabs(L.slab, sz, db, 0);
    L.Ps = o; o += wy ? r : 0; /* ReWY: P is the PR tile */
    const int x = o;
    o = 0;
    L.Gm = o; o += gm;
    L.Gbt = o; o += gm;
    L.Hm = o; o += gm;
    L.Ht = o; o += gm;
    L.Ab = o; o += wy ? f : 0;
    L.Tm = o; o += wy ? f : 0;
    L.Wb = o; o += wy ? MAXBT * (KS + 4) * 4 : 0;
    o = x > o ? x : o;
    L.Ks = o; o += MAXBT * pf_ldk(KS) * 2;
    L.Qs = o; o += MAXBT * pf_ldk(KS) * 2;
    L.As = o; o += wy ? f : 0;
    L.sf = o; o += 4 * (8 * MAXBT + 2 * 4 * MAXBT + 2 * PF_NW);
    L.total = o;
    return L;
}
/* The layout with the most double-buffered V-slab tiles (sl_db_pref order) that fits in `optin`
 * bytes; total = 0 when even single buffering does not fit. */
inline PfLayout pf_pick(int KS, bool wy, int gsz, size_t optin) {
    for (int i = 0; i < SL_NPREF; i++) {
        const PfLayout L = pf_layout(KS, wy, sl_db_pref(i), gsz);
        if ((size_t)L.total <= optin) return L;
    }
    return PfLayout{};
}

template <class T, int KS, bool WY>
__global__ void __launch_bounds__(PF_THREADS)
pullback_fast_kernel(Prob p, const T *q, const T *k, const T *v, const float *GB, const float *A, const T *do_,
                     const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, float *acc, T *dq, T *dk,
                     T *dv, T *dbeta, const float *graw, float *dg, const PfLayout L /* pf_layout(KS, WY, db, sizeof(pf_gam_t<T>)) */) {
    extern __shared__ __align__(16) char smc[];
    constexpr int NSK = KS / 32;     /* 8-column blocks per warp in the K-wide results (KS/4 columns) */
    constexpr int NSN = 2;           /* … in the 64×64 results (16 columns) */
    constexpr int LDK = pf_ldk(KS);
    const int c = slot_chunk(p, blockIdx.x), h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (c < 0) return; /* the grid: chunk_slots */
    const int g = lane >> 2, t = lane & 3;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n, tok0 = ci.tok0;
    if (n == 0) return;
    using GT = pf_gam_t<T>;
    constexpr int LDG = pf_ldg<T>();
    GT *Gm = reinterpret_cast<GT *>(smc + L.Gm), *Gbt = reinterpret_cast<GT *>(smc + L.Gbt);
    GT *Hm = reinterpret_cast<GT *>(smc + L.Hm), *Ht = reinterpret_cast<GT *>(smc + L.Ht);
    float *Ab = reinterpret_cast<float *>(smc + L.Ab), *Tm = reinterpret_cast<float *>(smc + L.Tm);
    float *Wb = reinterpret_cast<float *>(smc + L.Wb);
    T *Ks = reinterpret_cast<T *>(smc + L.Ks), *Qs = reinterpret_cast<T *>(smc + L.Qs);
    float *As = reinterpret_cast<float *>(smc + L.As);
    float *Gs = reinterpret_cast<float *>(smc + L.sf); /* [2][64]: G then β */
    float *bs = Gs + MAXBT, *gam = Gs + 2 * MAXBT, *eF = gam + MAXBT, *rdb = eF + MAXBT;
    float *redb = rdb + MAXBT;          /* [4][64] per column quarter: β̄ row partials */
    float *redg = redb + 4 * MAXBT;     /* [4][64]: Ḡ row partials */
    float *red = redg + 4 * MAXBT;      /* [2][16] block sums */
    const int ldw = KS + 4;

    const int rt = warp & 3, cq = warp >> 2;  /* this warp's row tile and column quarter */
    const int i0 = rt * 16, jk = cq * (KS / 4), jn = cq * 16;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const float sc = p.scale;
    const bool gated = p.gated && dg; /* whether Ḡ is wanted: its terms are skipped otherwise */

    /* G, β (and WY's A) of value head (chunk, hv) into Gs (As): outside region X */
    auto copy_gates = [&](size_t ch) {
        copy_tile_k<float, 1, 2 * MAXBT, PF_THREADS>(Gs, 2 * MAXBT, 1, 2 * MAXBT, GB + ch * 2 * MAXBT, 2 * MAXBT, 1, 0,
                                                      2 * MAXBT);
        if (WY)
            copy_a_tile<MAXBT, PF_THREADS>(As, PF_LDF, A, p, ch, MAXBT);
    };
    /* K and Q of the chunk ([token][feature]; the K-side products read them as k-major B operands through
     * ldmatrix.trans), copied with the first value head's G, β in one cp.async group: one exposed load */
    auto kv = [&](int i, int cc) { return ldf(Ks + i * LDK + cc); };
    auto qv = [&](int i, int cc) { return ldf(Qs + i * LDK + cc); };

    for (int r = 0; r < p.G; r++) {
        const int hv = h * p.G + r;
        /* G, β, A by chunk; R, P (R̄), S_c, S̄⁺ by workspace slot (blockIdx.x) */
        const size_t ch = (size_t)c * p.HV + hv, cs = (size_t)blockIdx.x * p.HV + hv;
        const PbSlices<T> hs = pb_slices<T>(p, cs, tok0, hv, R, PR, Sc, Sbar, do_, v); /* this chunk and value head's */
        /* copies of V slab sl's tiles in `set` (bits SL_*) into the buffers slab sl uses */
        const int ns = ceil_div(p.V, PF_BV);
        auto issue = [&](unsigned set, int sl) {
            copy_slab<T, PF_BV, PF_LDR, PF_LDH, KS, PF_THREADS>(smc, L.slab, set, sl, p, n, hs);
        };
        const unsigned one_early = slab_early((unsigned)L.db); /* single PR, V tiles: refilled from B2 */

        copy_gates(ch);
        if (r == 0)
            for (int w = 0; w < 2; w++)
                copy_tile_k<T, MAXBT, KS, PF_THREADS>(w ? Qs : Ks, LDK, MAXBT, KS, (w ? q : k) + ((size_t)tok0 * p.H + h) * p.K,
                                                      rsk, n, 0, p.K);
        cp_async_commit();
        /* slab 0, all tiles (region X is free: the previous value head's last reads of Γ … ended before its
         * closing barriers); waited on at the top of slab 0 */
        issue(SL_ALL, 0);
        cp_async_commit();
        cp_async_wait_group<1>(); /* G, β (and A; K and Q with value head 0) */
        __syncthreads();
        const float gl = Gs[n - 1];
        if (tid < MAXBT) {
            gam[tid] = expf(Gs[tid]);
            eF[tid] = tid < n ? expf(gl - Gs[tid]) : 0.f;
            rdb[tid] = 0.f;
        }
        __syncthreads();
        const float gam_lo = gam[i0 + g], gam_hi = gam[i0 + g + 8];

        float Bh[4][4] = {}, Ch[4][4] = {}, Fh[4][4] = {}, Qh[4][4] = {}; /* K-wide results (WY: Bh holds R̄ S_cᵀ first) */
        float Dh[4][4] = {}, Hh[4][4] = {};                                /* P Rᵀ (WY: R̄ Zᵀ), Ō Rᵀ */
        float lam = 0.f;

        /* ---- the V slabs: every product with a V-long inner dimension ----
         * Copies run one slab ahead (see the kernel's header for the schedule and its barriers):
         * top of slab sl (slab_top): [single late tiles of sl] commit, [double-buffered tiles of sl+1] commit, wait for all
         * but the newest group, B1; first half (reads every tile); if one_early: B2, [one_early tiles of sl+1]
         * commit; second half (reads R, Ō, S_c, S̄⁺ only); B3. */
        for (int sl = 0; sl < ns; sl++) {
            const int v0 = sl * PF_BV, b = sl & 1;
            slab_top(issue, (unsigned)L.db, sl, ns);
            const auto [Prs, Rs, Os, Vs, Scs, Sbs] = slab_tiles<T>(smc, L.slab, b); /* slab sl's tiles */
            const rp_t *Xs = Prs;                                              /* WY: R̄ */
            rp_t *Ps = WY ? reinterpret_cast<rp_t *>(smc + L.Ps) : Prs;        /* P */
            if (WY) { /* P = Aᵀ R̄ */
                bgemm<PF_NW>(MAXBT, PF_BV, MAXBT, As, 1, PF_LDF, Xs, PF_LDR, 1,
                             [&](int i, int j, float cc) { st<rp_t>(Ps + i * PF_LDR + j, cc); });
                __syncthreads();
            }
            { /* dv = β P and ⟨P, v⟩: eight columns per thread, eight threads per row */
                const int i = tid >> 3, j = (tid & 7) * 8;
                float s = 0.f;
                if (i < n && v0 + j < p.V) {
                    uint4 pk;
                    T *o8 = reinterpret_cast<T *>(&pk);
                    float pv[8], vv[8];
                    ld8(Ps + i * PF_LDR + j, pv);
                    ld8(Vs + i * PF_LDH + j, vv);
#pragma unroll
                    for (int m = 0; m < 8; m++) {
                        st<T>(o8 + m, bs[i] * pv[m]);
                        s += pv[m] * vv[m];
                    }
                    *reinterpret_cast<uint4 *>(dv + (size_t)(tok0 + i) * rsv + (size_t)hv * p.V + v0 + j) = pk;
                }
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s += __shfl_xor_sync(0xffffffffu, s, 4);
                if ((tid & 7) == 0) rdb[i] += s;
            }
            if (gated) /* ⟨S̄⁺, S_c⟩ for Ḡ_n, eight columns per step (DeltaNet has no gate gradient) */
                for (int e = 8 * tid; e < KS * PF_BV; e += 8 * PF_THREADS)
                    lam += dot8(Scs + (e / PF_BV) * PF_LDH + e % PF_BV, Sbs + (e / PF_BV) * PF_LDH + e % PF_BV);
            if (WY) {
                pf_mma<NSN, true, true>(Dh, PF_BV, Xs, PF_LDR, 1, Vs, 1, PF_LDH, i0, jn);   /* R̄ Zᵀ (β_j later) */
                pf_mma<NSK, true, true>(Bh, PF_BV, Xs, PF_LDR, 1, Scs, 1, PF_LDH, i0, jk);  /* R̄ S_cᵀ = −W̄ */
            } else {
                pf_mma<NSN, true, true>(Dh, PF_BV, Ps, PF_LDR, 1, Rs, 1, PF_LDR, i0, jn);   /* P Rᵀ */
                pf_mma<NSK, true, true>(Bh, PF_BV, Ps, PF_LDR, 1, Scs, 1, PF_LDH, i0, jk);  /* P S_cᵀ (× −γ below) */
            }
            if (one_early) {
                __syncthreads(); /* B2: PR, V (and WY's P) are read no more in this slab */
                if (sl + 1 < ns) issue(one_early, sl + 1);
                cp_async_commit();
            }
            /* second half: R, Ō, S_c, S̄⁺ only */
            pf_mma<NSN, true, true>(Hh, PF_BV, Os, PF_LDH, 1, Rs, 1, PF_LDR, i0, jn);       /* Ō Rᵀ */
            pf_mma<NSK, true, true>(Qh, PF_BV, Os, PF_LDH, 1, Scs, 1, PF_LDH, i0, jk);  /* Ō S_cᵀ (× scale·γ below) */
            pf_mma<NSK, true, true>(Fh, PF_BV, Rs, PF_LDR, 1, Sbs, 1, PF_LDH, i0, jk);  /* R S̄⁺ᵀ (× e^{G_n−G} below) */
            __syncthreads(); /* B3: slab sl's buffers are free (the next top refills them) */
        }
        cp_async_wait_group<0>(); /* none in flight (the last slab issued none); Γ … go over region X below */
        /* the row scalings of the V-long products, once over their sums across the slabs */
        if (!WY) pf_scale_rows<NSK>(Bh, -gam_lo, -gam_hi);
        pf_scale_rows<NSK>(Qh, sc * gam_lo, sc * gam_hi);
        pf_scale_rows<NSK>(Fh, eF[i0 + g], eF[i0 + g + 8]);

        /* ---- the n×n coefficients, masked and decayed: Γ = 𝓛_<(D) ⊙ e^{G_i−G_j}, Γ_H' = scale·𝓛_≤(H_q) ⊙ e^{G_i−G_j};
         * stored with Γ_βᵀ and Γ_H'ᵀ so that all four K-side products read k-contiguous operands ---- */
        /* the decay e^{G_i−G_j} with the mask (DeltaNet: the mask alone, gexp); at this warp's n×n elements
         * (slot e of column block s) from G read once into registers: the stores in between would make the
         * compiler re-read Gs for every element */
        float gr[2], gc[NSN][2];
        gr[0] = Gs[i0 + g];
        gr[1] = Gs[i0 + g + 8];
#pragma unroll
        for (int s = 0; s < NSN; s++) gc[s][0] = Gs[jn + 8 * s + 2 * t], gc[s][1] = Gs[jn + 8 * s + 2 * t + 1];
        auto decay_at = [&](int i, int j, int s, int e) {
            return (i < n && j <= i) ? gexp(p, gr[e >> 1] - gc[s][e & 1]) : 0.f;
        };
        auto decay = [&](int i, int j) { return (i < n && j <= i) ? gexp(p, Gs[i] - Gs[j]) : 0.f; };
        pf_each<NSN>(i0, jn, Hh, [&](int i, int j, int s, int e) {
            const float x = sc * Hh[s][e] * decay_at(i, j, s, e);
            st<GT>(Hm + i * LDG + j, x);
            st<GT>(Ht + j * LDG + i, x);
        });
        const float b_lo = bs[i0 + g], b_hi = bs[i0 + g + 8];
        /* Γ_ij = d·decay (strict), with β_i for Γ_βᵀ */
        auto put_gamma = [&](int i, int j, float d, float f, float b) {
            const float x = j < i ? d * f : 0.f;
            st<GT>(Gm + i * LDG + j, x);
            st<GT>(Gbt + j * LDG + i, b * x);
        };
        if (!WY) {
            pf_each<NSN>(i0, jn, Dh, [&](int i, int j, int s, int e) { put_gamma(i, j, -Dh[s][e], decay_at(i, j, s, e), (e >> 1) ? b_hi : b_lo); });
        } else {
            /* Ā = R̄ Zᵀ + W̄ Eᵀ (Z = β⊙V, E = βγ⊙K, W̄ = −R̄ S_cᵀ); M̄ = −Aᵀ Ā Aᵀ; D = 𝓛_<(M̄) */
            pf_each<NSN>(i0, jn, Dh, [&](int i, int j, int s, int e) { Ab[i * PF_LDF + j] = bs[j] * Dh[s][e]; });
            pf_each<NSK>(i0, jk, Bh, [&](int i, int j, int s, int e) { Wb[i * ldw + j] = -Bh[s][e]; });
            __syncthreads();
            bgemm<PF_NW>(MAXBT, MAXBT, KS, Wb, ldw, 1, Ks, 1, LDK,
                         [&](int i, int j, float cc) { Ab[i * PF_LDF + j] += bs[j] * gam[j] * cc; });
            __syncthreads();
            bgemm<PF_NW>(MAXBT, MAXBT, MAXBT, As, 1, PF_LDF, Ab, PF_LDF, 1,
                         [&](int i, int j, float cc) { Tm[i * PF_LDF + j] = cc; });
            __syncthreads();
            bgemm<PF_NW>(MAXBT, MAXBT, MAXBT, Tm, PF_LDF, 1, As, 1, PF_LDF,
                         [&](int i, int j, float cc) { put_gamma(i, j, -cc, decay(i, j), bs[i]); });
            /* B̂'s first term: −γ⊙Xp with Xp = −Aᵀ W̄ */
#pragma unroll
            for (int s = 0; s < 4; s++) Bh[s][0] = Bh[s][1] = Bh[s][2] = Bh[s][3] = 0.f;
            pf_mma_rows<NSK, false, false>(Bh, gam_lo, gam_hi, MAXBT, As, 1, PF_LDF, Wb, ldw, 1, i0, jk);
        }
        __syncthreads();

        /* ---- the K-side products (inner dimension: the chunk's tokens) ---- */
        pf_mma<NSK, true, false>(Bh, MAXBT, Gm, LDG, 1, Ks, LDK, 1, i0, jk);   /* Γ K */
        pf_mma<NSK, true, false>(Ch, MAXBT, Gbt, LDG, 1, Ks, LDK, 1, i0, jk);  /* Γ_βᵀ K */
        pf_mma<NSK, true, false>(Ch, MAXBT, Ht, LDG, 1, Qs, LDK, 1, i0, jk);   /* Γ_H'ᵀ Q */
        pf_mma<NSK, true, false>(Qh, MAXBT, Hm, LDG, 1, Ks, LDK, 1, i0, jk);   /* Γ_H' K */

        /* ---- k̄, q̄ and the row terms of β̄, Ḡ from the registers ---- */
        float sb[2] = {0.f, 0.f}, sg[2] = {0.f, 0.f}, endp = 0.f;
        float dkv[4][4], dqv[4][4];
        pf_each<NSK>(i0, jk, Bh, [&](int i, int j, int s, int e) {
            const float kk = kv(i, j), bb = (e >> 1) ? b_hi : b_lo, B_ = Bh[s][e], F_ = Fh[s][e];
            const float dkx = bb * B_ + Ch[s][e] + F_;
            dkv[s][e] = dkx;
            dqv[s][e] = Qh[s][e];
            sb[e >> 1] += kk * B_;
            if (gated) {
                sg[e >> 1] += kk * (2.f * bb * B_ - dkx) + qv(i, j) * Qh[s][e];
                endp += kk * F_;
            }
        });
        /* k̄, q̄ (one key head): staged in region X as [64][LDK] tiles, so that the global stores after the block
         * sums below are whole 16-byte row pieces (two-column stores from the registers left half of every sector
         * unused, with a bounds check per pair). Region X is free once every warp's K-side products are done. */
        T *Dks = reinterpret_cast<T *>(smc), *Dqs = Dks + MAXBT * LDK;
        if (p.G == 1) {
            __syncthreads();
            pf_each<NSK>(i0, jk, dkv, [&](int i, int j, int s, int e) {
                st<T>(Dks + i * LDK + j, dkv[s][e]);
                st<T>(Dqs + i * LDK + j, dqv[s][e]);
            });
        } else { /* GVA: q̄, k̄ summed over the group's value heads in fp32 scratch, written at the last */
            pf_each<NSK>(i0, jk, dkv, [&](int i, int j, int s, int e) {
                if (i >= n || j >= p.K) return;
                const size_t ab = (((size_t)c * p.H + h) * MAXBT + i) * p.Kp + j;
                float *aq = acc + ab, *ak = acc + (size_t)p.NC * p.H * MAXBT * p.Kp + ab;
                float x = dqv[s][e], y = dkv[s][e];
                if (r > 0) {
                    x += *aq;
                    y += *ak;
                }
                if (r == p.G - 1) {
                    const size_t o = ((size_t)(tok0 + i) * p.H + h) * p.K + j;
                    st<T>(dq + o, x);
                    st<T>(dk + o, y);
                } else {
                    *aq = x;
                    *ak = y;
                }
            });
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            sb[u] = sum4(sb[u]);
            sg[u] = sum4(sg[u]);
        }
        if (t == 0) {
            redb[cq * MAXBT + i0 + g] = sb[0];
            redb[cq * MAXBT + i0 + g + 8] = sb[1];
            redg[cq * MAXBT + i0 + g] = sg[0];
            redg[cq * MAXBT + i0 + g + 8] = sg[1];
        }
        const float2 sums = block_sum2<PF_NW, true>(lam, endp, red, [] { __syncthreads(); }); /* (synchronizes the block) */
        const float lam_all = sums.x, endp_all = sums.y;
        if (p.G == 1) { /* the staged k̄, q̄ rows, eight columns per store */
            const bool vec = p.K % 8 == 0 && (((uintptr_t)dk | (uintptr_t)dq) & 15) == 0;
            for (int qi = tid; qi < 2 * MAXBT * (KS / 8); qi += PF_THREADS) {
                const int w = qi / (MAXBT * (KS / 8)), rc = qi % (MAXBT * (KS / 8)), i = rc / (KS / 8), j = rc % (KS / 8) * 8;
                if (i >= n || j >= p.K) continue;
                const T *src = (w ? Dqs : Dks) + i * LDK + j;
                T *dst = (w ? dq : dk) + ((size_t)(tok0 + i) * p.H + h) * p.K + j;
                if (vec) *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
                else
                    for (int m = 0; m < 8 && j + m < p.K; m++) dst[m] = src[m];
            }
        }
        if (tid < MAXBT) {
            const int i = tid;
            float b_ = rdb[i], g_ = 0.f;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                b_ += redb[u * MAXBT + i];
                g_ += redg[u * MAXBT + i];
            }
            if (dbeta && i < n) st<T>(dbeta + (size_t)(tok0 + i) * p.HV + hv, b_);
            rdb[i] = g_; /* Ḡ row terms, for the cumsum below */
        }
        __syncthreads();
        if (gated && tid < 32) { /* dg_i = Ḡ_n's state term + Σ_{m ≥ i} (row terms): a suffix scan, lane l rows 2l, 2l+1 */
            const int i = 2 * lane;
            const float a = i < n ? rdb[i] : 0.f, b2 = i + 1 < n ? rdb[i + 1] : 0.f;
            float t = a + b2;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float u = __shfl_down_sync(0xffffffffu, t, o);
                if (lane + o < 32) t += u;
            }
            const float s0 = expf(gl) * lam_all + endp_all;
            const size_t th = (size_t)(tok0 + i) * p.HV + hv; /* a floored gate's ḡ is 0 (gates.h) */
            if (i < n) dg[th] = rewy_gate_grad(graw[th], s0 + t, p.zero_h0 && ci.idx == 0 && i == 0);
            if (i + 1 < n) dg[th + p.HV] = rewy_gate_grad(graw[th + p.HV], s0 + t - a, 0);
        }
        __syncthreads();
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                       const float *A, const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R,
                       const rp_t *PR, int wy, float *Wbar, float *acc, void *dq, void *dk, void *dv, void *dbeta,
                       const float *graw, float *dg, cudaStream_t s) {
    if constexpr (sizeof(T) == 2) {
        /* the fast path (see pullback_fast_kernel) where its tiles apply */
        const bool al = ((uintptr_t)dv & 15) == 0 && ((uintptr_t)dq & 3) == 0 && ((uintptr_t)dk & 3) == 0;
        /* the layout with the most double-buffered V-slab tiles that fits the device (none fits: general) */
        const PfLayout pl = (p.BT == MAXBT && p.K <= 128 && p.V % 8 == 0 && al)
                                ? pf_pick(p.K <= 64 ? 64 : 128, wy != 0, (int)sizeof(pf_gam_t<T>), p.plan.smem_optin)
                                : PfLayout{};
        if (pl.total > 0) {
            auto go = [&](auto ks, auto wyc) {
                constexpr int KS = decltype(ks)::value;
                constexpr bool WY = decltype(wyc)::value;
                const size_t sm = pl.total;
                cudaError_t e = ensure_smem<pullback_fast_kernel<T, KS, WY>>(sm);
                if (e != cudaSuccess) return e;
                pullback_fast_kernel<T, KS, WY><<<dim3(chunk_slots(p), p.H), PF_THREADS, sm, s>>>(
                    p, (const T *)q, (const T *)k, (const T *)v, GB, A, (const T *)do_, Sc, Sbar, R, PR, acc, (T *)dq,
                    (T *)dk, (T *)dv, (T *)dbeta, graw, dg, pl);
                return cudaGetLastError();
            };
            using K64 = std::integral_constant<int, 64>;
            using K128 = std::integral_constant<int, 128>;
            if (p.K <= 64) return wy ? go(K64{}, std::true_type{}) : go(K64{}, std::false_type{});
            return wy ? go(K128{}, std::true_type{}) : go(K128{}, std::false_type{});
        }
    }
    const size_t smem = pb_layout(sizeof(T), wy, p.Kp).total_bytes;
    auto kern = pullback_kernel<T>;
    cudaError_t e = ensure_smem<pullback_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(chunk_slots(p), p.H);
    kern<<<grid, PB_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, GB, A,
                                        (const T *)do_, Sc, Sbar, R, PR, wy, Wbar, acc, (T *)dq, (T *)dk, (T *)dv,
                                        (T *)dbeta, graw, dg);
    return cudaGetLastError();
}

cudaError_t launch_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                            const void *beta, const float *GB, const float *A, const void *do_,
                            const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, int wy,
                            float *Wbar, float *acc, void *dq, void *dk, void *dv, void *dbeta, const float *graw,
                            float *dg, cudaStream_t s) {
    (void)beta; /* β comes from GB */
    if (p.plan.pb_ws && !wy) return launch_pullback_ws(p, q, k, v, GB, do_, Sc, Sbar, R, PR, acc, dq, dk, dv, dbeta, graw, dg, s);
    return with_dtype(dt, [&](auto t) {
        return run<decltype(t)>(p, q, k, v, GB, A, do_, Sc, Sbar, R, PR, wy, Wbar, acc, dq, dk, dv, dbeta, graw, dg, s);
    });
}

} // namespace rewy_cuda
