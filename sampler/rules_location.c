/* rules_location.c — RandomComputeLocation (§3.5, CPU): a producer block that
 * owns its loop nest samples where it is computed (inline, root, or one of
 * its consumer's loops), and so does the rfactor block that AddRFactor
 * marked on its consumer. */
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

/* Blocks under the loop (not descending into nested scopes). */
static bool count_visit(ir_stmt_t *s, void *p) {
  if (s->kind == IR_S_BLOCK) ++*(int *)p;
  return s->kind != IR_S_BLOCK && s->kind != IR_S_STORE;
}

static int blocks_under(const ir_loop_t *l) {
  int n = 0;
  ir_stmt_walk(l->body, count_visit, &n);
  return n;
}

/* Cond 1-6 of TVM's RandomComputeLocation: not the root, a direct child of
 * the root scope (every block is, in our IR), at least one loop whose
 * outermost loop holds only this block, not tiled, and has a consumer. */
static bool eligible(const ir_func_t *f, const ir_block_t *b) {
  ir_loop_t **loops;
  ir_block_t *cons[1];
  int n = smp_block_loops(f, b, &loops);
  bool alone = n > 0 && blocks_under(loops[0]) <= 1;
  free(loops);
  return alone && !smp_is_tiled(b) && ir_consumers(f, b, cons, 1) > 0;
}

static int compute_at_sampled(sch_t *s, sch_rv_t b, tn_err_t *err) {
  sch_rv_t loc;
  SMP_TRY(sch_sample_compute_location(s, b, &loc, err));
  return sch_compute_at(s, b, loc, true, err);
}

static int apply(smp_state_t *st, const char *block, tn_err_t *err) {
  sch_t *s = st->s;
  const ir_block_t *blk = smp_block(sch_func(s), block);
  bool producer_too = ir_annot_get(blk->annots, blk->nannots, SMP_ANN_RANDOM_COMPUTE_PRODUCER) != NULL;
  sch_rv_t b, prods[SCH_MAX_RVS_OUT];
  int np = 0;
  SMP_TRY(sch_get_block(s, block, &b, err));
  /* The producer is looked up first: the block may be inlined below. */
  if (producer_too) {
    SMP_TRY(sch_get_producers(s, b, prods, &np, err));
    if (np != 1)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" is marked for its producer's compute location but has %d "
                        "producers", block, np);
    SMP_TRY(sch_unannotate(s, b, SMP_ANN_RANDOM_COMPUTE_PRODUCER, err));
  }
  SMP_TRY(compute_at_sampled(s, b, err));
  if (producer_too) SMP_TRY(compute_at_sampled(s, prods[0], err));
  smp_note(st, "random-compute-location(%s%s)", block, producer_too ? " and its producer" : "");
  return TN_OK;
}

int smp_rule_random_compute_location(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                     tn_err_t *err) {
  (void)c;
  const ir_block_t *b = strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  if (b && eligible(sch_func(st->s), b)) {
    int rc = apply(st, block, err);
    if (rc < 0) {
      smp_state_free(st);
      return rc;
    }
  }
  smp_states_push(out, *st);
  return TN_OK;
}
