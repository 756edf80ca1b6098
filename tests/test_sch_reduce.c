/* test_sch_reduce.c — compute_inline, reverse_compute_inline,
 * decompose_reduction and rfactor: exact printed IR, evaluator equivalence
 * with the unscheduled function, and every error path (message, unchanged
 * function and trace, also when the primitive runs without sch_apply). */
#include <stdio.h>
#include <string.h>

#include "schedule/sch_internal.h"
#include "testir.h"

/* ---- fixtures ------------------------------------------------------------ */

static const char *block_name(const sch_t *s, sch_rv_t rv) {
  ir_stmt_t *st = sch_rv_stmt(s, rv);
  ck_assert_ptr_nonnull(st);
  ck_assert_int_eq(st->kind, IR_S_BLOCK);
  return st->u.block.name;
}

static void assert_has(const char *text, const char *needle) {
  ck_assert_msg(strstr(text, needle) != NULL, "expected \"%s\" in:\n%s", needle, text);
}

static void assert_lacks(const char *text, const char *needle) {
  ck_assert_msg(strstr(text, needle) == NULL, "did not expect \"%s\" in:\n%s", needle, text);
}

/* ---- error paths --------------------------------------------------------- */

typedef enum op { OP_INLINE, OP_RINLINE, OP_DECOMPOSE, OP_RFACTOR } op_t;

static const char *const op_api[] = {"compute_inline: ", "reverse_compute_inline: ", "decompose_reduction: ",
                                     "rfactor: "};

/* The primitive itself, on uids, without sch_apply's snapshot. */
static int run_prim(sch_t *s, op_t op, sch_rv_t a, int64_t b, tn_err_t *err) {
  int uid = (int)sch_rv_value(s, a), out = -1;
  switch (op) {
  case OP_INLINE: return sch_prim_compute_inline(s, uid, err);
  case OP_RINLINE: return sch_prim_reverse_compute_inline(s, uid, err);
  case OP_DECOMPOSE: return sch_prim_decompose_reduction(s, uid, (int)sch_rv_value(s, (sch_rv_t)b), &out, err);
  case OP_RFACTOR: return sch_prim_rfactor(s, uid, (int)b, &out, err);
  }
  return TN_EINVAL;
}

static int run_api(sch_t *s, op_t op, sch_rv_t a, int64_t b, tn_err_t *err) {
  sch_rv_t out;
  switch (op) {
  case OP_INLINE: return sch_compute_inline(s, a, err);
  case OP_RINLINE: return sch_reverse_compute_inline(s, a, err);
  case OP_DECOMPOSE: return sch_decompose_reduction(s, a, (sch_rv_t)b, &out, err);
  case OP_RFACTOR: return sch_rfactor(s, a, (int)b, &out, err);
  }
  return TN_EINVAL;
}

/* op fails with a message containing `needle`, both as a bare primitive and
 * through the public API, and leaves the function and the trace unchanged. */
static void expect_fail(sch_t *s, op_t op, sch_rv_t a, int64_t b, const char *needle) {
  tu_snap_t snap = tu_snapshot(s);
  tn_err_t err = {0};
  int rc = run_prim(s, op, a, b, &err);
  tu_assert_failed(s, snap, true, rc, "the primitive", &err, needle);
  snap = tu_snapshot(s);
  memset(&err, 0, sizeof err);
  rc = run_api(s, op, a, b, &err);
  ck_assert_msg(strncmp(err.msg, op_api[op], strlen(op_api[op])) == 0, "expected \"%s...%s\": %s", op_api[op],
                needle, err.msg);
  tu_assert_failed(s, snap, true, rc, op_api[op], &err, needle);
}

/* ---- decompose_reduction ------------------------------------------------- */

static const char *const decompose_at_i =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((4, 8), \"float32\"), B: T.Buffer((8, 4), \"float32\"), C: T.Buffer((4, 4), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    # with T.block(\"root\"):\n"
    "    for i_init, j_init in T.grid(4, 4):\n"
    "        with T.block(\"C_init\"):\n"
    "            v_i_init, v_j_init = T.axis.remap(\"SS\", [i_init, j_init])\n"
    "            T.reads()\n"
    "            T.writes(C[v_i_init, v_j_init])\n"
    "            C[v_i_init, v_j_init] = T.float32(0.0)\n"
    "    for i, j, k in T.grid(4, 4, 8):\n"
    "        with T.block(\"C_update\"):\n"
    "            v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
    "            T.reads(C[v_i, v_j], A[v_i, v_k], B[v_k, v_j])\n"
    "            T.writes(C[v_i, v_j])\n"
    "            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n";

static const char *const decompose_at_k =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((4, 8), \"float32\"), B: T.Buffer((8, 4), \"float32\"), C: T.Buffer((4, 4), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    # with T.block(\"root\"):\n"
    "    for i, j in T.grid(4, 4):\n"
    "        with T.block(\"C_init\"):\n"
    "            v_i_init, v_j_init = T.axis.remap(\"SS\", [i, j])\n"
    "            T.reads()\n"
    "            T.writes(C[v_i_init, v_j_init])\n"
    "            C[v_i_init, v_j_init] = T.float32(0.0)\n"
    "        for k in range(8):\n"
    "            with T.block(\"C_update\"):\n"
    "                v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
    "                T.reads(C[v_i, v_j], A[v_i, v_k], B[v_k, v_j])\n"
    "                T.writes(C[v_i, v_j])\n"
    "                C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n";

/* Decomposes matmul's C at loop `at` of i, j, k and checks text and values. */
static void decompose_matmul(int at, const char *expected) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t c = tu_block(s, "C"), l[8], init;
  ck_assert_int_eq(tu_loops(s, c, l), 3);
  tn_err_t err = {0};
  ck_assert_msg(sch_decompose_reduction(s, c, l[at], &init, &err) == 0, "%s", err.msg);
  ck_assert_str_eq(block_name(s, init), "C_init");
  ck_assert_str_eq(block_name(s, c), "C_update");
  const sch_inst_t *last = &sch_get_trace(s)->insts[sch_get_trace(s)->n - 1];
  ck_assert_int_eq(last->kind, SCH_DECOMPOSE_REDUCTION);
  ck_assert_int_eq(last->noutputs, 1);
  char *t = tu_ir_text(sch_func(s));
  if (expected) ck_assert_str_eq(t, expected);
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}

START_TEST(t_decompose_at_outer_loop) { decompose_matmul(0, decompose_at_i); }
END_TEST

START_TEST(t_decompose_at_reduction_loop) { decompose_matmul(2, decompose_at_k); }
END_TEST

START_TEST(t_decompose_at_middle_loop) {
  decompose_matmul(1, NULL);
  ir_workload_t *w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t c = tu_block(s, "C"), l[8], init;
  tu_loops(s, c, l);
  tn_err_t err = {0};
  ck_assert_int_eq(sch_decompose_reduction(s, c, l[1], &init, &err), 0);
  char *t = tu_ir_text(sch_func(s));
  /* The init nest sits inside i, before j: only j is copied. */
  assert_has(t, "    for i in range(4):\n"
                "        for j_init in range(4):\n"
                "            with T.block(\"C_init\"):\n"
                "                v_i_init, v_j_init = T.axis.remap(\"SS\", [i, j_init])\n");
  assert_has(t, "        for j, k in T.grid(4, 8):\n"
                "            with T.block(\"C_update\"):\n");
  free(t);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Split loops (one with a predicate) and every decomposition point: all but
 * k_1 (under k_0, which feeds the reduction) are legal. */
START_TEST(t_decompose_split_loops) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 5}, {"N", 4}, {"K", 12});
  for (int at = 0; at < 5; at++) {
    sch_t *s = sch_create(w->func, 1);
    sch_rv_t c = tu_block(s, "C"), l[8], si[2], sk[2], init;
    tu_loops(s, c, l);
    tu_split2(s, l[0], 3, si); /* i: 2 x 3 with predicate i_0 * 3 + i_1 < 5 */
    tu_split2(s, l[2], 4, sk); /* k: 3 x 4 */
    ck_assert_int_eq(tu_loops(s, c, l), 5); /* i_0, i_1, j, k_0, k_1 */
    tn_err_t err = {0};
    if (at == 4) {
      expect_fail(s, OP_DECOMPOSE, c, l[4], "loop k_0, outside loop k_1, feeds reduction iterator v_k of block \"C\"");
      sch_free(s);
      continue;
    }
    ck_assert_msg(sch_decompose_reduction(s, c, l[at], &init, &err) == 0, "at %d: %s", at, err.msg);
    char *t = tu_ir_text(sch_func(s));
    assert_has(t, "T.block(\"C_init\")");
    if (at <= 1) assert_has(t, "i_1_init");
    if (at == 3) assert_lacks(t, "k_0_init");
    free(t);
    tu_assert_same_outputs(w->func, sch_func(s), 11);
    sch_free(s);
  }
  ir_workload_free(w);
}
END_TEST

START_TEST(t_decompose_errors) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t c = tu_block(s, "C"), l[8], init;
  tu_loops(s, c, l);
  tn_err_t err = {0};
  /* A loop under the reduction loop: i, k, j. */
  sch_rv_t order[2] = {l[2], l[1]};
  ck_assert_msg(sch_reorder(s, order, 2, &err) == 0, "reorder: %s", err.msg);
  expect_fail(s, OP_DECOMPOSE, c, l[1], "loop k, outside loop j, feeds reduction iterator v_k of block \"C\"");
  ck_assert_int_eq(sch_decompose_reduction(s, c, l[2], &init, &err), 0);
  /* The update block has no init any more. */
  expect_fail(s, OP_DECOMPOSE, c, l[0], "block \"C_update\" has no init");
  sch_free(s);
  ir_workload_free(w);

  w = TU_LOAD("softmax", {"M", 4}, {"N", 8});
  s = sch_create(w->func, 1);
  sch_rv_t rmax = tu_block(s, "rmax"), rsum = tu_block(s, "rsum");
  tu_loops(s, rmax, l);
  expect_fail(s, OP_DECOMPOSE, rsum, l[1], "loop j is not an ancestor of block \"rsum\"");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- compute_inline ------------------------------------------------------ */

static const char *const softmax_inlined =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((4, 8), \"float32\"), S: T.Buffer((4, 8), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    with T.block(\"root\"):\n"
    "        rmax = T.alloc_buffer((4,), \"float32\")\n"
    "        rsum = T.alloc_buffer((4,), \"float32\")\n"
    "        for i, j in T.grid(4, 8):\n"
    "            with T.block(\"rmax\"):\n"
    "                v_i, v_j = T.axis.remap(\"SR\", [i, j])\n"
    "                T.reads(A[v_i, v_j])\n"
    "                T.writes(rmax[v_i])\n"
    "                with T.init():\n"
    "                    rmax[v_i] = T.float32(-3.4028234663852886e+38)\n"
    "                rmax[v_i] = T.max(rmax[v_i], A[v_i, v_j])\n"
    "        for i_1, j_1 in T.grid(4, 8):\n"
    "            with T.block(\"rsum\"):\n"
    "                v_i_1, v_j_1 = T.axis.remap(\"SR\", [i_1, j_1])\n"
    "                T.reads(A[v_i_1, v_j_1], rmax[v_i_1])\n"
    "                T.writes(rsum[v_i_1])\n"
    "                with T.init():\n"
    "                    rsum[v_i_1] = T.float32(0.0)\n"
    "                rsum[v_i_1] = rsum[v_i_1] + T.exp(A[v_i_1, v_j_1] - rmax[v_i_1])\n"
    "        for i_2, j_2 in T.grid(4, 8):\n"
    "            with T.block(\"S\"):\n"
    "                v_i_2, v_j_2 = T.axis.remap(\"SS\", [i_2, j_2])\n"
    "                T.reads(A[v_i_2, v_j_2], rmax[v_i_2], rsum[v_i_2])\n"
    "                T.writes(S[v_i_2, v_j_2])\n"
    "                S[v_i_2, v_j_2] = T.exp(A[v_i_2, v_j_2] - rmax[v_i_2]) / rsum[v_i_2]\n";

/* E is read by rsum and by S: inlining puts the exp into both. */
START_TEST(t_inline_softmax) {
  ir_workload_t *w = TU_LOAD("softmax", {"M", 4}, {"N", 8});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t e = tu_block(s, "E");
  ck_assert_msg(sch_compute_inline(s, e, &err) == 0, "%s", err.msg);
  ck_assert_ptr_null(sch_rv_stmt(s, e));
  char *t = tu_ir_text(sch_func(s));
  ck_assert_str_eq(t, softmax_inlined);
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

static const char *const conv_inlined_body =
    "            Y[v_n, v_f, v_y, v_x] = Y[v_n, v_f, v_y, v_x] + T.if_then_else(v_y + v_r >= 1 and v_y + v_r < 5 "
    "and v_x + v_s >= 1 and v_x + v_s < 5, X[v_n, v_c, v_y + v_r - 1, v_x + v_s - 1], T.float32(0.0)) * "
    "Wt[v_f, v_c, v_r, v_s]\n";

/* The padding select moves into the convolution; the temp and the root
 * SEQ (now one nest) disappear. */
START_TEST(t_inline_conv2d_padding) {
  ir_workload_t *w = TU_LOAD("conv2d", {"C", 2}, {"H", 4}, {"W", 4}, {"F", 3});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  ck_assert_msg(sch_compute_inline(s, tu_block(s, "Xp"), &err) == 0, "%s", err.msg);
  char *t = tu_ir_text(sch_func(s));
  assert_has(t, "    # with T.block(\"root\"):\n"
                "    for n, f, y, x, c, r, s in T.grid(1, 3, 4, 4, 2, 3, 3):\n"
                "        with T.block(\"Y\"):\n");
  assert_has(t, "T.reads(X[v_n, v_c, v_y + v_r - 1, v_x + v_s - 1], Wt[v_f, v_c, v_r, v_s])\n");
  assert_has(t, conv_inlined_body);
  assert_lacks(t, "Xp");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Inlining a block that was computed at a loop of its consumer: the loop
 * keeps only the consumer. */
START_TEST(t_inline_after_compute_at) {
  ir_workload_t *w = TU_LOAD("conv2d", {"C", 2}, {"H", 4}, {"W", 4}, {"F", 3});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t xp = tu_block(s, "Xp"), y = tu_block(s, "Y"), l[8];
  tu_loops(s, y, l);
  ck_assert_msg(sch_compute_at(s, xp, l[2], true, &err) == 0, "compute_at: %s", err.msg);
  ck_assert_msg(sch_compute_inline(s, xp, &err) == 0, "%s", err.msg);
  char *t = tu_ir_text(sch_func(s));
  assert_has(t, "for n, f, y, x, c, r, s in T.grid(1, 3, 4, 4, 2, 3, 3):\n");
  assert_lacks(t, "Xp");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Loads at index expressions get the producer's value with v := index. */
START_TEST(t_inline_index_expressions) {
  ir_workload_t *w = tu_parse("input A: float32[8]\n"
                             "temp T: float32[8]\n"
                             "output B: float32[8]\n"
                             "T[i] = A[i] * 2.0\n"
                             "B[i] = T[i] + T[7 - i]\n");
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  ck_assert_msg(sch_compute_inline(s, tu_block(s, "T"), &err) == 0, "%s", err.msg);
  char *t = tu_ir_text(sch_func(s));
  assert_has(t, "B[v_i] = A[v_i] * T.float32(2.0) + A[7 - v_i] * T.float32(2.0)\n");
  assert_has(t, "T.reads(A[0:8])\n");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_inline_errors) {
  ir_workload_t *w = TU_LOAD("dense_bias_relu", {"IN", 16}, {"OUT", 8});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t d = tu_block(s, "D"), l[8], init;
  expect_fail(s, OP_INLINE, d, 0, "block \"D\" is a reduction (it has an init)");
  expect_fail(s, OP_INLINE, tu_block(s, "Y"), 0, "block \"Y\" writes Y, a parameter of the function");
  tu_loops(s, d, l);
  tn_err_t err = {0};
  ck_assert_int_eq(sch_decompose_reduction(s, d, l[0], &init, &err), 0);
  expect_fail(s, OP_INLINE, d, 0, "block \"D_update\" has reduction iterator v_k");
  expect_fail(s, OP_INLINE, init, 0, "buffer D is written by 2 blocks");
  sch_free(s);
  ir_workload_free(w);

  /* A store at an index that is not an iterator (built by hand: the
   * language cannot write one). */
  w = tu_parse("input A: float32[8]\n"
              "temp T: float32[8]\n"
              "output B: float32[8]\n"
              "T[i] = A[i] * 2.0\n"
              "B[i] = T[i] + 1.0\n");
  ir_func_t *f = w->func;
  ir_block_t *tb = &ir_func_find_block(f, "T")->u.block;
  tb->body->u.store.idx[0] = ir_bin(f, IR_E_SUB, ir_int(f, 7), ir_varref(f, tb->iters[0].var));
  s = sch_create(f, 1);
  expect_fail(s, OP_INLINE, tu_block(s, "T"), 0, "block \"T\" stores T at index 7 - v_i of dimension 0");
  sch_free(s);
  /* A value that reads the buffer it writes. */
  ir_expr_t *self_idx[1] = {ir_varref(f, tb->iters[0].var)};
  ir_expr_t *value = tb->body->u.store.value;
  tb->body->u.store.idx[0] = self_idx[0];
  tb->body->u.store.value = ir_bin(f, IR_E_ADD, value, ir_load(f, tb->body->u.store.buf, self_idx, 1));
  s = sch_create(f, 1);
  expect_fail(s, OP_INLINE, tu_block(s, "T"), 0, "block \"T\" reads T, the buffer it writes");
  sch_free(s);
  tb->body->u.store.value = value;
  /* The only block of its scope cannot go. */
  ir_block_t *root = ir_func_root(f);
  root->body = root->body->u.seq.items[0];
  tb->body->u.store.idx[0] = ir_varref(f, tb->iters[0].var);
  s = sch_create(f, 1);
  expect_fail(s, OP_INLINE, tu_block(s, "T"), 0, "block \"T\" is the only block in the scope of block \"root\"");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- reverse_compute_inline ---------------------------------------------- */

static const char *const dense_reverse_inlined =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(X: T.Buffer((1, 16), \"float32\"), W: T.Buffer((8, 16), \"float32\"), bias: T.Buffer((8,), "
    "\"float32\"), Y: T.Buffer((1, 8), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    with T.block(\"root\"):\n"
    "        D_local = T.alloc_buffer((1, 8), \"float32\", scope=\"local\")\n"
    "        for b, o, k in T.grid(1, 8, 16):\n"
    "            with T.block(\"D\"):\n"
    "                v_b, v_o, v_k = T.axis.remap(\"SSR\", [b, o, k])\n"
    "                T.reads(X[v_b, v_k], W[v_o, v_k])\n"
    "                T.writes(D_local[v_b, v_o])\n"
    "                with T.init():\n"
    "                    D_local[v_b, v_o] = T.float32(0.0)\n"
    "                D_local[v_b, v_o] = D_local[v_b, v_o] + X[v_b, v_k] * W[v_o, v_k]\n"
    "        for ax0, ax1 in T.grid(1, 8):\n"
    "            with T.block(\"D_local\"):\n"
    "                v0, v1 = T.axis.remap(\"SS\", [ax0, ax1])\n"
    "                T.reads(D_local[v0, v1], bias[v1])\n"
    "                T.writes(Y[v0, v1])\n"
    "                Y[v0, v1] = T.max(D_local[v0, v1] + bias[v1], T.float32(0.0))\n";

/* The bias + ReLU epilogue folds into the write-back stage of cache_write;
 * straight into the reduction it would be wrong, so that is refused. */
START_TEST(t_reverse_inline_epilogue) {
  ir_workload_t *w = TU_LOAD("dense_bias_relu", {"IN", 16}, {"OUT", 8});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t d = tu_block(s, "D"), y = tu_block(s, "Y"), wb;
  expect_fail(s, OP_RINLINE, y, 0, "block \"D\" (the producer of block \"Y\") is a reduction (it has an init)");
  ck_assert_msg(sch_cache_write(s, d, 0, "local", &wb, &err) == 0, "cache_write: %s", err.msg);
  ck_assert_msg(sch_reverse_compute_inline(s, y, &err) == 0, "%s", err.msg);
  ck_assert_ptr_null(sch_rv_stmt(s, y));
  ck_assert_str_eq(block_name(s, wb), "D_local");
  char *t = tu_ir_text(sch_func(s));
  ck_assert_str_eq(t, dense_reverse_inlined);
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* The MultiLevelTiling shape: the write-back block sits inside the tiled
 * nest (reverse_compute_at) and the epilogue at the root folds into it. */
START_TEST(t_reverse_inline_into_tiled_write_back) {
  ir_workload_t *w = TU_LOAD("dense_bias_relu", {"B", 2}, {"IN", 16}, {"OUT", 8});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t d = tu_block(s, "D"), l[8], so[2], wb;
  tu_loops(s, d, l);
  tu_split2(s, l[1], 4, so);
  ck_assert_msg(sch_cache_write(s, d, 0, "local", &wb, &err) == 0, "cache_write: %s", err.msg);
  ck_assert_msg(sch_reverse_compute_at(s, wb, so[0], true, &err) == 0, "reverse_compute_at: %s", err.msg);
  ck_assert_msg(sch_reverse_compute_inline(s, tu_block(s, "Y"), &err) == 0, "%s", err.msg);
  char *t = tu_ir_text(sch_func(s));
  assert_has(t, "Y[v0, v1] = T.max(D_local[v0, v1] + bias[v1], T.float32(0.0))\n");
  assert_lacks(t, "D = T.alloc_buffer");
  assert_lacks(t, "T.block(\"Y\")");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A consumer that stores at other indices and reads inputs besides B. */
START_TEST(t_reverse_inline_general_store) {
  ir_workload_t *w = tu_parse("input A: float32[4, 6]\n"
                             "input c: float32[6]\n"
                             "temp T: float32[4, 6]\n"
                             "output B: float32[6, 4]\n"
                             "T[i, j] = A[i, j] * 2.0\n"
                             "B[j, i] = T[i, j] - c[j]\n");
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  ck_assert_msg(sch_reverse_compute_inline(s, tu_block(s, "B"), &err) == 0, "%s", err.msg);
  char *t = tu_ir_text(sch_func(s));
  assert_has(t, "B[v_j, v_i] = A[v_i, v_j] * T.float32(2.0) - c[v_j]\n");
  assert_lacks(t, "alloc_buffer");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

static void rinline_fails(const char *src, const char *blk, const char *needle) {
  ir_workload_t *w = tu_parse(src);
  sch_t *s = sch_create(w->func, 1);
  expect_fail(s, OP_RINLINE, tu_block(s, blk), 0, needle);
  sch_free(s);
  ir_workload_free(w);
}

START_TEST(t_reverse_inline_errors) {
  ir_workload_t *w = TU_LOAD("softmax", {"M", 4}, {"N", 8});
  sch_t *s = sch_create(w->func, 1);
  expect_fail(s, OP_RINLINE, tu_block(s, "S"), 0, "block \"S\" has 2 producer blocks (\"E\", \"rsum\")");
  expect_fail(s, OP_RINLINE, tu_block(s, "rsum"), 0, "block \"rsum\" is a reduction");
  sch_free(s);
  ir_workload_free(w);

  w = TU_LOAD("vector_add", {"N", 8});
  s = sch_create(w->func, 1);
  expect_fail(s, OP_RINLINE, tu_block(s, "C"), 0, "block \"C\" has no producer block to inline into");
  sch_free(s);
  ir_workload_free(w);

  const char *head = "input A: float32[8]\n"
                     "temp T: float32[8]\n";
  char src[512];
  snprintf(src, sizeof src, "%stemp U: float32[8]\noutput B: float32[8]\nT[i] = A[i] * 2.0\nU[i] = T[i] + 1.0\n"
           "B[i] = T[i] + U[i]\n", head);
  rinline_fails(src, "U", "buffer T is read by 2 blocks");
  snprintf(src, sizeof src, "%soutput B: float32[8]\nT[i] = A[i] * 2.0\nB[i] = T[7 - i]\n", head);
  rinline_fails(src, "B", "block \"B\" loads T at index 7 - v_i of dimension 0");
  snprintf(src, sizeof src, "%soutput B: float32[8]\nT[i] = A[i] * 2.0\nB[i] = T[i] + T[7 - i]\n", head);
  rinline_fails(src, "B", "block \"B\" loads T at different indices");
  snprintf(src, sizeof src, "%soutput B: float32[8, 4]\nT[i] = A[i] * 2.0\nB[i, j] = T[i]\n", head);
  rinline_fails(src, "B", "block \"B\" has 2 iterators but T has 1 dimensions");
  rinline_fails("input A: float32[8]\noutput B: float32[8]\noutput C: float32[8]\nB[i] = A[i] * 2.0\n"
                "C[i] = B[i] + 1.0\n", "C", "block \"B\" writes B, a parameter of the function");
  /* A consumer split with a predicate does not cover its whole domain. */
  snprintf(src, sizeof src, "%soutput B: float32[8]\nT[i] = A[i] * 2.0\nB[i] = T[i] + 1.0\n", head);
  w = tu_parse(src);
  s = sch_create(w->func, 1);
  sch_rv_t b = tu_block(s, "B"), l[4], sp[2];
  tu_loops(s, b, l);
  tu_split2(s, l[0], 3, sp);
  expect_fail(s, OP_RINLINE, b, 0, "block \"B\" has a predicate");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- rfactor ------------------------------------------------------------- */

static const char *const row_sum_rfactor_inner =
    "# from tvm.script import tir as T\n"
    "\n"
    "@T.prim_func\n"
    "def main(A: T.Buffer((4, 64), \"float32\"), R: T.Buffer((4,), \"float32\")):\n"
    "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
    "    with T.block(\"root\"):\n"
    "        R_rf = T.alloc_buffer((8, 4), \"float32\")\n"
    "        for i, j_0, j_1 in T.grid(4, 8, 8):\n"
    "            with T.block(\"R_rf\"):\n"
    "                v_j_1, v_i, v_j_0 = T.axis.remap(\"SSR\", [j_1, i, j_0])\n"
    "                T.reads(A[v_i, v_j_1 + v_j_0 * 8])\n"
    "                T.writes(R_rf[v_j_1, v_i])\n"
    "                with T.init():\n"
    "                    R_rf[v_j_1, v_i] = T.float32(0.0)\n"
    "                R_rf[v_j_1, v_i] = R_rf[v_j_1, v_i] + A[v_i, v_j_0 * 8 + v_j_1]\n"
    "        for i_1, j_1_1 in T.grid(4, 8):\n"
    "            with T.block(\"R\"):\n"
    "                v_j_1_1, v_i_1 = T.axis.remap(\"RS\", [j_1_1, i_1])\n"
    "                T.reads(R_rf[v_j_1_1, v_i_1])\n"
    "                T.writes(R[v_i_1])\n"
    "                with T.init():\n"
    "                    R[v_i_1] = T.float32(0.0)\n"
    "                R[v_i_1] = R[v_i_1] + R_rf[v_j_1_1, v_i_1]\n";

/* row_sum with j split [None, 8]: rfactor either piece at every axis. */
static void rfactor_row_sum(int64_t n, int piece, int axis, const char *expected) {
  ir_workload_t *w = TU_LOAD("row_sum", {"M", 4}, {"N", n});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t r = tu_block(s, "R"), l[8], sj[2], rf;
  tu_loops(s, r, l);
  tu_split2(s, l[1], 8, sj);
  tn_err_t err = {0};
  ck_assert_msg(sch_rfactor(s, sj[piece], axis, &rf, &err) == 0, "piece %d axis %d: %s", piece, axis, err.msg);
  ck_assert_str_eq(block_name(s, rf), "R_rf");
  ck_assert_str_eq(block_name(s, r), "R");
  char *t = tu_ir_text(sch_func(s));
  if (expected) ck_assert_str_eq(t, expected);
  assert_has(t, axis == 0 || axis == -2 ? "R_rf = T.alloc_buffer((8, 4)" : "R_rf = T.alloc_buffer((4, 8)");
  free(t);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}

START_TEST(t_rfactor_row_sum_text) { rfactor_row_sum(64, 1, 0, row_sum_rfactor_inner); }
END_TEST

START_TEST(t_rfactor_row_sum_pieces_and_axes) {
  for (int piece = 0; piece < 2; piece++)
    for (int axis = -2; axis <= 1; axis++) rfactor_row_sum(64, piece, axis, NULL);
}
END_TEST

/* N = 60: the split has a predicate; the write-back drops it with j_0. */
START_TEST(t_rfactor_row_sum_predicated) {
  rfactor_row_sum(60, 0, 0, NULL);
  rfactor_row_sum(60, 1, 1, NULL);
}
END_TEST

/* K = 16 split [7, None]: 7 x 3 with the guard k_0*3 + k_1 < 16, so k_0 = 6
 * has no reduction instance at all.  rfactor over k_0 must not add that row
 * of C_rf (never initialised) into C: the write-back keeps the guard at
 * k_1 = 0.  (Found by fuzz_trace: the output differed.) */
START_TEST(t_rfactor_imperfect_split_outer) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 16});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t c = tu_block(s, "C"), l[8], sk[2], rf;
  tu_loops(s, c, l);
  sch_arg_t fs[2] = {sch_arg_int(7), sch_arg_none()};
  tn_err_t err = {0};
  ck_assert_msg(sch_split(s, l[2], fs, 2, sk, &err) == 0, "split: %s", err.msg);
  ck_assert_msg(sch_rfactor(s, sk[0], 0, &rf, &err) == 0, "%s", err.msg);
  tu_assert_text_has(s, "T.where(k_0_1 * 3 < 16)");
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* matmul with k split: rfactor, then decompose both reductions. */
START_TEST(t_rfactor_matmul) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 16});
  for (int piece = 0; piece < 2; piece++) {
    sch_t *s = sch_create(w->func, 1);
    sch_rv_t c = tu_block(s, "C"), l[8], sk[2], rf, init;
    tu_loops(s, c, l);
    tu_split2(s, l[2], 4, sk);
    tn_err_t err = {0};
    ck_assert_msg(sch_rfactor(s, sk[piece], 2 * piece, &rf, &err) == 0, "%s", err.msg);
    char *t = tu_ir_text(sch_func(s));
    assert_has(t, "C_rf = T.alloc_buffer((4, 4, 4)");
    assert_has(t, piece ? "T.writes(C_rf[v_i, v_j, v_k_1])" : "T.writes(C_rf[v_k_0, v_i, v_j])");
    free(t);
    tu_assert_same_outputs(w->func, sch_func(s), 11);
    ck_assert_int_eq(tu_loops(s, rf, l), 4);
    ck_assert_msg(sch_decompose_reduction(s, rf, l[2], &init, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(block_name(s, init), "C_rf_init");
    ck_assert_int_eq(tu_loops(s, c, l), 3);
    ck_assert_msg(sch_decompose_reduction(s, c, l[0], &init, &err) == 0, "%s", err.msg);
    tu_assert_same_outputs(w->func, sch_func(s), 11);
    sch_free(s);
  }
  ir_workload_free(w);
}
END_TEST

START_TEST(t_rfactor_errors) {
  ir_workload_t *w = TU_LOAD("row_sum", {"M", 4}, {"N", 64});
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t r = tu_block(s, "R"), l[8], sj[2];
  tu_loops(s, r, l);
  expect_fail(s, OP_RFACTOR, l[0], 0, "loop i feeds spatial iterator v_i of block \"R\"");
  expect_fail(s, OP_RFACTOR, l[1], 2, "factor_axis 2 is out of range for R (1 dimensions): expected -2..1");
  expect_fail(s, OP_RFACTOR, l[1], -3, "factor_axis -3 is out of range");
  tu_split2(s, l[1], 8, sj);
  tn_err_t err = {0};
  ck_assert_int_eq(sch_unroll(s, sj[1], &err), 0);
  expect_fail(s, OP_RFACTOR, sj[1], 0, "loop j_1 has kind unroll; rfactor needs a serial loop");
  sch_free(s);

  s = sch_create(w->func, 1);
  r = tu_block(s, "R");
  tu_loops(s, r, l);
  sch_rv_t fused;
  ck_assert_msg(sch_fuse(s, l, 2, &fused, &err) == 0, "fuse: %s", err.msg);
  expect_fail(s, OP_RFACTOR, fused, 0, "loop i_j_fused feeds both spatial and reduction iterators of block \"R\"");
  sch_free(s);

  s = sch_create(w->func, 1);
  r = tu_block(s, "R");
  tu_loops(s, r, l);
  sch_rv_t s3[3];
  sch_arg_t fs[3] = {sch_arg_int(8), sch_arg_int(1), sch_arg_int(8)};
  ck_assert_msg(sch_split(s, l[1], fs, 3, s3, &err) == 0, "split: %s", err.msg);
  expect_fail(s, OP_RFACTOR, s3[1], 0, "loop j_1 feeds no reduction iterator of block \"R\"");
  sch_free(s);
  ir_workload_free(w);

  /* Hand-made updates that are not a sum/max/min reduction. */
  w = TU_LOAD("row_sum", {"M", 4}, {"N", 8});
  ir_func_t *f = w->func;
  ir_block_t *rb = &ir_func_find_block(f, "R")->u.block;
  ir_expr_t *init0 = rb->init->u.store.value, *upd = rb->body->u.store.value;
  rb->init->u.store.value = ir_float(f, IR_FLOAT32, 1.0);
  s = sch_create(f, 1);
  tu_loops(s, tu_block(s, "R"), l);
  expect_fail(s, OP_RFACTOR, l[1], 0, "the init of block \"R\" is not the identity of its reduction");
  sch_free(s);
  rb->init->u.store.value = init0;
  rb->body->u.store.value = ir_bin(f, IR_E_SUB, upd->u.bin.a, upd->u.bin.b);
  s = sch_create(f, 1);
  tu_loops(s, tu_block(s, "R"), l);
  expect_fail(s, OP_RFACTOR, l[1], 0, "block \"R\" does not update R as R = R + x, max(R, x) or min(R, x)");
  sch_free(s);
  ir_expr_t *zero[1] = {ir_int(f, 0)};
  rb->body->u.store.value = ir_bin(f, IR_E_ADD, upd->u.bin.a, ir_bin(f, IR_E_MUL, upd->u.bin.b, ir_load(f, rb->body->u.store.buf, zero, 1)));
  ir_block_infer_regions(f, rb);
  s = sch_create(f, 1);
  tu_loops(s, tu_block(s, "R"), l);
  expect_fail(s, OP_RFACTOR, l[1], 0, "block \"R\" reads R other than in its update");
  sch_free(s);
  ir_workload_free(w);

  /* A producer computed under the reduction's outermost loop. */
  w = tu_parse("input A: float32[4, 8]\n"
              "temp T: float32[4, 8]\n"
              "output R: float32[4]\n"
              "T[i, j] = A[i, j] * 2.0\n"
              "R[i] = sum(j < 8: T[i, j])\n");
  s = sch_create(w->func, 1);
  r = tu_block(s, "R");
  tu_loops(s, r, l);
  ck_assert_msg(sch_compute_at(s, tu_block(s, "T"), l[0], true, &err) == 0, "compute_at: %s", err.msg);
  expect_fail(s, OP_RFACTOR, l[1], 0, "block \"R\" is not the first block under its outermost loop");
  sch_free(s);
  ir_workload_free(w);

  w = TU_LOAD("vector_add", {"N", 8});
  s = sch_create(w->func, 1);
  tu_loops(s, tu_block(s, "C"), l);
  expect_fail(s, OP_RFACTOR, l[0], 0, "block \"C\" has no init; rfactor needs a reduction block");
  sch_free(s);
  ir_workload_free(w);

  w = TU_LOAD("matmul", {"M", 4}, {"N", 4}, {"K", 8});
  s = sch_create(w->func, 1);
  sch_rv_t c = tu_block(s, "C"), init;
  tu_loops(s, c, l);
  ck_assert_int_eq(sch_decompose_reduction(s, c, l[0], &init, &err), 0);
  tu_loops(s, c, l);
  expect_fail(s, OP_RFACTOR, l[2], 0, "block \"C_update\" has no init");
  sch_free(s);

  s = sch_create(w->func, 1);
  c = tu_block(s, "C");
  tu_loops(s, c, l);
  ck_assert_int_eq(sch_decompose_reduction(s, c, l[1], &init, &err), 0);
  expect_fail(s, OP_RFACTOR, l[0], 0, "loop i holds 2 blocks");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("sch_reduce");
  TU_TCASE(s, "decompose_reduction", 0, t_decompose_at_outer_loop, t_decompose_at_reduction_loop,
           t_decompose_at_middle_loop, t_decompose_split_loops, t_decompose_errors);
  TU_TCASE(s, "compute_inline", 0, t_inline_softmax, t_inline_conv2d_padding, t_inline_after_compute_at,
           t_inline_index_expressions, t_inline_errors);
  TU_TCASE(s, "reverse_compute_inline", 0, t_reverse_inline_epilogue, t_reverse_inline_into_tiled_write_back,
           t_reverse_inline_general_store, t_reverse_inline_errors);
  TU_TCASE(s, "rfactor", 0, t_rfactor_row_sum_text, t_rfactor_row_sum_pieces_and_axes,
           t_rfactor_row_sum_predicated, t_rfactor_imperfect_split_outer, t_rfactor_matmul, t_rfactor_errors);
  return s;
}

TN_TEST_MAIN(make_suite)
