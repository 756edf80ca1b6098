/* tuned_cuda_host.h — runs the CUDA C that tuned generates on the host CPU.
 *
 * The "cuda-host" target's builder (measure/build_cc.c) compiles a
 * candidate's exact CUDA source as C++ with this header in front and a
 * launcher behind (`int tuned_entry_<kernel>(void **args)`, one tuned_host::launch per
 * kernel), so that the worker's CPU backend runs and verifies it like any
 * CPU candidate.  A kernel is run block after block (cluster after cluster); the threads of a block
 * are coroutines (ucontext) that run one at a time, each until its next
 * barrier, in an order shuffled at every barrier: a missing __syncthreads
 * shows up as a wrong result.  Warp shuffles are exchanges at warp-wide
 * meeting points, and so are __syncwarp and nvcuda::wmma's loads, mma_sync
 * and stores (a warp's lanes must agree on them; the tile is computed
 * once).  __shared__ arrays are function statics, one copy for the block's
 * threads; every block starts with them full of NaN bytes.  Built with
 * UBSan's alignment and bounds checks: a misaligned float4 access or an
 * index past a shared or local array stops the run with the place.
 *
 * What it cannot see: timing, bank conflicts, coalescing, register
 * pressure and spills, occupancy, true concurrency inside a warp (a race
 * between two threads of one warp that the hardware happens to order), and
 * the memory model beyond barriers.  Errors (a barrier only some threads
 * reach, a shuffle from a lane outside the mask or the block) print what and
 * where on stderr and abort: the worker reports them as a run error.
 * cp.async copies land when their thread waits for their group, not when
 * issued: a wait missing before the barrier leaves NaN bytes behind.
 * Hopper's wgmma meets a warpgroup (128 threads) and reads A and B through
 * their shared-memory descriptors; its results land at wgmma.wait_group,
 * mbarriers count arrivals and transaction bytes by phase, and TMA tiles
 * land when their phase completes (see cuda_host_hopper.h for what is
 * checked).  setmaxnreg moves registers between a warpgroup and its CTA's
 * pool: a .inc the pool cannot meet waits, and stops the run as a deadlock
 * when no other thread can give registers back ("Registers" below, and
 * cuda_host_hopper.h).  A launch with clusters (__cluster_dims__) runs each cluster's
 * CTAs together, taking turns, each with its own shared memory ("Clusters"
 * there).
 *
 * Three files, one header: this one (CUDA's spellings, the block's threads,
 * warp exchanges, cp.async), cuda_host_wmma.h (nvcuda::wmma) and
 * cuda_host_hopper.h (wgmma, mbarriers, TMA, clusters).  measure/embed.py
 * inlines the two into this one for the builder, which writes the result
 * next to every candidate as tuned_cuda_host.h. */
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

enum { RUN, AT_BARRIER, AT_WARP, AT_WARPGROUP, AT_MBAR, AT_CLUSTER, AT_REGS, DONE };

/* ---- Registers: the pool a CTA holds from its launch ------------------------------
 *
 * A kernel launched as __launch_bounds__(threads, 1) gets, per thread, the
 * register file over the threads in whole allocation units (8), at most
 * 255 (ptxas); the CTA holds threads x that many.  setmaxnreg.dec gives a
 * warpgroup's registers above N back to the pool, setmaxnreg.inc takes up
 * to N from it, waiting until the pool has them (the PTX ISA).  ptxas
 * gives such a kernel no more than its largest setmaxnreg count (240 at 256
 * threads, not 248): where that is under the bound, every .inc asks for no
 * more than the launch gave, which the harness keeps, so the pool it models
 * deadlocks exactly where the hardware's would.  Registers of exited warps
 * are not counted as returned: that is not documented.
 * The register file is the target's (max_registers_per_block, which the
 * builder defines as TUNED_HOST_REG_FILE); 0: setmaxnreg only meets its
 * warpgroup, as before the pool was modelled. */
#ifndef TUNED_HOST_REG_FILE
#define TUNED_HOST_REG_FILE 0
#endif
inline long long reg_file = TUNED_HOST_REG_FILE;

inline int launch_regs(int threads) {
  if (reg_file <= 0 || threads <= 0) return 0;
  long long per = reg_file / threads;
  return (int)((per < 255 ? per : 255) / 8 * 8);
}

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
  int cta; /* its CTA's rank in the cluster */
  uint64_t slot; /* a value offered to the warp's shuffle */
  unsigned shuffles;
  std::vector<pending_copy> copies;
  unsigned groups; /* cp.async groups committed */
  unsigned collectives; /* warp-wide tensor-core operations made */
  unsigned wg_ops; /* warpgroup-wide operations (wgmma) made */
  unsigned wg_fences; /* wgmma.fence executed */
  std::vector<struct wg_acc *> wg_pending; /* accumulators that wgmma operations in flight write */
  const void *mbar_spin; /* the mbarrier whose try_wait last returned false */
  const void *mbar_wait; /* the mbarrier this thread sleeps on (AT_MBAR) */
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
struct warpgroup_state;
inline std::vector<warpgroup_state> warpgroups;
struct mbarrier;
inline std::vector<mbarrier> mbars;
inline std::vector<unsigned char> proxy_view; /* shared memory as the async proxy (wgmma, TMA) may see it */
inline const std::function<void()> *body;
inline char *stacks;
inline size_t nstacks;
inline uint64_t rng = 0x9e3779b97f4a7c15ull;
inline const char *kernel_name = "";
inline int cluster_size = 1; /* CTAs of the launch's clusters (__cluster_dims__ along x), run together */

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
  if (!cur->wg_pending.empty()) fail("%s", "a thread exited with wgmma.mma_async results it never waited for "
                                         "(wgmma.wait_group)");
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

/* Releases the resident CTA's threads waiting at warp or warpgroup meeting
 * points where every live thread of the group waits there. */
inline bool release_groups(int n) {
  bool moved = false;
  for (int size = 32; size <= 128; size *= 4) /* warps (shuffles, wmma), warpgroups (wgmma) */
    for (int w = 0; w < n; w += size) {
      int live = 0, waiting = 0, state = size == 32 ? AT_WARP : AT_WARPGROUP;
      for (int i = w; i < n && i < w + size; i++) {
        live += threads[i].state != DONE;
        waiting += threads[i].state == state;
      }
      if (waiting && waiting == live) {
        for (int i = w; i < n && i < w + size; i++)
          if (threads[i].state == state) threads[i].state = RUN;
        moved = true;
      }
    }
  return moved;
}

/* The resident CTA's __syncthreads, once every live thread waits there. */
inline bool release_barrier(int n) {
  int live = 0, waiting = 0;
  for (int i = 0; i < n; i++) {
    live += threads[i].state != DONE;
    waiting += threads[i].state == AT_BARRIER;
  }
  if (!waiting || waiting != live) return false;
  if (live != n) fail("%s", "__syncthreads reached by some threads of the block after others exited");
  for (int i = 0; i < n; i++) threads[i].state = RUN;
  return true;
}

inline void hopper_block_start(int n);
inline void hopper_block_end();
inline long long regs_free();
inline bool release_regs(int n);
[[noreturn]] inline void regs_deadlock(int n);
inline void cta_enter(int rank, bool bytes);
inline void cluster_setup(int n, int cluster);
inline void cluster_released();

/* Thread i's context: its own stack, back to the scheduler when it returns.
 * Apart from run_block, whose loop variables the compiler would otherwise
 * see as clobbered (getcontext may "return twice"). */
__attribute__((noinline)) inline void start_context(thread &t, int i) {
  getcontext(&t.ctx);
  t.ctx.uc_stack.ss_sp = stacks + (size_t)i * STACK;
  t.ctx.uc_stack.ss_size = STACK;
  t.ctx.uc_link = &sched;
  makecontext(&t.ctx, (void (*)())trampoline, 0);
}

/* CTA `rank` of the cluster (resident) at its start: its shared memory
 * poisoned, its threads at the kernel's first line. */
inline void start_block(int n, int rank) {
  uintptr_t lo = (uintptr_t)__start_tuned_shared, hi = (uintptr_t)__stop_tuned_shared;
  if (lo && hi > lo) memset(__start_tuned_shared, 0xFF, hi - lo); /* NaN bytes, as cuda_prepare's poison */
  warps.assign((size_t)(n + 31) / 32, warp_state{0, {0}});
  hopper_block_start(n);
  for (int i = 0; i < n; i++) {
    thread &t = threads[(size_t)i];
    t.lin = i;
    t.cta = rank;
    t.idx = dim3{(unsigned)i % block_dim.x, (unsigned)i / block_dim.x % block_dim.y,
                 (unsigned)i / (block_dim.x * block_dim.y)};
    t.state = RUN;
    t.shuffles = 0;
    t.copies.clear();
    t.groups = 0;
    t.collectives = 0;
    t.wg_ops = t.wg_fences = 0;
    t.wg_pending.clear();
    t.mbar_spin = t.mbar_wait = NULL;
    start_context(t, rank * n + i);
  }
}

/* When no thread can run: the meeting points whose threads all came
 * (warps, warpgroups, each CTA's __syncthreads, then the cluster's
 * barrier) release them; false when every thread exited, and a deadlock
 * (stopped with its reason) when nothing else can move. */
inline bool release(int n) {
  bool moved = false;
  for (int r = 0; r < cluster_size; r++) {
    cta_enter(r, false);
    moved |= release_groups(n);
    moved |= release_regs(n);
  }
  for (int r = 0; r < cluster_size && !moved; r++) {
    cta_enter(r, false);
    moved |= release_barrier(n);
  }
  if (moved) return true;
  int live = 0, at_cluster = 0, sleeping = 0;
  for (int r = 0; r < cluster_size; r++) {
    cta_enter(r, false);
    int at_regs = 0;
    for (int i = 0; i < n; i++) {
      live += threads[i].state != DONE;
      at_cluster += threads[i].state == AT_CLUSTER;
      sleeping += threads[i].state == AT_MBAR;
      at_regs += threads[i].state == AT_REGS;
    }
    if (at_regs) regs_deadlock(n);
  }
  if (live == 0) return false;
  if (sleeping)
    fail("%s", "deadlock: threads wait for an mbarrier phase that cannot complete (too few arrivals or "
               "transaction bytes), while the others wait at barriers or have exited");
  if (at_cluster != live)
    fail("%s", "deadlock: some threads wait at __syncthreads or barrier.cluster while others wait at a warp shuffle, "
               "warpgroup operation or the other barrier");
  for (int r = 0; r < cluster_size; r++) { /* barrier.cluster: every thread of the cluster that has not exited */
    cta_enter(r, false);
    for (int i = 0; i < n; i++)
      if (threads[i].state == AT_CLUSTER) threads[i].state = RUN;
    cluster_released();
  }
  return true;
}

/* Runs the cluster whose first CTA is `first` (one CTA without clusters):
 * its CTAs start together and run in turns, each with its own shared
 * memory, in an order shuffled at every turn, until all their threads
 * exited. */
inline void run_cluster(int n, dim3 first) {
  for (int r = 0; r < cluster_size; r++) {
    cta_enter(r, true);
    block_idx = dim3{first.x + (unsigned)r, first.y, first.z};
    start_block(n, r);
  }
  std::vector<int> order((size_t)n), ctas((size_t)cluster_size);
  for (;;) {
    bool ran = false;
    for (int r = 0; r < cluster_size; r++) ctas[(size_t)r] = r;
    for (int i = cluster_size - 1; i > 0; i--) {
      int j = (int)(next_random() % (uint64_t)(i + 1)), x = ctas[(size_t)i];
      ctas[(size_t)i] = ctas[(size_t)j];
      ctas[(size_t)j] = x;
    }
    for (int q = 0; q < cluster_size; q++) {
      cta_enter(ctas[(size_t)q], true);
      int k = 0;
      for (int i = 0; i < n; i++)
        if (threads[(size_t)i].state == RUN) order[(size_t)k++] = i;
      for (int i = k - 1; i > 0; i--) { /* a new order at every meeting point */
        int j = (int)(next_random() % (uint64_t)(i + 1)), x = order[(size_t)i];
        order[(size_t)i] = order[(size_t)j];
        order[(size_t)j] = x;
      }
      for (int i = 0; i < k; i++) {
        cur = &threads[(size_t)order[(size_t)i]];
        swapcontext(&sched, &cur->ctx);
      }
      ran |= k > 0;
    }
    if (!ran && !release(n)) break;
  }
  for (int r = cluster_size - 1; r >= 0; r--) {
    cta_enter(r, true);
    hopper_block_end();
  }
}

/* Runs kernel `k` (a call of it with the launch's arguments) over the grid,
 * in clusters of `cluster` CTAs along x (its __cluster_dims__). */
inline void launch(const char *name, dim3 grid, dim3 block, const std::function<void()> &k, int cluster = 1) {
  kernel_name = name;
  grid_dim = grid;
  block_dim = block;
  int n = (int)(block.x * block.y * block.z);
  if (n < 1 || n > 1024) fail("%s", "a block of 1 to 1024 threads is needed");
  if (cluster < 1 || cluster > 8 || grid.x % (unsigned)cluster)
    fail("%s", "a cluster of 1 to 8 CTAs along x that divide the grid is needed");
  cluster_setup(n, cluster);
  ensure_stacks((size_t)n * (size_t)cluster);
  body = &k;
  const char *seed = getenv("TUNED_HOST_SEED");
  rng = seed && *seed ? strtoull(seed, NULL, 10) * 0x9e3779b97f4a7c15ull + 1 : 0x9e3779b97f4a7c15ull;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x += (unsigned)cluster) run_cluster(n, dim3{x, y, z});
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

/* The tensor-core parts: nvcuda::wmma, then Hopper (whose functions the
 * block's threads above declare and __syncthreads below uses). */
#include "cuda_host_wmma.h"
#include "cuda_host_hopper.h"

#define threadIdx (tuned_host::cur->idx)
#define blockIdx (tuned_host::block_idx)
#define blockDim (tuned_host::block_dim)
#define gridDim (tuned_host::grid_dim)

/* A barrier; once the block keeps clocks, everything before it happened before what follows. */
inline void __syncthreads() {
  if (!tuned_host::hb_clocks.empty()) tuned_host::hb_release(tuned_host::hb_barrier);
  tuned_host::wait(tuned_host::AT_BARRIER);
  if (!tuned_host::hb_clocks.empty()) tuned_host::hb_join(tuned_host::hb_clock(), tuned_host::hb_barrier);
}

/* __syncwarp: a meeting point of the warp's lanes (all of them: a partial
 * mask is not emulated); what each stored before is there for the others. */
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) tuned_host::fail("%s", "__syncwarp with a partial mask (not emulated)");
  tuned_host::wait(tuned_host::AT_WARP);
}

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
