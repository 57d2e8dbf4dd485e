/* service/shortcut/hot_out.c -- an answer's bytes: the HTTP head (for the lane) or gRPC's framing, the answer's own
 * head (a safetensors header, or the JSON before the values), the values, filled by the kinds, and
 * the tail, in one new bytes object (hot_bytes_of, hot_finish; hot_block_done for a block's).
 * Shared by every kind and route; depends on hot.h only.
 */
#include "hot.h"

static const char CLOSE_LINE[] = "connection: close\r\n";

/* n's decimal digits at d (room for 20), their count: the content length of every answer, where
 * snprintf's format parsing was 1-2% of a worker's time. */
static int decimal(char *d, size_t n)
{
    char tmp[20];
    int k = 0;
    do {
        tmp[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    for (int i = 0; i < k; i++) d[i] = tmp[k - 1 - i];
    return k;
}

/* declared, and described, in hot.h */
int hot_bytes_of(const Http *http, PyObject *head, Py_ssize_t body, PyObject *tail, int aligned, Out *o)
{
    Py_ssize_t hl = PyBytes_GET_SIZE(head), tl = PyBytes_GET_SIZE(tail), pl = 0, ql = 0;
    char digits[24];
    int dl = 0;
    if (http && http->frame == HOT_FRAME_HTTP) {
        dl = decimal(digits, (size_t)(hl + body + tl));
        pl = PyBytes_GET_SIZE(http->pre);
        ql = PyBytes_GET_SIZE(http->post) + (http->close ? (Py_ssize_t)sizeof CLOSE_LINE - 1 : 0) + 2;
    }
    unsigned char frame[16]; /* gRPC: a stream message's prefix, its infer_response field's tag and length */
    if (http && http->frame == HOT_FRAME_STREAM) {
        size_t inner = (size_t)(hl + body + tl);
        int k = 6;
        frame[5] = 0x12; /* ModelStreamInferResponse.infer_response: field 2, length-delimited */
        for (size_t v = inner; v >= 0x80; v >>= 7) frame[k++] = (unsigned char)(v | 0x80);
        frame[k] = (unsigned char)(inner >> (7 * (k - 6)));
        size_t msg = inner + (size_t)k + 1 - 5; /* the message after the 5-byte prefix */
        frame[0] = 0;                            /* not compressed */
        for (int i = 0; i < 4; i++) frame[1 + i] = (unsigned char)(msg >> (24 - 8 * i));
        dl = k + 1;
    }
    Py_ssize_t at = pl + dl + ql; /* where the safetensors answer starts */
    o->obj = PyBytes_FromStringAndSize(NULL, at + hl + body + tl);
    if (!o->obj) return -1;
    char *w = PyBytes_AS_STRING(o->obj);
    if (http && http->frame != HOT_FRAME_HTTP) {
        if (dl) memcpy(w, frame, (size_t)dl);
        w += at;
    } else if (http) {
        memcpy(w, PyBytes_AS_STRING(http->pre), (size_t)pl);
        memcpy(w + pl, digits, (size_t)dl);
        char *q = w + pl + dl;
        memcpy(q, PyBytes_AS_STRING(http->post), (size_t)PyBytes_GET_SIZE(http->post));
        q += PyBytes_GET_SIZE(http->post);
        if (http->close) {
            memcpy(q, CLOSE_LINE, sizeof CLOSE_LINE - 1);
            q += sizeof CLOSE_LINE - 1;
        }
        memcpy(q, "\r\n", 2);
        w += at;
    }
    memcpy(w, PyBytes_AS_STRING(head), (size_t)hl);
    memcpy(w + hl + body, PyBytes_AS_STRING(tail), (size_t)tl);
    o->dest = o->fill = w + hl;
    o->n = body;
    if (aligned && ((uintptr_t)o->dest & 7) && body > 0) {
        if (!(o->fill = PyMem_Malloc((size_t)body))) {
            Py_CLEAR(o->obj);
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* declared in hot.h */
PyObject *hot_finish(Out *o)
{
    if (o->fill != o->dest) {
        memcpy(o->dest, o->fill, (size_t)o->n);
        PyMem_Free(o->fill);
    }
    return o->obj;
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
