/* cache.c — cache_read and cache_write: stage one buffer of a block through a
 * new buffer in another storage scope, with a copy block placed in the root
 * scope just before (read) or after (write) the block's loop nest. */
#include <stdlib.h>
#include <string.h>

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

/* "<buf>_<scope>", with _1, _2, ... appended when a buffer or block already
 * has that name (a second cache of the same buffer). */
static const char *cache_name(ir_func_t *f, const ir_buffer_t *src, ir_scope_t scope) {
  const char *base = tn_arena_printf(f->arena, "%s_%s", src->name, ir_scope_name(scope));
  const char *name = base;
  for (int k = 1; name_used(f, name); k++) name = tn_arena_printf(f->arena, "%s_%d", base, k);
  return name;
}

/* A temp buffer shaped like src in `scope`, allocated in the root block. */
static ir_buffer_t *cache_buffer(ir_func_t *f, const ir_buffer_t *src, ir_scope_t scope) {
  ir_buffer_t *b = ir_buffer_new(f, cache_name(f, src, scope), src->dtype, src->ndim, src->shape, scope, IR_BUF_TEMP);
  ir_block_t *root = ir_func_root(f);
  ir_buffer_t **allocs = TN_NEWN(f->arena, ir_buffer_t *, root->nallocs + 1);
  if (root->nallocs) memcpy(allocs, root->allocs, sizeof(ir_buffer_t *) * (size_t)root->nallocs);
  allocs[root->nallocs++] = b;
  root->allocs = allocs;
  return b;
}

/* Loops ax0.. over the whole shape around a block named like `name` that
 * copies src[v0, v1, ...] into dst[v0, v1, ...]; *uid gets the block's uid. */
static ir_stmt_t *copy_nest(ir_func_t *f, const char *name, ir_buffer_t *dst, ir_buffer_t *src, int *uid) {
  int n = dst->ndim;
  ir_stmt_t *bs = ir_block_new(f, name);
  ir_block_t *b = &bs->u.block;
  ir_var_t **axes = TN_NEWN(f->arena, ir_var_t *, n + 1);
  ir_expr_t **idx = TN_NEWN(f->arena, ir_expr_t *, n + 1);
  b->iters = TN_NEWN(f->arena, ir_iter_t, n + 1);
  b->niters = n;
  for (int d = 0; d < n; d++) {
    axes[d] = ir_var_new(f, tn_arena_printf(f->arena, "ax%d", d), IR_INT32);
    ir_var_t *v = ir_var_new(f, tn_arena_printf(f->arena, "v%d", d), IR_INT32);
    b->iters[d] = (ir_iter_t){v, dst->shape[d], IR_ITER_SPATIAL, ir_varref(f, axes[d])};
    idx[d] = ir_varref(f, v);
  }
  b->body = ir_store(f, dst, idx, n, ir_load(f, src, idx, n));
  ir_block_infer_regions(f, b);
  *uid = b->uid;
  ir_stmt_t *nest = bs;
  for (int d = n - 1; d >= 0; d--) nest = ir_loop_new(f, axes[d], dst->shape[d], nest);
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
  root_insert(f, pos, copy_nest(f, cache->name, cache, buf, out));
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
  root_insert(f, pos + 1, copy_nest(f, cache->name, buf, cache, out));
  redirect_block(f, b, buf, cache, true);
  return TN_OK;
}
