/* layout.c — transform_layout (a temporary's dimensions permuted: every
 * access, region and the shape) and storage_align: the stride of one dimension of a buffer a block
 * writes is padded to factor * n + offset elements (TVM's StorageAlign),
 * e.g. so that the rows of a packed panel do not all fall into one cache
 * set.  Recorded as the block annotation IR_ANN_STORAGE_ALIGN, which the
 * code generators read when they lay the buffer out; the IR's indices, and
 * so the reference evaluator, are unchanged.  hoist_packing marks the copy
 * of a constant input (IR_ANN_HOIST_PACKING) as work done once, outside
 * the kernel, by a packing function of its own. */
#include <stdio.h>

#include "sch_internal.h"

int sch_prim_storage_align(sch_t *s, int block_uid, int buffer_index, int axis, int64_t factor, int64_t offset,
                           tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (buffer_index < 0 || buffer_index >= b->nwrites)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %d buffers; no write buffer %d", b->name, b->nwrites,
                      buffer_index);
  const ir_buffer_t *buf = b->writes[buffer_index].buf;
  if (buf->role != IR_BUF_TEMP)
    return tn_err_set(err, TN_EINVAL, "buffer %s is a parameter: its layout is the caller's", buf->name);
  if (axis < 0 || axis >= buf->ndim - 1)
    return tn_err_set(err, TN_EINVAL, "buffer %s has %d dimensions; axis %d has no stride to pad (0 .. %d)",
                      buf->name, buf->ndim, axis, buf->ndim - 2);
  if (factor < 1 || factor > (1 << 20) || offset < 0 || offset >= factor)
    return tn_err_set(err, TN_EINVAL, "factor %lld and offset %lld: need 1 <= factor <= 2^20 and 0 <= offset < factor",
                      (long long)factor, (long long)offset);
  char v[96];
  snprintf(v, sizeof v, "%d:%lld:%lld", axis, (long long)factor, (long long)offset);
  ir_annot_set_str(s->f, &b->annots, &b->nannots, IR_ANN_STORAGE_ALIGN, v);
  return TN_OK;
}

/* ---- transform_layout (permutations) ------------------------------------------ */

typedef struct permute {
  ir_func_t *f;
  const ir_buffer_t *x;
  const int *perm;
} permute_t;

/* A load of x re-indexed: new index d = old index perm[d]. */
static ir_expr_t *permute_load(ir_func_t *f, ir_expr_t *load, void *p) {
  const permute_t *pm = p;
  if (load->u.load.buf != pm->x) return load;
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int d = 0; d < load->u.load.n; d++) idx[d] = load->u.load.idx[pm->perm[d]];
  return ir_load(f, load->u.load.buf, idx, load->u.load.n);
}

static ir_expr_t *permute_loads(ir_func_t *f, ir_expr_t *e, const ir_buffer_t *x, const int *perm) {
  permute_t pm = {f, x, perm};
  return sch_map_loads(f, e, permute_load, &pm);
}

static void permute_regions(ir_func_t *f, ir_region_t *rs, int n, const ir_buffer_t *x, const int *perm) {
  for (int i = 0; i < n; i++) {
    if (rs[i].buf != x) continue;
    ir_range_t *dims = TN_NEWN(f->arena, ir_range_t, x->ndim);
    for (int d = 0; d < x->ndim; d++) dims[d] = rs[i].dims[perm[d]];
    rs[i].dims = dims;
  }
}

static bool permute_visit(ir_stmt_t *s, void *p) {
  permute_t *pm = p;
  ir_func_t *f = pm->f;
  if (s->kind == IR_S_STORE) {
    ir_expr_t **idx = TN_NEWN(f->arena, ir_expr_t *, s->u.store.n ? s->u.store.n : 1);
    for (int d = 0; d < s->u.store.n; d++) idx[d] = permute_loads(f, s->u.store.idx[d], pm->x, pm->perm);
    if (s->u.store.buf == pm->x) {
      ir_expr_t **q = TN_NEWN(f->arena, ir_expr_t *, s->u.store.n);
      for (int d = 0; d < s->u.store.n; d++) q[d] = idx[pm->perm[d]];
      idx = q;
    }
    s->u.store.idx = idx;
    s->u.store.value = permute_loads(f, s->u.store.value, pm->x, pm->perm);
    return false;
  }
  if (s->kind == IR_S_BLOCK) {
    ir_block_t *b = &s->u.block;
    for (int i = 0; i < b->niters; i++) b->iters[i].binding = permute_loads(f, b->iters[i].binding, pm->x, pm->perm);
    b->predicate = permute_loads(f, b->predicate, pm->x, pm->perm);
    permute_regions(f, b->reads, b->nreads, pm->x, pm->perm);
    permute_regions(f, b->writes, b->nwrites, pm->x, pm->perm);
  }
  return true;
}

int sch_prim_transform_layout(sch_t *s, int block_uid, int buffer_index, bool write, const int *perm, int n,
                              tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  int nr = write ? b->nwrites : b->nreads;
  if (buffer_index < 0 || buffer_index >= nr)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" %s %d buffers; no %s buffer %d", b->name,
                      write ? "writes" : "reads", nr, write ? "write" : "read", buffer_index);
  ir_buffer_t *x = (write ? b->writes : b->reads)[buffer_index].buf;
  if (x->role != IR_BUF_TEMP)
    return tn_err_set(err, TN_EINVAL, "buffer %s is a parameter: its layout is the caller's", x->name);
  if (n != x->ndim)
    return tn_err_set(err, TN_EINVAL, "buffer %s has %d dimensions; the permutation has %d", x->name, x->ndim, n);
  bool seen[IR_MAX_DIMS] = {false};
  for (int d = 0; d < n; d++) {
    if (perm[d] < 0 || perm[d] >= n || seen[perm[d]])
      return tn_err_set(err, TN_EINVAL, "the layout of %s must be a permutation of 0 .. %d", x->name, n - 1);
    seen[perm[d]] = true;
  }
  permute_t pm = {s->f, x, perm};
  ir_stmt_walk(s->f->root, permute_visit, &pm);
  int64_t *shape = TN_NEWN(s->f->arena, int64_t, n);
  for (int d = 0; d < n; d++) shape[d] = x->shape[perm[d]];
  x->shape = shape;
  return TN_OK;
}

/* ---- hoist_packing ------------------------------------------------------------ */

typedef struct nest_blocks {
  int uid, n;
  bool has;
} nest_blocks_t;

static bool count_blocks(ir_stmt_t *s, void *p) {
  nest_blocks_t *nb = p;
  if (s->kind != IR_S_BLOCK) return true;
  nb->n++;
  nb->has |= s->u.block.uid == nb->uid;
  return true;
}

/* Whether block uid has a top-level nest of the root scope to itself. */
static bool nest_alone(const ir_func_t *f, int uid) {
  ir_stmt_t *body = ir_func_root(f)->body;
  int n = body && body->kind == IR_S_SEQ ? body->u.seq.n : body ? 1 : 0;
  for (int i = 0; i < n; i++) {
    nest_blocks_t nb = {.uid = uid};
    ir_stmt_walk(body->kind == IR_S_SEQ ? body->u.seq.items[i] : body, count_blocks, &nb);
    if (nb.has) return nb.n == 1;
  }
  return false;
}

int sch_prim_hoist_packing(sch_t *s, int block_uid, tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  const ir_stmt_t *st = b->body;
  if (b->nreads != 1 || b->nwrites != 1 || b->init || !st || st->kind != IR_S_STORE ||
      st->u.store.value->kind != IR_E_LOAD)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" is not a packing copy (one buffer read, stored into one temporary): only "
                      "cache_read's copy of an input can be hoisted",
                      b->name);
  const ir_buffer_t *src = b->reads[0].buf, *dst = b->writes[0].buf;
  if (src->role != IR_BUF_INPUT || !src->is_const)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" packs %s, which is not a constant input: only an input declared `const` "
                      "(input %s: ... const) can be packed once, outside the kernel",
                      b->name, src->name, src->name);
  if (dst->role != IR_BUF_TEMP)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %s, a parameter: the packed copy must be a temporary",
                      b->name, dst->name);
  if (!nest_alone(s->f, block_uid))
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" is not in a loop nest of its own at the root: a packing copy computed under "
                      "the kernel's loops cannot run before the kernel",
                      b->name);
  ir_annot_set_str(s->f, &b->annots, &b->nannots, IR_ANN_HOIST_PACKING, src->name);
  return TN_OK;
}
