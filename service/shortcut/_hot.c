/* service/shortcut/_hot.c -- the spec-template shortcut (service/shortcut/templates.py) in C, for
 * the hot path: the module and configure().
 *
 * Decode-time clients send the same spec again and again with new positions. After the full
 * path has answered a body, the body's bytes around its selections (RoPE and sinusoidal
 * "positions"; ALiBi "query" and "key") become a template key: the body with each selection's
 * text replaced by one NUL byte. A later body with the same key is the same validated spec with
 * other selections (templates.py explains why, and checks at learn time that each cut-out span
 * really is the value its field takes). This module answers such a body in one call, with no
 * Python object but the answer.
 *
 * Its files, one concern each, share the private header hot.h (which says how they layer):
 *   _hot.c           the module, configure()
 *   hot_select.c     the strict parser of the cut-out selections, and raw binary positions
 *   hot_out.c        an answer's bytes: HTTP head, head, values, tail in one bytes object
 *   hot_f32text.c    a float32's JSON text, orjson's (zmij's digits, vendor/zmij/)
 *   hot_templates.c  what every template shares: its head's methods, header caches, the miss note,
 *                    the keep budget
 *   hot_named.c      the named contracts: calls' keyword arguments, the v2 routes and entries
 *   hot_rows.c       the rows kind: RowsTemplate (RoPE, sinusoidal), its answers
 *   hot_rows_copy.c  its rows copied by the one row gather (engine/kernels/row_gather.h), or
 *                    computed past the table
 *   hot_json.c       its JSON answers: kept texts of stored rows, copied (enable_json)
 *   hot_axes.c       its per-axis position lists (rope's position_ids): rows gathered axis by axis
 *   hot_grid.c       the grid kind: GridTemplate, rows of a large sinusoidal-grid from per-axis tables
 *   hot_alibi.c      the alibi kind: AlibiTemplate, its block cells and its JSON (orjson's cell texts)
 *   hot_t5.c         the t5 kind: T5Template, T5 bucket blocks by the engine's kernel
 *   hot_answer.c     answer(), cut(): a /v1 body to its template's answer (through the kind's ops)
 *   hot_fill.c       fill(), fill_into(), v2 binary rows: rows for raw binary positions
 *   hot_blocks.c     fill_block(), v2 binary blocks: blocks for raw binary query and key
 *   hot_v2json.c     v2 REST JSON-tensor infers: their key (v2_cut) and answer (the lane's v2 routes)
 *   hot_lane.c       lane(): a whole HTTP request to its whole response; v2_rest(): the Python door's v2 REST
 *   hot_serve.c      Reader: every whole request of a socket read, answered and written
 *   hot_grpc.c       grpc_cut(), grpc_answer(): a gRPC ModelInferRequest's key and learnt answer
 *
 *   configure(*, position_limit, max_rows, fields, range_keys, max_head, max_body, off_headers,
 *             kernels=None, keep_bytes=0, axis_fields=None)
 *     From service/shortcut/templates.py (its configure(settings)), before anything else: the
 *     rules and limits Python owns, so that none is written twice. position_limit: positions are
 *     < it (engine/core/selection.py; at most 2**31, for the int32 distances below); max_rows: most
 *     rows of a RowsTemplate answer; fields: {family: its selection names as JSON text}, e.g.
 *     {"alibi": (b'"query"', b'"key"')}, 1 or 2 each; range_keys: a range selection's start,
 *     stop and step names as JSON text; max_head: most bytes of a request head lane() reads
 *     (settings.max_header_bytes); max_body: most bytes of a body answered
 *     (settings.max_body_bytes); off_headers: lower-case names of the request headers that keep
 *     a request off the lane (engine/core/settings.py LANE_OFF_HEADERS); kernels: engine.kernels'
 *     capsule (engine/kernels/native_api.h, engine.kernels.c_api()) whose sincos loop computes
 *     rows past a stored table, or None (the simd backend is not in use: those rows take the full
 *     path); keep_bytes: the most bytes all templates keep together (JSON texts of stored rows,
 *     rows past a table once computed; over it, everything kept is dropped and kept again as
 *     asked); axis_fields: {family: the name, as JSON text, of the selection a one-field family
 *     may send instead as a list of per-axis position lists (rope's "position_ids")}. Called
 *     again, it replaces them all.
 *
 * A call takes at most three arguments by position, the rest by name (hot_named.c hot_args; a wrong
 * or missing name is a TypeError naming it), and what Python hands the lane is named too: the
 * templates (below), the v2 routes and their entries (hot_named.c: V2Route, RowsEntry,
 * BlockEntry, JsonEntry).
 *
 *   answer(raw, headers, *, accepts, templates, family) -> bytes | None | NotImplemented
 *
 * raw: the request body; headers: the ASGI scope's [(name, value)] list; accepts: {Accept value
 * or None: 0 safetensors | 1 JSON}, what the full path's negotiator chose (answer() writes
 * safetensors only); templates: {key: template} of one family (any kind), a key of the configured
 * fields. It returns the whole safetensors response, or None whenever anything is unusual; the
 * caller then takes the full path. So the parser here may refuse more than the full path does
 * (e.g. "-0", "start": null) but never accepts a body the full path would answer differently. The
 * tests hold the answers to the full path's bytes and to the float64 reference.
 *
 *   lane(data, start, *, routes, accepts, native, pre, post, close)   (hot_lane.c)
 *     The same for a whole HTTP request, head and all, to the whole response; None or False where
 *     it does not answer (its doc says which is which).
 *   serve(data, *, routes, ..., write, flow, counts, buckets, again)   (hot_serve.c)
 *     Every whole request of one socket read, answered as lane() answers it and written.
 *
 *   cut(raw, family) -> (key, spans) | None                  (hot_answer.c)
 *     The key a body's template is stored under when templates.py learns it.
 *
 *   parse_selection(text, lists_only, cap)                  (hot_select.c; for the tests)
 *
 * Where C calls Python is hot.h's "The miss protocol": an answer never calls a family's function;
 * one that lacks what only Python computes (a safetensors header of its shape, JSON texts of
 * stored rows) returns NotImplemented and notes what it lacked for its thread:
 *
 *   missing() -> (what, template, detail) | None   that note (what: an index of MISSES, "header"
 *                                                  with the shape, "texts" with [(array, row)]),
 *                                                  forgotten as it is returned
 *   template.set_header(shape, header)            caches a header: (n,) rows, or (nq, nk)
 *   template.set_text(array, row, text)           keeps a stored row's JSON text
 *
 * templates.py then computes it with template.header_for(*shape) or text_for(array, row) and calls
 * again.
 *
 * The constructors take keyword arguments only (a TypeError names the type for a positional one):
 *
 *   RowsTemplate(*, plan, max_rows, lists_only, header_for, tail)
 *     Rows of shared tables: RoPE's half-width cos and sin, or a sinusoidal table, by the family's
 *     row plan (engine/tables/base.py RowPlan, read by its fields' names; the co-located reader's
 *     rows_lookup reads the same plan and copies rows by the same gather, engine/kernels/row_gather.h).
 *     plan.arrays: 1 or 2 [length, w] arrays (C-contiguous, 2- or 4-byte items; the template holds
 *     them, so their mapping outlives an eviction until the template is dropped); plan.colmap: for
 *     each output column the stored column it copies (-1: zero), so out[i, j] = array[position_i +
 *     plan.offset, colmap[j]]; header_for(n) -> safetensors header bytes for n rows (kept for
 *     templates.py, which calls it on a miss); tail: the bytes after the arrays.
 *     Positions: at most max_rows (<= the configured max_rows), each row inside the table; a
 *     list, or also a range unless lists_only. plan.past: None (rows past the table are declined)
 *     or a PastRows (freqs, scale, dtype, maps, row_limit): a row r = position + offset past the
 *     table, below row_limit, is computed by the engine's sincos kernel as the pipeline computes
 *     it, [cos | sin] of float64(r) * freqs[k] times scale rounded once to dtype, and stored column
 *     c of array a is its item maps[a][c] (then the column map, as for stored rows). The family
 *     derives maps from its own stored layout applied to item numbers.
 *     plan.axes: None, or each column's axis of plan.naxes: the selection is the family's axis
 *     field, naxes lists of positions, and out[i, j] = array[positions[axes[j]][i] + offset,
 *     colmap[j]] (rope's mrope_section and axes_dim: engine/tables/rope_axes.py). Lists only, no
 *     JSON (the full path answers it); with past, array a's map must be a * len(freqs) + c (an
 *     axis's row past the table is computed whole, then read as a stored row).
 *
 *   GridTemplate(*, arrays, steps, extra, rows, max_rows, header_for, tail)
 *     A sinusoidal-grid stored as per-axis tables: arrays, 1 to 3 [size, width] tables of one item
 *     size; steps, (div, mod) per array; row p < extra is zeros, else array a's row ((p - extra) /
 *     div) % mod, side by side in array order; positions (a list or a range, at most max_rows)
 *     below rows, else declined.
 *
 *   T5Template(*, lut, radius, header_for, tail, max_n, max_bytes)
 *     t5-buckets: lut, the engine's int32 table [2 radius + 1] (held); blocks of at most max_n
 *     positions per selection and max_bytes, filled by the engine's t5 kernel (native_api.h; the
 *     kernels must be configured).
 *
 *   AlibiTemplate(*, slopes, symmetric, mask_future, header_for, tail, max_n, max_bytes, dist=None,
 *                 rows=None, dtype="float32")
 *     slopes: the requested heads' float64 slopes; header_for(nq, nk) -> header bytes; tail: the
 *     float32 slopes; max_n: most positions per selection; max_bytes: most bytes of arrays per
 *     answer. float32: each cell is engine/kernels/alibi_cell.h's, as engine.kernels computes it,
 *     rounded to float32 (decode blocks inside dist, the engine's float32 distance table, copied
 *     from its rows). float16/bfloat16 (configured with the kernels only): the engine's block
 *     kernel (native_api.h) fills the block; a cell that overflows declines the body.
 */
#include "hot.h"

/* 0: a non-empty bytes without NUL (a NUL would match the template keys' cut marks). */
static int want_name(PyObject *o, const char *what)
{
    if (PyBytes_Check(o) && PyBytes_GET_SIZE(o) > 0 && !memchr(PyBytes_AS_STRING(o), 0, (size_t)PyBytes_GET_SIZE(o)))
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: want a name as non-empty JSON text (bytes), got %R", what, o);
    return -1;
}

PyDoc_STRVAR(configure_doc, "configure(*, position_limit, max_rows, fields, range_keys, max_head, max_body, "
             "off_headers, kernels=None, keep_bytes=0, axis_fields=None)\n--\n\n"
             "The rules Python owns (see the module source); once, before any template or answer.");

static PyObject *configure(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"position_limit", "max_rows", "fields", "range_keys", "max_head", "max_body",
                             "off_headers", "kernels", "keep_bytes", "axis_fields", NULL};
    long long limit;
    Py_ssize_t max_rows, max_head, max_body, keep_bytes = 0;
    PyObject *fields, *keys, *off, *copy = NULL, *family, *names, *kernels = Py_None, *axis = NULL, *axis_copy;
    const NativeApi *api = NULL;
    if (hot_keywords_only(args, "configure") < 0) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LnO!O!nnO!|OnO!:configure", kwlist, &limit, &max_rows, &PyDict_Type,
                                     &fields, &PyTuple_Type, &keys, &max_head, &max_body, &PyTuple_Type, &off,
                                     &kernels, &keep_bytes, &PyDict_Type, &axis))
        return NULL;
    if (keep_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "keep_bytes: want >= 0");
        return NULL;
    }
    if (kernels != Py_None) {
        if (!(api = PyCapsule_GetPointer(kernels, NATIVE_API_NAME))) return NULL;
        if (api->version != NATIVE_API_VERSION) {
            PyErr_Format(PyExc_ValueError, "kernels: API version %d, this build wants %d", api->version,
                         NATIVE_API_VERSION);
            return NULL;
        }
    }
    if (limit < 1 || limit > MAX_POSITION_LIMIT) {
        PyErr_Format(PyExc_ValueError, "position_limit: want 1 .. 2**31 (distances are int32 here), got %lld", limit);
        return NULL;
    }
    if (max_rows < 1 || max_head < 1 || max_body < 1) {
        PyErr_Format(PyExc_ValueError, "max_rows, max_head, max_body: want >= 1, got %zd, %zd, %zd", max_rows,
                     max_head, max_body);
        return NULL;
    }
    if (PyTuple_GET_SIZE(keys) != 3) {
        PyErr_SetString(PyExc_ValueError, "range_keys: want (start, stop, step)");
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (want_name(PyTuple_GET_ITEM(keys, i), "range_keys") < 0) return NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fields, &pos, &family, &names)) {
        if (!PyUnicode_Check(family) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) < 1 ||
            PyTuple_GET_SIZE(names) > MAX_FIELDS) {
            PyErr_Format(PyExc_ValueError, "fields[%R]: want a family name -> a tuple of 1 to %d selection "
                         "names (this build's bound)", family, MAX_FIELDS);
            return NULL;
        }
        for (Py_ssize_t f = 0; f < PyTuple_GET_SIZE(names); f++)
            if (want_name(PyTuple_GET_ITEM(names, f), "fields") < 0) return NULL;
    }
    pos = 0;
    while (axis && PyDict_Next(axis, &pos, &family, &names)) {
        PyObject *f = PyDict_GetItemWithError(fields, family);
        if (!f && PyErr_Occurred()) return NULL;
        if (!f || PyTuple_GET_SIZE(f) != 1) {
            PyErr_Format(PyExc_ValueError, "axis_fields[%R]: want a family of fields with one selection", family);
            return NULL;
        }
        if (want_name(names, "axis_fields") < 0) return NULL;
    }
    PyObject *off_names = hot_lane_names(off);
    if (!off_names) return NULL;
    axis_copy = axis ? PyDict_Copy(axis) : PyDict_New();
    if (!axis_copy || !(copy = PyDict_Copy(fields))) {
        Py_XDECREF(axis_copy);
        Py_DECREF(off_names);
        return NULL;
    }
    Py_XSETREF(hot_cfg.axis_fields, axis_copy);
    hot_cfg.position_limit = limit;
    hot_cfg.max_rows = max_rows;
    hot_cfg.max_head = max_head;
    hot_cfg.max_body = max_body;
    Py_XSETREF(hot_cfg.off_headers, off_names);
    Py_XSETREF(hot_cfg.fields, copy);
    Py_INCREF(kernels);
    Py_XSETREF(hot_cfg.kernels_capsule, kernels);
    hot_cfg.kernels = api;
    hot_cfg.keep_bytes = keep_bytes;
    for (int i = 0; i < 3; i++) {
        Py_INCREF(PyTuple_GET_ITEM(keys, i));
        Py_XSETREF(hot_cfg.range_keys[i], PyTuple_GET_ITEM(keys, i));
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS, configure_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_hot", "The spec-template shortcut in C (see service/shortcut/_hot.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* The named results (hot.h) as module constants: SERVE_STATES and MISSES (names, in enum order)
 * and FORMATS ({name: value}). 0, or -1 with an error set. */
static int add_contracts(PyObject *m)
{
#define HOT_S(name, text) "s"
#define HOT_SI(name, text) "si"
#define HOT_STATE_NAME(name, text) text,
#define HOT_FORMAT_ITEM(name, text) text, (int)name,
    PyObject *states = Py_BuildValue("(" HOT_SERVE_STATES(HOT_S) ")", HOT_SERVE_STATES(HOT_STATE_NAME) NULL);
    PyObject *formats = Py_BuildValue("{" HOT_FORMATS(HOT_SI) "}", HOT_FORMATS(HOT_FORMAT_ITEM) NULL);
    if (!states || !formats || PyModule_AddObject(m, "SERVE_STATES", states) < 0) {
        Py_XDECREF(states);
        Py_XDECREF(formats);
        return -1;
    }
    if (PyModule_AddObject(m, "FORMATS", formats) < 0) {
        Py_DECREF(formats);
        return -1;
    }
    PyObject *misses = Py_BuildValue("(" HOT_MISSES(HOT_S) ")", HOT_MISSES(HOT_STATE_NAME) NULL);
    if (!misses || PyModule_AddObject(m, "MISSES", misses) < 0) {
        Py_XDECREF(misses);
        return -1;
    }
    return 0;
}

/* The kinds of template (hot.h: HOT_KINDS, one line each), their types added to the module. */
#define HOT_KIND_OPS(k) &hot_##k##_ops,
static const struct hot_ops *const kinds[] = {HOT_KINDS(HOT_KIND_OPS)};

PyMODINIT_FUNC PyInit__hot(void)
{
    PyMethodDef *const parts[] = {hot_select_methods, hot_templates_methods, hot_answer_methods, hot_lane_methods,
                                  hot_serve_methods, hot_grpc_methods, hot_fill_methods, hot_v2json_methods, hot_blocks_methods, hot_f32text_methods};
    hot_lane_ready();
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (PyModule_AddFunctions(m, parts[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    if (PyModule_AddIntConstant(m, "GROWN_ROWS", GROWN_ROWS) < 0 || add_contracts(m) < 0 ||
        hot_templates_ready(m, kinds, sizeof kinds / sizeof *kinds) < 0 || hot_named_ready(m) < 0 ||
        hot_serve_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
