/* job_thread.c — a job's thread: opens its own connection, reads the job
 * and its workload, marks it running, runs its search (job_search.c) or,
 * on a shared database, its batches (job_queue.c), writes its end (pausing
 * while the database is away) and posts EV_END to the registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "daemon/jobs.h"
#include "ir/ir.h"

/* Opens the job's connection and reads its row and workload, pausing while
 * a shared database is away. */
static int load_job(td_job_t *j, db_t **db, db_job_t *row, db_workload_t *wrow, tn_arena_t *a, td_pause_t *pz,
                    tn_err_t *err) {
  const td_config_t *cfg = &j->mgr->srv->cfg;
  for (;;) {
    int rc = *db ? 0 : db_open(cfg->db_path, db, err);
    if (!rc) rc = db_job_get(*db, j->id, row, a, err);
    if (!rc) rc = db_workload_get(*db, row->workload_hash, wrow, a, err);
    if (rc != TN_EAGAIN || td_job_stopping(j)) return rc;
    td_job_pause_wait(pz, j, err);
  }
}

/* Writes the job's end; on a shared database that is away, pauses until it
 * is back, whatever stopped the job (unless the daemon stops meanwhile: the
 * row then stays as it is, and the job resumes at the next start). */
static int write_job_end(td_job_t *j, db_t *db, const db_job_progress_t *pr, td_pause_t *pz, tn_err_t *err) {
  pz->to_the_end = true;
  for (;;) {
    int rc = db_job_update(db, j->id, pr, err);
    if (rc != TN_EAGAIN || atomic_load(&j->stop) == STOP_SHUTDOWN) return rc;
    td_job_pause_wait(pz, j, err);
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

void td_job_main(void *arg) {
  td_job_t *j = arg;
  td_job_lower_priority(j->mgr->srv->cfg.tune_nice);
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
  td_pause_t pz = {0};
  bool queue = db_is_url(cfg->db_path), write_end = true;
  int rc = load_job(j, &db, &row, &wrow, a, &pz, &err);
  if (!rc) rc = ir_workload_parse_stored(wrow.name, wrow.source, wrow.params, &w, &err);
  if (!rc) rc = td_target_lookup(&j->mgr->srv->machine, row.target_name, &t, &err);
  while (!rc && (!queue || row.state == DB_JOB_QUEUED)) {
    rc = db_job_update(db, j->id, &(db_job_progress_t){DB_JOB_RUNNING, -1, 0, NULL}, &err);
    if (rc == TN_ESTATE && queue) rc = 0; /* another daemon moved it first */
    if (rc != TN_EAGAIN || td_job_stopping(j)) break;
    td_job_pause_wait(&pz, j, &err);
  }
  if (rc == TN_EAGAIN) { /* stopped while the database was away, before the job started */
    int stop = atomic_load(&j->stop);
    rc = 0;
    write_end = stop != STOP_SHUTDOWN; /* a shutdown: it resumes at the next start */
    final = stop == STOP_CANCEL ? DB_JOB_CANCELLED : DB_JOB_FAILED;
    if (stop == STOP_DEADLINE) td_job_deadline_error(&row, started, cfg->deadline_grace, &err);
  } else if (!rc) {
    td_log(TD_INFO, "job started", "job=%lld workload=%s target=%s trials_done=%lld budget=%lld", (long long)j->id,
           row.workload_hash, row.target_name, (long long)row.trials_done, (long long)row.budget_trials);
    td_job_post(j, EV_START, row.trials_done, NULL);
    if (queue) rc = td_job_run_queue(j, db, &row, w, &t, started, &pz, &final, &write_end, &best, &err);
    else rc = td_job_run_search(j, &row, w, &t, started, &final, &trials, &best, &err);
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
    td_job_post(j, EV_END, -1, NULL);
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
  td_job_post(j, EV_END, trials, NULL);
}
