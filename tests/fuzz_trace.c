/* fuzz_trace.c — bounded-time mutation fuzzer for trace JSON and replay: seeds
 * from directories, byte-level and JSON-aware mutations; a trace that parses
 * must re-serialise to a fixed point, and is replayed on matmul and vector_add
 * and, when that works, evaluated against the unscheduled function.
 * Usage: fuzz_trace [--seconds N] [--seed S] DIR...  (built with ASan/UBSan) */
#include "fuzzcheck_trace.h"

/* Values that stress the parser and the primitives. */
static const char *const numbers[] = {
    "-1", "0", "1", "2", "3", "4", "7", "16", "64", "65", "-2", "1000", "2147483647", "2147483648",
    "-2147483649", "4294967296", "9007199254740993", "9223372036854775807", "-9223372036854775808",
    "9223372036854775808", "99999999999999999999", "1.5", "0.0", "-0.0", "1e308", "1e999", "-1e999", "5e-324",
};
/* Strings: handle names, instruction names, quoted constants, scopes, threads. */
static const char *const strings[] = {
    "\"b0\"", "\"l1\"", "\"l2\"", "\"v4\"", "\"b99\"", "\"l-1\"", "\"None\"", "\"\"", "\"\\\"C\\\"\"",
    "\"C\"", "\"A\"", "\"main\"", "\"shared\"", "\"local\"", "\"global\"", "\"blockIdx.x\"", "\"threadIdx.x\"",
    "\"GetBlock\"", "\"GetLoops\"", "\"Split\"", "\"Fuse\"", "\"Reorder\"", "\"Parallel\"", "\"Vectorize\"",
    "\"Unroll\"", "\"Bind\"", "\"Annotate\"", "\"CacheRead\"", "\"CacheWrite\"", "\"ComputeAt\"",
    "\"ReverseComputeAt\"", "\"ComputeInline\"", "\"ReverseComputeInline\"", "\"DecomposeReduction\"",
    "\"RFactor\"", "\"SamplePerfectTile\"", "\"SampleCategorical\"", "\"SampleComputeLocation\"",
    "\"EnterPostproc\"", "\"GetChildBlocks\"", "\"GetProducers\"", "\"GetConsumers\"", "\"Unannotate\"",
};
static const char *const tokens[] = {"[", "]", ",", "{", "}", ":", "\"", "\\", "[]", "null", "true", "false", " "};

/* ---- mutations ---------------------------------------------------------------- */

/* The span of a random number (want_string false) or string literal outside
 * other strings; false if there is none. */
static bool find_literal(tn_rng_t *r, const bytes_t *b, bool want_string, size_t *at, size_t *len) {
  size_t starts[512], lens[512];
  int n = 0;
  for (size_t i = 0; i < b->n && n < 512; i++) {
    char c = b->p[i];
    size_t j = i + 1;
    if (c == '"') {
      while (j < b->n && b->p[j] != '"') j += b->p[j] == '\\' ? 2 : 1;
      j = TN_MIN(j + 1, b->n);
      if (want_string) starts[n] = i, lens[n++] = j - i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      while (j < b->n && strchr("0123456789+-eE.", b->p[j]) && b->p[j]) j++;
      if (!want_string) starts[n] = i, lens[n++] = j - i;
    }
    i = j - 1;
  }
  if (!n) return false;
  int k = (int)pick(r, (size_t)n);
  *at = starts[k], *len = lens[k];
  return true;
}

static void replace_literal(tn_rng_t *r, bytes_t *b, bool string) {
  size_t at, len;
  if (!find_literal(r, b, string, &at, &len)) return;
  const char *with = string ? strings[pick(r, TN_ARRAY_LEN(strings))] : numbers[pick(r, TN_ARRAY_LEN(numbers))];
  if (string && tn_rng_below(r, 3) == 0) { /* another string of the same text: swaps handle names */
    size_t at2, len2;
    if (find_literal(r, b, true, &at2, &len2) && len2 < 64) {
      char tmp[64];
      memcpy(tmp, b->p + at2, len2);
      b_erase(b, at, len);
      b_insert(b, at, tmp, len2);
      return;
    }
  }
  b_erase(b, at, len);
  b_insert(b, at, with, strlen(with));
}

/* Drops, duplicates or swaps elements of a random array of the JSON tree. */
static int collect_arrays(cJSON *j, cJSON **out, int n, int max) {
  for (; j && n < max; j = j->next) {
    if (cJSON_IsArray(j)) out[n++] = j;
    n = collect_arrays(j->child, out, n, max);
  }
  return n;
}

/* Relinks an array's children from v[0..n) (cJSON: child->prev is the tail). */
static void relink(cJSON *arr, cJSON **v, int n) {
  arr->child = n ? v[0] : NULL;
  for (int i = 0; i < n; i++) {
    v[i]->prev = v[i ? i - 1 : n - 1];
    v[i]->next = i + 1 < n ? v[i + 1] : NULL;
  }
}

static void mutate_tree(tn_rng_t *r, bytes_t *b) {
  cJSON *root = cJSON_ParseWithLength(b->p, b->n);
  cJSON *arrays[1024], *v[257];
  int na = root ? collect_arrays(root, arrays, 0, 1024) : 0, n = 0;
  cJSON *arr = na ? arrays[pick(r, (size_t)na)] : NULL;
  for (cJSON *c = arr ? arr->child : NULL; c && n < 256; c = c->next) v[n++] = c;
  if (n && (!arr->child || !v[n - 1]->next)) { /* arrays longer than 256 stay as they are */
    int k = (int)pick(r, (size_t)n), k2 = (int)pick(r, (size_t)n);
    switch (tn_rng_below(r, 3)) {
    case 0: { /* drop */
      cJSON *gone = v[k];
      memmove(v + k, v + k + 1, sizeof *v * (size_t)(n - k - 1));
      relink(arr, v, --n);
      gone->next = gone->prev = NULL;
      cJSON_Delete(gone);
      break;
    }
    case 1: /* duplicate */
      memmove(v + k + 1, v + k, sizeof *v * (size_t)(n - k));
      v[k] = cJSON_Duplicate(v[k + 1], 1);
      relink(arr, v, ++n);
      break;
    default: { /* swap */
      cJSON *t = v[k];
      v[k] = v[k2], v[k2] = t;
      relink(arr, v, n);
    }
    }
    char *text = cJSON_PrintUnformatted(root);
    if (text && strlen(text) < FUZZ_MAX_BYTES) b_assign(b, text, strlen(text));
    cJSON_free(text);
  }
  cJSON_Delete(root);
}

static void mutate_once(tn_rng_t *r, bytes_t *b, const seeds_t *s) {
  size_t pos = pick(r, b->n + 1);
  uint64_t op = tn_rng_below(r, 12);
  if (fz_mutate_bytes(r, b, s, op, pos)) return;
  switch (op) {
  case 1: { /* insert a JSON token */
    const char *t = tokens[pick(r, TN_ARRAY_LEN(tokens))];
    b_insert(b, pos, t, strlen(t));
    break;
  }
  case 5: case 6: replace_literal(r, b, false); break;
  case 7: case 8: replace_literal(r, b, true); break;
  default: mutate_tree(r, b); break;
  }
}

static void run_one(tn_rng_t *r, const target_t *tg, int ntg, const bytes_t *in, stats_t *st) {
  fzc_trace_one(tg, ntg, in, tn_rng_next(r), st);
}

/* ---- main ------------------------------------------------------------------------ */

static const char builtin_seed[] =
    "{\"version\": 1, \"trace\": [[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]],"
    " [\"GetLoops\", [\"b0\"], [], [\"l1\"]],"
    " [\"SamplePerfectTile\", [\"l1\"], [2, 16], [\"v2\", \"v3\"]],"
    " [\"Split\", [\"l1\", \"v2\", \"v3\"], [1, 0], [\"l4\", \"l5\"]]], [[2, [4, 16]]]]}";

int main(int argc, char **argv) {
  double seconds = 10;
  uint64_t seed = 1;
  seeds_t s = {NULL, 0};
  if (fz_args(argc, argv, "fuzz_trace", ".json", FUZZ_MAX_BYTES, builtin_seed, &seconds, &seed, &s) != 0) return 2;
  target_t tg[FZC_NTARGETS];
  if (fzc_trace_targets(tg) != 0) return 2;
  tn_rng_t r;
  tn_rng_seed(&r, seed);
  stats_t st = {0};
  double start = tn_now();
  for (int i = 0; i < s.n; i++) run_one(&r, tg, FZC_NTARGETS, &s.v[i], &st); /* every seed as is */
  bytes_t in = {NULL, 0, 0};
  while (tn_now() - start < seconds && st.failures < 10) {
    const bytes_t *base = &s.v[pick(&r, (size_t)s.n)];
    b_assign(&in, base->p, base->n);
    for (int m = 1 + (int)tn_rng_below(&r, 4); m > 0; m--) mutate_once(&r, &in, &s);
    run_one(&r, tg, FZC_NTARGETS, &in, &st);
  }
  printf("fuzz_trace: %ld inputs in %.1f s, %ld parsed, %ld replayed, %ld crashes (%ld evaluated, %d seeds)\n",
         st.inputs, tn_now() - start, st.parsed, st.replayed, st.failures, st.evaluated, s.n);
  free(in.p);
  fz_seeds_free(&s);
  fzc_trace_targets_free(tg);
  return st.failures ? 1 : 0;
}
