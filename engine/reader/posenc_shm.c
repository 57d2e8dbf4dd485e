/* posenc_shm.c: the C reader of docs/shm-format.md (format 2). See posenc_shm.h.
 *
 * The three replies it reads (manifest, changes, open) are JSON written by the engine; a small scanner below
 * finds values by key without building a tree: strings are compared as they are written (digests,
 * dtypes, array names and families are plain ASCII, and so must a configured name be to be found).
 */
#define _GNU_SOURCE
#include "posenc_shm.h"
#include "../kernels/alibi_cell.h" /* the engine's ALiBi cell */
#include "../kernels/round_f64.h"  /* the engine's rounding and sincos row: rows past a table are its bits */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SEALS (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define MAX_FDS 250
#define MAX_ARRAYS 16
#define DIGEST_CHARS "0123456789abcdefABCDEF"   /* a digest is hex */

struct posenc_conn {
    int sock;
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char *manifest_path;
    char *reply;               /* the manifest reply (NUL-terminated) */
    const char *manifest;      /* its "manifest" value */
    uint64_t generation;
    int64_t seq;               /* the manifest's sequence number, as of the last refresh */
    struct stat seen;          /* the table log when the manifest was last refreshed */
    int seen_ok;
    struct timespec fetched;
};

struct posenc_table {
    const unsigned char *base;
    size_t nbytes;
    char *entry;               /* its manifest entry (JSON, NUL-terminated) */
    char family[32], dtype[16], digest[64];
    int64_t length;
    uint64_t generation;
    int narrays;               /* its arrays, parsed and checked once, at open */
    struct { char name[32]; posenc_array a; } arrays[MAX_ARRAYS];
};

const char *posenc_strerror(int st) {
    switch (st) {
    case POSENC_OK: return "ok";
    case POSENC_PAST_END: return "a position is past the table's end (compute it or ask the service)";
    case POSENC_ERR_SYS: return "system call failed (see errno)";
    case POSENC_ERR_PROTOCOL: return "unexpected reply from the engine";
    case POSENC_ERR_NOT_FOUND: return "no such table or array stored";
    case POSENC_ERR_NOT_SEALED: return "descriptor is not a sealed segment of the recorded size";
    case POSENC_ERR_ARG: return "bad argument";
    case POSENC_ERR_FORMAT: return "manifest format is not 2";
    case POSENC_ERR_RANGE: return "a computed value overflows the table's dtype";
    default: return "unknown status";
    }
}

/* -- a JSON scanner: pointers into a NUL-terminated text, NULL when malformed -------------------- */

static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    return p;
}

static const char *skip_str(const char *p) {   /* p at '"': just past the closing quote */
    for (p++; *p; p++) {
        if (*p == '\\') { if (!*++p) return NULL; }
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

static const char *skip_val(const char *p) {
    int depth = 0;
    p = ws(p);
    do {
        if (*p == '"') { if (!(p = skip_str(p))) return NULL; }
        else if (*p == '{' || *p == '[') { depth++; p++; }
        else if (*p == '}' || *p == ']') { if (--depth < 0) return NULL; p++; }
        else if (!*p) return NULL;
        else if (depth == 0) {  /* a scalar: to the next delimiter */
            const char *s = p;
            while (*p && !strchr(",}] \n\t\r", *p)) p++;
            return p > s ? p : NULL;
        } else p++;
    } while (depth > 0);
    return p;
}

/* The next member of an object: *pp at '{' or ',' before it (or at '}': returns 0). */
static int obj_next(const char **pp, const char **key, size_t *klen, const char **val) {
    const char *p = ws(*pp);
    if (*p != '{' && *p != ',') return 0;
    p = ws(p + 1);
    if (*p != '"') return 0;
    const char *e = skip_str(p);
    if (!e) return 0;
    *key = p + 1;
    *klen = (size_t)(e - 1 - (p + 1));
    p = ws(e);
    if (*p != ':') return 0;
    *val = ws(p + 1);
    if (!(p = skip_val(*val))) return 0;
    *pp = p;
    return 1;
}

static const char *obj_get(const char *obj, const char *key) {
    const char *k, *v;
    size_t kl, n = strlen(key);
    if (!obj || *(obj = ws(obj)) != '{') return NULL;
    while (obj_next(&obj, &k, &kl, &v))
        if (kl == n && memcmp(k, key, n) == 0) return v;
    return NULL;
}

static int str_eq(const char *v, const char *s) {   /* the JSON string v is exactly s */
    size_t n = strlen(s);
    return v && *v == '"' && strncmp(v + 1, s, n) == 0 && v[1 + n] == '"';
}

static int get_str(const char *v, char *buf, size_t cap) {   /* 0, or -1 (not a string / too long) */
    const char *e;
    if (!v || *v != '"' || !(e = skip_str(v)) || (size_t)(e - v - 2) >= cap) return -1;
    memcpy(buf, v + 1, (size_t)(e - v - 2));
    buf[e - v - 2] = 0;
    return 0;
}

static int get_i64(const char *v, int64_t *out) {
    char *end;
    if (!v || !(*v == '-' || (*v >= '0' && *v <= '9'))) return -1;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end == '.' || *end == 'e' || *end == 'E') return -1;
    *out = x;
    return 0;
}

/* -- the socket ------------------------------------------------------------------------------- */

static int dial(posenc_conn *c) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, c->sock_path, sizeof a.sun_path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return POSENC_ERR_SYS;
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return POSENC_ERR_SYS;
    }
    c->sock = s;
    return POSENC_OK;
}

static void close_fds(const int *fds, int n) {
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* Send one line, read one reply line and the descriptors that came with it. */
static int exchange(int s, const char *ask, char **reply, int *fds, int *nfds) {
    size_t len = strlen(ask), cap = 1 << 16, used = 0;
    *nfds = 0;
    *reply = NULL;
    while (len) {
        ssize_t w = send(s, ask, len, MSG_NOSIGNAL);
        if (w < 0) { if (errno == EINTR) continue; return POSENC_ERR_SYS; }
        ask += w; len -= (size_t)w;
    }
    char *buf = malloc(cap);
    if (!buf) return POSENC_ERR_SYS;
    for (;;) {
        union { char b[CMSG_SPACE(MAX_FDS * sizeof(int))]; struct cmsghdr align; } ctl;
        if (cap - used < 4096) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) goto sys;
            buf = nb;
        }
        struct iovec io = {buf + used, cap - used - 1};
        struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
        ssize_t r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
        if (r < 0) { if (errno == EINTR) continue; goto sys; }
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
            if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
            int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
                if (*nfds < MAX_FDS) fds[(*nfds)++] = fd; else close(fd);
            }
        }
        if (m.msg_flags & MSG_CTRUNC || r == 0) {   /* descriptors lost, or the engine went away */
            errno = r == 0 ? ECONNRESET : EMSGSIZE;
            goto sys;
        }
        used += (size_t)r;
        if (buf[used - 1] == '\n') break;
    }
    buf[used] = 0;
    *reply = buf;
    return POSENC_OK;
sys:
    free(buf);
    close_fds(fds, *nfds);
    *nfds = 0;
    return POSENC_ERR_SYS;
}

/* One ask; once more on a fresh connection if the engine went away (a restart). */
static int ask(posenc_conn *c, const char *line, char **reply, int *fds, int *nfds) {
    int st = c->sock >= 0 ? exchange(c->sock, line, reply, fds, nfds) : POSENC_ERR_SYS;
    if (st == POSENC_OK) return st;
    if (c->sock >= 0) close(c->sock);
    c->sock = -1;
    if ((st = dial(c)) != POSENC_OK) return st;
    return exchange(c->sock, line, reply, fds, nfds);
}

static int ok_reply(const char *reply) {
    const char *v = obj_get(reply, "ok");
    return v && strncmp(v, "true", 4) == 0;
}

/* -- the connection and its manifest -------------------------------------------------------- */

/* The whole manifest, asked again. */
static int fetch_manifest(posenc_conn *c) {
    char *reply;
    int fds[MAX_FDS], nfds, st;
    int64_t fmt, gen, seq;
    if ((st = ask(c, "{\"op\":\"manifest\"}\n", &reply, fds, &nfds)) != POSENC_OK) return st;
    close_fds(fds, nfds);
    const char *m = obj_get(reply, "manifest");
    if (!ok_reply(reply) || !m || get_i64(obj_get(m, "format"), &fmt) || get_i64(obj_get(m, "generation"), &gen)) {
        free(reply);
        return POSENC_ERR_PROTOCOL;
    }
    if (fmt != POSENC_FORMAT) {
        free(reply);
        return POSENC_ERR_FORMAT;
    }
    if (get_i64(obj_get(m, "seq"), &seq)) {
        free(reply);
        return POSENC_ERR_PROTOCOL;
    }
    free(c->reply);
    c->reply = reply;
    c->manifest = m;
    c->generation = (uint64_t)gen;
    c->seq = seq;
    return POSENC_OK;
}

int posenc_refresh(posenc_conn *c) {
    char line[128], *reply;
    int fds[MAX_FDS], nfds, st;
    struct stat s;
    int64_t gen, seq;
    c->seen_ok = stat(c->manifest_path, &s) == 0;   /* before the fetch: a later change is seen */
    if (c->seen_ok) c->seen = s;
    clock_gettime(CLOCK_MONOTONIC, &c->fetched);
    if (!c->manifest) return fetch_manifest(c);
    /* what changed since our sequence number: the tables this connection keeps nothing of (each
     * posenc_open asks the engine), so only a new generation or named tables need the manifest */
    snprintf(line, sizeof line, "{\"op\":\"changes\",\"since\":%lld,\"generation\":%llu}\n",
             (long long)c->seq, (unsigned long long)c->generation);
    if ((st = ask(c, line, &reply, fds, &nfds)) != POSENC_OK) return st;
    close_fds(fds, nfds);
    const char *reset = obj_get(reply, "reset");
    if (!ok_reply(reply) || get_i64(obj_get(reply, "generation"), &gen)) st = POSENC_ERR_PROTOCOL;
    else if ((reset && strncmp(reset, "true", 4) == 0) || (uint64_t)gen != c->generation || obj_get(reply, "named")
             || get_i64(obj_get(reply, "seq"), &seq))
        st = 1;   /* the whole manifest */
    else
        c->seq = seq;
    free(reply);
    return st == 1 ? fetch_manifest(c) : st;
}

int posenc_connect(const char *shm_dir, const char *ns, posenc_conn **out) {
    shm_dir = shm_dir ? shm_dir : "/dev/shm";
    ns = ns ? ns : "posenc";
    *out = NULL;
    posenc_conn *c = calloc(1, sizeof *c);
    size_t n = strlen(shm_dir) + strlen(ns) + 32;
    if (!c || !(c->manifest_path = malloc(n))) {
        free(c);
        return POSENC_ERR_SYS;
    }
    c->sock = -1;
    snprintf(c->manifest_path, n, "%s/%s.manifest.log", shm_dir, ns);   /* the table log: the change detector */
    if ((size_t)snprintf(c->sock_path, sizeof c->sock_path, "%s/%s.sock", shm_dir, ns) >= sizeof c->sock_path) {
        posenc_close(c);
        return POSENC_ERR_ARG;
    }
    int st = posenc_refresh(c);   /* (no manifest yet: the whole one) */
    if (st != POSENC_OK) {
        int e = errno;
        posenc_close(c);
        errno = e;
        return st;
    }
    *out = c;
    return POSENC_OK;
}

void posenc_close(posenc_conn *c) {
    if (!c) return;
    if (c->sock >= 0) close(c->sock);
    free(c->reply);
    free(c->manifest_path);
    free(c);
}

int posenc_changed(posenc_conn *c) {
    struct stat s;
    if (stat(c->manifest_path, &s) == 0)
        return !c->seen_ok || s.st_ino != c->seen.st_ino || s.st_size != c->seen.st_size
               || s.st_mtim.tv_sec != c->seen.st_mtim.tv_sec
               || s.st_mtim.tv_nsec != c->seen.st_mtim.tv_nsec;
    struct timespec now;   /* no file (no room for it): ask the socket about once a second */
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec - c->fetched.tv_sec >= 1;
}

uint64_t posenc_generation(const posenc_conn *c) { return c->generation; }
int64_t posenc_seq(const posenc_conn *c) { return c->seq; }
const char *posenc_manifest(const posenc_conn *c) { return c->manifest; }

/* -- tables ----------------------------------------------------------------------------------- */

static int parse_array(const unsigned char *base, size_t nbytes, const char *e, posenc_array *out);

static int map_table(const char *entry, size_t elen, int fd, uint64_t gen, const char *digest, posenc_table **out) {
    int64_t nbytes, length;
    int seals = fcntl(fd, F_GET_SEALS);
    struct stat s;
    posenc_table *t;
    if (!(t = calloc(1, sizeof *t)) || !(t->entry = malloc(elen + 1))) {
        free(t);
        return POSENC_ERR_SYS;
    }
    memcpy(t->entry, entry, elen);
    t->entry[elen] = 0;
    const char *dt = obj_get(t->entry, "dtype");
    if (get_i64(obj_get(t->entry, "nbytes"), &nbytes) || nbytes < 1 || get_i64(obj_get(t->entry, "length"), &length)
        || get_str(obj_get(t->entry, "family"), t->family, sizeof t->family)
        || (dt && *dt == '"' && get_str(dt, t->dtype, sizeof t->dtype))
        || snprintf(t->digest, sizeof t->digest, "%s", digest) >= (int)sizeof t->digest) {
        posenc_table_close(t);
        return POSENC_ERR_PROTOCOL;
    }
    if (seals < 0 || (seals & SEALS) != SEALS || fstat(fd, &s) < 0 || s.st_size != nbytes) {
        posenc_table_close(t);
        return POSENC_ERR_NOT_SEALED;
    }
    void *p = mmap(NULL, (size_t)nbytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        posenc_table_close(t);
        return POSENC_ERR_SYS;
    }
    t->base = p;
    t->nbytes = (size_t)nbytes;
    t->length = length;
    t->generation = gen;
    const char *arrays = obj_get(t->entry, "arrays"), *k, *v;
    size_t kl;
    while (arrays && obj_next(&arrays, &k, &kl, &v)) {
        if (t->narrays == MAX_ARRAYS || kl >= sizeof t->arrays[0].name
            || parse_array(t->base, t->nbytes, v, &t->arrays[t->narrays].a) != POSENC_OK) {
            posenc_table_close(t);
            return POSENC_ERR_PROTOCOL;
        }
        memcpy(t->arrays[t->narrays].name, k, kl);
        t->arrays[t->narrays++].name[kl] = 0;
    }
    *out = t;
    return POSENC_OK;
}

int posenc_open(posenc_conn *c, const char *digest, posenc_table **out) {
    char line[160], *reply;
    int fds[MAX_FDS], nfds, st;
    int64_t gen;
    *out = NULL;
    if (!digest || !*digest || strlen(digest) > 64 || strspn(digest, DIGEST_CHARS) != strlen(digest))
        return POSENC_ERR_ARG;   /* (nothing that could break the ask's line or its JSON) */
    snprintf(line, sizeof line, "{\"op\":\"open\",\"digests\":[\"%s\"]}\n", digest);
    if ((st = ask(c, line, &reply, fds, &nfds)) != POSENC_OK) return st;
    const char *tables = obj_get(reply, "tables"), *k, *v, *p = tables;
    size_t kl;
    int i = 0;
    st = POSENC_ERR_NOT_FOUND;
    if (!ok_reply(reply) || !tables || get_i64(obj_get(reply, "generation"), &gen)) st = POSENC_ERR_PROTOCOL;
    else
        for (; obj_next(&p, &k, &kl, &v); i++) {   /* descriptors come in the order of "tables" */
            if (i >= nfds) { st = POSENC_ERR_PROTOCOL; break; }
            if (kl == strlen(digest) && memcmp(k, digest, kl) == 0) {
                st = map_table(v, (size_t)(skip_val(v) - v), fds[i], (uint64_t)gen, digest, out);
                break;
            }
        }
    close_fds(fds, nfds);   /* the mapping needs no descriptor */
    free(reply);
    return st;
}

int posenc_open_named(posenc_conn *c, const char *name, const char *dtype, posenc_table **out) {
    const char *p = obj_get(c->manifest, "tables"), *k, *v;
    size_t kl;
    char digest[64];
    *out = NULL;
    if (!p || !name) return p ? POSENC_ERR_ARG : POSENC_ERR_PROTOCOL;
    while (obj_next(&p, &k, &kl, &v)) {
        if (!str_eq(obj_get(v, "name"), name) || (dtype && !str_eq(obj_get(v, "dtype"), dtype))) continue;
        if (kl >= sizeof digest) return POSENC_ERR_PROTOCOL;
        memcpy(digest, k, kl);
        digest[kl] = 0;
        return posenc_open(c, digest, out);
    }
    return POSENC_ERR_NOT_FOUND;
}

void posenc_table_close(posenc_table *t) {
    if (!t) return;
    if (t->base) munmap((void *)t->base, t->nbytes);
    free(t->entry);
    free(t);
}

const char *posenc_table_family(const posenc_table *t) { return t->family; }
const char *posenc_table_dtype(const posenc_table *t) { return t->dtype; }
const char *posenc_table_digest(const posenc_table *t) { return t->digest; }
int64_t posenc_table_length(const posenc_table *t) { return t->length; }
uint64_t posenc_table_generation(const posenc_table *t) { return t->generation; }

int posenc_table_meta(const posenc_table *t, const char *name, double *out) {
    const char *v = obj_get(obj_get(t->entry, "meta"), name);
    char *end;
    if (!v) return POSENC_ERR_NOT_FOUND;
    *out = strtod(v, &end);
    return end == v ? POSENC_ERR_PROTOCOL : POSENC_OK;
}

static size_t itemsize_of(const char *dt) {
    static const struct { const char *name; size_t size; } known[] = {
        {"float32", 4}, {"float16", 2}, {"uint16", 2}, {"float64", 8}, {"int32", 4}, {"int64", 8}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(dt, known[i].name) == 0) return known[i].size;
    return 0;
}

/* The array an entry's "arrays" value describes, once it lies inside the mapping (reading it can
 * then never fault). */
static int parse_array(const unsigned char *base, size_t nbytes, const char *e, posenc_array *out) {
    const char *shape = obj_get(e, "shape");
    int64_t off, count = 1;
    memset(out, 0, sizeof *out);
    if (get_i64(obj_get(e, "offset"), &off) || off < 0 || get_str(obj_get(e, "dtype"), out->dtype, sizeof out->dtype)
        || !(out->itemsize = itemsize_of(out->dtype)) || !shape || *shape != '[')
        return POSENC_ERR_PROTOCOL;
    for (const char *p = ws(shape + 1); *p != ']'; p = ws(p)) {
        int64_t d;
        if (out->ndim == 4 || get_i64(p, &d) || d < 0) return POSENC_ERR_PROTOCOL;
        out->shape[out->ndim++] = d;
        if (d && count > INT64_MAX / d) return POSENC_ERR_PROTOCOL;
        count *= d;
        p = ws(skip_val(p));
        if (*p == ',') p++;
        else if (*p != ']') return POSENC_ERR_PROTOCOL;
    }
    if ((uint64_t)off > nbytes || (uint64_t)count > (nbytes - (uint64_t)off) / out->itemsize)
        return POSENC_ERR_PROTOCOL;
    out->data = base + off;
    return POSENC_OK;
}

int posenc_table_array(const posenc_table *t, const char *name, posenc_array *out) {
    for (int i = 0; i < t->narrays; i++)
        if (strcmp(t->arrays[i].name, name) == 0) {
            *out = t->arrays[i].a;
            return POSENC_OK;
        }
    memset(out, 0, sizeof *out);
    return POSENC_ERR_NOT_FOUND;
}

/* The array, once every position is inside its axis ``axis`` (of an array of rank >= 1, or 2). */
static int positions_in(const posenc_table *t, const char *array, const int64_t *pos, size_t n, int axis,
                        size_t *first_past, posenc_array *a) {
    int st = posenc_table_array(t, array, a);
    if (st != POSENC_OK) return st;
    if (axis == 0 ? a->ndim < 1 : a->ndim != 2) return POSENC_ERR_ARG;
    for (size_t i = 0; i < n; i++) {
        if (pos[i] < 0) return POSENC_ERR_ARG;
        if (pos[i] >= a->shape[axis]) {
            if (first_past) *first_past = i;
            return POSENC_PAST_END;
        }
    }
    return POSENC_OK;
}

static void copy_rows(const unsigned char *src, const int64_t *pos, size_t n, size_t row, unsigned char *dst) {
    for (size_t i = 0; i < n; i++) memcpy(dst + i * row, src + (size_t)pos[i] * row, row);
}

int posenc_gather_rows(const posenc_table *t, const char *array, const int64_t *pos, size_t n,
                       void *out, size_t *first_past) {
    posenc_array a;
    int st = positions_in(t, array, pos, n, 0, first_past, &a);
    if (st != POSENC_OK) return st;
    size_t row = a.itemsize;
    for (int i = 1; i < a.ndim; i++) row *= (size_t)a.shape[i];
    copy_rows(a.data, pos, n, row, out);
    return POSENC_OK;
}

int posenc_gather_cols(const posenc_table *t, const char *array, const int64_t *pos, size_t n,
                       void *out, size_t *first_past) {
    posenc_array a;
    int st = positions_in(t, array, pos, n, 1, first_past, &a);
    if (st != POSENC_OK) return st;
    size_t sz = a.itemsize, width = (size_t)a.shape[1];
    for (int64_t r = 0; r < a.shape[0]; r++)   /* each row of the array: its items at pos */
        copy_rows((const unsigned char *)a.data + (size_t)r * width * sz, pos, n, sz,
                  (unsigned char *)out + (size_t)r * n * sz);
    return POSENC_OK;
}

/* One computed row's float64 values into n items of the table's dtype at out, rounded once as the
 * engine rounds; 1 when one overflows. */
static int round_row(const double *v, size_t n, const char *dtype, unsigned char *out) {
    int over = 0, f32 = strcmp(dtype, "float32") == 0, f16 = strcmp(dtype, "float16") == 0;
    uint16_t inf = f16 ? 0x7C00 : 0x7F80;
    for (size_t k = 0; k < n; k++) {
        if (f32) {
            float f = (float)v[k];
            over |= isinf(f);
            memcpy(out + 4 * k, &f, 4);
            continue;
        }
        uint16_t h = f16 ? f16_from_f64(v[k]) : bf16_from_f64(v[k]);
        over |= (h & 0x7FFF) == inf;
        memcpy(out + 2 * k, &h, 2);
    }
    return over;
}

/* Positions (rows, distances) of n that lie past `length`: 0 when the table computes them (ok),
 * else POSENC_PAST_END at the first (*first_past); POSENC_ERR_ARG for a negative one or one
 * at or past `limit`. */
static int past_check(const int64_t *pos, size_t n, int64_t length, int ok, int64_t limit, size_t *first_past) {
    for (size_t i = 0; i < n; i++) {
        if (pos[i] < 0 || pos[i] >= limit) return POSENC_ERR_ARG;
        if (pos[i] >= length && !ok) {
            if (first_past) *first_past = i;
            return POSENC_PAST_END;
        }
    }
    return POSENC_OK;
}

int posenc_rope_rows(const posenc_table *t, const int64_t *pos, size_t n, void *out_cos, void *out_sin,
                     size_t *first_past) {
    posenc_array c, s, f;
    double scale, past_ok = 0;
    if (strcmp(t->family, "rope") != 0) return POSENC_ERR_ARG;
    if (posenc_table_array(t, "cos", &c) || posenc_table_array(t, "sin", &s) ||
        posenc_table_array(t, "inv_freq64", &f) || posenc_table_meta(t, "attention_scaling", &scale))
        return POSENC_ERR_PROTOCOL;
    if (c.ndim != 2 || s.ndim != 2 || f.ndim != 1 || f.shape[0] != c.shape[1] || s.shape[1] != c.shape[1] ||
        strcmp(f.dtype, "float64") != 0)
        return POSENC_ERR_PROTOCOL;
    posenc_table_meta(t, "rows_past", &past_ok);   /* absent: an older engine's table, none computed */
    size_t h = (size_t)c.shape[1], row = h * c.itemsize;
    int st = past_check(pos, n, c.shape[0], past_ok == 1.0, INT64_MAX, first_past);
    if (st != POSENC_OK) return st;
    double *v = malloc(2 * h * sizeof(double));
    if (!v) return POSENC_ERR_SYS;
    int over = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char *oc = (unsigned char *)out_cos + i * row, *os = (unsigned char *)out_sin + i * row;
        if (pos[i] < c.shape[0]) {
            memcpy(oc, (const unsigned char *)c.data + (size_t)pos[i] * row, row);
            memcpy(os, (const unsigned char *)s.data + (size_t)pos[i] * row, row);
            continue;
        }
        sincos_row((const double *)f.data, (ptrdiff_t)h, (double)pos[i], scale, v, v + h);
        over |= round_row(v, h, t->dtype, oc) | round_row(v + h, h, t->dtype, os);
    }
    free(v);
    return over ? POSENC_ERR_RANGE : POSENC_OK;
}

int posenc_sinusoidal_rows(const posenc_table *t, const int64_t *rows, size_t n, void *out, size_t *first_past) {
    posenc_array a, f;
    if (strcmp(t->family, "sinusoidal") != 0) return POSENC_ERR_ARG;
    if (posenc_table_array(t, "table", &a) || a.ndim != 2) return POSENC_ERR_PROTOCOL;
    int have_f = posenc_table_array(t, "freqs64", &f) == POSENC_OK;   /* absent: an older engine's table */
    size_t w = (size_t)a.shape[1], h = have_f ? (size_t)f.shape[0] : 0, row = w * a.itemsize;
    if (have_f && (f.ndim != 1 || strcmp(f.dtype, "float64") != 0 || h > w || 2 * h < w)) return POSENC_ERR_PROTOCOL;
    int st = past_check(rows, n, a.shape[0], have_f, (int64_t)1 << 53, first_past);
    if (st != POSENC_OK) return st;
    double *v = have_f ? malloc(2 * h * sizeof(double)) : NULL;
    if (have_f && !v) return POSENC_ERR_SYS;
    int over = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char *o = (unsigned char *)out + i * row;
        if (rows[i] < a.shape[0]) {
            memcpy(o, (const unsigned char *)a.data + (size_t)rows[i] * row, row);
            continue;
        }
        /* the stored row [sin | cos]: its h sin columns, then its first w - h cos columns */
        sincos_row((const double *)f.data, (ptrdiff_t)h, (double)rows[i], 1.0, v + h, v);
        over |= round_row(v, w, t->dtype, o);
    }
    free(v);
    return over ? POSENC_ERR_RANGE : POSENC_OK;
}

int posenc_alibi_dist(const posenc_table *t, const int64_t *dist, size_t n, void *out, size_t *first_past) {
    posenc_array a, m;
    if (strcmp(t->family, "alibi") != 0) return POSENC_ERR_ARG;
    if (posenc_table_array(t, "dist", &a) || posenc_table_array(t, "slopes", &m) || a.ndim != 2 || m.ndim != 1 ||
        m.shape[0] != a.shape[0] || strcmp(m.dtype, "float64") != 0)
        return POSENC_ERR_PROTOCOL;
    int st = past_check(dist, n, a.shape[1], 1, INT64_MAX, first_past);
    if (st != POSENC_OK) return st;
    size_t len = (size_t)a.shape[1], sz = a.itemsize;
    int over = 0;
    for (int64_t r = 0; r < a.shape[0]; r++) {   /* each head: its cells at the distances */
        const unsigned char *src = (const unsigned char *)a.data + (size_t)r * len * sz;
        unsigned char *o = (unsigned char *)out + (size_t)r * n * sz;
        double slope = ((const double *)m.data)[r];
        for (size_t k = 0; k < n; k++) {
            if ((size_t)dist[k] < len) {
                memcpy(o + k * sz, src + (size_t)dist[k] * sz, sz);
                continue;
            }
            double cell = alibi_value(slope, (double)dist[k]);   /* 0 - m·d, as the kernels */
            over |= round_row(&cell, 1, t->dtype, o + k * sz);
        }
    }
    return over ? POSENC_ERR_RANGE : POSENC_OK;
}
