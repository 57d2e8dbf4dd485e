/* engine/kernels/native_api.h -- what engine.kernels._native lends another extension (the
 * template shortcut, service/shortcut/_hot) through a capsule, so that a row the shortcut
 * computes past a stored table is the engine's own kernel's row: the same float64 angle, libm
 * call, scale and one rounding, at the dispatch level in use; and an ALiBi block in float16 or
 * bfloat16, or a T5 bucket block, the engine's own block. No second copy of the rule.
 *
 *   engine.kernels._native.API   PyCapsule named NATIVE_API_NAME, pointing at a NativeApi
 *
 * The row gather (stored rows through a column map) is shared by source instead: row_gather.h,
 * which both extensions build (rows_lookup and the shortcut's RowsTemplate), each with its own
 * SIMD clones; an indirect call per row through a capsule would cost more than a short row's copy.
 */
#ifndef POSENC_NATIVE_API_H
#define POSENC_NATIVE_API_H

#include <stdint.h>

#define NATIVE_API_NAME "posenc.engine.kernels._native.API"
#define NATIVE_API_VERSION 2

typedef struct {
    int version; /* NATIVE_API_VERSION */
    /* out_cos[i, k], out_sin[i, k] = round_dt(cos|sin(float64(pos[i]) * freqs[k]) * scale), rows of h
     * items (C order, the dtype's storage items, any alignment of 2/4 bytes as the kernels take);
     * the sincos kernel itself. Returns 1 when an output is +-inf (the full path refuses it). */
    int (*sincos)(const double *freqs, Py_ssize_t h, const int64_t *pos, Py_ssize_t n, double scale,
                  char *out_cos, char *out_sin, int dt);
    /* The kernels' code of a dtype name (str); -1 with ValueError set for anything else. */
    int (*dtype_code)(PyObject *name);
    /* Bytes of one item of a dtype code (4 or 2). */
    int (*itemsize)(int dt);
    /* The ALiBi block kernel (engine.kernels.alibi_block): out [H, nq, nk] items of dt (aligned to
     * their size), 0 - slopes[h] * (q[a] - k[b]) (|.| when symmetric) rounded once, mask_future's
     * cells the dtype's most negative finite value. Returns 1 when an unmasked cell is +-inf (the
     * full path refuses it), 0, or -1 out of memory. Needs no GIL. */
    int (*alibi)(const double *slopes, Py_ssize_t H, const int64_t *q, Py_ssize_t nq, const int64_t *k, Py_ssize_t nk,
                 char *out, int dt, int symmetric, int mask_future);
    /* The T5 bucket block kernel (engine.kernels.t5_block): out [nq, nk] int32 (aligned) =
     * lut[clamp(k[b] - q[a], -R, R) + R]. Needs no GIL. */
    void (*t5)(const int32_t *lut, Py_ssize_t R, const int64_t *q, Py_ssize_t nq, const int64_t *k, Py_ssize_t nk,
               int32_t *out);
} NativeApi;

#endif
