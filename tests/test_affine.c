/* test_affine.c — the "affine" suite: affine forms of index expressions
 * (ir/affine.h): constants, sums and scaled variables in canonical order,
 * split and fuse bindings substituted, atoms, casts, merging, overflow, and
 * constant differences. */
#include <stdint.h>

#include "ir/affine.h"
#include "testutil.h"

static ir_func_t *F;
static ir_var_t *vi, *vj, *vk;
static ir_affine_t A;

static void setup(void) {
  F = ir_func_new("main");
  vi = ir_var_new(F, "i", IR_INT32);
  vj = ir_var_new(F, "j", IR_INT32);
  vk = ir_var_new(F, "k", IR_INT32);
  A = (ir_affine_t){0};
}

static void teardown(void) {
  ir_affine_free(&A);
  ir_func_free(F);
}

static ir_expr_t *V(ir_var_t *v) { return ir_varref(F, v); }
static ir_expr_t *C(int64_t c) { return ir_const_int(F, IR_INT64, c); }
static ir_expr_t *add(ir_expr_t *a, ir_expr_t *b) { return ir_bin(F, IR_E_ADD, a, b); }
static ir_expr_t *sub(ir_expr_t *a, ir_expr_t *b) { return ir_bin(F, IR_E_SUB, a, b); }
static ir_expr_t *mul(ir_expr_t *a, ir_expr_t *b) { return ir_bin(F, IR_E_MUL, a, b); }
static ir_expr_t *floordiv_c(ir_expr_t *a, int64_t c) { return ir_bin(F, IR_E_FLOORDIV, a, ir_int(F, c)); }
static ir_expr_t *floormod_c(ir_expr_t *a, int64_t c) { return ir_bin(F, IR_E_FLOORMOD, a, ir_int(F, c)); }

typedef struct term_spec {
  ir_var_t *v;
  int64_t coef;
} term_spec_t;

/* A is affine with constant c and exactly the terms t[1..n] in this order. */
static void expect_form(int64_t c, const term_spec_t *t, int n) {
  ck_assert(A.affine);
  ck_assert_int_eq(A.constant, c);
  ck_assert_int_eq(A.n, n);
  for (int k = 0; k < n; k++) {
    ck_assert_ptr_eq(A.terms[k].var, t[k + 1].v);
    ck_assert_int_eq(A.terms[k].coef, t[k + 1].coef);
    ck_assert_int_eq(ir_affine_coef(&A, t[k + 1].v), t[k + 1].coef);
  }
}

/* EXPECT(c, {var, coef}, ...): expect_form with those terms (a dummy first
 * entry lets the list be empty). */
#define EXPECT(c, ...)                                                 \
  expect_form((c), (term_spec_t[]){{NULL, 0}, __VA_ARGS__},            \
              (int)(sizeof((term_spec_t[]){{NULL, 0}, __VA_ARGS__}) / sizeof(term_spec_t)) - 1)

START_TEST(test_constants) {
  ck_assert(ir_affine_of(C(7), 0, &A));
  EXPECT(7);
  ck_assert(ir_affine_of(sub(mul(C(3), C(4)), C(2)), 0, &A));
  EXPECT(10);
  ck_assert_int_eq(ir_affine_coef(&A, vi), 0);
  ck_assert(ir_affine_of(ir_unary(F, IR_E_NEG, C(5)), 0, &A));
  EXPECT(-5);
}
END_TEST

START_TEST(test_scaled_sum) {
  /* i*4 + j, and the same written j + 4*i: one canonical order (variable id) */
  ck_assert(ir_affine_of(add(mul(V(vi), C(4)), V(vj)), 0, &A));
  EXPECT(0, {vi, 4}, {vj, 1});
  ck_assert(ir_affine_of(add(add(V(vj), mul(C(4), V(vi))), C(3)), 0, &A));
  EXPECT(3, {vi, 4}, {vj, 1});
  ck_assert_int_eq(ir_affine_coef(&A, vk), 0);
  int64_t c;
  ck_assert(ir_affine_coef_in(&A, vi, &c));
  ck_assert_int_eq(c, 4);
}
END_TEST

START_TEST(test_split_bindings) {
  /* a block reads X[v*16 + j] with v bound to io*8 + ii (a split loop): the
   * binding substituted gives io*128 + ii*16 + j */
  ir_var_t *io = ir_var_new(F, "io", IR_INT32), *ii = ir_var_new(F, "ii", IR_INT32);
  ir_var_t *v = vk;
  ir_expr_t *binding = add(mul(V(io), C(8)), V(ii));
  ir_expr_t *idx = add(mul(V(v), C(16)), V(vj));
  ck_assert(ir_affine_of(idx, 0, &A));
  EXPECT(0, {vj, 1}, {v, 16});
  ck_assert(ir_affine_of(ir_expr_subst(F, idx, &v, &binding, 1), 0, &A));
  EXPECT(0, {vj, 1}, {io, 128}, {ii, 16});
  /* split again: ii = iio*4 + iii, nested (((iio*4 + iii) + io*8)*16 + j) */
  ir_var_t *iio = ir_var_new(F, "iio", IR_INT32), *iii = ir_var_new(F, "iii", IR_INT32);
  ir_expr_t *inner = add(mul(V(iio), C(4)), V(iii));
  ir_expr_t *e = add(mul(add(inner, mul(V(io), C(8))), C(16)), V(vj));
  ck_assert(ir_affine_of(e, 0, &A));
  EXPECT(0, {vj, 1}, {io, 128}, {iio, 64}, {iii, 16});
}
END_TEST

START_TEST(test_fused_bindings) {
  /* fusing i (extent 16) and j leaves floordiv(f, 16) and floormod(f, 16):
   * not affine; as atoms, affine in every variable but f */
  ir_var_t *f = ir_var_new(F, "f", IR_INT32);
  ir_expr_t *e = add(mul(floordiv_c(V(f), 16), C(32)), add(floormod_c(V(f), 16), V(vk)));
  ck_assert(!ir_affine_of(e, 0, &A));
  ck_assert(!ir_affine_of(floordiv_c(V(f), 16), 0, &A));
  ck_assert(ir_affine_of(e, IR_AFFINE_ATOMS, &A));
  ck_assert_int_eq(A.n, 3);
  ck_assert_ptr_eq(A.terms[0].var, vk);
  ck_assert_ptr_null(A.terms[1].var); /* atoms after vk: f has the larger id */
  ck_assert_ptr_null(A.terms[2].var);
  int64_t c = -1;
  ck_assert(ir_affine_coef_in(&A, vk, &c));
  ck_assert_int_eq(c, 1);
  ck_assert(ir_affine_coef_in(&A, vi, &c));
  ck_assert_int_eq(c, 0);
  ck_assert(!ir_affine_coef_in(&A, f, &c));
  /* 16*floordiv(f, 16) + floormod(f, 16) is f, which the simplifier (on the
   * same form) recombines */
  ir_expr_t *whole = add(mul(floordiv_c(V(f), 16), C(16)), floormod_c(V(f), 16));
  ck_assert(ir_affine_of(whole, IR_AFFINE_ATOMS, &A));
  ck_assert_int_eq(A.n, 2);
  ck_assert(ir_affine_of(ir_simplify(F, whole, NULL), 0, &A));
  EXPECT(0, {f, 1});
}
END_TEST

START_TEST(test_negative_and_subtraction) {
  ck_assert(ir_affine_of(sub(V(vj), mul(C(3), V(vi))), 0, &A));
  EXPECT(0, {vi, -3}, {vj, 1});
  /* (i + 5) - (j - 2) - -(k * 2) */
  ir_expr_t *e = sub(sub(add(V(vi), C(5)), sub(V(vj), C(2))), ir_unary(F, IR_E_NEG, mul(V(vk), C(2))));
  ck_assert(ir_affine_of(e, 0, &A));
  EXPECT(7, {vi, 1}, {vj, -1}, {vk, 2});
  ck_assert(ir_affine_of(mul(C(-1), sub(V(vi), C(1))), 0, &A));
  EXPECT(1, {vi, -1});
}
END_TEST

START_TEST(test_merge_and_drop) {
  ck_assert(ir_affine_of(add(V(vi), V(vi)), 0, &A));
  EXPECT(0, {vi, 2});
  ck_assert(ir_affine_of(sub(add(mul(V(vi), C(2)), mul(C(3), V(vi))), V(vi)), 0, &A));
  EXPECT(0, {vi, 4});
  ck_assert(ir_affine_of(sub(V(vi), V(vi)), 0, &A));
  EXPECT(0);
  ck_assert(ir_affine_of(add(sub(V(vi), V(vi)), V(vj)), 0, &A));
  EXPECT(0, {vj, 1});
  ck_assert(ir_affine_of(mul(V(vi), C(0)), 0, &A));
  EXPECT(0);
  /* equal atoms merge too */
  ck_assert(ir_affine_of(sub(floordiv_c(V(vi), 4), floordiv_c(V(vi), 4)), IR_AFFINE_ATOMS, &A));
  EXPECT(0);
}
END_TEST

START_TEST(test_overflow) {
  /* coefficients, merged coefficients and the constant: not affine, never UB */
  ck_assert(!ir_affine_of(mul(mul(V(vi), C(INT64_MAX)), C(2)), 0, &A));
  ck_assert(!ir_affine_of(add(mul(V(vi), C(INT64_MAX)), V(vi)), 0, &A));
  ck_assert(!ir_affine_of(add(C(INT64_MAX), add(V(vi), C(1))), 0, &A));
  ck_assert(!ir_affine_of(sub(C(-INT64_MAX), C(1)), 0, &A)); /* INT64_MIN cannot be negated */
  ck_assert(!ir_affine_of(mul(V(vi), C(INT64_MIN)), 0, &A));
  ck_assert(!ir_affine_of(mul(V(vi), C(INT64_MIN)), IR_AFFINE_ATOMS, &A));
  int64_t c;
  ck_assert(!ir_affine_coef_in(&A, vj, &c));
  /* the largest coefficient that can be negated is fine */
  ck_assert(ir_affine_of(sub(C(0), mul(V(vi), C(INT64_MAX))), 0, &A));
  EXPECT(0, {vi, -INT64_MAX});
}
END_TEST

START_TEST(test_not_affine) {
  int64_t shape[1] = {64};
  ir_buffer_t *b = ir_buffer_new(F, "B", IR_INT32, 1, shape, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_expr_t *ld = ir_load(F, b, (ir_expr_t *[]){V(vi)}, 1);
  ck_assert(!ir_affine_of(add(V(vj), ld), 0, &A));
  ck_assert(!ir_affine_of(mul(V(vi), V(vj)), 0, &A));
  ck_assert(!ir_affine_of(ir_bin(F, IR_E_MIN, V(vi), C(3)), 0, &A));
  ck_assert(!ir_affine_of(ir_float(F, IR_FLOAT32, 1.0), IR_AFFINE_CASTS, &A));
  /* zero times a load is still a load to analyse */
  ck_assert(!ir_affine_of(mul(ld, C(0)), 0, &A));
  /* as an atom: affine in j, not in i (the load's index) */
  ck_assert(ir_affine_of(add(mul(V(vj), C(2)), ld), IR_AFFINE_ATOMS, &A));
  ck_assert_int_eq(A.n, 2);
  ck_assert_ptr_eq(A.terms[0].e, ld); /* ordered by its smallest variable, i */
  ck_assert_ptr_null(A.terms[0].var);
  int64_t c;
  ck_assert(ir_affine_coef_in(&A, vj, &c));
  ck_assert_int_eq(c, 2);
  ck_assert(!ir_affine_coef_in(&A, vi, &c));
}
END_TEST

START_TEST(test_casts) {
  ir_expr_t *wide = add(ir_cast(F, IR_INT64, V(vi)), C(1));
  ck_assert(!ir_affine_of(wide, 0, &A));
  ck_assert(ir_affine_of(wide, IR_AFFINE_CASTS, &A));
  EXPECT(1, {vi, 1});
  /* through a float: never taken as exact */
  ir_expr_t *round_trip = ir_cast(F, IR_INT32, ir_cast(F, IR_FLOAT32, V(vi)));
  ck_assert(!ir_affine_of(round_trip, IR_AFFINE_CASTS, &A));
  ck_assert(ir_affine_of(round_trip, IR_AFFINE_CASTS | IR_AFFINE_ATOMS, &A));
  int64_t c;
  ck_assert(!ir_affine_coef_in(&A, vi, &c));
}
END_TEST

START_TEST(test_const_diff) {
  ir_affine_t b = {0};
  int64_t d = 0;
  /* h + r - 1 against the condition's h + r: they differ by -1 */
  ck_assert(ir_affine_of(sub(add(V(vi), V(vj)), C(1)), 0, &A));
  ck_assert(ir_affine_of(add(V(vj), V(vi)), 0, &b));
  ck_assert(ir_affine_const_diff(&A, &b, &d));
  ck_assert_int_eq(d, -1);
  ck_assert(ir_affine_const_diff(&b, &A, &d));
  ck_assert_int_eq(d, 1);
  ck_assert(ir_affine_of(add(V(vj), mul(V(vi), C(2))), 0, &b));
  ck_assert(!ir_affine_const_diff(&A, &b, &d));
  ck_assert(ir_affine_of(V(vi), 0, &b));
  ck_assert(!ir_affine_const_diff(&A, &b, &d));
  /* a difference that overflows is not constant */
  ck_assert(ir_affine_of(add(V(vi), C(INT64_MAX)), 0, &A));
  ck_assert(ir_affine_of(sub(V(vi), C(2)), 0, &b));
  ck_assert(!ir_affine_const_diff(&A, &b, &d));
  ir_affine_free(&b);
}
END_TEST

START_TEST(test_many_terms) {
  /* no term limit: 300 variables, each twice (merged), in id order */
  enum { N = 300 };
  ir_var_t *v[N];
  ir_expr_t *e = C(0);
  for (int k = 0; k < N; k++) v[k] = ir_var_new(F, "v", IR_INT32);
  for (int k = N - 1; k >= 0; k--) e = add(add(e, mul(V(v[k]), C(k + 1))), V(v[k]));
  ck_assert(ir_affine_of(e, 0, &A));
  ck_assert_int_eq(A.n, N);
  for (int k = 0; k < N; k++) {
    ck_assert_ptr_eq(A.terms[k].var, v[k]);
    ck_assert_int_eq(A.terms[k].coef, k + 2);
  }
  /* the form is reused: a later call replaces it */
  ck_assert(ir_affine_of(V(vi), 0, &A));
  EXPECT(0, {vi, 1});
}
END_TEST

/* ir_affine_coef_of agrees with ir_affine_of + ir_affine_coef_in, variable
 * by variable, on sums, scalings, atoms (with and without IR_AFFINE_ATOMS),
 * and casts; it refuses v inside an atom even when the atoms cancel, and
 * sees only overflows on the way to v (the documented differences). */
START_TEST(test_coef_of) {
  ir_expr_t *es[] = {
      add(mul(V(vi), C(4)), V(vj)),
      sub(mul(add(mul(V(vi), C(8)), V(vj)), C(16)), V(vk)),
      add(floordiv_c(V(vi), 4), mul(V(vj), C(3))),
      add(floormod_c(add(V(vi), V(vj)), 8), V(vk)),
      ir_cast(F, IR_INT64, add(V(vi), mul(C(2), V(vk)))),
      mul(V(vi), V(vj)),
      ir_unary(F, IR_E_NEG, sub(V(vk), mul(C(-5), V(vj)))),
  };
  ir_var_t *vars[] = {vi, vj, vk};
  const unsigned modes[] = {0, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, IR_AFFINE_CASTS};
  for (size_t m = 0; m < TN_ARRAY_LEN(modes); m++)
    for (size_t e = 0; e < TN_ARRAY_LEN(es); e++) {
      ir_affine_free(&A);
      bool whole = ir_affine_of(es[e], modes[m], &A);
      for (size_t v = 0; v < TN_ARRAY_LEN(vars); v++) {
        int64_t want = 0, got = -1;
        bool ok_want = whole && ir_affine_coef_in(&A, vars[v], &want);
        bool ok_got = ir_affine_coef_of(es[e], vars[v], modes[m], &got);
        ck_assert_msg(ok_got == ok_want && (!ok_got || got == want), "mode %zu expr %zu var %zu: %d %lld vs %d %lld", m,
                      e, v, ok_got, (long long)got, ok_want, (long long)want);
      }
    }
  /* an overflow of i's coefficient: i is refused, other variables are not asked about it */
  int64_t c;
  ir_expr_t *big = add(mul(V(vi), C(INT64_C(1) << 62)), mul(V(vi), C(INT64_C(1) << 62)));
  ck_assert(!ir_affine_coef_of(big, vi, 0, &c));
  ck_assert(ir_affine_coef_of(big, vj, 0, &c) && c == 0);
  ir_expr_t *cancel = sub(floordiv_c(V(vi), 2), floordiv_c(V(vi), 2));
  ck_assert(!ir_affine_coef_of(cancel, vi, IR_AFFINE_ATOMS, &c));
  ck_assert(ir_affine_coef_of(cancel, vj, IR_AFFINE_ATOMS, &c) && c == 0);
}
END_TEST

static void fixture(TCase *tc) { tcase_add_checked_fixture(tc, setup, teardown); }

static Suite *make_suite(void) {
  Suite *s = suite_create("affine");
  fixture(TU_TCASE(s, "forms", 0, test_constants, test_scaled_sum, test_split_bindings, test_fused_bindings,
                   test_negative_and_subtraction, test_merge_and_drop, test_many_terms));
  fixture(TU_TCASE(s, "limits", 0, test_overflow, test_not_affine, test_casts));
  fixture(TU_TCASE(s, "queries", 0, test_const_diff, test_coef_of));
  return s;
}

TN_TEST_MAIN(make_suite)
