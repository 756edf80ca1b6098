/* bench_baseline.c — the baselines of the CPU benchmark suite (bench/cpu/run).
 *
 * For one case and its shape it runs OpenBLAS (cblas) or a hand-written
 * vectorised kernel on inputs of the same sizes as tuned's workload
 * (workloads/NAME.tw, the same parameter names), checks the output once
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
#include <time.h>
#include <unistd.h>

#include "baseline_vec.h"

#define MAXP 8
#define MAXV 3
#define TOL 1e-4             /* |got - ref| <= TOL * scale, scale >= sum of |terms| */
#define FULL_CHECK (1L << 27) /* reference multiply-adds up to which every output is checked */
#define SAMPLES 4096          /* else: outputs checked (first, last and spread) */

typedef struct ctx {
  long p[MAXP]; /* the case's parameters, in its pnames order */
  float *in[4];
  float *out;
  long out_n;
  float *work; /* workspace (im2col rows) */
  int threads;
  long ref_row; /* row whose statistics ref_a/ref_b hold (softmax, layer norm) */
  double ref_a, ref_b;
} ctx_t;

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
  void (*setup)(ctx_t *c);
  double (*flops)(const ctx_t *c);
  double (*bytes)(const ctx_t *c); /* every input and output once, as tunectl check counts */
  long (*ref_cost)(const ctx_t *c); /* reference multiply-adds per output element */
  double (*ref)(ctx_t *c, long idx, double *scale);
  variant_t v[MAXV];
} bcase_t;

/* ---- inputs ------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t splitmix(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void *xalloc(long n_floats) {
  size_t bytes = ((size_t)n_floats * sizeof(float) + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, bytes ? bytes : 64);
  if (!p) {
    fprintf(stderr, "bench_baseline: out of memory allocating %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* n floats uniform in [-1, 1), tunectl eval's default distribution. */
static float *rand_buf(long n) {
  float *b = xalloc(n);
  for (long i = 0; i < n; i++) b[i] = (float)((double)(splitmix() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  return b;
}

static void set_out(ctx_t *c, long n) {
  c->out = xalloc(n);
  c->out_n = n;
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
  c->in[0] = rand_buf(M_ * K_);
  c->in[1] = rand_buf(K_ * N_);
  set_out(c, M_ * N_);
}
static double mm_flops(const ctx_t *c) { return 2.0 * M_ * N_ * K_; }
static double mm_bytes(const ctx_t *c) { return 4.0 * (M_ * K_ + K_ * N_ + M_ * N_); }
static long mm_cost(const ctx_t *c) { return K_; }
static double mm_ref(ctx_t *c, long idx, double *scale) {
  long i = idx / N_, j = idx % N_;
  double s = 0, a = 0;
  for (long k = 0; k < K_; k++) {
    double t = (double)c->in[0][i * K_ + k] * c->in[1][k * N_ + j];
    s += t;
    a += fabs(t);
  }
  *scale = a;
  return s;
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
  c->in[0] = rand_buf(B_ * M_ * K_);
  c->in[1] = rand_buf(B_ * K_ * N_);
  set_out(c, B_ * M_ * N_);
}
static double bmm_flops(const ctx_t *c) { return 2.0 * B_ * M_ * N_ * K_; }
static double bmm_bytes(const ctx_t *c) { return 4.0 * B_ * (M_ * K_ + K_ * N_ + M_ * N_); }
static long bmm_cost(const ctx_t *c) { return K_; }
static double bmm_ref(ctx_t *c, long idx, double *scale) {
  long b = idx / (M_ * N_), i = idx / N_ % M_, j = idx % N_;
  const float *A = c->in[0] + b * M_ * K_, *B = c->in[1] + b * K_ * N_;
  double s = 0, a = 0;
  for (long k = 0; k < K_; k++) {
    double t = (double)A[i * K_ + k] * B[k * N_ + j];
    s += t;
    a += fabs(t);
  }
  *scale = a;
  return s;
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

/* ---- gemv: y[M] = A[M, N] x[N] ------------------------------------------ */
#define M_ c->p[0]
#define N_ c->p[1]

static void gemv_setup(ctx_t *c) {
  c->in[0] = rand_buf(M_ * N_);
  c->in[1] = rand_buf(N_);
  set_out(c, M_);
}
static double gemv_flops(const ctx_t *c) { return 2.0 * M_ * N_; }
static double gemv_bytes(const ctx_t *c) { return 4.0 * (M_ * N_ + N_ + M_); }
static long gemv_cost(const ctx_t *c) { return N_; }
static double gemv_ref(ctx_t *c, long i, double *scale) {
  double s = 0, a = 0;
  for (long j = 0; j < N_; j++) {
    double t = (double)c->in[0][i * N_ + j] * c->in[1][j];
    s += t;
    a += fabs(t);
  }
  *scale = a;
  return s;
}
static void gemv_sgemv(ctx_t *c) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, M_, N_, 1.0f, c->in[0], N_, c->in[1], 1, 0.0f, c->out, 1);
}
#undef M_
#undef N_

/* ---- conv2d_nhwc: Y[n, y, x, f] = sum(r, s, c) Xpad[n, y+r, x+s, c] Wt[r, s, c, f]
 * as im2col (rows: output pixels, columns: (r, s, c), the filter's own order)
 * and one sgemm with the filter as a (R*S*C) x F matrix. */
#define N_ c->p[0]
#define H_ c->p[1]
#define W_ c->p[2]
#define C_ c->p[3]
#define F_ c->p[4]
#define R_ c->p[5]
#define S_ c->p[6]
#define P_ c->p[7]
#define OH_ (H_ + 2 * P_ - R_ + 1)
#define OW_ (W_ + 2 * P_ - S_ + 1)
#define ROWS_ (N_ * OH_ * OW_)
#define KK_ (R_ * S_ * C_)

static void conv_setup(ctx_t *c) {
  if (OH_ < 1 || OW_ < 1) {
    fprintf(stderr, "bench_baseline: conv2d_nhwc: the filter (R=%ld, S=%ld) is larger than the padded image (%ld x %ld)\n",
            R_, S_, H_ + 2 * P_, W_ + 2 * P_);
    exit(2);
  }
  c->in[0] = rand_buf(N_ * H_ * W_ * C_);
  c->in[1] = rand_buf(KK_ * F_);
  c->work = xalloc(ROWS_ * KK_);
  set_out(c, ROWS_ * F_);
}
static double conv_flops(const ctx_t *c) { return 2.0 * ROWS_ * F_ * KK_; }
static double conv_bytes(const ctx_t *c) { return 4.0 * (N_ * H_ * W_ * C_ + KK_ * F_ + ROWS_ * F_); }
static long conv_cost(const ctx_t *c) { return KK_; }
static double conv_ref(ctx_t *c, long idx, double *scale) {
  long f = idx % F_, pix = idx / F_, ox = pix % OW_, oy = pix / OW_ % OH_, n = pix / (OW_ * OH_);
  double s = 0, a = 0;
  for (long r = 0; r < R_; r++)
    for (long q = 0; q < S_; q++) {
      long ih = oy + r - P_, iw = ox + q - P_;
      if (ih < 0 || ih >= H_ || iw < 0 || iw >= W_) continue;
      for (long ch = 0; ch < C_; ch++) {
        double t = (double)c->in[0][((n * H_ + ih) * W_ + iw) * C_ + ch] * c->in[1][((r * S_ + q) * C_ + ch) * F_ + f];
        s += t;
        a += fabs(t);
      }
    }
  *scale = a;
  return s;
}
static void im2col_rows(ctx_t *c, long lo, long hi) {
  for (long row = lo; row < hi; row++) {
    long ox = row % OW_, oy = row / OW_ % OH_, n = row / (OW_ * OH_);
    float *dst = c->work + row * KK_;
    for (long r = 0; r < R_; r++)
      for (long q = 0; q < S_; q++, dst += C_) {
        long ih = oy + r - P_, iw = ox + q - P_;
        if (ih < 0 || ih >= H_ || iw < 0 || iw >= W_) memset(dst, 0, sizeof(float) * (size_t)C_);
        else memcpy(dst, c->in[0] + ((n * H_ + ih) * W_ + iw) * C_, sizeof(float) * (size_t)C_);
      }
  }
}
static void conv_gemm_rows(ctx_t *c, long lo, long hi) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, F_, KK_, 1.0f, c->work + lo * KK_, KK_, c->in[1], F_,
              0.0f, c->out + lo * F_, F_);
}
static void conv_im2col_sgemm(ctx_t *c) {
  long rows = ROWS_;
#pragma omp parallel for num_threads(c->threads) schedule(static)
  for (long row = 0; row < rows; row++) im2col_rows(c, row, row + 1);
  conv_gemm_rows(c, 0, rows);
}
static void conv_split_body(ctx_t *c, int tid, int nth) {
  long lo, hi;
  share(ROWS_, 16, tid, nth, &lo, &hi);
  if (lo >= hi) return;
  im2col_rows(c, lo, hi);
  conv_gemm_rows(c, lo, hi);
}
static void conv_split(ctx_t *c) { split_run(c, conv_split_body); }
#undef N_
#undef H_
#undef W_
#undef C_
#undef F_
#undef R_
#undef S_
#undef P_
#undef OH_
#undef OW_
#undef ROWS_
#undef KK_

/* ---- dense_bias_gelu: Y = gelu_tanh(X W^T + bias), W as OUT x IN ---------- */
#define B_ c->p[0]
#define IN_ c->p[1]
#define OUT_ c->p[2]

static void dense_setup(ctx_t *c) {
  c->in[0] = rand_buf(B_ * IN_);
  c->in[1] = rand_buf(OUT_ * IN_);
  c->in[2] = rand_buf(OUT_);
  set_out(c, B_ * OUT_);
}
static double dense_flops(const ctx_t *c) { return 2.0 * B_ * IN_ * OUT_; }
static double dense_bytes(const ctx_t *c) { return 4.0 * (B_ * IN_ + OUT_ * IN_ + OUT_ + B_ * OUT_); }
static long dense_cost(const ctx_t *c) { return IN_; }
static double dense_ref(ctx_t *c, long idx, double *scale) {
  long b = idx / OUT_, o = idx % OUT_;
  double z = c->in[2][o], a = fabs(z);
  for (long k = 0; k < IN_; k++) {
    double t = (double)c->in[0][b * IN_ + k] * c->in[1][o * IN_ + k];
    z += t;
    a += fabs(t);
  }
  *scale = a + 1.0; /* gelu's slope is at most 1.13; the 1 covers tanh's approximation */
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
  c->in[0] = rand_buf(M_ * N_);
  set_out(c, M_ * N_);
}
static double rows_bytes(const ctx_t *c) { return 8.0 * M_ * N_; }
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
  c->in[1] = rand_buf(N_);
  c->in[2] = rand_buf(N_);
}
static double ln_flops(const ctx_t *c) { return 8.0 * M_ * N_; }
static double ln_bytes(const ctx_t *c) { return 4.0 * (2 * M_ * N_ + 2 * N_); }
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

static const bcase_t cases[] = {
    {"matmul", "gflops", {"M", "N", "K"}, {1024, 1024, 1024}, mm_setup, mm_flops, mm_bytes, mm_cost, mm_ref,
     {{"cblas_sgemm", "OpenBLAS cblas_sgemm, its own threads", mm_sgemm, NULL, NULL}}},
    {"batch_matmul", "gflops", {"BATCH", "M", "N", "K"}, {16, 128, 128, 64}, bmm_setup, bmm_flops, bmm_bytes, bmm_cost,
     bmm_ref,
     {{"sgemm_loop", "a loop of OpenBLAS cblas_sgemm, its own threads", bmm_loop, NULL, NULL},
      {"sgemm_per_thread", "batches split over OpenMP threads, one-thread cblas_sgemm each", bmm_split, NULL, NULL}}},
    {"gemv", "gbps", {"M", "N"}, {4096, 4096}, gemv_setup, gemv_flops, gemv_bytes, gemv_cost, gemv_ref,
     {{"cblas_sgemv", "OpenBLAS cblas_sgemv, its own threads", gemv_sgemv, NULL, NULL}}},
    {"conv2d_nhwc", "gflops", {"N", "H", "W", "C", "F", "R", "S", "P"}, {1, 56, 56, 64, 64, 3, 3, 1}, conv_setup,
     conv_flops, conv_bytes, conv_cost, conv_ref,
     {{"im2col_sgemm", "OpenMP im2col, then one OpenBLAS cblas_sgemm on its own threads", conv_im2col_sgemm, NULL, NULL},
      {"im2col_sgemm_per_thread", "output rows split over OpenMP threads, im2col + one-thread cblas_sgemm each",
       conv_split, NULL, NULL}}},
    {"dense_bias_gelu", "gflops", {"B", "IN", "OUT"}, {128, 768, 3072}, dense_setup, dense_flops, dense_bytes,
     dense_cost, dense_ref,
     {{"sgemm_epilogue", "OpenBLAS cblas_sgemm (its own threads), then an OpenMP vectorised bias+GELU pass",
       dense_sgemm_epilogue, NULL, NULL},
      {"sgemm_epilogue_per_thread", "columns split over OpenMP threads, one-thread cblas_sgemm + bias+GELU each",
       dense_split, NULL, NULL}}},
    {"softmax", "gbps", {"M", "N"}, {256, 1024}, rows_setup, softmax_flops, rows_bytes, rows_cost, softmax_ref,
     {{"vectorised_c", "OpenMP over rows, max / exp+sum / scale passes vectorised (libmvec expf)", softmax_run, NULL,
       NULL}}},
    {"layer_norm", "gbps", {"M", "N"}, {4096, 1024}, ln_setup, ln_flops, ln_bytes, rows_cost, ln_ref,
     {{"vectorised_c", "OpenMP over rows, sum+sum of squares then normalise, vectorised", ln_run, NULL, NULL}}},
    {"stream", "gbps", {"N"}, {1L << 25}, stream_setup, stream_flops, copy_bytes, stream_cost, copy_ref,
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
  double median, min, max_err;
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
          "the check must then fail).\n\ncases and parameters (defaults):\n");
  for (int i = 0; i < NCASES; i++) {
    fprintf(f, "  %-16s", cases[i].name);
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
}

int main(int argc, char **argv) {
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
  rng_state = (uint64_t)seed;
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
           "\"gflops\": %.6g, \"gbps\": %.6g, \"checked\": %ld, \"of\": %ld, \"max_rel_err\": %.3g}",
           first ? "" : ",", w->name, w->what, res[i].median, res[i].min, res[i].repeats, flops / res[i].median * 1e-9,
           b / res[i].median * 1e-9, res[i].checked, c.out_n, res[i].max_err);
    first = 0;
  }
  printf("]}\n");
  free_ctx(&c);
  return 0;
}
