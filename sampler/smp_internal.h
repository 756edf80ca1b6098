/* smp_internal.h — what the sampler's files share: the generation context and
 * its forking states, the rules' entry points, and IR analyses (loop and
 * iterator kinds, data-flow, access patterns) the rules and postprocs use. */
#ifndef TUNED_SMP_INTERNAL_H
#define TUNED_SMP_INTERNAL_H

#include "ir/analysis.h"
#include "sampler.h"
#include "ir/affine.h"
#include "ir/intrin.h"

/* ---- generation context and states (space.c) ---------------------------- */

typedef struct smp_ctx {
  const ir_func_t *f; /* the unscheduled function */
  const tn_target_t *t;
  bool gpu;           /* CUDA or OpenCL: the "cuda" rule set */
  bool allow_tf32;    /* float32 matmuls may use TF32 tensor cores (the target's allow_tf32) */
  tn_rng_t rng;       /* seeds of forked schedules */
} smp_ctx_t;

/* One schedule being built, with a log of the rules that changed it. */
typedef struct smp_state {
  sch_t *s;
  tn_buf_t desc;
} smp_state_t;

typedef struct smp_states {
  smp_state_t *v;
  int n, cap;
} smp_states_t;

void smp_states_push(smp_states_t *v, smp_state_t st);
void smp_state_free(smp_state_t *st);
/* A copy of st: its trace replayed (same decisions) on a fresh schedule.
 * Replay creates handles in the same order, so every handle of st names the
 * same block or loop in the copy. */
int smp_fork(smp_ctx_t *c, const smp_state_t *st, smp_state_t *out, tn_err_t *err);
void smp_note(smp_state_t *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A schedule rule applied to one block (by name) of one state.  The rule
 * takes st over: it pushes the resulting states (one or more) to out or, on
 * error, frees st (the caller then rebuilds st from its saved trace). */
typedef int (*smp_rule_fn)(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);

int smp_rule_multi_level_tiling(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_multi_level_tiling_intrin(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err);
int smp_rule_inline_const_scalars(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_auto_inline(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_cross_thread_reduction(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_add_rfactor(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_parallel_vectorize_unroll(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err);
int smp_rule_auto_bind(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);
int smp_rule_random_compute_location(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                     tn_err_t *err);

/* Binds a block's leading spatial loops to blockIdx.x/threadIdx.x (AutoBind,
 * §3.5): the thread extent is sampled from [32..1024] when `sample`, else
 * min(max threads, extent) (RewriteUnboundBlock).  *done says whether
 * anything was bound (false: already bound or tiled).  TN_ESTATE when the
 * block has no leading data-parallel loop to bind. */
int smp_bind_block(sch_t *s, const tn_target_t *t, const char *block, bool sample, bool *done, tn_err_t *err);
/* A kernel of its own that a rule made (a copy, a transpose): bound as
 * RewriteUnboundBlock would, an error when nothing could be bound. */
int smp_bind_copy(sch_t *s, const tn_target_t *t, sch_rv_t copy, tn_err_t *err);

/* Caches block's input `buf` in `scope` under loop `at`, fuses the copy's
 * loops and marks it for a cooperative fetch with a sampled vector width
 * (rules_tiling.c); *out (when not NULL) the cache block. */
int smp_cache_read_fetch(smp_ctx_t *c, sch_t *s, sch_rv_t block, const char *buf, sch_rv_t at, const char *scope,
                         sch_rv_t *out, tn_err_t *err);
/* Software pipelining of the shared-memory copies under `loop`: 1 (none), 2
 * or 3 stages, sampled. */
int smp_sample_pipeline(sch_t *s, sch_rv_t loop, tn_err_t *err);

/* The wmma intrinsic (IR_INTRIN_WMMA_MMA) for operands of type dt that the
 * target has (float16 from sm_70, bfloat16 and, where the job allows it,
 * tf32 from sm_80; cuda-host has them all), NULL if none. */
const ir_intrin_t *smp_wmma_intrin(const smp_ctx_t *c, ir_dtype_t dt);
int smp_rule_multi_level_tiling_tensor_core(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                            tn_err_t *err);

int smp_rule_multi_level_tiling_hopper(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err);
/* A convolution-like block reindexed and fused into a GEMM for the
 * tensor-core rules (rules_implicit_gemm.c). */
int smp_rule_implicit_gemm(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err);

/* The rewrite-tensorize postprocessor (rules_intrin.c). */
int smp_pp_rewrite_tensorize(sch_t *s, const tn_target_t *t, tn_err_t *err);

/* The verify postprocessor (verify.c). */
int smp_verify_gpu(sch_t *s, const tn_target_t *t, tn_err_t *err);

/* Returns the error of a failing call from the calling function. */
#define SMP_TRY(expr)                  \
  do {                                 \
    int smp_rc_ = (expr);              \
    if (smp_rc_ < 0) return smp_rc_;   \
  } while (0)

/* ---- analyses (analysis.c) ----------------------------------------------- */

typedef enum smp_iter_type { SMP_DATA_PAR, SMP_REDUCE, SMP_OPAQUE } smp_iter_type_t;

ir_block_t *smp_block(const ir_func_t *f, const char *name); /* NULL if absent */
/* The index among b's reads of the buffer called name; -1 when b does not read it. */
int smp_read_index(const ir_block_t *b, const char *name);
/* Loops enclosing the block (outermost first), within its scope, in a
 * malloc'ed array (*loops, freed by the caller); returns the count. */
int smp_block_loops(const ir_func_t *f, const ir_block_t *b, ir_loop_t ***loops);
/* TVM's GetLoopIterType over every block under the loop. */
smp_iter_type_t smp_loop_iter_type(const ir_loop_t *l);
/* Whether the loop's body is one statement (not a sequence of several). */
bool smp_single_child(const ir_loop_t *l);
/* Whether a trace instruction is a Bind to tag. */
bool smp_binds_to(const sch_inst_t *in, ir_thread_tag_t tag);
bool smp_trivial_binding(const ir_func_t *f, const ir_block_t *b);
bool smp_block_is_spatial(const ir_block_t *b);
bool smp_func_is_spatial(const ir_func_t *f);
bool smp_is_tiled(const ir_block_t *b);

/* NeedsMultiLevelTiling (§3.4): a reduction block with a trivial binding,
 * one write, constant read regions, no buffer read twice, and data reuse. */
bool smp_needs_multi_level_tiling(const ir_func_t *f, const ir_block_t *b);
/* NeedsRFactorOrCrossThreadReduction (§3.5). */
bool smp_needs_rfactor_or_xthread(const ir_func_t *f, const ir_block_t *b, int64_t max_parallel_extent,
                                  int64_t max_parallel_basic);
/* TVM's AnalyzeReadWritePattern: every read index is a write index (plus a
 * constant) or a constant; injective = no write index used twice, ordered =
 * used in the write's order.  exists = false when some index is neither. */
void smp_rw_pattern(const ir_region_t *read, const ir_region_t *write, bool *exists, bool *injective,
                    bool *ordered);
/* IsWriteCache: one write, every read injective and ordered into it. */
bool smp_is_write_cache_like(const ir_block_t *b);
bool smp_block_calls(const ir_block_t *b, ir_math_fn_t fn);
bool smp_block_has_select(const ir_block_t *b);
/* Coefficient of loop variable v in an index expression e of block b (over
 * b's iterators, whose bindings are over loop variables); false if non-linear. */
bool smp_access_coef(const ir_block_t *b, const ir_expr_t *e, const ir_var_t *v, int64_t *coef);

/* The coefficient of each loop (loops[0 .. nl), outermost first, around b)
 * in the element offset of b's access idx of buf (row-major), taken whole
 * and simplified over the loops' ranges; false where it is not affine in
 * some loop (that loop's coef 0 and, when affine is not NULL, affine[l]
 * false: the others are still read). */
bool smp_offset_coefs(const ir_block_t *b, const ir_buffer_t *buf, ir_expr_t *const *idx, ir_loop_t *const *loops,
                      int nl, int64_t *coef, bool *affine);

/* Iterator roles of a matmul-like block C[.., i, j] += A[.., i, k] * B[.., k, j]
 * (B may be read transposed, a dense layer's W[j, k]): -1 when absent. */
typedef struct smp_roles {
  int i, j, k;
  int64_t m, n;
  const char *a, *b; /* the operands read along i and j (by name: forks have their own functions) */
  int jdim;          /* the index of b that j runs along; not its last: b is read transposed */
  int bdims;
} smp_roles_t;

/* Whether b is C[...] = C[...] + X[...] * Y[...] storing float32, with one
 * reduction iterator k; j indexes the last dimension of C and one of B, i the
 * remaining iterator of A and C, any other iterator indexes all three (a
 * batch).  With `casts`, X and Y may be loads converted to float32
 * (float16/bfloat16 operands accumulated in float32). */
bool smp_matmul_roles(const ir_block_t *b, smp_roles_t *r, bool casts);

/* ---- the mutators' memo (memo.c) ------------------------------------------ */

/* The value kept under key (a malloc'ed array the memo owns), NULL if none
 * or m is NULL. */
int64_t *smp_memo_get(smp_memo_t *m, uint64_t key);
/* Keeps val (malloc'ed; the memo takes it) under key and returns what is
 * kept: val, or the equal value another thread put first (val is freed).
 * With m NULL, returns val (the caller frees it). */
int64_t *smp_memo_put(smp_memo_t *m, uint64_t key, int64_t *val);

#endif
