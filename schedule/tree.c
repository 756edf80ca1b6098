/* tree.c — navigation of the loop/block tree for the schedule primitives:
 * paths by uid, enclosing loops, scopes, producers/consumers, and rebinding
 * of loop variables after a loop transformation; plus the query primitives. */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* ---- paths ------------------------------------------------------------- */

bool sch_find_path(const ir_func_t *f, int uid, sch_path_t *p) { return ir_path_find(f, uid, p); }

ir_stmt_t *sch_find(const ir_func_t *f, int uid) {
  sch_path_t p = {0}; /* stops at the target, unlike ir_func_find_uid's whole walk */
  ir_stmt_t *s = ir_path_find(f, uid, &p) ? p.stmts[p.n - 1] : NULL;
  ir_path_free(&p);
  return s;
}

ir_block_t *sch_find_block(const ir_func_t *f, int uid) {
  ir_stmt_t *s = sch_find(f, uid);
  return s && s->kind == IR_S_BLOCK ? &s->u.block : NULL;
}

ir_loop_t *sch_find_loop(const ir_func_t *f, int uid) {
  ir_stmt_t *s = sch_find(f, uid);
  return s && s->kind == IR_S_LOOP ? &s->u.loop : NULL;
}

/* ---- bounds and rebinding ---------------------------------------------- */

static bool bounds_visit(ir_stmt_t *s, void *p) {
  if (s->kind == IR_S_LOOP) ir_bounds_set(p, s->u.loop.var, 0, s->u.loop.extent - 1);
  return s->kind != IR_S_STORE;
}

void sch_bounds_for(const ir_func_t *f, int uid, ir_stmt_t *s, ir_bounds_t *b) {
  sch_path_t p = {0};
  if (uid >= 0 && sch_find_path(f, uid, &p)) ir_bounds_add_path(b, &p, p.n);
  ir_path_free(&p);
  if (s) ir_stmt_walk(s, bounds_visit, b);
}

typedef struct rebind {
  ir_func_t *f;
  ir_var_t *const *from;
  ir_expr_t *const *to;
  int n;
} rebind_t;

static bool rebind_visit(ir_stmt_t *s, void *p) {
  rebind_t *r = p;
  if (s->kind == IR_S_BLOCK) {
    ir_block_t *b = &s->u.block;
    for (int i = 0; i < b->niters; i++)
      b->iters[i].binding = ir_expr_subst(r->f, b->iters[i].binding, r->from, r->to, r->n);
    if (b->predicate) b->predicate = ir_expr_subst(r->f, b->predicate, r->from, r->to, r->n);
  }
  return s->kind != IR_S_STORE;
}

/* Simplifies the bindings/predicate of every block under `s` with bounds of
 * the loops on the path from the root (tracked while walking). */
static void simplify_rec(ir_func_t *f, ir_stmt_t *s, ir_bounds_t *b) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) simplify_rec(f, s->u.seq.items[i], b);
    break;
  case IR_S_LOOP:
    ir_bounds_set(b, s->u.loop.var, 0, s->u.loop.extent - 1);
    simplify_rec(f, s->u.loop.body, b);
    break;
  case IR_S_BLOCK: {
    ir_block_t *blk = &s->u.block;
    for (int i = 0; i < blk->niters; i++)
      blk->iters[i].binding = ir_simplify(f, blk->iters[i].binding, b);
    if (blk->predicate) {
      blk->predicate = ir_simplify(f, blk->predicate, b);
      int64_t v;
      if (ir_expr_is_const_int(blk->predicate, &v) && v) blk->predicate = NULL;
    }
    simplify_rec(f, blk->body, b);
    break;
  }
  case IR_S_STORE: break;
  }
}

void sch_rebind(ir_func_t *f, ir_stmt_t *s, ir_var_t *const *from, ir_expr_t *const *to, int n) {
  rebind_t r = {f, from, to, n};
  ir_stmt_walk(s, rebind_visit, &r);
  /* Simplify only the rewritten subtree, with the bounds of the loops above
   * it (simplify_rec adds the ones inside), so unrelated nests keep their text. */
  int uid = s->kind == IR_S_LOOP ? s->u.loop.uid : s->kind == IR_S_BLOCK ? s->u.block.uid : -1;
  sch_path_t p = {0};
  if (uid < 0 || !sch_find_path(f, uid, &p)) {
    ir_path_free(&p);
    sch_simplify_all(f);
    return;
  }
  ir_bounds_t b;
  ir_bounds_init(&b);
  ir_bounds_add_path(&b, &p, p.n - 1);
  ir_path_free(&p);
  simplify_rec(f, s, &b);
  ir_bounds_free(&b);
}

void sch_simplify_all(ir_func_t *f) {
  ir_bounds_t b;
  ir_bounds_init(&b);
  simplify_rec(f, f->root, &b);
  ir_bounds_free(&b);
}

const char *sch_loop_name(const ir_loop_t *l) { return l->var->name; }

/* ---- query primitives -------------------------------------------------- */

int sch_prim_get_loops(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  ir_loop_t **loops;
  int k = ir_enclosing_loops(s->f, block_uid, &loops);
  if (k > SCH_MAX_RVS_OUT) {
    free(loops);
    return tn_err_set(err, TN_ERANGE, "block \"%s\" has %d enclosing loops; one instruction returns at most %d "
                      "(IR_MAX_LOOP_DEPTH)", b->name, k, SCH_MAX_RVS_OUT);
  }
  for (int i = 0; i < k; i++) out[i] = loops[i]->uid;
  *n = k;
  free(loops);
  return TN_OK;
}

int sch_prim_get_child_blocks(sch_t *s, int uid, int *out, int *n, tn_err_t *err) {
  ir_stmt_t *st = sch_find(s->f, uid);
  if (!st) return tn_err_set(err, TN_EINVAL, "the block or loop no longer exists");
  ir_block_t *blocks[SCH_MAX_RVS_OUT];
  ir_stmt_t *body = st->kind == IR_S_BLOCK ? st->u.block.body : st->u.loop.body;
  int k = ir_collect_blocks(body, true, blocks, SCH_MAX_RVS_OUT);
  if (k > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_ERANGE, "more than %d child blocks", SCH_MAX_RVS_OUT);
  for (int i = 0; i < k; i++) out[i] = blocks[i]->uid;
  *n = k;
  return TN_OK;
}

static int related_prim(sch_t *s, int block_uid, bool producers, int *out, int *n, tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  ir_block_t *blocks[SCH_MAX_RVS_OUT];
  int k = producers ? ir_producers(s->f, b, blocks, SCH_MAX_RVS_OUT) : ir_consumers(s->f, b, blocks, SCH_MAX_RVS_OUT);
  if (k > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_ERANGE, "block \"%s\" has %d %s; one instruction returns at most %d", b->name, k,
                      producers ? "producers" : "consumers", SCH_MAX_RVS_OUT);
  for (int i = 0; i < k; i++) out[i] = blocks[i]->uid;
  *n = k;
  return TN_OK;
}

int sch_prim_get_producers(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err) {
  return related_prim(s, block_uid, true, out, n, err);
}

int sch_prim_get_consumers(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err) {
  return related_prim(s, block_uid, false, out, n, err);
}
