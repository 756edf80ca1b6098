/* test_workloads.c — suite "workloads": every workload in workloads/ parses,
 * prints and evaluates; small instances are checked against results worked
 * out by hand, and FLOP/byte counts against closed forms. */
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "testutil.h"

/* Loads workloads/NAME.tw with "K=V,K=V" overrides. */
static ir_workload_t *load(const char *name, const char *sets) {
  char path[512];
  snprintf(path, sizeof path, SRC("workloads/%s.tw"), name);
  ir_param_set_t ov[16];
  int n = 0;
  tn_arena_t *a = tn_arena_new();
  tn_err_t err = {0};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", sets ? sets : "");
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
    ck_assert_int_eq(ir_param_set_parse(tok, a, &ov[n++], &err), TN_OK);
  ir_workload_t *w = NULL;
  int rc = ir_workload_load(path, ov, n, &w, &err);
  ck_assert_msg(rc == TN_OK, "%s: %s", name, err.msg);
  tn_arena_free(a);
  return w;
}

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

#define SET(name, ...) do { const double v_[] = {__VA_ARGS__}; set_input(d, f, name, v_, (int)TN_ARRAY_LEN(v_)); } while (0)
#define EXPECT(name, ...) do { const double v_[] = {__VA_ARGS__}; expect_output(d, f, name, v_, (int)TN_ARRAY_LEN(v_)); } while (0)
#define CASE(wname, sets) ir_workload_t *w = load(wname, sets); const ir_func_t *f = w->func; ir_data_t *d = data(f)
#define END() ir_data_free(d); ir_workload_free(w)

START_TEST(t_vector_add) {
  CASE("vector_add", "N=4");
  SET("A", 1, 2, 3, 4);
  SET("B", 10, 20, 30, 40);
  run(f, d);
  EXPECT("C", 11, 22, 33, 44);
  END();
}
END_TEST

START_TEST(t_window_sum) {
  CASE("window_sum", "N=3");
  SET("A", 1, 2, 3, 4, 5, 100); /* the last element is outside every window */
  run(f, d);
  EXPECT("B", 6, 9, 12);
  END();
}
END_TEST

START_TEST(t_square) {
  CASE("square", "M=2,N=3");
  SET("A", 1, -2, 3, 0.5, -1, 2);
  run(f, d);
  EXPECT("B", 1, 4, 9, 0.25, 1, 4);
  END();
}
END_TEST

START_TEST(t_matmul) {
  CASE("matmul", "M=2,N=2,K=3");
  SET("A", 1, 2, 3, 4, 5, 6);
  SET("B", 1, 0, 0, 1, 1, 1);
  run(f, d);
  EXPECT("C", 4, 5, 10, 11);
  END();
}
END_TEST

START_TEST(t_matmul_bt) {
  CASE("matmul_bt", "M=2,N=2,K=3");
  SET("A", 1, 2, 3, 4, 5, 6);
  SET("B", 1, 0, 1, 0, 1, 1);
  run(f, d);
  EXPECT("C", 4, 5, 10, 11);
  END();
}
END_TEST

START_TEST(t_dense_bias_relu) {
  CASE("dense_bias_relu", "IN=3,OUT=2");
  SET("X", 1, 2, 3);
  SET("W", 1, 1, 1, -1, 0, 0);
  SET("bias", 0.5, 0.25);
  run(f, d);
  EXPECT("Y", 6.5, 0); /* D = [6, -1]; relu(6.5) = 6.5, relu(-0.75) = 0 */
  END();
}
END_TEST

START_TEST(t_batch_matmul) {
  CASE("batch_matmul", "BATCH=2,M=1,N=1,K=2");
  SET("A", 1, 2, 3, 4);
  SET("B", 5, 6, 7, 8);
  run(f, d);
  EXPECT("C", 17, 53);
  END();
}
END_TEST

START_TEST(t_conv2d) {
  CASE("conv2d", "C=1,H=2,W=2,F=1");
  SET("X", 1, 2, 3, 4);
  SET("Wt", 0, 0, 0, 0, 1, 0, 0, 0, 2);
  run(f, d);
  /* Y[y][x] = X[y][x] + 2 * X[y+1][x+1], zero outside: 1+8, 2, 3, 4. */
  EXPECT("Y", 9, 2, 3, 4);
  END();
}
END_TEST

START_TEST(t_softmax) {
  CASE("softmax", "M=2,N=3");
  SET("A", 0, log(2.0), log(3.0), 5, 5, 5);
  run(f, d);
  EXPECT("S", 1.0 / 6, 2.0 / 6, 3.0 / 6, 1.0 / 3, 1.0 / 3, 1.0 / 3);
  END();
}
END_TEST

START_TEST(t_row_sum) {
  CASE("row_sum", "M=2,N=3");
  SET("A", 1, 2, 3, 4, 5, 6);
  run(f, d);
  EXPECT("R", 6, 15);
  END();
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
  ck_assert_uint_eq(ir_func_hash(a->func), ir_func_hash(b->func));
  ck_assert_uint_ne(ir_func_hash(a->func), ir_func_hash(c->func));
  ir_workload_free(a);
  ir_workload_free(b);
  ir_workload_free(c);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("workloads");
  TCase *tc = tcase_create("hand");
  tcase_add_test(tc, t_vector_add);
  tcase_add_test(tc, t_window_sum);
  tcase_add_test(tc, t_square);
  tcase_add_test(tc, t_matmul);
  tcase_add_test(tc, t_matmul_bt);
  tcase_add_test(tc, t_dense_bias_relu);
  tcase_add_test(tc, t_batch_matmul);
  tcase_add_test(tc, t_conv2d);
  tcase_add_test(tc, t_softmax);
  tcase_add_test(tc, t_row_sum);
  tcase_add_test(tc, t_hash_stable);
  suite_add_tcase(s, tc);
  TCase *ta = tcase_create("all");
  tcase_set_timeout(ta, 120);
  tcase_add_loop_test(ta, t_all, 0, (int)TN_ARRAY_LEN(all));
  suite_add_tcase(s, ta);
  return s;
}

TN_TEST_MAIN(make)
