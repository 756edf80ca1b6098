/* local.c — libtuned_local (tuned_local.h): one workload tuned in the
 * caller's process through the search module, and the best kernel served
 * from a database file through the daemon's own serving code
 * (srch_kernel_from_db), for callers without a daemon (the Python package). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/tuned_local.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "search/search.h"

static int fail(tuned_error_t *err, int code, int rpc_code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(tuned_error_t *err, int code, int rpc_code, const char *fmt, ...) {
  if (err) {
    memset(err, 0, sizeof *err);
    err->code = code;
    err->rpc_code = rpc_code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

tuned_local_tune_t tuned_local_tune_defaults(void) {
  return (tuned_local_tune_t){.remeasure = -1};
}

void tuned_local_free(void *p) {
  free(p);
}

/* The target by name, refused when this machine cannot run its kernels. */
static int target_of(const char *name, bool measure, tn_target_t *t, tuned_error_t *err) {
  tn_err_t e = {0};
  if (tn_target_lookup(name ? name : "cpu", NULL, t, &e) < 0)
    return fail(err, TUNED_E_INVALID, 0, "%s", e.msg);
  if (!measure) return 0;
  ms_backend_t b = ms_backend_of(t->kind);
  ms_backend_status_t st;
  ms_backend_probe(b, &st);
  if (!st.available)
    return fail(err, TUNED_E_RPC, TUNED_RPC_TARGET_REFUSED, "cannot measure on %s here: the %s backend is %s (%s)",
                t->name, ms_backend_name(b), st.compiled ? "unavailable" : "not in this build", st.detail);
  return 0;
}

static int parse(const char *name, const char *text, const char *params_json, ir_workload_t **w, tuned_error_t *err) {
  tn_err_t e = {0};
  if (!text) return fail(err, TUNED_E_INVALID, 0, "no workload text");
  if (ir_workload_parse_stored(name, text, params_json, w, &e) < 0)
    return fail(err, TUNED_E_RPC, TUNED_RPC_BAD_WORKLOAD, "%s", e.msg);
  return 0;
}

/* ---- tuning ------------------------------------------------------------------- */

static void on_progress(const srch_progress_t *p, void *ctx) {
  const tuned_local_tune_t *o = ctx;
  if (p->stage != SRCH_STAGE_SEARCH || !o->progress) return;
  char buf[256], best[64] = "null";
  if (p->best_secs > 0) snprintf(best, sizeof best, "%.9g", p->best_secs);
  snprintf(buf, sizeof buf,
           "{\"trials_done\": %d, \"trials_total\": %d, \"best_median_secs\": %s, \"elapsed_s\": %.3f}",
           p->trials_done, p->trials_total, best, p->elapsed_s);
  o->progress(buf, o->ctx);
}

static char *result_json(const ir_workload_t *w, const tn_target_t *t, const srch_result_t *r) {
  const srch_best_t *b = &r->best[0];
  const srch_baseline_t *nv = &r->baseline[0];
  char hash[TN_ID_SIZE];
  ir_func_hash(w->func, hash);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "workload", hash);
  cJSON_AddStringToObject(j, "name", w->name);
  cJSON_AddStringToObject(j, "target", t->name);
  cJSON_AddNumberToObject(j, "trials", r->trials_done);
  cJSON *counts = cJSON_AddObjectToObject(j, "status_counts");
  for (int s = 0; s < MS_STATUS__COUNT; s++) cJSON_AddNumberToObject(counts, ms_status_name(s), r->failures[s]);
  if (b->found) {
    cJSON *o = cJSON_AddObjectToObject(j, "best");
    cJSON_AddNumberToObject(o, "median_secs", b->median_secs);
    cJSON_AddNumberToObject(o, "gflops", b->gflops);
    cJSON_AddNumberToObject(o, "first_median_secs", b->first_secs);
    if (b->db_id > 0) cJSON_AddNumberToObject(o, "record_id", (double)b->db_id);
    else cJSON_AddNullToObject(o, "record_id");
  } else {
    cJSON_AddNullToObject(j, "best");
  }
  if (nv->have) {
    cJSON *o = cJSON_AddObjectToObject(j, "naive");
    cJSON_AddStringToObject(o, "status", ms_status_name(nv->status));
    if (nv->status == MS_OK) cJSON_AddNumberToObject(o, "median_secs", nv->median_secs);
    else cJSON_AddNullToObject(o, "median_secs");
  } else {
    cJSON_AddNullToObject(j, "naive");
  }
  if (b->found && nv->have && nv->status == MS_OK)
    cJSON_AddNumberToObject(j, "speedup", nv->median_secs / b->median_secs);
  cJSON_AddNumberToObject(j, "elapsed_s", r->elapsed_s);
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return s;
}

int tuned_local_tune(const tuned_local_tune_t *o, char **out, tuned_error_t *err) {
  *out = NULL;
  if (!o || o->trials < 1 || o->trials > 1000000)
    return fail(err, TUNED_E_INVALID, 0, "trials must be 1 to 1000000, got %d", o ? o->trials : 0);
  if (o->seconds < 0) return fail(err, TUNED_E_INVALID, 0, "seconds must be >= 0, got %g", o->seconds);
  tn_target_t t;
  ir_workload_t *w = NULL;
  int rc = target_of(o->target, true, &t, err);
  if (!rc) rc = parse(o->name, o->workload_text, o->params_json, &w, err);
  tn_err_t e = {0};
  if (!rc && ir_eval_check_work(w->func, &e) < 0) rc = fail(err, TUNED_E_INVALID, 0, "%s", e.msg);
  if (rc) {
    ir_workload_free(w);
    return rc;
  }
  srch_opts_t so;
  srch_opts_default(&so);
  so.max_trials = o->trials;
  so.max_seconds = o->seconds;
  so.seed = o->seed ? (uint64_t)o->seed : 1;
  so.db_path = o->db_path;
  so.baseline = true; /* raced against the unscheduled program: kernel serving never serves a slower best */
  if (o->remeasure >= 0) so.remeasure = o->remeasure;
  srch_callbacks_t cb = {.on_progress = on_progress, .ctx = (void *)o};
  srch_task_t task = {.workload = w, .weight = 1};
  srch_result_t r;
  if (srch_tune(&task, 1, &t, &so, &cb, &r, &e) < 0) {
    rc = fail(err, TUNED_E_IO, 0, "tuning %s on %s: %s", w->name, t.name, e.msg);
  } else {
    *out = result_json(w, &t, &r);
    srch_result_free(&r);
  }
  ir_workload_free(w);
  return rc;
}

/* ---- serving from a database ------------------------------------------------------ */

int tuned_local_kernel(const char *db_path, const char *text, const char *name, const char *params_json,
                       const char *hash, const char *target, char **out, tuned_error_t *err) {
  *out = NULL;
  if (!db_path) return fail(err, TUNED_E_INVALID, 0, "no database file given");
  if (!text == !hash) return fail(err, TUNED_E_INVALID, 0, "give exactly one of the workload text and its hash");
  if (hash && !tn_id_prefix_valid(hash))
    return fail(err, TUNED_E_INVALID, 0, "\"%s\" is not a workload hash (its first %d to %d lower-case hex digits)",
                hash, TN_ID_SHOWN, TN_ID_HEX);
  tn_target_t t;
  ir_workload_t *w = NULL;
  int rc = target_of(target, false, &t, err);
  if (!rc && text) rc = parse(name, text, params_json, &w, err);
  if (rc) return rc;
  char h[TN_ID_SIZE];
  if (w) ir_func_hash(w->func, h);
  else snprintf(h, sizeof h, "%s", hash);
  db_t *db = NULL;
  tn_err_t e = {0};
  cJSON *k = NULL;
  bool found = true;
  if (db_open_readonly(db_path, &db, &e) < 0) rc = fail(err, TUNED_E_IO, 0, "%s", e.msg);
  else if (!w && strlen(h) < TN_ID_HEX && db_workload_resolve(db, hash, h, &found, &e) < 0)
    rc = fail(err, TUNED_E_INVALID, 0, "%s", e.msg);
  else if (!found)
    rc = fail(err, TUNED_E_RPC, TUNED_RPC_NO_KERNEL, "no workload %s in the database %s", hash, db_path);
  else if ((rc = srch_kernel_from_db(db, h, w, &t, w ? cg_entry_for(w->name) : NULL, &k, &e)) < 0)
    rc = rc == TN_ESTATE ? fail(err, TUNED_E_RPC, TUNED_RPC_NO_KERNEL, "%s (database %s)", e.msg, db_path)
                         : fail(err, TUNED_E_IO, 0, "%s", e.msg);
  db_close(db);
  if (k) {
    *out = cJSON_PrintUnformatted(k);
    cJSON_Delete(k);
  }
  ir_workload_free(w);
  return rc;
}
