/* candidate.c — what the builder and the runner work on: a target plus
 * source, kernels and parameters, deep-copied from a lowered module or
 * given raw (hand-written and planted test candidates). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_internal.h"

/* cuda-host: CUDA C built by the host's C++ compiler into a .so that the
 * CPU backend runs. */
ms_backend_t ms_backend_of(tn_target_kind_t k) {
  return k == TN_TARGET_CUDA ? MS_BACKEND_CUDA : k == TN_TARGET_OPENCL ? MS_BACKEND_OPENCL : MS_BACKEND_CPU;
}

bool ms_flush_by_default(tn_target_kind_t k) { return k == TN_TARGET_CUDA; }

cg_target_t ms_language_of(tn_target_kind_t k) {
  return k == TN_TARGET_CUDA || k == TN_TARGET_CUDA_HOST ? CG_TARGET_CUDA
         : k == TN_TARGET_OPENCL                         ? CG_TARGET_OPENCL
                                                         : CG_TARGET_C;
}

void ms_candidate_free(ms_candidate_t *c) {
  if (!c) return;
  for (int i = 0; i < c->nparams; i++) {
    free(c->params[i].name);
    free(c->params[i].packs);
    free(c->params[i].pack_fn);
  }
  free(c->params);
  free(c->kernels);
  free(c->source);
  free(c);
}

#define IDENT_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"

int ms_candidate_new(const tn_target_t *t, const char *source, const cg_kernel_t *kernels,
                     int nkernels, const cg_param_t *params, int nparams, ms_candidate_t **out,
                     tn_err_t *err) {
  *out = NULL;
  if (!t || !source || nkernels < 1 || !kernels || nparams < 0 || (nparams > 0 && !params))
    return tn_err_set(err, TN_EINVAL, "candidate: needs a target, a source and at least one kernel");
  for (int i = 0; i < nkernels; i++)
    for (int d = 0; d < 3; d++)
      if (kernels[i].grid[d] < 1 || kernels[i].block[d] < 1 || kernels[i].grid[d] > INT32_MAX ||
          kernels[i].block[d] > INT32_MAX)
        return tn_err_set(err, TN_EINVAL, "candidate: kernel %s has grid/block dimension %d out of [1, 2^31)",
                          kernels[i].name, d);
  for (int i = 0; i < nparams; i++)
    if (!params[i].name || params[i].ndim < 0 || params[i].ndim > IR_MAX_DIMS)
      return tn_err_set(err, TN_EINVAL, "candidate: parameter %d has no name or a bad rank", i);
  for (int i = 0; i < nkernels; i++) {
    if (kernels[i].nmaps < 0 || kernels[i].nmaps > CG_MAX_TENSOR_MAPS)
      return tn_err_set(err, TN_EINVAL, "candidate: kernel %s has %d tensor maps (at most %d)", kernels[i].name,
                        kernels[i].nmaps, CG_MAX_TENSOR_MAPS);
    for (int m = 0; m < kernels[i].nmaps; m++) {
      const cg_tensor_map_t *t = &kernels[i].maps[m];
      size_t len = strnlen(t->name, sizeof t->name);
      if (!len || len == sizeof t->name || strspn(t->name, IDENT_CHARS) != len || t->param < 0 || t->param >= nparams)
        return tn_err_set(err, TN_EINVAL, "candidate: kernel %s: tensor map %d needs a name and one of the %d "
                          "parameters", kernels[i].name, m, nparams);
    }
  }
  ms_candidate_t *c = tn_xcalloc(1, sizeof *c);
  c->target = *t;
  c->source = tn_xstrdup(source);
  c->kernels = tn_xmalloc(sizeof *kernels * (size_t)nkernels);
  memcpy(c->kernels, kernels, sizeof *kernels * (size_t)nkernels);
  c->nkernels = nkernels;
  c->params = tn_xcalloc((size_t)TN_MAX(nparams, 1), sizeof *params);
  for (int i = 0; i < nparams; i++) {
    c->params[i] = params[i];
    c->params[i].name = tn_xstrdup(params[i].name);
    c->params[i].packs = params[i].packs ? tn_xstrdup(params[i].packs) : NULL;
    c->params[i].pack_fn = params[i].pack_fn ? tn_xstrdup(params[i].pack_fn) : NULL;
  }
  c->nparams = nparams;
  *out = c;
  return TN_OK;
}

int ms_candidate_from_module(const tn_target_t *t, const cg_module_t *m, ms_candidate_t **out,
                             tn_err_t *err) {
  cg_target_t want = ms_language_of(t->kind);
  if (m->target != want) {
    *out = NULL;
    return tn_err_set(err, TN_EINVAL, "candidate: target %s (%s) runs %s code, but the module is %s",
                      t->name, tn_target_kind_name(t->kind), cg_target_name(want), cg_target_name(m->target));
  }
  int rc = ms_candidate_new(t, m->source, m->kernels, m->nkernels, m->params, m->nparams, out, err);
  if (rc == TN_OK) (*out)->min_sm = m->min_sm, (*out)->sm90a = m->sm90a;
  return rc;
}

int ms_check_block_limits(const ms_candidate_t *c, ms_result_t *res) {
  const tn_target_t *t = &c->target;
  int sm = 0;
  if (c->sm90a && !tn_target_is_hopper(t)) {
    ms_result_fail(res, MS_BUILD_ERROR, "the kernels use Hopper's warpgroup MMA (sm_90a); target %s is %s %s", t->name,
                   tn_target_kind_name(t->kind), t->arch[0] ? t->arch : "without an architecture");
    return -1;
  }
  if (t->kind == TN_TARGET_CUDA && c->min_sm && (sscanf(t->arch, "sm_%d", &sm) != 1 || sm < c->min_sm)) {
    ms_result_fail(res, MS_BUILD_ERROR,
                   "the kernels use tensor-core intrinsics that need sm_%d or newer; target %s is %s", c->min_sm,
                   t->name, t->arch);
    return -1;
  }
  for (int i = 0; i < c->nkernels; i++) {
    const cg_kernel_t *k = &c->kernels[i];
    int64_t threads = k->block[0] * k->block[1] * k->block[2];
    if (t->max_threads_per_block > 0 && threads > t->max_threads_per_block) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s has %lld threads per block (%lld x %lld x %lld); %s allows %d",
                     k->name, (long long)threads, (long long)k->block[0], (long long)k->block[1],
                     (long long)k->block[2], t->name, t->max_threads_per_block);
      return -1;
    }
  }
  return 0;
}
