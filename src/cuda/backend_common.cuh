/* backend_common.cuh: the host orchestration both CUDA backends share: the buffer layouts, the
 * workspace-size queries and the stage sequence of the forward and the backward (MATH §2–§8).
 * cuda_backend.cu (scalar gates: DeltaNet, GDN) and vec_backend.cu (vector gates: KDA, GDN2) each
 * supply an operator struct (ScalarGates / VectorGates) with only what differs between them:
 *
 *   supports(c)     the operators it runs
 *   regions(c, g, plan)  the sizes of its own regions (OpRegions: gate table, workspace head, W̄, GVA)
 *   gates           §2 intra: G, L, A = (I+L)⁻¹, C_q (those asked for): kkt_inverse.cu (Γ from scalar G) /
 *                   vec_intra.cu; and the gates the scans and the output read: the saved GB table
 *                   (scalar), or E, F, Q_g, Λ and GB in the workspace head (vector: vec_factors.cu, or
 *                   vec_intra's fast path while it runs anyway)
 *   pullback        §4a/§4b, §5 and §7 pullback.cu (Gram elimination) / §6 vec_pullback.cu (matrix intra)
 *
 * Forward:  chunk_plan → gates (G, A, C_q; factors) → state_scan (S_c, R, ht) → output (o); on small grids
 *           the fused-output scan starts beside the gates stage and waits per chunk (state_scan_beside_kkt)
 * Backward: gates (policy R: C_q, and for vector gates G, A is saved; W for the W chain; factors) → [policy R: state_scan
 *           (S_c, R), in one launch with:] bwd_state_scan (S̄⁺, P or R̄, dh0) [→ P from R̄ after the W chain]
 *           → pullback (dq, dk, dv, dβ, dg | db, dw)
 * Policy R (§8) recomputes C_q, S_c and R in the backward from the saved A (and the saved scalar gate table,
 * or the vector gates' G, recomputed with C_q from g: the fp32 [NC*HV][BT][Kp] table is as large as g itself,
 * which the caller keeps for the backward anyway); policy A saves them.
 * Every kernel runs on cfg.stream; nothing synchronizes the host; all scratch comes from the caller's
 * workspace or saved buffer. Layouts (each region 256-B aligned; ⟨⟩: the operator's regions):
 *
 * saved:   ChunkInfo[NC] | int coff[N+1] | ⟨gate table⟩ (vector gates: policy A only) | A fp32 [NC*HV][BT][BT]
 *          policy A: + C_q cq_t [NC*HV][BT][BT] | S_c state_t [NC*HV][K][V] | R rp_t [NC*HV][BT][V]
 *          then the record (cuda_backend.cu), and with time windows (Plan::win, nwin of them) the start states of
 *          all but the first, fp32 [nwin − 1][N*HV][K][V] (Prob::ck); segments (Plan::seg): the forward's maps T,
 *          fp32 [N*nwin*HV][K][K], and an int, nonzero where the forward left them
 * fwd ws:  ⟨head⟩ | policy R: C_q, S_c, R (policy A keeps them in saved), vector gates' ⟨gate table⟩ | ⟨W, U⟩ (over S_c, R under
 *          policy R: the forward that reads W, U fuses the output and stores neither) | with W, U: int
 *          ready flags [NC*HV] (the scan beside kkt); at least 256 B
 * bwd ws:  ⟨head⟩ | policy R: C_q, S_c, R, vector gates' ⟨gate table⟩ | S̄⁺ state_t [NC*HV][K][V] | P (or R̄) rp_t [NC*HV][BT][V]
 *          | ⟨W̄: WY scratch⟩ | ⟨GVA (HV > H): q̄, k̄ accumulators⟩ | policy R: ⟨W (the reverse scan's W chain)⟩
 *          time windows: every [NC*HV] region above but W̄ and GVA holds one window, [N*win*HV] slots; an fp32
 *          S̄ carry [N*HV][K][V] after P. Segments (Plan::seg) lay their own regions from the same place, over these
 *          (which only the windows' fallback uses): S_c state_t [NC*HV][K][V] | the segments' chunk offsets
 *          int [N*nwin+1] | two fp32 state regions [N*nwin*HV][K][V], B and T (Tᵀ where the forward left no T; in dq
 *          where it fits: seg_tt_in_dq)
 *
 * The operators' regions are in the file-top comments of cuda_backend.cu and vec_backend.cu, next to
 * ScalarGates::regions and VectorGates::regions / factor_plan, which size them.
 *
 * NC = number of chunks: exact from cu_seqlens_host when given, else ⌈T/BT⌉ + num_seqs (varlen)
 * or B·⌈T/BT⌉ (common.cuh geometry).
 *
 * K < 16 (Plan::recurrent): the plain fp32 token recurrence instead of every stage above (recurrent.cu), for all
 * four operators, with its own small layout (recurrent_layout), the same under both policies (the checkpoints are
 * what policy A would save and policy R recompute from) and for both pullbacks (bwd_algo changes nothing there):
 * saved:   ChunkInfo[NC] | int coff[N+1] | checkpoints fp32 [NC][HV][K][V] (the state before each chunk)
 * fwd ws:  256 B (unused)
 * bwd ws:  token states fp32 [N·HV][BT][K][V] (one chunk per block) | HV > H: q̄, k̄ partials fp32 2×[B·T][HV][K] */
#ifndef REWY_CUDA_BACKEND_COMMON_CUH
#define REWY_CUDA_BACKEND_COMMON_CUH

#include "kernels.cuh"
#include <limits.h>
#include <math.h>

namespace rewy_cuda {
namespace host {

inline size_t al(size_t x) { return (x + 255) & ~(size_t)255; }
/* the saved record's region (cuda_backend.cu, rewy_saved_record), right after the saved regions */
constexpr size_t RECORD_BYTES = 256;

template <class P> P *at(const void *base, size_t off) { return (P *)((char *)base + off); }

/* The operator's own regions, in bytes (0: absent). */
struct OpRegions {
    size_t gate; /* scalar GB fp32 [NC*HV][2][BT], saved after coff / vector Gc fp32 [NC*HV][BT][Kp], saved
                  * there under policy A, else in each workspace (the backward's gates stage recomputes it) */
    size_t head; /* at the start of both workspaces, a multiple of 256: vector factors / none */
    size_t Wbar; /* bwd ws: W̄ scratch of the WY pullback */
    size_t acc;  /* bwd ws: GVA q̄, k̄ accumulators when HV > H */
    size_t W, U; /* fwd ws: W, U of the two-product forward chain (state_scan_uses_wu) where it may run */
    size_t Wb;   /* policy-R bwd ws: W of the reverse scan's W chain (bwd_scan_uses_w) where it may run */
};

struct Layout : Geometry {                         /* NC, N, HV, BT, Kp */
    size_t ctab, coff, G, A, Cq, Sc, R, saved;    /* saved offsets */
    size_t ckpt, rstates, racc;                    /* the recurrence's (Plan::recurrent): saved checkpoints; bwd ws */
    size_t fCq, fSc, fR, fG, fW, fU, fRdy, fwd;    /* fwd workspace */
    size_t bCq, bSc, bR, bG, Sbar, PR, Wbar, acc, bW, bwd; /* bwd workspace */
    bool has_wu, has_bw;                               /* the layouts hold fwd W, U / bwd W */
    bool ws_gate;                                      /* the gate table in the workspaces (fG, bG), not saved (G) */
    int nwin;                                          /* time windows (Plan::win): how many (1: none) */
    size_t wck, wcarry, wcarry2;                       /* their checkpoints (saved), S̄ carries (bwd ws) */
    size_t sSc, sco, sB, sT;                           /* segments (Plan::seg; bwd ws): S_c, offsets, state regions */
    size_t fsco, fX;                                   /* and the forward's (fwd ws): offsets, end states */
    size_t segT, segok;                                /* the forward's maps T and whether it left them (saved) */
    bool sT_dq;                                        /* segments: Tᵀ in the caller's dq, not at sT (seg_tt_in_dq) */
    bool a16;                                          /* the saved A in bf16 (Prob::a16), else fp32 */
    size_t saved_end;                                  /* the saved buffer's size: regions, record, checkpoints */
};

/* The caller's pointers whose alignment decides choices (the wgmma scans' 16-byte rows); NULL in a size query,
 * whose regions do not depend on those choices. */
struct PlanPtrs {
    const void *q = nullptr, *k = nullptr, *v = nullptr, *do_ = nullptr, *o = nullptr;
    const void *dq = nullptr, *dk = nullptr, *dv = nullptr; /* the backward's outputs (pullback_ws) */
};

/* Policy R's time windows (DESIGN.md, "Memory"): chunks per window, 0 for none. The backward walks each sequence's
 * chunks in windows of `win` from the last; per window the gates stage (C_q, W, U), the pair of chains or scans and the
 * pullback run over that window's chunks only, so every per-chunk workspace region holds one window. The recompute
 * of window w starts from the state the forward pass left at its first chunk (checkpoints in the saved buffer, which
 * the forward's one walk writes on its way: Prob::ck), the reverse walk
 * from the S̄ its later window left (an fp32 carry in the workspace).
 * Where: policy R; scalar gates; 2-byte inputs, chunk 64, K tile of 64, 128 or 256 (kkt's fast path, the mma.sync
 * chains and scans, which index the regions by window slot); no grid the wgmma scans could take (their reverse scan
 * has no window slots; judged with aligned pointers, so that the forward and the backward, whose pointers differ,
 * decide alike). Windows count from each
 * sequence's start; a sequence shorter than the longest is done after fewer (varlen). force.win = n > 0: n chunks a
 * window where it applies, 0 none; otherwise the rule below. */
/* the chunks of the longest sequence (cu_seqlens_host: the CUDA backend requires it with varlen) */
inline int max_seq_chunks(const rewy_config *c, int BT) {
    if (!c->cu_seqlens_host) return ceil_div(c->T, BT);
    int m = 0;
    for (int s = 0; s < c->num_seqs; s++) {
        const int n = ceil_div(c->cu_seqlens_host[s + 1] - c->cu_seqlens_host[s], BT);
        m = n > m ? n : m;
    }
    return m;
}
/* windows (or segments) of win chunks over the longest sequence's ncs: win, with their count in nwin; 0 (nwin 1) where
 * one window would hold the whole sequence */
inline int windows_of(int ncs, int win, int *nwin) {
    if (win <= 0 || win >= ncs) return 0;
    *nwin = win_count(ncs, win);
    return win;
}
inline int plan_windows(const rewy_config *c, const Prob &p, bool vec, int *nwin) {
    *nwin = 1;
    const Plan &pl = p.plan;
    const int f = pl.force.win;
    if (f == 0 || c->policy != REWY_POLICY_R || vec || c->dtype == REWY_F32 || p.BT != MAXBT ||
        (p.Kp != 64 && p.Kp != 128 && p.Kp != 256))
        return 0;
    if (state_scan_wg_ok(p, c->dtype, nullptr, nullptr, false)) return 0;
    const int ncs = max_seq_chunks(c, p.BT);
    int win = f; /* forced (the tests), or the rule below */
    /* The rule: a quarter of the chunks a window on sequences of at least 16 chunks, where a window still gives the
     * pullback two blocks per SM (its grid: N·win slots × H key heads) and its N·win slots are at most half the
     * chunks (varlen). H200, session 28: the backward's peak memory halves ((4,4096,16) 677.5 → 321.5 MiB, (1,8192,16)
     * 337.8 → 158.8) for 7–10 % of the backward's time (docs/PERF.md). The rule reads the SM count, so the saved
     * record carries the window (cuda_backend.cu, record_of): a backward planned on another GPU than its forward is
     * refused rather than reading checkpoints the forward never wrote. */
    if (f < 0) {
        const int q = ceil_div(ncs, 4);
        win = ncs >= 16 && (long)p.N * q * p.H >= 2L * pl.sms && 2L * p.N * q <= p.NC ? q : 0;
    }
    return windows_of(ncs, win, nwin);
}

/* Policy R's sequence split (MATH §11d; DESIGN.md, "Segments"): where one block per sequence and head leaves SMs idle,
 * the time windows above run at once, each as a segment of its sequence: the backward recomputes every segment's chunk
 * states from the forward's checkpoint at its start, finds the gradient at every segment's end from two local reverse
 * walks (X̄ from zero, Tᵀ from the identity) and their combine, and runs the fused reverse pass (reverse_ws.cu) over
 * all segments in one launch. Returns the segment's chunks (then Plan::win, with nwin segments over the longest
 * sequence; Plan::seg = 1), 0 for none.
 * Where: policy R with the fused pass's shapes (bf16, K = V = 128, one key head a value head, an sm_90a binary) and a
 * forward that leaves checkpoints (no wgmma forward scan); judged without the pointers and whatever the pullback, so
 * that the forward and every backward on its saved buffer decide alike (the saved record carries the windows, and a
 * backward may take either pullback). A backward that the fused pass cannot take (WY, or pointers it cannot map) runs
 * the same windows one after the other instead (the layout holds both).
 * By default in place of the time windows (plan_windows: long sequences on grids the wgmma scans do not take), with
 * ⌊SMs / (N·HV)⌋ segments a sequence (the fused pass's blocks then fill the SMs once) but no more than leave 16 chunks
 * to each, and none where that is fewer than 4: the two local walks and the combine cost about what four times the
 * blocks win back (session 40, H100: GDN (1,8192,16) and (2,16384,8) with 8 segments 18 % and 24 % faster than the
 * windows, (4,4096,16) with 2 segments 11 % slower; DESIGN.md, "Segments"). force.seg = n > 0: n chunks a segment
 * where segments apply, 0 none. */
inline int plan_segments(const rewy_config *c, const Prob &p, bool vec, int *nwin) {
    *nwin = 1;
    const Plan &pl = p.plan;
    const int f = pl.force.seg;
    if (f == 0 || c->policy != REWY_POLICY_R || p.G != 1 || p.K != 128 || p.V != 128 || !pl.wgmma) return 0;
    if (!pullback_ws(p, c->dtype, vec, false, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr)) return 0;
    if (state_scan_wg_ok(p, c->dtype, nullptr, nullptr, vec)) return 0; /* the forward's wgmma scan leaves no checkpoints */
    const int ncs = max_seq_chunks(c, p.BT);
    if (f > 0) return windows_of(ncs, f, nwin);
    int windows; /* (forced windows, or none, keep their meaning) */
    if (pl.force.win >= 0 || !plan_windows(c, p, vec, &windows)) return 0;
    const long fill = (long)pl.sms / ((long)p.N * p.HV), most = ncs / 16, n = fill < most ? fill : most;
    return n >= 4 ? windows_of(ncs, ceil_div(ncs, (int)n), nwin) : 0;
}

/* The forward's sequence split (MATH §11b; Plan::fwd_seg): wherever the backward's segments run (Plan::seg), the forward
 * takes the same segments, if the warp-specialized chain (chain_ws.cu) can take the problem and its pointers (else it
 * walks each sequence whole, leaving the checkpoints as it goes). 1. every segment's end state from its start (h0 for
 * the first, zero for the others) and its map T, on the wgmma scan (state_scan_wg.cu); 2. the combine: each segment's
 * start state, which is also the backward's checkpoint; 3. the chain over all segments at once from their starts, with
 * the output. Where one block a sequence and head leaves most SMs idle, this trades the walk's length for about twice
 * the chunk steps on many more blocks. force.fwd_ws = 0 or force.fwd_chain = 0: the whole walks (the tests' other
 * forward under segments). */
inline bool plan_fwd_segments(const rewy_config *c, const Prob &p, bool vec, const PlanPtrs &ptr) {
    const Plan &pl = p.plan;
    if (!pl.seg || pl.force.fwd_ws == 0 || pl.force.fwd_chain == 0) return false;
    return chain_forward_ws_fits(p, c->dtype, vec, ptr.q, ptr.k, ptr.v, ptr.o);
}

/* The value columns of policy R's recompute blocks before the fused pass (Plan::rec_vt; chain_ws.cu's recompute form):
 * 64 where two blocks a walk (a sequence, or a segment, and a value head) still fit the SMs in one wave, so that the
 * SMs one block a walk left idle take the other half; else 128. force.rec_vt: 64 or 128. After the segments' choice. */
inline int plan_rec_vt(const Prob &p) {
    const Plan &pl = p.plan;
    if (pl.force.rec_vt == 64 || pl.force.rec_vt == 128) return pl.force.rec_vt;
    const long walks = (long)p.N * (pl.seg ? pl.nwin : 1) * p.HV;
    return 2 * walks <= pl.sms ? 64 : 128;
}

/* The fused reverse pass as a pair of blocks a walk (Plan::rev_pair; reverse_ws.cu): in time windows (not segments,
 * whose S̄ runs in place in one buffer) where two blocks a sequence and head still fit the SMs in one wave, as at
 * (4,4096,16), where one block a walk leaves half of them idle. Without the pointers: the windows' second carry (Layout)
 * follows it. force.rev_pair: 0 never, 1 in every window. */
inline bool rev_pair_fits(const Plan &pl, long N, long HV) {
    if (pl.force.rev_pair == 0 || !pl.win || pl.seg) return false;
    return pl.force.rev_pair == 1 || 2 * N * HV <= pl.sms;
}

/* the chunk × value-head slots of the backward's per-chunk regions: every chunk's, or one time window's (segments: the
 * windows' fallback's; the segments' own S_c holds every chunk's) */
inline size_t bwd_slots(const Geometry &g, const Plan &pl) {
    return pl.win ? (size_t)g.N * pl.win * g.HV : (size_t)g.NC * g.HV;
}

/* Segments (Plan::seg): whether Tᵀ of every segment (fp32, tt bytes) goes in the caller's dq rather than in the
 * workspace. Tᵀ lives from the local walks to the combine, and dq is written only after, by the fused pass; dq is bf16
 * there (the fused pass's inputs), whose first 16-B boundary Tᵀ starts at. Decided from the config alone, as every
 * region is (the size query has no pointers). */
inline bool seg_tt_in_dq(const rewy_config *c, size_t tt) {
    const size_t dq = (size_t)c->B * c->T * c->H * c->K * 2;
    return tt + 16 <= dq;
}

/* The plan of one call (common.cuh, Plan): the device asked once, then every choice in order, each function
 * reading the choices before it. force NULL: none (the library's own calls). */
inline Plan make_plan(const rewy_config *c, const rewy_test_force *force, const PlanPtrs &ptr = PlanPtrs()) {
    const Geometry g = geometry(c);
    Prob p = {};
    p.B = c->B; p.T = c->T; p.H = c->H; p.HV = g.HV; p.K = c->K; p.V = c->V; p.BT = g.BT;
    p.G = g.HV / c->H; p.N = g.N; p.NC = g.NC; p.Kp = g.Kp;
    p.gated = c->op != REWY_OP_DELTANET; /* as make_prob (session 34's chain_forward_ws read it here, unset) */
    Plan &pl = p.plan;
    pl.force = force ? *force : rewy_test_force_none();
    pl.recurrent = plan_recurrent(c, pl.force);
    if (pl.recurrent) return pl; /* none of the chunk path's choices applies, and no device query is needed */
    int dev = 0, sms = 0, per_sm = 0, rsv = 0, optin = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 0;
        if (cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&rsv, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
            per_sm = rsv = 0; /* then no two blocks "fit" (blocks_fit_sm) */
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) optin = 0;
    }
    pl.sms = sms; pl.smem_sm = (size_t)per_sm; pl.smem_rsv = (size_t)rsv; pl.smem_optin = (size_t)optin;
    pl.wgmma = wgmma_binary_ok(); /* each query of a kernel's attributes costs host time: once per call */
    const bool vec = c->op == REWY_OP_KDA || c->op == REWY_OP_GDN2;
    const rewy_dtype dt = c->dtype;
    pl.scan_bv = plan_scan_bv(p);
    pl.scan_8w = plan_scan_8w(p);
    pl.pair_8w = pl.force.scan_8w != 0;
    pl.scan_wg = state_scan_wg_ok(p, dt, ptr.k, ptr.v, vec);
    pl.bwd_scan_wg = bwd_state_scan_wg_ok(p, dt, ptr.q, ptr.k, ptr.do_, vec);
    pl.scan_wg2 = plan_scan_wg2(p);
    pl.fwd_chain = chain_forward_bvc(p, dt, vec, ptr.o);
    pl.fwd_ws = chain_forward_ws(p, dt, vec, ptr.q, ptr.k, ptr.v, ptr.o, pl.fwd_chain);
    /* its stages (kkt's A in bf16; C_q it forms itself) and value tile: 64 columns where the register chain's rule
     * (chain_forward_bvc) takes 64 (B·HV blocks of 128 would leave SMs idle), else 128 */
    if (pl.fwd_ws) pl.fwd_chain = pl.fwd_chain == 64 ? 64 : 128;
    pl.fuse_output = state_scan_fuses_output(p, dt, vec);
    pl.scan_wu = state_scan_uses_wu(p, dt);
    pl.beside_kkt = state_scan_beside_kkt(p);
    pl.bwd_w = bwd_scan_uses_w(p, dt, vec);
    pl.chain_bvc = chain_scan_bvc(p, dt, vec);
    pl.chain_ws = chain_scan_ws(p, dt, vec, pl.chain_bvc);
    if (pl.chain_ws) pl.chain_bvc = 128; /* its stages (kkt's W and U, P after it) and layout */
    pl.chain_bulk = chain_scan_bulk(p);
    pl.pb_ws = pullback_ws(p, dt, vec, c->bwd_algo == REWY_BWD_WY, ptr.q, ptr.k, ptr.v, ptr.do_, ptr.dq, ptr.dk, ptr.dv);
    pl.win = plan_segments(c, p, vec, &pl.nwin);
    pl.seg = pl.win > 0;
    pl.fwd_seg = plan_fwd_segments(c, p, vec, ptr);
    if (!pl.seg) pl.win = plan_windows(c, p, vec, &pl.nwin);
    pl.rev_ws = reverse_ws(p, pl.win);
    pl.rev_rf = pl.rev_ws && c->policy == REWY_POLICY_R;
    pl.rev_pair = pl.rev_ws && rev_pair_fits(pl, p.N, p.HV);
    pl.rec_vt = plan_rec_vt(p);
    return pl;
}

/* The recurrence's layout (Plan::recurrent; the file-top comment), whatever the operator and the policy. */
inline Layout recurrent_layout(const rewy_config *c) {
    Layout L = {};
    const Geometry g = geometry(c);
    L.NC = g.NC; L.N = g.N; L.HV = g.HV; L.BT = g.BT; L.Kp = g.Kp;
    const size_t K = (size_t)c->K, V = (size_t)c->V, HV = (size_t)g.HV;
    size_t o = 0;
    L.ctab = o; o += al(sizeof(ChunkInfo) * L.NC);
    L.coff = o; o += al(sizeof(int) * (L.N + 1));
    L.ckpt = o; o += al(sizeof(float) * (size_t)L.NC * HV * K * V);
    L.nwin = 1;
    L.saved = o;
    L.saved_end = al(L.saved) + RECORD_BYTES;
    L.fwd = 256; /* never 0: the API requires a workspace pointer */
    o = 0;
    L.rstates = o; o += al(rec_states_bytes((size_t)L.N, HV, (size_t)L.BT, K, V));
    L.racc = o;
    if (g.HV > c->H) o += al(rec_acc_bytes((size_t)c->B * c->T, HV, K));
    L.bwd = o;
    return L;
}

template <class Op> Layout plan(const rewy_config *c, const Plan &pl) {
    if (pl.recurrent) return recurrent_layout(c);
    Layout L = {};
    const Geometry g = geometry(c);
    const OpRegions r = Op::regions(c, g, pl);
    L.NC = g.NC; L.N = g.N; L.HV = g.HV; L.BT = g.BT; L.Kp = g.Kp;
    const size_t chh = (size_t)L.NC * L.HV, nn = (size_t)L.BT * L.BT;
    /* the backward's per-chunk regions: every chunk, or one time window's (Plan::win; segments: the fallback's windows) */
    L.nwin = pl.nwin;
    const size_t bchh = bwd_slots(g, pl);
    const size_t state = (size_t)c->K * c->V, st = state * sizeof(state_t), rv = (size_t)L.BT * c->V * sizeof(rp_t);
    const bool polA = c->policy == REWY_POLICY_A;
    L.ws_gate = Op::vector_gates && !polA;
    size_t o = 0;
    /* saved under policy A, else both workspaces: C_q, S_c and R for n chunk × value-head slots */
    auto cq_sc_r = [&](size_t &Cq, size_t &Sc, size_t &R, size_t n) {
        Cq = o; o += al(sizeof(cq_t) * n * nn);
        Sc = o; o += al(n * st);
        R = o; o += al(n * rv);
    };
    L.ctab = o; o += al(sizeof(ChunkInfo) * L.NC);
    L.coff = o; o += al(sizeof(int) * (L.N + 1));
    L.G = o;
    if (!L.ws_gate) o += al(r.gate);
    /* A = (I + L)⁻¹ in bf16 on the scalar gates' bf16 path (kkt's fast path: chunk 64, K tile of 64, 128 or 256), where
     * the forward chains and the fused reverse pass multiply by it in bf16 anyway: kkt then writes that one copy (8 KB a
     * chunk and value head, not 16 KB in fp32 and 8 again in bf16), and the other readers widen it, so that every path's
     * gradient is that of the forward computed; else fp32 */
    L.a16 = !Op::vector_gates && c->dtype == REWY_BF16 && fast_shape(L.BT, L.Kp);
    L.A = o; o += al((L.a16 ? sizeof(__nv_bfloat16) : sizeof(float)) * chh * nn);
    if (polA) cq_sc_r(L.Cq, L.Sc, L.R, chh);
    L.saved = o;
    /* time windows: every window's start state but the first's (the forward's checkpoints, Prob::ck), fp32
     * [nwin − 1][N·HV][K][V], after the record (whose place, cuda_backend.cu's record_at, is taken without the plan's
     * windows) */
    L.wck = al(L.saved) + RECORD_BYTES;
    L.saved_end = L.wck + (L.nwin > 1 ? al(sizeof(float) * (L.nwin - 1) * L.N * L.HV * state) : 0);
    /* segments: the maps T_w of the forward's segment walks, whose transposes the backward's combine reads in place of
     * its own homogeneous walks (segments.cu); the int tells it whether the forward left them (the forward that walks
     * whole sequences, its pointers unfit for the segments' chain, leaves none) */
    if (pl.seg) {
        L.segT = al(L.saved_end);
        L.segok = L.segT + al(sizeof(float) * L.N * pl.nwin * L.HV * (size_t)c->K * c->K);
        L.saved_end = L.segok + al(sizeof(int));
    }
    o = r.head;
    if (!polA) cq_sc_r(L.fCq, L.fSc, L.fR, chh);
    L.fG = o;
    if (L.ws_gate) o += al(r.gate);
    /* W, U: where the forward takes them it fuses the output (the scan's or the register chain's), and under
     * policy R it then writes no S_c or R, so they go over those regions (as far as they reach) */
    const size_t wu_at = polA ? o : L.fSc;
    L.has_wu = r.W > 0 && r.U > 0;
    L.fW = wu_at;
    L.fU = wu_at + al(r.W);
    L.fRdy = L.fU + al(r.U); /* kkt's ready flags, one int per chunk and value head (state_scan_beside_kkt) */
    const size_t wu_end = L.fRdy + (L.has_wu ? al(sizeof(int) * chh) : 0);
    if (wu_end > o) o = wu_end;
    /* segments (Plan::seg; the forward's, Plan::fwd_seg, whatever the pointers): their chunk offsets, int [N·nwin + 1];
     * an fp32 [N·nwin·HV][K][V] state region X (each segment's end state from its local walk, then its start state (the
     * combine, in place), then its end state (the chain, in place)); the maps T go to the saved buffer (L.segT) */
    if (pl.seg) {
        L.fsco = o; o += al(sizeof(int) * ((size_t)L.N * pl.nwin + 1));
        L.fX = o; o += al(sizeof(float) * L.N * pl.nwin * L.HV * state);
    }
    L.fwd = o > 256 ? o : 256; /* never 0: the API requires a workspace pointer */
    o = r.head;
    const size_t seg_at = o; /* segments: their regions from here, over the fallback's below (one or the other runs) */
    if (!polA) cq_sc_r(L.bCq, L.bSc, L.bR, bchh);
    L.bG = o;
    if (L.ws_gate) o += al(r.gate);
    L.Sbar = o; o += al(bchh * st);
    L.PR = o; o += al(bchh * rv);
    L.wcarry = o; /* windows: S̄ between them, fp32 [N·HV][K][V]; a second for the fused pass's pairs (rev_pair_fits) */
    if (pl.win) o += al(sizeof(float) * L.N * L.HV * state);
    L.wcarry2 = o;
    if (rev_pair_fits(pl, L.N, L.HV)) o += al(sizeof(float) * L.N * L.HV * state);
    L.Wbar = o; o += al(r.Wbar);
    L.acc = o; o += al(r.acc);
    L.bW = o;
    if (!polA) o += al(r.Wb);
    L.has_bw = !polA && r.Wb > 0;
    /* segments (Plan::seg): every chunk's S_c; their chunk offsets, int [N·nwin + 1]; two fp32 [N·nwin·HV][K][V] state
     * regions (the backward's stages, in order: B the recompute's start states, then X̄, then S̄ at each segment's end
     * (the combine, in place), then S̄ at each segment's start (the fused pass, in place); T Tᵀ, in dq where it fits) */
    if (pl.seg) {
        const size_t segs = (size_t)L.N * pl.nwin, sst = sizeof(float) * segs * L.HV * state;
        size_t q = seg_at;
        L.sSc = q; q += al(chh * st);
        L.sco = q; q += al(sizeof(int) * (segs + 1));
        L.sB = q; q += al(sst);
        L.sT = q;
        L.sT_dq = seg_tt_in_dq(c, sst);
        if (!L.sT_dq) q += al(sst);
        if (q > o) o = q;
    }
    L.bwd = o;
    return L;
}

/* saved, fwd or bwd bytes of Op's layout under the plan pl; 0 for an operator Op does not run. */
template <class Op> size_t layout_bytes(const rewy_config *c, size_t Layout::*which, const Plan &pl) {
    return Op::supports(c) ? plan<Op>(c, pl).*which : 0;
}

inline Prob make_prob(const rewy_config *c, const Layout &L, const void *saved, const Plan &pl) {
    Prob p;
    p.B = c->B; p.T = c->T; p.H = c->H; p.HV = L.HV; p.K = c->K; p.V = c->V; p.BT = L.BT;
    p.G = L.HV / c->H; p.N = L.N; p.NC = L.NC; p.Kp = L.Kp;
    p.gated = c->op != REWY_OP_DELTANET; /* GDN, KDA, GDN2 */
    p.svf = c->state_v_first != 0;
    p.zero_h0 = 0;
    p.a16 = L.a16;
    p.scale = c->scale != 0.f ? c->scale : 1.f / sqrtf((float)c->K);
    p.plan = pl;
    p.ctab = (const ChunkInfo *)((const char *)saved + L.ctab);
    p.coff = (const int *)((const char *)saved + L.coff);
    p.win_lo = 0; p.win_hi = INT_MAX; p.win_len = 0; /* every chunk; window_prob narrows it */
    p.ck = nullptr; p.ck_win = 0; /* forward() sets them under time windows */
    return p;
}

/* p narrowed to time window w of the layout's (Plan::win) for the backward, whose regions hold that window */
inline Prob window_prob(const Prob &p, const Layout &L, int w) {
    Prob q = p;
    if (L.nwin > 1) {
        q.win_lo = w * p.plan.win;
        q.win_hi = q.win_lo + p.plan.win;
        q.win_len = p.plan.win;
    }
    return q;
}

/* dst [N·HV][K][V] fp32 ← segment w's state of every sequence in the segments' state region src [N·nwin·HV][K][V]
 * (segment sq·nwin + w of sequence sq: the forward's ht from the last, the backward's dh0 from the first) */
inline cudaError_t copy_segment_states(float *dst, const float *src, const Prob &p, int nwin, int w, cudaStream_t s) {
    const size_t row = sizeof(float) * p.HV * p.K * p.V;
    return cudaMemcpy2DAsync(dst, row, src + (size_t)w * p.HV * p.K * p.V, row * nwin, row, p.N,
                             cudaMemcpyDeviceToDevice, s);
}

/* p as the segments' sequences (Plan::seg; sco: their chunk offsets, launch_seg_offsets): segment x = sequence · nwin +
 * w, every chunk in its workspace slot. Their scans are the wgmma scans at 64-column tiles, two warpgroups a block (the
 * segments' grid is what fills the SMs; the fused pass's pointers, Plan::rev_ws, are theirs too). */
inline Prob segment_prob(const Prob &p, const int *sco) {
    Prob q = p;
    q.N = p.N * p.plan.nwin;
    q.coff = sco;
    q.plan.scan_wg = q.plan.bwd_scan_wg = 1;
    q.plan.scan_bv = 64;
    q.plan.scan_wg2 = 1;
    return q;
}

/* The gates as state_scan, output and bwd_state_scan take them: the per-chunk table GB and,
 * for vector gates, the factors (vo() NULL: scalar gates). */
struct ScanGates {
    const float *GB = nullptr;
    VecOps ops = {};
    bool vec = false;
    const VecOps *vo() const { return vec ? &ops : nullptr; }
};

#define REWY_TRY(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return REWY_ERR_BACKEND; } while (0)

/* The recurrence's arguments (recurrent.cuh) common to its forward and backward: the shape, the saved checkpoints
 * and the inputs (a: rewy_fwd_params or rewy_bwd_params, which name them alike). */
template <class Params> inline RecArgs rec_args(const Params *a, const Layout &L, const Prob &p) {
    const rewy_config *c = &a->cfg;
    RecArgs r = {};
    r.op = c->op;
    r.N = p.N; r.T = c->T; r.H = c->H; r.HV = p.HV; r.K = c->K; r.V = c->V; r.BT = p.BT; r.G = p.G;
    r.svf = p.svf;
    r.scale = p.scale;
    r.cu = c->cu_seqlens;
    r.coff = at<const int>(a->saved, L.coff);
    r.ckpt = at<float>(a->saved, L.ckpt);
    r.q = a->q; r.k = a->k; r.v = a->v; r.beta = a->beta; r.b = a->b; r.w = a->w; r.g = a->g; r.h0 = a->h0;
    return r;
}

/* K < 16 (Plan::recurrent): chunk_plan (the checkpoints' chunk offsets), then the recurrence; o, ht, checkpoints. */
inline rewy_status recurrent_forward(const rewy_fwd_params *a, const Layout &L, const Prob &p) {
    const rewy_config *c = &a->cfg;
    cudaStream_t s = (cudaStream_t)c->stream;
    REWY_TRY(launch_chunk_plan(p, c->cu_seqlens, at<ChunkInfo>(a->saved, L.ctab), at<int>(a->saved, L.coff), s));
    RecArgs r = rec_args(a, L, p);
    r.o = a->o; r.ht = a->ht;
    REWY_TRY(launch_recurrent_forward(r, c->dtype, s));
    return REWY_OK;
}

/* K < 16: the recurrence's reverse mode from the forward's checkpoints (both policies, both pullbacks). */
inline rewy_status recurrent_backward(const rewy_bwd_params *a, const Layout &L, const Prob &p) {
    const rewy_config *c = &a->cfg;
    cudaStream_t s = (cudaStream_t)c->stream;
    RecArgs r = rec_args(a, L, p);
    r.do_ = a->do_; r.dht = a->dht; r.dh0 = a->dh0;
    r.states = at<float>(a->workspace, L.rstates);
    r.dq = a->dq; r.dk = a->dk; r.dv = a->dv; r.dbeta = a->dbeta; r.db = a->db; r.dw = a->dw; r.dg = a->dg;
    if (p.G > 1) {
        r.accq = at<float>(a->workspace, L.racc);
        r.acck = r.accq + (size_t)c->B * c->T * p.HV * c->K;
    }
    REWY_TRY(launch_recurrent_backward(r, c->dtype, s));
    return REWY_OK;
}

/* The plan of a forward or a backward call, with the caller's pointers (force: the test-only override, rewy_test.h;
 * NULL in the library's calls). The caller makes it once: its time window also goes into the saved record. */
inline Plan call_plan(const rewy_fwd_params *a, const rewy_test_force *force) {
    PlanPtrs ptr;
    ptr.q = a->q; ptr.k = a->k; ptr.v = a->v; ptr.o = a->o;
    return make_plan(&a->cfg, force, ptr);
}
inline Plan call_plan(const rewy_bwd_params *a, const rewy_test_force *force) {
    PlanPtrs ptr;
    ptr.q = a->q; ptr.k = a->k; ptr.v = a->v; ptr.do_ = a->do_;
    ptr.dq = a->dq; ptr.dk = a->dk; ptr.dv = a->dv;
    return make_plan(&a->cfg, force, ptr);
}

/* pl: the call's plan (call_plan) */
template <class Op> rewy_status forward(const rewy_fwd_params *a, const Plan &pl) {
    const rewy_config *c = &a->cfg;
    if (!Op::supports(c)) return REWY_ERR_BACKEND;
    const Layout L = plan<Op>(c, pl);
    const Prob p = make_prob(c, L, a->saved, pl);
    if (pl.recurrent) return recurrent_forward(a, L, p);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A;
    float *Gc = L.ws_gate ? at<float>(a->workspace, L.fG) : at<float>(a->saved, L.G);
    /* the saved A, fp32 or (L.a16) bf16: A carries either to kkt and the readers (Prob::a16 tells them which); the
     * forward chains' A-and-V form takes the bf16 one as A16 (they run only where it is: bf16, chunk 64, K of 64 or 128) */
    float *const A = at<float>(a->saved, L.A);
    const __nv_bfloat16 *const A16 = L.a16 ? at<const __nv_bfloat16>(a->saved, L.A) : nullptr;
    cq_t *Cq = polA ? at<cq_t>(a->saved, L.Cq) : at<cq_t>(a->workspace, L.fCq);
    REWY_TRY(launch_chunk_plan(p, c->cu_seqlens, at<ChunkInfo>(a->saved, L.ctab), at<int>(a->saved, L.coff), s));
    ScanGates sg;
    state_t *Sc = polA ? at<state_t>(a->saved, L.Sc) : at<state_t>(a->workspace, L.fSc);
    rp_t *R = polA ? at<rp_t>(a->saved, L.R) : at<rp_t>(a->workspace, L.fR);
    /* Segments (Plan::fwd_seg; MATH §11b): kkt (A in bf16 for the chain); every segment's end state and map T (saved:
     * the backward's combine reads it transposed); the combine, which writes each segment's start state over its end
     * state and into the checkpoints; the chain over all segments from their starts, with o, leaving each segment's end
     * state in its place: the last segments' are ht. Without it, the backward's segments walk their maps themselves. */
    int *const segok = pl.seg ? at<int>(a->saved, L.segok) : nullptr;
    if (pl.fwd_seg && L.has_wu && !polA && !Op::vector_gates && A16) {
        int *const sco = at<int>(a->workspace, L.fsco);
        float *const xs = at<float>(a->workspace, L.fX), *const t = at<float>(a->saved, L.segT);
        const Prob ps = segment_prob(p, sco);
        REWY_TRY(Op::gates(p, a, L, Gc, A, nullptr, Gc, &sg, s));
        REWY_TRY(launch_seg_offsets(p, pl.win, pl.nwin, sco, s));
        REWY_TRY(launch_seg_walks(ps, pl.nwin, a->k, a->v, sg.GB, A, a->h0, xs, t, s));
        REWY_TRY(cudaMemsetAsync(segok, 1, sizeof(int), s)); /* (bytes of 1: nonzero) */
        REWY_TRY(launch_seg_combine_fwd(p, pl.nwin, a->h0, t, xs, L.nwin > 1 ? at<float>(a->saved, L.wck) : nullptr, s));
        REWY_TRY(launch_chain_forward_ws(ps, a->q, a->k, a->v, sg.GB, A16, nullptr, xs, xs, nullptr, nullptr, a->o, s));
        if (a->ht) REWY_TRY(copy_segment_states(a->ht, xs, p, pl.nwin, pl.nwin - 1, s)); /* the last segments' ends */
        return REWY_OK;
    }
    if (segok) REWY_TRY(cudaMemsetAsync(segok, 0, sizeof(int), s));
    /* the register chain with the output in its steps (the whole forward after kkt; its A-and-V form, with the saved A
     * in bf16 and v the input), or the scan computing o itself, on the two-product chain with W and U
     * from kkt where the shapes allow (scalar gates only: vector gates' operands come from the gates stage) */
    const bool chain = !Op::vector_gates && pl.fwd_chain > 0 && L.has_wu && A16;
    const bool fo = !Op::vector_gates && pl.fuse_output;
    WuOut wu;
    if (!chain && fo && L.has_wu && pl.scan_wu) {
        wu.W = at<__nv_bfloat16>(a->workspace, L.fW);
        wu.U = at<__nv_bfloat16>(a->workspace, L.fU);
        if (pl.beside_kkt) { /* the scan starts beside kkt and waits per chunk on its flags */
            wu.ready = at<int>(a->workspace, L.fRdy);
            wu.seq_nc = c->cu_seqlens ? 0 : p.NC / p.N;
            REWY_TRY(cudaMemsetAsync(wu.ready, 0, sizeof(int) * (size_t)p.NC * p.HV, s));
        }
    }
    /* the warp-specialized forward chain forms C_q itself (and stores it where policy A saves it) */
    const bool ws = chain && pl.fwd_ws;
    REWY_TRY(Op::gates(p, a, L, Gc, A, ws ? nullptr : Cq, Gc, &sg, s, wu));
    /* the sequential stage: one walk of every sequence, which under time windows also leaves each later window's
     * start state in the saved checkpoints (Prob::ck), from which the backward recomputes that window */
    Prob pf = p;
    if (L.nwin > 1) {
        if (pl.scan_wg) return REWY_ERR_BACKEND; /* plan_windows excludes the wgmma scans */
        pf.ck = at<float>(a->saved, L.wck);
        pf.ck_win = pl.win;
    }
    if (ws) { /* S_c, R and C_q only where policy A saves them */
        REWY_TRY(launch_chain_forward_ws(pf, a->q, a->k, a->v, sg.GB, A16, polA ? Cq : nullptr, a->h0, a->ht,
                                         polA ? Sc : nullptr, polA ? R : nullptr, a->o, s));
    } else if (chain) { /* S_c and R only where policy A saves them */
        REWY_TRY(launch_chain_forward(pf, pl.fwd_chain, a->q, a->k, a->v, sg.GB, A16, Cq, a->h0, a->ht,
                                      polA ? Sc : nullptr, polA ? R : nullptr, a->o, s));
    } else if (fo) { /* the scan writes o itself; under policy R nothing else reads S_c and R in the forward */
        ScanOut so;
        so.q = a->q; so.Cq = Cq; so.o = a->o; so.W = wu.W; so.U = wu.U; so.ready = wu.ready;
        REWY_TRY(launch_state_scan(pf, c->dtype, a->k, a->v, sg.GB, A, sg.vo(), a->h0, a->ht, polA ? Sc : nullptr,
                                   polA ? R : nullptr, s, &so));
    } else {
        REWY_TRY(launch_state_scan(pf, c->dtype, a->k, a->v, sg.GB, A, sg.vo(), a->h0, a->ht, Sc, R, s));
        REWY_TRY(launch_output(p, c->dtype, a->q, sg.GB, Cq, Sc, R, sg.vo(), a->o, s));
    }
    return REWY_OK;
}

template <class Op> rewy_status backward(const rewy_bwd_params *a, const Plan &pl) {
    const rewy_config *c = &a->cfg;
    if (!Op::supports(c)) return REWY_ERR_BACKEND;
    const Layout L = plan<Op>(c, pl);
    Prob p = make_prob(c, L, a->saved, pl);
    p.zero_h0 = a->h0 == nullptr;
    if (pl.recurrent) return recurrent_backward(a, L, p);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A, wy = c->bwd_algo == REWY_BWD_WY;
    /* the gate table: saved, or recomputed into the workspace by the gates stage below (with C_q) */
    float *Gw = L.ws_gate ? at<float>(a->workspace, L.bG) : nullptr;
    const float *Gc = L.ws_gate ? Gw : at<const float>(a->saved, L.G);
    const float *A = at<const float>(a->saved, L.A);
    ScanGates sg;
    state_t *Sbar = at<state_t>(a->workspace, L.Sbar);
    rp_t *PR = at<rp_t>(a->workspace, L.PR);
    float *Wbar = at<float>(a->workspace, L.Wbar), *acc = p.G > 1 ? at<float>(a->workspace, L.acc) : nullptr;
    /* the fused reverse pass (Plan::rev_ws): the reverse scan and the pullback in one kernel, from S_c and R, from the
     * state gradient dht to dh0 (a time window's: the carry) */
    auto reverse = [&](const Prob &pr, const state_t *Sc, const rp_t *R, const float *dht, float *dh0) {
        return launch_reverse_ws(pr, a->q, a->k, a->v, sg.GB, A, a->do_, Sc, R, dht, dh0, a->dq, a->dk, a->dv, a->dbeta,
                                 a->g, p.gated ? a->dg : nullptr, s);
    };
    if (polA) {
        REWY_TRY(Op::gates(p, a, L, nullptr, nullptr, nullptr, Gc, &sg, s));
        if (pl.rev_ws) {
            REWY_TRY(reverse(p, at<const state_t>(a->saved, L.Sc), at<const rp_t>(a->saved, L.R), a->dht, a->dh0));
            return REWY_OK;
        }
        const cq_t *Cq = at<const cq_t>(a->saved, L.Cq);
        REWY_TRY(launch_bwd_state_scan(p, c->dtype, a->q, a->k, sg.GB, A, Cq, sg.vo(), a->do_, a->dht, a->dh0, Sbar,
                                       PR, wy, s));
        REWY_TRY(Op::pullback(p, a, Gc, A, at<const state_t>(a->saved, L.Sc), Sbar, at<const rp_t>(a->saved, L.R), PR,
                              wy, Wbar, acc, s));
        return REWY_OK;
    }
    cq_t *cq = at<cq_t>(a->workspace, L.bCq);
    state_t *sc = at<state_t>(a->workspace, L.bSc);
    rp_t *r = at<rp_t>(a->workspace, L.bR);
    /* recompute: C_q only (G and A are saved; the wgmma reverse scan forms C_q itself), then S_c and R by one forward
     * scan without output, paired with the reverse scan (independent of S_c and R). Where the reverse scan runs the W
     * chain, the gates stage also forms W from the saved A, the scan stores R̄, and P = Aᵀ R̄ follows in parallel for
     * ReWY. */
    const bool cq_in_scan = !Op::vector_gates && pl.bwd_scan_wg;
    /* the register chains (small grids): W, and U over R's region, from the saved A; then both chains in one launch,
     * and P = Aᵀ R̄ for ReWY */
    const int bvc = Op::vector_gates || !L.has_bw ? 0 : pl.chain_bvc;
    /* Policy R's time windows (Plan::win, plan_windows; else one window of every chunk): the stages above and the
     * pullback once per window, from the last to the first, over the window's chunks, whose per-chunk regions (C_q,
     * S_c, R, W, U, S̄⁺, P or R̄) hold that window only. The recompute of window w starts from the forward's
     * checkpoint (the caller's h0 for the first), the reverse walk from the S̄ the later window left in the carry,
     * which starts as the caller's dht: a sequence's walk starts in the window of its last chunk, and a window empty
     * for a sequence leaves its carry as it is (the chains skip it, the scans write back what they read). Each reverse
     * block reads its carry elements at its start and writes the same ones at its end, so one buffer serves all
     * windows; the first window writes the caller's dh0. The fused pass's pairs (Plan::rev_pair) are two blocks a walk
     * whose one writer may end before the other starts: there the windows alternate two carries. */
    const bool win = L.nwin > 1;
    if (win && (pl.bwd_scan_wg || pl.scan_wg)) return REWY_ERR_BACKEND; /* plan_windows excludes the wgmma scans */
    const float *ck = at<const float>(a->saved, L.wck);
    float *const carry = at<float>(a->workspace, L.wcarry);
    float *const carry2 = pl.rev_pair ? at<float>(a->workspace, L.wcarry2) : carry;
    const size_t ckn = (size_t)p.N * p.HV * c->K * c->V;
    /* Segments (Plan::seg, plan_segments; MATH §11d): the windows at once, each a sequence of its own to the scans and
     * the fused pass (segment_prob). 1. every segment's chunk states, recomputed from the forward's checkpoint at its
     * start; 2. beside nothing else they need, X̄ of each segment (its reverse walk from zero) and, where the forward
     * left no maps T, Tᵀ (the walk from the identity with Ō = 0); 3. the combine, from the last segment: S̄ at each
     * segment's end, over Tᵀ_w, the forward's T_w read transposed where it left them; 4. the fused pass over all
     * segments from those ends, whose first segments' start gradients are dh0. Where the fused pass cannot take the
     * pointers (Plan::rev_ws off), the windows below run one after the other instead. */
    if (pl.seg && pl.rev_ws) {
        /* B: the start states, X̄, S̄ at the segments' ends, at their starts, each over the one before (layout: plan);
         * T: Tᵀ, from its 16-B boundary in dq where the layout put it there (L.sT_dq) */
        state_t *const ssc = at<state_t>(a->workspace, L.sSc);
        float *const sB = at<float>(a->workspace, L.sB);
        float *const sT = L.sT_dq ? reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(a->dq) + 15) & ~(uintptr_t)15)
                                  : at<float>(a->workspace, L.sT);
        const Prob ps = segment_prob(p, at<int>(a->workspace, L.sco));
        REWY_TRY(Op::gates(p, a, L, Gw, nullptr, nullptr, Gc, &sg, s));
        REWY_TRY(launch_seg_offsets(p, pl.win, pl.nwin, at<int>(a->workspace, L.sco), s));
        REWY_TRY(launch_seg_starts(p, pl.nwin, a->h0, ck, sB, s));
        REWY_TRY(launch_recompute_ws(ps, a->k, a->v, sg.GB, A, sB, ssc, nullptr, s));
        const int *const segok = at<const int>(a->saved, L.segok); /* the forward's T: its homogeneous blocks return */
        REWY_TRY(launch_bwd_state_scan_wg(ps, a->q, a->k, sg.GB, A, a->do_, nullptr, sB, nullptr, nullptr, 0, s, sT, segok));
        REWY_TRY(launch_seg_combine(p, pl.nwin, a->dht, sT, at<const float>(a->saved, L.segT), segok, sB, s));
        REWY_TRY(launch_reverse_ws(ps, a->q, a->k, a->v, sg.GB, A, a->do_, ssc, nullptr, sB, a->dh0 ? sB : nullptr, a->dq,
                                   a->dk, a->dv, a->dbeta, a->g, p.gated ? a->dg : nullptr, s));
        if (a->dh0) REWY_TRY(copy_segment_states(a->dh0, sB, p, pl.nwin, 0, s)); /* the first segments' start gradients */
        return REWY_OK;
    }
    if (win && a->dht) REWY_TRY(cudaMemcpyAsync(carry, a->dht, sizeof(float) * ckn, cudaMemcpyDeviceToDevice, s));
    else if (win) REWY_TRY(cudaMemsetAsync(carry, 0, sizeof(float) * ckn, s));
    for (int w = L.nwin - 1; w >= 0; w--) {
        const Prob pw = window_prob(p, L, w);
        const int k0 = win_start_checkpoint(w);
        const bool odd = (L.nwin - 1 - w) & 1; /* (the last window reads the first carry) */
        const float *h0 = k0 >= 0 ? ck + k0 * ckn : a->h0, *dht = win ? (odd ? carry2 : carry) : a->dht;
        float *dh0 = w > 0 ? (odd ? carry : carry2) : a->dh0;
        WuOut wu;
        if (pl.rev_ws) { /* the recompute of S_c alone (no C_q or R: policy R's fused pass forms both, Plan::rev_rf;
                          * chain_ws.cu's recompute form), then the fused pass, the window's S̄ from the carry and back */
            REWY_TRY(Op::gates(pw, a, L, Gw, nullptr, nullptr, Gc, &sg, s));
            REWY_TRY(launch_recompute_ws(pw, a->k, a->v, sg.GB, A, h0, sc, nullptr, s));
            REWY_TRY(reverse(pw, sc, nullptr, dht, dh0));
            continue;
        }
        if (bvc > 0) {
            wu.W = at<__nv_bfloat16>(a->workspace, L.bW);
            wu.U = reinterpret_cast<__nv_bfloat16 *>(r);
            wu.A = A;
            REWY_TRY(Op::gates(pw, a, L, Gw, nullptr, cq, Gc, &sg, s, wu));
            REWY_TRY(launch_chain_pair(pw, bvc, a->q, a->k, sg.GB, wu.W, cq, h0, sc, r, a->do_, dht, dh0, Sbar, PR, s));
            if (!wy) REWY_TRY(launch_p_from_rbar(pw, A, PR, s));
        } else {
            if (L.has_bw && !cq_in_scan && pl.bwd_w) {
                wu.W = at<__nv_bfloat16>(a->workspace, L.bW);
                wu.A = A;
            }
            REWY_TRY(Op::gates(pw, a, L, Gw, nullptr, cq_in_scan ? nullptr : cq, Gc, &sg, s, wu));
            REWY_TRY(launch_scan_pair(pw, c->dtype, a->q, a->k, a->v, sg.GB, A, cq, sg.vo(), h0, sc, r, a->do_, dht, dh0,
                                      Sbar, PR, wy, s, wu.W));
            if (wu.W && !wy) REWY_TRY(launch_p_from_rbar(pw, A, PR, s));
        }
        REWY_TRY(Op::pullback(pw, a, Gc, A, sc, Sbar, r, PR, wy, Wbar, acc, s));
    }
    return REWY_OK;
}

#undef REWY_TRY

} // namespace host
} // namespace rewy_cuda
#endif
