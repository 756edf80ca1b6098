/* fuzz_parse.c — bounded-time mutation fuzzer for the workload parser: seeds
 * from directories, byte- and token-level mutations, and every workload that
 * parses is printed, hashed, copied, counted and (when small) evaluated; its
 * TVMScript imports back with the same hash, and mutated TVMScript of the
 * seeds goes through the importer (frontend/tvmscript.c).
 * Usage: fuzz_parse [--seconds N] [--seed S] DIR...  (built with ASan/UBSan) */
#include "fuzzcheck_parse.h"

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
    "const",
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

/* The importer on mutated TVMScript (a workload's printing): a workload
 * that parses, or an error at fuzz.py. */
static void import_mutated(tn_rng_t *r, const bytes_t *in, const seeds_t *s, stats_t *st) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  if (ir_workload_parse("fuzz.tw", in->p ? in->p : "", in->n, NULL, 0, &w, &err) != 0) return;
  tn_buf_t py, tw;
  tn_buf_init(&py);
  tn_buf_init(&tw);
  ir_print_tvmscript(w->func, &py);
  ir_workload_free(w);
  bytes_t m = {NULL, 0, 0};
  b_assign(&m, tn_buf_str(&py), strlen(tn_buf_str(&py)));
  for (int k = 1 + (int)tn_rng_below(r, 3); k > 0; k--) mutate_once(r, &m, s);
  w = NULL;
  if (ir_tvmscript_import("fuzz.py", m.p ? m.p : "", m.n, &tw, &err) == 0) {
    if (ir_workload_parse("back.tw", tn_buf_str(&tw), strlen(tn_buf_str(&tw)), NULL, 0, &w, &err) != 0)
      fail(st, &m, "an imported workload does not parse", err.msg);
  } else if (strncmp(err.msg, "fuzz.py:", 8) != 0) {
    fail(st, &m, "an import error without the file's name", err.msg);
  }
  ir_workload_free(w);
  free(m.p);
  tn_buf_free(&py);
  tn_buf_free(&tw);
}

static void run_one(tn_rng_t *r, const bytes_t *in, stats_t *st) {
  ir_param_set_t ovr = {NULL, 0};
  int novr = (int)tn_rng_below(r, 2);
  if (novr) {
    ovr.name = ovr_names[pick(r, TN_ARRAY_LEN(ovr_names))];
    ovr.value = ovr_values[pick(r, TN_ARRAY_LEN(ovr_values))];
  }
  fzc_parse_one(in, novr ? &ovr : NULL, novr, st);
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
    if (tn_rng_below(&r, 4) == 0) import_mutated(&r, base, &s, &st); /* the seed, before its mutations */
  }
  printf("fuzz_parse: %ld inputs in %.1f s, %ld parsed, %ld crashes (%ld evaluated, %d seeds)\n", st.inputs,
         tn_now() - start, st.parsed, st.failures, st.evaluated, s.n);
  free(in.p);
  fz_seeds_free(&s);
  return st.failures ? 1 : 0;
}
