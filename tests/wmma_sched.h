/* wmma_sched.h — a hand-made tensor-core schedule of matmul_f16/bf16 (and of
 * float32 matmul with tf32), shared by the tensorize and codegen suites: a
 * thread block computes 32 x 64 of the accumulator with 2 x 2 warps, each
 * warp 16 x 32 (two accumulator fragments) over K in steps of `kt` (the
 * intrinsic's K); A and B staged in shared memory per step with rows padded
 * by storage_align (32 n + 8), copied by all 128 threads; the accumulator a
 * local buffer that only the wmma fill, mma and store intrinsics touch.
 * Include schedule/schedule.h and Check first. */
#ifndef TUNED_WMMA_SCHED_H
#define TUNED_WMMA_SCHED_H

#define WS_OK(call)                                                  \
  do {                                                               \
    tn_err_t e_ = {0};                                               \
    tn_err_t *err = &e_;                                             \
    ck_assert_msg((call) == 0, "%s: %s", #call, e_.msg);             \
  } while (0)

typedef struct wmma_sched {
  sch_t *s;
  sch_rv_t init_loop, update_loop, store_loop; /* the loops to tensorize (fill, mma, store) */
  sch_rv_t k0;                                 /* the loop over K's steps (copies, then the mma) */
} wmma_sched_t;

/* The copy under k0 of `cache` spread over the block's 4 x 32 threads,
 * `lanes` consecutive elements per thread (> 1: a vectorized loop). */
static inline void ws_cooperative(sch_t *s, sch_rv_t cache, int lanes) {
  sch_rv_t l[8], fused, parts[4];
  int n = 0;
  WS_OK(sch_get_loops(s, cache, l, &n, err));
  WS_OK(sch_fuse(s, l + n - 2, 2, &fused, err));
  sch_arg_t f[4] = {sch_arg_none(), sch_arg_int(4), sch_arg_int(32), sch_arg_int(lanes)};
  WS_OK(sch_split(s, fused, f, lanes > 1 ? 4 : 3, parts, err));
  WS_OK(sch_bind(s, parts[1], "threadIdx.y", err));
  WS_OK(sch_bind(s, parts[2], "threadIdx.x", err));
  if (lanes > 1) WS_OK(sch_vectorize(s, parts[3], err));
}

static inline wmma_sched_t ws_schedule_lanes(const ir_func_t *f, const char *name, const char *cast_block, int kt,
                                             int lanes_a, int lanes_b);

/* Everything but the tensorize calls; block `name` is the matmul's. */
static inline wmma_sched_t ws_schedule(const ir_func_t *f, const char *name, const char *cast_block, int kt) {
  return ws_schedule_lanes(f, name, cast_block, kt, 1, 1);
}

/* The same with the copies of A and B vectorized by lanes_a and lanes_b. */
static inline wmma_sched_t ws_schedule_lanes(const ir_func_t *f, const char *name, const char *cast_block, int kt,
                                             int lanes_a, int lanes_b) {
  wmma_sched_t w;
  sch_t *s = w.s = sch_create(f, 1);
  sch_rv_t b, l[8], ip[3], jp[4], kp[2];
  int n = 0;
  WS_OK(sch_get_block(s, name, &b, err));
  WS_OK(sch_get_loops(s, b, l, &n, err));
  sch_arg_t fi[3] = {sch_arg_none(), sch_arg_int(2), sch_arg_int(16)};
  sch_arg_t fj[4] = {sch_arg_none(), sch_arg_int(2), sch_arg_int(2), sch_arg_int(16)};
  sch_arg_t fk[2] = {sch_arg_none(), sch_arg_int(kt)};
  WS_OK(sch_split(s, l[0], fi, 3, ip, err));
  WS_OK(sch_split(s, l[1], fj, 4, jp, err));
  WS_OK(sch_split(s, l[2], fk, 2, kp, err));
  sch_rv_t order[9] = {ip[0], jp[0], ip[1], jp[1], kp[0], jp[2], ip[2], jp[3], kp[1]};
  WS_OK(sch_reorder(s, order, 9, err));
  sch_rv_t bx, ty;
  WS_OK(sch_fuse(s, order, 2, &bx, err));
  WS_OK(sch_fuse(s, order + 2, 2, &ty, err));
  WS_OK(sch_bind(s, bx, "blockIdx.x", err));
  WS_OK(sch_bind(s, ty, "threadIdx.y", err));
  /* the accumulator: one warp's 16 x 32 in a local buffer, written back under the warp's loop */
  sch_rv_t acc, ca, cb;
  WS_OK(sch_cache_write(s, b, 0, "local", &acc, err));
  WS_OK(sch_reverse_compute_at(s, acc, ty, true, err));
  WS_OK(sch_cache_read(s, b, 0, "shared", &ca, err));
  WS_OK(sch_compute_at(s, ca, kp[0], true, err));
  WS_OK(sch_cache_read(s, b, 1, "shared", &cb, err));
  WS_OK(sch_compute_at(s, cb, kp[0], true, err));
  WS_OK(sch_storage_align(s, ca, 0, 0, 32, 8, err));
  WS_OK(sch_storage_align(s, cb, 0, 0, 32, 8, err));
  ws_cooperative(s, ca, lanes_a);
  ws_cooperative(s, cb, lanes_b);
  sch_rv_t init;
  WS_OK(sch_decompose_reduction(s, b, kp[0], &init, err));
  WS_OK(sch_get_loops(s, init, l, &n, err));
  w.init_loop = l[n - 2]; /* i2 j3 under j2 */
  w.update_loop = ip[2];  /* i2 j3 k1 under k0 j2 */
  w.k0 = kp[0];
  /* the write-back: ax1 split by 16, its outer part first */
  sch_rv_t wl[8], ax1[2];
  WS_OK(sch_get_loops(s, acc, wl, &n, err));
  sch_arg_t f16[2] = {sch_arg_none(), sch_arg_int(16)};
  WS_OK(sch_split(s, wl[n - 1], f16, 2, ax1, err));
  sch_rv_t worder[3] = {ax1[0], wl[n - 2], ax1[1]};
  WS_OK(sch_reorder(s, worder, 3, err));
  w.store_loop = wl[n - 2];
  if (cast_block) { /* the rounding to 16 bits: its own kernel, 128 threads per block */
    sch_rv_t c, cl[4], fused, parts[2];
    WS_OK(sch_get_block(s, cast_block, &c, err));
    WS_OK(sch_get_loops(s, c, cl, &n, err));
    WS_OK(sch_fuse(s, cl, n, &fused, err));
    sch_arg_t f128[2] = {sch_arg_none(), sch_arg_int(128)};
    WS_OK(sch_split(s, fused, f128, 2, parts, err));
    WS_OK(sch_bind(s, parts[0], "blockIdx.x", err));
    WS_OK(sch_bind(s, parts[1], "threadIdx.x", err));
  }
  return w;
}

/* The three tensorize calls: fill, mma `intrin`, store. */
static inline void ws_tensorize(const wmma_sched_t *w, const char *intrin) {
  WS_OK(sch_tensorize(w->s, w->init_loop, "wmma_fill_f32_16x16", err));
  WS_OK(sch_tensorize(w->s, w->update_loop, intrin, err));
  WS_OK(sch_tensorize(w->s, w->store_loop, "wmma_store_f32_16x16", err));
}

/* The schedule with the three tensorize calls. */
static inline sch_t *ws_tensorized(const ir_func_t *f, const char *name, const char *cast_block, const char *intrin,
                                   int kt) {
  wmma_sched_t w = ws_schedule(f, name, cast_block, kt);
  ws_tensorize(&w, intrin);
  return w.s;
}

#endif
