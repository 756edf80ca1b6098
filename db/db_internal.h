/* db_internal.h — what the db sources share: the connection struct, the SQL
 * driver that lets one set of queries run on SQLite and on PostgreSQL, the
 * prepared-statement cache and small JSON helpers.  Not part of the public
 * API (the tests use db_migrations).
 *
 * The queries are written once, in SQL both engines take: numbered
 * placeholders (?1, ?2: the PostgreSQL driver makes them $1, $2), ON
 * CONFLICT for upserts, RETURNING, no engine-only functions.  What must
 * differ (the schema's column types, PRAGMAs, where the schema version is
 * kept, how a transaction starts) lives in the driver. */
#ifndef TUNED_DB_INTERNAL_H
#define TUNED_DB_INTERNAL_H

#include "db/db.h"

#define DB_STMT_CACHE 48

/* db_step's answers. */
enum { DB_ERROR = -1, DB_DONE = 0, DB_ROW = 1 };

/* A statement of either engine; each driver's own struct starts with it. */
typedef struct db_st {
  db_t *db;
} db_st_t;

/* What an engine provides.  Calls that fail keep the error on the
 * connection for fail() to report. */
typedef struct db_driver {
  const char *engine;                /* "sqlite", "postgresql" */
  const char *begin_sql;             /* the outermost transaction's BEGIN */
  const char *const *migrations;     /* DB_SCHEMA_VERSION steps: i takes version i to i + 1 */
  /* SQL run after step i's db_migration_fns[i] (NULL: none), for steps that
   * compute new values in C between two halves of SQL. */
  const char *const *migrations_after;
  int (*exec)(db_t *db, const char *sql); /* 0 or DB_ERROR; may hold several statements */
  db_st_t *(*prepare)(db_t *db, const char *sql, bool cached); /* NULL: error */
  void (*finalize)(db_st_t *st);
  void (*reset)(db_st_t *st);        /* ends the run and unbinds everything */
  void (*bind_null)(db_st_t *st, int i);
  void (*bind_int)(db_st_t *st, int i, int64_t v);
  void (*bind_real)(db_st_t *st, int i, double v);
  void (*bind_text)(db_st_t *st, int i, const char *s);
  void (*bind_blob)(db_st_t *st, int i, const void *p, size_t n);
  int (*step)(db_st_t *st);          /* DB_ROW, DB_DONE or DB_ERROR */
  bool (*col_null)(db_st_t *st, int col);
  int64_t (*col_int)(db_st_t *st, int col);
  double (*col_real)(db_st_t *st, int col);
  const char *(*col_text)(db_st_t *st, int col); /* NULL for SQL NULL; valid until the next step */
  const void *(*col_blob)(db_st_t *st, int col, size_t *n);
  int64_t (*changes)(db_t *db);      /* rows the last write changed */
  int (*fail)(db_t *db, tn_err_t *err, const char *op);
  bool (*last_was_foreign_key)(db_t *db);
  int (*read_version)(db_t *db, int *version, tn_err_t *err);
  /* Inside a migration's transaction: keeps other connections from
   * migrating at the same time (NULL: the BEGIN does it), checks the step's
   * result (NULL: nothing to check) and records the new version. */
  int (*migration_lock)(db_t *db, tn_err_t *err);
  int (*migration_check)(db_t *db, tn_err_t *err);
  int (*write_version)(db_t *db, int version, tn_err_t *err);
  int (*check)(db_t *db, tn_err_t *err);
  void (*close)(db_t *db);
} db_driver_t;

extern const db_driver_t db_sqlite_driver;
extern const db_driver_t db_pg_driver;

struct db {
  const db_driver_t *drv;
  void *h;            /* sqlite3 * or PGconn * */
  int tx_depth;       /* open db_tx_begin levels */
  bool run_secs_text; /* db_set_run_secs_text */
  bool readonly;
  size_t n_stmts;
  struct {
    const char *sql; /* identity: the static SQL string's address */
    db_st_t *st;
  } stmts[DB_STMT_CACHE];
  /* PostgreSQL: the last error (libpq keeps it on results, not the connection) */
  char last_err[512];
  char last_state[6];
  int64_t last_changes;
  int n_prepared;     /* names given to server-side statements so far */
};

/* The SQLite migration steps: step i takes user_version i to i + 1. */
extern const char *const db_migrations[DB_SCHEMA_VERSION];
extern const char *const db_migrations_after[DB_SCHEMA_VERSION];

/* A migration step's C part, the same for both engines (NULL: none): runs
 * in the step's transaction after its SQL (migrations[i]) and before
 * migrations_after[i]. */
typedef int (*db_migration_fn)(db_t *db, tn_err_t *err);
extern const db_migration_fn db_migration_fns[DB_SCHEMA_VERSION];
/* Step 7 -> 8 (rehash.c): every workload's and trace's identity recomputed
 * into the columns id_v8 and trace_id_v8 that its SQL added. */
int db_rehash_v8(db_t *db, tn_err_t *err);

/* Each engine's opening: the connection is set up (db->drv, db->h) but not
 * migrated.  The PostgreSQL one fails with TN_EUNSUPPORTED in a build
 * without libpq. */
int db_sqlite_connect(db_t *db, const char *path, bool readonly, tn_err_t *err);
int db_pg_connect(db_t *db, const char *url, bool readonly, tn_err_t *err);
int db_pg_claim_name(db_t *db, const char *name, tn_err_t *err);

/* Brings the schema up to DB_SCHEMA_VERSION (each step in a transaction
 * of its own); a newer schema is TN_EUNSUPPORTED. */
int db_migrate(db_t *db, tn_err_t *err);
/* For read-only connections: the schema must be exactly this build's
 * (TN_ESTATE for an older one, TN_EUNSUPPORTED for a newer one). */
int db_require_version(db_t *db, tn_err_t *err);

/* Sets err from the connection's last error: "<op>: <engine message>".
 * Constraint failures map to TN_EINVAL, out-of-memory to TN_ENOMEM, the
 * rest to TN_EIO. */
int db_fail(db_t *db, tn_err_t *err, const char *op);
/* Runs SQL without results (may hold several statements). */
int db_exec(db_t *db, const char *sql, const char *op, tn_err_t *err);
/* A cached prepared statement for a static SQL string, reset and unbound.
 * Callers db_reset it when done so no read snapshot stays open. */
db_st_t *db_stmt(db_t *db, const char *sql, tn_err_t *err);
/* An uncached statement (dynamic SQL): db_finalize it. */
db_st_t *db_prepare(db_t *db, const char *sql, tn_err_t *err);
/* Steps a write statement to completion and resets it. */
int db_step_done(db_t *db, db_st_t *st, const char *op, tn_err_t *err);

/* The driver calls, for the query code. */
static inline int db_step(db_st_t *st) { return st->db->drv->step(st); }
static inline void db_reset(db_st_t *st) { st->db->drv->reset(st); }
static inline void db_finalize(db_st_t *st) { if (st) st->db->drv->finalize(st); }
static inline void db_bind_null(db_st_t *st, int i) { st->db->drv->bind_null(st, i); }
static inline void db_bind_int(db_st_t *st, int i, int64_t v) { st->db->drv->bind_int(st, i, v); }
static inline void db_bind_real(db_st_t *st, int i, double v) { st->db->drv->bind_real(st, i, v); }
static inline void db_bind_blob(db_st_t *st, int i, const void *p, size_t n) { st->db->drv->bind_blob(st, i, p, n); }
static inline bool db_col_null(db_st_t *st, int col) { return st->db->drv->col_null(st, col); }
static inline int64_t db_col_int(db_st_t *st, int col) { return st->db->drv->col_int(st, col); }
static inline double db_col_real(db_st_t *st, int col) { return st->db->drv->col_real(st, col); }
static inline const char *db_col_str(db_st_t *st, int col) { return st->db->drv->col_text(st, col); }
static inline const void *db_col_blob(db_st_t *st, int col, size_t *n) { return st->db->drv->col_blob(st, col, n); }
static inline int64_t db_changes(db_t *db) { return db->drv->changes(db); }

/* LIMIT for "no limit" in both engines (SQLite's -1 is an error in PostgreSQL). */
static inline int64_t db_sql_limit(size_t limit) { return limit ? (int64_t)limit : INT64_MAX; }

/* Wall-clock time in unix seconds. */
double db_now(void);
/* The job queue's part of db_check (batches.c): TN_EIO naming what disagrees. */
int db_batches_check(db_t *db, tn_err_t *err);
/* A list of items of `size` bytes in an arena with room for one more: items
 * itself, or a copy of its n items in a twice larger block (*cap grows). */
void *db_arena_room(tn_arena_t *a, void *items, size_t n, size_t *cap, size_t size);

/* Binding helpers: NULL text, negative int and NAN real bind SQL NULL. */
void db_bind_text(db_st_t *st, int i, const char *s);
void db_bind_opt_int(db_st_t *st, int i, int64_t v);
void db_bind_opt_real(db_st_t *st, int i, double v);
/* Column readers: NULL -> NULL / -1 / NAN; text is copied into the arena. */
const char *db_col_text(db_st_t *st, int col, tn_arena_t *a);
int db_col_opt_int(db_st_t *st, int col);
double db_col_opt_real(db_st_t *st, int col);

/* Parses `text` (NULL means "{}") as a JSON object and returns it in compact
 * canonical form (malloc'ed); `what` names the field in errors. */
int db_canon_object(const char *text, const char *what, char **out, tn_err_t *err);

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
void db_read_record(db_st_t *st, void *item, tn_arena_t *a);
void db_read_record_text(db_st_t *st, void *item, tn_arena_t *a);
/* Prepares "SELECT cols RECORD_FROM WHERE <q's filters> ORDER BY order
 * LIMIT/OFFSET" with q's values bound (q NULL: everything); the caller
 * finalizes the statement. */
int db_prepare_query(db_t *db, const db_query_t *q, const char *cols, const char *order,
                     db_st_t **out, tn_err_t *err);

#endif
