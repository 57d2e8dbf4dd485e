/* service/grpclane/_h2.c -- the gRPC lane's HTTP/2 server session: nghttp2 (libnghttp2) in C,
 * one Session per connection, driven by service/grpclane/lane.py's asyncio protocol.
 *
 * nghttp2 owns HTTP/2: the preface, SETTINGS, PING, WINDOW_UPDATE, flow control, HPACK, the
 * messaging rules (RFC 9113 section 8), stream states, RST_STREAM and GOAWAY. This file turns what
 * it parses into a few Python events and turns Python's answers into frames; it knows nothing of
 * gRPC's methods (lane.py decides what each call gets).
 *
 *   Session(unary, max_message, max_streams, window, max_header=16384, max_request=4*max_message)
 *     unary: a frozenset of :path values (bytes) whose request is one message, buffered here until
 *     the stream ends and given as one "call" event; every other path is given as it comes (an
 *     "open", then "data" events, then "end"), so a bidirectional stream or an unknown method
 *     goes on while the client sends. max_message: the most bytes of a unary call's body kept (a
 *     longer body is given cut there, its bytes past it dropped). max_streams: the
 *     SETTINGS_MAX_CONCURRENT_STREAMS sent; window: the initial stream and connection windows.
 *     max_header: a request's header list, counted as HPACK counts it (name + value + 32 each),
 *     past which the stream is refused as grpcio refuses metadata over its hard limit
 *     (grpc.absolute_max_metadata_size, 16 KiB): RESOURCE_EXHAUSTED, "received metadata size
 *     exceeds hard limit (N vs. 16384);  name:sizeB ...", in a Trailers-Only answer, Python never
 *     told; nothing past the bound is kept (SETTINGS_MAX_HEADER_LIST_SIZE says it, as grpcio does).
 *     max_request: the unary bodies kept here for calls not yet complete and the other streams'
 *     DATA given to Python and not yet handed(), all streams together, past which the connection's
 *     window is no longer opened (WINDOW_UPDATE is sent as they are handed on): a client makes the
 *     lane hold at most max_request + window bytes of requests.
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
 *   handed(id, n)            n bytes of the stream's "data" events handed on (or dropped) by Python
 *   deadline(id, at), expire(now, trailers)   a call's deadline over its answer still unsent: the
 *                            answer dropped and the trailers sent instead, as grpcio (h2_expire.c)
 *   shutdown()               graceful GOAWAY: the notice now (no new streams); goaway() after
 *   goaway()                 the final GOAWAY with the last stream processed
 *   close()                  the connection is gone: the session and every stream are freed now
 *                            (then recv() raises Error, send() gives b"", the answers False)
 *   done                     True when nghttp2 wants neither to read nor to write: close
 *   open_streams             the streams open now
 *   buffered                 response bytes written here that nghttp2 has not yet taken (they
 *                            wait for the client's flow-control windows), all streams together
 *   held                     (streams, request bytes, answer bytes) kept now: the streams open,
 *                            their header lists and unary bodies not yet handed on, and buffered
 *   live() (module)          (sessions, streams, request bytes, answer bytes, nghttp2 blocks) alive
 *                            in this process, every Session together: all 0 once every Session
 *                            is gone (nghttp2's own allocations are counted through its allocator)
 * Every stream is on its Session's list from its first HEADERS: whatever ends it (END_STREAM and the
 * answer, RST_STREAM, GOAWAY, a connection error, the Session's deletion) frees what it holds.
 * Each of start/write/finish/answer/only/reset returns False when the stream is gone (closed by
 * the client meanwhile): there is nothing to answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

#include "h2_session.h"

static PyObject *H2Error;
static PyObject *EMPTY; /* () */

/* what every Session of the process holds (live()): all 0 once every Session is freed */
static long g_sessions, g_streams; /* and h2_blocks (h2_nv.c) */
static size_t g_request, g_answer;

static void request_add(Session *self, size_t n) {
    self->request += n;
    g_request += n;
}

static void request_sub(Session *self, size_t n) {
    self->request -= n;
    g_request -= n;
}

static void answer_add(Session *self, size_t n) {
    self->buffered += n;
    g_answer += n;
}

void h2_answer_sub(Session *self, size_t n) {
    self->buffered -= n;
    g_answer -= n;
}

/* the connection's window opened again for kept body bytes handed on or dropped: what was owed,
 * as far as max_request allows */
static void give_back(Session *self) {
    size_t room = self->kept < self->max_request ? self->max_request - self->kept : 0;
    size_t n = self->owed < room ? self->owed : room;
    if (n > 0 && self->s != NULL && nghttp2_session_consume_connection(self->s, n) == 0) self->owed -= n;
}

/* a unary body's kept bytes, handed on (the "call" event) or dropped */
static void body_release(Session *self, Stream *st) {
    request_sub(self, st->body.len);
    self->kept -= st->body.len;
    free(st->body.p);
    memset(&st->body, 0, sizeof st->body);
    give_back(self);
}

/* the header list handed on (an event holds it now) or dropped */
static void headers_release(Session *self, Stream *st) {
    request_sub(self, st->hkept);
    st->hkept = 0;
    Py_CLEAR(st->headers);
}

/* off the Session's list and freed, with everything it holds */
static void stream_free(Session *self, Stream *st) {
    if (st->prev != NULL) st->prev->next = st->next;
    else self->streams = st->next;
    if (st->next != NULL) st->next->prev = st->prev;
    self->open--;
    g_streams--;
    h2_answer_sub(self, st->out.len - st->out.off);
    self->kept -= st->lent; /* body_release gives the window back */
    headers_release(self, st);
    body_release(self, st);
    Py_XDECREF(st->path);
    free(st->out.p);
    free(st->trailers);
    free(st->trailer_bytes);
    free(st->refusal);
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
    st->next = self->streams;
    if (st->next != NULL) st->next->prev = st;
    self->streams = st;
    self->open++;
    g_streams++;
    return 0;
}

/* the header list went past max_header at this entry: grpcio's message (its hard limit's, naming
 * each entry's size up to this one) is kept for the list's end, and the list is dropped */
static int refuse_headers(Session *self, Stream *st, const uint8_t *name, size_t namelen, size_t size) {
    Buf b = {0};
    char head[96];
    int n = snprintf(head, sizeof head, "received metadata size exceeds hard limit (%zu vs. %zu);  ", st->hsize,
                     self->max_header);
    int bad = n < 0 || buf_add(&b, head, (size_t)n) < 0;
    Py_ssize_t count = PyList_GET_SIZE(st->headers);
    for (Py_ssize_t i = 0; i <= count && !bad; i++) {
        const uint8_t *k = name;
        size_t kl = namelen, sz = size;
        if (i < count) {
            PyObject *pair = PyList_GET_ITEM(st->headers, i);
            PyObject *pk = PyTuple_GET_ITEM(pair, 0), *pv = PyTuple_GET_ITEM(pair, 1);
            k = (const uint8_t *)PyBytes_AS_STRING(pk);
            kl = (size_t)PyBytes_GET_SIZE(pk);
            sz = kl + (size_t)PyBytes_GET_SIZE(pv) + 32;
        }
        char num[32];
        int m = snprintf(num, sizeof num, ":%zuB%s", sz, i < count ? " " : "");
        bad = h2_name_add(&b, k, kl) < 0 || m < 0 || buf_add(&b, num, (size_t)m) < 0 || buf_add(&b, "", 1) < 0;
        if (!bad) b.len--; /* the NUL kept past the end */
    }
    if (bad) {
        free(b.p);
        PyErr_NoMemory();
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    st->refusal = b.p;
    headers_release(self, st);
    Py_CLEAR(st->path);
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud) {
    (void)flags;
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    if (st->refusal != NULL) return 0; /* past the bound: counted no further, nothing kept */
    size_t size = namelen + valuelen + 32;
    st->hsize += size;
    if (st->hsize > self->max_header) return refuse_headers(self, st, name, namelen, size);
    PyObject *pair = Py_BuildValue("(y#y#)", name, (Py_ssize_t)namelen, value, (Py_ssize_t)valuelen);
    if (pair == NULL || PyList_Append(st->headers, pair) < 0) {
        Py_XDECREF(pair);
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    st->hkept += size;
    request_add(self, size);
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
    /* the stream's window reopens at once; the connection's as the bytes are handed on */
    nghttp2_session_consume_stream(s, id, len);
    if (st == NULL || st->ended || st->refusal != NULL) {
        nghttp2_session_consume_connection(s, len);
        return 0;
    }
    if (!st->unary) { /* the connection's window reopens as Python hands them on (handed) */
        st->lent += len;
        self->kept += len;
        self->owed += len;
        give_back(self);
        return event(self, Py_BuildValue("(siy#)", "data", id, data, (Py_ssize_t)len));
    }
    size_t room = self->max_message > st->body.len ? self->max_message - st->body.len : 0;
    st->total += len;
    size_t keep = len > room ? room : len;
    if (keep && buf_add(&st->body, data, keep) < 0) {
        PyErr_NoMemory();
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    request_add(self, keep);
    self->kept += keep;
    self->owed += len;
    give_back(self);
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    Session *self = ud;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    Stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || st->ended) return 0;
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (st->refusal != NULL) { /* its header list went past the bound: grpcio's answer, now */
        if (f->hd.type != NGHTTP2_HEADERS) return 0;
        char *msg = st->refusal;
        const char *const refused[] = {":status", "200", "content-type", "application/grpc", "grpc-status", "8", NULL};
        nghttp2_nv nv[4];
        for (int i = 0; i < 3; i++) {
            nv[i] = (nghttp2_nv){(uint8_t *)refused[2 * i], (uint8_t *)refused[2 * i + 1], strlen(refused[2 * i]),
                                 strlen(refused[2 * i + 1]), NGHTTP2_NV_FLAG_NONE};
        }
        nv[3] = (nghttp2_nv){(uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE};
        st->ended = 1;
        int rv = nghttp2_submit_response(s, st->id, nv, 4, NULL); /* copies the names and values */
        st->refusal = NULL;
        free(msg);
        if (rv != 0) nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
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
            headers_release(self, st); /* Python holds them now */
            if (rc != 0) return rc;
        }
    }
    if (!end) return 0;
    st->told = 1;
    if (!st->unary) return event(self, Py_BuildValue("(si)", "end", st->id));
    int rc = event(self, Py_BuildValue("(siOOy#n)", "call", st->id, st->path, st->headers ? st->headers : EMPTY,
                                       st->body.p ? st->body.p : "", (Py_ssize_t)st->body.len, (Py_ssize_t)st->total));
    headers_release(self, st); /* handed on: Python holds the call now */
    body_release(self, st);
    return rc;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL) return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    int rc = 0;
    if (st->told && !st->ended) rc = event(self, Py_BuildValue("(siI)", "closed", id, code));
    stream_free(self, st);
    return rc;
}

static ssize_t read_out(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                        nghttp2_data_source *src, void *ud) {
    (void)src;
    Session *self = ud;
    Stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (st->expired) return NGHTTP2_ERR_DEFERRED; /* its trailers went at its deadline (h2_expire.c) */
    size_t n = st->out.len - st->out.off;
    if (n > length) n = length;
    memcpy(buf, st->out.p + st->out.off, n);
    st->out.off += n;
    h2_answer_sub(self, n);
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

static Stream *live(Session *self, int id) {
    if (self->s == NULL) return NULL; /* closed: nothing to answer */
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
    nghttp2_nv *nv = h2_make_nv(headers, NULL, &n, &block);
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
    if (ok) answer_add(self, (size_t)data.len);
    PyBuffer_Release(&data);
    if (ok) resume(self, st);
    return PyBool_FromLong(ok);
}

static int set_trailers(Stream *st, PyObject *trailers, const char *const *extra) {
    st->trailers = h2_make_nv(trailers, extra, &st->ntrailers, &st->trailer_bytes);
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
    answer_add(self, 5);
    if (buf_add(&st->out, msg.buf, len) < 0) {
        PyBuffer_Release(&msg);
        return PyErr_NoMemory();
    }
    answer_add(self, len);
    PyBuffer_Release(&msg);
    if (set_trailers(st, EMPTY, OK_TRAILER) < 0) return NULL;
    size_t n;
    char *block;
    nghttp2_nv *nv = h2_make_nv(head, OK_HEAD, &n, &block);
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

static PyObject *Session_handed(Session *self, PyObject *args) {
    int id;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in", &id, &n)) return NULL;
    Stream *st = self->s != NULL ? nghttp2_session_get_stream_user_data(self->s, id) : NULL;
    if (st == NULL || n <= 0) Py_RETURN_NONE; /* freed: its bytes were given back then */
    size_t k = (size_t)n < st->lent ? (size_t)n : st->lent;
    st->lent -= k;
    self->kept -= k;
    give_back(self);
    Py_RETURN_NONE;
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
    if (self->s == NULL) return PyErr_Format(H2Error, "the session is closed");
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
    if (self->s == NULL) return PyBytes_FromStringAndSize("", 0);
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
    if (self->s != NULL) nghttp2_submit_shutdown_notice(self->s);
    Py_RETURN_NONE;
}

static PyObject *Session_goaway(Session *self, PyObject *unused) {
    (void)unused;
    if (self->s == NULL) Py_RETURN_NONE;
    int32_t last = nghttp2_session_get_last_proc_stream_id(self->s);
    nghttp2_submit_goaway(self->s, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0);
    Py_RETURN_NONE;
}

static PyObject *Session_get_done(Session *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->s == NULL || (!nghttp2_session_want_read(self->s) && !nghttp2_session_want_write(self->s)));
}

static PyObject *Session_get_open(Session *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->open);
}

static PyObject *Session_get_buffered(Session *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->buffered);
}

static PyObject *Session_get_held(Session *self, void *c) {
    (void)c;
    return Py_BuildValue("(lnn)", self->open, (Py_ssize_t)self->request, (Py_ssize_t)self->buffered);
}

static PyObject *h2_live(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return Py_BuildValue("(llnnl)", g_sessions, g_streams, (Py_ssize_t)g_request, (Py_ssize_t)g_answer, h2_blocks);
}

static int Session_init(Session *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"unary", "max_message", "max_streams", "window", "max_header", "max_request", NULL};
    PyObject *unary;
    Py_ssize_t max_message, max_request = -1;
    unsigned int max_streams, window, max_header = 16384;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!nII|In", names, &PyFrozenSet_Type, &unary, &max_message,
                                     &max_streams, &window, &max_header, &max_request))
        return -1;
    if (self->s != NULL || max_message < 0 || window < 65535 || window > 0x7fffffff || max_request < -1) {
        PyErr_SetString(PyExc_ValueError, self->s ? "a Session is initialised once"
                                                  : "max_message >= 0, 65535 <= window < 2**31, max_request >= 0");
        return -1;
    }
    self->max_header = max_header;
    self->max_request = max_request >= 0 ? (size_t)max_request : 4 * (size_t)max_message;
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
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        PyErr_NoMemory();
        return -1;
    }
    /* the connection's window reopens as kept bodies are handed on (nghttp2_session_consume_*) */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    int rv = nghttp2_session_server_new3(&self->s, cb, self, opt, &H2_MEM);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0) {
        self->s = NULL;
        PyErr_Format(H2Error, "session: %s", nghttp2_strerror(rv));
        return -1;
    }
    g_sessions++;
    Py_INCREF(unary);
    self->unary = unary;
    if ((self->events = PyList_New(0)) == NULL) return -1;
    self->max_message = (size_t)max_message;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, max_header},
    };
    rv = nghttp2_submit_settings(self->s, NGHTTP2_FLAG_NONE, iv, 3);
    if (rv == 0) rv = nghttp2_session_set_local_window_size(self->s, NGHTTP2_FLAG_NONE, 0, (int32_t)window);
    if (rv != 0) {
        PyErr_Format(H2Error, "settings: %s", nghttp2_strerror(rv));
        return -1;
    }
    return 0;
}

/* the session deleted and every stream freed with what it holds (nghttp2_session_del calls no
 * on_stream_close: the Session's list frees them) */
static void session_close(Session *self) {
    if (self->s != NULL) {
        nghttp2_session_del(self->s);
        self->s = NULL;
        g_sessions--;
    }
    while (self->streams != NULL) stream_free(self, self->streams);
    self->owed = 0;
}

static PyObject *Session_close(Session *self, PyObject *unused) {
    (void)unused;
    session_close(self);
    Py_RETURN_NONE;
}

static void Session_dealloc(Session *self) {
    Py_CLEAR(self->events);
    session_close(self);
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
    {"handed", (PyCFunction)Session_handed, METH_VARARGS, "a stream's data bytes handed on"},
    {"shutdown", (PyCFunction)Session_shutdown, METH_NOARGS, "the graceful GOAWAY notice"},
    {"goaway", (PyCFunction)Session_goaway, METH_NOARGS, "the final GOAWAY"},
    {"deadline", (PyCFunction)h2_deadline, METH_VARARGS, "a call's deadline, for expire()"},
    {"expire", (PyCFunction)h2_expire, METH_VARARGS, "answers unsent past their deadline ended by the trailers"},
    {"close", (PyCFunction)Session_close, METH_NOARGS, "free every stream and the session: the connection is gone"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Session_getset[] = {
    {"done", (getter)Session_get_done, NULL, "nghttp2 wants neither to read nor to write", NULL},
    {"open_streams", (getter)Session_get_open, NULL, "the streams open now", NULL},
    {"buffered", (getter)Session_get_buffered, NULL, "response bytes waiting for the client's windows", NULL},
    {"held", (getter)Session_get_held, NULL, "(streams, request bytes, answer bytes) kept now", NULL},
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

static PyMethodDef h2_functions[] = {
    {"live", (PyCFunction)h2_live, METH_NOARGS, "(sessions, streams, request bytes, answer bytes, nghttp2 blocks) alive"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef h2module = {PyModuleDef_HEAD_INIT, "_h2", "the gRPC lane's HTTP/2 sessions (nghttp2)", -1,
                                      h2_functions, NULL, NULL, NULL, NULL};

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
