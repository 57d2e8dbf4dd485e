/* service/grpclane/h2_nv.h -- h2_nv.c's byte blocks, for _h2.c */
#ifndef POSENC_H2_NV_H
#define POSENC_H2_NV_H

#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>

/* bytes appended at len; a reader takes them from off (drained: start over) */
typedef struct {
    char *p;
    size_t len, off, cap;
} Buf;

int buf_add(Buf *b, const void *src, size_t n); /* -1: out of memory */

/* a header name as grpc-message carries it: percent-encoded outside printable ASCII, and '%' */
int h2_name_add(Buf *b, const uint8_t *name, size_t len);

/* name/value pairs (a sequence of 2-tuples of bytes) as nghttp2_nv, their bytes copied into one
 * block (*block, freed by the caller); extra: pairs of C strings before them, NULL-ended. NULL
 * with a Python error set. */
nghttp2_nv *h2_make_nv(PyObject *pairs, const char *const *extra, size_t *count, char **block);

/* nghttp2's allocator: the blocks it holds now, every session together (_h2.live()) */
extern long h2_blocks;
extern nghttp2_mem H2_MEM;

#endif
