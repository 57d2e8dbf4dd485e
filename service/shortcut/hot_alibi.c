/* service/shortcut/hot_alibi.c -- the alibi kind: AlibiTemplate (a float32, float16 or bfloat16
 * ALiBi spec's slopes, and the engine's stored distance table when it has one), its blocks' cells
 * for every way in (/v1 bodies and the v2 routes' raw query and key positions, through its ops),
 * and its JSON answers: the full path's bytes, every cell formatted here.
 *
 * The JSON answer of a block is the learnt parts (templates.py cuts them from the full path's own
 * JSON of the learnt request) around the block's text, [[[c, c, ...], ...], ...] over [head][query]
 * [key] (or, flat: [c, c, ...], the same cells in the same order: a v2 JSON output's row-major
 * data, hot_v2json.c). The cells are the binary answer's (alibi_block, the kind's block_into op: float32
 * computed with alibi_cell.h, float16/bfloat16 by the engine's own block kernel, its rounding and
 * its overflow), and each cell's text is the one the full path writes for its value (engine/core/encode.py
 * json_text: orjson, float16 and bfloat16 as their float32 values), which hot_f32text.c writes. So
 * any block, at any distance below the position limit, inside the engine's stored table or past it,
 * is answered without Python. No text is kept per template (a load of random distances touches far
 * more texts than any budget holds); a block's repeated values (a slope times each distance) are
 * formatted once, through a small direct-mapped memo of values' texts (f32_text below, for blocks
 * of several queries: 2.1x faster for a 12-head 16 x 16 block). A block with a cell that overflows the dtype (a
 * float16 block far enough out) is declined: the full path answers it, with its 422.
 */
#include "hot.h"

#include <float.h>
#include <stdlib.h>

#include "alibi_cell.h" /* engine/kernels: the ALiBi cell, shared with engine.kernels._native */

typedef struct {
    HOT_TEMPLATE_HEAD /* tail: the float32 slopes; heads by (nq, nk) */
    double *slopes;
    Py_ssize_t nheads;
    int symmetric, mask_future;
    Py_ssize_t max_n, max_bytes;
    Py_buffer dist;       /* optional: the engine's float32 table dist[head, d] = -m_head * d */
    int have_dist;
    Py_ssize_t *rows;     /* the requested heads' rows of dist */
    int kernel_dt;        /* -1: float32 cells computed here; else float16/bfloat16 blocks by the engine's
                           * kernel (hot_cfg.kernels->alibi), of this dtype code */
    Py_ssize_t itemsize;  /* of a cell: 4, or 2 */
    struct AlibiJson *json; /* NULL, or its JSON answers' parts (hot_alibi.c) */
} AlibiTemplate;

/* The JSON answer of an AlibiTemplate with enable_json() to the selections of spans sq, sk
 * (hot_answer_body's; hot_v2json.c's lists): bytes, None (declined: a cell that overflows, a limit,
 * a template whose JSON is not `flat` as asked: nested for /v1, flat for a v2 output's data),
 * NULL error. */
static PyObject *alibi_json(AlibiTemplate *t, const Span *sq, const Span *sk, const Http *http, int flat);
static void alibi_json_free(AlibiTemplate *t); /* its JSON parts, at dealloc */
/* Template t's block [H, nq, nk] of query q and key k into fill (8-byte aligned: float32 cells
 * are stored aligned), as its /v1 answer holds it (hot_alibi.c): 0; 1 when a cell overflows the
 * dtype (the full path refuses it); -1 out of memory (no error set). */
static int alibi_block(const AlibiTemplate *t, const Sel *q, const Sel *k, char *fill);

/* ---- AlibiTemplate -------------------------------------------------------------------- */

static void AlibiTemplate_dealloc(AlibiTemplate *t)
{
    PyMem_Free(t->slopes);
    PyMem_Free(t->rows);
    if (t->have_dist) PyBuffer_Release(&t->dist);
    alibi_json_free(t);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int AlibiTemplate_init(AlibiTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slopes", "symmetric", "mask_future", "header_for", "tail", "max_n",
                             "max_bytes", "dist", "rows", "dtype", NULL};
    PyObject *os, *hf, *tail, *odist = Py_None, *orows = Py_None, *odt = NULL;
    int sym, mask;
    Py_ssize_t max_n, max_bytes;
    Py_buffer b;
    if (hot_keywords_only(args, "AlibiTemplate") < 0) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OppOO!nn|OOU:AlibiTemplate", kwlist, &os, &sym, &mask,
                                     &hf, &PyBytes_Type, &tail, &max_n, &max_bytes, &odist, &orows, &odt))
        return -1;
    if (!hot_configured() || hot_want_callable(hf) || hot_once(t->slopes != NULL)) return -1;
    t->kernel_dt = -1;
    t->itemsize = 4;
    if (odt && PyUnicode_CompareWithASCIIString(odt, "float32") != 0) {   /* the engine's kernel's blocks */
        const NativeApi *api = hot_cfg.kernels;
        if (!api || odist != Py_None) {
            PyErr_SetString(PyExc_ValueError, "dtype: float16 and bfloat16 blocks need the engine's kernels "
                                              "(configured) and no dist table");
            return -1;
        }
        if ((t->kernel_dt = api->dtype_code(odt)) < 0) return -1;
        t->itemsize = api->itemsize(t->kernel_dt);
    }
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
    return hot_hold(&t->header_for, hf, &t->tail, tail);
}


/* ---- its blocks' cells ------------------------------------------------------------------ */

/* One float32 ALiBi row (alibi_cell.h): o[b] is the cell at q - key[b], which fits int32 as
 * positions are < 2**31. Each mode is its own loop, so each vectorizes; a masked row takes two,
 * the values then the mask (in one loop GCC sinks the multiply into a branch, which does not
 * vectorize). */
VECTOR_CLONES
static void alibi_row(float *restrict o, const int32_t *restrict key, Py_ssize_t nk, int32_t q, double m,
                      int symmetric, int mask_future)
{
#define ROW(MODE) for (Py_ssize_t b = 0; b < nk; b++) o[b] = (float)alibi_cell_i32(m, q - key[b], MODE, -FLT_MAX)
    if (symmetric) {
        ROW(ALIBI_SYMMETRIC);
    } else {
        ROW(ALIBI_CAUSAL);
        if (mask_future)
            for (Py_ssize_t b = 0; b < nk; b++) o[b] = (float)alibi_masked(o[b], ALIBI_MASKED, key[b] > q, -FLT_MAX);
    }
#undef ROW
}

/* A row of the stored table read backwards: cell b of o is src[-b] (d = q - key[b] falls by one),
 * stored at any alignment (memcpy: one unaligned store), so that an answer whose HTTP head left
 * its block unaligned is written in place, not through a scratch buffer and a second copy. */
VECTOR_CLONES
static void reversed_row(char *restrict o, const float *restrict src, Py_ssize_t nk)
{
    for (Py_ssize_t b = 0; b < nk; b++) memcpy(o + 4 * b, &src[-b], 4);
}

/* Whether a float32 block is read from the stored table (reversed_row: any alignment) rather than
 * computed: consecutive keys, none after any query, every distance inside the stored table. */
static int reads_table(const AlibiTemplate *t, const Sel *q, const Sel *k)
{
    return t->kernel_dt < 0 && t->have_dist && !k->v && k->step == 1 && k->hi <= q->lo &&
           q->hi - k->lo < t->dist.shape[1];
}

/* declared, and described, in hot.h */
int alibi_block(const AlibiTemplate *t, const Sel *q, const Sel *k, char *fill)
{
    if (t->kernel_dt >= 0) {   /* float16 / bfloat16: the engine's block kernel, its rounding and overflow */
        int64_t *pos = hot_block_positions(q, k);
        if (!pos) return -1;
        int over = hot_cfg.kernels->alibi(t->slopes, t->nheads, pos, q->n, pos + q->n, k->n, fill, t->kernel_dt,
                                          t->symmetric, t->mask_future);
        PyMem_Free(pos);
        return over;
    }
    /* Decode blocks (reads_table) are the stored values read backwards; the table holds the same
     * rounding of the same float64 product (0 - m*d and m*(-d) are one value). Anything else is
     * computed (into 8-byte aligned `fill`). */
    if (reads_table(t, q, k)) {
        Py_ssize_t L = t->dist.shape[1];
        for (Py_ssize_t h = 0; h < t->nheads; h++) {
            const float *row = (const float *)t->dist.buf + t->rows[h] * L;
            for (Py_ssize_t a = 0; a < q->n; a++, fill += 4 * k->n)
                reversed_row(fill, row + (hot_sel_at(q, a) - k->start), k->n);
        }
        return 0;
    }
    float *f = (float *)fill;
    int32_t *keys = PyMem_Malloc((size_t)k->n * sizeof(int32_t));
    if (!keys) return -1;
    for (Py_ssize_t b = 0; b < k->n; b++) keys[b] = (int32_t)hot_sel_at(k, b);
    for (Py_ssize_t h = 0; h < t->nheads; h++)
        for (Py_ssize_t a = 0; a < q->n; a++, f += k->n)
            alibi_row(f, keys, k->n, (int32_t)hot_sel_at(q, a), t->slopes[h], t->symmetric, t->mask_future);
    PyMem_Free(keys);
    return 0;
}

/* ---- JSON answers ---------------------------------------------------------------------- */

typedef struct AlibiJson {
    PyObject *parts; /* (before, after) the block's text in the full path's JSON answer */
    int flat;        /* the block as one flat list [c, c, ...] (a v2 JSON output's data), not nested */
    int bf16;        /* 2-byte cells are bfloat16 (else float16) */
} AlibiJson;

void alibi_json_free(AlibiTemplate *t)
{
    AlibiJson *j = t->json;
    if (!j) return;
    Py_XDECREF(j->parts);
    PyMem_Free(j);
    t->json = NULL;
}

/* A float16's value as a float32 (exact). */
static float f16_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0x1f) bits = sign | 0x7f800000u | m << 13;
    else if (e) bits = sign | (e + 112) << 23 | m << 13;
    else {   /* zero or subnormal: m * 2^-24, exact in float32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Cell i of a block (t's cells of itemsize bytes) as the float32 the JSON writer writes. */
static inline float cell_value(const AlibiTemplate *t, const AlibiJson *j, const char *cells, Py_ssize_t i)
{
    float f;
    if (t->itemsize == 4) {
        memcpy(&f, cells + 4 * i, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, cells + 2 * i, sizeof h);
    if (!j->bf16) return f16_value(h);
    uint32_t bits = (uint32_t)h << 16;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A block's cells repeat: a cell is its head's slope times a distance, so a 16 x 16 block of 12
 * heads holds at most 12 x 31 values in its 3,072 cells. Each value's text (a pure function of its
 * float32 bits) is remembered here, direct-mapped by its bits, and copied where it repeats;
 * written only under the GIL (alibi_json makes Python objects), never stale. */
#define F32_MEMO_BITS 10
static struct {
    uint32_t bits;
    uint32_t len; /* 0: empty */
    char text[HOT_F32_TEXT];
} f32_memo[1 << F32_MEMO_BITS];

/* hot_f32_text(v, w), through f32_memo; w has HOT_F32_TEXT bytes of room, as hot_f32_text asks. */
static int f32_text(float v, char *w)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    __typeof__(f32_memo[0]) *e = &f32_memo[(bits * 2654435761u) >> (32 - F32_MEMO_BITS)];
    if (e->len && e->bits == bits) {
        memcpy(w, e->text, HOT_F32_TEXT);
        return (int)e->len;
    }
    int n = hot_f32_text(v, w);
    e->bits = bits;
    e->len = (uint32_t)n;
    memcpy(e->text, w, (size_t)n);
    return n;
}

/* declared, and described, in hot.h */
static PyObject *alibi_json(AlibiTemplate *t, const Span *sq, const Span *sk, const Http *http, int flat)
{
    AlibiJson *j = t->json;
    if (!j || !j->parts || j->flat != flat) Py_RETURN_NONE;   /* JSON not checked at learn time: the full path's */
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    char *cells = NULL, *text = NULL;
    /* the full path's limits are those of the binary answer (its bytes, per item of the dtype) */
    if (hot_block_start((PyObject *)t, NULL, sq, sk, t->max_n, t->nheads, (t->max_bytes - 4 * t->nheads) / t->itemsize,
                        &q, &k, &head, &out) <= 0)
        goto done;
    Py_ssize_t nq = q.n, nk = k.n, H = t->nheads, n = H * nq * nk;
    if (n > HOT_JSON_CELLS) {   /* too long a text for the loop: the full path's (in a thread) */
        out = Py_NewRef(Py_None);
        goto done;
    }
    /* the text: every cell's and a ',' or ']' after it, a '[' before each list (H * (nq + 1) + 1) */
    if (!(cells = PyMem_Malloc((size_t)(n * t->itemsize + 8))) ||
        !(text = PyMem_Malloc((size_t)(n * (HOT_F32_TEXT + 1) + 2 * H * (nq + 1) + 4)))) {
        PyErr_NoMemory();
        goto done;
    }
    int rc = alibi_block(t, &q, &k, cells);
    if (rc) {   /* 1: a cell overflows the dtype (the full path's 422) */
        out = rc < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
        goto done;
    }
    char *w = text;
    *w++ = '[';
    /* the memo where a block repeats values (several queries: its diagonals); one query's cells are
     * distinct distances, which the memo only slows (measured: 12% of a 32-head 1 x 16 answer) */
    int (*text_of)(float, char *) = nq > 1 ? f32_text : hot_f32_text;
    if (flat) {
        for (Py_ssize_t i = 0; i < n; i++) {
            w += text_of(cell_value(t, j, cells, i), w);
            *w++ = ',';
        }
        w[n ? -1 : 0] = ']';   /* an empty block: "[]" */
        w += n ? 0 : 1;
    } else {
        for (Py_ssize_t h = 0, i = 0; h < H; h++) {
            *w++ = '[';
            for (Py_ssize_t a = 0; a < nq; a++) {
                *w++ = '[';
                for (Py_ssize_t b = 0; b < nk; b++, i++) {
                    w += text_of(cell_value(t, j, cells, i), w);
                    *w++ = ',';
                }
                w[nk > 0 ? -1 : 0] = ']';
                w += nk > 0 ? 0 : 1;
                *w++ = ',';
            }
            w[nq > 0 ? -1 : 0] = ']';
            w += nq > 0 ? 0 : 1;
            *w++ = ',';
        }
        w[H > 0 ? -1 : 0] = ']';
        w += H > 0 ? 0 : 1;
    }
    Out o;
    if (hot_bytes_of(http, PyTuple_GET_ITEM(j->parts, 0), w - text, PyTuple_GET_ITEM(j->parts, 1), 0, &o) < 0) goto done;
    memcpy(o.fill, text, (size_t)(w - text));
    out = hot_finish(&o);
done:
    PyMem_Free(text);
    PyMem_Free(cells);
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

/* ---- AlibiTemplate's JSON methods --------------------------------------------------------- */

PyDoc_STRVAR(enable_json_doc, "enable_json(parts, flat=False)\n--\n\n"
             "Answer JSON too: parts, (before, after) the block's text in the full path's JSON answer; flat:\n"
             "the block as one flat list (a v2 JSON output's data). parts None: no JSON answers.");

static PyObject *enable_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    PyObject *parts;
    int flat;
    if (hot_json_parts(args, nargs, &parts, &flat) < 0) return NULL;
    if (!parts) {   /* no JSON answers (again) */
        alibi_json_free(t);
        Py_RETURN_NONE;
    }
    if (!t->heads) {
        PyErr_SetString(PyExc_ValueError, "enable_json: an initialised template");
        return NULL;
    }
    int bf16 = 0;
    if (t->kernel_dt >= 0) {   /* which 2-byte type: the engine's own code of "bfloat16" */
        PyObject *name = PyUnicode_FromString("bfloat16");
        int code = name ? hot_cfg.kernels->dtype_code(name) : -1;
        Py_XDECREF(name);
        if (code < 0) return NULL;
        bf16 = code == t->kernel_dt;
    }
    alibi_json_free(t);
    AlibiJson *j = PyMem_Calloc(1, sizeof *j);
    if (!j) return PyErr_NoMemory();
    j->parts = Py_NewRef(parts);
    j->flat = flat;
    j->bf16 = bf16;
    t->json = j;
    Py_RETURN_NONE;
}

/* AlibiTemplate's own methods (those of every template, hot_TemplateType's, are inherited) */
static PyMethodDef alibi_methods[] = {
    {"enable_json", (PyCFunction)(void (*)(void))enable_json, METH_FASTCALL, enable_json_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AlibiTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.AlibiTemplate",
    .tp_basicsize = sizeof(AlibiTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated float32 ALiBi spec's slopes and response layout (see the module doc).",
    .tp_new = hot_template_new,
    .tp_init = (initproc)AlibiTemplate_init,
    .tp_base = &hot_TemplateType,
    .tp_methods = alibi_methods,
    .tp_dealloc = (destructor)AlibiTemplate_dealloc,
};

/* ---- its answers: the routes call them through its ops ----------------------------------- */

/* AlibiTemplate's /v1 safetensors answer (ops->v1) to selections sp[0] (query), sp[1] (key). */
static PyObject *alibi_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    /* array bytes: itemsize * H * nq * nk + 4 * H (the float32 slopes) */
    if (hot_block_start((PyObject *)t, t->heads, &sp[0], &sp[1], t->max_n, t->nheads,
                        (t->max_bytes - 4 * t->nheads) / t->itemsize, &q, &k, &head, &out) > 0) {
        Out o;
        if (hot_bytes_of(http, head, t->itemsize * t->nheads * q.n * k.n, t->tail, !reads_table(t, &q, &k), &o) == 0)
            out = hot_block_done(&o, alibi_block(t, &q, &k, o.fill));
    }
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

/* Its JSON answers (above): /v1's nested, v2's flat. */
static PyObject *alibi_json_answer(HotTemplate *t, const Span *sp, const Http *http)
{
    return alibi_json((AlibiTemplate *)t, &sp[0], &sp[1], http, 0);
}

static PyObject *alibi_v2_json(HotTemplate *t, const Span *sp, const Py_ssize_t *want, const Http *http)
{
    (void)want;
    return alibi_json((AlibiTemplate *)t, &sp[0], &sp[1], http, 1);
}

static void alibi_limits(const HotTemplate *self, Py_ssize_t *groups, Py_ssize_t *itemsize, Py_ssize_t *max_bytes)
{
    const AlibiTemplate *t = (const AlibiTemplate *)self;
    *groups = t->nheads;
    *itemsize = t->itemsize;
    *max_bytes = t->max_bytes;
}

static int alibi_block_into(const HotTemplate *t, const Sel *q, const Sel *k, char *fill)
{
    return alibi_block((const AlibiTemplate *)t, q, k, fill);
}

static int alibi_any_alignment(const HotTemplate *t, const Sel *q, const Sel *k)
{
    return reads_table((const AlibiTemplate *)t, q, k);
}

const struct hot_ops hot_alibi_ops = {
    .kind = "alibi",
    .name = "AlibiTemplate",
    .type = &AlibiTemplateType,
    .dims = 2,
    .v1 = alibi_answer,
    .v1_json = alibi_json_answer,
    .v2_json = alibi_v2_json,
    .block_limits = alibi_limits,
    .block_into = alibi_block_into,
    .block_any_alignment = alibi_any_alignment,
};
