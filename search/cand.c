/* cand.c — search candidates: a post-processed schedule with its trace JSON,
 * the trace hash used for dedup, and cached cost-model features. */
#include <stdlib.h>

#include "search/srch_internal.h"

uint64_t srch_trace_hash(const char *json) { return tn_fnv1a_str(TN_FNV_INIT, json ? json : ""); }

srch_cand_t *srch_cand_make(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace,
                            uint64_t seed, smp_stage_t *stage, tn_err_t *err) {
  sch_t *s = NULL;
  if (srch_schedule(f, t, trace, seed, &s, stage, err) < 0) return NULL;
  srch_cand_t *c = tn_xcalloc(1, sizeof *c);
  c->refs = 1;
  c->sch = s;
  c->json = sch_trace_to_json(sch_get_trace(s));
  c->hash = srch_trace_hash(c->json);
  return c;
}

srch_cand_t *srch_cand_ref(srch_cand_t *c) {
  __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  return c;
}

void srch_cand_unref(srch_cand_t *c) {
  if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  sch_free(c->sch);
  free(c->json);
  cm_feature_rows_free(&c->feat);
  free(c);
}
