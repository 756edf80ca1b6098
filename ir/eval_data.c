/* eval_data.c — the evaluator's parameter data: arrays of doubles, inputs
 * filled with deterministic values from a seed (each from its own stream, so
 * adding a parameter does not change the others), outputs with NaN. */
#include "eval_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Element count of a buffer, or -1 when it does not fit in int64. */
int64_t ev_numel_checked(const ir_buffer_t *b) {
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++) {
    if (b->shape[i] < 1 || n > INT64_MAX / b->shape[i]) return -1;
    n *= b->shape[i];
  }
  return n;
}

void ev_shape_text(const ir_buffer_t *b, char *out, size_t cap) {
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
    int64_t n = ev_numel_checked(b);
    char shape[256];
    ev_shape_text(b, shape, sizeof shape);
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
    assert(used <= max_bytes); /* so that max_bytes - used above cannot wrap */
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
