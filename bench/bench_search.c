/* bench_search.c — benchmarks of the search (run by hand, see README.md):
 *   overhead  CPU seconds per batch of 64 in sampling, mutation, features and
 *             prediction (no build, no run: generation only, with synthetic
 *             timings teaching the model), per target;
 *   model     best GFLOP/s after N trials with the XGBoost model, the random
 *             model and replay-trace, same seeds, one run each per seed;
 *   blas      tuned matmul vs OpenBLAS cblas_sgemm and the naive program,
 *             all measured in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/target.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "schedule/schedule.h"
#include "search/search.h"
#include "search/srch_internal.h"
#include "tuned_config.h"

#ifdef HAVE_OPENBLAS
/* From cblas.h, declared here so the bench does not depend on where the header lives. */
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#endif

typedef struct args {
  const char *mode;
  int size, trials, batches, seed;
  const char *targets, *seeds;
} args_t;

static ir_workload_t *load_matmul(int n) {
  ir_param_set_t p[3] = {{"M", n}, {"N", n}, {"K", n}};
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  if (ir_workload_load(TUNED_SOURCE_ROOT "/workloads/matmul.tw", p, 3, &w, &err) < 0) {
    fprintf(stderr, "bench_search: %s\n", err.msg);
    exit(1);
  }
  return w;
}

static tn_target_t target(const char *name) {
  tn_target_t t;
  tn_err_t err = {0};
  if (tn_target_lookup(name, NULL, &t, &err) < 0) {
    fprintf(stderr, "bench_search: %s\n", err.msg);
    exit(1);
  }
  return t;
}

/* ---- overhead ------------------------------------------------------------ */

/* A made-up but deterministic "measured time" per candidate, so the model
 * trains (and predicts with real trees) without running anything. */
static double synthetic_secs(const srch_cand_t *c) {
  return 1e-3 * (1 + (double)(c->hash % 1000) / 100.0);
}

static void overhead_one(const char *tname, int size, int batches, int seed) {
  ir_workload_t *w = load_matmul(size);
  tn_target_t t = target(tname);
  srch_opts_t o;
  srch_opts_default(&o);
  o.max_trials = 64 * batches;
  o.seed = (uint64_t)seed;
  srch_task_t task = {.workload = w, .weight = 1};
  srch_ctx_t c;
  tn_err_t err = {0};
  if (srch_ctx_init(&c, &task, 1, &t, &o, NULL, NULL, &err) < 0) {
    fprintf(stderr, "bench_search: %s\n", err.msg);
    exit(1);
  }
  double sum[SRCH_PHASE__COUNT] = {0}, train = 0;
  int counted = 0, cands = 0;
  for (int b = 0; b < batches; b++) {
    double before[SRCH_PHASE__COUNT];
    memcpy(before, c.phase_s, sizeof before);
    double w0 = tn_now();
    srch_cand_t **v = NULL;
    int n = 0;
    if (srch_generate(&c, 0, 64, &v, &n, &err) < 0) {
      fprintf(stderr, "bench_search: %s\n", err.msg);
      exit(1);
    }
    double wall = tn_now() - w0;
    srch_features(&c, v, n);
    cm_sample_t *s = calloc((size_t)n + 1, sizeof *s);
    for (int i = 0; i < n; i++) s[i] = (cm_sample_t){c.tasks[0].key, &v[i]->feat, synthetic_secs(v[i])};
    double t0 = srch_process_cpu();
    cm_model_update(c.model, s, n, &err);
    double tr = srch_process_cpu() - t0;
    printf("  batch %d: %d candidates, wall %.2f s, CPU s: sampling %.3f, mutation %.3f, features %.3f, prediction %.3f, "
           "model update %.3f\n",
           b + 1, n, wall, c.phase_s[0] - before[0], c.phase_s[1] - before[1], c.phase_s[2] - before[2],
           c.phase_s[3] - before[3], tr);
    if (b > 0) { /* batch 1 predicts with the untrained (random) model */
      for (int k = 0; k < SRCH_PHASE__COUNT; k++) sum[k] += c.phase_s[k] - before[k];
      train += tr;
      counted++;
      cands += n;
    }
    for (int i = 0; i < n; i++) srch_cand_unref(v[i]);
    free(v);
    free(s);
  }
  if (counted) {
    double tot = 0;
    for (int k = 0; k < SRCH_PHASE__COUNT; k++) tot += sum[k] / counted;
    printf("| %-12s | %5d | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %d threads, %d cands/batch |\n", tname,
           size, sum[0] / counted, sum[1] / counted, sum[2] / counted, sum[3] / counted, tot, train / counted,
           c.nthreads, cands / counted);
  }
  srch_ctx_free(&c);
  ir_workload_free(w);
}

static void bench_overhead(const args_t *a) {
  printf("search overhead per batch of 64 (matmul %d^3, population 512, 4 generations), CPU seconds,\n"
         "mean over batches 2..%d (the model trains on synthetic times after each batch):\n\n",
         a->size, a->batches);
  char *list = strdup(a->targets);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    printf("%s:\n", tok);
    fflush(stdout);
    overhead_one(tok, a->size, a->batches, a->seed);
  }
  printf("\n(columns: target | size | sampling | mutation | features | prediction | total | model update)\n");
  free(list);
}

/* ---- tuning runs ----------------------------------------------------------- */

#define TOPK 8

typedef struct curve {
  int marks[8], nmarks;
  double at[8]; /* best GFLOP/s after marks[i] trials */
  /* Candidates measured after `late_from` trials (the batches a trained model
   * ranked): mean GFLOP/s of the verified ones. */
  double flops, late_sum;
  int late_from, seen, late_n;
  /* The TOPK fastest verified candidates as measured during the search. */
  char *top_trace[TOPK];
  double top_secs[TOPK];
  int ntop;
} curve_t;

static void keep_top(curve_t *cv, const char *trace, double secs) {
  int at = cv->ntop;
  while (at > 0 && cv->top_secs[at - 1] > secs) at--;
  if (at >= TOPK) return;
  if (cv->ntop == TOPK) free(cv->top_trace[--cv->ntop]);
  memmove(cv->top_trace + at + 1, cv->top_trace + at, sizeof(char *) * (size_t)(cv->ntop - at));
  memmove(cv->top_secs + at + 1, cv->top_secs + at, sizeof(double) * (size_t)(cv->ntop - at));
  cv->top_trace[at] = tn_xstrdup(trace);
  cv->top_secs[at] = secs;
  cv->ntop++;
}

static void on_batch(const srch_record_t *recs, int n, void *ctx) {
  curve_t *cv = ctx;
  for (int i = 0; i < n; i++, cv->seen++) {
    const ms_result_t *r = recs[i].result;
    if (r->status == MS_OK && r->median_secs > 0) keep_top(cv, recs[i].trace_json, r->median_secs);
    if (cv->seen < cv->late_from || r->status != MS_OK || r->median_secs <= 0) continue;
    cv->late_sum += cv->flops / r->median_secs * 1e-9;
    cv->late_n++;
  }
}

static void on_progress(const srch_progress_t *p, void *ctx) {
  curve_t *cv = ctx;
  for (int i = 0; i < cv->nmarks; i++)
    if (p->trials_done >= cv->marks[i] && cv->at[i] < 0) cv->at[i] = p->best_gflops;
  fprintf(stderr, "\r  %d/%d trials, best %.1f GFLOP/s, %.0f s   ", p->trials_done, p->trials_total, p->best_gflops,
          p->elapsed_s);
}

static int run_tune(const ir_workload_t *w, const tn_target_t *t, srch_strategy_t st, srch_model_t model, int trials,
                    int seed, curve_t *cv, srch_result_t *r) {
  srch_opts_t o;
  srch_opts_default(&o);
  o.strategy = st;
  o.model = model;
  o.max_trials = trials;
  o.seed = (uint64_t)seed;
  for (int i = 0; i < cv->nmarks; i++) cv->at[i] = -1;
  for (int i = 0; i < cv->ntop; i++) free(cv->top_trace[i]);
  cv->ntop = 0;
  cv->flops = ir_func_flops(w->func);
  cv->late_sum = 0, cv->seen = cv->late_n = 0;
  srch_task_t task = {.workload = w, .weight = 1};
  srch_callbacks_t cb = {.on_progress = on_progress, .on_batch = on_batch, .ctx = cv};
  tn_err_t err = {0};
  int rc = srch_tune(&task, 1, t, &o, &cb, r, &err);
  fprintf(stderr, "\n");
  if (rc < 0) fprintf(stderr, "bench_search: %s\n", err.msg);
  return rc;
}

/* Parses "1,2,3" into seeds (at most max); returns how many. */
static int parse_seeds(const char *text, int *seeds, int max) {
  int n = 0;
  for (const char *p = text; *p && n < max;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    seeds[n++] = (int)v;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

static void bench_model(const args_t *a) {
  ir_workload_t *w = load_matmul(a->size);
  tn_target_t t = target("cpu");
  static const struct {
    const char *name;
    srch_strategy_t st;
    srch_model_t model;
  } runs[] = {{"evolutionary + xgboost", SRCH_EVOLUTIONARY, SRCH_MODEL_XGB},
              {"evolutionary + random model", SRCH_EVOLUTIONARY, SRCH_MODEL_RANDOM},
              {"replay-trace", SRCH_REPLAY_TRACE, SRCH_MODEL_RANDOM}};
  enum { NRUNS = 3, MAX_SEEDS = 16 };
  int seeds[MAX_SEEDS], nseeds = a->seeds ? parse_seeds(a->seeds, seeds, MAX_SEEDS) : 0;
  if (nseeds == 0) seeds[0] = a->seed, nseeds = 1;
  /* Batch 2 is generated while batch 1 runs, so batch 3 is the first one a
   * model trained on measurements (>= one batch of them) ranks. */
  srch_opts_t defaults;
  srch_opts_default(&defaults);
  curve_t cv = {.nmarks = 4, .late_from = 2 * defaults.batch_size};
  for (int i = 0; i < 4; i++) cv.marks[i] = a->trials * (i + 1) / 4;
  double sum[NRUNS][4] = {{0}}, wall[NRUNS] = {0}, late[NRUNS] = {0};
  int wins[NRUNS] = {0}, nok[NRUNS] = {0};
  printf("best GFLOP/s on cpu, matmul %d^3 float32, %d trials, %d seed(s) (%s)\n\n", a->size, a->trials, nseeds,
         cm_have_xgboost() ? "with XGBoost" : "built WITHOUT XGBoost: xgb = random");
  printf("| seed | strategy | @%d | @%d | @%d | @%d | mean of trials > %d | ok / trials | wall s |\n"
         "|---|---|---|---|---|---|---|---|---|\n",
         cv.marks[0], cv.marks[1], cv.marks[2], cv.marks[3], cv.late_from);
  fflush(stdout);
  /* Seeds outermost: the machine's load drifts, and each seed compares the
   * three strategies within minutes of each other. */
  for (int si = 0; si < nseeds; si++) {
    double final[NRUNS];
    for (int k = 0; k < NRUNS; k++) {
      srch_result_t r;
      fprintf(stderr, "seed %d, %s:\n", seeds[si], runs[k].name);
      final[k] = -1;
      if (run_tune(w, &t, runs[k].st, runs[k].model, a->trials, seeds[si], &cv, &r) == 0) {
        double lm = cv.late_n ? cv.late_sum / cv.late_n : NAN;
        printf("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %d / %d | %.0f |\n", seeds[si], runs[k].name, cv.at[0],
               cv.at[1], cv.at[2], cv.at[3], lm, r.failures[MS_OK], r.trials_done, r.elapsed_s);
        for (int m = 0; m < 4; m++) sum[k][m] += cv.at[m];
        late[k] += lm;
        wall[k] += r.elapsed_s;
        nok[k]++;
        final[k] = cv.at[3];
        srch_result_free(&r);
      }
      fflush(stdout);
    }
    int best = 0;
    for (int k = 1; k < NRUNS; k++)
      if (final[k] > final[best]) best = k;
    if (final[best] >= 0) wins[best]++;
  }
  printf("\nmean over %d seed(s):\n\n| strategy | @%d | @%d | @%d | @%d | mean of trials > %d | best of the three | wall s |\n"
         "|---|---|---|---|---|---|---|---|\n", nseeds, cv.marks[0], cv.marks[1], cv.marks[2], cv.marks[3], cv.late_from);
  for (int k = 0; k < NRUNS; k++) {
    double n = nok[k] ? nok[k] : NAN; /* means over the runs that completed */
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %d / %d | %.0f |\n", runs[k].name, sum[k][0] / n,
           sum[k][1] / n, sum[k][2] / n, sum[k][3] / n, late[k] / n, wins[k], nseeds, wall[k] / n);
  }
  for (int i = 0; i < cv.ntop; i++) free(cv.top_trace[i]);
  ir_workload_free(w);
}

/* ---- against OpenBLAS --------------------------------------------------------- */

/* Re-measures a trace (or the naive program) alone, with longer timing. */
static double measure_trace(const ir_workload_t *w, const tn_target_t *t, const char *json, double min_secs) {
  tn_err_t err = {0};
  sch_t *s = sch_create(w->func, 1);
  sch_trace_t *tr = NULL;
  if (json) {
    sch_free(s);
    s = NULL;
    if (sch_trace_from_json(json, strlen(json), &tr, &err) < 0 || sch_replay(w->func, tr, 1, &s, &err) < 0) {
      fprintf(stderr, "bench_search: best trace: %s\n", err.msg);
      sch_trace_free(tr);
      return NAN;
    }
  }
  cg_module_t *m = NULL;
  double secs = NAN;
  if (srch_lower_schedule(s, t, NULL, &m, &err) == 0) {
    ms_options_t mo = {.seed = 1};
    mo.run.min_secs = min_secs;
    mo.run.timeout_s = 600;
    ms_result_t r;
    if (ms_measure(w->func, t, &m, 1, &mo, &r, &err) == 0 && r.status == MS_OK) secs = r.median_secs;
    else fprintf(stderr, "bench_search: measuring: %s %s\n", err.msg, r.error);
    ms_result_clear(&r);
  }
  cg_module_free(m);
  sch_free(s);
  sch_trace_free(tr);
  return secs;
}

static double sgemm_secs(int n) {
#ifdef HAVE_OPENBLAS
  float *A = malloc(sizeof(float) * (size_t)n * n), *B = malloc(sizeof(float) * (size_t)n * n),
        *C = malloc(sizeof(float) * (size_t)n * n);
  for (size_t i = 0; i < (size_t)n * n; i++) A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.2f;
  double times[1000];
  int k = 0;
  double t_start = tn_now();
  cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, n, n, n, 1, A, n, B, n, 0, C, n); /* warm-up */
  while (k < 1000 && (k < 5 || tn_now() - t_start < 1.0)) {
    double t0 = tn_now();
    cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, n, n, n, 1, A, n, B, n, 0, C, n);
    times[k++] = tn_now() - t0;
  }
  free(A), free(B), free(C);
  return ms_median(times, k);
#else
  (void)n;
  return NAN;
#endif
}

static void bench_blas(const args_t *a) {
  ir_workload_t *w = load_matmul(a->size);
  tn_target_t t = target("cpu");
  double flops = ir_func_flops(w->func);
  curve_t cv = {.nmarks = 4};
  for (int i = 0; i < 4; i++) cv.marks[i] = a->trials * (i + 1) / 4;
  srch_result_t r = {0};
  srch_best_t none = {0};
  r.best = &none;
  fprintf(stderr, "tuning matmul %d^3 on cpu, %d trials:\n", a->size, a->trials);
  if (a->trials > 0 && run_tune(w, &t, SRCH_EVOLUTIONARY, SRCH_MODEL_XGB, a->trials, a->seed, &cv, &r) < 0) exit(1);
  double during = r.best[0].found ? r.best[0].median_secs : NAN;
  double tuned = r.best[0].found ? measure_trace(w, &t, r.best[0].trace_json, 1.0) : NAN;
  /* One fast median among hundreds of noisy ones is partly luck (the
   * winner's curse): the top candidates are re-measured alone too, and the
   * fastest of those re-measurements is reported as well. */
  double top = NAN;
  int top_at = -1;
  for (int i = 0; i < cv.ntop; i++) {
    double secs = measure_trace(w, &t, cv.top_trace[i], 1.0);
    fprintf(stderr, "top %d: %.1f GFLOP/s during the search, %.1f re-measured\n", i + 1,
            flops / cv.top_secs[i] * 1e-9, flops / secs * 1e-9);
    if (secs > 0 && (top_at < 0 || secs < top)) top = secs, top_at = i;
  }
  double naive = measure_trace(w, &t, NULL, 0.1);
  double blas = sgemm_secs(a->size);
  printf("matmul %d^3 float32 on cpu (%s), %d trials (ok %d) in %.0f s, seed %d\n\n", a->size, t.device, r.trials_done,
         r.failures[MS_OK], r.elapsed_s, a->seed);
  printf("best GFLOP/s after %d / %d / %d / %d trials: %.1f / %.1f / %.1f / %.1f\n\n", cv.marks[0], cv.marks[1],
         cv.marks[2], cv.marks[3], cv.at[0], cv.at[1], cv.at[2], cv.at[3]);
  printf("| program | median ms | GFLOP/s | vs OpenBLAS |\n|---|---|---|---|\n");
  struct {
    const char *name;
    double s;
  } rows[] = {{"tuned (best, re-measured alone)", tuned},
              {"tuned (fastest of the top 8, re-measured alone)", top},
              {"tuned (best, as measured during the search)", during},
              {"naive (unscheduled)", naive},
              {"OpenBLAS cblas_sgemm", blas}};
  for (size_t i = 0; i < TN_ARRAY_LEN(rows); i++)
    printf("| %s | %.3f | %.1f | %.1f %% |\n", rows[i].name, rows[i].s * 1e3, flops / rows[i].s * 1e-9,
           100 * blas / rows[i].s);
#ifndef HAVE_OPENBLAS
  printf("\n(built without OpenBLAS: install libopenblas-dev and rebuild for the baseline)\n");
#endif
  if (r.best[0].found) printf("\nbest trace:\n%s\n", r.best[0].trace_json);
  if (top_at >= 0) printf("\nfastest re-measured trace (top %d):\n%s\n", top_at + 1, cv.top_trace[top_at]);
  for (int i = 0; i < cv.ntop; i++) free(cv.top_trace[i]);
  if (r.best != &none) srch_result_free(&r);
  ir_workload_free(w);
}

/* ---- main ----------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: bench_search overhead [--size N] [--batches B] [--targets cpu,nvidia/h100]\n"
          "       bench_search model [--size N] [--trials T] [--seed S | --seeds 1,2,3]\n"
          "       bench_search blas [--size N] [--trials T] [--seed S]\n"
          "       bench_search baseline [--size N]   (naive and OpenBLAS only)\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  args_t a = {.mode = argv[1], .size = 0, .trials = 0, .batches = 4, .seed = 1, .targets = "cpu,nvidia/h100"};
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "--size")) a.size = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--trials")) a.trials = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batches")) a.batches = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed")) a.seed = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--targets")) a.targets = argv[++i];
    else if (!strcmp(argv[i], "--seeds")) a.seeds = argv[++i];
    else usage();
  }
  if (!strcmp(a.mode, "overhead")) {
    a.size = a.size ? a.size : 1024;
    bench_overhead(&a);
  } else if (!strcmp(a.mode, "model")) {
    a.size = a.size ? a.size : 256, a.trials = a.trials ? a.trials : 128;
    bench_model(&a);
  } else if (!strcmp(a.mode, "blas")) {
    a.size = a.size ? a.size : 1024, a.trials = a.trials ? a.trials : 256;
    bench_blas(&a);
  } else if (!strcmp(a.mode, "baseline")) { /* the blas table without tuning */
    a.size = a.size ? a.size : 1024, a.trials = 0;
    bench_blas(&a);
  } else {
    usage();
  }
  return 0;
}
