/* eval_metrics.c — what the evaluator's results are judged and sized by:
 * the relative error between two runs, the tolerance per dtype, and the
 * floating-point operations and compulsory bytes of a function. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>

double ir_rel_l2_error(const double *ref, const double *got, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double r = ref[i], g = got[i];
    if (isnan(r)) continue; /* no reference value to compare with */
    if (isnan(g)) return INFINITY;
    if (r == g) {
      if (isfinite(r)) den += r * r;
      continue;
    }
    if (!isfinite(r) || !isfinite(g)) return INFINITY;
    num += (g - r) * (g - r);
    den += r * r;
  }
  return den == 0 ? sqrt(num) : sqrt(num / den);
}

double ir_dtype_tolerance(ir_dtype_t t) {
  switch (t) {
  case IR_FLOAT16: return 1e-2;
  case IR_BFLOAT16: return 2e-2; /* 8 significant bits */
  case IR_FLOAT32: return 1e-4;
  case IR_FLOAT64: return 1e-10;
  default: return 0;
  }
}

/* Arithmetic on values in a stored expression: not index math (load indices,
 * conditions, conversions of integers to floats). */
static double value_flops(const ir_expr_t *e) {
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: case IR_E_VAR: case IR_E_LOAD: return 0;
  case IR_E_NEG: return 1 + value_flops(e->u.un);
  case IR_E_CAST:
    if (ir_dtype_is_float(e->u.un->dtype) || ir_dtype_is_int(e->dtype)) return value_flops(e->u.un);
    return 0;
  case IR_E_SELECT: return value_flops(e->u.sel.t) + value_flops(e->u.sel.f);
  case IR_E_CALL: {
    double n = 1;
    for (int i = 0; i < e->u.call.n; i++) n += value_flops(e->u.call.args[i]);
    return n;
  }
  default:
    if (e->kind >= IR_E_ADD && e->kind <= IR_E_MAX)
      return 1 + value_flops(e->u.bin.a) + value_flops(e->u.bin.b);
    return 0; /* comparisons, logic */
  }
}

/* Over every store run `times` times: its value's flops (inits not counted),
 * or with `updates` the number of stores run (inits counted). */
static double stmt_sum(const ir_stmt_t *s, double times, bool updates) {
  if (!s) return 0;
  double n = 0;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) n += stmt_sum(s->u.seq.items[i], times, updates);
    return n;
  case IR_S_LOOP: return stmt_sum(s->u.loop.body, times * (double)s->u.loop.extent, updates);
  case IR_S_BLOCK:
    return stmt_sum(s->u.block.body, times, updates) + (updates ? stmt_sum(s->u.block.init, times, updates) : 0);
  case IR_S_STORE: return times * (updates ? 1 : value_flops(s->u.store.value));
  }
  return 0;
}

double ir_func_flops(const ir_func_t *f) { return stmt_sum(f->root, 1, false); }

double ir_func_bytes(const ir_func_t *f) {
  double n = 0;
  for (int i = 0; i < f->nparams; i++)
    n += (double)ir_buffer_numel(f->params[i]) * ir_dtype_bytes(f->params[i]->dtype);
  return n;
}

double ir_func_updates(const ir_func_t *f) { return stmt_sum(f->root, 1, true); }

double ir_eval_max_updates(void) {
  const char *e = getenv("TUNED_EVAL_MAX_UPDATES");
  char *end = NULL;
  double v = e && *e ? strtod(e, &end) : 0;
  return e && *e && end && !*end && v > 0 ? v : IR_EVAL_MAX_UPDATES;
}

int ir_eval_check_work(const ir_func_t *f, tn_err_t *err) {
  double n = ir_func_updates(f), cap = ir_eval_max_updates();
  if (n <= cap) return TN_OK;
  return tn_err_set(err, TN_ERANGE,
                    "%s needs %.3g element updates to compute its reference result, over the cap of %.3g "
                    "(hours of work, unstoppable once started): refused; make the problem smaller, or raise "
                    "$TUNED_EVAL_MAX_UPDATES",
                    f->name, n, cap);
}
