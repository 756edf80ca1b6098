/* bench_baseline.c — the baselines of the CPU benchmark suite (bench/cpu/run).
 *
 * For one case and its shape it runs OpenBLAS (cblas) or a hand-written
 * vectorised kernel on inputs of the same sizes as tuned's workload
 * (workloads/NAME.tw, the same parameter names), filled as `tunectl eval`
 * fills that workload's inputs for the same seed, checks the output once
 * against a simple double-precision reference (a baseline that computes
 * garbage exits 1 and says where), times it the way tuned's worker times a
 * candidate (a checked run, one warm-up, then repeats until --min-secs in
 * total and at least --min-repeats, at most --max-repeats; the median) and
 * prints one JSON object on stdout.  Where a case has several ways to use the
 * library (its own threads, or one library thread per OpenMP thread on a
 * share of the work), each is checked and timed and the fastest is the
 * baseline; all are listed under "variants".
 *
 *   bench_baseline CASE [--set NAME=VALUE ...] [--threads N] [--min-secs S]
 *                  [--min-repeats N] [--max-repeats N] [--seed S] [--variant NAME]
 *                  [--corrupt]
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "baseline_vec.h"
#include "common/common.h"

#define MAXP 12
#define MAXV 3
#define MAXIN 6
#define TOL 1e-4             /* |got - ref| <= TOL * scale, scale >= sum of |terms| */
#define FULL_CHECK (1L << 27) /* reference multiply-adds up to which every output is checked */
#define SAMPLES 4096          /* else: outputs checked (first, last and spread) */

typedef struct ctx ctx_t;

/* A convolution as im2col + GEMMs.  Along spatial dimension d, output o and
 * window tap t read the input at u = o * stride + t * dil - pad, divided by
 * up: where u is negative, not a multiple of up (up = 2: the transposed
 * convolution's zero-dilated input) or past the input, the value is 0.  The
 * im2col row of an output pixel is blocks x taps x chunk floats: block b
 * gathers, for every tap, the chunk floats at b * chunk of the input pixel
 * (a group's channels; a capsule's row of the pose matrix).  Then `gemms`
 * GEMMs of M = pixels * rpp, N = n, K = k: GEMM g reads A (the im2col rows)
 * at a_step * g (lda), B (the filter) at b_step * g (ldb) and writes C (the
 * output) at c_step * g (ldc). */
typedef struct conv {
  int nd;
  long batch, in[3], out[3], win[3], stride[3], dil[3], pad[3], up;
  long ci, co, groups; /* channels per input and output pixel; the reference's groups */
  long pixel, blocks, chunk;
  long gemms, rpp, k, n, lda, a_step, ldb, b_step, ldc, c_step;
  void (*prep)(ctx_t *c);                         /* before the GEMMs (NULL: none) */
  void (*epilogue)(ctx_t *c, long lo, long hi);   /* on output pixels [lo, hi) after them */
  long pixels, taps, row, image, instride[3];     /* derived by conv_shape */
} conv_t;

struct ctx {
  long p[MAXP]; /* the case's parameters, in its pnames order */
  const char *const *inames;
  uint64_t seed;
  float *in[MAXIN];
  long in_n[MAXIN];
  float *out;
  long out_n;
  long red;    /* multiply-adds per output element (flops: 2 * red + epi_ops per output) */
  long epi_ops;
  float *work; /* workspace (im2col rows) */
  float *pack; /* the filter reordered as the GEMMs' B, or NULL: the filter itself */
  conv_t conv;
  int threads;
  long ref_row; /* row whose statistics ref_a/ref_b hold (softmax, layer norm) */
  double ref_a, ref_b;
};

typedef struct variant {
  const char *name, *what;
  void (*run)(ctx_t *c);
  double (*bytes)(const ctx_t *c);                           /* NULL: the case's */
  double (*ref)(ctx_t *c, long idx, double *scale);          /* NULL: the case's */
} variant_t;

typedef struct bcase {
  const char *name, *metric; /* metric: "gflops" (compute-bound) or "gbps" (memory-bound) */
  const char *pnames[MAXP];
  long pdef[MAXP];
  const char *inames[MAXIN]; /* the workload's input buffers, in c->in order */
  void (*setup)(ctx_t *c);
  double (*flops)(const ctx_t *c);
  double (*bytes)(const ctx_t *c); /* every input and output once, as tunectl check counts */
  long (*ref_cost)(const ctx_t *c); /* reference multiply-adds per output element */
  double (*ref)(ctx_t *c, long idx, double *scale);
  variant_t v[MAXV];
} bcase_t;

/* ---- inputs ------------------------------------------------------------- */

static void *xalloc(long n_floats) {
  size_t bytes = ((size_t)n_floats * sizeof(float) + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, bytes ? bytes : 64);
  if (!p) {
    fprintf(stderr, "bench_baseline: out of memory allocating %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* Input i of the case, n floats: the values `tunectl eval --seed S` gives the
 * workload's buffer of that name (ir/eval_data.c: its own stream, keyed by
 * the seed and the name; uniform in [-1, 1), rounded to float32, values
 * rounded onto 1 drawn again), so the outputs compare with the evaluator's. */
static float *input(ctx_t *c, int i, long n) {
  tn_rng_t r;
  tn_rng_seed(&r, tn_fnv1a_str(tn_fnv1a_u64(TN_FNV_INIT, c->seed), c->inames[i]));
  float *b = xalloc(n);
  for (long j = 0; j < n; j++) {
    float x = 1.0f;
    for (int tries = 0; tries < 64 && !(x < 1.0f); tries++) x = (float)(-1.0 + 2.0 * tn_rng_double(&r));
    b[j] = x < 1.0f ? x : -1.0f;
  }
  c->in[i] = b;
  c->in_n[i] = n;
  return b;
}

static void set_out(ctx_t *c, long n) {
  c->out = xalloc(n);
  c->out_n = n;
}

/* FLOPs and bytes as tunectl check counts them: 2 per multiply-add, epi_ops
 * per output element for an epilogue; every input and the output once. */
static double red_flops(const ctx_t *c) { return (2.0 * c->red + c->epi_ops) * c->out_n; }
static double io_bytes(const ctx_t *c) {
  double n = c->out_n;
  for (int i = 0; i < MAXIN; i++) n += c->in_n[i];
  return 4.0 * n;
}
static long red_cost(const ctx_t *c) { return c->red; }

/* sum(k < n) x[k * sx] * y[k * sy] in double; *scale = the sum of the terms' magnitudes. */
static double dot_ref(const float *x, long sx, const float *y, long sy, long n, double *scale) {
  double s = 0, a = 0;
  for (long k = 0; k < n; k++) {
    double t = (double)x[k * sx] * y[k * sy];
    s += t;
    a += fabs(t);
  }
  *scale = a;
  return s;
}

/* ---- OpenBLAS thread control for the split variants ----------------------- */

/* Runs body(c, tid, nthreads) on c->threads OpenMP threads with OpenBLAS held
 * to one thread, so each thread's cblas call runs in that thread. */
static void split_run(ctx_t *c, void (*body)(ctx_t *c, int tid, int nth)) {
  openblas_set_num_threads(1);
#pragma omp parallel num_threads(c->threads)
  body(c, omp_get_thread_num(), omp_get_num_threads());
  openblas_set_num_threads(c->threads);
}

/* [lo, hi) of n items for thread tid of nth, in multiples of align. */
static long min_l(long a, long b) { return a < b ? a : b; }

static void share(long n, long align, int tid, int nth, long *lo, long *hi) {
  long units = (n + align - 1) / align;
  *lo = min_l(n, units * tid / nth * align);
  *hi = min_l(n, units * (tid + 1) / nth * align);
}

/* ---- matmul: C[M, N] = A[M, K] B[K, N] ------------------------------------ */
#define M_ c->p[0]
#define N_ c->p[1]
#define K_ c->p[2]

static void mm_setup(ctx_t *c) {
  input(c, 0, M_ * K_);
  input(c, 1, K_ * N_);
  set_out(c, M_ * N_);
  c->red = K_;
}
static double mm_ref(ctx_t *c, long idx, double *scale) {
  return dot_ref(c->in[0] + idx / N_ * K_, 1, c->in[1] + idx % N_, N_, K_, scale);
}
static void mm_sgemm(ctx_t *c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M_, N_, K_, 1.0f, c->in[0], K_, c->in[1], N_, 0.0f, c->out,
              N_);
}
#undef M_
#undef N_
#undef K_

/* ---- batch_matmul: C[b] = A[b] B[b] -------------------------------------- */
#define B_ c->p[0]
#define M_ c->p[1]
#define N_ c->p[2]
#define K_ c->p[3]

static void bmm_setup(ctx_t *c) {
  input(c, 0, B_ * M_ * K_);
  input(c, 1, B_ * K_ * N_);
  set_out(c, B_ * M_ * N_);
  c->red = K_;
}
static double bmm_ref(ctx_t *c, long idx, double *scale) {
  long b = idx / (M_ * N_), i = idx / N_ % M_, j = idx % N_;
  return dot_ref(c->in[0] + (b * M_ + i) * K_, 1, c->in[1] + b * K_ * N_ + j, N_, K_, scale);
}
static void bmm_one(ctx_t *c, long b) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M_, N_, K_, 1.0f, c->in[0] + b * M_ * K_, K_,
              c->in[1] + b * K_ * N_, N_, 0.0f, c->out + b * M_ * N_, N_);
}
static void bmm_loop(ctx_t *c) {
  for (long b = 0; b < B_; b++) bmm_one(c, b);
}
static void bmm_split_body(ctx_t *c, int tid, int nth) {
  long lo, hi;
  share(B_, 1, tid, nth, &lo, &hi);
  for (long b = lo; b < hi; b++) bmm_one(c, b);
}
static void bmm_split(ctx_t *c) { split_run(c, bmm_split_body); }
#undef B_
#undef M_
#undef N_
#undef K_

/* ---- transpose_batch_matmul: C[b, h, i, j] = sum(d) Q[b, i, h, d] K[b, j, h, d]
 * (attention's Q K^T with Q and K in [batch, seq, head, dim]): per (batch,
 * head) one cblas_sgemm reading Q and K in place, rows HEADS * DIM apart. */
#define B_ c->p[0]
#define S_ c->p[1]
#define H_ c->p[2]
#define D_ c->p[3]

static void tbmm_setup(ctx_t *c) {
  input(c, 0, B_ * S_ * H_ * D_);
  input(c, 1, B_ * S_ * H_ * D_);
  set_out(c, B_ * H_ * S_ * S_);
  c->red = D_;
}
static double tbmm_ref(ctx_t *c, long idx, double *scale) {
  long j = idx % S_, i = idx / S_ % S_, h = idx / (S_ * S_) % H_, b = idx / (S_ * S_ * H_);
  return dot_ref(c->in[0] + ((b * S_ + i) * H_ + h) * D_, 1, c->in[1] + ((b * S_ + j) * H_ + h) * D_, 1, D_, scale);
}
/* Rows [i0, i0 + m) of head pair bh (= b * HEADS + h). */
static void tbmm_rows(ctx_t *c, long bh, long i0, long m) {
  long b = bh / H_, h = bh % H_, ld = H_ * D_;
  const float *q = c->in[0] + (b * S_ * H_ + h) * D_, *k = c->in[1] + (b * S_ * H_ + h) * D_;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, S_, D_, 1.0f, q + i0 * ld, ld, k, ld, 0.0f,
              c->out + (bh * S_ + i0) * S_, S_);
}
static void tbmm_loop(ctx_t *c) {
  for (long bh = 0; bh < B_ * H_; bh++) tbmm_rows(c, bh, 0, S_);
}
/* The rows of all (batch, head) pairs in a row, split evenly: whole heads
 * where there are enough of them, a head's rows otherwise. */
static void tbmm_split_body(ctx_t *c, int tid, int nth) {
  long lo, hi;
  share(B_ * H_ * S_, 8, tid, nth, &lo, &hi);
  while (lo < hi) {
    long bh = lo / S_, i0 = lo % S_, m = min_l(hi - lo, S_ - i0);
    tbmm_rows(c, bh, i0, m);
    lo += m;
  }
}
static void tbmm_split(ctx_t *c) { split_run(c, tbmm_split_body); }
#undef B_
#undef S_
#undef H_
#undef D_

/* ---- gemv: y[M] = A[M, N] x[N] ------------------------------------------ */
#define M_ c->p[0]
#define N_ c->p[1]

static void gemv_setup(ctx_t *c) {
  input(c, 0, M_ * N_);
  input(c, 1, N_);
  set_out(c, M_);
  c->red = N_;
}
static double gemv_ref(ctx_t *c, long i, double *scale) { return dot_ref(c->in[0] + i * N_, 1, c->in[1], 1, N_, scale); }
static void gemv_sgemv(ctx_t *c) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, M_, N_, 1.0f, c->in[0], N_, c->in[1], 1, 0.0f, c->out, 1);
}
#undef M_
#undef N_

/* ---- convolutions: im2col + cblas_sgemm ------------------------------------ */

/* The output pixel p's batch index; its spatial position into o. */
static long conv_pixel(const conv_t *v, long p, long *o) {
  for (int d = v->nd - 1; d >= 0; d--) o[d] = p % v->out[d], p /= v->out[d];
  return p;
}

/* Whether output o and tap t read inside the input along dimension d; the
 * input index into *i (0 where not). */
static bool conv_pos(const conv_t *v, int d, long o, long t, long *i) {
  long u = o * v->stride[d] + t * v->dil[d] - v->pad[d];
  *i = 0;
  if (u < 0 || (v->up > 1 && u % v->up)) return false;
  *i = v->up > 1 ? u / v->up : u;
  return *i < v->in[d];
}

/* Whether tap t of the window over dimensions [0, nd) reads inside the input
 * at output position o; the input pixel's offset in its image into *off
 * (taps numbered as the filter stores them, the last dimension fastest). */
static bool conv_tap(const conv_t *v, const long *o, long t, int nd, long *off) {
  bool inside = true;
  *off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    long i;
    inside = conv_pos(v, d, o[d], t % v->win[d], &i) && inside;
    *off += i * v->instride[d];
    t /= v->win[d];
  }
  return inside;
}

/* The reference of a grouped convolution, X[batch, in..., ci] and the filter
 * [win..., ci / groups, co]: the sum over the taps inside and the group's
 * channels. */
static double conv_ref(ctx_t *c, long idx, double *scale) {
  const conv_t *v = &c->conv;
  long co = idx % v->co, o[3], n = conv_pixel(v, idx / v->co, o), cig = v->ci / v->groups;
  const float *x = c->in[0] + n * v->image * v->ci + co / (v->co / v->groups) * cig;
  double s = 0, a = 0;
  for (long t = 0, off; t < v->taps; t++) {
    if (!conv_tap(v, o, t, v->nd, &off)) continue;
    double at;
    s += dot_ref(x + off * v->ci, 1, c->in[1] + t * cig * v->co + co, v->co, cig, &at);
    a += at;
  }
  *scale = a;
  return s;
}

/* im2col of the taps along the innermost dimension for output position o
 * there: k taps of chunk floats into dst from the input line at src (NULL:
 * the outer taps fall outside, all zeros).  Where the taps are adjacent
 * pixels (no dilation, whole pixels), the ones inside are one copy. */
static void im2col_line(const conv_t *v, const float *src, long o, float *dst) {
  int d = v->nd - 1;
  long k = v->win[d], ch = v->chunk, i;
  size_t bytes = sizeof(float) * (size_t)ch;
  if (!src) {
    memset(dst, 0, bytes * (size_t)k);
  } else if (v->up == 1 && v->dil[d] == 1 && ch == v->pixel) {
    long u0 = o * v->stride[d] - v->pad[d];
    long t0 = min_l(k, u0 < 0 ? -u0 : 0), t1 = min_l(k, v->in[d] - u0 > t0 ? v->in[d] - u0 : t0);
    memset(dst, 0, bytes * (size_t)t0);
    if (t1 > t0) memcpy(dst + t0 * ch, src + (u0 + t0) * ch, bytes * (size_t)(t1 - t0));
    memset(dst + t1 * ch, 0, bytes * (size_t)(k - t1));
  } else {
    for (long t = 0; t < k; t++, dst += ch)
      if (conv_pos(v, d, o, t, &i)) memcpy(dst, src + i * v->pixel, bytes);
      else memset(dst, 0, bytes);
  }
}

/* The taps along dimensions [d, nd) at output position o into dst, from the
 * input at src (inside: the taps of the outer dimensions fall inside);
 * returns the end of what it wrote. */
static float *im2col_dims(const conv_t *v, int d, const long *o, const float *src, bool inside, float *dst) {
  if (d >= v->nd - 1 || d == 2) { /* nd <= 3: says so to the compiler, which inlines the recursion */
    im2col_line(v, inside ? src : NULL, o[d], dst);
    return dst + v->win[d] * v->chunk;
  }
  for (long t = 0, i; t < v->win[d]; t++) {
    bool in = conv_pos(v, d, o[d], t, &i);
    dst = im2col_dims(v, d + 1, o, src + i * v->instride[d] * v->pixel, inside && in, dst);
  }
  return dst;
}

/* The im2col rows of output pixels [lo, hi) into c->work. */
static void im2col(ctx_t *c, long lo, long hi) {
  const conv_t *v = &c->conv;
  for (long p = lo; p < hi; p++) {
    long o[3], n = conv_pixel(v, p, o);
    const float *img = c->in[0] + n * v->image * v->pixel;
    float *dst = c->work + p * v->row;
    for (long b = 0; b < v->blocks; b++) dst = im2col_dims(v, 0, o, img + b * v->chunk, true, dst);
  }
}

/* The GEMMs on the im2col rows of output pixels [lo, hi). */
static void conv_gemms(ctx_t *c, long lo, long hi) {
  const conv_t *v = &c->conv;
  const float *b = c->pack ? c->pack : c->in[1];
  for (long g = 0; g < v->gemms; g++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (hi - lo) * v->rpp, v->n, v->k, 1.0f,
                c->work + lo * v->row + g * v->a_step, v->lda, b + g * v->b_step, v->ldb, 0.0f,
                c->out + lo * v->rpp * v->ldc + g * v->c_step, v->ldc);
}

/* Variant "im2col_sgemm": im2col on OpenMP threads, then the GEMMs on
 * OpenBLAS's threads, then the epilogue on OpenMP threads. */
static void conv_im2col_sgemm(ctx_t *c) {
  const conv_t *v = &c->conv;
  if (v->prep) v->prep(c);
#pragma omp parallel num_threads(c->threads)
  {
    long lo, hi;
    share(v->pixels, 1, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    im2col(c, lo, hi);
  }
  conv_gemms(c, 0, v->pixels);
  if (v->epilogue) {
#pragma omp parallel num_threads(c->threads)
    {
      long lo, hi;
      share(v->pixels, 1, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
      if (lo < hi) v->epilogue(c, lo, hi);
    }
  }
}

/* Variant "im2col_sgemm_per_thread": the output pixels split over OpenMP
 * threads, each doing its im2col, one-thread GEMMs and epilogue. */
static void conv_split_body(ctx_t *c, int tid, int nth) {
  const conv_t *v = &c->conv;
  long lo, hi;
  share(v->pixels, 16, tid, nth, &lo, &hi);
  if (lo >= hi) return;
  im2col(c, lo, hi);
  conv_gemms(c, lo, hi);
  if (v->epilogue) v->epilogue(c, lo, hi);
}
static void conv_split(ctx_t *c) {
  if (c->conv.prep) c->conv.prep(c);
  split_run(c, conv_split_body);
}

/* Completes c->conv (the output extents where out[0] is 0, the derived
 * sizes), checks the shape (exit 2 naming the case's parameters) and
 * allocates the image X (its input 0) and the output. */
static void conv_shape(ctx_t *c, const char *name) {
  conv_t *v = &c->conv;
  bool given = v->out[0] > 0;
  v->taps = v->image = 1;
  for (int d = v->nd - 1; d >= 0; d--) {
    long span = v->in[d] + 2 * v->pad[d] - v->dil[d] * (v->win[d] - 1) - 1;
    if (!given) v->out[d] = span < 0 ? 0 : span / v->stride[d] + 1;
    if (v->out[d] < 1) {
      fprintf(stderr, "bench_baseline: %s: the window (extent %ld, dilation %ld) is larger than the padded input (%ld)\n",
              name, v->win[d], v->dil[d], v->in[d] + 2 * v->pad[d]);
      exit(2);
    }
    v->instride[d] = v->image;
    v->image *= v->in[d];
    v->taps *= v->win[d];
  }
  if (v->ci % v->groups || v->co % v->groups) {
    fprintf(stderr, "bench_baseline: %s: G=%ld must divide the input channels (%ld) and the output channels (%ld)\n", name,
            v->groups, v->ci, v->co);
    exit(2);
  }
  v->pixels = v->batch;
  for (int d = 0; d < v->nd; d++) v->pixels *= v->out[d];
  input(c, 0, v->batch * v->image * v->ci);
  set_out(c, v->pixels * v->co);
}

/* A grouped convolution as G GEMMs on one im2col buffer: row = output pixel,
 * columns (group, taps..., channel of the group), the filter's own order
 * within a group, so the HWIO filter's rows of a group are the GEMM's B as
 * they are (columns g * CO / G on, CO apart). */
static void conv_grouped(ctx_t *c, const char *name) {
  conv_t *v = &c->conv;
  if (!v->up) v->up = 1;
  if (!v->groups) v->groups = 1;
  conv_shape(c, name);
  long cig = v->ci / v->groups;
  input(c, 1, v->taps * cig * v->co);
  v->pixel = v->ci, v->blocks = v->groups, v->chunk = cig;
  v->gemms = v->groups, v->rpp = 1, v->k = v->taps * cig, v->n = v->co / v->groups;
  v->lda = v->groups * v->k, v->a_step = v->k, v->ldb = v->co, v->b_step = v->n, v->ldc = v->co, v->c_step = v->n;
  v->row = v->lda;
  c->red = v->k;
  c->work = xalloc(v->pixels * v->row);
}

/* conv1d_nlc, conv2d_nhwc_sdg, conv3d_ndhwc: N, the extents, CI, CO, KS, ST,
 * P, D, G in the case's parameter order. */
static void convnd_setup(ctx_t *c, int nd, const char *name) {
  const long *p = c->p, *q = p + 1 + nd;
  c->conv = (conv_t){.nd = nd, .batch = p[0], .ci = q[0], .co = q[1], .groups = q[6]};
  for (int d = 0; d < nd; d++) {
    c->conv.in[d] = p[1 + d], c->conv.win[d] = q[2], c->conv.stride[d] = q[3];
    c->conv.pad[d] = q[4], c->conv.dil[d] = q[5];
  }
  conv_grouped(c, name);
}
static void conv1d_setup(ctx_t *c) { convnd_setup(c, 1, "conv1d_nlc"); }
static void conv2d_sdg_setup(ctx_t *c) { convnd_setup(c, 2, "conv2d_nhwc_sdg"); }
static void conv3d_setup(ctx_t *c) { convnd_setup(c, 3, "conv3d_ndhwc"); }

/* conv2d_nhwc: N, H, W, C, F, R, S, P (stride 1). */
static void conv2d_setup(ctx_t *c) {
  const long *p = c->p;
  c->conv = (conv_t){.nd = 2, .batch = p[0], .in = {p[1], p[2]}, .ci = p[3], .co = p[4], .win = {p[5], p[6]},
                     .stride = {1, 1}, .dil = {1, 1}, .pad = {p[7], p[7]}};
  conv_grouped(c, "conv2d_nhwc");
}

/* conv2d_transpose_nhwc: N, H, W, CI, CO, KS, P.  The workload reads the
 * input padded by q = (KS - P) / 2, dilated by 2, at (y + rh + r) / 2 with
 * r = (2 - (KS - 1 - P) % 2) % 2 and the filter flipped (Wt[KS - 1 - rh]):
 * with a = KS - 1 - rh, the tap the filter stores, the dilated input's
 * position is y - a - (2 q - r - KS + 1): dilation -1, up 2. */
static void tconv_setup(ctx_t *c) {
  const long *p = c->p;
  long ks = p[5], pad = p[6], q = (ks - pad) / 2, r = (2 - (ks - 1 - pad) % 2) % 2, lo = 2 * q - r - ks + 1;
  if (pad >= ks) {
    fprintf(stderr, "bench_baseline: conv2d_transpose_nhwc: P=%ld must be below KS=%ld\n", pad, ks);
    exit(2);
  }
  c->conv = (conv_t){.nd = 2, .batch = p[0], .in = {p[1], p[2]}, .ci = p[3], .co = p[4], .win = {ks, ks},
                     .stride = {1, 1}, .dil = {-1, -1}, .pad = {lo, lo}, .up = 2,
                     .out = {(p[1] - 1) * 2 - 2 * pad + ks, (p[2] - 1) * 2 - 2 * pad + ks}};
  conv_grouped(c, "conv2d_transpose_nhwc");
}

/* conv2d_nhwc_bn_relu: N, H, W, CI, CO, KS, ST, P, D; inputs X, Wt, bias,
 * bn_offset, bn_scale; Y = max((conv + bias) * bn_scale + bn_offset, 0),
 * vectorised on each thread's output rows after the GEMM. */
static void cbr_epilogue(ctx_t *c, long lo, long hi) {
  long co = c->conv.co;
  bv_bias_bn_relu(c->out + lo * co, c->in[2], c->in[4], c->in[3], hi - lo, co, co);
}
static void cbr_setup(ctx_t *c) {
  const long *p = c->p;
  c->conv = (conv_t){.nd = 2, .batch = p[0], .in = {p[1], p[2]}, .ci = p[3], .co = p[4], .win = {p[5], p[5]},
                     .stride = {p[6], p[6]}, .pad = {p[7], p[7]}, .dil = {p[8], p[8]}, .epilogue = cbr_epilogue};
  conv_grouped(c, "conv2d_nhwc_bn_relu");
  for (int i = 2; i < 5; i++) input(c, i, c->conv.co);
  c->epi_ops = 4; /* add, multiply, add, max */
}
static double cbr_ref(ctx_t *c, long idx, double *scale) {
  long co = idx % c->conv.co;
  double y = conv_ref(c, idx, scale), s = c->in[4][co];
  y = (y + c->in[2][co]) * s + c->in[3][co];
  *scale = (*scale + fabs(c->in[2][co])) * fabs(s) + fabs(c->in[3][co]);
  return y > 0 ? y : 0;
}

/* conv2d_capsule_nhwijc: N, H, W, CI, CO, KS, ST, P, CAP.
 * Y[n, y, x, i, j, co] = sum(rh, rw, k, c) X[n, y', x', i, k, c] Wt[rh, rw, k, j, c, co]:
 * im2col rows (pixel, i), columns (taps, k, c) — the pose row i of each tap's
 * input pixel, CAP * CI floats in a row — and CAP GEMMs, one per pose column
 * j, whose B is the filter's j slice; the filter is reordered to
 * [j, taps, k, c, co] on every call (it is an input, as for tuned). */
#define CAP_ c->p[8]
static void cap_prep(ctx_t *c) {
  long cap = CAP_, slab = c->p[3] * c->p[4], taps = c->conv.taps;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
  for (long j = 0; j < cap; j++)
    for (long tk = 0; tk < taps * cap; tk++)
      memcpy(c->pack + (j * taps * cap + tk) * slab, c->in[1] + (tk * cap + j) * slab, sizeof(float) * (size_t)slab);
}
static void cap_setup(ctx_t *c) {
  const long *p = c->p, cap = CAP_;
  conv_t *v = &c->conv;
  *v = (conv_t){.nd = 2, .batch = p[0], .in = {p[1], p[2]}, .ci = cap * cap * p[3], .co = cap * cap * p[4],
                .win = {p[5], p[5]}, .stride = {p[6], p[6]}, .pad = {p[7], p[7]}, .dil = {1, 1}, .up = 1,
                .groups = 1, .prep = cap_prep};
  conv_shape(c, "conv2d_capsule_nhwijc");
  v->pixel = v->ci, v->blocks = cap, v->chunk = cap * p[3];
  v->gemms = cap, v->rpp = cap, v->k = v->taps * v->chunk, v->n = p[4];
  v->lda = v->k, v->a_step = 0, v->ldb = p[4], v->b_step = v->k * p[4], v->ldc = cap * p[4], v->c_step = p[4];
  v->row = cap * v->k;
  input(c, 1, v->taps * cap * cap * p[3] * p[4]);
  c->pack = xalloc(c->in_n[1]);
  c->work = xalloc(v->pixels * v->row);
  c->red = v->k;
}
static double cap_ref(ctx_t *c, long idx, double *scale) {
  const conv_t *v = &c->conv;
  long cap = CAP_, ci = c->p[3], co = c->p[4], o[3];
  long oc = idx % co, j = idx / co % cap, i = idx / (co * cap) % cap, n = conv_pixel(v, idx / v->co, o);
  double s = 0, a = 0;
  for (long t = 0, off; t < v->taps; t++) {
    if (!conv_tap(v, o, t, 2, &off)) continue;
    for (long k = 0; k < cap; k++) {
      double at;
      s += dot_ref(c->in[0] + ((n * v->image + off) * cap + i) * cap * ci + k * ci, 1,
                   c->in[1] + (((t * cap + k) * cap + j) * ci) * co + oc, co, ci, &at);
      a += at;
    }
  }
  *scale = a;
  return s;
}
#undef CAP_

/* ---- depthwise_conv2d_nhwc: N, H, W, C, KS, ST, P, D; one KS x KS filter per
 * channel ([1, KS, KS, C]): hand-vectorised over the channels (baseline_vec.c). */
static void dw_setup(ctx_t *c) {
  const long *p = c->p;
  c->conv = (conv_t){.nd = 2, .batch = p[0], .in = {p[1], p[2]}, .ci = p[3], .co = p[3], .groups = p[3],
                     .win = {p[4], p[4]}, .stride = {p[5], p[5]}, .pad = {p[6], p[6]}, .dil = {p[7], p[7]}, .up = 1};
  conv_shape(c, "depthwise_conv2d_nhwc");
  input(c, 1, p[4] * p[4] * p[3]);
  c->red = p[4] * p[4];
}
static void dw_run(ctx_t *c) {
  const conv_t *v = &c->conv;
  bv_depthwise_conv2d(c->in[0], c->in[1], c->out,
                      &(bv_dwconv_t){.n = v->batch, .h = v->in[0], .w = v->in[1], .c = v->ci, .ks = v->win[0],
                                     .stride = v->stride[0], .pad = v->pad[0], .dil = v->dil[0], .oh = v->out[0],
                                     .ow = v->out[1]});
}

/* ---- norm_bmn: D[b] = sqrt(sum(i, j) A[b, i, j]^2) ------------------------- */
static void norm_setup(ctx_t *c) {
  input(c, 0, c->p[0] * c->p[1] * c->p[2]);
  set_out(c, c->p[0]);
  c->red = c->p[1] * c->p[2];
  c->epi_ops = 1; /* the sqrt */
}
static double norm_ref(ctx_t *c, long b, double *scale) {
  const float *a = c->in[0] + b * c->red;
  double s = sqrt(dot_ref(a, 1, a, 1, c->red, scale));
  *scale = s; /* relative: the sum's terms are all positive */
  return s;
}
static void norm_run(ctx_t *c) { bv_norm_bmn(c->in[0], c->out, c->p[0], c->red); }

/* ---- dense_bias_gelu: Y = gelu_tanh(X W^T + bias), W as OUT x IN ---------- */
#define B_ c->p[0]
#define IN_ c->p[1]
#define OUT_ c->p[2]

static void dense_setup(ctx_t *c) {
  input(c, 0, B_ * IN_);
  input(c, 1, OUT_ * IN_);
  input(c, 2, OUT_);
  set_out(c, B_ * OUT_);
  c->red = IN_;
}
static double dense_ref(ctx_t *c, long idx, double *scale) {
  long b = idx / OUT_, o = idx % OUT_;
  double a, z = c->in[2][o] + dot_ref(c->in[0] + b * IN_, 1, c->in[1] + o * IN_, 1, IN_, &a);
  *scale = a + fabs(c->in[2][o]) + 1.0; /* gelu's slope is at most 1.13; the 1 covers tanh's approximation */
  return 0.5 * z * (1.0 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
}
static void dense_gemm_cols(ctx_t *c, long lo, long hi) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B_, hi - lo, IN_, 1.0f, c->in[0], IN_, c->in[1] + lo * IN_, IN_,
              0.0f, c->out + lo, OUT_);
}
static void dense_sgemm_epilogue(ctx_t *c) {
  long rows = B_;
  dense_gemm_cols(c, 0, OUT_);
#pragma omp parallel for num_threads(c->threads) schedule(static)
  for (long b = 0; b < rows; b++) bv_bias_gelu(c->out + b * OUT_, c->in[2], 1, OUT_, OUT_);
}
static void dense_split_body(ctx_t *c, int tid, int nth) {
  long lo, hi;
  share(OUT_, 16, tid, nth, &lo, &hi);
  if (lo >= hi) return;
  dense_gemm_cols(c, lo, hi);
  bv_bias_gelu(c->out + lo, c->in[2] + lo, B_, hi - lo, OUT_);
}
static void dense_split(ctx_t *c) { split_run(c, dense_split_body); }
#undef B_
#undef IN_
#undef OUT_

/* ---- softmax and layer norm over rows of an M x N matrix ------------------ */
#define M_ c->p[0]
#define N_ c->p[1]

static void rows_setup(ctx_t *c) {
  input(c, 0, M_ * N_);
  set_out(c, M_ * N_);
}
static long rows_cost(const ctx_t *c) { return 2 * N_; }
static double softmax_flops(const ctx_t *c) { return 5.0 * M_ * N_; } /* max, sub, exp, add, div */
static double softmax_ref(ctx_t *c, long idx, double *scale) {
  long i = idx / N_;
  const float *a = c->in[0] + i * N_;
  if (c->ref_row != i) {
    double mx = -INFINITY, s = 0;
    for (long j = 0; j < N_; j++) mx = fmax(mx, a[j]);
    for (long j = 0; j < N_; j++) s += exp(a[j] - mx);
    c->ref_row = i, c->ref_a = mx, c->ref_b = s;
  }
  double v = exp(a[idx % N_] - c->ref_a) / c->ref_b;
  *scale = v;
  return v;
}
static void softmax_run(ctx_t *c) { bv_softmax(c->in[0], c->out, M_, N_); }

static void ln_setup(ctx_t *c) {
  rows_setup(c);
  input(c, 1, N_);
  input(c, 2, N_);
}
static double ln_flops(const ctx_t *c) { return 8.0 * M_ * N_; }
static double ln_ref(ctx_t *c, long idx, double *scale) {
  long i = idx / N_, j = idx % N_;
  const float *x = c->in[0] + i * N_;
  if (c->ref_row != i) {
    double s1 = 0, s2 = 0;
    for (long k = 0; k < N_; k++) s1 += x[k], s2 += (double)x[k] * x[k];
    double mean = s1 / N_;
    c->ref_row = i, c->ref_a = mean, c->ref_b = 1.0 / sqrt(s2 / N_ - mean * mean + 1e-5);
  }
  double t = (x[j] - c->ref_a) * c->ref_b * c->in[1][j];
  *scale = fabs(t) + fabs(c->in[2][j]) + 1.0;
  return t + c->in[2][j];
}
static void ln_run(ctx_t *c) { bv_layer_norm(c->in[0], c->in[1], c->in[2], c->out, M_, N_); }
#undef M_
#undef N_

/* ---- stream: copy c = a and triad c = a + 3 b over arrays of N floats ----- */
#define N_ c->p[0]

static void stream_setup(ctx_t *c) {
  long n = N_;
  c->in[0] = xalloc(n);
  c->in[1] = xalloc(n);
  set_out(c, n);
#pragma omp parallel for num_threads(c->threads) schedule(static)
  for (long i = 0; i < n; i++) c->in[0][i] = (float)(i % 1000) * 0.001f, c->in[1][i] = (float)(i % 7);
}
static double stream_flops(const ctx_t *c) { return 0 * N_; }
static double copy_bytes(const ctx_t *c) { return 8.0 * N_; }
static double triad_bytes(const ctx_t *c) { return 12.0 * N_; }
static long stream_cost(const ctx_t *c) { return 1 + 0 * N_; }
static double copy_ref(ctx_t *c, long i, double *scale) {
  *scale = 1;
  return c->in[0][i];
}
static double triad_ref(ctx_t *c, long i, double *scale) {
  *scale = 1;
  return c->in[0][i] + 3.0 * c->in[1][i];
}
static void stream_copy(ctx_t *c) {
  long n = N_;
  float *restrict o = c->out;
  const float *restrict a = c->in[0];
#pragma omp parallel for simd num_threads(c->threads) schedule(static)
  for (long i = 0; i < n; i++) o[i] = a[i];
}
static void stream_triad(ctx_t *c) {
  long n = N_;
  float *restrict o = c->out;
  const float *restrict a = c->in[0], *restrict b = c->in[1];
#pragma omp parallel for simd num_threads(c->threads) schedule(static)
  for (long i = 0; i < n; i++) o[i] = a[i] + 3.0f * b[i];
}
#undef N_

/* ---- the cases ------------------------------------------------------------ */

#define IM2COL_VARIANTS(epi)                                                                                      \
  {{"im2col_sgemm", "OpenMP im2col, then one OpenBLAS cblas_sgemm per group on its own threads" epi,                   \
    conv_im2col_sgemm, NULL, NULL},                                                                                    \
   {"im2col_sgemm_per_thread",                                                                                         \
    "output pixels split over OpenMP threads, im2col + one-thread cblas_sgemm per group each" epi, conv_split, NULL,   \
    NULL}}

static const bcase_t cases[] = {
    {"matmul", "gflops", {"M", "N", "K"}, {1024, 1024, 1024}, {"A", "B"}, mm_setup, red_flops, io_bytes, red_cost,
     mm_ref, {{"cblas_sgemm", "OpenBLAS cblas_sgemm, its own threads", mm_sgemm, NULL, NULL}}},
    {"batch_matmul", "gflops", {"BATCH", "M", "N", "K"}, {16, 128, 128, 64}, {"A", "B"}, bmm_setup, red_flops,
     io_bytes, red_cost, bmm_ref,
     {{"sgemm_loop", "a loop of OpenBLAS cblas_sgemm, its own threads", bmm_loop, NULL, NULL},
      {"sgemm_per_thread", "batches split over OpenMP threads, one-thread cblas_sgemm each", bmm_split, NULL, NULL}}},
    {"transpose_batch_matmul", "gflops", {"BATCH", "SEQ", "HEADS", "DIM"}, {1, 128, 12, 64}, {"Q", "K"}, tbmm_setup,
     red_flops, io_bytes, red_cost, tbmm_ref,
     {{"sgemm_loop", "a cblas_sgemm (B transposed, rows HEADS*DIM apart) per (batch, head), OpenBLAS's threads",
       tbmm_loop, NULL, NULL},
      {"sgemm_per_thread", "the rows of all heads split over OpenMP threads, one-thread cblas_sgemm per head piece",
       tbmm_split, NULL, NULL}}},
    {"gemv", "gbps", {"M", "N"}, {4096, 4096}, {"A", "x"}, gemv_setup, red_flops, io_bytes, red_cost, gemv_ref,
     {{"cblas_sgemv", "OpenBLAS cblas_sgemv, its own threads", gemv_sgemv, NULL, NULL}}},
    {"conv2d_nhwc", "gflops", {"N", "H", "W", "C", "F", "R", "S", "P"}, {1, 56, 56, 64, 64, 3, 3, 1}, {"X", "Wt"},
     conv2d_setup, red_flops, io_bytes, red_cost, conv_ref, IM2COL_VARIANTS("")},
    {"conv1d_nlc", "gflops", {"N", "L", "CI", "CO", "KL", "ST", "P", "D", "G"}, {1, 256, 64, 128, 3, 2, 1, 1, 1},
     {"X", "Wt"}, conv1d_setup, red_flops, io_bytes, red_cost, conv_ref, IM2COL_VARIANTS("")},
    {"conv2d_nhwc_sdg", "gflops", {"N", "H", "W", "CI", "CO", "KS", "ST", "P", "D", "G"},
     {1, 224, 224, 3, 64, 7, 2, 3, 1, 1}, {"X", "Wt"}, conv2d_sdg_setup, red_flops, io_bytes, red_cost, conv_ref,
     IM2COL_VARIANTS("")},
    {"conv3d_ndhwc", "gflops", {"N", "DD", "H", "W", "CI", "CO", "KS", "ST", "P", "D", "G"},
     {1, 16, 224, 224, 3, 64, 7, 2, 3, 1, 1}, {"X", "Wt"}, conv3d_setup, red_flops, io_bytes, red_cost, conv_ref,
     IM2COL_VARIANTS("")},
    {"conv2d_transpose_nhwc", "gflops", {"N", "H", "W", "CI", "CO", "KS", "P"}, {1, 4, 4, 512, 256, 4, 1},
     {"X", "Wt"}, tconv_setup, red_flops, io_bytes, red_cost, conv_ref,
     IM2COL_VARIANTS(" (im2col of the input dilated by 2, zeros included)")},
    {"conv2d_capsule_nhwijc", "gflops", {"N", "H", "W", "CI", "CO", "KS", "ST", "P", "CAP"},
     {1, 16, 16, 32, 32, 3, 2, 1, 4}, {"X", "Wt"}, cap_setup, red_flops, io_bytes, red_cost, cap_ref,
     IM2COL_VARIANTS(" (rows: pixel and pose row; a GEMM per pose column, its filter slice copied out per call)")},
    {"conv2d_nhwc_bn_relu", "gflops", {"N", "H", "W", "CI", "CO", "KS", "ST", "P", "D"},
     {1, 224, 224, 3, 64, 7, 2, 3, 1}, {"X", "Wt", "bias", "bn_offset", "bn_scale"}, cbr_setup, red_flops, io_bytes,
     red_cost, cbr_ref, IM2COL_VARIANTS(", then the bias+bn+ReLU epilogue vectorised")},
    {"depthwise_conv2d_nhwc", "gflops", {"N", "H", "W", "C", "KS", "ST", "P", "D"}, {1, 112, 112, 32, 3, 1, 1, 1},
     {"X", "Wt"}, dw_setup, red_flops, io_bytes, red_cost, conv_ref,
     {{"vectorised_c", "OpenMP over output rows, the channels vectorised, 32 in registers per pixel", dw_run, NULL,
       NULL}}},
    {"dense_bias_gelu", "gflops", {"B", "IN", "OUT"}, {128, 768, 3072}, {"X", "W", "bias"}, dense_setup, red_flops,
     io_bytes, red_cost, dense_ref,
     {{"sgemm_epilogue", "OpenBLAS cblas_sgemm (its own threads), then an OpenMP vectorised bias+GELU pass",
       dense_sgemm_epilogue, NULL, NULL},
      {"sgemm_epilogue_per_thread", "columns split over OpenMP threads, one-thread cblas_sgemm + bias+GELU each",
       dense_split, NULL, NULL}}},
    {"softmax", "gbps", {"M", "N"}, {256, 1024}, {"A"}, rows_setup, softmax_flops, io_bytes, rows_cost, softmax_ref,
     {{"vectorised_c", "OpenMP over rows, max / exp+sum / scale passes vectorised (libmvec expf)", softmax_run, NULL,
       NULL}}},
    {"layer_norm", "gbps", {"M", "N"}, {4096, 1024}, {"X", "gamma", "beta"}, ln_setup, ln_flops, io_bytes, rows_cost,
     ln_ref,
     {{"vectorised_c", "OpenMP over rows, sum+sum of squares then normalise, vectorised", ln_run, NULL, NULL}}},
    {"norm_bmn", "gbps", {"B", "M", "N"}, {1, 256, 256}, {"A"}, norm_setup, red_flops, io_bytes, red_cost, norm_ref,
     {{"vectorised_c", "OpenMP over matrices or over one matrix's blocks, sum of squares vectorised", norm_run, NULL,
       NULL}}},
    {"stream", "gbps", {"N"}, {1L << 25}, {NULL}, stream_setup, stream_flops, copy_bytes, stream_cost, copy_ref,
     {{"copy", "c[i] = a[i], OpenMP, vectorised", stream_copy, copy_bytes, copy_ref},
      {"triad", "c[i] = a[i] + 3 b[i], OpenMP, vectorised", stream_triad, triad_bytes, triad_ref}}},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* ---- checking and timing ------------------------------------------------- */

typedef struct opts {
  double min_secs;
  int min_repeats, max_repeats;
  bool corrupt;
} opts_t;

typedef struct vresult {
  double median, min, max_err, sum, l2; /* sum, l2: of the checked run's output, in double */
  int repeats;
  long checked;
} vresult_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Checks c->out against the reference: every element when that costs at
 * most FULL_CHECK multiply-adds, else SAMPLES of them; every element must
 * be finite (the output was poisoned with NaN before the run).  Exits 1
 * naming the case, variant and element on a mismatch. */
static double verify(const bcase_t *k, const variant_t *v, ctx_t *c, long *checked) {
  double (*ref)(ctx_t *, long, double *) = v->ref ? v->ref : k->ref;
  for (long i = 0; i < c->out_n; i++)
    if (!isfinite(c->out[i])) {
      fprintf(stderr, "bench_baseline: %s/%s computed garbage: output element %ld is %g (not written, or overflow)\n",
              k->name, v->name, i, (double)c->out[i]);
      exit(1);
    }
  bool all = (double)c->out_n * (double)k->ref_cost(c) <= (double)FULL_CHECK;
  long n = all ? c->out_n : SAMPLES;
  double worst = 0;
  c->ref_row = -1;
  for (long s = 0; s < n; s++) {
    long i = all ? s : s == n - 1 ? c->out_n - 1 : (long)((double)s / (double)n * (double)c->out_n);
    double scale, want = ref(c, i, &scale), err = fabs((double)c->out[i] - want) / (scale > 0 ? scale : 1);
    if (!(err <= TOL)) {
      fprintf(stderr,
              "bench_baseline: %s/%s computed garbage: output element %ld is %.9g, the reference %.9g "
              "(error %.3g of the magnitude %.3g; allowed %g)\n",
              k->name, v->name, i, (double)c->out[i], want, err, scale, TOL);
      exit(1);
    }
    if (err > worst) worst = err;
  }
  *checked = n;
  return worst;
}

/* The checked run, a warm-up, then timed repeats as tuned's worker does. */
static vresult_t run_variant(const bcase_t *k, const variant_t *v, ctx_t *c, const opts_t *o) {
  vresult_t r = {0};
  memset(c->out, 0xFF, sizeof(float) * (size_t)c->out_n); /* NaN: unwritten outputs show */
  v->run(c);
  if (o->corrupt) c->out[c->out_n / 2] = c->out[c->out_n / 2] * 2.0f + 1.0f;
  r.max_err = verify(k, v, c, &r.checked);
  for (long i = 0; i < c->out_n; i++) r.sum += c->out[i], r.l2 += (double)c->out[i] * c->out[i];
  r.l2 = sqrt(r.l2);
  v->run(c);
  int cap = 64, n = 0;
  double *secs = malloc(sizeof(double) * (size_t)cap), total = 0;
  while (n < o->max_repeats && (n < o->min_repeats || total < o->min_secs)) {
    double t0 = now();
    v->run(c);
    double t = now() - t0;
    if (n == cap && !(secs = realloc(secs, sizeof(double) * (size_t)(cap *= 2)))) exit(1);
    secs[n++] = t;
    total += t;
  }
  qsort(secs, (size_t)n, sizeof *secs, cmp_double);
  r.median = n % 2 ? secs[n / 2] : 0.5 * (secs[n / 2 - 1] + secs[n / 2]);
  r.min = secs[0];
  r.repeats = n;
  free(secs);
  return r;
}

/* ---- command line ---------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_baseline CASE [--set NAME=VALUE ...] [--threads N] [--min-secs S]\n"
          "                      [--min-repeats N] [--max-repeats N] [--seed S] [--variant NAME]\n"
          "                      [--corrupt]\n"
          "\n"
          "Times the baseline of one bench/cpu case on inputs of the workload's sizes and\n"
          "prints JSON.  Every variant is checked once against a double-precision\n"
          "reference (exit 1 naming the element if it is wrong), then timed: a warm-up,\n"
          "then repeats until --min-secs (0.1) and --min-repeats (3), at most\n"
          "--max-repeats (1000); the median, as tuned's worker times a candidate.\n"
          "--threads (default: the online cores) sets OpenMP and OpenBLAS threads;\n"
          "--variant runs only the named variant of the case.\n"
          "--corrupt spoils one output element after the checked run (a self-test:\n"
          "the check must then fail).  The inputs are those `tunectl eval --seed S`\n"
          "gives workloads/CASE.tw (--seed, default 1); each variant's \"sum\" and \"l2\"\n"
          "of its output compare with the evaluator's.\n\ncases and parameters (defaults):\n");
  for (int i = 0; i < NCASES; i++) {
    fprintf(f, "  %-22s", cases[i].name);
    for (int j = 0; j < MAXP && cases[i].pnames[j]; j++) fprintf(f, " %s=%ld", cases[i].pnames[j], cases[i].pdef[j]);
    fprintf(f, "\n");
  }
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static void bad(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "bench_baseline: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (see bench_baseline --help)\n");
  exit(2);
}

static void set_param(const bcase_t *k, ctx_t *c, const char *kv) {
  const char *eq = strchr(kv, '=');
  if (!eq) bad("--set %s%s: expected NAME=VALUE", kv, "");
  for (int j = 0; j < MAXP && k->pnames[j]; j++) {
    if (strlen(k->pnames[j]) != (size_t)(eq - kv) || strncmp(k->pnames[j], kv, (size_t)(eq - kv)) != 0) continue;
    long lo = strcmp(k->pnames[j], "P") == 0 ? 0 : 1;
    if (!parse_long(eq + 1, lo, 1L << 30, &c->p[j])) bad("--set %s: the value must be an integer in [%s, 2^30]", kv, lo ? "1" : "0");
    return;
  }
  char names[128] = "";
  for (int j = 0; j < MAXP && k->pnames[j]; j++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "", k->pnames[j]);
  fprintf(stderr, "bench_baseline: --set %s: %s has no parameter of that name (its parameters: %s)\n", kv, k->name,
          names);
  exit(2);
}

/* The case's buffers (a leak check at exit, -Db_sanitize=address, reports them otherwise). */
static void free_ctx(ctx_t *c) {
  for (size_t i = 0; i < sizeof c->in / sizeof c->in[0]; i++) free(c->in[i]);
  free(c->out);
  free(c->work);
  free(c->pack);
}

/* OpenBLAS 0.3.21's DYNAMIC_ARCH does not know CPU models newer than it
 * (family 6 model 207 here) and falls back to its SSE3 "Prescott" kernels,
 * 2-10x slower than the AVX-512 ones such a CPU runs.  It reads the core
 * type from OPENBLAS_CORETYPE only when it loads, so where it fell back and
 * the variable is unset, bench_baseline sets it to the best kernels the CPU
 * supports and runs itself again (the JSON's "library" names the core used). */
static void openblas_core(char **argv) {
  if (getenv("OPENBLAS_CORETYPE") || strcasecmp(openblas_get_corename(), "prescott") != 0) return;
  const char *core = __builtin_cpu_supports("avx512bf16") ? "Cooperlake"
                     : __builtin_cpu_supports("avx512f")  ? "SkylakeX"
                     : __builtin_cpu_supports("avx2")     ? "Haswell"
                                                          : NULL;
  if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  fprintf(stderr, "bench_baseline: re-running with OPENBLAS_CORETYPE=%s failed (%s); OpenBLAS stays on Prescott\n",
          core, strerror(errno));
}

int main(int argc, char **argv) {
  openblas_core(argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  const bcase_t *k = NULL;
  for (int i = 0; i < NCASES; i++)
    if (strcmp(argv[1], cases[i].name) == 0) k = &cases[i];
  if (!k) bad("unknown case '%s'%s", argv[1], "");
  ctx_t c = {.threads = (int)sysconf(_SC_NPROCESSORS_ONLN)};
  memcpy(c.p, k->pdef, sizeof c.p);
  opts_t o = {.min_secs = 0.1, .min_repeats = 3, .max_repeats = 1000};
  long seed = 1, v;
  const char *only = NULL;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--corrupt") == 0) {
      o.corrupt = true;
      continue;
    }
    if (!val) bad("%s needs a value%s", a, "");
    i++;
    if (strcmp(a, "--set") == 0) set_param(k, &c, val);
    else if (strcmp(a, "--variant") == 0) only = val;
    else if (strcmp(a, "--threads") == 0 && parse_long(val, 1, 1024, &v)) c.threads = (int)v;
    else if (strcmp(a, "--min-repeats") == 0 && parse_long(val, 1, 1000000, &v)) o.min_repeats = (int)v;
    else if (strcmp(a, "--max-repeats") == 0 && parse_long(val, 1, 1000000, &v)) o.max_repeats = (int)v;
    else if (strcmp(a, "--seed") == 0 && parse_long(val, 0, 1L << 62, &v)) seed = v;
    else if (strcmp(a, "--min-secs") == 0) {
      char *end;
      o.min_secs = strtod(val, &end);
      if (end == val || *end || !(o.min_secs >= 0 && o.min_secs <= 3600)) bad("--min-secs %s: expected seconds in [0, 3600]", val, "");
    } else if (strcmp(a, "--threads") == 0 || strcmp(a, "--min-repeats") == 0 || strcmp(a, "--max-repeats") == 0 ||
               strcmp(a, "--seed") == 0)
      bad("%s %s: expected a positive integer", a, val);
    else bad("unknown option '%s'%s", a, "");
  }
  if (o.max_repeats < o.min_repeats) o.max_repeats = o.min_repeats;
  c.seed = (uint64_t)seed;
  c.inames = k->inames;
  omp_set_num_threads(c.threads);
  openblas_set_num_threads(c.threads);
  k->setup(&c);

  vresult_t res[MAXV];
  int best = -1, nv = 0;
  double best_rate = -1;
  for (int i = 0; i < MAXV && k->v[i].name; i++, nv++) {
    res[i] = (vresult_t){0};
    if (only && strcmp(only, k->v[i].name) != 0) continue;
    res[i] = run_variant(k, &k->v[i], &c, &o);
    double work = strcmp(k->metric, "gbps") == 0 ? (k->v[i].bytes ? k->v[i].bytes : k->bytes)(&c) : k->flops(&c);
    double rate = work / res[i].median;
    if (rate > best_rate) best_rate = rate, best = i;
  }

  if (best < 0) {
    fprintf(stderr, "bench_baseline: %s has no variant '%s' (its variants:", k->name, only);
    for (int i = 0; i < nv; i++) fprintf(stderr, " %s", k->v[i].name);
    fprintf(stderr, ")\n");
    free_ctx(&c);
    return 2;
  }
  const variant_t *bv = &k->v[best];
  double bytes = (bv->bytes ? bv->bytes : k->bytes)(&c), flops = k->flops(&c);
  printf("{\"case\": \"%s\", \"params\": {", k->name);
  for (int j = 0; j < MAXP && k->pnames[j]; j++) printf("%s\"%s\": %ld", j ? ", " : "", k->pnames[j], c.p[j]);
  printf("}, \"threads\": %d, \"library\": \"%s\", \"metric\": \"%s\",\n", c.threads, openblas_get_config(),
         k->metric);
  printf(" \"baseline\": \"%s\", \"what\": \"%s\", \"median_secs\": %.9g, \"min_secs\": %.9g, \"repeats\": %d,\n",
         bv->name, bv->what, res[best].median, res[best].min, res[best].repeats);
  printf(" \"flops\": %.0f, \"bytes\": %.0f, \"gflops\": %.6g, \"gbps\": %.6g,\n", flops, bytes,
         flops / res[best].median * 1e-9, bytes / res[best].median * 1e-9);
  printf(" \"variants\": [");
  for (int i = 0, first = 1; i < nv; i++) {
    const variant_t *w = &k->v[i];
    if (!res[i].repeats) continue;
    double b = (w->bytes ? w->bytes : k->bytes)(&c);
    printf("%s\n  {\"name\": \"%s\", \"what\": \"%s\", \"median_secs\": %.9g, \"min_secs\": %.9g, \"repeats\": %d, "
           "\"gflops\": %.6g, \"gbps\": %.6g, \"checked\": %ld, \"of\": %ld, \"max_rel_err\": %.3g, "
           "\"sum\": %.17g, \"l2\": %.17g}",
           first ? "" : ",", w->name, w->what, res[i].median, res[i].min, res[i].repeats, flops / res[i].median * 1e-9,
           b / res[i].median * 1e-9, res[i].checked, c.out_n, res[i].max_err, res[i].sum, res[i].l2);
    first = 0;
  }
  printf("]}\n");
  free_ctx(&c);
  return 0;
}
