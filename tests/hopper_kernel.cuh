/* hopper_kernel.cuh — a hand-written Hopper kernel, the same text compiled by
 * NVRTC for sm_90a (test_codegen, after cg_hopper_helpers' text) and run on
 * the cuda-host harness (test_cuda_host.cc): one warpgroup of 128 threads
 * computes C[64, N] = A[64, 64] B[64, N] (float16 or bfloat16) with four wgmma m64nNk16 steps, A
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
__shared__ __align__(1024) unsigned short sa[64 * 64];
__shared__ __align__(1024) unsigned short sb[256 * 64];
__shared__ __align__(8) unsigned long long bar;

/* One K slice of either type: A and B are the 16-bit patterns of float16 or bfloat16. */
template <int N, bool BF16>
__device__ __forceinline__ void tuned_test_mma(tuned_wgmma_acc<N> &acc, unsigned long long da, unsigned long long db,
                                               int scale_d) {
  if (BF16) tuned_wgmma_bf16(acc, da, db, scale_d);
  else tuned_wgmma_f16(acc, da, db, scale_d);
}

template <int N, int SWIZZLE, bool BF16>
__global__ void __launch_bounds__(128) tuned_test_wgmma(const unsigned short *__restrict__ A,
                                                       const unsigned short *__restrict__ B, float *__restrict__ C,
                                                       unsigned sbo, int omit) {
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
    tuned_test_mma<N, BF16>(acc, tuned_wgmma_desc((const char *)sa + k * step, 128, sbo, SWIZZLE),
                            tuned_wgmma_desc((const char *)sb + k * step, 128, sbo, SWIZZLE), k > 0);
  tuned_wgmma_commit();
  if (!(omit & 1)) tuned_wgmma_wait<0>();
  int w = t / 32, l = t % 32;
  for (int i = 0; i < N / 2; i++) C[(16 * w + l / 4 + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * (l % 4) + i % 2] = acc[i];
}

/* The same product with A's and B's tiles brought by TMA: the 64 x 64 box of
 * A at (k0, m0) and the N x 64 box of B^T at (k0, n0), both 128-byte
 * swizzled (what wgmma's 128B mode reads), on one mbarrier that thread 0
 * arms with their bytes; the boxes may hang over the tensors' edges (zeros).
 * omit & 4 issues the wgmma before waiting for the mbarrier's phase. */
template <int N>
__global__ void __launch_bounds__(128) tuned_test_wgmma_tma(const __grid_constant__ tuned_tensor_map map_a,
                                                           const __grid_constant__ tuned_tensor_map map_b,
                                                           float *__restrict__ C, int k0, int m0, int n0, int omit) {
  int t = threadIdx.x;
  if (t == 0) tuned_mbar_init(&bar, 1);
  __syncthreads();
  if (t == 0) {
    tuned_mbar_arrive_expect_tx(&bar, (64 + N) * 64 * 2);
    tuned_tma_load_2d(sa, &map_a, k0, m0, &bar);
    tuned_tma_load_2d(sb, &map_b, k0, n0, &bar);
  }
  if (!(omit & 4))
    while (!tuned_mbar_try_wait(&bar, 0)) {
    }
  tuned_wgmma_acc<N> acc;
  tuned_wgmma_fence();
  for (int k = 0; k < 4; k++)
    tuned_wgmma_f16(acc, tuned_wgmma_desc((const char *)sa + k * 32, 128, 1024, TUNED_SWIZZLE_128B),
                    tuned_wgmma_desc((const char *)sb + k * 32, 128, 1024, TUNED_SWIZZLE_128B), k > 0);
  tuned_wgmma_commit();
  tuned_wgmma_wait<0>();
  int w = t / 32, l = t % 32;
  for (int i = 0; i < N / 2; i++) C[(16 * w + l / 4 + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * (l % 4) + i % 2] = acc[i];
}
