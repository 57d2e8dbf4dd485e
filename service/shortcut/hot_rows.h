/* service/shortcut/hot_rows.h -- the rows kind's own: its struct and what its files share
 * (hot_rows.c, the type and its ops, the family's row plan read; hot_rows_copy.c, rows written by
 * the one row gather, engine/kernels/row_gather.h; hot_json.c, JSON answers; hot_axes.c, per-axis
 * positions). Only those files include it: nothing else knows a
 * RowsTemplate (tests/service/shortcut/test_hot_layers.py holds it so).
 */
#ifndef POSENC_HOT_ROWS_H
#define POSENC_HOT_ROWS_H

#include "hot.h"
#include "row_gather.h" /* engine/kernels: the one row gather (rows_lookup's too), its column map analysed once */

typedef struct RowsTemplate {
    HOT_TEMPLATE_HEAD
    Py_buffer arr[2];
    int narr;
    Py_ssize_t length, src_width, itemsize, offset, max_rows;
    int lists_only;
    RowMap map;        /* output columns <- a stored row's (row_gather.h): map.width of them */
    int naxes;         /* > 1: column j is read at the position of axis col_axis[j] (hot_axes.c) */
    uint8_t *col_axis; /* each column's axis (naxes > 1); map's runs carry theirs */
    /* rows past the table, computed (NULL freqs: declined): row r = position + offset < row_limit
     * is [cos | sin] of float64(r) * freqs[k] times scale in dtype dt (the engine's sincos kernel):
     * stored column c of array a is its item smap[a * src_width + c], and the output row of array
     * a is that row through past[a] (the column map composed with smap, analysed as map is) */
    double *freqs;
    Py_ssize_t nfreq;
    double scale;
    int dt;
    int64_t row_limit;
    int32_t *smap;
    RowMap past[2];
    /* JSON answers (enable_json(); NULL json_parts: none), hot_json.c */
    PyObject *json_parts; /* tuple: the narr + 1 bytes around the arrays' rows */
    int json_flat;        /* each array's rows as one flat list (a v2 JSON output's data), not a list of rows */
    int json_in_order;    /* texts kept as output rows (many short runs, no item twice: interleaved layouts) */
    PyObject *zero_text;  /* bytes: a zero item's text */
    PyObject *text_for;   /* (array, row) -> the stored row's JSON text; never called here (a miss) */
    char **texts;         /* [narr * text_rows], allocated at the first JSON answer: NULL or a row's text */
    Py_ssize_t text_rows; /* rows with texts: the table's, and GROWN_ROWS past it when computed */
    Py_ssize_t text_bytes, text_budget, text_cursor; /* over the budget, texts are freed from the cursor on */
    /* rows past the table kept once computed (hot_rows_into with the GIL): [cos | sin] items of row
     * length + i in grown[i], i < GROWN_ROWS */
    char **grown;
    Py_ssize_t grown_bytes;
    HotKeeper keep; /* on the keepers' list while it keeps texts or rows (hot_keep) */
} RowsTemplate;

/* Whether the template answers every row of a selection whose largest position is `hi`: inside
 * the table, or past it and computed. */
static inline int hot_rows_answerable(const RowsTemplate *t, int64_t hi)
{
    return hi + t->offset < t->length || (t->freqs && hot_cfg.kernels && hi + t->offset < t->row_limit);
}
/* Each array's rows into slots[a] (any alignment), those past the table computed (and, with keep
 * and the GIL, kept): 0, or 1 when a computed value overflows the dtype (the full path refuses
 * it), -1 out of memory (no error set). */
int hot_rows_into(char **slots, RowsTemplate *t, const Sel *rows, int keep);

/* The JSON answer of rows from a RowsTemplate with enable_json(): bytes, None (declined: a row
 * past the table), NotImplemented (rows' texts missing: noted for missing()), NULL error. */
PyObject *hot_rows_json(RowsTemplate *t, const Sel *rows, const Http *http);
void hot_json_clear(RowsTemplate *t); /* frees the texts kept */
extern PyMethodDef hot_json_methods[]; /* RowsTemplate's enable_json, set_text, row */

/* The answer of a RowsTemplate with naxes > 1 to the lists of span sp (hot_answer_body's). */
PyObject *hot_axes_answer(RowsTemplate *t, const Span *sp, const Http *http);
/* Raw positions `all` ([k, n], axis after axis; hot_fill.c's) to each array's n rows in slots[a],
 * as hot_rows_into: 0, 1 on an overflow, -1 out of memory (no error set: it may run without the GIL). */
int hot_axes_rows_into(char **slots, const RowsTemplate *t, const Sel *all);

#endif /* POSENC_HOT_ROWS_H */
