/* affine.h — the affine form of an integer index expression: a coefficient
 * per variable plus a constant, or "not affine".  The one copy every module
 * asks (ir/analysis.h includes this header); the simplifier's linear
 * normalisation is built on the same form and order.  Prefix: ir_affine_. */
#ifndef TUNED_IR_AFFINE_H
#define TUNED_IR_AFFINE_H

#include "ir/ir.h"

/* One term coef * e.  e is a variable (var set), or with IR_AFFINE_ATOMS a
 * subexpression the form does not look into (var NULL): a load, a product of
 * two non-constants, floordiv/floormod, min/max, a call... */
typedef struct ir_affine_term {
  ir_expr_t *e; /* points into the analysed expression (never modified) */
  const ir_var_t *var;
  int64_t coef; /* never 0 in a normalized form */
  int key;      /* smallest variable id in e (INT_MAX: none), set by normalization */
} ir_affine_term_t;

/* sum(terms[i].coef * terms[i].e) + constant.  Terms are in canonical order
 * (key, then ir_expr_cmp: the order in which the simplifier writes sums),
 * one per distinct term.  affine is false when the expression has a part
 * that is not affine (without IR_AFFINE_ATOMS) or a coefficient or the
 * constant overflowed; no coefficient or constant is ever INT64_MIN, so each
 * can be negated.  A zeroed ir_affine_t is ready for ir_affine_of; the term
 * array grows as needed and is reused by later calls on the same form. */
typedef struct ir_affine {
  ir_affine_term_t *terms;
  int n, cap;
  int64_t constant;
  bool affine;
} ir_affine_t;

enum {
  /* A part that is not affine becomes a term of its own instead of making
   * the whole form not affine: "affine in v" is then asked with
   * ir_affine_coef_in. */
  IR_AFFINE_ATOMS = 1 << 0,
  /* Casts between integer types are looked through, taken as exact (a
   * float in between never is). */
  IR_AFFINE_CASTS = 1 << 1,
};

/* The affine form of e (+, -, unary -, * by an integer constant; integer
 * constants and variables; float arithmetic is never affine) into out,
 * replacing what it held.  Returns out->affine. */
bool ir_affine_of(const ir_expr_t *e, unsigned flags, ir_affine_t *out);
void ir_affine_free(ir_affine_t *a);

/* Coefficient of variable v (0 when v has no term of its own). */
int64_t ir_affine_coef(const ir_affine_t *a, const ir_var_t *v);
/* Whether a is affine in v (v inside no atom), with v's coefficient. */
bool ir_affine_coef_in(const ir_affine_t *a, const ir_var_t *v, int64_t *coef);
/* The coefficient of v in e's affine form without building the form (hot
 * callers ask one variable at a time): false where ir_affine_of would say not
 * affine because of an overflow on the way to v or (without
 * IR_AFFINE_ATOMS) a non-affine part, or where v occurs inside an atom
 * (even one that would cancel out). */
bool ir_affine_coef_of(const ir_expr_t *e, const ir_var_t *v, unsigned flags, int64_t *coef);

/* Whether a - b is a constant (both affine, the same terms and
 * coefficients), stored in *diff; false also when the difference overflows. */
bool ir_affine_const_diff(const ir_affine_t *a, const ir_affine_t *b, int64_t *diff);

/* ---- building a form term by term (the simplifier collects its own
 * simplified atoms) ---- */

/* An empty affine form (the constant 0), keeping a's term array. */
void ir_affine_reset(ir_affine_t *a);
/* Adds m * e for an integer expression e, walked as ir_affine_of does. */
void ir_affine_add(ir_affine_t *a, const ir_expr_t *e, int64_t m, unsigned flags);
/* Adds coef * e with e taken whole as one term (coef 0 adds nothing). */
void ir_affine_add_term(ir_affine_t *a, ir_expr_t *e, int64_t coef);
void ir_affine_add_const(ir_affine_t *a, int64_t c);
/* x * y, or 0 with a marked not affine when the product overflows. */
int64_t ir_affine_mul(ir_affine_t *a, int64_t x, int64_t y);
/* Smallest variable id in e (INT_MAX: none): the first sort key of a term. */
int ir_affine_term_key(const ir_expr_t *e);
/* Sorts the terms into canonical order, merges equal ones and drops zero
 * coefficients.  key(ctx, e) gives a term's sort key (NULL:
 * ir_affine_term_key); the simplifier passes its memoised one. */
void ir_affine_normalize(ir_affine_t *a, int (*key)(void *ctx, const ir_expr_t *e), void *ctx);

#endif
