/* blockize.c — blockize (the loop nest under a loop becomes the body of a new
 * block whose iterators are the outer parts of the inner block's; unlike
 * TVM, the inner block's bindings stay over the loops, so every pass that
 * reads a binding as a function of loops sees the same program) and
 * tensorize (a block nest matched against an intrinsic's description is
 * marked for the code generators to replace by the intrinsic's call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/intrin.h"
#include "sch_internal.h"

static const ir_stmt_t *strip_seq(const ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

/* The loops from `top` down to the one block under them (a perfect nest). */
typedef struct inner {
  ir_loop_t **loops;
  int n, cap;
  ir_stmt_t *block;
} inner_t;

static int collect_inner(ir_stmt_t *top, inner_t *in, tn_err_t *err) {
  ir_stmt_t *s = top;
  while (s && s->kind == IR_S_LOOP) {
    if (in->n == in->cap) in->loops = tn_xrealloc(in->loops, sizeof in->loops[0] * (size_t)(in->cap = in->cap ? in->cap * 2 : 8));
    in->loops[in->n++] = &s->u.loop;
    s = (ir_stmt_t *)strip_seq(s->u.loop.body);
  }
  if (!s || s->kind != IR_S_BLOCK || !s->u.block.body || s->u.block.body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL, "loop %s must hold a perfect loop nest around one compute block",
                      sch_loop_name(&top->u.loop));
  in->block = s;
  return TN_OK;
}

static bool is_inner_var(const inner_t *in, const ir_var_t *v) {
  for (int i = 0; i < in->n; i++)
    if (in->loops[i]->var == v) return true;
  return false;
}

/* One iterator split into outer * r + inner. */
typedef struct split_iter {
  ir_expr_t *outer_binding; /* over the loops outside */
  ir_expr_t *inner_part;    /* over the loops inside (NULL: none) */
  int64_t r;                /* the inner part's range [0, r) */
} split_iter_t;

/* The terms marked inner (or the others, with the constant), divided by div. */
static ir_expr_t *affine_part(ir_func_t *f, const ir_affine_t *a, const bool *inner, bool inner_terms, int64_t div) {
  ir_expr_t *e = NULL;
  for (int i = 0; i < a->n; i++) {
    const ir_affine_term_t *t = &a->terms[i];
    if (inner[i] != inner_terms) continue;
    ir_expr_t *term = t->coef / div == 1 ? t->e : ir_bin(f, IR_E_MUL, t->e, ir_int(f, t->coef / div));
    e = e ? ir_bin(f, IR_E_ADD, e, term) : term;
  }
  if (!inner_terms && (a->constant || !e)) {
    ir_expr_t *c = ir_int(f, a->constant / div);
    e = e ? ir_bin(f, IR_E_ADD, e, c) : c;
  }
  return e;
}

/* Whether e uses only the loops inside (and no loop outside them). */
static bool only_inner(const ir_expr_t *e, const inner_t *in, const ir_block_t *b) {
  (void)b;
  if (e->kind == IR_E_VAR) return is_inner_var(in, e->u.var);
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (!only_inner(kids[i], in, b)) return false;
  return true;
}

/* The binding as outer * r + inner: the inner part is its terms over the
 * loops inside, plain or atoms (a fused loop's f / C, f % C) over those
 * loops alone, nonnegative, r one past its largest value; the outer terms
 * must be multiples of r. */
static int split_binding(ir_func_t *f, const ir_block_t *b, const ir_iter_t *it, const inner_t *in, split_iter_t *out,
                         tn_err_t *err) {
  ir_affine_t a = {0};
  int rc = TN_OK;
  if (!ir_affine_of(it->binding, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &a)) {
    rc = tn_err_set(err, TN_EINVAL, "block \"%s\": iterator %s's binding overflows", b->name, it->var->name);
    goto done;
  }
  ir_bounds_t bd;
  ir_bounds_init(&bd);
  for (int l = 0; l < in->n; l++) ir_bounds_set(&bd, in->loops[l]->var, 0, in->loops[l]->extent - 1);
  int64_t r = 1;
  bool *inner = tn_xcalloc((size_t)a.n + 1, sizeof *inner);
  for (int i = 0; i < a.n && rc == TN_OK; i++) {
    const ir_affine_term_t *t = &a.terms[i];
    bool uses = false;
    for (int l = 0; l < in->n && !uses; l++) uses = ir_expr_uses_var(t->e, in->loops[l]->var);
    if (!uses) continue;
    ir_interval_t iv = ir_interval_of(t->e, &bd);
    if (!t->var && !only_inner(t->e, in, b)) {
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\": iterator %s is not affine in the loops inside", b->name,
                      it->var->name);
    } else if (t->coef < 0 || iv.lo < 0 || iv.hi == IR_INF_POS) {
      rc = tn_err_set(err, TN_EINVAL, "block \"%s\": iterator %s decreases along the loops inside", b->name,
                      it->var->name);
    } else {
      int64_t span;
      inner[i] = true;
      if (__builtin_mul_overflow(t->coef, iv.hi, &span) || __builtin_add_overflow(r, span, &r))
        rc = tn_err_set(err, TN_EINVAL, "block \"%s\": iterator %s's range overflows", b->name, it->var->name);
    }
  }
  ir_bounds_free(&bd);
  /* the extent need not divide: the values are those of the loops before,
   * an uneven split's predicate keeps them in range.  Where the outer terms
   * are not multiples of r (the loops inside interleave with one outside:
   * x = 2 * x_in + phase), the outer iterator is the outer part itself, r 1:
   * the tiles of different outer values interleave, each still the outer
   * value plus the inner part. */
  bool ok = rc == TN_OK && a.constant % r == 0;
  for (int i = 0; i < a.n && ok; i++)
    if (!inner[i]) ok = a.terms[i].coef % r == 0;
  if (rc == TN_OK && !ok) {
    out->r = 1;
    out->inner_part = affine_part(f, &a, inner, true, 1);
    out->outer_binding = affine_part(f, &a, inner, false, 1);
  } else if (rc == TN_OK) {
    out->r = r;
    out->inner_part = r > 1 ? affine_part(f, &a, inner, true, 1) : NULL;
    out->outer_binding = affine_part(f, &a, inner, false, r);
  }
  free(inner);
done:
  ir_affine_free(&a);
  return rc;
}

/* A region of the inner block seen from the outer block: the iterators
 * replaced by outer * r + inner, the inner loops over their whole range. */
static void outer_region(ir_func_t *f, const ir_region_t *src, ir_region_t *dst, ir_var_t *const *from,
                         ir_expr_t *const *to, int n, const inner_t *in) {
  dst->buf = src->buf;
  dst->dims = TN_NEWN(f->arena, ir_range_t, src->buf->ndim ? src->buf->ndim : 1);
  ir_var_t **lv = tn_xmalloc(sizeof lv[0] * (size_t)(in->n + 1));
  ir_expr_t **lo = tn_xmalloc(sizeof lo[0] * (size_t)(in->n + 1));
  for (int d = 0; d < src->buf->ndim; d++) {
    ir_expr_t *m = ir_expr_subst(f, src->dims[d].min, from, to, n);
    int64_t ext = 0, grow = 0;
    bool ok = ir_expr_is_const_int(src->dims[d].extent, &ext);
    for (int l = 0; l < in->n && ok; l++) {
      int64_t c = 0;
      ok = ir_affine_coef_of(m, in->loops[l]->var, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &c);
      lv[l] = in->loops[l]->var;
      lo[l] = ir_int(f, c < 0 ? in->loops[l]->extent - 1 : 0);
      grow += (c < 0 ? -c : c) * (in->loops[l]->extent - 1);
    }
    if (ok) {
      dst->dims[d].min = ir_simplify(f, ir_expr_subst(f, m, lv, lo, in->n), NULL);
      dst->dims[d].extent = ir_int(f, ext + grow);
    } else { /* the whole dimension */
      dst->dims[d].min = ir_int(f, 0);
      dst->dims[d].extent = ir_int(f, src->buf->shape[d]);
    }
  }
  free(lv);
  free(lo);
}

static const char *unique_block_name(ir_func_t *f, const char *base) {
  char name[256];
  snprintf(name, sizeof name, "%s_o", base);
  for (int i = 1; ir_func_find_block(f, name); i++) snprintf(name, sizeof name, "%s_o%d", base, i);
  return tn_arena_strdup(f->arena, name);
}

int sch_prim_blockize(sch_t *s, int loop_uid, int *out, tn_err_t *err) {
  ir_func_t *f = s->f;
  sch_path_t p = {0};
  if (!sch_find_path(f, loop_uid, &p) || p.stmts[p.n - 1]->kind != IR_S_LOOP) {
    ir_path_free(&p);
    return tn_err_set(err, TN_EINVAL, "the loop no longer exists");
  }
  ir_stmt_t *top = p.stmts[p.n - 1], **slot = p.slots[p.n - 1];
  inner_t in = {0};
  split_iter_t *sp = NULL;
  int rc = collect_inner(top, &in, err);
  ir_block_t *b = rc == TN_OK ? &in.block->u.block : NULL;
  if (rc == TN_OK) {
    sp = tn_xmalloc(sizeof sp[0] * (size_t)(b->niters + 1));
    for (int i = 0; i < b->niters && rc == TN_OK; i++) rc = split_binding(f, b, &b->iters[i], &in, &sp[i], err);
  }
  if (rc < 0) {
    free(in.loops);
    free(sp);
    ir_path_free(&p);
    return rc;
  }
  /* checks done: build the outer block and rebind the inner one */
  ir_stmt_t *os = ir_block_new(f, unique_block_name(f, b->name));
  ir_block_t *ob = &os->u.block;
  ob->iters = TN_NEWN(f->arena, ir_iter_t, b->niters ? b->niters : 1);
  ob->niters = b->niters;
  ir_var_t **from = tn_xmalloc(sizeof from[0] * (size_t)(b->niters + 1));
  ir_expr_t **to = tn_xmalloc(sizeof to[0] * (size_t)(b->niters + 1));
  for (int i = 0; i < b->niters; i++) {
    ir_iter_t *oi = &ob->iters[i], *ii = &b->iters[i];
    char name[256];
    snprintf(name, sizeof name, "%s_o", ii->var->name);
    oi->var = ir_var_new(f, name, ii->var->dtype);
    oi->extent = (ii->extent + sp[i].r - 1) / sp[i].r;
    oi->kind = ii->kind;
    oi->binding = sp[i].outer_binding;
    /* the inner block keeps its bindings over the loops (the code generators
     * and analyses read bindings as functions of loops); seen from the outer
     * block the iterator is vo * r + inner, which is what its regions say */
    ir_expr_t *vo = ir_varref(f, oi->var);
    if (sp[i].r > 1) vo = ir_bin(f, IR_E_MUL, vo, ir_int(f, sp[i].r));
    from[i] = ii->var;
    to[i] = sp[i].inner_part ? ir_bin(f, IR_E_ADD, vo, sp[i].inner_part) : vo;
  }
  ob->nreads = b->nreads;
  ob->reads = TN_NEWN(f->arena, ir_region_t, b->nreads ? b->nreads : 1);
  for (int r = 0; r < b->nreads; r++) outer_region(f, &b->reads[r], &ob->reads[r], from, to, b->niters, &in);
  ob->nwrites = b->nwrites;
  ob->writes = TN_NEWN(f->arena, ir_region_t, b->nwrites ? b->nwrites : 1);
  for (int w = 0; w < b->nwrites; w++) outer_region(f, &b->writes[w], &ob->writes[w], from, to, b->niters, &in);
  ob->body = top;
  *slot = os;
  sch_simplify_all(f);
  *out = ob->uid;
  free(from);
  free(to);
  free(in.loops);
  free(sp);
  ir_path_free(&p);
  return TN_OK;
}

int sch_prim_tensorize(sch_t *s, int uid, const char *intrin, tn_err_t *err) {
  const ir_intrin_t *in = ir_intrin_find(intrin);
  if (!in) {
    tn_buf_t names;
    tn_buf_init(&names);
    for (int i = 0; i < ir_intrin_count(); i++) tn_buf_printf(&names, "%s%s", i ? ", " : "", ir_intrin_at(i)->name);
    int rc = tn_err_set(err, TN_EINVAL, "no tensor intrinsic named \"%s\" (intrinsics: %s)", intrin, tn_buf_str(&names));
    tn_buf_free(&names);
    return rc;
  }
  ir_stmt_t *st = sch_find(s->f, uid);
  if (!st) return tn_err_set(err, TN_EINVAL, "the block or loop no longer exists");
  int rc;
  if (st->kind == IR_S_LOOP) { /* blockize first, as TVM does (sch_apply restores the function on failure) */
    int buid = 0;
    if ((rc = sch_prim_blockize(s, uid, &buid, err)) < 0) return rc;
    st = sch_find(s->f, buid);
  }
  ir_block_t *b = &st->u.block;
  ir_intrin_match_t m;
  if ((rc = ir_intrin_match(s->f, b, in, &m, err)) < 0) return rc;
  ir_annot_set_str(s->f, &b->annots, &b->nannots, IR_ANN_TENSORIZE, in->name);
  return TN_OK;
}
