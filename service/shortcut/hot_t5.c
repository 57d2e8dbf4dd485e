/* service/shortcut/hot_t5.c -- T5Template: T5 relative-position bucket blocks (t5-buckets) from
 * the engine's mapped lookup table by the engine's own block kernel (native_api.h: t5), so the
 * shortcut's int32 blocks are the full path's (engine/tables/t5.py serve: kernels.t5_block).
 * The table holds the whole function (buckets saturate past max_distance), so every block is
 * answered. JSON (enable_json) is the full path's answer around the block's text, which is
 * integers only: written here, no float to format.
 */
#include "hot.h"

/* T5 bucket blocks (hot_t5.c): the engine's lookup table lut [2 radius + 1] int32, held. */
typedef struct {
    HOT_TEMPLATE_HEAD /* heads by (nq, nk) */
    Py_buffer lut;
    Py_ssize_t radius, max_n, max_bytes;
    PyObject *json_parts; /* NULL, or (before, after): the full path's JSON answer around the block's text */
    int json_flat;        /* the block as one flat list (a v2 JSON output's data), not a list of rows */
} T5Template;

/* Template t's bucket block [nq, nk] into out (aligned), the engine's kernel (hot_t5.c): 0, or -1
 * out of memory (no error set). */
static int t5_block(const T5Template *t, const Sel *q, const Sel *k, int32_t *out);
/* The answer of a T5Template to the selections of spans sq, sk (hot_answer_body's; hot_t5.c). */
static PyObject *t5_answer(T5Template *t, const Span *sq, const Span *sk, const Http *http);

static void T5Template_dealloc(T5Template *t)
{
    if (t->heads) PyBuffer_Release(&t->lut);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_XDECREF(t->json_parts);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int T5Template_init(T5Template *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"lut", "radius", "header_for", "tail", "max_n", "max_bytes", NULL};
    PyObject *olut, *hf, *tail;
    Py_ssize_t radius, max_n, max_bytes;
    if (hot_keywords_only(args, "T5Template") < 0) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OnOO!nn:T5Template", kwlist, &olut, &radius, &hf, &PyBytes_Type, &tail,
                                     &max_n, &max_bytes))
        return -1;
    if (!hot_configured() || hot_want_callable(hf)) return -1;
    if (t->heads || !hot_cfg.kernels) {
        PyErr_SetString(PyExc_ValueError, t->heads ? "a template is initialised once"
                                                   : "T5Template needs the engine's kernels (configured)");
        return -1;
    }
    if (radius < 0 || radius > (PY_SSIZE_T_MAX - 1) / 2 || max_n < 1 || max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "want radius >= 0, max_n >= 1 and max_bytes >= 1");
        return -1;
    }
    if (PyObject_GetBuffer(olut, &t->lut, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (t->lut.ndim != 1 || t->lut.itemsize != 4 || !t->lut.format || strcmp(t->lut.format, "i") != 0 ||
        t->lut.shape[0] != 2 * radius + 1 || !(t->heads = PyDict_New())) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "lut: want int32 [2 * radius + 1]");
        PyBuffer_Release(&t->lut);
        return -1;
    }
    t->radius = radius;
    t->max_n = max_n;
    t->max_bytes = max_bytes;
    return hot_hold(&t->header_for, hf, &t->tail, tail);
}

/* The decimal text of v at d (JSON's, as orjson writes an int); returns its end. */
static char *put_int(char *d, int32_t v)
{
    char tmp[12];
    int n = 0;
    int64_t x = v;
    if (x < 0) {
        *d++ = '-';
        x = -x;
    }
    do tmp[n++] = (char)('0' + x % 10); while ((x /= 10) > 0);
    while (n > 0) *d++ = tmp[--n];
    return d;
}

/* The JSON answer of block b [nq, nk]: the parts around [[b00,b01,..],[b10,..],..]. */
static PyObject *block_json(const T5Template *t, const int32_t *b, Py_ssize_t nq, Py_ssize_t nk, const Http *http)
{
    /* '[', then per row its '[', each item followed by ',' (the last by the row's ']'), and a ','
     * after the row (the last row's is the closing ']') */
    Py_ssize_t body = t->json_flat ? 1 + nq * nk : 1 + nq * (2 + nk);   /* flat: '[', each item and its ',' or ']' */
    char digits[12];
    for (Py_ssize_t i = 0; i < nq * nk; i++) body += put_int(digits, b[i]) - digits;
    Out o;
    if (hot_bytes_of(http, PyTuple_GET_ITEM(t->json_parts, 0), body, PyTuple_GET_ITEM(t->json_parts, 1), 0, &o) < 0)
        return NULL;
    char *d = o.fill;
    *d++ = '[';
    for (Py_ssize_t a = 0; a < nq; a++) {
        if (!t->json_flat) *d++ = '[';
        for (Py_ssize_t j = 0; j < nk; j++) {
            d = put_int(d, b[a * nk + j]);
            *d++ = ',';
        }
        if (!t->json_flat) {
            d[-1] = ']';
            *d++ = ',';
        }
    }
    d[-1] = ']';
    return hot_finish(&o);
}

/* declared, and described, in hot.h */
int t5_block(const T5Template *t, const Sel *q, const Sel *k, int32_t *out)
{
    int64_t *pos = hot_block_positions(q, k);
    if (!pos) return -1;
    hot_cfg.kernels->t5((const int32_t *)t->lut.buf, t->radius, pos, q->n, pos + q->n, k->n, out);
    PyMem_Free(pos);
    return 0;
}

/* declared, and described, in hot.h */
static PyObject *t5_answer(T5Template *t, const Span *sq, const Span *sk, const Http *http)
{
    int json = http && http->json;
    if (json && !t->json_parts) Py_RETURN_NONE;   /* JSON not checked at learn time: the full path's */
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    int32_t *block = NULL;
    if (hot_block_start((PyObject *)t, json ? NULL : t->heads, sq, sk, t->max_n, 1, t->max_bytes / 4, &q, &k, &head,
                        &out) <= 0)
        goto done;
    if (json && q.n * k.n > HOT_JSON_CELLS) {   /* too long a text for the loop: the full path's */
        out = Py_NewRef(Py_None);
        goto done;
    }
    if (json) {
        if (!(block = PyMem_Malloc((size_t)(q.n * k.n) * sizeof(int32_t))) || t5_block(t, &q, &k, block) < 0)
            PyErr_NoMemory();
        else
            out = block_json(t, block, q.n, k.n, http);
        goto done;
    }
    Out o;
    if (hot_bytes_of(http, head, 4 * q.n * k.n, t->tail, 1, &o) == 0)
        out = hot_block_done(&o, t5_block(t, &q, &k, (int32_t *)o.fill));
done:
    PyMem_Free(block);
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

static PyTypeObject T5TemplateType; /* below */

static PyObject *t5_body(HotTemplate *t, const Span *sp, const Http *http)
{
    return t5_answer((T5Template *)t, &sp[0], &sp[1], http);
}

static PyObject *t5_v2_json(HotTemplate *self, const Span *sp, const Py_ssize_t *want, const Http *http)
{
    T5Template *t = (T5Template *)self;
    (void)want;
    if (!t->json_parts || !t->json_flat) Py_RETURN_NONE;
    return t5_answer(t, &sp[0], &sp[1], http);
}

static void t5_limits(const HotTemplate *t, Py_ssize_t *groups, Py_ssize_t *itemsize, Py_ssize_t *max_bytes)
{
    *groups = 1;
    *itemsize = 4;
    *max_bytes = ((const T5Template *)t)->max_bytes;
}

static int t5_block_into(const HotTemplate *t, const Sel *q, const Sel *k, char *fill)
{
    return t5_block((const T5Template *)t, q, k, (int32_t *)fill);
}

const struct hot_ops hot_t5_ops = {
    .kind = "t5",
    .name = "T5Template",
    .type = &T5TemplateType,
    .dims = 2,
    .v1 = t5_body,
    .v1_json = t5_body, /* t5_answer writes either */
    .v2_json = t5_v2_json,
    .block_limits = t5_limits,
    .block_into = t5_block_into,
};

PyDoc_STRVAR(enable_json_doc, "enable_json(parts, flat=False)\n--\n\n"
             "Answer JSON too: parts, (before, after) the block's text in the full path's JSON answer;\n"
             "None: JSON is the full path's again. flat: the block as one flat list (a v2 JSON output's data).");

static PyObject *enable_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    T5Template *t = (T5Template *)self;
    PyObject *parts;
    int flat;
    if (hot_json_parts(args, nargs, &parts, &flat) < 0) return NULL;
    Py_XSETREF(t->json_parts, Py_XNewRef(parts));
    t->json_flat = flat;
    Py_RETURN_NONE;
}

/* T5Template's own methods (those of every template are hot_TemplateType's, inherited) */
static PyMethodDef t5_methods[] = {
    {"enable_json", (PyCFunction)(void (*)(void))enable_json, METH_FASTCALL, enable_json_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject T5TemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.T5Template",
    .tp_basicsize = sizeof(T5Template),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A t5-buckets spec's mapped lookup table and response layout (see hot_t5.c).",
    .tp_new = hot_template_new,
    .tp_init = (initproc)T5Template_init,
    .tp_base = &hot_TemplateType,
    .tp_methods = t5_methods,
    .tp_dealloc = (destructor)T5Template_dealloc,
};
