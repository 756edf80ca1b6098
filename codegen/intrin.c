/* intrin.c — tensor intrinsics in generated code: a block that tensorize
 * marked (IR_ANN_TENSORIZE) prints as one call of the intrinsic's
 * implementation instead of its loop nest, and the implementations the
 * module called are printed among its helpers.  The call's arguments come
 * from ir_intrin_match on the block and from the buffers' storage (a sized
 * or compacted buffer has its own strides): how many of each iterator's
 * extent run (the tails of uneven splits), then per operand a pointer to
 * the element at the tile's origin and its stride along each iterator. */
#include <stdio.h>
#include <string.h>

#include "cg_internal.h"
#include "ir/intrin.h"

/* ---- implementations ---------------------------------------------------------- */

/* `__attribute__((target("avx2,fma")))`: the features the module's
 * intrinsics need, so that the source compiles without -march flags (a
 * kernel fetched from the daemon is built by its user). */
static void target_attr(uint64_t used, tn_buf_t *o) {
  tn_buf_t f;
  tn_buf_init(&f);
  for (int i = 0; i < ir_intrin_count(); i++) {
    if (!(used & (1ull << i))) continue;
    const char *p = ir_intrin_at(i)->features;
    while (*p) {
      while (*p == ' ') p++;
      size_t n = strcspn(p, " ");
      if (!n) break;
      char feat[32];
      snprintf(feat, sizeof feat, "%.*s", (int)n, p);
      bool seen = false;
      for (const char *q = tn_buf_str(&f); (q = strstr(q, feat)); q += n)
        seen |= (q == tn_buf_str(&f) || q[-1] == ',') && (q[n] == ',' || q[n] == 0);
      if (!seen) tn_buf_printf(&f, "%s%s", f.len ? "," : "", feat);
      p += n;
    }
  }
  if (f.len) tn_buf_printf(o, "__attribute__((target(\"%s\")))", tn_buf_str(&f));
  tn_buf_free(&f);
}

void cg_intrin_entry_attr(const cg_ctx_t *c, tn_buf_t *o) {
  if (!c->intrin_used || c->d->target != CG_TARGET_C) return;
  target_attr(c->intrin_used, o);
  tn_buf_put(o, "\n");
}

/* The vector instructions an implementation is printed with. */
typedef struct isa {
  int lanes;
  const char *vec, *load, *store, *bcast, *fma;
  /* partial tiles: a lane mask from the lanes left (%1$s), a masked load
   * (%1$s pointer, %2$s mask) and a masked store (%1$s pointer, %2$s mask, %3$s value) */
  const char *mask_decl, *mask_load, *mask_store;
} isa_t;

static const isa_t avx2 = {
    8, "__m256", "_mm256_loadu_ps(%s)", "_mm256_storeu_ps(%s, %s)", "_mm256_broadcast_ss(%s)", "_mm256_fmadd_ps",
    "const __m256i %s = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(%s)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));",
    "_mm256_maskload_ps(%1$s, %2$s)", "_mm256_maskstore_ps(%1$s, %2$s, %3$s)"};
static const isa_t avx512 = {
    16, "__m512", "_mm512_loadu_ps(%s)", "_mm512_storeu_ps(%s, %s)", "_mm512_set1_ps(*(%s))", "_mm512_fmadd_ps",
    "const __mmask16 %s = (__mmask16)((%s) >= 16 ? 0xffff : (%2$s) <= 0 ? 0 : (1u << (%2$s)) - 1);",
    "_mm512_maskz_loadu_ps(%2$s, %1$s)", "_mm512_mask_storeu_ps(%1$s, %2$s, %3$s)"};

/* float32 C[MR, NR] += A[MR, K] B[K, NR]: MR x NR/lanes vector accumulators
 * loaded once, K rank-1 updates (NR/lanes loads of B, one broadcast of A per
 * row), stored once; K is a nest of four levels (k3 k2 k1 k), each with its
 * own strides (the calls pass constants: the compiler drops the levels of
 * extent 1 and folds the strides).  The depthwise kind (IR_INTRIN_CPU_DW)
 * multiplies elementwise along j: A is loaded as vectors of its row, one per
 * accumulator, instead of broadcast.  A partial tile (n_i < MR or n_j < NR:
 * the tail of an uneven split) takes the same path with masked columns and
 * the last valid row repeated into the rows past n_i, which are never
 * stored. */
static void mm_source(const ir_intrin_t *in, int index, tn_buf_t *o) {
  const isa_t *x = in->lanes == 16 ? &avx512 : &avx2;
  int mr = in->mr, nv = in->nr / x->lanes;
  bool dw = in->kind == IR_INTRIN_CPU_DW;
  char p[96], q[96];
  tn_buf_put(o, "static inline __attribute__((always_inline)) ");
  target_attr(1ull << index, o);
  tn_buf_printf(o,
                " void tuned_intrin_%s(\n"
                "    int64_t n_i, int64_t n_j, int64_t n_k3, int64_t n_k2, int64_t n_k1, int64_t n_k,\n"
                "    const float *restrict A, int64_t A_i, int64_t A_k3, int64_t A_k2, int64_t A_k1, int64_t A_k,%s\n"
                "    const float *restrict B, int64_t B_k3, int64_t B_k2, int64_t B_k1, int64_t B_k, int64_t B_j,\n"
                "    float *restrict C, int64_t C_i, int64_t C_j) {\n"
                "  (void)B_j, (void)C_j;%s /* 1: checked where the call was generated */\n",
                in->name, dw ? " int64_t A_j," : "", dw ? " (void)A_j;" : "");
  for (int pass = 0; pass < 2; pass++) {
    bool full = pass == 0;
    if (full) {
      tn_buf_printf(o, "  if (n_i == %d && n_j == %d) {\n", mr, in->nr);
    } else {
      tn_buf_put(o, "  if (n_i <= 0 || n_j <= 0) return;\n  {\n");
      for (int v = 0; v < nv; v++) {
        snprintf(p, sizeof p, "m%d", v);
        snprintf(q, sizeof q, "n_j - %d", x->lanes * v);
        tn_buf_put(o, "    ");
        tn_buf_printf(o, x->mask_decl, p, q);
        tn_buf_put(o, "\n");
      }
    }
    for (int r = 0; r < mr; r++) {
      if (full)
        tn_buf_printf(o, "    const int64_t r%d = %d;\n", r, r);
      else
        tn_buf_printf(o, "    const int64_t r%d = %d < n_i ? %d : n_i - 1;\n", r, r, r);
    }
    for (int r = 0; r < mr; r++)
      for (int v = 0; v < nv; v++) {
        snprintf(p, sizeof p, "C + r%d * C_i + %d", r, x->lanes * v);
        snprintf(q, sizeof q, "m%d", v);
        tn_buf_printf(o, "    %s c%d_%d = ", x->vec, r, v);
        if (full)
          tn_buf_printf(o, x->load, p);
        else
          tn_buf_printf(o, x->mask_load, p, q);
        tn_buf_put(o, ";\n");
      }
    tn_buf_put(o, "    for (int64_t k3 = 0; k3 < n_k3; k3++)\n"
                  "    for (int64_t k2 = 0; k2 < n_k2; k2++)\n"
                  "    for (int64_t k1 = 0; k1 < n_k1; k1++) {\n"
                  "    const float *A_o = A + k3 * A_k3 + k2 * A_k2 + k1 * A_k1;\n"
                  "    const float *B_o = B + k3 * B_k3 + k2 * B_k2 + k1 * B_k1;\n"
                  "    for (int64_t k = 0; k < n_k; k++) {\n      const float *b = B_o + k * B_k;\n");
    for (int v = 0; v < nv; v++) {
      snprintf(p, sizeof p, "b + %d", x->lanes * v);
      snprintf(q, sizeof q, "m%d", v);
      tn_buf_printf(o, "      const %s b%d = ", x->vec, v);
      if (full)
        tn_buf_printf(o, x->load, p);
      else
        tn_buf_printf(o, x->mask_load, p, q);
      tn_buf_put(o, ";\n");
    }
    tn_buf_printf(o, "      %s a;\n", x->vec);
    for (int r = 0; r < mr; r++) {
      if (dw) {
        for (int v = 0; v < nv; v++) {
          snprintf(p, sizeof p, "A_o + r%d * A_i + k * A_k + %d", r, x->lanes * v);
          snprintf(q, sizeof q, "m%d", v);
          tn_buf_put(o, "      a = ");
          if (full)
            tn_buf_printf(o, x->load, p);
          else
            tn_buf_printf(o, x->mask_load, p, q);
          tn_buf_printf(o, ";\n      c%d_%d = %s(a, b%d, c%d_%d);\n", r, v, x->fma, v, r, v);
        }
        continue;
      }
      snprintf(p, sizeof p, "A_o + r%d * A_i + k * A_k", r);
      tn_buf_put(o, "      a = ");
      tn_buf_printf(o, x->bcast, p);
      tn_buf_put(o, ";\n");
      for (int v = 0; v < nv; v++) tn_buf_printf(o, "      c%d_%d = %s(a, b%d, c%d_%d);\n", r, v, x->fma, v, r, v);
    }
    tn_buf_put(o, "    }\n    }\n");
    for (int r = 0; r < mr; r++)
      for (int v = 0; v < nv; v++) {
        char val[32];
        snprintf(val, sizeof val, "c%d_%d", r, v);
        snprintf(q, sizeof q, "m%d", v);
        if (full) {
          snprintf(p, sizeof p, "C + r%d * C_i + %d", r, x->lanes * v);
          tn_buf_put(o, "    ");
          tn_buf_printf(o, x->store, p, val);
        } else {
          snprintf(p, sizeof p, "C + %d * C_i + %d", r, x->lanes * v);
          tn_buf_printf(o, "    if (%d < n_i) ", r);
          tn_buf_printf(o, x->mask_store, p, q, val);
        }
        tn_buf_put(o, ";\n");
      }
    tn_buf_put(o, full ? "    return;\n  }\n" : "  }\n");
  }
  tn_buf_put(o, "}\n");
}

void cg_intrin_helpers(const cg_ctx_t *c, tn_buf_t *o) {
  if (!c->intrin_used || c->d->target != CG_TARGET_C) return;
  tn_buf_put(o, "#include <immintrin.h>\n");
  for (int i = 0; i < ir_intrin_count(); i++)
    if (c->intrin_used & (1ull << i)) mm_source(ir_intrin_at(i), i, o);
}

/* ---- the call ------------------------------------------------------------------ */

static int registry_index(const ir_intrin_t *in) {
  for (int i = 0; i < ir_intrin_count(); i++)
    if (ir_intrin_at(i) == in) return i;
  return -1;
}

/* The operand's storage offset over the loops outside the block, and its
 * stride along each of the block's inner loops. */
ir_expr_t *cg_intrin_operand_offset(cg_ctx_t *c, const ir_intrin_match_t *m, const ir_intrin_operand_t *op,
                                    int64_t *stride, bool *affine) {
  ir_expr_t *flat = cg_flat_index_loops(c, m->inner, op->buf, op->idx);
  flat = ir_simplify(c->scratch, cg_subst_bindings(c, m->outer, flat), &c->bounds);
  ir_var_t *from[IR_INTRIN_MAX_ITERS];
  ir_expr_t *zero[IR_INTRIN_MAX_ITERS];
  int n = 0;
  *affine = true;
  for (int t = 0; t < m->niters; t++) {
    stride[t] = 0;
    if (!m->loop[t]) continue;
    if (!ir_affine_coef_of(flat, m->loop[t]->var, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &stride[t])) *affine = false;
    from[n] = m->loop[t]->var;
    zero[n++] = ir_int(c->scratch, 0);
  }
  return ir_simplify(c->scratch, ir_expr_subst(c->scratch, flat, from, zero, n), &c->bounds);
}

bool cg_intrin_emit(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_block_t *b = &s->u.block;
  const ir_annot_t *an = ir_annot_get(b->annots, b->nannots, IR_ANN_TENSORIZE);
  if (!an) return false;
  const ir_intrin_t *in = an->is_str ? ir_intrin_find(an->sval) : NULL;
  if (!in) {
    cg_fail(c, TN_EINVAL, "block \"%s\" is marked for an unknown tensor intrinsic", b->name);
    return true;
  }
  if (c->d->target != (ir_intrin_is_wmma(in) ? CG_TARGET_CUDA : CG_TARGET_C)) {
    cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": intrinsic %s has no implementation in %s code", b->name, in->name,
            cg_target_name(c->d->target));
    return true;
  }
  tn_err_t e = {0};
  ir_intrin_match_t m;
  if (ir_intrin_match(c->scratch, b, in, &m, &e) < 0) {
    cg_fail(c, e.code ? e.code : TN_EINVAL, "%s", e.msg);
    return true;
  }
  if (ir_intrin_is_wmma(in)) {
    cg_wmma_emit(c, s, in, &m);
    return true;
  }
  tn_buf_t call;
  tn_buf_init(&call);
  tn_buf_printf(&call, "tuned_intrin_%s(", in->name);
  for (int t = 0; t < m.niters; t++) {
    if (t) tn_buf_put(&call, ", ");
    if (m.count[t])
      cg_print_expr(c, cg_subst_bindings(c, b, m.count[t]), &call);
    else
      tn_buf_printf(&call, "%lld", (long long)m.extent[t]);
  }
  for (int p = 0; p < m.noperands && !c->rc; p++) {
    const ir_intrin_operand_t *op = &m.op[p];
    const cg_buf_t *cb = &c->bufs[op->buf->id];
    if (cg_promo_ref(c, op->buf) || cg_half_storage(c, op->buf) || cg_bf16_storage(op->buf)) {
      cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": intrinsic %s cannot take the address of %s", b->name, in->name,
              op->buf->name);
      break;
    }
    int64_t stride[IR_INTRIN_MAX_ITERS];
    bool affine;
    ir_expr_t *off = cg_intrin_operand_offset(c, &m, op, stride, &affine);
    if (!affine) {
      cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": %s's storage index is not affine in the tile's loops", b->name,
              op->buf->name);
      break;
    }
    tn_buf_printf(&call, ", %s + (", cb->name);
    cg_print_expr(c, off, &call);
    tn_buf_put(&call, ")");
    for (int u = 0; u < op->nuse; u++) {
      int t = op->use[u];
      char pair[64];
      snprintf(pair, sizeof pair, "%s.%s", op->name, m.iter_name[t]);
      if (m.loop[t] && stride[t] != 1 && strstr(in->unit, pair))
        cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": intrinsic %s needs %s stored contiguously along %s", b->name,
                in->name, op->buf->name, m.iter_name[t]);
      tn_buf_printf(&call, ", %lld", (long long)stride[t]);
    }
  }
  tn_buf_put(&call, ");");
  ir_expr_t *guard = m.guard;
  if (b->predicate) guard = guard ? ir_bin(c->scratch, IR_E_AND, guard, b->predicate) : b->predicate;
  cg_line(c, "/* block %s: intrinsic %s */", cg_comment_name(c, b->name), in->name);
  if (guard) {
    tn_buf_t g;
    tn_buf_init(&g);
    cg_print_expr(c, cg_subst_bindings(c, b, guard), &g);
    cg_line(c, "if (%s) %s", tn_buf_str(&g), tn_buf_str(&call));
    tn_buf_free(&g);
  } else {
    cg_line(c, "%s", tn_buf_str(&call));
  }
  tn_buf_free(&call);
  int idx = registry_index(in);
  if (idx >= 0) c->intrin_used |= 1ull << idx;
  return true;
}
