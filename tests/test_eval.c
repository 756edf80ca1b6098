/* test_eval.c — suite "eval": the reference evaluator on hand-built IR (known
 * values, scheduled shapes, errors), fast path against scalar path bit for
 * bit, deterministic data, error metrics, flop and byte counts. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "ir/ir.h"
#include "testutil.h"

/* ---- building IR by hand ----------------------------------------------- */

#define VR(v) ir_varref(f, (v))
#define IN(n) ir_int(f, (n))
#define FL(x) ir_float(f, IR_FLOAT32, (x))
#define OP(k, a, b) ir_bin(f, IR_E_##k, (a), (b))

static ir_buffer_t *new_buf(ir_func_t *f, const char *name, ir_dtype_t t, ir_scope_t scope,
                            ir_buf_role_t role, int ndim, va_list ap) {
  int64_t shape[IR_MAX_DIMS];
  for (int i = 0; i < ndim; i++) shape[i] = va_arg(ap, int64_t);
  return ir_buffer_new(f, name, t, ndim, shape, scope, role);
}

static void append_ptr(ir_func_t *f, void ***arr, int *n, void *p) {
  void **na = tn_arena_alloc(f->arena, sizeof(void *) * (size_t)(*n + 1));
  if (*n) memcpy(na, *arr, sizeof(void *) * (size_t)*n);
  na[(*n)++] = p;
  *arr = na;
}

/* A parameter; shape given as int64_t varargs. */
static ir_buffer_t *param(ir_func_t *f, const char *name, ir_buf_role_t role, ir_dtype_t t,
                          int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  ir_buffer_t *b = new_buf(f, name, t, IR_SCOPE_GLOBAL, role, ndim, ap);
  va_end(ap);
  append_ptr(f, (void ***)&f->params, &f->nparams, b);
  return b;
}

/* A temporary allocated in `owner` (a block statement). */
static ir_buffer_t *temp(ir_func_t *f, ir_stmt_t *owner, const char *name, ir_scope_t scope,
                         int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  ir_buffer_t *b = new_buf(f, name, IR_FLOAT32, scope, IR_BUF_TEMP, ndim, ap);
  va_end(ap);
  append_ptr(f, (void ***)&owner->u.block.allocs, &owner->u.block.nallocs, b);
  return b;
}

static ir_expr_t *ld(ir_func_t *f, ir_buffer_t *b, ...) {
  ir_expr_t *idx[IR_MAX_DIMS];
  va_list ap;
  va_start(ap, b);
  for (int i = 0; i < b->ndim; i++) idx[i] = va_arg(ap, ir_expr_t *);
  va_end(ap);
  return ir_load(f, b, idx, b->ndim);
}

static ir_stmt_t *st(ir_func_t *f, ir_buffer_t *b, ir_expr_t *value, ...) {
  ir_expr_t *idx[IR_MAX_DIMS];
  va_list ap;
  va_start(ap, value);
  for (int i = 0; i < b->ndim; i++) idx[i] = va_arg(ap, ir_expr_t *);
  va_end(ap);
  return ir_store(f, b, idx, b->ndim, value);
}

static ir_var_t *var(ir_func_t *f, const char *name) { return ir_var_new(f, name, IR_INT32); }

static ir_stmt_t *block(ir_func_t *f, const char *name, ir_stmt_t *init, ir_stmt_t *body) {
  ir_stmt_t *s = ir_block_new(f, name);
  s->u.block.init = init;
  s->u.block.body = body;
  return s;
}

static void iter(ir_func_t *f, ir_stmt_t *blk, ir_var_t *v, ir_iter_kind_t kind, int64_t extent,
                 ir_expr_t *binding) {
  ir_block_t *b = &blk->u.block;
  ir_iter_t *na = TN_NEWN(f->arena, ir_iter_t, b->niters + 1);
  if (b->niters) memcpy(na, b->iters, sizeof(ir_iter_t) * (size_t)b->niters);
  na[b->niters++] = (ir_iter_t){.var = v, .kind = kind, .extent = extent, .binding = binding};
  b->iters = na;
}

/* Loops around body: n pairs (ir_var_t *, int extent), outermost first. */
static ir_stmt_t *loops(ir_func_t *f, ir_stmt_t *body, int n, ...) {
  ir_var_t *v[8];
  int64_t e[8];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    v[i] = va_arg(ap, ir_var_t *);
    e[i] = va_arg(ap, int);
  }
  va_end(ap);
  for (int i = n - 1; i >= 0; i--) body = ir_loop_new(f, v[i], e[i], body);
  return body;
}

static void root_body(ir_func_t *f, int n, ...) {
  ir_stmt_t *items[8];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) items[i] = va_arg(ap, ir_stmt_t *);
  va_end(ap);
  f->root->u.block.body = n == 1 ? items[0] : ir_seq(f, items, n);
}

static int64_t I64(int64_t v) { return v; }

/* ---- the IR under test ------------------------------------------------- */

typedef enum mm_shape {
  MM_IJK,     /* as the parser lowers it */
  MM_IKJ,     /* reordered: init under the k loop, j innermost */
  MM_SPLITK,  /* k split by 4 with a predicate: v_k = k0 * 4 + k1 */
  MM_SPLITJ,  /* j split by 20 with a predicate, k inside */
  MM_FUSED,   /* i and j fused: v_i = ij // N, v_j = ij % N */
  MM_DECOMP,  /* init decomposed into its own block and loop nest */
  MM_CACHE,   /* a row of A copied into a local cache under the i loop */
  MM__COUNT
} mm_shape_t;

/* C[i, j] = sum(k < K: A[i, k] * B[k, j]) in one of several scheduled shapes. */
static ir_func_t *build_matmul(int M, int N, int K, mm_shape_t shape) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = param(f, "A", IR_BUF_INPUT, IR_FLOAT32, 2, I64(M), I64(K));
  ir_buffer_t *B = param(f, "B", IR_BUF_INPUT, IR_FLOAT32, 2, I64(K), I64(N));
  ir_buffer_t *C = param(f, "C", IR_BUF_OUTPUT, IR_FLOAT32, 2, I64(M), I64(N));
  ir_var_t *i = var(f, "i"), *j = var(f, "j"), *k = var(f, "k"), *k0 = var(f, "k0"),
           *k1 = var(f, "k1"), *j0 = var(f, "j0"), *j1 = var(f, "j1"), *ij = var(f, "ij");
  ir_var_t *vi = var(f, "v_i"), *vj = var(f, "v_j"), *vk = var(f, "v_k");
  ir_buffer_t *Al = NULL;
  ir_expr_t *a_elem = ld(f, A, VR(vi), VR(vk));
  ir_stmt_t *cache = NULL;
  if (shape == MM_CACHE) {
    ir_var_t *ci = var(f, "c_i"), *ck = var(f, "c_k"), *kk = var(f, "kk");
    Al = ir_buffer_new(f, "A_local", IR_FLOAT32, 1, (int64_t[]){K}, IR_SCOPE_LOCAL, IR_BUF_TEMP);
    ir_stmt_t *cb = block(f, "A_local", NULL, st(f, Al, ld(f, A, VR(ci), VR(ck)), VR(ck)));
    iter(f, cb, ci, IR_ITER_SPATIAL, M, VR(i));
    iter(f, cb, ck, IR_ITER_SPATIAL, K, VR(kk));
    cache = loops(f, cb, 1, kk, K);
    a_elem = ld(f, Al, VR(vk));
  }
  ir_expr_t *upd = OP(ADD, ld(f, C, VR(vi), VR(vj)), OP(MUL, a_elem, ld(f, B, VR(vk), VR(vj))));
  ir_stmt_t *init = shape == MM_DECOMP ? NULL : st(f, C, FL(0), VR(vi), VR(vj));
  ir_stmt_t *cb = block(f, "C", init, st(f, C, upd, VR(vi), VR(vj)));
  if (Al) append_ptr(f, (void ***)&cb->u.block.allocs, &cb->u.block.nallocs, Al);
  ir_expr_t *bi = VR(i), *bj = VR(j), *bk = VR(k);
  if (shape == MM_SPLITK) bk = OP(ADD, OP(MUL, VR(k0), IN(4)), VR(k1));
  if (shape == MM_SPLITJ) bj = OP(ADD, OP(MUL, VR(j0), IN(20)), VR(j1));
  if (shape == MM_FUSED) bi = OP(FLOORDIV, VR(ij), IN(N)), bj = OP(FLOORMOD, VR(ij), IN(N));
  iter(f, cb, vi, IR_ITER_SPATIAL, M, bi);
  iter(f, cb, vj, IR_ITER_SPATIAL, N, bj);
  iter(f, cb, vk, IR_ITER_REDUCE, K, bk);
  if (shape == MM_SPLITK) cb->u.block.predicate = OP(LT, bk, IN(K));
  if (shape == MM_SPLITJ) cb->u.block.predicate = OP(LT, bj, IN(N));
  switch (shape) {
  case MM_IKJ: root_body(f, 1, loops(f, cb, 3, i, M, k, K, j, N)); break;
  case MM_SPLITK: root_body(f, 1, loops(f, cb, 4, i, M, j, N, k0, (K + 3) / 4, k1, 4)); break;
  case MM_SPLITJ: root_body(f, 1, loops(f, cb, 4, i, M, j0, (N + 19) / 20, j1, 20, k, K)); break;
  case MM_FUSED: root_body(f, 1, loops(f, cb, 2, ij, M * N, k, K)); break;
  case MM_CACHE: {
    ir_stmt_t *items[2] = {cache, loops(f, cb, 2, j, N, k, K)};
    root_body(f, 1, ir_loop_new(f, i, M, ir_seq(f, items, 2)));
    break;
  }
  case MM_DECOMP: {
    ir_var_t *ii = var(f, "ii"), *jj = var(f, "jj"), *wi = var(f, "w_i"), *wj = var(f, "w_j");
    ir_stmt_t *ib = block(f, "C_init", NULL, st(f, C, FL(0), VR(wi), VR(wj)));
    iter(f, ib, wi, IR_ITER_SPATIAL, M, VR(ii));
    iter(f, ib, wj, IR_ITER_SPATIAL, N, VR(jj));
    root_body(f, 2, loops(f, ib, 2, ii, M, jj, N), loops(f, cb, 3, i, M, j, N, k, K));
    break;
  }
  default: root_body(f, 1, loops(f, cb, 3, i, M, j, N, k, K)); break;
  }
  return f;
}

/* Y[i] = sum(r < 3: P[i + r] * W[r]) with P[i] = select(1 <= i < N + 1, X[i - 1], 0):
 * a padded temp (in root allocs) and a window. */
static ir_func_t *build_padded_window(int N) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *X = param(f, "X", IR_BUF_INPUT, IR_FLOAT32, 1, I64(N));
  ir_buffer_t *W = param(f, "W", IR_BUF_INPUT, IR_FLOAT32, 1, I64(3));
  ir_buffer_t *Y = param(f, "Y", IR_BUF_OUTPUT, IR_FLOAT32, 1, I64(N));
  ir_buffer_t *P = temp(f, f->root, "P", IR_SCOPE_GLOBAL, 1, I64(N + 2));
  ir_var_t *p = var(f, "p"), *vp = var(f, "v_p"), *i = var(f, "i"), *r = var(f, "r");
  ir_var_t *vi = var(f, "v_i"), *vr = var(f, "v_r");
  ir_expr_t *in = OP(AND, OP(GE, VR(vp), IN(1)), OP(LT, VR(vp), IN(N + 1)));
  ir_expr_t *padded = ir_select(f, in, ld(f, X, OP(SUB, VR(vp), IN(1))), FL(0));
  ir_stmt_t *pb = block(f, "P", NULL, st(f, P, padded, VR(vp)));
  iter(f, pb, vp, IR_ITER_SPATIAL, N + 2, VR(p));
  ir_expr_t *prod = OP(MUL, ld(f, P, OP(ADD, VR(vi), VR(vr))), ld(f, W, VR(vr)));
  ir_stmt_t *yb =
      block(f, "Y", st(f, Y, FL(0), VR(vi)), st(f, Y, OP(ADD, ld(f, Y, VR(vi)), prod), VR(vi)));
  iter(f, yb, vi, IR_ITER_SPATIAL, N, VR(i));
  iter(f, yb, vr, IR_ITER_REDUCE, 3, VR(r));
  root_body(f, 2, loops(f, pb, 1, p, N + 2), loops(f, yb, 2, i, N, r, 3));
  return f;
}

/* M[i] = max(j < N: A[i, j]), reduced along the inner loop (or, with
 * `outer`, with i inside j so the lanes run over rows). */
static ir_func_t *build_rowmax(int R, int N, bool outer) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = param(f, "A", IR_BUF_INPUT, IR_FLOAT32, 2, I64(R), I64(N));
  ir_buffer_t *Mx = param(f, "M", IR_BUF_OUTPUT, IR_FLOAT32, 1, I64(R));
  ir_var_t *i = var(f, "i"), *j = var(f, "j"), *vi = var(f, "v_i"), *vj = var(f, "v_j");
  ir_expr_t *lowest = ir_float(f, IR_FLOAT32, ir_dtype_min_value(IR_FLOAT32));
  ir_stmt_t *b = block(f, "M", st(f, Mx, lowest, VR(vi)),
                       st(f, Mx, OP(MAX, ld(f, Mx, VR(vi)), ld(f, A, VR(vi), VR(vj))), VR(vi)));
  iter(f, b, vi, IR_ITER_SPATIAL, R, VR(i));
  iter(f, b, vj, IR_ITER_REDUCE, N, VR(j));
  root_body(f, 1, outer ? loops(f, b, 2, j, N, i, R) : loops(f, b, 2, i, R, j, N));
  return f;
}

/* S[v] = sum(k < 5: A[v, k]) over loops i0 (3) x i1 (4) with v = i0 * 4 + i1
 * and the predicate v < 10; with `inner_split` the split loop is innermost
 * (T[v] = A[v, 0] * 2, no reduction) so the predicate masks lanes. */
static ir_func_t *build_split(bool inner_split) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = param(f, "A", IR_BUF_INPUT, IR_FLOAT32, 2, I64(10), I64(5));
  ir_buffer_t *S = param(f, "S", IR_BUF_OUTPUT, IR_FLOAT32, 1, I64(10));
  ir_var_t *i0 = var(f, "i0"), *i1 = var(f, "i1"), *k = var(f, "k"), *vi = var(f, "v_i"),
           *vk = var(f, "v_k");
  ir_expr_t *bind = OP(ADD, OP(MUL, VR(i0), IN(4)), VR(i1));
  ir_stmt_t *b;
  if (inner_split) {
    b = block(f, "S", NULL, st(f, S, OP(MUL, ld(f, A, VR(vi), IN(0)), FL(2)), VR(vi)));
    iter(f, b, vi, IR_ITER_SPATIAL, 10, bind);
    b->u.block.predicate = OP(LT, bind, IN(10));
    root_body(f, 1, loops(f, b, 2, i0, 3, i1, 4));
    return f;
  }
  b = block(f, "S", st(f, S, FL(0), VR(vi)),
            st(f, S, OP(ADD, ld(f, S, VR(vi)), ld(f, A, VR(vi), VR(vk))), VR(vi)));
  iter(f, b, vi, IR_ITER_SPATIAL, 10, bind);
  iter(f, b, vk, IR_ITER_REDUCE, 5, VR(k));
  b->u.block.predicate = OP(LT, bind, IN(10));
  root_body(f, 1, loops(f, b, 3, i0, 3, i1, 4, k, 5));
  return f;
}

/* A one-statement elementwise function over one loop: Out[store_idx] = value,
 * where `i` / `v` are the loop and iterator variables the callbacks use. */
typedef struct ew {
  ir_func_t *f;
  ir_buffer_t *A, *Out;
  ir_var_t *i, *v;
  ir_stmt_t *blk;
} ew_t;

static ew_t ew_new(int n_in, int n_out, ir_dtype_t t) {
  ew_t w;
  ir_func_t *f = w.f = ir_func_new("main");
  w.A = param(f, "A", IR_BUF_INPUT, t, 1, I64(n_in));
  w.Out = param(f, "Out", IR_BUF_OUTPUT, t, 1, I64(n_out));
  w.i = var(f, "i");
  w.v = var(f, "v");
  return w;
}

static ir_func_t *ew_finish(ew_t *w, int extent, ir_expr_t *store_idx, ir_expr_t *value) {
  ir_func_t *f = w->f;
  w->blk = block(f, "Out", NULL, st(f, w->Out, value, store_idx));
  iter(f, w->blk, w->v, IR_ITER_SPATIAL, extent, VR(w->i));
  root_body(f, 1, loops(f, w->blk, 1, w->i, extent));
  return f;
}

/* ---- running ----------------------------------------------------------- */

static ir_data_t *data_for(const ir_func_t *f, uint64_t seed) {
  ir_data_t *d;
  tn_err_t err = {0};
  ck_assert_msg(ir_data_new(f, seed, (size_t)1 << 30, &d, &err) == 0, "%s", err.msg);
  return d;
}

static ir_data_t *eval_ok(const ir_func_t *f, uint64_t seed, bool scalar, ir_eval_stats_t *stats) {
  ir_data_t *d = data_for(f, seed);
  tn_err_t err = {0};
  int rc = ir_eval_opts(f, d, scalar, stats, &err);
  ck_assert_msg(rc == 0, "eval failed (%d): %s", rc, err.msg);
  return d;
}

/* Evaluates with the fast and the scalar path on the same data; the outputs
 * must be identical bit for bit.  Returns the fast run's counters. */
static ir_eval_stats_t same_both_ways(const ir_func_t *f, uint64_t seed) {
  ir_eval_stats_t fs, ss;
  ir_data_t *a = eval_ok(f, seed, false, &fs), *b = eval_ok(f, seed, true, &ss);
  for (int i = 0; i < a->n; i++)
    ck_assert_msg(memcmp(a->vals[i], b->vals[i], sizeof(double) * (size_t)a->sizes[i]) == 0,
                  "parameter %d differs between the fast and the scalar path", i);
  ck_assert_int_eq(ss.fast_iters, 0);
  ck_assert_int_eq(fs.fast_iters + fs.scalar_iters, ss.scalar_iters);
  ir_data_free(a);
  ir_data_free(b);
  return fs;
}

/* Fast and scalar runs must fail alike; returns the code, message in msg,
 * the fast run's counters in stats (may be NULL). */
static int eval_fails(const ir_func_t *f, char *msg, size_t cap, ir_eval_stats_t *stats) {
  tn_err_t e1 = {0}, e2 = {0};
  ir_data_t *a = data_for(f, 7), *b = data_for(f, 7);
  int r1 = ir_eval_opts(f, a, false, stats, &e1), r2 = ir_eval_opts(f, b, true, NULL, &e2);
  ck_assert_int_eq(r1, r2);
  ck_assert_str_eq(e1.msg, e2.msg);
  snprintf(msg, cap, "%s", e1.msg);
  ir_data_free(a);
  ir_data_free(b);
  return r1;
}

/* ---- known values ------------------------------------------------------ */

START_TEST(t_matmul_values) {
  for (int shape = 0; shape < MM__COUNT; shape++) {
    ir_func_t *f = build_matmul(7, 5, 3, (mm_shape_t)shape);
    ir_data_t *d = data_for(f, 1);
    for (int i = 0; i < 7; i++)
      for (int k = 0; k < 3; k++) d->vals[0][i * 3 + k] = i + k;
    for (int k = 0; k < 3; k++)
      for (int j = 0; j < 5; j++) d->vals[1][k * 5 + j] = k - j;
    tn_err_t err = {0};
    ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
    const double *C = d->vals[2];
    ck_assert_double_eq(C[0], 5);             /* 0*0 + 1*1 + 2*2 */
    ck_assert_double_eq(C[6 * 5 + 4], -61);   /* 6*-4 + 7*-3 + 8*-2 */
    ck_assert_double_eq(C[2 * 5 + 1], 2);     /* 2*-1 + 3*0 + 4*1 */
    for (int i = 0; i < 7; i++)
      for (int j = 0; j < 5; j++) {
        double want = 0;
        for (int k = 0; k < 3; k++) want += (double)(i + k) * (k - j);
        ck_assert_double_eq(C[i * 5 + j], want);
      }
    ir_data_free(d);
    ir_func_free(f);
  }
}
END_TEST

START_TEST(t_window_and_padding) {
  ir_func_t *f = build_padded_window(6);
  ir_data_t *d = data_for(f, 1);
  for (int i = 0; i < 6; i++) d->vals[0][i] = i + 1; /* X = 1..6 */
  d->vals[1][0] = 1, d->vals[1][1] = 10, d->vals[1][2] = 100;
  tn_err_t err = {0};
  ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
  /* P = 0 1 2 3 4 5 6 0; Y[i] = P[i] + 10 P[i+1] + 100 P[i+2] */
  const double want[6] = {210, 321, 432, 543, 654, 65};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(d->vals[2][i], want[i]);
  ir_data_free(d);
  ir_func_free(f);
}
END_TEST

START_TEST(t_max_negative) {
  for (int outer = 0; outer < 2; outer++) {
    ir_func_t *f = build_rowmax(3, 4, outer);
    ir_data_t *d = data_for(f, 1);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) d->vals[0][i * 4 + j] = -(i + 1) * 10.0 - j;
    tn_err_t err = {0};
    ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
    ck_assert_double_eq(d->vals[1][0], -10);
    ck_assert_double_eq(d->vals[1][1], -20);
    ck_assert_double_eq(d->vals[1][2], -30);
    ir_data_free(d);
    ir_func_free(f);
  }
}
END_TEST

START_TEST(t_split_predicate_init) {
  for (int inner = 0; inner < 2; inner++) {
    ir_func_t *f = build_split(inner);
    ir_data_t *d = data_for(f, 1);
    for (int i = 0; i < 10; i++)
      for (int k = 0; k < 5; k++) d->vals[0][i * 5 + k] = i * k + (k == 0 ? 1 : 0);
    tn_err_t err = {0};
    ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 10; i++) /* sum over k of i*k, plus 1: 10 i + 1; or 2 * A[i, 0] = 2 */
      ck_assert_double_eq(d->vals[1][i], inner ? 2 : 10.0 * i + 1);
    ir_data_free(d);
    ir_func_free(f);
  }
}
END_TEST

START_TEST(t_temp_and_select) {
  /* T[i] = A[i] * 2 (temp in a shared-scope alloc of the consumer block);
   * Out[i] = select(T[i] > 0, T[i] + 1, -1) */
  ew_t w = ew_new(6, 6, IR_FLOAT32);
  ir_func_t *f = w.f;
  ir_var_t *t = var(f, "t"), *vt = var(f, "v_t");
  ir_expr_t *tv = NULL;
  ir_stmt_t *tb = block(f, "T", NULL, NULL);
  ir_buffer_t *T = temp(f, tb, "T", IR_SCOPE_SHARED, 1, I64(6));
  tb->u.block.body = st(f, T, OP(MUL, ld(f, w.A, VR(vt)), FL(2)), VR(vt));
  iter(f, tb, vt, IR_ITER_SPATIAL, 6, VR(t));
  tv = ld(f, T, VR(w.v));
  ew_finish(&w, 6, VR(w.v), ir_select(f, OP(GT, tv, FL(0)), OP(ADD, tv, FL(1)), FL(-1)));
  ir_stmt_t *main_nest = f->root->u.block.body;
  root_body(f, 2, loops(f, tb, 1, t, 6), main_nest);
  ir_data_t *d = data_for(f, 1);
  const double a[6] = {-2, -0.5, 0, 0.25, 3, 7};
  memcpy(d->vals[0], a, sizeof a);
  tn_err_t err = {0};
  ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
  const double want[6] = {-1, -1, -1, 1.5, 7, 15};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(d->vals[1][i], want[i]);
  ir_data_free(d);
  ir_func_free(f);
}
END_TEST

START_TEST(t_integer_semantics) {
  /* Out[v] = (A[v] * 3) // 2 + (A[v] % 4) * 100 + int32(float(A[v]) / 4) * 10000 */
  ew_t w = ew_new(6, 6, IR_INT32);
  ir_func_t *f = w.f;
  ir_expr_t *a = ld(f, w.A, VR(w.v));
  ir_expr_t *quarter = OP(DIV, ir_cast(f, IR_FLOAT64, a), ir_float(f, IR_FLOAT64, 4));
  ir_expr_t *q = ir_cast(f, IR_INT32, quarter);
  ir_expr_t *val = OP(ADD, OP(ADD, OP(FLOORDIV, OP(MUL, a, IN(3)), IN(2)),
                              OP(MUL, OP(FLOORMOD, a, IN(4)), IN(100))),
                      OP(MUL, q, IN(10000)));
  ew_finish(&w, 6, VR(w.v), val);
  ir_data_t *d = data_for(f, 1);
  const double a_in[6] = {-7, -1, 0, 1, 5, 9};
  memcpy(d->vals[0], a_in, sizeof a_in);
  tn_err_t err = {0};
  ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
  /* -21//2 = -11, -7%4 = 1, trunc(-1.75) = -1 ; -3//2 = -2, -1%4 = 3, trunc(-0.25) = 0 ... */
  const double want[6] = {-11 + 100 - 10000, -2 + 300,          0,
                          1 + 100,           7 + 100 + 10000, 13 + 100 + 20000};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(d->vals[1][i], want[i]);
  ck_assert(!signbit(d->vals[1][2])); /* integer zero is +0 */
  ir_data_free(d);
  ir_func_free(f);
}
END_TEST

START_TEST(t_scalar_output) {
  /* s[] = sum(i < 300: A[i]) into a 0-d tensor, lanes folded in order */
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = param(f, "A", IR_BUF_INPUT, IR_FLOAT64, 1, I64(300));
  ir_buffer_t *S = param(f, "s", IR_BUF_OUTPUT, IR_FLOAT64, 0);
  ir_var_t *i = var(f, "i"), *vi = var(f, "v_i");
  ir_stmt_t *b = block(f, "s", ir_store(f, S, NULL, 0, ir_float(f, IR_FLOAT64, 0)),
                       ir_store(f, S, NULL, 0, OP(ADD, ir_load(f, S, NULL, 0), ld(f, A, VR(vi)))));
  iter(f, b, vi, IR_ITER_REDUCE, 300, VR(i));
  root_body(f, 1, loops(f, b, 1, i, 300));
  ir_data_t *d = data_for(f, 3);
  double want = 0;
  for (int k = 0; k < 300; k++) want = want + d->vals[0][k];
  tn_err_t err = {0};
  ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
  ck_assert_double_eq(d->vals[1][0], want);
  ir_data_free(d);
  ir_eval_stats_t es = same_both_ways(f, 3);
  ck_assert_int_eq(es.fast_iters, 300);
  ir_func_free(f);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

START_TEST(t_out_of_bounds) {
  /* B[i] = A[i + 1] over 1027 elements: the last load is out of bounds */
  ew_t w = ew_new(1027, 1027, IR_FLOAT32);
  ir_func_t *f = w.f;
  ew_finish(&w, 1027, VR(w.v), ld(f, w.A, OP(ADD, VR(w.v), IN(1))));
  char msg[TN_ERR_MSG_MAX];
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_ERANGE);
  ck_assert_str_eq(msg, "block \"Out\": load A[1027] is out of bounds (shape [1027])");
  ir_func_free(f);

  /* a 2-d store out of bounds: C[i, j + 1] */
  f = build_matmul(4, 20, 3, MM_IJK);
  ir_stmt_t *cb = ir_func_find_block(f, "C");
  ir_expr_t **idx = cb->u.block.body->u.store.idx;
  idx[1] = OP(ADD, idx[1], IN(1));
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_ERANGE);
  ck_assert_str_eq(msg, "block \"C\": store C[0, 20] is out of bounds (shape [4, 20])");
  ir_func_free(f);
}
END_TEST

START_TEST(t_error_mid_nest) {
  /* The load of B fails only at k = K - 1, after the lanes over j have
   * written every earlier k: the chunk is undone and redone in loop order,
   * giving the scalar path's error. */
  ir_func_t *f = build_matmul(3, 40, 6, MM_IJK);
  ir_stmt_t *cb = ir_func_find_block(f, "C");
  ir_expr_t *upd = cb->u.block.body->u.store.value;
  ir_expr_t *bl = upd->u.bin.b->u.bin.b;
  bl->u.load.buf->shape[0] = 5; /* B has 5 rows, k reaches 5 */
  char msg[TN_ERR_MSG_MAX];
  ir_eval_stats_t es;
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, &es), TN_ERANGE);
  ck_assert_str_eq(msg, "block \"C\": load B[5, 0] is out of bounds (shape [5, 40])");
  ck_assert_int_eq(es.fallback_chunks, 2); /* the lanes over j, then the lanes over k */
  ck_assert_int_eq(es.fast_iters, 5 * 40); /* k = 0..4 for every j before the failure */
  ir_func_free(f);
}
END_TEST

START_TEST(t_division_by_zero) {
  /* Out[v] = A[v // (v - 3)]: divisor zero at v = 3 */
  ew_t w = ew_new(8, 8, IR_FLOAT32);
  ir_func_t *f = w.f;
  ir_expr_t *ix = OP(FLOORDIV, VR(w.v), OP(SUB, VR(w.v), IN(3)));
  ew_finish(&w, 8, VR(w.v), ld(f, w.A, OP(ADD, ix, IN(2))));
  char msg[TN_ERR_MSG_MAX];
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_EINVAL);
  ck_assert_str_eq(msg, "block \"Out\": integer division by zero in floordiv(3, 0)");
  ir_func_free(f);
}
END_TEST

START_TEST(t_select_guards_loads) {
  /* Out[v] = select(v < 8, A[v], A[v - 100]): the else side would be out of
   * bounds but is never taken; with v < 5 it is, and the first lane that
   * takes it is reported. */
  ew_t w = ew_new(8, 8, IR_FLOAT32);
  ir_func_t *f = w.f;
  ir_expr_t *val = ir_select(f, OP(LT, VR(w.v), IN(8)), ld(f, w.A, VR(w.v)),
                             ld(f, w.A, OP(SUB, VR(w.v), IN(100))));
  ew_finish(&w, 8, VR(w.v), val);
  ir_data_t *d = eval_ok(f, 5, false, NULL);
  ck_assert_mem_eq(d->vals[0], d->vals[1], 8 * sizeof(double));
  ir_data_free(d);
  val->u.sel.cond = OP(LT, VR(w.v), IN(5));
  char msg[TN_ERR_MSG_MAX];
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_ERANGE);
  ck_assert_str_eq(msg, "block \"Out\": load A[-95] is out of bounds (shape [8])");
  ir_func_free(f);
}
END_TEST

START_TEST(t_unwritten_is_nan) {
  /* Out has 5 elements, the loop writes 4: the last stays NaN */
  ew_t w = ew_new(5, 5, IR_FLOAT32);
  ir_func_t *f = w.f;
  ew_finish(&w, 4, VR(w.v), ld(f, w.A, VR(w.v)));
  ir_data_t *d = eval_ok(f, 1, false, NULL);
  ck_assert(isnan(d->vals[1][4]));
  double ref[5];
  memcpy(ref, d->vals[0], sizeof ref);
  ck_assert_double_eq(ir_rel_l2_error(ref, d->vals[1], 4), 0);
  ck_assert(isinf(ir_rel_l2_error(ref, d->vals[1], 5)));
  ir_data_free(d);
  ir_func_free(f);
}
END_TEST

START_TEST(t_bad_buffers) {
  /* a load of a buffer that is neither a parameter nor allocated */
  ew_t w = ew_new(4, 4, IR_FLOAT32);
  ir_func_t *f = w.f;
  ir_buffer_t *G =
      ir_buffer_new(f, "ghost", IR_FLOAT32, 1, (int64_t[]){4}, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  ew_finish(&w, 4, VR(w.v), ld(f, G, VR(w.v)));
  char msg[TN_ERR_MSG_MAX];
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_EINVAL);
  ck_assert_str_eq(msg, "block \"Out\": load of buffer \"ghost\", which is neither a parameter nor "
                        "allocated by any block");
  /* a temp over the evaluator's limit */
  ir_buffer_t *H = temp(f, f->root, "huge", IR_SCOPE_GLOBAL, 2, I64(1) << 20, I64(1) << 20);
  (void)H;
  ir_data_t *d = data_for(f, 1);
  tn_err_t err = {0};
  ck_assert_int_eq(ir_eval(f, d, &err), TN_ENOMEM);
  ck_assert_msg(strstr(err.msg, "temporary buffer \"huge\" (float32[1048576, 1048576])") != NULL,
                "%s", err.msg);
  ir_data_free(d);
  /* data that does not match the parameters */
  ir_data_t *wrong = data_for(f, 1);
  wrong->sizes[0] = 3;
  ck_assert_int_eq(ir_eval(f, wrong, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "data for parameter \"A\" has 3 elements, expected 4");
  wrong->sizes[0] = 4;
  ir_data_free(wrong);
  ir_func_free(f);
}
END_TEST

/* The same error where the fast path's compiler meets the load before any
 * instruction exists (the first operand of an iterator binding): it gives up
 * on the loop instead of reading the class of a register not yet emitted. */
START_TEST(t_bad_load_first_in_binding) {
  ew_t w = ew_new(4, 4, IR_FLOAT32);
  ir_func_t *f = w.f;
  ir_buffer_t *G =
      ir_buffer_new(f, "ghost", IR_INT32, 1, (int64_t[]){4}, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  ew_finish(&w, 4, VR(w.v), ld(f, w.A, VR(w.v)));
  w.blk->u.block.iters[0].binding = OP(ADD, ld(f, G, IN(0)), VR(w.i));
  char msg[TN_ERR_MSG_MAX];
  ck_assert_int_eq(eval_fails(f, msg, sizeof msg, NULL), TN_EINVAL);
  ck_assert_str_eq(msg, "block \"Out\": load of buffer \"ghost\", which is neither a parameter nor "
                        "allocated by any block");
  ir_func_free(f);
}
END_TEST

/* ---- fast path against scalar path --------------------------------------- */

START_TEST(t_fast_matches_scalar_matmul) {
  for (int shape = 0; shape < MM__COUNT; shape++) {
    ir_func_t *f = build_matmul(64, 64, 64, (mm_shape_t)shape);
    ir_eval_stats_t es = same_both_ways(f, 11 + shape);
    ck_assert_msg(es.fast_iters > 0, "shape %d never took the fast path", shape);
    ck_assert_int_eq(es.fallback_chunks, 0);
    ir_func_free(f);
  }
  /* odd sizes: partial chunks, init lanes in the middle of a chunk */
  ir_func_t *f = build_matmul(5, 300, 517, MM_IJK);
  ir_eval_stats_t es = same_both_ways(f, 3);
  ck_assert_int_eq(es.fast_iters, 5 * 300 * 517);
  ir_func_free(f);
  f = build_matmul(3, 7, 700, MM_SPLITK);
  same_both_ways(f, 4);
  ir_func_free(f);
}
END_TEST

/* Independent outermost loops run on several threads ($TUNED_EVAL_THREADS):
 * the outputs are bit-identical to one thread's and to the scalar path's,
 * the counters add up, and the error reported is the first in loop order
 * even when a later thread fails too, or only a later thread fails. */
START_TEST(t_parallel_outer_loops) {
  ir_func_t *f = build_matmul(128, 128, 256, MM_IJK); /* 2^22 instances */
  setenv("TUNED_EVAL_THREADS", "1", 1);
  ir_eval_stats_t one;
  ir_data_t *a = eval_ok(f, 5, false, &one);
  setenv("TUNED_EVAL_THREADS", "3", 1);
  ir_eval_stats_t three = same_both_ways(f, 5);
  ir_data_t *b = eval_ok(f, 5, false, NULL);
  for (int i = 0; i < a->n; i++)
    ck_assert_msg(memcmp(a->vals[i], b->vals[i], sizeof(double) * (size_t)a->sizes[i]) == 0,
                  "parameter %d differs between 1 and 3 threads", i);
  ck_assert_int_eq(one.fast_iters, three.fast_iters);
  ck_assert_int_eq(one.scalar_iters, three.scalar_iters);
  ck_assert_int_eq(one.fast_iters + one.scalar_iters, 128 * 128 * 256);
  ck_assert_int_eq(one.parallel_loops, 0);
  ck_assert_int_eq(three.parallel_loops, 1);
  ir_data_free(a);
  ir_data_free(b);
  ir_func_free(f);

  static const int64_t zeros[2][2] = {{3, 4000000}, {4000000, 4000000}};
  static const char *const expect[2] = {"block \"Out\": integer division by zero in floordiv(3, 0)",
                                        "block \"Out\": integer division by zero in floordiv(4000000, 0)"};
  for (int k = 0; k < 2; k++) {
    /* Out[v] = A[v // select(v == z0 || v == z1, 0, 1)] over 2^22 elements */
    enum { N = 1 << 22 };
    ew_t w = ew_new(N, N, IR_FLOAT32);
    f = w.f;
    ir_expr_t *hit = OP(OR, OP(EQ, VR(w.v), IN(zeros[k][0])), OP(EQ, VR(w.v), IN(zeros[k][1])));
    ir_expr_t *div = ir_select(f, hit, IN(0), IN(1));
    ew_finish(&w, N, VR(w.v), ld(f, w.A, OP(FLOORDIV, VR(w.v), div)));
    char msg[TN_ERR_MSG_MAX];
    for (int t = 1; t <= 4; t += 3) {
      setenv("TUNED_EVAL_THREADS", t == 1 ? "1" : "4", 1);
      ir_eval_stats_t es;
      ck_assert_int_eq(eval_fails(f, msg, sizeof msg, &es), TN_EINVAL);
      ck_assert_str_eq(msg, expect[k]);
      ck_assert_int_eq(es.parallel_loops, t > 1);
    }
    ir_func_free(f);
  }
  unsetenv("TUNED_EVAL_THREADS");
}
END_TEST

START_TEST(t_fast_matches_scalar_misc) {
  ir_func_t *f = build_padded_window(1000);
  ir_eval_stats_t es = same_both_ways(f, 2);
  ck_assert_int_eq(es.fast_iters, 1002 + 3000);
  ir_func_free(f);
  for (int outer = 0; outer < 2; outer++) {
    f = build_rowmax(40, 333, outer);
    es = same_both_ways(f, 5);
    ck_assert_int_eq(es.fast_iters, 40 * 333);
    ir_func_free(f);
  }
  for (int inner = 0; inner < 2; inner++) {
    f = build_split(inner);
    same_both_ways(f, 6);
    ir_func_free(f);
  }
  /* a reversed store (stride -1) and a gather through computed indices */
  ew_t w = ew_new(600, 600, IR_FLOAT32);
  f = w.f;
  ir_expr_t *scattered = OP(FLOORMOD, OP(MUL, VR(w.v), IN(7)), IN(600));
  ew_finish(&w, 600, OP(SUB, IN(599), VR(w.v)), ld(f, w.A, scattered));
  es = same_both_ways(f, 8);
  ck_assert_int_eq(es.fast_iters, 600);
  ir_func_free(f);
  /* a store through a non-affine but increasing index: v + v // 2 */
  w = ew_new(600, 900, IR_FLOAT32);
  f = w.f;
  ew_finish(&w, 600, OP(ADD, VR(w.v), OP(FLOORDIV, VR(w.v), IN(2))), ld(f, w.A, VR(w.v)));
  es = same_both_ways(f, 9);
  ck_assert_int_eq(es.fast_iters, 600);
  ck_assert_int_eq(es.fallback_chunks, 0);
  ir_func_free(f);
  /* Out[i + j] = A[i * 4 + j] over i (40) and j (4): lanes over i would
   * collide across j, so the nest must not run with lanes over i */
  f = ir_func_new("main");
  ir_buffer_t *A = param(f, "A", IR_BUF_INPUT, IR_FLOAT32, 1, I64(160));
  ir_buffer_t *O = param(f, "Out", IR_BUF_OUTPUT, IR_FLOAT32, 1, I64(43));
  ir_var_t *i = var(f, "i"), *j = var(f, "j"), *vi = var(f, "v_i"), *vj = var(f, "v_j");
  ir_expr_t *elem = ld(f, A, OP(ADD, OP(MUL, VR(vi), IN(4)), VR(vj)));
  ir_stmt_t *b = block(f, "Out", NULL, st(f, O, elem, OP(ADD, VR(vi), VR(vj))));
  iter(f, b, vi, IR_ITER_SPATIAL, 40, VR(i));
  iter(f, b, vj, IR_ITER_SPATIAL, 4, VR(j));
  root_body(f, 1, loops(f, b, 2, i, 40, j, 4));
  same_both_ways(f, 12);
  ir_data_t *d = eval_ok(f, 12, false, NULL);
  for (int e = 0; e < 43; e++) { /* the last writer: the largest i */
    int wi = e < 39 ? e : 39;
    ck_assert_double_eq(d->vals[1][e], d->vals[0][wi * 4 + (e - wi)]);
  }
  ir_data_free(d);
  ir_func_free(f);
  /* colliding stores (v // 2): chunks must run in order on the scalar path */
  w = ew_new(600, 300, IR_FLOAT32);
  f = w.f;
  ew_finish(&w, 600, OP(FLOORDIV, VR(w.v), IN(2)), ld(f, w.A, VR(w.v)));
  es = same_both_ways(f, 10);
  ck_assert_int_gt(es.fallback_chunks, 0);
  d = eval_ok(f, 10, false, NULL);
  for (int i = 0; i < 300; i++) ck_assert_double_eq(d->vals[1][i], d->vals[0][2 * i + 1]);
  ir_data_free(d);
  ir_func_free(f);
}
END_TEST

/* ---- workloads through the parser ---------------------------------------- */

static void check_workload(const char *name, const ir_param_set_t *sets, int n) {
  char path[512];
  snprintf(path, sizeof path, "%s/workloads/%s", TUNED_SOURCE_ROOT, name);
  ir_workload_t *w;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_load(path, sets, n, &w, &err) == 0, "%s: %s", name, err.msg);
  ir_eval_stats_t es = same_both_ways(w->func, 21);
  ck_assert_msg(es.fast_iters > 0, "%s: no fast path", name);
  ir_workload_free(w);
}

START_TEST(t_workloads) {
  const ir_param_set_t mm[] = {{"M", 48}, {"N", 40}, {"K", 33}};
  check_workload("matmul.tw", mm, 3);
  const ir_param_set_t sm[] = {{"M", 8}, {"N", 300}};
  check_workload("softmax.tw", sm, 2);
  const ir_param_set_t cv[] = {{"C", 3}, {"H", 9}, {"W", 20}, {"F", 4}};
  check_workload("conv2d.tw", cv, 4);

  /* matmul against values computed here in the same order */
  char path[512];
  snprintf(path, sizeof path, "%s/workloads/matmul.tw", TUNED_SOURCE_ROOT);
  ir_workload_t *w;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_load(path, mm, 3, &w, &err) == 0, "%s", err.msg);
  ir_data_t *d = eval_ok(w->func, 4, false, NULL);
  const double *A = d->vals[0], *B = d->vals[1], *C = d->vals[2];
  for (int i = 0; i < 48; i++)
    for (int j = 0; j < 40; j++) {
      double acc = 0;
      for (int k = 0; k < 33; k++) acc = acc + A[i * 33 + k] * B[k * 40 + j];
      ck_assert_double_eq(C[i * 40 + j], acc);
    }
  ck_assert_double_eq(ir_func_flops(w->func), 2.0 * 48 * 40 * 33);
  ir_data_free(d);
  ir_workload_free(w);
}
END_TEST

/* ---- data, metrics, counts ------------------------------------------------ */

static ir_func_t *build_data_func(bool extra_first) {
  ir_func_t *f = ir_func_new("main");
  if (extra_first) param(f, "Z", IR_BUF_INPUT, IR_FLOAT32, 1, I64(10));
  param(f, "A", IR_BUF_INPUT, IR_FLOAT32, 1, I64(100));
  ir_buffer_t *H = param(f, "H", IR_BUF_INPUT, IR_FLOAT16, 1, I64(200));
  ir_buffer_t *N = param(f, "N", IR_BUF_INPUT, IR_INT32, 1, I64(300));
  param(f, "O", IR_BUF_OUTPUT, IR_FLOAT32, 2, I64(2), I64(3));
  H->init_lo = 0, H->init_hi = 1;
  N->init_lo = -3.5, N->init_hi = 4.2; /* integers in [-3, 5) */
  return f;
}

START_TEST(t_data) {
  ir_func_t *f = build_data_func(false), *g = build_data_func(true);
  ir_data_t *a = data_for(f, 42), *b = data_for(f, 42), *c = data_for(f, 43), *e = data_for(g, 42);
  ck_assert_int_eq(a->n, 4);
  ck_assert_int_eq(a->sizes[3], 6);
  for (int i = 0; i < 3; i++) {
    ck_assert_mem_eq(a->vals[i], b->vals[i], sizeof(double) * (size_t)a->sizes[i]);
    ck_assert(memcmp(a->vals[i], c->vals[i], sizeof(double) * (size_t)a->sizes[i]) != 0);
    /* values depend on the seed and the name only, not on other parameters */
    ck_assert_mem_eq(a->vals[i], e->vals[i + 1], sizeof(double) * (size_t)a->sizes[i]);
  }
  for (int k = 0; k < 100; k++) {
    double v = a->vals[0][k];
    ck_assert(v >= -1 && v < 1 && (double)(float)v == v);
  }
  for (int k = 0; k < 200; k++) {
    double v = a->vals[1][k];
    ck_assert(v >= 0 && v < 1 && (double)tn_half_to_float(tn_float_to_half((float)v)) == v);
  }
  bool seen[8] = {0};
  for (int k = 0; k < 300; k++) {
    double v = a->vals[2][k];
    ck_assert(v >= -3 && v < 5 && v == floor(v));
    seen[(int)v + 3] = true;
  }
  for (int k = 0; k < 8; k++) ck_assert_msg(seen[k], "value %d never drawn", k - 3);
  for (int k = 0; k < 6; k++) ck_assert(isnan(a->vals[3][k]));
  ir_data_free(a);
  ir_data_free(b);
  ir_data_free(c);
  ir_data_free(e);

  ir_data_t *d = (ir_data_t *)1;
  tn_err_t err = {0};
  ck_assert_int_eq(ir_data_new(f, 1, 100 * 8 + 200 * 8, &d, &err), TN_ENOMEM);
  ck_assert_ptr_null(d);
  ck_assert_msg(strstr(err.msg, "parameter \"N\" (int32[300])") != NULL, "%s", err.msg);
  ir_func_free(f);
  ir_func_free(g);
}
END_TEST

START_TEST(t_metrics) {
  const double ref[3] = {3, 4, 0}, near[3] = {3, 4.5, 0}, zero[3] = {0, 0, 0};
  ck_assert_double_eq(ir_rel_l2_error(ref, ref, 3), 0);
  ck_assert_double_eq_tol(ir_rel_l2_error(ref, near, 3), 0.1, 1e-15);
  ck_assert_double_eq_tol(ir_rel_l2_error(zero, ref, 3), 5, 1e-15); /* absolute when ref is 0 */
  const double got_nan[3] = {3, NAN, 0};
  ck_assert(isinf(ir_rel_l2_error(ref, got_nan, 3)));
  ck_assert_double_eq(ir_dtype_tolerance(IR_FLOAT32), 1e-4);
  ck_assert_double_eq(ir_dtype_tolerance(IR_FLOAT16), 1e-2);
  ck_assert_double_eq(ir_dtype_tolerance(IR_FLOAT64), 1e-10);
  ck_assert_double_eq(ir_dtype_tolerance(IR_INT32), 0);
  ck_assert_double_eq(ir_dtype_tolerance(IR_INT64), 0);
}
END_TEST

START_TEST(t_flops_bytes) {
  ir_func_t *f = build_matmul(64, 32, 16, MM_IJK);
  ck_assert_double_eq(ir_func_flops(f), 2.0 * 64 * 32 * 16);
  ck_assert_double_eq(ir_func_bytes(f), 4.0 * (64 * 16 + 16 * 32 + 64 * 32));
  ir_func_free(f);
  f = build_matmul(64, 32, 16, MM_DECOMP); /* the init block counts nothing */
  ck_assert_double_eq(ir_func_flops(f), 2.0 * 64 * 32 * 16);
  ir_func_free(f);
  /* padded window: the select and the index arithmetic are not flops */
  f = build_padded_window(10);
  ck_assert_double_eq(ir_func_flops(f), 2.0 * 10 * 3);
  ck_assert_double_eq(ir_func_bytes(f), 4.0 * (10 + 3 + 10));
  ir_func_free(f);
}
END_TEST

/* ---- stopping midway ------------------------------------------------------- */

typedef struct stop_ctl {
  atomic_int calls;
  int stop_at;    /* the call that first says stop (0: never) */
  double t_stop;  /* tn_now() of that call */
} stop_ctl_t;

static bool stop_after(void *ctx) {
  stop_ctl_t *s = ctx;
  int n = atomic_fetch_add(&s->calls, 1) + 1;
  if (s->stop_at <= 0 || n < s->stop_at) return false;
  if (n == s->stop_at) s->t_stop = tn_now();
  return true;
}

/* C[i] = sum(k < K: A[i]): 2^32 updates of 16 outputs, about a minute of
 * evaluation on tiny data; K small enough (2^10) for a full run here. */
static ir_workload_t *heavy_reduction(int64_t K) {
  char text[256];
  snprintf(text, sizeof text, "param N = 16, K = %lld\ninput A: float32[N]\noutput C: float32[N]\n"
           "C[i] = sum(k < K: A[i])\n", (long long)K);
  ir_workload_t *w;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_parse("heavy.tw", text, strlen(text), NULL, 0, &w, &err) == 0, "%s", err.msg);
  return w;
}

/* ir_eval_stoppable gives up at the poll after the stop (TN_ESTOPPED, within
 * milliseconds of it, on every thread), and with a stop that never comes
 * computes what ir_eval does. */
START_TEST(t_stoppable) {
  static const char *const threads[] = {"1", "4"};
  for (int t = 0; t < 2; t++) {
    setenv("TUNED_EVAL_THREADS", threads[t], 1);
    /* 2^32 updates: over a minute unstopped; the 20th poll says stop */
    ir_workload_t *w = heavy_reduction(INT64_C(1) << 28);
    ir_data_t *d = data_for(w->func, 3);
    stop_ctl_t s = {.stop_at = 20};
    tn_err_t err = {0};
    double t0 = tn_now();
    int rc = ir_eval_stoppable(w->func, d, stop_after, &s, &err);
    double took = tn_now() - t0, after = tn_now() - s.t_stop;
    ck_assert_int_eq(rc, TN_ESTOPPED);
    ck_assert_msg(strstr(err.msg, "stopped on request in block \"root\" of \"main\""), "%s", err.msg);
    ck_assert_int_ge(atomic_load(&s.calls), 20);
    /* a poll is at most EV_POLL_EVERY (4096) iterations apart: 20 of them are
     * well under a second even on a loaded machine; the bound is loose
     * because a busy machine may deschedule the evaluating thread */
    ck_assert_msg(took < 2.0 && after < 1.0, "stopped after %.3f s (%.3f s after the stop)", took, after);
    ir_data_free(d);
    ir_workload_free(w);

    /* asked before it starts */
    w = heavy_reduction(1024);
    d = data_for(w->func, 3);
    s = (stop_ctl_t){.stop_at = 1};
    ck_assert_int_eq(ir_eval_stoppable(w->func, d, stop_after, &s, &err), TN_ESTOPPED);
    ck_assert_msg(strstr(err.msg, "before evaluating"), "%s", err.msg);
    /* never stopped: the same outputs as ir_eval */
    s = (stop_ctl_t){.stop_at = 0};
    ck_assert_int_eq(ir_eval_stoppable(w->func, d, stop_after, &s, &err), 0);
    ck_assert_int_ge(atomic_load(&s.calls), 1);
    ir_data_t *ref = eval_ok(w->func, 3, false, NULL);
    for (int i = 0; i < d->n; i++)
      ck_assert(memcmp(d->vals[i], ref->vals[i], sizeof(double) * (size_t)d->sizes[i]) == 0);
    ck_assert_double_eq(d->vals[1][5], 1024 * d->vals[0][5]);
    ir_data_free(ref);
    ir_data_free(d);
    ir_workload_free(w);
  }
  unsetenv("TUNED_EVAL_THREADS");
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("eval");
  TU_TCASE(s, "values", 0, t_matmul_values, t_window_and_padding, t_max_negative, t_split_predicate_init,
           t_temp_and_select, t_integer_semantics, t_scalar_output);
  TU_TCASE(s, "errors", 0, t_out_of_bounds, t_error_mid_nest, t_division_by_zero, t_select_guards_loads,
           t_unwritten_is_nan, t_bad_buffers, t_bad_load_first_in_binding);
  TU_TCASE(s, "fast-path", 120, t_fast_matches_scalar_matmul, t_fast_matches_scalar_misc, t_workloads,
           t_parallel_outer_loops);
  TU_TCASE(s, "stop", 60, t_stoppable);
  TU_TCASE(s, "data", 0, t_data, t_metrics, t_flops_bytes);
  return s;
}

TN_TEST_MAIN(make_suite)
