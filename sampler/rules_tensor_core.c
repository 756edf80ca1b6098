/* rules_tensor_core.c — multi-level tiling for tensor cores (MetaSchedule's
 * MultiLevelTilingTensorCore) on CUDA targets: a matmul-like block whose
 * operands are float16 or bfloat16 converted to float32 (or float32 when the
 * job allows TF32) is tiled around the warp-level wmma intrinsics:
 *
 *   batch.. i0 j0 | i1 j1 | k0 | k1 i2 j2 | i3 j3 k3      (i3 = j3 = 16, k3 = the mma's K)
 *   blockIdx.x      threadIdx.y (warps)    fragments        one mma_sync per point
 *
 * i and j are split by 16 and their outer parts by sampled perfect tiles
 * (blocks, warps, fragments per warp); k by the intrinsic's K and its outer
 * part into k0 (the shared-memory stage) and k1 (steps per stage).  The
 * accumulator is a local buffer per warp (fragments), written back under the
 * warp loop; A and B are staged in shared memory under k0 with rows padded
 * to 32 n + 16 bytes (storage_align: rows 16 bytes apart fall into other
 * banks, and load_matrix_sync needs a multiple of 16 bytes), copied by all
 * threads (cooperative fetch with the warp's 32 lanes as threadIdx.x:
 * warp_execution) with a sampled vector width, and pipelined over 1–3
 * stages.  The postprocessors decompose the reduction at k0 and tensorize
 * the init, the update and the write-back (fill, mma, store: the blocks are
 * annotated with their intrinsics).  Every 16 is fixed, so any
 * mutation of the sampled tiles replays into a tensorizable nest.  Extents
 * that 16 (or K) does not divide leave the block to the SIMT tiling. */
#include <stdio.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

/* fragments per warp along i and along j, and mma steps per stage, at most */
#define MAX_FRAGS 4
#define MAX_K_STEPS 4

static ir_dtype_t operand_dtype(const ir_block_t *b, const char *name) {
  for (int r = 0; r < b->nreads; r++)
    if (!strcmp(b->reads[r].buf->name, name)) return b->reads[r].buf->dtype;
  return IR_FLOAT32;
}

const ir_intrin_t *smp_wmma_intrin(const smp_ctx_t *c, ir_dtype_t dt) {
  int sm = 0;
  if (c->t->kind == TN_TARGET_CUDA && sscanf(c->t->arch, "sm_%d", &sm) != 1) return NULL;
  if (c->t->kind != TN_TARGET_CUDA && c->t->kind != TN_TARGET_CUDA_HOST) return NULL;
  for (int i = 0; i < ir_intrin_count(); i++) {
    const ir_intrin_t *in = ir_intrin_at(i);
    if (in->kind != IR_INTRIN_WMMA_MMA || in->in_dtype != dt) continue;
    if (dt == IR_FLOAT32 && !c->allow_tf32) continue; /* TF32 rounds the operands: only when the job asks */
    if (c->t->kind == TN_TARGET_CUDA && sm < in->sm) continue;
    return in;
  }
  return NULL;
}

/* The mma intrinsic for the block's operand type on target t, NULL if none. */
static const ir_intrin_t *choose(const smp_ctx_t *c, const ir_block_t *b, const smp_roles_t *r) {
  ir_dtype_t da = operand_dtype(b, r->a), db = operand_dtype(b, r->b);
  return da == db ? smp_wmma_intrin(c, da) : NULL;
}

/* Splits `loop` by `inner` and its outer part into n sampled perfect tiles:
 * parts[0..n-1], then parts[n] the fixed inner loop. */
static int split_fixed(sch_t *s, sch_rv_t loop, int64_t inner, int n, int max_innermost, sch_rv_t *parts,
                       tn_err_t *err) {
  sch_rv_t two[2], fac[4];
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(inner)};
  SMP_TRY(sch_split(s, loop, f, 2, two, err));
  SMP_TRY(sch_sample_perfect_tile(s, two[0], n, max_innermost, fac, err));
  sch_arg_t g[4];
  for (int q = 0; q < n; q++) g[q] = sch_arg_rv(fac[q]);
  SMP_TRY(sch_split(s, two[0], g, n, parts, err));
  parts[n] = two[1];
  return TN_OK;
}

/* The accumulator's write-back under the warp loop: its last two loops split
 * by 16, the 16 x 16 tile innermost, marked to be stored from the fragments. */
static int split_store(sch_t *s, sch_rv_t acc, tn_err_t *err) {
  sch_rv_t l[SCH_MAX_RVS_OUT], a0[2], a1[2];
  int n = 0;
  SMP_TRY(sch_get_loops(s, acc, l, &n, err));
  if (n < 2) return tn_err_set(err, TN_EINVAL, "the accumulator's write-back has %d loops", n);
  sch_arg_t f16[2] = {sch_arg_none(), sch_arg_int(16)};
  SMP_TRY(sch_split(s, l[n - 2], f16, 2, a0, err));
  SMP_TRY(sch_split(s, l[n - 1], f16, 2, a1, err));
  sch_rv_t order[4] = {a0[0], a1[0], a0[1], a1[1]};
  SMP_TRY(sch_reorder(s, order, 4, err));
  return sch_annotate(s, acc, SMP_ANN_AUTO_TENSORIZE, sch_arg_str("wmma_store_f32_16x16"), err);
}

static int tile(smp_ctx_t *c, smp_state_t *st, const char *block, const smp_roles_t *r, const ir_intrin_t *in,
                tn_err_t *err) {
  sch_t *s = st->s;
  sch_rv_t b, loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_get_block(s, block, &b, err));
  int niters = sch_rv_stmt(s, b)->u.block.niters;
  SMP_TRY(sch_annotate(s, b, SMP_ANN_TILING, sch_arg_str("tensor-core"), err));
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  if (nl != niters) return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d loops for %d iterators", block, nl, niters);
  sch_rv_t ip[4], jp[4], kp[3];
  SMP_TRY(split_fixed(s, loops[r->i], 16, 3, MAX_FRAGS, ip, err));
  SMP_TRY(split_fixed(s, loops[r->j], 16, 3, MAX_FRAGS, jp, err));
  SMP_TRY(split_fixed(s, loops[r->k], in->fk, 2, MAX_K_STEPS, kp, err));
  sch_rv_t order[SCH_MAX_RVS_OUT];
  int n = 0;
  for (int t = 0; t < nl; t++)
    if (t != r->i && t != r->j && t != r->k) order[n++] = loops[t]; /* batch */
  int nbatch = n;
  sch_rv_t rest[] = {ip[0], jp[0], ip[1], jp[1], kp[0], kp[1], ip[2], jp[2], ip[3], jp[3], kp[2]};
  if (n + (int)TN_ARRAY_LEN(rest) > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_ERANGE, "block \"%s\": tiling gives more than %d loops", block, SCH_MAX_RVS_OUT);
  for (size_t q = 0; q < TN_ARRAY_LEN(rest); q++) order[n++] = rest[q];
  SMP_TRY(sch_reorder(s, order, n, err));
  sch_rv_t bx, ty, acc;
  SMP_TRY(sch_fuse(s, order, nbatch + 2, &bx, err));
  SMP_TRY(sch_fuse(s, order + nbatch + 2, 2, &ty, err));
  SMP_TRY(sch_bind(s, bx, ir_thread_tag_name(IR_TAG_BLOCK_X), err));
  SMP_TRY(sch_bind(s, ty, ir_thread_tag_name(IR_TAG_THREAD_Y), err));
  SMP_TRY(sch_annotate(s, b, SMP_ANN_WARP_EXECUTION, sch_arg_int(1), err));
  /* the accumulator: a warp's fragments, written back under the warp loop */
  SMP_TRY(sch_cache_write(s, b, 0, "local", &acc, err));
  SMP_TRY(sch_reverse_compute_at(s, acc, ty, true, err));
  /* A and B staged per k0 step in shared memory */
  const char *ops[2] = {r->a, r->b};
  for (int q = 0; q < 2; q++) {
    sch_rv_t cache;
    SMP_TRY(smp_cache_read_fetch(c, s, b, ops[q], kp[0], "shared", &cache, err));
    int ndim = sch_rv_stmt(s, cache)->u.block.writes[0].buf->ndim;
    SMP_TRY(sch_storage_align(s, cache, 0, ndim - 2, 32, 16 / ir_dtype_bytes(in->in_dtype), err));
  }
  SMP_TRY(smp_sample_pipeline(s, kp[0], err));
  /* rewrite-tensorize, after the reduction is decomposed at k0 (where the
   * init lands depends on the sampled tiles): the init's i3 j3 become a
   * fill, the update's i3 j3 k3 an mma, the write-back's tiles stores */
  SMP_TRY(sch_annotate(s, b, SMP_ANN_AUTO_TENSORIZE, sch_arg_str(in->name), err));
  SMP_TRY(split_store(s, acc, err));
  smp_note(st, "multi-level-tiling-tensor-core(%s: %s, A and B in shared memory)", block, in->name);
  return TN_OK;
}

int smp_rule_multi_level_tiling_tensor_core(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                            tn_err_t *err) {
  const ir_block_t *b = c->gpu && strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  smp_roles_t r;
  const ir_intrin_t *in = NULL;
  if (b && smp_needs_multi_level_tiling(sch_func(st->s), b) && smp_matmul_roles(b, &r, true)) in = choose(c, b, &r);
  /* fixed 16 x 16 tiles and K steps: the extents must divide */
  int64_t k = in ? b->iters[r.k].extent : 0;
  if (!in || r.m % 16 || r.n % 16 || k % in->fk) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  int rc = tile(c, st, block, &r, in, err);
  if (rc < 0) {
    smp_state_free(st);
    return rc;
  }
  smp_states_push(out, *st);
  return TN_OK;
}
