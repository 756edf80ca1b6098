/* evolutionary.c — the evolutionary search of metaschedule.md §6: a
 * population of the best measured records and fresh samples, evolved for a
 * few generations by mutation under the cost model's predictions, then an
 * eps-greedy mix of the predicted-best and random fresh samples.  A task's
 * first batch also measures one locality seed per design space (every
 * compute location at the consumer's outermost loop: the fused form), which
 * MetaSchedule does not, and, while nothing of the task is measured, takes
 * candidates from every design space: as many of each, or, once the model
 * is trained, most from the spaces it ranks best (see pick_spread).
 *
 * Determinism: every random draw of a population slot comes from a seed made
 * of the generation's seed and the slot index, and the one coupling between
 * slots (a parent is copied unmutated at most once per generation) is
 * resolved afterwards in slot order, so results do not depend on threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/srch_internal.h"

#define MAX_TRIES 11 /* genetic_max_fail_count 10, plus the first try */
#define MAX_EMPTY_ROUNDS 5

typedef struct pool {
  srch_cand_t **v;
  int n, cap;
} pool_t;

static void pool_push(pool_t *p, srch_cand_t *c) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 64;
    p->v = tn_xrealloc(p->v, (size_t)p->cap * sizeof *p->v);
  }
  p->v[p->n++] = c;
}

static void pool_clear(pool_t *p) {
  for (int i = 0; i < p->n; i++) srch_cand_unref(p->v[i]);
  p->n = 0;
}

static void pool_free(pool_t *p) {
  pool_clear(p);
  free(p->v);
  *p = (pool_t){0};
}

/* ---- initial population ------------------------------------------------- */

typedef struct seeds {
  srch_ctx_t *c;
  srch_task_state_t *ts;
  uint64_t base;
  srch_cand_t **got;
} seeds_t;

static void seed_one(void *ctx, int i) {
  seeds_t *s = ctx;
  s->got[i] = srch_cand_make(s->ts->func, s->c->target, s->ts->measured[i].trace, srch_seed_for(s->base, (uint64_t)i),
                             NULL, NULL);
}

/* The best measured records, replayed (postprocessors re-run). */
static void add_measured(srch_ctx_t *c, srch_task_state_t *ts, pool_t *pop) {
  int n = TN_MIN(ts->nmeasured, (int)(c->opts.population * c->opts.init_measured_ratio));
  if (n <= 0) return;
  seeds_t s = {.c = c, .ts = ts, .base = tn_rng_next(&ts->rng), .got = tn_xcalloc((size_t)n, sizeof(srch_cand_t *))};
  c->phase_s[SRCH_PHASE_SAMPLING] += srch_parallel_for(c->nthreads, n, seed_one, &s);
  for (int i = 0; i < n; i++)
    if (s.got[i]) pool_push(pop, s.got[i]);
  free(s.got);
}

/* Fresh samples until at least init_min_unmeasured are valid (rounds of
 * population - measured attempts; 5 rounds without any valid one give up). */
static void add_fresh(srch_ctx_t *c, srch_task_state_t *ts, pool_t *pop, pool_t *fresh) {
  int attempts = TN_MAX(c->opts.population - pop->n, 1);
  int want = TN_MIN(c->opts.init_min_unmeasured, c->opts.population);
  /* Stop when the population is full too: with a small population the
   * measured seeds can leave fewer than `want` slots for fresh samples. */
  for (int fails = 0; fresh->n < want && pop->n < c->opts.population && fails < MAX_EMPTY_ROUNDS && !srch_stopped(c);) {
    srch_cand_t **got = NULL;
    int n = srch_sample_fresh(c, ts, attempts, tn_rng_next(&ts->rng), &got);
    fails += n == 0;
    for (int i = 0; i < n; i++) {
      if (pop->n < c->opts.population) {
        pool_push(pop, srch_cand_ref(got[i]));
        pool_push(fresh, got[i]);
      } else {
        srch_cand_unref(got[i]);
      }
    }
    free(got);
  }
}

/* ---- locality seeds ---------------------------------------------------- */

/* The space's trace with every sampled compute location decided as the
 * first candidate loop, the consumer's outermost (decision 0); NULL when it
 * samples no compute location.  That is the fused form of a producer chain
 * (softmax's row max, exponentials and row sum computed inside the output's
 * row loop, the row still in cache): in a space that also offers the root,
 * inlining and every inner loop, random samples rarely draw it for every
 * producer at once (about 1 in 300 for softmax), so the cost model may
 * never see one. */
static sch_trace_t *outermost_trace(const sch_trace_t *space) {
  sch_trace_t *t = NULL;
  for (int i = 0; i < space->n; i++) {
    if (space->insts[i].kind != SCH_SAMPLE_COMPUTE_LOCATION) continue;
    if (!t) t = sch_trace_copy(space);
    int64_t *d = tn_arena_alloc(t->arena, sizeof *d);
    t->insts[i].decision = d; /* 0 */
    t->insts[i].ndecision = 1;
  }
  return t;
}

/* The task's first batch starts with one seed per design space that samples
 * compute locations (other decisions sampled; at most half the batch), so
 * that the model learns from the first batch what fusing is worth; seeds
 * already measured (a database's records) are skipped.  Returns how many
 * went into out. */
static int add_seeds(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t **out, srch_hashset_t *taken) {
  if (ts->seeded) return 0;
  ts->seeded = true;
  int n = 0;
  for (int k = 0; k < ts->space.n && n < want / 2 && !srch_stopped(c); k++) {
    sch_trace_t *t = outermost_trace(ts->space.traces[k]);
    if (!t) continue;
    srch_cand_t *cd = srch_cand_make(ts->func, c->target, t, tn_rng_next(&ts->rng), NULL, NULL);
    sch_trace_free(t);
    if (cd) cd->space = k;
    if (cd && !srch_hashset_has(&ts->seen, cd->hash) && srch_hashset_add(taken, cd->hash)) out[n++] = cd;
    else srch_cand_unref(cd);
  }
  return n;
}

/* ---- prediction and the best-list --------------------------------------- */

static int predict(srch_ctx_t *c, pool_t *pop, tn_err_t *err) {
  srch_features(c, pop->v, pop->n);
  double t0 = srch_process_cpu();
  cm_feature_rows_t *rows = tn_xmalloc((size_t)TN_MAX(pop->n, 1) * sizeof *rows);
  double *scores = tn_xmalloc((size_t)TN_MAX(pop->n, 1) * sizeof *scores);
  for (int i = 0; i < pop->n; i++) rows[i] = pop->v[i]->feat;
  int rc = cm_model_predict(c->model, rows, pop->n, scores, err);
  for (int i = 0; rc == 0 && i < pop->n; i++) pop->v[i]->score = isfinite(scores[i]) ? TN_MAX(scores[i], 0.0) : 0;
  free(rows);
  free(scores);
  c->phase_s[SRCH_PHASE_PREDICTION] += srch_process_cpu() - t0;
  return rc;
}

typedef struct best {
  srch_cand_t *cand;
  double score;
  int order; /* insertion order: ties keep it */
} best_t;

static int cmp_best(const void *a, const void *b) {
  const best_t *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

typedef struct bests {
  best_t *v;
  int n, cap, orders;
  srch_hashset_t in;
} bests_t;

/* Adds every candidate of pop that is neither measured nor listed, then keeps
 * the `keep` highest scores (the bounded heap of §6). */
static void bests_push(bests_t *b, const srch_task_state_t *ts, const pool_t *pop, int keep) {
  for (int i = 0; i < pop->n; i++) {
    srch_cand_t *cd = pop->v[i];
    if (srch_hashset_has(&ts->seen, cd->hash) || !srch_hashset_add(&b->in, cd->hash)) continue;
    if (b->n == b->cap) {
      b->cap = b->cap ? b->cap * 2 : 128;
      b->v = tn_xrealloc(b->v, (size_t)b->cap * sizeof *b->v);
    }
    b->v[b->n++] = (best_t){srch_cand_ref(cd), cd->score, b->orders++};
  }
  if (b->n > 1) qsort(b->v, (size_t)b->n, sizeof *b->v, cmp_best); /* (b->v is NULL while empty: qsort must not see it) */
  /* dropped entries stay in `in`: a candidate once pushed out is not better later */
  while (b->n > keep) srch_cand_unref(b->v[--b->n].cand);
}

/* ---- one generation ----------------------------------------------------- */

typedef struct gen {
  srch_ctx_t *c;
  srch_task_state_t *ts;
  const pool_t *pop;
  double *cum; /* cumulative parent weights */
  double total;
  uint64_t base;
  srch_cand_t **child;           /* per slot: first successful mutation */
  smp_memo_t *memo;              /* what the mutators replayed, per parent */
  srch_cand_memo_t *made;        /* mutated traces made into candidates */
  int (*copies)[MAX_TRIES];      /* per slot: parents of the copy tries before it */
  int *ncopies, *last_parent;
} gen_t;

static int pick_parent(const gen_t *g, tn_rng_t *rng) {
  if (!(g->total > 0)) return (int)tn_rng_below(rng, (uint64_t)g->pop->n);
  double x = tn_rng_double(rng) * g->total;
  int lo = 0, hi = g->pop->n - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (g->cum[mid] > x) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

static void gen_slot(void *ctx, int slot) {
  gen_t *g = ctx;
  tn_rng_t rng;
  tn_rng_seed(&rng, srch_seed_for(g->base, (uint64_t)slot));
  for (int k = 0; k < MAX_TRIES && !srch_stopped(g->c); k++) {
    int p = pick_parent(g, &rng);
    g->last_parent[slot] = p;
    if (tn_rng_double(&rng) >= g->c->opts.mutate_prob) {
      g->copies[slot][g->ncopies[slot]++] = p;
      continue;
    }
    sch_trace_t *tr = NULL;
    if (smp_mutate(sch_get_trace(g->pop->v[p]->sch), g->ts->func, g->c->target, &rng, g->memo, &tr, NULL, NULL) < 0)
      continue;
    g->child[slot] = srch_cand_memo_make(g->made, g->ts->func, g->c->target, tr, tn_rng_next(&rng),
                                         g->pop->v[p]->space); /* a mutation keeps the trace's structure */
    sch_trace_free(tr);
    if (g->child[slot]) return;
  }
}

/* The next population: per slot a mutated child of a parent drawn by score,
 * or (probability 1 - mutate_prob) an unmutated copy of a parent not yet
 * copied in this generation, or, when every try failed, the last parent. */
static void next_generation(srch_ctx_t *c, srch_task_state_t *ts, pool_t *pop, smp_memo_t *memo,
                            srch_cand_memo_t *made) {
  int n = c->opts.population;
  gen_t g = {.c = c, .ts = ts, .pop = pop, .base = tn_rng_next(&ts->rng), .memo = memo, .made = made};
  g.cum = tn_xmalloc((size_t)pop->n * sizeof *g.cum);
  for (int i = 0; i < pop->n; i++) g.cum[i] = g.total += pop->v[i]->score;
  g.child = tn_xcalloc((size_t)n, sizeof *g.child);
  g.copies = tn_xcalloc((size_t)n, sizeof *g.copies);
  g.ncopies = tn_xcalloc((size_t)n, sizeof *g.ncopies);
  g.last_parent = tn_xcalloc((size_t)n, sizeof *g.last_parent);
  c->phase_s[SRCH_PHASE_MUTATION] += srch_parallel_for(c->nthreads, n, gen_slot, &g);
  bool *copied = tn_xcalloc((size_t)pop->n, sizeof *copied);
  pool_t next = {0};
  for (int s = 0; s < n; s++) {
    srch_cand_t *pick = NULL;
    for (int k = 0; k < g.ncopies[s] && !pick; k++)
      if (!copied[g.copies[s][k]]) copied[g.copies[s][k]] = true, pick = srch_cand_ref(pop->v[g.copies[s][k]]);
    if (pick) srch_cand_unref(g.child[s]);
    else pick = g.child[s] ? g.child[s] : srch_cand_ref(pop->v[g.last_parent[s]]);
    pool_push(&next, pick);
  }
  pool_free(pop);
  *pop = next;
  free(copied);
  free(g.cum);
  free(g.child);
  free(g.copies);
  free(g.ncopies);
  free(g.last_parent);
}

/* ---- the batch ---------------------------------------------------------- */

/* eps-greedy: the first want - int(want*eps) slots take the predicted best,
 * the rest random fresh samples; each falls back to the other list. */
/* Fills out[n0..want) (out[0..n0) are seeds, their hashes in taken). */
static int pick_batch(srch_task_state_t *ts, bests_t *b, pool_t *fresh, int want, double eps, srch_cand_t **out,
                      int n0, srch_hashset_t *taken) {
  for (int i = fresh->n - 1; i > 0; i--) { /* random order of the fresh samples */
    int j = (int)tn_rng_below(&ts->rng, (uint64_t)i + 1);
    srch_cand_t *t = fresh->v[i];
    fresh->v[i] = fresh->v[j], fresh->v[j] = t;
  }
  int num_rand = (int)(want * eps), n = n0, ib = 0, ir = 0;
  for (int i = n0; i < want; i++) {
    bool from_best = i < want - num_rand;
    srch_cand_t *pick = NULL;
    for (int pass = 0; pass < 2 && !pick; pass++, from_best = !from_best) {
      while (!pick && (from_best ? ib < b->n : ir < fresh->n)) {
        srch_cand_t *cd = from_best ? b->v[ib++].cand : fresh->v[ir++];
        if (!srch_hashset_has(&ts->seen, cd->hash) && srch_hashset_add(taken, cd->hash)) pick = cd;
      }
    }
    if (!pick) break;
    out[n++] = srch_cand_ref(pick);
  }
  return n;
}

/* cd when it is of space k, not measured and not yet in the batch (then it is). */
static srch_cand_t *take_of_space(const srch_task_state_t *ts, srch_cand_t *cd, int k, srch_hashset_t *taken) {
  return cd->space == k && !srch_hashset_has(&ts->seen, cd->hash) && srch_hashset_add(taken, cd->hash) ? cd : NULL;
}

/* The task's first batch while nothing of it is measured: the slots go to
 * the design spaces in turn (the one furthest below its quota, seeds
 * included, next), each taking its predicted best, then its fresh samples.
 * An untrained model knows nothing of kernels (a random score each), so the
 * mixed best-list is every generation's new candidates drawn by chance, and
 * the spaces differ in how many of their mutants are new and valid: on an
 * H100, a float16 GEMM's Hopper space (a few categorical decisions, mutants
 * the verify postprocessor often refuses) against its wmma one (many tile
 * factors) was 68 % of the population yet 44 % of the 32 picked, and 3 of
 * 12 on cuda-host/hopper at 128³, 0 of 3 at 64³.  Then every space gets the
 * same quota, as MetaSchedule's initial population samples them evenly, and
 * the model learns every kind of kernel.  A trained model (warm-started on
 * the target's other workloads' records, or trained on the run's earlier
 * tasks) has seen what such kernels measured: the spaces are ranked by their
 * best predicted candidate and the r-th gets a quota of 1/r, so that the
 * space of the micro-kernel that won every earlier convolution gets about
 * half a batch of 4 spaces while each other space keeps a few to learn
 * from.  Fills out[n0..want) as pick_batch does. */
static int pick_spread(srch_task_state_t *ts, const bests_t *b, const pool_t *fresh, int want, bool ranked,
                       srch_cand_t **out, int n0, srch_hashset_t *taken) {
  int ns = ts->space.n, n = n0;
  int *count = tn_xcalloc((size_t)ns, sizeof *count), *ib = tn_xcalloc((size_t)ns, sizeof *ib),
      *ir = tn_xcalloc((size_t)ns, sizeof *ir);
  double *quota = tn_xcalloc((size_t)ns, sizeof *quota);
  bool *dry = tn_xcalloc((size_t)ns, sizeof *dry);
  for (int s = 0; s < ns; s++) quota[s] = 1;
  if (ranked) { /* b is sorted best first: a space's first entry is its best; unlisted spaces rank last */
    int rank = 0;
    for (int s = 0; s < ns; s++) quota[s] = 0;
    for (int i = 0; i < b->n; i++) {
      int s = b->v[i].cand->space;
      if (s >= 0 && s < ns && quota[s] == 0) quota[s] = 1.0 / ++rank;
    }
    for (int s = 0; s < ns; s++)
      if (quota[s] == 0) quota[s] = 1.0 / (rank + 1);
  }
  for (int i = 0; i < n0; i++)
    if (out[i]->space >= 0 && out[i]->space < ns) count[out[i]->space]++;
  while (n < want) {
    int k = -1;
    for (int s = 0; s < ns; s++)
      if (!dry[s] && (k < 0 || count[s] / quota[s] < count[k] / quota[k])) k = s;
    if (k < 0) break;
    srch_cand_t *pick = NULL;
    while (!pick && ib[k] < b->n) pick = take_of_space(ts, b->v[ib[k]++].cand, k, taken);
    while (!pick && ir[k] < fresh->n) pick = take_of_space(ts, fresh->v[ir[k]++], k, taken);
    if (!pick) {
      dry[k] = true;
      continue;
    }
    out[n++] = srch_cand_ref(pick);
    count[k]++;
  }
  free(count), free(ib), free(ir), free(quota), free(dry);
  return n;
}

int srch_evolve_batch(srch_ctx_t *c, srch_task_state_t *ts, int want, srch_cand_t ***out, int *nout, tn_err_t *err) {
  pool_t pop = {0}, fresh = {0};
  bests_t b = {0};
  srch_hashset_init(&b.in);
  *out = tn_xcalloc((size_t)TN_MAX(want, 1), sizeof(srch_cand_t *));
  *nout = 0;
  srch_hashset_t taken;
  srch_hashset_init(&taken);
  /* before add_seeds marks the task seeded; with one space there is nothing to spread */
  bool spread = !ts->seeded && ts->nmeasured == 0 && ts->space.n > 1;
  int nseeds = add_seeds(c, ts, want, *out, &taken);
  add_measured(c, ts, &pop);
  add_fresh(c, ts, &pop, &fresh);
  int rc = 0;
  if (fresh.n > 0) {
    smp_memo_t *memo = smp_memo_new();
    srch_cand_memo_t made;
    srch_cand_memo_init(&made);
    bool stopped = false; /* meanwhile: no batch (the population was cut short) */
    for (int it = 0;; it++) {
      if ((stopped = srch_stopped(c))) break;
      if ((rc = predict(c, &pop, err)) < 0) break;
      bests_push(&b, ts, &pop, spread ? want * ts->space.n : want); /* spread: enough of each space */
      if (it == c->opts.genetic_iters) break;
      next_generation(c, ts, &pop, memo, &made);
    }
    srch_cand_memo_free(&made);
    smp_memo_free(memo);
    cm_model_stats_t st;
    cm_model_get_stats(c->model, &st);
    if (rc == 0 && !stopped)
      *nout = spread ? pick_spread(ts, &b, &fresh, want, st.trained_on > 0, *out, nseeds, &taken)
                     : pick_batch(ts, &b, &fresh, want, c->opts.eps_greedy, *out, nseeds, &taken);
  } else if (!srch_stopped(c)) {
    *nout = nseeds; /* nothing fresh: the seeds alone */
  }
  if (*nout == 0) /* no batch after all */
    for (int i = 0; i < nseeds; i++) srch_cand_unref((*out)[i]), (*out)[i] = NULL;
  srch_hashset_free(&taken);
  for (int i = 0; i < b.n; i++) srch_cand_unref(b.v[i].cand);
  free(b.v);
  srch_hashset_free(&b.in);
  pool_free(&pop);
  pool_free(&fresh);
  return rc;
}
