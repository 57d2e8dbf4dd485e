/* service/shortcut/hot_grid.c -- GridTemplate: rows of a sinusoidal-grid too large to store whole
 * (SD3's 192 x 192 patches, CogVideoX's frames), from the engine's per-axis tables as the full
 * path's serve() assembles them (engine/tables/sinusoidal_grid.py: assemble): row p is zeros
 * below extra_tokens, else each axis's row of grid index g = p - extra side by side (t, w, h):
 * t = g / (H W), h = (g / W) % H, w = g % W, given here as (div, mod) per axis. Rows are copies
 * of stored rows, so every dtype and layout is the full path's bytes; JSON is the full path's.
 */
#include "hot.h"

/* A large sinusoidal-grid's rows from its per-axis tables (hot_grid.c): row p is zeros below
 * `extra`, else axis a's table row ((p - extra) / div[a]) % mod[a] at columns col[a] .. col[a] +
 * its width, side by side; positions from `rows` on are past the grid (the full path refuses them). */
typedef struct {
    HOT_TEMPLATE_HEAD
    Py_buffer arr[3];
    int narr;
    Py_ssize_t itemsize, width, extra, rows, max_rows;
    Py_ssize_t div[3], mod[3], col[3];
} GridTemplate;

/* The answer of a GridTemplate to the selection of span sp (hot_answer_body's; hot_grid.c). */
static PyObject *grid_answer(GridTemplate *t, const Span *sp, const Http *http);

static void GridTemplate_dealloc(GridTemplate *t)
{
    for (int i = 0; i < t->narr; i++) PyBuffer_Release(&t->arr[i]);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int GridTemplate_init(GridTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"arrays", "steps", "extra", "rows", "max_rows", "header_for", "tail", NULL};
    PyObject *arrays, *steps, *hf, *tail;
    Py_ssize_t extra, rows, max_rows;
    if (hot_keywords_only(args, "GridTemplate") < 0) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!nnnOO!:GridTemplate", kwlist, &PyTuple_Type, &arrays, &PyTuple_Type,
                                     &steps, &extra, &rows, &max_rows, &hf, &PyBytes_Type, &tail))
        return -1;
    if (!hot_configured() || hot_want_callable(hf)) return -1;
    if (t->heads) {
        PyErr_SetString(PyExc_RuntimeError, "a template is initialised once");
        return -1;
    }
    Py_ssize_t na = PyTuple_GET_SIZE(arrays);
    if (na < 1 || na > 3 || PyTuple_GET_SIZE(steps) != na || extra < 0 || rows <= extra || rows > hot_cfg.position_limit ||
        max_rows < 1 || max_rows > hot_cfg.max_rows) {
        PyErr_Format(PyExc_ValueError, "want 1 to 3 arrays, a (div, mod) step each, 0 <= extra < rows <= the "
                     "position limit and 1 <= max_rows <= %zd (configured)", hot_cfg.max_rows);
        return -1;
    }
    for (Py_ssize_t a = 0; a < na; a++) {
        Py_buffer *b = &t->arr[a];
        if (hot_get_table(PyTuple_GET_ITEM(arrays, a), b) < 0) return -1;
        t->narr++;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(steps, a), "nn:step", &t->div[a], &t->mod[a])) return -1;
        if (b->itemsize != t->arr[0].itemsize || t->div[a] < 1 || t->mod[a] < 1 || t->mod[a] > b->shape[0]) {
            PyErr_SetString(PyExc_ValueError, "arrays of one item size; a step's div >= 1 and 1 <= mod <= its rows");
            return -1;
        }
        t->col[a] = t->width;
        t->width += b->shape[1];
    }
    if (!(t->heads = PyDict_New())) return -1;
    t->itemsize = t->arr[0].itemsize;
    t->extra = extra;
    t->rows = rows;
    t->max_rows = max_rows;
    return hot_hold(&t->header_for, hf, &t->tail, tail);
}

/* Row p of the grid into d. */
static void grid_row(char *d, const GridTemplate *t, int64_t p)
{
    size_t es = (size_t)t->itemsize;
    if (p < t->extra) {
        memset(d, 0, (size_t)t->width * es);
        return;
    }
    int64_t g = p - t->extra;
    for (int a = 0; a < t->narr; a++) {
        size_t w = (size_t)t->arr[a].shape[1] * es;
        memcpy(d + (size_t)t->col[a] * es, (const char *)t->arr[a].buf + (size_t)((g / t->div[a]) % t->mod[a]) * w, w);
    }
}

/* declared, and described, in hot.h */
static PyObject *grid_answer(GridTemplate *t, const Span *sp, const Http *http)
{
    if (http && http->json) Py_RETURN_NONE;   /* JSON: the full path's */
    Sel rows = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    int rc = hot_parse_sel(sp, t->max_rows, &rows);
    if (rc == -2) return NULL;
    if (rc < 0 || rows.hi >= t->rows) {   /* past the grid: the full path refuses it */
        hot_sel_free(&rows);
        Py_RETURN_NONE;
    }
    int got = hot_header((PyObject *)t, t->heads, rows.n, -1, &head);
    if (got == 0) {
        out = Py_NotImplemented;
        Py_INCREF(out);
    } else if (got > 0) {
        Py_ssize_t rb = t->width * t->itemsize;
        Out o;
        if (hot_bytes_of(http, head, rows.n * rb, t->tail, 0, &o) == 0) {
            for (Py_ssize_t i = 0; i < rows.n; i++) grid_row(o.fill + i * rb, t, hot_sel_at(&rows, i));
            out = hot_finish(&o);
        }
        Py_DECREF(head);
    }
    hot_sel_free(&rows);
    return out;
}

static PyTypeObject GridTemplateType; /* below */

static PyObject *grid_body(HotTemplate *t, const Span *sp, const Http *http)
{
    return grid_answer((GridTemplate *)t, &sp[0], http);
}

const struct hot_ops hot_grid_ops = {
    .kind = "grid",
    .name = "GridTemplate",
    .type = &GridTemplateType,
    .dims = 1,
    .v1 = grid_body, /* JSON: the full path's */
};

static PyTypeObject GridTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.GridTemplate",
    .tp_basicsize = sizeof(GridTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sinusoidal-grid spec's per-axis tables and response layout (see hot_grid.c).",
    .tp_new = hot_template_new,
    .tp_init = (initproc)GridTemplate_init,
    .tp_base = &hot_TemplateType,
    .tp_dealloc = (destructor)GridTemplate_dealloc,
};
