/* fuzzcheck_parse.h — what the workload-parser fuzzers check on each input:
 * an accepted workload prints, hashes, copies, counts and (when small)
 * evaluates; a rejected one has a negative code and a FILE:LINE:COL message.
 * Shared by the mutation fuzzer (tests/fuzz_parse.c) and the libFuzzer
 * target (fuzz/fuzz_workload.c). */
#ifndef TUNED_FUZZCHECK_PARSE_H
#define TUNED_FUZZCHECK_PARSE_H

#include "fuzzutil.h"

#define MAX_EVAL_ELEMENTS 4096     /* evaluate workloads with at most this many elements */
#define MAX_EVAL_ITERS    100000.0 /* ... and at most this many loop iterations */

typedef struct stats {
  long inputs, parsed, evaluated, failures;
} stats_t;

static inline int64_t total_elements(const ir_func_t *f) {
  int64_t n = 0;
  for (int i = 0; i < f->nparams; i++) n += ir_buffer_numel(f->params[i]);
  const ir_block_t *root = ir_func_root(f);
  for (int i = 0; i < root->nallocs; i++) n += ir_buffer_numel(root->allocs[i]);
  return n;
}

static inline void fail(stats_t *st, const bytes_t *in, const char *what, const char *detail) {
  st->failures++;
  fz_report("fuzz_parse", in, what, detail);
}

/* Whether TVMScript carries all of f that the hash sees: no const inputs
 * and only default value ranges (TVMScript has neither). */
static inline bool tvmscript_exact(const ir_func_t *f) {
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    double lo = ir_dtype_is_float(b->dtype) ? -1 : -8;
    if (b->is_const || b->init_lo != lo || b->init_hi != -lo) return false;
  }
  return true;
}

/* The function as TVMScript, imported back: the same hash, or (names that
 * are Python's own words) a positioned error; never a crash. */
static inline void round_trip(const ir_func_t *f, const bytes_t *in, stats_t *st) {
  tn_buf_t py, tw;
  tn_buf_init(&py);
  tn_buf_init(&tw);
  ir_print_tvmscript(f, &py);
  tn_err_t err = {0};
  ir_workload_t *back = NULL;
  char h[TN_ID_SIZE], hb[TN_ID_SIZE];
  if (ir_tvmscript_import("fuzz.py", tn_buf_str(&py), strlen(tn_buf_str(&py)), &tw, &err) == 0) {
    if (ir_workload_parse("back.tw", tn_buf_str(&tw), strlen(tn_buf_str(&tw)), NULL, 0, &back, &err) != 0)
      fail(st, in, "an imported workload does not parse", err.msg);
    else if (tvmscript_exact(f) && (ir_func_hash(f, h), ir_func_hash(back->func, hb), strcmp(h, hb) != 0))
      fail(st, in, "show --tvmscript | import-tvmscript changed the hash", tn_buf_str(&tw));
  } else if (strncmp(err.msg, "fuzz.py:", 8) != 0) {
    fail(st, in, "an import error without the file's name", err.msg);
  }
  ir_workload_free(back);
  tn_buf_free(&py);
  tn_buf_free(&tw);
}

/* Runs everything downstream of the parser on an accepted workload. */
static inline void exercise(const ir_workload_t *w, const bytes_t *in, stats_t *st) {
  const ir_func_t *f = w->func;
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  if (!strstr(tn_buf_str(&b), "def main")) fail(st, in, "printed function lacks 'def main'", tn_buf_str(&b));
  tn_buf_free(&b);
  round_trip(f, in, st);
  char h[TN_ID_SIZE], hc[TN_ID_SIZE];
  ir_func_hash(f, h);
  ir_func_t *copy = ir_func_copy(f);
  ir_func_hash(copy, hc);
  if (strcmp(h, hc) != 0) fail(st, in, "the copy of a function hashes differently", w->name);
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
static inline void check_error(int rc, const ir_workload_t *w, const tn_err_t *err, const bytes_t *in, stats_t *st) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "fuzz.tw:%d:%d: ", err->line, err->col);
  bool positioned = err->line >= 1 && err->col >= 1 && strncmp(err->msg, prefix, strlen(prefix)) == 0;
  bool override = strncmp(err->msg, "fuzz.tw: --set ", 15) == 0;
  if (rc >= 0 || w)
    fail(st, in, "an error without a negative code or with a workload", err->msg);
  else if (!positioned && !override)
    fail(st, in, "error message without position", err->msg);
}

/* Parses `in` as fuzz.tw with the overrides and checks the outcome. */
static inline void fzc_parse_one(const bytes_t *in, const ir_param_set_t *ovr, int novr, stats_t *st) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  st->inputs++;
  int rc = ir_workload_parse("fuzz.tw", in->p ? in->p : "", in->n, ovr, novr, &w, &err);
  if (rc != 0) {
    check_error(rc, w, &err, in, st);
    return;
  }
  st->parsed++;
  exercise(w, in, st);
  ir_workload_free(w);
}

#endif
