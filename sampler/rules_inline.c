/* rules_inline.c — the inlining rules (§3.5): InlineConstantScalars (a block
 * that writes a constant scalar) and AutoInline (elementwise producers into
 * their consumers; on GPUs also elementwise consumers, such as a bias+ReLU
 * epilogue, back into their single producer, the tiled block's write cache). */
#include <string.h>

#include "smp_internal.h"

typedef struct inline_config {
  bool into_producer, into_consumer, inline_const_tensor;
  bool disallow_if_then_else, require_injective, require_ordered, disallow_exp;
} inline_config_t;

/* §3.3 rule 4 and §3.6 rule 3.  Our workload language has select() where
 * TVM's padding uses if_then_else, so select counts as if-then-else. */
static const inline_config_t gpu_inline = {true, true, true, false, false, false, false};
static const inline_config_t cpu_inline = {false, true, true, true, true, true, true};

typedef enum inline_kind { NO_INLINE, INTO_CONSUMER, INTO_PRODUCER } inline_kind_t;

static bool writes_output(const ir_block_t *b) {
  for (int w = 0; w < b->nwrites; w++)
    if (b->writes[w].buf->role == IR_BUF_OUTPUT) return true;
  return false;
}

/* A block that only copies or maps values: spatial iterators, no init
 * (TVM's IsCompleteBlock); and not one marked for a tensor intrinsic (a
 * tensor-core accumulator's write-back is a fragment store: a consumer
 * inlined into it would no longer match). */
static bool is_complete(const ir_block_t *b) {
  return !b->init && smp_block_is_spatial(b) && b->nwrites == 1 &&
         !ir_annot_get(b->annots, b->nannots, SMP_ANN_AUTO_TENSORIZE);
}

static bool patterns_ok(const inline_config_t *cfg, const ir_block_t *b) {
  for (int r = 0; r < b->nreads; r++) {
    bool exists, injective, ordered;
    smp_rw_pattern(&b->reads[r], &b->writes[0], &exists, &injective, &ordered);
    if ((cfg->require_injective && !injective) || (cfg->require_ordered && !ordered)) return false;
  }
  return true;
}

/* Which way the block may be inlined, before trying (the primitive's own
 * checks decide legality). */
static inline_kind_t check_inline(const inline_config_t *cfg, const ir_func_t *f, const ir_block_t *b) {
  if (b->nwrites != 1) return NO_INLINE;
  if (cfg->inline_const_tensor && b->nreads == 0 && !writes_output(b)) return INTO_CONSUMER;
  const ir_annot_t *rule = ir_annot_get(b->annots, b->nannots, "meta_schedule.inline_rule");
  if (rule && rule->is_str && strcmp(rule->sval, "disable") == 0) return NO_INLINE;
  if (!smp_func_is_spatial(f)) {
    if (cfg->disallow_exp && smp_block_calls(b, IR_FN_EXP)) return NO_INLINE;
    if (cfg->disallow_if_then_else && smp_block_has_select(b)) return NO_INLINE;
    if (!patterns_ok(cfg, b)) return NO_INLINE;
  }
  ir_block_t *rel[2];
  if (cfg->into_consumer && ir_consumers(f, b, rel, 2) > 0) return INTO_CONSUMER;
  if (cfg->into_producer && ir_producers(f, b, rel, 2) == 1 && is_complete(rel[0])) return INTO_PRODUCER;
  return NO_INLINE;
}

/* Tries compute_inline (and then, if allowed, reverse_compute_inline); a
 * refusal just leaves the block where it is. */
static int try_inline(const inline_config_t *cfg, smp_state_t *st, const char *block, inline_kind_t kind,
                      tn_err_t *err) {
  sch_rv_t b;
  SMP_TRY(sch_get_block(st->s, block, &b, err));
  tn_err_t ignored = {0};
  if (kind == INTO_CONSUMER && sch_compute_inline(st->s, b, &ignored) == TN_OK) {
    smp_note(st, "auto-inline(%s into its consumers)", block);
    return TN_OK;
  }
  const ir_func_t *f = sch_func(st->s);
  ir_block_t *prod[2];
  ir_block_t *blk = smp_block(f, block);
  bool producer_ok = cfg->into_producer && ir_producers(f, blk, prod, 2) == 1 && is_complete(prod[0]);
  if (producer_ok && sch_reverse_compute_inline(st->s, b, &ignored) == TN_OK)
    smp_note(st, "auto-inline(%s into its producer)", block);
  return TN_OK;
}

int smp_rule_auto_inline(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err) {
  const inline_config_t *cfg = c->gpu ? &gpu_inline : &cpu_inline;
  const ir_block_t *b = strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  inline_kind_t kind = b ? check_inline(cfg, sch_func(st->s), b) : NO_INLINE;
  if (kind != NO_INLINE) {
    int rc = try_inline(cfg, st, block, kind, err);
    if (rc < 0) {
      smp_state_free(st);
      return rc;
    }
  }
  smp_states_push(out, *st);
  return TN_OK;
}

int smp_rule_inline_const_scalars(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                  tn_err_t *err) {
  (void)c;
  const ir_block_t *b = strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  if (b && b->nreads == 0 && b->nwrites == 1 && b->writes[0].buf->ndim == 0 && !writes_output(b)) {
    sch_rv_t rv;
    tn_err_t ignored = {0};
    int rc = sch_get_block(st->s, block, &rv, err);
    if (rc < 0) {
      smp_state_free(st);
      return rc;
    }
    if (sch_compute_inline(st->s, rv, &ignored) == TN_OK) smp_note(st, "inline-constant-scalars(%s)", block);
  }
  smp_states_push(out, *st);
  return TN_OK;
}
