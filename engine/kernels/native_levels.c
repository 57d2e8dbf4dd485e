/* engine/kernels/native_levels.c -- the loops of the simd backend compiled once per dispatch
 * level (baseline, AVX2 + F16C, AVX-512), the float64 -> float32/float16/bfloat16 rounding
 * they end in (see _native.c), and the table of levels.
 */
#include "native.h"

/* The smallest float64 that rounds to +inf in each output dtype. */
#define F32_OVER (0x1p128 - 0x1p103)
#define F16_OVER 65520.0
#define BF16_OVER (0x1p128 - 0x1p119)

static inline double bitsd(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* ---------------------------------------------------------------------------------------------
 * Scalar rounding from float64 (the portable path, and the tails of the vector loops)
 * ------------------------------------------------------------------------------------------- */

/* (f16_from_f64, bf16_from_f64: round_f64.h, shared with the C reader) */

/* Each converter writes n values and returns 1 if an output is +-inf while its input was finite
 * (count_inf: or infinite). NaN never counts. */

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

/* A loop over the ALiBi modes, each with its mode a constant (so each vectorizes on its own). */
#define EACH_ALIBI_MODE(mode, LOOP)                                                               \
    do {                                                                                          \
        if ((mode) == ALIBI_CAUSAL) { LOOP(ALIBI_CAUSAL); }                                       \
        else if ((mode) == ALIBI_SYMMETRIC) { LOOP(ALIBI_SYMMETRIC); }                            \
        else { LOOP(ALIBI_MASKED); }                                                              \
    } while (0)

/* One row chunk of ALiBi cells (alibi_cell.h) in float64, from positions already exact in
 * float64: (double)q - (double)k is the rounding of q - k. */
ALWAYS_INLINE void alibi_vals_body(double *v, const double *kd, Py_ssize_t n, double s, double qa,
                                   int mode, double maskd)
{
#define VALS(MODE) for (Py_ssize_t j = 0; j < n; j++) v[j] = alibi_cell(s, qa - kd[j], MODE, maskd)
    EACH_ALIBI_MODE(mode, VALS);
#undef VALS
}

/* The same cells rounded straight to float32 in one pass (no staging buffer): (float) is the
 * hardware conversion numpy uses. Returns 1 if a value reaches float32's overflow threshold or
 * is infinite, exactly when an output is +-inf (NaN compares false). */
ALWAYS_INLINE int alibi_f32_body(float *o, const double *kd, Py_ssize_t n, double s, double qa,
                                 int mode, double maskd)
{
    int over = 0;
#define F32(MODE)                                                                                 \
    for (Py_ssize_t j = 0; j < n; j++) {                                                          \
        double v = alibi_cell(s, qa - kd[j], MODE, maskd);                                        \
        o[j] = (float)v;                                                                          \
        over |= fabs(v) >= F32_OVER;                                                              \
    }
    EACH_ALIBI_MODE(mode, F32);
#undef F32
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
    { native_interleave_row(out, src, h, es); }

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
    const __m256i thr = _mm256_set1_epi64x((long long)dbits(F16_OVER) - 1); /* rounds to inf */
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


const Level native_levels[] = {
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
const int native_n_levels = (int)(sizeof(native_levels) / sizeof(native_levels[0]));

int native_level_supported(const Level *lv)
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
