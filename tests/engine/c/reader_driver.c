/* The C reader's test driver (tests/engine/test_c_reader.py): connects to an engine, then answers
 * one command a line from stdin, one line each on stdout:
 *     rows DIGEST ARRAY P,P,...   -> OK <hex of the gathered bytes> | PAST <i> | ERR <status> <why>
 *     cols DIGEST ARRAY P,P,...   (the same through posenc_gather_cols)
 *     named NAME DTYPE|-          -> OK <digest>
 *     meta DIGEST KEY             -> OK <%.17g>
 *     gen                         -> OK <generation>
 *     hold DIGEST                 -> OK | ERR ...: keep that table open (one at a time)
 *     held ARRAY P,P,...          -> rows of the held table, as "rows" answers
 *     rope DIGEST P,P,...         -> OK <hex of cos rows><hex of sin rows> | PAST <i> | ERR ... (posenc_rope_rows)
 *     sin DIGEST R,R,...          -> the same through posenc_sinusoidal_rows (rows of the stored table)
 *     alibi DIGEST D,D,...        -> the same through posenc_alibi_dist (every head's cells at the distances)
 *     changed                     -> OK 0|1 (posenc_changed)
 *     refresh                     -> OK <generation> | ERR ...
 *     seq                         -> OK <sequence number> (posenc_seq)
 *     whole                       -> OK <address of the manifest text>: the same until it is fetched whole again
 */
#include "posenc_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_positions(char *s, int64_t *pos, size_t cap) {
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) pos[n++] = strtoll(tok, NULL, 10);
    return n;
}

static void err(int st) { printf("ERR %d %s\n", st, posenc_strerror(st)); }

/* A call's answer line: OK and the bytes written, PAST and the index, or ERR. */
static void answer(int st, const unsigned char *out, size_t bytes, size_t past) {
    if (st == POSENC_PAST_END) printf("PAST %zu\n", past);
    else if (st != POSENC_OK) err(st);
    else {
        fputs("OK ", stdout);
        for (size_t i = 0; i < bytes; i++) printf("%02x", out[i]);
        putchar('\n');
    }
}

static void gather_from(posenc_table *t, int cols, const char *array, char *list) {
    static int64_t pos[1 << 16];
    posenc_array a;
    size_t n = parse_positions(list, pos, sizeof pos / sizeof pos[0]), past = 0;
    int st = posenc_table_array(t, array, &a);
    if (st != POSENC_OK) { err(st); return; }
    size_t per = a.itemsize;
    for (int i = 0; i < a.ndim; i++) per *= (size_t)a.shape[i];
    size_t bytes = n * per / (size_t)(cols ? a.shape[1] : a.shape[0]);
    unsigned char *out = malloc(bytes ? bytes : 1);
    st = cols ? posenc_gather_cols(t, array, pos, n, out, &past) : posenc_gather_rows(t, array, pos, n, out, &past);
    answer(st, out, bytes, past);
    free(out);
}

/* rope, sin or alibi: the computing readers (rows on both sides of a table's end) */
static void computed(posenc_conn *c, const char *how, const char *digest, char *list) {
    static int64_t pos[1 << 16];
    posenc_table *t;
    posenc_array a;
    int st = posenc_open(c, digest, &t);
    if (st != POSENC_OK) { err(st); return; }
    size_t n = parse_positions(list, pos, sizeof pos / sizeof pos[0]), past = 0, bytes = 0;
    const char *array = how[0] == 'r' ? "cos" : how[0] == 's' ? "table" : "dist";
    if (posenc_table_array(t, array, &a) == POSENC_OK && a.ndim == 2)
        bytes = n * (size_t)(how[0] == 'a' ? a.shape[0] : a.shape[1]) * a.itemsize;
    unsigned char *out = malloc(2 * bytes + 1);
    /* another family: refused, nothing written */
    if (how[0] == 'r') st = posenc_rope_rows(t, pos, n, out, out + bytes, &past);
    else if (how[0] == 's') st = posenc_sinusoidal_rows(t, pos, n, out, &past);
    else st = posenc_alibi_dist(t, pos, n, out, &past);
    answer(st, out, how[0] == 'r' ? 2 * bytes : bytes, past);   /* rope: cos then sin */
    free(out);
    posenc_table_close(t);
}

static void gather(posenc_conn *c, int cols, const char *digest, const char *array, char *list) {
    posenc_table *t;
    int st = posenc_open(c, digest, &t);
    if (st != POSENC_OK) { err(st); return; }
    gather_from(t, cols, array, list);
    posenc_table_close(t);
}

int main(int argc, char **argv) {
    posenc_conn *c;
    posenc_table *held = NULL;
    static char line[1 << 20];
    if (argc != 3) { fprintf(stderr, "usage: %s SHM_DIR NAMESPACE\n", argv[0]); return 2; }
    int st = posenc_connect(argv[1], argv[2], &c);
    if (st != POSENC_OK) { fprintf(stderr, "connect: %s\n", posenc_strerror(st)); return 1; }
    while (fgets(line, sizeof line, stdin)) {
        char *cmd = strtok(line, " \n"), *a = strtok(NULL, " \n"), *b = strtok(NULL, " \n"), *p = strtok(NULL, " \n");
        if (!cmd) continue;
        if ((!strcmp(cmd, "rows") || !strcmp(cmd, "cols")) && p) gather(c, cmd[0] == 'c', a, b, p);
        else if (!strcmp(cmd, "named") && b) {
            posenc_table *t;
            st = posenc_open_named(c, a, strcmp(b, "-") ? b : NULL, &t);
            if (st != POSENC_OK) err(st);
            else { printf("OK %s\n", posenc_table_digest(t)); posenc_table_close(t); }
        } else if (!strcmp(cmd, "meta") && b) {
            posenc_table *t;
            double x;
            if ((st = posenc_open(c, a, &t)) != POSENC_OK) { err(st); continue; }
            st = posenc_table_meta(t, b, &x);
            if (st != POSENC_OK) err(st); else printf("OK %.17g\n", x);
            posenc_table_close(t);
        } else if (!strcmp(cmd, "gen")) printf("OK %llu\n", (unsigned long long)posenc_generation(c));
        else if (!strcmp(cmd, "hold") && a) {
            posenc_table_close(held);
            held = NULL;
            if ((st = posenc_open(c, a, &held)) != POSENC_OK) err(st); else puts("OK");
        } else if (!strcmp(cmd, "held") && b && held) gather_from(held, 0, a, b);
        else if ((!strcmp(cmd, "rope") || !strcmp(cmd, "sin") || !strcmp(cmd, "alibi")) && b) computed(c, cmd, a, b);
        else if (!strcmp(cmd, "changed")) printf("OK %d\n", posenc_changed(c));
        else if (!strcmp(cmd, "seq")) printf("OK %lld\n", (long long)posenc_seq(c));
        else if (!strcmp(cmd, "whole")) printf("OK %p\n", (const void *)posenc_manifest(c));
        else if (!strcmp(cmd, "refresh")) {
            if ((st = posenc_refresh(c)) != POSENC_OK) err(st);
            else printf("OK %llu\n", (unsigned long long)posenc_generation(c));
        }
        else printf("ERR %d unknown command\n", POSENC_ERR_ARG);
        fflush(stdout);
    }
    posenc_table_close(held);
    posenc_close(c);
    return 0;
}
