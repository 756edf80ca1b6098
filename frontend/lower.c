/* lower.c — lowering the workload language's expressions to tensor IR:
 * types and promotion, names, tensor accesses with their index-range
 * checks (narrowed inside select branches), divisors and reductions. */
#include "frontend/front.h"

/* ======================================================================
 * Lowering expressions: types, names, accesses and range checks
 * ====================================================================== */

svar_t *fe_find_var(lower_t *L, const char *name) {
  for (int i = 0; i < L->nvars; i++)
    if (strcmp(L->vars[i].name, name) == 0) return &L->vars[i];
  return NULL;
}

/* Literals, parameters and arithmetic on them take the type of their context
 * (the other operand, or the hint) instead of int32/float32. */
static bool is_untyped(lower_t *L, const ast_t *a) {
  switch (a->kind) {
  case A_INT:
  case A_FLOAT: return true;
  case A_NAME: return !fe_find_var(L, a->name) && fe_find_param(L->p, a->name);
  case A_UNARY: return a->op == T_MINUS && is_untyped(L, a->args[0]);
  case A_BINARY:
    return (a->op == T_PLUS || a->op == T_MINUS || a->op == T_STAR || a->op == T_SLASH || a->op == T_DSLASH ||
            a->op == T_PERCENT) &&
           is_untyped(L, a->args[0]) && is_untyped(L, a->args[1]);
  default: return false;
  }
}

static ir_expr_t *float_const(lower_t *L, const ast_t *a, double v, ir_dtype_t t) {
  char s[96];
  if (fabs(v) > ir_dtype_max_value(t)) {
    fe_perr(L->p, a->line, a->col, "constant '%s' (%g) is out of range for %s (largest finite value %g)",
         SNIP(L->p, a, s), v, ir_dtype_name(t), ir_dtype_max_value(t));
    return NULL;
  }
  return ir_float(L->f, t, v);
}

static ir_expr_t *int_const(lower_t *L, const ast_t *a, int64_t v, ir_dtype_t hint) {
  char s[96];
  if (ir_dtype_is_float(hint)) return float_const(L, a, (double)v, hint);
  if (hint == IR_INT64) return ir_const_int(L->f, IR_INT64, v);
  if (v < INT32_MIN || v > INT32_MAX) {
    fe_perr(L->p, a->line, a->col, "integer constant '%s' = %lld does not fit in int32, the type it has here",
         SNIP(L->p, a, s), (long long)v);
    return NULL;
  }
  return ir_int(L->f, v);
}

/* Converts to dtype t, folding constants. */
ir_expr_t *fe_convert(lower_t *L, ir_expr_t *e, ir_dtype_t t) {
  if (e->dtype == t) return e;
  if (e->kind == IR_E_INT && e->dtype != IR_BOOL) {
    int64_t v = e->u.ival;
    if (ir_dtype_is_float(t) && fabs((double)v) <= ir_dtype_max_value(t)) return ir_float(L->f, t, (double)v);
    if (t == IR_INT64 || (t == IR_INT32 && v >= INT32_MIN && v <= INT32_MAX)) return ir_const_int(L->f, t, v);
  }
  if (e->kind == IR_E_FLOAT && ir_dtype_is_float(t) && fabs(e->u.fval) <= ir_dtype_max_value(t))
    return ir_float(L->f, t, e->u.fval);
  return ir_cast(L->f, t, e);
}

int fe_need_num(lower_t *L, const ir_expr_t *e, const ast_t *a, const char *what) {
  char s[96];
  if (e->dtype != IR_BOOL) return TN_OK;
  return fe_perr(L->p, a->line, a->col, "expected a number for %s, but '%s' is boolean", what, SNIP(L->p, a, s));
}

static int need_bool(lower_t *L, const ir_expr_t *e, const ast_t *a, const char *what) {
  char s[96];
  if (e->dtype == IR_BOOL) return TN_OK;
  return fe_perr(L->p, a->line, a->col,
              "expected a boolean for %s, but '%s' is %s (a comparison such as "
              "'x > 0' is boolean)",
              what, SNIP(L->p, a, s), ir_dtype_name(e->dtype));
}

/* Wider of two numeric types: floats beat ints, wider beats narrower. */
static ir_dtype_t promote(ir_dtype_t a, ir_dtype_t b) {
  bool fa = ir_dtype_is_float(a), fb = ir_dtype_is_float(b);
  if (fa != fb) return fa ? a : b;
  if (a != b && ir_dtype_is_16bit_float(a) && ir_dtype_is_16bit_float(b)) return IR_FLOAT32; /* f16 with bf16 */
  return ir_dtype_bytes(a) >= ir_dtype_bytes(b) ? a : b;
}

/* Brings two numeric operands to a common type. */
static int unify(lower_t *L, const ast_t *x, const ast_t *y, const char *what, ir_expr_t **ex,
                 ir_expr_t **ey) {
  int rc;
  if ((rc = fe_need_num(L, *ex, x, what)) || (rc = fe_need_num(L, *ey, y, what))) return rc;
  ir_dtype_t t = promote((*ex)->dtype, (*ey)->dtype);
  *ex = fe_convert(L, *ex, t);
  *ey = fe_convert(L, *ey, t);
  return TN_OK;
}

static int64_t sat_add_const(int64_t v, int64_t c) {
  int64_t r;
  if (v == IR_INF_POS || v == IR_INF_NEG) return v;
  if (__builtin_add_overflow(v, c, &r)) return c > 0 ? IR_INF_POS : IR_INF_NEG;
  return r;
}

/* Interval of an integer expression from the variable bounds and from the
 * facts (`E in [lo, hi]`) that enclosing select conditions establish. */
static ir_interval_t known_interval(const lower_t *L, const ir_expr_t *e) {
  ir_interval_t iv = ir_interval_of(e, &L->bounds);
  if (!L->nfacts) return iv;
  ir_affine_t le = {0};
  ir_affine_of(e, 0, &le); /* an expression that is not affine matches no fact */
  for (int i = 0; i < L->nfacts; i++) {
    int64_t c;
    if (!ir_affine_const_diff(&le, &L->facts[i].lin, &c)) continue;
    iv.lo = TN_MAX(iv.lo, sat_add_const(L->facts[i].iv.lo, c));
    iv.hi = TN_MIN(iv.hi, sat_add_const(L->facts[i].iv.hi, c));
  }
  ir_affine_free(&le);
  return iv;
}

typedef struct saved { /* what narrowing changed, to undo it */
  const ir_var_t *var[MAX_NARROW];
  ir_interval_t iv[MAX_NARROW];
  int n, nfacts;
  bool empty;
} saved_t;

/* Learns `e OP other`: narrows a variable's bounds, or records a fact about
 * a linear expression. */
static void narrow_term(lower_t *L, const ir_expr_t *e, ir_expr_kind_t op, const ir_expr_t *other,
                        saved_t *sv) {
  ir_interval_t cur = known_interval(L, e), o = known_interval(L, other);
  if (op == IR_E_LT && o.hi != IR_INF_POS && o.hi != IR_INF_NEG) cur.hi = TN_MIN(cur.hi, o.hi - 1);
  if (op == IR_E_LE || op == IR_E_EQ) cur.hi = TN_MIN(cur.hi, o.hi);
  if (op == IR_E_GT && o.lo != IR_INF_NEG && o.lo != IR_INF_POS) cur.lo = TN_MAX(cur.lo, o.lo + 1);
  if (op == IR_E_GE || op == IR_E_EQ) cur.lo = TN_MAX(cur.lo, o.lo);
  if (cur.lo > cur.hi) sv->empty = true;
  ir_interval_t old;
  if (e->kind == IR_E_VAR && sv->n < MAX_NARROW && ir_bounds_get(&L->bounds, e->u.var, &old)) {
    sv->var[sv->n] = e->u.var, sv->iv[sv->n++] = old;
    ir_bounds_set(&L->bounds, e->u.var, cur.lo, cur.hi);
  } else if (e->kind != IR_E_VAR && L->nfacts < MAX_NARROW && ir_affine_of(e, 0, &L->facts[L->nfacts].lin)) {
    L->facts[L->nfacts++].iv = cur;
  }
}

static ir_expr_kind_t mirror(ir_expr_kind_t k) {
  switch (k) {
  case IR_E_LT: return IR_E_GT;
  case IR_E_LE: return IR_E_GE;
  case IR_E_GT: return IR_E_LT;
  case IR_E_GE: return IR_E_LE;
  default: return k;
  }
}

/* Learns from a condition's integer comparisons joined with &&. */
static void narrow(lower_t *L, const ir_expr_t *c, saved_t *sv) {
  if (c->kind == IR_E_AND) {
    narrow(L, c->u.bin.a, sv);
    narrow(L, c->u.bin.b, sv);
    return;
  }
  if (!ir_expr_is_compare(c->kind) || c->kind == IR_E_NE || !ir_dtype_is_int(c->u.bin.a->dtype)) return;
  narrow_term(L, c->u.bin.a, c->kind, c->u.bin.b, sv);
  narrow_term(L, c->u.bin.b, mirror(c->kind), c->u.bin.a, sv);
}

/* Lowers `a` where `cond` (may be NULL) is known to hold. */
static ir_expr_t *lower_under(lower_t *L, const ast_t *a, ir_dtype_t hint, const ir_expr_t *cond) {
  if (!cond) return fe_lower(L, a, hint);
  saved_t sv = {.nfacts = L->nfacts};
  narrow(L, cond, &sv);
  L->unreachable += sv.empty;
  ir_expr_t *e = fe_lower(L, a, hint);
  L->unreachable -= sv.empty;
  L->nfacts = sv.nfacts;
  while (sv.n-- > 0) ir_bounds_set(&L->bounds, sv.var[sv.n], sv.iv[sv.n].lo, sv.iv[sv.n].hi);
  return e;
}

/* Lowers two operands; an untyped one takes the other's type (x is lowered
 * under `cond`, the taken branch of a select). */
static int lower_pair(lower_t *L, const ast_t *x, const ast_t *y, ir_dtype_t hint, const ir_expr_t *cond,
                      ir_expr_t **ex, ir_expr_t **ey) {
  bool ux = is_untyped(L, x), uy = is_untyped(L, y);
  if (ux && !uy) {
    if (!(*ey = fe_lower(L, y, hint))) return TN_EINVAL;
    ir_dtype_t h = (*ey)->dtype != IR_BOOL ? (*ey)->dtype : hint;
    return (*ex = lower_under(L, x, h, cond)) ? TN_OK : TN_EINVAL;
  }
  if (!(*ex = lower_under(L, x, hint, cond))) return TN_EINVAL;
  ir_dtype_t h = uy && (*ex)->dtype != IR_BOOL ? (*ex)->dtype : hint;
  return (*ey = fe_lower(L, y, h)) ? TN_OK : TN_EINVAL;
}

static void add_dep(lower_t *L, const tensor_t *T, const ast_t *a) {
  int ti = (int)(T - L->p->tensors);
  stmt_t *st = L->st;
  for (int i = 0; i < st->ndeps; i++)
    if (st->deps[i].tensor == ti) return;
  if (st->ndeps == st->capdeps) {
    dep_t *grown = TN_NEWN(L->p->tmp, dep_t, st->capdeps ? 2 * st->capdeps : 4);
    if (st->ndeps) memcpy(grown, st->deps, sizeof *grown * (size_t)st->ndeps);
    st->deps = grown;
    st->capdeps = st->capdeps ? 2 * st->capdeps : 4;
  }
  st->deps[st->ndeps++] = (dep_t){.tensor = ti, .line = a->line, .col = a->col};
}

/* Every index must stay inside its dimension for every iteration. */
static int check_range(lower_t *L, const ast_t *access, int d, const ast_t *ia, const ir_expr_t *idx,
                       int64_t extent) {
  ir_interval_t iv = known_interval(L, idx);
  if (L->unreachable || (iv.lo >= 0 && iv.hi <= extent - 1)) return TN_OK;
  char s[96], lo[24], hi[24], bad[24];
  fe_fmt_bound(iv.lo, lo, sizeof lo);
  fe_fmt_bound(iv.hi, hi, sizeof hi);
  fe_fmt_bound(iv.hi > extent - 1 ? iv.hi : iv.lo, bad, sizeof bad);
  return fe_perr(L->p, ia->line, ia->col,
              "access %s can reach index %s in dimension %d of extent %lld (index "
              "range [%s, %s]); expected indices in [0, %lld]",
              SNIP(L->p, access, s), bad, d, (long long)extent, lo, hi, (long long)extent - 1);
}

/* T[e1, ...] (or a bare tensor name for 0 indices). */
static ir_expr_t *lower_access(lower_t *L, const ast_t *a) {
  parser_t *p = L->p;
  tensor_t *T = fe_find_tensor(p, a->name);
  char s[96];
  if (!T) return fe_unknown_tensor(p, a->line, a->col, a->name), NULL;
  ir_buffer_t *b = T->buf;
  if (L->in_index)
    return fe_perr(p, a->line, a->col,
                "tensor access '%s' inside an index; indices are integer expressions "
                "over index variables and parameters",
                SNIP(p, a, s)),
           NULL;
  if (a->nargs != b->ndim)
    return fe_perr(p, a->line, a->col, "tensor '%s' has %d %s but %d %s given", b->name, b->ndim,
                fe_plural(b->ndim, "dimension", "dimensions"), a->nargs,
                fe_plural(a->nargs, "index was", "indices were")),
           NULL;
  ir_expr_t *idx[IR_MAX_DIMS];
  L->in_index++;
  for (int d = 0; d < b->ndim; d++) {
    const ast_t *ia = a->args[d];
    if (!(idx[d] = fe_lower(L, ia, IR_INT32))) return NULL;
    if (idx[d]->dtype != IR_INT32)
      return fe_perr(p, ia->line, ia->col, "index %d of '%s' must be an int32 expression, but '%s' is %s", d,
                  b->name, SNIP(p, ia, s), ir_dtype_name(idx[d]->dtype)),
             NULL;
    if (check_range(L, a, d, ia, idx[d], b->shape[d])) return NULL;
  }
  L->in_index--;
  add_dep(L, T, a);
  return ir_load(L->f, b, idx, b->ndim);
}

static ir_expr_t *lower_name(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  parser_t *p = L->p;
  svar_t *v = fe_find_var(L, a->name);
  if (v) return ir_varref(L->f, v->iter);
  const ir_param_t *pm = fe_find_param(p, a->name);
  if (pm) return int_const(L, a, pm->value, hint);
  if (fe_find_tensor(p, a->name)) return lower_access(L, a);
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < L->nvars; i++) tn_buf_printf(&b, "%s%s", i ? ", " : "", L->vars[i].name);
  if (!L->nvars) tn_buf_put(&b, "none");
  tn_buf_put(&b, "; parameters: ");
  fe_list_params(p, &b, "none");
  fe_perr(p, a->line, a->col, "unknown variable or parameter '%s' (variables here: %s)", a->name,
       tn_buf_str(&b));
  tn_buf_free(&b);
  return NULL;
}

/* Integer division and modulo need a divisor that is always >= 1. */
static int check_divisor(lower_t *L, const ast_t *a, const ir_expr_t *d) {
  ir_interval_t iv = known_interval(L, d);
  if (L->unreachable || iv.lo >= 1) return TN_OK;
  char s[96], lo[24], hi[24];
  fe_fmt_bound(iv.lo, lo, sizeof lo);
  fe_fmt_bound(iv.hi, hi, sizeof hi);
  return fe_perr(L->p, a->line, a->col,
              "integer divisor '%s' can be %s (range [%s, %s]); expected a divisor "
              "that is always >= 1",
              SNIP(L->p, a, s), iv.lo <= 0 && iv.hi >= 0 ? "0" : "negative", lo, hi);
}

/* Integer arithmetic whose known range leaves int32 would wrap in generated
 * code (the evaluator computes in double): an error wherever the range is
 * known (unknown ends, from loaded values, are the data's business). */
static ir_expr_t *check_int32(lower_t *L, const ast_t *a, ir_expr_t *e) {
  if (!e || e->dtype != IR_INT32 || L->unreachable) return e;
  ir_interval_t iv = ir_interval_of(e, &L->bounds);
  bool lo_bad = iv.lo != IR_INF_NEG && iv.lo < INT32_MIN, hi_bad = iv.hi != IR_INF_POS && iv.hi > INT32_MAX;
  if (!lo_bad && !hi_bad) return e;
  char s[96], lo[24], hi[24];
  fe_fmt_bound(iv.lo, lo, sizeof lo);
  fe_fmt_bound(iv.hi, hi, sizeof hi);
  return fe_perr(L->p, a->line, a->col,
              "int32 expression '%s' can overflow (range [%s, %s]); expected values in "
              "[%d, %d]",
              SNIP(L->p, a, s), lo, hi, INT32_MIN, INT32_MAX),
         NULL;
}

static ir_expr_t *lower_arith(lower_t *L, const ast_t *a, ir_expr_t *x, ir_expr_t *y) {
  bool fl = ir_dtype_is_float(x->dtype);
  switch (a->op) {
  case T_PLUS: return check_int32(L, a, ir_bin(L->f, IR_E_ADD, x, y));
  case T_MINUS: return check_int32(L, a, ir_bin(L->f, IR_E_SUB, x, y));
  case T_STAR: return check_int32(L, a, ir_bin(L->f, IR_E_MUL, x, y));
  case T_SLASH:
    if (fl) return ir_bin(L->f, IR_E_DIV, x, y);
    __attribute__((fallthrough)); /* '/' on integers is floor division */
  default:
    if (fl)
      return fe_perr(L->p, a->op_line, a->op_col, "%s needs integer operands, but they are %s%s",
                  fe_tok_names[a->op], ir_dtype_name(x->dtype),
                  a->op == T_DSLASH ? "; use '/' for floating-point division" : ""),
             NULL;
    if (check_divisor(L, a->args[1], y)) return NULL;
    return check_int32(L, a, ir_bin(L->f, a->op == T_PERCENT ? IR_E_FLOORMOD : IR_E_FLOORDIV, x, y));
  }
}

static ir_expr_t *lower_binary(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  static const ir_expr_kind_t cmp[] = {[T_EQ] = IR_E_EQ, [T_NE] = IR_E_NE, [T_LT] = IR_E_LT,
                                       [T_LE] = IR_E_LE, [T_GT] = IR_E_GT, [T_GE] = IR_E_GE};
  const ast_t *x = a->args[0], *y = a->args[1];
  ir_expr_t *ex, *ey;
  char what[32];
  snprintf(what, sizeof what, "the operands of %s", fe_tok_names[a->op]);
  if (a->op == T_AND || a->op == T_OR) {
    if (!(ex = fe_lower(L, x, hint)) || need_bool(L, ex, x, fe_tok_names[a->op]) || !(ey = fe_lower(L, y, hint)) ||
        need_bool(L, ey, y, fe_tok_names[a->op]))
      return NULL;
    return ir_bin(L->f, a->op == T_AND ? IR_E_AND : IR_E_OR, ex, ey);
  }
  if (lower_pair(L, x, y, hint, NULL, &ex, &ey) || unify(L, x, y, what, &ex, &ey)) return NULL;
  if (a->op >= T_EQ && a->op <= T_GE) return ir_bin(L->f, cmp[a->op], ex, ey);
  return lower_arith(L, a, ex, ey);
}

static ir_expr_t *lower_unary(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  const ast_t *x = a->args[0];
  ir_expr_t *e;
  if (a->op == T_NOT) {
    if (!(e = fe_lower(L, x, hint)) || need_bool(L, e, x, "'!'")) return NULL;
    return ir_unary(L->f, IR_E_NOT, e);
  }
  if (x->kind == A_INT) return int_const(L, a, -x->ival, hint);
  if (x->kind == A_FLOAT) return float_const(L, a, -x->fval, ir_dtype_is_float(hint) ? hint : L->fdefault);
  if (!(e = fe_lower(L, x, hint)) || fe_need_num(L, e, x, "'-'")) return NULL;
  if (e->kind == IR_E_INT && e->u.ival != (e->dtype == IR_INT32 ? INT32_MIN : INT64_MIN))
    return ir_const_int(L->f, e->dtype, -e->u.ival);
  if (e->kind == IR_E_FLOAT) return ir_float(L->f, e->dtype, -e->u.fval);
  return check_int32(L, a, ir_unary(L->f, IR_E_NEG, e));
}

static int check_arity(lower_t *L, const ast_t *a, int n, const char *usage) {
  if (a->nargs == n) return TN_OK;
  return fe_perr(L->p, a->line, a->col, "%s takes %d %s, got %d (%s)", a->name, n,
              fe_plural(n, "argument", "arguments"), a->nargs, usage);
}

/* exp log sqrt tanh abs (x), pow(x, y): floating point. */
static ir_expr_t *lower_math(lower_t *L, const ast_t *a, ir_math_fn_t fn, ir_dtype_t hint) {
  int n = ir_math_fn_arity(fn);
  if (check_arity(L, a, n, n == 2 ? "e.g. pow(x, 2.0)" : "e.g. exp(x)")) return NULL;
  ir_dtype_t fh = ir_dtype_is_float(hint) ? hint : L->fdefault;
  ir_expr_t *args[2];
  char what[48];
  snprintf(what, sizeof what, "the argument of %s", a->name);
  if (n == 1 ? (!(args[0] = fe_lower(L, a->args[0], fh)) || fe_need_num(L, args[0], a->args[0], what))
             : (lower_pair(L, a->args[0], a->args[1], fh, NULL, &args[0], &args[1]) ||
                unify(L, a->args[0], a->args[1], what, &args[0], &args[1])))
    return NULL;
  for (int i = 0; i < n; i++)
    if (!ir_dtype_is_float(args[i]->dtype)) args[i] = fe_convert(L, args[i], fh);
  return ir_call(L->f, fn, args, n);
}

static ir_expr_t *lower_select(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  if (check_arity(L, a, 3, "select(cond, a, b)")) return NULL;
  ir_expr_t *c, *t, *e;
  if (!(c = fe_lower(L, a->args[0], hint)) || need_bool(L, c, a->args[0], "the condition of select") ||
      lower_pair(L, a->args[1], a->args[2], hint, c, &t, &e) ||
      unify(L, a->args[1], a->args[2], "the values of select", &t, &e))
    return NULL;
  return ir_select(L->f, c, t, e);
}

static ir_expr_t *lower_call(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  parser_t *p = L->p;
  ir_dtype_t t;
  if (strcmp(a->name, "select") == 0) return lower_select(L, a, hint);
  if (strcmp(a->name, "min") == 0 || strcmp(a->name, "max") == 0) {
    ir_expr_t *x, *y;
    if (check_arity(L, a, 2, "binary min/max; a reduction is max(k < K: EXPR)") ||
        lower_pair(L, a->args[0], a->args[1], hint, NULL, &x, &y) ||
        unify(L, a->args[0], a->args[1], "the arguments of min/max", &x, &y))
      return NULL;
    return ir_bin(L->f, a->name[1] == 'i' ? IR_E_MIN : IR_E_MAX, x, y);
  }
  if (strcmp(a->name, "sum") == 0)
    return fe_perr(p, a->line, a->col, "sum needs reduction variables: sum(k < K: EXPR)"), NULL;
  for (int fn = 0; fn < IR_FN__COUNT; fn++)
    if (strcmp(a->name, ir_math_fn_name((ir_math_fn_t)fn)) == 0)
      return lower_math(L, a, (ir_math_fn_t)fn, hint);
  if (fe_lang_dtype(a->name, &t)) {
    ir_expr_t *x;
    if (check_arity(L, a, 1, "a conversion such as float32(x)") || !(x = fe_lower(L, a->args[0], t)))
      return NULL;
    return fe_convert(L, x, t);
  }
  if (fe_find_tensor(p, a->name))
    return fe_perr(p, a->line, a->col, "'%s' is a tensor: index it with [...], e.g. %s[i]", a->name, a->name),
           NULL;
  return fe_perr(p, a->line, a->col,
              "unknown function '%s' (expected exp, log, sqrt, tanh, abs, pow, min, max, "
              "select or a conversion such as float32(x))",
              a->name),
         NULL;
}

/* Lowers an expression to IR over the block iterators; `hint` is the type
 * untyped constants take when nothing else decides it. */
ir_expr_t *fe_lower(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  switch (a->kind) {
  case A_INT: return int_const(L, a, a->ival, hint);
  case A_FLOAT: return float_const(L, a, a->fval, ir_dtype_is_float(hint) ? hint : L->fdefault);
  case A_NAME: return lower_name(L, a, hint);
  case A_INDEX: return lower_access(L, a);
  case A_CALL: return lower_call(L, a, hint);
  case A_UNARY: return lower_unary(L, a, hint);
  case A_BINARY: return lower_binary(L, a, hint);
  case A_REDUCE: break;
  }
  return fe_perr(L->p, a->line, a->col,
              "reduction '%s' must be the whole right side of a statement (e.g. "
              "C[i] = sum(k < K: A[i, k])); compute it into a temp first",
              a->name),
         NULL;
}
