/* dtype.h: element conversions shared by the CPU backend, the oracle driver and the tests.
 * bf16 and fp16 are stored as uint16_t; conversions round to nearest even. */
#ifndef REWY_DTYPE_H
#define REWY_DTYPE_H

#include <stdint.h>
#include <string.h>
#include "rewy.h"

static inline size_t rewy_dtype_size(rewy_dtype t) { return t == REWY_F64 ? 8 : t == REWY_F32 ? 4 : 2; }

static inline float rewy_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t rewy_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float rewy_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);          /* inf / NaN */
    else if (exp != 0) u = sign | ((exp + 112u) << 23) | (man << 13); /* normal */
    else if (man == 0) u = sign;                                       /* zero */
    else {                                                             /* subnormal */
        int e = -1;
        do { e++; man <<= 1; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t rewy_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* overflow to inf */
    if (a < 0x38800000u) {                                             /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t man = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint32_t half = 1u << (shift - 1), r = man >> shift, rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    a += 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (a >> 13));
}

/* Element i of an array of type t, as float. */
static inline float rewy_load(const void *p, rewy_dtype t, size_t i) {
    switch (t) {
    case REWY_BF16: return rewy_bf16_to_f32(((const uint16_t *)p)[i]);
    case REWY_F16: return rewy_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void rewy_store(void *p, rewy_dtype t, size_t i, float x) {
    switch (t) {
    case REWY_BF16: ((uint16_t *)p)[i] = rewy_f32_to_bf16(x); break;
    case REWY_F16: ((uint16_t *)p)[i] = rewy_f32_to_f16(x); break;
    default: ((float *)p)[i] = x; break;
    }
}

/* n consecutive elements from offset off, as floats / stored from floats. The type switch
 * sits outside the loop so each loop vectorises. */
static inline void rewy_load_n(float *dst, const void *src, rewy_dtype t, size_t off, int n) {
    const uint16_t *h = (const uint16_t *)src + off;
    switch (t) {
    case REWY_BF16:
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = rewy_bf16_to_f32(h[i]);
        break;
    case REWY_F16: for (int i = 0; i < n; i++) dst[i] = rewy_f16_to_f32(h[i]); break;
    default: memcpy(dst, (const float *)src + off, sizeof(float) * (size_t)n); break;
    }
}

static inline void rewy_store_n(void *dst, rewy_dtype t, size_t off, const float *src, int n) {
    switch (t) {
    case REWY_BF16: for (int i = 0; i < n; i++) ((uint16_t *)dst)[off + i] = rewy_f32_to_bf16(src[i]); break;
    case REWY_F16: for (int i = 0; i < n; i++) ((uint16_t *)dst)[off + i] = rewy_f32_to_f16(src[i]); break;
    default: memcpy((float *)dst + off, src, sizeof(float) * (size_t)n); break;
    }
}

#endif
