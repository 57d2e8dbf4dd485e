/* service/shortcut/hot_v2json.c -- v2 REST JSON-tensor infers (service/v2/hot_json.py): a body whose
 * inputs carry their positions as JSON "data" lists, no binary data, answered in JSON by the
 * learnt template of its spec, from the request's bytes in one call (hot_lane.c's v2 routes).
 *
 * The key is the body with each input's data list cut out, as cut() cuts /v1 bodies at their
 * selections: every occurrence of the data field's name (configured by Python, with its quotes)
 * must be followed by whitespace, one ':', whitespace and a list, '[' .. its first ']', and each
 * such list is replaced by one NUL byte. A later body with the same key is the learnt body with
 * other lists (the argument of templates.py: the bytes outside the lists are the learnt ones, so
 * a JSON parser reaches and leaves each list in the same state); hot_json.py checks at learn time
 * that each list is the data its input really takes. Each list is parsed by the selection parser
 * (hot_select.c, lists only) and must hold the learnt number of positions (the learnt shape).
 *
 * An entry is a JsonEntry (hot_named.c: template, counts, swap, post): a RowsTemplate whose JSON writes each array's rows as
 * one flat list (enable_json(..., flat=True): a v2 output's row-major data, the v2 answer's parts
 * around them) and one list; or a T5Template or an AlibiTemplate (its cells formatted in C,
 * hot_alibi.c) of flat JSON and two lists (query and key; swap: the body's first list is the
 * key's). counts: the positions each list must hold; post: the answer's
 * head after its content length's digits.
 */
#include "hot.h"

/* The positions a list holds if it parses: one more than its commas. */
static Py_ssize_t items_of(const Span *sp)
{
    Py_ssize_t n = 1;
    for (const char *c = sp->open + 1; c < sp->close; c++) n += *c == ',';
    return n;
}

/* The key of body [b, end) (see the top): a new reference, its spans in body order in spans[] and
 * their number in *n; NULL with no error set when the body is not such a body (no list, an
 * occurrence of name that is not a list field, more than MAX_FIELDS), NULL with an error set. */
static PyObject *cut_lists(const char *b, const char *end, PyObject *name, Span *spans, int *n)
{
    const char *p = b, *nm = PyBytes_AS_STRING(name);
    size_t nl = (size_t)PyBytes_GET_SIZE(name);
    *n = 0;
    for (;;) {
        const char *i = memmem(p, (size_t)(end - p), nm, nl);
        if (!i) break;
        const char *v = hot_field_value(i, end, name); /* the occurrence at i: the first from i */
        const char *c = v && *v == '[' ? memchr(v, ']', (size_t)(end - v)) : NULL;
        if (!c || *n == MAX_FIELDS) return NULL;
        spans[(*n)++] = (Span){v, c};
        p = c + 1;
    }
    if (*n == 0) return NULL;
    Py_ssize_t klen = (end - b) + *n;
    for (int f = 0; f < *n; f++) klen -= spans[f].close + 1 - spans[f].open;
    PyObject *key = PyBytes_FromStringAndSize(NULL, klen);
    if (!key) return NULL;
    char *k = PyBytes_AS_STRING(key);
    const char *from = b;
    for (int f = 0; f < *n; f++) {
        memcpy(k, from, (size_t)(spans[f].open - from));
        k += spans[f].open - from;
        *k++ = '\0';
        from = spans[f].close + 1;
    }
    memcpy(k, from, (size_t)(end - from));
    return key;
}

/* The answer of entry e (a JsonEntry, hot_named.c: its fields checked when it was made) to the n
 * lists of spans sp. */
static PyObject *entry_answer(PyObject *o, const Span *sp, int n, const Http *http)
{
    if (Py_TYPE(o) != &hot_JsonEntryType) {
        PyErr_SetString(PyExc_TypeError, "v2 JSON entries: want a JsonEntry");
        return NULL;
    }
    const HotJsonEntry *e = (const HotJsonEntry *)o;
    if (e->ncounts != n) Py_RETURN_NONE;
    for (int f = 0; f < n; f++)
        if (items_of(&sp[f]) != e->count[f]) Py_RETURN_NONE; /* not the learnt shape */
    Http h = *http;
    h.post = e->post;
    h.json = 1;
    Span lists[MAX_FIELDS] = {sp[0]}; /* query first */
    Py_ssize_t counts_of[MAX_FIELDS] = {e->count[0]};
    if (n == 2) {
        lists[0] = sp[(int)e->swap], lists[1] = sp[!e->swap];
        counts_of[0] = e->count[(int)e->swap], counts_of[1] = e->count[!e->swap];
    }
    HotTemplate *t = (HotTemplate *)e->template;
    return t->ops->v2_json(t, lists, counts_of, &h);
}

/* declared, and described, in hot.h */
PyObject *hot_v2json_answer(const HotV2Route *route, const char *b, Py_ssize_t len, const Http *http, PyObject **found)
{
    PyObject *name = route->json_name, *entries = route->json_entries;
    if (PyDict_GET_SIZE(entries) == 0 || PyBytes_GET_SIZE(name) == 0) Py_RETURN_NONE;
    Span sp[MAX_FIELDS];
    int n;
    PyObject *key = cut_lists(b, b + len, name, sp, &n);
    PyObject *e = key ? hot_entry(entries, key) : NULL;
    if (!e) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = entry_answer(e, sp, n, http);
    if (found && out && PyBytes_Check(out)) *found = Py_NewRef(e);
    Py_DECREF(e);
    return out;
}

PyDoc_STRVAR(v2_cut_doc, "v2_cut(raw, name) -> (key, spans) | None\n--\n\n"
             "The key of a v2 JSON-tensor infer body (each list of the data field `name`, JSON text with\n"
             "its quotes, cut out) and the (start, end) offsets of its lists in body order; None when the\n"
             "body is not one the lane answers so. service/v2/hot_json.py learns entries by it.");

static PyObject *v2_cut(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) == 0) {
        PyErr_SetString(PyExc_TypeError, "v2_cut(raw: bytes, name: non-empty bytes)");
        return NULL;
    }
    const char *b = PyBytes_AS_STRING(args[0]);
    Span sp[MAX_FIELDS];
    int n;
    PyObject *key = cut_lists(b, b + PyBytes_GET_SIZE(args[0]), args[1], sp, &n);
    return hot_key_spans(key, b, sp, n);
}

PyMethodDef hot_v2json_methods[] = {
    {"v2_cut", (PyCFunction)(void (*)(void))v2_cut, METH_FASTCALL, v2_cut_doc},
    {NULL, NULL, 0, NULL},
};
