/* methods_db.c — database queries: db.workloads, db.records and db.best on
 * the loop's read connection (indexed; limits keep each answer to a few
 * milliseconds of work), db.export and db.import (each line's workload hash
 * and trace checked) on the thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/td.h"
#include "schedule/schedule.h"

static const char *const statuses[] = {"ok", "build_error", "run_error", "timeout", "wrong_result", "too_slow", NULL};

td_reply_t td_m_db_workloads(td_req_t *req) {
  int64_t limit, offset;
  if (td_param_int(req, "limit", false, 1000, 1, 100000, &limit) ||
      td_param_int(req, "offset", false, 0, 0, INT64_C(1) << 40, &offset))
    return TD_REPLY;
  db_workloads_t ws;
  tn_err_t err = {0};
  if (db_workloads_list(req->srv->rdb, (size_t)limit, (size_t)offset, &ws, &err))
    return td_req_tn_error(req, TD_E_INTERNAL, &err);
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "workloads");
  for (size_t i = 0; i < ws.n; i++) {
    const db_workload_t *w = &ws.items[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "hash", w->hash);
    cJSON_AddStringToObject(e, "name", w->name ? w->name : "");
    cJSON_AddItemToObject(e, "params", td_json_embed(w->params ? w->params : "{}"));
    cJSON_AddNumberToObject(e, "flops", w->flops);
    cJSON_AddNumberToObject(e, "bytes", w->bytes);
    cJSON_AddNumberToObject(e, "records", (double)w->n_records);
    cJSON_AddNumberToObject(e, "created", w->created);
    cJSON_AddItemToArray(arr, e);
  }
  db_workloads_free(&ws);
  req->result = o;
  return TD_REPLY;
}

/* FLOPs per workload hash, looked up once per answer. */
typedef struct flops_cache {
  const char *hash[16];
  double flops[16];
  int n;
} flops_cache_t;

static double workload_flops(td_server_t *srv, flops_cache_t *fc, const char *hash) {
  for (int i = 0; i < fc->n; i++)
    if (strcmp(fc->hash[i], hash) == 0) return fc->flops[i];
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  tn_err_t err = {0};
  double f = db_workload_get(srv->rdb, hash, &w, a, &err) == 0 ? w.flops : 0;
  tn_arena_free(a);
  if (fc->n < 16) fc->hash[fc->n] = hash, fc->flops[fc->n++] = f;
  return f;
}

static cJSON *records_json(td_server_t *srv, const db_records_t *rs, flops_cache_t *fc) {
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "records");
  for (size_t i = 0; i < rs->n; i++) {
    const db_record_t *r = &rs->items[i];
    double flops = r->workload_hash ? workload_flops(srv, fc, r->workload_hash) : 0;
    cJSON_AddItemToArray(arr, td_record_json(r, flops));
  }
  return o;
}

/* A target that a query names must exist: in the database (imported records
 * keep theirs) or as a target file; otherwise an empty answer would read as
 * "nothing tuned there yet" for a misspelt name.  Asked only when the answer
 * is empty (no cost on the answers that have records).  -1 with the error set. */
static int check_query_target(td_req_t *req, const char *name) {
  if (!name) return 0;
  db_targets_t ts;
  tn_err_t err = {0};
  if (db_targets_list(req->srv->rdb, &ts, &err)) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return -1;
  }
  bool found = false;
  for (size_t i = 0; i < ts.n && !found; i++) found = strcmp(ts.items[i].name, name) == 0;
  db_targets_free(&ts);
  td_target_info_t info;
  if (found || td_target_check(&req->srv->machine, name, &info, &err) == 0) return 0;
  td_req_error(req, TD_E_PARAMS, "invalid param \"target\": %s (nor is it in the database)", err.msg);
  return -1;
}

td_reply_t td_m_db_records(td_req_t *req) {
  char hash[17];
  const char *target;
  int status;
  int64_t limit, offset;
  if (td_param_hash(req, "workload", false, hash) || td_param_str(req, "target", false, 63, &target) ||
      td_param_enum(req, "status", statuses, -1, &status) ||
      td_param_int(req, "limit", false, 100, 1, 1000, &limit) ||
      td_param_int(req, "offset", false, 0, 0, INT64_C(1) << 40, &offset))
    return TD_REPLY;
  db_query_t q = db_query_all();
  q.workload_hash = hash[0] ? hash : NULL;
  q.target_name = target;
  q.status = status < 0 ? DB_STATUS_ANY : status;
  q.limit = (size_t)limit;
  q.offset = (size_t)offset;
  db_records_t rs;
  tn_err_t err = {0};
  if (db_records_query(req->srv->rdb, &q, &rs, &err)) return td_req_tn_error(req, TD_E_INTERNAL, &err);
  if (rs.n == 0 && check_query_target(req, target)) {
    db_records_free(&rs);
    return TD_REPLY;
  }
  req->result = records_json(req->srv, &rs, &(flops_cache_t){.n = 0});
  db_records_free(&rs);
  return TD_REPLY;
}

td_reply_t td_m_db_best(td_req_t *req) {
  char hash[17];
  const char *target;
  int64_t k;
  if (td_param_hash(req, "workload", true, hash) || td_param_str(req, "target", false, 63, &target) ||
      td_param_int(req, "k", false, 1, 1, 100, &k))
    return TD_REPLY;
  if (!target) target = req->srv->cfg.target;
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  int rc = db_workload_get(req->srv->rdb, hash, &w, a, &err);
  flops_cache_t fc = {.hash = {hash}, .flops = {rc ? 0 : w.flops}, .n = 1};
  tn_arena_free(a);
  if (rc == TN_EINVAL)
    return td_req_error(req, TD_E_NOT_FOUND, "no workload %s in the database (db.workloads lists them)", hash);
  if (rc) return td_req_tn_error(req, TD_E_INTERNAL, &err);
  db_records_t rs;
  if (db_best(req->srv->rdb, hash, target, (size_t)k, &rs, &err)) return td_req_tn_error(req, TD_E_INTERNAL, &err);
  if (rs.n == 0 && check_query_target(req, target)) {
    db_records_free(&rs);
    return TD_REPLY;
  }
  req->result = records_json(req->srv, &rs, &fc);
  db_records_free(&rs);
  return TD_REPLY;
}

/* ---- export / import (thread pool) ------------------------------------------------ */

typedef struct xfer {
  char hash[17];
  char target[64];
  char *jsonl;        /* import input */
  tn_buf_t out;       /* export output */
  db_import_stats_t stats;
  tn_err_t err;
  int rc;
} xfer_t;

static void xfer_free(void *p) {
  xfer_t *x = p;
  free(x->jsonl);
  tn_buf_free(&x->out);
  free(x);
}

static void export_work(td_req_t *req) {
  xfer_t *x = req->data;
  db_query_t q = db_query_all();
  q.workload_hash = x->hash[0] ? x->hash : NULL;
  q.target_name = x->target[0] ? x->target : NULL;
  uv_mutex_lock(&req->srv->wdb_lock);
  x->rc = db_export_jsonl(req->srv->wdb, &q, &x->out, &x->err);
  uv_mutex_unlock(&req->srv->wdb_lock);
}

static void export_done(td_req_t *req) {
  xfer_t *x = req->data;
  if (x->rc) {
    td_req_tn_error(req, TD_E_INTERNAL, &x->err);
    return;
  }
  req->result = cJSON_CreateObject();
  cJSON_AddStringToObject(req->result, "jsonl", tn_buf_str(&x->out));
}

td_reply_t td_m_db_export(td_req_t *req) {
  xfer_t *x = tn_xcalloc(1, sizeof *x);
  tn_buf_init(&x->out);
  req->data = x;
  req->free_data = xfer_free;
  const char *target;
  if (td_param_hash(req, "workload", false, x->hash) || td_param_str(req, "target", false, 63, &target) ||
      check_query_target(req, target))
    return TD_REPLY;
  if (target) snprintf(x->target, sizeof x->target, "%s", target);
  return td_req_queue_work(req, export_work, export_done);
}

/* The last workload an import parsed: an export lists a workload's records
 * together, so one parse serves them all. */
typedef struct import_cache {
  char *name, *source, *params;
  ir_workload_t *w;
  char hash[17];
} import_cache_t;

static bool same_text(const char *a, const char *b) { return a && b ? strcmp(a, b) == 0 : a == b; }

static void import_cache_free(import_cache_t *ic) {
  free(ic->name), free(ic->source), free(ic->params);
  ir_workload_free(ic->w);
  memset(ic, 0, sizeof *ic);
}

/* Nothing imported is taken on trust: the workload's source must hash to
 * the hash the record is filed under (else a kernel would be served for
 * another workload), and the trace must replay on that workload (else an
 * invalid trace with a tiny median would become the best for good). */
static int import_check(void *ctx, const db_import_item_t *it, tn_err_t *err) {
  import_cache_t *ic = ctx;
  if (!ic->w || !same_text(ic->name, it->workload_name) || !same_text(ic->source, it->workload_source) ||
      !same_text(ic->params, it->workload_params)) {
    import_cache_free(ic);
    if (td_workload_parse(it->workload_name, it->workload_source, it->workload_params, &ic->w, err))
      return tn_err_prefix(err, "workload %s does not parse", it->workload_hash);
    ic->name = tn_xstrdup(it->workload_name), ic->source = tn_xstrdup(it->workload_source);
    ic->params = it->workload_params ? tn_xstrdup(it->workload_params) : NULL;
    ir_hash_hex(ir_func_hash(ic->w->func), ic->hash);
  }
  if (strcmp(ic->hash, it->workload_hash) != 0)
    return tn_err_set(err, TN_EINVAL, "workload hash %s does not match its source and parameters (which hash to "
                      "%s): the line was altered or made elsewhere", it->workload_hash, ic->hash);
  sch_trace_t *t = NULL;
  sch_t *s = NULL;
  int rc = TN_OK;
  if (sch_trace_from_json(it->trace, strlen(it->trace), &t, err) < 0 || sch_replay(ic->w->func, t, 1, &s, err) < 0)
    rc = tn_err_prefix(err, "the trace does not replay on workload %s (%s)", ic->hash, it->workload_name);
  sch_free(s);
  sch_trace_free(t);
  return rc;
}

int td_import_jsonl(db_t *db, const char *text, size_t len, db_import_stats_t *stats, tn_err_t *err) {
  import_cache_t cache = {0};
  int rc = db_import_jsonl_checked(db, text, len, import_check, &cache, stats, err);
  import_cache_free(&cache);
  return rc;
}

static void import_work(td_req_t *req) {
  xfer_t *x = req->data;
  uv_mutex_lock(&req->srv->wdb_lock);
  x->rc = td_import_jsonl(req->srv->wdb, x->jsonl, strlen(x->jsonl), &x->stats, &x->err);
  uv_mutex_unlock(&req->srv->wdb_lock);
}

static void import_done(td_req_t *req) {
  xfer_t *x = req->data;
  if (x->rc) {
    td_req_tn_error(req, TD_E_PARAMS, &x->err);
    return;
  }
  td_log(TD_INFO, "records imported", "inserted=%zu duplicates=%zu workloads_added=%zu", x->stats.inserted,
         x->stats.duplicates, x->stats.workloads_added);
  cJSON *o = req->result = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "lines", (double)x->stats.lines);
  cJSON_AddNumberToObject(o, "inserted", (double)x->stats.inserted);
  cJSON_AddNumberToObject(o, "duplicates", (double)x->stats.duplicates);
  cJSON_AddNumberToObject(o, "workloads_added", (double)x->stats.workloads_added);
  cJSON_AddNumberToObject(o, "targets_added", (double)x->stats.targets_added);
}

td_reply_t td_m_db_import(td_req_t *req) {
  xfer_t *x = tn_xcalloc(1, sizeof *x);
  tn_buf_init(&x->out);
  req->data = x;
  req->free_data = xfer_free;
  const char *text;
  if (td_param_str(req, "jsonl", true, TUNED_MAX_MESSAGE, &text)) return TD_REPLY;
  x->jsonl = tn_xstrdup(text);
  return td_req_queue_work(req, import_work, import_done);
}
