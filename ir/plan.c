/* plan.c — the kernel plan (plan.h): per kernel of a scheduled function, its
 * launch extents, roles, buffers, register plan, barriers and TMA maps, with
 * the device's numbers from the target file. */
#include "ir/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/analysis.h"

static bool bound_to(const ir_loop_t *l, ir_tag_class_t cls) {
  return l->kind == IR_LOOP_THREAD && ir_thread_tag_class(l->tag) == cls;
}

/* ---- blocks of a kernel ----------------------------------------------------- */

/* The outermost blocks under item, in a malloc'ed array (*out). */
static int kernel_blocks(ir_stmt_t *item, ir_block_t ***out) {
  int n = ir_collect_blocks(item, true, NULL, 0);
  *out = tn_xmalloc(sizeof(ir_block_t *) * (size_t)(n + 1));
  ir_collect_blocks(item, true, *out, n);
  return n;
}

/* ---- launch extents and vectors ----------------------------------------------- */

typedef struct loop_acc {
  int64_t thread[3], grid[3]; /* threadIdx / blockIdx .x/y/z extents (0: unused) */
  int64_t vector_bytes;
} loop_acc_t;

/* Bytes one vectorized loop moves per access: its extent times the widest
 * element among the accesses that depend on it. */
static int64_t vector_bytes(const ir_loop_t *l) {
  ir_block_t **blocks;
  int n = kernel_blocks(l->body, &blocks), bytes = 0;
  for (int i = 0; i < n; i++) {
    const ir_block_t *b = blocks[i];
    for (int k = 0; k < b->niters; k++) {
      if (!ir_expr_uses_var(b->iters[k].binding, l->var)) continue;
      const ir_region_t *rs[2] = {b->reads, b->writes};
      int nr[2] = {b->nreads, b->nwrites};
      for (int side = 0; side < 2; side++)
        for (int r = 0; r < nr[side]; r++)
          for (int d = 0; d < rs[side][r].buf->ndim; d++)
            if (ir_expr_uses_var(rs[side][r].dims[d].min, b->iters[k].var))
              bytes = TN_MAX(bytes, ir_dtype_bytes(rs[side][r].buf->dtype));
    }
  }
  free(blocks);
  return l->extent * bytes;
}

static bool loop_visit(ir_stmt_t *s, void *p) {
  loop_acc_t *a = p;
  if (s->kind != IR_S_LOOP) return s->kind != IR_S_STORE && s->kind != IR_S_BLOCK;
  const ir_loop_t *l = &s->u.loop;
  if (bound_to(l, IR_TAG_CLASS_THREAD)) {
    int ax = ir_thread_tag_axis(l->tag);
    a->thread[ax] = TN_MAX(a->thread[ax], l->extent);
  }
  if (bound_to(l, IR_TAG_CLASS_BLOCK)) {
    int ax = ir_thread_tag_axis(l->tag);
    a->grid[ax] = TN_MAX(a->grid[ax], l->extent);
  }
  if (l->kind == IR_LOOP_VECTORIZED) a->vector_bytes = TN_MAX(a->vector_bytes, vector_bytes(l));
  return true;
}

/* ---- shared memory ------------------------------------------------------------ */

/* Width of one access dimension while the loops that are fixed where the
 * buffer lives (above the accesses' common loop, except thread and vthread
 * loops, whose threads share the buffer and whose slices it holds side by
 * side) stay at 0: an interval over the others. */
static int64_t access_width(ir_func_t *scratch, const ir_block_t *b, const ir_range_t *dim, ir_loop_t *const *loops,
                            int n, int lca, int64_t full) {
  int nb = b->niters;
  ir_var_t **from = tn_xmalloc(sizeof *from * (size_t)(nb + 1));
  ir_expr_t **to = tn_xmalloc(sizeof *to * (size_t)(nb + 1));
  for (int k = 0; k < nb; k++) from[k] = b->iters[k].var, to[k] = b->iters[k].binding;
  ir_expr_t *min = ir_expr_subst(scratch, dim->min, from, to, nb);
  free(from);
  free(to);
  ir_bounds_t bounds;
  ir_bounds_init(&bounds);
  for (int i = 0; i < n; i++) {
    bool fixed = i < lca && !bound_to(loops[i], IR_TAG_CLASS_THREAD) && !bound_to(loops[i], IR_TAG_CLASS_VTHREAD);
    ir_bounds_set(&bounds, loops[i]->var, 0, fixed ? 0 : loops[i]->extent - 1);
  }
  ir_interval_t iv = ir_interval_of(min, &bounds);
  ir_bounds_free(&bounds);
  int64_t ext = 1;
  if (!ir_expr_is_const_int(dim->extent, &ext) || iv.lo == IR_INF_NEG || iv.hi == IR_INF_POS) return full;
  return TN_MIN(full, iv.hi - iv.lo + ext);
}

static bool accesses(const ir_block_t *b, const ir_buffer_t *buf) {
  return ir_block_reads(b, buf) || ir_block_writes(b, buf);
}

/* Bytes of an element as the target's language stores it: OpenCL C keeps
 * float16 shared and local arrays as float (codegen: vload_half /
 * vstore_half only reach global memory). */
static int elem_bytes(const tn_target_t *t, const ir_buffer_t *buf) {
  bool as_float = t && t->kind == TN_TARGET_OPENCL && buf->dtype == IR_FLOAT16 && buf->scope != IR_SCOPE_GLOBAL;
  return as_float ? 4 : ir_dtype_bytes(buf->dtype);
}

/* Elements of a buffer whose dimensions are `width` wide, with the padding
 * of a storage_align annotation on the block that writes it (what the code
 * generators lay out: the stride of dimension AXIS rounded up to FACTOR * n
 * + OFFSET elements).  An annotation that does not parse pads nothing (the
 * code generator refuses it). */
static int64_t padded_numel(ir_block_t *const *blocks, int nb, const ir_buffer_t *buf, const int64_t *width) {
  int axis = -1;
  long long factor = 0, offset = 0;
  for (int i = 0; i < nb && axis < 0; i++) {
    const ir_annot_t *a = ir_annot_get(blocks[i]->annots, blocks[i]->nannots, IR_ANN_STORAGE_ALIGN);
    if (!a || !a->is_str || blocks[i]->nwrites < 1 || blocks[i]->writes[0].buf != buf) continue;
    if (sscanf(a->sval, "%d:%lld:%lld", &axis, &factor, &offset) != 3 || axis < 0 || axis >= buf->ndim - 1 ||
        factor < 1 || offset < 0 || offset >= factor)
      axis = -1, factor = 0;
  }
  int64_t n = 1;
  for (int d = buf->ndim - 1; d >= 0; d--) {
    if (d == axis) n += (offset - n % factor + factor) % factor;
    n *= width[d];
  }
  return n;
}

/* Bytes of one shared buffer in one kernel: per dimension the widest access
 * of any block of the kernel, times the stages of a pipelined loop above
 * the accesses.  *stages gets those stages (1: none). */
static int64_t shared_footprint(const ir_func_t *f, const tn_target_t *t, ir_func_t *scratch, ir_block_t *const *blocks,
                                int nb, const ir_buffer_t *buf, int *stages) {
  ir_loop_t ***loops = tn_xmalloc(sizeof *loops * (size_t)(nb + 1));
  int *nl = tn_xmalloc(sizeof *nl * (size_t)(nb + 1)), *users = tn_xmalloc(sizeof *users * (size_t)(nb + 1));
  int nu = 0, lca = 0;
  for (int i = 0; i < nb; i++) {
    if (!accesses(blocks[i], buf)) continue;
    nl[nu] = ir_enclosing_loops(f, blocks[i]->uid, &loops[nu]);
    int common = 0;
    while (nu > 0 && common < nl[nu] && common < nl[0] && loops[nu][common] == loops[0][common]) common++;
    lca = nu == 0 ? nl[0] : TN_MIN(lca, common);
    users[nu++] = i;
  }
  int64_t width[IR_MAX_DIMS] = {0};
  for (int u = 0; u < nu; u++) {
    const ir_block_t *b = blocks[users[u]];
    const ir_region_t *rs[2] = {b->reads, b->writes};
    int nr[2] = {b->nreads, b->nwrites};
    for (int side = 0; side < 2; side++)
      for (int r = 0; r < nr[side]; r++) {
        if (rs[side][r].buf != buf) continue;
        for (int d = 0; d < buf->ndim; d++)
          width[d] = TN_MAX(width[d], access_width(scratch, b, &rs[side][r].dims[d], loops[u], nl[u], lca,
                                                   buf->shape[d]));
      }
  }
  int64_t bytes = elem_bytes(t, buf) * padded_numel(blocks, nb, buf, width);
  *stages = 1;
  for (int j = nu ? lca - 1 : -1; j >= 0; j--) { /* a pipelined loop keeps one copy per stage */
    const ir_annot_t *a = ir_annot_get(loops[0][j]->annots, loops[0][j]->nannots, IR_ANN_PIPELINE_STAGES);
    if (a && !a->is_str && a->ival > 1 && loops[0][j]->extent > 1) {
      *stages = (int)TN_MIN(a->ival, IR_PIPELINE_MAX_STAGES); /* more is refused by the code generator */
      bytes *= *stages;
      break;
    }
  }
  for (int u = 0; u < nu; u++) free(loops[u]);
  free(loops);
  free(nl);
  free(users);
  return bytes;
}

static void add_buf(ir_kernel_plan_t *k, int *cap, const ir_buffer_t *buf, int64_t bytes, int stages) {
  if (k->nbufs == *cap) k->bufs = tn_xrealloc(k->bufs, sizeof *k->bufs * (size_t)(*cap = *cap ? 2 * *cap : 8));
  k->bufs[k->nbufs++] = (ir_plan_buf_t){buf, buf->scope, bytes, stages};
}

static bool has_buf(const ir_kernel_plan_t *k, const ir_buffer_t *buf) {
  for (int j = 0; j < k->nbufs; j++)
    if (k->bufs[j].buf == buf) return true;
  return false;
}

/* The shared buffers (with their footprints) and the global workspaces the
 * kernel's blocks touch, in the order the blocks access them. */
static void plan_buffers(const ir_func_t *f, const tn_target_t *t, ir_block_t *const *blocks, int nb,
                         ir_kernel_plan_t *k) {
  int cap = 0;
  ir_func_t *scratch = ir_func_new("plan");
  size_t dl = 0;
  static const ir_scope_t order[2] = {IR_SCOPE_SHARED, IR_SCOPE_GLOBAL};
  for (int pass = 0; pass < 2; pass++) {
    ir_scope_t scope = order[pass];
    for (int i = 0; i < nb; i++) {
      const ir_region_t *rs[2] = {blocks[i]->reads, blocks[i]->writes};
      int nr[2] = {blocks[i]->nreads, blocks[i]->nwrites};
      for (int side = 0; side < 2; side++)
        for (int r = 0; r < nr[side]; r++) {
          const ir_buffer_t *buf = rs[side][r].buf;
          if (buf->scope != scope || has_buf(k, buf)) continue;
          if (scope == IR_SCOPE_GLOBAL) {
            if (buf->role == IR_BUF_TEMP) add_buf(k, &cap, buf, ir_buffer_numel(buf) * ir_dtype_bytes(buf->dtype), 1);
            continue;
          }
          int stages;
          int64_t bytes = shared_footprint(f, t, scratch, blocks, nb, buf, &stages);
          add_buf(k, &cap, buf, bytes, stages);
          k->shared_bytes += bytes;
          if (dl < sizeof k->shared_detail)
            dl += (size_t)snprintf(k->shared_detail + dl, sizeof k->shared_detail - dl, "%s%s %lld B", dl ? ", " : "",
                                   buf->name, (long long)bytes);
        }
    }
  }
  ir_func_free(scratch);
}

/* ---- cross-thread reductions --------------------------------------------------- */

/* Shared scratch of a block whose reduce iterator is bound to threadIdx.x
 * (codegen/xreduce.c): where the language has warp shuffles (CUDA) and the
 * T threads of a group make whole warps (or one warp of a power of two),
 * one partial per warp when there are several; else a tree over all T
 * partials.  G = block.y x block.z groups reduce side by side; partials of
 * 16-bit floats are float. */
static int64_t xreduce_bytes(const ir_func_t *f, const tn_target_t *t, const ir_block_t *b, const int64_t block[3]) {
  if (b->body == NULL || b->body->kind != IR_S_STORE) return 0;
  ir_loop_t **loops;
  int n = ir_enclosing_loops(f, b->uid, &loops);
  int64_t T = 0;
  for (int i = 0; i < b->niters; i++) {
    if (b->iters[i].kind != IR_ITER_REDUCE || !b->iters[i].binding) continue;
    for (int j = 0; j < n; j++)
      if (bound_to(loops[j], IR_TAG_CLASS_THREAD) && ir_thread_tag_axis(loops[j]->tag) == 0 &&
          ir_expr_uses_var(b->iters[i].binding, loops[j]->var))
        T = loops[j]->extent;
  }
  free(loops);
  if (T <= 1) return 0;
  ir_dtype_t dt = b->body->u.store.buf->dtype;
  int64_t elem = ir_dtype_is_16bit_float(dt) ? 4 : ir_dtype_bytes(dt), G = block[1] * block[2];
  bool shuffle = t && (t->kind == TN_TARGET_CUDA || t->kind == TN_TARGET_CUDA_HOST) && t->warp_size > 0;
  int64_t warp = shuffle ? t->warp_size : 0;
  if (shuffle && ((T <= warp && (T & (T - 1)) == 0) || T % warp == 0)) return T <= warp ? 0 : G * (T / warp) * elem;
  return G * T * elem;
}

static void plan_xreduce(const ir_func_t *f, const tn_target_t *t, ir_kernel_plan_t *k) {
  int n = ir_collect_blocks(k->stmt, false, NULL, 0);
  ir_block_t **blocks = tn_xmalloc(sizeof *blocks * (size_t)(n + 1));
  ir_collect_blocks(k->stmt, false, blocks, n);
  size_t dl = strlen(k->shared_detail);
  for (int i = 0; i < n; i++) {
    int64_t bytes = xreduce_bytes(f, t, blocks[i], k->block);
    if (!bytes) continue;
    k->shared_bytes += bytes;
    k->xreduce_bytes += bytes;
    if (dl < sizeof k->shared_detail)
      dl += (size_t)snprintf(k->shared_detail + dl, sizeof k->shared_detail - dl, "%sreduction of %s across threads "
                             "%lld B", dl ? ", " : "", blocks[i]->name, (long long)bytes);
  }
  free(blocks);
}

/* ---- a Hopper GEMM kernel ------------------------------------------------------- */

/* What codegen/hopper_gemm.c prints for the block: its own threads, roles,
 * dynamic shared memory, grid, register plan, mbarriers and tensor maps. */
static int plan_hopper(const tn_target_t *t, ir_kernel_plan_t *k, tn_err_t *err) {
  char why[160];
  ir_hopper_gemm_t *g = &k->gemm;
  if (!ir_hopper_gemm_get(k->hopper, g, why, sizeof why)) return tn_err_set(err, TN_EINVAL, "%s", why);
  const char *bad = NULL;
  k->shaped = ir_hopper_gemm_shape(k->hopper, &k->shape, &bad);
  k->threads = ir_hopper_gemm_threads(g);
  k->block[0] = k->threads, k->block[1] = k->block[2] = 1;
  k->grid[1] = k->grid[2] = 1;
  k->cluster = ir_hopper_gemm_cluster_size(g);
  bool ta = false, tb = false;
  if (k->shaped) {
    int64_t tiles = k->shape.batch * (k->shape.m / ir_hopper_gemm_rows(g)) * (k->shape.n / g->n_tile);
    k->grid[0] = ir_hopper_gemm_grid(g, tiles);
    ir_hopper_gemm_tma_ops(g, k->shape.a_k_inner, k->shape.b_k_inner, &ta, &tb);
  }
  k->tma_maps = ta + tb;
  k->barriers = 2 * g->stages;
  k->shared_bytes = ir_hopper_gemm_smem(g);
  k->dynamic_shared = true;
  snprintf(k->shared_detail, sizeof k->shared_detail, "%d stages of %d x 64 A and %d x 64 B, %lld bytes staging the "
           "output", g->stages, ir_hopper_gemm_rows(g), g->n_tile, (long long)ir_hopper_gemm_out_stage_bytes(g));
  ir_hopper_gemm_reg_plan(g, ta && tb, &k->regs);
  if (t) { /* ptxas gives a kernel with setmaxnreg no more than its largest count (seen: 240 at 256 threads) */
    k->launch_regs = ir_launch_regs(t->max_registers_per_block, k->threads, t->max_registers_per_thread);
    if (g->producer) k->launch_regs = TN_MIN(k->launch_regs, TN_MAX(k->regs.producer, k->regs.consumer));
    k->reg_pool = (int64_t)k->launch_regs * k->threads;
  }
  if (g->producer) {
    k->roles[0] = (ir_plan_role_t){IR_ROLE_PRODUCER, 1, 128, k->regs.producer};
    k->roles[1] = (ir_plan_role_t){IR_ROLE_CONSUMER, g->warpgroups, 128 * g->warpgroups, k->regs.consumer};
    k->nroles = 2;
  } else {
    k->roles[0] = (ir_plan_role_t){IR_ROLE_ALL, g->warpgroups, k->threads, 0};
    k->nroles = 1;
  }
  return TN_OK;
}

/* ---- one kernel ------------------------------------------------------------------ */

static int plan_kernel(const ir_func_t *f, const tn_target_t *t, ir_stmt_t *item, ir_kernel_plan_t *k,
                       tn_err_t *err) {
  memset(k, 0, sizeof *k);
  k->stmt = item;
  k->cluster = 1;
  ir_block_t **blocks;
  int nb = kernel_blocks(item, &blocks);
  k->first_block = nb ? blocks[0]->name : "?";
  loop_acc_t acc;
  memset(&acc, 0, sizeof acc);
  ir_stmt_walk(item, loop_visit, &acc);
  k->threads = 1;
  for (int a = 0; a < 3; a++) {
    k->block[a] = acc.thread[a] ? acc.thread[a] : 1;
    k->grid[a] = acc.grid[a] ? acc.grid[a] : 1;
    k->threads *= k->block[a];
  }
  k->vector_bytes = acc.vector_bytes;
  for (int i = 0; i < nb; i++) {
    const ir_block_t *b = blocks[i];
    ir_loop_t **loops;
    int n = ir_enclosing_loops(f, b->uid, &loops);
    bool bx = false, tx = false;
    for (int j = 0; j < n; j++) bx |= bound_to(loops[j], IR_TAG_CLASS_BLOCK), tx |= bound_to(loops[j], IR_TAG_CLASS_THREAD);
    free(loops);
    if (!(bx && tx) && !k->nunbound++) k->unbound = b->name;
  }
  /* the last block annotated in tree order, nested ones included, as codegen/hopper_gemm.c finds it (a
     reduction's init, decomposed before it, carries the annotations too) */
  int na = ir_collect_blocks(item, false, NULL, 0);
  ir_block_t **all = tn_xmalloc(sizeof *all * (size_t)(na + 1));
  ir_collect_blocks(item, false, all, na);
  for (int i = 0; i < na; i++)
    if (ir_annot_get(all[i]->annots, all[i]->nannots, IR_ANN_HOPPER_GEMM)) k->hopper = all[i];
  free(all);
  plan_buffers(f, t, blocks, nb, k);
  free(blocks);
  plan_xreduce(f, t, k);
  k->roles[0] = (ir_plan_role_t){IR_ROLE_ALL, 0, k->threads, 0};
  k->nroles = 1;
  if (t && (t->kind == TN_TARGET_CUDA || t->kind == TN_TARGET_CUDA_HOST))
    k->dynamic_shared = k->shared_bytes > t->max_shared_memory_per_block;
  return k->hopper ? plan_hopper(t, k, err) : TN_OK;
}

/* The root block's top-level statements. */
static ir_stmt_t **kernels(const ir_func_t *f, int *n) {
  ir_stmt_t **body = &f->root->u.block.body;
  if (*body && (*body)->kind == IR_S_SEQ) {
    *n = (*body)->u.seq.n;
    return (*body)->u.seq.items;
  }
  *n = *body ? 1 : 0;
  return body;
}

int ir_plan_build(const ir_func_t *f, const tn_target_t *t, ir_plan_t *out, tn_err_t *err) {
  int n, rc = TN_OK;
  ir_stmt_t **items = kernels(f, &n);
  out->k = tn_xcalloc((size_t)n + 1, sizeof *out->k);
  out->n = 0;
  for (int i = 0; i < n && rc == TN_OK; i++) rc = plan_kernel(f, t, items[i], &out->k[out->n++], err);
  return rc;
}

void ir_plan_free(ir_plan_t *p) {
  for (int i = 0; i < p->n; i++) free(p->k[i].bufs);
  free(p->k);
  p->k = NULL;
  p->n = 0;
}

bool ir_plan_regs_ok(const ir_kernel_plan_t *k, char *why, size_t why_len) {
  if (!k->hopper || !k->gemm.producer) return true;
  const ir_hopper_regs_t *r = &k->regs;
  const char *name = k->hopper->name;
  if (r->producer < IR_SETMAXNREG_MIN || r->consumer > IR_SETMAXNREG_MAX || r->producer % IR_REG_ALLOC_UNIT ||
      r->consumer % IR_REG_ALLOC_UNIT || r->consumer < r->producer || r->producer > k->launch_regs) {
    snprintf(why, why_len, "block \"%s\": setmaxnreg to %d (producer) and %d (consumers): setmaxnreg takes %d to %d "
             "registers in steps of %d, the consumers' count must be the larger and the producer's at most the %d "
             "it holds at launch", name, r->producer, r->consumer, IR_SETMAXNREG_MIN, IR_SETMAXNREG_MAX,
             IR_REG_ALLOC_UNIT, k->launch_regs);
    return false;
  }
  if (k->reg_pool <= 0) {
    snprintf(why, why_len, "block \"%s\": its producer trades registers with setmaxnreg, but the target gives no "
             "register file (max_registers_per_block) to check the pool against", name);
    return false;
  }
  if (r->need > k->reg_pool) {
    snprintf(why, why_len, "block \"%s\": register plan cannot be met: %lld threads hold %d registers each at launch "
             "(%lld in the CTA's pool), but the producer's %d x 128 and %d consumer warpgroups' %d x 128 need %lld: "
             "the last setmaxnreg.inc would wait for ever", name, (long long)k->threads, k->launch_regs,
             (long long)k->reg_pool, r->producer, k->gemm.warpgroups, r->consumer, (long long)r->need);
    return false;
  }
  return true;
}
