/* service/shortcut/hot_fill.c -- fill() and fill_into(): a RowsTemplate's rows for raw binary
 * positions (the v2 protocol's shortcut, service/v2/hot.py), laid out between caller-given bytes
 * or written into caller-given buffers.
 */
#include "hot.h"

PyDoc_STRVAR(fill_doc, "fill(template, positions, itemsize, *, parts) -> bytes | None\n--\n\n"
             "parts[0] + the rows of the RowsTemplate's first array at the raw little-endian positions\n"
             "(itemsize 4: int32, 8: int64; a template with axes: [k, n] positions, axis after axis)\n"
             "+ parts[1] + ... + parts[narrays], in one new bytes object;\n"
             "None when a position is negative or not below the position limit, or past the table of a\n"
             "template that computes no rows there, or a computed value overflows (the full path answers those).");

PyDoc_STRVAR(fill_into_doc, "fill_into(template, positions, itemsize, *, buffers) -> True | None\n--\n\n"
             "The same rows written into caller-given writable buffers, one per array, each exactly\n"
             "the rows' size (e.g. a client's shared memory); None, writing nothing, as fill().");

#define FILL_NOGIL_BYTES (1 << 20) /* copies this large run without the GIL (they may run in a thread) */

/* Each array's rows into slots[i] (block bytes each), without the GIL when large: 0, 1 when a
 * computed row overflows the dtype, -1 error set. */
static int fill_slots(HotTemplate *t, const Sel *rows, char **slots, Py_ssize_t block)
{
    int rc;
    if (t->ops->arrays(t) * block >= FILL_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = t->ops->rows_into(slots, t, rows, 0);   /* without the GIL: nothing kept, nothing read kept */
        Py_END_ALLOW_THREADS
    } else {
        rc = t->ops->rows_into(slots, t, rows, 1);
    }
    if (rc < 0) PyErr_NoMemory();
    return rc;
}

/* Where the rows go: into a new bytes object, between parts (fill), or into the given buffers
 * (fill_into). slots[i]: where array i's rows start; -1 with an error set. */
static int fill_targets(PyObject *targets, int into, int narr, Py_ssize_t block, PyObject **out, Py_buffer *dst,
                        int *got, char **slots)
{
    if (into) {
        for (; *got < narr; (*got)++) {
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
    for (Py_ssize_t i = 0; i <= narr; i++) fixed += PyBytes_GET_SIZE(PyTuple_GET_ITEM(targets, i));
    if (!(*out = PyBytes_FromStringAndSize(NULL, fixed + narr * block))) return -1;
    char *o = PyBytes_AS_STRING(*out);
    for (Py_ssize_t i = 0; i <= narr; i++) {
        PyObject *p = PyTuple_GET_ITEM(targets, i);
        memcpy(o, PyBytes_AS_STRING(p), (size_t)PyBytes_GET_SIZE(p));
        o += PyBytes_GET_SIZE(p);
        if (i < narr) {
            slots[i] = o;
            o += block;
        }
    }
    return 0;
}

static const char *const fill_names[2][5] = {{"template", "positions", "itemsize", "parts", NULL},
                                             {"template", "positions", "itemsize", "buffers", NULL}};
static HotSig fill_sigs[2] = {{.fn = "fill", .names = fill_names[0], .npos = 3, .nreq = 4},
                              {.fn = "fill_into", .names = fill_names[1], .npos = 3, .nreq = 4}};

static PyObject *fill_any(PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames, int into)
{
    static const char *sig[2] = {"fill(template: RowsTemplate, positions: buffer, itemsize: int, *, parts: tuple of bytes)",
                                 "fill_into(template: RowsTemplate, positions: buffer, itemsize: int, *, buffers: tuple)"};
    PyObject *args[4];
    if (!hot_configured() || hot_args(&fill_sigs[into], argv, nargs, kwnames, args) < 0) return NULL;
    const struct hot_ops *ops = hot_ops_of(args[0]);
    if (!ops || !ops->raw_rows || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, sig[into]);
        return NULL;
    }
    HotTemplate *t = (HotTemplate *)args[0];
    int narr = ops->arrays(t);
    Py_ssize_t isz = PyLong_AsSsize_t(args[2]);
    if (isz == -1 && PyErr_Occurred()) return NULL;
    int ok = PyTuple_GET_SIZE(args[3]) == narr + !into;
    for (Py_ssize_t i = 0; ok && !into && i <= narr; i++) ok = PyBytes_Check(PyTuple_GET_ITEM(args[3], i));
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: one %s per array of the template", sig[into], into ? "buffer" : "part more");
        return NULL;
    }
    Py_buffer pb, dst[2];
    int got = 0;
    PyObject *out = NULL;
    Sel rows = {.heap = NULL};
    Py_ssize_t block = 0;
    if (PyObject_GetBuffer(args[1], &pb, PyBUF_SIMPLE) < 0) return NULL;
    int rc = ops->raw_rows(t, (const char *)pb.buf, pb.len, isz, &rows, &block);
    char *slots[2];
    if (rc == 0) {
        out = Py_None;
        Py_INCREF(out);
    } else if (rc > 0 && fill_targets(args[3], into, narr, block, &out, dst, &got, slots) == 0) {
        /* the template (held by the caller's reference) keeps the arrays mapped; a new `out` is not
         * shared yet, and the caller's buffers are held until the copy is done */
        int over = fill_slots(t, &rows, slots, block);
        if (over) Py_CLEAR(out);       /* nothing written that the caller keeps: None, or the error */
        if (over > 0) {
            out = Py_None;
            Py_INCREF(out);
        }
    } else {
        Py_CLEAR(out);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&dst[i]);
    hot_sel_free(&rows);
    PyBuffer_Release(&pb);
    return out;
}

/* declared, and described, in hot.h */
PyObject *hot_v2_answer(PyObject *entry, const char *pos, Py_ssize_t len, const Http *http)
{
    if (Py_TYPE(entry) == &hot_BlockEntryType) return hot_v2_block_answer((const HotBlockEntry *)entry, pos, len, http);
    if (Py_TYPE(entry) != &hot_RowsEntryType) {
        PyErr_SetString(PyExc_TypeError, "v2 entries: want a RowsEntry or a BlockEntry");
        return NULL;
    }
    const HotRowsEntry *e = (const HotRowsEntry *)entry;   /* its fields checked when it was made */
    HotTemplate *t = (HotTemplate *)e->template;
    const struct hot_ops *ops = t->ops;
    int narr = ops->arrays(t);
    PyObject *parts = e->parts, *post = e->post;
    Py_ssize_t isz = e->itemsize, nbytes = e->nbytes;
    if (len != nbytes) Py_RETURN_NONE;   /* not the learnt number of positions */
    Sel rows = {.heap = NULL};
    Py_ssize_t block = 0;
    int rc = ops->raw_rows(t, pos, len, isz, &rows, &block);
    if (rc <= 0) {
        hot_sel_free(&rows);
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t body = narr * block;
    for (Py_ssize_t i = 1; i < narr; i++) body += PyBytes_GET_SIZE(PyTuple_GET_ITEM(parts, i));
    Http h = *http;
    h.post = post;
    Out o;
    PyObject *out = NULL;
    if (hot_bytes_of(&h, PyTuple_GET_ITEM(parts, 0), body, PyTuple_GET_ITEM(parts, narr), 0, &o) == 0) {
        char *slots[2], *d = o.fill;
        for (Py_ssize_t i = 0; i < narr; i++) {
            if (i > 0) {
                PyObject *p = PyTuple_GET_ITEM(parts, i);
                memcpy(d, PyBytes_AS_STRING(p), (size_t)PyBytes_GET_SIZE(p));
                d += PyBytes_GET_SIZE(p);
            }
            slots[i] = d;
            d += block;
        }
        int over = ops->rows_into(slots, t, &rows, 1);
        out = hot_finish(&o);
        if (over) Py_CLEAR(out);
        if (over < 0) PyErr_NoMemory();
        else if (over > 0) {
            out = Py_None;
            Py_INCREF(out);
        }
    }
    hot_sel_free(&rows);
    return out;
}

static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return fill_any(args, nargs, kwnames, 0);
}

static PyObject *fill_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return fill_any(args, nargs, kwnames, 1);
}

PyMethodDef hot_fill_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL | METH_KEYWORDS, fill_doc},
    {"fill_into", (PyCFunction)(void (*)(void))fill_into, METH_FASTCALL | METH_KEYWORDS, fill_into_doc},
    {NULL, NULL, 0, NULL},
};
