/* service/shortcut/hot_answer.c -- a route: a /v1 body answered by its template, whatever its kind
 * (through the kind's ops: v1, v1_json, v1_axes), behind the safetensors header and, for the lane,
 * the HTTP head: answer() (the raw ASGI front's), hot_answer_body() (the lane's), and cut(), the key
 * a body's template is learnt under.
 */
#include "hot.h"

#include <stdlib.h>

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
    if (v != HOT_SAFETENSORS && v != HOT_JSON) {
        PyErr_SetString(PyExc_ValueError, "accepts: want {Accept value: 0 (safetensors) or 1 (JSON)}");
        return -1;
    }
    return 1 + (int)v;
}

PyDoc_STRVAR(answer_doc, "answer(raw, headers, *, accepts, templates, family, json=False) -> bytes | None | NotImplemented\n--\n\n"
             "The safetensors answer of a body whose spec is a known template (its Accept one that accepts\n"
             "maps to 0, safetensors); None: declined;\n"
             "NotImplemented: the template lacks the header of its shape or a row's text (see missing()).\n"
             "json=True: JSON answers too (an Accept that accepts maps to 1), the lane's bytes without the\n"
             "HTTP head, and the answer is (bytes, format): 0 safetensors, 1 JSON.");

static const char *const answer_names[] = {"raw", "headers", "accepts", "templates", "family", "json", NULL};
static HotSig answer_sig = {.fn = "answer", .names = answer_names, .npos = 2, .nreq = 5};

static PyObject *answer(PyObject *self, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *args[6];
    if (!hot_configured() || hot_args(&answer_sig, argv, nargs, kwnames, args) < 0) return NULL;
    if (!PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "answer(raw: bytes, headers, *, accepts: dict, templates: dict, family: str, "
                                         "json: bool = False)");
        return NULL;
    }
    int json = args[5] ? PyObject_IsTrue(args[5]) : 0;
    if (json < 0) return NULL;
    PyObject *raw = args[0];
    PyObject *fields = hot_fields_of(args[4]);
    if (!fields) return NULL;
    if (PyBytes_GET_SIZE(raw) > hot_cfg.max_body || PyDict_GET_SIZE(args[3]) == 0) Py_RETURN_NONE;
    PyObject *acc = find_header(args[1], "accept", 6);
    if (!acc && PyErr_Occurred()) return NULL;
    int ok = hot_accepted(args[2], acc);   /* 1 safetensors, 2 JSON */
    if (ok < 0) return NULL;
    if (ok == 0 || (ok == 2 && !json)) Py_RETURN_NONE;
    const char *b = PyBytes_AS_STRING(raw);
    /* JSON: the lane's answer with no head before it (the front's writers add theirs) */
    const Http bare = {.json = 1, .frame = HOT_FRAME_BARE};
    PyObject *out = hot_answer_body(b, b + PyBytes_GET_SIZE(raw), fields, hot_axis_field_of(args[4]), args[3],
                                    ok == 2 ? &bare : NULL);
    if (!json || !out || !PyBytes_Check(out)) return out;
    PyObject *res = Py_BuildValue("(Ni)", out, ok - 1);
    return res;
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

PyMethodDef hot_answer_methods[] = {
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL | METH_KEYWORDS, answer_doc},
    {"cut", (PyCFunction)(void (*)(void))cut, METH_FASTCALL, cut_doc},
    {NULL, NULL, 0, NULL},
};
