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
static double seconds_now(void)
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

/* The counts' writable float64 buffer and the buckets' bounds (counts None: not counted, 0 returned
 * with c->buf NULL); -1 with an error set when they are not such. */
static int counts_of(PyObject *counts, PyObject *buckets, Py_buffer *c)
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

PyDoc_STRVAR(serve_doc, "serve(data, routes, accepts, native, pre, post, close, write, flow, counts, buckets, again)\n--\n\n"
             "The whole requests at the start of data answered as lane(data, at, routes, accepts, native,\n"
             "pre, post, close) answers them, each response passed to write(), while flow.write_paused is\n"
             "false; each answer counted in counts (a writable float64 buffer, or None) at its route's\n"
             "metrics offset (route[1]) as Metrics.observe_at counts it, with buckets (float64 bytes) its\n"
             "histogram's bounds. A request lane() cannot answer before a header or text is computed\n"
             "(NotImplemented) is handed to again(data, at, routes, ...), lane()'s arguments, which\n"
             "computes it and answers as lane() does (templates.lane_again); again None: the loop stops\n"
             "there. (at, answered, state, error): where the unanswered bytes start and why the loop\n"
             "stopped: 0 all answered, 1 write paused, 2 not a request lane() reads (None), 3 declined\n"
             "(False), 4 a header or text to compute first (NotImplemented, from lane() with again None or\n"
             "from again), 5 the last answer closes the connection, 6 lane(), again() or write() raised:\n"
             "error is the exception (else None).");

static PyObject *serve(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 12 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "serve(data: bytes, routes, accepts, native, pre, post, close, write, flow, "
                                         "counts, buckets, again)");
        return NULL;
    }
    PyObject *data = args[0], *write = args[7], *flow = args[8], *again = args[11], *err = NULL;
    Py_buffer c;
    if (counts_of(args[9], args[10], &c) < 0) return NULL;
    const double *bounds = c.buf ? (const double *)PyBytes_AS_STRING(args[10]) : NULL;
    Py_ssize_t nb = PyBytes_GET_SIZE(args[10]) / 8, at = 0, n = PyBytes_GET_SIZE(data), done = 0;
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
        double t0 = seconds_now();
        PyObject *start = PyLong_FromSsize_t(at);
        if (!start) goto failed;
        PyObject *call[8] = {data, start, args[1], args[2], args[3], args[4], args[5], args[6]};
        PyObject *got = hot_lane_call(NULL, call, 8);
        if (got == Py_NotImplemented && again != Py_None) {   /* a header or text computed, then answered */
            Py_DECREF(got);
            got = PyObject_Vectorcall(again, call, 8, NULL);
        }
        Py_DECREF(start);
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
        if (c.buf) {
            Py_ssize_t base = PyTuple_Check(route) && PyTuple_GET_SIZE(route) > 1
                                  ? PyLong_AsSsize_t(PyTuple_GET_ITEM(route, 1)) : -1;
            if (base == -1 && PyErr_Occurred()) PyErr_Clear();   /* a route without an offset: not counted */
            observe((double *)c.buf, c.len / 8, bounds, nb, base, seconds_now() - t0, (double)PyBytes_GET_SIZE(out));
        }
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

PyDoc_STRVAR(observe_doc, "observe(counts, buckets, base, seconds, nbytes)\n--\n\n"
             "One answer counted in counts as serve() counts it (for the tests: Metrics.observe_at's equal).");

static PyObject *observe_py(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *counts, *buckets;
    Py_ssize_t base;
    double s, nbytes;
    Py_buffer c;
    if (!PyArg_ParseTuple(args, "OOndd:observe", &counts, &buckets, &base, &s, &nbytes)) return NULL;
    if (counts == Py_None || counts_of(counts, buckets, &c) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "observe: counts is a writable buffer");
        return NULL;
    }
    observe((double *)c.buf, c.len / 8, (const double *)PyBytes_AS_STRING(buckets), PyBytes_GET_SIZE(buckets) / 8,
            base, s, nbytes);
    PyBuffer_Release(&c);
    Py_RETURN_NONE;
}

PyMethodDef hot_serve_methods[] = {
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL, serve_doc},
    {"observe", observe_py, METH_VARARGS, observe_doc},
    {NULL, NULL, 0, NULL},
};
