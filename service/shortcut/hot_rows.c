/* service/shortcut/hot_rows.c -- the rows kind: RowsTemplate (a validated RoPE or sinusoidal spec:
 * shared tables, a column map, the response layout, and how rows past the table are computed),
 * what it keeps (hot_keep's budget), and its answers to every route, through its ops. Its rows are
 * copied by hot_rows_copy.c, its JSON written by hot_json.c, its per-axis rows by hot_axes.c.
 */
#include "hot_rows.h"

#include <stddef.h> /* offsetof */
#include <stdlib.h> /* free: the kept texts and rows */

/* ---- what it keeps ---------------------------------------------------------------------- */

/* Frees t's kept texts and rows, and takes it off the keepers' list. */
static void keep_drop(RowsTemplate *t)
{
    hot_json_clear(t);
    if (t->texts) {
        free(t->texts);
        t->texts = NULL;
        hot_unkeep(&t->keep, t->narr * t->text_rows * (Py_ssize_t)sizeof(char *));
    }
    if (t->grown) {
        for (Py_ssize_t i = 0; i < GROWN_ROWS; i++) free(t->grown[i]);
        free(t->grown);
        t->grown = NULL;
        hot_unkeep(&t->keep, t->grown_bytes);
        t->grown_bytes = 0;
    }
    hot_keep_leave(&t->keep);
}

/* RowsTemplate's keeper's drop (hot_keep): every text and row it keeps, freed. */
static void drop_kept(HotKeeper *k)
{
    keep_drop((RowsTemplate *)(void *)((char *)k - offsetof(RowsTemplate, keep)));
}

static void RowsTemplate_dealloc(RowsTemplate *t)
{
    keep_drop(t);
    for (int i = 0; i < t->narr; i++) PyBuffer_Release(&t->arr[i]);
    row_map_free(&t->map);
    row_map_free(&t->past[0]);
    row_map_free(&t->past[1]);
    PyMem_Free(t->col_axis);
    PyMem_Free(t->freqs);
    PyMem_Free(t->smap);
    Py_XDECREF(t->json_parts);
    Py_XDECREF(t->zero_text);
    Py_XDECREF(t->text_for);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}



static PyObject *get_text_for(PyObject *t, void *closure)
{
    (void)closure;
    PyObject *f = ((RowsTemplate *)t)->text_for;
    if (!f) Py_RETURN_NONE;
    Py_INCREF(f);
    return f;
}

/* RowsTemplate's own (those of every template are hot_TemplateType's) */
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

/* colmap (output column -> stored column, -1: zero) analysed by the one row gather (row_gather.h),
 * with each column's axis (axes: a sequence as long, or NULL: all 0). */
static int make_map(RowsTemplate *t, PyObject *colmap, PyObject *axes)
{
    PyObject *fast = PySequence_Fast(colmap, "colmap: want a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t w = PySequence_Fast_GET_SIZE(fast);
    int32_t *cols = NULL;
    int rc = -1;
    if (w < 1 || (axes && PySequence_Fast_GET_SIZE(axes) != w)) {
        PyErr_SetString(PyExc_ValueError, "colmap: empty, or not one axis per column");
        goto out;
    }
    if (!(cols = PyMem_Malloc((size_t)w * sizeof(int32_t))) || (axes && !(t->col_axis = PyMem_Malloc((size_t)w)))) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t j = 0; j < w; j++) {
        Py_ssize_t c = item_in(fast, j, -1, t->src_width, "colmap");
        Py_ssize_t x = axes ? item_in(axes, j, 0, t->naxes, "axes") : 0;
        if (c == -2 || x == -2) goto out;
        cols[j] = (int32_t)c;
        if (axes) t->col_axis[j] = (uint8_t)x;
    }
    if (row_map_build(&t->map, cols, t->col_axis, w) < 0) {
        PyErr_NoMemory();
        goto out;
    }
    if (!t->map.idx) {   /* hot_axes.c reads each column's axis only with a gather; runs carry theirs */
        PyMem_Free(t->col_axis);
        t->col_axis = NULL;
    }
    rc = 0;
out:
    PyMem_Free(cols);
    Py_DECREF(fast);
    return rc;
}

/* o's attributes names[0 .. n) as new references into out (NULL-terminated names): 0, or -1 with
 * the AttributeError set (out cleared). A plan and its past are read by name, never by position. */
static int attrs_of(PyObject *o, const char *const *names, PyObject **out)
{
    int i = 0;
    for (; names[i]; i++)
        if (!(out[i] = PyObject_GetAttrString(o, names[i]))) {
            while (i-- > 0) Py_CLEAR(out[i]);
            return -1;
        }
    return 0;
}

static void attrs_clear(PyObject **a, int n)
{
    for (int i = 0; i < n; i++) Py_CLEAR(a[i]);
}

/* A past map (one item of [cos | sin] per stored column) of array a into sm: 0, or -1 set. */
static int past_map_of(RowsTemplate *t, int a, PyObject *map, int32_t *sm)
{
    PyObject *fast = PySequence_Fast(map, "past: a map is a sequence of ints");
    int bad = !fast || PySequence_Fast_GET_SIZE(fast) != t->src_width;
    for (Py_ssize_t c = 0; !bad && c < t->src_width; c++) {
        Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, c));
        bad = i < 0 || i >= 2 * t->nfreq;   /* an index into [cos | sin] */
        sm[c] = (int32_t)i;
    }
    Py_XDECREF(fast);
    for (Py_ssize_t c = 0; !bad && t->naxes > 1 && c < t->src_width; c++)
        bad = t->src_width != t->nfreq || sm[c] != a * t->nfreq + c;   /* hot_axes.c reads computed rows so */
    if (!bad) return 0;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "past: a map has one item of [cos | sin] per stored column "
                                          "(with axes: array a's column c is item a * len(freqs) + c)");
    return -1;
}

/* How rows past the table are computed (hot_rows.h), from plan.past's attributes: 0, or -1 set. */
static int set_past_of(RowsTemplate *t, PyObject *of, PyObject *oscale, PyObject *odt, PyObject *omaps,
                       PyObject *olimit)
{
    const NativeApi *api = hot_cfg.kernels;
    double scale = PyFloat_AsDouble(oscale);
    long long row_limit = PyLong_AsLongLong(olimit);
    if (PyErr_Occurred()) return -1;
    if (!api) return 0; /* configured without the engine's kernels: rows past the table are declined */
    int dt = api->dtype_code(odt);
    if (dt < 0) return -1;
    PyObject *maps = PySequence_Tuple(omaps);
    if (!maps) return -1;
    int32_t *m = NULL;
    Py_buffer b = {.buf = NULL};
    int rc = -1;
    if (api->itemsize(dt) != t->itemsize || PyTuple_GET_SIZE(maps) != t->narr || row_limit < t->length) {
        PyErr_SetString(PyExc_ValueError, "past: want the arrays' dtype, one map per stored array and row_limit >= length");
        goto out;
    }
    if (PyObject_GetBuffer(of, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto out;
    if (b.ndim != 1 || b.itemsize != 8 || !b.format || strcmp(b.format, "d") || b.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "past: freqs must be a non-empty 1-d float64 array");
        goto out;
    }
    t->nfreq = b.shape[0];
    if (!(t->freqs = PyMem_Malloc((size_t)b.len)) || !(m = PyMem_Malloc((size_t)t->map.width * sizeof(int32_t))) ||
        !(t->smap = PyMem_Malloc((size_t)t->narr * (size_t)t->src_width * sizeof(int32_t)))) {
        PyErr_NoMemory();
        goto out;
    }
    memcpy(t->freqs, b.buf, (size_t)b.len);
    for (int a = 0; a < t->narr; a++) {   /* the stored row's items, then the output row's through the runs */
        int32_t *sm = t->smap + (size_t)a * (size_t)t->src_width;
        if (past_map_of(t, a, PyTuple_GET_ITEM(maps, a), sm) < 0) goto out;
        for (Py_ssize_t r = 0; r < t->map.nruns; r++)
            for (Py_ssize_t k = 0; k < t->map.runs[r].len; k++)
                m[t->map.runs[r].dst + k] = t->map.runs[r].src < 0 ? -1 : sm[t->map.runs[r].src + k];
        if (row_map_build(&t->past[a], m, NULL, t->map.width) < 0) {
            PyErr_NoMemory();
            goto out;
        }
    }
    t->scale = scale;
    t->dt = dt;
    t->row_limit = row_limit;
    t->text_rows = t->length + (row_limit - t->length < GROWN_ROWS ? row_limit - t->length : GROWN_ROWS);
    rc = 0;
out:
    if (rc < 0) {   /* no rows past the table: freqs NULL declines them */
        PyMem_Free(t->freqs);
        t->freqs = NULL;
    }
    if (b.buf) PyBuffer_Release(&b);
    PyMem_Free(m);
    Py_DECREF(maps);
    return rc;
}

/* plan.past (engine/tables/base.py PastRows: freqs, scale, dtype, maps, row_limit): how rows past
 * the table are computed (hot_rows.h). */
static int set_past(RowsTemplate *t, PyObject *past)
{
    static const char *const names[] = {"freqs", "scale", "dtype", "maps", "row_limit", NULL};
    PyObject *p[5];
    if (attrs_of(past, names, p) < 0) return -1;
    int rc = set_past_of(t, p[0], p[1], p[2], p[3], p[4]);
    attrs_clear(p, 5);
    return rc;
}

/* RowsTemplate(*, plan, max_rows, lists_only, header_for, tail): plan is the family's row plan
 * (engine/tables/base.py RowPlan), read by its attributes' names: arrays, colmap, offset, past, axes
 * and naxes. */
static int RowsTemplate_init(RowsTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"plan", "max_rows", "lists_only", "header_for", "tail", NULL};
    static const char *const names[] = {"arrays", "colmap", "offset", "past", "axes", "naxes", NULL};
    PyObject *plan, *hf, *tail, *p[6], *axes = NULL;
    Py_ssize_t max_rows;
    int lists_only, rc = -1;
    if (hot_keywords_only(args, "RowsTemplate") < 0) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OnpOO!:RowsTemplate", kwlist, &plan, &max_rows, &lists_only, &hf,
                                     &PyBytes_Type, &tail))
        return -1;
    if (!hot_configured() || hot_want_callable(hf) || hot_once(t->narr != 0)) return -1;
    if (attrs_of(plan, names, p) < 0) return -1;
    PyObject *arrays = p[0];
    Py_ssize_t offset = PyLong_AsSsize_t(p[2]);
    t->naxes = PyLong_AsLong(p[5]);
    if (PyErr_Occurred()) goto out;
    t->keep.drop = drop_kept;
    Py_ssize_t na = PyTuple_Check(arrays) ? PyTuple_GET_SIZE(arrays) : 0;
    if (na < 1 || na > 2 || offset < 0 || max_rows < 1 || max_rows > hot_cfg.max_rows) {
        PyErr_Format(PyExc_ValueError, "want plan.arrays 1 or 2 arrays (a tuple), plan.offset >= 0 and 1 <= max_rows "
                     "<= %zd (configured)", hot_cfg.max_rows);
        goto out;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        if (hot_get_table(PyTuple_GET_ITEM(arrays, i), &t->arr[i]) < 0) goto out;
        t->narr++;
        if (t->arr[i].shape[0] != t->arr[0].shape[0] || t->arr[i].shape[1] != t->arr[0].shape[1] ||
            t->arr[i].itemsize != t->arr[0].itemsize) {
            PyErr_SetString(PyExc_ValueError, "arrays differ in shape or item size");
            goto out;
        }
    }
    t->length = t->arr[0].shape[0];
    t->src_width = t->arr[0].shape[1];
    t->itemsize = t->arr[0].itemsize;
    if (p[4] != Py_None) {   /* each column's axis, of naxes: lists only */
        if (t->naxes < 2 || t->naxes > MAX_AXES || !lists_only) {
            PyErr_Format(PyExc_ValueError, "axes: want 2 to %d axes (naxes), and lists_only", MAX_AXES);
            goto out;
        }
        if (!(axes = PySequence_Fast(p[4], "axes: want a sequence of ints"))) goto out;
    } else {
        t->naxes = 1;
    }
    if (make_map(t, p[1], axes) < 0 || !(t->heads = PyDict_New())) goto out;
    t->text_rows = t->length;
    if (p[3] != Py_None && set_past(t, p[3]) < 0) goto out;
    t->offset = offset;
    t->max_rows = max_rows;
    t->lists_only = lists_only;
    rc = hot_hold(&t->header_for, hf, &t->tail, tail);
out:
    Py_XDECREF(axes);
    attrs_clear(p, 6);
    return rc;
}

static PyTypeObject RowsTemplateType = {
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

/* ---- its answers: the routes call them through its ops ----------------------------------- */

/* RowsTemplate's /v1 safetensors answer (ops->v1) to selection sp[0]. */
static PyObject *rows_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    Sel rows = {.heap = NULL};
    PyObject *out = NULL;
    if (t->naxes > 1 || (t->lists_only && *sp->open != '[')) Py_RETURN_NONE;   /* per-axis: v1_axes only */
    int rc = hot_parse_sel(sp, t->max_rows, &rows);
    if (rc == -2) return NULL;
    if (rc < 0 || !hot_rows_answerable(t, rows.hi)) { /* past a table it computes no rows of: the full path's */
        hot_sel_free(&rows);
        Py_RETURN_NONE;
    }
    PyObject *head = NULL;
    int got = hot_header((PyObject *)t, t->heads, rows.n, -1, &head);
    if (got == 0) {
        out = Py_NotImplemented;
        Py_INCREF(out);
    } else if (got > 0) {
        Py_ssize_t block = rows.n * t->map.width * t->itemsize;
        Out o;
        int rc2 = hot_bytes_of(http, head, t->narr * block, t->tail, 0, &o);   /* copy_rows: any alignment */
        Py_DECREF(head);
        if (rc2 == 0) {
            char *slots[2] = {o.fill, o.fill + block};
            int over = hot_rows_into(slots, t, &rows, 1);
            out = hot_finish(&o);
            if (over) Py_CLEAR(out);
            if (over < 0) PyErr_NoMemory();
            else if (over > 0) {           /* a computed value overflows the dtype: the full path refuses it */
                out = Py_None;
                Py_INCREF(out);
            }
        }
    }
    hot_sel_free(&rows);
    return out;
}

/* RowsTemplate's /v1 JSON answer (ops->v1_json): hot_json.c's, of a template with enable_json(). */
static PyObject *rows_json_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    Sel rows = {.heap = NULL};
    if (t->naxes > 1 || (t->lists_only && *sp->open != '[') || !t->json_parts) Py_RETURN_NONE;
    int rc = hot_parse_sel(sp, t->max_rows, &rows);
    PyObject *out = rc == 0 ? hot_rows_json(t, &rows, http) : rc == -2 ? NULL : Py_NewRef(Py_None);
    hot_sel_free(&rows);
    return out;
}

/* RowsTemplate's per-axis lists (ops->v1_axes): hot_axes.c's. */
static PyObject *rows_axes_answer(HotTemplate *t, const Span *sp, const Http *http)
{
    return hot_axes_answer((RowsTemplate *)t, sp, http);
}

/* RowsTemplate's v2 JSON answer (ops->v2_json): its one list of want[0] positions. */
static PyObject *rows_v2_json(HotTemplate *self, const Span *sp, const Py_ssize_t *want, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    if (!t->json_parts || !t->json_flat || t->naxes > 1) Py_RETURN_NONE;
    Sel rows = {.heap = NULL};
    int rc = hot_parse_sel(&sp[0], want[0], &rows); /* a list: '[' */
    PyObject *out = rc == 0 ? hot_rows_json(t, &rows, http) : rc == -2 ? NULL : Py_NewRef(Py_None);
    hot_sel_free(&rows);
    return out;
}

static int rows_arrays(const HotTemplate *t) { return ((const RowsTemplate *)t)->narr; }

/* The bytes of one array's rows for n positions (k per row with per-axis positions). */
static Py_ssize_t row_bytes(const RowsTemplate *t, Py_ssize_t n)
{
    return n / t->naxes * t->map.width * t->itemsize; /* n <= a buffer's length / 4 and width * itemsize is small */
}

/* Raw positions (ops->raw_rows): 1 when all are rows of the table (into *rows), 0 when one is not,
 * -1 with an error set. */
static int rows_raw(HotTemplate *self, const char *src, Py_ssize_t len, Py_ssize_t isz, Sel *rows, Py_ssize_t *block)
{
    RowsTemplate *t = (RowsTemplate *)self;
    int rc = hot_raw_positions(src, len, isz, rows);
    if (rc <= 0) return rc;
    *block = row_bytes(t, rows->n);
    return rows->n % t->naxes == 0 && hot_rows_answerable(t, rows->hi);   /* per-axis: [k, n], axis after axis */
}

/* Each array's rows of positions `rows` (per-axis ones: hot_axes.c) into slots (ops->rows_into), as
 * hot_rows_into. */
static int rows_fill_into(char **slots, HotTemplate *self, const Sel *rows, int keep)
{
    RowsTemplate *t = (RowsTemplate *)self;
    return t->naxes > 1 ? hot_axes_rows_into(slots, t, rows) : hot_rows_into(slots, t, rows, keep);
}

const struct hot_ops hot_rows_ops = {
    .kind = "rows",
    .name = "RowsTemplate",
    .type = &RowsTemplateType,
    .dims = 1,
    .v1 = rows_answer,
    .v1_json = rows_json_answer,
    .v1_axes = rows_axes_answer,
    .v2_json = rows_v2_json,
    .arrays = rows_arrays,
    .raw_rows = rows_raw,
    .rows_into = rows_fill_into,
};
