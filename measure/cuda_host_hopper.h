/* cuda_host_hopper.h — the cuda-host harness's Hopper: warpgroup MMA,
 * mbarriers, TMA, clusters and the async proxy.  Part of tuned_cuda_host.h:
 * measure/cuda_host.h includes it after the wmma part, and measure/embed.py
 * inlines it there; not a header of its own. */
#ifndef TUNED_CUDA_HOST_HOPPER_H
#define TUNED_CUDA_HOST_HOPPER_H

/* ---- Hopper: warpgroup MMA, mbarriers, TMA, the async proxy ----------------------- */

/* The functions of codegen/hopper.c, emulated.  wgmma.mma_async,
 * commit_group and wait_group are warpgroup-wide (4 warps, 128 threads in
 * a row): all meet and must bring the same descriptors and operands.  A and
 * B are read from shared memory as the PTX ISA lays them out for the matrix
 * descriptor (start address, leading and stride byte offsets, swizzle mode,
 * the 8 x 16-byte core matrices; K-major, as the no-transpose forms read
 * them), so a wrong descriptor gives a wrong result, as on the GPU.  The
 * result is computed at issue into a side copy of each thread's
 * accumulator (its fragment per the ISA's m64nNk16 D layout) and lands in
 * the registers at the wait_group that completes its commit group: touching
 * the accumulator in between is an error, and so is shared memory that the
 * operation read changing before that wait, or read by it after ordinary
 * stores with no fence.proxy.async since.  mbarriers keep their count,
 * transaction bytes and phase beside the block; try_wait.parity returns
 * false (after letting the other threads run) while the phase is not
 * complete, and a second try sleeps until it is.  A TMA load reads its box
 * at issue and lands when a thread looks at its mbarrier after the phase
 * has all its arrivals and bytes: a wgmma that reads the stage before is an
 * error. */
namespace tuned_host {

struct wg_acc {
  bool pending; /* a wgmma in flight writes it: not to be touched */
  unsigned group; /* the wgmma commit group that writes it */
  unsigned touch; /* the thread's wgmma.fence count + 1 when last touched by ordinary code */
  int n; /* registers per thread */
  float *x, *pend; /* the registers, the result in flight */
};

/* The bytes of shared memory (16 at a time) an operation in flight read. */
struct wg_chunk {
  const unsigned char *p;
  unsigned char b[16];
};

struct wg_op {
  unsigned group;
  std::vector<wg_chunk> chunks;
};

struct warpgroup_state {
  unsigned seq; /* the operation whose result is in tile */
  unsigned commits; /* commit groups closed */
  std::vector<float> tile; /* 64 x N */
  std::vector<wg_op> ops; /* in flight */
  int regs = 0; /* registers per thread it holds (the launch's, then setmaxnreg's) */
  int want = 0; /* a setmaxnreg.inc waiting for the pool: the count asked for; 0 none */
};

struct mbarrier {
  const void *addr;
  unsigned expected, pending, phase;
  long long tx; /* transaction bytes expected and not yet complete */
  std::vector<unsigned> clock, done; /* arrivals' clocks: gathering, and at the last completed phase */
  bool published; /* a barrier.cluster since its init, fenced: the cluster's other CTAs may use it */
  bool fenced;    /* a fence.mbarrier_init since its init (what makes the init visible to the cluster) */
  bool unfenced;  /* a barrier.cluster came since its init, but no fence.mbarrier_init before it */
};

/* A tensor map as the harness encodes it (tensor_map_2d): what
 * cuTensorMapEncodeTiled is given, in the map's opaque bytes. */
struct tma_map {
  uint64_t magic;
  const unsigned char *base;
  uint64_t dims[2], stride; /* elements (inner first), bytes between rows */
  unsigned box[2];
  int elem, swizzle; /* bytes */
};
static const uint64_t TMA_MAGIC = 0x74756e65642d746dull;

/* A TMA copy in flight: the box read at issue, landing in shared memory
 * (and completing its bytes) when its mbarrier's phase completes. */
struct tma_copy {
  const void *bar;
  size_t dst; /* shared offset */
  int swizzle;
  std::vector<unsigned char> data;
};
inline std::vector<tma_copy> tma_copies;
inline std::vector<unsigned short> tma_flying; /* per 16 shared bytes: copies in flight that write them */

/* Happens-before for shared memory that ordinary stores fill and the async
 * proxy reads: vector clocks per thread (made at the block's first
 * fence.proxy.async or mbarrier), carried by mbarrier arrivals to the threads
 * whose try_wait sees the phase complete, and by __syncthreads.  Each 16
 * shared bytes that a fence.proxy.async found changed remember the fencing
 * thread and its clock; a wgmma reading them in a thread that has not
 * acquired that clock read a stage before its writer's mbarrier phase (or
 * barrier) ordered it: an error, even where the data happen to be there.
 * The other way round, a wait_group completing a wgmma records its reads
 * with the clock of the thread that computed it, and a fence finding such
 * bytes changed by a thread that has not acquired that clock (an mbarrier
 * arrival after the wait), or read by a wgmma still in flight, stops: the
 * stage was refilled before its readers were done. */
struct hb_write {
  int thread; /* -1: not an ordinary store (or never fenced) */
  unsigned clock;
};
inline std::vector<std::vector<unsigned>> hb_clocks; /* empty until the block uses them */
inline std::vector<unsigned> hb_barrier;             /* what __syncthreads hands on */
inline std::vector<hb_write> hb_writes;              /* per 16 shared bytes */
inline std::vector<hb_write> hb_reads;               /* per 16 shared bytes: the last completed wgmma read */
inline std::vector<unsigned short> wg_reading;        /* per 16 shared bytes: wgmmas in flight that read them */
inline std::vector<unsigned> hb_cluster;             /* what barrier.cluster hands on */

/* Clusters: the CTAs of one run together (run_cluster), one resident at a
 * time: its state in the globals above, its shared memory in the shared
 * section; the others' in their slots, swapped in at their turn.  What a
 * thread does to another CTA of its cluster (a remote mbarrier arrival, a
 * multicast TMA copy) runs with that CTA's state resident (on_cta); the
 * vector clocks are the cluster's, so an arrival from another CTA orders
 * what its thread did before, and a copy into a CTA over a stage whose
 * wgmma reads no phase ordered before the copy stops the run.  Another
 * CTA may use an mbarrier only once a barrier.cluster followed its init,
 * with a fence.mbarrier_init between them (which makes the init visible to
 * the cluster): either missing stops the run at the first remote use. */
struct cta_slot {
  dim3 idx;
  std::vector<thread> threads;
  std::vector<warp_state> warps;
  std::vector<warpgroup_state> warpgroups;
  std::vector<mbarrier> mbars;
  std::vector<unsigned char> proxy_view;
  std::vector<tma_copy> tma_copies;
  std::vector<unsigned short> tma_flying, wg_reading;
  std::vector<hb_write> hb_writes, hb_reads;
  std::vector<unsigned> hb_barrier;
  std::vector<unsigned char> shared; /* the CTA's shared memory while another's is in the section */
};
inline std::vector<cta_slot> cta_slots;
inline size_t shared_size();
inline int state_rank, bytes_rank; /* the CTA whose state, and whose shared memory, is resident */

inline void cta_swap(cta_slot &c) {
  std::swap(c.idx, block_idx);
  c.threads.swap(threads);
  c.warps.swap(warps);
  c.warpgroups.swap(warpgroups);
  c.mbars.swap(mbars);
  c.proxy_view.swap(proxy_view);
  c.tma_copies.swap(tma_copies);
  c.tma_flying.swap(tma_flying);
  c.wg_reading.swap(wg_reading);
  c.hb_writes.swap(hb_writes);
  c.hb_reads.swap(hb_reads);
  c.hb_barrier.swap(hb_barrier);
}

/* Makes CTA `rank` resident: its state, and (bytes) its shared memory. */
inline void cta_enter(int rank, bool bytes) {
  if (rank != state_rank) {
    cta_swap(cta_slots[(size_t)state_rank]); /* the globals to their slot */
    cta_swap(cta_slots[(size_t)rank]);
    state_rank = rank;
  }
  if (bytes && rank != bytes_rank) {
    size_t n = shared_size();
    if (n) {
      memcpy(cta_slots[(size_t)bytes_rank].shared.data(), __start_tuned_shared, n);
      memcpy(__start_tuned_shared, cta_slots[(size_t)rank].shared.data(), n);
    }
    bytes_rank = rank;
  }
}

/* A launch's clusters of `cluster` CTAs of n threads: a slot each; CTA 0's state in the globals. */
inline void cluster_setup(int n, int cluster) {
  cta_enter(0, true);
  cluster_size = cluster;
  cta_slots.resize((size_t)cluster);
  if (threads.size() < (size_t)n) threads.resize((size_t)n);
  for (int r = 1; r < cluster; r++)
    if (cta_slots[(size_t)r].threads.size() < (size_t)n) cta_slots[(size_t)r].threads.resize((size_t)n);
  for (cta_slot &c : cta_slots) c.shared.assign(shared_size(), 0);
}

/* After a barrier.cluster: the resident CTA's mbarriers set up so far are the cluster's to use. */
inline void cluster_released() {
  for (mbarrier &m : mbars) {
    m.unfenced |= !m.fenced && !m.published;
    m.published |= m.fenced;
  }
}

inline int block_threads() { return (int)(block_dim.x * block_dim.y * block_dim.z); }

/* The current thread's index in the cluster's vector clocks. */
inline size_t hb_self() { return (size_t)cur->cta * (size_t)block_threads() + (size_t)cur->lin; }

/* Runs f with CTA `rank` of the cluster resident (its state, not its shared
 * bytes), for op of the current thread: that CTA must not have exited. */
template <typename F> void on_cta(int rank, const char *op, F f) {
  if (rank < 0 || rank >= cluster_size) fail("%s: a CTA rank outside the cluster", op);
  int home = state_rank, n = block_threads(), live = 0;
  cta_enter(rank, false);
  for (int i = 0; i < n; i++) live += threads[(size_t)i].state != DONE;
  if (!live)
    fail("%s reaches a CTA of the cluster that has exited (no barrier.cluster kept it until its peers were done)",
         op);
  f();
  cta_enter(home, false);
}

/* What a thread brings to a warpgroup-wide operation. */
struct wg_args {
  const char *op;
  uint64_t desc[2];
  int imm; /* scale-d, or wait_group's N */
  int n;
  wg_acc *acc; /* the thread's own accumulator and A fragment: not compared */
  const uint32_t *afrag;
};

inline size_t shared_size() { return (size_t)(__stop_tuned_shared - __start_tuned_shared); }

inline void hopper_block_start(int n) {
  hb_clocks.clear();
  hb_barrier.clear();
  hb_cluster.clear();
  hb_writes.assign(shared_size() / 16 + 1, hb_write{-1, 0});
  hb_reads.assign(shared_size() / 16 + 1, hb_write{-1, 0});
  wg_reading.assign(shared_size() / 16 + 1, 0);
  warpgroups.assign((size_t)(n + 127) / 128, warpgroup_state{0, 0, {}, {}, launch_regs(n), 0});
  mbars.clear();
  tma_copies.clear();
  tma_flying.assign(shared_size() / 16 + 1, 0);
  proxy_view.assign((const unsigned char *)__start_tuned_shared, (const unsigned char *)__stop_tuned_shared);
}

/* Registers of the resident CTA's pool that no warpgroup holds. */
inline long long regs_free() {
  int n = block_threads();
  long long held = 0;
  for (const warpgroup_state &w : warpgroups) held += 128LL * w.regs;
  return (long long)launch_regs(n) * n - held;
}

/* The resident CTA's threads waiting at a setmaxnreg.inc that the pool can
 * now meet run again (the first of them takes the registers). */
inline bool release_regs(int n) {
  bool moved = false;
  for (int i = 0; i < n; i++) {
    if (threads[(size_t)i].state != AT_REGS) continue;
    const warpgroup_state &w = warpgroups[(size_t)(i / 128)];
    if (!w.want || regs_free() >= 128LL * (w.want - w.regs)) {
      threads[(size_t)i].state = RUN;
      moved = true;
    }
  }
  return moved;
}

/* Nothing can move and a warpgroup waits for registers: no setmaxnreg.dec
 * is left to give them back. */
[[noreturn]] inline void regs_deadlock(int n) {
  char msg[400];
  for (size_t g = 0; g < warpgroups.size(); g++) {
    const warpgroup_state &w = warpgroups[g];
    if (!w.want) continue;
    snprintf(msg, sizeof msg, "deadlock: setmaxnreg.inc to %d in warpgroup %zu waits for %lld registers the CTA's pool "
             "cannot give (%d threads hold %d registers each at launch: %lld in the pool, %lld free; registers of "
             "exited warps are not returned)", w.want, g, 128LL * (w.want - w.regs), n, launch_regs(n),
             (long long)launch_regs(n) * n, regs_free());
    fail("%s", msg);
  }
  fail("%s", "deadlock: threads wait at a setmaxnreg.inc");
}

/* The offset of p in shared memory (the shared window's address). */
inline size_t shared_offset(const void *p, const char *what) {
  uintptr_t u = (uintptr_t)p, lo = (uintptr_t)__start_tuned_shared;
  if (!lo || u < lo || u >= (uintptr_t)__stop_tuned_shared) fail("%s: the address is not in shared memory", what);
  if (u - lo >= (1u << 18)) fail("%s: shared memory past 256 KiB", what);
  return u - lo;
}

/* The vector clocks, made at the block's first use: thread i at 1 for itself. */
inline std::vector<unsigned> &hb_clock() {
  if (hb_clocks.empty()) {
    size_t n = (size_t)block_threads() * (size_t)cluster_size;
    hb_clocks.assign(n, std::vector<unsigned>(n, 0));
    for (size_t i = 0; i < n; i++) hb_clocks[i][i] = 1;
    hb_barrier.assign(n, 0);
  }
  return hb_clocks[hb_self()];
}

inline void hb_join(std::vector<unsigned> &into, const std::vector<unsigned> &from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); i++)
    if (from[i] > into[i]) into[i] = from[i];
}

/* A release (mbarrier arrival): the thread's clock goes with it, and ticks. */
inline void hb_release(std::vector<unsigned> &to) {
  std::vector<unsigned> &c = hb_clock();
  hb_join(to, c);
  c[hb_self()]++;
}

/* Stores (or a TMA copy's, `what`) over shared bytes at `off` must come
 * after the wgmmas that read them: none in flight, the last completed
 * one's clock acquired. */
inline void hb_check_overwrite(size_t off, const char *what = "ordinary stores") {
  if (wg_reading[off / 16])
    fail("%s over shared memory that a wgmma.mma_async in flight reads (wait for the stage's empty mbarrier phase "
         "first)", what);
  const hb_write &r = hb_reads[off / 16];
  if (r.thread >= 0 && (size_t)r.thread != hb_self() && hb_clock()[(size_t)r.thread] < r.clock) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s over shared memory that the wgmma of thread %d's warpgroup read", what, r.thread);
    fail("%s, with no mbarrier phase ordering that wgmma's wait_group before the stores (wait for the stage's empty "
         "phase first)", msg);
  }
}

/* Meets the thread's warpgroup (as warp_meet its warp); true for the one
 * thread that computes the result. */
inline bool wg_meet(const wg_args &a) {
  int tid = cur->lin % 128, base = cur->lin - tid, n = (int)(block_dim.x * block_dim.y * block_dim.z);
  if (base + 128 > n) fail("%s in a warpgroup of fewer than 128 threads (the block's size is not a multiple of 128)", a.op);
  cur->wg_ops++;
  cur->slot = (uint64_t)(uintptr_t)&a;
  wait(AT_WARPGROUP);
  for (int i = base; i < base + 128; i++)
    if (threads[(size_t)i].state == DONE) fail("%s reached by some threads of a warpgroup after others exited", a.op);
  const wg_args &f = *(const wg_args *)(uintptr_t)threads[(size_t)base].slot;
  if (threads[(size_t)base].wg_ops != cur->wg_ops || strcmp(f.op, a.op))
    fail("threads of a warpgroup are at different warpgroup operations (%s)", a.op);
  if (f.desc[0] != a.desc[0] || f.desc[1] != a.desc[1] || f.imm != a.imm || f.n != a.n)
    fail("the 128 threads of a warpgroup bring different descriptors or operands to %s", a.op);
  wait(AT_WARPGROUP); /* every thread checked before the result is computed from their accumulators */
  warpgroup_state &w = warpgroups[(size_t)(base / 128)];
  if (w.seq == cur->wg_ops) return false;
  w.seq = cur->wg_ops;
  return true;
}

/* The 16 bytes of row `row`, K chunk `kc` (8 halves) of a K-major operand
 * its descriptor describes; within shared memory, and seen by the async
 * proxy as ordinary code left it (fence.proxy.async). */
inline const unsigned char *wg_chunk_at(uint64_t desc, int row, int kc, const char *what) {
  size_t start = (size_t)(desc & 0x3fff) << 4, lbo = (size_t)(desc >> 16 & 0x3fff) << 4;
  size_t sbo = (size_t)(desc >> 32 & 0x3fff) << 4, mode = (size_t)(desc >> 62);
  if (desc >> 49 & 7) fail("%s: a matrix descriptor with a base offset (not emulated)", what);
  size_t off;
  if (mode == 0) { /* core matrices: 8 rows of 16 bytes, K neighbours lbo apart, the next 8 rows sbo */
    off = start + (size_t)(row % 8) * 16 + (size_t)(row / 8) * sbo + (size_t)kc * lbo;
  } else { /* rows of 128, 64 or 32 bytes, 16-byte chunks swizzled by address bits 7-9 */
    size_t width = (size_t)256 >> mode;
    off = start + (size_t)(row % 8) * width + (size_t)(row / 8) * sbo + (size_t)kc * 16;
    off ^= (off >> 7 & (width / 16 - 1)) << 4;
  }
  if (off + 16 > shared_size()) fail("%s: a matrix descriptor addresses bytes past the end of shared memory", what);
  const unsigned char *p = (const unsigned char *)__start_tuned_shared + off;
  if (tma_flying[off / 16])
    fail("%s reads shared memory that a TMA copy in flight writes (wait for its mbarrier phase first)", what);
  if (memcmp(p, proxy_view.data() + off, 16))
    fail("%s reads shared memory written by ordinary stores with no fence.proxy.async since", what);
  const hb_write &w = hb_writes[off / 16];
  if (w.thread >= 0 && (size_t)w.thread != hb_self() && hb_clock()[(size_t)w.thread] < w.clock) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s reads shared memory that thread %d stored and fenced", what, w.thread);
    fail("%s, with no mbarrier phase or __syncthreads ordering the store before the read (wait for the stage's "
         "mbarrier first)", msg);
  }
  return p;
}

/* Thread tid's register i of an m64nN accumulator: row and column. */
inline int wg_row(int tid, int i) { return 16 * (tid / 32) + tid % 32 / 4 + 8 * (i / 2 % 2); }
inline int wg_col(int tid, int i) { return 8 * (i / 4) + 2 * (tid % 4) + i % 2; }

inline float wg_half(const unsigned char *p, bool bf16) {
  uint16_t h;
  memcpy(&h, p, 2);
  return bf16 ? __bfloat162float(__nv_bfloat16{h}) : __half2float(__half{h});
}

/* Thread tid's A register j (two halves, the lower column in the low
 * bits): row and column of the first half, as the ISA's m64nNk16 A
 * fragment figure lays them out. */
inline int wg_arow(int tid, int j) { return 16 * (tid / 32) + tid % 32 / 4 + 8 * (j % 2); }
inline int wg_acol(int tid, int j) { return 2 * (tid % 4) + 8 * (j / 2); }

/* D (+)= A B, 64 x n x 16: D's old value from every thread's accumulator
 * (its value in flight when a wgmma before writes it); A through its
 * descriptor, or (afrag) from every thread's four registers. */
inline void wgmma(wg_acc &d, uint64_t da, const uint32_t *afrag, uint64_t db, int scale_d, bool bf16, int n,
                  const char *op) {
  if (d.touch > cur->wg_fences) fail("%s on accumulator registers touched since the last wgmma.fence", op);
  wg_args g = {op, {da, db}, scale_d != 0, n, &d, afrag};
  int base = cur->lin / 128 * 128;
  warpgroup_state &w = warpgroups[(size_t)(base / 128)];
  if (wg_meet(g)) {
    wg_op rec = {w.commits, {}};
    std::vector<float> a(64 * 16), b((size_t)n * 16);
    for (int t = 0; afrag && t < 128; t++) /* A from registers */
      for (int j = 0; j < 4; j++) {
        uint32_t v = ((const wg_args *)(uintptr_t)threads[(size_t)(base + t)].slot)->afrag[j];
        unsigned char h[4];
        memcpy(h, &v, 4);
        a[(size_t)wg_arow(t, j) * 16 + (size_t)wg_acol(t, j)] = wg_half(h, bf16);
        a[(size_t)wg_arow(t, j) * 16 + (size_t)wg_acol(t, j) + 1] = wg_half(h + 2, bf16);
      }
    for (int r = afrag ? 64 : 0; r < 64 + n; r++)
      for (int kc = 0; kc < 2; kc++) {
        const unsigned char *p = wg_chunk_at(r < 64 ? da : db, r < 64 ? r : r - 64, kc, op);
        wg_chunk c;
        c.p = p;
        memcpy(c.b, p, 16);
        rec.chunks.push_back(c);
        for (int e = 0; e < 8; e++) (r < 64 ? &a[(size_t)r * 16] : &b[(size_t)(r - 64) * 16])[kc * 8 + e] = wg_half(p + 2 * e, bf16);
      }
    w.tile.assign((size_t)64 * n, 0.0f);
    if (scale_d)
      for (int t = 0; t < 128; t++) {
        const wg_acc &c = *((const wg_args *)(uintptr_t)threads[(size_t)(base + t)].slot)->acc;
        for (int i = 0; i < n / 2; i++) w.tile[(size_t)wg_row(t, i) * n + wg_col(t, i)] = c.pending ? c.pend[i] : c.x[i];
      }
    for (int i = 0; i < 64; i++)
      for (int j = 0; j < n; j++) {
        float s = w.tile[(size_t)i * n + j];
        for (int k = 0; k < 16; k++) s += a[(size_t)i * 16 + k] * b[(size_t)j * 16 + k];
        w.tile[(size_t)i * n + j] = s;
      }
    for (const wg_chunk &c : rec.chunks) wg_reading[(size_t)((const char *)c.p - __start_tuned_shared) / 16]++;
    w.ops.push_back(rec);
  }
  int tid = cur->lin - base;
  for (int i = 0; i < n / 2; i++) d.pend[i] = w.tile[(size_t)wg_row(tid, i) * n + wg_col(tid, i)];
  if (!d.pending) cur->wg_pending.push_back(&d);
  d.pending = true;
  d.group = w.commits;
}

inline void wg_commit() {
  wg_args g = {"wgmma.commit_group", {0, 0}, 0, 0, NULL, NULL};
  if (wg_meet(g)) warpgroups[(size_t)(cur->lin / 128)].commits++;
}

/* wgmma.wait_group n: every commit group but the n newest completes; the
 * shared memory its operations read must not have changed meanwhile. */
inline void wg_wait(int n) {
  wg_args g = {"wgmma.wait_group", {0, 0}, n, 0, NULL, NULL};
  warpgroup_state &w = warpgroups[(size_t)(cur->lin / 128)];
  if (wg_meet(g)) {
    size_t kept = 0;
    for (size_t i = 0; i < w.ops.size(); i++) {
      if (w.ops[i].group + (unsigned)n >= w.commits) {
        w.ops[kept++] = w.ops[i];
        continue;
      }
      for (const wg_chunk &c : w.ops[i].chunks) {
        if (memcmp(c.p, c.b, 16)) fail("%s", "shared memory that a wgmma.mma_async reads changed before its wgmma.wait_group");
        size_t at = (size_t)((const char *)c.p - __start_tuned_shared) / 16;
        hb_reads[at] = hb_write{(int)hb_self(), hb_clock()[hb_self()]};
        wg_reading[at]--;
      }
    }
    w.ops.resize(kept);
  }
  std::vector<wg_acc *> &q = cur->wg_pending;
  size_t kept = 0;
  for (size_t i = 0; i < q.size(); i++) {
    if (q[i]->group + (unsigned)n < w.commits) {
      memcpy(q[i]->x, q[i]->pend, sizeof(float) * (size_t)q[i]->n);
      q[i]->pending = false;
    } else {
      q[kept++] = q[i];
    }
  }
  q.resize(kept);
}

inline void wg_touch(wg_acc &a, int i) {
  if (i < 0 || i >= a.n) fail("%s", "a wgmma accumulator index out of range");
  if (a.pending) fail("%s", "a wgmma accumulator is read or written before the wgmma.wait_group that completes it");
  a.touch = cur->wg_fences + 1;
}

/* The resident CTA's mbarrier at bar; used from another CTA of the cluster
 * (on_cta), only once a barrier.cluster followed its init. */
inline mbarrier &mbar(const void *bar, const char *op) {
  if ((uintptr_t)bar % 8) fail("%s: the mbarrier is not 8-byte aligned", op);
  shared_offset(bar, op);
  for (mbarrier &m : mbars)
    if (m.addr == bar) {
      if (cur && cur->cta != state_rank && !m.published && m.unfenced)
        fail("%s on an mbarrier of another CTA of the cluster whose mbarrier.init no fence.mbarrier_init made "
             "visible to the cluster before the barrier.cluster", op);
      if (cur && cur->cta != state_rank && !m.published)
        fail("%s on an mbarrier of another CTA of the cluster with no barrier.cluster since its mbarrier.init "
             "(it may not be set up yet)", op);
      return m;
    }
  fail("%s on an mbarrier that mbarrier.init has not set up", op);
}

/* Shared offset `off` of a box written with `swizzle`-byte rows swizzled
 * (by address bits 7-9, as wgmma reads them). */
inline size_t swizzled(size_t off, int swizzle) {
  return swizzle ? off ^ (off >> 7 & (size_t)(swizzle / 16 - 1)) << 4 : off;
}

inline void mbar_complete(mbarrier &m) {
  m.tx = 0;
  m.phase++;
  hb_join(m.done, m.clock);
  m.pending = m.expected;
  for (thread &t : threads)
    if (t.state == AT_MBAR && t.mbar_wait == m.addr) t.state = RUN;
}

inline long long mbar_flying(const mbarrier &m) {
  long long n = 0;
  for (const tma_copy &c : tma_copies)
    if (c.bar == m.addr) n += (long long)c.data.size();
  return n;
}

/* After an arrival or a copy: the phase completes when every arrival came
 * and no transaction bytes are expected; when TMA copies bring the bytes
 * still expected, they land (and the phase completes) only when a thread
 * next looks (try_wait): their data is not there before. */
inline void mbar_progress(mbarrier &m) {
  if (m.pending) return;
  long long flying = mbar_flying(m);
  if (m.tx < flying) fail("%s", "TMA copies bring more bytes to an mbarrier phase than its expect_tx counted");
  if (m.tx != flying) return;
  if (!flying) {
    mbar_complete(m);
    return;
  }
  for (thread &t : threads) /* the sleepers look */
    if (t.state == AT_MBAR && t.mbar_wait == m.addr) t.state = RUN;
}

/* The copies of a phase that has all its arrivals and bytes on the way land. */
inline void mbar_land(mbarrier &m) {
  long long flying = mbar_flying(m);
  if (m.pending || !flying || m.tx != flying) return;
  size_t kept = 0;
  for (size_t i = 0; i < tma_copies.size(); i++) {
    tma_copy &c = tma_copies[i];
    if (c.bar != m.addr) {
      if (kept != i) tma_copies[kept] = std::move(c);
      kept++;
      continue;
    }
    for (size_t o = 0; o < c.data.size(); o += 16) {
      size_t at = swizzled(c.dst + o, c.swizzle);
      memcpy(__start_tuned_shared + at, &c.data[o], 16);
      memcpy(proxy_view.data() + at, &c.data[o], 16); /* written by the async proxy */
      hb_writes[at / 16] = hb_write{-1, 0};
      tma_flying[at / 16]--;
    }
  }
  tma_copies.resize(kept);
  mbar_complete(m);
}

inline uint64_t mbar_arrive(const void *bar, long long tx, const char *op) {
  mbarrier &m = mbar(bar, op);
  hb_release(m.clock);
  m.tx += tx;
  uint64_t token = m.phase;
  m.pending--;
  mbar_progress(m);
  return token;
}

inline bool mbar_try_wait(const void *bar, unsigned parity) {
  const char *op = "mbarrier.try_wait.parity";
  mbar_land(mbar(bar, op));
  if ((mbar(bar, op).phase & 1) == (parity & 1)) {
    if (cur->mbar_spin != bar) { /* the first try: false, after the others had a turn */
      cur->mbar_spin = bar;
      wait(RUN);
      return false;
    }
    cur->mbar_wait = bar; /* tried again: sleep until the phase completes */
    for (;;) {
      mbar_land(mbar(bar, op));
      if ((mbar(bar, op).phase & 1) != (parity & 1)) break;
      wait(AT_MBAR);
    }
    cur->mbar_wait = NULL;
  }
  cur->mbar_spin = NULL;
  hb_join(hb_clock(), mbar(bar, op).done); /* the completed phase's arrivals happened before */
  return true;
}

/* cuTensorMapEncodeTiled for the harness (2-D, tile mode, no interleave,
 * zero fill): the map the cuda-host launcher passes where the CUDA worker
 * passes the driver's.  Checks what the driver checks. */
inline void tensor_map_2d(void *map, const void *base, int elem, uint64_t width, uint64_t height, uint64_t stride,
                          unsigned box_w, unsigned box_h, int swizzle) {
  if ((uintptr_t)base % 16 || stride % 16 || stride < width * (uint64_t)elem)
    fail("%s", "cuTensorMapEncodeTiled: the address and the row stride must be multiples of 16 bytes, rows apart");
  if (box_w < 1 || box_w > 256 || box_h < 1 || box_h > 256 || box_w * (unsigned)elem % 16)
    fail("%s", "cuTensorMapEncodeTiled: box sides must be 1 to 256 elements, its rows multiples of 16 bytes");
  if (swizzle && (swizzle != 32 && swizzle != 64 && swizzle != 128))
    fail("%s", "cuTensorMapEncodeTiled: the swizzle is 0, 32, 64 or 128 bytes");
  if (swizzle && box_w * (unsigned)elem != (unsigned)swizzle)
    fail("%s", "tensor map: a swizzled box whose rows are not the swizzle's width (not emulated)");
  tma_map m = {TMA_MAGIC, (const unsigned char *)base, {width, height}, stride, {box_w, box_h}, elem, swizzle};
  static_assert(sizeof m <= 128, "a tensor map is 128 bytes");
  memset(map, 0, 128);
  memcpy(map, &m, sizeof m);
}

/* cp.async.bulk.tensor.2d: the box is read now (zeros outside the tensor)
 * and lands when bar's phase completes: in this CTA's shared memory, or
 * (multicast) at the same place in each CTA of the cluster that `mask`
 * names, completing the bytes of the mbarrier at bar's place in each. */
inline void tma_load_2d(void *dst, const void *map, int x, int y, void *bar, unsigned mask = 0) {
  const char *op = mask ? "cp.async.bulk.tensor.2d (multicast::cluster)" : "cp.async.bulk.tensor.2d";
  tma_map m;
  memcpy(&m, map, sizeof m);
  if (m.magic != TMA_MAGIC) fail("%s: the tensor map was not made by cuTensorMapEncodeTiled (tensor_map_2d)", op);
  if (mask >> cluster_size) fail("%s: the CTA mask names CTAs outside the cluster", op);
  size_t off = shared_offset(dst, op), row = (size_t)m.box[0] * (size_t)m.elem;
  if (off % 128) fail("%s: the shared-memory destination is not 128-byte aligned", op);
  if (off + row * m.box[1] > shared_size()) fail("%s: the box does not fit in shared memory there", op);
  shared_offset(bar, op);
  tma_copy c = {bar, off, m.swizzle, std::vector<unsigned char>(row * m.box[1], 0)};
  for (unsigned r = 0; r < m.box[1]; r++)
    for (unsigned e = 0; e < m.box[0]; e++) {
      int64_t gx = (int64_t)x + e, gy = (int64_t)y + r;
      if (gx >= 0 && gy >= 0 && (uint64_t)gx < m.dims[0] && (uint64_t)gy < m.dims[1])
        memcpy(&c.data[r * row + e * (size_t)m.elem], m.base + (uint64_t)gy * m.stride + (uint64_t)gx * (uint64_t)m.elem,
               (size_t)m.elem);
    }
  auto issue = [&] { /* into the resident CTA: written from now on, in the background */
    mbar(bar, op);
    for (size_t o = 0; o < c.data.size(); o += 16) {
      hb_check_overwrite(swizzled(off + o, m.swizzle), mask ? "a multicast TMA copy" : "a TMA copy");
      tma_flying[swizzled(off + o, m.swizzle) / 16]++;
    }
    tma_copies.push_back(c);
    mbar_progress(mbar(bar, op));
  };
  if (!mask) issue();
  for (int r = 0; r < cluster_size; r++)
    if (mask >> r & 1) on_cta(r, op, issue);
}

inline void hopper_block_end() {
  if (!tma_copies.empty()) fail("%s", "the block ended with TMA copies in flight (their mbarrier phase never completed)");
}

} /* namespace tuned_host */

#define __grid_constant__
#define __cluster_dims__(x, y, z) /* the launcher passes the cluster (tuned_host::launch) */
struct alignas(64) tuned_tensor_map {
  unsigned long long opaque[16];
};
inline void tuned_tma_load_2d(void *dst, const tuned_tensor_map *map, int x, int y, unsigned long long *bar) {
  tuned_host::tma_load_2d(dst, map, x, y, bar);
}
inline void tuned_tma_load_2d_multicast(void *dst, const tuned_tensor_map *map, int x, int y, unsigned long long *bar,
                                        unsigned short mask) {
  if (!mask) tuned_host::fail("%s", "cp.async.bulk.tensor.2d (multicast::cluster): an empty CTA mask");
  tuned_host::tma_load_2d(dst, map, x, y, bar, mask);
}

inline size_t __cvta_generic_to_shared(const void *p) { return tuned_host::shared_offset(p, "__cvta_generic_to_shared"); }
inline unsigned tuned_smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

#define TUNED_SWIZZLE_NONE 0
#define TUNED_SWIZZLE_128B 1
#define TUNED_SWIZZLE_64B 2
#define TUNED_SWIZZLE_32B 3
/* The descriptor as codegen/hopper.c encodes it (the harness decodes it in wg_chunk_at). */
inline uint64_t tuned_wgmma_desc(const void *smem, unsigned lbo, unsigned sbo, int swizzle) {
  return (uint64_t)((tuned_smem_addr(smem) & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
         (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | (uint64_t)(swizzle & 3) << 62;
}

template <int N> struct tuned_wgmma_acc : tuned_host::wg_acc {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma m64nNk16 needs N from 8 to 256 in steps of 8");
  float x[N / 2], pend[N / 2];
  tuned_wgmma_acc() : tuned_host::wg_acc{false, 0, 0, N / 2, x, pend} {}
  tuned_wgmma_acc(const tuned_wgmma_acc &) = delete; /* the harness keeps its address */
  float &operator[](int i) {
    tuned_host::wg_touch(*this, i);
    return x[i];
  }
};

inline void tuned_wgmma_fence() { tuned_host::cur->wg_fences++; }
inline void tuned_wgmma_commit() { tuned_host::wg_commit(); }
template <int N> inline void tuned_wgmma_wait() { tuned_host::wg_wait(N); }
template <int N> inline void tuned_wgmma_f16(tuned_wgmma_acc<N> &d, uint64_t a, uint64_t b, int scale_d) {
  tuned_host::wgmma(d, a, NULL, b, scale_d, false, N, "wgmma.mma_async (f16)");
}
template <int N> inline void tuned_wgmma_bf16(tuned_wgmma_acc<N> &d, uint64_t a, uint64_t b, int scale_d) {
  tuned_host::wgmma(d, a, NULL, b, scale_d, true, N, "wgmma.mma_async (bf16)");
}
template <int N> inline void tuned_wgmma_f16(tuned_wgmma_acc<N> &d, const uint32_t (&a)[4], uint64_t b, int scale_d) {
  tuned_host::wgmma(d, 0, a, b, scale_d, false, N, "wgmma.mma_async (f16, A in registers)");
}
template <int N> inline void tuned_wgmma_bf16(tuned_wgmma_acc<N> &d, const uint32_t (&a)[4], uint64_t b, int scale_d) {
  tuned_host::wgmma(d, 0, a, b, scale_d, true, N, "wgmma.mma_async (bf16, A in registers)");
}

/* setmaxnreg.inc/dec: warpgroup-wide (all 128 threads, the same count),
 * against the CTA's register pool ("Registers"); the registers themselves
 * are not emulated. */
template <int N> inline void tuned_host_setmaxnreg(const char *op) {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24 to 256 registers in steps of 8");
  tuned_host::wg_args g = {op, {0, 0}, N, 0, NULL, NULL};
  bool first = tuned_host::wg_meet(g);
  if (tuned_host::reg_file <= 0) return;
  tuned_host::warpgroup_state &w = tuned_host::warpgroups[(size_t)(tuned_host::cur->lin / 128)];
  bool inc = op[11] == 'i'; /* "setmaxnreg.inc" */
  if (first) {
    char msg[200];
    if (!inc && N > w.regs) {
      snprintf(msg, sizeof msg, "%s to %d in a warpgroup that holds %d registers per thread", op, N, w.regs);
      tuned_host::fail("%s", msg);
    }
    /* ptxas launches a kernel with setmaxnreg with no more than its largest count, which the harness does not know:
       an .inc to fewer than the launch's keeps them */
    if (inc && N > w.regs) w.want = N;
    else if (!inc) w.regs = N;
  }
  while (w.want) {
    if (tuned_host::regs_free() >= 128LL * (w.want - w.regs)) {
      w.regs = w.want;
      w.want = 0;
      break;
    }
    tuned_host::wait(tuned_host::AT_REGS);
  }
}
template <int N> inline void tuned_setmaxnreg_inc() { tuned_host_setmaxnreg<N>("setmaxnreg.inc"); }
template <int N> inline void tuned_setmaxnreg_dec() { tuned_host_setmaxnreg<N>("setmaxnreg.dec"); }

/* fence.proxy.async: what ordinary code stored so far is what the async proxy sees. */
inline void tuned_fence_proxy_async() {
  std::vector<unsigned> &c = tuned_host::hb_clock();
  const unsigned char *sh = (const unsigned char *)__start_tuned_shared;
  for (size_t o = 0; o + 16 <= tuned_host::proxy_view.size(); o += 16) /* the bytes this thread stored */
    if (memcmp(sh + o, tuned_host::proxy_view.data() + o, 16)) {
      tuned_host::hb_check_overwrite(o);
      tuned_host::hb_writes[o / 16] = tuned_host::hb_write{(int)tuned_host::hb_self(), c[tuned_host::hb_self()]};
    }
  memcpy(tuned_host::proxy_view.data(), __start_tuned_shared, tuned_host::proxy_view.size());
}

inline void tuned_mbar_init(unsigned long long *bar, unsigned count) {
  if (count < 1 || count >= (1u << 20)) tuned_host::fail("%s", "mbarrier.init: the count must be 1 to 2^20 - 1");
  tuned_host::shared_offset(bar, "mbarrier.init");
  for (tuned_host::mbarrier &m : tuned_host::mbars)
    if (m.addr == bar) {
      m = tuned_host::mbarrier{bar, count, count, 0, 0, {}, {}, false, false, false};
      return;
    }
  tuned_host::mbars.push_back(tuned_host::mbarrier{bar, count, count, 0, 0, {}, {}, false, false, false});
}
inline unsigned long long tuned_mbar_arrive(unsigned long long *bar) {
  return tuned_host::mbar_arrive(bar, 0, "mbarrier.arrive");
}
inline unsigned long long tuned_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
  return tuned_host::mbar_arrive(bar, bytes, "mbarrier.arrive.expect_tx");
}
inline void tuned_mbar_expect_tx(unsigned long long *bar, unsigned bytes) {
  tuned_host::mbar(bar, "mbarrier.expect_tx").tx += bytes;
}
inline bool tuned_mbar_try_wait(unsigned long long *bar, unsigned parity) { return tuned_host::mbar_try_wait(bar, parity); }

/* Clusters (run_cluster): an arrival on the mbarrier at bar's place in CTA
 * `rank`, which must be set up (a barrier.cluster after its init) and not
 * have exited; barrier.cluster over the threads of every CTA of the cluster
 * that have not exited, everything before it happening before what follows. */
inline void tuned_mbar_arrive_cluster(unsigned long long *bar, unsigned rank) {
  const char *op = "mbarrier.arrive.release.cluster";
  tuned_host::on_cta((int)rank, op, [&] { tuned_host::mbar_arrive(bar, 0, op); });
}
/* fence.mbarrier_init.release.cluster: the resident CTA's mbarrier inits
 * so far are visible to the cluster at its next barrier.cluster. */
inline void tuned_fence_mbarrier_init() {
  for (tuned_host::mbarrier &m : tuned_host::mbars) m.fenced = true;
}
inline void tuned_cluster_sync() {
  tuned_host::hb_release(tuned_host::hb_cluster);
  tuned_host::wait(tuned_host::AT_CLUSTER);
  tuned_host::hb_join(tuned_host::hb_clock(), tuned_host::hb_cluster);
}

#endif
