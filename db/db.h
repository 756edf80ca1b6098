/* db.h — the tuning database: workloads, targets, measured records and jobs
 * in one SQLite file (WAL mode) or one PostgreSQL database that several
 * daemons share, with JSON-lines export/import.  Prefix: db_.
 *
 * The locator names the engine: a file path is SQLite, a
 * postgresql://[user[:password]@][host][:port][/dbname][?param=value] URL
 * (libpq's; postgres:// too) is PostgreSQL.  Both hold the same tables,
 * migrations and guarantees; every call below works on either.
 *
 * Threads: a db_t is one connection and is NOT shared between threads.
 * Every thread that needs the database calls db_open on the same locator
 * and gets its own connection; readers run while one writer commits (WAL
 * in SQLite, MVCC in PostgreSQL).
 *
 * Durability: every public call that writes commits before it returns
 * (unless the caller opened a transaction with db_tx_begin).  A process
 * killed at any moment (SIGKILL) loses nothing that was committed and leaves
 * no partial batch; with SQLite, synchronous=NORMAL means only an OS crash
 * or power loss can drop the last commits (never corrupt the file); with
 * PostgreSQL a commit is as durable as the server's settings make it.
 *
 * Strings and arrays in results live in an arena owned by the result (free
 * it with the matching *_free) or by the caller (the *_get functions). */
#ifndef TUNED_DB_H
#define TUNED_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* The schema version this build creates and understands. */
#define DB_SCHEMA_VERSION 8

typedef struct db db_t;

/* ---- connection ------------------------------------------------------- */

/* Opens (creating if needed) the database at `path`, sets WAL mode,
 * synchronous=NORMAL, foreign keys and a busy timeout, and applies pending
 * migrations.  A database made by a newer tuned (user_version above
 * DB_SCHEMA_VERSION) is refused with TN_EUNSUPPORTED.  A postgresql:// URL
 * connects (the database must exist; its tables are created) and migrates
 * the same way; a bad URL is TN_EINVAL, a server that cannot be reached or
 * refuses the login TN_EIO with libpq's reason.  Errors never show the
 * URL's password. */
int db_open(const char *path, db_t **out, tn_err_t *err);
/* Opens an existing database file for queries only: the connection can
 * never write, and in WAL mode its reads never wait on a writer (a read sees
 * the last commit while another connection holds a write transaction).
 * Opened with db_open's care but creating nothing: the file must exist, be a
 * regular file and not a symbolic link (TN_EINVAL), be in WAL mode and have
 * exactly DB_SCHEMA_VERSION (a read-write db_open migrates first;
 * TN_ESTATE for an older one, TN_EUNSUPPORTED for a newer one). */
int db_open_readonly(const char *path, db_t **out, tn_err_t *err);
void db_close(db_t *db); /* NULL is fine; rolls back an open transaction */

/* Whether a locator is a PostgreSQL URL (postgresql:// or postgres://). */
bool db_is_url(const char *path);
/* The locator as it may be shown or logged: a URL's password as ***. */
void db_redact(const char *path, char *buf, size_t size);
/* For a process that must be the only one of its name on a shared
 * database (a daemon and its jobs): PostgreSQL holds a lock on `name` for
 * this connection's life (released when it closes or its process dies,
 * SIGKILL included); a second holder gets TN_ESTATE.  SQLite: nothing to do
 * (one process per file is the caller's own lock). */
int db_claim_name(db_t *db, const char *name, tn_err_t *err);
/* "sqlite" or "postgresql". */
const char *db_engine(const db_t *db);

/* Record queries on this connection (db_records_query, db_best,
 * db_record_get) give each record's run times as the stored JSON text
 * (run_secs_text) instead of numbers: a reader that passes them on as JSON
 * skips converting every time twice (decimal text to double and back). */
void db_set_run_secs_text(db_t *db, bool text);

/* The schema version of the open database (SQLite: PRAGMA user_version;
 * PostgreSQL: the tuned_schema table). */
int db_schema_version(db_t *db, int *version, tn_err_t *err);
/* SQLite: PRAGMA integrity_check: 0 when it says "ok", else TN_EIO with its
 * first line.  PostgreSQL (which checks its own files): the schema version
 * and that no job points at a missing record.  Both: the job queue agrees
 * with the jobs and their trials (a done job's batches are all done, a done
 * batch counts exactly the trials committed in its range). */
int db_check(db_t *db, tn_err_t *err);

/* Groups several calls into one atomic commit (nests: inner levels are
 * savepoints).  Every begin needs exactly one commit or rollback. */
int db_tx_begin(db_t *db, tn_err_t *err);
int db_tx_commit(db_t *db, tn_err_t *err);
void db_tx_rollback(db_t *db);

/* ---- workloads and targets ---------------------------------------------- */

typedef struct db_workload {
  int64_t id;          /* out */
  const char *hash;    /* identity: ir_func_hash, TN_ID_HEX lower-case hex digits */
  const char *name;
  const char *source;  /* workload-language text */
  const char *params;  /* JSON object text; NULL means "{}" */
  double flops, bytes;
  double created;      /* out: unix seconds */
  int64_t n_records;   /* out (db_workloads_list only) */
} db_workload_t;

/* Inserts the workload unless one with the same hash exists; either way sets
 * *id (may be NULL) to the row for that hash.  An existing row is kept as is:
 * the hash identifies the computation, the first name and text stay. */
int db_workload_upsert(db_t *db, const db_workload_t *w, int64_t *id, tn_err_t *err);
/* Looks a workload up by hash; unknown hash -> TN_EINVAL naming it. */
int db_workload_get(db_t *db, const char *hash, db_workload_t *out, tn_arena_t *arena,
                    tn_err_t *err);
/* The whole hash of the one workload whose hash starts with `prefix` (at
 * least TN_ID_SHOWN hex digits, as tables show them; a whole hash is taken
 * as is, whether stored or not).  A prefix that is too short or not hex is
 * TN_EINVAL; *found = false when no workload has it; two that have it (a
 * prefix of 128 bits: never by chance) are TN_ESTATE naming both. */
int db_workload_resolve(db_t *db, const char *prefix, char out[TN_ID_SIZE], bool *found, tn_err_t *err);

typedef struct db_workloads {
  db_workload_t *items;
  size_t n;
  tn_arena_t *arena;
} db_workloads_t;

/* All workloads ordered by hash, with their record counts; limit 0 = all. */
int db_workloads_list(db_t *db, size_t limit, size_t offset, db_workloads_t *out, tn_err_t *err);
void db_workloads_free(db_workloads_t *w);

typedef struct db_target {
  int64_t id;        /* out */
  const char *name;  /* "nvidia/tesla-t4" */
  const char *kind;  /* "cuda", "opencl", "cpu" */
  const char *arch;  /* NULL means "" */
  const char *json;  /* the target description, JSON object; NULL means "{}" */
} db_target_t;

/* Inserts the target or, when the name exists, replaces kind/arch/json with
 * the given ones (the running daemon's description wins).  Sets *id. */
int db_target_upsert(db_t *db, const db_target_t *t, int64_t *id, tn_err_t *err);

typedef struct db_targets {
  db_target_t *items;
  size_t n;
  tn_arena_t *arena;
} db_targets_t;

int db_targets_list(db_t *db, db_targets_t *out, tn_err_t *err); /* ordered by name */
void db_targets_free(db_targets_t *t);

/* ---- records ------------------------------------------------------------ */

typedef enum db_status {
  DB_STATUS_OK,
  DB_STATUS_BUILD_ERROR,
  DB_STATUS_RUN_ERROR,
  DB_STATUS_TIMEOUT,
  DB_STATUS_WRONG_RESULT,
  DB_STATUS_TOO_SLOW, /* stopped early, far slower than the best so far (not verified) */
} db_status_t;

#define DB_STATUS_ANY (-1)

const char *db_status_name(db_status_t s); /* "ok", "build_error", ... */
/* Parses a status name; unknown -> TN_EINVAL listing the valid names. */
int db_status_parse(const char *name, db_status_t *out, tn_err_t *err);

/* One measured candidate.  For db_record_add_batch the caller fills the
 * inputs; results from queries fill every field. */
typedef struct db_record {
  int64_t id;                 /* out: 0 for a skipped duplicate */
  int64_t workload_id, target_id;
  const char *workload_hash;  /* out (queries) */
  const char *target_name;    /* out (queries) */
  const char *trace;          /* trace JSON text, stored verbatim */
  char trace_hash[TN_ID_SIZE]; /* out: db_trace_hash(trace) */
  const double *run_secs;     /* every repeat, in run order */
  size_t n_runs;
  double median_secs;         /* NAN when there is no time (failed builds) */
  db_status_t status;
  const char *error;          /* NULL when none */
  int registers, shared_bytes, spill_bytes; /* -1 when unknown */
  const char *compiler, *toolkit_version, *arch; /* NULL when unknown */
  bool verified;              /* result checked against the reference */
  /* CUDA: the median of the kernels' own durations (CUPTI's activity
   * records of the same timed runs); NAN when unknown.  times_disagree: it
   * differs from median_secs (CUDA events) by over 10 % (ms_times_disagree).
   * A re-measure replaces both with its own (db_record_set_cupti). */
  double cupti_median_secs;
  bool times_disagree;
  bool duplicate;             /* out (add_batch): trace already recorded */
  /* out (queries on a connection set with db_set_run_secs_text): run_secs as
   * stored, a JSON array text, with run_secs NULL and n_runs 0; else NULL. */
  const char *run_secs_text;
  double created, updated;    /* out: unix seconds */
} db_record_t;

/* Fills the optional fields of r with "unknown" (-1, NULL, NAN); call before
 * setting the fields you know. */
void db_record_init(db_record_t *r);

/* The trace's identity: of its text in the TN_ID_TRACE domain (common.h),
 * TN_ID_HEX lower-case hex digits + NUL. */
void db_trace_hash(const char *trace, char out[TN_ID_SIZE]);
/* Median of v[0..n) (mean of the middle two for even n); NAN when n == 0. */
double db_median(const double *v, size_t n);

typedef struct db_batch_stats {
  size_t inserted, duplicates;
} db_batch_stats_t;

/* Inserts n records in ONE transaction: all of them or (on error) none.
 * Records whose (workload, target, trace hash) already exist are skipped
 * and marked duplicate.  Sets each record's id, trace_hash and created.
 * Invalid records (bad trace JSON, ok without a time, verified but not ok,
 * unknown workload or target id) fail the batch with a message naming the
 * record's index.  stats may be NULL. */
int db_record_add_batch(db_t *db, db_record_t *recs, size_t n, db_batch_stats_t *stats,
                        tn_err_t *err);

/* Whether a trace with this hash was recorded for (workload, target). */
int db_record_exists(db_t *db, int64_t workload_id, int64_t target_id, const char *trace_hash,
                     bool *exists, tn_err_t *err);

/* Marks a record verified or not (updates its `updated` time).  Only ok
 * records can be verified. */
int db_record_set_verified(db_t *db, int64_t record_id, bool verified, tn_err_t *err);

/* Replaces an ok record's times with a new measurement of the same trace
 * (the search's re-measure of its best candidates: every sample of every
 * round, and their median) and updates its `updated` time.  Other records
 * -> TN_EINVAL. */
/* Sets an ok record's CUPTI kernel time (NAN: unknown) and disagreement
 * flag, as a re-measure finds them beside its new event times.  Other
 * records, or a time that is not finite and >= 0 -> TN_EINVAL. */
int db_record_set_cupti(db_t *db, int64_t record_id, double cupti_median_secs, bool times_disagree, tn_err_t *err);
int db_record_set_times(db_t *db, int64_t record_id, const double *run_secs, size_t n, double median_secs,
                        tn_err_t *err);

/* The record with this id (strings in arena); an unknown id is TN_EINVAL
 * naming it. */
int db_record_get(db_t *db, int64_t id, db_record_t *out, tn_arena_t *arena, tn_err_t *err);

typedef struct db_records {
  db_record_t *items;
  size_t n;
  tn_arena_t *arena;
} db_records_t;

void db_records_free(db_records_t *r);

typedef struct db_query {
  const char *workload_hash;  /* NULL: any workload */
  const char *target_name;    /* NULL: any target */
  int status;                 /* a db_status_t or DB_STATUS_ANY */
  bool verified_only;
  size_t limit, offset;       /* limit 0: no limit */
} db_query_t;

/* A query matching everything (status DB_STATUS_ANY, no limit). */
db_query_t db_query_all(void);

/* Records matching q, ordered by workload hash, target name, record id. */
int db_records_query(db_t *db, const db_query_t *q, db_records_t *out, tn_err_t *err);

/* The k (0: all) fastest verified ok records of a workload on a target, by median
 * time (ties by record id).  target_name is required: records are never
 * compared across targets.  Unknown workload or target -> no records. */
int db_best(db_t *db, const char *workload_hash, const char *target_name, size_t k,
            db_records_t *out, tn_err_t *err);

/* ---- cost models (models.c) ------------------------------------------------ */

/* The search's cost model of one target, saved after each tune: the model
 * (cost_model/'s save format: its training data and booster) and the ids of
 * the records its training samples came from, in sample order (0 for a
 * sample without a record).  One row per (target, format): a build with
 * another feature layout or file format keeps its own. */
typedef struct db_cost_model {
  int64_t target_id;
  int format;
  const void *model;
  size_t model_len;
  const int64_t *record_ids;
  size_t nrecord_ids;
  double updated; /* out: unix seconds */
} db_cost_model_t;

/* Inserts or replaces the (target, format) row. */
int db_cost_model_put(db_t *db, const db_cost_model_t *m, tn_err_t *err);
/* The target's model of this format when there is one, else the most
 * recently saved one of another format (out->format says which; the caller
 * decides what to do with it), else *found = false.  Blobs live in the
 * arena.  A record-id list whose size is not a whole number of ids is
 * TN_EINVAL (a damaged row). */
int db_cost_model_get(db_t *db, int64_t target_id, int format, db_cost_model_t *out, bool *found, tn_arena_t *a,
                      tn_err_t *err);

/* ---- baselines (models.c) -------------------------------------------------- */

/* The unscheduled program's measurement on a target: measured once per
 * (workload, target) and kept for later tunes. */
typedef struct db_baseline {
  int64_t workload_id, target_id;
  db_status_t status;
  double median_secs;        /* NAN when there is no time */
  const double *run_secs;
  size_t n_runs;
  const char *error;         /* NULL when none */
  double created;            /* out */
} db_baseline_t;

/* Inserts or replaces the (workload, target) row. */
int db_baseline_put(db_t *db, const db_baseline_t *b, tn_err_t *err);
/* The row for (workload hash, target name), *found = false when none. */
int db_baseline_get(db_t *db, const char *workload_hash, const char *target_name, db_baseline_t *out, bool *found,
                    tn_arena_t *a, tn_err_t *err);

/* ---- jobs --------------------------------------------------------------- */

typedef enum db_job_state {
  DB_JOB_QUEUED,
  DB_JOB_RUNNING,
  DB_JOB_DONE,
  DB_JOB_CANCELLED,
  DB_JOB_FAILED,
} db_job_state_t;

const char *db_job_state_name(db_job_state_t s); /* "queued", "running", ... */
int db_job_state_parse(const char *name, db_job_state_t *out, tn_err_t *err);
/* done, cancelled and failed are final: no further update is accepted. */
bool db_job_state_final(db_job_state_t s);

typedef struct db_job {
  int64_t id;                 /* out */
  db_job_state_t state;       /* out (create makes it queued) */
  int64_t workload_id, target_id;
  const char *workload_hash;  /* out */
  const char *target_name;    /* out */
  int64_t budget_trials;      /* >= 0 */
  double budget_seconds;      /* 0: no time limit */
  int64_t trials_done;        /* out */
  int64_t best_record_id;     /* out: 0 when none yet */
  uint64_t seed;
  const char *options;        /* JSON object text; NULL means "{}" */
  const char *error;          /* out: NULL when none */
  double created, updated;    /* out: unix seconds */
  double started, finished;   /* out: 0 when not yet */
  /* The daemon that runs it (its --name), NULL when any may: on a shared
   * PostgreSQL database each daemon resumes only its own jobs. */
  const char *owner;
} db_job_t;

/* Creates a queued job from job's inputs; sets job->id, state and times. */
int db_job_create(db_t *db, db_job_t *job, tn_err_t *err);

typedef struct db_job_progress {
  db_job_state_t state;
  int64_t trials_done;        /* -1: keep; otherwise never below the stored value */
  int64_t best_record_id;     /* 0: keep */
  const char *error;          /* NULL: keep */
} db_job_progress_t;

/* Moves a job to p->state and records progress.  Allowed moves: queued ->
 * running/cancelled/failed; running -> running/queued (requeue after a
 * restart)/done/cancelled/failed.  Final jobs refuse with TN_ESTATE.
 * `started` is set on the first move to running, `finished` on a final state. */
int db_job_update(db_t *db, int64_t id, const db_job_progress_t *p, tn_err_t *err);
/* Unknown id -> TN_EINVAL naming it. */
int db_job_get(db_t *db, int64_t id, db_job_t *out, tn_arena_t *arena, tn_err_t *err);

typedef struct db_jobs {
  db_job_t *items;
  size_t n;
  tn_arena_t *arena;
} db_jobs_t;

/* All jobs, newest first; limit 0 = all. */
int db_job_list(db_t *db, size_t limit, size_t offset, db_jobs_t *out, tn_err_t *err);
/* Queued and running jobs of `owner` (NULL: of anyone), oldest first: what
 * to resume after a restart. */
int db_jobs_unfinished(db_t *db, const char *owner, db_jobs_t *out, tn_err_t *err);
void db_jobs_free(db_jobs_t *j);

/* ---- a job's trials (trials.c) ------------------------------------------ */

/* One candidate a job measured: its place in the job's order, its record
 * (0: none, the trace was recorded already), the status and median time the
 * search saw, and when its measurement ended (unix seconds). */
typedef struct db_job_trial {
  int64_t trial;              /* 1, 2, ...: across the job's runs (a resumed job goes on counting) */
  int64_t record_id;
  db_status_t status;
  double median_secs;         /* NAN when there is no time */
  double measured;
} db_job_trial_t;

/* Inserts n trials of a job (call inside the transaction that commits their
 * records).  A trial number the job has already, an unknown job or record,
 * or ok without a time -> an error naming the trial. */
int db_job_trials_add(db_t *db, int64_t job_id, const db_job_trial_t *t, size_t n, tn_err_t *err);

typedef struct db_job_trials {
  db_job_trial_t *items;
  size_t n;
} db_job_trials_t;

/* The job's trials in order (none for a job that measured nothing, or ran
 * before schema version 6). */
int db_job_trials_get(db_t *db, int64_t job_id, db_job_trials_t *out, tn_err_t *err);
void db_job_trials_free(db_job_trials_t *t);

/* The job's first trial that failed (build error, run error, timeout or
 * wrong result; too_slow is no failure of the candidate) and its record's
 * error text in *error (from arena a; NULL when the trial has no record or
 * the record no text).  *found is false when none failed. */
int db_job_first_failure(db_t *db, int64_t job_id, db_job_trial_t *out, const char **error, bool *found,
                         tn_arena_t *a, tn_err_t *err);

/* ---- the shared job queue (batches.c) ----------------------------------- */

/* A job is divided into batches that daemons of its target lease: its
 * measurement batches (trials > 0; trial numbers first_trial ..
 * first_trial + trials - 1 in job_trials) and its last batch (trials 0: the
 * re-measure of the best candidates and the unscheduled program), leasable
 * once every measurement batch is done.  A lease lasts until lease_until
 * (unix seconds, the leasing host's clock) unless renewed; a lapsed lease
 * may be taken by another daemon, which then finds the trials the first one
 * committed (db_batch_committed) and measures the rest.  On PostgreSQL the
 * lease is SELECT ... FOR UPDATE SKIP LOCKED, so daemons never wait on each
 * other's choice; on SQLite the one daemon takes every batch. */
typedef enum db_batch_state { DB_BATCH_QUEUED, DB_BATCH_LEASED, DB_BATCH_DONE } db_batch_state_t;

const char *db_batch_state_name(db_batch_state_t s); /* "queued", "leased", "done" */

typedef struct db_batch {
  int64_t job_id, batch;      /* batch: 0, 1, ... in the job's order */
  int64_t first_trial, trials;
  db_batch_state_t state;
  const char *leased_by;      /* the holder's name (kept once done); NULL when never leased or not read */
  double lease_until;         /* 0 when not leased */
  int64_t leases;             /* how many times it was leased */
  int64_t trials_done;        /* committed trials, set when done */
} db_batch_t;

/* Divides what is left of the job's trial budget into batches of
 * batch_trials (the last one smaller) plus the last batch, once: a job that
 * has batches keeps them (two daemons planning at once make one plan).
 * *nbatches gets the job's number of batches. */
int db_job_batches_plan(db_t *db, int64_t job_id, int64_t batch_trials, size_t *nbatches, tn_err_t *err);
/* Leases the first leasable batch of an unfinished job on the target
 * (job_id 0: of any job, else of that job) to `holder` for lease_s seconds
 * and commits; *found = false when there is none. */
int db_batch_lease(db_t *db, int64_t target_id, int64_t job_id, const char *holder, double lease_s, db_batch_t *out,
                   bool *found, tn_err_t *err);
/* Extends the holder's lease by lease_s from now; TN_ESTATE when the lease
 * is lost (lapsed and taken, released) or the job ended. */
int db_batch_renew(db_t *db, const db_batch_t *b, const char *holder, double lease_s, tn_err_t *err);
/* Called inside the transaction that commits some of the batch's trials:
 * renews the lease (TN_ESTATE when lost: roll back, nothing is counted
 * twice) and sets the job's trials_done to its committed trials. */
int db_batch_commit_check(db_t *db, const db_batch_t *b, const char *holder, double lease_s, tn_err_t *err);
/* Marks the holder's batch done with its committed trials (TN_ESTATE when
 * the lease is lost); when that was the job's last batch not done, the job
 * is done too (its best record: the workload's fastest verified on the
 * target), in the same transaction. */
int db_batch_done(db_t *db, const db_batch_t *b, const char *holder, tn_err_t *err);
/* Gives the holder's batch back to the queue (a daemon stopping). */
int db_batch_release(db_t *db, const db_batch_t *b, const char *holder, tn_err_t *err);
/* How many of the batch's trial numbers job_trials has. */
int db_batch_committed(db_t *db, const db_batch_t *b, int64_t *n, tn_err_t *err);

typedef struct db_batches {
  db_batch_t *items;
  size_t n;
  tn_arena_t *arena;
} db_batches_t;

/* The job's batches in order. */
int db_job_batches_get(db_t *db, int64_t job_id, db_batches_t *out, tn_err_t *err);
void db_batches_free(db_batches_t *b);
/* Up to cap ids of unfinished jobs on the target (by name) with a leasable
 * batch or no batches planned yet, oldest first. */
int db_batch_jobs_open(db_t *db, const char *target_name, int64_t *ids, size_t cap, size_t *n, tn_err_t *err);

/* ---- JSON lines export / import --------------------------------------- */

/* Appends one JSON object per record matching q (NULL: all) to out, ordered
 * by workload hash, target name, trace hash (the same text for the same
 * content, whatever the insertion order).  Each line is self-contained:
 *   {"workload":{"hash","name","source","params","flops","bytes"},
 *    "target":{"name","kind","arch","json"}, "trace":"<trace text>",
 *    "trace_hash", "run_secs":[...], "median_secs", "status", "error",
 *    "registers", "shared_bytes", "spill_bytes", "compiler",
 *    "toolkit_version", "arch", "verified", "created", "updated"}
 * The trace is a JSON string holding the exact stored text, so its hash
 * survives the round trip. */
int db_export_jsonl(db_t *db, const db_query_t *q, tn_buf_t *out, tn_err_t *err);

typedef struct db_import_stats {
  size_t lines;               /* non-blank lines read */
  size_t workloads_added, targets_added;
  size_t inserted, duplicates;
} db_import_stats_t;

/* Merges JSON lines (as written by db_export_jsonl) into the database in one
 * transaction: workloads and targets are added when missing (existing ones
 * are kept), records are inserted unless (workload hash, target name, trace
 * hash) is already there.  Any bad line rolls everything back and fails with
 * a message starting "line N:" (err->line = N).  Blank lines are skipped. */
int db_import_jsonl(db_t *db, const char *text, size_t len, db_import_stats_t *stats,
                    tn_err_t *err);

/* What an import check sees of one line (strings valid during the call). */
typedef struct db_import_item {
  const char *workload_hash, *workload_name, *workload_source;
  const char *workload_params; /* JSON object text */
  const char *target_name;
  const char *trace;
} db_import_item_t;
/* Returns 0, or an error (with err set) that fails the line and the import. */
typedef int (*db_import_check_fn)(void *ctx, const db_import_item_t *it, tn_err_t *err);

/* db_import_jsonl with check called on every record line before it is
 * stored (the database layer cannot parse workloads or replay traces; the
 * daemon's check does). */
int db_import_jsonl_checked(db_t *db, const char *text, size_t len, db_import_check_fn check, void *check_ctx,
                            db_import_stats_t *stats, tn_err_t *err);

#endif
