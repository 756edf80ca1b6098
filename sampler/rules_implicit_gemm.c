/* rules_implicit_gemm.c — a convolution-like block made a GEMM for the
 * tensor-core tilings (rules_tensor_core.c: wmma on sm_70+; rules_hopper.c:
 * warpgroup MMA on Hopper), as MetaSchedule's tensor-core rules make one
 * with ReIndex and TransformBlockLayout.  A block
 * Out[b.., m.., n..] += X[f(b.., m.., k..)] * W[g(b.., n.., k..)] with
 * float16 or bfloat16 operands accumulated in float32 whose spatial
 * iterators split into those both operands read (B: a batch, attention's
 * batch and head), those only X reads (M: a conv's n, y, x — a capsule's
 * pose row too) and those only W reads (N: its output channels — a
 * capsule's pose column too), each group consecutive, B before M before N,
 * then its reduction iterators (K: r, s, c), is forked into a space where
 *
 *   - X and W are reindexed (the im2col: X_reindex[n, y, x, r, s, c] filled
 *     by a kernel of its own, the operand's producer — a padding — inlined
 *     into it; W_reindex[f, r, s, c]), so both are K-major; strides and
 *     dilations are the copy's index arithmetic;
 *   - the groups are fused (FuseBlockIters): the block is
 *     Out[(b,) m, n] += X_reindex[(b,) m, k] * W_reindex[(b,) n, k], and the
 *     tiling rules that run next take it as they take a (batched) matmul;
 *   - the output, a temporary, is [(B,) M, N] with its elementwise
 *     consumer's iterators fused too (the Hopper rule then fuses the
 *     consumer, a batch norm and ReLU say, into the GEMM's kernel); a
 *     parameter output is reindexed and copied back by a kernel.
 *
 * Indices are read over the iterators' domains (a one-group conv's
 * co / CO * CI + rc is rc).  Not taken: a depthwise convolution (its
 * channel is a batch iterator: no N, and K is the window alone), a grouped
 * one (the group is part of the channel iterator, which both operands
 * read: no N either), a transposed one whose input is read through a
 * select (no load to reindex).  The block left as it was is the other
 * space.  M and N must be multiples of 16 and K of the mma's K (of 64 for
 * all three for the Hopper tiling to take the GEMM); the copy kernels cost
 * a read and a write of each operand (R*S times X's size for X_reindex)
 * per call. */
#include <stdio.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

enum { G_B, G_M, G_N, G_K, NGROUPS };

/* The block's GEMM: iterators first .. first + n - 1 of each group (B, M,
 * N, K), the operands' names and the output. */
typedef struct igemm {
  int first[NGROUPS], n[NGROUPS];
  int64_t ext[NGROUPS];
  const char *x, *w;
  ir_dtype_t dtype; /* the operands' */
  const ir_buffer_t *out;
} igemm_t;

/* Whether the load's indices, simplified over the iterators' domains, use v. */
static bool uses(ir_func_t *tmp, const ir_bounds_t *bd, const ir_expr_t *load, const ir_var_t *v) {
  for (int d = 0; d < load->u.load.n; d++)
    if (ir_expr_uses_var(load->u.load.idx[d], v) && ir_expr_uses_var(ir_simplify(tmp, load->u.load.idx[d], bd), v))
      return true;
  return false;
}

/* Fills the group g of iterator t, checking the groups come in order, each consecutive. */
static bool add_to_group(igemm_t *ig, int g, int t, int *last, int64_t extent) {
  if (g < *last || (ig->n[g] && ig->first[g] + ig->n[g] != t)) return false;
  if (!ig->n[g]) ig->first[g] = t, ig->ext[g] = 1;
  ig->n[g]++;
  ig->ext[g] *= extent;
  *last = g;
  return true;
}

/* Each iterator's group (in_x[t], in_w[t]: whether X, W read it); X is the
 * operand that the first spatial iterator only one of them reads belongs
 * to (*swap: W is). */
static bool group_iters(const ir_block_t *b, igemm_t *ig, const bool *in_x, const bool *in_w, bool *swap) {
  int last = 0;
  *swap = false;
  bool seen = false;
  for (int t = 0; t < b->niters; t++) {
    const ir_iter_t *it = &b->iters[t];
    int g;
    if (it->kind == IR_ITER_REDUCE) {
      g = in_x[t] && in_w[t] ? G_K : -1;
    } else if (in_x[t] == in_w[t]) {
      g = in_x[t] ? G_B : -1;
    } else {
      if (!seen) *swap = in_w[t], seen = true;
      g = in_x[t] != *swap ? G_M : G_N;
    }
    if (g < 0 || !add_to_group(ig, g, t, &last, it->extent)) return false;
  }
  return ig->n[G_M] && ig->n[G_N] && ig->n[G_K];
}

/* Whether b is such a GEMM; its sizes not yet checked. */
static bool implicit_gemm(const ir_block_t *b, igemm_t *ig) {
  const ir_stmt_t *st = b->body;
  memset(ig, 0, sizeof *ig);
  const ir_expr_t *acc, *x, *w;
  if (!ir_mac_parts(st, &acc, &x, &w) || !b->init || st->u.store.buf->dtype != IR_FLOAT32 || b->niters > IR_MAX_DIMS * 2)
    return false;
  if (acc->kind != IR_E_LOAD || acc->u.load.buf != st->u.store.buf || x->kind != IR_E_LOAD || w->kind != IR_E_LOAD ||
      x->u.load.buf == w->u.load.buf || x->u.load.buf->dtype != w->u.load.buf->dtype ||
      (x->u.load.buf->dtype != IR_FLOAT16 && x->u.load.buf->dtype != IR_BFLOAT16))
    return false;
  for (int d = 0; d < st->u.store.n; d++)
    if (st->u.store.idx[d]->kind != IR_E_VAR) return false;
  ir_func_t *tmp = ir_func_new("igemm");
  ir_bounds_t bd;
  ir_bounds_init(&bd);
  for (int t = 0; t < b->niters; t++) /* as reindex reads them: a unit iterator stays */
    if (b->iters[t].extent > 1) ir_bounds_set(&bd, b->iters[t].var, 0, b->iters[t].extent - 1);
  bool in_x[IR_MAX_DIMS * 2], in_w[IR_MAX_DIMS * 2], swap = false;
  for (int t = 0; t < b->niters; t++)
    in_x[t] = uses(tmp, &bd, x, b->iters[t].var), in_w[t] = uses(tmp, &bd, w, b->iters[t].var);
  ir_bounds_free(&bd);
  ir_func_free(tmp);
  if (!group_iters(b, ig, in_x, in_w, &swap)) return false;
  if (swap) {
    const ir_expr_t *t = x;
    x = w, w = t;
  }
  /* the output at [B.., M.., N..], in the iterators' order */
  if (st->u.store.n != ig->n[G_B] + ig->n[G_M] + ig->n[G_N]) return false;
  for (int d = 0; d < st->u.store.n; d++)
    if (st->u.store.idx[d]->u.var != b->iters[d].var) return false;
  ig->x = x->u.load.buf->name, ig->w = w->u.load.buf->name, ig->out = st->u.store.buf;
  ig->dtype = x->u.load.buf->dtype;
  return true;
}

static int64_t round_up(int64_t v, int64_t q) { return (v + q - 1) / q * q; }

/* Whether a tensor-core tiling of the target takes the GEMM the block
 * becomes — the wmma tiling (M and N multiples of 16, K of the mma's) or
 * the Hopper one (all three multiples of 64) — once padded to multiples of
 * *q (PadEinsum; 1: no padding).  Hopper targets pad to 64 where that
 * costs at most half as much work again, else to 16.  A plain GEMM is left
 * to the tilings as it is (rules_tensor_core.c and rules_hopper.c take it
 * or not), unless the Hopper tiling takes its reindexed form only
 * (attention's two batch iterators). */
static bool worth_it(const smp_ctx_t *c, const ir_block_t *b, const igemm_t *ig, int64_t *q) {
  const ir_intrin_t *in = smp_wmma_intrin(c, ig->dtype);
  bool hopper = tn_target_is_hopper(c->t);
  if (!in && !hopper) return false;
  int64_t m = ig->ext[G_M], n = ig->ext[G_N], k = ig->ext[G_K];
  bool div64 = m % 64 == 0 && n % 64 == 0 && k % IR_HOPPER_K_TILE == 0;
  ir_hopper_shape_t sh;
  smp_roles_t r;
  const char *why;
  if (smp_matmul_roles(b, &r, true) && (!hopper || !div64 || ir_hopper_gemm_shape(b, &sh, &why))) return false;
  double vol = (double)m * (double)n * (double)k;
  if (hopper && (double)round_up(m, 64) * (double)round_up(n, 64) * (double)round_up(k, 64) <= 1.5 * vol)
    *q = 64;
  else
    *q = in ? 16 : 0;
  return *q > 0;
}

static int reindex_read(sch_t *s, sch_rv_t b, const char *name, sch_rv_t *copy, tn_err_t *err) {
  int index = smp_read_index(&sch_rv_stmt(s, b)->u.block, name);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "the block does not read %s", name);
  return sch_reindex(s, b, index, false, copy, err);
}

/* The copy of the output, or its consumer (c): its B and M iterators
 * fused as the GEMM's were, so that it reads the GEMM's [(B,) M, N] plainly
 * (M first: the B group's place stays). */
static int fuse_out_iters(sch_t *s, sch_rv_t c, const igemm_t *ig, tn_err_t *err) {
  if (ig->n[G_M] > 1) SMP_TRY(sch_fuse_block_iters(s, c, ig->n[G_B], ig->n[G_M], err));
  if (ig->n[G_B] > 1) SMP_TRY(sch_fuse_block_iters(s, c, 0, ig->n[G_B], err));
  return TN_OK;
}

/* The single consumer of the output temporary, when it is elementwise over
 * it: its B and M iterators fused as the GEMM's were, so the Hopper tiling
 * can move it into the GEMM's kernel.  Where it cannot be (loops already
 * split) it stays as it is, a kernel of its own. */
static void fuse_consumer(sch_t *s, const char *block, const igemm_t *ig) {
  const ir_func_t *f = sch_func(s);
  ir_block_t *cons[2];
  if (ig->out->role != IR_BUF_TEMP || ir_consumers(f, smp_block(f, block), cons, 2) != 1 ||
      cons[0]->niters != ig->n[G_B] + ig->n[G_M] + ig->n[G_N])
    return;
  for (int t = 0; t < cons[0]->niters; t++)
    if (cons[0]->iters[t].kind != IR_ITER_SPATIAL || cons[0]->iters[t].extent != cons[0]->writes[0].buf->shape[t])
      return;
  sch_rv_t c;
  tn_err_t kept = {0};
  if (sch_get_block(s, cons[0]->name, &c, &kept) == TN_OK) (void)fuse_out_iters(s, c, ig, &kept);
}

/* The GEMM's iterators ((B,) M, N, K) padded to multiples of q where q
 * does not divide them (PadEinsum): the operands' reindexed copies inlined
 * into their zero-padded copies where they can be (not where fusing
 * linearised their stores) and the output's copy back into its consumer;
 * *inlined[0..1] say whether X's and W's were.  *pads gets the copies that
 * stay kernels of their own. */
static int pad(sch_t *s, sch_rv_t b, const igemm_t *ig, int64_t q, sch_rv_t cx, sch_rv_t cw, bool *inlined,
               sch_rv_t *pads, int *npads, tn_err_t *err) {
  int64_t by[4] = {1, q, q, q};
  int nb = ig->n[G_B] ? 1 : 0, n = 0;
  sch_rv_t copies[SCH_MAX_RVS_OUT];
  SMP_TRY(sch_pad_einsum(s, b, by + 1 - nb, nb + 3, copies, &n, err));
  int nout = ig->ext[G_M] % q || ig->ext[G_N] % q; /* the output's copy back comes last */
  const ir_buffer_t *re[2] = {sch_rv_stmt(s, cx)->u.block.writes[0].buf, sch_rv_stmt(s, cw)->u.block.writes[0].buf};
  sch_rv_t reindexed[2] = {cx, cw};
  *npads = 0;
  for (int i = 0; i < n; i++) {
    tn_err_t kept = {0};
    if (i >= n - nout) { /* read by the consumer or the copy back of a parameter output */
      if (sch_compute_inline(s, copies[i], &kept) != TN_OK) pads[(*npads)++] = copies[i];
      continue;
    }
    const ir_block_t *copy = &sch_rv_stmt(s, copies[i])->u.block;
    for (int k = 0; k < 2; k++) /* the im2col computed where it is padded */
      if (ir_block_reads(copy, re[k])) inlined[k] = sch_compute_inline(s, reindexed[k], &kept) == TN_OK;
    pads[(*npads)++] = copies[i];
  }
  return TN_OK;
}

static int rewrite(sch_t *s, const tn_target_t *t, const char *block, const igemm_t *ig, int64_t q, tn_err_t *err) {
  sch_rv_t b, cx, cw, co;
  SMP_TRY(sch_get_block(s, block, &b, err));
  SMP_TRY(reindex_read(s, b, ig->x, &cx, err));
  SMP_TRY(reindex_read(s, b, ig->w, &cw, err));
  /* X's producer (a padding) computed in the im2col copy; it stays a kernel
   * of its own (bound by auto-bind) where it cannot be inlined */
  const ir_func_t *f = sch_func(s);
  ir_block_t *prod[2];
  sch_rv_t p;
  tn_err_t kept = {0};
  if (ir_producers(f, &sch_rv_stmt(s, cx)->u.block, prod, 2) == 1 && prod[0]->writes[0].buf->role == IR_BUF_TEMP &&
      sch_get_block(s, prod[0]->name, &p, &kept) == TN_OK)
    (void)sch_compute_inline(s, p, &kept);
  bool param_out = ig->out->role != IR_BUF_TEMP;
  if (param_out) SMP_TRY(sch_reindex(s, b, 0, true, &co, err));
  for (int g = G_K; g >= G_B; g--)
    if (ig->n[g] > 1) SMP_TRY(sch_fuse_block_iters(s, b, ig->first[g], ig->n[g], err));
  if (param_out) {
    SMP_TRY(fuse_out_iters(s, co, ig, err));
    SMP_TRY(smp_bind_copy(s, t, co, err));
  } else {
    fuse_consumer(s, block, ig);
  }
  bool inlined[2] = {false, false};
  sch_rv_t pads[SCH_MAX_RVS_OUT];
  int npads = 0;
  if (ig->ext[G_M] % q || ig->ext[G_N] % q || ig->ext[G_K] % q)
    SMP_TRY(pad(s, b, ig, q, cx, cw, inlined, pads, &npads, err));
  for (int i = 0; i < npads; i++) SMP_TRY(smp_bind_copy(s, t, pads[i], err));
  if (!inlined[0]) SMP_TRY(smp_bind_copy(s, t, cx, err));
  return inlined[1] ? TN_OK : smp_bind_copy(s, t, cw, err);
}

int smp_rule_implicit_gemm(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err) {
  const ir_block_t *b = c->gpu && strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  igemm_t ig;
  int64_t q = 1;
  if (!b || !smp_trivial_binding(sch_func(st->s), b) || !implicit_gemm(b, &ig) || !worth_it(c, b, &ig, &q)) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  smp_state_t plain = {0};
  int rc = smp_fork(c, st, &plain, err);
  if (rc == TN_OK) rc = rewrite(st->s, c->t, block, &ig, q, err);
  if (rc < 0) {
    smp_state_free(st);
    if (plain.s) smp_state_free(&plain);
    return rc;
  }
  char batch[48] = "";
  if (ig.n[G_B]) snprintf(batch, sizeof batch, "B = %lld, ", (long long)ig.ext[G_B]);
  char padded[96] = "";
  if (ig.ext[G_M] % q || ig.ext[G_N] % q || ig.ext[G_K] % q)
    snprintf(padded, sizeof padded, ", padded to %lld x %lld x %lld", (long long)round_up(ig.ext[G_M], q),
             (long long)round_up(ig.ext[G_N], q), (long long)round_up(ig.ext[G_K], q));
  smp_note(st, "implicit-gemm(%s: %s and %s reindexed K-major, %sM = %lld, N = %lld, K = %lld%s)", block, ig.x, ig.w,
           batch, (long long)ig.ext[G_M], (long long)ig.ext[G_N], (long long)ig.ext[G_K], padded);
  smp_states_push(out, *st);
  smp_states_push(out, plain);
  return TN_OK;
}
