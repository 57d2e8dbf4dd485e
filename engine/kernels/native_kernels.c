/* engine/kernels/native_kernels.c -- the kernels of the simd backend (gather_rows, rope_expand,
 * round_into, alibi_block, t5_block, sincos): their arguments checked as numpy_impl.py checks
 * them, then the work on the dispatch level in use.
 */
#include "native.h"

static const char *const DT_NAMES[N_DT] = {"float32", "float16", "bfloat16"};
static const char DT_CODES[N_DT] = {'f', 'e', 'H'}; /* canonical buffer codes, see canon() */
static const char *const DT_STORAGE[N_DT] = {"float32", "float16", "uint16 (bfloat16 bits)"};

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

int native_parse_dtype(PyObject *obj) { return parse_choice(obj, "dtype", DT_NAMES, N_DT); }

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

#define prefetch_row native_prefetch_row

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
        interleave_fn inter = native_level->interleave;
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
    if ((dt = native_parse_dtype(odt)) < 0) goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_out(o, "out", dt) ||
        want_shape(o, "out", s->ndim, s->shape))
        goto fail;
    {
        cvt_fn cvt = native_level->cvt[dt];
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

int native_alibi_run(const Level *lv, const double *slopes, Py_ssize_t H, const int64_t *q,
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
                    vals[j] = alibi_cell(s, (double)(ln.dmax - (j0 + j)), mode, maskd);
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
                    for (Py_ssize_t j = 0; j < m; j++) vals[j] = alibi_cell_i64(s, q[a], k[j0 + j], mode, maskd);
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
    if ((dt = native_parse_dtype(odt)) < 0) goto fail;
    if (!(o = get_buf(&b, oout, "out", 1)) || want_out(o, "out", dt) ||
        want_shape(o, "out", 3, (Py_ssize_t[]){sl->shape[0], q->shape[0], k->shape[0]}))
        goto fail;
    if (symmetric && mask) {
        PyErr_SetString(PyExc_ValueError, "mask_future applies to causal ALiBi only, not symmetric");
        goto fail;
    }
    {
        const Level *lv = native_level;
        Py_BEGIN_ALLOW_THREADS
        rc = native_alibi_run(lv, (const double *)sl->buf, sl->shape[0], (const int64_t *)q->buf,
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

void native_t5_run(const Level *lv, const int32_t *lut, Py_ssize_t R, const int64_t *qq, Py_ssize_t nq,
                   const int64_t *kk, Py_ssize_t nk, int32_t *out)
{
    Line ln;
    int32_t *line = NULL;
    if (line_plan(qq, nq, kk, nk, &ln) && (line = (int32_t *)PyMem_RawMalloc((size_t)ln.len * sizeof(int32_t))) != NULL) {
        /* line[j] is relative position key - query = j - dmax */
        for (Py_ssize_t j = 0; j < ln.len; j++) {
            int64_t rel = (int64_t)j - ln.dmax;
            rel = rel < -R ? -R : rel > R ? R : rel;
            line[j] = lut[rel + R];
        }
        for (Py_ssize_t a = 0; a < nq; a++)
            memcpy(out + (size_t)a * (size_t)nk, line + (ln.dmax - (qq[a] - kk[0])), (size_t)nk * sizeof(int32_t));
        PyMem_RawFree(line);
    } else {
        for (Py_ssize_t a = 0; a < nq; a++) lv->t5_row(out + (size_t)a * (size_t)nk, kk, nk, qq[a], lut, (int64_t)R);
    }
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
    Py_BEGIN_ALLOW_THREADS
    native_t5_run(native_level, (const int32_t *)l->buf, R, (const int64_t *)q->buf, q->shape[0],
                  (const int64_t *)k->buf, k->shape[0], (int32_t *)o->buf);
    Py_END_ALLOW_THREADS
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

void native_sincos_run(const Level *lv, const double *f, Py_ssize_t h, const int64_t *pos,
                       Py_ssize_t n, double scale, char *oc, char *os, int dt, int *over)
{
    const size_t es = dt == DT_F32 ? 4 : 2;
    double cb[BLOCK], sb[BLOCK];
    cvt_fn cvt = lv->cvt[dt];
    for (Py_ssize_t i = 0; i < n; i++) {
        const double p = (double)pos[i];
        for (Py_ssize_t k0 = 0; k0 < h; k0 += BLOCK) {
            Py_ssize_t m = h - k0 < BLOCK ? h - k0 : BLOCK;
            sincos_row(f + k0, m, p, scale, cb, sb);   /* round_f64.h: shared with the C reader */
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
    if ((dt = native_parse_dtype(odt)) < 0) goto fail;
    Py_ssize_t shape[2] = {p->shape[0], f->shape[0]};
    if (!(c = get_buf(&b, oc, "out_cos", 1)) || want_out(c, "out_cos", dt) ||
        want_shape(c, "out_cos", 2, shape))
        goto fail;
    if (!(s = get_buf(&b, os, "out_sin", 1)) || want_out(s, "out_sin", dt) ||
        want_shape(s, "out_sin", 2, shape))
        goto fail;
    {
        const Level *lv = native_level;
        Py_BEGIN_ALLOW_THREADS
        native_sincos_run(lv, (const double *)f->buf, shape[1], (const int64_t *)p->buf, shape[0], scale,
                   (char *)c->buf, (char *)s->buf, dt, &over);
        Py_END_ALLOW_THREADS
    }
    bufs_release(&b);
    return PyBool_FromLong(over);
fail:
    bufs_release(&b);
    return NULL;
}

PyMethodDef native_kernel_methods[] = {
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
    {"rows_lookup", (PyCFunction)(void (*)(void))native_rows_lookup, METH_FASTCALL, native_rows_lookup_doc},
    {NULL, NULL, 0, NULL},
};
