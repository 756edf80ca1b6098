/* eval_internal.h — what the reference evaluator's files share: the
 * evaluation state, the operations on values that the scalar path and the
 * fast path must agree on bit for bit, and the calls between the driver
 * (eval.c), the scalar interpreter (eval_scalar.c), the fast path
 * (eval_vector.c) and the parameter data (eval_data.c).  Private to ir/. */
#ifndef TUNED_IR_EVAL_INTERNAL_H
#define TUNED_IR_EVAL_INTERNAL_H

#include <assert.h>
#include <math.h>

#include "ir.h"

/* ======================================================================
 * Evaluation state
 * ====================================================================== */

typedef struct ev_buf {
  const ir_buffer_t *b;
  double *data; /* NULL: neither a parameter nor allocated */
  int64_t rstride[IR_MAX_DIMS];
  bool owned;
} ev_buf_t;

typedef struct vprog vprog_t; /* a fast-path program (eval_vector.c) */

typedef struct ev {
  const ir_func_t *f;
  ev_buf_t *bufs; /* by buffer id */
  int nbufs;
  double *vars; /* current values by variable id */
  int nvars;
  const char *block; /* innermost block being run, for messages */
  bool force_scalar;
  vprog_t **progs; /* fast-path programs by loop uid */
  int nprogs;
  size_t temp_bytes;
  ir_eval_stats_t st;
  tn_err_t *err;
  int depth;    /* loops around the statement being run */
  int nthreads; /* for independent outermost loops (eval.c) */
  bool (*stop)(void *ctx); /* NULL: never stops (ir_eval_stoppable) */
  void *stop_ctx;
  int poll_left; /* loop iterations until stop is asked again */
} ev_t;

/* Loop iterations (scalar iterations and fast-path lane chunks) between two
 * calls of the stop callback.  Every loop of every depth counts, so the work
 * between two polls is at most this many block instances' worth: a few
 * microseconds to a millisecond, whatever the extents. */
#define EV_POLL_EVERY 4096

/* Asks the stop callback (and sets the error) once every EV_POLL_EVERY
 * calls; true: give up, the error is TN_ESTOPPED. */
bool ev_poll_stop(ev_t *ev);
static inline bool ev_should_stop(ev_t *ev) {
  return ev->stop && --ev->poll_left <= 0 && ev_poll_stop(ev);
}

/* The variable's current value, NULL when its id is outside the function's. */
static inline double *var_slot(ev_t *ev, const ir_var_t *v) {
  return v->id >= 0 && v->id < ev->nvars ? &ev->vars[v->id] : NULL;
}

/* ======================================================================
 * Operations on values, shared by both paths so that they agree bit for bit.
 * Integer results are canonicalised (+ 0.0 turns -0 into +0) because the
 * affine lane form cannot reproduce the sign of a zero.
 * ====================================================================== */

static inline bool intlike(ir_dtype_t t) {
  return t == IR_BOOL || t == IR_INT32 || t == IR_INT64;
}

static inline double v_max(double a, double b) {
  if (a != a || b != b) return a + b; /* NaN in, NaN out */
  return a > b ? a : b;
}

static inline double v_min(double a, double b) {
  if (a != a || b != b) return a + b;
  return a < b ? a : b;
}

/* The operations apply_bin may refuse (integer division by zero). */
static inline bool can_fail(int op, bool isint) {
  return isint && (op == IR_E_DIV || op == IR_E_FLOORDIV || op == IR_E_FLOORMOD);
}

/* Applies a binary operation; false on integer division by zero. */
static inline bool apply_bin(int op, bool isint, double a, double b, double *r) {
  double v;
  switch (op) {
  case IR_E_ADD: v = a + b; break;
  case IR_E_SUB: v = a - b; break;
  case IR_E_MUL: v = a * b; break;
  case IR_E_DIV: /* on integers, floor division */
  case IR_E_FLOORDIV:
    if (isint && b == 0) return false;
    v = op == IR_E_DIV && !isint ? a / b : floor(a / b);
    break;
  case IR_E_FLOORMOD:
    if (isint && b == 0) return false;
    v = a - b * floor(a / b);
    break;
  case IR_E_MIN: v = v_min(a, b); break;
  case IR_E_MAX: v = v_max(a, b); break;
  case IR_E_EQ: v = a == b; break;
  case IR_E_NE: v = a != b; break;
  case IR_E_LT: v = a < b; break;
  case IR_E_LE: v = a <= b; break;
  case IR_E_GT: v = a > b; break;
  case IR_E_GE: v = a >= b; break;
  case IR_E_AND: v = a != 0 && b != 0; break;
  case IR_E_OR: v = a != 0 || b != 0; break;
  default: v = NAN; break;
  }
  *r = isint ? v + 0.0 : v;
  return true;
}

static inline double apply_cast(ir_dtype_t t, double a) {
  if (t == IR_BOOL) return a != 0 ? 1 : 0;
  if (ir_dtype_is_int(t)) return trunc(a) + 0.0; /* toward zero; NaN stays NaN */
  return a;
}

static inline double apply_un(int op, ir_dtype_t t, double a) {
  switch (op) {
  case IR_E_NOT: return a == 0 ? 1 : 0;
  case IR_E_NEG: return intlike(t) ? -a + 0.0 : -a;
  case IR_E_CAST: return apply_cast(t, a);
  default: return NAN;
  }
}

static inline double apply_call(int fn, double a, double b) {
  switch (fn) {
  case IR_FN_EXP: return exp(a);
  case IR_FN_LOG: return log(a);
  case IR_FN_SQRT: return sqrt(a);
  case IR_FN_TANH: return tanh(a);
  case IR_FN_ABS: return fabs(a);
  case IR_FN_POW: return pow(a, b);
  default: return NAN;
  }
}

static inline bool in_range(double v, int64_t extent) { return v >= 0 && v < (double)extent; }

/* ======================================================================
 * Shapes of accesses (both paths and the thread split look at them)
 * ====================================================================== */

static inline bool same_indices(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

/* Is e a load of the element that st stores? */
static inline bool is_self_load(const ir_expr_t *e, const ir_stmt_t *st) {
  return e->kind == IR_E_LOAD && e->u.load.buf == st->u.store.buf &&
         e->u.load.n == st->u.store.n &&
         same_indices(e->u.load.idx, st->u.store.idx, st->u.store.n);
}

/* ======================================================================
 * Calls between the files
 * ====================================================================== */

/* eval_data.c: element count of a buffer (-1 when it does not fit in int64);
 * its shape as "2, 3, 4" for messages. */
int64_t ev_numel_checked(const ir_buffer_t *b);
void ev_shape_text(const ir_buffer_t *b, char *out, size_t cap);

/* eval_scalar.c: runs a statement one iteration at a time; runs iterations
 * [lo, hi) of loop l with its variable in *slot; the error for a variable
 * whose id is outside the function's. */
int ev_stmt(ev_t *ev, const ir_stmt_t *s);
int ev_loop_range(ev_t *ev, const ir_loop_t *l, double *slot, int64_t lo, int64_t hi);
int ev_bad_var(ev_t *ev, const ir_var_t *v);

/* eval_vector.c: runs iterations [lo, hi) of loop s, lane-wise where the
 * fast path applies (else, and for chunks it gives up on, through
 * ev_loop_range); frees a program of ev->progs (any entry, NULL included). */
int ev_loop_span(ev_t *ev, const ir_stmt_t *s, int64_t lo, int64_t hi);
void ev_prog_free(vprog_t *p);

/* eval.c: runs a loop statement: split over threads when it is an
 * independent outermost loop with enough work, else through ev_loop_span. */
int ev_loop(ev_t *ev, const ir_stmt_t *s);

#endif
