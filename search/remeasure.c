/* remeasure.c — the winner's curse: the fastest of many noisy first
 * measurements is biased towards a lucky one.  At the end of a search the
 * best few distinct verified candidates of a task are built again and timed
 * in interleaved rounds (every candidate once per round, each round starting
 * one candidate later), the winner is chosen on the medians of all their
 * samples, and with a database their records get those times. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/srch_batch.h"

/* Samples of one candidate over the rounds. */
typedef struct samples {
  double *v;
  int n, cap;
  double *cupti; /* CUPTI's kernel-time median of each round that had one */
  int ncupti;
  ms_status_t status; /* MS_OK until a round fails */
} samples_t;

static void samples_add(samples_t *s, const ms_result_t *r) {
  if (s->n + r->nrepeats > s->cap) {
    s->cap = TN_MAX(s->cap * 2, s->n + r->nrepeats + 16);
    s->v = tn_xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
  }
  memcpy(s->v + s->n, r->run_secs, (size_t)r->nrepeats * sizeof *s->v);
  s->n += r->nrepeats;
  if (r->cupti_median_secs > 0) {
    s->cupti = tn_xrealloc(s->cupti, (size_t)(s->ncupti + 1) * sizeof *s->cupti);
    s->cupti[s->ncupti++] = r->cupti_median_secs;
  }
}

/* The candidates: the task's best verified records, replayed (their
 * recorded decisions kept, the postprocessors run again). */
static int make_cands(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t **cands, int *src) {
  int n = 0;
  for (int i = 0; i < ts->nmeasured && n < want; i++) {
    tn_err_t e = {0};
    srch_cand_t *cd = srch_cand_make(ts->func, c->target, ts->measured[i].trace, 1, NULL, &e);
    if (!cd) {
      srch_log(c, SRCH_LOG_DEBUG, "re-measure: record %lld of %s does not replay any more (%s): left out",
               (long long)ts->measured[i].db_id, ts->workload->name, e.msg);
      continue;
    }
    cands[n] = cd, src[n++] = i;
  }
  return n;
}

/* Every built candidate once per round; false when stopped. */
static bool run_each_round(srch_ctx_t *c, srch_batch_t *b, ms_runner_t *runner, samples_t *smp,
                           bool (*stop)(void *ctx), void *stop_ctx, int *rc, tn_err_t *err) {
  for (int i = 0; i < b->n; i++) smp[i].status = b->res[i].status;
  for (int round = 0; round < c->opts.remeasure_rounds; round++) {
    for (int k = 0; k < b->n; k++) {
      int i = (k + round) % b->n;
      if (smp[i].status != MS_OK) continue;
      if (stop(stop_ctx)) return false;
      ms_result_t r = b->res[i]; /* the build's record: the artifact, nothing run yet */
      r.run_secs = NULL, r.profile = NULL;
      if ((*rc = ms_runner_run_batch(runner, &b->mc[i], &r, 1, err)) < 0) return false;
      bool waited_out = r.status == MS_OK && !r.ran; /* stopped while waiting for the device */
      if (r.status == MS_OK && r.ran) samples_add(&smp[i], &r);
      else if (!waited_out) smp[i].status = r.status;
      ms_result_clear(&r);
      if (waited_out) return false;
    }
  }
  return true;
}

/* Runs every built candidate once per round; false when stopped.  Each
 * round times a candidate for its share of the usual time and repeats, so
 * that the re-measure costs about one measurement per candidate and its
 * record keeps as many samples as a first measurement has at most. */
static bool run_rounds(srch_ctx_t *c, srch_batch_t *b, ms_runner_t *runner, samples_t *smp,
                       bool (*stop)(void *ctx), void *stop_ctx, int *rc, tn_err_t *err) {
  double min_secs = 0;
  int max_repeats = 0, rounds = c->opts.remeasure_rounds;
  ms_runner_set_timing(runner, 0, 0, &min_secs, &max_repeats);
  ms_runner_set_timing(runner, min_secs / rounds, max_repeats / rounds, NULL, NULL);
  bool done = run_each_round(c, b, runner, smp, stop, stop_ctx, rc, err);
  ms_runner_set_timing(runner, min_secs, max_repeats, NULL, NULL);
  return done;
}

static int cmp_remeasured(const void *pa, const void *pb) {
  const srch_remeasured_t *a = pa, *b = pb;
  bool ga = a->status == MS_OK, gb = b->status == MS_OK;
  if (ga != gb) return ga ? -1 : 1;
  if (ga && a->median_secs != b->median_secs) return a->median_secs < b->median_secs ? -1 : 1;
  return (a->first_secs > b->first_secs) - (a->first_secs < b->first_secs);
}

/* The records get the re-measured times, the job its (new) best record. */
static int store(srch_ctx_t *c, srch_task_state_t *ts, samples_t *smp, const int *src, int n, int64_t best_id,
                 tn_err_t *err) {
  if (!c->db) return 0;
  int rc = db_tx_begin(c->db, err);
  for (int i = 0; rc == 0 && i < n; i++) {
    int64_t id = ts->measured[src[i]].db_id;
    if (id > 0 && smp[i].status == MS_OK && smp[i].n > 0) {
      double secs = ms_median(smp[i].v, smp[i].n);
      /* CUPTI's time beside it: the median of the rounds' medians (no CUPTI this time: unknown) */
      double cupti = smp[i].ncupti > 0 ? ms_median(smp[i].cupti, smp[i].ncupti) : NAN;
      rc = db_record_set_times(c->db, id, smp[i].v, (size_t)smp[i].n, secs, err);
      if (rc == 0) rc = db_record_set_cupti(c->db, id, cupti, ms_times_disagree(secs, cupti), err);
    }
  }
  if (rc == 0 && c->opts.job_id > 0 && best_id > 0 && ts == &c->tasks[0]) {
    db_job_progress_t p = {.state = DB_JOB_RUNNING, .trials_done = -1, .best_record_id = best_id};
    rc = db_job_update(c->db, c->opts.job_id, &p, err);
  }
  if (rc == 0) return db_tx_commit(c->db, err);
  db_tx_rollback(c->db);
  return rc;
}

/* Fills ts->remeasure and makes its fastest the task's best. */
static void conclude(srch_ctx_t *c, srch_task_state_t *ts, samples_t *smp, const int *src, int n) {
  srch_remeasure_t *rm = &ts->remeasure;
  free(rm->items);
  *rm = (srch_remeasure_t){.n = n, .rounds = c->opts.remeasure_rounds,
                           .items = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *rm->items)};
  for (int i = 0; i < n; i++) {
    const srch_measured_t *m = &ts->measured[src[i]];
    bool ok = smp[i].status == MS_OK && smp[i].n > 0;
    rm->items[i] = (srch_remeasured_t){.db_id = m->db_id, .first_secs = m->median_secs,
                                       .median_secs = ok ? ms_median(smp[i].v, smp[i].n) : 0, .nsamples = smp[i].n,
                                       .status = ok ? MS_OK : smp[i].status == MS_OK ? MS_RUN_ERROR : smp[i].status};
  }
  int win = -1;
  for (int i = 0; i < n; i++)
    if (rm->items[i].status == MS_OK && (win < 0 || rm->items[i].median_secs < rm->items[win].median_secs)) win = i;
  if (win >= 0) {
    const srch_measured_t *m = &ts->measured[src[win]];
    free(ts->best.trace_json);
    ts->best = (srch_best_t){.found = true, .trace_json = tn_xstrdup(m->json), .median_secs = rm->items[win].median_secs,
                             .gflops = ts->flops / rm->items[win].median_secs * 1e-9, .db_id = m->db_id,
                             .remeasured = true, .first_secs = m->median_secs};
    srch_log(c, SRCH_LOG_INFO, "re-measured the best %d of %s in %d rounds: the winner runs in %.4g ms (first "
             "measured %.4g ms)", n, ts->workload->name, rm->rounds, ts->best.median_secs * 1e3, m->median_secs * 1e3);
  }
  qsort(rm->items, (size_t)n, sizeof *rm->items, cmp_remeasured);
}

int srch_remeasure(srch_ctx_t *c, int task, ms_builder_t *builder, int build_cap, ms_runner_t *runner,
                   bool (*stop)(void *ctx), void *stop_ctx, tn_err_t *err) {
  srch_task_state_t *ts = &c->tasks[task];
  int want = TN_MIN(c->opts.remeasure, ts->nmeasured);
  if (want <= 0 || c->opts.remeasure_rounds <= 0) return 0;
  srch_cand_t **cands = tn_xcalloc((size_t)want, sizeof *cands);
  int *src = tn_xcalloc((size_t)want, sizeof *src);
  int n = make_cands(c, ts, want, cands, src);
  srch_log(c, SRCH_LOG_INFO, "re-measuring the best %d candidates of %s in %d interleaved rounds", n,
           ts->workload->name, c->opts.remeasure_rounds);
  srch_batch_t b;
  srch_batch_init(&b, task, cands, n);
  srch_batch_lower(c->target, &b);
  samples_t *smp = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *smp);
  int rc = 0;
  bool done = n > 0 && srch_batch_wait(builder, &b, build_cap, stop, stop_ctx) &&
              run_rounds(c, &b, runner, smp, stop, stop_ctx, &rc, err);
  srch_batch_drain(builder, &b, false); /* nothing is marked measured: every artifact goes */
  if (done) {
    conclude(c, ts, smp, src, n);
    rc = store(c, ts, smp, src, n, ts->best.db_id, err);
    if (rc < 0) tn_err_prefix(err, "search: recording the re-measure");
  }
  for (int i = 0; i < n; i++) free(smp[i].v), free(smp[i].cupti);
  free(smp);
  free(src);
  srch_batch_free(&b);
  return rc;
}
