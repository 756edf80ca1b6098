/* db_internal.h — what the db sources share: the connection struct, the
 * prepared-statement cache, SQLite error reporting and small JSON helpers.
 * Not part of the public API (the tests use db_migrations). */
#ifndef TUNED_DB_INTERNAL_H
#define TUNED_DB_INTERNAL_H

#include <sqlite3.h>

#include "db/db.h"

#define DB_STMT_CACHE 48

struct db {
  sqlite3 *h;
  int tx_depth; /* open db_tx_begin levels */
  bool run_secs_text; /* db_set_run_secs_text */
  size_t n_stmts;
  struct {
    const char *sql; /* identity: the static SQL string's address */
    sqlite3_stmt *st;
  } stmts[DB_STMT_CACHE];
};

/* The migration steps: step i takes user_version i to i + 1. */
extern const char *const db_migrations[DB_SCHEMA_VERSION];

/* Sets err from the connection's last error: "<op>: <sqlite message>".
 * Constraint failures map to TN_EINVAL, out-of-memory to TN_ENOMEM, the
 * rest to TN_EIO. */
int db_fail(db_t *db, tn_err_t *err, const char *op);
/* Runs SQL without results (may hold several statements). */
int db_exec(db_t *db, const char *sql, const char *op, tn_err_t *err);
/* A cached prepared statement for a static SQL string, reset and unbound.
 * Callers sqlite3_reset it when done so no read snapshot stays open. */
sqlite3_stmt *db_stmt(db_t *db, const char *sql, tn_err_t *err);
/* Steps a write statement to completion and resets it. */
int db_step_done(db_t *db, sqlite3_stmt *st, const char *op, tn_err_t *err);

/* Wall-clock time in unix seconds. */
double db_now(void);

/* Binding helpers: NULL text, negative int and NAN real bind SQL NULL. */
void db_bind_text(sqlite3_stmt *st, int i, const char *s);
void db_bind_opt_int(sqlite3_stmt *st, int i, int64_t v);
void db_bind_opt_real(sqlite3_stmt *st, int i, double v);
/* Column readers: NULL -> NULL / -1 / NAN; text is copied into the arena. */
const char *db_col_text(sqlite3_stmt *st, int col, tn_arena_t *a);
int db_col_opt_int(sqlite3_stmt *st, int col);
double db_col_opt_real(sqlite3_stmt *st, int col);

/* Parses `text` (NULL means "{}") as a JSON object and returns it in compact
 * canonical form (malloc'ed); `what` names the field in errors. */
int db_canon_object(const char *text, const char *what, char **out, tn_err_t *err);
bool db_is_hex16(const char *s);

/* Run times as a JSON array text (%.17g: exact round trip; malloc'ed) and
 * back (numbers only; NULL text: none). */
char *db_run_secs_json(const double *v, size_t n);
const double *db_read_run_secs(const char *text, size_t *n, tn_arena_t *a);

/* Shared by records.c and jsonl.c. */
int db_workload_ensure(db_t *db, const db_workload_t *w, int64_t *id, bool *added, tn_err_t *err);
int db_target_put(db_t *db, const db_target_t *t, bool replace, int64_t *id, bool *added,
                  tn_err_t *err);
/* Validates and inserts one record (its created/updated as given) without a
 * transaction of its own; `where` prefixes errors ("record 3"). */
int db_record_insert(db_t *db, db_record_t *r, const char *where, tn_err_t *err);

/* Columns read by db_read_record; export appends the workload and target ones. */
#define RECORD_COLS                                                                          \
  "r.id, r.workload_id, r.target_id, w.hash, t.name, r.trace, r.trace_hash, r.run_secs,"   \
  " r.median_secs, r.status, r.error, r.registers, r.shared_bytes, r.spill_bytes,"          \
  " r.compiler, r.toolkit_version, r.arch, r.verified, r.created, r.updated,"               \
  " r.cupti_median_secs, r.times_disagree"
#define RECORD_NCOLS 22
#define RECORD_FROM                                                                          \
  " FROM records r JOIN workloads w ON w.id = r.workload_id"                                 \
  " JOIN targets t ON t.id = r.target_id"

/* Reads one row selected with RECORD_COLS into a db_record_t; the _text
 * form leaves the run times as stored (db_set_run_secs_text). */
void db_read_record(sqlite3_stmt *st, void *item, tn_arena_t *a);
void db_read_record_text(sqlite3_stmt *st, void *item, tn_arena_t *a);
/* Prepares "SELECT cols RECORD_FROM WHERE <q's filters> ORDER BY order
 * LIMIT/OFFSET" with q's values bound (q NULL: everything); the caller
 * finalizes the statement. */
int db_prepare_query(db_t *db, const db_query_t *q, const char *cols, const char *order,
                     sqlite3_stmt **out, tn_err_t *err);

#endif
