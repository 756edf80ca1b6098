/* baseline_vec.c — hand-written baselines for the operations BLAS does not
 * have (the GELU and batch-norm epilogues, softmax, layer norm, the depthwise
 * convolution, the Frobenius norm).  Built with -ffast-math so
 * that GCC vectorises expf/tanhf with glibc's libmvec (AVX2: 8 lanes, within
 * 4 ulp), as a library such as PyTorch or oneDNN would use vector math
 * approximations; every row is read from memory once (a 4 KB row stays in
 * L1 between passes). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "baseline_vec.h"

void bv_bias_gelu(float *Y, const float *bias, long rows, long cols, long ld) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  for (long r = 0; r < rows; r++) {
    float *y = Y + r * ld;
#pragma omp simd
    for (long c = 0; c < cols; c++) {
      float z = y[c] + bias[c];
      y[c] = 0.5f * z * (1.0f + tanhf(k0 * (z + k1 * z * z * z)));
    }
  }
}

void bv_softmax(const float *A, float *S, long M, long N) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < M; i++) {
    const float *a = A + i * N;
    float *s = S + i * N;
    float mx = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (long j = 0; j < N; j++) mx = a[j] > mx ? a[j] : mx;
#pragma omp simd reduction(+ : sum)
    for (long j = 0; j < N; j++) {
      float e = expf(a[j] - mx);
      s[j] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (long j = 0; j < N; j++) s[j] *= inv;
  }
}

void bv_layer_norm(const float *X, const float *gamma, const float *beta, float *Y, long M, long N) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < M; i++) {
    const float *x = X + i * N;
    float *y = Y + i * N;
    float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (long j = 0; j < N; j++) {
      s1 += x[j];
      s2 += x[j] * x[j];
    }
    float mean = s1 / (float)N;
    float rstd = 1.0f / sqrtf(s2 / (float)N - mean * mean + 1e-5f);
#pragma omp simd
    for (long j = 0; j < N; j++) y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
  }
}

void bv_bias_bn_relu(float *Y, const float *bias, const float *scale, const float *offset, long rows, long cols,
                     long ld) {
  for (long r = 0; r < rows; r++) {
    float *y = Y + r * ld;
#pragma omp simd
    for (long c = 0; c < cols; c++) {
      float z = (y[c] + bias[c]) * scale[c] + offset[c];
      y[c] = z > 0.0f ? z : 0.0f;
    }
  }
}

/* Vectors of 8 floats (GCC's vector extension: AVX2 registers, or halves of
 * AVX-512's), loaded and stored unaligned. */
typedef float v8f __attribute__((vector_size(32)));
static inline v8f v8_load(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

#define DW_VECS 4 /* channels per register tile: 4 vectors, 32 */
#define DW_PIX 4  /* output pixels along a row per register tile */

/* One register tile: DW_PIX output pixels from (n, oy, ox) on, channels c0
 * .. c0 + 32; every tap of every pixel inside the input along the row (the
 * caller checks).  16 vector accumulators; each weight vector loaded serves
 * DW_PIX pixels. */
static void dw_tile(const float *X, const float *Wt, float *Y, const bv_dwconv_t *s, long n, long oy, long ox,
                    long c0) {
  v8f acc[DW_PIX][DW_VECS] = {{{0}}};
  for (long rh = 0; rh < s->ks; rh++) {
    long ih = oy * s->stride + rh * s->dil - s->pad;
    if (ih < 0 || ih >= s->h) continue;
    const float *row = X + ((n * s->h + ih) * s->w + ox * s->stride - s->pad) * s->c + c0;
    for (long rw = 0; rw < s->ks; rw++) {
      const float *w = Wt + (rh * s->ks + rw) * s->c + c0, *in = row + rw * s->dil * s->c;
      v8f wv[DW_VECS];
#pragma GCC unroll 4
      for (int k = 0; k < DW_VECS; k++) wv[k] = v8_load(w + 8 * k);
#pragma GCC unroll 4
      for (int x = 0; x < DW_PIX; x++)
#pragma GCC unroll 4
        for (int k = 0; k < DW_VECS; k++) acc[x][k] += v8_load(in + x * s->stride * s->c + 8 * k) * wv[k];
    }
  }
#pragma GCC unroll 4
  for (int x = 0; x < DW_PIX; x++)
#pragma GCC unroll 4
    for (int k = 0; k < DW_VECS; k++)
      memcpy(Y + ((n * s->oh + oy) * s->ow + ox + x) * s->c + c0 + 8 * k, &acc[x][k], sizeof(v8f));
}

/* Channels [c0, c1) of output pixel (n, oy, ox), any position: the taps
 * outside skipped, the channels in an omp simd loop. */
static void dw_pixel(const float *X, const float *Wt, float *Y, const bv_dwconv_t *s, long n, long oy, long ox,
                     long c0, long c1) {
  float *y = Y + ((n * s->oh + oy) * s->ow + ox) * s->c;
#pragma omp simd
  for (long j = c0; j < c1; j++) y[j] = 0.0f;
  for (long rh = 0; rh < s->ks; rh++) {
    long ih = oy * s->stride + rh * s->dil - s->pad;
    if (ih < 0 || ih >= s->h) continue;
    for (long rw = 0; rw < s->ks; rw++) {
      long iw = ox * s->stride + rw * s->dil - s->pad;
      if (iw < 0 || iw >= s->w) continue;
      const float *in = X + ((n * s->h + ih) * s->w + iw) * s->c, *w = Wt + (rh * s->ks + rw) * s->c;
#pragma omp simd
      for (long j = c0; j < c1; j++) y[j] += in[j] * w[j];
    }
  }
}

void bv_depthwise_conv2d(const float *X, const float *Wt, float *Y, const bv_dwconv_t *s) {
  /* Output columns [xlo, xhi) read only inside the input along the row. */
  long last = (s->ks - 1) * s->dil - s->pad, xlo = (s->pad + s->stride - 1) / s->stride;
  long xhi = s->w - 1 - last < 0 ? 0 : (s->w - 1 - last) / s->stride + 1, cv = s->c / (8 * DW_VECS) * 8 * DW_VECS;
  if (xhi > s->ow) xhi = s->ow;
  long rows = s->n * s->oh;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; r++) {
    long n = r / s->oh, oy = r % s->oh;
    for (long ox = 0; ox < s->ow;) {
      if (ox >= xlo && ox + DW_PIX <= xhi && cv > 0) {
        for (long c0 = 0; c0 < cv; c0 += 8 * DW_VECS) dw_tile(X, Wt, Y, s, n, oy, ox, c0);
        for (long x = 0; x < DW_PIX && cv < s->c; x++) dw_pixel(X, Wt, Y, s, n, oy, ox + x, cv, s->c);
        ox += DW_PIX;
      } else {
        dw_pixel(X, Wt, Y, s, n, oy, ox, 0, s->c);
        ox++;
      }
    }
  }
}

#define NORM_BLOCK 4096

/* The sum of squares of a[lo, hi): float within blocks, double across. */
static double sum_squares(const float *a, long lo, long hi) {
  double s = 0;
  for (long b = lo; b < hi; b += NORM_BLOCK) {
    long e = hi - b < NORM_BLOCK ? hi : b + NORM_BLOCK;
    float t = 0.0f;
#pragma omp simd reduction(+ : t)
    for (long i = b; i < e; i++) t += a[i] * a[i];
    s += t;
  }
  return s;
}

void bv_norm_bmn(const float *A, float *D, long B, long mn) {
  if (B >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < B; b++) D[b] = (float)sqrt(sum_squares(A + b * mn, 0, mn));
    return;
  }
  for (long b = 0; b < B; b++) {
    const float *a = A + b * mn;
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (long k = 0; k < mn; k += NORM_BLOCK) s += sum_squares(a, k, k + NORM_BLOCK < mn ? k + NORM_BLOCK : mn);
    D[b] = (float)sqrt(s);
  }
}
