/* analysis.c — read-only questions the rules and postprocessors ask about a
 * (scheduled) function: loops around a block, loop and iterator kinds,
 * producers and consumers, read/write access patterns, and the predicates
 * that decide where multi-level tiling, rfactor and cross-thread reduction
 * apply (TVM's NeedsMultiLevelTiling, NeedsRFactorOrCrossThreadReduction). */
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

/* ---- blocks and loops ---------------------------------------------------- */

ir_block_t *smp_block(const ir_func_t *f, const char *name) {
  ir_stmt_t *s = ir_func_find_block(f, name);
  return s ? &s->u.block : NULL;
}

int smp_read_index(const ir_block_t *b, const char *name) {
  for (int r = 0; r < b->nreads; r++)
    if (!strcmp(b->reads[r].buf->name, name)) return r;
  return -1;
}

int smp_block_loops(const ir_func_t *f, const ir_block_t *b, ir_loop_t ***loops) {
  return ir_enclosing_loops(f, b->uid, loops);
}

/* ---- loop and block kinds ------------------------------------------------ */

typedef struct use_count {
  const ir_var_t *v;
  int spatial, reduce;
} use_count_t;

static bool use_visit(ir_stmt_t *s, void *p) {
  use_count_t *u = p;
  if (s->kind != IR_S_BLOCK) return s->kind != IR_S_STORE;
  const ir_block_t *b = &s->u.block;
  for (int i = 0; i < b->niters; i++)
    if (ir_expr_uses_var(b->iters[i].binding, u->v)) {
      if (b->iters[i].kind == IR_ITER_REDUCE) u->reduce++;
      else u->spatial++;
    }
  return false; /* nested blocks are another scope */
}

smp_iter_type_t smp_loop_iter_type(const ir_loop_t *l) {
  use_count_t u = {l->var, 0, 0};
  ir_stmt_walk(l->body, use_visit, &u);
  if (u.spatial && u.reduce) return SMP_OPAQUE;
  return u.reduce ? SMP_REDUCE : SMP_DATA_PAR;
}

bool smp_single_child(const ir_loop_t *l) {
  return l->body->kind != IR_S_SEQ || l->body->u.seq.n == 1;
}

bool smp_binds_to(const sch_inst_t *in, ir_thread_tag_t tag) {
  ir_thread_tag_t t;
  return in->kind == SCH_BIND && in->nattrs >= 1 && in->attrs[0].kind == SCH_ARG_STR &&
         ir_thread_tag_parse(in->attrs[0].s, &t) == 0 && t == tag;
}

bool smp_trivial_binding(const ir_func_t *f, const ir_block_t *b) {
  ir_loop_t **loops;
  int n = smp_block_loops(f, b, &loops);
  bool trivial = n == b->niters;
  for (int i = 0; i < n && trivial; i++) {
    const ir_expr_t *e = b->iters[i].binding;
    trivial = e && e->kind == IR_E_VAR && e->u.var == loops[i]->var;
  }
  free(loops);
  return trivial;
}

bool smp_block_is_spatial(const ir_block_t *b) {
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind != IR_ITER_SPATIAL) return false;
  return true;
}

bool smp_func_is_spatial(const ir_func_t *f) {
  ir_block_t **all;
  int n = ir_blocks(f, &all);
  bool spatial = true;
  for (int i = 0; i < n && spatial; i++) spatial = smp_block_is_spatial(all[i]) && !all[i]->init;
  free(all);
  return spatial;
}

bool smp_is_tiled(const ir_block_t *b) { return ir_annot_get(b->annots, b->nannots, SMP_ANN_TILING) != NULL; }


/* ---- where the tiling rules apply ------------------------------------------ */

bool smp_needs_multi_level_tiling(const ir_func_t *f, const ir_block_t *b) {
  if (smp_is_tiled(b) || b->nwrites != 1 || b->nreads == 0 || smp_block_is_spatial(b) ||
      !smp_trivial_binding(f, b))
    return false;
  /* Spatial iterators of extent 1 say nothing about reuse (TVM skips them). */
  int unused = 0;
  for (int r = 0; r < b->nreads; r++) {
    const ir_region_t *rd = &b->reads[r];
    for (int q = 0; q < r; q++)
      if (b->reads[q].buf == rd->buf) return false; /* a buffer read twice */
    if (rd->buf == b->writes[0].buf) continue;
    for (int i = 0; i < b->niters; i++) {
      if (b->iters[i].kind != IR_ITER_SPATIAL || b->iters[i].extent == 1) continue;
      bool used = false;
      for (int d = 0; d < rd->buf->ndim && !used; d++) {
        if (!ir_expr_is_const_int(rd->dims[d].extent, NULL)) return false;
        used = ir_expr_uses_var(rd->dims[d].min, b->iters[i].var);
      }
      unused += !used;
    }
  }
  return unused >= 1;
}

/* Whether the loops around b form a perfect nest holding only b. */
static bool perfect_nest(ir_loop_t *const *loops, int n, const ir_block_t *b) {
  for (int i = 0; i < n; i++) {
    const ir_stmt_t *body = loops[i]->body;
    while (body->kind == IR_S_SEQ && body->u.seq.n == 1) body = body->u.seq.items[0];
    if (i + 1 < n ? (body->kind != IR_S_LOOP || &body->u.loop != loops[i + 1])
                  : (body->kind != IR_S_BLOCK || &body->u.block != b))
      return false;
  }
  return true;
}

bool smp_needs_rfactor_or_xthread(const ir_func_t *f, const ir_block_t *b, int64_t max_parallel_extent,
                                  int64_t max_parallel_basic) {
  if (b->nwrites == 0 || !b->init || !smp_trivial_binding(f, b) || smp_is_tiled(b)) return false;
  ir_loop_t **loops;
  int n = smp_block_loops(f, b, &loops);
  int64_t space = 1, reduce = 1;
  bool has_reduce = false, opaque = false;
  for (int i = 0; i < n && !opaque; i++) {
    smp_iter_type_t t = smp_loop_iter_type(loops[i]);
    opaque = t == SMP_OPAQUE;
    has_reduce |= t == SMP_REDUCE;
    if (t == SMP_REDUCE) reduce *= loops[i]->extent;
    else space *= loops[i]->extent;
  }
  bool perfect = !opaque && has_reduce && perfect_nest(loops, n, b);
  free(loops);
  if (!perfect) return false;
  if (smp_needs_multi_level_tiling(f, b)) return !(space >= reduce || space > max_parallel_extent);
  return reduce > 1 && reduce > max_parallel_basic;
}

/* ---- access patterns ----------------------------------------------------- */

/* e as `var + c` (c may be 0); NULL if it is not of that form. */
static const ir_var_t *var_plus_const(const ir_expr_t *e) {
  ir_affine_t a = {0};
  const ir_var_t *v = ir_affine_of(e, 0, &a) && a.n == 1 && a.terms[0].coef == 1 ? a.terms[0].var : NULL;
  ir_affine_free(&a);
  return v;
}

void smp_rw_pattern(const ir_region_t *read, const ir_region_t *write, bool *exists, bool *injective,
                    bool *ordered) {
  *exists = *injective = *ordered = false;
  const ir_var_t *wvars[IR_MAX_DIMS];
  int wn = write->buf->ndim, count[IR_MAX_DIMS] = {0};
  for (int d = 0; d < wn; d++) {
    if (write->dims[d].min->kind != IR_E_VAR) return;
    wvars[d] = write->dims[d].min->u.var;
  }
  int last = -1;
  *ordered = true;
  for (int d = 0; d < read->buf->ndim; d++) {
    const ir_expr_t *m = read->dims[d].min;
    if (ir_expr_is_const_int(m, NULL)) continue;
    const ir_var_t *v = var_plus_const(m);
    int at = -1;
    for (int k = 0; k < wn && v; k++)
      if (wvars[k] == v) at = k;
    if (at < 0) {
      *ordered = false;
      return;
    }
    count[at]++;
    if (last > at) *ordered = false;
    last = at;
  }
  *exists = *injective = true;
  for (int k = 0; k < wn; k++)
    if (count[k] > 1) *injective = false;
}

bool smp_is_write_cache_like(const ir_block_t *b) {
  if (b->nwrites != 1) return false;
  for (int r = 0; r < b->nreads; r++) {
    bool exists, injective, ordered;
    smp_rw_pattern(&b->reads[r], &b->writes[0], &exists, &injective, &ordered);
    if (!injective || !ordered) return false;
  }
  return true;
}

typedef bool (*expr_pred)(const ir_expr_t *e, const void *ctx);

static bool expr_any(const ir_expr_t *e, expr_pred pred, const void *ctx) {
  if (!e) return false;
  if (pred(e, ctx)) return true;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (expr_any(kids[i], pred, ctx)) return true;
  return false;
}

static bool block_any(const ir_block_t *b, expr_pred pred, const void *ctx) {
  const ir_stmt_t *sts[2] = {b->body, b->init};
  for (int i = 0; i < 2; i++)
    if (sts[i] && sts[i]->kind == IR_S_STORE && expr_any(sts[i]->u.store.value, pred, ctx)) return true;
  return false;
}

static bool is_call_to(const ir_expr_t *e, const void *fn) {
  return e->kind == IR_E_CALL && e->u.call.fn == *(const ir_math_fn_t *)fn;
}

static bool is_select(const ir_expr_t *e, const void *ctx) {
  (void)ctx;
  return e->kind == IR_E_SELECT;
}

bool smp_block_calls(const ir_block_t *b, ir_math_fn_t fn) { return block_any(b, is_call_to, &fn); }
bool smp_block_has_select(const ir_block_t *b) { return block_any(b, is_select, NULL); }

/* ---- linear index analysis ----------------------------------------------- */

/* Forms here see through integer casts and take other non-affine parts
 * (floordiv, floormod, products of variables, ...) as atoms: an index is
 * linear in a variable that no atom uses. */
#define SMP_AFFINE (IR_AFFINE_ATOMS | IR_AFFINE_CASTS)

bool smp_access_coef(const ir_block_t *b, const ir_expr_t *e, const ir_var_t *v, int64_t *coef) {
  bool ok = true;
  int64_t sum = 0;
  for (int k = 0; ok && k < b->niters; k++) {
    int64_t c_iter, c_loop;
    if (!ir_expr_uses_var(b->iters[k].binding, v)) continue;
    ok = ir_affine_coef_of(b->iters[k].binding, v, SMP_AFFINE, &c_loop) &&
         ir_affine_coef_of(e, b->iters[k].var, SMP_AFFINE, &c_iter) && !__builtin_mul_overflow(c_iter, c_loop, &c_iter) &&
         !__builtin_add_overflow(sum, c_iter, &sum);
  }
  *coef = ok ? sum : 0;
  return ok;
}

/* ---- matmul-like blocks ---------------------------------------------------- */

static bool idx_uses(ir_expr_t *const *idx, int n, const ir_var_t *v) {
  for (int d = 0; d < n; d++)
    if (ir_expr_uses_var(idx[d], v)) return true;
  return false;
}

/* A load, or with `casts` a load converted to float32 (float32(A[i, k])). */
static const ir_expr_t *operand_load(const ir_expr_t *e, bool casts) {
  if (casts && e->kind == IR_E_CAST && e->dtype == IR_FLOAT32) e = e->u.un;
  return e->kind == IR_E_LOAD ? e : NULL;
}

bool smp_matmul_roles(const ir_block_t *b, smp_roles_t *r, bool casts) {
  const ir_stmt_t *st = b->body;
  if (!st || st->kind != IR_S_STORE || st->u.store.buf->dtype != IR_FLOAT32 || st->u.store.n < 2) return false;
  const ir_expr_t *v = st->u.store.value;
  if (v->kind != IR_E_ADD) return false;
  const ir_expr_t *acc = v->u.bin.a, *mul = v->u.bin.b;
  if (mul->kind != IR_E_MUL) acc = v->u.bin.b, mul = v->u.bin.a;
  if (mul->kind != IR_E_MUL || acc->kind != IR_E_LOAD || acc->u.load.buf != st->u.store.buf) return false;
  const ir_expr_t *x = operand_load(mul->u.bin.a, casts), *y = operand_load(mul->u.bin.b, casts);
  if (!x || !y || x->u.load.buf == y->u.load.buf) return false;
  const ir_expr_t *last_c = st->u.store.idx[st->u.store.n - 1];
  if (last_c->kind != IR_E_VAR) return false;
  /* B: the load one of whose indices is C's last (j); a dense layer's
   * weights W[j, k] are B transposed */
  int jx = -1, jy = -1;
  for (int d = 0; d < x->u.load.n; d++)
    if (ir_expr_equal(x->u.load.idx[d], last_c)) jx = d;
  for (int d = 0; d < y->u.load.n; d++)
    if (ir_expr_equal(y->u.load.idx[d], last_c)) jy = d;
  if ((jx < 0) == (jy < 0)) return false;
  const ir_expr_t *A = jx < 0 ? x : y, *B = jx < 0 ? y : x;
  r->jdim = jx < 0 ? jy : jx;
  r->a = A->u.load.buf->name;
  r->bdims = B->u.load.n;
  r->i = r->j = r->k = -1;
  for (int t = 0; t < b->niters; t++) {
    const ir_var_t *var = b->iters[t].var;
    bool inA = idx_uses(A->u.load.idx, A->u.load.n, var), inB = idx_uses(B->u.load.idx, B->u.load.n, var),
         inC = idx_uses(st->u.store.idx, st->u.store.n, var);
    if (b->iters[t].kind == IR_ITER_REDUCE) {
      if (!inA || !inB || inC || r->k >= 0) return false;
      r->k = t;
    } else if (var == last_c->u.var) {
      if (inA || !inB) return false;
      r->j = t;
    } else if (inA && !inB && inC) {
      if (r->i >= 0) return false;
      r->i = t;
    } else if (!(inA && inB && inC)) { /* a batch iterator indexes everything */
      return false;
    }
  }
  if (r->i < 0 || r->j < 0 || r->k < 0) return false;
  r->b = B->u.load.buf->name;
  r->m = b->iters[r->i].extent;
  r->n = b->iters[r->j].extent;
  return true;
}

/* ---- element offsets along loops ------------------------------------------ */

bool smp_offset_coefs(const ir_block_t *b, const ir_buffer_t *buf, ir_expr_t *const *idx, ir_loop_t *const *loops,
                      int nl, int64_t *coef, bool *affine) {
  ir_func_t *tmp = ir_func_new("offset");
  ir_var_t **from = tn_xmalloc(sizeof from[0] * (size_t)(b->niters + 1));
  ir_expr_t **to = tn_xmalloc(sizeof to[0] * (size_t)(b->niters + 1));
  for (int i = 0; i < b->niters; i++) from[i] = b->iters[i].var, to[i] = b->iters[i].binding;
  ir_bounds_t bd;
  ir_bounds_init(&bd);
  for (int l = 0; l < nl; l++) ir_bounds_set(&bd, loops[l]->var, 0, loops[l]->extent - 1);
  ir_expr_t *flat = ir_int(tmp, 0);
  int64_t rs = 1;
  for (int d = buf->ndim - 1; d >= 0; d--) {
    ir_expr_t *e = ir_expr_subst(tmp, idx[d], from, to, b->niters);
    flat = ir_bin(tmp, IR_E_ADD, flat, ir_bin(tmp, IR_E_MUL, e, ir_int(tmp, rs)));
    rs *= buf->shape[d];
  }
  flat = ir_simplify(tmp, flat, &bd);
  bool ok = true;
  for (int l = 0; l < nl && (ok || affine); l++) {
    bool a = ir_affine_coef_of(flat, loops[l]->var, SMP_AFFINE, &coef[l]);
    if (affine) affine[l] = a;
    if (!a) coef[l] = 0, ok = false;
  }
  ir_bounds_free(&bd);
  free(from);
  free(to);
  ir_func_free(tmp);
  return ok;
}
