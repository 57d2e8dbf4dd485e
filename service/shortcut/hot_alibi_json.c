/* service/shortcut/hot_alibi_json.c -- JSON answers of an AlibiTemplate: the full path's bytes,
 * every cell formatted here.
 *
 * The JSON answer of a block is the learnt parts (templates.py cuts them from the full path's own
 * JSON of the learnt request) around the block's text, [[[c, c, ...], ...], ...] over [head][query]
 * [key] (or, flat: [c, c, ...], the same cells in the same order: a v2 JSON output's row-major
 * data, hot_v2json.c). The cells are the binary answer's (hot_blocks.c hot_alibi_block: float32
 * computed with alibi_cell.h, float16/bfloat16 by the engine's own block kernel, its rounding and
 * its overflow), and each cell's text is the one the full path writes for its value (engine/encode.py
 * json_text: orjson, float16 and bfloat16 as their float32 values), which hot_f32text.c writes. So
 * any block, at any distance below the position limit, inside the engine's stored table or past it,
 * is answered without Python and without texts kept between requests (measured: formatting a
 * block's few hundred cells costs less than the HTTP around it, and a load of random distances
 * touches far more texts than any budget holds). A block with a cell that overflows the dtype (a
 * float16 block far enough out) is declined: the full path answers it, with its 422.
 */
#include "hot.h"

#include <stdlib.h>

typedef struct AlibiJson {
    PyObject *parts; /* (before, after) the block's text in the full path's JSON answer */
    int flat;        /* the block as one flat list [c, c, ...] (a v2 JSON output's data), not nested */
    int bf16;        /* 2-byte cells are bfloat16 (else float16) */
} AlibiJson;

void hot_alibi_json_free(AlibiTemplate *t)
{
    AlibiJson *j = t->json;
    if (!j) return;
    Py_XDECREF(j->parts);
    PyMem_Free(j);
    t->json = NULL;
}

/* A float16's value as a float32 (exact). */
static float f16_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0x1f) bits = sign | 0x7f800000u | m << 13;
    else if (e) bits = sign | (e + 112) << 23 | m << 13;
    else {   /* zero or subnormal: m * 2^-24, exact in float32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Cell i of a block (t's cells of itemsize bytes) as the float32 the JSON writer writes. */
static inline float cell_value(const AlibiTemplate *t, const AlibiJson *j, const char *cells, Py_ssize_t i)
{
    float f;
    if (t->itemsize == 4) {
        memcpy(&f, cells + 4 * i, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, cells + 2 * i, sizeof h);
    if (!j->bf16) return f16_value(h);
    uint32_t bits = (uint32_t)h << 16;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* declared, and described, in hot.h */
PyObject *hot_alibi_json(AlibiTemplate *t, const Span *sq, const Span *sk, const Http *http, int flat)
{
    AlibiJson *j = t->json;
    if (!j || !j->parts || j->flat != flat) Py_RETURN_NONE;   /* JSON not checked at learn time: the full path's */
    Sel q = {.heap = NULL}, k = {.heap = NULL};
    PyObject *out = NULL, *head = NULL;
    char *cells = NULL, *text = NULL;
    /* the full path's limits are those of the binary answer (its bytes, per item of the dtype) */
    if (hot_block_start((PyObject *)t, NULL, sq, sk, t->max_n, t->nheads, (t->max_bytes - 4 * t->nheads) / t->itemsize,
                        &q, &k, &head, &out) <= 0)
        goto done;
    Py_ssize_t nq = q.n, nk = k.n, H = t->nheads, n = H * nq * nk;
    if (n > HOT_JSON_CELLS) {   /* too long a text for the loop: the full path's (in a thread) */
        out = Py_NewRef(Py_None);
        goto done;
    }
    /* the text: every cell's and a ',' or ']' after it, a '[' before each list (H * (nq + 1) + 1) */
    if (!(cells = PyMem_Malloc((size_t)(n * t->itemsize + 8))) ||
        !(text = PyMem_Malloc((size_t)(n * (HOT_F32_TEXT + 1) + 2 * H * (nq + 1) + 4)))) {
        PyErr_NoMemory();
        goto done;
    }
    int rc = hot_alibi_block(t, &q, &k, cells);
    if (rc) {   /* 1: a cell overflows the dtype (the full path's 422) */
        out = rc < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
        goto done;
    }
    char *w = text;
    *w++ = '[';
    if (flat) {
        for (Py_ssize_t i = 0; i < n; i++) {
            w += hot_f32_text(cell_value(t, j, cells, i), w);
            *w++ = ',';
        }
        w[n ? -1 : 0] = ']';   /* an empty block: "[]" */
        w += n ? 0 : 1;
    } else {
        for (Py_ssize_t h = 0, i = 0; h < H; h++) {
            *w++ = '[';
            for (Py_ssize_t a = 0; a < nq; a++) {
                *w++ = '[';
                for (Py_ssize_t b = 0; b < nk; b++, i++) {
                    w += hot_f32_text(cell_value(t, j, cells, i), w);
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
        w[H > 0 ? -1 : 0] = ']';
        w += H > 0 ? 0 : 1;
    }
    Out o;
    if (hot_bytes_of(http, PyTuple_GET_ITEM(j->parts, 0), w - text, PyTuple_GET_ITEM(j->parts, 1), 0, &o) < 0) goto done;
    memcpy(o.fill, text, (size_t)(w - text));
    out = hot_finish(&o);
done:
    PyMem_Free(text);
    PyMem_Free(cells);
    Py_XDECREF(head);
    hot_sel_free(&q);
    hot_sel_free(&k);
    return out;
}

/* ---- AlibiTemplate's JSON methods --------------------------------------------------------- */

PyDoc_STRVAR(enable_json_doc, "enable_json(parts, flat=False)\n--\n\n"
             "Answer JSON too: parts, (before, after) the block's text in the full path's JSON answer; flat:\n"
             "the block as one flat list (a v2 JSON output's data). parts None: no JSON answers.");

static PyObject *enable_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    AlibiTemplate *t = (AlibiTemplate *)self;
    PyObject *parts;
    int flat;
    if (hot_json_parts(args, nargs, &parts, &flat) < 0) return NULL;
    if (!parts) {   /* no JSON answers (again) */
        hot_alibi_json_free(t);
        Py_RETURN_NONE;
    }
    if (!t->heads) {
        PyErr_SetString(PyExc_ValueError, "enable_json: an initialised template");
        return NULL;
    }
    int bf16 = 0;
    if (t->kernel_dt >= 0) {   /* which 2-byte type: the engine's own code of "bfloat16" */
        PyObject *name = PyUnicode_FromString("bfloat16");
        int code = name ? hot_cfg.kernels->dtype_code(name) : -1;
        Py_XDECREF(name);
        if (code < 0) return NULL;
        bf16 = code == t->kernel_dt;
    }
    hot_alibi_json_free(t);
    AlibiJson *j = PyMem_Calloc(1, sizeof *j);
    if (!j) return PyErr_NoMemory();
    j->parts = Py_NewRef(parts);
    j->flat = flat;
    j->bf16 = bf16;
    t->json = j;
    Py_RETURN_NONE;
}

/* AlibiTemplate's own methods (those of every template, hot_TemplateType's, are inherited) */
PyMethodDef hot_alibi_methods[] = {
    {"enable_json", (PyCFunction)(void (*)(void))enable_json, METH_FASTCALL, enable_json_doc},
    {NULL, NULL, 0, NULL},
};
