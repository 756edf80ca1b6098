/* arith.c — integer interval analysis, the expression simplifier (constant
 * folding, linear normalisation, floordiv/floormod elimination) and the
 * inference of a block's read/write regions. */
#include "ir.h"
#include "affine.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * Variable bounds
 * ====================================================================== */

void ir_bounds_init(ir_bounds_t *b) { memset(b, 0, sizeof *b); }

void ir_bounds_free(ir_bounds_t *b) {
  free(b->vars);
  free(b->iv);
  memset(b, 0, sizeof *b);
}

void ir_bounds_set(ir_bounds_t *b, const ir_var_t *v, int64_t lo, int64_t hi) {
  for (int i = 0; i < b->n; i++)
    if (b->vars[i] == v) {
      b->iv[i] = (ir_interval_t){lo, hi};
      return;
    }
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 8;
    b->vars = tn_xrealloc(b->vars, sizeof(*b->vars) * (size_t)b->cap);
    b->iv = tn_xrealloc(b->iv, sizeof(*b->iv) * (size_t)b->cap);
  }
  b->vars[b->n] = v;
  b->iv[b->n++] = (ir_interval_t){lo, hi};
}

bool ir_bounds_get(const ir_bounds_t *b, const ir_var_t *v, ir_interval_t *out) {
  for (int i = 0; b && i < b->n; i++)
    if (b->vars[i] == v) {
      if (out) *out = b->iv[i];
      return true;
    }
  return false;
}

/* ======================================================================
 * Saturating int64 arithmetic.  IR_INF_NEG / IR_INF_POS stand for the
 * infinities; a result that does not fit saturates outward, which keeps every
 * interval sound.
 * ====================================================================== */

static const ir_interval_t iv_all = {IR_INF_NEG, IR_INF_POS};

static bool is_inf(int64_t v) { return v == IR_INF_POS || v == IR_INF_NEG; }

/* a + b; `dom` (the infinity of the end being computed) wins when both
 * infinities meet. */
static int64_t sat_add(int64_t a, int64_t b, int64_t dom) {
  if (a == dom || b == dom) return dom;
  if (is_inf(a)) return a;
  if (is_inf(b)) return b;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? IR_INF_POS : IR_INF_NEG;
  return r;
}

static int64_t sat_neg(int64_t a) {
  if (a == IR_INF_NEG) return IR_INF_POS;
  if (a == IR_INF_POS) return IR_INF_NEG;
  return -a;
}

static int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  bool neg = (a < 0) != (b < 0);
  int64_t r;
  if (is_inf(a) || is_inf(b) || __builtin_mul_overflow(a, b, &r)) return neg ? IR_INF_NEG : IR_INF_POS;
  return r;
}

/* Exact floor division / modulo; b != 0 and not (INT64_MIN, -1). */
static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t fmod64(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

static bool div_ok(int64_t a, int64_t b) { return b != 0 && !(a == INT64_MIN && b == -1); }

/* Floor division with infinite operands as limits; b != 0. */
static int64_t sat_fdiv(int64_t a, int64_t b) {
  if (is_inf(a)) return ((a < 0) != (b < 0)) ? IR_INF_NEG : IR_INF_POS;
  if (is_inf(b)) return (a == 0 || (a < 0) == (b < 0)) ? 0 : -1;
  return floordiv64(a, b);
}

/* ======================================================================
 * A memo keyed by node (expressions may be shared, so a DAG is simplified
 * and bounded once per node): the simplified form and the interval.
 * ====================================================================== */

typedef struct memo_ent {
  const ir_expr_t *key;
  ir_expr_t *val; /* simplified form; NULL: not yet (see collect) */
  ir_interval_t iv;
  bool has_iv, has_key;
  int minvar; /* smallest variable id used (INT_MAX: none), see term_key */
} memo_ent_t;

typedef struct memo {
  memo_ent_t *t;
  size_t cap, n;
} memo_t;

static size_t memo_slot(const memo_t *m, const ir_expr_t *e) {
  uint64_t h = (uint64_t)(uintptr_t)e * 0x9e3779b97f4a7c15ULL;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->t[i].key && m->t[i].key != e) i = (i + 1) & (m->cap - 1);
  return i;
}

/* The entry of e, or NULL. */
static memo_ent_t *memo_find(const memo_t *m, const ir_expr_t *e) {
  if (!m->cap) return NULL;
  memo_ent_t *x = &m->t[memo_slot(m, e)];
  return x->key ? x : NULL;
}

/* The entry of e, created empty if absent (valid until the next call). */
static memo_ent_t *memo_entry(memo_t *m, const ir_expr_t *e) {
  if (2 * (m->n + 1) > m->cap) {
    memo_ent_t *old = m->t;
    size_t ocap = m->cap;
    m->cap = ocap ? 2 * ocap : 64;
    m->t = tn_xcalloc(m->cap, sizeof *m->t);
    for (size_t i = 0; i < ocap; i++)
      if (old[i].key) m->t[memo_slot(m, old[i].key)] = old[i];
    free(old);
  }
  memo_ent_t *x = &m->t[memo_slot(m, e)];
  if (!x->key) *x = (memo_ent_t){.key = e}, m->n++;
  return x;
}

/* ======================================================================
 * Interval arithmetic
 * ====================================================================== */

static ir_interval_t iv_const(int64_t v) { return (ir_interval_t){v, v}; }
static bool iv_finite(ir_interval_t a) { return !is_inf(a.lo) && !is_inf(a.hi); }

static ir_interval_t iv_add(ir_interval_t a, ir_interval_t b) {
  return (ir_interval_t){sat_add(a.lo, b.lo, IR_INF_NEG), sat_add(a.hi, b.hi, IR_INF_POS)};
}

static ir_interval_t iv_neg(ir_interval_t a) { return (ir_interval_t){sat_neg(a.hi), sat_neg(a.lo)}; }

static ir_interval_t iv_sub(ir_interval_t a, ir_interval_t b) { return iv_add(a, iv_neg(b)); }

static ir_interval_t iv_union(ir_interval_t a, ir_interval_t b) {
  return (ir_interval_t){TN_MIN(a.lo, b.lo), TN_MAX(a.hi, b.hi)};
}

/* Interval of op(x, y) over the four corners: exact for operations that are
 * monotone in each argument (mul, floordiv by a sign-definite divisor). */
static ir_interval_t iv_corners(ir_interval_t a, ir_interval_t b, int64_t (*op)(int64_t, int64_t)) {
  int64_t c[4] = {op(a.lo, b.lo), op(a.lo, b.hi), op(a.hi, b.lo), op(a.hi, b.hi)};
  ir_interval_t r = {c[0], c[0]};
  for (int i = 1; i < 4; i++) r = iv_union(r, iv_const(c[i]));
  return r;
}

static ir_interval_t iv_mul(ir_interval_t a, ir_interval_t b) { return iv_corners(a, b, sat_mul); }

static ir_interval_t iv_floordiv(ir_interval_t a, ir_interval_t b) {
  if (b.lo > 0 || b.hi < 0) return iv_corners(a, b, sat_fdiv);
  return iv_all; /* the divisor may be 0 */
}

static ir_interval_t iv_floormod(ir_interval_t a, ir_interval_t b) {
  if (b.lo > 0) {
    if (b.lo == b.hi && iv_finite(a) && iv_finite(b) && floordiv64(a.lo, b.lo) == floordiv64(a.hi, b.lo)) {
      int64_t base = floordiv64(a.lo, b.lo) * b.lo;
      return (ir_interval_t){a.lo - base, a.hi - base};
    }
    int64_t hi = sat_add(b.hi, -1, IR_INF_POS);
    return (ir_interval_t){0, a.lo >= 0 ? TN_MIN(a.hi, hi) : hi};
  }
  if (b.hi < 0) {
    int64_t lo = sat_add(b.lo, 1, IR_INF_NEG);
    return (ir_interval_t){a.hi <= 0 ? TN_MAX(a.lo, lo) : lo, 0};
  }
  return iv_all;
}

static ir_interval_t iv_min(ir_interval_t a, ir_interval_t b) {
  return (ir_interval_t){TN_MIN(a.lo, b.lo), TN_MIN(a.hi, b.hi)};
}

static ir_interval_t iv_max(ir_interval_t a, ir_interval_t b) {
  return (ir_interval_t){TN_MAX(a.lo, b.lo), TN_MAX(a.hi, b.hi)};
}

/* 1 if `a OP b` holds for every a - b in d, 0 if for none, -1 if unknown. */
static int decide_cmp(ir_expr_kind_t k, ir_interval_t d) {
  switch (k) {
  case IR_E_LT: return d.hi < 0 ? 1 : d.lo >= 0 ? 0 : -1;
  case IR_E_LE: return d.hi <= 0 ? 1 : d.lo > 0 ? 0 : -1;
  case IR_E_GT: return d.lo > 0 ? 1 : d.hi <= 0 ? 0 : -1;
  case IR_E_GE: return d.lo >= 0 ? 1 : d.hi < 0 ? 0 : -1;
  case IR_E_EQ: return (d.lo == 0 && d.hi == 0) ? 1 : (d.lo > 0 || d.hi < 0) ? 0 : -1;
  case IR_E_NE: return (d.lo == 0 && d.hi == 0) ? 0 : (d.lo > 0 || d.hi < 0) ? 1 : -1;
  default: return -1;
  }
}

static ir_interval_t iv_decided(int d) { return d < 0 ? (ir_interval_t){0, 1} : iv_const(d); }

/* Truth of a value in `a`: [1,1] always nonzero, [0,0] always zero. */
static ir_interval_t iv_truth(ir_interval_t a) {
  if (a.lo > 0 || a.hi < 0) return iv_const(1);
  if (a.lo == 0 && a.hi == 0) return iv_const(0);
  return (ir_interval_t){0, 1};
}

static ir_interval_t iv_rec(const ir_expr_t *e, const ir_bounds_t *b, memo_t *m);

static ir_interval_t iv_cast(ir_dtype_t to, const ir_expr_t *a, const ir_bounds_t *b, memo_t *m) {
  if (!ir_dtype_is_int(a->dtype) && a->dtype != IR_BOOL) return to == IR_BOOL ? (ir_interval_t){0, 1} : iv_all;
  ir_interval_t x = iv_rec(a, b, m);
  if (to == IR_BOOL) return iv_truth(x);
  if (to == IR_INT32 && (x.lo < INT32_MIN || x.hi > INT32_MAX)) return (ir_interval_t){INT32_MIN, INT32_MAX};
  return x;
}

static ir_interval_t iv_node(const ir_expr_t *e, const ir_bounds_t *b, memo_t *m) {
  ir_interval_t x, y;
  switch (e->kind) {
  case IR_E_INT: return iv_const(e->u.ival);
  case IR_E_VAR: return ir_bounds_get(b, e->u.var, &x) ? x : iv_all;
  case IR_E_NEG: return iv_neg(iv_rec(e->u.un, b, m));
  case IR_E_NOT: x = iv_truth(iv_rec(e->u.un, b, m)); return (ir_interval_t){1 - x.hi, 1 - x.lo};
  case IR_E_CAST: return iv_cast(e->dtype, e->u.un, b, m);
  case IR_E_SELECT: {
    x = iv_truth(iv_rec(e->u.sel.cond, b, m));
    if (x.lo == x.hi) return iv_rec(x.lo ? e->u.sel.t : e->u.sel.f, b, m);
    return iv_union(iv_rec(e->u.sel.t, b, m), iv_rec(e->u.sel.f, b, m));
  }
  default: break;
  }
  if (!ir_expr_is_binary(e->kind)) return iv_all; /* loads, calls */
  if (ir_expr_is_compare(e->kind) && ir_dtype_is_float(e->u.bin.a->dtype)) return (ir_interval_t){0, 1};
  x = iv_rec(e->u.bin.a, b, m);
  y = iv_rec(e->u.bin.b, b, m);
  switch (e->kind) {
  case IR_E_ADD: return iv_add(x, y);
  case IR_E_SUB: return iv_sub(x, y);
  case IR_E_MUL: return iv_mul(x, y);
  case IR_E_FLOORDIV: return iv_floordiv(x, y);
  case IR_E_FLOORMOD: return iv_floormod(x, y);
  case IR_E_MIN: return iv_min(x, y);
  case IR_E_MAX: return iv_max(x, y);
  case IR_E_AND:
    x = iv_truth(x), y = iv_truth(y);
    return (ir_interval_t){x.lo & y.lo, x.hi & y.hi};
  case IR_E_OR:
    x = iv_truth(x), y = iv_truth(y);
    return (ir_interval_t){x.lo | y.lo, x.hi | y.hi};
  default:
    if (ir_expr_is_compare(e->kind)) return iv_decided(decide_cmp(e->kind, iv_sub(x, y)));
    return iv_all; /* DIV: float only */
  }
}

/* Interval of e; with a memo (m != NULL) each shared node is bounded once. */
static ir_interval_t iv_rec(const ir_expr_t *e, const ir_bounds_t *b, memo_t *m) {
  if (!e || ir_dtype_is_float(e->dtype)) return iv_all;
  if (!m || e->kind == IR_E_INT || e->kind == IR_E_VAR) return iv_node(e, b, m);
  memo_ent_t *x = memo_find(m, e);
  if (x && x->has_iv) return x->iv;
  ir_interval_t r = iv_node(e, b, m);
  x = memo_entry(m, e);
  x->iv = r, x->has_iv = true;
  return r;
}

ir_interval_t ir_interval_of(const ir_expr_t *e, const ir_bounds_t *b) { return iv_rec(e, b, NULL); }

/* ======================================================================
 * Canonical structural order (never depends on addresses)
 * ====================================================================== */

static int cmp_i64(int64_t a, int64_t b) { return (a > b) - (a < b); }

/* Structural order; `budget` (NULL: unlimited) bounds the nodes visited,
 * and running out reports "different". */
static int cmp_rec(const ir_expr_t *a, const ir_expr_t *b, long *budget) {
  if (a == b) return 0;
  if (budget && --*budget < 0) return 1;
  int c = cmp_i64(a->kind, b->kind);
  if (!c) c = cmp_i64(a->dtype, b->dtype);
  if (c) return c;
  switch (a->kind) {
  case IR_E_INT: return cmp_i64(a->u.ival, b->u.ival);
  case IR_E_FLOAT: {
    if (a->u.fval == b->u.fval) return 0;
    int64_t x, y;
    memcpy(&x, &a->u.fval, sizeof x);
    memcpy(&y, &b->u.fval, sizeof y);
    return cmp_i64(x, y);
  }
  case IR_E_VAR:
    c = cmp_i64(a->u.var->id, b->u.var->id);
    return c ? c : strcmp(a->u.var->name, b->u.var->name);
  case IR_E_LOAD:
    c = cmp_i64(a->u.load.buf->id, b->u.load.buf->id);
    if (!c) c = cmp_i64(a->u.load.n, b->u.load.n);
    for (int i = 0; !c && i < a->u.load.n; i++) c = cmp_rec(a->u.load.idx[i], b->u.load.idx[i], budget);
    return c;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: return cmp_rec(a->u.un, b->u.un, budget);
  case IR_E_SELECT:
    c = cmp_rec(a->u.sel.cond, b->u.sel.cond, budget);
    if (!c) c = cmp_rec(a->u.sel.t, b->u.sel.t, budget);
    return c ? c : cmp_rec(a->u.sel.f, b->u.sel.f, budget);
  case IR_E_CALL:
    c = cmp_i64(a->u.call.fn, b->u.call.fn);
    if (!c) c = cmp_i64(a->u.call.n, b->u.call.n);
    for (int i = 0; !c && i < a->u.call.n; i++) c = cmp_rec(a->u.call.args[i], b->u.call.args[i], budget);
    return c;
  default:
    c = cmp_rec(a->u.bin.a, b->u.bin.a, budget);
    return c ? c : cmp_rec(a->u.bin.b, b->u.bin.b, budget);
  }
}

int ir_expr_cmp(const ir_expr_t *a, const ir_expr_t *b) { return cmp_rec(a, b, NULL); }

/* ======================================================================
 * Simplifier state: the function, the bounds and the memo.
 * ====================================================================== */

typedef struct simp {
  ir_func_t *f;
  const ir_bounds_t *b;
  memo_t memo;
} simp_t;

static void simp_init(simp_t *s, ir_func_t *f, const ir_bounds_t *b) {
  memset(s, 0, sizeof *s);
  s->f = f;
  s->b = b;
}

static void simp_done(simp_t *s) { free(s->memo.t); }

static ir_interval_t iv_of(simp_t *s, const ir_expr_t *e) { return iv_rec(e, s->b, &s->memo); }

static ir_expr_t *simp(simp_t *s, ir_expr_t *e);

/* ---- node builders ---------------------------------------------------- */

static ir_expr_t *mk_int(simp_t *s, ir_dtype_t t, int64_t v) { return ir_const_int(s->f, t, v); }

/* e with new operands, or e itself when they are unchanged. */
static ir_expr_t *rebuild_bin(simp_t *s, ir_expr_t *e, ir_expr_t *a, ir_expr_t *b) {
  if (a == e->u.bin.a && b == e->u.bin.b) return e;
  ir_expr_t *r = TN_NEW(s->f->arena, ir_expr_t);
  *r = *e;
  r->u.bin.a = a;
  r->u.bin.b = b;
  return r;
}

static ir_expr_t *rebuild_un(simp_t *s, ir_expr_t *e, ir_expr_t *a) {
  if (a == e->u.un) return e;
  ir_expr_t *r = TN_NEW(s->f->arena, ir_expr_t);
  *r = *e;
  r->u.un = a;
  return r;
}

static ir_expr_t *mk_bin(simp_t *s, ir_expr_kind_t k, ir_dtype_t t, ir_expr_t *a, ir_expr_t *b) {
  ir_expr_t *r = ir_bin(s->f, k, a, b);
  if (!ir_expr_is_compare(k) && k != IR_E_AND && k != IR_E_OR) r->dtype = t;
  return r;
}

/* ======================================================================
 * Constant folding
 * ====================================================================== */

/* Folds an integer binary operation; false on overflow or division by 0. */
static bool fold_int(ir_expr_kind_t k, int64_t a, int64_t b, int64_t *out) {
  switch (k) {
  case IR_E_ADD: return !__builtin_add_overflow(a, b, out);
  case IR_E_SUB: return !__builtin_sub_overflow(a, b, out);
  case IR_E_MUL: return !__builtin_mul_overflow(a, b, out);
  case IR_E_FLOORDIV: if (!div_ok(a, b)) return false; *out = floordiv64(a, b); return true;
  case IR_E_FLOORMOD: if (!div_ok(a, b)) return false; *out = fmod64(a, b); return true;
  case IR_E_MIN: *out = TN_MIN(a, b); return true;
  case IR_E_MAX: *out = TN_MAX(a, b); return true;
  case IR_E_EQ: *out = a == b; return true;
  case IR_E_NE: *out = a != b; return true;
  case IR_E_LT: *out = a < b; return true;
  case IR_E_LE: *out = a <= b; return true;
  case IR_E_GT: *out = a > b; return true;
  case IR_E_GE: *out = a >= b; return true;
  case IR_E_AND: *out = a && b; return true;
  case IR_E_OR: *out = a || b; return true;
  default: return false;
  }
}

/* Rounds a double to what dtype t holds. */
static double round_to(ir_dtype_t t, double v) {
  if (t == IR_FLOAT32) return (double)(float)v;
  if (t == IR_FLOAT16) return (double)tn_half_to_float(tn_float_to_half((float)v));
  if (t == IR_BFLOAT16) return (double)tn_bf16_to_float(tn_float_to_bf16((float)v));
  return v;
}

static bool const_num(const ir_expr_t *e, double *v) {
  if (e->kind == IR_E_FLOAT) *v = e->u.fval;
  else if (e->kind == IR_E_INT) *v = (double)e->u.ival;
  else return false;
  return true;
}

/* Folds a floating-point operation on constants; false when the result
 * would not be a finite number (those stay as written). */
static bool fold_float(ir_expr_kind_t k, double a, double b, double *out) {
  switch (k) {
  case IR_E_ADD: *out = a + b; break;
  case IR_E_SUB: *out = a - b; break;
  case IR_E_MUL: *out = a * b; break;
  case IR_E_DIV: if (b == 0) return false; *out = a / b; break;
  case IR_E_MIN: *out = a < b ? a : b; break;
  case IR_E_MAX: *out = a > b ? a : b; break;
  case IR_E_EQ: *out = a == b; break;
  case IR_E_NE: *out = a != b; break;
  case IR_E_LT: *out = a < b; break;
  case IR_E_LE: *out = a <= b; break;
  case IR_E_GT: *out = a > b; break;
  case IR_E_GE: *out = a >= b; break;
  default: return false;
  }
  return isfinite(a) && isfinite(b) && isfinite(*out);
}

/* Folds `e` (with simplified operands a, b) when both are constants. */
static ir_expr_t *fold_bin(simp_t *s, ir_expr_t *e, ir_expr_t *a, ir_expr_t *b) {
  int64_t x, y, r;
  double fx, fy, fr;
  if (ir_expr_is_const_int(a, &x) && ir_expr_is_const_int(b, &y) && !ir_dtype_is_float(e->dtype)) {
    if (fold_int(e->kind, x, y, &r)) return mk_int(s, e->dtype, r);
  } else if (const_num(a, &fx) && const_num(b, &fy) && fold_float(e->kind, fx, fy, &fr)) {
    if (e->dtype == IR_BOOL) return mk_int(s, IR_BOOL, (int64_t)fr);
    if (ir_dtype_is_float(e->dtype)) return ir_float(s->f, e->dtype, round_to(e->dtype, fr));
  }
  return rebuild_bin(s, e, a, b);
}

/* ======================================================================
 * Linear forms: sum of coef * term + c over simplified, non-linear terms,
 * held in ir/affine.h's form (whose canonical order is the order of sums).
 * ====================================================================== */

typedef struct lin {
  ir_affine_t a; /* not affine: a coefficient overflowed, the form must not be used */
  ir_dtype_t dtype;
} lin_t;

static lin_t lin_new(ir_dtype_t t) {
  lin_t l = {.dtype = t};
  ir_affine_reset(&l.a);
  return l;
}

static void lin_free(lin_t *l) { ir_affine_free(&l->a); }
static bool lin_bad(const lin_t *l) { return !l->a.affine; }

static bool is_linear_kind(ir_expr_kind_t k) {
  return k == IR_E_INT || k == IR_E_ADD || k == IR_E_SUB || k == IR_E_NEG || k == IR_E_MUL;
}

static void collect(simp_t *s, ir_expr_t *e, int64_t m, lin_t *l, bool done);

/* Adds m * (a * b) for a product of two non-constant operands. */
static void collect_product(simp_t *s, ir_expr_t *e, int64_t m, lin_t *l) {
  ir_expr_t *a = simp(s, e->u.bin.a), *b = simp(s, e->u.bin.b);
  int64_t v;
  if (ir_expr_is_const_int(a, &v)) {
    collect(s, b, ir_affine_mul(&l->a, m, v), l, true);
  } else if (ir_expr_is_const_int(b, &v)) {
    collect(s, a, ir_affine_mul(&l->a, m, v), l, true);
  } else {
    bool swap = ir_expr_cmp(a, b) > 0;
    ir_affine_add_term(&l->a, rebuild_bin(s, e, swap ? b : a, swap ? a : b), m);
  }
}

static void collect_node(simp_t *s, ir_expr_t *e, int64_t m, lin_t *l);

/* Adds m * e to l.  `done`: e is already simplified (its atoms are taken as
 * they are, as ir_affine_add does).  A raw sum reached a second time (a
 * shared subtree) is simplified once and reused, so shared sums are not
 * walked exponentially. */
static void collect(simp_t *s, ir_expr_t *e, int64_t m, lin_t *l, bool done) {
  if (lin_bad(l) || m == 0) return;
  if (!done && e->kind != IR_E_INT && is_linear_kind(e->kind)) {
    memo_ent_t *x = memo_find(&s->memo, e);
    ir_expr_t *r = x ? x->val : NULL;
    if (x && !r) r = simp(s, e); /* the second visit */
    if (r) e = r, done = true;
    else memo_entry(&s->memo, e); /* the first visit */
  }
  if (done) ir_affine_add(&l->a, e, m, IR_AFFINE_ATOMS);
  else collect_node(s, e, m, l);
}

/* Adds m * e for an e not yet simplified: its atoms are simplified first. */
static void collect_node(simp_t *s, ir_expr_t *e, int64_t m, lin_t *l) {
  int64_t v;
  switch (e->kind) {
  case IR_E_ADD:
    collect(s, e->u.bin.a, m, l, false);
    collect(s, e->u.bin.b, m, l, false);
    break;
  case IR_E_SUB:
    collect(s, e->u.bin.a, m, l, false);
    collect(s, e->u.bin.b, ir_affine_mul(&l->a, m, -1), l, false);
    break;
  case IR_E_NEG: collect(s, e->u.un, ir_affine_mul(&l->a, m, -1), l, false); break;
  case IR_E_MUL:
    if (ir_expr_is_const_int(e->u.bin.b, &v)) collect(s, e->u.bin.a, ir_affine_mul(&l->a, m, v), l, false);
    else if (ir_expr_is_const_int(e->u.bin.a, &v)) collect(s, e->u.bin.b, ir_affine_mul(&l->a, m, v), l, false);
    else collect_product(s, e, m, l);
    break;
  default: ir_affine_add(&l->a, simp(s, e), m, IR_AFFINE_ATOMS); break;
  }
}

/* ir_affine_term_key through the memo (a shared subtree is walked once):
 * the smallest variable id in e (INT_MAX if none).  Terms are ordered by it
 * first, so `x % 2 * 8 + y` reads in variable order. */
static int term_key(simp_t *s, const ir_expr_t *e) {
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: return INT_MAX;
  case IR_E_VAR: return e->u.var->id;
  default: break;
  }
  memo_ent_t *m = memo_find(&s->memo, e);
  if (m && m->has_key) return m->minvar;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids), k = INT_MAX;
  for (int i = 0; i < n; i++) k = TN_MIN(k, term_key(s, kids[i]));
  m = memo_entry(&s->memo, e);
  m->minvar = k, m->has_key = true;
  return k;
}

static int term_order(int key, const ir_expr_t *e, const ir_affine_term_t *t) {
  int c = cmp_i64(key, t->key);
  return c ? c : ir_expr_cmp(e, t->e);
}

static int memo_key(void *s, const ir_expr_t *e) { return term_key(s, e); }

/* Sorts terms into canonical order, merges equal ones, drops zeros. */
static void lin_normalize(simp_t *s, lin_t *l) { ir_affine_normalize(&l->a, memo_key, s); }

/* Interval of the linear form within the bounds. */
static ir_interval_t lin_interval(simp_t *s, const lin_t *l) {
  ir_interval_t r = iv_const(l->a.constant);
  for (int i = 0; i < l->a.n; i++)
    r = iv_add(r, iv_mul(iv_const(l->a.terms[i].coef), iv_of(s, l->a.terms[i].e)));
  return r;
}

/* Index of the term equal to `e` in the sorted prefix [0, n), or -1. */
static int lin_find(const lin_t *l, int n, int key, const ir_expr_t *e) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = term_order(key, e, &l->a.terms[mid]);
    if (!c) return mid;
    if (c > 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Rewrites b*k*floordiv(x, k) + b*floormod(x, k) into b*x (the pattern that
 * fusing then splitting a loop leaves behind).  Returns true if it did. */
static bool lin_recombine_once(simp_t *s, lin_t *l) {
  int n = l->a.n;
  bool changed = false;
  for (int i = 0; i < n && !lin_bad(l); i++) {
    ir_expr_t *e = l->a.terms[i].e;
    int64_t k;
    if (e->kind != IR_E_FLOORMOD || !ir_expr_is_const_int(e->u.bin.b, &k) || k <= 0) continue;
    ir_expr_t probe = *e;
    probe.kind = IR_E_FLOORDIV;
    int j = lin_find(l, n, l->a.terms[i].key, &probe);
    int64_t want;
    if (j < 0 || __builtin_mul_overflow(l->a.terms[i].coef, k, &want) || l->a.terms[j].coef != want) continue;
    int64_t b = l->a.terms[i].coef;
    l->a.terms[i].coef = l->a.terms[j].coef = 0;
    collect(s, e->u.bin.a, b, l, true);
    changed = true;
  }
  return changed;
}

static void lin_canon(simp_t *s, lin_t *l) {
  lin_normalize(s, l);
  while (!lin_bad(l) && lin_recombine_once(s, l)) lin_normalize(s, l);
}

/* term * coef as an expression (coef != 0). */
static ir_expr_t *term_expr(simp_t *s, const lin_t *l, const ir_affine_term_t *t, int64_t coef) {
  if (coef == 1) return t->e;
  return mk_bin(s, IR_E_MUL, l->dtype, t->e, mk_int(s, l->dtype, coef));
}

/* Builds the canonical expression: positive terms in order, then negative
 * terms subtracted, then the constant. */
static ir_expr_t *lin_build(simp_t *s, const lin_t *l) {
  ir_expr_t *acc = NULL;
  int64_t c = l->a.constant;
  for (int i = 0; i < l->a.n; i++) {
    if (l->a.terms[i].coef < 0) continue;
    ir_expr_t *t = term_expr(s, l, &l->a.terms[i], l->a.terms[i].coef);
    acc = acc ? mk_bin(s, IR_E_ADD, l->dtype, acc, t) : t;
  }
  for (int i = 0; i < l->a.n; i++) {
    if (l->a.terms[i].coef > 0) continue;
    if (!acc && c <= 0) {
      acc = term_expr(s, l, &l->a.terms[i], l->a.terms[i].coef);
      continue;
    }
    if (!acc) acc = mk_int(s, l->dtype, c), c = 0;
    acc = mk_bin(s, IR_E_SUB, l->dtype, acc, term_expr(s, l, &l->a.terms[i], -l->a.terms[i].coef));
  }
  if (!acc) return mk_int(s, l->dtype, c);
  if (c > 0) return mk_bin(s, IR_E_ADD, l->dtype, acc, mk_int(s, l->dtype, c));
  if (c < 0) return mk_bin(s, IR_E_SUB, l->dtype, acc, mk_int(s, l->dtype, -c));
  return acc;
}

static ir_expr_t *node_simp(simp_t *s, ir_expr_t *e);

/* Simplifies an integer sum/difference/product/negation through its
 * linear form; falls back to operand-wise simplification on overflow. */
static ir_expr_t *lin_simp(simp_t *s, ir_expr_t *e) {
  lin_t l = lin_new(e->dtype);
  collect_node(s, e, 1, &l);
  if (!lin_bad(&l)) lin_canon(s, &l);
  ir_expr_t *r = lin_bad(&l) ? node_simp(s, e) : lin_build(s, &l);
  lin_free(&l);
  return r;
}

/* Interval of a - b (both simplified) after cancelling common terms. */
static ir_interval_t diff_interval(simp_t *s, ir_expr_t *a, ir_expr_t *b) {
  lin_t l = lin_new(a->dtype);
  collect(s, a, 1, &l, true);
  collect(s, b, -1, &l, true);
  if (!lin_bad(&l)) lin_canon(s, &l);
  ir_interval_t r = lin_bad(&l) ? iv_sub(iv_of(s, a), iv_of(s, b)) : lin_interval(s, &l);
  lin_free(&l);
  return r;
}

/* ======================================================================
 * floordiv / floormod by a positive constant
 * ====================================================================== */

static ir_expr_t *div_const(simp_t *s, ir_expr_t *x, int64_t c, ir_expr_kind_t k, ir_dtype_t t);

/* floordiv(r, c) / floormod(r, c) of a remainder that could not be
 * eliminated: merges nested divisions by constants. */
static ir_expr_t *div_atom(simp_t *s, ir_expr_t *r, int64_t c, ir_expr_kind_t k, ir_dtype_t t) {
  int64_t a, ac;
  if (c == 1) return k == IR_E_FLOORDIV ? r : mk_int(s, t, 0);
  if (r->kind == k && ir_expr_is_const_int(r->u.bin.b, &a) && a > 0) {
    /* floordiv(floordiv(y, a), c) = floordiv(y, a*c); floormod(floormod(y, a), c) = floormod(y, c) if c | a */
    if (k == IR_E_FLOORDIV && !__builtin_mul_overflow(a, c, &ac)) return div_const(s, r->u.bin.a, ac, k, t);
    if (k == IR_E_FLOORMOD && a % c == 0) return div_const(s, r->u.bin.a, c, k, t);
  }
  return mk_bin(s, k, t, r, mk_int(s, t, c));
}

/* Splits l into g*d + rest: d gets the terms whose coefficients g divides
 * (divided by g) and floordiv(l.c, g), rest the other terms and
 * floormod(l.c, g). */
static void lin_partition(const lin_t *l, int64_t g, lin_t *d, lin_t *rest) {
  d->a.constant = floordiv64(l->a.constant, g);
  rest->a.constant = fmod64(l->a.constant, g);
  for (int i = 0; i < l->a.n; i++) {
    if (l->a.terms[i].coef % g == 0) ir_affine_add_term(&d->a, l->a.terms[i].e, l->a.terms[i].coef / g);
    else ir_affine_add_term(&rest->a, l->a.terms[i].e, l->a.terms[i].coef);
  }
}

/* The largest g > 1 dividing c with r = g*A + B and B always in [0, g)
 * (tried for the gcds of c with the first coefficients), else 1. */
static int64_t common_factor(simp_t *s, const lin_t *r, int64_t c) {
  int64_t cand[16];
  int n = 0;
  for (int i = 0; i < r->a.n && i < 32 && n < 16; i++) {
    int64_t g = tn_gcd64(c, r->a.terms[i].coef);
    bool dup = g <= 1;
    for (int j = 0; j < n && !dup; j++) dup = cand[j] == g;
    if (!dup) cand[n++] = g;
  }
  int64_t best = 1;
  for (int i = 0; i < n; i++) {
    if (cand[i] <= best) continue;
    lin_t a = lin_new(r->dtype), b = lin_new(r->dtype);
    lin_partition(r, cand[i], &a, &b);
    ir_interval_t iv = lin_interval(s, &b);
    if (!lin_bad(&a) && !lin_bad(&b) && iv.lo >= 0 && iv.hi < cand[i]) best = cand[i];
    lin_free(&a);
    lin_free(&b);
  }
  return best;
}

/* floordiv(x, c) / floormod(x, c) for c > 1.  With x = c*Q + R:
 * floordiv(x, c) = Q + floordiv(R, c) and floormod(x, c) = floormod(R, c).
 * When R stays within one [k*c, (k+1)*c) those are Q + k and R - k*c.
 * Otherwise, with R = g*A + B, g | c and 0 <= B < g (common_factor):
 * floordiv(R, c) = floordiv(A, c/g), floormod(R, c) = g*floormod(A, c/g) + B. */
static ir_expr_t *div_split(simp_t *s, const lin_t *x, int64_t c, ir_expr_kind_t k) {
  lin_t q = lin_new(x->dtype), r = lin_new(x->dtype), a = lin_new(x->dtype), b = lin_new(x->dtype);
  lin_partition(x, c, &q, &r);
  ir_interval_t iv = lin_interval(s, &r);
  lin_t *out = k == IR_E_FLOORDIV ? &q : &r;
  if (iv_finite(iv) && floordiv64(iv.lo, c) == floordiv64(iv.hi, c)) {
    int64_t kk = floordiv64(iv.lo, c);
    ir_affine_add_const(&out->a, k == IR_E_FLOORDIV ? kk : ir_affine_mul(&r.a, -kk, c));
  } else {
    int64_t g = common_factor(s, &r, c);
    lin_partition(&r, g, &a, &b);
    lin_canon(s, &a);
    ir_expr_t *inner = div_atom(s, lin_build(s, &a), c / g, k, x->dtype);
    out = k == IR_E_FLOORDIV ? &q : &b;
    collect(s, inner, k == IR_E_FLOORDIV ? 1 : g, out, true);
  }
  lin_canon(s, out);
  bool bad = lin_bad(&q) || lin_bad(&r) || lin_bad(&a) || lin_bad(&b);
  ir_expr_t *e = bad ? NULL : lin_build(s, out);
  lin_free(&q);
  lin_free(&r);
  lin_free(&a);
  lin_free(&b);
  return e;
}

/* floordiv / floormod of a simplified x by a constant c > 0. */
static ir_expr_t *div_const(simp_t *s, ir_expr_t *x, int64_t c, ir_expr_kind_t k, ir_dtype_t t) {
  int64_t v;
  if (ir_expr_is_const_int(x, &v)) return mk_int(s, t, k == IR_E_FLOORDIV ? floordiv64(v, c) : fmod64(v, c));
  if (c == 1) return k == IR_E_FLOORDIV ? x : mk_int(s, t, 0);
  lin_t l = lin_new(t);
  collect(s, x, 1, &l, true);
  lin_normalize(s, &l);
  ir_expr_t *r = lin_bad(&l) ? NULL : div_split(s, &l, c, k);
  lin_free(&l);
  return r ? r : mk_bin(s, k, t, x, mk_int(s, t, c));
}

static ir_expr_t *simp_div(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.bin.a), *b = simp(s, e->u.bin.b);
  int64_t bv;
  if (!ir_dtype_is_int(e->dtype)) return fold_bin(s, e, a, b);
  if (ir_expr_is_const_int(b, &bv)) {
    if (bv > 0) return div_const(s, a, bv, e->kind, e->dtype);
    return fold_bin(s, e, a, b); /* 0 and negative divisors: fold constants only */
  }
  ir_interval_t ia = iv_of(s, a), ib = iv_of(s, b);
  if (ib.lo > 0 && ia.lo >= 0 && ia.hi < ib.lo) return e->kind == IR_E_FLOORDIV ? mk_int(s, e->dtype, 0) : a;
  return rebuild_bin(s, e, a, b);
}

/* ======================================================================
 * min / max, comparisons, logic
 * ====================================================================== */

static ir_expr_t *simp_minmax(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.bin.a), *b = simp(s, e->u.bin.b);
  if (!ir_dtype_is_int(e->dtype)) return fold_bin(s, e, a, b);
  if (ir_expr_is_const_int(a, NULL) && ir_expr_is_const_int(b, NULL)) return fold_bin(s, e, a, b);
  if (ir_expr_cmp(a, b) == 0) return a;
  bool is_min = e->kind == IR_E_MIN;
  ir_interval_t ia = iv_of(s, a), ib = iv_of(s, b);
  if (ia.hi <= ib.lo) return is_min ? a : b;
  if (ib.hi <= ia.lo) return is_min ? b : a;
  ir_interval_t d = diff_interval(s, a, b);
  if (d.hi <= 0) return is_min ? a : b;
  if (d.lo >= 0) return is_min ? b : a;
  return rebuild_bin(s, e, a, b);
}

static ir_expr_t *simp_cmp(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.bin.a), *b = simp(s, e->u.bin.b);
  if (!ir_dtype_is_int(a->dtype) || !ir_dtype_is_int(b->dtype)) return fold_bin(s, e, a, b);
  if (ir_expr_is_const_int(a, NULL) && ir_expr_is_const_int(b, NULL)) return fold_bin(s, e, a, b);
  int d = decide_cmp(e->kind, diff_interval(s, a, b));
  return d < 0 ? rebuild_bin(s, e, a, b) : mk_int(s, IR_BOOL, d);
}

static ir_expr_t *simp_logic(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.bin.a), *b = simp(s, e->u.bin.b);
  int64_t v;
  bool is_and = e->kind == IR_E_AND;
  for (int side = 0; side < 2; side++) {
    ir_expr_t *c = side ? b : a, *other = side ? a : b;
    if (!ir_expr_is_const_int(c, &v)) continue;
    if ((v != 0) != is_and) return mk_int(s, IR_BOOL, !is_and); /* false && x, true || x */
    if (other->dtype == IR_BOOL) return other;                  /* true && x, false || x */
  }
  if (ir_expr_cmp(a, b) == 0 && a->dtype == IR_BOOL) return a;
  return fold_bin(s, e, a, b);
}

static ir_expr_kind_t negate_cmp(ir_expr_kind_t k) {
  switch (k) {
  case IR_E_EQ: return IR_E_NE;
  case IR_E_NE: return IR_E_EQ;
  case IR_E_LT: return IR_E_GE;
  case IR_E_LE: return IR_E_GT;
  case IR_E_GT: return IR_E_LE;
  default: return IR_E_LT; /* GE */
  }
}

static ir_expr_t *simp_not(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.un);
  int64_t v;
  if (ir_expr_is_const_int(a, &v)) return mk_int(s, IR_BOOL, v == 0);
  if (a->kind == IR_E_NOT && a->u.un->dtype == IR_BOOL) return a->u.un;
  if (ir_expr_is_compare(a->kind) && ir_dtype_is_int(a->u.bin.a->dtype)) /* floats: NaN */
    return ir_bin(s->f, negate_cmp(a->kind), a->u.bin.a, a->u.bin.b);
  return rebuild_un(s, e, a);
}

/* ======================================================================
 * The remaining node kinds
 * ====================================================================== */

static ir_expr_t *simp_cast(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.un);
  ir_dtype_t t = e->dtype;
  double fv;
  if (a->dtype == t) return a;
  if (a->kind == IR_E_INT) {
    int64_t v = a->u.ival;
    if (t == IR_BOOL) return mk_int(s, t, v != 0);
    if (t == IR_INT32) return mk_int(s, t, (int32_t)(uint32_t)(uint64_t)v);
    if (t == IR_INT64) return mk_int(s, t, v);
    return ir_float(s->f, t, round_to(t, (double)v));
  }
  if (a->kind == IR_E_FLOAT && const_num(a, &fv) && isfinite(fv)) {
    if (ir_dtype_is_float(t)) return ir_float(s->f, t, round_to(t, fv));
    if (t == IR_BOOL) return mk_int(s, t, fv != 0);
    double lim = t == IR_INT32 ? 2147483648.0 : 9223372036854775808.0;
    if (fv > -lim - 1 && fv < lim) return mk_int(s, t, (int64_t)trunc(fv));
  }
  return rebuild_un(s, e, a);
}

static ir_expr_t *simp_neg(simp_t *s, ir_expr_t *e) {
  ir_expr_t *a = simp(s, e->u.un);
  if (a->kind == IR_E_FLOAT) return ir_float(s->f, e->dtype, -a->u.fval);
  if (a->kind == IR_E_INT && a->u.ival != INT64_MIN) return mk_int(s, e->dtype, -a->u.ival);
  return rebuild_un(s, e, a);
}

static ir_expr_t *simp_select(simp_t *s, ir_expr_t *e) {
  ir_expr_t *c = simp(s, e->u.sel.cond);
  int64_t v;
  if (ir_expr_is_const_int(c, &v)) return simp(s, v ? e->u.sel.t : e->u.sel.f);
  ir_expr_t *t = simp(s, e->u.sel.t), *f = simp(s, e->u.sel.f);
  if (ir_expr_cmp(t, f) == 0) return t;
  if (c == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
  ir_expr_t *r = ir_select(s->f, c, t, f);
  r->dtype = e->dtype;
  return r;
}

static ir_expr_t *simp_load(simp_t *s, ir_expr_t *e) {
  ir_expr_t *idx[IR_MAX_DIMS];
  int n = e->u.load.n;
  bool same = true;
  if (n > IR_MAX_DIMS) return e;
  for (int i = 0; i < n; i++) {
    idx[i] = simp(s, e->u.load.idx[i]);
    same &= idx[i] == e->u.load.idx[i];
  }
  if (same) return e;
  ir_expr_t *r = ir_load(s->f, e->u.load.buf, idx, n);
  r->dtype = e->dtype;
  return r;
}

static bool eval_call(ir_math_fn_t fn, const double *x, double *out) {
  switch (fn) {
  case IR_FN_EXP: *out = exp(x[0]); break;
  case IR_FN_LOG: *out = log(x[0]); break;
  case IR_FN_SQRT: *out = sqrt(x[0]); break;
  case IR_FN_TANH: *out = tanh(x[0]); break;
  case IR_FN_ABS: *out = fabs(x[0]); break;
  case IR_FN_POW: *out = pow(x[0], x[1]); break;
  default: return false;
  }
  return isfinite(*out);
}

static ir_expr_t *simp_call(simp_t *s, ir_expr_t *e) {
  ir_expr_t *args[2] = {NULL, NULL};
  double x[2] = {0, 0}, r;
  bool same = true, consts = true;
  for (int i = 0; i < e->u.call.n; i++) {
    args[i] = simp(s, e->u.call.args[i]);
    same &= args[i] == e->u.call.args[i];
    consts &= args[i]->kind == IR_E_FLOAT && const_num(args[i], &x[i]);
  }
  if (consts && ir_dtype_is_float(e->dtype) && eval_call(e->u.call.fn, x, &r))
    return ir_float(s->f, e->dtype, round_to(e->dtype, r));
  if (same) return e;
  ir_expr_t *n = ir_call(s->f, e->u.call.fn, args, e->u.call.n);
  n->dtype = e->dtype;
  return n;
}

static ir_expr_t *simp_var(simp_t *s, ir_expr_t *e) {
  ir_interval_t iv;
  if (ir_bounds_get(s->b, e->u.var, &iv) && iv.lo == iv.hi && !is_inf(iv.lo) && ir_dtype_is_int(e->dtype))
    return mk_int(s, e->dtype, iv.lo);
  return e;
}

/* Simplifies one node given that sums/products of integers go through
 * lin_simp (this handles them only as its overflow fallback). */
static ir_expr_t *node_simp(simp_t *s, ir_expr_t *e) {
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: return e;
  case IR_E_VAR: return simp_var(s, e);
  case IR_E_LOAD: return simp_load(s, e);
  case IR_E_FLOORDIV: case IR_E_FLOORMOD: return simp_div(s, e);
  case IR_E_MIN: case IR_E_MAX: return simp_minmax(s, e);
  case IR_E_AND: case IR_E_OR: return simp_logic(s, e);
  case IR_E_NOT: return simp_not(s, e);
  case IR_E_NEG: return simp_neg(s, e);
  case IR_E_CAST: return simp_cast(s, e);
  case IR_E_SELECT: return simp_select(s, e);
  case IR_E_CALL: return simp_call(s, e);
  default:
    if (ir_expr_is_compare(e->kind)) return simp_cmp(s, e);
    return fold_bin(s, e, simp(s, e->u.bin.a), simp(s, e->u.bin.b)); /* ADD SUB MUL DIV */
  }
}

static ir_expr_t *simp(simp_t *s, ir_expr_t *e) {
  if (e->kind == IR_E_INT || e->kind == IR_E_FLOAT) return e;
  memo_ent_t *x = memo_find(&s->memo, e);
  ir_expr_t *r = x ? x->val : NULL;
  if (r) return r;
  bool lin = ir_dtype_is_int(e->dtype) &&
             (e->kind == IR_E_ADD || e->kind == IR_E_SUB || e->kind == IR_E_MUL || e->kind == IR_E_NEG);
  r = lin ? lin_simp(s, e) : node_simp(s, e);
  memo_entry(&s->memo, e)->val = r;
  return r;
}

ir_expr_t *ir_simplify(ir_func_t *f, ir_expr_t *e, const ir_bounds_t *b) {
  if (!e) return NULL;
  simp_t s;
  simp_init(&s, f, b);
  ir_expr_t *r = simp(&s, e);
  simp_done(&s);
  long budget = 4096; /* unchanged input: hand it back (bounded check, inputs may be DAGs) */
  return cmp_rec(r, e, &budget) == 0 ? e : r;
}

bool ir_prove(ir_func_t *f, ir_expr_t *cond, const ir_bounds_t *b) {
  int64_t v;
  return ir_expr_is_const_int(ir_simplify(f, cond, b), &v) && v != 0;
}

/* ======================================================================
 * Block read/write regions
 * ====================================================================== */

typedef struct access {
  ir_buffer_t *buf;
  ir_expr_t **idx;
  bool self; /* the load of a reduction update C[v] = C[v] + ... */
} access_t;

typedef struct access_list {
  access_t *a;
  int n, cap;
} access_list_t;

typedef struct region_ctx {
  access_list_t reads, writes;
  bool has_init;
} region_ctx_t;

static void access_push(access_list_t *l, ir_buffer_t *buf, ir_expr_t **idx, bool self) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 8;
    l->a = tn_xrealloc(l->a, sizeof(access_t) * (size_t)l->cap);
  }
  l->a[l->n++] = (access_t){buf, idx, self};
}

static bool same_indices(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

/* Records the loads in e, left to right.  `st` is the store whose value e
 * is (NULL inside index expressions). */
static void scan_expr(region_ctx_t *c, ir_expr_t *e, const ir_stmt_t *st) {
  if (!e) return;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: case IR_E_VAR: return;
  case IR_E_LOAD: {
    bool self = st && c->has_init && e->u.load.buf == st->u.store.buf && e->u.load.n == st->u.store.n &&
                same_indices(e->u.load.idx, st->u.store.idx, e->u.load.n);
    access_push(&c->reads, e->u.load.buf, e->u.load.idx, self);
    for (int i = 0; i < e->u.load.n; i++) scan_expr(c, e->u.load.idx[i], NULL);
    return;
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: scan_expr(c, e->u.un, st); return;
  case IR_E_SELECT:
    scan_expr(c, e->u.sel.cond, st);
    scan_expr(c, e->u.sel.t, st);
    scan_expr(c, e->u.sel.f, st);
    return;
  case IR_E_CALL:
    for (int i = 0; i < e->u.call.n; i++) scan_expr(c, e->u.call.args[i], st);
    return;
  default:
    scan_expr(c, e->u.bin.a, st);
    scan_expr(c, e->u.bin.b, st);
    return;
  }
}

static bool scan_stmt(ir_stmt_t *st, void *p) {
  region_ctx_t *c = p;
  if (st->kind != IR_S_STORE) return st->kind != IR_S_BLOCK; /* nested blocks have their own regions */
  scan_expr(c, st->u.store.value, st);
  for (int i = 0; i < st->u.store.n; i++) scan_expr(c, st->u.store.idx[i], NULL);
  access_push(&c->writes, st->u.store.buf, st->u.store.idx, false);
  return true;
}

/* Range of dimension d of `buf` covering the accesses `acc` (all to buf):
 * symbolic when the indices differ by constants, else constant bounds from
 * the iterator domains, clamped to the buffer. */
static ir_range_t dim_range(simp_t *sym, simp_t *num, const access_t *const *acc, int n, int d) {
  ir_func_t *f = sym->f;
  ir_expr_t *base = simp(sym, acc[0]->idx[d]);
  int64_t lo = 0, hi = 0;
  bool consts = true;
  for (int i = 1; i < n && consts; i++) {
    ir_interval_t iv = diff_interval(sym, simp(sym, acc[i]->idx[d]), base);
    consts = iv.lo == iv.hi && !is_inf(iv.lo);
    lo = TN_MIN(lo, iv.lo), hi = TN_MAX(hi, iv.lo);
  }
  int64_t span;
  if (consts && !__builtin_sub_overflow(hi, lo, &span) && span < INT32_MAX) {
    ir_expr_t *min = lo ? lin_simp(sym, ir_bin(f, IR_E_ADD, base, ir_int(f, lo))) : base;
    return (ir_range_t){min, ir_int(f, span + 1)};
  }
  int64_t dim = acc[0]->buf->shape[d];
  ir_interval_t u = iv_of(num, simp(num, acc[0]->idx[d]));
  for (int i = 1; i < n; i++) u = iv_union(u, iv_of(num, simp(num, acc[i]->idx[d])));
  u.lo = TN_MAX(u.lo, 0), u.hi = TN_MIN(u.hi, dim - 1);
  if (u.lo > u.hi) u = (ir_interval_t){0, dim - 1};
  return (ir_range_t){ir_int(f, u.lo), ir_int(f, u.hi - u.lo + 1)};
}

/* One region per buffer in first-access order; a buffer whose only
 * accesses are reduction self-reads is left out. */
static int build_regions(simp_t *sym, simp_t *num, const access_list_t *l, ir_region_t **out) {
  ir_func_t *f = sym->f;
  ir_region_t *regs = TN_NEWN(f->arena, ir_region_t, l->n ? l->n : 1);
  const access_t **mine = tn_xmalloc(sizeof(access_t *) * (size_t)(l->n ? l->n : 1));
  int nregs = 0;
  for (int i = 0; i < l->n; i++) {
    ir_buffer_t *buf = l->a[i].buf;
    bool seen = false, wanted = false;
    int n = 0;
    for (int j = 0; j < l->n; j++) {
      if (l->a[j].buf != buf) continue;
      seen |= j < i;
      wanted |= !l->a[j].self;
      mine[n++] = &l->a[j];
    }
    if (seen || !wanted) continue;
    ir_region_t *r = &regs[nregs++];
    r->buf = buf;
    r->dims = TN_NEWN(f->arena, ir_range_t, buf->ndim ? buf->ndim : 1);
    for (int d = 0; d < buf->ndim; d++) r->dims[d] = dim_range(sym, num, mine, n, d);
  }
  free(mine);
  *out = nregs ? regs : NULL;
  return nregs;
}

void ir_block_infer_regions(ir_func_t *f, ir_block_t *blk) {
  region_ctx_t c = {.has_init = blk->init != NULL};
  ir_stmt_walk(blk->init, scan_stmt, &c);
  ir_stmt_walk(blk->body, scan_stmt, &c);
  scan_expr(&c, blk->predicate, NULL);
  ir_bounds_t b;
  ir_bounds_init(&b);
  for (int i = 0; i < blk->niters; i++) ir_bounds_set(&b, blk->iters[i].var, 0, blk->iters[i].extent - 1);
  simp_t sym, num;
  simp_init(&sym, f, NULL);
  simp_init(&num, f, &b);
  blk->nreads = build_regions(&sym, &num, &c.reads, &blk->reads);
  blk->nwrites = build_regions(&sym, &num, &c.writes, &blk->writes);
  simp_done(&sym);
  simp_done(&num);
  ir_bounds_free(&b);
  free(c.reads.a);
  free(c.writes.a);
}
