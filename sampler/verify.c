/* verify.c — the verify postprocessor (TVM's VerifyGPUCode, §4) without
 * lowering: it checks the target's limits on the kernel plan (ir/plan.h:
 * threads per block, shared memory with its stages and vthread slices,
 * vector widths, a Hopper kernel's register plan) and rejects candidates the
 * target cannot run or that could not make progress, naming the kernel and
 * the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "ir/plan.h"
#include "smp_internal.h"

/* The thread-extent bounds annotated on the kernel's blocks (the rules'
 * SMP_ANN_THREAD_LOW / HIGH): the tightest. */
static void thread_bounds(const ir_kernel_plan_t *k, int64_t *low, int64_t *high) {
  *low = 1, *high = INT64_MAX;
  int n = ir_collect_blocks(k->stmt, true, NULL, 0);
  ir_block_t **blocks = tn_xmalloc(sizeof *blocks * (size_t)(n + 1));
  ir_collect_blocks(k->stmt, true, blocks, n);
  for (int i = 0; i < n; i++) {
    const ir_block_t *b = blocks[i];
    const ir_annot_t *lo = ir_annot_get(b->annots, b->nannots, SMP_ANN_THREAD_LOW);
    const ir_annot_t *hi = ir_annot_get(b->annots, b->nannots, SMP_ANN_THREAD_HIGH);
    if (lo && !lo->is_str) *low = TN_MAX(*low, lo->ival);
    if (hi && !hi->is_str) *high = TN_MIN(*high, hi->ival);
  }
  free(blocks);
}

/* Most f32 accumulator registers a consumer thread may hold: with the
 * addresses and loop state around them they stay under 255 (ptxas spills
 * past it; 128 + about 40 is what CUTLASS's 64x256 tiles use). */
#define HOPPER_MAX_ACC_REGS 128

/* A Hopper warpgroup-MMA kernel (its threads and shared memory are what
 * codegen/hopper_gemm.c prints, in the plan): on a Hopper target only,
 * with accumulators that fit, a cluster that pairs its tiles, and a
 * register plan whose setmaxnreg.inc can all be met. */
static int check_hopper(const ir_kernel_plan_t *k, const tn_target_t *t, tn_err_t *err) {
  const ir_hopper_gemm_t *g = &k->gemm;
  char why[400];
  if (!tn_target_is_hopper(t))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is scheduled for Hopper's warpgroup MMA; target %s (%s %s) is "
                      "not sm_90", k->hopper->name, t->name, tn_target_kind_name(t->kind), t->arch);
  if (ir_hopper_gemm_acc_regs(g) > HOPPER_MAX_ACC_REGS)
    return tn_err_set(err, TN_ERANGE, "block \"%s\": %d m64 blocks x N %d keep %d accumulator registers per thread "
                      "(at most %d fit without spilling)", k->hopper->name, g->m_frags, g->n_tile,
                      ir_hopper_gemm_acc_regs(g), HOPPER_MAX_ACC_REGS);
  const char *bad = NULL;
  if (k->shaped && !ir_hopper_gemm_cluster_ok(g, &k->shape, &bad))
    return tn_err_set(err, TN_EINVAL, "block \"%s\": a cluster of %d CTAs along %s: %s", k->hopper->name,
                      ir_hopper_gemm_cluster_size(g), g->cluster < 0 ? "N" : "M", bad);
  if (!ir_plan_regs_ok(k, why, sizeof why)) return tn_err_set(err, TN_ERANGE, "%s", why);
  return TN_OK;
}

static int check_kernel(const ir_kernel_plan_t *k, const tn_target_t *t, tn_err_t *err) {
  const char *kn = k->first_block;
  if (k->hopper) SMP_TRY(check_hopper(k, t, err));
  if (k->unbound)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" is not bound to both blockIdx and threadIdx", k->unbound);
  if (k->threads > t->max_threads_per_block)
    return tn_err_set(err, TN_ERANGE, "%lld threads per block exceed the target's %d (kernel of block \"%s\")",
                      (long long)k->threads, t->max_threads_per_block, kn);
  int64_t low, high;
  thread_bounds(k, &low, &high);
  if (k->threads < low || k->threads > high)
    return tn_err_set(err, TN_ERANGE, "%lld threads per block are outside [%lld, %lld], the bounds annotated on the "
                      "kernel of block \"%s\"", (long long)k->threads, (long long)low, (long long)high, kn);
  if (t->max_shared_memory_per_block > 0 && k->shared_bytes > tn_target_shared_limit(t))
    return tn_err_set(err, TN_ERANGE, "%lld bytes of shared memory per block exceed the target's %lld (kernel of "
                      "block \"%s\": %s)", (long long)k->shared_bytes, (long long)tn_target_shared_limit(t), kn,
                      k->shared_detail);
  if (t->max_vector_bytes > 0 && k->vector_bytes > t->max_vector_bytes)
    return tn_err_set(err, TN_ERANGE, "a %lld-byte vector access exceeds the target's %d bytes (kernel of block "
                      "\"%s\")", (long long)k->vector_bytes, t->max_vector_bytes, kn);
  return TN_OK;
}

int smp_verify_gpu(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  ir_plan_t p;
  int rc = ir_plan_build(sch_func(s), t, &p, err);
  for (int i = 0; i < p.n && rc == TN_OK; i++) rc = check_kernel(&p.k[i], t, err);
  ir_plan_free(&p);
  return rc;
}

void smp_gpu_usage(const ir_func_t *f, smp_gpu_usage_t *out) {
  memset(out, 0, sizeof *out);
  ir_plan_t p;
  tn_err_t err = {0};
  ir_plan_build(f, NULL, &p, &err); /* a Hopper block out of range: the kernels before it */
  for (int i = 0; i < p.n; i++) {
    const ir_kernel_plan_t *k = &p.k[i];
    out->threads_per_block = TN_MAX(out->threads_per_block, k->threads);
    out->shared_bytes = TN_MAX(out->shared_bytes, k->shared_bytes);
    out->vector_bytes = TN_MAX(out->vector_bytes, k->vector_bytes);
    out->unbound_blocks += k->nunbound;
  }
  ir_plan_free(&p);
}
