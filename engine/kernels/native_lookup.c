/* engine/kernels/native_lookup.c -- the resolved lookup of engine/reader/lookup.py in one call.
 * Every position is checked ([0, 2**31)), its row (position + offset) gathered from the mapped
 * tables by the one row gather (row_gather.h, the shortcut's too), or, past the table, computed
 * with the sincos kernel of native_kernels.c (the pipeline's bits) and arranged through the map
 * analysed as the column map is.
 *
 * RowGather(*, plan, length): a family's row plan (engine/tables/base.py RowPlan: arrays, colmap,
 *   offset, past) over the first `length` rows of its arrays, its maps analysed once:
 *     plan.arrays  1 to 4 C-contiguous 2-D arrays [>= length, W], one element size (2 or 4)
 *     plan.colmap  W' ints: output column j <- table column colmap[j] (-1: zero)
 *     plan.past    None (a row past the table is refused with -3), or how such a row is computed:
 *                  .freqs (h float64), .scale, .dtype ("float32", "float16", "bfloat16": the
 *                  arrays'), .maps (per array, W ints: table column c <- item maps[a][c] of the
 *                  computed [cos(p*freqs)*scale | sin(p*freqs)*scale] rounded to dtype)
 * rows_lookup(gather, positions, outs) -> int
 *   positions  C-contiguous int64 buffer, any shape, n values; or a list of n ints (exactly int:
 *              a bool, a float or a nested list is a ValueError, as an int past int64 is)
 *   outs       tuple of one writable C-contiguous buffer of n*W' elements per array
 * Returns: >= 0 done (0: every row inside the table, else the last row reached + 1); -1 a
 * computed value overflowed the dtype; -3 a row past the table and no past; <= -4: position
 * index (-r - 4) is outside [0, 2**31) (nothing written is meaningful then).
 */
#include "native.h" /* and row_gather.h, the one row gather */

const char native_rows_lookup_doc[] =
    "rows_lookup(gather, positions, outs) -> int\n--\n\nThe resolved lookup (engine/reader/lookup.py).";

#define POS_LIMIT ((int64_t)1 << 31)
#define MAX_ARRAYS 4

typedef struct {
    PyObject_HEAD
    Py_buffer t[MAX_ARRAYS];
    int nt;
    int64_t length, offset;
    Py_ssize_t W, es;
    RowMap map;              /* output columns <- a stored row's */
    RowMap past[MAX_ARRAYS]; /* output columns <- a computed [cos | sin] row's, per array */
    int npast;
    double *freqs; /* NULL: rows past the table refused */
    Py_ssize_t nfreq;
    double scale;
    int dt;
    int ready; /* its init succeeded: rows_lookup takes it */
} RowGather;

static void RowGather_dealloc(RowGather *g)
{
    for (int i = 0; i < g->nt; i++) PyBuffer_Release(&g->t[i]);
    row_map_free(&g->map);
    for (int i = 0; i < g->npast; i++) row_map_free(&g->past[i]);
    PyMem_Free(g->freqs);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static int bad(const char *what)
{
    PyErr_Format(PyExc_ValueError, "RowGather: %s", what);
    return -1;
}

/* n ints of sequence o, each in [lo, hi), into out (PyMem_Malloc'ed, n + 1 items): 0, or -1 set. */
static int ints_of(PyObject *o, Py_ssize_t lo, Py_ssize_t hi, int32_t **out, Py_ssize_t *n, const char *what)
{
    PyObject *fast = PySequence_Fast(o, what);
    if (!fast) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    if (!(*out = PyMem_Malloc(sizeof(int32_t) * (size_t)(*n + 1)))) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if ((c == -1 && PyErr_Occurred()) || c < lo || c >= hi) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) bad(what);
            return -1;
        }
        (*out)[i] = (int32_t)c;
    }
    Py_DECREF(fast);
    return 0;
}

/* plan.past read into g (freqs, scale, dt and one map per array composed with colmap): 0, -1 set. */
static int set_past(RowGather *g, PyObject *past, const int32_t *colmap, Py_ssize_t D)
{
    PyObject *of = PyObject_GetAttrString(past, "freqs"), *os = PyObject_GetAttrString(past, "scale"),
             *od = PyObject_GetAttrString(past, "dtype"), *om = PyObject_GetAttrString(past, "maps");
    int rc = -1;
    int32_t *sm = NULL, *comp = NULL;
    Py_buffer b = {.buf = NULL};
    if (!of || !os || !od || !om) goto out;
    g->scale = PyFloat_AsDouble(os);
    if (g->scale == -1.0 && PyErr_Occurred()) goto out;
    if ((g->dt = native_parse_dtype(od)) < 0) goto out;
    if ((g->dt == DT_F32 ? 4 : 2) != g->es) {
        bad("past.dtype is not the arrays' element size");
        goto out;
    }
    if (PyObject_GetBuffer(of, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto out;
    if (b.ndim != 1 || b.itemsize != 8 || !b.format || strcmp(b.format, "d") || b.shape[0] < 1) {
        bad("past.freqs is not a non-empty 1-d float64 array");
        goto out;
    }
    g->nfreq = b.shape[0];
    if (!(g->freqs = PyMem_Malloc((size_t)b.len))) {
        PyErr_NoMemory();
        goto out;
    }
    memcpy(g->freqs, b.buf, (size_t)b.len);
    PyObject *maps = PySequence_Fast(om, "past.maps: one sequence of ints per array");
    if (!maps) goto out;
    if (PySequence_Fast_GET_SIZE(maps) != g->nt) {
        Py_DECREF(maps);
        bad("past.maps: one map per array");
        goto out;
    }
    if (!(comp = PyMem_Malloc(sizeof(int32_t) * (size_t)(D + 1)))) {
        Py_DECREF(maps);
        PyErr_NoMemory();
        goto out;
    }
    for (int k = 0; k < g->nt; k++) {
        Py_ssize_t w;
        PyMem_Free(sm);
        sm = NULL;
        if (ints_of(PySequence_Fast_GET_ITEM(maps, k), 0, 2 * g->nfreq, &sm, &w, "past.maps: items of [cos | sin]") < 0 ||
            (w != g->W && bad("past.maps: one item per table column"))) {
            Py_DECREF(maps);
            goto out;
        }
        for (Py_ssize_t j = 0; j < D; j++) comp[j] = colmap[j] < 0 ? -1 : sm[colmap[j]];
        if (row_map_build(&g->past[g->npast++], comp, NULL, D) < 0) {
            Py_DECREF(maps);
            PyErr_NoMemory();
            goto out;
        }
    }
    Py_DECREF(maps);
    rc = 0;
out:
    if (b.buf) PyBuffer_Release(&b);
    PyMem_Free(sm);
    PyMem_Free(comp);
    Py_XDECREF(of);
    Py_XDECREF(os);
    Py_XDECREF(od);
    Py_XDECREF(om);
    return rc;
}

static int RowGather_init(RowGather *g, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"plan", "length", NULL};
    PyObject *plan, *arrays = NULL, *ocol = NULL, *ooff = NULL, *past = NULL;
    long long length;
    int32_t *colmap = NULL;
    int rc = -1;
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "RowGather takes keyword arguments only (plan=, length=)");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OL:RowGather", kwlist, &plan, &length)) return -1;
    if (g->nt || g->ready) {
        PyErr_SetString(PyExc_RuntimeError, "RowGather: initialised once");
        return -1;
    }
    if (!(arrays = PyObject_GetAttrString(plan, "arrays")) || !(ocol = PyObject_GetAttrString(plan, "colmap")) ||
        !(ooff = PyObject_GetAttrString(plan, "offset")) || !(past = PyObject_GetAttrString(plan, "past")))
        goto out;
    g->offset = PyLong_AsLongLong(ooff);
    if (g->offset == -1 && PyErr_Occurred()) goto out;
    if (!PyTuple_Check(arrays) || PyTuple_GET_SIZE(arrays) < 1 || PyTuple_GET_SIZE(arrays) > MAX_ARRAYS ||
        length < 0 || g->offset < 0 || g->offset > ((int64_t)1 << 53)) {
        bad("want 1 to 4 arrays (a tuple), length >= 0 and 0 <= offset <= 2**53");
        goto out;
    }
    g->length = length;
    g->W = -1;
    for (int k = 0; k < PyTuple_GET_SIZE(arrays); k++) {
        Py_buffer *v = &g->t[k];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, k), v, PyBUF_C_CONTIGUOUS) < 0) goto out;
        g->nt++;
        if (v->ndim != 2 || (v->itemsize != 2 && v->itemsize != 4) || v->shape[0] < length ||
            (g->W >= 0 && (v->shape[1] != g->W || v->itemsize != g->es))) {
            bad("an array is not [>= length, W] of one element size (2 or 4)");
            goto out;
        }
        g->W = v->shape[1];
        g->es = v->itemsize;
    }
    Py_ssize_t D;
    if (ints_of(ocol, -1, g->W, &colmap, &D, "colmap: output columns <- table columns (-1: zero)") < 0) goto out;
    if (D < 1) {
        bad("colmap is empty");
        goto out;
    }
    if (row_map_build(&g->map, colmap, NULL, D) < 0) {
        PyErr_NoMemory();
        goto out;
    }
    if (past != Py_None && set_past(g, past, colmap, D) < 0) goto out;
    g->ready = 1;
    rc = 0;
out:
    PyMem_Free(colmap);
    Py_XDECREF(arrays);
    Py_XDECREF(ocol);
    Py_XDECREF(ooff);
    Py_XDECREF(past);
    return rc;
}

static PyTypeObject RowGatherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.engine.kernels._native.RowGather",
    .tp_basicsize = sizeof(RowGather),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowGather(*, plan, length): a row plan's gather, for rows_lookup (native_lookup.c says what).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowGather_init,
    .tp_dealloc = (destructor)RowGather_dealloc,
};

int native_lookup_ready(PyObject *m)
{
    if (PyType_Ready(&RowGatherType) < 0) return -1;
    Py_INCREF(&RowGatherType);
    if (PyModule_AddObject(m, "RowGather", (PyObject *)&RowGatherType) < 0) {
        Py_DECREF(&RowGatherType);
        return -1;
    }
    return 0;
}

#define LIST_STACK 64 /* positions of a list read onto the stack; more are allocated */

/* The rows past the table: computed (scratch), then arranged through the past maps. */
static int past_rows(const RowGather *g, const Level *lv, const int64_t *pos, Py_ssize_t n, char **dst, char *scratch)
{
    int over = 0;
    const size_t ob = (size_t)g->map.width * (size_t)g->es;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = pos[i] + g->offset;
        if (r < g->length) continue;
        native_sincos_run(lv, g->freqs, g->nfreq, &r, 1, g->scale, scratch, scratch + (size_t)g->nfreq * (size_t)g->es,
                          g->dt, &over);
        for (int k = 0; k < g->nt; k++) row_map_copy(dst[k] + (size_t)i * ob, &g->past[k], scratch, (size_t)g->es);
    }
    return over;
}

typedef struct {
    Py_buffer o[MAX_ARRAYS], pos;
    int no, npos;
} Held;

static void held_release(Held *h)
{
    for (int i = 0; i < h->no; i++) PyBuffer_Release(&h->o[i]);
    if (h->npos) PyBuffer_Release(&h->pos);
}

PyObject *native_rows_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    Held hd = {.no = 0, .npos = 0};
    int64_t list_stack[LIST_STACK], *list_heap = NULL;
    char *scratch = NULL;
    long long result = 0;
    if (nargs != 3 || !PyObject_TypeCheck(args[0], &RowGatherType) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "rows_lookup(gather: RowGather, positions, outs: tuple)");
        return NULL;
    }
    const RowGather *g = (const RowGather *)args[0];
    if (!g->ready || PyTuple_GET_SIZE(args[2]) != g->nt) {
        PyErr_SetString(PyExc_ValueError, "rows_lookup: one output per array of an initialised RowGather");
        return NULL;
    }
    const Py_ssize_t es = g->es, D = g->map.width;
    char *dst[MAX_ARRAYS];
    Py_ssize_t n;
    const int64_t *pos;
    if (PyList_CheckExact(args[1])) { /* a list of ints: read here, no array made for it */
        n = PyList_GET_SIZE(args[1]);
        int64_t *p = n <= LIST_STACK ? list_stack : (list_heap = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1)));
        if (!p) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = PyList_GET_ITEM(args[1], i);
            int overflow = 0;
            long long v = PyLong_CheckExact(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : (overflow = 1, 0);
            if (overflow) { /* not an int (a bool, a float, a list), or past int64 */
                PyErr_SetString(PyExc_ValueError, "rows_lookup: positions must be int64");
                goto fail;
            }
            p[i] = (int64_t)v;
        }
        pos = p;
    } else {
        if (PyObject_GetBuffer(args[1], &hd.pos, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto fail;
        hd.npos = 1;
        if (hd.pos.itemsize != 8 || !hd.pos.format ||
            (strcmp(hd.pos.format, "q") && strcmp(hd.pos.format, "l") && strcmp(hd.pos.format, "<q") &&
             strcmp(hd.pos.format, "=q"))) {
            PyErr_SetString(PyExc_ValueError, "rows_lookup: positions must be int64");
            goto fail;
        }
        n = hd.pos.len / 8;
        pos = (const int64_t *)hd.pos.buf;
    }
    for (int k = 0; k < g->nt; k++) {
        Py_buffer *v = &hd.o[k];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[2], k), v, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto fail;
        hd.no++;
        if (v->len != n * D * es) {
            PyErr_SetString(PyExc_ValueError, "rows_lookup: an output does not hold n * D elements of the dtype");
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
    const int any_past = n > 0 && far + g->offset >= g->length;
    if (any_past) {
        if (!g->freqs) {
            result = -3;
            goto done;
        }
        if (!(scratch = PyMem_Malloc((size_t)(2 * g->nfreq) * (size_t)es + 8))) {
            PyErr_NoMemory();
            goto fail;
        }
        result = far + g->offset + 1;
    }
    /* 2. rows inside the table: gathered (past ones are written below) */
    {
        const Level *lv = native_level;
        int over = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int k = 0; k < g->nt; k++) /* one table at a time: measured faster than rows across tables */
            row_map_rows(dst[k], &g->map, (const char *)g->t[k].buf, g->W, (size_t)es, pos, 0, 0, n, g->offset,
                         g->length);
        if (any_past) over = past_rows(g, lv, pos, n, dst, scratch);
        Py_END_ALLOW_THREADS
        if (over) result = -1;
    }
done:
    PyMem_Free(list_heap);
    PyMem_Free(scratch);
    held_release(&hd);
    return PyLong_FromLongLong(result);
fail:
    PyMem_Free(list_heap);
    PyMem_Free(scratch);
    held_release(&hd);
    return NULL;
}
