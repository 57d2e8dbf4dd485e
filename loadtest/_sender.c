/* loadtest/_sender.c -- the open-loop probe's sender: one thread, one epoll loop, many keep-alive
 * HTTP/1.1 connections, no pipelining, request bytes given by Python.
 *
 * Request k is scheduled at t0 + k / rate whatever happened before it; its latency is its
 * completion minus that scheduled time (coordinated omission corrected, as wrk2 does): a request
 * that finds every connection busy waits in a FIFO and is charged the wait. When the next send is
 * closer than SPIN_NS the loop spins (epoll timeout 0); further off it sleeps in epoll_pwait2 until
 * shortly before it (timer slack 1 ns for the run), so at low rates a server sharing the core is
 * not crowded out, and at tens of thousands per second the sender's core is busy for the run.
 * Where it may (root, CAP_SYS_NICE), the sending thread runs at nice -10 for the run, so that other
 * processes on its core delay its sends less (the report counts their CPU time as noise).
 * Per request it records (int64 nanoseconds): the latency from the scheduled time, the loop's
 * lateness at that time (its own share), and its receive-and-parse time after epoll returned; and
 * the HTTP status (0: unanswered; 1: reset or malformed). Python (loadtest/drivers/sender.py) turns them
 * into histograms and rates. Answers are parsed as far as the status line, Content-Length and
 * whether the server closes after them; bodies are only counted.
 *
 *     run(host, port, requests, rate, total, hard_stop_s, connections)
 *         -> (scheduled, queued, resets, latency, lag, rx, status)   (bytes: int64 x total, uint16)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 60000LL           /* spin when the next send is closer than this ... */
#define EARLY_NS 30000LL          /* ... else sleep until this long before it */
#define HEAD_MAX 16384            /* the most bytes of a response head kept */
#define RBUF (1 << 20)            /* one receive buffer for every connection */
#define MAX_EVENTS 256
#define NICE (-10)                /* the sending thread's nice value for the run, where allowed */

typedef struct {
    int fd;
    int64_t k;                    /* the request in flight, -1 when idle */
    const char *out;              /* request bytes still to write */
    size_t out_left;
    int64_t remaining;            /* -1: reading the head; else body bytes still due */
    int status, close_after;
    int idle;                     /* on the stack of idle connections */
    size_t head_len;
    char head[HEAD_MAX];
} Conn;

typedef struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int ep;
    const char **req;
    Py_ssize_t *req_len;
    Py_ssize_t nreq;
    int64_t total, t0;
    double iv;                    /* ns between scheduled sends */
    int64_t *lat, *lag, *rx;
    uint16_t *status;
    int64_t *pending;             /* FIFO of scheduled requests waiting for a connection */
    int64_t p_head, p_tail;
    Conn **free_conns;            /* stack of idle connections */
    int nfree;
    int64_t queued, resets, done;
} Run;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t sched(const Run *r, int64_t k) { return r->t0 + (int64_t)((double)k * r->iv); }

static void push_idle(Run *r, Conn *c) {
    if (!c->idle) {
        c->idle = 1;
        r->free_conns[r->nfree++] = c;
    }
}

static Conn *pop_idle(Run *r) {
    Conn *c = r->free_conns[--r->nfree];
    c->idle = 0;
    return c;
}

static int open_fd(Run *r) {
    int fd = socket(r->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&r->addr, r->addrlen) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fd;
}

static int conn_open(Run *r, Conn *c) {
    c->fd = open_fd(r);
    c->k = -1;
    c->out_left = 0;
    c->remaining = -1;
    c->head_len = 0;
    c->close_after = 0;
    if (c->fd < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    return epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Write what is left of the request in flight; EPOLLOUT while the socket is full. */
static int conn_flush(Run *r, Conn *c) {
    while (c->out_left) {
        ssize_t n = send(c->fd, c->out, c->out_left, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev);
                return 0;
            }
            return -1;
        }
        c->out += n;
        c->out_left -= (size_t)n;
        if (!c->out_left) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
            epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev);
        }
    }
    return 0;
}

static void conn_drop(Run *r, Conn *c);

static void conn_send(Run *r, Conn *c, int64_t k) {
    Py_ssize_t i = (Py_ssize_t)(k % r->nreq);
    c->k = k;
    c->out = r->req[i];
    c->out_left = (size_t)r->req_len[i];
    c->remaining = -1;
    c->head_len = 0;
    if (conn_flush(r, c) < 0)
        conn_drop(r, c);
}

/* The connection is idle again: the oldest waiting request, else the free stack. */
static void conn_next(Run *r, Conn *c) {
    c->k = -1;
    if (r->p_head < r->p_tail)
        conn_send(r, c, r->pending[r->p_head++]);
    else
        push_idle(r, c);
}

/* A reset, a malformed answer or a server close: the request in flight failed (status 1) and a
 * new connection takes the place of this one, idle (if none can be opened, one fewer remains); the
 * loop hands it the oldest waiting request (never from here: a server that resets every request
 * would otherwise recurse once per waiting request). */
static void conn_drop(Run *r, Conn *c) {
    int64_t k = c->k;
    if (k >= 0) {
        r->status[k] = 1;
        r->lat[k] = now_ns() - sched(r, k);
        r->done++;
    }
    r->resets++;
    epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (conn_open(r, c) == 0)
        push_idle(r, c);
    else if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static int64_t head_int(const char *head, size_t n, const char *name, int *found) {
    size_t ln = strlen(name);
    *found = 0;
    for (size_t i = 0; i + 2 + ln <= n; i++) {
        if (head[i] == '\n' && strncasecmp(head + i + 1, name, ln) == 0) {
            const char *p = head + i + 1 + ln;
            while (*p == ' ' || *p == '\t')
                p++;
            *found = 1;
            return strtoll(p, NULL, 10);
        }
    }
    return 0;
}

static int head_has(const char *head, size_t n, const char *text) {
    size_t ln = strlen(text);
    for (size_t i = 0; i + ln <= n; i++)
        if (strncasecmp(head + i, text, ln) == 0)
            return 1;
    return 0;
}

/* Take n received bytes: 1 when the answer is complete, 0 when more is due, -1 if malformed. */
static int conn_feed(Conn *c, const char *buf, size_t n) {
    if (c->remaining < 0) {
        size_t take = n < HEAD_MAX - 1 - c->head_len ? n : HEAD_MAX - 1 - c->head_len;
        memcpy(c->head + c->head_len, buf, take);
        size_t from = c->head_len > 3 ? c->head_len - 3 : 0;
        c->head_len += take;
        c->head[c->head_len] = 0;
        char *end = NULL;
        for (size_t i = from; i + 4 <= c->head_len; i++)
            if (memcmp(c->head + i, "\r\n\r\n", 4) == 0) {
                end = c->head + i;
                break;
            }
        if (!end)
            return c->head_len >= HEAD_MAX - 1 ? -1 : 0;
        size_t hl = (size_t)(end - c->head) + 4;
        if (hl < 12 || memcmp(c->head, "HTTP/1.", 7) != 0)
            return -1;
        c->status = atoi(c->head + 9);
        int found;
        int64_t len = head_int(c->head, hl - 2, "content-length:", &found);
        if (!found || len < 0)
            return -1;
        /* the server closes after this answer: it says so, or answers HTTP/1.0 without keep-alive */
        c->close_after = head_has(c->head, hl, "\nconnection: close") ||
                         (c->head[7] == '0' && !head_has(c->head, hl, "\nconnection: keep-alive"));
        /* the bytes of this read after the head are body */
        int64_t body_here = (int64_t)(c->head_len - hl) + (int64_t)(n - take);
        c->remaining = len - body_here;
    } else {
        c->remaining -= (int64_t)n;
    }
    return c->remaining > 0 ? 0 : (c->remaining == 0 ? 1 : -1);
}

static void on_readable(Run *r, Conn *c, char *rbuf, int64_t t_poll) {
    for (;;) {
        ssize_t n = recv(c->fd, rbuf, RBUF, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0 || c->k < 0) {   /* closed, reset, or bytes nobody asked for */
            conn_drop(r, c);
            return;
        }
        int got = conn_feed(c, rbuf, (size_t)n);
        if (got < 0) {
            conn_drop(r, c);
            return;
        }
        if (got == 0)
            continue;
        int64_t t = now_ns(), k = c->k;
        r->lat[k] = t - sched(r, k);
        r->rx[k] = t - t_poll;
        r->status[k] = (uint16_t)(c->status > 1 ? c->status : 1);
        r->done++;
        c->k = -1;
        if (c->close_after) {
            r->resets--;            /* an announced close is not a failure */
            conn_drop(r, c);
        } else {
            conn_next(r, c);
        }
        return;
    }
}

static int loop(Run *r, int64_t hard_stop, int64_t *scheduled) {
    struct epoll_event evs[MAX_EVENTS];
    char *rbuf = malloc(RBUF);
    if (!rbuf)
        return -1;
    int64_t k = 0;
    while (r->done < r->total) {
        while (r->nfree && r->p_head < r->p_tail)   /* reopened connections take waiting requests */
            conn_send(r, pop_idle(r), r->pending[r->p_head++]);
        int64_t now = now_ns();
        while (k < r->total) {
            int64_t tk = sched(r, k);
            if (tk > now)
                break;
            r->lag[k] = now - tk;
            if (r->nfree)
                conn_send(r, pop_idle(r), k);
            else {
                r->pending[r->p_tail++] = k;
                r->queued++;
            }
            k++;
        }
        if (now > hard_stop)
            break;
        int ne;
        int64_t wait = k < r->total ? sched(r, k) - now : 10000000;
        if (wait <= SPIN_NS) {
            ne = epoll_wait(r->ep, evs, MAX_EVENTS, 0);
        } else {
            int64_t nap = wait - EARLY_NS;
            struct timespec ts = {.tv_sec = nap / 1000000000LL, .tv_nsec = nap % 1000000000LL};
            ne = epoll_pwait2(r->ep, evs, MAX_EVENTS, &ts, NULL);
            if (ne < 0 && errno == ENOSYS)   /* kernels before 5.11: whole milliseconds, else spin */
                ne = epoll_wait(r->ep, evs, MAX_EVENTS, (int)((wait - 1000000) / 1000000) > 0 ? (int)((wait - 1000000) / 1000000) : 0);
        }
        if (ne < 0 && errno != EINTR) {
            free(rbuf);
            return -1;
        }
        int64_t t_poll = now_ns();
        for (int i = 0; i < ne; i++) {
            Conn *c = evs[i].data.ptr;
            if (c->fd < 0)
                continue;
            if ((evs[i].events & EPOLLOUT) && c->out_left && conn_flush(r, c) < 0) {
                conn_drop(r, c);
                continue;
            }
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(r, c, rbuf, t_poll);
        }
    }
    free(rbuf);
    *scheduled = k;
    return 0;
}

static PyObject *bytes_of(const void *p, Py_ssize_t n) { return PyBytes_FromStringAndSize((const char *)p, n); }

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    const char *host;
    int port, nconn;
    PyObject *reqs_in;
    double rate, hard_stop_s;
    long long total;
    if (!PyArg_ParseTuple(args, "siOdLdi", &host, &port, &reqs_in, &rate, &total, &hard_stop_s, &nconn))
        return NULL;
    if (rate <= 0 || total <= 0 || nconn <= 0 || nconn > 100000) {
        PyErr_SetString(PyExc_ValueError, "rate, total and connections must be positive");
        return NULL;
    }
    PyObject *reqs = PySequence_Tuple(reqs_in);
    if (!reqs)
        return NULL;
    Run r;
    memset(&r, 0, sizeof r);
    r.nreq = PyTuple_GET_SIZE(reqs);
    PyObject *result = NULL;
    Conn *conns = NULL;
    char portbuf[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    snprintf(portbuf, sizeof portbuf, "%d", port);
    if (r.nreq == 0) {
        PyErr_SetString(PyExc_ValueError, "no requests");
        goto out;
    }
    r.req = calloc((size_t)r.nreq, sizeof *r.req);
    r.req_len = calloc((size_t)r.nreq, sizeof *r.req_len);
    if (!r.req || !r.req_len)
        goto nomem;
    for (Py_ssize_t i = 0; i < r.nreq; i++) {
        PyObject *b = PyTuple_GET_ITEM(reqs, i);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) == 0) {
            PyErr_SetString(PyExc_TypeError, "requests must be non-empty bytes");
            goto out;
        }
        r.req[i] = PyBytes_AS_STRING(b);
        r.req_len[i] = PyBytes_GET_SIZE(b);
    }
    int gai = getaddrinfo(host, portbuf, &hints, &ai);
    if (gai != 0 || !ai) {
        PyErr_Format(PyExc_OSError, "cannot resolve %s: %s", host, gai_strerror(gai));
        goto out;
    }
    memcpy(&r.addr, ai->ai_addr, ai->ai_addrlen);
    r.addrlen = ai->ai_addrlen;
    r.total = total;
    r.iv = 1e9 / rate;
    r.lat = calloc((size_t)total, 8);
    r.lag = calloc((size_t)total, 8);
    r.rx = calloc((size_t)total, 8);
    r.status = calloc((size_t)total, 2);
    r.pending = calloc((size_t)total, 8);
    r.free_conns = calloc((size_t)nconn, sizeof(Conn *));
    conns = calloc((size_t)nconn, sizeof(Conn));
    if (!r.lat || !r.lag || !r.rx || !r.status || !r.pending || !r.free_conns || !conns)
        goto nomem;
    r.ep = epoll_create1(0);
    if (r.ep < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    for (int i = 0; i < nconn; i++)
        conns[i].fd = -1;
    for (int i = 0; i < nconn; i++) {
        if (conn_open(&r, &conns[i]) < 0) {
            PyErr_Format(PyExc_ConnectionError, "cannot connect to %s:%d: %s", host, port, strerror(errno));
            goto out;
        }
        push_idle(&r, &conns[i]);
    }
    int64_t scheduled = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);   /* wake when asked, not up to 50 µs later */
    id_t tid = (id_t)syscall(SYS_gettid);     /* this thread's nice value only (Linux) */
    errno = 0;
    int nice0 = getpriority(PRIO_PROCESS, tid);
    int reniced = errno == 0 && nice0 > NICE && setpriority(PRIO_PROCESS, tid, NICE) == 0;
    r.t0 = now_ns() + 5000000;        /* the first send 5 ms from now */
    rc = loop(&r, r.t0 + (int64_t)(hard_stop_s * 1e9), &scheduled);
    if (slack > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    if (reniced)
        setpriority(PRIO_PROCESS, tid, nice0);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    result = Py_BuildValue("(LLLNNNN)", (long long)scheduled, (long long)r.queued, (long long)r.resets,
                           bytes_of(r.lat, total * 8), bytes_of(r.lag, total * 8), bytes_of(r.rx, total * 8),
                           bytes_of(r.status, total * 2));
    goto out;
nomem:
    PyErr_NoMemory();
out:
    if (conns)
        for (int i = 0; i < nconn; i++)
            if (conns[i].fd >= 0)
                close(conns[i].fd);
    if (r.ep > 0)
        close(r.ep);
    if (ai)
        freeaddrinfo(ai);
    free(conns);
    free(r.free_conns);
    free(r.pending);
    free(r.status);
    free(r.rx);
    free(r.lag);
    free(r.lat);
    free(r.req_len);
    free(r.req);
    Py_DECREF(reqs);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(host, port, requests, rate, total, hard_stop_s, connections) -> (scheduled, queued, resets, "
     "latency, lag, rx, status): offer `total` requests (cycling through `requests`, bytes of whole "
     "HTTP/1.1 requests) at `rate` per second on `connections` keep-alive connections; latency, lag "
     "and rx are int64 ns per request (latency from each request's scheduled send), status uint16 "
     "(0: unanswered by hard_stop_s, 1: reset or malformed)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sender",
                                    "The open-loop probe's C sender (loadtest/drivers/sender.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sender(void) { return PyModule_Create(&module); }
