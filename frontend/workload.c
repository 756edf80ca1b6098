/* workload.c — the workload language's statements, each lowered to a loop
 * nest of tensor IR; the whole workload's checks (every tensor computed,
 * statement order by dependencies) and assembly; the public API
 * (ir_workload_parse, ir_workload_load, the stored form, --set). */
#include <cJSON.h>

#include "frontend/front.h"

/* ======================================================================
 * Statements
 * ====================================================================== */

/* Declares an index or reduction variable: loop var NAME, iterator v_NAME. */
static int declare_var(lower_t *L, const char *name, int line, int col, int64_t extent, bool reduce) {
  parser_t *p = L->p;
  const char *what = reduce ? "reduction variable" : "index variable";
  int rc = fe_check_name(p, name, line, col, what);
  if (rc) return rc;
  const svar_t *prev = fe_find_var(L, name);
  if (prev)
    return fe_perr(p, line, col, "%s '%s' is already used as %s", what, name,
                prev->reduce ? "a reduction variable" : "an index variable");
  const ir_param_t *pm = fe_find_param(p, name);
  const tensor_t *T = fe_find_tensor(p, name);
  if (pm || T)
    return fe_perr(p, line, col, "%s '%s' has the same name as the %s declared at %d:%d; choose another name",
                what, name, pm ? "parameter" : "tensor", pm ? pm->line : T->line, pm ? pm->col : T->col);
  if (L->nvars == L->capvars) {
    L->capvars = L->capvars ? 2 * L->capvars : 16;
    L->vars = tn_xrealloc(L->vars, sizeof L->vars[0] * (size_t)L->capvars);
  }
  svar_t *v = &L->vars[L->nvars++];
  v->name = name;
  v->extent = extent;
  v->reduce = reduce;
  v->loop = ir_var_new(L->f, name, IR_INT32);
  v->iter = ir_var_new(L->f, tn_arena_printf(p->ast, "v_%s", name), IR_INT32);
  ir_bounds_set(&L->bounds, v->iter, 0, extent - 1);
  return TN_OK;
}

/* Resolves and checks the left side `T[i, j]`. */
static int lhs_target(parser_t *p, const ast_t *lhs, tensor_t **out) {
  char s[96];
  tensor_t *T = fe_find_tensor(p, lhs->name);
  if (!T) {
    if (fe_find_param(p, lhs->name))
      return fe_perr(p, lhs->line, lhs->col, "'%s' is a parameter; only tensors can be assigned", lhs->name);
    return fe_unknown_tensor(p, lhs->line, lhs->col, lhs->name);
  }
  const ir_buffer_t *b = T->buf;
  if (b->role == IR_BUF_INPUT)
    return fe_perr(p, lhs->line, lhs->col,
                "cannot assign to input '%s'; inputs are read-only (declare it as "
                "output or temp to compute it)",
                lhs->name);
  if (T->stmt >= 0)
    return fe_perr(p, lhs->line, lhs->col,
                "tensor '%s' is assigned twice (first at %d:%d); every output and "
                "temp is computed by exactly one statement",
                lhs->name, p->stmts[T->stmt].line, p->stmts[T->stmt].col);
  if (lhs->nargs != b->ndim)
    return fe_perr(p, lhs->line, lhs->col, "tensor '%s' has %d %s but %d %s given", b->name, b->ndim,
                fe_plural(b->ndim, "dimension", "dimensions"), lhs->nargs,
                fe_plural(lhs->nargs, "index was", "indices were"));
  for (int d = 0; d < lhs->nargs; d++)
    if (lhs->args[d]->kind != A_NAME)
      return fe_perr(p, lhs->args[d]->line, lhs->args[d]->col,
                  "the left side indexes '%s' with variable names "
                  "only (e.g. %s[i, j]), found '%s'",
                  b->name, b->name, SNIP(p, lhs->args[d], s));
  *out = T;
  return TN_OK;
}

static ir_expr_t *identity(ir_func_t *f, const char *red, ir_dtype_t t) {
  bool lowest = strcmp(red, "max") == 0;
  if (strcmp(red, "sum") == 0) return ir_dtype_is_float(t) ? ir_float(f, t, 0.0) : ir_const_int(f, t, 0);
  if (t == IR_INT32) return ir_const_int(f, t, lowest ? INT32_MIN : INT32_MAX);
  if (t == IR_INT64) return ir_const_int(f, t, lowest ? INT64_MIN : INT64_MAX);
  return ir_float(f, t, lowest ? ir_dtype_min_value(t) : ir_dtype_max_value(t));
}

/* Loops (index variables, then reduction variables) around block T. */
static ir_stmt_t *build_nest(lower_t *L, const ir_buffer_t *cb, const char *red, ir_expr_t *value) {
  ir_func_t *f = L->f;
  ir_buffer_t *buf = (ir_buffer_t *)cb;
  ir_stmt_t **loops = TN_NEWN(L->p->ast, ir_stmt_t *, L->nvars);
  for (int i = 0; i < L->nvars; i++) loops[i] = ir_loop_new(f, L->vars[i].loop, L->vars[i].extent, NULL);
  ir_stmt_t *bs = ir_block_new(f, buf->name);
  ir_block_t *b = &bs->u.block;
  b->niters = L->nvars;
  b->iters = TN_NEWN(f->arena, ir_iter_t, L->nvars);
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int i = 0; i < L->nvars; i++) {
    const svar_t *v = &L->vars[i];
    b->iters[i] = (ir_iter_t){.var = v->iter,
                              .extent = v->extent,
                              .kind = v->reduce ? IR_ITER_REDUCE : IR_ITER_SPATIAL,
                              .binding = ir_varref(f, v->loop)};
    if (i < buf->ndim) idx[i] = ir_varref(f, v->iter);
  }
  /* Fold parameter arithmetic (`H + P` -> 57) so the IR states constants;
   * no variable bounds, so unit-extent iterators stay symbolic. */
  value = ir_simplify(f, value, NULL);
  if (red) {
    b->init = ir_store(f, buf, idx, buf->ndim, identity(f, red, buf->dtype));
    ir_expr_kind_t k = red[1] == 'u' ? IR_E_ADD : red[1] == 'a' ? IR_E_MAX : IR_E_MIN;
    value = ir_bin(f, k, ir_load(f, buf, idx, buf->ndim), value);
  }
  b->body = ir_store(f, buf, idx, buf->ndim, value);
  ir_block_infer_regions(f, b);
  ir_stmt_t *inner = bs;
  for (int i = L->nvars - 1; i >= 0; i--) {
    loops[i]->u.loop.body = inner;
    inner = loops[i];
  }
  return inner;
}

/* Checks and lowers `T[i, ...] = rhs` to its loop nest. */
static int lower_statement(lower_t *L, const ast_t *lhs, const ast_t *rhs, tensor_t *T, ir_stmt_t **nest) {
  parser_t *p = L->p;
  const ir_buffer_t *b = T->buf;
  int rc;
  for (int d = 0; d < b->ndim; d++) {
    const ast_t *ia = lhs->args[d];
    if ((rc = declare_var(L, ia->name, ia->line, ia->col, b->shape[d], false))) return rc;
  }
  const char *red = NULL;
  const ast_t *val = rhs;
  if (rhs->kind == A_REDUCE) {
    for (int r = 0; r < rhs->nrvars; r++) {
      const rvar_t *rv = &rhs->rvars[r];
      char what[128];
      int64_t ext;
      snprintf(what, sizeof what, "the extent of reduction variable '%s'", rv->name);
      if ((rc = fe_eval_extent(p, rv->extent, what, &ext)) ||
          (rc = declare_var(L, rv->name, rv->line, rv->col, ext, true)))
        return rc;
    }
    red = rhs->name;
    val = rhs->args[0];
  }
  ir_expr_t *e = fe_lower(L, val, b->dtype);
  if (!e || (rc = fe_need_num(L, e, val, "the value of a statement"))) return TN_EINVAL;
  *nest = build_nest(L, b, red, fe_convert(L, e, b->dtype));
  return TN_OK;
}

/* Adds the statement `lhs = rhs` computing T and lowers it. */
static int add_statement(parser_t *p, const ast_t *lhs, const ast_t *rhs, tensor_t *T) {
  if (p->nstmts == p->capstmts) {
    p->capstmts = p->capstmts ? 2 * p->capstmts : 16;
    p->stmts = tn_xrealloc(p->stmts, sizeof *p->stmts * (size_t)p->capstmts);
  }
  stmt_t *st = &p->stmts[p->nstmts];
  *st = (stmt_t){.tensor = (int)(T - p->tensors), .line = lhs->line, .col = lhs->col};
  lower_t L = {
      .p = p, .f = p->f, .st = st, .fdefault = ir_dtype_is_float(T->buf->dtype) ? T->buf->dtype : IR_FLOAT32};
  ir_bounds_init(&L.bounds);
  int rc = lower_statement(&L, lhs, rhs, T, &st->nest);
  ir_bounds_free(&L.bounds);
  free(L.vars);
  for (int i = 0; i < MAX_NARROW; i++) ir_affine_free(&L.facts[i].lin);
  if (rc) return rc;
  T->stmt = p->nstmts++;
  return TN_OK;
}

/* ---- reductions inside expressions ------------------------------------------ */

/* Reductions written inside an expression (`S[i, j] = exp(A[i, j] -
 * max(k < N: A[i, k]))`) are computed first into temporaries of their own:
 * T_max0[i] = max(k < N: A[i, k]), indexed by the left side's variables the
 * reduction uses, and read back where they stood.  Identical reductions
 * (the same text) share one temporary; inner ones are hoisted first. */
typedef struct hoist {
  const ast_t *lhs;
  const ir_buffer_t *lbuf; /* the left side's (tensors may move as temps are added; buffers do not) */
  const ast_t *outer; /* the statement's own reduction (its variables are not the left side's), or NULL */
  struct {
    const ast_t *red;
    const char *temp;
  } seen[16];
  int nseen;
} hoist_t;

/* Whether a names variable `name` (in an index, an argument, a body). */
static bool names_var(const ast_t *a, const char *name) {
  if (a->kind == A_NAME && !strcmp(a->name, name)) return true;
  for (int i = 0; i < a->nargs; i++)
    if (names_var(a->args[i], name)) return true;
  return false;
}

static bool same_text(const parser_t *p, const ast_t *a, const ast_t *b) {
  return a->end - a->off == b->end - b->off && !memcmp(p->src + a->off, p->src + b->off, a->end - a->off);
}

/* `name[v, ...]` (a bare name when nv is 0) at r's place in the source. */
static ast_t *access_ast(parser_t *p, const ast_t *r, const char *name, const ast_t *const *vars, int nv) {
  ast_t *a = TN_NEW(p->ast, ast_t);
  *a = (ast_t){.kind = nv ? A_INDEX : A_NAME, .line = r->line, .col = r->col, .off = r->off, .end = r->end,
               .depth = 2, .name = name};
  a->args = nv ? tn_arena_memdup(p->ast, vars, sizeof vars[0] * (size_t)nv) : NULL;
  a->nargs = nv;
  return a;
}

/* Hoists reduction r (whose inner reductions are hoisted already): its
 * temp (a new one, or the one of an identical reduction) and the access
 * `temp[i, ...]` that replaces it; NULL after an error. */
static ast_t *hoist_one(parser_t *p, hoist_t *h, const ast_t *r) {
  const ir_buffer_t *lb = h->lbuf;
  const ast_t *vars[IR_MAX_DIMS];
  int nv = 0;
  int64_t shape[IR_MAX_DIMS];
  for (int d = 0; d < h->lhs->nargs; d++)
    if (names_var(r, h->lhs->args[d]->name)) shape[nv] = lb->shape[d], vars[nv++] = h->lhs->args[d];
  for (int k = 0; h->outer && k < h->outer->nrvars; k++)
    if (names_var(r, h->outer->rvars[k].name))
      return fe_perr(p, r->line, r->col,
                  "this %s(...) inside %s(...) uses the outer reduction's variable '%s'; a reduction inside an "
                  "expression may use only the left side's index variables (compute it into a temp first)",
                  r->name, h->outer->name, h->outer->rvars[k].name),
             NULL;
  const char *temp = NULL;
  for (int i = 0; i < h->nseen && !temp; i++)
    if (same_text(p, h->seen[i].red, r)) temp = h->seen[i].temp;
  if (!temp) {
    if (h->nseen == (int)TN_ARRAY_LEN(h->seen) || p->ntensors == IR_MAX_TENSORS)
      return fe_perr(p, r->line, r->col, "too many reductions inside this statement's expressions"), NULL;
    char name[96];
    for (int n = 0;; n++) {
      snprintf(name, sizeof name, "%s_%s%d", lb->name, r->name, n);
      if (!fe_find_tensor(p, name) && !fe_find_param(p, name)) break;
    }
    ir_dtype_t dt = lb->dtype == IR_FLOAT64 || ir_dtype_is_int(lb->dtype) ? lb->dtype : IR_FLOAT32;
    ir_buffer_t *b = ir_buffer_new(p->f, name, dt, nv, shape, IR_SCOPE_GLOBAL, IR_BUF_TEMP);
    if (p->ntensors == p->captensors) {
      p->captensors = p->captensors ? 2 * p->captensors : 16;
      p->tensors = tn_xrealloc(p->tensors, sizeof *p->tensors * (size_t)p->captensors);
    }
    tensor_t *T = &p->tensors[p->ntensors++];
    *T = (tensor_t){.name = b->name, .line = r->line, .col = r->col, .buf = b, .stmt = -1, .hoisted = true};
    /* its statement: temp[i, ...] = r */
    ast_t *lhs = access_ast(p, r, b->name, vars, nv);
    lhs->kind = A_INDEX; /* a left side is always indexed, [] for a scalar */
    if (add_statement(p, lhs, r, T)) return NULL;
    h->seen[h->nseen].red = r;
    h->seen[h->nseen++].temp = b->name;
    temp = b->name;
  }
  return access_ast(p, r, fe_find_tensor(p, temp)->name, vars, nv);
}

/* Hoists every reduction below a (innermost first) and replaces it by its
 * access; the node a itself stays. */
static int hoist_below(parser_t *p, hoist_t *h, ast_t *a) {
  for (int i = 0; i < a->nargs; i++) {
    ast_t *c = a->args[i];
    int rc = hoist_below(p, h, c);
    if (rc) return rc;
    if (c->kind == A_REDUCE && !(a->args[i] = hoist_one(p, h, c))) return TN_EINVAL;
  }
  return TN_OK;
}

static int parse_statement(parser_t *p) {
  tok_t *t = fe_next(p);
  char s[96];
  ast_t *lhs = fe_parse_name(p, t), *rhs;
  if (!lhs) return TN_EINVAL;
  if (lhs->kind != A_NAME && lhs->kind != A_INDEX)
    return fe_perr(p, t->line, t->col,
                "expected a statement 'T[i, ...] = EXPR' with a tensor on the left, "
                "found '%s'",
                SNIP(p, lhs, s));
  int rc = fe_expect(p, T_ASSIGN, "after '%s' (a statement is 'T[i, ...] = EXPR')", SNIP(p, lhs, s));
  if (rc || !(rhs = fe_parse_expr(p)) || (rc = fe_expect_eol(p, "statement"))) return rc ? rc : TN_EINVAL;
  tensor_t *T = NULL;
  if ((rc = lhs_target(p, lhs, &T))) return rc;
  int ti = (int)(T - p->tensors); /* hoisting may grow p->tensors */
  hoist_t h = {.lhs = lhs, .lbuf = T->buf, .outer = rhs->kind == A_REDUCE ? rhs : NULL};
  if ((rc = hoist_below(p, &h, rhs))) return rc;
  return add_statement(p, lhs, rhs, &p->tensors[ti]);
}

/* One declaration or statement. */
static int parse_line(parser_t *p) {
  tok_t *t = fe_peek(p);
  char found[80];
  if (t->kind != T_IDENT)
    return fe_perr(p, t->line, t->col,
                "expected a declaration (param, input, output, temp) or a statement such "
                "as 'C[i] = A[i]', found %s",
                fe_tok_desc(p, t, found, sizeof found));
  if (fe_tok_is(p, t, "param")) return fe_parse_params(p);
  if (fe_tok_is(p, t, "input")) return fe_parse_tensor(p, IR_BUF_INPUT);
  if (fe_tok_is(p, t, "output")) return fe_parse_tensor(p, IR_BUF_OUTPUT);
  if (fe_tok_is(p, t, "temp")) return fe_parse_tensor(p, IR_BUF_TEMP);
  if (p->toks[p->pos + 1].kind == T_IDENT)
    return fe_perr(p, t->line, t->col,
                "unknown declaration %s (expected param, input, output or temp, or a "
                "statement such as 'C[i] = A[i]')",
                fe_tok_desc(p, t, found, sizeof found));
  return parse_statement(p);
}

static int parse_file(parser_t *p) {
  for (;;) {
    tok_t *t = fe_peek(p);
    if (t->kind == T_EOF) return TN_OK;
    if (t->kind == T_NL) {
      fe_next(p);
      continue;
    }
    tn_arena_free(p->ast);
    p->ast = tn_arena_new();
    int rc = parse_line(p);
    if (rc) return rc;
  }
}

/* ======================================================================
 * Whole-workload checks, statement order, assembly
 * ====================================================================== */

/* First not-yet-emitted statement whose inputs are all computed, or -1. */
static int first_ready(const parser_t *p, const bool *done) {
  for (int s = 0; s < p->nstmts; s++) {
    if (done[s]) continue;
    bool ready = true;
    for (int d = 0; d < p->stmts[s].ndeps && ready; d++) {
      int producer = p->tensors[p->stmts[s].deps[d].tensor].stmt;
      ready = producer < 0 || done[producer];
    }
    if (ready) return s;
  }
  return -1;
}

/* The first pending dependency of statement s (its index into deps). */
static int pending_dep(const parser_t *p, int s, const bool *done) {
  for (int d = 0; d < p->stmts[s].ndeps; d++) {
    int producer = p->tensors[p->stmts[s].deps[d].tensor].stmt;
    if (producer >= 0 && !done[producer]) return d;
  }
  return -1;
}

/* Every pending statement waits on another: walk the waits to a cycle. */
static int report_cycle(parser_t *p, const bool *done) {
  int *seen_at = TN_NEWN(p->tmp, int, p->nstmts), *path = TN_NEWN(p->tmp, int, p->nstmts + 1), len = 0, s = 0;
  for (int i = 0; i < p->nstmts; i++) seen_at[i] = -1;
  while (done[s]) s++;
  while (seen_at[s] < 0) {
    seen_at[s] = len;
    path[len++] = s;
    s = p->tensors[p->stmts[s].deps[pending_dep(p, s, done)].tensor].stmt;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = seen_at[s]; i < len; i++)
    tn_buf_printf(&b, "%s -> ", p->tensors[p->stmts[path[i]].tensor].name);
  tn_buf_put(&b, p->tensors[p->stmts[s].tensor].name);
  const dep_t *d = &p->stmts[s].deps[pending_dep(p, s, done)];
  fe_perr(p, d->line, d->col,
       "cyclic definition: %s (each tensor is computed from the next); a tensor cannot "
       "depend on itself, directly or through temps",
       tn_buf_str(&b));
  tn_buf_free(&b);
  return TN_EINVAL;
}

/* Dependency order, source order among statements that are ready together. */
static int order_statements(parser_t *p, ir_stmt_t **order) {
  bool *done = TN_NEWN(p->tmp, bool, p->nstmts);
  for (int k = 0; k < p->nstmts; k++) {
    int s = first_ready(p, done);
    if (s < 0) return report_cycle(p, done);
    done[s] = true;
    order[k] = p->stmts[s].nest;
  }
  return TN_OK;
}

static int check_complete(parser_t *p) {
  for (int i = 0; i < p->novr; i++)
    if (!p->ovr_used[i]) {
      tn_buf_t b;
      tn_buf_init(&b);
      fe_list_params(p, &b, "none");
      tn_err_set(p->err, TN_EINVAL,
                 "%s: --set %s=%lld: '%s' is not a parameter of this workload (declared: %s)", p->path,
                 p->ovr[i].name, (long long)p->ovr[i].value, p->ovr[i].name, tn_buf_str(&b));
      tn_buf_free(&b);
      return TN_EINVAL;
    }
  int noutputs = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const tensor_t *T = &p->tensors[i];
    noutputs += T->buf->role == IR_BUF_OUTPUT;
    if (T->buf->role != IR_BUF_INPUT && T->stmt < 0)
      return fe_perr(p, T->line, T->col, "%s '%s' is never assigned; expected a statement '%s[...] = ...'",
                  T->buf->role == IR_BUF_OUTPUT ? "output" : "temp", T->name, T->name);
  }
  if (!noutputs) {
    const tok_t *t = &p->toks[p->ntoks - 1];
    return fe_perr(p, t->line, t->col,
                "the workload has no output; expected a declaration such as "
                "'output C: float32[N]' and a statement computing it");
  }
  return TN_OK;
}

static int assemble(parser_t *p) {
  ir_func_t *f = p->f;
  ir_stmt_t **order = TN_NEWN(p->tmp, ir_stmt_t *, p->nstmts);
  int rc = order_statements(p, order);
  if (rc) return rc;
  ir_block_t *root = ir_func_root(f);
  root->body = p->nstmts == 1 ? order[0] : ir_seq(f, order, p->nstmts);
  f->params = TN_NEWN(f->arena, ir_buffer_t *, p->ntensors);
  root->allocs = TN_NEWN(f->arena, ir_buffer_t *, p->ntensors);
  for (int i = 0; i < p->ntensors; i++) {
    ir_buffer_t *b = p->tensors[i].buf;
    if (b->role == IR_BUF_TEMP)
      root->allocs[root->nallocs++] = b;
    else
      f->params[f->nparams++] = b;
  }
  ir_workload_t *w = p->w;
  w->nparams = p->nparams;
  w->params =
      p->nparams ? tn_arena_memdup(w->arena, p->params, sizeof(ir_param_t) * (size_t)p->nparams) : NULL;
  return TN_OK;
}

/* ======================================================================
 * Public API
 * ====================================================================== */

static int check_overrides(parser_t *p) {
  for (int i = 0; i < p->novr; i++) {
    if (!p->ovr[i].name)
      return tn_err_set(p->err, TN_EINVAL, "%s: --set override %d has no name", p->path, i + 1);
    for (int j = 0; j < i; j++)
      if (strcmp(p->ovr[i].name, p->ovr[j].name) == 0)
        return tn_err_set(p->err, TN_EINVAL,
                          "%s: --set %s is given twice; expected each parameter at most once", p->path,
                          p->ovr[i].name);
  }
  return TN_OK;
}

/* "dir/matmul.tw" -> "matmul". */
static const char *file_stem(tn_arena_t *a, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 3 && strcmp(base + n - 3, ".tw") == 0) n -= 3;
  return n ? tn_arena_strndup(a, base, n) : "workload";
}

static ir_workload_t *workload_new(const char *path, const char *text, size_t len) {
  tn_arena_t *a = tn_arena_new();
  ir_workload_t *w = TN_NEW(a, ir_workload_t);
  w->arena = a;
  w->path = tn_arena_strdup(a, path);
  w->name = file_stem(a, path);
  char *src = tn_arena_alloc(a, len + 1);
  if (len) memcpy(src, text, len);
  w->source = src;
  w->func = ir_func_new("main");
  return w;
}

int ir_workload_parse(const char *path, const char *text, size_t len, const ir_param_set_t *overrides,
                      int noverrides, ir_workload_t **out, tn_err_t *err) {
  if (out) *out = NULL;
  if (!path) path = "<workload>";
  if (!out || (!text && len) || noverrides < 0 || (noverrides && !overrides))
    return tn_err_set(err, TN_EINVAL, "%s: ir_workload_parse: invalid arguments", path);
  parser_t *p = tn_xcalloc(1, sizeof *p);
  p->path = path;
  p->src = text ? text : "";
  p->len = len;
  p->err = err;
  p->ovr = overrides;
  p->novr = noverrides;
  p->ovr_used = tn_xcalloc((size_t)noverrides + 1, sizeof(bool));
  p->ast = tn_arena_new();
  p->tmp = tn_arena_new();
  p->w = workload_new(path, p->src, len);
  p->f = p->w->func;
  int rc = check_overrides(p);
  if (!rc) rc = fe_check_bytes(p);
  if (!rc) rc = fe_lex(p);
  if (!rc) rc = parse_file(p);
  if (!rc) rc = check_complete(p);
  if (!rc) rc = assemble(p);
  if (rc)
    ir_workload_free(p->w);
  else
    *out = p->w;
  tn_arena_free(p->ast);
  tn_arena_free(p->tmp);
  free(p->toks);
  free(p->tensors);
  free(p->stmts);
  free(p->params);
  free(p->ovr_used);
  free(p);
  return rc;
}

int ir_workload_load(const char *path, const ir_param_set_t *overrides, int noverrides, ir_workload_t **out,
                     tn_err_t *err) {
  char *text;
  size_t len;
  if (out) *out = NULL;
  int rc = tn_read_file(path, IR_MAX_SOURCE_BYTES, &text, &len, err);
  if (rc) return rc;
  rc = ir_workload_parse(path, text, len, overrides, noverrides, out, err);
  free(text);
  return rc;
}

/* {"M": 64, ...} as overrides in the arena. */
static int overrides_from_json(const char *json, tn_arena_t *a, ir_param_set_t **out, int *n, tn_err_t *err) {
  *out = NULL;
  *n = 0;
  cJSON *j = cJSON_Parse(json && *json ? json : "{}");
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return tn_err_set(err, TN_EINVAL, "workload parameters are not a JSON object: %.80s", json);
  }
  int cap = cJSON_GetArraySize(j);
  *out = TN_NEWN(a, ir_param_set_t, cap ? cap : 1);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 9.0e15) {
      cJSON_Delete(j);
      return tn_err_set(err, TN_EINVAL, "workload parameter %s must be an integer", it->string);
    }
    (*out)[*n].name = tn_arena_strdup(a, it->string);
    (*out)[*n].value = (int64_t)it->valuedouble;
    (*n)++;
  }
  cJSON_Delete(j);
  return 0;
}

int ir_workload_parse_stored(const char *name, const char *text, const char *params_json, ir_workload_t **out,
                             tn_err_t *err) {
  *out = NULL;
  if (!text) return tn_err_set(err, TN_EINVAL, "workload %s has no source text", name ? name : "(unnamed)");
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t *ov;
  int nov;
  char path[96];
  snprintf(path, sizeof path, "%.80s.tw", name && name[0] ? name : "workload");
  int rc = overrides_from_json(params_json, a, &ov, &nov, err);
  if (!rc) rc = ir_workload_parse(path, text, strlen(text), ov, nov, out, err);
  tn_arena_free(a);
  return rc;
}

void ir_workload_free(ir_workload_t *w) {
  if (!w) return;
  ir_func_free(w->func);
  tn_arena_free(w->arena);
}

int ir_param_set_parse(const char *arg, tn_arena_t *a, ir_param_set_t *out, tn_err_t *err) {
  const char *eq = arg ? strchr(arg, '=') : NULL;
  if (!eq) return tn_err_set(err, TN_EINVAL, "--set '%s': expected NAME=VALUE (e.g. M=64)", arg ? arg : "");
  size_t n = (size_t)(eq - arg);
  bool ok = n > 0 && fe_is_alpha(arg[0]);
  for (size_t i = 1; i < n && ok; i++) ok = fe_is_alnum(arg[i]);
  if (!ok)
    return tn_err_set(err, TN_EINVAL,
                      "--set '%s': '%.*s' is not a parameter name (expected letters, digits "
                      "and '_', not starting with a digit)",
                      arg, (int)n, arg);
  const char *s = eq + 1;
  bool neg = *s == '-';
  s += neg || *s == '+';
  int64_t v = 0;
  ok = fe_is_digit(*s);
  for (; *s && ok; s++) {
    ok = fe_is_digit(*s) && v <= (MAX_LITERAL - (*s - '0')) / 10;
    if (ok) v = v * 10 + (*s - '0');
  }
  if (!ok)
    return tn_err_set(err, TN_EINVAL, "--set '%s': '%s' is not an integer of at most 62 bits (e.g. %.*s=64)",
                      arg, eq + 1, (int)n, arg);
  out->name = tn_arena_strndup(a, arg, n);
  out->value = neg ? -v : v;
  return TN_OK;
}
