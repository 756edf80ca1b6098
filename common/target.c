/* target.c — the built-in target table, lookup by name (with configs/ files
 * taking precedence), and the JSON form of a target. */
#include "target.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Limits and peaks from the vendors' figures (float32 non-tensor peak, dense).
 * Shared memory: the static per-block limit (48 KiB, what __shared__ arrays
 * may hold) and what a kernel may opt into as dynamic shared memory
 * (T4 64 KiB, A100 163 KiB, H100/H200 227 KiB); kernels over 48 KiB are
 * generated with dynamic shared memory. */
static const tn_target_t builtin[] = {
    {"nvidia/tesla-t4", TN_TARGET_CUDA, "sm_75", "NVIDIA Tesla T4", 1024, 49152, 255, 65536, 32, 16, 40, 0, 8100, 320, 65536},
    {"nvidia/tesla-p100", TN_TARGET_CUDA, "sm_60", "NVIDIA Tesla P100", 1024, 49152, 255, 65536, 32, 16, 56, 0, 10600, 732, 0},
    {"nvidia/a100", TN_TARGET_CUDA, "sm_80", "NVIDIA A100", 1024, 49152, 255, 65536, 32, 16, 108, 0, 19500, 1555, 166912},
    {"nvidia/h100", TN_TARGET_CUDA, "sm_90", "NVIDIA H100 SXM", 1024, 49152, 255, 65536, 32, 16, 132, 0, 66900, 3350, 232448},
    {"nvidia/h200", TN_TARGET_CUDA, "sm_90", "NVIDIA H200 SXM", 1024, 49152, 255, 65536, 32, 16, 132, 0, 66900, 4800, 232448},
    {"opencl/pocl-cpu", TN_TARGET_OPENCL, "", "PoCL on the host CPU", 1024, 49152, 0, 0, 32, 16, 0, 0, 0, 0, 0},
    {"cpu", TN_TARGET_CPU, "native", "host CPU", 0, 0, 0, 0, 1, 32, 0, 0, 0, 0, 0},
    {"cuda-host", TN_TARGET_CUDA_HOST, "", "CUDA C run on the host CPU (checks only)", 1024, 49152, 0, 0, 32, 16, 0, 0, 0,
     0, 232448},
};

static const char *const builtin_names[] = {"cpu",         "opencl/pocl-cpu", "nvidia/tesla-t4", "nvidia/tesla-p100",
                                            "nvidia/a100", "nvidia/h100",     "nvidia/h200",     "cuda-host",
                                            NULL};

const char *const *tn_target_builtin_names(void) { return builtin_names; }

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
    F(max_registers_per_block, 'l'), F(warp_size, 'i'), F(max_vector_bytes, 'i'), F(sm_count, 'i'),
    F(num_cores, 'i'), F(peak_gflops, 'd'), F(peak_gbps, 'd'), F(max_shared_memory_per_block_optin, 'l'),
};

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

int tn_target_from_json(const char *text, size_t len, tn_target_t *out, tn_err_t *err) {
  cJSON *j = cJSON_ParseWithLength(text, len);
  if (!j || !cJSON_IsObject(j)) {
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
  for (size_t i = 0; i < TN_ARRAY_LEN(fields); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, fields[i].key);
    if (!v) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e15) {
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

int tn_target_lookup(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err) {
  if (config_dir && !strstr(name, "..")) {
    char path[1024], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s.json", config_dir, name);
    if (access(path, R_OK) == 0) {
      int rc = tn_read_file(path, 1 << 20, &text, &len, err);
      if (rc == TN_OK) rc = tn_target_from_json(text, len, out, err);
      free(text);
      if (rc < 0) return tn_err_prefix(err, "%s", path);
      return TN_OK;
    }
  }
  for (size_t i = 0; i < TN_ARRAY_LEN(builtin); i++)
    if (strcmp(builtin[i].name, name) == 0) {
      *out = builtin[i];
      fill_cpu_cores(out);
      return TN_OK;
    }
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; builtin_names[i]; i++) tn_buf_printf(&b, "%s%s", i ? ", " : "", builtin_names[i]);
  tn_err_set(err, TN_EINVAL, "unknown target \"%s\" (known: %s%s)", name, tn_buf_str(&b),
             config_dir ? ", or a JSON file under the config directory" : "");
  tn_buf_free(&b);
  return TN_EINVAL;
}
