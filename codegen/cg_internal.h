/* cg_internal.h — what the codegen files share: the dialect table (the only
 * place C, CUDA and OpenCL differ), the lowering context, the analyses
 * (names, buffer sizing, kernels, cross-thread reductions) and the printers. */
#ifndef TUNED_CG_INTERNAL_H
#define TUNED_CG_INTERNAL_H

#include "codegen.h"
#include "ir/affine.h"
#include "ir/intrin.h"

/* ======================================================================
 * Dialects (dialect.c)
 * ====================================================================== */

typedef struct cg_dialect {
  cg_target_t target;
  bool gpu;
  const char *kernel_decl;   /* qualifiers of a kernel, before attributes and "void" */
  const char *ptr_space;     /* address space of parameter pointers ("__global ") */
  const char *restrict_kw;
  const char *shared_decl;   /* prefix of a shared-scope array declaration */
  const char *helper_qual;   /* qualifiers of emitted helper functions */
  const char *block_idx[3];  /* expressions of type int */
  const char *thread_idx[3];
  const char *unroll;        /* "#pragma unroll"; NULL: "#pragma GCC unroll N" */
  const char *barrier_local; /* orders shared memory */
  const char *barrier_all;   /* orders shared and global memory */
  const char *int64_suffix;
  bool math_overloaded;      /* exp() for float and double (OpenCL) vs expf()/exp() */
  const char *storage[7];    /* element type of arrays, by ir_dtype_t */
  const char *compute[7];    /* type values are computed in, by ir_dtype_t */
  bool half_arrays;          /* shared/local float16 arrays store halves (else float) */
  const char *half_load;     /* %1$s array, %2$s index */
  const char *half_store;    /* %1$s array, %2$s index, %3$s float value */
  const char *bf16_load;     /* bfloat16 arrays, as half_load / half_store */
  const char *bf16_store;
  const char *vec_load;      /* %1$s pointer, %2$s index, %3$d width */
  const char *vec_store;     /* %1$s pointer, %2$s index, %3$s value, %4$d width */
  bool shuffle;              /* warp shuffles for cross-thread reductions */
} cg_dialect_t;

const cg_dialect_t *cg_dialect_for(cg_target_t t);

/* ======================================================================
 * Lowering context
 * ====================================================================== */

/* The class of a loop's thread binding (IR_TAG_CLASS_NONE for unbound
 * loops) and its axis (0..2). */
ir_tag_class_t cg_loop_tag(const ir_loop_t *l, int *axis);

/* One access of a sized temporary, for placing and sizing it. */
typedef struct cg_site {
  const ir_buffer_t *buf;
  const ir_block_t *blk;
  ir_expr_t *const *idx;
  const ir_loop_t **loops; /* enclosing loops, outermost first */
  int nloops;
  int kernel;              /* root statement index */
} cg_site_t;

#define CG_MAX_VTHREADS 3

/* What the printers know about a buffer (indexed by buffer id). */
typedef struct cg_buf {
  const ir_buffer_t *b;
  const char *name;             /* C identifier */
  bool param;                   /* function / kernel argument */
  bool heap;                    /* C: malloc'ed at the entry (used by several top-level nests, or
                                   too big for the stack and under no parallel loop) */
  bool heap_at_loop;            /* C: malloc'ed at every iteration of its allocation point */
  const ir_loop_t *par_at;      /* C: malloc'ed once per thread in this parallel loop's region */
  bool sized;                   /* extents/min from the region used under alloc_at (every temp
                                   but GPU workspaces) */
  int64_t ext[IR_MAX_DIMS];     /* storage extents */
  ir_expr_t *min[IR_MAX_DIMS];  /* index base over outer loop variables; NULL = 0 */
  const ir_loop_t *alloc_at;    /* allocation point; NULL = function / kernel top */
  /* GPU local buffers used only under copies of vthread loops (vthread.c):
   * one slice of the sized extents per virtual thread, slice index
   * vt[0] * vt[1].extent * ... + vt[nvt - 1] over the loops' variables. */
  const ir_loop_t *vt[CG_MAX_VTHREADS];
  int nvt;
  int kernel;                   /* kernel using it (-1 none) */
  bool used;
  /* Shared buffers filled by the copies of a software-pipelined loop
   * (pipeline.c): `pipe_stages` copies of the storage, the one in use
   * chosen by the loop's variable modulo the stages. */
  const ir_loop_t *pipe;
  int pipe_stages;
  /* storage_align (layout.c): the stride of dimension align_axis padded to
   * align_factor * n + align_offset elements; align_axis -1: none */
  int align_axis;
  int64_t align_factor, align_offset;
  /* tensor-core intrinsics (wmma.c): an accumulator held in fragments of
   * 16 x 16 x wmma_k (-1: no mma seen, 16) in kernel wmma_kernel; or an
   * operand a warp loads or stores (32-byte aligned) */
  int wmma_k, wmma_kernel;
  bool wmma_operand;
  /* the packed copy of this constant input that a hoisted packing nest
   * fills (IR_ANN_HOIST_PACKING): an argument of role "packed", laid out
   * whole (with its storage_align padding) */
  const ir_buffer_t *packs;
} cg_buf_t;

/* A loop annotated IR_ANN_PIPELINE_STAGES (GPU) whose body is copies into
 * shared memory (items[0 .. ncopies)) followed by the computation. */
typedef struct cg_pipe {
  const ir_loop_t *loop;
  int stages;
  ir_stmt_t *const *items;
  int nitems, ncopies;
  bool global_barrier; /* the computation writes global memory */
} cg_pipe_t;

/* A reduction whose reduce iterator is bound to threadIdx.x (GPU). */
typedef struct cg_xred {
  const ir_loop_t *top;   /* outermost loop of the perfect reduce-only nest */
  const ir_block_t *blk;
  const ir_loop_t *chain[64];
  int nchain;             /* top .. the loop holding blk */
  ir_expr_kind_t op;      /* IR_E_ADD, IR_E_MAX, IR_E_MIN */
  ir_expr_t *value;       /* the contribution of one instance */
  int64_t threads;        /* extent of the threadIdx.x loop */
} cg_xred_t;

/* A tile of accumulators kept local for the duration of a loop (promote.c). */
#define CG_PROMO_MAX_TILE 8
typedef struct cg_promo {
  const ir_loop_t *loop;                  /* the serial loop L */
  const ir_loop_t *tile[CG_PROMO_MAX_TILE]; /* the spatial loops of the perfect nest inside it */
  int ntile;
  const ir_loop_t *red[CG_PROMO_MAX_TILE];  /* its reduction loops (the element stays put) */
  int nred;
  int64_t elems;
  const ir_block_t *blk;  /* the update block */
  const ir_stmt_t *store; /* its store */
  char name[32];          /* tuned_accN */
  const char *ref;        /* "tuned_accN[(t0) * e1 + t1]", or "tuned_accN" when simd */
  bool simd;              /* one element reduced by L alone: a scalar, L gets omp simd reduction(op) */
  /* lanes: a small tile reduced by L alone, L contiguous in what it loads:
   * one scalar per element (names[e]), the tile loops printed unrolled with
   * their values in cur[], L an omp simd reduction over all the scalars */
  bool lanes;
  const char **names;
  int64_t *cur;
  ir_expr_kind_t op;      /* with simd: IR_E_ADD, IR_E_MAX or IR_E_MIN */
} cg_promo_t;

/* Divisions by a loop invariant printed as multiplications by its
 * reciprocal, computed before the loop (recip.c). */
#define CG_RECIP_MAX 4
typedef struct cg_recip {
  const ir_loop_t *loop;
  const ir_block_t *blk;                 /* the loop's one block */
  const ir_expr_t *div[CG_RECIP_MAX];    /* its divisions whose divisor the loop does not change */
  char name[CG_RECIP_MAX][24];           /* tuned_rcpN */
  int n;
} cg_recip_t;

/* A producer loop printed inside the loop that consumes it (fuse.c). */
#define CG_FUSE_MAX_UNITS 8
typedef struct cg_fuse {
  const ir_loop_t *units[CG_FUSE_MAX_UNITS]; /* the producer's loops of extent 1, outermost first */
  int nunits;
  const ir_loop_t *lp;  /* the producer's loop */
  const ir_stmt_t *pblk; /* its block */
  const ir_loop_t *lc;  /* the consumer's loop, at whose top the block is printed */
} cg_fuse_t;

/* What static __shared__ arrays may hold in one CUDA kernel when the caller
 * names no target (cg_lower): the CUDA language's 48 KiB.  cg_lower_for
 * takes the target file's max_shared_memory_per_block instead. */
#define CG_CUDA_STATIC_SHARED_DEFAULT 49152

#define CG_MAX_OVERRIDES 16
#define CG_MAX_HOPPER_N 32

typedef struct cg_ctx {
  const ir_func_t *f;
  ir_func_t *scratch; /* arena for expressions built while lowering */
  const cg_dialect_t *d;
  tn_err_t *err;
  int rc;             /* first error (0 none); emission goes on but the result is dropped */

  /* names (names.c) */
  const char **names;
  int nnames, capnames;
  const char **var_name; /* by var id */
  int nvars;
  const char *entry;
  int64_t static_shared_max; /* CUDA: bytes static __shared__ arrays may hold; above, one dynamic array */

  ir_bounds_t bounds; /* every loop variable and iterator over its range */
  cg_buf_t *bufs;     /* by buffer id */
  int nbufs;
  cg_site_t *sites;
  int nsites, capsites;
  cg_xred_t *xreds;
  int nxreds, capxreds;
  const ir_stmt_t **roots; /* root statements (one kernel each on GPUs) */
  int nroots;
  /* per root: the block of a hoisted packing nest (printed as a function
   * of its own, named pack_fn[k]), else NULL */
  const ir_block_t **pack_blk;
  const char **pack_fn;
  cg_pipe_t *pipes;
  int npipes, cappipes;

  /* emission state */
  tn_buf_t *o;
  int ind;
  const ir_loop_t **stack; /* the loops being printed, outermost first (grows) */
  int depth, capstack;
  const ir_block_t *blk; /* block whose statements are printed (for rebasing) */
  int in_parallel;
  int64_t auto_unroll;
  int tmp;               /* counter for tuned_* temporaries */
  const cg_promo_t *promo; /* accumulators being kept local (C target) */
  const cg_recip_t *recip; /* reciprocals of divisors computed before the loop (C target) */
  const cg_fuse_t *fuse;   /* a producer skipped in its sequence, to print at the top of fuse->lc */
  /* while a pipelined loop's copies are printed: its variable prints as
   * shift_text (the iteration fetched ahead), and copies from global into
   * shared memory become cp.async on CUDA */
  const ir_var_t *shift_var;
  const char *shift_text;
  bool async_copy;
  const ir_expr_t *ovr_expr[CG_MAX_OVERRIDES];
  const char *ovr_text[CG_MAX_OVERRIDES];
  int novr;

  /* current kernel (GPU) */
  int kernel;
  int64_t grid[3], block[3];
  uint8_t *pend_w, *read_since; /* by buffer id, for barriers */
  tn_buf_t shared;              /* declarations at the kernel top */
  int64_t shared_bytes;

  /* helpers the source needs */
  bool need_fdiv[2], need_minmax[2], need_half, need_bf16, need_fp64, need_cp_async;
  bool need_team; /* C: a parallel loop's team from tuned_team() (module.c) */
  bool need_expf, need_tanhf; /* C: the vectorisable single-precision exp/tanh */
  bool need_fminmax[2];       /* C: the vectorisable fmaxf/fminf [0], fmax/fmin [1] */
  uint64_t intrin_used; /* tensor intrinsics called, by registry index (ir/intrin.h) */
  bool need_wmma;       /* CUDA tensor-core intrinsics: <mma.h> */
  int wmma_sm;          /* the lowest architecture they need (70: sm_70); 0 none */
  bool need_hopper;     /* Hopper GEMM kernels (hopper_gemm.c): the primitives for sm_90a */
  int hopper_n[CG_MAX_HOPPER_N]; /* the wgmma Ns they use */
  int nhopper_n;
} cg_ctx_t;

/* Records the first error; returns its code. */
int cg_fail(cg_ctx_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- names (names.c) --------------------------------------------------- */

/* A C identifier derived from base, unique in the module; registers it. */
const char *cg_name_unique(cg_ctx_t *c, const char *base);
/* s with every non-identifier character replaced, for use in comments. */
const char *cg_comment_name(cg_ctx_t *c, const char *s);
/* The name of a variable (loop var, iterator). */
const char *cg_var(const cg_ctx_t *c, const ir_var_t *v);

/* ---- analyses (analysis.c) --------------------------------------------- */

/* Names, bounds, thread-tag checks, access sites, cross-thread reductions
 * (GPU) and buffer sizing.  Returns c->rc. */
int cg_analyse(cg_ctx_t *c);
/* The launch extents of root statement k; errors when it is unbound or two
 * loops of one tag disagree. */
int cg_kernel_dims(cg_ctx_t *c, int k, int64_t grid[3], int64_t block[3]);
const cg_xred_t *cg_xred_at(const cg_ctx_t *c, const ir_loop_t *top);
/* The non-local buffers a statement reads / writes, as flags by buffer id;
 * a block's loads of the element it updates do not count as reads. */
typedef struct cg_access {
  uint8_t *r, *w;
} cg_access_t;
void cg_access_get(const cg_ctx_t *c, const ir_stmt_t *s, cg_access_t *a);
void cg_access_free(cg_access_t *a);
/* Tree helpers: a SEQ of one item is that item; the statement that holds a
 * loop / block. */
const ir_stmt_t *cg_strip_seq(const ir_stmt_t *s);
const ir_stmt_t *cg_loop_stmt(const ir_loop_t *l);
const ir_stmt_t *cg_block_stmt(const ir_block_t *b);
int64_t cg_buf_numel(const cg_buf_t *cb); /* of the storage (sized extents, vthread slices) */
/* layout.c: the element stride of each dimension, returning the elements
 * of one copy (before vthread slices and pipeline stages); and the pass
 * that reads the storage_align annotations. */
int64_t cg_buf_strides(const cg_buf_t *cb, int64_t *stride);
void cg_layout_analyse(cg_ctx_t *c);
/* Finds the hoisted packing nests (layout.c; before buffers are registered). */
void cg_packing_analyse(cg_ctx_t *c);
/* Bytes of one element of a buffer as stored by this target. */
int cg_elem_bytes(const cg_ctx_t *c, const ir_buffer_t *b);
const char *cg_storage_type(const cg_ctx_t *c, const ir_buffer_t *b);
/* The index of buffer b among the kernel arguments (the function's
 * parameters, then workspaces and packed copies); -1 when it is none. */
int cg_arg_index(const cg_ctx_t *c, const ir_buffer_t *b);
/* float16 data kept as halves (converted on every load and store). */
bool cg_half_storage(const cg_ctx_t *c, const ir_buffer_t *b);
/* bfloat16 data (stored as 16 bits everywhere, converted on every load and store). */
bool cg_bf16_storage(const ir_buffer_t *b);

/* ---- virtual threads (vthread.c) ------------------------------------------ */

/* A copy of f with its vthread loops pushed down to the statements that use
 * them (see vthread.c); NULL when f has none. */
ir_func_t *cg_inject_vthreads(const ir_func_t *f);

/* ---- expressions (expr.c) ---------------------------------------------- */

void cg_print_expr(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o);
char *cg_expr_str(cg_ctx_t *c, const ir_expr_t *e); /* scratch-arena string */
/* The row-major element offset of an access as an expression (rebased for
 * sized buffers: over loop variables; else over c->blk's iterators). */
ir_expr_t *cg_flat_index(cg_ctx_t *c, const ir_buffer_t *b, ir_expr_t *const *idx);
/* The same with the block's bindings substituted everywhere (over loops). */
ir_expr_t *cg_flat_index_loops(cg_ctx_t *c, const ir_block_t *blk, const ir_buffer_t *b,
                               ir_expr_t *const *idx);
/* Substitutes a block's iterator bindings into e. */
ir_expr_t *cg_subst_bindings(cg_ctx_t *c, const ir_block_t *blk, ir_expr_t *e);
/* "a + b", "fmaxf(a, b)", ... for op in ADD/MAX/MIN on values of dtype t. */
void cg_combine(cg_ctx_t *c, ir_expr_kind_t op, ir_dtype_t t, const char *a, const char *b,
                tn_buf_t *o);
/* The identity of a combiner (0, lowest, highest) as a literal. */
void cg_identity(cg_ctx_t *c, ir_expr_kind_t op, ir_dtype_t t, tn_buf_t *o);
/* Emits `buf[index] = value;` (with half conversion) as one line. */
void cg_emit_store_text(cg_ctx_t *c, const ir_buffer_t *b, ir_expr_t *const *idx,
                        const char *value);
/* The same at `name[ix]`: storage of b's element type (a staging copy of b). */
void cg_emit_store_at(cg_ctx_t *c, const ir_buffer_t *b, const char *name, const char *ix, const char *value);

/* ---- statements (stmt.c) ----------------------------------------------- */

void cg_line(cg_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_emit_stmt(cg_ctx_t *c, const ir_stmt_t *s);
/* Declarations (and C heap allocations) of buffers allocated at loop l
 * (NULL: the top); returns the number of heap buffers that need freeing. */
int cg_emit_allocs(cg_ctx_t *c, const ir_loop_t *l);
void cg_emit_frees(cg_ctx_t *c, const ir_loop_t *l);
/* Iterator declarations of a block: all, or only the spatial ones. */
void cg_emit_iters(cg_ctx_t *c, const ir_block_t *b, bool spatial_only);
/* Conjunction of `threadIdx.a == 0` for thread axes the kernel launches but
 * no enclosing loop binds ("" when none), for blocks writing non-local data. */
void cg_thread_guard(cg_ctx_t *c, tn_buf_t *o);
/* Barriers: emit one if s conflicts with unsynchronised accesses; note s's
 * accesses afterwards. */
void cg_sync_before(cg_ctx_t *c, const ir_stmt_t *s);
void cg_sync_note(cg_ctx_t *c, const ir_stmt_t *s);
void cg_barrier(cg_ctx_t *c, bool global);

/* Loop nesting while printing (for the thread guards). */
void cg_stack_push(cg_ctx_t *c, const ir_loop_t *l);
void cg_stack_pop(cg_ctx_t *c);

/* ---- software pipelining (pipeline.c) ------------------------------------ */

/* Finds the loops annotated IR_ANN_PIPELINE_STAGES (GPU), checks their form
 * (an error naming the loop otherwise) and gives their copies' shared
 * buffers one slice per stage.  Runs after buffer sizing. */
int cg_pipe_analyse(cg_ctx_t *c);
const cg_pipe_t *cg_pipe_at(const cg_ctx_t *c, const ir_loop_t *l);
/* Prints a pipelined loop: prologue copies, then per iteration wait, barrier,
 * the copies S - 1 iterations ahead, the computation. */
void cg_emit_pipelined(cg_ctx_t *c, const ir_stmt_t *s, const cg_pipe_t *p);
/* A store that copies one float32 from global into shared memory, printed as
 * cp.async when c->async_copy; false (nothing printed) otherwise. */
bool cg_try_async_store(cg_ctx_t *c, const ir_stmt_t *s);
/* The cp.async helpers (CUDA; the host harness brings its own). */
extern const char cg_cp_async_helpers[];

/* ---- GPU special forms ------------------------------------------------- */

/* vectorize.c: float2/float4 accesses for a vectorized loop; false (nothing
 * emitted) when the loop does not qualify. */
bool cg_try_vectorize(cg_ctx_t *c, const ir_loop_t *l);
/* promote.c (C target): whether loop statement s keeps a tile of
 * accumulators local; open emits the array and the copy in and makes the
 * update's accesses print as the array (cg_promo_ref), close the copy out. */
bool cg_promo_find(cg_ctx_t *c, const ir_stmt_t *s, cg_promo_t *p);
/* With a lanes promotion open: which of its tile loops l is (-1: none);
 * such a loop prints unrolled, its value in c->promo->cur[that index]. */
int cg_promo_tile(const cg_ctx_t *c, const ir_loop_t *l);
/* Prints L's "#pragma omp simd reduction(op:...)" (simd and lanes promotions). */
bool cg_promo_pragma(cg_ctx_t *c, const ir_loop_t *l);
void cg_promo_open(cg_ctx_t *c, cg_promo_t *p);
void cg_promo_close(cg_ctx_t *c, cg_promo_t *p);
/* "tuned_accN[...]" when b is the promoted buffer of the block printed now. */
const char *cg_promo_ref(const cg_ctx_t *c, const ir_buffer_t *b);
/* recip.c (C target): whether loop statement s divides by something it
 * does not change; open prints the reciprocals before the loop and makes
 * those divisions print as products (cg_recip_ref), close ends its scope. */
/* fuse.c: whether items[k] of a sequence of n is a producer loop that can
 * run inside the loop of items[k + 1] (then skip it and set c->fuse to f);
 * emit prints its block at the top of that loop's body. */
bool cg_fuse_find(cg_ctx_t *c, const ir_stmt_t *const *items, int k, int n, cg_fuse_t *f);
void cg_fuse_emit(cg_ctx_t *c, const cg_fuse_t *f);
bool cg_recip_find(const cg_ctx_t *c, const ir_stmt_t *s, cg_recip_t *r);
void cg_recip_open(cg_ctx_t *c, cg_recip_t *r);
void cg_recip_close(cg_ctx_t *c, cg_recip_t *r);
/* "tuned_rcpN" when e is a division of the block printed now by such a divisor. */
const char *cg_recip_ref(const cg_ctx_t *c, const ir_expr_t *e);
/* intrin.c: a block marked by tensorize prints as its intrinsic's call
 * (true; errors go to c->rc); false for other blocks.  cg_intrin_helpers
 * appends the implementations the module called. */
bool cg_intrin_emit(cg_ctx_t *c, const ir_stmt_t *s);
void cg_intrin_helpers(const cg_ctx_t *c, tn_buf_t *o);
/* hopper_gemm.c: whether root statement k is a block the Hopper rule
 * annotated (IR_ANN_HOPPER_GEMM), printed whole as a warpgroup-MMA kernel
 * by cg_hopper_gemm_emit (its launch extents and shared memory into kd;
 * args the kernel's parameter list); the helpers are hopper.c's primitives
 * for the Ns used, and the stage copies. */
bool cg_hopper_gemm_kernel(cg_ctx_t *c, int k);
int cg_hopper_gemm_emit(cg_ctx_t *c, int k, cg_kernel_t *kd, const char *args, tn_buf_t *out);
void cg_hopper_gemm_helpers(cg_ctx_t *c, tn_buf_t *o);
/* After the analysis: the float32 temporary of a Hopper GEMM whose kernel
 * computes its epilogue from the accumulators, which that kernel never
 * writes and no other kernel touches, is no argument (the launcher would
 * allocate a workspace that no kernel reads or writes). */
void cg_hopper_gemm_workspaces(cg_ctx_t *c);
/* The attribute line the C entry function needs for the intrinsics it calls
 * (their CPU features), "" when none. */
void cg_intrin_entry_attr(const cg_ctx_t *c, tn_buf_t *o);
/* wmma.c: CUDA tensor-core intrinsics.  The analysis (after buffer sizing)
 * marks the accumulators and the warps' operands and checks the schedule;
 * cg_wmma_kernel says whether kernel k uses them (it launches threadIdx.x =
 * 32 lanes); the accumulator's declaration; the calls of a matched block.
 * cg_intrin_operand_offset (intrin.c): an operand's storage offset at the
 * tile's origin and its stride along each iterator. */
int cg_wmma_analyse(cg_ctx_t *c);
bool cg_wmma_kernel(const cg_ctx_t *c, int k);
void cg_wmma_acc_decl(cg_ctx_t *c, const cg_buf_t *cb);
void cg_wmma_emit(cg_ctx_t *c, const ir_stmt_t *s, const ir_intrin_t *in, const ir_intrin_match_t *m);
ir_expr_t *cg_intrin_operand_offset(cg_ctx_t *c, const ir_intrin_match_t *m, const ir_intrin_operand_t *op,
                                    int64_t *stride, bool *affine);
/* xreduce.c: the whole reduce nest of a cross-thread reduction. */
void cg_emit_xreduce(cg_ctx_t *c, const cg_xred_t *x);

#endif
