/* baseline.c — the unscheduled program of a task, the figure a speed-up is
 * quoted against: measured once per (workload, target) and kept in the
 * database, where later runs read it instead of measuring it again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "search/srch_batch.h"

static void fill(srch_task_state_t *ts, bool cached, ms_status_t status, double median_secs, const char *error) {
  srch_baseline_t *b = &ts->baseline;
  free(b->error);
  *b = (srch_baseline_t){.have = true, .cached = cached, .status = status,
                         .median_secs = status == MS_OK ? median_secs : 0,
                         .gflops = status == MS_OK && median_secs > 0 ? ts->flops / median_secs * 1e-9 : 0,
                         .error = status == MS_OK ? NULL : tn_xstrdup(error && error[0] ? error : "?")};
}

int srch_baseline_lookup(srch_ctx_t *c, int task, bool *found, tn_err_t *err) {
  srch_task_state_t *ts = &c->tasks[task];
  *found = false;
  if (!c->db) return 0;
  tn_arena_t *a = tn_arena_new();
  db_baseline_t row;
  int rc = db_baseline_get(c->db, ts->hash_hex, c->target->name, &row, found, a, err);
  if (rc == 0 && *found) {
    fill(ts, true, srch_ms_status(row.status), row.median_secs, row.error);
    srch_log(c, SRCH_LOG_INFO, "unscheduled %s: %s (from the database)", ts->workload->name,
             ts->baseline.status == MS_OK ? "measured before" : ms_status_name(ts->baseline.status));
  }
  tn_arena_free(a);
  return rc < 0 ? tn_err_prefix(err, "search: the unscheduled program") : 0;
}

/* Builds the unscheduled program and runs it without the runner's bounds. */
static int measure(srch_ctx_t *c, srch_task_state_t *ts, ms_builder_t *builder, ms_runner_t *runner,
                   ms_result_t *r, tn_err_t *err) {
  cg_module_t *m = NULL;
  ms_candidate_t *mc = NULL;
  tn_err_t e = {0};
  int rc = 0;
  if (srch_lower(ts->func, c->target, NULL, 1, NULL, &m, NULL, &e) < 0 ||
      ms_candidate_from_module(c->target, m, &mc, &e) < 0) {
    ms_result_fail(r, MS_BUILD_ERROR, "%s", e.msg);
  } else {
    int64_t ticket = ms_build_submit(builder, mc, r);
    if (ticket < 0) ms_result_fail(r, MS_BUILD_ERROR, "the builder refused the unscheduled program");
    else ms_build_wait(builder, ticket);
    if (r->status == MS_OK) {
      double best = ms_runner_best(runner);
      ms_runner_set_best(runner, 0);
      rc = ms_runner_run_batch(runner, &mc, r, 1, err);
      ms_runner_set_best(runner, best);
    }
    srch_remove_artifact(ms_builder_run_dir(builder), r);
  }
  ms_candidate_free(mc);
  cg_module_free(m);
  return rc;
}

static int keep(srch_ctx_t *c, srch_task_state_t *ts, const ms_result_t *r, tn_err_t *err) {
  /* what is kept is what a rerun would measure again: a time, or a timeout */
  if (!c->db || (r->status != MS_OK && r->status != MS_TIMEOUT)) return 0;
  db_baseline_t b = {.workload_id = ts->workload_id, .target_id = c->target_id,
                     .status = srch_db_status(r->status),
                     .median_secs = r->status == MS_OK ? r->median_secs : NAN, .run_secs = r->run_secs,
                     .n_runs = r->run_secs ? (size_t)r->nrepeats : 0, .error = r->error[0] ? r->error : NULL};
  return db_baseline_put(c->db, &b, err);
}

int srch_baseline_measure(srch_ctx_t *c, int task, ms_builder_t *builder, ms_runner_t *runner, tn_err_t *err) {
  srch_task_state_t *ts = &c->tasks[task];
  srch_log(c, SRCH_LOG_INFO, "measuring the unscheduled %s", ts->workload->name);
  ms_result_t r;
  ms_result_init(&r);
  int rc = measure(c, ts, builder, runner, &r, err);
  bool stopped = r.status == MS_OK && !r.ran; /* while waiting for the device */
  if (rc == 0 && !stopped) {
    fill(ts, false, r.status, r.median_secs, r.error);
    if (keep(c, ts, &r, err) < 0) rc = tn_err_prefix(err, "search: keeping the unscheduled program's time");
  }
  ms_result_clear(&r);
  return rc;
}
