/* srch_internal.h — what the search/ files share: candidates, the trace-hash
 * set, the parallel-for helper, per-task state, the strategies' batch
 * generators and the task scheduler.  Not installed; only search/ and its
 * tests include it. */
#ifndef TUNED_SRCH_INTERNAL_H
#define TUNED_SRCH_INTERNAL_H

#include <pthread.h>

#include "common/common.h"
#include "common/target.h"
#include "cost_model/cost_model.h"
#include "db/db.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "sampler/sampler.h"
#include "schedule/schedule.h"
#include "search/search.h"

/* Indices of srch_progress_t.phase_s / srch_result_t.phase_s. */
enum { SRCH_PHASE_SAMPLING, SRCH_PHASE_MUTATION, SRCH_PHASE_FEATURES, SRCH_PHASE_PREDICTION, SRCH_PHASE__COUNT };

/* Empty batches in a row after which a task ends (§6: hard-coded 5). */
#define SRCH_MAX_EMPTY_BATCHES 5

/* ---- candidates (cand.c) ------------------------------------------------- */

/* A post-processed candidate.  Reference-counted: a generation's population,
 * the next generation (copies) and the best-list share them. */
typedef struct srch_cand {
  int refs;
  sch_t *sch;             /* the scheduled function and its full trace */
  char *json;             /* sch_trace_to_json of the full trace (incl. postproc) */
  uint64_t hash;          /* srch_trace_hash(json): the dedup key of its identity */
  cm_feature_rows_t feat; /* valid when have_feat */
  bool have_feat;
  double score;           /* last prediction */
  int space;              /* the design space it was sampled from (mutants: their parent's); -1: unknown */
} srch_cand_t;

/* Replays `trace` on f with smp_sample and wraps the result (its space -1);
 * NULL when the sampler rejects it (*stage, err say why; both may be NULL). */
srch_cand_t *srch_cand_make(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace,
                            uint64_t seed, smp_stage_t *stage, tn_err_t *err);
srch_cand_t *srch_cand_ref(srch_cand_t *c);
void srch_cand_unref(srch_cand_t *c); /* NULL is fine */
/* The first 64 bits of db_trace_hash(json) (tn_id_key): the key of the
 * search's dedup sets, which a collision would only make skip a trace. */
uint64_t srch_trace_hash(const char *json);

/* Candidates made from fully decided traces (every sampling instruction
 * has its decision), by trace content.  Such a trace replays to the same
 * candidate whatever the seed, so making it again (a fresh sample of a space
 * that samples nothing, a mutation that lands on a trace made before: in a
 * small space most do) reuses the first one instead of replaying it.
 * Thread-safe; failures are remembered too. */
typedef struct srch_cand_memo {
  pthread_mutex_t mu;
  uint64_t *keys; /* 0 = empty */
  srch_cand_t **cands; /* a reference each; NULL: the sampler rejected it */
  size_t cap, n;
} srch_cand_memo_t;

void srch_cand_memo_init(srch_cand_memo_t *m);
void srch_cand_memo_free(srch_cand_memo_t *m);
/* srch_cand_make through the memo: a new reference, or NULL when rejected;
 * a candidate made here gets `space`.  The candidate's seed is the trace's
 * hash (not `seed`), so that it does not depend on which thread made it
 * first. */
srch_cand_t *srch_cand_memo_make(srch_cand_memo_t *m, const ir_func_t *f, const tn_target_t *t,
                                 const sch_trace_t *trace, uint64_t seed, int space);

/* ---- trace-hash set (dedup.c) ------------------------------------------- */

typedef struct srch_hashset {
  uint64_t *keys; /* 0 = empty slot (key 0 is stored as 1) */
  size_t cap, n;
} srch_hashset_t;

void srch_hashset_init(srch_hashset_t *s);
void srch_hashset_free(srch_hashset_t *s);
bool srch_hashset_has(const srch_hashset_t *s, uint64_t key);
/* Returns true when the key was new. */
bool srch_hashset_add(srch_hashset_t *s, uint64_t key);

/* ---- parallel for (parallel.c) ------------------------------------------ */

/* Calls fn(ctx, i) for i in [0, n) on up to nthreads threads (the caller's
 * included) and returns the CPU seconds all of them spent in fn.  Which
 * thread runs which i is not fixed: fn must make each i's result depend on
 * i only (seed per index), never on the thread. */
double srch_parallel_for(int nthreads, int n, void (*fn)(void *ctx, int i), void *ctx);
/* CPU seconds of the calling thread / of the whole process. */
double srch_thread_cpu(void);
double srch_process_cpu(void);
/* A seed for item i of a draw: independent streams without shared state. */
uint64_t srch_seed_for(uint64_t base, uint64_t i);

/* ---- per-task state (task.c) -------------------------------------------- */

/* A measured record the evolutionary search seeds its population with. */
typedef struct srch_measured {
  sch_trace_t *trace; /* parsed trace */
  char *json;         /* its text, as recorded */
  uint64_t hash;
  double median_secs;
  int64_t db_id;      /* its record (0: none) */
} srch_measured_t;

typedef struct srch_task_state {
  const ir_workload_t *workload;
  const ir_func_t *func;
  double weight, flops;
  uint64_t key;                /* tn_id_key(hash_hex): the cost model's workload key */
  char hash_hex[TN_ID_SIZE];   /* ir_func_hash: the workload's identity */
  smp_space_t space;
  tn_rng_t rng;                /* everything this task draws */
  srch_hashset_t seen;         /* traces measured (this run or the database) or in flight */
  srch_measured_t *measured;   /* verified records, fastest first (at most measured_cap) */
  int nmeasured, measured_cap;
  int64_t workload_id;         /* database row (0 without a database) */
  ms_runner_t *runner;         /* created at the task's first batch */
  int trials_sent, trials_done;
  int empty_batches;
  bool done;
  bool seeded;                 /* the locality seeds went into a batch (evolutionary.c) */
  srch_best_t best;            /* best verified over the database and this run */
  double *history;             /* best seconds after each joined batch (task scheduler) */
  int nhistory;
  srch_remeasure_t remeasure;  /* the re-measure at the end (remeasure.c) */
  srch_baseline_t baseline;    /* the unscheduled program (baseline.c) */
  srch_failure_t first_failure; /* the run's first failed candidate */
} srch_task_state_t;

/* Everything one srch_tune call shares. */
typedef struct srch_ctx {
  const tn_target_t *target;
  srch_opts_t opts;            /* with defaults filled in */
  int nthreads;
  db_t *db;                    /* NULL without a database */
  int64_t target_id;
  cm_model_t *model;
  srch_task_state_t *tasks;
  int ntasks;
  const srch_callbacks_t *cb;
  double phase_s[SRCH_PHASE__COUNT];
  bool model_store;            /* the model is warm-started from and saved to the database */
  int64_t *model_ids;          /* per model sample: its record id (0: none) */
  int nmodel_ids, cap_model_ids;
} srch_ctx_t;

/* Passes a message to the caller's on_log (printf-style). */
void srch_log(const srch_ctx_t *c, srch_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The caller's should_stop (false without one).  Thread-safe by its
 * contract: the sampling and mutation slots ask it, so that generating a
 * huge population ends soon after a cancel or a deadline. */
bool srch_stopped(const srch_ctx_t *c);

/* Sets up the task: design spaces, database rows, known trace hashes and
 * the best measured records. */
int srch_task_init(srch_ctx_t *c, srch_task_state_t *ts, const srch_task_t *task, uint64_t seed,
                   tn_err_t *err);
void srch_task_free(srch_task_state_t *ts);
/* Records a verified measurement (keeps the list sorted, capped). */
void srch_task_add_measured(srch_task_state_t *ts, const char *json, uint64_t hash, double median_secs,
                            int64_t db_id);
/* Updates the task's best with a verified measurement. */
void srch_task_note_best(srch_task_state_t *ts, const char *json, double median_secs, int64_t db_id);

/* ---- strategies (evolutionary.c, replay_trace.c) ------------------------- */

/* Generates up to `want` candidates not in ts->seen and distinct from each
 * other (fewer, even none, when the space is exhausted).  *out is
 * malloc'ed, each entry holding one reference. */
int srch_evolve_batch(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t ***out, int *n,
                      tn_err_t *err);
int srch_replay_batch(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t ***out, int *n,
                      tn_err_t *err);

/* Fresh samples of the task's design spaces: `attempts` replays of a
 * uniformly chosen space with all decisions drawn anew (seeded by base and
 * the index); keeps the valid ones in index order.  Adds the CPU seconds to
 * c->phase_s[SAMPLING]. */
int srch_sample_fresh(srch_ctx_t *c, srch_task_state_t *ts, int attempts, uint64_t base,
                      srch_cand_t ***out);
/* Computes missing features of cands (parallel; adds to FEATURES). */
void srch_features(srch_ctx_t *c, srch_cand_t **cands, int n);

/* ---- setup without measuring (tune.c): tests and the overhead benchmark -- */

/* Validates the options, opens the database, creates the model, sets up
 * every task and warm-starts the model from the database, as srch_tune
 * does (cb, which may be NULL, gets its log); *sched_seed (may be NULL)
 * gets the task scheduler's seed.  Free with srch_ctx_free even on failure. */
int srch_ctx_init(srch_ctx_t *c, const srch_task_t *tasks, int ntasks, const tn_target_t *t, const srch_opts_t *opts,
                  const srch_callbacks_t *cb, uint64_t *sched_seed, tn_err_t *err);
void srch_ctx_free(srch_ctx_t *c);
/* The task's strategy makes a batch of up to `want` candidates, which are
 * then marked as in flight (never proposed again). */
int srch_generate(srch_ctx_t *c, int task, int want, srch_cand_t ***out, int *n, tn_err_t *err);

/* ---- the cost model in the database (model_store.c) ----------------------- */

/* With a database and the XGBoost model: trains c->model on every record of
 * the target (features of records the stored model holds are reused, the
 * others computed by replaying their traces on their workloads; records
 * that cannot be replayed are skipped with a debug log, ok records that are
 * not verified are not trusted).  A stored model this build cannot read is
 * ignored with a warning.  Sets c->model_store.  Errors: database reads. */
int srch_model_warm_start(srch_ctx_t *c, tn_err_t *err);
/* Records which record each new model sample came from (call with every
 * cm_model_update). */
void srch_model_note_samples(srch_ctx_t *c, const int64_t *ids, int n);
/* Saves c->model with its record ids for the target (a warning on failure). */
void srch_model_save(srch_ctx_t *c);

/* ---- the end of a search (remeasure.c, baseline.c) ------------------------ */

/* Re-measures the task's best opts.remeasure distinct verified candidates
 * in opts.remeasure_rounds interleaved rounds (built with builder, run with
 * runner), fills ts->remeasure, makes the fastest re-measured one the
 * task's best, and with a database gives their records the re-measured
 * times (and a job its best record).  A stop leaves everything as it was.
 * Errors: the worker cannot run, the database. */
int srch_remeasure(srch_ctx_t *c, int task, ms_builder_t *builder, int build_cap, ms_runner_t *runner,
                   bool (*stop)(void *ctx), void *stop_ctx, tn_err_t *err);
/* The unscheduled program of the task as the database has it: fills
 * ts->baseline and sets *found when there is one. */
int srch_baseline_lookup(srch_ctx_t *c, int task, bool *found, tn_err_t *err);
/* Builds and measures it (without the runner's bounds: it is expected to
 * be slow), fills ts->baseline (not when a stop ended the wait for the
 * device) and, when ok or a timeout, keeps it in the database. */
int srch_baseline_measure(srch_ctx_t *c, int task, ms_builder_t *builder, ms_runner_t *runner, tn_err_t *err);

/* Status names are shared by measure/ and db/: one maps onto the other. */
db_status_t srch_db_status(ms_status_t s);
ms_status_t srch_ms_status(db_status_t s);

/* ---- task scheduler (task_scheduler.c) ---------------------------------- */

typedef struct srch_sched {
  int ntasks;
  int picks;      /* picks so far: the first ntasks are round-robin */
  double alpha;   /* 0.2 */
  int window;     /* 3 */
  tn_rng_t rng;   /* breaks ties */
} srch_sched_t;

void srch_sched_init(srch_sched_t *s, int ntasks, uint64_t seed);
/* Next task to give a batch to, -1 when every task is done. */
int srch_sched_next(srch_sched_t *s, const srch_task_state_t *tasks);
/* Appends the task's best-so-far (seconds; 0 = none) to its history. */
void srch_sched_joined(srch_task_state_t *ts);

#endif
