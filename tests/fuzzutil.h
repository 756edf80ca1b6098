/* fuzzutil.h — shared parts of the mutation fuzzers (fuzz_parse, fuzz_trace):
 * growable byte vectors, seeds loaded from directories, the byte-level
 * mutations, command-line handling and IR size estimates. */
#ifndef TUNED_FUZZUTIL_H
#define TUNED_FUZZUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/ir.h"

#define FUZZ_MAX_BYTES 65536 /* mutated inputs stay below this */

typedef struct bytes {
  char *p;
  size_t n, cap;
} bytes_t;

typedef struct seeds {
  bytes_t *v;
  int n;
} seeds_t;

/* ---- byte vectors -------------------------------------------------------- */

static inline void b_reserve(bytes_t *b, size_t n) {
  if (n <= b->cap) return;
  b->cap = n * 2;
  b->p = tn_xrealloc(b->p, b->cap);
}

static inline void b_insert(bytes_t *b, size_t pos, const char *s, size_t n) {
  if (b->n + n > FUZZ_MAX_BYTES) return;
  b_reserve(b, b->n + n);
  memmove(b->p + pos + n, b->p + pos, b->n - pos);
  memcpy(b->p + pos, s, n);
  b->n += n;
}

static inline void b_erase(bytes_t *b, size_t pos, size_t n) {
  if (pos + n > b->n) n = b->n - pos;
  memmove(b->p + pos, b->p + pos + n, b->n - pos - n);
  b->n -= n;
}

static inline void b_assign(bytes_t *b, const char *s, size_t n) {
  b_reserve(b, n + 1);
  memcpy(b->p, s, n);
  b->n = n;
}

/* ---- seeds --------------------------------------------------------------- */

static inline int fz_cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static inline bool fz_has_suffix(const char *name, const char *suffix) {
  size_t n = strlen(name), k = suffix ? strlen(suffix) : 0;
  return n > k && strcmp(name + n - k, k ? suffix : "") == 0;
}

/* Loads every regular file of `dir` whose name ends in `suffix` (NULL: any),
 * at most `max_bytes` each, in name order (determinism). */
static inline int fz_load_dir(const char *prog, const char *dir, const char *suffix, size_t max_bytes, seeds_t *s) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "%s: cannot open directory '%s'\n", prog, dir);
    return -1;
  }
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !fz_has_suffix(e->d_name, suffix)) continue;
    names = tn_xrealloc(names, sizeof(char *) * (size_t)(n + 1));
    names[n] = tn_xmalloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf(names[n++], "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (n) qsort(names, (size_t)n, sizeof(char *), fz_cmp_names);
  for (int i = 0; i < n; i++) {
    struct stat st;
    char *text;
    size_t len;
    tn_err_t err = {0};
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && tn_read_file(names[i], max_bytes, &text, &len, &err) == 0) {
      s->v = tn_xrealloc(s->v, sizeof(bytes_t) * (size_t)(s->n + 1));
      s->v[s->n++] = (bytes_t){.p = text, .n = len, .cap = len};
    }
    free(names[i]);
  }
  free(names);
  return 0;
}

static inline void fz_seeds_free(seeds_t *s) {
  for (int i = 0; i < s->n; i++) free(s->v[i].p);
  free(s->v);
}

/* Parses "[--seconds N] [--seed S] DIR..." and loads the seeds (`builtin`
 * when the directories hold none); 0, or 2 after printing the usage. */
static inline int fz_args(int argc, char **argv, const char *prog, const char *suffix, size_t max_bytes,
                          const char *builtin, double *seconds, uint64_t *seed, seeds_t *s) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      *seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      *seed = strtoull(argv[++i], NULL, 10);
    else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [--seconds N] [--seed S] DIR...\n", prog);
      return 2;
    } else if (fz_load_dir(prog, argv[i], suffix, max_bytes, s) != 0) {
      return 2;
    }
  }
  if (!s->n) {
    s->v = tn_xcalloc(1, sizeof(bytes_t));
    b_assign(&s->v[s->n++], builtin, strlen(builtin));
  }
  return 0;
}

/* ---- mutations ----------------------------------------------------------- */

static inline size_t pick(tn_rng_t *r, size_t n) { return n ? (size_t)tn_rng_below(r, n) : 0; }

/* Mutation `op` (0..4: bit flip, delete a short range, duplicate a chunk,
 * splice with another seed; 1 is the caller's own insertion) at `pos`;
 * false when op is not one of these. */
static inline bool fz_mutate_bytes(tn_rng_t *r, bytes_t *b, const seeds_t *s, uint64_t op, size_t pos) {
  switch (op) {
  case 0: /* bit flip */
    if (b->n) b->p[pick(r, b->n)] ^= (char)(1u << tn_rng_below(r, 8));
    return true;
  case 2: /* delete a short range */
    if (pos < b->n) b_erase(b, pos, 1 + pick(r, 8));
    return true;
  case 3: { /* duplicate a chunk */
    if (!b->n) return true;
    size_t from = pick(r, b->n), n = 1 + pick(r, TN_MIN(b->n - from, 64));
    char tmp[64];
    memcpy(tmp, b->p + from, n);
    b_insert(b, pos, tmp, n);
    return true;
  }
  case 4: { /* splice: our prefix, another seed's suffix */
    const bytes_t *o = &s->v[pick(r, (size_t)s->n)];
    size_t from = pick(r, o->n + 1);
    b->n = pos;
    b_insert(b, pos, o->p + from, TN_MIN(o->n - from, (size_t)FUZZ_MAX_BYTES - pos));
    return true;
  }
  default: return false;
  }
}

/* ---- sizes of what would be evaluated ------------------------------------ */

/* Statements executed by s (each block instance counts once more). */
static inline double fz_iterations(const ir_stmt_t *s) {
  if (!s) return 0;
  switch (s->kind) {
  case IR_S_SEQ: {
    double n = 0;
    for (int i = 0; i < s->u.seq.n; i++) n += fz_iterations(s->u.seq.items[i]);
    return n;
  }
  case IR_S_LOOP: return (double)s->u.loop.extent * fz_iterations(s->u.loop.body);
  case IR_S_BLOCK: return 1 + fz_iterations(s->u.block.body);
  default: return 1;
  }
}

/* Reports a failure on stderr with the input that caused it. */
static inline void fz_report(const char *prog, const bytes_t *in, const char *what, const char *detail) {
  fprintf(stderr, "%s: FAILURE: %s: %s\n--- input (%zu bytes):\n%.*s\n---\n", prog, what, detail, in->n, (int)in->n,
          in->p);
}

#endif
