/* service/shortcut/hot_select.c -- the cut-out selections of a template body, parsed strictly.
 *
 * engine/core/selection.py defines the grammar (a non-empty list of non-negative ints, or {start,
 * stop[, step]}); this is a subset of it on the JSON text itself, so that a body is answered
 * without parsing it: whatever is accepted here, engine/core/selection.py accepts with the same
 * positions, but some valid spellings ("-0", "start": null, keys written with escapes, a
 * repeated key) are refused and left to the full path. parse_selection() exposes the parser to
 * the tests that hold it to Python's (tests/service/shortcut/test_selection_grammar.py).
 */
#include "hot.h"

/* ---- the configured rules (configure(), _hot.c, sets them) ------------------------------ */

HotConfig hot_cfg;

int hot_configured(void)
{
    if (hot_cfg.fields) return 1;
    PyErr_SetString(PyExc_RuntimeError, "posenc.service._hot: configure() has not been called");
    return 0;
}

PyObject *hot_fields_of(PyObject *family)
{
    PyObject *fields = PyDict_GetItemWithError(hot_cfg.fields, family);
    if (!fields && !PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "family %R: not configured", family);
    return fields;
}

PyObject *hot_axis_field_of(PyObject *family)
{
    return hot_cfg.axis_fields ? PyDict_GetItem(hot_cfg.axis_fields, family) : NULL;   /* str keys: no error */
}

static inline const char *skip_ws(const char *p, const char *end)
{
    while (p < end && hot_is_ws(*p)) p++;
    return p;
}

/* A JSON non-negative integer below limit at *pp (no sign, no leading zero, no fraction or
 * exponent); advances *pp. -1: refused. */
static int parse_int(const char **pp, const char *end, int64_t limit, int64_t *out)
{
    const char *p = *pp;
    if (p >= end || !hot_is_digit(*p)) return -1;
    int64_t v = *p++ - '0';
    if (v == 0 && p < end && hot_is_digit(*p)) return -1;
    while (p < end && hot_is_digit(*p)) {
        v = v * 10 + (*p++ - '0');
        if (v >= limit) return -1;
    }
    if (v >= limit || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) return -1;
    *pp = p;
    *out = v;
    return 0;
}

/* '[' ws (int ws (',' ws int ws)*)? ']' with 1..cap ints, each < limit. 0: ok; -1: refused;
 * -2: error set. */
static int parse_list(const Span *sp, Py_ssize_t cap, int64_t limit, Sel *s)
{
    const char *p = sp->open + 1, *end = sp->close + 1;
    Py_ssize_t most = 1;
    for (const char *c = p; c < sp->close; c++) most += *c == ',';
    if (most > cap) return -1;
    s->v = s->stack;
    if (most > STACK_ROWS) {
        if (!(s->heap = PyMem_Malloc((size_t)most * sizeof(int64_t)))) {
            PyErr_NoMemory();
            return -2;
        }
        s->v = s->heap;
    }
    Py_ssize_t n = 0;
    p = skip_ws(p, end);
    for (;;) {
        int64_t x;
        if (parse_int(&p, end, limit, &x) < 0) return -1;
        s->v[n++] = x;
        if (n == 1 || x < s->lo) s->lo = x;
        if (n == 1 || x > s->hi) s->hi = x;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == ']') {
            if (p + 1 != end) return -1;
            s->n = n;
            return 0;
        }
        if (*p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
}

/* {"start": s, "stop": e[, "step": k]} (the configured range keys) in any key order,
 * s < e <= position_limit, k > 0. */
static int parse_range(const Span *sp, Py_ssize_t cap, Sel *s)
{
    const int64_t limit = hot_cfg.position_limit;
    int64_t vals[3] = {0, 0, 1};
    int seen[3] = {0, 0, 0};
    const char *p = sp->open + 1, *end = sp->close + 1;
    p = skip_ws(p, end);
    for (;;) {
        int f = -1;
        for (int i = 0; i < 3; i++) {
            size_t l = (size_t)PyBytes_GET_SIZE(hot_cfg.range_keys[i]);
            if ((size_t)(end - p) >= l && memcmp(p, PyBytes_AS_STRING(hot_cfg.range_keys[i]), l) == 0) {
                f = i;
                p += l;
                break;
            }
        }
        if (f < 0 || seen[f]) return -1;
        seen[f] = 1;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
        if (f == 2 && end - p >= 4 && memcmp(p, "null", 4) == 0)
            p += 4; /* an explicit null equals an absent step */
        else if (parse_int(&p, end, limit + 1, &vals[f]) < 0)
            return -1;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == '}') break;
        if (*p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
    if (p + 1 != end || !seen[0] || !seen[1]) return -1;
    int64_t start = vals[0], stop = vals[1], step = vals[2];
    if (start >= limit || !(start < stop) || step <= 0) return -1;
    int64_t n = (stop - start + step - 1) / step;
    if (n > cap) return -1;
    s->v = NULL;
    s->start = start;
    s->step = step;
    s->n = (Py_ssize_t)n;
    s->lo = start;
    s->hi = start + (n - 1) * step;
    return 0;
}

int hot_parse_sel(const Span *sp, Py_ssize_t cap, Sel *s)
{
    return *sp->open == '[' ? parse_list(sp, cap, hot_cfg.position_limit, s) : parse_range(sp, cap, s);
}

/* The span of field `name` (JSON text with its quotes): the first occurrence, then only
 * whitespace and exactly one ':' up to '[' or '{', then up to the first ']' or '}'.
 * (templates.py's spans() cuts learnt bodies by the same rule.) */
const char *hot_field_value(const char *b, const char *end, PyObject *name)
{
    const char *i = memmem(b, (size_t)(end - b), PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name));
    if (!i) return NULL;
    const char *p = i + PyBytes_GET_SIZE(name);
    int colons = 0;
    while (p < end && (hot_is_ws(*p) || *p == ':')) colons += *p++ == ':';
    return p < end && colons == 1 ? p : NULL;
}

int hot_find_span(const char *b, const char *end, PyObject *name, Span *sp)
{
    const char *p = hot_field_value(b, end, name);
    if (!p || (*p != '[' && *p != '{')) return -1;
    const char *c = memchr(p, *p == '[' ? ']' : '}', (size_t)(end - p));
    if (!c) return -1;
    sp->open = p;
    sp->close = c;
    return 0;
}

/* declared, and described, in hot.h: as hot_find_span, then '[' ws ('[' .. ']' ws (',' ws)?)+ ']' */
int hot_find_axes_span(const char *b, const char *end, PyObject *name, Span *sp)
{
    const char *p = hot_field_value(b, end, name);
    if (!p || *p != '[') return -1;
    const char *open = p++;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end || *p != '[') return -1;
        const char *c = memchr(p, ']', (size_t)(end - p));
        if (!c) return -1;
        p = skip_ws(c + 1, end);
        if (p >= end) return -1;
        if (*p == ']') {
            sp->open = open;
            sp->close = p;
            return 0;
        }
        if (*p != ',') return -1;
        p++;
    }
}

/* declared, and described, in hot.h */
int hot_parse_axes(const Span *sp, int k, Py_ssize_t cap, Sel *sels)
{
    const char *p = sp->open + 1, *end = sp->close;
    for (int a = 0;; a++) {
        p = skip_ws(p, end);
        if (a >= k) return -1;
        Span in = {p, memchr(p, ']', (size_t)(end - p))};   /* hot_find_axes_span saw '[' here and a ']' */
        int rc = hot_parse_sel(&in, cap, &sels[a]);
        if (rc < 0) return rc;
        if (sels[a].n != sels[0].n) return -1;
        p = skip_ws(in.close + 1, end);
        if (p == end) return a + 1 == k ? 0 : -1;
        p++;   /* the ',' hot_find_axes_span saw */
    }
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

/* declared, and described, in hot.h */
int hot_raw_positions(const char *src, Py_ssize_t len, Py_ssize_t isz, Sel *s)
{
    Py_ssize_t n = len / isz;
    if ((isz != 4 && isz != 8) || len % isz || n < 1) {
        PyErr_SetString(PyExc_ValueError, "fill: itemsize 4 or 8, and a whole, non-zero number of positions");
        return -1;
    }
    s->v = s->stack;
    if (n > STACK_ROWS && !(s->v = s->heap = PyMem_Malloc((size_t)n * sizeof(int64_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t lo = 0, hi = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v;
        if (isz == 8) {
            memcpy(&v, src + 8 * i, 8);
        } else {
            int32_t w;
            memcpy(&w, src + 4 * i, 4);
            v = w;
        }
        if (v < 0 || v >= hot_cfg.position_limit) return 0;
        s->v[i] = v;
        if (i == 0 || v > hi) hi = v;
        if (i == 0 || v < lo) lo = v;
    }
    s->n = n;
    s->lo = lo;
    s->hi = hi;
    return 1;
}

PyDoc_STRVAR(parse_selection_doc, "parse_selection(text, lists_only, cap) -> list | range | None\n--\n\n"
             "For tests: the positions of a selection's JSON text as a template answer reads them (the\n"
             "text is the cut-out span: '[' or '{' up to the first ']' or '}', which must end it), or\n"
             "None where the shortcut leaves the body to the full path (also: a range when lists_only,\n"
             "more than cap positions).");

static PyObject *parse_selection(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!hot_configured()) return NULL;
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse_selection(text: bytes, lists_only: bool, cap: int)");
        return NULL;
    }
    int lists_only = PyObject_IsTrue(args[1]);
    Py_ssize_t cap = PyLong_AsSsize_t(args[2]);
    if (lists_only < 0 || (cap == -1 && PyErr_Occurred())) return NULL;
    const char *b = PyBytes_AS_STRING(args[0]), *end = b + PyBytes_GET_SIZE(args[0]);
    if (end - b < 2 || (*b != '[' && *b != '{') || (lists_only && *b != '[')) Py_RETURN_NONE;
    Span sp = {b, memchr(b, *b == '[' ? ']' : '}', (size_t)(end - b))};
    Sel s = {.heap = NULL};
    if (!sp.close || sp.close != end - 1) Py_RETURN_NONE;
    int rc = hot_parse_sel(&sp, cap, &s);
    PyObject *out = NULL;
    if (rc == -1) {
        out = Py_None;
        Py_INCREF(out);
    } else if (rc == 0 && !s.v) {
        out = PyObject_CallFunction((PyObject *)&PyRange_Type, "LLL", (long long)s.start,
                                    (long long)(s.start + s.n * s.step), (long long)s.step);
    } else if (rc == 0 && (out = PyList_New(s.n))) {
        for (Py_ssize_t i = 0; i < s.n; i++) {
            PyObject *v = PyLong_FromLongLong((long long)s.v[i]);
            if (!v) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, v);
        }
    }
    hot_sel_free(&s);
    return out;
}

PyMethodDef hot_select_methods[] = {
    {"parse_selection", (PyCFunction)(void (*)(void))parse_selection, METH_FASTCALL, parse_selection_doc},
    {NULL, NULL, 0, NULL},
};
