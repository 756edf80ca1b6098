/* test_sampler.c — suite "sampler": design spaces per workload and target
 * (counts and the instructions each rule leaves), sampled candidates that
 * compute what the unscheduled program computes, replay from their JSON to
 * the same IR, lower with codegen and respect the GPU limits; the
 * postprocessors' rewrites and rejections; mutators; determinism. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "codegen/codegen.h"
#include "ir/intrin.h"
#include "ir/plan.h"
#include "measure/measure.h"
#include "sampler/sampler.h"
#include "testir.h"
#include "testutil.h"

#define SAMPLES 30

static const char *const targets[] = {"cpu", "opencl/pocl-cpu", "nvidia/h100"};

typedef struct wl_case {
  const char *name, *sets;
  int spaces[3]; /* expected spaces for cpu, opencl, cuda */
  int cpu_intrin; /* cpu spaces where the host has AVX2+FMA: the tensor intrinsics' (0: as spaces[0]) */
} wl_case_t;

/* Small sizes so that the evaluator is quick and tiles are interesting. */
static const wl_case_t workloads[] = {
    {"matmul", "M=64,N=64,K=64", {3, 1, 1}, 6},             /* two intrinsics; nothing, B, A and B packed */
    {"matmul_bt", "M=64,N=64,K=64", {3, 1, 1}, 4},          /* B packed transposed (and A), two intrinsics */
    {"batch_matmul", "BATCH=2,M=32,N=32,K=16", {3, 1, 1}, 6}, /* two intrinsics */
    {"matmul_f16", "M=32,N=64,K=32", {3, 1, 1}, 0},         /* CUDA: the tensor-core tiling */
    {"conv2d", "C=8,F=16,H=8,W=8", {3, 1, 1}, 0},
    {"dense_bias_relu", "IN=64,OUT=32", {5, 1, 1}, 0},
    {"row_sum", "M=8,N=256", {3, 2, 2}, 0},
    {"softmax", "M=8,N=64", {9, 4, 4}, 0},
    {"square", "M=64,N=48", {1, 1, 1}, 0},
    {"vector_add", "N=1000", {1, 1, 1}, 0},
    {"window_sum", "N=300", {1, 1, 1}, 0},
};

/* ---- helpers ---------------------------------------------------------------- */


/* The target, with a fixed core count on CPUs so that the spaces (rfactor's
 * condition, the parallel extent) do not depend on the test machine. */
static tn_target_t target(const char *name) {
  tn_target_t t;
  tn_err_t err = {0};
  ck_assert_msg(tn_target_lookup(name, NULL, &t, &err) == TN_OK, "%s", err.msg);
  if (t.kind == TN_TARGET_CPU) t.num_cores = 8;
  return t;
}

static smp_space_t generate(const ir_func_t *f, const tn_target_t *t, uint64_t seed) {
  smp_space_t sp;
  tn_err_t err = {0};
  ck_assert_msg(smp_generate(f, t, seed, &sp, &err) == TN_OK, "%s", err.msg);
  return sp;
}

static char *print_ir(const ir_func_t *f) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  return tn_buf_take(&b);
}

/* Instructions of a kind in a trace; with attr0 (a string) only those whose
 * first attribute is it, with n >= 0 only SamplePerfectTile with n tiles. */
static int count_insts(const sch_trace_t *t, sch_inst_kind_t k, const char *attr, int ntiles) {
  int c = 0;
  for (int i = 0; i < t->n; i++) {
    const sch_inst_t *in = &t->insts[i];
    if (in->kind != k) continue;
    if (attr) {
      const sch_arg_t *a = in->kind == SCH_CACHE_READ || in->kind == SCH_CACHE_WRITE ? &in->attrs[1] : &in->attrs[0];
      if (a->kind != SCH_ARG_STR || strcmp(a->s, attr) != 0) continue;
    }
    if (ntiles >= 0 && (in->attrs[0].kind != SCH_ARG_INT || in->attrs[0].i != ntiles)) continue;
    c++;
  }
  return c;
}

/* Reference outputs of the unscheduled function. */
typedef struct ref {
  ir_data_t *d;
} ref_t;

static ref_t reference(const ir_func_t *f) {
  ref_t r;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_data_new(f, 11, (size_t)1 << 28, &r.d, &err), TN_OK);
  ck_assert_msg(ir_eval(f, r.d, &err) == TN_OK, "%s", err.msg);
  return r;
}

static void check_outputs(const ir_func_t *orig, const ref_t *r, const ir_func_t *f, const char *what) {
  ir_data_t *d;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_data_new(f, 11, (size_t)1 << 28, &d, &err), TN_OK);
  ck_assert_msg(ir_eval(f, d, &err) == TN_OK, "%s: eval: %s", what, err.msg);
  for (int p = 0; p < orig->nparams; p++) {
    if (orig->params[p]->role != IR_BUF_OUTPUT) continue;
    double e = ir_rel_l2_error(r->d->vals[p], d->vals[p], r->d->sizes[p]);
    ck_assert_msg(e <= 1e-9, "%s: output %s differs (rel. L2 error %g)", what, orig->params[p]->name, e);
  }
  ir_data_free(d);
}

/* The trace through JSON and a replay gives the same IR (postprocessors included). */
static void check_roundtrip(const ir_func_t *f, const sch_t *s, const char *what) {
  char *json = sch_trace_to_json(sch_get_trace(s));
  sch_trace_t *t = NULL;
  sch_t *r = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_trace_from_json(json, strlen(json), &t, &err) == TN_OK, "%s: %s", what, err.msg);
  ck_assert_msg(sch_replay(f, t, 999, &r, &err) == TN_OK, "%s: replay of the JSON trace: %s", what, err.msg);
  char *a = print_ir(sch_func(s)), *b = print_ir(sch_func(r));
  ck_assert_msg(strcmp(a, b) == 0, "%s: replayed IR differs", what);
  free(a), free(b), free(json);
  sch_free(r);
  sch_trace_free(t);
}

static void check_gpu(const tn_target_t *t, const sch_t *s, const char *what) {
  smp_gpu_usage_t u;
  smp_gpu_usage(sch_func(s), &u);
  ck_assert_msg(u.unbound_blocks == 0, "%s: %d unbound blocks", what, u.unbound_blocks);
  ck_assert_msg(u.threads_per_block >= 1 && u.threads_per_block <= t->max_threads_per_block, "%s: %lld threads", what,
                (long long)u.threads_per_block);
  ck_assert_msg(u.shared_bytes <= t->max_shared_memory_per_block, "%s: %lld shared bytes", what,
                (long long)u.shared_bytes);
  ck_assert_msg(u.vector_bytes <= t->max_vector_bytes, "%s: %lld-byte vectors", what, (long long)u.vector_bytes);
}

/* Lowers s for t; returns the module. */
static cg_module_t *check_lowers(const tn_target_t *t, const sch_t *s, const char *what) {
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  ck_assert_msg(cg_lower_for(sch_func(s), t, NULL, &m, &err) == TN_OK, "%s: codegen: %s", what, err.msg);
  return m;
}

/* CUDA samples run per space through the cuda-host harness */
#define HOST_RUNS 3

/* Builds and runs the CUDA modules on the host (cuda-host harness, one
 * worker) and checks every output against f's reference evaluation. */
static void run_on_host(const ir_func_t *f, cg_module_t **mods, char (*what)[256], int n) {
  if (n == 0) return;
  tn_target_t t = target("cuda-host");
  ms_options_t o = {.seed = 1};
  o.run.min_secs = 1e-9; /* one timed run: the times mean nothing here */
  o.run.min_repeats = o.run.max_repeats = 1;
  ms_result_t *res = tn_xcalloc((size_t)n, sizeof *res);
  tn_err_t err = {0};
  ck_assert_msg(ms_measure(f, &t, mods, n, &o, res, &err) == TN_OK, "%s", err.msg);
  for (int i = 0; i < n; i++) {
    ck_assert_msg(res[i].status == MS_OK, "%s on cuda-host: %s: %s\n%s", what[i], ms_status_name(res[i].status),
                  res[i].error, mods[i]->source);
    ms_result_clear(&res[i]);
  }
  free(res);
}

/* ---- design spaces ----------------------------------------------------------- */

/* Every workload on every target gives the expected number of spaces, and
 * no rule failed along the way (a failure would show as "!rule(...)"). */
START_TEST(test_space_counts) {
  for (size_t w = 0; w < TN_ARRAY_LEN(workloads); w++) {
    ir_workload_t *wl = tu_load_sets(workloads[w].name, workloads[w].sets);
    for (int k = 0; k < 3; k++) {
      tn_target_t t = target(targets[k]);
      smp_space_t sp = generate(wl->func, &t, 1);
      int want = workloads[w].spaces[k];
      if (k == 0 && workloads[w].cpu_intrin && ir_intrin_host_supports(ir_intrin_find("f32_fma_6x16_avx2")))
        want = workloads[w].cpu_intrin;
      ck_assert_msg(sp.n == want, "%s on %s: %d spaces, expected %d", workloads[w].name, targets[k], sp.n, want);
      for (int i = 0; i < sp.n; i++) {
        ck_assert_msg(!strchr(sp.descs[i], '!'), "%s on %s: %s", workloads[w].name, targets[k], sp.descs[i]);
        for (int j = 0; j < sp.traces[i]->n; j++)
          ck_assert_msg(sp.traces[i]->insts[j].ndecision == 0, "space traces carry no decisions");
      }
      smp_space_free(&sp);
    }
    ir_workload_free(wl);
  }
}
END_TEST

/* Four chained matmuls fork past the cap of 64 spaces (3 or 6 spaces each):
 * the first space says how many forks were dropped. */
START_TEST(test_space_cap_said) {
  ir_workload_t *w = tu_parse("param N = 16\ninput A: float32[N, N]\ninput B: float32[N, N]\n"
                              "temp C1: float32[N, N]\ntemp C2: float32[N, N]\ntemp C3: float32[N, N]\n"
                              "output C4: float32[N, N]\n"
                              "C1[i, j] = sum(k < N: A[i, k] * B[k, j])\nC2[i, j] = sum(k < N: C1[i, k] * B[k, j])\n"
                              "C3[i, j] = sum(k < N: C2[i, k] * B[k, j])\nC4[i, j] = sum(k < N: C3[i, k] * B[k, j])\n");
  tn_target_t t = target("cpu");
  smp_space_t sp = generate(w->func, &t, 1);
  ck_assert_int_eq(sp.n, 64);
  ck_assert_msg(strstr(sp.descs[0], "!design spaces: the rules forked past 64 spaces; "), "%s", sp.descs[0]);
  ck_assert_msg(strstr(sp.descs[0], " forks were dropped"), "%s", sp.descs[0]);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* GPU matmul: the SSSRRSRS tiling with its binds, caches and annotations. */
START_TEST(test_gpu_matmul_space) {
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  tn_target_t t = target("nvidia/h100");
  smp_space_t sp = generate(w->func, &t, 1);
  const sch_trace_t *tr = sp.traces[0];
  ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 5), 2); /* i and j */
  ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 3), 1); /* k */
  ck_assert_int_eq(count_insts(tr, SCH_CACHE_READ, "shared", -1), 2);
  ck_assert_int_eq(count_insts(tr, SCH_CACHE_WRITE, "local", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "blockIdx.x", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "vthread.x", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "threadIdx.x", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_COOP_FETCH, -1), 2);
  ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_TILING, -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_UNROLL_EXPLICIT, -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_REVERSE_COMPUTE_AT, NULL, -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_COMPUTE_AT, NULL, -1), 2);
  ck_assert_int_eq(count_insts(tr, SCH_ENTER_POSTPROC, NULL, -1), 0);
  /* the categoricals: two vector widths (float32: 1..4 lanes) and the unroll depth */
  int widths = 0, unroll = 0;
  for (int i = 0; i < tr->n; i++) {
    const sch_inst_t *in = &tr->insts[i];
    if (in->kind != SCH_SAMPLE_CATEGORICAL) continue;
    const sch_arg_t *c = &in->attrs[0];
    if (c->n == 4 && c->items[0].i == 1 && c->items[3].i == 4) widths++;
    if (c->n == 5 && c->items[0].i == 0 && c->items[4].i == 1024) unroll++;
  }
  ck_assert_int_eq(widths, 2);
  ck_assert_int_eq(unroll, 1);
  ck_assert_ptr_nonnull(strstr(sp.descs[0], "multi-level-tiling(C: SSSRRSRS"));
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* Tensor cores: a float16 or bfloat16 matmul accumulated in float32 is tiled
 * around the wmma intrinsics where the target has them (float16 from sm_70,
 * bfloat16 from sm_80; the cuda-host harness has both), else by the SIMT
 * tiling; float32 stays SIMT.  The space's candidates bind warps to
 * threadIdx.y and lanes to threadIdx.x, compile with NVRTC to wmma.mma.sync
 * for sm_90, and compute the reference (test_samples runs them on the host). */
START_TEST(test_tensor_core_space) {
  static const struct {
    const char *wl, *target, *intrin; /* intrin NULL: the SIMT tiling */
  } cases[] = {
      {"matmul_f16", "nvidia/h100", "wmma_f16_f32_16x16x16"},
      {"matmul_bf16", "nvidia/h100", "wmma_bf16_f32_16x16x16"},
      {"batch_matmul_f16", "nvidia/h100", "wmma_f16_f32_16x16x16"},
      {"matmul_f16", "nvidia/tesla-t4", "wmma_f16_f32_16x16x16"},
      {"matmul_bf16", "nvidia/tesla-t4", NULL},
      {"matmul_f16", "nvidia/tesla-p100", NULL},
      {"matmul_f16", "cuda-host", "wmma_f16_f32_16x16x16"},
      {"matmul_f16", "opencl/pocl-cpu", NULL},
      {"matmul", "nvidia/h100", NULL},
      {"matmul_f16_odd", "nvidia/h100", NULL}, /* 16 does not divide M */
  };
  for (size_t c = 0; c < TN_ARRAY_LEN(cases); c++) {
    ir_workload_t *w;
    if (!strcmp(cases[c].wl, "batch_matmul_f16"))
      w = tu_parse("param B = 2, M = 32, N = 48, K = 32\ninput X: float16[B, M, K]\ninput Y: float16[B, K, N]\n"
                   "output Z: float32[B, M, N]\nZ[b, i, j] = sum(k < K: float32(X[b, i, k]) * float32(Y[b, k, j]))\n");
    else if (!strcmp(cases[c].wl, "matmul_f16_odd"))
      w = tu_load_sets("matmul_f16", "M=24,N=64,K=32");
    else
      w = tu_load_sets(cases[c].wl, "M=32,N=64,K=32");
    tn_target_t t = target(cases[c].target);
    smp_space_t sp = generate(w->func, &t, 1);
    ck_assert_int_eq(sp.n, 1);
    const sch_trace_t *tr = sp.traces[0];
    char what[160];
    snprintf(what, sizeof what, "%s on %s: %s", cases[c].wl, cases[c].target, sp.descs[0]);
    if (!cases[c].intrin) {
      ck_assert_msg(strstr(sp.descs[0], "multi-level-tiling(") && count_insts(tr, SCH_ANNOTATE, SMP_ANN_AUTO_TENSORIZE, -1) == 0, "%s",
                    what);
      smp_space_free(&sp);
      ir_workload_free(w);
      continue;
    }
    char want[128];
    snprintf(want, sizeof want, ": %s, A and B in shared memory)", cases[c].intrin);
    ck_assert_msg(strstr(sp.descs[0], "multi-level-tiling-tensor-core(") && strstr(sp.descs[0], want), "%s", what);
    /* the update and the write-back marked; the postprocessors tensorize */
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_AUTO_TENSORIZE, -1), 2);
    ck_assert_int_eq(count_insts(tr, SCH_TENSORIZE, NULL, -1), 0);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_WARP_EXECUTION, -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_CACHE_READ, "shared", -1), 2);
    ck_assert_int_eq(count_insts(tr, SCH_CACHE_WRITE, "local", -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_STORAGE_ALIGN, NULL, -1), 2);
    ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 3), 2); /* i and j: blocks, warps, fragments */
    ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 2), 1); /* k: stages, steps per stage */
    ck_assert_int_eq(count_insts(tr, SCH_BIND, "threadIdx.y", -1), 1);
    /* candidates: 32 lanes x the sampled warps; wmma in the PTX */
    int ok = 0;
    for (int n = 0; n < 8; n++) {
      sch_t *s = NULL;
      smp_stage_t st;
      tn_err_t err = {0};
      if (smp_sample(w->func, &t, tr, 500 + (uint64_t)n, &s, &st, &err) != TN_OK) {
        ck_assert_msg(st == SMP_STAGE_VERIFY, "%s: %s", what, err.msg);
        continue;
      }
      ok++;
      const sch_trace_t *sampled = sch_get_trace(s);
      ck_assert_int_eq(count_insts(sampled, SCH_TENSORIZE, cases[c].intrin, -1), 1);
      ck_assert_int_eq(count_insts(sampled, SCH_TENSORIZE, "wmma_fill_f32_16x16", -1), 1);
      ck_assert_int_eq(count_insts(sampled, SCH_TENSORIZE, "wmma_store_f32_16x16", -1), 1);
      cg_module_t *m = check_lowers(&t, s, what);
      ck_assert_int_eq(m->kernels[0].block[0], 32);
      ck_assert_int_ge(m->kernels[0].block[1], 1);
      ck_assert_msg(strstr(m->source, "nvcuda::wmma::mma_sync("), "%s\n%s", what, m->source);
      ms_cuda_output_t o;
      tn_err_t ce = {0};
      int rc = t.kind == TN_TARGET_CUDA ? ms_cuda_compile(m->source, t.arch, &o, &ce) : TN_EUNSUPPORTED;
      if (rc == TN_OK) {
        ck_assert_msg(strstr(o.ptx, "wmma.mma.sync.aligned"), "%s: no wmma.mma.sync in the PTX", what);
        ms_cuda_output_free(&o);
      } else {
        ck_assert_msg(rc == TN_EUNSUPPORTED, "%s: NVRTC: %s\n%s", what, ce.msg, m->source);
      }
      cg_module_free(m);
      sch_free(s);
    }
    ck_assert_msg(ok >= 6, "%s: %d of 8 samples passed", what, ok);
    smp_space_free(&sp);
    ir_workload_free(w);
  }
}
END_TEST

/* One checked run per Hopper candidate on the harness; its builds (g++
 * with UBSan over every wgmma overload) get 120 s: 30 were too few on two
 * busy cores. */
static ms_options_t hopper_options(void) {
  ms_options_t opt = {.seed = 1};
  opt.run.min_secs = 1e-9;
  opt.run.min_repeats = opt.run.max_repeats = 1;
  opt.build.timeout_s = 120 * tu_slowdown();
  return opt;
}

/* Runs m with `cut` (its first occurrence) replaced by `by` on the
 * harness: it must stop with a run error that says `why` or `or_why`, or
 * (why NULL) compute a wrong result. */
static void hopper_mutant(const ir_func_t *f, const tn_target_t *host, cg_module_t *m, const char *cut, const char *by,
                          const char *why, const char *or_why) {
  char *orig = m->source, *at = strstr(orig, cut);
  ck_assert_msg(at, "no %s in\n%s", cut, orig);
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_putn(&b, orig, (size_t)(at - orig));
  tn_buf_put(&b, by);
  tn_buf_put(&b, at + strlen(cut));
  m->source = (char *)tn_buf_str(&b);
  ms_options_t opt = hopper_options();
  ms_result_t res = {0};
  tn_err_t err = {0};
  ck_assert_msg(ms_measure(f, host, &m, 1, &opt, &res, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(why ? res.status == MS_RUN_ERROR && (strstr(res.error, why) || (or_why && strstr(res.error, or_why)))
                    : res.status == MS_WRONG_RESULT,
                "with %s as %s: %s: %s\n%.300s", cut, by, ms_status_name(res.status), res.error,
                strstr(orig, "  /* ") ? strstr(orig, "  /* ") : "");
  ms_result_clear(&res);
  tn_buf_free(&b);
  m->source = orig;
}

/* The harness's ordering checks on a generated Hopper kernel: without the
 * fence.proxy.async after ordinary copies, or a wait for a stage's full
 * phase, the run stops with the reason (it does not pass by luck).  With
 * TMA copies, a stage read before its full barrier's transaction bytes all
 * arrived stops it too: an expect_tx of half the stage's bytes lets the
 * phase complete with copies still in flight (the harness refuses the
 * surplus bytes), and one of twice never completes (a deadlock it names).
 * Missing mbarrier waits are not caught where the copies are ordinary
 * stores (README, "Hopper GEMM design space"): the harness does not relate
 * the stores to the mbarrier, and wgmma is a meeting point of the
 * warpgroup, so one warpgroup's copies are complete when it reads them. */
static void hopper_mutants(const ir_func_t *f, const tn_target_t *host, cg_module_t *m, bool ring_wraps, bool tx_too) {
  if (strstr(m->source, "tuned_fence_proxy_async(); "))
    hopper_mutant(f, host, m, "tuned_fence_proxy_async(); ", "", "no fence.proxy.async since", NULL);
  /* a wait becomes `if (0 && ...)`, which never waits */
  hopper_mutant(f, host, m, "while (!tuned_mbar_try_wait(&full[s], ", "if (0 && !tuned_mbar_try_wait(&full[s], ",
                "with no mbarrier phase or __syncthreads ordering the store", "that a TMA copy in flight writes");
  /* stores or TMA copies over a stage still read; a producer that never waits may first
     overwrite a stage not yet read (its readers then see stores no phase ordered) or arrive on a
     full phase early (a deadlock): every reason names the mbarrier.  Not where one thread of the
     only warpgroup copies by TMA: it refills a stage after its own wgmma.wait_group, which
     completed the warpgroup's reads of it (the empty phase orders nothing more); nor where K
     has fewer steps than the ring has stages (no copy waits) */
  bool one_reader = m->kernels[0].block[0] == 128 && strstr(m->source, "tuned_mbar_arrive_expect_tx(&full");
  if (ring_wraps && !one_reader)
    hopper_mutant(f, host, m, "while (!tuned_mbar_try_wait(&empty[", "if (0 && !tuned_mbar_try_wait(&empty[",
                  "mbarrier", NULL);
  const char *tx = strstr(m->source, "expect_tx(&full[STAGE], ");
  if (!tx || !tx_too) return;
  int bytes = atoi(tx + strlen("expect_tx(&full[STAGE], "));
  char cut[64], half[64], twice[64];
  snprintf(cut, sizeof cut, "expect_tx(&full[STAGE], %d)", bytes);
  snprintf(half, sizeof half, "expect_tx(&full[STAGE], %d)", bytes / 2);
  snprintf(twice, sizeof twice, "expect_tx(&full[STAGE], %d)", bytes * 2);
  hopper_mutant(f, host, m, cut, half, "TMA copies bring more bytes to an mbarrier phase than its expect_tx counted",
                NULL);
  hopper_mutant(f, host, m, cut, twice, "an mbarrier phase that cannot complete", NULL);
}

/* The launch of a sampled Hopper candidate: each tensor map describes a
 * K-major input (its rows of K elements, batches folded in) with a 64 x
 * rows box, 128B-swizzled, that the kernel takes as a __grid_constant__
 * parameter and loads from; the operands without one keep the ordinary
 * copies, and TMA takes every K-major one.  The launch JSON says the same.
 * A persistent grid has at most the target's 132 CTAs.  Counts the
 * candidate in *count and, when its grid is persistent, in *persistent. */
static void check_hopper_launch(const ir_func_t *f, const cg_module_t *m, int *count, int *persistent) {
  const cg_kernel_t *k = &m->kernels[0];
  const char *load = strstr(m->source, "#define TUNED_HOPPER_LOAD"), *end = load ? strstr(load, "while (0)") : NULL;
  ck_assert(load && end);
  int copies = 0;
  for (const char *p = load; (p = strstr(p, "tuned_hopper_stage<")) && p < end; p++) copies++;
  ck_assert_msg(copies + k->nmaps == 2, "%d ordinary copies, %d tensor maps\n%s", copies, k->nmaps, m->source);
  char *launch = cg_module_launch_json(m);
  cJSON *lj = cJSON_Parse(launch);
  const cJSON *maps = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(lj, "kernels"), 0), "tensor_maps");
  ck_assert_int_eq(cJSON_GetArraySize(maps), k->nmaps);
  for (int i = 0; i < k->nmaps; i++) {
    const cg_tensor_map_t *t = &k->maps[i];
    ck_assert(t->param >= 0 && t->param < m->nparams);
    const cg_param_t *p = &m->params[t->param];
    int64_t numel = 1;
    for (int d = 0; d < p->ndim; d++) numel *= p->shape[d];
    ck_assert(p->role == IR_BUF_INPUT && t->dims[0] == p->shape[p->ndim - 1] && t->dims[0] * t->dims[1] == numel);
    /* a cluster's shared operand: a box of half its tile's rows */
    ck_assert(t->stride_bytes == t->dims[0] * 2 && t->box[0] == 64 && t->box[1] % (k->cluster > 1 ? 32 : 64) == 0 &&
              t->box[1] <= 256 && t->swizzle == 128);
    char decl[96], use[64];
    snprintf(decl, sizeof decl, "const __grid_constant__ tuned_tensor_map %s", t->name);
    snprintf(use, sizeof use, "&%s, k0", t->name);
    ck_assert_msg(strstr(m->source, decl) && strstr(load, use), "%s, %s\n%s", decl, use, m->source);
    const cJSON *mj = cJSON_GetArrayItem(maps, i);
    ck_assert_str_eq(cJSON_GetObjectItem(mj, "param")->valuestring, p->name);
    ck_assert_str_eq(cJSON_GetObjectItem(mj, "name")->valuestring, t->name);
    ck_assert_int_eq(cJSON_GetObjectItem(mj, "swizzle")->valueint, 128);
  }
  if (k->nmaps && k->cluster < 2) /* no K-major operand left to ordinary copies (but by a cluster without TMA) */
    ck_assert_msg(!strstr(load, ", true>(st"), "%s", m->source);
  (*count)++;
  if (strstr(m->source, "a persistent grid")) {
    ck_assert(k->grid[0] >= 1 && k->grid[0] <= 132);
    (*persistent)++;
  }
  (void)f;
  cJSON_Delete(lj);
  free(launch);
}

/* A persistent grid smaller than the tiles (a target of 2 SMs): each CTA
 * loops over several tiles, its K ring running on from one to the next,
 * and the result is still the reference on the harness. */
static void hopper_persistent_loops(const ir_func_t *f, const tn_target_t *host) {
  tn_target_t small = target("nvidia/h100");
  small.sm_count = 2;
  smp_space_t sp = generate(f, &small, 1);
  int ran = 0;
  for (int k = 0; k < 40 && ran < 1; k++) {
    sch_t *s = NULL;
    smp_stage_t st;
    tn_err_t err = {0};
    if (smp_sample(f, &small, sp.traces[0], 900 + (uint64_t)k, &s, &st, &err) != TN_OK) continue;
    cg_module_t *m = check_lowers(&small, s, "persistent");
    int tiles = 0;
    const char *t = strstr(m->source, "const int tiles = (");
    ck_assert(t && sscanf(t, "const int tiles = (%d", &tiles) == 1);
    if (m->kernels[0].grid[0] == 2 && tiles > 2) {
      ms_options_t opt = hopper_options();
      ms_result_t res = {0};
      ck_assert_msg(ms_measure(f, host, &m, 1, &opt, &res, &err) == TN_OK, "%s", err.msg);
      ck_assert_msg(res.status == MS_OK, "persistent grid of 2 CTAs over %d tiles: %s: %s", tiles,
                    ms_status_name(res.status), res.error);
      ms_result_clear(&res);
      ran++;
    }
    cg_module_free(m);
    sch_free(s);
  }
  ck_assert_int_eq(ran, 1);
  smp_space_free(&sp);
}

/* The harness as Hopper: every one of the n modules computes the reference. */
static void hopper_run_all(const ir_func_t *f, const tn_target_t *host, cg_module_t **mods, int n,
                           char (*what)[256]) {
  ms_options_t opt = hopper_options();
  ms_result_t res[4] = {0};
  tn_err_t err = {0};
  ck_assert_int_le(n, 4);
  ck_assert_msg(ms_measure(f, host, mods, n, &opt, res, &err) == TN_OK, "%s", err.msg);
  for (int i = 0; i < n; i++) {
    ck_assert_msg(res[i].status == MS_OK, "%s on cuda-host/hopper: %s: %s\n%.2000s", what[i],
                  ms_status_name(res[i].status), res[i].error, strstr(mods[i]->source, "__global__ void"));
    ms_result_clear(&res[i]);
  }
}

/* Trace tr sampled with `seed` (what: the candidate's name); NULL where
 * the verify postprocessor refused the decisions. */
static sch_t *sample_verified(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *tr, uint64_t seed,
                              const char *what) {
  sch_t *s = NULL;
  smp_stage_t st;
  tn_err_t err = {0};
  if (smp_sample(f, t, tr, seed, &s, &st, &err) == TN_OK) return s;
  ck_assert_msg(st == SMP_STAGE_VERIFY, "%s: %s", what, err.msg);
  return NULL;
}

/* The Hopper space whose operands that are not K-major (B as [K, N], A as
 * [K, M]) are first transposed by a kernel of their own (one per operand)
 * into a K-major workspace: sampled candidates lower to those copy kernels
 * and the wgmma kernel, whose TMA maps (when sampled) name the workspace,
 * compile to wgmma for sm_90a, and compute the reference on the harness. */
static void hopper_transposed_space(const ir_workload_t *w, const ref_t *ref, const sch_trace_t *tr, int transposed,
                                    const tn_target_t *h100, const tn_target_t *host, int *tmas) {
  cg_module_t *mods[2];
  char what[2][256];
  int n = 0;
  for (int k = 0; k < 8 && n < 2; k++) {
    snprintf(what[n], sizeof what[n], "transposed space, sample %d", k);
    sch_t *s = sample_verified(w->func, h100, tr, 500 + (uint64_t)k, what[n]);
    if (!s) continue;
    check_outputs(w->func, ref, sch_func(s), what[n]);
    check_roundtrip(w->func, s, what[n]);
    cg_module_t *m = check_lowers(h100, s, what[n]);
    ck_assert_int_eq(m->nkernels, 1 + transposed);
    const cg_kernel_t *g = &m->kernels[transposed]; /* the copies run first */
    /* every operand is K-major now: TMA maps both, the transposed from their workspaces; without the TMA decision,
       a cluster's shared operand only */
    int workspaces = 0;
    for (int q = 0; q < g->nmaps; q++) {
      ck_assert_int_ge(g->maps[q].param, 0);
      workspaces += m->params[g->maps[q].param].role == IR_BUF_TEMP;
    }
    if (g->nmaps == 1 && g->cluster > 1) {
      ck_assert_int_le(workspaces, 1);
    } else {
      ck_assert_int_eq(g->nmaps, g->nmaps ? 2 : 0);
      ck_assert_int_eq(workspaces, g->nmaps ? transposed : 0);
      *tmas += g->nmaps > 0;
    }
    ms_cuda_output_t o;
    tn_err_t ce = {0};
    int rc = ms_cuda_compile(m->source, "sm_90a", &o, &ce);
    ck_assert_msg(rc == TN_OK || rc == TN_EUNSUPPORTED, "%s: NVRTC: %s", what[n], ce.msg);
    if (rc == TN_OK) {
      ck_assert_msg(strstr(o.ptx, "wgmma.mma_async.sync.aligned.m64n") && !strstr(o.ptx, "cp.async.bulk.tensor.2d") ==
                                                                               !g->nmaps,
                    "%s: PTX", what[n]);
      ms_cuda_output_free(&o);
    }
    mods[n++] = m;
    sch_free(s);
  }
  ck_assert_int_ge(n, 1);
  hopper_run_all(w->func, host, mods, n, what);
  for (int i = 0; i < n; i++) cg_module_free(mods[i]);
}

/* A sampled cluster candidate's kernel: __cluster_dims__(2, 1, 1) with a
 * grid of whole clusters, its CTAs' barrier.cluster at the start (after the
 * mbarriers' init) and the end, the empty phases counting both CTAs'
 * consumers, each consumer releasing a stage in both CTAs, and the shared
 * operand's half-tile TMA box multicast to both; NVRTC for sm_90a: the
 * multicast, mapa and barrier.cluster in the PTX, no spills, UTMALDG with
 * .MULTICAST in the SASS (where cuobjdump is installed).  Counts it in
 * along[0] (along M, sharing B) or along[1] (along N, sharing A). */
static void check_cluster_kernel(const cg_module_t *m, const char *what, int *along, int *sass_checked) {
  const cg_kernel_t *k = &m->kernels[m->nkernels - 1];
  const char *src = m->source;
  bool n_dir = strstr(src, "clusters of 2 CTAs along N") != NULL;
  ck_assert_msg(k->cluster == 2 && k->grid[0] % 2 == 0 && strstr(src, "__cluster_dims__(2, 1, 1) __launch_bounds__") &&
                    (n_dir || strstr(src, "clusters of 2 CTAs along M")),
                "%s\n%s", what, src);
  const char *mc = strstr(src, "tuned_tma_load_2d_multicast(st");
  ck_assert_msg(mc && strstr(mc, n_dir ? "&tuned_map_a" : "&tuned_map_b") && strstr(mc, "&full[STAGE], 3)") &&
                    strstr(src, "tuned_fence_mbarrier_init();\n  }\n  tuned_cluster_sync();") &&
                    strstr(src, "for (int r = 0; r < 2; r++) tuned_mbar_arrive_cluster(&empty[") &&
                    strstr(src, "  tuned_cluster_sync();\n#undef TUNED_HOPPER_LOAD"),
                "%s\n%s", what, src);
  for (int i = 0; i < k->nmaps; i++) /* the shared operand's box: half its tile's rows */
    if (!strcmp(k->maps[i].name, n_dir ? "tuned_map_a" : "tuned_map_b"))
      ck_assert_msg(k->maps[i].box[1] % 8 == 0 && k->maps[i].box[1] <= 128, "%s: box of %u rows", what,
                    k->maps[i].box[1]);
  along[n_dir]++;
  ms_cuda_output_t o;
  tn_err_t ce = {0};
  int rc = ms_cuda_compile(src, "sm_90a", &o, &ce);
  if (rc == TN_EUNSUPPORTED) return;
  ck_assert_msg(rc == TN_OK, "%s: NVRTC: %s\n%s", what, ce.msg, src);
  ck_assert_msg(strstr(o.ptx, ".multicast::cluster") && strstr(o.ptx, "mapa.shared::cluster") &&
                    strstr(o.ptx, "mbarrier.arrive.release.cluster.shared::cluster") &&
                    strstr(o.ptx, "barrier.cluster.arrive") && strstr(o.ptx, "fence.mbarrier_init"),
                "%s: PTX", what);
  ck_assert_msg(!strstr(o.log, "bytes spill stores") || strstr(o.log, " 0 bytes spill stores"), "%s: %s", what, o.log);
  char *sass = tu_cubin_sass(o.cubin, o.cubin_size);
  if (sass) {
    ck_assert_msg(strstr(sass, "UTMALDG.2D.MULTICAST") && strstr(sass, "HGMMA.64x"), "%s: SASS\n%s", what, sass);
    (*sass_checked)++;
  }
  free(sass);
  ms_cuda_output_free(&o);
}

/* Thread-block clusters (IR_ANN_HOPPER_CLUSTER): sampled only where TMA
 * brings the shared operand (B^T K-major: along M or N; B as [K, N]: only
 * along N, sharing A) and the tiles pair up; every sampled cluster
 * candidate (check_cluster_kernel) computes the reference on the harness,
 * whose CTAs of a cluster run together with their own shared memory, and
 * its ordering checks stop a kernel whose consumers release a stage only in
 * their own CTA (the peer's multicast refills it while this CTA's wgmma may
 * still read it), whose empty phases count one CTA's consumers, or that
 * starts copying before the peer's mbarriers exist.  A persistent grid of
 * 2 SMs takes whole clusters. */
START_TEST(test_hopper_clusters) {
  static const char *const srcs[] = {
      "param M = 256, N = 256, K = 512\ninput A: float16[M, K]\ninput B: float16[N, K]\noutput C: float32[M, N]\n"
      "C[i, j] = sum(k < K: float32(A[i, k]) * float32(B[j, k]))\n",
      "param M = 128, N = 256, K = 128\ninput A: bfloat16[M, K]\ninput B: bfloat16[K, N]\noutput C: float32[M, N]\n"
      "C[i, j] = sum(k < K: float32(A[i, k]) * float32(B[k, j]))\n",
  };
  tn_target_t h100 = target("nvidia/h100"), host = target("cuda-host/hopper"), small = h100;
  small.sm_count = 2;
  int along[2] = {0, 0}, sass_checked = 0, mutated = 0, persistent = 0;
  int refused = 0; /* by the verifier: tiles that do not pair up along the cluster (256 rows of 256 x N tiles) */
  for (size_t c = 0; c < TN_ARRAY_LEN(srcs); c++) {
    ir_workload_t *w = tu_parse(srcs[c]);
    ref_t ref = reference(w->func);
    for (int t = 0; t < 2; t++) { /* the H100's grid, then a persistent grid of 2 SMs */
      const tn_target_t *tg = t ? &small : &h100;
      smp_space_t sp = generate(w->func, tg, 1);
      cg_module_t *mods[4];
      char what[4][256];
      int n = 0, clusters = 0, dirs[2] = {0, 0};
      for (int k = 0; k < 100 && n < (t ? 1 : 4); k++) {
        sch_t *s = NULL;
        smp_stage_t st;
        tn_err_t err = {0};
        snprintf(what[n], sizeof what[n], "case %zu, %s, sample %d", c, t ? "2 SMs" : "h100", k);
        if (smp_sample(w->func, tg, sp.traces[0], 700 + (uint64_t)k, &s, &st, &err) != TN_OK) {
          refused += strstr(err.msg, "the cluster does not divide the tiles along its dimension") != NULL;
          continue;
        }
        cg_module_t *m = check_lowers(tg, s, what[n]);
        sch_free(s);
        int dir = strstr(m->source, "CTAs along N") != NULL; /* two of each direction */
        if (m->kernels[0].cluster < 2 || (t && !strstr(m->source, "a persistent grid")) || dirs[dir] >= 2) {
          cg_module_free(m);
          continue;
        }
        check_cluster_kernel(m, what[n], along, &sass_checked);
        ck_assert_msg(c == 0 || strstr(m->source, "along N"), "%s: B is not K-major, yet shared", what[n]);
        if (t) { /* 2 CTAs, one cluster, looping over the clusters of tiles */
          ck_assert_int_eq(m->kernels[0].grid[0], 2);
          persistent++;
        }
        clusters++;
        dirs[dir]++;
        mods[n++] = m;
      }
      ck_assert_msg(clusters >= 1, "case %zu: no cluster candidate sampled", c);
      hopper_run_all(w->func, &host, mods, n, what);
      for (int i = 0; i < n && c == 0 && !t && mutated < 1; i++) {
        const char *init = strstr(mods[i]->source, "tuned_mbar_init(&empty[s], ");
        ck_assert(init);
        int consumers = atoi(init + strlen("tuned_mbar_init(&empty[s], ")) / 2;
        char cut[64], by[64];
        /* a stage refilled in both CTAs while the peer's wgmma may still read it: the consumers release it in their
           own CTA only (twice, so that its phase completes), or the empty phases count one CTA's consumers */
        static const char in_flight[] = "over shared memory that a wgmma.mma_async in flight reads",
                          unordered[] = "over shared memory that the wgmma of thread";
        hopper_mutant(w->func, &host, mods[i], "], r);", "], rank);", in_flight, unordered);
        snprintf(cut, sizeof cut, "tuned_mbar_init(&empty[s], %d)", 2 * consumers);
        snprintf(by, sizeof by, "tuned_mbar_init(&empty[s], %d)", consumers);
        hopper_mutant(w->func, &host, mods[i], cut, by, in_flight, unordered);
        hopper_mutant(w->func, &host, mods[i], "tuned_fence_mbarrier_init();\n  }\n  tuned_cluster_sync();",
                      "tuned_fence_mbarrier_init();\n  }\n  __syncthreads();",
                      "no barrier.cluster since its mbarrier.init", NULL);
        /* the fence that makes the inits visible to the cluster (issue 31: the harness models it) */
        hopper_mutant(w->func, &host, mods[i], "    tuned_fence_mbarrier_init();\n", "",
                      "whose mbarrier.init no fence.mbarrier_init made visible to the cluster", NULL);
        mutated++;
      }
      for (int i = 0; i < n; i++) cg_module_free(mods[i]);
      smp_space_free(&sp);
    }
    ir_data_free(ref.d);
    ir_workload_free(w);
  }
  printf("test_hopper_clusters: %d along M, %d along N, %d persistent, %d SASS checked\n", along[0], along[1],
         persistent, sass_checked);
  ck_assert_msg(along[0] >= 1 && along[1] >= 2 && persistent >= 2 && mutated == 1 && refused >= 1,
                "%d along M, %d along N, %d persistent, %d mutated, %d refused", along[0], along[1], persistent, mutated,
                refused);
}
END_TEST

/* NVRTC for sm_90a, where it is installed: wgmma in the PTX; true with *o
 * to check further and free. */
static bool hopper_compiles(const cg_module_t *m, const char *what, ms_cuda_output_t *o) {
  tn_err_t ce = {0};
  int rc = ms_cuda_compile(m->source, "sm_90a", o, &ce);
  ck_assert_msg(rc == TN_OK || rc == TN_EUNSUPPORTED, "%s: NVRTC: %s\n%s", what, ce.msg, m->source);
  if (rc == TN_OK) ck_assert_msg(strstr(o->ptx, "wgmma.mma_async.sync.aligned.m64n"), "%s: PTX", what);
  return rc == TN_OK;
}

/* A kernel whose producer trades registers with setmaxnreg: ptxas gives it
 * the registers per thread the kernel plan counts on at launch (the pool
 * its register plan is checked against). */
static void check_launch_regs(const tn_target_t *t, const sch_t *s, const ms_cuda_output_t *o, const char *what) {
  ir_plan_t p;
  tn_err_t err = {0};
  ck_assert_msg(ir_plan_build(sch_func(s), t, &p, &err) == TN_OK, "%s: %s", what, err.msg);
  for (int k = 0; k < p.n; k++) {
    if (!p.k[k].hopper || !p.k[k].gemm.producer) continue;
    char want[64];
    snprintf(want, sizeof want, "Used %d registers", p.k[k].launch_regs);
    ck_assert_msg(strstr(o->log, want), "%s: the plan counts %d registers per thread at launch (setmaxnreg %d / %d); "
                  "ptxas: %s", what, p.k[k].launch_regs, p.k[k].regs.producer, p.k[k].regs.consumer, o->log);
  }
  ir_plan_free(&p);
}

/* The SASS, with HGMMA in it, where nvdisasm is installed (free it); NULL otherwise. */
static char *hopper_sass(const ms_cuda_output_t *o, const char *what) {
  char *sass = tu_cubin_sass(o->cubin, o->cubin_size);
  if (sass) ck_assert_msg(strstr(sass, "HGMMA.64x"), "%s: no HGMMA in the SASS", what);
  return sass;
}

/* Hopper: a float16 conv2d (NHWC, 3x3, padding 1) as an implicit GEMM
 * (implicit-gemm): its input (the padding inlined into the im2col
 * copy) and its filter reindexed K-major, (n, y, x) -> M and (r, s, c) -> K
 * fused, then tiled by the warpgroup-MMA rule; the float16 rounding fused
 * into the GEMM's kernel where the output is a temporary, a copy-back
 * kernel where it is the float32 output itself.  Sampled candidates
 * compute the reference in the evaluator and on the cuda-host harness as
 * Hopper, and compile for sm_90a to wgmma (HGMMA in the SASS where
 * nvdisasm is installed).  The space that keeps the block as it was is
 * still there (the SIMT tiling). */
START_TEST(test_hopper_conv) {
  static const struct {
    const char *sets, *src;
    int kernels; /* im2col and filter copies, the GEMM (epilogue fused), a copy back */
  } cases[] = {
      {"N=1 H=8 W=8 C=64 F=64", NULL, 3},
      {NULL,
       "param N = 2, H = 4, W = 8, C = 64, F = 128\ninput X: float16[N, H + 2, W + 2, C]\n"
       "input Wt: float16[3, 3, C, F]\noutput Y: float32[N, H, W, F]\n"
       "Y[n, y, x, f] = sum(r < 3, s < 3, c < C: float32(X[n, y + r, x + s, c]) * float32(Wt[r, s, c, f]))\n",
       4},
  };
  tn_target_t h100 = target("nvidia/h100"), host = target("cuda-host/hopper");
  for (size_t c = 0; c < TN_ARRAY_LEN(cases); c++) {
    ir_workload_t *w = cases[c].sets ? tu_load_sets("conv2d_nhwc_f16", cases[c].sets) : tu_parse(cases[c].src);
    ref_t ref = reference(w->func);
    smp_space_t sp = generate(w->func, &h100, 1);
    ck_assert_int_eq(sp.n, 3);
    ck_assert_msg(strstr(sp.descs[0], "implicit-gemm(") && strstr(sp.descs[0], "M = 64, N = ") &&
                      strstr(sp.descs[0], "multi-level-tiling-hopper(") && strstr(sp.descs[1], "implicit-gemm(") &&
                      !strstr(sp.descs[2], "hopper"),
                  "%s | %s | %s", sp.descs[0], sp.descs[1], sp.descs[2]);
    ck_assert_msg(!strstr(sp.descs[0], "epilogue fused") == (cases[c].kernels == 4), "%s", sp.descs[0]);
    const sch_trace_t *tr = sp.traces[0];
    ck_assert_int_eq(count_insts(tr, SCH_REINDEX, NULL, -1), cases[c].kernels == 4 ? 3 : 2);
    ck_assert_int_ge(count_insts(tr, SCH_FUSE_BLOCK_ITERS, NULL, -1), 2);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_GEMM, -1), 1);
    cg_module_t *mods[4];
    char what[4][256];
    int n = 0, sass_checked = 0;
    for (int k = 0; k < 12 && n < 3; k++) {
      snprintf(what[n], sizeof what[n], "conv case %zu, sample %d", c, k);
      sch_t *s = sample_verified(w->func, &h100, tr, 700 + (uint64_t)k, what[n]);
      if (!s) continue;
      check_outputs(w->func, &ref, sch_func(s), what[n]);
      check_roundtrip(w->func, s, what[n]);
      cg_module_t *m = check_lowers(&h100, s, what[n]);
      ck_assert_msg(m->sm90a && m->nkernels == cases[c].kernels && strstr(m->source, "tuned_wgmma_"), "%s: %d kernels\n%s",
                    what[n], m->nkernels, m->source);
      ms_cuda_output_t o;
      if (hopper_compiles(m, what[n], &o)) {
        check_launch_regs(&h100, s, &o, what[n]);
        char *sass = hopper_sass(&o, what[n]);
        sass_checked += sass != NULL;
        free(sass);
        ms_cuda_output_free(&o);
      }
      mods[n++] = m;
      sch_free(s);
    }
    ck_assert_int_ge(n, 2);
    hopper_run_all(w->func, &host, mods, n, what);
    printf("test_hopper_conv: case %zu: %d candidates ran on cuda-host/hopper, %d SASS checked\n", c, n, sass_checked);
    for (int i = 0; i < n; i++) cg_module_free(mods[i]);
    /* the GEMM form's wmma space: its cooperative fetches split over the
       warps' 32 lanes, not over the 1024 threads the im2col copy bound first */
    ck_assert_msg(strstr(sp.descs[1], "tensor-core") || strstr(sp.descs[1], "wmma"), "%s", sp.descs[1]);
    int lowered = 0;
    for (int k = 0; k < 16 && lowered < 2; k++) {
      char wh[64];
      snprintf(wh, sizeof wh, "conv case %zu, wmma sample %d", c, k);
      sch_t *s = sample_verified(w->func, &h100, sp.traces[1], 900 + (uint64_t)k, wh);
      if (!s) continue;
      cg_module_t *m = check_lowers(&h100, s, wh);
      ck_assert_msg(strstr(m->source, "wmma::mma_sync"), "%s:\n%s", wh, m->source);
      lowered++;
      cg_module_free(m);
      sch_free(s);
    }
    ck_assert_int_ge(lowered, 1);
    smp_space_free(&sp);
    ir_data_free(ref.d);
    ir_workload_free(w);
  }
}
END_TEST

/* ---- the operator suite on tensor cores ------------------------------------ */

/* MetaSchedule's single-operator suite in float16 (and C2D in bfloat16) at
 * small shapes: the GEMM-like ones get a wmma space on nvidia/a100 and on
 * nvidia/h100, and a warpgroup-MMA space on nvidia/h100 where 64 divides M,
 * N and K once padded at most 1.5 times (implicit-gemm: ReIndex,
 * FuseBlockIters and PadEinsum first, where the block is not a plain GEMM);
 * depthwise, grouped and transposed convolutions get neither
 * (rules_implicit_gemm.c says why).  Three sampled candidates per space
 * compute the reference in the evaluator, replay from JSON, compile with
 * NVRTC for the target (sm_80, sm_90, sm_90a) with the mma in the PTX and
 * no spills, and compute the reference on the cuda-host harness. */
typedef struct tc_case {
  const char *tag, *name, *sets, *src; /* src: the workload's text instead of workloads/NAME.tw */
  bool wmma, wgmma;
} tc_case_t;

static const tc_case_t tc_cases[] = {
    {"C1D", "conv1d_nlc_f16", "L=128,CI=64,CO=64", NULL, true, true},
    {"C2D", "conv2d_nhwc_sdg_f16", "H=16,W=16,CI=64,CO=64,KS=3,ST=2,P=1", NULL, true, true},
    /* padded (PadEinsum): K = 27 to 32, N = 24 to 32 (64 would be 4.7 times the work: no Hopper space) */
    {"C2D-pad", "conv2d_nhwc_sdg_f16", "H=16,W=16,CI=3,CO=24,KS=3,ST=2,P=1", NULL, true, false},
    /* the suite's 7x7 stem at 32 x 32: K = 147 to 192 for the Hopper tiling (1.31 times the work) */
    {"C2D-stem", "conv2d_nhwc_sdg_f16", "H=32,W=32", NULL, true, true},
    /* K = 432: padded to 448 for the Hopper tiling */
    {"C3D", "conv3d_ndhwc_f16", "DD=4,H=4,W=4,CI=16,CO=64,KS=3,ST=1,P=1", NULL, true, true},
    {"DEP", "depthwise_conv2d_nhwc_f16", "H=8,W=8,C=32", NULL, false, false},
    {"GRP", "conv2d_nhwc_sdg_f16", "H=8,W=8,CI=64,CO=64,KS=3,ST=1,P=1,G=4", NULL, false, false},
    {"DIL", "conv2d_nhwc_sdg_f16", "H=12,W=12,CI=64,CO=64,KS=3,ST=1,P=0,D=2", NULL, true, true},
    {"T2D", "conv2d_transpose_nhwc_f16", "CI=16,CO=32", NULL, false, false},
    {"CAP", "conv2d_capsule_nhwijc_f16", "H=8,W=8,CI=16,CO=16,KS=3,ST=2,P=1", NULL, true, true},
    {"CBR", "conv2d_nhwc_bn_relu_f16", "H=16,W=16,CI=64,CO=64,KS=3,ST=2,P=1", NULL, true, true},
    {"TBG", "transpose_batch_matmul_f16", "SEQ=64,HEADS=2,DIM=64", NULL, true, true},
    {"GMM", "matmul_f16", "M=64,N=64,K=64", NULL, true, true},
    {"C2D-bf16", NULL, NULL,
     "param N = 1, H = 8, W = 8, CI = 32, CO = 64, KS = 3\n"
     "input X: bfloat16[N, H, W, CI]\ninput Wt: bfloat16[KS, KS, CI, CO]\n"
     "temp Xp: bfloat16[N, H + 2, W + 2, CI]\noutput Y: float32[N, H, W, CO]\n"
     "Xp[n, h, w, c] = select(h >= 1 && h < H + 1 && w >= 1 && w < W + 1, X[n, h - 1, w - 1, c], bfloat16(0.0))\n"
     "Y[n, y, x, co] = sum(rh < KS, rw < KS, rc < CI: float32(Xp[n, y + rh, x + rw, rc]) * float32(Wt[rh, rw, rc, co]))\n",
     true, true}, /* K = 288: padded to 320 for the Hopper tiling */
};

/* Compiles m with NVRTC for t (sm_90a for a warpgroup-MMA module): the mma
 * in the PTX, no kernel spilling (ptxas -v).  False where NVRTC is absent. */
static bool tc_compiles(const tn_target_t *t, const cg_module_t *m, const char *mma, const char *what) {
  ms_cuda_output_t o;
  tn_err_t ce = {0};
  int rc = ms_cuda_compile(m->source, ms_cuda_arch(t, m->sm90a), &o, &ce);
  ck_assert_msg(rc == TN_OK || rc == TN_EUNSUPPORTED, "%s: NVRTC: %s\n%s", what, ce.msg, m->source);
  if (rc != TN_OK) return false;
  ck_assert_msg(strstr(o.ptx, mma), "%s: no %s in the PTX", what, mma);
  ms_ptxas_kernel_t ks[8];
  int nk = ms_ptxas_parse(o.log, ks, 8);
  ck_assert_msg(nk >= 1, "%s: no ptxas facts in the log:\n%s", what, o.log);
  for (int k = 0; k < nk; k++)
    ck_assert_msg(ks[k].spill_store_bytes == 0 && ks[k].spill_load_bytes == 0, "%s: kernel %s spills %lld + %lld bytes",
                  what, ks[k].name, (long long)ks[k].spill_store_bytes, (long long)ks[k].spill_load_bytes);
  ms_cuda_output_free(&o);
  return true;
}

/* Up to `want` verified samples of space i of sp (on target t), each
 * computing the reference in the evaluator, replaying from its JSON and
 * compiling for t; then all of them run on the harness `host`.  Returns
 * how many ran there. */
static int tc_verify_space(const ir_workload_t *w, const ref_t *ref, const tn_target_t *t, const tn_target_t *host,
                           const smp_space_t *sp, int i, const char *mma, const char *what) {
  enum { WANT = 3 };
  cg_module_t *mods[WANT];
  char whats[WANT][256];
  int n = 0, compiled = 0;
  for (int k = 0; k < 16 && n < WANT; k++) {
    snprintf(whats[n], sizeof whats[n], "%s, space %d, sample %d", what, i, k);
    sch_t *s = sample_verified(w->func, t, sp->traces[i], 300 + (uint64_t)k, whats[n]);
    if (!s) continue;
    check_outputs(w->func, ref, sch_func(s), whats[n]);
    check_roundtrip(w->func, s, whats[n]);
    mods[n] = check_lowers(t, s, whats[n]);
    compiled += tc_compiles(t, mods[n], mma, whats[n]);
    n++;
    sch_free(s);
  }
  ck_assert_msg(n >= 2, "%s, space %d: %d of 16 samples passed the verifier", what, i, n);
  if (host->kind == TN_TARGET_CUDA_HOST && tn_target_is_hopper(host)) {
    hopper_run_all(w->func, host, mods, n, whats);
  } else {
    run_on_host(w->func, mods, whats, n);
  }
  printf("test_tensor_core_suite: %s, space %d (%s): %d candidates verified on %s, %d compiled for %s\n", what, i,
         mma, n, host->name, compiled, ms_cuda_arch(t, n && mods[0]->sm90a));
  for (int k = 0; k < n; k++) cg_module_free(mods[k]);
  return n;
}

START_TEST(test_tensor_core_suite) {
  const tc_case_t *tc = &tc_cases[_i];
  ir_workload_t *w = tc->src ? tu_parse(tc->src) : tu_load_sets(tc->name, tc->sets);
  ref_t ref = reference(w->func);
  static const char *const targets[] = {"nvidia/a100", "nvidia/h100"};
  tn_target_t plain = target("cuda-host"), hopper = target("cuda-host/hopper");
  for (int k = 0; k < 2; k++) {
    tn_target_t t = target(targets[k]);
    bool h100 = tn_target_is_hopper(&t);
    smp_space_t sp = generate(w->func, &t, 1);
    int wmma = -1, wgmma = -1;
    for (int i = 0; i < sp.n; i++) {
      ck_assert_msg(!strstr(sp.descs[i], "!"), "%s on %s: a rule failed: %s", tc->tag, t.name, sp.descs[i]);
      if (wmma < 0 && strstr(sp.descs[i], "multi-level-tiling-tensor-core(")) wmma = i;
      if (wgmma < 0 && strstr(sp.descs[i], "multi-level-tiling-hopper(")) wgmma = i;
    }
    char what[128];
    snprintf(what, sizeof what, "%s on %s", tc->tag, t.name);
    ck_assert_msg((wmma >= 0) == tc->wmma, "%s: wmma space %d, expected %s (%s)", what, wmma, tc->wmma ? "one" : "none",
                  sp.descs[0]);
    ck_assert_msg((wgmma >= 0) == (tc->wgmma && h100), "%s: warpgroup-MMA space %d", what, wgmma);
    /* the convolutions reach them through the GEMM form; the plain block stays */
    if (tc->wmma && strncmp(tc->tag, "GMM", 3) && strncmp(tc->tag, "TBG", 3))
      ck_assert_msg(strstr(sp.descs[wmma], "implicit-gemm(") && sp.n >= 2, "%s: %s", what, sp.descs[wmma]);
    const char *padded = !strcmp(tc->tag, "C2D-pad") ? "padded to 64 x 32 x 32"
                         : !strcmp(tc->tag, "C3D")     ? (h100 ? "padded to 64 x 64 x 448" : NULL)
                         : strcmp(tc->tag, "C2D-stem") ? NULL
                         : h100                        ? "padded to 256 x 64 x 192"
                                                       : "padded to 256 x 64 x 160";
    if (padded) ck_assert_msg(strstr(sp.descs[wmma], padded), "%s: %s", what, sp.descs[wmma]);
    if (wmma >= 0) tc_verify_space(w, &ref, &t, &plain, &sp, wmma, "wmma.mma.sync.aligned", what);
    if (wgmma >= 0) tc_verify_space(w, &ref, &t, &hopper, &sp, wgmma, "wgmma.mma_async.sync.aligned", what);
    smp_space_free(&sp);
  }
  ir_data_free(ref.d);
  ir_workload_free(w);
}
END_TEST

/* Hopper (nvidia/h100, cuda-host/hopper): a float16/bfloat16 matmul (or
 * batched matmul) whose M, N and K are multiples of 64 forks into the
 * warpgroup-MMA space (six categorical decisions, annotated on the block)
 * and the untouched block (the wmma tiling), and with an operand that is
 * not K-major a third space that transposes it first
 * (hopper_transposed_space).  Sampled candidates of the
 * Hopper space lower to one wgmma kernel (sm_90a) with the elementwise
 * consumer (float16 rounding, bias and ReLU) fused into it, compile with
 * NVRTC for sm_90a to wgmma in the PTX and HGMMA in the SASS (where
 * cuobjdump is installed) without spills, and compute the reference on the
 * cuda-host harness configured as Hopper (which checks the mbarrier phases,
 * the wgmma waits and fence.proxy.async).  A and B given transposed take the
 * half-by-half copies; both copy modes (every thread, a producer
 * warpgroup) are sampled. */
START_TEST(test_hopper_space) {
  static const struct {
    const char *src, *block, *want;
    bool fused; /* the consumer (float16 rounding; bias and ReLU, float32 or float16) in the GEMM's kernel */
  } cases[] = {
      {"param M = 128, N = 128, K = 128\ninput A: float16[M, K]\ninput B: float16[K, N]\ntemp Acc: float32[M, N]\n"
       "output C: float16[M, N]\nAcc[i, j] = sum(k < K: float32(A[i, k]) * float32(B[k, j]))\n"
       "C[i, j] = float16(Acc[i, j])\n", "Acc", "float16", true},
      {"param M = 256, N = 64, K = 192\ninput A: bfloat16[M, K]\ninput B: bfloat16[K, N]\ninput bias: float32[N]\n"
       "temp Acc: float32[M, N]\noutput C: float32[M, N]\nAcc[i, j] = sum(k < K: float32(A[i, k]) * float32(B[k, j]))\n"
       "C[i, j] = max(Acc[i, j] + bias[j], 0.0)\n", "Acc", "bfloat16", true},
      {"param M = 128, N = 64, K = 64\ninput X: float16[M, K]\ninput W: float16[N, K]\ninput bias: float32[N]\n"
       "temp D: float32[M, N]\noutput Y: float16[M, N]\nD[i, j] = sum(k < K: float32(X[i, k]) * float32(W[j, k]))\n"
       "Y[i, j] = float16(max(D[i, j] + bias[j], 0.0))\n", "D", "float16", true},
      {"param M = 64, N = 64, K = 512\ninput A: float16[M, K]\ninput B: float16[K, N]\n"
       "output C: float32[M, N]\nC[i, j] = sum(k < K: float32(A[i, k]) * float32(B[k, j]))\n", "C", "float16", false},
      {"param M = 64, N = 192, K = 128\ninput A: float16[K, M]\ninput B: float16[N, K]\n"
       "output C: float32[M, N]\nC[i, j] = sum(k < K: float32(A[k, i]) * float32(B[j, k]))\n", "C", "float16", false},
      {"param NB = 3, M = 64, N = 128, K = 128\ninput X: bfloat16[NB, M, K]\ninput Y: bfloat16[NB, K, N]\n"
       "output Z: float32[NB, M, N]\nZ[b, i, j] = sum(k < K: float32(X[b, i, k]) * float32(Y[b, k, j]))\n", "Z",
       "bfloat16", false},
  };
  tn_target_t h100 = target("nvidia/h100"), host = target("cuda-host/hopper"), plain = target("cuda-host");
  ck_assert(tn_target_is_hopper(&h100) && tn_target_is_hopper(&host) && !tn_target_is_hopper(&plain));
  int producers = 0, all_copy = 0; /* candidates of either copy mode, over the cases */
  int tmas = 0, no_tmas = 0, persistent = 0, mutated = 0; /* mutated: TMA candidates the mutants ran on */
  int transposed_tmas = 0; /* candidates of the transposed spaces with TMA */
  for (size_t c = 0; c < TN_ARRAY_LEN(cases); c++) {
    ir_workload_t *w = tu_parse(cases[c].src);
    ref_t ref = reference(w->func);
    smp_space_t sp = generate(w->func, &h100, 1), on_plain = generate(w->func, &plain, 1);
    /* operands that are not K-major: A[(b,) k, i] and B[(b,) k, j] in the sources */
    int transposed = !!strstr(cases[c].src, "k, i]") + !!strstr(cases[c].src, "k, j]");
    ck_assert_int_eq(sp.n, 2 + !!transposed);
    ck_assert_int_eq(on_plain.n, 1); /* not Hopper: no fork */
    smp_space_free(&on_plain);
    char want[96];
    snprintf(want, sizeof want, "multi-level-tiling-hopper(%s: wgmma m64nNk16 %s", cases[c].block, cases[c].want);
    ck_assert_msg(!cases[c].fused == !strstr(sp.descs[0], "epilogue fused"), "%s", sp.descs[0]);
    ck_assert_msg(strstr(sp.descs[0], want) && strstr(sp.descs[sp.n - 1], "multi-level-tiling-tensor-core("),
                  "%s | %s", sp.descs[0], sp.descs[sp.n - 1]);
    if (transposed) {
      ck_assert_msg(strstr(sp.descs[1], "transposed K-major by a kernel before") &&
                        !strstr(sp.descs[1], " and ") == (transposed == 1),
                    "%s", sp.descs[1]);
      hopper_transposed_space(w, &ref, sp.traces[1], transposed, &h100, &host, &transposed_tmas);
    }
    const sch_trace_t *tr = sp.traces[0];
    int stages = 0, groups = 0, ntiles = 0;
    for (int i = 0; i < tr->n; i++) {
      const sch_arg_t *a = &tr->insts[i].attrs[0];
      if (tr->insts[i].kind != SCH_SAMPLE_CATEGORICAL) continue;
      stages += a->n == 5 && a->items[0].i == 2 && a->items[4].i == 6;
      groups += a->n == 4 && a->items[0].i == 1 && a->items[3].i == 8;
      ntiles += a->items[0].i == 64 && a->items[a->n - 1].i <= 256; /* the Ns dividing N */
    }
    ck_assert(stages == 1 && groups == 1 && ntiles == 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_GEMM, -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_STAGES, -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_TMA, -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_CTAS, -1), 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, IR_ANN_HOPPER_CLUSTER, -1), 1);
    cg_module_t *mods[4];
    char what[4][256];
    int n = 0, sass_checked = 0;
    for (int k = 0; k < 12 && n < 4; k++) {
      sch_t *s = NULL;
      smp_stage_t st;
      tn_err_t err = {0};
      snprintf(what[n], sizeof what[n], "case %zu, sample %d", c, k);
      if (smp_sample(w->func, &h100, tr, 300 + (uint64_t)k, &s, &st, &err) != TN_OK) {
        /* too much shared memory, too many accumulators or a cluster whose tiles do not pair up: refused with the
           reason */
        ck_assert_msg(st == SMP_STAGE_VERIFY && (strstr(err.msg, "stages of") || strstr(err.msg, "accumulator") ||
                                                 strstr(err.msg, "the cluster does not divide the tiles")),
                      "%s: %s", what[n], err.msg);
        continue;
      }
      check_outputs(w->func, &ref, sch_func(s), what[n]);
      check_roundtrip(w->func, s, what[n]);
      cg_module_t *m = check_lowers(&h100, s, what[n]);
      ck_assert_msg(m->sm90a && m->min_sm == 90 && strstr(m->source, "tuned_wgmma_") &&
                    strstr(m->source, "tuned_mbar_try_wait(&full[s]") && m->kernels[0].dyn_shared_bytes > 0,
                    "%s\n%s", what[n], m->source);
      ck_assert_int_eq(m->kernels[0].block[0] % 128, 0);
      ck_assert_int_eq(m->nkernels, 1); /* the epilogue fused, or none */
      for (int q = 0; q < m->nparams && cases[c].fused; q++) /* the temporary it was computed from: no workspace */
        ck_assert_msg(strcmp(m->params[q].name, cases[c].block), "%s: %s is a workspace", what[n], cases[c].block);
      ck_assert_msg(!strstr(m->source, "gc + ") == cases[c].fused && strstr(m->source, "__syncwarp();") &&
                        strstr(m->source, "*(float4 *)"),
                    "%s: the tile is not stored through shared memory as 16-byte vectors\n%s", what[n], m->source);
      if (strstr(m->source, "tuned_setmaxnreg_dec<")) producers++;
      else all_copy++;
      bool tma = m->kernels[0].nmaps > 0;
      check_hopper_launch(w->func, m, tma ? &tmas : &no_tmas, &persistent);
      ms_cuda_output_t o;
      if (hopper_compiles(m, what[n], &o)) {
        /* ordinary stores fenced for the async proxy, TMA copies where the source has them */
        ck_assert_msg(!strstr(o.ptx, "fence.proxy.async") == !strstr(m->source, "tuned_fence_proxy_async(); ") &&
                          !strstr(o.ptx, "cp.async.bulk.tensor.2d") == !tma,
                      "%s: PTX", what[n]);
        ck_assert_msg(!strstr(o.log, "bytes spill stores") || strstr(o.log, " 0 bytes spill stores"), "%s: %s", what[n],
                      o.log);
        check_launch_regs(&h100, s, &o, what[n]);
        char *sass = hopper_sass(&o, what[n]);
        if (sass) {
          ck_assert_msg(!strstr(sass, "UTMALDG") == !tma, "%s: TMA %d, UTMALDG in the SASS: %d", what[n], tma,
                        !!strstr(sass, "UTMALDG"));
          sass_checked++;
        }
        free(sass);
        ms_cuda_output_free(&o);
      }
      mods[n++] = m;
      sch_free(s);
    }
    ck_assert_int_ge(n, 3);
    hopper_run_all(w->func, &host, mods, n, what);
    ms_options_t opt = hopper_options();
    ms_result_t res[1] = {0};
    tn_err_t err = {0};
    /* the plain harness is no Hopper: refused before the build */
    ck_assert_msg(ms_measure(w->func, &plain, mods, 1, &opt, res, &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(res[0].status == MS_BUILD_ERROR && strstr(res[0].error, "warpgroup MMA"), "%s", res[0].error);
    ms_result_clear(&res[0]);
    /* both copy modes, with and without TMA for one or both operands; the transaction counts
       of one TMA candidate (each mutant is a build: they take time) */
    for (int i = 0; i < n && (c == 2 || c == 3); i++) {
      bool tma = mods[i]->kernels[0].nmaps > 0;
      if (c == 3 || (tma && !mutated)) hopper_mutants(w->func, &host, mods[i], c == 3, tma && !mutated);
      /* a warp's lanes load the staged rows of the epilogue's output before the others stored theirs */
      if (c == 2 && i == 0) hopper_mutant(w->func, &host, mods[i], "__syncwarp();\n", "", NULL, NULL);
      mutated += tma;
    }
    if (c == 0 || c == 5) hopper_persistent_loops(w->func, &host);
    printf("test_hopper_space: case %zu: %d candidates ran on cuda-host/hopper, %d SASS checked\n", c, n, sass_checked);
    for (int i = 0; i < n; i++) cg_module_free(mods[i]);
    smp_space_free(&sp);
    ir_data_free(ref.d);
    ir_workload_free(w);
  }
  ck_assert_msg(producers >= 2 && all_copy >= 2, "%d candidates with a producer warpgroup, %d without", producers,
                all_copy);
  ck_assert_int_ge(mutated, 1);
  ck_assert_msg(tmas >= 2 && no_tmas >= 2 && persistent >= 2, "%d candidates with TMA copies, %d without, %d with a "
                "persistent grid", tmas, no_tmas, persistent);
  ck_assert_int_ge(transposed_tmas, 1); /* TMA from a transposed operand's workspace */
}
END_TEST

/* A Hopper GEMM whose float32 temporary has two consumers keeps them in
 * kernels of their own: its kernel stores the accumulators to the
 * temporary, a workspace of the module that the consumers read, and the
 * candidates compute the reference on the harness. */
START_TEST(test_hopper_unfused) {
  ir_workload_t *w = tu_parse("param M = 64, N = 128, K = 64\ninput A: float16[M, K]\ninput B: float16[N, K]\n"
                              "temp Acc: float32[M, N]\noutput C: float16[M, N]\noutput D: float32[M, N]\n"
                              "Acc[i, j] = sum(k < K: float32(A[i, k]) * float32(B[j, k]))\n"
                              "C[i, j] = float16(Acc[i, j])\nD[i, j] = Acc[i, j] * 2.0\n");
  tn_target_t h100 = target("nvidia/h100"), host = target("cuda-host/hopper");
  smp_space_t sp = generate(w->func, &h100, 1);
  ck_assert_msg(strstr(sp.descs[0], "multi-level-tiling-hopper(Acc") && !strstr(sp.descs[0], "epilogue fused"), "%s",
                sp.descs[0]);
  cg_module_t *mods[2];
  char what[2][256];
  int n = 0;
  for (int k = 0; k < 8 && n < 2; k++) {
    snprintf(what[n], sizeof what[n], "unfused, sample %d", k);
    sch_t *s = sample_verified(w->func, &h100, sp.traces[0], 700 + (uint64_t)k, what[n]);
    if (!s) continue;
    cg_module_t *m = check_lowers(&h100, s, what[n]);
    ck_assert_int_eq(m->nkernels, 3);
    int workspaces = 0;
    for (int q = 0; q < m->nparams; q++) workspaces += m->params[q].role == IR_BUF_TEMP && !strcmp(m->params[q].name, "Acc");
    ck_assert_msg(workspaces == 1 && strstr(m->source, "gc + "), "%s: no workspace Acc that the GEMM stores\n%s",
                  what[n], m->source);
    mods[n++] = m;
    sch_free(s);
  }
  ck_assert_int_ge(n, 1);
  hopper_run_all(w->func, &host, mods, n, what);
  for (int i = 0; i < n; i++) cg_module_free(mods[i]);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* TF32 only where the target says so ("+tf32"): a float32 matmul then gets
 * the tf32 tensor-core tiling, and its candidates pass verification at TF32's
 * tolerance on that target while the same kernels fail float32's (the
 * harness rounds the operands as the tensor cores do). */
START_TEST(test_tf32_space) {
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=128");
  tn_target_t t = target("cuda-host+tf32"), plain = target("cuda-host");
  smp_space_t sp = generate(w->func, &t, 1);
  ck_assert_int_eq(sp.n, 1);
  ck_assert_msg(strstr(sp.descs[0], "multi-level-tiling-tensor-core(C: wmma_tf32_f32_16x16x8"), "%s", sp.descs[0]);
  cg_module_t *mods[2];
  int n = 0;
  for (int k = 0; n < 2 && k < 20; k++) {
    sch_t *s = NULL;
    smp_stage_t st;
    tn_err_t err = {0};
    if (smp_sample(w->func, &t, sp.traces[0], 900 + (uint64_t)k, &s, &st, &err) != TN_OK) continue;
    mods[n++] = check_lowers(&t, s, "tf32");
    ck_assert_ptr_nonnull(strstr(mods[n - 1]->source, "nvcuda::wmma::precision::tf32"));
    sch_free(s);
  }
  ck_assert_int_eq(n, 2);
  ms_options_t o = {.seed = 1};
  o.run.min_secs = 1e-9;
  o.run.min_repeats = o.run.max_repeats = 1;
  for (int k = 0; k < 2; k++) {
    ms_result_t res[2] = {0};
    tn_err_t err = {0};
    ck_assert_msg(ms_measure(w->func, k ? &plain : &t, mods, 2, &o, res, &err) == TN_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
      if (k == 0) {
        ck_assert_msg(res[i].status == MS_OK, "tf32 on cuda-host+tf32: %s: %s", ms_status_name(res[i].status),
                      res[i].error);
      } else {
        ck_assert_msg(res[i].status == MS_WRONG_RESULT, "tf32 kernels on cuda-host: %s", ms_status_name(res[i].status));
        ck_assert_msg(strstr(res[i].error, "(tolerance 0.0001)"), "%s", res[i].error);
      }
      ms_result_clear(&res[i]);
    }
  }
  for (int i = 0; i < n; i++) cg_module_free(mods[i]);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* CPU matmul that no register tile fits within a quarter of padding (3
 * rows: every tile pads them by a third or more), so the plain tiling's
 * spaces come first, beside the padded intrinsics': SSRSRS without binds;
 * the write cache "may" gives three spaces (none, level 1, level 2); the
 * root carries parallel/vectorize/unroll.  (The intrinsic spaces: the
 * tensorize suite.) */
START_TEST(test_cpu_matmul_space) {
  ir_workload_t *w = tu_load_sets("matmul", "M=3,N=64,K=64");
  tn_target_t t = target("cpu");
  smp_space_t sp = generate(w->func, &t, 1);
  ck_assert_int_ge(sp.n, 3);
  for (int i = 3; i < sp.n; i++) ck_assert_msg(strstr(sp.descs[i], "with-intrinsic"), "space %d: %s", i, sp.descs[i]);
  const char *expect[] = {"no write cache", "global write cache at level 1", "global write cache at level 2"};
  for (int i = 0; i < 3; i++) {
    const sch_trace_t *tr = sp.traces[i];
    ck_assert_msg(strstr(sp.descs[i], expect[i]), "space %d: %s", i, sp.descs[i]);
    ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 4), 2);
    ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_PERFECT_TILE, NULL, 2), 1);
    ck_assert_int_eq(count_insts(tr, SCH_BIND, NULL, -1), 0);
    ck_assert_int_eq(count_insts(tr, SCH_CACHE_READ, NULL, -1), 0);
    ck_assert_int_eq(count_insts(tr, SCH_CACHE_WRITE, "global", -1), i == 0 ? 0 : 1);
    ck_assert_int_eq(count_insts(tr, SCH_REVERSE_COMPUTE_AT, NULL, -1), i == 0 ? 0 : 1);
    ck_assert_int_eq(count_insts(tr, SCH_ANNOTATE, SMP_ANN_UNROLL_EXPLICIT, -1), 1);
    int par = 0, vec = 0;
    for (int j = 0; j < tr->n; j++) {
      const sch_inst_t *in = &tr->insts[j];
      if (in->kind == SCH_ANNOTATE && strcmp(in->attrs[0].s, SMP_ANN_PARALLEL) == 0) par = (int)in->inputs[1].i;
      if (in->kind == SCH_ANNOTATE && strcmp(in->attrs[0].s, SMP_ANN_VECTORIZE) == 0) vec = (int)in->inputs[1].i;
    }
    ck_assert_int_eq(par, 8 * 16);
    ck_assert_int_eq(vec, 64);
  }
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* The other rules leave their marks: inlining, epilogue fusion, rfactor,
 * cross-thread reduction, auto-bind, random compute location. */
START_TEST(test_rule_fingerprints) {
  static const struct {
    const char *wl, *sets, *target, *needle;
    int space;
  } cases[] = {
      {"conv2d", "C=8,F=16,H=8,W=8", "nvidia/h100", "auto-inline(Xp into its consumers)", 0},
      {"conv2d", "C=8,F=16,H=8,W=8", "cpu", "random-compute-location(Xp)", 0},
      {"dense_bias_relu", "IN=64,OUT=32", "nvidia/h100", "auto-inline(Y into its producer)", 0},
      {"dense_bias_relu", "IN=64,OUT=32", "cpu", "add-rfactor(D at its outer reduction loop)", 0},
      {"dense_bias_relu", "IN=64,OUT=32", "cpu", "consumer Y at level 1", 2},
      {"row_sum", "M=8,N=256", "cpu", "add-rfactor(R at its inner reduction loop)", 1},
      {"row_sum", "M=8,N=256", "opencl/pocl-cpu", "auto-bind(R)", 0},
      {"row_sum", "M=8,N=256", "opencl/pocl-cpu", "cross-thread-reduction(R)", 1},
      {"softmax", "M=8,N=64", "nvidia/h100",
       "cross-thread-reduction(rsum, fused into its consumers), cross-thread-reduction(rmax, fused into its consumers)",
       3},
      {"softmax", "M=8,N=64", "nvidia/h100", "cross-thread-reduction(rmax), ", 1},
      {"softmax", "M=8,N=64", "nvidia/h100", "auto-inline(E into its consumers)", 0},
      {"vector_add", "N=1000", "nvidia/h100", "auto-bind(C)", 0},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    ir_workload_t *w = tu_load_sets(cases[i].wl, cases[i].sets);
    tn_target_t t = target(cases[i].target);
    smp_space_t sp = generate(w->func, &t, 3);
    ck_assert_int_gt(sp.n, cases[i].space);
    ck_assert_msg(strstr(sp.descs[cases[i].space], cases[i].needle), "%s on %s, space %d: %s", cases[i].wl,
                  cases[i].target, cases[i].space, sp.descs[cases[i].space]);
    smp_space_free(&sp);
    ir_workload_free(w);
  }
  /* the cross-thread reduction: a sampled thread count from [4..512] bound to threadIdx.x */
  ir_workload_t *w = tu_load_sets("row_sum", "M=8,N=256");
  tn_target_t t = target("nvidia/h100");
  smp_space_t sp = generate(w->func, &t, 1);
  const sch_trace_t *tr = sp.traces[1];
  int found = 0;
  for (int i = 0; i < tr->n; i++)
    if (tr->insts[i].kind == SCH_SAMPLE_CATEGORICAL && tr->insts[i].attrs[0].n == 8 &&
        tr->insts[i].attrs[0].items[0].i == 4 && tr->insts[i].attrs[0].items[7].i == 512)
      found++;
  ck_assert_int_eq(found, 1);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "threadIdx.x", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "blockIdx.x", -1), 1);
  smp_space_free(&sp);
  ir_workload_free(w);

  /* softmax with both reductions fused into S: one thread count for the
   * kernel (one categorical, three threadIdx.x bindings), S's rows on
   * blockIdx.x, and every sample one kernel */
  w = tu_load_sets("softmax", "M=8,N=64");
  sp = generate(w->func, &t, 3);
  tr = sp.traces[3];
  ck_assert_int_eq(count_insts(tr, SCH_SAMPLE_CATEGORICAL, NULL, -1), 2); /* threads, unroll */
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "threadIdx.x", -1), 3);
  ck_assert_int_eq(count_insts(tr, SCH_BIND, "blockIdx.x", -1), 1);
  ck_assert_int_eq(count_insts(tr, SCH_COMPUTE_AT, NULL, -1), 2);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sch_t *s = NULL;
    tn_err_t err = {0};
    ck_assert_msg(smp_sample(w->func, &t, tr, seed, &s, NULL, &err) == TN_OK, "%s", err.msg);
    cg_module_t *m = NULL;
    ck_assert_msg(cg_lower(sch_func(s), CG_TARGET_CUDA, NULL, &m, &err) == TN_OK, "%s", err.msg);
    ck_assert_int_eq(m->nkernels, 1);
    ck_assert_int_eq(m->kernels[0].grid[0], 8); /* the rows */
    cg_module_free(m);
    sch_free(s);
  }
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* ---- sampled candidates ----------------------------------------------------- */

/* SAMPLES candidates per space for one workload on all targets: every
 * accepted one computes the reference outputs, replays from its JSON to the
 * same IR, lowers, and (GPU) is fully bound within the limits.  Rejections
 * may only come from verify, or from replay where rfactor meets a sampled
 * unit loop (the schedule drops unit loop variables from bindings). */
START_TEST(test_samples) {
  const wl_case_t *wc = &workloads[_i];
  ir_workload_t *w = tu_load_sets(wc->name, wc->sets);
  ref_t ref = reference(w->func);
  cg_module_t *host[16 * HOST_RUNS];
  char host_what[16 * HOST_RUNS][256];
  int nhost = 0;
  for (int k = 0; k < 3; k++) {
    tn_target_t t = target(targets[k]);
    smp_space_t sp = generate(w->func, &t, 7);
    for (int i = 0; i < sp.n; i++) {
      int ok = 0;
      for (int n = 0; n < SAMPLES; n++) {
        char what[256];
        snprintf(what, sizeof what, "%s on %s, space %d, sample %d", wc->name, targets[k], i, n);
        sch_t *s = NULL;
        smp_stage_t st;
        tn_err_t err = {0};
        if (smp_sample(w->func, &t, sp.traces[i], 1000 + (uint64_t)n, &s, &st, &err) != TN_OK) {
          bool rfactor_unit = st == SMP_STAGE_REPLAY && strstr(err.msg, "rfactor") && strstr(err.msg, "feeds no");
          ck_assert_msg(st == SMP_STAGE_VERIFY || rfactor_unit, "%s: %s", what, err.msg);
          ck_assert_msg(strncmp(err.msg, smp_stage_name(st), strlen(smp_stage_name(st))) == 0, "%s", err.msg);
          continue;
        }
        ok++;
        check_outputs(w->func, &ref, sch_func(s), what);
        check_roundtrip(w->func, s, what);
        cg_module_t *m = check_lowers(&t, s, what);
        if (t.kind != TN_TARGET_CPU) check_gpu(&t, s, what);
        if (t.kind == TN_TARGET_CUDA && ok <= HOST_RUNS && nhost < (int)TN_ARRAY_LEN(host)) {
          snprintf(host_what[nhost], sizeof host_what[nhost], "%s", what);
          host[nhost++] = m;
        } else {
          cg_module_free(m);
        }
        sch_free(s);
      }
      /* matmul on GPUs must pass postprocessing at least 80% of the time */
      int need = strncmp(wc->name, "matmul", 6) == 0 && k > 0 ? SAMPLES * 8 / 10 : SAMPLES / 2;
      ck_assert_msg(ok >= need, "%s on %s, space %d (%s): only %d of %d samples passed", wc->name, targets[k], i,
                    sp.descs[i], ok, SAMPLES);
    }
    smp_space_free(&sp);
  }
  ck_assert_int_ge(nhost, HOST_RUNS); /* every workload has a CUDA space */
  run_on_host(w->func, host, host_what, nhost);
  for (int i = 0; i < nhost; i++) cg_module_free(host[i]);
  ir_data_free(ref.d);
  ir_workload_free(w);
}
END_TEST

/* GEMM-like blocks other than matmuls reach the CPU micro-kernels: each
 * operator's first intrinsic space has the reduction levels the
 * rule should find (window loops fused where their strides compose, a
 * grouped convolution's channels split by group, a 1x1 conv's rows fused
 * into i); where no register tile fits the shape within a quarter of
 * padded work (a strided conv's 5 output columns, 36 channels), the plain
 * tiling's spaces come beside the padded micro-kernels' ("loose"), else
 * there are none; a few samples of every intrinsic space compute the reference (IR
 * evaluation) and replay from JSON, lower to C that calls the
 * micro-kernel, and one per operator runs and verifies in the CPU worker. */
typedef struct gemm_case {
  const char *name, *sets;
  const char *levels;   /* in the first space's description ("" for one level) */
  const char *must;     /* in its trace: "Fuse", "Split" (the groups), or NULL */
  const char *src;      /* in every sample's C source, or NULL */
  bool loose;           /* the plain multi-level tiling's spaces too */
} gemm_case_t;

static const gemm_case_t gemm_cases[] = {
    {"conv1d_nlc", "L=40,CI=8,CO=32,KL=3,ST=2,P=1", "", "[\"FuseBlockIters\"", NULL, false},   /* rl and c fused: one level */
    {"conv2d_nhwc_sdg", "H=16,W=16,CI=3,CO=32,KS=3,ST=2,P=1", "2 reduction levels", "[\"FuseBlockIters\"", NULL, false},
    {"conv2d_nhwc_sdg", "H=8,W=8,CI=16,CO=128,KS=3,ST=1,P=1,G=4", "3 reduction levels", "[\"Split\", [\"l", NULL, false},
    {"conv2d_nhwc_sdg", "H=12,W=12,CI=4,CO=32,KS=3,ST=1,P=2,D=2", "3 reduction levels", NULL, NULL, false},
    {"conv2d_nhwc_sdg", "H=8,W=8,CI=16,CO=32,KS=1,ST=1,P=0", "", "[\"FuseBlockIters\"", NULL, false}, /* y and x fused */
    {"conv2d", "C=8,F=16,H=8,W=8", "3 reduction levels", NULL, NULL, false},                  /* NCHW: j is x */
    {"conv2d_capsule_nhwijc", "H=8,W=8,CI=4,CO=16,KS=3,ST=1,P=1", "4 reduction levels", NULL, NULL, false},
    {"conv3d_ndhwc", "DD=4,H=8,W=8,CI=4,CO=32,KS=3,ST=1,P=1", "3 reduction levels", NULL, NULL, false},
    {"conv2d_nhwc_bn_relu", "H=16,W=16,CI=3,CO=32,KS=3,ST=2,P=1", "2 reduction levels", NULL, NULL, false},
    {"transpose_batch_matmul", "SEQ=32,HEADS=2,DIM=16", "", NULL, NULL, false},
    {"depthwise_conv2d_nhwc", "H=10,W=10,C=32,KS=3,ST=1,P=1", "2 reduction levels", NULL, NULL, false}, /* elementwise along c */
    {"depthwise_conv2d_nhwc", "H=11,W=11,C=48,KS=3,ST=2,P=1", "2 reduction levels", NULL, NULL, false},
    /* the dilated input's phases outside the call, which the zeros' phases skip */
    {"conv2d_transpose_nhwc", "CI=16,CO=32", "3 reduction levels", "[\"Split\", [\"l", "% 2 == 0) tuned_intrin_f32_fma", false},
    /* odd output and kernel: the phases split unevenly (11 x 7 outputs, 3 taps) */
    {"conv2d_transpose_nhwc", "H=5,W=3,CI=16,CO=32,KS=3,P=0", "3 reduction levels", "[\"Split\", [\"l", NULL, false},
    /* 5 output columns, 36 channels: padded tiles beside the plain tiling */
    {"conv2d_nhwc_sdg", "H=9,W=9,CI=3,CO=36,KS=3,ST=2,P=1", "2 reduction levels", NULL, NULL, true},
    {"depthwise_conv2d_nhwc", "H=9,W=9,C=36,KS=5,ST=2,P=2", "2 reduction levels", NULL, NULL, true},
};

START_TEST(test_cpu_gemm_like) {
  if (!ir_intrin_host_supports(ir_intrin_find("f32_fma_6x16_avx2"))) {
    fprintf(stderr, "test_cpu_gemm_like: skipped, this CPU has no AVX2+FMA\n");
    return;
  }
  const gemm_case_t *gc = &gemm_cases[_i];
  ir_workload_t *w = tu_load_sets(gc->name, gc->sets);
  tn_target_t t = target("cpu");
  ref_t ref = reference(w->func);
  smp_space_t sp = generate(w->func, &t, 3);
  int first = -1, plain = 0;
  for (int i = 0; i < sp.n; i++) {
    bool in = strstr(sp.descs[i], "multi-level-tiling-with-intrinsic(") != NULL;
    if (in && first < 0) first = i;
    plain += !in && strstr(sp.descs[i], "multi-level-tiling(") != NULL;
  }
  ck_assert_msg(first >= 0, "%s %s: no intrinsic space (%s)", gc->name, gc->sets, sp.n ? sp.descs[0] : "no space");
  ck_assert_msg(gc->loose ? plain >= 1 : plain == 0, "%s %s: %d plain spaces of %d", gc->name, gc->sets, plain, sp.n);
  if (*gc->levels) ck_assert_msg(strstr(sp.descs[first], gc->levels), "%s %s: %s", gc->name, gc->sets, sp.descs[first]);
  else ck_assert_msg(!strstr(sp.descs[first], "reduction levels"), "%s %s: %s", gc->name, gc->sets, sp.descs[first]);
  if (gc->must) {
    char *json = sch_trace_to_json(sp.traces[first]);
    ck_assert_msg(strstr(json, gc->must), "%s %s: no %s in %s", gc->name, gc->sets, gc->must, json);
    free(json);
  }
  cg_module_t *run = NULL;
  char what[256];
  for (int i = 0; i < sp.n; i++) {
    if (!strstr(sp.descs[i], "multi-level-tiling-with-intrinsic(")) continue;
    for (int n = 0; n < 3; n++) {
      snprintf(what, sizeof what, "%s %s, space %d (%s), sample %d", gc->name, gc->sets, i, sp.descs[i], n);
      sch_t *s = NULL;
      tn_err_t err = {0};
      ck_assert_msg(smp_sample(w->func, &t, sp.traces[i], 50 + (uint64_t)n, &s, NULL, &err) == TN_OK, "%s: %s", what,
                    err.msg);
      check_outputs(w->func, &ref, sch_func(s), what);
      check_roundtrip(w->func, s, what);
      cg_module_t *m = check_lowers(&t, s, what);
      ck_assert_msg(strstr(m->source, strstr(gc->name, "depthwise") ? "tuned_intrin_f32_dw_" : "tuned_intrin_f32_fma_"),
                    "%s: no micro-kernel call\n%s", what, m->source);
      if (gc->src) ck_assert_msg(strstr(m->source, gc->src), "%s: no \"%s\"\n%s", what, gc->src, m->source);
      if (!run) run = m;
      else cg_module_free(m);
      sch_free(s);
    }
  }
  ms_options_t o = {.seed = 1};
  o.run.min_secs = 1e-9;
  o.run.min_repeats = o.run.max_repeats = 1;
  ms_result_t res = {0};
  tn_err_t err = {0};
  ck_assert_msg(ms_measure(w->func, &t, &run, 1, &o, &res, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(res.status == MS_OK, "%s %s in the worker: %s: %.300s", gc->name, gc->sets, ms_status_name(res.status),
                res.error);
  ms_result_clear(&res);
  cg_module_free(run);
  smp_space_free(&sp);
  ir_data_free(ref.d);
  ir_workload_free(w);
}
END_TEST

/* A dense layer whose weights are declared const: per intrinsic, two more
 * spaces pack W once, outside the kernel (HoistPacking).  Their samples
 * compute the layer (IR evaluation), replay from JSON, lower to a kernel
 * taking the packed copy (role "packed") plus its packing function, and
 * run and verify in the CPU worker, which packs once per candidate; a
 * candidate whose packing function is never called fails verification
 * (the packed copy is poisoned first).  Without const: no such spaces. */
static const char dense_const[] = "param B = 12, IN = 24, OUT = 48\n"
                                  "input  X: float32[B, IN]\n"
                                  "input  W: float32[OUT, IN]%s\n"
                                  "input  bias: float32[OUT]\n"
                                  "temp   D: float32[B, OUT]\n"
                                  "output Y: float32[B, OUT]\n"
                                  "D[b, o] = sum(k < IN: X[b, k] * W[o, k])\n"
                                  "Y[b, o] = max(D[b, o] + bias[o], 0.0)\n";

static int hoisted_spaces(const char *text, smp_space_t *sp) {
  ir_workload_t *w = tu_parse(text);
  tn_target_t t = target("cpu");
  *sp = generate(w->func, &t, 1);
  int n = 0;
  for (int i = 0; i < sp->n; i++) n += strstr(sp->descs[i], "(hoisted)") != NULL;
  ir_workload_free(w);
  return n;
}

START_TEST(test_hoisted_packing) {
  if (!ir_intrin_host_supports(ir_intrin_find("f32_fma_6x16_avx2"))) {
    fprintf(stderr, "test_hoisted_packing: skipped, this CPU has no AVX2+FMA\n");
    return;
  }
  char text[1024];
  smp_space_t sp;
  snprintf(text, sizeof text, dense_const, "");
  ck_assert_int_eq(hoisted_spaces(text, &sp), 0);
  smp_space_free(&sp);
  snprintf(text, sizeof text, dense_const, " const");
  int nh = hoisted_spaces(text, &sp);
  ck_assert_int_ge(nh, 2); /* per intrinsic: A in place or packed under k0 */
  ck_assert_int_eq(nh % 2, 0);
  ir_workload_t *w = tu_parse(text);
  tn_target_t t = target("cpu");
  ref_t ref = reference(w->func);
  cg_module_t *mods[8];
  char what[8][256];
  int n = 0;
  int first = -1;
  for (int i = 0; i < sp.n && n < 4; i++) {
    if (!strstr(sp.descs[i], "(hoisted)")) continue;
    if (first < 0) first = i;
    snprintf(what[n], sizeof what[n], "space %d (%s)", i, sp.descs[i]);
    sch_t *s = NULL;
    tn_err_t err = {0};
    ck_assert_msg(smp_sample(w->func, &t, sp.traces[i], 7, &s, NULL, &err) == TN_OK, "%s: %s", what[n], err.msg);
    char *json = sch_trace_to_json(sch_get_trace(s));
    ck_assert_msg(strstr(json, "[\"HoistPacking\", [\"b"), "%s", json);
    free(json);
    check_outputs(w->func, &ref, sch_func(s), what[n]);
    check_roundtrip(w->func, s, what[n]);
    cg_module_t *m = check_lowers(&t, s, what[n]);
    const cg_param_t *p = &m->params[m->nparams - 1];
    ck_assert_int_eq(m->nparams, 5);
    ck_assert_str_eq(p->packs, "W");
    ck_assert_str_eq(p->pack_fn, "default_function_pack_W");
    ck_assert_int_ge(p->elements, 24 * 48);
    char *launch = cg_module_launch_json(m);
    ck_assert_msg(strstr(launch, "\"role\":\t\"packed\"") && strstr(launch, "\"pack_entry\":\t\"tuned_pack_default_function\""),
                  "%s", launch);
    free(launch);
    ck_assert_msg(strstr(m->source, "int default_function_pack_W(const float *restrict W, float *restrict W_local) {"),
                  "%s", m->source);
    mods[n++] = m;
    sch_free(s);
  }
  /* the same kernel with its packing function never called */
  sch_t *s = NULL;
  ck_assert_int_eq(smp_sample(w->func, &t, sp.traces[first], 7, &s, NULL, NULL), TN_OK);
  mods[n] = check_lowers(&t, s, "again");
  sch_free(s);
  char *call = strstr(mods[n]->source, "if (!rc) rc = default_function_pack_W(");
  ck_assert_ptr_nonnull(call);
  char *end = strchr(call, ';');
  memset(call, ' ', (size_t)(end - call)); /* the statement becomes empty */
  snprintf(what[n++], sizeof what[0], "packing never called");
  ms_options_t o = {.seed = 1};
  o.run.min_secs = 1e-9;
  o.run.min_repeats = o.run.max_repeats = 1;
  ms_result_t res[8] = {0};
  tn_err_t err = {0};
  ck_assert_msg(ms_measure(w->func, &t, mods, n, &o, res, &err) == TN_OK, "%s", err.msg);
  for (int i = 0; i < n; i++) {
    ms_status_t want = i < n - 1 ? MS_OK : MS_WRONG_RESULT;
    ck_assert_msg(res[i].status == want, "%s: %s: %.300s", what[i], ms_status_name(res[i].status), res[i].error);
    ms_result_clear(&res[i]);
    cg_module_free(mods[i]);
  }
  smp_space_free(&sp);
  ir_data_free(ref.d);
  ir_workload_free(w);
}
END_TEST

/* Same seed, same spaces and candidates; another seed, other candidates. */
START_TEST(test_determinism) {
  ir_workload_t *w = tu_load_sets("conv2d", "C=8,F=16,H=8,W=8");
  for (int k = 0; k < 3; k++) {
    tn_target_t t = target(targets[k]);
    smp_space_t a = generate(w->func, &t, 5), b = generate(w->func, &t, 5);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
      char *ja = sch_trace_to_json(a.traces[i]), *jb = sch_trace_to_json(b.traces[i]);
      ck_assert_str_eq(ja, jb);
      ck_assert_str_eq(a.descs[i], b.descs[i]);
      free(ja), free(jb);
    }
    sch_t *s1, *s2, *s3;
    tn_err_t err = {0};
    ck_assert_msg(smp_sample(w->func, &t, a.traces[0], 42, &s1, NULL, &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(smp_sample(w->func, &t, b.traces[0], 42, &s2, NULL, &err) == TN_OK, "%s", err.msg);
    char *j1 = sch_trace_to_json(sch_get_trace(s1)), *j2 = sch_trace_to_json(sch_get_trace(s2));
    ck_assert_str_eq(j1, j2);
    int differs = 0;
    for (uint64_t seed = 43; seed < 48; seed++) {
      if (smp_sample(w->func, &t, a.traces[0], seed, &s3, NULL, &err) != TN_OK) continue;
      char *j3 = sch_trace_to_json(sch_get_trace(s3));
      differs += strcmp(j1, j3) != 0;
      free(j3);
      sch_free(s3);
    }
    ck_assert_int_gt(differs, 0);
    free(j1), free(j2);
    sch_free(s1), sch_free(s2);
    smp_space_free(&a), smp_space_free(&b);
  }
  ir_workload_free(w);
}
END_TEST

/* ---- postprocessors ------------------------------------------------------------ */

/* A copy of trace with the k-th SamplePerfectTile given decision tiles[k]. */
static sch_trace_t *with_tiles(const sch_trace_t *tr, const int64_t (*tiles)[5], const int *ntiles) {
  sch_trace_t *c = sch_trace_new();
  int k = 0;
  for (int i = 0; i < tr->n; i++) {
    sch_inst_t in = tr->insts[i];
    if (in.kind == SCH_SAMPLE_PERFECT_TILE) {
      in.decision = (int64_t *)tiles[k];
      in.ndecision = ntiles[k++];
    }
    sch_trace_append(c, &in);
  }
  return c;
}

/* Sets the decision of the sampled software-pipeline stages (the categorical
 * before the annotation) to candidate index k (stages k + 1); returns how
 * many it set. */
static int set_stages(sch_trace_t *tr, const int64_t *k) {
  int n = 0;
  for (int i = 0; i + 1 < tr->n; i++) {
    const sch_inst_t *next = &tr->insts[i + 1];
    if (tr->insts[i].kind == SCH_SAMPLE_CATEGORICAL && next->kind == SCH_ANNOTATE && next->nattrs == 1 &&
        next->attrs[0].s && strcmp(next->attrs[0].s, IR_ANN_PIPELINE_STAGES) == 0) {
      tr->insts[i].decision = (int64_t *)k;
      tr->insts[i].ndecision = 1;
      n++;
    }
  }
  return n;
}

/* Cooperative fetch: the fused cache loop is split over the threads and the
 * sampled vector width, or width 1 when that does not divide it. */
START_TEST(test_cooperative_fetch) {
  tn_target_t t = target("opencl/pocl-cpu");
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  smp_space_t sp = generate(w->func, &t, 1);
  static const int64_t tiles[3][5] = {{2, 2, 4, 2, 2}, {2, 2, 4, 2, 2}, {2, 4, 8}};
  static const int n[3] = {5, 5, 3};
  sch_trace_t *tr = with_tiles(sp.traces[0], tiles, n);
  int cat = 0;
  for (int i = 0; i < tr->n; i++) /* widths 3 (A: 32x32 does not divide) and 4 (B), 1 stage, unroll 64 */
    if (tr->insts[i].kind == SCH_SAMPLE_CATEGORICAL) {
      static int64_t pick[4] = {2, 3, 0, 2};
      tr->insts[i].decision = &pick[cat++];
      tr->insts[i].ndecision = 1;
    }
  ck_assert_int_eq(cat, 4);
  sch_trace_t *c = sch_trace_copy(tr); /* own the decisions */
  sch_t *s = NULL;
  tn_err_t err = {0};
  ck_assert_msg(smp_sample(w->func, &t, c, 1, &s, NULL, &err) == TN_OK, "%s", err.msg);
  char *ir = print_ir(sch_func(s));
  ck_assert_msg(strstr(ir, "T.vectorized(4)") && !strstr(ir, "T.vectorized(3)"), "%s", ir);
  ck_assert_msg(strstr(ir, "for ax0_ax1_fused_0 in range(64):"), "%s", ir); /* 1024 = 64 x 16 threads */
  ck_assert_msg(strstr(ir, "for ax0_ax1_fused_0_1 in range(16):"), "%s", ir); /* 1024 = 16 x 16 x 4 */
  ck_assert_ptr_null(strstr(ir, SMP_ANN_COOP_FETCH));
  ck_assert_msg(strstr(ir, "\"pragma_auto_unroll_max_step\": 64"), "%s", ir);
  free(ir);
  sch_free(s);
  sch_trace_free(c);
  sch_trace_free(tr);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* Verify rejects too many threads and too much shared memory, and says so. */
START_TEST(test_verify_rejects) {
  tn_target_t t = target("nvidia/h100");
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  smp_space_t sp = generate(w->func, &t, 1);
  static const int64_t threads[3][5] = {{1, 1, 64, 1, 1}, {1, 1, 64, 1, 1}, {2, 4, 8}};
  static const int n[3] = {5, 5, 3};
  sch_trace_t *tr = with_tiles(sp.traces[0], threads, n);
  sch_t *s = NULL;
  smp_stage_t st;
  tn_err_t err = {0};
  ck_assert_int_lt(smp_sample(w->func, &t, tr, 1, &s, &st, &err), 0);
  ck_assert_int_eq(st, SMP_STAGE_VERIFY);
  ck_assert_msg(strstr(err.msg, "verify: 4096 threads per block exceed the target's 1024"), "%s", err.msg);
  sch_trace_free(tr);
  /* a known candidate: 16 threads, 32x32 tiles of A and B in shared memory */
  static const int64_t fits[3][5] = {{2, 2, 4, 2, 2}, {2, 2, 4, 2, 2}, {2, 4, 8}};
  tr = with_tiles(sp.traces[0], fits, n);
  for (int64_t k = 0; k < 3; k++) { /* 1, 2, 3 pipeline stages: a copy of the tiles each */
    ck_assert_int_eq(set_stages(tr, &k), 1);
    ck_assert_msg(smp_sample(w->func, &t, tr, 1, &s, &st, &err) == TN_OK, "%s", err.msg);
    smp_gpu_usage_t u;
    smp_gpu_usage(sch_func(s), &u);
    ck_assert_int_eq(u.threads_per_block, 16);
    ck_assert_int_eq(u.shared_bytes, (k + 1) * 2 * 32 * 32 * 4);
    ck_assert_int_eq(u.unbound_blocks, 0);
    ck_assert_int_le(u.vector_bytes, 16);
    sch_free(s);
  }
  sch_trace_free(tr);
  smp_space_free(&sp);
  ir_workload_free(w);
  /* 128x64 tiles of A and B: 64 KiB of shared memory */
  w = tu_load_sets("matmul", "M=128,N=128,K=64");
  sp = generate(w->func, &t, 1);
  static const int64_t big[3][5] = {{1, 2, 1, 1, 64}, {1, 2, 1, 1, 64}, {1, 1, 64}};
  tr = with_tiles(sp.traces[0], big, n);
  static const int64_t one_stage = 0;
  set_stages(tr, &one_stage);
  /* the H100 takes it (dynamic shared memory, up to 227 KiB); the P100 has
   * only the static 48 KiB */
  ck_assert_msg(smp_sample(w->func, &t, tr, 1, &s, &st, &err) == TN_OK, "%s", err.msg);
  sch_free(s);
  tn_target_t p100 = target("nvidia/tesla-p100");
  ck_assert_int_lt(smp_sample(w->func, &p100, tr, 1, &s, &st, &err), 0);
  ck_assert_int_eq(st, SMP_STAGE_VERIFY);
  ck_assert_msg(strstr(err.msg, "65536 bytes of shared memory per block exceed the target's 49152"), "%s", err.msg);
  sch_trace_free(tr);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* With no design-space instructions at all, rewrite-unbound-block binds a
 * GPU kernel with min(max threads, extent) threads; on CPUs nothing runs. */
START_TEST(test_unbound_and_empty) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1000");
  sch_trace_t *empty = sch_trace_new();
  tn_target_t g = target("opencl/pocl-cpu"), c = target("cpu");
  sch_t *s = NULL;
  tn_err_t err = {0};
  ck_assert_msg(smp_sample(w->func, &g, empty, 1, &s, NULL, &err) == TN_OK, "%s", err.msg);
  smp_gpu_usage_t u;
  smp_gpu_usage(sch_func(s), &u);
  ck_assert_int_eq(u.threads_per_block, 1000);
  ck_assert_int_eq(u.unbound_blocks, 0);
  ck_assert_int_eq(count_insts(sch_get_trace(s), SCH_ENTER_POSTPROC, NULL, -1), 1);
  sch_free(s);
  ck_assert_msg(smp_sample(w->func, &c, empty, 1, &s, NULL, &err) == TN_OK, "%s", err.msg);
  ck_assert_int_eq(sch_get_trace(s)->n, 1); /* EnterPostproc only */
  sch_free(s);
  sch_trace_free(empty);
  ir_workload_free(w);
}
END_TEST

/* rewrite-parallel-vectorize-unroll on the CPU: parallel outer loops, a
 * vectorized contiguous inner loop, the unroll pragma, and the root's
 * annotations gone. */
START_TEST(test_cpu_rewrites) {
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  tn_target_t t = target("cpu");
  smp_space_t sp = generate(w->func, &t, 1);
  int parallel = 0, vectorized = 0, unrolled = 0;
  for (int n = 0; n < 20; n++) {
    sch_t *s = NULL;
    tn_err_t err = {0};
    ck_assert_msg(smp_sample(w->func, &t, sp.traces[0], (uint64_t)n, &s, NULL, &err) == TN_OK, "%s", err.msg);
    char *ir = print_ir(sch_func(s));
    parallel += strstr(ir, "T.parallel(") != NULL;
    vectorized += strstr(ir, "T.vectorized(") != NULL;
    unrolled += strstr(ir, "pragma_auto_unroll_max_step") != NULL;
    ck_assert_ptr_null(strstr(ir, SMP_ANN_PARALLEL));
    ck_assert_ptr_null(strstr(ir, SMP_ANN_UNROLL_EXPLICIT));
    ck_assert_ptr_nonnull(strstr(ir, "C_init")); /* decomposed */
    free(ir);
    sch_free(s);
  }
  ck_assert_int_gt(parallel, 10);
  ck_assert_int_gt(vectorized, 5);
  ck_assert_int_gt(unrolled, 5);
  smp_space_free(&sp);
  ir_workload_free(w);
  /* an elementwise loop longer than the parallel extent: parallel, not vectorized */
  w = tu_load_sets("vector_add", "N=1024");
  sp = generate(w->func, &t, 1);
  sch_t *s = NULL;
  tn_err_t err = {0};
  ck_assert_msg(smp_sample(w->func, &t, sp.traces[0], 1, &s, NULL, &err) == TN_OK, "%s", err.msg);
  char *ir = print_ir(sch_func(s));
  ck_assert_msg(strstr(ir, "for i in T.parallel(1024):"), "%s", ir);
  free(ir);
  sch_free(s);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* ---- mutators ----------------------------------------------------------------- */

/* A sampled candidate's trace. */
static sch_trace_t *candidate(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *space, uint64_t seed) {
  sch_t *s = NULL;
  tn_err_t err = {0};
  for (uint64_t k = 0; k < 20; k++)
    if (smp_sample(f, t, space, seed + k, &s, NULL, &err) == TN_OK) break;
  ck_assert_msg(s, "%s", err.msg);
  sch_trace_t *tr = sch_trace_copy(sch_get_trace(s));
  sch_free(s);
  return tr;
}

/* Decisions and the parallel annotation that differ between a candidate and
 * its mutation (the mutation has no postproc part). */
static int changes(const sch_trace_t *a, const sch_trace_t *m, int *at) {
  int n = 0;
  ck_assert_int_eq(count_insts(m, SCH_ENTER_POSTPROC, NULL, -1), 0);
  ck_assert_int_le(m->n, a->n);
  for (int i = 0; i < m->n; i++) {
    const sch_inst_t *x = &a->insts[i], *y = &m->insts[i];
    ck_assert_int_eq(x->kind, y->kind);
    bool diff = x->ndecision != y->ndecision;
    for (int k = 0; k < x->ndecision && !diff; k++) diff = x->decision[k] != y->decision[k];
    if (x->kind == SCH_ANNOTATE && x->inputs[1].kind == SCH_ARG_INT) diff |= x->inputs[1].i != y->inputs[1].i;
    if (diff) n++, *at = i;
  }
  return n;
}

/* One mutator on one candidate: exactly one change, of the right kind, and
 * the mutated trace samples into a valid candidate again. */
static void check_mutator(const char *wl, const char *sets, const char *tname, int space, smp_mutator_t m,
                          sch_inst_kind_t changed) {
  ir_workload_t *w = tu_load_sets(wl, sets);
  tn_target_t t = target(tname);
  smp_space_t sp = generate(w->func, &t, 1);
  tn_rng_t rng;
  tn_rng_seed(&rng, 17);
  int applied = 0;
  for (int n = 0; n < 10; n++) {
    sch_trace_t *c = candidate(w->func, &t, sp.traces[space], 100 + 10 * (uint64_t)n), *mt = NULL;
    tn_err_t err = {0};
    int rc = smp_mutate_with(m, c, w->func, &t, &rng, NULL, &mt, &err);
    ck_assert_msg(rc == TN_OK, "%s on %s %s: %s", smp_mutator_name(m), wl, tname, err.msg);
    int at = -1;
    ck_assert_int_eq(changes(c, mt, &at), 1);
    ck_assert_int_eq(mt->insts[at].kind, changed);
    if (changed == SCH_SAMPLE_PERFECT_TILE) {
      int64_t pa = 1, pb = 1;
      for (int k = 0; k < mt->insts[at].ndecision; k++) pa *= c->insts[at].decision[k], pb *= mt->insts[at].decision[k];
      ck_assert_int_eq(pa, pb);
      ck_assert_int_le(mt->insts[at].decision[mt->insts[at].ndecision - 1], 64);
    }
    sch_t *s = NULL;
    smp_stage_t st;
    rc = smp_sample(w->func, &t, mt, 1, &s, &st, &err);
    ck_assert_msg(rc == TN_OK || st == SMP_STAGE_VERIFY, "%s: %s", smp_mutator_name(m), err.msg);
    applied += rc == TN_OK;
    sch_free(s);
    sch_trace_free(c), sch_trace_free(mt);
  }
  ck_assert_int_gt(applied, 5);
  smp_space_free(&sp);
  ir_workload_free(w);
}

START_TEST(test_mutators) {
  check_mutator("matmul", "M=64,N=64,K=64", "cpu", 1, SMP_MUT_TILE_SIZE, SCH_SAMPLE_PERFECT_TILE);
  check_mutator("matmul", "M=64,N=64,K=64", "cpu", 0, SMP_MUT_UNROLL, SCH_SAMPLE_CATEGORICAL);
  check_mutator("matmul", "M=64,N=64,K=64", "cpu", 0, SMP_MUT_PARALLEL, SCH_ANNOTATE);
  check_mutator("conv2d", "C=8,F=16,H=8,W=8", "cpu", 0, SMP_MUT_COMPUTE_LOCATION, SCH_SAMPLE_COMPUTE_LOCATION);
  {
    /* an elementwise space has one trace; mutate-parallel still offers the
     * serial variant (parallel extent 0), and back */
    ir_workload_t *w = tu_load_sets("square", "M=256,N=48");
    tn_target_t t = target("cpu");
    smp_space_t sp = generate(w->func, &t, 1);
    sch_trace_t *c = candidate(w->func, &t, sp.traces[0], 1), *mt = NULL, *back = NULL;
    tn_rng_t rng;
    tn_rng_seed(&rng, 3);
    tn_err_t err = {0};
    ck_assert_int_eq(smp_mutate_with(SMP_MUT_PARALLEL, c, w->func, &t, &rng, NULL, &mt, &err), TN_OK);
    int at = -1;
    ck_assert_int_eq(changes(c, mt, &at), 1);
    ck_assert_int_eq(mt->insts[at].inputs[1].i, 0);
    sch_t *s = NULL;
    ck_assert_int_eq(smp_sample(w->func, &t, mt, 1, &s, NULL, &err), TN_OK);
    char *ir = print_ir(sch_func(s));
    ck_assert_msg(!strstr(ir, "T.parallel(") && strstr(ir, "T.vectorized(48)"), "%s", ir);
    free(ir);
    sch_free(s);
    ck_assert_int_eq(smp_mutate_with(SMP_MUT_PARALLEL, mt, w->func, &t, &rng, NULL, &back, &err), TN_OK);
    ck_assert_int_eq(back->insts[at].inputs[1].i, 128); /* 8 cores x 16 jobs (the test target) */
    sch_trace_free(c), sch_trace_free(mt), sch_trace_free(back);
    smp_space_free(&sp);
    ir_workload_free(w);
  }
  check_mutator("matmul", "M=64,N=64,K=64", "nvidia/h100", 0, SMP_MUT_UNROLL, SCH_SAMPLE_CATEGORICAL);
  check_mutator("row_sum", "M=128,N=64", "opencl/pocl-cpu", 0, SMP_MUT_THREAD_BINDING, SCH_SAMPLE_CATEGORICAL);
  check_mutator("softmax", "M=8,N=64", "nvidia/h100", 3, SMP_MUT_THREAD_BINDING, SCH_SAMPLE_CATEGORICAL);
}
END_TEST

/* A loop of extent 2 x 1073741789 (a huge reduction; the factor is prime): tile-size mutations keep the
 * product and stay fast (the divisors of a factor were found by trial
 * division up to the factor: seconds per mutation). */
START_TEST(test_mutate_huge_extent) {
  ir_workload_t *w = tu_load_sets("matmul", "M=1,N=1,K=2147483578");
  tn_target_t t = target("cpu");
  smp_space_t sp = generate(w->func, &t, 1);
  sch_trace_t *c = candidate(w->func, &t, sp.traces[0], 1);
  tn_rng_t rng;
  tn_rng_seed(&rng, 5);
  double t0 = tn_now();
  int done = 0;
  for (int n = 0; n < 200; n++) {
    sch_trace_t *mt = NULL;
    tn_err_t err = {0};
    if (smp_mutate_with(SMP_MUT_TILE_SIZE, c, w->func, &t, &rng, NULL, &mt, &err) != TN_OK) continue;
    int at = -1;
    ck_assert_int_eq(changes(c, mt, &at), 1);
    int64_t pa = 1, pb = 1;
    for (int k = 0; k < mt->insts[at].ndecision; k++) pa *= c->insts[at].decision[k], pb *= mt->insts[at].decision[k];
    ck_assert_int_eq(pa, pb);
    done++;
    sch_trace_free(mt);
  }
  double took = tn_now() - t0;
  ck_assert_int_gt(done, 50);
  ck_assert_msg(took < 2.0, "200 tile-size mutations of a 2^31 loop took %.2f s", took);
  sch_trace_free(c);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* smp_mutate picks among the target's mutators; GPU matmul also mutates the
 * cooperative-fetch widths; mutators that do not apply say so. */
START_TEST(test_mutate_dispatch) {
  smp_mutator_t kinds[SMP_MUT__COUNT];
  double probs[SMP_MUT__COUNT];
  tn_target_t g = target("nvidia/h100"), c = target("cpu");
  ck_assert_int_eq(smp_mutators(&g, kinds, probs), 3);
  ck_assert(kinds[0] == SMP_MUT_TILE_SIZE && probs[0] == 0.90 && probs[1] == 0.08 && probs[2] == 0.02);
  ck_assert_int_eq(smp_mutators(&c, kinds, probs), 4);
  ck_assert(kinds[1] == SMP_MUT_COMPUTE_LOCATION && probs[1] == 0.05 && kinds[3] == SMP_MUT_PARALLEL);

  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  smp_space_t sp = generate(w->func, &g, 1);
  sch_trace_t *cand = candidate(w->func, &g, sp.traces[0], 1);
  tn_rng_t rng;
  tn_rng_seed(&rng, 3);
  int used[SMP_MUT__COUNT] = {0}, width_changes = 0, replayed = 0;
  for (int n = 0; n < 200; n++) {
    sch_trace_t *mt = NULL;
    smp_mutator_t m;
    tn_err_t err = {0};
    ck_assert_msg(smp_mutate(cand, w->func, &g, &rng, NULL, &mt, &m, &err) == TN_OK, "%s", err.msg);
    used[m]++;
    int at = -1;
    ck_assert_int_eq(changes(cand, mt, &at), 1);
    width_changes += mt->insts[at].kind == SCH_SAMPLE_CATEGORICAL && mt->insts[at].attrs[0].n == 4;
    sch_t *s = NULL;
    replayed += sch_replay_with(w->func, mt, 1, NULL, NULL, true, &s, &err) == TN_OK;
    sch_free(s);
    sch_trace_free(mt);
  }
  ck_assert_int_eq(replayed, 200);
  ck_assert_int_gt(used[SMP_MUT_TILE_SIZE], 150);
  ck_assert_int_gt(used[SMP_MUT_UNROLL], 3);
  ck_assert_int_eq(used[SMP_MUT_COMPUTE_LOCATION] + used[SMP_MUT_PARALLEL], 0);
  ck_assert_int_gt(width_changes, 0);
  /* nothing to mutate for a GPU trace's parallel extent or compute location */
  sch_trace_t *mt = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(smp_mutate_with(SMP_MUT_PARALLEL, cand, w->func, &g, &rng, NULL, &mt, &err), TN_ESTATE);
  ck_assert_int_eq(smp_mutate_with(SMP_MUT_COMPUTE_LOCATION, cand, w->func, &g, &rng, NULL, &mt, &err), TN_ESTATE);
  ck_assert_ptr_nonnull(strstr(err.msg, "mutate-compute-location does not apply"));
  sch_trace_free(cand);
  smp_space_free(&sp);
  /* a trace without sampling instructions cannot mutate at all */
  sch_trace_t *empty = sch_trace_new();
  ck_assert_int_eq(smp_mutate(empty, w->func, &c, &rng, NULL, &mt, NULL, &err), TN_ESTATE);
  sch_trace_free(empty);
  ir_workload_free(w);
}
END_TEST

/* Same RNG state, same mutation. */
START_TEST(test_mutate_determinism) {
  ir_workload_t *w = tu_load_sets("conv2d", "C=8,F=16,H=8,W=8");
  tn_target_t t = target("cpu");
  smp_space_t sp = generate(w->func, &t, 1);
  sch_trace_t *cand = candidate(w->func, &t, sp.traces[1], 5);
  for (int n = 0; n < 10; n++) {
    tn_rng_t r1, r2;
    tn_rng_seed(&r1, (uint64_t)n);
    tn_rng_seed(&r2, (uint64_t)n);
    sch_trace_t *a = NULL, *b = NULL;
    tn_err_t err = {0};
    ck_assert_int_eq(smp_mutate(cand, w->func, &t, &r1, NULL, &a, NULL, &err), TN_OK);
    ck_assert_int_eq(smp_mutate(cand, w->func, &t, &r2, NULL, &b, NULL, &err), TN_OK);
    char *ja = sch_trace_to_json(a), *jb = sch_trace_to_json(b);
    ck_assert_str_eq(ja, jb);
    free(ja), free(jb);
    sch_trace_free(a), sch_trace_free(b);
  }
  sch_trace_free(cand);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* ---- the kernel plan ------------------------------------------------------------ */

/* The plan (ir/plan.h) of a lowered candidate says what codegen emitted:
 * as many kernels, the same grid and block, and the same shared bytes
 * (static arrays exactly; one dynamic array, whose buffers codegen aligns
 * to 16 or 32 bytes, at least the plan's and at most 32 bytes more per
 * buffer). */
static void check_plan(const tn_target_t *t, const sch_t *s, const cg_module_t *m, const char *what) {
  ir_plan_t p;
  tn_err_t err = {0};
  ck_assert_msg(ir_plan_build(sch_func(s), t, &p, &err) == TN_OK, "%s: %s", what, err.msg);
  ck_assert_msg(p.n == m->nkernels, "%s: %d kernels planned, %d emitted", what, p.n, m->nkernels);
  for (int i = 0; i < p.n; i++) {
    const ir_kernel_plan_t *k = &p.k[i];
    const cg_kernel_t *kd = &m->kernels[i];
    for (int a = 0; a < 3; a++)
      ck_assert_msg(k->grid[a] == kd->grid[a] && k->block[a] == kd->block[a],
                    "%s: kernel %d axis %d: planned grid %lld block %lld, emitted %lld / %lld", what, i, a,
                    (long long)k->grid[a], (long long)k->block[a], (long long)kd->grid[a], (long long)kd->block[a]);
    int nshared = 0;
    for (int b = 0; b < k->nbufs; b++) nshared += k->bufs[b].scope == IR_SCOPE_SHARED;
    ck_assert_msg(k->dynamic_shared == (kd->dyn_shared_bytes > 0), "%s: kernel %d: dynamic %d, emitted %lld", what, i,
                  k->dynamic_shared, (long long)kd->dyn_shared_bytes);
    if (!k->dynamic_shared)
      ck_assert_msg(k->shared_bytes == kd->static_shared_bytes, "%s: kernel %d: planned %lld shared bytes (%s), "
                    "emitted %lld", what, i, (long long)k->shared_bytes, k->shared_detail,
                    (long long)kd->static_shared_bytes);
    else if (k->hopper)
      ck_assert_int_eq(k->shared_bytes, kd->dyn_shared_bytes);
    else
      ck_assert_msg(k->shared_bytes <= kd->dyn_shared_bytes && kd->dyn_shared_bytes <= k->shared_bytes + 32 * nshared,
                    "%s: kernel %d: planned %lld dynamic shared bytes (%s), emitted %lld", what, i,
                    (long long)k->shared_bytes, k->shared_detail, (long long)kd->dyn_shared_bytes);
    ck_assert_msg(ir_plan_regs_ok(k, err.msg, sizeof err.msg), "%s: %s", what, err.msg);
  }
  ir_plan_free(&p);
}

/* Every design space of the sampler's workloads (and the Hopper GEMMs) on
 * the GPU targets: a few samples of each, lowered, planned as emitted. */
START_TEST(test_plan_matches_codegen) {
  /* the last: the H100 with a 4 KiB static limit, so that codegen (which reads it from the target) and the plan
     put more kernels' shared arrays into one dynamic array */
  static const char *const gpu[] = {"opencl/pocl-cpu", "nvidia/h100", "nvidia/tesla-t4", "nvidia/h100"};
  int checked = 0, dynamic = 0;
  for (size_t wi = 0; wi <= TN_ARRAY_LEN(workloads); wi++) {
    bool hop = wi == TN_ARRAY_LEN(workloads); /* matmul_f16 at a size the Hopper rule takes */
    ir_workload_t *w = hop ? tu_load_sets("matmul_f16", "M=256,N=256,K=256")
                           : tu_load_sets(workloads[wi].name, workloads[wi].sets);
    for (size_t ti = 0; ti < TN_ARRAY_LEN(gpu); ti++) {
      tn_target_t t = target(gpu[ti]);
      if (ti == 3) t.max_shared_memory_per_block = 4096;
      smp_space_t sp = generate(w->func, &t, 7);
      for (int i = 0; i < sp.n; i++)
        for (int n = 0; n < 6; n++) {
          char what[256];
          snprintf(what, sizeof what, "%s on %s, space %d (%s), sample %d", hop ? "matmul_f16 256" : workloads[wi].name,
                   gpu[ti], i, sp.descs[i], n);
          sch_t *s = NULL;
          tn_err_t err = {0};
          if (smp_sample(w->func, &t, sp.traces[i], 500 + (uint64_t)n, &s, NULL, &err) != TN_OK) continue;
          cg_module_t *m = check_lowers(&t, s, what);
          check_plan(&t, s, m, what);
          checked++;
          for (int k = 0; k < m->nkernels; k++) dynamic += m->kernels[k].dyn_shared_bytes > 0;
          cg_module_free(m);
          sch_free(s);
        }
      smp_space_free(&sp);
    }
    ir_workload_free(w);
  }
  printf("test_plan_matches_codegen: %d candidates, %d kernels with dynamic shared memory\n", checked, dynamic);
  ck_assert_int_ge(checked, 200);
  ck_assert_int_ge(dynamic, 20);
}
END_TEST

/* Issue 31's example: matmul_f16 at 4096^3 on the H100, B transposed by a
 * kernel before, two consumer warpgroups and a TMA producer (384 threads,
 * 168 registers each at launch: 64,512 in the pool).  The split of traces
 * from before (96 / 208) needs 65,536 and is refused; the annotated
 * register file gives CUTLASS's 40 / 232, which meet the pool exactly. */
START_TEST(test_plan_register_pool) {
  tn_target_t h100 = target("nvidia/h100");
  ir_hopper_gemm_t g = {.warpgroups = 2, .m_frags = 1, .n_tile = 256, .stages = 4, .group = 8, .producer = 1,
                        .tma = 1, .ctas = 132, .cluster = 1, .reg_file = h100.max_registers_per_block};
  ir_hopper_regs_t r;
  ir_hopper_gemm_reg_plan(&g, true, &r);
  ck_assert_int_eq(r.launch, 168);
  ck_assert_int_eq(r.pool, 64512);
  ck_assert_int_eq(r.producer, 40);
  ck_assert_int_eq(r.consumer, 232);
  ck_assert_int_eq(r.need, 64512);
  ir_hopper_gemm_reg_plan(&g, false, &r); /* a copying producer keeps 96 */
  ck_assert(r.producer == 96 && r.consumer == 200 && r.need == 128 * (96 + 2 * 200) && r.need <= r.pool);
  g.warpgroups = 1; /* 256 threads: 248 at launch, 152 / 240 as before */
  ir_hopper_gemm_reg_plan(&g, true, &r);
  ck_assert(r.launch == 248 && r.producer == 152 && r.consumer == 240 && r.need <= r.pool);
  g.warpgroups = 2, g.reg_file = 0; /* before: the fixed split */
  ir_hopper_gemm_reg_plan(&g, true, &r);
  ck_assert(r.fixed && r.producer == 96 && r.consumer == 208 && r.need == 65536);
}
END_TEST

/* Sampled Hopper GEMMs (issue 31): none is refused for its register plan,
 * every one that passes has a plan the pool meets; with the split of traces
 * from before, the producer candidates with two consumer warpgroups would
 * not (counted). */
START_TEST(test_plan_hopper_samples) {
  tn_target_t h100 = target("nvidia/h100");
  ir_workload_t *w = tu_load_sets("matmul_f16", "M=4096,N=4096,K=4096");
  smp_space_t sp = generate(w->func, &h100, 1);
  int hopper = 0, producers = 0, before = 0, refused = 0;
  for (int i = 0; i < sp.n; i++) {
    if (!strstr(sp.descs[i], "multi-level-tiling-hopper(")) continue;
    for (int n = 0; n < 150; n++) {
      sch_t *s = NULL;
      smp_stage_t st;
      tn_err_t err = {0};
      if (smp_sample(w->func, &h100, sp.traces[i], 9000 + (uint64_t)n, &s, &st, &err) != TN_OK) {
        ck_assert_msg(!strstr(err.msg, "register plan"), "space %d, sample %d: %s", i, n, err.msg);
        refused++;
        continue;
      }
      ir_plan_t p;
      ck_assert_msg(ir_plan_build(sch_func(s), &h100, &p, &err) == TN_OK, "%s", err.msg);
      for (int k = 0; k < p.n; k++) {
        if (!p.k[k].hopper) continue;
        hopper++;
        ck_assert_msg(ir_plan_regs_ok(&p.k[k], err.msg, sizeof err.msg), "%s", err.msg);
        if (!p.k[k].gemm.producer) continue;
        producers++;
        ir_hopper_gemm_t old = p.k[k].gemm;
        old.reg_file = 0;
        ir_hopper_regs_t r;
        ir_hopper_gemm_reg_plan(&old, p.k[k].tma_maps == 2, &r);
        before += r.need > p.k[k].reg_pool;
      }
      ir_plan_free(&p);
      sch_free(s);
    }
  }
  printf("test_plan_hopper_samples: %d Hopper candidates, %d with a producer; %d of them unmeetable with the split "
         "of before, 0 now; %d refused for other limits\n", hopper, producers, before, refused);
  ck_assert_int_ge(producers, 50);
  ck_assert_int_ge(before, 10);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

/* The cuda-host harness models the CTA's register pool (issue 31): a
 * sampled matmul_f16 with two consumer warpgroups and a producer whose
 * threads copy (setmaxnreg 96 / 200: 63,488 of the 64,512 the CTA holds)
 * runs and verifies on cuda-host/hopper; the same kernel with the split of
 * before (96 / 208: 65,536) stops with the deadlock, not a no-op. */
START_TEST(test_plan_harness_deadlock) {
  tn_target_t h100 = target("nvidia/h100"), host = target("cuda-host/hopper");
  ir_workload_t *w = tu_load_sets("matmul_f16", "M=128,N=128,K=128");
  smp_space_t sp = generate(w->func, &h100, 1);
  cg_module_t *m = NULL;
  char what[256] = "";
  for (int i = 0; i < sp.n && !m; i++) {
    if (!strstr(sp.descs[i], "multi-level-tiling-hopper(")) continue;
    for (int n = 0; n < 200 && !m; n++) {
      sch_t *s = NULL;
      tn_err_t err = {0};
      if (smp_sample(w->func, &h100, sp.traces[i], 3000 + (uint64_t)n, &s, NULL, &err) != TN_OK) continue;
      snprintf(what, sizeof what, "space %d, sample %d", i, n);
      cg_module_t *c = check_lowers(&h100, s, what);
      if (strstr(c->source, "tuned_setmaxnreg_dec<96>") && strstr(c->source, "tuned_setmaxnreg_inc<200>")) m = c;
      else cg_module_free(c);
      sch_free(s);
    }
  }
  ck_assert_msg(m, "no candidate with two consumer warpgroups and a copying producer");
  cg_module_t *mods[1] = {m};
  char whats[1][256];
  snprintf(whats[0], sizeof whats[0], "%s", what);
  hopper_run_all(w->func, &host, mods, 1, whats);
  hopper_mutant(w->func, &host, m, "tuned_setmaxnreg_inc<200>", "tuned_setmaxnreg_inc<208>",
                "deadlock: setmaxnreg.inc to 208 in warpgroup ", NULL);
  cg_module_free(m);
  smp_space_free(&sp);
  ir_workload_free(w);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("sampler");
  TCase *spaces = tcase_create("spaces");
  tcase_add_test(spaces, test_space_counts);
  tcase_add_test(spaces, test_space_cap_said);
  tcase_add_test(spaces, test_gpu_matmul_space);
  tcase_add_test(spaces, test_tensor_core_space);
  tcase_add_test(spaces, test_tf32_space);
  tcase_add_test(spaces, test_cpu_matmul_space);
  tcase_add_test(spaces, test_rule_fingerprints);
  suite_add_tcase(s, spaces);
  TCase *samples = tcase_create("samples");
  tcase_set_timeout(samples, 120);
  tcase_add_loop_test(samples, test_samples, 0, (int)TN_ARRAY_LEN(workloads));
  tcase_add_test(samples, test_determinism);
  TCase *hopper = tcase_create("hopper");
  tcase_set_timeout(hopper, 900);
  tcase_add_test(hopper, test_hopper_space);
  tcase_add_test(hopper, test_hopper_conv);
  tcase_add_test(hopper, test_hopper_unfused);
  suite_add_tcase(s, hopper);
  TCase *clusters = tcase_create("hopper-clusters");
  tcase_set_timeout(clusters, 900);
  tcase_add_test(clusters, test_hopper_clusters);
  suite_add_tcase(s, clusters);
  suite_add_tcase(s, samples);
  TCase *tcs = tcase_create("tensor_core_suite");
  tcase_set_timeout(tcs, 600);
  tcase_add_loop_test(tcs, test_tensor_core_suite, 0, (int)TN_ARRAY_LEN(tc_cases));
  suite_add_tcase(s, tcs);
  TCase *gemm = tcase_create("gemm_like");
  tcase_set_timeout(gemm, 300);
  tcase_add_loop_test(gemm, test_cpu_gemm_like, 0, (int)TN_ARRAY_LEN(gemm_cases));
  suite_add_tcase(s, gemm);
  TCase *hoist = tcase_create("hoisted");
  tcase_set_timeout(hoist, 120);
  tcase_add_test(hoist, test_hoisted_packing);
  suite_add_tcase(s, hoist);
  TCase *pp = tcase_create("postprocessors");
  tcase_add_test(pp, test_cooperative_fetch);
  tcase_add_test(pp, test_verify_rejects);
  tcase_add_test(pp, test_unbound_and_empty);
  tcase_add_test(pp, test_cpu_rewrites);
  suite_add_tcase(s, pp);
  TCase *plan = tcase_create("plan");
  tcase_set_timeout(plan, 300);
  tcase_add_test(plan, test_plan_matches_codegen);
  tcase_add_test(plan, test_plan_register_pool);
  tcase_add_test(plan, test_plan_hopper_samples);
  tcase_add_test(plan, test_plan_harness_deadlock);
  suite_add_tcase(s, plan);
  TCase *mut = tcase_create("mutators");
  tcase_set_timeout(mut, 120);
  tcase_add_test(mut, test_mutators);
  tcase_add_test(mut, test_mutate_huge_extent);
  tcase_add_test(mut, test_mutate_dispatch);
  tcase_add_test(mut, test_mutate_determinism);
  suite_add_tcase(s, mut);
  return s;
}

TN_TEST_MAIN(make_suite)
