/* intrin.h — tensor intrinsics: small computations that a target performs as
 * one call (a register-blocked FMA micro-kernel on AVX2, later tensor-core
 * fragments on GPUs), kept in one registry.  Each intrinsic is a
 * *description* — a workload in the .tw language whose one compute block is
 * the computation the call replaces — plus what its implementations need
 * (target features, unit strides).  The code generators hold the
 * implementations (codegen/intrin.c); the schedule's tensorize primitive and
 * the code generators agree on what a block nest means through
 * ir_intrin_match.  Prefix: ir_intrin_. */
#ifndef TUNED_IR_INTRIN_H
#define TUNED_IR_INTRIN_H

#include "ir/ir.h"

/* Block annotation (string: the intrinsic's name) that tensorize puts on the
 * block whose body it matched; code generators replace that body by a call. */
#define IR_ANN_TENSORIZE "tensorize"
/* Block annotation (int d) that a rule puts on a block it will tensorize
 * after its reduction is decomposed: its innermost d loops become the
 * intrinsic's call, so nothing may be computed inside them (compute_at's
 * candidate locations leave them out). */
#define IR_ANN_TENSORIZE_LOOPS "meta_schedule.tensorize_loops"

#define IR_INTRIN_MAX_ITERS 6
#define IR_INTRIN_MAX_OPERANDS 4

/* What an intrinsic's implementation is.  The warp-level tensor-core ones
 * (CUDA's nvcuda::wmma) come in three parts that share an accumulator held
 * in fragments across the reduction: a fill (the init of the reduction), the
 * multiply-accumulate, a store of the accumulator to memory.  The buffer
 * they accumulate in must be a local buffer that only they touch. */
typedef enum ir_intrin_kind {
  IR_INTRIN_CPU_MM,     /* C function over vector registers (codegen/intrin.c): outer products */
  IR_INTRIN_CPU_DW,     /* the same, elementwise along j: C[i, j] += A[i, .., j] * B[.., j] (depthwise) */
  IR_INTRIN_WMMA_MMA,   /* C += A B on fragments: load_matrix_sync of A and B, mma_sync */
  IR_INTRIN_WMMA_FILL,  /* C = 0: fill_fragment */
  IR_INTRIN_WMMA_STORE, /* D = C: store_matrix_sync of the accumulator */
} ir_intrin_kind_t;

typedef struct ir_intrin {
  const char *name;     /* "f32_fma_6x16_avx2" */
  const char *summary;  /* one line, for listings */
  const char *desc;     /* .tw source; its one compute block's update is the computation */
  /* iterators whose extent the call takes at run time ("k3 k2 k1 k"; "" none); free
   * iterators that the same operands use are levels of one nest: the loops
   * that play them are bound innermost to last */
  const char *free_iters;
  const char *unit;     /* "C.j B.j": operand.iterator pairs that must have stride 1 */
  const char *features; /* CPU features the implementation needs ("avx2 fma"), "" none */
  int mr, nr;           /* for matmul-like intrinsics: the register tile (rows, columns); 0 else */
  int lanes;            /* floats per vector register: 8 (AVX2), 16 (AVX-512) */
  ir_intrin_kind_t kind;
  int sm;               /* tensor-core intrinsics: the lowest CUDA architecture (70: sm_70); 0 CPU */
  int fm, fn, fk;       /* tensor-core intrinsics: the fragments' shape (m16n16k16); fk 0: any mma's */
  ir_dtype_t in_dtype;  /* the multiply's operands (float16, bfloat16, float32 rounded to tf32) */
} ir_intrin_t;

/* Whether the intrinsic runs as a warp's tensor-core operation (CUDA). */
bool ir_intrin_is_wmma(const ir_intrin_t *in);
/* Whether it is a CPU micro-kernel (IR_INTRIN_CPU_MM or IR_INTRIN_CPU_DW). */
bool ir_intrin_is_cpu(const ir_intrin_t *in);

/* The registry, in order of preference (bigger register tiles first). */
int ir_intrin_count(void);
const ir_intrin_t *ir_intrin_at(int i);
const ir_intrin_t *ir_intrin_find(const char *name);
/* Whether the CPU this process runs on has every feature the intrinsic
 * needs (the CPU targets compile with -march=native, so the host decides);
 * false for tensor-core intrinsics. */
bool ir_intrin_host_supports(const ir_intrin_t *in);
/* The description, parsed (never fails for registry entries: a test parses
 * them all); free with ir_workload_free. */
int ir_intrin_desc(const ir_intrin_t *in, ir_workload_t **out, tn_err_t *err);

/* One operand of a matched intrinsic, in the description's parameter order. */
typedef struct ir_intrin_operand {
  char name[32];              /* the description's name ("A") */
  ir_buffer_t *buf;           /* the program's buffer bound to it */
  bool output;
  ir_expr_t **idx;            /* the inner block's indices of its access, over its iterators (simplified over their domains) */
  int nuse;                   /* description iterators its index uses, in index order */
  int use[IR_INTRIN_MAX_ITERS];
  int64_t stride[IR_INTRIN_MAX_ITERS]; /* element stride along each description iterator (0: unused) */
} ir_intrin_operand_t;

/* A block nest matched against a description: `outer` (a block whose body is
 * a perfect loop nest around one compute block) computes, for every point of
 * the loops outside it, the description's update over the inner loops. */
typedef struct ir_intrin_match {
  const ir_intrin_t *intrin;
  const ir_block_t *outer, *inner;
  int niters;                         /* the description's iterators, in its block's order */
  char iter_name[IR_INTRIN_MAX_ITERS][32];
  const ir_loop_t *loop[IR_INTRIN_MAX_ITERS]; /* the inner loop bound to each (NULL: extent 1) */
  int64_t extent[IR_INTRIN_MAX_ITERS];        /* that loop's extent (1 without one) */
  /* How many of the extent run at this point of the outer loops, from the
   * inner block's predicate (`x < bound - rest` tails of uneven splits):
   * NULL = all of them; else an expression over loop variables outside
   * `outer` (and its iterators' bindings). */
  ir_expr_t *count[IR_INTRIN_MAX_ITERS];
  ir_expr_t *guard;                   /* conjuncts of the predicate without inner loops; NULL none */
  int noperands;
  ir_intrin_operand_t op[IR_INTRIN_MAX_OPERANDS];
} ir_intrin_match_t;

/* Matches block `outer` of f against the intrinsic; expressions are built in
 * f's arena.  On failure returns < 0 with a message naming the block, the
 * intrinsic and the reason. */
int ir_intrin_match(ir_func_t *f, const ir_block_t *outer, const ir_intrin_t *in, ir_intrin_match_t *m,
                    tn_err_t *err);

/* ---- Hopper warpgroup GEMM (sampler/rules_hopper.c -> codegen/hopper_gemm.c) ----
 *
 * A matmul-like block that the Hopper rule took carries IR_ANN_HOPPER_GEMM
 * (int 1) and one annotation per sampled decision; the CUDA code generator
 * prints its kernel from them (warpgroup MMA on a K ring of swizzled
 * shared-memory stages) instead of lowering the block's loops. */
#define IR_ANN_HOPPER_GEMM "hopper_gemm"
#define IR_ANN_HOPPER_WARPGROUPS "hopper_gemm.warpgroups" /* consumer warpgroups: 1 or 2 */
#define IR_ANN_HOPPER_M_FRAGS "hopper_gemm.m_frags"       /* m64 row blocks per warpgroup: 1 or 2 */
#define IR_ANN_HOPPER_N_TILE "hopper_gemm.n_tile"         /* the wgmma's N: 8 to 256, a multiple of 8 */
#define IR_ANN_HOPPER_STAGES "hopper_gemm.stages"         /* K ring buffer stages: 2 to 6 */
#define IR_ANN_HOPPER_GROUP "hopper_gemm.group"           /* row tiles per group of the grouped tile order */
#define IR_ANN_HOPPER_PRODUCER "hopper_gemm.producer"     /* 1: a producer warpgroup copies (setmaxnreg); 0: all */
/* 1: the K-major operands' stages come by TMA (cp.async.bulk.tensor.2d), the
 * others by ordinary stores; 0: all by ordinary stores (but the operand a
 * cluster shares).  Absent: 0. */
#define IR_ANN_HOPPER_TMA "hopper_gemm.tma"
/* > 0: a persistent grid of this many CTAs (the target's SMs) looping over
 * the tiles; 0: one CTA per tile.  Absent: 0. */
#define IR_ANN_HOPPER_CTAS "hopper_gemm.ctas"
/* A thread-block cluster of c CTAs (2 or 4) along M, which share each
 * stage's B tile, or (-c) along N, sharing A: each CTA brings a 1/c slice of
 * the shared tile by TMA multicast into every CTA of the cluster (TMA
 * brings that operand whatever IR_ANN_HOPPER_TMA says).  1: no cluster.
 * Absent: 1. */
#define IR_ANN_HOPPER_CLUSTER "hopper_gemm.cluster"
/* The registers one CTA may hold (the target's max_registers_per_block),
 * written by the rule from the target file (a constant, no decision): the
 * register plan (ir_hopper_gemm_reg_plan) is computed from it.  Absent
 * (traces from before): the fixed split those traces were printed with. */
#define IR_ANN_HOPPER_REG_FILE "hopper_gemm.reg_file"

/* K per stage: one 128-byte swizzled row of 16-bit elements. */
#define IR_HOPPER_K_TILE 64
/* Shared memory per consumer warp that stages the output: 16 rows of 128
 * bytes (its rows of an m64 block, 128 bytes of columns at a time), which
 * it stores to global memory as 16-byte vectors. */
#define IR_HOPPER_OUT_STAGE_WARP_BYTES 2048

typedef struct ir_hopper_gemm {
  int warpgroups, m_frags, n_tile, stages, group, producer;
  int tma;  /* IR_ANN_HOPPER_TMA */
  int ctas; /* IR_ANN_HOPPER_CTAS */
  int cluster; /* IR_ANN_HOPPER_CLUSTER: 1, 2, 4 (along M) or -2, -4 (along N) */
  int64_t reg_file; /* IR_ANN_HOPPER_REG_FILE; 0: absent */
} ir_hopper_gemm_t;

/* Reads the decisions from a block's annotations: false when the block has
 * no IR_ANN_HOPPER_GEMM; TN_EINVAL-style message in why (when not NULL and
 * a value is out of range) and false too. */
bool ir_hopper_gemm_get(const ir_block_t *b, ir_hopper_gemm_t *g, char *why, size_t why_len);
/* Threads of the kernel: 128 per consumer warpgroup, and the producer's. */
int ir_hopper_gemm_threads(const ir_hopper_gemm_t *g);
/* Rows of the block tile: 64 x warpgroups x m_frags. */
int ir_hopper_gemm_rows(const ir_hopper_gemm_t *g);
/* Dynamic shared memory the kernel asks for: the stages of A and B, their
 * full/empty mbarriers, the output's staging (ir_hopper_gemm_out_stage_bytes)
 * and 1024 bytes to align the 128-byte swizzle atoms. */
int64_t ir_hopper_gemm_smem(const ir_hopper_gemm_t *g);
/* Shared memory that stages the output: IR_HOPPER_OUT_STAGE_WARP_BYTES per consumer warp. */
int64_t ir_hopper_gemm_out_stage_bytes(const ir_hopper_gemm_t *g);
/* Bytes of one stage of the K ring: the A and B tiles, K_TILE deep, 16-bit. */
int64_t ir_hopper_gemm_stage_bytes(const ir_hopper_gemm_t *g);
/* The GEMM a block computes: out[(b,) i, j] += A[(b,) i, k] * B[(b,) k, j]
 * (casts to float32 allowed; A may be read as A[(b,) k, i], B as
 * B[(b,) j, k]), float16 or bfloat16 operands, a float32 out, every buffer
 * exactly its iterators' extents, a batch iterator (if any) the first index
 * of all three. */
typedef struct ir_hopper_shape {
  const ir_buffer_t *a, *b, *out;
  bool a_k_inner, b_k_inner; /* K is the operand's last (contiguous) dimension */
  int64_t batch, m, n, k;    /* batch 1 without one */
} ir_hopper_shape_t;

/* Matches the block; false with the reason in *why otherwise. */
bool ir_hopper_gemm_shape(const ir_block_t *b, ir_hopper_shape_t *sh, const char **why);

/* Whether block `cons` can be computed in a Hopper GEMM's kernel as its
 * epilogue, from the accumulators instead of the buffer `acc` the GEMM
 * writes: two spatial iterators, no init, one store (not to acc), and every
 * load of acc (one at least) acc[row, col] over both iterators, the same
 * everywhere; the store's last index the column, over a last dimension as
 * wide as acc's, its other indices functions of the row alone (acc's shape,
 * or a conv's [n, y, x, f] fused to [m, f]), 2-, 4- or 8-byte elements (the
 * kernel stores rows of 16-byte vectors); *row and *col (when not NULL) are
 * those iterators. */
bool ir_hopper_epilogue(const ir_block_t *cons, const ir_buffer_t *acc, const ir_var_t **row, const ir_var_t **col);
/* A store X[..] = acc + a * b (the sum in either order): the other addend
 * and the product's factors, casts stripped; false for any other store. */
bool ir_mac_parts(const ir_stmt_t *st, const ir_expr_t **acc, const ir_expr_t **a, const ir_expr_t **b);
/* f32 accumulator registers per consumer thread (m_frags x n_tile / 2). */
int ir_hopper_gemm_acc_regs(const ir_hopper_gemm_t *g);
/* PTX's bounds on a thread's registers: at most 255 (ptxas's ceiling), and
 * setmaxnreg's operand from 24 to 256 in steps of 8, the granularity in
 * which a warp's registers are allocated.  Numbers of the ISA, not of a
 * device. */
#define IR_REGS_PER_THREAD_MAX 255
#define IR_SETMAXNREG_MIN 24
#define IR_SETMAXNREG_MAX 256
#define IR_REG_ALLOC_UNIT 8

/* The register plan of a Hopper GEMM kernel.  It is launched with
 * __launch_bounds__(threads, 1), so ptxas gives every thread `launch`
 * registers: the register file over the threads, in whole allocation units,
 * at most IR_REGS_PER_THREAD_MAX.  With a producer warpgroup, the producer
 * gives registers back (setmaxnreg.dec to `producer`) and the consumer
 * warpgroups take them (setmaxnreg.inc to `consumer`): an .inc blocks until
 * the CTA's pool has the registers, so 128 x (producer + warpgroups x
 * consumer) must not exceed launch x threads, or the last consumer warp
 * waits for ever.  The consumers get what the pool leaves them after the
 * producer's share (152 with one consumer warpgroup, where the pool has
 * room to spare; with two, 40, CUTLASS's, when its one thread only issues
 * TMA copies, 96 when its threads copy), at most 240: with two consumer warpgroups at 384 threads and 168 at launch,
 * 40 / 232 (as CUTLASS) or 96 / 200. */
typedef struct ir_hopper_regs {
  int launch;             /* registers per thread at launch (0: no register file known) */
  int producer, consumer; /* after setmaxnreg; 0 / launch without a producer */
  int64_t pool;           /* launch x threads: what the CTA holds */
  int64_t need;           /* 128 x (producer + warpgroups x consumer); launch x threads without a producer */
  bool fixed;             /* no register file annotated: the split of traces from before
                             (152 / 240, two warpgroups 96 / 208) */
} ir_hopper_regs_t;

/* Registers per thread at launch for `threads` threads sharing `reg_file`
 * registers, at most max_per_thread (<= 0: IR_REGS_PER_THREAD_MAX), in
 * allocation units; 0 when reg_file is 0. */
int ir_launch_regs(int64_t reg_file, int64_t threads, int max_per_thread);
/* The plan of g with its annotated register file (g->reg_file);
 * tma_producer: the producer's copies are all TMA (one thread issues them,
 * ir_hopper_gemm_tma_ops says both operands). */
void ir_hopper_gemm_reg_plan(const ir_hopper_gemm_t *g, bool tma_producer, ir_hopper_regs_t *r);
/* Which operands TMA brings: with g->tma the K-major ones (A[M, K],
 * B^T[N, K]), and the one a cluster shares (by multicast) in any case. */
void ir_hopper_gemm_tma_ops(const ir_hopper_gemm_t *g, bool a_k_inner, bool b_k_inner, bool *a, bool *b);
/* Bytes of one stage that TMA brings (ir_hopper_gemm_tma_ops' tiles); the
 * threads copy the rest. */
int64_t ir_hopper_gemm_tma_bytes(const ir_hopper_gemm_t *g, bool a_k_inner, bool b_k_inner);
/* CTAs launched for `tiles` tiles: a persistent grid of g->ctas (rounded
 * down to whole clusters) when that is fewer (each cluster loops over every
 * g->ctas / cluster-th cluster of tiles), else one per tile. */
int64_t ir_hopper_gemm_grid(const ir_hopper_gemm_t *g, int64_t tiles);
/* CTAs per cluster (1: none) and whether they lie along N (sharing A). */
int ir_hopper_gemm_cluster_size(const ir_hopper_gemm_t *g);
/* Whether the cluster fits a GEMM of m x n (a batch of them): the shared
 * operand is K-major (TMA multicasts it), the tiles along the cluster's
 * dimension divide into whole clusters and its slices are whole 8-row
 * 128B swizzle atoms.  Else false with the reason in *why. */
bool ir_hopper_gemm_cluster_ok(const ir_hopper_gemm_t *g, const ir_hopper_shape_t *sh, const char **why);

#endif
