/* hopper_kernel.cuh — a hand-written Hopper kernel, the same text compiled by
 * NVRTC for sm_90a (test_codegen, after cg_hopper_helpers' text) and run on
 * the cuda-host harness (test_cuda_host.cc): one warpgroup of 128 threads
 * computes C[64, N] = A[64, 64] B[64, N] with four wgmma m64nNk16 steps, A
 * (row-major) and B (given as B^T, N x 64) staged K-major in shared memory as
 * 8 x 8 core matrices (no swizzle: the K neighbours 128 bytes apart, the next
 * 8 rows 1024) or in 128-byte rows swizzled in 1024-byte atoms.  The stride
 * byte offset is a parameter (1024 is right) and `omit` leaves out the wgmma
 * wait (1) or the fence.proxy.async after the stores (2), so
 * that the tests can show the harness catching either. */

/* Byte offset of element (r, k) of a K-major tile of 64 halves per row. */
template <int SWIZZLE> __device__ __forceinline__ int tuned_test_offset(int r, int k) {
  if (SWIZZLE == TUNED_SWIZZLE_NONE) return (r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
  int o = (r / 8) * 1024 + (r % 8) * 128 + k * 2;
  return o ^ ((o >> 7) & 7) << 4;
}

/* At file scope, shared by the instances: the harness finds __shared__ data
 * by its section, which gcc does not give a template's static locals. */
__shared__ __align__(1024) __half sa[64 * 64];
__shared__ __align__(1024) __half sb[256 * 64];
__shared__ __align__(8) unsigned long long bar;

template <int N, int SWIZZLE>
__global__ void __launch_bounds__(128) tuned_test_wgmma(const __half *__restrict__ A, const __half *__restrict__ B,
                                                       float *__restrict__ C, unsigned sbo, int omit) {
  int t = threadIdx.x;
  if (t == 0) tuned_mbar_init(&bar, 128);
  __syncthreads();
  for (int i = t; i < 64 * 64; i += 128) sa[tuned_test_offset<SWIZZLE>(i / 64, i % 64) / 2] = A[i];
  for (int i = t; i < N * 64; i += 128) sb[tuned_test_offset<SWIZZLE>(i / 64, i % 64) / 2] = B[i];
  if (!(omit & 2)) tuned_fence_proxy_async(); /* these ordinary stores are read by the tensor cores (the async proxy) */
  tuned_mbar_arrive(&bar);
  while (!tuned_mbar_try_wait(&bar, 0)) {
  }
  tuned_wgmma_acc<N> acc;
  for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
  tuned_wgmma_fence();
  const int step = SWIZZLE == TUNED_SWIZZLE_NONE ? 256 : 32; /* bytes from one 16-wide K slice to the next */
  for (int k = 0; k < 4; k++)
    tuned_wgmma_f16(acc, tuned_wgmma_desc((const char *)sa + k * step, 128, sbo, SWIZZLE),
                    tuned_wgmma_desc((const char *)sb + k * step, 128, sbo, SWIZZLE), k > 0);
  tuned_wgmma_commit();
  if (!(omit & 1)) tuned_wgmma_wait<0>();
  int w = t / 32, l = t % 32;
  for (int i = 0; i < N / 2; i++) C[(16 * w + l / 4 + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * (l % 4) + i % 2] = acc[i];
}
