/* result.c — the per-candidate measurement record: status names, error
 * text, median, and its JSON form for the CLI and the database. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

static const char *const status_names[] = {"ok", "build_error", "run_error", "timeout", "wrong_result", "too_slow"};
_Static_assert(TN_ARRAY_LEN(status_names) == MS_STATUS__COUNT, "a name per status");

const char *ms_status_name(ms_status_t s) {
  return (unsigned)s < MS_STATUS__COUNT ? status_names[s] : "?";
}

int ms_status_parse(const char *s, ms_status_t *out) {
  for (int i = 0; i < MS_STATUS__COUNT; i++)
    if (strcmp(s, status_names[i]) == 0) {
      *out = (ms_status_t)i;
      return TN_OK;
    }
  return TN_EINVAL;
}

void ms_result_init(ms_result_t *r) {
  memset(r, 0, sizeof *r);
  r->status = MS_OK;
  r->build.registers = -1;
  r->build.shared_bytes = r->build.spill_bytes = r->build.stack_bytes = -1;
  r->verify_error = -1;
}

void ms_result_clear(ms_result_t *r) {
  free(r->run_secs);
  free(r->profile);
  ms_result_init(r);
}

void ms_result_fail(ms_result_t *r, ms_status_t st, const char *fmt, ...) {
  r->status = st;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof r->error) memcpy(r->error + sizeof r->error - 4, "...", 4);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double ms_median(const double *xs, int n) {
  if (n <= 0) return 0;
  double *s = tn_xmalloc(sizeof *s * (size_t)n);
  memcpy(s, xs, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

static void add_known(cJSON *o, const char *key, double v) {
  if (v >= 0) cJSON_AddNumberToObject(o, key, v);
}

char *ms_result_to_json(const ms_result_t *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "status", ms_status_name(r->status));
  cJSON_AddStringToObject(j, "error", r->error);
  cJSON_AddNumberToObject(j, "median_secs", r->median_secs);
  cJSON *secs = cJSON_AddArrayToObject(j, "run_secs");
  for (int i = 0; i < r->nrepeats; i++) cJSON_AddItemToArray(secs, cJSON_CreateNumber(r->run_secs[i]));
  if (r->disturbed > 0) cJSON_AddNumberToObject(j, "disturbed", r->disturbed);
  if (r->shared) cJSON_AddBoolToObject(j, "shared", true);
  cJSON_AddNumberToObject(j, "gflops", r->gflops);
  cJSON_AddNumberToObject(j, "gbps", r->gbps);
  /* +inf (a NaN where the reference has none) is not JSON: written as 1e308,
   * read back as +inf. */
  add_known(j, "verify_error", isfinite(r->verify_error) ? r->verify_error : 1e308);
  if (r->window_start_ns > 0) {
    cJSON *w = cJSON_AddArrayToObject(j, "window_ns");
    cJSON_AddItemToArray(w, cJSON_CreateNumber((double)r->window_start_ns));
    cJSON_AddItemToArray(w, cJSON_CreateNumber((double)r->window_end_ns));
  }
  if (r->cupti_median_secs > 0) {
    cJSON_AddNumberToObject(j, "cupti_median_secs", r->cupti_median_secs);
    cJSON_AddBoolToObject(j, "times_disagree", r->times_disagree);
  }
  if (r->cupti_error[0]) cJSON_AddStringToObject(j, "cupti_error", r->cupti_error);
  cJSON *prof = r->profile ? cJSON_Parse(r->profile) : NULL;
  if (prof) cJSON_AddItemToObject(j, "profile", prof);
  cJSON *b = cJSON_AddObjectToObject(j, "build");
  cJSON_AddStringToObject(b, "compiler", r->build.compiler);
  cJSON_AddStringToObject(b, "arch", r->build.arch);
  cJSON_AddNumberToObject(b, "seconds", r->build.build_secs);
  add_known(b, "registers", r->build.registers);
  add_known(b, "shared_bytes", (double)r->build.shared_bytes);
  add_known(b, "spill_bytes", (double)r->build.spill_bytes);
  add_known(b, "stack_bytes", (double)r->build.stack_bytes);
  char *s = cJSON_Print(j);
  cJSON_Delete(j);
  return s;
}

static double num(const cJSON *o, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static double num_at(const cJSON *a, int i) {
  const cJSON *v = cJSON_GetArrayItem(a, i);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void str(const cJSON *o, const char *key, char *dst, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (cJSON_IsString(v)) snprintf(dst, size, "%s", v->valuestring);
}

int ms_result_from_json(const char *text, size_t len, ms_result_t *out, tn_err_t *err) {
  ms_result_init(out);
  cJSON *j = cJSON_ParseWithLength(text, len);
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
  int rc = TN_OK;
  if (!cJSON_IsObject(j) || !cJSON_IsString(st)) {
    rc = tn_err_set(err, TN_EINVAL, "measurement result: expected a JSON object with a \"status\" string");
  } else if (ms_status_parse(st->valuestring, &out->status) < 0) {
    rc = tn_err_set(err, TN_EINVAL, "measurement result: unknown status \"%s\" (ok, build_error, run_error, "
                    "timeout, wrong_result, too_slow)", st->valuestring);
  } else {
    str(j, "error", out->error, sizeof out->error);
    out->median_secs = num(j, "median_secs", 0);
    out->gflops = num(j, "gflops", 0);
    out->gbps = num(j, "gbps", 0);
    out->verify_error = num(j, "verify_error", -1);
    if (out->verify_error >= 1e308) out->verify_error = INFINITY;
    const cJSON *secs = cJSON_GetObjectItemCaseSensitive(j, "run_secs"), *x;
    int n = cJSON_GetArraySize(secs);
    if (n > 0) {
      out->run_secs = tn_xmalloc(sizeof(double) * (size_t)n);
      cJSON_ArrayForEach(x, secs) out->run_secs[out->nrepeats++] = cJSON_IsNumber(x) ? x->valuedouble : 0;
    }
    out->ran = n > 0 || out->verify_error >= 0;
    out->disturbed = (int)TN_MAX(num(j, "disturbed", 0), 0);
    out->shared = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "shared"));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "window_ns");
    if (cJSON_GetArraySize(w) == 2) {
      out->window_start_ns = (int64_t)num_at(w, 0);
      out->window_end_ns = (int64_t)num_at(w, 1);
    }
    out->cupti_median_secs = TN_MAX(num(j, "cupti_median_secs", 0), 0);
    out->times_disagree = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "times_disagree"));
    str(j, "cupti_error", out->cupti_error, sizeof out->cupti_error);
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(j, "profile");
    if (cJSON_IsObject(prof)) out->profile = cJSON_PrintUnformatted(prof);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "build");
    str(b, "compiler", out->build.compiler, sizeof out->build.compiler);
    str(b, "arch", out->build.arch, sizeof out->build.arch);
    out->build.build_secs = num(b, "seconds", 0);
    out->build.registers = (int)num(b, "registers", -1);
    out->build.shared_bytes = (int64_t)num(b, "shared_bytes", -1);
    out->build.spill_bytes = (int64_t)num(b, "spill_bytes", -1);
    out->build.stack_bytes = (int64_t)num(b, "stack_bytes", -1);
  }
  cJSON_Delete(j);
  return rc;
}
