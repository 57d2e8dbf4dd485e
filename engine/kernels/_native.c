/* engine/kernels/_native.c -- the "simd" backend of engine.kernels (issue #5).
 *
 * Same API and, bit for bit, the same results as numpy_impl.py (sincos: within 1 ulp of the
 * output dtype; it uses libm where numpy uses its own loops). One file, CPython C API and the
 * buffer protocol only, so the build needs no numpy headers.
 *
 * Rounding: every float64 -> float32/float16/bfloat16 conversion rounds once, to nearest-even,
 * straight from float64 (engine/dtypes.py). float64 -> float16 must NOT go through an ordinary
 * float32 rounding (that rounds twice: 1 + 2^-11 + 2^-30 would come out 1.0), so:
 *   - the portable path rounds in integer arithmetic on the float64 bits (a port of numpy's
 *     npy_doublebits_to_halfbits, NaN payloads included);
 *   - the AVX2+F16C path first rounds float64 to float32 *to odd* (truncate, then OR the sticky
 *     bit into the last place), then lets vcvtps2ph round to nearest-even. Rounding to odd at
 *     precision p' >= p + 2 followed by a round-to-nearest at precision p is exact (Boldo &
 *     Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding
 *     to odd", IEEE TC 2008); float32 has 24 bits, float16 11.
 *   - bfloat16 rounds the 52-bit mantissa to 7 bits in integer space (as f64_to_bf16_bits), and
 *     below 2^-126 to the fixed subnormal quantum 2^-133.
 *
 * Dispatch: on x86-64 the hot loops are compiled three times (the LEVELS table): for the
 * baseline target, with __attribute__((target("avx2,f16c"))), and with
 * target("avx512f,avx512vl,avx2,f16c"); the best level this CPU supports is picked once at import
 * with __builtin_cpu_supports, so one build runs on any x86-64. Elsewhere (aarch64 and anything
 * else GCC/Clang targets) there is the baseline level only. FEATURES reports what the picked
 * level uses; levels() and _set_level() let the tests run every level this CPU has.
 *
 * Compile with -ffp-contract=off (setup.py does): 0.0 - (s * d) and cos * scale must each be one
 * rounded multiply, never fused.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define POSENC_X86 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

#define BLOCK 512 /* float64 staging buffer per row chunk: 4 KiB, stays in L1 */

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, N_DT = 3 };
static const char *const DT_NAMES[N_DT] = {"float32", "float16", "bfloat16"};
static const char DT_CODES[N_DT] = {'f', 'e', 'H'}; /* canonical buffer codes, see canon() */
static const char *const DT_STORAGE[N_DT] = {"float32", "float16", "uint16 (bfloat16 bits)"};

static const uint64_t ABS64 = 0x7FFFFFFFFFFFFFFFull;
static const uint64_t INF64 = 0x7FF0000000000000ull;

static inline uint64_t dbits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double bitsd(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* ---------------------------------------------------------------------------------------------
 * Scalar rounding from float64 (the portable path, and the tails of the vector loops)
 * ------------------------------------------------------------------------------------------- */

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

/* Each converter writes n values and returns 1 if an output is +-inf while its input was finite
 * (count_inf: or infinite). NaN never counts. */
typedef int (*cvt_fn)(const double *src, void *dst, Py_ssize_t n, int count_inf);

static int cvt_f32_base(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    float *o = (float *)dst;
    uint64_t lim = count_inf ? INF64 + 1 : INF64;
    int over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float f = (float)s[i];
        uint32_t fb; memcpy(&fb, &f, 4);
        o[i] = f;
        over |= ((fb & 0x7FFFFFFFu) == 0x7F800000u) & ((dbits(s[i]) & ABS64) < lim);
    }
    return over;
}

static int cvt_f16_base(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    uint64_t lim = count_inf ? INF64 + 1 : INF64;
    int over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t h = f16_from_f64(s[i]);
        o[i] = h;
        over |= ((h & 0x7FFFu) == 0x7C00u) & ((dbits(s[i]) & ABS64) < lim);
    }
    return over;
}

static int cvt_bf16_base(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    uint64_t lim = count_inf ? INF64 + 1 : INF64;
    int over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t h = bf16_from_f64(s[i]);
        o[i] = h;
        over |= ((h & 0x7FFFu) == 0x7F80u) & ((dbits(s[i]) & ABS64) < lim);
    }
    return over;
}

/* ---------------------------------------------------------------------------------------------
 * The loops compiled once per dispatch level (baseline, AVX2, AVX-512): written once as
 * always-inline bodies, instantiated by INSTANTIATE below.
 * ------------------------------------------------------------------------------------------- */

enum { ALIBI_CAUSAL = 0, ALIBI_SYMMETRIC = 1, ALIBI_MASKED = 2 };

/* One row chunk of ALiBi values in float64, from positions already exact in float64.
 * (double)q - (double)k == (double)(q - k) when |q|, |k| <= 2^53. */
ALWAYS_INLINE void alibi_vals_body(double *v, const double *kd, Py_ssize_t n, double s, double qa,
                                   int mode, double maskd)
{
    if (mode == ALIBI_CAUSAL) {
        for (Py_ssize_t j = 0; j < n; j++) v[j] = 0.0 - (s * (qa - kd[j]));
    } else if (mode == ALIBI_SYMMETRIC) {
        for (Py_ssize_t j = 0; j < n; j++) v[j] = 0.0 - (s * fabs(qa - kd[j]));
    } else {
        for (Py_ssize_t j = 0; j < n; j++) {
            double x = 0.0 - (s * (qa - kd[j]));
            v[j] = kd[j] > qa ? maskd : x;
        }
    }
}

/* The same values rounded straight to float32 in one pass (no staging buffer): (float) is the
 * hardware conversion numpy uses. Returns 1 if a value reaches float32's overflow threshold or
 * is infinite, exactly when an output is +-inf (NaN compares false). */
ALWAYS_INLINE int alibi_f32_body(float *o, const double *kd, Py_ssize_t n, double s, double qa,
                                 int mode, double maskd)
{
    const double thr = 0x1p128 - 0x1p103; /* smallest float64 rounding to float32 inf */
    int over = 0;
    if (mode == ALIBI_CAUSAL) {
        for (Py_ssize_t j = 0; j < n; j++) {
            double v = 0.0 - (s * (qa - kd[j]));
            o[j] = (float)v;
            over |= fabs(v) >= thr;
        }
    } else if (mode == ALIBI_SYMMETRIC) {
        for (Py_ssize_t j = 0; j < n; j++) {
            double v = 0.0 - (s * fabs(qa - kd[j]));
            o[j] = (float)v;
            over |= fabs(v) >= thr;
        }
    } else {
        for (Py_ssize_t j = 0; j < n; j++) {
            double x = 0.0 - (s * (qa - kd[j]));
            double v = kd[j] > qa ? maskd : x;
            o[j] = (float)v;
            over |= fabs(v) >= thr;
        }
    }
    return over;
}

/* One row of T5 buckets: out[b] = lut[clamp(k[b] - qa, -R, R) + R], wrapping int64 difference. */
ALWAYS_INLINE void t5_row_body(int32_t *out, const int64_t *k, Py_ssize_t n, int64_t qa,
                               const int32_t *lut, int64_t R)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t d = (int64_t)((uint64_t)k[j] - (uint64_t)qa);
        d = d < -R ? -R : d;
        d = d > R ? R : d;
        out[j] = lut[d + R];
    }
}

/* out[2k] = out[2k+1] = src[k] for h elements of `es` bytes (2 or 4). */
ALWAYS_INLINE void interleave_body(char *out, const char *src, Py_ssize_t h, Py_ssize_t es)
{
    if (es == 2) {
        for (Py_ssize_t k = 0; k < h; k++) {
            uint16_t x; memcpy(&x, src + 2 * k, 2);
            uint32_t w = (uint32_t)x * 0x10001u;
            memcpy(out + 4 * k, &w, 4);
        }
    } else {
        for (Py_ssize_t k = 0; k < h; k++) {
            uint32_t x; memcpy(&x, src + 4 * k, 4);
            uint64_t w = (uint64_t)x * 0x100000001ull;
            memcpy(out + 8 * k, &w, 8);
        }
    }
}

typedef void (*alibi_vals_fn)(double *, const double *, Py_ssize_t, double, double, int, double);
typedef int (*alibi_f32_fn)(float *, const double *, Py_ssize_t, double, double, int, double);
typedef void (*t5_row_fn)(int32_t *, const int64_t *, Py_ssize_t, int64_t, const int32_t *, int64_t);
typedef void (*interleave_fn)(char *, const char *, Py_ssize_t, Py_ssize_t);

#define INSTANTIATE(SUFFIX, ATTR)                                                                 \
    ATTR static void alibi_vals_##SUFFIX(double *v, const double *kd, Py_ssize_t n, double s,     \
                                         double qa, int mode, double maskd)                       \
    { alibi_vals_body(v, kd, n, s, qa, mode, maskd); }                                            \
    ATTR static int alibi_f32_##SUFFIX(float *o, const double *kd, Py_ssize_t n, double s,        \
                                       double qa, int mode, double maskd)                         \
    { return alibi_f32_body(o, kd, n, s, qa, mode, maskd); }                                      \
    ATTR static void t5_row_##SUFFIX(int32_t *out, const int64_t *k, Py_ssize_t n, int64_t qa,   \
                                     const int32_t *lut, int64_t R)                               \
    { t5_row_body(out, k, n, qa, lut, R); }                                                       \
    ATTR static void interleave_##SUFFIX(char *out, const char *src, Py_ssize_t h, Py_ssize_t es) \
    { interleave_body(out, src, h, es); }

INSTANTIATE(base, )

/* ---------------------------------------------------------------------------------------------
 * AVX2 + F16C
 * ------------------------------------------------------------------------------------------- */
#ifdef POSENC_X86
#define AVX2 __attribute__((target("avx2,f16c")))

INSTANTIATE(avx2, AVX2)

/* 4 float64 -> 4 float32 rounded to odd (inputs clamped to [2^-30, 2^17] in magnitude first:
 * everything below rounds to a float16 zero, everything above to infinity, and in between the
 * float32 is normal, so the truncation is a plain rebias). */
AVX2 static inline __m128 f64x4_to_f32_odd(__m256i d)
{
    const __m256i absm = _mm256_set1_epi64x((long long)ABS64);
    const __m256i lo = _mm256_set1_epi64x(0x3E10000000000000ll); /* 2^-30 */
    const __m256i hi = _mm256_set1_epi64x(0x4100000000000000ll); /* 2^17 */
    const __m256i low29 = _mm256_set1_epi64x((1ll << 29) - 1);
    const __m256i one = _mm256_set1_epi64x(1);
    const __m256i rebias = _mm256_set1_epi64x(896ll << 23);     /* (1023 - 127) << 23 */
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i a = _mm256_and_si256(d, absm);
    a = _mm256_blendv_epi8(a, lo, _mm256_cmpgt_epi64(lo, a));
    a = _mm256_blendv_epi8(a, hi, _mm256_cmpgt_epi64(a, hi));
    __m256i t = _mm256_sub_epi64(_mm256_srli_epi64(a, 29), rebias);
    __m256i exact = _mm256_cmpeq_epi64(_mm256_and_si256(a, low29), _mm256_setzero_si256());
    t = _mm256_or_si256(t, _mm256_andnot_si256(exact, one));                 /* sticky -> odd */
    t = _mm256_or_si256(t, _mm256_srli_epi64(_mm256_andnot_si256(absm, d), 32)); /* sign */
    return _mm_castsi128_ps(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(t, pick)));
}

AVX2 static int cvt_f16_avx2(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    const __m256i absm = _mm256_set1_epi64x((long long)ABS64);
    const __m256i thr = _mm256_set1_epi64x((long long)dbits(65520.0) - 1); /* rounds to inf */
    const __m256i lim = _mm256_set1_epi64x((long long)(count_inf ? INF64 + 1 : INF64));
    const __m256i inf = _mm256_set1_epi64x((long long)INF64);
    __m256i over = _mm256_setzero_si256();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i d0 = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i d1 = _mm256_loadu_si256((const __m256i *)(s + i + 4));
        __m256i a0 = _mm256_and_si256(d0, absm), a1 = _mm256_and_si256(d1, absm);
        __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(f64x4_to_f32_odd(d0)),
                                        f64x4_to_f32_odd(d1), 1);
        __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(o + i), h);
        over = _mm256_or_si256(over, _mm256_and_si256(_mm256_cmpgt_epi64(a0, thr),
                                                      _mm256_cmpgt_epi64(lim, a0)));
        over = _mm256_or_si256(over, _mm256_and_si256(_mm256_cmpgt_epi64(a1, thr),
                                                      _mm256_cmpgt_epi64(lim, a1)));
        __m256i nan = _mm256_or_si256(_mm256_cmpgt_epi64(a0, inf), _mm256_cmpgt_epi64(a1, inf));
        if (!_mm256_testz_si256(nan, nan))   /* rare: redo the 8 with numpy's NaN payloads */
            for (int j = 0; j < 8; j++) o[i + j] = f16_from_f64(s[i + j]);
    }
    return (!_mm256_testz_si256(over, over)) | cvt_f16_base(s + i, o + i, n - i, count_inf);
}

/* 4 float64 -> 4 bfloat16 bits in the low 16 bits of each 64-bit lane; `over` accumulates. */
AVX2 static inline __m256i bf16x4(__m256i d, __m256i lim, __m256i *over)
{
    const __m256i absm = _mm256_set1_epi64x((long long)ABS64);
    const __m256i one = _mm256_set1_epi64x(1);
    const __m256i half_m1 = _mm256_set1_epi64x((1ll << 44) - 1);
    const __m256i keep = _mm256_set1_epi64x(~((1ll << 45) - 1));
    const __m256i rebias = _mm256_set1_epi64x(896ll << 7);
    const __m256i big_m1 = _mm256_set1_epi64x(0x47F0000000000000ll - 1);  /* 2^128 */
    const __m256i tiny_b = _mm256_set1_epi64x(0x3810000000000000ll);      /* 2^-126 */
    const __m256i inf = _mm256_set1_epi64x((long long)INF64);
    const __m256i binf = _mm256_set1_epi64x(0x7F80), bnan = _mm256_set1_epi64x(0x7FC0);
    const __m256d q133 = _mm256_set1_pd(0x1p133), magic = _mm256_set1_pd(0x1p52);
    __m256i a = _mm256_and_si256(d, absm);
    __m256i r = _mm256_add_epi64(_mm256_add_epi64(a, half_m1),
                                 _mm256_and_si256(_mm256_srli_epi64(a, 45), one));
    r = _mm256_and_si256(r, keep);
    __m256i big = _mm256_cmpgt_epi64(r, big_m1);
    __m256i res = _mm256_sub_epi64(_mm256_srli_epi64(r, 45), rebias);
    res = _mm256_blendv_epi8(res, binf, big);
    /* below 2^-126: k = round(|x| * 2^133) in [0, 128] is the bit pattern itself */
    __m256d k = _mm256_round_pd(_mm256_mul_pd(_mm256_castsi256_pd(a), q133),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i ki = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(k, magic)),
                                  _mm256_castpd_si256(magic));
    res = _mm256_blendv_epi8(res, ki, _mm256_cmpgt_epi64(tiny_b, a));
    res = _mm256_or_si256(res, _mm256_srli_epi64(_mm256_andnot_si256(absm, d), 48));
    res = _mm256_blendv_epi8(res, bnan, _mm256_cmpgt_epi64(a, inf));
    *over = _mm256_or_si256(*over, _mm256_and_si256(big, _mm256_cmpgt_epi64(lim, a)));
    return res;
}

AVX2 static int cvt_bf16_avx2(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    const __m256i lim = _mm256_set1_epi64x((long long)(count_inf ? INF64 + 1 : INF64));
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i over = _mm256_setzero_si256();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i r0 = bf16x4(_mm256_loadu_si256((const __m256i *)(s + i)), lim, &over);
        __m256i r1 = bf16x4(_mm256_loadu_si256((const __m256i *)(s + i + 4)), lim, &over);
        __m128i l0 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(r0, pick));
        __m128i l1 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(r1, pick));
        _mm_storeu_si128((__m128i *)(o + i), _mm_packus_epi32(l0, l1));
    }
    return (!_mm256_testz_si256(over, over)) | cvt_bf16_base(s + i, o + i, n - i, count_inf);
}

AVX2 static int cvt_f32_avx2(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    float *o = (float *)dst;
    const __m256i absm = _mm256_set1_epi64x((long long)ABS64);
    const __m256i lim = _mm256_set1_epi64x((long long)(count_inf ? INF64 + 1 : INF64));
    const __m128i fabsm = _mm_set1_epi32(0x7FFFFFFF), finf = _mm_set1_epi32(0x7F800000);
    __m256i over = _mm256_setzero_si256();
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d x = _mm256_loadu_pd(s + i);
        __m128 f = _mm256_cvtpd_ps(x);   /* nearest-even (the default MXCSR mode), as numpy */
        _mm_storeu_ps(o + i, f);
        __m128i isinf = _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(f), fabsm), finf);
        __m256i a = _mm256_and_si256(_mm256_castpd_si256(x), absm);
        over = _mm256_or_si256(over, _mm256_and_si256(_mm256_cvtepi32_epi64(isinf),
                                                      _mm256_cmpgt_epi64(lim, a)));
    }
    return (!_mm256_testz_si256(over, over)) | cvt_f32_base(s + i, o + i, n - i, count_inf);
}

/* ---------------------------------------------------------------------------------------------
 * AVX-512 (F + VL): embedded rounding makes the round-to-odd step three instructions:
 * truncate to float32 (vcvtpd2ps {rz-sae}), widen back, and OR 1 into the lanes that differ.
 * Truncation keeps the sign, sends everything above FLT_MAX to FLT_MAX (still rounding to the
 * float16/bfloat16 infinity) and anything tiny to a float32 that still rounds to +-0.
 * ------------------------------------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512vl,avx2,f16c")))

INSTANTIATE(avx512, AVX512)

AVX512 static inline __m256 f64x8_to_f32_odd(__m512d x)
{
    __m256 f = _mm512_cvt_roundpd_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(f), x, _CMP_NEQ_UQ);
    __m256i fb = _mm256_castps_si256(f);
    return _mm256_castsi256_ps(_mm256_mask_or_epi32(fb, inexact, fb, _mm256_set1_epi32(1)));
}

/* 16 float64 -> 16 float32 rounded to odd */
AVX512 static inline __m512 f64x16_to_f32_odd(const double *s)
{
    __m256 lo = f64x8_to_f32_odd(_mm512_loadu_pd(s));
    __m256 hi = f64x8_to_f32_odd(_mm512_loadu_pd(s + 8));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)),
                                               _mm256_castps_pd(hi), 1));
}

/* The vector loops below only track the largest output magnitude (NaN is ignored by max_ps);
 * when it reaches the dtype's overflow threshold, this exact scan of the inputs decides. */
static int over_scan(const double *s, Py_ssize_t n, double thr, int count_inf)
{
    uint64_t lim = count_inf ? INF64 + 1 : INF64;
    int over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a = dbits(s[i]) & ABS64;
        over |= (bitsd(a) >= thr) & (a < lim);
    }
    return over;
}

#define F32_OVER (0x1p128 - 0x1p103)  /* smallest float64 rounding to float32 inf */
#define F16_OVER 65520.0
#define BF16_OVER (0x1p128 - 0x1p119)

AVX512 static int cvt_f16_avx512(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    __m512 mx = _mm512_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 f = f64x16_to_f32_odd(s + i);
        _mm256_storeu_si256((__m256i *)(o + i),
                            _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        mx = _mm512_max_ps(_mm512_abs_ps(f), mx);
        if (_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q)) /* rare: numpy's NaN payloads */
            for (int j = 0; j < 16; j++) o[i + j] = f16_from_f64(s[i + j]);
    }
    /* |odd(x)| >= 65520 exactly when |x| >= 65520, the first value that rounds to inf */
    int over = _mm512_reduce_max_ps(mx) >= (float)F16_OVER && over_scan(s, i, F16_OVER, count_inf);
    return over | cvt_f16_base(s + i, o + i, n - i, count_inf);
}

AVX512 static int cvt_bf16_avx512(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    uint16_t *o = (uint16_t *)dst;
    const __m512i one = _mm512_set1_epi32(1), half_m1 = _mm512_set1_epi32(0x7FFF);
    const __m512i bnan = _mm512_set1_epi32(0x7FC0);
    __m512 mx = _mm512_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 f = f64x16_to_f32_odd(s + i);
        __m512i fb = _mm512_castps_si512(f);
        /* float32 -> bfloat16, nearest-even on the 16 dropped bits */
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(fb, half_m1),
                             _mm512_and_si512(_mm512_srli_epi32(fb, 16), one)), 16);
        r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), bnan);
        _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtepi32_epi16(r));
        mx = _mm512_max_ps(_mm512_abs_ps(f), mx);
    }
    /* odd(x) >= the float32 BF16_OVER exactly when x >= BF16_OVER (it is a float32) */
    int over = _mm512_reduce_max_ps(mx) >= (float)BF16_OVER && over_scan(s, i, BF16_OVER, count_inf);
    return over | cvt_bf16_base(s + i, o + i, n - i, count_inf);
}

AVX512 static int cvt_f32_avx512(const double *s, void *dst, Py_ssize_t n, int count_inf)
{
    float *o = (float *)dst;
    __m256 mx = _mm256_setzero_ps();
    const __m256 fabsm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm512_cvtpd_ps(_mm512_loadu_pd(s + i)); /* nearest-even, as numpy */
        _mm256_storeu_ps(o + i, f);
        mx = _mm256_max_ps(_mm256_and_ps(f, fabsm), mx);
    }
    float m8[8];
    _mm256_storeu_ps(m8, mx);
    int any_inf = 0;
    for (int j = 0; j < 8; j++) any_inf |= isinf(m8[j]);
    int over = any_inf && over_scan(s, i, F32_OVER, count_inf);
    return over | cvt_f32_base(s + i, o + i, n - i, count_inf);
}

#endif /* POSENC_X86 */

/* ---------------------------------------------------------------------------------------------
 * Dispatch levels
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *features[5]; /* NULL-terminated */
    cvt_fn cvt[N_DT];
    alibi_vals_fn alibi_vals;
    alibi_f32_fn alibi_f32;
    t5_row_fn t5_row;
    interleave_fn interleave;
} Level;

static const Level LEVELS[] = {
#ifdef POSENC_X86
    {"avx512", {"avx512f", "avx512vl", "avx2", "f16c"},
     {cvt_f32_avx512, cvt_f16_avx512, cvt_bf16_avx512},
     alibi_vals_avx512, alibi_f32_avx512, t5_row_avx512, interleave_avx512},
    {"avx2", {"avx2", "f16c", NULL}, {cvt_f32_avx2, cvt_f16_avx2, cvt_bf16_avx2},
     alibi_vals_avx2, alibi_f32_avx2, t5_row_avx2, interleave_avx2},
#endif
    /* baseline: what the compiler auto-vectorizes for the target's base ISA */
#if defined(__x86_64__)
    {"baseline", {"sse2", NULL}, {cvt_f32_base, cvt_f16_base, cvt_bf16_base},
     alibi_vals_base, alibi_f32_base, t5_row_base, interleave_base},
#elif defined(__aarch64__)
    {"baseline", {"neon", NULL}, {cvt_f32_base, cvt_f16_base, cvt_bf16_base},
     alibi_vals_base, alibi_f32_base, t5_row_base, interleave_base},
#else
    {"baseline", {NULL}, {cvt_f32_base, cvt_f16_base, cvt_bf16_base},
     alibi_vals_base, alibi_f32_base, t5_row_base, interleave_base},
#endif
};
#define N_LEVELS ((int)(sizeof(LEVELS) / sizeof(LEVELS[0])))

static const Level *level = &LEVELS[N_LEVELS - 1];

static int level_supported(const Level *lv)
{
#ifdef POSENC_X86
    if (strcmp(lv->name, "avx512") == 0) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    if (strcmp(lv->name, "avx2") == 0) {
        __builtin_cpu_init(); /* also checks that the OS saves the YMM registers */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
#endif
    return strcmp(lv->name, "baseline") == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Argument checking: buffers, dtypes, shapes. Errors match numpy_impl's exception types.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    Py_buffer v[6];
    int n;
} Bufs;

static void bufs_release(Bufs *b)
{
    for (int i = 0; i < b->n; i++) PyBuffer_Release(&b->v[i]);
    b->n = 0;
}

/* The element type of a buffer as one canonical code: 'd' float64, 'f' float32, 'e' float16,
 * 'h'/'H' int16/uint16, 'i'/'I' int32/uint32, 'q'/'Q' int64/uint64; 0 for anything else
 * (including non-native byte order). */
static char canon(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
#if PY_LITTLE_ENDIAN
    const char native = '<';
#else
    const char native = '>';
#endif
    if (*f == '@' || *f == '=' || *f == native) f++;
    if (f[0] == 0 || f[1] != 0) return 0;
    Py_ssize_t sz = v->itemsize;
    switch (f[0]) {
    case 'd': return sz == 8 ? 'd' : 0;
    case 'f': return sz == 4 ? 'f' : 0;
    case 'e': return sz == 2 ? 'e' : 0;
    case 'h': return sz == 2 ? 'h' : 0;
    case 'H': return sz == 2 ? 'H' : 0;
    case 'i': case 'l': return sz == 4 ? 'i' : sz == 8 ? 'q' : 0;
    case 'I': case 'L': return sz == 4 ? 'I' : sz == 8 ? 'Q' : 0;
    case 'q': return sz == 8 ? 'q' : 0;
    case 'Q': return sz == 8 ? 'Q' : 0;
    default: return 0;
    }
}

static Py_buffer *get_buf(Bufs *b, PyObject *obj, const char *name, int writable)
{
    Py_buffer *v = &b->v[b->n];
    if (PyObject_GetBuffer(obj, v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a numpy array, got %.100s", name,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    b->n++;
    if (!PyBuffer_IsContiguous(v, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous", name);
        return NULL;
    }
    if (v->itemsize > 0 && ((uintptr_t)v->buf % (uintptr_t)v->itemsize) != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be aligned to its element size", name);
        return NULL;
    }
    if (writable && v->readonly) {
        PyErr_Format(PyExc_ValueError, "%s must be writable", name);
        return NULL;
    }
    return v;
}

static int want_code(const Py_buffer *v, const char *name, char code, const char *what)
{
    if (canon(v) != code) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, got format '%s' (%zd bytes)", name, what,
                     v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    return 0;
}

static int want_storage(const Py_buffer *v, const char *name)
{
    switch (canon(v)) {
    case 'f': case 'e': case 'h': case 'H': case 'i': case 'I': return 0;
    default:
        PyErr_Format(PyExc_TypeError, "%s must have 2- or 4-byte numeric elements, got format "
                     "'%s'", name, v->format ? v->format : "B");
        return -1;
    }
}

static int want_ndim(const Py_buffer *v, const char *name, int ndim)
{
    if (v->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must have %d dimension(s), got %d", name, ndim, v->ndim);
        return -1;
    }
    return 0;
}

static int want_shape(const Py_buffer *v, const char *name, int ndim, const Py_ssize_t *shape)
{
    int ok = v->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = v->shape[i] == shape[i];
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s has the wrong shape (dims %d, expected %d; "
                     "first sizes %zd, expected %zd)", name, v->ndim, ndim,
                     v->ndim > 0 ? v->shape[0] : (Py_ssize_t)-1,
                     ndim > 0 ? shape[0] : (Py_ssize_t)-1);
        return -1;
    }
    return 0;
}

static int parse_choice(PyObject *obj, const char *what, const char *const *names, int n)
{
    if (PyUnicode_Check(obj))
        for (int i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0) return i;
    PyErr_Format(PyExc_ValueError, "%s must be one of %s, %s%s, got %R", what, names[0],
                 names[1], n > 2 ? ", ..." : "", obj);
    return -1;
}

static int parse_dtype(PyObject *obj) { return parse_choice(obj, "dtype", DT_NAMES, N_DT); }

static int want_out(const Py_buffer *v, const char *name, int dt)
{
    return want_code(v, name, DT_CODES[dt], DT_STORAGE[dt]);
}

/* First index with rows[i] outside [0, nrows), or -1. */
static Py_ssize_t find_bad_row(const int64_t *rows, Py_ssize_t n, Py_ssize_t nrows)
{
    uint64_t lim = (uint64_t)nrows;
    int bad = 0;
    for (Py_ssize_t i = 0; i < n; i++) bad |= (uint64_t)rows[i] >= lim;
    if (!bad) return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((uint64_t)rows[i] >= lim) return i;
    return -1;
}

static int check_rows(const Py_buffer *rv, Py_ssize_t nrows)
{
    const int64_t *rows = (const int64_t *)rv->buf;
    Py_ssize_t n = rv->shape[0], bad;
    Py_BEGIN_ALLOW_THREADS
    bad = find_bad_row(rows, n, nrows);
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for a table of %zd rows",
                     (long long)rows[bad], nrows);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------------------------- */

/* Random rows of a large table miss the caches; asking for rows a few iterations ahead hides
 * most of that latency (a hint only: no effect on results, none where unsupported). */
#define PREFETCH_AHEAD 8
static inline void prefetch_row(const char *p, size_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (size_t off = 0; off < bytes && off < 512; off += 64) __builtin_prefetch(p + off, 0, 3);
#else
    (void)p; (void)bytes;
#endif
}

PyDoc_STRVAR(gather_rows_doc, "gather_rows(table, rows, out)\n--\n\nout[i] = table[rows[i]].");

static PyObject *py_gather_rows(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"table", "rows", "out", NULL};
    PyObject *ot, *orows, *oout;
    Bufs b = {.n = 0};
    Py_buffer *t, *r, *o;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:gather_rows", kwlist, &ot, &orows, &oout))
        return NULL;
    if (!(t = get_buf(&b, ot, "table", 0)) || want_storage(t, "table") || want_ndim(t, "table", 2))
        goto fail;
    if (!(r = get_buf(&b, orows, "rows", 0)) || want_code(r, "rows", 'q', "int64") ||
        want_ndim(r, "rows", 1) || check_rows(r, t->shape[0]))
        goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_code(o, "out", canon(t), "table's dtype"))
        goto fail;
    Py_ssize_t n = r->shape[0], W = t->shape[1];
    if (want_shape(o, "out", 2, (Py_ssize_t[]){n, W})) goto fail;
    {
        const int64_t *rows = (const int64_t *)r->buf;
        const char *src = (const char *)t->buf;
        char *dst = (char *)o->buf;
        size_t rb = (size_t)W * (size_t)t->itemsize;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + PREFETCH_AHEAD < n) prefetch_row(src + (size_t)rows[i + PREFETCH_AHEAD] * rb, rb);
            memcpy(dst + (size_t)i * rb, src + (size_t)rows[i] * rb, rb);
        }
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    Py_RETURN_NONE;
fail:
    bufs_release(&b);
    return NULL;
}

static const char *const LAYOUTS[] = {"half_split", "interleaved"};

PyDoc_STRVAR(rope_expand_doc, "rope_expand(half, rows, out, layout)\n--\n\n"
             "half_split: out[i,:h] = out[i,h:] = half[rows[i]]; "
             "interleaved: out[i,2k] = out[i,2k+1] = half[rows[i],k].");

static PyObject *py_rope_expand(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"half", "rows", "out", "layout", NULL};
    PyObject *oh, *orows, *oout, *olayout;
    Bufs b = {.n = 0};
    Py_buffer *t, *r, *o;
    int layout;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:rope_expand", kwlist, &oh, &orows, &oout,
                                     &olayout))
        return NULL;
    if (!(t = get_buf(&b, oh, "half", 0)) || want_storage(t, "half") || want_ndim(t, "half", 2))
        goto fail;
    if (!(r = get_buf(&b, orows, "rows", 0)) || want_code(r, "rows", 'q', "int64") ||
        want_ndim(r, "rows", 1) || check_rows(r, t->shape[0]))
        goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_code(o, "out", canon(t), "half's dtype"))
        goto fail;
    Py_ssize_t n = r->shape[0], h = t->shape[1], es = t->itemsize;
    if (want_shape(o, "out", 2, (Py_ssize_t[]){n, 2 * h})) goto fail;
    if ((layout = parse_choice(olayout, "layout", LAYOUTS, 2)) < 0) goto fail;
    {
        const int64_t *rows = (const int64_t *)r->buf;
        const char *src = (const char *)t->buf;
        char *dst = (char *)o->buf;
        size_t rb = (size_t)h * (size_t)es;
        interleave_fn inter = level->interleave;
        Py_BEGIN_ALLOW_THREADS
        if (layout == 0) {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (i + PREFETCH_AHEAD < n)
                    prefetch_row(src + (size_t)rows[i + PREFETCH_AHEAD] * rb, rb);
                const char *s = src + (size_t)rows[i] * rb;
                memcpy(dst + 2 * rb * (size_t)i, s, rb);
                memcpy(dst + 2 * rb * (size_t)i + rb, s, rb);
            }
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (i + PREFETCH_AHEAD < n)
                    prefetch_row(src + (size_t)rows[i + PREFETCH_AHEAD] * rb, rb);
                inter(dst + 2 * rb * (size_t)i, src + (size_t)rows[i] * rb, h, es);
            }
        }
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    Py_RETURN_NONE;
fail:
    bufs_release(&b);
    return NULL;
}

PyDoc_STRVAR(round_into_doc, "round_into(src, out, dtype) -> bool\n--\n\n"
             "out = src (float64) rounded once to dtype; True if a finite value overflowed.");

static PyObject *py_round_into(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"src", "out", "dtype", NULL};
    PyObject *os, *oout, *odt;
    Bufs b = {.n = 0};
    Py_buffer *s, *o;
    int dt, over = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:round_into", kwlist, &os, &oout, &odt))
        return NULL;
    if (!(s = get_buf(&b, os, "src", 0)) || want_code(s, "src", 'd', "float64")) goto fail;
    if ((dt = parse_dtype(odt)) < 0) goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_out(o, "out", dt) ||
        want_shape(o, "out", s->ndim, s->shape))
        goto fail;
    {
        cvt_fn cvt = level->cvt[dt];
        const double *src = (const double *)s->buf;
        Py_ssize_t n = s->len / 8;
        Py_BEGIN_ALLOW_THREADS
        over = cvt(src, o->buf, n, 0);
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    return PyBool_FromLong(over);
fail:
    bufs_release(&b);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Line reuse for ALiBi and T5 blocks
 *
 * Both values depend on the cell only through d = query[a] - key[b]. When the keys are one
 * contiguous range (key[b] = key[0] + b, what a {"start", "stop"} selection gives) every row is a
 * contiguous slice of one "line" of values over the d's the block uses: line[j] holds
 * d = Dmax - j, where D(a) = query[a] - key[0], and row a is line[Dmax - D(a) .. + nk). Each
 * line value is computed exactly as the per-cell path computes it, so the block is the same bit
 * for bit; with several queries per block the fill becomes a memcpy per row.
 * Overflow: |value| grows with |d|, and both ends of the line are used by some cell (the row
 * with D = Dmax at b = 0, the row with D = Dmin at b = nk - 1), so the line overflows exactly
 * when a used cell does.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t dmax;   /* line[j] is d = dmax - j */
    Py_ssize_t len; /* nk + Dmax - Dmin */
} Line;

/* Positions within +-2^53 (so differences never wrap and float64 holds them exactly), keys one
 * contiguous range, at least two rows, and a line no longer than half the cells. */
static int line_plan(const int64_t *q, Py_ssize_t nq, const int64_t *k, Py_ssize_t nk, Line *ln)
{
    const int64_t big = (int64_t)1 << 53;
    if (nq < 2 || nk < 1) return 0;
    int ok = 1;
    for (Py_ssize_t b = 0; b < nk; b++) ok &= (k[b] >= -big) & (k[b] <= big) & (k[b] - k[0] == b);
    if (!ok) return 0;
    int64_t dmin = INT64_MAX, dmax = INT64_MIN;
    for (Py_ssize_t a = 0; a < nq; a++) {
        if (q[a] < -big || q[a] > big) return 0;
        int64_t d = q[a] - k[0];
        dmin = d < dmin ? d : dmin;
        dmax = d > dmax ? d : dmax;
    }
    double len = (double)nk + (double)(dmax - dmin);
    if (len > 0.5 * (double)nq * (double)nk) return 0;
    ln->dmax = dmax;
    ln->len = (Py_ssize_t)len;
    return 1;
}

/* -MAX_FINITE of each dtype, exact in float64; rounds to exactly engine.dtypes.mask_value. */
static const double MASK_F64[N_DT] = {-0x1.fffffep127, -65504.0, -0x1.fep127};

PyDoc_STRVAR(alibi_block_doc,
             "alibi_block(slopes, query, key, out, dtype, symmetric, mask_future) -> bool\n--\n\n"
             "out[h,a,b] = 0 - slopes[h] * (query[a] - key[b]) (|.| when symmetric; +0.0 on the diagonal), rounded once;"
             " mask_future puts the dtype's most negative finite value where key > query."
             " True if an unmasked output is +-inf.");

static int alibi_run(const Level *lv, const double *slopes, Py_ssize_t H, const int64_t *q,
                     Py_ssize_t nq, const int64_t *k, Py_ssize_t nk, char *out, int dt,
                     int symmetric, int mask, int *over)
{
    const size_t es = dt == DT_F32 ? 4 : 2;
    const double maskd = MASK_F64[dt];
    const int mode = symmetric ? ALIBI_SYMMETRIC : mask ? ALIBI_MASKED : ALIBI_CAUSAL;
    const int64_t big = (int64_t)1 << 53;
    double vals[BLOCK];
    cvt_fn cvt = lv->cvt[dt];
    Line ln;
    if (H > 0 && line_plan(q, nq, k, nk, &ln)) {
        char *line = (char *)PyMem_RawMalloc((size_t)ln.len * es);
        if (!line) return -1;
        for (Py_ssize_t h = 0; h < H; h++) {
            const double s = slopes[h];
            for (Py_ssize_t j0 = 0; j0 < ln.len; j0 += BLOCK) {
                Py_ssize_t m = ln.len - j0 < BLOCK ? ln.len - j0 : BLOCK;
                for (Py_ssize_t j = 0; j < m; j++) {
                    int64_t d = ln.dmax - (j0 + j);
                    double x = 0.0 - (s * (double)(symmetric && d < 0 ? -d : d));
                    vals[j] = (mask && d < 0) ? maskd : x;
                }
                *over |= cvt(vals, line + (size_t)j0 * es, m, 1);
            }
            for (Py_ssize_t a = 0; a < nq; a++)
                memcpy(out + ((size_t)h * (size_t)nq + (size_t)a) * (size_t)nk * es,
                       line + (size_t)(ln.dmax - (q[a] - k[0])) * es, (size_t)nk * es);
        }
        PyMem_RawFree(line);
        return 0;
    }
    int exact = 1;
    for (Py_ssize_t i = 0; i < nq; i++) exact &= (q[i] >= -big) & (q[i] <= big);
    for (Py_ssize_t i = 0; i < nk; i++) exact &= (k[i] >= -big) & (k[i] <= big);
    double *kd = NULL;
    if (exact && nk > 0) {
        kd = (double *)PyMem_RawMalloc((size_t)nk * sizeof(double));
        if (!kd) return -1;
        for (Py_ssize_t j = 0; j < nk; j++) kd[j] = (double)k[j];
    }
    for (Py_ssize_t h = 0; h < H; h++) {
        const double s = slopes[h];
        for (Py_ssize_t a = 0; a < nq; a++) {
            char *row = out + ((size_t)h * (size_t)nq + (size_t)a) * (size_t)nk * es;
            if (kd && dt == DT_F32) {
                *over |= lv->alibi_f32((float *)row, kd, nk, s, (double)q[a], mode, maskd);
                continue;
            }
            for (Py_ssize_t j0 = 0; j0 < nk; j0 += BLOCK) {
                Py_ssize_t m = nk - j0 < BLOCK ? nk - j0 : BLOCK;
                if (kd) {
                    lv->alibi_vals(vals, kd + j0, m, s, (double)q[a], mode, maskd);
                } else { /* positions beyond 2^53: the int64 (wrapping) difference, as numpy */
                    for (Py_ssize_t j = 0; j < m; j++) {
                        int64_t kb = k[j0 + j];
                        uint64_t du = (uint64_t)q[a] - (uint64_t)kb;
                        if (symmetric && (int64_t)du < 0) du = 0 - du;
                        double x = 0.0 - (s * (double)(int64_t)du);
                        vals[j] = (mask && kb > q[a]) ? maskd : x;
                    }
                }
                *over |= cvt(vals, row + (size_t)j0 * es, m, 1);
            }
        }
    }
    PyMem_RawFree(kd);
    return 0;
}

static PyObject *py_alibi_block(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slopes", "query", "key", "out", "dtype", "symmetric",
                             "mask_future", NULL};
    PyObject *osl, *oq, *ok, *oout, *odt;
    int symmetric, mask, dt, over = 0, rc;
    Bufs b = {.n = 0};
    Py_buffer *sl, *q, *k, *o;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOpp:alibi_block", kwlist, &osl, &oq, &ok,
                                     &oout, &odt, &symmetric, &mask))
        return NULL;
    if (!(sl = get_buf(&b, osl, "slopes", 0)) || want_code(sl, "slopes", 'd', "float64") ||
        want_ndim(sl, "slopes", 1))
        goto fail;
    if (!(q = get_buf(&b, oq, "query", 0)) || want_code(q, "query", 'q', "int64") ||
        want_ndim(q, "query", 1))
        goto fail;
    if (!(k = get_buf(&b, ok, "key", 0)) || want_code(k, "key", 'q', "int64") ||
        want_ndim(k, "key", 1))
        goto fail;
    if ((dt = parse_dtype(odt)) < 0) goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_out(o, "out", dt) ||
        want_shape(o, "out", 3, (Py_ssize_t[]){sl->shape[0], q->shape[0], k->shape[0]}))
        goto fail;
    if (symmetric && mask) {
        PyErr_SetString(PyExc_ValueError, "mask_future applies to causal ALiBi only, not symmetric");
        goto fail;
    }
    {
        const Level *lv = level;
        Py_BEGIN_ALLOW_THREADS
        rc = alibi_run(lv, (const double *)sl->buf, sl->shape[0], (const int64_t *)q->buf,
                       q->shape[0], (const int64_t *)k->buf, k->shape[0], (char *)o->buf, dt,
                       symmetric, mask, &over);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    bufs_release(&b);
    return PyBool_FromLong(over);
fail:
    bufs_release(&b);
    return NULL;
}

PyDoc_STRVAR(t5_block_doc, "t5_block(lut, query, key, out, radius)\n--\n\n"
             "out[a,b] = lut[clamp(key[b] - query[a], -radius, radius) + radius].");

static PyObject *py_t5_block(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"lut", "query", "key", "out", "radius", NULL};
    PyObject *ol, *oq, *ok, *oout;
    Py_ssize_t R;
    Bufs b = {.n = 0};
    Py_buffer *l, *q, *k, *o;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOn:t5_block", kwlist, &ol, &oq, &ok, &oout, &R))
        return NULL;
    if (R < 0 || R > (PY_SSIZE_T_MAX - 1) / 2) {
        PyErr_Format(PyExc_ValueError, "radius must be >= 0, got %zd", R);
        return NULL;
    }
    if (!(l = get_buf(&b, ol, "lut", 0)) || want_code(l, "lut", 'i', "int32") ||
        want_shape(l, "lut", 1, (Py_ssize_t[]){2 * R + 1}))
        goto fail;
    if (!(q = get_buf(&b, oq, "query", 0)) || want_code(q, "query", 'q', "int64") ||
        want_ndim(q, "query", 1))
        goto fail;
    if (!(k = get_buf(&b, ok, "key", 0)) || want_code(k, "key", 'q', "int64") ||
        want_ndim(k, "key", 1))
        goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_code(o, "out", 'i', "int32") ||
        want_shape(o, "out", 2, (Py_ssize_t[]){q->shape[0], k->shape[0]}))
        goto fail;
    {
        const int32_t *lut = (const int32_t *)l->buf;
        const int64_t *qq = (const int64_t *)q->buf, *kk = (const int64_t *)k->buf;
        int32_t *out = (int32_t *)o->buf;
        Py_ssize_t nq = q->shape[0], nk = k->shape[0];
        t5_row_fn row = level->t5_row;
        Py_BEGIN_ALLOW_THREADS
        Line ln;
        int32_t *line = NULL;
        if (line_plan(qq, nq, kk, nk, &ln) &&
            (line = (int32_t *)PyMem_RawMalloc((size_t)ln.len * sizeof(int32_t))) != NULL) {
            /* line[j] is relative position key - query = j - dmax */
            for (Py_ssize_t j = 0; j < ln.len; j++) {
                int64_t rel = (int64_t)j - ln.dmax;
                rel = rel < -R ? -R : rel > R ? R : rel;
                line[j] = lut[rel + R];
            }
            for (Py_ssize_t a = 0; a < nq; a++)
                memcpy(out + (size_t)a * (size_t)nk, line + (ln.dmax - (qq[a] - kk[0])),
                       (size_t)nk * sizeof(int32_t));
            PyMem_RawFree(line);
        } else {
            for (Py_ssize_t a = 0; a < nq; a++)
                row(out + (size_t)a * (size_t)nk, kk, nk, qq[a], lut, (int64_t)R);
        }
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    Py_RETURN_NONE;
fail:
    bufs_release(&b);
    return NULL;
}

PyDoc_STRVAR(sincos_doc,
             "sincos(freqs, positions, scale, out_cos, out_sin, dtype) -> bool\n--\n\n"
             "angle = float64(p) * freqs[k]; out = round(cos/sin(angle) * scale) (libm, within"
             " 1 ulp of numpy). True if an output is +-inf.");

static void sincos_run(const Level *lv, const double *f, Py_ssize_t h, const int64_t *pos,
                       Py_ssize_t n, double scale, char *oc, char *os, int dt, int *over)
{
    const size_t es = dt == DT_F32 ? 4 : 2;
    double cb[BLOCK], sb[BLOCK];
    cvt_fn cvt = lv->cvt[dt];
    for (Py_ssize_t i = 0; i < n; i++) {
        const double p = (double)pos[i];
        for (Py_ssize_t k0 = 0; k0 < h; k0 += BLOCK) {
            Py_ssize_t m = h - k0 < BLOCK ? h - k0 : BLOCK;
            for (Py_ssize_t k = 0; k < m; k++) {
                double ang = p * f[k0 + k];
#if defined(__GLIBC__)
                sincos(ang, &sb[k], &cb[k]);
#else
                sb[k] = sin(ang);
                cb[k] = cos(ang);
#endif
            }
            if (scale != 1.0)
                for (Py_ssize_t k = 0; k < m; k++) {
                    cb[k] *= scale;
                    sb[k] *= scale;
                }
            size_t off = ((size_t)i * (size_t)h + (size_t)k0) * es;
            *over |= cvt(cb, oc + off, m, 1);
            *over |= cvt(sb, os + off, m, 1);
        }
    }
}

static PyObject *py_sincos(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"freqs", "positions", "scale", "out_cos", "out_sin", "dtype", NULL};
    PyObject *of, *op, *oc, *os, *odt;
    double scale;
    int dt, over = 0;
    Bufs b = {.n = 0};
    Py_buffer *f, *p, *c, *s;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOdOOO:sincos", kwlist, &of, &op, &scale, &oc, &os,
                                     &odt))
        return NULL;
    if (!(f = get_buf(&b, of, "freqs", 0)) || want_code(f, "freqs", 'd', "float64") ||
        want_ndim(f, "freqs", 1))
        goto fail;
    if (!(p = get_buf(&b, op, "positions", 0)) || want_code(p, "positions", 'q', "int64") ||
        want_ndim(p, "positions", 1))
        goto fail;
    if ((dt = parse_dtype(odt)) < 0) goto fail;
    Py_ssize_t shape[2] = {p->shape[0], f->shape[0]};
    if (!(c = get_buf(&b, oc, "out_cos", 1)) || want_out(c, "out_cos", dt) ||
        want_shape(c, "out_cos", 2, shape))
        goto fail;
    if (!(s = get_buf(&b, os, "out_sin", 1)) || want_out(s, "out_sin", dt) ||
        want_shape(s, "out_sin", 2, shape))
        goto fail;
    {
        const Level *lv = level;
        Py_BEGIN_ALLOW_THREADS
        sincos_run(lv, (const double *)f->buf, shape[1], (const int64_t *)p->buf, shape[0], scale,
                   (char *)c->buf, (char *)s->buf, dt, &over);
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    return PyBool_FromLong(over);
fail:
    bufs_release(&b);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Module
 * ------------------------------------------------------------------------------------------- */

static PyObject *features_tuple(const Level *lv)
{
    int n = 0;
    while (n < 5 && lv->features[n]) n++;
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *sitem = PyUnicode_FromString(lv->features[i]);
        if (!sitem) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, sitem);
    }
    return t;
}

PyDoc_STRVAR(features_doc, "features() -> tuple\n--\n\nCPU features of the dispatch level in use.");

static PyObject *py_features(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    return features_tuple(level);
}

PyDoc_STRVAR(levels_doc, "levels() -> tuple\n--\n\nDispatch levels this CPU can run, best first.");

static PyObject *py_levels(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    PyObject *lst = PyList_New(0);
    if (!lst) return NULL;
    for (int i = 0; i < N_LEVELS; i++) {
        if (!level_supported(&LEVELS[i])) continue;
        PyObject *name = PyUnicode_FromString(LEVELS[i].name);
        if (!name || PyList_Append(lst, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(lst);
            return NULL;
        }
        Py_DECREF(name);
    }
    PyObject *t = PyList_AsTuple(lst);
    Py_DECREF(lst);
    return t;
}

PyDoc_STRVAR(set_level_doc, "_set_level(name) -> str\n--\n\n"
             "Testing hook: use dispatch level `name` (see levels()); returns the previous one.");

static PyObject *py_set_level(PyObject *self, PyObject *arg)
{
    (void)self;
    for (int i = 0; i < N_LEVELS; i++) {
        if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, LEVELS[i].name) == 0) {
            if (!level_supported(&LEVELS[i])) {
                PyErr_Format(PyExc_RuntimeError, "level %s is not supported by this CPU",
                             LEVELS[i].name);
                return NULL;
            }
            const char *prev = level->name;
            level = &LEVELS[i];
            return PyUnicode_FromString(prev);
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown dispatch level %R", arg);
    return NULL;
}

static PyMethodDef methods[] = {
    {"gather_rows", (PyCFunction)(void (*)(void))py_gather_rows, METH_VARARGS | METH_KEYWORDS,
     gather_rows_doc},
    {"rope_expand", (PyCFunction)(void (*)(void))py_rope_expand, METH_VARARGS | METH_KEYWORDS,
     rope_expand_doc},
    {"round_into", (PyCFunction)(void (*)(void))py_round_into, METH_VARARGS | METH_KEYWORDS,
     round_into_doc},
    {"alibi_block", (PyCFunction)(void (*)(void))py_alibi_block, METH_VARARGS | METH_KEYWORDS,
     alibi_block_doc},
    {"t5_block", (PyCFunction)(void (*)(void))py_t5_block, METH_VARARGS | METH_KEYWORDS,
     t5_block_doc},
    {"sincos", (PyCFunction)(void (*)(void))py_sincos, METH_VARARGS | METH_KEYWORDS, sincos_doc},
    {"features", py_features, METH_NOARGS, features_doc},
    {"levels", py_levels, METH_NOARGS, levels_doc},
    {"_set_level", py_set_level, METH_O, set_level_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "C SIMD backend of engine.kernels (see engine/kernels/__init__.py and docs/native.md).", -1,
    methods, NULL, NULL, NULL, NULL,
};

#if defined(__clang__)
#define COMPILER_STR "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER_STR "gcc " __VERSION__
#elif defined(_MSC_VER)
#define COMPILER_STR "msvc " Py_STRINGIFY(_MSC_VER)
#else
#define COMPILER_STR "unknown"
#endif

PyMODINIT_FUNC PyInit__native(void)
{
    for (int i = 0; i < N_LEVELS; i++)
        if (level_supported(&LEVELS[i])) {
            level = &LEVELS[i];
            break;
        }
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    PyObject *feats = features_tuple(level);
    if (!feats || PyModule_AddObject(m, "FEATURES", feats) < 0) {
        Py_XDECREF(feats);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "BACKEND", "simd") < 0 ||
        PyModule_AddStringConstant(m, "COMPILER", COMPILER_STR) < 0 ||
        PyModule_AddStringConstant(m, "LEVEL", level->name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
