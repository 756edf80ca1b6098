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

#endif
