/* schema.c — opening a database: pragmas (WAL), versioned migrations,
 * transactions, the statement cache and SQLite error reporting. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "db/db_internal.h"

/* ---- migrations ----------------------------------------------------------
 * Append a step to change the schema; never edit a released one.  Each step
 * runs in its own transaction together with the user_version bump. */

const char *const db_migrations[DB_SCHEMA_VERSION] = {
    /* 1: workloads, targets, records */
    "CREATE TABLE workloads ("
    "  id INTEGER PRIMARY KEY,"
    "  hash TEXT NOT NULL UNIQUE"
    "    CHECK (length(hash) = 16 AND hash NOT GLOB '*[^0-9a-f]*'),"
    "  name TEXT NOT NULL,"
    "  source TEXT NOT NULL,"
    "  params TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params)),"
    "  flops REAL NOT NULL DEFAULT 0,"
    "  bytes REAL NOT NULL DEFAULT 0,"
    "  created REAL NOT NULL"
    ") STRICT;"
    "CREATE TABLE targets ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE CHECK (name <> ''),"
    "  kind TEXT NOT NULL,"
    "  arch TEXT NOT NULL DEFAULT '',"
    "  json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(json)),"
    "  created REAL NOT NULL"
    ") STRICT;"
    "CREATE TABLE records ("
    "  id INTEGER PRIMARY KEY,"
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id),"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  trace TEXT NOT NULL CHECK (json_valid(trace)),"
    "  trace_hash TEXT NOT NULL CHECK (length(trace_hash) = 16),"
    "  run_secs TEXT NOT NULL DEFAULT '[]' CHECK (json_type(run_secs) = 'array'),"
    "  median_secs REAL,"
    "  status TEXT NOT NULL"
    "    CHECK (status IN ('ok','build_error','run_error','timeout','wrong_result')),"
    "  error TEXT,"
    "  registers INTEGER,"
    "  shared_bytes INTEGER,"
    "  spill_bytes INTEGER,"
    "  compiler TEXT,"
    "  toolkit_version TEXT,"
    "  arch TEXT,"
    "  verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),"
    "  created REAL NOT NULL,"
    "  updated REAL NOT NULL,"
    "  UNIQUE (workload_id, target_id, trace_hash),"
    "  CHECK (verified = 0 OR status = 'ok'),"
    "  CHECK (status <> 'ok' OR median_secs IS NOT NULL)"
    ") STRICT;"
    "CREATE INDEX records_best ON records (workload_id, target_id, verified, median_secs);",

    /* 2: jobs */
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY,"
    "  state TEXT NOT NULL"
    "    CHECK (state IN ('queued','running','done','cancelled','failed')),"
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id),"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  budget_trials INTEGER NOT NULL CHECK (budget_trials >= 0),"
    "  budget_seconds REAL NOT NULL DEFAULT 0 CHECK (budget_seconds >= 0),"
    "  trials_done INTEGER NOT NULL DEFAULT 0,"
    "  best_record_id INTEGER REFERENCES records(id),"
    "  seed INTEGER NOT NULL,"
    "  options TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(options)),"
    "  error TEXT,"
    "  created REAL NOT NULL,"
    "  started REAL,"
    "  updated REAL NOT NULL,"
    "  finished REAL"
    ") STRICT;"
    "CREATE INDEX jobs_state ON jobs (state, id);",

    /* 3: the too_slow status (SQLite cannot change a CHECK constraint, so the
     * records table is rebuilt with its ids, as SQLite's "other kinds of table
     * schema changes" describe; migrate runs this with foreign keys off and
     * checks them before the commit); the cost model saved per target; the
     * unscheduled program's time per (workload, target). */
    "CREATE TABLE records_v3 ("
    "  id INTEGER PRIMARY KEY,"
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id),"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  trace TEXT NOT NULL CHECK (json_valid(trace)),"
    "  trace_hash TEXT NOT NULL CHECK (length(trace_hash) = 16),"
    "  run_secs TEXT NOT NULL DEFAULT '[]' CHECK (json_type(run_secs) = 'array'),"
    "  median_secs REAL,"
    "  status TEXT NOT NULL"
    "    CHECK (status IN ('ok','build_error','run_error','timeout','wrong_result','too_slow')),"
    "  error TEXT,"
    "  registers INTEGER,"
    "  shared_bytes INTEGER,"
    "  spill_bytes INTEGER,"
    "  compiler TEXT,"
    "  toolkit_version TEXT,"
    "  arch TEXT,"
    "  verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),"
    "  created REAL NOT NULL,"
    "  updated REAL NOT NULL,"
    "  UNIQUE (workload_id, target_id, trace_hash),"
    "  CHECK (verified = 0 OR status = 'ok'),"
    "  CHECK (status <> 'ok' OR median_secs IS NOT NULL)"
    ") STRICT;"
    "INSERT INTO records_v3 SELECT * FROM records;"
    "DROP TABLE records;"
    "ALTER TABLE records_v3 RENAME TO records;"
    "CREATE INDEX records_best ON records (workload_id, target_id, verified, median_secs);"
    "CREATE TABLE cost_models ("
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  format INTEGER NOT NULL,"
    "  model BLOB NOT NULL,"
    "  record_ids BLOB NOT NULL,"
    "  updated REAL NOT NULL,"
    "  PRIMARY KEY (target_id, format)"
    ") STRICT;"
    "CREATE TABLE baselines ("
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id),"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  status TEXT NOT NULL"
    "    CHECK (status IN ('ok','build_error','run_error','timeout','wrong_result','too_slow')),"
    "  median_secs REAL,"
    "  run_secs TEXT NOT NULL DEFAULT '[]' CHECK (json_type(run_secs) = 'array'),"
    "  error TEXT,"
    "  created REAL NOT NULL,"
    "  PRIMARY KEY (workload_id, target_id),"
    "  CHECK (status <> 'ok' OR median_secs IS NOT NULL)"
    ") STRICT;",

    /* 4: CUPTI's kernel time beside the CUDA-event median, and whether the
     * two disagree by over 10 %; existing records have neither. */
    "ALTER TABLE records ADD COLUMN cupti_median_secs REAL"
    "  CHECK (cupti_median_secs IS NULL OR cupti_median_secs >= 0);"
    "ALTER TABLE records ADD COLUMN times_disagree INTEGER NOT NULL DEFAULT 0"
    "  CHECK (times_disagree IN (0, 1));",

    /* 5: every candidate a job measured, in order, with what the search saw
     * of it (a re-measure later changes its record's times) and when its
     * measurement ended: the job's tuning curve.  record_id is NULL when the
     * trace was recorded already (by a concurrent job). */
    "CREATE TABLE job_trials ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  trial INTEGER NOT NULL CHECK (trial >= 1),"
    "  record_id INTEGER REFERENCES records(id),"
    "  status TEXT NOT NULL"
    "    CHECK (status IN ('ok','build_error','run_error','timeout','wrong_result','too_slow')),"
    "  median_secs REAL,"
    "  measured REAL NOT NULL,"
    "  PRIMARY KEY (job_id, trial),"
    "  CHECK (status <> 'ok' OR median_secs IS NOT NULL)"
    ") STRICT;",
};

/* ---- errors and statements ---------------------------------------------- */

int db_fail(db_t *db, tn_err_t *err, const char *op) {
  int rc = sqlite3_extended_errcode(db->h);
  int code = TN_EIO;
  if ((rc & 0xff) == SQLITE_CONSTRAINT) code = TN_EINVAL;
  if ((rc & 0xff) == SQLITE_NOMEM) code = TN_ENOMEM;
  /* A write that failed: say what the system said (ENOSPC, EFBIG, EIO) and
   * what to look at, rather than SQLite's bare "disk I/O error". */
  if ((rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR) {
    int sys = sqlite3_system_errno(db->h);
    return tn_err_set(err, code, "%s: %s (sqlite error %d%s%s): the database file could not be written; is its disk "
                      "full, or over a file size limit?", op, sqlite3_errmsg(db->h), rc, sys ? ", " : "",
                      sys ? strerror(sys) : "");
  }
  return tn_err_set(err, code, "%s: %s (sqlite error %d)", op, sqlite3_errmsg(db->h), rc);
}

int db_exec(db_t *db, const char *sql, const char *op, tn_err_t *err) {
  if (sqlite3_exec(db->h, sql, NULL, NULL, NULL) != SQLITE_OK) return db_fail(db, err, op);
  return 0;
}

sqlite3_stmt *db_stmt(db_t *db, const char *sql, tn_err_t *err) {
  for (size_t i = 0; i < db->n_stmts; i++) {
    if (db->stmts[i].sql == sql) {
      sqlite3_reset(db->stmts[i].st);
      sqlite3_clear_bindings(db->stmts[i].st);
      return db->stmts[i].st;
    }
  }
  if (db->n_stmts == DB_STMT_CACHE) {
    tn_err_set(err, TN_ENOMEM, "db: statement cache full (raise DB_STMT_CACHE)");
    return NULL;
  }
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v3(db->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
    db_fail(db, err, "preparing a statement");
    return NULL;
  }
  db->stmts[db->n_stmts].sql = sql;
  db->stmts[db->n_stmts].st = st;
  db->n_stmts++;
  return st;
}

int db_step_done(db_t *db, sqlite3_stmt *st, const char *op, tn_err_t *err) {
  int rc = sqlite3_step(st);
  int ret = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : db_fail(db, err, op);
  sqlite3_reset(st);
  return ret;
}

double db_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) * 1e-6;
}

void db_bind_text(sqlite3_stmt *st, int i, const char *s) {
  if (s)
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

void db_bind_opt_int(sqlite3_stmt *st, int i, int64_t v) {
  if (v >= 0)
    sqlite3_bind_int64(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

void db_bind_opt_real(sqlite3_stmt *st, int i, double v) {
  if (isnan(v))
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_double(st, i, v);
}

const char *db_col_text(sqlite3_stmt *st, int col, tn_arena_t *a) {
  const unsigned char *s = sqlite3_column_text(st, col);
  if (!s) return NULL;
  return tn_arena_strndup(a, (const char *)s, (size_t)sqlite3_column_bytes(st, col));
}

int db_col_opt_int(sqlite3_stmt *st, int col) {
  return sqlite3_column_type(st, col) == SQLITE_NULL ? -1 : sqlite3_column_int(st, col);
}

double db_col_opt_real(sqlite3_stmt *st, int col) {
  return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

int db_canon_object(const char *text, const char *what, char **out, tn_err_t *err) {
  *out = NULL;
  if (!text) text = "{}";
  cJSON *j = cJSON_Parse(text);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return tn_err_set(err, TN_EINVAL, "%s must be a JSON object, got '%.60s'", what, text);
  }
  *out = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return *out ? 0 : tn_err_set(err, TN_ENOMEM, "%s: out of memory", what);
}

bool db_is_hex16(const char *s) {
  if (!s || strlen(s) != 16) return false;
  for (int i = 0; i < 16; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

/* ---- transactions -------------------------------------------------------- */

int db_tx_begin(db_t *db, tn_err_t *err) {
  /* IMMEDIATE takes the write lock up front (waiting up to the busy
   * timeout), so a transaction never fails half-way on a lock upgrade. */
  const char *sql = db->tx_depth == 0 ? "BEGIN IMMEDIATE" : "SAVEPOINT db_sp";
  int rc = db_exec(db, sql, "starting a transaction", err);
  if (rc) return rc;
  db->tx_depth++;
  return 0;
}

int db_tx_commit(db_t *db, tn_err_t *err) {
  if (db->tx_depth == 0)
    return tn_err_set(err, TN_ESTATE, "db_tx_commit without a matching db_tx_begin");
  const char *sql = db->tx_depth == 1 ? "COMMIT" : "RELEASE db_sp";
  int rc = db_exec(db, sql, "committing a transaction", err);
  if (rc) {
    db_tx_rollback(db);
    return rc;
  }
  db->tx_depth--;
  return 0;
}

void db_tx_rollback(db_t *db) {
  if (db->tx_depth == 0) return;
  const char *sql = db->tx_depth == 1 ? "ROLLBACK" : "ROLLBACK TO db_sp; RELEASE db_sp";
  sqlite3_exec(db->h, sql, NULL, NULL, NULL); /* fails only if SQLite already rolled back */
  db->tx_depth--;
}

/* ---- open / migrate ---------------------------------------------------- */

static int read_user_version(db_t *db, int *version, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
    return db_fail(db, err, "reading the schema version");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *version = sqlite3_column_int(st, 0);
  int ret = rc == SQLITE_ROW ? 0 : db_fail(db, err, "reading the schema version");
  sqlite3_finalize(st);
  return ret;
}

int db_schema_version(db_t *db, int *version, tn_err_t *err) {
  return read_user_version(db, version, err);
}

/* Migrations run with foreign keys off (a rebuilt table is dropped while
 * others refer to it); this is the check they would have made. */
static int check_foreign_keys(db_t *db, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->h, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
    return db_fail(db, err, "checking foreign keys");
  int rc = sqlite3_step(st), ret = 0;
  if (rc == SQLITE_ROW)
    ret = tn_err_set(err, TN_EIO, "table %s row %lld refers to a missing row of %s",
                     (const char *)sqlite3_column_text(st, 0), (long long)sqlite3_column_int64(st, 1),
                     (const char *)sqlite3_column_text(st, 2));
  else if (rc != SQLITE_DONE)
    ret = db_fail(db, err, "checking foreign keys");
  sqlite3_finalize(st);
  return ret;
}

/* Applies step `i` unless another connection already did (checked inside
 * the write transaction, so two processes opening a new file agree). */
static int migrate_step(db_t *db, int i, tn_err_t *err) {
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  int v = 0;
  rc = read_user_version(db, &v, err);
  if (!rc && v == i) {
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", i + 1);
    rc = db_exec(db, db_migrations[i], "applying a schema migration", err);
    if (!rc) rc = check_foreign_keys(db, err);
    if (!rc) rc = db_exec(db, bump, "recording the schema version", err);
  }
  if (rc) {
    db_tx_rollback(db);
    return tn_err_prefix(err, "migration %d -> %d", i, i + 1);
  }
  return db_tx_commit(db, err);
}

static int migrate(db_t *db, tn_err_t *err) {
  int v = 0;
  int rc = read_user_version(db, &v, err);
  if (rc) return rc;
  if (v > DB_SCHEMA_VERSION)
    return tn_err_set(err, TN_EUNSUPPORTED,
                      "schema version %d is newer than this build of tuned knows "
                      "(up to %d); use a newer tuned or another database file",
                      v, DB_SCHEMA_VERSION);
  for (int i = v; i < DB_SCHEMA_VERSION; i++) {
    rc = migrate_step(db, i, err);
    if (rc) return rc;
  }
  return 0;
}

/* Runs a pragma that returns one text row and checks it when `want` is set. */
static int pragma(db_t *db, const char *sql, const char *want, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err, sql);
  int rc = sqlite3_step(st), ret = 0;
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    ret = db_fail(db, err, sql);
  } else if (want) {
    const char *got = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (!got || strcmp(got, want) != 0)
      ret = tn_err_set(err, TN_EIO, "%s: got '%s', need '%s'", sql, got ? got : "nothing", want);
  }
  sqlite3_finalize(st);
  return ret;
}

static int configure(db_t *db, const char *path, tn_err_t *err) {
  sqlite3_extended_result_codes(db->h, 1);
  sqlite3_busy_timeout(db->h, 10000);
  int v = 0;
  int rc = read_user_version(db, &v, err); /* also rejects a file that is not a database */
  if (rc) return rc;
  bool memory = strcmp(path, ":memory:") == 0 || path[0] == 0;
  rc = pragma(db, "PRAGMA journal_mode=WAL", memory ? NULL : "wal", err);
  if (!rc) rc = pragma(db, "PRAGMA synchronous=NORMAL", NULL, err);
  /* foreign keys are off while migrating (see check_foreign_keys) */
  if (!rc) rc = pragma(db, "PRAGMA foreign_keys=OFF", NULL, err);
  if (!rc) rc = migrate(db, err);
  if (!rc) rc = pragma(db, "PRAGMA foreign_keys=ON", NULL, err);
  return rc;
}

int db_open(const char *path, db_t **out, tn_err_t *err) {
  *out = NULL;
  if (!path) return tn_err_set(err, TN_EINVAL, "db_open: no database path given");
  bool file = path[0] && strcmp(path, ":memory:") != 0 && strncmp(path, "file:", 5) != 0;
  struct stat st;
  if (file && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
    return tn_err_set(err, TN_EINVAL, "database '%s' is a symbolic link: not opened through it (name the file it "
                      "points to)", path);
  if (file) { /* a new database is the user's alone (SQLite would make it 0644; -wal and -shm follow it) */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  db_t *db = tn_xcalloc(1, sizeof *db);
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  int rc = 0;
  if (sqlite3_open_v2(path, &db->h, flags, NULL) != SQLITE_OK) {
    rc = db->h ? db_fail(db, err, "opening")
               : tn_err_set(err, TN_ENOMEM, "opening: out of memory");
  } else {
    rc = configure(db, path, err);
  }
  if (rc) {
    tn_err_prefix(err, "database '%s'", path);
    db_close(db);
    return rc;
  }
  *out = db;
  return 0;
}

int db_open_readonly(const char *path, db_t **out, tn_err_t *err) {
  *out = NULL;
  if (!path || !path[0] || strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
    return tn_err_set(err, TN_EINVAL, "db_open_readonly: needs the path of a database file, got '%s'",
                      path ? path : "(null)");
  struct stat st;
  if (lstat(path, &st) != 0)
    return tn_err_set(err, TN_EIO, "database '%s': %s (a read-only connection does not create it)", path,
                      strerror(errno));
  if (S_ISLNK(st.st_mode))
    return tn_err_set(err, TN_EINVAL, "database '%s' is a symbolic link: not opened through it (name the file it "
                      "points to)", path);
  if (!S_ISREG(st.st_mode)) return tn_err_set(err, TN_EINVAL, "database '%s' is not a regular file", path);
  db_t *db = tn_xcalloc(1, sizeof *db);
  int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  int rc = 0, v = 0;
  if (sqlite3_open_v2(path, &db->h, flags, NULL) != SQLITE_OK) {
    rc = db->h ? db_fail(db, err, "opening read-only") : tn_err_set(err, TN_ENOMEM, "opening: out of memory");
  } else {
    sqlite3_extended_result_codes(db->h, 1);
    /* WAL readers wait only in rare cases (a WAL reset, recovery after a
     * crash); a lock held for good must not hang a query forever */
    sqlite3_busy_timeout(db->h, 10000);
    rc = read_user_version(db, &v, err);
    if (!rc && v != DB_SCHEMA_VERSION)
      rc = tn_err_set(err, v > DB_SCHEMA_VERSION ? TN_EUNSUPPORTED : TN_ESTATE,
                      "schema version %d, this build reads %d only (open it read-write first: db_open migrates)", v,
                      DB_SCHEMA_VERSION);
    /* Without WAL a reader would block the writer's commits and wait on them. */
    if (!rc) rc = pragma(db, "PRAGMA journal_mode", "wal", err);
    if (!rc) rc = pragma(db, "PRAGMA query_only=1", NULL, err);
  }
  if (rc) {
    tn_err_prefix(err, "database '%s'", path);
    db_close(db);
    return rc;
  }
  *out = db;
  return 0;
}

void db_close(db_t *db) {
  if (!db) return;
  while (db->tx_depth > 0) db_tx_rollback(db);
  for (size_t i = 0; i < db->n_stmts; i++) sqlite3_finalize(db->stmts[i].st);
  sqlite3_close(db->h);
  free(db);
}

int db_check(db_t *db, tn_err_t *err) {
  return pragma(db, "PRAGMA integrity_check", "ok", err);
}
