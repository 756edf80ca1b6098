/* methods_kernel.c — kernel.get: the best verified record of a workload on a
 * target, replayed on the workload and lowered to the target's language (and
 * for CUDA compiled to PTX and CUBIN in a build process), all on the thread
 * pool; and workload.check: a workload text's hash, parameters and work, so
 * clients that cannot parse the language (libtuned, Python) can name its
 * records. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "daemon/td.h"
#include "ir/ir.h"
#include "schedule/schedule.h"
#include "search/search.h"

typedef struct kget {
  char hash[17];
  char *text;           /* workload_text, or NULL */
  char name[64];
  cJSON *overrides;
  td_target_info_t target;
  char entry[CG_ENTRY_MAX + 1];
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

static char *base64(const unsigned char *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = tn_xmalloc((n + 2) / 3 * 4 + 1), *o = out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    *o++ = tab[v >> 18 & 63];
    *o++ = tab[v >> 12 & 63];
    *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
    *o++ = i + 2 < n ? tab[v & 63] : '=';
  }
  *o = 0;
  return out;
}

/* Parses the workload_text form with its overrides; a parse error answers req. */
static ir_workload_t *parse_text(td_req_t *req, kget_t *k) {
  tn_err_t err = {0};
  ir_workload_t *w = NULL;
  char *params = k->overrides ? cJSON_PrintUnformatted(k->overrides) : NULL;
  int rc = td_workload_parse(k->name, k->text, params, &w, &err);
  free(params);
  if (rc) td_req_error(req, TD_E_WORKLOAD, "%s", err.msg);
  return w;
}

/* Hash of the workload_text form. */
static int hash_of_text(td_req_t *req, kget_t *k) {
  ir_workload_t *w = parse_text(req, k);
  if (!w) return -1;
  ir_hash_hex(ir_func_hash(w->func), k->hash);
  ir_workload_free(w);
  return 0;
}

/* The workload row and its best record (copied into k->arena). */
static int lookup(td_req_t *req, kget_t *k, db_workload_t *w, db_record_t *best) {
  td_server_t *srv = req->srv;
  tn_err_t err = {0};
  db_records_t rs = {0};
  /* a read-only connection: an import holding the writers' lock cannot delay it */
  db_t *db = td_rdb_acquire(srv, &err);
  if (!db) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  int rc = db_workload_get(db, k->hash, w, k->arena, &err);
  if (!rc) rc = db_best(db, k->hash, k->target.t.name, 1, &rs, &err);
  td_rdb_release(srv, db);
  if (rc == TN_EINVAL && !w->hash) {
    if (k->text) td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet: workload %s was never tuned (tune.submit "
                              "it first)", k->hash);
    else td_req_error(req, TD_E_NOT_FOUND, "no workload %s in the database (db.workloads lists them)", k->hash);
    return -1;
  }
  if (rc) return td_req_tn_error(req, TD_E_INTERNAL, &err), -1;
  if (rs.n == 0) {
    db_records_free(&rs);
    return td_req_error(req, TD_E_NO_KERNEL, "no tuned kernel yet for workload %s on target %s: no verified "
                        "record (tune.submit it, or wait for its job)", k->hash, k->target.t.name), -1;
  }
  *best = rs.items[0];
  best->trace = tn_arena_strdup(k->arena, best->trace);
  best->compiler = best->compiler ? tn_arena_strdup(k->arena, best->compiler) : NULL;
  db_records_free(&rs);
  return 0;
}

/* Replays the trace on the stored workload the way the tuner does (the
 * postprocessors run, and verify, again) and lowers it. */
static int lower(td_req_t *req, kget_t *k, const db_workload_t *w, const char *trace, cg_module_t **mod) {
  tn_err_t err = {0};
  ir_workload_t *wl = NULL;
  sch_trace_t *tr = NULL;
  int rc = td_workload_parse(w->name, w->source, w->params, &wl, &err);
  if (!rc) rc = sch_trace_from_json(trace, strlen(trace), &tr, &err);
  if (!rc) rc = srch_lower(wl->func, &k->target.t, tr, 1, k->entry, mod, NULL, &err);
  if (rc) td_req_error(req, TD_E_INTERNAL, "replaying the best record of %s: %s", k->hash, err.msg);
  sch_trace_free(tr);
  ir_workload_free(wl);
  return rc ? -1 : 0;
}

/* NVRTC runs in a build process of its own (killed past this): the record
 * may be an imported one, whose kernel was never compiled here, and a
 * runaway compile must cost this request, not the daemon. */
#define KERNEL_BUILD_TIMEOUT_S 30.0

static int add_cuda_binary(td_req_t *req, kget_t *k, const cg_module_t *mod, cJSON *o) {
  ms_cuda_output_t co = {0};
  tn_err_t err = {0};
  ms_nvrtc_proc_t *p = NULL;
  int rc = ms_nvrtc_proc_new(NULL, NULL, &p, &err);
  const char *arch = ms_cuda_arch(&k->target.t, mod->sm90a);
  if (rc == TN_OK) rc = ms_nvrtc_compile(p, mod->source, arch, KERNEL_BUILD_TIMEOUT_S, &co, &err);
  ms_nvrtc_proc_free(p);
  if (rc != TN_OK) {
    ms_cuda_output_free(&co);
    return td_req_error(req, TD_E_INTERNAL, "compiling the kernel for %s: %s", arch, err.msg), -1;
  }
  cJSON_AddStringToObject(o, "ptx", co.ptx ? co.ptx : "");
  char *b64 = base64(co.cubin, co.cubin_size);
  cJSON_AddStringToObject(o, "cubin_base64", b64);
  cJSON_AddStringToObject(o, "nvrtc", co.version);
  free(b64);
  ms_cuda_output_free(&co);
  return 0;
}

static void kernel_work(td_req_t *req) {
  kget_t *k = req->data;
  if (k->text && hash_of_text(req, k)) return;
  db_workload_t w = {0};
  db_record_t best;
  if (lookup(req, k, &w, &best)) return;
  if (!k->entry[0]) snprintf(k->entry, sizeof k->entry, "%s", cg_entry_for(w.name));
  cg_module_t *mod = NULL;
  if (lower(req, k, &w, best.trace, &mod)) return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "record", (double)best.id);
  cJSON_AddStringToObject(o, "workload", k->hash);
  cJSON_AddStringToObject(o, "name", w.name ? w.name : "");
  cJSON_AddStringToObject(o, "target", k->target.t.name);
  td_json_num(o, "median_secs", best.median_secs);
  td_json_num(o, "gflops", w.flops > 0 && best.median_secs > 0 ? w.flops / best.median_secs * 1e-9 : 0);
  td_json_num(o, "flops", w.flops);
  cJSON_AddStringToObject(o, "language", cg_target_name(mod->target));
  cJSON_AddStringToObject(o, "entry", mod->entry);
  cJSON_AddStringToObject(o, "source", mod->source);
  char *launch = cg_module_launch_json(mod);
  cJSON_AddItemToObject(o, "launch", td_json_embed(launch));
  free(launch);
  if (best.compiler) cJSON_AddStringToObject(o, "compiler", best.compiler);
  cJSON_AddItemToObject(o, "trace", td_json_embed(best.trace));
  if (k->target.t.kind == TN_TARGET_CUDA && add_cuda_binary(req, k, mod, o)) {
    cJSON_Delete(o);
    o = NULL;
  }
  cg_module_free(mod);
  k->out = o;
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
  const char *text, *name, *entry;
  if (td_param_hash(req, "workload", false, k->hash) ||
      td_param_str(req, "workload_text", false, TUNED_MAX_MESSAGE, &text) ||
      td_param_str(req, "name", false, 47, &name) || td_param_overrides(req, "params", &k->overrides) ||
      td_param_target(req, "target", false, &k->target) || td_param_str(req, "entry", false, CG_ENTRY_MAX, &entry))
    return TD_REPLY;
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
  ir_hash_hex(ir_func_hash(f), k->hash);
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
