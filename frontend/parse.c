/* parse.c — the workload language's recursive-descent parser: expressions
 * into a syntax tree, constant integer expressions (shapes, extents) and
 * the declarations (parameters, tensors). */
#include "frontend/front.h"

/* ======================================================================
 * Parser: expressions
 * ====================================================================== */

tok_t *fe_peek(parser_t *p) { return &p->toks[p->pos]; }

tok_t *fe_next(parser_t *p) {
  tok_t *t = &p->toks[p->pos];
  if (t->kind != T_EOF) p->pos++;
  return t;
}

static bool accept(parser_t *p, tok_kind_t k) {
  if (fe_peek(p)->kind != k) return false;
  fe_next(p);
  return true;
}

static uint32_t prev_end(const parser_t *p) {
  const tok_t *t = &p->toks[p->pos > 0 ? p->pos - 1 : 0];
  return t->off + t->len;
}

/* Consumes a token of kind k or reports "expected K CONTEXT, found X". */
__attribute__((format(printf, 3, 4))) int fe_expect(parser_t *p, tok_kind_t k, const char *fmt, ...) {
  if (accept(p, k)) return TN_OK;
  char ctx[256], found[80];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  tok_t *t = fe_peek(p);
  return fe_perr(p, t->line, t->col, "expected %s %s, found %s", fe_tok_names[k], ctx,
              fe_tok_desc(p, t, found, sizeof found));
}

static ast_t *ast_new(parser_t *p, ast_kind_t k, const tok_t *t) {
  ast_t *a = TN_NEW(p->ast, ast_t);
  a->kind = k;
  a->line = t->line;
  a->col = t->col;
  a->off = t->off;
  a->end = t->off + t->len;
  a->depth = 1;
  return a;
}

/* Sets a node's children and height; deep trees are an error (every later
 * pass over the IR recurses). */
static ast_t *ast_children(parser_t *p, ast_t *a, ast_t **args, int n) {
  a->args = n ? tn_arena_memdup(p->ast, args, sizeof(ast_t *) * (size_t)n) : NULL;
  a->nargs = n;
  for (int i = 0; i < n; i++) a->depth = TN_MAX(a->depth, args[i]->depth + 1);
  if (a->depth > IR_MAX_EXPR_DEPTH) {
    fe_perr(p, a->line, a->col, "expression is too deep (more than %d levels of operators); split it into temps",
         IR_MAX_EXPR_DEPTH);
    return NULL;
  }
  return a;
}

/* Guards the parser's own recursion. */
static bool enter(parser_t *p) {
  if (++p->depth <= IR_MAX_EXPR_DEPTH) return true;
  tok_t *t = fe_peek(p);
  fe_perr(p, t->line, t->col, "expression is nested too deeply (more than %d levels)", IR_MAX_EXPR_DEPTH);
  return false;
}

/* Parses "e1, e2, ...)" after the opening token; `close` ends the list. */
static int parse_list(parser_t *p, tok_kind_t close, const char *what, ast_t **args, int *n) {
  *n = 0;
  if (accept(p, close)) return TN_OK;
  for (;;) {
    if (*n == MAX_ARGS) {
      tok_t *t = fe_peek(p);
      return fe_perr(p, t->line, t->col, "too many %s (more than %d)", what, MAX_ARGS);
    }
    ast_t *e = fe_parse_expr(p);
    if (!e) return TN_EINVAL;
    args[(*n)++] = e;
    if (accept(p, T_COMMA)) continue;
    return fe_expect(p, close, "or ',' in the %s", what);
  }
}

/* `sum(k < K, r < R: body)` after "sum(". */
static ast_t *parse_reduce(parser_t *p, ast_t *a) {
  a->kind = A_REDUCE;
  rvar_t *rv = NULL;
  int n = 0, cap = 0;
  char found[80];
  for (;;) {
    tok_t *t = fe_next(p);
    if (t->kind != T_IDENT) {
      fe_perr(p, t->line, t->col, "expected a reduction variable in %s(...), found %s (e.g. %s(k < K: EXPR))",
           a->name, fe_tok_desc(p, t, found, sizeof found), a->name);
      return NULL;
    }
    if (n == IR_MAX_LOOP_DEPTH - IR_MAX_DIMS) {
      fe_perr(p, t->line, t->col, "too many reduction variables (at most %d)", IR_MAX_LOOP_DEPTH - IR_MAX_DIMS);
      return NULL;
    }
    if (n == cap) { /* the AST arena owns the list; the old copy stays until the line ends */
      cap = cap ? 2 * cap : 8;
      rvar_t *grown = TN_NEWN(p->ast, rvar_t, cap);
      if (n) memcpy(grown, rv, sizeof rv[0] * (size_t)n);
      rv = grown;
    }
    rv[n] = (rvar_t){.name = fe_tok_dup(p, p->ast, t), .line = t->line, .col = t->col};
    if (fe_expect(p, T_LT, "after reduction variable '%s' (e.g. %s < K)", rv[n].name, rv[n].name)) return NULL;
    if (!(rv[n].extent = fe_parse_expr(p))) return NULL;
    n++;
    if (accept(p, T_COMMA)) continue;
    if (fe_expect(p, T_COLON, "or ',' after the reduction variables of %s(...)", a->name)) return NULL;
    break;
  }
  ast_t *body = fe_parse_expr(p);
  if (!body || fe_expect(p, T_RPAREN, "to close %s(...)", a->name)) return NULL;
  a->rvars = rv;
  a->nrvars = n;
  a->end = prev_end(p);
  return ast_children(p, a, &body, 1);
}

/* NAME, NAME[indices], NAME(args) or a reduction, after the name token. */
ast_t *fe_parse_name(parser_t *p, const tok_t *t) {
  ast_t *a = ast_new(p, A_NAME, t);
  a->name = fe_tok_dup(p, p->ast, t);
  ast_t *args[MAX_ARGS];
  int n = 0;
  if (accept(p, T_LBRACK)) {
    a->kind = A_INDEX;
    if (parse_list(p, T_RBRACK, "indices", args, &n)) return NULL;
  } else if (fe_peek(p)->kind == T_LPAREN) {
    if (fe_next(p)->colon) {
      if (strcmp(a->name, "sum") && strcmp(a->name, "max") && strcmp(a->name, "min")) {
        fe_perr(p, t->line, t->col,
             "'%s(...)' contains ':', but only the reductions sum, max and min "
             "declare variables (e.g. sum(k < K: EXPR))",
             a->name);
        return NULL;
      }
      return parse_reduce(p, a);
    }
    a->kind = A_CALL;
    if (parse_list(p, T_RPAREN, "arguments", args, &n)) return NULL;
  }
  a->end = prev_end(p);
  return ast_children(p, a, args, n);
}

static ast_t *parse_primary(parser_t *p) {
  tok_t *t = fe_next(p);
  char found[80];
  ast_t *a;
  switch (t->kind) {
  case T_INT:
    a = ast_new(p, A_INT, t);
    a->ival = t->ival;
    return a;
  case T_FLOAT:
    a = ast_new(p, A_FLOAT, t);
    a->fval = t->fval;
    return a;
  case T_IDENT: return fe_parse_name(p, t);
  case T_LPAREN:
    a = fe_parse_expr(p);
    if (!a || fe_expect(p, T_RPAREN, "to close the '(' at %d:%d", t->line, t->col)) return NULL;
    return a;
  default:
    fe_perr(p, t->line, t->col, "expected an expression, found %s", fe_tok_desc(p, t, found, sizeof found));
    return NULL;
  }
}

static ast_t *parse_unary(parser_t *p) {
  tok_t *t = fe_peek(p);
  if (t->kind != T_MINUS && t->kind != T_NOT) return parse_primary(p);
  fe_next(p);
  if (!enter(p)) return NULL;
  ast_t *x = parse_unary(p);
  p->depth--;
  if (!x) return NULL;
  ast_t *a = ast_new(p, A_UNARY, t);
  a->op = t->kind;
  a->end = x->end;
  return ast_children(p, a, &x, 1);
}

/* Binary precedence levels, loosest first. */
static const tok_kind_t levels[][7] = {
    {T_OR},
    {T_AND},
    {T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE},
    {T_PLUS, T_MINUS},
    {T_STAR, T_SLASH, T_DSLASH, T_PERCENT},
};

static bool at_level(tok_kind_t k, int level) {
  for (int i = 0; i < 7 && levels[level][i] != T_EOF; i++)
    if (levels[level][i] == k) return true;
  return false;
}

static ast_t *parse_binary(parser_t *p, int level) {
  if (level == (int)TN_ARRAY_LEN(levels)) return parse_unary(p);
  ast_t *x = parse_binary(p, level + 1);
  while (x && at_level(fe_peek(p)->kind, level)) {
    tok_t *op = fe_next(p);
    ast_t *y = parse_binary(p, level + 1);
    if (!y) return NULL;
    ast_t *a = ast_new(p, A_BINARY, op);
    a->op = op->kind;
    a->line = x->line, a->col = x->col, a->off = x->off, a->end = y->end;
    a->op_line = op->line, a->op_col = op->col;
    ast_t *xy[2] = {x, y};
    x = ast_children(p, a, xy, 2);
  }
  return x;
}

ast_t *fe_parse_expr(parser_t *p) {
  if (!enter(p)) return NULL;
  ast_t *a = parse_binary(p, 0);
  p->depth--;
  return a;
}

/* ======================================================================
 * Constant integer expressions (shapes, extents)
 * ====================================================================== */

static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t floormod64(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static int const_binary(parser_t *p, const ast_t *a, const char *what, int64_t x, int64_t y, int64_t *out) {
  char s[96];
  bool ovf = false;
  switch (a->op) {
  case T_PLUS: ovf = __builtin_add_overflow(x, y, out); break;
  case T_MINUS: ovf = __builtin_sub_overflow(x, y, out); break;
  case T_STAR: ovf = __builtin_mul_overflow(x, y, out); break;
  case T_SLASH:
  case T_DSLASH:
  case T_PERCENT:
    if (y == 0) return fe_perr(p, a->op_line, a->op_col, "division by zero in %s ('%s')", what, SNIP(p, a, s));
    ovf = x == INT64_MIN && y == -1;
    if (!ovf) *out = a->op == T_PERCENT ? floormod64(x, y) : floordiv64(x, y);
    break;
  default:
    return fe_perr(p, a->op_line, a->op_col,
                "%s may only use integer literals, parameters, parentheses and "
                "+ - * / // %% (found '%s')",
                what, SNIP(p, a, s));
  }
  if (ovf) return fe_perr(p, a->op_line, a->op_col, "integer overflow in %s ('%s')", what, SNIP(p, a, s));
  return TN_OK;
}

/* Evaluates an integer expression over parameters and literals. */
static int const_eval(parser_t *p, const ast_t *a, const char *what, int64_t *out) {
  char s[96];
  int64_t x, y;
  int rc;
  switch (a->kind) {
  case A_INT: *out = a->ival; return TN_OK;
  case A_NAME: {
    const ir_param_t *pm = fe_find_param(p, a->name);
    if (pm) return *out = pm->value, TN_OK;
    if (fe_find_tensor(p, a->name))
      return fe_perr(p, a->line, a->col, "'%s' is a tensor, but %s may only use parameters and integer literals",
                  a->name, what);
    tn_buf_t b;
    tn_buf_init(&b);
    fe_list_params(p, &b, "none yet");
    fe_perr(p, a->line, a->col, "unknown parameter '%s' in %s (declared: %s)", a->name, what, tn_buf_str(&b));
    tn_buf_free(&b);
    return TN_EINVAL;
  }
  case A_UNARY:
    if (a->op != T_MINUS) break;
    if ((rc = const_eval(p, a->args[0], what, &x))) return rc;
    if (x == INT64_MIN) return fe_perr(p, a->line, a->col, "integer overflow in %s ('%s')", what, SNIP(p, a, s));
    return *out = -x, TN_OK;
  case A_BINARY:
    if ((rc = const_eval(p, a->args[0], what, &x)) || (rc = const_eval(p, a->args[1], what, &y))) return rc;
    return const_binary(p, a, what, x, y, out);
  default: break;
  }
  return fe_perr(p, a->line, a->col,
              "%s may only use integer literals, parameters, parentheses and "
              "+ - * / // %% (found '%s')",
              what, SNIP(p, a, s));
}

/* An extent (shape dimension or reduction domain): 1 .. INT32_MAX. */
int fe_eval_extent(parser_t *p, const ast_t *a, const char *what, int64_t *out) {
  char s[96];
  int rc = const_eval(p, a, what, out);
  if (rc) return rc;
  if (*out < 1)
    return fe_perr(p, a->line, a->col, "%s is %lld ('%s'); expected a value >= 1", what, (long long)*out,
                SNIP(p, a, s));
  if (*out > INT32_MAX)
    return fe_perr(p, a->line, a->col, "%s is %lld ('%s'); expected at most %d (indices are int32)", what,
                (long long)*out, SNIP(p, a, s), INT32_MAX);
  return TN_OK;
}

/* ======================================================================
 * Declarations
 * ====================================================================== */

int fe_expect_eol(parser_t *p, const char *what) {
  tok_t *t = fe_peek(p);
  char found[80];
  if (t->kind == T_EOF || accept(p, T_NL)) return TN_OK;
  return fe_perr(p, t->line, t->col, "expected end of line after the %s, found %s", what,
              fe_tok_desc(p, t, found, sizeof found));
}

static const ir_param_set_t *find_override(parser_t *p, const char *name) {
  for (int i = 0; i < p->novr; i++)
    if (strcmp(p->ovr[i].name, name) == 0) {
      p->ovr_used[i] = true;
      return &p->ovr[i];
    }
  return NULL;
}

/* An integer with an optional leading '-'. */
static int parse_signed_int(parser_t *p, const char *what, int64_t *out) {
  bool neg = accept(p, T_MINUS);
  tok_t *t = fe_next(p);
  char found[80];
  if (t->kind != T_INT)
    return fe_perr(p, t->line, t->col, "expected an integer %s, found %s", what,
                fe_tok_desc(p, t, found, sizeof found));
  *out = neg ? -t->ival : t->ival;
  return TN_OK;
}

/* param NAME = INT [, NAME = INT ...] */
int fe_parse_params(parser_t *p) {
  fe_next(p);
  char found[80];
  do {
    tok_t *t = fe_next(p);
    if (t->kind != T_IDENT)
      return fe_perr(p, t->line, t->col, "expected a parameter name, found %s (e.g. param N = 1024)",
                  fe_tok_desc(p, t, found, sizeof found));
    char *name = fe_tok_dup(p, p->w->arena, t);
    int64_t v = 0;
    int rc = fe_check_new_name(p, name, t, "parameter");
    if (!rc && p->nparams == MAX_PARAMS)
      rc = fe_perr(p, t->line, t->col, "too many parameters (the limit is %d)", MAX_PARAMS);
    if (rc || (rc = fe_expect(p, T_ASSIGN, "after parameter '%s' (e.g. %s = 1024)", name, name)) ||
        (rc = parse_signed_int(p, "value for the parameter", &v)))
      return rc;
    if (p->nparams % 16 == 0)
      p->params = tn_xrealloc(p->params, sizeof(ir_param_t) * (size_t)(p->nparams + 16));
    const ir_param_set_t *o = find_override(p, name);
    p->params[p->nparams++] =
        (ir_param_t){.name = name, .def = v, .value = o ? o->value : v, .line = t->line, .col = t->col};
  } while (accept(p, T_COMMA));
  return fe_expect_eol(p, "parameters");
}

/* A number with an optional leading '-' (value ranges). */
static int parse_signed_number(parser_t *p, double *out) {
  bool neg = accept(p, T_MINUS);
  tok_t *t = fe_next(p);
  char found[80];
  if (t->kind != T_INT && t->kind != T_FLOAT)
    return fe_perr(p, t->line, t->col, "expected a number in the value range, found %s",
                fe_tok_desc(p, t, found, sizeof found));
  *out = (t->kind == T_INT ? (double)t->ival : t->fval) * (neg ? -1 : 1);
  return TN_OK;
}

/* `in [lo, hi)` after an input's shape. */
static int parse_value_range(parser_t *p, const tok_t *in, ir_buf_role_t role, double *lo, double *hi) {
  if (role != IR_BUF_INPUT)
    return fe_perr(p, in->line, in->col,
                "only inputs take a value range ('in [lo, hi)'); outputs and temps "
                "are computed");
  int rc;
  if ((rc = fe_expect(p, T_LBRACK, "after 'in' (e.g. in [0, 1))")) || (rc = parse_signed_number(p, lo)) ||
      (rc = fe_expect(p, T_COMMA, "between the bounds of the value range")) ||
      (rc = parse_signed_number(p, hi)) ||
      (rc = fe_expect(p, T_RPAREN, "to close the value range (it is half-open: [lo, hi))")))
    return rc;
  if (!(*lo < *hi))
    return fe_perr(p, in->line, in->col, "empty value range [%g, %g); expected lo < hi", *lo, *hi);
  return TN_OK;
}

/* The shape list after '[': dimensions evaluated over the parameters. */
static int parse_shape(parser_t *p, const char *name, int64_t *shape, int *ndim) {
  ast_t *dims[MAX_ARGS];
  int n, rc = parse_list(p, T_RBRACK, "dimensions", dims, &n);
  if (rc) return rc;
  if (n > IR_MAX_DIMS)
    return fe_perr(p, dims[IR_MAX_DIMS]->line, dims[IR_MAX_DIMS]->col,
                "tensor '%s' has %d dimensions; at most %d are supported", name, n, IR_MAX_DIMS);
  int64_t numel = 1;
  for (int d = 0; d < n; d++) {
    char what[128];
    snprintf(what, sizeof what, "dimension %d of '%s'", d, name);
    if ((rc = fe_eval_extent(p, dims[d], what, &shape[d]))) return rc;
    if (__builtin_mul_overflow(numel, shape[d], &numel) || numel > IR_MAX_ELEMENTS)
      return fe_perr(p, dims[d]->line, dims[d]->col,
                  "tensor '%s' has more than %lld elements (the limit per tensor)", name,
                  (long long)IR_MAX_ELEMENTS);
  }
  *ndim = n;
  return TN_OK;
}

/* input|output|temp NAME: DTYPE[SHAPE] [in [lo, hi)] [const] (the last two in either order) */
int fe_parse_tensor(parser_t *p, ir_buf_role_t role) {
  tok_t *kw = fe_next(p), *t = fe_next(p);
  char found[80], kws[16];
  snprintf(kws, sizeof kws, "%.*s", (int)kw->len, p->src + kw->off);
  if (t->kind != T_IDENT)
    return fe_perr(p, t->line, t->col, "expected a tensor name after '%s', found %s (e.g. %s A: float32[M, K])",
                kws, fe_tok_desc(p, t, found, sizeof found), kws);
  char *name = fe_tok_dup(p, p->ast, t);
  int rc = fe_check_new_name(p, name, t, "tensor");
  if (rc) return rc;
  if (p->ntensors == IR_MAX_TENSORS)
    return fe_perr(p, t->line, t->col, "too many tensors (the limit is %d)", IR_MAX_TENSORS);
  if ((rc = fe_expect(p, T_COLON, "after tensor name '%s' (e.g. %s: float32[M, K])", name, name))) return rc;
  tok_t *dt = fe_next(p);
  ir_dtype_t dtype;
  char *dname = fe_tok_dup(p, p->ast, dt);
  if (dt->kind != T_IDENT)
    return fe_perr(p, dt->line, dt->col,
                "expected a dtype (float16, bfloat16, float32, float64, int32 or int64) after "
                "'%s:', found %s",
                name, fe_tok_desc(p, dt, found, sizeof found));
  if (!fe_lang_dtype(dname, &dtype))
    return fe_perr(p, dt->line, dt->col,
                "unknown dtype '%s' (expected float16, bfloat16, float32, float64, int32 or int64)", dname);
  int64_t shape[IR_MAX_DIMS];
  int ndim = 0;
  if ((rc = fe_expect(p, T_LBRACK, "after the dtype (the shape, e.g. %s[M, K]; [] for a scalar)", dname)) ||
      (rc = parse_shape(p, name, shape, &ndim)))
    return rc;
  double lo = ir_dtype_is_float(dtype) ? -1.0 : -8.0, hi = -lo;
  bool ranged = false, is_const = false;
  for (tok_t *in = fe_peek(p); fe_tok_is(p, in, "in") || fe_tok_is(p, in, "const"); in = fe_peek(p)) {
    fe_next(p);
    if (fe_tok_is(p, in, "const")) {
      if (role != IR_BUF_INPUT)
        return fe_perr(p, in->line, in->col, "only inputs can be 'const' (values that do not change between calls); "
                    "'%s' is computed", name);
      if (is_const) return fe_perr(p, in->line, in->col, "'const' given twice for '%s'", name);
      is_const = true;
    } else {
      if (ranged) return fe_perr(p, in->line, in->col, "a second value range for '%s'", name);
      if ((rc = parse_value_range(p, in, role, &lo, &hi))) return rc;
      ranged = true;
    }
  }
  if ((rc = fe_expect_eol(p, "tensor declaration"))) return rc;
  ir_buffer_t *b = ir_buffer_new(p->f, name, dtype, ndim, shape, IR_SCOPE_GLOBAL, role);
  b->init_lo = lo, b->init_hi = hi;
  b->is_const = is_const;
  if (p->ntensors == p->captensors) {
    p->captensors = p->captensors ? 2 * p->captensors : 16;
    p->tensors = tn_xrealloc(p->tensors, sizeof *p->tensors * (size_t)p->captensors);
  }
  p->tensors[p->ntensors++] =
      (tensor_t){.name = b->name, .line = t->line, .col = t->col, .buf = b, .stmt = -1};
  return TN_OK;
}
