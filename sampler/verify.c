/* verify.c — the verify postprocessor (TVM's VerifyGPUCode, §4) without
 * lowering: per kernel (top-level loop nest of the root block) it measures
 * threads per block, shared memory and vector widths on the scheduled IR and
 * rejects candidates the target cannot run, naming the kernel and the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

/* What one kernel uses. */
typedef struct kernel_use {
  const char *first_block; /* names the kernel in messages */
  int64_t threads;         /* product of the threadIdx extents */
  int64_t shared;          /* bytes of shared buffers */
  int64_t vector_bytes;
  int64_t low, high;       /* tightest thread-extent annotations */
  const char *unbound;     /* a block not under both blockIdx and threadIdx, or NULL */
  const ir_block_t *hopper; /* a block printed as a Hopper warpgroup-MMA kernel, or NULL */
  int nunbound;
  tn_buf_t detail;         /* "A_shared 2048 B, B_shared 2048 B" */
} kernel_use_t;

static bool bound_to(const ir_loop_t *l, ir_tag_class_t cls) {
  return l->kind == IR_LOOP_THREAD && ir_thread_tag_class(l->tag) == cls;
}

/* ---- blocks of a kernel ----------------------------------------------------- */

typedef struct collect {
  ir_block_t **v;
  int n, cap;
} collect_t;

static bool collect_visit(ir_stmt_t *s, void *p) {
  collect_t *c = p;
  if (s->kind == IR_S_BLOCK) {
    if (c->n == c->cap) {
      c->cap = c->cap ? 2 * c->cap : 16;
      c->v = tn_xrealloc(c->v, sizeof *c->v * (size_t)c->cap);
    }
    c->v[c->n++] = &s->u.block;
    return false;
  }
  return s->kind != IR_S_STORE;
}

/* The outermost blocks under item, in a malloc'ed array (*out). */
static int kernel_blocks(ir_stmt_t *item, ir_block_t ***out) {
  collect_t c = {tn_xmalloc(sizeof(ir_block_t *)), 0, 1};
  ir_stmt_walk(item, collect_visit, &c);
  *out = c.v;
  return c.n;
}

/* ---- threads and vectors ------------------------------------------------------ */

typedef struct loop_acc {
  int64_t thread[3]; /* threadIdx.x/y/z extents (0: unused) */
  const ir_func_t *f;
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
  if (l->kind == IR_LOOP_VECTORIZED) a->vector_bytes = TN_MAX(a->vector_bytes, vector_bytes(l));
  return true;
}

/* ---- shared memory ------------------------------------------------------------ */

/* Width of one access dimension while the loops that are fixed where the
 * buffer lives (above the accesses' common loop, except thread loops,
 * whose threads share the buffer) stay at 0: an interval over the others. */
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
  for (int i = 0; i < b->nreads; i++)
    if (b->reads[i].buf == buf) return true;
  for (int i = 0; i < b->nwrites; i++)
    if (b->writes[i].buf == buf) return true;
  return false;
}

/* Bytes of one shared buffer in one kernel: per dimension the widest access
 * of any block of the kernel. */

static int64_t shared_footprint(const ir_func_t *f, ir_func_t *scratch, ir_block_t *const *blocks, int nb,
                                const ir_buffer_t *buf) {
  ir_loop_t ***loops = tn_xmalloc(sizeof *loops * (size_t)(nb + 1));
  int *nl = tn_xmalloc(sizeof *nl * (size_t)(nb + 1)), *users = tn_xmalloc(sizeof *users * (size_t)(nb + 1));
  int nu = 0, lca = 0;
  for (int i = 0; i < nb; i++) {
    if (!accesses(blocks[i], buf)) continue;
    nl[nu] = smp_block_loops(f, blocks[i], &loops[nu]);
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
  int64_t bytes = ir_dtype_bytes(buf->dtype);
  for (int d = 0; d < buf->ndim; d++) bytes *= width[d];
  for (int j = nu ? lca - 1 : -1; j >= 0; j--) { /* a pipelined loop keeps one copy per stage */
    const ir_annot_t *a = ir_annot_get(loops[0][j]->annots, loops[0][j]->nannots, IR_ANN_PIPELINE_STAGES);
    if (a && !a->is_str && a->ival > 1 && loops[0][j]->extent > 1) {
      bytes *= TN_MIN(a->ival, IR_PIPELINE_MAX_STAGES); /* more is refused by the code generator */
      break;
    }
  }
  for (int u = 0; u < nu; u++) free(loops[u]);
  free(loops);
  free(nl);
  free(users);
  return bytes;
}

static void measure_shared(const ir_func_t *f, ir_block_t *const *blocks, int nb, kernel_use_t *k) {
  const ir_buffer_t **seen = tn_xmalloc(sizeof *seen * 16);
  int ns = 0, cap = 16;
  ir_func_t *scratch = ir_func_new("verify");
  for (int i = 0; i < nb; i++) {
    const ir_region_t *rs[2] = {blocks[i]->reads, blocks[i]->writes};
    int nr[2] = {blocks[i]->nreads, blocks[i]->nwrites};
    for (int side = 0; side < 2; side++)
      for (int r = 0; r < nr[side]; r++) {
        const ir_buffer_t *buf = rs[side][r].buf;
        bool dup = buf->scope != IR_SCOPE_SHARED;
        for (int j = 0; j < ns && !dup; j++) dup = seen[j] == buf;
        if (dup) continue;
        if (ns == cap) seen = tn_xrealloc(seen, sizeof *seen * (size_t)(cap *= 2));
        seen[ns++] = buf;
        int64_t bytes = shared_footprint(f, scratch, blocks, nb, buf);
        k->shared += bytes;
        tn_buf_printf(&k->detail, "%s%s %lld B", k->detail.len ? ", " : "", buf->name, (long long)bytes);
      }
  }
  free(seen);
  ir_func_free(scratch);
}

/* ---- one kernel ------------------------------------------------------------------ */

static void measure_kernel(const ir_func_t *f, ir_stmt_t *item, kernel_use_t *k) {
  memset(k, 0, sizeof *k);
  tn_buf_init(&k->detail);
  k->low = 1;
  k->high = INT64_MAX;
  ir_block_t **blocks;
  int nb = kernel_blocks(item, &blocks);
  k->first_block = nb ? blocks[0]->name : "?";
  loop_acc_t acc = {.f = f};
  ir_stmt_walk(item, loop_visit, &acc);
  k->threads = 1;
  for (int a = 0; a < 3; a++) k->threads *= acc.thread[a] ? acc.thread[a] : 1;
  k->vector_bytes = acc.vector_bytes;
  for (int i = 0; i < nb; i++) {
    const ir_block_t *b = blocks[i];
    ir_loop_t **loops;
    int n = smp_block_loops(f, b, &loops);
    bool bx = false, tx = false;
    for (int j = 0; j < n; j++) bx |= bound_to(loops[j], IR_TAG_CLASS_BLOCK), tx |= bound_to(loops[j], IR_TAG_CLASS_THREAD);
    free(loops);
    if (!(bx && tx) && !k->nunbound++) k->unbound = b->name;
    const ir_annot_t *lo = ir_annot_get(b->annots, b->nannots, SMP_ANN_THREAD_LOW);
    const ir_annot_t *hi = ir_annot_get(b->annots, b->nannots, SMP_ANN_THREAD_HIGH);
    if (lo && !lo->is_str) k->low = TN_MAX(k->low, lo->ival);
    if (ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_GEMM)) k->hopper = b;
    if (hi && !hi->is_str) k->high = TN_MIN(k->high, hi->ival);
  }
  measure_shared(f, blocks, nb, k);
  free(blocks);
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

/* Most f32 accumulator registers a consumer thread may hold: with the
 * addresses and loop state around them they stay under 255 (ptxas spills
 * past it; 128 + about 40 is what CUTLASS's 64x256 tiles use). */
#define HOPPER_MAX_ACC_REGS 128

/* A Hopper warpgroup-MMA kernel: its own threads and shared memory (what
 * codegen/hopper_gemm.c prints), on a Hopper target only. */
static int check_hopper(kernel_use_t *k, const tn_target_t *t, tn_err_t *err) {
  char why[160];
  ir_hopper_gemm_t g;
  if (!ir_hopper_gemm_get(k->hopper, &g, why, sizeof why)) return tn_err_set(err, TN_EINVAL, "%s", why);
  if (!tn_target_is_hopper(t))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is scheduled for Hopper's warpgroup MMA; target %s (%s %s) is "
                      "not sm_90", k->hopper->name, t->name, tn_target_kind_name(t->kind), t->arch);
  if (ir_hopper_gemm_acc_regs(&g) > HOPPER_MAX_ACC_REGS)
    return tn_err_set(err, TN_ERANGE, "block \"%s\": %d m64 blocks x N %d keep %d accumulator registers per thread "
                      "(at most %d fit without spilling)", k->hopper->name, g.m_frags, g.n_tile,
                      ir_hopper_gemm_acc_regs(&g), HOPPER_MAX_ACC_REGS);
  ir_hopper_shape_t sh;
  const char *bad = NULL;
  if (ir_hopper_gemm_shape(k->hopper, &sh, &bad) && !ir_hopper_gemm_cluster_ok(&g, &sh, &bad))
    return tn_err_set(err, TN_EINVAL, "block \"%s\": a cluster of %d CTAs along %s: %s", k->hopper->name,
                      ir_hopper_gemm_cluster_size(&g), g.cluster < 0 ? "N" : "M", bad);
  k->threads = ir_hopper_gemm_threads(&g);
  k->shared = ir_hopper_gemm_smem(&g);
  tn_buf_reset(&k->detail);
  tn_buf_printf(&k->detail, "%d stages of %d x 64 A and %d x 64 B, %lld bytes staging the output", g.stages,
                ir_hopper_gemm_rows(&g), g.n_tile, (long long)ir_hopper_gemm_out_stage_bytes(&g));
  return TN_OK;
}

static int check_kernel(kernel_use_t *k, const tn_target_t *t, tn_err_t *err) {
  const char *kn = k->first_block;
  if (k->hopper) SMP_TRY(check_hopper(k, t, err));
  if (k->unbound)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not bound to both blockIdx and threadIdx", k->unbound);
  if (k->threads > t->max_threads_per_block)
    return tn_err_set(err, TN_ERANGE, "%lld threads per block exceed the target's %d (kernel of block \"%s\")",
                      (long long)k->threads, t->max_threads_per_block, kn);
  if (k->threads < k->low || k->threads > k->high)
    return tn_err_set(err, TN_ERANGE, "%lld threads per block are outside [%lld, %lld], the bounds annotated on the "
                      "kernel of block \"%s\"", (long long)k->threads, (long long)k->low, (long long)k->high, kn);
  if (t->max_shared_memory_per_block > 0 && k->shared > tn_target_shared_limit(t))
    return tn_err_set(err, TN_ERANGE, "%lld bytes of shared memory per block exceed the target's %lld (kernel of "
                      "block \"%s\": %s)", (long long)k->shared, (long long)tn_target_shared_limit(t), kn,
                      tn_buf_str(&k->detail));
  if (t->max_vector_bytes > 0 && k->vector_bytes > t->max_vector_bytes)
    return tn_err_set(err, TN_ERANGE, "a %lld-byte vector access exceeds the target's %d bytes (kernel of block "
                      "\"%s\")", (long long)k->vector_bytes, t->max_vector_bytes, kn);
  return TN_OK;
}

int smp_verify_gpu(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  const ir_func_t *f = sch_func(s);
  int n, rc = TN_OK;
  ir_stmt_t **items = kernels(f, &n);
  for (int i = 0; i < n && rc == TN_OK; i++) {
    kernel_use_t k;
    measure_kernel(f, items[i], &k);
    rc = check_kernel(&k, t, err);
    tn_buf_free(&k.detail);
  }
  return rc;
}

void smp_gpu_usage(const ir_func_t *f, smp_gpu_usage_t *out) {
  memset(out, 0, sizeof *out);
  int n;
  ir_stmt_t **items = kernels(f, &n);
  for (int i = 0; i < n; i++) {
    kernel_use_t k;
    measure_kernel(f, items[i], &k);
    out->threads_per_block = TN_MAX(out->threads_per_block, k.threads);
    out->shared_bytes = TN_MAX(out->shared_bytes, k.shared);
    out->vector_bytes = TN_MAX(out->vector_bytes, k.vector_bytes);
    out->unbound_blocks += k.nunbound;
    tn_buf_free(&k.detail);
  }
}
