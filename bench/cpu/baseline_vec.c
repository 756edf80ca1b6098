/* baseline_vec.c — hand-written baselines for the operations BLAS does not
 * have (the GELU epilogue, softmax, layer norm).  Built with -ffast-math so
 * that GCC vectorises expf/tanhf with glibc's libmvec (AVX2: 8 lanes, within
 * 4 ulp), as a library such as PyTorch or oneDNN would use vector math
 * approximations; every row is read from memory once (a 4 KB row stays in
 * L1 between passes). */
#include <math.h>

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
