/* replay_trace.c — the baseline strategy (ReplayTrace, §6): every batch slot
 * is a random replay of a uniformly chosen design space, retried until the
 * postprocessors accept one that was never measured.  No cost model. */
#include <stdlib.h>

#include "search/srch_internal.h"

#define MAX_FAILS 100 /* ReplayTrace's max_fail_count */

typedef struct slots {
  srch_ctx_t *c;
  srch_task_state_t *ts;
  uint64_t base;
  srch_cand_t **got;
} slots_t;

static void replay_slot(void *ctx, int i) {
  slots_t *s = ctx;
  tn_rng_t rng;
  tn_rng_seed(&rng, srch_seed_for(s->base, (uint64_t)i));
  const smp_space_t *sp = &s->ts->space;
  for (int k = 0; k <= MAX_FAILS; k++) {
    int d = (int)tn_rng_below(&rng, (uint64_t)sp->n);
    srch_cand_t *cd = srch_cand_make(s->ts->func, s->c->target, sp->traces[d], tn_rng_next(&rng), NULL, NULL);
    if (cd && !srch_hashset_has(&s->ts->seen, cd->hash)) {
      s->got[i] = cd;
      return;
    }
    srch_cand_unref(cd);
  }
}

int srch_replay_batch(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t ***out, int *nout, tn_err_t *err) {
  (void)err;
  slots_t s = {.c = c, .ts = ts, .base = tn_rng_next(&ts->rng)};
  s.got = tn_xcalloc((size_t)TN_MAX(want, 1), sizeof *s.got);
  c->phase_s[SRCH_PHASE_SAMPLING] += srch_parallel_for(c->nthreads, want, replay_slot, &s);
  srch_hashset_t taken;
  srch_hashset_init(&taken);
  int n = 0;
  for (int i = 0; i < want; i++) { /* slots that drew the same trace: the first keeps it */
    if (s.got[i] && srch_hashset_add(&taken, s.got[i]->hash)) s.got[n++] = s.got[i];
    else srch_cand_unref(s.got[i]);
  }
  srch_hashset_free(&taken);
  *out = s.got;
  *nout = n;
  return 0;
}
