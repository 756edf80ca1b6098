/* schema.c — the versioned schema: the migrations' loop (each step in a
 * transaction of its own, the engine's SQL and the steps' shared C part),
 * and the version check of read-only connections. */
#include "db/db_internal.h"

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
