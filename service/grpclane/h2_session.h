/* service/grpclane/h2_session.h -- the gRPC lane's Session and its streams (_h2.c), shared with
 * h2_expire.c (answers left unsent at their call's deadline) */
#ifndef POSENC_H2_SESSION_H
#define POSENC_H2_SESSION_H

#include "h2_nv.h"

typedef struct Stream {
    struct Stream *prev, *next; /* the Session's list of its streams */
    int32_t id;
    int unary;        /* body buffered until the stream ends */
    int told;         /* Python was given an event of it */
    int ended;        /* Python ended it: finish(), only() or reset() */
    size_t total;     /* a unary body's bytes received (past max_message they are dropped) */
    size_t lent;      /* "data" events' bytes not yet handed() (the connection's window counts them) */
    int deferred;     /* the data source waits for write() or finish() */
    int finishing;    /* finish() called: trailers once the data is out */
    PyObject *path;   /* bytes */
    PyObject *headers; /* list of (name, value); NULL once handed on or refused */
    size_t hsize;     /* the header list's size as HPACK counts it (name + value + 32 each) */
    size_t hkept;     /* of it, the bytes kept here (the list not yet handed to Python) */
    char *refusal;    /* the header list went past max_header: grpcio's message, sent at its end */
    Buf body;         /* a unary call's request bytes */
    Buf out;          /* response DATA not yet handed to nghttp2 */
    nghttp2_nv *trailers;
    size_t ntrailers;
    char *trailer_bytes;
    double deadline;  /* the call's deadline (the loop's clock; 0: none), set by Python (h2_expire.c) */
    int expired;      /* its unsent answer was dropped at the deadline: the trailers went instead */
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
    size_t max_header; /* a request's header list, as HPACK counts it */
    size_t max_request; /* the unary bodies kept here, all streams: past it the window stays shut */
    size_t request;    /* request bytes kept now: header lists and unary bodies not handed on */
    size_t kept;       /* unary bodies and streams' lent bytes (the connection's window counts these) */
    size_t owed;       /* DATA bytes received for kept bodies, not yet given back to the window */
    Stream *streams;   /* every stream begun and not freed */
} Session;

/* n response bytes of a stream taken out of the Session's count (sent, or dropped) */
void h2_answer_sub(Session *self, size_t n);

/* Session.deadline(id, at) and Session.expire(now, trailers) (h2_expire.c) */
PyObject *h2_deadline(Session *self, PyObject *args);
PyObject *h2_expire(Session *self, PyObject *args);

#endif
