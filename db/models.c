/* models.c — what the search keeps beside the records: the cost model of
 * each target (with the record ids of its training samples) and the
 * unscheduled program's measurement per (workload, target). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"

/* ---- cost models ------------------------------------------------------------- */

static const char SQL_MODEL_PUT[] =
    "INSERT INTO cost_models (target_id, format, model, record_ids, updated) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (target_id, format) DO UPDATE SET model = excluded.model,"
    " record_ids = excluded.record_ids, updated = excluded.updated";

int db_cost_model_put(db_t *db, const db_cost_model_t *m, tn_err_t *err) {
  if (!m->model || m->model_len == 0 || (m->nrecord_ids && !m->record_ids))
    return tn_err_set(err, TN_EINVAL, "cost model of target %" PRId64 ": no model data", m->target_id);
  db_st_t *st = db_stmt(db, SQL_MODEL_PUT, err);
  if (!st) return err ? err->code : TN_EIO;
  /* ids as little-endian 64-bit integers */
  unsigned char *ids = tn_xmalloc(TN_MAX(m->nrecord_ids, (size_t)1) * 8);
  for (size_t i = 0; i < m->nrecord_ids; i++)
    for (int k = 0; k < 8; k++) ids[i * 8 + (size_t)k] = (unsigned char)((uint64_t)m->record_ids[i] >> (8 * k));
  db_bind_int(st, 1, m->target_id);
  db_bind_int(st, 2, m->format);
  db_bind_blob(st, 3, m->model, m->model_len);
  db_bind_blob(st, 4, ids, m->nrecord_ids * 8);
  db_bind_real(st, 5, db_now());
  int rc = db_step_done(db, st, "saving the cost model", err);
  free(ids);
  return rc;
}

static const char SQL_MODEL_GET[] =
    "SELECT format, model, record_ids, updated FROM cost_models WHERE target_id = ?1"
    " ORDER BY format = ?2 DESC, updated DESC LIMIT 1";

static int read_model_row(db_st_t *st, db_cost_model_t *out, tn_arena_t *a, tn_err_t *err) {
  out->format = db_col_int(st, 0);
  size_t n = 0;
  const void *blob = db_col_blob(st, 1, &n);
  void *model = tn_arena_alloc(a, TN_MAX(n, (size_t)1));
  if (n) memcpy(model, blob, n);
  out->model = model;
  out->model_len = n;
  size_t bytes = 0;
  const unsigned char *ids = db_col_blob(st, 2, &bytes);
  out->updated = db_col_real(st, 3);
  if (bytes % 8)
    return tn_err_set(err, TN_EINVAL, "cost model of target %" PRId64 ": its record-id list has %zu bytes, not a "
                      "multiple of 8", out->target_id, bytes);
  int64_t *v = TN_NEWN(a, int64_t, TN_MAX(bytes / 8, (size_t)1));
  for (size_t i = 0; i < bytes / 8; i++) {
    uint64_t u = 0;
    for (int k = 0; k < 8; k++) u |= (uint64_t)ids[i * 8 + (size_t)k] << (8 * k);
    v[i] = (int64_t)u;
  }
  out->record_ids = v;
  out->nrecord_ids = bytes / 8;
  return 0;
}

int db_cost_model_get(db_t *db, int64_t target_id, int format, db_cost_model_t *out, bool *found, tn_arena_t *a,
                      tn_err_t *err) {
  memset(out, 0, sizeof *out);
  out->target_id = target_id;
  *found = false;
  db_st_t *st = db_stmt(db, SQL_MODEL_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, target_id);
  db_bind_int(st, 2, format);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW) {
    *found = true;
    ret = read_model_row(st, out, a, err);
  } else if (rc != DB_DONE) {
    ret = db_fail(db, err, "reading the cost model");
  }
  db_reset(st);
  return ret;
}

/* ---- baselines ------------------------------------------------------------------ */

static const char SQL_BASELINE_PUT[] =
    "INSERT INTO baselines (workload_id, target_id, status, median_secs, run_secs, error, created)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (workload_id, target_id) DO UPDATE SET"
    " status = excluded.status, median_secs = excluded.median_secs, run_secs = excluded.run_secs,"
    " error = excluded.error, created = excluded.created";

int db_baseline_put(db_t *db, const db_baseline_t *b, tn_err_t *err) {
  const char *status = db_status_name(b->status);
  if (strcmp(status, "unknown") == 0)
    return tn_err_set(err, TN_EINVAL, "baseline: status %d is not a db_status_t", (int)b->status);
  if (b->status == DB_STATUS_OK && !(b->median_secs > 0 && isfinite(b->median_secs)))
    return tn_err_set(err, TN_EINVAL, "baseline: an ok measurement needs a median time > 0");
  for (size_t i = 0; i < b->n_runs; i++)
    if (!isfinite(b->run_secs[i]) || b->run_secs[i] < 0)
      return tn_err_set(err, TN_EINVAL, "baseline: run %zu took %g s (need a finite time >= 0)", i, b->run_secs[i]);
  db_st_t *st = db_stmt(db, SQL_BASELINE_PUT, err);
  if (!st) return err ? err->code : TN_EIO;
  char *runs = db_run_secs_json(b->run_secs, b->n_runs);
  db_bind_int(st, 1, b->workload_id);
  db_bind_int(st, 2, b->target_id);
  db_bind_text(st, 3, status);
  db_bind_opt_real(st, 4, b->median_secs);
  db_bind_text(st, 5, runs);
  db_bind_text(st, 6, b->error);
  db_bind_real(st, 7, db_now());
  free(runs);
  return db_step_done(db, st, "saving the unscheduled program's time", err);
}

static const char SQL_BASELINE_GET[] =
    "SELECT b.workload_id, b.target_id, b.status, b.median_secs, b.run_secs, b.error, b.created"
    " FROM baselines b JOIN workloads w ON w.id = b.workload_id JOIN targets t ON t.id = b.target_id"
    " WHERE w.hash = ?1 AND t.name = ?2";

int db_baseline_get(db_t *db, const char *workload_hash, const char *target_name, db_baseline_t *out, bool *found,
                    tn_arena_t *a, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  out->median_secs = NAN;
  *found = false;
  db_st_t *st = db_stmt(db, SQL_BASELINE_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, workload_hash);
  db_bind_text(st, 2, target_name);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW) {
    *found = true;
    out->workload_id = db_col_int(st, 0);
    out->target_id = db_col_int(st, 1);
    db_status_parse(db_col_str(st, 2), &out->status, NULL);
    out->median_secs = db_col_opt_real(st, 3);
    out->run_secs = db_read_run_secs(db_col_str(st, 4), &out->n_runs, a);
    out->error = db_col_text(st, 5, a);
    out->created = db_col_real(st, 6);
  } else if (rc != DB_DONE) {
    ret = db_fail(db, err, "reading the unscheduled program's time");
  }
  db_reset(st);
  return ret;
}
