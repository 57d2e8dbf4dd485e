/* engine/kernels/native_lookup.c -- rows_lookup: the resolved lookup of engine/lookup.py in one
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
 *     dtype    0 float32, 1 float16, 2 bfloat16 (the tables' dtype)
 *   positions  C-contiguous int64 buffer, any shape, n values
 *   outs       tuple of K writable C-contiguous buffers of n*D elements each
 * Returns: >= 0 done (0: every row inside the table, else the last row reached + 1); -1 a
 * computed value overflowed the dtype; -3 a row past the table and no freqs; <= -4: position
 * index (-r - 4) is outside [0, 2**31) (nothing written is meaningful then).
 */
#include "native.h"

const char native_rows_lookup_doc[] =
    "rows_lookup(plan, positions, outs) -> int\n--\n\nThe resolved lookup (engine/lookup.py).";

#define POS_LIMIT ((int64_t)1 << 31)
#ifndef LOOKUP_AHEAD
#define LOOKUP_AHEAD PREFETCH_AHEAD /* rows prefetched ahead: every table's row of position i + LOOKUP_AHEAD */
#endif
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
                                         "bytes|None, float, int)");
        return NULL;
    }
    int K = (int)PyTuple_GET_SIZE(tabs);
    int64_t length = PyLong_AsLongLong(pl[1]), offset = PyLong_AsLongLong(pl[2]);
    long mode = PyLong_AsLong(pl[4]), dt = PyLong_AsLong(pl[8]);
    double scale = PyFloat_AsDouble(pl[7]);
    if (PyErr_Occurred()) return NULL;
    if (K < 1 || K > 4 || PyTuple_GET_SIZE(args[2]) != K || dt < 0 || dt >= N_DT || mode < 0 || mode > 3 ||
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
    if (PyObject_GetBuffer(args[1], &hd.pos, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto fail;
    hd.npos = 1;
    if (hd.pos.itemsize != 8 || !hd.pos.format || (strcmp(hd.pos.format, "q") && strcmp(hd.pos.format, "l") &&
                                                  strcmp(hd.pos.format, "<q") && strcmp(hd.pos.format, "=q"))) {
        bad("positions must be int64");
        goto fail;
    }
    const Py_ssize_t n = hd.pos.len / 8;
    const int64_t *pos = (const int64_t *)hd.pos.buf;
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
        const size_t rb = (size_t)W * (size_t)es, ob = (size_t)D * (size_t)es;
        interleave_fn inter = lv->interleave;
        int over = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int k = 0; k < K; k++) { /* one table at a time: measured faster than rows across tables */
            const char *s0 = src[k];
            char *d0 = dst[k];
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t r = pos[i] + offset;
                if (i + LOOKUP_AHEAD < n && pos[i + LOOKUP_AHEAD] + offset < length)
                    native_prefetch_row(s0 + (size_t)(pos[i + LOOKUP_AHEAD] + offset) * rb, rb);
                if (r >= length) continue;
                const char *s = s0 + (size_t)r * rb;
                char *d = d0 + (size_t)i * ob;
                switch (mode) {
                case 1: memcpy(d, s, rb); break;
                case 2: memcpy(d, s, rb); memcpy(d + rb, s, rb); break;
                case 3: inter(d, s, W, es); break;
                default: put_cols(d, s, colmap, D, es);
                }
            }
        }
        if (any_past)
            over = past_rows(lv, pos, n, offset, length, freqs, h, scale, (int)dt, comp, K, D, es, dst, scratch);
        Py_END_ALLOW_THREADS
        if (over) result = -1;
    }
done:
    PyMem_Free(comp);
    PyMem_Free(scratch);
    held_release(&hd);
    return PyLong_FromLongLong(result);
fail:
    PyMem_Free(comp);
    PyMem_Free(scratch);
    held_release(&hd);
    return NULL;
}
