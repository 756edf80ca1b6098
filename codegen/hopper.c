/* hopper.c — the Hopper (sm_90a) device primitives that generated CUDA code
 * calls: warpgroup MMA (wgmma.mma_async m64nNk16, f16/bf16 -> f32, A and B
 * from shared memory through matrix descriptors) with its fence, commit and
 * wait, mbarriers with transaction counts and phase parity, TMA tile loads
 * (cp.async.bulk.tensor.2d through a tensor map, or multicast to the CTAs
 * of a cluster), fence.proxy.async, and the cluster's barrier and remote
 * mbarrier arrivals.  Each is one function of inline PTX; the cuda-host
 * harness (measure/cuda_host.h) defines the same functions as an emulation,
 * so this text is skipped there (TUNED_CUDA_HOST_H).
 *
 * wgmma needs one function per N (its accumulator is N / 2 registers per
 * thread, each an asm operand), so the text is printed for the Ns asked for:
 * an overload of tuned_wgmma_f16 / tuned_wgmma_bf16 per tuned_wgmma_acc<N>,
 * and one more per N taking A from registers (unsigned[4]) instead. */
#include "codegen/codegen.h"

#include <stdbool.h>

/* What every Hopper module gets: the types, the descriptor, the fences, the
 * group commit/wait and the mbarrier.  NVRTC has no <stdint.h>: 64-bit
 * values are unsigned long long. */
static const char common_text[] =
    "/* Hopper primitives (sm_90a): wgmma, mbarrier, fence.proxy.async */\n"
    "#ifndef TUNED_CUDA_HOST_H\n"
    "#define TUNED_SWIZZLE_NONE 0\n"
    "#define TUNED_SWIZZLE_128B 1\n"
    "#define TUNED_SWIZZLE_64B 2\n"
    "#define TUNED_SWIZZLE_32B 3\n"
    "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n" /* nvcc's host pass has no arch */
    "#error \"tuned's Hopper primitives (wgmma, mbarrier transaction counts, TMA, fence.proxy.async) need "
    "--gpu-architecture=sm_90a\"\n"
    "#endif\n"
    "/* A warpgroup's m64nN f32 accumulator: thread t of warp w holds rows 16 w + t / 4 (and + 8), columns\n"
    "   8 (i / 4) + 2 (t % 4) (and + 1) in x[i] */\n"
    "template <int N> struct tuned_wgmma_acc {\n"
    "  float x[N / 2];\n"
    "  __device__ __forceinline__ float &operator[](int i) { return x[i]; }\n"
    "};\n"
    "__device__ __forceinline__ unsigned tuned_smem_addr(const void *p) {\n"
    "  return (unsigned)__cvta_generic_to_shared(p);\n"
    "}\n"
    "__device__ __forceinline__ void tuned_wgmma_fence() { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
    "__device__ __forceinline__ void tuned_wgmma_commit() {\n"
    "  asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
    "}\n"
    "template <int N> __device__ __forceinline__ void tuned_wgmma_wait() {\n"
    "  asm volatile(\"wgmma.wait_group.sync.aligned %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "}\n"
    "/* setmaxnreg: the warpgroup's registers per thread become N (a producer gives, consumers take) */\n"
    "template <int N> __device__ __forceinline__ void tuned_setmaxnreg_inc() {\n"
    "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 %0;\\n\" :: \"n\"(N));\n"
    "}\n"
    "template <int N> __device__ __forceinline__ void tuned_setmaxnreg_dec() {\n"
    "  asm volatile(\"setmaxnreg.dec.sync.aligned.u32 %0;\\n\" :: \"n\"(N));\n"
    "}\n"
    "__device__ __forceinline__ void tuned_fence_proxy_async() {\n"
    "  asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_mbar_init(unsigned long long *bar, unsigned count) {\n"
    "  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\\n\" :: \"r\"(tuned_smem_addr(bar)), \"r\"(count) : "
    "\"memory\");\n"
    "}\n"
    "__device__ __forceinline__ unsigned long long tuned_mbar_arrive(unsigned long long *bar) {\n"
    "  unsigned long long state;\n"
    "  asm volatile(\"mbarrier.arrive.shared::cta.b64 %0, [%1];\\n\" : \"=l\"(state) : \"r\"(tuned_smem_addr(bar)) : "
    "\"memory\");\n"
    "  return state;\n"
    "}\n"
    "__device__ __forceinline__ unsigned long long tuned_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {\n"
    "  unsigned long long state;\n"
    "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\\n\" : \"=l\"(state) : "
    "\"r\"(tuned_smem_addr(bar)), \"r\"(bytes) : \"memory\");\n"
    "  return state;\n"
    "}\n"
    "__device__ __forceinline__ void tuned_mbar_expect_tx(unsigned long long *bar, unsigned bytes) {\n"
    "  asm volatile(\"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\\n\" :: \"r\"(tuned_smem_addr(bar)), "
    "\"r\"(bytes) : \"memory\");\n"
    "}\n"
    "/* true once the phase of this parity completed; false when the wait timed out (try again) */\n"
    "__device__ __forceinline__ bool tuned_mbar_try_wait(unsigned long long *bar, unsigned parity) {\n"
    "  unsigned done;\n"
    "  asm volatile(\"{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, "
    "p;\\n}\\n\" : \"=r\"(done) : \"r\"(tuned_smem_addr(bar)), \"r\"(parity) : \"memory\");\n"
    "  return done != 0;\n"
    "}\n"
    "/* A TMA tensor map (cuTensorMapEncodeTiled's CUtensorMap), passed as a __grid_constant__ parameter */\n"
    "struct __align__(64) tuned_tensor_map {\n"
    "  unsigned long long opaque[16];\n"
    "};\n"
    "/* TMA: the box at (x, y) (x the inner dimension) of the map's tensor into shared memory at dst; its bytes\n"
    "   complete the transaction count of bar's current phase */\n"
    "__device__ __forceinline__ void tuned_tma_load_2d(void *dst, const tuned_tensor_map *map, int x, int y, "
    "unsigned long long *bar) {\n"
    "  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
    "%3}], [%4];\\n\" :: \"r\"(tuned_smem_addr(dst)), \"l\"(map), \"r\"(x), \"r\"(y), \"r\"(tuned_smem_addr(bar)) : "
    "\"memory\");\n"
    "}\n"
    "/* Clusters: barrier.cluster over every thread of the cluster's CTAs (release/acquire: their shared-memory\n"
    "   writes and mbarrier inits are seen), an arrive on the mbarrier at bar's offset in CTA `rank` of the cluster\n"
    "   (mapa), and the TMA load whose box lands at dst's offset in every CTA of `mask`, completing the bytes of\n"
    "   the mbarrier at bar's offset in each */\n"
    "__device__ __forceinline__ void tuned_fence_mbarrier_init() {\n"
    "  asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_cluster_sync() {\n"
    "  asm volatile(\"barrier.cluster.arrive.release;\\nbarrier.cluster.wait.acquire;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_mbar_arrive_cluster(unsigned long long *bar, unsigned rank) {\n"
    "  asm volatile(\"{\\n.reg .b32 a;\\nmapa.shared::cluster.u32 a, %0, %1;\\nmbarrier.arrive.release.cluster.shared::"
    "cluster.b64 _, [a];\\n}\\n\" :: \"r\"(tuned_smem_addr(bar)), \"r\"(rank) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_tma_load_2d_multicast(void *dst, const tuned_tensor_map *map, int x, int y, "
    "unsigned long long *bar, unsigned short mask) {\n"
    "  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
    "[%0], [%1, {%2, %3}], [%4], %5;\\n\" :: \"r\"(tuned_smem_addr(dst)), \"l\"(map), \"r\"(x), \"r\"(y), "
    "\"r\"(tuned_smem_addr(bar)), \"h\"(mask) : \"memory\");\n"
    "}\n"
    "/* A shared-memory matrix descriptor: start address, leading and stride byte offsets (each >> 4, 14 bits),\n"
    "   swizzle mode in bits 62-63; base offset 0 (swizzled tiles aligned to their pattern) */\n"
    "__device__ __forceinline__ unsigned long long tuned_wgmma_desc(const void *smem, unsigned lbo, unsigned sbo, "
    "int swizzle) {\n"
    "  return (unsigned long long)((tuned_smem_addr(smem) & 0x3FFFFu) >> 4) |\n"
    "         (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16 | (unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32 |\n"
    "         (unsigned long long)(swizzle & 3) << 62;\n"
    "}\n";

/* One wgmma overload: D (+)= A B for a 64 x N x 16 tile, f32 accumulate,
 * no transposes (A and B K-major), scale_d 0 ignoring D's old value; A
 * through a descriptor, or (regs_a) from each thread's 4 registers of
 * packed halves in the ISA's A fragment layout. */
static void print_wgmma(tn_buf_t *o, int n, const char *ty, bool regs_a) {
  int regs = n / 2, b = regs + (regs_a ? 4 : 1);
  tn_buf_printf(o,
                "__device__ __forceinline__ void tuned_wgmma_%s(tuned_wgmma_acc<%d> &d, %s, unsigned long long b, "
                "int scale_d) {\n"
                "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n"
                "               \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
                ty, n, regs_a ? "const unsigned (&a)[4]" : "unsigned long long a", b + 1, n, ty, ty);
  for (int i = 0; i < regs; i++) tn_buf_printf(o, "%s%%%d", i ? ", " : "", i);
  if (regs_a)
    tn_buf_printf(o, "}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, 0;\\n}\\n\"\n               :", regs, regs + 1,
                  regs + 2, regs + 3, b);
  else
    tn_buf_printf(o, "}, %%%d, %%%d, p, 1, 1, 0, 0;\\n}\\n\"\n               :", regs, b);
  for (int i = 0; i < regs; i++) tn_buf_printf(o, "%s \"+f\"(d.x[%d])", i ? "," : "", i);
  tn_buf_printf(o, "\n               : %s, \"l\"(b), \"r\"(scale_d) : \"memory\");\n}\n",
                regs_a ? "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" : "\"l\"(a)");
}

int cg_hopper_helpers(tn_buf_t *o, const int *ns, int nn, tn_err_t *err) {
  for (int i = 0; i < nn; i++)
    if (ns[i] < 8 || ns[i] > 256 || ns[i] % 8)
      return tn_err_set(err, TN_EINVAL, "wgmma m64nNk16 needs N from 8 to 256 in steps of 8, not %d", ns[i]);
  tn_buf_put(o, common_text);
  for (int i = 0; i < nn; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= ns[j] == ns[i];
    if (seen) continue;
    for (int r = 0; r < 2; r++) {
      print_wgmma(o, ns[i], "f16", r);
      print_wgmma(o, ns[i], "bf16", r);
    }
  }
  tn_buf_put(o, "#endif\n");
  return TN_OK;
}
