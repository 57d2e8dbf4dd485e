/* service/shortcut/_hot.c -- the spec-template shortcut (service/shortcut/templates.py) in C, for the hot path.
 *
 * Decode-time clients send the same spec again and again with new positions. After the full
 * path has answered a body, the body's bytes around its selections (RoPE and sinusoidal
 * "positions"; ALiBi "query" and "key") become a template key: the body with each selection's
 * text replaced by one NUL byte. A later body with the same key is the same validated spec with
 * other selections (replay.py explains why, and checks at learn time that each cut-out span
 * really is the value its field takes). This module answers such a body in one call, with no
 * Python object but the answer.
 *
 *   configure(position_limit, max_rows, fields, range_keys)
 *     Once, from service/shortcut/templates.py, before anything else: the rules Python owns, so that none is
 *     written twice. position_limit: positions are < it (engine/selection.py; at most 2**31, for
 *     the int32 distances below); max_rows: most rows of a RowsTemplate answer; fields: {family:
 *     its selection names as JSON text}, e.g. {"alibi": (b'"query"', b'"key"')}, 1 or 2 each;
 *     range_keys: a range selection's start, stop and step names as JSON text.
 *
 *   answer(raw, headers, accepts, templates, max_body, family) -> bytes | None
 *
 * raw: the request body; headers: the ASGI scope's [(name, value)] list; accepts: {Accept value:
 * True} for values the negotiator maps to safetensors; templates: {key: RowsTemplate |
 * AlibiTemplate} of one family, a key of the configured fields. It returns the whole
 * safetensors response, or None whenever anything is unusual; the caller then takes the full
 * path. So the parser here may refuse more than the full path does (e.g. "-0", "start": null)
 * but never accepts a body the full path would answer differently. The tests hold the answers
 * to the full path's bytes and to the float64 reference.
 *
 *   RowsTemplate(arrays, colmap, offset, max_rows, lists_only, header_for, tail)
 *     Rows of shared tables: RoPE's half-width cos and sin, or a sinusoidal table. arrays: 1 or 2
 *     [length, w] arrays (C-contiguous, 2- or 4-byte items; the template holds them, so their
 *     mapping outlives an eviction until the template is dropped); colmap: for each output column
 *     the stored column it copies (-1: zero), so out[i, j] = array[position_i + offset, colmap[j]];
 *     header_for(n) -> safetensors header bytes for n rows; tail: the bytes after the arrays.
 *     Positions: at most max_rows (<= the configured max_rows), each row inside the table; a
 *     list, or also a range unless lists_only.
 *
 *   AlibiTemplate(slopes, symmetric, mask_future, header_for, tail, max_n, max_bytes)
 *     float32 output only. slopes: the requested heads' float64 slopes; header_for(nq, nk) ->
 *     header bytes; tail: the float32 slopes; max_n: most positions per selection; max_bytes:
 *     most bytes of arrays per answer. B[h,a,b] = float32(0 - m_h * (q_a - k_b)) (symmetric:
 *     |q_a - k_b|; mask_future: -FLT_MAX where k_b > q_a), as engine/kernels computes it: one
 *     float64 multiply, rounded once (setup.py compiles with -ffp-contract=off: no FMA).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 2               /* selections per family: configure() checks Python's */
#define MAX_POSITION_LIMIT 2147483648LL /* int32 distances: configure() checks Python's limit */
#define STACK_ROWS 256

/* What configure() received from Python; nothing runs before it. */
static struct {
    int64_t position_limit;
    Py_ssize_t max_rows;
    PyObject *fields;        /* dict: family -> tuple of 1..MAX_FIELDS bytes */
    PyObject *range_keys[3]; /* bytes: start, stop, step */
} cfg;

static int configured(void)
{
    if (cfg.fields) return 1;
    PyErr_SetString(PyExc_RuntimeError, "posenc.service._hot: configure() has not been called");
    return 0;
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* ---------------------------------------------------------------------------------------------
 * Templates
 * ------------------------------------------------------------------------------------------- */

/* One output row from one stored row: runs of columns, each copied, or zeroed (src < 0). */
typedef struct {
    Py_ssize_t dst, src, len;
} Run;

typedef struct {
    PyObject_HEAD
    Py_buffer arr[2];
    int narr;
    Py_ssize_t length, src_width, itemsize, width, offset, max_rows;
    int lists_only;
    Run *runs;
    Py_ssize_t nruns;
    int32_t *idx; /* many short runs and no zeros (interleaved layouts): a plain column gather */
    Py_ssize_t zip[2]; /* idx is two column runs from these, interleaved (zip[0] < 0: it is not) */
    PyObject *header_for; /* n -> bytes */
    PyObject *tail;       /* bytes */
    PyObject *heads;      /* dict: n -> header bytes */
} RowsTemplate;

static void RowsTemplate_dealloc(RowsTemplate *t)
{
    for (int i = 0; i < t->narr; i++) PyBuffer_Release(&t->arr[i]);
    PyMem_Free(t->runs);
    PyMem_Free(t->idx);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int get_table(PyObject *o, Py_buffer *b)
{
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->ndim != 2 || (b->itemsize != 2 && b->itemsize != 4)) {
        PyErr_SetString(PyExc_ValueError, "arrays: want 2-d arrays of 2- or 4-byte items");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static int once(int initialised)
{
    if (initialised) PyErr_SetString(PyExc_RuntimeError, "a template is initialised once");
    return initialised;
}

static int want_callable(PyObject *f)
{
    if (PyCallable_Check(f)) return 0;
    PyErr_SetString(PyExc_TypeError, "header_for must be callable");
    return -1;
}

/* colmap (output column -> stored column, -1: zero) as runs of consecutive columns. */
static int make_runs(RowsTemplate *t, PyObject *colmap)
{
    PyObject *fast = PySequence_Fast(colmap, "colmap: want a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t w = PySequence_Fast_GET_SIZE(fast);
    if (w < 1 || !(t->runs = PyMem_Malloc((size_t)w * sizeof(Run)))) {
        Py_DECREF(fast);
        if (w < 1) PyErr_SetString(PyExc_ValueError, "colmap: empty");
        else PyErr_NoMemory();
        return -1;
    }
    t->nruns = 0;
    int zeros = 0;
    for (Py_ssize_t j = 0; j < w; j++) {
        Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, j));
        if (c == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (c < -1 || c >= t->src_width) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "colmap: a column outside the arrays");
            return -1;
        }
        if (c < 0) zeros = 1;
        Run *last = t->nruns ? &t->runs[t->nruns - 1] : NULL;
        if (last && ((c < 0 && last->src < 0) || (c >= 0 && last->src >= 0 && c == last->src + last->len)))
            last->len++;
        else
            t->runs[t->nruns++] = (Run){j, c, 1};
    }
    Py_DECREF(fast);
    t->width = w;
    if (!zeros && 4 * t->nruns > w) {
        if (!(t->idx = PyMem_Malloc((size_t)w * sizeof(int32_t)))) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++)
            for (Py_ssize_t k = 0; k < t->runs[r].len; k++)
                t->idx[t->runs[r].dst + k] = (int32_t)(t->runs[r].src + k);
        t->zip[0] = w >= 2 ? t->idx[0] : -1;
        t->zip[1] = w >= 2 ? t->idx[1] : -1;
        for (Py_ssize_t j = 0; j < w && t->zip[0] >= 0; j++)
            if (t->idx[j] != t->zip[j & 1] + j / 2) t->zip[0] = -1;
    }
    return 0;
}

static int RowsTemplate_init(RowsTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"arrays", "colmap", "offset", "max_rows", "lists_only", "header_for", "tail", NULL};
    PyObject *arrays, *colmap, *hf, *tail;
    Py_ssize_t offset, max_rows;
    int lists_only;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OnnpOO!:RowsTemplate", kwlist, &PyTuple_Type, &arrays, &colmap,
                                     &offset, &max_rows, &lists_only, &hf, &PyBytes_Type, &tail))
        return -1;
    if (!configured() || want_callable(hf) || once(t->narr != 0)) return -1;
    Py_ssize_t na = PyTuple_GET_SIZE(arrays);
    if (na < 1 || na > 2 || offset < 0 || max_rows < 1 || max_rows > cfg.max_rows) {
        PyErr_Format(PyExc_ValueError, "want 1 or 2 arrays, offset >= 0 and 1 <= max_rows <= %zd (configured)",
                     cfg.max_rows);
        return -1;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        if (get_table(PyTuple_GET_ITEM(arrays, i), &t->arr[i]) < 0) return -1;
        t->narr++;
        if (t->arr[i].shape[0] != t->arr[0].shape[0] || t->arr[i].shape[1] != t->arr[0].shape[1] ||
            t->arr[i].itemsize != t->arr[0].itemsize) {
            PyErr_SetString(PyExc_ValueError, "arrays differ in shape or item size");
            return -1;
        }
    }
    t->length = t->arr[0].shape[0];
    t->src_width = t->arr[0].shape[1];
    t->itemsize = t->arr[0].itemsize;
    if (make_runs(t, colmap) < 0 || !(t->heads = PyDict_New())) return -1;
    t->offset = offset;
    t->max_rows = max_rows;
    t->lists_only = lists_only;
    Py_INCREF(hf);
    t->header_for = hf;
    Py_INCREF(tail);
    t->tail = tail;
    return 0;
}

static PyTypeObject RowsTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.RowsTemplate",
    .tp_basicsize = sizeof(RowsTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated RoPE or sinusoidal spec's tables, column map and response layout.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowsTemplate_init,
    .tp_dealloc = (destructor)RowsTemplate_dealloc,
};

typedef struct {
    PyObject_HEAD
    double *slopes;
    Py_ssize_t nheads;
    int symmetric, mask_future;
    Py_ssize_t max_n, max_bytes;
    PyObject *header_for; /* (nq, nk) -> bytes */
    PyObject *tail;       /* bytes: the float32 slopes */
    PyObject *heads;      /* dict: nq << 32 | nk -> header bytes */
    Py_buffer dist;       /* optional: the engine's float32 table dist[head, d] = -m_head * d */
    int have_dist;
    Py_ssize_t *rows;     /* the requested heads' rows of dist */
} AlibiTemplate;

static void AlibiTemplate_dealloc(AlibiTemplate *t)
{
    PyMem_Free(t->slopes);
    PyMem_Free(t->rows);
    if (t->have_dist) PyBuffer_Release(&t->dist);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int AlibiTemplate_init(AlibiTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slopes", "symmetric", "mask_future", "header_for", "tail", "max_n",
                             "max_bytes", "dist", "rows", NULL};
    PyObject *os, *hf, *tail, *odist = Py_None, *orows = Py_None;
    int sym, mask;
    Py_ssize_t max_n, max_bytes;
    Py_buffer b;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OppOO!nn|OO:AlibiTemplate", kwlist, &os, &sym, &mask,
                                     &hf, &PyBytes_Type, &tail, &max_n, &max_bytes, &odist, &orows))
        return -1;
    if (!configured() || want_callable(hf) || once(t->slopes != NULL)) return -1;
    if (sym && mask) {
        PyErr_SetString(PyExc_ValueError, "mask_future applies to causal ALiBi only");
        return -1;
    }
    if (PyObject_GetBuffer(os, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b.ndim != 1 || b.itemsize != 8 || !b.format || strcmp(b.format, "d") != 0 || b.shape[0] < 1) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "slopes: want a non-empty 1-d float64 array");
        return -1;
    }
    if ((Py_ssize_t)PyBytes_GET_SIZE(tail) != 4 * b.shape[0]) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "tail: want the float32 slopes");
        return -1;
    }
    t->slopes = PyMem_Malloc((size_t)b.len);
    if (!t->slopes) {
        PyBuffer_Release(&b);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(t->slopes, b.buf, (size_t)b.len);
    t->nheads = b.shape[0];
    PyBuffer_Release(&b);
    if (!(t->heads = PyDict_New())) return -1;
    if (odist != Py_None) { /* dist [num_heads, L] float32 and rows: one int per requested head */
        if (PyObject_GetBuffer(odist, &t->dist, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
        t->have_dist = 1;
        if (t->dist.ndim != 2 || t->dist.itemsize != 4 || !t->dist.format || strcmp(t->dist.format, "f") != 0) {
            PyErr_SetString(PyExc_ValueError, "dist: want a 2-d float32 array");
            return -1;
        }
        PyObject *fast = PySequence_Fast(orows, "rows: want a sequence of head rows");
        if (!fast) return -1;
        if (PySequence_Fast_GET_SIZE(fast) != t->nheads) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "rows: want one row of dist per slope");
            return -1;
        }
        if (!(t->rows = PyMem_Malloc((size_t)t->nheads * sizeof(Py_ssize_t)))) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t h = 0; h < t->nheads; h++) {
            Py_ssize_t r = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, h));
            if (r == -1 && PyErr_Occurred()) {
                Py_DECREF(fast);
                return -1;
            }
            if (r < 0 || r >= t->dist.shape[0]) {
                Py_DECREF(fast);
                PyErr_SetString(PyExc_ValueError, "rows: a row outside dist");
                return -1;
            }
            t->rows[h] = r;
        }
        Py_DECREF(fast);
    }
    t->symmetric = sym;
    t->mask_future = mask;
    t->max_n = max_n;
    t->max_bytes = max_bytes;
    Py_INCREF(hf);
    t->header_for = hf;
    Py_INCREF(tail);
    t->tail = tail;
    return 0;
}

static PyTypeObject AlibiTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.AlibiTemplate",
    .tp_basicsize = sizeof(AlibiTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated float32 ALiBi spec's slopes and response layout (see the module doc).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)AlibiTemplate_init,
    .tp_dealloc = (destructor)AlibiTemplate_dealloc,
};

/* ---------------------------------------------------------------------------------------------
 * Strict parsing of the cut-out selections
 * ------------------------------------------------------------------------------------------- */

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static inline const char *skip_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p)) p++;
    return p;
}

/* A JSON non-negative integer below limit at *pp (no sign, no leading zero, no fraction or
 * exponent); advances *pp. -1: refused. */
static int parse_int(const char **pp, const char *end, int64_t limit, int64_t *out)
{
    const char *p = *pp;
    if (p >= end || !is_digit(*p)) return -1;
    int64_t v = *p++ - '0';
    if (v == 0 && p < end && is_digit(*p)) return -1;
    while (p < end && is_digit(*p)) {
        v = v * 10 + (*p++ - '0');
        if (v >= limit) return -1;
    }
    if (v >= limit || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) return -1;
    *pp = p;
    *out = v;
    return 0;
}

typedef struct {
    const char *open, *close; /* '[' or '{' .. its ']' or '}' */
} Span;

/* A selection: a range (start, step, n) or n explicit values. */
typedef struct {
    int64_t start, step, lo, hi;
    Py_ssize_t n;
    int64_t *v; /* NULL: a range */
    int64_t stack[STACK_ROWS];
    int64_t *heap;
} Sel;

static void sel_free(Sel *s) { PyMem_Free(s->heap); }

static inline int64_t sel_at(const Sel *s, Py_ssize_t i) { return s->v ? s->v[i] : s->start + i * s->step; }

/* '[' ws (int ws (',' ws int ws)*)? ']' with 1..cap ints, each < limit. 0: ok; -1: refused;
 * -2: error set. */
static int parse_list(const Span *sp, Py_ssize_t cap, int64_t limit, Sel *s)
{
    const char *p = sp->open + 1, *end = sp->close + 1;
    Py_ssize_t most = 1;
    for (const char *c = p; c < sp->close; c++) most += *c == ',';
    if (most > cap) return -1;
    s->v = s->stack;
    if (most > STACK_ROWS) {
        if (!(s->heap = PyMem_Malloc((size_t)most * sizeof(int64_t)))) {
            PyErr_NoMemory();
            return -2;
        }
        s->v = s->heap;
    }
    Py_ssize_t n = 0;
    p = skip_ws(p, end);
    for (;;) {
        int64_t x;
        if (parse_int(&p, end, limit, &x) < 0) return -1;
        s->v[n++] = x;
        if (n == 1 || x < s->lo) s->lo = x;
        if (n == 1 || x > s->hi) s->hi = x;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == ']') {
            if (p + 1 != end) return -1;
            s->n = n;
            return 0;
        }
        if (*p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
}

/* {"start": s, "stop": e[, "step": k]} (the configured range keys) in any key order,
 * s < e <= position_limit, k > 0. */
static int parse_range(const Span *sp, Py_ssize_t cap, Sel *s)
{
    const int64_t limit = cfg.position_limit;
    int64_t vals[3] = {0, 0, 1};
    int seen[3] = {0, 0, 0};
    const char *p = sp->open + 1, *end = sp->close + 1;
    p = skip_ws(p, end);
    for (;;) {
        int f = -1;
        for (int i = 0; i < 3; i++) {
            size_t l = (size_t)PyBytes_GET_SIZE(cfg.range_keys[i]);
            if ((size_t)(end - p) >= l && memcmp(p, PyBytes_AS_STRING(cfg.range_keys[i]), l) == 0) {
                f = i;
                p += l;
                break;
            }
        }
        if (f < 0 || seen[f]) return -1;
        seen[f] = 1;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
        if (f == 2 && end - p >= 4 && memcmp(p, "null", 4) == 0)
            p += 4; /* an explicit null equals an absent step */
        else if (parse_int(&p, end, limit + 1, &vals[f]) < 0)
            return -1;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == '}') break;
        if (*p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
    if (p + 1 != end || !seen[0] || !seen[1]) return -1;
    int64_t start = vals[0], stop = vals[1], step = vals[2];
    if (start >= limit || !(start < stop) || step <= 0) return -1;
    int64_t n = (stop - start + step - 1) / step;
    if (n > cap) return -1;
    s->v = NULL;
    s->start = start;
    s->step = step;
    s->n = (Py_ssize_t)n;
    s->lo = start;
    s->hi = start + (n - 1) * step;
    return 0;
}

/* The span of field `name` (JSON text with its quotes): the first occurrence, then only
 * whitespace and exactly one ':' up to '[' or '{', then up to the first ']' or '}'. */
static int find_span(const char *b, const char *end, PyObject *name, Span *sp)
{
    const char *i = memmem(b, (size_t)(end - b), PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name));
    if (!i) return -1;
    const char *p = i + PyBytes_GET_SIZE(name);
    int colons = 0;
    while (p < end && (is_ws(*p) || *p == ':')) colons += *p++ == ':';
    if (p >= end || colons != 1 || (*p != '[' && *p != '{')) return -1;
    const char *c = memchr(p, *p == '[' ? ']' : '}', (size_t)(end - p));
    if (!c) return -1;
    sp->open = p;
    sp->close = c;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Filling the answer
 * ------------------------------------------------------------------------------------------- */

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

/* The gather above when the columns are two runs interleaved (a sinusoidal "interleaved"
 * layout, RoPE's interleaved cos and sin): d = a0 b0 a1 b1 ..., plain loads and shuffles
 * instead of one gather per item. */
#define ZIP(name, D, T)                                                                     \
    VECTOR_CLONES static void name(D *restrict d, const T *a, const T *b, Py_ssize_t w)     \
    {                                                                                       \
        Py_ssize_t h = w / 2;                                                               \
        for (Py_ssize_t k = 0; k < h; k++) {                                                \
            PUT(T, d, 2 * k, a[k]);                                                         \
            PUT(T, d, 2 * k + 1, b[k]);                                                     \
        }                                                                                   \
        if (w & 1) PUT(T, d, w - 1, a[h]);                                                  \
    }
ZIP(zip32, any32, uint32_t)
ZIP(zip16, any16, uint16_t)

static void copy_rows(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(sel_at(rows, i) + t->offset) * srb;
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

/* One ALiBi row: o[b] = float32(0 - m * (q - key[b])); |q - key[b]| < 2**31 fits int32. */
VECTOR_CLONES
static void alibi_row(float *restrict o, const int32_t *restrict key, Py_ssize_t nk, int32_t q, double m,
                      int symmetric, int mask_future)
{
    if (symmetric) {
        for (Py_ssize_t b = 0; b < nk; b++) {
            int32_t d = q - key[b];
            d = d < 0 ? -d : d;
            o[b] = (float)(0.0 - m * (double)d);
        }
    } else if (mask_future) {
        for (Py_ssize_t b = 0; b < nk; b++) {
            int32_t d = q - key[b];
            float v = (float)(0.0 - m * (double)d);
            o[b] = d < 0 ? -FLT_MAX : v;
        }
    } else {
        for (Py_ssize_t b = 0; b < nk; b++) o[b] = (float)(0.0 - m * (double)(q - key[b]));
    }
}

/* A row of the stored table read backwards: o[b] = src[-b] (d = q - key[b] falls by one). */
VECTOR_CLONES
static void reversed_row(float *restrict o, const float *restrict src, Py_ssize_t nk)
{
    for (Py_ssize_t b = 0; b < nk; b++) o[b] = src[-b];
}

/* The safetensors header for an answer of shape (a) or (a, b) (b < 0: one dimension), from the
 * template's cache, else from header_for(a[, b]) once; new reference. */
static PyObject *header(PyObject *cache, PyObject *header_for, Py_ssize_t a, Py_ssize_t b)
{
    PyObject *key = PyLong_FromLongLong(b < 0 ? (long long)a : ((long long)a << 32) | (long long)b);
    if (!key) return NULL;
    PyObject *h = PyDict_GetItemWithError(cache, key);
    if (h) {
        Py_INCREF(h);
    } else if (!PyErr_Occurred()) {
        h = b < 0 ? PyObject_CallFunction(header_for, "n", a) : PyObject_CallFunction(header_for, "nn", a, b);
        if (h && !PyBytes_Check(h)) {
            Py_CLEAR(h);
            PyErr_SetString(PyExc_TypeError, "header_for must return bytes");
        }
        if (h && PyDict_GET_SIZE(cache) >= 4096) PyDict_Clear(cache);
        if (h && PyDict_SetItem(cache, key, h) < 0) Py_CLEAR(h);
    }
    Py_DECREF(key);
    return h;
}

/* The HTTP head the hot lane (service/protocol/lane.py) puts before an answer, in the same bytes object:
 * pre (status line .. "content-length: "), the answer's length, post (the headers after it), then
 * "connection: close" when asked, and the blank line. NULL: the answer alone. */
typedef struct {
    PyObject *pre, *post; /* bytes */
    int close;
} Http;

static const char CLOSE_LINE[] = "connection: close\r\n";

/* An answer being filled: the kernels write `fill`, which is `dest` inside `obj`, or, when they
 * need `aligned` stores (ALiBi's float rows) and an HTTP head of another length left `dest`
 * unaligned, an 8-byte aligned scratch buffer that finish() moves in place. */
typedef struct {
    PyObject *obj;
    char *dest, *fill;
    Py_ssize_t n;
} Out;

static int bytes_of(const Http *http, PyObject *head, Py_ssize_t body, PyObject *tail, int aligned, Out *o)
{
    Py_ssize_t hl = PyBytes_GET_SIZE(head), tl = PyBytes_GET_SIZE(tail), pl = 0, ql = 0;
    char digits[24];
    int dl = 0;
    if (http) {
        dl = snprintf(digits, sizeof digits, "%zd", hl + body + tl);
        pl = PyBytes_GET_SIZE(http->pre);
        ql = PyBytes_GET_SIZE(http->post) + (http->close ? (Py_ssize_t)sizeof CLOSE_LINE - 1 : 0) + 2;
    }
    Py_ssize_t at = pl + dl + ql; /* where the safetensors answer starts */
    o->obj = PyBytes_FromStringAndSize(NULL, at + hl + body + tl);
    if (!o->obj) return -1;
    char *w = PyBytes_AS_STRING(o->obj);
    if (http) {
        memcpy(w, PyBytes_AS_STRING(http->pre), (size_t)pl);
        memcpy(w + pl, digits, (size_t)dl);
        char *q = w + pl + dl;
        memcpy(q, PyBytes_AS_STRING(http->post), (size_t)PyBytes_GET_SIZE(http->post));
        q += PyBytes_GET_SIZE(http->post);
        if (http->close) {
            memcpy(q, CLOSE_LINE, sizeof CLOSE_LINE - 1);
            q += sizeof CLOSE_LINE - 1;
        }
        memcpy(q, "\r\n", 2);
        w += at;
    }
    memcpy(w, PyBytes_AS_STRING(head), (size_t)hl);
    memcpy(w + hl + body, PyBytes_AS_STRING(tail), (size_t)tl);
    o->dest = o->fill = w + hl;
    o->n = body;
    if (aligned && ((uintptr_t)o->dest & 7) && body > 0) {
        if (!(o->fill = PyMem_Malloc((size_t)body))) {
            Py_CLEAR(o->obj);
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* The filled answer (new reference). */
static PyObject *finish(Out *o)
{
    if (o->fill != o->dest) {
        memcpy(o->dest, o->fill, (size_t)o->n);
        PyMem_Free(o->fill);
    }
    return o->obj;
}

static int parse_sel(const Span *sp, Py_ssize_t cap, Sel *s)
{
    return *sp->open == '[' ? parse_list(sp, cap, cfg.position_limit, s) : parse_range(sp, cap, s);
}

static PyObject *rows_answer(RowsTemplate *t, const Span *sp, const Http *http)
{
    Sel rows = {.heap = NULL};
    PyObject *out = NULL;
    if (t->lists_only && *sp->open != '[') Py_RETURN_NONE;
    int rc = parse_sel(sp, t->max_rows, &rows);
    if (rc == -2) return NULL;
    if (rc < 0 || rows.hi + t->offset >= t->length) { /* past the table: the full path computes */
        sel_free(&rows);
        Py_RETURN_NONE;
    }
    PyObject *head = header(t->heads, t->header_for, rows.n, -1);
    if (head) {
        Py_ssize_t block = rows.n * t->width * t->itemsize;
        Out o;
        int rc2 = bytes_of(http, head, t->narr * block, t->tail, 0, &o);   /* copy_rows: any alignment */
        Py_DECREF(head);
        if (rc2 == 0) {
            for (int i = 0; i < t->narr; i++) copy_rows(o.fill + i * block, t, (const char *)t->arr[i].buf, &rows);
            out = finish(&o);
        }
    }
    sel_free(&rows);
    return out;
}

static PyObject *alibi_answer(AlibiTemplate *t, const Span *sq, const Span *sk, const Http *http)
{
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    int32_t *keys = NULL;
    int rc = parse_sel(sq, t->max_n, &q);
    if (rc == 0) rc = parse_sel(sk, t->max_n, &k);
    if (rc == -2) goto done;
    if (rc < 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    /* array bytes: 4 * H * nq * nk + 4 * H, each factor checked so nothing overflows */
    Py_ssize_t cells_max = t->max_bytes / 4 - t->nheads;
    if (cells_max < 1 || q.n > cells_max / t->nheads || k.n > cells_max / t->nheads / q.n) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    if (!(head = header(t->heads, t->header_for, q.n, k.n))) goto done;
    Out o;
    if (bytes_of(http, head, 4 * t->nheads * q.n * k.n, t->tail, 1, &o) < 0) goto done;
    float *f = (float *)o.fill; /* aligned: the header is padded to 8 bytes, else a scratch buffer */
    /* Decode blocks (consecutive keys, none after any query, every distance inside the stored
     * table) are the stored values read backwards; the table holds the same rounding of the same
     * float64 product (0 - m*d and m*(-d) are one value). Anything else is computed. */
    if (t->have_dist && !k.v && k.step == 1 && k.hi <= q.lo && q.hi - k.lo < t->dist.shape[1]) {
        Py_ssize_t L = t->dist.shape[1];
        for (Py_ssize_t h = 0; h < t->nheads; h++) {
            const float *row = (const float *)t->dist.buf + t->rows[h] * L;
            for (Py_ssize_t a = 0; a < q.n; a++, f += k.n)
                reversed_row(f, row + (sel_at(&q, a) - k.start), k.n);
        }
    } else {
        if (!(keys = PyMem_Malloc((size_t)k.n * sizeof(int32_t)))) {
            out = finish(&o);   /* frees the scratch buffer */
            Py_CLEAR(out);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t b = 0; b < k.n; b++) keys[b] = (int32_t)sel_at(&k, b);
        for (Py_ssize_t h = 0; h < t->nheads; h++)
            for (Py_ssize_t a = 0; a < q.n; a++, f += k.n)
                alibi_row(f, keys, k.n, (int32_t)sel_at(&q, a), t->slopes[h], t->symmetric, t->mask_future);
    }
    out = finish(&o);
done:
    PyMem_Free(keys);
    Py_XDECREF(head);
    sel_free(&q);
    sel_free(&k);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * answer()
 * ------------------------------------------------------------------------------------------- */

/* The value of header `name` (ASGI names are lower-case bytes), borrowed from the caller's
 * list; NULL with no error set if there is none, or several (the full path joins them). */
static PyObject *find_header(PyObject *headers, const char *name, Py_ssize_t len)
{
    PyObject *fast = PySequence_Fast(headers, "headers must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *found = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) continue;
        PyObject *k = PyTuple_GET_ITEM(pair, 0);
        if (PyBytes_Check(k) && PyBytes_GET_SIZE(k) == len && memcmp(PyBytes_AS_STRING(k), name, len) == 0) {
            if (found) {   /* repeated lines are one joined value (RFC 9110): the full path's */
                found = NULL;
                break;
            }
            found = PyTuple_GET_ITEM(pair, 1);
        }
    }
    Py_DECREF(fast);
    return found;
}

/* The answer of body [b, end) of a family (its selection names `fields`) from its `templates`,
 * with an HTTP head before it when `http` is given: a new reference, None, or NULL (error). */
static PyObject *answer_body(const char *b, const char *end, PyObject *fields, PyObject *templates,
                             const Http *http)
{
    if (PyDict_GET_SIZE(templates) == 0) Py_RETURN_NONE;
    /* the selections' spans, in field order, then by position for the key */
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    Span spans[MAX_FIELDS];
    int order[MAX_FIELDS] = {0, 1};
    for (Py_ssize_t f = 0; f < nf; f++)
        if (find_span(b, end, PyTuple_GET_ITEM(fields, f), &spans[f]) < 0) Py_RETURN_NONE;
    if (nf == 2 && spans[1].open < spans[0].open) order[0] = 1, order[1] = 0;
    if (nf == 2 && !(spans[order[0]].close < spans[order[1]].open)) Py_RETURN_NONE;

    Py_ssize_t klen = (end - b) + nf;
    for (Py_ssize_t f = 0; f < nf; f++) klen -= spans[f].close + 1 - spans[f].open;
    PyObject *key = PyBytes_FromStringAndSize(NULL, klen);
    if (!key) return NULL;
    char *kb = PyBytes_AS_STRING(key);
    const char *from = b;
    for (Py_ssize_t i = 0; i < nf; i++) {
        const Span *sp = &spans[order[i]];
        memcpy(kb, from, (size_t)(sp->open - from));
        kb += sp->open - from;
        *kb++ = '\0';
        from = sp->close + 1;
    }
    memcpy(kb, from, (size_t)(end - from));
    PyObject *t = PyDict_GetItemWithError(templates, key);
    Py_DECREF(key);
    if (!t) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* held: header_for runs Python code, during which another thread may drop it from the dict */
    Py_INCREF(t);
    PyObject *out = NULL;
    if (Py_IS_TYPE(t, &RowsTemplateType) && nf == 1)
        out = rows_answer((RowsTemplate *)t, &spans[0], http);
    else if (Py_IS_TYPE(t, &AlibiTemplateType) && nf == 2)
        out = alibi_answer((AlibiTemplate *)t, &spans[0], &spans[1], http);
    else
        PyErr_SetString(PyExc_TypeError, "templates must map to RowsTemplate (1 field) or AlibiTemplate (2 fields)");
    Py_DECREF(t);
    return out;
}

/* 1 if `accept` (borrowed; NULL: none) is a value the negotiator maps to safetensors, 0 if not,
 * -1 on error. */
static int accepted(PyObject *accepts, PyObject *accept)
{
    if (!accept) return 0;
    PyObject *ok = PyDict_GetItemWithError(accepts, accept);
    return ok ? 1 : (PyErr_Occurred() ? -1 : 0);
}

PyDoc_STRVAR(answer_doc, "answer(raw, headers, accepts, templates, max_body, family) -> bytes | None\n--\n\n"
             "The safetensors answer of a body whose spec is a known template, or None.");

static PyObject *answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!configured()) return NULL;
    if (nargs != 6 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "answer(raw: bytes, headers, accepts: dict, templates: dict, "
                                         "max_body: int, family: str)");
        return NULL;
    }
    PyObject *raw = args[0];
    PyObject *fields = PyDict_GetItemWithError(cfg.fields, args[5]); /* checked by configure() */
    if (!fields) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "family %R: not configured", args[5]);
        return NULL;
    }
    Py_ssize_t max_body = PyLong_AsSsize_t(args[4]);
    if (max_body == -1 && PyErr_Occurred()) return NULL;
    if (PyBytes_GET_SIZE(raw) > max_body || PyDict_GET_SIZE(args[3]) == 0) Py_RETURN_NONE;
    PyObject *acc = find_header(args[1], "accept", 6);
    if (!acc && PyErr_Occurred()) return NULL;
    int ok = accepted(args[2], acc);
    if (ok <= 0) {
        if (ok < 0) return NULL;
        Py_RETURN_NONE;
    }
    const char *b = PyBytes_AS_STRING(raw);
    return answer_body(b, b + PyBytes_GET_SIZE(raw), fields, args[3], NULL);
}

/* ---------------------------------------------------------------------------------------------
 * lane(): a whole HTTP request to the whole HTTP response (service/protocol/lane.py)
 * ------------------------------------------------------------------------------------------- */

/* A request the lane may answer: "POST <target> HTTP/1.1", each header line a token name, ':',
 * optional spaces, and visible text (no trailing space) ended by CRLF, a Content-Length of
 * digits whose body is all in the buffer. Anything else, however legal, is left to httptools
 * (and from there to ASGI): Transfer-Encoding, Expect, Upgrade, a Connection other than one
 * "close" or "keep-alive", a repeated Content-Length, Connection or Accept, obs-text or a
 * folded line, a head over MAX_HEAD bytes. So whatever this parser takes, httptools parses the
 * same way (it only ever sees less). */
#define MAX_HEAD 8192

typedef struct {
    const char *target, *accept, *body;
    Py_ssize_t target_len, accept_len, body_len;
    int close;
} Request;

static unsigned char TOKEN[256]; /* RFC 9110 tchar; filled at import */
/* headers that change how a request is read or answered: such a request is left to httptools */
static const char *const LEFT[] = {"expect", "proxy-connection", "transfer-encoding", "upgrade"};

static void fill_token(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    for (int c = '0'; c <= '9'; c++) TOKEN[c] = 1;
    for (int c = 'a'; c <= 'z'; c++) TOKEN[c] = TOKEN[c - 32] = 1;
    for (const char *e = extra; *e; e++) TOKEN[(unsigned char)*e] = 1;
}

static int name_is(const char *n, Py_ssize_t len, const char *lower)
{
    Py_ssize_t l = (Py_ssize_t)strlen(lower);
    if (len != l) return 0;
    for (Py_ssize_t i = 0; i < l; i++)
        if ((n[i] | 0x20) != lower[i]) return 0;   /* | 0x20 folds letters; '-' matches only '-' or CR */
    return 1;
}

/* The end of the request at p (after its body), or NULL: not one this lane takes, or not whole. */
static const char *parse_request(const char *p, const char *end, Request *r)
{
    const char *limit = end - p > MAX_HEAD ? p + MAX_HEAD : end;
    if (limit - p < 5 || memcmp(p, "POST ", 5) != 0) return NULL;
    p += 5;
    r->target = p;
    while (p < limit && *p > ' ' && *p < 0x7f) p++;
    r->target_len = p - r->target;
    if (limit - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0) return NULL;
    p += 11;
    int n_length = 0, n_connection = 0, n_accept = 0;
    Py_ssize_t length = 0;
    r->close = 0;
    r->accept = NULL;
    r->accept_len = 0;
    for (;;) {
        if (limit - p < 2) return NULL;
        if (p[0] == '\r') {
            if (p[1] != '\n') return NULL;
            p += 2;
            break;
        }
        const char *n = p;
        while (p < limit && TOKEN[(unsigned char)*p]) p++;
        Py_ssize_t nl = p - n;
        if (nl == 0 || p >= limit || *p != ':') return NULL;
        p++;
        while (p < limit && (*p == ' ' || *p == '\t')) p++;
        const char *v = p;
        while (p < limit && ((*p >= ' ' && *p < 0x7f) || *p == '\t')) p++;
        Py_ssize_t vl = p - v;
        if (limit - p < 2 || p[0] != '\r' || p[1] != '\n') return NULL;
        if (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) return NULL;
        p += 2;
        if (name_is(n, nl, "accept")) {
            r->accept = v;
            r->accept_len = vl;
            n_accept++;
        } else if (name_is(n, nl, "content-length")) {
            if (vl < 1 || vl > 9 || n_length++) return NULL;
            length = 0;
            for (Py_ssize_t i = 0; i < vl; i++) {
                if (!is_digit(v[i])) return NULL;
                length = length * 10 + (v[i] - '0');
            }
        } else if (name_is(n, nl, "connection")) {
            if (n_connection++) return NULL;
            if (name_is(v, vl, "close")) r->close = 1;
            else if (!name_is(v, vl, "keep-alive")) return NULL;
        } else {
            for (size_t i = 0; i < sizeof LEFT / sizeof *LEFT; i++)
                if (name_is(n, nl, LEFT[i])) return NULL;
        }
    }
    if (n_length != 1 || n_accept > 1 || end - p < length) return NULL;
    r->body = p;
    r->body_len = length;
    return p + length;
}

PyDoc_STRVAR(lane_doc, "lane(data, start, routes, accepts, native, max_body, pre, post, close)\n--\n\n"
             "The request at data[start:], if it is a whole, plain POST to one of routes ({target: (family, "
             "...)}) whose Accept is in accepts and whose spec is a known template (native: {family: "
             "templates}), answered: (end of the request, its route's value, the whole response with the "
             "HTTP head pre + length + post [+ connection: close], keep-alive). Else None.");

static PyObject *lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!configured()) return NULL;
    if (nargs != 9 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3]) ||
        !PyDict_Check(args[4]) || !PyBytes_Check(args[6]) || !PyBytes_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "lane(data: bytes, start: int, routes: dict, accepts: dict, native: dict, "
                                         "max_body: int, pre: bytes, post: bytes, close: bool)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), max_body = PyLong_AsSsize_t(args[5]);
    if ((start == -1 || max_body == -1) && PyErr_Occurred()) return NULL;
    int force_close = PyObject_IsTrue(args[8]);
    if (force_close < 0) return NULL;
    const char *b = PyBytes_AS_STRING(args[0]), *end = b + PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > end - b) Py_RETURN_NONE;
    Request r;
    const char *next = parse_request(b + start, end, &r);
    if (!next || r.body_len > max_body || !r.accept) Py_RETURN_NONE;

    PyObject *key, *route = NULL, *found;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[2], &pos, &key, &found))
        if (PyBytes_Check(key) && PyBytes_GET_SIZE(key) == r.target_len &&
            memcmp(PyBytes_AS_STRING(key), r.target, (size_t)r.target_len) == 0) {
            route = found;
            break;
        }
    if (!route || !PyTuple_Check(route) || PyTuple_GET_SIZE(route) < 1) Py_RETURN_NONE;
    PyObject *family = PyTuple_GET_ITEM(route, 0);
    PyObject *fields = PyDict_GetItemWithError(cfg.fields, family);
    if (!fields) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "family %R: not configured", family);
        return NULL;
    }
    PyObject *templates = PyDict_GetItemWithError(args[4], family);
    if (!templates) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyDict_Check(templates)) {
        PyErr_SetString(PyExc_TypeError, "native: want {family: {key: template}}");
        return NULL;
    }
    PyObject *acc = PyBytes_FromStringAndSize(r.accept, r.accept_len);
    if (!acc) return NULL;
    int ok = accepted(args[3], acc);
    Py_DECREF(acc);
    if (ok <= 0) {
        if (ok < 0) return NULL;
        Py_RETURN_NONE;
    }
    Http http = {args[6], args[7], r.close || force_close};
    Py_INCREF(route);   /* held across answer_body, which may run Python code (header_for) */
    PyObject *out = answer_body(r.body, r.body + r.body_len, fields, templates, &http);
    PyObject *res = NULL;
    if (out == Py_None)
        res = out;
    else if (out)
        res = Py_BuildValue("(nONO)", (Py_ssize_t)(next - b), route, out, http.close ? Py_False : Py_True);
    Py_DECREF(route);
    return res;
}


/* ---------------------------------------------------------------------------------------------
 * fill(): a RowsTemplate's rows for raw binary positions (the v2 protocol's shortcut,
 * service/v2/hot.py), laid out between caller-given bytes
 * ------------------------------------------------------------------------------------------- */

/* copy_rows, for a destination that may not be aligned to the item size (the gather loops
 * assume it is): column by column through memcpy. */
static void copy_rows_unaligned(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
    if (!t->idx || ((uintptr_t)dst % es == 0 && drb % es == 0)) {
        copy_rows(dst, t, table, rows);
        return;
    }
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(sel_at(rows, i) + t->offset) * srb;
        char *d = dst + drb * (size_t)i;
        for (Py_ssize_t j = 0; j < t->width; j++) memcpy(d + (size_t)j * es, s + (size_t)t->idx[j] * es, es);
    }
}

PyDoc_STRVAR(fill_doc, "fill(template, positions, itemsize, parts) -> bytes | None\n--\n\n"
             "parts[0] + the rows of the RowsTemplate's first array at the raw little-endian positions\n"
             "(itemsize 4: int32, 8: int64) + parts[1] + ... + parts[narrays], in one new bytes object;\n"
             "None when a position is negative or past the table (the full path answers those).");

PyDoc_STRVAR(fill_into_doc, "fill_into(template, positions, itemsize, buffers) -> True | None\n--\n\n"
             "The same rows written into caller-given writable buffers, one per array, each exactly\n"
             "the rows' size (e.g. a client's shared memory); None, writing nothing, as fill().");

#define FILL_NOGIL_BYTES (1 << 20) /* copies this large run without the GIL (they may run in a thread) */

/* The positions of a fill: 1 when all are rows of the table (into *rows), 0 when one is not, -1
 * with an error set. */
static int fill_rows(const RowsTemplate *t, const Py_buffer *pb, Py_ssize_t isz, Sel *rows)
{
    Py_ssize_t n = pb->len / isz;
    if ((isz != 4 && isz != 8) || pb->len % isz || n < 1) {
        PyErr_SetString(PyExc_ValueError, "fill: itemsize 4 or 8, and a whole, non-zero number of positions");
        return -1;
    }
    rows->v = rows->stack;
    if (n > STACK_ROWS && !(rows->v = rows->heap = PyMem_Malloc((size_t)n * sizeof(int64_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    const char *src = (const char *)pb->buf;
    const int64_t limit = (int64_t)(t->length - t->offset); /* 0 <= position < limit: a stored row */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v;
        if (isz == 8) {
            memcpy(&v, src + 8 * i, 8);
        } else {
            int32_t w;
            memcpy(&w, src + 4 * i, 4);
            v = w;
        }
        if (v < 0 || v >= limit) return 0;
        rows->v[i] = v;
    }
    rows->n = n;
    return 1;
}

/* Each array's rows into slots[i] (block bytes each), without the GIL when large. */
static void fill_slots(const RowsTemplate *t, const Sel *rows, char **slots, Py_ssize_t block)
{
    if (t->narr * block >= FILL_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        for (int i = 0; i < t->narr; i++) copy_rows_unaligned(slots[i], t, (const char *)t->arr[i].buf, rows);
        Py_END_ALLOW_THREADS
    } else {
        for (int i = 0; i < t->narr; i++) copy_rows_unaligned(slots[i], t, (const char *)t->arr[i].buf, rows);
    }
}

static Py_ssize_t row_bytes(const RowsTemplate *t, Py_ssize_t n)
{
    return n * t->width * t->itemsize; /* n <= a buffer's length / 4 and width * itemsize is small */
}

/* Where the rows go: into a new bytes object, between parts (fill), or into the given buffers
 * (fill_into). slots[i]: where array i's rows start; -1 with an error set. */
static int fill_targets(PyObject *targets, int into, const RowsTemplate *t, Py_ssize_t block, PyObject **out,
                        Py_buffer *dst, int *got, char **slots)
{
    if (into) {
        for (; *got < t->narr; (*got)++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(targets, *got), &dst[*got], PyBUF_WRITABLE) < 0) return -1;
            slots[*got] = (char *)dst[*got].buf;
            if (dst[*got].len != block) {
                PyErr_SetString(PyExc_ValueError, "fill_into: a buffer is not the size of the rows");
                (*got)++;
                return -1;
            }
        }
        Py_INCREF(Py_True);
        *out = Py_True;
        return 0;
    }
    Py_ssize_t fixed = 0;
    for (Py_ssize_t i = 0; i <= t->narr; i++) fixed += PyBytes_GET_SIZE(PyTuple_GET_ITEM(targets, i));
    if (!(*out = PyBytes_FromStringAndSize(NULL, fixed + t->narr * block))) return -1;
    char *o = PyBytes_AS_STRING(*out);
    for (Py_ssize_t i = 0; i <= t->narr; i++) {
        PyObject *p = PyTuple_GET_ITEM(targets, i);
        memcpy(o, PyBytes_AS_STRING(p), (size_t)PyBytes_GET_SIZE(p));
        o += PyBytes_GET_SIZE(p);
        if (i < t->narr) {
            slots[i] = o;
            o += block;
        }
    }
    return 0;
}

static PyObject *fill_any(PyObject *const *args, Py_ssize_t nargs, int into)
{
    static const char *sig[2] = {"fill(template: RowsTemplate, positions: buffer, itemsize: int, parts: tuple of bytes)",
                                 "fill_into(template: RowsTemplate, positions: buffer, itemsize: int, buffers: tuple)"};
    if (!configured()) return NULL;
    if (nargs != 4 || !Py_IS_TYPE(args[0], &RowsTemplateType) || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, sig[into]);
        return NULL;
    }
    RowsTemplate *t = (RowsTemplate *)args[0];
    Py_ssize_t isz = PyLong_AsSsize_t(args[2]);
    if (isz == -1 && PyErr_Occurred()) return NULL;
    int ok = PyTuple_GET_SIZE(args[3]) == t->narr + !into;
    for (Py_ssize_t i = 0; ok && !into && i <= t->narr; i++) ok = PyBytes_Check(PyTuple_GET_ITEM(args[3], i));
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: one %s per array of the template", sig[into], into ? "buffer" : "part more");
        return NULL;
    }
    Py_buffer pb, dst[2];
    int got = 0;
    PyObject *out = NULL;
    Sel rows = {.heap = NULL};
    if (PyObject_GetBuffer(args[1], &pb, PyBUF_SIMPLE) < 0) return NULL;
    int rc = fill_rows(t, &pb, isz, &rows);
    char *slots[2];
    if (rc == 0) {
        out = Py_None;
        Py_INCREF(out);
    } else if (rc > 0 && fill_targets(args[3], into, t, row_bytes(t, rows.n), &out, dst, &got, slots) == 0) {
        /* the template (held by the caller's reference) keeps the arrays mapped; a new `out` is not
         * shared yet, and the caller's buffers are held until the copy is done */
        fill_slots(t, &rows, slots, row_bytes(t, rows.n));
    } else {
        Py_CLEAR(out);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&dst[i]);
    sel_free(&rows);
    PyBuffer_Release(&pb);
    return out;
}

static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return fill_any(args, nargs, 0);
}

static PyObject *fill_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return fill_any(args, nargs, 1);
}

/* ---------------------------------------------------------------------------------------------
 * configure()
 * ------------------------------------------------------------------------------------------- */

/* 0: a non-empty bytes without NUL (a NUL would match the template keys' cut marks). */
static int want_name(PyObject *o, const char *what)
{
    if (PyBytes_Check(o) && PyBytes_GET_SIZE(o) > 0 && !memchr(PyBytes_AS_STRING(o), 0, (size_t)PyBytes_GET_SIZE(o)))
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: want a name as non-empty JSON text (bytes), got %R", what, o);
    return -1;
}

PyDoc_STRVAR(configure_doc, "configure(position_limit, max_rows, fields, range_keys)\n--\n\n"
             "The rules Python owns (see the module source); once, before any template or answer.");

static PyObject *configure(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"position_limit", "max_rows", "fields", "range_keys", NULL};
    long long limit;
    Py_ssize_t max_rows;
    PyObject *fields, *keys, *copy = NULL, *family, *names;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LnO!O!:configure", kwlist, &limit, &max_rows, &PyDict_Type,
                                     &fields, &PyTuple_Type, &keys))
        return NULL;
    if (limit < 1 || limit > MAX_POSITION_LIMIT) {
        PyErr_Format(PyExc_ValueError, "position_limit: want 1 .. 2**31 (distances are int32 here), got %lld", limit);
        return NULL;
    }
    if (max_rows < 1) {
        PyErr_Format(PyExc_ValueError, "max_rows: want >= 1, got %zd", max_rows);
        return NULL;
    }
    if (PyTuple_GET_SIZE(keys) != 3) {
        PyErr_SetString(PyExc_ValueError, "range_keys: want (start, stop, step)");
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (want_name(PyTuple_GET_ITEM(keys, i), "range_keys") < 0) return NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fields, &pos, &family, &names)) {
        if (!PyUnicode_Check(family) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) < 1 ||
            PyTuple_GET_SIZE(names) > MAX_FIELDS) {
            PyErr_Format(PyExc_ValueError, "fields[%R]: want a family name -> a tuple of 1 to %d selection "
                         "names (this build's bound)", family, MAX_FIELDS);
            return NULL;
        }
        for (Py_ssize_t f = 0; f < PyTuple_GET_SIZE(names); f++)
            if (want_name(PyTuple_GET_ITEM(names, f), "fields") < 0) return NULL;
    }
    if (!(copy = PyDict_Copy(fields))) return NULL;
    cfg.position_limit = limit;
    cfg.max_rows = max_rows;
    Py_XSETREF(cfg.fields, copy);
    for (int i = 0; i < 3; i++) {
        Py_INCREF(PyTuple_GET_ITEM(keys, i));
        Py_XSETREF(cfg.range_keys[i], PyTuple_GET_ITEM(keys, i));
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS, configure_doc},
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL, answer_doc},
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, fill_doc},
    {"fill_into", (PyCFunction)(void (*)(void))fill_into, METH_FASTCALL, fill_into_doc},
    {"lane", (PyCFunction)(void (*)(void))lane, METH_FASTCALL, lane_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_hot", "The spec-template shortcut in C (see service/shortcut/_hot.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hot(void)
{
    fill_token();
    if (PyType_Ready(&RowsTemplateType) < 0 || PyType_Ready(&AlibiTemplateType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&RowsTemplateType);
    Py_INCREF(&AlibiTemplateType);
    if (PyModule_AddObject(m, "RowsTemplate", (PyObject *)&RowsTemplateType) < 0 ||
        PyModule_AddObject(m, "AlibiTemplate", (PyObject *)&AlibiTemplateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
