/* eval.c — the reference evaluator: deterministic parameter data, a double
 * precision interpreter for any well-formed IR, error metrics and op counts.
 *
 * The interpreter walks the statement tree one iteration at a time (the
 * scalar path).  Where a loop heads a perfect nest that ends in one compute
 * block, it may instead run lane-wise (the fast path): the block is compiled
 * once into a linear program that evaluates up to EV_LANES iterations of the
 * loop at a time, every register classified as uniform (same for all lanes),
 * affine in the lane (integer base + stride * lane) or varying (one value per
 * lane), with lane masks for predicates and select arms.  Results are written
 * back by folding into one element in loop order (a reduction along the
 * innermost loop) or by scattering to distinct elements (lanes over an outer
 * loop run every iteration of the loops inside it in order; each lane owns
 * its element, so each element sees exactly the scalar path's sequence of
 * updates).  A chunk that fits neither pattern, or that meets an error, is
 * undone and redone by the scalar path: both paths agree bit for bit and
 * report the same errors. */
#include "ir.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ======================================================================
 * Parameter data
 * ====================================================================== */

/* Element count of a buffer, or -1 when it does not fit in int64. */
static int64_t numel_checked(const ir_buffer_t *b) {
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++) {
    if (b->shape[i] < 1 || n > INT64_MAX / b->shape[i]) return -1;
    n *= b->shape[i];
  }
  return n;
}

static void shape_text(const ir_buffer_t *b, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < b->ndim && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? ", " : "", (long long)b->shape[i]);
}

static double round_to_dtype(ir_dtype_t t, double x) {
  switch (t) {
  case IR_FLOAT16: return tn_half_to_float(tn_float_to_half((float)x));
  case IR_BFLOAT16: return tn_bf16_to_float(tn_float_to_bf16((float)x));
  case IR_FLOAT32: return (double)(float)x;
  default: return x;
  }
}

/* Uniform in [lo, hi) and representable in t: values that rounding moved out
 * of the interval are drawn again. */
static double draw_float(tn_rng_t *r, ir_dtype_t t, double lo, double hi) {
  for (int tries = 0; tries < 64; tries++) {
    double x = round_to_dtype(t, lo + (hi - lo) * tn_rng_double(r));
    if (x >= lo && x < hi) return x;
  }
  return round_to_dtype(t, lo);
}

/* Fills an input from its own stream: the values depend only on the seed and
 * the buffer's name (so adding a parameter does not change the others). */
static void fill_input(const ir_buffer_t *b, uint64_t seed, double *v, int64_t n) {
  tn_rng_t r;
  tn_rng_seed(&r, tn_fnv1a_str(tn_fnv1a_u64(TN_FNV_INIT, seed), b->name));
  if (ir_dtype_is_float(b->dtype)) {
    for (int64_t i = 0; i < n; i++) v[i] = draw_float(&r, b->dtype, b->init_lo, b->init_hi);
    return;
  }
  if (b->dtype == IR_BOOL) {
    for (int64_t i = 0; i < n; i++) v[i] = (double)tn_rng_below(&r, 2);
    return;
  }
  const double lim = 0x1p53;
  double lo = fmin(fmax(ceil(b->init_lo), -lim), lim), hi = fmin(fmax(ceil(b->init_hi), -lim), lim);
  uint64_t span = hi > lo ? (uint64_t)(hi - lo) : 0;
  for (int64_t i = 0; i < n; i++) v[i] = span ? lo + (double)tn_rng_below(&r, span) : lo;
}

int ir_data_new(const ir_func_t *f, uint64_t seed, size_t max_bytes, ir_data_t **out,
                tn_err_t *err) {
  *out = NULL;
  ir_data_t *d = tn_xcalloc(1, sizeof *d);
  d->n = f->nparams;
  d->vals = tn_xcalloc((size_t)d->n, sizeof(double *));
  d->sizes = tn_xcalloc((size_t)d->n, sizeof(int64_t));
  size_t used = 0;
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    int64_t n = numel_checked(b);
    char shape[256];
    shape_text(b, shape, sizeof shape);
    if (n < 0 || (uint64_t)n > (max_bytes - used) / sizeof(double)) {
      ir_data_free(d);
      return tn_err_set(err, TN_ENOMEM,
                        "data for parameter \"%s\" (%s[%s]) needs %.1f MiB as doubles; with %.1f "
                        "MiB already allocated that exceeds the data limit of %.1f MiB",
                        b->name, ir_dtype_name(b->dtype), shape,
                        n < 0 ? INFINITY : (double)n * 8 / 1048576.0, (double)used / 1048576.0,
                        (double)max_bytes / 1048576.0);
    }
    d->vals[i] = malloc((size_t)n * sizeof(double));
    if (!d->vals[i]) {
      ir_data_free(d);
      return tn_err_set(err, TN_ENOMEM, "cannot allocate %.1f MiB for parameter \"%s\"",
                        (double)n * 8 / 1048576.0, b->name);
    }
    d->sizes[i] = n;
    used += (size_t)n * sizeof(double);
    if (b->role == IR_BUF_INPUT)
      fill_input(b, seed, d->vals[i], n);
    else
      for (int64_t k = 0; k < n; k++) d->vals[i][k] = NAN;
  }
  *out = d;
  return TN_OK;
}

void ir_data_free(ir_data_t *d) {
  if (!d) return;
  for (int i = 0; i < d->n; i++) free(d->vals[i]);
  free(d->vals);
  free(d->sizes);
  free(d);
}

/* ======================================================================
 * Metrics
 * ====================================================================== */

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

static bool intlike(ir_dtype_t t) { return t == IR_BOOL || t == IR_INT32 || t == IR_INT64; }

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

static double stmt_flops(const ir_stmt_t *s, double times) {
  if (!s) return 0;
  double n = 0;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) n += stmt_flops(s->u.seq.items[i], times);
    return n;
  case IR_S_LOOP: return stmt_flops(s->u.loop.body, times * (double)s->u.loop.extent);
  case IR_S_BLOCK: return stmt_flops(s->u.block.body, times); /* init is not counted */
  case IR_S_STORE: return times * value_flops(s->u.store.value);
  }
  return 0;
}

double ir_func_flops(const ir_func_t *f) { return stmt_flops(f->root, 1); }

double ir_func_bytes(const ir_func_t *f) {
  double n = 0;
  for (int i = 0; i < f->nparams; i++)
    n += (double)ir_buffer_numel(f->params[i]) * ir_dtype_bytes(f->params[i]->dtype);
  return n;
}

/* ======================================================================
 * Operations on values, shared by both paths so that they agree bit for bit.
 * Integer results are canonicalised (+ 0.0 turns -0 into +0) because the
 * affine lane form cannot reproduce the sign of a zero.
 * ====================================================================== */

static inline double v_max(double a, double b) {
  if (a != a || b != b) return a + b; /* NaN in, NaN out */
  return a > b ? a : b;
}

static inline double v_min(double a, double b) {
  if (a != a || b != b) return a + b;
  return a < b ? a : b;
}

static bool can_fail(int op, bool isint) {
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
 * Evaluation state
 * ====================================================================== */

#define EV_LANES 256     /* iterations per chunk of the fast path */
/* Doubles per register: not a multiple of 4 KiB apart, where loads would
 * wait on unrelated stores. */
#define EV_REG_STRIDE (EV_LANES + 24)
#define EV_MAX_INNER 8    /* loops of a perfect nest run under one lane loop */
#define EV_NEST_MIN 16    /* smallest lane loop that gets inner loops */

typedef struct ev_buf {
  const ir_buffer_t *b;
  double *data; /* NULL: neither a parameter nor allocated */
  int64_t rstride[IR_MAX_DIMS];
  bool owned;
} ev_buf_t;

typedef struct vprog vprog_t;

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
  int nthreads; /* for independent outermost loops (ev_loop_parallel) */
} ev_t;

static int ev_stmt(ev_t *ev, const ir_stmt_t *s);

static double *var_slot(ev_t *ev, const ir_var_t *v) {
  return v->id >= 0 && v->id < ev->nvars ? &ev->vars[v->id] : NULL;
}

static int bad_var(ev_t *ev, const ir_var_t *v) {
  return tn_err_set(ev->err, TN_EINVAL,
                    "block \"%s\": variable %s has id %d, outside the function's %d variables",
                    ev->block, v->name, v->id, ev->nvars);
}

/* The buffer's storage, or NULL with an error naming the access. */
static const ev_buf_t *buf_of(ev_t *ev, const ir_buffer_t *b, int n, const char *what) {
  if (b->id < 0 || b->id >= ev->nbufs || !ev->bufs[b->id].data) {
    tn_err_set(ev->err, TN_EINVAL,
               "block \"%s\": %s of buffer \"%s\", which is neither a parameter nor allocated "
               "by any block",
               ev->block, what, b->name);
    return NULL;
  }
  if (ev->bufs[b->id].b != b && strcmp(ev->bufs[b->id].b->name, b->name) != 0) {
    tn_err_set(ev->err, TN_EINVAL, "block \"%s\": buffers \"%s\" and \"%s\" share id %d",
               ev->block, b->name, ev->bufs[b->id].b->name, b->id);
    return NULL;
  }
  if (n != b->ndim) {
    tn_err_set(ev->err, TN_EINVAL,
               "block \"%s\": %s of \"%s\" has %d indices, the buffer has %d dimensions", ev->block,
               what, b->name, n, b->ndim);
    return NULL;
  }
  return &ev->bufs[b->id];
}

static int index_error(ev_t *ev, const char *what, const ir_buffer_t *b, const double *iv) {
  char idx[256], shape[256];
  size_t len = 0;
  idx[0] = 0;
  for (int d = 0; d < b->ndim && len < sizeof idx; d++)
    len += (size_t)snprintf(idx + len, sizeof idx - len, "%s%.17g", d ? ", " : "", iv[d]);
  shape_text(b, shape, sizeof shape);
  return tn_err_set(ev->err, TN_ERANGE, "block \"%s\": %s %s[%s] is out of bounds (shape [%s])",
                    ev->block, what, b->name, idx, shape);
}

/* ======================================================================
 * Scalar path: the tree walker
 * ====================================================================== */

static int ev_expr(ev_t *ev, const ir_expr_t *e, double *out);

/* Evaluates indices, checks them and returns the element's address. */
static int ev_addr(ev_t *ev, const char *what, const ir_buffer_t *b, ir_expr_t *const *idx, int n,
                   double **out) {
  const ev_buf_t *eb = buf_of(ev, b, n, what);
  if (!eb) return ev->err ? ev->err->code : TN_EINVAL;
  double iv[IR_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    int rc = ev_expr(ev, idx[d], &iv[d]);
    if (rc) return rc;
  }
  int64_t off = 0;
  for (int d = 0; d < n; d++) {
    if (!in_range(iv[d], b->shape[d])) return index_error(ev, what, b, iv);
    off += (int64_t)iv[d] * eb->rstride[d];
  }
  *out = eb->data + off;
  return TN_OK;
}

static const char *const op_names[] = {
    [IR_E_DIV] = "div", [IR_E_FLOORDIV] = "floordiv", [IR_E_FLOORMOD] = "floormod"};

static int ev_binary(ev_t *ev, const ir_expr_t *e, double *out) {
  double a, b;
  int rc = ev_expr(ev, e->u.bin.a, &a);
  if (!rc) rc = ev_expr(ev, e->u.bin.b, &b);
  if (rc) return rc;
  if (!apply_bin(e->kind, intlike(e->dtype), a, b, out))
    return tn_err_set(ev->err, TN_EINVAL,
                      "block \"%s\": integer division by zero in %s(%.17g, %.17g)", ev->block,
                      op_names[e->kind], a, b);
  return TN_OK;
}

static int ev_expr(ev_t *ev, const ir_expr_t *e, double *out) {
  double a, b = 0;
  int rc;
  switch (e->kind) {
  case IR_E_INT: *out = (double)e->u.ival; return TN_OK;
  case IR_E_FLOAT: *out = e->u.fval; return TN_OK;
  case IR_E_VAR: {
    double *slot = var_slot(ev, e->u.var);
    if (!slot) return bad_var(ev, e->u.var);
    *out = *slot;
    return TN_OK;
  }
  case IR_E_LOAD: {
    double *p;
    if ((rc = ev_addr(ev, "load", e->u.load.buf, e->u.load.idx, e->u.load.n, &p))) return rc;
    *out = *p;
    return TN_OK;
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    if ((rc = ev_expr(ev, e->u.un, &a))) return rc;
    *out = apply_un(e->kind, e->dtype, a);
    return TN_OK;
  case IR_E_SELECT:
    if ((rc = ev_expr(ev, e->u.sel.cond, &a))) return rc;
    return ev_expr(ev, a != 0 ? e->u.sel.t : e->u.sel.f, out);
  case IR_E_CALL:
    if ((rc = ev_expr(ev, e->u.call.args[0], &a))) return rc;
    if (e->u.call.n > 1 && (rc = ev_expr(ev, e->u.call.args[1], &b))) return rc;
    *out = apply_call(e->u.call.fn, a, b);
    return TN_OK;
  default:
    if (ir_expr_is_binary(e->kind)) return ev_binary(ev, e, out);
    return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": unknown expression kind %d", ev->block,
                      (int)e->kind);
  }
}

static int ev_store(ev_t *ev, const ir_stmt_t *s) {
  double v, *p;
  int rc = ev_expr(ev, s->u.store.value, &v);
  if (!rc) rc = ev_addr(ev, "store", s->u.store.buf, s->u.store.idx, s->u.store.n, &p);
  if (rc) return rc;
  *p = v;
  return TN_OK;
}

/* One block instance: bind iterators, test the predicate, init, body. */
static int ev_block_instance(ev_t *ev, const ir_block_t *b) {
  bool at_init = true;
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    double v, *slot = var_slot(ev, it->var);
    if (!slot) return bad_var(ev, it->var);
    if (!it->binding)
      return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": iterator %s has no binding", b->name,
                        it->var->name);
    int rc = ev_expr(ev, it->binding, &v);
    if (rc) return rc;
    *slot = v;
    if (it->kind == IR_ITER_REDUCE && v != 0) at_init = false;
  }
  if (b->predicate) {
    double p;
    int rc = ev_expr(ev, b->predicate, &p);
    if (rc || p == 0) return rc;
  }
  if (b->body && b->body->kind == IR_S_STORE) ev->st.scalar_iters++;
  if (b->init && at_init) {
    int rc = ev_stmt(ev, b->init);
    if (rc) return rc;
  }
  return ev_stmt(ev, b->body);
}

static int ev_block(ev_t *ev, const ir_block_t *b) {
  const char *outer = ev->block;
  ev->block = b->name;
  int rc = ev_block_instance(ev, b);
  ev->block = outer;
  return rc;
}

static int ev_loop_range(ev_t *ev, const ir_loop_t *l, double *slot, int64_t lo, int64_t hi) {
  for (int64_t x = lo; x < hi; x++) {
    *slot = (double)x;
    int rc = ev_stmt(ev, l->body);
    if (rc) return rc;
  }
  return TN_OK;
}

static int ev_loop(ev_t *ev, const ir_stmt_t *s);

static int ev_stmt(ev_t *ev, const ir_stmt_t *s) {
  if (!s) return TN_OK;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) {
      int rc = ev_stmt(ev, s->u.seq.items[i]);
      if (rc) return rc;
    }
    return TN_OK;
  case IR_S_LOOP: return ev_loop(ev, s);
  case IR_S_BLOCK: return ev_block(ev, &s->u.block);
  case IR_S_STORE: return ev_store(ev, s);
  }
  return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": unknown statement kind %d", ev->block,
                    (int)s->kind);
}

/* ======================================================================
 * Fast path: block programs
 * ====================================================================== */

enum { VC_U, VC_A, VC_V }; /* uniform, affine in the lane, varying */
enum { VOP_CONST = IR_E__COUNT, VOP_OUTER, VOP_LANE, VOP_MASK, VOP_MASKZ };
enum { VM_FOLD, VM_SCATTER };

/* One instruction; it defines the register with its own index. */
typedef struct vins {
  int op;            /* ir_expr_kind_t or VOP_* */
  uint8_t cls;       /* VC_* */
  bool isint;        /* integer semantics */
  bool lanes;        /* a lane-wise consumer reads this register's lanes */
  bool self;         /* load of the element the block stores (scatter mode) */
  ir_dtype_t dtype;  /* NOT/NEG/CAST */
  int fn;            /* CALL */
  int mask;          /* mask slot: the lanes on which this instruction counts */
  int a, b, c;       /* operands (SELECT: cond, t, f); MASK: a = cond, c = negate */
  int mdst;          /* MASK/MASKZ: mask slot written */
  int buf, arg0, n;  /* LOAD: buffer id, index registers args[arg0 .. arg0 + n) */
  double k;          /* CONST: value; OUTER: variable id */
} vins_t;

struct vprog {
  const ir_stmt_t *loop;      /* the lane loop */
  const ir_stmt_t *inner[EV_MAX_INNER]; /* perfect nest below it, outermost first */
  int ninner;
  vins_t *ins;
  int n, cap;
  int *args;
  int nargs, argcap;
  int nmasks;
  int mode;                   /* VM_* */
  int store_buf, store_arg0, store_n;
  int value;                  /* register stored (scatter) or folded (fold) */
  int fold_op;
  bool fold_left, fold_isint; /* the stored element is the left operand */
  int pred_mask, init_mask, init_val; /* init_val < 0: no init */
  /* per-chunk state */
  double *ru, *rs;            /* uniform value or affine base; affine stride */
  const double **rv;          /* lanes */
  double *own;                /* n * EV_REG_STRIDE */
  uint8_t *mact;              /* nmasks * EV_LANES */
  int *mcnt;
  int64_t *offs;
  /* nest mode: elements written in the current chunk, to undo before a redo */
  uint8_t *saved;
  int64_t *undo_off;
  double *undo_val;
  int nsaved;
};

static vprog_t prog_none; /* cache marker: loop not eligible */

typedef struct vcomp {
  ev_t *ev;
  vprog_t *p;
  const ir_block_t *blk;
  const ir_stmt_t *store;
  int loopvar; /* id */
  int lane_reg;
  int *iter_reg;
  bool allow_self;
  bool bad;
} vcomp_t;

static int emit(vcomp_t *c, vins_t in) {
  vprog_t *p = c->p;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 32;
    p->ins = tn_xrealloc(p->ins, sizeof(vins_t) * (size_t)p->cap);
  }
  p->ins[p->n] = in;
  return p->n++;
}

static int push_arg(vcomp_t *c, int reg) {
  vprog_t *p = c->p;
  if (p->nargs == p->argcap) {
    p->argcap = p->argcap ? 2 * p->argcap : 16;
    p->args = tn_xrealloc(p->args, sizeof(int) * (size_t)p->argcap);
  }
  p->args[p->nargs] = reg;
  return p->nargs++;
}

static int cls_of(const vcomp_t *c, int reg) { return c->p->ins[reg].cls; }

static int emit_mask(vcomp_t *c, int op, int parent, int cond, bool negate) {
  vins_t in = {.op = op, .cls = VC_U, .mask = parent, .a = cond, .c = negate,
               .mdst = c->p->nmasks++};
  emit(c, in);
  return in.mdst;
}

static int cexpr(vcomp_t *c, const ir_expr_t *e, int mask);

static int cvar(vcomp_t *c, const ir_var_t *v) {
  if (v->id == c->loopvar) {
    if (c->lane_reg < 0)
      c->lane_reg = emit(c, (vins_t){.op = VOP_LANE, .cls = VC_A, .isint = true});
    return c->lane_reg;
  }
  for (int i = 0; i < c->blk->niters; i++)
    if (c->blk->iters[i].var->id == v->id) {
      if (c->iter_reg[i] < 0) c->bad = true; /* a binding that uses an iterator */
      return c->iter_reg[i] < 0 ? 0 : c->iter_reg[i];
    }
  if (v->id < 0 || v->id >= c->ev->nvars) c->bad = true;
  return emit(c, (vins_t){.op = VOP_OUTER, .cls = VC_U, .isint = true, .k = v->id});
}

static bool same_indices(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

static bool usable_buf(vcomp_t *c, const ir_buffer_t *b, int n) {
  ev_t *ev = c->ev;
  return b->id >= 0 && b->id < ev->nbufs && ev->bufs[b->id].data && ev->bufs[b->id].b == b &&
         n == b->ndim;
}

static int cload(vcomp_t *c, const ir_expr_t *e, int mask) {
  const ir_buffer_t *b = e->u.load.buf;
  const ir_stmt_t *st = c->store;
  bool self = false;
  if (!usable_buf(c, b, e->u.load.n)) c->bad = true;
  if (b == st->u.store.buf) {
    self = c->allow_self && same_indices(e->u.load.idx, st->u.store.idx, st->u.store.n);
    if (!self) c->bad = true;
  }
  if (c->bad) return 0;
  int regs[IR_MAX_DIMS], cls = VC_U;
  for (int d = 0; d < e->u.load.n; d++) {
    regs[d] = cexpr(c, e->u.load.idx[d], mask);
    cls = TN_MAX(cls, cls_of(c, regs[d]));
  }
  int arg0 = c->p->nargs;
  for (int d = 0; d < e->u.load.n; d++) push_arg(c, regs[d]);
  return emit(c, (vins_t){.op = IR_E_LOAD, .cls = cls == VC_U ? VC_U : VC_V, .self = self,
                          .mask = mask, .buf = b->id, .arg0 = arg0, .n = e->u.load.n});
}

static int cselect(vcomp_t *c, const ir_expr_t *e, int mask) {
  int cond = cexpr(c, e->u.sel.cond, mask);
  int mt = emit_mask(c, VOP_MASK, mask, cond, false);
  int mf = emit_mask(c, VOP_MASK, mask, cond, true);
  int t = cexpr(c, e->u.sel.t, mt), f = cexpr(c, e->u.sel.f, mf);
  bool uni = cls_of(c, cond) == VC_U && cls_of(c, t) == VC_U && cls_of(c, f) == VC_U;
  return emit(c, (vins_t){.op = IR_E_SELECT, .cls = uni ? VC_U : VC_V, .mask = mask, .a = cond,
                          .b = t, .c = f});
}

/* Class of a binary result: integer +, - and * by a uniform keep the affine form. */
static int bin_class(int op, bool isint, int ca, int cb) {
  if (ca == VC_U && cb == VC_U) return VC_U;
  if (!isint || ca == VC_V || cb == VC_V) return VC_V;
  if (op == IR_E_ADD || op == IR_E_SUB) return VC_A;
  if (op == IR_E_MUL && (ca == VC_U || cb == VC_U)) return VC_A;
  return VC_V;
}

/* The float operations with tight loops, where a uniform operand is used as
 * a scalar instead of being spread over lanes. */
static bool hot_float_op(const vins_t *in) {
  return !in->isint && (in->op == IR_E_ADD || in->op == IR_E_SUB || in->op == IR_E_MUL ||
                        in->op == IR_E_DIV || in->op == IR_E_MIN || in->op == IR_E_MAX);
}

static int cexpr(vcomp_t *c, const ir_expr_t *e, int mask) {
  if (c->bad) return 0;
  switch (e->kind) {
  case IR_E_INT: return emit(c, (vins_t){.op = VOP_CONST, .cls = VC_U, .k = (double)e->u.ival});
  case IR_E_FLOAT: return emit(c, (vins_t){.op = VOP_CONST, .cls = VC_U, .k = e->u.fval});
  case IR_E_VAR: return cvar(c, e->u.var);
  case IR_E_LOAD: return cload(c, e, mask);
  case IR_E_SELECT: return cselect(c, e, mask);
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: {
    int a = cexpr(c, e->u.un, mask), ca = cls_of(c, a);
    bool isint = intlike(e->dtype);
    int cls = ca == VC_U ? VC_U : (ca == VC_A && e->kind == IR_E_NEG && isint) ? VC_A : VC_V;
    return emit(c, (vins_t){.op = e->kind, .cls = cls, .isint = isint, .dtype = e->dtype,
                            .mask = mask, .a = a});
  }
  case IR_E_CALL: {
    int a = cexpr(c, e->u.call.args[0], mask);
    int b = e->u.call.n > 1 ? cexpr(c, e->u.call.args[1], mask) : a;
    int cls = cls_of(c, a) == VC_U && cls_of(c, b) == VC_U ? VC_U : VC_V;
    return emit(c, (vins_t){.op = IR_E_CALL, .cls = cls, .fn = e->u.call.fn, .mask = mask,
                            .a = a, .b = b});
  }
  default: {
    if (!ir_expr_is_binary(e->kind)) {
      c->bad = true;
      return 0;
    }
    int a = cexpr(c, e->u.bin.a, mask), b = cexpr(c, e->u.bin.b, mask);
    bool isint = intlike(e->dtype);
    int cls = bin_class(e->kind, isint, cls_of(c, a), cls_of(c, b));
    return emit(c, (vins_t){.op = e->kind, .cls = cls, .isint = isint, .mask = mask, .a = a,
                            .b = b});
  }
  }
}

static const ir_stmt_t *strip_seq(const ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

/* The compute block at the bottom of a perfect loop nest below `loop` (each
 * loop's body just the next loop, through one-item sequences): a single
 * store with an optional init.  Fills the loops in between, outermost first. */
static const ir_block_t *nest_leaf(const ir_stmt_t *loop, const ir_stmt_t **inner, int *ninner) {
  const ir_stmt_t *s = strip_seq(loop->u.loop.body);
  *ninner = 0;
  while (s && s->kind == IR_S_LOOP) {
    if (*ninner == EV_MAX_INNER) return NULL;
    inner[(*ninner)++] = s;
    s = strip_seq(s->u.loop.body);
  }
  if (!s || s->kind != IR_S_BLOCK) return NULL;
  const ir_block_t *b = &s->u.block;
  if (!b->body || b->body->kind != IR_S_STORE) return NULL;
  if (b->init && b->init->kind != IR_S_STORE) return NULL;
  return b;
}

static bool is_self_load(const ir_expr_t *e, const ir_stmt_t *st) {
  return e->kind == IR_E_LOAD && e->u.load.buf == st->u.store.buf &&
         e->u.load.n == st->u.store.n &&
         same_indices(e->u.load.idx, st->u.store.idx, st->u.store.n);
}

/* Does e load an element of st's buffer other than the one st stores? */
static bool reads_other_element(const ir_expr_t *e, const ir_stmt_t *st) {
  if (!e) return false;
  switch (e->kind) {
  case IR_E_LOAD:
    if (e->u.load.buf == st->u.store.buf && !is_self_load(e, st)) return true;
    for (int i = 0; i < e->u.load.n; i++)
      if (reads_other_element(e->u.load.idx[i], st)) return true;
    return false;
  case IR_E_NOT:
  case IR_E_NEG:
  case IR_E_CAST: return reads_other_element(e->u.un, st);
  case IR_E_SELECT:
    return reads_other_element(e->u.sel.cond, st) || reads_other_element(e->u.sel.t, st) ||
           reads_other_element(e->u.sel.f, st);
  case IR_E_CALL:
    for (int i = 0; i < e->u.call.n; i++)
      if (reads_other_element(e->u.call.args[i], st)) return true;
    return false;
  default:
    return ir_expr_is_binary(e->kind) &&
           (reads_other_element(e->u.bin.a, st) || reads_other_element(e->u.bin.b, st));
  }
}

/* Fold mode: the value must be `C[idx] op rest` or `rest op C[idx]`. */
static void compile_fold(vcomp_t *c) {
  const ir_expr_t *v = c->store->u.store.value;
  vprog_t *p = c->p;
  if (!ir_expr_is_binary(v->kind)) {
    c->bad = true;
    return;
  }
  p->mode = VM_FOLD;
  p->fold_op = v->kind;
  p->fold_isint = intlike(v->dtype);
  p->fold_left = is_self_load(v->u.bin.a, c->store);
  if (!p->fold_left && !is_self_load(v->u.bin.b, c->store)) {
    c->bad = true;
    return;
  }
  p->value = cexpr(c, p->fold_left ? v->u.bin.b : v->u.bin.a, p->pred_mask);
}

static void compile_init(vcomp_t *c) {
  const ir_block_t *b = c->blk;
  const ir_stmt_t *init = b->init, *st = c->store;
  vprog_t *p = c->p;
  p->init_val = -1;
  if (!init) return;
  if (init->u.store.buf != st->u.store.buf || init->u.store.n != st->u.store.n ||
      !same_indices(init->u.store.idx, st->u.store.idx, st->u.store.n)) {
    c->bad = true;
    return;
  }
  int m = p->pred_mask;
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE) m = emit_mask(c, VOP_MASKZ, m, c->iter_reg[i], false);
  p->init_mask = m;
  p->init_val = cexpr(c, init->u.store.value, m);
}

static void need_lanes(vprog_t *p, int reg) {
  if (reg >= 0) p->ins[reg].lanes = true;
}

static void mark_lanes(vprog_t *p) {
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    if (in->op == VOP_MASK || in->op == VOP_MASKZ) {
      if (p->ins[in->a].cls == VC_V) need_lanes(p, in->a);
    } else if (in->cls == VC_V && in->op == IR_E_SELECT) {
      if (p->ins[in->a].cls != VC_U) need_lanes(p, in->a);
      need_lanes(p, in->b);
      need_lanes(p, in->c);
    } else if (in->cls == VC_V && hot_float_op(in)) {
      if (p->ins[in->a].cls != VC_U) need_lanes(p, in->a);
      if (p->ins[in->b].cls != VC_U) need_lanes(p, in->b);
    } else if (in->cls == VC_V && in->op != IR_E_LOAD) {
      need_lanes(p, in->a);
      if (ir_expr_is_binary(in->op) || in->op == IR_E_CALL) need_lanes(p, in->b);
    }
  }
  need_lanes(p, p->value); /* the init value is read through lane_val */
}

static void prog_free(vprog_t *p) {
  if (!p || p == &prog_none) return;
  free(p->ins);
  free(p->args);
  free(p->ru);
  free(p->rs);
  free(p->rv);
  free(p->own);
  free(p->mact);
  free(p->mcnt);
  free(p->offs);
  free(p->saved);
  free(p->undo_off);
  free(p->undo_val);
  free(p);
}

static void prog_alloc_state(vprog_t *p) {
  p->ru = tn_xcalloc((size_t)p->n, sizeof(double));
  p->rs = tn_xcalloc((size_t)p->n, sizeof(double));
  p->rv = tn_xcalloc((size_t)p->n, sizeof(double *));
  p->own = tn_xcalloc((size_t)p->n * EV_REG_STRIDE, sizeof(double));
  p->mact = tn_xcalloc((size_t)p->nmasks * EV_LANES, 1);
  p->mcnt = tn_xcalloc((size_t)p->nmasks, sizeof(int));
  p->offs = tn_xcalloc(EV_LANES, sizeof(int64_t));
  p->saved = tn_xcalloc(EV_LANES, 1);
  p->undo_off = tn_xcalloc(EV_LANES, sizeof(int64_t));
  p->undo_val = tn_xcalloc(EV_LANES, sizeof(double));
  for (int i = 0; i < p->n; i++) p->rv[i] = p->own + (size_t)i * EV_REG_STRIDE;
}

/* Whether an expression (through the block's iterator bindings) uses a loop
 * variable of the nest below the lane loop. */
static bool uses_inner(const vcomp_t *c, const ir_expr_t *e, int depth) {
  if (!e || depth > 64) return depth > 64;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: return false;
  case IR_E_VAR:
    for (int i = 0; i < c->p->ninner; i++)
      if (c->p->inner[i]->u.loop.var->id == e->u.var->id) return true;
    for (int i = 0; i < c->blk->niters; i++)
      if (c->blk->iters[i].var->id == e->u.var->id)
        return uses_inner(c, c->blk->iters[i].binding, depth + 1);
    return false;
  case IR_E_LOAD:
    for (int i = 0; i < e->u.load.n; i++)
      if (uses_inner(c, e->u.load.idx[i], depth + 1)) return true;
    return false;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: return uses_inner(c, e->u.un, depth + 1);
  case IR_E_SELECT:
    return uses_inner(c, e->u.sel.cond, depth + 1) || uses_inner(c, e->u.sel.t, depth + 1) ||
           uses_inner(c, e->u.sel.f, depth + 1);
  case IR_E_CALL:
    for (int i = 0; i < e->u.call.n; i++)
      if (uses_inner(c, e->u.call.args[i], depth + 1)) return true;
    return false;
  default: return uses_inner(c, e->u.bin.a, depth + 1) || uses_inner(c, e->u.bin.b, depth + 1);
  }
}

/* Store indices; returns their joint class. */
static int compile_store_idx(vcomp_t *c) {
  const ir_stmt_t *st = c->store;
  vprog_t *p = c->p;
  int regs[IR_MAX_DIMS], cls = VC_U;
  if (!usable_buf(c, st->u.store.buf, st->u.store.n)) c->bad = true;
  for (int d = 0; d < st->u.store.n && !c->bad; d++) {
    regs[d] = cexpr(c, st->u.store.idx[d], p->pred_mask);
    cls = TN_MAX(cls, cls_of(c, regs[d]));
    if (p->ninner && uses_inner(c, st->u.store.idx[d], 0)) c->bad = true;
  }
  p->store_buf = st->u.store.buf->id;
  p->store_arg0 = p->nargs;
  p->store_n = st->u.store.n;
  for (int d = 0; d < st->u.store.n && !c->bad; d++) push_arg(c, regs[d]);
  return cls;
}

/* Compiles the block under a lane loop; NULL when the loop must run on the
 * scalar path.  With no loops in between, the block may fold into one element
 * (store independent of the lane) or scatter to distinct elements.  With a
 * nest in between (lanes over an outer loop, the inner loops iterated for
 * each chunk), the store must be affine in the lane and independent of the
 * inner loops, so that lanes own disjoint elements and each element still
 * sees its updates in loop order. */
static vprog_t *vcompile(ev_t *ev, const ir_stmt_t *loop) {
  vprog_t *p = tn_xcalloc(1, sizeof *p);
  const ir_block_t *b = nest_leaf(loop, p->inner, &p->ninner);
  if (!b || (p->ninner && loop->u.loop.extent < EV_NEST_MIN)) {
    free(p);
    return NULL;
  }
  p->loop = loop;
  p->nmasks = 1;
  vcomp_t c = {.ev = ev, .p = p, .blk = b, .store = b->body, .loopvar = loop->u.loop.var->id,
               .lane_reg = -1, .iter_reg = tn_xmalloc(sizeof(int) * (size_t)(b->niters + 1))};
  for (int i = 0; i < p->ninner; i++)
    if (p->inner[i]->u.loop.var->id < 0 || p->inner[i]->u.loop.var->id >= ev->nvars) c.bad = true;
  for (int i = 0; i < b->niters; i++) c.iter_reg[i] = -1;
  for (int i = 0; i < b->niters && !c.bad; i++) {
    if (!b->iters[i].binding) c.bad = true;
    else c.iter_reg[i] = cexpr(&c, b->iters[i].binding, 0);
  }
  if (b->predicate && !c.bad)
    p->pred_mask = emit_mask(&c, VOP_MASK, 0, cexpr(&c, b->predicate, 0), false);
  if (!c.bad) compile_init(&c);
  int cls = c.bad ? VC_U : compile_store_idx(&c);
  if (!c.bad && cls == VC_U && !p->ninner) {
    compile_fold(&c);
  } else if (!c.bad && cls != VC_U && !(p->ninner && cls == VC_V)) {
    p->mode = VM_SCATTER;
    c.allow_self = true;
    p->value = cexpr(&c, b->body->u.store.value, p->pred_mask);
  } else {
    c.bad = true;
  }
  free(c.iter_reg);
  if (c.bad) {
    prog_free(p);
    return NULL;
  }
  mark_lanes(p);
  prog_alloc_state(p);
  return p;
}

/* Loads that gather from scattered addresses: a lane-dependent index in any
 * but the last dimension, or a non-affine one. */
static int strided_loads(const vprog_t *p) {
  int n = 0;
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    if (in->op != IR_E_LOAD || in->cls == VC_U) continue;
    for (int d = 0; d < in->n; d++) {
      int cls = p->ins[p->args[in->arg0 + d]].cls;
      if (cls == VC_V || (cls == VC_A && d < in->n - 1)) {
        n++;
        break;
      }
    }
  }
  return n;
}

static vprog_t *prog_for(ev_t *ev, const ir_stmt_t *s);

/* The program for a lane loop: lanes over an outer loop of a nest avoid the
 * serial fold of the innermost one, unless they gather more scattered data
 * (as B[j, k] does with lanes over j). */
static vprog_t *vchoose(ev_t *ev, const ir_stmt_t *loop) {
  vprog_t *p = vcompile(ev, loop);
  if (!p || !p->ninner) return p;
  vprog_t *leaf = prog_for(ev, p->inner[p->ninner - 1]);
  if (leaf && strided_loads(leaf) < strided_loads(p)) {
    prog_free(p);
    return NULL;
  }
  return p;
}

/* ---- running a program on one chunk ------------------------------------ */

enum { RUN_OK = 0, RUN_SCALAR = 1 }; /* RUN_SCALAR: redo the chunk on the scalar path */

static inline double lane_val(const vprog_t *p, int r, int l) {
  switch (p->ins[r].cls) {
  case VC_U: return p->ru[r];
  case VC_A: return p->ru[r] + p->rs[r] * l;
  default: return p->rv[r][l];
  }
}

static void fill_lanes(vprog_t *p, int i, int L) {
  double *o = p->own + (size_t)i * EV_REG_STRIDE, u = p->ru[i], s = p->rs[i];
  if (p->ins[i].cls == VC_U)
    for (int l = 0; l < L; l++) o[l] = u;
  else
    for (int l = 0; l < L; l++) o[l] = u + s * l;
  p->rv[i] = o;
}

/* Uniform and affine instructions: one value (and a stride) per chunk. */
static int vstep_scalar(ev_t *ev, vprog_t *p, int i, int64_t x0) {
  const vins_t *in = &p->ins[i];
  double *ru = p->ru, *rs = p->rs;
  rs[i] = 0;
  switch (in->op) {
  case VOP_CONST: ru[i] = in->k; break;
  case VOP_OUTER: ru[i] = ev->vars[(int)in->k]; break;
  case VOP_LANE: ru[i] = (double)x0; rs[i] = 1; break;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    ru[i] = apply_un(in->op, in->dtype, ru[in->a]);
    if (in->cls == VC_A) rs[i] = -rs[in->a] + 0.0;
    break;
  case IR_E_SELECT: ru[i] = ru[in->a] != 0 ? ru[in->b] : ru[in->c]; break;
  case IR_E_CALL: ru[i] = apply_call(in->fn, ru[in->a], ru[in->b]); break;
  default:
    if (can_fail(in->op, in->isint) && p->mcnt[in->mask] == 0) {
      ru[i] = 0;
      break;
    }
    if (!apply_bin(in->op, in->isint, ru[in->a], ru[in->b], &ru[i])) return RUN_SCALAR;
    if (in->cls != VC_A) break;
    if (in->op == IR_E_ADD) rs[i] = rs[in->a] + rs[in->b];
    else if (in->op == IR_E_SUB) rs[i] = rs[in->a] - rs[in->b];
    else rs[i] = rs[in->a] * ru[in->b] + ru[in->a] * rs[in->b];
    rs[i] += 0.0;
    break;
  }
  return RUN_OK;
}

/* One loop per operand shape (varying/uniform) for an operator or function. */
#define LANE_LOOPS(EXPR_VV, EXPR_UV, EXPR_VU)                          \
  do {                                                                 \
    if (xu) for (int l = 0; l < L; l++) o[l] = EXPR_UV;                \
    else if (yu) for (int l = 0; l < L; l++) o[l] = EXPR_VU;           \
    else for (int l = 0; l < L; l++) o[l] = EXPR_VV;                   \
  } while (0)
/* Two lanes at a time with SSE2-sized vectors (element-wise IEEE operations,
 * so each lane gets exactly the scalar loop's result), then the tail. */
typedef double v2d_t __attribute__((vector_size(16)));
static inline v2d_t v2_load(const double *p) {
  v2d_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
#define V2_LOOP(EXPR2, EXPR1)                                   \
  do {                                                          \
    int l = 0;                                                  \
    for (; l + 2 <= L; l += 2) {                                \
      v2d_t r_ = EXPR2;                                         \
      memcpy(o + l, &r_, sizeof r_);                            \
    }                                                           \
    for (; l < L; l++) o[l] = EXPR1;                            \
  } while (0)
#define OP_LOOPS(OP)                                                     \
  do {                                                                   \
    v2d_t xv = {xs, xs}, yv = {ys, ys};                                  \
    if (xu) V2_LOOP(xv OP v2_load(y + l), xs OP y[l]);                   \
    else if (yu) V2_LOOP(v2_load(x + l) OP yv, x[l] OP ys);              \
    else V2_LOOP(v2_load(x + l) OP v2_load(y + l), x[l] OP y[l]);        \
  } while (0)
#define FN_LOOPS(FN) LANE_LOOPS(FN(x[l], y[l]), FN(xs, y[l]), FN(x[l], ys))

static void vbin_hot(const vprog_t *p, const vins_t *in, double *o, int L) {
  bool xu = p->ins[in->a].cls == VC_U, yu = p->ins[in->b].cls == VC_U;
  const double *x = p->rv[in->a], *y = p->rv[in->b];
  double xs = p->ru[in->a], ys = p->ru[in->b];
  switch (in->op) {
  case IR_E_ADD: OP_LOOPS(+); break;
  case IR_E_SUB: OP_LOOPS(-); break;
  case IR_E_MUL: OP_LOOPS(*); break;
  case IR_E_DIV: OP_LOOPS(/); break;
  case IR_E_MIN: FN_LOOPS(v_min); break;
  default: FN_LOOPS(v_max); break;
  }
}

static int vbin_lanes(vprog_t *p, const vins_t *in, double *o, int L) {
  if (hot_float_op(in)) {
    vbin_hot(p, in, o, L);
    return RUN_OK;
  }
  const double *x = p->rv[in->a], *y = p->rv[in->b];
  const uint8_t *act = p->mact + (size_t)in->mask * EV_LANES;
  for (int l = 0; l < L; l++)
    if (!apply_bin(in->op, in->isint, x[l], y[l], &o[l])) {
      if (act[l]) return RUN_SCALAR;
      o[l] = 0;
    }
  return RUN_OK;
}

/* Varying instructions other than loads: one value per lane. */
static int vstep_lanes(vprog_t *p, int i, int L) {
  const vins_t *in = &p->ins[i];
  double *o = p->own + (size_t)i * EV_REG_STRIDE;
  const double *x = p->rv[in->a];
  p->rv[i] = o;
  switch (in->op) {
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    for (int l = 0; l < L; l++) o[l] = apply_un(in->op, in->dtype, x[l]);
    return RUN_OK;
  case IR_E_CALL: {
    const double *y = p->rv[in->b];
    for (int l = 0; l < L; l++) o[l] = apply_call(in->fn, x[l], y[l]);
    return RUN_OK;
  }
  case IR_E_SELECT: {
    const double *t = p->rv[in->b], *f = p->rv[in->c];
    if (p->ins[in->a].cls == VC_U)
      p->rv[i] = p->ru[in->a] != 0 ? t : f;
    else
      for (int l = 0; l < L; l++) o[l] = x[l] != 0 ? t[l] : f[l];
    return RUN_OK;
  }
  default: return vbin_lanes(p, in, o, L);
  }
}

/* Whether lane l of register a passes a MASK (non-zero, or zero if negated)
 * or MASKZ (zero) test. */
static void vmask(vprog_t *p, const vins_t *in, int L) {
  const uint8_t *par = p->mact + (size_t)in->mask * EV_LANES;
  uint8_t *dst = p->mact + (size_t)in->mdst * EV_LANES;
  const vins_t *ci = &p->ins[in->a];
  bool zero = in->op == VOP_MASKZ, neg = in->c;
  double u = p->ru[in->a], s = p->rs[in->a];
  if (ci->cls == VC_U || (ci->cls == VC_A && s == 0)) {
    bool on = zero ? u == 0 : (u != 0) != neg;
    if (on) memcpy(dst, par, (size_t)L);
    else memset(dst, 0, (size_t)L);
    p->mcnt[in->mdst] = on ? p->mcnt[in->mask] : 0;
    return;
  }
  int cnt = 0;
  if (ci->cls == VC_A && zero) { /* an affine integer is zero on at most one lane */
    memset(dst, 0, (size_t)L);
    double l = -u / s;
    if (l >= 0 && l < L && l == floor(l) && par[(int)l]) dst[(int)l] = 1, cnt = 1;
    p->mcnt[in->mdst] = cnt;
    return;
  }
  for (int l = 0; l < L; l++) {
    double x = lane_val(p, in->a, l);
    bool on = zero ? x == 0 : (x != 0) != neg;
    dst[l] = par[l] & on;
    cnt += dst[l];
  }
  p->mcnt[in->mdst] = cnt;
}

/* Addresses of a load or store on the active lanes of `mask`: affine (base,
 * stride) when every index is, else per-lane offsets in p->offs.  RUN_SCALAR
 * when an active lane is out of bounds. */
typedef struct vaddr {
  bool affine;
  int64_t base, stride;
} vaddr_t;

static int vaddr(const ev_buf_t *eb, vprog_t *p, const int *idx, int n, int mask, int L,
                 vaddr_t *out) {
  const uint8_t *act = p->mact + (size_t)mask * EV_LANES;
  bool all = p->mcnt[mask] == L;
  double base = 0, stride = 0;
  out->affine = true;
  for (int d = 0; d < n; d++) {
    int r = idx[d], cls = p->ins[r].cls;
    int64_t ext = eb->b->shape[d];
    if (cls == VC_U && !in_range(p->ru[r], ext)) return RUN_SCALAR;
    if (cls == VC_A && all && !(in_range(p->ru[r], ext) && in_range(lane_val(p, r, L - 1), ext)))
      return RUN_SCALAR;
    if (cls == VC_V || (cls == VC_A && !all))
      for (int l = 0; l < L; l++)
        if (act[l] && !in_range(lane_val(p, r, l), ext)) return RUN_SCALAR;
    out->affine &= cls != VC_V;
    base += p->ru[r] * (double)eb->rstride[d];
    stride += p->rs[r] * (double)eb->rstride[d];
  }
  if (out->affine) {
    out->base = (int64_t)base;
    out->stride = (int64_t)stride;
    return RUN_OK;
  }
  for (int l = 0; l < L; l++) {
    int64_t off = 0;
    for (int d = 0; act[l] && d < n; d++) off += (int64_t)lane_val(p, idx[d], l) * eb->rstride[d];
    p->offs[l] = off;
  }
  return RUN_OK;
}

static void init_override(vprog_t *p, double *o, int L) {
  const uint8_t *im = p->mact + (size_t)p->init_mask * EV_LANES;
  for (int l = 0; l < L; l++)
    if (im[l]) o[l] = lane_val(p, p->init_val, l);
}

static int vload(ev_t *ev, vprog_t *p, int i, int L) {
  const vins_t *in = &p->ins[i];
  const ev_buf_t *eb = &ev->bufs[in->buf];
  const int *idx = &p->args[in->arg0];
  int cnt = p->mcnt[in->mask];
  double *o = p->own + (size_t)i * EV_REG_STRIDE;
  p->rv[i] = o;
  if (in->cls == VC_U) {
    p->ru[i] = p->rs[i] = 0;
    if (cnt) {
      int64_t off = 0;
      for (int d = 0; d < in->n; d++) {
        if (!in_range(p->ru[idx[d]], eb->b->shape[d])) return RUN_SCALAR;
        off += (int64_t)p->ru[idx[d]] * eb->rstride[d];
      }
      p->ru[i] = eb->data[off];
    }
    if (in->lanes) fill_lanes(p, i, L);
    return RUN_OK;
  }
  if (!cnt) return RUN_OK;
  vaddr_t a;
  if (vaddr(eb, p, idx, in->n, in->mask, L, &a)) return RUN_SCALAR;
  const uint8_t *act = p->mact + (size_t)in->mask * EV_LANES;
  const double *data = eb->data;
  bool override = in->self && p->init_val >= 0 && p->mcnt[p->init_mask] > 0;
  if (a.affine && cnt == L && a.stride == 1 && !override)
    p->rv[i] = data + a.base; /* read in place: stores come after every load */
  else if (a.affine && cnt == L && a.stride == 1)
    memcpy(o, data + a.base, sizeof(double) * (size_t)L);
  else if (a.affine && cnt == L)
    for (int l = 0; l < L; l++) o[l] = data[a.base + a.stride * l];
  else if (a.affine)
    for (int l = 0; l < L; l++) o[l] = act[l] ? data[a.base + a.stride * l] : 0;
  else
    for (int l = 0; l < L; l++) o[l] = act[l] ? data[p->offs[l]] : 0;
  if (override) init_override(p, o, L);
  return RUN_OK;
}

/* Folds lanes [l0, l1) into *acc in loop order: the common float cases as
 * tight loops, everything else through apply_bin.  False on integer division
 * by zero. */
static bool fold_run(const vprog_t *p, const double *r, int l0, int l1, double *acc) {
  double s = *acc;
  switch (p->fold_isint ? -1 : p->fold_op * 2 + p->fold_left) {
  case IR_E_ADD * 2 + 1: for (int l = l0; l < l1; l++) s = s + r[l]; break;
  case IR_E_ADD * 2: for (int l = l0; l < l1; l++) s = r[l] + s; break;
  case IR_E_MUL * 2 + 1: for (int l = l0; l < l1; l++) s = s * r[l]; break;
  case IR_E_MUL * 2: for (int l = l0; l < l1; l++) s = r[l] * s; break;
  case IR_E_MAX * 2 + 1: for (int l = l0; l < l1; l++) s = v_max(s, r[l]); break;
  case IR_E_MAX * 2: for (int l = l0; l < l1; l++) s = v_max(r[l], s); break;
  case IR_E_MIN * 2 + 1: for (int l = l0; l < l1; l++) s = v_min(s, r[l]); break;
  case IR_E_MIN * 2: for (int l = l0; l < l1; l++) s = v_min(r[l], s); break;
  default:
    for (int l = l0; l < l1; l++) {
      double a = p->fold_left ? s : r[l], b = p->fold_left ? r[l] : s;
      if (!apply_bin(p->fold_op, p->fold_isint, a, b, &s)) return false;
    }
  }
  *acc = s;
  return true;
}

/* Fold mode: the element is read once, updated lane by lane (restarting from
 * the init value on init lanes) and written once. */
static int vfold(ev_t *ev, vprog_t *p, int L) {
  int pm = p->pred_mask;
  if (!p->mcnt[pm]) return RUN_OK;
  const ev_buf_t *eb = &ev->bufs[p->store_buf];
  const int *idx = &p->args[p->store_arg0];
  int64_t off = 0;
  for (int d = 0; d < p->store_n; d++) {
    if (!in_range(p->ru[idx[d]], eb->b->shape[d])) return RUN_SCALAR;
    off += (int64_t)p->ru[idx[d]] * eb->rstride[d];
  }
  double acc = eb->data[off];
  const double *r = p->rv[p->value];
  bool init = p->init_val >= 0 && p->mcnt[p->init_mask] > 0;
  const uint8_t *act = p->mact + (size_t)pm * EV_LANES;
  const uint8_t *im = init ? p->mact + (size_t)p->init_mask * EV_LANES : NULL;
  bool all = p->mcnt[pm] == L;
  for (int l = 0; l < L;) {
    if (!all && !act[l]) {
      l++;
      continue;
    }
    if (im && im[l]) acc = lane_val(p, p->init_val, l);
    int e = l + 1; /* the run of lanes up to the next init lane or inactive lane */
    if (all) {
      const uint8_t *next = im ? memchr(im + e, 1, (size_t)(L - e)) : NULL;
      e = next ? (int)(next - im) : L;
    } else {
      while (e < L && act[e] && !(im && im[e])) e++;
    }
    if (!fold_run(p, r, l, e, &acc)) return RUN_SCALAR;
    l = e;
  }
  eb->data[off] = acc;
  return RUN_OK;
}

/* True when the active lanes' offsets are strictly monotonic (all distinct). */
static bool offsets_distinct(const vprog_t *p, const uint8_t *act, int L) {
  int dir = 0;
  int64_t prev = 0;
  bool have = false;
  for (int l = 0; l < L; l++) {
    if (!act[l]) continue;
    if (have) {
      int d = p->offs[l] > prev ? 1 : p->offs[l] < prev ? -1 : 0;
      if (d == 0 || (dir && d != dir)) return false;
      dir = d;
    }
    prev = p->offs[l];
    have = true;
  }
  return true;
}

/* Nest mode: remembers the old value of each element before its lane first
 * writes it in this chunk. */
static void save_for_undo(vprog_t *p, const double *data, const vaddr_t *a, const uint8_t *act,
                          int L) {
  for (int l = 0; l < L && p->nsaved < L; l++) {
    if (!act[l] || p->saved[l]) continue;
    int64_t off = a->affine ? a->base + a->stride * l : p->offs[l];
    p->saved[l] = 1;
    p->undo_off[p->nsaved] = off;
    p->undo_val[p->nsaved++] = data[off];
  }
}

static void undo_chunk(vprog_t *p, double *data) {
  while (p->nsaved > 0) {
    p->nsaved--;
    data[p->undo_off[p->nsaved]] = p->undo_val[p->nsaved];
  }
}

/* Scatter mode: every active lane writes its own element. */
static int vscatter(ev_t *ev, vprog_t *p, int L) {
  int pm = p->pred_mask, cnt = p->mcnt[pm];
  if (!cnt) return RUN_OK;
  const ev_buf_t *eb = &ev->bufs[p->store_buf];
  const uint8_t *act = p->mact + (size_t)pm * EV_LANES;
  vaddr_t a;
  if (vaddr(eb, p, &p->args[p->store_arg0], p->store_n, pm, L, &a)) return RUN_SCALAR;
  bool distinct = a.affine ? a.stride != 0 || cnt == 1 : offsets_distinct(p, act, L);
  if (p->ninner) distinct = a.affine && (a.stride != 0 || L == 1); /* for every inner iteration */
  if (!distinct) return RUN_SCALAR;
  const double *v = p->rv[p->value];
  double *data = eb->data;
  if (p->ninner) save_for_undo(p, data, &a, act, L);
  if (a.affine && a.stride == 1 && cnt == L)
    memmove(data + a.base, v, sizeof(double) * (size_t)L);
  else if (a.affine)
    for (int l = 0; l < L; l++) {
      if (act[l]) data[a.base + a.stride * l] = v[l];
    }
  else
    for (int l = 0; l < L; l++)
      if (act[l]) data[p->offs[l]] = v[l];
  return RUN_OK;
}

/* Runs iterations [x0, x0 + L) of the program's loop; nothing is written
 * unless the whole chunk succeeds. */
static int vrun(ev_t *ev, vprog_t *p, int64_t x0, int L) {
  memset(p->mact, 1, (size_t)L);
  p->mcnt[0] = L;
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    int rc = RUN_OK;
    if (in->op == VOP_MASK || in->op == VOP_MASKZ)
      vmask(p, in, L);
    else if (in->op == IR_E_LOAD)
      rc = vload(ev, p, i, L);
    else if (in->cls == VC_V)
      rc = vstep_lanes(p, i, L);
    else if (!(rc = vstep_scalar(ev, p, i, x0)) && in->lanes)
      fill_lanes(p, i, L);
    if (rc) return rc;
  }
  return p->mode == VM_FOLD ? vfold(ev, p, L) : vscatter(ev, p, L);
}

static vprog_t *prog_for(ev_t *ev, const ir_stmt_t *s) {
  int uid = s->u.loop.uid;
  if (uid < 0 || uid >= ev->nprogs) return NULL;
  vprog_t *p = ev->progs[uid];
  if (!p) {
    p = vchoose(ev, s);
    ev->progs[uid] = p ? p : &prog_none;
  }
  return p && p != &prog_none && p->loop == s ? p : NULL;
}

/* Runs one chunk of lanes through every iteration of the inner loops, in
 * loop order (an odometer over their variables). */
static int run_chunk(ev_t *ev, vprog_t *p, int64_t x0, int L) {
  double *slot[EV_MAX_INNER];
  int64_t it[EV_MAX_INNER];
  for (int i = 0; i < p->ninner; i++) {
    if (p->inner[i]->u.loop.extent <= 0) return RUN_OK;
    slot[i] = &ev->vars[p->inner[i]->u.loop.var->id];
    *slot[i] = 0;
    it[i] = 0;
  }
  p->nsaved = 0;
  memset(p->saved, 0, EV_LANES);
  for (;;) {
    if (vrun(ev, p, x0, L) != RUN_OK) return RUN_SCALAR;
    ev->st.fast_iters += p->mcnt[p->pred_mask];
    int i = p->ninner - 1;
    while (i >= 0 && ++it[i] == p->inner[i]->u.loop.extent) {
      it[i] = 0;
      *slot[i] = 0;
      i--;
    }
    if (i < 0) return RUN_OK;
    *slot[i] = (double)it[i];
  }
}

/* Iterations [lo, hi) of loop s: lane-wise chunks where the fast path
 * applies, one at a time otherwise. */
static int ev_loop_span(ev_t *ev, const ir_stmt_t *s, int64_t lo, int64_t hi) {
  const ir_loop_t *l = &s->u.loop;
  double *slot = var_slot(ev, l->var);
  if (!slot) return bad_var(ev, l->var);
  vprog_t *p = ev->force_scalar ? NULL : prog_for(ev, s);
  if (!p) return ev_loop_range(ev, l, slot, lo, hi);
  for (int64_t x0 = lo; x0 < hi; x0 += EV_LANES) {
    int L = (int)TN_MIN(EV_LANES, hi - x0);
    if (run_chunk(ev, p, x0, L) == RUN_OK) continue;
    /* put back what the chunk wrote and redo it in loop order, so that
     * values and errors are those of the scalar path */
    undo_chunk(p, ev->bufs[p->store_buf].data);
    ev->st.fallback_chunks++;
    int rc = ev_loop_range(ev, l, slot, x0, x0 + L);
    if (rc) return rc;
  }
  return TN_OK;
}

/* ---- independent outermost loops on several threads ----------------------- */

/* Below this many block instances a nest runs on one thread. */
#define EV_PAR_MIN_WORK (1 << 22)
#define EV_MAX_THREADS 32

/* An outermost loop whose iterations touch disjoint data: its body is a
 * perfect nest around one block, the loop variable is the whole binding of
 * one spatial iterator, that iterator is the whole index of some dimension
 * of the block's one store, and the stored buffer is read only at the
 * stored element (a reduction's update).  Returns the nest's instance count,
 * 0 when the loop does not qualify. */
static int64_t independent_work(const ir_stmt_t *s) {
  const ir_loop_t *l = &s->u.loop;
  int64_t work = l->extent;
  const ir_stmt_t *b = l->body;
  while (b && b->kind == IR_S_LOOP) {
    work = work > INT64_MAX / b->u.loop.extent ? INT64_MAX : work * b->u.loop.extent;
    b = b->u.loop.body;
  }
  if (!b || b->kind != IR_S_BLOCK) return 0;
  const ir_block_t *blk = &b->u.block;
  const ir_stmt_t *st = blk->body;
  if (!st || st->kind != IR_S_STORE || (blk->init && blk->init->kind != IR_S_STORE)) return 0;
  const ir_var_t *it = NULL;
  for (int i = 0; i < blk->niters; i++) {
    const ir_expr_t *e = blk->iters[i].binding;
    if (!e || !ir_expr_uses_var(e, l->var)) continue;
    if (it || blk->iters[i].kind != IR_ITER_SPATIAL || e->kind != IR_E_VAR || e->u.var != l->var) return 0;
    it = blk->iters[i].var;
  }
  if (!it) return 0;
  const ir_stmt_t *stores[2] = {st, blk->init};
  for (int k = 0; k < 2; k++) {
    const ir_stmt_t *x = stores[k];
    if (!x) continue;
    if (x->u.store.buf != st->u.store.buf) return 0;
    bool keyed = false;
    for (int d = 0; d < x->u.store.n; d++)
      keyed |= x->u.store.idx[d]->kind == IR_E_VAR && x->u.store.idx[d]->u.var == it;
    if (!keyed || !same_indices(x->u.store.idx, st->u.store.idx, st->u.store.n)) return 0;
  }
  /* every load of the stored buffer is of the stored element */
  if (reads_other_element(st->u.store.value, st) || (blk->predicate && reads_other_element(blk->predicate, st)) ||
      (blk->init && reads_other_element(blk->init->u.store.value, st)))
    return 0;
  for (int i = 0; i < blk->niters; i++)
    if (blk->iters[i].binding && reads_other_element(blk->iters[i].binding, st)) return 0;
  return work;
}

typedef struct par_job {
  ev_t ev;
  const ir_stmt_t *loop;
  int64_t lo, hi;
  tn_err_t err;
  int rc;
} par_job_t;

static void *par_main(void *arg) {
  par_job_t *j = arg;
  j->rc = ev_loop_span(&j->ev, j->loop, j->lo, j->hi);
  return NULL;
}

/* Splits the loop's range over threads, each with its own variables and
 * fast-path programs; the first error in loop order is the one reported. */
static int ev_loop_parallel(ev_t *ev, const ir_stmt_t *s, int nthreads) {
  int64_t n = s->u.loop.extent;
  par_job_t *jobs = tn_xcalloc((size_t)nthreads, sizeof *jobs);
  pthread_t *th = tn_xcalloc((size_t)nthreads, sizeof *th);
  bool *started = tn_xcalloc((size_t)nthreads, sizeof *started);
  for (int t = 0; t < nthreads; t++) {
    par_job_t *j = &jobs[t];
    j->ev = *ev;
    j->ev.err = &j->err;
    j->ev.st = (ir_eval_stats_t){0};
    j->ev.depth = ev->depth + 1;
    j->ev.vars = tn_xmalloc(sizeof(double) * (size_t)(ev->nvars + 1));
    memcpy(j->ev.vars, ev->vars, sizeof(double) * (size_t)(ev->nvars + 1));
    j->ev.progs = tn_xcalloc((size_t)ev->nprogs + 1, sizeof(vprog_t *));
    j->loop = s;
    j->lo = n * t / nthreads;
    j->hi = n * (t + 1) / nthreads;
    started[t] = t > 0 && pthread_create(&th[t], NULL, par_main, j) == 0;
  }
  par_main(&jobs[0]);
  for (int t = 1; t < nthreads; t++) {
    if (started[t]) pthread_join(th[t], NULL);
    else par_main(&jobs[t]); /* no thread: run it here */
  }
  int rc = TN_OK;
  ev->st.parallel_loops++;
  for (int t = 0; t < nthreads; t++) {
    par_job_t *j = &jobs[t];
    if (!rc && j->rc) {
      rc = j->rc;
      if (ev->err) *ev->err = j->err;
    }
    ev->st.fast_iters += j->ev.st.fast_iters;
    ev->st.scalar_iters += j->ev.st.scalar_iters;
    ev->st.fallback_chunks += j->ev.st.fallback_chunks;
    for (int i = 0; i < ev->nprogs; i++) prog_free(j->ev.progs[i]);
    free(j->ev.progs);
    free(j->ev.vars);
  }
  free(jobs);
  free(th);
  free(started);
  return rc;
}

static int ev_loop(ev_t *ev, const ir_stmt_t *s) {
  int64_t work;
  if (ev->depth == 0 && ev->nthreads > 1 && s->u.loop.extent > 1 && (work = independent_work(s)) >= EV_PAR_MIN_WORK)
    return ev_loop_parallel(ev, s, (int)TN_MIN(ev->nthreads, s->u.loop.extent));
  ev->depth++;
  int rc = ev_loop_span(ev, s, 0, s->u.loop.extent);
  ev->depth--;
  return rc;
}

/* ======================================================================
 * Set-up: parameters, temporaries
 * ====================================================================== */

static int bind_buf(ev_t *ev, const ir_buffer_t *b, const char *where) {
  if (b->id < 0 || b->id >= ev->nbufs)
    return tn_err_set(ev->err, TN_EINVAL,
                      "%s: buffer \"%s\" has id %d, outside the function's %d buffers", where,
                      b->name, b->id, ev->nbufs);
  if (b->ndim < 0 || b->ndim > IR_MAX_DIMS)
    return tn_err_set(ev->err, TN_EINVAL, "%s: buffer \"%s\" has %d dimensions (at most %d)", where,
                      b->name, b->ndim, IR_MAX_DIMS);
  ev_buf_t *eb = &ev->bufs[b->id];
  eb->b = b;
  uint64_t s = 1; /* unsigned: absurd shapes wrap instead of overflowing (refused later) */
  for (int d = b->ndim - 1; d >= 0; d--) {
    eb->rstride[d] = (int64_t)s;
    s *= (uint64_t)b->shape[d];
  }
  return TN_OK;
}

static int bind_params(ev_t *ev, ir_data_t *d) {
  const ir_func_t *f = ev->f;
  if (!d || d->n != f->nparams)
    return tn_err_set(ev->err, TN_EINVAL, "data has %d arrays, function \"%s\" has %d parameters",
                      d ? d->n : 0, f->name, f->nparams);
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    int64_t n = numel_checked(b);
    int rc = bind_buf(ev, b, "parameters");
    if (rc) return rc;
    if (!d->vals[i] || d->sizes[i] != n)
      return tn_err_set(ev->err, TN_EINVAL,
                        "data for parameter \"%s\" has %lld elements, expected %lld", b->name,
                        (long long)d->sizes[i], (long long)n);
    ev->bufs[b->id].data = d->vals[i];
  }
  return TN_OK;
}

typedef struct alloc_list {
  const ir_block_t **blk;
  const ir_buffer_t **buf;
  int n, cap;
} alloc_list_t;

static bool collect_allocs(ir_stmt_t *s, void *ctx) {
  alloc_list_t *al = ctx;
  if (s->kind != IR_S_BLOCK) return true;
  for (int i = 0; i < s->u.block.nallocs; i++) {
    if (al->n == al->cap) {
      al->cap = al->cap ? 2 * al->cap : 8;
      al->blk = tn_xrealloc(al->blk, sizeof(*al->blk) * (size_t)al->cap);
      al->buf = tn_xrealloc(al->buf, sizeof(*al->buf) * (size_t)al->cap);
    }
    al->blk[al->n] = &s->u.block;
    al->buf[al->n++] = s->u.block.allocs[i];
  }
  return true;
}

static int alloc_temp(ev_t *ev, const ir_block_t *blk, const ir_buffer_t *b) {
  char where[300];
  snprintf(where, sizeof where, "block \"%s\"", blk->name);
  int rc = bind_buf(ev, b, where);
  if (rc || ev->bufs[b->id].data) return rc; /* allocated once per buffer */
  int64_t n = numel_checked(b);
  size_t left = IR_EVAL_MAX_TEMP_BYTES - ev->temp_bytes;
  if (n < 0 || (uint64_t)n > left / sizeof(double)) {
    char shape[256];
    shape_text(b, shape, sizeof shape);
    return tn_err_set(ev->err, TN_ENOMEM,
                      "block \"%s\": temporary buffer \"%s\" (%s[%s]) needs %.1f MiB as doubles; "
                      "the evaluator allows %.1f MiB of temporaries (%.1f MiB already used)",
                      blk->name, b->name, ir_dtype_name(b->dtype), shape,
                      n < 0 ? INFINITY : (double)n * 8 / 1048576.0,
                      (double)IR_EVAL_MAX_TEMP_BYTES / 1048576.0,
                      (double)ev->temp_bytes / 1048576.0);
  }
  double *v = malloc((size_t)n * sizeof(double));
  if (!v)
    return tn_err_set(ev->err, TN_ENOMEM,
                      "block \"%s\": cannot allocate %.1f MiB for buffer \"%s\"", blk->name,
                      (double)n * 8 / 1048576.0, b->name);
  for (int64_t k = 0; k < n; k++) v[k] = NAN; /* unwritten elements read as NaN */
  ev->bufs[b->id].data = v;
  ev->bufs[b->id].owned = true;
  ev->temp_bytes += (size_t)n * sizeof(double);
  return TN_OK;
}

static int alloc_temps(ev_t *ev) {
  alloc_list_t al = {0};
  ir_stmt_walk(ev->f->root, collect_allocs, &al);
  int rc = TN_OK;
  for (int i = 0; i < al.n && !rc; i++) rc = alloc_temp(ev, al.blk[i], al.buf[i]);
  free(al.blk);
  free(al.buf);
  return rc;
}

static int ev_setup(ev_t *ev, const ir_func_t *f, ir_data_t *d) {
  if (!f->root || f->root->kind != IR_S_BLOCK)
    return tn_err_set(ev->err, TN_EINVAL, "function \"%s\" has no root block", f->name);
  ev->nvars = TN_MAX(f->next_var_id, 0);
  ev->vars = tn_xmalloc(sizeof(double) * (size_t)(ev->nvars + 1));
  for (int i = 0; i < ev->nvars; i++) ev->vars[i] = NAN; /* unbound variables show up */
  ev->nbufs = TN_MAX(f->next_buf_id, 0);
  ev->bufs = tn_xcalloc((size_t)ev->nbufs + 1, sizeof(ev_buf_t));
  ev->nprogs = TN_MAX(f->next_uid, 0);
  ev->progs = tn_xcalloc((size_t)ev->nprogs + 1, sizeof(vprog_t *));
  int rc = bind_params(ev, d);
  return rc ? rc : alloc_temps(ev);
}

static void ev_teardown(ev_t *ev) {
  for (int i = 0; i < ev->nbufs; i++)
    if (ev->bufs[i].owned) free(ev->bufs[i].data);
  for (int i = 0; i < ev->nprogs; i++) prog_free(ev->progs[i]);
  free(ev->bufs);
  free(ev->vars);
  free(ev->progs);
}

/* Threads for independent outermost loops: $TUNED_EVAL_THREADS, else the
 * online cores (at most EV_MAX_THREADS). */
static int eval_threads(void) {
  const char *env = getenv("TUNED_EVAL_THREADS");
  long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  return (int)TN_MAX(1, TN_MIN(n, EV_MAX_THREADS));
}

int ir_eval_opts(const ir_func_t *f, ir_data_t *d, bool force_scalar, ir_eval_stats_t *stats,
                 tn_err_t *err) {
  ev_t ev = {.f = f, .block = "root", .force_scalar = force_scalar, .err = err, .nthreads = eval_threads()};
  int rc = ev_setup(&ev, f, d);
  if (!rc) rc = ev_stmt(&ev, f->root);
  if (stats) *stats = ev.st;
  ev_teardown(&ev);
  return rc;
}

int ir_eval(const ir_func_t *f, ir_data_t *d, tn_err_t *err) {
  return ir_eval_opts(f, d, false, NULL, err);
}
