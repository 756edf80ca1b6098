/* test_analysis.c — the IR-analysis layer (ir/analysis.h): paths, enclosing
 * loops and scopes, block lists, producers and consumers (also across cache
 * stages), on scheduled programs and on nests deeper than any former fixed
 * table. */
#include <stdlib.h>
#include <string.h>

#include "ir/analysis.h"
#include "schedule/schedule.h"
#include "testir.h"

static ir_block_t *named(const ir_func_t *f, const char *name) {
  ir_stmt_t *s = ir_func_find_block(f, name);
  ck_assert_msg(s, "no block %s", name);
  return &s->u.block;
}

/* Names of the loops around block `name`, outermost first, joined by ' '. */
static char *loop_names(const ir_func_t *f, const char *name) {
  ir_loop_t **loops;
  int n = ir_enclosing_loops(f, named(f, name)->uid, &loops);
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < n; i++) tn_buf_printf(&b, "%s%s", i ? " " : "", loops[i]->var->name);
  free(loops);
  return tn_buf_take(&b);
}

static void assert_loops(const ir_func_t *f, const char *block, const char *want) {
  char *got = loop_names(f, block);
  ck_assert_str_eq(got, want);
  free(got);
}

/* Names of the blocks in a list, joined by ' '. */
static char *block_names(ir_block_t *const *v, int n) {
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < n; i++) tn_buf_printf(&b, "%s%s", i ? " " : "", v[i]->name);
  return tn_buf_take(&b);
}

static void assert_related(const ir_func_t *f, const char *block, bool producers, const char *want) {
  ir_block_t *v[8];
  int n = producers ? ir_producers(f, named(f, block), v, 8) : ir_consumers(f, named(f, block), v, 8);
  ck_assert_int_le(n, 8);
  char *got = block_names(v, n);
  ck_assert_msg(strcmp(got, want) == 0, "%s of %s: got \"%s\", want \"%s\"", producers ? "producers" : "consumers",
                block, got, want);
  free(got);
}

START_TEST(t_paths_and_loops) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 8}, {"N", 8}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  const ir_func_t *f = sch_func(s);
  assert_loops(f, "C", "i j k");
  ir_path_t p = {0};
  ck_assert(ir_path_find(f, named(f, "C")->uid, &p));
  ck_assert_int_eq(p.stmts[0]->kind, IR_S_BLOCK); /* the root ... */
  ck_assert_ptr_eq(p.stmts[p.n - 1], ir_func_find_block(f, "C")); /* ... down to C */
  ck_assert_int_eq(ir_path_scope(&p), 0);
  ck_assert_ptr_eq(ir_scope_block(f, named(f, "C")->uid), &f->root->u.block);
  ck_assert(!ir_path_find(f, 1 << 30, &p)); /* no such uid: the same path object reused */
  ck_assert_int_eq(p.n, 0);
  ir_path_free(&p);
  ck_assert_ptr_null(ir_scope_block(f, f->root->u.block.uid));
  ir_loop_t **none;
  ck_assert_int_eq(ir_enclosing_loops(f, f->root->u.block.uid, &none), 0);
  ck_assert_ptr_null(none);

  /* splits and a fuse change the loops around C */
  sch_rv_t c = tu_block(s, "C"), l[8], parts[3], fused;
  ck_assert_int_eq(tu_loops(s, c, l), 3);
  sch_arg_t fac[3] = {sch_arg_int(2), sch_arg_int(2), sch_arg_int(2)};
  ck_assert_msg(sch_split(s, l[0], fac, 3, parts, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_fuse(s, (sch_rv_t[]){parts[2], l[1]}, 2, &fused, &err) == 0, "%s", err.msg);
  assert_loops(sch_func(s), "C", "i_0 i_1 i_2_j_fused k");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_blocks) {
  ir_workload_t *w = TU_LOAD("softmax", {"M", 4}, {"N", 8});
  const ir_func_t *f = w->func;
  ir_block_t **all;
  int n = ir_blocks(f, &all);
  char *names = block_names(all, n);
  ck_assert_int_eq(n, ir_collect_blocks(f->root->u.block.body, false, NULL, 0)); /* sizing call */
  ir_block_t *first[2];
  ck_assert_int_eq(ir_collect_blocks(f->root->u.block.body, true, first, 2), n); /* only two stored */
  ck_assert_ptr_eq(first[0], all[0]);
  ck_assert_ptr_eq(first[1], all[1]);
  /* each block reads what the one before it writes: a chain */
  for (int i = 1; i < n; i++) {
    ir_block_t *p[4];
    ck_assert_int_ge(ir_producers(f, all[i], p, 4), 1);
  }
  ck_assert_msg(n >= 3, "softmax has %d blocks: %s", n, names);
  ck_assert(ir_block_writes(all[0], all[0]->writes[0].buf));
  ck_assert(!ir_block_reads(all[0], all[0]->writes[0].buf));
  free(names);
  free(all);
  ir_workload_free(w);
}
END_TEST

/* Producers and consumers follow the copies that cache_read and
 * cache_write insert, and the init block that decompose_reduction splits
 * off. */
START_TEST(t_cache_stages) {
  ir_workload_t *w = TU_LOAD("matmul", {"M", 8}, {"N", 8}, {"K", 8});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t c = tu_block(s, "C"), as, bs, cl;
  ck_assert_msg(sch_cache_read(s, c, 0, "shared", &as, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_cache_read(s, c, 1, "shared", &bs, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_cache_write(s, c, 0, "local", &cl, &err) == 0, "%s", err.msg);
  const ir_func_t *f = sch_func(s);
  assert_related(f, "C", true, "A_shared B_shared");
  assert_related(f, "C", false, "C_local");
  assert_related(f, "A_shared", true, "");
  assert_related(f, "A_shared", false, "C");
  assert_related(f, "C_local", true, "C");
  assert_related(f, "C_local", false, "");
  /* more related blocks than room: the count says so */
  ir_block_t *one[1];
  ck_assert_int_eq(ir_producers(f, named(f, "C"), one, 1), 2);
  ck_assert_str_eq(one[0]->name, "A_shared");
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A nest of 600 loops (one loop split into 598 pieces, two more around):
 * deeper than any of the former fixed tables (64, 96, 128). */
START_TEST(t_deep_split) {
  ir_workload_t *w = TU_LOAD("vector_add", {"N", 64});
  sch_t *s = sch_create(w->func, 1);
  tn_err_t err = {0};
  sch_rv_t b = tu_block(s, "C"), l[4];
  ck_assert_int_eq(tu_loops(s, b, l), 1);
  enum { PIECES = 600 };
  sch_arg_t *fac = malloc(sizeof *fac * PIECES);
  sch_rv_t *parts = malloc(sizeof *parts * PIECES);
  for (int i = 0; i < PIECES; i++) fac[i] = sch_arg_int(i == 0 ? 64 : 1);
  ck_assert_msg(sch_split(s, l[0], fac, PIECES, parts, &err) == 0, "%s", err.msg);
  const ir_func_t *f = sch_func(s);
  ir_loop_t **loops;
  ck_assert_int_eq(ir_enclosing_loops(f, named(f, "C")->uid, &loops), PIECES);
  ck_assert_str_eq(loops[PIECES - 1]->var->name, "i_599");
  free(loops);
  sch_rv_t *got = malloc(sizeof *got * SCH_MAX_RVS_OUT);
  int n = 0;
  ck_assert_msg(sch_get_loops(s, b, got, &n, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(n, PIECES);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  free(got);
  free(parts);
  free(fac);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("analysis");
  TU_TCASE(s, "tree", 60, t_paths_and_loops, t_blocks, t_cache_stages, t_deep_split);
  return s;
}

TN_TEST_MAIN(make)
