/* engine/kernels/alibi_cell.h -- the value of one ALiBi cell, the one definition both C
 * extensions compute with: engine.kernels._native (alibi_block) and service.shortcut._hot
 * (AlibiTemplate answers). numpy_impl.alibi_block is the reference the tests hold both to, bit
 * for bit (tests/engine/test_kernels_blocks.py, tests/service/shortcut/test_alibi_cell.py).
 *
 *   B[h, a, b] = 0 - m_h * d,   d = q_a - k_b, or |q_a - k_b| when symmetric
 *
 * One float64 multiply, rounded once (whoever includes this compiles with -ffp-contract=off, so
 * it is never fused into an FMA), then rounded once more, by the caller, to the output dtype.
 * "0 - x" rather than "-x": +0.0 on the diagonal, as the reference. With mask_future (causal
 * only) a cell whose key comes after its query (k_b > q_a) holds the mask value instead, the
 * output dtype's most negative finite value (-FLT_MAX for float32).
 */
#ifndef POSENC_ALIBI_CELL_H
#define POSENC_ALIBI_CELL_H

#include <math.h>
#include <stdint.h>

enum { ALIBI_CAUSAL = 0, ALIBI_SYMMETRIC = 1, ALIBI_MASKED = 2 };

#if defined(__GNUC__) || defined(__clang__)
#define ALIBI_INLINE static inline __attribute__((always_inline))
#else
#define ALIBI_INLINE static inline
#endif

/* The value at distance d (q - k, or |q - k| when symmetric). */
ALIBI_INLINE double alibi_value(double m, double d) { return 0.0 - (m * d); }

/* What the cell holds: its value v, or the mask value where mask_future hides it (future: the
 * key comes after the query). */
ALIBI_INLINE double alibi_masked(double v, int mode, int future, double mask)
{
    return mode == ALIBI_MASKED && future ? mask : v;
}

/* The cell at d = q - k given as a float64: exact, or the rounding of the exact integer
 * difference (same sign, so d < 0 exactly when k > q). */
ALIBI_INLINE double alibi_cell(double m, double d, int mode, double mask)
{
    return alibi_masked(alibi_value(m, mode == ALIBI_SYMMETRIC ? fabs(d) : d), mode, d < 0, mask);
}

/* The cell at an int32 d = q - k (d > INT32_MIN): |d| taken in int32, where it is exact and
 * costs less in vector lanes than in float64. */
ALIBI_INLINE double alibi_cell_i32(double m, int32_t d, int mode, double mask)
{
    int32_t a = d < 0 ? -d : d;
    return alibi_masked(alibi_value(m, (double)(mode == ALIBI_SYMMETRIC ? a : d)), mode, d < 0, mask);
}

/* The cell for int64 positions of any size, as numpy computes it there: q - k wraps in int64
 * (and |INT64_MIN| stays negative), the mask compares the positions themselves. */
ALIBI_INLINE double alibi_cell_i64(double m, int64_t q, int64_t k, int mode, double mask)
{
    uint64_t du = (uint64_t)q - (uint64_t)k;
    if (mode == ALIBI_SYMMETRIC && (int64_t)du < 0) du = 0 - du;
    return alibi_masked(alibi_value(m, (double)(int64_t)du), mode, k > q, mask);
}

#endif
