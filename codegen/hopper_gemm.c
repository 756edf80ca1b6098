/* hopper_gemm.c — the CUDA kernel of a block that the Hopper rule
 * (sampler/rules_hopper.c) annotated: out[(b,) i, j] += A * B over k
 * (ir_hopper_gemm_shape), float16 or bfloat16 operands, float32 out, printed
 * from the block's shape and the trace's decisions (ir/intrin.h,
 * IR_ANN_HOPPER_*) with the primitives of hopper.c:
 *
 *   - a block tile of (64 x warpgroups x m_frags) x n_tile, tiles in the
 *     grouped order (`group` row tiles share a column of B while it is in
 *     L2), batches after one another; one CTA per tile, or (`ctas`) a
 *     persistent grid of that many CTAs (the target's SMs), CTA x taking
 *     tiles x, x + gridDim.x, ... with its K steps numbered on across them,
 *     so the ring and its phases carry over and the next tile's first
 *     stages are copied while this one's last are multiplied;
 *   - K in steps of 64: one stage holds the A and B tiles K-major in rows of
 *     128 bytes, 128B-swizzled (what wgmma's descriptors read without bank
 *     conflicts), in a ring of `stages` stages;
 *   - every consumer thread, or (`producer`) a producer warpgroup that gave
 *     its registers to the consumers with setmaxnreg, fills a stage: with
 *     `tma`, a K-major operand (A[M, K], B^T[N, K]) by one thread's
 *     cp.async.bulk.tensor.2d of a 64 x rows box through a tensor map
 *     (cg_kernel_t's maps, a __grid_constant__ parameter; 128B swizzle)
 *     whose bytes the thread first expects on the stage's full mbarrier;
 *     the other operands by ordinary loads and stores (16-byte vectors when
 *     K is contiguous, halves otherwise), then fence.proxy.async and an
 *     arrive on the full mbarrier (which counts one arrival when TMA brings
 *     both operands, the copying threads' otherwise); the consumer
 *     warpgroups wait for its phase, issue m_frags x 4 wgmma m64nNk16 into
 *     their accumulators, commit, and once the previous step's group
 *     completed (wait_group 1) arrive on its empty mbarrier, which the
 *     copies of the step `stages` - 1 ahead wait for;
 *   - with a cluster (`cluster` 2: two CTAs along M sharing B's stage tiles,
 *     -2: along N sharing A's; __cluster_dims__), the pair takes a unit of
 *     two tiles (a persistent grid whole clusters of units); each CTA's TMA
 *     brings half of the shared tile with .multicast::cluster into both,
 *     each full mbarrier expecting the whole tile's bytes; the empty
 *     mbarriers count both CTAs' consumers, who arrive on both (mapa, a
 *     remote arrive), since either CTA's copies refill both; barrier.cluster
 *     after the mbarriers' init and before exiting;
 *   - once a tile's last wgmma completed, each consumer warp stages its
 *     rows of the accumulators (or of a fused elementwise epilogue computed
 *     from them: float16 rounding, bias, activation) in shared memory of
 *     its own, 128 bytes of a row at a time, and stores them to the output
 *     as rows of 16-byte vectors, consecutive threads at consecutive
 *     addresses (print_store).
 *
 * Not yet: cp.async, clusters along both M and N, TMA stores of the
 * epilogue (cp.async.bulk.tensor from the staged rows). */
#include "cg_internal.h"
#include "ir/analysis.h"

#include <stdio.h>
#include <string.h>

/* The GEMM the block computes. */
typedef struct hgemm {
  ir_hopper_gemm_t g;
  const ir_block_t *blk;
  const ir_buffer_t *a, *b, *out;
  bool a_k_inner, b_k_inner; /* K is the operand's last (contiguous) dimension */
  int64_t batch, m, n, k; /* batch 1: none */
  const ir_block_t *epi;             /* the fused epilogue, computed from the accumulators (NULL: none) */
  const ir_var_t *epi_row, *epi_col; /* its iterators along the output's rows and columns */
  const ir_buffer_t *dst;            /* what the kernel stores: the epilogue's output, or out */
} hgemm_t;

/* The block's GEMM (ir_hopper_gemm_shape), which the decided tile must divide. */
static int analyse(cg_ctx_t *c, const ir_block_t *b, hgemm_t *h) {
  const char *bad = NULL;
  ir_hopper_shape_t sh;
  if (ir_hopper_gemm_shape(b, &sh, &bad)) {
    h->a = sh.a, h->b = sh.b, h->out = sh.out, h->a_k_inner = sh.a_k_inner, h->b_k_inner = sh.b_k_inner;
    h->batch = sh.batch, h->m = sh.m, h->n = sh.n, h->k = sh.k;
    if (h->m % ir_hopper_gemm_rows(&h->g) || h->n % h->g.n_tile || h->k % IR_HOPPER_K_TILE)
      bad = "the tile does not divide M, N or K";
    else
      ir_hopper_gemm_cluster_ok(&h->g, &sh, &bad);
  }
  if (bad)
    return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\" is annotated %s but %s", b->name, IR_ANN_HOPPER_GEMM, bad);
  return TN_OK;
}

#define MAX_BLOCKS 4

typedef struct find {
  const ir_block_t *hopper;
  const ir_block_t *all[MAX_BLOCKS];
  int nblocks;
} find_t;

static bool find_visit(ir_stmt_t *s, void *p) {
  find_t *f = p;
  if (s->kind != IR_S_BLOCK) return s->kind != IR_S_STORE;
  if (f->nblocks < MAX_BLOCKS) f->all[f->nblocks] = &s->u.block;
  f->nblocks++;
  if (ir_annot_get(s->u.block.annots, s->u.block.nannots, IR_ANN_HOPPER_GEMM)) f->hopper = &s->u.block;
  return true;
}

/* The blocks of root statement k, and the Hopper block among them (NULL none). */
static void kernel_blocks(cg_ctx_t *c, int k, find_t *f) {
  memset(f, 0, sizeof *f);
  ir_stmt_walk((ir_stmt_t *)c->roots[k], find_visit, f);
}

static bool touch_visit(ir_stmt_t *s, void *p) {
  const ir_buffer_t **b = p;
  if (s->kind == IR_S_BLOCK && *b && (ir_block_reads(&s->u.block, *b) || ir_block_writes(&s->u.block, *b))) *b = NULL;
  return *b != NULL;
}

/* Whether a block of root statement k reads or writes b. */
static bool root_touches(cg_ctx_t *c, int k, const ir_buffer_t *b) {
  ir_stmt_walk((ir_stmt_t *)c->roots[k], touch_visit, &b);
  return b == NULL;
}

void cg_hopper_gemm_workspaces(cg_ctx_t *c) {
  for (int k = 0; k < c->nroots && c->d->gpu; k++) {
    find_t f;
    ir_hopper_shape_t sh;
    const char *why;
    kernel_blocks(c, k, &f);
    if (!f.hopper || f.nblocks > MAX_BLOCKS || !ir_hopper_gemm_shape(f.hopper, &sh, &why)) continue;
    cg_buf_t *cb = &c->bufs[sh.out->id];
    bool fused = false, elsewhere = false;
    for (int i = 0; i < f.nblocks; i++) fused |= f.all[i] != f.hopper && ir_hopper_epilogue(f.all[i], sh.out, NULL, NULL);
    for (int j = 0; j < c->nroots; j++) elsewhere |= j != k && root_touches(c, j, sh.out);
    if (fused && !elsewhere && cb->param && sh.out->role == IR_BUF_TEMP) cb->param = false;
  }
}

bool cg_hopper_gemm_kernel(cg_ctx_t *c, int k) {
  find_t f;
  kernel_blocks(c, k, &f);
  return c->d->gpu && f.hopper;
}

/* Besides the GEMM's update: its init (where the reduction was decomposed)
 * and at most one fused epilogue (ir_hopper_epilogue), nothing else. */
static int other_blocks(cg_ctx_t *c, const find_t *f, hgemm_t *h) {
  if (f->nblocks > 3)
    return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\" is scheduled for Hopper's warpgroup MMA but shares its kernel "
                   "with %d other blocks", h->blk->name, f->nblocks - 1);
  for (int i = 0; i < f->nblocks; i++) {
    const ir_block_t *b = f->all[i];
    if (b == h->blk || (ir_block_writes(b, h->out) && !ir_block_reads(b, h->out))) continue;
    if (h->epi || !ir_hopper_epilogue(b, h->out, &h->epi_row, &h->epi_col))
      return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\" shares the kernel of Hopper GEMM block \"%s\" but is not "
                     "an elementwise epilogue of %s", b->name, h->blk->name, h->out->name);
    h->epi = b;
  }
  return TN_OK;
}

/* Copies of one stage: tile `t` (rows x 64 halves, 128B-swizzled) from
 * operand X's rows row0.. and columns k0.. of K; ld the operand's row length. */
static const char load_text[] =
    "/* One operand's 64-wide K slice into a stage: rows of 128 bytes, 16-byte chunks swizzled by the row's low 3\n"
    "   bits (wgmma's 128B mode); K contiguous in X: 16-byte copies, else half by half. */\n"
    "template <int ROWS, int THREADS, bool K_INNER>\n"
    "__device__ __forceinline__ void tuned_hopper_stage(unsigned char *t, const unsigned short *__restrict__ X, "
    "long long ld,\n"
    "                                                   long long row0, long long k0, int tid) {\n"
    "  if (K_INNER) {\n"
    "#pragma unroll\n"
    "    for (int q = tid; q < ROWS * 8; q += THREADS) {\n"
    "      int r = q >> 3, c = q & 7;\n"
    "      *(float4 *)(t + r * 128 + ((c ^ (r & 7)) << 4)) = *(const float4 *)(X + (row0 + r) * ld + k0 + 8 * c);\n"
    "    }\n"
    "  } else {\n"
    "#pragma unroll 4\n"
    "    for (int q = tid; q < ROWS * 64; q += THREADS) {\n"
    "      int kk = q / ROWS, r = q % ROWS;\n"
    "      *(unsigned short *)(t + r * 128 + (((kk >> 3) ^ (r & 7)) << 4) + (kk & 7) * 2) = X[(k0 + kk) * ld + row0 "
    "+ r];\n"
    "    }\n"
    "  }\n"
    "}\n";

static void print_epilogue(cg_ctx_t *c, const hgemm_t *h, tn_buf_t *o);
static void print_store(cg_ctx_t *c, const hgemm_t *h, tn_buf_t *o);

/* Whether TMA brings operand X's stages: the decision (or a cluster sharing X), and K its contiguous dimension. */
static bool tma_a(const hgemm_t *h) {
  bool a, b;
  ir_hopper_gemm_tma_ops(&h->g, h->a_k_inner, h->b_k_inner, &a, &b);
  return a;
}
static bool tma_b(const hgemm_t *h) {
  bool a, b;
  ir_hopper_gemm_tma_ops(&h->g, h->a_k_inner, h->b_k_inner, &a, &b);
  return b;
}
/* Every stage by TMA: one thread arms and fills it, the full mbarrier counts one arrival. */
static bool tma_all(const hgemm_t *h) { return tma_a(h) && tma_b(h); }
/* CTAs per cluster (1: none); along N they share A's tiles, else B's. */
static int csize(const hgemm_t *h) { return ir_hopper_gemm_cluster_size(&h->g); }
static bool shares_a(const hgemm_t *h) { return h->g.cluster < -1; }
static bool shares_b(const hgemm_t *h) { return h->g.cluster > 1; }

/* Operand X's TMA copy of a stage (STAGE, k0, bat, m0/n0 of the macro):
 * the whole tile, or where the cluster shares X this CTA's slice of it,
 * multicast to every CTA of the cluster at the same place. */
static void print_tma(const hgemm_t *h, const char *map, int off, int rows, int64_t ext, const char *x0, bool shared,
                      tn_buf_t *o) {
  int cs = csize(h);
  char dst[32] = "st";
  if (off) snprintf(dst, sizeof dst, "st + %d", off);
  if (!shared) {
    tn_buf_printf(o, "      tuned_tma_load_2d(%s, &%s, k0, (int)(bat * %lldLL + %s), &full[STAGE]); \\\n", dst, map,
                  (long long)ext, x0);
    return;
  }
  tn_buf_printf(o,
                "      tuned_tma_load_2d_multicast(%s + rank * %d, &%s, k0, (int)(bat * %lldLL + %s + rank * %d), "
                "&full[STAGE], %d); \\\n",
                dst, rows / cs * 128, map, (long long)ext, x0, rows / cs, (1 << cs) - 1);
}

/* The tensor map of a K-major operand: its rows (batches folded in) of K
 * elements, a box of 64 x `rows`, 128B-swizzled as the stage's layout. */
static void tensor_map(cg_ctx_t *c, const ir_buffer_t *x, int64_t rows, int box_rows, const char *name,
                       cg_kernel_t *kd) {
  cg_tensor_map_t *t = &kd->maps[kd->nmaps++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->param = cg_arg_index(c, x); /* a parameter, or a workspace (an operand transposed by a kernel before) */
  t->dims[0] = x->shape[x->ndim - 1];
  t->dims[1] = rows;
  t->stride_bytes = t->dims[0] * 2;
  t->box[0] = IR_HOPPER_K_TILE;
  t->box[1] = box_rows;
  t->swizzle = 128;
}

/* The kernel's head: shared memory, this CTA's tiles (one, or every
 * gridDim.x-th of a persistent grid; `steps` counts their K steps, which
 * index the ring), the mbarriers (full: the copying threads arrive, or the
 * TMA thread with the stage's bytes; empty: the consumers), and two macros:
 * the tile T's place in the grouped order, and the copies of K step J. */
static void print_head(cg_ctx_t *c, const hgemm_t *h, int64_t smem, tn_buf_t *o) {
  const ir_hopper_gemm_t *g = &h->g;
  int bm = ir_hopper_gemm_rows(g), bn = g->n_tile, s = g->stages, consumers = 128 * g->warpgroups;
  int64_t stage = (int64_t)(bm + bn) * 128, tm = h->m / bm, tn = h->n / bn, kt = h->k / IR_HOPPER_K_TILE;
  int threads = g->producer ? 128 : consumers, cs = csize(h);
  /* a cluster's CTAs take a tile of cs tiles together (their unit): rank r its r-th */
  int64_t um = shares_b(h) ? tm / cs : tm, un = shares_a(h) ? tn / cs : tn;
  const char *unit0 = cs > 1 ? "cluster" : "(int)blockIdx.x", *units = cs > 1 ? "clusters" : "(int)gridDim.x";
  char mr[32] = "", nr[32] = "";
  if (shares_b(h)) snprintf(mr, sizeof mr, " + rank * %d", bm);
  if (shares_a(h)) snprintf(nr, sizeof nr, " + rank * %d", bn);
  tn_buf_printf(o,
                "#ifdef TUNED_CUDA_HOST_H\n  __shared__ __align__(1024) unsigned char tuned_dyn_shared[%lld];\n"
                "#else\n  extern __shared__ __align__(1024) unsigned char tuned_dyn_shared[];\n#endif\n",
                (long long)smem);
  tn_buf_printf(o,
                "  /* %d x %d tiles, %d warpgroup%s of %d m64n%dk16 blocks, %d stages of K 64, groups of %d row tiles,\n"
                "     copies by %s%s, %s */\n"
                "  unsigned char *smem = tuned_dyn_shared + ((1024u - (tuned_smem_addr(tuned_dyn_shared) & 1023u)) & "
                "1023u);\n"
                "  unsigned long long *full = (unsigned long long *)(smem + %lld), *empty = full + %d;\n",
                bm, bn, g->warpgroups, g->warpgroups > 1 ? "s" : "", g->m_frags, bn, s, g->group,
                g->producer ? "a producer warpgroup (the last)" : "every thread",
                tma_all(h) ? " (TMA)" : tma_a(h) ? " (TMA for A)" : tma_b(h) ? " (TMA for B)" : "",
                g->ctas ? "a persistent grid" : "a CTA per tile", (long long)(stage * s), s);
  if (cs > 1)
    tn_buf_printf(o,
                  "  /* clusters of %d CTAs along %s: each brings 1/%d of the shared %s tile to all by TMA multicast */\n"
                  "  const int cluster = (int)blockIdx.x / %d, clusters = (int)gridDim.x / %d, rank = (int)blockIdx.x %% %d;\n",
                  cs, shares_a(h) ? "N" : "M", cs, shares_a(h) ? "A" : "B", cs, cs, cs);
  if (!tma_a(h)) tn_buf_printf(o, "  const unsigned short *ga = (const unsigned short *)%s;\n", c->bufs[h->a->id].name);
  if (!tma_b(h)) tn_buf_printf(o, "  const unsigned short *gb = (const unsigned short *)%s;\n", c->bufs[h->b->id].name);
  /* with a cluster, the empty phases count the consumers of every CTA (the stage's multicast writes to all), and
     no CTA copies before every CTA's mbarriers are set up */
  tn_buf_printf(o,
                "  const int tid = threadIdx.x, wg = tid / 128, lane = tid %% 128;\n"
                "  const int tiles = (%lld - %s + %s - 1) / %s, steps = tiles * %lld;\n"
                "  if (tid == 0) {\n    for (int s = 0; s < %d; s++) {\n      tuned_mbar_init(&full[s], %d);\n"
                "      tuned_mbar_init(&empty[s], %d);\n    }\n%s  }\n  %s\n",
                (long long)(h->batch * um * un), unit0, units, units, (long long)kt, s, tma_all(h) ? 1 : threads,
                consumers * cs, cs > 1 ? "    tuned_fence_mbarrier_init();\n" : "",
                cs > 1 ? "tuned_cluster_sync();" : "__syncthreads();");
  tn_buf_printf(o,
                "#define TUNED_HOPPER_TILE(T) \\\n"
                "  const int bat = (T) / %lld, pid = (T) %% %lld, first = pid / %lld * %d; \\\n"
                "  const int rows = %lld - first < %d ? %lld - first : %d; \\\n"
                "  const long long m0 = (long long)(first + pid %% %lld %% rows) * %d%s, n0 = (long long)(pid %% %lld / rows) "
                "* %d%s; \\\n  (void)bat;\n",
                (long long)(um * un), (long long)(um * un), (long long)(g->group * un), g->group, (long long)um,
                g->group, (long long)um, g->group, (long long)(g->group * un), shares_b(h) ? bm * cs : bm, mr,
                (long long)(g->group * un), shares_a(h) ? bn * cs : bn, nr);
  tn_buf_printf(o,
                "#define TUNED_HOPPER_LOAD(J, STAGE, T) do { \\\n"
                "    TUNED_HOPPER_TILE(%s + (J) / %lld * %s) \\\n"
                "    const int k0 = (J) %% %lld * 64; \\\n"
                "    unsigned char *st = smem + (STAGE) * %lld; \\\n",
                unit0, (long long)kt, units, (long long)kt, (long long)stage);
  if (tma_a(h) || tma_b(h)) {
    /* all TMA: the one arrival carries the bytes; else they are expected
       before the copies and the copying threads' arrivals follow */
    tn_buf_printf(o, "    if ((T) == 0) { \\\n      tuned_mbar_%sexpect_tx(&full[STAGE], %lld); \\\n",
                  tma_all(h) ? "arrive_" : "", (long long)ir_hopper_gemm_tma_bytes(g, h->a_k_inner, h->b_k_inner));
    if (tma_a(h)) print_tma(h, "tuned_map_a", 0, bm, h->m, "m0", shares_a(h), o);
    if (tma_b(h)) print_tma(h, "tuned_map_b", bm * 128, bn, h->n, "n0", shares_b(h), o);
    tn_buf_put(o, "    } \\\n");
  }
  if (!tma_a(h))
    tn_buf_printf(o, "    tuned_hopper_stage<%d, %d, %s>(st, ga + bat * %lldLL, %lld, m0, k0, T); \\\n", bm, threads,
                  h->a_k_inner ? "true" : "false", (long long)(h->m * h->k), (long long)(h->a_k_inner ? h->k : h->m));
  if (!tma_b(h))
    tn_buf_printf(o, "    tuned_hopper_stage<%d, %d, %s>(st + %d, gb + bat * %lldLL, %lld, n0, k0, T); \\\n", bn,
                  threads, h->b_k_inner ? "true" : "false", bm * 128, (long long)(h->k * h->n),
                  (long long)(h->b_k_inner ? h->k : h->n));
  if (!tma_all(h)) tn_buf_put(o, "    tuned_fence_proxy_async(); tuned_mbar_arrive(&full[STAGE]); \\\n");
  tn_buf_put(o, "  } while (0)\n");
}

/* The kernel's body after its declaration line.  Without a producer every
 * thread (TMA: thread 0) copies K step j + stages - 1 after its
 * warpgroup's wgmma of step j - 1 completed; with one, the producer runs
 * ahead on its own, waiting only for the empty phases.  K steps run on
 * over a persistent CTA's tiles, so the next tile's first stages are
 * copied while this one's last are multiplied. */
static void print_body(cg_ctx_t *c, const hgemm_t *h, int64_t smem, tn_buf_t *o) {
  const ir_hopper_gemm_t *g = &h->g;
  int bm = ir_hopper_gemm_rows(g), bn = g->n_tile, s = g->stages;
  int64_t stage = (int64_t)(bm + bn) * 128, kt = h->k / IR_HOPPER_K_TILE;
  const char *ty = h->a->dtype == IR_BFLOAT16 ? "bf16" : "f16";
  int cs = csize(h);
  ir_hopper_regs_t regs; /* registers after setmaxnreg */
  ir_hopper_gemm_reg_plan(g, tma_all(h), &regs);
  int preg = regs.producer, creg = regs.consumer;
  /* a cluster's CTAs wait for one another before exiting: a peer's multicast copies and arrivals may still
     write this CTA's shared memory */
  const char *exit_sync = cs > 1 ? "tuned_cluster_sync();\n" : "";
  char release[160];
  if (cs > 1)
    snprintf(release, sizeof release, "for (int r = 0; r < %d; r++) tuned_mbar_arrive_cluster(&empty[(j - 1) %% %d], r);",
             cs, s);
  else
    snprintf(release, sizeof release, "tuned_mbar_arrive(&empty[(j - 1) %% %d]);", s);
  print_head(c, h, smem, o);
  if (g->producer)
    tn_buf_printf(o,
                  "  if (wg == %d) { /* the producer%s */\n"
                  "    tuned_setmaxnreg_dec<%d>();\n"
                  "    for (int j = 0; j < steps%s; j++) {\n"
                  "      const int s = j %% %d;\n"
                  "      if (j >= %d)\n        while (!tuned_mbar_try_wait(&empty[s], (j / %d - 1) & 1)) {\n        }\n"
                  "      TUNED_HOPPER_LOAD(j, s, lane);\n"
                  "    }\n"
                  "    %s%sreturn;\n"
                  "  }\n"
                  "  tuned_setmaxnreg_inc<%d>();\n",
                  g->warpgroups, tma_all(h) ? ": its first thread issues the TMA copies" : "", preg,
                  tma_all(h) ? " && lane == 0" : "", s, s, s, exit_sync, cs > 1 ? "    " : "", creg);
  else
    tn_buf_printf(o, "  for (int j = 0; j < %d && j < steps; j++) TUNED_HOPPER_LOAD(j, j, tid);\n", s - 1);
  tn_buf_printf(o,
                "  for (int t = 0, j = 0; t < tiles; t++) {\n"
                "    TUNED_HOPPER_TILE(%s + t * %s)\n",
                cs > 1 ? "cluster" : "(int)blockIdx.x", cs > 1 ? "clusters" : "(int)gridDim.x");
  if (!h->epi)
    tn_buf_printf(o, "    float *gc = %s + bat * %lldLL;\n", c->bufs[h->out->id].name, (long long)(h->m * h->n));
  tn_buf_printf(o,
                "    tuned_wgmma_acc<%d> acc[%d];\n"
                "    for (int kt = 0; kt < %lld; kt++, j++) {\n"
                "      const int s = j %% %d;\n"
                "      while (!tuned_mbar_try_wait(&full[s], (j / %d) & 1)) {\n      }\n"
                "      tuned_wgmma_fence();\n"
                "#pragma unroll\n"
                "      for (int f = 0; f < %d; f++)\n"
                "#pragma unroll\n"
                "        for (int kk = 0; kk < 4; kk++)\n"
                "          tuned_wgmma_%s(acc[f],\n"
                "                         tuned_wgmma_desc(smem + s * %lld + (wg * %d + f) * 8192 + kk * 32, 128, 1024, "
                "TUNED_SWIZZLE_128B),\n"
                "                         tuned_wgmma_desc(smem + s * %lld + %d + kk * 32, 128, 1024, "
                "TUNED_SWIZZLE_128B),\n"
                "                         kt > 0 || kk > 0);\n"
                "      tuned_wgmma_commit();\n"
                "      tuned_wgmma_wait<1>(); /* the step before is read: its slot may be refilled */\n"
                "      if (j > 0) %s\n",
                bn, g->m_frags, (long long)kt, s, s, g->m_frags, ty, (long long)stage, g->m_frags, (long long)stage,
                bm * 128, release);
  if (!g->producer)
    tn_buf_printf(o,
                  "      const int next = j + %d;\n"
                  "      if (next < steps%s) {\n"
                  "        const int ns = next %% %d;\n"
                  "        if (next >= %d)\n          while (!tuned_mbar_try_wait(&empty[ns], (next / %d - 1) & 1)) {\n"
                  "          }\n"
                  "        TUNED_HOPPER_LOAD(next, ns, tid);\n"
                  "      }\n",
                  s - 1, tma_all(h) ? " && tid == 0" : "", s, s, s);
  tn_buf_put(o, "    }\n    tuned_wgmma_wait<0>();\n");
  print_store(c, h, o);
  tn_buf_put(o, "  }\n");
  if (cs > 1) tn_buf_printf(o, "  %s", exit_sync);
  tn_buf_put(o, "#undef TUNED_HOPPER_LOAD\n#undef TUNED_HOPPER_TILE\n");
}

/* The tile's store, once its last wgmma completed: each consumer warp
 * stages its 16 rows of an m64 block, 128 bytes of their columns at a time,
 * in shared memory of its own (IR_HOPPER_OUT_STAGE_WARP_BYTES past the
 * mbarriers: no barrier with the other warps, nor with a producer that may
 * be filling the ring for the next tile already), the 16-byte chunks of a
 * row swizzled by its low 3 bits (the fragment's stores and the rows' loads
 * without bank conflicts), then stores those rows to the output as 16-byte
 * vectors, 8 consecutive threads to a row of 128 bytes; __syncwarp between
 * the stores to shared memory and the loads, and before the next pass
 * overwrites them.  The fused epilogue is computed as the accumulators are
 * staged. */
static void print_store(cg_ctx_t *c, const hgemm_t *h, tn_buf_t *o) {
  const ir_hopper_gemm_t *g = &h->g;
  int s = g->stages, esz = cg_elem_bytes(c, h->dst), row = 128 / esz, chunk = 16 / esz;
  const char *ty = cg_storage_type(c, h->dst);
  tn_buf_printf(o,
                "    /* the tile through shared memory, warp by warp: 16 rows of %d columns at a time */\n"
                "    %s *tuned_so = (%s *)(smem + %lld + tid / 32 * %d);\n"
                "#pragma unroll\n"
                "    for (int f = 0; f < %d; f++)\n"
                "#pragma unroll\n"
                "      for (int tuned_p = 0; tuned_p < %d; tuned_p++) {\n"
                "        /* register i of m64 block f: row 16 warp + lane / 4 (+ 8), columns 8 (i / 4) + 2 (lane %% 4) and + 1 */\n"
                "#pragma unroll\n"
                "        for (int i = tuned_p * %d; i < tuned_p * %d + %d; i += 2) {\n"
                "          const int tuned_sr = lane %% 32 / 4 + 8 * (i / 2 %% 2), tuned_sc = 8 * (i / 4) + 2 * (lane %% 4) - "
                "tuned_p * %d;\n"
                "          const int tuned_at = tuned_sr * %d + (tuned_sc / %d ^ tuned_sr %% 8) * %d + tuned_sc %% %d;\n",
                row, ty, ty, (long long)(ir_hopper_gemm_stage_bytes(g) * s + 16 * s), IR_HOPPER_OUT_STAGE_WARP_BYTES,
                g->m_frags, g->n_tile / row, row / 2, row / 2, row / 2, row, row, chunk, chunk, chunk);
  if (h->epi)
    print_epilogue(c, h, o);
  else
    tn_buf_put(o, "          float2 v;\n          v.x = acc[f][i];\n          v.y = acc[f][i + 1];\n"
                  "          *(float2 *)(tuned_so + tuned_at) = v;\n");
  tn_buf_printf(o,
                "        }\n"
                "        __syncwarp();\n"
                "#pragma unroll\n"
                "        for (int tuned_q = 0; tuned_q < 4; tuned_q++) {\n"
                "          const int tuned_sr = 4 * tuned_q + lane %% 32 / 8, tuned_ch = lane %% 8;\n"
                "          const long long tuned_r = m0 + (wg * %d + f) * 64 + 16 * (lane / 32) + tuned_sr;\n"
                "          const long long tuned_c = n0 + tuned_p * %d + tuned_ch * %d;\n"
                "          const float4 tuned_x = *(const float4 *)(tuned_so + tuned_sr * %d + (tuned_ch ^ tuned_sr %% 8) * %d);\n",
                g->m_frags, row, chunk, row, chunk);
  if (h->epi) {
    const ir_block_t *saved_blk = c->blk;
    c->blk = h->epi; /* its store's index, at the row's 16 bytes */
    tn_buf_printf(o, "          const int %s = (int)tuned_r, %s = (int)tuned_c;\n", cg_var(c, h->epi_row),
                  cg_var(c, h->epi_col));
    tn_buf_printf(o, "          *(float4 *)&%s[%s] = tuned_x;\n", c->bufs[h->dst->id].name,
                  cg_expr_str(c, cg_flat_index(c, h->dst, h->epi->body->u.store.idx)));
    c->blk = saved_blk;
  } else {
    tn_buf_printf(o, "          *(float4 *)(gc + tuned_r * %lld + tuned_c) = tuned_x;\n", (long long)h->n);
  }
  tn_buf_put(o, "        }\n        __syncwarp();\n      }\n");
}

/* Marks every load of acc in e to print as `text`. */
static void override_loads(cg_ctx_t *c, const ir_expr_t *e, const ir_buffer_t *acc, const char *text) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == acc) {
    if (c->novr < CG_MAX_OVERRIDES) c->ovr_expr[c->novr] = e, c->ovr_text[c->novr++] = text;
    return;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++) override_loads(c, kids[i], acc, text);
}

/* The fused epilogue at the two columns of registers i and i + 1 of m64
 * block f, staged at tuned_at and the next (float: as one float2, which
 * the lanes store without bank conflicts): its iterators declared as the
 * element's row and column, its loads of the GEMM's output read from the
 * accumulator register. */
static void print_epilogue(cg_ctx_t *c, const hgemm_t *h, tn_buf_t *o) {
  const ir_stmt_t *st = h->epi->body;
  tn_buf_t *saved_o = c->o;
  const ir_block_t *saved_blk = c->blk;
  int saved_ind = c->ind, saved_novr = c->novr;
  c->o = o, c->blk = h->epi, c->ind = 5;
  override_loads(c, st->u.store.value, h->out, "tuned_v");
  cg_line(c, "const long long tuned_r = m0 + (wg * %d + f) * 64 + 16 * (lane / 32) + tuned_sr;", h->g.m_frags);
  cg_line(c, "const long long tuned_c = n0 + 8 * (i / 4) + 2 * (lane %% 4);");
  bool pair = !strcmp(cg_storage_type(c, h->dst), "float");
  if (pair) cg_line(c, "float tuned_e[2];");
  for (int e = 0; e < 2; e++) {
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "const float tuned_v = acc[f][i + %d];", e);
    cg_line(c, "const int %s = (int)tuned_r, %s = (int)tuned_c + %d;", cg_var(c, h->epi_row), cg_var(c, h->epi_col), e);
    cg_emit_store_at(c, h->dst, pair ? "tuned_e" : "tuned_so", pair ? (e ? "1" : "0") : e ? "tuned_at + 1" : "tuned_at",
                     cg_expr_str(c, st->u.store.value));
    c->ind--;
    cg_line(c, "}");
  }
  if (pair) {
    cg_line(c, "float2 tuned_e2;");
    cg_line(c, "tuned_e2.x = tuned_e[0];");
    cg_line(c, "tuned_e2.y = tuned_e[1];");
    cg_line(c, "*(float2 *)(tuned_so + tuned_at) = tuned_e2;");
  }
  c->o = saved_o, c->blk = saved_blk, c->ind = saved_ind, c->novr = saved_novr;
}

int cg_hopper_gemm_emit(cg_ctx_t *c, int k, cg_kernel_t *kd, const char *args, tn_buf_t *out) {
  find_t f;
  kernel_blocks(c, k, &f);
  hgemm_t h = {.blk = f.hopper};
  char why[160];
  if (!h.blk) return cg_fail(c, TN_EINVAL, "kernel %d has no Hopper GEMM block", k);
  if (c->d->target != CG_TARGET_CUDA)
    return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\" is scheduled for Hopper's warpgroup MMA, which only CUDA has",
                   h.blk->name);
  if (!ir_hopper_gemm_get(h.blk, &h.g, why, sizeof why)) return cg_fail(c, TN_EINVAL, "%s", why);
  if (analyse(c, h.blk, &h) || other_blocks(c, &f, &h)) return c->rc;
  h.dst = h.epi ? h.epi->body->u.store.buf : h.out;
  if (h.g.n_tile % (128 / cg_elem_bytes(c, h.dst)))
    return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": N tile %d is not a multiple of the %d elements of %s that a "
                   "staged row of the output holds", h.blk->name, h.g.n_tile, 128 / cg_elem_bytes(c, h.dst),
                   h.dst->name);
  c->kernel = k;
  int64_t smem = ir_hopper_gemm_smem(&h.g);
  int bm = ir_hopper_gemm_rows(&h.g), threads = ir_hopper_gemm_threads(&h.g);
  int64_t tiles = h.batch * (h.m / bm) * (h.n / h.g.n_tile);
  kd->grid[0] = ir_hopper_gemm_grid(&h.g, tiles);
  kd->grid[1] = kd->grid[2] = kd->block[1] = kd->block[2] = 1;
  kd->block[0] = threads;
  kd->dyn_shared_bytes = smem;
  kd->static_shared_bytes = 0;
  if (h.a->dtype == IR_BFLOAT16) c->need_bf16 = true;
  else c->need_half = true;
  bool seen = false;
  for (int i = 0; i < c->nhopper_n; i++) seen |= c->hopper_n[i] == h.g.n_tile;
  if (!seen && c->nhopper_n < CG_MAX_HOPPER_N) c->hopper_n[c->nhopper_n++] = h.g.n_tile;
  c->need_hopper = true;
  kd->nmaps = 0;
  int cs = csize(&h);
  kd->cluster = cs;
  if (tma_a(&h)) tensor_map(c, h.a, h.batch * h.m, shares_a(&h) ? bm / cs : bm, "tuned_map_a", kd);
  if (tma_b(&h)) tensor_map(c, h.b, h.batch * h.n, shares_b(&h) ? h.g.n_tile / cs : h.g.n_tile, "tuned_map_b", kd);
  char dims[40] = "";
  if (cs > 1) snprintf(dims, sizeof dims, "__cluster_dims__(%d, 1, 1) ", cs);
  tn_buf_printf(out, "%s void %s__launch_bounds__(%d, 1) %s(%s", c->d->kernel_decl, dims, threads, kd->name, args);
  for (int i = 0; i < kd->nmaps; i++)
    tn_buf_printf(out, ", const __grid_constant__ tuned_tensor_map %s", kd->maps[i].name);
  tn_buf_put(out, ") {\n");
  print_body(c, &h, smem, out);
  tn_buf_put(out, "}\n\n");
  return TN_OK;
}

void cg_hopper_gemm_helpers(cg_ctx_t *c, tn_buf_t *o) {
  if (!c->need_hopper) return;
  tn_err_t e = {0};
  if (cg_hopper_helpers(o, c->hopper_n, c->nhopper_n, &e) < 0) {
    cg_fail(c, e.code ? e.code : TN_EINVAL, "%s", e.msg);
    return;
  }
  tn_buf_put(o, load_text);
}
