/* rules_reduction.c — rules for reductions with little spatial parallelism
 * (§3.5): CrossThreadReduction on GPUs (the reduction loop split by a sampled
 * thread count and its inner part bound to threadIdx.x) and AddRFactor on
 * CPUs (the reduction split in two and either part factored out). */
#include <string.h>

#include "smp_internal.h"

/* CrossThreadReduction's thread extents (§3.3 rule 5). */
static const int64_t xthread_extents[] = {4, 8, 16, 32, 64, 128, 256, 512};

/* Fuses the reduction loops of a block (after moving spatial loops outside,
 * TVM's ReorderAndFuseReductionLoops) into one; *nspatial gets the number
 * of spatial loops. */
static int fuse_reduction_loops(sch_t *s, sch_rv_t block, sch_rv_t *fused, int *nspatial, tn_err_t *err) {
  sch_rv_t loops[SMP_MAX_LOOPS], order[SMP_MAX_LOOPS], red[SMP_MAX_LOOPS];
  int nl = 0, no = 0, nr = 0;
  SMP_TRY(sch_get_loops(s, block, loops, &nl, err));
  bool reduce[SMP_MAX_LOOPS];
  for (int i = 0; i < nl; i++) reduce[i] = smp_loop_iter_type(&sch_rv_stmt(s, loops[i])->u.loop) == SMP_REDUCE;
  for (int pass = 0; pass < 2; pass++) /* spatial loops first, then reduction loops */
    for (int i = 0; i < nl; i++)
      if (reduce[i] == (pass == 1)) {
        order[no++] = loops[i];
        if (pass == 1) red[nr++] = loops[i];
      }
  bool moved = false;
  for (int i = 0; i < nl; i++) moved |= order[i] != loops[i];
  *nspatial = nl - nr;
  if (nr == 0) return tn_err_set(err, TN_EINVAL, "the block has no reduction loop");
  if (moved) SMP_TRY(sch_reorder(s, order, no, err));
  if (nr == 1) {
    *fused = red[0];
    return TN_OK;
  }
  return sch_fuse(s, red, nr, fused, err);
}

/* ---- CrossThreadReduction -------------------------------------------------- */

/* TVM also computes the block at its consumer when it can and moves its
 * output to shared memory (SetScope).  We have no SetScope primitive, and a
 * per-row result left in global memory would need a barrier between the
 * reducing thread and its readers; so the reduction keeps its own loop nest
 * (its own kernel), blockIdx over the rows, threads over the reduction.  The
 * rows are bound here rather than by AutoBind: when the sampled thread count
 * covers the whole reduction, the outer reduction loop has extent 1 and no
 * longer looks like a reduction loop, so AutoBind would fuse it with the rows
 * in some samples and not in others. */
static int bind_reduction(sch_t *s, const char *block, tn_err_t *err) {
  sch_rv_t b, t, fused, parts[2], loops[SMP_MAX_LOOPS];
  int nspatial = 0, nl = 0;
  double probs[TN_ARRAY_LEN(xthread_extents)];
  int n = (int)TN_ARRAY_LEN(xthread_extents);
  for (int i = 0; i < n; i++) probs[i] = 1.0 / n;
  SMP_TRY(sch_get_block(s, block, &b, err));
  SMP_TRY(sch_sample_categorical(s, xthread_extents, probs, n, &t, err));
  SMP_TRY(fuse_reduction_loops(s, b, &fused, &nspatial, err));
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_rv(t)};
  SMP_TRY(sch_split(s, fused, f, 2, parts, err));
  SMP_TRY(sch_bind(s, parts[1], "threadIdx.x", err));
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  SMP_TRY(sch_fuse(s, loops, nspatial, &fused, err));
  return sch_bind(s, fused, "blockIdx.x", err);
}

/* Spatial loops in front of the reduction (something to bind blockIdx to). */
static int count_spatial(const ir_func_t *f, const ir_block_t *b) {
  ir_loop_t *loops[SMP_MAX_LOOPS];
  int n = smp_block_loops(f, b, loops, SMP_MAX_LOOPS), k = 0;
  for (int i = 0; i < n; i++) k += smp_loop_iter_type(loops[i]) == SMP_DATA_PAR;
  return k;
}

int smp_rule_cross_thread_reduction(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                    tn_err_t *err) {
  const ir_func_t *f = sch_func(st->s);
  const ir_block_t *b = strcmp(block, "root") ? smp_block(f, block) : NULL;
  /* A reduction to a scalar has no loop for blockIdx (TVM adds a unit loop;
   * we have no add_unit_loop): it stays a serial reduction. */
  if (!b || c->t->max_threads_per_block <= 0 || c->t->warp_size <= 0 ||
      !smp_needs_rfactor_or_xthread(f, b, c->t->max_threads_per_block, c->t->warp_size) || count_spatial(f, b) == 0) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  smp_state_t x;
  int rc = smp_fork(c, st, &x, err);
  if (rc == TN_OK && (rc = bind_reduction(x.s, block, err)) < 0) smp_state_free(&x);
  if (rc < 0) {
    smp_state_free(st);
    return rc;
  }
  smp_note(&x, "cross-thread-reduction(%s)", block);
  smp_states_push(out, *st);
  smp_states_push(out, x);
  return TN_OK;
}

/* ---- AddRFactor ---------------------------------------------------------------- */

/* Splits the fused reduction loop of `block` in two (sampled) on st and
 * returns the pieces. */
/* SamplePerfectTile(loop, 2, 64) with, during generation, a decision that
 * leaves both pieces longer than 1 where the extent allows: rfactor refuses a
 * unit loop (the schedule drops unit loop variables from bindings), and the
 * variants a space keeps must not depend on the throw-away samples.  The
 * decision is dropped with the others when the space is simplified. */
static int sample_two_tiles(sch_t *s, sch_rv_t loop, sch_rv_t fac[2], tn_err_t *err) {
  int64_t extent = sch_rv_stmt(s, loop)->u.loop.extent, d = 0;
  for (int64_t k = TN_MIN(extent / 2, 64); k >= 2 && !d; k--)
    if (extent % k == 0) d = k;
  sch_arg_t in[1] = {sch_arg_rv(loop)}, attrs[2] = {sch_arg_int(2), sch_arg_int(64)};
  sch_inst_t inst = {.kind = SCH_SAMPLE_PERFECT_TILE, .inputs = in, .ninputs = 1, .attrs = attrs, .nattrs = 2};
  int64_t dec[2] = {d ? extent / d : 0, d};
  int nout = 0;
  return sch_apply(s, &inst, d ? dec : NULL, d ? 2 : 0, fac, &nout, err);
}

static int split_reduction(sch_t *s, const char *block, sch_rv_t *b, sch_rv_t pieces[2], int *nspatial,
                           tn_err_t *err) {
  sch_rv_t fused, fac[2];
  SMP_TRY(sch_get_block(s, block, b, err));
  SMP_TRY(fuse_reduction_loops(s, *b, &fused, nspatial, err));
  SMP_TRY(sample_two_tiles(s, fused, fac, err));
  sch_arg_t f[2] = {sch_arg_rv(fac[0]), sch_arg_rv(fac[1])};
  return sch_split(s, fused, f, 2, pieces, err);
}

/* One rfactor variant: a fork of the split state factored at `piece`; a
 * refusal (TVM catches it too) drops the variant. */
static int rfactor_variant(smp_ctx_t *c, const smp_state_t *split, const char *block, sch_rv_t b, sch_rv_t piece,
                           int k, int nspatial, smp_states_t *out, tn_err_t *err) {
  smp_state_t v;
  SMP_TRY(smp_fork(c, split, &v, err));
  sch_rv_t rf;
  tn_err_t refused = {0};
  if (sch_rfactor(v.s, piece, nspatial, &rf, &refused) < 0) {
    smp_state_free(&v);
    return TN_OK;
  }
  /* RandomComputeLocation then places the rfactor block too. */
  int rc = sch_annotate(v.s, b, SMP_ANN_RANDOM_COMPUTE_PRODUCER, sch_arg_int(1), err);
  if (rc < 0) {
    smp_state_free(&v);
    return rc;
  }
  smp_note(&v, "add-rfactor(%s at its %s reduction loop)", block, k == 0 ? "outer" : "inner");
  smp_states_push(out, v);
  return TN_OK;
}

int smp_rule_add_rfactor(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err) {
  const ir_func_t *f = sch_func(st->s);
  const ir_block_t *blk = strcmp(block, "root") ? smp_block(f, block) : NULL;
  int64_t cores = c->t->num_cores > 0 ? c->t->num_cores : 1;
  if (!blk || !smp_needs_rfactor_or_xthread(f, blk, cores * 16, cores)) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  smp_state_t split;
  sch_rv_t b, pieces[2];
  int nspatial = 0, rc = smp_fork(c, st, &split, err);
  if (rc == TN_OK) {
    rc = split_reduction(split.s, block, &b, pieces, &nspatial, err);
    for (int k = 0; k < 2 && rc == TN_OK; k++) rc = rfactor_variant(c, &split, block, b, pieces[k], k, nspatial, out, err);
    smp_state_free(&split);
  }
  if (rc < 0) {
    smp_state_free(st);
    return rc;
  }
  smp_states_push(out, *st);
  return TN_OK;
}
