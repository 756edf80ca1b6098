/* promote.c — register accumulators on the C target.
 *
 * A serial reduction loop L whose body is a perfect nest of loops around
 * one reduction update block, `X[v..] = X[v..] op f(...)` with X indexed by
 * the block's spatial iterators, updates the same tile of X on every
 * iteration of L: the elements that the spatial loops of the nest (the
 * "tile" loops) reach.  The nest may hold further reduction loops between
 * the tile loops (the k_0 i_2 j_2 k_1 i_3 j_3 nest of a multi-level tiling):
 * they change what is added, not where.  TVM's LLVM backend keeps such a
 * tile in registers (scalar promotion); gcc does not move these loads and
 * stores out of L by itself, so every multiply-add of a tiled matmul costs
 * a load and a store of the accumulator.  Here the tile is copied into a
 * local array before L, the update reads and writes the array, and the
 * array is copied back after L; once the tile loops are unrolled and
 * vectorised, gcc keeps the array in vector registers.  The outermost loop
 * that qualifies wins (emission asks from the outside in), so the tile is
 * loaded and stored once for all the reduction loops it spans.
 *
 * Conditions (each one needed for the rewrite to compute the same values):
 * L and the nest's loops are serial/unrolled (tile loops may also be
 * vectorized); the block has no predicate, no init and no allocations; X
 * is not stored as 16-bit floats (each store rounds); every index of X is
 * a distinct spatial iterator, and every load of X in the update reads that
 * same element; L and the inner reduction loops feed reduce iterators and
 * no spatial one (so the element does not change with them) and the tile
 * loops feed only spatial iterators (so distinct tile points are distinct
 * elements: bindings are bijective).
 *
 * Two narrower forms vectorise L itself, as an `omp simd reduction` (gcc
 * may not reorder a float sum unless told, so an array tile updated in L
 * runs one element at a time along L).  simd: L alone around the update of
 * one element, kept in a scalar (a softmax's row sum).  lanes: a tile of at
 * most PROMO_LANES_MAX elements that L alone reduces (further reduction
 * loops have one iteration, no tile loop is vectorized) where every load of
 * the update moves by 0 or 1 element per iteration of L (gemv's 8 rows
 * against a run of x; a matmul's k loop, striding through B, keeps the
 * array): one scalar per element, the tile loops printed unrolled
 * (cg_promo_tile, their values in cur[]), L reducing all the scalars. */
#include "cg_internal.h"
#include "ir/affine.h"

#include <stdio.h>
#include <string.h>

#define PROMO_MAX_ELEMS 256 /* 32 AVX registers' worth of floats */
#define PROMO_MIN_TRIPS 2   /* updates of each element under L: one would save nothing */
#define PROMO_LANES_MAX 16  /* scalar accumulators of a lanes tile */

/* v appears in the binding of some iterator of kind `kind` of b. */
static bool feeds(const ir_block_t *b, const ir_var_t *v, ir_iter_kind_t kind) {
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == kind && b->iters[i].binding && ir_expr_uses_var(b->iters[i].binding, v)) return true;
  return false;
}

static bool is_spatial_iter(const ir_block_t *b, const ir_expr_t *e) {
  if (e->kind != IR_E_VAR) return false;
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].var == e->u.var) return b->iters[i].kind == IR_ITER_SPATIAL;
  return false;
}

/* Every load of buffer x in e reads exactly idx (the same iterator vars). */
static bool loads_match(const ir_expr_t *e, const ir_buffer_t *x, ir_expr_t *const *idx, int n) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == x) {
    for (int d = 0; d < n; d++)
      if (e->u.load.idx[d]->kind != IR_E_VAR || e->u.load.idx[d]->u.var != idx[d]->u.var) return false;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++)
    if (!loads_match(kids[i], x, idx, n)) return false;
  return true;
}

/* Sorts the perfect nest under L into tile loops (spatial only) and inner
 * reduction loops (reduce only, feeding nothing, or of extent 1: the
 * element does not change with them); returns the block, NULL when the
 * nest does not qualify.  *trips: how often L and the inner reduction loops
 * update one element (counted up to PROMO_MIN_TRIPS). */
static const ir_block_t *sort_nest(const ir_loop_t *l, cg_promo_t *p, int64_t *trips) {
  const ir_stmt_t *t = cg_strip_seq(l->body);
  const ir_loop_t *nest[2 * CG_PROMO_MAX_TILE];
  int n = 0;
  while (t && t->kind == IR_S_LOOP) {
    if (n == (int)TN_ARRAY_LEN(nest)) return NULL;
    nest[n++] = &t->u.loop;
    t = cg_strip_seq(t->u.loop.body);
  }
  if (!t || t->kind != IR_S_BLOCK) return NULL;
  const ir_block_t *b = &t->u.block;
  if (feeds(b, l->var, IR_ITER_SPATIAL) || !feeds(b, l->var, IR_ITER_REDUCE)) return NULL;
  *trips = l->extent;
  p->elems = 1;
  for (int i = 0; i < n; i++) {
    const ir_loop_t *il = nest[i];
    bool sp = il->extent > 1 && feeds(b, il->var, IR_ITER_SPATIAL);
    bool rd = il->extent > 1 && feeds(b, il->var, IR_ITER_REDUCE);
    if (sp && rd) return NULL;
    if (il->extent == 1) { /* its variable is 0 throughout: nothing to index */
      if (p->nred == CG_PROMO_MAX_TILE) return NULL;
      p->red[p->nred++] = il;
    } else if (sp) {
      if (il->kind != IR_LOOP_SERIAL && il->kind != IR_LOOP_UNROLLED && il->kind != IR_LOOP_VECTORIZED) return NULL;
      if (p->ntile == CG_PROMO_MAX_TILE || (p->elems *= il->extent) > PROMO_MAX_ELEMS) return NULL;
      p->tile[p->ntile++] = il;
    } else {
      /* a vectorized reduction loop would carry the accumulator across lanes */
      if (il->kind != IR_LOOP_SERIAL && il->kind != IR_LOOP_UNROLLED) return NULL;
      if (p->nred == CG_PROMO_MAX_TILE) return NULL;
      p->red[p->nred++] = il;
      if (*trips < PROMO_MIN_TRIPS) *trips *= il->extent;
    }
  }
  return b;
}

/* The loads of buffer x in e. */
static int count_loads(const ir_expr_t *e, const ir_buffer_t *x) {
  int n = e->kind == IR_E_LOAD && e->u.load.buf == x;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++) n += count_loads(kids[i], x);
  return n;
}

/* X = X op f(...) (either order) with f not reading X and op +, max or min:
 * a reduction that the loop may split over vector lanes.  For floats a sum
 * reorders the additions (an error of a few ulp of the sum, as every
 * vectorised BLAS/numpy sum has; the reference evaluator's tolerance is 1e-4
 * of the output's norm); max and min are exact in any order. */
static bool plain_reduce(const ir_stmt_t *st) {
  const ir_expr_t *v = st->u.store.value;
  const ir_buffer_t *x = st->u.store.buf;
  if ((v->kind != IR_E_ADD && v->kind != IR_E_MAX && v->kind != IR_E_MIN) || count_loads(v, x) != 1) return false;
  const ir_expr_t *a = v->u.bin.a, *b = v->u.bin.b;
  return (a->kind == IR_E_LOAD && a->u.load.buf == x) || (b->kind == IR_E_LOAD && b->u.load.buf == x);
}

/* Every load in e other than of x walks memory with stride 0 or 1 along
 * L's variable, and one with 1 (read over loops, through the bindings). */
static bool contiguous_in(cg_ctx_t *c, const ir_block_t *b, const ir_expr_t *e, const ir_buffer_t *x,
                          const ir_var_t *v, int *ones) {
  if (e->kind == IR_E_LOAD && e->u.load.buf != x) {
    int64_t coef;
    ir_expr_t *flat = cg_flat_index_loops(c, b, e->u.load.buf, e->u.load.idx);
    if (!ir_affine_coef_of(flat, v, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &coef) || (coef != 0 && coef != 1))
      return false;
    *ones += coef == 1;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++)
    if (!contiguous_in(c, b, kids[i], x, v, ones)) return false;
  return true;
}

/* A small tile that L alone reduces (its other reduction loops have one
 * iteration), none of its loops vectorized, and L contiguous in what the
 * update loads: gemv's 8 rows against a run of x.  Vectorised over L with
 * one scalar accumulator per element, every row streams in full vectors;
 * as an array the tile is reduced one element at a time (gcc may not
 * reorder the sums). */
static bool lanes_fit(cg_ctx_t *c, const cg_promo_t *p) {
  if (p->ntile == 0 || p->elems > PROMO_LANES_MAX) return false;
  for (int i = 0; i < p->nred; i++)
    if (p->red[i]->extent > 1) return false;
  for (int i = 0; i < p->ntile; i++)
    if (p->tile[i]->kind == IR_LOOP_VECTORIZED) return false;
  int ones = 0;
  return contiguous_in(c, p->blk, p->store->u.store.value, p->store->u.store.buf, p->loop->var, &ones) && ones > 0;
}

bool cg_promo_find(cg_ctx_t *c, const ir_stmt_t *s, cg_promo_t *p) {
  const ir_loop_t *l = &s->u.loop;
  memset(p, 0, sizeof *p);
  if (c->d->gpu || (l->kind != IR_LOOP_SERIAL && l->kind != IR_LOOP_UNROLLED) || c->promo) return false;
  int64_t trips = 0;
  const ir_block_t *b = sort_nest(l, p, &trips);
  if (!b || trips < PROMO_MIN_TRIPS) return false;
  const ir_stmt_t *st = b->body;
  if (b->predicate || b->init || b->nallocs || !st || st->kind != IR_S_STORE) return false;
  const ir_buffer_t *x = st->u.store.buf;
  if (cg_half_storage(c, x) || cg_bf16_storage(x) || st->u.store.n != x->ndim) return false;
  for (int d = 0; d < st->u.store.n; d++) {
    if (!is_spatial_iter(b, st->u.store.idx[d])) return false;
    for (int e = 0; e < d; e++)
      if (st->u.store.idx[e]->u.var == st->u.store.idx[d]->u.var) return false;
  }
  if (!loads_match(st->u.store.value, x, st->u.store.idx, st->u.store.n)) return false;
  p->loop = l;
  p->blk = b;
  p->store = st;
  /* L directly around the update, reducing into one element: gcc keeps a
   * serial float sum serial (it may not reorder it) unless told the loop is
   * a reduction; a softmax's row sum of exp then runs one lane wide, and its
   * row max too */
  p->simd = p->ntile == 0 && p->nred == 0 && plain_reduce(st) && x->dtype != IR_BOOL;
  p->lanes = !p->simd && plain_reduce(st) && x->dtype != IR_BOOL && lanes_fit(c, p);
  p->op = st->u.store.value->kind;
  return true;
}

/* The tile loops as plain, fully unrolled loops around `line` (printed with
 * the block's iterators declared), in a scope where the variables of L and
 * of the inner reduction loops are 0: they feed only reduce iterators (or
 * nothing), which the copies do not use. */
static void copy_nest(cg_ctx_t *c, const cg_promo_t *p, bool in) {
  cg_line(c, "{");
  c->ind++;
  cg_line(c, "int %s = 0;", cg_var(c, p->loop->var));
  for (int i = 0; i < p->nred; i++) cg_line(c, "int %s = 0;", cg_var(c, p->red[i]->var));
  for (int i = 0; i < p->ntile; i++) {
    const ir_loop_t *tl = p->tile[i];
    const char *v = cg_var(c, tl->var);
    cg_line(c, "#pragma GCC unroll %lld", (long long)TN_MIN(tl->extent, 64));
    cg_line(c, "for (int %s = 0; %s < %lld; ++%s) {", v, v, (long long)tl->extent, v);
    c->ind++;
  }
  cg_emit_iters(c, p->blk, false);
  const ir_block_t *outer = c->blk;
  c->blk = p->blk;
  const ir_buffer_t *x = p->store->u.store.buf;
  if (in) {
    const char *ix = cg_expr_str(c, cg_flat_index(c, x, p->store->u.store.idx));
    cg_line(c, "%s = %s[%s];", p->ref, c->bufs[x->id].name, ix);
  } else {
    cg_emit_store_text(c, x, p->store->u.store.idx, p->ref);
  }
  c->blk = outer;
  for (int i = 0; i <= p->ntile; i++) {
    c->ind--;
    cg_line(c, "}");
  }
}

/* The tile element at the tile loops' values cur[] (row-major). */
static int64_t lane_of(const cg_promo_t *p) {
  int64_t e = 0;
  for (int i = 0; i < p->ntile; i++) e = e * p->tile[i]->extent + p->cur[i];
  return e;
}

/* lanes: the copies element by element, the tile loops' values as constants */
static void copy_lanes(cg_ctx_t *c, const cg_promo_t *p, bool in) {
  const ir_buffer_t *x = p->store->u.store.buf;
  for (int64_t e = 0; e < p->elems; e++) {
    for (int64_t i = p->ntile - 1, r = e; i >= 0; i--) p->cur[i] = r % p->tile[i]->extent, r /= p->tile[i]->extent;
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "int %s = 0;", cg_var(c, p->loop->var));
    for (int i = 0; i < p->nred; i++) cg_line(c, "int %s = 0;", cg_var(c, p->red[i]->var));
    for (int i = 0; i < p->ntile; i++) cg_line(c, "int %s = %lld;", cg_var(c, p->tile[i]->var), (long long)p->cur[i]);
    cg_emit_iters(c, p->blk, false);
    const ir_block_t *outer = c->blk;
    c->blk = p->blk;
    if (in) {
      const char *ix = cg_expr_str(c, cg_flat_index(c, x, p->store->u.store.idx));
      cg_line(c, "%s = %s[%s];", p->names[e], c->bufs[x->id].name, ix);
    } else {
      cg_emit_store_text(c, x, p->store->u.store.idx, p->names[e]);
    }
    c->blk = outer;
    c->ind--;
    cg_line(c, "}");
  }
}

static void open_lanes(cg_ctx_t *c, cg_promo_t *p) {
  const ir_buffer_t *x = p->store->u.store.buf;
  p->names = tn_arena_alloc(c->scratch->arena, sizeof *p->names * (size_t)p->elems);
  p->cur = tn_arena_alloc(c->scratch->arena, sizeof *p->cur * CG_PROMO_MAX_TILE);
  tn_buf_t decl;
  tn_buf_init(&decl);
  for (int64_t e = 0; e < p->elems; e++) {
    char n[sizeof p->name + 24];
    snprintf(n, sizeof n, "%s_%lld", p->name, (long long)e);
    p->names[e] = tn_arena_strdup(c->scratch->arena, n);
    tn_buf_printf(&decl, "%s%s", e ? ", " : "", n);
  }
  cg_line(c, "{  /* %s_*: the %lld elements of %s this loop accumulates, one scalar each */", p->name,
          (long long)p->elems, c->bufs[x->id].name);
  c->ind++;
  cg_line(c, "%s %s;", cg_storage_type(c, x), tn_buf_str(&decl));
  tn_buf_free(&decl);
  copy_lanes(c, p, true);
  c->promo = p;
}

void cg_promo_open(cg_ctx_t *c, cg_promo_t *p) {
  const ir_buffer_t *x = p->store->u.store.buf;
  snprintf(p->name, sizeof p->name, "tuned_acc%d", c->tmp++);
  if (p->lanes) {
    open_lanes(c, p);
    return;
  }
  /* Row-major position in the tile: ((t0 * e1 + t1) * e2 + t2) ... */
  tn_buf_t lin;
  tn_buf_init(&lin);
  tn_buf_printf(&lin, "%s[", p->name);
  for (int i = 1; i < p->ntile; i++) tn_buf_put(&lin, "(");
  for (int i = 0; i < p->ntile; i++) {
    if (i > 0) tn_buf_printf(&lin, ") * %lld + ", (long long)p->tile[i]->extent);
    tn_buf_put(&lin, cg_var(c, p->tile[i]->var));
  }
  tn_buf_put(&lin, p->ntile ? "]" : "0]");
  p->ref = tn_arena_strdup(c->scratch->arena, p->simd ? p->name : tn_buf_str(&lin));
  tn_buf_free(&lin);
  cg_line(c, "{  /* %s: the %lld elements of %s this loop accumulates, kept local */", p->name,
          (long long)p->elems, c->bufs[x->id].name);
  c->ind++;
  if (p->simd) cg_line(c, "%s %s;", cg_storage_type(c, x), p->name);
  else cg_line(c, "%s %s[%lld];", cg_storage_type(c, x), p->name, (long long)p->elems);
  copy_nest(c, p, true);
  c->promo = p;
}

void cg_promo_close(cg_ctx_t *c, cg_promo_t *p) {
  c->promo = NULL;
  if (p->lanes) copy_lanes(c, p, false);
  else copy_nest(c, p, false);
  c->ind--;
  cg_line(c, "}");
}

const char *cg_promo_ref(const cg_ctx_t *c, const ir_buffer_t *b) {
  const cg_promo_t *p = c->promo;
  if (!p || c->blk != p->blk || b != p->store->u.store.buf) return NULL;
  return p->lanes ? p->names[lane_of(p)] : p->ref;
}

int cg_promo_tile(const cg_ctx_t *c, const ir_loop_t *l) {
  const cg_promo_t *p = c->promo;
  for (int i = 0; p && p->lanes && i < p->ntile; i++)
    if (p->tile[i] == l) return i;
  return -1;
}

bool cg_promo_pragma(cg_ctx_t *c, const ir_loop_t *l) {
  const cg_promo_t *p = c->promo;
  if (!p || p->loop != l || !(p->simd || p->lanes)) return false;
  const char *op = p->op == IR_E_MAX ? "max" : p->op == IR_E_MIN ? "min" : "+";
  if (p->simd) {
    cg_line(c, "#pragma omp simd reduction(%s:%s)", op, p->name);
    return true;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  for (int64_t e = 0; e < p->elems; e++) tn_buf_printf(&b, "%s%s", e ? ", " : "", p->names[e]);
  cg_line(c, "#pragma omp simd reduction(%s:%s)", op, tn_buf_str(&b));
  tn_buf_free(&b);
  return true;
}
