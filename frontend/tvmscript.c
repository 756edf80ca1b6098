/* tvmscript.c — imports a TVMScript PrimFunc (the subset the workload
 * language covers) as workload text (*.tw): `tunectl import-tvmscript`.
 * tvmscript_syntax.c reads the text into a syntax tree; the interpreter
 * here checks it against the unscheduled form the workload language
 * lowers to and writes one statement per block. */
#include "frontend/tvmscript.h"

/* ======================================================================
 * Interpretation: the syntax tree against the workload language's subset
 * ====================================================================== */

typedef struct ibuf {
  const char *name;
  const char *handle; /* a T.handle parameter, until T.match_buffer binds it */
  ir_dtype_t dtype;
  int ndim;
  int64_t shape[IR_MAX_DIMS];
  bool temp, bound, written;
  int line, col;
} ibuf_t;

typedef struct ivar {
  const char *name; /* the block iterator's name */
  const char *loop; /* the loop variable it is bound to */
  const char *tw;   /* the workload's index or reduction variable */
  int64_t extent;
  bool reduce;
} ivar_t;

typedef struct loop {
  const char *name;
  int64_t extent;
  int line, col;
} loop_t;

typedef struct interp {
  imp_t *p;
  ibuf_t *bufs;
  int nbufs;
  tn_buf_t stmts; /* the workload's statements */
  ivar_t *vars;   /* the current block's iterators */
  int nvars;
  bool seen_root;
} interp_t;

/* e is T.<name> (TVM's script namespace, whatever the dialect). */
static bool is_t(const expr_t *e, const char *name) {
  return e && e->kind == E_ATTR && e->a->kind == E_NAME && strcmp(e->a->text, "T") == 0 &&
         (!name || strcmp(e->text, name) == 0);
}
static bool is_t_call(const expr_t *e, const char *name) { return e && e->kind == E_CALL && is_t(e->a, name); }
/* T.block or T.sblock (TVM 0.27's name). */
static bool is_block_call(const expr_t *e) { return is_t_call(e, "block") || is_t_call(e, "sblock"); }

static int eerr(interp_t *ip, const expr_t *e, const char *what) { return ts_ierr(ip->p, e->line, e->col, "%s", what); }

/* A constant integer: 5, -5, T.int32(5), T.int64(5). */
static bool const_int(const expr_t *e, int64_t *v) {
  if (e->kind == E_INT) {
    *v = e->ival;
    return true;
  }
  if ((is_t_call(e, "int32") || is_t_call(e, "int64")) && e->n == 1 && e->items[0]->kind == E_INT) {
    *v = e->items[0]->ival;
    return true;
  }
  return false;
}

static ibuf_t *find_buf(interp_t *ip, const char *name) {
  for (int i = 0; i < ip->nbufs; i++)
    if (ip->bufs[i].name && strcmp(ip->bufs[i].name, name) == 0) return &ip->bufs[i];
  return NULL;
}

static int parse_dtype_arg(interp_t *ip, const expr_t *e, ir_dtype_t *out) {
  if (e->kind != E_STR) return eerr(ip, e, "expected a dtype string such as \"float32\"");
  if (ir_dtype_parse(e->text, out) < 0 || *out == IR_BOOL)
    return ts_ierr(ip->p, e->line, e->col,
                "dtype \"%s\" is not in the workload language (float16, bfloat16, float32, float64, int32, int64)",
                e->text);
  return TN_OK;
}

/* The shape and dtype of T.Buffer(shape, dtype), T.match_buffer(h, shape,
 * dtype) or T.alloc_buffer(shape, dtype, scope="global"); args from `first`. */
static int buffer_args(interp_t *ip, const expr_t *call, int first, ibuf_t *b) {
  b->dtype = IR_FLOAT32;
  if (call->n <= first) return eerr(ip, call, "the buffer has no shape");
  const expr_t *shape = call->items[first];
  expr_t *const *dims = &call->items[first];
  int ndim = 1;
  if (shape->kind == E_TUPLE || shape->kind == E_LIST) {
    dims = shape->items;
    ndim = shape->n;
  }
  if (ndim > IR_MAX_DIMS) return ts_ierr(ip->p, shape->line, shape->col, "more than %d dimensions", IR_MAX_DIMS);
  for (int d = 0; d < ndim; d++) {
    if (!const_int(dims[d], &b->shape[d]) || b->shape[d] < 1 || b->shape[d] > INT32_MAX)
      return eerr(ip, dims[d], "a dimension must be a constant integer in [1, 2147483647] (static shapes only)");
  }
  b->ndim = ndim;
  if (call->n > first + 2) return eerr(ip, call->items[first + 2], "unsupported buffer argument (only shape and dtype)");
  if (call->n == first + 2 && parse_dtype_arg(ip, call->items[first + 1], &b->dtype)) return TN_EINVAL;
  for (int k = 0; k < call->nkw; k++) {
    const expr_t *v = call->kwvals[k];
    if (strcmp(call->kwnames[k], "dtype") == 0) {
      if (parse_dtype_arg(ip, v, &b->dtype)) return TN_EINVAL;
    } else if (strcmp(call->kwnames[k], "scope") == 0) {
      if (v->kind != E_STR || strcmp(v->text, "global") != 0)
        return eerr(ip, v, "only scope \"global\" buffers are in the workload language (other scopes are schedules)");
    } else {
      return ts_ierr(ip->p, v->line, v->col, "unsupported buffer argument '%s' (only shape, dtype, scope=\"global\")",
                  call->kwnames[k]);
    }
  }
  return TN_OK;
}

static int add_buf(interp_t *ip, const char *name, const expr_t *at, ibuf_t *b) {
  if (find_buf(ip, name)) return ts_ierr(ip->p, at->line, at->col, "buffer '%s' is declared twice", name);
  if (!ir_workload_name_ok(name))
    return ts_ierr(ip->p, at->line, at->col,
                "'%s' cannot name a tensor of a workload (a keyword of the language or of C, CUDA or OpenCL, "
                "or a name starting with '__', 'tuned_' or 'v_'); rename the buffer",
                name);
  b->name = name;
  b->line = at->line;
  b->col = at->col;
  APPEND(ip->p, ip->bufs, ip->nbufs, *b);
  return TN_OK;
}

/* ---- expressions --------------------------------------------------------- */

/* The workload language's precedence levels, loosest first. */
enum { P_OR = 1, P_AND, P_CMP, P_ADD, P_MUL, P_UNARY, P_ATOM };

static int bin_prec(const char *op) {
  if (strcmp(op, "or") == 0) return P_OR;
  if (strcmp(op, "and") == 0) return P_AND;
  if (strchr("+-", op[0]) && !op[1]) return P_ADD;
  if (strchr("*/%", op[0])) return P_MUL;
  return P_CMP;
}

static const ivar_t *find_var(interp_t *ip, const char *name) {
  for (int i = 0; i < ip->nvars; i++)
    if (strcmp(ip->vars[i].name, name) == 0 || strcmp(ip->vars[i].loop, name) == 0) return &ip->vars[i];
  return NULL;
}

/* Whether e is integer-valued (for '/', which truncates on integers in TVM). */
static bool int_valued(interp_t *ip, const expr_t *e) {
  ir_dtype_t t;
  switch (e->kind) {
  case E_INT: case E_NAME: return true;
  case E_INDEX: return e->a->kind == E_NAME && find_buf(ip, e->a->text) && ir_dtype_is_int(find_buf(ip, e->a->text)->dtype);
  case E_NEG: return int_valued(ip, e->a);
  case E_BIN: return bin_prec(e->text) >= P_ADD && int_valued(ip, e->a) && int_valued(ip, e->b);
  case E_CALL:
    if (is_t_call(e, "int32") || is_t_call(e, "int64") || is_t_call(e, "floordiv") || is_t_call(e, "floormod"))
      return true;
    if (is_t_call(e, "Cast") && e->n == 2 && e->items[0]->kind == E_STR)
      return ir_dtype_parse(e->items[0]->text, &t) == 0 && ir_dtype_is_int(t);
    if ((is_t_call(e, "max") || is_t_call(e, "min")) && e->n == 2) return int_valued(ip, e->items[0]);
    return false;
  default: return false;
  }
}

static int emit_expr(interp_t *ip, const expr_t *e, int ctx, tn_buf_t *out);

static int emit_args(interp_t *ip, const char *fn, expr_t *const *args, int n, tn_buf_t *out) {
  tn_buf_printf(out, "%s(", fn);
  for (int i = 0; i < n; i++) {
    if (i) tn_buf_put(out, ", ");
    if (emit_expr(ip, args[i], 0, out)) return TN_EINVAL;
  }
  tn_buf_putc(out, ')');
  return TN_OK;
}

static int emit_number(interp_t *ip, const expr_t *e, double v, tn_buf_t *out) {
  if (!isfinite(v)) return eerr(ip, e, "the workload language has only finite numbers");
  ir_print_double(v, out);
  return TN_OK;
}

/* T.<name>(...) as the language's function, conversion or literal. */
static int emit_call(interp_t *ip, const expr_t *e, tn_buf_t *out) {
  static const char *const same[] = {"max", "min", "exp", "log", "sqrt", "tanh", "abs", "pow"};
  const char *fn = is_t(e->a, NULL) ? e->a->text : NULL;
  ir_dtype_t t;
  if (!fn) return eerr(ip, e, "only T.* calls are in the imported subset");
  for (size_t i = 0; i < TN_ARRAY_LEN(same); i++)
    if (strcmp(fn, same[i]) == 0) return emit_args(ip, fn, e->items, e->n, out);
  if (strcmp(fn, "fabs") == 0) return emit_args(ip, "abs", e->items, e->n, out);
  if ((strcmp(fn, "if_then_else") == 0 || strcmp(fn, "Select") == 0) && e->n == 3)
    return emit_args(ip, "select", e->items, e->n, out);
  if (strcmp(fn, "Cast") == 0 && e->n == 2) {
    if (parse_dtype_arg(ip, e->items[0], &t)) return TN_EINVAL;
    return emit_args(ip, ir_dtype_name(t), e->items + 1, 1, out);
  }
  if ((strcmp(fn, "min_value") == 0 || strcmp(fn, "max_value") == 0) && e->n == 1) {
    if (parse_dtype_arg(ip, e->items[0], &t)) return TN_EINVAL;
    return emit_number(ip, e, fn[1] == 'i' ? ir_dtype_min_value(t) : ir_dtype_max_value(t), out);
  }
  if ((strcmp(fn, "floordiv") == 0 || strcmp(fn, "floormod") == 0) && e->n == 2) {
    expr_t b = {.kind = E_BIN, .text = fn[5] == 'd' ? "//" : "%", .a = e->items[0], .b = e->items[1]};
    return emit_expr(ip, &b, 0, out);
  }
  if (ir_dtype_parse(fn, &t) == 0 && t != IR_BOOL && e->n == 1 && e->nkw == 0) {
    const expr_t *a = e->items[0];
    if (a->kind == E_FLOAT || (a->kind == E_INT && ir_dtype_is_float(t)))
      return emit_number(ip, a, a->kind == E_FLOAT ? a->fval : (double)a->ival, out);
    if (a->kind == E_INT && t == IR_INT32) return emit_expr(ip, a, 0, out);
    if (a->kind == E_STR) return eerr(ip, a, "the workload language has only finite numbers");
    return emit_args(ip, fn, e->items, 1, out); /* int64(5), float32(x): conversions */
  }
  return ts_ierr(ip->p, e->line, e->col, "T.%s is not in the workload language (with these arguments)", fn);
}

/* The indices of B[i, j], B[(i, j)] or B[()]. */
static int indices(const expr_t *e, expr_t *const **idx) {
  bool tuple = e->n == 1 && e->items[0]->kind == E_TUPLE;
  *idx = tuple ? e->items[0]->items : e->items;
  return tuple ? e->items[0]->n : e->n;
}

static int emit_load(interp_t *ip, const expr_t *e, tn_buf_t *out) {
  const ibuf_t *b = e->a->kind == E_NAME ? find_buf(ip, e->a->text) : NULL;
  if (!b && e->a->kind == E_NAME) return ts_ierr(ip->p, e->a->line, e->a->col, "unknown buffer '%s'", e->a->text);
  if (!b) return eerr(ip, e->a, "expected a buffer before '['");
  expr_t *const *idx;
  int n = indices(e, &idx);
  if (n != b->ndim)
    return ts_ierr(ip->p, e->line, e->col, "buffer '%s' has %d dimensions but %d indices were given", b->name, b->ndim, n);
  tn_buf_printf(out, "%s[", b->name);
  for (int i = 0; i < n; i++) {
    if (i) tn_buf_put(out, ", ");
    if (idx[i]->kind == E_SLICE) return eerr(ip, idx[i], "a slice is not an element");
    if (emit_expr(ip, idx[i], 0, out)) return TN_EINVAL;
  }
  tn_buf_putc(out, ']');
  return TN_OK;
}

static int expr_prec(const expr_t *e) {
  switch (e->kind) {
  case E_BIN: return bin_prec(e->text);
  case E_NEG: case E_NOT: return P_UNARY;
  case E_INT: return e->ival < 0 ? P_UNARY : P_ATOM;
  case E_FLOAT: return signbit(e->fval) ? P_UNARY : P_ATOM;
  default: return P_ATOM;
  }
}

/* Writes e in the workload language, in parentheses when its precedence is
 * below ctx. */
static int emit_expr(interp_t *ip, const expr_t *e, int ctx, tn_buf_t *out) {
  int prec = expr_prec(e), rc = TN_OK;
  if (prec < ctx) tn_buf_putc(out, '(');
  switch (e->kind) {
  case E_INT: tn_buf_printf(out, "%" PRId64, e->ival); break;
  case E_FLOAT: rc = emit_number(ip, e, e->fval, out); break;
  case E_NAME: {
    const ivar_t *v = find_var(ip, e->text);
    if (!v)
      rc = ts_ierr(ip->p, e->line, e->col, "unknown name '%s' (not an iterator of this block or its loops)", e->text);
    else
      tn_buf_put(out, v->tw);
    break;
  }
  case E_INDEX: rc = emit_load(ip, e, out); break;
  case E_CALL: rc = emit_call(ip, e, out); break;
  case E_NEG:
  case E_NOT:
    tn_buf_putc(out, e->kind == E_NEG ? '-' : '!');
    rc = emit_expr(ip, e->a, P_UNARY, out);
    break;
  case E_BIN: {
    const char *op = strcmp(e->text, "and") == 0 ? "&&" : strcmp(e->text, "or") == 0 ? "||" : e->text;
    if (strcmp(op, "/") == 0 && int_valued(ip, e->a) && int_valued(ip, e->b)) {
      rc = eerr(ip, e, "'/' of integers truncates in TVM; the workload language has floor division only ('//')");
      break;
    }
    if ((rc = emit_expr(ip, e->a, prec == P_CMP ? prec + 1 : prec, out))) break;
    tn_buf_printf(out, " %s ", op);
    rc = emit_expr(ip, e->b, prec + 1, out);
    break;
  }
  default: rc = eerr(ip, e, "this expression is not in the workload language"); break;
  }
  if (prec < ctx) tn_buf_putc(out, ')');
  return rc;
}

/* ---- blocks ---------------------------------------------------------------- */

/* v = T.axis.spatial(ext, binding) / T.axis.reduce (or .S / .R), or v, w = T.axis.remap("SR", [i, j]). */
static int add_iters(interp_t *ip, const stmt_t *s) {
  const expr_t *c = s->value;
  const expr_t *ax = c->a->kind == E_ATTR ? c->a->a : NULL;
  bool remap = ax && is_t(ax, "axis") && strcmp(c->a->text, "remap") == 0;
  if (remap) {
    if (c->n != 2 || c->items[0]->kind != E_STR || c->items[1]->kind != E_LIST ||
        (int)strlen(c->items[0]->text) != c->items[1]->n || c->items[1]->n != s->ntargets)
      return eerr(ip, c, "T.axis.remap needs a kind string and a list of loop variables, one per target");
  } else if (!ax || !is_t(ax, "axis") || !strchr("SsRr", c->a->text[0]) ||
             (strcmp(c->a->text + 1, "patial") != 0 && strcmp(c->a->text + 1, "educe") != 0 && c->a->text[1]) ||
             c->n != 2 || s->ntargets != 1) {
    return eerr(ip, c, "expected T.axis.spatial(extent, loop), T.axis.reduce(...) or T.axis.remap(...)");
  }
  for (int i = 0; i < s->ntargets; i++) {
    const expr_t *t = s->targets[i], *bind = remap ? c->items[1]->items[i] : c->items[1];
    char kind = remap ? c->items[0]->text[i] : strchr("sS", c->a->text[0]) ? 'S' : 'R';
    if (t->kind != E_NAME) return eerr(ip, t, "expected an iterator name");
    if (kind != 'S' && kind != 'R') return eerr(ip, c->items[0], "iterator kinds are 'S' (spatial) and 'R' (reduce)");
    if (bind->kind != E_NAME)
      return eerr(ip, bind, "an iterator must be bound to one loop variable (the unscheduled form; schedules are not imported)");
    ivar_t v = {.name = t->text, .loop = bind->text, .reduce = kind == 'R', .extent = -1};
    if (!remap && !const_int(c->items[0], &v.extent)) return eerr(ip, c->items[0], "an iterator's extent must be a constant");
    APPEND(ip->p, ip->vars, ip->nvars, v);
  }
  return TN_OK;
}

/* A workload variable name for a loop: its name without the _1, _2 TVM's
 * printer appends to repeated names (each statement has its own variables),
 * or "i" where the language does not allow it. */
static const char *loop_base(interp_t *ip, const char *loop) {
  size_t n = strlen(loop), k = n;
  while (k > 0 && loop[k - 1] >= '0' && loop[k - 1] <= '9') k--;
  if (k > 1 && k < n && loop[k - 1] == '_') n = k - 1;
  const char *base = tn_arena_strndup(ip->p->arena, loop, n);
  return ir_workload_name_ok(base) ? base : ir_workload_name_ok(loop) ? loop : "i";
}

/* The block's iterators are the loops, in order, spatial before reduce;
 * each gets a workload variable name (the loop's, where the language allows). */
static int match_loops(interp_t *ip, const stmt_t *blk, const loop_t *loops, int nloops) {
  if (ip->nvars != nloops)
    return ts_ierr(ip->p, blk->line, blk->col, "block has %d iterators inside %d loops; each loop must bind one iterator",
                ip->nvars, nloops);
  for (int i = 0; i < nloops; i++) {
    ivar_t *v = &ip->vars[i];
    if (strcmp(v->loop, loops[i].name) != 0)
      return ts_ierr(ip->p, blk->line, blk->col,
                  "iterator %d ('%s') is bound to '%s', not to loop %d ('%s'): iterators follow the loops in order",
                  i + 1, v->name, v->loop, i + 1, loops[i].name);
    if (v->extent >= 0 && v->extent != loops[i].extent)
      return ts_ierr(ip->p, blk->line, blk->col, "iterator '%s' has extent %" PRId64 " but its loop '%s' %" PRId64,
                  v->name, v->extent, loops[i].name, loops[i].extent);
    v->extent = loops[i].extent;
    if (i && v->reduce < ip->vars[i - 1].reduce)
      return ts_ierr(ip->p, blk->line, blk->col, "spatial iterator '%s' after a reduce iterator: the workload language "
                  "puts the reduction loops innermost", v->name);
    v->tw = loop_base(ip, v->loop);
    const char *base = v->tw;
    for (int k = 1;; k++) {
      bool taken = find_buf(ip, v->tw) || !ir_workload_name_ok(v->tw);
      for (int j = 0; j < i && !taken; j++) taken = strcmp(ip->vars[j].tw, v->tw) == 0;
      if (!taken) break;
      v->tw = tn_arena_printf(ip->p->arena, "%s%d", base, k);
    }
  }
  return TN_OK;
}

/* The store `B[v_i, v_j] = value`: B indexed by the spatial iterators in
 * order, over B's whole shape. */
static int check_store(interp_t *ip, const stmt_t *st, const char *block, ibuf_t **out) {
  const expr_t *t = st->targets[0];
  ibuf_t *b = t->kind == E_INDEX && t->a->kind == E_NAME ? find_buf(ip, t->a->text) : NULL;
  if (st->ntargets != 1 || !b) return ts_ierr(ip->p, st->line, st->col, "expected a store to a buffer element");
  int nsp = 0;
  while (nsp < ip->nvars && !ip->vars[nsp].reduce) nsp++;
  expr_t *const *idx;
  int n = indices(t, &idx);
  if (n != b->ndim || n != nsp)
    return ts_ierr(ip->p, t->line, t->col, "the store must index '%s' (%d dimensions) by the block's %d spatial iterators",
                b->name, b->ndim, nsp);
  for (int i = 0; i < n; i++) {
    if (idx[i]->kind != E_NAME || strcmp(idx[i]->text, ip->vars[i].name) != 0)
      return ts_ierr(ip->p, idx[i]->line, idx[i]->col, "index %d must be the spatial iterator '%s' (the workload "
                  "language stores each element of a tensor at its own loop point)", i + 1, ip->vars[i].name);
    if (b->shape[i] != ip->vars[i].extent)
      return ts_ierr(ip->p, idx[i]->line, idx[i]->col, "iterator '%s' has extent %" PRId64 " but dimension %d of '%s' is %" PRId64,
                  ip->vars[i].name, ip->vars[i].extent, i + 1, b->name, b->shape[i]);
  }
  if (strcmp(block, b->name) != 0)
    return ts_ierr(ip->p, st->line, st->col, "block \"%s\" writes '%s': the workload language names a block after the "
                "tensor it computes; rename one", block, b->name);
  if (b->written) return ts_ierr(ip->p, st->line, st->col, "'%s' is written by two blocks", b->name);
  if (b->handle && !b->bound) return ts_ierr(ip->p, st->line, st->col, "'%s' is not bound by T.match_buffer", b->name);
  b->written = true;
  *out = b;
  return TN_OK;
}

/* Whether e is the load of the stored element (same buffer, same indices). */
static bool is_self(const expr_t *e, const expr_t *target) {
  if (e->kind != E_INDEX || e->a->kind != E_NAME || strcmp(e->a->text, target->a->text) != 0) return false;
  expr_t *const *a, *const *b;
  int n = indices(e, &a);
  if (n != indices(target, &b)) return false;
  for (int i = 0; i < n; i++)
    if (a[i]->kind != E_NAME || b[i]->kind != E_NAME || strcmp(a[i]->text, b[i]->text) != 0) return false;
  return true;
}

static bool const_value(const expr_t *e, double *v) {
  int64_t i;
  if (const_int(e, &i)) {
    *v = (double)i;
    return true;
  }
  if (e->kind == E_FLOAT) {
    *v = e->fval;
    return true;
  }
  ir_dtype_t t;
  if (e->kind == E_CALL && is_t(e->a, NULL) && e->n == 1) {
    if (ir_dtype_parse(e->a->text, &t) == 0) return const_value(e->items[0], v);
    if ((strcmp(e->a->text, "min_value") == 0 || strcmp(e->a->text, "max_value") == 0) && e->items[0]->kind == E_STR &&
        ir_dtype_parse(e->items[0]->text, &t) == 0) {
      *v = e->a->text[1] == 'i' ? ir_dtype_min_value(t) : ir_dtype_max_value(t);
      return true;
    }
  }
  return false;
}

/* A reduction's update `B[v] = B[v] + E` (or E + B[v]), T.max(B[v], E),
 * T.min(...), with init storing the identity: names the reduction and E. */
static int match_reduce(interp_t *ip, const stmt_t *init, const stmt_t *st, const ibuf_t *b, const char **kind,
                        const expr_t **body) {
  const expr_t *t = st->targets[0], *v = st->value;
  *body = NULL;
  if (v->kind == E_BIN && strcmp(v->text, "+") == 0) {
    *kind = "sum";
    *body = is_self(v->a, t) ? v->b : is_self(v->b, t) ? v->a : NULL;
  } else if ((is_t_call(v, "max") || is_t_call(v, "min")) && v->n == 2) {
    *kind = v->a->text;
    *body = is_self(v->items[0], t) ? v->items[1] : is_self(v->items[1], t) ? v->items[0] : NULL;
  }
  if (!*body)
    return ts_ierr(ip->p, st->line, st->col, "a reduction's update must be %s[...] = %s[...] + E, or T.max / T.min of it "
                "and E (sum, max, min)", b->name, b->name);
  const expr_t *it = init->ntargets == 1 ? init->targets[0] : NULL;
  double got, want = **kind == 's' ? 0 : (*kind)[1] == 'a' ? ir_dtype_min_value(b->dtype) : ir_dtype_max_value(b->dtype);
  if (init->kind != S_ASSIGN || !it || !is_self(it, t))
    return ts_ierr(ip->p, init->line, init->col, "T.init must store the element the block updates");
  if (!const_value(init->value, &got) || got != want) {
    tn_buf_t w;
    tn_buf_init(&w);
    ir_print_double(want, &w);
    int rc = ts_ierr(ip->p, init->value->line, init->value->col,
                  "the init value must be the identity of %s for %s (%s), as the workload language lowers it", *kind,
                  ir_dtype_name(b->dtype), tn_buf_str(&w));
    tn_buf_free(&w);
    return rc;
  }
  return TN_OK;
}

/* The block's statements: iterators, reads/writes (ignored), init, one store. */
static int scan_block(interp_t *ip, const stmt_t *blk, const stmt_t **init, const stmt_t **store) {
  for (int i = 0; i < blk->nbody; i++) {
    const stmt_t *s = blk->body[i];
    const expr_t *v = s->value;
    if (s->kind == S_EXPR && (is_t_call(v, "reads") || is_t_call(v, "writes"))) continue;
    if (s->kind == S_WITH && is_t_call(v, "init") && s->nbody == 1 && !*init) {
      *init = s->body[0];
      continue;
    }
    if (s->kind == S_ASSIGN && v->kind == E_CALL && v->a->kind == E_ATTR && is_t(v->a->a, "axis")) {
      if (add_iters(ip, s)) return TN_EINVAL;
      continue;
    }
    if (s->kind == S_ASSIGN && s->targets[0]->kind == E_INDEX && !*store) {
      *store = s;
      continue;
    }
    if (s->kind == S_EXPR && is_t_call(v, "where"))
      return eerr(ip, v, "T.where (a block predicate) comes from schedules; it is not in the workload language");
    if (s->kind == S_EXPR && (is_t_call(v, "block_attr") || is_t_call(v, "sblock_attr")))
      return eerr(ip, v, "block annotations are not in the workload language (remove the line to import without it)");
    return ts_ierr(ip->p, s->line, s->col, "unsupported statement in a block (iterators, T.reads, T.writes, one T.init "
                "and one store are)");
  }
  if (!*store) return ts_ierr(ip->p, blk->line, blk->col, "the block stores nothing");
  return TN_OK;
}

static int block(interp_t *ip, const stmt_t *blk, const loop_t *loops, int nloops) {
  const expr_t *c = blk->value;
  if (c->n != 1 || c->items[0]->kind != E_STR) return eerr(ip, c, "expected T.block(\"NAME\")");
  const char *name = c->items[0]->text;
  const stmt_t *init = NULL, *store = NULL;
  ibuf_t *b = NULL;
  ip->nvars = 0;
  if (scan_block(ip, blk, &init, &store) || match_loops(ip, blk, loops, nloops) || check_store(ip, store, name, &b))
    return TN_EINVAL;
  int nsp = b->ndim;
  bool reduce = nsp < ip->nvars;
  if (reduce != (init != NULL))
    return ts_ierr(ip->p, blk->line, blk->col, reduce ? "a block with reduce iterators needs T.init (the reduction's identity)"
                                                   : "T.init without reduce iterators");
  tn_buf_t *out = &ip->stmts;
  tn_buf_printf(out, "%s[", b->name);
  for (int i = 0; i < nsp; i++) tn_buf_printf(out, i ? ", %s" : "%s", ip->vars[i].tw);
  tn_buf_put(out, "] = ");
  const expr_t *value = store->value;
  const char *kind = NULL;
  if (reduce) {
    if (match_reduce(ip, init, store, b, &kind, &value)) return TN_EINVAL;
    tn_buf_printf(out, "%s(", kind);
    for (int i = nsp; i < ip->nvars; i++)
      tn_buf_printf(out, "%s%s < %" PRId64, i > nsp ? ", " : "", ip->vars[i].tw, ip->vars[i].extent);
    tn_buf_put(out, ": ");
  }
  if (emit_expr(ip, value, 0, out)) return TN_EINVAL;
  tn_buf_put(out, reduce ? ")\n" : "\n");
  return TN_OK;
}

/* ---- loops and the function ------------------------------------------------ */

/* `for a, b in T.grid(n, m)`, `for a in range(n)` / range(0, n) / T.serial(...). */
static int loop_header(interp_t *ip, const stmt_t *s, loop_t *loops, int *nloops) {
  const expr_t *it = s->value;
  bool grid = is_t_call(it, "grid");
  bool serial = it->kind == E_CALL && ((it->a->kind == E_NAME && strcmp(it->a->text, "range") == 0) || is_t(it->a, "serial"));
  if (!grid && !serial) {
    const char *what = is_t(it->a, NULL) ? it->a->text : "this";
    return ts_ierr(ip->p, it->line, it->col, "loop kind '%s' is not in the workload language (only T.grid, range and "
                "T.serial: loop kinds come from schedules)", what);
  }
  if (it->nkw) return ts_ierr(ip->p, it->line, it->col, "loop annotations come from schedules; they are not imported");
  int64_t ext, lo = 0;
  int n = grid ? it->n : 1;
  if (n != s->ntargets) return ts_ierr(ip->p, s->line, s->col, "%d loop variables for %d extents", s->ntargets, n);
  if (!grid && !(it->n == 1 || (it->n == 2 && const_int(it->items[0], &lo) && lo == 0)))
    return eerr(ip, it, "a loop must run from 0: range(n) or range(0, n)");
  for (int i = 0; i < n; i++) {
    const expr_t *e = grid ? it->items[i] : it->items[it->n - 1];
    if (!const_int(e, &ext) || ext < 1 || ext > INT32_MAX) return eerr(ip, e, "a loop extent must be a constant >= 1");
    if (s->targets[i]->kind != E_NAME) return eerr(ip, s->targets[i], "expected a loop variable");
    if (*nloops == IR_MAX_LOOP_DEPTH) return eerr(ip, e, "too many nested loops");
    loops[(*nloops)++] = (loop_t){.name = s->targets[i]->text, .extent = ext, .line = e->line, .col = e->col};
  }
  return TN_OK;
}

/* A loop nest down to its one block. */
static int nest(interp_t *ip, const stmt_t *s) {
  loop_t *loops = tn_xmalloc(sizeof(loop_t) * IR_MAX_LOOP_DEPTH);
  int nloops = 0, rc = TN_OK;
  while (rc == TN_OK) {
    if ((rc = loop_header(ip, s, loops, &nloops))) break;
    if (s->nbody != 1) {
      rc = ts_ierr(ip->p, s->line, s->col, "this loop holds %d statements: each loop of a workload holds one loop or "
                "one block", s->nbody);
      break;
    }
    s = s->body[0];
    if (s->kind == S_WITH && is_block_call(s->value)) {
      rc = block(ip, s, loops, nloops);
      break;
    }
    if (s->kind != S_FOR) rc = ts_ierr(ip->p, s->line, s->col, "expected a loop or a block");
  }
  free(loops);
  return rc;
}

static int root_stmts(interp_t *ip, stmt_t *const *body, int n);

/* X = T.match_buffer(h, shape, dtype) or X = T.alloc_buffer(shape, dtype). */
static int assign_buffer(interp_t *ip, const stmt_t *s) {
  const expr_t *c = s->value, *t = s->targets[0];
  ibuf_t b = {0};
  if (s->ntargets != 1 || t->kind != E_NAME || c->kind != E_CALL) return ts_ierr(ip->p, s->line, s->col, "unsupported assignment");
  if (is_t_call(c, "alloc_buffer") || is_t_call(c, "sblock_alloc_buffer")) {
    b.temp = true;
    return buffer_args(ip, c, 0, &b) ? TN_EINVAL : add_buf(ip, t->text, t, &b);
  }
  if (is_t_call(c, "match_buffer") && c->n >= 1 && c->items[0]->kind == E_NAME) {
    for (int i = 0; i < ip->nbufs; i++) {
      ibuf_t *h = &ip->bufs[i];
      if (!h->handle || h->bound || strcmp(h->handle, c->items[0]->text) != 0) continue;
      if (buffer_args(ip, c, 1, &b)) return TN_EINVAL;
      if (find_buf(ip, t->text)) return ts_ierr(ip->p, t->line, t->col, "buffer '%s' is declared twice", t->text);
      if (!ir_workload_name_ok(t->text)) return add_buf(ip, t->text, t, &b); /* reports the name */
      b.handle = h->handle;
      b.bound = true;
      b.name = t->text;
      b.line = h->line;
      b.col = h->col;
      *h = b;
      return TN_OK;
    }
    return eerr(ip, c->items[0], "T.match_buffer of something that is no unbound T.handle parameter");
  }
  if (is_t_call(c, "alloc_shared") || is_t_call(c, "alloc_local"))
    return eerr(ip, c, "shared and local buffers come from schedules; they are not in the workload language");
  return eerr(ip, c, "unsupported assignment (T.alloc_buffer and T.match_buffer are)");
}

static int root_stmt(interp_t *ip, const stmt_t *s) {
  const expr_t *v = s->value;
  switch (s->kind) {
  case S_SKIP: return TN_OK;
  case S_EXPR:
    if (is_t_call(v, "func_attr") || is_t_call(v, "reads") || is_t_call(v, "writes")) return TN_OK;
    break;
  case S_ASSIGN: return assign_buffer(ip, s);
  case S_FOR: return nest(ip, s);
  case S_WITH:
    if (is_block_call(v) && v->n == 1 && v->items[0]->kind == E_STR && strcmp(v->items[0]->text, "root") == 0 &&
        !ip->seen_root) {
      ip->seen_root = true;
      return root_stmts(ip, s->body, s->nbody);
    }
    if (is_block_call(v)) return eerr(ip, v, "a block outside any loop (only the root block may be)");
    break;
  default: break;
  }
  return ts_ierr(ip->p, s->line, s->col, "unsupported statement (the function body holds buffers and loop nests)");
}

static int root_stmts(interp_t *ip, stmt_t *const *body, int n) {
  for (int i = 0; i < n; i++)
    if (root_stmt(ip, body[i])) return TN_EINVAL;
  return TN_OK;
}

static bool is_prim_func(const stmt_t *s) {
  for (int i = 0; i < s->ndecos; i++) {
    const expr_t *d = s->decos[i];
    if (is_t(d, "prim_func") || is_t_call(d, "prim_func")) return true;
  }
  return false;
}

static int params(interp_t *ip, const stmt_t *f) {
  for (int i = 0; i < f->nparams; i++) {
    const expr_t *a = f->annots[i];
    ibuf_t b = {0};
    if (is_t(a, "handle")) {
      b.handle = f->params[i];
      b.line = a->line;
      b.col = a->col;
      APPEND(ip->p, ip->bufs, ip->nbufs, b);
    } else if (is_t_call(a, "Buffer")) {
      if (buffer_args(ip, a, 0, &b) || add_buf(ip, f->params[i], a, &b)) return TN_EINVAL;
    } else {
      return ts_ierr(ip->p, a->line, a->col, "parameter '%s' must be a T.Buffer(shape, dtype) or a T.handle", f->params[i]);
    }
  }
  return TN_OK;
}

/* The declarations, in parameter order then temps, and the statements. */
static int write_workload(interp_t *ip, const stmt_t *f, tn_buf_t *out) {
  bool any_output = false;
  tn_buf_printf(out, "# Imported from %s (TVMScript function '%s') by tunectl import-tvmscript.\n", ip->p->path, f->name);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < ip->nbufs; i++) {
      const ibuf_t *b = &ip->bufs[i];
      if (b->temp != (pass == 1)) continue;
      if (b->handle && !b->bound)
        return ts_ierr(ip->p, b->line, b->col, "T.handle parameter '%s' is never bound by T.match_buffer", b->handle);
      if (b->temp && !b->written)
        return ts_ierr(ip->p, b->line, b->col, "no block writes '%s': every temp of a workload is computed", b->name);
      any_output |= !b->temp && b->written;
      tn_buf_printf(out, "%-6s %s: %s[", b->temp ? "temp" : b->written ? "output" : "input", b->name, ir_dtype_name(b->dtype));
      for (int d = 0; d < b->ndim; d++) tn_buf_printf(out, d ? ", %" PRId64 : "%" PRId64, b->shape[d]);
      tn_buf_put(out, "]\n");
    }
  }
  if (!any_output) return ts_ierr(ip->p, f->line, f->col, "no block writes a parameter: a workload has an output");
  tn_buf_put(out, tn_buf_str(&ip->stmts));
  return TN_OK;
}

/* The one prim_func of the file (alone, or in an @I.ir_module class). */
static int find_func(imp_t *p, const stmt_t *top, const stmt_t **out) {
  const stmt_t *found = NULL;
  for (int i = 0; i < top->nbody; i++) {
    const stmt_t *s = top->body[i];
    if (s->kind == S_CLASS) {
      const stmt_t *inner = NULL;
      if (find_func(p, s, &inner)) return TN_EINVAL;
      s = inner;
    } else if (s->kind == S_DEF && !is_prim_func(s)) {
      return ts_ierr(p, s->line, s->col, "def %s is not a @T.prim_func", s->name);
    } else if (s->kind != S_DEF) {
      if (s->kind == S_SKIP) continue;
      return ts_ierr(p, s->line, s->col, "unsupported statement outside a function (imports, @T.prim_func and an "
                  "@I.ir_module class are)");
    }
    if (s && found) return ts_ierr(p, s->line, s->col, "more than one prim_func: import one at a time");
    if (s) found = s;
  }
  *out = found;
  return TN_OK;
}

int ir_tvmscript_import(const char *path, const char *text, size_t len, tn_buf_t *out, tn_err_t *err) {
  imp_t p = {.path = path, .err = err, .arena = tn_arena_new()};
  interp_t ip = {.p = &p};
  stmt_t top = {.kind = S_CLASS};
  const stmt_t *f = NULL;
  tn_buf_t tw;
  tn_buf_init(&tw);
  tn_buf_init(&ip.stmts);
  int rc = TN_OK;
  if (len > IR_MAX_SOURCE_BYTES || memchr(text, 0, len))
    rc = tn_err_set(err, TN_EINVAL, "%s: not a TVMScript text of at most %u bytes", path, IR_MAX_SOURCE_BYTES);
  if (!rc) rc = ts_lex(&p, text, len);
  while (!rc && ts_peek(&p)->kind != T_EOF) {
    stmt_t *s = ts_parse_stmt(&p);
    if (s)
      APPEND(&p, top.body, top.nbody, s);
    else
      rc = TN_EINVAL;
  }
  if (!rc) rc = find_func(&p, &top, &f);
  if (!rc && !f) rc = tn_err_set(err, TN_EINVAL, "%s: no @T.prim_func in the file", path);
  if (!rc) rc = params(&ip, f) || root_stmts(&ip, f->body, f->nbody) || write_workload(&ip, f, &tw) ? TN_EINVAL : TN_OK;
  ir_workload_t *w = NULL;
  const char *label = tn_arena_printf(p.arena, "(the workload from %s)", path);
  if (!rc && ir_workload_parse(label, tn_buf_str(&tw), strlen(tn_buf_str(&tw)), NULL, 0, &w, err) < 0)
    rc = tn_err_prefix(err, "%s: the imported workload does not check", path);
  if (!rc) tn_buf_put(out, tn_buf_str(&tw));
  ir_workload_free(w);
  tn_buf_free(&tw);
  tn_buf_free(&ip.stmts);
  free(p.toks);
  tn_arena_free(p.arena);
  return rc;
}
