/* rules_intrin.c — multi-level tiling with a tensor intrinsic (MetaSchedule's
 * MultiLevelTilingWithIntrin) on CPU targets, and its postprocessor.
 *
 * Any float32 block that accumulates a product of two loads,
 * Out[..] += X[..] * Y[..], is a GEMM once its loops are sorted by the
 * operands whose element offset they move: i (in X and Out), j (in Y and
 * Out, the loop along which Out is contiguous), the reduction's loops k (in
 * X and Y) and the others outside (a batch in all three, further rows or
 * columns).  A matmul has one loop of each; a convolution read in place
 * (NHWC: X[n, y*S + rh*D, x*S + rw*D, c]) has x as i, its output channels as
 * j and its window and channels as a reduction of up to four levels, which
 * the micro-kernel runs whole with the accumulators in registers (ir/intrin.h:
 * each level has its own strides).  Where j moves both operands, unit
 * stride in each (a depthwise convolution: X[.., c] * W[.., c] into
 * Out[.., c]), the block is the elementwise kind (IR_INTRIN_CPU_DW): A is the
 * operand its row loops move, read as vectors along j.  Before that the rule
 *
 *   - splits a grouped convolution's output channels (X read at
 *     co / (CO / G) * (CI / G) + rc) into the group, a batch, and j;
 *   - fuses adjacent reduction loops whose strides compose in both operands
 *     (a stride-1 filter's rw with c: one level of S*C contiguous elements)
 *     and the row loop outside i with i where they compose (a 1x1 conv's y
 *     and x).
 *
 * The nest is tiled as the BLIS loops around a register-blocked micro-kernel:
 *
 *   others.. j0 i0 | k0 | j1 i1 | k-levels (k1 for the split one) i2 j2
 *
 * i and j are split by the intrinsic's register tile (uneven splits get a
 * predicate; the intrinsic's masked path runs the tails), the remaining outer
 * parts and the largest reduction loop (KC) by sampled perfect tiles.  The
 * parallel/vectorize/unroll rule later fuses and parallelises the outer
 * loops.  A second space per intrinsic packs Y (B): each KC x NC panel is
 * copied under k0 into a buffer whose rows are padded to 64 n + 16 floats
 * (storage_align), so that the micro-kernel's KC rows of B fall into
 * different cache sets instead of the one a power-of-two row stride maps
 * them all to; the copy costs 1/MC of the multiply-adds.  A third packs what
 * the tile reads of X (A) the same way.  The block is annotated with the
 * intrinsic and the depth of the nest it replaces; after the reduction is
 * decomposed, rewrite-tensorize blockizes that nest and tensorizes it.  One
 * design space per intrinsic that fits the shape (at most two, in the
 * registry's order of preference), each with B read in place, B packed, A
 * and B packed, and where B is an input declared const (weights) B packed
 * whole, once, outside the kernel (hoist_packing: a packing function of its
 * own), with A in place or packed under k0.  When no register tile fits
 * the shape within MAX_WASTE (small or uneven extents), the least wasteful
 * up to MAX_WASTE_LOOSE get their spaces beside a copy of the state that the
 * plain multi-level tiling rule takes; when none fits at all, that rule
 * alone takes the block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

#define MAX_CHOICES 2
/* The share of padded work (uneven register tiles) an intrinsic may add:
 * the masked tails cost about a full tile each. */
#define MAX_WASTE 0.25
/* The most padded work a tile may add when no intrinsic is within MAX_WASTE
 * (then the plain tiling is offered too). */
#define MAX_WASTE_LOOSE 0.75
/* The micro-kernel's reduction levels (ir/intrin.c: k3 k2 k1 k). */
#define MAX_KLEVELS 4

static double waste(int64_t extent, int tile) {
  return (double)((extent + tile - 1) / tile * tile) / (double)extent - 1.0;
}

/* ---- the GEMM a block computes, by loops ------------------------------------ */

typedef enum role { ROLE_OTHER, ROLE_M, ROLE_N, ROLE_K } role_t;

typedef struct gemm {
  sch_rv_t block;
  const char *a, *b;   /* the operands read along i (broadcast) and along j (vectors) */
  int nl;              /* loops around the block, outermost first */
  sch_rv_t loops[SCH_MAX_RVS_OUT];
  int64_t ext[SCH_MAX_RVS_OUT], ca[SCH_MAX_RVS_OUT], cb[SCH_MAX_RVS_OUT], cc[SCH_MAX_RVS_OUT];
  role_t role[SCH_MAX_RVS_OUT];
  int i, j;            /* loop positions */
  int nk, k[MAX_KLEVELS + 1]; /* the reduction's loops, by A's stride, largest first */
  int iter[SCH_MAX_RVS_OUT];    /* the block iterator bound to the loop alone, or -1 */
  bool bent[SCH_MAX_RVS_OUT];   /* some access is not affine in the loop (it stays outside the call) */
  int bdim, bdims;     /* B's dimension that j moves (not the last: B read transposed) */
  bool dw;             /* depthwise: j moves A too, elementwise (IR_INTRIN_CPU_DW) */
} gemm_t;

/* A float32 load, or the load a select(c, load, 0.0) factor reads where c
 * holds (a transposed convolution's dilated input: the micro-kernel call
 * skips the points where c fails, ir/intrin.c); its condition in *gate. */
static const ir_expr_t *plain_load(const ir_expr_t *e, const ir_expr_t **gate) {
  if (e->kind == IR_E_SELECT && e->u.sel.f->kind == IR_E_FLOAT && e->u.sel.f->u.fval == 0.0 && !*gate) {
    *gate = e->u.sel.cond;
    e = e->u.sel.t;
  }
  return e->kind == IR_E_LOAD && e->dtype == IR_FLOAT32 && e->u.load.buf->dtype == IR_FLOAT32 ? e : NULL;
}

/* The block's product: Out[..] = Out[..] + x * y over float32 loads (one of
 * them through a select, whose condition goes to *gate when gate is not
 * NULL); NULL x otherwise. */
static const ir_stmt_t *mac_gated(const ir_block_t *b, const ir_expr_t **x, const ir_expr_t **y,
                                  const ir_expr_t **gate) {
  const ir_stmt_t *st = b->body;
  const ir_expr_t *acc, *g = NULL;
  *x = *y = NULL;
  if (!st || st->kind != IR_S_STORE || st->u.store.buf->dtype != IR_FLOAT32 || !ir_mac_parts(st, &acc, x, y) ||
      acc->kind != IR_E_LOAD || acc->u.load.buf != st->u.store.buf || !(*x = plain_load(*x, &g)) ||
      !(*y = plain_load(*y, &g)) || (*x)->u.load.buf == (*y)->u.load.buf || (*x)->u.load.buf == st->u.store.buf ||
      (*y)->u.load.buf == st->u.store.buf)
    *x = *y = NULL, g = NULL;
  if (gate) *gate = g;
  return st;
}

static const ir_stmt_t *mac(const ir_block_t *b, const ir_expr_t **x, const ir_expr_t **y) {
  return mac_gated(b, x, y, NULL);
}

/* Whether every use of v in e is floordiv(v, c) with one constant c > 1 (in *c). */
static bool only_div(const ir_expr_t *e, const ir_var_t *v, int64_t *c) {
  int64_t k;
  if (e->kind == IR_E_FLOORDIV && e->u.bin.a->kind == IR_E_VAR && e->u.bin.a->u.var == v &&
      ir_expr_is_const_int(e->u.bin.b, &k) && k > 1)
    return (*c == 0 || *c == k) && (*c = k, true);
  if (e->kind == IR_E_VAR) return e->u.var != v;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (!only_div(kids[i], v, c)) return false;
  return true;
}

/* A grouped convolution: Out's last index a plain iterator v that one
 * operand reads only as v / c (its group's channels), c dividing v's
 * extent: v's loop is split by c, so that the group (outer part) indexes
 * all three and the inner part only the other operand and Out. */
static int split_groups(sch_t *s, sch_rv_t blk, tn_err_t *err) {
  const ir_block_t *b = &sch_rv_stmt(s, blk)->u.block;
  const ir_expr_t *x, *y;
  const ir_stmt_t *st = mac(b, &x, &y);
  if (!x || !smp_trivial_binding(sch_func(s), b)) return TN_OK;
  const ir_expr_t *last = st->u.store.idx[st->u.store.n - 1];
  if (last->kind != IR_E_VAR) return TN_OK;
  int t = 0;
  while (t < b->niters && b->iters[t].var != last->u.var) t++;
  if (t == b->niters) return TN_OK;
  const ir_expr_t *ops[2] = {x, y};
  for (int o = 0; o < 2; o++) {
    int64_t c = 0;
    bool uses = false, only = true;
    for (int d = 0; d < ops[o]->u.load.n && only; d++) {
      uses |= ir_expr_uses_var(ops[o]->u.load.idx[d], last->u.var);
      only = only_div(ops[o]->u.load.idx[d], last->u.var, &c);
    }
    if (!uses || !only || !c || b->iters[t].extent % c || b->iters[t].extent == c) continue;
    sch_rv_t loops[SCH_MAX_RVS_OUT], parts[2];
    int nl = 0;
    SMP_TRY(sch_get_loops(s, blk, loops, &nl, err));
    sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(c)};
    return sch_split(s, loops[t], f, 2, parts, err);
  }
  return TN_OK;
}

/* The loop a block iterator is bound to alone, or < 0. */
static int loop_of(const ir_block_t *b, ir_loop_t *const *il, int nl, const ir_var_t *v) {
  for (int t = 0; t < b->niters; t++)
    if (b->iters[t].var == v)
      for (int l = 0; l < nl; l++)
        if (b->iters[t].binding->kind == IR_E_VAR && b->iters[t].binding->u.var == il[l]->var) return l;
  return -1;
}

/* A transposed convolution reads its input dilated by the stride S:
 * select((y + rh + c) % S == 0 && ..., X[.., (y + rh + c) / S, ..], 0.0).
 * Each such conjunct's output loop and window loop, bound to iterators of
 * their own with extents over S, are split by S (unevenly, with a
 * predicate, where S does not divide them: an odd output or kernel size,
 * whose phases then differ by one row or one tap): the phases (the inner
 * parts) decide the condition alone, so the rule keeps them outside the
 * micro-kernel, whose call is skipped where the condition fails (the
 * zeros), and inside the phases the input is read at yo + rho + const: an
 * ordinary convolution per phase, S^2 times fewer products. */
static int split_phases(sch_t *s, sch_rv_t blk, tn_err_t *err) {
  const ir_block_t *b = &sch_rv_stmt(s, blk)->u.block;
  const ir_expr_t *x, *y, *gate = NULL;
  mac_gated(b, &x, &y, &gate);
  if (!gate) return TN_OK;
  sch_rv_t loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_get_loops(s, blk, loops, &nl, err));
  ir_loop_t *il[SCH_MAX_RVS_OUT];
  for (int l = 0; l < nl; l++) il[l] = &sch_rv_stmt(s, loops[l])->u.loop;
  int split[SCH_MAX_RVS_OUT] = {0}; /* the factor each loop is split by */
  const ir_expr_t *todo[16];
  int nt = 0;
  todo[nt++] = gate;
  while (nt > 0) {
    const ir_expr_t *e = todo[--nt];
    if (e->kind == IR_E_AND && nt + 2 <= 16) {
      todo[nt++] = e->u.bin.a, todo[nt++] = e->u.bin.b;
      continue;
    }
    int64_t c, zero;
    const ir_expr_t *m = e->kind == IR_E_EQ ? e->u.bin.a : NULL;
    if (!m || m->kind != IR_E_FLOORMOD || !ir_expr_is_const_int(m->u.bin.b, &c) || c < 2 ||
        !ir_expr_is_const_int(e->u.bin.b, &zero) || zero != 0)
      continue;
    ir_affine_t a = {0};
    if (ir_affine_of(m->u.bin.a, 0, &a) && a.n == 2 && a.terms[0].coef == 1 && a.terms[1].coef == 1) {
      int l0 = loop_of(b, il, nl, a.terms[0].var), l1 = loop_of(b, il, nl, a.terms[1].var);
      bool ok = l0 >= 0 && l1 >= 0 && !split[l0] && !split[l1];
      for (int q = 0; q < 2 && ok; q++) {
        int l = q ? l1 : l0;
        ok = il[l]->extent > c;
      }
      if (ok) split[l0] = split[l1] = (int)c;
    }
    ir_affine_free(&a);
  }
  for (int l = 0; l < nl; l++) {
    if (!split[l]) continue;
    sch_rv_t parts[2];
    sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(split[l])};
    SMP_TRY(sch_split(s, loops[l], f, 2, parts, err));
  }
  return TN_OK;
}

/* Reads the loops' roles.  1 (with *why) when the block is not such a GEMM. */
static int analyze(sch_t *s, const char *block, gemm_t *g, const char **why, tn_err_t *err) {
  memset(g, 0, sizeof *g);
  SMP_TRY(sch_get_block(s, block, &g->block, err));
  const ir_block_t *b = &sch_rv_stmt(s, g->block)->u.block;
  const ir_expr_t *x, *y;
  const ir_stmt_t *st = mac(b, &x, &y);
  if (!x) return *why = "not a float32 sum of products of two loads", 1;
  SMP_TRY(sch_get_loops(s, g->block, g->loops, &g->nl, err));
  ir_loop_t *il[SCH_MAX_RVS_OUT];
  for (int l = 0; l < g->nl; l++) {
    il[l] = &sch_rv_stmt(s, g->loops[l])->u.loop, g->ext[l] = il[l]->extent;
    g->iter[l] = -1;
    for (int t = 0; t < b->niters; t++)
      if (b->iters[t].binding->kind == IR_E_VAR && b->iters[t].binding->u.var == il[l]->var) g->iter[l] = t;
  }
  /* a loop some access is not affine in (a transposed convolution's phase)
   * stays outside the micro-kernel: its role is OTHER */
  int64_t cx[SCH_MAX_RVS_OUT];
  bool aff[3][SCH_MAX_RVS_OUT];
  smp_offset_coefs(b, x->u.load.buf, x->u.load.idx, il, g->nl, cx, aff[0]);
  smp_offset_coefs(b, y->u.load.buf, y->u.load.idx, il, g->nl, g->cb, aff[1]);
  smp_offset_coefs(b, st->u.store.buf, st->u.store.idx, il, g->nl, g->cc, aff[2]);
  for (int l = 0; l < g->nl; l++) g->bent[l] = !aff[0][l] || !aff[1][l] || !aff[2][l];
  g->j = -1;
  for (int l = 0; l < g->nl; l++)
    if (g->cc[l] == 1 && g->ext[l] > 1 && !g->bent[l]) g->j = l;
  if (g->j < 0) return *why = "the output is not contiguous along any loop", 1;
  /* which of x and y is B: the one j moves alone; for the depthwise kind
   * (j moves both) the one no row loop moves */
  g->dw = cx[g->j] && g->cb[g->j];
  bool x_is_b = cx[g->j] != 0;
  if (g->dw) {
    if (cx[g->j] != 1 || g->cb[g->j] != 1) return *why = "the operands are not contiguous along the output's rows", 1;
    bool rows_x = false, rows_y = false;
    for (int l = 0; l < g->nl; l++) {
      rows_x |= l != g->j && g->ext[l] > 1 && cx[l] && g->cc[l] && !g->cb[l];
      rows_y |= l != g->j && g->ext[l] > 1 && g->cb[l] && g->cc[l] && !cx[l];
    }
    if (rows_x == rows_y) return *why = "no operand alone is read along the output's columns", 1;
    x_is_b = rows_y;
  } else if (!cx[g->j] && !g->cb[g->j]) {
    return *why = "no operand is read along the output's rows", 1;
  }
  if (x_is_b) {
    const ir_expr_t *t = x;
    x = y, y = t;
    memcpy(g->ca, g->cb, sizeof g->ca);
    memcpy(g->cb, cx, sizeof g->cb);
  } else {
    memcpy(g->ca, cx, sizeof g->ca);
  }
  g->a = x->u.load.buf->name, g->b = y->u.load.buf->name;
  g->i = -1;
  for (int l = 0; l < g->nl; l++) {
    bool a = g->ca[l], bb = g->cb[l], c = g->cc[l];
    if (l == g->j) g->role[l] = ROLE_N;
    else if (g->ext[l] == 1 || g->bent[l] || (a && bb && c)) g->role[l] = ROLE_OTHER;
    else if (a && c && !bb) g->role[l] = ROLE_M;
    else if (bb && c && !a) g->role[l] = ROLE_N;
    else if (a && bb && !c && smp_loop_iter_type(il[l]) == SMP_REDUCE) g->role[l] = ROLE_K;
    else return *why = "a loop moves one access alone", 1;
    if (g->role[l] == ROLE_M && (g->i < 0 || g->ext[l] >= g->ext[g->i])) g->i = l;
    if (g->role[l] == ROLE_K) {
      if (g->nk == MAX_KLEVELS + 1) return *why = "more reduction loops than the micro-kernel's levels", 1;
      int q = g->nk++;
      while (q > 0 && llabs(g->ca[g->k[q - 1]]) < llabs(g->ca[l])) g->k[q] = g->k[q - 1], q--;
      g->k[q] = l;
    }
  }
  if (g->i < 0 || !g->nk) return *why = g->i < 0 ? "no loop runs along the output's columns" : "no reduction", 1;
  g->bdims = y->u.load.n;
  g->bdim = -1;
  for (int d = 0; d < y->u.load.n; d++) {
    int64_t c = 0;
    if (smp_access_coef(b, y->u.load.idx[d], il[g->j]->var, &c) && c) g->bdim = g->bdim < 0 ? d : -2;
  }
  if (g->bdim < 0) return *why = "j moves more than one index of B", 1;
  return TN_OK;
}

static bool transposed(const gemm_t *g) { return g->bdim != g->bdims - 1; }

/* Whether loop `outer` directly around `inner` strides over what inner
 * covers, in every access, and the two are bound to consecutive iterators
 * of the block: fused (FuseBlockIters), they become one iterator and one
 * loop with affine offsets. */
static bool composes(const gemm_t *g, int outer, int inner) {
  const int64_t *cs[3] = {g->ca, g->cb, g->cc};
  if (inner != outer + 1 || g->iter[outer] < 0 || g->iter[inner] != g->iter[outer] + 1) return false;
  for (int p = 0; p < 3; p++)
    if (cs[p][outer] != g->ext[inner] * cs[p][inner]) return false;
  return true;
}

/* The block split into groups, its reduction loops in level order with
 * the composing ones fused, and the row loop outside i fused with it where
 * it composes; g is read again after each change.  The fusions are of
 * block iterators, not only loops: the fused iterator is bound to the
 * fused loop alone, so that the tiles split it as any other (the operands'
 * offsets stay affine: (x + f / C) * C + f % C = x * C + f).  1 when not
 * a GEMM. */
static int canonicalize(sch_t *s, const char *block, gemm_t *g, const char **why, tn_err_t *err) {
  sch_rv_t blk;
  SMP_TRY(sch_get_block(s, block, &blk, err));
  SMP_TRY(split_groups(s, blk, err));
  SMP_TRY(split_phases(s, blk, err));
  int rc = analyze(s, block, g, why, err);
  if (rc) return rc;
  if (g->nk > 1) { /* reduction loops nested in level order */
    sch_rv_t order[MAX_KLEVELS + 1];
    for (int q = 0; q < g->nk; q++) order[q] = g->loops[g->k[q]];
    SMP_TRY(sch_reorder(s, order, g->nk, err));
    if ((rc = analyze(s, block, g, why, err))) return rc;
  }
  for (bool again = true; again;) {
    int first = -1;
    for (int q = 0; q + 1 < g->nk && first < 0; q++)
      if (composes(g, g->k[q], g->k[q + 1])) first = g->iter[g->k[q]];
    int p = g->i - 1;
    if (first < 0 && p >= 0 && g->role[p] == ROLE_M && composes(g, p, g->i)) first = g->iter[p];
    if (!(again = first >= 0)) break;
    SMP_TRY(sch_fuse_block_iters(s, g->block, first, 2, err));
    if ((rc = analyze(s, block, g, why, err))) return rc;
  }
  if (g->nk > MAX_KLEVELS) return *why = "more reduction loops than the micro-kernel's levels", 1;
  return TN_OK;
}

/* Intrinsics of the kind for an m x n output, best first. */
/* The intrinsics of the kind this CPU has whose register tile fits m x n with
 * at most MAX_WASTE padded work, in the registry's order (at most
 * MAX_CHOICES).  When none does (a small or uneven m or n: a strided conv's
 * 7 or 14 output columns, 36 or 72 channels), the least wasteful ones up to
 * MAX_WASTE_LOOSE, and *loose says so: their masked tails may cost more than
 * the micro-kernel gains, so the plain tiling is offered beside them and the
 * search measures both. */
static int choose(int64_t m, int64_t n, ir_intrin_kind_t kind, const ir_intrin_t **out, bool *loose) {
  int k = 0;
  double ws[MAX_CHOICES];
  *loose = false;
  for (int pass = 0; pass < 2 && k == 0; pass++) {
    for (int i = 0; i < ir_intrin_count(); i++) {
      const ir_intrin_t *in = ir_intrin_at(i);
      if (!in->mr || in->kind != kind || !ir_intrin_host_supports(in)) continue;
      double w = (1.0 + waste(m, in->mr)) * (1.0 + waste(n, in->nr)) - 1.0;
      if (w > (pass ? MAX_WASTE_LOOSE : MAX_WASTE)) continue;
      if (!pass) { /* registry order: the first that fit */
        if (k < MAX_CHOICES) out[k++] = in;
        continue;
      }
      int q = k < MAX_CHOICES ? k++ : MAX_CHOICES; /* the least waste first, ties in registry order */
      while (q > 0 && ws[q - 1] > w) {
        if (q < MAX_CHOICES) out[q] = out[q - 1], ws[q] = ws[q - 1];
        q--;
      }
      if (q < MAX_CHOICES) out[q] = in, ws[q] = w;
    }
    *loose = pass == 1 && k > 0;
  }
  return k;
}

static int split_outer(sch_t *s, sch_rv_t loop, int64_t tile, int max_inner, sch_rv_t *outer, sch_rv_t *mid,
                       sch_rv_t *inner, tn_err_t *err) {
  sch_rv_t parts[2], fac[2];
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(tile)};
  SMP_TRY(sch_split(s, loop, f, 2, parts, err));
  *inner = parts[1];
  SMP_TRY(sch_sample_perfect_tile(s, parts[0], 2, max_inner, fac, err));
  sch_arg_t g[2] = {sch_arg_rv(fac[0]), sch_arg_rv(fac[1])};
  sch_rv_t p2[2];
  SMP_TRY(sch_split(s, parts[0], g, 2, p2, err));
  *outer = p2[0];
  *mid = p2[1];
  return TN_OK;
}

/* What a space copies under k0: nothing, B, A and B; for a constant B
 * (weights), B packed once outside the kernel (hoisted), and A too under k0. */
enum { PACK_NONE, PACK_B, PACK_AB, PACK_B_HOISTED, PACK_AB_HOISTED, PACK__COUNT };

static bool packs_b(int pack) { return pack != PACK_NONE; }
static bool packs_a(int pack) { return pack == PACK_AB || pack == PACK_AB_HOISTED; }
static bool hoists_b(int pack) { return pack >= PACK_B_HOISTED; }

/* Whether the block reads `name` from an input declared const. */
static bool reads_const(const ir_block_t *b, const char *name) {
  for (int q = 0; q < b->nreads; q++)
    if (!strcmp(b->reads[q].buf->name, name)) return b->reads[q].buf->is_const;
  return false;
}

/* Whether an iterator indexes both of buf's last two dimensions in b (a
 * fused window and channel loop, x * S + f / C and f % C): padded rows
 * would break the sum that keeps its offset affine. */
static bool spans_rows(const ir_block_t *b, const ir_buffer_t *buf) {
  const ir_expr_t *x, *y;
  mac(b, &x, &y);
  const ir_expr_t *ld = x && x->u.load.buf == buf ? x : y && y->u.load.buf == buf ? y : NULL;
  if (!ld || ld->u.load.n < 2) return false;
  for (int t = 0; t < b->niters; t++)
    if (ir_expr_uses_var(ld->u.load.idx[ld->u.load.n - 1], b->iters[t].var) &&
        ir_expr_uses_var(ld->u.load.idx[ld->u.load.n - 2], b->iters[t].var))
      return true;
  return false;
}

/* Copies the block's input `name` under loop `at` into a buffer whose rows
 * are padded to 64 n + 16 floats (unless that breaks a fused iterator's
 * offset: spans_rows); with last >= 0, that dimension is moved
 * last (a transposed B's j).  hoist: the copy stays at the root, whole, and
 * becomes a packing function of its own (the input is const). */
static int pack_operand(sch_t *s, sch_rv_t b, const char *block, const char *name, sch_rv_t at, bool hoist, int last,
                        tn_err_t *err) {
  const ir_block_t *cur = &sch_rv_stmt(s, b)->u.block;
  int index = smp_read_index(cur, name);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" no longer reads %s", block, name);
  int ndim = cur->reads[index].buf->ndim;
  bool align = ndim >= 2 && last < 0 ? !spans_rows(cur, cur->reads[index].buf) : ndim >= 2;
  sch_rv_t cache;
  SMP_TRY(sch_cache_read(s, b, index, "local", &cache, err));
  if (!hoist) SMP_TRY(sch_compute_at(s, cache, at, true, err));
  if (last >= 0) {
    int perm[IR_MAX_DIMS], np = 0;
    for (int d = 0; d < ndim; d++)
      if (d != last) perm[np++] = d;
    perm[np++] = last;
    SMP_TRY(sch_transform_layout(s, cache, 0, true, perm, np, err));
  }
  if (align) SMP_TRY(sch_storage_align(s, cache, 0, ndim - 2, 64, 16, err));
  return hoist ? sch_hoist_packing(s, cache, err) : TN_OK;
}

static int tile_for(smp_ctx_t *c, smp_state_t *st, const char *block, const ir_intrin_t *in, int pack,
                    smp_states_t *out, tn_err_t *err) {
  sch_t *s = st->s;
  gemm_t g;
  const char *why = NULL;
  int rc = canonicalize(s, block, &g, &why, err);
  if (rc) return rc < 0 ? rc : tn_err_set(err, TN_EINVAL, "block \"%s\" is no longer a GEMM: %s", block, why);
  sch_rv_t b = g.block;
  bool red[SCH_MAX_RVS_OUT]; /* reduction loops (read before the splits) */
  for (int l = 0; l < g.nl; l++) red[l] = smp_loop_iter_type(&sch_rv_stmt(s, g.loops[l])->u.loop) != SMP_DATA_PAR;
  SMP_TRY(sch_annotate(s, b, SMP_ANN_TILING, sch_arg_str("intrin"), err));
  SMP_TRY(sch_annotate(s, b, SMP_ANN_AUTO_TENSORIZE, sch_arg_str(in->name), err));
  SMP_TRY(sch_annotate(s, b, IR_ANN_TENSORIZE_LOOPS, sch_arg_int(2 + g.nk), err));
  /* KC: the largest reduction loop bound to an iterator of its own (the
   * channels of a convolution; a loop fused another way, split, would bind
   * its iterators across the tile's edge); none: the whole reduction in
   * each call */
  int ks = -1;
  for (int q = 0; q < g.nk; q++)
    if (g.iter[g.k[q]] >= 0 && (ks < 0 || g.ext[g.k[q]] > g.ext[g.k[ks]])) ks = q;
  sch_rv_t i0, i1, i2, j0, j1, j2, kf[2], k[2];
  SMP_TRY(split_outer(s, g.loops[g.i], in->mr, 64, &i0, &i1, &i2, err));
  SMP_TRY(split_outer(s, g.loops[g.j], in->nr, 64, &j0, &j1, &j2, err));
  if (ks >= 0) {
    SMP_TRY(sch_sample_perfect_tile(s, g.loops[g.k[ks]], 2, 512, kf, err));
    sch_arg_t kfa[2] = {sch_arg_rv(kf[0]), sch_arg_rv(kf[1])};
    SMP_TRY(sch_split(s, g.loops[g.k[ks]], kfa, 2, k, err));
  } else {
    k[0] = i0; /* where the packs go */
  }
  /* batch, further rows and columns, phases outside the tiles; the phases
   * of the reduction inside them (the parallel loop fuses what leads) */
  sch_rv_t order[SCH_MAX_RVS_OUT];
  int n = 0;
  for (int l = 0; l < g.nl; l++)
    if (l != g.i && l != g.j && g.role[l] != ROLE_K && !red[l]) order[n++] = g.loops[l];
  order[n++] = j0;
  order[n++] = i0;
  for (int l = 0; l < g.nl; l++)
    if (g.role[l] == ROLE_OTHER && red[l]) order[n++] = g.loops[l];
  if (ks >= 0) order[n++] = k[0];
  order[n++] = j1;
  order[n++] = i1;
  for (int q = 0; q < g.nk; q++) order[n++] = q == ks ? k[1] : g.loops[g.k[q]];
  order[n++] = i2;
  order[n++] = j2;
  SMP_TRY(sch_reorder(s, order, n, err));
  smp_note(st, "multi-level-tiling-with-intrinsic(%s: %s", block, in->name);
  if (g.nk > 1) smp_note(st, "%d reduction levels", g.nk);
  if (packs_b(pack))
    SMP_TRY(pack_operand(s, b, block, g.b, k[0], hoists_b(pack), transposed(&g) ? g.bdim : -1, err));
  if (packs_a(pack)) SMP_TRY(pack_operand(s, b, block, g.a, k[0], false, -1, err));
  if (hoists_b(pack))
    smp_note(st, "B packed%s once, outside the kernel (hoisted)%s", transposed(&g) ? " (transposed)" : "",
             packs_a(pack) ? ", A packed under k0" : "");
  else if (packs_b(pack))
    smp_note(st, "%s packed%s under k0", packs_a(pack) ? "A and B" : "B", transposed(&g) ? " (B transposed)" : "");
  /* an elementwise consumer (bias, activation) runs per j0 i0 tile, after its reduction */
  const ir_func_t *f = sch_func(s);
  ir_block_t *cons[2];
  if (ir_consumers(f, &sch_rv_stmt(s, b)->u.block, cons, 2) == 1 && smp_is_write_cache_like(cons[0])) {
    smp_state_t keep;
    SMP_TRY(smp_fork(c, st, &keep, err));
    sch_rv_t cb;
    char name[128];
    snprintf(name, sizeof name, "%s", cons[0]->name);
    rc = sch_get_block(s, name, &cb, err);
    if (rc == TN_OK) rc = sch_reverse_compute_at(s, cb, i0, true, err);
    if (rc < 0) {
      smp_state_free(&keep);
      return rc;
    }
    smp_note(st, "consumer %s at the tile)", name);
    smp_note(&keep, "consumer %s not moved)", name);
    smp_states_push(out, keep);
  } else {
    tn_buf_put(&st->desc, ")");
  }
  smp_states_push(out, *st);
  return TN_OK;
}

/* What the rule needs to know of the GEMM before tiling it. */
typedef struct shape {
  int64_t m, n;  /* the extents of i and j */
  bool dw;       /* the elementwise (depthwise) kind */
  bool transposed, b_const; /* B read transposed; B an input declared const */
} shape_t;

/* The GEMM's shape, from a copy of the state made into it (canonicalize
 * changes the loops; the copy, and the names in its gemm_t, go with it):
 * 1 when the block is no such GEMM. */
static int probe(smp_ctx_t *c, const smp_state_t *st, const char *block, shape_t *sh, tn_err_t *err) {
  smp_state_t p;
  SMP_TRY(smp_fork(c, st, &p, err));
  const char *why = NULL;
  gemm_t g;
  int rc = canonicalize(p.s, block, &g, &why, err);
  if (rc == TN_OK)
    *sh = (shape_t){g.ext[g.i], g.ext[g.j], g.dw, transposed(&g),
                    reads_const(&sch_rv_stmt(p.s, g.block)->u.block, g.b)};
  smp_state_free(&p);
  return rc;
}

int smp_rule_multi_level_tiling_intrin(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err) {
  const ir_block_t *b = c->gpu || !strcmp(block, "root") ? NULL : smp_block(sch_func(st->s), block);
  shape_t sh;
  const ir_intrin_t *choices[MAX_CHOICES];
  int n = 0;
  bool loose = false;
  if (b && smp_needs_multi_level_tiling(sch_func(st->s), b)) {
    int rc = probe(c, st, block, &sh, err);
    if (rc < 0) return rc;
    if (rc == 0) n = choose(sh.m, sh.n, sh.dw ? IR_INTRIN_CPU_DW : IR_INTRIN_CPU_MM, choices, &loose);
  }
  if (n == 0) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  if (loose) { /* the plain tiling's space beside the padded micro-kernels' */
    smp_state_t plain;
    SMP_TRY(smp_fork(c, st, &plain, err));
    smp_states_push(out, plain);
  }
  /* per intrinsic: B in place (not when transposed: the intrinsic reads rows
   * of B), B packed, A and B packed (more than 8 rows of A a power of two
   * apart share one set of an 8-way cache); for a const B the same two with
   * B packed once, outside the kernel */
  int first = sh.transposed ? PACK_B : PACK_NONE, per = PACK__COUNT;
  int end = sh.b_const ? PACK__COUNT : PACK_B_HOISTED;
  int total = (n - 1) * per + end;
  for (int i = 0; i < total; i++) {
    if (i % per < first || i % per >= end) continue;
    bool last = i == total - 1;
    smp_state_t fork, *ns = st;
    if (!last) {
      SMP_TRY(smp_fork(c, st, &fork, err));
      ns = &fork;
    }
    int rc = tile_for(c, ns, block, choices[i / per], i % per, out, err);
    if (rc < 0) {
      smp_state_free(ns);
      if (!last) smp_state_free(st);
      return rc;
    }
  }
  return TN_OK;
}

/* ---- rewrite-tensorize ----------------------------------------------------------- */

/* Tensorizes the k1 i2 j2 nest of every update block a rule annotated (the
 * reduction is decomposed by now: the init block keeps the annotation, and
 * loses it here), and for tensor cores the init's tile (a fill) and the
 * accumulator's write-back (a store). */
int smp_pp_rewrite_tensorize(sch_t *s, const tn_target_t *t, tn_err_t *err) {
  (void)t;
  for (bool again = true; again;) {
    again = false;
    ir_block_t **all;
    int n = ir_blocks(sch_func(s), &all);
    char *name = NULL, *intrin = NULL;
    bool update = false;
    int depth_ann = 3; /* a matmul's k i j: traces from before the annotation */
    for (int i = 0; i < n && !name; i++) {
      const ir_annot_t *a = ir_annot_get(all[i]->annots, all[i]->nannots, SMP_ANN_AUTO_TENSORIZE);
      if (!a || !a->is_str) continue;
      name = tn_xstrdup(all[i]->name);
      intrin = tn_xstrdup(a->sval);
      const ir_annot_t *d = ir_annot_get(all[i]->annots, all[i]->nannots, IR_ANN_TENSORIZE_LOOPS);
      if (d && !d->is_str && d->ival >= 3 && d->ival <= 2 + MAX_KLEVELS) depth_ann = (int)d->ival;
      /* the update reads the buffer it writes; the init only writes it */
      update = all[i]->nwrites == 1 && ir_block_reads(all[i], all[i]->writes[0].buf);
    }
    free(all);
    if (!name) break;
    /* what the block's innermost loops become: the update's tile (i j k)
     * the intrinsic; a tensor-core init's tile (i j) a fill, a store's (i j)
     * the store; a CPU micro-kernel's init stays as it is */
    const ir_intrin_t *in = ir_intrin_find(intrin);
    const char *call = NULL;
    int depth = 0;
    if (update) call = intrin, depth = depth_ann;
    else if (in && in->kind == IR_INTRIN_WMMA_MMA) call = "wmma_fill_f32_16x16", depth = 2;
    else if (in && in->kind == IR_INTRIN_WMMA_STORE) call = intrin, depth = 2;
    sch_rv_t b, loops[SCH_MAX_RVS_OUT];
    int nl = 0, rc = sch_get_block(s, name, &b, err);
    if (rc == TN_OK) rc = sch_unannotate(s, b, SMP_ANN_AUTO_TENSORIZE, err);
    if (rc == TN_OK && ir_annot_get(sch_rv_stmt(s, b)->u.block.annots, sch_rv_stmt(s, b)->u.block.nannots,
                                    IR_ANN_TENSORIZE_LOOPS))
      rc = sch_unannotate(s, b, IR_ANN_TENSORIZE_LOOPS, err);
    if (rc == TN_OK && call) rc = sch_get_loops(s, b, loops, &nl, err);
    if (rc == TN_OK && call && nl < depth)
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\" has %d loops; the intrinsic's tile needs %d", name, nl, depth);
    if (rc == TN_OK && call) rc = sch_tensorize(s, loops[nl - depth], call, err);
    free(name);
    free(intrin);
    if (rc < 0) return rc;
    again = true;
  }
  return TN_OK;
}
