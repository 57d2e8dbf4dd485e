/* service/shortcut/hot_rows.h -- the rows kind's own: its struct and what its files share
 * (hot_rows.c, the type and its ops; hot_rows_copy.c, rows written; hot_json.c, JSON answers;
 * hot_axes.c, per-axis positions). Only those files include it: nothing else knows a
 * RowsTemplate (tests/service/shortcut/test_hot_layers.py holds it so).
 */
#ifndef POSENC_HOT_ROWS_H
#define POSENC_HOT_ROWS_H

#include "hot.h"

/* One output row from one stored row: runs of columns, each copied, or zeroed (src < 0); with
 * several axes, from the row of axis `axis`'s position. */
typedef struct {
    Py_ssize_t dst, src, len, axis;
} Run;

typedef struct RowsTemplate {
    HOT_TEMPLATE_HEAD
    Py_buffer arr[2];
    int narr;
    Py_ssize_t length, src_width, itemsize, width, offset, max_rows;
    int lists_only;
    Run *runs;
    Py_ssize_t nruns;
    int32_t *idx; /* many short runs and no zeros (interleaved layouts): a plain column gather */
    Py_ssize_t zip[2]; /* idx is two column runs from these, interleaved (zip[0] < 0: it is not) */
    int naxes;         /* > 1: column j is read at the position of axis col_axis[j] (hot_axes.c) */
    uint8_t *col_axis; /* with idx, each column's axis (naxes > 1); runs carry theirs */
    /* rows past the table, computed (NULL freqs: declined): row r = position + offset < row_limit
     * is [cos | sin] of float64(r) * freqs[k] times scale in dtype dt (the engine's sincos kernel):
     * stored column c of array a is its item smap[a * src_width + c], and output column j item
     * pmap[a * width + j] (-1: zero), through the column map */
    double *freqs;
    Py_ssize_t nfreq;
    double scale;
    int dt;
    int64_t row_limit;
    int32_t *pmap, *smap;
    Run *pruns;           /* pmap as runs of consecutive items (src < 0: zeros), array after array */
    Py_ssize_t npruns[2];
    int pgather[2];       /* the map has no zero and no two consecutive items: gathered item by item */
    Py_ssize_t pzip[2][2]; /* and is two runs of items from these, interleaved (pzip[a][0] < 0: it is not) */
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

/* zip = the two column runs idx[0 .. w) interleaves (idx[j] = zip[j & 1] + j / 2), or zip[0] = -1 (not
 * such, or idx NULL): copied by a vector zip instead of a gather (hot_rows_copy.c) */
void hot_zip_of(Py_ssize_t zip[2], const int32_t *idx, Py_ssize_t w);

void hot_copy_rows(char *dst, const RowsTemplate *t, const char *table, const Sel *rows);
/* Whether the template answers every row of a selection whose largest position is `hi`: inside
 * the table, or past it and computed. */
static inline int hot_rows_answerable(const RowsTemplate *t, int64_t hi)
{
    return hi + t->offset < t->length || (t->freqs && hot_cfg.kernels && hi + t->offset < t->row_limit);
}
/* Each array's rows into slots[a] (unaligned: any alignment), those past the table computed:
 * 0, or 1 when a computed value overflows the dtype (the full path refuses it), -1 error set. */
int hot_rows_into(char **slots, RowsTemplate *t, const Sel *rows, int unaligned, int keep);

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
