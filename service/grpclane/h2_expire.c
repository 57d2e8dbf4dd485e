/* service/grpclane/h2_expire.c -- a call's deadline over its answer still unsent.
 *
 * grpcio's server ends a call at its deadline whatever it still holds of it: an answer its client
 * has not read (the flow-control windows shut) is dropped, and the trailers (DEADLINE_EXCEEDED,
 * "Deadline Exceeded") go instead, HEADERS not being flow-controlled. The lane does the same for
 * the calls Python gave a deadline:
 *
 *   deadline(id, at)         stream id's call ends at ``at`` (the event loop's clock, > 0); False
 *                            when the stream is gone
 *   deadline(id)             that deadline, or None (none given, or the stream gone): the one place
 *                            the lane keeps a call's deadline (read once, by rules.judge)
 *   expire(now, trailers) -> (ended, next)
 *                            every stream whose deadline has passed and whose answer, finished
 *                            (answer() or finish()), still has bytes here is ended: those bytes are
 *                            dropped and ``trailers`` sent in a HEADERS frame with END_STREAM.
 *                            ``next``: the earliest deadline of the answers left unsent, or None
 *                            (lane.py's timer looks again then).
 *
 * An answer nghttp2 has wholly taken is out as far as the lane goes (as grpcio's once in its
 * transport); a call still being answered is its own (the fill's timer, grpcio behind the relay,
 * the lane's own stream), and once finished it is judged here.
 */
#include "h2_session.h"

PyObject *h2_deadline(Session *self, PyObject *args) {
    int id;
    double at = -1;
    if (!PyArg_ParseTuple(args, "i|d", &id, &at)) return NULL;
    Stream *st = self->s != NULL ? nghttp2_session_get_stream_user_data(self->s, id) : NULL;
    if (at < 0) { /* asked */
        if (st == NULL || st->deadline <= 0) Py_RETURN_NONE;
        return PyFloat_FromDouble(st->deadline);
    }
    if (st != NULL) st->deadline = at;
    return PyBool_FromLong(st != NULL);
}

/* stream st's unsent answer dropped, and the trailers submitted to end it */
static int expire_one(Session *self, Stream *st, const nghttp2_nv *nv, size_t n) {
    h2_answer_sub(self, st->out.len - st->out.off);
    free(st->out.p);
    memset(&st->out, 0, sizeof st->out);
    st->expired = 1; /* read_out gives nothing more */
    return nghttp2_submit_headers(self->s, NGHTTP2_FLAG_END_STREAM, st->id, NULL, nv, n, NULL);
}

PyObject *h2_expire(Session *self, PyObject *args) {
    double now, next = 0;
    PyObject *trailers;
    if (!PyArg_ParseTuple(args, "dO", &now, &trailers)) return NULL;
    nghttp2_nv *nv = NULL;
    char *block = NULL;
    size_t n = 0;
    long ended = 0;
    for (Stream *st = self->s != NULL ? self->streams : NULL; st != NULL; st = st->next) {
        if (st->deadline <= 0 || !st->finishing || st->expired || st->out.off >= st->out.len) continue;
        if (st->deadline > now) {
            if (next == 0 || st->deadline < next) next = st->deadline;
            continue;
        }
        if (nv == NULL && (nv = h2_make_nv(trailers, NULL, &n, &block)) == NULL) return NULL;
        int rv = expire_one(self, st, nv, n); /* nghttp2 copies the pairs */
        if (rv != 0) {
            free(nv);
            free(block);
            return PyErr_Format(PyExc_RuntimeError, "submit_headers: %s", nghttp2_strerror(rv));
        }
        ended++;
    }
    free(nv);
    free(block);
    if (next == 0) return Py_BuildValue("(lO)", ended, Py_None);
    return Py_BuildValue("(ld)", ended, next);
}
