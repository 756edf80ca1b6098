/* loops.c — the loop primitives: split, fuse, reorder, loop kinds (parallel,
 * vectorize, unroll, bind) and annotations.  Each checks every precondition
 * before it edits s->f, so a failing call leaves the function untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* Loop variables and extents are int32. */
#define MAX_EXTENT INT64_C(2147483647)

/* ---- shared helpers ---------------------------------------------------- */

/* The loop with this uid and its path from the root. */
static int get_loop(const ir_func_t *f, int uid, sch_path_t *p, ir_loop_t **out, tn_err_t *err) {
  if (!sch_find_path(f, uid, p) || p->stmts[p->n - 1]->kind != IR_S_LOOP)
    return tn_err_set(err, TN_EINVAL, "the loop handle (uid %d) names no loop of the function (it was split, "
                      "fused or removed by an earlier primitive)", uid);
  *out = &p->stmts[p->n - 1]->u.loop;
  return TN_OK;
}

/* Skips single-statement sequences. */
static ir_stmt_t *only_child(ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

/* "parallel", "vectorized", "unrolled", "bound to threadIdx.x" or "serial". */
static const char *kind_desc(const ir_loop_t *l, char *buf, size_t n) {
  static const char *const names[] = {"serial", "parallel", "vectorized", "unrolled"};
  if (l->kind == IR_LOOP_THREAD) {
    snprintf(buf, n, "bound to %s", ir_thread_tag_name(l->tag));
    return buf;
  }
  return (unsigned)l->kind < TN_ARRAY_LEN(names) ? names[l->kind] : "?";
}

/* Multiplies into *acc; false when the result would exceed MAX_EXTENT. */
static bool mul_extent(int64_t *acc, int64_t v) {
  if (v < 1 || *acc > MAX_EXTENT / v) return false;
  *acc *= v;
  return true;
}

/* Every block in a subtree (descending into nested blocks), one at a time. */
typedef bool (*block_fn)(ir_block_t *b, void *ctx); /* false stops the walk */

typedef struct block_walk {
  block_fn fn;
  void *ctx;
  bool stopped;
} block_walk_t;

static bool block_walk_visit(ir_stmt_t *s, void *p) {
  block_walk_t *w = p;
  if (w->stopped) return false;
  if (s->kind == IR_S_BLOCK && !w->fn(&s->u.block, w->ctx)) w->stopped = true;
  return !w->stopped && s->kind != IR_S_STORE;
}

static void for_each_block(ir_stmt_t *s, block_fn fn, void *ctx) {
  block_walk_t w = {fn, ctx, false};
  ir_stmt_walk(s, block_walk_visit, &w);
}

/* ---- split ------------------------------------------------------------- */

/* Fills ext[] with the factors (the inferred one computed); checks that the
 * product covers the extent and fits, and whether predication is needed. */
static int split_extents(const ir_loop_t *l, const int64_t *factors, int n, bool disable_predication,
                         int64_t *ext, bool *needs_pred, tn_err_t *err) {
  const char *name = sch_loop_name(l);
  int infer = -1;
  int64_t prod = 1;
  for (int i = 0; i < n; i++) {
    if (factors[i] < 0)
      return tn_err_set(err, TN_EINVAL, "factor %d of loop %s is %lld; factors must be >= 1 (or None to infer one)",
                        i, name, (long long)factors[i]);
    if (factors[i] == 0 && infer >= 0)
      return tn_err_set(err, TN_EINVAL, "factors %d and %d of loop %s are both None; at most one factor can be "
                        "inferred", infer, i, name);
    if (factors[i] == 0) infer = i;
    else if (!mul_extent(&prod, factors[i]))
      return tn_err_set(err, TN_ERANGE, "the factors of loop %s multiply to more than %lld (int32 loop range)",
                        name, (long long)MAX_EXTENT);
    ext[i] = factors[i];
  }
  if (infer >= 0) ext[infer] = (l->extent + prod - 1) / prod;
  int64_t total = infer >= 0 ? prod * ext[infer] : prod;
  if (total < l->extent)
    return tn_err_set(err, TN_EINVAL, "loop %s has extent %lld but the factors multiply to %lld; the product must "
                      "be at least the extent (pass None for one factor to infer it)", name,
                      (long long)l->extent, (long long)total);
  if (total > MAX_EXTENT)
    return tn_err_set(err, TN_ERANGE, "the factors of loop %s multiply to %lld, more than %lld (int32 loop range)",
                      name, (long long)total, (long long)MAX_EXTENT);
  if (total > l->extent && disable_predication)
    return tn_err_set(err, TN_EINVAL, "the factors of loop %s multiply to %lld, not its extent %lld; with "
                      "predication disabled the factors must divide the extent exactly", name,
                      (long long)total, (long long)l->extent);
  *needs_pred = total > l->extent;
  return TN_OK;
}

/* ANDs `cond` into the predicate of every block directly under s. */
static void append_predicate(ir_func_t *f, ir_stmt_t *s, ir_expr_t *cond) {
  ir_block_t *blocks[SCH_MAX_RVS_OUT], **all = blocks;
  int n = ir_collect_blocks(s, true, blocks, SCH_MAX_RVS_OUT);
  if (n > SCH_MAX_RVS_OUT) {
    all = tn_xmalloc(sizeof *all * (size_t)n);
    ir_collect_blocks(s, true, all, n);
  }
  for (int i = 0; i < n; i++)
    all[i]->predicate = all[i]->predicate ? ir_bin(f, IR_E_AND, all[i]->predicate, cond) : cond;
  if (all != blocks) free(all);
}

static int split_at(sch_t *s, sch_path_t *pp, int loop_uid, const int64_t *factors, int n, bool disable_predication,
                    int *out, tn_err_t *err) {
  ir_loop_t *l = NULL;
  int rc = get_loop(s->f, loop_uid, pp, &l, err);
  if (rc < 0) return rc;
  if (n < 1 || n > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EINVAL, "loop %s: %d factors given; expected 1..%d", sch_loop_name(l), n,
                      SCH_MAX_RVS_OUT);
  if (l->kind != IR_LOOP_SERIAL && l->kind != IR_LOOP_UNROLLED) {
    char buf[64];
    return tn_err_set(err, TN_EINVAL, "loop %s is %s; only serial or unrolled loops can be split (split before "
                      "parallel, vectorize or bind)", sch_loop_name(l), kind_desc(l, buf, sizeof buf));
  }
  int64_t ext[SCH_MAX_RVS_OUT];
  bool needs_pred = false;
  if ((rc = split_extents(l, factors, n, disable_predication, ext, &needs_pred, err)) < 0) return rc;

  ir_func_t *f = s->f;
  if (needs_pred) append_predicate(f, l->body, ir_bin(f, IR_E_LT, ir_varref(f, l->var), ir_int(f, l->extent)));
  ir_var_t *vars[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) vars[i] = ir_var_new(f, tn_arena_printf(f->arena, "%s_%d", l->var->name, i), IR_INT32);
  ir_stmt_t *nest = l->body;
  for (int i = n - 1; i >= 0; i--) {
    nest = ir_loop_new(f, vars[i], ext[i], nest);
    out[i] = nest->u.loop.uid;
  }
  *pp->slots[pp->n - 1] = nest;
  ir_expr_t *fused = ir_varref(f, vars[0]);
  for (int i = 1; i < n; i++)
    fused = ir_bin(f, IR_E_ADD, ir_bin(f, IR_E_MUL, fused, ir_int(f, ext[i])), ir_varref(f, vars[i]));
  sch_rebind(f, nest, &l->var, &fused, 1);
  return TN_OK;
}

int sch_prim_split(sch_t *s, int loop_uid, const int64_t *factors, int n, bool disable_predication, int *out,
                   tn_err_t *err) {
  sch_path_t p = {0};
  int rc = split_at(s, &p, loop_uid, factors, n, disable_predication, out, err);
  ir_path_free(&p);
  return rc;
}

/* ---- fuse -------------------------------------------------------------- */

/* Looks up every loop of a list (the statements, for tree edits) and
 * rejects a loop listed twice. */
static int get_loop_list(const ir_func_t *f, const int *uids, int n, ir_stmt_t **stmts, tn_err_t *err) {
  if (n < 1 || n > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "%d loops given; expected 1..%d", n, SCH_MAX_RVS_OUT);
  for (int i = 0; i < n; i++) {
    sch_path_t p = {0};
    ir_loop_t *l = NULL;
    int rc = get_loop(f, uids[i], &p, &l, err);
    if (rc == 0) stmts[i] = p.stmts[p.n - 1];
    ir_path_free(&p);
    if (rc < 0) return rc;
    for (int j = 0; j < i; j++)
      if (stmts[j] == stmts[i])
        return tn_err_set(err, TN_EINVAL, "loop %s is listed twice (positions %d and %d); each loop may appear once",
                          sch_loop_name(l), j, i);
  }
  return TN_OK;
}

/* Checks that `inner` is the only statement in `outer`'s body. */
static int check_direct_child(const ir_func_t *f, ir_stmt_t *outer, ir_stmt_t *inner, tn_err_t *err) {
  const char *on = sch_loop_name(&outer->u.loop), *in = sch_loop_name(&inner->u.loop);
  if (only_child(outer->u.loop.body) == inner) return TN_OK;
  sch_path_t p = {0};
  sch_find_path(f, outer->u.loop.uid, &p);
  bool encloses = false;
  for (int i = 0; i < p.n; i++) encloses |= p.stmts[i] == inner;
  ir_path_free(&p);
  if (encloses) return tn_err_set(err, TN_EINVAL, "loop %s encloses loop %s; list the loops outer to inner", in, on);
  ir_stmt_t *body = only_child(outer->u.loop.body);
  if (body->kind == IR_S_SEQ)
    return tn_err_set(err, TN_EINVAL, "loop %s has more than one child (%d statements); only perfectly nested loops "
                      "can be fused", on, body->u.seq.n);
  return tn_err_set(err, TN_EINVAL, "loop %s is not the direct child of loop %s; fuse needs a chain of perfectly "
                    "nested loops listed outer to inner", in, on);
}

static int check_fusable(const ir_loop_t *l, tn_err_t *err) {
  char buf[64];
  if (l->kind != IR_LOOP_SERIAL)
    return tn_err_set(err, TN_EINVAL, "loop %s is %s; only serial loops can be fused", sch_loop_name(l),
                      kind_desc(l, buf, sizeof buf));
  if (l->nannots > 0)
    return tn_err_set(err, TN_EINVAL, "loop %s has annotations (\"%s\"...); only loops without annotations can be "
                      "fused", sch_loop_name(l), l->annots[0].key);
  return TN_OK;
}

int sch_prim_fuse(sch_t *s, const int *loop_uids, int n, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_stmt_t *st[SCH_MAX_RVS_OUT]; /* get_loop_list fills the first n */
  int rc = get_loop_list(f, loop_uids, n, st, err);
  if (rc < 0) return rc;
  if (n == 1) {
    *out = loop_uids[0];
    return TN_OK;
  }
  int64_t prod = 1;
  for (int i = 0; i < n; i++) {
    ir_loop_t *l = &st[i]->u.loop;
    if ((rc = check_fusable(l, err)) < 0 || (i > 0 && (rc = check_direct_child(f, st[i - 1], st[i], err)) < 0))
      return rc;
    if (!mul_extent(&prod, l->extent))
      return tn_err_set(err, TN_ERANGE, "the fused extent of loops %s..%s exceeds %lld (int32 loop range)",
                        sch_loop_name(&st[0]->u.loop), sch_loop_name(l), (long long)MAX_EXTENT);
  }

  sch_path_t p = {0};
  sch_find_path(f, loop_uids[0], &p);
  tn_buf_t name;
  tn_buf_init(&name);
  for (int i = 0; i < n; i++) tn_buf_printf(&name, "%s_", sch_loop_name(&st[i]->u.loop));
  tn_buf_put(&name, "fused");
  ir_var_t *var = ir_var_new(f, tn_buf_str(&name), IR_INT32);
  tn_buf_free(&name);
  ir_stmt_t *fused = ir_loop_new(f, var, prod, st[n - 1]->u.loop.body);
  *p.slots[p.n - 1] = fused;
  ir_path_free(&p);

  ir_var_t *from[SCH_MAX_RVS_OUT];
  ir_expr_t *to[SCH_MAX_RVS_OUT];
  int64_t inner = 1; /* product of the extents inside loop i */
  for (int i = n - 1; i >= 0; i--) {
    ir_loop_t *l = &st[i]->u.loop;
    ir_expr_t *e = ir_varref(f, var);
    if (inner > 1) e = ir_bin(f, IR_E_FLOORDIV, e, ir_int(f, inner));
    if (i > 0) e = ir_bin(f, IR_E_FLOORMOD, e, ir_int(f, l->extent));
    from[i] = l->var;
    to[i] = e;
    inner *= l->extent;
  }
  sch_rebind(f, fused, from, to, n);
  *out = fused->u.loop.uid;
  return TN_OK;
}

/* ---- reorder ----------------------------------------------------------- */

/* Depth of a statement (length of its path). */
static int depth_of(const ir_func_t *f, ir_stmt_t *st) {
  sch_path_t p = {0};
  sch_find_path(f, st->u.loop.uid, &p);
  int n = p.n;
  ir_path_free(&p);
  return n;
}

/* Sorts the given loops by depth (insertion sort, n is small) and checks
 * each is nested in the previous one; fills `chain` with the path of the
 * deepest and pos[] with the chain indices of the sorted loops. */
static int reorder_chain(const ir_func_t *f, ir_stmt_t **st, int n, sch_path_t *chain, int *pos, tn_err_t *err) {
  ir_stmt_t *by_depth[SCH_MAX_RVS_OUT] = {NULL};
  int depth[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) {
    int d = depth_of(f, st[i]), j = i;
    for (; j > 0 && depth[j - 1] > d; j--) by_depth[j] = by_depth[j - 1], depth[j] = depth[j - 1];
    by_depth[j] = st[i], depth[j] = d;
  }
  for (int i = n - 1; i >= 0; i--) {
    sch_find_path(f, by_depth[i]->u.loop.uid, chain);
    if (i > 0 && chain->stmts[depth[i - 1] - 1] != by_depth[i - 1])
      return tn_err_set(err, TN_EINVAL, "loop %s is not nested inside %s's loop nest; the loops to reorder must lie "
                        "on one chain of nested loops", sch_loop_name(&by_depth[i]->u.loop),
                        sch_loop_name(&by_depth[i - 1]->u.loop));
  }
  sch_find_path(f, by_depth[n - 1]->u.loop.uid, chain);
  for (int i = 0; i < n; i++) pos[i] = depth[i] - 1;
  return TN_OK;
}

/* The statements between the outermost and innermost given loop must be
 * loops with a single child each. */
static int check_perfect_chain(const sch_path_t *chain, int top, int bottom, tn_err_t *err) {
  const char *tn = sch_loop_name(&chain->stmts[top]->u.loop), *bn = sch_loop_name(&chain->stmts[bottom]->u.loop);
  for (int k = top; k < bottom; k++) {
    ir_stmt_t *st = chain->stmts[k];
    if (st->kind == IR_S_BLOCK)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" lies between loops %s and %s; reorder cannot move loops "
                        "across a block", st->u.block.name, tn, bn);
    if (st->kind != IR_S_LOOP) continue;
    ir_stmt_t *body = st->u.loop.body;
    if (body->kind == IR_S_SEQ && body->u.seq.n > 1)
      return tn_err_set(err, TN_EINVAL, "loop %s has more than one child (%d statements); the loops from %s to %s "
                        "must be perfectly nested to be reordered", sch_loop_name(&st->u.loop), body->u.seq.n, tn, bn);
  }
  return TN_OK;
}

/* A reorder changes the order in which a reduction block visits its
 * iterations, and the block's init runs where every reduction iterator is 0:
 * that point must stay the first visit of each output element.  It does for
 * any loop order when no loop feeds both spatial and reduction iterators,
 * zero reduction loops give zero reduction iterators (and a true predicate),
 * and loops feeding neither stay outside the reduction loops. */
typedef struct init_order {
  ir_func_t *f;
  ir_loop_t *const *old_at; /* the loop headers at the moved positions ... */
  ir_loop_t *const *new_at; /* ... and the ones that will be there */
  int n;
  tn_err_t *err;
  int rc;
} init_order_t;

enum { USE_S = 1, USE_R = 2 };

/* The loops enclosing b in their order after the reorder (*lp), with their
 * use by b's iterators (*use, USE_S | USE_R bits); both malloc'ed. */
static int loops_after_reorder(const init_order_t *c, const ir_block_t *b, ir_loop_t ***lpp, int **usep) {
  ir_loop_t **lp;
  int ne = ir_enclosing_loops(c->f, b->uid, &lp);
  int *use = *usep = tn_xmalloc(sizeof *use * (size_t)(ne + 1));
  *lpp = lp;
  for (int k = 0; k < ne; k++) {
    for (int i = 0; i < c->n; i++)
      if (lp[k] == c->old_at[i]) {
        lp[k] = c->new_at[i];
        break;
      }
    use[k] = 0;
    for (int i = 0; i < b->niters; i++)
      if (ir_expr_uses_var(b->iters[i].binding, lp[k]->var))
        use[k] |= b->iters[i].kind == IR_ITER_REDUCE ? USE_R : USE_S;
  }
  return ne;
}

/* Whether e is the constant `want` once every reduction loop is set to 0. */
static bool zero_gives(ir_func_t *f, ir_expr_t *e, ir_loop_t **lp, const int *use, int ne, int64_t want) {
  ir_var_t **from = tn_xmalloc(sizeof *from * (size_t)(ne + 1));
  ir_expr_t **to = tn_xmalloc(sizeof *to * (size_t)(ne + 1));
  int nz = 0;
  for (int k = 0; k < ne; k++)
    if (use[k] & USE_R) from[nz] = lp[k]->var, to[nz++] = ir_int(f, 0);
  int64_t v;
  bool gives = ir_expr_is_const_int(ir_simplify(f, ir_expr_subst(f, e, from, to, nz), NULL), &v) && v == want;
  free(from);
  free(to);
  return gives;
}

/* Checks one conjunct of a predicate (recursing through AND). */
static int check_pred_conjunct(init_order_t *c, const ir_block_t *b, ir_expr_t *e, ir_loop_t **lp, const int *use,
                               int ne) {
  if (e->kind == IR_E_AND) {
    int rc = check_pred_conjunct(c, b, e->u.bin.a, lp, use, ne);
    return rc < 0 ? rc : check_pred_conjunct(c, b, e->u.bin.b, lp, use, ne);
  }
  int r = -1, other = -1;
  for (int k = 0; k < ne; k++)
    if (ir_expr_uses_var(e, lp[k]->var)) *((use[k] & USE_R) ? &r : &other) = k;
  if (r >= 0 && other >= 0)
    return tn_err_set(c->err, TN_EINVAL, "the predicate of reduction block \"%s\" mixes reduction loop %s with loop "
                      "%s; reordering could skip the block's init", b->name, sch_loop_name(lp[r]),
                      sch_loop_name(lp[other]));
  if (r >= 0 && !zero_gives(c->f, e, lp, use, ne, 1))
    return tn_err_set(c->err, TN_EINVAL, "the predicate of reduction block \"%s\" is not true when its reduction "
                      "loops are 0; reordering could skip the block's init", b->name);
  return TN_OK;
}

static int block_init_order(init_order_t *c, const ir_block_t *b, ir_loop_t **lp, const int *use, int ne) {
  int first_r = -1;
  for (int k = 0; k < ne; k++) {
    if (use[k] == (USE_S | USE_R))
      return tn_err_set(c->err, TN_EINVAL, "loop %s feeds both spatial and reduction iterators of block \"%s\"; "
                        "reordering it could run the block's init after an update", sch_loop_name(lp[k]), b->name);
    if ((use[k] & USE_R) && first_r < 0) first_r = k;
    if (!use[k] && lp[k]->extent > 1 && first_r >= 0)
      return tn_err_set(c->err, TN_EINVAL, "loop %s does not feed block \"%s\" but would be placed inside its "
                        "reduction loop %s, which would run the block's init again after updates",
                        sch_loop_name(lp[k]), b->name, sch_loop_name(lp[first_r]));
  }
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE && !zero_gives(c->f, b->iters[i].binding, lp, use, ne, 0))
      return tn_err_set(c->err, TN_EINVAL, "the reduction iterator %s of block \"%s\" is not 0 when its reduction "
                        "loops are; reordering could run the block's init after an update", b->iters[i].var->name,
                        b->name);
  return b->predicate ? check_pred_conjunct(c, b, b->predicate, lp, use, ne) : TN_OK;
}

static int check_block_init_order(init_order_t *c, const ir_block_t *b) {
  ir_loop_t **lp;
  int *use, ne = loops_after_reorder(c, b, &lp, &use);
  int rc = block_init_order(c, b, lp, use, ne);
  free(lp);
  free(use);
  return rc;
}

static bool init_order_visit(ir_block_t *b, void *p) {
  init_order_t *c = p;
  if (!b->init) return true;
  c->rc = check_block_init_order(c, b);
  return c->rc == TN_OK;
}

/* Scratch of a reorder of n loops (one allocation). */
typedef struct reorder {
  ir_stmt_t **st;
  int *pos;
  ir_loop_t **old_at, **new_at;
  ir_loop_t *hdr;
  sch_path_t chain;
} reorder_t;

static int reorder_apply(sch_t *s, reorder_t *r, const int *loop_uids, int n, tn_err_t *err) {
  int rc = get_loop_list(s->f, loop_uids, n, r->st, err);
  if (rc < 0) return rc;
  if ((rc = reorder_chain(s->f, r->st, n, &r->chain, r->pos, err)) < 0 ||
      (rc = check_perfect_chain(&r->chain, r->pos[0], r->pos[n - 1], err)) < 0)
    return rc;
  /* A vectorized loop has no loop inside, so it is the deepest given one. */
  for (int i = 0; i < n; i++)
    if (r->st[i]->u.loop.kind == IR_LOOP_VECTORIZED && i != n - 1)
      return tn_err_set(err, TN_EINVAL, "loop %s is vectorized and must stay innermost (list it last; loop %s would "
                        "be placed below it)", sch_loop_name(&r->st[i]->u.loop), sch_loop_name(&r->st[n - 1]->u.loop));

  bool moved = false;
  for (int i = 0; i < n; i++) {
    r->old_at[i] = &r->chain.stmts[r->pos[i]]->u.loop, r->new_at[i] = &r->st[i]->u.loop;
    moved |= r->old_at[i] != r->new_at[i];
  }
  if (!moved) return TN_OK;
  init_order_t c = {s->f, r->old_at, r->new_at, n, err, TN_OK};
  for_each_block(r->chain.stmts[r->pos[0]], init_order_visit, &c);
  if (c.rc < 0) return c.rc;

  /* Permute the loop headers along the chain; bodies stay where they are. */
  for (int i = 0; i < n; i++) r->hdr[i] = r->st[i]->u.loop;
  for (int i = 0; i < n; i++) {
    ir_loop_t *dst = &r->chain.stmts[r->pos[i]]->u.loop;
    ir_stmt_t *body = dst->body;
    *dst = r->hdr[i];
    dst->body = body;
  }
  return TN_OK;
}

int sch_prim_reorder(sch_t *s, const int *loop_uids, int n, tn_err_t *err) {
  if (n < 1 || n > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "%d loops given; expected 1..%d", n, SCH_MAX_RVS_OUT);
  reorder_t r = {.st = tn_xcalloc((size_t)n, sizeof *r.st),
                 .pos = tn_xcalloc((size_t)n, sizeof *r.pos),
                 .old_at = tn_xcalloc((size_t)n, sizeof *r.old_at),
                 .new_at = tn_xcalloc((size_t)n, sizeof *r.new_at),
                 .hdr = tn_xcalloc((size_t)n, sizeof *r.hdr)};
  int rc = reorder_apply(s, &r, loop_uids, n, err);
  free(r.st);
  free(r.pos);
  free(r.old_at);
  free(r.new_at);
  free(r.hdr);
  ir_path_free(&r.chain);
  return rc;
}

/* ---- loop kinds -------------------------------------------------------- */

/* Whether the new kind requires the loop to feed spatial iterators only
 * (threadIdx may feed a reduction: the cross-thread reduction form). */
static bool needs_spatial_only(ir_loop_kind_t kind, ir_thread_tag_t tag) {
  return kind == IR_LOOP_PARALLEL || kind == IR_LOOP_VECTORIZED ||
         (kind == IR_LOOP_THREAD && ir_thread_tag_class(tag) != IR_TAG_CLASS_THREAD);
}

typedef struct spatial_check {
  const ir_loop_t *l;
  const char *what; /* "parallel", "vectorized", "bound to blockIdx.x" */
  tn_err_t *err;
  int rc;
} spatial_check_t;

static bool spatial_visit(ir_block_t *b, void *p) {
  spatial_check_t *c = p;
  for (int i = 0; i < b->niters; i++) {
    if (b->iters[i].kind != IR_ITER_REDUCE || !ir_expr_uses_var(b->iters[i].binding, c->l->var)) continue;
    const char *buf = b->nwrites > 0 ? b->writes[0].buf->name : b->name;
    c->rc = tn_err_set(c->err, TN_EINVAL, "loop %s feeds the reduction iterator %s of block \"%s\"; a %s loop would "
                       "race on %s (only loops used by spatial iterators alone can be %s)", sch_loop_name(c->l),
                       b->iters[i].var->name, b->name, c->what, buf, c->what);
    return false;
  }
  return true;
}

static bool has_loop_visit(ir_stmt_t *s, void *p) {
  if (s->kind == IR_S_LOOP && !*(ir_loop_t **)p) *(ir_loop_t **)p = &s->u.loop;
  return !*(ir_loop_t **)p && s->kind != IR_S_STORE;
}

/* A loop in the subtree bound to `tag` (other than `self`), or NULL. */
typedef struct tag_find {
  ir_thread_tag_t tag;
  const ir_loop_t *self;
  int64_t extent; /* < 0: any extent; else: only a different extent */
  ir_loop_t *found;
} tag_find_t;

static bool tag_visit(ir_stmt_t *s, void *p) {
  tag_find_t *t = p;
  if (t->found) return false;
  if (s->kind == IR_S_LOOP && &s->u.loop != t->self && s->u.loop.kind == IR_LOOP_THREAD &&
      s->u.loop.tag == t->tag && (t->extent < 0 || s->u.loop.extent != t->extent))
    t->found = &s->u.loop;
  return !t->found && s->kind != IR_S_STORE;
}

static ir_loop_t *find_tag(ir_stmt_t *s, ir_thread_tag_t tag, const ir_loop_t *self, int64_t extent) {
  tag_find_t t = {tag, self, extent, NULL};
  ir_stmt_walk(s, tag_visit, &t);
  return t.found;
}

/* One kernel (the subtree of the outermost enclosing bound loop) binds each
 * tag with a single extent.  A threadIdx tag may be bound again inside a loop
 * bound to it with the same extent: that is the cooperative fetch, where the
 * inner loop names the same hardware thread (TVM allows it too).  Other tags
 * cannot be nested inside themselves. */
static int check_thread_nesting(const sch_path_t *p, const ir_loop_t *l, ir_thread_tag_t tag, tn_err_t *err) {
  bool relaxed = ir_thread_tag_class(tag) == IR_TAG_CLASS_THREAD;
  const char *name = ir_thread_tag_name(tag);
  ir_stmt_t *kernel = NULL;
  for (int i = 0; i < p->n - 1; i++) {
    const ir_loop_t *o = p->stmts[i]->kind == IR_S_LOOP ? &p->stmts[i]->u.loop : NULL;
    if (!o || o->kind != IR_LOOP_THREAD) continue;
    if (!kernel) kernel = p->stmts[i];
    if (o->tag == tag && !relaxed)
      return tn_err_set(err, TN_EINVAL, "loop %s is inside loop %s, which is already bound to %s; only threadIdx tags "
                        "can be bound again inside themselves", sch_loop_name(l), sch_loop_name(o), name);
  }
  const ir_loop_t *in = relaxed ? NULL : find_tag(l->body, tag, l, -1);
  if (in)
    return tn_err_set(err, TN_EINVAL, "loop %s encloses loop %s, which is already bound to %s; only threadIdx tags "
                      "can be bound again inside themselves", sch_loop_name(l), sch_loop_name(in), name);
  const ir_loop_t *other = find_tag(kernel ? kernel : l->body, tag, l, l->extent);
  if (other)
    return tn_err_set(err, TN_EINVAL, "loop %s (extent %lld) cannot be bound to %s: loop %s in the same kernel is "
                      "bound to it with extent %lld; one kernel binds a thread tag with one extent", sch_loop_name(l),
                      (long long)l->extent, name, sch_loop_name(other), (long long)other->extent);
  return TN_OK;
}

/* Checks the kind change itself: valid tag, not already something else. */
static int check_kind_change(const ir_loop_t *l, ir_loop_kind_t kind, const char *thread, ir_thread_tag_t *tag,
                             tn_err_t *err) {
  *tag = IR_TAG_NONE;
  if (kind == IR_LOOP_THREAD && ir_thread_tag_parse(thread, tag) < 0)
    return tn_err_set(err, TN_EINVAL, "unknown thread tag \"%s\" for loop %s (valid: %s)", thread ? thread : "(null)",
                      sch_loop_name(l), ir_thread_tag_list());
  bool fixed = l->kind == IR_LOOP_PARALLEL || l->kind == IR_LOOP_VECTORIZED || l->kind == IR_LOOP_THREAD;
  bool same = l->kind == kind && l->tag == *tag;
  if (fixed && !same) {
    char buf[64];
    return tn_err_set(err, TN_EINVAL, "loop %s is already %s; a parallel, vectorized or bound loop cannot change "
                      "its kind (split or fuse before binding)", sch_loop_name(l), kind_desc(l, buf, sizeof buf));
  }
  return TN_OK;
}

static int loop_kind_at(sch_t *s, sch_path_t *pp, int loop_uid, ir_loop_kind_t kind, const char *thread,
                        tn_err_t *err) {
  ir_loop_t *l = NULL;
  ir_thread_tag_t tag;
  int rc = get_loop(s->f, loop_uid, pp, &l, err);
  if (rc < 0 || (rc = check_kind_change(l, kind, thread, &tag, err)) < 0) return rc;
  if (needs_spatial_only(kind, tag)) {
    char what[64];
    if (kind == IR_LOOP_THREAD) snprintf(what, sizeof what, "%s-bound", thread);
    else snprintf(what, sizeof what, "%s", kind == IR_LOOP_PARALLEL ? "parallel" : "vectorized");
    spatial_check_t c = {l, what, err, TN_OK};
    for_each_block(l->body, spatial_visit, &c);
    if (c.rc < 0) return c.rc;
  }
  if (kind == IR_LOOP_VECTORIZED) {
    ir_loop_t *inner = NULL;
    ir_stmt_walk(l->body, has_loop_visit, &inner);
    if (inner)
      return tn_err_set(err, TN_EINVAL, "loop %s contains loop %s; only innermost loops can be vectorized",
                        sch_loop_name(l), sch_loop_name(inner));
  }
  if (kind == IR_LOOP_THREAD && (rc = check_thread_nesting(pp, l, tag, err)) < 0) return rc;
  l->kind = kind;
  l->tag = tag;
  return TN_OK;
}

int sch_prim_loop_kind(sch_t *s, int loop_uid, ir_loop_kind_t kind, const char *thread, tn_err_t *err) {
  sch_path_t p = {0};
  int rc = loop_kind_at(s, &p, loop_uid, kind, thread, err);
  ir_path_free(&p);
  return rc;
}

/* ---- annotations ------------------------------------------------------- */

typedef struct annot_target {
  ir_annot_t **annots;
  int *n;
  char what[96]; /* "loop i" or "block \"C\"" */
} annot_target_t;

static int get_annot_target(const ir_func_t *f, int uid, annot_target_t *t, tn_err_t *err) {
  ir_stmt_t *st = sch_find(f, uid);
  if (!st || (st->kind != IR_S_LOOP && st->kind != IR_S_BLOCK))
    return tn_err_set(err, TN_EINVAL, "the handle (uid %d) names no block or loop of the function", uid);
  if (st->kind == IR_S_LOOP) {
    t->annots = &st->u.loop.annots, t->n = &st->u.loop.nannots;
    snprintf(t->what, sizeof t->what, "loop %s", sch_loop_name(&st->u.loop));
  } else {
    t->annots = &st->u.block.annots, t->n = &st->u.block.nannots;
    snprintf(t->what, sizeof t->what, "block \"%s\"", st->u.block.name);
  }
  return TN_OK;
}

int sch_prim_annotate(sch_t *s, int uid, const char *key, const ir_annot_t *value, tn_err_t *err) {
  annot_target_t t;
  int rc = get_annot_target(s->f, uid, &t, err);
  if (rc < 0) return rc;
  if (!key || !*key) return tn_err_set(err, TN_EINVAL, "empty annotation key for %s; keys are non-empty strings", t.what);
  if (value->is_str && !value->sval)
    return tn_err_set(err, TN_EINVAL, "annotation \"%s\" on %s has a null string value", key, t.what);
  if (value->is_str) ir_annot_set_str(s->f, t.annots, t.n, key, value->sval);
  else ir_annot_set_int(s->f, t.annots, t.n, key, value->ival);
  return TN_OK;
}

int sch_prim_unannotate(sch_t *s, int uid, const char *key, tn_err_t *err) {
  annot_target_t t;
  int rc = get_annot_target(s->f, uid, &t, err);
  if (rc < 0) return rc;
  if (key && ir_annot_get(*t.annots, *t.n, key)) {
    ir_annot_remove(*t.annots, t.n, key);
    return TN_OK;
  }
  tn_buf_t keys;
  tn_buf_init(&keys);
  for (int i = 0; i < *t.n; i++) tn_buf_printf(&keys, "%s\"%s\"", i ? ", " : "", (*t.annots)[i].key);
  rc = tn_err_set(err, TN_EINVAL, "%s has no annotation \"%s\" (%s%s)", t.what, key ? key : "(null)",
                  *t.n ? "its annotations: " : "it has no annotations", tn_buf_str(&keys));
  tn_buf_free(&keys);
  return rc;
}
