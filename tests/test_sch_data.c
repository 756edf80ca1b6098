/* test_sch_data.c — the data-movement primitives: cache_read, cache_write,
 * compute_at, reverse_compute_at and SampleComputeLocation, checked through
 * the public API against the evaluator, exact printed text and error paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"
#include "testir.h"

/* ---- fixtures ---------------------------------------------------------- */

typedef struct fx {
  ir_workload_t *w;
  sch_t *s;
  tn_err_t err;
} fx_t;

/* Loads workloads/<name>.tw with "K=V K=V" overrides and schedules it. */
static fx_t fx_open(const char *name, const char *sets) {
  fx_t x = {.w = tu_load_sets(name, sets)};
  x.s = sch_create(x.w->func, 1);
  return x;
}

static void fx_close(fx_t *x) {
  sch_free(x->s);
  ir_workload_free(x->w);
}

/* The scheduled function computes the same outputs as the original. */
static void assert_equivalent(fx_t *x) { tu_assert_same_outputs(x->w->func, sch_func(x->s), 42); }

static void assert_has(fx_t *x, const char *needle) { tu_assert_text_has(x->s, needle); }

static sch_rv_t block(fx_t *x, const char *name) { return tu_block(x->s, name); }

static int loops(fx_t *x, sch_rv_t b, sch_rv_t *out) { return tu_loops(x->s, b, out); }

/* Splits a loop by [None, factor]. */
static void split2(fx_t *x, sch_rv_t l, int64_t factor, sch_rv_t *out) { tu_split2(x->s, l, factor, out); }

#define OK(x, call) ck_assert_msg((call) == 0, "%s", (x)->err.msg)

/* ---- cache_read / cache_write ------------------------------------------ */

static const char *const WINDOW_CACHE_READ =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((43,), \"float32\"), B: T.Buffer((40,), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    with T.block(\"root\"):\n"
    "        A_shared = T.alloc_buffer((43,), \"float32\", scope=\"shared\")\n"
    "        for ax0 in range(43):\n"
    "            with T.block(\"A_shared\"):\n"
    "                v0 = T.axis.spatial(43, ax0)\n"
    "                T.reads(A[v0])\n"
    "                T.writes(A_shared[v0])\n"
    "                A_shared[v0] = A[v0]\n"
    "        for i in range(40):\n"
    "            with T.block(\"B\"):\n"
    "                v_i = T.axis.spatial(40, i)\n"
    "                T.reads(A_shared[v_i:v_i + 3])\n"
    "                T.writes(B[v_i])\n"
    "                B[v_i] = A_shared[v_i] + A_shared[v_i + 1] + A_shared[v_i + 2]\n";

START_TEST(t_cache_read_text) {
  fx_t x = fx_open("window_sum", "N=40");
  sch_rv_t b = block(&x, "B"), c;
  OK(&x, sch_cache_read(x.s, b, 0, "shared", &c, &x.err));
  char *t = tu_ir_text(sch_func(x.s));
  ck_assert_str_eq(t, WINDOW_CACHE_READ);
  free(t);
  /* The output handle names the new block. */
  ck_assert_ptr_eq(sch_rv_stmt(x.s, c), ir_func_find_block(sch_func(x.s), "A_shared"));
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

static const char *const MATMUL_CACHE_WRITE =
    "    with T.block(\"root\"):\n"
    "        C_local = T.alloc_buffer((16, 16), \"float32\", scope=\"local\")\n"
    "        for i, j, k in T.grid(16, 16, 16):\n"
    "            with T.block(\"C\"):\n"
    "                v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
    "                T.reads(A[v_i, v_k], B[v_k, v_j])\n"
    "                T.writes(C_local[v_i, v_j])\n"
    "                with T.init():\n"
    "                    C_local[v_i, v_j] = T.float32(0.0)\n"
    "                C_local[v_i, v_j] = C_local[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n"
    "        for ax0, ax1 in T.grid(16, 16):\n"
    "            with T.block(\"C_local\"):\n"
    "                v0, v1 = T.axis.remap(\"SS\", [ax0, ax1])\n"
    "                T.reads(C_local[v0, v1])\n"
    "                T.writes(C[v0, v1])\n"
    "                C[v0, v1] = C_local[v0, v1]\n";

START_TEST(t_cache_write_text) {
  fx_t x = fx_open("matmul", "M=16 N=16 K=16");
  sch_rv_t c = block(&x, "C"), cl;
  OK(&x, sch_cache_write(x.s, c, 0, "local", &cl, &x.err));
  assert_has(&x, MATMUL_CACHE_WRITE);
  ck_assert_ptr_eq(sch_rv_stmt(x.s, cl), ir_func_find_block(sch_func(x.s), "C_local"));
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* A second cache of the same buffer gets a fresh name. */
START_TEST(t_cache_read_twice) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t e = block(&x, "E"), s = block(&x, "S"), c1, c2;
  OK(&x, sch_cache_read(x.s, e, 0, "shared", &c1, &x.err));
  /* S reads E (index 0) and rsum (index 1); A is also read by rmax. */
  OK(&x, sch_cache_read(x.s, s, 1, "local", &c2, &x.err));
  sch_rv_t rmax = block(&x, "rmax"), c3;
  OK(&x, sch_cache_read(x.s, rmax, 0, "shared", &c3, &x.err));
  assert_has(&x, "A_shared_1 = T.alloc_buffer((4, 8), \"float32\", scope=\"shared\")");
  assert_has(&x, "with T.block(\"A_shared_1\"):");
  assert_has(&x, "T.reads(A_shared_1[v_i, v_j])");
  assert_has(&x, "S[v_i_3, v_j_3] = E[v_i_3, v_j_3] / rsum_local[v_i_3]");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* ---- compute_at -------------------------------------------------------- */

static const char *const WINDOW_COMPUTE_AT =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((43,), \"float32\"), B: T.Buffer((40,), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    with T.block(\"root\"):\n"
    "        A_shared = T.alloc_buffer((43,), \"float32\", scope=\"shared\")\n"
    "        for i_0 in range(5):\n"
    "            for ax0 in range(10):\n"
    "                with T.block(\"A_shared\"):\n"
    "                    v0 = T.axis.spatial(43, i_0 * 8 + ax0)\n"
    "                    T.reads(A[v0])\n"
    "                    T.writes(A_shared[v0])\n"
    "                    A_shared[v0] = A[v0]\n"
    "            for i_1 in range(8):\n"
    "                with T.block(\"B\"):\n"
    "                    v_i = T.axis.spatial(40, i_0 * 8 + i_1)\n"
    "                    T.reads(A_shared[v_i:v_i + 3])\n"
    "                    T.writes(B[v_i])\n"
    "                    B[v_i] = A_shared[v_i] + A_shared[v_i + 1] + A_shared[v_i + 2]\n";

/* window_sum split by [None, 8]: B reads A_shared[i_0*8 .. i_0*8+9]. */
static fx_t window_split(int64_t factor, sch_rv_t *cache, sch_rv_t *outer) {
  fx_t x = fx_open("window_sum", "N=40");
  sch_rv_t b = block(&x, "B"), l[4];
  loops(&x, b, l);
  split2(&x, l[0], factor, outer);
  OK(&x, sch_cache_read(x.s, b, 0, "shared", cache, &x.err));
  return x;
}

START_TEST(t_window_compute_at) {
  sch_rv_t c, io[2];
  fx_t x = window_split(8, &c, io);
  OK(&x, sch_compute_at(x.s, c, io[0], true, &x.err));
  char *t = tu_ir_text(sch_func(x.s));
  ck_assert_str_eq(t, WINDOW_COMPUTE_AT);
  free(t);
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_window_compute_at_inner) {
  sch_rv_t c, io[2];
  fx_t x = window_split(8, &c, io);
  OK(&x, sch_compute_at(x.s, c, io[1], true, &x.err));
  assert_has(&x, "for i_0, i_1 in T.grid(5, 8):\n            for ax0 in range(3):");
  assert_has(&x, "v0 = T.axis.spatial(43, i_0 * 8 + i_1 + ax0)");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* A factor that does not divide: the stage covers 18 elements and a
 * predicate keeps the last tile inside A. */
START_TEST(t_window_compute_at_predicate) {
  sch_rv_t c, io[2];
  fx_t x = window_split(16, &c, io);
  OK(&x, sch_compute_at(x.s, c, io[0], true, &x.err));
  assert_has(&x, "for ax0 in range(18):");
  assert_has(&x, "v0 = T.axis.spatial(43, i_0 * 16 + ax0)\n                    T.where(i_0 * 16 + ax0 < 43)");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* matmul tiled 4x4x4 with (i_0, j_0, k_0, i_1, j_1, k_1). */
static fx_t matmul_tiled(sch_rv_t *c, sch_rv_t tiles[3][2]) {
  fx_t x = fx_open("matmul", "M=16 N=16 K=16");
  *c = block(&x, "C");
  sch_rv_t l[4];
  loops(&x, *c, l);
  for (int i = 0; i < 3; i++) split2(&x, l[i], 4, tiles[i]);
  sch_rv_t order[6] = {tiles[0][0], tiles[1][0], tiles[2][0], tiles[0][1], tiles[1][1], tiles[2][1]};
  OK(&x, sch_reorder(x.s, order, 6, &x.err));
  return x;
}

START_TEST(t_matmul_shared_compute_at) {
  sch_rv_t c, t[3][2], as, bs;
  fx_t x = matmul_tiled(&c, t);
  OK(&x, sch_cache_read(x.s, c, 0, "shared", &as, &x.err));
  OK(&x, sch_cache_read(x.s, c, 1, "shared", &bs, &x.err));
  OK(&x, sch_compute_at(x.s, as, t[2][0], true, &x.err));
  OK(&x, sch_compute_at(x.s, bs, t[2][0], true, &x.err));
  assert_has(&x, "for i_0, j_0, k_0 in T.grid(4, 4, 4):\n            for ax0, ax1 in T.grid(4, 4):\n"
                 "                with T.block(\"A_shared\"):\n"
                 "                    v0 = T.axis.spatial(16, i_0 * 4 + ax0)\n"
                 "                    v1 = T.axis.spatial(16, k_0 * 4 + ax1)\n");
  assert_has(&x, "v0_1 = T.axis.spatial(16, k_0 * 4 + ax0_1)\n"
                 "                    v1_1 = T.axis.spatial(16, j_0 * 4 + ax1_1)\n");
  assert_has(&x, "            for i_1, j_1, k_1 in T.grid(4, 4, 4):\n                with T.block(\"C\"):");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_matmul_cache_write_reverse) {
  sch_rv_t c, t[3][2], cl;
  fx_t x = matmul_tiled(&c, t);
  OK(&x, sch_cache_write(x.s, c, 0, "local", &cl, &x.err));
  OK(&x, sch_reverse_compute_at(x.s, cl, t[1][0], true, &x.err));
  assert_has(&x, "        for i_0, j_0 in T.grid(4, 4):\n            for k_0, i_1, j_1, k_1 in T.grid(4, 4, 4, 4):");
  assert_has(&x, "            for ax0, ax1 in T.grid(4, 4):\n                with T.block(\"C_local\"):\n"
                 "                    v0 = T.axis.spatial(16, i_0 * 4 + ax0)\n"
                 "                    v1 = T.axis.spatial(16, j_0 * 4 + ax1)\n");
  assert_equivalent(&x);
  /* Later stages compose: a shared cache of A at k_0 under the same tile. */
  sch_rv_t as;
  OK(&x, sch_cache_read(x.s, c, 0, "shared", &as, &x.err));
  OK(&x, sch_compute_at(x.s, as, t[2][0], true, &x.err));
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* Fused inner loops: i_1 * 4 + j_1 fused into one loop; the stages still
 * cover one 4-wide tile (A through //, B through %). */
START_TEST(t_matmul_fused_inner) {
  fx_t x = fx_open("matmul", "M=16 N=16 K=16");
  sch_rv_t c = block(&x, "C"), l[4], ti[2], tj[2], fused, as, bs;
  loops(&x, c, l);
  split2(&x, l[0], 4, ti);
  split2(&x, l[1], 4, tj);
  sch_rv_t order[4] = {ti[0], tj[0], ti[1], tj[1]};
  OK(&x, sch_reorder(x.s, order, 4, &x.err));
  sch_rv_t inner[2] = {ti[1], tj[1]};
  OK(&x, sch_fuse(x.s, inner, 2, &fused, &x.err));
  OK(&x, sch_cache_read(x.s, c, 0, "shared", &as, &x.err));
  OK(&x, sch_cache_read(x.s, c, 1, "shared", &bs, &x.err));
  OK(&x, sch_compute_at(x.s, as, tj[0], true, &x.err));
  OK(&x, sch_compute_at(x.s, bs, tj[0], true, &x.err));
  assert_has(&x, "for ax0, ax1 in T.grid(4, 16):\n                with T.block(\"A_shared\"):\n"
                 "                    v0 = T.axis.spatial(16, i_0 * 4 + ax0)\n");
  assert_has(&x, "for ax0_1, ax1_1 in T.grid(16, 4):\n                with T.block(\"B_shared\"):\n"
                 "                    v0_1 = T.axis.spatial(16, ax0_1)\n"
                 "                    v1_1 = T.axis.spatial(16, j_0 * 4 + ax1_1)\n");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* A fused outer loop: the stage is one row of A per i*16 + j. */
START_TEST(t_matmul_fused_outer) {
  fx_t x = fx_open("matmul", "M=16 N=16 K=16");
  sch_rv_t c = block(&x, "C"), l[4], fused, as;
  loops(&x, c, l);
  OK(&x, sch_fuse(x.s, l, 2, &fused, &x.err));
  OK(&x, sch_cache_read(x.s, c, 0, "shared", &as, &x.err));
  OK(&x, sch_compute_at(x.s, as, fused, true, &x.err));
  assert_has(&x, "for ax0, ax1 in T.grid(1, 16):");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* reverse_compute_at under a reduction loop: the copy runs per k_0 step. */
START_TEST(t_matmul_reverse_under_reduce) {
  sch_rv_t c, t[3][2], cl;
  fx_t x = matmul_tiled(&c, t);
  OK(&x, sch_cache_write(x.s, c, 0, "local", &cl, &x.err));
  OK(&x, sch_reverse_compute_at(x.s, cl, t[2][1], true, &x.err));
  assert_has(&x, "for i_0, j_0, k_0, i_1, j_1, k_1 in T.grid(4, 4, 4, 4, 4, 4):");
  assert_has(&x, "for ax0, ax1 in T.grid(1, 1):");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_conv_compute_at) {
  for (int at = 0; at < 7; at++) {
    fx_t x = fx_open("conv2d", "N=1 C=2 H=6 W=6 F=2");
    sch_rv_t xp = block(&x, "Xp"), y = block(&x, "Y"), l[8];
    ck_assert_int_eq(loops(&x, y, l), 7);
    OK(&x, sch_compute_at(x.s, xp, l[at], true, &x.err));
    if (at == 2) {
      assert_has(&x, "for n, f, y in T.grid(1, 2, 6):\n            for ax0, ax1, ax2, ax3 in T.grid(1, 2, 3, 8):");
      assert_has(&x, "v_h = T.axis.spatial(8, y + ax2)\n                    v_w = T.axis.spatial(8, ax3)\n");
    }
    assert_equivalent(&x);
    fx_close(&x);
  }
}
END_TEST

/* A cache of the unpadded input read at h - 1: guards on both sides. */
START_TEST(t_conv_guarded_stage) {
  fx_t x = fx_open("conv2d", "N=1 C=2 H=6 W=6 F=2");
  sch_rv_t xp = block(&x, "Xp"), xs, l[8];
  loops(&x, xp, l);
  OK(&x, sch_cache_read(x.s, xp, 0, "shared", &xs, &x.err));
  OK(&x, sch_compute_at(x.s, xs, l[2], true, &x.err));
  assert_has(&x, "v2 = T.axis.spatial(6, h - 1)");
  assert_has(&x, "T.where(h - 1 >= 0 and h - 1 < 6)");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_softmax_row_stages) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t l[4];
  loops(&x, block(&x, "E"), l);
  OK(&x, sch_compute_at(x.s, block(&x, "rmax"), l[0], true, &x.err));
  loops(&x, block(&x, "S"), l);
  OK(&x, sch_compute_at(x.s, block(&x, "rsum"), l[0], true, &x.err));
  assert_has(&x, "        for i in range(4):\n            for ax0, ax1 in T.grid(1, 8):\n"
                 "                with T.block(\"rmax\"):\n"
                 "                    v_i, v_j = T.axis.remap(\"SR\", [i, ax1])\n");
  assert_has(&x, "        for i_1 in range(4):\n            for ax0_1, ax1_1 in T.grid(1, 8):\n"
                 "                with T.block(\"rsum\"):\n");
  assert_has(&x, "            for j_1 in range(8):\n                with T.block(\"S\"):");
  assert_equivalent(&x);
  /* E's consumers (rsum and S) are now both under the row loop of S. */
  loops(&x, block(&x, "S"), l);
  OK(&x, sch_compute_at(x.s, block(&x, "E"), l[0], true, &x.err));
  assert_has(&x, "        for i, ax0, ax1 in T.grid(4, 1, 8):\n            with T.block(\"rmax\"):");
  assert_has(&x, "with T.block(\"E\"):\n                    v_i_1, v_j_1 = T.axis.remap(\"SS\", [i_1, ax1_1])");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_no_unit_loops) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t l[4];
  loops(&x, block(&x, "E"), l);
  OK(&x, sch_compute_at(x.s, block(&x, "rmax"), l[0], false, &x.err));
  assert_has(&x, "        for i in range(4):\n            for ax1 in range(8):\n"
                 "                with T.block(\"rmax\"):\n");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* ---- SampleComputeLocation --------------------------------------------- */

/* Applies SampleComputeLocation with a fixed decision; returns the value
 * recorded in the trace's decision and the location's uid (or mark). */
static int64_t sample_with(fx_t *x, sch_rv_t b, int64_t decision, int64_t *recorded) {
  sch_arg_t in[1] = {sch_arg_rv(b)};
  sch_inst_t inst = {.kind = SCH_SAMPLE_COMPUTE_LOCATION, .inputs = in, .ninputs = 1};
  sch_rv_t out;
  OK(x, sch_apply(x->s, &inst, &decision, 1, &out, NULL, &x->err));
  const sch_trace_t *t = sch_get_trace(x->s);
  *recorded = t->insts[t->n - 1].decision[0];
  return sch_rv_value(x->s, out);
}

START_TEST(t_sample_location_window) {
  sch_rv_t c, io[2];
  fx_t x = window_split(8, &c, io);
  int64_t rec;
  ck_assert_int_eq(sample_with(&x, c, 0, &rec), sch_rv_value(x.s, io[0]));
  ck_assert_int_eq(rec, 0);
  ck_assert_int_eq(sample_with(&x, c, 1, &rec), sch_rv_value(x.s, io[1]));
  ck_assert_int_eq(sample_with(&x, c, 9, &rec), sch_rv_value(x.s, io[1])); /* stale: nearest smaller */
  ck_assert_int_eq(rec, 1);
  ck_assert_int_eq(sample_with(&x, c, -1, &rec), SCH_LOC_ROOT);
  /* A plain copy can be inlined. */
  ck_assert_int_eq(sample_with(&x, c, -2, &rec), SCH_LOC_INLINE);
  ck_assert_int_eq(rec, -2);
  /* Sampling left the function as it was. */
  char *t = tu_ir_text(sch_func(x.s));
  ck_assert_ptr_nonnull(strstr(t, "for ax0 in range(43):"));
  free(t);
  /* Drawing without a decision gives one of the four locations, and
   * compute_at accepts what was drawn. */
  sch_rv_t loc;
  OK(&x, sch_sample_compute_location(x.s, c, &loc, &x.err));
  int64_t v = sch_rv_value(x.s, loc);
  ck_assert(v == SCH_LOC_INLINE || v == SCH_LOC_ROOT || v == sch_rv_value(x.s, io[0]) || v == sch_rv_value(x.s, io[1]));
  OK(&x, sch_compute_at(x.s, c, loc, true, &x.err));
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* Candidates stop at the first spatial loop after a reduction loop. */
START_TEST(t_sample_location_matmul) {
  sch_rv_t c, t[3][2], as;
  fx_t x = matmul_tiled(&c, t);
  OK(&x, sch_cache_read(x.s, c, 0, "shared", &as, &x.err));
  int64_t rec;
  ck_assert_int_eq(sample_with(&x, as, 0, &rec), sch_rv_value(x.s, t[0][0]));
  ck_assert_int_eq(sample_with(&x, as, 1, &rec), sch_rv_value(x.s, t[1][0]));
  ck_assert_int_eq(sample_with(&x, as, 2, &rec), sch_rv_value(x.s, t[2][0]));
  ck_assert_int_eq(sample_with(&x, as, 3, &rec), sch_rv_value(x.s, t[2][0]));
  ck_assert_int_eq(rec, 2);
  /* C writes the output: no consumer, so root is the only location. */
  ck_assert_int_eq(sample_with(&x, c, 0, &rec), SCH_LOC_ROOT);
  ck_assert_int_eq(rec, -1);
  ck_assert_int_eq(sample_with(&x, c, -2, &rec), SCH_LOC_ROOT);
  fx_close(&x);
}
END_TEST

START_TEST(t_sample_location_softmax) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t rmax = block(&x, "rmax"), l[4];
  loops(&x, block(&x, "E"), l);
  int64_t rec;
  ck_assert_int_eq(sample_with(&x, rmax, 0, &rec), sch_rv_value(x.s, l[0]));
  ck_assert_int_eq(sample_with(&x, rmax, 1, &rec), sch_rv_value(x.s, l[1]));
  /* A reduction cannot be inlined. */
  ck_assert_int_eq(sample_with(&x, rmax, -2, &rec), SCH_LOC_ROOT);
  /* E has two consumers in different nests: only root or inline. */
  ck_assert_int_eq(sample_with(&x, block(&x, "E"), 0, &rec), SCH_LOC_ROOT);
  ck_assert_int_eq(sample_with(&x, block(&x, "E"), -2, &rec), SCH_LOC_INLINE);
  ck_assert_int_eq(rec, -2);
  fx_close(&x);
}
END_TEST

/* ---- errors: message, and the schedule left as it was ------------------ */

typedef int (*fail_fn)(fx_t *x, void *ctx);

/* Runs fn, expects failure with exactly `msg`, and checks that neither the
 * function nor the trace changed. */
static void expect_fail(fx_t *x, fail_fn fn, void *ctx, const char *msg) {
  char *before = tu_ir_text(sch_func(x->s));
  int ninsts = sch_get_trace(x->s)->n;
  ck_assert_int_lt(fn(x, ctx), 0);
  ck_assert_str_eq(x->err.msg, msg);
  char *after = tu_ir_text(sch_func(x->s));
  ck_assert_str_eq(after, before);
  ck_assert_int_eq(sch_get_trace(x->s)->n, ninsts);
  free(before);
  free(after);
}

typedef struct op {
  int kind; /* 0 cache_read, 1 cache_write, 2 compute_at, 3 reverse_compute_at */
  sch_rv_t b, l;
  int index;
} op_t;

static int run_op(fx_t *x, void *ctx) {
  op_t *o = ctx;
  sch_rv_t out;
  switch (o->kind) {
  case 0: return sch_cache_read(x->s, o->b, o->index, "shared", &out, &x->err);
  case 1: return sch_cache_write(x->s, o->b, o->index, "local", &out, &x->err);
  case 2: return sch_compute_at(x->s, o->b, o->l, true, &x->err);
  default: return sch_reverse_compute_at(x->s, o->b, o->l, true, &x->err);
  }
}

START_TEST(t_errors_cache) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t e = block(&x, "E"), rmax = block(&x, "rmax"), l[4];
  expect_fail(&x, run_op, &(op_t){0, e, 0, 2},
              "cache_read: block \"E\" reads 2 buffer(s); read_buffer_index 2 is out of range (valid: 0..1)");
  expect_fail(&x, run_op, &(op_t){1, e, 0, 1},
              "cache_write: block \"E\" writes 1 buffer(s); write_buffer_index 1 is out of range (valid: 0..0)");
  loops(&x, e, l);
  OK(&x, sch_compute_at(x.s, rmax, l[0], true, &x.err));
  expect_fail(&x, run_op, &(op_t){0, e, 0, 1},
              "cache_read: block \"rmax\" in the same loop nest as block \"E\" also writes rmax; the copy block is "
              "placed outside that nest, so rmax must be accessed only by \"E\" there");
  expect_fail(&x, run_op, &(op_t){1, rmax, 0, 0},
              "cache_write: block \"E\" in the same loop nest as block \"rmax\" also reads rmax; the copy block is "
              "placed outside that nest, so rmax must be accessed only by \"rmax\" there");
  fx_close(&x);
}
END_TEST

START_TEST(t_errors_compute_at) {
  fx_t x = fx_open("softmax", "M=4 N=8");
  sch_rv_t rmax = block(&x, "rmax"), e = block(&x, "E"), rsum = block(&x, "rsum"), s = block(&x, "S");
  sch_rv_t lr[2], le[2], ls[2], lm[2];
  loops(&x, rmax, lm);
  loops(&x, e, le);
  loops(&x, rsum, lr);
  loops(&x, s, ls);
  expect_fail(&x, run_op, &(op_t){2, e, le[0], 0}, "compute_at: loop i encloses block \"E\" itself");
  expect_fail(&x, run_op, &(op_t){2, rmax, ls[0], 0},
              "compute_at: block \"rmax\" does not produce any buffer read under loop i");
  expect_fail(&x, run_op, &(op_t){2, e, lr[0], 0},
              "compute_at: block \"S\" reads E, which block \"E\" writes, but is not under loop i; every consumer "
              "must be under the target loop");
  expect_fail(&x, run_op, &(op_t){2, s, lr[0], 0},
              "compute_at: block \"S\" writes the function output S; only blocks writing temporaries can be "
              "computed at a consumer's loop");
  expect_fail(&x, run_op, &(op_t){3, rsum, le[1], 0},
              "reverse_compute_at: block \"rsum\" reduces over v_j, and loop j provides only part of its range at a "
              "time");
  expect_fail(&x, run_op, &(op_t){3, s, le[0], 0},
              "reverse_compute_at: block \"rsum\" writes rsum, which block \"S\" reads, but is neither under loop i "
              "nor in a loop nest before it");
  expect_fail(&x, run_op, &(op_t){3, s, lm[0], 0},
              "reverse_compute_at: block \"S\" does not read any buffer written under loop i");
  /* The legal reverse move still works afterwards: S under rsum's row. */
  OK(&x, sch_reverse_compute_at(x.s, s, lr[0], true, &x.err));
  assert_has(&x, "            for ax0, ax1 in T.grid(1, 8):\n                with T.block(\"S\"):");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_errors_access_shape) {
  sch_rv_t c, io[2], l[2];
  fx_t x = window_split(8, &c, io);
  loops(&x, c, l);
  expect_fail(&x, run_op, &(op_t){3, block(&x, "B"), l[0], 0},
              "reverse_compute_at: block \"B\" reads A_shared with indices that are not one distinct iterator per "
              "dimension; only such accesses can be re-bound to a region");
  fx_close(&x);
}
END_TEST

/* ---- limits and the lookup index ----------------------------------------- */

/* A chain of n elementwise blocks T1 .. T(n-1), B over N = 8. */
static ir_workload_t *chain(int n) {
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "param N = 8\ninput A: float32[N]\noutput B: float32[N]\n");
  for (int i = 1; i < n; i++) tn_buf_printf(&b, "temp T%d: float32[N]\n", i);
  for (int i = 1; i < n; i++) {
    char src[16] = "A";
    if (i > 1) snprintf(src, sizeof src, "T%d", i - 1);
    tn_buf_printf(&b, "T%d[i] = %s[i] * 0.5 + 1.0\n", i, src);
  }
  tn_buf_printf(&b, "B[i] = T%d[i] + 1.0\n", n - 1);
  char *text = tn_buf_take(&b);
  ir_workload_t *w = tu_parse(text);
  free(text);
  return w;
}

/* compute_at in a function of more than 512 blocks (it used to refuse them):
 * the last producer goes under B's outer loop and still computes the same;
 * SampleComputeLocation offers that loop; an illegal placement still names
 * the block and the loop. */
START_TEST(t_compute_at_many_blocks) {
  fx_t x = {.w = chain(600)};
  x.s = sch_create(x.w->func, 1);
  sch_rv_t b = block(&x, "B"), l[2], io[2], t = block(&x, "T599"), loc;
  loops(&x, b, l);
  split2(&x, l[0], 4, io);
  OK(&x, sch_sample_compute_location(x.s, t, &loc, &x.err));
  OK(&x, sch_compute_at(x.s, t, io[0], false, &x.err));
  assert_has(&x, "with T.block(\"T599\")");
  sch_rv_t tl[2];
  ck_assert_int_eq(loops(&x, block(&x, "T599"), tl), 2); /* i_0 and its own 4-wide loop */
  assert_equivalent(&x);
  /* T598 feeds T599, now under i_0, but has a consumer outside no loop of B */
  sch_rv_t t598 = block(&x, "T598"), bl[2];
  loops(&x, block(&x, "T2"), bl);
  ck_assert_int_lt(sch_compute_at(x.s, t598, bl[0], false, &x.err), 0);
  ck_assert_msg(strstr(x.err.msg, "T598") && strstr(x.err.msg, "loop"), "%s", x.err.msg);
  /* an unknown name lists the first blocks and counts the rest */
  sch_rv_t none;
  ck_assert_int_lt(sch_get_block(x.s, "T600", &none, &x.err), 0);
  ck_assert_msg(strstr(x.err.msg, "no block named \"T600\" (601 blocks: root, T1, T2, ") &&
                strstr(x.err.msg, ", T31 and 569 more)"), "%s", x.err.msg);
  fx_close(&x);
}
END_TEST

/* compute_inline keeps the schedule's lookup index current: a consumer
 * that gains reads (B reads T1 once T3 is inlined) is rewritten by the next
 * inline, a sequence left with one statement is unwrapped, and the names of
 * inlined blocks are gone; other primitives in between rebuild the index. */
START_TEST(t_inline_index) {
  static const char *src = "param N = 16\ninput A: float32[N]\noutput B: float32[N]\n"
                           "temp T1: float32[N]\ntemp T2: float32[N]\ntemp T3: float32[N]\n"
                           "T1[i] = A[i] * 2.0\nT2[i] = T1[i] + 1.0\nT3[i] = T1[i] * T2[i]\n"
                           "B[i] = T3[i] + T2[i]\n";
  fx_t x = {.w = tu_parse(src)};
  x.s = sch_create(x.w->func, 1);
  sch_rv_t l[1], io[2];
  loops(&x, block(&x, "B"), l);
  split2(&x, l[0], 4, io);
  OK(&x, sch_compute_at(x.s, block(&x, "T3"), io[0], false, &x.err));
  OK(&x, sch_compute_at(x.s, block(&x, "T2"), io[0], false, &x.err));
  OK(&x, sch_compute_at(x.s, block(&x, "T1"), io[0], false, &x.err));
  assert_equivalent(&x);
  OK(&x, sch_compute_inline(x.s, block(&x, "T3"), &x.err));
  OK(&x, sch_compute_inline(x.s, block(&x, "T1"), &x.err)); /* into T2 and B */
  assert_equivalent(&x);
  OK(&x, sch_compute_inline(x.s, block(&x, "T2"), &x.err)); /* i_0's body is B's nest alone */
  assert_equivalent(&x);
  char *t = tu_ir_text(sch_func(x.s));
  ck_assert_msg(!strstr(t, "alloc_buffer") && !strstr(t, "T1[") && !strstr(t, "T2[") && strstr(t, "A[v_i]"), "%s", t);
  free(t);
  sch_rv_t gone;
  ck_assert_int_lt(sch_get_block(x.s, "T2", &gone, &x.err), 0);
  ck_assert_str_eq(x.err.msg, "get_block: no block named \"T2\" (2 blocks: root, B)");
  ck_assert_int_lt(sch_compute_inline(x.s, block(&x, "B"), &x.err), 0); /* an output: refused, named */
  ck_assert_msg(strstr(x.err.msg, "B"), "%s", x.err.msg);
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* Inlining a long chain one block at a time, consumer first as AutoInline
 * does, and replaying the recorded trace give the same program. */
START_TEST(t_inline_chain) {
  fx_t x = {.w = chain(300)};
  x.s = sch_create(x.w->func, 1);
  for (int i = 299; i >= 1; i--) {
    char name[16];
    snprintf(name, sizeof name, "T%d", i);
    OK(&x, sch_compute_inline(x.s, block(&x, name), &x.err));
  }
  assert_equivalent(&x);
  sch_t *r = NULL;
  OK(&x, sch_replay(x.w->func, sch_get_trace(x.s), 1, &r, &x.err));
  char *a = tu_ir_text(sch_func(x.s)), *b = tu_ir_text(sch_func(r));
  ck_assert_str_eq(a, b);
  free(a), free(b);
  sch_free(r);
  fx_close(&x);
}
END_TEST

/* ---- reindex and fuse_block_iters: a convolution made a GEMM ----------- */

static const char *const CONV_AS_GEMM =
    "        for ax0, ax1, ax2, ax3, ax4, ax5 in T.grid(1, 4, 4, 3, 3, 8):\n"
    "            with T.block(\"Xp_reindex\"):\n"
    "                v0, v1, v2, v3, v4, v5 = T.axis.remap(\"SSSSSS\", [ax0, ax1, ax2, ax3, ax4, ax5])\n"
    "                T.reads(Xp[v0, v1 + v3, v2 + v4, v5])\n"
    "                T.writes(Xp_reindex[v0 * 16 + v1 * 4 + v2, v3 * 24 + v4 * 8 + v5])\n"
    "                Xp_reindex[(v0 * 4 + v1) * 4 + v2, (v3 * 3 + v4) * 8 + v5] = Xp[v0, v1 + v3, v2 + v4, v5]\n"
    "        for ax0_1, ax1_1, ax2_1, ax3_1 in T.grid(8, 3, 3, 8):\n"
    "            with T.block(\"Wt_reindex\"):\n"
    "                v0_1, v1_1, v2_1, v3_1 = T.axis.remap(\"SSSS\", [ax0_1, ax1_1, ax2_1, ax3_1])\n"
    "                T.reads(Wt[v1_1, v2_1, v3_1, v0_1])\n"
    "                T.writes(Wt_reindex[v0_1, v1_1 * 24 + v2_1 * 8 + v3_1])\n"
    "                Wt_reindex[v0_1, (v1_1 * 3 + v2_1) * 8 + v3_1] = Wt[v1_1, v2_1, v3_1, v0_1]\n"
    "        for n_y_x_fused, f, r_s_c_fused in T.grid(16, 8, 72):\n"
    "            with T.block(\"Y\"):\n"
    "                v_n_y_x_fused, v_f, v_r_s_c_fused = T.axis.remap(\"SSR\", [n_y_x_fused, f, r_s_c_fused])\n"
    "                T.reads(Xp_reindex[v_n_y_x_fused, v_r_s_c_fused], Wt_reindex[v_f, v_r_s_c_fused])\n"
    "                T.writes(Y_reindex[v_n_y_x_fused, v_f])\n"
    "                with T.init():\n"
    "                    Y_reindex[v_n_y_x_fused, v_f] = T.float32(0.0)\n"
    "                Y_reindex[v_n_y_x_fused, v_f] = Y_reindex[v_n_y_x_fused, v_f] + Xp_reindex[v_n_y_x_fused, "
    "v_r_s_c_fused] * Wt_reindex[v_f, v_r_s_c_fused]\n"
    "        for ax0_2, ax1_2, ax2_2, ax3_2 in T.grid(1, 4, 4, 8):\n"
    "            with T.block(\"Y_reindex\"):\n"
    "                v0_2, v1_2, v2_2, v3_2 = T.axis.remap(\"SSSS\", [ax0_2, ax1_2, ax2_2, ax3_2])\n"
    "                T.reads(Y_reindex[v0_2 * 16 + v1_2 * 4 + v2_2, v3_2])\n"
    "                T.writes(Y[v0_2, v1_2, v2_2, v3_2])\n"
    "                Y[v0_2, v1_2, v2_2, v3_2] = Y_reindex[(v0_2 * 4 + v1_2) * 4 + v2_2, v3_2]\n";

/* MetaSchedule's conv2d -> GEMM: X (the padded Xp) and W reindexed over the
 * block's iterators (im2col), Y too; (n, y, x) -> M and (r, s, c) -> K with
 * the reindexed temporaries' dimensions merged, so the block is C[m, f] +=
 * A[m, k] * B[f, k] at its plain iterators. */
START_TEST(t_reindex_conv_gemm) {
  fx_t x = fx_open("conv2d_nhwc", "N=1 H=4 W=4 C=8 F=8");
  sch_rv_t y = block(&x, "Y"), cx, cw, cy;
  OK(&x, sch_reindex(x.s, y, 0, false, &cx, &x.err));
  OK(&x, sch_reindex(x.s, y, 1, false, &cw, &x.err));
  OK(&x, sch_reindex(x.s, y, 0, true, &cy, &x.err));
  ck_assert_ptr_eq(sch_rv_stmt(x.s, cx), ir_func_find_block(sch_func(x.s), "Xp_reindex"));
  ck_assert_ptr_eq(sch_rv_stmt(x.s, cy), ir_func_find_block(sch_func(x.s), "Y_reindex"));
  assert_has(&x, "Y_reindex[v_n_1, v_y, v_x, v_f] = Y_reindex[v_n_1, v_y, v_x, v_f] + Xp_reindex[v_n_1, v_y, v_x, v_r, "
                 "v_s, v_c_1] * Wt_reindex[v_f, v_r, v_s, v_c_1]");
  assert_equivalent(&x);
  OK(&x, sch_fuse_block_iters(x.s, y, 0, 3, &x.err));
  assert_equivalent(&x);
  OK(&x, sch_fuse_block_iters(x.s, y, 2, 3, &x.err));
  assert_has(&x, CONV_AS_GEMM);
  assert_has(&x, "Xp_reindex = T.alloc_buffer((16, 72), \"float32\")");
  assert_equivalent(&x);
  /* the copy's padding stage inlines into the im2col copy */
  OK(&x, sch_compute_inline(x.s, block(&x, "Xp"), &x.err));
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* K fused first: simplification binds the unit iterator n to 0, and fusing
 * (n, y, x) then takes the unit loop n left over it, as the Hopper rule
 * needs (one loop per iterator). */
START_TEST(t_fuse_block_iters_unit) {
  fx_t x = fx_open("conv2d_nhwc", "N=1 H=4 W=4 C=8 F=8");
  sch_rv_t y = block(&x, "Y"), cx;
  OK(&x, sch_reindex(x.s, y, 0, false, &cx, &x.err));
  OK(&x, sch_fuse_block_iters(x.s, y, 4, 3, &x.err));
  assert_has(&x, "v_n_1 = T.axis.spatial(1, 0)");
  OK(&x, sch_fuse_block_iters(x.s, y, 0, 3, &x.err));
  assert_has(&x, "        for n_y_x_fused, f, r_s_c_fused in T.grid(16, 8, 72):\n"
                 "            with T.block(\"Y\"):\n"
                 "                v_n_y_x_fused, v_f, v_r_s_c_fused = T.axis.remap(\"SSR\", [n_y_x_fused, f, "
                 "r_s_c_fused])\n"
                 "                T.reads(Xp_reindex[v_n_y_x_fused, v_r_s_c_fused], ");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

/* Without reindex the fused iterator's uses are floordiv/floormod of it
 * (C and A are parameters, whose layout stays); a reduction fused alone is a
 * no-op. */
START_TEST(t_fuse_block_iters_divmod) {
  fx_t x = fx_open("matmul", "M=6 N=4 K=5");
  sch_rv_t c = block(&x, "C");
  OK(&x, sch_fuse_block_iters(x.s, c, 2, 1, &x.err));
  OK(&x, sch_fuse_block_iters(x.s, c, 0, 2, &x.err));
  assert_has(&x, "    for i_j_fused, k in T.grid(24, 5):\n"
                 "        with T.block(\"C\"):\n"
                 "            v_i_j_fused, v_k = T.axis.remap(\"SR\", [i_j_fused, k])\n");
  assert_has(&x, "C[v_i_j_fused // 4, v_i_j_fused % 4] = C[v_i_j_fused // 4, v_i_j_fused % 4] + "
                 "A[v_i_j_fused // 4, v_k] * B[v_k, v_i_j_fused % 4]");
  assert_equivalent(&x);
  fx_close(&x);
}
END_TEST

START_TEST(t_errors_reindex) {
  fx_t x = fx_open("window_sum", "N=8");
  sch_rv_t b = block(&x, "B"), out;
  TU_FAILS(x.s, sch_reindex(x.s, b, 1, false, &out, &err_),
           "reindex: block \"B\" reads 1 buffer(s); read buffer index 1 is out of range (valid: 0..0)");
  TU_FAILS(x.s, sch_reindex(x.s, b, 2, true, &out, &err_), "write buffer index 2 is out of range (valid: 0..0)");
  TU_FAILS(x.s, sch_reindex(x.s, b, 0, false, &out, &err_),
           "reindex: block \"B\" accesses A at more than one index; reindex needs one");
  fx_close(&x);
  x = fx_open("conv2d_nhwc", "N=1 H=4 W=4 C=2 F=2");
  b = block(&x, "Xp");
  TU_FAILS(x.s, sch_reindex(x.s, b, 0, false, &out, &err_),
           "reindex: block \"Xp\" accesses X at index 1 outside [0, 4) for some of its iterators' values (a guarded "
           "access); a copy over all of them would leave the buffer");
  fx_close(&x);
  ir_workload_t *w = tu_parse("param N = 4\ninput A: float32[N * N]\noutput B: float32[N, N]\n"
                              "B[i, j] = A[i * j] + A[i * j]\n");
  sch_t *s = sch_create(w->func, 1);
  b = tu_block(s, "B");
  TU_FAILS(s, sch_reindex(s, b, 0, false, &out, &err_),
           "block \"B\" reads A at index 0 = v_i * v_j, which is not an affine function of its iterators");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* PadEinsum after the GEMM form: a 3-channel conv's K = 27 and F = 8 padded
 * to 32 and 16 (M = 16 stays): the operands read from zero-padded copies,
 * the output computed padded and its valid part copied back; the outputs
 * are the original's, the trace replays from JSON to the same IR, and the
 * copy back inlines into the output's. */
START_TEST(t_pad_einsum_conv_gemm) {
  fx_t x = fx_open("conv2d_nhwc", "N=1 H=4 W=4 C=3 F=8");
  sch_rv_t y = block(&x, "Y"), cx, cw, cy, pads[4];
  OK(&x, sch_reindex(x.s, y, 0, false, &cx, &x.err));
  OK(&x, sch_reindex(x.s, y, 1, false, &cw, &x.err));
  OK(&x, sch_reindex(x.s, y, 0, true, &cy, &x.err));
  OK(&x, sch_fuse_block_iters(x.s, y, 4, 3, &x.err));
  OK(&x, sch_fuse_block_iters(x.s, y, 0, 3, &x.err));
  int n = 0;
  int64_t none[3] = {1, 1, 1}, pad[3] = {16, 16, 16};
  OK(&x, sch_pad_einsum(x.s, y, none, 3, pads, &n, &x.err));
  ck_assert_int_eq(n, 0); /* nothing to pad: nothing changes */
  OK(&x, sch_pad_einsum(x.s, y, pad, 3, pads, &n, &x.err));
  ck_assert_int_eq(n, 3);
  assert_has(&x, "Xp_reindex_pad = T.alloc_buffer((16, 32), \"float32\")");
  assert_has(&x, "Wt_reindex_pad = T.alloc_buffer((16, 32), \"float32\")");
  assert_has(&x, "Y_reindex_pad = T.alloc_buffer((16, 16), \"float32\")");
  assert_has(&x, "for n_y_x_fused, f, r_s_c_fused in T.grid(16, 16, 32):");
  assert_has(&x, "Wt_reindex_pad[v0_3, v1_3] = T.if_then_else(v0_3 < 8 and v1_3 < 27, Wt_reindex[v0_3, v1_3], "
                 "T.float32(0.0))");
  ck_assert_ptr_eq(sch_rv_stmt(x.s, pads[2]), ir_func_find_block(sch_func(x.s), "Y_reindex_1"));
  assert_equivalent(&x);
  char *json = sch_trace_to_json(sch_get_trace(x.s));
  ck_assert_msg(strstr(json, "[\"PadEinsum\", [\"b"), "%s", json);
  ck_assert_msg(strstr(json, "[[16, 16, 16]]"), "%s", json);
  sch_trace_t *t = NULL;
  sch_t *r = NULL;
  OK(&x, sch_trace_from_json(json, strlen(json), &t, &x.err));
  OK(&x, sch_replay(x.w->func, t, 1, &r, &x.err));
  char *a = tu_ir_text(sch_func(x.s)), *b = tu_ir_text(sch_func(r));
  ck_assert_str_eq(a, b);
  free(a), free(b), free(json);
  sch_free(r);
  sch_trace_free(t);
  /* the copy back inlines into the output's; the im2col, whose stores the
     fused M and K linearise, stays a copy of its own */
  OK(&x, sch_compute_inline(x.s, pads[2], &x.err));
  assert_equivalent(&x);
  TU_FAILS(x.s, sch_compute_inline(x.s, cx, &err_), "compute_inline needs every index to be a distinct iterator");
  fx_close(&x);
}
END_TEST

START_TEST(t_errors_pad_einsum) {
  fx_t x = fx_open("conv2d_nhwc", "N=1 H=4 W=4 C=3 F=8");
  sch_rv_t y = block(&x, "Y"), out[4], l[8];
  int n = 0;
  int64_t pad[7] = {1, 1, 1, 16, 1, 1, 16};
  TU_FAILS(x.s, sch_pad_einsum(x.s, y, pad, 3, out, &n, &err_), "block \"Y\" has 7 iterators; pad_einsum got 3 paddings");
  TU_FAILS(x.s, sch_pad_einsum(x.s, y, pad, 7, out, &n, &err_),
           "block \"Y\" reads Xp at index 1 that is not one of its iterators; pad_einsum needs every access at plain "
           "iterators (reindex it first)");
  sch_rv_t cx, cw;
  OK(&x, sch_reindex(x.s, y, 0, false, &cx, &x.err));
  OK(&x, sch_reindex(x.s, y, 1, false, &cw, &x.err));
  pad[3] = 0;
  TU_FAILS(x.s, sch_pad_einsum(x.s, y, pad, 7, out, &n, &err_), "padding 0 of iterator v_f of block \"Y\": need 1 .. ");
  pad[3] = 16;
  int nl = loops(&x, y, l);
  ck_assert_int_eq(nl, 7);
  sch_rv_t sp[2];
  split2(&x, l[3], 4, sp);
  TU_FAILS(x.s, sch_pad_einsum(x.s, y, pad, 7, out, &n, &err_),
           "iterator v_f of block \"Y\" is not bound to a serial loop of its own");
  fx_close(&x);
  /* an init-less or non-product reduction: the padded terms would not be zero */
  fx_t z = fx_open("row_sum", "M=4 N=6");
  sch_rv_t r = block(&z, "R");
  int64_t p2[2] = {1, 8};
  TU_FAILS(z.s, sch_pad_einsum(z.s, r, p2, 2, out, &n, &err_),
           "block \"R\" is not an accumulation of a product of two loads with an init");
  fx_close(&z);
}
END_TEST

START_TEST(t_errors_fuse_block_iters) {
  fx_t x = fx_open("matmul", "M=8 N=8 K=8");
  sch_rv_t c = block(&x, "C"), l[3], sp[2];
  TU_FAILS(x.s, sch_fuse_block_iters(x.s, c, 2, 2, &err_),
           "fuse_block_iters: block \"C\" has 3 iterators; cannot fuse iterators 2 .. 3");
  TU_FAILS(x.s, sch_fuse_block_iters(x.s, c, 1, 2, &err_),
           "iterators v_j and v_k of block \"C\" are not both spatial or both reduction");
  loops(&x, c, l);
  sch_rv_t ji[2] = {l[1], l[0]};
  OK(&x, sch_reorder(x.s, ji, 2, &x.err));
  TU_FAILS(x.s, sch_fuse_block_iters(x.s, c, 0, 2, &err_),
           "the loops of iterators v_i and v_j of block \"C\" are not nested directly in that order");
  OK(&x, sch_reorder(x.s, l, 2, &x.err));
  OK(&x, sch_parallel(x.s, l[1], &x.err));
  TU_FAILS(x.s, sch_fuse_block_iters(x.s, c, 0, 2, &err_), "loop j is parallel; only serial loops can be fused");
  split2(&x, l[0], 4, sp);
  TU_FAILS(x.s, sch_fuse_block_iters(x.s, c, 0, 2, &err_),
           "iterator v_i of block \"C\" is not bound to a loop of its own");
  fx_close(&x);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("sch_data");
  TU_TCASE(s, "cache", 0, t_cache_read_text, t_cache_write_text, t_cache_read_twice);
  TU_TCASE(s, "compute_at", 0, t_window_compute_at, t_window_compute_at_inner, t_window_compute_at_predicate,
           t_matmul_shared_compute_at, t_matmul_cache_write_reverse, t_matmul_reverse_under_reduce,
           t_matmul_fused_inner, t_matmul_fused_outer, t_conv_compute_at, t_conv_guarded_stage,
           t_softmax_row_stages, t_no_unit_loops);
  TU_TCASE(s, "sample_location", 0, t_sample_location_window, t_sample_location_matmul,
           t_sample_location_softmax);
  TU_TCASE(s, "errors", 0, t_errors_cache, t_errors_compute_at, t_errors_access_shape);
  TU_TCASE(s, "reindex", 0, t_reindex_conv_gemm, t_fuse_block_iters_unit, t_fuse_block_iters_divmod, t_errors_reindex,
           t_errors_fuse_block_iters, t_pad_einsum_conv_gemm, t_errors_pad_einsum);
  TU_TCASE(s, "limits", 60, t_compute_at_many_blocks, t_inline_index, t_inline_chain);
  return s;
}

TN_TEST_MAIN(make)
