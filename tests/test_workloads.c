/* test_workloads.c — suite "workloads": every workload in workloads/ parses,
 * prints and evaluates; small instances are checked against results worked
 * out by hand, and FLOP/byte counts against closed forms. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "testir.h"

/* Loads workloads/NAME.tw with "K=V,K=V" overrides. */
static ir_workload_t *load(const char *name, const char *sets) { return tu_load_sets(name, sets); }

static int param_index(const ir_func_t *f, const char *name) {
  for (int i = 0; i < f->nparams; i++)
    if (strcmp(f->params[i]->name, name) == 0) return i;
  ck_abort_msg("no parameter %s", name);
  return -1;
}

static void set_input(ir_data_t *d, const ir_func_t *f, const char *name, const double *v, int n) {
  int i = param_index(f, name);
  ck_assert_int_eq(d->sizes[i], n);
  memcpy(d->vals[i], v, sizeof(double) * (size_t)n);
}

static void expect_output(ir_data_t *d, const ir_func_t *f, const char *name, const double *v, int n) {
  int i = param_index(f, name);
  ck_assert_int_eq(d->sizes[i], n);
  for (int k = 0; k < n; k++)
    ck_assert_msg(fabs(d->vals[i][k] - v[k]) <= 1e-12 * (1 + fabs(v[k])), "%s[%d] = %.17g, expected %.17g",
                  name, k, d->vals[i][k], v[k]);
}

static ir_data_t *data(const ir_func_t *f) {
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_data_new(f, 1, (size_t)1 << 30, &d, &err), TN_OK);
  return d;
}

static void run(const ir_func_t *f, ir_data_t *d) {
  tn_err_t err = {0};
  int rc = ir_eval(f, d, &err);
  ck_assert_msg(rc == TN_OK, "eval: %s", err.msg);
}

/* Small instances worked out by hand: inputs set, one output checked. */
typedef struct values {
  const char *name;
  int n;
  double v[36]; /* conv2d_nhwc's 3 x 3 x 2 x 2 filter is the largest */
} values_t;

#define V(name, ...) {name, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), {__VA_ARGS__}}

static const struct {
  const char *workload, *sets;
  values_t in[3], out;
} hand[] = {
    {"vector_add", "N=4", {V("A", 1, 2, 3, 4), V("B", 10, 20, 30, 40)}, V("C", 11, 22, 33, 44)},
    /* the last element of A is outside every window */
    {"window_sum", "N=3", {V("A", 1, 2, 3, 4, 5, 100)}, V("B", 6, 9, 12)},
    {"square", "M=2,N=3", {V("A", 1, -2, 3, 0.5, -1, 2)}, V("B", 1, 4, 9, 0.25, 1, 4)},
    {"matmul", "M=2,N=2,K=3", {V("A", 1, 2, 3, 4, 5, 6), V("B", 1, 0, 0, 1, 1, 1)}, V("C", 4, 5, 10, 11)},
    {"matmul_bt", "M=2,N=2,K=3", {V("A", 1, 2, 3, 4, 5, 6), V("B", 1, 0, 1, 0, 1, 1)}, V("C", 4, 5, 10, 11)},
    /* D = [6, -1]; relu(6.5) = 6.5, relu(-0.75) = 0 */
    {"dense_bias_relu", "IN=3,OUT=2", {V("X", 1, 2, 3), V("W", 1, 1, 1, -1, 0, 0), V("bias", 0.5, 0.25)},
     V("Y", 6.5, 0)},
    {"batch_matmul", "BATCH=2,M=1,N=1,K=2", {V("A", 1, 2, 3, 4), V("B", 5, 6, 7, 8)}, V("C", 17, 53)},
    {"batch_matmul_f16", "BATCH=2,M=1,N=1,K=2", {V("A", 1, 2, 3, 4), V("B", 5, 6, 7, 8)}, V("C", 17, 53)},
    /* Y[y][x] = X[y][x] + 2 * X[y+1][x+1], zero outside: 1+8, 2, 3, 4. */
    {"conv2d", "C=1,H=2,W=2,F=1", {V("X", 1, 2, 3, 4), V("Wt", 0, 0, 0, 0, 1, 0, 0, 0, 2)}, V("Y", 9, 2, 3, 4)},
    /* A's first row is 0, log(2), log(3) */
    {"softmax", "M=2,N=3", {V("A", 0, M_LN2, 1.0986122886681098, 5, 5, 5)},
     V("S", 1.0 / 6, 2.0 / 6, 3.0 / 6, 1.0 / 3, 1.0 / 3, 1.0 / 3)},
    {"row_sum", "M=2,N=3", {V("A", 1, 2, 3, 4, 5, 6)}, V("R", 6, 15)},
    {"matmul_bf16", "M=2,N=2,K=3", {V("A", 1, 2, 3, 4, 5, 6), V("B", 1, 0, 0, 1, 1, 1)}, V("C", 4, 5, 10, 11)},
    /* 1 + 2^-8 + 2^-8 = 1 + 2^-7: exact with a float32 sum; a bfloat16 sum
     * (8 significant bits) would round 1 + 2^-8 back to 1 twice */
    {"matmul_bf16", "M=1,N=1,K=3", {V("A", 1, 0.00390625, 0.00390625), V("B", 1, 1, 1)}, V("C", 1.0078125)},
    {"matmul_f16", "M=1,N=1,K=3", {V("A", 1, 0.00048828125, 0.00048828125), V("B", 1, 1, 1)},
     V("C", 1.0009765625)},
    {"gemv", "M=2,N=3", {V("A", 1, 2, 3, 4, 5, 6), V("x", 1, 2, -1)}, V("y", 2, 8)},
    /* one pixel, two channels in, two out: only the filter's centre (r = s = 1) meets the
     * pixel; Wt[1][1][c][f] is at ((1 * 3 + 1) * 2 + c) * 2 + f = 16 + 2c + f */
    {"conv2d_nhwc", "H=1,W=1,C=2,F=2",
     {V("X", 1, 2), V("Wt", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                      0, 0, 0, 0, 0, 0)},
     V("Y", 1 * 1 + 2 * 3, 1 * 2 + 2 * 4)},
    /* Z = [6.5, -0.75]; gelu_tanh of each */
    {"dense_bias_gelu", "IN=3,OUT=2,B=1", {V("X", 1, 2, 3), V("W", 1, 1, 1, -1, 0, 0), V("bias", 0.5, 0.25)},
     V("Y", 6.499999999999372, -0.17003944483437966)},
    /* stride 2, padding 1: X padded [0, 1, 2, 3, 4, 0], windows at 0 and 2 */
    {"conv1d_nlc", "L=4,CI=1,CO=1,KL=3,ST=2,P=1", {V("X", 1, 2, 3, 4), V("Wt", 1, 10, 100)}, V("Y", 210, 432)},
    /* dilation 2: taps l and l + 2 */
    {"conv1d_nlc", "L=4,CI=1,CO=1,KL=2,ST=1,P=0,D=2", {V("X", 1, 2, 3, 4), V("Wt", 1, 10)}, V("Y", 31, 42)},
    /* two groups of one channel: each output channel sees its own input channel only */
    {"conv2d_nhwc_sdg", "H=1,W=1,CI=2,CO=2,KS=1,ST=1,P=0,G=2", {V("X", 3, 5), V("Wt", 2, 7)}, V("Y", 6, 35)},
    /* stride 2, kernel 2, no padding: one input pixel stamps the kernel */
    {"conv2d_transpose_nhwc", "H=1,W=1,CI=1,CO=1,KS=2,P=0", {V("X", 2), V("Wt", 1, 2, 3, 4)}, V("Y", 2, 4, 6, 8)},
    /* 3^2 + 4^2 = 25 */
    {"norm_bmn", "B=1,M=1,N=2", {V("A", 3, 4)}, V("D", 5)},
    /* mean 2.5, variance 1.25 */
    {"layer_norm", "M=1,N=4", {V("X", 1, 2, 3, 4), V("gamma", 1, 1, 2, 2), V("beta", 0, 0, 0, 1)},
     V("Y", -1.3416354199689269, -0.447211806656309, 0.894423613312618, 3.6832708399378538)},
};

START_TEST(t_hand) {
  ir_workload_t *w = load(hand[_i].workload, hand[_i].sets);
  const ir_func_t *f = w->func;
  ir_data_t *d = data(f);
  for (int k = 0; k < 3 && hand[_i].in[k].name; k++)
    set_input(d, f, hand[_i].in[k].name, hand[_i].in[k].v, hand[_i].in[k].n);
  run(f, d);
  expect_output(d, f, hand[_i].out.name, hand[_i].out.v, hand[_i].out.n);
  ir_data_free(d);
  ir_workload_free(w);
}
END_TEST

/* Every workload at its default size (matmuls shrunk): parses, prints a
 * TVMScript function with a block per computed tensor, evaluates to finite
 * values, and has the FLOP and byte counts of its closed form. */
static const struct {
  const char *name, *sets, *out;
  double flops, bytes;
} all[] = {
    {"vector_add", NULL, "C", 1024, 3 * 1024 * 4},
    {"window_sum", NULL, "B", 2 * 1024, (1027 + 1024) * 4},
    {"square", NULL, "B", 4096.0 * 781, 2 * 4096.0 * 781 * 4},
    {"matmul", "M=256,N=256,K=256", "C", 2.0 * 256 * 256 * 256, 3 * 256 * 256 * 4},
    {"matmul_bt", "M=256,N=256,K=256", "C", 2.0 * 256 * 256 * 256, 3 * 256 * 256 * 4},
    {"dense_bias_relu", NULL, "Y", 2.0 * 128 * 784 + 2 * 128, (784 + 128 * 784 + 128 + 128) * 4},
    {"batch_matmul", NULL, "C", 2.0 * 16 * 128 * 128 * 64, (16 * 128 * 64 * 2 + 16 * 128 * 128) * 4},
    {"conv2d", NULL, "Y", 2.0 * 64 * 56 * 56 * 64 * 9, (64 * 56 * 56 * 2 + 64 * 64 * 9) * 4},
    {"softmax", NULL, "S", 5.0 * 256 * 1024, 2 * 256 * 1024 * 4},
    {"row_sum", NULL, "R", 128.0 * 4096, (128 * 4096 + 128) * 4},
    {"matmul_bf16", "M=256,N=256,K=256", "C", 2.0 * 256 * 256 * 256, 3 * 256 * 256 * 2},
    {"matmul_f16", "M=256,N=256,K=256", "C", 2.0 * 256 * 256 * 256, 3 * 256 * 256 * 2},
    {"batch_matmul_f16", "BATCH=2,M=128,N=64,K=256", "C", 2.0 * 2 * 128 * 64 * 256,
     (2 * 128 * 256 + 2 * 256 * 64) * 2 + 2 * 128 * 64 * 4},
    {"gemv", "M=512,N=256", "y", 2.0 * 512 * 256, (512 * 256 + 256 + 512) * 4},
    {"conv2d_nhwc", NULL, "Y", 2.0 * 64 * 56 * 56 * 64 * 9, (64 * 56 * 56 * 2 + 64 * 64 * 9) * 4},
    /* float16 data, the float32 accumulator a temporary; the rounding is no flop */
    {"conv2d_nhwc_f16", "H=8,W=8", "Y", 2.0 * 64 * 8 * 8 * 64 * 9, (64 * 8 * 8 * 2 + 64 * 64 * 9) * 2},
    /* the GEMM, then 10 per output: bias add, 0.5 z, 1 + tanh, tanh, 0.797 (...), z + 0.0447 z z z (4) */
    {"dense_bias_gelu", "B=16", "Y", 2.0 * 16 * 768 * 3072 + 10.0 * 16 * 3072,
     (16 * 768 + 3072 * 768 + 3072 + 16 * 3072) * 4},
    /* 1 (row sum) + 2 (sum of squares) + 12 per element of the normalisation */
    {"layer_norm", "M=256", "Y", 15.0 * 256 * 1024, (2 * 256 * 1024 + 2 * 1024) * 4},
    /* MetaSchedule's operator suite (te_workload), small: outputs times the window, padding no flop */
    {"conv1d_nlc", "L=40,CI=8,CO=32", "Y", 2.0 * 20 * 32 * 3 * 8, (40 * 8 + 3 * 8 * 32 + 20 * 32) * 4},
    {"conv2d_nhwc_sdg", "H=16,W=16,CI=8,CO=16,KS=3,ST=2,P=1,G=2", "Y", 2.0 * 8 * 8 * 16 * 9 * 4,
     (16 * 16 * 8 + 9 * 4 * 16 + 8 * 8 * 16) * 4},
    {"conv3d_ndhwc", "DD=4,H=8,W=8,CI=4,CO=8,KS=3,ST=1,P=1", "Y", 2.0 * 4 * 8 * 8 * 8 * 27 * 4,
     (4 * 8 * 8 * 4 + 27 * 4 * 8 + 4 * 8 * 8 * 8) * 4},
    {"depthwise_conv2d_nhwc", "H=16,W=16,C=8", "Y", 2.0 * 16 * 16 * 8 * 9, (16 * 16 * 8 * 2 + 9 * 8) * 4},
    /* the dilated input's zeros are multiplied too, as TVM's definition does */
    {"conv2d_transpose_nhwc", "CI=16,CO=8", "Y", 2.0 * 8 * 8 * 8 * 16 * 16, (4 * 4 * 16 + 16 * 16 * 8 + 8 * 8 * 8) * 4},
    {"conv2d_capsule_nhwijc", "H=8,W=8,CI=4,CO=4", "Y", 2.0 * 4 * 4 * 4 * 4 * 4 * 9 * 4 * 4,
     (8 * 8 * 16 * 4 + 9 * 16 * 4 * 4 + 4 * 4 * 16 * 4) * 4},
    /* sum of squares, then one sqrt per matrix */
    {"norm_bmn", "B=2,M=16,N=32", "D", 2.0 * 2 * 16 * 32 + 2, (2 * 16 * 32 + 2) * 4},
    /* bias, scale, offset and ReLU: 4 per output */
    {"conv2d_nhwc_bn_relu", "H=16,W=16,CO=8", "Y", 2.0 * 8 * 8 * 8 * 49 * 3 + 4.0 * 8 * 8 * 8,
     (16 * 16 * 3 + 49 * 3 * 8 + 3 * 8 + 8 * 8 * 8) * 4},
    {"transpose_batch_matmul", "SEQ=16,HEADS=2,DIM=8", "C", 2.0 * 2 * 16 * 16 * 8, (2 * 16 * 2 * 8 + 2 * 16 * 16) * 4},
};

START_TEST(t_all) {
  ir_workload_t *w = load(all[_i].name, all[_i].sets);
  const ir_func_t *f = w->func;
  ck_assert_str_eq(w->name, all[_i].name);
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  char want[64];
  snprintf(want, sizeof want, "with T.block(\"%s\"):", all[_i].out);
  ck_assert_ptr_nonnull(strstr(tn_buf_str(&b), "@T.prim_func"));
  ck_assert_msg(strstr(tn_buf_str(&b), want), "%s: no block %s", all[_i].name, all[_i].out);
  tn_buf_free(&b);
  ck_assert_double_eq(ir_func_flops(f), all[_i].flops);
  ck_assert_double_eq(ir_func_bytes(f), all[_i].bytes);
  ir_data_t *d = data(f);
  run(f, d);
  int o = param_index(f, all[_i].out);
  double l2 = 0;
  for (int64_t k = 0; k < d->sizes[o]; k++) {
    ck_assert_msg(isfinite(d->vals[o][k]), "%s: %s[%lld] not finite", all[_i].name, all[_i].out, (long long)k);
    l2 += d->vals[o][k] * d->vals[o][k];
  }
  ck_assert(l2 > 0);
  ir_data_free(d);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_hash_stable) {
  /* Same text and parameters give the same key; a different size does not. */
  ir_workload_t *a = load("matmul", NULL), *b = load("matmul", "M=1024"), *c = load("matmul", "M=512");
  ck_assert(tu_same_hash(a->func, b->func));
  ck_assert(!tu_same_hash(a->func, c->func));
  ir_workload_free(a);
  ir_workload_free(b);
  ir_workload_free(c);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("workloads");
  TCase *tc = TU_TCASE(s, "hand", 0, t_hash_stable);
  tcase_add_loop_test(tc, t_hand, 0, (int)TN_ARRAY_LEN(hand));
  TCase *ta = tu_tcase_add(s, "all", 120, NULL, 0);
  tcase_add_loop_test(ta, t_all, 0, (int)TN_ARRAY_LEN(all));
  return s;
}

TN_TEST_MAIN(make)
