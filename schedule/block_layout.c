/* block_layout.c — fuse_block_iters: consecutive iterators of one kind of a
 * block become one, the loops they are bound to fused with them: the part
 * of TVM's transform_block_layout that makes a convolution, once reindex
 * has laid its operands out over its iterators, a GEMM — (n, h, w) -> M and
 * (rh, rw, ci) -> K.  The temporaries the block accesses at those iterators
 * (the reindexed operands) get those dimensions merged, so that the block
 * still reads them at its plain iterators, as the GEMM rules and code
 * generators want them. */
#include <string.h>

#include "sch_internal.h"

/* The position p at which idx[p .. p + n) are the plain variables vs[0 .. n), or -1. */
static int run_at(ir_expr_t *const *idx, int nidx, ir_var_t *const *vs, int n) {
  for (int p = 0; p + n <= nidx; p++) {
    int d = 0;
    while (d < n && idx[p + d]->kind == IR_E_VAR && idx[p + d]->u.var == vs[d]) d++;
    if (d == n) return p;
  }
  return -1;
}

/* Folds into *pos where e's accesses of x have the run (-2: none met yet, -1: not all at one place). */
static void note_run(const ir_expr_t *e, const ir_buffer_t *x, ir_var_t *const *vs, int n, int *pos) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == x) {
    int p = run_at(e->u.load.idx, e->u.load.n, vs, n);
    *pos = *pos == -2 || *pos == p ? p : -1;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++) note_run(kids[i], x, vs, n, pos);
}

/* Where the block accesses x with the run vs (the same place in every access), or -1. */
static int block_run(const ir_block_t *b, const ir_buffer_t *x, ir_var_t *const *vs, int n) {
  int pos = -2;
  const ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2; i++) {
    const ir_stmt_t *st = sts[i];
    if (!st) continue;
    note_run(st->u.store.value, x, vs, n, &pos);
    for (int d = 0; d < st->u.store.n; d++) note_run(st->u.store.idx[d], x, vs, n, &pos);
    if (st->u.store.buf == x) {
      int p = run_at(st->u.store.idx, st->u.store.n, vs, n);
      pos = pos == -2 || pos == p ? p : -1;
    }
  }
  return pos < 0 ? -1 : pos;
}

static bool region_has(const ir_region_t *rs, int n, const ir_buffer_t *x) {
  for (int i = 0; i < n; i++)
    if (rs[i].buf == x) return true;
  return false;
}

typedef struct merge {
  ir_func_t *f;
  const ir_buffer_t *x; /* the temporary whose dimensions pos .. pos + n merge */
  int pos, n;
  const int64_t *ext; /* the extents of those dimensions */
  const ir_block_t *blk; /* the fused block: there the merged index is `fused` */
  ir_expr_t *fused;
  bool in_blk;
  bool ok; /* (check) only compute blocks access x, none aligning its storage */
} merge_t;

static bool check_users(ir_stmt_t *s, void *p) {
  merge_t *m = p;
  if (s->kind != IR_S_BLOCK) return true;
  const ir_block_t *b = &s->u.block;
  bool uses = region_has(b->reads, b->nreads, m->x) || region_has(b->writes, b->nwrites, m->x);
  if (uses && (!b->body || b->body->kind != IR_S_STORE)) m->ok = false;
  if (region_has(b->writes, b->nwrites, m->x) && ir_annot_get(b->annots, b->nannots, IR_ANN_STORAGE_ALIGN))
    m->ok = false;
  return true;
}

/* idx with dimensions pos .. pos + n merged: the fused iterator in the
 * fused block, the row-major linearisation elsewhere. */
static ir_expr_t **merged_index(const merge_t *m, ir_expr_t *const *idx, int nidx) {
  ir_func_t *f = m->f;
  ir_expr_t **out = TN_NEWN(f->arena, ir_expr_t *, nidx);
  ir_expr_t *lin = idx[m->pos];
  for (int d = 1; d < m->n; d++)
    lin = ir_bin(f, IR_E_ADD, ir_bin(f, IR_E_MUL, lin, ir_int(f, m->ext[d])), idx[m->pos + d]);
  int k = 0;
  for (int d = 0; d < m->pos; d++) out[k++] = idx[d];
  out[k++] = m->in_blk ? m->fused : lin;
  for (int d = m->pos + m->n; d < nidx; d++) out[k++] = idx[d];
  return out;
}

static ir_expr_t *merge_load(ir_func_t *f, ir_expr_t *load, void *p) {
  const merge_t *m = p;
  if (load->u.load.buf != m->x) return load;
  return ir_load(f, load->u.load.buf, merged_index(m, load->u.load.idx, load->u.load.n), load->u.load.n - m->n + 1);
}

/* Rewrites the accesses of x in every compute block (their regions inferred again). */
static bool merge_visit(ir_stmt_t *s, void *p) {
  merge_t *m = p;
  if (s->kind != IR_S_BLOCK) return true;
  ir_block_t *b = &s->u.block;
  ir_func_t *f = m->f;
  m->in_blk = b == m->blk;
  for (int i = 0; i < b->niters; i++) b->iters[i].binding = sch_map_loads(f, b->iters[i].binding, merge_load, m);
  b->predicate = sch_map_loads(f, b->predicate, merge_load, m);
  if (!b->body || b->body->kind != IR_S_STORE) return true;
  bool uses = region_has(b->reads, b->nreads, m->x) || region_has(b->writes, b->nwrites, m->x);
  ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2 && uses; i++) {
    ir_stmt_t *st = sts[i];
    if (!st) continue;
    for (int d = 0; d < st->u.store.n; d++) st->u.store.idx[d] = sch_map_loads(f, st->u.store.idx[d], merge_load, m);
    st->u.store.value = sch_map_loads(f, st->u.store.value, merge_load, m);
    if (st->u.store.buf == m->x) {
      st->u.store.idx = merged_index(m, st->u.store.idx, st->u.store.n);
      st->u.store.n -= m->n - 1;
    }
  }
  if (uses && !m->in_blk) ir_block_infer_regions(f, b); /* the fused block's, once its iterators are */
  return false;
}

/* x's dimensions pos .. pos + n become one, in its shape and every access. */
static void merge_dims(ir_func_t *f, ir_buffer_t *x, int pos, int n, const ir_block_t *blk, ir_expr_t *fused) {
  merge_t m = {f, x, pos, n, x->shape + pos, blk, fused, false, true};
  int64_t *shape = TN_NEWN(f->arena, int64_t, x->ndim - n + 1);
  int k = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d > pos && d < pos + n) shape[k - 1] *= x->shape[d];
    else shape[k++] = x->shape[d];
  }
  x->shape = shape; /* the regions are inferred over the new shape */
  x->ndim = k;
  ir_stmt_walk(f->root, merge_visit, &m);
}

static ir_expr_t *simplify_load(ir_func_t *f, ir_expr_t *load, void *bounds) {
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int d = 0; d < load->u.load.n; d++) idx[d] = ir_simplify(f, load->u.load.idx[d], bounds);
  return ir_load(f, load->u.load.buf, idx, load->u.load.n);
}

static bool binds_var(const ir_block_t *b, const ir_var_t *v) {
  for (int t = 0; t < b->niters; t++)
    if (ir_expr_uses_var(b->iters[t].binding, v)) return true;
  return false;
}

/* The loops (their uids, *nloops) the iterators first .. first + n - 1 are
 * bound to, checking they are plain bindings to loops of their extents
 * nested directly in the iterators' order.  An iterator of extent 1 may be
 * bound to 0 instead (simplification makes a unit loop's variable 0): as
 * many unit loops directly above the first loop that bind nothing of the
 * block are taken for those, so that no unit loop is left over the fused
 * one. */
static int bound_loops(const ir_func_t *f, const ir_block_t *b, int first, int n, int *uids, int *nloops,
                       tn_err_t *err) {
  sch_path_t p = {0};
  sch_find_path(f, b->uid, &p);
  int rc = TN_OK, at = -1, prev = -1, top = -1, unbound = 0;
  *nloops = 0;
  for (int t = first; t < first + n && rc == TN_OK; t++) {
    const ir_iter_t *it = &b->iters[t];
    if (it->extent == 1 && it->binding->kind != IR_E_VAR) {
      unbound++;
      continue;
    }
    int i = 0;
    while (i < p.n && !(it->binding->kind == IR_E_VAR && p.stmts[i]->kind == IR_S_LOOP &&
                        p.stmts[i]->u.loop.var == it->binding->u.var))
      i++;
    if (i == p.n)
      rc = tn_err_set(err, TN_EINVAL, "iterator %s of block \"%s\" is not bound to a loop of its own; fuse_block_iters "
                      "needs each fused iterator bound to one loop",
                      it->var->name, b->name);
    else if (at >= 0 && i != at + 1)
      rc = tn_err_set(err, TN_EINVAL, "the loops of iterators %s and %s of block \"%s\" are not nested directly in "
                      "that order",
                      b->iters[prev].var->name, it->var->name, b->name);
    else if (p.stmts[i]->u.loop.extent != it->extent)
      rc = tn_err_set(err, TN_EINVAL, "loop %s has extent %lld, iterator %s of block \"%s\" %lld",
                      sch_loop_name(&p.stmts[i]->u.loop), (long long)p.stmts[i]->u.loop.extent, it->var->name,
                      b->name, (long long)it->extent);
    else
      uids[(*nloops)++] = p.stmts[i]->u.loop.uid, at = i, prev = t, top = top < 0 ? i : top;
  }
  int above = 0;
  while (rc == TN_OK && top > 0 && above < unbound && p.stmts[top - above - 1]->kind == IR_S_LOOP &&
         p.stmts[top - above - 1]->u.loop.extent == 1 && !binds_var(b, p.stmts[top - above - 1]->u.loop.var))
    above++;
  if (above) {
    memmove(uids + above, uids, sizeof(int) * (size_t)*nloops);
    for (int i = 0; i < above; i++) uids[i] = p.stmts[top - above + i]->u.loop.uid;
    *nloops += above;
  }
  ir_path_free(&p);
  return rc;
}

int sch_prim_fuse_block_iters(sch_t *s, int block_uid, int first, int n, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b = sch_find_block(f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (first < 0 || n < 1 || first + n > b->niters)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d iterators; cannot fuse iterators %d .. %d", b->name,
                      b->niters, first, first + n - 1);
  if (!b->body || b->body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not a compute block (its body is not a store)", b->name);
  for (int t = first + 1; t < first + n; t++)
    if (b->iters[t].kind != b->iters[first].kind)
      return tn_err_set(err, TN_EINVAL, "iterators %s and %s of block \"%s\" are not both spatial or both reduction",
                        b->iters[first].var->name, b->iters[t].var->name, b->name);
  int uids[SCH_MAX_RVS_OUT], nloops = 0, loop = 0, rc;
  if ((rc = bound_loops(f, b, first, n, uids, &nloops, err)) < 0) return rc;
  if (n == 1) return TN_OK;
  if (nloops && (rc = sch_prim_fuse(s, uids, nloops, &loop, err)) < 0) return rc;

  ir_var_t *vs[SCH_MAX_RVS_OUT];
  int64_t prod = 1;
  tn_buf_t name;
  tn_buf_init(&name);
  for (int t = 0; t < n; t++) {
    vs[t] = b->iters[first + t].var;
    prod *= b->iters[first + t].extent;
    const char *v = vs[t]->name;
    tn_buf_printf(&name, "%s_", t > 0 && !strncmp(v, "v_", 2) ? v + 2 : v);
  }
  tn_buf_put(&name, "fused");
  ir_var_t *var = ir_var_new(f, tn_buf_str(&name), IR_INT32);
  tn_buf_free(&name);
  ir_expr_t *fused = ir_varref(f, var);

  /* the temporaries the block reads or writes at the run of iterators (each
   * once: the accumulator may be in both lists) */
  ir_buffer_t **bufs = TN_NEWN(f->arena, ir_buffer_t *, b->nreads + b->nwrites + 1);
  int nbufs = 0;
  for (int i = 0; i < b->nreads + b->nwrites; i++) {
    ir_buffer_t *x = i < b->nreads ? b->reads[i].buf : b->writes[i - b->nreads].buf;
    int j = 0;
    while (j < nbufs && bufs[j] != x) j++;
    if (j == nbufs) bufs[nbufs++] = x;
  }
  for (int i = 0; i < nbufs; i++) {
    int pos = block_run(b, bufs[i], vs, n);
    merge_t m = {.x = bufs[i], .ok = true};
    if (bufs[i]->role != IR_BUF_TEMP || pos < 0) continue;
    ir_stmt_walk(f->root, check_users, &m);
    if (m.ok) merge_dims(f, bufs[i], pos, n, b, fused);
  }

  /* every other use: v_t = fused // (extents inside t) % extent_t */
  ir_expr_t *to[SCH_MAX_RVS_OUT];
  int64_t inner = 1;
  for (int t = n - 1; t >= 0; t--) {
    ir_expr_t *e = fused;
    if (inner > 1) e = ir_bin(f, IR_E_FLOORDIV, e, ir_int(f, inner));
    if (t > 0) e = ir_bin(f, IR_E_FLOORMOD, e, ir_int(f, b->iters[first + t].extent));
    to[t] = e;
    inner *= b->iters[first + t].extent;
  }
  /* simplified over the new iterator's range: an index linearised by an
   * earlier fusion, ((m // 16) * 4 + m // 4 % 4) * 4 + m % 4, is m again
   * (the other iterators' are left out: a unit one would become 0, and
   * fusing it next would not find it) */
  ir_bounds_t bounds;
  ir_bounds_init(&bounds);
  ir_bounds_set(&bounds, var, 0, prod - 1);
  ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2; i++) {
    ir_stmt_t *st = sts[i];
    if (!st) continue;
    for (int d = 0; d < st->u.store.n; d++)
      st->u.store.idx[d] = ir_simplify(f, ir_expr_subst(f, st->u.store.idx[d], vs, to, n), &bounds);
    st->u.store.value = sch_map_loads(f, ir_expr_subst(f, st->u.store.value, vs, to, n), simplify_load, &bounds);
  }
  if (b->predicate) b->predicate = ir_simplify(f, ir_expr_subst(f, b->predicate, vs, to, n), &bounds);
  ir_bounds_free(&bounds);

  ir_iter_t *iters = TN_NEWN(f->arena, ir_iter_t, b->niters - n + 1);
  int k = 0;
  for (int t = 0; t < b->niters; t++) {
    if (t == first) {
      ir_expr_t *binding = nloops ? ir_varref(f, sch_find(f, loop)->u.loop.var) : ir_int(f, 0);
      iters[k++] = (ir_iter_t){var, prod, b->iters[first].kind, binding};
    }
    if (t < first || t >= first + n) iters[k++] = b->iters[t];
  }
  b->iters = iters;
  b->niters = k;
  ir_block_infer_regions(f, b);
  return TN_OK;
}
