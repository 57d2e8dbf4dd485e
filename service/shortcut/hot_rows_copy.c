/* service/shortcut/hot_rows_copy.c -- a RowsTemplate's rows written: stored rows copied by the one
 * row gather (engine/kernels/row_gather.h, rows_lookup's too: runs, a gather, or a zip of two
 * interleaved runs, as the column map was analysed), rows past the table computed by the engine's
 * sincos kernel and, with the GIL, kept (hot_keep's budget) for the next answer.
 */
#include "hot_rows.h"

#include <stdlib.h>

#define PAST_STACK 4096 /* bytes of one computed [cos | sin] row kept on the stack; longer ones are allocated */

/* Row r past t's table kept (its [cos | sin] items, `bytes` of them, copied from row), if the
 * budget allows; with the GIL only. */
static void keep_row(RowsTemplate *t, int64_t r, const char *row, size_t bytes)
{
    Py_ssize_t i = (Py_ssize_t)(r - t->length), table = GROWN_ROWS * (Py_ssize_t)sizeof(char *);
    if (i >= GROWN_ROWS) return;
    if (!t->grown) {
        if (!hot_keep(&t->keep, table)) return;
        if (!(t->grown = calloc(GROWN_ROWS, sizeof(char *)))) {
            hot_unkeep(&t->keep, table);
            return;
        }
        t->grown_bytes = table;
    }
    if (!hot_keep(&t->keep, (Py_ssize_t)bytes)) return;
    char *k = t->grown ? malloc(bytes) : NULL;   /* (the budget may have dropped every template's rows) */
    if (!k) {
        hot_unkeep(&t->keep, (Py_ssize_t)bytes);
        return;
    }
    memcpy(k, row, bytes);
    t->grown[i] = k;
    t->grown_bytes += (Py_ssize_t)bytes;
}

int hot_rows_into(char **slots, RowsTemplate *t, const Sel *rows, int keep)
{
    size_t es = (size_t)t->itemsize, drb = (size_t)t->map.width * es, half = (size_t)t->nfreq * es;
    for (int a = 0; a < t->narr; a++)   /* the stored rows (those past the table are written below) */
        row_map_rows(slots[a], &t->map, (const char *)t->arr[a].buf, t->src_width, es, rows->v, rows->start, rows->step,
                     rows->n, t->offset, t->length);
    if (rows->n == 0 || rows->hi + t->offset < t->length) return 0;
    const NativeApi *api = hot_cfg.kernels;
    _Alignas(8) char stack[PAST_STACK];
    char *row = 2 * half <= sizeof stack ? stack : malloc(2 * half);
    if (!row) return -1;
    int over = 0;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        int64_t r = hot_sel_at(rows, i) + t->offset;
        if (r < t->length) continue;
        const char *items = keep && t->grown && r - t->length < GROWN_ROWS ? t->grown[r - t->length] : NULL;
        if (!items) {
            int o = api->sincos(t->freqs, t->nfreq, &r, 1, t->scale, row, row + half, t->dt);
            if (keep && !o) keep_row(t, r, row, 2 * half);
            over |= o;
            items = row;
        }
        for (int a = 0; a < t->narr; a++) row_map_copy(slots[a] + drb * (size_t)i, &t->past[a], items, es);
    }
    if (row != stack) free(row);
    return over;
}
