/* plan.h — the kernel plan: for a scheduled function and a target, what each
 * kernel (a top-level statement of the root block, as the GPU code
 * generators split them) launches and holds: grid and block extents, its
 * roles (a Hopper GEMM's producer and consumer warpgroups), every buffer it
 * keeps per block (shared memory with its pipeline stages and vthread
 * slices, the global workspaces it touches), the register plan (launch
 * registers, setmaxnreg per role, the CTA's pool), mbarriers and TMA maps.
 * The sampler's verifier checks the target's limits on it and the cost
 * model reads a Hopper kernel's registers from it; every device number
 * comes from the target file.  Prefix: ir_plan_. */
#ifndef TUNED_IR_PLAN_H
#define TUNED_IR_PLAN_H

#include "common/target.h"
#include "ir/intrin.h"
#include "ir/ir.h"

/* One buffer a kernel holds. */
typedef struct ir_plan_buf {
  const ir_buffer_t *buf;
  ir_scope_t scope; /* IR_SCOPE_SHARED, or IR_SCOPE_GLOBAL: a workspace (a temporary that lives across kernels) */
  int64_t bytes;    /* shared: the widest access of the kernel's blocks per dimension, times its stages */
  int stages;       /* copies a software-pipelined loop keeps (1: none) */
} ir_plan_buf_t;

typedef enum ir_plan_role_kind { IR_ROLE_ALL, IR_ROLE_PRODUCER, IR_ROLE_CONSUMER } ir_plan_role_kind_t;

/* Threads of a kernel that do one job. */
typedef struct ir_plan_role {
  ir_plan_role_kind_t kind; /* ALL: every thread (a SIMT kernel, a Hopper kernel without a producer) */
  int warpgroups;           /* 128-thread warpgroups (0: a SIMT kernel's threads) */
  int64_t threads;
  int regs;                 /* registers per thread after setmaxnreg; 0: what ptxas gives at launch */
} ir_plan_role_t;

typedef struct ir_kernel_plan {
  ir_stmt_t *stmt;          /* the kernel's statement under the root block */
  const char *first_block;  /* names the kernel in messages */
  int64_t grid[3], block[3];
  int64_t threads;          /* block[0] x block[1] x block[2] */
  int cluster;              /* CTAs per thread-block cluster (1: none) */
  ir_plan_buf_t *bufs;      /* shared buffers first, then workspaces */
  int nbufs;
  int64_t shared_bytes;     /* shared memory per block (a Hopper kernel: the dynamic array it asks for) */
  int64_t xreduce_bytes;    /* of which the scratch of cross-thread reductions (codegen's tuned_red_buf) */
  bool dynamic_shared;      /* one dynamic array: over the target's static limit on CUDA, or a Hopper kernel */
  char shared_detail[256];  /* "A_shared 2048 B, B_shared 2048 B" or a Hopper kernel's stages */
  int64_t vector_bytes;     /* widest vectorized access */
  const char *unbound;      /* a block not under both blockIdx and threadIdx, or NULL */
  int nunbound;
  const ir_block_t *hopper; /* the Hopper warpgroup-MMA block the kernel is printed from; NULL: SIMT */
  ir_hopper_gemm_t gemm;    /* its decisions */
  ir_hopper_shape_t shape;  /* its GEMM (valid when shaped) */
  bool shaped;
  ir_plan_role_t roles[2];
  int nroles;
  ir_hopper_regs_t regs;    /* the register plan the kernel is printed with (its annotated register file) */
  int launch_regs;          /* registers per thread at launch on the target: the register file over the threads
                               (__launch_bounds__(threads, 1)), with setmaxnreg no more than its largest count (what
                               ptxas reports); 0: ptxas decides */
  int64_t reg_pool;         /* launch_regs x threads: what the CTA holds on the target (0: unknown) */
  int barriers;             /* mbarriers: full and empty per stage */
  int tma_maps;
} ir_kernel_plan_t;

typedef struct ir_plan {
  ir_kernel_plan_t *k;
  int n;
} ir_plan_t;

/* The plan of every kernel of f for target t (NULL: no target, so no static
 * shared limit and no register pool).  TN_EINVAL for a Hopper block whose
 * annotations are out of range (the message names the block).  Release
 * with ir_plan_free, whatever it returned. */
int ir_plan_build(const ir_func_t *f, const tn_target_t *t, ir_plan_t *out, tn_err_t *err);
void ir_plan_free(ir_plan_t *p);

/* Whether the kernel's register plan can make progress: every setmaxnreg.inc
 * can be met from the CTA's pool (producer + consumers within launch x
 * threads) and each count lies in setmaxnreg's range.  False with the
 * reason in why (naming the block and the numbers) otherwise; true for a
 * kernel without setmaxnreg. */
bool ir_plan_regs_ok(const ir_kernel_plan_t *k, char *why, size_t why_len);

#endif
