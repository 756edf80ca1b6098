/* measure.c — ms_measure: lowered modules in, measurement records out, with
 * one builder and one runner sharing a temp dir for the call. */
#include <stdio.h>
#include <stdlib.h>

#include "ms_internal.h"

int ms_measure(const ir_func_t *f, const tn_target_t *t, cg_module_t *const *mods, int n,
               const ms_options_t *o, ms_result_t *results, tn_err_t *err) {
  ms_options_t def = {0};
  if (!o) o = &def;
  if (!f || !t || n < 0 || (n > 0 && (!mods || !results)))
    return tn_err_set(err, TN_EINVAL, "ms_measure: needs a workload, a target, modules and results");
  for (int i = 0; i < n; i++) ms_result_init(&results[i]);
  if (ms_compiler_check(t, err) < 0) return err->code;
  char dir[MS_DIR_MAX];
  int rc = ms_temp_dir_new("tuned-measure", dir, sizeof dir, err);
  if (rc < 0) return rc;
  ms_build_opts_t bo = o->build;
  ms_run_opts_t ro = o->run;
  bo.run_dir = ro.run_dir = dir;
  ro.tf32 = ro.tf32 || t->allow_tf32;
  ms_builder_t *b = NULL;
  ms_runner_t *r = NULL;
  ms_candidate_t **cands = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *cands);
  rc = ms_runner_new(&ro, &r, err);
  if (rc == TN_OK) rc = ms_runner_set_workload(r, f, o->seed, err);
  if (rc == TN_OK) rc = ms_builder_new(&bo, &b, err);
  for (int i = 0; i < n && rc == TN_OK; i++) {
    tn_err_t ce = {0};
    if (ms_candidate_from_module(t, mods[i], &cands[i], &ce) < 0)
      ms_result_fail(&results[i], MS_BUILD_ERROR, "%s", ce.msg);
  }
  /* Candidates that could not be made keep their error; build the others. */
  int64_t *tickets = tn_xmalloc(sizeof *tickets * (size_t)TN_MAX(n, 1));
  for (int i = 0; i < n; i++) tickets[i] = rc == TN_OK && cands[i] ? ms_build_submit(b, cands[i], &results[i]) : -1;
  for (int i = 0; i < n; i++)
    if (tickets[i] >= 0) ms_build_wait(b, tickets[i]);
  free(tickets);
  if (rc == TN_OK) rc = ms_runner_run_batch(r, cands, results, n, err);
  for (int i = 0; i < n; i++) ms_candidate_free(cands[i]);
  free(cands);
  ms_builder_free(b);
  ms_runner_free(r);
  ms_temp_dir_remove(dir);
  return rc;
}
