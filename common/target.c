/* target.c — what a target is: its JSON form (the configs/ files; where
 * they are found is configs.c) and the roofline its peaks draw. */
#include "target.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *tn_target_kind_name(tn_target_kind_t k) {
  switch (k) {
  case TN_TARGET_CUDA: return "cuda";
  case TN_TARGET_OPENCL: return "opencl";
  case TN_TARGET_CUDA_HOST: return "cuda-host";
  case TN_TARGET_CPU: break;
  }
  return "cpu";
}

static int kind_parse(const char *s, tn_target_kind_t *k) {
  if (strcmp(s, "cpu") == 0) *k = TN_TARGET_CPU;
  else if (strcmp(s, "opencl") == 0) *k = TN_TARGET_OPENCL;
  else if (strcmp(s, "cuda") == 0) *k = TN_TARGET_CUDA;
  else if (strcmp(s, "cuda-host") == 0) *k = TN_TARGET_CUDA_HOST;
  else return TN_EINVAL;
  return TN_OK;
}

static void fill_cpu_cores(tn_target_t *t) {
  if (t->kind == TN_TARGET_CPU && t->num_cores <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    t->num_cores = n > 0 ? (int)n : 1;
  }
}

/* JSON fields: name, kind, arch, device, and the numeric limits. */
typedef struct field {
  const char *key;
  size_t off;
  char type; /* 'i' int, 'l' int64, 'd' double */
} field_t;

#define F(k, t) {#k, offsetof(tn_target_t, k), t}
static const field_t fields[] = {
    F(max_threads_per_block, 'i'), F(max_shared_memory_per_block, 'l'), F(max_registers_per_thread, 'i'),
    F(max_registers_per_block, 'l'), F(warp_size, 'i'), F(max_vector_bytes, 'i'),
    F(num_cores, 'i'), F(sm_count, 'i'), F(peak_gflops, 'd'), F(peak_gbps, 'd'), F(max_shared_memory_per_block_optin, 'l'),
    F(max_warps_per_sm, 'i'), F(max_blocks_per_sm, 'i'),
};

bool tn_target_uses_cc(tn_target_kind_t k) { return k == TN_TARGET_CPU || k == TN_TARGET_CUDA_HOST; }

int tn_target_set_cc(tn_target_t *t, const char *cc, tn_err_t *err) {
  if (!tn_target_uses_cc(t->kind))
    return tn_err_set(err, TN_EINVAL, "target %s: \"cc\" applies to cpu and cuda-host targets, not %s", t->name,
                      tn_target_kind_name(t->kind));
  if (strcmp(cc, "gcc") != 0 && strcmp(cc, "clang") != 0 && strcmp(cc, "auto") != 0)
    return tn_err_set(err, TN_EINVAL, "target %s: unknown compiler \"%s\" for \"cc\" (expected gcc, clang or auto)",
                      t->name, cc);
  snprintf(t->cc, sizeof t->cc, "%s", cc);
  return TN_OK;
}

bool tn_target_is_hopper(const tn_target_t *t) {
  if (t->kind == TN_TARGET_CUDA) return !strcmp(t->arch, "sm_90") || !strcmp(t->arch, "sm_90a");
  return t->kind == TN_TARGET_CUDA_HOST && !strcmp(t->arch, "sm_90a");
}

int64_t tn_target_shared_limit(const tn_target_t *t) {
  return TN_MAX(t->max_shared_memory_per_block, t->max_shared_memory_per_block_optin);
}

static int copy_str(char *dst, size_t cap, const cJSON *j, const char *key, bool required, tn_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!v) return required ? tn_err_set(err, TN_EINVAL, "target: missing \"%s\"", key) : TN_OK;
  if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
    return tn_err_set(err, TN_EINVAL, "target: \"%s\" must be a string of at most %zu characters", key, cap - 1);
  strcpy(dst, v->valuestring);
  return TN_OK;
}

/* Every key must be one the target uses: a misspelt or retired field would
 * otherwise be ignored without a word. */
static int check_keys(const cJSON *j, const char *name, tn_err_t *err) {
  static const char *const strs[] = {"name", "kind", "arch", "device", "cc"};
  const cJSON *v;
  cJSON_ArrayForEach(v, j) {
    bool known = false;
    for (size_t i = 0; i < TN_ARRAY_LEN(strs) && !known; i++) known = strcmp(v->string, strs[i]) == 0;
    for (size_t i = 0; i < TN_ARRAY_LEN(fields) && !known; i++) known = strcmp(v->string, fields[i].key) == 0;
    if (known) continue;
    tn_buf_t b;
    tn_buf_init(&b);
    for (size_t i = 0; i < TN_ARRAY_LEN(strs); i++) tn_buf_printf(&b, "%s, ", strs[i]);
    for (size_t i = 0; i < TN_ARRAY_LEN(fields); i++) tn_buf_printf(&b, "%s%s", i ? ", " : "", fields[i].key);
    int rc = tn_err_set(err, TN_EINVAL, "target %s: unknown field \"%s\" (the fields are %s)", name, v->string,
                        tn_buf_str(&b));
    tn_buf_free(&b);
    return rc;
  }
  return TN_OK;
}

int tn_target_from_json(const char *text, size_t len, tn_target_t *out, tn_err_t *err) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!j) {
    int line = 1;
    for (const char *p = text; end && p < end && p < text + len; p++) line += *p == '\n';
    return tn_err_set(err, TN_EINVAL, "target: not valid JSON (line %d)", line);
  }
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return tn_err_set(err, TN_EINVAL, "target: not a JSON object");
  }
  tn_target_t t;
  memset(&t, 0, sizeof t);
  char kind[16] = "";
  int rc;
  if ((rc = copy_str(t.name, sizeof t.name, j, "name", true, err)) < 0 ||
      (rc = copy_str(kind, sizeof kind, j, "kind", true, err)) < 0 ||
      (rc = copy_str(t.arch, sizeof t.arch, j, "arch", false, err)) < 0 ||
      (rc = copy_str(t.device, sizeof t.device, j, "device", false, err)) < 0)
    goto out;
  if (kind_parse(kind, &t.kind) < 0) {
    rc = tn_err_set(err, TN_EINVAL, "target: unknown kind \"%s\" (expected cpu, opencl, cuda or cuda-host)", kind);
    goto out;
  }
  if ((rc = check_keys(j, t.name, err)) < 0) goto out;
  char cc[16] = "";
  if ((rc = copy_str(cc, sizeof cc, j, "cc", false, err)) < 0) goto out;
  if ((cc[0] || tn_target_uses_cc(t.kind)) && (rc = tn_target_set_cc(&t, cc[0] ? cc : "auto", err)) < 0) goto out;
  for (size_t i = 0; i < TN_ARRAY_LEN(fields); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, fields[i].key);
    if (!v) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (fields[i].type == 'i' ? INT_MAX : 1e15)) {
      rc = tn_err_set(err, TN_EINVAL, "target %s: \"%s\" must be a non-negative number", t.name, fields[i].key);
      goto out;
    }
    char *p = (char *)&t + fields[i].off;
    if (fields[i].type == 'i') *(int *)p = (int)v->valuedouble;
    else if (fields[i].type == 'l') *(int64_t *)p = (int64_t)v->valuedouble;
    else *(double *)p = v->valuedouble;
  }
  if (t.kind == TN_TARGET_CUDA && strncmp(t.arch, "sm_", 3) != 0) {
    rc = tn_err_set(err, TN_EINVAL, "target %s: a cuda target needs \"arch\": \"sm_XX\"", t.name);
    goto out;
  }
  if (t.kind != TN_TARGET_CPU && (t.max_threads_per_block <= 0 || t.max_shared_memory_per_block <= 0)) {
    rc = tn_err_set(err, TN_EINVAL, "target %s: max_threads_per_block and max_shared_memory_per_block are required",
                    t.name);
    goto out;
  }
  fill_cpu_cores(&t);
  *out = t;
  rc = TN_OK;
out:
  cJSON_Delete(j);
  return rc;
}

char *tn_target_to_json(const tn_target_t *t) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", t->name);
  cJSON_AddStringToObject(j, "kind", tn_target_kind_name(t->kind));
  cJSON_AddStringToObject(j, "arch", t->arch);
  cJSON_AddStringToObject(j, "device", t->device);
  if (t->cc[0]) cJSON_AddStringToObject(j, "cc", t->cc);
  for (size_t i = 0; i < TN_ARRAY_LEN(fields); i++) {
    const char *p = (const char *)t + fields[i].off;
    double v = fields[i].type == 'i' ? *(const int *)p : fields[i].type == 'l' ? (double)*(const int64_t *)p
                                                                                : *(const double *)p;
    cJSON_AddNumberToObject(j, fields[i].key, v);
  }
  char *s = cJSON_Print(j);
  cJSON_Delete(j);
  return s;
}

bool tn_target_roofline(const tn_target_t *t, double flops, double bytes, double secs, tn_roofline_t *r) {
  memset(r, 0, sizeof *r);
  if (!(t->peak_gflops > 0 && t->peak_gbps > 0 && secs > 0 && flops + bytes > 0)) return false;
  r->ridge = t->peak_gflops / t->peak_gbps;
  r->intensity = bytes > 0 ? flops / bytes : INFINITY;
  r->compute_bound = r->intensity >= r->ridge;
  r->peak = r->compute_bound ? t->peak_gflops : t->peak_gbps;
  r->achieved = (r->compute_bound ? flops : bytes) / secs * 1e-9;
  r->percent = 100 * r->achieved / r->peak;
  return true;
}

void tn_roofline_text(const tn_roofline_t *r, char *buf, size_t size) {
  snprintf(buf, size, "%.1f%% of the peak %.0f %s (%s-bound: %.3g FLOP/B, ridge %.3g FLOP/B)", r->percent, r->peak,
           r->compute_bound ? "GFLOP/s" : "GB/s", r->compute_bound ? "compute" : "memory", r->intensity, r->ridge);
}

void tn_roofline_add_json(const tn_roofline_t *r, cJSON *obj) {
  cJSON_AddStringToObject(obj, "bound", r->compute_bound ? "compute" : "memory");
  if (isfinite(r->intensity)) cJSON_AddNumberToObject(obj, "intensity", r->intensity);
  else cJSON_AddNullToObject(obj, "intensity"); /* no bytes moved */
  cJSON_AddNumberToObject(obj, "ridge", r->ridge);
  cJSON_AddNumberToObject(obj, "peak", r->peak);
  cJSON_AddStringToObject(obj, "peak_unit", r->compute_bound ? "GFLOP/s" : "GB/s");
  cJSON_AddNumberToObject(obj, "achieved", r->achieved);
  cJSON_AddNumberToObject(obj, "percent_of_peak", r->percent);
}
