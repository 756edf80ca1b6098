/* tuned_cuda_host.h — runs the CUDA C that tuned generates on the host CPU.
 *
 * The "cuda-host" target's builder (measure/build_cc.c) compiles a
 * candidate's exact CUDA source as C++ with this header in front and a
 * launcher behind (`int tuned_entry_<kernel>(void **args)`, one tuned_host::launch per
 * kernel), so that the worker's CPU backend runs and verifies it like any
 * CPU candidate.  A kernel is run block after block; the threads of a block
 * are coroutines (ucontext) that run one at a time, each until its next
 * barrier, in an order shuffled at every barrier: a missing __syncthreads
 * shows up as a wrong result.  Warp shuffles are exchanges at warp-wide
 * meeting points, and so are nvcuda::wmma's loads, mma_sync and stores (a
 * warp's lanes must agree on them; the tile is computed once).  __shared__
 * arrays are function statics, one copy for the block's threads; every
 * block starts with them full of NaN bytes.  Built
 * with UBSan's alignment and bounds checks: a misaligned float4 access or an
 * index past a shared or local array stops the run with the place.
 *
 * What it cannot see: timing, bank conflicts, coalescing, register
 * pressure and spills, occupancy, true concurrency inside a warp (a race
 * between two threads of one warp that the hardware happens to order), and
 * the memory model beyond barriers.  Errors (a barrier only some threads
 * reach, a shuffle from a lane outside the mask or the block) print what and
 * where on stderr and abort: the worker reports them as a run error.
 * cp.async copies land when their thread waits for their group, not when
 * issued: a wait missing before the barrier leaves NaN bytes behind. */
#ifndef TUNED_CUDA_HOST_H
#define TUNED_CUDA_HOST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <functional>
#include <type_traits>
#include <vector>

/* ---- CUDA's spellings ------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
/* __shared__ arrays: function statics (one copy for a block's threads) in a
 * section of their own, so that each block can start with them poisoned. */
#define __shared__ static __attribute__((section("tuned_shared")))
#define __align__(n) __attribute__((aligned(n)))
extern "C" char __start_tuned_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_tuned_shared[] __attribute__((weak, visibility("hidden")));

struct dim3 {
  unsigned x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

static inline uint32_t tuned_host_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float tuned_host_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* IEEE half bits, converted with round to nearest even. */
struct __half {
  uint16_t bits;
};
static inline float __half2float(__half h) {
  uint32_t s = (uint32_t)(h.bits & 0x8000u) << 16, e = (h.bits >> 10) & 0x1f, m = h.bits & 0x3ffu, u;
  if (e == 0x1f) u = s | 0x7f800000u | (m << 13);
  else if (e) u = s | ((e + 112) << 23) | (m << 13);
  else if (!m) u = s;
  else {
    e = 113;
    while (!(m & 0x400u)) m <<= 1, e--;
    u = s | (e << 23) | ((m & 0x3ffu) << 13);
  }
  return tuned_host_float(u);
}
static inline __half __float2half(float f) {
  uint32_t x = tuned_host_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, q;
  if (a > 0x7f800000u) {
    q = 0x7e00u; /* NaN */
  } else if (a >= 0x38800000u) { /* normal (or overflowing) */
    q = (a - (112u << 23)) >> 13;
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (q & 1))) q++;
    if (q > 0x7c00u) q = 0x7c00u;
  } else if (a < 0x33000000u) { /* under 2^-25: zero */
    q = 0;
  } else { /* subnormal: units of 2^-24 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - (a >> 23);
    uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    q = m >> shift;
    if (rest > half || (rest == half && (q & 1))) q++;
  }
  __half h;
  h.bits = (uint16_t)(sign | q);
  return h;
}

/* bfloat16 bits: the top half of a float, rounded to nearest even. */
struct __nv_bfloat16 {
  uint16_t bits;
};
static inline float __bfloat162float(__nv_bfloat16 h) { return tuned_host_float((uint32_t)h.bits << 16); }
static inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u = tuned_host_bits(f);
  __nv_bfloat16 h;
  h.bits = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return h;
}

/* ---- the block's threads ------------------------------------------------------ */

namespace tuned_host {

enum { RUN, AT_BARRIER, AT_WARP, DONE };

/* A cp.async copy in flight: its source read when issued, its destination
 * written when the issuing thread waits for its group. */
struct pending_copy {
  void *dst;
  unsigned char data[16];
  int bytes;
  unsigned group;
};

struct thread {
  ucontext_t ctx;
  dim3 idx;
  int lin, state;
  uint64_t slot; /* a value offered to the warp's shuffle */
  unsigned shuffles;
  std::vector<pending_copy> copies;
  unsigned groups; /* cp.async groups committed */
  unsigned collectives; /* warp-wide tensor-core operations made */
};

/* A warp's tensor-core operation: the lane that gets there first (after
 * all met) computes it into `tile`, the others take it. */
struct warp_state {
  unsigned seq; /* the operation whose result is in tile */
  float tile[256];
};

inline thread *cur;
inline dim3 block_idx, block_dim, grid_dim;
inline ucontext_t sched;
inline std::vector<thread> threads;
inline std::vector<warp_state> warps;
inline const std::function<void()> *body;
inline char *stacks;
inline size_t nstacks;
inline uint64_t rng = 0x9e3779b97f4a7c15ull;
inline const char *kernel_name = "";

/* Each thread's stack: 1 MiB (a thread's local arrays are under 512 KiB),
 * reserved lazily, with a guard page below it. */
static const size_t STACK = 1u << 20;

[[noreturn]] inline void fail(const char *fmt, const char *what) {
  fprintf(stderr, "cuda-host: kernel %s, block (%u, %u, %u): ", kernel_name, block_idx.x, block_idx.y,
          block_idx.z);
  fprintf(stderr, fmt, what);
  fputc('\n', stderr);
  fflush(stderr);
  abort();
}

inline void wait(int state) {
  cur->state = state;
  swapcontext(&cur->ctx, &sched);
}

inline void trampoline() {
  (*body)();
  if (!cur->copies.empty()) fail("%s", "a thread exited with cp.async copies it never waited for");
  cur->state = DONE;
}

inline uint64_t next_random() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

inline void ensure_stacks(size_t n) {
  if (n <= nstacks) return;
  if (stacks) munmap(stacks, nstacks * STACK);
  void *p = mmap(NULL, n * STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail("%s", "cannot reserve the threads' stacks");
  stacks = (char *)p;
  nstacks = n;
  long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < n; i++) mprotect(stacks + i * STACK, (size_t)page, PROT_NONE);
}

/* Releases the threads waiting at warp or block barriers, if every live
 * thread of the group waits there; false when nothing can move. */
inline bool release(int n) {
  bool moved = false;
  for (int w = 0; w < n; w += 32) {
    int live = 0, waiting = 0;
    for (int i = w; i < n && i < w + 32; i++) {
      live += threads[i].state != DONE;
      waiting += threads[i].state == AT_WARP;
    }
    if (waiting && waiting == live) {
      for (int i = w; i < n && i < w + 32; i++)
        if (threads[i].state == AT_WARP) threads[i].state = RUN;
      moved = true;
    }
  }
  if (moved) return true;
  int live = 0, waiting = 0;
  for (int i = 0; i < n; i++) {
    live += threads[i].state != DONE;
    waiting += threads[i].state == AT_BARRIER;
  }
  if (live == 0) return false;
  if (waiting != live)
    fail("%s", "deadlock: some threads wait at __syncthreads while others wait at a warp shuffle");
  if (live != n) fail("%s", "__syncthreads reached by some threads of the block after others exited");
  for (int i = 0; i < n; i++) threads[i].state = RUN;
  return true;
}

inline void run_block(int n) {
  uintptr_t lo = (uintptr_t)__start_tuned_shared, hi = (uintptr_t)__stop_tuned_shared;
  if (lo && hi > lo) memset(__start_tuned_shared, 0xFF, hi - lo); /* NaN bytes, as cuda_prepare's poison */
  std::vector<int> order((size_t)n);
  warps.assign((size_t)(n + 31) / 32, warp_state{0, {0}});
  for (int i = 0; i < n; i++) {
    thread &t = threads[(size_t)i];
    t.lin = i;
    t.idx = dim3{(unsigned)i % block_dim.x, (unsigned)i / block_dim.x % block_dim.y,
                 (unsigned)i / (block_dim.x * block_dim.y)};
    t.state = RUN;
    t.shuffles = 0;
    t.copies.clear();
    t.groups = 0;
    t.collectives = 0;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stacks + (size_t)i * STACK;
    t.ctx.uc_stack.ss_size = STACK;
    t.ctx.uc_link = &sched;
    makecontext(&t.ctx, (void (*)())trampoline, 0);
  }
  for (;;) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (threads[(size_t)i].state == RUN) order[(size_t)k++] = i;
    if (k == 0) {
      if (!release(n)) return;
      continue;
    }
    for (int i = k - 1; i > 0; i--) { /* a new order at every meeting point */
      int j = (int)(next_random() % (uint64_t)(i + 1)), x = order[(size_t)i];
      order[(size_t)i] = order[(size_t)j];
      order[(size_t)j] = x;
    }
    for (int i = 0; i < k; i++) {
      cur = &threads[(size_t)order[(size_t)i]];
      swapcontext(&sched, &cur->ctx);
    }
  }
}

/* Runs kernel `k` (a call of it with the launch's arguments) over the grid. */
inline void launch(const char *name, dim3 grid, dim3 block, const std::function<void()> &k) {
  kernel_name = name;
  grid_dim = grid;
  block_dim = block;
  int n = (int)(block.x * block.y * block.z);
  if (n < 1 || n > 1024) fail("%s", "a block of 1 to 1024 threads is needed");
  if (threads.size() < (size_t)n) threads.resize((size_t)n);
  ensure_stacks((size_t)n);
  body = &k;
  const char *seed = getenv("TUNED_HOST_SEED");
  rng = seed && *seed ? strtoull(seed, NULL, 10) * 0x9e3779b97f4a7c15ull + 1 : 0x9e3779b97f4a7c15ull;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        block_idx = dim3{x, y, z};
        run_block(n);
      }
  cur = NULL;
}

/* A warp shuffle: every thread offers its value, all meet, each takes the
 * source lane's value, all meet again before the offers can change. */
template <typename T> T exchange(unsigned mask, T v, int src, const char *what) {
  int lane = cur->lin & 31, base = cur->lin - lane, n = (int)(block_dim.x * block_dim.y * block_dim.z);
  if (!(mask >> lane & 1u)) fail("%s called by a lane outside its mask", what);
  if (src < 0 || src > 31 || !(mask >> src & 1u) || base + src >= n)
    fail("%s reads a lane outside its mask or the block", what);
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffled values are at most 8 bytes");
  memcpy(&cur->slot, &v, sizeof v);
  wait(AT_WARP);
  T r;
  memcpy(&r, &threads[(size_t)(base + src)].slot, sizeof r);
  wait(AT_WARP);
  return r;
}

/* What a lane brings to a warp-wide tensor-core operation: every lane of
 * the warp must bring the same (the operation, pointer, leading dimension,
 * layout and the fragments' contents). */
struct collective_args {
  const char *op;
  const void *ptr;
  unsigned ldm;
  int layout;
  const void *frag[3];
  size_t frag_bytes[3];
};

/* The warp's lanes meet; each checks that it brought what the first lane
 * did, and all meet again; true for the one lane that is to compute the
 * result into the warp's tile (the others take it from there before
 * warp_done). */
inline bool warp_meet(const collective_args &a) {
  int lane = cur->lin & 31, base = cur->lin - lane, n = (int)(block_dim.x * block_dim.y * block_dim.z);
  if (base + 32 > n) fail("nvcuda::wmma::%s in a warp of fewer than 32 threads (the block's size is not a multiple of 32)", a.op);
  cur->collectives++;
  cur->slot = (uint64_t)(uintptr_t)&a;
  wait(AT_WARP);
  for (int i = base; i < base + 32; i++)
    if (threads[(size_t)i].state == DONE) fail("nvcuda::wmma::%s reached by some lanes of a warp after others exited", a.op);
  const collective_args &f = *(const collective_args *)(uintptr_t)threads[(size_t)base].slot;
  if (threads[(size_t)base].collectives != cur->collectives || strcmp(f.op, a.op))
    fail("lanes of a warp are at different tensor-core operations (%s)", a.op);
  if (f.ptr != a.ptr || f.ldm != a.ldm || f.layout != a.layout)
    fail("the lanes of a warp disagree on the pointer, leading dimension or layout of nvcuda::wmma::%s", a.op);
  for (int i = 0; i < 3; i++)
    if (a.frag[i] && memcmp(f.frag[i], a.frag[i], a.frag_bytes[i]))
      fail("the lanes of a warp hold different fragments at nvcuda::wmma::%s", a.op);
  wait(AT_WARP); /* every lane checked before any writes its result (mma_sync's d may be its c) */
  warp_state &w = warps[(size_t)(base / 32)];
  if (w.seq == cur->collectives) return false;
  w.seq = cur->collectives;
  return true;
}

inline float *warp_tile() { return warps[(size_t)(cur->lin / 32)].tile; }

/* Every lane took the result (the lanes' arguments, on their stacks, are
 * not read any more). */
inline void warp_done() { wait(AT_WARP); }

inline void cp_async(void *d, const void *s, int bytes) {
  if ((uintptr_t)d % (uintptr_t)bytes || (uintptr_t)s % (uintptr_t)bytes) fail("%s", "misaligned cp.async");
  pending_copy p;
  p.dst = d;
  memcpy(p.data, s, (size_t)bytes);
  p.bytes = bytes;
  p.group = cur->groups;
  cur->copies.push_back(p);
}

/* cp.async.wait_group n: the copies of every committed group but the n
 * newest land. */
inline void cp_wait(unsigned n) {
  std::vector<pending_copy> &q = cur->copies;
  size_t kept = 0;
  for (size_t i = 0; i < q.size(); i++) {
    if (q[i].group + n < cur->groups) memcpy(q[i].dst, q[i].data, (size_t)q[i].bytes);
    else q[kept++] = q[i];
  }
  q.resize(kept);
}

} /* namespace tuned_host */

/* cp.async as the generated code calls it (codegen/pipeline.c): copies are
 * deferred to the issuing thread's wait, so a missing wait reads NaN bytes. */
inline void tuned_cp_async4(void *d, const void *s) { tuned_host::cp_async(d, s, 4); }
inline void tuned_cp_async8(void *d, const void *s) { tuned_host::cp_async(d, s, 8); }
inline void tuned_cp_async16(void *d, const void *s) { tuned_host::cp_async(d, s, 16); }
inline void tuned_cp_commit() { tuned_host::cur->groups++; }
template <int N> inline void tuned_cp_wait() { tuned_host::cp_wait((unsigned)N); }

/* ---- nvcuda::wmma: warp-wide tensor-core operations ------------------------------- */

/* A fragment holds the warp's whole tile in every lane, row-major (the real
 * ones spread it over the lanes in a layout code must not rely on: the
 * generated code only touches elements uniformly).  load_matrix_sync,
 * mma_sync and store_matrix_sync are warp-wide: all 32 lanes meet, must
 * bring the same pointer, leading dimension and fragments, and the result is
 * computed once: products of float16/bfloat16 (exact in float32) and of
 * tf32 (float32 with the 13 low mantissa bits dropped, as the tensor cores
 * read it) summed in float32 along k.  Addresses must be 32-byte aligned and
 * leading dimensions multiples of 16 bytes, as on the GPU. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <typename T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  typedef typename storage<T>::type element_type;
  enum { rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols, num_elements = rows * cols };
  element_type x[num_elements];
};

inline float to_float(__half h) { return __half2float(h); }
inline float to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
inline float to_float(float f) { return f; }

/* cvt.rna.tf32.f32: to nearest, ties away from zero, 10 bits of mantissa. */
inline float __float_to_tf32(float f) {
  uint32_t u = tuned_host_bits(f);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return tuned_host_float(u);
}

inline void check_mem(const char *op, const void *p, unsigned ldm, size_t elem) {
  if ((uintptr_t)p % 32) tuned_host::fail("nvcuda::wmma::%s: the pointer is not 32-byte aligned", op);
  if (ldm * elem % 16) tuned_host::fail("nvcuda::wmma::%s: the leading dimension is not a multiple of 16 bytes", op);
}

template <typename Use, int M, int N, int K, typename T, typename L, typename P>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
  typedef fragment<Use, M, N, K, T, L> F;
  const bool col = std::is_same<L, col_major>::value;
  tuned_host::collective_args a = {"load_matrix_sync", p, ldm, col, {NULL, NULL, NULL}, {0, 0, 0}};
  check_mem(a.op, p, ldm, sizeof(P));
  tuned_host::warp_meet(a);
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = p[col ? (size_t)c * ldm + r : (size_t)r * ldm + c];
  tuned_host::warp_done();
}

template <int M, int N, int K, typename T> void fill_fragment(fragment<accumulator, M, N, K, T> &f, T v) {
  for (int i = 0; i < M * N; i++) f.x[i] = v;
}

template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
  tuned_host::collective_args g = {"mma_sync", NULL, 0, 0, {&a, &b, &c}, {sizeof a, sizeof b, sizeof c}};
  const bool tf32 = std::is_same<T, precision::tf32>::value;
  if (tuned_host::warp_meet(g)) {
    float *t = tuned_host::warp_tile();
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float s = c.x[i * N + j];
        for (int k = 0; k < K; k++) {
          float x = to_float(a.x[i * K + k]), y = to_float(b.x[k * N + j]);
          if (tf32) x = tuned_host_float(tuned_host_bits(x) & 0xffffe000u), y = tuned_host_float(tuned_host_bits(y) & 0xffffe000u);
          s += x * y;
        }
        t[i * N + j] = s;
      }
  }
  memcpy(d.x, tuned_host::warp_tile(), sizeof d.x);
  tuned_host::warp_done();
}

template <int M, int N, int K>
void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
  tuned_host::collective_args a = {"store_matrix_sync", p, ldm, (int)l, {&f, NULL, NULL}, {sizeof f, 0, 0}};
  check_mem(a.op, p, ldm, sizeof(float));
  if (tuned_host::warp_meet(a))
    for (int r = 0; r < M; r++)
      for (int c = 0; c < N; c++) p[l == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[r * N + c];
  tuned_host::warp_done();
}
} /* namespace wmma */
} /* namespace nvcuda */

#define threadIdx (tuned_host::cur->idx)
#define blockIdx (tuned_host::block_idx)
#define blockDim (tuned_host::block_dim)
#define gridDim (tuned_host::grid_dim)

inline void __syncthreads() { tuned_host::wait(tuned_host::AT_BARRIER); }

template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  int lane = tuned_host::cur->lin & 31;
  return tuned_host::exchange(mask, v, lane / width * width + src % width, "__shfl_sync");
}

template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = tuned_host::cur->lin & 31;
  int src = lane % width + (int)delta < width ? lane + (int)delta : lane;
  return tuned_host::exchange(mask, v, src, "__shfl_down_sync");
}

template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  int lane = tuned_host::cur->lin & 31, src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;
  return tuned_host::exchange(mask, v, src, "__shfl_xor_sync");
}

#endif
