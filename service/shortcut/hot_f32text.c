/* service/shortcut/hot_f32text.c -- a float32's JSON text, byte for byte the full path's writer's.
 *
 * The full path writes a cell with orjson (engine/encode.py json_text: float16 and bfloat16 cells
 * as their float32 values). orjson writes a float32 as its shortest round-trip digits (Ryu's f2s,
 * vendored in vendor/ryu/, see its README) in this layout, where k is the decimal exponent of
 * d.ddd x 10^k:
 *
 *   -7 < k < 13: fixed, "0.000012345", "1234.5", integral values with ".0": "123456790.0"
 *   else:        "1.2345e+13", "1e-7" ('+' on a positive exponent)
 *   -0.0 as "-0.0"; inf and nan as "null".
 *
 * tests/tools/f32_text_exhaustive.py compares all 2^32 bit patterns with orjson; the suite compares
 * millions of random ones and the edge cases (tests/service/shortcut/test_f32_text.py).
 */
#include "hot.h"

/* Ryu's f2s, compiled here (not listed in setup.py on its own) so that its f2d, the shortest
 * digits and exponent, is called directly rather than through its text */
#include "ryu/f2s.c"

/* The eight decimal digits of v < 10^8, leading zeros included, as ASCII in one word whose first
 * byte in memory is the most significant digit: each half of four digits split into two pairs, each
 * pair into two digits, every lane at once (multiply-shift quotients exact over these ranges). */
static inline uint64_t ascii8(uint32_t v)   /* (first byte: the lowest, as a little-endian store puts it) */
{
    uint64_t x = (uint64_t)(v / 10000) | ((uint64_t)(v % 10000) << 32);
    uint64_t q = ((x * 5243) >> 19) & 0x0000007F0000007FULL;   /* n / 100, n < 10^4 */
    x = q | ((x - 100 * q) << 16);
    q = ((x * 103) >> 10) & 0x000F000F000F000FULL;   /* n / 10, n < 100 */
    return (q | ((x - 10 * q) << 8)) | 0x3030303030303030ULL;
}

static inline void store8(char *p, uint64_t x)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    memcpy(p, &x, 8);
}

/* The nd digits of m (nd its length) written at d, with a '.' before the digit at index split
 * (split >= nd: none), in word stores only and past the digits up to 9 bytes of scratch: digits
 * gathered in a buffer and copied out stalled every text on a store-to-load forward, and a digit
 * pair loop branching on the '.' mispredicted, together most of a text's time. */
static inline void put_digits(char *d, uint32_t m, int nd, int split)
{
    if (nd == 9) {   /* the first digit alone, then eight */
        *d++ = (char)('0' + m / 100000000);
        m %= 100000000;
        nd = 8;
        if (--split == 0) {
            *d++ = '.';
            split = 8;
        }
    }
    uint64_t x = ascii8(m) >> (8 * (8 - nd));   /* (little-endian view) the digits from the lowest byte */
    if (split >= nd) {
        store8(d, x);
        return;
    }
    uint64_t low = split ? x & ((UINT64_C(1) << (8 * split)) - 1) : 0;
    store8(d, low | ((uint64_t)'.' << (8 * split)));
    store8(d + split + 1, x >> (8 * split));
}

/* declared, and described, in hot.h */
int hot_f32_text(float f, char *w)
{
    uint32_t bits = float_to_bits(f), mant = bits & ((1u << FLOAT_MANTISSA_BITS) - 1),
             ex = (bits >> FLOAT_MANTISSA_BITS) & ((1u << FLOAT_EXPONENT_BITS) - 1);
    char *o = w;
    if (ex == (1u << FLOAT_EXPONENT_BITS) - 1) {
        memcpy(w, "null", 4);
        return 4;
    }
    if (bits >> 31) *o++ = '-';
    if (ex == 0 && mant == 0) {
        memcpy(o, "0.0", 3);
        return (int)(o - w) + 3;
    }
    floating_decimal_32 v = f2d(mant, ex);   /* v.mantissa * 10^v.exponent, no trailing zero */
    uint32_t m = v.mantissa;
    int nd = (int)decimalLength9(m);
    int k = v.exponent + nd - 1;   /* d.ddd x 10^k */
    if (k >= 0 && k < 13) {   /* integral part, then the fraction or ".0" */
        int ni = k + 1;
        if (nd <= ni) {
            put_digits(o, m, nd, nd);
            memset(o + nd, '0', (size_t)(ni - nd));
            memcpy(o + ni, ".0", 2);
            o += ni + 2;
        } else {
            put_digits(o, m, nd, ni);
            o += nd + 1;
        }
    } else if (k < 0 && k > -7) {
        memcpy(o, "0.", 2);
        memset(o + 2, '0', (size_t)(-k - 1));
        o += 1 - k;
        put_digits(o, m, nd, nd);
        o += nd;
    } else {
        put_digits(o, m, nd, 1);
        o += nd + (nd > 1);
        *o++ = 'e';
        *o++ = k > 0 ? '+' : '-';
        int e = k < 0 ? -k : k;
        if (e >= 10) *o++ = (char)('0' + e / 10);
        *o++ = (char)('0' + e % 10);
    }
    return (int)(o - w);
}

PyDoc_STRVAR(f32_json_doc, "f32_json(buffer) -> bytes\n--\n\n"
             "The texts of a float32 buffer's values, as the full path's JSON writes them, joined by ','\n"
             "(orjson.dumps of the array less its brackets; for the tests).");

static PyObject *f32_json(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(float);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (HOT_F32_TEXT + 1));
    if (out) {
        char *w = PyBytes_AS_STRING(out), *start = w;
        for (Py_ssize_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, (const char *)view.buf + i * (Py_ssize_t)sizeof f, sizeof f);
            w += hot_f32_text(f, w);
            *w++ = ',';
        }
        _PyBytes_Resize(&out, n ? w - start - 1 : 0);
    }
    PyBuffer_Release(&view);
    return out;
}

PyMethodDef hot_f32text_methods[] = {
    {"f32_json", f32_json, METH_O, f32_json_doc},
    {NULL, NULL, 0, NULL},
};
