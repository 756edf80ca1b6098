/* wmma.c — tensor-core intrinsics (ir/intrin.h's wmma kinds) in CUDA code:
 * a tensorized block prints as nvcuda::wmma calls that the 32 lanes of one
 * warp make together.  The warp: threadIdx.x is the lane (the kernel launches
 * 32 of it, no loop above a wmma block binds it) and the other thread axes
 * number the warps.  The accumulator that the fill, the mma and the store
 * share is a local buffer of the IR (each lane "holds" the warp's tile, as
 * the IR runs a block not bound to threadIdx.x on every lane); it is
 * declared as an array of accumulator fragments, one per 16 x 16 tile, the
 * tile at the block's origin picked by index — as TVM's wmma.accumulator
 * scope.  A and B fragments live for one mma (loaded from shared or global
 * memory, row- or column-major as the strides say, the leading dimension the
 * storage's stride).  Bad schedules get an error naming the block. */
#include <stdio.h>
#include <string.h>

#include "cg_internal.h"
#include "ir/intrin.h"

#define NS "nvcuda::wmma::"

static const ir_intrin_t *wmma_of(const ir_block_t *b) {
  const ir_annot_t *an = ir_annot_get(b->annots, b->nannots, IR_ANN_TENSORIZE);
  const ir_intrin_t *in = an && an->is_str ? ir_intrin_find(an->sval) : NULL;
  return in && ir_intrin_is_wmma(in) ? in : NULL;
}

/* The operand that is the accumulator (mma: C, fill: C, store: the input C). */
static int acc_operand(const ir_intrin_t *in) { return in->kind == IR_INTRIN_WMMA_MMA ? 2 : 0; }

/* ---- analysis ------------------------------------------------------------------ */

typedef struct wwalk {
  cg_ctx_t *c;
  const ir_loop_t *lane_loop; /* innermost enclosing loop bound to threadIdx.x */
  int kernel;
} wwalk_t;

static void mark_block(wwalk_t *w, const ir_block_t *b, const ir_intrin_t *in) {
  cg_ctx_t *c = w->c;
  if (c->d->target != CG_TARGET_CUDA) return; /* cg_intrin_emit says so */
  if (w->lane_loop) {
    cg_fail(c, TN_EINVAL,
            "block \"%s\": intrinsic %s runs on a whole warp (threadIdx.x is its lane), but loop %s above it is "
            "bound to threadIdx.x; bind the warps to threadIdx.y/z",
            b->name, in->name, w->lane_loop->var->name);
    return;
  }
  tn_err_t e = {0};
  ir_intrin_match_t m;
  if (ir_intrin_match(c->scratch, b, in, &m, &e) < 0) {
    cg_fail(c, e.code ? e.code : TN_EINVAL, "%s", e.msg);
    return;
  }
  c->need_wmma = true;
  c->wmma_sm = TN_MAX(c->wmma_sm, in->sm);
  for (int p = 0; p < m.noperands; p++) {
    cg_buf_t *cb = &c->bufs[m.op[p].buf->id];
    if (p != acc_operand(in)) {
      if (cb->b->scope == IR_SCOPE_LOCAL)
        cg_fail(c, TN_EINVAL,
                "block \"%s\": intrinsic %s loads and stores %s as a warp, from shared or global memory; "
                "it is a local buffer (one per thread)",
                b->name, in->name, cb->b->name);
      cb->wmma_operand = true;
      continue;
    }
    if (cb->b->scope != IR_SCOPE_LOCAL) {
      cg_fail(c, TN_EINVAL,
              "block \"%s\": intrinsic %s keeps %s in accumulator fragments, so it must be a local buffer "
              "(cache_write it to \"local\" under the warp's loop); it is %s",
              b->name, in->name, cb->b->name, cb->b->scope == IR_SCOPE_SHARED ? "shared" : "global");
      continue;
    }
    int k = in->kind == IR_INTRIN_WMMA_MMA ? in->fk : 0;
    if (k && cb->wmma_k > 0 && cb->wmma_k != k)
      cg_fail(c, TN_EINVAL, "block \"%s\": accumulator %s is used by mma intrinsics of K %d and %d", b->name,
              cb->b->name, cb->wmma_k, k);
    if (k || !cb->wmma_k) cb->wmma_k = k ? k : -1; /* -1: an accumulator whose mma is not seen yet */
    cb->wmma_kernel = w->kernel;
  }
}

static void walk(wwalk_t *w, const ir_stmt_t *s) {
  if (!s || w->c->rc) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) walk(w, s->u.seq.items[i]);
    return;
  case IR_S_LOOP: {
    int axis;
    const ir_loop_t *saved = w->lane_loop;
    if (cg_loop_tag(&s->u.loop, &axis) == IR_TAG_CLASS_THREAD && axis == 0) w->lane_loop = &s->u.loop;
    walk(w, s->u.loop.body);
    w->lane_loop = saved;
    return;
  }
  case IR_S_BLOCK: {
    const ir_intrin_t *in = wmma_of(&s->u.block);
    if (in) mark_block(w, &s->u.block, in);
    else walk(w, s->u.block.body);
    return;
  }
  case IR_S_STORE: return;
  }
}

/* A block outside the wmma intrinsics touching an accumulator. */
static bool acc_misuse(ir_stmt_t *s, void *p) {
  cg_ctx_t *c = p;
  if (c->rc || s->kind != IR_S_BLOCK) return !c->rc;
  const ir_block_t *b = &s->u.block;
  if (wmma_of(b)) return false; /* its inner block is the intrinsic's */
  const ir_region_t *regs[2] = {b->reads, b->writes};
  int nregs[2] = {b->nreads, b->nwrites};
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < nregs[k]; r++) {
      const ir_buffer_t *buf = regs[k][r].buf;
      if (buf->id < 0 || buf->id >= c->nbufs || !c->bufs[buf->id].wmma_k) continue;
      if (b->body && b->body->kind != IR_S_STORE) continue; /* a block around others: they say */
      cg_fail(c, TN_EINVAL,
              "block \"%s\" %s %s element by element, but %s lives in tensor-core accumulator fragments "
              "(their layout is the hardware's); tensorize it with %s",
              b->name, k ? "writes" : "reads", buf->name, buf->name,
              k ? "wmma_fill_f32_16x16 (an init) or an mma intrinsic" : "wmma_store_f32_16x16");
      return false;
    }
  return true;
}

int cg_wmma_analyse(cg_ctx_t *c) {
  if (!c->d->gpu) return c->rc;
  wwalk_t w = {c, NULL, 0};
  for (int k = 0; k < c->nroots && !c->rc; k++) {
    w.kernel = k;
    walk(&w, c->roots[k]);
  }
  if (c->rc || !c->need_wmma) return c->rc;
  ir_stmt_walk(c->f->root, acc_misuse, c);
  for (int i = 0; i < c->nbufs && !c->rc; i++) {
    cg_buf_t *cb = &c->bufs[i];
    if (!cb->wmma_k) continue;
    int nd = cb->b->ndim;
    if (cb->nvt || cb->pipe || nd < 2 || cb->ext[nd - 2] % 16 || cb->ext[nd - 1] % 16)
      cg_fail(c, TN_EINVAL,
              "accumulator %s (tensor-core fragments of 16 x 16) is stored as %lld x %lld%s; it must be whole "
              "16 x 16 tiles",
              cb->b->name, nd >= 2 ? (long long)cb->ext[nd - 2] : 1LL, (long long)cb->ext[nd - 1],
              cb->nvt ? " per virtual thread" : "");
  }
  return c->rc;
}

bool cg_wmma_kernel(const cg_ctx_t *c, int k) {
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].wmma_k && c->bufs[i].wmma_kernel == k) return true;
  return false;
}

void cg_wmma_acc_decl(cg_ctx_t *c, const cg_buf_t *cb) {
  int64_t n = cg_buf_numel(cb) / 256;
  cg_line(c, NS "fragment<" NS "accumulator, 16, 16, %d, float> %s[%lld];  /* %lld tensor-core tiles */",
          cb->wmma_k > 0 ? cb->wmma_k : 16, cb->name, (long long)n, (long long)n);
}

/* ---- the calls ------------------------------------------------------------------ */

/* The index of the accumulator tile at the block's origin: per dimension the
 * origin (rebased for the sized storage) over 16 where the intrinsic's
 * loops move the index, row-major over the tiles. */
static ir_expr_t *tile_index(cg_ctx_t *c, const ir_intrin_match_t *m, const ir_intrin_operand_t *op) {
  const cg_buf_t *cb = &c->bufs[op->buf->id];
  ir_func_t *f = c->scratch;
  ir_var_t *from[IR_INTRIN_MAX_ITERS];
  ir_expr_t *zero[IR_INTRIN_MAX_ITERS];
  int n = 0;
  for (int t = 0; t < m->niters; t++)
    if (m->loop[t]) from[n] = m->loop[t]->var, zero[n++] = ir_int(f, 0);
  ir_expr_t *idx = NULL;
  for (int d = 0; d < op->buf->ndim; d++) {
    ir_expr_t *x = cg_subst_bindings(c, m->inner, op->idx[d]);
    if (cb->min[d]) x = ir_bin(f, IR_E_SUB, x, cb->min[d]);
    x = cg_subst_bindings(c, m->outer, x);
    bool tiled = false;
    for (int t = 0; t < n; t++) tiled = tiled || ir_expr_uses_var(x, from[t]);
    x = ir_expr_subst(f, x, from, zero, n);
    int64_t tile = tiled ? 16 : 1;
    if (tiled) x = ir_bin(f, IR_E_FLOORDIV, x, ir_int(f, 16));
    idx = idx ? ir_bin(f, IR_E_ADD, ir_bin(f, IR_E_MUL, idx, ir_int(f, cb->ext[d] / tile)), x) : x;
  }
  return ir_simplify(f, idx ? idx : ir_int(f, 0), &c->bounds);
}

/* "A_shared + (off)" for a warp's load or store, with the layout and leading
 * dimension from the strides along the tile's rows (`row`) and columns;
 * false (an error recorded) when neither is contiguous, the leading
 * dimension is not a multiple of 16 bytes or the tile is not 32-byte aligned. */
static bool mem_operand(cg_ctx_t *c, const ir_block_t *b, const ir_intrin_t *in, const ir_intrin_match_t *m,
                        const ir_intrin_operand_t *op, int row, int col, tn_buf_t *ptr, bool *col_major,
                        int64_t *ldm) {
  int64_t stride[IR_INTRIN_MAX_ITERS];
  bool affine;
  ir_expr_t *off = cg_intrin_operand_offset(c, m, op, stride, &affine);
  const cg_buf_t *cb = &c->bufs[op->buf->id];
  int eb = ir_dtype_bytes(op->buf->dtype);
  if (!affine) {
    cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": %s's storage index is not affine in the tile's loops", b->name,
            op->buf->name);
    return false;
  }
  *col_major = stride[row] == 1 && stride[col] != 1;
  *ldm = *col_major ? stride[col] : stride[row];
  if ((*col_major ? stride[row] : stride[col]) != 1) {
    cg_fail(c, TN_EINVAL,
            "block \"%s\": intrinsic %s loads or stores %s's 16 x %d tile by rows or by columns; its strides "
            "along %s and %s are %lld and %lld (one must be 1)",
            b->name, in->name, op->buf->name, in->kind == IR_INTRIN_WMMA_MMA && op != &m->op[2] ? in->fk : 16,
            m->iter_name[row], m->iter_name[col], (long long)stride[row], (long long)stride[col]);
    return false;
  }
  if (*ldm * eb % 16) {
    cg_fail(c, TN_EINVAL,
            "block \"%s\": intrinsic %s needs %s's leading dimension to be a multiple of 16 bytes; it is %lld "
            "elements of %d bytes (pad it with storage_align)",
            b->name, in->name, op->buf->name, (long long)*ldm, eb);
    return false;
  }
  /* the tile's address: 32-byte aligned for every value of the loops outside */
  ir_affine_t a = {0};
  bool aligned = ir_affine_of(off, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &a) && a.constant * eb % 32 == 0;
  for (int i = 0; i < a.n && aligned; i++) aligned = a.terms[i].coef * eb % 32 == 0;
  ir_affine_free(&a);
  if (!aligned) {
    char *txt = cg_expr_str(c, off);
    cg_fail(c, TN_EINVAL,
            "block \"%s\": intrinsic %s needs %s's tile at a 32-byte aligned address; its element offset %s is "
            "not a multiple of %d for every tile",
            b->name, in->name, op->buf->name, txt, 32 / eb);
    return false;
  }
  tn_buf_printf(ptr, "%s + (", cb->name);
  cg_print_expr(c, off, ptr);
  tn_buf_put(ptr, ")");
  return true;
}

static const char *elem_type(cg_ctx_t *c, const ir_intrin_t *in) {
  switch (in->in_dtype) {
  case IR_FLOAT16: c->need_half = true; return "__half";
  case IR_BFLOAT16: c->need_bf16 = true; return "__nv_bfloat16";
  default: return NS "precision::tf32";
  }
}

static void emit_mma(cg_ctx_t *c, const ir_block_t *b, const ir_intrin_t *in, const ir_intrin_match_t *m,
                     const char *acc) {
  /* A[i, k]: rows i (0), columns k (2); B[k, j]: rows k, columns j (1) */
  tn_buf_t pa, pb;
  tn_buf_init(&pa);
  tn_buf_init(&pb);
  bool ca, cb;
  int64_t la, lb;
  if (mem_operand(c, b, in, m, &m->op[0], 0, 2, &pa, &ca, &la) &&
      mem_operand(c, b, in, m, &m->op[1], 2, 1, &pb, &cb, &lb)) {
    const char *t = elem_type(c, in);
    cg_line(c, NS "fragment<" NS "matrix_a, 16, 16, %d, %s, " NS "%s> tuned_wa;", in->fk, t,
            ca ? "col_major" : "row_major");
    cg_line(c, NS "fragment<" NS "matrix_b, 16, 16, %d, %s, " NS "%s> tuned_wb;", in->fk, t,
            cb ? "col_major" : "row_major");
    cg_line(c, NS "load_matrix_sync(tuned_wa, %s, %lld);", tn_buf_str(&pa), (long long)la);
    cg_line(c, NS "load_matrix_sync(tuned_wb, %s, %lld);", tn_buf_str(&pb), (long long)lb);
    if (in->in_dtype == IR_FLOAT32) { /* tf32: the float32 data rounded as it enters */
      cg_line(c, "for (int tuned_t = 0; tuned_t < tuned_wa.num_elements; tuned_t++) "
                 "tuned_wa.x[tuned_t] = " NS "__float_to_tf32(tuned_wa.x[tuned_t]);");
      cg_line(c, "for (int tuned_t = 0; tuned_t < tuned_wb.num_elements; tuned_t++) "
                 "tuned_wb.x[tuned_t] = " NS "__float_to_tf32(tuned_wb.x[tuned_t]);");
    }
    cg_line(c, NS "mma_sync(%s, tuned_wa, tuned_wb, %s);", acc, acc);
  }
  tn_buf_free(&pa);
  tn_buf_free(&pb);
}

static void emit_store(cg_ctx_t *c, const ir_block_t *b, const ir_intrin_t *in, const ir_intrin_match_t *m,
                       const char *acc) {
  tn_buf_t pd;
  tn_buf_init(&pd);
  bool cm;
  int64_t ld;
  if (mem_operand(c, b, in, m, &m->op[1], 0, 1, &pd, &cm, &ld))
    cg_line(c, NS "store_matrix_sync(%s, %s, %lld, " NS "%s);", tn_buf_str(&pd), acc, (long long)ld,
            cm ? "mem_col_major" : "mem_row_major");
  tn_buf_free(&pd);
}

void cg_wmma_emit(cg_ctx_t *c, const ir_stmt_t *s, const ir_intrin_t *in, const ir_intrin_match_t *m) {
  const ir_block_t *b = &s->u.block;
  for (int t = 0; t < m->niters; t++)
    if (m->count[t]) {
      cg_fail(c, TN_EINVAL,
              "block \"%s\": intrinsic %s computes whole 16 x 16 tiles; loop %s runs a partial one (an uneven "
              "split): pad the shape to multiples of 16",
              b->name, in->name, m->loop[t] ? m->loop[t]->var->name : m->iter_name[t]);
      return;
    }
  const ir_intrin_operand_t *accop = &m->op[acc_operand(in)];
  const cg_buf_t *ab = &c->bufs[accop->buf->id];
  if (!ab->wmma_k) {
    cg_fail(c, TN_EINVAL, "block \"%s\": %s is not a tensor-core accumulator", b->name, accop->buf->name);
    return;
  }
  cg_sync_before(c, s);
  /* every lane runs the call: only the thread axes that number warps and
   * that no loop binds are masked (threadIdx.x is the lane) */
  tn_buf_t g;
  tn_buf_init(&g);
  ir_expr_t *guard = m->guard;
  if (b->predicate) guard = guard ? ir_bin(c->scratch, IR_E_AND, guard, b->predicate) : b->predicate;
  if (guard) cg_print_expr(c, cg_subst_bindings(c, b, guard), &g);
  tn_buf_t tg;
  tn_buf_init(&tg);
  int64_t lanes = c->block[0];
  c->block[0] = 1;
  if (in->kind == IR_INTRIN_WMMA_STORE) cg_thread_guard(c, &tg);
  c->block[0] = lanes;
  if (tg.len) tn_buf_printf(&g, "%s%s", g.len ? " && " : "", tn_buf_str(&tg));
  tn_buf_free(&tg);
  if (g.len)
    cg_line(c, "if (%s) {  /* block %s: intrinsic %s, a warp's */", tn_buf_str(&g), cg_comment_name(c, b->name),
            in->name);
  else
    cg_line(c, "{  /* block %s: intrinsic %s, a warp's */", cg_comment_name(c, b->name), in->name);
  tn_buf_free(&g);
  c->ind++;
  char acc[256];
  char *ti = cg_expr_str(c, tile_index(c, m, accop));
  snprintf(acc, sizeof acc, "%s[%s]", ab->name, ti);
  switch (in->kind) {
  case IR_INTRIN_WMMA_FILL: cg_line(c, NS "fill_fragment(%s, 0.0f);", acc); break;
  case IR_INTRIN_WMMA_MMA: emit_mma(c, b, in, m, acc); break;
  case IR_INTRIN_WMMA_STORE: emit_store(c, b, in, m, acc); break;
  default: break;
  }
  c->ind--;
  cg_line(c, "}");
  cg_sync_note(c, s);
}
