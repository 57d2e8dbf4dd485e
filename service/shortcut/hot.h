/* service/shortcut/hot.h -- what the files of the extension posenc.service.shortcut._hot share.
 * Private to them: _hot.c documents the module and says which file holds what. Functions
 * that one file defines and another calls are named hot_*.
 *
 * Layers. A file calls into its own layer's files or those below, never above, and the references
 * make no circle (tests/service/shortcut/test_hot_layers.py holds the sources to it):
 *   1. shared pieces, on hot.h alone: hot_select.c (the configured rules, selections, raw
 *      positions, keys' spans), hot_out.c (an answer's bytes), hot_f32text.c (a float's text);
 *      hot_templates.c (what every template shares: the head's methods, header caches and the
 *      miss note, the keep budget, a block answer's start; on hot_select.c), hot_named.c (the
 *      calls' named arguments, the v2 routes' and entries' types)
 *   2. the kinds, one file each (the rows kind's parts: hot_rows.c, hot_rows_copy.c, hot_json.c,
 *      hot_axes.c): hot_rows.c, hot_grid.c, hot_alibi.c, hot_t5.c. A kind knows the shared
 *      pieces and itself; each defines its struct hot_ops, hot_<kind>_ops
 *   3. the routes, on the shared pieces and struct hot_ops alone (never a kind's type or struct):
 *      hot_answer.c (/v1 bodies), hot_v2json.c (v2 JSON), hot_blocks.c (raw blocks), hot_fill.c
 *      (raw rows; hands block entries to hot_blocks.c)
 *   4. the lane: hot_lane.c (a whole request to a route), hot_serve.c (a socket read's requests),
 *      hot_grpc.c (a gRPC ModelInferRequest to its answer; on hot_serve.c's metrics)
 *   5. _hot.c: the module, configure(), and the list of kinds (HOT_KINDS) it registers
 *
 * A new kind of template costs one C file and one registration line:
 *   - service/shortcut/hot_<kind>.c: its struct, beginning with HOT_TEMPLATE_HEAD; its type
 *     (tp_base = &hot_TemplateType, tp_new = hot_template_new, its own init and dealloc, which
 *     releases header_for, heads and tail too); the route entries it answers (each as struct
 *     hot_ops describes it; leave the others NULL) and `const struct hot_ops hot_<kind>_ops`
 *     naming them, its kind (the `kind` Python sees), its type's name and its dims;
 *   - its name added to HOT_KINDS below (that declares hot_<kind>_ops and registers the type).
 * setup.py builds every C file of service/shortcut, so the file needs no line there.
 * The routes then answer it as they answer every kind; the Python side tells it by t.kind.
 * tests/service/shortcut/test_hot_new_kind.py does exactly this to a copy of these sources (a
 * kind whose rows are twice their positions), builds it and has fill() answer it.
 *
 * The miss protocol, and where C calls Python. An answer never calls a family's function. One
 * that lacks what only Python computes (a safetensors header of its shape, JSON texts of stored
 * rows) returns NotImplemented and notes what it lacked in this thread's thread-state dict
 * (hot_templates.c: hot_header, note_missing, hot_note_missing_rows), named by enum hot_miss:
 * (HOT_MISS_HEADER, template, shape) or (HOT_MISS_TEXTS, template, [(array, row), ...]).
 * missing() hands that note over once; templates.py (_again) computes it with the template's
 * header_for or text_for, stores it (set_header, set_text) and calls again, at most _MISSES times a
 * request (another thread may clear a full cache meanwhile), then declines. Per thread, so that two
 * threads missing at once each fetch their own.
 * C calls Python code at these points only, each named by the Python side that hands it over:
 *   - a connection's Reader (hot_serve.c): per read, fresh() when its interval is up; per request
 *     of the read, flow.write_paused (read), write(answer),
 *     and, for a request whose answer missed, again(data, at, **lane's arguments)
 *     (templates.lane_again: the miss protocol above, inside the same loop);
 *   - when made: configure() and the constructors read their arguments (a RowsTemplate its
 *     plan's fields by name, engine/tables/base.py RowPlan; hot_rows.c).
 * Everything else is the C API on built-in objects (bytes, tuples, dicts keyed by bytes, buffers).
 */
#ifndef POSENC_HOT_H
#define POSENC_HOT_H

#define _GNU_SOURCE /* memmem; before any system header, so each file includes this one first */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "native_api.h" /* engine/kernels: the sincos kernel, lent by engine.kernels._native */

#define MAX_FIELDS 2                    /* selections per family: configure() checks Python's */
#define MAX_AXES 8                      /* per-axis position lists of a selection (rope's position_ids) */
#define MAX_POSITION_LIMIT 2147483648LL /* int32 distances: configure() checks Python's limit */
#define STACK_ROWS 256
#define GROWN_ROWS 131072 /* rows past a table a template keeps at most: a 128k-context model asked as far again */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* What configure() received from Python (_hot.c); nothing runs before it. */
typedef struct {
    int64_t position_limit;
    Py_ssize_t max_rows;
    Py_ssize_t max_head;     /* bytes of a request head the lane reads (settings.max_header_bytes) */
    Py_ssize_t max_body;     /* bytes of a body the shortcut answers (settings.max_body_bytes) */
    PyObject *fields;        /* dict: family -> tuple of 1..MAX_FIELDS bytes */
    PyObject *axis_fields;   /* dict: family -> bytes, its selection of per-axis position lists */
    PyObject *range_keys[3]; /* bytes: start, stop, step */
    PyObject *off_headers;   /* tuple of lower-case bytes: header names that keep a request off the lane */
    const NativeApi *kernels; /* the engine's kernels (NULL: rows past a table are the full path's) */
    PyObject *kernels_capsule;
    Py_ssize_t keep_bytes;    /* the most bytes all templates keep (JSON texts, computed rows) */
} HotConfig;

extern HotConfig hot_cfg;
int hot_configured(void); /* 1, or 0 with an error set */
PyObject *hot_fields_of(PyObject *family); /* its selection names (borrowed), or NULL and KeyError */
PyObject *hot_axis_field_of(PyObject *family); /* its per-axis selection's name (borrowed), or NULL (none) */

/* ---- named results the Python side branches on (exported by _hot.c) ---------------------- */

/* a Reader's state of a socket read (hot_serve.c), in this order; exported as SERVE_STATES, their
 * names, which templates.py's SERVE_STATES holds (test_hot_kinds.py checks the two equal). */
#define HOT_SERVE_STATES(X)                                                                        \
    X(SERVE_DONE, "done") X(SERVE_PAUSED, "paused") X(SERVE_NOT_REQUEST, "not a request")           \
    X(SERVE_DECLINED, "declined") X(SERVE_AGAIN, "again") X(SERVE_CLOSED, "closed") X(SERVE_FAILED, "failed")
#define HOT_ENUM_ITEM(name, text) name,
enum hot_serve_state { HOT_SERVE_STATES(HOT_ENUM_ITEM) };
/* The answer formats C writes: the values of an `accepts` dict (hot_accepted); exported as
 * FORMATS, {name: value}, which templates.py's FORMATS holds. */
#define HOT_FORMATS(X) X(HOT_SAFETENSORS, "safetensors") X(HOT_JSON, "json")
enum hot_format { HOT_FORMATS(HOT_ENUM_ITEM) };
/* What an answer that returned NotImplemented lacked (the miss protocol above), the first item of
 * missing()'s note, in this order; exported as MISSES, their names, which templates.py's MISSES
 * holds: a safetensors header of a shape, or JSON texts of stored rows. */
#define HOT_MISSES(X) X(HOT_MISS_HEADER, "header") X(HOT_MISS_TEXTS, "texts")
enum hot_miss { HOT_MISSES(HOT_ENUM_ITEM) };

/* ---- selections (hot_select.c) ---------------------------------------------------------- */

static inline int hot_is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int hot_is_digit(char c) { return c >= '0' && c <= '9'; }

typedef struct {
    const char *open, *close; /* '[' or '{' .. its ']' or '}' */
} Span;

/* A selection: a range (start, step, n) or n explicit values. */
typedef struct {
    int64_t start, step, lo, hi;
    Py_ssize_t n;
    int64_t *v; /* NULL: a range */
    int64_t stack[STACK_ROWS];
    int64_t *heap;
} Sel;

static inline void hot_sel_free(Sel *s) { PyMem_Free(s->heap); }
static inline int64_t hot_sel_at(const Sel *s, Py_ssize_t i) { return s->v ? s->v[i] : s->start + i * s->step; }

/* Where the value of field `name` (JSON text with its quotes) starts: after its first occurrence,
 * only whitespace and exactly one ':' before it; NULL when there is none. */
const char *hot_field_value(const char *b, const char *end, PyObject *name);
int hot_find_span(const char *b, const char *end, PyObject *name, Span *sp);
int hot_parse_sel(const Span *sp, Py_ssize_t cap, Sel *s); /* 0 ok, -1 refused, -2 error set */
extern PyMethodDef hot_select_methods[];

/* ---- answers being written (hot_out.c) --------------------------------------------------- */

/* The HTTP head the lane puts before an answer, in the same bytes object: pre (status line ..
 * "content-length: "), the answer's length, post (the headers after it), then "connection:
 * close" when asked, and the blank line. NULL: the answer alone. */
typedef struct {
    PyObject *pre, *post; /* bytes */
    int close;
    int json;             /* the answer in JSON (a template with enable_json()), else safetensors */
    int frame;            /* enum hot_frame: HOT_FRAME_HTTP (the head above), else pre and post unread */
} Http;
/* What goes around an answer (Http.frame): the lane's HTTP head (HOT_FRAME_HTTP); nothing
 * (HOT_FRAME_BARE: a gRPC ModelInferResponse, whose session adds the gRPC prefix, and the Python
 * doors' answers, answer() and v2_rest(), whose writers add the head); or a ModelStreamInferResponse
 * message holding it, after its 5-byte gRPC prefix (HOT_FRAME_STREAM). */
enum hot_frame { HOT_FRAME_HTTP, HOT_FRAME_BARE, HOT_FRAME_STREAM };

/* An answer being filled: the kernels write `fill`, which is `dest` inside `obj`, or, when they
 * need `aligned` stores (ALiBi's computed float rows, T5's blocks; not an ALiBi block read from its
 * stored table: its ops' block_any_alignment) and an HTTP head of another length left `dest`
 * unaligned, an 8-byte aligned scratch buffer that hot_finish() moves in place. */
typedef struct {
    PyObject *obj;
    char *dest, *fill;
    Py_ssize_t n;
} Out;

/* ---- a template: its head, and its kind's operations ----------------------------------- */

/* Every template type's struct begins with this head: its kind's operations (set by tp_new,
 * hot_template_new, from the kind registered with the type), then what every kind shares: the
 * family's function of an answer's shape to its safetensors header (never called here), the
 * header cache (dict: shape key -> header bytes) and the bytes after the arrays. */
struct hot_ops;
#define HOT_TEMPLATE_HEAD                                                                          \
    PyObject_HEAD                                                                                  \
    const struct hot_ops *ops; /* its kind's */                                                    \
    PyObject *header_for;      /* shape -> header bytes; templates.py calls it on a miss */         \
    PyObject *heads;           /* dict: n (rows), or nq << 32 | nk (blocks) -> header bytes */      \
    PyObject *tail;            /* bytes */

typedef struct {
    HOT_TEMPLATE_HEAD
} HotTemplate;

/* A /v1 body's answer from template t: sp its selections' spans (ops->dims of them, in the
 * family's field order; per-axis lists: sp[0]). A new reference: bytes, None (declined: the full
 * path's), NotImplemented (a header or texts missing: see the miss protocol), or NULL (error). */
typedef PyObject *(*hot_body_fn)(HotTemplate *t, const Span *sp, const Http *http);

/* What a kind of template answers, one entry per route (NULL: the route declines it, or refuses a
 * template of this kind as it does a wrong argument). The routes call these and nothing else of a
 * kind: they never look at its type. */
struct hot_ops {
    const char *kind;   /* a short name: the template's `kind` ("rows", "grid", "alibi", "t5") */
    const char *name;   /* its type's name in the module */
    PyTypeObject *type; /* the type (tp_new = hot_template_new) */
    int dims;           /* of an answer's shape, (n,) or (nq, nk): also the selections of its bodies */
    /* /v1 bodies (hot_answer.c answer(), the lane): safetensors, JSON (http->json), per-axis lists */
    hot_body_fn v1, v1_json, v1_axes;
    /* v2 JSON-tensor infers (hot_v2json.c): sp the dims lists (query first), want[f] the positions
     * list f must hold; http->json is set. As v1's. */
    PyObject *(*v2_json)(HotTemplate *t, const Span *sp, const Py_ssize_t *want, const Http *http);
    /* rows for raw binary positions (hot_fill.c: fill(), fill_into(), the v2 binary route): the
     * arrays a fill writes; the positions (len bytes of isz-byte ints) into *rows and each array's
     * bytes into *block (1; 0 declined; -1 error set; the caller frees rows); the rows into
     * slots[a] at any alignment (0; 1 a computed value overflows; -1 out of memory, no error set:
     * with keep 0 it runs without the GIL, keeping nothing). */
    int (*arrays)(const HotTemplate *t);
    int (*raw_rows)(HotTemplate *t, const char *pos, Py_ssize_t len, Py_ssize_t isz, Sel *rows, Py_ssize_t *block);
    int (*rows_into)(char **slots, HotTemplate *t, const Sel *rows, int keep);
    /* blocks for raw query and key positions (hot_blocks.c: fill_block(), the v2 binary route):
     * the block's groups (heads), cell size and most bytes; the block [groups, nq, nk] into fill
     * (8-byte aligned): 0, 1 a cell overflows the dtype, -1 out of memory (no error set) */
    void (*block_limits)(const HotTemplate *t, Py_ssize_t *groups, Py_ssize_t *itemsize, Py_ssize_t *max_bytes);
    int (*block_into)(const HotTemplate *t, const Sel *q, const Sel *k, char *fill);
    /* optional: whether block_into writes this block at any alignment (else fill is 8-byte
     * aligned: hot_bytes_of's `aligned`); NULL: never */
    int (*block_any_alignment)(const HotTemplate *t, const Sel *q, const Sel *k);
};

/* The kinds, each registered by one line here (its ops, hot_<kind>_ops, defined in its file). */
#define HOT_KINDS(X) X(rows) X(alibi) X(grid) X(t5)
#define HOT_DECLARE_KIND(k) extern const struct hot_ops hot_##k##_ops;
HOT_KINDS(HOT_DECLARE_KIND)

/* Every template type's tp_new: a template of the kind registered with its type. */
PyObject *hot_template_new(PyTypeObject *type, PyObject *args, PyObject *kw);
/* o's kind's operations, or NULL when o is not a template. */
static inline const struct hot_ops *hot_ops_of(PyObject *o)
{
    return Py_TYPE(o)->tp_new == hot_template_new ? ((HotTemplate *)o)->ops : NULL;
}

/* ---- templates (hot_templates.c) -------------------------------------------------------- */

/* What templates keep (JSON texts, computed rows), within hot_cfg.keep_bytes for all together
 * (hot_templates.c): each keeping template is on a list by its keeper, whose drop frees everything
 * it keeps (hot_unkeep-ing those bytes) and takes it off the list (hot_keep_leave). */
typedef struct HotKeeper {
    struct HotKeeper *prev, *next;
    int keeping;
    void (*drop)(struct HotKeeper *k);
} HotKeeper;
/* Room for `bytes` more kept by k's template: over the budget, every template's kept texts and rows
 * are dropped first. 1: granted (counted, k put on the list), 0: not. */
int hot_keep(HotKeeper *k, Py_ssize_t bytes);
void hot_unkeep(HotKeeper *k, Py_ssize_t bytes); /* bytes k's template kept are freed */
void hot_keep_leave(HotKeeper *k);               /* k off the list */

/* (each kind's type is its file's own, named only by its ops: nothing else can switch on it) */
/* The base of every template type (its tp_base): set_header(), header_for and kind, for all. */
extern PyTypeObject hot_TemplateType;
int hot_get_table(PyObject *o, Py_buffer *b); /* a 2-d C-contiguous array of 2- or 4-byte items: 0, or -1 */
int hot_want_callable(PyObject *f);           /* 0, or -1 with a TypeError */
/* A template constructor's arguments are named, never positional: 0, or -1 with a TypeError
 * when args (its positional ones) is not empty. */
int hot_keywords_only(PyObject *args, const char *type_name);
int hot_once(int initialised);                /* initialised, with a RuntimeError when 1 */
/* A block template's enable_json(parts, flat=False) arguments read: *parts the (before, after) bytes
 * pair (borrowed) or NULL for None, *flat the flag: 0, or -1 with a TypeError. */
int hot_json_parts(PyObject *const *args, Py_ssize_t nargs, PyObject **parts, int *flat);
/* A template's header_for and tail taken (new references) at the end of its init: 0. */
int hot_hold(PyObject **header_for, PyObject *hf, PyObject **tail, PyObject *tl);
/* The header of an answer of shape (a) or (a, b) (b < 0: one dimension) from template t's cache:
 * 1 and a new reference in *out; 0 when the cache lacks it (noted for missing()); -1 error. */
int hot_header(PyObject *t, PyObject *cache, Py_ssize_t a, Py_ssize_t b, PyObject **out);
/* The module's kinds of template (_hot.c's list of HOT_KINDS), their types readied and added to
 * the module: 0, or -1 with an error set. */
int hot_templates_ready(PyObject *module, const struct hot_ops *const *kinds, size_t n);
extern PyMethodDef hot_templates_methods[];

/* ---- answers (hot_answer.c) ------------------------------------------------------------- */

/* A new bytes object: the HTTP head (when http), head, `body` bytes to fill, tail; 0 or -1. */
int hot_bytes_of(const Http *http, PyObject *head, Py_ssize_t body, PyObject *tail, int aligned, Out *o);
PyObject *hot_finish(Out *o); /* the filled answer (new reference) */

/* The answer of body [b, end) of a family (its selection names `fields`; `axis_field`, or NULL,
 * the one it may send instead as per-axis lists) from its `templates`, with an HTTP head before it when `http` is given: a new reference to the bytes, to None
 * (declined), to NotImplemented (a header is missing: see hot_templates.c), or NULL (error). */
PyObject *hot_answer_body(const char *b, const char *end, PyObject *fields, PyObject *axis_field, PyObject *templates,
                          const Http *http);
/* The format an Accept value (borrowed; NULL: no Accept header, looked up as None) negotiates to
 * by `accepts` ({value: 0 safetensors | 1 JSON}, what the full path's negotiator chose): 1 + that,
 * 0 for a value not in it, -1 error. */
int hot_accepted(PyObject *accepts, PyObject *accept);
extern PyMethodDef hot_answer_methods[];
/* cut()'s result from a body's key (stolen; NULL: none, or an error set) and its nf spans, offsets
 * from b: (key, ((start, end), ...)), None, or NULL. */
PyObject *hot_key_spans(PyObject *key, const char *b, const Span *spans, Py_ssize_t nf);

/* ---- the miss note of rows' JSON texts (hot_templates.c; hot_json.c notes it) ------------- */

/* Notes (template, None, [(array, row), ...]) as this thread's miss (hot_templates.c); 0 or -1. */
int hot_note_missing_rows(PyObject *t, PyObject *rows);

/* ---- per-axis position lists (hot_select.c) ---------------------------------------------- */

/* The span of field `name` whose value is a list of position lists: '[' .. its ']'. 0, or -1. */
int hot_find_axes_span(const char *b, const char *end, PyObject *name, Span *sp);
/* The k lists of span sp (hot_find_axes_span's) into sels[0 .. k-1] (hot_select.c: each
 * hot_parse_sel's list, 1 .. cap positions, all of one length). 0 ok, -1 refused, -2 error set. */
int hot_parse_axes(const Span *sp, int k, Py_ssize_t cap, Sel *sels);

/* The start of a block answer (template t: AlibiTemplate, T5Template, its header cache heads):
 * its two selections (at most max_n positions each) into q and k, its header into *head (heads
 * NULL: none, a JSON answer). 1: go on; 0: *out is None (a selection refused, or more than
 * cells_max cells over `groups` blocks) or NotImplemented (a header to fetch); -1: error set.
 * The caller frees q and k. */
int hot_block_start(PyObject *t, PyObject *heads, const Span *sq, const Span *sk, Py_ssize_t max_n, Py_ssize_t groups,
                    Py_ssize_t cells_max, Sel *q, Sel *k, PyObject **head, PyObject **out);
/* A block's query then key positions as int64, for the engine's block kernels (PyMem_Free it);
 * NULL when out of memory (no error set). */
int64_t *hot_block_positions(const Sel *q, const Sel *k);
/* A block answer's end: hot_finish(o) when rc (a block function's result) is 0; else None (1: a
 * cell overflows) or NULL (-1: out of memory, the error set), the answer freed. */
PyObject *hot_block_done(Out *o, int rc);

/* ---- named contracts (hot_named.c) ---------------------------------------------------------- */

/* A module function's arguments (METH_FASTCALL | METH_KEYWORDS): names, NULL-terminated, the first
 * npos of which may come by position (at most three), the others by keyword only; the first nreq
 * are required. Static per function; its names are interned at the first call. */
#define HOT_MAX_ARGS 16
typedef struct {
    const char *fn;
    const char *const *names;
    int npos, nreq, n;
    PyObject *interned[HOT_MAX_ARGS];
} HotSig;
/* The arguments into out[i] by sig's names (borrowed; NULL: not given): 0, or -1 with a
 * TypeError naming the function and the argument. */
int hot_args(HotSig *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out);

/* What the lane's v2 routes hold (service/v2/hot.py, hot_blocks.py, hot_json.py make them; hot_named.c
 * says their fields, each checked once when made). */
typedef struct {
    PyObject_HEAD
    Py_ssize_t metrics;                              /* the offset of its answers' counts */
    PyObject *entries, *length_name, *refused;       /* {head: RowsEntry | BlockEntry}, bytes, (bytes) */
    PyObject *json_name, *json_entries;              /* bytes, {key: JsonEntry} */
} HotV2Route;
typedef struct {
    PyObject_HEAD
    PyObject *template; /* of rows (ops->raw_rows) */
    Py_ssize_t itemsize, nbytes;
    PyObject *parts, *post; /* arrays + 1 bytes; bytes */
} HotRowsEntry;
typedef struct {
    PyObject_HEAD
    PyObject *template;                 /* of blocks (ops->block_into) */
    PyObject *itemsizes, *nbytes_of;     /* pairs: the two inputs' item sizes and bytes */
    char key_first;
    PyObject *parts, *post;             /* (before, after); bytes */
    Py_ssize_t itemsize[2], nbytes[2];  /* the pairs, read when made */
} HotBlockEntry;
typedef struct {
    PyObject_HEAD
    PyObject *template; /* of flat JSON (ops->v2_json), ops->dims == ncounts */
    PyObject *counts;   /* the positions each list holds: a tuple, read when made into count */
    char swap;
    PyObject *post;
    Py_ssize_t count[MAX_FIELDS];
    int ncounts;
} HotJsonEntry;
/* gRPC's entry of a learnt ModelInferRequest key (hot_grpc.c reads it): fill, the RowsEntry or
 * BlockEntry C fills (None: Python answers, e.g. outputs into shared memory); nbytes, each trailing
 * raw_input_contents field's length; size, the answer's bytes; metrics and stream_metrics, the
 * offsets of its unary and stream answers' counts; entry, the Python entry that answers otherwise. */
typedef struct {
    PyObject_HEAD
    PyObject *fill, *nbytes_of, *entry;
    Py_ssize_t size, metrics, stream_metrics;
    Py_ssize_t nbytes[MAX_FIELDS]; /* nbytes_of, read when made */
    int nraw;
} HotGrpcEntry;
extern PyTypeObject hot_V2RouteType, hot_RowsEntryType, hot_BlockEntryType, hot_JsonEntryType, hot_GrpcEntryType;
int hot_named_ready(PyObject *module); /* the five types readied and added: 0, or -1 set */

/* ---- the lane (hot_lane.c) and fills (hot_fill.c, hot_blocks.c) --------------------------------------- */

void hot_lane_ready(void);
/* A v2 REST binary infer's answer, with the HTTP head http (its post replaced by the entry's):
 * entry a RowsEntry or a BlockEntry (hot_v2_block_answer's), pos the raw positions (len bytes).
 * Bytes; None: declined (not nbytes, a position the template does not answer, an overflow); NULL:
 * error. */
PyObject *hot_v2_answer(PyObject *entry, const char *pos, Py_ssize_t len, const Http *http);
/* A v2 REST JSON-tensor infer's answer (hot_v2json.c), the HTTP head http's: route's json_name and
 * json_entries, body [b, b + len). Bytes (found not NULL: *found the JsonEntry, a new reference); None:
 * declined; NotImplemented: rows' texts missing (see missing()); NULL: error. */
PyObject *hot_v2json_answer(const HotV2Route *route, const char *b, Py_ssize_t len, const Http *http, PyObject **found);
extern PyMethodDef hot_v2json_methods[];
/* entries[key] (key stolen) as a new reference, held while it answers (an allocation may run
 * finalizers that drop it from the dict); NULL: none (no error set), or an error. */
PyObject *hot_entry(PyObject *entries, PyObject *key);
/* The same for a BlockEntry (hot_blocks.c; hot_v2_answer passes it on), pos the two inputs' raw
 * positions one after the other. */
PyObject *hot_v2_block_answer(const HotBlockEntry *entry, const char *pos, Py_ssize_t len, const Http *http);
/* Raw little-endian positions (len bytes of isz-byte ints, isz 4 or 8) into s, with its lo and hi
 * (hot_select.c): 1; 0 when one is negative or not below the position limit; -1 with an error set
 * (ValueError: not a whole, non-zero number of such ints; no memory). The caller frees s. */
int hot_raw_positions(const char *src, Py_ssize_t len, Py_ssize_t isz, Sel *s);
/* configure()'s off_headers (lower-case str header names) as a new tuple of bytes; NULL: error */
PyObject *hot_lane_names(PyObject *names);
extern PyMethodDef hot_lane_methods[];
/* What lane() answers a request with (hot_lane.c), its keyword arguments checked once (lane(),
 * a Reader when made): routes a dict or a tuple of dicts, accepts and native dicts, pre three bytes, post
 * bytes, close a flag. */
typedef struct {
    PyObject *routes, *accepts, *native, *pre, *post; /* borrowed */
    int close;
} HotLaneArgs;
/* lane()'s names (data, start, then HotLaneArgs's) and a call's values checked into *a: 0, -1 set. */
extern const char *const hot_lane_names_of[];
int hot_lane_args(PyObject *const *v, HotLaneArgs *a);
/* lane()'s answer to the request at data[start:] (hot_lane.c), for lane() and a Reader (hot_serve.c) */
PyObject *hot_lane_at(PyObject *data, Py_ssize_t start, const HotLaneArgs *a);
extern PyMethodDef hot_serve_methods[];
int hot_serve_ready(PyObject *m); /* the Reader type added to the module (hot_serve.c) */
extern PyMethodDef hot_grpc_methods[]; /* grpc_cut(), grpc_answer(): gRPC's door (hot_grpc.c) */
/* a Reader's metrics (hot_serve.c), for hot_grpc.c too: the clock of time.perf_counter(); the counts'
 * writable float64 buffer (counts None: c->buf NULL) and buckets checked, 0 or -1 set; one answer
 * counted at base as Metrics.observe_at counts it. */
double hot_seconds_now(void);
int hot_counts_of(PyObject *counts, PyObject *buckets, Py_buffer *c);
void hot_observe(const Py_buffer *c, PyObject *buckets, Py_ssize_t base, double seconds, double nbytes);
extern PyMethodDef hot_fill_methods[];
extern PyMethodDef hot_blocks_methods[];
extern PyMethodDef hot_f32text_methods[]; /* f32_json, for the tests */

/* ---- a float32's JSON text (hot_f32text.c) ---------------------------------------------- */

/* A block's JSON text is written on the event loop, cell by cell (~10-50 ns a cell): a block of
 * more cells than this is declined, to the full path, which writes it in a thread in bounded
 * pieces (service/front/sizing.py). With only the templates' 4 MiB cap on a block's arrays, a
 * 1024 x 1024 float32 ALiBi block's text (1M cells, 6.4 MB) held a worker's loop ~50 ms. */
#define HOT_JSON_CELLS 262144
#define HOT_F32_TEXT 24 /* room for one text: at most 17 bytes ("-0.0000012345678") */
/* Writes f's text as the full path's JSON writer (orjson) writes it at w, "null" when not finite;
 * returns its length. It may write scratch past the text: w must have HOT_F32_TEXT bytes of room. */
int hot_f32_text(float f, char *w);

#endif
