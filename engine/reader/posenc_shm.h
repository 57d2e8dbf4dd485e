/* posenc_shm.h: read the posenc engine's tables from shared memory, without Python.
 *
 * Follows docs/shm-format.md (format 1): connect to the engine's socket {shm_dir}/{ns}.sock, take
 * the manifest from it, open a table by digest or by the name of a configured table (a sealed
 * memfd passed with SCM_RIGHTS), check its seals and size, map it PROT_READ and close the
 * descriptor, then gather rows of its arrays. C11 and libc only (Linux: memfd seals).
 *
 *     posenc_conn *c;  posenc_table *t;
 *     if (posenc_connect(NULL, NULL, &c) == POSENC_OK &&
 *         posenc_open_named(c, "llama-2-7b", "float32", &t) == POSENC_OK) {
 *         int64_t pos[] = {0, 17, 4095};
 *         float cos[3 * 64];                           // [3, d/2]: half-width rows
 *         int st = posenc_gather_rows(t, "cos", pos, 3, cos, NULL);
 *         // st == POSENC_PAST_END: a position is past the table; compute it or ask the service
 *         posenc_table_close(t);
 *     }
 *     posenc_close(c);
 *
 * A table stays valid while it is open, whatever the engine does (sealed memory); call
 * posenc_changed() now and then to learn of newer tables (a new generation, a longer table).
 * Not thread-safe per connection: one thread at a time on a posenc_conn; tables are read-only
 * and may be read from any number of threads.
 */
#ifndef POSENC_SHM_H
#define POSENC_SHM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POSENC_FORMAT 2

enum posenc_status {
    POSENC_OK = 0,
    POSENC_PAST_END = 1,        /* a position (alibi: distance) >= the table's length: not stored */
    POSENC_ERR_SYS = -1,        /* a system call failed: errno says why */
    POSENC_ERR_PROTOCOL = -2,   /* the engine's reply is not what docs/shm-format.md says */
    POSENC_ERR_NOT_FOUND = -3,  /* no such digest, name, dtype or array (or not stored now) */
    POSENC_ERR_NOT_SEALED = -4, /* the descriptor is not a sealed segment of the recorded size */
    POSENC_ERR_ARG = -5,        /* a bad argument (negative position, wrong rank...) */
    POSENC_ERR_FORMAT = -6,     /* the manifest's format is not POSENC_FORMAT */
    POSENC_ERR_RANGE = -7       /* a computed value overflows the table's dtype (the service refuses it too) */
};

typedef struct posenc_conn posenc_conn;
typedef struct posenc_table posenc_table;

typedef struct {
    const void *data;      /* read-only: a PROT_READ mapping */
    int ndim;              /* 0..4 */
    int64_t shape[4];
    char dtype[16];        /* numpy name: float32, float16, float64, int32, uint16 (bfloat16 bits) */
    size_t itemsize;
} posenc_array;

const char *posenc_strerror(int status);

/* Connect to {shm_dir}/{ns}.sock (NULL: "/dev/shm", "posenc") and fetch the manifest. */
int posenc_connect(const char *shm_dir, const char *ns, posenc_conn **out);
void posenc_close(posenc_conn *c);
/* Catch up with the engine (after posenc_changed() said 1): ask what changed since the manifest's
 * sequence number ("changes", a reply the size of the changes); the whole manifest again only for
 * a new engine (generation), a change of the configured tables, or a reset. */
int posenc_refresh(posenc_conn *c);
/* 1 when the table log ({ns}.manifest.log) changed since the last refresh (then posenc_refresh), 0 if not. */
int posenc_changed(posenc_conn *c);
uint64_t posenc_generation(const posenc_conn *c);
/* Sequence number of the last change the connection has seen (docs/shm-format.md). */
int64_t posenc_seq(const posenc_conn *c);
/* The manifest's JSON text as the engine last sent it whole (at connect, a new generation, a
 * change of the configured tables): tables built or evicted since are not in it (open them by
 * digest). Valid until the next refresh or close. */
const char *posenc_manifest(const posenc_conn *c);

/* Open a stored table by digest, or a configured table by name and dtype ("float32", "float16",
 * "bfloat16"; NULL for t5-buckets or "the first one"). NOT_FOUND when it is not stored now. */
int posenc_open(posenc_conn *c, const char *digest, posenc_table **out);
int posenc_open_named(posenc_conn *c, const char *name, const char *dtype, posenc_table **out);
void posenc_table_close(posenc_table *t);

const char *posenc_table_family(const posenc_table *t);
const char *posenc_table_dtype(const posenc_table *t);   /* "" for t5-buckets */
const char *posenc_table_digest(const posenc_table *t);
int64_t posenc_table_length(const posenc_table *t);
uint64_t posenc_table_generation(const posenc_table *t);
/* A number of the entry's meta (rope: "attention_scaling"). */
int posenc_table_meta(const posenc_table *t, const char *name, double *out);
/* One of its arrays (parsed at open, where every array was checked to lie inside the mapping). */
int posenc_table_array(const posenc_table *t, const char *name, posenc_array *out);

/* out[i] = arr[pos[i]] for an array whose axis 0 is the position (rope cos/sin, sinusoidal
 * table, t5 lut with pos = rel + length): n rows of prod(shape[1:]) items each, copied as stored.
 * POSENC_PAST_END when some pos[i] >= shape[0] (*first_past = i; nothing written);
 * POSENC_ERR_ARG for a negative one. */
int posenc_gather_rows(const posenc_table *t, const char *array, const int64_t *pos, size_t n,
                       void *out, size_t *first_past);
/* out[r][i] = arr[r][pos[i]] for a 2-D array whose axis 1 is the position (alibi dist: every
 * head's value at distance pos[i]); out is [shape[0], n]. Same statuses. */
int posenc_gather_cols(const posenc_table *t, const char *array, const int64_t *pos, size_t n,
                       void *out, size_t *first_past);

/* RoPE's half-width rows (a rope table: cos and sin [length, d/2]) for n positions into out_cos
 * and out_sin ([n, d/2] items of the table's dtype each), on both sides of the table's end: a
 * stored row is copied; a row past the end is computed as the engine computes it (cos and sin of
 * float64(p) * inv_freq64[k], times the meta's attention_scaling, rounded once to the dtype:
 * engine/kernels/round_f64.h, the same code), the same bits as the service's (with its simd
 * kernels; the numpy backend's sin/cos may differ from libm's by an ulp). Where the table's
 * frequencies follow the sequence length (meta rows_past 0: dynamic NTK, longrope) its rows are
 * the answer of requests within the model's context only (docs/shm-format.md), and a row past the
 * end is POSENC_PAST_END (*first_past = i; nothing written); POSENC_ERR_RANGE when a computed
 * value overflows the dtype; POSENC_ERR_ARG for a negative position or another family. */
int posenc_rope_rows(const posenc_table *t, const int64_t *pos, size_t n, void *out_cos, void *out_sin,
                     size_t *first_past);
/* A sinusoidal table's stored rows ([n, width] of its dtype: sin columns, then cos columns) for
 * table rows (position + offset), on both sides of its end: rows past it computed from its
 * freqs64 as the engine computes them (the same code, as posenc_rope_rows). POSENC_ERR_ARG for a
 * negative row, one at or past 2^53, or another family. */
int posenc_sinusoidal_rows(const posenc_table *t, const int64_t *rows, size_t n, void *out, size_t *first_past);
/* An ALiBi table's cells at n distances (>= 0) for every head ([num_heads, n] of its dtype):
 * 0 - slope[h] * d rounded once, stored or (past the table) computed with the engine's own cell
 * (engine/kernels/alibi_cell.h). POSENC_ERR_RANGE when a cell overflows the dtype (the service
 * refuses such a block). */
int posenc_alibi_dist(const posenc_table *t, const int64_t *dist, size_t n, void *out, size_t *first_past);

#ifdef __cplusplus
}
#endif
#endif
