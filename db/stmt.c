/* stmt.c — what every query of both engines uses: errors, the statement
 * cache, binding and column helpers, and transactions (nested as
 * savepoints).  It calls only the engine's driver (db->drv). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

const char *db_engine(const db_t *db) { return db->drv->engine; }
