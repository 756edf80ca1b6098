/* job_queue.c — the shared job queue (PostgreSQL), on a job's thread: the
 * job measured batch by batch, each batch leased and its lease renewed by a
 * thread of its own while it is measured (see below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/jobs.h"

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
  td_job_opts(j, row, &o);
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
  srch_callbacks_t cb = td_job_callbacks(&ctx);
  cb.on_commit = check_lease;
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
    if (td_job_should_stop(&ctx)) return false;
    usleep(50 * 1000);
  }
  return true;
}

/* The job's batches, one lease at a time, until the job ends (here or on
 * another daemon) or this daemon stops.  *write_end: whether the job's end
 * is this thread's to write (else the row is left as it is: another daemon
 * ended it or goes on with it; the last batch's db_batch_done ends it). */
int td_job_run_queue(td_job_t *j, db_t *db, const db_job_t *first, const ir_workload_t *w, const tn_target_t *t,
                     double started, td_pause_t *pz, db_job_state_t *final, bool *write_end, int64_t *best,
                     tn_err_t *err) {
  const td_config_t *cfg = &j->mgr->srv->cfg;
  srch_opts_t o;
  td_job_opts(j, first, &o);
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
      if (stop == STOP_DEADLINE) td_job_deadline_error(first, started, cfg->deadline_grace, err);
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
      td_job_pause_wait(pz, j, err);
      continue;
    }
    if (rc) break;
    td_job_pause_end(pz, j);
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
      td_job_pause_wait(pz, j, err);
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
      td_job_pause_wait(pz, j, &rerr);
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
