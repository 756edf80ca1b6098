/* fuzz_parse.c — bounded-time mutation fuzzer for the workload parser: seeds
 * from directories, byte- and token-level mutations, and every workload that
 * parses is printed, hashed, copied, counted and (when small) evaluated.
 * Usage: fuzz_parse [--seconds N] [--seed S] DIR...  (built with ASan/UBSan) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/ir.h"

#define FUZZ_MAX_BYTES    65536    /* mutated inputs stay below this */
#define MAX_EVAL_ELEMENTS 4096     /* evaluate workloads with at most this many elements */
#define MAX_EVAL_ITERS    100000.0 /* ... and at most this many loop iterations */

typedef struct bytes {
  char *p;
  size_t n, cap;
} bytes_t;

typedef struct seeds {
  bytes_t *v;
  int n;
} seeds_t;

typedef struct stats {
  long inputs, parsed, evaluated, failures;
} stats_t;

/* Tokens of the language, edge-case numbers and names that must be refused. */
static const char *const dict[] = {
    "param",
    "input",
    "output",
    "temp",
    "sum",
    "max",
    "min",
    "select",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "abs",
    "pow",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "bool",
    "in",
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    "=",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "&&",
    "||",
    "!",
    "\n",
    " ",
    "\t",
    "\r\n",
    "#",
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "1024",
    "2147483647",
    "2147483648",
    "4294967296",
    "4611686018427387903",
    "4611686018427387904",
    "9223372036854775807",
    "1e308",
    "1e-308",
    "1e999",
    "0.5",
    "2.",
    "65504",
    "i",
    "j",
    "k",
    "r",
    "s",
    "A",
    "B",
    "C",
    "M",
    "N",
    "K",
    "T",
    "int",
    "__x",
    "v_i",
    "tuned_x",
    "threadIdx",
    "sum(k < K: ",
    "select(i > 0 && i < N, ",
    "A[i, k]",
    "A[i + 1]",
    "A[]",
    "[]",
    "in [0, 1)",
    " // 0",
    " % 0",
    "\x00",
    "\xc3\xa9",
    "\x7f",
};

static const char *const ovr_names[] = {"M", "N", "K", "H", "W", "C", "B", "X"};
static const int64_t ovr_values[] = {0, 1, 2, 3, 7, 64, -1, INT64_C(1) << 40, INT64_C(4294967296)};

/* ---- byte vectors -------------------------------------------------------- */

static void b_reserve(bytes_t *b, size_t n) {
  if (n <= b->cap) return;
  b->cap = n * 2;
  b->p = tn_xrealloc(b->p, b->cap);
}

static void b_insert(bytes_t *b, size_t pos, const char *s, size_t n) {
  if (b->n + n > FUZZ_MAX_BYTES) return;
  b_reserve(b, b->n + n);
  memmove(b->p + pos + n, b->p + pos, b->n - pos);
  memcpy(b->p + pos, s, n);
  b->n += n;
}

static void b_erase(bytes_t *b, size_t pos, size_t n) {
  if (pos + n > b->n) n = b->n - pos;
  memmove(b->p + pos, b->p + pos + n, b->n - pos - n);
  b->n -= n;
}

static void b_assign(bytes_t *b, const char *s, size_t n) {
  b_reserve(b, n);
  memcpy(b->p, s, n);
  b->n = n;
}

/* ---- seeds --------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Loads every regular file of `dir`, in name order (determinism). */
static int load_dir(const char *dir, seeds_t *s) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "fuzz_parse: cannot open directory '%s'\n", dir);
    return -1;
  }
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    names = tn_xrealloc(names, sizeof(char *) * (size_t)(n + 1));
    names[n] = tn_xmalloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf(names[n++], "%s/%s", dir, e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof(char *), cmp_names);
  for (int i = 0; i < n; i++) {
    struct stat st;
    char *text;
    size_t len;
    tn_err_t err = {0};
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) &&
        tn_read_file(names[i], IR_MAX_SOURCE_BYTES, &text, &len, &err) == 0) {
      s->v = tn_xrealloc(s->v, sizeof(bytes_t) * (size_t)(s->n + 1));
      s->v[s->n++] = (bytes_t){.p = text, .n = len, .cap = len};
    }
    free(names[i]);
  }
  free(names);
  return 0;
}

/* ---- mutations ----------------------------------------------------------- */

static size_t pick(tn_rng_t *r, size_t n) { return n ? (size_t)tn_rng_below(r, n) : 0; }

static void mutate_once(tn_rng_t *r, bytes_t *b, const seeds_t *s) {
  static const char printable[] = " \n()[],:=+-*/%<>!&|#._0123456789eEijkABCMNK";
  size_t pos = pick(r, b->n + 1);
  switch (tn_rng_below(r, 8)) {
  case 0: /* bit flip */
    if (b->n) b->p[pick(r, b->n)] ^= (char)(1u << tn_rng_below(r, 8));
    break;
  case 1: { /* insert a byte, mostly from the language's alphabet */
    char c = tn_rng_below(r, 8) ? printable[pick(r, sizeof printable - 1)] : (char)tn_rng_below(r, 256);
    b_insert(b, pos, &c, 1);
    break;
  }
  case 2: /* delete a short range */
    if (pos < b->n) b_erase(b, pos, 1 + pick(r, 8));
    break;
  case 3: { /* duplicate a chunk */
    if (!b->n) break;
    size_t from = pick(r, b->n), n = 1 + pick(r, TN_MIN(b->n - from, 64));
    char tmp[64];
    memcpy(tmp, b->p + from, n);
    b_insert(b, pos, tmp, n);
    break;
  }
  case 4: { /* splice: our prefix, another seed's suffix */
    const bytes_t *o = &s->v[pick(r, (size_t)s->n)];
    size_t from = pick(r, o->n + 1);
    b->n = pos;
    b_insert(b, pos, o->p + from, TN_MIN(o->n - from, (size_t)FUZZ_MAX_BYTES - pos));
    break;
  }
  case 5:
  case 6: { /* insert a dictionary token */
    const char *t = dict[pick(r, TN_ARRAY_LEN(dict))];
    b_insert(b, pos, t, t[0] ? strlen(t) : 1);
    break;
  }
  default: { /* replace a token-sized run with a dictionary token */
    const char *t = dict[pick(r, TN_ARRAY_LEN(dict))];
    if (pos < b->n) b_erase(b, pos, 1 + pick(r, 6));
    b_insert(b, pos, t, t[0] ? strlen(t) : 1);
    break;
  }
  }
}

/* ---- checks on each input ------------------------------------------------ */

static double iterations(const ir_stmt_t *s) {
  if (!s) return 0;
  switch (s->kind) {
  case IR_S_SEQ: {
    double n = 0;
    for (int i = 0; i < s->u.seq.n; i++) n += iterations(s->u.seq.items[i]);
    return n;
  }
  case IR_S_LOOP: return (double)s->u.loop.extent * iterations(s->u.loop.body);
  case IR_S_BLOCK: return 1 + iterations(s->u.block.body);
  default: return 1;
  }
}

static int64_t total_elements(const ir_func_t *f) {
  int64_t n = 0;
  for (int i = 0; i < f->nparams; i++) n += ir_buffer_numel(f->params[i]);
  const ir_block_t *root = ir_func_root(f);
  for (int i = 0; i < root->nallocs; i++) n += ir_buffer_numel(root->allocs[i]);
  return n;
}

static void fail(stats_t *st, const bytes_t *in, const char *what, const char *detail) {
  st->failures++;
  fprintf(stderr, "fuzz_parse: FAILURE: %s: %s\n--- input (%zu bytes):\n%.*s\n---\n", what, detail, in->n,
          (int)in->n, in->p);
}

/* Runs everything downstream of the parser on an accepted workload. */
static void exercise(const ir_workload_t *w, const bytes_t *in, stats_t *st) {
  const ir_func_t *f = w->func;
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  if (!strstr(tn_buf_str(&b), "def main")) fail(st, in, "printed function lacks 'def main'", tn_buf_str(&b));
  tn_buf_free(&b);
  uint64_t h = ir_func_hash(f);
  ir_func_t *copy = ir_func_copy(f);
  if (ir_func_hash(copy) != h) fail(st, in, "the copy of a function hashes differently", w->name);
  ir_func_free(copy);
  double flops = ir_func_flops(f);
  if (!(flops >= 0)) fail(st, in, "negative or NaN flop count", w->name);
  if (total_elements(f) > MAX_EVAL_ELEMENTS || iterations(f->root) > MAX_EVAL_ITERS) return;
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  if (ir_data_new(f, 1, (size_t)1 << 20, &d, &err) != 0) {
    fail(st, in, "ir_data_new failed on a small workload", err.msg);
    return;
  }
  /* the parser proved every access in bounds and every divisor positive */
  if (ir_eval(f, d, &err) != 0)
    fail(st, in, "ir_eval failed on a workload the parser accepted", err.msg);
  else
    st->evaluated++;
  ir_data_free(d);
}

/* Every rejection carries "fuzz.tw:LINE:COL: " (or names the --set). */
static void check_error(int rc, const ir_workload_t *w, const tn_err_t *err, const bytes_t *in, stats_t *st) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "fuzz.tw:%d:%d: ", err->line, err->col);
  bool positioned = err->line >= 1 && err->col >= 1 && strncmp(err->msg, prefix, strlen(prefix)) == 0;
  bool override = strncmp(err->msg, "fuzz.tw: --set ", 15) == 0;
  if (rc >= 0 || w)
    fail(st, in, "an error without a negative code or with a workload", err->msg);
  else if (!positioned && !override)
    fail(st, in, "error message without position", err->msg);
}

static void run_one(tn_rng_t *r, const bytes_t *in, stats_t *st) {
  ir_param_set_t ovr = {NULL, 0};
  int novr = (int)tn_rng_below(r, 2);
  if (novr) {
    ovr.name = ovr_names[pick(r, TN_ARRAY_LEN(ovr_names))];
    ovr.value = ovr_values[pick(r, TN_ARRAY_LEN(ovr_values))];
  }
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  st->inputs++;
  int rc = ir_workload_parse("fuzz.tw", in->p ? in->p : "", in->n, novr ? &ovr : NULL, novr, &w, &err);
  if (rc != 0) {
    check_error(rc, w, &err, in, st);
    return;
  }
  st->parsed++;
  exercise(w, in, st);
  ir_workload_free(w);
}

/* ---- main ---------------------------------------------------------------- */

static const char builtin_seed[] = "param M = 8, N = 8, K = 8\n"
                                   "input  A: float32[M, K]\n"
                                   "input  B: float32[K, N]\n"
                                   "output C: float32[M, N]\n"
                                   "C[i, j] = sum(k < K: A[i, k] * B[k, j])\n";

int main(int argc, char **argv) {
  double seconds = 10;
  uint64_t seed = 1;
  seeds_t s = {NULL, 0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 10);
    else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: fuzz_parse [--seconds N] [--seed S] DIR...\n");
      return 2;
    } else if (load_dir(argv[i], &s) != 0) {
      return 2;
    }
  }
  if (!s.n) {
    s.v = tn_xcalloc(1, sizeof(bytes_t));
    b_assign(&s.v[s.n++], builtin_seed, sizeof builtin_seed - 1);
  }
  tn_rng_t r;
  tn_rng_seed(&r, seed);
  stats_t st = {0};
  double start = tn_now();
  for (int i = 0; i < s.n; i++) run_one(&r, &s.v[i], &st); /* every seed as is */
  bytes_t in = {NULL, 0, 0};
  while (tn_now() - start < seconds && st.failures < 10) {
    const bytes_t *base = &s.v[pick(&r, (size_t)s.n)];
    b_assign(&in, base->p, base->n);
    for (int m = 1 + (int)tn_rng_below(&r, 4); m > 0; m--) mutate_once(&r, &in, &s);
    run_one(&r, &in, &st);
  }
  printf("fuzz_parse: %ld inputs in %.1f s, %ld parsed, %ld crashes (%ld evaluated, %d seeds)\n", st.inputs,
         tn_now() - start, st.parsed, st.failures, st.evaluated, s.n);
  free(in.p);
  for (int i = 0; i < s.n; i++) free(s.v[i].p);
  free(s.v);
  return st.failures ? 1 : 0;
}
