/* test_db.c — suite "db": schema and migrations, upserts, batch insert with
 * dedup, target-aware top-k, jobs, re-measured times, cost models and
 * baselines, JSON-lines round trips, two connections
 * in two threads, and a real SIGKILL-while-committing crash test (the child
 * is the db_crash_child binary named by $DB_CRASH_CHILD). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <sqlite3.h>

#include "db/db.h"
#include "db/db_internal.h"
#include "ir/ir.h"
#include "pgtest.h"
#include "testutil.h"

/* ---- fixtures ------------------------------------------------------------ */

/* The tests added with tcase_add_loop_test run once per engine: _i 0 is
 * SQLite, _i 1 PostgreSQL (a server this process started; see main). */
static pgt_server_t pg;
static int n_engines = 1;

static char tmp_dir[64];
static char tmp_path[512];

/* A fresh directory per test; returns the path of "NAME" inside it, or on
 * PostgreSQL the URL of a fresh database named after it. */
static char shim_dir[64]; /* the ENOSPC shim's directory (build_enospc_shim) */
static const char *tmp_db_in(int engine, const char *name) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/tuned-dbtest-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
  if (engine == 1) {
    char db[64];
    snprintf(db, sizeof db, "t%d_%.*s", (int)getpid(), (int)strcspn(name, "."), name);
    ck_assert_msg(pgt_createdb(&pg, db, tmp_path, sizeof tmp_path) == 0, "%s", pg.skip);
    return tmp_path;
  }
  snprintf(tmp_path, sizeof tmp_path, "%s/%s", tmp_dir, name);
  return tmp_path;
}
#define tmp_db(name) tmp_db_in(_i, (name))

static void rm_db(const char *path) {
  if (db_is_url(path)) { /* an empty database under the same name */
    const char *base = path + strlen("postgresql:///"); /* pgt_url's form */
    char name[64], url[512];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "?"), base);
    ck_assert_msg(pgt_createdb(&pg, name, url, sizeof url) == 0, "%s", pg.skip);
    return;
  }
  char p[160];
  const char *suffix[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < TN_ARRAY_LEN(suffix); i++) {
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
}

static void tmp_cleanup(void) {
  if (!db_is_url(tmp_path)) rm_db(tmp_path); /* the server's data goes with it at the end */
  rmdir(tmp_dir);
}

static db_t *open_ok(const char *path) {
  tn_err_t err = {0};
  db_t *db = NULL;
  ck_assert_msg(db_open(path, &db, &err) == 0, "db_open: %s", err.msg);
  return db;
}

/* Opens a database made by an older schema: it must come out at this
 * build's version and pass the integrity check. */
static db_t *open_migrated(const char *path) {
  db_t *db = open_ok(path);
  int v = 0;
  tn_err_t err = {0};
  ck_assert_msg(db_schema_version(db, &v, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(v, DB_SCHEMA_VERSION);
  ck_assert_msg(db_check(db, &err) == 0, "%s", err.msg);
  return db;
}

/* A workload hash of 64 hex digits from its last 16 (the tests' made-up ones). */
#define WH(last16) "000000000000000000000000000000000000000000000000" last16

#define OK(call)                                           \
  do {                                                     \
    tn_err_t e_ = {0};                                     \
    (void)e_;                                              \
    int rc_ = (call);                                      \
    ck_assert_msg(rc_ == 0, "%s failed: %s", #call, e_.msg); \
  } while (0)
/* Inside OK(...), pass &e_ as the error argument. */
#define E (&e_)

static int64_t add_workload(db_t *db, const char *hash, const char *name) {
  int64_t id = 0;
  db_workload_t w = {.hash = hash, .name = name, .source = "C[i] = A[i] + 1",
                     .params = "{\"N\":64}", .flops = 64, .bytes = 512};
  OK(db_workload_upsert(db, &w, &id, E));
  return id;
}

static int64_t add_target(db_t *db, const char *name, const char *kind) {
  int64_t id = 0;
  db_target_t t = {.name = name, .kind = kind, .arch = "sm_75", .json = "{\"warp_size\": 32}"};
  OK(db_target_upsert(db, &t, &id, E));
  return id;
}

static const double runs3[3] = {3e-3, 1e-3, 2e-3};

/* A record on (w, t) with a trace made from `tag`. */
static db_record_t rec(int64_t w, int64_t t, char *trace_buf, int tag, double median,
                       db_status_t status, bool verified) {
  db_record_t r;
  db_record_init(&r);
  sprintf(trace_buf, "{\"version\": 1, \"trace\": [{\"tag\": %d}]}", tag);
  r.workload_id = w;
  r.target_id = t;
  r.trace = trace_buf;
  r.median_secs = median;
  r.status = status;
  r.verified = verified;
  if (!isnan(median)) {
    r.run_secs = runs3;
    r.n_runs = 3;
  }
  return r;
}

/* The first column of a one-row query, through the db layer's own
 * driver (either engine). */
static int64_t count_rows(const char *path, const char *sql) {
  tn_err_t err = {0};
  db_t *db = NULL;
  ck_assert_msg(db_open(path, &db, &err) == 0, "%s", err.msg);
  db_st_t *st = db_prepare(db, sql, &err);
  ck_assert_msg(st, "%s: %s", sql, err.msg);
  ck_assert_int_eq(db_step(st), DB_ROW);
  int64_t n = db_col_int(st, 0);
  db_finalize(st);
  db_close(db);
  return n;
}

static void raw_exec(const char *path, const char *sql) {
  sqlite3 *h = NULL;
  ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
  char *msg = NULL;
  int rc = sqlite3_exec(h, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
  sqlite3_close(h);
}

/* Makes `path` a database of schema version v (migrations 0..v-1 applied, as
 * an older tuned left it), then runs `sql` on it: the rows it had. */
static void old_db(const char *path, int v, const char *sql) {
  char bump[48];
  for (int i = 0; i < v; i++) raw_exec(path, db_migrations[i]);
  snprintf(bump, sizeof bump, "PRAGMA user_version = %d", v);
  raw_exec(path, bump);
  raw_exec(path, sql);
}

/* The same on either engine: a file as old_db makes it, or (a URL of an
 * empty PostgreSQL database) the PostgreSQL steps 0..v-1 and the version
 * table as that tuned kept it; `sql` must suit both engines. */
static void old_db_any(const char *path, int v, const char *sql) {
  if (!db_is_url(path)) return old_db(path, v, sql);
#if TUNED_HAVE_LIBPQ
  PGconn *c = PQconnectdb(path);
  ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
  PQsetNoticeProcessor(c, pgt_quiet, NULL);
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < v; i++) tn_buf_printf(&b, "%s;", db_pg_driver.migrations[i]);
  tn_buf_printf(&b, "CREATE TABLE tuned_schema (version INTEGER NOT NULL); INSERT INTO tuned_schema VALUES (%d);%s",
                v, sql);
  PGresult *r = PQexec(c, tn_buf_str(&b));
  ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
  PQclear(r);
  PQfinish(c);
  tn_buf_free(&b);
#else
  ck_abort_msg("%s: this build has no libpq", path);
#endif
}

/* The hash of the one workload of a migrated database: a whole identity
 * (made-up sources that do not parse get legacy ones). */
static void only_workload_hash(db_t *db, char out[TN_ID_SIZE]) {
  db_workloads_t ws;
  OK(db_workloads_list(db, 0, 0, &ws, E));
  ck_assert_uint_eq(ws.n, 1);
  ck_assert_msg(tn_id_valid(ws.items[0].hash), "%s", ws.items[0].hash);
  snprintf(out, TN_ID_SIZE, "%s", ws.items[0].hash);
  db_workloads_free(&ws);
}

/* ---- schema ------------------------------------------------------------------ */

START_TEST(t_migrate_empty) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int v = -1;
  OK(db_schema_version(db, &v, E));
  ck_assert_int_eq(v, DB_SCHEMA_VERSION);
  OK(db_check(db, E));
  db_close(db);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                                    "name IN ('workloads','targets','records','jobs')"), 4);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM sqlite_master WHERE name = "
                                    "'records_best'"), 1);
  /* WAL is a property of the file: a plain connection sees it. */
  sqlite3 *h = NULL;
  sqlite3_open(path, &h);
  sqlite3_stmt *st = NULL;
  sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
  sqlite3_finalize(st);
  /* STRICT: a text in a REAL column is refused. */
  int rc = sqlite3_exec(h, "INSERT INTO workloads (hash, name, source, flops, created) VALUES "
                           "('0000000000000001', 'x', 'y', 'lots', 0)", NULL, NULL, NULL);
  ck_assert_int_eq(rc & 0xff, SQLITE_CONSTRAINT);
  ck_assert_ptr_nonnull(strstr(sqlite3_errmsg(h), "cannot store TEXT value in REAL column"));
  sqlite3_close(h);
  tmp_cleanup();
}
END_TEST

/* A new database and its WAL are the user's alone (0600; SQLite alone made
 * 0644 files), and a symbolic link in the database's place is refused. */
START_TEST(t_private_files) {
  const char *path = tmp_db("p.db");
  mode_t old = umask(022);
  db_t *db = open_ok(path);
  add_workload(db, WH("00000000000000b1"), "x");
  char wal[PATH_MAX];
  snprintf(wal, sizeof wal, "%s-wal", path);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  ck_assert_int_eq(stat(wal, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  db_close(db);
  umask(old);
  char link_path[PATH_MAX];
  snprintf(link_path, sizeof link_path, "%s.link", path);
  ck_assert_int_eq(symlink(path, link_path), 0);
  db_t *l = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(db_open(link_path, &l, &err), TN_EINVAL);
  ck_assert_ptr_null(l);
  ck_assert_msg(strstr(err.msg, ".link': is a symbolic link: not opened through it"), "%s", err.msg);
  unlink(link_path);
  tmp_cleanup();
}
END_TEST

START_TEST(t_reopen) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000a1"), "first");
  db_close(db);
  for (int i = 0; i < 3; i++) {
    db = open_ok(path);
    int v = 0;
    OK(db_schema_version(db, &v, E));
    ck_assert_int_eq(v, DB_SCHEMA_VERSION);
    ck_assert_int_eq(add_workload(db, WH("00000000000000a1"), "again"), w);
    db_close(db);
  }
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM workloads"), 1);
  tmp_cleanup();
}
END_TEST

START_TEST(t_migrate_from_v1) {
  const char *path = tmp_db("a.db");
  old_db(path, 1, "INSERT INTO workloads (hash, name, source, created) "
                  "VALUES ('00000000000000b1', 'old', 'src', 1.0)");
  db_t *db = open_migrated(path);
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  char h[TN_ID_SIZE];
  only_workload_hash(db, h);
  OK(db_workload_get(db, h, &w, a, E));
  ck_assert_str_eq(w.name, "old");
  int64_t t = add_target(db, "cpu", "cpu");
  db_job_t job = {.workload_id = w.id, .target_id = t, .budget_trials = 8, .seed = 1};
  OK(db_job_create(db, &job, E));
  ck_assert_int_eq(job.id, 1);
  tn_arena_free(a);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* A version-2 database with records and a job pointing at one of them: the
 * records table is rebuilt with its ids (the CHECK gains too_slow), the job
 * still points at its record, foreign keys hold, and the new tables exist. */
START_TEST(t_migrate_from_v2) {
  const char *path = tmp_db("a.db");
  old_db(path, 2,
         "INSERT INTO workloads (hash, name, source, created) VALUES ('00000000000000c1', 'old', 'src', 1.0);"
         "INSERT INTO targets (name, kind, created) VALUES ('cpu', 'cpu', 1.0);"
         "INSERT INTO records (id, workload_id, target_id, trace, trace_hash, run_secs, median_secs, status,"
         " verified, created, updated) VALUES (7, 1, 1, '{}', '0000000000000007', '[0.5]', 0.5, 'ok', 1, 1, 1),"
         " (9, 1, 1, '[]', '0000000000000009', '[]', NULL, 'timeout', 0, 1, 1);"
         "INSERT INTO jobs (state, workload_id, target_id, budget_trials, best_record_id, seed, created, updated)"
         " VALUES ('done', 1, 1, 8, 7, 1, 1, 1);");
  db_t *db = open_migrated(path);
  tn_arena_t *a = tn_arena_new();
  db_job_t job;
  OK(db_job_get(db, 1, &job, a, E));
  ck_assert_int_eq(job.best_record_id, 7);
  db_records_t best;
  char h[TN_ID_SIZE];
  only_workload_hash(db, h);
  OK(db_best(db, h, "cpu", 0, &best, E));
  ck_assert_int_eq((int)best.n, 1);
  ck_assert_int_eq(best.items[0].id, 7);
  ck_assert_double_eq(best.items[0].median_secs, 0.5);
  db_records_free(&best);
  char buf[96];
  db_record_t r = rec(1, 1, buf, 10, NAN, DB_STATUS_TOO_SLOW, false);
  r.error = "stopped early";
  OK(db_record_add_batch(db, &r, 1, NULL, E));
  ck_assert_int_gt(r.id, 9);
  tn_arena_free(a);
  db_close(db);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM records WHERE status = 'too_slow'"), 1);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM sqlite_master WHERE name IN "
                                    "('records_best', 'cost_models', 'baselines', 'records_v3')"), 3);
  tmp_cleanup();
}
END_TEST

/* A version-3 database: its records gain CUPTI's kernel time (unknown for
 * them) and the disagreement flag (false); new records keep both, through
 * queries and JSON-lines export and import. */
START_TEST(t_migrate_from_v3) {
  const char *path = tmp_db("a.db");
  old_db(path, 3,
         "INSERT INTO workloads (hash, name, source, created) VALUES ('00000000000000d1', 'old', 'src', 1.0);"
         "INSERT INTO targets (name, kind, created) VALUES ('nvidia/h100', 'cuda', 1.0);"
         "INSERT INTO records (id, workload_id, target_id, trace, trace_hash, run_secs, median_secs, status,"
         " verified, created, updated) VALUES (5, 1, 1, '{}', 'c735a31983dc6cdf', '[0.5]', 0.5, 'ok', 1, 1, 1);");
  char old[17], h[TN_ID_SIZE];
  snprintf(old, sizeof old, "%016" PRIx64, tn_fnv1a_str(TN_FNV_INIT, "{}"));
  ck_assert_str_eq(old, "c735a31983dc6cdf"); /* the real old one */
  db_t *db = open_migrated(path);
  only_workload_hash(db, h);
  char b1[96], b2[96];
  db_record_t rs[2] = {rec(1, 1, b1, 1, 1e-3, DB_STATUS_OK, true), rec(1, 1, b2, 2, 2e-3, DB_STATUS_OK, true)};
  rs[0].cupti_median_secs = 1.25e-3, rs[0].times_disagree = true;
  rs[1].cupti_median_secs = 1.98e-3;
  OK(db_record_add_batch(db, rs, 2, NULL, E));
  db_record_t bad = rec(1, 1, b1, 3, 1e-3, DB_STATUS_OK, true);
  bad.cupti_median_secs = -1;
  tn_err_t err = {0};
  ck_assert_int_eq(db_record_add_batch(db, &bad, 1, NULL, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "CUPTI median -1 s"));
  db_records_t got;
  db_query_t q = db_query_all();
  OK(db_records_query(db, &q, &got, E));
  ck_assert_int_eq((int)got.n, 3);
  ck_assert_int_eq(got.items[0].id, 5);
  ck_assert(isnan(got.items[0].cupti_median_secs) && !got.items[0].times_disagree);
  ck_assert_double_eq(got.items[1].cupti_median_secs, 1.25e-3);
  ck_assert(got.items[1].times_disagree);
  ck_assert_double_eq(got.items[2].cupti_median_secs, 1.98e-3);
  ck_assert(!got.items[2].times_disagree);
  db_records_free(&got);
  tn_arena_t *a = tn_arena_new();
  db_record_t one;
  OK(db_record_get(db, rs[0].id, &one, a, E));
  ck_assert_str_eq(one.trace, "{\"version\": 1, \"trace\": [{\"tag\": 1}]}");
  ck_assert_str_eq(one.target_name, "nvidia/h100");
  ck_assert_str_eq(one.workload_hash, h);
  /* record 5's trace hash was recomputed (BLAKE2b-256 of "tuned.trace.v1\0{}", as Python's hashlib has it) */
  db_record_t five;
  OK(db_record_get(db, 5, &five, a, E));
  ck_assert_str_eq(five.trace_hash, "a100384f47378538ec82fb3ee06effbbab2fada9a3f42e3c47061deba13feb71");
  ck_assert_double_eq(one.cupti_median_secs, 1.25e-3);
  ck_assert_int_eq(db_record_get(db, 4242, &one, a, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "no record with id 4242 in the database");
  /* a re-measure's CUPTI time and flag replace the first ones; unknown clears the flag */
  OK(db_record_set_cupti(db, rs[0].id, 0.95e-3, false, E));
  OK(db_record_get(db, rs[0].id, &one, a, E));
  ck_assert_double_eq(one.cupti_median_secs, 0.95e-3);
  ck_assert(!one.times_disagree);
  OK(db_record_set_cupti(db, rs[0].id, NAN, true, E));
  OK(db_record_get(db, rs[0].id, &one, a, E));
  ck_assert(isnan(one.cupti_median_secs) && !one.times_disagree);
  ck_assert_int_eq(db_record_set_cupti(db, rs[0].id, -2e-3, false, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "CUPTI median -0.002 s"));
  ck_assert_int_eq(db_record_set_cupti(db, 4242, 1e-3, false, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "no ok record with id 4242"));
  OK(db_record_set_cupti(db, rs[0].id, 1.25e-3, true, E)); /* back, for the export below */
  tn_arena_free(a);
  tn_buf_t out;
  tn_buf_init(&out);
  OK(db_export_jsonl(db, &q, &out, E));
  db_close(db);
  tmp_cleanup();
  ck_assert_ptr_nonnull(strstr(tn_buf_str(&out), "\"cupti_median_secs\":0.00125,\"times_disagree\":true"));
  db = open_ok(tmp_db("b.db"));
  OK(db_import_jsonl(db, tn_buf_str(&out), strlen(tn_buf_str(&out)), NULL, E));
  OK(db_records_query(db, &q, &got, E));
  ck_assert_int_eq((int)got.n, 3);
  int flagged = 0;
  for (size_t i = 0; i < got.n; i++)
    if (got.items[i].times_disagree) {
      flagged++;
      ck_assert_double_eq(got.items[i].cupti_median_secs, 1.25e-3);
    }
  ck_assert_int_eq(flagged, 1);
  db_records_free(&got);
  db_close(db);
  tn_buf_free(&out);
  tmp_cleanup();
}
END_TEST

/* The re-measure's times replace an ok record's; others are refused. */
START_TEST(t_record_set_times) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000d1"), "w"), t = add_target(db, "cpu", "cpu");
  char b1[96], b2[96];
  db_record_t rs[2] = {rec(w, t, b1, 1, 2e-3, DB_STATUS_OK, true), rec(w, t, b2, 2, NAN, DB_STATUS_BUILD_ERROR, false)};
  OK(db_record_add_batch(db, rs, 2, NULL, E));
  const double again[4] = {4e-3, 5e-3, 3e-3, 6e-3};
  OK(db_record_set_times(db, rs[0].id, again, 4, 4.5e-3, E));
  db_records_t best;
  OK(db_best(db, WH("00000000000000d1"), "cpu", 1, &best, E));
  ck_assert_int_eq((int)best.items[0].n_runs, 4);
  ck_assert_double_eq(best.items[0].run_secs[2], 3e-3);
  ck_assert_double_eq(best.items[0].median_secs, 4.5e-3);
  ck_assert(best.items[0].updated >= best.items[0].created);
  db_records_free(&best);
  tn_err_t err = {0};
  ck_assert_int_eq(db_record_set_times(db, rs[1].id, again, 4, 4.5e-3, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "no ok record with id"), "%s", err.msg);
  ck_assert_int_eq(db_record_set_times(db, rs[0].id, again, 0, 4.5e-3, &err), TN_EINVAL);
  const double bad[1] = {-1};
  ck_assert_int_eq(db_record_set_times(db, rs[0].id, bad, 1, 1e-3, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "run 0 took -1 s"), "%s", err.msg);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* Cost models per (target, format): round trip of the blob and the ids, the
 * own format preferred, another one returned when it is the only one, a
 * damaged id list refused. */
START_TEST(t_cost_models) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t t = add_target(db, "cpu", "cpu"), t2 = add_target(db, "opencl", "opencl");
  tn_arena_t *a = tn_arena_new();
  db_cost_model_t got;
  bool found = true;
  OK(db_cost_model_get(db, t, 1, &got, &found, a, E));
  ck_assert(!found);
  const int64_t ids[3] = {5, 0, INT64_C(1) << 40};
  db_cost_model_t m = {.target_id = t, .format = 1, .model = "MODEL-ONE", .model_len = 9, .record_ids = ids,
                       .nrecord_ids = 3};
  OK(db_cost_model_put(db, &m, E));
  m.format = 2, m.model = "MODEL-TWO!", m.model_len = 10, m.nrecord_ids = 1;
  OK(db_cost_model_put(db, &m, E));
  OK(db_cost_model_get(db, t, 1, &got, &found, a, E));
  ck_assert(found && got.format == 1 && got.model_len == 9 && memcmp(got.model, "MODEL-ONE", 9) == 0);
  ck_assert_int_eq((int)got.nrecord_ids, 3);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(got.record_ids[i], ids[i]);
  ck_assert(got.updated > 0);
  OK(db_cost_model_get(db, t, 2, &got, &found, a, E));
  ck_assert(found && got.format == 2 && got.model_len == 10 && got.nrecord_ids == 1);
  /* replaced, not added */
  m.format = 1, m.model = "NEW", m.model_len = 3, m.nrecord_ids = 0;
  OK(db_cost_model_put(db, &m, E));
  OK(db_cost_model_get(db, t, 1, &got, &found, a, E));
  ck_assert(found && got.model_len == 3 && got.nrecord_ids == 0);
  /* only another format there: that one, so the caller can say why it is not used */
  db_cost_model_t other = {.target_id = t2, .format = 7, .model = "X", .model_len = 1};
  OK(db_cost_model_put(db, &other, E));
  OK(db_cost_model_get(db, t2, 1, &got, &found, a, E));
  ck_assert(found && got.format == 7);
  tn_err_t err = {0};
  ck_assert_int_eq(db_cost_model_put(db, &(db_cost_model_t){.target_id = t}, &err), TN_EINVAL);
  db_close(db);
  db = open_ok(path);
  OK(db_exec(db, _i ? "UPDATE cost_models SET record_ids = '\\x010203'::bytea WHERE target_id = 2"
                    : "UPDATE cost_models SET record_ids = x'010203' WHERE target_id = 2", "damaging", E));
  ck_assert_int_eq(db_cost_model_get(db, t2, 7, &got, &found, a, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "not a multiple of 8"), "%s", err.msg);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM cost_models"), 3);
  tn_arena_free(a);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* The unscheduled program's time per (workload hash, target name). */
START_TEST(t_baselines) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000e1"), "w"), t = add_target(db, "cpu", "cpu");
  tn_arena_t *a = tn_arena_new();
  db_baseline_t got;
  bool found = true;
  OK(db_baseline_get(db, WH("00000000000000e1"), "cpu", &got, &found, a, E));
  ck_assert(!found);
  db_baseline_t b = {.workload_id = w, .target_id = t, .status = DB_STATUS_TIMEOUT, .median_secs = NAN,
                     .error = "run timed out after 30.0 s"};
  OK(db_baseline_put(db, &b, E));
  OK(db_baseline_get(db, WH("00000000000000e1"), "cpu", &got, &found, a, E));
  ck_assert(found && got.status == DB_STATUS_TIMEOUT && isnan(got.median_secs) && got.n_runs == 0);
  ck_assert_str_eq(got.error, "run timed out after 30.0 s");
  b = (db_baseline_t){.workload_id = w, .target_id = t, .status = DB_STATUS_OK, .median_secs = 2e-3,
                      .run_secs = runs3, .n_runs = 3};
  OK(db_baseline_put(db, &b, E));
  OK(db_baseline_get(db, WH("00000000000000e1"), "cpu", &got, &found, a, E));
  ck_assert(found && got.status == DB_STATUS_OK && got.median_secs == 2e-3 && got.n_runs == 3 && !got.error);
  ck_assert_double_eq(got.run_secs[0], 3e-3);
  OK(db_baseline_get(db, WH("00000000000000e1"), "opencl", &got, &found, a, E));
  ck_assert(!found);
  tn_err_t err = {0};
  b.median_secs = NAN;
  ck_assert_int_eq(db_baseline_put(db, &b, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "an ok measurement needs a median"), "%s", err.msg);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM baselines"), 1);
  tn_arena_free(a);
  db_close(db);
  tmp_cleanup();
}
END_TEST

START_TEST(t_version_too_new) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  OK(db->drv->write_version(db, 99, E));
  db_close(db);
  tn_err_t err = {0};
  db = (db_t *)1;
  ck_assert_int_eq(db_open(path, &db, &err), TN_EUNSUPPORTED);
  ck_assert_ptr_null(db);
  ck_assert_ptr_nonnull(strstr(err.msg, path));
  ck_assert_ptr_nonnull(strstr(err.msg, "schema version 99 is newer than this build"));
  char up_to[32];
  snprintf(up_to, sizeof up_to, "(up to %d)", DB_SCHEMA_VERSION);
  ck_assert_ptr_nonnull(strstr(err.msg, up_to));
  ck_assert_int_eq(db_open_readonly(path, &db, &err), TN_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "schema version 99 is newer than this build"));
  tmp_cleanup();
  if (_i == 1) return; /* the rest is about files */

  /* A file that is not a database, and a directory that does not exist. */
  path = tmp_db("junk.db");
  FILE *f = fopen(path, "w");
  fputs("this is not an SQLite database, just some text long enough to fill a header....\n", f);
  fclose(f);
  ck_assert_int_eq(db_open(path, &db, &err), TN_EIO);
  ck_assert_ptr_nonnull(strstr(err.msg, "file is not a database"));
  ck_assert_ptr_nonnull(strstr(err.msg, "junk.db"));
  tmp_cleanup();
  ck_assert_int_eq(db_open("/nonexistent-dir/x/y.db", &db, &err), TN_EIO);
  ck_assert_ptr_nonnull(strstr(err.msg, "database '/nonexistent-dir/x/y.db'"));
  ck_assert_ptr_nonnull(strstr(err.msg, "unable to open"));
}
END_TEST

/* ---- identities (schema 7 -> 8) ---------------------------------------------------- */

/* s as an SQL string literal (quotes doubled), appended to b. */
static void sql_quote(tn_buf_t *b, const char *s) {
  tn_buf_putc(b, '\'');
  for (; *s; s++) tn_buf_put(b, *s == '\'' ? "''" : (char[]){*s, 0});
  tn_buf_putc(b, '\'');
}

/* A workload file's text and, parsed with params, its identity and its old
 * FNV-1a hash (16 hex digits). */
static char *workload_file(const char *rel, const char *params, char id[TN_ID_SIZE], char fnv[17]) {
  char *text = NULL, path[PATH_MAX];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/%s", TUNED_SOURCE_ROOT, rel);
  OK(tn_read_file(path, 1 << 20, &text, &len, E));
  ir_workload_t *w = NULL;
  OK(ir_workload_parse_stored("w", text, params, &w, E));
  ir_func_hash(w->func, id);
  snprintf(fnv, 17, "%016" PRIx64, ir_func_hash_fnv(w->func));
  ir_workload_free(w);
  return text;
}

static const char *const v7_traces[5] = {"{\"t\": 1}", "{\"t\": 2}", "{\"t\": 3}", "{\"t\": 4}", "{\"t\": 5}"};

/* A version-7 database as tuned left it before identities were BLAKE2b:
 * FNV-1a hashes for workloads and traces; workload 1 the collision
 * fixture's dense_const (its old hash is dense_plain's too), 2 matmul at
 * 64^3, 3 vector_add filed under a hash its source does not have (a row of
 * another tuned, or a forged one), 4 a source that does not parse; a record
 * on each (record 5 a failed one of matmul), a job of matmul whose best is
 * record 2, with a trial and a baseline.  The identities that 1 and 2 must
 * get come back in ids. */
static void v7_database(const char *path, char ids[2][TN_ID_SIZE]) {
  char fnv[4][17];
  char *src[3] = {workload_file("tests/fnv-collision/dense_const.tw", NULL, ids[0], fnv[0]),
                  workload_file("workloads/matmul.tw", "{\"M\":64,\"N\":64,\"K\":64}", ids[1], fnv[1]),
                  workload_file("workloads/vector_add.tw", NULL, (char[TN_ID_SIZE]){0}, fnv[2])};
  ck_assert_str_eq(fnv[0], "6e44248031b14ae9");
  ck_assert_str_ne(fnv[2], "deadbeefdeadbeef");
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "INSERT INTO targets (name, kind, created) VALUES ('cpu', 'cpu', 1.0);"
                 "INSERT INTO workloads (hash, name, source, params, created) VALUES ");
  const char *hashes[4] = {fnv[0], fnv[1], "deadbeefdeadbeef", "00000000000000b1"};
  const char *names[4] = {"dense_const", "matmul", "vector_add", "broken"};
  const char *params[4] = {"{}", "{\"M\":64,\"N\":64,\"K\":64}", "{}", "{}"};
  for (int i = 0; i < 4; i++) {
    tn_buf_printf(&b, "%s('%s', '%s', ", i ? ", " : "", hashes[i], names[i]);
    sql_quote(&b, i < 3 ? src[i] : "this is not a workload");
    tn_buf_printf(&b, ", '%s', 1.0)", params[i]);
  }
  tn_buf_put(&b, ";INSERT INTO records (workload_id, target_id, trace, trace_hash, run_secs, median_secs, status, error,"
                 " verified, created, updated) VALUES ");
  for (int i = 0; i < 5; i++) {
    bool ok = i < 4;
    tn_buf_printf(&b, "%s(%d, 1, '%s', '%016" PRIx64 "', '%s', %s, '%s', %s, %d, 1, 1)", i ? ", " : "",
                  ok ? i + 1 : 2, v7_traces[i], tn_fnv1a_str(TN_FNV_INIT, v7_traces[i]), ok ? "[0.001]" : "[]",
                  ok ? "0.001" : "NULL", ok ? "ok" : "build_error", ok ? "NULL" : "'cc: error'", ok);
  }
  tn_buf_put(&b, ";INSERT INTO jobs (state, workload_id, target_id, budget_trials, best_record_id, seed, created,"
                 " updated) VALUES ('done', 2, 1, 8, 2, 1, 1, 1);"
                 "INSERT INTO job_trials (job_id, trial, record_id, status, median_secs, measured)"
                 " VALUES (1, 1, 2, 'ok', 0.001, 1);"
                 "INSERT INTO baselines (workload_id, target_id, status, median_secs, run_secs, created)"
                 " VALUES (2, 1, 'ok', 0.01, '[0.01]', 1);");
  old_db_any(path, 7, tn_buf_str(&b));
  tn_buf_free(&b);
  for (int i = 0; i < 3; i++) free(src[i]);
}

/* Migrating a version-7 database in place (both engines): every row kept
 * under its id; workloads whose stored hash their source gives get their
 * structural identities, the others (a forged or stale hash, a source that
 * no longer parses) legacy identities that no text hashes to; every trace
 * hash recomputed; jobs, trials and baselines still point at their rows; the
 * schema refuses 16-digit hashes from now on.  The collision fixture's
 * dense_plain, whose old hash was dense_const's, finds nothing. */
START_TEST(t_migrate_identities) {
  const char *path = tmp_db("v7.db");
  char ids[2][TN_ID_SIZE];
  v7_database(path, ids);
  db_t *db = open_migrated(path);
  db_workloads_t ws;
  OK(db_workloads_list(db, 0, 0, &ws, E));
  ck_assert_uint_eq(ws.n, 4);
  const char *by_id[5] = {0};
  for (size_t i = 0; i < ws.n; i++) {
    ck_assert_msg(tn_id_valid(ws.items[i].hash), "%s", ws.items[i].hash);
    ck_assert(ws.items[i].id >= 1 && ws.items[i].id <= 4);
    by_id[ws.items[i].id] = ws.items[i].hash;
  }
  ck_assert_str_eq(by_id[1], ids[0]);
  ck_assert_str_eq(by_id[2], ids[1]);
  char va[TN_ID_SIZE], fnv[17];
  free(workload_file("workloads/vector_add.tw", NULL, va, fnv));
  ck_assert_str_ne(by_id[3], va); /* not the identity its source has: its records are not that workload's */
  ck_assert_str_ne(by_id[3], by_id[4]);
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  OK(db_workload_get(db, by_id[4], &w, a, E));
  ck_assert_str_eq(w.source, "this is not a workload");
  /* every record, its trace hash recomputed */
  db_records_t rs;
  db_query_t q = db_query_all();
  OK(db_records_query(db, &q, &rs, E));
  ck_assert_uint_eq(rs.n, 5);
  for (size_t i = 0; i < rs.n; i++) {
    char h[TN_ID_SIZE];
    db_trace_hash(rs.items[i].trace, h);
    ck_assert_str_eq(rs.items[i].trace_hash, h);
    ck_assert_str_eq(rs.items[i].trace, v7_traces[rs.items[i].id - 1]);
  }
  db_records_free(&rs);
  db_records_t best;
  OK(db_best(db, ids[0], "cpu", 0, &best, E));
  ck_assert_uint_eq(best.n, 1);
  ck_assert_int_eq(best.items[0].id, 1);
  db_records_free(&best);
  char plain[TN_ID_SIZE], plain_fnv[17];
  free(workload_file("tests/fnv-collision/dense_plain.tw", NULL, plain, plain_fnv));
  ck_assert_str_eq(plain_fnv, "6e44248031b14ae9"); /* the old hash would have found record 1 */
  OK(db_best(db, plain, "cpu", 0, &best, E));
  ck_assert_uint_eq(best.n, 0);
  db_records_free(&best);
  /* the job, its trial and the baseline */
  db_job_t job;
  OK(db_job_get(db, 1, &job, a, E));
  ck_assert_str_eq(job.workload_hash, ids[1]);
  ck_assert_int_eq(job.best_record_id, 2);
  db_job_trials_t tr;
  OK(db_job_trials_get(db, 1, &tr, E));
  ck_assert_uint_eq(tr.n, 1);
  ck_assert_int_eq(tr.items[0].record_id, 2);
  db_job_trials_free(&tr);
  db_baseline_t bl;
  bool found = false;
  OK(db_baseline_get(db, ids[1], "cpu", &bl, &found, a, E));
  ck_assert(found);
  ck_assert_double_eq(bl.median_secs, 0.01);
  /* dedup goes by the new trace hashes */
  db_record_t again;
  db_record_init(&again);
  again.workload_id = 2, again.target_id = 1, again.trace = v7_traces[1], again.median_secs = 2e-3;
  again.run_secs = runs3, again.n_runs = 3;
  db_batch_stats_t st;
  OK(db_record_add_batch(db, &again, 1, &st, E));
  ck_assert_uint_eq(st.duplicates, 1);
  /* the schema takes whole identities only */
  tn_err_t err = {0};
  db_st_t *ins = db_prepare(db, "INSERT INTO workloads (hash, name, source, created) VALUES "
                                "('0123456789abcdef', 'x', 'y', 1)", &err);
  ck_assert_msg(ins, "%s", err.msg);
  ck_assert_int_eq(db_step(ins), DB_ERROR);
  db_finalize(ins);
  tn_arena_free(a);
  db_workloads_free(&ws);
  db_close(db);
  /* opened again: nothing more to do, the identities stay */
  db = open_migrated(path);
  a = tn_arena_new();
  for (int i = 0; i < 2; i++) {
    OK(db_workload_get(db, ids[i], &w, a, E));
    ck_assert_int_eq(w.id, i + 1);
  }
  tn_arena_free(a);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* ---- workloads and targets ------------------------------------------------------ */

START_TEST(t_upsert) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t a = add_workload(db, WH("00000000000000a1"), "first");
  int64_t b = add_workload(db, WH("00000000000000b2"), "second");
  ck_assert_int_ne(a, b);
  ck_assert_int_eq(add_workload(db, WH("00000000000000a1"), "renamed"), a);
  tn_arena_t *ar = tn_arena_new();
  db_workload_t w;
  OK(db_workload_get(db, WH("00000000000000a1"), &w, ar, E));
  ck_assert_str_eq(w.name, "first"); /* the first name stays */
  ck_assert_str_eq(w.params, "{\"N\":64}");
  ck_assert_double_eq(w.flops, 64);
  tn_err_t err = {0};
  ck_assert_int_eq(db_workload_get(db, WH("ffffffffffffffff"), &w, ar, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "no workload with hash '" WH("ffffffffffffffff") "' in the database");
  tn_arena_free(ar);

  /* a prefix of 32 digits or more names the one workload that starts with it */
  char whole[TN_ID_SIZE];
  bool found = false;
  OK(db_workload_resolve(db, "00000000000000000000000000000000000000000000000000000000000000a", whole, &found, E));
  ck_assert(found);
  ck_assert_str_eq(whole, WH("00000000000000a1"));
  OK(db_workload_resolve(db, WH("00000000000000b2"), whole, &found, E)); /* a whole hash, as is */
  ck_assert(found);
  ck_assert_str_eq(whole, WH("00000000000000b2"));
  OK(db_workload_resolve(db, "00000000000000000000000000000000000000000000000000000000000000f", whole, &found, E));
  ck_assert(!found && !whole[0]);
  ck_assert_int_eq(db_workload_resolve(db, "00000000000000000000000000000000", whole, &found, &err), TN_ESTATE);
  ck_assert_str_eq(err.msg, "hash prefix 00000000000000000000000000000000 names two workloads, " WH("00000000000000a1")
                            " and " WH("00000000000000b2") ": give more digits");
  ck_assert_int_eq(db_workload_resolve(db, "0000000000000000000000000000000", whole, &found, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "'0000000000000000000000000000000' is not a workload hash: 32 to 64 lower-case hex digits");

  db_workload_t bad = {.hash = "00000000000000A1", .name = "x", .source = "y"};
  ck_assert_int_eq(db_workload_upsert(db, &bad, NULL, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "64 lower-case hex digits"));
  bad.hash = WH("00000000000000c3");
  bad.params = "[1,2]";
  ck_assert_int_eq(db_workload_upsert(db, &bad, NULL, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "workload params must be a JSON object"));

  int64_t t1 = add_target(db, "nvidia/tesla-t4", "cuda");
  int64_t t2 = add_target(db, "cpu", "cpu");
  ck_assert_int_ne(t1, t2);
  int64_t again = 0;
  db_target_t t = {.name = "nvidia/tesla-t4", .kind = "cuda", .arch = "sm_75",
                   .json = "{\"warp_size\": 32, \"sm_count\": 40}"};
  OK(db_target_upsert(db, &t, &again, E));
  ck_assert_int_eq(again, t1);
  db_targets_t ts;
  OK(db_targets_list(db, &ts, E));
  ck_assert_uint_eq(ts.n, 2);
  ck_assert_str_eq(ts.items[0].name, "cpu");
  ck_assert_str_eq(ts.items[1].name, "nvidia/tesla-t4");
  ck_assert_str_eq(ts.items[1].json, "{\"warp_size\":32,\"sm_count\":40}");
  db_targets_free(&ts);
  db_target_t nokind = {.name = "x"};
  ck_assert_int_eq(db_target_upsert(db, &nokind, NULL, &err), TN_EINVAL);

  db_workloads_t ws;
  OK(db_workloads_list(db, 0, 0, &ws, E));
  ck_assert_uint_eq(ws.n, 2);
  ck_assert_str_eq(ws.items[0].hash, WH("00000000000000a1"));
  ck_assert_str_eq(ws.items[1].name, "second");
  db_workloads_free(&ws);
  OK(db_workloads_list(db, 1, 1, &ws, E));
  ck_assert_uint_eq(ws.n, 1);
  ck_assert_str_eq(ws.items[0].hash, WH("00000000000000b2"));
  db_workloads_free(&ws);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* ---- records ------------------------------------------------------------------- */

START_TEST(t_batch_dedup) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000a1"), "w");
  int64_t t = add_target(db, "cpu", "cpu");
  char tr[8][96];
  db_record_t b1[5] = {
      rec(w, t, tr[0], 0, 1e-3, DB_STATUS_OK, true),
      rec(w, t, tr[1], 1, 2e-3, DB_STATUS_OK, false),
      rec(w, t, tr[2], 2, NAN, DB_STATUS_BUILD_ERROR, false),
      rec(w, t, tr[3], 0, 5e-3, DB_STATUS_OK, true), /* same trace as [0] */
      rec(w, t, tr[4], 3, 4e-3, DB_STATUS_TIMEOUT, false),
  };
  b1[2].error = "nvrtc: too many resources requested";
  b1[0].registers = 40;
  b1[0].shared_bytes = 4096;
  b1[0].spill_bytes = 0;
  b1[0].compiler = "nvrtc";
  b1[0].toolkit_version = "13.0";
  b1[0].arch = "sm_75";
  db_batch_stats_t st;
  OK(db_record_add_batch(db, b1, 5, &st, E));
  ck_assert_uint_eq(st.inserted, 4);
  ck_assert_uint_eq(st.duplicates, 1);
  ck_assert(b1[3].duplicate);
  ck_assert_int_eq(b1[3].id, 0);
  ck_assert_int_gt(b1[4].id, b1[0].id);

  /* The trace hash is the text's identity (BLAKE2b-256 in the trace domain). */
  char want[TN_ID_SIZE];
  tn_id_of(TN_ID_TRACE, tr[1], strlen(tr[1]), want);
  ck_assert_str_eq(b1[1].trace_hash, want);
  bool exists = false;
  OK(db_record_exists(db, w, t, want, &exists, E));
  ck_assert(exists);
  OK(db_record_exists(db, w, t, WH("0123456789abcdef"), &exists, E));
  ck_assert(!exists);

  db_record_t b2[3] = {rec(w, t, tr[5], 1, 1, DB_STATUS_OK, false),
                       rec(w, t, tr[6], 2, NAN, DB_STATUS_BUILD_ERROR, false),
                       rec(w, t, tr[7], 9, 7e-3, DB_STATUS_OK, true)};
  OK(db_record_add_batch(db, b2, 3, &st, E));
  ck_assert_uint_eq(st.inserted, 1);
  ck_assert_uint_eq(st.duplicates, 2);

  /* Every field comes back as stored. */
  db_records_t rs;
  db_query_t q = db_query_all();
  OK(db_records_query(db, &q, &rs, E));
  ck_assert_uint_eq(rs.n, 5);
  db_record_t *r0 = &rs.items[0];
  ck_assert_str_eq(r0->trace, tr[0]);
  ck_assert_str_eq(r0->workload_hash, WH("00000000000000a1"));
  ck_assert_str_eq(r0->target_name, "cpu");
  ck_assert_uint_eq(r0->n_runs, 3);
  ck_assert_double_eq(r0->run_secs[0], 3e-3);
  ck_assert_double_eq(r0->run_secs[2], 2e-3);
  ck_assert_double_eq(r0->median_secs, 1e-3);
  ck_assert_int_eq(r0->registers, 40);
  ck_assert_int_eq(r0->spill_bytes, 0);
  ck_assert_str_eq(r0->toolkit_version, "13.0");
  ck_assert(r0->verified);
  ck_assert(r0->created > 1.6e9);
  db_record_t *r2 = &rs.items[2];
  ck_assert_int_eq(r2->status, DB_STATUS_BUILD_ERROR);
  ck_assert_str_eq(r2->error, "nvrtc: too many resources requested");
  ck_assert(isnan(r2->median_secs));
  ck_assert_uint_eq(r2->n_runs, 0);
  ck_assert_int_eq(r2->registers, -1);
  ck_assert_ptr_null(r2->compiler);
  db_records_free(&rs);

  /* A bad record anywhere fails the whole batch: nothing is written. */
  char tb[3][96];
  db_record_t b3[3] = {rec(w, t, tb[0], 20, 1, DB_STATUS_OK, true),
                       rec(w, t, tb[1], 21, 1, DB_STATUS_OK, true),
                       rec(w, t, tb[2], 22, NAN, DB_STATUS_RUN_ERROR, true)};
  tn_err_t err = {0};
  ck_assert_int_eq(db_record_add_batch(db, b3, 3, &st, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "record 2 of the batch: only ok records can be verified (status is "
                            "run_error)");
  b3[2] = rec(999, t, tb[2], 22, 1, DB_STATUS_OK, false);
  ck_assert_int_eq(db_record_add_batch(db, b3, 3, &st, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "record 2 of the batch: unknown workload id 999"));
  b3[2] = rec(w, 77, tb[2], 22, 1, DB_STATUS_OK, false);
  ck_assert_int_eq(db_record_add_batch(db, b3, 3, &st, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "unknown target id 77"));
  b3[2] = rec(w, t, tb[2], 22, 1, DB_STATUS_OK, false);
  b3[2].trace = "{not json";
  ck_assert_int_eq(db_record_add_batch(db, b3, 3, &st, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "the trace is not valid JSON"));
  b3[2] = rec(w, t, tb[2], 22, NAN, DB_STATUS_OK, false);
  ck_assert_int_eq(db_record_add_batch(db, b3, 3, &st, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "an ok record needs a median time"));
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM records"), 5);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* Adds ok records with the given medians (verified as flagged) and returns
 * their ids in ids[]. */
static void add_medians(db_t *db, int64_t w, int64_t t, int tag0, const double *med,
                        const bool *ver, int n, int64_t *ids) {
  char (*tr)[96] = calloc((size_t)n, sizeof *tr);
  db_record_t *rs = calloc((size_t)n, sizeof *rs);
  for (int i = 0; i < n; i++) rs[i] = rec(w, t, tr[i], tag0 + i, med[i], DB_STATUS_OK, ver[i]);
  OK(db_record_add_batch(db, rs, (size_t)n, NULL, E));
  for (int i = 0; i < n && ids; i++) ids[i] = rs[i].id;
  free(rs);
  free(tr);
}

START_TEST(t_best) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000a1"), "w");
  int64_t t = add_target(db, "cpu", "cpu");
  double med[6] = {3e-3, 1e-3, 2e-3, 0.5e-3, 2e-3, 9e-3};
  bool ver[6] = {true, true, true, false, true, true};
  int64_t ids[6];
  add_medians(db, w, t, 0, med, ver, 6, ids);
  /* Faster but not ok or not verified: never best. */
  char tr[2][96];
  db_record_t bad[2] = {rec(w, t, tr[0], 100, 1e-6, DB_STATUS_WRONG_RESULT, false),
                        rec(w, t, tr[1], 101, 1e-6, DB_STATUS_TIMEOUT, false)};
  OK(db_record_add_batch(db, bad, 2, NULL, E));

  db_records_t best;
  OK(db_best(db, WH("00000000000000a1"), "cpu", 3, &best, E));
  ck_assert_uint_eq(best.n, 3);
  ck_assert_int_eq(best.items[0].id, ids[1]);
  ck_assert_int_eq(best.items[1].id, ids[2]); /* tie 2e-3: lower id first */
  ck_assert_int_eq(best.items[2].id, ids[4]);
  ck_assert_double_eq(best.items[0].median_secs, 1e-3);
  db_records_free(&best);
  OK(db_best(db, WH("00000000000000a1"), "cpu", 0, &best, E));
  ck_assert_uint_eq(best.n, 5);
  for (size_t i = 0; i < best.n; i++) {
    ck_assert(best.items[i].verified && best.items[i].status == DB_STATUS_OK);
    if (i) ck_assert(best.items[i - 1].median_secs <= best.items[i].median_secs);
  }
  ck_assert_double_eq(best.items[4].median_secs, 9e-3);
  db_records_free(&best);

  /* Verifying the 0.5 ms record makes it the best. */
  OK(db_record_set_verified(db, ids[3], true, E));
  OK(db_best(db, WH("00000000000000a1"), "cpu", 1, &best, E));
  ck_assert_uint_eq(best.n, 1);
  ck_assert_int_eq(best.items[0].id, ids[3]);
  ck_assert(best.items[0].updated >= best.items[0].created);
  db_records_free(&best);
  tn_err_t err = {0};
  ck_assert_int_eq(db_record_set_verified(db, bad[0].id, true, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "has status wrong_result; only ok records can be "
                                        "verified"));
  ck_assert_int_eq(db_record_set_verified(db, 12345, true, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "no record with id 12345");

  /* Unknown workload or target: no records, no error. */
  OK(db_best(db, WH("ffffffffffffffff"), "cpu", 3, &best, E));
  ck_assert_uint_eq(best.n, 0);
  db_records_free(&best);
  db_close(db);
  tmp_cleanup();
}
END_TEST

START_TEST(t_target_aware) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000a1"), "w");
  int64_t gpu = add_target(db, "nvidia/tesla-t4", "cuda");
  int64_t cpu = add_target(db, "cpu", "cpu");
  /* The same traces on both targets: stored twice, not deduplicated. */
  double on_gpu[3] = {1e-5, 2e-5, 3e-5}, on_cpu[3] = {3e-3, 1e-3, 2e-3};
  bool ver[3] = {true, true, true};
  int64_t gid[3], cid[3];
  add_medians(db, w, gpu, 0, on_gpu, ver, 3, gid);
  add_medians(db, w, cpu, 0, on_cpu, ver, 3, cid);
  for (int i = 0; i < 3; i++) ck_assert(gid[i] > 0 && cid[i] > 0);

  db_records_t best;
  OK(db_best(db, WH("00000000000000a1"), "cpu", 10, &best, E));
  ck_assert_uint_eq(best.n, 3);
  for (size_t i = 0; i < best.n; i++) {
    ck_assert_str_eq(best.items[i].target_name, "cpu");
    ck_assert_int_eq(best.items[i].target_id, cpu);
  }
  ck_assert_int_eq(best.items[0].id, cid[1]);
  db_records_free(&best);
  OK(db_best(db, WH("00000000000000a1"), "nvidia/tesla-t4", 10, &best, E));
  ck_assert_uint_eq(best.n, 3);
  ck_assert_int_eq(best.items[0].id, gid[0]);
  for (size_t i = 0; i < best.n; i++)
    ck_assert_str_eq(best.items[i].target_name, "nvidia/tesla-t4");
  db_records_free(&best);

  tn_err_t err = {0};
  ck_assert_int_eq(db_best(db, WH("00000000000000a1"), NULL, 1, &best, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "a target is required"));
  ck_assert_int_eq(db_best(db, WH("00000000000000a1"), "", 1, &best, &err), TN_EINVAL);

  /* Dedup is per (workload, target). */
  bool exists = true;
  char h[TN_ID_SIZE];
  char tr[96];
  db_record_t probe = rec(w, cpu, tr, 0, 1, DB_STATUS_OK, false);
  db_trace_hash(probe.trace, h);
  int64_t cpu2 = add_target(db, "cpu-other", "cpu");
  OK(db_record_exists(db, w, cpu, h, &exists, E));
  ck_assert(exists);
  OK(db_record_exists(db, w, cpu2, h, &exists, E));
  ck_assert(!exists);

  /* Queries: target, status, limit/offset. */
  db_query_t q = db_query_all();
  q.target_name = "nvidia/tesla-t4";
  db_records_t rs;
  OK(db_records_query(db, &q, &rs, E));
  ck_assert_uint_eq(rs.n, 3);
  ck_assert_int_eq(rs.items[0].id, gid[0]);
  db_records_free(&rs);
  q = db_query_all();
  q.workload_hash = WH("00000000000000a1");
  q.limit = 2;
  q.offset = 3;
  OK(db_records_query(db, &q, &rs, E));
  ck_assert_uint_eq(rs.n, 2); /* ordered by target name: cpu (3) then nvidia (3) */
  ck_assert_int_eq(rs.items[0].id, gid[0]);
  db_records_free(&rs);
  q = db_query_all();
  q.status = DB_STATUS_BUILD_ERROR;
  OK(db_records_query(db, &q, &rs, E));
  ck_assert_uint_eq(rs.n, 0);
  db_records_free(&rs);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* ---- jobs ------------------------------------------------------------------------ */

/* A version-4 database: its jobs keep working and gain an (empty) list of
 * trials; new trials are recorded in order and read back in order. */
START_TEST(t_job_trials) {
  const char *path = tmp_db("a.db");
  old_db(path, 4,
         "INSERT INTO workloads (hash, name, source, created) VALUES ('00000000000000d1', 'old', 'src', 1.0);"
         "INSERT INTO targets (name, kind, created) VALUES ('cpu', 'cpu', 1.0);"
         "INSERT INTO jobs (id, state, workload_id, target_id, budget_trials, seed, created, updated)"
         " VALUES (3, 'done', 1, 1, 8, 1, 1.0, 2.0);");
  db_t *db = open_migrated(path);
  db_job_trials_t got;
  OK(db_job_trials_get(db, 3, &got, E)); /* run before trials were kept */
  ck_assert_int_eq((int)got.n, 0);
  char b1[96], b2[96];
  db_record_t rs[2] = {rec(1, 1, b1, 1, 1e-3, DB_STATUS_OK, true), rec(1, 1, b2, 2, NAN, DB_STATUS_BUILD_ERROR, false)};
  OK(db_record_add_batch(db, rs, 2, NULL, E));
  db_job_trial_t ts[3] = {{2, rs[1].id, DB_STATUS_BUILD_ERROR, NAN, 100.5},
                          {1, rs[0].id, DB_STATUS_OK, 1e-3, 100.25},
                          {3, 0, DB_STATUS_OK, 2e-3, 101.0}};
  OK(db_job_trials_add(db, 3, ts, 3, E));
  OK(db_job_trials_get(db, 3, &got, E));
  ck_assert_int_eq((int)got.n, 3);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(got.items[i].trial, i + 1);
  ck_assert_int_eq(got.items[0].record_id, rs[0].id);
  ck_assert_int_eq(got.items[0].status, DB_STATUS_OK);
  ck_assert_double_eq(got.items[0].median_secs, 1e-3);
  ck_assert_double_eq(got.items[0].measured, 100.25);
  ck_assert_int_eq(got.items[1].status, DB_STATUS_BUILD_ERROR);
  ck_assert(isnan(got.items[1].median_secs));
  ck_assert_int_eq(got.items[2].record_id, 0);
  db_job_trials_free(&got);
  OK(db_job_trials_get(db, 4, &got, E));
  ck_assert_int_eq((int)got.n, 0);

  /* a trial number twice, an unknown job or record, ok without a time */
  tn_err_t err = {0};
  db_job_trial_t again = {3, 0, DB_STATUS_OK, 1e-3, 102.0};
  ck_assert_int_eq(db_job_trials_add(db, 3, &again, 1, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "job 3 trial 3: recording a job's trial: UNIQUE constraint failed"), "%s", err.msg);
  db_job_trial_t one = {1, 0, DB_STATUS_OK, 1e-3, 102.0};
  ck_assert_int_eq(db_job_trials_add(db, 99, &one, 1, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "job 99 trial 1: recording a job's trial: FOREIGN KEY constraint failed"), "%s",
                err.msg);
  db_job_trial_t norec = {4, 4242, DB_STATUS_OK, 1e-3, 102.0}, notime = {4, 0, DB_STATUS_OK, NAN, 102.0};
  ck_assert_int_eq(db_job_trials_add(db, 3, &norec, 1, &err), TN_EINVAL);
  ck_assert_int_eq(db_job_trials_add(db, 3, &notime, 1, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "CHECK constraint failed"), "%s", err.msg);
  OK(db_job_trials_get(db, 3, &got, E));
  ck_assert_int_eq((int)got.n, 3);
  db_job_trials_free(&got);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* A job's first failed trial: the lowest-numbered one that failed to build,
 * run, finish or verify (too_slow and ok do not count), with its record's
 * error text; none while no trial failed; a trial without a record has no
 * text. */
START_TEST(t_job_first_failure) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000f1"), "w"), t = add_target(db, "cpu", "cpu");
  db_job_t job = {.workload_id = w, .target_id = t, .budget_trials = 8, .options = "{}"};
  OK(db_job_create(db, &job, E));
  tn_arena_t *a = tn_arena_new();
  db_job_trial_t got;
  const char *error = "x";
  bool found = true;
  OK(db_job_first_failure(db, job.id, &got, &error, &found, a, E));
  ck_assert(!found && error == NULL);
  char b[4][96];
  db_record_t rs[4] = {rec(w, t, b[0], 1, 1e-3, DB_STATUS_OK, true), rec(w, t, b[1], 2, 2e-3, DB_STATUS_TOO_SLOW, false),
                       rec(w, t, b[2], 3, NAN, DB_STATUS_BUILD_ERROR, false),
                       rec(w, t, b[3], 4, NAN, DB_STATUS_RUN_ERROR, false)};
  rs[2].error = "cc failed (status 1) compiling cand.c:\ncand.c:3: error: 'pipe' redeclared";
  rs[3].error = "worker crashed (signal 11)";
  OK(db_record_add_batch(db, rs, 4, NULL, E));
  db_job_trial_t ts[2] = {{1, rs[0].id, DB_STATUS_OK, 1e-3, 100.0}, {2, rs[1].id, DB_STATUS_TOO_SLOW, NAN, 100.5}};
  OK(db_job_trials_add(db, job.id, ts, 2, E));
  OK(db_job_first_failure(db, job.id, &got, &error, &found, a, E));
  ck_assert(!found); /* ok and too_slow are no failures */
  /* trial 4 (a run error) is recorded before trial 3 (a build error): the order is the trials' */
  db_job_trial_t more[3] = {{4, rs[3].id, DB_STATUS_RUN_ERROR, NAN, 101.0},
                            {3, rs[2].id, DB_STATUS_BUILD_ERROR, NAN, 100.75},
                            {5, 0, DB_STATUS_TIMEOUT, NAN, 101.5}};
  OK(db_job_trials_add(db, job.id, more, 3, E));
  OK(db_job_first_failure(db, job.id, &got, &error, &found, a, E));
  ck_assert(found);
  ck_assert_int_eq(got.trial, 3);
  ck_assert_int_eq(got.record_id, rs[2].id);
  ck_assert_int_eq(got.status, DB_STATUS_BUILD_ERROR);
  ck_assert_str_eq(error, "cc failed (status 1) compiling cand.c:\ncand.c:3: error: 'pipe' redeclared");
  /* another job's trials are not this one's; a trial without a record has no text */
  db_job_t other = job;
  OK(db_job_create(db, &other, E));
  db_job_trial_t lone = {1, 0, DB_STATUS_TIMEOUT, NAN, 102.0};
  OK(db_job_trials_add(db, other.id, &lone, 1, E));
  OK(db_job_first_failure(db, other.id, &got, &error, &found, a, E));
  ck_assert(found && got.trial == 1 && got.status == DB_STATUS_TIMEOUT && got.record_id == 0 && error == NULL);
  OK(db_job_first_failure(db, 9999, &got, &error, &found, a, E));
  ck_assert(!found);
  tn_arena_free(a);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* The shared job queue: a plan made once, leases that skip what is leased,
 * lapse and pass on, lost leases refused at commit, the last batch after
 * the measurement batches, nothing for another target or a finished job. */
static void add_trials(db_t *db, int64_t job, int64_t from, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    db_job_trial_t t = {from + i, 0, DB_STATUS_BUILD_ERROR, NAN, 100.0};
    OK(db_job_trials_add(db, job, &t, 1, E));
  }
}

/* The holder commits trials from..from+n-1 of its batch b, with the lease
 * check, in one transaction (as a daemon's search does). */
static void commit_trials(db_t *db, const db_batch_t *b, const char *holder, double lease_s, int64_t from, int64_t n) {
  OK(db_tx_begin(db, E));
  add_trials(db, b->job_id, from, n);
  OK(db_batch_commit_check(db, b, holder, lease_s, E));
  OK(db_tx_commit(db, E));
}

static void lease(db_t *db, int64_t target, const char *holder, double lease_s, int64_t want_batch, db_batch_t *b) {
  bool found = false;
  OK(db_batch_lease(db, target, 0, holder, lease_s, b, &found, E));
  ck_assert_msg(found == (want_batch >= 0), "%s leased batch %lld (found %d), wanted %lld", holder,
                (long long)b->batch, found, (long long)want_batch);
  if (found) ck_assert_int_eq(b->batch, want_batch);
}

START_TEST(t_batches) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000b1"), "w");
  int64_t t = add_target(db, "cpu", "cpu"), other = add_target(db, "gpu", "cuda");
  db_job_t job = {.workload_id = w, .target_id = t, .budget_trials = 10, .seed = 1};
  OK(db_job_create(db, &job, E));
  size_t n = 0;
  OK(db_job_batches_plan(db, job.id, 4, &n, E));
  ck_assert_int_eq((int)n, 4); /* 4 + 4 + 2 trials, then the last batch */
  OK(db_job_batches_plan(db, job.id, 3, &n, E));
  ck_assert_int_eq((int)n, 4); /* planned once */
  db_batches_t bs;
  OK(db_job_batches_get(db, job.id, &bs, E));
  ck_assert_int_eq(bs.items[2].first_trial, 9);
  ck_assert_int_eq(bs.items[2].trials, 2);
  ck_assert_int_eq(bs.items[3].trials, 0);
  ck_assert_int_eq(bs.items[3].state, DB_BATCH_QUEUED);
  db_batches_free(&bs);

  db_batch_t a0, b1, b2, c1, none;
  lease(db, t, "a", 60, 0, &a0);
  lease(db, t, "b", 0.05, 1, &b1);
  lease(db, t, "b", 60, 2, &b2);
  lease(db, t, "a", 60, -1, &none); /* the last batch waits for the others */
  int64_t ids[4];
  OK(db_batch_jobs_open(db, "cpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 0);
  lease(db, other, "g", 60, -1, &none);

  /* a commits batch 0; b cannot commit into a's lease */
  commit_trials(db, &a0, "a", 60, 1, 4);
  tn_err_t err = {0};
  ck_assert_int_eq(db_batch_commit_check(db, &a0, "b", 60, &err), TN_ESTATE);
  ck_assert_msg(strstr(err.msg, "batch 0: the lease is lost"), "%s", err.msg);
  OK(db_batch_done(db, &a0, "a", E));
  tn_arena_t *ar = tn_arena_new();
  db_job_t got;
  OK(db_job_get(db, job.id, &got, ar, E));
  ck_assert_int_eq(got.trials_done, 4);

  /* b's short lease lapses after 2 trials: c takes batch 1 and measures the rest */
  commit_trials(db, &b1, "b", 0.05, 5, 2);
  usleep(120 * 1000);
  OK(db_batch_jobs_open(db, "cpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 1);
  ck_assert_int_eq(ids[0], job.id);
  OK(db_batch_jobs_open(db, "gpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 0);
  lease(db, t, "c", 60, 1, &c1);
  ck_assert_int_eq(c1.leases, 2);
  int64_t have = 0;
  OK(db_batch_committed(db, &c1, &have, E));
  ck_assert_int_eq(have, 2);
  ck_assert_int_eq(db_batch_renew(db, &b1, "b", 60, &err), TN_ESTATE);
  ck_assert_int_eq(db_batch_done(db, &b1, "b", &err), TN_ESTATE);
  commit_trials(db, &c1, "c", 60, 7, 2);
  OK(db_batch_done(db, &c1, "c", E));

  /* b stops: batch 2 goes back to the queue and a takes it */
  OK(db_batch_release(db, &b2, "b", E));
  db_batch_t a2, last;
  lease(db, t, "a", 60, 2, &a2);
  commit_trials(db, &a2, "a", 60, 9, 2);
  OK(db_batch_done(db, &a2, "a", E));
  lease(db, t, "b", 60, 3, &last);
  OK(db_batch_renew(db, &last, "b", 60, E));

  OK(db_job_batches_get(db, job.id, &bs, E));
  const char *by[] = {"a", "c", "a", "b"};
  const int64_t done[] = {4, 4, 2, 0};
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(bs.items[i].leased_by, by[i]);
    ck_assert_int_eq(bs.items[i].state, i < 3 ? DB_BATCH_DONE : DB_BATCH_LEASED);
    ck_assert_int_eq(bs.items[i].trials_done, done[i]);
  }
  db_batches_free(&bs);
  OK(db_job_get(db, job.id, &got, ar, E));
  ck_assert_int_eq(got.trials_done, 10);
  OK(db_batch_jobs_open(db, "cpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 0);

  /* a finished job's lease is lost and nothing of it is leased */
  OK(db_job_update(db, job.id, &(db_job_progress_t){DB_JOB_CANCELLED, -1, 0, NULL}, E));
  ck_assert_int_eq(db_batch_renew(db, &last, "b", 60, &err), TN_ESTATE);
  OK(db_batch_release(db, &last, "b", E));
  lease(db, t, "a", 60, -1, &none);
  ck_assert_int_eq(db_job_batches_plan(db, job.id, 0, &n, &err), TN_EINVAL);
  ck_assert_int_eq(db_batch_lease(db, t, 0, "", 60, &none, &(bool){false}, &err), TN_EINVAL);
  OK(db_check(db, E));

  /* a job without a plan yet (submitted to a daemon of another target) is
   * open to its target's daemons only; the last batch's done ends it */
  db_job_t three = {.workload_id = w, .target_id = t, .budget_trials = 2, .seed = 3};
  OK(db_job_create(db, &three, E));
  OK(db_batch_jobs_open(db, "cpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 1);
  ck_assert_int_eq(ids[0], three.id);
  OK(db_batch_jobs_open(db, "gpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 0);
  OK(db_job_batches_plan(db, three.id, 2, &n, E));
  db_batch_t t0, t1;
  lease(db, t, "a", 60, 0, &t0);
  commit_trials(db, &t0, "a", 60, 1, 2);
  OK(db_batch_done(db, &t0, "a", E));
  OK(db_job_get(db, three.id, &got, ar, E));
  ck_assert_int_eq(got.state, DB_JOB_QUEUED);
  lease(db, t, "b", 60, 1, &t1);
  OK(db_batch_done(db, &t1, "b", E));
  OK(db_job_get(db, three.id, &got, ar, E));
  ck_assert_int_eq(got.state, DB_JOB_DONE);
  ck_assert_int_eq(got.trials_done, 2);
  ck_assert(got.finished > 0);
  OK(db_batch_jobs_open(db, "cpu", ids, 4, &n, E));
  ck_assert_int_eq((int)n, 0);
  OK(db_check(db, E));

  /* db_check sees a done job whose batches are not */
  db_job_t two = {.workload_id = w, .target_id = t, .budget_trials = 4, .seed = 2};
  OK(db_job_create(db, &two, E));
  OK(db_job_batches_plan(db, two.id, 4, &n, E));
  OK(db_job_update(db, two.id, &(db_job_progress_t){DB_JOB_RUNNING, -1, 0, NULL}, E));
  OK(db_job_update(db, two.id, &(db_job_progress_t){DB_JOB_DONE, -1, 0, NULL}, E));
  ck_assert_int_eq(db_check(db, &err), TN_EIO);
  ck_assert_msg(strstr(err.msg, "2 batches of the job queue disagree"), "%s", err.msg);
  tn_arena_free(ar);
  db_close(db);
  tmp_cleanup();
}
END_TEST

START_TEST(t_jobs) {
  const char *path = tmp_db("a.db");
  db_t *db = open_ok(path);
  int64_t w = add_workload(db, WH("00000000000000a1"), "w");
  int64_t t = add_target(db, "cpu", "cpu");
  db_job_t a = {.workload_id = w, .target_id = t, .budget_trials = 64, .budget_seconds = 30,
                .seed = 0xfedcba9876543210ULL, .options = "{\"strategy\": \"evolutionary\"}"};
  db_job_t b = a, c = a;
  c.owner = "host-2:/run/tuned.sock"; /* a daemon of a shared database */
  OK(db_job_create(db, &a, E));
  OK(db_job_create(db, &b, E));
  OK(db_job_create(db, &c, E));
  ck_assert_int_eq(a.state, DB_JOB_QUEUED);
  ck_assert_int_lt(a.id, b.id);

  tn_arena_t *ar = tn_arena_new();
  db_job_t got;
  OK(db_job_get(db, a.id, &got, ar, E));
  ck_assert_int_eq(got.state, DB_JOB_QUEUED);
  ck_assert_str_eq(got.workload_hash, WH("00000000000000a1"));
  ck_assert_str_eq(got.target_name, "cpu");
  ck_assert(got.seed == 0xfedcba9876543210ULL);
  ck_assert_str_eq(got.options, "{\"strategy\":\"evolutionary\"}");
  ck_assert_double_eq(got.started, 0);
  ck_assert_ptr_null(got.error);

  /* a: queued -> running with progress -> done */
  db_job_progress_t p = {.state = DB_JOB_RUNNING, .trials_done = 16};
  OK(db_job_update(db, a.id, &p, E));
  double med[1] = {1e-3};
  bool ver[1] = {true};
  int64_t rid;
  add_medians(db, w, t, 0, med, ver, 1, &rid);
  p = (db_job_progress_t){.state = DB_JOB_RUNNING, .trials_done = 32, .best_record_id = rid};
  OK(db_job_update(db, a.id, &p, E));
  OK(db_job_get(db, a.id, &got, ar, E));
  ck_assert_int_eq(got.trials_done, 32);
  ck_assert_int_eq(got.best_record_id, rid);
  ck_assert(got.started > 0 && got.finished == 0);
  double started = got.started;
  tn_err_t err = {0};
  p = (db_job_progress_t){.state = DB_JOB_RUNNING, .trials_done = 8};
  ck_assert_int_eq(db_job_update(db, a.id, &p, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "trials_done cannot go back from 32 to 8"));
  p = (db_job_progress_t){.state = DB_JOB_RUNNING, .trials_done = -1, .best_record_id = 999};
  ck_assert_int_eq(db_job_update(db, a.id, &p, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "best record id 999 is not in the database"));
  p = (db_job_progress_t){.state = DB_JOB_DONE, .trials_done = 64};
  OK(db_job_update(db, a.id, &p, E));
  OK(db_job_get(db, a.id, &got, ar, E));
  ck_assert_int_eq(got.state, DB_JOB_DONE);
  ck_assert_int_eq(got.best_record_id, rid); /* kept */
  ck_assert_double_eq(got.started, started);
  ck_assert(got.finished >= got.started);
  p = (db_job_progress_t){.state = DB_JOB_RUNNING, .trials_done = -1};
  ck_assert_int_eq(db_job_update(db, a.id, &p, &err), TN_ESTATE);
  ck_assert_str_eq(err.msg, "job 1 is done and cannot become running (a finished job does not "
                            "change)");

  /* b: queued cannot be done directly; running -> queued (requeue) is fine. */
  p = (db_job_progress_t){.state = DB_JOB_DONE, .trials_done = -1};
  ck_assert_int_eq(db_job_update(db, b.id, &p, &err), TN_ESTATE);
  p = (db_job_progress_t){.state = DB_JOB_RUNNING, .trials_done = 5};
  OK(db_job_update(db, b.id, &p, E));
  p = (db_job_progress_t){.state = DB_JOB_QUEUED, .trials_done = -1};
  OK(db_job_update(db, b.id, &p, E));

  /* What a restarted daemon resumes: b (queued, 5 trials done) and c. */
  db_jobs_t js;
  OK(db_jobs_unfinished(db, NULL, &js, E));
  ck_assert_uint_eq(js.n, 2);
  ck_assert_int_eq(js.items[0].id, b.id);
  ck_assert_int_eq(js.items[0].trials_done, 5);
  ck_assert_int_eq(js.items[1].id, c.id);
  ck_assert_ptr_null(js.items[0].owner);
  ck_assert_str_eq(js.items[1].owner, "host-2:/run/tuned.sock");
  db_jobs_free(&js);
  /* each daemon of a shared database resumes its own */
  OK(db_jobs_unfinished(db, "host-2:/run/tuned.sock", &js, E));
  ck_assert_uint_eq(js.n, 1);
  ck_assert_int_eq(js.items[0].id, c.id);
  db_jobs_free(&js);
  OK(db_jobs_unfinished(db, "host-3:/run/tuned.sock", &js, E));
  ck_assert_uint_eq(js.n, 0);
  db_jobs_free(&js);

  /* c: cancelled with a reason; b: failed. */
  p = (db_job_progress_t){.state = DB_JOB_CANCELLED, .trials_done = -1,
                          .error = "cancelled by user"};
  OK(db_job_update(db, c.id, &p, E));
  p = (db_job_progress_t){.state = DB_JOB_FAILED, .trials_done = -1, .error = "no valid candidate"};
  OK(db_job_update(db, b.id, &p, E));
  OK(db_jobs_unfinished(db, NULL, &js, E));
  ck_assert_uint_eq(js.n, 0);
  db_jobs_free(&js);
  OK(db_job_list(db, 0, 0, &js, E));
  ck_assert_uint_eq(js.n, 3);
  ck_assert_int_eq(js.items[0].id, c.id); /* newest first */
  ck_assert_int_eq(js.items[0].state, DB_JOB_CANCELLED);
  ck_assert_str_eq(js.items[0].error, "cancelled by user");
  ck_assert_int_eq(js.items[1].state, DB_JOB_FAILED);
  ck_assert_int_eq(js.items[2].state, DB_JOB_DONE);
  db_jobs_free(&js);
  OK(db_job_list(db, 1, 2, &js, E));
  ck_assert_uint_eq(js.n, 1);
  ck_assert_int_eq(js.items[0].id, a.id);
  db_jobs_free(&js);

  ck_assert_int_eq(db_job_get(db, 42, &got, ar, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "no job with id 42");
  db_job_t bad = {.workload_id = 77, .target_id = t, .budget_trials = 1};
  ck_assert_int_eq(db_job_create(db, &bad, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "workload id 77 or target id"));
  bad = (db_job_t){.workload_id = w, .target_id = t, .budget_trials = -3};
  ck_assert_int_eq(db_job_create(db, &bad, &err), TN_EINVAL);
  db_job_state_t s;
  ck_assert_int_eq(db_job_state_parse("paused", &s, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "valid: queued, running, done, cancelled, failed"));
  tn_arena_free(ar);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* ---- export / import -------------------------------------------------------------- */

/* A varied database: two workloads, two targets, every status, optional
 * fields set and unset, a pretty multi-line trace with escapes. */
static void populate(db_t *db) {
  int64_t w1 = add_workload(db, WH("00000000000000a1"), "matmul");
  int64_t w2 = add_workload(db, WH("00000000000000b2"), "softmax \"v2\"");
  int64_t t1 = add_target(db, "nvidia/tesla-t4", "cuda");
  int64_t t2 = add_target(db, "cpu", "cpu");
  char tr[6][96];
  db_record_t rs[6] = {
      rec(w1, t1, tr[0], 1, 1.25e-4, DB_STATUS_OK, true),
      rec(w1, t2, tr[1], 1, 0.1 + 0.2, DB_STATUS_OK, false),
      rec(w1, t1, tr[2], 2, NAN, DB_STATUS_BUILD_ERROR, false),
      rec(w2, t1, tr[3], 3, 7e-3, DB_STATUS_WRONG_RESULT, false),
      rec(w2, t2, tr[4], 4, 2.5, DB_STATUS_TIMEOUT, false),
      rec(w2, t2, tr[5], 5, 1.0 / 3.0, DB_STATUS_OK, true),
  };
  rs[0].trace = "{\n  \"version\": 1,\n  \"trace\": [\n"
                "    {\"kind\": \"split\", \"name\": \"t\\u00e9\\n\"}\n  ]\n}\n";
  rs[0].registers = 64;
  rs[0].shared_bytes = 8192;
  rs[0].spill_bytes = 0;
  rs[0].compiler = "nvrtc";
  rs[0].toolkit_version = "13.0";
  rs[0].arch = "sm_75";
  rs[2].error = "line 3: error: identifier \"x\" is undefined\n\ttab";
  OK(db_record_add_batch(db, rs, 6, NULL, E));
}

static char *export_all(db_t *db) {
  tn_buf_t b;
  tn_buf_init(&b);
  OK(db_export_jsonl(db, NULL, &b, E));
  return tn_buf_take(&b);
}

/* Splits text into lines (pointers into a copy; caller frees both). */
static size_t split_lines(char *text, char **lines, size_t max) {
  size_t n = 0;
  for (char *s = strtok(text, "\n"); s && n < max; s = strtok(NULL, "\n")) lines[n++] = s;
  return n;
}

START_TEST(t_export_import) {
  const char *path = tmp_db("a.db");
  db_t *a = open_ok(path);
  populate(a);
  char *text1 = export_all(a);
  char *copy = tn_xstrdup(text1);
  char *lines[16];
  ck_assert_uint_eq(split_lines(copy, lines, 16), 6);
  /* Ordered by workload hash, target name, trace hash; every field there. */
  const char *head = "{\"workload\":{\"hash\":\"" WH("00000000000000a1") "\",\"name\":\"matmul\","
                     "\"source\":\"C[i] = A[i] + 1\",\"params\":{\"N\":64},\"flops\":64,"
                     "\"bytes\":512},\"target\":{\"name\":\"cpu\",\"kind\":\"cpu\",";
  ck_assert_msg(strncmp(lines[0], head, strlen(head)) == 0, "line 1: %s", lines[0]);
  ck_assert_ptr_nonnull(strstr(text1, "\"trace\":\"{\\n  \\\"version\\\": 1,"));
  ck_assert_ptr_nonnull(strstr(text1, "\"registers\":64,\"shared_bytes\":8192,\"spill_bytes\":0,"
                                      "\"compiler\":\"nvrtc\",\"toolkit_version\":\"13.0\","
                                      "\"arch\":\"sm_75\",\"verified\":true"));
  ck_assert_ptr_nonnull(strstr(text1, "\"median_secs\":null,\"status\":\"build_error\""));
  ck_assert_ptr_nonnull(strstr(text1, "\"median_secs\":0.30000000000000004"));

  /* Into a fresh database: the same text comes back. */
  char pathb[160];
  snprintf(pathb, sizeof pathb, "%s/b.db", tmp_dir);
  db_t *b = open_ok(pathb);
  db_import_stats_t st;
  OK(db_import_jsonl(b, text1, strlen(text1), &st, E));
  ck_assert_uint_eq(st.lines, 6);
  ck_assert_uint_eq(st.workloads_added, 2);
  ck_assert_uint_eq(st.targets_added, 2);
  ck_assert_uint_eq(st.inserted, 6);
  ck_assert_uint_eq(st.duplicates, 0);
  char *text2 = export_all(b);
  ck_assert_str_eq(text2, text1);

  /* Importing again merges nothing new. */
  OK(db_import_jsonl(b, text1, strlen(text1), &st, E));
  ck_assert_uint_eq(st.inserted, 0);
  ck_assert_uint_eq(st.duplicates, 6);
  ck_assert_uint_eq(st.workloads_added, 0);
  free(text2);
  text2 = export_all(b);
  ck_assert_str_eq(text2, text1);
  db_close(b);
  rm_db(pathb);

  /* Lines in reverse order, with blank lines and CRLF: same export. */
  tn_buf_t rev;
  tn_buf_init(&rev);
  for (int i = 5; i >= 0; i--) tn_buf_printf(&rev, "%s\r\n\n", lines[i]);
  b = open_ok(pathb);
  OK(db_import_jsonl(b, rev.data, rev.len, &st, E));
  ck_assert_uint_eq(st.inserted, 6);
  free(text2);
  text2 = export_all(b);
  ck_assert_str_eq(text2, text1);

  /* The trace hash survived: the search's dedup still recognizes it. */
  db_records_t best;
  OK(db_best(b, WH("00000000000000a1"), "nvidia/tesla-t4", 1, &best, E));
  ck_assert_uint_eq(best.n, 1);
  char h[TN_ID_SIZE];
  db_trace_hash(best.items[0].trace, h);
  ck_assert_str_eq(h, best.items[0].trace_hash);
  ck_assert_ptr_nonnull(strstr(best.items[0].trace, "\"t\\u00e9\\n\""));
  db_records_free(&best);

  /* A filtered export. */
  db_query_t q = db_query_all();
  q.target_name = "cpu";
  tn_buf_t part;
  tn_buf_init(&part);
  OK(db_export_jsonl(b, &q, &part, E));
  size_t n = 0;
  for (size_t i = 0; i < part.len; i++) n += part.data[i] == '\n';
  ck_assert_uint_eq(n, 3);
  ck_assert_ptr_null(strstr(part.data, "tesla-t4"));
  tn_buf_free(&part);
  tn_buf_free(&rev);
  free(text1);
  free(text2);
  free(copy);
  db_close(b);
  rm_db(pathb);
  db_close(a);
  tmp_cleanup();
}
END_TEST

/* Imports good lines plus `bad` as line 4 and expects the import to fail
 * naming line 4 with `want` in the message, leaving the database empty. */
static void expect_bad_line(db_t *db, const char *path, char **good, const char *bad,
                            const char *want) {
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_printf(&b, "%s\n\n%s\n%s\n%s\n", good[0], good[1], bad, good[2]);
  tn_err_t err = {0};
  db_import_stats_t st;
  ck_assert_int_eq(db_import_jsonl(db, b.data, b.len, &st, &err), TN_EINVAL);
  ck_assert_int_eq(err.line, 4);
  ck_assert_msg(strncmp(err.msg, "line 4: ", 8) == 0, "message: %s", err.msg);
  ck_assert_msg(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM records"), 0);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM workloads"), 0);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM targets"), 0);
  tn_buf_free(&b);
}

/* Replaces the first occurrence of `from` in line by `to` (static result). */
static const char *edit(const char *line, const char *from, const char *to) {
  static char out[8192];
  const char *at = strstr(line, from);
  ck_assert_ptr_nonnull(at);
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - line), line, to, at + strlen(from));
  return out;
}

START_TEST(t_import_bad_line) {
  const char *path = tmp_db("a.db");
  db_t *a = open_ok(path);
  populate(a);
  char *text = export_all(a);
  db_close(a);
  rm_db(path);
  char *lines[16];
  ck_assert_uint_eq(split_lines(text, lines, 16), 6);
  db_t *db = open_ok(path);
  expect_bad_line(db, path, lines, "{\"workload\": {", "invalid JSON near column");
  expect_bad_line(db, path, lines, "[1, 2]", "expected a JSON object");
  expect_bad_line(db, path, lines, edit(lines[3], "\"status\":\"", "\"status\":\"x"),
                  "unknown record status");
  expect_bad_line(db, path, lines, edit(lines[3], "\"hash\":\"0", "\"hash\":\"Z"),
                  "64 lower-case hex digits");
  expect_bad_line(db, path, lines, edit(lines[3], "\"trace_hash\":\"", "\"trace_hash\":\"1"),
                  "does not match the trace");
  expect_bad_line(db, path, lines, edit(lines[3], "\"run_secs\":[", "\"run_secs\":[\"a\","),
                  "field 'run_secs' must hold numbers only");
  expect_bad_line(db, path, lines, edit(lines[3], "\"workload\":", "\"wl\":"),
                  "field 'workload' must be an object");
  expect_bad_line(db, path, lines, edit(lines[3], "\"name\":\"cpu\"", "\"name\":7"),
                  "field 'target.name' must be a string");
  /* After all that, a clean import works. */
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < 6; i++) tn_buf_printf(&b, "%s\n", lines[i]);
  OK(db_import_jsonl(db, b.data, b.len, NULL, E));
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM records"), 6);
  tn_buf_free(&b);
  free(text);
  db_close(db);
  tmp_cleanup();
}
END_TEST

/* ---- two connections in two threads -------------------------------------------------- */

typedef struct shared {
  const char *path;
  atomic_int writer_done;
  int batches, per_batch;
  char writer_err[TN_ERR_MSG_MAX], reader_err[TN_ERR_MSG_MAX];
  long reads, last_best;
} shared_t;

static void *writer(void *arg) {
  shared_t *s = arg;
  tn_err_t err = {0};
  db_t *db = NULL;
  int64_t w = 0, t = 0;
  db_workload_t wl = {.hash = WH("00000000000000c1"), .name = "conc", .source = "x"};
  db_target_t tg = {.name = "cpu", .kind = "cpu"};
  if (db_open(s->path, &db, &err) || db_workload_upsert(db, &wl, &w, &err) ||
      db_target_upsert(db, &tg, &t, &err)) {
    snprintf(s->writer_err, sizeof s->writer_err, "setup: %.900s", err.msg);
    goto out;
  }
  tn_rng_t rng;
  tn_rng_seed(&rng, 7);
  char (*tr)[64] = calloc((size_t)s->per_batch, sizeof *tr);
  db_record_t *rs = calloc((size_t)s->per_batch, sizeof *rs);
  for (int b = 0; b < s->batches && !s->writer_err[0]; b++) {
    for (int i = 0; i < s->per_batch; i++) {
      db_record_init(&rs[i]);
      snprintf(tr[i], sizeof tr[i], "{\"b\":%d,\"i\":%d}", b, i);
      rs[i].workload_id = w;
      rs[i].target_id = t;
      rs[i].trace = tr[i];
      rs[i].median_secs = 1e-3 + tn_rng_double(&rng);
      rs[i].verified = i % 2 == 0;
    }
    if (db_record_add_batch(db, rs, (size_t)s->per_batch, NULL, &err))
      snprintf(s->writer_err, sizeof s->writer_err, "batch %d: %.900s", b, err.msg);
  }
  free(rs);
  free(tr);
out:
  db_close(db);
  atomic_store(&s->writer_done, 1);
  return NULL;
}

/* Checks one db_best answer: at most k, sorted, verified ok only. */
static const char *bad_best(const db_records_t *r, size_t k) {
  if (r->n > k) return "more than k records";
  for (size_t i = 0; i < r->n; i++) {
    if (!r->items[i].verified || r->items[i].status != DB_STATUS_OK) return "unverified record";
    if (i && r->items[i - 1].median_secs > r->items[i].median_secs) return "not sorted";
  }
  return NULL;
}

static void *reader(void *arg) {
  shared_t *s = arg;
  tn_err_t err = {0};
  db_t *db = NULL;
  if (db_open(s->path, &db, &err)) {
    snprintf(s->reader_err, sizeof s->reader_err, "open: %.900s", err.msg);
    return NULL;
  }
  for (int last = 0; !last && !s->reader_err[0];) {
    last = atomic_load(&s->writer_done); /* one more read after the writer finished */
    db_records_t r;
    if (db_best(db, WH("00000000000000c1"), "cpu", 10, &r, &err)) {
      snprintf(s->reader_err, sizeof s->reader_err, "best: %.900s", err.msg);
      break;
    }
    const char *why = bad_best(&r, 10);
    if (why) snprintf(s->reader_err, sizeof s->reader_err, "best: %.900s", why);
    s->last_best = (long)r.n;
    s->reads++;
    db_records_free(&r);
  }
  db_close(db);
  return NULL;
}

START_TEST(t_concurrent) {
  const char *path = tmp_db("a.db");
  db_close(open_ok(path)); /* schema made once, so the threads race on data only */
  shared_t s = {.path = path, .batches = 60, .per_batch = 25};
  pthread_t tw, tr;
  pthread_create(&tr, NULL, reader, &s);
  pthread_create(&tw, NULL, writer, &s);
  pthread_join(tw, NULL);
  pthread_join(tr, NULL);
  ck_assert_msg(!s.writer_err[0], "writer: %s", s.writer_err);
  ck_assert_msg(!s.reader_err[0], "reader: %s", s.reader_err);
  ck_assert_int_gt(s.reads, 1);
  ck_assert_int_eq(s.last_best, 10);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM records"), 60 * 25);
  tmp_cleanup();
}
END_TEST

/* ---- read-only connections ---------------------------------------------------------- */

typedef struct timed_best {
  db_t *db;
  db_records_t best;
  int rc;
  tn_err_t err;
  double secs;
  atomic_int done;
} timed_best_t;

static void *best_thread(void *arg) {
  timed_best_t *b = arg;
  double t0 = tn_now();
  b->rc = db_best(b->db, WH("00000000000000d1"), "cpu", 5, &b->best, &b->err);
  b->secs = tn_now() - t0;
  atomic_store(&b->done, 1);
  return NULL;
}

/* The daemon's read path: a read-only connection reads the last commit at
 * once while another connection holds a write transaction (BEGIN IMMEDIATE
 * and an uncommitted, faster record).  The read runs in a thread and the
 * wait for it is bounded: a read that waited on the writer fails the test
 * (after the writer is released) instead of hanging it. */
START_TEST(t_read_while_writing) {
  const char *path = tmp_db("a.db");
  db_t *w = open_ok(path);
  int64_t wl = add_workload(w, WH("00000000000000d1"), "d");
  int64_t t = add_target(w, "cpu", "cpu");
  char tr[2][96];
  db_record_t committed = rec(wl, t, tr[0], 1, 2e-3, DB_STATUS_OK, true);
  OK(db_record_add_batch(w, &committed, 1, NULL, E));
  db_t *r = NULL;
  OK(db_open_readonly(path, &r, E));

  OK(db_tx_begin(w, E)); /* BEGIN IMMEDIATE: the write lock, held */
  db_record_t pending = rec(wl, t, tr[1], 2, 1e-3, DB_STATUS_OK, true);
  OK(db_record_add_batch(w, &pending, 1, NULL, E));
  timed_best_t b = {.db = r};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, best_thread, &b), 0);
  double t0 = tn_now();
  while (!atomic_load(&b.done) && tn_now() - t0 < 2.0) usleep(1000);
  bool prompt = atomic_load(&b.done);
  OK(db_tx_commit(w, E)); /* releases a reader that waited, so the join below ends */
  pthread_join(th, NULL);
  ck_assert_msg(prompt, "the read waited on the writer's transaction (%.3f s)", b.secs);
  ck_assert_msg(b.rc == 0, "db_best: %s", b.err.msg);
  ck_assert_msg(b.secs < 1.0, "the read took %.3f s", b.secs);
  ck_assert_uint_eq(b.best.n, 1); /* the committed state only */
  ck_assert_int_eq(b.best.items[0].id, committed.id);
  ck_assert_double_eq(b.best.items[0].median_secs, 2e-3);
  db_records_free(&b.best);

  /* After the commit the same connection sees the new best. */
  OK(db_best(r, WH("00000000000000d1"), "cpu", 5, &b.best, E));
  ck_assert_uint_eq(b.best.n, 2);
  ck_assert_int_eq(b.best.items[0].id, pending.id);
  ck_assert_uint_eq(b.best.items[0].n_runs, 3);
  ck_assert_double_eq(b.best.items[0].run_secs[0], 3e-3);
  ck_assert_ptr_null(b.best.items[0].run_secs_text);
  db_records_free(&b.best);
  /* The run times as stored, for a reader that passes them on as JSON. */
  db_set_run_secs_text(r, true);
  OK(db_best(r, WH("00000000000000d1"), "cpu", 5, &b.best, E));
  ck_assert_uint_eq(b.best.n, 2);
  ck_assert_uint_eq(b.best.items[0].n_runs, 0);
  ck_assert_ptr_null(b.best.items[0].run_secs);
  ck_assert_str_eq(b.best.items[0].run_secs_text, "[0.0030000000000000001,0.001,0.002]");
  db_records_free(&b.best);

  /* It never writes. */
  tn_err_t err = {0};
  int64_t id;
  db_workload_t nw = {.hash = WH("00000000000000d2"), .name = "x", .source = "x"};
  ck_assert_int_eq(db_workload_upsert(r, &nw, &id, &err), TN_EIO);
  ck_assert_msg(strstr(err.msg, "readonly") || strstr(err.msg, "read-only") || strstr(err.msg, "query_only"), "%s",
                err.msg);
  db_close(r);
  db_close(w);
  ck_assert_int_eq(count_rows(path, "SELECT count(*) FROM workloads"), 1);
  tmp_cleanup();
}
END_TEST

/* What a read-only open refuses, with db_open's checks and more. */
START_TEST(t_readonly_refusals) {
  const char *path = tmp_db("a.db");
  tn_err_t err = {0};
  db_t *r = NULL;
  /* A missing file is not created. */
  ck_assert_int_eq(db_open_readonly(path, &r, &err), TN_EIO);
  ck_assert_ptr_null(r);
  ck_assert_msg(strstr(err.msg, "does not create it"), "%s", err.msg);
  struct stat st;
  ck_assert_int_ne(lstat(path, &st), 0);
  ck_assert_int_eq(db_open_readonly(":memory:", &r, &err), TN_EINVAL);

  db_close(open_ok(path));
  char link_path[PATH_MAX];
  snprintf(link_path, sizeof link_path, "%s.link", path);
  ck_assert_int_eq(symlink(path, link_path), 0);
  ck_assert_int_eq(db_open_readonly(link_path, &r, &err), TN_EINVAL);
  ck_assert_ptr_null(r);
  ck_assert_msg(strstr(err.msg, ".link': is a symbolic link: not opened through it"), "%s", err.msg);
  unlink(link_path);

  /* An older schema: the read-write open migrates it first. */
  raw_exec(path, "PRAGMA user_version = 2");
  ck_assert_int_eq(db_open_readonly(path, &r, &err), TN_ESTATE);
  char reads[64];
  snprintf(reads, sizeof reads, "schema version 2, this build reads %d only", DB_SCHEMA_VERSION);
  ck_assert_msg(strstr(err.msg, reads), "%s", err.msg);
  raw_exec(path, "PRAGMA user_version = 99");
  ck_assert_int_eq(db_open_readonly(path, &r, &err), TN_EUNSUPPORTED);
  char current[64];
  snprintf(current, sizeof current, "PRAGMA user_version = %d", DB_SCHEMA_VERSION);
  raw_exec(path, current);

  /* Not in WAL mode: a reader would hold the writer's commits up. */
  raw_exec(path, "PRAGMA journal_mode = DELETE");
  ck_assert_int_eq(db_open_readonly(path, &r, &err), TN_EIO);
  ck_assert_msg(strstr(err.msg, "got 'delete', need 'wal'"), "%s", err.msg);
  ck_assert_ptr_null(r);
  tmp_cleanup();
}
END_TEST

/* ---- SIGKILL while committing ------------------------------------------------------ */

enum { CRASH_BATCH = 200 };

/* Starts the child on `path`; returns its pid and a stream of its stdout. */
static pid_t spawn_child(const char *path, int run, FILE **out) {
  const char *exe = getenv("DB_CRASH_CHILD");
  ck_assert_msg(exe != NULL, "DB_CRASH_CHILD is not set (run through meson test)");
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    char runs[16], size[16];
    snprintf(runs, sizeof runs, "%d", run);
    snprintf(size, sizeof size, "%d", CRASH_BATCH);
    execl(exe, exe, path, runs, size, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  *out = fdopen(fds[0], "r");
  return pid;
}

/* Runs the child until it reported `kill_after` commits, waits `delay_us`,
 * SIGKILLs it and returns the last batch it reported committed. */
static int run_and_kill(const char *path, int run, int kill_after, int delay_us) {
  FILE *out = NULL;
  pid_t pid = spawn_child(path, run, &out);
  char line[128];
  int last = -1;
  bool killed = false;
  while (fgets(line, sizeof line, out)) {
    int n = -1;
    ck_assert_msg(sscanf(line, "committed %d", &n) == 1, "child said: %s", line);
    last = n;
    if (!killed && n + 1 >= kill_after) {
      if (delay_us) usleep((useconds_t)delay_us);
      kill(pid, SIGKILL);
      killed = true; /* keep reading: lines written before the kill still count */
    }
  }
  fclose(out);
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                "child ended without the kill (status %d)", status);
  return last;
}

/* Every batch of `run` is present in full or not at all; all batches up to
 * `last` are present. */
static void check_run(const char *path, int run, int last) {
  int count[1024] = {0}, batches = 0;
  tn_err_t err = {0};
  db_t *db = open_ok(path);
  db_records_t r;
  ck_assert_msg(db_records_query(db, NULL, &r, &err) == 0, "%s", err.msg);
  for (size_t i = 0; i < r.n; i++) {
    cJSON *t = cJSON_Parse(r.items[i].trace);
    int rn = cJSON_GetObjectItem(t, "run")->valueint, b = cJSON_GetObjectItem(t, "batch")->valueint;
    cJSON_Delete(t);
    ck_assert_int_lt(b, 1024);
    if (rn != run) continue;
    count[b]++;
    if (b + 1 > batches) batches = b + 1;
  }
  db_records_free(&r);
  db_close(db);
  for (int b = 0; b < batches; b++)
    ck_assert_msg(count[b] == CRASH_BATCH, "run %d: batch %d has %d of %d records", run, b, count[b], CRASH_BATCH);
  int expect = batches;
  /* Reported batches are all there; at most one more committed unreported. */
  ck_assert_msg(expect - 1 >= last, "run %d: child reported batch %d, db has %d", run, last,
                expect - 1);
  ck_assert_int_le(expect - 1, last + 1);
}

START_TEST(t_crash) {
  const char *path = tmp_db("crash.db");
  tn_rng_t rng;
  uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
  tn_rng_seed(&rng, seed);
  int lasts[12], runs = _i == 1 ? 4 : 12; /* PostgreSQL: fewer, the check reads every record through libpq */
  for (int run = 0; run < runs; run++) {
    int kill_after = 1 + (int)tn_rng_below(&rng, 12);
    int delay_us = (int)tn_rng_below(&rng, 8000);
    int last = lasts[run] = run_and_kill(path, run, kill_after, delay_us);
    ck_assert_msg(last + 1 >= kill_after, "seed %" PRIu64 ": child stopped early", seed);
    db_t *db = open_ok(path);
    tn_err_t err = {0};
    ck_assert_msg(db_check(db, &err) == 0, "seed %" PRIu64 " run %d: %s", seed, run, err.msg);
    db_close(db);
    for (int r = 0; r <= run; r++) check_run(path, r, lasts[r]);
  }
  tmp_cleanup();
}
END_TEST

/* What logs and server.info show of a locator: a URL's passwords hidden. */
START_TEST(t_redact) {
  const char *cases[][2] = {
      {"postgresql://u:secret@db.example.com:5432/tuned?sslmode=require",
       "postgresql://u:***@db.example.com:5432/tuned?sslmode=require"},
      {"postgres:///tuned?host=/tmp/s&password=secret&user=u", "postgres:///tuned?host=/tmp/s&password=***&user=u"},
      {"postgresql://u:a@h/d?password=b", "postgresql://u:***@h/d?password=***"},
      {"postgresql://u@h/d?application_name=xpassword=1", "postgresql://u@h/d?application_name=xpassword=1"},
      {"postgresql://h/d", "postgresql://h/d"},
      {"/tmp/a:b@c/tuned.db", "/tmp/a:b@c/tuned.db"},
  };
  char buf[256];
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    db_redact(cases[i][0], buf, sizeof buf);
    ck_assert_str_eq(buf, cases[i][1]);
  }
  ck_assert(db_is_url("postgresql://h/d") && db_is_url("postgres://h/d") && !db_is_url("/tmp/postgresql://x"));
}
END_TEST

/* ---- PostgreSQL's own errors -------------------------------------------------------- */

/* What a user gets wrong with a URL: each is refused with the reason, and
 * the password never shows. */
START_TEST(t_pg_errors) {
  tn_err_t err = {0};
  db_t *db = (db_t *)1;
  ck_assert_int_eq(db_open("postgresql://%zz/x", &db, &err), TN_EINVAL);
  ck_assert_ptr_null(db);
  ck_assert_msg(strstr(err.msg, "not a valid PostgreSQL URL"), "%s", err.msg);

  /* a server that is not there (yet): it may be later */
  ck_assert_int_eq(db_open("postgresql:///x?host=/nonexistent-dir&connect_timeout=2", &db, &err), TN_EAGAIN);
  ck_assert_msg(strstr(err.msg, "cannot connect") && strstr(err.msg, "is the server running"), "%s", err.msg);

  char url[512];
  snprintf(url, sizeof url, "postgresql://" pgt_pw_user ":not-the-password@/postgres?host=%s", pg.dir);
  ck_assert_int_eq(db_open(url, &db, &err), TN_EIO);
  ck_assert_msg(strstr(err.msg, "password authentication failed"), "%s", err.msg);
  ck_assert_msg(!strstr(err.msg, "not-the-password") && strstr(err.msg, pgt_pw_user ":***@"), "%s", err.msg);

  snprintf(url, sizeof url, "postgresql:///no_such_db?host=%s&user=postgres", pg.dir);
  ck_assert_int_eq(db_open(url, &db, &err), TN_EIO);
  ck_assert_msg(strstr(err.msg, "does not exist"), "%s", err.msg);

  /* the right password; a read-only connection before any daemon made the
   * tables; then the tables, and the engine's name */
  char plain[512];
  ck_assert_int_eq(pgt_createdb(&pg, "pw_ok", plain, sizeof plain), 0);
  snprintf(url, sizeof url, "postgres://" pgt_pw_user ":" pgt_pw_password "@/pw_ok?host=%s", pg.dir);
  ck_assert_int_eq(db_open_readonly(url, &db, &err), TN_ESTATE);
  ck_assert_msg(strstr(err.msg, "schema version 0"), "%s", err.msg);
  db = open_ok(url);
  ck_assert_str_eq(db_engine(db), "postgresql");
  OK(db_check(db, E));
  db_close(db);
  char sql[96];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM tuned_schema WHERE version = %d", DB_SCHEMA_VERSION);
  ck_assert_int_eq(count_rows(plain, sql), 1);
}
END_TEST

/* The server restarts under a daemon: the statement that finds the
 * connection gone fails (its work, if any, is not half-done), and the next
 * one runs on a new connection. */
START_TEST(t_pg_reconnect) {
  const char *url = tmp_db_in(1, "reconnect.db");
  db_t *db = open_ok(url);
  add_workload(db, WH("00000000000000e1"), "before");
  ck_assert_int_eq(pgt_ctl(&pg, "restart"), 0); /* with its settings and library, as started */
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  tn_err_t err = {0};
  int rc = db_workload_get(db, WH("00000000000000e1"), &w, a, &err);
  if (rc) ck_assert_msg(rc == TN_EAGAIN && strstr(err.msg, "connection to the server is lost"), "%s", err.msg);
  OK(db_workload_get(db, WH("00000000000000e1"), &w, a, E));
  ck_assert_str_eq(w.name, "before");
  add_workload(db, WH("00000000000000e2"), "after");
  tn_arena_free(a);
  db_close(db);
  ck_assert_int_eq(count_rows(url, "SELECT count(*) FROM workloads"), 2);
}
END_TEST

/* The connection's backend terminated (pg_terminate_backend, as an
 * administrator or a failover does): the statement that finds it gone
 * fails with TN_EAGAIN, the next one runs on a new session that holds the
 * daemon's name again.  A name another connection took meanwhile closes
 * this one for good, saying so. */
START_TEST(t_pg_terminated) {
  const char *url = tmp_db_in(1, "terminated.db");
  db_t *db = open_ok(url), *other = open_ok(url);
  OK(db_claim_name(db, "term-a", E));
  add_workload(db, WH("00000000000000f1"), "before");
  const char *name = url + strlen("postgresql:///"); /* pgt_url's form */
  char sql[300];
  snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%.*s' AND "
           "pid <> pg_backend_pid()", (int)strcspn(name, "?"), name);
  OK(db_exec(other, sql, "terminating the other sessions", E)); /* other's own survives */
  tn_arena_t *a = tn_arena_new();
  db_workload_t w;
  tn_err_t err = {0};
  int rc = db_workload_get(db, WH("00000000000000f1"), &w, a, &err);
  ck_assert_msg(rc == 0 || rc == TN_EAGAIN, "%d %s", rc, err.msg);
  OK(db_workload_get(db, WH("00000000000000f1"), &w, a, E));
  ck_assert_str_eq(w.name, "before");
  /* the new session holds the name again */
  ck_assert_int_eq(db_claim_name(other, "term-a", &err), TN_ESTATE);
  ck_assert_msg(strstr(err.msg, "another tuned named 'term-a'"), "%s", err.msg);

  /* terminated again, and the name taken by another before it reconnects */
  OK(db_exec(other, sql, "terminating the other sessions", E));
  usleep(100 * 1000); /* the backend's exit releases its advisory locks */
  OK(db_claim_name(other, "term-a", E));
  rc = db_workload_get(db, WH("00000000000000f1"), &w, a, &err);
  if (rc == TN_EAGAIN) rc = db_workload_get(db, WH("00000000000000f1"), &w, a, &err);
  ck_assert_int_eq(rc, TN_EIO);
  ck_assert_msg(strstr(err.msg, "took this daemon's name"), "%s", err.msg);
  ck_assert_int_eq(db_workload_get(db, WH("00000000000000f1"), &w, a, &err), TN_EIO); /* for good */
  tn_arena_free(a);
  db_close(db);
  db_close(other);
}
END_TEST

/* A full disk (the shim: a table or index cannot grow): the write fails with
 * TN_EAGAIN, which pauses a job instead of failing it, saying the disk may
 * be full; the records written before stay; once there is room again the
 * same record goes in, once. */
START_TEST(t_pg_disk_full) {
  ck_assert_msg(pg.preload[0], "the ENOSPC shim (tests/enospc_shim.c) could not be built with cc");
  const char *url = tmp_db_in(1, "full.db");
  db_t *db = open_ok(url);
  int64_t w = add_workload(db, WH("00000000000000f2"), "full");
  int64_t t = add_target(db, "cpu", "cpu");
  char flag[128];
  snprintf(flag, sizeof flag, "%s/enospc", pg.dir);
  FILE *fp = fopen(flag, "w");
  ck_assert_ptr_nonnull(fp);
  fclose(fp);
  /* records of about 1.5 KB (random digits: not compressed), a few to a
   * page: the table must grow within a few */
  static char trace[2048];
  int added = 0, rc = 0;
  tn_err_t err = {0};
  db_record_t r;
  for (; added < 64; added++) {
    db_record_init(&r);
    int n = snprintf(trace, sizeof trace, "{\"version\": 1, \"trace\": [{\"tag\": %d, \"pad\": \"", added);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(added + 1);
    for (int i = 0; i < 1500; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
      trace[n++] = "0123456789abcdef"[x >> 60];
    snprintf(trace + n, sizeof trace - (size_t)n, "\"}]}");
    r.workload_id = w, r.target_id = t, r.trace = trace, r.median_secs = 1e-3, r.status = DB_STATUS_OK;
    r.verified = true, r.run_secs = runs3, r.n_runs = 3;
    if ((rc = db_record_add_batch(db, &r, 1, NULL, &err)) != 0) break;
  }
  unlink(flag);
  ck_assert_msg(rc == TN_EAGAIN, "after %d records: %d %s", added, rc, err.msg);
  ck_assert_msg(strstr(err.msg, "is its disk full?") && strstr(err.msg, "53100"), "%s", err.msg);
  ck_assert_int_eq(count_rows(url, "SELECT count(*) FROM records"), added);
  OK(db_record_add_batch(db, &r, 1, NULL, E)); /* room again: the same record, once */
  ck_assert_int_eq(count_rows(url, "SELECT count(*) FROM records"), added + 1);
  db_close(db);
}
END_TEST

/* Connections opening a fresh database at the same instant (daemons
 * started together): each one comes up, and the schema is made once. */
typedef struct race_arg {
  const char *url;
  pthread_barrier_t *go;
  int rc;
  tn_err_t err;
} race_arg_t;

static void *race_open(void *p) {
  race_arg_t *r = p;
  db_t *db = NULL;
  pthread_barrier_wait(r->go);
  r->rc = db_open(r->url, &db, &r->err);
  if (!r->rc) r->rc = db_check(db, &r->err);
  db_close(db);
  return NULL;
}

START_TEST(t_pg_migrate_race) {
  enum { N = 8 };
  for (int round = 0; round < 3; round++) {
    const char *url = tmp_db_in(1, "race.db");
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    pthread_t th[N];
    race_arg_t args[N];
    for (int i = 0; i < N; i++) {
      args[i] = (race_arg_t){.url = url, .go = &go};
      ck_assert_int_eq(pthread_create(&th[i], NULL, race_open, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < N; i++) ck_assert_msg(args[i].rc == 0, "round %d connection %d: %s", round, i, args[i].err.msg);
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM tuned_schema WHERE version = %d", DB_SCHEMA_VERSION);
    ck_assert_int_eq(count_rows(url, sql), 1);
    ck_assert_int_eq(count_rows(url, "SELECT count(*) FROM tuned_schema"), 1);
  }
}
END_TEST

/* ---- suite ---------------------------------------------------------------------------- */

static Suite *make_suite(void) {
  Suite *s = suite_create("db");
  TCase *schema = tcase_create("schema");
  tcase_add_test(schema, t_migrate_empty);
  tcase_add_loop_test(schema, t_reopen, 0, n_engines);
  tcase_add_test(schema, t_private_files);
  tcase_add_test(schema, t_migrate_from_v1);
  tcase_add_test(schema, t_migrate_from_v2);
  tcase_add_test(schema, t_migrate_from_v3);
  tcase_add_loop_test(schema, t_migrate_identities, 0, n_engines);
  tcase_add_loop_test(schema, t_version_too_new, 0, n_engines);
  tcase_add_test(schema, t_redact);
  if (n_engines > 1) {
    tcase_add_test(schema, t_pg_errors);
    tcase_add_test(schema, t_pg_reconnect);
    tcase_add_test(schema, t_pg_terminated);
    tcase_add_test(schema, t_pg_disk_full);
    tcase_add_test(schema, t_pg_migrate_race);
  }
  suite_add_tcase(s, schema);
  TCase *data = tcase_create("data");
  tcase_set_timeout(data, 30);
  TTest const *both[] = {t_upsert, t_batches, t_batch_dedup, t_best, t_target_aware, t_jobs, t_export_import,
                         t_import_bad_line, t_record_set_times, t_cost_models, t_baselines, t_read_while_writing, t_job_first_failure};
  for (size_t i = 0; i < TN_ARRAY_LEN(both); i++) tcase_add_loop_test(data, both[i], 0, n_engines);
  tcase_add_test(data, t_job_trials); /* SQLite: it starts from a version-4 file */
  tcase_add_test(data, t_readonly_refusals);
  suite_add_tcase(s, data);
  TCase *stress = tcase_create("stress");
  tcase_set_timeout(stress, 120);
  tcase_add_loop_test(stress, t_concurrent, 0, n_engines);
  tcase_add_loop_test(stress, t_crash, 0, n_engines);
  suite_add_tcase(s, stress);
  return s;
}

/* tests/enospc_shim.c built with the system compiler into a directory the
 * server's user can read (the ASan build's flags would not load into it);
 * NULL when it cannot be built (t_pg_disk_full then says so and fails). */
static const char *build_enospc_shim(void) {
  static char dir[] = "/tmp/tuned-enospc-XXXXXX", so[64];
  if (!mkdtemp(dir) || chmod(dir, 0755) != 0) return NULL;
  snprintf(so, sizeof so, "%s/enospc.so", dir);
  snprintf(shim_dir, sizeof shim_dir, "%s", dir);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cc -O2 -shared -fPIC -o %s %s -ldl", so, SRC("tests/enospc_shim.c"));
  return system(cmd) == 0 ? so : NULL;
}

/* Starts the PostgreSQL server the second engine's tests use (or says why
 * they are skipped), runs the suite, stops the server. */
int main(void) {
  if (pgt_start_with(&pg, build_enospc_shim()) == 0) n_engines = 2;
  else printf("db: PostgreSQL tests SKIPPED: %s\n", pg.skip);
  fflush(stdout);
  int rc = tu_run_suite(make_suite());
  pgt_stop(&pg);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", shim_dir);
  if (shim_dir[0] && system(rm) != 0) fprintf(stderr, "db: could not remove %s\n", shim_dir);
  return rc;
}
