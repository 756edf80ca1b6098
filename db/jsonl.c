/* jsonl.c — export of records as self-contained JSON lines and the merging
 * import (one transaction, duplicates skipped, bad lines named). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "db/db_internal.h"

/* ---- export ------------------------------------------------------------------ */

/* RECORD_COLS (RECORD_NCOLS of them) followed by these. */
#define EXPORT_COLS                                                                          \
  RECORD_COLS ", w.name, w.source, w.params, w.flops, w.bytes, t.kind, t.arch, t.json"

static void add_opt_string(cJSON *o, const char *key, const char *s) {
  if (s)
    cJSON_AddStringToObject(o, key, s);
  else
    cJSON_AddNullToObject(o, key);
}

static void add_opt_int(cJSON *o, const char *key, int v) {
  if (v >= 0)
    cJSON_AddNumberToObject(o, key, v);
  else
    cJSON_AddNullToObject(o, key);
}

/* A number in the shortest form that reads back as exactly the same double
 * (cJSON's own printing compares with a tolerance and can drop the last bits). */
static cJSON *exact_number(double d) {
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  return cJSON_CreateRaw(buf);
}

static void add_number(cJSON *o, const char *key, double d) {
  cJSON_AddItemToObject(o, key, exact_number(d));
}

/* Adds a stored JSON text as a nested value (it was validated on the way in). */
static void add_raw_json(cJSON *o, const char *key, const char *text) {
  cJSON *v = text ? cJSON_Parse(text) : NULL;
  cJSON_AddItemToObject(o, key, v ? v : cJSON_CreateObject());
}

static cJSON *export_workload(db_st_t *st, const db_record_t *r) {
  cJSON *w = cJSON_CreateObject();
  cJSON_AddStringToObject(w, "hash", r->workload_hash);
  cJSON_AddStringToObject(w, "name", db_col_str(st, RECORD_NCOLS));
  cJSON_AddStringToObject(w, "source", db_col_str(st, RECORD_NCOLS + 1));
  add_raw_json(w, "params", db_col_str(st, RECORD_NCOLS + 2));
  add_number(w, "flops", db_col_real(st, RECORD_NCOLS + 3));
  add_number(w, "bytes", db_col_real(st, RECORD_NCOLS + 4));
  return w;
}

static cJSON *export_target(db_st_t *st, const db_record_t *r) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "name", r->target_name);
  cJSON_AddStringToObject(t, "kind", db_col_str(st, RECORD_NCOLS + 5));
  cJSON_AddStringToObject(t, "arch", db_col_str(st, RECORD_NCOLS + 6));
  add_raw_json(t, "json", db_col_str(st, RECORD_NCOLS + 7));
  return t;
}

/* One export line for the current row (keys in a fixed order). */
static cJSON *export_row(db_st_t *st, tn_arena_t *a) {
  db_record_t r;
  db_read_record(st, &r, a);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "workload", export_workload(st, &r));
  cJSON_AddItemToObject(o, "target", export_target(st, &r));
  cJSON_AddStringToObject(o, "trace", r.trace);
  cJSON_AddStringToObject(o, "trace_hash", r.trace_hash);
  cJSON *runs = cJSON_AddArrayToObject(o, "run_secs");
  for (size_t i = 0; i < r.n_runs; i++) cJSON_AddItemToArray(runs, exact_number(r.run_secs[i]));
  if (isnan(r.median_secs))
    cJSON_AddNullToObject(o, "median_secs");
  else
    add_number(o, "median_secs", r.median_secs);
  cJSON_AddStringToObject(o, "status", db_status_name(r.status));
  add_opt_string(o, "error", r.error);
  add_opt_int(o, "registers", r.registers);
  add_opt_int(o, "shared_bytes", r.shared_bytes);
  add_opt_int(o, "spill_bytes", r.spill_bytes);
  add_opt_string(o, "compiler", r.compiler);
  add_opt_string(o, "toolkit_version", r.toolkit_version);
  add_opt_string(o, "arch", r.arch);
  cJSON_AddBoolToObject(o, "verified", r.verified);
  if (!isnan(r.cupti_median_secs)) {
    add_number(o, "cupti_median_secs", r.cupti_median_secs);
    cJSON_AddBoolToObject(o, "times_disagree", r.times_disagree);
  }
  add_number(o, "created", r.created);
  add_number(o, "updated", r.updated);
  return o;
}

int db_export_jsonl(db_t *db, const db_query_t *q, tn_buf_t *out, tn_err_t *err) {
  db_st_t *st = NULL;
  int rc = db_prepare_query(db, q, EXPORT_COLS, "w.hash, t.name, r.trace_hash", &st, err);
  if (rc) return rc;
  while ((rc = db_step(st)) == DB_ROW) {
    tn_arena_t *a = tn_arena_new(); /* per row: an export of any size stays small */
    cJSON *o = export_row(st, a);
    tn_arena_free(a);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line) {
      rc = TN_ENOMEM;
      break;
    }
    tn_buf_put(out, line);
    tn_buf_putc(out, '\n');
    free(line);
  }
  int ret = rc == DB_DONE ? 0
            : rc == TN_ENOMEM ? tn_err_set(err, TN_ENOMEM, "export: out of memory")
                                 : db_fail(db, err, "exporting records");
  db_finalize(st);
  return ret;
}

/* ---- import: reading one line's fields ------------------------------------- */

/* A member of an object (NULL when absent); `path` arguments below prefix
 * the key in messages ("workload." + "hash"). */
static const cJSON *field(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int want_string(const cJSON *o, const char *path, const char *key, bool optional,
                       const char **out, tn_err_t *err) {
  const cJSON *v = field(o, key);
  *out = NULL;
  if ((!v || cJSON_IsNull(v)) && optional) return 0;
  if (!cJSON_IsString(v))
    return tn_err_set(err, TN_EINVAL, "field '%s%s' must be a string%s", path, key,
                      optional ? " or null" : "");
  *out = v->valuestring;
  return 0;
}

/* Numbers: missing/null gives `dflt` when optional. */
static int want_number(const cJSON *o, const char *path, const char *key, bool optional,
                       double dflt, double *out, tn_err_t *err) {
  const cJSON *v = field(o, key);
  *out = dflt;
  if ((!v || cJSON_IsNull(v)) && optional) return 0;
  if (!cJSON_IsNumber(v))
    return tn_err_set(err, TN_EINVAL, "field '%s%s' must be a number%s", path, key,
                      optional ? " or null" : "");
  *out = v->valuedouble;
  return 0;
}

static int want_int(const cJSON *o, const char *key, int *out, tn_err_t *err) {
  double d = -1;
  int rc = want_number(o, "", key, true, -1, &d, err);
  if (rc) return rc;
  if (d != floor(d) || d < -1 || d > 2147483647.0)
    return tn_err_set(err, TN_EINVAL, "field '%s' must be a non-negative integer or null", key);
  *out = (int)d;
  return 0;
}

/* A nested JSON object field as compact text (malloc'ed; "{}" when absent). */
static int want_object_text(const cJSON *o, const char *path, const char *key, char **out,
                            tn_err_t *err) {
  const cJSON *v = field(o, key);
  *out = NULL;
  if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v))
    return tn_err_set(err, TN_EINVAL, "field '%s%s' must be a JSON object", path, key);
  *out = v && cJSON_IsObject(v) ? cJSON_PrintUnformatted(v) : tn_xstrdup("{}");
  return *out ? 0 : tn_err_set(err, TN_ENOMEM, "out of memory");
}

/* The line's workload, read into it (strings owned by line; *params
 * malloc'ed) and added when missing. */
static int import_workload(db_t *db, const cJSON *line, int64_t *id, db_import_item_t *it, char **params,
                           db_import_stats_t *s, tn_err_t *err) {
  const cJSON *o = field(line, "workload");
  if (!cJSON_IsObject(o)) return tn_err_set(err, TN_EINVAL, "field 'workload' must be an object");
  db_workload_t w = {0};
  int rc = want_string(o, "workload.", "hash", false, &w.hash, err);
  if (!rc) rc = want_string(o, "workload.", "name", false, &w.name, err);
  if (!rc) rc = want_string(o, "workload.", "source", false, &w.source, err);
  if (!rc) rc = want_number(o, "workload.", "flops", true, 0, &w.flops, err);
  if (!rc) rc = want_number(o, "workload.", "bytes", true, 0, &w.bytes, err);
  if (!rc) rc = want_object_text(o, "workload.", "params", params, err);
  w.params = *params;
  it->workload_hash = w.hash, it->workload_name = w.name, it->workload_source = w.source;
  it->workload_params = *params;
  bool added = false;
  if (!rc) rc = db_workload_ensure(db, &w, id, &added, err);
  s->workloads_added += added;
  return rc;
}

static int import_target(db_t *db, const cJSON *line, int64_t *id, db_import_item_t *it, db_import_stats_t *s,
                         tn_err_t *err) {
  const cJSON *o = field(line, "target");
  if (!cJSON_IsObject(o)) return tn_err_set(err, TN_EINVAL, "field 'target' must be an object");
  db_target_t t = {0};
  char *json = NULL;
  int rc = want_string(o, "target.", "name", false, &t.name, err);
  it->target_name = t.name;
  if (!rc) rc = want_string(o, "target.", "kind", false, &t.kind, err);
  if (!rc) rc = want_string(o, "target.", "arch", true, &t.arch, err);
  if (!rc) rc = want_object_text(o, "target.", "json", &json, err);
  t.json = json;
  bool added = false;
  if (!rc) rc = db_target_put(db, &t, false, id, &added, err);
  free(json);
  s->targets_added += added;
  return rc;
}

/* run_secs: an array of numbers (malloc'ed copy in *out). */
static int read_runs(const cJSON *line, double **out, size_t *n, tn_err_t *err) {
  const cJSON *a = field(line, "run_secs");
  *out = NULL;
  *n = 0;
  if (!a || cJSON_IsNull(a)) return 0;
  if (!cJSON_IsArray(a)) return tn_err_set(err, TN_EINVAL, "field 'run_secs' must be an array");
  *out = tn_xmalloc(sizeof(double) * (size_t)(cJSON_GetArraySize(a) + 1));
  const cJSON *e;
  cJSON_ArrayForEach(e, a) {
    if (!cJSON_IsNumber(e))
      return tn_err_set(err, TN_EINVAL, "field 'run_secs' must hold numbers only");
    (*out)[(*n)++] = e->valuedouble;
  }
  return 0;
}

/* The record's own fields (not workload/target). */
static int read_record_fields(const cJSON *line, db_record_t *r, tn_err_t *err) {
  const char *status = NULL, *hash = NULL;
  const cJSON *verified = field(line, "verified");
  int rc = want_string(line, "", "trace", false, &r->trace, err);
  if (!rc) rc = want_string(line, "", "trace_hash", true, &hash, err);
  if (!rc) rc = want_string(line, "", "status", false, &status, err);
  if (!rc) rc = db_status_parse(status, &r->status, err);
  if (!rc) rc = want_number(line, "", "median_secs", true, NAN, &r->median_secs, err);
  if (!rc) rc = want_string(line, "", "error", true, &r->error, err);
  if (!rc) rc = want_int(line, "registers", &r->registers, err);
  if (!rc) rc = want_int(line, "shared_bytes", &r->shared_bytes, err);
  if (!rc) rc = want_int(line, "spill_bytes", &r->spill_bytes, err);
  if (!rc) rc = want_string(line, "", "compiler", true, &r->compiler, err);
  if (!rc) rc = want_string(line, "", "toolkit_version", true, &r->toolkit_version, err);
  if (!rc) rc = want_string(line, "", "arch", true, &r->arch, err);
  if (!rc && verified && !cJSON_IsBool(verified))
    rc = tn_err_set(err, TN_EINVAL, "field 'verified' must be true or false");
  r->verified = cJSON_IsTrue(verified);
  const cJSON *disagree = field(line, "times_disagree");
  if (!rc) rc = want_number(line, "", "cupti_median_secs", true, NAN, &r->cupti_median_secs, err);
  if (!rc && disagree && !cJSON_IsBool(disagree))
    rc = tn_err_set(err, TN_EINVAL, "field 'times_disagree' must be true or false");
  r->times_disagree = cJSON_IsTrue(disagree);
  double now = db_now();
  if (!rc) rc = want_number(line, "", "created", true, now, &r->created, err);
  if (!rc) rc = want_number(line, "", "updated", true, r->created, &r->updated, err);
  if (rc || !hash) return rc;
  char computed[TN_ID_SIZE];
  db_trace_hash(r->trace, computed);
  if (strcmp(hash, computed) != 0)
    return tn_err_set(err, TN_EINVAL, "trace_hash %s does not match the trace (its hash is %s); "
                      "the line was altered", hash, computed);
  return 0;
}

typedef struct import_ctx {
  db_import_check_fn check;
  void *check_ctx;
} import_ctx_t;

static int import_line(db_t *db, const cJSON *line, const import_ctx_t *ic, db_import_stats_t *s, tn_err_t *err) {
  if (!cJSON_IsObject(line)) return tn_err_set(err, TN_EINVAL, "expected a JSON object");
  db_record_t r;
  db_record_init(&r);
  double *runs = NULL;
  char *params = NULL;
  db_import_item_t it = {0};
  int rc = import_workload(db, line, &r.workload_id, &it, &params, s, err);
  if (!rc) rc = import_target(db, line, &r.target_id, &it, s, err);
  if (!rc) rc = read_runs(line, &runs, &r.n_runs, err);
  r.run_secs = runs;
  if (!rc) rc = read_record_fields(line, &r, err);
  it.trace = r.trace;
  if (!rc && ic->check) rc = ic->check(ic->check_ctx, &it, err);
  if (!rc) rc = db_record_insert(db, &r, "record", err);
  free(runs);
  free(params);
  if (!rc) {
    s->inserted += !r.duplicate;
    s->duplicates += r.duplicate;
  }
  return rc;
}

/* ---- import: the loop over lines ---------------------------------------------- */

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
  return true;
}

static int parse_and_import(db_t *db, const char *s, size_t n, const import_ctx_t *ic, db_import_stats_t *st,
                            tn_err_t *err) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
  if (!j) {
    size_t col = end && end >= s && end <= s + n ? (size_t)(end - s) + 1 : 1;
    return tn_err_set(err, TN_EINVAL, "invalid JSON near column %zu", col);
  }
  int rc = import_line(db, j, ic, st, err);
  cJSON_Delete(j);
  return rc;
}

int db_import_jsonl(db_t *db, const char *text, size_t len, db_import_stats_t *stats,
                    tn_err_t *err) {
  return db_import_jsonl_checked(db, text, len, NULL, NULL, stats, err);
}

int db_import_jsonl_checked(db_t *db, const char *text, size_t len, db_import_check_fn check, void *check_ctx,
                            db_import_stats_t *stats, tn_err_t *err) {
  import_ctx_t ic = {check, check_ctx};
  db_import_stats_t local;
  db_import_stats_t *s = stats ? stats : &local;
  memset(s, 0, sizeof *s);
  int rc = db_tx_begin(db, err);
  if (rc) return tn_err_prefix(err, "import");
  size_t lineno = 0;
  for (size_t pos = 0; pos < len && !rc;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    lineno++;
    if (!blank(text + pos, n)) {
      s->lines++;
      rc = parse_and_import(db, text + pos, n, &ic, s, err);
      if (rc) {
        tn_err_prefix(err, "line %zu", lineno);
        if (err) err->line = (int)lineno;
      }
    }
    pos += n + 1;
  }
  if (!rc) return db_tx_commit(db, err);
  db_tx_rollback(db);
  if (stats) memset(stats, 0, sizeof *stats);
  return rc;
}
