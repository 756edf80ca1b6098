/* test_tvmscript.c — suite "tvmscript": every workload in workloads/ printed
 * as TVM 0.27 TVMScript (ir_print_tvmscript) imports back (ir_tvmscript_import)
 * to a workload of the same structural hash; TVM's own printing of a te
 * matmul imports; what lies outside the subset is an error at FILE:LINE:COL. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "testir.h"

/* Imports text; returns the workload text (free it) or NULL with err set. */
static char *import(const char *text, tn_err_t *err) {
  tn_buf_t b;
  tn_buf_init(&b);
  if (ir_tvmscript_import("f.py", text, strlen(text), &b, err) < 0) {
    tn_buf_free(&b);
    return NULL;
  }
  return tn_buf_take(&b);
}

/* f printed as TVMScript, imported, parsed: the same hash. */
static void assert_round_trip(const char *label, const ir_func_t *f) {
  tn_buf_t py;
  tn_buf_init(&py);
  ir_print_tvmscript(f, &py);
  tn_err_t err = {0};
  char *tw = import(tn_buf_str(&py), &err);
  ck_assert_msg(tw, "%s: import: %s\n%s", label, err.msg, tn_buf_str(&py));
  ir_workload_t *w = tu_parse(tw);
  ck_assert_msg(tu_same_hash(w->func, f), "%s: hash differs after the round trip:\n%s\n%s", label,
                tn_buf_str(&py), tw);
  ir_workload_free(w);
  free(tw);
  tn_buf_free(&py);
}

START_TEST(t_workloads) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/workloads", TUNED_SOURCE_ROOT);
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".tw") != 0) continue;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(len - 3), e->d_name);
    ir_workload_t *w = tu_load(name, NULL, 0);
    assert_round_trip(name, w->func);
    ir_workload_free(w);
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, 16);
}
END_TEST

/* The language's expression forms and types, through TVMScript and back. */
static const char *const programs[] = {
    "input A: float64[8, 4]\ninput I: int32[8]\ninput L: int64[8]\noutput B: float64[8]\noutput C: int32[8]\n"
    "output D: int64[8]\noutput E: float32[]\n"
    "B[i] = max(k < 4: select(i >= 1 && i < 7 || !(k == 2), abs(A[i, k]) + pow(A[i, k], 2.0), log(1.5) - tanh(A[i, 0])))\n"
    "C[i] = min(k < 4: (I[i] + k) // 3 % 5 - min(I[i], 2) * max(-I[i], i))\n"
    "D[i] = L[i] * 4294967296 + int64(I[i]) - -L[i]\n"
    "E = sum(i < 8, k < 4: float32(A[i, k]) / 3.0)\n",
    "input X: float16[4, 16]\noutput S: float16[4, 16]\n"
    "S[i, j] = exp(X[i, j] - max(k < 16: X[i, k])) / sum(k < 16: exp(X[i, k] - max(k < 16: X[i, k])))\n",
    "input A: bfloat16[6]\noutput B: float32[3]\nB[i] = sqrt(float32(A[2 * i + 1]) * 0.5 + 1e-30)\n",
};

START_TEST(t_programs) {
  ir_workload_t *w = tu_parse(programs[_i]);
  assert_round_trip(programs[_i], w->func);
  ir_workload_free(w);
}
END_TEST

/* TVM 0.27's printing of te.create_prim_func of a 64^3 matmul (an
 * @I.ir_module), and the same in the older tir dialect with T.handle
 * parameters: both are workloads/matmul.tw at M = N = K = 64. */
static const char *const tvm_matmul[] = {
    "# from tvm.script import ir as I\n# from tvm.script import tirx as T\n# from tvm.tirx.layout import Axis\n\n"
    "@I.ir_module\nclass Module:\n    @T.prim_func(s_tir=True)\n"
    "    def main(A: T.Buffer((64, 64), \"float32\"), B: T.Buffer((64, 64), \"float32\"), C: T.Buffer((64, 64), \"float32\")):\n"
    "        T.func_attr({\"tirx.noalias\": True})\n        # with T.sblock(\"root\"):\n"
    "        for i, j, k in T.grid(64, 64, 64):\n            with T.sblock(\"C\"):\n"
    "                v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
    "                T.reads(A[v_i, v_k], B[v_k, v_j])\n                T.writes(C[v_i, v_j])\n"
    "                with T.init():\n                    C[v_i, v_j] = T.float32(0.0)\n"
    "                C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n",
    "from tvm.script import tir as T\n\n@T.prim_func\ndef mm(a: T.handle, b: T.handle, c: T.handle) -> None:\n"
    "    A = T.match_buffer(a, [64, 64])\n    B = T.match_buffer(b, [64, 64], dtype=\"float32\")\n"
    "    C = T.match_buffer(c, (64, 64), \"float32\")\n"
    "    for i in T.serial(0, 64):\n        for j in range(64):\n            for k in range(0, 64):\n"
    "                with T.block(\"C\"):\n                    vi = T.axis.spatial(64, i)\n"
    "                    vj = T.axis.S(64, j)\n                    vk = T.axis.reduce(64, k)\n"
    "                    with T.init():\n                        C[vi, vj] = 0.0\n"
    "                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n",
};

START_TEST(t_tvm_printed) {
  tn_err_t err = {0};
  char *tw = import(tvm_matmul[_i], &err);
  ck_assert_msg(tw, "import: %s", err.msg);
  ir_workload_t *w = tu_parse(tw), *ref = tu_load_sets("matmul", "M=64,N=64,K=64");
  ck_assert_msg(tu_same_hash(w->func, ref->func), "%s", tw);
  ir_workload_free(w);
  ir_workload_free(ref);
  free(tw);
}
END_TEST

/* Outside the subset: the first text replaced by the second in the
 * printed matmul (workloads/matmul.tw at 64^3), and the message expected. */
static const struct {
  const char *from, *to, *want;
} bad[] = {
    {"for i, j, k in T.grid(64, 64, 64):", "for i, j, k in T.grid(64, 64, 64):\n      pass",
     "f.py:9:9: unexpected indentation"},
    {"T.grid(64, 64, 64)", "T.grid(64, 64, n)", "f.py:7:35: a loop extent must be a constant >= 1"},
    {"T.grid(64, 64, 64)", "T.parallel(64)", "f.py:7:20: loop kind 'parallel' is not in the workload language"},
    {"\"SSR\"", "\"SRS\"", "f.py:8:9: spatial iterator 'v_k' after a reduce iterator"},
    {"[i, j, k]", "[j, i, k]", "iterator 1 ('v_i') is bound to 'j', not to loop 1 ('i')"},
    {"C[v_i, v_j] = T.float32(0.0)", "C[v_i, v_j] = T.float32(1.0)",
     "f.py:13:31: the init value must be the identity of sum for float32 (0.0)"},
    {"C[v_i, v_j] + A[v_i, v_k]", "C[v_j, v_i] + A[v_i, v_k]", "f.py:14:13: a reduction's update must be"},
    {"T.writes(C[v_i, v_j])", "T.writes(C[v_i, v_j])\n            T.where(v_i < 3)", "f.py:12:13: T.where"},
    {"with T.sblock(\"C\")", "with T.sblock(\"D\")", "block \"D\" writes 'C'"},
    {"T.writes(C[v_i, v_j])", "T.writes(C[v_i, v_j])\n            T.sblock_attr({\"axis\": 1})",
     "f.py:12:13: block annotations are not in the workload language"},
    {"A: T.Buffer((64, 64), \"float32\")", "A: T.Buffer((64, 64), \"int8\")", "f.py:4:32: dtype \"int8\" is not in"},
    {"A: T.Buffer((64, 64), \"float32\")", "A: T.Buffer((n, 64), \"float32\")", "f.py:4:23: a dimension must be a constant"},
    {"+ A[v_i, v_k]", "+ T.erf(A[v_i, v_k])", "f.py:14:41: T.erf is not in the workload language"},
    {"+ A[v_i, v_k]", "+ A[v_i, v_k] ** 2", "f.py:14:53: '**' is not supported"},
    {"A[v_i, v_k] * B", "A[v_i, v_k] * T.float32(v_i / 2) * B",
     "f.py:14:69: '/' of integers truncates in TVM"},
    {"A[v_i, v_k] * B", "A[v_i, v_k] * Q[v_i] * B", "f.py:14:55: unknown buffer 'Q'"},
    {"A: T.Buffer", "int: T.Buffer", "f.py:4:15: 'int' cannot name a tensor"},
    {"# with T.sblock(\"root\"):", "X = T.alloc_shared((64,))", "f.py:6:9: shared and local buffers come from schedules"},
    {"# with T.sblock(\"root\"):", "X = T.alloc_buffer((64,))", "f.py:6:5: no block writes 'X'"},
    {"@T.prim_func(s_tir=True)", "", "f.py:4:1: def main is not a @T.prim_func"},
    {"v_i, v_j, v_k = T.axis", "v_i, v_j, v_k = $ T.axis", "f.py:9:29: unexpected character '$'"},
    {"with T.init():", "if True:", "f.py:12:13: 'if' is not supported"},
    {"C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]", "C[v_i, v_j] = A[v_i, v_k] < B[v_k, v_j] < 1.0",
     "f.py:14:53: chained comparisons are not supported"},
};

START_TEST(t_errors) {
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=64,K=64");
  tn_buf_t py;
  tn_buf_init(&py);
  ir_print_tvmscript(w->func, &py);
  const char *text = tn_buf_str(&py), *at = strstr(text, bad[_i].from);
  ck_assert_msg(at, "'%s' not in\n%s", bad[_i].from, text);
  tn_buf_t src;
  tn_buf_init(&src);
  tn_buf_putn(&src, text, (size_t)(at - text));
  tn_buf_put(&src, bad[_i].to);
  tn_buf_put(&src, at + strlen(bad[_i].from));
  tn_err_t err = {0};
  char *tw = import(tn_buf_str(&src), &err);
  ck_assert_msg(!tw, "imported:\n%s\nfrom\n%s", tw, tn_buf_str(&src));
  ck_assert_int_eq(err.code, TN_EINVAL);
  ck_assert_msg(strstr(err.msg, bad[_i].want), "got '%s', want '%s' in\n%s", err.msg, bad[_i].want, tn_buf_str(&src));
  tn_buf_free(&src);
  tn_buf_free(&py);
  ir_workload_free(w);
}
END_TEST

/* No function, two functions, a workload that the language then refuses. */
START_TEST(t_file_errors) {
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"from tvm.script import tirx as T\n", "f.py: no @T.prim_func in the file"},
      {"", "f.py: no @T.prim_func in the file"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\")):\n    pass\n@T.prim_func\ndef b(A: T.Buffer((4,), "
       "\"float32\")):\n    pass\n",
       "f.py:5:1: more than one prim_func"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\")):\n    T.evaluate(0)\n", "f.py:3:5: unsupported statement"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\")):\n    pass\n", "f.py:2:1: no block writes a parameter"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\"), B: T.Buffer((4,), \"float32\")):\n"
       "    for i in range(4):\n        with T.block(\"B\"):\n            v = T.axis.spatial(4, i)\n"
       "            B[v] = A[v + 1]\n",
       "f.py: the imported workload does not check: (the workload from f.py):4:10: access A[i + 1]"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\"), B: T.Buffer((4,), \"float32\")):\n"
       "    for i in range(4):\n        with T.block(\"B\"):\n            v = T.axis.spatial(4, i)\n"
       "            B[v] = A[v]\n        with T.block(\"B\"):\n            v = T.axis.spatial(4, i)\n"
       "            B[v] = A[v]\n",
       "f.py:3:5: this loop holds 2 statements"},
      {"@T.prim_func\ndef a(A: T.Buffer((4,), \"float32\"), B: T.Buffer((4,), \"float32\")):\n"
       "    for i in range(4):\n        with T.block(\"B\"):\n            v = T.axis.spatial(4, i)\n"
       "            B[v] = T.float32(\"inf\")\n",
       "f.py:6:30: the workload language has only finite numbers"},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    tn_err_t err = {0};
    char *tw = import(cases[i].text, &err);
    ck_assert_msg(!tw, "case %zu imported:\n%s", i, tw);
    ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: got '%s', want '%s'", i, err.msg, cases[i].want);
  }
}
END_TEST

/* Python's words and T, which TVMScript text cannot use as names, get a
 * suffix, as TVM's printer gives them. */
START_TEST(t_python_names) {
  ir_workload_t *w = tu_parse("input lambda: float32[4]\noutput T: float32[4]\nT[pass] = lambda[pass] * 2.0\n");
  tn_buf_t py;
  tn_buf_init(&py);
  ir_print_tvmscript(w->func, &py);
  const char *text = tn_buf_str(&py);
  ck_assert_msg(strstr(text, "def main(lambda_1: T.Buffer((4,), \"float32\"), T_1: T.Buffer((4,), \"float32\")):\n") &&
                    strstr(text, "    for pass_1 in range(4):\n") &&
                    strstr(text, "            T_1[v_pass] = lambda_1[v_pass] * T.float32(2.0)\n"),
                "%s", text);
  tn_buf_free(&py);
  ir_workload_free(w);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("tvmscript");
  TCase *tc = TU_TCASE(s, "round-trip", 60, t_workloads, t_file_errors, t_python_names);
  tcase_add_loop_test(tc, t_programs, 0, (int)TN_ARRAY_LEN(programs));
  tcase_add_loop_test(tc, t_tvm_printed, 0, (int)TN_ARRAY_LEN(tvm_matmul));
  tcase_add_loop_test(tc, t_errors, 0, (int)TN_ARRAY_LEN(bad));
  return s;
}

TN_TEST_MAIN(make)
