/* trials.c — the candidates a job measured, in its order (job_trials): what
 * `tunectl plot JOB` draws as the tuning curve, and the first that failed
 * (what a job that found no kernel tells its user). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"

static const char SQL_TRIAL_ADD[] =
    "INSERT INTO job_trials (job_id, trial, record_id, status, median_secs, measured) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

int db_job_trials_add(db_t *db, int64_t job_id, const db_job_trial_t *t, size_t n, tn_err_t *err) {
  for (size_t i = 0; i < n; i++) {
    const char *status = db_status_name(t[i].status);
    if (strcmp(status, "unknown") == 0)
      return tn_err_set(err, TN_EINVAL, "job %lld trial %lld: status %d is not a db_status_t", (long long)job_id,
                        (long long)t[i].trial, (int)t[i].status);
    db_st_t *st = db_stmt(db, SQL_TRIAL_ADD, err);
    if (!st) return err ? err->code : TN_EIO;
    db_bind_int(st, 1, job_id);
    db_bind_int(st, 2, t[i].trial);
    db_bind_opt_int(st, 3, t[i].record_id > 0 ? t[i].record_id : -1);
    db_bind_text(st, 4, status);
    db_bind_opt_real(st, 5, t[i].median_secs);
    db_bind_real(st, 6, t[i].measured);
    int rc = db_step_done(db, st, "recording a job's trial", err);
    if (rc) return tn_err_prefix(err, "job %lld trial %lld", (long long)job_id, (long long)t[i].trial);
  }
  return 0;
}

static const char SQL_TRIALS_GET[] =
    "SELECT trial, record_id, status, median_secs, measured FROM job_trials WHERE job_id = ?1 ORDER BY trial";

int db_job_trials_get(db_t *db, int64_t job_id, db_job_trials_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_TRIALS_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, job_id);
  size_t cap = 0;
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    if (out->n == cap) out->items = tn_xrealloc(out->items, sizeof *out->items * (cap = cap * 2 + 64));
    db_job_trial_t *t = &out->items[out->n++];
    t->trial = db_col_int(st, 0);
    t->record_id = db_col_null(st, 1) ? 0 : db_col_int(st, 1);
    db_status_parse(db_col_str(st, 2), &t->status, NULL);
    t->median_secs = db_col_opt_real(st, 3);
    t->measured = db_col_real(st, 4);
  }
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, "reading a job's trials");
  db_reset(st);
  if (ret) db_job_trials_free(out);
  return ret;
}

static const char SQL_FIRST_FAILURE[] =
    "SELECT t.trial, t.record_id, t.status, t.median_secs, t.measured, r.error FROM job_trials t"
    " LEFT JOIN records r ON r.id = t.record_id"
    " WHERE t.job_id = ?1 AND t.status NOT IN ('ok', 'too_slow') ORDER BY t.trial LIMIT 1";

int db_job_first_failure(db_t *db, int64_t job_id, db_job_trial_t *out, const char **error, bool *found,
                         tn_arena_t *a, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  *error = NULL;
  *found = false;
  db_st_t *st = db_stmt(db, SQL_FIRST_FAILURE, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, job_id);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW) {
    *found = true;
    out->trial = db_col_int(st, 0);
    out->record_id = db_col_null(st, 1) ? 0 : db_col_int(st, 1);
    db_status_parse(db_col_str(st, 2), &out->status, NULL);
    out->median_secs = db_col_opt_real(st, 3);
    out->measured = db_col_real(st, 4);
    *error = db_col_text(st, 5, a);
  } else if (rc != DB_DONE) {
    ret = db_fail(db, err, "reading a job's first failed trial");
  }
  db_reset(st);
  return ret;
}

void db_job_trials_free(db_job_trials_t *t) {
  free(t->items);
  memset(t, 0, sizeof *t);
}
