/* service/shortcut/hot_answer.c -- a template body answered: answer(), and the fills of its
 * rows (RowsTemplate: table rows through a column map) and blocks (AlibiTemplate: the cells are
 * hot_blocks.c's) behind the safetensors header and, for the lane, the HTTP head.
 */
#include "hot.h"

#include <stdlib.h>

/* Row fills store items at any alignment: a rows answer may start at any byte, behind an HTTP
 * head of any length (bytes_of). GCC and Clang are told so (one unaligned move on x86, and the
 * loops still vectorize); elsewhere each item goes through memcpy. The table rows are aligned
 * by itemsize. */
#if defined(__GNUC__)
typedef uint32_t any32 __attribute__((aligned(1), may_alias));
typedef uint16_t any16 __attribute__((aligned(1), may_alias));
#define PUT(T, d, j, v) ((d)[j] = (v))
#else
typedef uint32_t any32;
typedef uint16_t any16;
#define PUT(T, d, j, v) do { T v_ = (v); memcpy((char *)(d) + (j) * sizeof v_, &v_, sizeof v_); } while (0)
#endif

#define GATHER(name, D, T)                                                                    \
    VECTOR_CLONES static void name(D *restrict d, const T *restrict s, const int32_t *restrict idx, \
                                   Py_ssize_t w)                                              \
    {                                                                                         \
        for (Py_ssize_t j = 0; j < w; j++) PUT(T, d, j, s[idx[j]]);                             \
    }
GATHER(gather32, any32, uint32_t)
GATHER(gather16, any16, uint16_t)

/* The bulk of a zip in 32-byte vectors (GCC and Clang vector extensions: a shuffle each half, the
 * instructions of whichever clone runs): items a[0 .. k) and b[0 .. k) interleaved into d, k
 * returned (a multiple of a vector's items, <= h). Unaligned loads and stores through memcpy. */
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t zv32 __attribute__((vector_size(32)));
typedef uint16_t zv16 __attribute__((vector_size(32)));
#if defined(__clang__)
#define SHUF32(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#define SHUF16(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define SHUF32(x, y, ...) __builtin_shuffle(x, y, (zv32){__VA_ARGS__})
#define SHUF16(x, y, ...) __builtin_shuffle(x, y, (zv16){__VA_ARGS__})
#endif
static inline __attribute__((always_inline)) Py_ssize_t zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h,
                                                                  size_t es)
{
    Py_ssize_t n = (Py_ssize_t)(32 / es), k = 0;
    for (; k + n <= h; k += n, a += 32, b += 32, d += 64) {
        if (es == 4) {
            zv32 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = SHUF32(x, y, 0, 8, 1, 9, 2, 10, 3, 11);
            hi = SHUF32(x, y, 4, 12, 5, 13, 6, 14, 7, 15);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        } else {
            zv16 x, y, lo, hi;
            memcpy(&x, a, 32);
            memcpy(&y, b, 32);
            lo = SHUF16(x, y, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            hi = SHUF16(x, y, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            memcpy(d, &lo, 32);
            memcpy(d + 32, &hi, 32);
        }
    }
    return k;
}
#else
static inline Py_ssize_t zip_vectors(char *d, const char *a, const char *b, Py_ssize_t h, size_t es)
{
    (void)d, (void)a, (void)b, (void)h, (void)es;
    return 0;
}
#endif
/* The gather above when the columns are two runs interleaved (a sinusoidal "interleaved"
 * layout, RoPE's interleaved cos and sin): d = a0 b0 a1 b1 ..., plain loads and shuffles
 * instead of one gather per item. */
#define ZIP(name, D, T)                                                                     \
    VECTOR_CLONES static void name(D *restrict d, const T *a, const T *b, Py_ssize_t w)     \
    {                                                                                       \
        Py_ssize_t h = w / 2, k = zip_vectors((char *)d, (const char *)a, (const char *)b, h, sizeof(T)); \
        for (; k < h; k++) {                                                                \
            PUT(T, d, 2 * k, a[k]);                                                         \
            PUT(T, d, 2 * k + 1, b[k]);                                                     \
        }                                                                                   \
        if (w & 1) PUT(T, d, w - 1, a[h]);                                                  \
    }

ZIP(zip32, any32, uint32_t)
ZIP(zip16, any16, uint16_t)

void hot_copy_rows(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(hot_sel_at(rows, i) + t->offset) * srb;
        char *d = dst + drb * (size_t)i;
        if (t->idx && t->zip[0] >= 0) {
            if (es == 4) zip32((any32 *)d, (const uint32_t *)s + t->zip[0], (const uint32_t *)s + t->zip[1], t->width);
            else zip16((any16 *)d, (const uint16_t *)s + t->zip[0], (const uint16_t *)s + t->zip[1], t->width);
            continue;
        }
        if (t->idx) {
            if (es == 4) gather32((any32 *)d, (const uint32_t *)s, t->idx, t->width);
            else gather16((any16 *)d, (const uint16_t *)s, t->idx, t->width);
            continue;
        }
        for (Py_ssize_t r = 0; r < t->nruns; r++) {
            const Run *u = &t->runs[r];
            if (u->src < 0)
                memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
            else if (u->len == 1 && es == 4)
                memcpy(d + 4 * (size_t)u->dst, s + 4 * (size_t)u->src, 4);
            else if (u->len == 1)
                memcpy(d + 2 * (size_t)u->dst, s + 2 * (size_t)u->src, 2);
            else
                memcpy(d + (size_t)u->dst * es, s + (size_t)u->src * es, (size_t)u->len * es);
        }
    }
}

/* copy_rows, for a destination that may not be aligned to the item size (the gather loops
 * assume it is): column by column through memcpy. */
static void copy_rows_unaligned(char *dst, const RowsTemplate *t, const char *table, const Sel *rows)
{
    size_t es = (size_t)t->itemsize, srb = (size_t)t->src_width * es, drb = (size_t)t->width * es;
    if (!t->idx || ((uintptr_t)dst % es == 0 && drb % es == 0)) {
        hot_copy_rows(dst, t, table, rows);
        return;
    }
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        const char *s = table + (size_t)(hot_sel_at(rows, i) + t->offset) * srb;
        char *d = dst + drb * (size_t)i;
        for (Py_ssize_t j = 0; j < t->width; j++) memcpy(d + (size_t)j * es, s + (size_t)t->idx[j] * es, es);
    }
}

#define PAST_STACK 4096 /* bytes of one computed [cos | sin] row kept on the stack; longer ones are allocated */

/* One computed row's items into array a's output row d: d[j] = row[pmap[a * width + j]] (0 at -1),
 * run by run. */
static void past_row(char *d, const RowsTemplate *t, int a, const char *row)
{
    size_t es = (size_t)t->itemsize;
    const Run *runs = t->pruns + (size_t)a * (size_t)t->width;
    const Py_ssize_t *z = t->pzip[a];
    if (t->pgather[a] && z[0] >= 0) {   /* interleaved layouts: a zip of the two halves */
        if (es == 4) zip32((any32 *)d, (const uint32_t *)row + z[0], (const uint32_t *)row + z[1], t->width);
        else zip16((any16 *)d, (const uint16_t *)row + z[0], (const uint16_t *)row + z[1], t->width);
        return;
    }
    if (t->pgather[a]) {   /* any other map without zeros or runs: one gather */
        const int32_t *m = t->pmap + (size_t)a * (size_t)t->width;
        if (es == 4) gather32((any32 *)d, (const uint32_t *)row, m, t->width);
        else gather16((any16 *)d, (const uint16_t *)row, m, t->width);
        return;
    }
    for (Py_ssize_t r = 0; r < t->npruns[a]; r++) {
        const Run *u = &runs[r];
        if (u->src < 0) memset(d + (size_t)u->dst * es, 0, (size_t)u->len * es);
        else memcpy(d + (size_t)u->dst * es, row + (size_t)u->src * es, (size_t)u->len * es);
    }
}

/* declared, and described, in hot.h; runs without the GIL (fill's large copies) when !keep */
/* Row r past t's table kept (its [cos | sin] items, `bytes` of them, copied from row), if the
 * budget allows; with the GIL only. */
static void keep_row(RowsTemplate *t, int64_t r, const char *row, size_t bytes)
{
    Py_ssize_t i = (Py_ssize_t)(r - t->length), table = GROWN_ROWS * (Py_ssize_t)sizeof(char *);
    if (i >= GROWN_ROWS) return;
    if (!t->grown) {
        if (!hot_keep(t, table)) return;
        if (!(t->grown = calloc(GROWN_ROWS, sizeof(char *)))) {
            hot_unkeep(t, table);
            return;
        }
        t->grown_bytes = table;
    }
    if (!hot_keep(t, (Py_ssize_t)bytes)) return;
    char *k = t->grown ? malloc(bytes) : NULL;   /* (the budget may have dropped every template's rows) */
    if (!k) {
        hot_unkeep(t, (Py_ssize_t)bytes);
        return;
    }
    memcpy(k, row, bytes);
    t->grown[i] = k;
    t->grown_bytes += (Py_ssize_t)bytes;
}

int hot_rows_into(char **slots, RowsTemplate *t, const Sel *rows, int unaligned, int keep)
{
    if (rows->n > 0 && rows->hi + t->offset < t->length) {   /* all stored: plain copies */
        for (int a = 0; a < t->narr; a++) {
            if (unaligned) copy_rows_unaligned(slots[a], t, (const char *)t->arr[a].buf, rows);
            else hot_copy_rows(slots[a], t, (const char *)t->arr[a].buf, rows);
        }
        return 0;
    }
    const NativeApi *api = hot_cfg.kernels;
    size_t es = (size_t)t->itemsize, drb = (size_t)t->width * es, half = (size_t)t->nfreq * es;
    _Alignas(8) char stack[PAST_STACK];
    char *row = 2 * half <= sizeof stack ? stack : malloc(2 * half);
    if (!row) return -1;
    int over = 0;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        int64_t p = hot_sel_at(rows, i), r = p + t->offset;
        if (r < t->length) {
            Sel one = {.n = 1, .v = &p}; /* hot_copy_rows adds the offset */
            for (int a = 0; a < t->narr; a++) {
                if (unaligned) copy_rows_unaligned(slots[a] + drb * (size_t)i, t, (const char *)t->arr[a].buf, &one);
                else hot_copy_rows(slots[a] + drb * (size_t)i, t, (const char *)t->arr[a].buf, &one);
            }
            continue;
        }
        const char *items = keep && t->grown && r - t->length < GROWN_ROWS ? t->grown[r - t->length] : NULL;
        if (!items) {
            int o = api->sincos(t->freqs, t->nfreq, &r, 1, t->scale, row, row + half, t->dt);
            if (keep && !o) keep_row(t, r, row, 2 * half);
            over |= o;
            items = row;
        }
        for (int a = 0; a < t->narr; a++) past_row(slots[a] + drb * (size_t)i, t, a, items);
    }
    if (row != stack) free(row);
    return over;
}

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
    if (http) {
        dl = decimal(digits, (size_t)(hl + body + tl));
        pl = PyBytes_GET_SIZE(http->pre);
        ql = PyBytes_GET_SIZE(http->post) + (http->close ? (Py_ssize_t)sizeof CLOSE_LINE - 1 : 0) + 2;
    }
    Py_ssize_t at = pl + dl + ql; /* where the safetensors answer starts */
    o->obj = PyBytes_FromStringAndSize(NULL, at + hl + body + tl);
    if (!o->obj) return -1;
    char *w = PyBytes_AS_STRING(o->obj);
    if (http) {
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

/* RowsTemplate's /v1 safetensors answer (ops->v1) to selection sp[0]. */
static PyObject *rows_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    Sel rows = {.heap = NULL};
    PyObject *out = NULL;
    if (t->naxes > 1 || (t->lists_only && *sp->open != '[')) Py_RETURN_NONE;   /* per-axis: v1_axes only */
    int rc = hot_parse_sel(sp, t->max_rows, &rows);
    if (rc == -2) return NULL;
    if (rc < 0 || !hot_rows_answerable(t, rows.hi)) { /* past a table it computes no rows of: the full path's */
        hot_sel_free(&rows);
        Py_RETURN_NONE;
    }
    PyObject *head = NULL;
    int got = hot_header((PyObject *)t, t->heads, rows.n, -1, &head);
    if (got == 0) {
        out = Py_NotImplemented;
        Py_INCREF(out);
    } else if (got > 0) {
        Py_ssize_t block = rows.n * t->width * t->itemsize;
        Out o;
        int rc2 = hot_bytes_of(http, head, t->narr * block, t->tail, 0, &o);   /* copy_rows: any alignment */
        Py_DECREF(head);
        if (rc2 == 0) {
            char *slots[2] = {o.fill, o.fill + block};
            int over = hot_rows_into(slots, t, &rows, 0, 1);
            out = hot_finish(&o);
            if (over) Py_CLEAR(out);
            if (over < 0) PyErr_NoMemory();
            else if (over > 0) {           /* a computed value overflows the dtype: the full path refuses it */
                out = Py_None;
                Py_INCREF(out);
            }
        }
    }
    hot_sel_free(&rows);
    return out;
}

/* RowsTemplate's /v1 JSON answer (ops->v1_json): hot_json.c's, of a template with enable_json(). */
static PyObject *rows_json_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    Sel rows = {.heap = NULL};
    if (t->naxes > 1 || (t->lists_only && *sp->open != '[') || !t->json_parts) Py_RETURN_NONE;
    int rc = hot_parse_sel(sp, t->max_rows, &rows);
    PyObject *out = rc == 0 ? hot_rows_json(t, &rows, http) : rc == -2 ? NULL : Py_NewRef(Py_None);
    hot_sel_free(&rows);
    return out;
}

/* RowsTemplate's per-axis lists (ops->v1_axes): hot_axes.c's. */
static PyObject *rows_axes_answer(HotTemplate *t, const Span *sp, const Http *http)
{
    return hot_axes_answer((RowsTemplate *)t, sp, http);
}

/* RowsTemplate's v2 JSON answer (ops->v2_json): its one list of want[0] positions. */
static PyObject *rows_v2_json(HotTemplate *self, const Span *sp, const Py_ssize_t *want, const Http *http)
{
    RowsTemplate *t = (RowsTemplate *)self;
    if (!t->json_parts || !t->json_flat || t->naxes > 1) Py_RETURN_NONE;
    Sel rows = {.heap = NULL};
    int rc = hot_parse_sel(&sp[0], want[0], &rows); /* a list: '[' */
    PyObject *out = rc == 0 ? hot_rows_json(t, &rows, http) : rc == -2 ? NULL : Py_NewRef(Py_None);
    hot_sel_free(&rows);
    return out;
}

static int rows_arrays(const HotTemplate *t) { return ((const RowsTemplate *)t)->narr; }

static int rows_raw(HotTemplate *t, const char *pos, Py_ssize_t len, Py_ssize_t isz, Sel *rows, Py_ssize_t *block)
{
    return hot_rows_raw((RowsTemplate *)t, pos, len, isz, rows, block);
}

static int rows_fill_into(char **slots, HotTemplate *t, const Sel *rows, int keep)
{
    return hot_rows_fill_into(slots, (RowsTemplate *)t, rows, keep);
}

const struct hot_ops hot_rows_ops = {
    .kind = "rows",
    .name = "RowsTemplate",
    .type = &hot_RowsTemplateType,
    .dims = 1,
    .v1 = rows_answer,
    .v1_json = rows_json_answer,
    .v1_axes = rows_axes_answer,
    .v2_json = rows_v2_json,
    .arrays = rows_arrays,
    .raw_rows = rows_raw,
    .rows_into = rows_fill_into,
};

/* declared, and described, in hot.h */
int64_t *hot_block_positions(const Sel *q, const Sel *k)
{
    int64_t *pos = PyMem_Malloc((size_t)(q->n + k->n) * sizeof(int64_t));
    if (!pos) return NULL;
    for (Py_ssize_t a = 0; a < q->n; a++) pos[a] = hot_sel_at(q, a);
    for (Py_ssize_t b = 0; b < k->n; b++) pos[q->n + b] = hot_sel_at(k, b);
    return pos;
}

/* declared, and described, in hot.h */
int hot_block_start(PyObject *t, PyObject *heads, const Span *sq, const Span *sk, Py_ssize_t max_n, Py_ssize_t groups,
                    Py_ssize_t cells_max, Sel *q, Sel *k, PyObject **head, PyObject **out)
{
    int rc = hot_parse_sel(sq, max_n, q);
    if (rc == 0) rc = hot_parse_sel(sk, max_n, k);
    if (rc == -2) return -1;
    /* each factor checked so that nothing overflows */
    if (rc < 0 || cells_max < 1 || q->n > cells_max / groups || k->n > cells_max / groups / q->n) {
        *out = Py_None;
        Py_INCREF(*out);
        return 0;
    }
    if (!heads) return 1;
    int got = hot_header(t, heads, q->n, k->n, head);
    if (got == 0) {
        *out = Py_NotImplemented;
        Py_INCREF(*out);
    }
    return got;
}

/* AlibiTemplate's /v1 safetensors answer (ops->v1) to selections sp[0] (query), sp[1] (key). */
static PyObject *alibi_answer(HotTemplate *self, const Span *sp, const Http *http)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    /* array bytes: itemsize * H * nq * nk + 4 * H (the float32 slopes) */
    if (hot_block_start((PyObject *)t, t->heads, &sp[0], &sp[1], t->max_n, t->nheads,
                        (t->max_bytes - 4 * t->nheads) / t->itemsize, &q, &k, &head, &out) > 0) {
        Out o;
        if (hot_bytes_of(http, head, t->itemsize * t->nheads * q.n * k.n, t->tail, 1, &o) == 0)
            out = hot_block_done(&o, hot_alibi_block(t, &q, &k, o.fill));
    }
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

/* AlibiTemplate's JSON answers (hot_alibi_json.c): /v1's nested, v2's flat. */
static PyObject *alibi_json_answer(HotTemplate *t, const Span *sp, const Http *http)
{
    return hot_alibi_json((AlibiTemplate *)t, &sp[0], &sp[1], http, 0);
}

static PyObject *alibi_v2_json(HotTemplate *t, const Span *sp, const Py_ssize_t *want, const Http *http)
{
    (void)want;
    return hot_alibi_json((AlibiTemplate *)t, &sp[0], &sp[1], http, 1);
}

static void alibi_limits(const HotTemplate *self, Py_ssize_t *groups, Py_ssize_t *itemsize, Py_ssize_t *max_bytes)
{
    const AlibiTemplate *t = (const AlibiTemplate *)self;
    *groups = t->nheads;
    *itemsize = t->itemsize;
    *max_bytes = t->max_bytes;
}

static int alibi_block_into(const HotTemplate *t, const Sel *q, const Sel *k, char *fill)
{
    return hot_alibi_block((const AlibiTemplate *)t, q, k, fill);
}

const struct hot_ops hot_alibi_ops = {
    .kind = "alibi",
    .name = "AlibiTemplate",
    .type = &hot_AlibiTemplateType,
    .dims = 2,
    .v1 = alibi_answer,
    .v1_json = alibi_json_answer,
    .v2_json = alibi_v2_json,
    .block_limits = alibi_limits,
    .block_into = alibi_block_into,
};

/* ---------------------------------------------------------------------------------------------
 * answer()
 * ------------------------------------------------------------------------------------------- */

/* The value of header `name` (ASGI names are lower-case bytes), borrowed from the caller's
 * list; NULL with no error set if there is none, or several (the full path joins them). */
static PyObject *find_header(PyObject *headers, const char *name, Py_ssize_t len)
{
    PyObject *fast = PySequence_Fast(headers, "headers must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *found = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) continue;
        PyObject *k = PyTuple_GET_ITEM(pair, 0);
        if (PyBytes_Check(k) && PyBytes_GET_SIZE(k) == len && memcmp(PyBytes_AS_STRING(k), name, len) == 0) {
            if (found) {   /* repeated lines are one joined value (RFC 9110): the full path's */
                found = NULL;
                break;
            }
            found = PyTuple_GET_ITEM(pair, 1);
        }
    }
    Py_DECREF(fast);
    return found;
}

/* The template key of body [b, end) for a family's selection names `fields`: the body with the
 * text of each selection (its span, into spans[] in field order) replaced by one NUL byte; a body
 * with no `fields` but the one-field family's `axis_field` (*axes = 1) has that cut. A new
 * reference; NULL with no error set when the body has none (a field missing, spans that overlap);
 * NULL with an error set. */
static PyObject *cut_key(const char *b, const char *end, PyObject *fields, PyObject *axis_field, Span *spans,
                         int *axes)
{
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    int order[MAX_FIELDS] = {0, 1}; /* the spans by position */
    *axes = 0;
    if (nf == 1 && axis_field && hot_find_span(b, end, PyTuple_GET_ITEM(fields, 0), &spans[0]) < 0) {
        if (hot_find_axes_span(b, end, axis_field, &spans[0]) < 0) return NULL;   /* per-axis lists instead */
        *axes = 1;
    }
    for (Py_ssize_t f = 0; f < nf && !*axes; f++)
        if (hot_find_span(b, end, PyTuple_GET_ITEM(fields, f), &spans[f]) < 0) return NULL;
    if (nf == 2 && spans[1].open < spans[0].open) order[0] = 1, order[1] = 0;
    if (nf == 2 && !(spans[order[0]].close < spans[order[1]].open)) return NULL;

    Py_ssize_t klen = (end - b) + nf;
    for (Py_ssize_t f = 0; f < nf; f++) klen -= spans[f].close + 1 - spans[f].open;
    PyObject *key = PyBytes_FromStringAndSize(NULL, klen);
    if (!key) return NULL;
    char *kb = PyBytes_AS_STRING(key);
    const char *from = b;
    for (Py_ssize_t i = 0; i < nf; i++) {
        const Span *sp = &spans[order[i]];
        memcpy(kb, from, (size_t)(sp->open - from));
        kb += sp->open - from;
        *kb++ = '\0';
        from = sp->close + 1;
    }
    memcpy(kb, from, (size_t)(end - from));
    return key;
}

/* declared, and described, in hot.h */
PyObject *hot_answer_body(const char *b, const char *end, PyObject *fields, PyObject *axis_field, PyObject *templates,
                          const Http *http)
{
    if (PyDict_GET_SIZE(templates) == 0) Py_RETURN_NONE;
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    Span spans[MAX_FIELDS];
    int axes;
    PyObject *key = cut_key(b, end, fields, axis_field, spans, &axes);
    if (!key) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *t = PyDict_GetItemWithError(templates, key);
    Py_DECREF(key);
    if (!t) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* held: an allocation may run the garbage collector, whose finalizers may run Python code that
     * drops it from the dict */
    Py_INCREF(t);
    PyObject *out = NULL;
    const struct hot_ops *ops = hot_ops_of(t);
    if (!ops || ops->dims != nf || (axes && !ops->v1_axes)) {
        PyErr_SetString(PyExc_TypeError, "templates must map to RowsTemplate or GridTemplate (1 field), AlibiTemplate "
                                         "or T5Template (2 fields)");
    } else {
        hot_body_fn route = axes ? ops->v1_axes : http && http->json ? ops->v1_json : ops->v1;
        out = route ? route((HotTemplate *)t, spans, http) : Py_NewRef(Py_None);   /* NULL: declined */
    }
    Py_DECREF(t);
    return out;
}

/* declared, and described, in hot.h */
int hot_accepted(PyObject *accepts, PyObject *accept)
{
    PyObject *fmt = PyDict_GetItemWithError(accepts, accept ? accept : Py_None);
    if (!fmt) return PyErr_Occurred() ? -1 : 0;
    long v = PyLong_AsLong(fmt);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v != 0 && v != 1) {
        PyErr_SetString(PyExc_ValueError, "accepts: want {Accept value: 0 (safetensors) or 1 (JSON)}");
        return -1;
    }
    return 1 + (int)v;
}

PyDoc_STRVAR(answer_doc, "answer(raw, headers, accepts, templates, family) -> bytes | None | NotImplemented\n--\n\n"
             "The safetensors answer of a body whose spec is a known template (its Accept one that accepts\n"
             "maps to 0, safetensors); None: declined;\n"
             "NotImplemented: the template lacks the header of its shape (see missing()).");

static PyObject *answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!hot_configured()) return NULL;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "answer(raw: bytes, headers, accepts: dict, templates: dict, family: str)");
        return NULL;
    }
    PyObject *raw = args[0];
    PyObject *fields = hot_fields_of(args[4]);
    if (!fields) return NULL;
    if (PyBytes_GET_SIZE(raw) > hot_cfg.max_body || PyDict_GET_SIZE(args[3]) == 0) Py_RETURN_NONE;
    PyObject *acc = find_header(args[1], "accept", 6);
    if (!acc && PyErr_Occurred()) return NULL;
    int ok = hot_accepted(args[2], acc);
    if (ok != 1) {   /* safetensors only: the ASGI front's hot answer is (JSON: the lane's) */
        if (ok < 0) return NULL;
        Py_RETURN_NONE;
    }
    const char *b = PyBytes_AS_STRING(raw);
    return hot_answer_body(b, b + PyBytes_GET_SIZE(raw), fields, hot_axis_field_of(args[4]), args[3], NULL);
}

PyDoc_STRVAR(cut_doc, "cut(raw, family) -> (key, spans) | None\n--\n\n"
             "The template key of a body of family (the key answer() looks its template up by) and the\n"
             "(start, end) offsets of its selections' texts, in the family's field order (or of its per-axis\n"
             "lists, sent instead); None when the body has none. templates.py learns templates by it.");

static PyObject *cut(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!hot_configured()) return NULL;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "cut(raw: bytes, family: str)");
        return NULL;
    }
    PyObject *fields = hot_fields_of(args[1]);
    if (!fields) return NULL;
    const char *b = PyBytes_AS_STRING(args[0]);
    Span spans[MAX_FIELDS];
    int axes;
    PyObject *key = cut_key(b, b + PyBytes_GET_SIZE(args[0]), fields, hot_axis_field_of(args[1]), spans, &axes);
    return hot_key_spans(key, b, spans, PyTuple_GET_SIZE(fields));
}

/* declared, and described, in hot.h */
PyObject *hot_key_spans(PyObject *key, const char *b, const Span *spans, Py_ssize_t nf)
{
    if (!key) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *offsets = PyTuple_New(nf);
    for (Py_ssize_t f = 0; offsets && f < nf; f++) {
        PyObject *o = Py_BuildValue("(nn)", (Py_ssize_t)(spans[f].open - b), (Py_ssize_t)(spans[f].close + 1 - b));
        if (!o) Py_CLEAR(offsets);
        else PyTuple_SET_ITEM(offsets, f, o);
    }
    if (!offsets) {
        Py_DECREF(key);
        return NULL;
    }
    return Py_BuildValue("(NN)", key, offsets);
}

PyMethodDef hot_answer_methods[] = {
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL, answer_doc},
    {"cut", (PyCFunction)(void (*)(void))cut, METH_FASTCALL, cut_doc},
    {NULL, NULL, 0, NULL},
};
