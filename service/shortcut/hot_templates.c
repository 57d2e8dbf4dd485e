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
#include <stdlib.h> /* free: the JSON texts (hot_json.c) */

#define HEADS_CACHED 4096 /* headers per template; a full cache starts over */

/* ---- what templates keep: JSON texts and computed rows, within one budget ------------------- */

static RowsTemplate *keepers; /* the templates keeping anything */
static Py_ssize_t kept;       /* their bytes */

void hot_keep_drop(RowsTemplate *t)
{
    hot_json_clear(t);
    if (t->texts) {
        free(t->texts);
        t->texts = NULL;
        hot_unkeep(t, t->narr * t->text_rows * (Py_ssize_t)sizeof(char *));
    }
    if (t->grown) {
        for (Py_ssize_t i = 0; i < GROWN_ROWS; i++) free(t->grown[i]);
        free(t->grown);
        t->grown = NULL;
        hot_unkeep(t, t->grown_bytes);
        t->grown_bytes = 0;
    }
    if (!t->keeping) return;
    if (t->keep_prev) t->keep_prev->keep_next = t->keep_next;
    else keepers = t->keep_next;
    if (t->keep_next) t->keep_next->keep_prev = t->keep_prev;
    t->keeping = 0;
}

int hot_keep(RowsTemplate *t, Py_ssize_t bytes)
{
    if (bytes > hot_cfg.keep_bytes) return 0;
    if (kept + bytes > hot_cfg.keep_bytes) {
        while (keepers) hot_keep_drop(keepers);
    }
    kept += bytes;
    if (t && !t->keeping) {
        t->keeping = 1;
        t->keep_prev = NULL;
        t->keep_next = keepers;
        if (keepers) keepers->keep_prev = t;
        keepers = t;
    }
    return 1;
}

void hot_unkeep(RowsTemplate *t, Py_ssize_t bytes)
{
    (void)t;
    kept -= bytes;
}

PyDoc_STRVAR(kept_doc, "kept() -> int\n--\n\nBytes all templates keep (JSON texts, computed rows).");

static PyObject *kept_bytes(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromSsize_t(kept);
}

static void RowsTemplate_dealloc(RowsTemplate *t)
{
    hot_keep_drop(t);
    for (int i = 0; i < t->narr; i++) PyBuffer_Release(&t->arr[i]);
    PyMem_Free(t->runs);
    PyMem_Free(t->idx);
    PyMem_Free(t->col_axis);
    PyMem_Free(t->freqs);
    PyMem_Free(t->pmap);
    PyMem_Free(t->smap);
    PyMem_Free(t->pruns);
    Py_XDECREF(t->json_parts);
    Py_XDECREF(t->zero_text);
    Py_XDECREF(t->text_for);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
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

static int once(int initialised)
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
    PyObject *v = b < 0 ? Py_BuildValue("(O(n))", t, a) : Py_BuildValue("(O(nn))", t, a, b);
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
    PyObject *v = Py_BuildValue("(OOO)", t, Py_None, rows);
    if (!v) return -1;
    int rc = PyDict_SetItem(d, MISSING, v);
    Py_DECREF(v);
    return rc;
}

PyDoc_STRVAR(missing_doc, "missing() -> (template, shape) | (template, None, rows) | None\n--\n\n"
             "What this thread's last answer lacked (it returned NotImplemented), forgotten as it is\n"
             "returned: a header (template.header_for(*shape) computes it, template.set_header(shape,\n"
             "header) keeps it), or JSON texts of stored rows [(array, row), ...] (template.text_for(array,\n"
             "row) renders one, template.set_text(array, row, text) keeps it).");

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

static PyObject *get_text_for(PyObject *t, void *closure)
{
    (void)closure;
    PyObject *f = ((RowsTemplate *)t)->text_for;
    if (!f) Py_RETURN_NONE;
    Py_INCREF(f);
    return f;
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

/* The kinds, as HOT_KINDS registers them. */
#define HOT_KIND_OPS(k) &hot_##k##_ops,
static const struct hot_ops *const kinds[] = {HOT_KINDS(HOT_KIND_OPS)};
#define NKINDS (sizeof kinds / sizeof *kinds)

/* declared, and described, in hot.h */
PyObject *hot_template_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const struct hot_ops *ops = NULL;
    for (size_t i = 0; i < NKINDS && !ops; i++)
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

static PyGetSetDef rows_getset[] = {
    {"text_for", get_text_for, NULL, "(array, row) -> the stored row's JSON text (enable_json's), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- RowsTemplate ----------------------------------------------------------------------- */

/* Item j of sequence `fast` as an int in [lo, hi), or -2 with an error set. */
static Py_ssize_t item_in(PyObject *fast, Py_ssize_t j, Py_ssize_t lo, Py_ssize_t hi, const char *what)
{
    Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, j));
    if (c == -1 && PyErr_Occurred()) return -2;
    if (c >= lo && c < hi) return c;
    PyErr_Format(PyExc_ValueError, "%s: an item outside %zd .. %zd", what, lo, hi - 1);
    return -2;
}

/* colmap (output column -> stored column, -1: zero) as runs of consecutive columns of one axis
 * (axes: each column's, a sequence as long, or NULL: all 0). */
static int make_runs(RowsTemplate *t, PyObject *colmap, PyObject *axes)
{
    PyObject *fast = PySequence_Fast(colmap, "colmap: want a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t w = PySequence_Fast_GET_SIZE(fast);
    int bad = w < 1 || (axes && PySequence_Fast_GET_SIZE(axes) != w);
    if (bad || !(t->runs = PyMem_Malloc((size_t)w * sizeof(Run)))) {
        Py_DECREF(fast);
        if (bad) PyErr_SetString(PyExc_ValueError, "colmap: empty, or not one axis per column");
        else PyErr_NoMemory();
        return -1;
    }
    t->nruns = 0;
    int zeros = 0;
    for (Py_ssize_t j = 0; j < w; j++) {
        Py_ssize_t c = item_in(fast, j, -1, t->src_width, "colmap");
        Py_ssize_t a = axes ? item_in(axes, j, 0, t->naxes, "axes") : 0;
        if (c == -2 || a == -2) {
            Py_DECREF(fast);
            return -1;
        }
        if (c < 0) zeros = 1;
        Run *last = t->nruns ? &t->runs[t->nruns - 1] : NULL;
        if (last && last->axis == a &&
            ((c < 0 && last->src < 0) || (c >= 0 && last->src >= 0 && c == last->src + last->len)))
            last->len++;
        else
            t->runs[t->nruns++] = (Run){j, c, 1, a};
    }
    Py_DECREF(fast);
    t->width = w;
    if (!zeros && 4 * t->nruns > w && t->naxes > 1) {   /* short runs of several axes: column by column */
        if (!(t->idx = PyMem_Malloc((size_t)w * sizeof(int32_t))) || !(t->col_axis = PyMem_Malloc((size_t)w))) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++)
            for (Py_ssize_t k = 0; k < t->runs[r].len; k++) {
                t->idx[t->runs[r].dst + k] = (int32_t)(t->runs[r].src + k);
                t->col_axis[t->runs[r].dst + k] = (uint8_t)t->runs[r].axis;
            }
        t->zip[0] = -1;
    } else if (!zeros && 4 * t->nruns > w) {
        if (!(t->idx = PyMem_Malloc((size_t)w * sizeof(int32_t)))) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++)
            for (Py_ssize_t k = 0; k < t->runs[r].len; k++)
                t->idx[t->runs[r].dst + k] = (int32_t)(t->runs[r].src + k);
        hot_zip_of(t->zip, t->idx, w);
    }
    return 0;
}

/* declared, and described, in hot.h */
void hot_zip_of(Py_ssize_t zip[2], const int32_t *idx, Py_ssize_t w)
{
    zip[0] = idx && w >= 2 ? idx[0] : -1;
    zip[1] = idx && w >= 2 ? idx[1] : -1;
    for (Py_ssize_t j = 0; j < w && zip[0] >= 0; j++)
        if (idx[j] != zip[j & 1] + j / 2) zip[0] = -1;
}

/* past = (freqs, scale, dtype, maps, row_limit): how rows past the table are computed (hot.h). */
static int set_past(RowsTemplate *t, PyObject *past)
{
    PyObject *of, *odt, *maps;
    double scale;
    long long row_limit;
    Py_buffer b;
    const NativeApi *api = hot_cfg.kernels;
    if (!PyArg_ParseTuple(past, "OdOO!L:past", &of, &scale, &odt, &PyTuple_Type, &maps, &row_limit)) return -1;
    if (!api) return 0; /* configured without the engine's kernels: rows past the table are declined */
    int dt = api->dtype_code(odt);
    if (dt < 0) return -1;
    if (api->itemsize(dt) != t->itemsize || PyTuple_GET_SIZE(maps) != t->narr || row_limit < t->length) {
        PyErr_SetString(PyExc_ValueError, "past: want the arrays' dtype, one map per stored array and row_limit >= length");
        return -1;
    }
    if (PyObject_GetBuffer(of, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    int ok = b.ndim == 1 && b.itemsize == 8 && b.format && strcmp(b.format, "d") == 0 && b.shape[0] >= 1;
    t->nfreq = ok ? b.shape[0] : 0;
    t->freqs = ok ? PyMem_Malloc((size_t)b.len) : NULL;
    if (t->freqs) memcpy(t->freqs, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (!ok) PyErr_SetString(PyExc_ValueError, "past: freqs must be a non-empty 1-d float64 array");
    if (!t->freqs) return ok ? (PyErr_NoMemory(), -1) : -1;
    if (!(t->pmap = PyMem_Malloc((size_t)t->narr * (size_t)t->width * sizeof(int32_t))) ||
        !(t->smap = PyMem_Malloc((size_t)t->narr * (size_t)t->src_width * sizeof(int32_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int a = 0; a < t->narr; a++) {   /* the stored row's items, then the output row's through the runs */
        int32_t *sm = t->smap + (size_t)a * (size_t)t->src_width, *m = t->pmap + (size_t)a * (size_t)t->width;
        PyObject *fast = PySequence_Fast(PyTuple_GET_ITEM(maps, a), "past: a map is a sequence of ints");
        if (!fast) return -1;
        int bad = PySequence_Fast_GET_SIZE(fast) != t->src_width;
        for (Py_ssize_t c = 0; !bad && c < t->src_width; c++) {
            Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, c));
            bad = i < 0 || i >= 2 * t->nfreq;   /* an index into [cos | sin] */
            sm[c] = (int32_t)i;
        }
        Py_DECREF(fast);
        for (Py_ssize_t c = 0; !bad && t->naxes > 1 && c < t->src_width; c++)
            bad = t->src_width != t->nfreq || sm[c] != a * t->nfreq + c;   /* hot_axes.c reads computed rows so */
        if (bad) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "past: a map has one item of [cos | sin] per stored column "
                                                  "(with axes: array a's column c is item a * len(freqs) + c)");
            return -1;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++)
            for (Py_ssize_t k = 0; k < t->runs[r].len; k++)
                m[t->runs[r].dst + k] = t->runs[r].src < 0 ? -1 : sm[t->runs[r].src + k];
    }
    if (!(t->pruns = PyMem_Malloc((size_t)t->narr * (size_t)t->width * sizeof(Run)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int a = 0; a < t->narr; a++) {   /* each map as runs, as make_runs does the column map */
        Run *runs = t->pruns + (size_t)a * (size_t)t->width;
        const int32_t *m = t->pmap + (size_t)a * (size_t)t->width;
        Py_ssize_t n = 0;
        for (Py_ssize_t j = 0; j < t->width; j++) {
            Run *last = n ? &runs[n - 1] : NULL;
            if (last && ((m[j] < 0 && last->src < 0) || (m[j] >= 0 && last->src >= 0 && m[j] == last->src + last->len)))
                last->len++;
            else
                runs[n++] = (Run){j, m[j], 1, 0};
        }
        t->npruns[a] = n;
        t->pgather[a] = n == t->width;
        for (Py_ssize_t j = 0; j < t->width; j++) t->pgather[a] &= m[j] >= 0;
        hot_zip_of(t->pzip[a], t->pgather[a] ? m : NULL, t->width);
    }
    t->scale = scale;
    t->dt = dt;
    t->row_limit = row_limit;
    t->text_rows = t->length + (row_limit - t->length < GROWN_ROWS ? row_limit - t->length : GROWN_ROWS);
    return 0;
}

static int RowsTemplate_init(RowsTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"arrays", "colmap", "offset", "max_rows", "lists_only", "header_for", "tail", "past",
                             "axes", NULL};
    PyObject *arrays, *colmap, *hf, *tail, *past = Py_None, *oaxes = Py_None, *axes = NULL;
    Py_ssize_t offset, max_rows;
    int lists_only;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OnnpOO!|OO:RowsTemplate", kwlist, &PyTuple_Type, &arrays, &colmap,
                                     &offset, &max_rows, &lists_only, &hf, &PyBytes_Type, &tail, &past, &oaxes))
        return -1;
    if (!hot_configured() || hot_want_callable(hf) || once(t->narr != 0)) return -1;
    Py_ssize_t na = PyTuple_GET_SIZE(arrays);
    if (na < 1 || na > 2 || offset < 0 || max_rows < 1 || max_rows > hot_cfg.max_rows) {
        PyErr_Format(PyExc_ValueError, "want 1 or 2 arrays, offset >= 0 and 1 <= max_rows <= %zd (configured)",
                     hot_cfg.max_rows);
        return -1;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        if (hot_get_table(PyTuple_GET_ITEM(arrays, i), &t->arr[i]) < 0) return -1;
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
    t->naxes = 1;
    if (oaxes != Py_None) {   /* (k, each column's axis): lists only, rows inside the table */
        PyObject *cols;
        if (!PyArg_ParseTuple(oaxes, "iO:axes", &t->naxes, &cols)) return -1;
        if (t->naxes < 2 || t->naxes > MAX_AXES || !lists_only) {
            PyErr_Format(PyExc_ValueError, "axes: want 2 to %d axes, and lists_only", MAX_AXES);
            return -1;
        }
        if (!(axes = PySequence_Fast(cols, "axes: want (k, a sequence of ints)"))) return -1;
    }
    int runs = make_runs(t, colmap, axes);
    Py_XDECREF(axes);
    if (runs < 0 || !(t->heads = PyDict_New())) return -1;
    t->text_rows = t->length;
    if (past != Py_None && (!PyTuple_Check(past) || set_past(t, past) < 0)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "past: want a tuple or None");
        return -1;
    }
    t->offset = offset;
    t->max_rows = max_rows;
    t->lists_only = lists_only;
    return hot_hold(&t->header_for, hf, &t->tail, tail);
}

PyTypeObject hot_RowsTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.RowsTemplate",
    .tp_basicsize = sizeof(RowsTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated RoPE or sinusoidal spec's tables, column map and response layout.",
    .tp_new = hot_template_new,
    .tp_init = (initproc)RowsTemplate_init,
    .tp_base = &hot_TemplateType,
    .tp_methods = hot_json_methods,
    .tp_getset = rows_getset,
    .tp_dealloc = (destructor)RowsTemplate_dealloc,
};

/* ---- AlibiTemplate ---------------------------------------------------------------------- */

static void AlibiTemplate_dealloc(AlibiTemplate *t)
{
    PyMem_Free(t->slopes);
    PyMem_Free(t->rows);
    if (t->have_dist) PyBuffer_Release(&t->dist);
    hot_alibi_json_free(t);
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
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OppOO!nn|OOU:AlibiTemplate", kwlist, &os, &sym, &mask,
                                     &hf, &PyBytes_Type, &tail, &max_n, &max_bytes, &odist, &orows, &odt))
        return -1;
    if (!hot_configured() || hot_want_callable(hf) || once(t->slopes != NULL)) return -1;
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

PyTypeObject hot_AlibiTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.AlibiTemplate",
    .tp_basicsize = sizeof(AlibiTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated float32 ALiBi spec's slopes and response layout (see the module doc).",
    .tp_new = hot_template_new,
    .tp_init = (initproc)AlibiTemplate_init,
    .tp_base = &hot_TemplateType,
    .tp_methods = hot_alibi_methods,
    .tp_dealloc = (destructor)AlibiTemplate_dealloc,
};

PyMethodDef hot_templates_methods[] = {
    {"missing", missing, METH_NOARGS, missing_doc},
    {"kept", kept_bytes, METH_NOARGS, kept_doc},
    {NULL, NULL, 0, NULL},
};

int hot_templates_ready(PyObject *m)
{
    if (!MISSING && !(MISSING = PyUnicode_InternFromString("posenc.service.shortcut._hot.missing"))) return -1;
    if (PyType_Ready(&hot_TemplateType) < 0) return -1;
    Py_INCREF(&hot_TemplateType);
    if (PyModule_AddObject(m, "Template", (PyObject *)&hot_TemplateType) < 0) {
        Py_DECREF(&hot_TemplateType);
        return -1;
    }
    for (size_t i = 0; i < NKINDS; i++) {
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
