/* commit.c — a measured batch into the tuning database: one record per
 * processed candidate (full trace, run times, status, build facts), all in
 * one transaction, as soon as the batch is done; and the mapping between
 * measure/'s and db/'s statuses. */
#include <math.h>
#include <stdlib.h>

#include "search/srch_batch.h"

db_status_t srch_db_status(ms_status_t s) {
  switch (s) {
  case MS_OK: return DB_STATUS_OK;
  case MS_BUILD_ERROR: return DB_STATUS_BUILD_ERROR;
  case MS_RUN_ERROR: return DB_STATUS_RUN_ERROR;
  case MS_TIMEOUT: return DB_STATUS_TIMEOUT;
  case MS_TOO_SLOW: return DB_STATUS_TOO_SLOW;
  default: return DB_STATUS_WRONG_RESULT;
  }
}

ms_status_t srch_ms_status(db_status_t s) {
  switch (s) {
  case DB_STATUS_OK: return MS_OK;
  case DB_STATUS_BUILD_ERROR: return MS_BUILD_ERROR;
  case DB_STATUS_RUN_ERROR: return MS_RUN_ERROR;
  case DB_STATUS_TIMEOUT: return MS_TIMEOUT;
  case DB_STATUS_TOO_SLOW: return MS_TOO_SLOW;
  default: return MS_WRONG_RESULT;
  }
}

static void fill_record(const srch_ctx_t *c, const srch_batch_t *b, int i, db_record_t *r) {
  const ms_result_t *res = &b->res[i];
  db_record_init(r);
  r->workload_id = c->tasks[b->task].workload_id;
  r->target_id = c->target_id;
  r->trace = b->cands[i]->json;
  r->run_secs = res->run_secs;
  r->n_runs = res->run_secs ? (size_t)res->nrepeats : 0;
  r->median_secs = res->ran && res->median_secs > 0 ? res->median_secs : NAN;
  r->status = srch_db_status(res->status);
  r->verified = res->status == MS_OK;
  r->cupti_median_secs = res->ran && res->cupti_median_secs > 0 ? res->cupti_median_secs : NAN;
  r->times_disagree = res->times_disagree;
  r->error = res->error[0] ? res->error : NULL;
  r->registers = res->build.registers;
  r->shared_bytes = (int)res->build.shared_bytes;
  r->spill_bytes = (int)res->build.spill_bytes;
  r->compiler = res->build.compiler[0] ? res->build.compiler : NULL;
  r->arch = res->build.arch[0] ? res->build.arch : NULL;
}

int srch_batch_commit(srch_ctx_t *c, srch_batch_t *b, tn_err_t *err) {
  b->db_ids = tn_xcalloc((size_t)TN_MAX(b->n, 1), sizeof *b->db_ids);
  if (!c->db || b->nmeasured == 0) return 0;
  db_record_t *recs = tn_xcalloc((size_t)b->nmeasured, sizeof *recs);
  int *idx = tn_xcalloc((size_t)b->nmeasured, sizeof *idx);
  size_t n = 0;
  for (int i = 0; i < b->n; i++)
    if (b->measured[i]) idx[n] = i, fill_record(c, b, i, &recs[n++]);
  int rc = db_record_add_batch(c->db, recs, n, NULL, err);
  for (size_t k = 0; rc == 0 && k < n; k++) b->db_ids[idx[k]] = recs[k].id;
  free(recs);
  free(idx);
  return rc;
}
