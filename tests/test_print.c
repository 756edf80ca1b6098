/* test_print.c — suite "print": the TVMScript-shaped printer (whole texts
 * against golden files) and the structural hash.
 *
 * Golden files live in tests/golden/NAME.txt: ir_*.txt for functions built by
 * hand here, and one per workload (workloads/NAME.tw at default parameters).
 * To regenerate them after an intended change to the printer or the parser:
 *   TUNED_UPDATE_GOLDEN=1 meson test -C build print
 * (the tests then write the files instead of comparing); review the diff. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "testir.h"

#define GOLDEN_DIR SRC("tests/golden")

/* ---- golden files ------------------------------------------------------ */

/* Compares text with tests/golden/NAME.txt, or writes it when updating. */
static void check_golden(const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.txt", GOLDEN_DIR, name);
  tu_check_golden(path, text);
}

static char *print_func(const ir_func_t *f) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(f, &b);
  return tn_buf_take(&b);
}

static char *print_expr(const ir_expr_t *e) {
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_expr(e, &b);
  return tn_buf_take(&b);
}

/* ---- building IR by hand ----------------------------------------------- */

#define V(v) ir_varref(f, (v))
#define I(n) ir_int(f, (n))
#define BIN(k, a, b) ir_bin(f, IR_E_##k, (a), (b))
#define F32(x) ir_float(f, IR_FLOAT32, (x))

static ir_expr_t *load(ir_func_t *f, ir_buffer_t *b, ir_expr_t *i0, ir_expr_t *i1) {
  ir_expr_t *idx[2] = {i0, i1};
  return ir_load(f, b, idx, b->ndim);
}

static ir_stmt_t *store(ir_func_t *f, ir_buffer_t *b, ir_expr_t *i0, ir_expr_t *i1, ir_expr_t *v) {
  ir_expr_t *idx[2] = {i0, i1};
  return ir_store(f, b, idx, b->ndim, v);
}

static ir_buffer_t *buffer(ir_func_t *f, const char *name, ir_dtype_t t, int64_t d0, int64_t d1,
                           ir_scope_t scope, ir_buf_role_t role) {
  int64_t shape[2] = {d0, d1};
  int ndim = d0 == 0 ? 0 : d1 == 0 ? 1 : 2;
  ir_buffer_t *b = ir_buffer_new(f, name, t, ndim, shape, scope, role);
  if (role != IR_BUF_TEMP) {
    ir_buffer_t **p = TN_NEWN(f->arena, ir_buffer_t *, f->nparams + 1);
    if (f->nparams) memcpy(p, f->params, sizeof(*p) * (size_t)f->nparams);
    p[f->nparams++] = b;
    f->params = p;
  }
  return b;
}

static void add_alloc(ir_func_t *f, ir_block_t *blk, ir_buffer_t *b) {
  ir_buffer_t **a = TN_NEWN(f->arena, ir_buffer_t *, blk->nallocs + 1);
  if (blk->nallocs) memcpy(a, blk->allocs, sizeof(*a) * (size_t)blk->nallocs);
  a[blk->nallocs++] = b;
  blk->allocs = a;
}

/* Appends a region; ext NULL = point access in every dimension. */
static void add_region(ir_func_t *f, ir_region_t **rs, int *n, ir_buffer_t *b, ir_expr_t *m0,
                       ir_expr_t *m1, const int64_t *ext) {
  ir_region_t *r = TN_NEWN(f->arena, ir_region_t, *n + 1);
  if (*n) memcpy(r, *rs, sizeof(*r) * (size_t)*n);
  ir_expr_t *mins[2] = {m0, m1};
  r[*n].buf = b;
  r[*n].dims = TN_NEWN(f->arena, ir_range_t, b->ndim);
  for (int d = 0; d < b->ndim; d++) {
    r[*n].dims[d].min = mins[d];
    r[*n].dims[d].extent = I(ext ? ext[d] : 1);
  }
  (*n)++;
  *rs = r;
}

static void add_iter(ir_func_t *f, ir_block_t *b, ir_var_t *v, int64_t ext, ir_iter_kind_t k,
                     ir_expr_t *binding) {
  ir_iter_t *it = TN_NEWN(f->arena, ir_iter_t, b->niters + 1);
  if (b->niters) memcpy(it, b->iters, sizeof(*it) * (size_t)b->niters);
  it[b->niters] = (ir_iter_t){.var = v, .extent = ext, .kind = k, .binding = binding};
  b->iters = it;
  b->niters++;
}

static ir_stmt_t *seq2(ir_func_t *f, ir_stmt_t *a, ir_stmt_t *b) {
  ir_stmt_t *items[2] = {a, b};
  return ir_seq(f, items, 2);
}

/* The matmul of the workload conventions.  names: i, j, k, v_i, v_j, v_k.
 * skew > 0 creates unused vars and buffers first and the used vars in
 * reverse order, so ids differ from the plain build. */
static ir_func_t *build_matmul(const char *const names[6], int skew) {
  ir_func_t *f = ir_func_new("main");
  for (int s = 0; s < skew; s++) {
    ir_var_new(f, "unused", IR_INT32);
    ir_buffer_new(f, "unused", IR_FLOAT32, 0, NULL, IR_SCOPE_GLOBAL, IR_BUF_TEMP);
  }
  ir_var_t *vs[6];
  for (int n = 0; n < 6; n++) {
    int at = skew ? 5 - n : n;
    vs[at] = ir_var_new(f, names[at], IR_INT32);
  }
  ir_var_t *i = vs[0], *j = vs[1], *k = vs[2], *vi = vs[3], *vj = vs[4], *vk = vs[5];
  ir_buffer_t *A = buffer(f, "A", IR_FLOAT32, 1024, 1024, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *B = buffer(f, "B", IR_FLOAT32, 1024, 1024, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *C = buffer(f, "C", IR_FLOAT32, 1024, 1024, IR_SCOPE_GLOBAL, IR_BUF_OUTPUT);
  ir_stmt_t *bs = ir_block_new(f, "C");
  ir_block_t *b = &bs->u.block;
  add_iter(f, b, vi, 1024, IR_ITER_SPATIAL, V(i));
  add_iter(f, b, vj, 1024, IR_ITER_SPATIAL, V(j));
  add_iter(f, b, vk, 1024, IR_ITER_REDUCE, V(k));
  add_region(f, &b->reads, &b->nreads, A, V(vi), V(vk), NULL);
  add_region(f, &b->reads, &b->nreads, B, V(vk), V(vj), NULL);
  add_region(f, &b->writes, &b->nwrites, C, V(vi), V(vj), NULL);
  b->init = store(f, C, V(vi), V(vj), F32(0.0));
  ir_expr_t *prod = BIN(MUL, load(f, A, V(vi), V(vk)), load(f, B, V(vk), V(vj)));
  b->body = store(f, C, V(vi), V(vj), BIN(ADD, load(f, C, V(vi), V(vj)), prod));
  ir_stmt_t *nest = ir_loop_new(f, i, 1024, ir_loop_new(f, j, 1024, ir_loop_new(f, k, 1024, bs)));
  ir_func_root(f)->body = nest;
  return f;
}

static const char *const mm_names[6] = {"i", "j", "k", "v_i", "v_j", "v_k"};

/* Split loops with a non-trivial binding and predicate, a remap run after a
 * single axis, ranged regions, block annotations; a second nest whose loop
 * names repeat the first's and whose iterator extent differs from its loop. */
static ir_func_t *build_bindings(void) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = buffer(f, "A", IR_FLOAT32, 1000, 1026, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *W = buffer(f, "W", IR_FLOAT32, 3, 0, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *B = buffer(f, "B", IR_FLOAT32, 1000, 1024, IR_SCOPE_GLOBAL, IR_BUF_OUTPUT);
  ir_buffer_t *D = buffer(f, "D", IR_FLOAT32, 1000, 0, IR_SCOPE_GLOBAL, IR_BUF_OUTPUT);
  ir_var_t *i0 = ir_var_new(f, "i_0", IR_INT32), *i1 = ir_var_new(f, "i_1", IR_INT32);
  ir_var_t *j = ir_var_new(f, "j", IR_INT32), *r = ir_var_new(f, "r", IR_INT32);
  ir_var_t *vi = ir_var_new(f, "v_i", IR_INT32), *vj = ir_var_new(f, "v_j", IR_INT32);
  ir_var_t *vr = ir_var_new(f, "v_r", IR_INT32);
  ir_expr_t *fused = BIN(ADD, BIN(MUL, V(i0), I(128)), V(i1));

  ir_stmt_t *bs = ir_block_new(f, "B");
  ir_block_t *b = &bs->u.block;
  add_iter(f, b, vi, 1000, IR_ITER_SPATIAL, fused);
  add_iter(f, b, vj, 1024, IR_ITER_SPATIAL, V(j));
  add_iter(f, b, vr, 3, IR_ITER_REDUCE, V(r));
  b->predicate = BIN(LT, fused, I(1000));
  int64_t win[2] = {1, 3}, full[1] = {3};
  add_region(f, &b->reads, &b->nreads, A, V(vi), V(vj), win);
  add_region(f, &b->reads, &b->nreads, W, I(0), NULL, full);
  add_region(f, &b->writes, &b->nwrites, B, V(vi), V(vj), NULL);
  ir_annot_set_str(f, &b->annots, &b->nannots, "meta_schedule.tiling_structure", "SSRSRS");
  ir_annot_set_int(f, &b->annots, &b->nannots, "meta_schedule.auto_tensorize", 0);
  b->init = store(f, B, V(vi), V(vj), F32(0.0));
  ir_expr_t *wr = ir_load(f, W, (ir_expr_t *[]){V(vr)}, 1);
  ir_expr_t *term = BIN(MUL, load(f, A, V(vi), BIN(ADD, V(vj), V(vr))), wr);
  b->body = store(f, B, V(vi), V(vj), BIN(ADD, load(f, B, V(vi), V(vj)), term));
  ir_stmt_t *nest1 = ir_loop_new(
      f, i0, 8, ir_loop_new(f, i1, 128, ir_loop_new(f, j, 1024, ir_loop_new(f, r, 3, bs))));

  /* Second nest: a loop var named like the first one, and one named like a buffer. */
  ir_var_t *i0b = ir_var_new(f, "i_0", IR_INT32), *dv = ir_var_new(f, "D", IR_INT32);
  ir_var_t *vk = ir_var_new(f, "v_i", IR_INT32);
  ir_stmt_t *ds = ir_block_new(f, "D");
  ir_block_t *d = &ds->u.block;
  add_iter(f, d, vk, 1000, IR_ITER_SPATIAL, BIN(ADD, BIN(MUL, V(i0b), I(8)), V(dv)));
  add_region(f, &d->reads, &d->nreads, B, V(vk), I(0), (int64_t[]){1, 1024});
  add_region(f, &d->writes, &d->nwrites, D, V(vk), NULL, NULL);
  d->body = ir_store(f, D, (ir_expr_t *[]){V(vk)}, 1, load(f, B, V(vk), I(7)));
  ir_stmt_t *nest2 = ir_loop_new(f, i0b, 125, ir_loop_new(f, dv, 8, ds));
  ir_func_root(f)->body = seq2(f, nest1, nest2);
  return f;
}

/* Every loop kind, loop annotations (inserted out of key order), a serial
 * loop that breaks a grid, and a remap-able variable whose loop extent
 * differs from the iterator extent. */
static ir_func_t *build_loop_kinds(void) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *X = buffer(f, "X", IR_FLOAT16, 65536, 0, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *Y = buffer(f, "Y", IR_FLOAT16, 65536, 0, IR_SCOPE_GLOBAL, IR_BUF_OUTPUT);
  const char *names[] = {"bx", "tx", "p", "u", "s", "g0", "g1", "vec"};
  ir_var_t *v[8];
  for (int n = 0; n < 8; n++) v[n] = ir_var_new(f, names[n], IR_INT32);
  ir_var_t *vx = ir_var_new(f, "v_x", IR_INT32), *vy = ir_var_new(f, "v_y", IR_INT32);
  static const int64_t ext[8] = {4, 32, 2, 2, 2, 2, 2, 4};
  ir_expr_t *flat = V(v[0]);
  for (int n = 1; n < 7; n++) flat = BIN(ADD, BIN(MUL, flat, I(ext[n])), V(v[n]));
  ir_stmt_t *bs = ir_block_new(f, "Y");
  ir_block_t *b = &bs->u.block;
  add_iter(f, b, vx, 4096, IR_ITER_SPATIAL, flat);
  add_iter(f, b, vy, 2, IR_ITER_SPATIAL, V(v[7]));
  ir_expr_t *at = BIN(ADD, BIN(MUL, V(vx), I(4)), V(vy));
  add_region(f, &b->reads, &b->nreads, X, at, NULL, NULL);
  add_region(f, &b->writes, &b->nwrites, Y, at, NULL, NULL);
  ir_expr_t *x = ir_load(f, X, &at, 1);
  b->body = ir_store(f, Y, &at, 1, BIN(MAX, x, ir_float(f, IR_FLOAT16, 0.0)));

  ir_stmt_t *s = bs;
  for (int n = 7; n >= 0; n--) s = ir_loop_new(f, v[n], ext[n], s);
  ir_stmt_t *l = s;
  static const ir_loop_kind_t kinds[8] = {IR_LOOP_THREAD, IR_LOOP_THREAD, IR_LOOP_PARALLEL,
                                          IR_LOOP_UNROLLED, IR_LOOP_SERIAL, IR_LOOP_SERIAL,
                                          IR_LOOP_SERIAL, IR_LOOP_VECTORIZED};
  for (int n = 0; n < 8; n++, l = l->u.loop.body) {
    ir_loop_t *lp = &l->u.loop;
    lp->kind = kinds[n];
    if (n < 2) lp->tag = n == 0 ? IR_TAG_BLOCK_X : IR_TAG_THREAD_X;
    if (n == 3) {
      ir_annot_set_int(f, &lp->annots, &lp->nannots, "pragma_unroll_explicit", 1);
      ir_annot_set_int(f, &lp->annots, &lp->nannots, "pragma_auto_unroll_max_step", 16);
    }
    if (n == 4) ir_annot_set_str(f, &lp->annots, &lp->nannots, "software_pipeline_order", "0,1");
  }
  ir_func_root(f)->body = s;
  return f;
}

/* A root block with temps in every scope (one 0-d), and a non-root block
 * that contains loops and a nested block. */
static ir_func_t *build_scopes(void) {
  ir_func_t *f = ir_func_new("main");
  ir_buffer_t *A = buffer(f, "A", IR_FLOAT32, 1024, 0, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *O = buffer(f, "O", IR_FLOAT32, 0, 0, IR_SCOPE_GLOBAL, IR_BUF_OUTPUT);
  ir_block_t *root = ir_func_root(f);
  ir_buffer_t *Ash = buffer(f, "A_shared", IR_FLOAT32, 1024, 0, IR_SCOPE_SHARED, IR_BUF_TEMP);
  ir_buffer_t *Loc = buffer(f, "acc_local", IR_FLOAT64, 4, 8, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  ir_buffer_t *S = buffer(f, "S", IR_FLOAT32, 0, 0, IR_SCOPE_GLOBAL, IR_BUF_TEMP);
  add_alloc(f, root, Ash);
  add_alloc(f, root, Loc);
  add_alloc(f, root, S);
  ir_var_t *ax = ir_var_new(f, "ax0", IR_INT32), *vax = ir_var_new(f, "v0", IR_INT32);
  ir_stmt_t *cp = ir_block_new(f, "A_shared");
  ir_block_t *c = &cp->u.block;
  add_iter(f, c, vax, 1024, IR_ITER_SPATIAL, V(ax));
  add_region(f, &c->reads, &c->nreads, A, V(vax), NULL, NULL);
  add_region(f, &c->writes, &c->nwrites, Ash, V(vax), NULL, NULL);
  c->body = ir_store(f, Ash, (ir_expr_t *[]){V(vax)}, 1, ir_load(f, A, (ir_expr_t *[]){V(vax)}, 1));
  ir_stmt_t *copy = ir_loop_new(f, ax, 1024, cp);

  /* outer block "S_o": one reduce iterator over k_0, loops inside it. */
  ir_var_t *k0 = ir_var_new(f, "k_0", IR_INT32), *k1 = ir_var_new(f, "k_1", IR_INT32);
  ir_var_t *vko = ir_var_new(f, "v_k_o", IR_INT32), *vki = ir_var_new(f, "v_k_i", IR_INT32);
  ir_stmt_t *inner = ir_block_new(f, "S");
  ir_block_t *in = &inner->u.block;
  add_iter(f, in, vki, 1024, IR_ITER_REDUCE, BIN(ADD, BIN(MUL, V(vko), I(16)), V(k1)));
  ir_expr_t *aki = ir_load(f, Ash, (ir_expr_t *[]){V(vki)}, 1);
  add_region(f, &in->reads, &in->nreads, Ash, V(vki), NULL, NULL);
  add_region(f, &in->writes, &in->nwrites, S, NULL, NULL, NULL);
  in->init = ir_store(f, S, NULL, 0, F32(0.0));
  in->body = ir_store(f, S, NULL, 0, BIN(ADD, ir_load(f, S, NULL, 0), aki));
  ir_stmt_t *outer = ir_block_new(f, "S_o");
  ir_block_t *o = &outer->u.block;
  add_iter(f, o, vko, 64, IR_ITER_REDUCE, V(k0));
  add_region(f, &o->reads, &o->nreads, Ash, BIN(MUL, V(vko), I(16)), NULL, (int64_t[]){16});
  add_region(f, &o->writes, &o->nwrites, S, NULL, NULL, NULL);
  ir_buffer_t *tile = buffer(f, "tile", IR_INT32, 16, 0, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  add_alloc(f, o, tile);
  o->init = ir_store(f, S, NULL, 0, F32(0.0));
  o->body = ir_loop_new(f, k1, 16, inner);
  ir_stmt_t *red = ir_loop_new(f, k0, 64, outer);

  ir_stmt_t *ws = ir_block_new(f, "O");
  ir_block_t *w = &ws->u.block;
  add_region(f, &w->reads, &w->nreads, S, NULL, NULL, NULL);
  add_region(f, &w->writes, &w->nwrites, O, NULL, NULL, NULL);
  w->body = ir_store(f, O, NULL, 0, ir_load(f, S, NULL, 0));
  ir_stmt_t *items[3] = {copy, red, ws};
  root->body = ir_seq(f, items, 3);
  return f;
}

/* ---- printer tests ----------------------------------------------------- */

static void check_func_golden(const char *name, ir_func_t *f) {
  char *text = print_func(f);
  check_golden(name, text);
  /* The copy prints the same, and printing is repeatable. */
  ir_func_t *c = ir_func_copy(f);
  char *again = print_func(c);
  ck_assert_str_eq(again, text);
  free(again);
  ir_func_free(c);
  free(text);
}

START_TEST(t_print_matmul) {
  ir_func_t *f = build_matmul(mm_names, 0);
  char *text = print_func(f);
  /* The exact text of the brief, also kept as a golden. */
  const char *want =
      "# from tvm.script import tir as T\n"
      "\n"
      "@T.prim_func\n"
      "def main(A: T.Buffer((1024, 1024), \"float32\"), B: T.Buffer((1024, 1024), \"float32\"), "
      "C: T.Buffer((1024, 1024), \"float32\")):\n"
      "    T.func_attr({\"global_symbol\": \"main\", \"tir.noalias\": True})\n"
      "    # with T.block(\"root\"):\n"
      "    for i, j, k in T.grid(1024, 1024, 1024):\n"
      "        with T.block(\"C\"):\n"
      "            v_i, v_j, v_k = T.axis.remap(\"SSR\", [i, j, k])\n"
      "            T.reads(A[v_i, v_k], B[v_k, v_j])\n"
      "            T.writes(C[v_i, v_j])\n"
      "            with T.init():\n"
      "                C[v_i, v_j] = T.float32(0.0)\n"
      "            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]\n";
  ck_assert_str_eq(text, want);
  free(text);
  check_func_golden("ir_matmul", f);
  ir_func_free(f);
}
END_TEST

START_TEST(t_print_bindings) {
  ir_func_t *f = build_bindings();
  char *text = print_func(f);
  ck_assert_ptr_nonnull(strstr(text, "v_i = T.axis.spatial(1000, i_0 * 128 + i_1)\n"));
  ck_assert_ptr_nonnull(strstr(text, "v_j, v_r = T.axis.remap(\"SR\", [j, r])\n"));
  ck_assert_ptr_nonnull(strstr(text, "T.where(i_0 * 128 + i_1 < 1000)\n"));
  ck_assert_ptr_nonnull(strstr(text, "T.reads(A[v_i, v_j:v_j + 3], W[0:3])\n"));
  /* Second nest: a duplicate name gets _1 (in order of appearance); a var
   * named like a buffer is renamed too. */
  ck_assert_ptr_nonnull(strstr(text, "for i_0_1, D_1 in T.grid(125, 8):\n"));
  ck_assert_ptr_nonnull(strstr(text, "v_i_1 = T.axis.spatial(1000, i_0_1 * 8 + D_1)\n"));
  ck_assert_ptr_nonnull(strstr(text, "T.reads(B[v_i_1, 0:1024])\n"));
  free(text);
  check_func_golden("ir_bindings", f);
  ir_func_free(f);
}
END_TEST

START_TEST(t_print_loop_kinds) {
  ir_func_t *f = build_loop_kinds();
  char *text = print_func(f);
  ck_assert_ptr_nonnull(strstr(text, "for bx in T.thread_binding(4, thread=\"blockIdx.x\"):\n"));
  ck_assert_ptr_nonnull(strstr(text, "for p in T.parallel(2):\n"));
  ck_assert_ptr_nonnull(strstr(text, "for u in T.unroll(2, annotations={\"pragma_auto_unroll_max_step\": "
                                     "16, \"pragma_unroll_explicit\": 1}):\n"));
  ck_assert_ptr_nonnull(
      strstr(text, "for s in range(2, annotations={\"software_pipeline_order\": \"0,1\"}):\n"));
  ck_assert_ptr_nonnull(strstr(text, "for g0, g1 in T.grid(2, 2):\n"));
  ck_assert_ptr_nonnull(strstr(text, "for vec in T.vectorized(4):\n"));
  ck_assert_ptr_nonnull(strstr(text, "v_y = T.axis.spatial(2, vec)\n")); /* extent 4 != 2 */
  free(text);
  check_func_golden("ir_loop_kinds", f);
  ir_func_free(f);
}
END_TEST

START_TEST(t_print_scopes) {
  ir_func_t *f = build_scopes();
  char *text = print_func(f);
  ck_assert_ptr_nonnull(strstr(text, "    with T.block(\"root\"):\n"
                                     "        A_shared = T.alloc_buffer((1024,), \"float32\", scope=\"shared\")\n"
                                     "        acc_local = T.alloc_buffer((4, 8), \"float64\", scope=\"local\")\n"
                                     "        S = T.alloc_buffer((), \"float32\")\n"
                                     "        for ax0 in range(1024):\n"));
  ck_assert_ptr_nonnull(strstr(text, "O: T.Buffer((), \"float32\")"));
  ck_assert_ptr_nonnull(strstr(text, "S[()] = S[()] + A_shared[v_k_i]\n"));
  free(text);
  check_func_golden("ir_scopes", f);
  ir_func_free(f);
}
END_TEST

/* One expression per line, covering every kind, every precedence relation
 * and the constant formats. */
static char *expr_catalogue(void) {
  ir_func_t *f = ir_func_new("main");
  ir_var_t *av = ir_var_new(f, "a", IR_INT32), *bv = ir_var_new(f, "b", IR_INT32);
  ir_var_t *cv = ir_var_new(f, "c", IR_INT32);
  ir_expr_t *a = V(av), *b = V(bv), *c = V(cv);
  ir_buffer_t *X = buffer(f, "X", IR_FLOAT32, 16, 0, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *S = buffer(f, "S", IR_FLOAT64, 0, 0, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_buffer_t *M = buffer(f, "M", IR_INT64, 4, 4, IR_SCOPE_GLOBAL, IR_BUF_INPUT);
  ir_expr_t *xa = ir_load(f, X, &a, 1), *xb = ir_load(f, X, &b, 1);
  ir_expr_t *lt = BIN(LT, a, b), *gt = BIN(GT, b, c);
  ir_expr_t *neg5 = I(-5);
  ir_expr_t *e[] = {
      /* arithmetic and precedence */
      BIN(ADD, a, BIN(MUL, b, c)), BIN(MUL, BIN(ADD, a, b), c), BIN(SUB, BIN(SUB, a, b), c),
      BIN(SUB, a, BIN(SUB, b, c)), BIN(ADD, a, BIN(ADD, b, c)), BIN(SUB, a, BIN(ADD, b, c)),
      BIN(FLOORDIV, BIN(ADD, a, b), I(4)), BIN(FLOORMOD, a, BIN(MUL, b, c)),
      BIN(MUL, BIN(FLOORDIV, a, I(4)), I(4)), BIN(FLOORDIV, a, BIN(FLOORDIV, b, c)),
      BIN(DIV, xa, BIN(SUB, xb, F32(1.0))), BIN(MUL, BIN(DIV, xa, xb), xa),
      BIN(MIN, BIN(ADD, a, b), I(3)), BIN(MAX, a, BIN(MIN, b, c)),
      /* unary minus, negative literals */
      ir_unary(f, IR_E_NEG, a), ir_unary(f, IR_E_NEG, BIN(ADD, a, b)),
      ir_unary(f, IR_E_NEG, ir_unary(f, IR_E_NEG, a)), ir_unary(f, IR_E_NEG, neg5),
      ir_unary(f, IR_E_NEG, BIN(MUL, a, b)), ir_unary(f, IR_E_NEG, xa),
      BIN(MUL, a, neg5), BIN(SUB, a, neg5), BIN(ADD, neg5, a),
      BIN(MUL, ir_unary(f, IR_E_NEG, a), b),
      /* comparisons and logic */
      lt, BIN(LE, BIN(ADD, a, I(1)), BIN(MUL, b, I(2))), BIN(EQ, lt, gt), BIN(NE, a, b),
      BIN(GE, a, I(0)), BIN(OR, BIN(AND, lt, gt), ir_unary(f, IR_E_NOT, BIN(EQ, a, c))),
      BIN(AND, BIN(OR, lt, gt), lt), BIN(AND, lt, BIN(AND, gt, lt)), BIN(AND, BIN(AND, lt, gt), lt),
      ir_unary(f, IR_E_NOT, BIN(AND, lt, gt)), ir_unary(f, IR_E_NOT, ir_unary(f, IR_E_NOT, lt)),
      BIN(OR, lt, BIN(OR, gt, lt)), BIN(EQ, ir_bool(f, true), ir_unary(f, IR_E_NOT, lt)),
      /* casts, select, calls, loads */
      ir_cast(f, IR_FLOAT32, BIN(ADD, a, b)), ir_cast(f, IR_INT32, xa),
      ir_select(f, BIN(LT, a, I(4)), xa, F32(0.0)),
      ir_call(f, IR_FN_EXP, &xa, 1), ir_call(f, IR_FN_LOG, &xa, 1), ir_call(f, IR_FN_SQRT, &xa, 1),
      ir_call(f, IR_FN_TANH, &xa, 1), ir_call(f, IR_FN_ABS, &xa, 1), ir_call(f, IR_FN_ABS, &a, 1),
      ir_call(f, IR_FN_POW, (ir_expr_t *[]){xa, F32(2.0)}, 2),
      BIN(MUL, ir_call(f, IR_FN_EXP, (ir_expr_t *[]){BIN(SUB, xa, xb)}, 1), xb),
      ir_load(f, S, NULL, 0), ir_load(f, M, (ir_expr_t *[]){BIN(FLOORMOD, a, I(4)), I(0)}, 2),
      /* constants */
      I(0), I(-7), I(2147483647), ir_const_int(f, IR_INT64, 5), ir_const_int(f, IR_INT64, -1),
      ir_bool(f, true), ir_bool(f, false), F32(0.0), F32(-0.0), F32(1.0), F32(0.5), F32(-2.5),
      F32(123456.0), F32(1e20), F32(1e-5), F32((double)0.1f), ir_float(f, IR_FLOAT64, 0.1),
      F32(ir_dtype_min_value(IR_FLOAT32)), ir_float(f, IR_FLOAT16, ir_dtype_min_value(IR_FLOAT16)),
      ir_float(f, IR_FLOAT64, 1.0 / 3.0), F32(INFINITY), F32(-INFINITY), F32(NAN),
  };
  tn_buf_t out;
  tn_buf_init(&out);
  for (size_t n = 0; n < TN_ARRAY_LEN(e); n++) {
    char *s = print_expr(e[n]);
    tn_buf_printf(&out, "%s\n", s);
    free(s);
  }
  ir_func_free(f);
  return tn_buf_take(&out);
}

START_TEST(t_print_exprs) {
  char *text = expr_catalogue();
  static const char *const lines[] = {
      "a + b * c\n",        "(a + b) * c\n",      "a - b - c\n",   "a - (b - c)\n",
      "a + (b + c)\n",      "(a + b) // 4\n",     "-(-a)\n",       "-(-5)\n",
      "a * -5\n",           "a - -5\n",           "-5 + a\n",      "-a * b\n",
      "(a < b) == (b > c)\n", "a < b and b > c or not a == c\n", "(a < b or b > c) and a < b\n",
      "not (a < b and b > c)\n", "not not a < b\n", "T.Cast(\"float32\", a + b)\n",
      "T.if_then_else(a < 4, X[a], T.float32(0.0))\n", "T.fabs(X[a])\n", "T.abs(a)\n",
      "T.pow(X[a], T.float32(2.0))\n", "T.exp(X[a] - X[b]) * X[b]\n", "S[()]\n",
      "M[a % 4, 0]\n", "T.int64(5)\n", "T.bool(True)\n", "T.float32(-0.0)\n",
      "T.float32(1e+20)\n", "T.float32(1e-05)\n", "T.float32(123456.0)\n", "T.float32(0.10000000149011612)\n",
      "T.float64(0.1)\n", "T.float32(-3.4028234663852886e+38)\n", "T.float16(-65504.0)\n",
      "T.float32(\"-inf\")\n", "T.float32(\"nan\")\n",
  };
  for (size_t n = 0; n < TN_ARRAY_LEN(lines); n++)
    ck_assert_msg(strstr(text, lines[n]) != NULL, "missing line %s in:\n%s", lines[n], text);
  check_golden("ir_exprs", text);
  free(text);
}
END_TEST

/* Every workload prints as its golden at default parameters. */
typedef void (*workload_fn)(const char *name, ir_workload_t *w);

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Calls fn for every workloads/NAME.tw in name order; returns how many. */
static int for_each_workload(workload_fn fn) {
  DIR *d = opendir(SRC("workloads"));
  ck_assert_msg(d != NULL, "cannot open %s", SRC("workloads"));
  char *names[512];
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) && n < 512;) {
    size_t len = strlen(de->d_name);
    if (len > 3 && strcmp(de->d_name + len - 3, ".tw") == 0) names[n++] = strndup(de->d_name, len - 3);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.tw", SRC("workloads"), names[i]);
    ir_workload_t *w = NULL;
    tn_err_t err = {0};
    int rc = ir_workload_load(path, NULL, 0, &w, &err);
    ck_assert_msg(rc == 0, "%s: %s", path, err.msg);
    fn(names[i], w);
    ir_workload_free(w);
    free(names[i]);
  }
  return n;
}

static void workload_golden(const char *name, ir_workload_t *w) {
  ck_assert_str_eq(w->name, name);
  check_func_golden(name, w->func);
}

START_TEST(t_print_workloads) { ck_assert_int_gt(for_each_workload(workload_golden), 0); }
END_TEST

/* The parser's matmul follows the same conventions as the hand-built one. */
START_TEST(t_print_matmul_workload) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_load(SRC("workloads/matmul.tw"), NULL, 0, &w, &err) == 0, "%s", err.msg);
  ir_func_t *f = build_matmul(mm_names, 0);
  char *a = print_func(w->func), *b = print_func(f);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* ---- hash tests -------------------------------------------------------- */

/* The pinned identity of the hand-built matmul: a change here means every
 * stored tuning record keyed by hash is invalidated, so it must be
 * deliberate (a schema migration that recomputes them).  The same stream
 * through FNV-1a gives the hash that tuned stored before (schema 8's
 * migration recognises rows by it): pinned as well. */
#define MATMUL_HASH "416e69d78a53f8fafba68b976c1c5060cba44a5e31c75d9edab119ecb2868c5d"
#define MATMUL_HASH_FNV UINT64_C(0x200879c5b123a50e)

START_TEST(t_hash_pinned) {
  ir_func_t *f = build_matmul(mm_names, 0);
  char hex[TN_ID_SIZE];
  ir_func_hash(f, hex);
  ck_assert_int_eq(strlen(hex), TN_ID_HEX);
  ck_assert(tn_id_valid(hex));
  ck_assert_str_eq(hex, MATMUL_HASH);
  ck_assert_msg(ir_func_hash_fnv(f) == MATMUL_HASH_FNV, "matmul's FNV hash is %016llx",
                (unsigned long long)ir_func_hash_fnv(f));
  ir_func_free(f);
}
END_TEST

/* The collision fixture (tests/fnv-collision/README.md): two workloads that
 * compute differently shaped kernels (W const or not, so kernels of one may
 * take a packed copy of W) and share the 64-bit FNV-1a hash that once
 * named them; their identities differ. */
START_TEST(t_hash_fnv_collision) {
  ir_workload_t *w[2] = {NULL, NULL};
  const char *files[2] = {SRC("tests/fnv-collision/dense_const.tw"), SRC("tests/fnv-collision/dense_plain.tw")};
  char id[2][TN_ID_SIZE];
  for (int i = 0; i < 2; i++) {
    tn_err_t err = {0};
    ck_assert_msg(ir_workload_load(files[i], NULL, 0, &w[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(ir_func_hash_fnv(w[i]->func) == UINT64_C(0x6e44248031b14ae9), "%s: %016llx", files[i],
                  (unsigned long long)ir_func_hash_fnv(w[i]->func));
    ir_func_hash(w[i]->func, id[i]);
  }
  ck_assert(w[0]->func->params[0]->is_const && !w[1]->func->params[0]->is_const);
  ck_assert_str_ne(id[0], id[1]);
  for (int i = 0; i < 2; i++) ir_workload_free(w[i]);
}
END_TEST

START_TEST(t_hash_copy_and_rename) {
  ir_func_t *f = build_matmul(mm_names, 0);
  char h[TN_ID_SIZE];
  ir_func_hash(f, h);
  ck_assert(tu_hash_is(f, h)); /* repeatable */
  ir_func_t *c = ir_func_copy(f);
  ck_assert(tu_hash_is(c, h));
  /* Alpha-renamed, with different var ids and buffer ids. */
  static const char *const other[6] = {"x", "y", "z", "vx", "vy", "vz"};
  ir_func_t *r = build_matmul(other, 3);
  ck_assert(tu_hash_is(r, h));
  char *pf = print_func(f), *pr = print_func(r);
  ck_assert_str_ne(pf, pr); /* the printer shows the names */
  free(pf);
  free(pr);
  ir_func_free(r);
  ir_func_free(c);
  ir_func_free(f);
}
END_TEST

static ir_stmt_t *loop_at(ir_func_t *f, int depth) {
  ir_stmt_t *s = ir_func_root(f)->body;
  while (depth--) s = s->u.loop.body;
  return s;
}

static ir_block_t *mm_block(ir_func_t *f) { return &ir_func_find_block(f, "C")->u.block; }

/* Each mutation of a copy of matmul must change the hash. */
typedef void (*mutate_fn)(ir_func_t *f);
static void m_shape(ir_func_t *f) { f->params[0]->shape[1] = 512; }
static void m_extent(ir_func_t *f) { loop_at(f, 2)->u.loop.extent = 512; }
static void m_iter_extent(ir_func_t *f) { mm_block(f)->iters[2].extent = 512; }
static void m_iter_kind(ir_func_t *f) { mm_block(f)->iters[2].kind = IR_ITER_SPATIAL; }
static void m_init_const(ir_func_t *f) { mm_block(f)->init->u.store.value->u.fval = 1.0; }
static void m_dtype(ir_func_t *f) { f->params[1]->dtype = IR_FLOAT64; }
static void m_buf_name(ir_func_t *f) { f->params[1]->name = "Bt"; }
static void m_block_name(ir_func_t *f) { mm_block(f)->name = "D"; }
static void m_loop_kind(ir_func_t *f) { loop_at(f, 0)->u.loop.kind = IR_LOOP_PARALLEL; }
static void m_scope(ir_func_t *f) { f->params[2]->scope = IR_SCOPE_SHARED; }
static void m_role(ir_func_t *f) { f->params[2]->role = IR_BUF_INPUT; }
static void m_init_range(ir_func_t *f) { f->params[0]->init_hi = 2.0; }
static void m_no_init(ir_func_t *f) { mm_block(f)->init = NULL; }
static void m_annot(ir_func_t *f) {
  ir_block_t *b = mm_block(f);
  ir_annot_set_int(f, &b->annots, &b->nannots, "k", 1);
}
static void m_loop_annot(ir_func_t *f) {
  ir_loop_t *l = &loop_at(f, 1)->u.loop;
  ir_annot_set_str(f, &l->annots, &l->nannots, "k", "1");
}
/* Swap the two spatial loops: same names and shapes, different structure. */
static void m_swap_loops(ir_func_t *f) {
  ir_loop_t *a = &loop_at(f, 0)->u.loop, *b = &loop_at(f, 1)->u.loop;
  ir_var_t *t = a->var;
  a->var = b->var;
  b->var = t;
}
/* Swap the operands of the product (A*B -> B*A). */
static void m_swap_operands(ir_func_t *f) {
  ir_expr_t *prod = mm_block(f)->body->u.store.value->u.bin.b;
  ir_expr_t *t = prod->u.bin.a;
  prod->u.bin.a = prod->u.bin.b;
  prod->u.bin.b = t;
}
/* Read the same buffer twice (B -> A in the product): buffer identity counts. */
static void m_buf_ref(ir_func_t *f) {
  ir_expr_t *prod = mm_block(f)->body->u.store.value->u.bin.b;
  prod->u.bin.b->u.load.buf = f->params[0];
}
static void m_thread(ir_func_t *f) {
  ir_loop_t *l = &loop_at(f, 0)->u.loop;
  l->kind = IR_LOOP_THREAD;
  l->tag = IR_TAG_BLOCK_X;
}

START_TEST(t_hash_differs) {
  static const mutate_fn muts[] = {m_shape, m_extent, m_iter_extent, m_iter_kind, m_init_const,
                                   m_dtype, m_buf_name, m_block_name, m_loop_kind, m_scope,
                                   m_role, m_init_range, m_no_init, m_annot, m_loop_annot,
                                   m_swap_loops, m_swap_operands, m_buf_ref, m_thread};
  ir_func_t *f = build_matmul(mm_names, 0);
  char h[TN_ID_SIZE];
  ir_func_hash(f, h);
  char seen[TN_ARRAY_LEN(muts)][TN_ID_SIZE];
  for (size_t i = 0; i < TN_ARRAY_LEN(muts); i++) {
    ir_func_t *c = ir_func_copy(f);
    muts[i](c);
    ir_func_hash(c, seen[i]);
    ck_assert_msg(strcmp(seen[i], h) != 0, "mutation %zu left the hash unchanged", i);
    for (size_t j = 0; j < i; j++) ck_assert_msg(strcmp(seen[j], seen[i]) != 0, "mutations %zu and %zu collide", j, i);
    ir_func_free(c);
  }
  ck_assert(tu_hash_is(f, h)); /* the original was not touched */
  ir_func_free(f);
}
END_TEST

/* Thread tags count; annotation order does not; -0.0/0.0 and NaNs are one value. */
START_TEST(t_hash_canonical) {
  ir_func_t *f = build_matmul(mm_names, 0);
  ir_func_t *a = ir_func_copy(f), *b = ir_func_copy(f);
  m_thread(a);
  m_thread(b);
  loop_at(b, 0)->u.loop.tag = IR_TAG_THREAD_X;
  ck_assert(!tu_same_hash(a, b));
  ir_func_free(a);
  ir_func_free(b);

  a = ir_func_copy(f);
  b = ir_func_copy(f);
  ir_block_t *ba = mm_block(a), *bb = mm_block(b);
  ir_annot_set_int(a, &ba->annots, &ba->nannots, "x", 1);
  ir_annot_set_str(a, &ba->annots, &ba->nannots, "y", "s");
  ir_annot_set_str(b, &bb->annots, &bb->nannots, "y", "s");
  ir_annot_set_int(b, &bb->annots, &bb->nannots, "x", 1);
  ck_assert(tu_same_hash(a, b));
  ir_annot_set_int(b, &bb->annots, &bb->nannots, "x", 2);
  ck_assert(!tu_same_hash(a, b));
  ir_func_free(a);
  ir_func_free(b);

  a = ir_func_copy(f);
  b = ir_func_copy(f);
  mm_block(a)->init->u.store.value->u.fval = -0.0;
  ck_assert(tu_same_hash(a, f));
  mm_block(a)->init->u.store.value->u.fval = NAN;
  mm_block(b)->init->u.store.value->u.fval = -NAN;
  ck_assert(tu_same_hash(a, b));
  ck_assert(!tu_same_hash(a, f));
  ir_func_free(a);
  ir_func_free(b);

  /* Ids only speed up lookups: shared or out-of-range ids change nothing. */
  a = ir_func_copy(f);
  ir_block_t *blk = mm_block(a);
  blk->iters[1].var->id = blk->iters[0].var->id;
  blk->iters[2].var->id = 1000000;
  a->params[1]->id = a->params[0]->id;
  a->params[2]->id = -1;
  ck_assert(tu_same_hash(a, f));
  ir_func_free(a);
  ir_func_free(f);
}
END_TEST

/* The other hand-built functions hash stably through a copy, and differ. */
START_TEST(t_hash_others) {
  ir_func_t *fs[] = {build_matmul(mm_names, 0), build_bindings(), build_loop_kinds(), build_scopes()};
  for (size_t i = 0; i < TN_ARRAY_LEN(fs); i++) {
    ir_func_t *c = ir_func_copy(fs[i]);
    ck_assert(tu_same_hash(c, fs[i]));
    ir_func_free(c);
    for (size_t j = 0; j < i; j++) ck_assert(!tu_same_hash(fs[i], fs[j]));
  }
  for (size_t i = 0; i < TN_ARRAY_LEN(fs); i++) ir_func_free(fs[i]);
}
END_TEST

/* Parsing the same text twice gives the same hash; parameters change it. */
static const char *workload_hash(const char *path, const ir_param_set_t *set, int nset, char h[TN_ID_SIZE]) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_load(path, set, nset, &w, &err) == 0, "%s", err.msg);
  ir_func_hash(w->func, h);
  ir_func_t *c = ir_func_copy(w->func);
  ck_assert(tu_hash_is(c, h));
  ir_func_free(c);
  ir_workload_free(w);
  return h;
}

START_TEST(t_hash_workloads) {
  const char *path = SRC("workloads/matmul.tw");
  char h[TN_ID_SIZE], other[TN_ID_SIZE];
  workload_hash(path, NULL, 0, h);
  ck_assert_str_eq(workload_hash(path, NULL, 0, other), h);
  ir_param_set_t m512 = {.name = "M", .value = 512};
  ck_assert_str_ne(workload_hash(path, &m512, 1, other), h);
  ir_param_set_t m1024 = {.name = "M", .value = 1024};
  ck_assert_str_eq(workload_hash(path, &m1024, 1, other), h); /* the default, given explicitly */
  /* The parser's matmul is the hand-built one (same conventions). */
  ir_func_t *f = build_matmul(mm_names, 0);
  ck_assert(tu_hash_is(f, h));
  ir_func_free(f);
}
END_TEST

/* The one table of thread tags: every name parses back to its tag, with
 * its class and axis; other strings are not tags. */
START_TEST(t_thread_tags) {
  static const char *const names[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
                                      "threadIdx.z", "vthread.x", "vthread.y", "vthread.z"};
  static const ir_tag_class_t cls[] = {IR_TAG_CLASS_BLOCK, IR_TAG_CLASS_THREAD, IR_TAG_CLASS_VTHREAD};
  for (int i = 0; i < 9; i++) {
    ir_thread_tag_t t = IR_TAG_NONE;
    ck_assert_int_eq(ir_thread_tag_parse(names[i], &t), 0);
    ck_assert_int_eq(t, IR_TAG_BLOCK_X + i);
    ck_assert_str_eq(ir_thread_tag_name(t), names[i]);
    ck_assert_int_eq(ir_thread_tag_class(t), cls[i / 3]);
    ck_assert_int_eq(ir_thread_tag_axis(t), i % 3);
  }
  ir_thread_tag_t t = IR_TAG_THREAD_Y;
  static const char *const bad[] = {"", "threadIdx", "threadIdx.w", "vthread", "blockIdx.x ", "warp.x"};
  for (size_t i = 0; i < TN_ARRAY_LEN(bad); i++) ck_assert_int_eq(ir_thread_tag_parse(bad[i], &t), TN_EINVAL);
  ck_assert_int_eq(ir_thread_tag_parse(NULL, &t), TN_EINVAL);
  ck_assert_int_eq(t, IR_TAG_THREAD_Y); /* untouched */
  ck_assert_int_eq(ir_thread_tag_class(IR_TAG_NONE), IR_TAG_CLASS_NONE);
  ck_assert_str_eq(ir_thread_tag_name(IR_TAG_NONE), "");
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("print");
  TU_TCASE(s, "printer", 0, t_print_matmul, t_print_bindings, t_print_loop_kinds, t_print_scopes,
           t_print_exprs);
  TU_TCASE(s, "workloads", 120, t_print_workloads, t_print_matmul_workload, t_hash_workloads);
  TU_TCASE(s, "tags", 0, t_thread_tags);
  TU_TCASE(s, "hash", 0, t_hash_pinned, t_hash_fnv_collision, t_hash_copy_and_rename, t_hash_differs, t_hash_canonical,
           t_hash_others);
  return s;
}

TN_TEST_MAIN(make_suite)
