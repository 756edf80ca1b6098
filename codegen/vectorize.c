/* vectorize.c — vectorized loops on GPUs: a loop of 2 or 4 lanes over a
 * block whose float32 accesses are contiguous and aligned in the loop
 * variable becomes float2/float4 loads and one vector store; the lanes'
 * arithmetic stays scalar (CUDA vector types have no operators).  In CUDA a
 * plain copy of any type moves 4, 8 or 16 bytes at once (cp.async in
 * pipelined copies). */
#include "cg_internal.h"

#include <stdlib.h>

/* A number every value of e is a multiple of, with the lane variable at 0;
 * 0 means e is always 0. */
static int64_t known_multiple(const ir_expr_t *e, const ir_var_t *lane) {
  int64_t a, b, k;
  switch (e->kind) {
  case IR_E_INT: return e->u.ival < 0 ? -e->u.ival : e->u.ival;
  case IR_E_VAR: return e->u.var == lane ? 0 : 1;
  case IR_E_ADD: case IR_E_SUB:
    return tn_gcd64(known_multiple(e->u.bin.a, lane), known_multiple(e->u.bin.b, lane));
  case IR_E_NEG: case IR_E_CAST: return known_multiple(e->u.un, lane);
  case IR_E_MUL:
    a = known_multiple(e->u.bin.a, lane);
    b = known_multiple(e->u.bin.b, lane);
    if (a == 0 || b == 0) return 0;
    return __builtin_mul_overflow(a, b, &k) ? a : k;
  case IR_E_FLOORMOD:
    if (!ir_expr_is_const_int(e->u.bin.b, &k) || k <= 0) return 1;
    return tn_gcd64(known_multiple(e->u.bin.a, lane), k);
  case IR_E_FLOORDIV:
    if (!ir_expr_is_const_int(e->u.bin.b, &k) || k <= 0) return 1;
    a = known_multiple(e->u.bin.a, lane);
    return a % k == 0 ? a / k : 1;
  default: return 1;
  }
}

static bool lane_form(const ir_expr_t *e, const ir_var_t *lane, int64_t w, int64_t *stride);

/* Lane stride of floordiv/floormod(x, k) by a constant k > 0, whose x is
 * affine in the lane with a stride >= 0: no lane may cross a multiple of the
 * divisor (the base is a multiple of g = gcd(multiple, divisor), so it sits
 * at most divisor - g past one).  False for any other atom. */
static bool div_lane_form(const ir_expr_t *e, const ir_var_t *lane, int64_t w, int64_t *stride) {
  int64_t sa, k;
  if (e->kind != IR_E_FLOORDIV && e->kind != IR_E_FLOORMOD) return false;
  if (!ir_expr_is_const_int(e->u.bin.b, &k) || k <= 0) return false;
  if (!lane_form(e->u.bin.a, lane, w, &sa) || sa < 0) return false;
  int64_t g = tn_gcd64(known_multiple(e->u.bin.a, lane), k);
  int64_t span;
  if (g == 0) g = k;
  if (__builtin_mul_overflow(sa, w - 1, &span) || span >= g) return false;
  *stride = e->kind == IR_E_FLOORMOD ? sa : 0;
  return true;
}

/* Is e = base + stride * lane for every lane in [0, w)?  Sets the stride:
 * the lane's coefficient in e's affine form plus, for each atom using the
 * lane, its coefficient times the atom's own lane stride. */
static bool lane_form(const ir_expr_t *e, const ir_var_t *lane, int64_t w, int64_t *stride) {
  *stride = 0;
  if (!ir_expr_uses_var(e, lane)) return true;
  ir_affine_t a = {0};
  bool ok = ir_affine_of(e, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &a);
  int64_t s = ok ? ir_affine_coef(&a, lane) : 0;
  for (int i = 0; ok && i < a.n; i++) {
    const ir_affine_term_t *t = &a.terms[i];
    int64_t ts;
    if (t->var || !ir_expr_uses_var(t->e, lane)) continue;
    ok = div_lane_form(t->e, lane, w, &ts) && !__builtin_mul_overflow(t->coef, ts, &ts) &&
         !__builtin_add_overflow(s, ts, &s);
  }
  ir_affine_free(&a);
  *stride = s;
  return ok;
}

typedef struct vec_access {
  const ir_expr_t *load; /* NULL for the store */
  const ir_buffer_t *buf;
  const char *base;      /* element offset of lane 0, over loop variables */
} vec_access_t;

static bool vec_buffer(const cg_ctx_t *c, const ir_buffer_t *b) {
  return b->dtype == IR_FLOAT32 && b->scope != IR_SCOPE_LOCAL && c->d->vec_load;
}

/* Contiguous and aligned: fills the base text.  With `any_dtype`, buffers of
 * every type qualify (raw copies; the caller checks the widths). */
static bool vec_access_of(cg_ctx_t *c, const ir_block_t *blk, const ir_loop_t *l, const ir_buffer_t *b,
                          ir_expr_t *const *idx, bool any_dtype, vec_access_t *out) {
  if (any_dtype ? b->scope == IR_SCOPE_LOCAL : !vec_buffer(c, b)) return false;
  ir_expr_t *flat = cg_flat_index_loops(c, blk, b, idx);
  int64_t stride, m;
  if (!lane_form(flat, l->var, l->extent, &stride) || stride != 1) return false;
  m = known_multiple(flat, l->var);
  if (m % l->extent != 0) return false;
  ir_var_t *lane = l->var;
  ir_expr_t *zero = ir_int(c->scratch, 0);
  ir_expr_t *base = ir_simplify(c->scratch, ir_expr_subst(c->scratch, flat, &lane, &zero, 1), &c->bounds);
  out->buf = b;
  out->base = cg_expr_str(c, base);
  return true;
}

static bool vec_access(cg_ctx_t *c, const ir_block_t *blk, const ir_loop_t *l, const ir_buffer_t *b,
                       ir_expr_t *const *idx, vec_access_t *out) {
  return vec_access_of(c, blk, l, b, idx, false, out);
}

static void find_loads(cg_ctx_t *c, const ir_block_t *blk, const ir_loop_t *l, const ir_expr_t *e,
                       vec_access_t *acc, int *n) {
  if (!e) return;
  if (e->kind == IR_E_LOAD) {
    if (*n < CG_MAX_OVERRIDES && vec_access(c, blk, l, e->u.load.buf, e->u.load.idx, &acc[*n]))
      acc[(*n)++].load = e;
    return;
  }
  if (e->kind == IR_E_SELECT) { /* only the chosen side may be loaded */
    find_loads(c, blk, l, e->u.sel.cond, acc, n);
    return;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int nk = ir_expr_children(e, kids);
  for (int i = 0; i < nk; i++) find_loads(c, blk, l, kids[i], acc, n);
}

static bool allocates_at(const cg_ctx_t *c, const ir_loop_t *l) {
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].b && c->bufs[i].sized && c->bufs[i].alloc_at == l) return true;
  return false;
}

/* Does e use v outside the loads that vector lanes replace? */
static bool uses_outside(const ir_expr_t *e, const ir_var_t *v, const vec_access_t *acc, int n) {
  if (!e) return false;
  if (e->kind == IR_E_VAR) return e->u.var == v;
  for (int i = 0; i < n && e->kind == IR_E_LOAD; i++)
    if (acc[i].load == e) return false;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int nk = ir_expr_children(e, kids);
  for (int i = 0; i < nk; i++)
    if (uses_outside(kids[i], v, acc, n)) return true;
  return false;
}

/* One scalar assignment per lane; only the iterators the lane still needs
 * (those of scalar loads) are computed. */
static void emit_lanes(cg_ctx_t *c, const ir_loop_t *l, const ir_block_t *b, const vec_access_t *acc,
                       int n, const char *out) {
  static const char comp[] = "xyzw";
  const ir_expr_t *value = b->body->u.store.value;
  bool *need = tn_xcalloc((size_t)b->niters + 1, sizeof *need), need_lane = false;
  for (int i = 0; i < b->niters; i++) {
    need[i] = uses_outside(value, b->iters[i].var, acc, n);
    need_lane = need_lane || (need[i] && ir_expr_uses_var(b->iters[i].binding, l->var));
  }
  const ir_block_t *outer = c->blk;
  for (int lane = 0; lane < l->extent; lane++) {
    for (int i = 0; i < n; i++) {
      c->ovr_expr[i] = acc[i].load;
      c->ovr_text[i] = tn_arena_printf(c->scratch->arena, "tuned_vec%d_%d.%c", c->tmp, i, comp[lane]);
    }
    cg_line(c, "{");
    c->ind++;
    if (need_lane) cg_line(c, "int %s = %d;", cg_var(c, l->var), lane);
    for (int i = 0; i < b->niters; i++)
      if (need[i]) cg_line(c, "int %s = %s;", cg_var(c, b->iters[i].var), cg_expr_str(c, b->iters[i].binding));
    c->blk = b;
    c->novr = n;
    cg_line(c, "%s.%c = %s;", out, comp[lane], cg_expr_str(c, value));
    c->novr = 0;
    c->blk = outer;
    c->ind--;
    cg_line(c, "}");
  }
  free(need);
}

/* Whether the statements here run under a thread guard (surplus threads of
 * a bound loop skip them): a vector access would then be partial. */
static bool thread_guarded(cg_ctx_t *c) {
  tn_buf_t guard;
  tn_buf_init(&guard);
  cg_thread_guard(c, &guard);
  bool guarded = guard.len > 0;
  tn_buf_free(&guard);
  return guarded;
}

/* CUDA: a loop that only copies a 16-bit buffer into another of its type,
 * contiguous and aligned, 4, 8 or 16 bytes in all (float16 and bfloat16 tiles
 * of 2, 4 or 8: half8 as float4), moves the bytes at once: cp.async in a
 * pipelined loop's copies, else one float/float2/float4 load and store. */
static bool try_raw_copy(cg_ctx_t *c, const ir_loop_t *l) {
  const ir_stmt_t *bs = cg_strip_seq(l->body);
  if (c->d->target != CG_TARGET_CUDA || !bs || bs->kind != IR_S_BLOCK || allocates_at(c, l)) return false;
  const ir_block_t *b = &bs->u.block;
  const ir_stmt_t *st = b->body;
  if (b->init || b->predicate || !st || st->kind != IR_S_STORE || st->u.store.value->kind != IR_E_LOAD) return false;
  const ir_expr_t *ld = st->u.store.value;
  const ir_buffer_t *dst = st->u.store.buf, *src = ld->u.load.buf;
  int64_t bytes = l->extent * ir_dtype_bytes(dst->dtype);
  /* 16-bit types only: float32 copies take the float2/float4 path below (the same bytes) */
  if (src->dtype != dst->dtype || ir_dtype_bytes(dst->dtype) != 2 || (bytes != 4 && bytes != 8 && bytes != 16))
    return false;
  bool guarded = thread_guarded(c);
  vec_access_t so, lo;
  if (guarded || !vec_access_of(c, b, l, dst, st->u.store.idx, true, &so) ||
      !vec_access_of(c, b, l, src, ld->u.load.idx, true, &lo))
    return false;
  const char *dn = c->bufs[dst->id].name, *sn = c->bufs[src->id].name, *v = cg_var(c, l->var);
  if (c->async_copy && dst->scope == IR_SCOPE_SHARED && src->scope == IR_SCOPE_GLOBAL) {
    cg_line(c, "tuned_cp_async%lld(%s + (%s), %s + (%s));  /* vectorized loop %s */", (long long)bytes, dn, so.base,
            sn, lo.base, v);
  } else {
    const char *t = bytes == 4 ? "float" : bytes == 8 ? "float2" : "float4";
    cg_line(c, "*(%s *)(%s + (%s)) = *(const %s *)(%s + (%s));  /* vectorized loop %s: %lld bytes */", t, dn, so.base,
            t, sn, lo.base, v, (long long)bytes);
  }
  cg_sync_note(c, bs);
  return true;
}

bool cg_try_vectorize(cg_ctx_t *c, const ir_loop_t *l) {
  if (try_raw_copy(c, l)) return true;
  int64_t w = l->extent;
  const ir_stmt_t *bs = cg_strip_seq(l->body);
  if ((w != 2 && w != 4) || !bs || bs->kind != IR_S_BLOCK || allocates_at(c, l)) return false;
  const ir_block_t *b = &bs->u.block;
  const ir_stmt_t *st = b->body;
  if (b->init || b->predicate || !st || st->kind != IR_S_STORE) return false;
  bool guarded = thread_guarded(c);
  vec_access_t store, loads[CG_MAX_OVERRIDES];
  if (guarded || !vec_access(c, b, l, st->u.store.buf, st->u.store.idx, &store)) return false;
  int n = 0;
  find_loads(c, b, l, st->u.store.value, loads, &n);
  if (c->async_copy && n == 1 && st->u.store.value == loads[0].load &&
      st->u.store.buf->scope == IR_SCOPE_SHARED && loads[0].buf->scope == IR_SCOPE_GLOBAL) {
    /* a copy from global into shared memory of a pipelined loop: cp.async */
    cg_line(c, "tuned_cp_async%lld(%s + (%s), %s + (%s));  /* vectorized loop %s */", (long long)(4 * w),
            c->bufs[st->u.store.buf->id].name, store.base, c->bufs[loads[0].buf->id].name, loads[0].base,
            cg_var(c, l->var));
    cg_sync_note(c, bs);
    return true;
  }
  cg_line(c, "{  /* vectorized loop %s: float%lld */", cg_var(c, l->var), (long long)w);
  c->ind++;
  int id = c->tmp;
  for (int i = 0; i < n; i++) {
    tn_buf_t ld;
    tn_buf_init(&ld);
    tn_buf_printf(&ld, c->d->vec_load, c->bufs[loads[i].buf->id].name, loads[i].base, (int)w);
    cg_line(c, "const float%lld tuned_vec%d_%d = %s;", (long long)w, id, i, tn_buf_str(&ld));
    tn_buf_free(&ld);
  }
  char *out = tn_arena_printf(c->scratch->arena, "tuned_vout%d", id);
  cg_line(c, "float%lld %s;", (long long)w, out);
  emit_lanes(c, l, b, loads, n, out);
  c->tmp++;
  tn_buf_indent(c->o, 2 * c->ind);
  tn_buf_printf(c->o, c->d->vec_store, c->bufs[st->u.store.buf->id].name, store.base, out, (int)w);
  tn_buf_putc(c->o, '\n');
  c->ind--;
  cg_line(c, "}");
  cg_sync_note(c, bs);
  return true;
}
