/* srch_batch.h — a batch of candidates on its way through the builder, the
 * runner and the database (batch.c, commit.c); internal to search/. */
#ifndef TUNED_SRCH_BATCH_H
#define TUNED_SRCH_BATCH_H

#include "search/srch_internal.h"

typedef struct srch_batch {
  int task;
  int n;
  srch_cand_t **cands;  /* owned: one reference each */
  ms_candidate_t **mc;  /* NULL where lowering failed */
  ms_result_t *res;
  int64_t *tickets;     /* build tickets, -1 when not submitted */
  int nsubmitted;       /* candidates [0, nsubmitted) were handed to the builder (or failed lowering) */
  int first_unfinished; /* builds before it are known to be finished */
  bool *built;          /* the build finished (or never started: lowering failed) */
  bool *measured;       /* processed by the runner (or failed before it): a trial */
  int nmeasured;
  int64_t *db_ids;      /* after the commit (0: none / duplicate) */
} srch_batch_t;

/* Takes ownership of cands (malloc'ed array). */
void srch_batch_init(srch_batch_t *b, int task, srch_cand_t **cands, int n);
void srch_batch_free(srch_batch_t *b);
/* Lowers every candidate (a lowering error is its build error). */
void srch_batch_lower(const tn_target_t *t, srch_batch_t *b);
/* Queues the next builds while fewer than `cap` of this batch's are
 * unfinished; returns at once. */
void srch_batch_pump(ms_builder_t *builder, srch_batch_t *b, int cap);
/* Waits for the builds in order (queueing more as they finish); false when
 * stop(ctx) said so first. */
bool srch_batch_wait(ms_builder_t *builder, srch_batch_t *b, int cap, bool (*stop)(void *ctx), void *ctx);
/* Withdraws the builds still queued, waits for the others (abandon: gives
 * up those compiling instead, for a stopped search) and removes the
 * artifacts that were not run: call before srch_batch_free (the builder
 * writes into the batch's results). */
void srch_batch_drain(ms_builder_t *builder, srch_batch_t *b, bool abandon);
/* Runs the built candidates in order until stop(ctx) says so (the runner
 * polls its own stop while a candidate waits for the device); marks what
 * was processed and removes its build directory (under run_dir, the
 * builder's).  Fails only when the worker cannot run at all. */
int srch_batch_run(ms_runner_t *runner, const char *run_dir, srch_batch_t *b, bool (*stop)(void *ctx), void *ctx,
                   tn_err_t *err);
/* Commits the processed candidates to the database in one transaction and
 * fills db_ids (all 0 without a database). */
int srch_batch_commit(srch_ctx_t *c, srch_batch_t *b, tn_err_t *err);

/* Removes the build directory of a result's artifact when it lies right
 * under run_dir (the builder's; best effort). */
void srch_remove_artifact(const char *run_dir, ms_result_t *r);

/* Removes a directory tree (best effort). */
void srch_rm_tree(const char *path);

#endif
