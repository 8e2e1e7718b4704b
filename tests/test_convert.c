/* test_convert.c: rewy_convert, the public fp32 <-> bf16 / fp16 conversions. Known bit patterns
 * for the edges (ties to even, subnormals, overflow, inf, NaN, signed zero), and a sweep over
 * many exponents against a rounding computed here independently (frexp + rint in double). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rewy.h"
#include "testutil.h"

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint16_t to16(rewy_dtype t, float x) {
    uint16_t h = 0xdead;
    if (rewy_convert(t, &h, REWY_F32, &x, 1) != REWY_OK) return 0xdead;
    return h;
}

static float from16(rewy_dtype t, uint16_t h) {
    float x = -1234.5f;
    if (rewy_convert(REWY_F32, &x, t, &h, 1) != REWY_OK) return -1234.5f;
    return x;
}

/* x rounded to nearest-even with `bits` significant bits and at most 2^emin as the smallest
 * step (the subnormal spacing), overflowing past max to inf: an independent model of bf16
 * (bits 8, emin -133, max 0x1.fep127) and fp16 (bits 11, emin -24, max 65504). */
static double round_model(double x, int bits, int emin, double max) {
    if (x == 0 || isinf(x)) return x;
    int e;
    frexp(x, &e);                       /* x = m 2^e, 0.5 <= |m| < 1 */
    int step = e - bits < emin ? emin : e - bits;
    double r = ldexp(rint(ldexp(x, -step)), step);    /* rint: ties to even (default mode) */
    return fabs(r) > max ? copysign(INFINITY, x) : r;
}

static void edges(test_counts *tc) {
    /* bf16: 1+2^-8 lies halfway between 1 and 1+2^-7 and goes to the even 0x3f80; 1+3·2^-8
     * goes up to the even 0x3f82; just above a tie goes up */
    static const struct { uint32_t f; uint16_t h; } bf[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},
        {0xbf808000u, 0xbf80}, {0x80000000u, 0x8000}, {0x00000000u, 0x0000},
        {0x00010000u, 0x0001},  /* smallest bf16 subnormal, 2^-133 */
        {0x00008000u, 0x0000}, {0x00018000u, 0x0002},   /* subnormal ties to even */
        {0x00200000u, 0x0020}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
        {0x7f7fffffu, 0x7f80},  /* FLT_MAX rounds past bf16's largest finite to inf */
        {0x7f7f7fffu, 0x7f7f},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) {
        uint16_t h = to16(REWY_BF16, f_of(bf[i].f));
        CHECK(tc, h == bf[i].h, "bf16(0x%08x) = 0x%04x, want 0x%04x", (unsigned)bf[i].f, h, bf[i].h);
    }
    static const struct { uint32_t f; uint16_t h; } hf[] = {
        {0x3f800000u, 0x3c00}, {0x3f801000u, 0x3c00}, {0x3f803000u, 0x3c02}, {0x3f801001u, 0x3c01},
        {0x477fe000u /* 65504 */, 0x7bff}, {0x477fef00u /* 65519 */, 0x7bff},
        {0x477ff000u, 0x7c00},   /* halfway between 65504 and 2^16: even is inf */
        {0xc9742400u /* -1e6 */, 0xfc00}, {0x7f800000u, 0x7c00}, {0xff800000u, 0xfc00},
        {0x33800000u, 0x0001},      /* 2^-24, smallest fp16 subnormal */
        {0x33000000u, 0x0000},      /* 2^-25: tie between 0 and 2^-24, to even 0 */
        {0x33c00000u, 0x0002},      /* 3·2^-25: tie between 1 and 2 steps, to even 2 */
        {0x33000001u, 0x0001},      /* just above 2^-25 */
        {0x38800000u, 0x0400},      /* 2^-14, smallest normal */
        {0x387fc000u, 0x03ff},   /* largest subnormal, 1023·2^-24 */
        {0x80000000u, 0x8000},
    };
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        uint16_t h = to16(REWY_F16, f_of(hf[i].f));
        CHECK(tc, h == hf[i].h, "fp16(0x%08x) = 0x%04x, want 0x%04x", (unsigned)hf[i].f, h, hf[i].h);
    }
    /* NaN stays NaN, with its sign, also a signalling NaN whose payload lies in the bits that
     * rounding drops (a naive rounding would make it inf) */
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t b = to16(REWY_BF16, f_of(nans[i])), h = to16(REWY_F16, f_of(nans[i]));
        int neg = (nans[i] >> 31) != 0;
        CHECK(tc, (b & 0x7f80) == 0x7f80 && (b & 0x7f) && (b >> 15) == neg,
              "bf16(NaN 0x%08x) = 0x%04x", (unsigned)nans[i], b);
        CHECK(tc, (h & 0x7c00) == 0x7c00 && (h & 0x3ff) && (h >> 15) == neg,
              "fp16(NaN 0x%08x) = 0x%04x", (unsigned)nans[i], h);
        CHECK(tc, isnan(from16(REWY_BF16, b)) && isnan(from16(REWY_F16, h)), "NaN back to fp32");
    }
    /* widening is exact */
    CHECK(tc, from16(REWY_F16, 0x0001) == 0x1p-24f, "fp16 0x0001 = 2^-24");
    CHECK(tc, from16(REWY_F16, 0x03ff) == 0x1.ff8p-15f, "fp16 0x03ff = 1023·2^-24");
    CHECK(tc, from16(REWY_F16, 0x7bff) == 65504.0f, "fp16 0x7bff = 65504");
    CHECK(tc, from16(REWY_F16, 0xc000) == -2.0f, "fp16 0xc000 = -2");
    CHECK(tc, isinf(from16(REWY_F16, 0xfc00)) && from16(REWY_F16, 0xfc00) < 0, "fp16 -inf");
    float nz = from16(REWY_F16, 0x8000);
    CHECK(tc, nz == 0 && signbit(nz), "fp16 -0");
    CHECK(tc, from16(REWY_BF16, 0x0001) == 0x1p-133f, "bf16 0x0001 = 2^-133");
    CHECK(tc, from16(REWY_BF16, 0x3f81) == 1.0078125f, "bf16 0x3f81 = 1+2^-7");
    CHECK(tc, isinf(from16(REWY_BF16, 0x7f80)), "bf16 inf");
    /* bf16 <-> fp16 directly: one rounding through the exact fp32 value */
    uint16_t b[4] = {0x3f81, 0x47c3 /* 99840 */, 0x3380 /* 2^-24 */, 0x3300 /* 2^-25 */}, h[4];
    CHECK(tc, rewy_convert(REWY_F16, h, REWY_BF16, b, 4) == REWY_OK, "bf16 -> fp16");
    CHECK(tc, h[0] == 0x3c08 && h[1] == 0x7c00 && h[2] == 0x0001 && h[3] == 0x0000,
          "bf16 -> fp16 gives %04x %04x %04x %04x, want 3c08 7c00 0001 0000", h[0], h[1], h[2], h[3]);
    uint16_t h2[2] = {0x3c01 /* 1+2^-10 */, 0x3c03 /* 1+3·2^-10 */}, b2[2];
    CHECK(tc, rewy_convert(REWY_BF16, b2, REWY_F16, h2, 2) == REWY_OK, "fp16 -> bf16");
    CHECK(tc, b2[0] == 0x3f80 && b2[1] == 0x3f80, "fp16 -> bf16 gives %04x %04x, want 3f80 3f80", b2[0], b2[1]);
}

/* Many values over the whole exponent range of each type, more than one internal block, against
 * round_model. */
static void sweep(test_counts *tc) {
    enum { N = 5000 };
    static float x[N], back[N];
    static uint16_t h[N];
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float m = 1.0f + (float)(s >> 40) / (float)(1 << 24);     /* 24 random significand bits */
        x[i] = ldexpf(i % 2 ? -m : m, (int)(s % 300) - 150);       /* 2^-150 .. 2^150 */
    }
    static const struct { rewy_dtype t; const char *name; int bits, emin; double max; } ty[] = {
        {REWY_BF16, "bf16", 8, -133, 0x1.fep127}, {REWY_F16, "fp16", 11, -24, 65504.0}};
    for (int k = 0; k < 2; k++) {
        int bad = 0;
        CHECK(tc, rewy_convert(ty[k].t, h, REWY_F32, x, N) == REWY_OK, "%s: convert %d", ty[k].name, N);
        CHECK(tc, rewy_convert(REWY_F32, back, ty[k].t, h, N) == REWY_OK, "%s: back", ty[k].name);
        for (int i = 0; i < N; i++) {
            double want = round_model(x[i], ty[k].bits, ty[k].emin, ty[k].max);
            if ((double)back[i] != want && !bad++)
                fprintf(stderr, "%s: %a -> %a, want %a\n", ty[k].name, (double)x[i], (double)back[i], want);
        }
        CHECK(tc, bad == 0, "%s: %d of %d values rounded wrongly", ty[k].name, bad, N);
    }
}

static void errors(test_counts *tc) {
    float x[2] = {1, 2};
    uint16_t h[3];
    CHECK(tc, rewy_convert((rewy_dtype)7, h, REWY_F32, x, 2) == REWY_ERR_BAD_DTYPE, "bad dst dtype");
    CHECK(tc, rewy_convert(REWY_BF16, h, (rewy_dtype)-1, x, 2) == REWY_ERR_BAD_DTYPE, "bad src dtype");
    CHECK(tc, rewy_convert(REWY_F64, h, REWY_F32, x, 1) == REWY_ERR_BAD_DTYPE, "F64 is not converted");
    CHECK(tc, rewy_convert(REWY_BF16, NULL, REWY_F32, x, 2) == REWY_ERR_NULL_POINTER, "NULL dst");
    CHECK(tc, rewy_convert(REWY_BF16, h, REWY_F32, NULL, 2) == REWY_ERR_NULL_POINTER, "NULL src");
    CHECK(tc, rewy_convert(REWY_BF16, NULL, REWY_F32, NULL, 0) == REWY_OK, "n = 0 with NULL");
    CHECK(tc, rewy_convert(REWY_BF16, (char *)h + 1, REWY_F32, x, 1) == REWY_ERR_MISALIGNED, "odd dst");
    CHECK(tc, rewy_convert(REWY_F32, (char *)x, REWY_F16, (char *)h + 1, 1) == REWY_ERR_MISALIGNED, "odd src");
    CHECK(tc, rewy_convert(REWY_BF16, h, REWY_F32, x, 2) == REWY_OK && h[0] == 0x3f80 && h[1] == 0x4000,
          "1, 2 -> bf16");
}

int main(void) {
    test_counts tc = {0, 0};
    edges(&tc);
    sweep(&tc);
    errors(&tc);
    return test_finish(&tc);
}
