/* methods_kernel.c — kernel.get: the best verified record of a workload on a
 * target, replayed on the workload and lowered to the target's language (and
 * for CUDA compiled to PTX and CUBIN in a build process), all on the thread
 * pool; with "fallback": "nearest", a shape without a record gets the record
 * of the nearest shape of the same workload text, re-verified on it in a
 * worker process.  And workload.check: a workload text's hash, parameters
 * and work, so clients that cannot parse the language (libtuned, Python) can
 * name its records. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "daemon/td.h"
#include "ir/ir.h"
#include "schedule/schedule.h"
#include "search/search.h"

typedef struct kget {
  char hash[TN_ID_SIZE];
  char *text;           /* workload_text, or NULL */
  char name[64];
  cJSON *overrides;
  td_target_info_t target;
  char entry[CG_ENTRY_MAX + 1];
  bool fallback;        /* "fallback": "nearest" */
  tn_arena_t *arena;
  cJSON *out;           /* the result, built on the worker */
} kget_t;

static void kget_free(void *p) {
  kget_t *k = p;
  free(k->text);
  cJSON_Delete(k->overrides);
  cJSON_Delete(k->out);
  tn_arena_free(k->arena);
  free(k);
}


/* Parses the workload_text form with its overrides; a parse error answers req. */
static ir_workload_t *parse_text(td_req_t *req, kget_t *k) {
  tn_err_t err = {0};
  ir_workload_t *w = NULL;
  char *params = k->overrides ? cJSON_PrintUnformatted(k->overrides) : NULL;
  int rc = ir_workload_parse_stored(k->name, k->text, params, &w, &err);
  free(params);
  if (rc) td_req_error(req, TD_E_WORKLOAD, "%s", err.msg);
  return w;
}

/* Hash of the workload_text form. */
static int hash_of_text(td_req_t *req, kget_t *k) {
  ir_workload_t *w = parse_text(req, k);
  if (!w) return -1;
  ir_func_hash(w->func, k->hash);
  ir_workload_free(w);
  return 0;
}

/* The workload row and its best record (copied into k->arena).  Without a
 * verified record: 1 when the request asked for a fallback (w is the row, or
 * all zero when there is none), else an error answers req (-1). */
static int lookup(td_req_t *req, kget_t *k, db_workload_t *w, db_record_t *best) {
  td_server_t *srv = req->srv;
  tn_err_t err = {0};
  db_records_t rs = {0};
  /* a read-only connection: an import holding the writers' lock cannot delay it */
  db_t *db = td_rdb_acquire(srv, &err);
  if (!db) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  if (td_hash_resolve(req, db, k->hash)) return td_rdb_release(srv, db), -1;
  int rc = db_workload_get(db, k->hash, w, k->arena, &err);
  if (!rc) rc = db_best(db, k->hash, k->target.t.name, 1, &rs, &err);
  td_rdb_release(srv, db);
  if (rc == TN_EINVAL && !w->hash) {
    if (k->fallback && k->text) return memset(w, 0, sizeof *w), 1;
    if (k->text) td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet: workload %s was never tuned (tune.submit "
                              "it first)", k->hash);
    else td_req_error(req, TD_E_NOT_FOUND, "no workload %s in the database (db.workloads lists them)", k->hash);
    return -1;
  }
  if (rc) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  if (rs.n == 0) {
    db_records_free(&rs);
    if (k->fallback) return 1;
    return td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet for workload %s on target %s: no verified "
                        "record (tune.submit it, or wait for its job)", k->hash, k->target.t.name), -1;
  }
  *best = rs.items[0];
  best->trace = tn_arena_strdup(k->arena, best->trace);
  best->compiler = best->compiler ? tn_arena_strdup(k->arena, best->compiler) : NULL;
  db_records_free(&rs);
  return 0;
}

/* Replays the trace on workload f the way the tuner does (the
 * postprocessors run, and verify, again) and lowers it. */
static int replay(kget_t *k, const ir_func_t *f, const char *trace, cg_module_t **mod, tn_err_t *err) {
  return srch_kernel_lower(f, &k->target.t, trace, k->entry, mod, err);
}

/* kernel.get's answer for module mod lowered from record rec of workload
 * (hash, name, flops); NULL after answering req with an error. */
static cJSON *kernel_reply(td_req_t *req, kget_t *k, const cg_module_t *mod, const db_record_t *rec,
                           const char *name, double flops) {
  cJSON *o = NULL;
  tn_err_t err = {0};
  if (srch_kernel_json(mod, &k->target.t, k->hash, rec, name, flops, &o, &err))
    td_req_error(req, TD_E_INTERNAL, "%s", err.msg);
  return o;
}

static void nearest(td_req_t *req, kget_t *k, const db_workload_t *w);

static void kernel_work(td_req_t *req) {
  kget_t *k = req->data;
  if (k->text && hash_of_text(req, k)) return;
  db_workload_t w = {0};
  db_record_t best;
  int rc = lookup(req, k, &w, &best);
  if (rc > 0) nearest(req, k, &w);
  if (rc) return;
  if (!k->entry[0]) snprintf(k->entry, sizeof k->entry, "%s", cg_entry_for(w.name));
  tn_err_t err = {0};
  ir_workload_t *wl = NULL;
  db_t *db = td_rdb_acquire(req->srv, &err); /* for the unscheduled program's time */
  if (!db) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return;
  }
  rc = ir_workload_parse_stored(w.name, w.source, w.params, &wl, &err);
  if (!rc) rc = srch_kernel_serve(db, wl, k->hash, &k->target.t, &best, k->entry, &k->out, &err);
  td_rdb_release(req->srv, db);
  if (rc) td_req_error(req, TD_E_INTERNAL, "%s", err.msg);
  ir_workload_free(wl);
}

/* ---- the nearest-shape fallback ------------------------------------------------ */

/* A record of the requested workload's family (the same text at other
 * parameters), and how far its shape is from the requested one. */
typedef struct kin {
  double dist;
  const char *hash, *params;
  db_record_t best;
} kin_t;

/* How far apart two parameter sets are: the sum over the requested
 * parameters of |ln a - ln b| (a factor of 2 in one extent counts as much
 * as in any other), |a - b| where a value is not positive. */
static double shape_distance(const ir_workload_t *want, const char *params_json) {
  cJSON *p = cJSON_Parse(params_json ? params_json : "{}");
  double d = 0;
  for (int i = 0; i < want->nparams; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, want->params[i].name);
    double a = (double)want->params[i].value, b = cJSON_IsNumber(v) ? v->valuedouble : a;
    d += a > 0 && b > 0 ? fabs(log(a) - log(b)) : fabs(a - b);
  }
  cJSON_Delete(p);
  return d;
}

static int kin_cmp(const void *a, const void *b) {
  const kin_t *x = a, *y = b;
  return x->dist < y->dist ? -1 : x->dist > y->dist ? 1 : strcmp(x->hash, y->hash);
}

/* The family's workloads with a verified record on the target, nearest
 * first (at most KIN_MAX), copied into k->arena. */
#define KIN_MAX 8
static int find_kin(td_req_t *req, kget_t *k, const ir_workload_t *want, const char *text, kin_t *kin) {
  tn_err_t err = {0};
  db_workloads_t ws = {0};
  db_t *db = td_rdb_acquire(req->srv, &err);
  if (!db) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  int rc = db_workloads_list(db, 0, 0, &ws, &err), n = 0;
  kin_t *all = tn_xcalloc(TN_MAX(ws.n, 1), sizeof *all);
  for (size_t i = 0; rc == 0 && i < ws.n; i++) {
    const db_workload_t *x = &ws.items[i];
    if (x->n_records == 0 || !x->source || strcmp(x->source, text) != 0 || strcmp(x->hash, k->hash) == 0) continue;
    all[n++] = (kin_t){shape_distance(want, x->params), x->hash, x->params, {0}};
  }
  if (rc == 0) qsort(all, (size_t)n, sizeof *all, kin_cmp);
  int found = 0;
  for (int i = 0; rc == 0 && i < n && found < KIN_MAX; i++) {
    db_records_t rs = {0};
    rc = db_best(db, all[i].hash, k->target.t.name, 1, &rs, &err);
    if (rc == 0 && rs.n > 0) {
      kin_t *c = &kin[found++];
      *c = all[i];
      c->hash = tn_arena_strdup(k->arena, all[i].hash);
      c->params = tn_arena_strdup(k->arena, all[i].params ? all[i].params : "{}");
      c->best = rs.items[0];
      c->best.trace = tn_arena_strdup(k->arena, rs.items[0].trace);
      c->best.compiler = rs.items[0].compiler ? tn_arena_strdup(k->arena, rs.items[0].compiler) : NULL;
    }
    db_records_free(&rs);
  }
  free(all);
  db_workloads_free(&ws);
  td_rdb_release(req->srv, db);
  if (rc) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  return found;
}

/* The whole re-verification (the reference evaluation, the build and the
 * run of each record tried) stops here, as it does when the daemon stops. */
#define FALLBACK_BUDGET_S 120.0

typedef struct fb_ctx {
  td_server_t *srv;
  double deadline;
} fb_ctx_t;

static bool fb_cancel(void *p) {
  const fb_ctx_t *c = p;
  return __atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED) || tn_now() > c->deadline;
}

/* Builds, runs and verifies mod on the requested workload in a worker
 * process; 0 with its median time, else why not in why. */
static int reverify(const kget_t *k, const ir_func_t *f, cg_module_t *mod, fb_ctx_t *ctx, double *secs,
                    tn_buf_t *why) {
  ms_options_t o = {0};
  o.run.cancel = o.run.stop = fb_cancel;
  o.run.cancel_ctx = o.run.stop_ctx = ctx;
  o.seed = 1;
  ms_result_t r;
  tn_err_t err = {0};
  int rc = ms_measure(f, &k->target.t, &mod, 1, &o, &r, &err);
  if (rc) tn_buf_printf(why, "%s", err.msg);
  else if (r.status != MS_OK || !r.ran) tn_buf_printf(why, "%s: %s", ms_status_name(r.status), r.error);
  else *secs = r.median_secs;
  bool ok = rc == 0 && r.status == MS_OK && r.ran;
  ms_result_clear(&r);
  return ok ? 0 : -1;
}

/* The unscheduled program's median time on workload f (0 when it cannot
 * be measured within the fallback's time). */
static double unscheduled_secs(kget_t *k, const ir_func_t *f, fb_ctx_t *ctx) {
  cg_module_t *mod = NULL;
  tn_err_t err = {0};
  tn_buf_t why;
  tn_buf_init(&why);
  double secs = 0;
  if (replay(k, f, NULL, &mod, &err) == 0 && reverify(k, f, mod, ctx, &secs, &why) != 0) secs = 0;
  cg_module_free(mod);
  tn_buf_free(&why);
  return secs;
}

/* No verified record for the requested shape: the nearest shape of the same
 * workload text whose best record replays on the requested shape and
 * verifies there is served, re-measured, marked as a fallback. */
static void nearest(td_req_t *req, kget_t *k, const db_workload_t *w) {
  tn_err_t err = {0};
  ir_workload_t *want = NULL;
  if (k->text) want = parse_text(req, k);
  else if (ir_workload_parse_stored(w->name, w->source, w->params, &want, &err))
    td_req_error(req, TD_E_INTERNAL, "workload %s: %s", k->hash, err.msg);
  if (!want) return;
  const char *text = k->text ? k->text : w->source;
  kin_t kin[KIN_MAX];
  int n = find_kin(req, k, want, text, kin);
  if (n < 0) {
    ir_workload_free(want);
    return;
  }
  if (!k->entry[0]) snprintf(k->entry, sizeof k->entry, "%s", cg_entry_for(want->name));
  fb_ctx_t ctx = {req->srv, tn_now() + FALLBACK_BUDGET_S};
  tn_buf_t why;
  tn_buf_init(&why);
  for (int i = 0; i < n && !k->out && !fb_cancel(&ctx); i++) {
    cg_module_t *mod = NULL;
    double secs = 0;
    tn_buf_printf(&why, "\n  record %lld of %s %s: ", (long long)kin[i].best.id, kin[i].hash, kin[i].params);
    if (replay(k, want->func, kin[i].best.trace, &mod, &err)) {
      tn_buf_printf(&why, "does not replay here (%s)", err.msg);
      tn_err_clear(&err);
      continue;
    }
    if (reverify(k, want->func, mod, &ctx, &secs, &why) == 0) {
      db_record_t rec = kin[i].best;
      rec.median_secs = secs;
      cJSON *o = kernel_reply(req, k, mod, &rec, want->name, ir_func_flops(want->func));
      if (o) {
        cJSON *f = cJSON_AddObjectToObject(o, "fallback");
        cJSON_AddStringToObject(f, "workload", kin[i].hash);
        cJSON_AddItemToObject(f, "params", td_json_embed(kin[i].params));
        cJSON_AddNumberToObject(f, "record", (double)kin[i].best.id);
        td_json_num(f, "median_secs", kin[i].best.median_secs);
        cJSON_AddBoolToObject(f, "verified", true);
        /* the exact shape's baseline: whether the fallback beats doing nothing */
        double base = unscheduled_secs(k, want->func, &ctx);
        if (base > 0) {
          td_json_num(f, "unscheduled_median_secs", base);
          cJSON_AddBoolToObject(f, "slower_than_unscheduled", secs > base);
        }
      }
      k->out = o;
    }
    cg_module_free(mod);
  }
  if (!k->out && !req->code) {
    if (n == 0)
      td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet for workload %s on target %s, and no verified record "
                   "of the same workload text at another shape to fall back on", k->hash, k->target.t.name);
    else
      td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet for workload %s on target %s, and none of the nearest "
                   "shapes' records replays and verifies on it%s%s", k->hash, k->target.t.name, tn_buf_str(&why),
                   fb_cancel(&ctx) ? "\n  (stopped: the daemon is stopping or the fallback's time is spent)" : "");
  }
  tn_buf_free(&why);
  ir_workload_free(want);
}

static void kernel_done(td_req_t *req) {
  kget_t *k = req->data;
  if (req->code || !k->out) return;
  req->result = k->out;
  k->out = NULL;
}

td_reply_t td_m_kernel_get(td_req_t *req) {
  kget_t *k = tn_xcalloc(1, sizeof *k);
  k->arena = tn_arena_new();
  req->data = k;
  req->free_data = kget_free;
  const char *text, *name, *entry, *fallback;
  if (td_param_hash(req, "workload", false, k->hash) ||
      td_param_str(req, "workload_text", false, TUNED_MAX_MESSAGE, &text) ||
      td_param_str(req, "name", false, 47, &name) || td_param_overrides(req, "params", &k->overrides) ||
      td_param_target(req, "target", false, &k->target) || td_param_str(req, "entry", false, CG_ENTRY_MAX, &entry) ||
      td_param_str(req, "fallback", false, 16, &fallback))
    return TD_REPLY;
  if (fallback && strcmp(fallback, "none") != 0 && strcmp(fallback, "nearest") != 0)
    return td_req_error(req, TD_E_PARAMS, "invalid param \"fallback\": \"%s\" (\"none\" or \"nearest\")", fallback);
  k->fallback = fallback && strcmp(fallback, "nearest") == 0;
  if (!k->hash[0] == !text)
    return td_req_error(req, TD_E_PARAMS, "give exactly one of the params \"workload\" (a hash) and "
                        "\"workload_text\" (the workload's source)");
  if (entry && !cg_entry_usable(entry))
    return td_req_error(req, TD_E_PARAMS, "invalid param \"entry\": \"%s\" is not a C identifier, or is "
                        "reserved (C, CUDA or OpenCL words, C library names such as exit, all capitals, a "
                        "leading '_')", entry);
  if (entry) snprintf(k->entry, sizeof k->entry, "%s", entry);
  snprintf(k->name, sizeof k->name, "%s", name ? name : "workload");
  if (text) k->text = tn_xstrdup(text);
  return td_req_queue_work(req, kernel_work, kernel_done);
}

/* ---- workload.check ------------------------------------------------------------ */

static void check_work(td_req_t *req) {
  kget_t *k = req->data;
  ir_workload_t *w = parse_text(req, k);
  if (!w) return;
  const ir_func_t *f = w->func;
  ir_func_hash(f, k->hash);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "workload", k->hash);
  cJSON_AddStringToObject(o, "name", k->name);
  cJSON *params = cJSON_AddObjectToObject(o, "params");
  for (int i = 0; i < w->nparams; i++) cJSON_AddNumberToObject(params, w->params[i].name, (double)w->params[i].value);
  cJSON *tensors = cJSON_AddArrayToObject(o, "tensors");
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", b->name);
    cJSON_AddStringToObject(t, "dtype", ir_dtype_name(b->dtype));
    cJSON *shape = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < b->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)b->shape[d]));
    cJSON_AddStringToObject(t, "role", b->role == IR_BUF_INPUT ? "input" : "output");
    cJSON_AddItemToArray(tensors, t);
  }
  td_json_num(o, "flops", ir_func_flops(f));
  td_json_num(o, "bytes", ir_func_bytes(f));
  ir_workload_free(w);
  k->out = o;
}

td_reply_t td_m_workload_check(td_req_t *req) {
  kget_t *k = tn_xcalloc(1, sizeof *k);
  req->data = k;
  req->free_data = kget_free;
  const char *text, *name;
  if (td_param_str(req, "workload_text", true, TUNED_MAX_MESSAGE, &text) ||
      td_param_str(req, "name", false, 47, &name) || td_param_overrides(req, "params", &k->overrides))
    return TD_REPLY;
  snprintf(k->name, sizeof k->name, "%s", name ? name : "workload");
  k->text = tn_xstrdup(text);
  return td_req_queue_work(req, check_work, kernel_done);
}
