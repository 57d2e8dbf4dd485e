/* service/shortcut/hot_json.c -- JSON answers of a RowsTemplate: the full path's bytes, with no
 * float formatted per request.
 *
 * The JSON answer of rows is the learnt parts (templates.py cuts them from the full path's own
 * JSON of the learnt request) around each array's rows, [[v, v, ...], [...]]. Each value is
 * written as the text the full path writes for it (engine/core/encode.py json_text: orjson, the
 * shortest decimal that reads back as the same float32/float16/bfloat16 value), and that text
 * depends on the value alone. So each stored row's text is rendered once, by that very function,
 * the first time an answer needs it, and kept: an answer copies texts through the template's
 * column runs. The code here never formats a float and never calls Python: a row whose text is
 * not kept yet makes the answer return NotImplemented and note (template, None, [(array, row),
 * ...]) for missing(); templates.py renders those rows with text_for and hands them to
 * set_text() before it asks again. The texts a template keeps are bounded by its budget (over it,
 * they are dropped and rendered again as asked).
 *
 * Rows past the table (up to GROWN_ROWS of them) have texts the same way: row() computes such a
 * row with the engine's kernel, as the binary answers do, and text_for renders it once.
 */
#include "hot_rows.h"

#include <stdlib.h>

/* A kept text: the row's items' texts, each followed by ',' (chars), and where each starts. A
 * template whose output rows read the stored row in many short runs and no item twice (the
 * interleaved layouts: sinusoidal's sin0 cos0 sin1 cos1 ...) keeps each row's text in its output
 * order instead (json_in_order; no offsets), assembled once at set_text(), so an answer copies a
 * row in one memcpy rather than one per item. */
typedef struct {
    Py_ssize_t len;   /* bytes of chars */
    int32_t off[];    /* src_width + 1 offsets (in order: one, unused), then the chars */
} RowText;

static Py_ssize_t offsets_of(const RowsTemplate *t) { return t->json_in_order ? 1 : t->src_width + 1; }
static const char *chars_of(const RowsTemplate *t, const RowText *x) { return (const char *)(x->off + offsets_of(t)); }
static Py_ssize_t text_size(const RowsTemplate *t, Py_ssize_t len)
{
    return (Py_ssize_t)sizeof(RowText) + offsets_of(t) * 4 + len;
}

void hot_json_clear(RowsTemplate *t)
{
    if (t->texts)
        for (Py_ssize_t i = 0; i < t->narr * t->text_rows; i++) {
            free(t->texts[i]);
            t->texts[i] = NULL;
        }
    hot_unkeep(&t->keep, t->text_bytes);
    t->text_bytes = 0;
}

/* Bytes of one output row's items (each with its ','), from kept text x (in stored order). */
static Py_ssize_t runs_len(const RowsTemplate *t, const RowText *x, Py_ssize_t zl)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t r = 0; r < t->map.nruns; r++) {
        const Run *u = &t->map.runs[r];
        n += u->src < 0 ? u->len * (zl + 1) : x->off[u->src + u->len] - x->off[u->src];
    }
    return n;
}

/* One output row's items written at d (each with its ','), from kept text x in stored order,
 * through the column runs: returns the end. */
static char *runs_put(char *d, const RowsTemplate *t, const RowText *x, const char *zero, Py_ssize_t zl)
{
    const char *c = (const char *)(x->off + t->src_width + 1);
    for (Py_ssize_t r = 0; r < t->map.nruns; r++) {
        const Run *u = &t->map.runs[r];
        if (u->src < 0) {
            for (Py_ssize_t k = 0; k < u->len; k++, d += zl + 1) {
                memcpy(d, zero, (size_t)zl);
                d[zl] = ',';
            }
            continue;
        }
        Py_ssize_t a = x->off[u->src], b = x->off[u->src + u->len];
        memcpy(d, c + a, (size_t)(b - a));
        d += b - a;
    }
    return d;
}

static Py_ssize_t row_len(const RowsTemplate *t, const RowText *x, Py_ssize_t zl)
{
    return t->json_in_order ? x->len : runs_len(t, x, zl);
}

static char *row_put(char *d, const RowsTemplate *t, const RowText *x, const char *zero, Py_ssize_t zl)
{
    if (!t->json_in_order) return runs_put(d, t, x, zero, zl);
    memcpy(d, chars_of(t, x), (size_t)x->len);
    return d + x->len;
}

/* declared, and described, in hot.h */
PyObject *hot_rows_json(RowsTemplate *t, const Sel *rows, const Http *http)
{
    if (rows->hi + t->offset >= t->text_rows || !hot_rows_answerable(t, rows->hi))
        Py_RETURN_NONE;   /* rows too far past the table: the full path writes them */
    if (!t->texts) {   /* its row pointers count against the budget too */
        Py_ssize_t bytes = t->narr * t->text_rows * (Py_ssize_t)sizeof(char *);
        if (!hot_keep(&t->keep, bytes)) Py_RETURN_NONE;
        if (!(t->texts = calloc((size_t)(t->narr * t->text_rows), sizeof(char *)))) {
            hot_unkeep(&t->keep, bytes);
            return PyErr_NoMemory();
        }
    }
    PyObject *missing = NULL;
    for (int a = 0; a < t->narr; a++)
        for (Py_ssize_t i = 0; i < rows->n; i++) {
            Py_ssize_t r = (Py_ssize_t)(hot_sel_at(rows, i) + t->offset);
            if (t->texts[a * t->text_rows + r]) continue;
            PyObject *item = Py_BuildValue("(in)", a, r);
            if (!item || (!missing && !(missing = PyList_New(0))) || PyList_Append(missing, item) < 0) {
                Py_XDECREF(item);
                Py_XDECREF(missing);
                return NULL;
            }
            Py_DECREF(item);
        }
    if (missing) {   /* (a row asked twice is rendered twice: set_text keeps the last) */
        int rc = hot_note_missing_rows((PyObject *)t, missing);
        Py_DECREF(missing);
        if (rc < 0) return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    const char *zero = PyBytes_AS_STRING(t->zero_text);
    Py_ssize_t zl = PyBytes_GET_SIZE(t->zero_text), body = 0;
    for (int a = 0; a < t->narr; a++) {
        if (a > 0) body += PyBytes_GET_SIZE(PyTuple_GET_ITEM(t->json_parts, a));
        /* '[', and each row's '[' and the ',' or ']' after it (its last ',' is its ']'); flat: '[' only,
         * the last item's ',' is the list's ']' */
        body += t->json_flat ? 1 : 1 + 2 * rows->n;
        for (Py_ssize_t i = 0; i < rows->n; i++)
            body += row_len(t, (const RowText *)t->texts[a * t->text_rows + hot_sel_at(rows, i) + t->offset], zl);
    }
    Out o;
    if (hot_bytes_of(http, PyTuple_GET_ITEM(t->json_parts, 0), body, PyTuple_GET_ITEM(t->json_parts, t->narr), 0,
                     &o) < 0)
        return NULL;
    char *d = o.fill;
    for (int a = 0; a < t->narr; a++) {
        if (a > 0) {
            PyObject *p = PyTuple_GET_ITEM(t->json_parts, a);
            memcpy(d, PyBytes_AS_STRING(p), (size_t)PyBytes_GET_SIZE(p));
            d += PyBytes_GET_SIZE(p);
        }
        *d++ = '[';
        for (Py_ssize_t i = 0; i < rows->n; i++) {
            if (!t->json_flat) *d++ = '[';
            d = row_put(d, t, (const RowText *)t->texts[a * t->text_rows + hot_sel_at(rows, i) + t->offset], zero, zl);
            if (!t->json_flat) {
                d[-1] = ']';
                *d++ = ',';
            }
        }
        d[-1] = ']';
    }
    return hot_finish(&o);
}

/* ---- RowsTemplate's JSON methods ---------------------------------------------------------- */

PyDoc_STRVAR(enable_json_doc, "enable_json(parts, *, zero, text_for, budget, flat=False)\n--\n\n"
             "Answer JSON too: parts, the narr + 1 bytes around the arrays' rows in the full path's JSON\n"
             "answer; zero, a zero item's text; text_for(array, row) -> the stored row's JSON text (the\n"
             "full path's, \"[v,v,...]\"), called by templates.py on a miss; budget: bytes of texts kept;\n"
             "flat: each array's rows as one flat list (a v2 JSON output's data). parts None (nothing else\n"
             "needed): no JSON answers.");

static const char *const enable_json_names[] = {"parts", "zero", "text_for", "budget", "flat", NULL};
static HotSig enable_json_sig = {.fn = "enable_json", .names = enable_json_names, .npos = 1, .nreq = 1};

static PyObject *enable_json(PyObject *self, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames)
{
    RowsTemplate *t = (RowsTemplate *)self;
    PyObject *args[5];
    if (hot_args(&enable_json_sig, argv, nargs, kwnames, args) < 0) return NULL;
    if ((!PyTuple_Check(args[0]) && args[0] != Py_None) ||
        (args[0] != Py_None && (!args[1] || !PyBytes_Check(args[1]) || !args[2] || !PyCallable_Check(args[2]) ||
                                !args[3] || !PyLong_Check(args[3])))) {
        PyErr_SetString(PyExc_TypeError, "enable_json(parts: tuple of bytes | None, *, zero: bytes, text_for, "
                                         "budget: int, flat: bool = False)");
        return NULL;
    }
    if (args[0] == Py_None) {   /* no JSON answers (again) */
        hot_json_clear(t);
        Py_CLEAR(t->json_parts);
        Py_RETURN_NONE;
    }
    if (!t->heads || t->naxes > 1 || PyTuple_GET_SIZE(args[0]) != t->narr + 1) {
        PyErr_SetString(PyExc_ValueError, "enable_json: an initialised template of one axis, and one part more "
                                          "than arrays");
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= t->narr; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(args[0], i))) {
            PyErr_SetString(PyExc_TypeError, "enable_json: parts are bytes");
            return NULL;
        }
    Py_ssize_t budget = PyLong_AsSsize_t(args[3]);
    if (budget == -1 && PyErr_Occurred()) return NULL;
    int flat = args[4] ? PyObject_IsTrue(args[4]) : 0;
    if (flat < 0) return NULL;
    t->json_flat = flat;
    hot_json_clear(t);
    t->json_in_order = 4 * t->map.nruns > t->map.width && t->map.width <= t->src_width;
    Py_INCREF(args[0]);
    Py_XSETREF(t->json_parts, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(t->zero_text, args[1]);
    Py_INCREF(args[2]);
    Py_XSETREF(t->text_for, args[2]);
    t->text_budget = budget;
    Py_RETURN_NONE;
}

/* (array, row) of args checked against t: 0, or -1 with an error set. */
static int array_row(RowsTemplate *t, PyObject *const *args, int *a, Py_ssize_t *r)
{
    long av = PyLong_AsLong(args[0]);
    if (av == -1 && PyErr_Occurred()) return -1;
    *r = PyLong_AsSsize_t(args[1]);
    if (*r == -1 && PyErr_Occurred()) return -1;
    if (av < 0 || av >= t->narr || *r < 0 || *r >= t->text_rows) {
        PyErr_SetString(PyExc_IndexError, "(array, row) outside the template's arrays");
        return -1;
    }
    *a = (int)av;
    return 0;
}

PyDoc_STRVAR(set_text_doc, "set_text(array, row, text)\n--\n\n"
             "Keep the stored row's JSON text \"[v,v,...]\" (text_for's) for the JSON answers.");

static PyObject *set_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RowsTemplate *t = (RowsTemplate *)self;
    int a;
    Py_ssize_t r, w = t->src_width;
    if (nargs != 3 || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_text(array: int, row: int, text: bytes)");
        return NULL;
    }
    if (!t->json_parts) {
        PyErr_SetString(PyExc_RuntimeError, "set_text: the template answers no JSON");
        return NULL;
    }
    if (!t->texts) Py_RETURN_NONE;   /* dropped since the miss (the budget): the answer misses again */
    if (array_row(t, args, &a, &r) < 0) return NULL;
    const char *s = PyBytes_AS_STRING(args[2]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[2]), commas = 0, nested = 0;
    for (Py_ssize_t i = 1; i < n - 1; i++) {
        commas += s[i] == ',';
        nested |= s[i] == '[' || s[i] == ']' || s[i] == '"';
    }
    if (n < 3 || s[0] != '[' || s[n - 1] != ']' || commas != w - 1 || nested) {
        PyErr_SetString(PyExc_ValueError, "set_text: want a flat JSON list of the row's items");
        return NULL;
    }
    /* the row's text in stored order (the item offsets); in order: the output row assembled from it */
    RowText *x = malloc(sizeof(RowText) + (size_t)(w + 1) * 4 + (size_t)(n - 1));
    if (!x) return PyErr_NoMemory();
    x->len = n - 1;
    char *c = (char *)(x->off + w + 1);
    memcpy(c, s + 1, (size_t)(n - 2));
    c[n - 2] = ',';
    x->off[0] = 0;
    for (Py_ssize_t i = 0, k = 1; i < n - 1; i++)
        if (c[i] == ',') x->off[k++] = (int32_t)(i + 1);
    if (t->json_in_order) {
        const char *zero = PyBytes_AS_STRING(t->zero_text);
        Py_ssize_t zl = PyBytes_GET_SIZE(t->zero_text), len = runs_len(t, x, zl);
        RowText *y = malloc((size_t)text_size(t, len));
        if (!y) {
            free(x);
            return PyErr_NoMemory();
        }
        y->len = len;
        y->off[0] = 0;
        runs_put((char *)chars_of(t, y), t, x, zero, zl);
        free(x);
        x = y;
    }
    Py_ssize_t size = text_size(t, x->len);
    char **slot = &t->texts[a * t->text_rows + r];
    if (*slot) {
        Py_ssize_t old = text_size(t, ((RowText *)*slot)->len);
        free(*slot);
        *slot = NULL;
        t->text_bytes -= old;
        hot_unkeep(&t->keep, old);
    }
    /* over the template's budget: free kept texts from a cursor that goes round the rows (the
     * oldest kept first, roughly), never the slot being set */
    for (Py_ssize_t n_all = t->narr * t->text_rows, seen = 0; t->text_bytes + size > t->text_budget && seen < n_all; seen++) {
        t->text_cursor = (t->text_cursor + 1) % n_all;
        RowText *old = (RowText *)t->texts[t->text_cursor];
        if (!old) continue;
        Py_ssize_t ob = text_size(t, old->len);
        free(old);
        t->texts[t->text_cursor] = NULL;
        t->text_bytes -= ob;
        hot_unkeep(&t->keep, ob);
    }
    if (!hot_keep(&t->keep, size)) {   /* not kept: the answer misses again, and is declined */
        free(x);
        Py_RETURN_NONE;
    }
    if (!t->texts) {            /* dropped with every template's (the budget): as above */
        hot_unkeep(&t->keep, size);
        free(x);
        Py_RETURN_NONE;
    }
    *slot = (char *)x;
    t->text_bytes += size;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(row_doc, "row(array, row) -> bytes\n--\n\nThe stored row's items (the table's bytes; past the table, as\n"
             "the engine's kernel computes them, laid out as stored).");

static PyObject *row(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RowsTemplate *t = (RowsTemplate *)self;
    int a;
    Py_ssize_t r;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "row(array: int, row: int)");
        return NULL;
    }
    if (!t->heads || array_row(t, args, &a, &r) < 0) return NULL;
    Py_ssize_t rb = t->src_width * t->itemsize, es = t->itemsize;
    if (r < t->length) return PyBytes_FromStringAndSize((const char *)t->arr[a].buf + r * rb, rb);
    if (!t->freqs || !hot_cfg.kernels || r >= t->row_limit) {
        PyErr_SetString(PyExc_IndexError, "row: past the table of a template that computes no rows there");
        return NULL;
    }
    char *items = malloc((size_t)(2 * t->nfreq * es));
    PyObject *out = items ? PyBytes_FromStringAndSize(NULL, rb) : PyErr_NoMemory();
    int64_t r64 = r;
    if (out && hot_cfg.kernels->sincos(t->freqs, t->nfreq, &r64, 1, t->scale, items, items + t->nfreq * es, t->dt)) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_OverflowError, "row: a value overflows the dtype");
    }
    const int32_t *sm = t->smap + (size_t)a * (size_t)t->src_width;
    for (Py_ssize_t c = 0; out && c < t->src_width; c++)
        memcpy(PyBytes_AS_STRING(out) + c * es, items + (Py_ssize_t)sm[c] * es, (size_t)es);
    free(items);
    return out;
}

PyMethodDef hot_json_methods[] = {
    {"enable_json", (PyCFunction)(void (*)(void))enable_json, METH_FASTCALL | METH_KEYWORDS, enable_json_doc},
    {"set_text", (PyCFunction)(void (*)(void))set_text, METH_FASTCALL, set_text_doc},
    {"row", (PyCFunction)(void (*)(void))row, METH_FASTCALL, row_doc},
    {NULL, NULL, 0, NULL},
};
