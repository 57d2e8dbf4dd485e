/* service/grpclane/_h2.c -- the gRPC lane's HTTP/2 server session: nghttp2 (libnghttp2) in C,
 * one Session per connection, driven by service/grpclane/lane.py's asyncio protocol.
 *
 * nghttp2 owns HTTP/2: the preface, SETTINGS, PING, WINDOW_UPDATE, flow control, HPACK, the
 * messaging rules (RFC 9113 section 8), stream states, RST_STREAM and GOAWAY. This file turns what
 * it parses into a few Python events and turns Python's answers into frames; it knows nothing of
 * gRPC's methods (lane.py decides what each call gets).
 *
 *   Session(unary, max_message, max_streams, window)
 *     unary: a frozenset of :path values (bytes) whose request is one message, buffered here until
 *     the stream ends and given as one "call" event; every other path is given as it comes (an
 *     "open", then "data" events, then "end"), so a bidirectional stream or an unknown method
 *     goes on while the client sends. max_message: the most bytes of a unary call's body kept (a
 *     longer body is given cut there, its bytes past it dropped). max_streams: the
 *     SETTINGS_MAX_CONCURRENT_STREAMS sent; window: the initial stream and connection windows.
 *   recv(data) -> [event, ...]   the events of the bytes read; raises Error on a fatal protocol
 *     error (send() then holds nghttp2's GOAWAY; the connection is to be closed after it)
 *       ("call", stream_id, path, headers, body: bytes, total: int)   total: the body's bytes sent
 *       ("open", stream_id, path, headers)   ("data", stream_id, bytes)   ("end", stream_id)
 *       ("closed", stream_id, error_code)    a stream Python was told of closed before answer()
 *                                            or finish() ended it (a reset by the client)
 *     headers: a list of (name, value) bytes pairs in their order, pseudo-headers included.
 *   send() -> bytes          every frame due to be written now (b"" when none)
 *   start(id, headers)       the response's HEADERS (names and values as bytes), its DATA to follow
 *   write(id, data)          response DATA, sent as flow control allows (a copy is kept here)
 *   finish(id, trailers)     the trailers, after every byte written; ends the stream
 *   answer(id, head, message)   start + write(5-byte gRPC prefix + message) + finish with
 *                            grpc-status 0: a whole unary answer in one call
 *   only(id, headers)        a Trailers-Only response: HEADERS with END_STREAM
 *   reset(id, code)          RST_STREAM
 *   shutdown()               graceful GOAWAY: the notice now (no new streams); goaway() after
 *   goaway()                 the final GOAWAY with the last stream processed
 *   done                     True when nghttp2 wants neither to read nor to write: close
 *   open_streams             the streams open now
 *   buffered                 response bytes written here that nghttp2 has not yet taken (they
 *                            wait for the client's flow-control windows), all streams together
 * Each of start/write/finish/answer/only/reset returns False when the stream is gone (closed by
 * the client meanwhile): there is nothing to answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

static PyObject *H2Error;
static PyObject *EMPTY; /* () */

typedef struct {
    char *p;
    size_t len, off, cap;
} Buf;

static int buf_add(Buf *b, const void *src, size_t n) {
    if (b->off > 0 && b->off == b->len) { /* drained: start over */
        b->off = b->len = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

typedef struct {
    int32_t id;
    int unary;        /* body buffered until the stream ends */
    int told;         /* Python was given an event of it */
    int ended;        /* Python ended it: finish(), only() or reset() */
    size_t total;     /* a unary body's bytes received (past max_message they are dropped) */
    int deferred;     /* the data source waits for write() or finish() */
    int finishing;    /* finish() called: trailers once the data is out */
    PyObject *path;   /* bytes */
    PyObject *headers; /* list of (name, value) */
    Buf body;         /* a unary call's request bytes */
    Buf out;          /* response DATA not yet handed to nghttp2 */
    nghttp2_nv *trailers;
    size_t ntrailers;
    char *trailer_bytes;
} Stream;

typedef struct {
    PyObject_HEAD
    nghttp2_session *s;
    PyObject *unary;   /* frozenset of bytes */
    PyObject *events;  /* the list recv() fills */
    size_t max_message;
    int failed;        /* a Python error inside a callback: recv() raises it */
    long open;         /* streams begun and not closed */
    size_t buffered;   /* response bytes written here and not yet handed to nghttp2, all streams */
} Session;

static void stream_free(Stream *st) {
    Py_XDECREF(st->path);
    Py_XDECREF(st->headers);
    free(st->body.p);
    free(st->out.p);
    free(st->trailers);
    free(st->trailer_bytes);
    free(st);
}

static int event(Session *self, PyObject *ev) {
    if (self->events == NULL) { /* the session is being freed: nobody to tell */
        Py_XDECREF(ev);
        return 0;
    }
    if (ev == NULL || PyList_Append(self->events, ev) < 0) {
        Py_XDECREF(ev);
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    Py_DECREF(ev);
    return 0;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    Session *self = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Stream *st = calloc(1, sizeof *st);
    if (st == NULL || (st->headers = PyList_New(0)) == NULL) {
        free(st);
        self->failed = 1;
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    st->id = f->hd.stream_id;
    nghttp2_session_set_stream_user_data(s, st->id, st);
    self->open++;
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud) {
    (void)flags;
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    PyObject *pair = Py_BuildValue("(y#y#)", name, (Py_ssize_t)namelen, value, (Py_ssize_t)valuelen);
    if (pair == NULL || PyList_Append(st->headers, pair) < 0) {
        Py_XDECREF(pair);
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (namelen == 5 && memcmp(name, ":path", 5) == 0 && st->path == NULL) {
        st->path = PyTuple_GET_ITEM(pair, 1);
        Py_INCREF(st->path);
    }
    Py_DECREF(pair);
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
    (void)flags;
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL || st->ended) return 0;
    if (!st->unary) return event(self, Py_BuildValue("(siy#)", "data", id, data, (Py_ssize_t)len));
    size_t room = self->max_message > st->body.len ? self->max_message - st->body.len : 0;
    st->total += len;
    if (len > room) len = room;
    if (len && buf_add(&st->body, data, len) < 0) {
        PyErr_NoMemory();
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    Session *self = ud;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    Stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || st->ended) return 0;
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        if (st->path == NULL) { /* nghttp2's messaging rules require :path; kept for safety */
            st->path = PyBytes_FromStringAndSize("", 0);
            if (st->path == NULL) {
                self->failed = 1;
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
        }
        int r = PySet_Contains(self->unary, st->path);
        if (r < 0) {
            self->failed = 1;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        st->unary = r;
        if (!st->unary) {
            st->told = 1;
            int rc = event(self, Py_BuildValue("(siOO)", "open", st->id, st->path, st->headers));
            if (rc != 0) return rc;
        }
    }
    if (!end) return 0;
    st->told = 1;
    if (!st->unary) return event(self, Py_BuildValue("(si)", "end", st->id));
    return event(self, Py_BuildValue("(siOOy#n)", "call", st->id, st->path, st->headers, st->body.p ? st->body.p : "",
                                     (Py_ssize_t)st->body.len, (Py_ssize_t)st->total));
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL) return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    self->open--;
    int rc = 0;
    if (st->told && !st->ended) rc = event(self, Py_BuildValue("(siI)", "closed", id, code));
    self->buffered -= st->out.len - st->out.off;
    stream_free(st);
    return rc;
}

static ssize_t read_out(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                        nghttp2_data_source *src, void *ud) {
    (void)src;
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = st->out.len - st->out.off;
    if (n > length) n = length;
    memcpy(buf, st->out.p + st->out.off, n);
    st->out.off += n;
    self->buffered -= n;
    if (st->out.off < st->out.len) return (ssize_t)n;
    if (!st->finishing) {
        if (n > 0) return (ssize_t)n;
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (st->ntrailers) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(s, id, st->trailers, st->ntrailers) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* name/value pairs (a sequence of 2-tuples of bytes) as nghttp2_nv, their bytes copied into one
 * block (*block, freed by the caller); extra: pairs of C strings before them, NULL-ended */
static nghttp2_nv *make_nv(PyObject *pairs, const char *const *extra, size_t *count, char **block) {
    PyObject *seq = PySequence_Fast(pairs, "headers: a sequence of (name, value) bytes pairs");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t nextra = 0, bytes = 0;
    while (extra && extra[2 * nextra]) {
        nextra++;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(p, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(p, 1))) {
            PyErr_SetString(PyExc_TypeError, "headers: a sequence of (name, value) bytes pairs");
            Py_DECREF(seq);
            return NULL;
        }
        bytes += (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(p, 0)) + (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(p, 1));
    }
    size_t total = (size_t)n + nextra;
    nghttp2_nv *nv = calloc(total ? total : 1, sizeof *nv);
    char *b = malloc(bytes ? bytes : 1);
    if (nv == NULL || b == NULL) {
        free(nv);
        free(b);
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    char *w = b;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *k = PyTuple_GET_ITEM(p, 0), *v = PyTuple_GET_ITEM(p, 1);
        size_t kl = (size_t)PyBytes_GET_SIZE(k), vl = (size_t)PyBytes_GET_SIZE(v);
        nghttp2_nv *e = &nv[nextra + (size_t)i];
        memcpy(w, PyBytes_AS_STRING(k), kl);
        e->name = (uint8_t *)w;
        e->namelen = kl;
        w += kl;
        memcpy(w, PyBytes_AS_STRING(v), vl);
        e->value = (uint8_t *)w;
        e->valuelen = vl;
        w += vl;
        e->flags = NGHTTP2_NV_FLAG_NONE;
    }
    for (size_t j = 0; j < nextra; j++) { /* static strings, first (:status leads): no copy */
        nghttp2_nv *e = &nv[j];
        e->name = (uint8_t *)extra[2 * j];
        e->namelen = strlen(extra[2 * j]);
        e->value = (uint8_t *)extra[2 * j + 1];
        e->valuelen = strlen(extra[2 * j + 1]);
        e->flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    }
    Py_DECREF(seq);
    *count = total;
    *block = b;
    return nv;
}

static Stream *live(Session *self, int id) {
    Stream *st = nghttp2_session_get_stream_user_data(self->s, id);
    return st != NULL && !st->ended ? st : NULL;
}

/* the response's HEADERS: with its DATA to follow from st->out (read_out), or alone, ending the
 * stream (a Trailers-Only answer) */
static int respond(Session *self, Stream *st, nghttp2_nv *nv, size_t n, int with_data) {
    nghttp2_data_provider dp = {.source = {.ptr = NULL}, .read_callback = read_out};
    int rv = nghttp2_submit_response(self->s, st->id, nv, n, with_data ? &dp : NULL);
    if (rv != 0) {
        PyErr_Format(H2Error, "submit_response: %s", nghttp2_strerror(rv));
        return -1;
    }
    return 0;
}

static int resume(Session *self, Stream *st) {
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(self->s, st->id);
    }
    return 0;
}

/* start() and only(): headers given by Python */
static PyObject *given_response(Session *self, PyObject *args, int with_data) {
    int id;
    PyObject *headers;
    if (!PyArg_ParseTuple(args, "iO", &id, &headers)) return NULL;
    Stream *st = live(self, id);
    if (st == NULL) Py_RETURN_FALSE;
    size_t n;
    char *block;
    nghttp2_nv *nv = make_nv(headers, NULL, &n, &block);
    if (nv == NULL) return NULL;
    int rc = respond(self, st, nv, n, with_data);
    free(nv);
    free(block);
    if (rc < 0) return NULL;
    if (!with_data) st->ended = 1;
    Py_RETURN_TRUE;
}

static PyObject *Session_start(Session *self, PyObject *args) { return given_response(self, args, 1); }

static PyObject *Session_only(Session *self, PyObject *args) { return given_response(self, args, 0); }

static PyObject *Session_write(Session *self, PyObject *args) {
    int id;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*", &id, &data)) return NULL;
    Stream *st = live(self, id);
    int ok = st != NULL && !st->finishing;
    if (ok && buf_add(&st->out, data.buf, (size_t)data.len) < 0) {
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    if (ok) self->buffered += (size_t)data.len;
    PyBuffer_Release(&data);
    if (ok) resume(self, st);
    return PyBool_FromLong(ok);
}

static int set_trailers(Stream *st, PyObject *trailers, const char *const *extra) {
    st->trailers = make_nv(trailers, extra, &st->ntrailers, &st->trailer_bytes);
    return st->trailers == NULL ? -1 : 0;
}

static PyObject *Session_finish(Session *self, PyObject *args) {
    int id;
    PyObject *trailers;
    if (!PyArg_ParseTuple(args, "iO", &id, &trailers)) return NULL;
    Stream *st = live(self, id);
    if (st == NULL || st->finishing) Py_RETURN_FALSE;
    if (set_trailers(st, trailers, NULL) < 0) return NULL;
    st->finishing = st->ended = 1;
    resume(self, st);
    Py_RETURN_TRUE;
}

static const char *const OK_HEAD[] = {":status", "200", "content-type", "application/grpc", NULL};
static const char *const OK_TRAILER[] = {"grpc-status", "0", "grpc-message", "", NULL}; /* as grpcio sends it */

static PyObject *Session_answer(Session *self, PyObject *args) {
    int id;
    PyObject *head;
    Py_buffer msg;
    if (!PyArg_ParseTuple(args, "iOy*", &id, &head, &msg)) return NULL;
    Stream *st = live(self, id);
    if (st == NULL || msg.len > UINT32_MAX) {
        PyBuffer_Release(&msg);
        if (st != NULL) return PyErr_Format(PyExc_ValueError, "a gRPC message is at most 4 GiB");
        Py_RETURN_FALSE;
    }
    uint32_t len = (uint32_t)msg.len;
    uint8_t prefix[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    if (buf_add(&st->out, prefix, 5) < 0) {
        PyBuffer_Release(&msg);
        return PyErr_NoMemory();
    }
    self->buffered += 5;
    if (buf_add(&st->out, msg.buf, len) < 0) {
        PyBuffer_Release(&msg);
        return PyErr_NoMemory();
    }
    self->buffered += len;
    PyBuffer_Release(&msg);
    if (set_trailers(st, EMPTY, OK_TRAILER) < 0) return NULL;
    size_t n;
    char *block;
    nghttp2_nv *nv = make_nv(head, OK_HEAD, &n, &block);
    if (nv == NULL) return NULL;
    st->finishing = st->ended = 1;
    int rc = respond(self, st, nv, n, 1);
    free(nv);
    free(block);
    if (rc < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *Session_reset(Session *self, PyObject *args) {
    int id;
    unsigned int code;
    if (!PyArg_ParseTuple(args, "iI", &id, &code)) return NULL;
    Stream *st = live(self, id);
    if (st == NULL) Py_RETURN_FALSE;
    st->ended = 1;
    nghttp2_submit_rst_stream(self->s, NGHTTP2_FLAG_NONE, id, code);
    Py_RETURN_TRUE;
}

/* the events so far (a stream closed while frames were sent is told on the next recv) */
static PyObject *take_events(Session *self) {
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) return NULL;
    PyObject *events = self->events;
    self->events = fresh;
    return events;
}

static PyObject *Session_recv(Session *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    self->failed = 0;
    ssize_t rv = nghttp2_session_mem_recv(self->s, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    if (self->failed) {
        if (!PyErr_Occurred()) PyErr_SetString(H2Error, "a callback failed");
        return NULL;
    }
    if (rv < 0) return PyErr_Format(H2Error, "%s", nghttp2_strerror((int)rv));
    return take_events(self);
}

static PyObject *Session_send(Session *self, PyObject *unused) {
    (void)unused;
    Buf b = {0};
    self->failed = 0;
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(self->s, &p);
        if (n < 0) {
            free(b.p);
            return PyErr_Format(H2Error, "%s", nghttp2_strerror((int)n));
        }
        if (n == 0) break;
        if (buf_add(&b, p, (size_t)n) < 0) {
            free(b.p);
            return PyErr_NoMemory();
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.len);
    free(b.p);
    if (self->failed) {
        Py_XDECREF(out);
        if (!PyErr_Occurred()) PyErr_SetString(H2Error, "a callback failed");
        return NULL;
    }
    return out;
}

static PyObject *Session_shutdown(Session *self, PyObject *unused) {
    (void)unused;
    nghttp2_submit_shutdown_notice(self->s);
    Py_RETURN_NONE;
}

static PyObject *Session_goaway(Session *self, PyObject *unused) {
    (void)unused;
    int32_t last = nghttp2_session_get_last_proc_stream_id(self->s);
    nghttp2_submit_goaway(self->s, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0);
    Py_RETURN_NONE;
}

static PyObject *Session_get_done(Session *self, void *c) {
    (void)c;
    return PyBool_FromLong(!nghttp2_session_want_read(self->s) && !nghttp2_session_want_write(self->s));
}

static PyObject *Session_get_open(Session *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->open);
}

static PyObject *Session_get_buffered(Session *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->buffered);
}

static int Session_init(Session *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"unary", "max_message", "max_streams", "window", NULL};
    PyObject *unary;
    Py_ssize_t max_message;
    unsigned int max_streams, window;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!nII", names, &PyFrozenSet_Type, &unary, &max_message,
                                     &max_streams, &window))
        return -1;
    if (self->s != NULL || max_message < 0 || window < 65535 || window > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, self->s ? "a Session is initialised once" : "max_message >= 0, 65535 <= window < 2**31");
        return -1;
    }
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    int rv = nghttp2_session_server_new(&self->s, cb, self);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0) {
        self->s = NULL;
        PyErr_Format(H2Error, "session: %s", nghttp2_strerror(rv));
        return -1;
    }
    Py_INCREF(unary);
    self->unary = unary;
    if ((self->events = PyList_New(0)) == NULL) return -1;
    self->max_message = (size_t)max_message;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
    };
    rv = nghttp2_submit_settings(self->s, NGHTTP2_FLAG_NONE, iv, 2);
    if (rv == 0) rv = nghttp2_session_set_local_window_size(self->s, NGHTTP2_FLAG_NONE, 0, (int32_t)window);
    if (rv != 0) {
        PyErr_Format(H2Error, "settings: %s", nghttp2_strerror(rv));
        return -1;
    }
    return 0;
}

static void Session_dealloc(Session *self) {
    Py_CLEAR(self->events);
    if (self->s != NULL) nghttp2_session_del(self->s); /* closes every stream: on_stream_close frees them */
    Py_XDECREF(self->unary);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Session_methods[] = {
    {"recv", (PyCFunction)Session_recv, METH_O, "the events of bytes read"},
    {"send", (PyCFunction)Session_send, METH_NOARGS, "every frame due now"},
    {"start", (PyCFunction)Session_start, METH_VARARGS, "a response's HEADERS"},
    {"write", (PyCFunction)Session_write, METH_VARARGS, "response DATA"},
    {"finish", (PyCFunction)Session_finish, METH_VARARGS, "the trailers; ends the stream"},
    {"answer", (PyCFunction)Session_answer, METH_VARARGS, "a whole unary gRPC answer"},
    {"only", (PyCFunction)Session_only, METH_VARARGS, "a Trailers-Only response"},
    {"reset", (PyCFunction)Session_reset, METH_VARARGS, "RST_STREAM"},
    {"shutdown", (PyCFunction)Session_shutdown, METH_NOARGS, "the graceful GOAWAY notice"},
    {"goaway", (PyCFunction)Session_goaway, METH_NOARGS, "the final GOAWAY"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Session_getset[] = {
    {"done", (getter)Session_get_done, NULL, "nghttp2 wants neither to read nor to write", NULL},
    {"open_streams", (getter)Session_get_open, NULL, "the streams open now", NULL},
    {"buffered", (getter)Session_get_buffered, NULL, "response bytes waiting for the client's windows", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SessionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service.grpclane._h2.Session",
    .tp_basicsize = sizeof(Session),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one HTTP/2 server connection (nghttp2)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Session_init,
    .tp_dealloc = (destructor)Session_dealloc,
    .tp_methods = Session_methods,
    .tp_getset = Session_getset,
};

static struct PyModuleDef h2module = {PyModuleDef_HEAD_INIT, "_h2", "the gRPC lane's HTTP/2 sessions (nghttp2)", -1,
                                      NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__h2(void) {
    if (PyType_Ready(&SessionType) < 0 || (EMPTY = PyTuple_New(0)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&h2module);
    if (m == NULL) return NULL;
    H2Error = PyErr_NewException("posenc.service.grpclane._h2.Error", NULL, NULL);
    if (H2Error == NULL || PyModule_AddObjectRef(m, "Error", H2Error) < 0 ||
        PyModule_AddObjectRef(m, "Session", (PyObject *)&SessionType) < 0 ||
        PyModule_AddStringConstant(m, "NGHTTP2_VERSION", NGHTTP2_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
