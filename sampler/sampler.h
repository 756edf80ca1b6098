/* sampler.h — design spaces, postprocessors and mutators (MetaSchedule's
 * PostOrderApply + schedule rules, postprocs and mutators; reference §3–§5).
 * Design spaces are traces with sampling instructions; a candidate is a
 * replay of one with decisions, followed by the postprocessors.  Prefix: smp_. */
#ifndef TUNED_SAMPLER_H
#define TUNED_SAMPLER_H

#include "common/common.h"
#include "common/target.h"
#include "ir/ir.h"
#include "schedule/schedule.h"

/* Annotation keys the rules write and the postprocessors (and the cost
 * model's features) read, as in TVM. */
#define SMP_ANN_TILING "meta_schedule.tiling_structure"
#define SMP_ANN_THREAD_LOW "meta_schedule.thread_extent_low_inclusive"
#define SMP_ANN_THREAD_HIGH "meta_schedule.thread_extent_high_inclusive"
#define SMP_ANN_COOP_FETCH "meta_schedule.cooperative_fetch"
#define SMP_ANN_PARALLEL "meta_schedule.parallel"
#define SMP_ANN_VECTORIZE "meta_schedule.vectorize"
#define SMP_ANN_UNROLL_EXPLICIT "meta_schedule.unroll_explicit"
#define SMP_ANN_UNROLL_IMPLICIT "meta_schedule.unroll_implicit"
#define SMP_ANN_AUTO_TENSORIZE "meta_schedule.auto_tensorize" /* block: an intrinsic's name */
#define SMP_ANN_RANDOM_COMPUTE_PRODUCER "meta_schedule.random_compute_producer"
/* block: its loops bound to threadIdx.y count warps; every warp's 32 lanes
 * run the block together (tensor-core intrinsics), so threadIdx.x is the
 * lane (TVM's warp_execution) */
#define SMP_ANN_WARP_EXECUTION "warp_execution"
#define SMP_ANN_AUTO_UNROLL "pragma_auto_unroll_max_step" /* on loops, read by codegen */
#define SMP_ANN_UNROLL_EXPLICIT_PRAGMA "pragma_unroll_explicit"

/* ======================================================================
 * Design spaces
 * ====================================================================== */

typedef struct smp_space {
  sch_trace_t **traces; /* simplified, without decisions: replays draw fresh samples */
  char **descs;         /* per trace: the rules that shaped it, "multi-level-tiling(C: ...), ..." */
  int n;
} smp_space_t;

/* Applies the target's rules to every block of f in post-order (rule-major,
 * forking as §3.1) and returns the design spaces.  CPU targets get the
 * "llvm" rules, CUDA and OpenCL the "cuda" ones.  Deterministic in seed
 * (the seed only draws the throw-away samples generation needs). */
int smp_generate(const ir_func_t *f, const tn_target_t *t, uint64_t seed, smp_space_t *out, tn_err_t *err);
void smp_space_free(smp_space_t *s);

/* ======================================================================
 * Candidates: replay + postprocessors
 * ====================================================================== */

/* What rejected a candidate, for the caller's failure counters. */
typedef enum smp_stage {
  SMP_STAGE_OK,
  SMP_STAGE_REPLAY,        /* the trace did not replay (a primitive refused a decision) */
  SMP_STAGE_COOP_FETCH,    /* rewrite-cooperative-fetch */
  SMP_STAGE_UNBOUND_BLOCK, /* rewrite-unbound-block */
  SMP_STAGE_PARALLEL_VECTORIZE_UNROLL,
  SMP_STAGE_REDUCTION_BLOCK,
  SMP_STAGE_VERIFY,        /* verify-gpu-code: the target's limits */
  SMP_STAGE_TENSORIZE,     /* rewrite-tensorize: a block marked for an intrinsic did not match it */
  SMP_STAGE__COUNT
} smp_stage_t;

const char *smp_stage_name(smp_stage_t st); /* "replay", "rewrite-cooperative-fetch", ..., "verify" */

/* Replays `trace` on f up to its EnterPostproc (decisions recorded in the
 * trace are kept, missing ones are sampled from seed), then runs the
 * target's postprocessors.  The schedule's trace ends with EnterPostproc
 * and the postprocessors' instructions, so replaying it alone rebuilds the
 * candidate.  On failure *stage (may be NULL) says what rejected it and the
 * message starts with that stage's name ("verify: 2048 threads per block
 * ..."). */
int smp_sample(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, sch_t **out,
               smp_stage_t *stage, tn_err_t *err);

/* Runs the postprocessors on a replayed schedule (records EnterPostproc
 * first).  GPU: rewrite-cooperative-fetch, rewrite-unbound-block,
 * rewrite-parallel-vectorize-unroll, rewrite-reduction-block, verify; CPU:
 * rewrite-parallel-vectorize-unroll, rewrite-reduction-block, rewrite-tensorize. */
int smp_postprocess(sch_t *s, const tn_target_t *t, smp_stage_t *stage, tn_err_t *err);

/* The limits verify checks, measured on a scheduled GPU function (the
 * worst kernel for each); exposed for tests and reports. */
typedef struct smp_gpu_usage {
  int64_t threads_per_block;    /* product of threadIdx.x/y/z extents */
  int64_t shared_bytes;         /* shared buffers' footprints in one kernel */
  int64_t vector_bytes;         /* widest vectorized access */
  int unbound_blocks;           /* blocks not under both a blockIdx and a threadIdx loop */
} smp_gpu_usage_t;

void smp_gpu_usage(const ir_func_t *f, smp_gpu_usage_t *out);

/* ======================================================================
 * Mutators
 * ====================================================================== */

typedef enum smp_mutator {
  SMP_MUT_TILE_SIZE,        /* a perfect tile's factors, or a cooperative-fetch width */
  SMP_MUT_UNROLL,           /* the unroll-depth categorical */
  SMP_MUT_THREAD_BINDING,   /* a sampled thread extent (auto-bind, cross-thread reduction) */
  SMP_MUT_COMPUTE_LOCATION, /* a SampleComputeLocation decision */
  SMP_MUT_PARALLEL,         /* the meta_schedule.parallel extent */
  SMP_MUT__COUNT
} smp_mutator_t;

const char *smp_mutator_name(smp_mutator_t m); /* "mutate-tile-size", ... */

/* The target's mutators and their probabilities (§5: GPU tile size 0.90,
 * unroll 0.08, thread binding 0.02; CPU tile size 0.90, compute location
 * 0.05, unroll 0.03, parallel 0.02).  Returns the count (<= SMP_MUT__COUNT). */
int smp_mutators(const tn_target_t *t, smp_mutator_t *kinds, double *probs);

/* What mutate-compute-location and mutate-parallel learn by replaying a
 * trace, kept per trace content so that mutating one parent again does not
 * replay it again.  Thread-safe; the caller owns it (one per population, say)
 * and may pass NULL to the mutators for none. */
typedef struct smp_memo smp_memo_t;
smp_memo_t *smp_memo_new(void);
void smp_memo_free(smp_memo_t *m); /* NULL is fine */

/* Picks a mutator by probability (among those that apply) and returns a new
 * trace: `trace` up to its EnterPostproc with one decision (or, for
 * mutate-parallel, the annotation value) changed.  TN_ESTATE when no
 * mutator applies.  f is the unscheduled function (compute location and
 * parallel replay the trace to find their alternatives; memo, which may be
 * NULL, keeps what they found).  *used may be NULL. */
int smp_mutate(const sch_trace_t *trace, const ir_func_t *f, const tn_target_t *t, tn_rng_t *rng, smp_memo_t *memo,
               sch_trace_t **out, smp_mutator_t *used, tn_err_t *err);
/* One given mutator; TN_ESTATE when it does not apply to the trace. */
int smp_mutate_with(smp_mutator_t m, const sch_trace_t *trace, const ir_func_t *f, const tn_target_t *t,
                    tn_rng_t *rng, smp_memo_t *memo, sch_trace_t **out, tn_err_t *err);

#endif
