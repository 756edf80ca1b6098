/* print.c — prints functions and expressions as TVMScript-shaped text (the
 * form `sch.mod.show()` gives), for `tunectl show`, logs and golden tests,
 * and as exact TVMScript of TVM 0.27 (`tunectl show --tvmscript`), which
 * TVM's parser reads and frontend/tvmscript.c imports. */
#include "ir.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Printing state.  Variable names are given out lazily in print order (the
 * order of first appearance); a name already used by another variable or by
 * a buffer gets the first free suffix _1, _2, ... */
typedef struct printer {
  tn_buf_t *out;
  tn_arena_t *arena; /* NULL: expression-only printing, names as-is */
  const ir_func_t *f;
  const ir_var_t **vars;
  const char **names;
  int nvars, varcap;
  const ir_loop_t **loops; /* enclosing loops of the statement being printed */
  int nloops, loopcap;
  bool tvm027; /* TVM 0.27's dialect: T.sblock, s_tir=True, implicit root */
} printer_t;

static void print_expr(printer_t *p, const ir_expr_t *e);
static void print_stmt(printer_t *p, const ir_stmt_t *s, int depth);

/* ---- names ------------------------------------------------------------- */

static bool name_taken(const printer_t *p, const char *name) {
  for (int i = 0; i < p->nvars; i++)
    if (strcmp(p->names[i], name) == 0) return true;
  for (int i = 0; i < p->f->nparams; i++)
    if (strcmp(p->f->params[i]->name, name) == 0) return true;
  const ir_block_t *root = ir_func_root(p->f);
  for (int i = 0; i < root->nallocs; i++)
    if (strcmp(root->allocs[i]->name, name) == 0) return true;
  return false;
}

/* Python's keywords and the names the exact form's text uses itself (T,
 * range): a buffer or variable so named would not parse, so that form
 * prints it with a suffix, as TVM's printer does. */
static bool python_reserved(const printer_t *p, const char *s) {
  static const char *const words[] = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
      "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
      "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "T", "range"};
  if (!p->tvm027) return false;
  for (size_t i = 0; i < TN_ARRAY_LEN(words); i++)
    if (strcmp(s, words[i]) == 0) return true;
  return false;
}

static const char *buf_name(printer_t *p, const ir_buffer_t *b) {
  const char *name = b->name;
  for (int k = 1; python_reserved(p, name) || (k > 1 && name_taken(p, name)); k++)
    name = tn_arena_printf(p->arena, "%s_%d", b->name, k);
  return name;
}

static const char *var_name(printer_t *p, const ir_var_t *v) {
  if (!p->arena) return v->name;
  for (int i = 0; i < p->nvars; i++)
    if (p->vars[i] == v) return p->names[i];
  const char *name = v->name;
  for (int k = 1; name_taken(p, name) || python_reserved(p, name); k++)
    name = tn_arena_printf(p->arena, "%s_%d", v->name, k);
  if (p->nvars == p->varcap) {
    p->varcap = p->varcap ? 2 * p->varcap : 32;
    p->vars = tn_xrealloc(p->vars, sizeof(*p->vars) * (size_t)p->varcap);
    p->names = tn_xrealloc(p->names, sizeof(*p->names) * (size_t)p->varcap);
  }
  p->vars[p->nvars] = v;
  p->names[p->nvars++] = name;
  return name;
}

/* ---- expressions ------------------------------------------------------- */

/* Python precedence levels, loosest first. */
enum { PREC_OR = 1, PREC_AND, PREC_NOT, PREC_CMP, PREC_ADD, PREC_MUL, PREC_UNARY, PREC_ATOM };

static int expr_prec(const ir_expr_t *e) {
  switch (e->kind) {
  case IR_E_OR: return PREC_OR;
  case IR_E_AND: return PREC_AND;
  case IR_E_NOT: return PREC_NOT;
  case IR_E_EQ: case IR_E_NE: case IR_E_LT: case IR_E_LE: case IR_E_GT: case IR_E_GE:
    return PREC_CMP;
  case IR_E_ADD: case IR_E_SUB: return PREC_ADD;
  case IR_E_MUL: case IR_E_DIV: case IR_E_FLOORDIV: case IR_E_FLOORMOD: return PREC_MUL;
  case IR_E_NEG: return PREC_UNARY;
  case IR_E_INT: /* a plain negative literal reads like a unary minus */
    return e->dtype == IR_INT32 && e->u.ival < 0 ? PREC_UNARY : PREC_ATOM;
  default: return PREC_ATOM;
  }
}

static const char *infix_op(ir_expr_kind_t k) {
  switch (k) {
  case IR_E_ADD: return " + ";
  case IR_E_SUB: return " - ";
  case IR_E_MUL: return " * ";
  case IR_E_DIV: return " / ";
  case IR_E_FLOORDIV: return " // ";
  case IR_E_FLOORMOD: return " % ";
  case IR_E_EQ: return " == ";
  case IR_E_NE: return " != ";
  case IR_E_LT: return " < ";
  case IR_E_LE: return " <= ";
  case IR_E_GT: return " > ";
  case IR_E_GE: return " >= ";
  case IR_E_AND: return " and ";
  case IR_E_OR: return " or ";
  default: return NULL;
  }
}

static void print_operand(printer_t *p, const ir_expr_t *e, bool parens) {
  if (parens) tn_buf_putc(p->out, '(');
  print_expr(p, e);
  if (parens) tn_buf_putc(p->out, ')');
}

/* Left-associative infix: the right operand needs parentheses at equal
 * precedence (a - (b - c)); comparisons do not chain, so both sides do. */
static void print_infix(printer_t *p, const ir_expr_t *e, const char *op) {
  int prec = expr_prec(e);
  int la = expr_prec(e->u.bin.a), lb = expr_prec(e->u.bin.b);
  print_operand(p, e->u.bin.a, prec == PREC_CMP ? la <= prec : la < prec);
  tn_buf_put(p->out, op);
  print_operand(p, e->u.bin.b, lb <= prec);
}

/* Shortest "%.Ng" that reads back as the same double, Python-repr style
 * ("1.0", not "1"); inf and nan as the strings TVMScript accepts.  snprintf
 * and strtod agree on the locale's decimal point, which is printed as '.'. */
void ir_print_double(double v, tn_buf_t *out) {
  if (isnan(v) || isinf(v)) {
    tn_buf_printf(out, "\"%s\"", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    return;
  }
  char s[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(s, sizeof s, "%.*g", prec, v);
    if (strtod(s, NULL) == v) break;
  }
  for (char *c = s; *c; c++)
    if (*c == ',') *c = '.'; /* a decimal comma from the C locale of the process */
  tn_buf_put(out, s);
  if (!strpbrk(s, ".e")) tn_buf_put(out, ".0");
}

static void print_const(printer_t *p, const ir_expr_t *e) {
  if (e->kind == IR_E_FLOAT || ir_dtype_is_float(e->dtype)) {
    tn_buf_printf(p->out, "T.%s(", ir_dtype_name(e->dtype));
    ir_print_double(e->kind == IR_E_FLOAT ? e->u.fval : (double)e->u.ival, p->out);
    tn_buf_putc(p->out, ')');
  } else if (e->dtype == IR_BOOL) {
    tn_buf_printf(p->out, "T.bool(%s)", e->u.ival ? "True" : "False");
  } else if (e->dtype == IR_INT32) {
    tn_buf_printf(p->out, "%" PRId64, e->u.ival);
  } else {
    tn_buf_printf(p->out, "T.%s(%" PRId64 ")", ir_dtype_name(e->dtype), e->u.ival);
  }
}

/* buf[i, j]; a 0-d buffer as buf[()]. */
static void print_access(printer_t *p, const ir_buffer_t *b, ir_expr_t *const *idx, int n) {
  tn_buf_printf(p->out, "%s[", buf_name(p, b));
  if (n == 0) tn_buf_put(p->out, "()");
  for (int i = 0; i < n; i++) {
    if (i) tn_buf_put(p->out, ", ");
    print_expr(p, idx[i]);
  }
  tn_buf_putc(p->out, ']');
}

/* T.name(a, b, ...) */
static void print_call(printer_t *p, const char *name, ir_expr_t *const *args, int n) {
  tn_buf_printf(p->out, "T.%s(", name);
  for (int i = 0; i < n; i++) {
    if (i) tn_buf_put(p->out, ", ");
    print_expr(p, args[i]);
  }
  tn_buf_putc(p->out, ')');
}

static void print_math(printer_t *p, const ir_expr_t *e) {
  const char *name = ir_math_fn_name(e->u.call.fn);
  if (e->u.call.fn == IR_FN_ABS && ir_dtype_is_float(e->dtype)) name = "fabs";
  print_call(p, name, e->u.call.args, e->u.call.n);
}

static void print_expr(printer_t *p, const ir_expr_t *e) {
  if (!e) {
    tn_buf_put(p->out, "None");
    return;
  }
  const char *op = infix_op(e->kind);
  if (op) {
    print_infix(p, e, op);
    return;
  }
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: print_const(p, e); break;
  case IR_E_VAR: tn_buf_put(p->out, var_name(p, e->u.var)); break;
  case IR_E_LOAD: print_access(p, e->u.load.buf, e->u.load.idx, e->u.load.n); break;
  case IR_E_MIN: case IR_E_MAX: {
    ir_expr_t *args[2] = {e->u.bin.a, e->u.bin.b};
    print_call(p, e->kind == IR_E_MIN ? "min" : "max", args, 2);
    break;
  }
  case IR_E_NOT:
    tn_buf_put(p->out, "not ");
    print_operand(p, e->u.un, expr_prec(e->u.un) < PREC_NOT);
    break;
  case IR_E_NEG:
    tn_buf_putc(p->out, '-');
    print_operand(p, e->u.un, expr_prec(e->u.un) <= PREC_UNARY);
    break;
  case IR_E_CAST:
    tn_buf_printf(p->out, "T.Cast(\"%s\", ", ir_dtype_name(e->dtype));
    print_expr(p, e->u.un);
    tn_buf_putc(p->out, ')');
    break;
  case IR_E_SELECT: {
    ir_expr_t *args[3] = {e->u.sel.cond, e->u.sel.t, e->u.sel.f};
    print_call(p, "if_then_else", args, 3);
    break;
  }
  case IR_E_CALL: print_math(p, e); break;
  default: tn_buf_printf(p->out, "<expr kind %d>", (int)e->kind); break;
  }
}

void ir_print_expr(const ir_expr_t *e, tn_buf_t *out) {
  printer_t p = {.out = out};
  print_expr(&p, e);
}

/* ---- pieces of statements ---------------------------------------------- */

static void line_start(printer_t *p, int depth) { tn_buf_indent(p->out, 4 * depth); }

static void print_shape(tn_buf_t *out, const ir_buffer_t *b) {
  tn_buf_putc(out, '(');
  for (int i = 0; i < b->ndim; i++) tn_buf_printf(out, i ? ", %" PRId64 : "%" PRId64, b->shape[i]);
  tn_buf_put(out, b->ndim == 1 ? ",)" : ")");
}

static void print_string(tn_buf_t *out, const char *s) {
  tn_buf_putc(out, '"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') tn_buf_putc(out, '\\');
    tn_buf_putc(out, *s);
  }
  tn_buf_putc(out, '"');
}

void ir_annot_order(const ir_annot_t *a, int n, int *order) {
  for (int i = 0; i < n; i++) { /* insertion sort: stable, and the lists are tiny */
    int j = i;
    for (; j > 0 && strcmp(a[order[j - 1]].key, a[i].key) > 0; j--) order[j] = order[j - 1];
    order[j] = i;
  }
}

/* {"key": value, ...} */
static void print_annots(tn_buf_t *out, const ir_annot_t *a, int n) {
  int *order = tn_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  ir_annot_order(a, n, order);
  tn_buf_putc(out, '{');
  for (int i = 0; i < n; i++) {
    const ir_annot_t *an = &a[order[i]];
    if (i) tn_buf_put(out, ", ");
    print_string(out, an->key);
    tn_buf_put(out, ": ");
    if (an->is_str)
      print_string(out, an->sval ? an->sval : "");
    else
      tn_buf_printf(out, "%" PRId64, an->ival);
  }
  tn_buf_putc(out, '}');
  free(order);
}

/* TVM 0.27 prints shared and local buffers as T.alloc_shared / T.alloc_local
 * and leaves out the default dtype, float32. */
static void print_alloc(printer_t *p, const ir_buffer_t *b, int depth) {
  bool scoped = p->tvm027 && b->scope != IR_SCOPE_GLOBAL;
  line_start(p, depth);
  tn_buf_printf(p->out, "%s = T.alloc_%s(", buf_name(p, b), scoped ? ir_scope_name(b->scope) : "buffer");
  print_shape(p->out, b);
  if (!p->tvm027 || b->dtype != IR_FLOAT32) tn_buf_printf(p->out, ", \"%s\"", ir_dtype_name(b->dtype));
  if (b->scope != IR_SCOPE_GLOBAL && !scoped) tn_buf_printf(p->out, ", scope=\"%s\"", ir_scope_name(b->scope));
  tn_buf_put(p->out, ")\n");
}

/* One region dimension: the min for a point, else min:min + extent (folded
 * when both are constants, as TVM prints 0:1024). */
static void print_range(printer_t *p, const ir_range_t *r) {
  int64_t lo, ext;
  bool const_ext = ir_expr_is_const_int(r->extent, &ext);
  print_expr(p, r->min);
  if (const_ext && ext == 1) return;
  tn_buf_putc(p->out, ':');
  if (const_ext && ir_expr_is_const_int(r->min, &lo) && r->min->dtype == IR_INT32) {
    tn_buf_printf(p->out, "%" PRId64, lo + ext);
    return;
  }
  ir_expr_t end = {.kind = IR_E_ADD, .dtype = r->min ? r->min->dtype : IR_INT32};
  end.u.bin.a = r->min;
  end.u.bin.b = r->extent;
  print_expr(p, &end);
}

/* T.reads(A[v_i, 0:16], B[...]) */
static void print_regions(printer_t *p, const char *what, const ir_region_t *rs, int n, int depth) {
  line_start(p, depth);
  tn_buf_printf(p->out, "T.%s(", what);
  for (int i = 0; i < n; i++) {
    if (i) tn_buf_put(p->out, ", ");
    tn_buf_printf(p->out, "%s[", buf_name(p, rs[i].buf));
    if (rs[i].buf->ndim == 0) tn_buf_put(p->out, "()");
    for (int d = 0; d < rs[i].buf->ndim; d++) {
      if (d) tn_buf_put(p->out, ", ");
      print_range(p, &rs[i].dims[d]);
    }
    tn_buf_putc(p->out, ']');
  }
  tn_buf_put(p->out, ")\n");
}

/* ---- loops ------------------------------------------------------------- */

static bool grid_loop(const ir_stmt_t *s) {
  return s && s->kind == IR_S_LOOP && s->u.loop.kind == IR_LOOP_SERIAL && s->u.loop.nannots == 0;
}

static void push_loop(printer_t *p, const ir_loop_t *l) {
  if (p->nloops == p->loopcap) {
    p->loopcap = p->loopcap ? 2 * p->loopcap : 16;
    p->loops = tn_xrealloc(p->loops, sizeof(*p->loops) * (size_t)p->loopcap);
  }
  p->loops[p->nloops++] = l;
}

/* for a, b in T.grid(n, m): over a run of perfectly nested plain serial loops. */
static void print_grid(printer_t *p, const ir_stmt_t *s, int depth) {
  int n = 0;
  for (const ir_stmt_t *t = s; grid_loop(t); t = t->u.loop.body, n++) push_loop(p, &t->u.loop);
  const ir_loop_t **run = p->loops + p->nloops - n;
  line_start(p, depth);
  tn_buf_put(p->out, "for ");
  for (int i = 0; i < n; i++) tn_buf_printf(p->out, i ? ", %s" : "%s", var_name(p, run[i]->var));
  tn_buf_put(p->out, " in T.grid(");
  for (int i = 0; i < n; i++) tn_buf_printf(p->out, i ? ", %" PRId64 : "%" PRId64, run[i]->extent);
  tn_buf_put(p->out, "):\n");
  print_stmt(p, run[n - 1]->body, depth + 1);
  p->nloops -= n;
}

static void print_loop(printer_t *p, const ir_stmt_t *s, int depth) {
  const ir_loop_t *l = &s->u.loop;
  if (grid_loop(s) && grid_loop(l->body)) {
    print_grid(p, s, depth);
    return;
  }
  line_start(p, depth);
  tn_buf_printf(p->out, "for %s in ", var_name(p, l->var));
  switch (l->kind) {
  case IR_LOOP_SERIAL: tn_buf_put(p->out, p->tvm027 && l->nannots ? "T.serial(" : "range("); break;
  case IR_LOOP_PARALLEL: tn_buf_put(p->out, "T.parallel("); break;
  case IR_LOOP_VECTORIZED: tn_buf_put(p->out, "T.vectorized("); break;
  case IR_LOOP_UNROLLED: tn_buf_put(p->out, "T.unroll("); break;
  case IR_LOOP_THREAD: tn_buf_put(p->out, "T.thread_binding("); break;
  }
  tn_buf_printf(p->out, "%" PRId64, l->extent);
  if (l->kind == IR_LOOP_THREAD) {
    tn_buf_put(p->out, ", thread=");
    print_string(p->out, ir_thread_tag_name(l->tag));
  }
  if (l->nannots) {
    tn_buf_put(p->out, ", annotations=");
    print_annots(p->out, l->annots, l->nannots);
  }
  tn_buf_put(p->out, "):\n");
  push_loop(p, l);
  print_stmt(p, l->body, depth + 1);
  p->nloops--;
}

/* ---- blocks ------------------------------------------------------------ */

/* TVM 0.27 renamed T.block to T.sblock (and T.block_attr to T.sblock_attr). */
static const char *block_word(const printer_t *p) { return p->tvm027 ? "sblock" : "block"; }


/* An iterator can join T.axis.remap when it is bound to an enclosing loop's
 * variable with the same extent (TVM's rule), not yet used in the run. */
static bool remappable(const printer_t *p, const ir_block_t *b, int i, int run_start) {
  const ir_expr_t *bind = b->iters[i].binding;
  if (!bind || bind->kind != IR_E_VAR) return false;
  for (int j = run_start; j < i; j++)
    if (b->iters[j].binding->u.var == bind->u.var) return false;
  for (int j = p->nloops - 1; j >= 0; j--)
    if (p->loops[j]->var == bind->u.var) return p->loops[j]->extent == b->iters[i].extent;
  return false;
}

static void print_single_iter(printer_t *p, const ir_iter_t *it, int depth) {
  line_start(p, depth);
  tn_buf_printf(p->out, "%s = T.axis.%s(%" PRId64 ", ", var_name(p, it->var),
                it->kind == IR_ITER_SPATIAL ? "spatial" : "reduce", it->extent);
  print_expr(p, it->binding);
  tn_buf_put(p->out, ")\n");
}

/* Iterators [from, to) as one remap line, or a single axis line if alone. */
static void print_remap(printer_t *p, const ir_block_t *b, int from, int to, int depth) {
  if (to - from == 1) print_single_iter(p, &b->iters[from], depth);
  if (to - from <= 1) return;
  line_start(p, depth);
  for (int i = from; i < to; i++)
    tn_buf_printf(p->out, i > from ? ", %s" : "%s", var_name(p, b->iters[i].var));
  tn_buf_put(p->out, " = T.axis.remap(\"");
  for (int i = from; i < to; i++) tn_buf_putc(p->out, b->iters[i].kind == IR_ITER_SPATIAL ? 'S' : 'R');
  tn_buf_put(p->out, "\", [");
  for (int i = from; i < to; i++)
    tn_buf_printf(p->out, i > from ? ", %s" : "%s", var_name(p, b->iters[i].binding->u.var));
  tn_buf_put(p->out, "])\n");
}

static void print_iters(printer_t *p, const ir_block_t *b, int depth) {
  int run = 0; /* first iterator of the pending remap run */
  for (int i = 0; i < b->niters; i++) {
    if (remappable(p, b, i, run)) continue;
    print_remap(p, b, run, i, depth);
    run = i;
    if (remappable(p, b, i, i)) continue; /* a repeated loop variable starts a new run */
    print_single_iter(p, &b->iters[i], depth);
    run = i + 1;
  }
  print_remap(p, b, run, b->niters, depth);
}

/* Everything inside `with T.block(...)`, at `depth`. */
static void print_block_head(printer_t *p, const ir_block_t *b, int depth) {
  print_iters(p, b, depth);
  if (b->predicate) {
    line_start(p, depth);
    tn_buf_put(p->out, "T.where(");
    print_expr(p, b->predicate);
    tn_buf_put(p->out, ")\n");
  }
  print_regions(p, "reads", b->reads, b->nreads, depth);
  print_regions(p, "writes", b->writes, b->nwrites, depth);
}

static void print_block_tail(printer_t *p, const ir_block_t *b, int depth) {
  if (b->nannots) {
    line_start(p, depth);
    tn_buf_printf(p->out, "T.%s_attr(", block_word(p));
    print_annots(p->out, b->annots, b->nannots);
    tn_buf_put(p->out, ")\n");
  }
  for (int i = 0; i < b->nallocs; i++) print_alloc(p, b->allocs[i], depth);
  if (b->init) {
    line_start(p, depth);
    tn_buf_put(p->out, "with T.init():\n");
    print_stmt(p, b->init, depth + 1);
  }
  print_stmt(p, b->body, depth);
}

static void print_block(printer_t *p, const ir_stmt_t *s, int depth) {
  const ir_block_t *b = &s->u.block;
  line_start(p, depth);
  tn_buf_printf(p->out, "with T.%s(", block_word(p));
  print_string(p->out, b->name);
  tn_buf_put(p->out, "):\n");
  print_block_head(p, b, depth + 1);
  print_block_tail(p, b, depth + 1);
}

/* The root block is implicit (a comment) unless it is annotated or, in the
 * older form, allocates (TVM 0.27 prints its allocations without it). */
static void print_root(printer_t *p, const ir_stmt_t *s, int depth) {
  const ir_block_t *b = &s->u.block;
  line_start(p, depth);
  if (!b->nannots && (!b->nallocs || p->tvm027)) {
    tn_buf_printf(p->out, "# with T.%s(\"root\"):\n", block_word(p));
    for (int i = 0; i < b->nallocs; i++) print_alloc(p, b->allocs[i], depth);
    print_stmt(p, b->body, depth);
    return;
  }
  tn_buf_printf(p->out, "with T.%s(\"root\"):\n", block_word(p));
  print_block_tail(p, b, depth + 1);
}

/* ---- statements -------------------------------------------------------- */

static void print_stmt(printer_t *p, const ir_stmt_t *s, int depth) {
  if (!s) {
    line_start(p, depth);
    tn_buf_put(p->out, "T.evaluate(0)\n");
    return;
  }
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) print_stmt(p, s->u.seq.items[i], depth);
    if (s->u.seq.n == 0) print_stmt(p, NULL, depth);
    break;
  case IR_S_LOOP: print_loop(p, s, depth); break;
  case IR_S_BLOCK: print_block(p, s, depth); break;
  case IR_S_STORE:
    line_start(p, depth);
    print_access(p, s->u.store.buf, s->u.store.idx, s->u.store.n);
    tn_buf_put(p->out, " = ");
    print_expr(p, s->u.store.value);
    tn_buf_putc(p->out, '\n');
    break;
  }
}

static void print_signature(printer_t *p) {
  const ir_func_t *f = p->f;
  tn_buf_printf(p->out, "def %s(", f->name);
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    tn_buf_printf(p->out, i ? ", %s: T.Buffer(" : "%s: T.Buffer(", buf_name(p, b));
    print_shape(p->out, b);
    tn_buf_printf(p->out, ", \"%s\")", ir_dtype_name(b->dtype));
  }
  tn_buf_put(p->out, "):\n");
}

/* The header, signature and attributes: TVM 0.27 names the dialect tirx,
 * marks schedulable functions s_tir=True and takes the name from the def. */
static void print_head(printer_t *p) {
  tn_buf_t *out = p->out;
  if (p->tvm027) {
    tn_buf_put(out, "# from tvm.script import tirx as T\n\n@T.prim_func(s_tir=True)\n");
    print_signature(p);
    tn_buf_indent(out, 4);
    tn_buf_put(out, "T.func_attr({\"tirx.noalias\": True})\n");
    return;
  }
  tn_buf_put(out, "# from tvm.script import tir as T\n\n@T.prim_func\n");
  print_signature(p);
  tn_buf_indent(out, 4);
  tn_buf_put(out, "T.func_attr({\"global_symbol\": ");
  print_string(out, p->f->name);
  tn_buf_put(out, ", \"tir.noalias\": True})\n");
}

static void print_func(const ir_func_t *f, bool tvm027, tn_buf_t *out) {
  printer_t p = {.out = out, .arena = tn_arena_new(), .f = f, .tvm027 = tvm027};
  print_head(&p);
  if (f->root && f->root->kind == IR_S_BLOCK)
    print_root(&p, f->root, 1);
  else
    print_stmt(&p, f->root, 1);
  free(p.vars);
  free(p.names);
  free(p.loops);
  tn_arena_free(p.arena);
}

void ir_print_func(const ir_func_t *f, tn_buf_t *out) { print_func(f, false, out); }

void ir_print_tvmscript(const ir_func_t *f, tn_buf_t *out) { print_func(f, true, out); }
