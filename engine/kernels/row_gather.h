/* engine/kernels/row_gather.h -- the one row gather: output rows copied from stored rows through a
 * column map, the map analysed once. Built from this source by both extensions that gather rows:
 * engine.kernels._native's rows_lookup (native_lookup.c, the co-located reader's lookup) and the
 * template shortcut's RowsTemplate (service/shortcut/hot_rows.c, hot_rows_copy.c); the rows a
 * gather leaves (past the stored table) are computed by the sincos kernel, which native_api.h lends.
 *
 * A column map says, for each output column j, the stored column it copies (map[j]; -1: a zero).
 * row_map_build() analyses it once into how a row is copied:
 *   runs  consecutive columns copied (or zeroed) together, one memcpy (memset) each;
 *   idx   many short runs and no zero (an interleaved layout): one plain gather of items;
 *   zip   idx as two runs of items interleaved (d = a0 b0 a1 b1 ...: sinusoidal's interleaved
 *         layout): loads and shuffles, no gather; where a and b are the same run (RoPE's
 *         interleaved layout: each item twice), one multiply and one wide store per item.
 * Each column may carry an axis (per-axis positions: rope's position_ids, the shortcut's hot_axes.c):
 * runs then hold one axis each, and no zip is made (idx, with the columns' axes, is the caller's).
 *
 * Stores go through types of alignment 1 (GCC, Clang) or memcpy: an output row may start at any
 * byte (a v2 binary output starts wherever its JSON header ends). Stored rows are aligned.
 */
#ifndef POSENC_ROW_GATHER_H
#define POSENC_ROW_GATHER_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define RG_INLINE static inline __attribute__((always_inline))
#define RG_UNUSED __attribute__((unused))
#else
#define RG_INLINE static inline
#define RG_UNUSED
#endif

/* The gather's row loop, compiled for each SIMD level it may run at (GCC on x86-64 Linux). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define RG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RG_CLONES
#endif

/* One output row from one stored row: output columns dst .. dst + len copied from stored columns
 * src .. src + len (src < 0: zeros), of the row of axis `axis`'s position. */
typedef struct {
    Py_ssize_t dst, src, len, axis;
} Run;

typedef struct {
    Py_ssize_t width; /* output columns */
    Run *runs;
    Py_ssize_t nruns;
    int32_t *idx;      /* NULL, or each column's stored column (no zero): a gather */
    Py_ssize_t zip[2]; /* idx[j] = zip[j & 1] + j / 2 (zip[0] < 0: it is not): a zip */
} RowMap;

RG_UNUSED static void row_map_free(RowMap *m)
{
    PyMem_Free(m->runs);
    PyMem_Free(m->idx);
    m->runs = NULL;
    m->idx = NULL;
}

/* m from map[0 .. w) (each item -1 or a stored column; the caller checked them) and each column's
 * axis (NULL: all 0). 0, or -1 out of memory (no error set; m holds what it allocated: free it). */
RG_UNUSED static int row_map_build(RowMap *m, const int32_t *map, const uint8_t *axis, Py_ssize_t w)
{
    m->width = w;
    m->nruns = 0;
    m->idx = NULL;
    m->zip[0] = m->zip[1] = -1;
    if (!(m->runs = PyMem_Malloc((size_t)(w > 0 ? w : 1) * sizeof(Run)))) return -1;
    int zeros = 0;
    for (Py_ssize_t j = 0; j < w; j++) {
        Py_ssize_t c = map[j], a = axis ? axis[j] : 0;
        Run *last = m->nruns ? &m->runs[m->nruns - 1] : NULL;
        zeros |= c < 0;
        if (last && last->axis == a &&
            ((c < 0 && last->src < 0) || (c >= 0 && last->src >= 0 && c == last->src + last->len)))
            last->len++;
        else
            m->runs[m->nruns++] = (Run){j, c, 1, a};
    }
    if (zeros || 4 * m->nruns <= w) return 0; /* long runs (or zeros): run by run */
    if (!(m->idx = PyMem_Malloc((size_t)w * sizeof(int32_t)))) return -1;
    memcpy(m->idx, map, (size_t)w * sizeof(int32_t));
    if (axis || w < 2) return 0; /* (columns of several axes are never zipped) */
    m->zip[0] = m->idx[0];
    m->zip[1] = m->idx[1];
    for (Py_ssize_t j = 0; j < w && m->zip[0] >= 0; j++)
        if (m->idx[j] != m->zip[j & 1] + j / 2) m->zip[0] = -1;
    return 0;
}

/* ---- one row ------------------------------------------------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t rg_any32 __attribute__((aligned(1), may_alias));
typedef uint16_t rg_any16 __attribute__((aligned(1), may_alias));
#define RG_PUT(T, d, j, v) ((d)[j] = (v))
#else
typedef uint32_t rg_any32;
typedef uint16_t rg_any16;
#define RG_PUT(T, d, j, v) do { T v_ = (v); memcpy((char *)(d) + (j) * sizeof v_, &v_, sizeof v_); } while (0)
#endif

/* n bytes from s to d in 64-byte pieces (one vector move each in the AVX-512 clone): 10-20% faster
 * than a call into libc's memcpy per 256-byte row, measured on cached rows. */
RG_INLINE void rg_copy(char *d, const char *s, size_t n)
{
    size_t o = 0;
    for (; o + 64 <= n; o += 64) memcpy(d + o, s + o, 64);
    if (o < n) memcpy(d + o, s + o, n - o);
}

#define RG_GATHER(name, D, T)                                                                   \
    RG_INLINE void name(D *d, const T *s, const int32_t *idx, Py_ssize_t w)                     \
    {                                                                                           \
        for (Py_ssize_t j = 0; j < w; j++) RG_PUT(T, d, j, s[idx[j]]);                          \
    }
RG_GATHER(rg_gather32, rg_any32, uint32_t)
RG_GATHER(rg_gather16, rg_any16, uint16_t)

/* The bulk of a zip in 32-byte vectors (GCC and Clang vector extensions: a shuffle each half, the
 * instructions of whichever clone runs): items a[0 .. k) and b[0 .. k) interleaved into d, k
 * returned (a multiple of a vector's items, <= h). Unaligned loads and stores through memcpy. */
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t rg_v32 __attribute__((vector_size(32)));
typedef uint16_t rg_v16 __attribute__((vector_size(32)));
#if defined(__clang__)
#define RG_SHUF32(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#define RG_SHUF16(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define RG_SHUF32(x, y, ...) __builtin_shuffle(x, y, (rg_v32){__VA_ARGS__})
#define RG_SHUF16(x, y, ...) __builtin_shuffle(x, y, (rg_v16){__VA_ARGS__})
#endif
RG_INLINE Py_ssize_t rg_zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h, size_t es)
{
    Py_ssize_t n = (Py_ssize_t)(32 / es), k = 0;
    for (; k + n <= h; k += n, a += 32, b += 32, d += 64) {
        if (es == 4) {
            rg_v32 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = RG_SHUF32(x, y, 0, 8, 1, 9, 2, 10, 3, 11);
            hi = RG_SHUF32(x, y, 4, 12, 5, 13, 6, 14, 7, 15);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        } else {
            rg_v16 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = RG_SHUF16(x, y, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            hi = RG_SHUF16(x, y, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        }
    }
    return k;
}
#else
RG_INLINE Py_ssize_t rg_zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h, size_t es)
{
    (void)d, (void)a, (void)b, (void)h, (void)es;
    return 0;
}
#endif

/* The gather when the columns are two runs interleaved: d = a0 b0 a1 b1 ... */
#define RG_ZIP(name, D, T)                                                                      \
    RG_INLINE void name(D *d, const T *a, const T *b, Py_ssize_t w)                             \
    {                                                                                           \
        Py_ssize_t h = w / 2, k = rg_zip_vectors((char *)d, (const char *)a, (const char *)b, h, sizeof(T)); \
        for (; k < h; k++) {                                                                    \
            RG_PUT(T, d, 2 * k, a[k]);                                                          \
            RG_PUT(T, d, 2 * k + 1, b[k]);                                                      \
        }                                                                                       \
        if (w & 1) RG_PUT(T, d, w - 1, a[h]);                                                   \
    }
RG_ZIP(rg_zip32, rg_any32, uint32_t)
RG_ZIP(rg_zip16, rg_any16, uint16_t)

/* Each of h items of s twice into d (out[2k] = out[2k + 1] = s[k], items of es bytes, 2 or 4): an
 * interleaved RoPE row from its half-width row, one multiply and one store of twice the width per
 * item (a zip of the row with itself took 1.2 times as long). engine.kernels' rope_expand is this
 * too (native.h native_interleave_row). */
RG_INLINE void rg_twice(char *d, const char *s, Py_ssize_t h, size_t es)
{
    if (es == 2) {
        for (Py_ssize_t k = 0; k < h; k++) {
            uint16_t x;
            memcpy(&x, s + 2 * k, 2);
            uint32_t w = (uint32_t)x * 0x10001u;
            memcpy(d + 4 * k, &w, 4);
        }
    } else {
        for (Py_ssize_t k = 0; k < h; k++) {
            uint32_t x;
            memcpy(&x, s + 4 * k, 4);
            uint64_t w = (uint64_t)x * 0x100000001ull;
            memcpy(d + 8 * k, &w, 8);
        }
    }
}

/* Whether m is each item of one run twice (a zip of a run with itself, of even width). */
RG_INLINE int rg_is_twice(const RowMap *m)
{
    return m->idx && m->zip[0] >= 0 && m->zip[0] == m->zip[1] && !(m->width & 1);
}

/* One output row d (any alignment) from stored row s (items of es bytes, 2 or 4) through m; with
 * axes, s[a] is the stored row of axis a's position (m's runs; its idx with the columns' axes is
 * the caller's). */
RG_INLINE void row_map_copy(char *d, const RowMap *m, const char *s, size_t es)
{
    if (rg_is_twice(m)) {
        rg_twice(d, s + (size_t)m->zip[0] * es, m->width / 2, es);
    } else if (m->idx && m->zip[0] >= 0) {
        if (es == 4) rg_zip32((rg_any32 *)d, (const uint32_t *)s + m->zip[0], (const uint32_t *)s + m->zip[1], m->width);
        else rg_zip16((rg_any16 *)d, (const uint16_t *)s + m->zip[0], (const uint16_t *)s + m->zip[1], m->width);
    } else if (m->idx) {
        if (es == 4) rg_gather32((rg_any32 *)d, (const uint32_t *)s, m->idx, m->width);
        else rg_gather16((rg_any16 *)d, (const uint16_t *)s, m->idx, m->width);
    } else {
        for (Py_ssize_t r = 0; r < m->nruns; r++) {
            const Run *u = &m->runs[r];
            if (u->src < 0) memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
            else if (u->len == 1 && es == 4) memcpy(d + 4 * (size_t)u->dst, s + 4 * (size_t)u->src, 4);
            else if (u->len == 1) memcpy(d + 2 * (size_t)u->dst, s + 2 * (size_t)u->src, 2);
            else rg_copy(d + (size_t)u->dst * es, s + (size_t)u->src * es, (size_t)u->len * es);
        }
    }
}

/* ---- rows ----------------------------------------------------------------------------------- */

/* Random rows of a table larger than the caches: each is asked for RG_AHEAD rows ahead into L2
 * only (prefetcht1). Measured on 4,096 random rows of 16-32 MiB tables: prefetched into L1 4 to 32
 * rows ahead, the gather stayed at 0.5-0.6 of a memcpy's bandwidth whatever the distance (an L1
 * prefetch holds one of the core's few L1 miss buffers until its line lands); into L2, 24 to 64
 * rows ahead, more misses overlap, and with the inlined copies the gather took 0.54-0.68 of the
 * time (docs/benchmarks.md). A hint only: no effect on results, none where unsupported. */
#ifndef RG_AHEAD
#define RG_AHEAD 32
#endif
RG_INLINE void rg_prefetch_l2(const char *p, size_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
#else
    (void)p, (void)bytes;
#endif
}

/* rows of explicit positions (v) or of a range (v NULL), each loop compiled on its own */
RG_INLINE void rg_rows(char *dst, const RowMap *m, const char *table, size_t rb, size_t es, const int64_t *v,
                       int64_t start, int64_t step, Py_ssize_t n, int64_t offset, int64_t length)
{
    const size_t ob = (size_t)m->width * es;
    /* one run of stored columns, or two as long (the row as it is, or twice: RoPE's half_split):
     * their offsets held in registers for the whole loop (read from m per row: 1.2 to 1.6 times the
     * time of 4,096 random rows) */
    const Run *u = m->runs;
    const int one = !m->idx && m->nruns == 1 && u[0].src >= 0,
              two = !m->idx && m->nruns == 2 && u[0].src >= 0 && u[1].src >= 0 && u[0].len == u[1].len;
    const size_t nb = one || two ? (size_t)u[0].len * es : 0, d0 = one || two ? (size_t)u[0].dst * es : 0,
                 s0 = one || two ? (size_t)u[0].src * es : 0, d1 = two ? (size_t)u[1].dst * es : 0,
                 s1 = two ? (size_t)u[1].src * es : 0;
    const int whole = (one || two) && nb == rb && s0 == 0 && s1 == 0 && d0 == 0 && (one || d1 == rb),
              twice = whole && two;
    /* each kind of copy its own loop: one loop for all held the general copy's registers in the plain
     * copies' (1.17 times the time of 4,096 random 128-byte rows) */
#define RG_EACH_ROW(COPY)                                                                       \
    for (Py_ssize_t i = 0; i < n; i++) {                                                        \
        if (v && i + RG_AHEAD < n && v[i + RG_AHEAD] + offset < length)                         \
            rg_prefetch_l2(table + (size_t)(v[i + RG_AHEAD] + offset) * rb, rb);                \
        int64_t r = (v ? v[i] : start + i * step) + offset;                                     \
        if (r >= length) continue;                                                              \
        char *d = dst + (size_t)i * ob;                                                         \
        const char *s = table + (size_t)r * rb;                                                 \
        COPY;                                                                                   \
    }
    if (whole && twice) {
        RG_EACH_ROW(rg_copy(d, s, rb); rg_copy(d + rb, s, rb))
    } else if (whole) {
        RG_EACH_ROW(rg_copy(d, s, rb))
    } else if (one) {
        RG_EACH_ROW(rg_copy(d + d0, s + s0, nb))
    } else if (two) {
        RG_EACH_ROW(rg_copy(d + d0, s + s0, nb); rg_copy(d + d1, s + s1, nb))
    } else if (rg_is_twice(m)) {
        const size_t z = (size_t)m->zip[0] * es;
        const Py_ssize_t h = m->width / 2;
        RG_EACH_ROW(rg_twice(d, s + z, h, es))
    } else {
        RG_EACH_ROW(row_map_copy(d, m, s, es))
    }
#undef RG_EACH_ROW
}

/* Output row i (at dst + i * m->width * es) <- stored row pos(i) + offset of `table` (rows of
 * src_width items) through m, for the n positions pos(i) = v[i] (v NULL: start + i * step); rows
 * at or past `length` are left for the caller (computed). */
RG_UNUSED RG_CLONES static void row_map_rows(char *dst, const RowMap *m, const char *table, Py_ssize_t src_width,
                                               size_t es, const int64_t *v, int64_t start, int64_t step, Py_ssize_t n,
                                               int64_t offset, int64_t length)
{
    const size_t rb = (size_t)src_width * es;
    if (v) rg_rows(dst, m, table, rb, es, v, 0, 0, n, offset, length);
    else rg_rows(dst, m, table, rb, es, NULL, start, step, n, offset, length);
}

#endif /* POSENC_ROW_GATHER_H */
