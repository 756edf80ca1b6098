/* tunectl_tune.c — `tunectl tune`: tunes one workload in this process (no
 * daemon), shows progress on stderr, stops cleanly on Ctrl-C, and ends with
 * a summary: counts by status, the best kernel, the naive program measured
 * in the same run, and the best trace. */
#include <cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  static const char msg[] = "\ntunectl tune: stopping after the current candidate (Ctrl-C again to quit now)\n";
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
} ui_t;

static void on_progress(const srch_progress_t *p, void *ctx) {
  ui_t *u = ctx;
  char best[64] = "no verified kernel yet";
  if (p->best_secs > 0) snprintf(best, sizeof best, "best %.1f GFLOP/s (%.4g ms)", p->best_gflops, p->best_secs * 1e3);
  fprintf(stderr, "%s%d/%d trials, %s, failures: build %d, run %d, timeout %d, wrong %d, %.0f s%s",
          u->tty ? "\r\033[K" : "", p->trials_done, p->trials_total, best, p->failures[MS_BUILD_ERROR],
          p->failures[MS_RUN_ERROR], p->failures[MS_TIMEOUT], p->failures[MS_WRONG_RESULT], p->elapsed_s,
          u->tty ? "" : "\n");
  fflush(stderr);
  u->line_open = u->tty;
}

static void measure_naive(const tct_args_t *a, ms_result_t *r) {
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  ms_options_t mo = {.seed = 1};
  mo.run.flush_l2 = ms_flush_by_default(a->target->kind) && !a->no_flush; /* timed as the candidates are */
  mo.run.min_secs = a->repeat_ms * 1e-3;
  ms_result_init(r);
  /* the unscheduled program as the target runs it (srch_lower with no trace) */
  if (srch_lower(a->workload->func, a->target, NULL, 1, NULL, &m, NULL, &err) < 0)
    ms_result_fail(r, MS_BUILD_ERROR, "%s", err.msg);
  else if (ms_measure(a->workload->func, a->target, &m, 1, &mo, r, &err) < 0) ms_result_fail(r, MS_RUN_ERROR, "%s", err.msg);
  cg_module_free(m);
}

/* The best kernel against the target's peaks (false: no peaks, no kernel). */
static bool best_roofline(const tct_args_t *a, const srch_best_t *b, tn_roofline_t *rl) {
  const ir_func_t *f = a->workload->func;
  return b->found && tn_target_roofline(a->target, ir_func_flops(f), ir_func_bytes(f), b->median_secs, rl);
}

static void print_text(const tct_args_t *a, const srch_result_t *r, const ms_result_t *naive) {
  const srch_best_t *b = &r->best[0];
  const int *f = r->failures;
  printf("workload   %s (", a->workload->name);
  for (int i = 0; i < a->workload->nparams; i++)
    printf("%s%s=%lld", i ? ", " : "", a->workload->params[i].name, (long long)a->workload->params[i].value);
  printf("), %.4g GFLOP per run\n", ir_func_flops(a->workload->func) * 1e-9);
  printf("target     %s\n", a->target->name);
  printf("trials     %d%s: ok %d, build error %d, run error %d, timeout %d, wrong result %d\n", r->trials_done,
         r->stopped ? " (stopped)" : "", f[MS_OK], f[MS_BUILD_ERROR], f[MS_RUN_ERROR], f[MS_TIMEOUT], f[MS_WRONG_RESULT]);
  tn_roofline_t rl;
  char line[256];
  if (b->found) printf("best       %.4g ms median, %.1f GFLOP/s\n", b->median_secs * 1e3, b->gflops);
  else printf("best       none (no verified candidate)\n");
  if (best_roofline(a, b, &rl)) {
    tn_roofline_text(&rl, line, sizeof line);
    printf("roofline   %s\n", line);
  }
  if (naive->status == MS_OK) printf("naive      %.4g ms median, %.2f GFLOP/s\n", naive->median_secs * 1e3, naive->gflops);
  else printf("naive      %s: %s\n", ms_status_name(naive->status), naive->error);
  if (b->found && naive->status == MS_OK) printf("speed-up   %.1fx over the naive program\n", naive->median_secs / b->median_secs);
  printf("elapsed    %.1f s; search CPU s: sampling %.2f, mutation %.2f, features %.2f, prediction %.2f\n",
         r->elapsed_s, r->phase_s[0], r->phase_s[1], r->phase_s[2], r->phase_s[3]);
  if (b->found) printf("\nbest trace:\n%s\n", b->trace_json);
}

static void print_json_summary(const tct_args_t *a, const srch_result_t *r, const ms_result_t *naive) {
  const srch_best_t *b = &r->best[0];
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
    tn_roofline_t rl;
    if (best_roofline(a, b, &rl)) tn_roofline_add_json(&rl, cJSON_AddObjectToObject(best, "roofline"));
    if (b->db_id > 0) cJSON_AddNumberToObject(best, "record_id", (double)b->db_id);
    cJSON *tr = cJSON_Parse(b->trace_json);
    cJSON_AddItemToObject(best, "trace", tr ? tr : cJSON_CreateString(b->trace_json));
  } else {
    cJSON_AddNullToObject(j, "best");
  }
  cJSON *nv = cJSON_AddObjectToObject(j, "naive");
  cJSON_AddStringToObject(nv, "status", ms_status_name(naive->status));
  if (naive->status == MS_OK) {
    cJSON_AddNumberToObject(nv, "median_secs", naive->median_secs);
    cJSON_AddNumberToObject(nv, "gflops", naive->gflops);
    if (b->found) cJSON_AddNumberToObject(j, "speedup", naive->median_secs / b->median_secs);
  } else {
    cJSON_AddStringToObject(nv, "error", naive->error);
  }
  cJSON_AddNumberToObject(j, "elapsed_s", r->elapsed_s);
  cJSON *ph = cJSON_AddObjectToObject(j, "search_cpu_s");
  static const char *const names[] = {"sampling", "mutation", "features", "prediction"};
  for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(ph, names[i], r->phase_s[i]);
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
  o.run.min_secs = a->repeat_ms * 1e-3; /* 0: the runner's 0.1 s */
  ui_t u = {.a = a, .tty = isatty(STDERR_FILENO)};
  struct sigaction sa = {.sa_handler = on_sigint}, old;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  srch_callbacks_t cb = {.on_progress = on_progress, .should_stop = should_stop, .ctx = &u};
  srch_task_t task = {.workload = a->workload, .weight = 1};
  srch_result_t r;
  tn_err_t err = {0};
  fprintf(stderr, "tuning %s on %s: %d trials, %s search, %s model%s%s\n", a->workload->name, a->target->name,
          o.max_trials, o.strategy == SRCH_REPLAY_TRACE ? "replay-trace" : "evolutionary",
          o.model == SRCH_MODEL_RANDOM ? "random" : "xgboost", a->db ? ", database " : "", a->db ? a->db : "");
  int rc = srch_tune(&task, 1, a->target, &o, &cb, &r, &err);
  if (u.line_open) fputc('\n', stderr);
  if (rc < 0) {
    fprintf(stderr, "tunectl tune: %s\n", err.msg);
    srch_result_free(&r);
    sigaction(SIGINT, &old, NULL);
    return 1;
  }
  ms_result_t naive;
  measure_naive(a, &naive);
  if (a->json) print_json_summary(a, &r, &naive);
  else print_text(a, &r, &naive);
  int status = r.stopped ? 130 : r.best[0].found ? 0 : 1;
  ms_result_clear(&naive);
  srch_result_free(&r);
  sigaction(SIGINT, &old, NULL);
  return status;
}
