/* rules_hopper.c — multi-level tiling with Hopper's warpgroup MMA (wgmma
 * m64nNk16, f16/bf16 -> f32) for matmul-like blocks on Hopper targets
 * (tn_target_is_hopper), in the manner of MetaSchedule's multi-level tiling
 * with an intrinsic: the block tile, the warpgroups, the K ring buffer and
 * the tile order are sampled decisions of the trace, the loops are split by
 * them, and the block carries them as annotations (ir/intrin.h,
 * IR_ANN_HOPPER_*) from which the CUDA code generator prints the kernel
 * (codegen/hopper_gemm.c):
 *
 *   i0 j0 | i1 | i2 | i3 j1 k0 k1     (i1 = warpgroups, i2 = m64 blocks per warpgroup,
 *   blockIdx.x  threadIdx.y  ..  threadIdx.x   i3 = 64, j1 = the wgmma's N, k1 = 64)
 *
 * Decisions (sample_categorical, each replayable and mutable on its own):
 * consumer warpgroups {1, 2}, m64 blocks per warpgroup {1, 2}, N tile
 * {64, 128, 192, 256} (those dividing the block's N), stages {2..6}, the
 * grouped order's group {1, 2, 4, 8} (row tiles that share a column of B in
 * L2), the copies {0: by every thread, 1: by a producer warpgroup that
 * gives its registers to the consumers with setmaxnreg}, TMA {0: ordinary
 * stores, 1: the K-major operands by cp.async.bulk.tensor (only offered
 * where one is K-major)} and the grid {0: a CTA per tile, the target's
 * sm_count: a persistent grid whose CTAs loop over the tiles (only offered
 * where the target has an sm_count)} and the thread-block cluster {1: none,
 * 2: two CTAs along M sharing each stage's B tile, -2: along N sharing A;
 * each CTA brings its half of the shared tile by TMA multicast into both,
 * whatever the TMA decision (which then decides the other operand's
 * copies); only offered where the shared operand is K-major, and with the
 * persistent grid too, whose CTAs then take whole clusters of tiles}.  The
 * block also carries the target's register file (IR_ANN_HOPPER_REG_FILE),
 * from which the setmaxnreg split is computed so that the producer's and
 * the consumers' registers fit the pool the CTA holds at launch
 * (ir_hopper_gemm_reg_plan).  Combinations the target cannot hold (shared
 * memory, accumulator registers, a register plan) are refused by the verify
 * postprocessor with the reason.  The
 * loops are what a SIMT lowering would run (each thread a row of the tile),
 * so the schedule stays a correct program for every other consumer of the
 * IR.  An elementwise consumer of the output (its float16 rounding, a bias,
 * an activation) moves under the tile's blockIdx loop: the kernel computes
 * it from the accumulators and never writes the float32 temporary.  The
 * rule forks: the block left as it was is another space (the wmma and
 * SIMT rules take it), and where an operand is not K-major (B as [K, N], A
 * as [K, M]) a third space first transposes it into a K-major global
 * workspace with a kernel of its own (transpose_operand), so that TMA can
 * bring both operands.  Only 2-D or batched blocks (ir_hopper_gemm_shape:
 * float16 or bfloat16 operands accumulated in float32) whose M, N and K are
 * multiples of 64 are taken; a batch joins the tiles on blockIdx.x. */
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

static ir_dtype_t read_dtype(const ir_block_t *b, const char *name) {
  for (int r = 0; r < b->nreads; r++)
    if (!strcmp(b->reads[r].buf->name, name)) return b->reads[r].buf->dtype;
  return IR_FLOAT32;
}

/* Whether the rule takes the block: 2-D, 16-bit operands of one type, sizes
 * that the fixed 64s divide. */
static bool takes(const smp_ctx_t *c, const ir_func_t *f, const ir_block_t *b, smp_roles_t *r) {
  ir_hopper_shape_t sh;
  const char *why;
  if (!tn_target_is_hopper(c->t) || !smp_needs_multi_level_tiling(f, b) || !smp_matmul_roles(b, r, true)) return false;
  if (!ir_hopper_gemm_shape(b, &sh, &why)) return false;
  return sh.m % 64 == 0 && sh.n % 64 == 0 && sh.k % IR_HOPPER_K_TILE == 0;
}

/* A categorical decision over those of cand[0..n) that keep[] allows, equally likely. */
static int sample(sch_t *s, const int64_t *cand, const bool *keep, int n, sch_rv_t *out, tn_err_t *err) {
  int64_t v[8];
  double p[8];
  int m = 0;
  for (int i = 0; i < n; i++)
    if (keep[i]) v[m++] = cand[i];
  for (int i = 0; i < m; i++) p[i] = 1.0 / m;
  return sch_sample_categorical(s, v, p, m, out, err);
}

/* An operand read with M or N contiguous (B as [K, N], A as [K, M]): in a
 * space of its own, a kernel of its own first copies it into a global
 * temporary with K contiguous (cache_read into "global", transform_layout
 * moving K last), one thread per element in the order of the copy's rows (AutoBind's
 * binding), so
 * that the GEMM reads it K-major — with TMA where that decision is taken —
 * instead of transposing it while filling every stage (wgmma's MN-major
 * operand layouts are not offered by the primitives).  The copy costs one
 * read and one write of the operand per call. */
static int transpose_operand(sch_t *s, const tn_target_t *t, const char *block, const char *name, tn_err_t *err) {
  sch_rv_t b;
  SMP_TRY(sch_get_block(s, block, &b, err));
  const ir_block_t *cur = &sch_rv_stmt(s, b)->u.block;
  int index = smp_read_index(cur, name);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" does not read %s", cur->name, name);
  int nd = cur->reads[index].buf->ndim, perm[3] = {0, 1, 2};
  perm[nd - 2] = nd - 1, perm[nd - 1] = nd - 2; /* (batch,) K x MN -> (batch,) MN x K */
  sch_rv_t copy, loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_cache_read(s, b, index, "global", &copy, err));
  SMP_TRY(sch_transform_layout(s, copy, 0, true, perm, nd, err));
  SMP_TRY(sch_get_loops(s, copy, loops, &nl, err));
  if (nl != nd) return tn_err_set(err, TN_EINVAL, "the copy of %s has %d loops for %d dimensions", name, nl, nd);
  sch_rv_t k = loops[nd - 2]; /* K inner: each thread writes the next element of the copy's row */
  loops[nd - 2] = loops[nd - 1], loops[nd - 1] = k;
  SMP_TRY(sch_reorder(s, loops, nd, err));
  return smp_bind_copy(s, t, copy, err); /* AutoBind's binding of the copy's loops, fused */
}

typedef struct decisions {
  sch_rv_t wg, mf, bn, stages, group, producer, tma, ctas, cluster;
} decisions_t;

/* The decisions, their candidates cut to what divides the block's extents;
 * TMA only where an operand is K-major, a persistent grid only where the
 * target says how many SMs it has, a cluster along M (N) only where B (A)
 * is K-major and M (N) holds two 64-row tiles at least (a tile that does
 * not pair up is refused by the verifier, ir_hopper_gemm_cluster_ok). */
static int sample_all(sch_t *s, const tn_target_t *t, const smp_roles_t *r, const ir_hopper_shape_t *sh,
                      decisions_t *d, tn_err_t *err) {
  static const int64_t two[] = {1, 2}, ns[] = {64, 128, 192, 256}, stages[] = {2, 3, 4, 5, 6},
                       groups[] = {1, 2, 4, 8}, off_on[] = {0, 1};
  bool wg_ok[2] = {true, r->m % 128 == 0}, mf_ok[2] = {true, r->m % 256 == 0}, n_ok[4], all[5] = {1, 1, 1, 1, 1};
  bool tma_ok[2] = {true, sh->a_k_inner || sh->b_k_inner}, ctas_ok[2] = {true, t->sm_count > 0};
  int64_t ctas[2] = {0, t->sm_count};
  for (int i = 0; i < 4; i++) n_ok[i] = r->n % ns[i] == 0;
  SMP_TRY(sample(s, two, wg_ok, 2, &d->wg, err));
  SMP_TRY(sample(s, two, mf_ok, 2, &d->mf, err));
  SMP_TRY(sample(s, ns, n_ok, 4, &d->bn, err));
  SMP_TRY(sample(s, stages, all, 5, &d->stages, err));
  SMP_TRY(sample(s, groups, all, 4, &d->group, err));
  SMP_TRY(sample(s, off_on, all, 2, &d->producer, err));
  SMP_TRY(sample(s, off_on, tma_ok, 2, &d->tma, err));
  SMP_TRY(sample(s, ctas, ctas_ok, 2, &d->ctas, err));
  static const int64_t clusters[] = {1, 2, -2};
  bool cluster_ok[3] = {true, sh->b_k_inner && sh->m % 128 == 0, sh->a_k_inner && sh->n % 128 == 0};
  return sample(s, clusters, cluster_ok, 3, &d->cluster, err);
}

/* The GEMM's one consumer, when it is an elementwise epilogue of the
 * temporary the GEMM writes (ir_hopper_epilogue: a conversion, a bias, an
 * activation) over the whole output: computed in the GEMM's kernel from the
 * accumulators, under the tile's blockIdx loop, its loops fused and bound to
 * the 64 threadIdx.x of the tiling.  *fused says whether it was. */
static int fuse_epilogue(sch_t *s, const char *block, sch_rv_t bx, bool *fused, tn_err_t *err) {
  const ir_func_t *f = sch_func(s);
  const ir_block_t *b = smp_block(f, block);
  ir_block_t *cons[2];
  *fused = false;
  const ir_buffer_t *acc = b->writes[0].buf;
  if (acc->role != IR_BUF_TEMP || ir_consumers(f, b, cons, 2) != 1 || !ir_hopper_epilogue(cons[0], acc, NULL, NULL))
    return TN_OK;
  if (cons[0]->iters[0].extent * cons[0]->iters[1].extent != acc->shape[0] * acc->shape[1]) return TN_OK;
  sch_rv_t cb, loops[SCH_MAX_RVS_OUT], fusedl, parts[2];
  int n = 0;
  SMP_TRY(sch_get_block(s, cons[0]->name, &cb, err));
  SMP_TRY(sch_reverse_compute_at(s, cb, bx, true, err));
  SMP_TRY(sch_get_loops(s, cb, loops, &n, err));
  if (n != 3) return tn_err_set(err, TN_EINVAL, "epilogue \"%s\" has %d loops under the tile", cons[0]->name, n);
  SMP_TRY(sch_fuse(s, loops + 1, 2, &fusedl, err));
  sch_arg_t f64[2] = {sch_arg_none(), sch_arg_int(64)};
  SMP_TRY(sch_split(s, fusedl, f64, 2, parts, err));
  SMP_TRY(sch_bind(s, parts[1], ir_thread_tag_name(IR_TAG_THREAD_X), err));
  *fused = true;
  return TN_OK;
}

static int tile(sch_t *s, const tn_target_t *t, const char *block, const smp_roles_t *r, bool *fused,
                tn_err_t *err) {
  sch_rv_t b, loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_get_block(s, block, &b, err));
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  int nb = nl - 3; /* a batch loop */
  if (nl != sch_rv_stmt(s, b)->u.block.niters || nb < 0 || nb > 1)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d loops for %d iterators", block, nl,
                      sch_rv_stmt(s, b)->u.block.niters);
  decisions_t d;
  ir_hopper_shape_t sh;
  const char *why = NULL;
  if (!ir_hopper_gemm_shape(&sch_rv_stmt(s, b)->u.block, &sh, &why))
    return tn_err_set(err, TN_EINVAL, "block \"%s\": %s", block, why);
  SMP_TRY(sample_all(s, t, r, &sh, &d, err));
  sch_rv_t ip[4], jp[2], kp[2], bx;
  sch_arg_t fi[4] = {sch_arg_none(), sch_arg_rv(d.wg), sch_arg_rv(d.mf), sch_arg_int(64)};
  sch_arg_t fj[2] = {sch_arg_none(), sch_arg_rv(d.bn)}, fk[2] = {sch_arg_none(), sch_arg_int(IR_HOPPER_K_TILE)};
  SMP_TRY(sch_split(s, loops[r->i], fi, 4, ip, err));
  SMP_TRY(sch_split(s, loops[r->j], fj, 2, jp, err));
  SMP_TRY(sch_split(s, loops[r->k], fk, 2, kp, err));
  sch_rv_t order[9];
  int no = 0;
  for (int t = 0; t < nl; t++)
    if (t != r->i && t != r->j && t != r->k) order[no++] = loops[t]; /* the batch */
  sch_rv_t rest[] = {ip[0], jp[0], ip[1], ip[3], ip[2], jp[1], kp[0], kp[1]};
  for (size_t q = 0; q < TN_ARRAY_LEN(rest); q++) order[no++] = rest[q];
  SMP_TRY(sch_reorder(s, order, no, err));
  SMP_TRY(sch_fuse(s, order, nb + 2, &bx, err));
  SMP_TRY(sch_bind(s, bx, ir_thread_tag_name(IR_TAG_BLOCK_X), err));
  SMP_TRY(sch_bind(s, ip[1], ir_thread_tag_name(IR_TAG_THREAD_Y), err));
  SMP_TRY(sch_bind(s, ip[3], ir_thread_tag_name(IR_TAG_THREAD_X), err));
  SMP_TRY(fuse_epilogue(s, block, bx, fused, err));
  SMP_TRY(sch_annotate(s, b, SMP_ANN_TILING, sch_arg_str("hopper-wgmma"), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_GEMM, sch_arg_int(1), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_WARPGROUPS, sch_arg_rv(d.wg), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_M_FRAGS, sch_arg_rv(d.mf), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_N_TILE, sch_arg_rv(d.bn), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_STAGES, sch_arg_rv(d.stages), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_GROUP, sch_arg_rv(d.group), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_PRODUCER, sch_arg_rv(d.producer), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_TMA, sch_arg_rv(d.tma), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_CTAS, sch_arg_rv(d.ctas), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_HOPPER_CLUSTER, sch_arg_rv(d.cluster), err));
  /* the register plan's pool comes from the target file (the setmaxnreg split is computed from it) */
  if (t->max_registers_per_block <= 0) return TN_OK;
  return sch_annotate(s, b, IR_ANN_HOPPER_REG_FILE, sch_arg_int(t->max_registers_per_block), err);
}

int smp_rule_multi_level_tiling_hopper(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err) {
  const ir_block_t *b = c->gpu && strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  smp_roles_t r;
  if (!b || !takes(c, sch_func(st->s), b, &r)) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  /* the block untouched stays a second space, for the wmma and SIMT rules;
   * with an operand that is not K-major, a third has it transposed first */
  ir_hopper_shape_t sh;
  const char *why;
  bool mn_major = ir_hopper_gemm_shape(b, &sh, &why) && (!sh.a_k_inner || !sh.b_k_inner);
  smp_state_t plain = {0}, trans = {0};
  int rc = smp_fork(c, st, &plain, err);
  if (rc == TN_OK && mn_major) rc = smp_fork(c, st, &trans, err);
  if (rc == TN_OK && mn_major && !sh.a_k_inner) rc = transpose_operand(trans.s, c->t, block, r.a, err);
  if (rc == TN_OK && mn_major && !sh.b_k_inner) rc = transpose_operand(trans.s, c->t, block, r.b, err);
  bool fused = false, tfused = false;
  if (rc == TN_OK) rc = tile(st->s, c->t, block, &r, &fused, err);
  if (rc == TN_OK && mn_major) rc = tile(trans.s, c->t, block, &r, &tfused, err);
  if (rc < 0) {
    smp_state_free(st);
    if (plain.s) smp_state_free(&plain);
    if (trans.s) smp_state_free(&trans);
    return rc;
  }

  smp_note(st, "multi-level-tiling-hopper(%s: wgmma m64nNk16 %s, K ring in 128B-swizzled shared memory%s)", block,
           ir_dtype_name(read_dtype(b, r.a)), fused ? ", epilogue fused" : "");
  smp_states_push(out, *st);
  if (mn_major) {
    smp_note(&trans, "multi-level-tiling-hopper(%s: %s%s%s transposed K-major by a kernel before, wgmma m64nNk16 %s%s)",
             block, sh.a_k_inner ? "" : r.a, !sh.a_k_inner && !sh.b_k_inner ? " and " : "", sh.b_k_inner ? "" : r.b,
             ir_dtype_name(read_dtype(b, r.a)), tfused ? ", epilogue fused" : "");
    smp_states_push(out, trans);
  }
  smp_states_push(out, plain);
  return TN_OK;
}
