/* test_tensorize.c — tensor intrinsics (ir/intrin.h), blockize and tensorize
 * (schedule/blockize.c) and the CPU rule and postprocessor that use them
 * (sampler/rules_intrin.c): the registry's descriptions, the blockized IR
 * and its evaluation, what the match binds (strides, tail counts), every
 * refusal with its message, trace replay, and the design space.  Running the
 * generated kernels is the codegen suite's test_c_tensor_intrinsics. */
#include <stdio.h>
#include <string.h>

#include "ir/intrin.h"
#include "sampler/sampler.h"
#include "schedule/sch_internal.h"
#include "testir.h"
#include "wmma_sched.h"

/* call fails (< 0) and the error e says text. */
#define REFUSES(call, text)                          \
  do {                                               \
    ck_assert_int_lt((call), 0);                     \
    ck_assert_msg(strstr(e.msg, text), "%s", e.msg); \
  } while (0)

#define OK(call)                                                     \
  do {                                                               \
    tn_err_t e_ = {0};                                               \
    tn_err_t *err = &e_;                                             \
    ck_assert_msg((call) == 0, "%s: %s", #call, e_.msg);             \
  } while (0)

static const char *const six16 = "f32_fma_6x16_avx2";

/* matmul (M, N, K) with i split by mr, j by nr, k by kc, in the order
 * j0 i0 k0 | k1 i1 j1; *k1 gets the loop to tensorize. */
static sch_t *tiled(ir_workload_t *w, int mr, int nr, int kc, bool decompose, sch_rv_t *k1) {
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b, l[3], ip[2], jp[2], kp[2], init;
  int nl = 0;
  OK(sch_get_block(s, "C", &b, err));
  OK(sch_get_loops(s, b, l, &nl, err));
  sch_arg_t fi[2] = {sch_arg_none(), sch_arg_int(mr)}, fj[2] = {sch_arg_none(), sch_arg_int(nr)},
            fk[2] = {sch_arg_none(), sch_arg_int(kc)};
  OK(sch_split(s, l[0], fi, 2, ip, err));
  OK(sch_split(s, l[1], fj, 2, jp, err));
  OK(sch_split(s, l[2], fk, 2, kp, err));
  sch_rv_t order[6] = {jp[0], ip[0], kp[0], kp[1], ip[1], jp[1]};
  OK(sch_reorder(s, order, 6, err));
  if (decompose) OK(sch_decompose_reduction(s, b, kp[0], &init, err));
  *k1 = kp[1];
  return s;
}

/* s's trace, written as JSON, holds `needle` and replays on w to the same function. */
static void assert_replays(const ir_workload_t *w, const sch_t *s, const char *needle) {
  char *json = sch_trace_to_json(sch_get_trace(s));
  ck_assert_msg(strstr(json, needle), "%s", json);
  sch_trace_t *t = NULL;
  sch_t *r = NULL;
  tn_err_t e = {0};
  ck_assert_msg(sch_trace_from_json(json, strlen(json), &t, &e) == 0, "%s", e.msg);
  ck_assert_msg(sch_replay(w->func, t, 1, &r, &e) == 0, "%s", e.msg);
  ck_assert(tu_same_hash(sch_func(r), sch_func(s)));
  sch_free(r);
  sch_trace_free(t);
  free(json);
}

START_TEST(t_registry) {
  ck_assert_int_ge(ir_intrin_count(), 4);
  for (int i = 0; i < ir_intrin_count(); i++) {
    const ir_intrin_t *in = ir_intrin_at(i);
    ck_assert_ptr_eq(ir_intrin_find(in->name), in);
    ir_workload_t *w = NULL;
    tn_err_t err = {0};
    ck_assert_msg(ir_intrin_desc(in, &w, &err) == 0, "%s: %s", in->name, err.msg);
    ck_assert_int_eq(w->func->nparams, in->kind == IR_INTRIN_WMMA_FILL ? 1 : in->kind == IR_INTRIN_WMMA_STORE ? 2 : 3);
    if (ir_intrin_is_wmma(in)) { /* tensor cores: sm_70 (Volta) for float16, sm_80 (Ampere) for bf16 and tf32 */
      ck_assert_int_eq(in->sm, in->in_dtype == IR_FLOAT16 || in->kind != IR_INTRIN_WMMA_MMA ? 70 : 80);
      ck_assert(!ir_intrin_host_supports(in));
      ck_assert_int_eq(w->func->params[w->func->nparams - 1]->dtype, IR_FLOAT32);
      ir_workload_free(w);
      continue;
    }
    /* register budget: MR * NR / lanes accumulators + NR / lanes + 1 <= 16 ymm (AVX2) or 32 zmm */
    ck_assert_int_le(in->mr * in->nr / in->lanes + in->nr / in->lanes + 1, in->lanes == 16 ? 32 : 16);
    ir_workload_free(w);
  }
  const char *wmma[] = {"wmma_f16_f32_16x16x16", "wmma_bf16_f32_16x16x16", "wmma_tf32_f32_16x16x8", "wmma_fill_f32_16x16",
                        "wmma_store_f32_16x16"};
  for (size_t i = 0; i < TN_ARRAY_LEN(wmma); i++) ck_assert_msg(ir_intrin_find(wmma[i]) != NULL, "%s", wmma[i]);
  ck_assert_int_eq(ir_intrin_find("wmma_tf32_f32_16x16x8")->fk, 8);
  ck_assert_ptr_null(ir_intrin_find("f32_fma_5x5_avx2"));
  ck_assert_ptr_null(ir_intrin_at(-1));
}
END_TEST

START_TEST(t_blockize) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 30}, {"N", 32}, {"K", 24});
  sch_rv_t k1, ob;
  sch_t *s = tiled(w, 6, 16, 8, true, &k1);
  OK(sch_blockize(s, k1, &ob, err));
  const ir_block_t *o = &sch_rv_stmt(s, ob)->u.block;
  ck_assert_str_eq(o->name, "C_update_o");
  ck_assert_int_eq(o->niters, 3);
  /* outer iterators: the tile's origin divided by the tile */
  ck_assert_int_eq(o->iters[0].extent, 5);
  ck_assert_int_eq(o->iters[1].extent, 2);
  ck_assert_int_eq(o->iters[2].extent, 3);
  ck_assert_int_eq(o->iters[2].kind, IR_ITER_REDUCE);
  char *txt = tu_ir_text(sch_func(s));
  ck_assert_msg(strstr(txt, "with T.block(\"C_update_o\"):"), "%s", txt);
  /* regions: the whole tile of each operand */
  ck_assert_msg(strstr(txt, "T.reads(C[v_i_o * 6:v_i_o * 6 + 6, v_j_o * 16:v_j_o * 16 + 16], "
                            "A[v_i_o * 6:v_i_o * 6 + 6, v_k_o * 8:v_k_o * 8 + 8]"),
                "%s", txt);
  free(txt);
  tu_assert_same_outputs(w->func, sch_func(s), 3);
  assert_replays(w, s, "[\"Blockize\", [\"l");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_match) {
  /* M = 61, N = 37: tails in i and j (predicate), k = 29 by 8: tail in k */
  ir_workload_t *w = TU_LOAD("matmul", {"M", 61}, {"N", 37}, {"K", 29});
  sch_rv_t k1, ob;
  sch_t *s = tiled(w, 6, 16, 8, true, &k1);
  OK(sch_blockize(s, k1, &ob, err));
  ir_func_t *f = ir_func_copy(sch_func(s));
  ir_block_t *o = sch_find_block(f, (int)sch_rv_value(s, ob));
  ir_intrin_match_t m;
  tn_err_t err = {0};
  ck_assert_msg(ir_intrin_match(f, o, ir_intrin_find(six16), &m, &err) == 0, "%s", err.msg);
  /* i j, then the reduction's levels k3 k2 k1 k: the one k loop plays the innermost */
  ck_assert_int_eq(m.niters, 6);
  ck_assert_str_eq(m.iter_name[0], "i");
  ck_assert_str_eq(m.iter_name[2], "k3");
  ck_assert_str_eq(m.iter_name[5], "k");
  ck_assert_int_eq(m.extent[0], 6);
  ck_assert_int_eq(m.extent[1], 16);
  for (int t = 2; t < 5; t++) ck_assert_msg(m.extent[t] == 1 && !m.loop[t], "level %s is unused", m.iter_name[t]);
  ck_assert_int_eq(m.extent[5], 8);
  ck_assert_int_eq(m.noperands, 3);
  ck_assert_str_eq(m.op[0].name, "A");
  ck_assert_int_eq(m.op[0].stride[0], 29); /* A[i, k]: rows of K */
  ck_assert_int_eq(m.op[0].stride[5], 1);
  ck_assert_int_eq(m.op[1].stride[5], 37); /* B[k, j] */
  ck_assert_int_eq(m.op[1].stride[1], 1);
  ck_assert_int_eq(m.op[2].stride[0], 37); /* C[i, j] */
  ck_assert(m.op[2].output);
  for (int t = 0; t < 6; t++)
    if (m.loop[t]) ck_assert_msg(m.count[t] != NULL, "iterator %d has a tail", t);
  ck_assert_ptr_null(m.guard);
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_expr(m.count[0], &b);
  ck_assert_msg(strstr(tn_buf_str(&b), "61"), "count of i: %s", tn_buf_str(&b));
  tn_buf_free(&b);
  ir_func_free(f);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* tensorize(loop, intrin) fails with `needle`, leaving function and trace as they were. */
static void expect_refused(sch_t *s, sch_rv_t loop, const char *intrin, const char *needle) {
  char h[TN_ID_SIZE];
  ir_func_hash(sch_func(s), h);
  int n = sch_get_trace(s)->n;
  tn_err_t err = {0};
  ck_assert_int_lt(sch_tensorize(s, loop, intrin, &err), 0);
  ck_assert_msg(strstr(err.msg, needle), "expected \"%s\" in: %s", needle, err.msg);
  ck_assert(tu_hash_is(sch_func(s), h));
  ck_assert_int_eq(sch_get_trace(s)->n, n);
}

START_TEST(t_refusals) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 24}, {"N", 32}, {"K", 16});
  sch_rv_t k1;
  sch_t *s = tiled(w, 6, 16, 8, false, &k1);
  expect_refused(s, k1, six16, "still has its init (decompose the reduction first)");
  expect_refused(s, k1, "f32_fma_7x7_avx2", "no tensor intrinsic named \"f32_fma_7x7_avx2\" (intrinsics: f32_fma_12x32_avx512, ");
  sch_free(s);
  s = tiled(w, 6, 16, 8, true, &k1);
  expect_refused(s, k1, "f32_fma_4x16_avx2", "needs iterator i of extent 4, the loop i_1 has 6");
  sch_free(s);
  s = tiled(w, 4, 32, 8, true, &k1);
  expect_refused(s, k1, "f32_fma_4x16_avx2", "needs iterator j of extent 16, the loop j_1 has 32");
  sch_free(s);
  ir_workload_free(w);
  /* B transposed: its j stride is K */
  w = TU_LOAD("matmul_bt", {"M", 24}, {"N", 32}, {"K", 16});
  s = tiled(w, 6, 16, 8, true, &k1);
  expect_refused(s, k1, six16, "needs B (B) contiguous along j, its stride is 16");
  sch_free(s);
  ir_workload_free(w);
  /* not a multiply-add */
  w = tu_parse("param M = 12, N = 16, K = 8\ninput A: float32[M, K]\ninput B: float32[K, N]\n"
               "output C: float32[M, N]\nC[i, j] = sum(k < K: A[i, k] + B[k, j])\n");
  s = tiled(w, 6, 16, 8, true, &k1);
  expect_refused(s, k1, six16, "does not compute what intrinsic f32_fma_6x16_avx2 does");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_tensorize_replays) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 13}, {"N", 40}, {"K", 16});
  sch_rv_t k1;
  sch_t *s = tiled(w, 6, 16, 8, true, &k1);
  OK(sch_tensorize(s, k1, six16, err));
  char *txt = tu_ir_text(sch_func(s));
  ck_assert_msg(strstr(txt, "T.block_attr({\"tensorize\": \"f32_fma_6x16_avx2\"})"), "%s", txt);
  free(txt);
  tu_assert_same_outputs(w->func, sch_func(s), 5);
  assert_replays(w, s, "[\"Tensorize\", [\"l");
  assert_replays(w, s, "[\"f32_fma_6x16_avx2\"]");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* s's IR holds `text`, computes what w's does, and its trace (holding
 * `inst`) replays; frees both. */
static void assert_layout_done(ir_workload_t *w, sch_t *s, const char *text, uint64_t seed, const char *inst) {
  char *txt = tu_ir_text(sch_func(s));
  ck_assert_msg(strstr(txt, text), "%s", txt);
  free(txt);
  tu_assert_same_outputs(w->func, sch_func(s), seed);
  assert_replays(w, s, inst);
  sch_free(s);
  ir_workload_free(w);
}

START_TEST(t_storage_align) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 24}, {"N", 32}, {"K", 16});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b, cache;
  OK(sch_get_block(s, "C", &b, err));
  tn_err_t e = {0};
  REFUSES(sch_storage_align(s, b, 0, 0, 64, 16, &e), "buffer C is a parameter");
  OK(sch_cache_read(s, b, 1, "local", &cache, err));
  REFUSES(sch_storage_align(s, cache, 0, 1, 64, 16, &e), "axis 1 has no stride to pad (0 .. 0)");
  REFUSES(sch_storage_align(s, cache, 0, 0, 16, 16, &e), "0 <= offset < factor");
  REFUSES(sch_storage_align(s, cache, 1, 0, 64, 16, &e), "no write buffer 1");
  OK(sch_storage_align(s, cache, 0, 0, 64, 16, err));
  /* the IR's indices are unchanged */
  assert_layout_done(w, s, "T.block_attr({\"storage_align\": \"0:64:16\"})", 2, "[\"StorageAlign\", [\"b");
}
END_TEST

START_TEST(t_transform_layout) {
  ir_workload_t *w = TU_LOAD("matmul_bt", {"M", 12}, {"N", 20}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b, cache;
  OK(sch_get_block(s, "C", &b, err));
  tn_err_t e = {0};
  int perm[2] = {1, 0}, bad[2] = {1, 1};
  REFUSES(sch_transform_layout(s, b, 0, true, perm, 2, &e), "buffer C is a parameter");
  OK(sch_cache_read(s, b, 1, "local", &cache, err));
  REFUSES(sch_transform_layout(s, cache, 0, true, bad, 2, &e), "must be a permutation of 0 .. 1");
  REFUSES(sch_transform_layout(s, cache, 0, true, perm, 1, &e), "has 2 dimensions; the permutation has 1");
  ck_assert_int_lt(sch_transform_layout(s, cache, 0, false, perm, 2, &e), 0);
  ck_assert_msg(strstr(e.msg, "reads 1 buffers; no read buffer 0") || strstr(e.msg, "buffer B is a parameter"), "%s",
                e.msg);
  OK(sch_transform_layout(s, cache, 0, true, perm, 2, err));
  char *txt = tu_ir_text(sch_func(s));
  /* B_local is [K, N] now: stored as B_local[k, j], read by C as B_local[v_k, v_j] */
  ck_assert_msg(strstr(txt, "B_local = T.alloc_buffer((8, 20)"), "%s", txt);
  free(txt);
  assert_layout_done(w, s, "B_local[v_k, v_j]", 4, "[\"TransformLayout\", [\"b");
}
END_TEST

/* hoist_packing: only a copy of a const input, alone at the root, is
 * hoisted; the IR computes the same and the trace replays. */
START_TEST(t_hoist_packing) {
  char text[512];
  const char *fmt = "param M = 12, N = 20, K = 8\ninput A: float32[M, K]\ninput B: float32[N, K]%s\n"
                    "output C: float32[M, N]\nC[i, j] = sum(k < K: A[i, k] * B[j, k])\n";
  tn_err_t e = {0};
  for (int konst = 0; konst < 2; konst++) {
    snprintf(text, sizeof text, fmt, konst ? " const" : "");
    ir_workload_t *w = tu_parse(text);
    sch_t *s = sch_create(w->func, 1);
    sch_rv_t b, cache, acache, loops[3];
    int nl = 0;
    OK(sch_get_block(s, "C", &b, err));
    REFUSES(sch_hoist_packing(s, b, &e), "block \"C\" is not a packing copy");
    OK(sch_cache_read(s, b, 0, "local", &acache, err));
    REFUSES(sch_hoist_packing(s, acache, &e), "packs A, which is not a constant input");
    OK(sch_cache_read(s, b, 1, "local", &cache, err));
    if (!konst) {
      REFUSES(sch_hoist_packing(s, cache, &e), "packs B, which is not a constant input: only an input declared `const`");
      sch_free(s);
      ir_workload_free(w);
      continue;
    }
    int perm[2] = {1, 0};
    OK(sch_transform_layout(s, cache, 0, true, perm, 2, err));
    OK(sch_storage_align(s, cache, 0, 0, 64, 16, err));
    /* under C's loops it is not work that can run before the kernel */
    sch_t *under = sch_create(w->func, 1);
    sch_rv_t ub, ucache;
    OK(sch_get_block(under, "C", &ub, err));
    OK(sch_cache_read(under, ub, 1, "local", &ucache, err));
    OK(sch_get_loops(under, ub, loops, &nl, err));
    OK(sch_compute_at(under, ucache, loops[0], true, err));
    REFUSES(sch_hoist_packing(under, ucache, &e), "block \"B_local\" is not in a loop nest of its own at the root");
    sch_free(under);
    OK(sch_hoist_packing(s, cache, err));
    assert_layout_done(w, s, "\"hoist_packing\": \"B\"", 3, "[\"HoistPacking\", [\"b");
  }
}
END_TEST

static tn_target_t cpu_target(void) {
  tn_target_t t;
  tn_err_t err = {0};
  ck_assert_msg(tn_target_lookup("cpu", NULL, &t, &err) == TN_OK, "%s", err.msg);
  t.num_cores = 8;
  return t;
}

START_TEST(t_design_space) {
  if (!ir_intrin_host_supports(ir_intrin_find(six16))) {
    fprintf(stderr, "t_design_space: skipped, this CPU has no AVX2+FMA\n");
    return;
  }
  tn_target_t t = cpu_target();
  tn_err_t err = {0};
  /* 1026 = 171 * 6: 6x16 and 4x24 fit (4x24 pads j to 1032, 0.6 %); with
   * AVX-512, 12x32 (i padded to 1032) and 6x64 come first */
  bool avx512 = ir_intrin_host_supports(ir_intrin_find("f32_fma_12x32_avx512"));
  const char *first = avx512 ? "f32_fma_12x32_avx512" : six16, *second = avx512 ? "f32_fma_6x64_avx512" : "f32_fma_4x24_avx2";
  char want[6][128];
  for (int i = 0; i < 2; i++) {
    const char *in = i ? second : first;
    snprintf(want[3 * i], sizeof want[0], "multi-level-tiling-with-intrinsic(C: %s)", in);
    snprintf(want[3 * i + 1], sizeof want[0], "multi-level-tiling-with-intrinsic(C: %s, B packed under k0)", in);
    snprintf(want[3 * i + 2], sizeof want[0], "multi-level-tiling-with-intrinsic(C: %s, A and B packed under k0)", in);
  }
  ir_workload_t *w = TU_LOAD("matmul", {"M", 1026}, {"N", 1024}, {"K", 64});
  smp_space_t sp;
  ck_assert_msg(smp_generate(w->func, &t, 1, &sp, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(sp.n, 6); /* per intrinsic: as they are, B packed, A and B packed */
  for (int i = 0; i < 6; i++) ck_assert_msg(strstr(sp.descs[i], want[i]), "space %d: %s (want %s)", i, sp.descs[i], want[i]);
  for (int i = 0; i < sp.n; i++)
    for (uint64_t seed = 1; seed <= 3; seed++) {
      sch_t *s = NULL;
      ck_assert_msg(smp_sample(w->func, &t, sp.traces[i], seed, &s, NULL, &err) == 0, "%s", err.msg);
      ir_block_t **all;
      int n = ir_blocks(sch_func(s), &all), marked = 0;
      for (int b = 0; b < n; b++) {
        const ir_annot_t *a = ir_annot_get(all[b]->annots, all[b]->nannots, IR_ANN_TENSORIZE);
        marked += a != NULL;
        ck_assert_ptr_null(ir_annot_get(all[b]->annots, all[b]->nannots, SMP_ANN_AUTO_TENSORIZE));
      }
      free(all);
      ck_assert_int_eq(marked, 1);
      sch_free(s);
    }
  smp_space_free(&sp);
  ir_workload_free(w);
  /* 3 x 1024: no register tile within a quarter of padding, the least
   * padding ones (4 rows: a third) beside the plain tiling; a row of a
   * dense layer (2 rows: twice the work at best): the plain tiling alone */
  const struct {
    const char *name, *sets;
    bool intrin;
  } cases[] = {{"matmul", "M=3", true}, {"dense_bias_relu", "IN=64,OUT=32", false}};
  for (size_t c = 0; c < TN_ARRAY_LEN(cases); c++) {
    w = tu_load_sets(cases[c].name, cases[c].sets);
    ck_assert_msg(smp_generate(w->func, &t, 1, &sp, &err) == 0, "%s", err.msg);
    int with = 0, plain = 0;
    for (int i = 0; i < sp.n; i++) {
      with += strstr(sp.descs[i], "with-intrinsic") != NULL;
      plain += strstr(sp.descs[i], "multi-level-tiling(") != NULL;
    }
    ck_assert_msg(plain >= 1 && (with > 0) == cases[c].intrin, "%s %s: %d intrinsic spaces, %d plain of %d",
                  cases[c].name, cases[c].sets, with, plain, sp.n);
    smp_space_free(&sp);
    ir_workload_free(w);
  }
}
END_TEST

/* The tensor-core intrinsics on a tiled matmul_f16 (wmma_sched.h): each of
 * fill, mma and store matches its nest, the IR still computes the matmul,
 * the trace replays. */
START_TEST(t_wmma_tensorize) {
  ir_workload_t *w = TU_LOAD("matmul_f16", {"M", 64}, {"N", 64}, {"K", 32});
  sch_t *s = ws_tensorized(w->func, "Acc", "C", "wmma_f16_f32_16x16x16", 16);
  char *txt = tu_ir_text(sch_func(s));
  ck_assert_msg(strstr(txt, "T.block_attr({\"tensorize\": \"wmma_fill_f32_16x16\"})"), "%s", txt);
  ck_assert_msg(strstr(txt, "T.block_attr({\"tensorize\": \"wmma_f16_f32_16x16x16\"})"), "%s", txt);
  ck_assert_msg(strstr(txt, "T.block_attr({\"tensorize\": \"wmma_store_f32_16x16\"})"), "%s", txt);
  free(txt);
  /* what the mma binds: A_shared[i, k], B_shared[k, j] (row-major in the IR), Acc_local */
  ir_func_t *f = ir_func_copy(sch_func(s));
  ir_block_t **all;
  int n = ir_blocks(f, &all), seen = 0;
  for (int i = 0; i < n; i++) {
    const ir_annot_t *a = ir_annot_get(all[i]->annots, all[i]->nannots, IR_ANN_TENSORIZE);
    if (!a || strcmp(a->sval, "wmma_f16_f32_16x16x16")) continue;
    ir_intrin_match_t m;
    tn_err_t err = {0};
    ck_assert_msg(ir_intrin_match(f, all[i], ir_intrin_find(a->sval), &m, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(m.op[0].buf->name, "A_shared");
    ck_assert_int_eq(m.op[0].stride[2], 1);  /* along k */
    ck_assert_int_eq(m.op[1].stride[1], 1);  /* B along j */
    ck_assert_int_eq(m.op[2].buf->scope, IR_SCOPE_LOCAL);
    for (int t = 0; t < 3; t++) ck_assert_int_eq(m.extent[t], 16);
    seen++;
  }
  free(all);
  ck_assert_int_eq(seen, 1);
  ir_func_free(f);
  tu_assert_same_outputs(w->func, sch_func(s), 2);
  assert_replays(w, s, "\"wmma_store_f32_16x16\"");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Nests that are not a wmma's: the shape, the operands' types. */
START_TEST(t_wmma_refusals) {
  ir_workload_t *w = TU_LOAD("matmul_f16", {"M", 64}, {"N", 64}, {"K", 32});
  wmma_sched_t ws = ws_schedule(w->func, "Acc", "C", 8); /* k steps of 8 */
  expect_refused(ws.s, ws.update_loop, "wmma_f16_f32_16x16x16", "needs iterator k of extent 16, the loop k_1 has 8");
  expect_refused(ws.s, ws.update_loop, "wmma_bf16_f32_16x16x16", "does not compute what intrinsic wmma_bf16_f32_16x16x16 does");
  expect_refused(ws.s, ws.update_loop, "wmma_tf32_f32_16x16x8", "does not compute what intrinsic wmma_tf32_f32_16x16x8 does");
  expect_refused(ws.s, ws.init_loop, "wmma_store_f32_16x16", "does not compute what intrinsic wmma_store_f32_16x16 does");
  sch_free(ws.s);
  ir_workload_free(w);
  /* float32 data: only tf32 takes it */
  w = TU_LOAD("matmul", {"M", 64}, {"N", 64}, {"K", 32});
  ws = ws_schedule(w->func, "C", NULL, 16);
  expect_refused(ws.s, ws.update_loop, "wmma_f16_f32_16x16x16", "does not compute what intrinsic wmma_f16_f32_16x16x16 does");
  expect_refused(ws.s, ws.update_loop, "wmma_tf32_f32_16x16x8", "needs iterator k of extent 8, the loop k_1 has 16");
  sch_free(ws.s);
  ir_workload_free(w);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("tensorize");
  TU_TCASE(s, "intrinsics", 60, t_registry, t_blockize, t_match, t_refusals, t_tensorize_replays,
           t_storage_align, t_transform_layout, t_hoist_packing, t_wmma_tensorize, t_wmma_refusals);
  TU_TCASE(s, "space", 120, t_design_space);
  return s;
}

TN_TEST_MAIN(make_suite)
