/* tunectl_tune.c — `tunectl tune`: tunes one workload in this process (no
 * daemon), shows progress on stderr, stops cleanly on Ctrl-C, and ends with
 * a summary: counts by status, the best kernel (re-measured), the
 * unscheduled program (measured once per workload and target, kept in the
 * database) and the best trace. */
#include <cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/tunectl.h"
#include "client/tunectl_tune.h"
#include "codegen/codegen.h"
#include "measure/measure.h"
#include "sampler/sampler.h"
#include "schedule/schedule.h"
#include "search/search.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  if (interrupted) _exit(130); /* second Ctrl-C: quit now */
  interrupted = 1;
  static const char msg[] = "\ntunectl tune: stopping (the running candidate is abandoned; Ctrl-C again to quit now)\n";
  ssize_t rc = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)rc;
}

static bool should_stop(void *ctx) {
  (void)ctx;
  return interrupted != 0;
}

typedef struct ui {
  const tct_args_t *a;
  bool tty;
  bool line_open; /* a live line is on the terminal */
  double t0;
  /* --json: the progress after every batch, every candidate (the tuning
   * curve) and the verified ones' traces, for the summary */
  cJSON *batches, *candidates, *verified;
} ui_t;

/* v, or null when v is 0 (not measured). */
static cJSON *num_or_null(double v) {
  return v > 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

/* After every measured batch: the search's state, for --json's "batches". */
static void add_batch(ui_t *u, const srch_progress_t *p) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddNumberToObject(b, "trials_done", p->trials_done);
  cJSON_AddItemToObject(b, "best_median_secs", num_or_null(p->best_secs));
  cJSON_AddItemToObject(b, "best_gflops", num_or_null(p->best_secs > 0 ? p->best_gflops : 0));
  cJSON_AddNumberToObject(b, "elapsed_s", p->elapsed_s);
  cJSON *f = cJSON_AddObjectToObject(b, "status_counts");
  for (int s = 0; s < MS_STATUS__COUNT; s++) cJSON_AddNumberToObject(f, ms_status_name(s), p->failures[s]);
  cJSON_AddItemToArray(u->batches, b);
}

/* Every measured candidate, for --json's "candidates" and "top". */
static void on_batch(const srch_record_t *recs, int n, void *ctx) {
  ui_t *u = ctx;
  if (!u->a->json) return;
  for (int i = 0; i < n; i++) {
    const ms_result_t *r = recs[i].result;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "trial", cJSON_GetArraySize(u->candidates) + 1);
    cJSON_AddStringToObject(c, "status", ms_status_name(r->status));
    cJSON_AddItemToObject(c, "median_secs", num_or_null(r->median_secs));
    cJSON_AddItemToObject(c, "gflops", num_or_null(r->median_secs > 0 ? r->gflops : 0));
    cJSON_AddNumberToObject(c, "elapsed_s", tn_now() - u->t0);
    cJSON_AddItemToObject(c, "record_id", recs[i].db_id > 0 ? cJSON_CreateNumber((double)recs[i].db_id)
                                                            : cJSON_CreateNull());
    cJSON_AddItemToArray(u->candidates, c);
    if (r->status != MS_OK || r->median_secs <= 0) continue;
    cJSON *v = cJSON_Duplicate(c, true);
    cJSON *tr = cJSON_Parse(recs[i].trace_json);
    cJSON_AddItemToObject(v, "trace", tr ? tr : cJSON_CreateString(recs[i].trace_json));
    cJSON_AddItemToArray(u->verified, v);
  }
}

static int by_median(const void *a, const void *b) {
  double x = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)a, "median_secs")->valuedouble;
  double y = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)b, "median_secs")->valuedouble;
  return (x > y) - (x < y);
}

/* The k fastest verified candidates of this run (as measured in the search),
 * fastest first. */
static cJSON *top_json(cJSON *verified, int k) {
  int n = cJSON_GetArraySize(verified), i = 0;
  cJSON **v = tn_xmalloc(sizeof *v * (size_t)(n ? n : 1)), *it, *out = cJSON_CreateArray();
  cJSON_ArrayForEach(it, verified) v[i++] = it;
  qsort(v, (size_t)n, sizeof *v, by_median);
  for (i = 0; i < n && i < k; i++) cJSON_AddItemToArray(out, cJSON_Duplicate(v[i], true));
  free(v);
  return out;
}

/* After every measured batch; the re-measure and the baseline speak
 * through on_log. */
static void on_progress(const srch_progress_t *p, void *ctx) {
  ui_t *u = ctx;
  if (p->stage != SRCH_STAGE_SEARCH) return;
  if (u->a->json) add_batch(u, p);
  char best[64] = "no verified kernel yet";
  if (p->best_secs > 0) snprintf(best, sizeof best, "best %.1f GFLOP/s (%.4g ms)", p->best_gflops, p->best_secs * 1e3);
  fprintf(stderr, "%s%d/%d trials, %s, failures: build %d, run %d, timeout %d, too slow %d, wrong %d, %.0f s%s",
          u->tty ? "\r\033[K" : "", p->trials_done, p->trials_total, best, p->failures[MS_BUILD_ERROR],
          p->failures[MS_RUN_ERROR], p->failures[MS_TIMEOUT], p->failures[MS_TOO_SLOW], p->failures[MS_WRONG_RESULT],
          p->elapsed_s, u->tty ? "" : "\n");
  fflush(stderr);
  u->line_open = u->tty;
}

/* The search's messages (warm start of the cost model, re-measure,
 * baseline); debug ones are not shown. */
static void on_log(srch_log_level_t level, const char *msg, void *ctx) {
  ui_t *u = ctx;
  if (level == SRCH_LOG_DEBUG) return;
  if (u->line_open) fputc('\n', stderr);
  u->line_open = false;
  fprintf(stderr, "%s%s\n", level == SRCH_LOG_WARN ? "warning: " : "", msg);
  fflush(stderr);
}

/* The best kernel against the target's peaks (false: no peaks, no kernel). */
static bool best_roofline(const tct_args_t *a, const srch_best_t *b, tn_roofline_t *rl) {
  const ir_func_t *f = a->workload->func;
  return b->found && tn_target_roofline(a->target, ir_func_flops(f), ir_func_bytes(f), b->median_secs, rl);
}

static void print_remeasure_text(const srch_remeasure_t *rm) {
  printf("remeasure  %d candidates, %d rounds (re-measured/first ms):", rm->n, rm->rounds);
  for (int i = 0; i < rm->n; i++) {
    const srch_remeasured_t *x = &rm->items[i];
    if (x->status == MS_OK) printf(" %.4g/%.4g", x->median_secs * 1e3, x->first_secs * 1e3);
    else printf(" %s/%.4g", ms_status_name(x->status), x->first_secs * 1e3);
  }
  printf("\n");
}

static void print_text(const tct_args_t *a, const srch_result_t *r) {
  const srch_best_t *b = &r->best[0];
  const srch_baseline_t *nv = &r->baseline[0];
  const int *f = r->failures;
  printf("workload   %s (", a->workload->name);
  for (int i = 0; i < a->workload->nparams; i++)
    printf("%s%s=%lld", i ? ", " : "", a->workload->params[i].name, (long long)a->workload->params[i].value);
  printf("), %.4g GFLOP per run\n", ir_func_flops(a->workload->func) * 1e-9);
  printf("target     %s\n", a->target->name);
  printf("trials     %d%s: ok %d, build error %d, run error %d, timeout %d, too slow %d, wrong result %d\n",
         r->trials_done, r->stopped ? " (stopped)" : "", f[MS_OK], f[MS_BUILD_ERROR], f[MS_RUN_ERROR], f[MS_TIMEOUT],
         f[MS_TOO_SLOW], f[MS_WRONG_RESULT]);
  tn_roofline_t rl;
  char line[256];
  if (b->found && b->remeasured)
    printf("best       %.4g ms median, %.1f GFLOP/s (re-measured; first measured %.4g ms, %.1f GFLOP/s)\n",
           b->median_secs * 1e3, b->gflops, b->first_secs * 1e3, b->gflops * b->median_secs / b->first_secs);
  else if (b->found) printf("best       %.4g ms median, %.1f GFLOP/s\n", b->median_secs * 1e3, b->gflops);
  else printf("best       none (no verified candidate)\n");
  if (!b->found && r->first_failure[0].status != MS_OK)
    printf("failed     first: trial %d, %s\n", r->first_failure[0].trial, ms_status_name(r->first_failure[0].status));
  if (r->remeasure[0].n > 0) print_remeasure_text(&r->remeasure[0]);
  if (best_roofline(a, b, &rl)) {
    tn_roofline_text(&rl, line, sizeof line);
    printf("roofline   %s\n", line);
  }
  if (!nv->have) printf("naive      not measured (%s)\n", a->no_baseline ? "--no-baseline" : "stopped");
  else if (nv->status == MS_OK)
    printf("naive      %.4g ms median, %.2f GFLOP/s%s\n", nv->median_secs * 1e3, nv->gflops,
           nv->cached ? " (measured before, from the database)" : "");
  else printf("naive      %s: %s\n", ms_status_name(nv->status), nv->error);
  if (b->found && nv->have && nv->status == MS_OK)
    printf("speed-up   %.1fx over the naive program\n", nv->median_secs / b->median_secs);
  printf("elapsed    %.1f s; search CPU s: sampling %.2f, mutation %.2f, features %.2f, prediction %.2f\n",
         r->elapsed_s, r->phase_s[0], r->phase_s[1], r->phase_s[2], r->phase_s[3]);
  if (b->found) printf("\nbest trace:\n%s\n", b->trace_json);
}

static cJSON *remeasure_json(const srch_remeasure_t *rm) {
  if (rm->n == 0) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "rounds", rm->rounds);
  cJSON *arr = cJSON_AddArrayToObject(o, "candidates");
  for (int i = 0; i < rm->n; i++) {
    const srch_remeasured_t *x = &rm->items[i];
    cJSON *c = cJSON_CreateObject();
    if (x->db_id > 0) cJSON_AddNumberToObject(c, "record_id", (double)x->db_id);
    cJSON_AddStringToObject(c, "status", ms_status_name(x->status));
    cJSON_AddNumberToObject(c, "first_median_secs", x->first_secs);
    if (x->status == MS_OK) cJSON_AddNumberToObject(c, "median_secs", x->median_secs);
    else cJSON_AddNullToObject(c, "median_secs");
    cJSON_AddNumberToObject(c, "samples", x->nsamples);
    cJSON_AddItemToArray(arr, c);
  }
  return o;
}

static cJSON *naive_json(const srch_baseline_t *nv) {
  if (!nv->have) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status", ms_status_name(nv->status));
  if (nv->status == MS_OK) {
    cJSON_AddNumberToObject(o, "median_secs", nv->median_secs);
    cJSON_AddNumberToObject(o, "gflops", nv->gflops);
  } else {
    cJSON_AddStringToObject(o, "error", nv->error);
  }
  cJSON_AddBoolToObject(o, "cached", nv->cached);
  return o;
}

static void print_json_summary(const tct_args_t *a, const srch_result_t *r, ui_t *u) {
  const srch_best_t *b = &r->best[0];
  const srch_baseline_t *nv = &r->baseline[0];
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "workload", a->workload->name);
  cJSON_AddStringToObject(j, "target", a->target->name);
  cJSON_AddNumberToObject(j, "trials", r->trials_done);
  cJSON_AddBoolToObject(j, "stopped", r->stopped);
  cJSON *counts = cJSON_AddObjectToObject(j, "status_counts");
  for (int s = 0; s < MS_STATUS__COUNT; s++) cJSON_AddNumberToObject(counts, ms_status_name(s), r->failures[s]);
  if (b->found) {
    cJSON *best = cJSON_AddObjectToObject(j, "best");
    cJSON_AddNumberToObject(best, "median_secs", b->median_secs);
    cJSON_AddNumberToObject(best, "gflops", b->gflops);
    cJSON_AddBoolToObject(best, "remeasured", b->remeasured);
    cJSON_AddNumberToObject(best, "first_median_secs", b->first_secs);
    cJSON_AddNumberToObject(best, "first_gflops", b->gflops * b->median_secs / b->first_secs);
    tn_roofline_t rl;
    if (best_roofline(a, b, &rl)) tn_roofline_add_json(&rl, cJSON_AddObjectToObject(best, "roofline"));
    if (b->db_id > 0) cJSON_AddNumberToObject(best, "record_id", (double)b->db_id);
    cJSON *tr = cJSON_Parse(b->trace_json);
    cJSON_AddItemToObject(best, "trace", tr ? tr : cJSON_CreateString(b->trace_json));
  } else {
    cJSON_AddNullToObject(j, "best");
  }
  const srch_failure_t *ff = &r->first_failure[0];
  if (ff->status != MS_OK) {
    cJSON *o = cJSON_AddObjectToObject(j, "first_failure");
    cJSON_AddNumberToObject(o, "trial", ff->trial);
    cJSON_AddStringToObject(o, "status", ms_status_name(ff->status));
    cJSON_AddStringToObject(o, "error", ff->error ? ff->error : "");
  } else {
    cJSON_AddNullToObject(j, "first_failure");
  }
  cJSON_AddItemToObject(j, "remeasure", remeasure_json(&r->remeasure[0]));
  cJSON_AddItemToObject(j, "naive", naive_json(nv));
  if (b->found && nv->have && nv->status == MS_OK) cJSON_AddNumberToObject(j, "speedup", nv->median_secs / b->median_secs);
  cJSON_AddNumberToObject(j, "elapsed_s", r->elapsed_s);
  cJSON *ph = cJSON_AddObjectToObject(j, "search_cpu_s");
  static const char *const names[] = {"sampling", "mutation", "features", "prediction"};
  for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(ph, names[i], r->phase_s[i]);
  cJSON_AddItemToObject(j, "top", top_json(u->verified, a->top > 0 ? a->top : 5));
  cJSON_AddItemToObject(j, "batches", u->batches);
  cJSON_AddItemToObject(j, "candidates", u->candidates);
  u->batches = u->candidates = NULL;
  char *s = cJSON_Print(j);
  puts(s);
  free(s);
  cJSON_Delete(j);
}

static int parse_choices(const tct_args_t *a, srch_opts_t *o) {
  o->max_trials = a->trials;
  if (a->strategy && strcmp(a->strategy, "evolutionary") != 0 && strcmp(a->strategy, "replay") != 0) {
    fprintf(stderr, "tunectl tune: --strategy wants evolutionary or replay, got '%s'\n", a->strategy);
    return -1;
  }
  if (a->model && strcmp(a->model, "xgb") != 0 && strcmp(a->model, "random") != 0) {
    fprintf(stderr, "tunectl tune: --model wants xgb or random, got '%s'\n", a->model);
    return -1;
  }
  o->strategy = a->strategy && strcmp(a->strategy, "replay") == 0 ? SRCH_REPLAY_TRACE : SRCH_EVOLUTIONARY;
  o->model = a->model && strcmp(a->model, "random") == 0 ? SRCH_MODEL_RANDOM : SRCH_MODEL_XGB;
  o->seed = a->seed;
  o->db_path = a->db;
  return 0;
}

int tct_tune(const tct_args_t *a) {
  srch_opts_t o;
  srch_opts_default(&o);
  if (parse_choices(a, &o) < 0) return 2;
  o.no_flush = a->no_flush;
  if (a->remeasure >= 0) o.remeasure = a->remeasure;
  o.baseline = !a->no_baseline;
  o.run.min_secs = a->repeat_ms * 1e-3; /* 0: the runner's 0.1 s */
  ui_t u = {.a = a, .tty = isatty(STDERR_FILENO), .t0 = tn_now(), .batches = cJSON_CreateArray(),
            .candidates = cJSON_CreateArray(), .verified = cJSON_CreateArray()};
  struct sigaction sa = {.sa_handler = on_sigint}, old;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  srch_callbacks_t cb = {.on_progress = on_progress, .on_batch = on_batch, .should_stop = should_stop, .ctx = &u,
                         .on_log = on_log};
  srch_task_t task = {.workload = a->workload, .weight = 1};
  srch_result_t r;
  tn_err_t err = {0};
  fprintf(stderr, "tuning %s on %s: %d trials, %s search, %s model%s%s\n", a->workload->name, a->target->name,
          o.max_trials, o.strategy == SRCH_REPLAY_TRACE ? "replay-trace" : "evolutionary",
          o.model == SRCH_MODEL_RANDOM ? "random" : "xgboost", a->db ? ", database " : "", a->db ? a->db : "");
  int rc = srch_tune(&task, 1, a->target, &o, &cb, &r, &err);
  if (u.line_open) fputc('\n', stderr);
  int status = 1;
  if (rc < 0) {
    fprintf(stderr, "tunectl tune: %s\n", err.msg);
  } else {
    if (a->json) print_json_summary(a, &r, &u);
    else print_text(a, &r);
    status = r.stopped ? 130 : r.best[0].found ? 0 : 1;
    const srch_failure_t *ff = &r.first_failure[0];
    if (status == 1)
      tc_say_no_kernel("tune", a->workload->name, r.trials_done, ff->status != MS_OK ? ms_status_name(ff->status) : NULL,
                       ff->trial, ff->error);
  }
  cJSON_Delete(u.batches);
  cJSON_Delete(u.candidates);
  cJSON_Delete(u.verified);
  srch_result_free(&r);
  sigaction(SIGINT, &old, NULL);
  return status;
}
