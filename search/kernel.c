/* kernel.c — a tuning record as a servable kernel: the best verified record
 * of a workload on a target read from the database, its trace replayed on
 * the workload and lowered, and the kernel.get answer (source, launch, trace,
 * PTX and CUBIN for CUDA).  The daemon's kernel.get and the paths without a
 * daemon (libtuned_local, `tunectl kernel --db`) all serve kernels here.  A
 * best record slower than the unscheduled program measured on the same
 * target is never served: the unscheduled program is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search.h"

/* NVRTC runs in a build process of its own (killed past this): the record
 * may be an imported one, whose kernel was never compiled here, and a
 * runaway compile must cost this request, not its caller. */
#define KERNEL_BUILD_TIMEOUT_S 30.0

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

static void add_num(cJSON *o, const char *key, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

static cJSON *embed(const char *text) {
  if (!text) return cJSON_CreateNull();
  cJSON *j = cJSON_Parse(text);
  return j ? j : cJSON_CreateString(text);
}

int srch_kernel_lower(const ir_func_t *f, const tn_target_t *t, const char *trace, const char *entry,
                      cg_module_t **mod, tn_err_t *err) {
  sch_trace_t *tr = NULL;
  int rc = trace ? sch_trace_from_json(trace, strlen(trace), &tr, err) : TN_OK;
  if (!rc) rc = srch_lower(f, t, tr, 1, entry, mod, NULL, err);
  sch_trace_free(tr);
  return rc;
}

static int add_cuda_binary(const cg_module_t *mod, const tn_target_t *t, cJSON *o, tn_err_t *err) {
  ms_cuda_output_t co = {0};
  ms_build_proc_t *p = NULL;
  int rc = ms_build_proc_new(NULL, NULL, &p, err);
  const char *arch = ms_cuda_arch(t, mod->sm90a);
  if (rc == TN_OK) rc = ms_nvrtc_compile(p, mod->source, arch, KERNEL_BUILD_TIMEOUT_S, &co, err);
  ms_build_proc_free(p);
  if (rc != TN_OK) {
    ms_cuda_output_free(&co);
    return tn_err_prefix(err, "compiling the kernel for %s: ", arch), rc;
  }
  cJSON_AddStringToObject(o, "ptx", co.ptx ? co.ptx : "");
  char *b64 = base64(co.cubin, co.cubin_size);
  cJSON_AddStringToObject(o, "cubin_base64", b64);
  cJSON_AddStringToObject(o, "nvrtc", co.version);
  free(b64);
  ms_cuda_output_free(&co);
  return TN_OK;
}

int srch_kernel_json(const cg_module_t *mod, const tn_target_t *t, const char *hash, const db_record_t *rec,
                     const char *name, double flops, cJSON **out, tn_err_t *err) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "record", (double)(rec ? rec->id : 0));
  cJSON_AddStringToObject(o, "workload", hash);
  cJSON_AddStringToObject(o, "name", name ? name : "");
  cJSON_AddStringToObject(o, "target", t->name);
  double secs = rec ? rec->median_secs : NAN;
  add_num(o, "median_secs", secs);
  add_num(o, "gflops", flops > 0 && secs > 0 ? flops / secs * 1e-9 : 0);
  add_num(o, "flops", flops);
  cJSON_AddStringToObject(o, "language", cg_target_name(mod->target));
  cJSON_AddStringToObject(o, "entry", mod->entry);
  cJSON_AddStringToObject(o, "source", mod->source);
  char *launch = cg_module_launch_json(mod);
  cJSON_AddItemToObject(o, "launch", embed(launch));
  free(launch);
  if (rec && rec->compiler) cJSON_AddStringToObject(o, "compiler", rec->compiler);
  cJSON_AddItemToObject(o, "trace", embed(rec ? rec->trace : NULL));
  int rc = t->kind == TN_TARGET_CUDA ? add_cuda_binary(mod, t, o, err) : TN_OK;
  if (rc) cJSON_Delete(o);
  *out = rc ? NULL : o;
  return rc;
}

/* The unscheduled program's time on t when it was measured faster than
 * `secs` (else 0). */
static double faster_baseline(db_t *db, const char *hash, const tn_target_t *t, double secs) {
  if (!db || !(secs > 0)) return 0;
  db_baseline_t b;
  bool found = false;
  tn_arena_t *a = tn_arena_new();
  tn_err_t err = {0};
  double base = 0;
  if (db_baseline_get(db, hash, t->name, &b, &found, a, &err) == TN_OK && found && b.status == DB_STATUS_OK &&
      b.median_secs > 0 && b.median_secs < secs)
    base = b.median_secs;
  tn_arena_free(a);
  return base;
}

int srch_kernel_serve(db_t *db, const ir_workload_t *w, const char *hash, const tn_target_t *t,
                      const db_record_t *rec, const char *entry, cJSON **out, tn_err_t *err) {
  *out = NULL;
  double base = faster_baseline(db, hash, t, rec->median_secs);
  cg_module_t *mod = NULL;
  int rc = srch_kernel_lower(w->func, t, base > 0 ? NULL : rec->trace, entry, &mod, err);
  if (rc) return tn_err_prefix(err, "replaying record %lld of %s: ", (long long)rec->id, hash), rc;
  double flops = ir_func_flops(w->func);
  if (base > 0) { /* no record: the unscheduled program, with its time and the record it beat */
    db_record_t none = {.median_secs = base};
    rc = srch_kernel_json(mod, t, hash, &none, w->name, flops, out, err);
    if (!rc) {
      cJSON *u = cJSON_AddObjectToObject(*out, "unscheduled");
      cJSON_AddNumberToObject(u, "median_secs", base);
      cJSON_AddNumberToObject(u, "best_record", (double)rec->id);
      add_num(u, "best_median_secs", rec->median_secs);
    }
  } else {
    rc = srch_kernel_json(mod, t, hash, rec, w->name, flops, out, err);
  }
  cg_module_free(mod);
  return rc;
}

int srch_kernel_from_db(db_t *db, const char *hash, const ir_workload_t *w, const tn_target_t *t, const char *entry,
                        cJSON **out, tn_err_t *err) {
  *out = NULL;
  tn_arena_t *a = tn_arena_new();
  db_workload_t row = {0};
  db_records_t rs = {0};
  ir_workload_t *own = NULL;
  int rc = db_workload_get(db, hash, &row, a, err);
  if (rc == TN_EINVAL && !row.hash) {
    tn_err_clear(err);
    rc = tn_err_set(err, TN_ESTATE, "no tuned kernel yet: workload %s was never tuned (in this database)", hash);
  }
  if (!rc) rc = db_best(db, hash, t->name, 1, &rs, err);
  if (!rc && rs.n == 0)
    rc = tn_err_set(err, TN_ESTATE, "no tuned kernel yet for workload %s on target %s: no verified record", hash,
                    t->name);
  if (!rc && !w && !(rc = ir_workload_parse_stored(row.name, row.source, row.params, &own, err))) w = own;
  if (!rc) rc = srch_kernel_serve(db, w, hash, t, &rs.items[0], entry ? entry : cg_entry_for(w->name), out, err);
  ir_workload_free(own);
  db_records_free(&rs);
  tn_arena_free(a);
  return rc;
}
