/* search.h — the tuning loop: evolutionary search (and the replay-trace
 * baseline) over the sampler's design spaces, ranked by the cost model,
 * measured by measure/ (builds overlapped with runs), every measured batch
 * committed to the tuning database at once; plus the gradient-based task
 * scheduler for several workloads.  The search/ module's only public header.
 * Prefix: srch_. */
#ifndef TUNED_SEARCH_H
#define TUNED_SEARCH_H

#include <cJSON.h>

#include "common/common.h"
#include "common/target.h"
#include "db/db.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "sampler/sampler.h"

/* ---- from a trace to code ------------------------------------------------
 * The one lowering path (search, measurement of the unscheduled program, the
 * daemon, tunectl): replay the trace up to its EnterPostproc, run the
 * target's postprocessors (which also verify GPU limits), lower and generate
 * in the target's language. */

/* The schedule: `trace` replayed (decisions it records kept, missing ones
 * sampled from seed) and post-processed, or with trace NULL the unscheduled
 * program post-processed (GPU targets: its loops bound to threads).  On
 * failure *stage (may be NULL) names what rejected it. */
int srch_schedule(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, sch_t **out,
                  smp_stage_t *stage, tn_err_t *err);
/* Lowers a post-processed schedule for t's language (entry: the kernel's
 * name, NULL for the default). */
int srch_lower_schedule(const sch_t *s, const tn_target_t *t, const char *entry, cg_module_t **out, tn_err_t *err);
/* Both in turn.  A lowering error's message starts with "lower: ". */
int srch_lower(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, const char *entry,
               cg_module_t **out, smp_stage_t *stage, tn_err_t *err);

/* ---- serving a record (kernel.c) ---------------------------------------------
 * The daemon's kernel.get and the paths without a daemon (libtuned_local,
 * tunectl kernel --db) answer the same JSON object: record, workload, name,
 * target, median_secs, gflops, flops, language, entry, source, launch,
 * trace (and ptx, cubin_base64, nvrtc for CUDA). */

/* srch_lower of a trace given as JSON (NULL: the unscheduled program). */
int srch_kernel_lower(const ir_func_t *f, const tn_target_t *t, const char *trace, const char *entry,
                      cg_module_t **mod, tn_err_t *err);
/* The answer for module mod lowered from record rec (NULL: none) of the
 * workload (hash, name, flops); a CUDA module is compiled to PTX and CUBIN
 * in a build process. */
int srch_kernel_json(const cg_module_t *mod, const tn_target_t *t, const char *hash, const db_record_t *rec,
                     const char *name, double flops, cJSON **out, tn_err_t *err);
/* Serves record rec of workload w (hash) on t: when db (may be NULL) holds
 * the unscheduled program's time on t and it is faster than rec's, the
 * unscheduled program is served instead (record 0, and an "unscheduled"
 * object: median_secs, best_record, best_median_secs): never a best slower
 * than doing nothing. */
int srch_kernel_serve(db_t *db, const ir_workload_t *w, const char *hash, const tn_target_t *t,
                      const db_record_t *rec, const char *entry, cJSON **out, tn_err_t *err);
/* The best verified record of workload `hash` on t in db, served as above; w
 * is the workload (NULL: parsed from the text stored with it), entry the
 * kernel's name (NULL: from the workload's).  TN_ESTATE "no tuned kernel
 * yet ..." when the database has no verified record of it on t. */
int srch_kernel_from_db(db_t *db, const char *hash, const ir_workload_t *w, const tn_target_t *t, const char *entry,
                        cJSON **out, tn_err_t *err);

typedef enum srch_strategy {
  SRCH_EVOLUTIONARY, /* metaschedule.md §6 */
  SRCH_REPLAY_TRACE, /* random samples of the design spaces: the baseline */
} srch_strategy_t;

typedef enum srch_model {
  SRCH_MODEL_XGB,    /* XGBoost (the random model when built without it) */
  SRCH_MODEL_RANDOM,
} srch_model_t;

typedef struct srch_opts {
  srch_strategy_t strategy;
  srch_model_t model;
  int max_trials;            /* total measured candidates over all tasks (required, >= 1) */
  double max_seconds;        /* wall-time budget; 0 = none */
  int batch_size;            /* 64 */
  int population;            /* 512 */
  double init_measured_ratio;/* 0.2 */
  int init_min_unmeasured;   /* 50 */
  int genetic_iters;         /* 4 */
  double mutate_prob;        /* 0.85 */
  double eps_greedy;         /* 0.05 */
  uint64_t seed;             /* everything random flows from it */
  int nthreads;              /* search + build threads; 0 = online cores */
  ms_run_opts_t run;         /* runner options (timeouts, repeats; slow_factor 10) */
  bool no_flush;             /* CUDA: do not flush L2 between timed repeats (flushed by default) */
  double build_timeout_s;    /* 0: 30 s (an own pool's; a shared pool has its own) */
  ms_builder_t *builder;     /* a build pool shared with other searches (the daemon's, one for
                                all its jobs); NULL: srch_tune starts its own of nthreads threads */
  const char *db_path;       /* tuning database (SQLite); NULL = none (no resume, no dedup across runs) */
  int64_t job_id;            /* > 0: progress is written to this job's row in the database */
  /* With job_id: this run is one batch of the shared job queue (db_batch_t).
   * Its trials are numbered from job_trial_base + 1; the job's row is
   * neither moved nor given progress here (the batch's owner does that):
   * each batch commit calls cb->on_commit inside its transaction instead. */
  bool job_batch;
  int64_t job_trial_base;
  bool epilogue_only;        /* no search: only the re-measure and the baseline (max_trials may be 0) */
  const char *work_dir;      /* build/run scratch; NULL = a fresh temp dir, removed at the end */
  const char *model_path;    /* cost model file to load at start and save at the end; NULL = none
                                (then the database's model store below is not used) */
  bool no_model_store;       /* with a database: neither warm-start the XGBoost model from the
                                target's records nor save it there (both on by default) */
  int remeasure;             /* 8: at the end, the best N distinct verified candidates of each task
                                (this run's and the database's) are measured again in interleaved
                                rounds and the winner chosen on those times; 0 = off */
  int remeasure_rounds;      /* 3: rounds of the re-measure (every candidate once per round, timed
                                for 1/rounds of run.min_secs and run.max_repeats) */
  bool baseline;             /* measure the unscheduled program once per (workload, target): kept in
                                the database and read from there by later runs; false = off */
} srch_opts_t;

void srch_opts_default(srch_opts_t *o);

/* One workload to tune.  With a database, its row (srch_workload_register)
 * is added at the start unless the caller did so already and says so. */
typedef struct srch_task {
  const ir_workload_t *workload;
  double weight;       /* task scheduler weight; 1 */
  int64_t workload_id; /* its row in the database when registered already (a daemon's job); 0: register it */
} srch_task_t;

/* The one way a workload enters the database: its row (name, source text,
 * parameter values as a JSON object, FLOPs and bytes of its function) under
 * hash, the hex ir_func_hash of its function, added unless there; *id gets
 * the row's id.  tune.submit calls it in the transaction that creates the
 * job, srch_tune for a task the caller did not register. */
int srch_workload_register(db_t *db, const ir_workload_t *w, const char *hash, int64_t *id, tn_err_t *err);

/* What the search is doing when it reports. */
typedef enum srch_stage {
  SRCH_STAGE_SEARCH,    /* a batch was measured */
  SRCH_STAGE_REMEASURE, /* the best candidates were re-measured (best_* are the re-measured winner's) */
  SRCH_STAGE_BASELINE,  /* the unscheduled program was measured or read from the database */
} srch_stage_t;

/* Progress, reported after every measured batch, after each task's
 * re-measure and after its baseline. */
typedef struct srch_progress {
  srch_stage_t stage;
  int task;                 /* index of the task the batch belonged to */
  int trials_done, trials_total;
  int failures[MS_STATUS__COUNT]; /* by status over all trials so far (failures[MS_OK] = ok count) */
  double best_secs;         /* best verified median so far for this task (0 = none yet) */
  double best_gflops;
  double elapsed_s;
  double phase_s[4];        /* CPU seconds so far: sampling, mutation, features, prediction */
} srch_progress_t;

/* One measured candidate of a batch (valid during the callback). */
typedef struct srch_record {
  int task;
  const char *trace_json;   /* full trace including postprocessing */
  const ms_result_t *result;
  int64_t db_id;            /* record id in the database (0: none / duplicate) */
} srch_record_t;

typedef enum srch_log_level { SRCH_LOG_DEBUG, SRCH_LOG_INFO, SRCH_LOG_WARN } srch_log_level_t;

typedef struct srch_callbacks {
  void (*on_progress)(const srch_progress_t *p, void *ctx);
  void (*on_batch)(const srch_record_t *recs, int n, void *ctx);
  /* Polled between candidates and batches; true stops the search cleanly
   * (what was measured is kept and committed).  Also asked from the
   * reference evaluator's threads and while a candidate runs, where true
   * abandons that work at once (the candidate is not recorded): it must be
   * thread-safe and stay true once true. */
  bool (*should_stop)(void *ctx);
  void *ctx;
  /* What the search has to say (the cost model's warm start, a stored
   * model it cannot use, the re-measure, the baseline); may be NULL. */
  void (*on_log)(srch_log_level_t level, const char *msg, void *ctx);
  /* opts.job_batch: called in each batch's commit transaction, after its
   * records and trials; an error rolls the batch back and fails the search
   * (a lost lease: the batch is another daemon's now).  May be NULL. */
  int (*on_commit)(db_t *db, void *ctx, tn_err_t *err);
} srch_callbacks_t;

typedef struct srch_best {
  bool found;               /* a verified candidate exists (measured in this run or,
                               with a database, recorded there for this workload and target) */
  char *trace_json;         /* malloc'ed */
  double median_secs, gflops;
  int64_t db_id;
  bool remeasured;          /* median_secs is its re-measure's (see srch_remeasure_t) */
  double first_secs;        /* its median before the re-measure (= median_secs when not remeasured) */
} srch_best_t;

/* One candidate of the re-measure. */
typedef struct srch_remeasured {
  int64_t db_id;            /* its record (0 without a database) */
  double first_secs;        /* its median when first measured (this run or recorded earlier) */
  double median_secs;       /* median of every sample of every round; 0 when a round failed */
  int nsamples;
  ms_status_t status;       /* MS_OK, or how a round failed (it is then out of the running) */
} srch_remeasured_t;

/* A task's re-measure: the best `n` distinct verified candidates timed again
 * in `rounds` interleaved rounds (round r runs them in order starting at
 * candidate r mod n, so that none is always first or last), fastest
 * re-measured first.  n = 0: none (off, stopped, or nothing verified). */
typedef struct srch_remeasure {
  int n, rounds;
  srch_remeasured_t *items; /* malloc'ed */
} srch_remeasure_t;

/* A task's unscheduled program (srch_opts_t.baseline). */
typedef struct srch_baseline {
  bool have;                /* measured in this run or read from the database */
  bool cached;              /* read from the database */
  ms_status_t status;
  double median_secs, gflops;
  char *error;              /* malloc'ed; NULL when ok */
} srch_baseline_t;

/* A task's first candidate of the run that failed to build, run, finish in
 * time or verify (MS_TOO_SLOW is no failure of the candidate): why a task
 * that found no kernel found none. */
typedef struct srch_failure {
  ms_status_t status;       /* MS_OK: none failed */
  int trial;                /* the task's trial number in this run, from 1 */
  char *error;              /* malloc'ed; NULL when none failed */
} srch_failure_t;

typedef struct srch_result {
  int ntasks;
  srch_best_t *best;        /* per task (malloc'ed) */
  srch_failure_t *first_failure; /* per task (malloc'ed) */
  srch_remeasure_t *remeasure; /* per task (malloc'ed) */
  srch_baseline_t *baseline;   /* per task (malloc'ed) */
  int trials_done;
  int failures[MS_STATUS__COUNT];
  bool stopped;             /* should_stop ended it before the budget */
  double elapsed_s;
  double phase_s[4];
} srch_result_t;

/* Tunes the tasks on target t.  Deterministic under opts->seed (given the same
 * measured times and database).  Never measures a trace already measured for
 * the same (workload, target), in this run or recorded in the database, as a
 * new trial (the re-measure of the best at the end times them again, and a
 * database's record then gets the re-measured times).  With a database, the
 * XGBoost model starts trained on every record of the target there and is
 * saved there at the end (srch_opts_t.no_model_store).  Errors are for
 * setup failures (unknown target kind, database, no design space); candidate
 * failures are recorded, never fatal.  Several searches may run at once on
 * threads of one process: their candidates take turns on each device
 * (ms_device_acquire), and waiting for one counts against max_seconds and
 * ends at should_stop. */
int srch_tune(const srch_task_t *tasks, int ntasks, const tn_target_t *t, const srch_opts_t *opts,
              const srch_callbacks_t *cb, srch_result_t *out, tn_err_t *err);
void srch_result_free(srch_result_t *r);

#endif
