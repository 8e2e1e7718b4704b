// Host emulation of vec_intra_fast_kernel's L / C_q formation (src/cuda/vec_intra.cu): the centered,
// blocked (MATH §6) and pairwise paths with the kernel's operand construction, shared-memory offsets of the
// blocked operands (slab tiles filled with NaN before each phase, so a slot read before it is written shows)
// and tri_tile task mapping; plain fp32 loops in place of the tf32 mma fragments. Compared with the pairwise
// definition in double (error relative to the sum of |terms|). It checks the indexing, not the kernel.
//   g++ -O2 -std=c++17 -o /tmp/emu tests/cuda/emu_vec_intra.cpp && /tmp/emu
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
static const int MAXBT = 64, SL = 32, LDO = 40, NB = 4, KS = 128, LDG = KS + 4;
static const float LIMIT = 40.0f;
static float gate_floor(float g) { return g < -30.f ? -30.f : g; }
static bool vec_centered(float scale, float hr) { return hr <= LIMIT - 0.5f * fabsf(logf(fabsf(scale))); }
static void tri_tile(int u, int &i0, int &j0) {
    const int r = u < 2 ? 0 : (u < 6 ? 1 : (u < 12 ? 2 : 3));
    i0 = 16 * r; j0 = 8 * (u - r * (r + 1));
}
struct Task { bool isL; int i0, j0; float acc[16][8]; };

struct Stats { int centered = 0, blocked = 0, pairwise = 0, dpairTiles = 0; double maxerr = 0; long nan = 0; };

static void run_case(std::mt19937 &rng, int n, int K, float scale, int gatekind, Stats &st) {
    std::uniform_real_distribution<float> U(-1.f, 1.f), U01(0.f, 1.f);
    std::vector<float> g(MAXBT * KS, 0.f), k(MAXBT * KS, 0.f), q(MAXBT * KS, 0.f), b(MAXBT * KS, 0.f);
    for (int i = 0; i < n; i++)
        for (int d = 0; d < K; d++) {
            float gv;
            switch (gatekind) {
            case 0: gv = -0.05f * U01(rng); break;                       // weak: centered
            case 1: gv = -3.f * U01(rng); break;                         // strong: blocked, diag centered
            case 2: gv = -12.f * U01(rng); break;                        // very strong: diag blocks pairwise
            case 3: gv = (U01(rng) < 0.03f) ? -1000.f : -0.5f * U01(rng); break; // resets
            case 4: gv = (U01(rng) < 0.02f) ? -INFINITY : -2.f * U01(rng); break;
            case 5: gv = (d % 3 == 0) ? -8.f * U01(rng) : -0.01f * U01(rng); break; // mixed features
            case 6: gv = 0.3f * U(rng) - 0.5f * (U01(rng) < 0.2f ? 20.f * U01(rng) : 0.f); break; // some rise, wide: blocked
            default: gv = 2.f * U(rng) - 0.2f; break;                   // rising gates: pairwise / blocked
            }
            g[i * KS + d] = gv;
            k[i * KS + d] = U(rng);
            q[i * KS + d] = U(rng);
            b[i * KS + d] = U01(rng);
        }
    // G tile: rows >= n and features >= K zero gates (as copy_tile), scan in place
    std::vector<float> Gs(MAXBT * LDG, 0.f), mid(KS), midB(NB * KS);
    float red[6] = {0, 0, 0, 0, 0, 0};
    for (int d = 0; d < KS; d++) {
        float s = 0, lo = 0, hi = 0, rise = 0, hx[6];
        for (int bI = 0; bI < NB; bI++) {
            float blo = 0, bhi = 0;
            for (int ii = 0; ii < 16; ii++) {
                const int i = 16 * bI + ii;
                const float prev = s;
                s += gate_floor(g[i * KS + d]);
                Gs[i * LDG + d] = s;
                if (i > 0) rise += fmaxf(s - prev, 0.f);
                lo = i == 0 ? s : fminf(lo, s); hi = i == 0 ? s : fmaxf(hi, s);
                blo = ii == 0 ? s : fminf(blo, s); bhi = ii == 0 ? s : fmaxf(bhi, s);
            }
            midB[bI * KS + d] = 0.5f * (bhi + blo);
            hx[2 + bI] = 0.5f * (bhi - blo);
        }
        mid[d] = 0.5f * (hi + lo); hx[0] = 0.5f * (hi - lo); hx[1] = rise;
        for (int v = 0; v < 6; v++) red[v] = fmaxf(red[v], hx[v]);
    }
    const bool centered = vec_centered(scale, red[0]);
    unsigned bmode = 0;
    if (!centered && (red[1] <= 0.f || vec_centered(scale, red[1]))) {
        bmode = 16;
        for (int bI = 0; bI < NB; bI++) bmode |= vec_centered(scale, red[2 + bI]) ? 0u : 1u << bI;
    }
    const bool blocked = bmode != 0; const unsigned dpair = bmode & 15u;
    if (centered) st.centered++; else if (blocked) st.blocked++; else st.pairwise++;
    // tasks of all 8 warps: [L tiles | C tiles]
    std::vector<Task> tasks;
    for (int t = 0; t < 40; t++) { Task x; x.isL = t < 20; tri_tile(x.isL ? t : t - 20, x.i0, x.j0); memset(x.acc, 0, sizeof x.acc); tasks.push_back(x); }
    std::vector<float> slab(3 * MAXBT * LDO);
    float *Xa = slab.data(), *Kz = Xa + MAXBT * LDO, *Qa = Kz + MAXBT * LDO;
    const int offRb = 0, offXLb = 6 * 16 * LDO, offXQb = offXLb + 3 * 16 * LDO;
    auto tile_mma = [&](Task &x, const float *A, const float *B) { // A(i,k)=A[i*LDO+k], B(k,j)=B[j*LDO+k]
        for (int i = 0; i < 16; i++) for (int j = 0; j < 8; j++) {
            float s = 0; for (int kk = 0; kk < SL; kk++) s += A[(x.i0 + i) * LDO + kk] * B[(x.j0 + j) * LDO + kk];
            x.acc[i][j] += s;
        }
    };
    auto rowval = [&](const std::vector<float> &v, int row, int d) { return (row < n && d < K) ? v[row * KS + d] : 0.f; };
    const bool mma = centered || blocked;
    if (mma) {
        for (int k0 = 0; k0 < KS; k0 += SL) {
            std::fill(slab.begin(), slab.end(), NAN); // any slot read before written shows up
            // phase A (centered: the only phase): all rows, center = chunk mid or block mid
            for (int row = 0; row < MAXBT; row++)
                for (int dd = 0; dd < SL; dd++) {
                    const int d = k0 + dd, I = row >> 4;
                    const float G = Gs[row * LDG + d], M = blocked ? midB[I * KS + d] : mid[d];
                    const bool zero = blocked && ((dpair >> I) & 1u);
                    const float x = G - M, a = expf(x), z = expf(-x), kv = rowval(k, row, d);
                    Kz[row * LDO + dd] = zero ? 0.f : kv * z;
                    Xa[row * LDO + dd] = zero ? 0.f : rowval(b, row, d) * kv * a;
                    Qa[row * LDO + dd] = zero ? 0.f : scale * rowval(q, row, d) * a;
                }
            for (auto &x : tasks)
                if (!blocked || (x.j0 >= x.i0 && !((dpair >> (x.i0 >> 4)) & 1u))) tile_mma(x, x.isL ? Xa : Qa, Kz);
            if (!blocked) continue;
            std::fill(slab.begin(), slab.end(), NAN);
            float *Rb = Xa + offRb, *XLb = Xa + offXLb - 16 * LDO, *XQb = Xa + offXQb - 16 * LDO;
            for (int row = 0; row < MAXBT; row++)
                for (int dd = 0; dd < SL; dd++) {
                    const int d = k0 + dd, I = row >> 4;
                    const float G = Gs[row * LDG + d];
                    if (I >= 1) {
                        const float f = expf(G - Gs[(16 * I - 1) * LDG + d]);
                        if (f > 1.f && gatekind < 6) { printf("left factor > 1 with gates <= 0: %g\n", f); exit(1); }
                        XLb[row * LDO + dd] = rowval(b, row, d) * rowval(k, row, d) * f;
                        XQb[row * LDO + dd] = scale * rowval(q, row, d) * f;
                    }
                    for (int J = 1; J < NB; J++) {
                        if (J <= I) continue;
                        const float f = expf(Gs[(16 * J - 1) * LDG + d] - G);
                        if (f > 1.f && gatekind < 6) { printf("right factor > 1 with gates <= 0: %g\n", f); exit(1); }
                        Rb[(8 * J * (J - 1) + row) * LDO + dd] = rowval(k, row, d) * f;
                    }
                }
            for (auto &x : tasks)
                if (x.j0 < x.i0) {
                    const int I = x.i0 >> 4;
                    tile_mma(x, x.isL ? XLb : XQb, Rb + 8 * I * (I - 1) * LDO);
                }
        }
    }
    if (!centered && (!blocked || dpair)) {
        for (auto &x : tasks) {
            if (blocked && !(x.j0 >= x.i0 && ((dpair >> (x.i0 >> 4)) & 1u))) continue;
            if (blocked) st.dpairTiles++;
            for (int ii = 0; ii < 16; ii++) for (int jj = 0; jj < 8; jj++) {
                const int i = x.i0 + ii, j = x.j0 + jj;
                float sum = 0;
                if (i < n && (x.isL ? j < i : j <= i)) {
                    for (int d = 0; d < K; d++) {
                        const float f = expf(Gs[i * LDG + d] - Gs[j * LDG + d]) * k[j * KS + d];
                        if (x.isL) sum += b[i * KS + d] * k[i * KS + d] * f; else sum += q[i * KS + d] * f;
                    }
                    if (!x.isL) sum *= scale;
                }
                x.acc[ii][jj] = sum;
            }
        }
    }
    // masks, compare with the definition (double)
    std::vector<double> Lr(MAXBT * MAXBT, 0), Cr(MAXBT * MAXBT, 0), Ls(MAXBT * MAXBT, 0), Cs(MAXBT * MAXBT, 0);
    std::vector<float> Le(MAXBT * MAXBT, 0), Ce(MAXBT * MAXBT, 0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double sl = 0, sc = 0, al = 0, ac = 0;
            for (int d = 0; d < K; d++) {
                const double f = exp((double)Gs[i * LDG + d] - (double)Gs[j * LDG + d]) * k[j * KS + d];
                const double tl = (double)b[i * KS + d] * k[i * KS + d] * f, tc = (double)scale * q[i * KS + d] * f;
                sl += tl; al += fabs(tl); sc += tc; ac += fabs(tc);
            }
            if (j < i) { Lr[i * 64 + j] = sl; Ls[i * 64 + j] = al; }
            Cr[i * 64 + j] = sc; Cs[i * 64 + j] = ac;
        }
    std::vector<int> cover(2 * 64 * 64, 0);
    for (auto &x : tasks)
        for (int ii = 0; ii < 16; ii++) for (int jj = 0; jj < 8; jj++) {
            const int i = x.i0 + ii, j = x.j0 + jj;
            float v = x.acc[ii][jj];
            if (!(i < n && (x.isL ? j < i : j <= i))) v = 0.f;
            (x.isL ? Le : Ce)[i * 64 + j] = v;
            cover[(x.isL ? 0 : 4096) + i * 64 + j]++;
        }
    for (int i = 0; i < 64; i++) for (int j = 0; j < 64; j++) {
        const bool inT = j < (i & ~15) + 16;
        if (cover[i * 64 + j] != (inT ? 1 : 0) || cover[4096 + i * 64 + j] != (inT ? 1 : 0)) { printf("coverage error %d %d\n", i, j); exit(1); }
        for (int w = 0; w < 2; w++) {
            const double ref = w ? Cr[i * 64 + j] : Lr[i * 64 + j], mag = w ? Cs[i * 64 + j] : Ls[i * 64 + j];
            const float e = w ? Ce[i * 64 + j] : Le[i * 64 + j];
            if (!std::isfinite(e)) { if (fabs(ref) < 1e38 && mag < 1e38) st.nan++; continue; } /* the value itself beyond fp32: not an error */
            /* differences below fp32's range relative to the undecayed terms (|q|, |k|, b ≤ 1 here) are not
             * errors: a factor ≤ 1 underflows exactly where the decay it is part of is below fp32 (MATH §6) */
            const double err = fabs(e - ref) / (mag + 1e-35 * std::max(1.0, (double)fabsf(scale)));
            if (mag > 1e-30 && err > st.maxerr) st.maxerr = err;
            if (mag > 1e-30 && err > 1e-5 && getenv("DBG")) printf("n=%d K=%d scale=%g %s(%d,%d) emu %g ref %g mag %g mode c%d b%d dpair %x\n", n, K, scale, w ? "C" : "L", i, j, e, ref, mag, centered, blocked, dpair);
            if (mag <= 1e-30 && fabs(e - ref) > 1e-30) st.maxerr = std::max(st.maxerr, 1.0);
        }
    }
}

int main() {
    std::mt19937 rng(1234);
    const float scales[] = {0.0883883f, 1.f, 1e-3f, 1e30f};
    const int ns[] = {64, 63, 49, 48, 33, 17, 16, 5, 1};
    const int Ks[] = {128, 100, 64};
    int fails = 0;
    for (int kind = 0; kind <= 7; kind++) {
        Stats st;
        for (float sc : scales) for (int n : ns) for (int K : Ks) for (int rep = 0; rep < 2; rep++) run_case(rng, n, K, sc, kind, st);
        const bool ok = st.nan == 0 && st.maxerr < 1e-5;
        fails += !ok;
        printf("gates %d: centered %d blocked %d pairwise %d, pairwise diagonal tiles %d, max rel err %.3g (vs sum |terms|), nonfinite %ld %s\n",
               kind, st.centered, st.blocked, st.pairwise, st.dpairTiles, st.maxerr, st.nan, ok ? "OK" : "FAIL");
    }
    return fails != 0;
}
