// test_cuda_host.cc — the cuda-host harness header's 16-bit float
// conversions (what generated kernels call on the host) agree bit for bit
// with the C library's (what the reference evaluator and the workers use).
// Its nvcuda::wmma tiles against a plain float32 sum, tf32 rounding; its
// Hopper wgmma and mbarriers (tests/hopper_kernel.cuh) against a matmul.
// A plain program (exit status 1 on the first mismatch): the header is C++.
#include "measure/cuda_host.h"
#include "hopper_kernel.cuh"

#include <sys/wait.h>

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

/* Hopper on the harness: tests/hopper_kernel.cuh's warpgroup computes
 * A[64, 64] B[64, N] through four wgmma m64nNk16 steps, for N = 64 and 128,
 * A and B in the core-matrix layout and 128-byte swizzled; every element
 * equals the product computed here (small multiples of 1/8 and 1/4: exact in
 * any order).  A wrong stride byte offset gives a wrong result; a missing
 * wgmma wait, a missing fence.proxy.async and an mbarrier phase that cannot
 * complete stop the run with the reason. */
static unsigned short ha[64 * 64], hb[256 * 64];
static float hc[64 * 256];

/* float16 or bfloat16 bits of an exact small value, and back */
static unsigned short bits16(float f, bool bf16) { return bf16 ? __float2bfloat16(f).bits : __float2half(f).bits; }
static float value16(unsigned short h, bool bf16) {
  return bf16 ? __bfloat162float(__nv_bfloat16{h}) : __half2float(__half{h});
}

/* SWIZZLE -1: A from registers (tuned_test_wgmma_rs). */
template <int N, int SWIZZLE, bool BF16 = false> static int wgmma_errors(unsigned sbo, int omit) {
  for (int i = 0; i < 64 * 64; i++) ha[i] = bits16((float)((i * 7 + 3) % 17 - 8) / 8.0f, BF16);
  for (int i = 0; i < N * 64; i++) hb[i] = bits16((float)((i * 5 + 1) % 13 - 6) / 4.0f, BF16);
  for (int i = 0; i < 64 * N; i++) hc[i] = NAN;
  if (SWIZZLE < 0)
    tuned_host::launch("tuned_test_wgmma_rs", dim3{1, 1, 1}, dim3{128, 1, 1},
                       [&] { tuned_test_wgmma_rs<N, BF16>(ha, hb, hc); });
  else
    tuned_host::launch("tuned_test_wgmma", dim3{1, 1, 1}, dim3{128, 1, 1},
                       [&] { tuned_test_wgmma<N, SWIZZLE < 0 ? 0 : SWIZZLE, BF16>(ha, hb, hc, sbo, omit); });
  int wrong = 0;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < N; j++) {
      float s = 0;
      for (int k = 0; k < 64; k++) s += value16(ha[i * 64 + k], BF16) * value16(hb[j * 64 + k], BF16);
      wrong += !(hc[i * N + j] == s);
    }
  return wrong;
}

/* TMA: A is 100 x 80 and B^T 200 x 80 (row-major, float16), the boxes at
 * k0 = 32 hang 16 columns over K, A's at m0 = 64 28 rows over M (zeros). */
static __half ta[100 * 80], tb[200 * 80];

template <int N> static int wgmma_tma_errors(int m0, int n0, int omit) {
  for (int i = 0; i < 100 * 80; i++) ta[i] = __float2half((float)((i * 7 + 3) % 17 - 8) / 8.0f);
  for (int i = 0; i < 200 * 80; i++) tb[i] = __float2half((float)((i * 5 + 1) % 13 - 6) / 4.0f);
  for (int i = 0; i < 64 * N; i++) hc[i] = NAN;
  tuned_tensor_map ma, mb;
  tuned_host::tensor_map_2d(&ma, ta, 2, 80, 100, 160, 64, 64, 128);
  tuned_host::tensor_map_2d(&mb, tb, 2, 80, 200, 160, 64, N, 128);
  const int k0 = 32;
  tuned_host::launch("tuned_test_wgmma_tma", dim3{1, 1, 1}, dim3{128, 1, 1},
                     [&] { tuned_test_wgmma_tma<N>(ma, mb, hc, k0, m0, n0, omit); });
  int wrong = 0;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < N; j++) {
      float s = 0;
      for (int k = k0; k < 80 && m0 + i < 100 && n0 + j < 200; k++)
        s += __half2float(ta[(m0 + i) * 80 + k]) * __half2float(tb[(n0 + j) * 80 + k]);
      wrong += !(hc[i * N + j] == s);
    }
  return wrong;
}

/* Runs f in a child process; true when it stopped with `want` on stderr. */
template <typename F> static bool stops_with(F f, const char *want) {
  int fds[2];
  if (pipe(fds)) return false;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    f();
    _exit(0);
  }
  close(fds[1]);
  char out[4096];
  size_t n = 0;
  ssize_t r;
  while ((r = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  bool ok = WIFSIGNALED(status) && strstr(out, want);
  if (!ok) fprintf(stderr, "test_cuda_host: want a stop with \"%s\", got status %d: %s\n", want, status, out);
  return ok;
}

/* mbarrier phases: 64 threads arrive twice on a barrier of 64; each waits
 * for parity 0, then 1.  try_wait of the phase before the current one is
 * true at once. */
__shared__ __align__(8) unsigned long long mb_bar;
static int mb_false, mb_order[2][64], mb_seen;
static void mbar_kernel(unsigned count) {
  if (threadIdx.x == 0) tuned_mbar_init(&mb_bar, count);
  __syncthreads();
  for (unsigned phase = 0; phase < 2; phase++) {
    mb_order[phase][threadIdx.x] = mb_seen++; /* when it arrived */
    tuned_mbar_arrive(&mb_bar);
    while (!tuned_mbar_try_wait(&mb_bar, phase)) mb_false++;
    if (mb_seen < 64 * (int)(phase + 1)) tuned_host::fail("%s", "try_wait returned true before every arrival");
    if (!tuned_mbar_try_wait(&mb_bar, phase)) tuned_host::fail("%s", "a completed phase waits again");
    __syncthreads();
  }
}

/* setmaxnreg against the CTA's register pool (issue 31's example): 384
 * threads of 168 registers at launch (64K register file): 64,512 in the
 * pool.  A producer warpgroup (the third) gives registers back with .dec
 * to P, the two consumer warpgroups take them with .inc to C, in whatever
 * order the threads run; regs_seen: what each consumer holds after. */
static int regs_seen[2];
template <int P, int C> static void regs_kernel() {
  int wg = (int)threadIdx.x / 128;
  if (wg == 2) {
    tuned_setmaxnreg_dec<P>();
    return;
  }
  tuned_setmaxnreg_inc<C>();
  if (threadIdx.x % 128 == 0) regs_seen[wg] = tuned_host::warpgroups[(size_t)wg].regs;
}

static int check_register_pool() {
  int bad = 0;
  long long saved = tuned_host::reg_file;
  tuned_host::reg_file = 65536;
  if (tuned_host::launch_regs(384) != 168 || tuned_host::launch_regs(256) != 248) {
    fprintf(stderr, "test_cuda_host: launch registers %d (384 threads), %d (256)\n", tuned_host::launch_regs(384),
            tuned_host::launch_regs(256));
    bad++;
  }
  for (int seed = 0; seed < 8 && !bad; seed++) { /* CUTLASS's 40 / 232: the pool meets both, in any order */
    char s[8];
    snprintf(s, sizeof s, "%d", seed);
    setenv("TUNED_HOST_SEED", s, 1);
    regs_seen[0] = regs_seen[1] = 0;
    tuned_host::launch("regs_ok", dim3{2, 1, 1}, dim3{384, 1, 1}, [] { regs_kernel<40, 232>(); });
    if (regs_seen[0] != 232 || regs_seen[1] != 232)
      fprintf(stderr, "test_cuda_host: setmaxnreg 40 / 232, seed %d: the consumers hold %d and %d\n", seed,
              regs_seen[0], regs_seen[1]), bad++;
  }
  unsetenv("TUNED_HOST_SEED");
  /* 96 / 208 frees 9,216 and asks for 10,240: the second consumer waits for ever */
  bad += !stops_with([] { tuned_host::launch("regs_deadlock", dim3{1, 1, 1}, dim3{384, 1, 1},
                                             [] { regs_kernel<96, 208>(); }); },
                     "waits for 5120 registers the CTA's pool cannot give (384 threads hold 168 registers each at "
                     "launch: 64512 in the pool, 4096 free");
  bad += !stops_with([] { tuned_host::launch("regs_deadlock", dim3{1, 1, 1}, dim3{384, 1, 1},
                                             [] { regs_kernel<96, 208>(); }); },
                     "deadlock: setmaxnreg.inc to 208 in warpgroup ");
  /* without a register file (a harness built before): setmaxnreg only meets its warpgroup */
  tuned_host::reg_file = 0;
  tuned_host::launch("regs_off", dim3{1, 1, 1}, dim3{384, 1, 1}, [] { regs_kernel<96, 208>(); });
  tuned_host::reg_file = saved;
  if (!bad) printf("test_cuda_host: setmaxnreg against the CTA's register pool: 40 / 232 met, 96 / 208 a deadlock\n");
  return bad;
}

static int check_hopper() {
  int bad = 0;
  int e[9] = {wgmma_errors<64, TUNED_SWIZZLE_NONE>(0, 0),       wgmma_errors<128, TUNED_SWIZZLE_NONE>(0, 0),
              wgmma_errors<64, TUNED_SWIZZLE_128B>(0, 0),       wgmma_errors<128, TUNED_SWIZZLE_128B>(0, 0),
              wgmma_errors<128, TUNED_SWIZZLE_128B, true>(0, 0), wgmma_errors<64, TUNED_SWIZZLE_64B>(0, 0),
              wgmma_errors<128, TUNED_SWIZZLE_32B>(0, 0),       wgmma_errors<64, -1>(0, 0),
              wgmma_errors<128, -1, true>(0, 0)};
  for (int i = 0; i < 9; i++)
    if (e[i] && !bad++) fprintf(stderr, "test_cuda_host: wgmma case %d: %d elements wrong\n", i, e[i]);
  int w0 = wgmma_errors<64, TUNED_SWIZZLE_NONE>(512, 0), w1 = wgmma_errors<128, TUNED_SWIZZLE_128B>(512, 0);
  if ((w0 < 64 * 32 || w1 < 64 * 64) && !bad++) /* rows 8-15 on may all be wrong */
    fprintf(stderr, "test_cuda_host: wgmma with a wrong stride byte offset: only %d and %d elements wrong\n", w0, w1);
  bad += !stops_with([] { wgmma_errors<64, TUNED_SWIZZLE_NONE>(0, 8); },
                     "on accumulator registers touched since the last wgmma.fence");
  bad += !stops_with([] { wgmma_errors<64, TUNED_SWIZZLE_NONE>(0, 1); },
                     "a wgmma accumulator is read or written before the wgmma.wait_group that completes it");
  bad += !stops_with([] { wgmma_errors<64, TUNED_SWIZZLE_128B>(0, 2); },
                     "reads shared memory written by ordinary stores with no fence.proxy.async since");
  bad += !stops_with([] { wgmma_errors<64, TUNED_SWIZZLE_128B>(0, 16); }, /* the data are there, unordered */
                     "with no mbarrier phase or __syncthreads ordering the store before the read");
  int t[3] = {wgmma_tma_errors<64>(0, 8, 0), wgmma_tma_errors<128>(64, 72, 0), wgmma_tma_errors<64>(64, 160, 0)};
  for (int i = 0; i < 3; i++)
    if (t[i] && !bad++) fprintf(stderr, "test_cuda_host: wgmma after TMA case %d: %d elements wrong\n", i, t[i]);
  bad += !stops_with([] { wgmma_tma_errors<64>(0, 0, 4); },
                     "reads shared memory that a TMA copy in flight writes (wait for its mbarrier phase first)");
  bad += !stops_with([] { wgmma_tma_errors<64>(0, 0, 32); }, /* expect_tx short of the boxes' bytes */
                     "TMA copies bring more bytes to an mbarrier phase than its expect_tx counted");
  mb_false = mb_seen = 0;
  tuned_host::launch("mbar_test", dim3{1, 1, 1}, dim3{64, 1, 1}, [] { mbar_kernel(64); });
  if (mb_false == 0 && !bad++) fprintf(stderr, "test_cuda_host: try_wait never returned false\n");
  bad += !stops_with([] { tuned_host::launch("mbar_test", dim3{1, 1, 1}, dim3{64, 1, 1}, [] { mbar_kernel(65); }); },
                     "deadlock: threads wait for an mbarrier phase that cannot complete");
  if (!bad)
    printf("test_cuda_host: wgmma m64n64k16/m64n128k16 (f16 and bf16; no swizzle, 128/64/32B swizzle, TMA, A in registers) and mbarrier "
           "phases agree\n");
  return bad != 0;
}

int main() {
  int bad = check_hopper();
  bad |= check_register_pool();
  bad |= check_wmma();
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
