/* service/shortcut/hot_f32text.c -- a float32's JSON text, byte for byte the full path's writer's.
 *
 * The full path writes a cell with orjson (engine/core/encode.py json_text: float16 and bfloat16 cells
 * as their float32 values). orjson writes a float32 as its shortest round-trip digits, the one
 * nearest the value among them, in this layout, where k is the decimal exponent of d.ddd x 10^k:
 *
 *   -7 < k < 13: fixed, "0.000012345", "1234.5", integral values with ".0": "123456790.0"
 *   else:        "1.2345e+13", "1e-7" ('+' on a positive exponent)
 *   -0.0 as "-0.0"; inf and nan as "null".
 *
 * The digits come from zmij's float32 conversion (vendored in vendor/zmij/, see its README): a
 * Schubfach-style one-multiply step giving the shortest round-trip digits (tests/bench/
 * bench_f32_text.py times a text against orjson's; docs/benchmarks.md has the figures).
 * tests/tools/f32_text_exhaustive.py compares all 2^32 bit patterns with orjson; the suite compares
 * millions of random ones and the edge cases (tests/service/shortcut/test_f32_text.py).
 */
#include "hot.h"

/* zmij's conversion, compiled here (not listed in setup.py on its own) so that its static
 * to_decimal_float, the digits and exponent, is called directly rather than through its text
 * (laid out as C++'s to_chars, not orjson). Its double path and writers go unused here; it spells
 * GCC's inline assembly "asm", which -std=c11 knows only as __asm__. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#define asm __asm__
#endif
#include "zmij/zmij.c"
#if defined(__GNUC__)
#undef asm
#pragma GCC diagnostic pop
#endif

/* The digits of a finite nonzero float32 of exponent field ex and mantissa field mant: m * 10^e,
 * m < 10^9, the shortest round-trip digits (Ryu's f2d's, for every float32) followed by zeros
 * (hot_f32_text counts them in the digits' text). zmij gives the shorter candidate and, where that
 * one is outside the rounding interval, the digit after it (has_last_digit); subnormals take its
 * "regular" path with exponent 1. */
static inline uint32_t f32_digits(uint32_t mant, uint32_t ex, int *e)
{
    to_decimal_result d = ex ? to_decimal_float(mant | float_implicit_bit, ex, mant != 0, &static_data)
                             : to_decimal_float(mant, 1, true, &static_data);
    uint64_t m = 10 * (uint64_t)d.sig + (uint64_t)(d.has_last_digit ? d.last_digit : 0);
    *e = d.exp;
    if (m >= 1000000000) {   /* (a shorter candidate rounded up to 10^8: exact either way) */
        m /= 10;
        *e += 1;
    }
    return (uint32_t)m;
}

/* The number of decimal digits of v < 10^9 (v > 0), without a branch to mispredict. */
static inline int decimal_length9(uint32_t v)
{
    return 1 + (v >= 10) + (v >= 100) + (v >= 1000) + (v >= 10000) + (v >= 100000) + (v >= 1000000) +
           (v >= 10000000) + (v >= 100000000);
}

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

#define ZEROS8 0x3030303030303030ULL /* eight '0's */

/* The first nd digits of m (nf digits: its first, then its other eight as ascii8 gives them, x8)
 * written at d, with a '.' before the digit at index split (split >= nd: none), in word stores only
 * and past the digits up to 9 bytes of scratch: digits gathered in a buffer and copied out stalled
 * every text on a store-to-load forward, and a digit pair loop branching on the '.' mispredicted,
 * together most of a text's time. */
static inline void put_digits(char *d, uint32_t first, uint64_t x8, int nf, int nd, int split)
{
    if (nf == 9) {   /* the first digit alone, then eight */
        *d++ = (char)('0' + first);
        nf = 8;
        nd--;
        if (--split == 0) {
            *d++ = '.';
            split = 8;
        }
    }
    uint64_t x = x8 >> (8 * (8 - nf));   /* (little-endian view) the digits from the lowest byte */
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
    uint32_t bits = float_to_bits(f), mant = bits & 0x7fffffu, ex = (bits >> 23) & 0xffu;
    char *o = w;
    if (ex == 0xffu) {
        memcpy(w, "null", 4);
        return 4;
    }
    if (bits >> 31) *o++ = '-';
    if (ex == 0 && mant == 0) {
        memcpy(o, "0.0", 3);
        return (int)(o - w) + 3;
    }
    int e;
    uint32_t m = f32_digits(mant, ex, &e), first = m / 100000000;
    uint64_t x8 = ascii8(m - first * 100000000), z = x8 ^ ZEROS8;   /* z: each of the eight digits' value */
    int nf = decimal_length9(m);
    int nd = nf - (z ? clz(z) >> 3 : 8);   /* less the trailing zeros (the last digit: z's highest byte) */
    int k = e + nf - 1;                    /* d.ddd x 10^k */
    if (k >= 0 && k < 13) {   /* integral part, then the fraction or ".0" */
        int ni = k + 1;
        if (nd <= ni) {
            put_digits(o, first, x8, nf, nd, nd);
            store8(o + nd, ZEROS8);   /* the integral part's zeros (at most 12) */
            if (ni - nd > 8) store8(o + nd + 8, ZEROS8);
            memcpy(o + ni, ".0", 2);
            o += ni + 2;
        } else {
            put_digits(o, first, x8, nf, nd, ni);
            o += nd + 1;
        }
    } else if (k < 0 && k > -7) {
        memcpy(o, "0.", 2);
        store8(o + 2, ZEROS8);   /* the zeros after the point (at most 5) */
        o += 1 - k;
        put_digits(o, first, x8, nf, nd, nd);
        o += nd;
    } else {
        put_digits(o, first, x8, nf, nd, 1);
        o += nd + (nd > 1);
        *o++ = 'e';
        *o++ = k > 0 ? '+' : '-';
        int ae = k < 0 ? -k : k;
        if (ae >= 10) *o++ = (char)('0' + ae / 10);
        *o++ = (char)('0' + ae % 10);
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
