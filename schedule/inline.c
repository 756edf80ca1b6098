/* inline.c — compute_inline (substitute a spatial block's value into every
 * load of its buffer) and reverse_compute_inline (fold a consumer into the
 * store of its single producer); both then delete a block and its buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* ---- expressions --------------------------------------------------------- */

/* Called on every load after its indices were rebuilt; returns the
 * replacement (or the load itself). */

static ir_expr_t *copy_node(ir_func_t *f, const ir_expr_t *e) {
  ir_expr_t *r = TN_NEW(f->arena, ir_expr_t);
  *r = *e;
  return r;
}

/* Rebuilds e bottom-up with fn applied to each load; unchanged subtrees are
 * shared, so a pure observer fn leaves e as it is. */
ir_expr_t *sch_map_loads(ir_func_t *f, ir_expr_t *e, sch_load_fn fn, void *ctx) {
  if (!e) return NULL;
  ir_expr_t *r;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: case IR_E_VAR: return e;
  case IR_E_LOAD: {
    ir_expr_t *idx[IR_MAX_DIMS];
    bool same = true;
    for (int i = 0; i < e->u.load.n; i++) {
      idx[i] = sch_map_loads(f, e->u.load.idx[i], fn, ctx);
      same &= idx[i] == e->u.load.idx[i];
    }
    return fn(f, same ? e : ir_load(f, e->u.load.buf, idx, e->u.load.n), ctx);
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: {
    ir_expr_t *a = sch_map_loads(f, e->u.un, fn, ctx);
    if (a == e->u.un) return e;
    r = copy_node(f, e);
    r->u.un = a;
    return r;
  }
  case IR_E_SELECT: {
    ir_expr_t *c = sch_map_loads(f, e->u.sel.cond, fn, ctx), *t = sch_map_loads(f, e->u.sel.t, fn, ctx);
    ir_expr_t *el = sch_map_loads(f, e->u.sel.f, fn, ctx);
    if (c == e->u.sel.cond && t == e->u.sel.t && el == e->u.sel.f) return e;
    r = copy_node(f, e);
    r->u.sel.cond = c, r->u.sel.t = t, r->u.sel.f = el;
    return r;
  }
  case IR_E_CALL: {
    ir_expr_t *args[2] = {NULL, NULL};
    bool same = true;
    for (int i = 0; i < e->u.call.n && i < 2; i++) {
      args[i] = sch_map_loads(f, e->u.call.args[i], fn, ctx);
      same &= args[i] == e->u.call.args[i];
    }
    if (same) return e;
    r = copy_node(f, e);
    memcpy(r->u.call.args, args, sizeof args);
    return r;
  }
  default: {
    ir_expr_t *a = sch_map_loads(f, e->u.bin.a, fn, ctx), *b = sch_map_loads(f, e->u.bin.b, fn, ctx);
    if (a == e->u.bin.a && b == e->u.bin.b) return e;
    r = copy_node(f, e);
    r->u.bin.a = a, r->u.bin.b = b;
    return r;
  }
  }
}

/* Applies map_loads to a store's value and indices; true if anything changed. */
static bool store_map_loads(ir_func_t *f, ir_stmt_t *st, sch_load_fn fn, void *ctx) {
  if (!st || st->kind != IR_S_STORE) return false;
  ir_expr_t *v = sch_map_loads(f, st->u.store.value, fn, ctx);
  bool changed = v != st->u.store.value;
  st->u.store.value = v;
  for (int i = 0; i < st->u.store.n; i++) {
    ir_expr_t *x = sch_map_loads(f, st->u.store.idx[i], fn, ctx);
    changed |= x != st->u.store.idx[i];
    st->u.store.idx[i] = x;
  }
  return changed;
}

static bool block_map_loads(ir_func_t *f, ir_block_t *b, sch_load_fn fn, void *ctx) {
  bool changed = store_map_loads(f, b->init, fn, ctx);
  changed |= store_map_loads(f, b->body, fn, ctx);
  ir_expr_t *p = sch_map_loads(f, b->predicate, fn, ctx);
  changed |= p != b->predicate;
  b->predicate = p;
  return changed;
}

/* Load replacement: each load of buf becomes value with vars[i] := the
 * load's i-th index (nvars == 0: value as it is). */
typedef struct inliner {
  const ir_buffer_t *buf;
  ir_var_t *const *vars;
  int nvars;
  ir_expr_t *value;
} inliner_t;

static ir_expr_t *inline_load(ir_func_t *f, ir_expr_t *load, void *ctx) {
  inliner_t *in = ctx;
  if (load->u.load.buf != in->buf) return load;
  return ir_expr_subst(f, in->value, in->vars, load->u.load.idx, in->nvars);
}

/* Load observation: how many loads of buf, and whether they all use the
 * indices of the first one. */
typedef struct load_scan {
  const ir_buffer_t *buf;
  int n;
  ir_expr_t **first;
  bool same;
} load_scan_t;

static ir_expr_t *scan_load(ir_func_t *f, ir_expr_t *load, void *ctx) {
  (void)f;
  load_scan_t *s = ctx;
  if (load->u.load.buf != s->buf) return load;
  if (s->n++ == 0) {
    s->first = load->u.load.idx;
    s->same = true;
  } else {
    for (int i = 0; i < load->u.load.n; i++) s->same &= ir_expr_equal(load->u.load.idx[i], s->first[i]);
  }
  return load;
}

static load_scan_t scan_loads(ir_func_t *f, ir_expr_t *e, const ir_buffer_t *buf) {
  load_scan_t s = {.buf = buf};
  sch_map_loads(f, e, scan_load, &s);
  return s;
}

/* The index of v among the block's iterators, or -1. */
static int iter_index(const ir_block_t *b, const ir_expr_t *e) {
  if (e->kind != IR_E_VAR) return -1;
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].var == e->u.var) return i;
  return -1;
}

/* ---- blocks and buffers -------------------------------------------------- */

/* Blocks that write / read a buffer (by their regions); the first few are
 * kept for messages, the counts are exact. */
typedef struct buf_users {
  const ir_buffer_t *buf;
  ir_block_t *w[4], *r[4];
  int nw, nr;
} buf_users_t;

static bool users_visit(ir_stmt_t *s, void *p) {
  buf_users_t *u = p;
  if (s->kind != IR_S_BLOCK) return s->kind != IR_S_STORE;
  ir_block_t *b = &s->u.block;
  if (ir_block_writes(b, u->buf) && u->nw++ < 4) u->w[u->nw - 1] = b;
  if (ir_block_reads(b, u->buf) && u->nr++ < 4) u->r[u->nr - 1] = b;
  return true;
}

static const char *name_of(const ir_block_t *b) { return b ? b->name : "?"; }

static buf_users_t buffer_users(const ir_func_t *f, const ir_buffer_t *buf) {
  buf_users_t u = {.buf = buf};
  ir_stmt_walk(f->root, users_visit, &u);
  return u;
}

static bool drop_alloc_visit(ir_stmt_t *s, void *p) {
  if (s->kind != IR_S_BLOCK) return s->kind != IR_S_STORE;
  ir_block_t *b = &s->u.block;
  int k = 0;
  for (int i = 0; i < b->nallocs; i++)
    if (b->allocs[i] != p) b->allocs[k++] = b->allocs[i];
  b->nallocs = k;
  return true;
}

static void drop_alloc(ir_func_t *f, ir_buffer_t *buf) { ir_stmt_walk(f->root, drop_alloc_visit, buf); }

/* Where deleting a leaf block cuts the tree: the statement `victim` (the
 * block or its highest ancestor loop that would be left empty) is an item of
 * `seq`, which sits in `seq_slot`. */
typedef struct removal {
  ir_stmt_t *victim, *seq;
  ir_stmt_t **seq_slot;
} removal_t;

static int plan_removal(const ir_func_t *f, const ir_block_t *blk, removal_t *r, tn_err_t *err) {
  sch_path_t p = {0};
  int rc = TN_OK;
  if (!sch_find_path(f, blk->uid, &p)) rc = tn_err_set(err, TN_EINVAL, "the block no longer exists");
  for (int i = p.n - 1; i > 0 && rc == TN_OK; i--) {
    ir_stmt_t *parent = p.stmts[i - 1];
    if (parent->kind == IR_S_SEQ && parent->u.seq.n > 1) {
      *r = (removal_t){p.stmts[i], parent, p.slots[i - 1]};
      ir_path_free(&p);
      return TN_OK;
    }
    if (parent->kind == IR_S_BLOCK)
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\" is the only block in the scope of block \"%s\"; removing it would "
                      "leave the scope empty", blk->name, parent->u.block.name);
  }
  ir_path_free(&p);
  return rc < 0 ? rc : tn_err_set(err, TN_EINVAL, "block \"%s\" has no enclosing scope", blk->name);
}

/* Takes the victim out of its SEQ; a SEQ left with one item is unwrapped. */
static void apply_removal(const removal_t *r) {
  ir_stmt_t *seq = r->seq;
  int k = 0;
  for (int i = 0; i < seq->u.seq.n; i++)
    if (seq->u.seq.items[i] != r->victim) seq->u.seq.items[k++] = seq->u.seq.items[i];
  seq->u.seq.n = k;
  if (k == 1) *r->seq_slot = seq->u.seq.items[0];
}

static void expr_str(const ir_expr_t *e, char *out, size_t cap) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_expr(e, &b);
  snprintf(out, cap, "%s", tn_buf_str(&b));
  tn_buf_free(&b);
}

/* Checks shared by both directions: a non-root block whose body is one
 * store, with no init and only spatial iterators, writing one buffer. */
static int check_spatial_block(const ir_block_t *b, const char *role, tn_err_t *err) {
  if (b->init)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" %sis a reduction (it has an init); inlining needs a block "
                      "without init", b->name, role);
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind != IR_ITER_SPATIAL)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" %shas reduction iterator %s; inlining needs spatial iterators only",
                        b->name, role, b->iters[i].var->name);
  if (!b->body || b->body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" %sdoes not consist of a single store", b->name, role);
  if (b->nwrites != 1 || b->writes[0].buf != b->body->u.store.buf)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" %swrites %d buffers; inlining needs exactly one", b->name, role,
                      b->nwrites);
  return TN_OK;
}

/* The buffer a block writes must be a temporary that only this block writes
 * (u: the buffer's users). */
static int check_temp_written_once(const ir_block_t *b, const ir_buffer_t *buf, const buf_users_t *u, tn_err_t *err) {
  if (buf->role != IR_BUF_TEMP)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %s, a parameter of the function; only a temporary buffer "
                      "can be inlined away", b->name, buf->name);
  if (u->nw != 1) {
    const ir_block_t *other = u->w[0] == b ? u->w[1] : u->w[0];
    return tn_err_set(err, TN_EINVAL, "buffer %s is written by %d blocks (\"%s\" and \"%s\"); inlining needs a single "
                      "writer", buf->name, u->nw, b->name, name_of(other));
  }
  return TN_OK;
}

/* ---- compute_inline ------------------------------------------------------ */

/* The producer's store must be B[v_a, v_b, ...] with distinct iterators that
 * cover every iterator its value uses; fills vars (one per dimension). */
static int check_inline_store(ir_func_t *f, const ir_block_t *b, ir_var_t **vars, tn_err_t *err) {
  const ir_stmt_t *st = b->body;
  bool used[SCH_MAX_RVS_OUT];
  if (b->niters > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EUNSUPPORTED, "block \"%s\" has too many iterators", b->name);
  memset(used, 0, sizeof used[0] * (size_t)b->niters);
  for (int d = 0; d < st->u.store.n; d++) {
    int k = iter_index(b, st->u.store.idx[d]);
    if (k < 0 || used[k]) {
      char s[256];
      expr_str(st->u.store.idx[d], s, sizeof s);
      return tn_err_set(err, TN_EINVAL, "block \"%s\" stores %s at index %s of dimension %d; compute_inline needs "
                        "every index to be a distinct iterator of the block", b->name, st->u.store.buf->name, s, d);
    }
    used[k] = true;
    vars[d] = b->iters[k].var;
  }
  for (int i = 0; i < b->niters; i++)
    if (!used[i] && ir_expr_uses_var(st->u.store.value, b->iters[i].var))
      return tn_err_set(err, TN_EINVAL, "the value of block \"%s\" uses iterator %s, which is not an index of %s",
                        b->name, b->iters[i].var->name, st->u.store.buf->name);
  if (scan_loads(f, st->u.store.value, st->u.store.buf).n > 0)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %s, the buffer it writes", b->name, st->u.store.buf->name);
  return TN_OK;
}

/* The users of buf as the index lists them (the first few kept by name). */
static buf_users_t indexed_users(sch_index_t *x, const ir_buffer_t *buf) {
  const sch_buf_users_t *iu = sch_index_users(x, buf);
  buf_users_t u = {.buf = buf, .nw = iu->writers.n, .nr = iu->readers.n};
  for (int i = 0; i < 4 && i < u.nw; i++) u.w[i] = iu->writers.v[i];
  for (int i = 0; i < 4 && i < u.nr; i++) u.r[i] = iu->readers.v[i];
  return u;
}

/* plan_removal from the index's parents instead of a path walk. */
static int plan_removal_indexed(const sch_index_t *x, ir_stmt_t *bs, removal_t *r, tn_err_t *err) {
  const ir_block_t *blk = &bs->u.block;
  for (ir_stmt_t *s = bs, *parent; (parent = sch_index_parent(x, s)); s = parent) {
    if (parent->kind == IR_S_SEQ && parent->u.seq.n > 1) {
      *r = (removal_t){s, parent, sch_index_slot(x, parent)};
      return r->seq_slot ? TN_OK : tn_err_set(err, TN_EINVAL, "block \"%s\" has no enclosing scope", blk->name);
    }
    if (parent->kind == IR_S_BLOCK)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" is the only block in the scope of block \"%s\"; removing it "
                        "would leave the scope empty", blk->name, parent->u.block.name);
  }
  return tn_err_set(err, TN_EINVAL, "block \"%s\" has no enclosing scope", blk->name);
}

/* Substitutes b's value into the blocks reading buf (those whose read
 * regions name it: only they can load it) and keeps the index current. */
static void rewrite_consumers(ir_func_t *f, sch_index_t *x, ir_block_t *b, const inliner_t *in) {
  const sch_blist_t *rl = &sch_index_users(x, in->buf)->readers;
  int n = rl->n;
  ir_block_t **readers = tn_xmalloc(sizeof *readers * (size_t)(n + 1));
  memcpy(readers, rl->v, sizeof *readers * (size_t)n); /* the index's lists move as it is updated */
  inliner_t ctx = *in;
  for (int i = 0; i < n; i++)
    if (readers[i] != b && block_map_loads(f, readers[i], inline_load, &ctx)) {
      ir_block_infer_regions(f, readers[i]);
      sch_index_block_rewritten(x, readers[i]);
    }
  free(readers);
}

/* Unlinks the removed statement, forgets it in the index, and drops buf
 * from the allocations of the blocks above it (a buffer is allocated in a
 * block enclosing all its users). */
static void remove_inlined(sch_index_t *x, const removal_t *rm, ir_buffer_t *buf) {
  ir_stmt_t *seq_parent = sch_index_parent(x, rm->seq);
  apply_removal(rm);
  sch_index_subtree_removed(x, rm->victim);
  if (*rm->seq_slot != rm->seq) sch_index_reparent(x, *rm->seq_slot, seq_parent);
  for (ir_stmt_t *s = rm->seq; s; s = sch_index_parent(x, s))
    if (s->kind == IR_S_BLOCK) drop_alloc_visit(s, buf);
}

int sch_prim_compute_inline(sch_t *s, int block_uid, tn_err_t *err) {
  ir_func_t *f = s->f;
  sch_index_t *x = sch_index_get(s);
  ir_stmt_t *bs = sch_index_find(x, block_uid);
  if (!bs || bs->kind != IR_S_BLOCK) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  ir_block_t *b = &bs->u.block;
  if (&f->root->u.block == b) return tn_err_set(err, TN_EINVAL, "the root block cannot be inlined");
  ir_var_t *vars[IR_MAX_DIMS];
  removal_t rm;
  int rc;
  if ((rc = check_spatial_block(b, "", err)) < 0) return rc;
  ir_buffer_t *buf = b->body->u.store.buf;
  buf_users_t u = indexed_users(x, buf);
  if ((rc = check_temp_written_once(b, buf, &u, err)) < 0 || (rc = check_inline_store(f, b, vars, err)) < 0 ||
      (rc = plan_removal_indexed(x, bs, &rm, err)) < 0)
    return rc;
  inliner_t in = {buf, vars, buf->ndim, b->body->u.store.value};
  rewrite_consumers(f, x, b, &in);
  remove_inlined(x, &rm, buf);
  return TN_OK;
}

/* ---- reverse_compute_inline ---------------------------------------------- */

/* The single block producing what consumer c reads, and the buffer. */
static int find_single_producer(const ir_func_t *f, const ir_block_t *c, ir_block_t **prod, ir_buffer_t **buf,
                                tn_err_t *err) {
  ir_block_t *ps[4];
  int np = ir_producers(f, c, ps, 4);
  if (np == 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" has no producer block to inline into", c->name);
  if (np > 1)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d producer blocks (\"%s\", \"%s\"%s); reverse_compute_inline "
                      "needs exactly one", c->name, np, ps[0]->name, ps[1]->name, np > 2 ? ", ..." : "");
  *prod = ps[0];
  int nbuf = 0;
  for (int r = 0; r < c->nreads; r++)
    if (ir_block_writes(ps[0], c->reads[r].buf) && nbuf++ == 0) *buf = c->reads[r].buf;
  if (nbuf != 1)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %d buffers written by block \"%s\"; reverse_compute_inline "
                      "needs exactly one", c->name, nbuf, ps[0]->name);
  return TN_OK;
}

/* Every load of buf in the consumer must be buf[u_0, ..., u_n-1] with
 * distinct iterators covering all of them, each u_d spanning buf's dimension
 * d; fills vars with u_d. */
static int check_consumer_loads(ir_func_t *f, const ir_block_t *c, const ir_buffer_t *buf, ir_var_t **vars,
                                tn_err_t *err) {
  load_scan_t ls = scan_loads(f, c->body->u.store.value, buf);
  for (int i = 0; i < c->body->u.store.n; i++)
    if (scan_loads(f, c->body->u.store.idx[i], buf).n)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" loads %s inside a store index", c->name, buf->name);
  if (ls.n == 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" does not load %s in its value", c->name, buf->name);
  if (!ls.same)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" loads %s at different indices; reverse_compute_inline needs every "
                      "load at the same iterators", c->name, buf->name);
  if (c->niters != buf->ndim)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d iterators but %s has %d dimensions; reverse_compute_inline "
                      "needs one iterator per dimension", c->name, c->niters, buf->name, buf->ndim);
  bool used[IR_MAX_DIMS] = {false};
  for (int d = 0; d < buf->ndim; d++) {
    int k = iter_index(c, ls.first[d]);
    if (k < 0 || used[k] || c->iters[k].extent != buf->shape[d]) {
      char s[256];
      expr_str(ls.first[d], s, sizeof s);
      return tn_err_set(err, TN_EINVAL, "block \"%s\" loads %s at index %s of dimension %d; reverse_compute_inline "
                        "needs distinct iterators spanning each dimension (extent %lld)", c->name, buf->name, s, d,
                        (long long)buf->shape[d]);
    }
    used[k] = true;
    vars[d] = c->iters[k].var;
  }
  return TN_OK;
}

static int check_reverse_inline(ir_func_t *f, ir_block_t *c, ir_block_t **prod, ir_buffer_t **buf, ir_var_t **vars,
                                removal_t *rm, tn_err_t *err) {
  int rc;
  if ((rc = check_spatial_block(c, "", err)) < 0) return rc;
  if (c->predicate)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has a predicate; reverse_compute_inline needs a block that runs on "
                      "its whole domain", c->name);
  if ((rc = find_single_producer(f, c, prod, buf, err)) < 0) return rc;
  ir_block_t *p = *prod;
  char role[300];
  snprintf(role, sizeof role, "(the producer of block \"%s\") ", c->name);
  buf_users_t u = buffer_users(f, *buf);
  if ((rc = check_spatial_block(p, role, err)) < 0 || (rc = check_temp_written_once(p, *buf, &u, err)) < 0) return rc;
  if (u.nr != 1)
    return tn_err_set(err, TN_EINVAL, "buffer %s is read by %d blocks (\"%s\" and \"%s\"); reverse_compute_inline needs "
                      "block \"%s\" to be its only reader", (*buf)->name, u.nr, name_of(u.r[0]), name_of(u.r[1]), c->name);
  ir_buffer_t *out = c->body->u.store.buf;
  buf_users_t o = buffer_users(f, out);
  if (o.nw != 1)
    return tn_err_set(err, TN_EINVAL, "buffer %s is written by %d blocks; reverse_compute_inline needs block \"%s\" to "
                      "be its only writer", out->name, o.nw, c->name);
  if (ir_block_reads(p, out))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %s, which block \"%s\" writes", p->name, out->name, c->name);
  if (ir_scope_block(f, p->uid) != ir_scope_block(f, c->uid))
    return tn_err_set(err, TN_EINVAL, "blocks \"%s\" and \"%s\" are in different scopes", p->name, c->name);
  if ((rc = check_consumer_loads(f, c, *buf, vars, err)) < 0) return rc;
  if (scan_loads(f, c->body->u.store.value, out).n > 0)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %s, the buffer it writes", c->name, out->name);
  return plan_removal(f, c, rm, err);
}

int sch_prim_reverse_compute_inline(sch_t *s, int block_uid, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *c = sch_find_block(f, block_uid), *p = NULL;
  if (!c) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (&f->root->u.block == c) return tn_err_set(err, TN_EINVAL, "the root block cannot be inlined");
  ir_buffer_t *buf = NULL;
  ir_var_t *vars[IR_MAX_DIMS];
  removal_t rm;
  int rc = check_reverse_inline(s->f, c, &p, &buf, vars, &rm, err);
  if (rc < 0) return rc;
  /* C[g(u)] = h(B[u], ...) with u := P's store indices and B[...] := P's value. */
  ir_expr_t **pidx = p->body->u.store.idx;
  inliner_t in = {buf, NULL, 0, p->body->u.store.value};
  ir_expr_t *value = ir_expr_subst(f, sch_map_loads(f, c->body->u.store.value, inline_load, &in), vars, pidx, buf->ndim);
  const ir_stmt_t *cst = c->body;
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int d = 0; d < cst->u.store.n; d++) idx[d] = ir_expr_subst(f, cst->u.store.idx[d], vars, pidx, buf->ndim);
  p->body = ir_store(f, cst->u.store.buf, idx, cst->u.store.n, value);
  ir_block_infer_regions(f, p);
  apply_removal(&rm);
  drop_alloc(f, buf);
  return TN_OK;
}
