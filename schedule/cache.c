/* cache.c — cache_read and cache_write: stage one buffer of a block through a
 * new buffer in another storage scope, with a copy block placed in the root
 * scope just before (read) or after (write) the block's loop nest; and
 * reindex, which stages it through a buffer laid out in the block's own
 * iteration space (TVM's ReIndex: the im2col of a convolution, so that the
 * block reads its operands at its plain iterators); and pad_einsum, which
 * pads such a block's iteration space to multiples of an intrinsic's shape
 * through zero-padded copies of its operands (TVM's PadEinsum). */
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "sch_internal.h"


/* ---- names and buffers ------------------------------------------------- */

static bool name_used(const ir_func_t *f, const char *name) {
  for (int i = 0; i < f->nparams; i++)
    if (strcmp(f->params[i]->name, name) == 0) return true;
  const ir_block_t *root = ir_func_root(f);
  for (int i = 0; i < root->nallocs; i++)
    if (strcmp(root->allocs[i]->name, name) == 0) return true;
  return ir_func_find_block(f, name) != NULL;
}

/* `base`, with _1, _2, ... appended when a buffer or block already has that
 * name (a second cache of the same buffer). */
static const char *fresh_name(ir_func_t *f, const char *base) {
  const char *name = base;
  for (int k = 1; name_used(f, name); k++) name = tn_arena_printf(f->arena, "%s_%d", base, k);
  return name;
}

/* A temp buffer named `base` (made unique) in `scope`, allocated in the root block. */
static ir_buffer_t *temp_buffer(ir_func_t *f, const char *base, ir_dtype_t dtype, int ndim, const int64_t *shape,
                                ir_scope_t scope) {
  ir_buffer_t *b = ir_buffer_new(f, fresh_name(f, base), dtype, ndim, shape, scope, IR_BUF_TEMP);
  ir_block_t *root = ir_func_root(f);
  ir_buffer_t **allocs = TN_NEWN(f->arena, ir_buffer_t *, root->nallocs + 1);
  if (root->nallocs) memcpy(allocs, root->allocs, sizeof(ir_buffer_t *) * (size_t)root->nallocs);
  allocs[root->nallocs++] = b;
  root->allocs = allocs;
  return b;
}

/* A temp buffer shaped like src in `scope`: "<buf>_<scope>". */
static ir_buffer_t *cache_buffer(ir_func_t *f, const ir_buffer_t *src, ir_scope_t scope) {
  const char *base = tn_arena_printf(f->arena, "%s_%s", src->name, ir_scope_name(scope));
  return temp_buffer(f, base, src->dtype, src->ndim, src->shape, scope);
}

/* One side of a copy: a buffer and its indices over the variables `from`
 * (idx NULL: the copy's iterators themselves, one per dimension). */
typedef struct copy_side {
  ir_buffer_t *buf;
  ir_expr_t *const *idx;
  int n;
} copy_side_t;

static ir_expr_t **side_index(ir_func_t *f, const copy_side_t *c, ir_var_t *const *from, ir_expr_t **vs, int nv) {
  if (!c->idx) return vs;
  ir_expr_t **idx = TN_NEWN(f->arena, ir_expr_t *, c->n + 1);
  for (int d = 0; d < c->n; d++) idx[d] = ir_expr_subst(f, c->idx[d], from, vs, nv);
  return idx;
}

/* Loops ax0.. of extents ext around a block named `name` with spatial
 * iterators v0.. over them that copies src into dst, each side indexed as
 * copy_side_t says with from[d] replaced by v_d; *uid gets the block's uid. */
static ir_stmt_t *copy_nest(ir_func_t *f, const char *name, const int64_t *ext, int n, ir_var_t *const *from,
                            const copy_side_t *dst, const copy_side_t *src, int *uid) {
  ir_stmt_t *bs = ir_block_new(f, name);
  ir_block_t *b = &bs->u.block;
  ir_var_t **axes = TN_NEWN(f->arena, ir_var_t *, n + 1);
  ir_expr_t **vs = TN_NEWN(f->arena, ir_expr_t *, n + 1);
  b->iters = TN_NEWN(f->arena, ir_iter_t, n + 1);
  b->niters = n;
  for (int d = 0; d < n; d++) {
    axes[d] = ir_var_new(f, tn_arena_printf(f->arena, "ax%d", d), IR_INT32);
    ir_var_t *v = ir_var_new(f, tn_arena_printf(f->arena, "v%d", d), IR_INT32);
    b->iters[d] = (ir_iter_t){v, ext[d], IR_ITER_SPATIAL, ir_varref(f, axes[d])};
    vs[d] = ir_varref(f, v);
  }
  ir_expr_t **di = side_index(f, dst, from, vs, n), **si = side_index(f, src, from, vs, n);
  b->body = ir_store(f, dst->buf, di, dst->n, ir_load(f, src->buf, si, src->n));
  ir_block_infer_regions(f, b);
  *uid = b->uid;
  ir_stmt_t *nest = bs;
  for (int d = n - 1; d >= 0; d--) nest = ir_loop_new(f, axes[d], ext[d], nest);
  return nest;
}

/* ---- redirecting accesses ---------------------------------------------- */

/* e with every load of `from` reading `to` instead (unchanged subtrees shared). */
static ir_expr_t *swap_loads(ir_func_t *f, ir_expr_t *e, const ir_buffer_t *from, ir_buffer_t *to) {
  if (!e) return NULL;
  ir_expr_t *r = e;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: case IR_E_VAR: return e;
  case IR_E_LOAD: {
    ir_expr_t **idx = TN_NEWN(f->arena, ir_expr_t *, e->u.load.n + 1);
    bool changed = e->u.load.buf == from;
    for (int i = 0; i < e->u.load.n; i++) {
      idx[i] = swap_loads(f, e->u.load.idx[i], from, to);
      changed |= idx[i] != e->u.load.idx[i];
    }
    return changed ? ir_load(f, e->u.load.buf == from ? to : e->u.load.buf, idx, e->u.load.n) : e;
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: {
    ir_expr_t *a = swap_loads(f, e->u.un, from, to);
    if (a == e->u.un) return e;
    r = TN_NEW(f->arena, ir_expr_t);
    *r = *e;
    r->u.un = a;
    return r;
  }
  case IR_E_SELECT: {
    ir_expr_t *c = swap_loads(f, e->u.sel.cond, from, to), *t = swap_loads(f, e->u.sel.t, from, to);
    ir_expr_t *el = swap_loads(f, e->u.sel.f, from, to);
    return c == e->u.sel.cond && t == e->u.sel.t && el == e->u.sel.f ? e : ir_select(f, c, t, el);
  }
  case IR_E_CALL: {
    ir_expr_t *args[2] = {NULL, NULL};
    bool changed = false;
    for (int i = 0; i < e->u.call.n; i++) {
      args[i] = swap_loads(f, e->u.call.args[i], from, to);
      changed |= args[i] != e->u.call.args[i];
    }
    return changed ? ir_call(f, e->u.call.fn, args, e->u.call.n) : e;
  }
  default: {
    ir_expr_t *a = swap_loads(f, e->u.bin.a, from, to), *b = swap_loads(f, e->u.bin.b, from, to);
    if (a == e->u.bin.a && b == e->u.bin.b) return e;
    r = TN_NEW(f->arena, ir_expr_t);
    *r = *e;
    r->u.bin.a = a;
    r->u.bin.b = b;
    return r;
  }
  }
}

/* Redirects a block's accesses of `from` (loads; stores too if `stores`) to
 * `to` in its body and init, then recomputes its regions. */
static void redirect_block(ir_func_t *f, ir_block_t *b, const ir_buffer_t *from, ir_buffer_t *to, bool stores) {
  ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2; i++) {
    ir_stmt_t *st = sts[i];
    if (!st || st->kind != IR_S_STORE) continue;
    for (int d = 0; d < st->u.store.n; d++) st->u.store.idx[d] = swap_loads(f, st->u.store.idx[d], from, to);
    st->u.store.value = swap_loads(f, st->u.store.value, from, to);
    if (stores && st->u.store.buf == from) st->u.store.buf = to;
  }
  ir_block_infer_regions(f, b);
}

static bool expr_loads(const ir_expr_t *e, const ir_buffer_t *buf) {
  if (!e) return false;
  if (e->kind == IR_E_LOAD && e->u.load.buf == buf) return true;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (expr_loads(kids[i], buf)) return true;
  return false;
}

/* ---- placement in the root scope -------------------------------------- */

/* The root scope's top-level statements (the items of its body). */
static ir_stmt_t **root_items(const ir_func_t *f, int *n) {
  ir_stmt_t **body = &ir_func_root(f)->body;
  if (*body && (*body)->kind == IR_S_SEQ) {
    *n = (*body)->u.seq.n;
    return (*body)->u.seq.items;
  }
  *n = *body ? 1 : 0;
  return body;
}

/* Index of the top-level statement of the root scope that holds uid. */
static int root_position(const ir_func_t *f, int uid) {
  sch_path_t p = {0};
  int at = -1;
  if (sch_find_path(f, uid, &p) && p.n >= 2) {
    int n;
    ir_stmt_t **items = root_items(f, &n);
    at = 0; /* the body is the block's nest itself */
    for (int i = 0; i < n && p.n > 2; i++)
      if (items[i] == p.stmts[2]) {
        at = i;
        break;
      }
  }
  ir_path_free(&p);
  return at;
}

static void root_insert(ir_func_t *f, int pos, ir_stmt_t *item) {
  int n;
  ir_stmt_t **items = root_items(f, &n);
  ir_stmt_t **all = TN_NEWN(f->arena, ir_stmt_t *, n + 1);
  memcpy(all, items, sizeof(ir_stmt_t *) * (size_t)pos);
  all[pos] = item;
  memcpy(all + pos + 1, items + pos, sizeof(ir_stmt_t *) * (size_t)(n - pos));
  ir_func_root(f)->body = ir_seq(f, all, n + 1);
}

/* Fails if a block other than `blk` in blk's top-level nest accesses `buf`
 * in a way the staging would break (writes it; or reads it, for writes). */
static int check_nest_alone(const ir_func_t *f, const ir_block_t *blk, const ir_buffer_t *buf, bool write,
                            tn_err_t *err) {
  int n, pos = root_position(f, blk->uid);
  ir_stmt_t **items = root_items(f, &n);
  ir_block_t **blocks;
  int nb = ir_blocks_under(items[pos], false, &blocks), rc = TN_OK;
  for (int i = 0; i < nb && rc == TN_OK; i++) {
    if (blocks[i] == blk) continue;
    bool clash = ir_block_writes(blocks[i], buf) || (write && ir_block_reads(blocks[i], buf));
    if (clash)
      rc = tn_err_set(err, TN_EINVAL,
                      "block \"%s\" in the same loop nest as block \"%s\" also %s %s; the copy block is placed "
                      "outside that nest, so %s must be accessed only by \"%s\" there",
                      blocks[i]->name, blk->name, ir_block_writes(blocks[i], buf) ? "writes" : "reads", buf->name,
                      buf->name, blk->name);
  }
  free(blocks);
  return rc;
}

static int find_compute_block(sch_t *s, int block_uid, ir_block_t **out, tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (b == ir_func_root(s->f)) return tn_err_set(err, TN_EINVAL, "the root block has no buffers to cache");
  *out = b;
  return TN_OK;
}

/* ---- primitives -------------------------------------------------------- */

int sch_prim_cache_read(sch_t *s, int block_uid, int read_index, ir_scope_t scope, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b;
  int rc = find_compute_block(s, block_uid, &b, err);
  if (rc < 0) return rc;
  if (read_index < 0 || read_index >= b->nreads)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %d buffer(s); read_buffer_index %d is out of range (valid: 0..%d)",
                      b->name, b->nreads, read_index, b->nreads - 1);
  ir_buffer_t *buf = b->reads[read_index].buf;
  if (ir_block_writes(b, buf))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" also writes %s; a read cache of it would go stale", b->name, buf->name);
  if ((rc = check_nest_alone(f, b, buf, false, err)) < 0) return rc;
  int pos = root_position(f, b->uid);
  ir_buffer_t *cache = cache_buffer(f, buf, scope);
  copy_side_t dst = {cache, NULL, cache->ndim}, src = {buf, NULL, buf->ndim};
  root_insert(f, pos, copy_nest(f, cache->name, cache->shape, cache->ndim, NULL, &dst, &src, out));
  redirect_block(f, b, buf, cache, false);
  return TN_OK;
}

int sch_prim_cache_write(sch_t *s, int block_uid, int write_index, ir_scope_t scope, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b;
  int rc = find_compute_block(s, block_uid, &b, err);
  if (rc < 0) return rc;
  if (write_index < 0 || write_index >= b->nwrites)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" writes %d buffer(s); write_buffer_index %d is out of range (valid: 0..%d)", b->name,
                      b->nwrites, write_index, b->nwrites - 1);
  ir_buffer_t *buf = b->writes[write_index].buf;
  bool reads_old = b->body && b->body->kind == IR_S_STORE && expr_loads(b->body->u.store.value, buf);
  if (reads_old && !b->init)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" reads the previous contents of %s without an init; a write cache would not hold them",
                      b->name, buf->name);
  if ((rc = check_nest_alone(f, b, buf, true, err)) < 0) return rc;
  int pos = root_position(f, b->uid);
  ir_buffer_t *cache = cache_buffer(f, buf, scope);
  copy_side_t dst = {buf, NULL, buf->ndim}, src = {cache, NULL, cache->ndim};
  root_insert(f, pos + 1, copy_nest(f, cache->name, cache->shape, cache->ndim, NULL, &dst, &src, out));
  redirect_block(f, b, buf, cache, true);
  return TN_OK;
}

/* ---- reindex -------------------------------------------------------------- */

/* Whether every load of buf in e has the indices of *first (set by the first one met). */
static bool same_loads(const ir_expr_t *e, const ir_buffer_t *buf, const ir_expr_t **first) {
  if (!e) return true;
  if (e->kind == IR_E_LOAD && e->u.load.buf == buf) {
    if (!*first) *first = e;
    if (!ir_expr_equal(*first, e)) return false;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (!same_loads(kids[i], buf, first)) return false;
  return true;
}

static bool same_index(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int d = 0; d < n; d++)
    if (!ir_expr_equal(a[d], b[d])) return false;
  return true;
}

/* The one index tuple at which block b accesses buf (its loads, and for a
 * write its stores): *idx, *n.  Fails, naming the block, where the accesses
 * differ. */
static int access_index(const ir_block_t *b, const ir_buffer_t *buf, bool write, ir_expr_t *const **idx, int *n,
                        tn_err_t *err) {
  const ir_stmt_t *sts[2] = {b->body, b->init};
  const ir_expr_t *load = NULL;
  *idx = NULL;
  for (int i = 0; i < 2; i++) {
    const ir_stmt_t *st = sts[i];
    if (!st) continue;
    bool ok = same_loads(st->u.store.value, buf, &load);
    for (int d = 0; d < st->u.store.n; d++) ok &= same_loads(st->u.store.idx[d], buf, &load);
    if (st->u.store.buf == buf) {
      if (*idx && !same_index(*idx, st->u.store.idx, st->u.store.n)) ok = false;
      *idx = st->u.store.idx, *n = st->u.store.n;
    }
    if (ok && load && *idx && !same_index(*idx, load->u.load.idx, *n)) ok = false;
    if (!ok)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" accesses %s at more than one index; reindex needs one", b->name,
                        buf->name);
  }
  if (!write && load) *idx = load->u.load.idx, *n = load->u.load.n;
  if (!*idx)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" does not %s %s in its body", b->name, write ? "store" : "load",
                      buf->name);
  return TN_OK;
}

/* The block's iterators that the index uses, in the block's order (used[],
 * *nused), after checking each index is an affine function of them. */
static int index_iters(const ir_block_t *b, const ir_buffer_t *buf, bool write, ir_expr_t *const *idx, int n,
                       int *used, int *nused, tn_err_t *err) {
  bool in[SCH_MAX_RVS_OUT] = {false};
  ir_affine_t a = {0};
  int rc = TN_OK;
  for (int d = 0; d < n && rc == TN_OK; d++) {
    bool ok = ir_affine_of(idx[d], 0, &a);
    for (int k = 0; ok && k < a.n; k++) {
      int t = 0;
      while (t < b->niters && b->iters[t].var != a.terms[k].var) t++;
      ok = t < b->niters;
      if (ok) in[t] = true;
    }
    if (!ok) {
      tn_buf_t e;
      tn_buf_init(&e);
      ir_print_expr(idx[d], &e);
      rc = tn_err_set(err, TN_EINVAL,
                      "block \"%s\" %s %s at index %d = %s, which is not an affine function of its iterators; "
                      "reindex cannot lay it out over them",
                      b->name, write ? "writes" : "reads", buf->name, d, tn_buf_str(&e));
      tn_buf_free(&e);
    }
  }
  ir_affine_free(&a);
  if (rc < 0) return rc;
  /* the copy reads at every point of the iteration space: an access that a
   * select guards (a padding's X[h - 1]) may leave the buffer there */
  ir_bounds_t bounds;
  ir_bounds_init(&bounds);
  for (int t = 0; t < b->niters; t++) ir_bounds_set(&bounds, b->iters[t].var, 0, b->iters[t].extent - 1);
  for (int d = 0; d < n && rc == TN_OK; d++) {
    ir_interval_t iv = ir_interval_of(idx[d], &bounds);
    if (iv.lo < 0 || iv.hi >= buf->shape[d])
      rc = tn_err_set(err, TN_EINVAL,
                      "block \"%s\" accesses %s at index %d outside [0, %lld) for some of its iterators' values (a "
                      "guarded access); a copy over all of them would leave the buffer",
                      b->name, buf->name, d, (long long)buf->shape[d]);
  }
  ir_bounds_free(&bounds);
  if (rc < 0) return rc;
  *nused = 0;
  for (int t = 0; t < b->niters; t++) {
    if (!in[t]) continue;
    if (write && b->iters[t].kind == IR_ITER_REDUCE)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %s at an index over its reduction iterator %s",
                        b->name, buf->name, b->iters[t].var->name);
    used[(*nused)++] = t;
  }
  if (*nused == 0 || *nused > IR_MAX_DIMS)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" accesses %s over %d of its iterators; reindex needs 1..%d",
                      b->name, buf->name, *nused, IR_MAX_DIMS);
  return TN_OK;
}

/* idx simplified over the block's iterators' domains (a one-group conv's
 * co / CO * CI + rc is rc): what reindex lays out and copies.  Iterators of
 * extent 1 stay (a batch of one is still a dimension of the layout). */
static ir_expr_t **domain_index(ir_func_t *f, const ir_block_t *b, ir_expr_t *const *idx, int n) {
  ir_bounds_t bounds;
  ir_bounds_init(&bounds);
  for (int t = 0; t < b->niters; t++)
    if (b->iters[t].extent > 1) ir_bounds_set(&bounds, b->iters[t].var, 0, b->iters[t].extent - 1);
  ir_expr_t **out = TN_NEWN(f->arena, ir_expr_t *, n + 1);
  for (int d = 0; d < n; d++) out[d] = ir_simplify(f, idx[d], &bounds);
  ir_bounds_free(&bounds);
  return out;
}

typedef struct reindexing {
  const ir_buffer_t *from;
  ir_buffer_t *to;
  ir_var_t *const *vars; /* the iterators indexing `to` */
} reindexing_t;

/* An index of its own (stores edit theirs in place) over the iterators. */
static ir_expr_t **iter_index(ir_func_t *f, const reindexing_t *r) {
  ir_expr_t **idx = TN_NEWN(f->arena, ir_expr_t *, r->to->ndim);
  for (int d = 0; d < r->to->ndim; d++) idx[d] = ir_varref(f, r->vars[d]);
  return idx;
}

static ir_expr_t *reindex_load(ir_func_t *f, ir_expr_t *load, void *p) {
  const reindexing_t *r = p;
  return load->u.load.buf == r->from ? ir_load(f, r->to, iter_index(f, r), r->to->ndim) : load;
}

/* The block's accesses of r->from become accesses of r->to at its iterators. */
static void reindex_block(ir_func_t *f, ir_block_t *b, reindexing_t *r) {
  ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2; i++) {
    ir_stmt_t *st = sts[i];
    if (!st) continue;
    for (int d = 0; d < st->u.store.n; d++) st->u.store.idx[d] = sch_map_loads(f, st->u.store.idx[d], reindex_load, r);
    st->u.store.value = sch_map_loads(f, st->u.store.value, reindex_load, r);
    if (st->u.store.buf == r->from) st->u.store.buf = r->to, st->u.store.idx = iter_index(f, r), st->u.store.n = r->to->ndim;
  }
  ir_block_infer_regions(f, b);
}

int sch_prim_reindex(sch_t *s, int block_uid, int index, bool write, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b;
  int rc = find_compute_block(s, block_uid, &b, err);
  if (rc < 0) return rc;
  int nb = write ? b->nwrites : b->nreads;
  if (index < 0 || index >= nb)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" %s %d buffer(s); %s buffer index %d is out of range (valid: 0..%d)",
                      b->name, write ? "writes" : "reads", nb, write ? "write" : "read", index, nb - 1);
  if (!b->body || b->body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not a compute block (its body is not a store)", b->name);
  ir_buffer_t *buf = (write ? b->writes : b->reads)[index].buf;
  if (!write && ir_block_writes(b, buf))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" also writes %s; reindex a write of it instead", b->name, buf->name);
  if (write && !b->init && expr_loads(b->body->u.store.value, buf))
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" reads the previous contents of %s without an init; a reindexed copy would not "
                      "hold them",
                      b->name, buf->name);
  ir_expr_t *const *idx;
  int n = 0, used[SCH_MAX_RVS_OUT], nused = 0;
  if ((rc = access_index(b, buf, write, &idx, &n, err)) < 0) return rc;
  idx = domain_index(f, b, idx, n);
  if ((rc = index_iters(b, buf, write, idx, n, used, &nused, err)) < 0 ||
      (rc = check_nest_alone(f, b, buf, write, err)) < 0)
    return rc;

  int64_t shape[IR_MAX_DIMS];
  ir_var_t *from[IR_MAX_DIMS];
  for (int d = 0; d < nused; d++) {
    const ir_iter_t *it = &b->iters[used[d]];
    shape[d] = it->extent, from[d] = it->var;
  }
  ir_buffer_t *re = temp_buffer(f, tn_arena_printf(f->arena, "%s_reindex", buf->name), buf->dtype, nused, shape,
                                buf->scope);
  copy_side_t plain = {re, NULL, nused}, orig = {buf, idx, n};
  int pos = root_position(f, b->uid);
  ir_stmt_t *nest = copy_nest(f, re->name, shape, nused, from, write ? &orig : &plain, write ? &plain : &orig, out);
  root_insert(f, write ? pos + 1 : pos, nest);
  reindexing_t r = {buf, re, from};
  reindex_block(f, b, &r);
  return TN_OK;
}

/* ---- pad_einsum ------------------------------------------------------------ */

/* The iterator of b that e is (a plain variable), or -1. */
static int plain_iter(const ir_block_t *b, const ir_expr_t *e) {
  if (e->kind != IR_E_VAR) return -1;
  for (int t = 0; t < b->niters; t++)
    if (b->iters[t].var == e->u.var) return t;
  return -1;
}

/* Fails unless every load in e is at plain iterators of b and no iterator
 * is used outside a load's indices (a select over them would see padding). */
static int einsum_expr(const ir_block_t *b, const ir_expr_t *e, tn_err_t *err) {
  if (e->kind == IR_E_VAR && plain_iter(b, e) >= 0)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" uses iterator %s outside a buffer's index; pad_einsum needs an einsum whose "
                      "iterators only index buffers",
                      b->name, e->u.var->name);
  if (e->kind == IR_E_LOAD) {
    for (int d = 0; d < e->u.load.n; d++)
      if (plain_iter(b, e->u.load.idx[d]) < 0)
        return tn_err_set(err, TN_EINVAL,
                          "block \"%s\" reads %s at index %d that is not one of its iterators; pad_einsum needs "
                          "every access at plain iterators (reindex it first)",
                          b->name, e->u.load.buf->name, d);
    return TN_OK;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  int rc = TN_OK;
  for (int i = 0; i < n && rc == TN_OK; i++) rc = einsum_expr(b, kids[i], err);
  return rc;
}

/* The loops b's iterators are bound to (NULL for an iterator of extent 1
 * bound to a constant), checking each is a serial loop of the iterator's
 * extent whose body down to b is a chain of single statements (b alone in
 * its nest, so that extending the loop extends nothing else). */
static int einsum_loops(const ir_func_t *f, const ir_block_t *b, ir_loop_t **loops, tn_err_t *err) {
  sch_path_t p = {0};
  int rc = TN_OK;
  if (!sch_find_path(f, b->uid, &p)) rc = tn_err_set(err, TN_EINVAL, "block \"%s\" is not in the function", b->name);
  for (int t = 0; t < b->niters && rc == TN_OK; t++) {
    const ir_iter_t *it = &b->iters[t];
    loops[t] = NULL;
    if (it->extent == 1 && it->binding->kind != IR_E_VAR) continue;
    int i = 0;
    while (i < p.n - 1 && !(it->binding->kind == IR_E_VAR && p.stmts[i]->kind == IR_S_LOOP &&
                            p.stmts[i]->u.loop.var == it->binding->u.var))
      i++;
    bool ok = i < p.n - 1 && p.stmts[i]->u.loop.extent == it->extent && p.stmts[i]->u.loop.kind == IR_LOOP_SERIAL;
    for (int j = i; ok && j < p.n - 1; j++)
      ok = p.stmts[j]->kind == IR_S_LOOP && p.stmts[j]->u.loop.body == p.stmts[j + 1];
    if (!ok)
      rc = tn_err_set(err, TN_EINVAL,
                      "iterator %s of block \"%s\" is not bound to a serial loop of its own of extent %lld whose nest "
                      "holds the block alone; pad_einsum needs a plain loop nest",
                      it->var->name, b->name, (long long)it->extent);
    else
      loops[t] = &p.stmts[i]->u.loop;
  }
  ir_path_free(&p);
  return rc;
}

/* dst[v..] = select(v_d < extent_d for the padded dimensions, src[v..], 0)
 * over the padded shape (read), or dst[v..] = src[v..] over the unpadded
 * one (write back), named after dst (made unique); its uid in *uid. */
static ir_stmt_t *pad_copy(ir_func_t *f, ir_buffer_t *dst, ir_buffer_t *src, const int64_t *ext, const int64_t *orig,
                           int n, bool guard, int *uid) {
  copy_side_t d = {dst, NULL, n}, s = {src, NULL, n};
  /* the copy back writes a buffer that names a block already (its producer's) */
  ir_stmt_t *nest = copy_nest(f, guard ? dst->name : fresh_name(f, dst->name), ext, n, NULL, &d, &s, uid);
  if (!guard) return nest;
  ir_stmt_t *x = nest; /* the copy block, at the bottom of its nest */
  while (x->kind == IR_S_LOOP) x = x->u.loop.body;
  ir_block_t *b = &x->u.block;
  ir_expr_t *cond = NULL;
  for (int k = 0; k < n; k++) {
    if (ext[k] == orig[k]) continue;
    ir_expr_t *lt = ir_bin(f, IR_E_LT, ir_varref(f, b->iters[k].var), ir_int(f, orig[k]));
    cond = cond ? ir_bin(f, IR_E_AND, cond, lt) : lt;
  }
  ir_expr_t *zero = ir_dtype_is_float(src->dtype) ? ir_float(f, src->dtype, 0.0) : ir_const_int(f, src->dtype, 0);
  if (cond) b->body->u.store.value = ir_select(f, cond, b->body->u.store.value, zero);
  ir_block_infer_regions(f, b);
  return nest;
}

/* The padded shape of buf as the block accesses it at `idx` (plain
 * iterators): ext[t] per dimension, and its unpadded extents. */
static bool padded_shape(const ir_block_t *b, ir_expr_t *const *idx, int n, const int64_t *ext, int64_t *shape,
                         int64_t *orig) {
  bool padded = false;
  for (int d = 0; d < n; d++) {
    int t = plain_iter(b, idx[d]);
    shape[d] = ext[t], orig[d] = b->iters[t].extent;
    padded |= shape[d] != orig[d];
  }
  return padded;
}

/* The first load of buf in e, or NULL. */
static const ir_expr_t *find_load(const ir_expr_t *e, const ir_buffer_t *buf) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == buf) return e;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++) {
    const ir_expr_t *l = find_load(kids[i], buf);
    if (l) return l;
  }
  return NULL;
}

int sch_prim_pad_einsum(sch_t *s, int block_uid, const int64_t *padding, int npad, int *out, int *nout,
                        tn_err_t *err) {
  ir_func_t *f = s->f;
  ir_block_t *b;
  int rc = find_compute_block(s, block_uid, &b, err);
  if (rc < 0) return rc;
  *nout = 0;
  if (!b->body || b->body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not a compute block (its body is not a store)", b->name);
  if (npad != b->niters)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d iterators; pad_einsum got %d paddings", b->name, b->niters,
                      npad);
  int64_t ext[SCH_MAX_RVS_OUT];
  bool pad_reduce = false, any = false;
  for (int t = 0; t < b->niters; t++) {
    if (padding[t] < 1 || padding[t] > (1 << 20))
      return tn_err_set(err, TN_EINVAL, "padding %lld of iterator %s of block \"%s\": need 1 .. %d",
                        (long long)padding[t], b->iters[t].var->name, b->name, 1 << 20);
    ext[t] = (b->iters[t].extent + padding[t] - 1) / padding[t] * padding[t];
    any |= ext[t] != b->iters[t].extent;
    pad_reduce |= ext[t] != b->iters[t].extent && b->iters[t].kind == IR_ITER_REDUCE;
  }
  ir_stmt_t *st = b->body;
  const ir_expr_t *acc, *x, *y;
  if (pad_reduce && (!b->init || !ir_mac_parts(st, &acc, &x, &y) || x->kind != IR_E_LOAD || y->kind != IR_E_LOAD ||
                     acc->kind != IR_E_LOAD || acc->u.load.buf != st->u.store.buf))
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" is not an accumulation of a product of two loads with an init; padding its "
                      "reduction would add terms that are not zero",
                      b->name);
  for (int d = 0; d < st->u.store.n; d++)
    if (plain_iter(b, st->u.store.idx[d]) < 0)
      return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %s at index %d that is not one of its iterators", b->name,
                        st->u.store.buf->name, d);
  if ((rc = einsum_expr(b, st->u.store.value, err)) < 0) return rc;
  if (b->init && (rc = einsum_expr(b, b->init->u.store.value, err)) < 0) return rc;
  ir_loop_t *loops[SCH_MAX_RVS_OUT];
  if ((rc = einsum_loops(f, b, loops, err)) < 0) return rc;
  for (int t = 0; t < b->niters; t++)
    if (!loops[t] && ext[t] != 1)
      return tn_err_set(err, TN_EINVAL, "iterator %s of block \"%s\" is bound to a constant, not a loop; it cannot be padded",
                        b->iters[t].var->name, b->name);
  if (!any) return TN_OK;

  if (b->nreads >= SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" reads %d buffers; pad_einsum takes at most %d", b->name, b->nreads,
                      SCH_MAX_RVS_OUT - 1);
  /* checked first: a refusal leaves the function as it was */
  int64_t shape[IR_MAX_DIMS], orig[IR_MAX_DIMS];
  bool padded[SCH_MAX_RVS_OUT] = {false};
  ir_buffer_t *o = st->u.store.buf;
  for (int r = 0; r < b->nreads && r < SCH_MAX_RVS_OUT; r++) {
    const ir_expr_t *load = find_load(st->u.store.value, b->reads[r].buf);
    padded[r] = b->reads[r].buf != o && load && padded_shape(b, load->u.load.idx, load->u.load.n, ext, shape, orig);
    if (padded[r] && (rc = check_nest_alone(f, b, b->reads[r].buf, false, err)) < 0) return rc;
  }
  bool pad_out = padded_shape(b, st->u.store.idx, st->u.store.n, ext, shape, orig);
  if (pad_out && (rc = check_nest_alone(f, b, o, true, err)) < 0) return rc;

  int pos = root_position(f, b->uid);
  /* the inputs: padded copies with zeros outside, before the nest */
  int nreads = b->nreads;
  ir_buffer_t *reads[SCH_MAX_RVS_OUT];
  for (int r = 0; r < nreads && r < SCH_MAX_RVS_OUT; r++) reads[r] = b->reads[r].buf;
  for (int r = 0; r < nreads && r < SCH_MAX_RVS_OUT; r++) {
    if (!padded[r]) continue;
    ir_buffer_t *buf = reads[r];
    const ir_expr_t *load = find_load(st->u.store.value, buf);
    padded_shape(b, load->u.load.idx, load->u.load.n, ext, shape, orig);
    ir_buffer_t *pad = temp_buffer(f, tn_arena_printf(f->arena, "%s_pad", buf->name), buf->dtype, buf->ndim, shape,
                                   buf->scope);
    root_insert(f, pos++, pad_copy(f, pad, buf, shape, orig, buf->ndim, true, &out[*nout]));
    (*nout)++;
    st->u.store.value = swap_loads(f, st->u.store.value, buf, pad);
  }
  /* the output: computed padded, the valid part copied back after the nest */
  if (pad_out) {
    padded_shape(b, st->u.store.idx, st->u.store.n, ext, shape, orig);
    ir_buffer_t *pad = temp_buffer(f, tn_arena_printf(f->arena, "%s_pad", o->name), o->dtype, o->ndim, shape, o->scope);
    ir_stmt_t *sts[2] = {st, b->init};
    for (int i = 0; i < 2; i++) {
      if (!sts[i]) continue;
      sts[i]->u.store.value = swap_loads(f, sts[i]->u.store.value, o, pad);
      sts[i]->u.store.buf = pad;
    }
    root_insert(f, pos + 1, pad_copy(f, o, pad, orig, orig, o->ndim, false, &out[*nout]));
    (*nout)++;
  }
  for (int t = 0; t < b->niters; t++) {
    b->iters[t].extent = ext[t];
    if (loops[t]) loops[t]->extent = ext[t];
  }
  ir_block_infer_regions(f, b);
  return TN_OK;
}
