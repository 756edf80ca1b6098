/* methods_db.c — database queries: db.workloads, db.records and db.best on
 * the reader threads (readers.c: read-only connections, never the loop),
 * db.export (its own read-only connection) and db.import (each line's
 * workload hash and trace checked) on the thread pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/td.h"
#include "schedule/schedule.h"
#include "search/search.h"

static const char *const statuses[] = {"ok", "build_error", "run_error", "timeout", "wrong_result", "too_slow", NULL};

/* A query's params, taken on the loop and read on a reader thread. */
typedef struct query {
  char hash[TN_ID_SIZE];
  char target[64];      /* "" when none */
  char name[64];        /* db.workloads: only workloads of this name, with their sources ("" all) */
  int status;
  int64_t limit, offset, k;
} query_t;

static query_t *new_query(td_req_t *req) {
  query_t *q = tn_xcalloc(1, sizeof *q);
  req->data = q;
  req->free_data = free;
  return q;
}

static void workloads_read(td_req_t *req, db_t *db) {
  const query_t *q = req->data;
  db_workloads_t ws;
  tn_err_t err = {0};
  /* by name: every workload is listed, then the name's are paged */
  bool named = q->name[0] != 0;
  if (db_workloads_list(db, named ? 0 : (size_t)q->limit, named ? 0 : (size_t)q->offset, &ws, &err)) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "workloads");
  int64_t skipped = 0, added = 0;
  for (size_t i = 0; i < ws.n; i++) {
    const db_workload_t *w = &ws.items[i];
    if (named && (!w->name || strcmp(w->name, q->name) != 0)) continue;
    if (named && (skipped++ < q->offset || added++ >= q->limit)) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "hash", w->hash);
    cJSON_AddStringToObject(e, "name", w->name ? w->name : "");
    cJSON_AddItemToObject(e, "params", td_json_embed(w->params ? w->params : "{}"));
    cJSON_AddNumberToObject(e, "flops", w->flops);
    cJSON_AddNumberToObject(e, "bytes", w->bytes);
    cJSON_AddNumberToObject(e, "records", (double)w->n_records);
    cJSON_AddNumberToObject(e, "created", w->created);
    if (named) cJSON_AddStringToObject(e, "source", w->source ? w->source : "");
    cJSON_AddItemToArray(arr, e);
  }
  db_workloads_free(&ws);
  req->result = o;
}

td_reply_t td_m_db_workloads(td_req_t *req) {
  query_t *q = new_query(req);
  const char *name;
  if (td_param_int(req, "limit", false, 1000, 1, 100000, &q->limit) ||
      td_param_int(req, "offset", false, 0, 0, INT64_C(1) << 40, &q->offset) ||
      td_param_str(req, "name", false, sizeof q->name - 1, &name))
    return TD_REPLY;
  if (name) snprintf(q->name, sizeof q->name, "%s", name);
  return td_req_queue_read(req, workloads_read, NULL);
}

/* FLOPs per workload hash, looked up once per answer. */
typedef struct flops_cache {
  const char *hash[16];
  double flops[16];
  int n;
} flops_cache_t;

static double workload_flops(db_t *db, flops_cache_t *fc, const char *hash) {
  for (int i = 0; i < fc->n; i++)
    if (strcmp(fc->hash[i], hash) == 0) return fc->flops[i];
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  tn_err_t err = {0};
  double f = db_workload_get(db, hash, &w, a, &err) == 0 ? w.flops : 0;
  tn_arena_free(a);
  if (fc->n < 16) fc->hash[fc->n] = hash, fc->flops[fc->n++] = f;
  return f;
}

static cJSON *records_json(db_t *db, const db_records_t *rs, flops_cache_t *fc) {
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "records");
  for (size_t i = 0; i < rs->n; i++) {
    const db_record_t *r = &rs->items[i];
    double flops = r->workload_hash ? workload_flops(db, fc, r->workload_hash) : 0;
    cJSON_AddItemToArray(arr, td_record_json(r, flops));
  }
  return o;
}

/* A target that a query names must exist: in the database (imported records
 * keep theirs) or as a target file; otherwise an empty answer would read as
 * "nothing tuned there yet" for a misspelt name.  Asked only when the answer
 * is empty (no cost on the answers that have records).  -1 with the error set. */
static int check_query_target(td_req_t *req, db_t *db, const char *name) {
  if (!name || !name[0]) return 0;
  db_targets_t ts;
  tn_err_t err = {0};
  if (db_targets_list(db, &ts, &err)) {
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

static void records_read(td_req_t *req, db_t *db) {
  query_t *qp = req->data;
  if (td_hash_resolve(req, db, qp->hash)) return;
  db_query_t q = db_query_all();
  q.workload_hash = qp->hash[0] ? qp->hash : NULL;
  q.target_name = qp->target[0] ? qp->target : NULL;
  q.status = qp->status < 0 ? DB_STATUS_ANY : qp->status;
  q.limit = (size_t)qp->limit;
  q.offset = (size_t)qp->offset;
  db_records_t rs;
  tn_err_t err = {0};
  if (db_records_query(db, &q, &rs, &err)) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return;
  }
  if (rs.n > 0 || check_query_target(req, db, qp->target) == 0)
    req->result = records_json(db, &rs, &(flops_cache_t){.n = 0});
  db_records_free(&rs);
}

td_reply_t td_m_db_records(td_req_t *req) {
  query_t *q = new_query(req);
  const char *target;
  if (td_param_hash(req, "workload", false, q->hash) || td_param_str(req, "target", false, 63, &target) ||
      td_param_enum(req, "status", statuses, -1, &q->status) ||
      td_param_int(req, "limit", false, 100, 1, 1000, &q->limit) ||
      td_param_int(req, "offset", false, 0, 0, INT64_C(1) << 40, &q->offset))
    return TD_REPLY;
  snprintf(q->target, sizeof q->target, "%s", target ? target : "");
  return td_req_queue_read(req, records_read, NULL);
}

static void best_read(td_req_t *req, db_t *db) {
  query_t *q = req->data;
  if (td_hash_resolve(req, db, q->hash)) return;
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  int rc = db_workload_get(db, q->hash, &w, a, &err);
  flops_cache_t fc = {.hash = {q->hash}, .flops = {rc ? 0 : w.flops}, .n = 1};
  tn_arena_free(a);
  if (rc == TN_EINVAL) {
    td_req_error(req, TD_E_NOT_FOUND, "no workload %s in the database (db.workloads lists them)", q->hash);
    return;
  }
  db_records_t rs;
  if (rc || db_best(db, q->hash, q->target, (size_t)q->k, &rs, &err)) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return;
  }
  if (rs.n > 0 || check_query_target(req, db, q->target) == 0) req->result = records_json(db, &rs, &fc);
  db_records_free(&rs);
}

td_reply_t td_m_db_best(td_req_t *req) {
  query_t *q = new_query(req);
  const char *target;
  if (td_param_hash(req, "workload", true, q->hash) || td_param_str(req, "target", false, 63, &target) ||
      td_param_int(req, "k", false, 1, 1, 100, &q->k))
    return TD_REPLY;
  snprintf(q->target, sizeof q->target, "%s", target ? target : req->srv->cfg.target);
  return td_req_queue_read(req, best_read, NULL);
}

/* ---- export / import (thread pool) ------------------------------------------------ */

typedef struct xfer {
  char hash[TN_ID_SIZE];
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

/* On the thread pool with a read-only connection of its own: a long export
 * holds neither the writers' lock nor a reader thread. */
static void export_work(td_req_t *req) {
  xfer_t *x = req->data;
  db_query_t q = db_query_all();
  q.workload_hash = x->hash[0] ? x->hash : NULL;
  q.target_name = x->target[0] ? x->target : NULL;
  db_t *db = td_rdb_acquire(req->srv, &x->err);
  if (!db) {
    x->rc = x->err.code;
    return;
  }
  if (td_hash_resolve(req, db, x->hash) == 0 && check_query_target(req, db, x->target) == 0)
    x->rc = db_export_jsonl(db, &q, &x->out, &x->err);
  td_rdb_release(req->srv, db);
}

static void export_done(td_req_t *req) {
  xfer_t *x = req->data;
  if (req->code) return; /* td_hash_resolve or check_query_target said why */
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
  if (td_param_hash(req, "workload", false, x->hash) || td_param_str(req, "target", false, 63, &target))
    return TD_REPLY;
  if (target) snprintf(x->target, sizeof x->target, "%s", target);
  return td_req_queue_work(req, export_work, export_done);
}

/* The last workload an import parsed: an export lists a workload's records
 * together, so one parse serves them all. */
typedef struct import_cache {
  char *name, *source, *params;
  ir_workload_t *w;
  char hash[TN_ID_SIZE];
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
    if (ir_workload_parse_stored(it->workload_name, it->workload_source, it->workload_params, &ic->w, err))
      return tn_err_prefix(err, "workload %s does not parse", it->workload_hash);
    ic->name = tn_xstrdup(it->workload_name), ic->source = tn_xstrdup(it->workload_source);
    ic->params = it->workload_params ? tn_xstrdup(it->workload_params) : NULL;
    ir_func_hash(ic->w->func, ic->hash);
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
