/* engine/kernels/native.h -- what the files of the extension posenc.engine.kernels._native
 * share. Private to them: _native.c documents the module and says which file holds what.
 * Functions and data that one file defines and another uses are named native_*.
 */
#ifndef POSENC_NATIVE_H
#define POSENC_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define POSENC_X86 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

#include "alibi_cell.h" /* the ALiBi cell, shared with service/shortcut/_hot */
#include "row_gather.h" /* the row gather, shared with service/shortcut/_hot (rows_lookup's) */
#include "round_f64.h"  /* the rounding to float16/bfloat16 and the sincos row, shared with the C reader */

/* Random rows of a large table miss the caches; asking for rows a few iterations ahead hides
 * most of that latency (a hint only: no effect on results, none where unsupported). */
#define PREFETCH_AHEAD 8
ALWAYS_INLINE void native_prefetch_row(const char *p, size_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (size_t off = 0; off < bytes && off < 512; off += 64) __builtin_prefetch(p + off, 0, 3);
#else
    (void)p; (void)bytes;
#endif
}

/* The interleaved layout's expand: out[2k] = out[2k+1] = src[k] for h elements of `es` bytes (2 or 4);
 * inlined into each dispatch level (native_levels.c). The row gather's own (row_gather.h rg_twice,
 * which rows_lookup's and the shortcut's interleaved rows take): one rule. */
ALWAYS_INLINE void native_interleave_row(char *out, const char *src, Py_ssize_t h, Py_ssize_t es)
{
    rg_twice(out, src, h, (size_t)es);
}

#define BLOCK 512 /* float64 staging buffer per row chunk: 4 KiB, stays in L1 */

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, N_DT = 3 };

typedef int (*cvt_fn)(const double *src, void *dst, Py_ssize_t n, int count_inf);
typedef void (*alibi_vals_fn)(double *, const double *, Py_ssize_t, double, double, int, double);
typedef int (*alibi_f32_fn)(float *, const double *, Py_ssize_t, double, double, int, double);
typedef void (*t5_row_fn)(int32_t *, const int64_t *, Py_ssize_t, int64_t, const int32_t *, int64_t);
typedef void (*interleave_fn)(char *, const char *, Py_ssize_t, Py_ssize_t);

typedef struct {
    const char *name;
    const char *features[5]; /* NULL-terminated */
    cvt_fn cvt[N_DT];
    alibi_vals_fn alibi_vals;
    alibi_f32_fn alibi_f32;
    t5_row_fn t5_row;
    interleave_fn interleave;
} Level;

/* The dispatch levels, best first, the baseline last (native_levels.c), and the one in use. */
extern const Level native_levels[];
extern const int native_n_levels;
extern const Level *native_level;
int native_level_supported(const Level *lv);

extern PyMethodDef native_kernel_methods[];
/* the sincos kernel's loop: cos/sin of float64(pos[i]) * f[k], times scale, rounded once to dt, and
 * the dtype names (native_kernels.c); lent to the shortcut through native_api.h, used by rows_lookup */
void native_sincos_run(const Level *lv, const double *f, Py_ssize_t h, const int64_t *pos, Py_ssize_t n,
                       double scale, char *oc, char *os, int dt, int *over);
/* alibi_block's loop (native_kernels.c; lent to the shortcut too): out [H, nq, nk] in dt, *over set
 * when an unmasked cell is +-inf; 0, or -1 out of memory. Needs no GIL. */
/* t5_block's loop (native_kernels.c; lent to the shortcut too): out [nq, nk] int32 =
 * lut[clamp(k - q, -R, R) + R]. Needs no GIL. */
void native_t5_run(const Level *lv, const int32_t *lut, Py_ssize_t R, const int64_t *q, Py_ssize_t nq,
                   const int64_t *k, Py_ssize_t nk, int32_t *out);
int native_alibi_run(const Level *lv, const double *slopes, Py_ssize_t H, const int64_t *q, Py_ssize_t nq,
                     const int64_t *k, Py_ssize_t nk, char *out, int dt, int symmetric, int mask, int *over);
int native_parse_dtype(PyObject *obj);

/* native_lookup.c: the resolved lookup of engine/reader/lookup.py (RowGather, rows_lookup). */
PyObject *native_rows_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char native_rows_lookup_doc[];
int native_lookup_ready(PyObject *module); /* RowGather readied and added: 0, or -1 set */

#endif
