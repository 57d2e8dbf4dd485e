/* service/shortcut/hot_lane.c -- lane(): a whole HTTP request to the whole HTTP response, for
 * service/protocol/lane.py; and v2_rest(), the same lookup of a v2 REST infer Python has read (its
 * body and ASGI headers), for the Python door (service/v2/hot.py Hot.rest). It tells the bytes it cannot read as a request of its routes (None:
 * httptools reads them) from a request it reads and declines to answer (False: the full path
 * answers it, and need not offer it to the shortcut again).
 */
#include "hot.h"

/* A request the lane may answer: "POST <target> HTTP/1.1", each header line a token name, ':',
 * optional spaces, and visible text (no trailing space) ended by CRLF, a Content-Length of
 * digits whose body is all in the buffer. Anything else, however legal, is left to httptools
 * (and from there to ASGI): a header of the configured off_headers (Transfer-Encoding, Expect,
 * Upgrade, ...), a Connection other than one "close" or "keep-alive", a repeated
 * Content-Length, Connection or Accept, obs-text or a folded line, a head over the configured
 * max_head bytes. So whatever this parser takes, httptools parses the same way (it only ever
 * sees less). */

#define LANE_HEADERS 48 /* header lines a request the lane takes may have (more: httptools reads it) */

typedef struct {
    const char *target, *accept, *body;
    Py_ssize_t target_len, accept_len, body_len;
    int close;
    int nh; /* its header lines: names and values */
    const char *name[LANE_HEADERS], *value[LANE_HEADERS];
    Py_ssize_t name_len[LANE_HEADERS], value_len[LANE_HEADERS];
} Request;

static unsigned char TOKEN[256]; /* RFC 9110 tchar; filled at import */

void hot_lane_ready(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    for (int c = '0'; c <= '9'; c++) TOKEN[c] = 1;
    for (int c = 'a'; c <= 'z'; c++) TOKEN[c] = TOKEN[c - 32] = 1;
    for (const char *e = extra; *e; e++) TOKEN[(unsigned char)*e] = 1;
}

/* Whether n[0:len] is `lower` (l bytes) but for the case of ASCII letters. */
static int name_is(const char *n, Py_ssize_t len, const char *lower, Py_ssize_t l)
{
    if (len != l) return 0;
    for (Py_ssize_t i = 0; i < l; i++)
        if ((n[i] >= 'A' && n[i] <= 'Z' ? n[i] + 32 : n[i]) != lower[i]) return 0;
    return 1;
}

#define NAME_IS(n, len, literal) name_is(n, len, literal, (Py_ssize_t)sizeof literal - 1)

PyObject *hot_lane_names(PyObject *names)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(names, i), *b = NULL;
        int ok = PyUnicode_Check(o) && PyUnicode_IS_ASCII(o) && PyUnicode_GET_LENGTH(o) > 0;
        for (Py_ssize_t j = 0; ok && j < PyUnicode_GET_LENGTH(o); j++) {
            Py_UCS4 c = PyUnicode_READ_CHAR(o, j);
            ok = TOKEN[c] && !(c >= 'A' && c <= 'Z');
        }
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "off_headers: want lower-case header names (str), got %R", o);
            Py_CLEAR(out);
        } else if (!(b = PyUnicode_AsASCIIString(o))) {
            Py_CLEAR(out);
        } else {
            PyTuple_SET_ITEM(out, i, b);
        }
    }
    return out;
}

/* The end of the request at p (after its body), or NULL: not one this lane takes, or not whole. */
static const char *parse_request(const char *p, const char *end, Request *r)
{
    const char *limit = end - p > hot_cfg.max_head ? p + hot_cfg.max_head : end;
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
    r->nh = 0;
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
        if (r->nh == LANE_HEADERS) return NULL;
        r->name[r->nh] = n, r->name_len[r->nh] = nl, r->value[r->nh] = v, r->value_len[r->nh] = vl;
        r->nh++;
        if (NAME_IS(n, nl, "accept")) {
            r->accept = v;
            r->accept_len = vl;
            n_accept++;
        } else if (NAME_IS(n, nl, "content-length")) {
            if (vl < 1 || vl > 9 || n_length++) return NULL;
            length = 0;
            for (Py_ssize_t i = 0; i < vl; i++) {
                if (!hot_is_digit(v[i])) return NULL;
                length = length * 10 + (v[i] - '0');
            }
        } else if (NAME_IS(n, nl, "connection")) {
            if (n_connection++) return NULL;
            if (NAME_IS(v, vl, "close")) r->close = 1;
            else if (!NAME_IS(v, vl, "keep-alive")) return NULL;
        } else {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(hot_cfg.off_headers); i++) {
                PyObject *off = PyTuple_GET_ITEM(hot_cfg.off_headers, i);
                if (name_is(n, nl, PyBytes_AS_STRING(off), PyBytes_GET_SIZE(off))) return NULL;
            }
        }
    }
    if (n_length != 1 || n_accept > 1 || end - p < length) return NULL;
    r->body = p;
    r->body_len = length;
    return p + length;
}

PyDoc_STRVAR(lane_doc, "lane(data, start, *, routes, accepts, native, pre, post, close)\n--\n\n"
             "The request at data[start:] answered, if it is a whole, plain POST to a target of routes\n"
             "({target: (family[, metrics]) | V2Route}, or a tuple of such dicts) whose Accept is in accepts\n"
             "({value or None: 0 safetensors, 1 JSON}) and whose spec is a known template (native: {family:\n"
             "templates}): (end of the request, its route, the whole response with the HTTP head pre[format]\n"
             "+ length + post [+ connection: close], keep-alive). A V2Route (hot_named.c) is a v2 REST binary\n"
             "infer of service/v2/hot.py: its entry's rows or block, head pre[2] + length + the entry's post\n"
             "(an entry C does not fill, Python's, declines: False);\n"
             "or, without the length header, a JSON-tensor infer of its json_entries (service/v2/hot_json.py):\n"
             "head pre[1] + length + the entry's post.\n"
             "None: the bytes are not a whole plain request to a target of routes (incomplete, outside\n"
             "this parser's strict subset of HTTP/1.1, or to another target).\n"
             "False: they are one, and the shortcut declines it (no Accept in accepts, a body over the\n"
             "configured max_body, no template for its spec, or one that does not answer it).\n"
             "NotImplemented: as answer()'s, a header to compute first (see missing()).");

/* The value of routes (a dict, or a tuple of dicts searched in order) for the target [t, t + len),
 * borrowed, or NULL (none; no error set). */
static PyObject *route_of(PyObject *routes, const char *t, Py_ssize_t len)
{
    Py_ssize_t nd = PyTuple_Check(routes) ? PyTuple_GET_SIZE(routes) : 1;
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *d = PyTuple_Check(routes) ? PyTuple_GET_ITEM(routes, i) : routes, *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Check(d) && PyDict_Next(d, &pos, &key, &value))
            if (PyBytes_Check(key) && PyBytes_GET_SIZE(key) == len && memcmp(PyBytes_AS_STRING(key), t, (size_t)len) == 0)
                return value;
    }
    return NULL;
}

/* A v2 REST infer to a V2Route (hot_named.c) of service/v2/hot.py: its answer (bytes), None
 * (declined) or NULL. The inference header is the body's first n bytes, n the value of the one
 * header route->length_name (digits); route->entries maps the header's bytes to a hot_v2_answer()
 * entry; a header of route->refused declines it. A body without the length header is a JSON-tensor
 * infer: route->json_entries' (hot_v2json.c), its head pre json_pre. found NULL (the lane): an entry
 * C does not fill (Python's Entry: a large answer, outputs into shared memory) declines; else
 * (v2_rest) *found is the entry answered (a new reference) and such an entry's answer is
 * (entry, positions: the bytes after the header), for Python to make. */
static PyObject *v2_answer(const HotV2Route *route, const Request *r, const Http *http, PyObject *json_pre,
                           PyObject **found)
{
    PyObject *lname = route->length_name, *refused = route->refused;
    Py_ssize_t n = -1;
    for (int i = 0; i < r->nh; i++) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(refused); k++) {
            PyObject *x = PyTuple_GET_ITEM(refused, k);
            if (name_is(r->name[i], r->name_len[i], PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x))) Py_RETURN_NONE;
        }
        if (!name_is(r->name[i], r->name_len[i], PyBytes_AS_STRING(lname), PyBytes_GET_SIZE(lname))) continue;
        if (n >= 0 || r->value_len[i] < 1 || r->value_len[i] > 9) Py_RETURN_NONE;   /* twice, or not a length */
        n = 0;
        for (Py_ssize_t j = 0; j < r->value_len[i]; j++) {
            if (!hot_is_digit(r->value[i][j])) Py_RETURN_NONE;
            n = n * 10 + (r->value[i][j] - '0');
        }
    }
    if (n < 0) {   /* no binary data: JSON tensors */
        Http hj = *http;
        hj.pre = json_pre, hj.post = NULL, hj.json = 1;
        return hot_v2json_answer(route, r->body, r->body_len, &hj, found);
    }
    if (n > r->body_len || PyDict_GET_SIZE(route->entries) == 0) Py_RETURN_NONE;
    PyObject *e = hot_entry(route->entries, PyBytes_FromStringAndSize(r->body, n));
    if (!e) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out;
    if (Py_TYPE(e) == &hot_RowsEntryType || Py_TYPE(e) == &hot_BlockEntryType)
        out = hot_v2_answer(e, r->body + n, r->body_len - n, http);
    else if (!found)
        out = Py_NewRef(Py_None);
    else
        out = Py_BuildValue("(Oy#)", e, r->body + n, r->body_len - n);
    if (found && out && out != Py_None) *found = Py_NewRef(e);
    Py_DECREF(e);
    return out;
}

/* lane()'s result from an answer (a new reference, None, NotImplemented or NULL; stolen). */
static PyObject *lane_result(PyObject *out, const char *b, const char *next, PyObject *route, const Http *http)
{
    if (out == Py_None) {
        Py_DECREF(out);
        Py_RETURN_FALSE;
    }
    if (!out || out == Py_NotImplemented) return out;
    /* (made by hand, once per answer: Py_BuildValue's format parsing costs more than the tuple) */
    PyObject *res = PyTuple_New(4), *end = PyLong_FromSsize_t((Py_ssize_t)(next - b));
    if (!res || !end) {
        Py_XDECREF(res);
        Py_XDECREF(end);
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(res, 0, end);
    PyTuple_SET_ITEM(res, 1, Py_NewRef(route));
    PyTuple_SET_ITEM(res, 2, out);   /* (stolen) */
    PyTuple_SET_ITEM(res, 3, Py_NewRef(http->close ? Py_False : Py_True));
    return res;
}

/* declared in hot.h: lane()'s names, the two it takes by position first */
const char *const hot_lane_names_of[] = {"data", "start", "routes", "accepts", "native", "pre", "post", "close", NULL};

/* declared in hot.h */
int hot_lane_args(PyObject *const *v, HotLaneArgs *a)
{
    int ok = (PyDict_Check(v[0]) || PyTuple_Check(v[0])) && PyDict_Check(v[1]) && PyDict_Check(v[2]) &&
             PyTuple_Check(v[3]) && PyTuple_GET_SIZE(v[3]) == 3 && PyBytes_Check(v[4]);
    for (Py_ssize_t i = 0; ok && i < 3; i++) ok = PyBytes_Check(PyTuple_GET_ITEM(v[3], i));
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "lane(data: bytes, start: int, *, routes: dict | tuple of dicts, accepts: "
                                         "dict, native: dict, pre: (safetensors, json, v2 binary: bytes), post: "
                                         "bytes, close: bool)");
        return -1;
    }
    *a = (HotLaneArgs){v[0], v[1], v[2], v[3], v[4], PyObject_IsTrue(v[5])};
    return a->close < 0 ? -1 : 0;
}

/* declared in hot.h */
PyObject *hot_lane_at(PyObject *data, Py_ssize_t start, const HotLaneArgs *a)
{
    const char *b = PyBytes_AS_STRING(data), *end = b + PyBytes_GET_SIZE(data);
    if (start < 0 || start > end - b) Py_RETURN_NONE;
    Request r;
    const char *next = parse_request(b + start, end, &r);
    PyObject *route = next ? route_of(a->routes, r.target, r.target_len) : NULL;
    if (!route) Py_RETURN_NONE;
    PyObject *out;
    if (Py_TYPE(route) == &hot_V2RouteType) {   /* a v2 REST infer (service/v2/hot.py) */
        if (r.body_len > hot_cfg.max_body) Py_RETURN_FALSE;
        Http http = {PyTuple_GET_ITEM(a->pre, 2), NULL, r.close || a->close, 0, HOT_FRAME_HTTP};
        out = v2_answer((const HotV2Route *)route, &r, &http, PyTuple_GET_ITEM(a->pre, 1), NULL);
        return lane_result(out, b, next, route, &http);
    }
    if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) < 1 || PyTuple_GET_SIZE(route) > 2) {
        PyErr_SetString(PyExc_TypeError, "routes: want {target: (family[, metrics]) | V2Route}");
        return NULL;
    }
    /* a whole plain request to one of the routes: from here on a decline is False */
    PyObject *family = PyTuple_GET_ITEM(route, 0);
    PyObject *fields = hot_fields_of(family);
    if (!fields) return NULL;
    if (r.body_len > hot_cfg.max_body) Py_RETURN_FALSE;
    PyObject *templates = PyDict_GetItemWithError(a->native, family);
    if (!templates) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_FALSE;
    }
    if (!PyDict_Check(templates)) {
        PyErr_SetString(PyExc_TypeError, "native: want {family: {key: template}}");
        return NULL;
    }
    PyObject *acc = r.accept ? PyBytes_FromStringAndSize(r.accept, r.accept_len) : NULL;
    if (r.accept && !acc) return NULL;
    int ok = hot_accepted(a->accepts, acc);   /* no Accept: looked up as None */
    Py_XDECREF(acc);
    if (ok <= 0) {
        if (ok < 0) return NULL;
        Py_RETURN_FALSE;
    }
    int json = ok == 2;
    Http http = {PyTuple_GET_ITEM(a->pre, json), a->post, r.close || a->close, json, HOT_FRAME_HTTP};
    Py_INCREF(route);   /* held, as hot_answer_body holds its template */
    out = hot_answer_body(r.body, r.body + r.body_len, fields, hot_axis_field_of(family), templates, &http);
    PyObject *res = lane_result(out, b, next, route, &http);
    Py_DECREF(route);
    return res;
}

static HotSig lane_sig = {.fn = "lane", .names = hot_lane_names_of, .npos = 2, .nreq = 8};

static PyObject *lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *v[8];
    HotLaneArgs a;
    if (!hot_configured() || hot_args(&lane_sig, args, nargs, kwnames, v) < 0) return NULL;
    if (!PyBytes_Check(v[0])) {
        PyErr_SetString(PyExc_TypeError, "lane(): data is bytes");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(v[1]);
    if ((start == -1 && PyErr_Occurred()) || hot_lane_args(v + 2, &a) < 0) return NULL;
    return hot_lane_at(v[0], start, &a);
}

/* The Request of a body Python read and its ASGI headers (a sequence of (name, value) bytes pairs,
 * held by the caller), holding only the lines v2_answer reads (route's length header and refused
 * names: a request with any number of other lines is looked up as the lane looks up its own): 0;
 * 1 with more such lines than the lane takes (declined); -1 TypeError. */
static int asgi_request(const HotV2Route *route, PyObject *fast, PyObject *body, Request *r)
{
    *r = (Request){.body = PyBytes_AS_STRING(body), .body_len = PyBytes_GET_SIZE(body)};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *lname = route->length_name, *refused = route->refused;
    int nh = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "v2_rest(): headers are (name: bytes, value: bytes) pairs");
            return -1;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        const char *name = PyBytes_AS_STRING(k);
        Py_ssize_t nl = PyBytes_GET_SIZE(k);
        int read = name_is(name, nl, PyBytes_AS_STRING(lname), PyBytes_GET_SIZE(lname));
        for (Py_ssize_t x = 0; !read && x < PyTuple_GET_SIZE(refused); x++) {
            PyObject *ref = PyTuple_GET_ITEM(refused, x);
            read = name_is(name, nl, PyBytes_AS_STRING(ref), PyBytes_GET_SIZE(ref));
        }
        if (!read) continue;
        if (nh == LANE_HEADERS) return 1;
        r->name[nh] = name, r->name_len[nh] = nl;
        r->value[nh] = PyBytes_AS_STRING(v), r->value_len[nh] = PyBytes_GET_SIZE(v);
        nh++;
    }
    r->nh = nh;
    return 0;
}

PyDoc_STRVAR(v2_rest_doc, "v2_rest(route, body, headers) -> (answer, json, post, metrics) | (entry, positions) | None"
             " | NotImplemented\n--\n\n"
             "A v2 REST infer Python read (its body, its ASGI headers: (name, value) bytes pairs) to route, a\n"
             "V2Route, answered as lane() answers it (the same length and refused header rules, the same\n"
             "lookups): answer, the bytes without the HTTP head; json, a JSON-tensor answer (else binary);\n"
             "post, the entry's head after the content length's digits; metrics, the route's offset of its\n"
             "\"c\" answers. (entry, positions: the bytes after the inference header): an entry C does not\n"
             "fill (Python's: a large answer, outputs into shared memory). None: declined. NotImplemented:\n"
             "as answer()'s, rows' texts to render first (see missing()).");

static const char *const v2_rest_names[] = {"route", "body", "headers", NULL};
static HotSig v2_rest_sig = {.fn = "v2_rest", .names = v2_rest_names, .npos = 3, .nreq = 3};

static PyObject *v2_rest(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *v[3];
    if (!hot_configured() || hot_args(&v2_rest_sig, args, nargs, kwnames, v) < 0) return NULL;
    if (Py_TYPE(v[0]) != &hot_V2RouteType || !PyBytes_Check(v[1])) {
        PyErr_SetString(PyExc_TypeError, "v2_rest(route: V2Route, body: bytes, headers)");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(v[2], "v2_rest(): headers must be a sequence");
    if (!fast) return NULL;
    Request r;
    const HotV2Route *route = (const HotV2Route *)v[0];
    int rc = asgi_request(route, fast, v[1], &r);
    PyObject *out = NULL, *found = NULL;
    /* the answer alone, no HTTP head (as answer()'s JSON): the front's writers add theirs */
    const Http bare = {.frame = HOT_FRAME_BARE};
    if (rc == 0 && r.body_len <= hot_cfg.max_body) out = v2_answer(route, &r, &bare, Py_None, &found);
    else if (rc >= 0) out = Py_NewRef(Py_None);
    if (out && PyBytes_Check(out)) {
        PyObject *post = Py_TYPE(found) == &hot_RowsEntryType    ? ((HotRowsEntry *)found)->post
                         : Py_TYPE(found) == &hot_BlockEntryType ? ((HotBlockEntry *)found)->post
                                                                 : ((HotJsonEntry *)found)->post;
        out = Py_BuildValue("(NOOn)", out, Py_TYPE(found) == &hot_JsonEntryType ? Py_True : Py_False, post,
                            route->metrics);
    }
    Py_XDECREF(found);
    Py_DECREF(fast);
    return out;
}

PyMethodDef hot_lane_methods[] = {
    {"lane", (PyCFunction)(void (*)(void))lane, METH_FASTCALL | METH_KEYWORDS, lane_doc},
    {"v2_rest", (PyCFunction)(void (*)(void))v2_rest, METH_FASTCALL | METH_KEYWORDS, v2_rest_doc},
    {NULL, NULL, 0, NULL},
};
