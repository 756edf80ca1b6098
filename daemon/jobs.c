/* jobs.c — the job queue: jobs persisted in the database, at most --jobs of
 * them running, each on its own thread running srch_tune with one build
 * pool shared by all (candidates take turns on each device: measure/'s
 * ms_device_acquire); progress and ends travel back to the loop through a
 * uv_async_t and reach watchers as tune.progress notifications.
 * Unfinished jobs resume after a restart. */
#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/td.h"
#include "ir/ir.h"
#include "search/search.h"

/* Why a job's thread is asked to stop (td_job_t.stop).  STOP_LEASE: the
 * batch it measures (shared queue) is no longer its own; it goes on with
 * the next one. */
enum { STOP_NONE, STOP_SHUTDOWN, STOP_CANCEL, STOP_DEADLINE, STOP_LEASE };

/* A running job that has not ended this long after tune.cancel (in work
 * that polls nothing: training the cost model, a commit waiting for another
 * process's lock on the database) is answered cancelled by the loop itself,
 * from memory, whatever the thread is doing; the row is written in the
 * background, and the thread ends when it next polls. */
#define TD_CANCEL_WAIT_S 0.5

typedef struct td_job {
  int64_t id;
  char target[64];
  struct td_jobs *mgr;
  atomic_int stop;          /* STOP_*: polled by should_stop */
  bool running, cancelling, ended, skip_logged;
  /* Shared queue: a job this daemon does not measure (another target's, or
   * one it only watches), followed from the database for its watchers. */
  bool remote;
  char *last_sent;          /* the last notification's params sent to the watchers (a follow sends changes only) */
  bool reading, again;      /* a read for the watchers is in flight; another is wanted */
  bool finished;            /* ended, and the last notification and cancel answers went out */
  double cancel_at;         /* tn_now() of the first tune.cancel while running (0: none) */
  bool cancel_answered;     /* the loop answered `cancelled` itself (TD_CANCEL_WAIT_S) */
  /* How the thread ended, when the database could not take it (a full
   * disk): status shows this instead of the row's stale `running`. */
  bool end_unsaved;
  db_job_state_t end_state;
  char end_error[TN_ERR_MSG_MAX];
  int64_t trials_done;      /* as last reported by the thread */
  int failures[MS_STATUS__COUNT]; /* this daemon's run of the job */
  uv_thread_t thread;
  td_conn_t **watch;
  int nwatch, capwatch;
  td_req_t **cancels;       /* tune.cancel requests answered when it ends */
  int ncancel, capcancel;
  struct td_job *next;
} td_job_t;

typedef enum { EV_START, EV_PROGRESS, EV_END } td_event_kind_t;

typedef struct td_event {
  int64_t job;
  td_event_kind_t kind;
  int64_t trials_done;
  int failures[MS_STATUS__COUNT];
  struct td_event *next;
} td_event_t;

struct td_jobs {
  td_server_t *srv;
  td_job_t *active;         /* queued and running, oldest first */
  td_job_t *ended;          /* ended in this daemon's life (keeps live counters) */
  int nrunning;
  ms_builder_t *builder;    /* one build pool for every job: its threads are the cores */
  uv_async_t async;
  uv_timer_t cancel_timer;  /* runs while a cancelled job's thread has not ended */
  uv_timer_t poll_timer;    /* shared queue: looks for other daemons' jobs with batches to lease */
  uv_timer_t follow_timer;  /* shared queue: re-reads the watched jobs (other daemons' progress, their ends) */
  bool polling;             /* a poll is in flight */
  bool poll_failed;         /* the last poll failed (said once until one works) */
  int open_handles;         /* async + timers: m is freed when all are closed */
  uv_mutex_t lock;          /* guards the event list */
  td_event_t *events, **tail;
};

/* ---- the worker thread ----------------------------------------------------------- */

static void post(td_job_t *j, td_event_kind_t kind, int64_t trials, const int *failures) {
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

typedef struct run_ctx {
  td_job_t *job;
  int64_t base; /* trials done before this run (a resumed job) */
  char device[MS_DEVICE_NAME_MAX]; /* where the job's candidates run */
  double started, deadline; /* tn_now() clock */
  const db_batch_t *batch;  /* shared queue: the leased batch being measured */
} run_ctx_t;

/* A job without a time budget (seconds 0) may run this long. */
#define TD_NO_BUDGET_S 86400.0

/* Asked by the search between candidates and batches, and from the
 * reference evaluator's threads and a running candidate's wait (so it is
 * thread-safe: an atomic and the clock).  Past the deadline the job is
 * stopped as STOP_DEADLINE unless something else stopped it first. */
static bool should_stop(void *ctx) {
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
  post(r->job, EV_PROGRESS, trials, p->failures);
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
static void job_opts(td_job_t *j, const db_job_t *row, srch_opts_t *o) {
  srch_opts_default(o);
  apply_options(row->options, o);
  o->max_seconds = row->budget_seconds;
  o->seed = row->seed;
  o->db_path = j->mgr->srv->cfg.db_path;
  o->job_id = j->id;
  o->builder = j->mgr->builder;
}

static void deadline_error(const db_job_t *row, double started, double grace, tn_err_t *err) {
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
static int run_search(td_job_t *j, const db_job_t *row, const ir_workload_t *w, const tn_target_t *t,
                      double started, db_job_state_t *final, int64_t *trials, int64_t *best, tn_err_t *err) {
  double grace = j->mgr->srv->cfg.deadline_grace;
  double budget = row->budget_seconds > 0 ? row->budget_seconds : TD_NO_BUDGET_S;
  run_ctx_t ctx = {j, row->trials_done, "", started, started + budget + grace, NULL};
  ms_device_name(t, ctx.device, sizeof ctx.device);
  *trials = row->trials_done;
  *final = DB_JOB_DONE;
  if (row->budget_trials - row->trials_done <= 0) return 0;
  srch_opts_t o;
  job_opts(j, row, &o);
  o.max_trials = (int)(row->budget_trials - row->trials_done);
  srch_task_t task = {w, 1.0, row->workload_id}; /* registered at tune.submit */
  srch_callbacks_t cb = {.on_progress = on_progress, .on_batch = on_batch, .should_stop = should_stop, .ctx = &ctx,
                         .on_log = on_log};
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
    deadline_error(row, started, grace, err);
  }
  srch_result_free(&res);
  return 0;
}

/* Lowers the calling thread's priority by n nice levels (Linux: nice is per
 * thread, and the threads and processes it starts inherit it: the search's
 * OpenMP threads, the measure worker).  Queries are answered by threads at
 * the daemon's own level, so a busy tuner cannot make them wait for a core.
 * Failing is harmless: the work then runs at the daemon's level. */
static void lower_priority(int n) {
  if (n <= 0) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  int cur = getpriority(PRIO_PROCESS, (id_t)tid);
  if (errno == 0 && setpriority(PRIO_PROCESS, (id_t)tid, TN_MIN(cur + n, 19)) != 0)
    td_log(TD_DEBUG, "cannot lower the tuning thread's priority", "err=%s", td_q(strerror(errno)));
}

/* ---- the shared job queue (PostgreSQL) ------------------------------------------------ */

/* On a shared database a job is measured batch by batch (db_batch_t) by
 * every daemon of its target: each job thread leases a batch, runs the
 * search for the batch's trials (its state rebuilt from the target's shared
 * records: the best candidates seed the population, the cost model warm-
 * starts from them), commits records, trials and the lease check in one
 * transaction and marks the batch done; a renewer thread keeps the lease
 * while it works.  The last batch (the re-measure and the unscheduled
 * program) ends the job. */

/* The lease's renewal, every lease_s / 3 on a connection of its own. */
typedef struct renewer {
  td_job_t *job;
  const td_config_t *cfg;
  uv_thread_t thread;
  uv_mutex_t mu;          /* guards the fields below; held while renewing */
  uv_cond_t cv;
  bool quit, active;
  bool away;              /* the last renewal found the database away */
  db_batch_t batch;
} renewer_t;

static double lease_seconds(const td_config_t *cfg) { return cfg->lease_s > 0 ? cfg->lease_s : 30; }

static void renew_main(void *arg) {
  renewer_t *rn = arg;
  db_t *db = NULL;
  double every = lease_seconds(rn->cfg) / 3;
  uv_mutex_lock(&rn->mu);
  while (!rn->quit) {
    uv_cond_timedwait(&rn->cv, &rn->mu, (uint64_t)(every * 1e9));
    if (rn->quit || !rn->active) continue;
    tn_err_t err = {0};
    int rc = db ? 0 : db_open(rn->cfg->db_path, &db, &err);
    if (!rc) rc = db_batch_renew(db, &rn->batch, rn->cfg->name, lease_seconds(rn->cfg), &err);
    if (rc == TN_ESTATE) {
      int none = STOP_NONE;
      atomic_compare_exchange_strong(&rn->job->stop, &none, STOP_LEASE);
      rn->active = false;
    }
    /* a database that is away: tried again at the next tick, the lease may still hold (said once) */
    if (rc && (rc != TN_EAGAIN || !rn->away))
      td_log(rc == TN_ESTATE || rc == TN_EAGAIN ? TD_WARN : TD_ERROR, "cannot renew a batch's lease",
             "job=%lld batch=%lld err=%s",
             (long long)rn->batch.job_id, (long long)rn->batch.batch, td_q(err.msg));
    rn->away = rc == TN_EAGAIN;
  }
  uv_mutex_unlock(&rn->mu);
  db_close(db);
}

static int renewer_start(renewer_t *rn, td_job_t *j) {
  *rn = (renewer_t){.job = j, .cfg = &j->mgr->srv->cfg};
  uv_mutex_init(&rn->mu);
  uv_cond_init(&rn->cv);
  if (uv_thread_create(&rn->thread, renew_main, rn) == 0) return 0;
  uv_cond_destroy(&rn->cv);
  uv_mutex_destroy(&rn->mu);
  return -1;
}

/* The batch to keep leased (NULL: none, it is done or given back). */
static void renewer_set(renewer_t *rn, const db_batch_t *b) {
  uv_mutex_lock(&rn->mu);
  rn->active = b != NULL;
  if (b) rn->batch = *b;
  uv_mutex_unlock(&rn->mu);
}

static void renewer_stop(renewer_t *rn) {
  uv_mutex_lock(&rn->mu);
  rn->quit = true;
  uv_cond_signal(&rn->cv);
  uv_mutex_unlock(&rn->mu);
  uv_thread_join(&rn->thread);
  uv_cond_destroy(&rn->cv);
  uv_mutex_destroy(&rn->mu);
}

/* Inside each commit of the batch's trials: still our lease (else the
 * commit rolls back and the trials are the new holder's to measure). */
static int check_lease(db_t *db, void *ctx, tn_err_t *err) {
  run_ctx_t *r = ctx;
  const td_config_t *cfg = &r->job->mgr->srv->cfg;
  return db_batch_commit_check(db, r->batch, cfg->name, lease_seconds(cfg), err);
}

/* The search of one leased batch: its trials not committed yet (a lapsed
 * holder may have committed some), or for the last batch the re-measure
 * and the baseline.  *stop_out: why it stopped early (STOP_NONE: it did
 * not). */
static int run_batch(td_job_t *j, const db_job_t *row, const ir_workload_t *w, const tn_target_t *t, double started,
                     db_t *db, const db_batch_t *b, int64_t *best, int *stop_out, tn_err_t *err) {
  *stop_out = STOP_NONE;
  int64_t have = 0;
  if (db_batch_committed(db, b, &have, err)) return err->code;
  if (b->trials > 0 && have >= b->trials) return 0;
  srch_opts_t o;
  job_opts(j, row, &o);
  if (b->trials > 0) {
    o.max_trials = o.batch_size = (int)(b->trials - have);
    o.remeasure = 0;
    o.baseline = false;
  } else {
    o.epilogue_only = true;
    o.max_trials = 0;
  }
  o.job_batch = true;
  o.job_trial_base = b->first_trial - 1 + have;
  o.seed = row->seed ^ ((uint64_t)b->batch * 0x9e3779b97f4a7c15ULL + (uint64_t)b->leases); /* a batch's own stream */
  double budget = row->budget_seconds > 0 ? row->budget_seconds : TD_NO_BUDGET_S;
  run_ctx_t ctx = {j, row->trials_done, "", started, started + budget + j->mgr->srv->cfg.deadline_grace, b};
  ms_device_name(t, ctx.device, sizeof ctx.device);
  srch_task_t task = {w, 1.0, row->workload_id}; /* registered at tune.submit */
  srch_callbacks_t cb = {.on_progress = on_progress, .on_batch = on_batch, .should_stop = should_stop, .ctx = &ctx,
                         .on_log = on_log, .on_commit = check_lease};
  srch_result_t res;
  memset(&res, 0, sizeof res);
  int rc = srch_tune(&task, 1, t, &o, &cb, &res, err);
  int stop = atomic_load(&j->stop);
  if (res.ntasks > 0 && res.best && res.best[0].found) *best = res.best[0].db_id;
  if (stop != STOP_NONE && (res.stopped || rc)) *stop_out = stop;
  else if (rc == TN_ESTATE) *stop_out = STOP_LEASE; /* the commit found the lease lost */
  srch_result_free(&res);
  return *stop_out != STOP_NONE ? 0 : rc;
}

/* Waits a quarter of a second unless asked to stop (the deadline included). */
static bool queue_wait(td_job_t *j, const db_job_t *row, double started) {
  double budget = row->budget_seconds > 0 ? row->budget_seconds : TD_NO_BUDGET_S;
  run_ctx_t ctx = {j, 0, "", started, started + budget + j->mgr->srv->cfg.deadline_grace, NULL};
  for (int i = 0; i < 5; i++) {
    if (should_stop(&ctx)) return false;
    usleep(50 * 1000);
  }
  return true;
}

/* ---- pauses: the database away ----------------------------------------------------------
 * A shared database that is away (TN_EAGAIN: a restart, terminated or
 * refused connections, a full disk) pauses a job rather than failing it:
 * its thread waits, a quarter of a second at first, doubling up to
 * TD_PAUSE_MAX_S, and tries the same step again, for as long as it takes
 * (a stop still stops it: a cancel, its deadline, the daemon stopping).
 * What was committed stays; a batch's uncommitted measurements are measured
 * again; a lease that lapsed meanwhile is the next holder's. */
#define TD_PAUSE_MAX_S 4.0

typedef struct pause {
  double since;   /* tn_now() when the database went away (0: it is not) */
  double wait;    /* the next wait */
  bool to_the_end; /* only the daemon stopping ends the wait (the job's end is being written) */
} pause_t;

/* Whether the thread is asked to stop (a cancel, its deadline, the daemon
 * stopping; a lost lease is not a stop). */
static bool stopping(td_job_t *j) {
  int stop = atomic_load(&j->stop);
  return stop != STOP_NONE && stop != STOP_LEASE;
}

/* One wait of a pause (a job past its deadline meanwhile stops when it
 * measures again: should_stop). */
static void pause_wait(pause_t *pz, td_job_t *j, const tn_err_t *err) {
  if (pz->since <= 0) {
    pz->since = tn_now();
    pz->wait = 0.25;
    td_log(TD_WARN, "the database is away: the job pauses and tries again until it is back", "job=%lld err=%s",
           (long long)j->id, td_q(err->msg));
  } else {
    td_log(TD_DEBUG, "the database is still away", "job=%lld err=%s", (long long)j->id, td_q(err->msg));
  }
  for (double w = 0; w < pz->wait; w += 0.05) {
    if (pz->to_the_end ? atomic_load(&j->stop) == STOP_SHUTDOWN : stopping(j)) break;
    usleep(50 * 1000);
  }
  pz->wait = TN_MIN(pz->wait * 2, TD_PAUSE_MAX_S);
}

static void pause_end(pause_t *pz, td_job_t *j) {
  if (pz->since <= 0) return;
  td_log(TD_INFO, "the database is back: the job resumes", "job=%lld paused_s=%.1f", (long long)j->id,
         tn_now() - pz->since);
  pz->since = 0;
}

/* The job's batches, one lease at a time, until the job ends (here or on
 * another daemon) or this daemon stops.  *write_end: whether the job's end
 * is this thread's to write (else the row is left as it is: another daemon
 * ended it or goes on with it; the last batch's db_batch_done ends it). */
static int run_queue(td_job_t *j, db_t *db, const db_job_t *first, const ir_workload_t *w, const tn_target_t *t,
                     double started, pause_t *pz, db_job_state_t *final, bool *write_end, int64_t *best,
                     tn_err_t *err) {
  const td_config_t *cfg = &j->mgr->srv->cfg;
  srch_opts_t o;
  job_opts(j, first, &o);
  renewer_t rn;
  if (renewer_start(&rn, j) != 0) return tn_err_set(err, TN_EIO, "cannot start the lease renewer's thread");
  *write_end = false;
  size_t nbatches = 0;
  bool planned = false, held = false, measured = false; /* held: b is ours (measured: and its trials committed) */
  db_batch_t b;
  int rc = 0;
  tn_arena_t *a = tn_arena_new();
  for (;;) {
    int stop = atomic_load(&j->stop);
    if (stop == STOP_CANCEL || stop == STOP_DEADLINE) {
      *final = stop == STOP_CANCEL ? DB_JOB_CANCELLED : DB_JOB_FAILED;
      if (stop == STOP_DEADLINE) deadline_error(first, started, cfg->deadline_grace, err);
      *write_end = true;
      break;
    }
    if (stop == STOP_SHUTDOWN) break; /* the other daemons go on; this one resumes at its next start */
    db_job_t row;
    tn_arena_free(a);
    a = tn_arena_new();
    rc = db_job_get(db, j->id, &row, a, err);
    if (!rc && db_job_state_final(row.state)) break; /* ended by another daemon (its last batch, a cancel) */
    if (!rc && !planned && !(rc = db_job_batches_plan(db, j->id, TN_MAX(o.batch_size, 1), &nbatches, err)))
      planned = true;
    if (!rc && held) { /* kept through a pause: still ours? */
      rc = db_batch_renew(db, &b, cfg->name, lease_seconds(cfg), err);
      if (rc == TN_ESTATE) {
        td_log(TD_WARN, "lost a batch's lease while the database was away: its trials are another daemon's now",
               "job=%lld batch=%lld", (long long)j->id, (long long)b.batch);
        held = measured = false;
        rc = 0;
        continue;
      }
    } else if (!rc) {
      rc = db_batch_lease(db, row.target_id, j->id, cfg->name, lease_seconds(cfg), &b, &held, err);
      measured = false;
    }
    if (rc == TN_EAGAIN) {
      pause_wait(pz, j, err);
      continue;
    }
    if (rc) break;
    pause_end(pz, j);
    if (!held) { /* the rest is leased by others: wait for the job's end or a lapsed lease */
      queue_wait(j, &row, started);
      continue;
    }
    int why = STOP_NONE;
    if (!measured) {
      td_log(TD_DEBUG, "batch leased", "job=%lld batch=%lld trials=%lld leases=%lld", (long long)j->id,
             (long long)b.batch, (long long)b.trials, (long long)b.leases);
      renewer_set(&rn, &b);
      rc = run_batch(j, &row, w, t, started, db, &b, best, &why, err);
      renewer_set(&rn, NULL);
    }
    if (why == STOP_LEASE) {
      int lost = STOP_LEASE;
      atomic_compare_exchange_strong(&j->stop, &lost, STOP_NONE);
      td_log(TD_WARN, "lost a batch's lease: its trials are another daemon's now", "job=%lld batch=%lld",
             (long long)j->id, (long long)b.batch);
      held = false;
      continue;
    }
    if (rc == TN_EAGAIN && why == STOP_NONE) { /* kept: measured on once the database is back, if still ours */
      pause_wait(pz, j, err);
      continue;
    }
    tn_err_t rerr = {0};
    if (rc || why != STOP_NONE) { /* given back at once rather than when the lease lapses */
      if (db_batch_release(db, &b, cfg->name, &rerr) != 0)
        td_log(TD_WARN, "cannot give a batch back", "job=%lld batch=%lld err=%s", (long long)j->id,
               (long long)b.batch, td_q(rerr.msg));
      held = false;
      if (rc) {
        *final = DB_JOB_FAILED;
        *write_end = true;
        break;
      }
      continue;
    }
    measured = true;
    if ((rc = db_batch_done(db, &b, cfg->name, &rerr)) == TN_EAGAIN) {
      pause_wait(pz, j, &rerr);
      rc = 0;
      continue;
    }
    held = measured = false;
    if (rc) {
      rc = 0; /* lost between the last commit and now: the next holder finds every trial committed */
      td_log(TD_WARN, "cannot mark a batch done", "job=%lld batch=%lld err=%s", (long long)j->id,
             (long long)b.batch, td_q(rerr.msg));
      continue;
    }
    td_log(TD_INFO, "batch done", "job=%lld batch=%lld of=%zu trials=%lld", (long long)j->id, (long long)b.batch,
           nbatches, (long long)b.trials);
    if (b.trials == 0) { /* the last batch: the job is done (db_batch_done marked it) */
      *final = DB_JOB_DONE;
      *write_end = true;
      break;
    }
  }
  if (held) { /* stopping (or failed) with a batch in hand: the others need not wait for its lease to lapse */
    tn_err_t rerr = {0};
    if (db_batch_release(db, &b, cfg->name, &rerr) != 0)
      td_log(TD_DEBUG, "cannot give a batch back", "job=%lld batch=%lld err=%s", (long long)j->id,
             (long long)b.batch, td_q(rerr.msg));
  }
  renewer_stop(&rn);
  tn_arena_free(a);
  return rc;
}

/* Opens the job's connection and reads its row and workload, pausing while
 * a shared database is away. */
static int load_job(td_job_t *j, db_t **db, db_job_t *row, db_workload_t *wrow, tn_arena_t *a, pause_t *pz,
                    tn_err_t *err) {
  const td_config_t *cfg = &j->mgr->srv->cfg;
  for (;;) {
    int rc = *db ? 0 : db_open(cfg->db_path, db, err);
    if (!rc) rc = db_job_get(*db, j->id, row, a, err);
    if (!rc) rc = db_workload_get(*db, row->workload_hash, wrow, a, err);
    if (rc != TN_EAGAIN || stopping(j)) return rc;
    pause_wait(pz, j, err);
  }
}

/* Writes the job's end; on a shared database that is away, pauses until it
 * is back, whatever stopped the job (unless the daemon stops meanwhile: the
 * row then stays as it is, and the job resumes at the next start). */
static int write_job_end(td_job_t *j, db_t *db, const db_job_progress_t *pr, pause_t *pz, tn_err_t *err) {
  pz->to_the_end = true;
  for (;;) {
    int rc = db_job_update(db, j->id, pr, err);
    if (rc != TN_EAGAIN || atomic_load(&j->stop) == STOP_SHUTDOWN) return rc;
    pause_wait(pz, j, err);
  }
}

/* A job's thread frees what it allocated, but glibc keeps the freed pages
 * in its arenas (one per thread allocating at once): untrimmed, a daemon's
 * resident memory climbed with every job although its heap stayed small
 * (bench/soak.py: 54 to 187 MiB in 20 minutes, 96 MiB after one trim). */
static void give_back_memory(void) {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

static void job_main(void *arg) {
  td_job_t *j = arg;
  lower_priority(j->mgr->srv->cfg.tune_nice);
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  db_t *db = NULL;
  db_job_t row = {0};
  db_workload_t wrow;
  ir_workload_t *w = NULL;
  tn_target_t t;
  db_job_state_t final = DB_JOB_FAILED;
  int64_t trials = -1, best = 0;
  const td_config_t *cfg = &j->mgr->srv->cfg;
  double started = tn_now();
  pause_t pz = {0};
  bool queue = db_is_url(cfg->db_path), write_end = true;
  int rc = load_job(j, &db, &row, &wrow, a, &pz, &err);
  if (!rc) rc = ir_workload_parse_stored(wrow.name, wrow.source, wrow.params, &w, &err);
  if (!rc) rc = td_target_lookup(&j->mgr->srv->machine, row.target_name, &t, &err);
  while (!rc && (!queue || row.state == DB_JOB_QUEUED)) {
    rc = db_job_update(db, j->id, &(db_job_progress_t){DB_JOB_RUNNING, -1, 0, NULL}, &err);
    if (rc == TN_ESTATE && queue) rc = 0; /* another daemon moved it first */
    if (rc != TN_EAGAIN || stopping(j)) break;
    pause_wait(&pz, j, &err);
  }
  if (rc == TN_EAGAIN) { /* stopped while the database was away, before the job started */
    int stop = atomic_load(&j->stop);
    rc = 0;
    write_end = stop != STOP_SHUTDOWN; /* a shutdown: it resumes at the next start */
    final = stop == STOP_CANCEL ? DB_JOB_CANCELLED : DB_JOB_FAILED;
    if (stop == STOP_DEADLINE) deadline_error(&row, started, cfg->deadline_grace, &err);
  } else if (!rc) {
    td_log(TD_INFO, "job started", "job=%lld workload=%s target=%s trials_done=%lld budget=%lld", (long long)j->id,
           row.workload_hash, row.target_name, (long long)row.trials_done, (long long)row.budget_trials);
    post(j, EV_START, row.trials_done, NULL);
    if (queue) rc = run_queue(j, db, &row, w, &t, started, &pz, &final, &write_end, &best, &err);
    else rc = run_search(j, &row, w, &t, started, &final, &trials, &best, &err);
  }
  if (rc) final = DB_JOB_FAILED, write_end = true;
  bool failed = final == DB_JOB_FAILED;
  tn_err_t uerr = {0};
  db_job_progress_t pr = {final, trials, best, failed ? err.msg : NULL};
  if (!write_end) {
    td_log(TD_INFO, "job left to the other daemons", "job=%lld", (long long)j->id);
    ir_workload_free(w);
    db_close(db);
    tn_arena_free(a);
    give_back_memory();
    post(j, EV_END, -1, NULL);
    return;
  }
  if (!db || (write_job_end(j, db, &pr, &pz, &uerr) != 0 && uerr.code != TN_ESTATE)) {
    /* A full disk (or a broken database) refuses the end too: the loop
     * shows it from memory, and the row, still running, resumes at the next
     * start. */
    td_log(TD_ERROR, "cannot record the job's end", "job=%lld err=%s", (long long)j->id,
           td_q(db ? uerr.msg : err.msg));
    j->end_state = final;
    if (failed && db) snprintf(j->end_error, sizeof j->end_error, "%.600s (its end could not be recorded either: %.300s)",
                               err.msg, uerr.msg);
    else if (failed) snprintf(j->end_error, sizeof j->end_error, "%s", err.msg);
    else snprintf(j->end_error, sizeof j->end_error, "its end (%s) could not be recorded: %.600s",
                  db_job_state_name(final), uerr.msg);
    j->end_unsaved = true; /* read by the loop after EV_END (the event list's lock orders it) */
  }
  td_log(failed ? TD_ERROR : TD_INFO, "job ended", "job=%lld state=%s trials_done=%lld%s%s", (long long)j->id,
         db_job_state_name(final), (long long)trials, failed ? " err=" : "", failed ? td_q(err.msg) : "");
  ir_workload_free(w);
  db_close(db);
  tn_arena_free(a);
  give_back_memory();
  post(j, EV_END, trials, NULL);
}

/* ---- the loop side ----------------------------------------------------------------- */

static td_job_t *find(td_job_t *list, int64_t id) {
  for (; list; list = list->next)
    if (list->id == id) return list;
  return NULL;
}

static void unlink_job(td_job_t **list, td_job_t *j) {
  for (td_job_t **p = list; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      j->next = NULL;
      return;
    }
}

static void drop_watchers(td_job_t *j) {
  for (int i = 0; i < j->nwatch; i++) td_conn_unref(j->watch[i]);
  j->nwatch = 0;
}

static td_job_t *find_known(td_jobs_t *m, int64_t id) {
  td_job_t *j = find(m->active, id);
  return j ? j : find(m->ended, id);
}

/* The job's object read for its watchers (tune.progress) and, once the job
 * ended, for its cancel requests: on a reader thread, one read per job at a
 * time so that notifications go out in order. */
typedef struct job_read {
  td_read_t read;
  td_server_t *srv;
  int64_t id;
  bool last;          /* read after the job ended: the last word */
  bool follow;        /* a follow's read: sent only if it changed */
  cJSON *job;         /* out (NULL: err) */
  tn_err_t err;
} job_read_t;

static void refresh(td_server_t *srv, td_job_t *j, bool follow);
static void finish_job(td_server_t *srv, td_job_t *j);

/* A read that fails on a connection the server dropped (a restart) is
 * tried once more, on the new connection the next statement opens; one
 * that fails still because the database is away is tried again by the
 * follow timer (the watchers' last word must not be lost to it). */
static void job_read_work(td_read_t *rd, db_t *db) {
  job_read_t *r = (job_read_t *)rd;
  r->job = td_job_read(db, r->id, &r->err);
  if (!r->job && r->err.code == TN_EAGAIN) r->job = td_job_read(db, r->id, &r->err);
}

/* Sends the job object to the watchers (a follow's: only when it differs
 * from the last one sent). */
static void send_to_watchers(td_job_t *j, const cJSON *job, bool changes_only) {
  if (j->nwatch == 0) return;
  char *text = cJSON_PrintUnformatted(job);
  bool same = text && j->last_sent && strcmp(text, j->last_sent) == 0;
  free(j->last_sent);
  j->last_sent = text;
  if (same && changes_only) return;
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "jsonrpc", "2.0");
  cJSON_AddStringToObject(n, "method", "tune.progress");
  cJSON_AddItemReferenceToObject(n, "params", (cJSON *)job);
  char *s = cJSON_PrintUnformatted(n);
  cJSON_Delete(n);
  /* td_conn_send may drop a slow watcher (and so edit the list): copy it. */
  int nw = j->nwatch;
  td_conn_t **ws = tn_xmalloc(sizeof *ws * (size_t)nw);
  memcpy(ws, j->watch, sizeof *ws * (size_t)nw);
  for (int i = 0; i < nw; i++) td_conn_ref(ws[i]);
  for (int i = 0; i < nw; i++) td_conn_send(ws[i], s, strlen(s), true);
  for (int i = 0; i < nw; i++) td_conn_unref(ws[i]);
  free(ws);
  free(s);
}

/* Whether a job object's state is final. */
static bool job_over(const cJSON *job) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(job, "state");
  db_job_state_t state;
  return cJSON_IsString(st) && db_job_state_parse(st->valuestring, &state, NULL) == 0 && db_job_state_final(state);
}

/* The watchers' connections closed: the job cannot be followed (its last
 * read failed for good), and a watcher must not wait for a word that never
 * comes. */
static void close_watchers(td_job_t *j, const tn_err_t *err) {
  td_log(TD_ERROR, "cannot read a watched job: closing its watchers' connections", "job=%lld watchers=%d err=%s",
         (long long)j->id, j->nwatch, td_q(err->msg));
  for (int i = 0; i < j->nwatch; i++) td_conn_close_graceful(j->watch[i]);
}

static void job_read_done(td_read_t *rd) {
  job_read_t *r = (job_read_t *)rd;
  td_server_t *srv = r->srv;
  td_job_t *j = srv->jobs ? find_known(srv->jobs, r->id) : NULL;
  if (j) j->reading = false;
  if (j && !r->job && r->err.code == TN_EAGAIN && !srv->stopping) {
    td_log(TD_DEBUG, "cannot read a watched job: the database is away (tried again)", "job=%lld err=%s",
           (long long)j->id, td_q(r->err.msg));
  } else if (j) {
    if (r->job) {
      td_job_live(srv, r->job);
      send_to_watchers(j, r->job, r->follow);
    }
    if (r->last) {
      if (!r->job && j->nwatch > 0) close_watchers(j, &r->err);
      drop_watchers(j);
      for (int i = 0; i < j->ncancel; i++) {
        td_req_t *req = j->cancels[i];
        if (r->job) req->result = cJSON_Duplicate(r->job, true);
        else td_req_tn_error(req, TD_E_NOT_FOUND, &r->err);
        td_req_finish(req);
      }
      j->ncancel = 0;
      j->finished = true;
    } else if (r->job && !j->running && !j->ended && !j->cancelling && job_over(r->job)) {
      finish_job(srv, j); /* over on another daemon (done, cancelled, failed): the last word follows */
    } else if (j->again || j->ended) {
      j->again = false;
      refresh(srv, j, false);
    }
  }
  cJSON_Delete(r->job);
  free(r);
}

static void refresh(td_server_t *srv, td_job_t *j, bool follow) {
  if (j->finished) return;
  if (j->reading) {
    j->again |= !follow;
    return;
  }
  if (!j->ended && j->nwatch == 0) return;
  if (j->ended && j->nwatch == 0 && j->ncancel == 0) {
    j->finished = true; /* nobody to tell */
    return;
  }
  job_read_t *r = tn_xcalloc(1, sizeof *r);
  r->srv = srv;
  r->id = j->id;
  r->last = j->ended;
  r->follow = follow && !j->ended;
  if (td_read_queue(srv, &r->read, job_read_work, job_read_done) != 0) {
    free(r); /* the daemon has closed: nobody waits any more */
    return;
  }
  j->reading = true;
}

static void free_job(td_job_t *j) {
  drop_watchers(j);
  free(j->watch);
  free(j->cancels);
  free(j->last_sent);
  free(j);
}

/* The ended jobs kept for what only memory says of them (this daemon's
 * failure counts, an end the database could not take): the newest
 * TD_ENDED_KEEP, and any whose last word has not gone out yet.  A daemon
 * that runs for months runs as many jobs. */
#define TD_ENDED_KEEP 256

static void prune_ended(td_jobs_t *m) {
  int n = 0;
  for (td_job_t **p = &m->ended; *p;) {
    td_job_t *j = *p;
    if (++n > TD_ENDED_KEEP && j->finished && !j->end_unsaved) {
      *p = j->next;
      free_job(j);
    } else {
      p = &j->next;
    }
  }
}

/* The job is over (ended, cancelled while queued, ended on another daemon):
 * it moves to the ended list; the last notification and the cancel
 * answers follow its last read. */
static void finish_job(td_server_t *srv, td_job_t *j) {
  td_jobs_t *m = srv->jobs;
  unlink_job(&m->active, j);
  j->ended = true;
  j->next = m->ended;
  m->ended = j;
  refresh(srv, j, false);
  prune_ended(m);
}

/* Shared queue: every TD_FOLLOW_MS the watched jobs are read again (their
 * progress on other daemons, an end written there), and a last read that
 * found the database away is tried again. */
#define TD_FOLLOW_MS 1000

static void on_follow_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping) return;
  for (td_job_t *j = m->active; j; j = j->next)
    if (j->nwatch > 0) refresh(srv, j, true);
  for (td_job_t *j = m->ended; j; j = j->next)
    if (!j->finished) refresh(srv, j, false);
}

static void handle_event(td_server_t *srv, td_event_t *e) {
  td_job_t *j = find(srv->jobs->active, e->job);
  if (!j) return;
  if (e->kind != EV_START && e->trials_done >= 0) j->trials_done = e->trials_done;
  if (e->kind == EV_PROGRESS) memcpy(j->failures, e->failures, sizeof j->failures);
  if (e->kind != EV_END) {
    refresh(srv, j, false);
    return;
  }
  uv_thread_join(&j->thread); /* it has posted its last event and is returning */
  j->running = false;
  srv->jobs->nrunning--;
  finish_job(srv, j);
}

static void on_async(uv_async_t *h) {
  td_server_t *srv = h->data;
  td_jobs_t *m = srv->jobs;
  uv_mutex_lock(&m->lock);
  td_event_t *e = m->events;
  m->events = NULL;
  m->tail = &m->events;
  uv_mutex_unlock(&m->lock);
  bool ended = false;
  while (e) {
    td_event_t *next = e->next;
    ended |= e->kind == EV_END;
    handle_event(srv, e);
    free(e);
    e = next;
  }
  if (ended) {
    td_jobs_schedule(srv);
    td_server_maybe_exit(srv);
  }
}

/* Whether this daemon measures jobs of the target: on a shared queue only
 * its own target's (with or without TF32), elsewhere any it can stand in
 * for (target_usable decides). */
static bool serves(const td_server_t *srv, const char *target) {
  if (!db_is_url(srv->cfg.db_path)) return true;
  size_t n = strlen(srv->cfg.target);
  return strncmp(target, srv->cfg.target, n) == 0 && (!target[n] || strcmp(target + n, "+tf32") == 0);
}

static td_job_t *new_job(td_jobs_t *m, int64_t id, const char *target) {
  td_job_t *j = tn_xcalloc(1, sizeof *j);
  j->id = id;
  j->mgr = m;
  snprintf(j->target, sizeof j->target, "%s", target);
  j->remote = !serves(m->srv, target);
  atomic_init(&j->stop, STOP_NONE);
  td_job_t **p = &m->active;
  while (*p) p = &(*p)->next;
  *p = j;
  return j;
}

/* ---- the shared queue's poll ----------------------------------------------------------- */

/* Jobs of this daemon's target with a batch to lease, submitted to any
 * daemon: each gets a job thread here too (when a slot is free), which
 * leases their batches beside the other daemons. */
typedef struct poll_work {
  uv_work_t w;
  td_server_t *srv;
  int64_t ids[16];
  size_t n;
} poll_work_t;

static void poll_run(uv_work_t *w) {
  poll_work_t *pw = w->data;
  td_server_t *srv = pw->srv;
  tn_err_t err = {0};
  uv_mutex_lock(&srv->wdb_lock);
  int rc = db_batch_jobs_open(srv->wdb, srv->cfg.target, pw->ids, TN_ARRAY_LEN(pw->ids), &pw->n, &err);
  uv_mutex_unlock(&srv->wdb_lock);
  if (rc) td_log(TD_WARN, "cannot look for batches to lease", "err=%s", td_q(err.msg));
}

static void poll_done(uv_work_t *w, int status) {
  (void)status;
  poll_work_t *pw = w->data;
  td_server_t *srv = pw->srv;
  td_jobs_t *m = srv->jobs;
  srv->inflight_work--;
  if (m && !srv->stopping) {
    m->polling = false;
    bool added = false;
    for (size_t i = 0; i < pw->n; i++) {
      td_job_t *known = find(m->active, pw->ids[i]);
      if (known && known->remote && !known->cancelling) { /* followed for a watcher until now: measured here too */
        known->remote = false;
        added = true;
      }
      if (known) continue;
      td_log(TD_INFO, "joining a shared job: its batches are leasable", "job=%lld target=%s", (long long)pw->ids[i],
             srv->cfg.target);
      new_job(m, pw->ids[i], srv->cfg.target);
      added = true;
    }
    if (added) td_jobs_schedule(srv);
  }
  free(pw);
  td_server_maybe_exit(srv);
}

static void on_poll_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping || m->polling || m->nrunning >= srv->cfg.max_jobs) return;
  poll_work_t *pw = tn_xcalloc(1, sizeof *pw);
  pw->srv = srv;
  pw->w.data = pw;
  if (uv_queue_work(srv->loop, &pw->w, poll_run, poll_done) != 0) {
    free(pw);
    return;
  }
  m->polling = true;
  srv->inflight_work++;
}

typedef struct builder_start {
  int nice;
  ms_builder_t *builder;
  int rc;
  tn_err_t *err;
} builder_start_t;

static void builder_start(void *arg) {
  builder_start_t *bs = arg;
  lower_priority(bs->nice);
  bs->rc = ms_builder_new(NULL, &bs->builder, bs->err);
}

int td_jobs_init(td_server_t *srv, tn_err_t *err) {
  td_jobs_t *m = tn_xcalloc(1, sizeof *m);
  m->srv = srv;
  m->tail = &m->events;
  uv_mutex_init(&m->lock);
  uv_async_init(srv->loop, &m->async, on_async);
  m->async.data = srv;
  uv_timer_init(srv->loop, &m->cancel_timer);
  m->cancel_timer.data = srv;
  uv_timer_init(srv->loop, &m->poll_timer);
  m->poll_timer.data = srv;
  uv_timer_init(srv->loop, &m->follow_timer);
  m->follow_timer.data = srv;
  m->open_handles = 4;
  bool queue = db_is_url(srv->cfg.db_path);
  if (queue) { /* a few polls per lease: a dead daemon's batch waits little longer than its lease */
    uint64_t every = (uint64_t)(TN_MIN(TN_MAX(srv->cfg.lease_s / 4, 0.25), 2.0) * 1000);
    uv_timer_start(&m->poll_timer, on_poll_timer, every, every);
    uv_timer_start(&m->follow_timer, on_follow_timer, TD_FOLLOW_MS, TD_FOLLOW_MS);
  }
  srv->jobs = m;
  /* Before any thread of ours: the pool sets POCL_CACHE_DIR for the
   * daemon's life (its temp dir outlives every job's worker).  Made on a
   * thread of its own at the tuning priority, which its threads (and the
   * compilers they run) inherit. */
  builder_start_t bs = {.nice = srv->cfg.tune_nice, .err = err};
  uv_thread_t th;
  if (uv_thread_create(&th, builder_start, &bs) != 0) return tn_err_set(err, TN_EIO, "cannot start a thread");
  uv_thread_join(&th);
  m->builder = bs.builder;
  int rc = bs.rc;
  if (rc) return tn_err_prefix(err, "build pool");
  db_jobs_t jobs;
  rc = db_jobs_unfinished(srv->wdb, td_job_owner(srv), &jobs, err);
  if (rc) return rc;
  for (size_t i = 0; i < jobs.n && !rc; i++) {
    const db_job_t *jb = &jobs.items[i];
    if (!serves(srv, jb->target_name)) continue; /* submitted here, measured by its target's daemons */
    if (jb->state == DB_JOB_RUNNING && !queue) { /* shared: others may be measuring it; it stays running */
      db_job_progress_t pr = {DB_JOB_QUEUED, -1, 0, NULL};
      rc = db_job_update(srv->wdb, jb->id, &pr, err);
    }
    td_log(TD_INFO, "resuming an unfinished job", "job=%lld was=%s trials_done=%lld budget=%lld target=%s",
           (long long)jb->id, db_job_state_name(jb->state), (long long)jb->trials_done,
           (long long)jb->budget_trials, jb->target_name);
    new_job(m, jb->id, jb->target_name)->trials_done = jb->trials_done;
  }
  db_jobs_free(&jobs);
  return rc;
}

static void free_list(td_job_t *j) {
  while (j) {
    td_job_t *next = j->next;
    free_job(j);
    j = next;
  }
}

static void on_handle_closed(uv_handle_t *h) {
  td_jobs_t *m = h->data;
  if (--m->open_handles == 0) free(m);
}

void td_jobs_free(td_server_t *srv) {
  td_jobs_t *m = srv->jobs;
  if (!m) return;
  srv->jobs = NULL;
  free_list(m->active);
  free_list(m->ended);
  ms_builder_free(m->builder); /* no job runs any more: nothing is queued */
  for (td_event_t *e = m->events, *next; e; e = next) next = e->next, free(e);
  uv_mutex_destroy(&m->lock);
  /* the handles live in m: freed once all closed */
  m->async.data = m->cancel_timer.data = m->poll_timer.data = m->follow_timer.data = m;
  uv_close((uv_handle_t *)&m->async, on_handle_closed);
  uv_close((uv_handle_t *)&m->cancel_timer, on_handle_closed);
  uv_close((uv_handle_t *)&m->poll_timer, on_handle_closed);
  uv_close((uv_handle_t *)&m->follow_timer, on_handle_closed);
}

void td_jobs_add(td_server_t *srv, int64_t id, const char *target) {
  if (!srv->jobs) return;
  if (!serves(srv, target)) { /* followed here only while someone watches it */
    td_log(TD_INFO, "job left to the daemons of its target", "job=%lld target=%s", (long long)id, target);
    return;
  }
  new_job(srv->jobs, id, target);
  td_jobs_schedule(srv);
}

static bool target_usable(td_server_t *srv, td_job_t *j) {
  for (int i = 0; i < srv->ntargets; i++)
    if (strcmp(srv->targets[i].t.name, j->target) == 0) return srv->targets[i].usable;
  td_target_info_t ti;
  tn_err_t err;
  return td_target_check(&srv->machine, j->target, &ti, &err) == 0 && ti.usable;
}

void td_jobs_schedule(td_server_t *srv) {
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping) return;
  for (td_job_t *j = m->active; j && m->nrunning < srv->cfg.max_jobs; j = j->next) {
    if (j->running || j->cancelling || j->remote) continue;
    if (!target_usable(srv, j)) {
      if (!j->skip_logged)
        td_log(TD_WARN, "job stays queued: its target cannot be measured here", "job=%lld target=%s",
               (long long)j->id, j->target);
      j->skip_logged = true;
      continue;
    }
    if (uv_thread_create(&j->thread, job_main, j) != 0) {
      td_log(TD_ERROR, "cannot start a job thread", "job=%lld", (long long)j->id);
      return;
    }
    j->running = true;
    m->nrunning++;
  }
}

int td_jobs_running(const td_server_t *srv) { return srv->jobs ? srv->jobs->nrunning : 0; }

int td_jobs_queued(const td_server_t *srv) {
  int n = 0;
  for (td_job_t *j = srv->jobs ? srv->jobs->active : NULL; j; j = j->next) n += !j->running && !j->remote;
  return n;
}

void td_jobs_stop_all(td_server_t *srv) {
  for (td_job_t *j = srv->jobs ? srv->jobs->active : NULL; j; j = j->next) {
    int none = STOP_NONE;
    if (j->running) atomic_compare_exchange_strong(&j->stop, &none, STOP_SHUTDOWN);
  }
}

/* ---- job objects ------------------------------------------------------------------- */

static void add_time(cJSON *o, const char *key, double t) {
  if (t > 0) cJSON_AddNumberToObject(o, key, t);
  else cJSON_AddNullToObject(o, key);
}

static cJSON *best_json(db_t *db, const db_job_t *row, double flops) {
  db_records_t best;
  tn_err_t err = {0};
  if (db_best(db, row->workload_hash, row->target_name, 1, &best, &err) != 0 || best.n == 0) {
    db_records_free(&best);
    return cJSON_CreateNull();
  }
  cJSON *b = cJSON_CreateObject();
  cJSON_AddNumberToObject(b, "record", (double)best.items[0].id);
  td_json_num(b, "median_secs", best.items[0].median_secs);
  td_json_num(b, "gflops", flops > 0 ? flops / best.items[0].median_secs * 1e-9 : NAN);
  db_records_free(&best);
  return b;
}

/* The unscheduled program's time on the job's target (null until measured),
 * and the best's speed-up over it. */
static cJSON *baseline_json(db_t *db, const db_job_t *row, double flops, const cJSON *best) {
  tn_arena_t *a = tn_arena_new();
  db_baseline_t b;
  bool found = false;
  tn_err_t err = {0};
  cJSON *o = NULL;
  if (db_baseline_get(db, row->workload_hash, row->target_name, &b, &found, a, &err) == 0 && found) {
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", db_status_name(b.status));
    td_json_num(o, "median_secs", b.median_secs);
    td_json_num(o, "gflops", flops > 0 && b.median_secs > 0 ? flops / b.median_secs * 1e-9 : NAN);
    const cJSON *bm = cJSON_GetObjectItemCaseSensitive(best, "median_secs");
    td_json_num(o, "speedup", cJSON_IsNumber(bm) && bm->valuedouble > 0 && b.median_secs > 0
                                  ? b.median_secs / bm->valuedouble : NAN);
  }
  tn_arena_free(a);
  return o ? o : cJSON_CreateNull();
}

/* The job's first failed trial, {"trial", "status", "error"}, or null: what
 * a job that ends without a kernel tells its user (tunectl submit --wait,
 * bench).  A read error leaves it null: the rest of the job still reads. */
static cJSON *first_failure_json(db_t *db, int64_t job, tn_arena_t *a) {
  db_job_trial_t t;
  const char *error;
  bool found;
  tn_err_t err = {0};
  if (db_job_first_failure(db, job, &t, &error, &found, a, &err) != 0 || !found) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "trial", (double)t.trial);
  cJSON_AddStringToObject(o, "status", db_status_name(t.status));
  if (error) cJSON_AddStringToObject(o, "error", error);
  else cJSON_AddNullToObject(o, "error");
  return o;
}

cJSON *td_job_read(db_t *db, int64_t id, tn_err_t *err) {
  tn_arena_t *a = tn_arena_new();
  db_job_t row;
  if (db_job_get(db, id, &row, a, err) != 0) {
    tn_arena_free(a);
    if (err->code == TN_EINVAL) tn_err_set(err, TN_EINVAL, "no job %lld (tune.list shows the jobs)", (long long)id);
    return NULL;
  }
  db_workload_t w = {0};
  tn_err_t werr = {0};
  bool have_w = db_workload_get(db, row.workload_hash, &w, a, &werr) == 0;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "job", (double)row.id);
  cJSON_AddStringToObject(o, "state", db_job_state_name(row.state));
  cJSON_AddStringToObject(o, "workload", row.workload_hash);
  cJSON_AddStringToObject(o, "name", have_w && w.name ? w.name : "");
  cJSON_AddStringToObject(o, "target", row.target_name);
  cJSON_AddNumberToObject(o, "trials", (double)row.budget_trials);
  cJSON_AddNumberToObject(o, "trials_done", (double)row.trials_done);
  cJSON_AddNumberToObject(o, "seconds", row.budget_seconds);
  cJSON_AddNumberToObject(o, "seed", (double)row.seed);
  cJSON_AddItemToObject(o, "options", td_json_embed(row.options ? row.options : "{}"));
  cJSON *best = best_json(db, &row, have_w ? w.flops : 0);
  cJSON_AddItemToObject(o, "best", best);
  cJSON_AddItemToObject(o, "baseline", baseline_json(db, &row, have_w ? w.flops : 0, best));
  cJSON *f = cJSON_AddObjectToObject(o, "failures");
  for (int s = MS_BUILD_ERROR; s < MS_STATUS__COUNT; s++) cJSON_AddNumberToObject(f, ms_status_name((ms_status_t)s), 0);
  cJSON_AddItemToObject(o, "first_failure", first_failure_json(db, row.id, a));
  if (row.error) cJSON_AddStringToObject(o, "error", row.error);
  else cJSON_AddNullToObject(o, "error");
  add_time(o, "created", row.created);
  add_time(o, "started", row.started);
  add_time(o, "finished", row.finished);
  tn_arena_free(a);
  return o;
}

void td_job_live(td_server_t *srv, cJSON *job) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "job");
  td_job_t *live = srv->jobs && cJSON_IsNumber(id) ? find_known(srv->jobs, (int64_t)id->valuedouble) : NULL;
  if (!live) return;
  /* the thread's count may be ahead of the last committed row */
  cJSON *done = cJSON_GetObjectItemCaseSensitive(job, "trials_done");
  if (cJSON_IsNumber(done) && (double)live->trials_done > done->valuedouble)
    cJSON_SetNumberValue(done, (double)live->trials_done);
  cJSON *f = cJSON_GetObjectItemCaseSensitive(job, "failures");
  for (int s = MS_BUILD_ERROR; s < MS_STATUS__COUNT; s++) {
    cJSON *n = cJSON_GetObjectItemCaseSensitive(f, ms_status_name((ms_status_t)s));
    if (n) cJSON_SetNumberValue(n, live->failures[s]);
  }
  /* what the row cannot say yet: a cancel already answered, or an end the
   * database could not take (a full disk) */
  db_job_state_t st;
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(job, "state");
  if (!cJSON_IsString(state) || db_job_state_parse(state->valuestring, &st, NULL) != 0 || db_job_state_final(st))
    return;
  if (live->ended && live->end_unsaved) {
    cJSON_ReplaceItemInObjectCaseSensitive(job, "state", cJSON_CreateString(db_job_state_name(live->end_state)));
    if (live->end_error[0])
      cJSON_ReplaceItemInObjectCaseSensitive(job, "error", cJSON_CreateString(live->end_error));
  } else if (live->cancel_answered) {
    cJSON_ReplaceItemInObjectCaseSensitive(job, "state", cJSON_CreateString(db_job_state_name(DB_JOB_CANCELLED)));
  }
}

/* ---- watch and cancel -------------------------------------------------------------- */

bool td_jobs_watch(td_server_t *srv, int64_t id, td_conn_t *c) {
  td_job_t *j = srv->jobs ? find(srv->jobs->active, id) : NULL;
  if (!j) return false; /* over already: the answer is the last word */
  for (int i = 0; i < j->nwatch; i++)
    if (j->watch[i] == c) return true;
  if (j->nwatch == j->capwatch)
    j->watch = tn_xrealloc(j->watch, sizeof *j->watch * (size_t)(j->capwatch = j->capwatch * 2 + 4));
  j->watch[j->nwatch++] = c;
  td_conn_ref(c);
  return true;
}

/* Watchers stay on an ended job until its last notification went out. */
static bool watches(const td_job_t *list, const td_conn_t *c) {
  for (const td_job_t *j = list; j; j = j->next)
    for (int i = 0; i < j->nwatch; i++)
      if (j->watch[i] == c) return true;
  return false;
}

bool td_jobs_conn_watching(const td_server_t *srv, const td_conn_t *c) {
  return srv->jobs && (watches(srv->jobs->active, c) || watches(srv->jobs->ended, c));
}

static void forget_watcher(td_job_t *list, td_conn_t *c) {
  for (td_job_t *j = list; j; j = j->next)
    for (int i = 0; i < j->nwatch; i++)
      if (j->watch[i] == c) {
        j->watch[i] = j->watch[--j->nwatch];
        td_conn_unref(c);
        break;
      }
}

void td_jobs_conn_closed(td_server_t *srv, td_conn_t *c) {
  if (!srv->jobs) return;
  forget_watcher(srv->jobs->active, c);
  forget_watcher(srv->jobs->ended, c);
}

/* ---- answers with a job object ------------------------------------------------------- */

static void job_answer_read(td_req_t *req, db_t *db) {
  tn_err_t err = {0};
  req->result = td_job_read(db, *(int64_t *)req->data, &err);
  if (!req->result) td_req_tn_error(req, TD_E_NOT_FOUND, &err);
}

static void job_answer_done(td_req_t *req) {
  if (req->result) td_job_live(req->srv, req->result);
}

static void set_job_id(td_req_t *req, int64_t id) {
  if (req->free_data) req->free_data(req->data);
  int64_t *p = tn_xmalloc(sizeof *p);
  *p = id;
  req->data = p;
  req->free_data = free;
}

td_reply_t td_jobs_answer(td_req_t *req, int64_t id) {
  set_job_id(req, id);
  return td_req_queue_read(req, job_answer_read, job_answer_done);
}

/* tune.watch: the answer, then notifications.  The watcher is added once the
 * answer is read, so that every notification it gets is newer; a job that
 * ended meanwhile is read once more, so its answer is the last word. */
typedef struct watch_req {
  int64_t id;
  bool reread;
} watch_req_t;

static void watch_read(td_req_t *req, db_t *db) {
  watch_req_t *w = req->data;
  tn_err_t err = {0};
  req->result = td_job_read(db, w->id, &err);
  if (!req->result) td_req_tn_error(req, TD_E_NOT_FOUND, &err);
}

/* Shared queue: a job unfinished in the database that this daemon neither
 * runs nor has run (another target's, or one its poll has not joined) is
 * followed from the database for the watcher (on_follow_timer). */
static bool follow_new(td_server_t *srv, int64_t id, const cJSON *job) {
  td_jobs_t *m = srv->jobs;
  const cJSON *target = cJSON_GetObjectItemCaseSensitive(job, "target");
  if (!m || srv->stopping || !db_is_url(srv->cfg.db_path) || find(m->ended, id) || !cJSON_IsString(target))
    return false;
  new_job(m, id, target->valuestring)->remote = true; /* a poll makes it this daemon's work when it is */
  td_log(TD_DEBUG, "following a job for a watcher", "job=%lld target=%s", (long long)id, target->valuestring);
  return true;
}

static void watch_done(td_req_t *req) {
  watch_req_t *w = req->data;
  if (!req->result) return;
  td_job_live(req->srv, req->result);
  bool final = job_over(req->result);
  if (req->conn && !req->conn->closing) {
    if (td_jobs_watch(req->srv, w->id, req->conn)) return;
    if (!final && follow_new(req->srv, w->id, req->result) && td_jobs_watch(req->srv, w->id, req->conn)) return;
  }
  if (final || w->reread) return;
  w->reread = true;
  cJSON_Delete(req->result);
  req->result = NULL;
  td_req_queue_read(req, watch_read, watch_done);
}

td_reply_t td_jobs_watch_answer(td_req_t *req, int64_t id) {
  watch_req_t *w = tn_xcalloc(1, sizeof *w);
  w->id = id;
  req->data = w;
  req->free_data = free;
  return td_req_queue_read(req, watch_read, watch_done);
}

/* ---- cancel ----------------------------------------------------------------------------- */

typedef struct cancel_work {
  int64_t id;
  tn_err_t err;
  int rc;
} cancel_work_t;

/* On a shared database another daemon's batch commit may move the row
 * between the update's read and write (TN_ESTATE while it is not final):
 * tried again. */
static void cancel_queued_work(td_req_t *req) {
  cancel_work_t *cw = req->data;
  td_server_t *srv = req->srv;
  uv_mutex_lock(&srv->wdb_lock);
  db_job_progress_t pr = {DB_JOB_CANCELLED, -1, 0, NULL};
  for (int i = 0; i < 10; i++) {
    cw->rc = db_job_update(srv->wdb, cw->id, &pr, &cw->err);
    if (cw->rc != TN_ESTATE) break;
    tn_arena_t *a = tn_arena_new();
    db_job_t row;
    bool over = db_job_get(srv->wdb, cw->id, &row, a, NULL) != 0 || db_job_state_final(row.state);
    tn_arena_free(a);
    if (over) break;
  }
  uv_mutex_unlock(&srv->wdb_lock);
}

static void cancel_queued_done(td_req_t *req) {
  cancel_work_t *cw = req->data;
  td_server_t *srv = req->srv;
  td_job_t *j = srv->jobs ? find(srv->jobs->active, cw->id) : NULL;
  bool failed = cw->rc && cw->err.code != TN_ESTATE;
  if (failed) td_req_tn_error(req, TD_E_INTERNAL, &cw->err);
  else td_log(TD_INFO, "job cancelled while queued", "job=%lld", (long long)cw->id);
  if (j && !failed) { /* answered with the job's last read, after its watchers' notification */
    if (j->ncancel == j->capcancel)
      j->cancels = tn_xrealloc(j->cancels, sizeof *j->cancels * (size_t)(j->capcancel = j->capcancel * 2 + 2));
    j->cancels[j->ncancel++] = req;
    req->requeued = true;
  }
  if (j) finish_job(srv, j);
  else if (!failed) td_jobs_answer(req, cw->id);
}

/* The row of a job answered cancelled from memory, written off the loop
 * (it may wait for a lock): the thread's own end writes it too, whichever
 * comes first. */
typedef struct mark_work {
  uv_work_t w;
  td_server_t *srv;
  int64_t id;
} mark_work_t;

static void mark_cancelled_work(uv_work_t *w) {
  mark_work_t *mw = w->data;
  tn_err_t err = {0};
  db_job_progress_t pr = {DB_JOB_CANCELLED, -1, 0, NULL};
  uv_mutex_lock(&mw->srv->wdb_lock);
  if (db_job_update(mw->srv->wdb, mw->id, &pr, &err) != 0 && err.code != TN_ESTATE)
    td_log(TD_WARN, "cannot write a cancelled job's state (its thread will)", "job=%lld err=%s", (long long)mw->id,
           td_q(err.msg));
  uv_mutex_unlock(&mw->srv->wdb_lock);
}

static void mark_cancelled_done(uv_work_t *w, int status) {
  (void)status;
  mark_work_t *mw = w->data;
  td_server_t *srv = mw->srv;
  free(mw);
  srv->inflight_work--;
  td_server_maybe_exit(srv);
}

/* Every 100 ms while a cancelled job's thread runs on: past
 * TD_CANCEL_WAIT_S the loop answers the waiting cancels itself (the job
 * shows `cancelled` from then on) and writes the row in the background. */
static void on_cancel_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  bool waiting = false;
  for (td_job_t *j = m->active; j; j = j->next) {
    if (!j->running || j->cancel_at <= 0 || j->cancel_answered) continue;
    if (tn_now() - j->cancel_at < TD_CANCEL_WAIT_S) {
      waiting = true;
      continue;
    }
    j->cancel_answered = true;
    td_log(TD_WARN, "a cancelled job has not stopped yet: answered cancelled now (it ends when it next polls)",
           "job=%lld waited_s=%.2f", (long long)j->id, tn_now() - j->cancel_at);
    for (int i = 0; i < j->ncancel; i++) { /* each answered by a read (td_job_live says cancelled) */
      td_req_t *req = j->cancels[i];
      if (td_jobs_answer(req, j->id) != TD_PENDING) td_req_finish(req);
    }
    j->ncancel = 0;
    refresh(srv, j, false); /* the watchers see `cancelled` too */
    mark_work_t *mw = tn_xcalloc(1, sizeof *mw);
    mw->srv = srv;
    mw->id = j->id;
    mw->w.data = mw;
    if (uv_queue_work(srv->loop, &mw->w, mark_cancelled_work, mark_cancelled_done) == 0) srv->inflight_work++;
    else free(mw); /* the thread's end writes it */
  }
  if (!waiting) uv_timer_stop(t);
}

td_reply_t td_jobs_cancel(td_server_t *srv, int64_t id, td_req_t *req) {
  td_job_t *j = srv->jobs ? find(srv->jobs->active, id) : NULL;
  if (j && j->running && j->cancel_answered) /* answered already; the thread is on its way out */
    return td_jobs_answer(req, id);
  if (j && j->running) {
    atomic_store(&j->stop, STOP_CANCEL);
    if (j->ncancel == j->capcancel)
      j->cancels = tn_xrealloc(j->cancels, sizeof *j->cancels * (size_t)(j->capcancel = j->capcancel * 2 + 2));
    j->cancels[j->ncancel++] = req;
    if (j->cancel_at <= 0) j->cancel_at = tn_now();
    if (!uv_is_active((uv_handle_t *)&srv->jobs->cancel_timer))
      uv_timer_start(&srv->jobs->cancel_timer, on_cancel_timer, 100, 100);
    td_log(TD_INFO, "cancelling a running job", "job=%lld", (long long)id);
    return TD_PENDING;
  }
  if (j && !j->cancelling) j->cancelling = true; /* the scheduler leaves it alone from now on */
  else if (j || !db_is_url(srv->cfg.db_path)) return td_jobs_answer(req, id); /* already over: a no-op */
  /* queued here, or maybe another daemon's (shared queue): its row says */
  cancel_work_t *cw = tn_xcalloc(1, sizeof *cw);
  cw->id = id;
  req->data = cw;
  req->free_data = free;
  return td_req_queue_work(req, cancel_queued_work, cancel_queued_done);
}
