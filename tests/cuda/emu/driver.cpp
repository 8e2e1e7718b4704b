// driver.cpp: the vec_* CUDA kernels run under the host SIMT emulator (emu.h) against the CPU
// backend (oracle-verified) on a small case matrix; tolerance 5e-3 (fp32) / 2e-2 (bf16) relative L2.
// Build and run with tests/cuda/emu/run.sh.
// Emulated run of the vec_* CUDA kernels vs the CPU backend (itself oracle-verified).
#include <memory>
#include <random>
#include <string>
#include <functional>
#include "emu_vec_intra.inc"
#include "emu_vec_state_scan.inc"
#include "emu_vec_bwd_state_scan.inc"
#include "emu_vec_pullback.inc"
extern "C" {
#include "rewy.h"
}
using namespace rewy_cuda;

/* smem_floats: the launcher's dynamic shared-memory size (as in the .cu run()), so that an AddressSanitizer
 * build catches a kernel that outgrows its budget */
template <class F> void launch(dim3 grid, int nt, size_t smem_floats, F f) {
    std::vector<float> smem_buf(smem_floats);
    blockDim = dim3(nt); gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = dim3(x, y, z);
        std::fill(smem_buf.begin(), smem_buf.end(), std::numeric_limits<float>::quiet_NaN());
        emu_smem = smem_buf.data();
        std::barrier<> bar(nt); g_bar = &bar;
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (int w = 0; w < nt / 32; w++) { wb.emplace_back(new std::barrier<>(32)); w_bar[w] = wb.back().get(); }
        std::vector<std::thread> th;
        for (int t = 0; t < nt; t++) th.emplace_back([&, t] { threadIdx = dim3(t); f(); });
        for (auto &t : th) t.join();
    }
}

struct Case { rewy_op op; int B, T, H, HV, K, V, BT; int gates; int nseq; std::vector<int> lens; int svf; };

template <class T> T cv(float x) { return T(x); }
template <> float cv<float>(float x) { return x; }
template <class T> float fl(T x) { return (float)x; }

static double rel(const std::vector<float> &x, const std::vector<float> &r) {
    double a = 0, b = 0; bool fin = true;
    for (size_t i = 0; i < x.size(); i++) { if (!std::isfinite(x[i])) fin = false; a += (double)(x[i] - r[i]) * (x[i] - r[i]); b += (double)r[i] * r[i]; }
    if (!fin) return 1e30;
    return b > 0 ? sqrt(a / b) : sqrt(a);
}

template <class T>
int run_case(const Case &cs, int policy, int wy, double tol) {
    std::mt19937_64 rng(1234);
    std::normal_distribution<float> nd(0, 1);
    std::uniform_real_distribution<float> ud(0, 1);
    const int B = cs.nseq ? 1 : cs.B, HV = cs.HV, H = cs.H, K = cs.K, V = cs.V, BT = cs.BT;
    int Ttot = cs.T; std::vector<int32_t> cu;
    if (cs.nseq) { cu.push_back(0); for (int l : cs.lens) cu.push_back(cu.back() + l); Ttot = cu.back(); }
    const size_t tok = (size_t)B * Ttot;
    const int N = cs.nseq ? cs.nseq : B;
    const bool gdn2 = cs.op == REWY_OP_GDN2;
    std::vector<T> q(tok * H * K), k(tok * H * K), v(tok * HV * V), beta(gdn2 ? 0 : tok * HV), b(gdn2 ? tok * HV * K : 0),
        w(gdn2 ? tok * HV * V : 0), dO(tok * HV * V);
    std::vector<float> g(tok * HV * K), h0((size_t)N * HV * K * V), dht(h0.size());
    for (auto &x : q) x = cv<T>(nd(rng) / sqrtf(K));
    for (auto &x : k) x = cv<T>(nd(rng) / sqrtf(K));
    for (auto &x : v) x = cv<T>(nd(rng));
    for (auto &x : dO) x = cv<T>(nd(rng));
    for (auto &x : beta) x = cv<T>(0.1f + 0.8f * ud(rng));
    for (auto &x : b) x = cv<T>(0.1f + 0.8f * ud(rng));
    for (auto &x : w) x = cv<T>(0.1f + 0.8f * ud(rng));
    for (size_t i = 0; i < g.size(); i++) {
        size_t t = i / (HV * K);
        float x = nd(rng);
        if (cs.gates == 1) g[i] = -5.f * ud(rng);
        else g[i] = -log1pf(expf(-x)) / 16.f;
        if (cs.gates == 2 && t % 37 == 5) g[i] = -1000.f;
    }
    for (auto &x : h0) x = 0.1f * nd(rng);
    for (auto &x : dht) x = 0.1f * nd(rng);
    rewy_dtype dt = sizeof(T) == 4 ? REWY_F32 : REWY_BF16;

    /* CPU reference */
    rewy_config c = {};
    c.op = cs.op; c.backend = REWY_BACKEND_CPU; c.dtype = dt; c.B = B; c.T = Ttot; c.H = H; c.HV = HV; c.K = K; c.V = V;
    c.chunk_size = BT; c.policy = (rewy_policy)policy; c.bwd_algo = wy ? REWY_BWD_WY : REWY_BWD_REWY; c.state_v_first = cs.svf;
    if (cs.nseq) { c.cu_seqlens = cu.data(); c.cu_seqlens_host = cu.data(); c.num_seqs = cs.nseq; }
    size_t ss, fw, bw;
    rewy_saved_size(&c, &ss); rewy_fwd_workspace_size(&c, &fw); rewy_bwd_workspace_size(&c, &bw);
    std::vector<char> saved(ss), fws(fw + 16), bws(bw + 16);
    std::vector<T> o_ref(v.size()), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size()), dbeta_ref(beta.size()),
        db_ref(b.size()), dw_ref(w.size());
    std::vector<float> ht_ref(h0.size()), dg_ref(g.size()), dh0_ref(h0.size());
    rewy_fwd_params fp = {};
    fp.cfg = c; fp.q = q.data(); fp.k = k.data(); fp.v = v.data(); fp.g = g.data(); fp.beta = gdn2 ? nullptr : beta.data();
    fp.b = gdn2 ? b.data() : nullptr; fp.w = gdn2 ? w.data() : nullptr; fp.h0 = h0.data(); fp.o = o_ref.data(); fp.ht = ht_ref.data();
    fp.saved = saved.data(); fp.saved_bytes = ss; fp.workspace = fws.data(); fp.workspace_bytes = fw;
    char msg[256];
    if (rewy_validate_fwd(&fp, msg, 256) != REWY_OK) { printf("fwd invalid: %s\n", msg); return 1; }
    rewy_forward(&fp);
    rewy_bwd_params bp = {};
    bp.cfg = c; bp.q = q.data(); bp.k = k.data(); bp.v = v.data(); bp.g = g.data(); bp.beta = fp.beta; bp.b = fp.b; bp.w = fp.w;
    bp.h0 = h0.data(); bp.saved = saved.data(); bp.saved_bytes = ss; bp.do_ = dO.data(); bp.dht = dht.data();
    bp.dq = dq_ref.data(); bp.dk = dk_ref.data(); bp.dv = dv_ref.data(); bp.dg = dg_ref.data();
    bp.dbeta = gdn2 ? nullptr : dbeta_ref.data(); bp.db = gdn2 ? db_ref.data() : nullptr; bp.dw = gdn2 ? dw_ref.data() : nullptr;
    bp.dh0 = dh0_ref.data(); bp.workspace = bws.data(); bp.workspace_bytes = bw;
    if (rewy_validate_bwd(&bp, msg, 256) != REWY_OK) { printf("bwd invalid: %s\n", msg); return 1; }
    rewy_backward(&bp);

    /* emulated CUDA pipeline (vec_backend.cu) */
    const int Kp = (K + 31) / 32 * 32;
    std::vector<ChunkInfo> ctab; std::vector<int> coff;
    for (int s = 0; s < N; s++) {
        coff.push_back((int)ctab.size());
        int bos = cs.nseq ? cu[s] : s * Ttot, len = cs.nseq ? cu[s + 1] - cu[s] : Ttot;
        for (int cc = 0; cc * BT < len; cc++) ctab.push_back({bos + cc * BT, std::min(BT, len - cc * BT), s, cc});
    }
    coff.push_back((int)ctab.size());
    const int NC = (int)ctab.size();
    Prob p;
    p.B = B; p.T = Ttot; p.H = H; p.HV = HV; p.K = K; p.V = V; p.BT = BT; p.G = HV / H; p.N = N; p.NC = NC; p.Kp = Kp;
    p.gated = 1; p.svf = cs.svf; p.scale = 1.f / sqrtf((float)K); p.ctab = ctab.data(); p.coff = coff.data();
    const size_t chh = (size_t)NC * HV;
    std::vector<float> Gc(chh * BT * Kp, NAN), A(chh * BT * BT, NAN), Cq(chh * BT * BT, NAN), R(chh * BT * V, NAN),
        PR(chh * BT * V, NAN), Wbar(chh * BT * Kp, NAN), acc(2 * chh * BT * Kp, NAN);
    std::vector<state_t> Sc(chh * K * V), Sbar(chh * K * V);
    std::vector<T> o(v.size()), dq(q.size()), dk(k.size()), dv(v.size()), dbeta(beta.size()), db(b.size()), dw(w.size());
    std::vector<float> ht(h0.size(), NAN), dg(g.size(), NAN), dh0(h0.size(), NAN);
    const T *pb = gdn2 ? nullptr : beta.data(), *pbb = gdn2 ? b.data() : nullptr, *pw = gdn2 ? w.data() : nullptr;
    const int nvt = (V + 31) / 32;
    const size_t sm_intra = (size_t)MAXBT * Kp + Kp + 32 + 3 * (size_t)MAXBT * VLDK + 3 * (size_t)MAXBT * LDN;
    auto sm_scan = [&](bool out) { return (size_t)BV * scan_lds(Kp) + (size_t)MAXBT * LDA * (out ? 2 : 1) + 2 * (size_t)BV * LDX + (size_t)MAXBT * VLDK + Kp; };
    const size_t sm_bscan = (size_t)BV * scan_lds(Kp) + 2 * (size_t)MAXBT * LDA + 2 * (size_t)BV * LDX + (size_t)MAXBT * (BV + 4) + 2 * (size_t)MAXBT * VLDK + Kp;
    launch(dim3(NC, HV), 256, sm_intra, [&] { vec_intra_kernel<T>(p, q.data(), k.data(), g.data(), pb, pbb, Gc.data(), A.data(), Cq.data()); });
    launch(dim3(N, HV, nvt), 256, sm_scan(true), [&] {
        vec_state_scan_kernel<T>(p, q.data(), k.data(), v.data(), pb, pbb, pw, Gc.data(), A.data(), Cq.data(), h0.data(), o.data(),
                                 ht.data(), policy ? Sc.data() : nullptr, policy ? R.data() : nullptr);
    });
    if (!policy) {
        std::vector<float> cq2(Cq.size(), NAN);
        launch(dim3(NC, HV), 256, sm_intra, [&] { vec_intra_kernel<T>(p, q.data(), k.data(), g.data(), pb, pbb, nullptr, nullptr, cq2.data()); });
        double e = rel(cq2, Cq);
        if (e != 0) printf("  recomputed Cq differs: %g\n", e);
        launch(dim3(N, HV, nvt), 256, sm_scan(false), [&] {
            vec_state_scan_kernel<T>(p, q.data(), k.data(), v.data(), pb, pbb, pw, Gc.data(), A.data(), cq2.data(), h0.data(),
                                     (T *)nullptr, nullptr, Sc.data(), R.data());
        });
    }
    launch(dim3(N, HV, nvt), 256, sm_bscan, [&] {
        vec_bwd_state_scan_kernel<T>(p, q.data(), k.data(), pb, pbb, Gc.data(), A.data(), Cq.data(), dO.data(), dht.data(), dh0.data(),
                                     Sbar.data(), PR.data(), wy);
    });
    launch(dim3(NC, HV), 256, (size_t)vp_layout(Kp, wy).total, [&] {
        vec_pullback_kernel<T>(p, q.data(), k.data(), v.data(), pb, pbb, pw, Gc.data(), A.data(), dO.data(), Sc.data(), Sbar.data(),
                               R.data(), PR.data(), wy, Wbar.data(), acc.data(), dq.data(), dk.data(), dv.data(),
                               gdn2 ? nullptr : dbeta.data(), gdn2 ? db.data() : nullptr, gdn2 ? dw.data() : nullptr, dg.data());
    });
    if (p.G > 1) launch(dim3(NC, H), 256, 0, [&] { vec_gva_sum_kernel<T>(p, acc.data(), dq.data(), dk.data()); });

    auto F = [](const std::vector<T> &x) { std::vector<float> r(x.size()); for (size_t i = 0; i < x.size(); i++) r[i] = fl<T>(x[i]); return r; };
    struct { const char *n; double e; } res[] = {
        {"o", rel(F(o), F(o_ref))}, {"ht", rel(ht, ht_ref)}, {"dq", rel(F(dq), F(dq_ref))}, {"dk", rel(F(dk), F(dk_ref))},
        {"dv", rel(F(dv), F(dv_ref))}, {"dg", rel(dg, dg_ref)}, {"dbeta", gdn2 ? 0 : rel(F(dbeta), F(dbeta_ref))},
        {"db", gdn2 ? rel(F(db), F(db_ref)) : 0}, {"dw", gdn2 ? rel(F(dw), F(dw_ref)) : 0}, {"dh0", rel(dh0, dh0_ref)}};
    int bad = 0;
    printf("%s %s T%d B%d H%d/%d K%d V%d c%d gates%d seqs%d svf%d pol%c %s:", cs.op == REWY_OP_KDA ? "kda" : "gdn2",
           sizeof(T) == 4 ? "f32" : "bf16", Ttot, B, H, HV, K, V, BT, cs.gates, cs.nseq, cs.svf, policy ? 'A' : 'R', wy ? "WY" : "ReWY");
    for (auto &r : res) { printf(" %s %.1e", r.n, r.e); if (!(r.e <= tol)) bad++; }
    printf("%s\n", bad ? "  FAIL" : "");
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv) {
    int which = argc > 1 ? atoi(argv[1]) : -1;
    std::vector<Case> cases = {
        {REWY_OP_KDA, 1, 65, 1, 1, 32, 32, 32, 0, 0, {}, 0},
        {REWY_OP_GDN2, 1, 65, 1, 1, 32, 32, 32, 0, 0, {}, 0},
        {REWY_OP_KDA, 2, 70, 1, 2, 60, 40, 64, 0, 0, {}, 0},
        {REWY_OP_GDN2, 1, 100, 2, 2, 64, 48, 32, 1, 0, {}, 0},
        {REWY_OP_KDA, 1, 0, 1, 2, 40, 32, 16, 2, 3, {1, 15, 40}, 1},
        {REWY_OP_GDN2, 1, 80, 1, 1, 32, 32, 64, 2, 0, {}, 0},
        {REWY_OP_KDA, 1, 80, 1, 1, 32, 32, 64, 1, 0, {}, 0},
        {REWY_OP_KDA, 1, 130, 1, 1, 256, 256, 64, 0, 0, {}, 0},
        {REWY_OP_GDN2, 1, 130, 1, 1, 100, 60, 64, 0, 0, {}, 1},
        {REWY_OP_KDA, 1, 100, 1, 4, 100, 100, 32, 2, 0, {}, 0},
        {REWY_OP_GDN2, 1, 0, 1, 2, 60, 100, 16, 1, 5, {1, 15, 64, 65, 30}, 0},
        {REWY_OP_KDA, 1, 130, 2, 2, 128, 32, 64, 1, 0, {}, 0},
        {REWY_OP_GDN2, 1, 1, 1, 1, 32, 256, 64, 0, 0, {}, 0},
        {REWY_OP_KDA, 1, 400, 1, 2, 128, 128, 64, 0, 0, {}, 0},
    };
    int bad = 0;
    for (int i = 0; i < (int)cases.size(); i++) {
        if (which >= 0 && i != which) continue;
        for (int pol = 0; pol < 2; pol++)
            for (int wy = 0; wy < 2; wy++) bad += run_case<float>(cases[i], pol, wy, 5e-3);
        bad += run_case<__nv_bfloat16>(cases[i], 0, 0, 2e-2);
    }
    printf("%s\n", bad ? "SOME FAILED" : "ALL OK");
    return bad != 0;
}
