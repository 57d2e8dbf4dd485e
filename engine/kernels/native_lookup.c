/* engine/kernels/native_lookup.c -- rows_lookup: the resolved lookup of engine/reader/lookup.py in one
 * call. Every position is checked ([0, 2**31)), its row (position + offset) gathered from the
 * mapped tables through a column map, or, past the table, computed with the sincos kernel of
 * native_kernels.c (the pipeline's bits) and arranged through the same map.
 *
 * rows_lookup(plan, positions, outs) -> int
 *   plan = (tables, length, offset, colmap, mode, pastmap, freqs, scale, dtype)
 *     tables   tuple of K C-contiguous 2-D arrays [>= length, W], one element size (2 or 4)
 *     colmap   bytes: D int32, output column j <- table column colmap[j] (-1: zero)
 *     mode     0 any colmap, 1 colmap == 0..W-1, 2 == [0..W-1, 0..W-1], 3 == [0, 0, 1, 1, ...]
 *     pastmap  bytes: K*W int32, table k's column c of a computed row <- scratch[pastmap[k*W + c]],
 *              scratch = [cos(p*freqs)*scale | sin(p*freqs)*scale] rounded to dtype; or None
 *     freqs    bytes of h float64 (or None: a row past the table is refused with -3)
 *     dtype    "float32", "float16" or "bfloat16": the tables' dtype (native_parse_dtype)
 *   positions  C-contiguous int64 buffer, any shape, n values; or a list of n ints (exactly int:
 *              a bool, a float or a nested list is a ValueError, as an int past int64 is)
 *   outs       tuple of K writable C-contiguous buffers of n*D elements each
 * Returns: >= 0 done (0: every row inside the table, else the last row reached + 1); -1 a
 * computed value overflowed the dtype; -3 a row past the table and no freqs; <= -4: position
 * index (-r - 4) is outside [0, 2**31) (nothing written is meaningful then).
 */
#include "native.h"

const char native_rows_lookup_doc[] =
    "rows_lookup(plan, positions, outs) -> int\n--\n\nThe resolved lookup (engine/reader/lookup.py).";

#define POS_LIMIT ((int64_t)1 << 31)

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define LOOKUP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LOOKUP_CLONES
#endif

/* Random rows of a table larger than the caches: each is asked for LOOKUP_AHEAD rows ahead into
 * L2 only (prefetcht1). Measured on 4,096 random rows of 16-32 MiB tables: prefetched into L1
 * (native_prefetch_row) 4 to 32 rows ahead, the gather stayed at 0.5-0.6 of a memcpy's
 * bandwidth whatever the distance (an L1 prefetch holds one of the core's few L1 miss buffers
 * until its line lands); into L2, 24 to 64 rows ahead, more misses overlap, and with the inlined
 * copies below the gather took 0.54-0.68 of the time (docs/benchmarks.md). A hint only: no
 * effect on results, none where unsupported. */
#ifndef LOOKUP_AHEAD
#define LOOKUP_AHEAD 32
#endif
ALWAYS_INLINE void prefetch_l2(const char *p, size_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
#else
    (void)p; (void)bytes;
#endif
}

/* n bytes from s to d in 64-byte pieces (one vector move each in the AVX-512 clone), inlined:
 * 10-20% faster than a call into libc's memcpy per 256-byte row, measured on cached rows. */
ALWAYS_INLINE void copy_row(char *d, const char *s, size_t n)
{
    size_t o = 0;
    for (; o + 64 <= n; o += 64) memcpy(d + o, s + o, 64);
    if (o < n) memcpy(d + o, s + o, n - o);
}

static inline void put_cols(char *dst, const char *src, const int32_t *map, Py_ssize_t D, Py_ssize_t es)
{
    if (es == 2) {
        uint16_t *d = (uint16_t *)dst;
        const uint16_t *s = (const uint16_t *)src;
        for (Py_ssize_t j = 0; j < D; j++) d[j] = map[j] < 0 ? 0 : s[map[j]];
    } else {
        uint32_t *d = (uint32_t *)dst;
        const uint32_t *s = (const uint32_t *)src;
        for (Py_ssize_t j = 0; j < D; j++) d[j] = map[j] < 0 ? 0 : s[map[j]];
    }
}

/* One table's rows: out row i <- table row pos[i] + offset through the column map, for the rows
 * inside the table (the others are written by past_rows). mode: see rows_lookup's plan. */
LOOKUP_CLONES static void gather_table(char *d0, const char *s0, const int64_t *pos, Py_ssize_t n,
                                       int64_t offset, int64_t length, Py_ssize_t W, Py_ssize_t es,
                                       int mode, const int32_t *colmap, Py_ssize_t D)
{
    const size_t rb = (size_t)W * (size_t)es, ob = (size_t)D * (size_t)es;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + LOOKUP_AHEAD < n && pos[i + LOOKUP_AHEAD] + offset < length)
            prefetch_l2(s0 + (size_t)(pos[i + LOOKUP_AHEAD] + offset) * rb, rb);
        int64_t r = pos[i] + offset;
        if (r >= length) continue;
        const char *s = s0 + (size_t)r * rb;
        char *d = d0 + (size_t)i * ob;
        switch (mode) {
        case 1: copy_row(d, s, rb); break;
        case 2: copy_row(d, s, rb); copy_row(d + rb, s, rb); break;
        case 3: native_interleave_row(d, s, W, es); break;
        default: put_cols(d, s, colmap, D, es);
        }
    }
}

typedef struct {
    Py_buffer t[4], o[4], pos;
    int nt, no, npos;
} Held;

static void held_release(Held *h)
{
    for (int i = 0; i < h->nt; i++) PyBuffer_Release(&h->t[i]);
    for (int i = 0; i < h->no; i++) PyBuffer_Release(&h->o[i]);
    if (h->npos) PyBuffer_Release(&h->pos);
}

#define LIST_STACK 64 /* positions of a list read onto the stack; more are allocated */

static int bad(const char *what)
{
    PyErr_Format(PyExc_ValueError, "rows_lookup: %s", what);
    return -1;
}

/* The rows past the table: computed (scratch), then arranged through pastmap o colmap. */
static int past_rows(const Level *lv, const int64_t *pos, Py_ssize_t n, int64_t offset, int64_t length,
                     const double *freqs, Py_ssize_t h, double scale, int dt, const int32_t *comp, int K,
                     Py_ssize_t D, Py_ssize_t es, char **dst, char *scratch)
{
    int over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = pos[i] + offset;
        if (r < length) continue;
        native_sincos_run(lv, freqs, h, &r, 1, scale, scratch, scratch + (size_t)h * (size_t)es, dt, &over);
        for (int k = 0; k < K; k++)
            put_cols(dst[k] + (size_t)i * (size_t)D * (size_t)es, scratch, comp + (size_t)k * (size_t)D, D, es);
    }
    return over;
}

PyObject *native_rows_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    Held hd = {.nt = 0, .no = 0, .npos = 0};
    int64_t list_stack[LIST_STACK], *list_heap = NULL;
    int32_t *comp = NULL;
    char *scratch = NULL;
    long long result = 0;
    if (nargs != 3 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 9 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "rows_lookup(plan: 9-tuple, positions, outs: tuple)");
        return NULL;
    }
    PyObject *const *pl = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *tabs = pl[0], *ocol = pl[3], *opast = pl[5], *ofreq = pl[6];
    if (!PyTuple_Check(tabs) || !PyBytes_Check(ocol) || (opast != Py_None && !PyBytes_Check(opast)) ||
        (ofreq != Py_None && !PyBytes_Check(ofreq))) {
        PyErr_SetString(PyExc_TypeError, "rows_lookup: plan = (tuple, int, int, bytes, int, bytes|None, "
                                         "bytes|None, float, str)");
        return NULL;
    }
    int K = (int)PyTuple_GET_SIZE(tabs);
    int64_t length = PyLong_AsLongLong(pl[1]), offset = PyLong_AsLongLong(pl[2]);
    long mode = PyLong_AsLong(pl[4]);
    double scale = PyFloat_AsDouble(pl[7]);
    if (PyErr_Occurred()) return NULL;
    const int dt = native_parse_dtype(pl[8]);
    if (dt < 0) return NULL;
    if (K < 1 || K > 4 || PyTuple_GET_SIZE(args[2]) != K || mode < 0 || mode > 3 ||
        length < 0 || offset < 0 || offset > ((int64_t)1 << 53)) {
        bad("plan out of range");
        return NULL;
    }
    const Py_ssize_t es = dt == DT_F32 ? 4 : 2, D = PyBytes_GET_SIZE(ocol) / 4;
    const int32_t *colmap = (const int32_t *)PyBytes_AS_STRING(ocol);
    Py_ssize_t W = -1;
    char *dst[4];
    const char *src[4];
    for (int k = 0; k < K; k++) {
        Py_buffer *v = &hd.t[k];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tabs, k), v, PyBUF_C_CONTIGUOUS) < 0) goto fail;
        hd.nt++;
        if (v->ndim != 2 || v->itemsize != es || v->shape[0] < length || (W >= 0 && v->shape[1] != W)) {
            bad("a table is not [>= length, W] of the dtype");
            goto fail;
        }
        W = v->shape[1];
        src[k] = (const char *)v->buf;
    }
    for (Py_ssize_t j = 0; j < D; j++)
        if (colmap[j] < -1 || colmap[j] >= W) {
            bad("colmap out of range");
            goto fail;
        }
    if ((mode == 1 && D != W) || ((mode == 2 || mode == 3) && D != 2 * W)) {
        bad("mode does not fit the column map");
        goto fail;
    }
    Py_ssize_t n;
    const int64_t *pos;
    if (PyList_CheckExact(args[1])) { /* a list of ints: read here, no array made for it */
        n = PyList_GET_SIZE(args[1]);
        int64_t *p = n <= LIST_STACK ? list_stack : (list_heap = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1)));
        if (!p) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = PyList_GET_ITEM(args[1], i);
            int overflow = 0;
            long long v = PyLong_CheckExact(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : (overflow = 1, 0);
            if (overflow) { /* not an int (a bool, a float, a list), or past int64 */
                bad("positions must be int64");
                goto fail;
            }
            p[i] = (int64_t)v;
        }
        pos = p;
    } else {
        if (PyObject_GetBuffer(args[1], &hd.pos, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto fail;
        hd.npos = 1;
        if (hd.pos.itemsize != 8 || !hd.pos.format ||
            (strcmp(hd.pos.format, "q") && strcmp(hd.pos.format, "l") && strcmp(hd.pos.format, "<q") &&
             strcmp(hd.pos.format, "=q"))) {
            bad("positions must be int64");
            goto fail;
        }
        n = hd.pos.len / 8;
        pos = (const int64_t *)hd.pos.buf;
    }
    for (int k = 0; k < K; k++) {
        Py_buffer *v = &hd.o[k];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[2], k), v, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto fail;
        hd.no++;
        if (v->len != n * D * es) {
            bad("an output does not hold n * D elements of the dtype");
            goto fail;
        }
        dst[k] = (char *)v->buf;
    }
    /* 1. every position in [0, 2**31); the furthest row */
    int64_t far = 0;
    {
        int oob = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            oob |= (uint64_t)pos[i] >= (uint64_t)POS_LIMIT;
            far = pos[i] > far ? pos[i] : far;
        }
        if (oob) {
            for (Py_ssize_t i = 0; i < n; i++)
                if ((uint64_t)pos[i] >= (uint64_t)POS_LIMIT) {
                    result = -4 - (long long)i;
                    goto done;
                }
        }
    }
    const int any_past = n > 0 && far + offset >= length;
    if (any_past) {
        Py_ssize_t h = ofreq == Py_None ? 0 : PyBytes_GET_SIZE(ofreq) / 8;
        if (h == 0 || opast == Py_None || PyBytes_GET_SIZE(opast) != (Py_ssize_t)K * W * 4) {
            result = -3;
            goto done;
        }
        const int32_t *pm = (const int32_t *)PyBytes_AS_STRING(opast);
        comp = PyMem_Malloc(sizeof(int32_t) * (size_t)(K * D + 1));
        scratch = PyMem_Malloc((size_t)(2 * h) * (size_t)es + 8);
        if (!comp || !scratch) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int k = 0; k < K; k++)
            for (Py_ssize_t j = 0; j < D; j++) {
                int32_t c = colmap[j], s = c < 0 ? -1 : pm[(Py_ssize_t)k * W + c];
                if (s < -1 || s >= 2 * h) {
                    bad("pastmap out of range");
                    goto fail;
                }
                comp[(Py_ssize_t)k * D + j] = s;
            }
        result = far + offset + 1;
    }
    /* 2. rows inside the table: gathered (past ones are written below) */
    {
        const Level *lv = native_level;
        const double *freqs = any_past ? (const double *)PyBytes_AS_STRING(ofreq) : NULL;
        const Py_ssize_t h = any_past ? PyBytes_GET_SIZE(ofreq) / 8 : 0;
        int over = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int k = 0; k < K; k++) /* one table at a time: measured faster than rows across tables */
            gather_table(dst[k], src[k], pos, n, offset, length, W, es, (int)mode, colmap, D);
        if (any_past)
            over = past_rows(lv, pos, n, offset, length, freqs, h, scale, dt, comp, K, D, es, dst, scratch);
        Py_END_ALLOW_THREADS
        if (over) result = -1;
    }
done:
    PyMem_Free(list_heap);
    PyMem_Free(comp);
    PyMem_Free(scratch);
    held_release(&hd);
    return PyLong_FromLongLong(result);
fail:
    PyMem_Free(list_heap);
    PyMem_Free(comp);
    PyMem_Free(scratch);
    held_release(&hd);
    return NULL;
}
