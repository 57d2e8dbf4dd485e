/* service/shortcut/hot_axes.c -- per-axis positions: a RowsTemplate with several axes (rope's
 * mrope_section and axes_dim, engine/tables/rope_axes.py) answers a body whose selection is k
 * lists of positions, "position_ids": [[t...], [h...], [w...]], by gathering each output column
 * from the stored row at its axis's position: out[i, j] = table[ids[axis[j]][i], colmap[j]], the
 * gather the full path's serve() does; a row past the table is computed as the full path computes
 * it. Lists only; JSON answers are the full path's.
 */
#include "hot_rows.h"

#include <stdlib.h>

/* Row i of one array into d, each column from the row of its axis (s[axis]): run by run, or
 * column by column (short runs). */
static void copy_row(char *d, const RowsTemplate *t, const char *const *s)
{
    size_t es = (size_t)t->itemsize;
    if (t->col_axis && es == 4) {
        for (Py_ssize_t j = 0; j < t->map.width; j++) memcpy(d + 4 * (size_t)j, s[t->col_axis[j]] + 4 * (size_t)t->map.idx[j], 4);
    } else if (t->col_axis) {
        for (Py_ssize_t j = 0; j < t->map.width; j++) memcpy(d + 2 * (size_t)j, s[t->col_axis[j]] + 2 * (size_t)t->map.idx[j], 2);
    } else {
        for (Py_ssize_t r = 0; r < t->map.nruns; r++) {
            const Run *u = &t->map.runs[r];
            if (u->src < 0) memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
            else memcpy(d + (size_t)u->dst * es, s[u->axis] + (size_t)u->src * es, (size_t)u->len * es);
        }
    }
}

/* Each array's rows into slots[a]. An axis's row past the table is computed into buf (2 * nfreq
 * items per axis) by the engine's sincos kernel, [cos | sin] as the full path computes it (set_past
 * checked that array a's stored column c is item a * nfreq + c of it). 0, or 1 on an overflow. */
static int rows_into(char **slots, const RowsTemplate *t, const Sel *sels, char *buf)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->map.width * es;
    size_t half = (size_t)t->nfreq * es;
    const char *s[2][MAX_AXES];
    int over = 0;
    for (Py_ssize_t i = 0; i < sels[0].n; i++) {
        for (int a = 0; a < t->naxes; a++) {
            int64_t r = sels[a].v[i] + t->offset;
            if (r < t->length) {
                for (int k = 0; k < t->narr; k++) s[k][a] = (const char *)t->arr[k].buf + (size_t)r * srb;
                continue;
            }
            char *row = buf + 2 * half * (size_t)a;
            over |= hot_cfg.kernels->sincos(t->freqs, t->nfreq, &r, 1, t->scale, row, row + half, t->dt);
            for (int k = 0; k < t->narr; k++) s[k][a] = row + half * (size_t)k;
        }
        for (int k = 0; k < t->narr; k++) copy_row(slots[k] + drb * (size_t)i, t, s[k]);
    }
    return over;
}

/* declared, and described, in hot.h */
int hot_axes_rows_into(char **slots, const RowsTemplate *t, const Sel *all)
{
    Py_ssize_t n = all->n / t->naxes;
    Sel sels[MAX_AXES];
    int past = 0;
    for (int a = 0; a < t->naxes; a++) {
        sels[a].v = all->v + a * n;
        sels[a].n = n;
        for (Py_ssize_t i = 0; i < n; i++) past |= sels[a].v[i] + t->offset >= t->length;
    }
    char *buf = past ? malloc((size_t)(2 * t->naxes * t->nfreq * t->itemsize)) : NULL;
    if (past && !buf) return -1;
    int over = rows_into(slots, t, sels, buf);
    free(buf);
    return over;
}

/* declared, and described, in hot.h */
PyObject *hot_axes_answer(RowsTemplate *t, const Span *sp, const Http *http)
{
    if (t->naxes < 2 || (http && http->json)) Py_RETURN_NONE;   /* JSON: the full path's */
    Sel sels[MAX_AXES];
    for (int a = 0; a < t->naxes; a++) sels[a].heap = NULL;
    PyObject *out = NULL, *head = NULL;
    char *buf = NULL;
    int rc = hot_parse_axes(sp, t->naxes, t->max_rows, sels);
    int64_t hi = 0;
    for (int a = 0; rc == 0 && a < t->naxes; a++) hi = sels[a].hi > hi ? sels[a].hi : hi;
    if (rc == -2) goto done;
    if (rc < 0 || !hot_rows_answerable(t, hi)) {   /* refused, or past a table it computes no rows of */
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    if (hi + t->offset >= t->length && !(buf = PyMem_Malloc((size_t)(2 * t->naxes * t->nfreq * t->itemsize)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = sels[0].n;
    int got = hot_header((PyObject *)t, t->heads, n, -1, &head);
    if (got == 0) {
        out = Py_NotImplemented;
        Py_INCREF(out);
    } else if (got > 0) {
        Py_ssize_t block = n * t->map.width * t->itemsize;
        Out o;
        if (hot_bytes_of(http, head, t->narr * block, t->tail, 0, &o) == 0) {
            char *slots[2] = {o.fill, o.fill + block};
            int over = rows_into(slots, t, sels, buf);
            out = hot_finish(&o);
            if (over) {   /* a computed value overflows the dtype: the full path refuses it */
                Py_DECREF(out);
                out = Py_None;
                Py_INCREF(out);
            }
        }
    }
done:
    PyMem_Free(buf);
    Py_XDECREF(head);
    for (int a = 0; a < t->naxes; a++) hot_sel_free(&sels[a]);
    return out;
}
