/* fuzz_parse.c — bounded-time mutation fuzzer for the workload parser: seeds
 * from directories, byte- and token-level mutations, and every workload that
 * parses is printed, hashed, copied, counted and (when small) evaluated.
 * Usage: fuzz_parse [--seconds N] [--seed S] DIR...  (built with ASan/UBSan) */
#include "fuzzutil.h"

#define MAX_EVAL_ELEMENTS 4096     /* evaluate workloads with at most this many elements */
#define MAX_EVAL_ITERS    100000.0 /* ... and at most this many loop iterations */

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

/* ---- mutations ----------------------------------------------------------- */

static void mutate_once(tn_rng_t *r, bytes_t *b, const seeds_t *s) {
  static const char printable[] = " \n()[],:=+-*/%<>!&|#._0123456789eEijkABCMNK";
  size_t pos = pick(r, b->n + 1);
  uint64_t op = tn_rng_below(r, 8);
  if (fz_mutate_bytes(r, b, s, op, pos)) return;
  switch (op) {
  case 1: { /* insert a byte, mostly from the language's alphabet */
    char c = tn_rng_below(r, 8) ? printable[pick(r, sizeof printable - 1)] : (char)tn_rng_below(r, 256);
    b_insert(b, pos, &c, 1);
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

static int64_t total_elements(const ir_func_t *f) {
  int64_t n = 0;
  for (int i = 0; i < f->nparams; i++) n += ir_buffer_numel(f->params[i]);
  const ir_block_t *root = ir_func_root(f);
  for (int i = 0; i < root->nallocs; i++) n += ir_buffer_numel(root->allocs[i]);
  return n;
}

static void fail(stats_t *st, const bytes_t *in, const char *what, const char *detail) {
  st->failures++;
  fz_report("fuzz_parse", in, what, detail);
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
  if (total_elements(f) > MAX_EVAL_ELEMENTS || fz_iterations(f->root) > MAX_EVAL_ITERS) return;
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
  if (fz_args(argc, argv, "fuzz_parse", NULL, IR_MAX_SOURCE_BYTES, builtin_seed, &seconds, &seed, &s) != 0) return 2;
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
  fz_seeds_free(&s);
  return st.failures ? 1 : 0;
}
