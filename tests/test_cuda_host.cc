// test_cuda_host.cc — the cuda-host harness header's 16-bit float
// conversions (what generated kernels call on the host) agree bit for bit
// with the C library's (what the reference evaluator and the workers use).
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

int main() {
  int bad = 0;
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
