/* compute_at.c — compute_at (move a producer under a consumer's loop) and
 * reverse_compute_at (a consumer under a producer's loop), each iterating only
 * over the buffer region the blocks under that loop need or provide; plus the
 * candidate locations that SampleComputeLocation draws from. */
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "sch_internal.h"

/* The range a moved block's iterator gets: [min, min + extent), min over the
 * variables of the target loop and the loops enclosing it. */
typedef struct span {
  ir_expr_t *min;
  int64_t extent;
  bool set;
} span_t;

typedef struct plan {
  ir_func_t *f;
  bool reverse;
  ir_block_t *blk; /* the block being moved */
  ir_stmt_t *loop_stmt;
  ir_loop_t *loop;
  sch_path_t loop_path;
  ir_block_t **under; /* the other side: consumers (or producers) under loop (malloc'ed) */
  int nunder;
  span_t *spans; /* per iterator of blk */
  int pos;       /* insertion index among the loop body's statements */
} plan_t;

/* ---- small tree helpers ------------------------------------------------ */

/* Whether statement `anc` lies on the path from the root to uid. */
static bool encloses(const ir_func_t *f, const ir_stmt_t *anc, int uid) {
  sch_path_t p = {0};
  bool found = false;
  if (sch_find_path(f, uid, &p))
    for (int i = 0; i < p.n && !found; i++) found = p.stmts[i] == anc;
  ir_path_free(&p);
  return found;
}

/* The statements of a body: a sequence's items, or the body itself. */
static ir_stmt_t **body_items(ir_stmt_t **body, int *n) {
  if ((*body)->kind == IR_S_SEQ) {
    *n = (*body)->u.seq.n;
    return (*body)->u.seq.items;
  }
  *n = 1;
  return body;
}

/* Which statement of a body holds each block under it: `blocks` sorted by
 * address, `at[i]` the index of the statement holding blocks[i]. */
typedef struct child_map {
  struct child_entry {
    const ir_block_t *b;
    int at;
  } *v;
  int n;
} child_map_t;

static int cmp_entry(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const struct child_entry *)a)->b, y = (uintptr_t)((const struct child_entry *)b)->b;
  return (x > y) - (x < y);
}

static void child_map_build(ir_stmt_t **body, child_map_t *m) {
  int n, cap = 0;
  ir_stmt_t **items = body_items(body, &n);
  *m = (child_map_t){0};
  for (int i = 0; i < n; i++) {
    ir_block_t **blocks;
    int k = ir_blocks_under(items[i], false, &blocks);
    if (m->n + k > cap) {
      cap = TN_MAX(2 * cap, m->n + k);
      m->v = tn_xrealloc(m->v, sizeof *m->v * (size_t)cap);
    }
    for (int j = 0; j < k; j++) m->v[m->n++] = (struct child_entry){blocks[j], i};
    free(blocks);
  }
  if (m->n) qsort(m->v, (size_t)m->n, sizeof *m->v, cmp_entry);
}

/* Index of the statement of the body holding block b, -1 if none does. */
static int child_index(const child_map_t *m, const ir_block_t *b) {
  struct child_entry key = {b, 0}, *e = m->n ? bsearch(&key, m->v, (size_t)m->n, sizeof *m->v, cmp_entry) : NULL;
  return e ? e->at : -1;
}

static void body_insert(ir_func_t *f, ir_stmt_t **body, int pos, ir_stmt_t *item) {
  int n;
  ir_stmt_t **items = body_items(body, &n);
  ir_stmt_t **all = TN_NEWN(f->arena, ir_stmt_t *, n + 1);
  memcpy(all, items, sizeof(ir_stmt_t *) * (size_t)pos);
  all[pos] = item;
  memcpy(all + pos + 1, items + pos, sizeof(ir_stmt_t *) * (size_t)(n - pos));
  *body = ir_seq(f, all, n + 1);
}

/* Unlinks block uid together with the loops that hold nothing else; a
 * sequence left with one statement is replaced by that statement. */
static void detach(ir_func_t *f, int uid) {
  sch_path_t p = {0};
  if (!sch_find_path(f, uid, &p)) return ir_path_free(&p);
  int k = p.n - 1; /* the topmost statement holding only the block */
  while (k > 1 && (p.stmts[k - 1]->kind == IR_S_LOOP ||
                   (p.stmts[k - 1]->kind == IR_S_SEQ && p.stmts[k - 1]->u.seq.n == 1)))
    k--;
  ir_stmt_t *seq = p.stmts[k - 1];
  if (seq->kind == IR_S_SEQ) { /* else the block is the whole function: nothing to unlink from */
    int n = 0;
    for (int i = 0; i < seq->u.seq.n; i++)
      if (seq->u.seq.items[i] != p.stmts[k]) seq->u.seq.items[n++] = seq->u.seq.items[i];
    seq->u.seq.n = n;
    if (n == 1) *p.slots[k - 1] = seq->u.seq.items[0];
  }
  ir_path_free(&p);
}

/* ---- checks: what links the block to the blocks under the loop --------- */

static int resolve(plan_t *p, int block_uid, int loop_uid, tn_err_t *err) {
  p->blk = sch_find_block(p->f, block_uid);
  if (!p->blk) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (p->blk == ir_func_root(p->f)) return tn_err_set(err, TN_EINVAL, "the root block cannot be moved");
  if (!sch_find_path(p->f, loop_uid, &p->loop_path) || p->loop_path.stmts[p->loop_path.n - 1]->kind != IR_S_LOOP)
    return tn_err_set(err, TN_EINVAL, "the loop no longer exists");
  p->loop_stmt = p->loop_path.stmts[p->loop_path.n - 1];
  p->loop = &p->loop_stmt->u.loop;
  if (encloses(p->f, p->loop_stmt, block_uid))
    return tn_err_set(err, TN_EINVAL, "loop %s encloses block \"%s\" itself", sch_loop_name(p->loop), p->blk->name);
  if (ir_scope_block(p->f, block_uid) != ir_scope_block(p->f, loop_uid))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" and loop %s are in different block scopes", p->blk->name,
                      sch_loop_name(p->loop));
  return TN_OK;
}

/* Whether `o` and blk are linked: o reads what blk writes (compute_at) or
 * writes what blk reads (reverse). */
static const ir_buffer_t *link_buffer(const plan_t *p, const ir_block_t *o) {
  const ir_block_t *b = p->blk;
  if (p->reverse) {
    for (int r = 0; r < b->nreads; r++)
      if (ir_block_writes(o, b->reads[r].buf)) return b->reads[r].buf;
  } else {
    for (int w = 0; w < b->nwrites; w++)
      if (ir_block_reads(o, b->writes[w].buf)) return b->writes[w].buf;
  }
  return NULL;
}

/* Position of uid's top-level statement in the root scope. */
static int top_index(const ir_func_t *f, int uid) {
  sch_path_t p = {0};
  int at = 0;
  if (sch_find_path(f, uid, &p) && p.n >= 3 && p.stmts[1]->kind == IR_S_SEQ)
    for (int i = 0; i < p.stmts[1]->u.seq.n; i++)
      if (p.stmts[1]->u.seq.items[i] == p.stmts[2]) {
        at = i;
        break;
      }
  ir_path_free(&p);
  return at;
}

/* A linked block outside the loop: compute_at needs every consumer under
 * the loop; reverse_compute_at accepts producers in an earlier loop nest. */
static int check_outside(const plan_t *p, const ir_block_t *o, const ir_buffer_t *buf, tn_err_t *err) {
  const char *loop = sch_loop_name(p->loop);
  if (!p->reverse)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" reads %s, which block \"%s\" writes, but is not under loop %s; every consumer "
                      "must be under the target loop",
                      o->name, buf->name, p->blk->name, loop);
  if (top_index(p->f, o->uid) < top_index(p->f, p->loop->uid)) return TN_OK;
  return tn_err_set(err, TN_EINVAL,
                    "block \"%s\" writes %s, which block \"%s\" reads, but is neither under loop %s nor in a loop nest "
                    "before it",
                    o->name, buf->name, p->blk->name, loop);
}

static int check_writes(const plan_t *p, ir_block_t *const *all, int n, tn_err_t *err) {
  const ir_block_t *b = p->blk;
  for (int w = 0; w < b->nwrites; w++) {
    const ir_buffer_t *buf = b->writes[w].buf;
    if (!p->reverse && buf->role == IR_BUF_OUTPUT)
      return tn_err_set(err, TN_EINVAL,
                        "block \"%s\" writes the function output %s; only blocks writing temporaries can be "
                        "computed at a consumer's loop",
                        b->name, buf->name);
    for (int i = 0; i < n; i++)
      if (all[i] != b && ir_block_writes(all[i], buf))
        return tn_err_set(err, TN_EINVAL, "block \"%s\" is not the only writer of %s (block \"%s\" writes it too)",
                          b->name, buf->name, all[i]->name);
  }
  return TN_OK;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
  return (x > y) - (x < y);
}

/* Collects the linked blocks under the loop and checks the ones outside.
 * The blocks under the loop come from one walk of its body, sorted for the
 * membership test, so a function of n blocks costs O(n log n) here. */
static int link_blocks(plan_t *p, tn_err_t *err) {
  ir_block_t **all, **under;
  int n = ir_blocks(p->f, &all), nu = ir_blocks_under(p->loop->body, false, &under);
  int rc = check_writes(p, all, n, err);
  if (rc < 0) goto out;
  qsort(under, (size_t)nu, sizeof *under, cmp_ptr);
  p->under = tn_xmalloc(sizeof *p->under * (size_t)(nu + 1));
  p->nunder = 0;
  for (int i = 0; i < n; i++)
    if (all[i] != p->blk && bsearch(&all[i], under, (size_t)nu, sizeof *under, cmp_ptr) && link_buffer(p, all[i]))
      p->under[p->nunder++] = all[i];
  if (p->nunder == 0) {
    rc = tn_err_set(err, TN_EINVAL, p->reverse ? "block \"%s\" does not read any buffer written under loop %s"
                                               : "block \"%s\" does not produce any buffer read under loop %s",
                    p->blk->name, sch_loop_name(p->loop));
    goto out;
  }
  for (int i = 0; i < n && rc == TN_OK; i++) {
    bool inside = all[i] == p->blk || bsearch(&all[i], under, (size_t)nu, sizeof *under, cmp_ptr);
    const ir_buffer_t *buf = inside ? NULL : link_buffer(p, all[i]);
    if (buf) rc = check_outside(p, all[i], buf, err);
  }
out:
  free(all);
  free(under);
  return rc;
}

/* ---- regions ----------------------------------------------------------- */

/* The loop variables a linked block's accesses range over. */
typedef struct vars {
  ir_var_t **inner; /* loops strictly inside the target loop (one slot per loop on the path) */
  int64_t *ext;
  int n;
  ir_bounds_t all; /* every loop on the path to the block */
} vars_t;

/* Whether a thread-bound loop at or above the target is "relaxed" for a
 * buffer of this scope: its iterations run in parallel threads that share the
 * buffer, so the region must cover all of them (TVM does the same).  Shared
 * buffers are shared by the threads of a block; global ones by every thread. */
static bool relaxed(const ir_loop_t *l, ir_scope_t scope) {
  if (l->kind != IR_LOOP_THREAD || scope == IR_SCOPE_LOCAL) return false;
  return scope == IR_SCOPE_GLOBAL || ir_thread_tag_class(l->tag) != IR_TAG_CLASS_BLOCK;
}

static void vars_of(const plan_t *p, const ir_block_t *o, const ir_buffer_t *buf, vars_t *vs) {
  sch_path_t path = {0};
  sch_find_path(p->f, o->uid, &path);
  vs->n = 0;
  vs->inner = tn_xmalloc(sizeof vs->inner[0] * (size_t)(path.n + 1));
  vs->ext = tn_xmalloc(sizeof vs->ext[0] * (size_t)(path.n + 1));
  ir_bounds_init(&vs->all);
  for (int i = 0; i < path.n; i++) {
    if (path.stmts[i]->kind != IR_S_LOOP) continue;
    ir_loop_t *l = &path.stmts[i]->u.loop;
    ir_bounds_set(&vs->all, l->var, 0, l->extent - 1);
    if (i >= p->loop_path.n || relaxed(l, buf->scope)) vs->inner[vs->n] = l->var, vs->ext[vs->n++] = l->extent;
  }
  ir_path_free(&path);
}

static void vars_free(vars_t *vs) {
  ir_bounds_free(&vs->all);
  free(vs->inner);
  free(vs->ext);
}

static bool uses_inner(const ir_expr_t *e, const vars_t *vs) {
  for (int i = 0; i < vs->n; i++)
    if (ir_expr_uses_var(e, vs->inner[i])) return true;
  return false;
}

/* Whether every variable of e is an inner loop variable. */
static bool only_inner(const ir_expr_t *e, const vars_t *vs) {
  switch (e->kind) {
  case IR_E_INT: return true;
  case IR_E_VAR: return uses_inner(e, vs);
  case IR_E_NEG: case IR_E_CAST: return only_inner(e->u.un, vs);
  case IR_E_LOAD: case IR_E_FLOAT: case IR_E_SELECT: case IR_E_CALL: return false;
  default: return only_inner(e->u.bin.a, vs) && only_inner(e->u.bin.b, vs);
  }
}

/* Symbolic interval [lo, hi] of e as the inner loop variables range over
 * their loops, the outer ones kept as symbols; false if e mixes them in a
 * way interval arithmetic cannot follow (e.g. outer * inner). */
static bool range_of(ir_func_t *f, ir_expr_t *e, const vars_t *vs, ir_expr_t **lo, ir_expr_t **hi) {
  if (!uses_inner(e, vs)) {
    *lo = *hi = e;
    return true;
  }
  if (only_inner(e, vs)) {
    ir_interval_t iv = ir_interval_of(e, &vs->all);
    if (iv.lo == IR_INF_NEG || iv.hi == IR_INF_POS) return false;
    *lo = ir_int(f, iv.lo), *hi = ir_int(f, iv.hi);
    return true;
  }
  ir_expr_t *al, *ah, *bl, *bh;
  int64_t c;
  switch (e->kind) {
  case IR_E_NEG:
    if (!range_of(f, e->u.un, vs, &al, &ah)) return false;
    *lo = ir_unary(f, IR_E_NEG, ah), *hi = ir_unary(f, IR_E_NEG, al);
    return true;
  case IR_E_ADD: case IR_E_SUB: case IR_E_MIN: case IR_E_MAX:
    if (!range_of(f, e->u.bin.a, vs, &al, &ah) || !range_of(f, e->u.bin.b, vs, &bl, &bh)) return false;
    if (e->kind == IR_E_SUB) {
      ir_expr_t *t = bl;
      bl = bh, bh = t;
    }
    *lo = ir_bin(f, e->kind, al, bl), *hi = ir_bin(f, e->kind, ah, bh);
    return true;
  case IR_E_MUL:
  case IR_E_FLOORDIV: {
    bool swap = e->kind == IR_E_MUL && ir_expr_is_const_int(e->u.bin.a, NULL);
    ir_expr_t *x = swap ? e->u.bin.b : e->u.bin.a, *k = swap ? e->u.bin.a : e->u.bin.b;
    if (!ir_expr_is_const_int(k, &c) || (e->kind == IR_E_FLOORDIV && c <= 0) || !range_of(f, x, vs, &al, &ah))
      return false;
    if (c < 0) {
      ir_expr_t *t = al;
      al = ah, ah = t;
    }
    *lo = ir_bin(f, e->kind, al, k), *hi = ir_bin(f, e->kind, ah, k);
    return true;
  }
  default: return false;
  }
}

/* The covered range of one access dimension: [*lo, *lo + *ext). */
static void access_range(ir_func_t *f, ir_expr_t *min, int64_t width, const vars_t *vs, ir_expr_t **lo, int64_t *ext) {
  ir_expr_t *l, *h;
  if (range_of(f, min, vs, &l, &h)) {
    *lo = ir_simplify(f, l, &vs->all);
    ir_interval_t d = ir_interval_of(ir_simplify(f, ir_bin(f, IR_E_SUB, h, *lo), &vs->all), &vs->all);
    if (d.hi != IR_INF_POS) {
      *ext = d.hi + width;
      return;
    }
  }
  ir_interval_t iv = ir_interval_of(min, &vs->all); /* constant bounds over every loop */
  *lo = ir_int(f, iv.lo);
  *ext = iv.hi - iv.lo + width;
}

/* Running union of ranges for one buffer dimension: [base + lo, base + hi). */
typedef struct uni {
  ir_expr_t *base;
  int64_t lo, hi;
  bool bad;
} uni_t;

static void uni_add(ir_func_t *f, uni_t *u, ir_expr_t *lo, int64_t ext, const ir_bounds_t *b) {
  if (!u->base) {
    *u = (uni_t){lo, 0, ext, false};
    return;
  }
  ir_interval_t d = ir_interval_of(ir_simplify(f, ir_bin(f, IR_E_SUB, lo, u->base), b), b);
  if (d.lo == IR_INF_NEG || d.hi == IR_INF_POS) u->bad = true;
  else u->lo = TN_MIN(u->lo, d.lo), u->hi = TN_MAX(u->hi, d.hi + ext);
}

/* Region of buf that the linked block o reads (compute_at) or writes
 * (reverse), accumulated into u[d] per dimension. */
static int add_block_region(plan_t *p, const ir_block_t *o, const ir_buffer_t *buf, uni_t *u, tn_err_t *err) {
  ir_func_t *f = p->f;
  const ir_region_t *regs = p->reverse ? o->writes : o->reads;
  int nregs = p->reverse ? o->nwrites : o->nreads;
  int nb = o->niters, rc = TN_OK;
  ir_var_t **from = tn_xmalloc(sizeof from[0] * (size_t)(nb + 1));
  ir_expr_t **to = tn_xmalloc(sizeof to[0] * (size_t)(nb + 1));
  for (int i = 0; i < nb; i++) from[i] = o->iters[i].var, to[i] = o->iters[i].binding;
  vars_t vs;
  vars_of(p, o, buf, &vs);
  for (int r = 0; r < nregs && rc == TN_OK; r++) {
    if (regs[r].buf != buf) continue;
    for (int d = 0; d < buf->ndim; d++) {
      int64_t width;
      if (!ir_expr_is_const_int(regs[r].dims[d].extent, &width)) {
        rc = tn_err_set(err, TN_EUNSUPPORTED, "block \"%s\" accesses %s with a non-constant extent in dimension %d",
                        o->name, buf->name, d);
        break;
      }
      ir_expr_t *lo;
      int64_t ext;
      access_range(f, ir_expr_subst(f, regs[r].dims[d].min, from, to, nb), width, &vs, &lo, &ext);
      uni_add(f, &u[d], lo, ext, &vs.all);
    }
  }
  vars_free(&vs);
  free(from);
  free(to);
  return rc;
}

/* The iterator of blk that indexes dimension d of its access to buf, or -1
 * unless every dimension is one distinct iterator (blk's write for
 * compute_at, its read for reverse). */
static int access_iters(const plan_t *p, const ir_buffer_t *buf, int *iter_of) {
  const ir_block_t *b = p->blk;
  const ir_region_t *regs = p->reverse ? b->reads : b->writes;
  int nregs = p->reverse ? b->nreads : b->nwrites;
  for (int r = 0; r < nregs; r++) {
    if (regs[r].buf != buf) continue;
    for (int d = 0; d < buf->ndim; d++) {
      int64_t w;
      const ir_expr_t *m = regs[r].dims[d].min;
      iter_of[d] = -1;
      for (int i = 0; i < b->niters && m->kind == IR_E_VAR; i++)
        if (b->iters[i].var == m->u.var) iter_of[d] = i;
      if (iter_of[d] < 0 || !ir_expr_is_const_int(regs[r].dims[d].extent, &w) || w != 1) return -1;
      for (int e = 0; e < d; e++)
        if (iter_of[e] == iter_of[d]) return -1;
    }
    return 0;
  }
  return -1;
}

/* Sets the spans of blk's iterators that index buf. */
static int spans_from_buffer(plan_t *p, const ir_buffer_t *buf, tn_err_t *err) {
  ir_func_t *f = p->f;
  int iter_of[IR_MAX_DIMS];
  if (access_iters(p, buf, iter_of) < 0)
    return tn_err_set(err, TN_EUNSUPPORTED,
                      "block \"%s\" %s %s with indices that are not one distinct iterator per dimension; only such "
                      "accesses can be re-bound to a region",
                      p->blk->name, p->reverse ? "reads" : "writes", buf->name);
  uni_t u[IR_MAX_DIMS];
  memset(u, 0, sizeof u);
  int rc;
  for (int i = 0; i < p->nunder; i++)
    if ((rc = add_block_region(p, p->under[i], buf, u, err)) < 0) return rc;
  for (int d = 0; d < buf->ndim; d++) {
    const ir_iter_t *it = &p->blk->iters[iter_of[d]];
    span_t sp = {ir_int(f, 0), it->extent, true};
    if (u[d].base && !u[d].bad && u[d].hi - u[d].lo >= 1 && u[d].hi - u[d].lo < it->extent)
      sp = (span_t){ir_simplify(f, ir_bin(f, IR_E_ADD, u[d].base, ir_int(f, u[d].lo)), NULL), u[d].hi - u[d].lo, true};
    span_t *old = &p->spans[iter_of[d]];
    if (old->set && (old->extent != sp.extent || !ir_expr_equal(old->min, sp.min)))
      return tn_err_set(err, TN_EUNSUPPORTED,
                        "iterator %s of block \"%s\" would get different ranges from two buffers linked under loop %s",
                        it->var->name, p->blk->name, sch_loop_name(p->loop));
    *old = sp;
  }
  return TN_OK;
}

/* Computes the span of every iterator of blk. */
static int plan_spans(plan_t *p, tn_err_t *err) {
  ir_func_t *f = p->f;
  ir_block_t *b = p->blk;
  p->spans = TN_NEWN(f->arena, span_t, b->niters + 1);
  const ir_region_t *regs = p->reverse ? b->reads : b->writes;
  int nregs = p->reverse ? b->nreads : b->nwrites, rc;
  for (int r = 0; r < nregs; r++) {
    bool linked = false;
    for (int i = 0; i < p->nunder && !linked; i++)
      linked = p->reverse ? ir_block_writes(p->under[i], regs[r].buf) : ir_block_reads(p->under[i], regs[r].buf);
    if (linked && (rc = spans_from_buffer(p, regs[r].buf, err)) < 0) return rc;
  }
  for (int i = 0; i < b->niters; i++) {
    span_t *sp = &p->spans[i];
    bool full = !sp->set || (sp->extent == b->iters[i].extent && ir_expr_is_const_int(sp->min, NULL) &&
                             sp->min->u.ival == 0);
    if (!full && b->iters[i].kind == IR_ITER_REDUCE)
      return tn_err_set(err, TN_EINVAL,
                        "block \"%s\" reduces over %s, and loop %s provides only part of its range at a time",
                        b->name, b->iters[i].var->name, sch_loop_name(p->loop));
    if (!sp->set) *sp = (span_t){ir_int(f, 0), b->iters[i].extent, true};
  }
  return TN_OK;
}

/* ---- placement --------------------------------------------------------- */

/* compute_at goes right before the first statement of the loop body that
 * holds a consumer; reverse_compute_at right after the last one holding a
 * producer.  Blocks feeding blk (compute_at) must stay before it, blocks
 * fed by it (reverse) after it. */
static int plan_position(plan_t *p, tn_err_t *err) {
  ir_stmt_t **body = &p->loop->body;
  int first = -1, last = -1;
  child_map_t cm;
  child_map_build(body, &cm);
  for (int i = 0; i < p->nunder; i++) {
    int c = child_index(&cm, p->under[i]);
    if (first < 0 || c < first) first = c;
    if (c > last) last = c;
  }
  p->pos = p->reverse ? last + 1 : first;
  ir_block_t **blocks;
  int n = ir_blocks_under(*body, false, &blocks), rc = TN_OK;
  for (int i = 0; i < n && rc == TN_OK; i++) {
    const ir_block_t *o = blocks[i], *b = p->blk;
    bool feeds = false, fed = false;
    for (int r = 0; r < b->nreads; r++) feeds |= ir_block_writes(o, b->reads[r].buf);
    for (int w = 0; w < b->nwrites; w++) fed |= ir_block_reads(o, b->writes[w].buf);
    int c = child_index(&cm, o);
    if (!p->reverse && feeds && c >= p->pos)
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\" feeds block \"%s\" but runs after its first consumer under loop %s",
                      o->name, b->name, sch_loop_name(p->loop));
    else if (p->reverse && fed && c < p->pos)
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\" reads what block \"%s\" writes but runs before its last producer "
                      "under loop %s", o->name, b->name, sch_loop_name(p->loop));
  }
  free(blocks);
  free(cm.v);
  return rc;
}

/* ---- rewriting --------------------------------------------------------- */

/* Conditions keeping binding within [0, extent) where bounds cannot prove it. */
static ir_expr_t *domain_guard(ir_func_t *f, ir_expr_t *guard, ir_expr_t *binding, int64_t extent,
                               const ir_bounds_t *b) {
  ir_interval_t iv = ir_interval_of(binding, b);
  ir_expr_t *conds[2] = {iv.lo < 0 ? ir_bin(f, IR_E_GE, binding, ir_int(f, 0)) : NULL,
                         iv.hi >= extent ? ir_bin(f, IR_E_LT, binding, ir_int(f, extent)) : NULL};
  for (int i = 0; i < 2; i++)
    if (conds[i]) guard = guard ? ir_bin(f, IR_E_AND, guard, conds[i]) : conds[i];
  return guard;
}

/* Re-binds blk's iterators to span.min + ax_i over new loops ax0.. (unit
 * loops dropped unless preserved) and returns the new nest. */
static ir_stmt_t *build_nest(plan_t *p, ir_stmt_t *blk_stmt, bool preserve_unit_loops) {
  ir_func_t *f = p->f;
  ir_block_t *b = p->blk;
  ir_bounds_t bounds;
  ir_bounds_init(&bounds);
  sch_bounds_for(f, p->loop->uid, NULL, &bounds);
  ir_var_t **axes = TN_NEWN(f->arena, ir_var_t *, b->niters + 1);
  ir_expr_t *guard = NULL;
  for (int i = 0; i < b->niters; i++) {
    span_t *sp = &p->spans[i];
    ir_expr_t *binding = sp->min;
    if (sp->extent > 1 || preserve_unit_loops) {
      axes[i] = ir_var_new(f, tn_arena_printf(f->arena, "ax%d", i), IR_INT32);
      ir_bounds_set(&bounds, axes[i], 0, sp->extent - 1);
      binding = ir_simplify(f, ir_bin(f, IR_E_ADD, sp->min, ir_varref(f, axes[i])), &bounds);
    }
    b->iters[i].binding = binding;
    guard = domain_guard(f, guard, binding, b->iters[i].extent, &bounds);
  }
  b->predicate = guard;
  ir_bounds_free(&bounds);
  ir_stmt_t *nest = blk_stmt;
  for (int i = b->niters - 1; i >= 0; i--)
    if (axes[i]) nest = ir_loop_new(f, axes[i], p->spans[i].extent, nest);
  return nest;
}

static void apply_plan(plan_t *p, bool preserve_unit_loops) {
  ir_stmt_t *blk_stmt = sch_find(p->f, p->blk->uid);
  detach(p->f, p->blk->uid);
  body_insert(p->f, &p->loop->body, p->pos, build_nest(p, blk_stmt, preserve_unit_loops));
  sch_simplify_all(p->f);
}

int sch_prim_compute_at(sch_t *s, int block_uid, int loop_uid, bool reverse, bool preserve_unit_loops,
                        tn_err_t *err) {
  plan_t *p = tn_xcalloc(1, sizeof *p);
  p->f = s->f;
  p->reverse = reverse;
  int rc;
  if ((rc = resolve(p, block_uid, loop_uid, err)) >= 0 && (rc = link_blocks(p, err)) >= 0 &&
      (rc = plan_spans(p, err)) >= 0 && (rc = plan_position(p, err)) >= 0)
    apply_plan(p, preserve_unit_loops);
  ir_path_free(&p->loop_path);
  free(p->under);
  free(p);
  return rc < 0 ? rc : TN_OK;
}

/* ---- candidate locations ----------------------------------------------- */

typedef int (*trial_fn)(sch_t *s, int block_uid, int loop_uid, tn_err_t *err);

static int trial_at(sch_t *s, int block_uid, int loop_uid, tn_err_t *err) {
  return sch_prim_compute_at(s, block_uid, loop_uid, false, true, err);
}

static int trial_inline(sch_t *s, int block_uid, int loop_uid, tn_err_t *err) {
  (void)loop_uid;
  return sch_prim_compute_inline(s, block_uid, err);
}

/* Whether a primitive succeeds, tried on a throw-away copy of the function. */
static bool legal(sch_t *s, trial_fn fn, int block_uid, int loop_uid) {
  ir_func_t *orig = s->f;
  sch_index_drop(s); /* it describes orig, and the trial would update it */
  s->f = ir_func_copy(orig);
  tn_err_t e;
  bool ok = fn(s, block_uid, loop_uid, &e) == TN_OK;
  sch_index_drop(s);
  ir_func_free(s->f);
  s->f = orig;
  return ok;
}

/* Whether loop l only feeds spatial iterators of the blocks under it. */
static bool data_parallel(ir_loop_t *l) {
  ir_block_t **blocks;
  int n = ir_blocks_under(l->body, false, &blocks);
  bool dp = true;
  for (int i = 0; i < n && dp; i++)
    for (int k = 0; k < blocks[i]->niters && dp; k++)
      dp = blocks[i]->iters[k].kind == IR_ITER_SPATIAL || !ir_expr_uses_var(blocks[i]->iters[k].binding, l->var);
  free(blocks);
  return dp;
}

/* Whether the loop with uid `loop_uid` encloses statement uid. */
static bool loop_encloses(const ir_func_t *f, int loop_uid, int uid) {
  sch_path_t p = {0};
  bool found = false;
  if (sch_find_path(f, uid, &p))
    for (int i = 0; i < p.n && !found; i++) found = p.stmts[i]->kind == IR_S_LOOP && p.stmts[i]->u.loop.uid == loop_uid;
  ir_path_free(&p);
  return found;
}

/* How many of the first consumer's loops lie above every consumer (the
 * loops down to the consumers' lowest common ancestor loop). */
static int common_depth(const ir_func_t *f, ir_block_t *const *cons, int n, ir_loop_t *const *loops, int nloops) {
  int depth = nloops;
  for (int c = 1; c < n; c++) {
    int k = 0;
    while (k < depth && loop_encloses(f, loops[k]->uid, cons[c]->uid)) k++;
    depth = k;
  }
  return depth;
}

/* Whether loop l is one of the innermost loops that a consumer marked for
 * tensorization reserves (IR_ANN_TENSORIZE_LOOPS): a block computed there
 * would break the nest the intrinsic replaces (and inlined into such a
 * consumer, it would change the computation the call replaces). */
static bool reserved(const ir_func_t *f, ir_block_t *const *cons, int n, const ir_loop_t *l) {
  for (int c = 0; c < n; c++) {
    const ir_annot_t *a = ir_annot_get(cons[c]->annots, cons[c]->nannots, IR_ANN_TENSORIZE_LOOPS);
    if (!a || a->is_str) continue;
    ir_loop_t **loops;
    int nl = ir_enclosing_loops(f, cons[c]->uid, &loops);
    bool in = false;
    for (int i = nl - 1; i >= 0 && i >= nl - a->ival && !in; i--) in = loops[i] == l;
    free(loops);
    if (in) return true;
  }
  return false;
}

int sch_compute_location_candidates(sch_t *s, int block_uid, int **out, int *n, bool *can_inline, tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  *out = NULL;
  *n = 0;
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  *can_inline = !b->init && legal(s, trial_inline, block_uid, -1);
  int ncons = ir_consumers(s->f, b, NULL, 0);
  if (ncons == 0) return TN_OK;
  ir_block_t **cons = tn_xmalloc(sizeof *cons * (size_t)ncons);
  ir_consumers(s->f, b, cons, ncons);
  for (int c = 0; c < ncons; c++) /* inlined, the block would change what the intrinsic's call replaces */
    if (ir_annot_get(cons[c]->annots, cons[c]->nannots, IR_ANN_TENSORIZE_LOOPS)) *can_inline = false;
  ir_loop_t **loops;
  int nloops = ir_enclosing_loops(s->f, cons[0]->uid, &loops);
  int depth = common_depth(s->f, cons, ncons, loops, nloops), last_dp = -1;
  for (int i = 0; i < depth; i++)
    if (data_parallel(loops[i])) last_dp = i;
  bool seen_reduce = false;
  for (int i = 0; i < depth; i++) {
    if (loops[i]->extent == 1) continue;
    if (data_parallel(loops[i])) {
      if (seen_reduce) break;
    } else {
      seen_reduce = true;
      if (i > last_dp) break;
    }
    if (!reserved(s->f, cons, ncons, loops[i]) && legal(s, trial_at, block_uid, loops[i]->uid)) {
      if (!*out) *out = tn_xmalloc(sizeof **out * (size_t)depth);
      (*out)[(*n)++] = loops[i]->uid;
    }
  }
  free(loops);
  free(cons);
  return TN_OK;
}
