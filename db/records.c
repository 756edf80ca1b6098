/* records.c — workloads, targets and measured records: upserts, the batch
 * insert with trace-hash dedup, record queries and the per-target top-k. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "db/db_internal.h"

/* ---- workloads ------------------------------------------------------------ */

static int check_workload(const db_workload_t *w, tn_err_t *err) {
  if (!tn_id_valid(w->hash))
    return tn_err_set(err, TN_EINVAL,
                      "workload hash '%.80s' is not a structural hash (%d lower-case hex digits)",
                      w->hash ? w->hash : "(null)", TN_ID_HEX);
  if (!w->name || !w->source)
    return tn_err_set(err, TN_EINVAL, "workload %s: a name and source text are required",
                      w->hash);
  if (!isfinite(w->flops) || w->flops < 0 || !isfinite(w->bytes) || w->bytes < 0)
    return tn_err_set(err, TN_EINVAL, "workload %s: flops and bytes must be finite and >= 0",
                      w->hash);
  return 0;
}

static const char SQL_WORKLOAD_INSERT[] =
    "INSERT INTO workloads (hash, name, source, params, flops, bytes, created)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (hash) DO NOTHING";
static const char SQL_WORKLOAD_ID[] = "SELECT id FROM workloads WHERE hash = ?1";

/* Looks up the id of a row by one text key with a cached statement. */
static int lookup_id(db_t *db, const char *sql, const char *key, int64_t *id, bool *found,
                     const char *op, tn_err_t *err) {
  db_st_t *st = db_stmt(db, sql, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, key);
  int rc = db_step(st), ret = 0;
  *found = rc == DB_ROW;
  if (rc == DB_ROW)
    *id = db_col_int(st, 0);
  else if (rc != DB_DONE)
    ret = db_fail(db, err, op);
  db_reset(st);
  return ret;
}

int db_workload_ensure(db_t *db, const db_workload_t *w, int64_t *id, bool *added, tn_err_t *err) {
  int rc = check_workload(w, err);
  if (rc) return rc;
  char *params = NULL;
  rc = db_canon_object(w->params, "workload params", &params, err);
  if (rc) return rc;
  db_st_t *st = db_stmt(db, SQL_WORKLOAD_INSERT, err);
  if (!st) {
    free(params);
    return err ? err->code : TN_EIO;
  }
  db_bind_text(st, 1, w->hash);
  db_bind_text(st, 2, w->name);
  db_bind_text(st, 3, w->source);
  db_bind_text(st, 4, params);
  db_bind_real(st, 5, w->flops);
  db_bind_real(st, 6, w->bytes);
  db_bind_real(st, 7, db_now());
  free(params);
  rc = db_step_done(db, st, "adding a workload", err);
  if (rc) return rc;
  if (added) *added = db_changes(db) > 0;
  int64_t got = 0;
  bool found = false;
  rc = lookup_id(db, SQL_WORKLOAD_ID, w->hash, &got, &found, "looking up a workload", err);
  if (!rc && !found)
    rc = tn_err_set(err, TN_EIO, "workload %s vanished right after it was added", w->hash);
  if (!rc && id) *id = got;
  return rc;
}

int db_workload_upsert(db_t *db, const db_workload_t *w, int64_t *id, tn_err_t *err) {
  return db_workload_ensure(db, w, id, NULL, err);
}

#define WORKLOAD_COLS                                                                       \
  "w.id, w.hash, w.name, w.source, w.params, w.flops, w.bytes, w.created,"                \
  " (SELECT count(*) FROM records r WHERE r.workload_id = w.id)"

static void read_workload(db_st_t *st, db_workload_t *w, tn_arena_t *a) {
  w->id = db_col_int(st, 0);
  w->hash = db_col_text(st, 1, a);
  w->name = db_col_text(st, 2, a);
  w->source = db_col_text(st, 3, a);
  w->params = db_col_text(st, 4, a);
  w->flops = db_col_real(st, 5);
  w->bytes = db_col_real(st, 6);
  w->created = db_col_real(st, 7);
  w->n_records = db_col_int(st, 8);
}

static const char SQL_WORKLOAD_GET[] =
    "SELECT " WORKLOAD_COLS " FROM workloads w WHERE w.hash = ?1";

int db_workload_get(db_t *db, const char *hash, db_workload_t *out, tn_arena_t *arena,
                    tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_WORKLOAD_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, hash);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW)
    read_workload(st, out, arena);
  else if (rc == DB_DONE)
    ret = tn_err_set(err, TN_EINVAL, "no workload with hash '%s' in the database",
                     hash ? hash : "(null)");
  else
    ret = db_fail(db, err, "reading a workload");
  db_reset(st);
  return ret;
}

/* Hashes from the prefix up to (not including) the prefix followed by 'g':
 * every hex string that starts with it, through the hash column's index. */
static const char SQL_WORKLOAD_PREFIX[] =
    "SELECT hash FROM workloads WHERE hash >= ?1 AND hash < ?2 ORDER BY hash LIMIT 2";

int db_workload_resolve(db_t *db, const char *prefix, char out[TN_ID_SIZE], bool *found, tn_err_t *err) {
  out[0] = 0;
  *found = false;
  if (!tn_id_prefix_valid(prefix))
    return tn_err_set(err, TN_EINVAL, "'%.80s' is not a workload hash: %d to %d lower-case hex digits",
                      prefix ? prefix : "(null)", TN_ID_SHOWN, TN_ID_HEX);
  if (strlen(prefix) == TN_ID_HEX) {
    memcpy(out, prefix, TN_ID_SIZE);
    *found = true;
    return 0;
  }
  char upper[TN_ID_SIZE + 1];
  snprintf(upper, sizeof upper, "%sg", prefix);
  db_st_t *st = db_stmt(db, SQL_WORKLOAD_PREFIX, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, prefix);
  db_bind_text(st, 2, upper);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW) {
    snprintf(out, TN_ID_SIZE, "%s", db_col_str(st, 0));
    *found = true;
    rc = db_step(st);
    if (rc == DB_ROW)
      ret = tn_err_set(err, TN_ESTATE, "hash prefix %s names two workloads, %s and %s: give more digits", prefix,
                       out, db_col_str(st, 0));
  }
  if (!ret && rc != DB_ROW && rc != DB_DONE) ret = db_fail(db, err, "looking up a workload hash prefix");
  db_reset(st);
  if (ret) out[0] = 0, *found = false;
  return ret;
}

/* Steps a query, growing *items (element size `size`) through `read` for
 * each row.  Shared by every list function. */
typedef void (*row_reader_fn)(db_st_t *st, void *item, tn_arena_t *a);

static int collect_rows(db_t *db, db_st_t *st, size_t size, row_reader_fn read,
                        void **items, size_t *n, tn_arena_t *a, const char *op, tn_err_t *err) {
  size_t cap = 0;
  char *buf = NULL;
  int rc;
  *n = 0;
  while ((rc = db_step(st)) == DB_ROW) {
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      char *grown = tn_arena_alloc(a, cap * size);
      if (buf) memcpy(grown, buf, *n * size);
      buf = grown;
    }
    read(st, buf + *n * size, a);
    (*n)++;
  }
  *items = buf;
  return rc == DB_DONE ? 0 : db_fail(db, err, op);
}

static void read_workload_row(db_st_t *st, void *item, tn_arena_t *a) {
  read_workload(st, item, a);
}

static const char SQL_WORKLOADS_LIST[] =
    "SELECT " WORKLOAD_COLS " FROM workloads w ORDER BY w.hash LIMIT ?1 OFFSET ?2";

int db_workloads_list(db_t *db, size_t limit, size_t offset, db_workloads_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_WORKLOADS_LIST, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, db_sql_limit(limit));
  db_bind_int(st, 2, (int64_t)offset);
  out->arena = tn_arena_new();
  void *items = NULL;
  int rc = collect_rows(db, st, sizeof(db_workload_t), read_workload_row, &items, &out->n,
                        out->arena, "listing workloads", err);
  out->items = items;
  db_reset(st);
  if (rc) db_workloads_free(out);
  return rc;
}

void db_workloads_free(db_workloads_t *w) {
  tn_arena_free(w->arena);
  memset(w, 0, sizeof *w);
}

/* ---- targets ---------------------------------------------------------------- */

static const char SQL_TARGET_REPLACE[] =
    "INSERT INTO targets (name, kind, arch, json, created) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, arch = excluded.arch,"
    " json = excluded.json WHERE targets.kind <> excluded.kind OR targets.arch <> excluded.arch"
    " OR targets.json <> excluded.json";
static const char SQL_TARGET_KEEP[] =
    "INSERT INTO targets (name, kind, arch, json, created) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (name) DO NOTHING";
static const char SQL_TARGET_ID[] = "SELECT id FROM targets WHERE name = ?1";

int db_target_put(db_t *db, const db_target_t *t, bool replace, int64_t *id, bool *added,
                  tn_err_t *err) {
  if (!t->name || !t->name[0] || !t->kind || !t->kind[0])
    return tn_err_set(err, TN_EINVAL, "a target needs a name and a kind (cuda, opencl, cpu)");
  int64_t old = 0;
  bool existed = false;
  int rc = lookup_id(db, SQL_TARGET_ID, t->name, &old, &existed, "looking up a target", err);
  if (rc) return rc;
  char *json = NULL;
  rc = db_canon_object(t->json, "target json", &json, err);
  if (rc) return rc;
  db_st_t *st = db_stmt(db, replace ? SQL_TARGET_REPLACE : SQL_TARGET_KEEP, err);
  if (!st) {
    free(json);
    return err ? err->code : TN_EIO;
  }
  db_bind_text(st, 1, t->name);
  db_bind_text(st, 2, t->kind);
  db_bind_text(st, 3, t->arch ? t->arch : "");
  db_bind_text(st, 4, json);
  db_bind_real(st, 5, db_now());
  free(json);
  rc = db_step_done(db, st, "adding a target", err);
  if (rc) return rc;
  bool found = false;
  rc = lookup_id(db, SQL_TARGET_ID, t->name, &old, &found, "looking up a target", err);
  if (!rc && !found)
    rc = tn_err_set(err, TN_EIO, "target '%s' vanished right after it was added", t->name);
  if (!rc && id) *id = old;
  if (added) *added = !existed;
  return rc;
}

int db_target_upsert(db_t *db, const db_target_t *t, int64_t *id, tn_err_t *err) {
  return db_target_put(db, t, true, id, NULL, err);
}

static void read_target_row(db_st_t *st, void *item, tn_arena_t *a) {
  db_target_t *t = item;
  t->id = db_col_int(st, 0);
  t->name = db_col_text(st, 1, a);
  t->kind = db_col_text(st, 2, a);
  t->arch = db_col_text(st, 3, a);
  t->json = db_col_text(st, 4, a);
}

static const char SQL_TARGETS_LIST[] =
    "SELECT id, name, kind, arch, json FROM targets ORDER BY name";

int db_targets_list(db_t *db, db_targets_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_TARGETS_LIST, err);
  if (!st) return err ? err->code : TN_EIO;
  out->arena = tn_arena_new();
  void *items = NULL;
  int rc = collect_rows(db, st, sizeof(db_target_t), read_target_row, &items, &out->n,
                        out->arena, "listing targets", err);
  out->items = items;
  db_reset(st);
  if (rc) db_targets_free(out);
  return rc;
}

void db_targets_free(db_targets_t *t) {
  tn_arena_free(t->arena);
  memset(t, 0, sizeof *t);
}

/* ---- record helpers ------------------------------------------------------ */

static const char *const status_names[] = {"ok", "build_error", "run_error", "timeout",
                                           "wrong_result", "too_slow"};

const char *db_status_name(db_status_t s) {
  return (unsigned)s < TN_ARRAY_LEN(status_names) ? status_names[s] : "unknown";
}

int db_status_parse(const char *name, db_status_t *out, tn_err_t *err) {
  for (size_t i = 0; name && i < TN_ARRAY_LEN(status_names); i++) {
    if (strcmp(name, status_names[i]) == 0) {
      *out = (db_status_t)i;
      return 0;
    }
  }
  return tn_err_set(err, TN_EINVAL,
                    "unknown record status '%s' (valid: ok, build_error, run_error, timeout, "
                    "wrong_result, too_slow)",
                    name ? name : "(null)");
}

void db_record_init(db_record_t *r) {
  memset(r, 0, sizeof *r);
  r->median_secs = r->cupti_median_secs = NAN;
  r->status = DB_STATUS_OK;
  r->registers = r->shared_bytes = r->spill_bytes = -1;
}

void db_trace_hash(const char *trace, char out[TN_ID_SIZE]) {
  tn_id_of(TN_ID_TRACE, trace ? trace : "", trace ? strlen(trace) : 0, out);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double db_median(const double *v, size_t n) {
  if (n == 0) return NAN;
  double *s = tn_xmalloc(n * sizeof *s);
  memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

char *db_run_secs_json(const double *v, size_t n) {
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_putc(&b, '[');
  for (size_t i = 0; i < n; i++) tn_buf_printf(&b, "%s%.17g", i ? "," : "", v[i]);
  tn_buf_putc(&b, ']');
  return tn_buf_take(&b);
}

static int check_record(const db_record_t *r, const char *where, tn_err_t *err) {
  if ((unsigned)r->status >= TN_ARRAY_LEN(status_names))
    return tn_err_set(err, TN_EINVAL, "%s: status %d is not a db_status_t", where, (int)r->status);
  if (!r->trace) return tn_err_set(err, TN_EINVAL, "%s: no trace", where);
  cJSON *j = cJSON_Parse(r->trace);
  cJSON_Delete(j);
  if (!j) return tn_err_set(err, TN_EINVAL, "%s: the trace is not valid JSON", where);
  if (r->n_runs && !r->run_secs)
    return tn_err_set(err, TN_EINVAL, "%s: n_runs is %zu but run_secs is NULL", where, r->n_runs);
  for (size_t i = 0; i < r->n_runs; i++)
    if (!isfinite(r->run_secs[i]) || r->run_secs[i] < 0)
      return tn_err_set(err, TN_EINVAL, "%s: run %zu took %g s (need a finite time >= 0)", where,
                        i, r->run_secs[i]);
  if (!isnan(r->median_secs) && (!isfinite(r->median_secs) || r->median_secs < 0))
    return tn_err_set(err, TN_EINVAL, "%s: median %g s is not a finite time >= 0", where,
                      r->median_secs);
  if (!isnan(r->cupti_median_secs) && (!isfinite(r->cupti_median_secs) || r->cupti_median_secs < 0))
    return tn_err_set(err, TN_EINVAL, "%s: CUPTI median %g s is not a finite time >= 0", where,
                      r->cupti_median_secs);
  if (r->status == DB_STATUS_OK && isnan(r->median_secs))
    return tn_err_set(err, TN_EINVAL, "%s: an ok record needs a median time", where);
  if (r->verified && r->status != DB_STATUS_OK)
    return tn_err_set(err, TN_EINVAL, "%s: only ok records can be verified (status is %s)", where,
                      status_names[r->status]);
  return 0;
}

static const char SQL_REFS_EXIST[] =
    "SELECT EXISTS (SELECT 1 FROM workloads WHERE id = ?1), "
    "EXISTS (SELECT 1 FROM targets WHERE id = ?2)";

/* A clear message for a record that names a workload or target not in the
 * database (rather than SQLite's bare "FOREIGN KEY constraint failed"). */
static int check_refs(db_t *db, const db_record_t *r, const char *where, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_REFS_EXIST, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, r->workload_id);
  db_bind_int(st, 2, r->target_id);
  int rc = db_step(st), ret = 0;
  if (rc != DB_ROW)
    ret = db_fail(db, err, "checking a record's workload and target");
  else if (!db_col_int(st, 0))
    ret = tn_err_set(err, TN_EINVAL, "%s: unknown workload id %" PRId64
                     " (add the workload with db_workload_upsert first)", where, r->workload_id);
  else if (!db_col_int(st, 1))
    ret = tn_err_set(err, TN_EINVAL, "%s: unknown target id %" PRId64
                     " (add the target with db_target_upsert first)", where, r->target_id);
  db_reset(st);
  return ret;
}

static const char SQL_RECORD_INSERT[] =
    "INSERT INTO records (workload_id, target_id, trace, trace_hash, run_secs, median_secs,"
    " status, error, registers, shared_bytes, spill_bytes, compiler, toolkit_version, arch,"
    " verified, created, updated, cupti_median_secs, times_disagree)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
    " ON CONFLICT (workload_id, target_id, trace_hash) DO NOTHING RETURNING id";

static void bind_record(db_st_t *st, const db_record_t *r, const char *run_secs) {
  db_bind_int(st, 1, r->workload_id);
  db_bind_int(st, 2, r->target_id);
  db_bind_text(st, 3, r->trace);
  db_bind_text(st, 4, r->trace_hash);
  db_bind_text(st, 5, run_secs);
  db_bind_opt_real(st, 6, r->median_secs);
  db_bind_text(st, 7, status_names[r->status]);
  db_bind_text(st, 8, r->error);
  db_bind_opt_int(st, 9, r->registers);
  db_bind_opt_int(st, 10, r->shared_bytes);
  db_bind_opt_int(st, 11, r->spill_bytes);
  db_bind_text(st, 12, r->compiler);
  db_bind_text(st, 13, r->toolkit_version);
  db_bind_text(st, 14, r->arch);
  db_bind_int(st, 15, r->verified);
  db_bind_real(st, 16, r->created);
  db_bind_real(st, 17, r->updated);
  db_bind_opt_real(st, 18, r->cupti_median_secs);
  db_bind_int(st, 19, r->times_disagree);
}

int db_record_insert(db_t *db, db_record_t *r, const char *where, tn_err_t *err) {
  r->id = 0;
  r->duplicate = false;
  int rc = check_record(r, where, err);
  if (!rc) rc = check_refs(db, r, where, err);
  if (rc) return rc;
  db_trace_hash(r->trace, r->trace_hash);
  db_st_t *st = db_stmt(db, SQL_RECORD_INSERT, err);
  if (!st) return err ? err->code : TN_EIO;
  char *runs = db_run_secs_json(r->run_secs, r->n_runs);
  bind_record(st, r, runs);
  free(runs);
  rc = db_step(st);
  if (rc == DB_ROW) {
    r->id = db_col_int(st, 0);
    rc = db_step(st); /* finishes the statement: the row is written */
  } else {
    r->duplicate = rc == DB_DONE;
  }
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, where);
  db_reset(st);
  return ret;
}

int db_record_add_batch(db_t *db, db_record_t *recs, size_t n, db_batch_stats_t *stats,
                        tn_err_t *err) {
  if (stats) memset(stats, 0, sizeof *stats);
  int rc = db_tx_begin(db, err);
  if (rc) return tn_err_prefix(err, "adding a batch of %zu records", n);
  double now = db_now();
  size_t dups = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    char where[48];
    snprintf(where, sizeof where, "record %zu of the batch", i);
    recs[i].created = recs[i].updated = now;
    rc = db_record_insert(db, &recs[i], where, err);
    dups += !rc && recs[i].duplicate;
  }
  if (!rc) rc = db_tx_commit(db, err);
  else db_tx_rollback(db);
  if (rc) {
    for (size_t i = 0; i < n; i++) recs[i].id = 0;
    return rc;
  }
  if (stats) {
    stats->inserted = n - dups;
    stats->duplicates = dups;
  }
  return 0;
}

static const char SQL_RECORD_EXISTS[] =
    "SELECT EXISTS (SELECT 1 FROM records WHERE workload_id = ?1 AND target_id = ?2"
    " AND trace_hash = ?3)";

int db_record_exists(db_t *db, int64_t workload_id, int64_t target_id, const char *trace_hash,
                     bool *exists, tn_err_t *err) {
  *exists = false;
  db_st_t *st = db_stmt(db, SQL_RECORD_EXISTS, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, workload_id);
  db_bind_int(st, 2, target_id);
  db_bind_text(st, 3, trace_hash);
  int rc = db_step(st);
  if (rc == DB_ROW) *exists = db_col_int(st, 0) != 0;
  int ret = rc == DB_ROW ? 0 : db_fail(db, err, "looking up a trace hash");
  db_reset(st);
  return ret;
}

static const char SQL_RECORD_VERIFY[] =
    "UPDATE records SET verified = ?2, updated = ?3 WHERE id = ?1 AND (?2 = 0 OR status = 'ok')";
static const char SQL_RECORD_STATUS[] = "SELECT status FROM records WHERE id = ?1";

int db_record_set_verified(db_t *db, int64_t record_id, bool verified, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_RECORD_VERIFY, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, record_id);
  db_bind_int(st, 2, verified);
  db_bind_real(st, 3, db_now());
  int rc = db_step_done(db, st, "marking a record verified", err);
  if (rc || db_changes(db) > 0) return rc;
  /* Nothing changed: say whether the record is missing or not ok. */
  st = db_stmt(db, SQL_RECORD_STATUS, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, record_id);
  if (db_step(st) == DB_ROW)
    rc = tn_err_set(err, TN_EINVAL, "record %" PRId64 " has status %s; only ok records can be "
                    "verified", record_id, db_col_str(st, 0));
  else
    rc = tn_err_set(err, TN_EINVAL, "no record with id %" PRId64, record_id);
  db_reset(st);
  return rc;
}

static const char SQL_RECORD_CUPTI[] =
    "UPDATE records SET cupti_median_secs = ?2, times_disagree = ?3, updated = ?4 WHERE id = ?1 AND status = 'ok'";

int db_record_set_cupti(db_t *db, int64_t record_id, double cupti_median_secs, bool times_disagree, tn_err_t *err) {
  if (!isnan(cupti_median_secs) && (!isfinite(cupti_median_secs) || cupti_median_secs < 0))
    return tn_err_set(err, TN_EINVAL, "record %" PRId64 ": CUPTI median %g s is not a finite time >= 0", record_id,
                      cupti_median_secs);
  db_st_t *st = db_stmt(db, SQL_RECORD_CUPTI, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, record_id);
  db_bind_opt_real(st, 2, cupti_median_secs);
  db_bind_int(st, 3, times_disagree && !isnan(cupti_median_secs));
  db_bind_real(st, 4, db_now());
  int rc = db_step_done(db, st, "setting a record's CUPTI time", err);
  if (!rc && db_changes(db) == 0)
    rc = tn_err_set(err, TN_EINVAL, "no ok record with id %" PRId64 " (only ok records have times)", record_id);
  return rc;
}

static const char SQL_RECORD_TIMES[] =
    "UPDATE records SET run_secs = ?2, median_secs = ?3, updated = ?4 WHERE id = ?1 AND status = 'ok'";

int db_record_set_times(db_t *db, int64_t record_id, const double *run_secs, size_t n, double median_secs,
                        tn_err_t *err) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(run_secs[i]) || run_secs[i] < 0)
      return tn_err_set(err, TN_EINVAL, "record %" PRId64 ": run %zu took %g s (need a finite time >= 0)",
                        record_id, i, run_secs[i]);
  if (n == 0 || !isfinite(median_secs) || median_secs <= 0)
    return tn_err_set(err, TN_EINVAL, "record %" PRId64 ": new times need at least one run and a median > 0",
                      record_id);
  db_st_t *st = db_stmt(db, SQL_RECORD_TIMES, err);
  if (!st) return err ? err->code : TN_EIO;
  char *runs = db_run_secs_json(run_secs, n);
  db_bind_int(st, 1, record_id);
  db_bind_text(st, 2, runs);
  db_bind_real(st, 3, median_secs);
  db_bind_real(st, 4, db_now());
  free(runs);
  int rc = db_step_done(db, st, "replacing a record's times", err);
  if (!rc && db_changes(db) == 0)
    rc = tn_err_set(err, TN_EINVAL, "no ok record with id %" PRId64 " (only ok records have times)", record_id);
  return rc;
}

/* ---- record queries ------------------------------------------------------- */

const double *db_read_run_secs(const char *text, size_t *n, tn_arena_t *a) {
  *n = 0;
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  int len = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : 0;
  double *v = len ? TN_NEWN(a, double, len) : NULL;
  const cJSON *e;
  cJSON_ArrayForEach(e, j) {
    if (cJSON_IsNumber(e)) v[(*n)++] = e->valuedouble;
  }
  cJSON_Delete(j);
  return v;
}

static void read_record(db_st_t *st, db_record_t *r, bool runs_as_text, tn_arena_t *a);

void db_read_record(db_st_t *st, void *item, tn_arena_t *a) { read_record(st, item, false, a); }

void db_read_record_text(db_st_t *st, void *item, tn_arena_t *a) { read_record(st, item, true, a); }

void db_set_run_secs_text(db_t *db, bool text) { db->run_secs_text = text; }

static void read_record(db_st_t *st, db_record_t *r, bool runs_as_text, tn_arena_t *a) {
  db_record_init(r);
  r->id = db_col_int(st, 0);
  r->workload_id = db_col_int(st, 1);
  r->target_id = db_col_int(st, 2);
  r->workload_hash = db_col_text(st, 3, a);
  r->target_name = db_col_text(st, 4, a);
  r->trace = db_col_text(st, 5, a);
  const char *h = db_col_str(st, 6);
  snprintf(r->trace_hash, sizeof r->trace_hash, "%s", h ? h : "");
  if (runs_as_text) r->run_secs_text = db_col_text(st, 7, a);
  else r->run_secs = db_read_run_secs(db_col_str(st, 7), &r->n_runs, a);
  r->median_secs = db_col_opt_real(st, 8);
  db_status_parse(db_col_str(st, 9), &r->status, NULL);
  r->error = db_col_text(st, 10, a);
  r->registers = db_col_opt_int(st, 11);
  r->shared_bytes = db_col_opt_int(st, 12);
  r->spill_bytes = db_col_opt_int(st, 13);
  r->compiler = db_col_text(st, 14, a);
  r->toolkit_version = db_col_text(st, 15, a);
  r->arch = db_col_text(st, 16, a);
  r->verified = db_col_int(st, 17) != 0;
  r->created = db_col_real(st, 18);
  r->updated = db_col_real(st, 19);
  r->cupti_median_secs = db_col_opt_real(st, 20);
  r->times_disagree = db_col_int(st, 21) != 0;
}

static const char SQL_RECORD_GET[] = "SELECT " RECORD_COLS RECORD_FROM " WHERE r.id = ?1";

int db_record_get(db_t *db, int64_t id, db_record_t *out, tn_arena_t *arena, tn_err_t *err) {
  db_record_init(out);
  db_st_t *st = db_stmt(db, SQL_RECORD_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, id);
  int rc = db_step(st), ret = 0;
  if (rc == DB_ROW)
    (db->run_secs_text ? db_read_record_text : db_read_record)(st, out, arena);
  else if (rc == DB_DONE)
    ret = tn_err_set(err, TN_EINVAL, "no record with id %" PRId64 " in the database", id);
  else
    ret = db_fail(db, err, "reading a record");
  db_reset(st);
  return ret;
}

db_query_t db_query_all(void) { return (db_query_t){.status = DB_STATUS_ANY}; }

int db_prepare_query(db_t *db, const db_query_t *q, const char *cols, const char *order,
                     db_st_t **out, tn_err_t *err) {
  db_query_t all = db_query_all();
  if (!q) q = &all;
  if (q->status != DB_STATUS_ANY && (unsigned)q->status >= TN_ARRAY_LEN(status_names))
    return tn_err_set(err, TN_EINVAL, "query: status %d is not a db_status_t", q->status);
  /* the filters that apply, numbered in order (?1, ?2, ...) */
  const char *texts[3];
  int n = 0;
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_printf(&b, "SELECT %s" RECORD_FROM " WHERE 1 = 1", cols);
  if (q->workload_hash) tn_buf_printf(&b, " AND w.hash = ?%d", n + 1), texts[n++] = q->workload_hash;
  if (q->target_name) tn_buf_printf(&b, " AND t.name = ?%d", n + 1), texts[n++] = q->target_name;
  if (q->status != DB_STATUS_ANY) tn_buf_printf(&b, " AND r.status = ?%d", n + 1), texts[n++] = status_names[q->status];
  if (q->verified_only) tn_buf_put(&b, " AND r.verified = 1");
  tn_buf_printf(&b, " ORDER BY %s LIMIT ?%d OFFSET ?%d", order, n + 1, n + 2);
  db_st_t *st = db_prepare(db, tn_buf_str(&b), err);
  tn_buf_free(&b);
  if (!st) return tn_err_prefix(err, "preparing a record query");
  for (int i = 0; i < n; i++) db_bind_text(st, i + 1, texts[i]);
  db_bind_int(st, n + 1, db_sql_limit(q->limit));
  db_bind_int(st, n + 2, (int64_t)q->offset);
  *out = st;
  return 0;
}

static int collect_records(db_t *db, db_st_t *st, db_records_t *out, const char *op,
                           tn_err_t *err) {
  out->arena = tn_arena_new();
  void *items = NULL;
  int rc = collect_rows(db, st, sizeof(db_record_t), db->run_secs_text ? db_read_record_text : db_read_record, &items,
                        &out->n, out->arena, op, err);
  out->items = items;
  if (rc) db_records_free(out);
  return rc;
}

int db_records_query(db_t *db, const db_query_t *q, db_records_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = NULL;
  int rc = db_prepare_query(db, q, RECORD_COLS, "w.hash, t.name, r.id", &st, err);
  if (!rc) rc = collect_records(db, st, out, "querying records", err);
  db_finalize(st);
  return rc;
}

static const char SQL_BEST[] =
    "SELECT " RECORD_COLS RECORD_FROM
    " WHERE w.hash = ?1 AND t.name = ?2 AND r.verified = 1 AND r.status = 'ok'"
    " ORDER BY r.median_secs, r.id LIMIT ?3";

int db_best(db_t *db, const char *workload_hash, const char *target_name, size_t k,
            db_records_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  if (!target_name || !target_name[0])
    return tn_err_set(err, TN_EINVAL, "best records: a target is required (times measured on "
                      "different targets are never compared)");
  if (!workload_hash)
    return tn_err_set(err, TN_EINVAL, "best records: a workload hash is required");
  db_st_t *st = db_stmt(db, SQL_BEST, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, workload_hash);
  db_bind_text(st, 2, target_name);
  db_bind_int(st, 3, db_sql_limit(k));
  int rc = collect_records(db, st, out, "querying the best records", err);
  db_reset(st);
  return rc;
}

void db_records_free(db_records_t *r) {
  tn_arena_free(r->arena);
  memset(r, 0, sizeof *r);
}
