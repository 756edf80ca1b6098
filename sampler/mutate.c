/* mutate.c — the mutators (§5): each returns a copy of a candidate's trace,
 * cut at its EnterPostproc, with one decision changed (tile factors moved
 * between levels, a categorical resampled, another compute location) or,
 * for mutate-parallel, the parallel extent annotated on the root changed
 * (0: no parallel loop at all). */
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

static const char *const mutator_names[SMP_MUT__COUNT] = {
    [SMP_MUT_TILE_SIZE] = "mutate-tile-size",
    [SMP_MUT_UNROLL] = "mutate-unroll",
    [SMP_MUT_THREAD_BINDING] = "mutate-thread-binding",
    [SMP_MUT_COMPUTE_LOCATION] = "mutate-compute-location",
    [SMP_MUT_PARALLEL] = "mutate-parallel",
};

const char *smp_mutator_name(smp_mutator_t m) { return (unsigned)m < SMP_MUT__COUNT ? mutator_names[m] : "?"; }

int smp_mutators(const tn_target_t *t, smp_mutator_t *kinds, double *probs) {
  static const smp_mutator_t gk[] = {SMP_MUT_TILE_SIZE, SMP_MUT_UNROLL, SMP_MUT_THREAD_BINDING};
  static const double gp[] = {0.90, 0.08, 0.02};
  static const smp_mutator_t ck[] = {SMP_MUT_TILE_SIZE, SMP_MUT_COMPUTE_LOCATION, SMP_MUT_UNROLL, SMP_MUT_PARALLEL};
  static const double cp[] = {0.90, 0.05, 0.03, 0.02};
  bool gpu = t->kind != TN_TARGET_CPU;
  int n = gpu ? 3 : 4;
  memcpy(kinds, gpu ? gk : ck, sizeof *kinds * (size_t)n);
  memcpy(probs, gpu ? gp : cp, sizeof *probs * (size_t)n);
  return n;
}

/* ---- trace helpers ------------------------------------------------------- */

/* Index of the EnterPostproc marker, or the trace length. */
static int postproc_start(const sch_trace_t *t) {
  for (int i = 0; i < t->n; i++)
    if (t->insts[i].kind == SCH_ENTER_POSTPROC) return i;
  return t->n;
}

/* A copy of the first n instructions (decisions included). */
static sch_trace_t *prefix_copy(const sch_trace_t *t, int n) {
  sch_trace_t *c = sch_trace_new();
  for (int i = 0; i < n; i++) sch_trace_append(c, &t->insts[i]);
  return c;
}

/* The instruction before `end` that defines handle rv, or -1. */
static int producer_of(const sch_trace_t *t, int end, sch_rv_t rv) {
  for (int i = end - 1; i >= 0; i--)
    for (int j = 0; j < t->insts[i].noutputs; j++)
      if (t->insts[i].outputs[j] == rv) return i;
  return -1;
}

static bool is_annotate(const sch_inst_t *in, const char *key) {
  return in->kind == SCH_ANNOTATE && in->nattrs == 1 && in->attrs[0].kind == SCH_ARG_STR &&
         strcmp(in->attrs[0].s, key) == 0 && in->ninputs == 2;
}

/* A categorical with a decision and more than one choice. */
static bool mutable_categorical(const sch_inst_t *in) {
  return in->kind == SCH_SAMPLE_CATEGORICAL && in->ndecision == 1 && in->nattrs == 2 && in->attrs[0].n > 1;
}

/* The categorical that produced the value of an Annotate, or -1. */
static int annotate_source(const sch_trace_t *t, int i) {
  const sch_arg_t *v = &t->insts[i].inputs[1];
  if (v->kind != SCH_ARG_RV) return -1;
  int p = producer_of(t, i, v->rv);
  return p >= 0 && mutable_categorical(&t->insts[p]) ? p : -1;
}

/* A list of instruction indices that grows. */
typedef struct ilist {
  int *v;
  int n, cap;
} ilist_t;

static void ilist_push(ilist_t *l, int v) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = tn_xrealloc(l->v, sizeof *l->v * (size_t)l->cap);
  }
  l->v[l->n++] = v;
}

static void add_unique(ilist_t *l, int v) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == v) return;
  ilist_push(l, v);
}

/* Resamples the categorical instruction `i` of copy c, excluding its current
 * choice, proportionally to the remaining probabilities. */
static int resample_categorical(sch_trace_t *c, int i, tn_rng_t *rng) {
  sch_inst_t *in = &c->insts[i];
  int n = in->attrs[1].n, cur = (int)in->decision[0];
  double probs[SCH_MAX_RVS_OUT], total = 0;
  for (int k = 0; k < n; k++) {
    const sch_arg_t *p = &in->attrs[1].items[k];
    probs[k] = k == cur ? 0 : p->kind == SCH_ARG_FLOAT ? p->f : p->kind == SCH_ARG_INT ? (double)p->i : 0;
    total += probs[k];
  }
  if (!(total > 0)) return TN_ESTATE;
  double x = tn_rng_double(rng) * total, acc = 0;
  int pick = cur;
  for (int k = 0; k < n && pick == cur; k++)
    if (probs[k] > 0 && x < (acc += probs[k])) pick = k;
  if (pick == cur) /* rounding at the end of the range */
    for (int k = n - 1; k >= 0 && pick == cur; k--)
      if (probs[k] > 0) pick = k;
  in->decision[0] = pick;
  return TN_OK;
}

/* ---- mutate-tile-size ---------------------------------------------------- */

static bool mutable_tile(const sch_inst_t *in) {
  if (in->kind != SCH_SAMPLE_PERFECT_TILE || in->ndecision < 2) return false;
  int64_t prod = 1;
  for (int k = 0; k < in->ndecision; k++) prod *= in->decision[k];
  return prod >= 2;
}

/* The divisors of v in ascending order, at most max of them.  Pairs up to
 * sqrt(v): a loop of extent 2^30 costs 32768 divisions, not 2^30 (a huge
 * extent made every mutation take seconds and the search unresponsive). */
static int divisors(int64_t v, int64_t *out, int max) {
  int n = 0, nhigh = 0;
  int64_t high[1024]; /* the partners v / d above sqrt(v), descending */
  for (int64_t d = 1; d <= v / d && n < max; d++) {
    if (v % d) continue;
    out[n++] = d;
    if (d != v / d && nhigh < (int)TN_ARRAY_LEN(high)) high[nhigh++] = v / d;
  }
  for (int i = nhigh - 1; i >= 0 && n < max; i--) out[n++] = high[i];
  return n;
}

/* Moves a divisor of one factor to another (TVM's MutateSampleTileSize);
 * the innermost factor stays within max_innermost_factor. */
static int move_factor(sch_inst_t *in, tn_rng_t *rng) {
  int n = in->ndecision;
  int64_t *tiles = in->decision, limit = in->nattrs > 1 && in->attrs[1].kind == SCH_ARG_INT ? in->attrs[1].i : -1;
  for (int tries = 0; tries < 256; tries++) {
    int x = (int)tn_rng_below(rng, (uint64_t)n);
    if (tiles[x] <= 1) continue;
    int y = (int)tn_rng_below(rng, (uint64_t)(n - 1));
    if (y >= x) y++;
    int64_t fac[1024];
    int nf = divisors(tiles[x], fac, 1024), top = nf - 1;
    if (y == n - 1 && limit > 0) {
      while (top >= 1 && fac[top] * tiles[y] > limit) top--;
      if (top == 0) {
        if (n <= 2) return TN_ESTATE;
        continue;
      }
    }
    if (top < 1) continue;
    int64_t d = fac[1 + tn_rng_below(rng, (uint64_t)top)];
    tiles[x] /= d;
    tiles[y] *= d;
    return TN_OK;
  }
  return TN_ESTATE;
}

static int mutate_tile_size(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                            smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  (void)f, (void)tg, (void)memo, (void)err;
  int end = postproc_start(t);
  ilist_t cands = {0};
  for (int i = 0; i < end; i++) {
    if (mutable_tile(&t->insts[i])) ilist_push(&cands, i);
    int src;
    if (is_annotate(&t->insts[i], SMP_ANN_COOP_FETCH) && (src = annotate_source(t, i)) >= 0) add_unique(&cands, src);
  }
  int pick = cands.n ? cands.v[tn_rng_below(rng, (uint64_t)cands.n)] : -1;
  free(cands.v);
  if (pick < 0) return TN_ESTATE;
  sch_trace_t *c = prefix_copy(t, end);
  int rc = c->insts[pick].kind == SCH_SAMPLE_PERFECT_TILE ? move_factor(&c->insts[pick], rng)
                                                           : resample_categorical(c, pick, rng);
  if (rc < 0) {
    sch_trace_free(c);
    return rc;
  }
  *out = c;
  return TN_OK;
}

/* ---- mutate-unroll / mutate-thread-binding ---------------------------------- */

/* Picks one of the candidate categoricals (and frees the list) and resamples it. */
static int resample_one(const sch_trace_t *t, int end, ilist_t *cands, tn_rng_t *rng, sch_trace_t **out) {
  int pick = cands->n ? cands->v[tn_rng_below(rng, (uint64_t)cands->n)] : -1;
  free(cands->v);
  if (pick < 0) return TN_ESTATE;
  sch_trace_t *c = prefix_copy(t, end);
  int rc = resample_categorical(c, pick, rng);
  if (rc < 0) {
    sch_trace_free(c);
    return rc;
  }
  *out = c;
  return TN_OK;
}

static int mutate_unroll(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                         smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  (void)f, (void)tg, (void)memo, (void)err;
  int end = postproc_start(t), src;
  ilist_t cands = {0};
  for (int i = 0; i < end; i++)
    if ((is_annotate(&t->insts[i], SMP_ANN_UNROLL_EXPLICIT) || is_annotate(&t->insts[i], SMP_ANN_UNROLL_IMPLICIT)) &&
        (src = annotate_source(t, i)) >= 0)
      add_unique(&cands, src);
  return resample_one(t, end, &cands, rng, out);
}

/* SampleCategorical -> Split [loop, None, v] -> Bind(inner, threadIdx.x):
 * the thread extents of auto-bind and cross-thread reduction. */
static int mutate_thread_binding(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                                 smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  (void)f, (void)tg, (void)memo, (void)err;
  int end = postproc_start(t);
  ilist_t cands = {0};
  for (int i = 0; i < end; i++) {
    const sch_inst_t *b = &t->insts[i];
    if (!smp_binds_to(b, IR_TAG_THREAD_X) || b->nattrs != 1) continue;
    int s = producer_of(t, i, b->inputs[0].rv);
    if (s < 0) continue;
    const sch_inst_t *sp = &t->insts[s];
    if (sp->kind != SCH_SPLIT || sp->ninputs != 3 || sp->inputs[1].kind != SCH_ARG_NONE ||
        sp->inputs[2].kind != SCH_ARG_RV || sp->noutputs != 2 || sp->outputs[1] != b->inputs[0].rv)
      continue;
    int c = producer_of(t, s, sp->inputs[2].rv);
    if (c >= 0 && mutable_categorical(&t->insts[c])) add_unique(&cands, c);
  }
  return resample_one(t, end, &cands, rng, out);
}

/* ---- mutate-compute-location --------------------------------------------- */

/* The decision instruction i records when replayed (with the trace's own
 * earlier decisions) with decision `want`: replay repairs an invalid one. */
static int replayed_decision(const sch_trace_t *t, const ir_func_t *f, int i, int64_t want, int64_t *got,
                             tn_err_t *err) {
  sch_trace_t *p = prefix_copy(t, i + 1);
  int64_t **decs = tn_xcalloc((size_t)i + 1, sizeof *decs);
  int *ndecs = tn_xcalloc((size_t)i + 1, sizeof *ndecs);
  decs[i] = &want;
  ndecs[i] = 1;
  sch_t *s = NULL;
  int rc = sch_replay_with(f, p, 1, decs, ndecs, true, &s, err);
  if (rc == TN_OK) {
    const sch_trace_t *r = sch_get_trace(s);
    *got = r->insts[r->n - 1].decision[0];
    sch_free(s);
  }
  free(decs), free(ndecs);
  sch_trace_free(p);
  return rc;
}

/* Memo keys: what a replay of the trace's first n instructions gave, for
 * one question (tag) about instruction i. */
enum { MEMO_LOCATIONS = 1, MEMO_PARALLEL = 2 };
static uint64_t memo_key(const sch_trace_t *t, int n, int tag, int i) {
  return tn_fnv1a_u64(tn_fnv1a_u64(sch_trace_hash(t, n), (uint64_t)tag), (uint64_t)i);
}

/* The valid decisions of SampleComputeLocation i other than its current
 * one, as {count, decisions...} (malloc'ed, or kept by the memo). */
static int location_alternatives(const sch_trace_t *t, const ir_func_t *f, int i, smp_memo_t *memo,
                                 const int64_t **out, tn_err_t *err) {
  uint64_t key = memo ? memo_key(t, i + 1, MEMO_LOCATIONS, i) : 0;
  if ((*out = smp_memo_get(memo, key))) return TN_OK;
  int64_t inl = 0, last = 0, cur = t->insts[i].decision[0];
  SMP_TRY(replayed_decision(t, f, i, -2, &inl, err));
  SMP_TRY(replayed_decision(t, f, i, INT32_MAX, &last, err));
  int64_t first = inl == -2 ? -2 : -1, *alts = tn_xmalloc(sizeof *alts * (size_t)(last - first + 2)), n = 0;
  for (int64_t d = first; d <= last; d++)
    if (d != cur) alts[1 + n++] = d;
  alts[0] = n;
  *out = smp_memo_put(memo, key, alts);
  return TN_OK;
}

/* TVM picks uniformly among the samplers that have another valid location,
 * after replaying the trace for every one of them; the first of them in a
 * random order is the same draw, and usually replays one. */
static int mutate_compute_location(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                                   smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  (void)tg;
  int end = postproc_start(t), rc = TN_ESTATE;
  ilist_t insts = {0};
  for (int i = 0; i < end; i++)
    if (t->insts[i].kind == SCH_SAMPLE_COMPUTE_LOCATION && t->insts[i].ndecision == 1) ilist_push(&insts, i);
  for (int left = insts.n; left > 0 && rc == TN_ESTATE; left--) {
    int k = (int)tn_rng_below(rng, (uint64_t)left), i = insts.v[k];
    insts.v[k] = insts.v[left - 1];
    const int64_t *alts = NULL;
    if ((rc = location_alternatives(t, f, i, memo, &alts, err)) < 0) break;
    rc = TN_ESTATE;
    if (alts[0] > 0) {
      sch_trace_t *c = prefix_copy(t, end);
      c->insts[i].decision[0] = alts[1 + tn_rng_below(rng, (uint64_t)alts[0])];
      *out = c;
      rc = TN_OK;
    }
    if (!memo) free((void *)alts);
  }
  free(insts.v);
  return rc;
}

/* ---- mutate-parallel ------------------------------------------------------- */

/* Per block: the products of its leading spatial loop extents, outermost
 * first, up to the first one >= limit (TVM's AnalyzeParallel). */
typedef struct prods {
  int64_t **v; /* a malloc'ed row per block with such loops */
  int *n;
  int nblocks, cap;
} prods_t;

/* The loops on the way down from the closest block, with their iterator
 * types found when first asked (a loop's type walks its body once). */
typedef struct loop_stack {
  ir_loop_t **loops;
  int *type; /* smp_iter_type_t, -1: not known yet */
  int n, cap;
} loop_stack_t;

static void block_row(prods_t *p, loop_stack_t *st, int base, int64_t limit) {
  int lead = 0;
  for (int k = base; k < st->n; k++) {
    if (st->type[k] < 0) st->type[k] = (int)smp_loop_iter_type(st->loops[k]);
    if (st->type[k] != SMP_DATA_PAR) break;
    lead++;
  }
  if (lead == 0) return;
  if (p->nblocks == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 16;
    p->v = tn_xrealloc(p->v, sizeof *p->v * (size_t)p->cap);
    p->n = tn_xrealloc(p->n, sizeof *p->n * (size_t)p->cap);
  }
  int64_t prod = 1, *row = p->v[p->nblocks] = tn_xmalloc(sizeof *row * (size_t)lead);
  int n = 0;
  for (int k = 0; k < lead; k++) {
    row[n++] = prod *= st->loops[base + k]->extent;
    if (prod >= limit) break;
  }
  p->n[p->nblocks++] = n;
}

/* One walk of the tree: every block (the root aside) with the loops between
 * it and its closest enclosing block. */
static void analyze_rec(const ir_stmt_t *s, loop_stack_t *st, int base, bool root, int64_t limit, prods_t *p) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) analyze_rec(s->u.seq.items[i], st, base, false, limit, p);
    break;
  case IR_S_LOOP:
    if (st->n == st->cap) {
      st->cap = st->cap ? 2 * st->cap : 16;
      st->loops = tn_xrealloc(st->loops, sizeof *st->loops * (size_t)st->cap);
      st->type = tn_xrealloc(st->type, sizeof *st->type * (size_t)st->cap);
    }
    st->loops[st->n] = (ir_loop_t *)&s->u.loop, st->type[st->n++] = -1;
    analyze_rec(s->u.loop.body, st, base, false, limit, p);
    st->n--;
    break;
  case IR_S_BLOCK:
    if (!root) block_row(p, st, base, limit);
    analyze_rec(s->u.block.body, st, st->n, false, limit, p);
    break;
  default: break;
  }
}

static void analyze_parallel(const ir_func_t *f, int64_t limit, prods_t *p) {
  loop_stack_t st = {0};
  *p = (prods_t){0};
  analyze_rec(f->root, &st, 0, true, limit, p);
  free(st.loops), free(st.type);
}

static void prods_free(prods_t *p) {
  for (int b = 0; b < p->nblocks; b++) free(p->v[b]);
  free(p->v), free(p->n);
}

/* How many loops each block fuses under a parallel extent (TVM's
 * GetNumFusedLoops): the prefix up to the first product above it. */
static void fused_loops(const prods_t *p, int64_t limit, int *plan) {
  for (int b = 0; b < p->nblocks; b++) {
    int n = p->n[b], i = 0;
    while (i < n && p->v[b][i] <= limit) i++;
    if (i > 0 && p->v[b][i - 1] == limit) i--;
    if (i != n) i++;
    plan[b] = i;
  }
}

static bool same_plan(const int *a, const int *b, int n) { return memcmp(a, b, sizeof *a * (size_t)n) == 0; }

/* The parallel extents mutate-parallel may move to from cur, as {count,
 * extents...} (malloc'ed): one per distinct fusion plan of the blocks other
 * than the current one, and 0 (no parallel loop) or back to max_extent. */
static int64_t *parallel_choices(const ir_func_t *scheduled, int64_t cur, int64_t max_extent) {
  prods_t p;
  analyze_parallel(scheduled, max_extent, &p);
  int nbk = p.nblocks + 1, np = 0, cap = 8, *orig = tn_xcalloc((size_t)nbk, sizeof *orig);
  int *plans = tn_xmalloc(sizeof *plans * (size_t)cap * (size_t)nbk);
  int64_t *out = tn_xmalloc(sizeof *out * (size_t)(cap + 2));
  if (cur > 0) fused_loops(&p, cur, orig); /* else all 0: no parallel loop at all */
  for (int b = 0; b < p.nblocks; b++)
    for (int k = 0; k < p.n[b]; k++) {
      int64_t lim = p.v[b][k];
      if (np == cap) {
        cap *= 2;
        plans = tn_xrealloc(plans, sizeof *plans * (size_t)cap * (size_t)nbk);
        out = tn_xrealloc(out, sizeof *out * (size_t)(cap + 2));
      }
      bool dup = lim > max_extent;
      fused_loops(&p, lim, plans + np * nbk);
      for (int q = 0; q < np && !dup; q++) dup = same_plan(plans + q * nbk, plans + np * nbk, p.nblocks);
      if (!dup && !same_plan(plans + np * nbk, orig, p.nblocks)) out[1 + np++] = lim;
    }
  /* Beyond TVM: 0 (no parallel loop) for kernels too small to pay for an
   * OpenMP region, and back. */
  out[1 + np++] = cur > 0 ? 0 : max_extent;
  out[0] = np;
  prods_free(&p);
  free(plans), free(orig);
  return out;
}

static int mutate_parallel(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                           smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  int end = postproc_start(t), at = -1;
  for (int i = 0; i < end && at < 0; i++)
    if (is_annotate(&t->insts[i], SMP_ANN_PARALLEL) && t->insts[i].inputs[1].kind == SCH_ARG_INT) at = i;
  if (at < 0) return TN_ESTATE;
  int64_t cores = tg->num_cores > 0 ? tg->num_cores : 1, max_extent = cores * 16, cur = t->insts[at].inputs[1].i;
  uint64_t key = memo ? tn_fnv1a_u64(memo_key(t, end, MEMO_PARALLEL, at), (uint64_t)max_extent) : 0;
  int64_t *choices = smp_memo_get(memo, key);
  if (!choices) {
    sch_t *s = NULL;
    SMP_TRY(sch_replay_with(f, t, 1, NULL, NULL, true, &s, err));
    choices = smp_memo_put(memo, key, parallel_choices(sch_func(s), cur, max_extent));
    sch_free(s);
  }
  sch_trace_t *c = prefix_copy(t, end);
  c->insts[at].inputs[1].i = choices[1 + tn_rng_below(rng, (uint64_t)choices[0])];
  if (!memo) free(choices);
  *out = c;
  return TN_OK;
}

/* ---- dispatch ------------------------------------------------------------------ */

typedef int (*mutate_fn)(const sch_trace_t *t, const ir_func_t *f, const tn_target_t *tg, tn_rng_t *rng,
                         smp_memo_t *memo, sch_trace_t **out, tn_err_t *err);

static const mutate_fn mutate_fns[SMP_MUT__COUNT] = {
    [SMP_MUT_TILE_SIZE] = mutate_tile_size,
    [SMP_MUT_UNROLL] = mutate_unroll,
    [SMP_MUT_THREAD_BINDING] = mutate_thread_binding,
    [SMP_MUT_COMPUTE_LOCATION] = mutate_compute_location,
    [SMP_MUT_PARALLEL] = mutate_parallel,
};

int smp_mutate_with(smp_mutator_t m, const sch_trace_t *trace, const ir_func_t *f, const tn_target_t *t,
                    tn_rng_t *rng, smp_memo_t *memo, sch_trace_t **out, tn_err_t *err) {
  *out = NULL;
  if ((unsigned)m >= SMP_MUT__COUNT) return tn_err_set(err, TN_EINVAL, "unknown mutator %d", (int)m);
  int rc = mutate_fns[m](trace, f, t, rng, memo, out, err);
  if (rc == TN_ESTATE) tn_err_set(err, TN_ESTATE, "%s does not apply to this trace", smp_mutator_name(m));
  return rc;
}

/* TVM draws one mutator and counts a failure when it does not apply; we
 * draw again among the others, so a trace without (say) an unroll sampler
 * still mutates whenever any mutator can. */
int smp_mutate(const sch_trace_t *trace, const ir_func_t *f, const tn_target_t *t, tn_rng_t *rng, smp_memo_t *memo,
               sch_trace_t **out, smp_mutator_t *used, tn_err_t *err) {
  smp_mutator_t kinds[SMP_MUT__COUNT];
  double probs[SMP_MUT__COUNT];
  int n = smp_mutators(t, kinds, probs);
  *out = NULL;
  while (n > 0) {
    double total = 0, x, acc = 0;
    for (int i = 0; i < n; i++) total += probs[i];
    x = tn_rng_double(rng) * total;
    int k = n - 1;
    for (int i = 0; i < n; i++)
      if (x < (acc += probs[i])) {
        k = i;
        break;
      }
    int rc = smp_mutate_with(kinds[k], trace, f, t, rng, memo, out, err);
    if (rc != TN_ESTATE) {
      if (rc == TN_OK && used) *used = kinds[k];
      return rc;
    }
    kinds[k] = kinds[n - 1], probs[k] = probs[n - 1];
    n--;
  }
  return tn_err_set(err, TN_ESTATE, "no mutator applies to this trace");
}
