/* service/shortcut/hot_rows_copy.c -- a RowsTemplate's rows written: stored rows copied through the
 * column map (runs, a gather, or a zip of two interleaved runs), rows past the table computed by the
 * engine's sincos kernel and, with the GIL, kept (hot_keep's budget) for the next answer.
 */
#include "hot_rows.h"

#include <stdlib.h>

/* Row fills store items at any alignment: a rows answer may start at any byte, behind an HTTP
 * head of any length (bytes_of). GCC and Clang are told so (one unaligned move on x86, and the
 * loops still vectorize); elsewhere each item goes through memcpy. The table rows are aligned
 * by itemsize. */
#if defined(__GNUC__)
typedef uint32_t any32 __attribute__((aligned(1), may_alias));
typedef uint16_t any16 __attribute__((aligned(1), may_alias));
#define PUT(T, d, j, v) ((d)[j] = (v))
#else
typedef uint32_t any32;
typedef uint16_t any16;
#define PUT(T, d, j, v) do { T v_ = (v); memcpy((char *)(d) + (j) * sizeof v_, &v_, sizeof v_); } while (0)
#endif

#define GATHER(name, D, T)                                                                    \
    VECTOR_CLONES static void name(D *restrict d, const T *restrict s, const int32_t *restrict idx, \
                                   Py_ssize_t w)                                              \
    {                                                                                         \
        for (Py_ssize_t j = 0; j < w; j++) PUT(T, d, j, s[idx[j]]);                             \
    }
GATHER(gather32, any32, uint32_t)
GATHER(gather16, any16, uint16_t)

/* The bulk of a zip in 32-byte vectors (GCC and Clang vector extensions: a shuffle each half, the
 * instructions of whichever clone runs): items a[0 .. k) and b[0 .. k) interleaved into d, k
 * returned (a multiple of a vector's items, <= h). Unaligned loads and stores through memcpy. */
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t zv32 __attribute__((vector_size(32)));
typedef uint16_t zv16 __attribute__((vector_size(32)));
#if defined(__clang__)
#define SHUF32(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#define SHUF16(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define SHUF32(x, y, ...) __builtin_shuffle(x, y, (zv32){__VA_ARGS__})
#define SHUF16(x, y, ...) __builtin_shuffle(x, y, (zv16){__VA_ARGS__})
#endif
static inline __attribute__((always_inline)) Py_ssize_t zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h,
                                                                  size_t es)
{
    Py_ssize_t n = (Py_ssize_t)(32 / es), k = 0;
    for (; k + n <= h; k += n, a += 32, b += 32, d += 64) {
        if (es == 4) {
            zv32 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = SHUF32(x, y, 0, 8, 1, 9, 2, 10, 3, 11);
            hi = SHUF32(x, y, 4, 12, 5, 13, 6, 14, 7, 15);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        } else {
            zv16 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = SHUF16(x, y, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            hi = SHUF16(x, y, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        }
    }
    return k;
}
#else
static inline Py_ssize_t zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h, size_t es)
{
    (void)d, (void)a, (void)b, (void)h, (void)es;
    return 0;
}
#endif
/* The gather above when the columns are two runs interleaved (a sinusoidal "interleaved"
 * layout, RoPE's interleaved cos and sin): d = a0 b0 a1 b1 ..., plain loads and shuffles
 * instead of one gather per item. */
#define ZIP(name, D, T)                                                                     \
    VECTOR_CLONES static void name(D *restrict d, const T *a, const T *b, Py_ssize_t w)     \
    {                                                                                       \
        Py_ssize_t h = w / 2, k = zip_vectors((char *)d, (const char *)a, (const char *)b, h, sizeof(T)); \
        for (; k < h; k++) {                                                                \
            PUT(T, d, 2 * k, a[k]);                                                         \
            PUT(T, d, 2 * k + 1, b[k]);                                                     \
        }                                                                                   \
        if (w & 1) PUT(T, d, w - 1, a[h]);                                                  \
    }

ZIP(zip32, any32, uint32_t)
ZIP(zip16, any16, uint16_t)

void hot_copy_rows(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(hot_sel_at(rows, i) + t->offset) * srb;
        char *d = dst + drb * (size_t)i;
        if (t->idx && t->zip[0] >= 0) {
            if (es == 4) zip32((any32 *)d, (const uint32_t *)s + t->zip[0], (const uint32_t *)s + t->zip[1], t->width);
            else zip16((any16 *)d, (const uint16_t *)s + t->zip[0], (const uint16_t *)s + t->zip[1], t->width);
            continue;
        }
        if (t->idx) {
            if (es == 4) gather32((any32 *)d, (const uint32_t *)s, t->idx, t->width);
            else gather16((any16 *)d, (const uint16_t *)s, t->idx, t->width);
            continue;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++) {
            const Run *u = &t->runs[r];
            if (u->src < 0)
                memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
            else if (u->len == 1 && es == 4)
                memcpy(d + 4 * (size_t)u->dst, s + 4 * (size_t)u->src, 4);
            else if (u->len == 1)
                memcpy(d + 2 * (size_t)u->dst, s + 2 * (size_t)u->src, 2);
            else
                memcpy(d + (size_t)u->dst * es, s + (size_t)u->src * es, (size_t)u->len * es);
        }
    }
}

/* copy_rows, for a destination that may not be aligned to the item size. With GCC and Clang the
 * gathers and zips store through the unaligned types above, so that is copy_rows itself (a v2
 * binary output starts wherever its JSON header ends: item by item through memcpy, 16 rows of a
 * 768-wide interleaved sinusoidal table ran at a third of the /v1 answer's rate). Elsewhere:
 * column by column through memcpy. */
static void copy_rows_unaligned(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
#if defined(__GNUC__)
    (void)srb, (void)drb;
    hot_copy_rows(dst, t, table, rows);
    return;
#endif
    if (!t->idx || ((uintptr_t)dst % es == 0 && drb % es == 0)) {
        hot_copy_rows(dst, t, table, rows);
        return;
    }
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(hot_sel_at(rows, i) + t->offset) * srb;
        char *d = dst + drb * (size_t)i;
        for (Py_ssize_t j = 0; j < t->width; j++) memcpy(d + (size_t)j * es, s + (size_t)t->idx[j] * es, es);
    }
}

#define PAST_STACK 4096 /* bytes of one computed [cos | sin] row kept on the stack; longer ones are allocated */

/* One computed row's items into array a's output row d: d[j] = row[pmap[a * width + j]] (0 at -1),
 * run by run. */
static void past_row(char *d, const RowsTemplate *t, int a, const char *row)
{
    size_t es = (size_t)t->itemsize;
    const Run *runs = t->pruns + (size_t)a * (size_t)t->width;
    const Py_ssize_t *z = t->pzip[a];
    if (t->pgather[a] && z[0] >= 0) {   /* interleaved layouts: a zip of the two halves */
        if (es == 4) zip32((any32 *)d, (const uint32_t *)row + z[0], (const uint32_t *)row + z[1], t->width);
        else zip16((any16 *)d, (const uint16_t *)row + z[0], (const uint16_t *)row + z[1], t->width);
        return;
    }
    if (t->pgather[a]) {   /* any other map without zeros or runs: one gather */
        const int32_t *m = t->pmap + (size_t)a * (size_t)t->width;
        if (es == 4) gather32((any32 *)d, (const uint32_t *)row, m, t->width);
        else gather16((any16 *)d, (const uint16_t *)row, m, t->width);
        return;
    }
    for (Py_ssize_t r = 0; r < t->npruns[a]; r++) {
        const Run *u = &runs[r];
        if (u->src < 0) memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
        else memcpy(d + (size_t)u->dst * es, row + (size_t)u->src * es, (size_t)u->len * es);
    }
}

/* declared, and described, in hot.h; runs without the GIL (fill's large copies) when !keep */
/* Row r past t's table kept (its [cos | sin] items, `bytes` of them, copied from row), if the
 * budget allows; with the GIL only. */
static void keep_row(RowsTemplate *t, int64_t r, const char *row, size_t bytes)
{
    Py_ssize_t i = (Py_ssize_t)(r - t->length), table = GROWN_ROWS * (Py_ssize_t)sizeof(char *);
    if (i >= GROWN_ROWS) return;
    if (!t->grown) {
        if (!hot_keep(&t->keep, table)) return;
        if (!(t->grown = calloc(GROWN_ROWS, sizeof(char *)))) {
            hot_unkeep(&t->keep, table);
            return;
        }
        t->grown_bytes = table;
    }
    if (!hot_keep(&t->keep, (Py_ssize_t)bytes)) return;
    char *k = t->grown ? malloc(bytes) : NULL;   /* (the budget may have dropped every template's rows) */
    if (!k) {
        hot_unkeep(&t->keep, (Py_ssize_t)bytes);
        return;
    }
    memcpy(k, row, bytes);
    t->grown[i] = k;
    t->grown_bytes += (Py_ssize_t)bytes;
}

int hot_rows_into(char **slots, RowsTemplate *t, const Sel *rows, int unaligned, int keep)
{
    if (rows->n > 0 && rows->hi + t->offset < t->length) {   /* all stored: plain copies */
        for (int a = 0; a < t->narr; a++) {
            if (unaligned) copy_rows_unaligned(slots[a], t, (const char *)t->arr[a].buf, rows);
            else hot_copy_rows(slots[a], t, (const char *)t->arr[a].buf, rows);
        }
        return 0;
    }
    const NativeApi *api = hot_cfg.kernels;
    size_t es = (size_t)t->itemsize, drb = (size_t)t->width * es, half = (size_t)t->nfreq * es;
    _Alignas(8) char stack[PAST_STACK];
    char *row = 2 * half <= sizeof stack ? stack : malloc(2 * half);
    if (!row) return -1;
    int over = 0;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        int64_t p = hot_sel_at(rows, i), r = p + t->offset;
        if (r < t->length) {
            Sel one = {.n = 1, .v = &p}; /* hot_copy_rows adds the offset */
            for (int a = 0; a < t->narr; a++) {
                if (unaligned) copy_rows_unaligned(slots[a] + drb * (size_t)i, t, (const char *)t->arr[a].buf, &one);
                else hot_copy_rows(slots[a] + drb * (size_t)i, t, (const char *)t->arr[a].buf, &one);
            }
            continue;
        }
        const char *items = keep && t->grown && r - t->length < GROWN_ROWS ? t->grown[r - t->length] : NULL;
        if (!items) {
            int o = api->sincos(t->freqs, t->nfreq, &r, 1, t->scale, row, row + half, t->dt);
            if (keep && !o) keep_row(t, r, row, 2 * half);
            over |= o;
            items = row;
        }
        for (int a = 0; a < t->narr; a++) past_row(slots[a] + drb * (size_t)i, t, a, items);
    }
    if (row != stack) free(row);
    return over;
}
