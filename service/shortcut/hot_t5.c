/* service/shortcut/hot_t5.c -- T5Template: T5 relative-position bucket blocks (t5-buckets) from
 * the engine's mapped lookup table by the engine's own block kernel (native_api.h: t5), so the
 * shortcut's int32 blocks are the full path's (engine/tables/t5.py serve: kernels.t5_block).
 * The table holds the whole function (buckets saturate past max_distance), so every block is
 * answered; JSON is the full path's.
 */
#include "hot.h"

static void T5Template_dealloc(T5Template *t)
{
    if (t->heads) PyBuffer_Release(&t->lut);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int T5Template_init(T5Template *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"lut", "radius", "header_for", "tail", "max_n", "max_bytes", NULL};
    PyObject *olut, *hf, *tail;
    Py_ssize_t radius, max_n, max_bytes;
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

/* declared, and described, in hot.h */
PyObject *hot_t5_answer(T5Template *t, const Span *sq, const Span *sk, const Http *http)
{
    if (http && http->json) Py_RETURN_NONE;   /* JSON: the full path's */
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    int64_t *pos = NULL;
    if (hot_block_start((PyObject *)t, t->heads, sq, sk, t->max_n, 1, t->max_bytes / 4, &q, &k, &head, &out) <= 0)
        goto done;
    if (!(pos = PyMem_Malloc((size_t)(q.n + k.n) * sizeof(int64_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t a = 0; a < q.n; a++) pos[a] = hot_sel_at(&q, a);
    for (Py_ssize_t b = 0; b < k.n; b++) pos[q.n + b] = hot_sel_at(&k, b);
    Out o;
    if (hot_bytes_of(http, head, 4 * q.n * k.n, t->tail, 1, &o) < 0) goto done;
    hot_cfg.kernels->t5((const int32_t *)t->lut.buf, t->radius, pos, q.n, pos + q.n, k.n, (int32_t *)o.fill);
    out = hot_finish(&o);
done:
    PyMem_Free(pos);
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

PyTypeObject hot_T5TemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.T5Template",
    .tp_basicsize = sizeof(T5Template),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A t5-buckets spec's mapped lookup table and response layout (see hot_t5.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)T5Template_init,
    .tp_methods = hot_template_methods,
    .tp_getset = hot_template_getset,
    .tp_dealloc = (destructor)T5Template_dealloc,
};
