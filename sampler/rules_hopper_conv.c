/* rules_hopper_conv.c — a convolution made a GEMM for the warpgroup-MMA
 * tiling on Hopper targets (rules_hopper.c), as MetaSchedule's tensor-core
 * rules make one with ReIndex and TransformBlockLayout.  A block
 * Out[m.., n..] += X[f(m.., k..)] * W[g(n.., k..)] with float16 or
 * bfloat16 operands accumulated in float32 whose spatial iterators split
 * into those only X reads (M: a conv2d's n, y, x) and those only W reads
 * (N: its output channels), each group consecutive, M before N, then its
 * reduction iterators (K: r, s, c), is forked into a space where
 *
 *   - X and W are reindexed (the im2col: X_reindex[n, y, x, r, s, c] filled
 *     by a kernel of its own, the operand's producer — a padding — inlined
 *     into it; W_reindex[f, r, s, c]), so both are K-major;
 *   - the groups are fused (FuseBlockIters): the block is Out[m, n] +=
 *     X_reindex[m, k] * W_reindex[n, k], and the multi-level-tiling-hopper
 *     rule that runs next takes it as it takes a matmul;
 *   - the output, a temporary, is [M, N] with its elementwise consumer's M
 *     iterators fused too (that rule then fuses the consumer into the GEMM's
 *     kernel); a parameter output is reindexed and copied back by a kernel.
 *
 * The block left as it was is the other space.  M, N and K must be
 * multiples of 64, as the Hopper tiling needs; the copy kernels cost a read
 * and a write of each operand (R*S times X's size for X_reindex) per call. */
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

/* The block's GEMM: iterators first .. first + n - 1 of each group, the
 * operands' names and the output. */
typedef struct igemm {
  int first[3], n[3]; /* M, N, K */
  int64_t ext[3];
  const char *x, *w;
  const ir_buffer_t *out;
} igemm_t;

static bool uses(const ir_expr_t *load, const ir_var_t *v) {
  for (int d = 0; d < load->u.load.n; d++)
    if (ir_expr_uses_var(load->u.load.idx[d], v)) return true;
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

/* Whether b is such a GEMM that is not a plain one already (ir_hopper_gemm_shape). */
static bool implicit_gemm(const ir_block_t *b, igemm_t *ig) {
  ir_hopper_shape_t sh;
  const char *why;
  const ir_stmt_t *st = b->body;
  memset(ig, 0, sizeof *ig);
  const ir_expr_t *acc, *x, *w;
  if (!ir_mac_parts(st, &acc, &x, &w) || !b->init || st->u.store.buf->dtype != IR_FLOAT32 ||
      ir_hopper_gemm_shape(b, &sh, &why))
    return false;
  if (acc->kind != IR_E_LOAD || acc->u.load.buf != st->u.store.buf || x->kind != IR_E_LOAD || w->kind != IR_E_LOAD ||
      x->u.load.buf == w->u.load.buf ||
      x->u.load.buf->dtype != w->u.load.buf->dtype ||
      (x->u.load.buf->dtype != IR_FLOAT16 && x->u.load.buf->dtype != IR_BFLOAT16))
    return false;
  int nout = 0;
  for (int d = 0; d < st->u.store.n; d++) nout += st->u.store.idx[d]->kind == IR_E_VAR;
  if (nout != st->u.store.n) return false;
  int last = 0;
  for (int t = 0; t < b->niters; t++) {
    const ir_iter_t *it = &b->iters[t];
    bool in_x = uses(x, it->var), in_w = uses(w, it->var);
    int g = it->kind == IR_ITER_REDUCE ? (in_x && in_w ? 2 : -1) : in_x == in_w ? -1 : in_x ? 0 : 1;
    if (t == 0 && g == 1) { /* the operand read along the first iterators is X */
      const ir_expr_t *tmp = x;
      x = w, w = tmp, g = 0;
    }
    if (g < 0 || !add_to_group(ig, g, t, &last, it->extent)) return false;
  }
  /* the output at [M.., N..], in the iterators' order */
  if (!ig->n[0] || !ig->n[1] || !ig->n[2] || st->u.store.n != ig->n[0] + ig->n[1]) return false;
  for (int d = 0; d < st->u.store.n; d++)
    if (st->u.store.idx[d]->u.var != b->iters[d].var) return false;
  ig->x = x->u.load.buf->name, ig->w = w->u.load.buf->name, ig->out = st->u.store.buf;
  return ig->ext[0] % 64 == 0 && ig->ext[1] % 64 == 0 && ig->ext[2] % IR_HOPPER_K_TILE == 0;
}

static int reindex_read(sch_t *s, sch_rv_t b, const char *name, sch_rv_t *copy, tn_err_t *err) {
  int index = smp_read_index(&sch_rv_stmt(s, b)->u.block, name);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "the block does not read %s", name);
  return sch_reindex(s, b, index, false, copy, err);
}

/* The single consumer of the output temporary, when it is elementwise over
 * it: its first (M) iterators fused as the GEMM's were, so the Hopper tiling
 * can move it into the GEMM's kernel.  Where it cannot be (loops already
 * split) it stays as it is, a kernel of its own. */
static void fuse_consumer(sch_t *s, const char *block, const igemm_t *ig) {
  const ir_func_t *f = sch_func(s);
  ir_block_t *cons[2];
  if (ig->out->role != IR_BUF_TEMP || ir_consumers(f, smp_block(f, block), cons, 2) != 1 ||
      cons[0]->niters != ig->n[0] + ig->n[1])
    return;
  for (int t = 0; t < cons[0]->niters; t++)
    if (cons[0]->iters[t].kind != IR_ITER_SPATIAL || cons[0]->iters[t].extent != cons[0]->writes[0].buf->shape[t])
      return;
  sch_rv_t c;
  tn_err_t kept = {0};
  if (sch_get_block(s, cons[0]->name, &c, &kept) == TN_OK) (void)sch_fuse_block_iters(s, c, 0, ig->n[0], &kept);
}

static int rewrite(sch_t *s, const tn_target_t *t, const char *block, const igemm_t *ig, tn_err_t *err) {
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
  for (int g = 2; g >= 0; g--)
    if (ig->n[g] > 1) SMP_TRY(sch_fuse_block_iters(s, b, ig->first[g], ig->n[g], err));
  if (param_out) {
    SMP_TRY(sch_fuse_block_iters(s, co, 0, ig->n[0], err)); /* the copy back reads the GEMM's [M, N] plainly */
    SMP_TRY(smp_bind_copy(s, t, co, err));
  } else {
    fuse_consumer(s, block, ig);
  }
  SMP_TRY(smp_bind_copy(s, t, cx, err));
  return smp_bind_copy(s, t, cw, err);
}

int smp_rule_hopper_implicit_gemm(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                  tn_err_t *err) {
  const ir_block_t *b = c->gpu && strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  igemm_t ig;
  if (!b || !tn_target_is_hopper(c->t) || !smp_trivial_binding(sch_func(st->s), b) || !implicit_gemm(b, &ig)) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  smp_state_t plain = {0};
  int rc = smp_fork(c, st, &plain, err);
  if (rc == TN_OK) rc = rewrite(st->s, c->t, block, &ig, err);
  if (rc < 0) {
    smp_state_free(st);
    if (plain.s) smp_state_free(&plain);
    return rc;
  }
  smp_note(st, "hopper-implicit-gemm(%s: %s and %s reindexed K-major, M = %lld, N = %lld, K = %lld)", block, ig.x,
           ig.w, (long long)ig.ext[0], (long long)ig.ext[1], (long long)ig.ext[2]);
  smp_states_push(out, *st);
  smp_states_push(out, plain);
  return TN_OK;
}
