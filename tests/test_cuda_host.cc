// test_cuda_host.cc — the cuda-host harness header's 16-bit float
// conversions (what generated kernels call on the host) agree bit for bit
// with the C library's (what the reference evaluator and the workers use).
// Its nvcuda::wmma tiles against a plain float32 sum, tf32 rounding.
// A plain program (exit status 1 on the first mismatch): the header is C++.
#include "measure/cuda_host.h"

extern "C" {
#include "common/common.h"
}

static int check(const char *what, uint32_t in, unsigned got, unsigned want) {
  if (got == want) return 0;
  fprintf(stderr, "test_cuda_host: %s(0x%08x): harness 0x%04x, library 0x%04x\n", what, in, got, want);
  return 1;
}

/* nvcuda::wmma on the harness: two warps each load a float16 A (row-major,
 * padded rows) and B (column-major), accumulate A B twice into a filled
 * fragment and store it; every element equals the float32 sum along k, bit
 * for bit.  And tf32 rounding: to nearest, ties away from zero. */
alignas(32) static __half wa[2][16 * 24], wb[2][16 * 16];
alignas(32) static float wout[2][16 * 16];

static void wmma_kernel() {
  using namespace nvcuda;
  int w = (int)threadIdx.y;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  wmma::load_matrix_sync(a, wa[w], 24);
  wmma::load_matrix_sync(b, wb[w], 16);
  wmma::mma_sync(c, a, b, c);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(wout[w], c, 16, wmma::mem_row_major);
}

static int check_wmma() {
  uint64_t r = 12345;
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 16 * 24; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      wa[w][i] = __float2half((float)(int)(r % 2001 - 1000) / 256.0f);
      if (i < 256) wb[w][i] = __float2half((float)(int)(r >> 20 & 1023) / 512.0f - 1.0f);
    }
  tuned_host::launch("wmma_test", dim3{1, 1, 1}, dim3{32, 2, 1}, [&] { wmma_kernel(); });
  int bad = 0;
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        float s = 0;
        for (int pass = 0; pass < 2; pass++)
          for (int k = 0; k < 16; k++) s += __half2float(wa[w][i * 24 + k]) * __half2float(wb[w][j * 16 + k]);
        if (tuned_host_bits(s) != tuned_host_bits(wout[w][i * 16 + j]) && !bad++)
          fprintf(stderr, "test_cuda_host: wmma warp %d C[%d, %d] = %g, want %g\n", w, i, j, wout[w][i * 16 + j], s);
      }
  static const uint32_t tf32[][2] = {{0x3f800000u, 0x3f800000u}, {0x3f801000u, 0x3f802000u}, {0x3f800800u, 0x3f800000u},
                                     {0xbf801000u, 0xbf802000u}, {0x3f801001u, 0x3f802000u}, {0x7f800000u, 0x7f800000u}};
  for (size_t i = 0; i < sizeof tf32 / sizeof tf32[0]; i++) {
    uint32_t got = tuned_host_bits(nvcuda::wmma::__float_to_tf32(tuned_host_float(tf32[i][0])));
    if (got != tf32[i][1] && !bad++)
      fprintf(stderr, "test_cuda_host: __float_to_tf32(0x%08x) = 0x%08x, want 0x%08x\n", tf32[i][0], got, tf32[i][1]);
  }
  if (!bad) printf("test_cuda_host: wmma tiles and tf32 rounding agree\n");
  return bad != 0;
}

int main() {
  int bad = check_wmma();
  /* every 16-bit pattern back to float and again */
  for (uint32_t h = 0; h < 0x10000 && !bad; h++) {
    __half x = {(uint16_t)h};
    __nv_bfloat16 y = {(uint16_t)h};
    float fx = __half2float(x), fy = __bfloat162float(y);
    if (tuned_host_bits(fx) != tuned_host_bits(tn_half_to_float((uint16_t)h)) && fx == fx)
      bad |= check("__half2float", h, tuned_host_bits(fx) >> 16, tuned_host_bits(tn_half_to_float((uint16_t)h)) >> 16);
    if (fy == fy) bad |= check("__bfloat162float", h, tuned_host_bits(fy) >> 16, tn_float_to_bf16(fy));
  }
  /* floats: every exponent with mantissas around the rounding ties, and a
   * pseudo-random sweep */
  uint64_t r = 0x9e3779b97f4a7c15ull;
  for (uint64_t i = 0; i < (1u << 22) && !bad; i++) {
    uint32_t u;
    if (i < (1u << 16)) {
      u = (uint32_t)(i >> 8) << 23 | (uint32_t)(i & 0xff) << 5 | 0x1000u * (i & 1) | (uint32_t)(i & 0x80) << 24;
    } else {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      u = (uint32_t)r;
    }
    float f = tuned_host_float(u);
    if (f != f) continue; /* NaN: both give a NaN; payloads may differ */
    bad |= check("__float2half", u, __float2half(f).bits, tn_float_to_half(f));
    bad |= check("__float2bfloat16", u, __float2bfloat16(f).bits, tn_float_to_bf16(f));
  }
  if (!bad) printf("test_cuda_host: conversions agree\n");
  return bad;
}
