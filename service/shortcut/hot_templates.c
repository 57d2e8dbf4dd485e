/* service/shortcut/hot_templates.c -- the templates: RowsTemplate and AlibiTemplate (what a
 * learnt spec answers from; see _hot.c), and their caches of safetensors headers.
 *
 * A header depends on the answer's shape only, so each template caches one per shape. The code
 * here never calls Python: on a miss an answer returns NotImplemented and notes (template,
 * shape) for this thread, missing() hands that to templates.py, which computes the header with
 * the template's header_for (the family's function) and stores it with set_header() before it
 * asks again.
 */
#include "hot.h"

#define HEADS_CACHED 4096 /* headers per template; a full cache starts over */

/* ---- what templates keep: JSON texts and computed rows, within one budget ------------------- */

static HotKeeper *keepers;    /* the templates keeping anything */
static Py_ssize_t kept;       /* their bytes */

/* declared, and described, in hot.h */
void hot_keep_leave(HotKeeper *k)
{
    if (!k->keeping) return;
    if (k->prev) k->prev->next = k->next;
    else keepers = k->next;
    if (k->next) k->next->prev = k->prev;
    k->keeping = 0;
}

/* declared, and described, in hot.h */
int hot_keep(HotKeeper *k, Py_ssize_t bytes)
{
    if (bytes > hot_cfg.keep_bytes) return 0;
    if (kept + bytes > hot_cfg.keep_bytes) {
        while (keepers) keepers->drop(keepers);   /* each leaves the list */
    }
    kept += bytes;
    if (k && !k->keeping) {
        k->keeping = 1;
        k->prev = NULL;
        k->next = keepers;
        if (keepers) keepers->prev = k;
        keepers = k;
    }
    return 1;
}

void hot_unkeep(HotKeeper *k, Py_ssize_t bytes)
{
    (void)k;
    kept -= bytes;
}

PyDoc_STRVAR(kept_doc, "kept() -> int\n--\n\nBytes all templates keep (JSON texts, computed rows).");

static PyObject *kept_bytes(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromSsize_t(kept);
}

int hot_get_table(PyObject *o, Py_buffer *b)
{
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->ndim != 2 || (b->itemsize != 2 && b->itemsize != 4)) {
        PyErr_SetString(PyExc_ValueError, "arrays: want 2-d arrays of 2- or 4-byte items");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

int hot_once(int initialised)
{
    if (initialised) PyErr_SetString(PyExc_RuntimeError, "a template is initialised once");
    return initialised;
}

int hot_hold(PyObject **header_for, PyObject *hf, PyObject **tail, PyObject *tl)
{
    Py_INCREF(hf);
    *header_for = hf;
    Py_INCREF(tl);
    *tail = tl;
    return 0;
}

int hot_keywords_only(PyObject *args, const char *type_name)
{
    if (PyTuple_GET_SIZE(args) == 0) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes keyword arguments only (got %zd positional)", type_name,
                 PyTuple_GET_SIZE(args));
    return -1;
}

int hot_want_callable(PyObject *f)
{
    if (PyCallable_Check(f)) return 0;
    PyErr_SetString(PyExc_TypeError, "header_for must be callable");
    return -1;
}

/* ---- the header caches ---------------------------------------------------------------- */

static PyObject *MISSING; /* the key of this thread's missing header in its thread-state dict */

static PyObject *head_key(Py_ssize_t a, Py_ssize_t b)
{
    return PyLong_FromLongLong(b < 0 ? (long long)a : ((long long)a << 32) | (long long)b);
}

/* Notes (t, shape) as this thread's missing header: a dict per thread, so that two threads
 * missing at once each fetch their own. */
static int note_missing(PyObject *t, Py_ssize_t a, Py_ssize_t b)
{
    PyObject *d = PyThreadState_GetDict();
    if (!d) {
        PyErr_SetString(PyExc_RuntimeError, "_hot: no thread state dict");
        return -1;
    }
    PyObject *v = b < 0 ? Py_BuildValue("(iO(n))", (int)HOT_MISS_HEADER, t, a)
                        : Py_BuildValue("(iO(nn))", (int)HOT_MISS_HEADER, t, a, b);
    if (!v) return -1;
    int rc = PyDict_SetItem(d, MISSING, v);
    Py_DECREF(v);
    return rc;
}

int hot_header(PyObject *t, PyObject *cache, Py_ssize_t a, Py_ssize_t b, PyObject **out)
{
    PyObject *key = head_key(a, b);
    if (!key) return -1;
    PyObject *h = PyDict_GetItemWithError(cache, key);
    Py_DECREF(key);
    if (h) {
        Py_INCREF(h);
        *out = h;
        return 1;
    }
    if (PyErr_Occurred()) return -1;
    return note_missing(t, a, b) < 0 ? -1 : 0;
}

int hot_note_missing_rows(PyObject *t, PyObject *rows)
{
    PyObject *d = PyThreadState_GetDict();
    if (!d) {
        PyErr_SetString(PyExc_RuntimeError, "_hot: no thread state dict");
        return -1;
    }
    PyObject *v = Py_BuildValue("(iOO)", (int)HOT_MISS_TEXTS, t, rows);
    if (!v) return -1;
    int rc = PyDict_SetItem(d, MISSING, v);
    Py_DECREF(v);
    return rc;
}

PyDoc_STRVAR(missing_doc, "missing() -> (what, template, detail) | None\n--\n\n"
             "What this thread's last answer lacked (it returned NotImplemented), forgotten as it is\n"
             "returned; `what` indexes MISSES: 'header', detail the answer's shape\n"
             "(template.header_for(*shape) computes it, template.set_header(shape, header) keeps it), or\n"
             "'texts', detail the stored rows [(array, row), ...] whose JSON texts it lacked\n"
             "(template.text_for(array, row) renders one, template.set_text(array, row, text) keeps it).");

static PyObject *missing(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *d = PyThreadState_GetDict();
    PyObject *v = d ? PyDict_GetItemWithError(d, MISSING) : NULL;
    if (!v) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(v);
    if (PyDict_DelItem(d, MISSING) < 0) Py_CLEAR(v);
    return v;
}

/* ---- a route's entry (a template, or a tuple holding one) looked up ----------------------- */

/* declared, and described, in hot.h */
PyObject *hot_entry(PyObject *entries, PyObject *key)
{
    if (!key) return NULL;
    PyObject *e = PyDict_GetItemWithError(entries, key);
    Py_DECREF(key);
    Py_XINCREF(e);
    return e;
}

/* ---- the start of a block answer (AlibiTemplate, T5Template) -------------------------------- */

/* declared, and described, in hot.h */
int64_t *hot_block_positions(const Sel *q, const Sel *k)
{
    int64_t *pos = PyMem_Malloc((size_t)(q->n + k->n) * sizeof(int64_t));
    if (!pos) return NULL;
    for (Py_ssize_t a = 0; a < q->n; a++) pos[a] = hot_sel_at(q, a);
    for (Py_ssize_t b = 0; b < k->n; b++) pos[q->n + b] = hot_sel_at(k, b);
    return pos;
}

/* declared, and described, in hot.h */
int hot_block_start(PyObject *t, PyObject *heads, const Span *sq, const Span *sk, Py_ssize_t max_n, Py_ssize_t groups,
                    Py_ssize_t cells_max, Sel *q, Sel *k, PyObject **head, PyObject **out)
{
    int rc = hot_parse_sel(sq, max_n, q);
    if (rc == 0) rc = hot_parse_sel(sk, max_n, k);
    if (rc == -2) return -1;
    /* each factor checked so that nothing overflows */
    if (rc < 0 || cells_max < 1 || q->n > cells_max / groups || k->n > cells_max / groups / q->n) {
        *out = Py_None;
        Py_INCREF(*out);
        return 0;
    }
    if (!heads) return 1;
    int got = hot_header(t, heads, q->n, k->n, head);
    if (got == 0) {
        *out = Py_NotImplemented;
        Py_INCREF(*out);
    }
    return got;
}

PyDoc_STRVAR(set_header_doc, "set_header(shape, header)\n--\n\n"
             "Cache the safetensors header (bytes) of answers of shape: (n,) rows for a RowsTemplate or\n"
             "GridTemplate, (nq, nk) for an AlibiTemplate or T5Template.");

static PyObject *set_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t dims = ((HotTemplate *)self)->ops->dims, v[2] = {0, -1};
    PyObject *cache = ((HotTemplate *)self)->heads;
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != dims || !PyBytes_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "set_header(shape: tuple of %zd ints, header: bytes)", dims);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < dims; i++) {
        v[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[0], i));
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
        if (v[i] < 0 || v[i] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "set_header: a dimension outside 0 .. 2**31 - 1");
            return NULL;
        }
    }
    if (!cache) {
        PyErr_SetString(PyExc_RuntimeError, "set_header: the template is not initialised");
        return NULL;
    }
    PyObject *key = head_key(v[0], v[1]);
    if (!key) return NULL;
    if (PyDict_GET_SIZE(cache) >= HEADS_CACHED) PyDict_Clear(cache);
    int rc = PyDict_SetItem(cache, key, args[1]);
    Py_DECREF(key);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *get_header_for(PyObject *t, void *closure)
{
    (void)closure;
    PyObject *f = ((HotTemplate *)t)->header_for;
    if (!f) Py_RETURN_NONE;
    Py_INCREF(f);
    return f;
}

static PyObject *get_kind(PyObject *t, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(((HotTemplate *)t)->ops->kind);
}

/* The kinds registered (hot_templates_ready, from _hot.c's HOT_KINDS). */
static const struct hot_ops *const *kinds;
static size_t nkinds;

/* declared, and described, in hot.h */
PyObject *hot_template_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const struct hot_ops *ops = NULL;
    for (size_t i = 0; i < nkinds && !ops; i++)
        if (kinds[i]->type == type) ops = kinds[i];
    if (!ops) {
        PyErr_Format(PyExc_TypeError, "%s is no kind of template", type->tp_name);
        return NULL;
    }
    PyObject *t = PyType_GenericNew(type, args, kw);
    if (t) ((HotTemplate *)t)->ops = ops;
    return t;
}

/* declared, and described, in hot.h */
int hot_json_parts(PyObject *const *args, Py_ssize_t nargs, PyObject **parts, int *flat)
{
    PyObject *p = nargs >= 1 ? args[0] : NULL;
    *flat = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (*flat < 0) return -1;
    if (nargs < 1 || nargs > 2 ||
        (p != Py_None && (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(p, 0)) ||
                          !PyBytes_Check(PyTuple_GET_ITEM(p, 1))))) {
        PyErr_SetString(PyExc_TypeError, "enable_json(parts: (bytes, bytes) | None, flat: bool = False)");
        return -1;
    }
    *parts = p == Py_None ? NULL : p;
    return 0;
}

/* What every template type has: set_header(), header_for and kind, as hot_TemplateType's, the base of
 * every template type. */
static PyMethodDef template_methods[] = {
    {"set_header", (PyCFunction)(void (*)(void))set_header, METH_FASTCALL, set_header_doc},
    {NULL, NULL, 0, NULL},
};

#define KIND_DOC "the template's kind: \"rows\", \"grid\", \"alibi\" or \"t5\" (what it answers, see hot.h)"
static PyGetSetDef template_getset[] = {
    {"header_for", get_header_for, NULL, "the family's function of an answer's shape to its header", NULL},
    {"kind", get_kind, NULL, KIND_DOC, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject hot_TemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.Template",
    .tp_basicsize = sizeof(HotTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The base of every kind of template (made by its kind's type only): set_header(), header_for, kind.",
    .tp_methods = template_methods,
    .tp_getset = template_getset,
};

PyMethodDef hot_templates_methods[] = {
    {"missing", missing, METH_NOARGS, missing_doc},
    {"kept", kept_bytes, METH_NOARGS, kept_doc},
    {NULL, NULL, 0, NULL},
};

int hot_templates_ready(PyObject *m, const struct hot_ops *const *registered, size_t n)
{
    kinds = registered;
    nkinds = n;
    if (!MISSING && !(MISSING = PyUnicode_InternFromString("posenc.service.shortcut._hot.missing"))) return -1;
    if (PyType_Ready(&hot_TemplateType) < 0) return -1;
    Py_INCREF(&hot_TemplateType);
    if (PyModule_AddObject(m, "Template", (PyObject *)&hot_TemplateType) < 0) {
        Py_DECREF(&hot_TemplateType);
        return -1;
    }
    for (size_t i = 0; i < nkinds; i++) {
        PyTypeObject *type = kinds[i]->type;
        if (PyType_Ready(type) < 0) return -1;
        Py_INCREF(type);
        if (PyModule_AddObject(m, kinds[i]->name, (PyObject *)type) < 0) {
            Py_DECREF(type);
            return -1;
        }
    }
    return 0;
}
