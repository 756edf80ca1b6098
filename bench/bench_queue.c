/* bench_queue.c — the shared job queue's own cost (issue 18): lease
 * throughput (batches per second) and the overhead per trial with 1, 2 and
 * 4 "daemons" (processes with a connection each) on PostgreSQL and one on
 * SQLite, in one run.
 *
 * Each process does what a daemon's job thread does around a batch's
 * measurements: lease a batch (SELECT ... FOR UPDATE SKIP LOCKED), commit
 * its records (db_record_add_batch), its trials and the lease check in one
 * transaction, mark it done; the measurement itself is left out (zero), so
 * the times are the queue's and the database's alone.  PostgreSQL is a
 * server this program starts (tests/pgtest.h: initdb in /tmp, unix socket,
 * fsync off as in the tests); SQLite is a file in /tmp (WAL,
 * synchronous=NORMAL: no fsync per commit either).
 *
 *   bench_queue [--trials N] [--batch K]     (default 2048 trials in batches of 16) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db/db.h"
#include "tests/pgtest.h"

typedef struct setup {
  int64_t job, target, workload;
} setup_t;

static void die(const char *what, const tn_err_t *err) {
  fprintf(stderr, "bench_queue: %s: %s\n", what, err->msg);
  exit(1);
}

static setup_t make_job(const char *path, int64_t trials, int64_t batch) {
  db_t *db = NULL;
  tn_err_t err = {0};
  setup_t s = {0};
  if (db_open(path, &db, &err)) die("open", &err);
  db_workload_t w = {.hash = "00000000000000000000000000000000000000000000000000000000000000be", .name = "bench",
                     .source = "C[i] = A[i] + 1", .params = "{}", .flops = 1, .bytes = 1};
  db_target_t t = {.name = "cpu", .kind = "cpu", .arch = "native", .json = "{}"};
  if (db_workload_upsert(db, &w, &s.workload, &err) || db_target_upsert(db, &t, &s.target, &err)) die("setup", &err);
  db_job_t job = {.workload_id = s.workload, .target_id = s.target, .budget_trials = trials, .seed = 1};
  size_t n = 0;
  if (db_job_create(db, &job, &err) || db_job_batches_plan(db, job.id, batch, &n, &err)) die("job", &err);
  s.job = job.id;
  db_close(db);
  return s;
}

/* One batch's commit: a record and a trial per trial number, the lease check. */
static int commit_batch(db_t *db, const setup_t *s, const db_batch_t *b, const char *holder, tn_err_t *err) {
  static const double runs[3] = {1e-3, 1.1e-3, 0.9e-3};
  db_record_t *recs = calloc((size_t)b->trials + 1, sizeof *recs);
  db_job_trial_t *ts = calloc((size_t)b->trials + 1, sizeof *ts);
  char (*traces)[64] = calloc((size_t)b->trials + 1, sizeof *traces);
  for (int64_t i = 0; i < b->trials; i++) {
    db_record_init(&recs[i]);
    snprintf(traces[i], sizeof traces[i], "{\"version\": 1, \"trace\": [{\"tag\": %lld}]}",
             (long long)(b->first_trial + i));
    recs[i] = (db_record_t){.workload_id = s->workload, .target_id = s->target, .trace = traces[i], .run_secs = runs,
                            .n_runs = 3, .median_secs = 1e-3, .status = DB_STATUS_OK, .registers = -1,
                            .shared_bytes = -1, .spill_bytes = -1, .cupti_median_secs = NAN};
  }
  int rc = db_tx_begin(db, err);
  if (!rc && b->trials > 0) rc = db_record_add_batch(db, recs, (size_t)b->trials, NULL, err);
  for (int64_t i = 0; !rc && i < b->trials; i++)
    ts[i] = (db_job_trial_t){b->first_trial + i, recs[i].id, DB_STATUS_OK, 1e-3, 0};
  if (!rc && b->trials > 0) rc = db_job_trials_add(db, s->job, ts, (size_t)b->trials, err);
  if (!rc) rc = db_batch_commit_check(db, b, holder, 30, err);
  if (!rc) rc = db_tx_commit(db, err);
  else db_tx_rollback(db);
  if (!rc) rc = db_batch_done(db, b, holder, err);
  free(recs);
  free(ts);
  free(traces);
  return rc;
}

/* A daemon's loop: lease, commit, done, until the job has no batch left.
 * Writes its batch count and busy seconds to fd. */
static void daemon_loop(const char *path, const setup_t *s, int id, int fd) {
  db_t *db = NULL;
  tn_err_t err = {0};
  char holder[32];
  snprintf(holder, sizeof holder, "bench-%d", id);
  if (db_open(path, &db, &err)) die("open", &err);
  double busy = 0;
  long batches = 0;
  for (;;) {
    db_batch_t b;
    bool found = false;
    double t0 = tn_now();
    if (db_batch_lease(db, s->target, s->job, holder, 30, &b, &found, &err)) die("lease", &err);
    if (!found) {
      db_batches_t all;
      if (db_job_batches_get(db, s->job, &all, &err)) die("batches", &err);
      bool over = true;
      for (size_t i = 0; i < all.n; i++) over &= all.items[i].state == DB_BATCH_DONE;
      db_batches_free(&all);
      if (over) break;
      usleep(1000); /* the rest is leased by the others */
      continue;
    }
    if (commit_batch(db, s, &b, holder, &err)) die("commit", &err);
    busy += tn_now() - t0;
    batches++;
  }
  db_close(db);
  double out[2] = {(double)batches, busy};
  _exit(write(fd, out, sizeof out) == (ssize_t)sizeof out ? 0 : 1); /* not exit: the parent's stdio is not ours */
}

typedef struct result {
  double wall, busy;
  long batches;
} result_t;

static result_t run(const char *path, int ndaemons, int64_t trials, int64_t batch) {
  setup_t s = make_job(path, trials, batch);
  int fds[2];
  if (pipe(fds)) exit(1);
  fflush(stdout);
  double t0 = tn_now();
  for (int i = 0; i < ndaemons; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      daemon_loop(path, &s, i, fds[1]);
    }
    if (pid < 0) exit(1);
  }
  close(fds[1]);
  result_t r = {0};
  for (int i = 0; i < ndaemons; i++) {
    int st = 0;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "bench_queue: a daemon failed\n");
      exit(1);
    }
  }
  r.wall = tn_now() - t0;
  double out[2];
  while (read(fds[0], out, sizeof out) == (ssize_t)sizeof out) r.batches += (long)out[0], r.busy += out[1];
  close(fds[0]);
  /* every trial counted once */
  db_t *db = NULL;
  tn_err_t err = {0};
  db_job_trials_t ts;
  if (db_open(path, &db, &err) || db_job_trials_get(db, s.job, &ts, &err)) die("check", &err);
  if ((int64_t)ts.n != trials) { /* the queue's promise */
    fprintf(stderr, "bench_queue: %zu trials committed, want %lld\n", ts.n, (long long)trials);
    exit(1);
  }
  db_job_trials_free(&ts);
  db_close(db);
  return r;
}

static void row(const char *engine, int ndaemons, const result_t *r, int64_t trials) {
  printf("| %-10s | %7d | %7ld | %8.2f | %9.1f | %8.0f | %18.0f |\n", engine, ndaemons, r->batches, r->wall,
         (double)r->batches / r->wall, (double)trials / r->wall, r->busy / (double)trials * 1e6);
}

int main(int argc, char **argv) {
  int64_t trials = 2048, batch = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--trials") == 0) trials = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--batch") == 0) batch = atoll(argv[i + 1]);
  }
  if (trials < 1 || batch < 1 || argc % 2 == 0) {
    fprintf(stderr, "usage: bench_queue [--trials N] [--batch K]   (N, K >= 1)\n");
    return 2;
  }
  printf("%lld trials in batches of %lld (+ the last batch), records and trials committed per batch\n\n",
         (long long)trials, (long long)batch);
  printf("| engine     | daemons | batches | wall (s) | batches/s | trials/s | overhead/trial (us) |\n");
  printf("|------------|--------:|--------:|---------:|----------:|---------:|-------------------:|\n");
  char dir[] = "/tmp/bench-queue-XXXXXX", path[256];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/queue.db", dir);
  result_t r = run(path, 1, trials, batch);
  row("SQLite", 1, &r, trials);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_queue: cannot remove %s\n", dir);
  pgt_server_t pg;
  if (pgt_start(&pg) != 0) {
    printf("\nPostgreSQL skipped: %s\n", pg.skip);
    pgt_stop(&pg);
    return 0;
  }
  static const int counts[] = {1, 2, 4};
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
    char name[32], url[512];
    snprintf(name, sizeof name, "bench_queue_%d", counts[i]);
    if (pgt_createdb(&pg, name, url, sizeof url) != 0) {
      fprintf(stderr, "bench_queue: cannot create database %s\n", name);
      break;
    }
    r = run(url, counts[i], trials, batch);
    row("PostgreSQL", counts[i], &r, trials);
  }
  pgt_stop(&pg);
  return 0;
}
