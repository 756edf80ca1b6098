/* hopper_kernel.cuh — a hand-written Hopper kernel, the same text compiled by
 * NVRTC for sm_90a (test_codegen, after cg_hopper_helpers' text) and run on
 * the cuda-host harness (test_cuda_host.cc): one warpgroup of 128 threads
 * computes C[64, N] = A[64, 64] B[64, N] (float16 or bfloat16) with four wgmma m64nNk16 steps, A
 * (row-major) and B (given as B^T, N x 64) staged K-major in shared memory as
 * 8 x 8 core matrices (no swizzle: the K neighbours 128 bytes apart, the next
 * 8 rows 1024) or in rows of 128, 64 or 32 bytes swizzled in atoms of 8 rows.
 * The stride byte offset is a parameter (0: the right one) and `omit` leaves
 * out the wgmma wait (1), the fence.proxy.async after the stores (2), the
 * wgmma.fence after zeroing the accumulator (8) or the wait for the
 * mbarrier's phase after the stores (16), so that the tests can show the
 * harness catching each. */

/* The width in bytes of a swizzled row (the swizzle's span). */
template <int SWIZZLE> __device__ __forceinline__ int tuned_test_width() {
  return SWIZZLE == TUNED_SWIZZLE_128B ? 128 : SWIZZLE == TUNED_SWIZZLE_64B ? 64 : 32;
}

/* Byte offset of element (r, k) of a K-major tile of `rows` x 64 halves: core
 * matrices, or rows as wide as the swizzle, the next 8 rows 8 widths on and
 * the next width of K (64- and 32-byte swizzles) past all the rows. */
template <int SWIZZLE> __device__ __forceinline__ int tuned_test_offset(int r, int k, int rows) {
  if (SWIZZLE == TUNED_SWIZZLE_NONE) return (r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
  const int w = tuned_test_width<SWIZZLE>(), per = w / 2;
  int o = (k / per) * rows * w + (r / 8) * 8 * w + (r % 8) * w + (k % per) * 2;
  return o ^ ((o >> 7) & (w / 16 - 1)) << 4;
}

/* Where the 16-wide K slice k of such a tile starts (the wgmma descriptor's
 * start address; the hardware swizzles by address bits, as the stores did). */
template <int SWIZZLE> __device__ __forceinline__ int tuned_test_slice(int k, int rows) {
  if (SWIZZLE == TUNED_SWIZZLE_NONE) return 256 * k;
  const int w = tuned_test_width<SWIZZLE>(), per = w / 2;
  return (16 * k / per) * rows * w + (16 * k % per) * 2;
}

/* The stride byte offset: 8 rows on (1024 for core matrices and 128B rows). */
template <int SWIZZLE> __device__ __forceinline__ unsigned tuned_test_sbo() {
  return SWIZZLE == TUNED_SWIZZLE_NONE ? 1024 : 8 * tuned_test_width<SWIZZLE>();
}

/* At file scope, shared by the instances: the harness finds __shared__ data
 * by its section, which gcc does not give a template's static locals. */
__shared__ __align__(1024) unsigned short sa[64 * 64];
__shared__ __align__(1024) unsigned short sb[256 * 64];
__shared__ __align__(8) unsigned long long bar;

/* One K slice of either type: A and B are the 16-bit patterns of float16 or
 * bfloat16; A is a descriptor or 4 registers. */
template <int N, bool BF16, typename TA>
__device__ __forceinline__ void tuned_test_mma(tuned_wgmma_acc<N> &acc, const TA &da, unsigned long long db,
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
  for (int i = t; i < 64 * 64; i += 128) sa[tuned_test_offset<SWIZZLE>(i / 64, i % 64, 64) / 2] = A[i];
  for (int i = t; i < N * 64; i += 128) sb[tuned_test_offset<SWIZZLE>(i / 64, i % 64, N) / 2] = B[i];
  if (!(omit & 2)) tuned_fence_proxy_async(); /* these ordinary stores are read by the tensor cores (the async proxy) */
  tuned_mbar_arrive(&bar);
  if (!(omit & 16))
    while (!tuned_mbar_try_wait(&bar, 0)) {
    }
  tuned_wgmma_acc<N> acc;
  for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
  if (!(omit & 8)) tuned_wgmma_fence();
  if (!sbo) sbo = tuned_test_sbo<SWIZZLE>();
  for (int k = 0; k < 4; k++)
    tuned_test_mma<N, BF16>(acc, tuned_wgmma_desc((const char *)sa + tuned_test_slice<SWIZZLE>(k, 64), 128, sbo, SWIZZLE),
                            tuned_wgmma_desc((const char *)sb + tuned_test_slice<SWIZZLE>(k, N), 128, sbo, SWIZZLE),
                            k > 0);
  tuned_wgmma_commit();
  if (!(omit & 1)) tuned_wgmma_wait<0>();
  int w = t / 32, l = t % 32;
  for (int i = 0; i < N / 2; i++) C[(16 * w + l / 4 + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * (l % 4) + i % 2] = acc[i];
}

/* The same product with A's and B's tiles brought by TMA: the 64 x 64 box of
 * A at (k0, m0) and the N x 64 box of B^T at (k0, n0), both 128-byte
 * swizzled (what wgmma's 128B mode reads), on one mbarrier that thread 0
 * arms with their bytes; the boxes may hang over the tensors' edges (zeros).
 * omit & 4 issues the wgmma before waiting for the mbarrier's phase; omit &
 * 32 arms it with A's bytes only, so that its phase would complete (and the
 * wgmma read B) before B's box landed. */
template <int N>
__global__ void __launch_bounds__(128) tuned_test_wgmma_tma(const __grid_constant__ tuned_tensor_map map_a,
                                                           const __grid_constant__ tuned_tensor_map map_b,
                                                           float *__restrict__ C, int k0, int m0, int n0, int omit) {
  int t = threadIdx.x;
  if (t == 0) tuned_mbar_init(&bar, 1);
  __syncthreads();
  if (t == 0) {
    tuned_mbar_arrive_expect_tx(&bar, ((omit & 32) ? 64 : 64 + N) * 64 * 2);
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

/* The same product with A from registers: each thread packs its fragment
 * of the 64 x 16 slice (rows 16 w + t / 4 and + 8, columns 2 (t % 4) and
 * + 8, two halves a register) straight from global memory; B as in the
 * first kernel, unswizzled.  A wgmma.fence follows the fragment's writes. */
template <int N, bool BF16>
__global__ void __launch_bounds__(128) tuned_test_wgmma_rs(const unsigned short *__restrict__ A,
                                                          const unsigned short *__restrict__ B, float *__restrict__ C) {
  int t = threadIdx.x, w = t / 32, l = t % 32;
  for (int i = t; i < N * 64; i += 128) sb[tuned_test_offset<TUNED_SWIZZLE_NONE>(i / 64, i % 64, N) / 2] = B[i];
  tuned_fence_proxy_async();
  __syncthreads();
  tuned_wgmma_acc<N> acc;
  for (int k = 0; k < 4; k++) {
    unsigned a[4];
    for (int j = 0; j < 4; j++) {
      int r = 16 * w + l / 4 + 8 * (j % 2), c = 16 * k + 2 * (l % 4) + 8 * (j / 2);
      a[j] = A[r * 64 + c] | (unsigned)A[r * 64 + c + 1] << 16;
    }
    tuned_wgmma_fence();
    tuned_test_mma<N, BF16>(acc, a, tuned_wgmma_desc((const char *)sb + 256 * k, 128, 1024, TUNED_SWIZZLE_NONE), k > 0);
  }
  tuned_wgmma_commit();
  tuned_wgmma_wait<0>();
  for (int i = 0; i < N / 2; i++) C[(16 * w + l / 4 + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * (l % 4) + i % 2] = acc[i];
}
