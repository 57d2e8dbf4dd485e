/* service/shortcut/hot_grpc.c -- gRPC's door into the learnt templates: a serialized
 * ModelInferRequest cut before its trailing raw_input_contents fields (grpc_cut: the one owner of
 * the cut, which learning, service/v2/hot.py, calls too), looked up by those bytes in the gRPC
 * entries ({key: GrpcEntry}, hot_named.c), each raw field's length checked against the entry, and
 * filled through the v2 REST lane's fill (hot_v2_answer), framed for gRPC and counted in the
 * process's metrics as a Reader counts (hot_serve.c), in one call (grpc_answer).
 */
#include "hot.h"

#define RAW_INPUT 0x3A /* ModelInferRequest.raw_input_contents: field 7, length-delimited */

/* Where a message's trailing raw_input_contents fields are: start, the first one's tag; at[i] and
 * len[i], field i's bytes. */
typedef struct {
    Py_ssize_t start, at[MAX_FIELDS], len[MAX_FIELDS];
    int n;
} Cut;

/* A varint at d[*i] (at most 10 bytes, at most 64 bits) into *v, *i past it: 0, or -1. */
static int varint(const unsigned char *d, Py_ssize_t n, Py_ssize_t *i, uint64_t *v)
{
    uint64_t out = 0;
    for (int shift = 0; *i < n && shift < 64; shift += 7) {
        unsigned char b = d[(*i)++];
        if (shift == 63 && (b & 0x7E)) return -1;
        out |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = out;
            return 0;
        }
    }
    return -1;
}

static int varint_len(uint64_t v)
{
    int k = 1;
    for (; v >= 0x80; v >>= 7) k++;
    return k;
}

/* The cut of a serialized message: its top-level fields well formed and ending with all its
 * raw_input_contents fields (1 to MAX_FIELDS), each written minimally (its one-byte tag, its
 * length's shortest varint), so that the bytes before them are a run of whole fields: 1, else 0. */
static int cut(const unsigned char *d, Py_ssize_t n, Cut *c)
{
    Py_ssize_t i = 0;
    c->n = 0;
    while (i < n) {
        Py_ssize_t start = i, h;
        uint64_t tag, v;
        if (varint(d, n, &i, &tag) < 0) return 0;
        if (tag != RAW_INPUT && c->n) return 0; /* a field after a raw input */
        switch (tag & 7) {
        case 0:
            if (varint(d, n, &i, &v) < 0) return 0;
            break;
        case 1:
            if (n - i < 8) return 0;
            i += 8;
            break;
        case 5:
            if (n - i < 4) return 0;
            i += 4;
            break;
        case 2:
            h = i;
            if (varint(d, n, &i, &v) < 0 || v > (uint64_t)(n - i)) return 0;
            if (tag == RAW_INPUT) {
                if (c->n == MAX_FIELDS || h != start + 1 || i - h != varint_len(v)) return 0;
                if (!c->n) c->start = start;
                c->at[c->n] = i;
                c->len[c->n++] = (Py_ssize_t)v;
            }
            i += (Py_ssize_t)v;
            break;
        default:
            return 0;
        }
    }
    return c->n > 0;
}

PyDoc_STRVAR(grpc_cut_doc, "grpc_cut(data) -> (start, (nbytes, ...)) | None\n--\n\n"
             "Where a serialized ModelInferRequest's trailing raw_input_contents fields start and each one's\n"
             "length, when its top-level fields are well formed and end with all of them (1 or 2), each\n"
             "written minimally; else None. data[:start] is the message's gRPC key.");

static PyObject *grpc_cut(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    Cut c;
    int ok = cut((const unsigned char *)b.buf, b.len, &c);
    PyBuffer_Release(&b);
    if (!ok) Py_RETURN_NONE;
    return c.n == 1 ? Py_BuildValue("(n(n))", c.start, c.len[0]) : Py_BuildValue("(n(nn))", c.start, c.len[0], c.len[1]);
}

/* What Python answers: (entry, positions: bytes, or a pair of bytes). */
static PyObject *found(const HotGrpcEntry *e, const char *d, const Cut *c)
{
    PyObject *pos = c->n == 1 ? PyBytes_FromStringAndSize(d + c->at[0], c->len[0])
                              : Py_BuildValue("(y#y#)", d + c->at[0], c->len[0], d + c->at[1], c->len[1]);
    if (!pos) return NULL;
    PyObject *out = PyTuple_Pack(2, e->entry, pos);
    Py_DECREF(pos);
    return out;
}

/* The answer of the message d[0:n] (its entry held by the caller), or None, or what Python answers. */
static PyObject *answer(const HotGrpcEntry *e, const char *d, const Cut *c, int stream, Py_ssize_t most)
{
    for (int i = 0; i < c->n; i++)
        if (c->len[i] != e->nbytes[i]) Py_RETURN_NONE; /* not the learnt length */
    if (c->n != e->nraw) Py_RETURN_NONE;
    if (e->fill == Py_None || e->size > most) return found(e, d, c);
    Http h = {.frame = stream ? HOT_FRAME_STREAM : HOT_FRAME_BARE};
    /* the raw fields' bytes one after the other, as the REST lane's body holds them */
    if (c->n == 1) return hot_v2_answer(e->fill, d + c->at[0], c->len[0], &h);
    char *pos = PyMem_Malloc((size_t)(c->len[0] + c->len[1]) + 1);
    if (!pos) return PyErr_NoMemory();
    memcpy(pos, d + c->at[0], (size_t)c->len[0]);
    memcpy(pos + c->len[0], d + c->at[1], (size_t)c->len[1]);
    PyObject *out = hot_v2_answer(e->fill, pos, c->len[0] + c->len[1], &h);
    PyMem_Free(pos);
    return out;
}

PyDoc_STRVAR(grpc_answer_doc,
             "grpc_answer(data, entries, *, framed, stream, most, counts, buckets) -> bytes | None | (entry, positions)\n"
             "--\n\n"
             "The learnt answer of a serialized ModelInferRequest (framed: data is a unary call's body, the\n"
             "5-byte gRPC prefix first, which must say one uncompressed message): grpc_cut's key looked up in\n"
             "entries ({key: GrpcEntry}), each raw field of the entry's length, its rows or block filled as\n"
             "the v2 REST lane fills them: the ModelInferResponse, or (stream) a ModelStreamInferResponse\n"
             "message holding it after its 5-byte gRPC prefix, counted at the entry's metrics (stream_metrics)\n"
             "offset in counts (None: not counted) as a Reader counts. None: no entry, another length, a\n"
             "position the template does not answer (the full path answers it). (entry, positions: bytes, or\n"
             "a pair): an entry C does not fill (fill None) or whose answer is over most bytes: Python answers it.");

static const char *const grpc_answer_names[] = {"data", "entries", "framed", "stream", "most", "counts", "buckets", NULL};
static HotSig grpc_answer_sig = {.fn = "grpc_answer", .names = grpc_answer_names, .npos = 2, .nreq = 7};

static PyObject *grpc_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *v[7];
    if (!hot_configured() || hot_args(&grpc_answer_sig, args, nargs, kwnames, v) < 0) return NULL;
    int framed = PyObject_IsTrue(v[2]), stream = PyObject_IsTrue(v[3]);
    Py_ssize_t most = PyLong_AsSsize_t(v[4]);
    if (framed < 0 || stream < 0 || (most == -1 && PyErr_Occurred())) return NULL;
    if (!PyBytes_Check(v[0]) || !PyDict_Check(v[1])) {
        PyErr_SetString(PyExc_TypeError, "grpc_answer(data: bytes, entries: dict, *, framed: bool, stream: bool, "
                                         "most: int, counts: buffer | None, buckets: bytes)");
        return NULL;
    }
    double t0 = hot_seconds_now();
    const char *d = PyBytes_AS_STRING(v[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(v[0]);
    if (framed) { /* one whole uncompressed message */
        const unsigned char *p = (const unsigned char *)d;
        if (n < 5 || p[0] != 0 || ((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4]) != (size_t)n - 5)
            Py_RETURN_NONE;
        d += 5;
        n -= 5;
    }
    Cut c;
    if (!PyDict_GET_SIZE(v[1]) || !cut((const unsigned char *)d, n, &c)) Py_RETURN_NONE;
    PyObject *e = hot_entry(v[1], PyBytes_FromStringAndSize(d, c.start));
    if (!e) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (Py_TYPE(e) != &hot_GrpcEntryType) {
        Py_DECREF(e);
        PyErr_SetString(PyExc_TypeError, "grpc_answer: entries' values are GrpcEntry");
        return NULL;
    }
    HotGrpcEntry *g = (HotGrpcEntry *)e;
    PyObject *out = answer(g, d, &c, stream, most);
    if (out && PyBytes_Check(out) && v[5] != Py_None) {
        Py_buffer counts;
        if (hot_counts_of(v[5], v[6], &counts) < 0) {
            Py_DECREF(out);
            Py_DECREF(e);
            return NULL;
        }
        hot_observe(&counts, v[6], stream ? g->stream_metrics : g->metrics, hot_seconds_now() - t0,
                    (double)PyBytes_GET_SIZE(out) - (stream ? 5 : 0));
        PyBuffer_Release(&counts);
    }
    Py_DECREF(e);
    return out;
}

PyMethodDef hot_grpc_methods[] = {
    {"grpc_cut", (PyCFunction)grpc_cut, METH_O, grpc_cut_doc},
    {"grpc_answer", (PyCFunction)(void (*)(void))grpc_answer, METH_FASTCALL | METH_KEYWORDS, grpc_answer_doc},
    {NULL, NULL, 0, NULL},
};
