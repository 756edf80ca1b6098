/* recip.c — a float division by a loop invariant, as a multiplication by
 * its reciprocal (C target).
 *
 * Softmax's last pass, S[i, j] = E[i, j] / sum[i], divides every element by
 * the same row sum.  gcc keeps each division (it may not trade one rounding
 * for two without -freciprocal-math), and a vector division costs 5-10
 * times a multiplication: 8 % of softmax's time on one core, cache resident
 * (vdivps against vmulps on this EPYC, 1024-float rows).  Here, when a loop
 * runs one block whose divisor does not change with the loop, 1 / divisor
 * is computed once before the loop and the block multiplies by it.  The
 * quotient then carries two roundings instead of one (within 1.5 ulp of
 * the exact one, against 0.5), far inside the reference check's tolerance
 * (1e-4 of the output's norm).
 *
 * Conditions: the C target; a serial, unrolled or vectorized loop of at
 * least 2 iterations whose body is a single block without predicate or
 * init whose body is one store; a float32/float64 division in the stored
 * value whose divisor reads no buffer that the block writes and whose
 * iterators are bound without the loop's variable.  The reciprocal is
 * printed in a scope where the loop's variable is 0 and the block's
 * iterators are declared (the same values on every iteration). */
#include "cg_internal.h"

#include <stdio.h>
#include <string.h>

/* e's variables (block iterators of b) are bound without v, and e reads no x. */
static bool invariant(const ir_block_t *b, const ir_expr_t *e, const ir_var_t *v, const ir_buffer_t *x) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == x) return false;
  if (e->kind == IR_E_VAR) {
    if (e->u.var == v) return false;
    for (int i = 0; i < b->niters; i++)
      if (b->iters[i].var == e->u.var)
        return !b->iters[i].binding || !ir_expr_uses_var(b->iters[i].binding, v);
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++)
    if (!invariant(b, kids[i], v, x)) return false;
  return true;
}

static void collect(cg_recip_t *r, const ir_block_t *b, const ir_expr_t *e, const ir_var_t *v,
                    const ir_buffer_t *x) {
  if (e->kind == IR_E_DIV && (e->dtype == IR_FLOAT32 || e->dtype == IR_FLOAT64) && r->n < CG_RECIP_MAX &&
      invariant(b, e->u.bin.b, v, x)) {
    r->div[r->n++] = e;
    collect(r, b, e->u.bin.a, v, x); /* the dividend's divisions too; the divisor, computed once, keeps its own */
    return;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++) collect(r, b, kids[i], v, x);
}

bool cg_recip_find(const cg_ctx_t *c, const ir_stmt_t *s, cg_recip_t *r) {
  const ir_loop_t *l = &s->u.loop;
  memset(r, 0, sizeof *r);
  if (c->d->target != CG_TARGET_C || c->recip || l->extent < 2 ||
      (l->kind != IR_LOOP_SERIAL && l->kind != IR_LOOP_UNROLLED && l->kind != IR_LOOP_VECTORIZED))
    return false;
  const ir_stmt_t *t = cg_strip_seq(l->body);
  if (!t || t->kind != IR_S_BLOCK) return false;
  const ir_block_t *b = &t->u.block;
  const ir_stmt_t *st = b->body;
  if (b->predicate || b->init || b->nallocs || !st || st->kind != IR_S_STORE) return false;
  collect(r, b, st->u.store.value, l->var, st->u.store.buf);
  r->loop = l;
  r->blk = b;
  return r->n > 0;
}

void cg_recip_open(cg_ctx_t *c, cg_recip_t *r) {
  cg_line(c, "{");
  c->ind++;
  for (int i = 0; i < r->n; i++) {
    snprintf(r->name[i], sizeof r->name[i], "tuned_rcp%d", c->tmp++);
    cg_line(c, "%s %s;  /* 1 / a divisor that the loop below does not change */",
            r->div[i]->dtype == IR_FLOAT64 ? "double" : "float", r->name[i]);
  }
  cg_line(c, "{");
  c->ind++;
  cg_line(c, "int %s = 0;", cg_var(c, r->loop->var));
  cg_emit_iters(c, r->blk, false);
  const ir_block_t *outer = c->blk;
  c->blk = r->blk;
  for (int i = 0; i < r->n; i++)
    cg_line(c, "%s = %s / (%s);", r->name[i], r->div[i]->dtype == IR_FLOAT64 ? "1.0" : "1.0f",
            cg_expr_str(c, r->div[i]->u.bin.b));
  c->blk = outer;
  c->ind--;
  cg_line(c, "}");
  c->recip = r;
}

void cg_recip_close(cg_ctx_t *c, cg_recip_t *r) {
  (void)r;
  c->recip = NULL;
  c->ind--;
  cg_line(c, "}");
}

const char *cg_recip_ref(const cg_ctx_t *c, const ir_expr_t *e) {
  const cg_recip_t *r = c->recip;
  if (!r || c->blk != r->blk) return NULL;
  for (int i = 0; i < r->n; i++)
    if (r->div[i] == e) return r->name[i];
  return NULL;
}
