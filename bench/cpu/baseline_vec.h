/* baseline_vec.h — the hand-written vectorised kernels of bench_baseline
 * (baseline_vec.c, built with -O3 -march=native -ffast-math -fopenmp so that
 * expf and tanhf vectorise through glibc's libmvec). */
#ifndef BENCH_CPU_BASELINE_VEC_H
#define BENCH_CPU_BASELINE_VEC_H

/* Y[r, c] = gelu_tanh(Y[r, c] + bias[c]) for rows [0, rows), columns
 * [0, cols); row r starts at Y + r * ld.  bias points at column 0's bias.
 * Serial: callers split the work. */
void bv_bias_gelu(float *Y, const float *bias, long rows, long cols, long ld);

/* Row softmax of the M x N matrix A into S, rows split over OpenMP threads. */
void bv_softmax(const float *A, float *S, long M, long N);

/* Layer norm of each row of the M x N matrix X (epsilon 1e-5, mean and
 * variance from the row sum and sum of squares) into Y, rows split over
 * OpenMP threads. */
void bv_layer_norm(const float *X, const float *gamma, const float *beta, float *Y, long M, long N);

/* Y[r, c] = max((Y[r, c] + bias[c]) * scale[c] + offset[c], 0) for rows
 * [0, rows), columns [0, cols), row r at Y + r * ld (convolution + bias +
 * batch norm + ReLU's epilogue).  Serial: callers split the work. */
void bv_bias_bn_relu(float *Y, const float *bias, const float *scale, const float *offset, long rows, long cols,
                     long ld);

/* A depthwise 2-D convolution's shape: X[n, h, w, c], the filter [ks, ks, c],
 * Y[n, oh, ow, c]; input row oy * stride + rh * dil - pad (likewise columns),
 * zero outside. */
typedef struct bv_dwconv {
  long n, h, w, c, ks, stride, pad, dil, oh, ow;
} bv_dwconv_t;

/* The depthwise convolution s of X by Wt into Y: output rows split over
 * OpenMP threads; register tiles of 4 pixels along a row x 32 channels,
 * accumulated over the taps. */
void bv_depthwise_conv2d(const float *X, const float *Wt, float *Y, const bv_dwconv_t *s);

/* D[b] = sqrt(sum of the squares of A[b, 0..mn)) for b < B: the matrices
 * split over OpenMP threads, or (fewer matrices than threads) each matrix's
 * blocks; float sums within a block of 4096, double across blocks. */
void bv_norm_bmn(const float *A, float *D, long B, long mn);

#endif
