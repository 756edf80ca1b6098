/* population.c — what both strategies do to a population: fresh samples of
 * the design spaces, cost-model features and predictions, each spread over
 * the search threads and charged to its phase's CPU seconds. */
#include <stdlib.h>

#include "search/srch_internal.h"

typedef struct fresh {
  srch_ctx_t *c;
  srch_task_state_t *ts;
  uint64_t base;
  srch_cand_t **got;
  srch_cand_memo_t made; /* a space trace that samples nothing is replayed once */
} fresh_t;

static void fresh_one(void *ctx, int i) {
  fresh_t *fr = ctx;
  if (srch_stopped(fr->c)) return; /* no sample: the search is over */
  tn_rng_t rng;
  tn_rng_seed(&rng, srch_seed_for(fr->base, (uint64_t)i));
  const smp_space_t *sp = &fr->ts->space;
  int k = (int)tn_rng_below(&rng, (uint64_t)sp->n);
  fr->got[i] = srch_cand_memo_make(&fr->made, fr->ts->func, fr->c->target, sp->traces[k], tn_rng_next(&rng),
                                   k);
}

int srch_sample_fresh(srch_ctx_t *c, srch_task_state_t *ts, int attempts, uint64_t base, srch_cand_t ***out) {
  fresh_t fr = {.c = c, .ts = ts, .base = base, .got = tn_xcalloc((size_t)TN_MAX(attempts, 1), sizeof(srch_cand_t *))};
  srch_cand_memo_init(&fr.made);
  c->phase_s[SRCH_PHASE_SAMPLING] += srch_parallel_for(c->nthreads, attempts, fresh_one, &fr);
  srch_cand_memo_free(&fr.made);
  int n = 0;
  for (int i = 0; i < attempts; i++)
    if (fr.got[i]) fr.got[n++] = fr.got[i];
  *out = fr.got;
  return n;
}

static void features_one(void *ctx, int i) {
  srch_ctx_t *c = ((void **)ctx)[0];
  srch_cand_t *cand = ((srch_cand_t **)((void **)ctx)[1])[i];
  if (cand->have_feat) return;
  cm_features(sch_func(cand->sch), c->target, &cand->feat);
  cand->have_feat = true;
}

static int cmp_cand(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(srch_cand_t *const *)a, y = (uintptr_t)*(srch_cand_t *const *)b;
  return (x > y) - (x < y);
}

void srch_features(srch_ctx_t *c, srch_cand_t **cands, int n) {
  /* each candidate once: a population can hold one several times (a child
   * made earlier in the batch), and two threads must not fill the same one */
  srch_cand_t **todo = tn_xmalloc(sizeof *todo * (size_t)(n + 1));
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!cands[i]->have_feat) todo[k++] = cands[i];
  qsort(todo, (size_t)k, sizeof *todo, cmp_cand);
  int u = 0;
  for (int i = 0; i < k; i++)
    if (u == 0 || todo[u - 1] != todo[i]) todo[u++] = todo[i];
  void *ctx[2] = {c, todo};
  c->phase_s[SRCH_PHASE_FEATURES] += srch_parallel_for(c->nthreads, u, features_one, ctx);
  free(todo);
}
