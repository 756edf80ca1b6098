/* rules_annotate.c — ParallelizeVectorizeUnroll (§3.5): annotates the root
 * block with the parallel extent, the vectorize limit (CPU) and a sampled
 * unroll depth; the rewrite-parallel-vectorize-unroll postprocessor turns
 * them into loop kinds and pragmas once the tiles are known. */
#include <string.h>

#include "smp_internal.h"

#define MAX_JOBS_PER_CORE 16
#define MAX_VECTORIZE_EXTENT 64

static const int64_t gpu_unroll[] = {0, 16, 64, 512, 1024};
static const int64_t cpu_unroll[] = {0, 16, 64, 512};

/* Annotates the root; *done says whether there was anything to annotate
 * (a purely spatial function on a GPU has neither parallel nor unroll). */
static int annotate_root(smp_ctx_t *c, sch_t *s, bool *done, tn_err_t *err) {
  bool spatial = smp_func_is_spatial(sch_func(s));
  *done = !c->gpu || !spatial;
  if (!*done) return TN_OK;
  sch_rv_t root;
  SMP_TRY(sch_get_block(s, "root", &root, err));
  if (!c->gpu) {
    int64_t cores = c->t->num_cores > 0 ? c->t->num_cores : 1;
    SMP_TRY(sch_annotate(s, root, SMP_ANN_PARALLEL, sch_arg_int(cores * MAX_JOBS_PER_CORE), err));
    SMP_TRY(sch_annotate(s, root, SMP_ANN_VECTORIZE, sch_arg_int(MAX_VECTORIZE_EXTENT), err));
  }
  if (spatial) return TN_OK; /* nothing to unroll in elementwise code */
  const int64_t *steps = c->gpu ? gpu_unroll : cpu_unroll;
  int n = c->gpu ? (int)TN_ARRAY_LEN(gpu_unroll) : (int)TN_ARRAY_LEN(cpu_unroll);
  double probs[8];
  for (int i = 0; i < n; i++) probs[i] = 1.0 / n;
  sch_rv_t depth;
  SMP_TRY(sch_sample_categorical(s, steps, probs, n, &depth, err));
  return sch_annotate(s, root, SMP_ANN_UNROLL_EXPLICIT, sch_arg_rv(depth), err);
}

int smp_rule_parallel_vectorize_unroll(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err) {
  bool done = false;
  if (strcmp(block, "root") == 0) {
    int rc = annotate_root(c, st->s, &done, err);
    if (rc < 0) {
      smp_state_free(st);
      return rc;
    }
  }
  if (done) smp_note(st, "parallel-vectorize-unroll(root)");
  smp_states_push(out, *st);
  return TN_OK;
}
