/* fuzzcheck_trace.h — what the trace fuzzers check on each input: a trace
 * that parses re-serialises to a fixed point, and replays on matmul and
 * vector_add to a function that computes what the unscheduled one does;
 * a rejected one fails with a known message.  Shared by the mutation fuzzer
 * (tests/fuzz_trace.c) and the libFuzzer target (fuzz/fuzz_trace.c). */
#ifndef TUNED_FUZZCHECK_TRACE_H
#define TUNED_FUZZCHECK_TRACE_H

#include <cJSON.h>

#include "fuzzutil.h"
#include "schedule/schedule.h"
#include "tuned_config.h"

#define MAX_EVAL_ITERS 2000000.0   /* evaluate scheduled functions up to this many iterations */


typedef struct stats {
  long inputs, parsed, replayed, evaluated, failures;
} stats_t;

/* A replay target: the unscheduled function and its reference outputs. */
typedef struct target {
  ir_workload_t *w;
  ir_data_t *ref;
} target_t;

static inline void fail(stats_t *st, const bytes_t *in, const char *what, const char *detail) {
  st->failures++;
  fz_report("fuzz_trace", in, what, detail);
}

static inline char *print_ir(const ir_func_t *f) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  return tn_buf_take(&b);
}

/* The scheduled function computes what the original does. */
static inline void check_outputs(const target_t *tg, const ir_func_t *f, const bytes_t *in, stats_t *st) {
  if (fz_iterations(f->root) > MAX_EVAL_ITERS) return;
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  if (ir_data_new(f, 1, (size_t)64 << 20, &d, &err) != 0) {
    fail(st, in, "ir_data_new failed on a scheduled function", err.msg);
    return;
  }
  if (ir_eval(f, d, &err) != 0) {
    fail(st, in, "ir_eval failed on a replayed schedule", err.msg);
  } else {
    st->evaluated++;
    for (int i = 0; i < f->nparams; i++) {
      double e = f->params[i]->role == IR_BUF_OUTPUT ? ir_rel_l2_error(tg->ref->vals[i], d->vals[i], d->sizes[i]) : 0;
      if (!(e <= 1e-12)) fail(st, in, "a replayed schedule computes different outputs", f->params[i]->name);
    }
  }
  ir_data_free(d);
}

/* The trace a replay recorded (decisions filled in) replays to the same IR. */
static inline void check_rereplay(const target_t *tg, const sch_t *s, uint64_t seed, const bytes_t *in, stats_t *st) {
  sch_t *again = NULL;
  tn_err_t err = {0};
  if (sch_replay(tg->w->func, sch_get_trace(s), seed + 1, &again, &err) != 0) {
    fail(st, in, "the trace recorded by a replay does not replay", err.msg);
    return;
  }
  char *a = print_ir(sch_func(s)), *b = print_ir(sch_func(again));
  if (strcmp(a, b) != 0) fail(st, in, "replaying the recorded trace gives different IR", b);
  free(a), free(b);
  sch_free(again);
}

static inline void replay_on(const target_t *tg, const sch_trace_t *t, uint64_t seed, const bytes_t *in, stats_t *st) {
  sch_t *s = (sch_t *)1;
  tn_err_t err = {0};
  int rc = sch_replay(tg->w->func, t, seed, &s, &err);
  if (rc != 0) {
    if (rc >= 0 || s || strncmp(err.msg, "instruction ", 12) != 0) fail(st, in, "bad replay failure", err.msg);
    return;
  }
  st->replayed++;
  check_rereplay(tg, s, seed, in, st);
  check_outputs(tg, sch_func(s), in, st);
  sch_free(s);
}

/* Writing what was parsed and parsing it again is a fixed point. */
static inline void check_rewrite(const sch_trace_t *t, const bytes_t *in, stats_t *st) {
  char *j1 = sch_trace_to_json(t);
  sch_trace_t *t2 = NULL;
  tn_err_t err = {0};
  if (sch_trace_from_json(j1, strlen(j1), &t2, &err) != 0) {
    fail(st, in, "the writer's JSON does not parse", err.msg);
  } else {
    char *j2 = sch_trace_to_json(t2);
    if (strcmp(j1, j2) != 0) fail(st, in, "to_json(from_json(to_json(t))) differs from to_json(t)", j2);
    free(j2);
  }
  sch_trace_free(t2);
  free(j1);
}

static inline bool known_error(const char *msg) {
  static const char *const prefixes[] = {"trace JSON: ", "trace: ", "instruction ", "decision "};
  for (size_t i = 0; i < TN_ARRAY_LEN(prefixes); i++)
    if (strncmp(msg, prefixes[i], strlen(prefixes[i])) == 0) return true;
  return false;
}

/* Parses `in` as a trace and checks it on the ntg targets (replay seed `seed`). */
static inline void fzc_trace_one(const target_t *tg, int ntg, const bytes_t *in, uint64_t seed, stats_t *st) {
  sch_trace_t *t = (sch_trace_t *)1;
  tn_err_t err = {0};
  st->inputs++;
  int rc = sch_trace_from_json(in->p ? in->p : "", in->n, &t, &err);
  if (rc != 0) {
    /* "cannot match" is the parser contradicting itself (an internal error); a
     * prefix, for the input itself may hold those words and be echoed */
    if (rc != TN_EINVAL || t || !known_error(err.msg) || strncmp(err.msg, "trace JSON: cannot match ", 25) == 0)
      fail(st, in, "bad parse failure", err.msg);
    return;
  }
  st->parsed++;
  check_rewrite(t, in, st);
  for (int i = 0; i < ntg; i++) replay_on(&tg[i], t, seed, in, st);
  sch_trace_free(t);
}

static inline int load_target(const char *name, const ir_param_set_t *ovr, int novr, target_t *tg) {
  char path[1024];
  snprintf(path, sizeof path, "%s/workloads/%s.tw", TUNED_SOURCE_ROOT, name);
  tn_err_t err = {0};
  if (ir_workload_load(path, ovr, novr, &tg->w, &err) != 0 ||
      ir_data_new(tg->w->func, 1, (size_t)64 << 20, &tg->ref, &err) != 0 || ir_eval(tg->w->func, tg->ref, &err) != 0) {
    fprintf(stderr, "fuzz_trace: %s: %s\n", path, err.msg);
    return -1;
  }
  return 0;
}

/* The replay targets: matmul 16x16x16 and vector_add 64 with their reference outputs. */
#define FZC_NTARGETS 2
static inline int fzc_trace_targets(target_t tg[FZC_NTARGETS]) {
  static const ir_param_set_t mm[] = {{"M", 16}, {"N", 16}, {"K", 16}}, va[] = {{"N", 64}};
  memset(tg, 0, sizeof(target_t) * FZC_NTARGETS);
  return load_target("matmul", mm, 3, &tg[0]) != 0 || load_target("vector_add", va, 1, &tg[1]) != 0 ? -1 : 0;
}

static inline void fzc_trace_targets_free(target_t tg[FZC_NTARGETS]) {
  for (int i = 0; i < FZC_NTARGETS; i++) ir_data_free(tg[i].ref), ir_workload_free(tg[i].w);
}

#endif
