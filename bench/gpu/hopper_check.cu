// hopper_check.cu — runs tests/hopper_kernel.cuh (the hand-written wgmma
// kernels that the test suite runs on the cuda-host harness and compiles
// with NVRTC) on a real Hopper GPU and compares every product with one
// computed here, so that the first GPU session confirms the harness's
// descriptor, swizzle and fragment layouts on hardware.  Built on the GPU
// machine by scripts/gpu-check:
//   nvcc -std=c++17 -arch=sm_90a -I DIR -o hopper_check hopper_check.cu
// with DIR holding hopper_helpers.cuh (bench/gpu/hopper_source's output) and
// hopper_kernel.cuh.  Prints one line per case; exits 1 on any mismatch.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>

#include "hopper_helpers.cuh"
#include "hopper_kernel.cuh"

// 16-bit patterns of small integers divided by 4: exact in float16 and
// bfloat16, and every product and sum exact in float32.
static unsigned short pattern(float v, bool bf16) {
  if (bf16) {
    unsigned u;
    std::memcpy(&u, &v, 4);
    return (unsigned short)(u >> 16);
  }
  __half h = __float2half(v);
  unsigned short s;
  std::memcpy(&s, &h, 2);
  return s;
}

static int failures = 0;

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("  %s: %s\n", #call, cudaGetErrorString(e_));                          \
      return false;                                                                     \
    }                                                                                   \
  } while (0)

template <int N, int SWIZZLE, bool BF16, bool RS>
static bool run_case(const char *name) {
  std::vector<float> a(64 * 64), bt(N * 64), want(64 * N, 0.0f), got(64 * N, -1.0f);
  std::vector<unsigned short> ha(64 * 64), hb(N * 64);
  unsigned seed = 12345u + N * 7 + SWIZZLE * 3 + BF16;
  for (int i = 0; i < 64 * 64; i++) {
    seed = seed * 1103515245u + 12345u;
    a[i] = (float)((int)(seed >> 16) % 9 - 4) / 4.0f;
    ha[i] = pattern(a[i], BF16);
  }
  for (int i = 0; i < N * 64; i++) {
    seed = seed * 1103515245u + 12345u;
    bt[i] = (float)((int)(seed >> 16) % 9 - 4) / 4.0f;
    hb[i] = pattern(bt[i], BF16);
  }
  for (int r = 0; r < 64; r++)
    for (int n = 0; n < N; n++)
      for (int k = 0; k < 64; k++) want[r * N + n] += a[r * 64 + k] * bt[n * 64 + k];
  unsigned short *da, *db;
  float *dc;
  CHECK(cudaMalloc(&da, ha.size() * 2));
  CHECK(cudaMalloc(&db, hb.size() * 2));
  CHECK(cudaMalloc(&dc, got.size() * 4));
  CHECK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0xff, got.size() * 4));
  if (RS) tuned_test_wgmma_rs<N, BF16><<<1, 128>>>(da, db, dc);
  else tuned_test_wgmma<N, SWIZZLE, BF16><<<1, 128>>>(da, db, dc, 0, 0);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(da), cudaFree(db), cudaFree(dc);
  int wrong = 0, first = -1;
  for (int i = 0; i < 64 * N; i++)
    if (!(got[i] == want[i])) wrong++, first = first < 0 ? i : first;
  std::printf("%-40s %s", name, wrong ? "WRONG" : "ok");
  if (wrong)
    std::printf(": %d of %d elements differ; first at row %d column %d: %g, expected %g", wrong, 64 * N, first / N,
                first % N, got[first], want[first]);
  std::printf("\n");
  failures += wrong != 0;
  return true;
}

int main() {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 9) {
    std::printf("hopper_check: needs a compute capability 9.x GPU (found %s)\n",
                cudaGetDeviceProperties(&p, 0) == cudaSuccess ? p.name : "none");
    return 2;
  }
  std::printf("hopper_check on %s (sm_%d%d): C[64, N] = A[64, 64] B[64, N] by wgmma, against the host\n", p.name,
              p.major, p.minor);
  bool ok = run_case<64, TUNED_SWIZZLE_NONE, false, false>("m64n64k16 f16, no swizzle") &&
            run_case<128, TUNED_SWIZZLE_NONE, false, false>("m64n128k16 f16, no swizzle") &&
            run_case<256, TUNED_SWIZZLE_NONE, false, false>("m64n256k16 f16, no swizzle") &&
            run_case<128, TUNED_SWIZZLE_128B, false, false>("m64n128k16 f16, 128B swizzle") &&
            run_case<128, TUNED_SWIZZLE_128B, true, false>("m64n128k16 bf16, 128B swizzle") &&
            run_case<128, TUNED_SWIZZLE_64B, true, false>("m64n128k16 bf16, 64B swizzle") &&
            run_case<128, TUNED_SWIZZLE_32B, true, false>("m64n128k16 bf16, 32B swizzle") &&
            run_case<64, TUNED_SWIZZLE_NONE, false, true>("m64n64k16 f16, A in registers") &&
            run_case<128, TUNED_SWIZZLE_NONE, true, true>("m64n128k16 bf16, A in registers");
  if (!ok) std::printf("hopper_check: a CUDA call failed (above)\n");
  std::printf("hopper_check: %s\n", ok && !failures ? "all products equal the host's" : "FAILURES");
  return ok && !failures ? 0 : 1;
}
