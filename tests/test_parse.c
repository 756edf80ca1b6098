/* test_parse.c — the workload language front end: IR structure produced for
 * the documented examples, overrides, typing, statement order, and every
 * error class with its position and message. */
#include "testutil.h"

#include <float.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ir/ir.h"

#define MATMUL                                                                                               \
  "# matrix multiply\n"                                                                                      \
  "param M = 1024, N = 1024, K = 1024\n"                                                                     \
  "input  A: float32[M, K]\n"                                                                                \
  "input  B: float32[K, N]\n"                                                                                \
  "output C: float32[M, N]\n"                                                                                \
  "C[i, j] = sum(k < K: A[i, k] * B[k, j])\n"

/* Parses `src` named "t.tw"; fails the test with the message on error. */
static ir_workload_t *parse_ok(const char *src, const ir_param_set_t *ovr, int novr) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  int rc = ir_workload_parse("t.tw", src, strlen(src), ovr, novr, &w, &err);
  ck_assert_msg(rc == 0, "parse failed: %s\n--- source:\n%s", err.msg, src);
  ck_assert_ptr_nonnull(w);
  return w;
}

/* Parses `src`, expects an error at line:col whose message contains `what`. */
static void parse_err(const char *src, int line, int col, const char *what) {
  ir_workload_t *w = (ir_workload_t *)1;
  tn_err_t err = {0};
  int rc = ir_workload_parse("t.tw", src, strlen(src), NULL, 0, &w, &err);
  ck_assert_msg(rc < 0, "expected an error containing \"%s\" for:\n%s", what, src);
  ck_assert_ptr_null(w);
  ck_assert_msg(err.line == line && err.col == col, "error at %d:%d, expected %d:%d: %s", err.line, err.col,
                line, col, err.msg);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "t.tw:%d:%d: ", line, col);
  ck_assert_msg(strncmp(err.msg, prefix, strlen(prefix)) == 0, "message \"%s\" lacks prefix \"%s\"", err.msg,
                prefix);
  ck_assert_msg(strstr(err.msg, what), "message \"%s\" lacks \"%s\"", err.msg, what);
}

static ir_stmt_t *root_body(const ir_workload_t *w) { return ir_func_root(w->func)->body; }

/* The block at the bottom of a loop nest, collecting the loops on the way. */
static ir_block_t *nest_block(ir_stmt_t *s, ir_loop_t **loops, int *nloops) {
  *nloops = 0;
  while (s->kind == IR_S_LOOP) {
    loops[(*nloops)++] = &s->u.loop;
    s = s->u.loop.body;
  }
  ck_assert_int_eq(s->kind, IR_S_BLOCK);
  return &s->u.block;
}

static void assert_load(const ir_expr_t *e, const char *buf, const ir_var_t *v0, const ir_var_t *v1) {
  ck_assert_int_eq(e->kind, IR_E_LOAD);
  ck_assert_str_eq(e->u.load.buf->name, buf);
  ck_assert_int_eq(e->u.load.n, 2);
  ck_assert_int_eq(e->u.load.idx[0]->kind, IR_E_VAR);
  ck_assert_ptr_eq(e->u.load.idx[0]->u.var, v0);
  ck_assert_int_eq(e->u.load.idx[1]->kind, IR_E_VAR);
  ck_assert_ptr_eq(e->u.load.idx[1]->u.var, v1);
}

/* ---- the documented matmul -------------------------------------------- */

START_TEST(t_matmul_structure) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_workload_parse("workloads/matmul.tw", MATMUL, strlen(MATMUL), NULL, 0, &w, &err), 0);
  ck_assert_str_eq(w->name, "matmul");
  ck_assert_str_eq(w->path, "workloads/matmul.tw");
  ck_assert_str_eq(w->source, MATMUL);
  ck_assert_int_eq(w->nparams, 3);
  ck_assert_str_eq(w->params[0].name, "M");
  ck_assert_str_eq(w->params[2].name, "K");
  ck_assert_int_eq(w->params[1].value, 1024);
  ck_assert_int_eq(w->params[1].def, 1024);
  ck_assert_int_eq(w->params[1].line, 2);
  ck_assert_int_eq(w->params[1].col, 17);

  ir_func_t *f = w->func;
  ck_assert_str_eq(f->name, "main");
  ck_assert_int_eq(f->nparams, 3);
  const char *names[] = {"A", "B", "C"};
  for (int i = 0; i < 3; i++) {
    ck_assert_str_eq(f->params[i]->name, names[i]);
    ck_assert_int_eq(f->params[i]->dtype, IR_FLOAT32);
    ck_assert_int_eq(f->params[i]->ndim, 2);
    ck_assert_int_eq(f->params[i]->shape[0], 1024);
    ck_assert_int_eq(f->params[i]->scope, IR_SCOPE_GLOBAL);
  }
  ck_assert_int_eq(f->params[0]->role, IR_BUF_INPUT);
  ck_assert_int_eq(f->params[2]->role, IR_BUF_OUTPUT);
  ck_assert_double_eq(f->params[0]->init_lo, -1.0);
  ck_assert_double_eq(f->params[0]->init_hi, 1.0);

  ck_assert_int_eq(f->root->kind, IR_S_BLOCK);
  ck_assert_str_eq(ir_func_root(f)->name, "root");
  ck_assert_int_eq(ir_func_root(f)->niters, 0);
  ck_assert_int_eq(ir_func_root(f)->nallocs, 0);
  ir_loop_t *loops[16];
  int nloops;
  ir_block_t *b = nest_block(root_body(w), loops, &nloops);
  ck_assert_int_eq(nloops, 3);
  const char *lnames[] = {"i", "j", "k"};
  for (int i = 0; i < 3; i++) {
    ck_assert_str_eq(loops[i]->var->name, lnames[i]);
    ck_assert_int_eq(loops[i]->extent, 1024);
    ck_assert_int_eq(loops[i]->kind, IR_LOOP_SERIAL);
  }
  ck_assert_str_eq(b->name, "C");
  ck_assert_int_eq(b->niters, 3);
  const char *inames[] = {"v_i", "v_j", "v_k"};
  for (int i = 0; i < 3; i++) {
    ck_assert_str_eq(b->iters[i].var->name, inames[i]);
    ck_assert_int_eq(b->iters[i].extent, 1024);
    ck_assert_int_eq(b->iters[i].kind, i < 2 ? IR_ITER_SPATIAL : IR_ITER_REDUCE);
    ck_assert_int_eq(b->iters[i].binding->kind, IR_E_VAR);
    ck_assert_ptr_eq(b->iters[i].binding->u.var, loops[i]->var);
  }
  ck_assert_ptr_null(b->predicate);
  const ir_var_t *vi = b->iters[0].var, *vj = b->iters[1].var, *vk = b->iters[2].var;

  ir_stmt_t *init = b->init;
  ck_assert_ptr_nonnull(init);
  ck_assert_int_eq(init->kind, IR_S_STORE);
  ck_assert_str_eq(init->u.store.buf->name, "C");
  ck_assert_int_eq(init->u.store.value->kind, IR_E_FLOAT);
  ck_assert_int_eq(init->u.store.value->dtype, IR_FLOAT32);
  ck_assert_double_eq(init->u.store.value->u.fval, 0.0);

  ir_stmt_t *body = b->body;
  ck_assert_int_eq(body->kind, IR_S_STORE);
  ck_assert_ptr_eq(body->u.store.buf, f->params[2]);
  ck_assert_ptr_eq(body->u.store.idx[0]->u.var, vi);
  ck_assert_ptr_eq(body->u.store.idx[1]->u.var, vj);
  const ir_expr_t *v = body->u.store.value;
  ck_assert_int_eq(v->kind, IR_E_ADD);
  ck_assert_int_eq(v->dtype, IR_FLOAT32);
  assert_load(v->u.bin.a, "C", vi, vj);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_MUL);
  assert_load(v->u.bin.b->u.bin.a, "A", vi, vk);
  assert_load(v->u.bin.b->u.bin.b, "B", vk, vj);

  ck_assert_int_eq(b->nreads, 2);
  ck_assert_str_eq(b->reads[0].buf->name, "A");
  ck_assert_str_eq(b->reads[1].buf->name, "B");
  ck_assert_int_eq(b->nwrites, 1);
  ck_assert_str_eq(b->writes[0].buf->name, "C");

  tn_buf_t out;
  tn_buf_init(&out);
  ir_print_func(f, &out);
  ck_assert_ptr_nonnull(strstr(tn_buf_str(&out), "with T.block(\"C\")"));
  tn_buf_free(&out);
  ck_assert_double_eq(ir_func_flops(f), 2.0 * 1024 * 1024 * 1024);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_overrides) {
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t ovr[2];
  tn_err_t err = {0};
  ck_assert_int_eq(ir_param_set_parse("M=64", a, &ovr[0], &err), 0);
  ck_assert_int_eq(ir_param_set_parse("K=-3", a, &ovr[1], &err), 0);
  ck_assert_str_eq(ovr[0].name, "M");
  ck_assert_int_eq(ovr[0].value, 64);
  ck_assert_int_eq(ovr[1].value, -3);
  ovr[1].value = 16;
  ir_workload_t *w = parse_ok(MATMUL, ovr, 2);
  ck_assert_int_eq(w->params[0].value, 64);
  ck_assert_int_eq(w->params[0].def, 1024);
  ck_assert_int_eq(w->params[1].value, 1024);
  ck_assert_int_eq(w->params[2].value, 16);
  ck_assert_int_eq(w->func->params[0]->shape[0], 64);
  ck_assert_int_eq(w->func->params[0]->shape[1], 16);
  ir_loop_t *loops[16];
  int n;
  ir_block_t *b = nest_block(root_body(w), loops, &n);
  ck_assert_int_eq(loops[0]->extent, 64);
  ck_assert_int_eq(loops[2]->extent, 16);
  ck_assert_int_eq(b->iters[2].extent, 16);
  ir_workload_free(w);

  /* an override that names no parameter, and a shape made invalid by one */
  ir_param_set_t bad = {.name = "X", .value = 1};
  ck_assert_int_eq(ir_workload_parse("mm.tw", MATMUL, strlen(MATMUL), &bad, 1, &w, &err), TN_EINVAL);
  ck_assert_ptr_null(w);
  ck_assert_str_eq(err.msg, "mm.tw: --set X=1: 'X' is not a parameter of this workload (declared: M, N, K)");
  ir_param_set_t zero = {.name = "N", .value = 0};
  ck_assert_int_eq(ir_workload_parse("mm.tw", MATMUL, strlen(MATMUL), &zero, 1, &w, &err), TN_EINVAL);
  ck_assert_int_eq(err.line, 4);
  ck_assert_int_eq(err.col, 22);
  ck_assert_ptr_nonnull(strstr(err.msg, "dimension 1 of 'B' is 0 ('N'); expected a value >= 1"));
  ir_param_set_t twice[2] = {{.name = "M", .value = 2}, {.name = "M", .value = 3}};
  ck_assert_int_eq(ir_workload_parse("mm.tw", MATMUL, strlen(MATMUL), twice, 2, &w, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "--set M is given twice"));
  tn_arena_free(a);
}
END_TEST

START_TEST(t_param_set_parse) {
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t p;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_param_set_parse("batch_2=4611686018427387903", a, &p, &err), 0);
  ck_assert_str_eq(p.name, "batch_2");
  ck_assert_int_eq(p.value, INT64_C(4611686018427387903));
  ck_assert_int_eq(ir_param_set_parse("M64", a, &p, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "--set 'M64': expected NAME=VALUE (e.g. M=64)");
  ck_assert_int_eq(ir_param_set_parse("M=abc", a, &p, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "'abc' is not an integer"));
  ck_assert_int_eq(ir_param_set_parse("M=", a, &p, &err), TN_EINVAL);
  ck_assert_int_eq(ir_param_set_parse("M=12x", a, &p, &err), TN_EINVAL);
  ck_assert_int_eq(ir_param_set_parse("M=4611686018427387904", a, &p, &err), TN_EINVAL);
  ck_assert_int_eq(ir_param_set_parse("1M=3", a, &p, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "'1M' is not a parameter name"));
  ck_assert_int_eq(ir_param_set_parse("=3", a, &p, &err), TN_EINVAL);
  ck_assert_int_eq(ir_param_set_parse("A;B=3", a, &p, &err), TN_EINVAL);
  ck_assert_int_eq(ir_param_set_parse(NULL, a, &p, &err), TN_EINVAL);
  tn_arena_free(a);
}
END_TEST

/* ---- error classes ------------------------------------------------------ */

#define H2 "param M = 8, N = 8, K = 8\ninput A: float32[M, K]\ninput B: float32[K, N]\n"

typedef struct err_case {
  const char *src;
  int line, col;
  const char *what;
} err_case_t;

static const err_case_t err_cases[] = {
    /* unknown names */
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < K: A[i, k] * D[k, j])\n", 5, 32,
     "unknown tensor 'D' (declared: A, B, C)"},
    {H2 "output C: float32[M, N]\nE[i, j] = 1.0\n", 5, 1, "unknown tensor 'E' (declared: A, B, C)"},
    {H2 "output C: float32[M, Q]\n", 4, 22,
     "unknown parameter 'Q' in dimension 1 of 'C' (declared: M, N, K)"},
    {H2 "output C: float32[M, N]\nC[i, j] = A[i, x]\n", 5, 16,
     "unknown variable or parameter 'x' (variables here: i, j; parameters: M, N, K)"},
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < Z: A[i, k])\n", 5, 19,
     "unknown parameter 'Z' in the extent of reduction variable 'k'"},
    {H2 "output C: float32[M, N]\nC[i, j] = foo(A[i, j])\n", 5, 11, "unknown function 'foo'"},
    {"input A: float32[N]\nparam N = 4\n", 1, 18, "unknown parameter 'N'"},
    {"output C: float32[4]\nC[i] = A[i]\ninput A: float32[4]\n", 2, 8, "unknown tensor 'A' (declared: C)"},
    /* index counts */
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < K: A[i, k, 0] * B[k, j])\n", 5, 22,
     "tensor 'A' has 2 dimensions but 3 indices were given"},
    {H2 "output C: float32[M, N]\nC[i] = 0.0\n", 5, 1, "tensor 'C' has 2 dimensions but 1 index was given"},
    {H2 "output C: float32[M, N]\nC[i, j] = A\n", 5, 11,
     "tensor 'A' has 2 dimensions but 0 indices were given"},
    {H2 "output C: float32[M, N]\nC[i, j + 1] = 0.0\n", 5, 6,
     "variable names only (e.g. C[i, j]), found 'j + 1'"},
    /* dtypes */
    {H2 "output C: float31[M, N]\n", 4, 11,
     "unknown dtype 'float31' (expected float16, bfloat16, float32, float64, int32 or int64)"},
    {"input A: bool[4]\n", 1, 10, "unknown dtype 'bool'"},
    {"input A: [4]\n", 1, 10,
     "expected a dtype (float16, bfloat16, float32, float64, int32 or int64) after 'A:', found '['"},
    /* variables */
    {H2 "output C: float32[M, N]\nC[i, j] = sum(i < K: A[i, i])\n", 5, 15,
     "reduction variable 'i' is already used as an index variable"},
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < K, k < K: A[i, k])\n", 5, 22,
     "reduction variable 'k' is already used as a reduction variable"},
    {H2 "output C: float32[M, N]\nC[i, i] = 0.0\n", 5, 6,
     "index variable 'i' is already used as an index variable"},
    {H2 "output C: float32[M, N]\nC[i, M] = 0.0\n", 5, 6,
     "index variable 'M' has the same name as the parameter declared at 1:7"},
    {H2 "output C: float32[M, N]\nC[i, j] = sum(A < K: 1.0)\n", 5, 15,
     "reduction variable 'A' has the same name as the tensor declared at 2:7"},
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < 0: 1.0)\n", 5, 19,
     "the extent of reduction variable 'k' is 0 ('0'); expected a value >= 1"},
    {H2 "output C: float32[M, N]\nC[i, j] = sum(k < i: 1.0)\n", 5, 19, "unknown parameter 'i'"},
    /* assignment */
    {H2 "output C: float32[M, N]\nA[i, j] = 1.0\n", 5, 1, "cannot assign to input 'A'; inputs are read-only"},
    {H2 "output C: float32[M, N]\nC[i, j] = 1.0\nC[i, j] = 2.0\n", 6, 1,
     "tensor 'C' is assigned twice (first at 5:1)"},
    {H2 "output C: float32[M, N]\n", 4, 8,
     "output 'C' is never assigned; expected a statement 'C[...] = ...'"},
    {H2 "temp T: float32[M]\noutput C: float32[M]\nC[i] = 1.0\n", 4, 6, "temp 'T' is never assigned"},
    {"input A: float32[4]\n", 2, 1, "the workload has no output"},
    {"", 1, 1, "the workload has no output"},
    {H2 "output C: float32[M, N]\nM[i] = 1.0\n", 5, 1, "'M' is a parameter; only tensors can be assigned"},
    /* duplicates */
    {"param M = 1, M = 2\n", 1, 14, "'M' is already declared as a parameter at 1:7"},
    {"param M = 1\ninput M: float32[2]\n", 2, 7, "'M' is already declared as a parameter at 1:7"},
    {"input A: float32[2]\noutput A: float32[2]\n", 2, 8, "'A' is already declared as a tensor at 1:7"},
    /* cycles */
    {H2 "output C: float32[M]\ntemp T1: float32[M]\ntemp T2: float32[M]\nT1[i] = T2[i]\nT2[i] = T1[i]\n"
        "C[i] = T1[i]\n",
     7, 9, "cyclic definition: T1 -> T2 -> T1"},
    {H2 "output C: float32[M]\nC[i] = select(i > 0, C[i - 1], 0.0) + 1.0\n", 5, 22,
     "cyclic definition: C -> C"},
    {H2 "output C: float32[M]\ntemp T: float32[M]\nC[i] = T[i]\nT[i] = A[i, 0] + C[i]\n", 6, 8,
     "cyclic definition: C -> T -> C"},
    /* reductions */
    /* a reduction inside an expression becomes a temp indexed by the left side's variables only */
    {H2 "output C: float32[M]\nC[i] = sum(k < K: A[i, k] * max(l < K: A[l, k]))\n", 5, 29,
     "this max(...) inside sum(...) uses the outer reduction's variable 'k'; a reduction inside an expression may "
     "use only the left side's index variables"},
    {H2 "output C: float32[M]\nC[i] = 1.0 + sum(k < K: A[i, k])\ntemp C_sum0: float32[M]\n", 6, 6,
     "'C_sum0' is the temp of the reduction at 5:14 (a reduction inside an expression is computed into a temp of "
     "that name); choose another name"},
    {H2 "output C: float32[M]\nC[i] = sum(A[i, 0])\n", 5, 8,
     "sum needs reduction variables: sum(k < K: EXPR)"},
    {H2 "output C: float32[M]\nC[i] = exp(k < K: A[i, k])\n", 5, 8, "only the reductions sum, max and min"},
    {H2 "output C: float32[M]\nC[i] = sum(k: A[i, k])\n", 5, 13, "expected '<' after reduction variable 'k'"},
    /* types */
    {H2 "output C: float32[M]\nC[i] = A[i, 0] + (B[0, i] > 1)\n", 5, 19,
     "expected a number for the operands of '+', but 'B[0, i] > 1' is boolean"},
    {H2 "output C: float32[M]\nC[i] = select(A[i, 0], 1.0, 2.0)\n", 5, 15,
     "expected a boolean for the condition of select, but 'A[i, 0]' is float32"},
    {H2 "output C: float32[M]\nC[i] = A[i, 0] > 0.0\n", 5, 8,
     "expected a number for the value of a statement, but 'A[i, 0] > 0.0' is boolean"},
    {H2 "output C: float32[M]\nC[i] = select(i > 0 && A[i, 0], 1.0, 2.0)\n", 5, 24,
     "expected a boolean for '&&', but 'A[i, 0]' is float32"},
    {H2 "output C: float32[M]\nC[i] = select(!i, 1.0, 2.0)\n", 5, 16,
     "expected a boolean for '!', but 'i' is int32"},
    {H2 "output C: float32[M]\nC[i] = A[i, 0] // 2.0\n", 5, 16,
     "'//' needs integer operands, but they are float32"},
    {H2 "output C: float32[M]\nC[i] = A[i, 0] % 2\n", 5, 16, "'%' needs integer operands"},
    {H2 "output C: float32[M]\nC[i] = A[i * 0.5, 0]\n", 5, 10,
     "index 0 of 'A' must be an int32 expression, but 'i * 0.5' is float32"},
    {H2 "output C: float32[M]\nC[i] = -(i < 2)\n", 5, 10,
     "expected a number for '-', but 'i < 2' is boolean"},
    {H2 "output C: float32[M]\nC[i] = pow(A[i, 0])\n", 5, 8, "pow takes 2 arguments, got 1"},
    {H2 "output C: float32[M]\nC[i] = select(i < 2, 1.0)\n", 5, 8, "select takes 3 arguments, got 2"},
    {H2 "output C: float32[M]\nC[i] = A(i, 0)\n", 5, 8, "'A' is a tensor: index it with [...]"},
    {"param N = 4\ninput A: float16[N]\noutput C: float16[N]\nC[i] = A[i] * 70000\n", 4, 15,
     "constant '70000' (70000) is out of range for float16"},
    {"param N = 4\ninput A: int32[N]\noutput C: int32[N]\nC[i] = A[i] + 4294967296\n", 4, 15,
     "integer constant '4294967296' = 4294967296 does not fit in int32"},
    /* ranges */
    {"param N = 1024\ninput A: float32[N]\noutput C: float32[N]\nC[i] = A[i + 1]\n", 4, 10,
     "access A[i + 1] can reach index 1024 in dimension 0 of extent 1024 (index range [1, 1024]); expected "
     "indices in [0, 1023]"},
    {"param N = 16\ninput A: float32[N]\noutput C: float32[N]\nC[i] = A[i - 1]\n", 4, 10,
     "access A[i - 1] can reach index -1 in dimension 0 of extent 16 (index range [-1, 14])"},
    {"input A: float32[4, 4]\noutput C: float32[4]\nC[i] = A[i, 4]\n", 3, 13,
     "can reach index 4 in dimension 1 of extent 4 (index range [4, 4])"},
    {"input A: float32[8]\noutput C: float32[8]\nC[i] = A[2 * i]\n", 3, 10, "index range [0, 14]"},
    {"input A: float32[9]\noutput C: float32[8]\nC[i] = select(i >= 1, 0.0, A[i - 1])\n", 3, 30,
     "access A[i - 1] can reach index -1"},
    {"input A: float32[9]\noutput C: float32[8]\nC[i] = select(i >= 1 || i < 3, A[i - 1], 0.0)\n", 3, 34,
     "can reach index -1"},
    {"input A: float32[8]\noutput C: float32[8]\nC[i] = A[i // (i - 1)]\n", 3, 16,
     "integer divisor 'i - 1' can be 0 (range [-1, 6]); expected a divisor that is always >= 1"},
    {"input A: float32[8]\noutput C: float32[8]\nC[i] = A[i % 0]\n", 3, 14, "integer divisor '0' can be 0"},
    {"input X: float32[9]\noutput Y: float32[8]\nY[h] = sum(r < 3: select(h + r >= 0 && h + r <= 8, X[h + r "
     "- 1], 0.0))\n",
     3, 54, "access X[h + r - 1] can reach index -1 in dimension 0 of extent 9 (index range [-1, 7])"},
    {"input X: float32[8]\noutput Y: float32[8]\nY[h] = sum(r < 3: select(h + r >= 1, X[h + r - 1], 0.0))\n",
     3, 40, "can reach index 8 in dimension 0 of extent 8 (index range [0, 8])"},
    {"input A: float32[8]\ninput I: int32[8]\noutput C: float32[8]\nC[i] = A[I[i] % 8]\n", 4, 10,
     "tensor access 'I[i]' inside an index"},
    {"input A: float32[8]\noutput C: float32[8]\nC[i] = A[i * 65536 * 65536 // 65536 // 65536]\n", 3, 10,
     "int32 expression 'i * 65536 * 65536' can overflow (range [0, 30064771072]); expected values in "
     "[-2147483648, 2147483647]"},
    {"input A: int32[8]\noutput C: int32[8]\nC[i] = i * 1000000 * 1000 + A[i] * 1000000 * 1000\n", 3, 8,
     "int32 expression 'i * 1000000 * 1000' can overflow"},
    /* shapes and limits */
    {"param N = 0\ninput A: float32[N]\n", 2, 18, "dimension 0 of 'A' is 0 ('N'); expected a value >= 1"},
    {"input A: float32[3000000000]\n", 1, 18, "dimension 0 of 'A' is 3000000000"},
    {"input A: float32[131072, 131072, 2]\n", 1, 34, "tensor 'A' has more than 17179869184 elements"},
    {"input A: float32[1, 1, 1, 1, 1, 1, 1, 1, 1]\n", 1, 42, "tensor 'A' has 9 dimensions; at most 8"},
    {"param N = 4611686018427387903\ninput A: float32[N * N]\n", 2, 20,
     "integer overflow in dimension 0 of 'A'"},
    {"input A: float32[4 // 0]\n", 1, 20, "division by zero in dimension 0 of 'A'"},
    {"input A: float32[4.5]\n", 1, 18, "may only use integer literals, parameters"},
    {"input A: float32[N]\n", 1, 18, "unknown parameter 'N' in dimension 0 of 'A' (declared: none yet)"},
    {"param N = 4611686018427387904\n", 1, 11,
     "integer literal '4611686018427387904' does not fit in 62 bits"},
    {"param N = 99999999999999999999999\n", 1, 11, "does not fit in 62 bits"},
    {"input A: float32[4] in [0, 1]\n", 1, 29, "expected ')' to close the value range"},
    {"input A: float32[4] in [1, 1)\n", 1, 21, "empty value range [1, 1)"},
    {"output C: float32[4] in [0, 1)\n", 1, 22, "only inputs take a value range"},
    {"output C: float32[4] const\n", 1, 22, "only inputs can be 'const'"},
    {"input A: float32[4] const const\n", 1, 27, "'const' given twice for 'A'"},
    {"input A: float32[4] in [0, 1) const in [0, 2)\n", 1, 37, "a second value range for 'A'"},
    {"input const: float32[4]\n", 1, 7, "'const' is a keyword of the workload language"},
    /* lexical */
    {"input \xc3\xa9: float32[4]\n", 1, 7, "non-ASCII byte 0xc3"},
    {"input A: float32[4]\x01\n", 1, 20, "control character 0x01"},
    {"input A: float32[4] $\n", 1, 21, "unexpected character '$'"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = select(i > 0 & i < 3, 1.0, 0.0)\n", 3, 21,
     "unexpected character '&' (did you mean '&&'?)"},
    {"param N = 12abc\n", 1, 11, "malformed number '12abc'"},
    {"param N = 1e\n", 1, 11, "malformed number '1e'"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = A[i] * 1e999\n", 3, 15,
     "number '1e999' is out of range"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = A[i] * 1e308\n", 3, 15,
     "constant '1e308' (1e+308) is out of range for float32"},
    /* syntax */
    {"parm N = 3\n", 1, 1, "unknown declaration 'parm' (expected param, input, output or temp"},
    /* an unclosed bracket is reported where it opened, not past the end of the file */
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = (A[i] + 1.0\n", 3, 8,
     "'(' is never closed (expected ')' before the end of the file)"},
    {"input A: float32[4]\noutput C: float32[1]\nC[i] = sum(k < 4: A[k]\n", 3, 11,
     "'(' is never closed (expected ')' before the end of the file)"},
    {"input A: float32[4\n", 1, 17, "'[' is never closed (expected ']' before the end of the file)"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = A[i] +\n", 3, 14,
     "expected an expression, found end of line"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] = A[i] 2\n", 3, 13,
     "expected end of line after the statement"},
    {"input A: float32[4]\noutput C: float32[4]\nC[i] A[i]\n", 3, 6, "expected '=' after 'C[i]'"},
    {"= 3\n", 1, 1, "expected a declaration (param, input, output, temp) or a statement"},
    {"param = 3\n", 1, 7, "expected a parameter name, found '='"},
    {"input A float32[4]\n", 1, 9, "expected ':' after tensor name 'A'"},
    {"input A: float32 4\n", 1, 18, "expected '[' after the dtype"},
    {"input A: float32[4]\noutput C: float32[4]\nexp(x) = 1.0\n", 3, 1,
     "expected a statement 'T[i, ...] = EXPR'"},
    /* reserved and unsafe names */
    {"input int: float32[4]\n", 1, 7,
     "'int' is a reserved word of C, C++, CUDA and OpenCL C and cannot name a tensor"},
    {"input __x: float32[4]\n", 1, 7,
     "'__x' cannot name a tensor: names starting with '__', 'tuned_' or 'v_'"},
    {"input tuned_a: float32[4]\n", 1, 7, "names starting with '__', 'tuned_' or 'v_' are reserved"},
    {"input v_i: float32[4]\n", 1, 7, "are reserved for generated code"},
    {"input A;system: float32[4]\n", 1, 8, "unexpected character ';'"},
    {"input kernel: float32[4]\n", 1, 7, "'kernel' is a reserved word"},
    {"input threadIdx: float32[4]\n", 1, 7, "'threadIdx' is a reserved word"},
    {"input float4: float32[4]\n", 1, 7, "'float4' is a reserved word"},
    {"input main: float32[4]\n", 1, 7, "'main' is a reserved word of C and cannot name a tensor"},
    /* OpenCL C 2.0's keywords, which clang keeps whatever -cl-std says */
    {"input pipe: float32[4]\n", 1, 7, "'pipe' is a reserved word of OpenCL C and cannot name a tensor"},
    {"input generic: float32[4]\n", 1, 7, "'generic' is a reserved word of OpenCL C and cannot name a tensor"},
    {"param uniform = 4\n", 1, 7, "'uniform' is a reserved word of OpenCL C and cannot name a parameter"},
    {"input nv_bfloat16: float32[4]\n", 1, 7, "'nv_bfloat16' is a reserved word of CUDA and cannot name"},
    {"input char16_t: float32[4]\n", 1, 7, "'char16_t' is a reserved word of C, C++ and CUDA and cannot name"},
    {"input A: float32[4]\noutput C: float32[4]\nC[constexpr] = A[constexpr]\n", 3, 3,
     "'constexpr' is a reserved word of C, C++ and CUDA and cannot name an index variable"},
    {"input sum: float32[4]\n", 1, 7, "'sum' is a keyword of the workload language and cannot name a tensor"},
    {"input float32: float32[4]\n", 1, 7, "'float32' is a keyword of the workload language"},
    {"input bfloat16: float32[4]\n", 1, 7, "'bfloat16' is a keyword of the workload language"},
    {"param double = 4\n", 1, 7,
     "'double' is a reserved word of C, C++, CUDA and OpenCL C and cannot name a parameter"},
    {"input A: float32[4]\noutput C: float32[4]\nC[int] = A[int]\n", 3, 3,
     "'int' is a reserved word of C, C++, CUDA and OpenCL C and cannot name an index variable"},
    {"input A: float32[4]\noutput C: float32[]\nC = sum(register < 4: A[register])\n", 3, 9,
     "'register' is a reserved word of C, C++, CUDA and OpenCL C and cannot name a reduction variable"},
    {"input A: float32[4]\noutput C: float32[4]\nC[__i] = A[__i]\n", 3, 3, "names starting with '__'"},
};

START_TEST(t_errors) {
  const err_case_t *c = &err_cases[_i];
  parse_err(c->src, c->line, c->col, c->what);
}
END_TEST

/* Every name of the reserved table (common/reserved.c), one by one, as a
 * tensor, a parameter and an index variable: a word of C, C++/CUDA or
 * OpenCL C is refused with a message naming its languages (or, before
 * that, as a keyword of the workload language or a prefix generated code
 * keeps); any other name (a builtin function, a library name) is accepted
 * and generated code renames it (tests/test_codegen.c, case reserved). */
static void reserved_one(const char *name, unsigned langs) {
  ck_assert_msg(strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789") == strlen(name) &&
                    !(name[0] >= '0' && name[0] <= '9'),
                "the table has \"%s\", no identifier", name);
  static const char *const forms[3][2] = {
      {"param N = 4\ninput %s: float32[N]\noutput B: float32[N]\nB[i] = %s[i]\n", "a tensor"},
      {"param %s = 4\ninput A: float32[%s]\noutput B: float32[4]\nB[i] = A[i]\n", "a parameter"},
      {"input A: float32[4]\noutput B: float32[4]\nB[%s] = A[%s]\n", "an index variable"},
  };
  for (int f = 0; f < 3; f++) {
    char src[512], want[256], word_langs[96];
    snprintf(src, sizeof src, forms[f][0], name, name);
    ir_workload_t *w = NULL;
    tn_err_t err = {0};
    int rc = ir_workload_parse("t.tw", src, strlen(src), NULL, 0, &w, &err);
    bool other_rule = strstr(err.msg, "is a keyword of the workload language") ||
                      strstr(err.msg, "names starting with '__', 'tuned_' or 'v_' are reserved");
    if (langs >> TN_RW_WORDS) {
      tn_reserved_langs_text(langs >> TN_RW_WORDS, word_langs, sizeof word_langs);
      snprintf(want, sizeof want, "'%s' is a reserved word of %s and cannot name %s;", name, word_langs, forms[f][1]);
      ck_assert_msg(rc != 0 && (strstr(err.msg, want) || other_rule), "%s: %s (wanted: %s)", name, err.msg, want);
    } else {
      ck_assert_msg(rc == 0 || other_rule, "%s as %s: %s", name, forms[f][1], err.msg);
    }
    ir_workload_free(w);
  }
}

START_TEST(t_reserved_table) {
  const char *const *names;
  const unsigned *langs;
  size_t n = tn_reserved_list(false, &names, &langs), words = 0;
  ck_assert_uint_gt(n, 2000);
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(tn_reserved_langs(names[i]), langs[i]);
    reserved_one(names[i], langs[i]);
    words += (langs[i] >> TN_RW_WORDS) != 0;
  }
  ck_assert_uint_gt(words, 300);
  /* names with a reserved prefix: one of each */
  size_t np = tn_reserved_list(true, &names, &langs);
  for (size_t i = 0; i < np; i++) {
    char name[64];
    snprintf(name, sizeof name, "%sx1", names[i]);
    ck_assert_uint_eq(tn_reserved_langs(name) & langs[i], langs[i]);
    reserved_one(name, tn_reserved_langs(name));
  }
  /* OpenCL C's and CUDA's builtin functions are names, not words; what no one reserves is free */
  ck_assert_uint_eq(tn_reserved_langs("dot"), TN_RW_OPENCL);
  ck_assert(!tn_is_reserved_word("atomicAdd") && tn_reserved_langs("atomicAdd") == TN_RW_CUDA);
  ck_assert_uint_eq(tn_reserved_langs("matmul"), 0);
  ck_assert_uint_eq(tn_reserved_langs("pipes"), 0);
  ck_assert_uint_eq(tn_reserved_langs("cuda"), 0); /* the prefix wants an uppercase letter after it */
}
END_TEST

/* ---- typing ------------------------------------------------------------- */

/* The value stored by the single statement of a workload. */
static const ir_expr_t *stmt_value(const ir_workload_t *w) {
  ir_loop_t *loops[16];
  int n;
  ir_block_t *b = nest_block(root_body(w), loops, &n);
  return b->body->u.store.value;
}

START_TEST(t_literal_typing) {
  /* a float literal takes the type of the float operand it meets */
  ir_workload_t *w = parse_ok("input A: float64[4]\noutput C: float64[4]\nC[i] = A[i] * 0.1\n", NULL, 0);
  const ir_expr_t *v = stmt_value(w);
  ck_assert_int_eq(v->kind, IR_E_MUL);
  ck_assert_int_eq(v->dtype, IR_FLOAT64);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_FLOAT);
  ck_assert_int_eq(v->u.bin.b->dtype, IR_FLOAT64);
  ck_assert_double_eq(v->u.bin.b->u.fval, 0.1);
  ir_workload_free(w);

  /* integer literals and parameters too; integer operands are converted */
  w = parse_ok("param S = 3\ninput A: float16[4]\noutput C: float16[4]\nC[i] = A[i] * S + i\n", NULL, 0);
  v = stmt_value(w);
  ck_assert_int_eq(v->kind, IR_E_ADD);
  ck_assert_int_eq(v->dtype, IR_FLOAT16);
  ck_assert_int_eq(v->u.bin.a->u.bin.b->kind, IR_E_FLOAT);
  ck_assert_int_eq(v->u.bin.a->u.bin.b->dtype, IR_FLOAT16);
  ck_assert_double_eq(v->u.bin.a->u.bin.b->u.fval, 3.0);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_CAST);
  ck_assert_int_eq(v->u.bin.b->dtype, IR_FLOAT16);
  ck_assert_int_eq(v->u.bin.b->u.un->kind, IR_E_VAR);
  ir_workload_free(w);

  /* widths promote; the statement value is converted to the tensor's dtype */
  w = parse_ok("input A: float16[4]\ninput B: float64[4]\noutput C: float32[4]\nC[i] = A[i] + B[i]\n", NULL,
               0);
  v = stmt_value(w);
  ck_assert_int_eq(v->kind, IR_E_CAST);
  ck_assert_int_eq(v->dtype, IR_FLOAT32);
  ck_assert_int_eq(v->u.un->kind, IR_E_ADD);
  ck_assert_int_eq(v->u.un->dtype, IR_FLOAT64);
  ck_assert_int_eq(v->u.un->u.bin.a->kind, IR_E_CAST);
  ir_workload_free(w);

  /* float16 with bfloat16 meet in float32; bfloat16(x) converts */
  w = parse_ok("input A: float16[4]\ninput B: bfloat16[4]\noutput C: bfloat16[4]\nC[i] = bfloat16(A[i] * B[i])\n",
               NULL, 0);
  v = stmt_value(w);
  ck_assert_int_eq(v->kind, IR_E_CAST);
  ck_assert_int_eq(v->dtype, IR_BFLOAT16);
  ck_assert_int_eq(v->u.un->kind, IR_E_MUL);
  ck_assert_int_eq(v->u.un->dtype, IR_FLOAT32);
  ir_workload_free(w);

  /* '/' is floor division on integers, true division on floats */
  w = parse_ok("input A: int32[4]\noutput C: int32[4]\nC[i] = A[i] / 2 + A[i] % 3\n", NULL, 0);
  v = stmt_value(w);
  ck_assert_int_eq(v->u.bin.a->kind, IR_E_FLOORDIV);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_FLOORMOD);
  ck_assert_int_eq(v->dtype, IR_INT32);
  ir_workload_free(w);
  w = parse_ok("input A: float32[4]\noutput C: float32[4]\nC[i] = A[i] / 2\n", NULL, 0);
  ck_assert_int_eq(stmt_value(w)->kind, IR_E_DIV);
  ck_assert_int_eq(stmt_value(w)->u.bin.b->kind, IR_E_FLOAT);
  ir_workload_free(w);

  /* a float literal with no float context is float32; conversions, math */
  w = parse_ok("input A: int64[4]\noutput C: int64[4]\nC[i] = int64(exp(A[i] * 0.5)) + 4294967296\n", NULL,
               0);
  v = stmt_value(w);
  ck_assert_int_eq(v->kind, IR_E_ADD);
  ck_assert_int_eq(v->dtype, IR_INT64);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_INT);
  ck_assert_int_eq(v->u.bin.b->dtype, IR_INT64);
  ck_assert_int_eq(v->u.bin.b->u.ival, INT64_C(4294967296));
  const ir_expr_t *call = v->u.bin.a->u.un;
  ck_assert_int_eq(call->kind, IR_E_CALL);
  ck_assert_int_eq(call->u.call.fn, IR_FN_EXP);
  ck_assert_int_eq(call->dtype, IR_FLOAT32);
  ck_assert_int_eq(call->u.call.args[0]->u.bin.a->kind, IR_E_CAST);
  ir_workload_free(w);

  /* constant arithmetic adapts too: 1 / 2 is 0.5 for a float tensor, 0 for an int one */
  w = parse_ok("output C: float32[4]\noutput D: int32[4]\nC[i] = 1 / 2\nD[i] = 1 / 2\n", NULL, 0);
  const ir_stmt_t *seq = root_body(w);
  ck_assert_int_eq(seq->kind, IR_S_SEQ);
  ir_loop_t *loops[16];
  int n;
  /* (constant arithmetic is folded when the statement is lowered) */
  v = nest_block(seq->u.seq.items[0], loops, &n)->body->u.store.value;
  ck_assert_int_eq(v->kind, IR_E_FLOAT);
  ck_assert_double_eq(v->u.fval, 0.5);
  v = nest_block(seq->u.seq.items[1], loops, &n)->body->u.store.value;
  ck_assert_int_eq(v->kind, IR_E_INT);
  ck_assert_int_eq(v->u.ival, 0);
  ck_assert_int_eq(v->dtype, IR_INT32);
  ir_workload_free(w);

  /* min/max, negative literals, boolean casts */
  w = parse_ok("input A: float32[4]\noutput C: float32[4]\nC[i] = max(A[i], -1) + float32(i < 2)\n", NULL, 0);
  v = stmt_value(w);
  ck_assert_int_eq(v->u.bin.a->kind, IR_E_MAX);
  ck_assert_int_eq(v->u.bin.a->u.bin.b->kind, IR_E_FLOAT);
  ck_assert_double_eq(v->u.bin.a->u.bin.b->u.fval, -1.0);
  ck_assert_int_eq(v->u.bin.b->kind, IR_E_CAST);
  ck_assert_int_eq(v->u.bin.b->u.un->dtype, IR_BOOL);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_reduction_identities) {
  ir_workload_t *w = parse_ok("param N = 4\ninput A: float32[N, N]\noutput C: float32[N]\n"
                              "C[i] = max(k < N: A[i, k])\n",
                              NULL, 0);
  ir_loop_t *loops[16];
  int n;
  ir_block_t *b = nest_block(root_body(w), loops, &n);
  ck_assert_int_eq(b->init->u.store.value->kind, IR_E_FLOAT);
  ck_assert_double_eq(b->init->u.store.value->u.fval, -(double)FLT_MAX);
  ck_assert_int_eq(b->body->u.store.value->kind, IR_E_MAX);
  ir_workload_free(w);
  w = parse_ok(
      "param N = 4\ninput A: int32[N, N]\noutput C: int32[N]\nC[i] = min(r < 2, s < N: A[i, s] * r)\n", NULL,
      0);
  b = nest_block(root_body(w), loops, &n);
  ck_assert_int_eq(n, 3);
  ck_assert_str_eq(loops[1]->var->name, "r");
  ck_assert_int_eq(loops[1]->extent, 2);
  ck_assert_int_eq(b->iters[2].kind, IR_ITER_REDUCE);
  ck_assert_int_eq(b->init->u.store.value->kind, IR_E_INT);
  ck_assert_int_eq(b->init->u.store.value->dtype, IR_INT32);
  ck_assert_int_eq(b->init->u.store.value->u.ival, INT32_MAX);
  ck_assert_int_eq(b->body->u.store.value->kind, IR_E_MIN);
  ir_workload_free(w);
  /* a 0-d result, written with or without [] */
  w = parse_ok("param N = 4\ninput A: float32[N]\noutput S: float32[]\nS = sum(k < N: A[k])\n", NULL, 0);
  b = nest_block(root_body(w), loops, &n);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(b->niters, 1);
  ck_assert_int_eq(b->body->u.store.n, 0);
  ir_workload_free(w);
}
END_TEST

/* ---- accepted programs -------------------------------------------------- */

/* Runs the reference evaluator; returns the data (caller frees). */
static ir_data_t *run(const ir_workload_t *w) {
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_data_new(w->func, 7, 1 << 24, &d, &err) == 0, "%s", err.msg);
  ck_assert_msg(ir_eval(w->func, d, &err) == 0, "%s", err.msg);
  return d;
}

START_TEST(t_conv_padding_select) {
  const char *src = "# 2-D convolution, padding 1 via select\n"
                    "param N = 1, C = 2, H = 5, W = 5, F = 3\n"
                    "input  X: float32[N, C, H, W]\n"
                    "input  Wt: float32[F, C, 3, 3]\n"
                    "output Y: float32[N, F, H, W]\n"
                    "Y[n, f, h, w] = sum(c < C, r < 3, s < 3:\n"
                    "    select(h + r >= 1 && h + r <= H && w + s >= 1 && w + s <= W,\n"
                    "           X[n, c, h + r - 1, w + s - 1], 0.0) * Wt[f, c, r, s])\n";
  ir_workload_t *w = parse_ok(src, NULL, 0);
  ir_loop_t *loops[16];
  int n;
  ir_block_t *b = nest_block(root_body(w), loops, &n);
  ck_assert_int_eq(n, 7);
  ck_assert_str_eq(b->name, "Y");
  ck_assert_int_eq(b->body->u.store.value->u.bin.b->u.bin.a->kind, IR_E_SELECT);
  ir_data_t *d = run(w);
  const double *X = d->vals[0], *Wt = d->vals[1], *Y = d->vals[2];
  for (int f = 0; f < 3; f++)
    for (int h = 0; h < 5; h++)
      for (int x = 0; x < 5; x++) {
        double acc = 0;
        for (int c = 0; c < 2; c++)
          for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++) {
              int hh = h + r - 1, ww = x + s - 1;
              if (hh >= 0 && hh < 5 && ww >= 0 && ww < 5)
                acc += X[(c * 5 + hh) * 5 + ww] * Wt[((f * 2 + c) * 3 + r) * 3 + s];
            }
        ck_assert_double_eq_tol(Y[(f * 5 + h) * 5 + x], acc, 1e-9);
      }
  ir_data_free(d);
  ir_workload_free(w);

  /* narrowing by constant conditions on either side, and an unreachable branch */
  w = parse_ok("input A: float32[8]\noutput C: float32[8]\n"
               "C[i] = select(1 <= i && i < 7, A[i + 1] - A[i - 1], select(i > 20, A[i * 100], 0.0))\n",
               NULL, 0);
  ir_workload_free(w);

  /* a condition over nine variables narrows as well (facts had at most
   * eight terms, and this access was refused as reaching index -1) */
  w = parse_ok("input A: float32[9]\noutput C: float32[2, 2, 2, 2]\n"
               "C[a, b, c, d] = sum(e < 2, f < 2, g < 2, h < 2, k < 2:\n"
               "    select(a + b + c + d + e + f + g + h + k >= 1, A[a + b + c + d + e + f + g + h + k - 1], 0.0))\n",
               NULL, 0);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_temps_and_order) {
  /* statements written consumer-first run in dependency order; independent
   * statements keep their source order; temps are allocated in root */
  const char *src = "param N = 6\n"
                    "input  A: float32[N] in [0, 2)\n"
                    "output C: float32[N]\n"
                    "temp   T2: float32[N]\n"
                    "output D: float64[N]\n"
                    "temp   T1: float32[N]\n"
                    "C[i] = T2[i] * 2.0\n"
                    "D[i] = A[i] + 1\n"
                    "T2[i] = T1[i] + A[i]\n"
                    "T1[i] = exp(A[i])\n";
  ir_workload_t *w = parse_ok(src, NULL, 0);
  ir_func_t *f = w->func;
  ck_assert_int_eq(f->nparams, 3);
  ck_assert_str_eq(f->params[0]->name, "A");
  ck_assert_str_eq(f->params[1]->name, "C");
  ck_assert_str_eq(f->params[2]->name, "D");
  ck_assert_double_eq(f->params[0]->init_lo, 0.0);
  ck_assert_double_eq(f->params[0]->init_hi, 2.0);
  ir_block_t *root = ir_func_root(f);
  ck_assert_int_eq(root->nallocs, 2);
  ck_assert_str_eq(root->allocs[0]->name, "T2");
  ck_assert_str_eq(root->allocs[1]->name, "T1");
  ck_assert_int_eq(root->allocs[0]->role, IR_BUF_TEMP);
  ck_assert_int_eq(root->allocs[0]->scope, IR_SCOPE_GLOBAL);
  ck_assert_int_eq(root->body->kind, IR_S_SEQ);
  ck_assert_int_eq(root->body->u.seq.n, 4);
  const char *order[] = {"D", "T1", "T2", "C"};
  for (int i = 0; i < 4; i++) {
    ir_loop_t *loops[16];
    int n;
    ck_assert_str_eq(nest_block(root->body->u.seq.items[i], loops, &n)->name, order[i]);
  }
  ir_data_t *d = run(w);
  for (int i = 0; i < 6; i++) {
    double a = d->vals[0][i];
    ck_assert(a >= 0 && a < 2);
    ck_assert_double_eq_tol(d->vals[1][i], (exp(a) + a) * 2.0, 1e-9 * (1 + exp(a)));
    ck_assert_double_eq_tol(d->vals[2][i], a + 1, 1e-12);
  }
  ir_data_free(d);
  ir_workload_free(w);
}
END_TEST

/* Reductions inside expressions: softmax and layer norm as a user writes
 * them.  Each reduction is computed first into a temp named after the left
 * side and the reduction (identical texts share one), indexed by the left
 * side's variables it uses; the results equal the explicit workloads'. */
START_TEST(t_nested_reductions) {
  const char *natural = "param M = 5, N = 12\n"
                        "input  A: float32[M, N]\n"
                        "output S: float32[M, N]\n"
                        "S[i, j] = exp(A[i, j] - max(k < N: A[i, k])) / sum(k < N: exp(A[i, k] - max(k < N: A[i, k])))\n";
  const char *explicit = "param M = 5, N = 12\n"
                         "input  A: float32[M, N]\n"
                         "temp   rmax: float32[M]\n"
                         "temp   rsum: float32[M]\n"
                         "output S: float32[M, N]\n"
                         "rmax[i] = max(j < N: A[i, j])\n"
                         "rsum[i] = sum(j < N: exp(A[i, j] - rmax[i]))\n"
                         "S[i, j] = exp(A[i, j] - rmax[i]) / rsum[i]\n";
  ir_workload_t *w = parse_ok(natural, NULL, 0), *x = parse_ok(explicit, NULL, 0);
  ir_block_t *root = ir_func_root(w->func);
  ck_assert_int_eq(root->nallocs, 2); /* the two max(k < N: A[i, k]) are one temp */
  ck_assert_str_eq(root->allocs[0]->name, "S_max0");
  ck_assert_str_eq(root->allocs[1]->name, "S_sum0");
  ck_assert_int_eq(root->allocs[1]->ndim, 1);
  ck_assert_int_eq(root->allocs[1]->shape[0], 5);
  ck_assert_int_eq(root->allocs[1]->role, IR_BUF_TEMP);
  ir_data_t *a = run(w), *b = run(x);
  for (int64_t e = 0; e < 5 * 12; e++) ck_assert_double_eq_tol(a->vals[1][e], b->vals[1][e], 1e-12);
  ir_data_free(a), ir_data_free(b);
  ir_workload_free(w), ir_workload_free(x);

  /* layer norm: a mean inside a variance inside a normalisation; a float16
   * output keeps float32 temps; a reduction using no index variable is a scalar */
  const char *ln = "param M = 3, N = 16\n"
                   "input  X: float32[M, N]\n"
                   "output Y: float16[M, N]\n"
                   "output T: float32[M]\n"
                   "Y[i, j] = (X[i, j] - sum(k < N: X[i, k]) / 16.0) / sqrt(sum(k < N: (X[i, k] - sum(l < N: X[i, l]) / 16.0) "
                   "* (X[i, k] - sum(l < N: X[i, l]) / 16.0)) / 16.0 + 0.00001)\n"
                   "T[i] = X[i, 0] / sum(m < M, n < N: X[m, n] * X[m, n])\n";
  w = parse_ok(ln, NULL, 0);
  root = ir_func_root(w->func);
  ck_assert_int_eq(root->nallocs, 4);
  ck_assert_str_eq(root->allocs[0]->name, "Y_sum0");
  ck_assert_str_eq(root->allocs[1]->name, "Y_sum1");
  ck_assert_str_eq(root->allocs[2]->name, "Y_sum2");
  ck_assert_int_eq(root->allocs[0]->dtype, IR_FLOAT32);
  ck_assert_str_eq(root->allocs[3]->name, "T_sum0");
  ck_assert_int_eq(root->allocs[3]->ndim, 0);
  ir_data_t *d = run(w);
  double total = 0;
  for (int e = 0; e < 3 * 16; e++) total += d->vals[0][e] * d->vals[0][e];
  for (int i = 0; i < 3; i++) {
    double mean = 0, var = 0;
    for (int k = 0; k < 16; k++) mean += d->vals[0][i * 16 + k] / 16.0;
    for (int k = 0; k < 16; k++) var += (d->vals[0][i * 16 + k] - mean) * (d->vals[0][i * 16 + k] - mean) / 16.0;
    for (int j = 0; j < 16; j++)
      ck_assert_double_eq_tol(d->vals[1][i * 16 + j], (d->vals[0][i * 16 + j] - mean) / sqrt(var + 1e-5), 2e-3);
    ck_assert_double_eq_tol(d->vals[2][i], d->vals[0][i * 16] / total, 1e-6);
  }
  ir_data_free(d);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_layout) {
  /* comments, blank lines, continuation inside brackets, CRLF line ends */
  const char *src = "\n# header\r\n"
                    "param M = 4,   N = 2 # sizes\r\n"
                    "input A: float32[M,\n   N]\t# two lines\n"
                    "output B: float32[M]\n\n\n"
                    "B[i] = (A[i, 0] +  # continued\n"
                    "        A[i, 1])\n";
  ir_workload_t *w = parse_ok(src, NULL, 0);
  ck_assert_int_eq(w->nparams, 2);
  ck_assert_int_eq(w->params[1].line, 3);
  ck_assert_int_eq(w->params[1].col, 16);
  ck_assert_int_eq(w->func->params[0]->shape[1], 2);
  ck_assert_int_eq(stmt_value(w)->kind, IR_E_ADD);
  ir_workload_free(w);
}
END_TEST

/* ---- limits ------------------------------------------------------------- */

static void expect_limit(const char *src, size_t len, int code, const char *what) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_workload_parse("big.tw", src, len, NULL, 0, &w, &err), code);
  ck_assert_ptr_null(w);
  ck_assert_int_gt(err.line, 0);
  ck_assert_int_gt(err.col, 0);
  ck_assert_msg(strstr(err.msg, what), "\"%s\" lacks \"%s\"", err.msg, what);
}

START_TEST(t_limits) {
  tn_buf_t b;
  tn_buf_init(&b);
  /* deep nesting: parentheses, unary operators, long operator chains */
  tn_buf_put(&b, "output C: float32[1]\nC[i] = ");
  for (int i = 0; i < 100000; i++) tn_buf_putc(&b, '(');
  tn_buf_put(&b, "1.0");
  for (int i = 0; i < 100000; i++) tn_buf_putc(&b, ')');
  expect_limit(tn_buf_str(&b), b.len, TN_EINVAL, "nested too deeply (more than 200 levels)");
  tn_buf_reset(&b);
  tn_buf_put(&b, "output C: float32[1]\nC[i] = ");
  for (int i = 0; i < 100000; i++) tn_buf_putc(&b, '-');
  tn_buf_put(&b, "1.0\n");
  expect_limit(tn_buf_str(&b), b.len, TN_EINVAL, "nested too deeply");
  tn_buf_reset(&b);
  tn_buf_put(&b, "output C: float32[1]\nC[i] = 1.0");
  for (int i = 0; i < 50000; i++) tn_buf_put(&b, " + 1.0");
  expect_limit(tn_buf_str(&b), b.len, TN_EINVAL, "expression is too deep (more than 200 levels");
  tn_buf_reset(&b);
  tn_buf_put(&b, "output C: float32[1]\nC[i] = 1.0");
  for (int i = 0; i < 150; i++) tn_buf_put(&b, " + 1.0");
  tn_buf_put(&b, "\n");
  ir_workload_t *w = parse_ok(tn_buf_str(&b), NULL, 0);
  ir_workload_free(w);

  /* messages quote long source text cut short */
  tn_buf_reset(&b);
  tn_buf_put(&b, "input A: float32[4]\noutput C: float32[4]\nC[i] = A[i");
  for (int k = 0; k < 40; k++) tn_buf_put(&b, " + i - i");
  tn_buf_put(&b, " + 1]\n");
  expect_limit(tn_buf_str(&b), b.len, TN_EINVAL, "access A[i + i - i + i - i + i - i + i");
  tn_err_t err = {0};
  ck_assert_int_ne(ir_workload_parse("t.tw", tn_buf_str(&b), b.len, NULL, 0, &w, &err), 0);
  ck_assert_msg(strstr(err.msg, "... can reach index 124 in dimension 0 of extent 4"), "%s", err.msg);

  /* too many tensors */
  tn_buf_reset(&b);
  for (int i = 0; i <= IR_MAX_TENSORS; i++) tn_buf_printf(&b, "input A%d: float32[1]\n", i);
  expect_limit(tn_buf_str(&b), b.len, TN_EINVAL, "too many tensors (the limit is 16384)");

  /* the source size limit */
  tn_buf_reset(&b);
  while (b.len <= IR_MAX_SOURCE_BYTES) tn_buf_put(&b, "# padding padding padding padding padding padding\n");
  expect_limit(tn_buf_str(&b), b.len, TN_ENOMEM, "larger than the limit of 1048576 bytes");
  tn_buf_free(&b);
}
END_TEST

START_TEST(t_bytes) {
  /* a NUL byte is an error wherever it appears, never the end of the text */
  static const char src[] = "input A: float32[4]\noutput C: float32[4]\nC[i] = A[i]\x00\n";
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_workload_parse("t.tw", src, sizeof src - 1, NULL, 0, &w, &err), TN_EINVAL);
  ck_assert_int_eq(err.line, 3);
  ck_assert_int_eq(err.col, 12);
  ck_assert_str_eq(err.msg, "t.tw:3:12: NUL byte in the workload; expected ASCII text");
  /* the text need not be NUL-terminated: only len bytes are read */
  char buf[64];
  memset(buf, 'x', sizeof buf);
  memcpy(buf, src, 52);
  ck_assert_int_eq(ir_workload_parse("t.tw", buf, 52, NULL, 0, &w, &err), 0);
  ck_assert_int_eq(ir_func_root(w->func)->body->kind, IR_S_LOOP);
  ir_workload_free(w);
  ck_assert_int_eq(ir_workload_parse("t.tw", NULL, 0, NULL, 0, &w, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "the workload has no output"));
}
END_TEST

START_TEST(t_load) {
  char path[] = "/tmp/test_parse_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, MATMUL, strlen(MATMUL)), (ssize_t)strlen(MATMUL));
  close(fd);
  char twpath[64];
  snprintf(twpath, sizeof twpath, "%s.tw", path);
  ck_assert_int_eq(rename(path, twpath), 0);
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_workload_load(twpath, NULL, 0, &w, &err), 0);
  ck_assert_str_eq(w->name, path + 5);
  ck_assert_str_eq(w->path, twpath);
  ck_assert_int_eq(w->func->nparams, 3);
  ir_workload_free(w);
  unlink(twpath);
  ck_assert_int_eq(ir_workload_load(twpath, NULL, 0, &w, &err), TN_EIO);
  ck_assert_ptr_null(w);
}
END_TEST

START_TEST(t_const_inputs) {
  /* `const` after the shape, before or after a value range; it changes
   * the structural hash (records of kernels taking a packed copy must not
   * answer the plain workload), and nothing else */
  const char *plain = "input  W: float32[8, 4] in [0, 2)\ninput X: float32[4]\noutput Y: float32[8]\n"
                      "Y[o] = sum(k < 4: W[o, k] * X[k])\n";
  const char *forms[] = {"input  W: float32[8, 4] in [0, 2) const\ninput X: float32[4]\noutput Y: float32[8]\n"
                         "Y[o] = sum(k < 4: W[o, k] * X[k])\n",
                         "input  W: float32[8, 4] const in [0, 2)\ninput X: float32[4]\noutput Y: float32[8]\n"
                         "Y[o] = sum(k < 4: W[o, k] * X[k])\n"};
  ir_workload_t *p = parse_ok(plain, NULL, 0);
  ck_assert(!p->func->params[0]->is_const && !p->func->params[1]->is_const);
  char h[2][TN_ID_SIZE], hp[TN_ID_SIZE];
  for (int i = 0; i < 2; i++) {
    ir_workload_t *w = parse_ok(forms[i], NULL, 0);
    ck_assert(w->func->params[0]->is_const);
    ck_assert(!w->func->params[1]->is_const);
    ck_assert_double_eq(w->func->params[0]->init_hi, 2.0);
    ir_func_hash(w->func, h[i]);
    ir_func_t *copy = ir_func_copy(w->func);
    ck_assert(copy->params[0]->is_const);
    char hc[TN_ID_SIZE];
    ir_func_hash(copy, hc);
    ck_assert_str_eq(hc, h[i]);
    ir_func_free(copy);
    ir_workload_free(w);
  }
  ck_assert_str_eq(h[0], h[1]);
  ir_func_hash(p->func, hp);
  ck_assert_str_ne(h[0], hp);
  ir_workload_free(p);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("parse");
  TCase *tc = TU_TCASE(s, "core", 0, t_matmul_structure, t_overrides, t_param_set_parse, t_literal_typing,
                       t_reduction_identities, t_conv_padding_select, t_temps_and_order, t_nested_reductions, t_layout,
                       t_limits, t_bytes,
                       t_load, t_const_inputs, t_reserved_table);
  tcase_add_loop_test(tc, t_errors, 0, (int)(sizeof err_cases / sizeof err_cases[0]));
  return s;
}

TN_TEST_MAIN(make_suite)
