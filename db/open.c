/* open.c — opening a database by locator: a file path for SQLite, a
 * postgresql:// URL for PostgreSQL (its password hidden in messages), and
 * closing it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"

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
