/* service/shortcut/hot_serve.c -- serve(): every whole request at the start of one socket read
 * answered by lane() and written to the transport, with each answer's metrics counted, in one C
 * call (service/protocol/uvicorn_api.py's data callback). What the loop did in Python per request
 * (the calls into the service, the write, the histogram) cost a fifth of a one-row answer's time
 * in the worker; here it is one call per read. The rules stay with their owners: what a request
 * and its answer are is lane()'s (hot_lane.c); the histogram's buckets are the metrics layout's
 * (service/metrics/layout.py BUCKETS_S, handed in as float64 bytes), counted as
 * Metrics.observe_at counts them (tests/service/shortcut/test_hot_serve.py holds the two equal).
 */
#include "hot.h"

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

PyDoc_STRVAR(serve_doc, "serve(data, *, routes, accepts, native, pre, post, close, write, flow, counts, buckets, again)\n"
             "--\n\n"
             "The whole requests at the start of data answered as lane(data, at, routes=, accepts=, native=,\n"
             "pre=, post=, close=) answers them, each response passed to write(), while flow.write_paused is\n"
             "false; each answer counted in counts (a writable float64 buffer, or None) at its route's\n"
             "metrics offset (a (family, metrics) route's second item, a V2Route's metrics) as\n"
             "Metrics.observe_at counts it, with buckets (float64 bytes) its histogram's bounds. A request\n"
             "lane() cannot answer before a header or text is computed (NotImplemented) is handed to\n"
             "again(data, at, routes=, ...), lane()'s arguments, which computes it and answers as lane()\n"
             "does (templates.lane_again); again None: the loop stops there. (at, answered, state, error):\n"
             "where the unanswered bytes start and why the loop stopped: 0 all answered, 1 write paused, 2\n"
             "not a request lane() reads (None), 3 declined (False), 4 a header or text to compute first\n"
             "(NotImplemented, from lane() with again None or from again), 5 the last answer closes the\n"
             "connection, 6 lane(), again() or write() raised: error is the exception (else None).");

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

static const char *const serve_names[] = {"data",  "routes", "accepts", "native", "pre",    "post", "close",
                                          "write", "flow",   "counts",  "buckets", "again", NULL};
static HotSig serve_sig = {.fn = "serve", .names = serve_names, .npos = 1, .nreq = 12};
static PyObject *again_kwnames; /* lane()'s keyword names, for again(data, at, **lane's) */

static PyObject *serve(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    PyObject *v[12], *err = NULL;
    HotLaneArgs la;
    if (!hot_configured() || hot_args(&serve_sig, args, nargs, kwnames, v) < 0) return NULL;
    if (!PyBytes_Check(v[0])) {
        PyErr_SetString(PyExc_TypeError, "serve(): data is bytes");
        return NULL;
    }
    if (hot_lane_args(v + 1, &la) < 0) return NULL;
    if (!again_kwnames && !(again_kwnames = Py_BuildValue("(ssssss)", "routes", "accepts", "native", "pre", "post",
                                                          "close")))
        return NULL;
    PyObject *data = v[0], *write = v[7], *flow = v[8], *again = v[11];
    Py_buffer c;
    if (hot_counts_of(v[9], v[10], &c) < 0) return NULL;
    const double *bounds = c.buf ? (const double *)PyBytes_AS_STRING(v[10]) : NULL;
    Py_ssize_t nb = c.buf ? PyBytes_GET_SIZE(v[10]) / 8 : 0, at = 0, n = PyBytes_GET_SIZE(data), done = 0;
    int state = SERVE_DONE;
    static PyObject *paused_name;   /* "write_paused", interned once (with the GIL) */
    if (!paused_name && !(paused_name = PyUnicode_InternFromString("write_paused"))) goto failed;
    while (at < n) {
        PyObject *p = PyObject_GetAttr(flow, paused_name);
        int paused = p ? PyObject_IsTrue(p) : -1;
        Py_XDECREF(p);
        if (paused) {
            if (paused < 0) goto failed;
            state = SERVE_PAUSED;
            break;
        }
        double t0 = hot_seconds_now();
        PyObject *got = hot_lane_at(data, at, &la);
        if (got == Py_NotImplemented && again != Py_None) {   /* a header or text computed, then answered */
            Py_DECREF(got);
            PyObject *start = PyLong_FromSsize_t(at);
            if (!start) goto failed;
            PyObject *call[8] = {data, start, v[1], v[2], v[3], v[4], v[5], v[6]};
            got = PyObject_Vectorcall(again, call, 2, again_kwnames);
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
        PyObject *r = end < 0 ? NULL : PyObject_CallOneArg(write, out);
        if (!r) {
            Py_DECREF(got);
            goto failed;
        }
        Py_DECREF(r);
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

PyDoc_STRVAR(observe_doc, "observe(counts, buckets, *, base, seconds, nbytes)\n--\n\n"
             "One answer counted in counts as serve() counts it (for the tests: Metrics.observe_at's equal).");

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
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL | METH_KEYWORDS, serve_doc},
    {"observe", (PyCFunction)(void (*)(void))observe_py, METH_FASTCALL | METH_KEYWORDS, observe_doc},
    {NULL, NULL, 0, NULL},
};
