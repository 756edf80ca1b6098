/* job_search.c — the search of one job, on its thread: the options stored
 * with the job, the search's callbacks (progress posted to the registry as
 * events, measured candidates logged, the stop and the deadline), the run
 * of a job on the daemon's own database, and the pauses while a shared
 * database is away. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/jobs.h"

void td_job_post(td_job_t *j, td_event_kind_t kind, int64_t trials, const int *failures) {
  td_event_t *e = tn_xcalloc(1, sizeof *e);
  e->job = j->id;
  e->kind = kind;
  e->trials_done = trials;
  if (failures) memcpy(e->failures, failures, sizeof e->failures);
  td_jobs_t *m = j->mgr;
  uv_mutex_lock(&m->lock);
  *m->tail = e;
  m->tail = &e->next;
  uv_mutex_unlock(&m->lock);
  uv_async_send(&m->async);
}

/* Asked by the search between candidates and batches, and from the
 * reference evaluator's threads and a running candidate's wait (so it is
 * thread-safe: an atomic and the clock).  Past the deadline the job is
 * stopped as STOP_DEADLINE unless something else stopped it first. */
bool td_job_should_stop(void *ctx) {
  run_ctx_t *r = ctx;
  if (atomic_load(&r->job->stop) != STOP_NONE) return true;
  if (tn_now() < r->deadline) return false;
  int none = STOP_NONE;
  atomic_compare_exchange_strong(&r->job->stop, &none, STOP_DEADLINE);
  return true;
}

/* srch_tune has committed the batch (or the re-measure, or the baseline)
 * and written the job's progress row. */
static void on_progress(const srch_progress_t *p, void *ctx) {
  run_ctx_t *r = ctx;
  int64_t trials = r->base + p->trials_done;
  static const char *const what[] = {"batch measured", "best candidates re-measured", "unscheduled program timed"};
  td_log(p->stage == SRCH_STAGE_SEARCH ? TD_DEBUG : TD_INFO, what[p->stage],
         "job=%lld trials_done=%lld best_gflops=%.3f", (long long)r->job->id, (long long)trials, p->best_gflops);
  td_job_post(r->job, EV_PROGRESS, trials, p->failures);
}

/* The search's own messages (the cost model's warm start, the re-measure). */
static void on_log(srch_log_level_t level, const char *msg, void *ctx) {
  run_ctx_t *r = ctx;
  td_log_level_t lv = level == SRCH_LOG_WARN ? TD_WARN : level == SRCH_LOG_INFO ? TD_INFO : TD_DEBUG;
  if (td_log_enabled(lv)) td_log(lv, "search", "job=%lld msg=%s", (long long)r->job->id, td_q(msg));
}

/* Every measured candidate at debug level, with the window it had its
 * device for: windows of one device never overlap, whichever job. */
static void on_batch(const srch_record_t *recs, int n, void *ctx) {
  run_ctx_t *r = ctx;
  if (!td_log_enabled(TD_DEBUG)) return;
  for (int i = 0; i < n; i++) {
    const ms_result_t *res = recs[i].result;
    td_log(TD_DEBUG, "candidate measured",
           "job=%lld device=%s status=%s median_secs=%.6g window_start_ns=%lld window_end_ns=%lld",
           (long long)r->job->id, r->device, ms_status_name(res->status), res->median_secs,
           (long long)res->window_start_ns, (long long)res->window_end_ns);
  }
}

srch_callbacks_t td_job_callbacks(run_ctx_t *ctx) {
  return (srch_callbacks_t){.on_progress = on_progress, .on_batch = on_batch, .should_stop = td_job_should_stop,
                            .on_log = on_log, .ctx = ctx};
}

/* Search options stored with the job (tune.submit). */
static void apply_options(const char *json, srch_opts_t *o) {
  cJSON *j = cJSON_Parse(json ? json : "{}");
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "strategy")) && cJSON_IsString(v))
    o->strategy = strcmp(v->valuestring, "replay") == 0 ? SRCH_REPLAY_TRACE : SRCH_EVOLUTIONARY;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "model")) && cJSON_IsString(v))
    o->model = strcmp(v->valuestring, "random") == 0 ? SRCH_MODEL_RANDOM : SRCH_MODEL_XGB;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "batch_size")) && cJSON_IsNumber(v)) o->batch_size = v->valueint;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "population")) && cJSON_IsNumber(v)) o->population = v->valueint;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "remeasure")) && cJSON_IsNumber(v)) o->remeasure = v->valueint;
  /* jobs measure the unscheduled program unless told not to (older jobs did not say) */
  o->baseline = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "baseline"));
  cJSON_Delete(j);
}

/* The search options of a job: its stored ones, its budget's seconds and
 * seed, the daemon's database and build pool. */
void td_job_opts(td_job_t *j, const db_job_t *row, srch_opts_t *o) {
  srch_opts_default(o);
  apply_options(row->options, o);
  o->max_seconds = row->budget_seconds;
  o->seed = row->seed;
  o->db_path = j->mgr->srv->cfg.db_path;
  o->job_id = j->id;
  o->builder = j->mgr->builder;
}

void td_job_deadline_error(const db_job_t *row, double started, double grace, tn_err_t *err) {
  if (row->budget_seconds > 0)
    tn_err_set(err, TN_ESTOPPED, "deadline: stopped %.1f s after it started, past its time budget of %g s plus "
               "the daemon's --deadline-grace of %g s; what it measured is kept", tn_now() - started,
               row->budget_seconds, grace);
  else
    tn_err_set(err, TN_ESTOPPED, "deadline: stopped %.1f s after it started, past the %g s a job without a "
               "time budget may run plus the daemon's --deadline-grace of %g s; what it measured is kept",
               tn_now() - started, TD_NO_BUDGET_S, grace);
}

/* Tunes what is left of the job's budget; sets the final state (and err's
 * message when that is failed). */
int td_job_run_search(td_job_t *j, const db_job_t *row, const ir_workload_t *w, const tn_target_t *t,
                      double started, db_job_state_t *final, int64_t *trials, int64_t *best, tn_err_t *err) {
  double grace = j->mgr->srv->cfg.deadline_grace;
  double budget = row->budget_seconds > 0 ? row->budget_seconds : TD_NO_BUDGET_S;
  run_ctx_t ctx = {j, row->trials_done, "", started, started + budget + grace, NULL};
  ms_device_name(t, ctx.device, sizeof ctx.device);
  *trials = row->trials_done;
  *final = DB_JOB_DONE;
  if (row->budget_trials - row->trials_done <= 0) return 0;
  srch_opts_t o;
  td_job_opts(j, row, &o);
  o.max_trials = (int)(row->budget_trials - row->trials_done);
  srch_task_t task = {w, 1.0, row->workload_id}; /* registered at tune.submit */
  srch_callbacks_t cb = td_job_callbacks(&ctx);
  srch_result_t res;
  memset(&res, 0, sizeof res);
  int rc = srch_tune(&task, 1, t, &o, &cb, &res, err);
  int stop = atomic_load(&j->stop);
  if (rc) *trials = -1; /* the row keeps what was committed (a failed commit counted its batch) */
  else *trials = row->trials_done + res.trials_done;
  if (rc && stop == STOP_NONE) {
    srch_result_free(&res);
    return rc;
  }
  /* An error while stopping is most likely the stop's doing (a cancelled
   * job's progress row refuses updates once the loop marked it): the stop
   * decides the state. */
  if (rc)
    td_log(TD_DEBUG, "search error while stopping", "job=%lld err=%s", (long long)j->id, td_q(err->msg));
  if (res.ntasks > 0 && res.best && res.best[0].found) *best = res.best[0].db_id;
  bool stopped = res.stopped || rc;
  if (stop == STOP_CANCEL) *final = DB_JOB_CANCELLED;
  else if (stop == STOP_SHUTDOWN && stopped) *final = DB_JOB_QUEUED; /* resumes at the next start */
  else if (stop == STOP_DEADLINE && stopped) {
    *final = DB_JOB_FAILED;
    td_job_deadline_error(row, started, grace, err);
  }
  srch_result_free(&res);
  return 0;
}

/* Lowers the calling thread's priority by n nice levels (Linux: nice is per
 * thread, and the threads and processes it starts inherit it: the search's
 * OpenMP threads, the measure worker).  Queries are answered by threads at
 * the daemon's own level, so a busy tuner cannot make them wait for a core.
 * Failing is harmless: the work then runs at the daemon's level. */
void td_job_lower_priority(int n) {
  if (n <= 0) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  int cur = getpriority(PRIO_PROCESS, (id_t)tid);
  if (errno == 0 && setpriority(PRIO_PROCESS, (id_t)tid, TN_MIN(cur + n, 19)) != 0)
    td_log(TD_DEBUG, "cannot lower the tuning thread's priority", "err=%s", td_q(strerror(errno)));
}

/* ---- pauses: the database away (jobs.h) ---------------------------------------------- */

/* Whether the thread is asked to stop (a cancel, its deadline, the daemon
 * stopping; a lost lease is not a stop). */
bool td_job_stopping(td_job_t *j) {
  int stop = atomic_load(&j->stop);
  return stop != STOP_NONE && stop != STOP_LEASE;
}

/* One wait of a pause (a job past its deadline meanwhile stops when it
 * measures again: should_stop). */
void td_job_pause_wait(td_pause_t *pz, td_job_t *j, const tn_err_t *err) {
  if (pz->since <= 0) {
    pz->since = tn_now();
    pz->wait = 0.25;
    td_log(TD_WARN, "the database is away: the job pauses and tries again until it is back", "job=%lld err=%s",
           (long long)j->id, td_q(err->msg));
  } else {
    td_log(TD_DEBUG, "the database is still away", "job=%lld err=%s", (long long)j->id, td_q(err->msg));
  }
  for (double w = 0; w < pz->wait; w += 0.05) {
    if (pz->to_the_end ? atomic_load(&j->stop) == STOP_SHUTDOWN : td_job_stopping(j)) break;
    usleep(50 * 1000);
  }
  pz->wait = TN_MIN(pz->wait * 2, TD_PAUSE_MAX_S);
}

void td_job_pause_end(td_pause_t *pz, td_job_t *j) {
  if (pz->since <= 0) return;
  td_log(TD_INFO, "the database is back: the job resumes", "job=%lld paused_s=%.1f", (long long)j->id,
         tn_now() - pz->since);
  pz->since = 0;
}
