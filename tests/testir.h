/* testir.h — shared Check helpers for the IR and schedule suites: loading a
 * workload with overrides, printing IR, comparing a function's outputs with a
 * reference through the evaluator, golden files and (with schedule.h
 * included first) schedule handles and the error-path assertion. */
#ifndef TUNED_TESTIR_H
#define TUNED_TESTIR_H

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "testutil.h"

/* Loads workloads/<name>.tw with the overrides ov[0..n). */
static inline ir_workload_t *tu_load(const char *name, const ir_param_set_t *ov, int n) {
  char path[512];
  snprintf(path, sizeof path, "%s/workloads/%s.tw", TUNED_SOURCE_ROOT, name);
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  int rc = ir_workload_load(path, ov, n, &w, &err);
  ck_assert_msg(rc == TN_OK, "%s: %s", path, err.msg);
  return w;
}

/* TU_LOAD("matmul", {"M", 4}, {"K", 8}): tu_load with literal overrides. */
#define TU_LOAD(name, ...)                                   \
  tu_load((name), (ir_param_set_t[]){__VA_ARGS__},           \
          (int)(sizeof((ir_param_set_t[]){__VA_ARGS__}) / sizeof(ir_param_set_t)))

/* Loads workloads/<name>.tw with "K=V,K=V" (or "K=V K=V") overrides; NULL or
 * "" for none. */
static inline ir_workload_t *tu_load_sets(const char *name, const char *sets) {
  ir_param_set_t ov[16];
  int n = 0;
  tn_arena_t *a = tn_arena_new();
  tn_err_t err = {0};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", sets ? sets : "");
  for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
    ck_assert_int_lt(n, 16);
    ck_assert_msg(ir_param_set_parse(tok, a, &ov[n++], &err) == TN_OK, "%s", err.msg);
  }
  ir_workload_t *w = tu_load(name, ov, n);
  tn_arena_free(a);
  return w;
}

/* Parses workload source text (named "t.tw" in messages). */
static inline ir_workload_t *tu_parse(const char *text) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  int rc = ir_workload_parse("t.tw", text, strlen(text), NULL, 0, &w, &err);
  ck_assert_msg(rc == 0, "parsing: %s", err.msg);
  return w;
}

/* The TVMScript text of f (free it). */
static inline char *tu_ir_text(const ir_func_t *f) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  return tn_buf_take(&b);
}

/* Evaluates ref and got on the same inputs (from `seed`) and returns the
 * largest relative L2 error over the outputs; both must evaluate and there
 * must be at least one output. */
static inline double tu_output_error(const ir_func_t *ref, const ir_func_t *got, uint64_t seed) {
  ir_data_t *a = NULL, *b = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_data_new(ref, seed, (size_t)1 << 28, &a, &err) == 0, "data: %s", err.msg);
  ck_assert_msg(ir_data_new(got, seed, (size_t)1 << 28, &b, &err) == 0, "data: %s", err.msg);
  ck_assert_msg(ir_eval(ref, a, &err) == 0, "reference: %s", err.msg);
  if (ir_eval(got, b, &err) != 0) ck_abort_msg("scheduled: %s\n%s", err.msg, tu_ir_text(got));
  double worst = 0;
  int outputs = 0;
  for (int i = 0; i < ref->nparams; i++) {
    if (ref->params[i]->role != IR_BUF_OUTPUT) continue;
    outputs++;
    double e = ir_rel_l2_error(a->vals[i], b->vals[i], a->sizes[i]);
    if (!(e <= worst)) worst = e; /* NaN sticks */
  }
  ck_assert_int_gt(outputs, 0);
  ir_data_free(a);
  ir_data_free(b);
  return worst;
}

/* Every output of got matches ref's (relative L2 error <= 1e-12). */
static inline void tu_assert_same_outputs(const ir_func_t *ref, const ir_func_t *got, uint64_t seed) {
  double e = tu_output_error(ref, got, seed);
  if (!(e <= 1e-12)) ck_abort_msg("outputs differ (rel. L2 error %g) for\n%s", e, tu_ir_text(got));
}

/* Line number (1-based) of the first difference, 0 if equal. */
static inline int tu_first_diff_line(const char *a, const char *b) {
  int line = 1;
  for (; *a && *a == *b; a++, b++)
    if (*a == '\n') line++;
  return *a == *b ? 0 : line;
}

static inline char *tu_line_at(const char *s, int line) {
  for (int l = 1; l < line && s; l++) {
    s = strchr(s, '\n');
    if (s) s++;
  }
  if (!s) return strdup("<end of text>");
  return strndup(s, strcspn(s, "\n"));
}

/* Compares text with the golden file at `path`, or writes the file when
 * TUNED_UPDATE_GOLDEN=1. */
static inline void tu_check_golden(const char *path, const char *text) {
  const char *update = getenv("TUNED_UPDATE_GOLDEN");
  if (update && strcmp(update, "1") == 0) {
    FILE *fp = fopen(path, "w");
    ck_assert_msg(fp != NULL, "cannot write %s", path);
    fputs(text, fp);
    ck_assert_int_eq(fclose(fp), 0);
    return;
  }
  char *want = NULL;
  size_t len;
  tn_err_t err = {0};
  int rc = tn_read_file(path, 1 << 24, &want, &len, &err);
  ck_assert_msg(rc == 0, "%s (run with TUNED_UPDATE_GOLDEN=1 to create it)", err.msg);
  int line = tu_first_diff_line(want, text);
  if (line)
    ck_abort_msg("%s differs at line %d:\n  golden: %s\n  got:    %s\nfull output:\n%s", path, line,
                 tu_line_at(want, line), tu_line_at(text, line), text);
  free(want);
}

/* ---- structural hashes ------------------------------------------------------ */

/* Whether f's identity (ir_func_hash) is h. */
static inline bool tu_hash_is(const ir_func_t *f, const char *h) {
  char x[TN_ID_SIZE];
  ir_func_hash(f, x);
  return strcmp(x, h) == 0;
}

/* Whether f and g have one identity. */
static inline bool tu_same_hash(const ir_func_t *f, const ir_func_t *g) {
  char x[TN_ID_SIZE];
  ir_func_hash(g, x);
  return tu_hash_is(f, x);
}

#ifdef TUNED_SCHEDULE_H
/* ---- schedules (include schedule/schedule.h before this header) ---------- */

static inline sch_rv_t tu_block(sch_t *s, const char *name) {
  sch_rv_t b;
  tn_err_t err = {0};
  ck_assert_msg(sch_get_block(s, name, &b, &err) == 0, "get_block %s: %s", name, err.msg);
  return b;
}

static inline int tu_loops(sch_t *s, sch_rv_t b, sch_rv_t *out) {
  int n = 0;
  tn_err_t err = {0};
  ck_assert_msg(sch_get_loops(s, b, out, &n, &err) == 0, "get_loops: %s", err.msg);
  return n;
}

/* Splits `loop` into [None, inner]; out gets the two loops. */
static inline void tu_split2(sch_t *s, sch_rv_t loop, int64_t inner, sch_rv_t *out) {
  sch_arg_t fs[2] = {sch_arg_none(), sch_arg_int(inner)};
  tn_err_t err = {0};
  ck_assert_msg(sch_split(s, loop, fs, 2, out, &err) == 0, "split: %s", err.msg);
}

/* The printed function of s contains `want`. */
static inline void tu_assert_text_has(const sch_t *s, const char *want) {
  char *t = tu_ir_text(sch_func(s));
  ck_assert_msg(strstr(t, want), "expected \"%s\" in:\n%s", want, t);
  free(t);
}

/* The printed function of s is exactly `want`. */
static inline void tu_assert_text(const sch_t *s, const char *want) {
  char *t = tu_ir_text(sch_func(s));
  ck_assert_str_eq(t, want);
  free(t);
}

/* `call` (which writes its error to err_) succeeds. */
#define TU_OK(call)                                             \
  do {                                                          \
    tn_err_t err_ = {0};                                        \
    int rc_ = (call);                                           \
    ck_assert_msg(rc_ == 0, "%s failed: %s", #call, err_.msg); \
  } while (0)

/* What must stay as it was when a primitive fails. */
typedef struct tu_snap {
  char *text;
  char hash[TN_ID_SIZE];
  int ntrace;
} tu_snap_t;

static inline tu_snap_t tu_snapshot(const sch_t *s) {
  tu_snap_t t = {tu_ir_text(sch_func(s)), "", sch_get_trace(s)->n};
  ir_func_hash(sch_func(s), t.hash);
  return t;
}

/* rc is an error whose message contains `what`, and the function (and, when
 * check_trace, the trace length) is as in `before` (freed here). */
static inline void tu_assert_failed(const sch_t *s, tu_snap_t before, bool check_trace, int rc, const char *call,
                                    const tn_err_t *err, const char *what) {
  ck_assert_msg(rc < 0, "%s succeeded, expected an error with \"%s\"", call, what);
  ck_assert_msg(strstr(err->msg, what), "message \"%s\" lacks \"%s\"", err->msg, what);
  char *after = tu_ir_text(sch_func(s));
  ck_assert_str_eq(before.text, after);
  ck_assert_msg(tu_hash_is(sch_func(s), before.hash), "%s changed the function on error", call);
  if (check_trace) ck_assert_int_eq(sch_get_trace(s)->n, before.ntrace);
  free(before.text);
  free(after);
}

/* `call` (which writes its error to err_) must fail with a message containing
 * `what` and leave the function text (and, when check_trace, the trace
 * length) as they were. */
#define TU_FAILS_(s, call, what, check_trace)                                        \
  do {                                                                               \
    tu_snap_t snap_ = tu_snapshot(s);                                                \
    tn_err_t err_ = {0};                                                             \
    int rc_ = (call);                                                                \
    tu_assert_failed((s), snap_, (check_trace), rc_, #call, &err_, (what));          \
  } while (0)

/* Through the public API (sch_apply), which records nothing on failure. */
#define TU_FAILS(s, call, what) TU_FAILS_(s, call, what, true)
/* A primitive called directly (no sch_apply snapshot). */
#define TU_PRIM_FAILS(s, call, what) TU_FAILS_(s, call, what, false)
#endif

#endif
