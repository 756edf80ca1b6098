/* test_sch_loops.c — the loop primitives (split, fuse, reorder, parallel,
 * vectorize, unroll, bind, annotate) through the public schedule API: exact
 * TVMScript output, evaluator equivalence, recorded traces, every error
 * path (message, schedule and trace unchanged) and random sequences. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "schedule/sch_internal.h"
#include "testir.h"

/* ---- helpers ----------------------------------------------------------- */

static ir_workload_t *matmul_small(void) { return TU_LOAD("matmul", {"M", 12}, {"N", 10}, {"K", 6}); }
static ir_workload_t *conv_small(void) {
  return TU_LOAD("conv2d", {"C", 2}, {"H", 4}, {"W", 4}, {"F", 2});
}

static void assert_trace_kinds(const sch_t *s, const sch_inst_kind_t *kinds, int n) {
  const sch_trace_t *t = sch_get_trace(s);
  ck_assert_int_eq(t->n, n);
  for (int i = 0; i < n; i++) ck_assert_msg(t->insts[i].kind == kinds[i], "instruction %d is %s, expected %s", i,
                                            sch_inst_name(t->insts[i].kind), sch_inst_name(kinds[i]));
}

static const char *loop_name(const sch_t *s, sch_rv_t rv) {
  ir_stmt_t *st = sch_rv_stmt(s, rv);
  ck_assert_ptr_nonnull(st);
  ck_assert_int_eq(st->kind, IR_S_LOOP);
  return st->u.loop.var->name;
}

static int64_t loop_extent(const sch_t *s, sch_rv_t rv) { return sch_rv_stmt(s, rv)->u.loop.extent; }

/* ---- split ------------------------------------------------------------- */

static const char *const VADD_BOUND =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((1024,), \"float32\"), B: T.Buffer((1024,), \"float32\"), C: T.Buffer((1024,), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    # with T.block(\"root\"):\n"
    "    for i_0 in T.thread_binding(8, thread=\"blockIdx.x\"):\n"
    "        for i_1 in T.thread_binding(128, thread=\"threadIdx.x\"):\n"
    "            with T.block(\"C\"):\n"
    "                v_i = T.axis.spatial(1024, i_0 * 128 + i_1)\n"
    "                T.reads(A[v_i], B[v_i])\n"
    "                T.writes(C[v_i])\n"
    "                C[v_i] = A[v_i] + B[v_i]\n";

START_TEST(t_split_bind_vector_add) {
  ir_workload_t *w = TU_LOAD("vector_add", {"N", 1024});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], parts[2];
  ck_assert_int_eq(tu_loops(s, b, l), 1);
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(128)};
  TU_OK(sch_split(s, l[0], f, 2, parts, &err_));
  ck_assert_str_eq(loop_name(s, parts[0]), "i_0");
  ck_assert_str_eq(loop_name(s, parts[1]), "i_1");
  ck_assert_int_eq(loop_extent(s, parts[0]), 8);
  ck_assert_int_eq(loop_extent(s, parts[1]), 128);
  ck_assert_ptr_null(sch_rv_stmt(s, l[0])); /* the split loop is gone */
  TU_OK(sch_bind(s, parts[0], "blockIdx.x", &err_));
  TU_OK(sch_bind(s, parts[1], "threadIdx.x", &err_));
  tu_assert_text(s, VADD_BOUND);
  sch_inst_kind_t kinds[] = {SCH_GET_BLOCK, SCH_GET_LOOPS, SCH_SPLIT, SCH_BIND, SCH_BIND};
  assert_trace_kinds(s, kinds, 5);
  const sch_inst_t *sp = &sch_get_trace(s)->insts[2];
  ck_assert_int_eq(sp->ninputs, 3);
  ck_assert_int_eq(sp->inputs[1].kind, SCH_ARG_NONE);
  ck_assert_int_eq(sp->inputs[2].i, 128);
  ck_assert_int_eq(sp->noutputs, 2);
  ck_assert_str_eq(sch_get_trace(s)->insts[3].attrs[0].s, "blockIdx.x");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_split_predicate) {
  ir_workload_t *w = TU_LOAD("vector_add", {"N", 10});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], parts[2];
  tu_loops(s, b, l);
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_OK(sch_split(s, l[0], f, 2, parts, &err_));
  ck_assert_int_eq(loop_extent(s, parts[0]), 3);
  tu_assert_text(s,
              "# from tvm.script import tir as T\n"
              "\n"
              "@T.prim_func\n"
              "def main(A: T.Buffer((10,), \"float32\"), B: T.Buffer((10,), \"float32\"), C: T.Buffer((10,), \"float32\")):\n"
              "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
              "    # with T.block(\"root\"):\n"
              "    for i_0, i_1 in T.grid(3, 4):\n"
              "        with T.block(\"C\"):\n"
              "            v_i = T.axis.spatial(10, i_0 * 4 + i_1)\n"
              "            T.where(i_0 * 4 + i_1 < 10)\n"
              "            T.reads(A[v_i], B[v_i])\n"
              "            T.writes(C[v_i])\n"
              "            C[v_i] = A[v_i] + B[v_i]\n");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  /* Splitting again ANDs a second predicate onto the first. */
  sch_arg_t g[2] = {sch_arg_int(2), sch_arg_none()};
  sch_rv_t inner[2];
  TU_OK(sch_split(s, parts[1], g, 2, inner, &err_));
  ck_assert_int_eq(loop_extent(s, inner[1]), 2);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_arg_t h[2] = {sch_arg_int(2), sch_arg_int(2)};
  sch_rv_t outer[2];
  TU_OK(sch_split(s, parts[0], h, 2, outer, &err_));
  tu_assert_text_has(s, " and ");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Split with explicit attributes (disable_predication = 1). */
static int split_nopred(sch_t *s, sch_rv_t l, int64_t f0, int64_t f1, tn_err_t *err) {
  sch_arg_t in[3] = {sch_arg_rv(l), f0 ? sch_arg_int(f0) : sch_arg_none(), f1 ? sch_arg_int(f1) : sch_arg_none()};
  sch_arg_t at[2] = {sch_arg_int(1), sch_arg_int(1)};
  sch_inst_t inst = {.kind = SCH_SPLIT, .inputs = in, .ninputs = 3, .attrs = at, .nattrs = 2};
  sch_rv_t out[2];
  int nout = 0;
  return sch_apply(s, &inst, NULL, 0, out, &nout, err);
}

START_TEST(t_split_disable_predication) {
  ir_workload_t *w = TU_LOAD("window_sum", {"N", 12});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "B"), l[8];
  tu_loops(s, b, l);
  TU_FAILS(s, split_nopred(s, l[0], 0, 5, &err_), "predication disabled");
  TU_FAILS(s, split_nopred(s, l[0], 0, 5, &err_), "split: ");
  TU_OK(split_nopred(s, l[0], 0, 4, &err_));
  tu_assert_text_has(s, "for i_0, i_1 in T.grid(3, 4):");
  char *t = tu_ir_text(sch_func(s));
  ck_assert_ptr_null(strstr(t, "T.where"));
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_split_many_factors) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], p[4];
  tu_loops(s, b, l);
  sch_arg_t f[3] = {sch_arg_int(2), sch_arg_none(), sch_arg_int(3)};
  TU_OK(sch_split(s, l[0], f, 3, p, &err_));
  ck_assert_int_eq(loop_extent(s, p[1]), 2);
  tu_assert_text_has(s, "for i_0, i_1, i_2, j, k in T.grid(2, 2, 3, 10, 6):");
  tu_assert_text_has(s, "v_i = T.axis.spatial(12, i_0 * 6 + i_1 * 3 + i_2)");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  /* A single factor >= the extent: one loop, predicated when larger. */
  sch_arg_t one[1] = {sch_arg_int(16)};
  sch_rv_t q[2];
  TU_OK(sch_split(s, l[1], one, 1, q, &err_));
  ck_assert_str_eq(loop_name(s, q[0]), "j_0");
  tu_assert_text_has(s, "T.where(j_0 < 10)");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  /* Non-dividing split of the reduction loop keeps the init right. */
  sch_arg_t g[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_OK(sch_split(s, l[2], g, 2, q, &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_split_errors) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], p[4];
  tu_loops(s, b, l);
  sch_arg_t two_none[2] = {sch_arg_none(), sch_arg_none()};
  TU_FAILS(s, sch_split(s, l[0], two_none, 2, p, &err_), "at most one factor can be inferred");
  sch_arg_t small[2] = {sch_arg_int(2), sch_arg_int(5)};
  TU_FAILS(s, sch_split(s, l[0], small, 2, p, &err_), "loop i has extent 12 but the factors multiply to 10");
  sch_arg_t zero[2] = {sch_arg_int(0), sch_arg_none()};
  TU_FAILS(s, sch_split(s, l[0], zero, 2, p, &err_), "factors must be >= 1");
  sch_arg_t huge[2] = {sch_arg_int(1 << 20), sch_arg_int(1 << 20)};
  TU_FAILS(s, sch_split(s, l[0], huge, 2, p, &err_), "int32 loop range");
  TU_OK(sch_parallel(s, l[0], &err_));
  sch_arg_t ok[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_FAILS(s, sch_split(s, l[0], ok, 2, p, &err_), "loop i is parallel; only serial or unrolled loops can be split");
  TU_OK(sch_bind(s, l[1], "threadIdx.x", &err_));
  TU_FAILS(s, sch_split(s, l[1], ok, 2, p, &err_), "loop j is bound to threadIdx.x");
  /* An unrolled loop may be split; the pieces are serial. */
  TU_OK(sch_unroll(s, l[2], &err_));
  TU_OK(sch_split(s, l[2], ok, 2, p, &err_));
  ck_assert_int_eq(sch_rv_stmt(s, p[0])->u.loop.kind, IR_LOOP_SERIAL);
  /* Handles to a loop that was split away. */
  TU_FAILS(s, sch_split(s, l[2], ok, 2, p, &err_), "names no loop");
  /* Direct calls: the primitive itself leaves the function untouched. */
  int64_t bad[2] = {0, 0};
  TU_PRIM_FAILS(s, sch_prim_split(s, (int)sch_rv_value(s, p[0]), bad, 2, false, (int[2]){0}, &err_), "both None");
  int64_t under[2] = {1, 1};
  TU_PRIM_FAILS(s, sch_prim_split(s, (int)sch_rv_value(s, p[0]), under, 2, false, (int[2]){0}, &err_),
             "extent 2 but the factors multiply to 1");
  int64_t over[2] = {3, 3};
  TU_PRIM_FAILS(s, sch_prim_split(s, (int)sch_rv_value(s, p[0]), over, 2, true, (int[2]){0}, &err_),
             "must divide the extent exactly");
  TU_PRIM_FAILS(s, sch_prim_split(s, (int)sch_rv_value(s, l[0]), under, 2, false, (int[2]){0}, &err_), "is parallel");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- fuse -------------------------------------------------------------- */

START_TEST(t_fuse_matmul) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], fused;
  tu_loops(s, b, l);
  TU_OK(sch_fuse(s, l, 2, &fused, &err_));
  ck_assert_str_eq(loop_name(s, fused), "i_j_fused");
  ck_assert_int_eq(loop_extent(s, fused), 120);
  tu_assert_text(s,
              "# from tvm.script import tir as T\n"
              "\n"
              "@T.prim_func\n"
              "def main(A: T.Buffer((12, 6), \"float32\"), B: T.Buffer((6, 10), \"float32\"), C: T.Buffer((12, 10), \"float32\")):\n"
              "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
              "    # with T.block(\"root\"):\n"
              "    for i_j_fused, k in T.grid(120, 6):\n"
              "        with T.block(\"C\"):\n"
              "            v_i = T.axis.spatial(12, i_j_fused // 10)\n"
              "            v_j = T.axis.spatial(10, i_j_fused % 10)\n"
              "            v_k = T.axis.reduce(6, k)\n"
              "            T.reads(A[v_i, v_k], B[v_k, v_j])\n"
              "            T.writes(C[v_i, v_j])\n"
              "            with T.init():\n"
              "                C[v_i, v_j] = T.float32(0.0)\n"
              "            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_inst_kind_t kinds[] = {SCH_GET_BLOCK, SCH_GET_LOOPS, SCH_FUSE};
  assert_trace_kinds(s, kinds, 3);
  ck_assert_int_eq(sch_get_trace(s)->insts[2].ninputs, 2);
  ck_assert_int_eq(sch_get_trace(s)->insts[2].noutputs, 1);
  /* Splitting the fused loop by the original extents gives the plain
   * bindings back. */
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(10)};
  sch_rv_t p[2];
  TU_OK(sch_split(s, fused, f, 2, p, &err_));
  tu_assert_text_has(s, "for i_j_fused_0, i_j_fused_1, k in T.grid(12, 10, 6):");
  tu_assert_text_has(s, "v_i, v_j, v_k = T.axis.remap(\"SSR\", [i_j_fused_0, i_j_fused_1, k])");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_fuse_three_and_single) {
  ir_workload_t *w = conv_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "Y"), l[8], fused, same;
  ck_assert_int_eq(tu_loops(s, b, l), 7);
  TU_OK(sch_fuse(s, l + 1, 3, &fused, &err_));
  ck_assert_str_eq(loop_name(s, fused), "f_y_x_fused");
  ck_assert_int_eq(loop_extent(s, fused), 32);
  tu_assert_text_has(s, "v_f = T.axis.spatial(2, f_y_x_fused // 16)");
  tu_assert_text_has(s, "v_y = T.axis.spatial(4, f_y_x_fused // 4 % 4)");
  tu_assert_text_has(s, "v_x = T.axis.spatial(4, f_y_x_fused % 4)");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  /* A single loop fuses to itself. */
  TU_OK(sch_fuse(s, &fused, 1, &same, &err_));
  ck_assert_int_eq(sch_rv_value(s, same), sch_rv_value(s, fused));
  /* Fusing everything, reduction loops included, then splitting back. */
  sch_rv_t all[4] = {l[0], fused, l[4], l[5]}, big, p[3];
  TU_OK(sch_fuse(s, all, 4, &big, &err_));
  ck_assert_int_eq(loop_extent(s, big), 1 * 32 * 2 * 3);
  sch_arg_t f[3] = {sch_arg_int(8), sch_arg_none(), sch_arg_int(5)};
  TU_OK(sch_split(s, big, f, 3, p, &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_fuse_errors) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], out;
  tu_loops(s, b, l);
  sch_rv_t skip[2] = {l[0], l[2]}, rev[2] = {l[1], l[0]}, dup[2] = {l[0], l[0]};
  TU_FAILS(s, sch_fuse(s, skip, 2, &out, &err_), "loop k is not the direct child of loop i");
  TU_FAILS(s, sch_fuse(s, rev, 2, &out, &err_), "loop i encloses loop j; list the loops outer to inner");
  TU_FAILS(s, sch_fuse(s, dup, 2, &out, &err_), "loop i is listed twice");
  TU_OK(sch_unroll(s, l[1], &err_));
  TU_FAILS(s, sch_fuse(s, l, 2, &out, &err_), "loop j is unrolled; only serial loops can be fused");
  TU_OK(sch_annotate(s, l[2], "pragma_x", sch_arg_int(1), &err_));
  TU_FAILS(s, sch_fuse(s, l + 1, 2, &out, &err_), "fuse: loop j is unrolled");
  sch_free(s);
  ir_workload_free(w);

  w = TU_LOAD("softmax", {"M", 4}, {"N", 6});
  s = sch_create(w->func, 1);
  sch_rv_t la[4], lb[4];
  tu_loops(s, tu_block(s, "rmax"), la);
  tu_loops(s, tu_block(s, "E"), lb);
  sch_rv_t cross[2] = {la[0], lb[1]};
    /* (Messages use variable names: E's j prints as j_1 but is named j.) */
  TU_FAILS(s, sch_fuse(s, cross, 2, &out, &err_), "fuse: loop j is not the direct child of loop i");
  /* Annotated loops cannot be fused. */
  TU_OK(sch_annotate(s, la[1], "k", sch_arg_int(2), &err_));
  TU_FAILS(s, sch_fuse(s, la, 2, &out, &err_), "loop j has annotations (\"k\"...)");
  TU_PRIM_FAILS(s, sch_prim_fuse(s, (int[]){(int)sch_rv_value(s, la[0]), (int)sch_rv_value(s, la[1])}, 2,
                              (int[1]){0}, &err_), "annotations");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- reorder ----------------------------------------------------------- */

START_TEST(t_reorder_matmul) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8];
  tu_loops(s, b, l);
  sch_rv_t order[3] = {l[2], l[0], l[1]};
  TU_OK(sch_reorder(s, order, 3, &err_));
  tu_assert_text(s,
              "# from tvm.script import tir as T\n"
              "\n"
              "@T.prim_func\n"
              "def main(A: T.Buffer((12, 6), \"float32\"), B: T.Buffer((6, 10), \"float32\"), C: T.Buffer((12, 10), \"float32\")):\n"
              "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
              "    # with T.block(\"root\"):\n"
              "    for k, i, j in T.grid(6, 12, 10):\n"
              "        with T.block(\"C\"):\n"
              "            v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
              "            T.reads(A[v_i, v_k], B[v_k, v_j])\n"
              "            T.writes(C[v_i, v_j])\n"
              "            with T.init():\n"
              "                C[v_i, v_j] = T.float32(0.0)\n"
              "            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  /* The handles follow their loops. */
  ck_assert_str_eq(loop_name(s, l[0]), "i");
  ck_assert_str_eq(loop_name(s, l[2]), "k");
  sch_rv_t now[8];
  tu_loops(s, b, now);
  ck_assert_int_eq(sch_rv_value(s, now[0]), sch_rv_value(s, l[2]));
  ck_assert_int_eq(sch_rv_value(s, now[1]), sch_rv_value(s, l[0]));
  sch_inst_kind_t kinds[] = {SCH_GET_BLOCK, SCH_GET_LOOPS, SCH_REORDER, SCH_GET_LOOPS};
  assert_trace_kinds(s, kinds, 4);
  /* Only the given loops move: j, i with k in between. */
  sch_rv_t two[2] = {l[1], l[0]};
  TU_OK(sch_reorder(s, two, 2, &err_));
  tu_assert_text_has(s, "for k, j, i in T.grid(6, 10, 12):");
  sch_rv_t ki[2] = {l[0], l[2]};
  TU_OK(sch_reorder(s, ki, 2, &err_));
  tu_assert_text_has(s, "for i, j, k in T.grid(12, 10, 6):");
  /* A reorder of one loop, or of loops already in order, changes nothing. */
  TU_OK(sch_reorder(s, l, 3, &err_));
  TU_OK(sch_reorder(s, l + 1, 1, &err_));
  tu_assert_text_has(s, "for i, j, k in T.grid(12, 10, 6):");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_reorder_keeps_kinds) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], p[2];
  tu_loops(s, b, l);
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_OK(sch_split(s, l[1], f, 2, p, &err_));
  TU_OK(sch_parallel(s, l[0], &err_));
  TU_OK(sch_annotate(s, p[0], "note", sch_arg_str("x"), &err_));
  sch_rv_t order[3] = {l[2], p[0], l[0]};
  TU_OK(sch_reorder(s, order, 3, &err_));
  /* i, j_0, k hold positions 0, 1, 3; j_1 keeps position 2. */
  tu_assert_text_has(s, "    for k in range(6):\n        for j_0 in range(3, annotations={\"note\": \"x\"}):\n"
                     "            for j_1 in range(4):\n                for i in T.parallel(12):\n");
  ck_assert_int_eq(sch_rv_stmt(s, l[0])->u.loop.kind, IR_LOOP_PARALLEL);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_reorder_errors) {
  ir_workload_t *w = TU_LOAD("softmax", {"M", 4}, {"N", 6});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t la[4], lb[4], p[2];
  tu_loops(s, tu_block(s, "rmax"), la);
  tu_loops(s, tu_block(s, "E"), lb);
  sch_rv_t cross[2] = {la[0], lb[1]};
  TU_FAILS(s, sch_reorder(s, cross, 2, &err_), "reorder: loop j is not nested inside i's loop nest");
  sch_rv_t dup[2] = {la[1], la[1]};
  TU_FAILS(s, sch_reorder(s, dup, 2, &err_), "loop j is listed twice");
  sch_rv_t sib[2] = {la[0], lb[0]};
  TU_FAILS(s, sch_reorder(s, sib, 2, &err_), "is not nested inside");
  sch_free(s);

  /* A loop with two children between the reordered loops (the shape
   * compute_at makes): wrap the rmax and E nests of softmax in one loop o. */
  ir_func_t *f = ir_func_copy(w->func);
  ir_stmt_t *top = ir_func_root(f)->body;
  ck_assert_int_eq(top->kind, IR_S_SEQ);
  ir_stmt_t *o = ir_loop_new(f, ir_var_new(f, "o", IR_INT32), 1, ir_seq(f, top->u.seq.items, 2));
  top->u.seq.items[1] = o;
  top->u.seq.items++;
  top->u.seq.n--;
  s = sch_create(f, 1);
  sch_rv_t l[8];
  ck_assert_int_eq(tu_loops(s, tu_block(s, "rmax"), l), 3);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_rv_t order[2] = {l[2], l[0]};
  TU_FAILS(s, sch_reorder(s, order, 2, &err_), "reorder: loop o has more than one child (2 statements)");
  sch_rv_t inner[2] = {l[2], l[1]};
  TU_OK(sch_reorder(s, inner, 2, &err_)); /* below o the nest is perfect */
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  ir_func_free(f);
  sch_free(s);
  ir_workload_free(w);

  /* A vectorized loop must stay innermost. */
  w = TU_LOAD("vector_add", {"N", 64});
  s = sch_create(w->func, 1);
  tu_loops(s, tu_block(s, "C"), l);
  sch_arg_t g[2] = {sch_arg_none(), sch_arg_int(8)};
  TU_OK(sch_split(s, l[0], g, 2, p, &err_));
  TU_OK(sch_vectorize(s, p[1], &err_));
  sch_rv_t swap[2] = {p[1], p[0]};
  TU_FAILS(s, sch_reorder(s, swap, 2, &err_), "loop i_1 is vectorized and must stay innermost");
  TU_PRIM_FAILS(s, sch_prim_reorder(s, (int[]){(int)sch_rv_value(s, p[1]), (int)sch_rv_value(s, p[0])}, 2, &err_),
             "must stay innermost");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Swaps the headers of two loops by hand (what an unchecked reorder would
 * do) on a copy of the function. */
static ir_func_t *swapped_copy(const sch_t *s, sch_rv_t a, sch_rv_t b) {
  ir_func_t *f = ir_func_copy(sch_func(s));
  ir_loop_t *la = &ir_func_find_uid(f, (int)sch_rv_value(s, a))->u.loop;
  ir_loop_t *lb = &ir_func_find_uid(f, (int)sch_rv_value(s, b))->u.loop;
  ir_loop_t t = *la;
  ir_stmt_t *ba = la->body, *bb = lb->body;
  *la = *lb, la->body = ba;
  *lb = t, lb->body = bb;
  return f;
}

/* A loop feeding both a spatial and a reduction iterator (fuse of j and k,
 * split again) cannot be reordered: the init of C would run after some of
 * its updates.  The hand-swapped function shows the hazard is real. */
START_TEST(t_reorder_reduction_init) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t l[8], jk, p[2];
  tu_loops(s, tu_block(s, "C"), l);
  TU_OK(sch_fuse(s, l + 1, 2, &jk, &err_));
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_OK(sch_split(s, jk, f, 2, p, &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_rv_t swap[2] = {p[1], p[0]};
  TU_FAILS(s, sch_reorder(s, swap, 2, &err_),
        "reorder: loop j_k_fused_1 feeds both spatial and reduction iterators of block \"C\"; reordering it could "
        "run the block's init after an update");
  ir_func_t *bad = swapped_copy(s, p[0], p[1]);
  ck_assert(!(tu_output_error(w->func, bad, 7) <= 1e-12));
  ir_func_free(bad);
  /* Moving the pure spatial loop i is refused too (conservative), while a
   * nest without mixed loops reorders freely, reduction loops outermost. */
  sch_rv_t outer[2] = {p[0], l[0]};
  TU_FAILS(s, sch_reorder(s, outer, 2, &err_), "feeds both spatial and reduction iterators");
  sch_free(s);

  s = sch_create(w->func, 1);
  tu_loops(s, tu_block(s, "C"), l);
  sch_arg_t g[2] = {sch_arg_none(), sch_arg_int(4)};
  sch_rv_t kk[2];
  TU_OK(sch_split(s, l[2], g, 2, kk, &err_));
  sch_rv_t order[4] = {kk[1], l[1], kk[0], l[0]};
  TU_OK(sch_reorder(s, order, 4, &err_));
  tu_assert_text_has(s, "for k_1, j, k_0, i in T.grid(4, 10, 2, 12):");
  tu_assert_text_has(s, "T.where(k_0 * 4 + k_1 < 6)");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- loop kinds -------------------------------------------------------- */

START_TEST(t_parallel_vectorize_unroll) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8], p[2];
  tu_loops(s, b, l);
  sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(5)};
  TU_OK(sch_split(s, l[1], f, 2, p, &err_));
  sch_rv_t order[4] = {l[0], p[0], l[2], p[1]};
  TU_OK(sch_reorder(s, order, 4, &err_));
  TU_OK(sch_parallel(s, l[0], &err_));
  TU_OK(sch_parallel(s, l[0], &err_)); /* idempotent */
  TU_OK(sch_vectorize(s, p[1], &err_));
  TU_OK(sch_unroll(s, l[2], &err_));
  tu_assert_text_has(s, "    for i in T.parallel(12):\n        for j_0 in range(2):\n"
                     "            for k in T.unroll(6):\n                for j_1 in T.vectorized(5):\n");
  sch_inst_kind_t kinds[] = {SCH_GET_BLOCK, SCH_GET_LOOPS, SCH_SPLIT, SCH_REORDER, SCH_PARALLEL,
                             SCH_PARALLEL,  SCH_VECTORIZE, SCH_UNROLL};
  assert_trace_kinds(s, kinds, 8);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_loop_kind_errors) {
  ir_workload_t *w = matmul_small();
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[8];
  tu_loops(s, b, l);
  TU_FAILS(s, sch_parallel(s, l[2], &err_),
        "loop k feeds the reduction iterator v_k of block \"C\"; a parallel loop would race on C");
  TU_FAILS(s, sch_vectorize(s, l[2], &err_), "vectorized loop would race on C");
  TU_FAILS(s, sch_vectorize(s, l[1], &err_), "loop j contains loop k; only innermost loops can be vectorized");
  TU_FAILS(s, sch_bind(s, l[2], "blockIdx.x", &err_), "a blockIdx.x-bound loop would race on C");
  TU_FAILS(s, sch_bind(s, l[2], "vthread.y", &err_), "feeds the reduction iterator v_k");
  TU_FAILS(s, sch_bind(s, l[0], "threadIdx.w", &err_),
        "unknown thread tag \"threadIdx.w\" for loop i (valid: blockIdx.x/y/z, threadIdx.x/y/z, vthread.x/y/z)");
  TU_OK(sch_unroll(s, l[2], &err_)); /* unroll is fine on a reduction loop */
  TU_OK(sch_bind(s, l[2], "threadIdx.x", &err_)); /* cross-thread reduction form */
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  TU_OK(sch_bind(s, l[0], "blockIdx.x", &err_));
  TU_FAILS(s, sch_bind(s, l[0], "blockIdx.y", &err_), "loop i is already bound to blockIdx.x");
  TU_FAILS(s, sch_parallel(s, l[0], &err_), "loop i is already bound to blockIdx.x");
  TU_FAILS(s, sch_unroll(s, l[0], &err_), "already bound to blockIdx.x");
  TU_FAILS(s, sch_bind(s, l[1], "blockIdx.x", &err_), "loop j is inside loop i, which is already bound to blockIdx.x");
  TU_FAILS(s, sch_bind(s, l[1], "blockIdx.x", &err_), "loop j is inside loop i, which is already bound to blockIdx.x");
  /* threadIdx may nest inside itself (cooperative fetch), but with one extent */
  TU_FAILS(s, sch_bind(s, l[1], "threadIdx.x", &err_),
        "loop j (extent 10) cannot be bound to threadIdx.x: loop k in the same kernel is bound to it with extent 6");
  TU_OK(sch_bind(s, l[0], "blockIdx.x", &err_)); /* the same binding again is fine */
  TU_OK(sch_bind(s, l[1], "threadIdx.y", &err_));
  tu_assert_text_has(s, "for i in T.thread_binding(12, thread=\"blockIdx.x\"):");
  tu_assert_text_has(s, "for k in T.thread_binding(6, thread=\"threadIdx.x\"):");
  TU_PRIM_FAILS(s, sch_prim_loop_kind(s, (int)sch_rv_value(s, l[1]), IR_LOOP_VECTORIZED, NULL, &err_),
             "already bound to threadIdx.y");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_bind_kernel_extents) {
  /* Softmax: inside one blockIdx loop, threadIdx.x must have one extent. */
  ir_workload_t *w = TU_LOAD("vector_add", {"N", 64});
  ir_func_t *f = ir_func_copy(w->func);
  /* Build `for o in 2: { nest(i, 64); nest(i, 64) }` by hand. */
  ir_stmt_t *nest = ir_func_root(f)->body;
  ir_stmt_t *items[2] = {nest, NULL};
  ir_stmt_t *copy = ir_loop_new(f, ir_var_new(f, "m", IR_INT32), 64, nest->u.loop.body);
  items[1] = copy;
  ir_stmt_t *outer = ir_loop_new(f, ir_var_new(f, "o", IR_INT32), 2, ir_seq(f, items, 2));
  ir_func_root(f)->body = outer;
  /* The second nest's block must use its own loop var: give it a fresh
   * block with the binding v_i = m. */
  ir_stmt_t *blk2 = ir_block_new(f, "C2");
  ir_block_t *src = &nest->u.loop.body->u.block, *dst = &blk2->u.block;
  int uid = dst->uid;
  *dst = *src;
  dst->uid = uid;
  dst->name = "C2";
  dst->iters = TN_NEWN(f->arena, ir_iter_t, 1);
  dst->iters[0] = src->iters[0];
  dst->iters[0].binding = ir_varref(f, copy->u.loop.var);
  copy->u.loop.body = blk2;
  sch_t *s = sch_create(f, 1);
  sch_rv_t l1[4], l2[4], p[2];
  ck_assert_int_eq(tu_loops(s, tu_block(s, "C"), l1), 2);
  ck_assert_int_eq(tu_loops(s, tu_block(s, "C2"), l2), 2);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  TU_OK(sch_bind(s, l1[0], "blockIdx.x", &err_));
  TU_OK(sch_bind(s, l1[1], "threadIdx.x", &err_));
  sch_arg_t fs[2] = {sch_arg_none(), sch_arg_int(32)};
  TU_OK(sch_split(s, l2[1], fs, 2, p, &err_));
  TU_FAILS(s, sch_bind(s, p[1], "threadIdx.x", &err_),
        "loop m_1 (extent 32) cannot be bound to threadIdx.x: loop i in the same kernel is bound to it with extent 64");
  TU_OK(sch_bind(s, p[0], "threadIdx.y", &err_));
  ir_func_free(f);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- annotations ------------------------------------------------------- */

START_TEST(t_annotate) {
  ir_workload_t *w = TU_LOAD("vector_add", {"N", 16});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "C"), l[2];
  tu_loops(s, b, l);
  TU_OK(sch_annotate(s, l[0], "pragma_auto_unroll_max_step", sch_arg_int(64), &err_));
  TU_OK(sch_annotate(s, b, "meta_schedule.tiling_structure", sch_arg_str("SSSRRSRS"), &err_));
  TU_OK(sch_annotate(s, l[0], "pragma_unroll_explicit", sch_arg_int(1), &err_));
  TU_OK(sch_annotate(s, l[0], "pragma_auto_unroll_max_step", sch_arg_int(16), &err_)); /* replaces */
  tu_assert_text_has(s, "for i in range(16, annotations={\"pragma_auto_unroll_max_step\": 16, "
                     "\"pragma_unroll_explicit\": 1}):");
  tu_assert_text_has(s, "T.block_attr({\"meta_schedule.tiling_structure\": \"SSSRRSRS\"})");
  ck_assert_int_eq(sch_rv_stmt(s, l[0])->u.loop.nannots, 2);
  TU_FAILS(s, sch_unannotate(s, l[0], "nope", &err_),
        "unannotate: loop i has no annotation \"nope\" (its annotations: \"pragma_auto_unroll_max_step\", "
        "\"pragma_unroll_explicit\")");
  TU_FAILS(s, sch_annotate(s, l[0], "", sch_arg_int(1), &err_), "empty annotation key for loop i");
  TU_OK(sch_unannotate(s, l[0], "pragma_auto_unroll_max_step", &err_));
  TU_OK(sch_unannotate(s, b, "meta_schedule.tiling_structure", &err_));
  TU_FAILS(s, sch_unannotate(s, b, "meta_schedule.tiling_structure", &err_),
        "block \"C\" has no annotation \"meta_schedule.tiling_structure\" (it has no annotations)");
  tu_assert_text_has(s, "for i in range(16, annotations={\"pragma_unroll_explicit\": 1}):");
  sch_inst_kind_t kinds[] = {SCH_GET_BLOCK, SCH_GET_LOOPS, SCH_ANNOTATE, SCH_ANNOTATE, SCH_ANNOTATE,
                             SCH_ANNOTATE,  SCH_UNANNOTATE, SCH_UNANNOTATE};
  assert_trace_kinds(s, kinds, 8);
  /* Annotation values from a sampled expr handle. */
  sch_rv_t v;
  TU_OK(sch_sample_categorical(s, (int64_t[]){4, 4}, (double[]){0.5, 0.5}, 2, &v, &err_));
  TU_OK(sch_annotate(s, b, "meta_schedule.cooperative_fetch", sch_arg_rv(v), &err_));
  tu_assert_text_has(s, "\"meta_schedule.cooperative_fetch\": 4");
  TU_PRIM_FAILS(s, sch_prim_unannotate(s, (int)sch_rv_value(s, l[0]), "x", &err_), "no annotation \"x\"");
  TU_PRIM_FAILS(s, sch_prim_annotate(s, 987654, "x", &(ir_annot_t){.key = "x"}, &err_), "names no block or loop");
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- equivalence on several workloads ---------------------------------- */

START_TEST(t_equivalence_workloads) {
  /* window_sum: non-dividing split, fuse back, parallel outer, vectorize inner. */
  ir_workload_t *w = TU_LOAD("window_sum", {"N", 10});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t l[8], p[3], q[2];
  tu_loops(s, tu_block(s, "B"), l);
  sch_arg_t f3[3] = {sch_arg_int(2), sch_arg_none(), sch_arg_int(2)};
  TU_OK(sch_split(s, l[0], f3, 3, p, &err_));
  ck_assert_int_eq(loop_extent(s, p[1]), 3);
  sch_rv_t inner2[2] = {p[1], p[2]}, fused;
  TU_OK(sch_fuse(s, inner2, 2, &fused, &err_));
  TU_OK(sch_parallel(s, p[0], &err_));
  sch_arg_t f2[2] = {sch_arg_none(), sch_arg_int(4)};
  TU_OK(sch_split(s, fused, f2, 2, q, &err_));
  TU_OK(sch_vectorize(s, q[1], &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);

  /* softmax: each of the four nests transformed differently. */
  w = TU_LOAD("softmax", {"M", 6}, {"N", 10});
  s = sch_create(w->func, 1);
  const char *names[] = {"rmax", "E", "rsum", "S"};
  for (int i = 0; i < 4; i++) {
    tu_loops(s, tu_block(s, names[i]), l);
    sch_arg_t f[2] = {sch_arg_none(), sch_arg_int(i + 3)};
    TU_OK(sch_split(s, l[1], f, 2, p, &err_));
    sch_rv_t order[3] = {p[0], l[0], p[1]};
    TU_OK(sch_reorder(s, order, 3, &err_));
    if (i % 2 == 1) {
      TU_OK(sch_parallel(s, l[0], &err_));
      TU_OK(sch_vectorize(s, p[1], &err_));
    } else {
      TU_OK(sch_bind(s, l[0], "blockIdx.x", &err_));
      TU_OK(sch_bind(s, p[1], "threadIdx.x", &err_));
    }
    tu_assert_same_outputs(w->func, sch_func(s), 7);
  }
  sch_free(s);
  ir_workload_free(w);

  /* conv2d: tile the output loops, reorder reduction loops outward. */
  w = conv_small();
  s = sch_create(w->func, 1);
  tu_loops(s, tu_block(s, "Y"), l);
  sch_arg_t fy[2] = {sch_arg_none(), sch_arg_int(3)};
  TU_OK(sch_split(s, l[2], fy, 2, p, &err_));
  sch_rv_t order[5] = {l[4], p[0], l[5], l[3], p[1]};
  TU_OK(sch_reorder(s, order, 5, &err_));
  sch_rv_t xl[4];
  tu_loops(s, tu_block(s, "Xp"), xl);
  sch_rv_t fx;
  TU_OK(sch_fuse(s, xl, 4, &fx, &err_));
  ck_assert_int_eq(loop_extent(s, fx), 72);
  TU_OK(sch_parallel(s, fx, &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  ir_workload_free(w);

  /* matmul: full tiling i -> 3, j -> 2 pieces, k -> 2, reordered SSRSR. */
  w = matmul_small();
  s = sch_create(w->func, 1);
  tu_loops(s, tu_block(s, "C"), l);
  sch_rv_t ii[3], jj[2], kk[2];
  sch_arg_t fi[3] = {sch_arg_int(2), sch_arg_none(), sch_arg_int(2)};
  sch_arg_t fj[2] = {sch_arg_none(), sch_arg_int(4)};
  sch_arg_t fk[2] = {sch_arg_int(4), sch_arg_none()};
  TU_OK(sch_split(s, l[0], fi, 3, ii, &err_));
  TU_OK(sch_split(s, l[1], fj, 2, jj, &err_));
  TU_OK(sch_split(s, l[2], fk, 2, kk, &err_));
  sch_rv_t ord[7] = {ii[0], jj[0], ii[1], kk[0], ii[2], kk[1], jj[1]};
  TU_OK(sch_reorder(s, ord, 7, &err_));
  sch_rv_t outer2[2] = {ii[0], jj[0]}, bx;
  TU_OK(sch_fuse(s, outer2, 2, &bx, &err_));
  TU_OK(sch_bind(s, bx, "blockIdx.x", &err_));
  TU_OK(sch_bind(s, ii[1], "threadIdx.x", &err_));
  TU_OK(sch_unroll(s, kk[1], &err_));
  TU_OK(sch_vectorize(s, jj[1], &err_));
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  ck_assert_int_eq(sch_get_trace(s)->n, 1 + 1 + 3 + 1 + 1 + 4);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- random sequences -------------------------------------------------- */

typedef enum { R_SPLIT, R_FUSE, R_REORDER, R_PARALLEL, R_VECTORIZE, R_UNROLL, R_COUNT } rop_t;

/* One random operation on the loops of a random block; applied both
 * directly to a probe copy (the primitive itself) and through the public
 * API.  They must agree; a failure leaves both untouched. */
static void random_step(sch_t *s, const ir_func_t *ref, tn_rng_t *rng, const char *const *blocks, int nblocks,
                        int *nok, int *nfail) {
  sch_rv_t l[SCH_MAX_RVS_OUT];
  int n = tu_loops(s, tu_block(s, blocks[tn_rng_below(rng, (uint64_t)nblocks)]), l);
  if (n == 0) return;
  rop_t op = (rop_t)tn_rng_below(rng, R_COUNT);
  int uids[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) uids[i] = (int)sch_rv_value(s, l[i]);
  sch_t *probe = sch_create(sch_func(s), 0);
  char *before = tu_ir_text(sch_func(s));
  int n0 = sch_get_trace(s)->n;
  tn_err_t e1 = {0}, e2 = {0};
  int r1 = 0, r2 = 0, at = (int)tn_rng_below(rng, (uint64_t)n);
  sch_rv_t out[SCH_MAX_RVS_OUT];
  int pout[SCH_MAX_RVS_OUT];
  switch (op) {
  case R_SPLIT: {
    int nf = 1 + (int)tn_rng_below(rng, 3), none = (int)tn_rng_below(rng, (uint64_t)nf + 1);
    int64_t fac[4];
    sch_arg_t args[4];
    for (int i = 0; i < nf; i++) {
      fac[i] = i == none ? 0 : 1 + (int64_t)tn_rng_below(rng, 6);
      args[i] = fac[i] ? sch_arg_int(fac[i]) : sch_arg_none();
    }
    r1 = sch_prim_split(probe, uids[at], fac, nf, false, pout, &e1);
    r2 = sch_split(s, l[at], args, nf, out, &e2);
    break;
  }
  case R_FUSE: {
    int k = 2 + (int)tn_rng_below(rng, 2);
    if (at + k > n) at = n - k < 0 ? 0 : n - k;
    if (k > n) k = n;
    r1 = sch_prim_fuse(probe, uids + at, k, pout, &e1);
    r2 = sch_fuse(s, l + at, k, out, &e2);
    break;
  }
  case R_REORDER: {
    int k = n < 2 ? n : 2 + (int)tn_rng_below(rng, (uint64_t)(n - 1 < 3 ? n - 1 : 3));
    int pick[SCH_MAX_RVS_OUT], pu[SCH_MAX_RVS_OUT];
    sch_rv_t pl[SCH_MAX_RVS_OUT];
    for (int i = 0; i < n; i++) pick[i] = i;
    for (int i = 0; i < k; i++) { /* partial Fisher-Yates */
      int j = i + (int)tn_rng_below(rng, (uint64_t)(n - i)), t = pick[i];
      pick[i] = pick[j], pick[j] = t;
      pl[i] = l[pick[i]], pu[i] = uids[pick[i]];
    }
    r1 = sch_prim_reorder(probe, pu, k, &e1);
    r2 = sch_reorder(s, pl, k, &e2);
    break;
  }
  default: {
    ir_loop_kind_t kind = op == R_PARALLEL ? IR_LOOP_PARALLEL : op == R_VECTORIZE ? IR_LOOP_VECTORIZED : IR_LOOP_UNROLLED;
    r1 = sch_prim_loop_kind(probe, uids[at], kind, NULL, &e1);
    r2 = op == R_PARALLEL ? sch_parallel(s, l[at], &e2) : op == R_VECTORIZE ? sch_vectorize(s, l[at], &e2)
                                                                            : sch_unroll(s, l[at], &e2);
    break;
  }
  }
  char *after = tu_ir_text(sch_func(s)), *ptext = tu_ir_text(sch_func(probe));
  ck_assert_msg((r1 < 0) == (r2 < 0), "primitive and API disagree: %d (%s) vs %d (%s)", r1, e1.msg, r2, e2.msg);
  if (r2 < 0) {
    ck_assert_msg(strstr(e2.msg, e1.msg), "API message \"%s\" lacks \"%s\"", e2.msg, e1.msg);
    ck_assert_str_eq(before, after);
    ck_assert_str_eq(before, ptext);
    ck_assert_int_eq(sch_get_trace(s)->n, n0);
    (*nfail)++;
  } else {
    ck_assert_str_eq(after, ptext);
    ck_assert_int_eq(sch_get_trace(s)->n, n0 + 1);
    tu_assert_same_outputs(ref, sch_func(s), 7);
    (*nok)++;
  }
  free(before);
  free(after);
  free(ptext);
  sch_free(probe);
}

START_TEST(t_random_sequences) {
  ir_workload_t *mm = matmul_small(), *conv = conv_small();
  static const char *const mm_blocks[] = {"C"}, *const conv_blocks[] = {"Xp", "Y"};
  tn_rng_t rng;
  tn_rng_seed(&rng, 20240601);
  int nok = 0, nfail = 0;
  for (int seq = 0; seq < 200; seq++) {
    bool use_conv = seq % 2 == 1;
    const ir_func_t *ref = use_conv ? conv->func : mm->func;
    sch_t *s = sch_create(ref, (uint64_t)seq);
    int steps = 3 + (int)tn_rng_below(&rng, 5);
    for (int i = 0; i < steps; i++)
      random_step(s, ref, &rng, use_conv ? conv_blocks : mm_blocks, use_conv ? 2 : 1, &nok, &nfail);
    sch_free(s);
  }
  /* Both outcomes must be well represented. */
  ck_assert_msg(nok > 300 && nfail > 100, "%d successes, %d failures", nok, nfail);
  ir_workload_free(mm);
  ir_workload_free(conv);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("sch_loops");
  TU_TCASE(s, "core", 0, t_split_bind_vector_add, t_split_predicate, t_split_disable_predication,
           t_split_many_factors, t_split_errors, t_fuse_matmul, t_fuse_three_and_single, t_fuse_errors,
           t_reorder_matmul, t_reorder_keeps_kinds, t_reorder_errors, t_reorder_reduction_init,
           t_parallel_vectorize_unroll, t_loop_kind_errors, t_bind_kernel_extents, t_annotate,
           t_equivalence_workloads);
  TU_TCASE(s, "random", 120, t_random_sequences);
  return s;
}

TN_TEST_MAIN(make)
