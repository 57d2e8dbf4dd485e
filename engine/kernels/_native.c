/* engine/kernels/_native.c -- the "simd" backend of engine.kernels: the module and its dispatch.
 *
 * Same API and, bit for bit, the same results as numpy_impl.py (sincos: within 1 ulp of the
 * output dtype; it uses libm where numpy uses its own loops). CPython C API and the buffer
 * protocol only, so the build needs no numpy headers. Its files share the private header
 * native.h:
 *   _native.c          the module: the dispatch level in use, features(), levels(), _set_level()
 *   native_levels.c    the loops compiled once per dispatch level, the roundings, the levels
 *   native_kernels.c   the kernels: arguments checked as numpy_impl.py checks them, then the work
 *   native_api.h       API, a capsule lending the sincos kernel to service/shortcut/_hot (rows
 *                      past a stored table, computed by this very loop)
 *   native_lookup.c    RowGather and rows_lookup, the resolved lookup of engine/reader/lookup.py (no
 *                      numpy twin: with the numpy backend a handle answers through the pipeline); its
 *                      rows are copied by row_gather.h, the one row gather, which the shortcut builds too
 *
 * Rounding: every float64 -> float32/float16/bfloat16 conversion rounds once, to nearest-even,
 * straight from float64 (engine/core/dtypes.py). float64 -> float16 must NOT go through an ordinary
 * float32 rounding (that rounds twice: 1 + 2^-11 + 2^-30 would come out 1.0), so:
 *   - the portable path rounds in integer arithmetic on the float64 bits (a port of numpy's
 *     npy_doublebits_to_halfbits, NaN payloads included);
 *   - the AVX2+F16C path first rounds float64 to float32 *to odd* (truncate, then OR the sticky
 *     bit into the last place), then lets vcvtps2ph round to nearest-even. Rounding to odd at
 *     precision p' >= p + 2 followed by a round-to-nearest at precision p is exact (Boldo &
 *     Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding
 *     to odd", IEEE TC 2008); float32 has 24 bits, float16 11.
 *   - bfloat16 rounds the 52-bit mantissa to 7 bits in integer space (as f64_to_bf16_bits), and
 *     below 2^-126 to the fixed subnormal quantum 2^-133.
 *
 * Dispatch: on x86-64 the hot loops are compiled three times (native_levels in native_levels.c):
 * for the baseline target, with __attribute__((target("avx2,f16c"))), and with
 * target("avx512f,avx512vl,avx2,f16c"); the best level this CPU supports is picked once at import
 * with __builtin_cpu_supports, so one build runs on any x86-64. Elsewhere (aarch64 and anything
 * else GCC/Clang targets) there is the baseline level only. FEATURES reports what the picked
 * level uses; levels() and _set_level() let the tests run every level this CPU has.
 *
 * Compile with -ffp-contract=off (setup.py does): 0.0 - (s * d) and cos * scale must each be one
 * rounded multiply, never fused.
 */
#include "native.h"
#include "native_api.h"

const Level *native_level = &native_levels[0]; /* at import: the best level this CPU runs */

static PyObject *features_tuple(const Level *lv)
{
    int n = 0;
    while (n < 5 && lv->features[n]) n++;
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *sitem = PyUnicode_FromString(lv->features[i]);
        if (!sitem) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, sitem);
    }
    return t;
}

PyDoc_STRVAR(features_doc, "features() -> tuple\n--\n\nCPU features of the dispatch level in use.");

static PyObject *py_features(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    return features_tuple(native_level);
}

PyDoc_STRVAR(levels_doc, "levels() -> tuple\n--\n\nDispatch levels this CPU can run, best first.");

static PyObject *py_levels(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    PyObject *lst = PyList_New(0);
    if (!lst) return NULL;
    for (int i = 0; i < native_n_levels; i++) {
        if (!native_level_supported(&native_levels[i])) continue;
        PyObject *name = PyUnicode_FromString(native_levels[i].name);
        if (!name || PyList_Append(lst, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(lst);
            return NULL;
        }
        Py_DECREF(name);
    }
    PyObject *t = PyList_AsTuple(lst);
    Py_DECREF(lst);
    return t;
}

PyDoc_STRVAR(set_level_doc, "_set_level(name) -> str\n--\n\n"
             "Testing hook: use dispatch level `name` (see levels()); returns the previous one.");

static PyObject *py_set_level(PyObject *self, PyObject *arg)
{
    (void)self;
    for (int i = 0; i < native_n_levels; i++) {
        if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, native_levels[i].name) == 0) {
            if (!native_level_supported(&native_levels[i])) {
                PyErr_Format(PyExc_RuntimeError, "level %s is not supported by this CPU",
                             native_levels[i].name);
                return NULL;
            }
            const char *prev = native_level->name;
            native_level = &native_levels[i];
            return PyUnicode_FromString(prev);
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown dispatch level %R", arg);
    return NULL;
}

/* ---- the capsule other extensions borrow the row kernel through (native_api.h) ---------- */

static int api_sincos(const double *freqs, Py_ssize_t h, const int64_t *pos, Py_ssize_t n, double scale,
                      char *out_cos, char *out_sin, int dt)
{
    int over = 0;
    native_sincos_run(native_level, freqs, h, pos, n, scale, out_cos, out_sin, dt, &over);
    return over;
}

static int api_itemsize(int dt) { return dt == DT_F32 ? 4 : 2; }

static int api_alibi(const double *slopes, Py_ssize_t H, const int64_t *q, Py_ssize_t nq, const int64_t *k,
                     Py_ssize_t nk, char *out, int dt, int symmetric, int mask)
{
    int over = 0;
    if (native_alibi_run(native_level, slopes, H, q, nq, k, nk, out, dt, symmetric, mask, &over) < 0) return -1;
    return over;
}

static void api_t5(const int32_t *lut, Py_ssize_t R, const int64_t *q, Py_ssize_t nq, const int64_t *k, Py_ssize_t nk,
                   int32_t *out)
{
    native_t5_run(native_level, lut, R, q, nq, k, nk, out);
}

static const NativeApi API = {NATIVE_API_VERSION, api_sincos, native_parse_dtype, api_itemsize, api_alibi, api_t5};

static PyMethodDef methods[] = {
    {"features", py_features, METH_NOARGS, features_doc},
    {"levels", py_levels, METH_NOARGS, levels_doc},
    {"_set_level", py_set_level, METH_O, set_level_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "C SIMD backend of engine.kernels (see engine/kernels/__init__.py and docs/native.md).", -1,
    methods, NULL, NULL, NULL, NULL,
};

#if defined(__clang__)
#define COMPILER_STR "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER_STR "gcc " __VERSION__
#elif defined(_MSC_VER)
#define COMPILER_STR "msvc " Py_STRINGIFY(_MSC_VER)
#else
#define COMPILER_STR "unknown"
#endif

PyMODINIT_FUNC PyInit__native(void)
{
    for (int i = 0; i < native_n_levels; i++)
        if (native_level_supported(&native_levels[i])) {
            native_level = &native_levels[i];
            break;
        }
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, native_kernel_methods) < 0 || native_lookup_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *feats = features_tuple(native_level);
    if (!feats || PyModule_AddObject(m, "FEATURES", feats) < 0) {
        Py_XDECREF(feats);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *api = PyCapsule_New((void *)&API, NATIVE_API_NAME, NULL);
    if (!api || PyModule_AddObject(m, "API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "BACKEND", "simd") < 0 ||
        PyModule_AddStringConstant(m, "COMPILER", COMPILER_STR) < 0 ||
        PyModule_AddStringConstant(m, "LEVEL", native_level->name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
