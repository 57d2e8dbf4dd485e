/* service/shortcut/hot_lane.c -- lane(): a whole HTTP request to the whole HTTP response, for
 * service/protocol/lane.py.
 */
#include "hot.h"

/* A request the lane may answer: "POST <target> HTTP/1.1", each header line a token name, ':',
 * optional spaces, and visible text (no trailing space) ended by CRLF, a Content-Length of
 * digits whose body is all in the buffer. Anything else, however legal, is left to httptools
 * (and from there to ASGI): Transfer-Encoding, Expect, Upgrade, a Connection other than one
 * "close" or "keep-alive", a repeated Content-Length, Connection or Accept, obs-text or a
 * folded line, a head over MAX_HEAD bytes. So whatever this parser takes, httptools parses the
 * same way (it only ever sees less). */
#define MAX_HEAD 8192

typedef struct {
    const char *target, *accept, *body;
    Py_ssize_t target_len, accept_len, body_len;
    int close;
} Request;

static unsigned char TOKEN[256]; /* RFC 9110 tchar; filled at import */
/* headers that change how a request is read or answered: such a request is left to httptools */
static const char *const LEFT[] = {"expect", "proxy-connection", "transfer-encoding", "upgrade"};

void hot_lane_ready(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    for (int c = '0'; c <= '9'; c++) TOKEN[c] = 1;
    for (int c = 'a'; c <= 'z'; c++) TOKEN[c] = TOKEN[c - 32] = 1;
    for (const char *e = extra; *e; e++) TOKEN[(unsigned char)*e] = 1;
}

static int name_is(const char *n, Py_ssize_t len, const char *lower)
{
    Py_ssize_t l = (Py_ssize_t)strlen(lower);
    if (len != l) return 0;
    for (Py_ssize_t i = 0; i < l; i++)
        if ((n[i] | 0x20) != lower[i]) return 0;   /* | 0x20 folds letters; '-' matches only '-' or CR */
    return 1;
}

/* The end of the request at p (after its body), or NULL: not one this lane takes, or not whole. */
static const char *parse_request(const char *p, const char *end, Request *r)
{
    const char *limit = end - p > MAX_HEAD ? p + MAX_HEAD : end;
    if (limit - p < 5 || memcmp(p, "POST ", 5) != 0) return NULL;
    p += 5;
    r->target = p;
    while (p < limit && *p > ' ' && *p < 0x7f) p++;
    r->target_len = p - r->target;
    if (limit - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0) return NULL;
    p += 11;
    int n_length = 0, n_connection = 0, n_accept = 0;
    Py_ssize_t length = 0;
    r->close = 0;
    r->accept = NULL;
    r->accept_len = 0;
    for (;;) {
        if (limit - p < 2) return NULL;
        if (p[0] == '\r') {
            if (p[1] != '\n') return NULL;
            p += 2;
            break;
        }
        const char *n = p;
        while (p < limit && TOKEN[(unsigned char)*p]) p++;
        Py_ssize_t nl = p - n;
        if (nl == 0 || p >= limit || *p != ':') return NULL;
        p++;
        while (p < limit && (*p == ' ' || *p == '\t')) p++;
        const char *v = p;
        while (p < limit && ((*p >= ' ' && *p < 0x7f) || *p == '\t')) p++;
        Py_ssize_t vl = p - v;
        if (limit - p < 2 || p[0] != '\r' || p[1] != '\n') return NULL;
        if (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) return NULL;
        p += 2;
        if (name_is(n, nl, "accept")) {
            r->accept = v;
            r->accept_len = vl;
            n_accept++;
        } else if (name_is(n, nl, "content-length")) {
            if (vl < 1 || vl > 9 || n_length++) return NULL;
            length = 0;
            for (Py_ssize_t i = 0; i < vl; i++) {
                if (!hot_is_digit(v[i])) return NULL;
                length = length * 10 + (v[i] - '0');
            }
        } else if (name_is(n, nl, "connection")) {
            if (n_connection++) return NULL;
            if (name_is(v, vl, "close")) r->close = 1;
            else if (!name_is(v, vl, "keep-alive")) return NULL;
        } else {
            for (size_t i = 0; i < sizeof LEFT / sizeof *LEFT; i++)
                if (name_is(n, nl, LEFT[i])) return NULL;
        }
    }
    if (n_length != 1 || n_accept > 1 || end - p < length) return NULL;
    r->body = p;
    r->body_len = length;
    return p + length;
}

PyDoc_STRVAR(lane_doc, "lane(data, start, routes, accepts, native, max_body, pre, post, close)\n--\n\n"
             "The request at data[start:], if it is a whole, plain POST to one of routes ({target: (family, "
             "...)}) whose Accept is in accepts and whose spec is a known template (native: {family: "
             "templates}), answered: (end of the request, its route's value, the whole response with the "
             "HTTP head pre + length + post [+ connection: close], keep-alive). Else None.");

static PyObject *lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!hot_configured()) return NULL;
    if (nargs != 9 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3]) ||
        !PyDict_Check(args[4]) || !PyBytes_Check(args[6]) || !PyBytes_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "lane(data: bytes, start: int, routes: dict, accepts: dict, native: dict, "
                                         "max_body: int, pre: bytes, post: bytes, close: bool)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), max_body = PyLong_AsSsize_t(args[5]);
    if ((start == -1 || max_body == -1) && PyErr_Occurred()) return NULL;
    int force_close = PyObject_IsTrue(args[8]);
    if (force_close < 0) return NULL;
    const char *b = PyBytes_AS_STRING(args[0]), *end = b + PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > end - b) Py_RETURN_NONE;
    Request r;
    const char *next = parse_request(b + start, end, &r);
    if (!next || r.body_len > max_body || !r.accept) Py_RETURN_NONE;

    PyObject *key, *route = NULL, *found;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[2], &pos, &key, &found))
        if (PyBytes_Check(key) && PyBytes_GET_SIZE(key) == r.target_len &&
            memcmp(PyBytes_AS_STRING(key), r.target, (size_t)r.target_len) == 0) {
            route = found;
            break;
        }
    if (!route || !PyTuple_Check(route) || PyTuple_GET_SIZE(route) < 1) Py_RETURN_NONE;
    PyObject *family = PyTuple_GET_ITEM(route, 0);
    PyObject *fields = PyDict_GetItemWithError(hot_cfg.fields, family);
    if (!fields) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "family %R: not configured", family);
        return NULL;
    }
    PyObject *templates = PyDict_GetItemWithError(args[4], family);
    if (!templates) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyDict_Check(templates)) {
        PyErr_SetString(PyExc_TypeError, "native: want {family: {key: template}}");
        return NULL;
    }
    PyObject *acc = PyBytes_FromStringAndSize(r.accept, r.accept_len);
    if (!acc) return NULL;
    int ok = hot_accepted(args[3], acc);
    Py_DECREF(acc);
    if (ok <= 0) {
        if (ok < 0) return NULL;
        Py_RETURN_NONE;
    }
    Http http = {args[6], args[7], r.close || force_close};
    Py_INCREF(route);   /* held across answer_body, which may run Python code (header_for) */
    PyObject *out = hot_answer_body(r.body, r.body + r.body_len, fields, templates, &http);
    PyObject *res = NULL;
    if (out == Py_None)
        res = out;
    else if (out)
        res = Py_BuildValue("(nONO)", (Py_ssize_t)(next - b), route, out, http.close ? Py_False : Py_True);
    Py_DECREF(route);
    return res;
}

PyMethodDef hot_lane_methods[] = {
    {"lane", (PyCFunction)(void (*)(void))lane, METH_FASTCALL, lane_doc},
    {NULL, NULL, 0, NULL},
};
