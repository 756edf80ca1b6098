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

