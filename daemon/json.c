/* json.c — the protocol's JSON objects that several methods share (records,
 * numbers that may be NaN, embedded trace JSON) and workloads given as text
 * plus parameter values in JSON. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/td.h"

void td_json_num(cJSON *obj, const char *key, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(obj, key, v);
  else cJSON_AddNullToObject(obj, key);
}

cJSON *td_json_embed(const char *text) {
  if (!text) return cJSON_CreateNull();
  cJSON *j = cJSON_Parse(text);
  return j ? j : cJSON_CreateString(text);
}

static void add_str_or_null(cJSON *o, const char *key, const char *s) {
  if (s) cJSON_AddStringToObject(o, key, s);
  else cJSON_AddNullToObject(o, key);
}

static void add_int_or_null(cJSON *o, const char *key, long long v) {
  if (v >= 0) cJSON_AddNumberToObject(o, key, (double)v);
  else cJSON_AddNullToObject(o, key);
}

static bool digits(const char **s) {
  if (**s < '0' || **s > '9') return false;
  while (**s >= '0' && **s <= '9') (*s)++;
  return true;
}

/* Whether s is exactly a JSON array of numbers with nothing else (no
 * whitespace either: it goes into a one-line answer as is). */
static bool number_array(const char *s) {
  if (*s++ != '[') return false;
  if (*s == ']') return s[1] == 0;
  for (;;) {
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (!digits(&s)) return false;
    if (*s == '.' && (s++, !digits(&s))) return false;
    if (*s == 'e' || *s == 'E') {
      s++;
      if (*s == '+' || *s == '-') s++;
      if (!digits(&s)) return false;
    }
    if (*s == ']') return s[1] == 0;
    if (*s++ != ',') return false;
  }
}

/* The run times as stored: passed on as they are when they are the plain
 * array the database writes (the common case: no number is converted),
 * otherwise re-read keeping the numbers only. */
static cJSON *run_secs_json(const db_record_t *r) {
  if (r->run_secs_text && number_array(r->run_secs_text)) return cJSON_CreateRaw(r->run_secs_text);
  cJSON *runs = cJSON_CreateArray();
  if (r->run_secs_text) {
    cJSON *j = cJSON_Parse(r->run_secs_text);
    const cJSON *e;
    if (cJSON_IsArray(j)) cJSON_ArrayForEach(e, j) {
        if (cJSON_IsNumber(e)) cJSON_AddItemToArray(runs, cJSON_CreateNumber(e->valuedouble));
      }
    cJSON_Delete(j);
  }
  for (size_t i = 0; i < r->n_runs; i++) cJSON_AddItemToArray(runs, cJSON_CreateNumber(r->run_secs[i]));
  return runs;
}

cJSON *td_record_json(const db_record_t *r, double flops) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)r->id);
  add_str_or_null(o, "workload", r->workload_hash);
  add_str_or_null(o, "target", r->target_name);
  cJSON_AddStringToObject(o, "status", db_status_name(r->status));
  td_json_num(o, "median_secs", r->median_secs);
  cJSON_AddItemToObject(o, "run_secs", run_secs_json(r));
  bool timed = isfinite(r->median_secs) && r->median_secs > 0 && flops > 0;
  td_json_num(o, "gflops", timed ? flops / r->median_secs * 1e-9 : NAN);
  cJSON_AddBoolToObject(o, "verified", r->verified);
  td_json_num(o, "cupti_median_secs", r->cupti_median_secs); /* CUDA: CUPTI's kernel time, null elsewhere */
  cJSON_AddBoolToObject(o, "times_disagree", r->times_disagree);
  add_str_or_null(o, "error", r->error);
  add_int_or_null(o, "registers", r->registers);
  add_int_or_null(o, "shared_bytes", r->shared_bytes);
  add_int_or_null(o, "spill_bytes", r->spill_bytes);
  add_str_or_null(o, "compiler", r->compiler);
  add_str_or_null(o, "arch", r->arch);
  cJSON_AddStringToObject(o, "trace_hash", r->trace_hash);
  cJSON_AddItemToObject(o, "trace", td_json_embed(r->trace));
  cJSON_AddNumberToObject(o, "created", r->created);
  return o;
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
