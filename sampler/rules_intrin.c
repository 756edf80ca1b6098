/* rules_intrin.c — multi-level tiling with a tensor intrinsic (MetaSchedule's
 * MultiLevelTilingWithIntrin) on CPU targets, and its postprocessor.
 *
 * A float32 matmul-like block C[.., i, j] += A[.., i, k] * B[.., k, j] is
 * tiled as the BLIS loops around a register-blocked micro-kernel:
 *
 *   batch.. j0 i0 | k0 | j1 i1 | k1 i2 j2        (i2 = MR, j2 = NR, k1 = KC)
 *
 * i and j are split by the intrinsic's register tile (uneven splits get a
 * predicate; the intrinsic's masked path runs the tails), the remaining outer
 * parts and k by sampled perfect tiles.  The parallel/vectorize/unroll rule
 * later fuses and parallelises j0 i0.  A second space per intrinsic packs B:
 * each KC x NC panel is copied under k0 into a buffer whose rows are padded
 * to 64 n + 16 floats (storage_align), so that the micro-kernel's KC rows of
 * B fall into different cache sets instead of the one a power-of-two row
 * stride maps them all to; the copy costs 1/MC of the multiply-adds.  A
 * third packs the MC x KC block of A the same way (its MR rows, read at once,
 * otherwise share one cache set when K is a power of two).  The block is annotated with the
 * intrinsic; after the reduction is decomposed, rewrite-tensorize blockizes
 * the k1 i2 j2 nest and tensorizes it.  One design space per intrinsic that
 * fits the shape (at most two, in the registry's order of preference), each
 * with B read in place, B packed, A and B packed, and where B is an input
 * declared const (weights) B packed whole, once, outside the kernel
 * (hoist_packing: a packing function of its own), with A in place or
 * packed under k0; when none fits, the plain multi-level tiling rule takes
 * the block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "smp_internal.h"

#define MAX_CHOICES 2
/* The share of padded work (uneven register tiles) an intrinsic may add:
 * the masked tails cost about a full tile each. */
#define MAX_WASTE 0.25

static double waste(int64_t extent, int tile) {
  return (double)((extent + tile - 1) / tile * tile) / (double)extent - 1.0;
}

/* Intrinsics for an m x n output, best first. */
static int choose(const tn_target_t *t, const smp_roles_t *r, const ir_intrin_t **out) {
  (void)t;
  int n = 0;
  for (int i = 0; i < ir_intrin_count() && n < MAX_CHOICES; i++) {
    const ir_intrin_t *in = ir_intrin_at(i);
    if (!in->mr || !ir_intrin_host_supports(in)) continue;
    double w = (1.0 + waste(r->m, in->mr)) * (1.0 + waste(r->n, in->nr)) - 1.0;
    if (w <= MAX_WASTE) out[n++] = in;
  }
  return n;
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

static bool transposed(const smp_roles_t *r) { return r->jdim != r->bdims - 1; }

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

/* Copies the block's input `name` under loop `at` into a buffer whose rows
 * are padded to 64 n + 16 floats; with last >= 0, that dimension is moved
 * last (a transposed B's j).  hoist: the copy stays at the root, whole, and
 * becomes a packing function of its own (the input is const). */
static int pack_operand(sch_t *s, sch_rv_t b, const char *block, const char *name, sch_rv_t at, bool hoist, int last,
                        tn_err_t *err) {
  const ir_block_t *cur = &sch_rv_stmt(s, b)->u.block;
  int index = smp_read_index(cur, name);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" no longer reads %s", block, name);
  int ndim = cur->reads[index].buf->ndim;
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
  SMP_TRY(sch_storage_align(s, cache, 0, ndim - 2, 64, 16, err));
  return hoist ? sch_hoist_packing(s, cache, err) : TN_OK;
}

static int tile_for(smp_ctx_t *c, smp_state_t *st, const char *block, const smp_roles_t *r, const ir_intrin_t *in,
                    int pack, smp_states_t *out, tn_err_t *err) {
  sch_t *s = st->s;
  sch_rv_t b, loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_get_block(s, block, &b, err));
  const ir_block_t *blk = &sch_rv_stmt(s, b)->u.block;
  int niters = blk->niters;
  SMP_TRY(sch_annotate(s, b, SMP_ANN_TILING, sch_arg_str("intrin"), err));
  SMP_TRY(sch_annotate(s, b, SMP_ANN_AUTO_TENSORIZE, sch_arg_str(in->name), err));
  SMP_TRY(sch_get_loops(s, b, loops, &nl, err));
  if (nl != niters) return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d loops for %d iterators", block, nl, niters);
  sch_rv_t i0, i1, i2, j0, j1, j2, kf[2], k[2];
  SMP_TRY(split_outer(s, loops[r->i], in->mr, 64, &i0, &i1, &i2, err));
  SMP_TRY(split_outer(s, loops[r->j], in->nr, 64, &j0, &j1, &j2, err));
  SMP_TRY(sch_sample_perfect_tile(s, loops[r->k], 2, 512, kf, err));
  sch_arg_t g[2] = {sch_arg_rv(kf[0]), sch_arg_rv(kf[1])};
  SMP_TRY(sch_split(s, loops[r->k], g, 2, k, err));
  sch_rv_t order[SCH_MAX_RVS_OUT];
  int n = 0;
  for (int t = 0; t < nl; t++)
    if (t != r->i && t != r->j && t != r->k) order[n++] = loops[t]; /* batch */
  sch_rv_t rest[] = {j0, i0, k[0], j1, i1, k[1], i2, j2};
  for (size_t q = 0; q < TN_ARRAY_LEN(rest); q++) order[n++] = rest[q];
  SMP_TRY(sch_reorder(s, order, n, err));
  smp_note(st, "multi-level-tiling-with-intrinsic(%s: %s", block, in->name);
  if (packs_b(pack))
    SMP_TRY(pack_operand(s, b, block, r->b, k[0], hoists_b(pack), transposed(r) ? r->jdim : -1, err));
  if (packs_a(pack)) SMP_TRY(pack_operand(s, b, block, r->a, k[0], false, -1, err));
  if (hoists_b(pack))
    smp_note(st, "B packed%s once, outside the kernel (hoisted)%s", transposed(r) ? " (transposed)" : "",
             packs_a(pack) ? ", A packed under k0" : "");
  else if (packs_b(pack))
    smp_note(st, "%s packed%s under k0", packs_a(pack) ? "A and B" : "B", transposed(r) ? " (B transposed)" : "");
  /* an elementwise consumer (bias, activation) runs per j0 i0 tile, after its reduction */
  const ir_func_t *f = sch_func(s);
  ir_block_t *cons[2];
  if (ir_consumers(f, &sch_rv_stmt(s, b)->u.block, cons, 2) == 1 && smp_is_write_cache_like(cons[0])) {
    smp_state_t keep;
    SMP_TRY(smp_fork(c, st, &keep, err));
    sch_rv_t cb;
    char name[128];
    snprintf(name, sizeof name, "%s", cons[0]->name);
    int rc = sch_get_block(s, name, &cb, err);
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

int smp_rule_multi_level_tiling_intrin(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                       tn_err_t *err) {
  const ir_block_t *b = c->gpu || !strcmp(block, "root") ? NULL : smp_block(sch_func(st->s), block);
  smp_roles_t r;
  const ir_intrin_t *choices[MAX_CHOICES];
  int n = 0;
  if (b && smp_needs_multi_level_tiling(sch_func(st->s), b) && smp_matmul_roles(b, &r, false)) n = choose(c->t, &r, choices);
  if (n == 0) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  /* per intrinsic: B in place (not when transposed: the intrinsic reads rows
   * of B), B packed, A and B packed (more than 8 rows of A a power of two
   * apart share one set of an 8-way cache); for a const B the same two with
   * B packed once, outside the kernel */
  int first = transposed(&r) ? PACK_B : PACK_NONE, per = PACK__COUNT;
  int end = reads_const(b, r.b) ? PACK__COUNT : PACK_B_HOISTED;
  int total = (n - 1) * per + end;
  for (int i = 0; i < total; i++) {
    if (i % per < first || i % per >= end) continue;
    bool last = i == total - 1;
    smp_state_t fork, *ns = st;
    if (!last) {
      SMP_TRY(smp_fork(c, st, &fork, err));
      ns = &fork;
    }
    int rc = tile_for(c, ns, block, &r, choices[i / per], i % per, out, err);
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
    for (int i = 0; i < n && !name; i++) {
      const ir_annot_t *a = ir_annot_get(all[i]->annots, all[i]->nannots, SMP_ANN_AUTO_TENSORIZE);
      if (!a || !a->is_str) continue;
      name = tn_xstrdup(all[i]->name);
      intrin = tn_xstrdup(a->sval);
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
    if (update) call = intrin, depth = 3;
    else if (in && in->kind == IR_INTRIN_WMMA_MMA) call = "wmma_fill_f32_16x16", depth = 2;
    else if (in && in->kind == IR_INTRIN_WMMA_STORE) call = intrin, depth = 2;
    sch_rv_t b, loops[SCH_MAX_RVS_OUT];
    int nl = 0, rc = sch_get_block(s, name, &b, err);
    if (rc == TN_OK) rc = sch_unannotate(s, b, SMP_ANN_AUTO_TENSORIZE, err);
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
