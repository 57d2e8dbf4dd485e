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
        while (sig->names[sig->n]) {
            if (!(sig->interned[sig->n] = PyUnicode_InternFromString(sig->names[sig->n]))) return -1;
            sig->n++;
        }
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

static int once(PyObject *made, const char *type)
{
    if (!made) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: initialised once", type);
    return -1;
}

#define HOLD(field, value) (Py_INCREF(value), (field) = (value))

static int V2Route_init(HotV2Route *r, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"metrics", "entries", "length_name", "refused", "json_name", "json_entries", NULL};
    PyObject *entries, *lname, *refused, *jname, *jentries;
    if (hot_keywords_only(args, "V2Route") < 0 || once(r->entries, "V2Route") < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "nO!O!OO!O!:V2Route", kwlist, &r->metrics, &PyDict_Type, &entries,
                                     &PyBytes_Type, &lname, &refused, &PyBytes_Type, &jname, &PyDict_Type, &jentries) ||
        bytes_tuple(refused, -1, "V2Route refused") < 0)
        return -1;
    HOLD(r->entries, entries);
    HOLD(r->length_name, lname);
    HOLD(r->refused, refused);
    HOLD(r->json_name, jname);
    HOLD(r->json_entries, jentries);
    return 0;
}

static void V2Route_dealloc(HotV2Route *r)
{
    Py_XDECREF(r->entries);
    Py_XDECREF(r->length_name);
    Py_XDECREF(r->refused);
    Py_XDECREF(r->json_name);
    Py_XDECREF(r->json_entries);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMemberDef v2route_members[] = {
    {"metrics", T_PYSSIZET, offsetof(HotV2Route, metrics), READONLY, NULL},
    {"entries", T_OBJECT_EX, offsetof(HotV2Route, entries), READONLY, NULL},
    {"length_name", T_OBJECT_EX, offsetof(HotV2Route, length_name), READONLY, NULL},
    {"refused", T_OBJECT_EX, offsetof(HotV2Route, refused), READONLY, NULL},
    {"json_name", T_OBJECT_EX, offsetof(HotV2Route, json_name), READONLY, NULL},
    {"json_entries", T_OBJECT_EX, offsetof(HotV2Route, json_entries), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject hot_V2RouteType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.V2Route",
    .tp_basicsize = sizeof(HotV2Route),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The lane's route of a v2 REST infer target (hot_named.c says its fields).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)V2Route_init,
    .tp_dealloc = (destructor)V2Route_dealloc,
    .tp_members = v2route_members,
};

static int RowsEntry_init(HotRowsEntry *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"template", "itemsize", "nbytes", "parts", "post", NULL};
    PyObject *t, *parts, *post;
    if (hot_keywords_only(args, "RowsEntry") < 0 || once(e->template, "RowsEntry") < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OnnOO!:RowsEntry", kwlist, &t, &e->itemsize, &e->nbytes, &parts,
                                     &PyBytes_Type, &post))
        return -1;
    const struct hot_ops *ops = hot_ops_of(t);
    if (!ops || !ops->raw_rows) {
        PyErr_SetString(PyExc_TypeError, "RowsEntry: template is a template of rows");
        return -1;
    }
    if (bytes_tuple(parts, ops->arrays((HotTemplate *)t) + 1, "RowsEntry parts (one more than the arrays)") < 0)
        return -1;
    if ((e->itemsize != 4 && e->itemsize != 8) || e->nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "RowsEntry: itemsize 4 or 8, nbytes >= 0");
        return -1;
    }
    HOLD(e->template, t);
    HOLD(e->parts, parts);
    HOLD(e->post, post);
    return 0;
}

static void RowsEntry_dealloc(HotRowsEntry *e)
{
    Py_XDECREF(e->template);
    Py_XDECREF(e->parts);
    Py_XDECREF(e->post);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMemberDef rowsentry_members[] = {
    {"template", T_OBJECT_EX, offsetof(HotRowsEntry, template), READONLY, NULL},
    {"itemsize", T_PYSSIZET, offsetof(HotRowsEntry, itemsize), READONLY, NULL},
    {"nbytes", T_PYSSIZET, offsetof(HotRowsEntry, nbytes), READONLY, NULL},
    {"parts", T_OBJECT_EX, offsetof(HotRowsEntry, parts), READONLY, NULL},
    {"post", T_OBJECT_EX, offsetof(HotRowsEntry, post), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject hot_RowsEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.RowsEntry",
    .tp_basicsize = sizeof(HotRowsEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A v2 binary infer's rows (hot_named.c says its fields).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowsEntry_init,
    .tp_dealloc = (destructor)RowsEntry_dealloc,
    .tp_members = rowsentry_members,
};

static int BlockEntry_init(HotBlockEntry *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"template", "itemsizes", "nbytes", "key_first", "parts", "post", NULL};
    PyObject *t, *isz, *nb, *parts, *post;
    if (hot_keywords_only(args, "BlockEntry") < 0 || once(e->template, "BlockEntry") < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OOOpOO!:BlockEntry", kwlist, &t, &isz, &nb, &e->key_first, &parts,
                                     &PyBytes_Type, &post) ||
        int_pair(isz, e->itemsize, 4, 9, "BlockEntry itemsizes") < 0 ||
        int_pair(nb, e->nbytes, 0, PY_SSIZE_T_MAX, "BlockEntry nbytes") < 0 ||
        bytes_tuple(parts, 2, "BlockEntry parts (before, after)") < 0)
        return -1;
    const struct hot_ops *ops = hot_ops_of(t);
    if (!ops || !ops->block_into || (e->itemsize[0] != 4 && e->itemsize[0] != 8) ||
        (e->itemsize[1] != 4 && e->itemsize[1] != 8)) {
        PyErr_SetString(PyExc_TypeError, "BlockEntry: template is a template of blocks, itemsizes 4 or 8 each");
        return -1;
    }
    HOLD(e->template, t);
    HOLD(e->parts, parts);
    HOLD(e->post, post);
    return 0;
}

static void BlockEntry_dealloc(HotBlockEntry *e)
{
    Py_XDECREF(e->template);
    Py_XDECREF(e->parts);
    Py_XDECREF(e->post);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMemberDef blockentry_members[] = {
    {"template", T_OBJECT_EX, offsetof(HotBlockEntry, template), READONLY, NULL},
    {"key_first", T_BOOL, offsetof(HotBlockEntry, key_first), READONLY, NULL},
    {"parts", T_OBJECT_EX, offsetof(HotBlockEntry, parts), READONLY, NULL},
    {"post", T_OBJECT_EX, offsetof(HotBlockEntry, post), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *pair_of(const Py_ssize_t *v) { return Py_BuildValue("(nn)", v[0], v[1]); }
static PyObject *block_itemsizes(PyObject *e, void *c) { return (void)c, pair_of(((HotBlockEntry *)e)->itemsize); }
static PyObject *block_nbytes(PyObject *e, void *c) { return (void)c, pair_of(((HotBlockEntry *)e)->nbytes); }

static PyGetSetDef blockentry_getset[] = {
    {"itemsizes", block_itemsizes, NULL, "the two inputs' item sizes", NULL},
    {"nbytes", block_nbytes, NULL, "the two inputs' bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject hot_BlockEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.BlockEntry",
    .tp_basicsize = sizeof(HotBlockEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A v2 binary infer's block (hot_named.c says its fields).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)BlockEntry_init,
    .tp_dealloc = (destructor)BlockEntry_dealloc,
    .tp_members = blockentry_members,
    .tp_getset = blockentry_getset,
};

static int JsonEntry_init(HotJsonEntry *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"template", "counts", "swap", "post", NULL};
    PyObject *t, *counts, *post;
    if (hot_keywords_only(args, "JsonEntry") < 0 || once(e->template, "JsonEntry") < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OO!pO!:JsonEntry", kwlist, &t, &PyTuple_Type, &counts, &e->swap,
                                     &PyBytes_Type, &post))
        return -1;
    const struct hot_ops *ops = hot_ops_of(t);
    e->ncounts = (int)PyTuple_GET_SIZE(counts);
    if (!ops || !ops->v2_json || ops->dims != e->ncounts) {
        PyErr_SetString(PyExc_TypeError, "JsonEntry: a RowsTemplate of one list, a T5Template or AlibiTemplate of two");
        return -1;
    }
    for (int f = 0; f < e->ncounts; f++) {
        e->counts[f] = PyLong_AsSsize_t(PyTuple_GET_ITEM(counts, f));
        if (e->counts[f] == -1 && PyErr_Occurred()) return -1;
        if (e->counts[f] < 1) {
            PyErr_SetString(PyExc_ValueError, "JsonEntry: counts >= 1");
            return -1;
        }
    }
    HOLD(e->template, t);
    HOLD(e->post, post);
    return 0;
}

static void JsonEntry_dealloc(HotJsonEntry *e)
{
    Py_XDECREF(e->template);
    Py_XDECREF(e->post);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *json_counts(PyObject *o, void *c)
{
    (void)c;
    HotJsonEntry *e = (HotJsonEntry *)o;
    return e->ncounts == 1 ? Py_BuildValue("(n)", e->counts[0]) : pair_of(e->counts);
}

static PyMemberDef jsonentry_members[] = {
    {"template", T_OBJECT_EX, offsetof(HotJsonEntry, template), READONLY, NULL},
    {"swap", T_BOOL, offsetof(HotJsonEntry, swap), READONLY, NULL},
    {"post", T_OBJECT_EX, offsetof(HotJsonEntry, post), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef jsonentry_getset[] = {
    {"counts", json_counts, NULL, "the positions each list holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject hot_JsonEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.JsonEntry",
    .tp_basicsize = sizeof(HotJsonEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A v2 JSON-tensor infer's entry (hot_named.c says its fields).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)JsonEntry_init,
    .tp_dealloc = (destructor)JsonEntry_dealloc,
    .tp_members = jsonentry_members,
    .tp_getset = jsonentry_getset,
};

/* declared, and described, in hot.h */
int hot_named_ready(PyObject *module)
{
    PyTypeObject *types[] = {&hot_V2RouteType, &hot_RowsEntryType, &hot_BlockEntryType, &hot_JsonEntryType};
    const char *names[] = {"V2Route", "RowsEntry", "BlockEntry", "JsonEntry"};
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
