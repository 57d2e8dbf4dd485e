/* engine/kernels/round_f64.h -- the rows' arithmetic every C copy of posenc shares: float64 to
 * float16 / bfloat16 bits rounded once (nearest, ties to even, subnormals included), and a RoPE or
 * sinusoidal row's float64 values before that rounding (the sincos kernel's loop). Included by
 * the simd kernels (native.h: native_levels.c's scalar paths and vector tails, native_kernels.c's
 * sincos loop) and by the C reader (engine/reader/posenc_shm.c, which computes RoPE rows past a
 * table), so a row computed by either is the same bits. C99 and libc (libm) only; define
 * _GNU_SOURCE before any system header to get glibc's sincos, as both do.
 */
#ifndef POSENC_ROUND_F64_H
#define POSENC_ROUND_F64_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint64_t ABS64 = 0x7FFFFFFFFFFFFFFFull;
static const uint64_t INF64 = 0x7FF0000000000000ull;

static inline uint64_t dbits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }

/* m / 2^s rounded to nearest, ties to even; 1 <= s <= 63. */
static inline uint64_t rne_shift(uint64_t m, unsigned s)
{
    uint64_t q = m >> s, r = m & ((1ull << s) - 1), h = 1ull << (s - 1);
    return q + (uint64_t)((r > h) | ((r == h) & (unsigned)(q & 1)));
}

/* float64 -> IEEE binary16 bits, nearest-even, subnormals included; NaN as numpy keeps it. */
static inline uint16_t f16_from_f64(double x)
{
    uint64_t d = dbits(x), a = d & ABS64;
    uint16_t sgn = (uint16_t)((d >> 48) & 0x8000u);
    if (a >= 0x40F0000000000000ull) {        /* |x| >= 2^16, inf or NaN */
        if (a > INF64) {                     /* NaN: keep the top payload bits, stay a NaN */
            uint16_t r = (uint16_t)(0x7C00u + ((a & 0xFFFFFFFFFFFFFull) >> 42));
            return (uint16_t)(sgn | (r == 0x7C00u ? 0x7C01u : r));
        }
        return (uint16_t)(sgn | 0x7C00u);
    }
    if (a < 0x3F10000000000000ull) {         /* |x| < 2^-14: subnormal (quantum 2^-24) or 0 */
        if (a < 0x3E60000000000000ull)       /* |x| < 2^-25 rounds to zero */
            return sgn;
        unsigned e = (unsigned)(a >> 52);    /* 998..1008 */
        uint64_t m = (a & 0xFFFFFFFFFFFFFull) | (1ull << 52);
        return (uint16_t)(sgn | rne_shift(m, 1051u - e)); /* may carry into 0x0400, the min normal */
    }
    unsigned e = (unsigned)(a >> 52);        /* 1009..1038 */
    uint64_t frac = a & 0xFFFFFFFFFFFFFull;
    uint64_t q = ((uint64_t)(e - 1008u) << 10) | (frac >> 42);
    uint64_t r = frac & ((1ull << 42) - 1), h = 1ull << 41;
    q += (uint64_t)((r > h) | ((r == h) & (unsigned)(q & 1))); /* carry may reach 0x7C00 = inf */
    return (uint16_t)(sgn | q);
}

/* float64 -> bfloat16 bits, exactly engine.dtypes.f64_to_bf16_bits. */
static inline uint16_t bf16_from_f64(double x)
{
    uint64_t d = dbits(x), a = d & ABS64;
    uint16_t sgn = (uint16_t)((d >> 48) & 0x8000u);
    if (a > INF64)
        return 0x7FC0u;                      /* NaN, sign dropped, as f64_to_bf16_bits */
    if (a < 0x3810000000000000ull) {         /* |x| < 2^-126: multiples of 2^-133 */
        unsigned e = (unsigned)(a >> 52);
        if (e == 0 || 942u - e >= 64u)
            return sgn;
        uint64_t m = (a & 0xFFFFFFFFFFFFFull) | (1ull << 52);
        return (uint16_t)(sgn | rne_shift(m, 942u - e)); /* k * 2^-133 has bits k; k <= 128 */
    }
    uint64_t r = (a + ((1ull << 44) - 1) + ((a >> 45) & 1)) & ~((1ull << 45) - 1);
    if (r >= 0x47F0000000000000ull)          /* >= 2^128 */
        return (uint16_t)(sgn | 0x7F80u);
    return (uint16_t)(sgn | ((r >> 45) - (896u << 7)));
}

/* cb[k], sb[k] = cos, sin of float64(p) * f[k], times scale (when it is not 1): the values the
 * sincos kernel rounds once to the output dtype (k < m). */
static inline void sincos_row(const double *f, ptrdiff_t m, double p, double scale, double *cb, double *sb)
{
    for (ptrdiff_t k = 0; k < m; k++) {
        double ang = p * f[k];
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
        sincos(ang, &sb[k], &cb[k]);
#else
        sb[k] = sin(ang);
        cb[k] = cos(ang);
#endif
    }
    if (scale != 1.0)
        for (ptrdiff_t k = 0; k < m; k++) {
            cb[k] *= scale;
            sb[k] *= scale;
        }
}

#endif
