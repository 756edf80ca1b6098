/* reduction.c — reduction primitives: decompose_reduction (split a block's
 * init into its own block and loop nest) and rfactor (reduce into a buffer
 * with an extra dimension per slice of a loop, then reduce that buffer). */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* ---- helpers ------------------------------------------------------------- */

static bool uses_any(const ir_expr_t *e, ir_var_t *const *vars, int n) {
  for (int i = 0; i < n; i++)
    if (ir_expr_uses_var(e, vars[i])) return true;
  return false;
}

/* The conjuncts of a predicate that use none of `drop` (NULL if none left):
 * a block that no longer runs under a loop keeps only what it can evaluate. */
static ir_expr_t *filter_predicate(ir_func_t *f, ir_expr_t *p, ir_var_t *const *drop, int n) {
  if (!p) return NULL;
  if (p->kind == IR_E_AND) {
    ir_expr_t *a = filter_predicate(f, p->u.bin.a, drop, n), *b = filter_predicate(f, p->u.bin.b, drop, n);
    if (a && b) return a == p->u.bin.a && b == p->u.bin.b ? p : ir_bin(f, IR_E_AND, a, b);
    return a ? a : b;
  }
  return uses_any(p, drop, n) ? NULL : p;
}

/* Puts `stmt` right before the statement held by path slot k (whose parent
 * is p->stmts[k - 1]): into the parent SEQ, or as a new two-item SEQ. */
static void insert_before(ir_func_t *f, const sch_path_t *p, int k, ir_stmt_t *stmt) {
  ir_stmt_t *parent = p->stmts[k - 1], **slot = p->slots[k];
  if (parent->kind != IR_S_SEQ) {
    ir_stmt_t *items[2] = {stmt, *slot};
    *slot = ir_seq(f, items, 2);
    return;
  }
  int n = parent->u.seq.n, at = (int)(slot - parent->u.seq.items);
  ir_stmt_t **items = TN_NEWN(f->arena, ir_stmt_t *, n + 1);
  memcpy(items, parent->u.seq.items, sizeof(ir_stmt_t *) * (size_t)at);
  items[at] = stmt;
  memcpy(items + at + 1, parent->u.seq.items + at, sizeof(ir_stmt_t *) * (size_t)(n - at));
  parent->u.seq.items = items;
  parent->u.seq.n = n + 1;
}

/* A loop like `l` (extent, kind, thread; annotations if asked) over a new
 * variable called name, around body. */
static ir_stmt_t *copy_loop(ir_func_t *f, const ir_loop_t *l, const char *name, bool annots, ir_stmt_t *body) {
  ir_stmt_t *s = ir_loop_new(f, ir_var_new(f, name, l->var->dtype), l->extent, body);
  s->u.loop.kind = l->kind;
  s->u.loop.tag = l->tag;
  if (annots && l->nannots) {
    s->u.loop.annots = tn_arena_memdup(f->arena, l->annots, sizeof(ir_annot_t) * (size_t)l->nannots);
    s->u.loop.nannots = l->nannots;
  }
  return s;
}

static void copy_block_annots(ir_func_t *f, ir_block_t *dst, const ir_block_t *src) {
  if (!src->nannots) return;
  dst->annots = tn_arena_memdup(f->arena, src->annots, sizeof(ir_annot_t) * (size_t)src->nannots);
  dst->nannots = src->nannots;
}

static ir_iter_t *iter_add(ir_func_t *f, ir_iter_t *iters, int *n, const char *name, int64_t extent,
                           ir_iter_kind_t kind, ir_expr_t *binding) {
  ir_iter_t *it = &iters[(*n)++];
  it->var = ir_var_new(f, name, IR_INT32);
  it->extent = extent;
  it->kind = kind;
  it->binding = binding;
  return it;
}

static ir_stmt_t *store_subst(ir_func_t *f, const ir_stmt_t *st, ir_var_t *const *from, ir_expr_t *const *to,
                              int n) {
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int d = 0; d < st->u.store.n; d++) idx[d] = ir_expr_subst(f, st->u.store.idx[d], from, to, n);
  return ir_store(f, st->u.store.buf, idx, st->u.store.n, ir_expr_subst(f, st->u.store.value, from, to, n));
}

/* Substitutes loop variables in a block's bindings and predicate (a loop
 * nest being built is not in the tree yet, so sch_rebind cannot reach it). */
static void block_rebind(ir_func_t *f, ir_block_t *b, ir_var_t *const *from, ir_expr_t *const *to, int n) {
  for (int i = 0; i < b->niters; i++) b->iters[i].binding = ir_expr_subst(f, b->iters[i].binding, from, to, n);
  b->predicate = ir_expr_subst(f, b->predicate, from, to, n);
}

/* The loops around a block (outermost first) and the path to it, with each
 * loop's position in the path. */
typedef struct nest {
  ir_loop_t **loops; /* malloc'ed, like pos and the path: nest_free */
  int *pos;
  int n;
  sch_path_t path;
} nest_t;

static void get_nest(const ir_func_t *f, const ir_block_t *b, nest_t *ns) {
  ns->n = ir_enclosing_loops(f, b->uid, &ns->loops);
  ns->pos = tn_xmalloc(sizeof ns->pos[0] * (size_t)(ns->n + 1));
  ns->path = (sch_path_t){0};
  sch_find_path(f, b->uid, &ns->path);
  for (int i = 0, k = 0; i < ns->n; i++) {
    while (k < ns->path.n && &ns->path.stmts[k]->u.loop != ns->loops[i]) k++;
    ns->pos[i] = k;
  }
}

static void nest_free(nest_t *ns) {
  free(ns->loops);
  free(ns->pos);
  ir_path_free(&ns->path);
}

/* Which iterator kinds of b a loop variable feeds (bit 1 spatial, bit 2
 * reduction); `which` names one such iterator. */
static int loop_feeds(const ir_block_t *b, const ir_loop_t *l, ir_iter_kind_t want, const char **which) {
  int mask = 0;
  for (int i = 0; i < b->niters; i++)
    if (ir_expr_uses_var(b->iters[i].binding, l->var)) {
      mask |= b->iters[i].kind == IR_ITER_SPATIAL ? 1 : 2;
      if (which && b->iters[i].kind == want) *which = b->iters[i].var->name;
    }
  return mask;
}

/* ---- decompose_reduction ------------------------------------------------- */

static int check_decompose(const ir_block_t *b, const ir_loop_t *loop, const nest_t *ns, int *at,
                           tn_err_t *err) {
  if (!b->init || b->init->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has no init; decompose_reduction needs a reduction block", b->name);
  if (b->niters > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EUNSUPPORTED, "block \"%s\" has %d iterators, more than %d", b->name, b->niters,
                      SCH_MAX_RVS_OUT);
  *at = -1;
  for (int i = 0; i < ns->n; i++)
    if (ns->loops[i] == loop) *at = i;
  if (*at < 0)
    return tn_err_set(err, TN_EINVAL, "loop %s is not an ancestor of block \"%s\"", sch_loop_name(loop), b->name);
  for (int i = 0; i < *at; i++) {
    const char *iter = "?";
    if (loop_feeds(b, ns->loops[i], IR_ITER_REDUCE, &iter) & 2)
      return tn_err_set(err, TN_EINVAL, "loop %s, outside loop %s, feeds reduction iterator %s of block \"%s\"; "
                        "decompose_reduction needs a loop at or above every reduction loop", sch_loop_name(ns->loops[i]),
                        sch_loop_name(loop), iter, b->name);
  }
  return TN_OK;
}

/* The init block: b's spatial iterators (renamed *_init, same bindings)
 * around b's init store. */
static ir_stmt_t *make_init_block(ir_func_t *f, const ir_block_t *b) {
  ir_stmt_t *s = ir_block_new(f, tn_arena_printf(f->arena, "%s_init", b->name));
  ir_block_t *ib = &s->u.block;
  ib->iters = TN_NEWN(f->arena, ir_iter_t, b->niters ? b->niters : 1);
  ir_var_t *from[SCH_MAX_RVS_OUT];
  ir_expr_t *to[SCH_MAX_RVS_OUT];
  int n = 0;
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    if (it->kind != IR_ITER_SPATIAL) continue;
    ir_iter_t *ni = iter_add(f, ib->iters, &ib->niters, tn_arena_printf(f->arena, "%s_init", it->var->name), it->extent,
                             IR_ITER_SPATIAL, it->binding);
    from[n] = it->var;
    to[n++] = ir_varref(f, ni->var);
  }
  ib->init = NULL;
  ib->body = store_subst(f, b->init, from, to, n);
  ib->predicate = b->predicate;
  copy_block_annots(f, ib, b);
  return s;
}

/* Wraps the init block in copies (named *_init) of the loops from ns->loops[at]
 * inwards that feed its bindings; the others are dropped, with the predicate
 * terms that mention them. */
static ir_stmt_t *init_nest(ir_func_t *f, ir_stmt_t *init, const nest_t *ns, int at) {
  ir_block_t *ib = &init->u.block;
  size_t cap = (size_t)(ns->n + 1);
  ir_var_t **from = tn_xmalloc(sizeof from[0] * cap), **dropped = tn_xmalloc(sizeof dropped[0] * cap);
  ir_expr_t **to = tn_xmalloc(sizeof to[0] * cap);
  int nmap = 0, ndrop = 0;
  ir_stmt_t *body = init;
  for (int i = ns->n - 1; i >= at; i--) {
    ir_loop_t *l = ns->loops[i];
    bool used = false;
    for (int k = 0; k < ib->niters; k++) used |= ir_expr_uses_var(ib->iters[k].binding, l->var);
    if (!used) {
      dropped[ndrop++] = l->var;
      continue;
    }
    body = copy_loop(f, l, tn_arena_printf(f->arena, "%s_init", l->var->name), false, body);
    from[nmap] = l->var;
    to[nmap++] = ir_varref(f, body->u.loop.var);
  }
  ib->predicate = filter_predicate(f, ib->predicate, dropped, ndrop);
  block_rebind(f, ib, from, to, nmap);
  free(from);
  free(dropped);
  free(to);
  return body;
}

int sch_prim_decompose_reduction(sch_t *s, int block_uid, int loop_uid, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b = sch_find_block(f, block_uid);
  ir_loop_t *loop = sch_find_loop(f, loop_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (!loop) return tn_err_set(err, TN_EINVAL, "the loop no longer exists");
  nest_t ns;
  get_nest(f, b, &ns);
  int at = -1, rc;
  if ((rc = check_decompose(b, loop, &ns, &at, err)) < 0) {
    nest_free(&ns);
    return rc;
  }
  ir_stmt_t *init = make_init_block(f, b);
  insert_before(f, &ns.path, ns.pos[at], init_nest(f, init, &ns, at));
  nest_free(&ns);
  b->init = NULL;
  b->name = tn_arena_printf(f->arena, "%s_update", b->name);
  ir_block_infer_regions(f, &init->u.block);
  ir_block_infer_regions(f, b);
  *out = init->u.block.uid;
  return TN_OK;
}

/* ---- rfactor ------------------------------------------------------------- */

/* A reduction block's pattern: init C[idx] = identity; body C[idx] =
 * C[idx] op rhs (or rhs op C[idx]). */
typedef struct reduction {
  ir_buffer_t *buf;
  ir_expr_t **idx;
  int n;
  ir_expr_kind_t op;
  ir_expr_t *self, *rhs; /* the C[idx] load and the other operand */
  bool self_first;
} reduction_t;

static bool same_access(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

static bool is_self_load(const ir_expr_t *e, const ir_stmt_t *st) {
  return e->kind == IR_E_LOAD && e->u.load.buf == st->u.store.buf && same_access(e->u.load.idx, st->u.store.idx, st->u.store.n);
}

static bool is_identity(const ir_expr_t *e, ir_expr_kind_t op, ir_dtype_t t) {
  double v;
  if (e->kind == IR_E_FLOAT) v = e->u.fval;
  else if (e->kind == IR_E_INT) v = (double)e->u.ival;
  else return false;
  return op == IR_E_ADD ? v == 0 : op == IR_E_MAX ? v <= ir_dtype_min_value(t) : v >= ir_dtype_max_value(t);
}

static int match_reduction(const ir_block_t *b, reduction_t *r, tn_err_t *err) {
  const ir_stmt_t *body = b->body, *init = b->init;
  if (!init || init->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has no init; rfactor needs a reduction block", b->name);
  if (!body || body->kind != IR_S_STORE || init->u.store.buf != body->u.store.buf ||
      !same_access(init->u.store.idx, body->u.store.idx, body->u.store.n))
    return tn_err_set(err, TN_EINVAL, "the init and the body of block \"%s\" do not store to the same element",
                      b->name);
  ir_expr_t *v = body->u.store.value;
  bool op_ok = v->kind == IR_E_ADD || v->kind == IR_E_MAX || v->kind == IR_E_MIN;
  bool a_self = op_ok && is_self_load(v->u.bin.a, body), b_self = op_ok && is_self_load(v->u.bin.b, body);
  if (a_self == b_self)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" does not update %s as %s = %s + x, max(%s, x) or min(%s, x)",
                      b->name, body->u.store.buf->name, body->u.store.buf->name, body->u.store.buf->name,
                      body->u.store.buf->name, body->u.store.buf->name);
  *r = (reduction_t){body->u.store.buf, body->u.store.idx, body->u.store.n, v->kind,
                     a_self ? v->u.bin.a : v->u.bin.b, a_self ? v->u.bin.b : v->u.bin.a, a_self};
  if (ir_block_reads(b, r->buf))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %s other than in its update", b->name, r->buf->name);
  if (!is_identity(init->u.store.value, r->op, r->buf->dtype))
    return tn_err_set(err, TN_EINVAL, "the init of block \"%s\" is not the identity of its reduction", b->name);
  return TN_OK;
}

/* TVM's loop conditions: the rfactor loop feeds reduction iterators only; no
 * loop feeds both kinds; b is the first block under the outermost loop; the
 * outermost reduction loop holds b alone; no unbound loop longer than 1 sits
 * under a reduction loop. */
static int check_rfactor_loops(const ir_block_t *b, const ir_loop_t *rl, const nest_t *ns, tn_err_t *err) {
  ir_block_t *first[1];
  if (ns->n == 0 || ir_collect_blocks(ns->loops[0]->body, true, first, 1) < 1 || first[0] != b)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not the first block under its outermost loop", b->name);
  bool seen_reduce = false, found = false;
  for (int i = 0; i < ns->n; i++) found |= ns->loops[i] == rl;
  if (!found)
    return tn_err_set(err, TN_EINVAL, "loop %s is not in the loop nest of block \"%s\" inside its scope",
                      sch_loop_name(rl), b->name);
  for (int i = 0; i < ns->n; i++) {
    const ir_loop_t *l = ns->loops[i];
    const char *iter = "?";
    int feeds = loop_feeds(b, l, IR_ITER_SPATIAL, &iter);
    if (feeds == 3)
      return tn_err_set(err, TN_EINVAL, "loop %s feeds both spatial and reduction iterators of block \"%s\"",
                        sch_loop_name(l), b->name);
    if (feeds == 1 && l == rl)
      return tn_err_set(err, TN_EINVAL, "loop %s feeds spatial iterator %s of block \"%s\"; rfactor needs a loop that "
                        "feeds only reduction iterators", sch_loop_name(l), iter, b->name);
    if (feeds == 0 && l == rl)
      return tn_err_set(err, TN_EINVAL, "loop %s feeds no reduction iterator of block \"%s\"", sch_loop_name(l), b->name);
    if (feeds == 2 && !seen_reduce) {
      ir_block_t *under[2];
      int nb = ir_collect_blocks(l->body, false, under, 2);
      if (nb != 1)
        return tn_err_set(err, TN_EINVAL, "reduction loop %s holds %d blocks; rfactor needs block \"%s\" alone under "
                          "its outermost reduction loop", sch_loop_name(l), nb, b->name);
      seen_reduce = true;
    }
    if (feeds == 0 && seen_reduce && l->extent != 1)
      return tn_err_set(err, TN_EINVAL, "loop %s (extent %lld) feeds no iterator of block \"%s\" but sits under a "
                        "reduction loop", sch_loop_name(l), (long long)l->extent, b->name);
  }
  return TN_OK;
}

/* Whether conjunct c is an upper bound that only grows with the variables
 * `vars` (lhs < rhs or lhs <= rhs, lhs affine with coefficients >= 0 in
 * them, rhs with coefficients <= 0): then it holds for some values of them
 * exactly when it holds with all of them 0 (a split's guard, k_0*3 + k_1 < 16). */
static bool monotone_bound(const ir_expr_t *c, ir_var_t *const *vars, int n) {
  if (c->kind != IR_E_LT && c->kind != IR_E_LE) return false;
  for (int i = 0; i < n; i++) {
    int64_t cl, cr;
    if (!ir_affine_coef_of(c->u.bin.a, vars[i], 0, &cl) || !ir_affine_coef_of(c->u.bin.b, vars[i], 0, &cr) || cl < 0 ||
        cr > 0)
      return false;
  }
  return true;
}

/* Whether every conjunct of p that ties the rfactor loop's variable rv to
 * the removed reduction loops' `removed` is a monotone_bound in them. */
static bool ties_bounded(const ir_expr_t *p, const ir_var_t *rv, ir_var_t *const *removed, int n) {
  if (!p) return true;
  if (p->kind == IR_E_AND) return ties_bounded(p->u.bin.a, rv, removed, n) && ties_bounded(p->u.bin.b, rv, removed, n);
  return !(ir_expr_uses_var(p, rv) && uses_any(p, removed, n)) || monotone_bound(p, removed, n);
}

/* The write-back's predicate: b's conjuncts without the removed loops; one
 * that ties the rfactor loop to them (an imperfect split's guard) keeps
 * them at 0, so the write-back skips the rows of the rfactor buffer that no
 * reduction instance writes (k_0 * 3 < 16: k_0 = 6 has none of k_0*3 + k_1 <
 * 16) instead of adding rows that were never initialised. */
static ir_expr_t *write_back_predicate(ir_func_t *f, ir_expr_t *p, const ir_var_t *rv, ir_var_t *const *removed,
                                       int n) {
  if (!p) return NULL;
  if (p->kind == IR_E_AND) {
    ir_expr_t *a = write_back_predicate(f, p->u.bin.a, rv, removed, n);
    ir_expr_t *b = write_back_predicate(f, p->u.bin.b, rv, removed, n);
    if (a && b) return a == p->u.bin.a && b == p->u.bin.b ? p : ir_bin(f, IR_E_AND, a, b);
    return a ? a : b;
  }
  if (!uses_any(p, removed, n)) return p;
  if (!ir_expr_uses_var(p, rv)) return NULL;
  ir_expr_t **zero = tn_xmalloc(sizeof zero[0] * (size_t)n);
  for (int i = 0; i < n; i++) zero[i] = ir_const_int(f, removed[i]->dtype, 0);
  ir_expr_t *q = ir_simplify(f, ir_expr_subst(f, p, removed, zero, n), NULL);
  free(zero);
  return q;
}

/* The removed reduction loops' variables of an rfactor over rl (malloc'ed). */
static ir_var_t **removed_vars(const ir_block_t *b, const ir_loop_t *rl, const nest_t *ns, int *n) {
  ir_var_t **v = tn_xmalloc(sizeof v[0] * (size_t)(ns->n + 1));
  *n = 0;
  for (int i = ns->n - 1; i >= 0; i--)
    if (ns->loops[i] != rl && (loop_feeds(b, ns->loops[i], IR_ITER_REDUCE, NULL) & 2)) v[(*n)++] = ns->loops[i]->var;
  return v;
}

/* A predicate tie between the rfactor loop and the other reduction loops
 * that is not a monotone bound: which rows of the rfactor buffer some
 * instance writes cannot be told, and the write-back would add in the others. */
static int check_rfactor_predicate(const ir_block_t *b, const ir_loop_t *rl, const nest_t *ns, tn_err_t *err) {
  int n;
  ir_var_t **removed = removed_vars(b, rl, ns, &n);
  bool ok = ties_bounded(b->predicate, rl->var, removed, n);
  free(removed);
  if (ok) return 0;
  return tn_err_set(err, TN_EINVAL, "block \"%s\" runs under a predicate that ties loop %s to its other reduction "
                    "loops other than as an upper bound: rfactor over %s could not tell which rows of the rfactor "
                    "buffer no iteration writes", b->name, sch_loop_name(rl), sch_loop_name(rl));
}

static int check_rfactor(const ir_func_t *f, const ir_loop_t *rl, ir_stmt_t *ls, int *axis, ir_block_t **blk,
                         reduction_t *red, nest_t *ns, tn_err_t *err) {
  if (rl->kind != IR_LOOP_SERIAL)
    return tn_err_set(err, TN_EINVAL, "loop %s has kind %s; rfactor needs a serial loop", sch_loop_name(rl),
                      ir_loop_kind_name(rl->kind));
  ir_block_t *under[2];
  int nb = ir_collect_blocks(ls, false, under, 2);
  if (nb != 1)
    return tn_err_set(err, TN_EINVAL, "loop %s holds %d blocks; rfactor needs exactly one reduction block under it",
                      sch_loop_name(rl), nb);
  ir_block_t *b = *blk = under[0];
  int rc;
  if (b->niters > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EUNSUPPORTED, "block \"%s\" has %d iterators, more than %d", b->name, b->niters,
                      SCH_MAX_RVS_OUT);
  if ((rc = match_reduction(b, red, err)) < 0) return rc;
  get_nest(f, b, ns);
  if ((rc = check_rfactor_loops(b, rl, ns, err)) < 0) return rc;
  if ((rc = check_rfactor_predicate(b, rl, ns, err)) < 0) return rc;
  int ndim = red->buf->ndim;
  if (*axis < -(ndim + 1) || *axis > ndim)
    return tn_err_set(err, TN_EINVAL, "factor_axis %d is out of range for %s (%d dimensions): expected %d..%d", *axis,
                      red->buf->name, ndim, -(ndim + 1), ndim);
  if (ndim + 1 > IR_MAX_DIMS)
    return tn_err_set(err, TN_EUNSUPPORTED, "%s already has %d dimensions, the most a buffer may have", red->buf->name,
                      ndim);
  if (*axis < 0) *axis += ndim + 1;
  return TN_OK;
}

/* `indices` with `extra` inserted at position axis. */
static void insert_index(ir_expr_t *const *idx, int n, int axis, ir_expr_t *extra, ir_expr_t **out) {
  for (int d = 0, k = 0; d <= n; d++) out[d] = d == axis ? extra : idx[k++];
}

static ir_expr_t *combine(ir_func_t *f, const reduction_t *r, ir_expr_t *acc, ir_expr_t *x) {
  return r->self_first ? ir_bin(f, r->op, acc, x) : ir_bin(f, r->op, x, acc);
}

/* Variable substitution being built: from[i] := to[i]. */
typedef struct var_map {
  ir_var_t **from; /* grow together; map_free */
  ir_expr_t **to;
  int n, cap;
} var_map_t;

static bool map_has(const var_map_t *m, const ir_var_t *v) {
  for (int i = 0; i < m->n; i++)
    if (m->from[i] == v) return true;
  return false;
}

static void map_add(var_map_t *m, ir_var_t *from, ir_expr_t *to) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 16;
    m->from = tn_xrealloc(m->from, sizeof m->from[0] * (size_t)m->cap);
    m->to = tn_xrealloc(m->to, sizeof m->to[0] * (size_t)m->cap);
  }
  m->from[m->n] = from;
  m->to[m->n++] = to;
}

static void map_free(var_map_t *m) {
  free(m->from);
  free(m->to);
}

/* The rfactor block's iterators (TVM's algorithm): v_<rl> (spatial) for the
 * rfactor loop first; then b's iterators, except that a reduction iterator
 * fed by the rfactor loop is replaced by one reduction iterator per loop of
 * its binding.  Fills `old` with b's iterator variables := their new form. */
static void rf_iters(ir_func_t *f, ir_block_t *rb, const ir_block_t *b, const ir_loop_t *rl, const nest_t *ns,
                     var_map_t *old) {
  var_map_t lv = {.n = 0}; /* loop var := new iterator */
  rb->iters = TN_NEWN(f->arena, ir_iter_t, b->niters + ns->n + 1);
  ir_iter_t *extra = iter_add(f, rb->iters, &rb->niters, tn_arena_printf(f->arena, "v_%s", rl->var->name), rl->extent,
                              IR_ITER_SPATIAL, ir_varref(f, rl->var));
  map_add(&lv, rl->var, ir_varref(f, extra->var));
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    if (it->kind == IR_ITER_SPATIAL || !ir_expr_uses_var(it->binding, rl->var)) {
      ir_iter_t *ni = iter_add(f, rb->iters, &rb->niters, it->var->name, it->extent, it->kind, it->binding);
      map_add(old, it->var, ir_varref(f, ni->var));
      continue;
    }
    for (int k = 0; k < ns->n; k++) {
      const ir_loop_t *l = ns->loops[k];
      if (!ir_expr_uses_var(it->binding, l->var) || map_has(&lv, l->var)) continue;
      ir_iter_t *ni = iter_add(f, rb->iters, &rb->niters, tn_arena_printf(f->arena, "v_%s", l->var->name), l->extent,
                               IR_ITER_REDUCE, ir_varref(f, l->var));
      map_add(&lv, l->var, ir_varref(f, ni->var));
    }
    map_add(old, it->var, ir_expr_subst(f, it->binding, lv.from, lv.to, lv.n));
  }
  map_free(&lv);
}

/* The rfactor block C_rf[..., v_<rl>, ...] op= rhs, wrapped in copies of all
 * of b's loops. */
static ir_stmt_t *make_rf_nest(ir_func_t *f, const ir_block_t *b, const ir_loop_t *rl, const nest_t *ns,
                               const reduction_t *red, ir_buffer_t *rf, int axis, ir_block_t **out) {
  ir_stmt_t *s = ir_block_new(f, tn_arena_printf(f->arena, "%s_rf", b->name));
  ir_block_t *rb = &s->u.block;
  var_map_t old = {.n = 0};
  rf_iters(f, rb, b, rl, ns, &old);
  ir_expr_t *cidx[IR_MAX_DIMS], *idx[IR_MAX_DIMS];
  for (int d = 0; d < red->n; d++) cidx[d] = ir_expr_subst(f, red->idx[d], old.from, old.to, old.n);
  insert_index(cidx, red->n, axis, ir_varref(f, rb->iters[0].var), idx);
  ir_expr_t *acc = ir_load(f, rf, idx, red->n + 1);
  rb->body = ir_store(f, rf, idx, red->n + 1, combine(f, red, acc, ir_expr_subst(f, red->rhs, old.from, old.to, old.n)));
  map_free(&old);
  rb->init = ir_store(f, rf, idx, red->n + 1, b->init->u.store.value);
  rb->predicate = b->predicate;
  copy_block_annots(f, rb, b);
  ir_block_infer_regions(f, rb);
  var_map_t lv = {.n = 0};
  ir_stmt_t *body = s;
  for (int i = ns->n - 1; i >= 0; i--) {
    body = copy_loop(f, ns->loops[i], ns->loops[i]->var->name, true, body);
    map_add(&lv, ns->loops[i]->var, ir_varref(f, body->u.loop.var));
  }
  block_rebind(f, rb, lv.from, lv.to, lv.n);
  map_free(&lv);
  *out = rb;
  return body;
}

/* Turns b into the write-back block C[idx] op= C_rf[..., v_<rl>, ...] over
 * the rfactor loop and b's spatial loops; removes b's other reduction loops. */
static void make_write_back(ir_func_t *f, ir_block_t *b, const ir_loop_t *rl, nest_t *ns, const reduction_t *red,
                            ir_buffer_t *rf, int axis) {
  ir_var_t **removed = tn_xmalloc(sizeof removed[0] * (size_t)(ns->n + 1));
  int nrem = 0;
  for (int i = ns->n - 1; i >= 0; i--) {
    ir_loop_t *l = ns->loops[i];
    if (l == rl || !(loop_feeds(b, l, IR_ITER_REDUCE, NULL) & 2)) continue;
    removed[nrem++] = l->var;
    *ns->path.slots[ns->pos[i]] = l->body;
  }
  b->predicate = write_back_predicate(f, b->predicate, rl->var, removed, nrem);
  free(removed);
  ir_iter_t *iters = TN_NEWN(f->arena, ir_iter_t, b->niters + 1);
  int n = 0;
  ir_iter_t *extra = iter_add(f, iters, &n, tn_arena_printf(f->arena, "v_%s", rl->var->name), rl->extent,
                              IR_ITER_REDUCE, ir_varref(f, rl->var));
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_SPATIAL) iters[n++] = b->iters[i];
  b->iters = iters;
  b->niters = n;
  ir_expr_t *idx[IR_MAX_DIMS];
  insert_index(red->idx, red->n, axis, ir_varref(f, extra->var), idx);
  b->body = ir_store(f, red->buf, red->idx, red->n, combine(f, red, red->self, ir_load(f, rf, idx, red->n + 1)));
  ir_block_infer_regions(f, b);
}

static ir_buffer_t *make_rf_buffer(ir_func_t *f, const ir_buffer_t *c, int axis, int64_t extent) {
  int64_t shape[IR_MAX_DIMS];
  for (int d = 0, k = 0; d <= c->ndim; d++) shape[d] = d == axis ? extent : c->shape[k++];
  return ir_buffer_new(f, tn_arena_printf(f->arena, "%s_rf", c->name), c->dtype, c->ndim + 1, shape, c->scope,
                       IR_BUF_TEMP);
}

static void add_alloc(ir_func_t *f, ir_block_t *scope, ir_buffer_t *buf) {
  ir_buffer_t **a = TN_NEWN(f->arena, ir_buffer_t *, scope->nallocs + 1);
  if (scope->nallocs) memcpy(a, scope->allocs, sizeof(ir_buffer_t *) * (size_t)scope->nallocs);
  a[scope->nallocs] = buf;
  scope->allocs = a;
  scope->nallocs++;
}

int sch_prim_rfactor(sch_t *s, int loop_uid, int factor_axis, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_stmt_t *ls = sch_find(f, loop_uid);
  if (!ls || ls->kind != IR_S_LOOP) return tn_err_set(err, TN_EINVAL, "the loop no longer exists");
  ir_loop_t *rl = &ls->u.loop;
  ir_block_t *b = NULL, *rb = NULL;
  reduction_t red = {.buf = NULL};
  nest_t ns = {0};
  int rc = check_rfactor(f, rl, ls, &factor_axis, &b, &red, &ns, err);
  if (rc < 0) {
    nest_free(&ns);
    return rc;
  }
  ir_buffer_t *rf = make_rf_buffer(f, red.buf, factor_axis, rl->extent);
  add_alloc(f, ir_scope_block(f, b->uid), rf);
  ir_stmt_t *rf_nest = make_rf_nest(f, b, rl, &ns, &red, rf, factor_axis, &rb);
  make_write_back(f, b, rl, &ns, &red, rf, factor_axis);
  insert_before(f, &ns.path, ns.pos[0], rf_nest);
  nest_free(&ns);
  *out = rb->uid;
  return TN_OK;
}
