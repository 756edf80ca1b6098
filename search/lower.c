/* lower.c — the one path from a trace to code, used by the search, the
 * measurement of the unscheduled program, the daemon and tunectl: replay
 * (up to EnterPostproc) -> the target's postprocessors -> lower -> generate
 * in the target's language. */
#include "search/search.h"

int srch_lower_schedule(const sch_t *s, const tn_target_t *t, const char *entry, cg_module_t **out, tn_err_t *err) {
  *out = NULL;
  return cg_lower_for(sch_func(s), t, entry, out, err);
}

int srch_schedule(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, sch_t **out,
                  smp_stage_t *stage, tn_err_t *err) {
  if (trace) return smp_sample(f, t, trace, seed, out, stage, err);
  /* the unscheduled program as the target runs it: on GPU targets the
   * postprocessors bind its loops to threads (rewrite-unbound-block) */
  sch_t *s = sch_create(f, seed);
  int rc = smp_postprocess(s, t, stage, err);
  if (rc < 0) {
    sch_free(s);
    s = NULL;
  }
  *out = s;
  return rc < 0 ? rc : TN_OK;
}

int srch_lower(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, const char *entry,
               cg_module_t **out, smp_stage_t *stage, tn_err_t *err) {
  sch_t *s = NULL;
  *out = NULL;
  int rc = srch_schedule(f, t, trace, seed, &s, stage, err);
  if (rc == TN_OK && (rc = srch_lower_schedule(s, t, entry, out, err)) < 0) tn_err_prefix(err, "lower");
  sch_free(s);
  return rc;
}
