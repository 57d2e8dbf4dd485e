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
    if (hot_keywords_only(args, "RowsTemplate") < 0) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OnnpOO!|OO:RowsTemplate", kwlist, &PyTuple_Type, &arrays, &colmap,
                                     &offset, &max_rows, &lists_only, &hf, &PyBytes_Type, &tail, &past, &oaxes))
        return -1;
    if (!hot_configured() || hot_want_callable(hf) || hot_once(t->narr != 0)) return -1;
    t->keep.drop = drop_kept;
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
        Py_ssize_t block = rows.n * t->width * t->itemsize;
        Out o;
        int rc2 = hot_bytes_of(http, head, t->narr * block, t->tail, 0, &o);   /* copy_rows: any alignment */
        Py_DECREF(head);
        if (rc2 == 0) {
            char *slots[2] = {o.fill, o.fill + block};
            int over = hot_rows_into(slots, t, &rows, 0, 1);
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
    return n / t->naxes * t->width * t->itemsize; /* n <= a buffer's length / 4 and width * itemsize is small */
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
    return t->naxes > 1 ? hot_axes_rows_into(slots, t, rows) : hot_rows_into(slots, t, rows, 1, keep);
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
