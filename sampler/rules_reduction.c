/* rules_reduction.c — rules for reductions with little spatial parallelism
 * (§3.5): CrossThreadReduction on GPUs (the reduction loop split by a sampled
 * thread count and its inner part bound to threadIdx.x) and AddRFactor on
 * CPUs (the reduction split in two and either part factored out). */
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

/* CrossThreadReduction's thread extents (§3.3 rule 5). */
static const int64_t xthread_extents[] = {4, 8, 16, 32, 64, 128, 256, 512};

/* Fuses the reduction loops of a block (after moving spatial loops outside,
 * TVM's ReorderAndFuseReductionLoops) into one; *nspatial gets the number
 * of spatial loops. */
static int fuse_reduction_loops(sch_t *s, sch_rv_t block, sch_rv_t *fused, int *nspatial, tn_err_t *err) {
  sch_rv_t loops[SCH_MAX_RVS_OUT], order[SCH_MAX_RVS_OUT], red[SCH_MAX_RVS_OUT];
  int nl = 0, no = 0, nr = 0;
  SMP_TRY(sch_get_loops(s, block, loops, &nl, err));
  bool reduce[SCH_MAX_RVS_OUT];
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

/* Fuses the block's reduction loops, splits them by the thread count t and
 * binds the inner part to threadIdx.x; *nspatial gets the number of
 * spatial loops in front. */
static int bind_reduce_threads(sch_t *s, sch_rv_t b, sch_arg_t t, int *nspatial, tn_err_t *err) {
  sch_rv_t fused, parts[2];
  SMP_TRY(fuse_reduction_loops(s, b, &fused, nspatial, err));
  sch_arg_t f[2] = {sch_arg_none(), t};
  SMP_TRY(sch_split(s, fused, f, 2, parts, err));
  return sch_bind(s, parts[1], ir_thread_tag_name(IR_TAG_THREAD_X), err);
}

static int sample_thread_count(sch_t *s, sch_rv_t *t, tn_err_t *err) {
  double probs[TN_ARRAY_LEN(xthread_extents)];
  int n = (int)TN_ARRAY_LEN(xthread_extents);
  for (int i = 0; i < n; i++) probs[i] = 1.0 / n;
  return sch_sample_categorical(s, xthread_extents, probs, n, t, err);
}

/* The unfused form: the reduction keeps its own loop nest (its own kernel),
 * blockIdx over the rows, threads over the reduction.  The rows are bound
 * here rather than by AutoBind: when the sampled thread count covers the
 * whole reduction, the outer reduction loop has extent 1 and no longer looks
 * like a reduction loop, so AutoBind would fuse it with the rows in some
 * samples and not in others. */
static int bind_reduction(sch_t *s, const char *block, tn_err_t *err) {
  sch_rv_t b, t, fused, loops[SCH_MAX_RVS_OUT];
  int nspatial = 0, nl = 0;
  SMP_TRY(sch_get_block(s, block, &b, err));
  SMP_TRY(sample_thread_count(s, &t, err));
  SMP_TRY(bind_reduce_threads(s, b, sch_arg_rv(t), &nspatial, err));
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  SMP_TRY(sch_fuse(s, loops, nspatial, &fused, err));
  return sch_bind(s, fused, ir_thread_tag_name(IR_TAG_BLOCK_X), err);
}

/* The fused form (TVM's, when the block is fusible): the reduction is
 * computed at its consumers' row loop, inside their kernel, with the same
 * thread count; its per-row result stays in its (global) buffer, ordered
 * by the barrier the code generator puts between the reducing thread's
 * store and the readers.  (TVM also moves that result to shared memory with
 * SetScope, which we do not have; it is one element per row.)  Two shapes
 * of consumer qualify:
 *  - one consumer not yet bound, a nest of two or more serial data-parallel
 *    loops: its innermost loop is split by a new thread count and the inner
 *    part bound to threadIdx.x; the target is the loop above it;
 *  - consumers that an earlier fusion put under one row loop: the target is
 *    that loop, the thread count the one sampled there (the same random
 *    variable, so that the kernel's threadIdx.x loops agree under mutation). */
typedef struct fusion {
  sch_rv_t target;  /* loop to compute the block at */
  sch_rv_t split;   /* new form: the consumer's innermost loop, to split by a new t */
  sch_arg_t t;      /* existing form: the thread count of the kernel */
  bool found;
} fusion_t;

static bool serial_spatial(const ir_stmt_t *l) {
  return l && l->kind == IR_S_LOOP && l->u.loop.kind == IR_LOOP_SERIAL && l->u.loop.nannots == 0 &&
         smp_loop_iter_type(&l->u.loop) == SMP_DATA_PAR;
}

static bool child_of(const ir_stmt_t *parent, const ir_stmt_t *kid) {
  const ir_stmt_t *body = parent->u.loop.body;
  if (body == kid) return true;
  if (body && body->kind == IR_S_SEQ)
    for (int i = 0; i < body->u.seq.n; i++)
      if (body->u.seq.items[i] == kid) return true;
  return false;
}

/* An earlier fusion's Split whose inner loop is bound to threadIdx.x and
 * whose outer loop is a child of `parent`: its thread-count variable. */
static bool fused_thread_count(const sch_t *s, const ir_stmt_t *parent, sch_arg_t *t) {
  const sch_trace_t *tr = sch_get_trace(s);
  for (int i = tr->n - 1; i >= 0; i--) {
    const sch_inst_t *in = &tr->insts[i];
    if (in->kind != SCH_SPLIT || in->ninputs != 3 || in->noutputs != 2 || in->inputs[2].kind != SCH_ARG_RV) continue;
    const ir_stmt_t *outer = sch_rv_stmt(s, in->outputs[0]), *inner = sch_rv_stmt(s, in->outputs[1]);
    if (!outer || !inner || inner->kind != IR_S_LOOP || inner->u.loop.kind != IR_LOOP_THREAD ||
        inner->u.loop.tag != IR_TAG_THREAD_X || !child_of(parent, outer))
      continue;
    *t = in->inputs[2];
    return true;
  }
  return false;
}

static int fusion_target(sch_t *s, sch_rv_t b, fusion_t *fu, tn_err_t *err) {
  sch_rv_t cons[SCH_MAX_RVS_OUT], loops[SCH_MAX_RVS_OUT];
  const ir_stmt_t *common[SCH_MAX_RVS_OUT];
  sch_rv_t common_rv[SCH_MAX_RVS_OUT];
  int nc = 0, ncommon = -1;
  fu->found = false;
  SMP_TRY(sch_get_consumers(s, b, cons, &nc, err));
  if (nc == 0) return TN_OK;
  for (int i = 0; i < nc; i++) {
    int nl = 0;
    SMP_TRY(sch_get_loops(s, cons[i], loops, &nl, err));
    if (ncommon < 0) {
      for (int k = 0; k < nl; k++) common[k] = sch_rv_stmt(s, common_rv[k] = loops[k]);
      ncommon = nl;
    }
    int k = 0;
    while (k < ncommon && k < nl && sch_rv_stmt(s, loops[k]) == common[k]) k++;
    ncommon = k;
  }
  /* the deepest common serial data-parallel loop with an earlier fusion's
   * threads under it */
  for (int k = 0; k < ncommon && serial_spatial(common[k]); k++)
    if (fused_thread_count(s, common[k], &fu->t)) {
      fu->target = common_rv[k];
      fu->split = -1;
      fu->found = true;
    }
  if (fu->found || nc != 1) return TN_OK;
  const ir_block_t *cb = &sch_rv_stmt(s, cons[0])->u.block;
  if (ncommon < 2 || !smp_block_is_spatial(cb) || smp_is_tiled(cb)) return TN_OK;
  for (int k = 0; k < ncommon; k++)
    if (!serial_spatial(common[k]) || (k + 1 < ncommon && !smp_single_child(&common[k]->u.loop))) return TN_OK;
  fu->target = common_rv[ncommon - 2];
  fu->split = common_rv[ncommon - 1];
  fu->found = true;
  return TN_OK;
}

static int fuse_reduction(sch_t *s, sch_rv_t b, const fusion_t *fu, tn_err_t *err) {
  sch_arg_t t = fu->t;
  if (fu->split >= 0) {
    sch_rv_t v, parts[2];
    SMP_TRY(sample_thread_count(s, &v, err));
    t = sch_arg_rv(v);
    sch_arg_t f[2] = {sch_arg_none(), t};
    SMP_TRY(sch_split(s, fu->split, f, 2, parts, err));
    SMP_TRY(sch_bind(s, parts[1], ir_thread_tag_name(IR_TAG_THREAD_X), err));
  }
  SMP_TRY(sch_compute_at(s, b, fu->target, true, err));
  int nspatial;
  return bind_reduce_threads(s, b, t, &nspatial, err);
}

/* The bound variant: fused where the consumers allow, else unfused. */
static int cross_thread(sch_t *s, const char *block, bool *fused, tn_err_t *err) {
  sch_rv_t b;
  fusion_t fu;
  SMP_TRY(sch_get_block(s, block, &b, err));
  SMP_TRY(fusion_target(s, b, &fu, err));
  *fused = fu.found;
  return fu.found ? fuse_reduction(s, b, &fu, err) : bind_reduction(s, block, err);
}

/* Spatial loops in front of the reduction (something to bind blockIdx to). */
static int count_spatial(const ir_func_t *f, const ir_block_t *b) {
  ir_loop_t **loops;
  int n = smp_block_loops(f, b, &loops), k = 0;
  for (int i = 0; i < n; i++) k += smp_loop_iter_type(loops[i]) == SMP_DATA_PAR;
  free(loops);
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
  bool fused = false;
  int rc = smp_fork(c, st, &x, err);
  if (rc == TN_OK && (rc = cross_thread(x.s, block, &fused, err)) < 0) smp_state_free(&x);
  if (rc < 0) {
    smp_state_free(st);
    return rc;
  }
  smp_note(&x, "cross-thread-reduction(%s%s)", block, fused ? ", fused into its consumers" : "");
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
