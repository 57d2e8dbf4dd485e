/* service/shortcut/hot_serve.c -- Reader: every whole request at the start of one socket read
 * answered by lane() and written to the transport, with each answer's metrics counted, in one C
 * call (service/protocol/uvicorn_api.py's data callback). What the loop did in Python per request
 * (the calls into the service, the write, the histogram) cost a fifth of a one-row answer's time
 * in the worker; here it is one call per read, and what a read does not change (the routes, the
 * counts, the transport's write) is bound and checked once, a worker's when made, a connection's
 * when bound: passing and checking twelve arguments by keyword on every read, through a Python
 * frame, was 3% of the worker's CPU a request on the realistic mix at 25,000 requests/s (0.7 of
 * 23 µs, against the tree before, alternated; the Python interpreter's share of a perf profile
 * halved). The rules stay with their owners: what a request
 * and its answer are is lane()'s (hot_lane.c); the histogram's buckets are the metrics layout's
 * (service/metrics/layout.py BUCKETS_S, handed in as float64 bytes), counted as
 * Metrics.observe_at counts them (tests/service/shortcut/test_hot_serve.py holds the two equal).
 */
#include "hot.h"

#include <structmember.h>
#include <time.h>

/* its states: hot.h, enum hot_serve_state */

/* The clock of time.perf_counter() (CLOCK_MONOTONIC), in seconds. */
/* declared, and described, in hot.h */
double hot_seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Metrics.observe_at in counts (flat float64 items, nflat of them) with buckets' nb upper bounds:
 * the bucket of the first bound >= s (bisect_left; nb: +Inf) one more, the seconds and bytes added
 * after the nb + 1 buckets. A base whose cells do not fit is not counted. */
static void observe(double *flat, Py_ssize_t nflat, const double *bounds, Py_ssize_t nb, Py_ssize_t base, double s,
                    double nbytes)
{
    if (base < 0 || base > nflat - nb - 3) return;
    Py_ssize_t lo = 0, hi = nb;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (bounds[mid] < s) lo = mid + 1;
        else hi = mid;
    }
    flat[base + lo] += 1;
    flat[base + nb + 1] += s;
    flat[base + nb + 2] += nbytes;
}

/* declared, and described, in hot.h */
void hot_observe(const Py_buffer *c, PyObject *buckets, Py_ssize_t base, double seconds, double nbytes)
{
    if (c->buf)
        observe((double *)c->buf, c->len / 8, (const double *)PyBytes_AS_STRING(buckets), PyBytes_GET_SIZE(buckets) / 8,
                base, seconds, nbytes);
}

/* The counts' writable float64 buffer and the buckets' bounds (counts None: not counted, 0 returned
 * with c->buf NULL); -1 with an error set when they are not such. */
int hot_counts_of(PyObject *counts, PyObject *buckets, Py_buffer *c)
{
    c->buf = NULL;
    if (counts == Py_None) return 0;
    if (!PyBytes_Check(buckets) || PyBytes_GET_SIZE(buckets) % 8 || PyBytes_GET_SIZE(buckets) == 0) {
        PyErr_SetString(PyExc_TypeError, "buckets: want the bounds as float64 bytes");
        return -1;
    }
    if (PyObject_GetBuffer(counts, c, PyBUF_WRITABLE) < 0) return -1;
    if (c->len % 8) {
        PyBuffer_Release(c);
        c->buf = NULL;
        PyErr_SetString(PyExc_TypeError, "counts: want a writable buffer of float64 items");
        return -1;
    }
    return 0;
}

/* The metrics offset of a route lane() answered (a V2Route's metrics, a (family, metrics) route's
 * second item): -1 (not counted) for one without. */
static Py_ssize_t metrics_of(PyObject *route)
{
    if (Py_TYPE(route) == &hot_V2RouteType) return ((HotV2Route *)route)->metrics;
    Py_ssize_t base = PyTuple_Check(route) && PyTuple_GET_SIZE(route) == 2
                          ? PyLong_AsSsize_t(PyTuple_GET_ITEM(route, 1)) : -1;
    if (base == -1 && PyErr_Occurred()) PyErr_Clear();
    return base;
}

/* ---- Reader: the lane of a worker, bound to each of its connections --------------------------- */

/* A worker's Reader holds what every read of every connection hands the loop (the lane's
 * arguments but pre and close, the counts, again, fresh and its clock); bind() makes a connection's,
 * which adds its write and flow and shares the worker's (its clock included). Arguments checked
 * once, when made: a read passes its bytes, pre and the loop's time only. */
typedef struct Reader {
    PyObject_HEAD
    PyObject *routes, *accepts, *native, *post, *counts, *buckets, *again, *fresh; /* the worker's */
    PyObject *write, *flow;    /* a connection's (NULL in the worker's own) */
    struct Reader *worker;     /* a connection's: the worker's Reader it shares (NULL in the worker's) */
    double every, next;        /* fresh() at most every `every` s of the loop's clock; next: the worker's */
    int closing;               /* a connection's: its answers close it (draining) */
    vectorcallfunc vectorcall; /* a read: Reader_call */
} Reader;

static int Reader_traverse(Reader *r, visitproc visit, void *arg)
{
    Py_VISIT(r->routes);
    Py_VISIT(r->accepts);
    Py_VISIT(r->native);
    Py_VISIT(r->post);
    Py_VISIT(r->counts);
    Py_VISIT(r->buckets);
    Py_VISIT(r->again);
    Py_VISIT(r->fresh);
    Py_VISIT(r->write);
    Py_VISIT(r->flow);
    Py_VISIT(r->worker);
    return 0;
}

static int Reader_clear(Reader *r)
{
    Py_CLEAR(r->routes);
    Py_CLEAR(r->accepts);
    Py_CLEAR(r->native);
    Py_CLEAR(r->post);
    Py_CLEAR(r->counts);
    Py_CLEAR(r->buckets);
    Py_CLEAR(r->again);
    Py_CLEAR(r->fresh);
    Py_CLEAR(r->write);
    Py_CLEAR(r->flow);
    Py_CLEAR(r->worker);
    return 0;
}

static void Reader_dealloc(Reader *r)
{
    PyObject_GC_UnTrack(r);
    Reader_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* A new Reader holding v's eight worker arguments (routes .. fresh) and every; a connection's also
 * its write, flow and worker (all NULL for a worker's own). */
static PyObject *reader_made(PyTypeObject *type, PyObject *const *v, double every, PyObject *write, PyObject *flow,
                             Reader *worker)
{
    Reader *r = PyObject_GC_New(Reader, type);
    if (!r) return NULL;
    PyObject **slot[] = {&r->routes, &r->accepts, &r->native, &r->post, &r->counts, &r->buckets, &r->again, &r->fresh};
    for (size_t i = 0; i < sizeof slot / sizeof *slot; i++) *slot[i] = Py_NewRef(v[i]);
    r->write = Py_XNewRef(write);
    r->flow = Py_XNewRef(flow);
    r->worker = (Reader *)Py_XNewRef((PyObject *)worker);
    r->every = every;
    r->next = 0.0;
    r->closing = 0;
    r->vectorcall = Reader_vectorcall;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"routes", "accepts", "native", "post", "counts", "buckets", "again", "fresh", "every", NULL};
    PyObject *v[8];
    double every;
    HotLaneArgs la;
    Py_buffer c;
    if (!hot_configured() || !PyArg_ParseTupleAndKeywords(args, kw, "|$OOOOOOOOd:Reader", kwlist, v, v + 1, v + 2, v + 3,
                                                          v + 4, v + 5, v + 6, v + 7, &every))
        return NULL;
    if (PyTuple_GET_SIZE(args) || !kw || PyDict_GET_SIZE(kw) != 9) {
        PyErr_SetString(PyExc_TypeError, "Reader(*, routes, accepts, native, post, counts, buckets, again, fresh, every)");
        return NULL;
    }
    /* the lane's arguments as lane() checks them (a placeholder pre, and close false) */
    PyObject *pre = Py_BuildValue("(yyy)", "", "", ""), *lane[6] = {v[0], v[1], v[2], pre, v[3], Py_False};
    int ok = pre && hot_lane_args(lane, &la) == 0;
    Py_XDECREF(pre);
    if (!ok || hot_counts_of(v[4], v[5], &c) < 0) return NULL;
    if (c.buf) PyBuffer_Release(&c);
    if ((v[6] != Py_None && !PyCallable_Check(v[6])) || !PyCallable_Check(v[7])) {
        PyErr_SetString(PyExc_TypeError, "Reader: again is callable or None, fresh is callable");
        return NULL;
    }
    return reader_made(type, v, every, NULL, NULL, NULL);
}

PyDoc_STRVAR(bind_doc, "bind(write, flow) -> Reader\n--\n\n"
             "The Reader of one connection of this worker: its answers passed to write(), while\n"
             "flow.write_paused is false.");

static PyTypeObject ReaderType;

static PyObject *Reader_bind(Reader *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (w->worker || nargs != 2 || !PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind(write, flow): a worker's Reader, write callable");
        return NULL;
    }
    PyObject *from[] = {w->routes, w->accepts, w->native, w->post, w->counts, w->buckets, w->again, w->fresh};
    return reader_made(Py_TYPE(w), from, w->every, args[0], args[1], w);
}

static PyObject *again_kwnames; /* lane()'s keyword names, for again(data, at, **lane's) */

/* (at, answered, state, error) of one read (Reader's doc says which) */
static PyObject *read_result(Py_ssize_t at, Py_ssize_t done, int state, PyObject *err)
{
    /* the result tuple made by hand: Py_BuildValue's format parsing was ~1% of a one-row answer's time */
    PyObject *res = PyTuple_New(4), *a = PyLong_FromSsize_t(at), *d = PyLong_FromSsize_t(done),
             *st = PyLong_FromLong(state);
    if (!res || !a || !d || !st) {
        Py_XDECREF(res);
        Py_XDECREF(a);
        Py_XDECREF(d);
        Py_XDECREF(st);
        Py_XDECREF(err);
        return NULL;
    }
    PyTuple_SET_ITEM(res, 0, a);
    PyTuple_SET_ITEM(res, 1, d);
    PyTuple_SET_ITEM(res, 2, st);
    PyTuple_SET_ITEM(res, 3, err ? err : Py_NewRef(Py_None));   /* (err's reference moves into the tuple) */
    return res;
}

static PyObject *Reader_call(Reader *r, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!r->worker || nargs != 3 || kwnames || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 3) {
        PyErr_SetString(PyExc_TypeError, "a connection's Reader(data: bytes, pre: (bytes, bytes, bytes), now: float)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 3; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(args[1], i))) {
            PyErr_SetString(PyExc_TypeError, "Reader(): pre is three bytes");
            return NULL;
        }
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    if (!again_kwnames && !(again_kwnames = Py_BuildValue("(ssssss)", "routes", "accepts", "native", "pre", "post",
                                                          "close")))
        return NULL;
    static PyObject *paused_name;   /* "write_paused", interned once (with the GIL) */
    if (!paused_name && !(paused_name = PyUnicode_InternFromString("write_paused"))) return NULL;
    PyObject *data = args[0], *err = NULL, *close = r->closing ? Py_True : Py_False;
    HotLaneArgs la = {r->routes, r->accepts, r->native, args[1], r->post, r->closing};
    Py_ssize_t at = 0, n = PyBytes_GET_SIZE(data), done = 0;
    int state = SERVE_DONE;
    Py_buffer c = {.buf = NULL};
    Reader *w = r->worker;
    if (now >= w->next) {   /* the templates checked against the manifest (those dropped: C declines) */
        w->next = now + w->every;
        PyObject *f = PyObject_CallNoArgs(w->fresh);
        if (!f) goto failed;
        Py_DECREF(f);
    }
    if (hot_counts_of(r->counts, r->buckets, &c) < 0) goto failed;
    const double *bounds = c.buf ? (const double *)PyBytes_AS_STRING(r->buckets) : NULL;
    Py_ssize_t nb = c.buf ? PyBytes_GET_SIZE(r->buckets) / 8 : 0;
    while (at < n) {
        PyObject *p = PyObject_GetAttr(r->flow, paused_name);
        int paused = p ? PyObject_IsTrue(p) : -1;
        Py_XDECREF(p);
        if (paused) {
            if (paused < 0) goto failed;
            state = SERVE_PAUSED;
            break;
        }
        double t0 = hot_seconds_now();
        PyObject *got = hot_lane_at(data, at, &la);
        if (got == Py_NotImplemented && r->again != Py_None) {   /* a header or text computed, then answered */
            Py_DECREF(got);
            PyObject *start = PyLong_FromSsize_t(at);
            if (!start) goto failed;
            PyObject *call[8] = {data, start, r->routes, r->accepts, r->native, args[1], r->post, close};
            got = PyObject_Vectorcall(r->again, call, 2, again_kwnames);
            Py_DECREF(start);
        }
        if (!got) goto failed;
        if (!PyTuple_Check(got)) {
            state = got == Py_None ? SERVE_NOT_REQUEST : got == Py_False ? SERVE_DECLINED : SERVE_AGAIN;
            Py_DECREF(got);
            break;
        }
        PyObject *route = PyTuple_GET_ITEM(got, 1), *out = PyTuple_GET_ITEM(got, 2);
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(got, 0));
        int keep_alive = PyTuple_GET_ITEM(got, 3) == Py_True;
        PyObject *res = end < 0 ? NULL : PyObject_CallOneArg(r->write, out);
        if (!res) {
            Py_DECREF(got);
            goto failed;
        }
        Py_DECREF(res);
        done++;
        at = end;
        if (c.buf)
            observe((double *)c.buf, c.len / 8, bounds, nb, metrics_of(route), hot_seconds_now() - t0,
                    (double)PyBytes_GET_SIZE(out));
        Py_DECREF(got);
        if (!keep_alive) {
            state = SERVE_CLOSED;
            break;
        }
    }
    if (0) {
    failed:   /* the exception goes back as a value: the answers written before it are counted */
        state = SERVE_FAILED;
        PyObject *type, *tb;
        PyErr_Fetch(&type, &err, &tb);
        PyErr_NormalizeException(&type, &err, &tb);
        if (err && tb) PyException_SetTraceback(err, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
    }
    if (c.buf) PyBuffer_Release(&c);
    return read_result(at, done, state, err);
}

PyDoc_STRVAR(reader_doc, "Reader(*, routes, accepts, native, post, counts, buckets, again, fresh, every)\n--\n\n"
             "The hot lane of one worker (bind() makes each connection's). A connection's Reader called\n"
             "with (data, pre, now) answers the whole requests at the start of data as lane(data, at,\n"
             "routes=, accepts=, native=, pre=, post=, close=) answers them (close: the Reader's\n"
             "`closing`), each response passed to its write(), while its flow.write_paused is false; each\n"
             "answer counted in counts (a writable float64 buffer, or None) at its route's metrics offset\n"
             "(a (family, metrics) route's second item, a V2Route's metrics) as Metrics.observe_at counts\n"
             "it, with buckets (float64 bytes) its histogram's bounds. A request lane() cannot answer\n"
             "before a header or text is computed (NotImplemented) is handed to again(data, at, routes=,\n"
             "...), lane()'s arguments, which computes it and answers as lane() does\n"
             "(templates.lane_again); again None: the loop stops there. fresh() is called first when now\n"
             "(the event loop's clock) reaches the worker's next check, every `every` seconds (the\n"
             "templates checked against the manifest). Returns (at, answered, state, error): where the\n"
             "unanswered bytes start and why the loop stopped: 0 all answered, 1 write paused, 2 not a\n"
             "request lane() reads (None), 3 declined (False), 4 a header or text to compute first\n"
             "(NotImplemented, from lane() with again None or from again), 5 the last answer closes the\n"
             "connection, 6 fresh(), lane(), again() or write() raised: error is the exception (else None).");

static PyMethodDef Reader_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))Reader_bind, METH_FASTCALL, bind_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Reader_members[] = {
    {"closing", T_BOOL, offsetof(Reader, closing), 0, "a connection's: its answers close it (draining)"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *Reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return Reader_call((Reader *)self, args, nargsf, kwnames);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service.shortcut._hot.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = reader_doc,
    .tp_new = Reader_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_methods = Reader_methods,
    .tp_members = Reader_members,
};

PyDoc_STRVAR(observe_doc, "observe(counts, buckets, *, base, seconds, nbytes)\n--\n\n"
             "One answer counted in counts as a Reader counts it (for the tests: Metrics.observe_at's equal).");

static const char *const observe_names[] = {"counts", "buckets", "base", "seconds", "nbytes", NULL};
static HotSig observe_sig = {.fn = "observe", .names = observe_names, .npos = 2, .nreq = 5};

static PyObject *observe_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *v[5];
    Py_buffer c;
    if (hot_args(&observe_sig, args, nargs, kwnames, v) < 0) return NULL;
    Py_ssize_t base = PyLong_AsSsize_t(v[2]);
    double s = PyFloat_AsDouble(v[3]), nbytes = PyFloat_AsDouble(v[4]);
    if (PyErr_Occurred()) return NULL;
    if (v[0] == Py_None || hot_counts_of(v[0], v[1], &c) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "observe: counts is a writable buffer");
        return NULL;
    }
    observe((double *)c.buf, c.len / 8, (const double *)PyBytes_AS_STRING(v[1]), PyBytes_GET_SIZE(v[1]) / 8, base, s,
            nbytes);
    PyBuffer_Release(&c);
    Py_RETURN_NONE;
}

PyMethodDef hot_serve_methods[] = {
    {"observe", (PyCFunction)(void (*)(void))observe_py, METH_FASTCALL | METH_KEYWORDS, observe_doc},
    {NULL, NULL, 0, NULL},
};

/* declared in hot.h */
int hot_serve_ready(PyObject *m)
{
    if (PyType_Ready(&ReaderType) < 0) return -1;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        return -1;
    }
    return 0;
}
