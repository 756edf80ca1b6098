/* tune.c — the tuning loop (metaschedule.md §7): the task scheduler picks a
 * task, its strategy generates a batch, the batch is built while the
 * previous one runs, and every measured batch is committed to the database,
 * reported, and fed to the cost model before the next one is generated;
 * after the budget, each task's best candidates are re-measured and its
 * unscheduled program timed, and the cost model is saved. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "search/srch_batch.h"

void srch_opts_default(srch_opts_t *o) {
  *o = (srch_opts_t){.strategy = SRCH_EVOLUTIONARY,
                     .model = SRCH_MODEL_XGB,
                     .max_trials = 64,
                     .batch_size = 64,
                     .population = 512,
                     .init_measured_ratio = 0.2,
                     .init_min_unmeasured = 50,
                     .genetic_iters = 4,
                     .mutate_prob = 0.85,
                     .eps_greedy = 0.05,
                     .seed = 1,
                     .run = {.slow_factor = 10},
                     .remeasure = 8,
                     .remeasure_rounds = 3};
}

/* ---- setup ------------------------------------------------------------- */

static int check_opts(const srch_opts_t *o, tn_err_t *err) {
  if (o->max_trials < (o->epilogue_only ? 0 : 1)) return tn_err_set(err, TN_EINVAL, "search: max_trials must be at least 1, got %d", o->max_trials);
  if (o->batch_size < 1 || o->population < 1)
    return tn_err_set(err, TN_EINVAL, "search: batch_size and population must be at least 1, got %d and %d",
                      o->batch_size, o->population);
  if (!(o->init_measured_ratio >= 0 && o->init_measured_ratio <= 1) || !(o->mutate_prob >= 0 && o->mutate_prob <= 1) ||
      !(o->eps_greedy >= 0 && o->eps_greedy <= 1))
    return tn_err_set(err, TN_EINVAL, "search: init_measured_ratio, mutate_prob and eps_greedy must be in [0, 1]");
  if (o->genetic_iters < 0 || o->init_min_unmeasured < 0 || o->max_seconds < 0)
    return tn_err_set(err, TN_EINVAL, "search: genetic_iters, init_min_unmeasured and max_seconds must not be negative");
  if (o->remeasure < 0 || (o->remeasure > 0 && o->remeasure_rounds < 1))
    return tn_err_set(err, TN_EINVAL, "search: remeasure must not be negative and, when on, remeasure_rounds at least "
                      "1, got %d and %d", o->remeasure, o->remeasure_rounds);
  if (o->strategy != SRCH_EVOLUTIONARY && o->strategy != SRCH_REPLAY_TRACE)
    return tn_err_set(err, TN_EINVAL, "search: unknown strategy %d (evolutionary or replay)", (int)o->strategy);
  return 0;
}

static int open_db(srch_ctx_t *c, tn_err_t *err) {
  if (!c->opts.db_path) return 0;
  char shown[PATH_MAX]; /* a URL's password stays out of the job's error */
  db_redact(c->opts.db_path, shown, sizeof shown);
  if (db_open(c->opts.db_path, &c->db, err) < 0) return tn_err_prefix(err, "search");
  char *json = tn_target_to_json(c->target);
  db_target_t t = {.name = c->target->name, .kind = tn_target_kind_name(c->target->kind), .arch = c->target->arch,
                   .json = json};
  int rc = db_target_upsert(c->db, &t, &c->target_id, err);
  free(json);
  return rc < 0 ? tn_err_prefix(err, "search: %s", shown) : 0;
}

static int new_model(srch_ctx_t *c, uint64_t seed, tn_err_t *err) {
  c->model = c->opts.model == SRCH_MODEL_RANDOM ? cm_model_new_random(seed) : cm_model_new_xgb(c->nthreads, seed);
  if (!c->model) return tn_err_set(err, TN_ENOMEM, "search: cannot create the cost model");
  if (c->opts.model_path && access(c->opts.model_path, F_OK) == 0 && cm_model_load(c->model, c->opts.model_path, err) < 0)
    return tn_err_prefix(err, "search: cost model %s", c->opts.model_path);
  return 0;
}

/* ---- the loop's state -------------------------------------------------- */

typedef struct loop {
  srch_ctx_t *c;
  srch_sched_t sched;
  ms_builder_t *builder;
  char work_dir[MS_PATH_MAX];
  bool own_work_dir;
  double t0;
  int sent;                       /* candidates handed to the builder */
  int trials_done;
  int failures[MS_STATUS__COUNT];
  bool stopped;                   /* should_stop said so */
  bool epilogue;                  /* re-measure and baseline: past the time budget is fine */
  bool own_builder;               /* started here (not opts.builder, a shared pool) */
  srch_batch_t *pending;          /* the batch compiling while another runs */
  int build_cap;                  /* unfinished builds kept queued per batch */
  int64_t job_base;               /* the job's trials_done before this run */
} loop_t;

static bool out_of_time(const loop_t *l) {
  return l->c->opts.max_seconds > 0 && tn_now() - l->t0 >= l->c->opts.max_seconds;
}

/* Polled between candidates: keeps the pending batch's builds flowing and
 * says whether to stop (the caller's request or the time budget). */
static bool should_stop(void *ctx) {
  loop_t *l = ctx;
  const srch_callbacks_t *cb = l->c->cb;
  if (l->pending) srch_batch_pump(l->builder, l->pending, l->build_cap);
  if (!l->stopped && cb && cb->should_stop && cb->should_stop(cb->ctx)) l->stopped = true;
  return l->stopped || (!l->epilogue && out_of_time(l));
}

static int make_work_dir(loop_t *l, tn_err_t *err) {
  if (l->c->opts.work_dir) {
    snprintf(l->work_dir, sizeof l->work_dir, "%s", l->c->opts.work_dir);
    if (mkdir(l->work_dir, 0755) < 0 && errno != EEXIST)
      return tn_err_set(err, TN_EIO, "search: cannot create %s: %s", l->work_dir, strerror(errno));
    return 0;
  }
  int rc = ms_temp_dir_new("tuned-search", l->work_dir, sizeof l->work_dir, err);
  if (rc < 0) return tn_err_prefix(err, "search");
  l->own_work_dir = true;
  return 0;
}

static int start_builder(loop_t *l, tn_err_t *err) {
  if (l->c->opts.builder) {
    l->builder = l->c->opts.builder;
    return 0;
  }
  l->own_builder = true;
  char dir[MS_PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/build", l->work_dir);
  ms_build_opts_t bo = {.nthreads = l->c->nthreads, .timeout_s = l->c->opts.build_timeout_s, .run_dir = dir};
  return ms_builder_new(&bo, &l->builder, err);
}

/* The caller's stop alone (not the time budget, not the build pump): asked
 * from the reference evaluator's threads and while a candidate runs, where
 * it abandons the work midway. */
static bool cancelled(void *ctx) {
  const srch_callbacks_t *cb = ((loop_t *)ctx)->c->cb;
  return cb && cb->should_stop && cb->should_stop(cb->ctx);
}

/* The task's runner, its reference outputs computed on first use.  A stop
 * during that evaluation is TN_ESTOPPED with l->stopped set: callers treat
 * it as the stop it is, not as a failure. */
static int ensure_runner(loop_t *l, int task, tn_err_t *err) {
  srch_task_state_t *ts = &l->c->tasks[task];
  if (ts->runner) return 0;
  char dir[MS_PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s/run-%d", l->work_dir, task);
  ms_run_opts_t ro = l->c->opts.run;
  ro.run_dir = dir;
  ro.stop = should_stop; /* a cancel or the time budget ends a wait for the device */
  ro.stop_ctx = l;
  ro.cancel = cancelled;
  ro.cancel_ctx = l;
  if (ms_flush_by_default(l->c->target->kind) && !l->c->opts.no_flush) ro.flush_l2 = true;
  ro.tf32 = l->c->target->allow_tf32;
  srch_log(l->c, SRCH_LOG_INFO, "evaluating the reference outputs of %s (%.3g element updates)", ts->workload->name,
           ir_func_updates(ts->func));
  int rc = ms_runner_new(&ro, &ts->runner, err);
  if (rc == 0) rc = ms_runner_set_workload(ts->runner, ts->func, 1, err);
  if (rc == TN_ESTOPPED) {
    ms_runner_free(ts->runner); /* evaluated again if the search goes on */
    ts->runner = NULL;
    l->stopped = true;
    return rc;
  }
  if (rc < 0) return tn_err_prefix(err, "search: workload %s", ts->workload->name);
  /* the database's best bounds the first candidates already (slow_factor) */
  if (ts->best.found) ms_runner_note_best(ts->runner, ts->best.median_secs);
  return 0;
}

/* ---- generating a batch ------------------------------------------------ */

/* Asks the scheduler for a task and its strategy for a batch; tasks that
 * give empty batches SRCH_MAX_EMPTY_BATCHES times in a row end.  Returns 1
 * with a batch, 0 when nothing is left to do. */
static int next_batch(loop_t *l, srch_batch_t *b, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  while (!should_stop(l) && l->sent < c->opts.max_trials) {
    int task = srch_sched_next(&l->sched, c->tasks);
    if (task < 0) return 0;
    srch_task_state_t *ts = &c->tasks[task];
    int want = TN_MIN(c->opts.batch_size, c->opts.max_trials - l->sent);
    srch_cand_t **cands = NULL;
    int n = 0;
    if (srch_generate(c, task, want, &cands, &n, err) < 0) {
      free(cands);
      return err->code;
    }
    if (n == 0) {
      free(cands);
      ts->done = ++ts->empty_batches >= SRCH_MAX_EMPTY_BATCHES;
      srch_sched_joined(ts); /* an empty round still counts for the gradient */
      continue;
    }
    ts->empty_batches = 0;
    ts->trials_sent += n;
    ts->done = ts->trials_sent >= c->opts.max_trials;
    l->sent += n;
    srch_batch_init(b, task, cands, n);
    return 1;
  }
  return 0;
}

/* ---- after a batch ran --------------------------------------------------- */

static void fill_progress(const loop_t *l, srch_stage_t stage, int task, srch_progress_t *p) {
  const srch_ctx_t *c = l->c;
  const srch_task_state_t *ts = &c->tasks[task];
  *p = (srch_progress_t){.stage = stage, .task = task, .trials_done = l->trials_done,
                         .trials_total = c->opts.max_trials,
                         .best_secs = ts->best.found ? ts->best.median_secs : 0,
                         .best_gflops = ts->best.found ? ts->best.gflops : 0, .elapsed_s = tn_now() - l->t0};
  memcpy(p->failures, l->failures, sizeof p->failures);
  memcpy(p->phase_s, c->phase_s, sizeof p->phase_s);
}

static int update_job(loop_t *l, int task, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  if (!c->db || c->opts.job_id <= 0) return 0;
  if (c->opts.job_batch) return c->cb && c->cb->on_commit ? c->cb->on_commit(c->db, c->cb->ctx, err) : 0;
  const srch_task_state_t *ts = &c->tasks[task];
  db_job_progress_t p = {.state = DB_JOB_RUNNING, .trials_done = l->job_base + l->trials_done,
                         .best_record_id = task == 0 && ts->best.db_id > 0 ? ts->best.db_id : 0};
  return db_job_update(c->db, c->opts.job_id, &p, err);
}

static void report_progress(const loop_t *l, srch_stage_t stage, int task) {
  const srch_callbacks_t *cb = l->c->cb;
  if (!cb || !cb->on_progress) return;
  srch_progress_t p;
  fill_progress(l, stage, task, &p);
  cb->on_progress(&p, cb->ctx);
}

static void report(loop_t *l, const srch_batch_t *b) {
  const srch_callbacks_t *cb = l->c->cb;
  if (!cb) return;
  if (cb->on_batch) {
    srch_record_t *recs = tn_xcalloc((size_t)TN_MAX(b->nmeasured, 1), sizeof *recs);
    int n = 0;
    for (int i = 0; i < b->n; i++)
      if (b->measured[i])
        recs[n++] = (srch_record_t){.task = b->task, .trace_json = b->cands[i]->json, .result = &b->res[i],
                                    .db_id = b->db_ids[i]};
    cb->on_batch(recs, n, cb->ctx);
    free(recs);
  }
  report_progress(l, SRCH_STAGE_SEARCH, b->task);
}

/* The measured candidates teach the model (failures as failures). */
static int update_model(srch_ctx_t *c, srch_batch_t *b, tn_err_t *err) {
  if (c->opts.strategy == SRCH_REPLAY_TRACE || b->nmeasured == 0) return 0;
  srch_cand_t **cands = tn_xcalloc((size_t)b->nmeasured, sizeof *cands);
  cm_sample_t *s = tn_xcalloc((size_t)b->nmeasured, sizeof *s);
  int64_t *ids = tn_xcalloc((size_t)b->nmeasured, sizeof *ids);
  int n = 0;
  for (int i = 0; i < b->n; i++) {
    if (!b->measured[i]) continue;
    const ms_result_t *r = &b->res[i];
    cands[n] = b->cands[i];
    ids[n] = b->db_ids[i];
    s[n++] = (cm_sample_t){.workload = c->tasks[b->task].key,
                           .run_secs = r->status == MS_OK && r->median_secs > 0 ? r->median_secs : CM_FAILED};
  }
  srch_features(c, cands, n);
  for (int i = 0; i < n; i++) s[i].features = &cands[i]->feat;
  int rc = cm_model_update(c->model, s, n, err);
  if (rc == 0) srch_model_note_samples(c, ids, n);
  free(cands);
  free(s);
  free(ids);
  return rc;
}

/* Unix seconds at which a candidate's measurement ended (its device window's
 * end on the monotonic clock, moved to the wall clock); now when it never ran. */
static double measured_at(const ms_result_t *r, double now, int64_t mono_now_ns) {
  if (r->window_end_ns <= 0 || r->window_end_ns > mono_now_ns) return now;
  return now - (double)(mono_now_ns - r->window_end_ns) * 1e-9;
}

/* The job's trials of batch b (numbered on from the trials it has), in the
 * transaction of their records: what the job's tuning curve shows. */
static int record_trials(loop_t *l, const srch_batch_t *b, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  if (!c->db || c->opts.job_id <= 0) return 0;
  db_job_trial_t *t = tn_xcalloc((size_t)b->nmeasured, sizeof *t);
  struct timespec ts, wall;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  clock_gettime(CLOCK_REALTIME, &wall);
  int64_t mono = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  double now = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
  size_t n = 0;
  for (int i = 0; i < b->n; i++) {
    if (!b->measured[i]) continue;
    const ms_result_t *r = &b->res[i];
    t[n] = (db_job_trial_t){.trial = l->job_base + l->trials_done + (int64_t)n + 1, .record_id = b->db_ids[i],
                            .status = srch_db_status(r->status),
                            .median_secs = r->ran && r->median_secs > 0 ? r->median_secs : NAN,
                            .measured = measured_at(r, now, mono)};
    n++;
  }
  int rc = db_job_trials_add(c->db, c->opts.job_id, t, n, err);
  free(t);
  return rc;
}

/* Commit, account, report, learn: everything after a batch's runs. */
static int finish_batch(loop_t *l, srch_batch_t *b, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  srch_task_state_t *ts = &c->tasks[b->task];
  if (b->nmeasured == 0) return 0; /* stopped before its first run */
  /* The records and the job's progress go in one transaction, so a kill
   * between them cannot leave a resumed job counting fewer trials than the
   * database holds. */
  bool tx = c->db && c->opts.job_id > 0;
  if (tx && db_tx_begin(c->db, err) < 0) return tn_err_prefix(err, "search: committing a batch");
  if (srch_batch_commit(c, b, err) < 0 || record_trials(l, b, err) < 0) {
    if (tx) db_tx_rollback(c->db);
    return tn_err_prefix(err, "search: committing a batch");
  }
  for (int i = 0; i < b->n; i++) {
    if (!b->measured[i]) continue;
    const ms_result_t *r = &b->res[i];
    l->failures[r->status]++;
    l->trials_done++;
    if (r->cupti_error[0]) /* the runner passes this on once */
      srch_log(c, SRCH_LOG_INFO, "no CUPTI kernel times, the CUDA events alone: %s", r->cupti_error);
    ts->trials_done++;
    if (r->status != MS_OK && r->status != MS_TOO_SLOW && ts->first_failure.status == MS_OK)
      ts->first_failure = (srch_failure_t){.status = r->status, .trial = ts->trials_done, .error = tn_xstrdup(r->error)};
    if (r->status == MS_OK && r->median_secs > 0) {
      srch_task_add_measured(ts, b->cands[i]->json, b->cands[i]->hash, r->median_secs, b->db_ids[i]);
      srch_task_note_best(ts, b->cands[i]->json, r->median_secs, b->db_ids[i]);
    }
  }
  if (update_job(l, b->task, err) < 0 || (tx && db_tx_commit(c->db, err) < 0)) {
    if (tx) db_tx_rollback(c->db);
    return tn_err_prefix(err, "search: job %lld", (long long)c->opts.job_id);
  }
  report(l, b);
  if (update_model(c, b, err) < 0) return tn_err_prefix(err, "search: cost model");
  srch_sched_joined(ts);
  return 0;
}

/* ---- the pipeline ------------------------------------------------------ */

/* Waits for a batch's builds, runs it in its task's worker and processes
 * the results. */
static int measure_batch(loop_t *l, srch_batch_t *b, srch_batch_t *next, tn_err_t *err) {
  if (!srch_batch_wait(l->builder, b, l->build_cap, should_stop, l)) return 0;
  l->pending = next; /* its builds are queued between b's runs */
  int rc = ensure_runner(l, b->task, err);
  if (rc < 0) return rc == TN_ESTOPPED ? 0 : rc; /* stopped: nothing of b was run */
  /* The runner takes each candidate's device, shared with every other
   * search of the process; the host CPU's also pauses cc builds (this job's
   * next batch, other jobs') while a candidate is timed on its cores.  GPU
   * timings do not suffer from busy cores, so builds overlap CUDA runs. */
  if (srch_batch_run(l->c->tasks[b->task].runner, ms_builder_run_dir(l->builder), b, should_stop, l, err) < 0)
    return err->code;
  return finish_batch(l, b, err);
}

/* While batch `cur` builds, the next one is generated and its builds are
 * queued behind cur's; cur then runs while next builds. */
static int run_loop(loop_t *l, tn_err_t *err) {
  srch_batch_t cur = {0}, next = {0};
  bool have_cur = false;
  int rc = 0;
  for (;;) {
    if (have_cur) srch_batch_pump(l->builder, &cur, l->build_cap); /* compiles while next is generated */
    int got = next_batch(l, &next, err);
    if (got < 0) rc = got;
    if (got > 0) srch_batch_lower(l->c->target, &next);
    if (have_cur) {
      if (rc == 0) rc = measure_batch(l, &cur, got > 0 ? &next : NULL, err);
      srch_batch_drain(l->builder, &cur, l->stopped); /* stopped: no compiler is waited for */
      srch_batch_free(&cur);
      have_cur = false;
    }
    l->pending = NULL;
    if (got <= 0 || rc < 0) {
      if (got > 0) srch_batch_drain(l->builder, &next, l->stopped), srch_batch_free(&next);
      break;
    }
    cur = next, have_cur = true;
    memset(&next, 0, sizeof next);
  }
  return rc;
}

/* ---- after the budget ---------------------------------------------------- */

/* Per task: the re-measure of the best candidates, then the unscheduled
 * program.  Both come after the time budget (they are short, and what the
 * search found is worth little without them) but not after a stop. */
static int epilogue(loop_t *l, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  l->epilogue = true;
  for (int i = 0; i < c->ntasks && !should_stop(l); i++) {
    srch_task_state_t *ts = &c->tasks[i];
    if (c->opts.remeasure > 0 && ts->nmeasured > 0) {
      int rc = ensure_runner(l, i, err);
      if (rc == TN_ESTOPPED) break;
      if (rc < 0 || srch_remeasure(c, i, l->builder, l->build_cap, ts->runner, should_stop, l, err) < 0)
        return err->code;
      if (ts->remeasure.n > 0) report_progress(l, SRCH_STAGE_REMEASURE, i);
    }
    if (!c->opts.baseline || should_stop(l)) continue;
    bool found = false;
    if (srch_baseline_lookup(c, i, &found, err) < 0) return err->code;
    if (!found) {
      int rc = ensure_runner(l, i, err);
      if (rc == TN_ESTOPPED) break;
      if (rc < 0 || srch_baseline_measure(c, i, l->builder, ts->runner, err) < 0) return err->code;
    }
    if (ts->baseline.have) report_progress(l, SRCH_STAGE_BASELINE, i);
  }
  return 0;
}

/* ---- results ----------------------------------------------------------- */

static void fill_result(const loop_t *l, srch_result_t *out) {
  const srch_ctx_t *c = l->c;
  *out = (srch_result_t){.ntasks = c->tasks ? c->ntasks : 0, .trials_done = l->trials_done, .stopped = l->stopped,
                         .elapsed_s = tn_now() - l->t0};
  out->best = tn_xcalloc((size_t)TN_MAX(out->ntasks, 1), sizeof *out->best);
  out->remeasure = tn_xcalloc((size_t)TN_MAX(out->ntasks, 1), sizeof *out->remeasure);
  out->baseline = tn_xcalloc((size_t)TN_MAX(out->ntasks, 1), sizeof *out->baseline);
  out->first_failure = tn_xcalloc((size_t)TN_MAX(out->ntasks, 1), sizeof *out->first_failure);
  for (int i = 0; i < out->ntasks; i++) {
    const srch_task_state_t *ts = &c->tasks[i];
    out->best[i] = ts->best;
    if (!out->best[i].remeasured) out->best[i].first_secs = out->best[i].median_secs;
    if (out->best[i].trace_json) out->best[i].trace_json = tn_xstrdup(out->best[i].trace_json);
    out->remeasure[i] = ts->remeasure;
    out->remeasure[i].items = tn_xcalloc((size_t)TN_MAX(ts->remeasure.n, 1), sizeof *ts->remeasure.items);
    if (ts->remeasure.n)
      memcpy(out->remeasure[i].items, ts->remeasure.items, (size_t)ts->remeasure.n * sizeof *ts->remeasure.items);
    out->baseline[i] = ts->baseline;
    if (ts->baseline.error) out->baseline[i].error = tn_xstrdup(ts->baseline.error);
    out->first_failure[i] = ts->first_failure;
    if (ts->first_failure.error) out->first_failure[i].error = tn_xstrdup(ts->first_failure.error);
  }
  memcpy(out->failures, l->failures, sizeof out->failures);
  memcpy(out->phase_s, c->phase_s, sizeof out->phase_s);
}

void srch_result_free(srch_result_t *r) {
  if (!r) return;
  for (int i = 0; r->best && i < r->ntasks; i++) free(r->best[i].trace_json);
  for (int i = 0; r->remeasure && i < r->ntasks; i++) free(r->remeasure[i].items);
  for (int i = 0; r->baseline && i < r->ntasks; i++) free(r->baseline[i].error);
  for (int i = 0; r->first_failure && i < r->ntasks; i++) free(r->first_failure[i].error);
  free(r->best);
  free(r->first_failure);
  free(r->remeasure);
  free(r->baseline);
  memset(r, 0, sizeof *r);
}

static int start_job(loop_t *l, tn_err_t *err) {
  srch_ctx_t *c = l->c;
  if (c->opts.job_id <= 0) return 0;
  if (!c->db) return tn_err_set(err, TN_EINVAL, "search: job %lld needs a database (db_path)", (long long)c->opts.job_id);
  if (c->opts.job_batch) { /* one batch of a shared job: its owner moved the row */
    l->job_base = c->opts.job_trial_base;
    return 0;
  }
  db_job_t job;
  tn_arena_t *a = tn_arena_new();
  int rc = db_job_get(c->db, c->opts.job_id, &job, a, err);
  if (rc == 0) {
    l->job_base = job.trials_done;
    db_job_progress_t p = {.state = DB_JOB_RUNNING, .trials_done = -1};
    rc = db_job_update(c->db, c->opts.job_id, &p, err);
  }
  tn_arena_free(a);
  return rc < 0 ? tn_err_prefix(err, "search: job %lld", (long long)c->opts.job_id) : 0;
}

static int check_args(const srch_task_t *tasks, int ntasks, const tn_target_t *t, const srch_opts_t *opts,
                      tn_err_t *err) {
  if (!tasks || ntasks < 1 || !t || !opts)
    return tn_err_set(err, TN_EINVAL, "search: srch_tune needs tasks (at least one), a target, options and a result");
  for (int i = 0; i < ntasks; i++)
    if (!tasks[i].workload || !tasks[i].workload->func)
      return tn_err_set(err, TN_EINVAL, "search: task %d has no workload", i);
  return check_opts(opts, err);
}

int srch_ctx_init(srch_ctx_t *c, const srch_task_t *tasks, int ntasks, const tn_target_t *t, const srch_opts_t *opts,
                  const srch_callbacks_t *cb, uint64_t *sched_seed, tn_err_t *err) {
  *c = (srch_ctx_t){.target = t, .cb = cb};
  if (check_args(tasks, ntasks, t, opts, err) < 0) return err->code;
  c->opts = *opts;
  c->ntasks = ntasks;
  c->nthreads = opts->nthreads > 0 ? opts->nthreads : (int)TN_MAX(sysconf(_SC_NPROCESSORS_ONLN), 1);
  tn_rng_t rng;
  tn_rng_seed(&rng, c->opts.seed);
  if (open_db(c, err) < 0 || new_model(c, tn_rng_fork(&rng), err) < 0) return err->code;
  c->tasks = tn_xcalloc((size_t)c->ntasks, sizeof *c->tasks);
  for (int i = 0; i < c->ntasks; i++)
    if (srch_task_init(c, &c->tasks[i], &tasks[i], tn_rng_fork(&rng), err) < 0) return err->code;
  if (sched_seed) *sched_seed = tn_rng_fork(&rng);
  return srch_model_warm_start(c, err);
}

void srch_ctx_free(srch_ctx_t *c) {
  for (int i = 0; c->tasks && i < c->ntasks; i++) srch_task_free(&c->tasks[i]);
  free(c->tasks);
  cm_model_free(c->model);
  free(c->model_ids);
  db_close(c->db);
  memset(c, 0, sizeof *c);
}

int srch_generate(srch_ctx_t *c, int task, int want, srch_cand_t ***out, int *n, tn_err_t *err) {
  srch_task_state_t *ts = &c->tasks[task];
  int rc = c->opts.strategy == SRCH_REPLAY_TRACE ? srch_replay_batch(c, ts, want, out, n, err)
                                                 : srch_evolve_batch(c, ts, want, out, n, err);
  if (rc < 0) return tn_err_prefix(err, "search: workload %s", ts->workload->name);
  for (int i = 0; i < *n; i++) srch_hashset_add(&ts->seen, (*out)[i]->hash);
  return 0;
}

static void teardown(loop_t *l) {
  if (l->own_builder) ms_builder_free(l->builder);
  srch_ctx_free(l->c);
  if (l->own_work_dir) ms_temp_dir_remove(l->work_dir);
}

int srch_tune(const srch_task_t *tasks, int ntasks, const tn_target_t *t, const srch_opts_t *opts,
              const srch_callbacks_t *cb, srch_result_t *out, tn_err_t *err) {
  tn_err_t local = {0};
  if (!err) err = &local;
  if (!out) return tn_err_set(err, TN_EINVAL, "search: srch_tune needs a result");
  memset(out, 0, sizeof *out);
  srch_ctx_t c;
  loop_t l = {.c = &c, .t0 = tn_now()};
  uint64_t sched_seed = 0;
  int rc = t ? ms_compiler_check(t, err) : 0; /* a missing compiler fails every build: say so once, first */
  if (rc == 0) {
    rc = srch_ctx_init(&c, tasks, ntasks, t, opts, cb, &sched_seed, err);
  } else {
    memset(&c, 0, sizeof c);
    c.cb = cb;
  }
  if (rc == 0) {
    srch_sched_init(&l.sched, c.ntasks, sched_seed);
    l.build_cap = 2 * c.nthreads;
    if (start_job(&l, err) < 0 || make_work_dir(&l, err) < 0 || start_builder(&l, err) < 0) rc = err->code;
  }
  if (rc == 0 && !c.opts.epilogue_only) rc = run_loop(&l, err);
  if (rc == 0 && !l.stopped) rc = epilogue(&l, err);
  if (rc == 0 && c.opts.model_path && cm_model_save(c.model, c.opts.model_path, err) < 0)
    rc = tn_err_prefix(err, "search: saving the cost model");
  if (rc == 0) srch_model_save(&c);
  fill_result(&l, out);
  teardown(&l);
  return rc;
}
