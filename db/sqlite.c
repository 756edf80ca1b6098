/* sqlite.c — the SQLite driver of the database layer: opening a file (WAL,
 * private files, no symbolic links), its PRAGMAs and migrations, statements
 * and error reporting. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

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

    /* 5: the daemon that runs a job (NULL: any), for databases that several
     * daemons share (PostgreSQL) */
    "ALTER TABLE jobs ADD COLUMN owner TEXT;",

    /* 6: every candidate a job measured, in order, with what the search saw
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

    /* 7: the shared job queue: a job's measurement batches (trials > 0,
     * numbered first_trial, first_trial + 1, ...) and its last batch (trials
     * 0: the re-measure of the best and the unscheduled program), each
     * leased by one daemon (leased_by, until the unix time lease_until,
     * renewed while it works) and done once its trials are committed. */
    "CREATE TABLE job_batches ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  batch INTEGER NOT NULL CHECK (batch >= 0),"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),"
    "  first_trial INTEGER NOT NULL CHECK (first_trial >= 1),"
    "  trials INTEGER NOT NULL CHECK (trials >= 0),"
    "  state TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued','leased','done')),"
    "  leased_by TEXT,"
    "  lease_until REAL,"
    "  leases INTEGER NOT NULL DEFAULT 0,"
    "  trials_done INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (job_id, batch),"
    "  CHECK (state <> 'leased' OR (leased_by IS NOT NULL AND lease_until IS NOT NULL))"
    ") STRICT;"
    "CREATE INDEX job_batches_open ON job_batches (target_id, state);",

    /* 8: identities from BLAKE2b-256 (64 hex digits) instead of FNV-1a 64:
     * columns for the new ones, which rehash.c computes from every row's
     * workload source and trace text (db_migrations_after then makes them
     * the hashes) */
    ("ALTER TABLE workloads ADD COLUMN id_v8 TEXT;"
     "ALTER TABLE records ADD COLUMN trace_id_v8 TEXT;"),
};

/* SQL after a step's C part (db_migration_fns): step 8 rebuilds workloads
 * and records (SQLite cannot change a CHECK) with the new identities, ids
 * kept, as step 3 rebuilt records. */
const char *const db_migrations_after[DB_SCHEMA_VERSION] = {
    [7] = "CREATE TABLE workloads_v8 ("
          "  id INTEGER PRIMARY KEY,"
          "  hash TEXT NOT NULL UNIQUE"
          "    CHECK (length(hash) = 64 AND hash NOT GLOB '*[^0-9a-f]*'),"
          "  name TEXT NOT NULL,"
          "  source TEXT NOT NULL,"
          "  params TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params)),"
          "  flops REAL NOT NULL DEFAULT 0,"
          "  bytes REAL NOT NULL DEFAULT 0,"
          "  created REAL NOT NULL"
          ") STRICT;"
          "INSERT INTO workloads_v8 (id, hash, name, source, params, flops, bytes, created)"
          "  SELECT id, id_v8, name, source, params, flops, bytes, created FROM workloads;"
          "DROP TABLE workloads;"
          "ALTER TABLE workloads_v8 RENAME TO workloads;"
          "CREATE TABLE records_v8 ("
          "  id INTEGER PRIMARY KEY,"
          "  workload_id INTEGER NOT NULL REFERENCES workloads(id),"
          "  target_id INTEGER NOT NULL REFERENCES targets(id),"
          "  trace TEXT NOT NULL CHECK (json_valid(trace)),"
          "  trace_hash TEXT NOT NULL"
          "    CHECK (length(trace_hash) = 64 AND trace_hash NOT GLOB '*[^0-9a-f]*'),"
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
          "  cupti_median_secs REAL CHECK (cupti_median_secs IS NULL OR cupti_median_secs >= 0),"
          "  times_disagree INTEGER NOT NULL DEFAULT 0 CHECK (times_disagree IN (0, 1)),"
          "  UNIQUE (workload_id, target_id, trace_hash),"
          "  CHECK (verified = 0 OR status = 'ok'),"
          "  CHECK (status <> 'ok' OR median_secs IS NOT NULL)"
          ") STRICT;"
          "INSERT INTO records_v8 (id, workload_id, target_id, trace, trace_hash, run_secs, median_secs, status,"
          "  error, registers, shared_bytes, spill_bytes, compiler, toolkit_version, arch, verified, created,"
          "  updated, cupti_median_secs, times_disagree)"
          "  SELECT id, workload_id, target_id, trace, trace_id_v8, run_secs, median_secs, status, error,"
          "  registers, shared_bytes, spill_bytes, compiler, toolkit_version, arch, verified, created, updated,"
          "  cupti_median_secs, times_disagree FROM records;"
          "DROP TABLE records;"
          "ALTER TABLE records_v8 RENAME TO records;"
          "CREATE INDEX records_best ON records (workload_id, target_id, verified, median_secs);",
};


/* ---- statements ------------------------------------------------------------ */

typedef struct sq_st {
  db_st_t base;
  sqlite3_stmt *st;
} sq_st_t;

#define H(db) ((sqlite3 *)(db)->h)
#define ST(s) (((sq_st_t *)(s))->st)

static int sq_exec(db_t *db, const char *sql) {
  return sqlite3_exec(H(db), sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : DB_ERROR;
}

static db_st_t *sq_prepare(db_t *db, const char *sql, bool cached) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v3(H(db), sql, -1, cached ? SQLITE_PREPARE_PERSISTENT : 0, &st, NULL) != SQLITE_OK) return NULL;
  sq_st_t *s = tn_xcalloc(1, sizeof *s);
  s->base.db = db;
  s->st = st;
  return &s->base;
}

static void sq_finalize(db_st_t *s) {
  sqlite3_finalize(ST(s));
  free(s);
}

static void sq_reset(db_st_t *s) {
  sqlite3_reset(ST(s));
  sqlite3_clear_bindings(ST(s));
}

static void sq_bind_null(db_st_t *s, int i) { sqlite3_bind_null(ST(s), i); }
static void sq_bind_int(db_st_t *s, int i, int64_t v) { sqlite3_bind_int64(ST(s), i, v); }
static void sq_bind_real(db_st_t *s, int i, double v) { sqlite3_bind_double(ST(s), i, v); }
static void sq_bind_text(db_st_t *s, int i, const char *t) { sqlite3_bind_text(ST(s), i, t, -1, SQLITE_TRANSIENT); }
static void sq_bind_blob(db_st_t *s, int i, const void *p, size_t n) {
  sqlite3_bind_blob64(ST(s), i, p, n, SQLITE_TRANSIENT);
}

static int sq_step(db_st_t *s) {
  int rc = sqlite3_step(ST(s));
  return rc == SQLITE_ROW ? DB_ROW : rc == SQLITE_DONE ? DB_DONE : DB_ERROR;
}

static bool sq_col_null(db_st_t *s, int c) { return sqlite3_column_type(ST(s), c) == SQLITE_NULL; }
static int64_t sq_col_int(db_st_t *s, int c) { return sqlite3_column_int64(ST(s), c); }
static double sq_col_real(db_st_t *s, int c) { return sqlite3_column_double(ST(s), c); }
static const char *sq_col_text(db_st_t *s, int c) { return (const char *)sqlite3_column_text(ST(s), c); }

static const void *sq_col_blob(db_st_t *s, int c, size_t *n) {
  const void *p = sqlite3_column_blob(ST(s), c);
  *n = (size_t)sqlite3_column_bytes(ST(s), c);
  return p;
}

static int64_t sq_changes(db_t *db) { return sqlite3_changes(H(db)); }

static int sq_fail(db_t *db, tn_err_t *err, const char *op) {
  int rc = sqlite3_extended_errcode(H(db));
  int code = TN_EIO;
  if ((rc & 0xff) == SQLITE_CONSTRAINT) code = TN_EINVAL;
  if ((rc & 0xff) == SQLITE_NOMEM) code = TN_ENOMEM;
  /* A write that failed: say what the system said (ENOSPC, EFBIG, EIO) and
   * what to look at, rather than SQLite's bare "disk I/O error". */
  if ((rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR) {
    int sys = sqlite3_system_errno(H(db));
    return tn_err_set(err, code, "%s: %s (sqlite error %d%s%s): the database file could not be written; is its disk "
                      "full, or over a file size limit?", op, sqlite3_errmsg(H(db)), rc, sys ? ", " : "",
                      sys ? strerror(sys) : "");
  }
  return tn_err_set(err, code, "%s: %s (sqlite error %d)", op, sqlite3_errmsg(H(db)), rc);
}

static bool sq_last_was_foreign_key(db_t *db) {
  return sqlite3_extended_errcode(H(db)) == SQLITE_CONSTRAINT_FOREIGNKEY;
}

/* ---- pragmas, version, checks ------------------------------------------------ */

/* Runs a pragma that returns one text row and checks it when `want` is set. */
static int pragma(db_t *db, const char *sql, const char *want, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(H(db), sql, -1, &st, NULL) != SQLITE_OK) return sq_fail(db, err, sql);
  int rc = sqlite3_step(st), ret = 0;
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    ret = sq_fail(db, err, sql);
  } else if (want) {
    const char *got = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (!got || strcmp(got, want) != 0)
      ret = tn_err_set(err, TN_EIO, "%s: got '%s', need '%s'", sql, got ? got : "nothing", want);
  }
  sqlite3_finalize(st);
  return ret;
}

static int sq_read_version(db_t *db, int *version, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(H(db), "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
    return sq_fail(db, err, "reading the schema version");
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *version = sqlite3_column_int(st, 0);
  int ret = rc == SQLITE_ROW ? 0 : sq_fail(db, err, "reading the schema version");
  sqlite3_finalize(st);
  return ret;
}

static int sq_write_version(db_t *db, int version, tn_err_t *err) {
  char bump[64];
  snprintf(bump, sizeof bump, "PRAGMA user_version = %d", version);
  return db_exec(db, bump, "recording the schema version", err);
}

/* Migrations run with foreign keys off (a rebuilt table is dropped while
 * others refer to it); this is the check they would have made. */
static int sq_check_foreign_keys(db_t *db, tn_err_t *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(H(db), "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
    return sq_fail(db, err, "checking foreign keys");
  int rc = sqlite3_step(st), ret = 0;
  if (rc == SQLITE_ROW)
    ret = tn_err_set(err, TN_EIO, "table %s row %lld refers to a missing row of %s",
                     (const char *)sqlite3_column_text(st, 0), (long long)sqlite3_column_int64(st, 1),
                     (const char *)sqlite3_column_text(st, 2));
  else if (rc != SQLITE_DONE)
    ret = sq_fail(db, err, "checking foreign keys");
  sqlite3_finalize(st);
  return ret;
}

static int sq_check(db_t *db, tn_err_t *err) {
  int rc = pragma(db, "PRAGMA integrity_check", "ok", err);
  return rc ? rc : db_batches_check(db, err);
}

static void sq_close(db_t *db) { sqlite3_close(H(db)); }

const db_driver_t db_sqlite_driver = {
    .engine = "sqlite",
    /* IMMEDIATE takes the write lock up front (waiting up to the busy
     * timeout), so a transaction never fails half-way on a lock upgrade. */
    .begin_sql = "BEGIN IMMEDIATE",
    .migrations = db_migrations,
    .migrations_after = db_migrations_after,
    .exec = sq_exec,
    .prepare = sq_prepare,
    .finalize = sq_finalize,
    .reset = sq_reset,
    .bind_null = sq_bind_null,
    .bind_int = sq_bind_int,
    .bind_real = sq_bind_real,
    .bind_text = sq_bind_text,
    .bind_blob = sq_bind_blob,
    .step = sq_step,
    .col_null = sq_col_null,
    .col_int = sq_col_int,
    .col_real = sq_col_real,
    .col_text = sq_col_text,
    .col_blob = sq_col_blob,
    .changes = sq_changes,
    .fail = sq_fail,
    .last_was_foreign_key = sq_last_was_foreign_key,
    .read_version = sq_read_version,
    .migration_lock = NULL,
    .migration_check = sq_check_foreign_keys,
    .write_version = sq_write_version,
    .check = sq_check,
    .close = sq_close,
};

/* ---- opening ------------------------------------------------------------------ */

static int configure(db_t *db, const char *path, tn_err_t *err) {
  sqlite3_extended_result_codes(H(db), 1);
  sqlite3_busy_timeout(H(db), 10000);
  int v = 0;
  int rc = sq_read_version(db, &v, err); /* also rejects a file that is not a database */
  if (rc) return rc;
  bool memory = strcmp(path, ":memory:") == 0 || path[0] == 0;
  rc = pragma(db, "PRAGMA journal_mode=WAL", memory ? NULL : "wal", err);
  if (!rc) rc = pragma(db, "PRAGMA synchronous=NORMAL", NULL, err);
  /* foreign keys are off while migrating (see sq_check_foreign_keys) */
  if (!rc) rc = pragma(db, "PRAGMA foreign_keys=OFF", NULL, err);
  if (!rc) rc = db_migrate(db, err);
  /* A new file switches to WAL with its first transaction, and stays in
   * rollback mode without a word if a write or fsync of that switch fails
   * (readers then refuse it): asked again, SQLite switches now or names the
   * I/O error. */
  if (!rc && !memory) rc = pragma(db, "PRAGMA journal_mode=WAL", "wal", err);
  if (!rc) rc = pragma(db, "PRAGMA foreign_keys=ON", NULL, err);
  return rc;
}

static int open_rw(db_t *db, const char *path, tn_err_t *err) {
  bool file = path[0] && strcmp(path, ":memory:") != 0 && strncmp(path, "file:", 5) != 0;
  struct stat st;
  if (file && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
    return tn_err_set(err, TN_EINVAL, "is a symbolic link: not opened through it (name the file it points to)");
  if (file) { /* a new database is the user's alone (SQLite would make it 0644; -wal and -shm follow it) */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  sqlite3 *h = NULL;
  int rc = sqlite3_open_v2(path, &h, flags, NULL);
  db->h = h;
  if (rc != SQLITE_OK)
    return h ? sq_fail(db, err, "opening") : tn_err_set(err, TN_ENOMEM, "opening: out of memory");
  return configure(db, path, err);
}

static int open_ro(db_t *db, const char *path, tn_err_t *err) {
  if (!path[0] || strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
    return tn_err_set(err, TN_EINVAL, "a read-only connection needs the path of a database file");
  struct stat st;
  if (lstat(path, &st) != 0)
    return tn_err_set(err, TN_EIO, "%s (a read-only connection does not create it)", strerror(errno));
  if (S_ISLNK(st.st_mode))
    return tn_err_set(err, TN_EINVAL, "is a symbolic link: not opened through it (name the file it points to)");
  if (!S_ISREG(st.st_mode)) return tn_err_set(err, TN_EINVAL, "is not a regular file");
  int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  sqlite3 *h = NULL;
  int rc = sqlite3_open_v2(path, &h, flags, NULL);
  db->h = h;
  if (rc != SQLITE_OK)
    return h ? sq_fail(db, err, "opening read-only") : tn_err_set(err, TN_ENOMEM, "opening: out of memory");
  sqlite3_extended_result_codes(h, 1);
  /* WAL readers wait only in rare cases (a WAL reset, recovery after a
   * crash); a lock held for good must not hang a query forever */
  sqlite3_busy_timeout(h, 10000);
  rc = db_require_version(db, err);
  /* Without WAL a reader would block the writer's commits and wait on them. */
  if (!rc) rc = pragma(db, "PRAGMA journal_mode", "wal", err);
  if (!rc) rc = pragma(db, "PRAGMA query_only=1", NULL, err);
  return rc;
}

int db_sqlite_connect(db_t *db, const char *path, bool readonly, tn_err_t *err) {
  db->drv = &db_sqlite_driver;
  return readonly ? open_ro(db, path, err) : open_rw(db, path, err);
}
