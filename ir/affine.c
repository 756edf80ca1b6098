/* affine.c — affine forms of integer expressions (sum of coef * term plus a
 * constant): collection with overflow checks, the canonical term order the
 * simplifier also writes sums in, and the queries other modules ask. */
#include "affine.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void ir_affine_reset(ir_affine_t *a) {
  a->n = 0;
  a->constant = 0;
  a->affine = true;
}

void ir_affine_free(ir_affine_t *a) {
  free(a->terms);
  memset(a, 0, sizeof *a);
}

/* INT64_MIN counts as an overflow too: every coefficient can be negated. */
int64_t ir_affine_mul(ir_affine_t *a, int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r) || r == INT64_MIN) a->affine = false, r = 0;
  return r;
}

void ir_affine_add_const(ir_affine_t *a, int64_t c) {
  if (__builtin_add_overflow(a->constant, c, &a->constant) || a->constant == INT64_MIN) a->affine = false;
}

void ir_affine_add_term(ir_affine_t *a, ir_expr_t *e, int64_t coef) {
  if (coef == 0) return;
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 8;
    a->terms = tn_xrealloc(a->terms, sizeof *a->terms * (size_t)a->cap);
  }
  a->terms[a->n++] = (ir_affine_term_t){e, e->kind == IR_E_VAR ? e->u.var : NULL, coef, 0};
}

/* Only a cast leads from integer to float arithmetic (operands of +, -, *
 * have their node's type), so the walk checks types there and at the root. */
void ir_affine_add(ir_affine_t *a, const ir_expr_t *e, int64_t m, unsigned flags) {
  int64_t k;
  if (!a->affine) return;
  switch (e->kind) {
  case IR_E_INT: ir_affine_add_const(a, ir_affine_mul(a, m, e->u.ival)); return;
  case IR_E_ADD:
    ir_affine_add(a, e->u.bin.a, m, flags);
    ir_affine_add(a, e->u.bin.b, m, flags);
    return;
  case IR_E_SUB:
    ir_affine_add(a, e->u.bin.a, m, flags);
    ir_affine_add(a, e->u.bin.b, ir_affine_mul(a, m, -1), flags);
    return;
  case IR_E_NEG: ir_affine_add(a, e->u.un, ir_affine_mul(a, m, -1), flags); return;
  case IR_E_MUL: {
    const ir_expr_t *x = ir_expr_is_const_int(e->u.bin.b, &k)   ? e->u.bin.a
                         : ir_expr_is_const_int(e->u.bin.a, &k) ? e->u.bin.b
                                                                : NULL;
    if (!x) break;
    ir_affine_add(a, x, ir_affine_mul(a, m, k), flags);
    return;
  }
  case IR_E_CAST:
    if ((flags & IR_AFFINE_CASTS) && ir_dtype_is_int(e->dtype) && ir_dtype_is_int(e->u.un->dtype)) {
      ir_affine_add(a, e->u.un, m, flags);
      return;
    }
    break;
  default: break;
  }
  /* Expressions are immutable: the term only points at e. */
  if (e->kind == IR_E_VAR || (flags & IR_AFFINE_ATOMS)) ir_affine_add_term(a, (ir_expr_t *)e, m);
  else a->affine = false;
}

int ir_affine_term_key(const ir_expr_t *e) {
  int k = INT_MAX;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: return INT_MAX;
  case IR_E_VAR: return e->u.var->id;
  case IR_E_LOAD:
    for (int i = 0; i < e->u.load.n; i++) k = TN_MIN(k, ir_affine_term_key(e->u.load.idx[i]));
    return k;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: return ir_affine_term_key(e->u.un);
  case IR_E_SELECT:
    k = TN_MIN(ir_affine_term_key(e->u.sel.cond), ir_affine_term_key(e->u.sel.t));
    return TN_MIN(k, ir_affine_term_key(e->u.sel.f));
  case IR_E_CALL:
    for (int i = 0; i < e->u.call.n; i++) k = TN_MIN(k, ir_affine_term_key(e->u.call.args[i]));
    return k;
  default: return TN_MIN(ir_affine_term_key(e->u.bin.a), ir_affine_term_key(e->u.bin.b));
  }
}

static int term_cmp(const void *x, const void *y) {
  const ir_affine_term_t *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->var && a->var == b->var ? 0 : ir_expr_cmp(a->e, b->e);
}

void ir_affine_normalize(ir_affine_t *a, int (*key)(void *ctx, const ir_expr_t *e), void *ctx) {
  for (int i = 0; i < a->n; i++) {
    ir_affine_term_t *t = &a->terms[i];
    t->key = t->var ? t->var->id : key ? key(ctx, t->e) : ir_affine_term_key(t->e);
  }
  if (a->n > 1) qsort(a->terms, (size_t)a->n, sizeof *a->terms, term_cmp);
  int w = 0;
  for (int i = 0; i < a->n; i++) {
    if (w > 0 && term_cmp(&a->terms[w - 1], &a->terms[i]) == 0) {
      int64_t *c = &a->terms[w - 1].coef;
      if (__builtin_add_overflow(*c, a->terms[i].coef, c) || *c == INT64_MIN) a->affine = false;
    } else {
      if (w > 0 && a->terms[w - 1].coef == 0) w--;
      a->terms[w++] = a->terms[i];
    }
  }
  if (w > 0 && a->terms[w - 1].coef == 0) w--;
  a->n = w;
}

bool ir_affine_of(const ir_expr_t *e, unsigned flags, ir_affine_t *out) {
  ir_affine_reset(out);
  if (!ir_dtype_is_float(e->dtype)) ir_affine_add(out, e, 1, flags);
  else if (flags & IR_AFFINE_ATOMS) ir_affine_add_term(out, (ir_expr_t *)e, 1);
  else out->affine = false;
  if (out->affine) ir_affine_normalize(out, NULL, NULL);
  return out->affine;
}

int64_t ir_affine_coef(const ir_affine_t *a, const ir_var_t *v) {
  for (int i = 0; i < a->n; i++)
    if (a->terms[i].var == v) return a->terms[i].coef;
  return 0;
}

bool ir_affine_coef_in(const ir_affine_t *a, const ir_var_t *v, int64_t *coef) {
  *coef = 0;
  if (!a->affine) return false;
  for (int i = 0; i < a->n; i++) {
    if (a->terms[i].var == v) *coef = a->terms[i].coef;
    else if (!a->terms[i].var && ir_expr_uses_var(a->terms[i].e, v)) return false;
  }
  return true;
}

bool ir_affine_const_diff(const ir_affine_t *a, const ir_affine_t *b, int64_t *diff) {
  if (!a->affine || !b->affine || a->n != b->n) return false;
  for (int i = 0; i < a->n; i++) {
    const ir_affine_term_t *x = &a->terms[i], *y = &b->terms[i];
    if (x->coef != y->coef || term_cmp(x, y) != 0) return false;
  }
  return !__builtin_sub_overflow(a->constant, b->constant, diff);
}

static bool coef_rec(const ir_expr_t *e, const ir_var_t *v, unsigned flags, int64_t m, int64_t *acc) {
  int64_t k;
  switch (e->kind) {
  case IR_E_INT: return true;
  case IR_E_VAR: return e->u.var != v || !__builtin_add_overflow(*acc, m, acc);
  case IR_E_ADD: return coef_rec(e->u.bin.a, v, flags, m, acc) && coef_rec(e->u.bin.b, v, flags, m, acc);
  case IR_E_SUB:
    return m != INT64_MIN && coef_rec(e->u.bin.a, v, flags, m, acc) && coef_rec(e->u.bin.b, v, flags, -m, acc);
  case IR_E_NEG: return m != INT64_MIN && coef_rec(e->u.un, v, flags, -m, acc);
  case IR_E_MUL: {
    const ir_expr_t *x = ir_expr_is_const_int(e->u.bin.b, &k)   ? e->u.bin.a
                         : ir_expr_is_const_int(e->u.bin.a, &k) ? e->u.bin.b
                                                                : NULL;
    if (!x) break;
    int64_t mk;
    return !__builtin_mul_overflow(m, k, &mk) && mk != INT64_MIN && coef_rec(x, v, flags, mk, acc);
  }
  case IR_E_CAST:
    if ((flags & IR_AFFINE_CASTS) && ir_dtype_is_int(e->dtype) && ir_dtype_is_int(e->u.un->dtype))
      return coef_rec(e->u.un, v, flags, m, acc);
    break;
  default: break;
  }
  return (flags & IR_AFFINE_ATOMS) && !ir_expr_uses_var(e, v);
}

bool ir_affine_coef_of(const ir_expr_t *e, const ir_var_t *v, unsigned flags, int64_t *coef) {
  int64_t acc = 0;
  bool ok = coef_rec(e, v, flags, 1, &acc) && acc != INT64_MIN;
  *coef = ok ? acc : 0;
  return ok;
}
