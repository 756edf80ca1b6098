/* postproc.c — the postprocessors (§4) that run after every replay: deferred
 * rewrites that need the sampled tile sizes (cooperative fetch, binding of
 * unbound blocks, parallel/vectorize/unroll annotations, decomposition of
 * reductions) and the GPU limit check (verify.c).  Every edit goes through
 * the schedule, so it is recorded after the trace's EnterPostproc. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

/* ---- rewrite-cooperative-fetch ------------------------------------------- */

typedef struct fetch_task {
  sch_rv_t block;
  int64_t lanes, tx, ty;
} fetch_task_t;

/* The extent of the loop a Bind instruction bound to `tag`, or -1. */
static int64_t bound_extent(const sch_t *s, const sch_inst_t *in, ir_thread_tag_t tag) {
  if (!smp_binds_to(in, tag)) return -1;
  const ir_stmt_t *l = sch_rv_stmt(s, in->inputs[0].rv);
  return l && l->kind == IR_S_LOOP ? l->u.loop.extent : -1;
}

static int max_dtype_bytes(const ir_block_t *b) {
  int m = 0;
  for (int i = 0; i < b->nreads; i++) m = TN_MAX(m, ir_dtype_bytes(b->reads[i].buf->dtype));
  for (int i = 0; i < b->nwrites; i++) m = TN_MAX(m, ir_dtype_bytes(b->writes[i].buf->dtype));
  return m;
}

/* Splits the cache block's fused loop over the threads (and vector lanes). */
static int fetch_one(sch_t *s, const fetch_task_t *task, tn_err_t *err) {
  const ir_stmt_t *bs = sch_rv_stmt(s, task->block);
  if (!bs) return TN_OK; /* the cache was removed (inlined) */
  if (task->tx < 1)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is marked for a cooperative fetch but no loop before it is bound "
                      "to threadIdx.x", bs->u.block.name);
  int64_t lanes = task->lanes;
  if (max_dtype_bytes(&bs->u.block) > 4) lanes = 1; /* as TVM: no vectors of 64-bit values */
  SMP_TRY(sch_unannotate(s, task->block, SMP_ANN_COOP_FETCH, err));
  sch_rv_t loops[SCH_MAX_RVS_OUT], parts[4];
  int nl = 0;
  SMP_TRY(sch_get_loops(s, task->block, loops, &nl, err));
  if (nl == 0) return tn_err_set(err, TN_EINVAL, "cache block \"%s\" has no loop to fetch with", bs->u.block.name);
  int64_t extent = sch_rv_stmt(s, loops[nl - 1])->u.loop.extent;
  if (lanes < 1 || extent % lanes) lanes = 1;
  sch_arg_t f[4];
  int n = 0;
  f[n++] = sch_arg_none();
  if (task->ty > 0) f[n++] = sch_arg_int(task->ty);
  f[n++] = sch_arg_int(task->tx);
  if (lanes > 1) f[n++] = sch_arg_int(lanes);
  SMP_TRY(sch_split(s, loops[nl - 1], f, n, parts, err));
  if (lanes > 1) SMP_TRY(sch_vectorize(s, parts[n - 1], err));
  int tx_at = lanes > 1 ? n - 2 : n - 1;
  SMP_TRY(sch_bind(s, parts[tx_at], ir_thread_tag_name(IR_TAG_THREAD_X), err));
  return task->ty > 0 ? sch_bind(s, parts[tx_at - 1], ir_thread_tag_name(IR_TAG_THREAD_Y), err) : TN_OK;
}

static int pp_cooperative_fetch(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  const sch_trace_t *tr = sch_get_trace(s);
  fetch_task_t *tasks = NULL;
  int ntasks = 0, cap = 0, rc = TN_OK;
  int64_t tx = -1, ty = -1;
  for (int i = 0; i < tr->n; i++) { /* collected first: the trace grows below */
    const sch_inst_t *in = &tr->insts[i];
    int64_t e;
    if ((e = bound_extent(s, in, IR_TAG_THREAD_X)) > 0) tx = e;
    if ((e = bound_extent(s, in, IR_TAG_THREAD_Y)) > 0) ty = e;
    if (in->kind != SCH_ANNOTATE || in->nattrs < 1) continue;
    /* a warp-level block: threadIdx.x is the warp's lane, whatever an
       earlier kernel bound it to (conv2d's im2col copy, 1024 threads) */
    if (!strcmp(in->attrs[0].s, SMP_ANN_WARP_EXECUTION)) tx = t->warp_size > 0 ? t->warp_size : 32;
    if (strcmp(in->attrs[0].s, SMP_ANN_COOP_FETCH) != 0) continue;
    if (ntasks == cap) {
      cap = cap ? 2 * cap : 8;
      tasks = tn_xrealloc(tasks, sizeof *tasks * (size_t)cap);
    }
    const sch_arg_t *v = &in->inputs[1];
    int64_t lanes = v->kind == SCH_ARG_RV ? sch_rv_value(s, v->rv) : v->kind == SCH_ARG_INT ? v->i : 1;
    tasks[ntasks++] = (fetch_task_t){in->inputs[0].rv, lanes, tx, ty};
  }
  for (int i = 0; i < ntasks && rc >= 0; i++) rc = fetch_one(s, &tasks[i], err);
  free(tasks);
  return rc < 0 ? rc : TN_OK;
}

/* ---- rewrite-unbound-block ----------------------------------------------- */

static bool under_tags(const ir_func_t *f, const ir_block_t *b, bool *block_idx, bool *thread_idx) {
  ir_loop_t **loops;
  int n = smp_block_loops(f, b, &loops);
  *block_idx = *thread_idx = false;
  for (int i = 0; i < n; i++) {
    if (loops[i]->kind != IR_LOOP_THREAD) continue;
    *block_idx |= ir_thread_tag_class(loops[i]->tag) == IR_TAG_CLASS_BLOCK;
    *thread_idx |= ir_thread_tag_class(loops[i]->tag) == IR_TAG_CLASS_THREAD;
  }
  free(loops);
  return *block_idx && *thread_idx;
}

static int pp_unbound_block(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  ir_block_t **all;
  int n = ir_blocks(sch_func(s), &all), nn = 0, rc = TN_OK;
  char **names = tn_xmalloc(sizeof *names * (size_t)(n + 1)); /* copies: binding rewrites the blocks */
  for (int i = 0; i < n; i++) {
    bool bx, tx;
    /* the block inside a tensorized one is the intrinsic's body: the outer
     * block's loops are its binding (a warp's wmma call has no thread loops) */
    const ir_block_t *scope = ir_scope_block(sch_func(s), all[i]->uid);
    if (scope && ir_annot_get(scope->annots, scope->nannots, IR_ANN_TENSORIZE)) continue;
    if (!under_tags(sch_func(s), all[i], &bx, &tx)) names[nn++] = tn_xstrdup(all[i]->name);
  }
  free(all);
  for (int i = 0; i < nn && rc == TN_OK; i++) { /* binding one block may bind its neighbours: smp_bind_block rechecks */
    bool done;
    rc = smp_bind_block(s, t, names[i], false, &done, err);
  }
  for (int i = 0; i < nn; i++) free(names[i]);
  free(names);
  return rc;
}

/* ---- rewrite-parallel-vectorize-unroll ----------------------------------- */

typedef struct pvu {
  int64_t parallel, vectorize, unroll; /* -1: not annotated */
  bool unroll_explicit;
} pvu_t;

static int64_t root_annot(const ir_block_t *root, const char *key) {
  const ir_annot_t *a = ir_annot_get(root->annots, root->nannots, key);
  return a && !a->is_str ? a->ival : -1;
}

static bool fusable(const ir_loop_t *l) { return l->kind == IR_LOOP_SERIAL && l->nannots == 0; }

/* Stride of loop variable v in one access (elements), INT64_MIN if the index
 * is not linear in it. */
static int64_t access_stride(const ir_block_t *b, const ir_region_t *r, const ir_var_t *v) {
  int64_t buffer_stride = 1;
  for (int d = r->buf->ndim - 1; d >= 0; d--) {
    int64_t c;
    if (!smp_access_coef(b, r->dims[d].min, v, &c)) return INT64_MIN;
    if (c != 0) return c * buffer_stride;
    buffer_stride *= r->buf->shape[d];
  }
  return 0;
}

/* How many innermost loops one access keeps contiguous (TVM's stride
 * analysis, made conservative: the first loop the access uses must have
 * unit stride, where TVM also accepts a strided gather). */
static int fusible_for(const ir_block_t *b, const ir_region_t *r, ir_loop_t *const *loops, int n) {
  int fusible = 0, prev = -1;
  int64_t prev_stride = 0;
  for (int i = n - 1; i >= 0; i--) {
    int64_t st = access_stride(b, r, loops[i]->var);
    if (st == INT64_MIN) break;
    if (st == 0) {
      fusible++;
      continue;
    }
    if (prev < 0 ? st != 1 : st != prev_stride * loops[prev]->extent) break;
    fusible++;
    prev = i, prev_stride = st;
  }
  return fusible;
}

static int max_fusible(const ir_block_t *b, ir_loop_t *const *loops, int n) {
  int m = INT_MAX;
  for (int i = 0; i < b->nreads; i++) m = TN_MIN(m, fusible_for(b, &b->reads[i], loops, n));
  for (int i = 0; i < b->nwrites; i++) m = TN_MIN(m, fusible_for(b, &b->writes[i], loops, n));
  return m;
}

/* TVM's AdjustParallelVectorize: the number of outer loops to fuse and
 * parallelize and of inner loops to fuse and vectorize (-1: none). */
static void plan_pvu(const pvu_t *p, const ir_block_t *b, ir_loop_t *const *loops, int n, int *np, int *nv) {
  *np = *nv = -1;
  if (p->parallel > 0) {
    int64_t prod = 1;
    int k = 0;
    for (; k < n && smp_loop_iter_type(loops[k]) == SMP_DATA_PAR && fusable(loops[k]); ) {
      prod *= loops[k++]->extent;
      if (prod > p->parallel || !smp_single_child(loops[k - 1])) break;
    }
    *np = prod == 1 ? -1 : k;
  }
  if (p->vectorize > 0) {
    int64_t prod = 1;
    int k = 0, limit = max_fusible(b, loops, n);
    for (int i = n - 1; i >= 0 && k < limit; i--) {
      const ir_loop_t *l = loops[i];
      if (smp_loop_iter_type(l) != SMP_DATA_PAR || !fusable(l) || !smp_single_child(l)) break;
      prod *= l->extent;
      if (prod > p->vectorize) break;
      k++;
    }
    *nv = prod == 1 ? -1 : k;
  }
  if (*np > 0 && *nv >= 0) *np = TN_MIN(*np, n - *nv); /* prefer vectorizing */
}

static int rewrite_block(sch_t *s, const pvu_t *p, sch_rv_t b, tn_err_t *err) {
  sch_rv_t loops[SCH_MAX_RVS_OUT], fused, parts[2];
  ir_loop_t *ls[SCH_MAX_RVS_OUT];
  int nl = 0, np, nv;
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  if (nl == 0) return TN_OK;
  for (int i = 0; i < nl; i++) ls[i] = &sch_rv_stmt(s, loops[i])->u.loop;
  plan_pvu(p, &sch_rv_stmt(s, b)->u.block, ls, nl, &np, &nv);
  if (np == nl && nv == nl) {
    SMP_TRY(sch_fuse(s, loops, nl, &fused, err));
    sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(p->vectorize)};
    SMP_TRY(sch_split(s, fused, f, 2, parts, err));
    SMP_TRY(sch_parallel(s, parts[0], err));
    SMP_TRY(sch_vectorize(s, parts[1], err));
  } else {
    if (np > 0) {
      SMP_TRY(sch_fuse(s, loops, np, &fused, err));
      SMP_TRY(sch_parallel(s, fused, err));
    }
    if (nv > 0) {
      SMP_TRY(sch_fuse(s, loops + nl - nv, nv, &fused, err));
      SMP_TRY(sch_vectorize(s, fused, err));
    }
  }
  if (p->unroll <= 0) return TN_OK;
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  SMP_TRY(sch_annotate(s, loops[0], SMP_ANN_AUTO_UNROLL, sch_arg_int(p->unroll), err));
  return sch_annotate(s, loops[0], SMP_ANN_UNROLL_EXPLICIT_PRAGMA, sch_arg_int(p->unroll_explicit), err);
}

static int pp_parallel_vectorize_unroll(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  (void)t;
  const ir_block_t *root = &sch_func(s)->root->u.block;
  pvu_t p = {root_annot(root, SMP_ANN_PARALLEL), root_annot(root, SMP_ANN_VECTORIZE),
             root_annot(root, SMP_ANN_UNROLL_EXPLICIT), true};
  int64_t implicit = root_annot(root, SMP_ANN_UNROLL_IMPLICIT);
  if (p.unroll < 0 && implicit >= 0) p.unroll = implicit, p.unroll_explicit = false;
  if (p.parallel < 0 && p.vectorize < 0 && p.unroll < 0) return TN_OK;
  static const char *const keys[] = {SMP_ANN_PARALLEL, SMP_ANN_VECTORIZE, SMP_ANN_UNROLL_EXPLICIT,
                                     SMP_ANN_UNROLL_IMPLICIT};
  sch_rv_t r, blocks[SCH_MAX_RVS_OUT];
  int nb = 0;
  SMP_TRY(sch_get_block(s, "root", &r, err));
  for (size_t i = 0; i < TN_ARRAY_LEN(keys); i++)
    if (root_annot(&sch_func(s)->root->u.block, keys[i]) >= 0) SMP_TRY(sch_unannotate(s, r, keys[i], err));
  SMP_TRY(sch_get_child_blocks(s, r, blocks, &nb, err));
  for (int i = 0; i < nb; i++) SMP_TRY(rewrite_block(s, &p, blocks[i], err));
  return TN_OK;
}

/* ---- rewrite-reduction-block --------------------------------------------- */

/* The loop at which to split off the block's init: the outermost loop that
 * is not purely data-parallel; -1 when there is none or a reduction loop is
 * bound to threads (a cross-thread reduction keeps its init). */
static int decompose_point(const ir_func_t *f, const ir_block_t *b) {
  ir_loop_t **loops;
  int n = smp_block_loops(f, b, &loops), at = -1;
  for (int i = 0; i < n; i++) {
    bool feeds_reduce = false;
    for (int k = 0; k < b->niters; k++)
      feeds_reduce |= b->iters[k].kind == IR_ITER_REDUCE && ir_expr_uses_var(b->iters[k].binding, loops[i]->var);
    if (feeds_reduce && loops[i]->kind == IR_LOOP_THREAD) {
      at = -1;
      break;
    }
    if (at < 0 && smp_loop_iter_type(loops[i]) != SMP_DATA_PAR) at = i;
  }
  free(loops);
  return at;
}

static int pp_reduction_block(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  (void)t;
  for (bool again = true; again;) {
    again = false;
    ir_block_t **all;
    int n = ir_blocks(sch_func(s), &all), at = -1;
    char *name = NULL;
    for (int i = 0; i < n && at < 0; i++) {
      at = all[i]->init ? decompose_point(sch_func(s), all[i]) : -1;
      if (at >= 0) name = tn_xstrdup(all[i]->name);
    }
    free(all);
    if (at < 0) break;
    sch_rv_t b, loops[SCH_MAX_RVS_OUT], init;
    int nl = 0, rc = sch_get_block(s, name, &b, err);
    if (rc == TN_OK) rc = sch_get_loops(s, b, loops, &nl, err);
    if (rc == TN_OK) rc = sch_decompose_reduction(s, b, loops[at], &init, err);
    free(name);
    if (rc < 0) return rc;
    again = true; /* the function changed: look again */
  }
  return TN_OK;
}

/* ---- the lists ------------------------------------------------------------ */

typedef int (*pp_fn)(sch_t *s, const tn_target_t *t, tn_err_t *err);

typedef struct postproc {
  smp_stage_t stage;
  pp_fn run;
} postproc_t;

/* DisallowDynamicLoop is implicit (our loops always have constant extents);
 * RewriteLayout (CPU weight pre-packing) is not implemented. */
static const postproc_t gpu_postprocs[] = {
    {SMP_STAGE_COOP_FETCH, pp_cooperative_fetch},
    {SMP_STAGE_UNBOUND_BLOCK, pp_unbound_block},
    {SMP_STAGE_PARALLEL_VECTORIZE_UNROLL, pp_parallel_vectorize_unroll},
    {SMP_STAGE_REDUCTION_BLOCK, pp_reduction_block},
    {SMP_STAGE_TENSORIZE, smp_pp_rewrite_tensorize},
    {SMP_STAGE_VERIFY, smp_verify_gpu},
};

static const postproc_t cpu_postprocs[] = {
    {SMP_STAGE_PARALLEL_VECTORIZE_UNROLL, pp_parallel_vectorize_unroll},
    {SMP_STAGE_REDUCTION_BLOCK, pp_reduction_block},
    {SMP_STAGE_TENSORIZE, smp_pp_rewrite_tensorize},
};

int smp_postprocess(sch_t *s, const tn_target_t *t, smp_stage_t *stage, tn_err_t *err) {
  smp_stage_t dummy;
  if (!stage) stage = &dummy;
  *stage = SMP_STAGE_OK;
  bool gpu = t->kind != TN_TARGET_CPU;
  if (gpu && t->max_threads_per_block <= 0)
    return tn_err_set(err, TN_EINVAL, "target %s has no max_threads_per_block; GPU candidates cannot be checked",
                      t->name);
  const postproc_t *list = gpu ? gpu_postprocs : cpu_postprocs;
  int n = gpu ? (int)TN_ARRAY_LEN(gpu_postprocs) : (int)TN_ARRAY_LEN(cpu_postprocs);
  int rc = sch_enter_postproc(s, err);
  if (rc < 0) {
    *stage = SMP_STAGE_REPLAY;
    return rc;
  }
  for (int i = 0; i < n; i++) {
    tn_err_t e = {0};
    if ((rc = list[i].run(s, t, &e)) < 0) {
      *stage = list[i].stage;
      if (err) {
        *err = e;
        tn_err_prefix(err, "%s", smp_stage_name(list[i].stage));
      }
      return rc;
    }
  }
  return TN_OK;
}
