/* batches.c — the shared job queue (schema 7, job_batches): a job divided
 * into measurement batches and its last batch, leased by the daemons of its
 * target (SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL), renewed while
 * they work, done once their trials are committed. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"

static const char *const batch_state_names[] = {"queued", "leased", "done"};

const char *db_batch_state_name(db_batch_state_t s) {
  return (unsigned)s < TN_ARRAY_LEN(batch_state_names) ? batch_state_names[s] : "unknown";
}

static db_batch_state_t parse_state(const char *s) {
  for (size_t i = 0; s && i < TN_ARRAY_LEN(batch_state_names); i++)
    if (strcmp(s, batch_state_names[i]) == 0) return (db_batch_state_t)i;
  return DB_BATCH_DONE;
}

static bool is_pg(const db_t *db) { return strcmp(db_engine(db), "postgresql") == 0; }

/* Runs a statement with int64 parameters bound in order; *changed gets the
 * rows it changed (NULL: not wanted). */
static int run_ints(db_t *db, const char *sql, const int64_t *v, int n, int64_t *changed, const char *op,
                    tn_err_t *err) {
  db_st_t *st = db_stmt(db, sql, err);
  if (!st) return err ? err->code : TN_EIO;
  for (int i = 0; i < n; i++) db_bind_int(st, i + 1, v[i]);
  int rc = db_step_done(db, st, op, err);
  if (!rc && changed) *changed = db_changes(db);
  return rc;
}

/* One int64 read by a statement with int64 parameters (0 when no row). */
static int read_int(db_t *db, const char *sql, const int64_t *v, int n, int64_t *out, const char *op, tn_err_t *err) {
  db_st_t *st = db_stmt(db, sql, err);
  if (!st) return err ? err->code : TN_EIO;
  for (int i = 0; i < n; i++) db_bind_int(st, i + 1, v[i]);
  int rc = db_step(st), ret = 0;
  *out = 0;
  if (rc == DB_ROW) *out = db_col_int(st, 0);
  else if (rc != DB_DONE) ret = db_fail(db, err, op);
  db_reset(st);
  return ret;
}

/* ---- planning ----------------------------------------------------------------- */

static const char SQL_PLAN_JOB[] = "SELECT budget_trials, trials_done, target_id FROM jobs WHERE id = ?1";
static const char SQL_PLAN_COUNT[] = "SELECT COUNT(*) FROM job_batches WHERE job_id = ?1";
static const char SQL_PLAN_ADD[] =
    "INSERT INTO job_batches (job_id, batch, target_id, first_trial, trials) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (job_id, batch) DO NOTHING";

static int plan(db_t *db, int64_t job_id, int64_t batch_trials, size_t *nbatches, tn_err_t *err) {
  int64_t have = 0;
  int rc = read_int(db, SQL_PLAN_COUNT, &job_id, 1, &have, "counting a job's batches", err);
  if (rc || have > 0) {
    *nbatches = (size_t)have;
    return rc;
  }
  db_st_t *st = db_stmt(db, SQL_PLAN_JOB, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, job_id);
  rc = db_step(st);
  int64_t budget = 0, done = 0, target = 0;
  if (rc == DB_ROW) budget = db_col_int(st, 0), done = db_col_int(st, 1), target = db_col_int(st, 2);
  int ret = rc == DB_ROW ? 0 : rc == DB_DONE ? tn_err_set(err, TN_EINVAL, "no job with id %" PRId64, job_id)
                                             : db_fail(db, err, "reading a job");
  db_reset(st);
  if (ret) return ret;
  int64_t batch = 0, next = done + 1;
  rc = 0;
  for (; next <= budget && !rc; batch++) { /* then the last batch: trials 0 */
    int64_t n = TN_MIN(batch_trials, budget - next + 1);
    int64_t v[] = {job_id, batch, target, next, n};
    rc = run_ints(db, SQL_PLAN_ADD, v, 5, NULL, "adding a job's batch", err);
    next += n;
  }
  int64_t last[] = {job_id, batch, target, next, 0};
  if (!rc) rc = run_ints(db, SQL_PLAN_ADD, last, 5, NULL, "adding a job's batch", err);
  *nbatches = (size_t)batch + 1;
  return rc;
}

int db_job_batches_plan(db_t *db, int64_t job_id, int64_t batch_trials, size_t *nbatches, tn_err_t *err) {
  if (batch_trials < 1)
    return tn_err_set(err, TN_EINVAL, "job %" PRId64 ": batches need at least 1 trial, got %" PRId64, job_id,
                      batch_trials);
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  rc = plan(db, job_id, batch_trials, nbatches, err);
  if (rc) {
    db_tx_rollback(db);
    return tn_err_prefix(err, "job %" PRId64 ": planning its batches", job_id);
  }
  return db_tx_commit(db, err);
}

/* ---- leasing ------------------------------------------------------------------- */

#define BATCH_COLS "b.job_id, b.batch, b.first_trial, b.trials, b.state, b.leased_by, b.lease_until, b.leases, b.trials_done"

static void read_batch(db_st_t *st, db_batch_t *b, tn_arena_t *a) {
  memset(b, 0, sizeof *b);
  b->job_id = db_col_int(st, 0);
  b->batch = db_col_int(st, 1);
  b->first_trial = db_col_int(st, 2);
  b->trials = db_col_int(st, 3);
  b->state = parse_state(db_col_str(st, 4));
  b->leased_by = a ? db_col_text(st, 5, a) : NULL;
  b->lease_until = db_col_null(st, 6) ? 0 : db_col_real(st, 6);
  b->leases = db_col_int(st, 7);
  b->trials_done = db_col_int(st, 8);
}

/* A batch of an unfinished job on the target, queued or with a lapsed
 * lease; the last batch (trials 0) once every measurement batch is done. */
#define LEASABLE(TARGET)                                                                                  \
  " FROM job_batches b JOIN jobs j ON j.id = b.job_id"                                                    \
  " WHERE " TARGET " AND (?2 = 0 OR b.job_id = ?2) AND j.state IN ('queued', 'running')"                  \
  " AND (b.state = 'queued' OR (b.state = 'leased' AND b.lease_until < ?3))"                              \
  " AND (b.trials > 0 OR NOT EXISTS (SELECT 1 FROM job_batches o"                                         \
  "  WHERE o.job_id = b.job_id AND o.trials > 0 AND o.state <> 'done'))"
/* SQLite's write transaction (BEGIN IMMEDIATE) is the lock already. */
static const char SQL_LEASE_PICK_SQ[] = "SELECT " BATCH_COLS LEASABLE("b.target_id = ?1") " ORDER BY b.job_id, b.batch LIMIT 1";
static const char SQL_LEASE_PICK_PG[] =
    "SELECT " BATCH_COLS LEASABLE("b.target_id = ?1") " ORDER BY b.job_id, b.batch LIMIT 1 FOR UPDATE OF b SKIP LOCKED";
static const char SQL_LEASE_TAKE[] =
    "UPDATE job_batches SET state = 'leased', leased_by = ?3, lease_until = ?4, leases = leases + 1"
    " WHERE job_id = ?1 AND batch = ?2";

static int pick(db_t *db, int64_t target_id, int64_t job_id, double now, db_batch_t *out, bool *found,
                tn_err_t *err) {
  db_st_t *st = db_stmt(db, is_pg(db) ? SQL_LEASE_PICK_PG : SQL_LEASE_PICK_SQ, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, target_id);
  db_bind_int(st, 2, job_id);
  db_bind_real(st, 3, now);
  int rc = db_step(st), ret = 0;
  *found = rc == DB_ROW;
  if (*found) read_batch(st, out, NULL);
  else if (rc != DB_DONE) ret = db_fail(db, err, "looking for a batch to lease");
  db_reset(st);
  return ret;
}

int db_batch_lease(db_t *db, int64_t target_id, int64_t job_id, const char *holder, double lease_s, db_batch_t *out,
                   bool *found, tn_err_t *err) {
  *found = false;
  memset(out, 0, sizeof *out);
  if (!holder || !holder[0] || !(lease_s > 0))
    return tn_err_set(err, TN_EINVAL, "leasing a batch needs a holder's name and a lease time above 0");
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  double now = db_now();
  rc = pick(db, target_id, job_id, now, out, found, err);
  if (!rc && *found) {
    db_st_t *st = db_stmt(db, SQL_LEASE_TAKE, err);
    if (!st) rc = err ? err->code : TN_EIO;
    if (st) {
      db_bind_int(st, 1, out->job_id);
      db_bind_int(st, 2, out->batch);
      db_bind_text(st, 3, holder);
      db_bind_real(st, 4, now + lease_s);
      rc = db_step_done(db, st, "leasing a batch", err);
    }
  }
  if (!rc) rc = db_tx_commit(db, err);
  else db_tx_rollback(db);
  if (rc) {
    *found = false;
    return rc;
  }
  if (*found) {
    out->state = DB_BATCH_LEASED;
    out->leases++;
    out->lease_until = now + lease_s;
  }
  return 0;
}

static const char SQL_RENEW[] =
    "UPDATE job_batches SET lease_until = ?4 WHERE job_id = ?1 AND batch = ?2 AND state = 'leased'"
    " AND leased_by = ?3 AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = ?1 AND j.state IN ('queued', 'running'))";

static int lost(const db_batch_t *b, tn_err_t *err) {
  return tn_err_set(err, TN_ESTATE, "job %" PRId64 " batch %" PRId64 ": the lease is lost (it lapsed and another "
                    "daemon took the batch, or the job ended)", b->job_id, b->batch);
}

int db_batch_renew(db_t *db, const db_batch_t *b, const char *holder, double lease_s, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_RENEW, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, b->job_id);
  db_bind_int(st, 2, b->batch);
  db_bind_text(st, 3, holder);
  db_bind_real(st, 4, db_now() + lease_s);
  int rc = db_step_done(db, st, "renewing a batch's lease", err);
  if (!rc && db_changes(db) == 0) rc = lost(b, err);
  return rc;
}

static const char SQL_RELEASE[] =
    "UPDATE job_batches SET state = 'queued', leased_by = NULL, lease_until = NULL"
    " WHERE job_id = ?1 AND batch = ?2 AND state = 'leased' AND leased_by = ?3";

int db_batch_release(db_t *db, const db_batch_t *b, const char *holder, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_RELEASE, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, b->job_id);
  db_bind_int(st, 2, b->batch);
  db_bind_text(st, 3, holder);
  return db_step_done(db, st, "releasing a batch", err);
}

/* ---- results ---------------------------------------------------------------------- */

static const char SQL_COMMITTED[] =
    "SELECT COUNT(*) FROM job_trials WHERE job_id = ?1 AND trial >= ?2 AND trial < ?3";

int db_batch_committed(db_t *db, const db_batch_t *b, int64_t *n, tn_err_t *err) {
  int64_t v[] = {b->job_id, b->first_trial, b->first_trial + b->trials};
  return read_int(db, SQL_COMMITTED, v, 3, n, "counting a batch's trials", err);
}

static const char SQL_SYNC_TRIALS[] =
    "UPDATE jobs SET trials_done = (SELECT COUNT(*) FROM job_trials t WHERE t.job_id = ?1), updated = ?2"
    " WHERE id = ?1 AND state IN ('queued', 'running')";

/* jobs.trials_done: the job's committed trials, whichever daemon measured them. */
static int sync_trials(db_t *db, int64_t job_id, tn_err_t *err) {
  db_st_t *st = db_stmt(db, SQL_SYNC_TRIALS, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, job_id);
  db_bind_real(st, 2, db_now());
  return db_step_done(db, st, "counting a job's trials", err);
}

int db_batch_commit_check(db_t *db, const db_batch_t *b, const char *holder, double lease_s, tn_err_t *err) {
  int rc = db_batch_renew(db, b, holder, lease_s, err);
  return rc ? rc : sync_trials(db, b->job_id, err);
}

static const char SQL_DONE[] =
    "UPDATE job_batches SET state = 'done', lease_until = NULL, trials_done = (SELECT COUNT(*) FROM job_trials t"
    "  WHERE t.job_id = ?1 AND t.trial >= job_batches.first_trial"
    "  AND t.trial < job_batches.first_trial + job_batches.trials)"
    " WHERE job_id = ?1 AND batch = ?2 AND state = 'leased' AND leased_by = ?3";

/* Once every batch of a job is done (its last one just was), the job is
 * done, with the workload's fastest verified record on the target as its
 * best, in the same transaction: no moment when the queue is finished and
 * the job is not, whoever dies in between. */
static const char SQL_JOB_DONE[] =
    "UPDATE jobs SET state = 'done', updated = ?2, finished = ?2, best_record_id = coalesce((SELECT r.id FROM records r"
    "  WHERE r.workload_id = jobs.workload_id AND r.target_id = jobs.target_id AND r.verified = 1 AND r.status = 'ok'"
    "  ORDER BY r.median_secs, r.id LIMIT 1), best_record_id)"
    " WHERE id = ?1 AND state IN ('queued', 'running')"
    " AND NOT EXISTS (SELECT 1 FROM job_batches o WHERE o.job_id = ?1 AND o.state <> 'done')";

int db_batch_done(db_t *db, const db_batch_t *b, const char *holder, tn_err_t *err) {
  int rc = db_tx_begin(db, err);
  if (rc) return rc;
  db_st_t *st = db_stmt(db, SQL_DONE, err);
  if (!st) rc = err ? err->code : TN_EIO;
  if (st) {
    db_bind_int(st, 1, b->job_id);
    db_bind_int(st, 2, b->batch);
    db_bind_text(st, 3, holder);
    rc = db_step_done(db, st, "finishing a batch", err);
    if (!rc && db_changes(db) == 0) rc = lost(b, err);
  }
  if (!rc) rc = sync_trials(db, b->job_id, err);
  if (!rc && b->trials == 0 && (st = db_stmt(db, SQL_JOB_DONE, err)) == NULL) rc = err ? err->code : TN_EIO;
  if (!rc && b->trials == 0) {
    db_bind_int(st, 1, b->job_id);
    db_bind_real(st, 2, db_now());
    rc = db_step_done(db, st, "finishing a job", err);
  }
  if (rc) {
    db_tx_rollback(db);
    return rc;
  }
  return db_tx_commit(db, err);
}

/* ---- listings ------------------------------------------------------------------------ */

static const char SQL_BATCHES_GET[] = "SELECT " BATCH_COLS " FROM job_batches b WHERE b.job_id = ?1 ORDER BY b.batch";

int db_job_batches_get(db_t *db, int64_t job_id, db_batches_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  db_st_t *st = db_stmt(db, SQL_BATCHES_GET, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, job_id);
  out->arena = tn_arena_new();
  size_t cap = 0;
  int rc;
  while ((rc = db_step(st)) == DB_ROW) {
    out->items = db_arena_room(out->arena, out->items, out->n, &cap, sizeof *out->items);
    read_batch(st, &out->items[out->n++], out->arena);
  }
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, "reading a job's batches");
  db_reset(st);
  if (ret) db_batches_free(out);
  return ret;
}

void db_batches_free(db_batches_t *b) {
  tn_arena_free(b->arena);
  memset(b, 0, sizeof *b);
}

/* ... and the target's unfinished jobs without a plan yet: submitted to a
 * daemon of another target, or waiting behind its --jobs, or from before
 * the queue; the first daemon that runs one plans it. */
static const char SQL_OPEN_JOBS[] =
    "SELECT DISTINCT b.job_id" LEASABLE("b.target_id = (SELECT id FROM targets WHERE name = ?1)")
    " UNION SELECT j.id FROM jobs j WHERE j.target_id = (SELECT id FROM targets WHERE name = ?1)"
    " AND j.state IN ('queued', 'running') AND NOT EXISTS (SELECT 1 FROM job_batches p WHERE p.job_id = j.id)"
    " ORDER BY 1 LIMIT 64";

int db_batch_jobs_open(db_t *db, const char *target_name, int64_t *ids, size_t cap, size_t *n, tn_err_t *err) {
  *n = 0;
  db_st_t *st = db_stmt(db, SQL_OPEN_JOBS, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_text(st, 1, target_name);
  db_bind_int(st, 2, 0);
  db_bind_real(st, 3, db_now());
  int rc;
  while ((rc = db_step(st)) == DB_ROW)
    if (*n < cap) ids[(*n)++] = db_col_int(st, 0);
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, "looking for jobs with batches to lease");
  db_reset(st);
  return ret;
}

/* ---- consistency (db_check) ------------------------------------------------------------ */

static const char SQL_BATCHES_BAD[] =
    "SELECT COUNT(*) FROM job_batches b JOIN jobs j ON j.id = b.job_id"
    " WHERE (j.state = 'done' AND b.state <> 'done') OR b.trials_done > b.trials"
    " OR (b.state = 'done' AND b.trials_done <> (SELECT COUNT(*) FROM job_trials t WHERE t.job_id = b.job_id"
    "  AND t.trial >= b.first_trial AND t.trial < b.first_trial + b.trials))"
    " OR (b.trials = 0 AND b.state = 'done' AND j.state IN ('queued', 'running'))";

int db_batches_check(db_t *db, tn_err_t *err) {
  int64_t bad = 0;
  int rc = read_int(db, SQL_BATCHES_BAD, NULL, 0, &bad, "checking the job queue", err);
  if (!rc && bad > 0)
    rc = tn_err_set(err, TN_EIO, "%lld batches of the job queue disagree with their job or its trials (a done job "
                    "with a batch not done, a done batch whose trial count is not its trials', or a job not over "
                    "whose last batch is done)", (long long)bad);
  return rc;
}
