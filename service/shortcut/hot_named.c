/* service/shortcut/hot_named.c -- the contracts across the boundary, by name: the module's calls
 * take at most three arguments by position and the rest by keyword (hot_args), and what Python
 * hands the lane for the v2 routes is small types with named fields, checked once when made, never
 * tuples told apart by their length:
 *
 *   V2Route(*, metrics, entries, length_name, refused, json_name, json_entries)
 *     a request target of v2 REST infers (service/v2/hot.py): metrics, the offset of its answers'
 *     counts in the worker's metrics (service/metrics/layout.py); entries, {inference header
 *     bytes: RowsEntry | BlockEntry} of binary infers; length_name, the header that says the
 *     inference header's length (lower-case bytes); refused, header names (lower-case bytes)
 *     that keep a request off this route; json_name, the data field's name as JSON text, and
 *     json_entries, {key: JsonEntry}, the JSON-tensor infers (service/v2/hot_json.py).
 *   RowsEntry(*, template, itemsize, nbytes, parts, post)
 *     rows of a rows template (its ops' raw_rows) for nbytes of raw positions of itemsize (4, 8);
 *     parts, the answer's bytes around each array's rows; post, its HTTP head after the length.
 *   BlockEntry(*, template, itemsizes, nbytes, key_first, parts, post)
 *     a block template's block (its ops' block_into) for two raw inputs, query then key unless
 *     key_first: itemsizes and nbytes, a pair each; parts, the bytes before and after the block.
 *   JsonEntry(*, template, counts, swap, post)
 *     a template of flat JSON (its ops' v2_json) for the body's lists, counts the positions each
 *     must hold; swap: the body's first list is the key's (hot_v2json.c).
 *   GrpcEntry(*, fill, nbytes, size, metrics, stream_metrics, entry)
 *     a learnt gRPC ModelInferRequest key's (hot_grpc.c): fill, the RowsEntry or BlockEntry C fills
 *     (post b"") or None; nbytes, each trailing raw_input_contents field's length (1 or 2); size,
 *     the answer's bytes; metrics and stream_metrics, the offsets of its unary and stream answers'
 *     counts; entry, the Python entry that answers what C leaves (service/v2/hot.py).
 * Their fields read back as attributes; entries and json_entries are the dicts Python fills.
 */
#include "hot.h"

#include <stddef.h> /* offsetof */
#include <structmember.h>

/* ---- a call's arguments by name ------------------------------------------------------------ */

/* declared, and described, in hot.h */
int hot_args(HotSig *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    if (!sig->n) { /* its names, interned once (with the GIL): a caller's keywords are these objects */
        int n = 0;
        for (; sig->names[n]; n++)
            if (!sig->interned[n] && !(sig->interned[n] = PyUnicode_InternFromString(sig->names[n]))) return -1;
        sig->n = n;   /* (only once all are: a failed call leaves the next to finish them) */
    }
    if (nargs > sig->npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments, the rest by name (got %zd)", sig->fn,
                     sig->npos, nargs);
        return -1;
    }
    for (int i = 0; i < sig->n; i++) out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < sig->n && sig->interned[i] != name) i++;
        if (i == sig->n) /* not the interned object: compared by value */
            for (i = 0; i < sig->n && PyUnicode_Compare(sig->interned[i], name) != 0; i++) {
            }
        if (PyErr_Occurred()) return -1;
        if (i == sig->n || out[i]) {
            PyErr_Format(PyExc_TypeError, "%s(): %s keyword argument %R", sig->fn, i == sig->n ? "unexpected" : "repeated",
                         name);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < sig->nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s(): missing argument %s", sig->fn, sig->names[i]);
            return -1;
        }
    return 0;
}

/* ---- the v2 routes and their entries ------------------------------------------------------- */

/* o as a tuple of n bytes (n < 0: any number), else -1 with a TypeError naming what. */
static int bytes_tuple(PyObject *o, Py_ssize_t n, const char *what)
{
    int ok = PyTuple_Check(o) && (n < 0 || PyTuple_GET_SIZE(o) == n);
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(o); i++) ok = PyBytes_Check(PyTuple_GET_ITEM(o, i));
    if (ok) return 0;
    if (n < 0) PyErr_Format(PyExc_TypeError, "%s: want a tuple of bytes", what);
    else PyErr_Format(PyExc_TypeError, "%s: want a tuple of %zd bytes", what, n);
    return -1;
}

/* A pair of ints (a tuple) into v[0], v[1], each in [lo, hi): 0, or -1 set. */
static int int_pair(PyObject *o, Py_ssize_t *v, Py_ssize_t lo, Py_ssize_t hi, const char *what)
{
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: want a pair of ints", what);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        v[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(o, i));
        if (v[i] == -1 && PyErr_Occurred()) return -1;
        if (v[i] < lo || v[i] >= hi) {
            PyErr_Format(PyExc_ValueError, "%s: want ints in %zd .. %zd", what, lo, hi - 1);
            return -1;
        }
    }
    return 0;
}

/* A record's fields are its type's members (T_OBJECT_EX, T_PYSSIZET, T_BOOL; read back as
 * attributes), every one given by keyword when it is made, then checked by the type's own check
 * (which fills what C reads of them); made once. */
static int record_init(PyObject *self, PyObject *args, PyObject *kw, int (*check)(PyObject *))
{
    PyTypeObject *type = Py_TYPE(self);
    if (hot_keywords_only(args, type->tp_name) < 0) return -1;
    for (PyMemberDef *m = type->tp_members; m->name; m++)
        if (m->type == T_OBJECT_EX && *(PyObject **)((char *)self + m->offset)) {
            PyErr_Format(PyExc_RuntimeError, "%s: initialised once", type->tp_name);
            return -1;
        }
    Py_ssize_t given = 0;
    for (PyMemberDef *m = type->tp_members; m->name; m++) {
        char *at = (char *)self + m->offset;
        PyObject *v = kw ? PyDict_GetItemString(kw, m->name) : NULL;
        if (!v) {
            PyErr_Format(PyExc_TypeError, "%s(): missing argument %s", type->tp_name, m->name);
            return -1;
        }
        given++;
        if (m->type == T_OBJECT_EX) {
            Py_INCREF(v);
            *(PyObject **)at = v;
        } else if (m->type == T_PYSSIZET) {
            if ((*(Py_ssize_t *)at = PyLong_AsSsize_t(v)) == -1 && PyErr_Occurred()) return -1;
        } else {
            int b = PyObject_IsTrue(v);
            if (b < 0) return -1;
            *(char *)at = (char)b;
        }
    }
    if (given != PyDict_GET_SIZE(kw)) {
        PyErr_Format(PyExc_TypeError, "%s(): an unexpected keyword argument (want %zd)", type->tp_name, given);
        return -1;
    }
    return check(self);
}

static void record_dealloc(PyObject *self)
{
    for (PyMemberDef *m = Py_TYPE(self)->tp_members; m->name; m++)
        if (m->type == T_OBJECT_EX) Py_CLEAR(*(PyObject **)((char *)self + m->offset));
    Py_TYPE(self)->tp_free(self);
}

#define MEMBER(T, f, kind) {#f, kind, offsetof(T, f), READONLY, NULL}
#define RECORD_TYPE(T, name, check, doc)                                                                  \
    static int T##_init(PyObject *o, PyObject *a, PyObject *k) { return record_init(o, a, k, check); }  \
    PyTypeObject hot_##name##Type = {                                                                      \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot." #name,                            \
        .tp_basicsize = sizeof(T), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_doc = doc,                          \
        .tp_new = PyType_GenericNew, .tp_init = T##_init, .tp_dealloc = record_dealloc,                   \
        .tp_members = T##_members,                                                                         \
    };

static int route_check(PyObject *o)
{
    HotV2Route *r = (HotV2Route *)o;
    if (PyDict_Check(r->entries) && PyBytes_Check(r->length_name) && PyBytes_Check(r->json_name) &&
        PyDict_Check(r->json_entries))
        return bytes_tuple(r->refused, -1, "V2Route refused");
    PyErr_SetString(PyExc_TypeError, "V2Route: entries and json_entries dicts, length_name and json_name bytes");
    return -1;
}

static PyMemberDef HotV2Route_members[] = {
    MEMBER(HotV2Route, metrics, T_PYSSIZET), MEMBER(HotV2Route, entries, T_OBJECT_EX),
    MEMBER(HotV2Route, length_name, T_OBJECT_EX), MEMBER(HotV2Route, refused, T_OBJECT_EX),
    MEMBER(HotV2Route, json_name, T_OBJECT_EX), MEMBER(HotV2Route, json_entries, T_OBJECT_EX), {NULL, 0, 0, 0, NULL},
};
RECORD_TYPE(HotV2Route, V2Route, route_check, "The lane's route of a v2 REST infer target (hot_named.c says its fields).")

static int rows_entry_check(PyObject *o)
{
    HotRowsEntry *e = (HotRowsEntry *)o;
    const struct hot_ops *ops = hot_ops_of(e->template);
    if (!ops || !ops->raw_rows || !PyBytes_Check(e->post)) {
        PyErr_SetString(PyExc_TypeError, "RowsEntry: template is a template of rows, post bytes");
        return -1;
    }
    if ((e->itemsize != 4 && e->itemsize != 8) || e->nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "RowsEntry: itemsize 4 or 8, nbytes >= 0");
        return -1;
    }
    return bytes_tuple(e->parts, ops->arrays((HotTemplate *)e->template) + 1, "RowsEntry parts (one more than the arrays)");
}

static PyMemberDef HotRowsEntry_members[] = {
    MEMBER(HotRowsEntry, template, T_OBJECT_EX), MEMBER(HotRowsEntry, itemsize, T_PYSSIZET),
    MEMBER(HotRowsEntry, nbytes, T_PYSSIZET), MEMBER(HotRowsEntry, parts, T_OBJECT_EX),
    MEMBER(HotRowsEntry, post, T_OBJECT_EX), {NULL, 0, 0, 0, NULL},
};
RECORD_TYPE(HotRowsEntry, RowsEntry, rows_entry_check, "A v2 binary infer's rows (hot_named.c says its fields).")

static int block_entry_check(PyObject *o)
{
    HotBlockEntry *e = (HotBlockEntry *)o;
    const struct hot_ops *ops = hot_ops_of(e->template);
    if (int_pair(e->itemsizes, e->itemsize, 4, 9, "BlockEntry itemsizes") < 0 ||
        int_pair(e->nbytes_of, e->nbytes, 0, PY_SSIZE_T_MAX, "BlockEntry nbytes") < 0 ||
        bytes_tuple(e->parts, 2, "BlockEntry parts (before, after)") < 0)
        return -1;
    if (!ops || !ops->block_into || !PyBytes_Check(e->post) || (e->itemsize[0] != 4 && e->itemsize[0] != 8) ||
        (e->itemsize[1] != 4 && e->itemsize[1] != 8)) {
        PyErr_SetString(PyExc_TypeError, "BlockEntry: template is a template of blocks, itemsizes 4 or 8, post bytes");
        return -1;
    }
    return 0;
}

static PyMemberDef HotBlockEntry_members[] = {
    MEMBER(HotBlockEntry, template, T_OBJECT_EX), MEMBER(HotBlockEntry, itemsizes, T_OBJECT_EX),
    {"nbytes", T_OBJECT_EX, offsetof(HotBlockEntry, nbytes_of), READONLY, NULL},
    MEMBER(HotBlockEntry, key_first, T_BOOL), MEMBER(HotBlockEntry, parts, T_OBJECT_EX),
    MEMBER(HotBlockEntry, post, T_OBJECT_EX), {NULL, 0, 0, 0, NULL},
};
RECORD_TYPE(HotBlockEntry, BlockEntry, block_entry_check, "A v2 binary infer's block (hot_named.c says its fields).")

/* The n ints of tuple t into v, each at least lo: 0, or -1 set (a ValueError naming what). */
static int ints_of(PyObject *t, int n, Py_ssize_t *v, Py_ssize_t lo, const char *what)
{
    for (int i = 0; i < n; i++) {
        v[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, i));
        if (v[i] == -1 && PyErr_Occurred()) return -1;
        if (v[i] < lo) {
            PyErr_Format(PyExc_ValueError, "%s >= %zd", what, lo);
            return -1;
        }
    }
    return 0;
}

static int json_entry_check(PyObject *o)
{
    HotJsonEntry *e = (HotJsonEntry *)o;
    const struct hot_ops *ops = hot_ops_of(e->template);
    e->ncounts = PyTuple_Check(e->counts) ? (int)PyTuple_GET_SIZE(e->counts) : 0;
    if (!ops || !ops->v2_json || ops->dims != e->ncounts || !PyBytes_Check(e->post)) {
        PyErr_SetString(PyExc_TypeError, "JsonEntry: a RowsTemplate of one list, a T5Template or AlibiTemplate of two; "
                                         "counts a tuple, post bytes");
        return -1;
    }
    return ints_of(e->counts, e->ncounts, e->count, 1, "JsonEntry: counts");
}

static PyMemberDef HotJsonEntry_members[] = {
    MEMBER(HotJsonEntry, template, T_OBJECT_EX), MEMBER(HotJsonEntry, counts, T_OBJECT_EX),
    MEMBER(HotJsonEntry, swap, T_BOOL), MEMBER(HotJsonEntry, post, T_OBJECT_EX), {NULL, 0, 0, 0, NULL},
};
RECORD_TYPE(HotJsonEntry, JsonEntry, json_entry_check, "A v2 JSON-tensor infer's entry (hot_named.c says its fields).")

static int grpc_entry_check(PyObject *o)
{
    HotGrpcEntry *e = (HotGrpcEntry *)o;
    PyTypeObject *fill = Py_TYPE(e->fill);
    e->nraw = PyTuple_Check(e->nbytes_of) ? (int)PyTuple_GET_SIZE(e->nbytes_of) : 0;
    if ((e->fill != Py_None && fill != &hot_RowsEntryType && fill != &hot_BlockEntryType) || e->nraw < 1 ||
        e->nraw > MAX_FIELDS || e->size < 0) {
        PyErr_SetString(PyExc_TypeError, "GrpcEntry: fill a RowsEntry, a BlockEntry or None, nbytes a tuple of 1 or 2 "
                                         "ints, size >= 0");
        return -1;
    }
    return ints_of(e->nbytes_of, e->nraw, e->nbytes, 0, "GrpcEntry: nbytes");
}

static PyMemberDef HotGrpcEntry_members[] = {
    MEMBER(HotGrpcEntry, fill, T_OBJECT_EX), {"nbytes", T_OBJECT_EX, offsetof(HotGrpcEntry, nbytes_of), READONLY, NULL},
    MEMBER(HotGrpcEntry, size, T_PYSSIZET), MEMBER(HotGrpcEntry, metrics, T_PYSSIZET),
    MEMBER(HotGrpcEntry, stream_metrics, T_PYSSIZET), MEMBER(HotGrpcEntry, entry, T_OBJECT_EX), {NULL, 0, 0, 0, NULL},
};
RECORD_TYPE(HotGrpcEntry, GrpcEntry, grpc_entry_check, "A learnt gRPC ModelInferRequest key's entry (hot_named.c says its fields).")

/* declared, and described, in hot.h */
int hot_named_ready(PyObject *module)
{
    PyTypeObject *types[] = {&hot_V2RouteType, &hot_RowsEntryType, &hot_BlockEntryType, &hot_JsonEntryType,
                             &hot_GrpcEntryType};
    const char *names[] = {"V2Route", "RowsEntry", "BlockEntry", "JsonEntry", "GrpcEntry"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        if (PyType_Ready(types[i]) < 0) return -1;
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            return -1;
        }
    }
    return 0;
}
