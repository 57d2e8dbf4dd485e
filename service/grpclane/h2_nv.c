/* service/grpclane/h2_nv.c -- the byte blocks of the gRPC lane's HTTP/2 session (_h2.c): a growing
 * buffer, header lists given by Python as nghttp2's name/value arrays, and header names as a
 * grpc-message carries them, and nghttp2's allocator, counted. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

#include "h2_nv.h"

int buf_add(Buf *b, const void *src, size_t n) {
    if (b->off > 0 && b->off == b->len) { /* drained: start over */
        b->off = b->len = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* a name as grpc-message carries it (percent-encoded outside printable ASCII, and '%') */
int h2_name_add(Buf *b, const uint8_t *name, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        uint8_t c = name[i];
        char e[3] = {'%', hex[c >> 4], hex[c & 15]};
        int escape = c < 0x20 || c > 0x7e || c == '%';
        if (buf_add(b, escape ? e : (const char *)&name[i], escape ? 3 : 1) < 0) return -1;
    }
    return 0;
}

/* name/value pairs (a sequence of 2-tuples of bytes) as nghttp2_nv, their bytes copied into one
 * block (*block, freed by the caller); extra: pairs of C strings before them, NULL-ended */
nghttp2_nv *h2_make_nv(PyObject *pairs, const char *const *extra, size_t *count, char **block) {
    PyObject *seq = PySequence_Fast(pairs, "headers: a sequence of (name, value) bytes pairs");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t nextra = 0, bytes = 0;
    while (extra && extra[2 * nextra]) {
        nextra++;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(p, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(p, 1))) {
            PyErr_SetString(PyExc_TypeError, "headers: a sequence of (name, value) bytes pairs");
            Py_DECREF(seq);
            return NULL;
        }
        bytes += (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(p, 0)) + (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(p, 1));
    }
    size_t total = (size_t)n + nextra;
    nghttp2_nv *nv = calloc(total ? total : 1, sizeof *nv);
    char *b = malloc(bytes ? bytes : 1);
    if (nv == NULL || b == NULL) {
        free(nv);
        free(b);
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    char *w = b;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *k = PyTuple_GET_ITEM(p, 0), *v = PyTuple_GET_ITEM(p, 1);
        size_t kl = (size_t)PyBytes_GET_SIZE(k), vl = (size_t)PyBytes_GET_SIZE(v);
        nghttp2_nv *e = &nv[nextra + (size_t)i];
        memcpy(w, PyBytes_AS_STRING(k), kl);
        e->name = (uint8_t *)w;
        e->namelen = kl;
        w += kl;
        memcpy(w, PyBytes_AS_STRING(v), vl);
        e->value = (uint8_t *)w;
        e->valuelen = vl;
        w += vl;
        e->flags = NGHTTP2_NV_FLAG_NONE;
    }
    for (size_t j = 0; j < nextra; j++) { /* static strings, first (:status leads): no copy */
        nghttp2_nv *e = &nv[j];
        e->name = (uint8_t *)extra[2 * j];
        e->namelen = strlen(extra[2 * j]);
        e->value = (uint8_t *)extra[2 * j + 1];
        e->valuelen = strlen(extra[2 * j + 1]);
        e->flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    }
    Py_DECREF(seq);
    *count = total;
    *block = b;
    return nv;
}

/* nghttp2's allocations, counted: its blocks are all freed when the session is deleted */
long h2_blocks;

static void *ng_malloc(size_t n, void *ud) {
    (void)ud;
    void *p = malloc(n);
    if (p != NULL) h2_blocks++;
    return p;
}

static void ng_free(void *p, void *ud) {
    (void)ud;
    if (p != NULL) h2_blocks--;
    free(p);
}

static void *ng_calloc(size_t k, size_t n, void *ud) {
    (void)ud;
    void *p = calloc(k, n);
    if (p != NULL) h2_blocks++;
    return p;
}

static void *ng_realloc(void *p, size_t n, void *ud) {
    (void)ud;
    void *q = realloc(p, n);
    if (p == NULL && q != NULL) h2_blocks++;
    return q;
}

nghttp2_mem H2_MEM = {NULL, ng_malloc, ng_free, ng_calloc, ng_realloc};
