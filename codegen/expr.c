/* expr.c — printing expressions and buffer accesses as C-family source:
 * literals, operators with minimal parentheses, floor division, math calls,
 * row-major flattening (rebased for sized temporaries) and half
 * conversions, all spelled through the dialect table. */
#include "cg_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C operator precedence, higher binds tighter. */
enum { P_TERN = 3, P_OR = 4, P_AND = 5, P_EQ = 9, P_REL = 10, P_ADD = 12, P_MUL = 13,
       P_UNARY = 15, P_ATOM = 16 };

static void pexpr(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need);

static void open_paren(tn_buf_t *o, int prec, int need) {
  if (prec < need) tn_buf_putc(o, '(');
}

static void close_paren(tn_buf_t *o, int prec, int need) {
  if (prec < need) tn_buf_putc(o, ')');
}

/* ---- literals ------------------------------------------------------------ */

static void print_int(cg_ctx_t *c, int64_t v, ir_dtype_t t, tn_buf_t *o, int need) {
  bool wide = t == IR_INT64;
  const char *suf = wide ? c->d->int64_suffix : "";
  if (wide && v == INT64_MIN) {
    tn_buf_printf(o, "(-9223372036854775807%s - 1)", suf);
    return;
  }
  if (!wide && v == INT32_MIN) {
    tn_buf_put(o, "(-2147483647 - 1)");
    return;
  }
  int prec = v < 0 ? P_UNARY : P_ATOM;
  open_paren(o, prec, need);
  tn_buf_printf(o, "%lld%s", (long long)v, suf);
  close_paren(o, prec, need);
}

static void print_float(cg_ctx_t *c, double v, ir_dtype_t t, tn_buf_t *o, int need) {
  bool dbl = t == IR_FLOAT64;
  const char *one = dbl ? "1.0" : "1.0f", *zero = dbl ? "0.0" : "0.0f";
  if (dbl) c->need_fp64 = true;
  else v = (double)(float)v; /* as the float literal will hold it (may overflow to inf) */
  if (isnan(v) || isinf(v)) {
    tn_buf_printf(o, "(%s%s / %s)", isnan(v) ? "" : (v < 0 ? "-" : ""), isnan(v) ? zero : one, zero);
    return;
  }
  char s[64];
  snprintf(s, sizeof s, "%.*g", dbl ? 17 : 9, v);
  if (!strpbrk(s, ".e")) strcat(s, ".0");
  int prec = s[0] == '-' ? P_UNARY : P_ATOM;
  open_paren(o, prec, need);
  tn_buf_printf(o, "%s%s", s, dbl ? "" : "f");
  close_paren(o, prec, need);
}

static void print_literal(cg_ctx_t *c, double v, ir_dtype_t t, tn_buf_t *o, int need) {
  if (ir_dtype_is_float(t)) print_float(c, v, t, o, need);
  else print_int(c, (int64_t)v, t, o, need);
}

void cg_identity(cg_ctx_t *c, ir_expr_kind_t op, ir_dtype_t t, tn_buf_t *o) {
  double v = op == IR_E_MAX ? ir_dtype_min_value(t) : op == IR_E_MIN ? ir_dtype_max_value(t) : 0;
  if (t == IR_INT64 && op != IR_E_ADD) {
    print_int(c, op == IR_E_MAX ? INT64_MIN : INT64_MAX, t, o, 0);
    return;
  }
  print_literal(c, v, t, o, 0);
}

/* ---- bindings and indices -------------------------------------------------- */

ir_expr_t *cg_subst_bindings(cg_ctx_t *c, const ir_block_t *blk, ir_expr_t *e) {
  if (!blk || blk->niters == 0) return e;
  ir_var_t **from = tn_xmalloc(sizeof(*from) * (size_t)blk->niters);
  ir_expr_t **to = tn_xmalloc(sizeof(*to) * (size_t)blk->niters);
  int n = 0;
  for (int i = 0; i < blk->niters; i++)
    if (blk->iters[i].binding) {
      from[n] = blk->iters[i].var;
      to[n++] = blk->iters[i].binding;
    }
  ir_expr_t *r = ir_expr_subst(c->scratch, e, from, to, n);
  free(from);
  free(to);
  return r;
}

/* Index of dimension d as stored: rebased by the buffer's base (over loop
 * variables) for sized buffers. */
static ir_expr_t *dim_index(cg_ctx_t *c, const ir_block_t *blk, const cg_buf_t *cb, int d,
                            ir_expr_t *x, bool over_loops) {
  if (!cb->min[d] && !over_loops) return x;
  x = cg_subst_bindings(c, blk, x);
  if (cb->min[d]) x = ir_bin(c->scratch, IR_E_SUB, x, cb->min[d]);
  return ir_simplify(c->scratch, x, &c->bounds);
}

static ir_expr_t *flat_index(cg_ctx_t *c, const ir_block_t *blk, const ir_buffer_t *b,
                             ir_expr_t *const *idx, bool over_loops) {
  const cg_buf_t *cb = &c->bufs[b->id];
  int64_t stride[IR_MAX_DIMS], numel = cg_buf_strides(cb, stride);
  bool wide = numel > INT32_MAX;
  ir_dtype_t it = wide ? IR_INT64 : IR_INT32;
  ir_expr_t *flat = NULL;
  bool rebased = false;
  for (int d = 0; d < b->ndim; d++) {
    ir_expr_t *x = dim_index(c, blk, cb, d, idx[d], over_loops);
    rebased = rebased || cb->min[d];
    if (wide) x = ir_cast(c->scratch, IR_INT64, x);
    if (stride[d] != 1) x = ir_bin(c->scratch, IR_E_MUL, x, ir_const_int(c->scratch, it, stride[d]));
    flat = flat ? ir_bin(c->scratch, IR_E_ADD, flat, x) : x;
  }
  if (!flat) flat = ir_int(c->scratch, 0);
  /* C: a rebased index is over loop variables; make it one flat sum of
   * their terms, as `(i_2 * 4 + i_3) * 512 + (j_2 * 32 + j_3)` keeps gcc's
   * SLP vectorizer from seeing that unrolled j_3 accesses are adjacent
   * (scalar loads and inserts, a spilled accumulator: 10% slower). */
  if (rebased && !wide && !c->d->gpu) flat = ir_simplify(c->scratch, flat, &c->bounds);
  if (cb->nvt) { /* the virtual thread's slice */
    ir_expr_t *slice = NULL;
    for (int i = 0; i < cb->nvt; i++) {
      ir_expr_t *v = ir_varref(c->scratch, cb->vt[i]->var);
      slice = slice ? ir_bin(c->scratch, IR_E_ADD,
                             ir_bin(c->scratch, IR_E_MUL, slice, ir_int(c->scratch, cb->vt[i]->extent)), v)
                    : v;
    }
    if (wide) slice = ir_cast(c->scratch, IR_INT64, slice);
    flat = ir_bin(c->scratch, IR_E_ADD, flat, ir_bin(c->scratch, IR_E_MUL, slice, ir_const_int(c->scratch, it, numel)));
    for (int i = 0; i < cb->nvt; i++) numel *= cb->vt[i]->extent;
  }
  if (cb->pipe) { /* the pipeline stage's slice: the loop's variable modulo the stages */
    ir_expr_t *stage = ir_bin(c->scratch, IR_E_FLOORMOD, ir_varref(c->scratch, cb->pipe->var),
                              ir_int(c->scratch, cb->pipe_stages));
    if (wide) stage = ir_cast(c->scratch, IR_INT64, stage);
    flat = ir_bin(c->scratch, IR_E_ADD, flat, ir_bin(c->scratch, IR_E_MUL, stage, ir_const_int(c->scratch, it, numel)));
  }
  return flat;
}

ir_expr_t *cg_flat_index(cg_ctx_t *c, const ir_buffer_t *b, ir_expr_t *const *idx) {
  return flat_index(c, c->blk, b, idx, false);
}

ir_expr_t *cg_flat_index_loops(cg_ctx_t *c, const ir_block_t *blk, const ir_buffer_t *b,
                               ir_expr_t *const *idx) {
  return ir_simplify(c->scratch, flat_index(c, blk, b, idx, true), &c->bounds);
}

/* ---- accesses ------------------------------------------------------------- */

static void print_load(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o) {
  for (int i = 0; i < c->novr; i++)
    if (c->ovr_expr[i] == e) {
      tn_buf_put(o, c->ovr_text[i]);
      return;
    }
  const ir_buffer_t *b = e->u.load.buf;
  const char *acc = cg_promo_ref(c, b);
  if (acc) {
    tn_buf_put(o, acc);
    return;
  }
  const char *idx = cg_expr_str(c, cg_flat_index(c, b, e->u.load.idx));
  const char *name = c->bufs[b->id].name;
  if (cg_half_storage(c, b)) {
    c->need_half = true;
    tn_buf_printf(o, c->d->half_load, name, idx);
  } else if (cg_bf16_storage(b)) {
    c->need_bf16 = true;
    tn_buf_printf(o, c->d->bf16_load, name, idx);
  } else {
    tn_buf_printf(o, "%s[%s]", name, idx);
  }
}

void cg_emit_store_text(cg_ctx_t *c, const ir_buffer_t *b, ir_expr_t *const *idx,
                        const char *value) {
  const char *acc = cg_promo_ref(c, b);
  if (acc) {
    cg_line(c, "%s = %s;", acc, value);
    return;
  }
  cg_emit_store_at(c, b, c->bufs[b->id].name, cg_expr_str(c, cg_flat_index(c, b, idx)), value);
}

void cg_emit_store_at(cg_ctx_t *c, const ir_buffer_t *b, const char *name, const char *ix, const char *value) {
  if (cg_half_storage(c, b) || cg_bf16_storage(b)) {
    bool bf = cg_bf16_storage(b);
    *(bf ? &c->need_bf16 : &c->need_half) = true;
    tn_buf_indent(c->o, 2 * c->ind);
    tn_buf_printf(c->o, bf ? c->d->bf16_store : c->d->half_store, name, ix, value);
    tn_buf_putc(c->o, '\n');
  } else {
    cg_line(c, "%s[%s] = %s;", name, ix, value);
  }
}

/* ---- operators ------------------------------------------------------------ */

static const char *int_suffix(ir_dtype_t t) { return t == IR_INT64 ? "i64" : "i32"; }

/* On the C target, single-precision exp and tanh call the module's own
 * branch-free versions (module.c): glibc's expf/tanhf are scalar calls that
 * GCC vectorises only under -ffast-math, and a GELU or softmax epilogue then
 * costs more than the matmul before it. */
static const char *math_name(cg_ctx_t *c, ir_math_fn_t fn, ir_dtype_t t) {
  static const char *const dbl[] = {"exp", "log", "sqrt", "tanh", "fabs", "pow"};
  static const char *const flt[] = {"expf", "logf", "sqrtf", "tanhf", "fabsf", "powf"};
  if ((unsigned)fn >= TN_ARRAY_LEN(dbl)) return "?";
  if (t == IR_FLOAT64 || c->d->math_overloaded) return dbl[fn];
  if (c->d->target == CG_TARGET_C && fn == IR_FN_EXP) return c->need_expf = true, "tuned_expf";
  if (c->d->target == CG_TARGET_C && fn == IR_FN_TANH) return c->need_expf = c->need_tanhf = true, "tuned_tanhf";
  return flt[fn];
}

static void print_call2(cg_ctx_t *c, const char *fn, const ir_expr_t *a, const ir_expr_t *b,
                        tn_buf_t *o) {
  tn_buf_printf(o, "%s(", fn);
  pexpr(c, a, o, 0);
  if (b) {
    tn_buf_put(o, ", ");
    pexpr(c, b, o, 0);
  }
  tn_buf_putc(o, ')');
}

static void print_infix(cg_ctx_t *c, const ir_expr_t *e, const char *op, int prec, int lneed,
                        int rneed, tn_buf_t *o, int need) {
  open_paren(o, prec, need);
  pexpr(c, e->u.bin.a, o, lneed);
  tn_buf_printf(o, " %s ", op);
  pexpr(c, e->u.bin.b, o, rneed);
  close_paren(o, prec, need);
}

static bool intlike(ir_dtype_t t) { return t == IR_BOOL || ir_dtype_is_int(t); }

/* Floor division / modulo: plain / and % when the dividend is provably
 * non-negative and the divisor a positive constant, else a helper. */
static void print_floor(cg_ctx_t *c, const ir_expr_t *e, bool mod, tn_buf_t *o, int need) {
  int64_t dv;
  if (ir_expr_is_const_int(e->u.bin.b, &dv) && dv > 0 &&
      ir_interval_of(e->u.bin.a, &c->bounds).lo >= 0) {
    print_infix(c, e, mod ? "%" : "/", P_MUL, P_MUL, P_MUL + 1, o, need);
    return;
  }
  bool wide = e->dtype == IR_INT64;
  c->need_fdiv[wide] = true;
  char fn[32];
  snprintf(fn, sizeof fn, "tuned_floor%s_%s", mod ? "mod" : "div", int_suffix(e->dtype));
  print_call2(c, fn, e->u.bin.a, e->u.bin.b, o);
}

/* Whether e reads the accumulator of the simd reduction being printed. */
static bool reads_simd_acc(const cg_ctx_t *c, const ir_expr_t *e) {
  return c->promo && c->promo->simd && e->kind == IR_E_LOAD && e->u.load.buf == c->promo->store->u.store.buf;
}

/* The function of a float max or min.  C: tuned_fmaxf and kin (module.c),
 * fmaxf's value as a compare and select, which gcc vectorizes (fmaxf itself
 * it does not, for NaN's sake: a ReLU epilogue became one call per element);
 * elsewhere the language's own, one instruction. */
static const char *float_minmax(cg_ctx_t *c, bool max, ir_dtype_t t) {
  bool f = t != IR_FLOAT64 && !c->d->math_overloaded;
  if (c->d->target == CG_TARGET_C) {
    c->need_fminmax[!f] = true;
    return max ? (f ? "tuned_fmaxf" : "tuned_fmax") : (f ? "tuned_fminf" : "tuned_fmin");
  }
  return max ? (f ? "fmaxf" : "fmax") : (f ? "fminf" : "fmin");
}

static void print_minmax(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o) {
  bool max = e->kind == IR_E_MAX;
  char fn[32];
  /* a float max/min into a simd reduction's scalar: a compare and select,
   * which gcc vectorizes (fmaxf it does not, for NaN's sake); the same value
   * here, since the accumulator starts at -inf/+inf-like bounds and a NaN
   * operand never wins the comparison, as it never wins fmaxf */
  const ir_expr_t *acc = e->u.bin.a, *x = e->u.bin.b;
  if (reads_simd_acc(c, x)) acc = e->u.bin.b, x = e->u.bin.a;
  if (!intlike(e->dtype) && !c->d->gpu && reads_simd_acc(c, acc) && !reads_simd_acc(c, x)) {
    const char *xs = cg_expr_str(c, x), *as = cg_expr_str(c, acc);
    tn_buf_printf(o, "((%s) %s %s ? (%s) : %s)", xs, max ? ">" : "<", as, xs, as);
    return;
  }
  if (intlike(e->dtype)) {
    c->need_minmax[e->dtype == IR_INT64] = true;
    snprintf(fn, sizeof fn, "tuned_%s_%s", max ? "max" : "min", int_suffix(e->dtype));
  } else {
    snprintf(fn, sizeof fn, "%s", float_minmax(c, max, e->dtype));
  }
  print_call2(c, fn, e->u.bin.a, e->u.bin.b, o);
}

void cg_combine(cg_ctx_t *c, ir_expr_kind_t op, ir_dtype_t t, const char *a, const char *b,
                tn_buf_t *o) {
  if (op == IR_E_ADD) {
    tn_buf_printf(o, "%s + %s", a, b);
    return;
  }
  bool max = op == IR_E_MAX;
  if (intlike(t)) {
    c->need_minmax[t == IR_INT64] = true;
    tn_buf_printf(o, "tuned_%s_%s(%s, %s)", max ? "max" : "min", int_suffix(t), a, b);
  } else {
    tn_buf_printf(o, "%s(%s, %s)", float_minmax(c, max, t), a, b);
  }
}

static void print_binary(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need) {
  bool isint = intlike(e->u.bin.a->dtype);
  switch (e->kind) {
  case IR_E_ADD: print_infix(c, e, "+", P_ADD, P_ADD, P_ADD + 1, o, need); return;
  case IR_E_SUB: print_infix(c, e, "-", P_ADD, P_ADD, P_ADD + 1, o, need); return;
  case IR_E_MUL: print_infix(c, e, "*", P_MUL, P_MUL, P_MUL + 1, o, need); return;
  case IR_E_DIV: {
    const char *rcp = isint ? NULL : cg_recip_ref(c, e);
    if (isint) print_floor(c, e, false, o, need);
    else if (!rcp) print_infix(c, e, "/", P_MUL, P_MUL, P_MUL + 1, o, need);
    else {
      open_paren(o, P_MUL, need);
      pexpr(c, e->u.bin.a, o, P_MUL);
      tn_buf_printf(o, " * %s", rcp);
      close_paren(o, P_MUL, need);
    }
    return;
  }
  case IR_E_FLOORDIV: print_floor(c, e, false, o, need); return;
  case IR_E_FLOORMOD: print_floor(c, e, true, o, need); return;
  case IR_E_MIN: case IR_E_MAX: print_minmax(c, e, o); return;
  case IR_E_EQ: print_infix(c, e, "==", P_EQ, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_NE: print_infix(c, e, "!=", P_EQ, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_LT: print_infix(c, e, "<", P_REL, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_LE: print_infix(c, e, "<=", P_REL, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_GT: print_infix(c, e, ">", P_REL, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_GE: print_infix(c, e, ">=", P_REL, P_REL + 1, P_REL + 1, o, need); return;
  case IR_E_AND: print_infix(c, e, "&&", P_AND, P_AND + 1, P_AND + 1, o, need); return;
  case IR_E_OR: print_infix(c, e, "||", P_OR, P_AND + 1, P_AND + 1, o, need); return;
  default: tn_buf_put(o, "0 /* ? */"); return;
  }
}

static void print_cast(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need) {
  if (e->dtype == IR_BOOL) {
    open_paren(o, P_EQ, need);
    pexpr(c, e->u.un, o, P_REL + 1);
    tn_buf_put(o, " != 0");
    close_paren(o, P_EQ, need);
    return;
  }
  open_paren(o, P_UNARY, need);
  tn_buf_printf(o, "(%s)", c->d->compute[e->dtype]);
  pexpr(c, e->u.un, o, P_UNARY);
  close_paren(o, P_UNARY, need);
}

static void print_unary(cg_ctx_t *c, const ir_expr_t *e, const char *op, tn_buf_t *o, int need) {
  open_paren(o, P_UNARY, need);
  tn_buf_put(o, op);
  pexpr(c, e->u.un, o, P_ATOM);
  close_paren(o, P_UNARY, need);
}

static void print_select(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need) {
  open_paren(o, P_TERN, need);
  pexpr(c, e->u.sel.cond, o, P_TERN + 1);
  tn_buf_put(o, " ? ");
  pexpr(c, e->u.sel.t, o, P_TERN + 1);
  tn_buf_put(o, " : ");
  pexpr(c, e->u.sel.f, o, P_TERN + 1);
  close_paren(o, P_TERN, need);
}

static void print_call(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need) {
  ir_dtype_t t = e->dtype;
  if (!ir_dtype_is_float(t)) { /* integer math: compute in double, convert back */
    open_paren(o, P_UNARY, need);
    tn_buf_printf(o, "(%s)%s((double)", c->d->compute[t], math_name(c, e->u.call.fn, IR_FLOAT64));
    pexpr(c, e->u.call.args[0], o, P_UNARY);
    if (e->u.call.n > 1) {
      tn_buf_put(o, ", (double)");
      pexpr(c, e->u.call.args[1], o, P_UNARY);
    }
    tn_buf_putc(o, ')');
    close_paren(o, P_UNARY, need);
    return;
  }
  print_call2(c, math_name(c, e->u.call.fn, t), e->u.call.args[0],
              e->u.call.n > 1 ? e->u.call.args[1] : NULL, o);
}

static void pexpr(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o, int need) {
  if (e->dtype == IR_FLOAT64) c->need_fp64 = true;
  switch (e->kind) {
  case IR_E_INT: print_int(c, e->u.ival, e->dtype == IR_INT64 ? IR_INT64 : IR_INT32, o, need); return;
  case IR_E_FLOAT: print_float(c, e->u.fval, e->dtype, o, need); return;
  case IR_E_VAR:
    tn_buf_put(o, e->u.var == c->shift_var ? c->shift_text : cg_var(c, e->u.var));
    return;
  case IR_E_LOAD: print_load(c, e, o); return;
  case IR_E_NOT: print_unary(c, e, "!", o, need); return;
  case IR_E_NEG: print_unary(c, e, "-", o, need); return;
  case IR_E_CAST: print_cast(c, e, o, need); return;
  case IR_E_SELECT: print_select(c, e, o, need); return;
  case IR_E_CALL: print_call(c, e, o, need); return;
  default: print_binary(c, e, o, need); return;
  }
}

void cg_print_expr(cg_ctx_t *c, const ir_expr_t *e, tn_buf_t *o) { pexpr(c, e, o, 0); }

char *cg_expr_str(cg_ctx_t *c, const ir_expr_t *e) {
  tn_buf_t b;
  tn_buf_init(&b);
  pexpr(c, e, &b, 0);
  char *s = tn_arena_strdup(c->scratch->arena, tn_buf_str(&b));
  tn_buf_free(&b);
  return s;
}
