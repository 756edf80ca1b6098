/* batch.c — one batch through measurement: lowering and asynchronous builds
 * (so the next batch compiles while this one runs), then the runs in the
 * task's worker, one candidate at a time so a stop request is honoured
 * between candidates (and while one waits for the device).  Builds are
 * queued a few at a time, so that a stop never waits for a whole batch of
 * compilations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "search/srch_batch.h"

void srch_batch_init(srch_batch_t *b, int task, srch_cand_t **cands, int n) {
  *b = (srch_batch_t){.task = task, .cands = cands, .n = n};
  b->mc = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *b->mc);
  b->res = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *b->res);
  b->tickets = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *b->tickets);
  b->measured = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *b->measured);
  b->built = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *b->built);
  for (int i = 0; i < n; i++) {
    ms_result_init(&b->res[i]);
    b->tickets[i] = -1;
  }
}

void srch_batch_free(srch_batch_t *b) {
  for (int i = 0; i < b->n; i++) {
    srch_cand_unref(b->cands[i]);
    ms_candidate_free(b->mc[i]);
    ms_result_clear(&b->res[i]);
  }
  free(b->cands);
  free(b->mc);
  free(b->res);
  free(b->tickets);
  free(b->measured);
  free(b->built);
  free(b->db_ids);
  memset(b, 0, sizeof *b);
}

/* Lowers candidate i; a lowering error is the candidate's build error. */
static void lower_one(const tn_target_t *t, srch_batch_t *b, int i) {
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  if (srch_lower_schedule(b->cands[i]->sch, t, NULL, &m, &err) < 0 ||
      ms_candidate_from_module(t, m, &b->mc[i], &err) < 0)
    ms_result_fail(&b->res[i], MS_BUILD_ERROR, "lowering: %s", err.msg);
  cg_module_free(m);
}

void srch_batch_lower(const tn_target_t *t, srch_batch_t *b) {
  for (int i = 0; i < b->n; i++) lower_one(t, b, i);
}

/* Queues builds in candidate order until `cap` of them are unfinished. */
void srch_batch_pump(ms_builder_t *builder, srch_batch_t *b, int cap) {
  int inflight = 0;
  for (int i = b->first_unfinished; i < b->nsubmitted; i++) {
    if (b->tickets[i] >= 0 && !ms_build_done(builder, b->tickets[i])) inflight++;
    else if (i == b->first_unfinished) b->first_unfinished++;
  }
  for (; b->nsubmitted < b->n && inflight < cap; b->nsubmitted++) {
    int i = b->nsubmitted;
    if (!b->mc[i]) continue;
    b->tickets[i] = ms_build_submit(builder, b->mc[i], &b->res[i]);
    if (b->tickets[i] < 0) ms_result_fail(&b->res[i], MS_BUILD_ERROR, "the builder refused the candidate");
    else inflight++;
  }
}

bool srch_batch_wait(ms_builder_t *builder, srch_batch_t *b, int cap, bool (*stop)(void *ctx), void *ctx) {
  for (int i = 0; i < b->n; i++) {
    srch_batch_pump(builder, b, cap);
    if (stop(ctx)) return false;
    /* a build may take its whole timeout: a stop is asked every 50 ms */
    while (b->tickets[i] >= 0 && !ms_build_wait_for(builder, b->tickets[i], 0.05))
      if (stop(ctx)) return false;
    if (b->tickets[i] >= 0) ms_build_wait(builder, b->tickets[i]);
    b->built[i] = true;
  }
  return true;
}

/* The build directory of a measured candidate (under the builder's run dir)
 * is not needed any more (RemoveBuildArtifact, §7). */
void srch_remove_artifact(const char *run_dir, ms_result_t *r) {
  size_t n = strlen(run_dir);
  char *slash = strrchr(r->artifact, '/');
  if (!slash || strncmp(r->artifact, run_dir, n) != 0 || r->artifact[n] != '/') return;
  *slash = '\0';
  if (strchr(r->artifact + n + 1, '/') == NULL) srch_rm_tree(r->artifact);
  *slash = '/';
}

void srch_batch_drain(ms_builder_t *builder, srch_batch_t *b, bool abandon) {
  for (int i = 0; i < b->nsubmitted; i++)
    if (b->tickets[i] >= 0 && abandon) ms_build_abandon(builder, b->tickets[i]);
    else if (b->tickets[i] >= 0) ms_build_cancel(builder, b->tickets[i]);
  for (int i = 0; i < b->nsubmitted; i++)
    if (b->tickets[i] >= 0) ms_build_wait(builder, b->tickets[i]);
  /* a stopped batch's unrun artifacts: a shared pool's dir outlives the search */
  for (int i = 0; i < b->nsubmitted; i++)
    if (!b->measured[i]) srch_remove_artifact(ms_builder_run_dir(builder), &b->res[i]);
}

int srch_batch_run(ms_runner_t *runner, const char *run_dir, srch_batch_t *b, bool (*stop)(void *ctx), void *ctx,
                   tn_err_t *err) {
  for (int i = 0; i < b->n; i++) {
    if (stop(ctx) || !b->built[i]) return 0;
    if (b->res[i].status == MS_OK) {
      if (ms_runner_run_batch(runner, &b->mc[i], &b->res[i], 1, err) < 0) return err->code;
      if (b->res[i].status == MS_OK && !b->res[i].ran) return 0; /* stopped while waiting for the device */
    }
    srch_remove_artifact(run_dir, &b->res[i]);
    /* A run that failed while a stop was requested most likely died of the
     * same Ctrl-C (the worker shares the terminal): not a fact worth keeping. */
    if (b->res[i].status == MS_RUN_ERROR && stop(ctx)) return 0;
    b->measured[i] = true;
    b->nmeasured++;
  }
  return 0;
}
