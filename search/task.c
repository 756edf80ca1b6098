/* task.c — per-task state of a tuning run: the design spaces, the
 * workload's database row (srch_workload_register: the one writer of it),
 * the trace hashes already measured (dedup across runs) and the fastest
 * verified records that seed the population. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/srch_internal.h"

/* The stored parameters: every declared parameter with the value used. */
static char *params_json(const ir_workload_t *w) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < w->nparams; i++) cJSON_AddNumberToObject(o, w->params[i].name, (double)w->params[i].value);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

int srch_workload_register(db_t *db, const ir_workload_t *w, const char *hash, int64_t *id, tn_err_t *err) {
  char *params = params_json(w);
  db_workload_t row = {.hash = hash, .name = w->name, .source = w->source, .params = params,
                       .flops = ir_func_flops(w->func), .bytes = ir_func_bytes(w->func)};
  int rc = db_workload_upsert(db, &row, id, err);
  free(params);
  return rc;
}

/* Every trace recorded for this workload on this target: never measured again. */
static int load_known_hashes(srch_ctx_t *c, srch_task_state_t *ts, tn_err_t *err) {
  db_query_t q = db_query_all();
  q.workload_hash = ts->hash_hex;
  q.target_name = c->target->name;
  db_records_t recs = {0};
  if (db_records_query(c->db, &q, &recs, err) < 0) return err ? err->code : TN_EIO;
  for (size_t i = 0; i < recs.n; i++) srch_hashset_add(&ts->seen, tn_id_key(recs.items[i].trace_hash));
  db_records_free(&recs);
  return 0;
}

static int load_best(srch_ctx_t *c, srch_task_state_t *ts, tn_err_t *err) {
  db_records_t recs = {0};
  if (db_best(c->db, ts->hash_hex, c->target->name, (size_t)ts->measured_cap, &recs, err) < 0)
    return err ? err->code : TN_EIO;
  for (size_t i = 0; i < recs.n; i++) {
    const db_record_t *r = &recs.items[i];
    srch_task_add_measured(ts, r->trace, srch_trace_hash(r->trace), r->median_secs, r->id);
    srch_task_note_best(ts, r->trace, r->median_secs, r->id);
  }
  db_records_free(&recs);
  return 0;
}

int srch_task_init(srch_ctx_t *c, srch_task_state_t *ts, const srch_task_t *task, uint64_t seed,
                   tn_err_t *err) {
  memset(ts, 0, sizeof *ts);
  ts->workload = task->workload;
  ts->func = task->workload->func;
  ts->weight = task->weight > 0 ? task->weight : 1;
  ts->flops = TN_MAX(ir_func_flops(ts->func), 1.0);
  ir_func_hash(ts->func, ts->hash_hex);
  ts->key = tn_id_key(ts->hash_hex);
  tn_rng_seed(&ts->rng, seed);
  srch_hashset_init(&ts->seen);
  ts->measured_cap = TN_MAX(1, (int)(c->opts.population * c->opts.init_measured_ratio));
  if (smp_generate(ts->func, c->target, tn_rng_fork(&ts->rng), &ts->space, err) < 0)
    return tn_err_prefix(err, "workload %s: design spaces", task->workload->name);
  if (ts->space.n == 0)
    return tn_err_set(err, TN_EINVAL, "workload %s: no design space for target %s", task->workload->name,
                      c->target->name);
  if (!c->db) return 0;
  ts->workload_id = task->workload_id;
  if ((!ts->workload_id && srch_workload_register(c->db, ts->workload, ts->hash_hex, &ts->workload_id, err) < 0) ||
      load_known_hashes(c, ts, err) < 0 || load_best(c, ts, err) < 0)
    return tn_err_prefix(err, "workload %s: database", task->workload->name);
  return 0;
}

void srch_task_free(srch_task_state_t *ts) {
  smp_space_free(&ts->space);
  srch_hashset_free(&ts->seen);
  for (int i = 0; i < ts->nmeasured; i++) sch_trace_free(ts->measured[i].trace), free(ts->measured[i].json);
  free(ts->measured);
  free(ts->remeasure.items);
  free(ts->baseline.error);
  free(ts->first_failure.error);
  ms_runner_free(ts->runner);
  free(ts->best.trace_json);
  free(ts->history);
  memset(ts, 0, sizeof *ts);
}

void srch_task_add_measured(srch_task_state_t *ts, const char *json, uint64_t hash, double median_secs,
                            int64_t db_id) {
  if (!(median_secs > 0) || !isfinite(median_secs)) return;
  int pos = ts->nmeasured;
  while (pos > 0 && ts->measured[pos - 1].median_secs > median_secs) pos--;
  if (pos >= ts->measured_cap) return;
  for (int i = 0; i < ts->nmeasured; i++)
    if (ts->measured[i].hash == hash) return;
  sch_trace_t *tr = NULL;
  if (sch_trace_from_json(json, strlen(json), &tr, NULL) < 0) return; /* unreadable: not a seed */
  if (!ts->measured) ts->measured = tn_xcalloc((size_t)ts->measured_cap, sizeof *ts->measured);
  if (ts->nmeasured == ts->measured_cap) {
    ts->nmeasured--;
    sch_trace_free(ts->measured[ts->nmeasured].trace);
    free(ts->measured[ts->nmeasured].json);
  }
  memmove(&ts->measured[pos + 1], &ts->measured[pos], (size_t)(ts->nmeasured - pos) * sizeof *ts->measured);
  ts->measured[pos] = (srch_measured_t){.trace = tr, .json = tn_xstrdup(json), .hash = hash,
                                        .median_secs = median_secs, .db_id = db_id};
  ts->nmeasured++;
}

void srch_task_note_best(srch_task_state_t *ts, const char *json, double median_secs, int64_t db_id) {
  if (!(median_secs > 0) || !isfinite(median_secs)) return;
  if (ts->best.found && ts->best.median_secs <= median_secs) return;
  free(ts->best.trace_json);
  ts->best = (srch_best_t){.found = true, .trace_json = tn_xstrdup(json), .median_secs = median_secs,
                           .gflops = ts->flops / median_secs * 1e-9, .db_id = db_id};
}
