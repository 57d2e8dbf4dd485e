/* service/shortcut/hot_alibi_json.c -- JSON answers of an AlibiTemplate: the full path's bytes,
 * with no float formatted per request.
 *
 * The JSON answer of a block is the learnt parts (templates.py cuts them from the full path's own
 * JSON of the learnt request) around the block's text, [[[c, c, ...], ...], ...] over [head][query]
 * [key] (or, flat: [c, c, ...], the same cells in the same order: a v2 JSON output's row-major
 * data, hot_v2json.c). Each cell's text is the one the full path writes for its value (engine/encode.py
 * json_text), and a cell's value is a function of its head and its signed distance d = q - k
 * alone (engine/kernels/alibi_cell.h: 0 - m_h * d, |d| when symmetric; with mask_future, a cell
 * with d < 0 holds the mask value whatever its distance). So the texts are kept per distance:
 *
 *   side 0: d >= 0 (and every d when symmetric, by |d|); side 1: d < 0 of a causal block without
 *   mask_future (by |d|); the masked cells: one text, the mask value's.
 *
 * A side's distances come in chunks of `chunk` (a power of two that templates.py owns); a chunk
 * holds every head's cells at those distances, distance after distance, each in a fixed slot of
 * SLOT bytes (its length, then its characters), rendered all at once by the full path's own functions (the engine's
 * ALiBi block kernel, then json_text) the first time an answer needs it: the answer returns
 * NotImplemented and notes (template, None, [(side, chunk), ...]) for missing(); templates.py
 * calls text_for(side, chunk) and set_text(side, chunk, text) before it asks again. Chunks reach
 * any distance below the configured position limit, inside the engine's stored table or past it
 * (the kernel computes every cell; the table is not read). A block whose cells would need many
 * chunks rendered at once is declined instead (MISS_CHUNKS). A cell that overflows the dtype (json
 * text "null": a float16 block far enough out) or whose text does not fit a slot is kept empty,
 * and an answer that needs it is declined (the full path answers: its 422 for an overflow).
 *
 * What a template keeps is bounded by its own budget (over it, its chunks are dropped) and counts
 * against every template's keep_bytes (hot_keep; over it, every template's texts are dropped).
 */
#include "hot.h"

#include <stdlib.h>

#define SLOT 16      /* bytes of a kept cell text: its length (0: none), then up to SLOT - 1 chars */
#define PAGE_BITS 10 /* chunks per page of a side's directory: 1 << PAGE_BITS */
/* An answer that misses more chunks than MISS_CHUNKS + one per MISS_CELLS cells of its block is
 * declined rather than rendered (a block whose distances spread over many chunks: the full path's) */
#define MISS_CHUNKS 16
#define MISS_CELLS 64

typedef struct AlibiJson {
    PyObject *parts;      /* (before, after) the block's text in the full path's JSON answer */
    PyObject *text_for;   /* (side, chunk) -> "[[c,...],...]": every head's cells, never called here */
    char mask[SLOT];      /* the masked cells' text (mask_future) */
    int chunk_bits;
    int flat;             /* the block as one flat list [c, c, ...] (a v2 JSON output's data), not nested */
    Py_ssize_t chunks, npages; /* chunks of a side below the position limit; pages of them */
    char ***pages[2];     /* [side][page] -> NULL or char *[1 << PAGE_BITS]: NULL or a chunk's slots */
    Py_ssize_t bytes, budget;
    struct AlibiJson *prev, *next; /* the AlibiTemplates keeping texts */
    int keeping;
} AlibiJson;

static AlibiJson *keeping_list;

static Py_ssize_t chunk_bytes(const AlibiTemplate *t, const AlibiJson *j)
{
    return t->nheads * ((Py_ssize_t)1 << j->chunk_bits) * SLOT;
}

/* Frees every text j keeps, and unlinks it. */
static void drop_texts(AlibiJson *j)
{
    for (int s = 0; s < 2; s++) {
        char ***dir = j->pages[s];
        if (!dir) continue;
        for (Py_ssize_t p = 0; p < j->npages; p++) {
            char **page = dir[p];
            if (!page) continue;
            for (Py_ssize_t c = 0; c < ((Py_ssize_t)1 << PAGE_BITS); c++) free(page[c]);
            free(page);
        }
        free(dir);
        j->pages[s] = NULL;
    }
    hot_unkeep(NULL, j->bytes);
    j->bytes = 0;
    if (!j->keeping) return;
    if (j->prev) j->prev->next = j->next;
    else keeping_list = j->next;
    if (j->next) j->next->prev = j->prev;
    j->keeping = 0;
}

void hot_alibi_json_drop_all(void)
{
    while (keeping_list) drop_texts(keeping_list);
}

void hot_alibi_json_free(AlibiTemplate *t)
{
    AlibiJson *j = t->json;
    if (!j) return;
    drop_texts(j);
    Py_XDECREF(j->parts);
    Py_XDECREF(j->text_for);
    PyMem_Free(j);
    t->json = NULL;
}

/* The slots of chunk c of side s, or NULL when not kept (or past the directory). */
static inline const char *chunk_of(const AlibiJson *j, int s, int64_t c)
{
    char ***dir = j->pages[s];
    if (!dir || (c >> PAGE_BITS) >= j->npages) return NULL;
    char **page = dir[c >> PAGE_BITS];
    return page ? page[c & (((int64_t)1 << PAGE_BITS) - 1)] : NULL;
}

/* Notes each missing (side, chunk) of `keys` (a set of side << 40 | chunk) for missing(). */
static PyObject *note_missing(AlibiTemplate *t, PyObject *keys)
{
    PyObject *list = PyList_New(0), *it = list ? PyObject_GetIter(keys) : NULL, *x;
    while (it && (x = PyIter_Next(it))) {
        long long v = PyLong_AsLongLong(x);
        Py_DECREF(x);
        PyObject *item = Py_BuildValue("(iL)", (int)(v >> 40), v & ((1LL << 40) - 1));
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(it);
            break;
        }
        Py_DECREF(item);
    }
    int rc = it && !PyErr_Occurred() ? hot_note_missing_rows((PyObject *)t, list) : -1;
    Py_XDECREF(it);
    Py_XDECREF(list);
    if (rc < 0) return NULL;
    Py_RETURN_NOTIMPLEMENTED;
}

/* Writes the text of slot p (a cell's: its length, then its characters) at w; returns its end. */
static inline char *put_cell(char *w, const char *p, const char *end)
{
    size_t n = (unsigned char)p[0];
    if (w + SLOT <= end) memcpy(w, p + 1, SLOT - 1);   /* a whole slot's chars where they fit */
    else memcpy(w, p + 1, n);
    return w + n;
}

/* declared, and described, in hot.h */
PyObject *hot_alibi_json(AlibiTemplate *t, const Span *sq, const Span *sk, const Http *http, int flat)
{
    AlibiJson *j = t->json;
    if (!j || !j->parts || j->flat != flat) Py_RETURN_NONE;   /* JSON not checked at learn time: the full path's */
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL, *keys = NULL;
    const char **cell = NULL;
    /* the full path's limits are those of the binary answer (its bytes, per item of the dtype) */
    if (hot_block_start((PyObject *)t, NULL, sq, sk, t->max_n, t->nheads, (t->max_bytes - 4 * t->nheads) / t->itemsize,
                        &q, &k, &head, &out) <= 0)
        goto done;
    Py_ssize_t nq = q.n, nk = k.n, H = t->nheads, cb = j->chunk_bits;
    if (!(cell = PyMem_Malloc((size_t)(nq * nk + 1) * sizeof *cell))) {
        PyErr_NoMemory();
        goto done;
    }
    /* each cell's slot for head 0 (head h's is the h-th after it), or the mask's */
    for (Py_ssize_t a = 0, i = 0; a < nq; a++) {
        int64_t qa = hot_sel_at(&q, a);
        for (Py_ssize_t b = 0; b < nk; b++, i++) {
            int64_t d = qa - hot_sel_at(&k, b);
            if (d < 0 && t->mask_future) {
                cell[i] = j->mask;
                continue;
            }
            int s = d < 0 && !t->symmetric;
            int64_t ad = d < 0 ? -d : d, c = ad >> cb;
            const char *slots = chunk_of(j, s, c);
            if (slots) {
                cell[i] = slots + (ad & (((int64_t)1 << cb) - 1)) * H * SLOT;
                continue;
            }
            if (c >= j->chunks) {   /* past the directory (configured again since, with a larger limit): declined */
                out = Py_NewRef(Py_None);
                goto done;
            }
            PyObject *key = PyLong_FromLongLong((long long)s << 40 | c);
            if (!key || (!keys && !(keys = PySet_New(NULL))) || PySet_Add(keys, key) < 0) {
                Py_XDECREF(key);
                goto done;
            }
            Py_DECREF(key);
        }
    }
    if (keys) {   /* rendering a chunk costs the full path's formatting of its cells: a few per block only */
        out = PySet_GET_SIZE(keys) > MISS_CHUNKS + nq * nk / MISS_CELLS ? Py_NewRef(Py_None) : note_missing(t, keys);
        goto done;
    }
    /* '[' and ']' around the heads, the queries and the keys, the commas between them, the texts;
     * flat: '[', each cell's ',' or the closing ']' (an empty block: "[]") */
    Py_ssize_t body = flat ? 1 + (H * nq * nk > 0 ? H * nq * nk : 1)
                           : 2 + 2 * H + (H - 1) + H * (2 * nq + (nq > 0 ? nq - 1 : 0)) + H * nq * (nk > 0 ? nk - 1 : 0);
    for (Py_ssize_t h = 0; h < H; h++)
        for (Py_ssize_t i = 0; i < nq * nk; i++) {
            const char *p = cell[i] == j->mask ? j->mask : cell[i] + h * SLOT;
            if (!p[0]) {   /* an overflow (the full path's 422), or a text too long to keep */
                out = Py_NewRef(Py_None);
                goto done;
            }
            body += (unsigned char)p[0];
        }
    Out o;
    if (hot_bytes_of(http, PyTuple_GET_ITEM(j->parts, 0), body, PyTuple_GET_ITEM(j->parts, 1), 0, &o) < 0) goto done;
    char *w = o.fill, *end = o.fill + body;
    *w++ = '[';
    if (flat && H * nq * nk == 0) *w++ = ']';
    for (Py_ssize_t h = 0; h < H && flat; h++)
        for (Py_ssize_t i = 0; i < nq * nk; i++) {
            w = put_cell(w, cell[i] == j->mask ? j->mask : cell[i] + h * SLOT, end);
            *w++ = h + 1 < H || i + 1 < nq * nk ? ',' : ']';
        }
    for (Py_ssize_t h = 0; h < H && !flat; h++) {
        *w++ = '[';
        for (Py_ssize_t a = 0; a < nq; a++) {
            *w++ = '[';
            for (Py_ssize_t b = 0; b < nk; b++) {
                const char *p = cell[a * nk + b];
                w = put_cell(w, p == j->mask ? p : p + h * SLOT, end);
                *w++ = ',';
            }
            w[nk > 0 ? -1 : 0] = ']';
            w += nk > 0 ? 0 : 1;
            *w++ = ',';
        }
        w[nq > 0 ? -1 : 0] = ']';
        w += nq > 0 ? 0 : 1;
        *w++ = ',';
    }
    if (!flat) w[-1] = ']';
    out = hot_finish(&o);
done:
    Py_XDECREF(keys);
    PyMem_Free(cell);
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

/* ---- AlibiTemplate's JSON methods --------------------------------------------------------- */

PyDoc_STRVAR(enable_json_doc, "enable_json(parts, mask, text_for, chunk, budget, flat=False)\n--\n\n"
             "Answer JSON too: parts, (before, after) the block's text in the full path's JSON answer; mask,\n"
             "a masked cell's text; text_for(side, chunk) -> the JSON text [[c, ...], ...] of every head's\n"
             "cells at the chunk's distances (side 0: d = chunk * chunk_size + i >= 0, side 1: d = -(...)),\n"
             "called by templates.py on a miss; chunk: distances a chunk holds (a power of two); budget:\n"
             "bytes of texts kept; flat: the block as one flat list (a v2 JSON output's data). parts None: no\n"
             "JSON answers.");

static PyObject *enable_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    if (nargs == 1 && args[0] == Py_None) {   /* no JSON answers (again) */
        hot_alibi_json_free(t);
        Py_RETURN_NONE;
    }
    long long chunk;
    Py_ssize_t budget;
    int flat = nargs == 6 ? PyObject_IsTrue(args[5]) : 0;
    if (flat < 0) return NULL;
    if (nargs < 5 || nargs > 6 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 2 ||
        !PyBytes_Check(PyTuple_GET_ITEM(args[0], 0)) || !PyBytes_Check(PyTuple_GET_ITEM(args[0], 1)) ||
        !PyBytes_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "enable_json(parts: (bytes, bytes), mask: bytes, text_for, chunk: int, "
                                          "budget: int, flat: bool = False), or enable_json(None)");
        return NULL;
    }
    if ((chunk = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred()) return NULL;
    if ((budget = PyLong_AsSsize_t(args[4])) == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t ml = PyBytes_GET_SIZE(args[1]);
    if (!t->heads || chunk < 1 || chunk > (1 << 16) || (chunk & (chunk - 1)) || ml < 1 || ml >= SLOT) {
        PyErr_SetString(PyExc_ValueError, "enable_json: an initialised template, chunk a power of two <= 65536, a "
                                          "mask text of 1 .. 15 bytes");
        return NULL;
    }
    hot_alibi_json_free(t);
    AlibiJson *j = PyMem_Calloc(1, sizeof *j);
    if (!j) return PyErr_NoMemory();
    j->parts = Py_NewRef(args[0]);
    j->text_for = Py_NewRef(args[2]);
    j->mask[0] = (char)ml;
    memcpy(j->mask + 1, PyBytes_AS_STRING(args[1]), (size_t)ml);
    while (((long long)1 << j->chunk_bits) < chunk) j->chunk_bits++;
    j->chunks = (Py_ssize_t)((hot_cfg.position_limit + chunk - 1) / chunk);
    j->npages = (j->chunks + (1 << PAGE_BITS) - 1) >> PAGE_BITS;
    j->budget = budget;
    j->flat = flat;
    t->json = j;
    Py_RETURN_NONE;
}

/* Parses text "[[c,...],...]" (H lists of n items) into slots [n, H] (a distance's heads side by
 * side: a block's rows read the same few lines for every head): 0, or -1 with an error set. */
static int parse_chunk(const char *s, Py_ssize_t len, Py_ssize_t H, Py_ssize_t n, char *slots)
{
    const char *p = s, *end = s + len;
    if (p >= end || *p++ != '[') goto bad;
    for (Py_ssize_t h = 0; h < H; h++) {
        if (p >= end || *p++ != '[') goto bad;
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *v = p;
            while (p < end && *p != ',' && *p != ']' && *p != '[' && *p != '"') p++;
            if (p >= end || p == v || *p != (i + 1 < n ? ',' : ']')) goto bad;
            char *slot = slots + (i * H + h) * SLOT;
            int keep = p - v < SLOT && !(p - v == 4 && memcmp(v, "null", 4) == 0);   /* else empty: declined */
            slot[0] = keep ? (char)(p - v) : 0;
            if (keep) memcpy(slot + 1, v, (size_t)(p - v));
            p++;
        }
        if (p >= end || *p++ != (h + 1 < H ? ',' : ']')) goto bad;
    }
    if (p == end) return 0;
bad:
    PyErr_Format(PyExc_ValueError, "set_text: want the JSON text of %zd lists of %zd items", H, n);
    return -1;
}

PyDoc_STRVAR(set_text_doc, "set_text(side, chunk, text)\n--\n\n"
             "Keep text_for(side, chunk)'s text, every head's cells at the chunk's distances, for the JSON answers.");

static PyObject *set_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    AlibiJson *j = t->json;
    if (nargs != 3 || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_text(side: int, chunk: int, text: bytes)");
        return NULL;
    }
    if (!j) {
        PyErr_SetString(PyExc_RuntimeError, "set_text: the template answers no JSON");
        return NULL;
    }
    long s = PyLong_AsLong(args[0]);
    long long c = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (s < 0 || s > 1 || c < 0 || c >= j->chunks) {
        PyErr_SetString(PyExc_IndexError, "(side, chunk) outside the template's distances");
        return NULL;
    }
    Py_ssize_t size = chunk_bytes(t, j), pb = ((Py_ssize_t)1 << PAGE_BITS) * (Py_ssize_t)sizeof(char *);
    char *slots = malloc((size_t)size);
    if (!slots) return PyErr_NoMemory();
    if (parse_chunk(PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2]), t->nheads, (Py_ssize_t)1 << j->chunk_bits,
                    slots) < 0) {
        free(slots);
        return NULL;
    }
    if (j->bytes + size > j->budget) drop_texts(j);   /* over the template's budget: its texts start over */
    /* what keeping it costs: the chunk, and the directory and page that hold it when they are new */
    int had_dir = j->pages[s] != NULL, had_page = had_dir && j->pages[s][c >> PAGE_BITS];
    Py_ssize_t need = size + (had_dir ? 0 : j->npages * (Py_ssize_t)sizeof(char *)) + (had_page ? 0 : pb);
    if (j->bytes + need > j->budget || !hot_keep(NULL, need)) {
        free(slots);
        Py_RETURN_NONE;   /* not kept: the answer misses again, and is declined */
    }
    if (had_dir && !j->pages[s]) {   /* every template's texts were dropped to make room: as above */
        hot_unkeep(NULL, need);
        free(slots);
        Py_RETURN_NONE;
    }
    j->bytes += need;
    if (!j->keeping) {
        j->keeping = 1;
        j->prev = NULL;
        j->next = keeping_list;
        if (keeping_list) keeping_list->prev = j;
        keeping_list = j;
    }
    if (!j->pages[s] && !(j->pages[s] = calloc((size_t)j->npages, sizeof(char **)))) goto nomem;
    char ***dir = j->pages[s];
    if (!dir[c >> PAGE_BITS] && !(dir[c >> PAGE_BITS] = calloc((size_t)1 << PAGE_BITS, sizeof(char *)))) goto nomem;
    char **slot = &dir[c >> PAGE_BITS][c & ((1 << PAGE_BITS) - 1)];
    if (*slot) {   /* rendered twice (asked twice before it was kept): the last one stays */
        free(*slot);
        j->bytes -= size;
        hot_unkeep(NULL, size);
    }
    *slot = slots;
    Py_RETURN_NONE;
nomem:
    free(slots);
    drop_texts(j);
    return PyErr_NoMemory();
}

static PyObject *get_text_for(PyObject *t, void *closure)
{
    (void)closure;
    AlibiJson *j = ((AlibiTemplate *)t)->json;
    return Py_NewRef(j ? j->text_for : Py_None);
}

static PyMethodDef alibi_methods[4]; /* hot_template_methods' set_header, then enable_json and set_text */
static PyGetSetDef alibi_getset[3];  /* header_for, then text_for */

int hot_alibi_json_ready(PyObject *m)
{
    alibi_methods[0] = hot_template_methods[0];
    alibi_methods[1] = (PyMethodDef){"enable_json", (PyCFunction)(void (*)(void))enable_json, METH_FASTCALL,
                                     enable_json_doc};
    alibi_methods[2] = (PyMethodDef){"set_text", (PyCFunction)(void (*)(void))set_text, METH_FASTCALL, set_text_doc};
    alibi_getset[0] = hot_template_getset[0];
    alibi_getset[1] = (PyGetSetDef){"text_for", get_text_for, NULL, "(side, chunk) -> every head's cells' JSON text "
                                    "at the chunk's distances (enable_json's), or None", NULL};
    hot_AlibiTemplateType.tp_methods = alibi_methods;
    hot_AlibiTemplateType.tp_getset = alibi_getset;
    return PyModule_AddIntConstant(m, "ALIBI_MISS_CHUNKS", MISS_CHUNKS) < 0 ||
                   PyModule_AddIntConstant(m, "ALIBI_MISS_CELLS", MISS_CELLS) < 0
               ? -1
               : 0;
}
