/* service/shortcut/hot_blocks.c -- the cells of a block template (AlibiTemplate here, T5Template's
 * in hot_t5.c), written once for every way in: /v1 bodies (hot_answer.c alibi_answer, hot_t5.c)
 * and v2 binary infers of raw `query` and `key` positions (fill_block(), and the lane's v2 routes
 * through hot_v2_answer: service/v2/hot_blocks.py learns them).
 */
#include "hot.h"

#include <float.h>

#include "alibi_cell.h" /* engine/kernels: the ALiBi cell, shared with engine.kernels._native */

/* One float32 ALiBi row (alibi_cell.h): o[b] is the cell at q - key[b], which fits int32 as
 * positions are < 2**31. Each mode is its own loop, so each vectorizes; a masked row takes two,
 * the values then the mask (in one loop GCC sinks the multiply into a branch, which does not
 * vectorize). */
VECTOR_CLONES
static void alibi_row(float *restrict o, const int32_t *restrict key, Py_ssize_t nk, int32_t q, double m,
                      int symmetric, int mask_future)
{
#define ROW(MODE) for (Py_ssize_t b = 0; b < nk; b++) o[b] = (float)alibi_cell_i32(m, q - key[b], MODE, -FLT_MAX)
    if (symmetric) {
        ROW(ALIBI_SYMMETRIC);
    } else {
        ROW(ALIBI_CAUSAL);
        if (mask_future)
            for (Py_ssize_t b = 0; b < nk; b++) o[b] = (float)alibi_masked(o[b], ALIBI_MASKED, key[b] > q, -FLT_MAX);
    }
#undef ROW
}

/* A row of the stored table read backwards: o[b] = src[-b] (d = q - key[b] falls by one). */
VECTOR_CLONES
static void reversed_row(float *restrict o, const float *restrict src, Py_ssize_t nk)
{
    for (Py_ssize_t b = 0; b < nk; b++) o[b] = src[-b];
}

/* declared, and described, in hot.h */
int hot_alibi_block(const AlibiTemplate *t, const Sel *q, const Sel *k, char *fill)
{
    if (t->kernel_dt >= 0) {   /* float16 / bfloat16: the engine's block kernel, its rounding and overflow */
        int64_t *pos = hot_block_positions(q, k);
        if (!pos) return -1;
        int over = hot_cfg.kernels->alibi(t->slopes, t->nheads, pos, q->n, pos + q->n, k->n, fill, t->kernel_dt,
                                          t->symmetric, t->mask_future);
        PyMem_Free(pos);
        return over;
    }
    float *f = (float *)fill;
    /* Decode blocks (consecutive keys, none after any query, every distance inside the stored
     * table) are the stored values read backwards; the table holds the same rounding of the same
     * float64 product (0 - m*d and m*(-d) are one value). Anything else is computed. */
    if (t->have_dist && !k->v && k->step == 1 && k->hi <= q->lo && q->hi - k->lo < t->dist.shape[1]) {
        Py_ssize_t L = t->dist.shape[1];
        for (Py_ssize_t h = 0; h < t->nheads; h++) {
            const float *row = (const float *)t->dist.buf + t->rows[h] * L;
            for (Py_ssize_t a = 0; a < q->n; a++, f += k->n) reversed_row(f, row + (hot_sel_at(q, a) - k->start), k->n);
        }
        return 0;
    }
    int32_t *keys = PyMem_Malloc((size_t)k->n * sizeof(int32_t));
    if (!keys) return -1;
    for (Py_ssize_t b = 0; b < k->n; b++) keys[b] = (int32_t)hot_sel_at(k, b);
    for (Py_ssize_t h = 0; h < t->nheads; h++)
        for (Py_ssize_t a = 0; a < q->n; a++, f += k->n)
            alibi_row(f, keys, k->n, (int32_t)hot_sel_at(q, a), t->slopes[h], t->symmetric, t->mask_future);
    PyMem_Free(keys);
    return 0;
}

/* declared, and described, in hot.h */
PyObject *hot_block_done(Out *o, int rc)
{
    PyObject *out = hot_finish(o);
    if (rc == 0) return out;
    Py_XDECREF(out);
    if (rc < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;   /* a cell overflows the dtype: the full path refuses it */
}

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
                                1, &o) == 0) {
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
PyObject *hot_v2_block_answer(PyObject *entry, const char *pos, Py_ssize_t len, const Http *http)
{
    PyObject *t, *parts, *post;
    Py_ssize_t isz1, n1, isz2, n2;
    int key_first;
    if (!PyArg_ParseTuple(entry, "OnnnnpOO!:v2 block entry", &t, &isz1, &n1, &isz2, &n2, &key_first, &parts,
                          &PyBytes_Type, &post))
        return NULL;
    if (!block_template(t) || !two_bytes(parts)) {
        PyErr_SetString(PyExc_TypeError, "v2 block entry: (AlibiTemplate | T5Template, itemsize, nbytes, itemsize, "
                                         "nbytes, key first, (bytes, bytes), post)");
        return NULL;
    }
    if (n1 < 0 || n2 < 0 || len != n1 + n2) Py_RETURN_NONE;   /* not the learnt numbers of positions */
    Http h = *http;
    h.post = post;
    return block_answer((HotTemplate *)t, pos, n1, isz1, pos + n1, n2, isz2, key_first, parts, &h);
}

PyDoc_STRVAR(fill_block_doc, "fill_block(template, first, second, itemsizes, key_first, parts) -> bytes | None\n--\n\n"
             "parts[0] + the block of an AlibiTemplate or T5Template at raw little-endian positions (first,\n"
             "second: buffers of ints of itemsizes[0], itemsizes[1] bytes, 4: int32, 8: int64; query then key, or\n"
             "key then query when key_first) + parts[1], in one new bytes object, the block as its /v1\n"
             "answer holds it; None when a position is negative or not below the position limit, the block is\n"
             "over the template's max_bytes, or a cell overflows the dtype (the full path answers those).");

static PyObject *fill_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!hot_configured()) return NULL;
    Py_ssize_t isz[2];
    int key_first;
    HotTemplate *t = nargs == 6 ? block_template(args[0]) : NULL;
    if (!t || !PyArg_ParseTuple(args[3], "nn:itemsizes", &isz[0], &isz[1]) ||
        (key_first = PyObject_IsTrue(args[4])) < 0 || !two_bytes(args[5])) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "fill_block(template: AlibiTemplate | T5Template, first: buffer, second: "
                                         "buffer, itemsizes: (int, int), key_first: bool, parts: (bytes, bytes))");
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
    {"fill_block", (PyCFunction)(void (*)(void))fill_block, METH_FASTCALL, fill_block_doc},
    {NULL, NULL, 0, NULL},
};
