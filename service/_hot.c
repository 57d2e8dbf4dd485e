/* service/_hot.c -- the spec-template shortcut (service/replay.py) in C, for the hot path.
 *
 * service/replay.py answers a repeated RoPE spec by parsing only its positions list. In Python
 * that still costs ~7 µs a request (find the list, orjson, checks, a dozen numpy calls), more than
 * the work. This module does the same in one call and no Python objects but the answer:
 *
 *   answer(raw, headers, accepts, templates, max_body) -> bytes | None
 *
 * raw: the request body; headers: the ASGI scope's [(name, value)] list; accepts: {Accept value:
 * True} for values the negotiator maps to safetensors; templates: {key: Template}, keyed exactly
 * as replay.split() keys them (the body with its positions list replaced by one NUL byte).
 * It returns the whole safetensors response, or None whenever anything is unusual, and the caller
 * then takes the full path -- so this parser may refuse more than the full path does (e.g. "-0",
 * or whitespace it does not expect) but never accepts a body the full path would answer
 * differently. Its answers are the Python shortcut's bytes (tests/test_service.py compares both,
 * and both against an independent reference).
 *
 *   Template(cos, sin, interleaved, header_for, tail)
 *
 * cos, sin: the table's half-width [length, h] arrays (C-contiguous, 2- or 4-byte items; the
 * template holds them, so their mapping outlives any eviction until the template is dropped);
 * header_for(n) -> the safetensors header bytes for n rows (called once per n, then cached);
 * tail: the bytes after cos and sin (inv_freq, attention_scaling).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define MAX_ROWS 64

typedef struct {
    PyObject_HEAD
    Py_buffer cos, sin;
    int have_cos, have_sin;
    Py_ssize_t length, half, itemsize;
    int interleaved;
    PyObject *header_for; /* n -> bytes */
    PyObject *tail;       /* bytes */
    PyObject *heads[MAX_ROWS + 1];
} Template;

static void Template_dealloc(Template *t)
{
    if (t->have_cos) PyBuffer_Release(&t->cos);
    if (t->have_sin) PyBuffer_Release(&t->sin);
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    for (int i = 0; i <= MAX_ROWS; i++) Py_XDECREF(t->heads[i]);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int get_table(PyObject *o, Py_buffer *b, const char *name)
{
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->ndim != 2 || (b->itemsize != 2 && b->itemsize != 4)) {
        PyErr_Format(PyExc_ValueError, "%s: want a 2-d array of 2- or 4-byte items", name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static int Template_init(Template *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cos", "sin", "interleaved", "header_for", "tail", NULL};
    PyObject *ocos, *osin, *hf, *tail;
    int inter;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOpOO!:Template", kwlist, &ocos, &osin, &inter, &hf,
                                     &PyBytes_Type, &tail))
        return -1;
    if (!PyCallable_Check(hf)) {
        PyErr_SetString(PyExc_TypeError, "header_for must be callable");
        return -1;
    }
    if (t->have_cos || t->have_sin) {
        PyErr_SetString(PyExc_RuntimeError, "Template is initialised once");
        return -1;
    }
    if (get_table(ocos, &t->cos, "cos") < 0) return -1;
    t->have_cos = 1;
    if (get_table(osin, &t->sin, "sin") < 0) return -1;
    t->have_sin = 1;
    if (t->cos.shape[0] != t->sin.shape[0] || t->cos.shape[1] != t->sin.shape[1] ||
        t->cos.itemsize != t->sin.itemsize) {
        PyErr_SetString(PyExc_ValueError, "cos and sin differ in shape or item size");
        return -1;
    }
    t->length = t->cos.shape[0];
    t->half = t->cos.shape[1];
    t->itemsize = t->cos.itemsize;
    t->interleaved = inter;
    Py_INCREF(hf);
    t->header_for = hf;
    Py_INCREF(tail);
    t->tail = tail;
    return 0;
}

static PyObject *Template_get_length(Template *t, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(t->length);
}

static PyGetSetDef Template_getset[] = {
    {"length", (getter)Template_get_length, NULL, "rows in the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "service._hot.Template",
    .tp_basicsize = sizeof(Template),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated RoPE spec's table and response layout (see the module doc).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Template_init,
    .tp_dealloc = (destructor)Template_dealloc,
    .tp_getset = Template_getset,
};

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The strict JSON list '[' ws (int ws (',' ws int ws)*)? ']' of non-negative ints below limit.
 * Returns the count (0: refused, as is an empty list). */
static Py_ssize_t parse_rows(const char *p, const char *end, Py_ssize_t limit, int64_t *rows)
{
    Py_ssize_t n = 0;
    p++; /* '[' */
    while (p < end && is_ws(*p)) p++;
    if (p < end && *p == ']') return 0;
    for (;;) {
        if (p >= end || *p < '0' || *p > '9') return 0;
        if (n == MAX_ROWS) return 0;
        int64_t v = *p++ - '0';
        if (v == 0 && p < end && *p >= '0' && *p <= '9') return 0; /* JSON has no leading zeros */
        while (p < end && *p >= '0' && *p <= '9') {
            v = v * 10 + (*p++ - '0');
            if (v >= limit) return 0;
        }
        if (v >= limit) return 0;
        rows[n++] = v;
        while (p < end && is_ws(*p)) p++;
        if (p >= end) return 0;
        if (*p == ']') return p + 1 == end ? n : 0;
        if (*p != ',') return 0; /* '.', 'e': a float; anything else: not ours */
        p++;
        while (p < end && is_ws(*p)) p++;
    }
}

static const char KEY[] = "\"positions\"";
#define KEY_LEN (sizeof(KEY) - 1)

/* The first value of header `name` (ASGI names are lower-case bytes), borrowed; NULL if none. */
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
            found = PyTuple_GET_ITEM(pair, 1);
            break;
        }
    }
    Py_DECREF(fast);
    return found; /* borrowed from the tuple, which the caller's list keeps alive */
}

static void expand(char *dst, const char *table, const int64_t *rows, Py_ssize_t n, Py_ssize_t h,
                   Py_ssize_t es, int interleaved)
{
    size_t rb = (size_t)h * (size_t)es;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = table + (size_t)rows[i] * rb;
        char *d = dst + 2 * rb * (size_t)i;
        if (!interleaved) {
            memcpy(d, s, rb);
            memcpy(d + rb, s, rb);
        } else if (es == 4) {
            for (Py_ssize_t k = 0; k < h; k++) {
                memcpy(d + 8 * k, s + 4 * k, 4);
                memcpy(d + 8 * k + 4, s + 4 * k, 4);
            }
        } else {
            for (Py_ssize_t k = 0; k < h; k++) {
                memcpy(d + 4 * k, s + 2 * k, 2);
                memcpy(d + 4 * k + 2, s + 2 * k, 2);
            }
        }
    }
}

PyDoc_STRVAR(answer_doc, "answer(raw, headers, accepts, templates, max_body) -> bytes | None\n--\n\n"
             "The safetensors answer of a body whose spec is a known template, or None.");

static PyObject *answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "answer(raw: bytes, headers, accepts: dict, templates: dict, max_body: int)");
        return NULL;
    }
    PyObject *raw = args[0], *accepts = args[2], *templates = args[3];
    Py_ssize_t max_body = PyLong_AsSsize_t(args[4]);
    if (max_body == -1 && PyErr_Occurred()) return NULL;
    const char *b = PyBytes_AS_STRING(raw);
    Py_ssize_t len = PyBytes_GET_SIZE(raw);
    if (len > max_body || PyDict_GET_SIZE(templates) == 0) Py_RETURN_NONE;

    /* Accept: one of the values known to mean safetensors */
    PyObject *acc = find_header(args[1], "accept", 6);
    if (!acc) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *ok = PyDict_GetItemWithError(accepts, acc);
    if (!ok) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }

    /* the positions list, as replay.split() finds it */
    const char *i = memmem(b, (size_t)len, KEY, KEY_LEN);
    if (!i) Py_RETURN_NONE;
    const char *after = i + KEY_LEN, *end = b + len;
    const char *j = memchr(after, '[', (size_t)(end - after));
    if (!j) Py_RETURN_NONE;
    int colons = 0;
    for (const char *p = after; p < j; p++) {
        if (*p == ':') colons++;
        else if (!is_ws(*p)) Py_RETURN_NONE;
    }
    if (colons != 1) Py_RETURN_NONE;
    const char *k = memchr(j, ']', (size_t)(end - j));
    if (!k) Py_RETURN_NONE;

    Py_ssize_t pre = j - b, post = end - (k + 1);
    PyObject *key = PyBytes_FromStringAndSize(NULL, pre + 1 + post);
    if (!key) return NULL;
    char *kb = PyBytes_AS_STRING(key);
    memcpy(kb, b, (size_t)pre);
    kb[pre] = '\0';
    memcpy(kb + pre + 1, k + 1, (size_t)post);
    PyObject *tobj = PyDict_GetItemWithError(templates, key);
    Py_DECREF(key);
    if (!tobj) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyObject_TypeCheck(tobj, &TemplateType)) {
        PyErr_SetString(PyExc_TypeError, "templates must map to Template");
        return NULL;
    }
    Template *t = (Template *)tobj;

    int64_t rows[MAX_ROWS];
    Py_ssize_t n = parse_rows(j, k + 1, t->length, rows);
    if (n == 0) Py_RETURN_NONE;

    PyObject *head = t->heads[n];
    if (!head) {
        head = PyObject_CallFunction(t->header_for, "n", n);
        if (!head) return NULL;
        if (!PyBytes_Check(head)) {
            Py_DECREF(head);
            PyErr_SetString(PyExc_TypeError, "header_for must return bytes");
            return NULL;
        }
        if (t->heads[n]) { /* the callback ran Python code: another caller may have filled it */
            Py_DECREF(head);
            head = t->heads[n];
        } else {
            t->heads[n] = head;
        }
    }
    Py_ssize_t hl = PyBytes_GET_SIZE(head), tl = PyBytes_GET_SIZE(t->tail);
    Py_ssize_t block = n * 2 * t->half * t->itemsize;
    PyObject *out = PyBytes_FromStringAndSize(NULL, hl + 2 * block + tl);
    if (!out) return NULL;
    char *o = PyBytes_AS_STRING(out);
    memcpy(o, PyBytes_AS_STRING(head), (size_t)hl);
    expand(o + hl, (const char *)t->cos.buf, rows, n, t->half, t->itemsize, t->interleaved);
    expand(o + hl + block, (const char *)t->sin.buf, rows, n, t->half, t->itemsize, t->interleaved);
    memcpy(o + hl + 2 * block, PyBytes_AS_STRING(t->tail), (size_t)tl);
    return out;
}

static PyMethodDef methods[] = {
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL, answer_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_hot", "The spec-template shortcut in C (see service/_hot.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hot(void)
{
    if (PyType_Ready(&TemplateType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&TemplateType);
    if (PyModule_AddObject(m, "Template", (PyObject *)&TemplateType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ROWS", MAX_ROWS) < 0) {
        Py_DECREF(&TemplateType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
