/* service/shortcut/hot_blocks.c -- a route: blocks for raw `query` and `key` positions, of any
 * template whose kind writes blocks (its ops' block_limits and block_into: AlibiTemplate's cells in
 * hot_alibi.c, T5Template's in hot_t5.c): fill_block(), and v2 binary infers through hot_v2_answer
 * (the lane's v2 routes; service/v2/hot_blocks.py learns them).
 */
#include "hot.h"

/* A selection of raw positions whose values are consecutive, read as the range they are (so a
 * decode block's keys take the stored table's copy, as a /v1 range does). */
static void as_range(Sel *s)
{
    for (Py_ssize_t i = 1; i < s->n; i++)
        if (s->v[i] != s->v[0] + i) return;
    s->start = s->v[0];
    s->step = 1;
    s->v = NULL;
}

/* The block answer of template t (AlibiTemplate or T5Template) to raw positions: `first` (n1 bytes
 * of isz1-byte ints) then `second`, query first unless key_first; parts[0] + the block + parts[1],
 * behind the HTTP head when http. Bytes; None (a position negative or not below the limit, a
 * block over the template's bytes, a cell that overflows: the full path's); NULL error. */
static PyObject *block_answer(HotTemplate *t, const char *first, Py_ssize_t n1, Py_ssize_t isz1, const char *second,
                              Py_ssize_t n2, Py_ssize_t isz2, int key_first, PyObject *parts, const Http *http)
{
    Sel a = {.heap = NULL}, b = {.heap = NULL};
    int rc = hot_raw_positions(first, n1, isz1, &a);
    if (rc > 0) rc = hot_raw_positions(second, n2, isz2, &b);
    PyObject *out = NULL;
    if (rc > 0) {
        Sel *q = key_first ? &b : &a, *k = key_first ? &a : &b;
        as_range(q);
        as_range(k);
        Py_ssize_t groups, isz, max_bytes;
        t->ops->block_limits(t, &groups, &isz, &max_bytes);
        Py_ssize_t cells = max_bytes / isz;
        Out o;
        if (q->n > cells / groups || k->n > cells / groups / q->n) { /* each factor checked: nothing overflows */
            out = Py_None;
            Py_INCREF(out);
        } else if (hot_bytes_of(http, PyTuple_GET_ITEM(parts, 0), isz * groups * q->n * k->n, PyTuple_GET_ITEM(parts, 1),
                                !(t->ops->block_any_alignment && t->ops->block_any_alignment(t, q, k)), &o) == 0) {
            out = hot_block_done(&o, t->ops->block_into(t, q, k, o.fill));
        }
    } else if (rc == 0) {
        out = Py_None;
        Py_INCREF(out);
    }
    hot_sel_free(&a);
    hot_sel_free(&b);
    return out;
}

/* t as a template of blocks (its ops answer raw query and key positions), or NULL. */
static HotTemplate *block_template(PyObject *t)
{
    const struct hot_ops *ops = hot_ops_of(t);
    return ops && ops->block_into ? (HotTemplate *)t : NULL;
}

static int two_bytes(PyObject *parts)
{
    return PyTuple_Check(parts) && PyTuple_GET_SIZE(parts) == 2 && PyBytes_Check(PyTuple_GET_ITEM(parts, 0)) &&
           PyBytes_Check(PyTuple_GET_ITEM(parts, 1));
}

/* declared, and described, in hot.h */
PyObject *hot_v2_block_answer(const HotBlockEntry *e, const char *pos, Py_ssize_t len, const Http *http)
{
    /* its fields checked when it was made (hot_named.c) */
    if (len != e->nbytes[0] + e->nbytes[1]) Py_RETURN_NONE;   /* not the learnt numbers of positions */
    Http h = *http;
    h.post = e->post;
    return block_answer((HotTemplate *)e->template, pos, e->nbytes[0], e->itemsize[0], pos + e->nbytes[0],
                        e->nbytes[1], e->itemsize[1], e->key_first, e->parts, &h);
}

PyDoc_STRVAR(fill_block_doc, "fill_block(template, first, second, *, itemsizes, key_first, parts) -> bytes | None\n--\n\n"
             "parts[0] + the block of an AlibiTemplate or T5Template at raw little-endian positions (first,\n"
             "second: buffers of ints of itemsizes[0], itemsizes[1] bytes, 4: int32, 8: int64; query then key, or\n"
             "key then query when key_first) + parts[1], in one new bytes object, the block as its /v1\n"
             "answer holds it; None when a position is negative or not below the position limit, the block is\n"
             "over the template's max_bytes, or a cell overflows the dtype (the full path answers those).");

static const char *const fill_block_names[] = {"template", "first", "second", "itemsizes", "key_first", "parts", NULL};
static HotSig fill_block_sig = {.fn = "fill_block", .names = fill_block_names, .npos = 3, .nreq = 6};

static PyObject *fill_block(PyObject *self, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *args[6];
    if (!hot_configured() || hot_args(&fill_block_sig, argv, nargs, kwnames, args) < 0) return NULL;
    Py_ssize_t isz[2];
    int key_first;
    HotTemplate *t = block_template(args[0]);
    if (!t || !PyArg_ParseTuple(args[3], "nn:itemsizes", &isz[0], &isz[1]) ||
        (key_first = PyObject_IsTrue(args[4])) < 0 || !two_bytes(args[5])) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "fill_block(template: AlibiTemplate | T5Template, first: buffer, second: "
                                         "buffer, *, itemsizes: (int, int), key_first: bool, parts: (bytes, bytes))");
        return NULL;
    }
    Py_buffer a, b;
    if (PyObject_GetBuffer(args[1], &a, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &b, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *out = block_answer(t, a.buf, a.len, isz[0], b.buf, b.len, isz[1], key_first, args[5], NULL);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return out;
}

PyMethodDef hot_blocks_methods[] = {
    {"fill_block", (PyCFunction)(void (*)(void))fill_block, METH_FASTCALL | METH_KEYWORDS, fill_block_doc},
    {NULL, NULL, 0, NULL},
};
