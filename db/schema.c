/* schema.c — what both engines share: opening by locator (a file path for
 * SQLite, a postgresql:// URL for PostgreSQL), the versioned migrations'
 * loop, transactions, the statement cache and the binding helpers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "db/db_internal.h"

/* ---- errors and statements ---------------------------------------------- */

int db_fail(db_t *db, tn_err_t *err, const char *op) { return db->drv->fail(db, err, op); }

int db_exec(db_t *db, const char *sql, const char *op, tn_err_t *err) {
  return db->drv->exec(db, sql) == 0 ? 0 : db_fail(db, err, op);
}

db_st_t *db_stmt(db_t *db, const char *sql, tn_err_t *err) {
  for (size_t i = 0; i < db->n_stmts; i++) {
    if (db->stmts[i].sql == sql) {
      db_reset(db->stmts[i].st);
      return db->stmts[i].st;
    }
  }
  if (db->n_stmts == DB_STMT_CACHE) {
    tn_err_set(err, TN_ENOMEM, "db: statement cache full (raise DB_STMT_CACHE)");
    return NULL;
  }
  db_st_t *st = db->drv->prepare(db, sql, true);
  if (!st) {
    db_fail(db, err, "preparing a statement");
    return NULL;
  }
  db->stmts[db->n_stmts].sql = sql;
  db->stmts[db->n_stmts].st = st;
  db->n_stmts++;
  return st;
}

db_st_t *db_prepare(db_t *db, const char *sql, tn_err_t *err) {
  db_st_t *st = db->drv->prepare(db, sql, false);
  if (!st) db_fail(db, err, "preparing a statement");
  return st;
}

int db_step_done(db_t *db, db_st_t *st, const char *op, tn_err_t *err) {
  int rc = db_step(st);
  int ret = rc == DB_DONE || rc == DB_ROW ? 0 : db_fail(db, err, op);
  db_reset(st);
  return ret;
}

void *db_arena_room(tn_arena_t *a, void *items, size_t n, size_t *cap, size_t size) {
  if (n < *cap) return items;
  *cap = *cap ? 2 * *cap : 16;
  void *grown = tn_arena_alloc(a, *cap * size);
  if (n) memcpy(grown, items, n * size);
  return grown;
}

double db_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) * 1e-6;
}

void db_bind_text(db_st_t *st, int i, const char *s) {
  if (s)
    st->db->drv->bind_text(st, i, s);
  else
    db_bind_null(st, i);
}

void db_bind_opt_int(db_st_t *st, int i, int64_t v) {
  if (v >= 0)
    db_bind_int(st, i, v);
  else
    db_bind_null(st, i);
}

void db_bind_opt_real(db_st_t *st, int i, double v) {
  if (isnan(v))
    db_bind_null(st, i);
  else
    db_bind_real(st, i, v);
}

const char *db_col_text(db_st_t *st, int col, tn_arena_t *a) {
  const char *s = db_col_str(st, col);
  return s ? tn_arena_strndup(a, s, strlen(s)) : NULL;
}

int db_col_opt_int(db_st_t *st, int col) { return db_col_null(st, col) ? -1 : (int)db_col_int(st, col); }

double db_col_opt_real(db_st_t *st, int col) { return db_col_null(st, col) ? NAN : db_col_real(st, col); }

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

/* ---- transactions -------------------------------------------------------- */

int db_tx_begin(db_t *db, tn_err_t *err) {
  const char *sql = db->tx_depth == 0 ? db->drv->begin_sql : "SAVEPOINT db_sp";
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
  db->drv->exec(db, sql); /* fails only if the engine already rolled back (or the connection is gone) */
  db->tx_depth--;
}

/* ---- open / migrate ---------------------------------------------------- */

int db_schema_version(db_t *db, int *version, tn_err_t *err) { return db->drv->read_version(db, version, err); }

/* Applies step `i` unless another connection already did (checked inside
 * the write transaction, so two processes opening a new database agree). */
static int migrate_step(db_t *db, int i, tn_err_t *err) {
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  int v = 0;
  rc = db->drv->read_version(db, &v, err);
  if (!rc && v == i) {
    const char *after = db->drv->migrations_after[i];
    rc = db_exec(db, db->drv->migrations[i], "applying a schema migration", err);
    if (!rc && db_migration_fns[i]) rc = db_migration_fns[i](db, err);
    if (!rc && after) rc = db_exec(db, after, "applying a schema migration", err);
    if (!rc && db->drv->migration_check) rc = db->drv->migration_check(db, err);
    if (!rc) rc = db->drv->write_version(db, i + 1, err);
  }
  if (rc) {
    db_tx_rollback(db);
    return tn_err_prefix(err, "migration %d -> %d", i, i + 1);
  }
  return db_tx_commit(db, err);
}

const db_migration_fn db_migration_fns[DB_SCHEMA_VERSION] = {[7] = db_rehash_v8};

static int too_new(int v, tn_err_t *err) {
  return tn_err_set(err, TN_EUNSUPPORTED,
                    "schema version %d is newer than this build of tuned knows (up to %d); use a newer tuned or "
                    "another database", v, DB_SCHEMA_VERSION);
}

static int migrate_all(db_t *db, tn_err_t *err) {
  int v = 0;
  int rc = db->drv->read_version(db, &v, err);
  if (rc) return rc;
  if (v > DB_SCHEMA_VERSION) return too_new(v, err);
  for (int i = v; i < DB_SCHEMA_VERSION; i++) {
    rc = migrate_step(db, i, err);
    if (rc) return rc;
  }
  return 0;
}

/* Connections opening a new database at the same instant: one migrates,
 * the others wait for the lock, then find the version moved on (each step's
 * transaction starts after the lock is held, so it sees the tables). */
int db_migrate(db_t *db, tn_err_t *err) {
  int rc = db->drv->migration_lock ? db->drv->migration_lock(db, true, err) : 0;
  if (rc) return rc;
  rc = migrate_all(db, err);
  if (db->drv->migration_lock) {
    tn_err_t uerr = {0};
    int urc = db->drv->migration_lock(db, false, &uerr);
    if (!rc && urc) rc = tn_err_set(err, urc, "%s", uerr.msg);
  }
  return rc;
}

int db_require_version(db_t *db, tn_err_t *err) {
  int v = 0;
  int rc = db->drv->read_version(db, &v, err);
  if (rc) return rc;
  if (v > DB_SCHEMA_VERSION) return too_new(v, err);
  if (v < DB_SCHEMA_VERSION)
    return tn_err_set(err, TN_ESTATE, "schema version %d, this build reads %d only (open it read-write first: "
                      "db_open migrates)", v, DB_SCHEMA_VERSION);
  return 0;
}

bool db_is_url(const char *path) {
  return path && (strncmp(path, "postgresql://", 13) == 0 || strncmp(path, "postgres://", 11) == 0);
}

void db_redact(const char *path, char *buf, size_t size) {
  if (!db_is_url(path)) {
    snprintf(buf, size, "%s", path ? path : "(null)");
    return;
  }
  /* postgresql://user:PASSWORD@host/db?password=PASSWORD&...: each PASSWORD becomes *** */
  tn_buf_t b;
  tn_buf_init(&b);
  const char *auth = strstr(path, "://") + 3, *end = auth + strcspn(auth, "/?");
  const char *at = memchr(auth, '@', (size_t)(end - auth));
  const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
  const char *p = path;
  if (colon) {
    tn_buf_printf(&b, "%.*s:***", (int)(colon - path), path);
    p = at;
  }
  for (const char *k; (k = strstr(p, "password=")) != NULL;) {
    bool param = k > path && (k[-1] == '?' || k[-1] == '&');
    const char *value = k + strlen("password=");
    tn_buf_printf(&b, "%.*s%s", (int)(value - p), p, param ? "***" : "");
    p = param ? value + strcspn(value, "&") : value;
  }
  tn_buf_put(&b, p);
  snprintf(buf, size, "%s", tn_buf_str(&b));
  tn_buf_free(&b);
}

/* Opens through the engine the locator names; errors start with it
 * (its password hidden). */
static int open_db(const char *path, bool readonly, db_t **out, tn_err_t *err) {
  *out = NULL;
  if (!path) return tn_err_set(err, TN_EINVAL, "db_open: no database path given");
  db_t *db = tn_xcalloc(1, sizeof *db);
  db->readonly = readonly;
  int rc = db_is_url(path) ? db_pg_connect(db, path, readonly, err) : db_sqlite_connect(db, path, readonly, err);
  if (rc) {
    char shown[PATH_MAX];
    db_redact(path, shown, sizeof shown);
    tn_err_prefix(err, "database '%s'", shown);
    db_close(db);
    return rc;
  }
  *out = db;
  return 0;
}

int db_open(const char *path, db_t **out, tn_err_t *err) { return open_db(path, false, out, err); }

int db_open_readonly(const char *path, db_t **out, tn_err_t *err) { return open_db(path, true, out, err); }

const char *db_engine(const db_t *db) { return db->drv->engine; }

int db_claim_name(db_t *db, const char *name, tn_err_t *err) {
  return strcmp(db->drv->engine, "postgresql") == 0 ? db_pg_claim_name(db, name, err) : 0;
}

void db_close(db_t *db) {
  if (!db) return;
  if (db->h)
    while (db->tx_depth > 0) db_tx_rollback(db);
  /* the statements go even where the connection went first (a PostgreSQL
   * session closed for good by revive(): its statements are client-side) */
  for (size_t i = 0; i < db->n_stmts; i++) db_finalize(db->stmts[i].st);
  if (db->h) db->drv->close(db);
  free(db->claimed);
  free(db);
}

int db_check(db_t *db, tn_err_t *err) { return db->drv->check(db, err); }
