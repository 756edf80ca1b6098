/* jobs.h — the job manager's insides, shared by its files and no others:
 * jobs.c (the registry on the loop: queued, running and ended jobs, their
 * watchers, the events the threads post), job_thread.c (a job's thread),
 * job_search.c (its search: options, callbacks, the deadline, pauses),
 * job_queue.c (the shared PostgreSQL queue of leased batches) and
 * methods_jobs.c (the RPC answers that read and cancel jobs).  Calls go
 * one way: answers -> registry -> thread -> queue -> search; the threads
 * reach the registry only by posting events (td_job_post). */
#ifndef TUNED_DAEMON_JOBS_H
#define TUNED_DAEMON_JOBS_H

#include "daemon/td.h"
#include "search/search.h"

/* Why a job's thread is asked to stop (td_job_t.stop).  STOP_LEASE: the
 * batch it measures (shared queue) is no longer its own; it goes on with
 * the next one. */
enum { STOP_NONE, STOP_SHUTDOWN, STOP_CANCEL, STOP_DEADLINE, STOP_LEASE };

typedef struct td_job {
  int64_t id;
  char target[64];
  struct td_jobs *mgr;
  atomic_int stop;          /* STOP_*: polled by td_job_should_stop */
  bool running, cancelling, ended, skip_logged;
  /* Shared queue: a job this daemon does not measure (another target's, or
   * one it only watches), followed from the database for its watchers. */
  bool remote;
  char *last_sent;          /* the last notification's params sent to the watchers (a follow sends changes only) */
  bool reading, again;      /* a read for the watchers is in flight; another is wanted */
  bool finished;            /* ended, and the last notification and cancel answers went out */
  double cancel_at;         /* tn_now() of the first tune.cancel while running (0: none) */
  bool cancel_answered;     /* the loop answered `cancelled` itself (TD_CANCEL_WAIT_S) */
  /* How the thread ended, when the database could not take it (a full
   * disk): status shows this instead of the row's stale `running`. */
  bool end_unsaved;
  db_job_state_t end_state;
  char end_error[TN_ERR_MSG_MAX];
  int64_t trials_done;      /* as last reported by the thread */
  int failures[MS_STATUS__COUNT]; /* this daemon's run of the job */
  uv_thread_t thread;
  td_conn_t **watch;
  int nwatch, capwatch;
  td_req_t **cancels;       /* tune.cancel requests answered when it ends */
  int ncancel, capcancel;
  struct td_job *next;
} td_job_t;

typedef enum { EV_START, EV_PROGRESS, EV_END } td_event_kind_t;

typedef struct td_event {
  int64_t job;
  td_event_kind_t kind;
  int64_t trials_done;
  int failures[MS_STATUS__COUNT];
  struct td_event *next;
} td_event_t;

struct td_jobs {
  td_server_t *srv;
  td_job_t *active;         /* queued and running, oldest first */
  td_job_t *ended;          /* ended in this daemon's life (keeps live counters) */
  int nrunning;
  ms_builder_t *builder;    /* one build pool for every job: its threads are the cores */
  uv_async_t async;
  uv_timer_t cancel_timer;  /* runs while a cancelled job's thread has not ended */
  uv_timer_t poll_timer;    /* shared queue: looks for other daemons' jobs with batches to lease */
  uv_timer_t follow_timer;  /* shared queue: re-reads the watched jobs (other daemons' progress, their ends) */
  bool polling;             /* a poll is in flight */
  bool poll_failed;         /* the last poll failed (said once until one works) */
  int open_handles;         /* async + timers: m is freed when all are closed */
  uv_mutex_t lock;          /* guards the event list */
  td_event_t *events, **tail;
};

/* A run of a job's search: the search's callbacks' ctx (td_job_callbacks). */
typedef struct run_ctx {
  td_job_t *job;
  int64_t base; /* trials done before this run (a resumed job) */
  char device[MS_DEVICE_NAME_MAX]; /* where the job's candidates run */
  double started, deadline; /* tn_now() clock */
  const db_batch_t *batch;  /* shared queue: the leased batch being measured */
} run_ctx_t;

/* A job without a time budget (seconds 0) may run this long. */
#define TD_NO_BUDGET_S 86400.0

/* Pauses: the database away.  A shared database that is away (TN_EAGAIN: a restart, terminated or
 * refused connections, a full disk) pauses a job rather than failing it:
 * its thread waits, a quarter of a second at first, doubling up to
 * TD_PAUSE_MAX_S, and tries the same step again, for as long as it takes
 * (a stop still stops it: a cancel, its deadline, the daemon stopping).
 * What was committed stays; a batch's uncommitted measurements are measured
 * again; a lease that lapsed meanwhile is the next holder's. */
#define TD_PAUSE_MAX_S 4.0

typedef struct td_pause {
  double since;   /* tn_now() when the database went away (0: it is not) */
  double wait;    /* the next wait */
  bool to_the_end; /* only the daemon stopping ends the wait (the job's end is being written) */
} td_pause_t;

/* ---- jobs.c: the registry (loop thread) ---------------------------------------- */

td_job_t *td_job_find(td_job_t *list, int64_t id);
/* A job this daemon knows of from now on (queued; remote when another
 * daemon measures it), last in the active list. */
td_job_t *td_job_new(td_jobs_t *m, int64_t id, const char *target);
/* The job is over: to the ended list; its last word goes out after a read. */
void td_job_finish(td_server_t *srv, td_job_t *j);
/* Reads the job again for its watchers and cancels (follow: a follow's
 * read, sent only when it changed). */
void td_job_refresh(td_server_t *srv, td_job_t *j, bool follow);
/* Whether a job object's state is final. */
bool td_job_over(const cJSON *job);

/* ---- job_thread.c: a job's thread -------------------------------------------- */

/* The thread of job arg (a td_job_t *): reads the job, runs its search
 * (or its batches on a shared queue), writes its end, posts EV_END. */
void td_job_main(void *arg);

/* ---- job_search.c: the search of a job ------------------------------------------ */

/* An event for the registry (the loop wakes up through m->async). */
void td_job_post(td_job_t *j, td_event_kind_t kind, int64_t trials, const int *failures);
/* The search's callbacks for ctx: progress, measured batches, stop, log. */
srch_callbacks_t td_job_callbacks(run_ctx_t *ctx);
bool td_job_should_stop(void *ctx);
/* The search options of a job: its stored ones, its budget's seconds and
 * seed, the daemon's database and build pool. */
void td_job_opts(td_job_t *j, const db_job_t *row, srch_opts_t *o);
void td_job_deadline_error(const db_job_t *row, double started, double grace, tn_err_t *err);
/* Tunes what is left of the job's budget (its own database); sets the final
 * state (and err's message when that is failed). */
int td_job_run_search(td_job_t *j, const db_job_t *row, const ir_workload_t *w, const tn_target_t *t,
                      double started, db_job_state_t *final, int64_t *trials, int64_t *best, tn_err_t *err);
/* Lowers the calling thread's priority by n nice levels. */
void td_job_lower_priority(int n);
/* Whether the thread is asked to stop (a lost lease is not a stop). */
bool td_job_stopping(td_job_t *j);
void td_job_pause_wait(td_pause_t *pz, td_job_t *j, const tn_err_t *err);
void td_job_pause_end(td_pause_t *pz, td_job_t *j);

/* ---- job_queue.c: the shared job queue (PostgreSQL) --------------------------------- */

/* The job's batches, one lease at a time, until the job ends (here or on
 * another daemon) or this daemon stops; *write_end: whether the job's end
 * is this thread's to write. */
int td_job_run_queue(td_job_t *j, db_t *db, const db_job_t *first, const ir_workload_t *w, const tn_target_t *t,
                     double started, td_pause_t *pz, db_job_state_t *final, bool *write_end, int64_t *best,
                     tn_err_t *err);

#endif
