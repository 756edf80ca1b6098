/* jobs.c — persisted tuning jobs: creation, the state machine with progress
 * updates, and the listings the daemon resumes from after a restart. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"

static const char *const state_names[] = {"queued", "running", "done", "cancelled", "failed"};

const char *db_job_state_name(db_job_state_t s) {
  return (unsigned)s < TN_ARRAY_LEN(state_names) ? state_names[s] : "unknown";
}

int db_job_state_parse(const char *name, db_job_state_t *out, tn_err_t *err) {
  for (size_t i = 0; name && i < TN_ARRAY_LEN(state_names); i++) {
    if (strcmp(name, state_names[i]) == 0) {
      *out = (db_job_state_t)i;
      return 0;
    }
  }
  return tn_err_set(err, TN_EINVAL,
                    "unknown job state '%s' (valid: queued, running, done, cancelled, failed)",
                    name ? name : "(null)");
}

bool db_job_state_final(db_job_state_t s) {
  return s == DB_JOB_DONE || s == DB_JOB_CANCELLED || s == DB_JOB_FAILED;
}

/* Whether a job may move from `from` to `to` (see db.h). */
static bool move_allowed(db_job_state_t from, db_job_state_t to) {
  if (db_job_state_final(from)) return false;
  if (from == DB_JOB_QUEUED) return to != DB_JOB_DONE;
  return true; /* running -> anything */
}

/* ---- create ----------------------------------------------------------------- */

static const char SQL_JOB_INSERT[] =
    "INSERT INTO jobs (state, workload_id, target_id, budget_trials, budget_seconds,"
    " trials_done, seed, options, created, updated, owner)"
    " VALUES ('queued', ?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?7, ?8) RETURNING id";

static int check_job(const db_job_t *job, tn_err_t *err) {
  if (job->budget_trials < 0)
    return tn_err_set(err, TN_EINVAL, "job: budget_trials is %" PRId64 " (need >= 0)",
                      job->budget_trials);
  if (!isfinite(job->budget_seconds) || job->budget_seconds < 0)
    return tn_err_set(err, TN_EINVAL, "job: budget_seconds is %g (need a finite value >= 0)",
                      job->budget_seconds);
  return 0;
}

int db_job_create(db_t *db, db_job_t *job, tn_err_t *err) {
  int rc = check_job(job, err);
  if (rc) return rc;
  char *options = NULL;
  rc = db_canon_object(job->options, "job options", &options, err);
  if (rc) return rc;
  db_st_t *st = db_stmt(db, SQL_JOB_INSERT, err);
  if (!st) {
    free(options);
    return err ? err->code : TN_EIO;
  }
  double now = db_now();
  db_bind_int(st, 1, job->workload_id);
  db_bind_int(st, 2, job->target_id);
  db_bind_int(st, 3, job->budget_trials);
  db_bind_real(st, 4, job->budget_seconds);
  db_bind_int(st, 5, (int64_t)job->seed); /* bit pattern kept; read back as uint64 */
  db_bind_text(st, 6, options);
  db_bind_real(st, 7, now);
  db_bind_text(st, 8, job->owner);
  free(options);
  rc = db_step(st);
  if (rc == DB_ROW) {
    job->id = db_col_int(st, 0);
    rc = db_step(st);
  }
  int ret = 0;
  if (rc != DB_DONE) {
    bool fk = db->drv->last_was_foreign_key(db);
    ret = fk ? tn_err_set(err, TN_EINVAL, "job: workload id %" PRId64 " or target id %" PRId64
                          " is not in the database", job->workload_id, job->target_id)
             : db_fail(db, err, "creating a job");
  }
  db_reset(st);
  if (ret) return ret;
  job->state = DB_JOB_QUEUED;
  job->trials_done = job->best_record_id = 0;
  job->created = job->updated = now;
  job->started = job->finished = 0;
  job->error = NULL;
  return 0;
}

/* ---- read ----------------------------------------------------------------- */

#define JOB_COLS                                                                            \
  "j.id, j.state, j.workload_id, j.target_id, w.hash, t.name, j.budget_trials,"            \
  " j.budget_seconds, j.trials_done, j.best_record_id, j.seed, j.options, j.error,"        \
  " j.created, j.updated, j.started, j.finished, j.owner"
#define JOB_FROM                                                                            \
  " FROM jobs j JOIN workloads w ON w.id = j.workload_id JOIN targets t ON t.id = j.target_id"

static void read_job(db_st_t *st, void *item, tn_arena_t *a) {
  db_job_t *j = item;
  memset(j, 0, sizeof *j);
  j->id = db_col_int(st, 0);
  db_job_state_parse(db_col_str(st, 1), &j->state, NULL);
  j->workload_id = db_col_int(st, 2);
  j->target_id = db_col_int(st, 3);
  j->workload_hash = db_col_text(st, 4, a);
  j->target_name = db_col_text(st, 5, a);
  j->budget_trials = db_col_int(st, 6);
  j->budget_seconds = db_col_real(st, 7);
  j->trials_done = db_col_int(st, 8);
  j->best_record_id = db_col_int(st, 9); /* NULL reads as 0 */
  j->seed = (uint64_t)db_col_int(st, 10);
  j->options = db_col_text(st, 11, a);
  j->error = db_col_text(st, 12, a);
  j->created = db_col_real(st, 13);
  j->updated = db_col_real(st, 14);
  j->started = db_col_real(st, 15);
  j->finished = db_col_real(st, 16);
  j->owner = db_col_text(st, 17, a);
}

static const char SQL_JOB_GET[] = "SELECT " JOB_COLS JOB_FROM " WHERE j.id = ?1";

int db_job_get(db_t *db, int64_t id, db_job_t *out, tn_arena_t *arena, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_JOB_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, id);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW)
    read_job(st, out, arena);
  else if (rc == DB_DONE)
    ret = tn_err_set(err, TN_EINVAL, "no job with id %" PRId64, id);
  else
    ret = db_fail(db, err, "reading a job");
  db_reset(st);
  return ret;
}

static int list_jobs(db_t *db, const char *sql, size_t limit, size_t offset, const char *owner, db_jobs_t *out,
                     tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, sql, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, db_sql_limit(limit));
  db_bind_int(st, 2, (int64_t)offset);
  db_bind_text(st, 3, owner); /* a statement without ?3 ignores it */
  out->arena = tn_arena_new();
  size_t cap = 0;
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    out->items = db_arena_room(out->arena, out->items, out->n, &cap, sizeof *out->items);
    read_job(st, &out->items[out->n++], out->arena);
  }
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, "listing jobs");
  db_reset(st);
  if (ret) db_jobs_free(out);
  return ret;
}

static const char SQL_JOB_LIST[] =
    "SELECT " JOB_COLS JOB_FROM " ORDER BY j.id DESC LIMIT ?1 OFFSET ?2";
static const char SQL_JOB_UNFINISHED[] =
    "SELECT " JOB_COLS JOB_FROM " WHERE j.state IN ('queued', 'running') AND (j.owner = ?3 OR ?3 IS NULL)"
    " ORDER BY j.id LIMIT ?1 OFFSET ?2";

int db_job_list(db_t *db, size_t limit, size_t offset, db_jobs_t *out, tn_err_t *err) {
  return list_jobs(db, SQL_JOB_LIST, limit, offset, NULL, out, err);
}

int db_jobs_unfinished(db_t *db, const char *owner, db_jobs_t *out, tn_err_t *err) {
  return list_jobs(db, SQL_JOB_UNFINISHED, 0, 0, owner, out, err);
}

void db_jobs_free(db_jobs_t *j) {
  tn_arena_free(j->arena);
  memset(j, 0, sizeof *j);
}

/* ---- update ----------------------------------------------------------------- */

static const char SQL_JOB_STATE[] = "SELECT state, trials_done FROM jobs WHERE id = ?1";
static const char SQL_JOB_UPDATE[] =
    "UPDATE jobs SET state = ?2, trials_done = ?3,"
    " best_record_id = coalesce(?4, best_record_id), error = coalesce(?5, error),"
    " updated = ?6, started = coalesce(started, ?7), finished = ?8"
    " WHERE id = ?1 AND state = ?9 AND trials_done <= ?3";

/* Checks the move against the stored state (inside the update's transaction). */
static int check_move(db_t *db, int64_t id, const db_job_progress_t *p, int64_t *trials,
                      db_job_state_t *from_out, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_JOB_STATE, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, id);
  int rc = db_step(st), ret = 0;
  if (rc != DB_ROW) {
    ret = rc == DB_DONE ? tn_err_set(err, TN_EINVAL, "no job with id %" PRId64, id)
                            : db_fail(db, err, "reading a job's state");
    db_reset(st);
    return ret;
  }
  db_job_state_t from = DB_JOB_FAILED;
  db_job_state_parse(db_col_str(st, 0), &from, NULL);
  int64_t done = db_col_int(st, 1);
  db_reset(st);
  if (!move_allowed(from, p->state))
    return tn_err_set(err, TN_ESTATE, "job %" PRId64 " is %s and cannot become %s%s", id,
                      state_names[from], state_names[p->state],
                      db_job_state_final(from) ? " (a finished job does not change)" : "");
  if (p->trials_done >= 0 && p->trials_done < done)
    return tn_err_set(err, TN_EINVAL, "job %" PRId64 ": trials_done cannot go back from %" PRId64
                      " to %" PRId64, id, done, p->trials_done);
  *trials = p->trials_done >= 0 ? p->trials_done : done;
  *from_out = from;
  return 0;
}

/* Writes the move only if the row is still as check_move read it: on
 * PostgreSQL another daemon's transaction may have moved it in between. */
static int write_move(db_t *db, int64_t id, const db_job_progress_t *p, int64_t trials, db_job_state_t from,
                      tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_JOB_UPDATE, err);
  if (!st) return err ? err->code : TN_EIO;
  double now = db_now();
  db_bind_int(st, 1, id);
  db_bind_text(st, 2, state_names[p->state]);
  db_bind_int(st, 3, trials);
  if (p->best_record_id > 0) db_bind_int(st, 4, p->best_record_id);
  db_bind_text(st, 5, p->error);
  db_bind_real(st, 6, now);
  if (p->state == DB_JOB_RUNNING) db_bind_real(st, 7, now);
  if (db_job_state_final(p->state)) db_bind_real(st, 8, now);
  db_bind_text(st, 9, state_names[from]);
  int rc = db_step(st), ret = 0;
  if (rc != DB_DONE) {
    bool fk = db->drv->last_was_foreign_key(db);
    ret = fk ? tn_err_set(err, TN_EINVAL, "job %" PRId64 ": best record id %" PRId64
                          " is not in the database", id, p->best_record_id)
             : db_fail(db, err, "updating a job");
  }
  db_reset(st);
  if (!ret && db_changes(db) == 0)
    ret = tn_err_set(err, TN_ESTATE, "job %" PRId64 " changed while it was being updated (another daemon or "
                     "client moved it); read it again", id);
  return ret;
}

int db_job_update(db_t *db, int64_t id, const db_job_progress_t *p, tn_err_t *err) {
  if ((unsigned)p->state >= TN_ARRAY_LEN(state_names))
    return tn_err_set(err, TN_EINVAL, "job %" PRId64 ": state %d is not a db_job_state_t", id,
                      (int)p->state);
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  int64_t trials = 0;
  db_job_state_t from = DB_JOB_QUEUED;
  rc = check_move(db, id, p, &trials, &from, err);
  if (!rc) rc = write_move(db, id, p, trials, from, err);
  if (rc) {
    db_tx_rollback(db);
    return rc;
  }
  return db_tx_commit(db, err);
}
