/* test_course.c — suite "course": the course schedules in workloads/schedules
 * replay on their workloads, print exactly their golden text (tests/golden/
 * course_*.txt; regenerate with TUNED_UPDATE_GOLDEN=1), and compute the same
 * outputs as the unscheduled program on small sizes. */
#include <stdio.h>
#include <string.h>

#include "schedule/schedule.h"
#include "testutil.h"

static const struct {
  const char *trace, *workload, *small; /* small: overrides for the evaluator check */
} course[] = {
    {"vector_add_gpu", "vector_add", "N=1000"},
    {"window_sum_shared", "window_sum", "N=300"},
    {"matmul_local", "matmul", "M=64,N=64,K=64"},
    {"matmul_shared", "matmul", "M=64,N=128,K=32"},
    {"matmul_cpu", "matmul", "M=64,N=128,K=16"},
};

static ir_workload_t *load(const char *name, const char *sets) {
  char path[512], buf[128];
  snprintf(path, sizeof path, SRC("workloads/%s.tw"), name);
  snprintf(buf, sizeof buf, "%s", sets ? sets : "");
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t ov[8];
  int n = 0;
  tn_err_t err = {0};
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
    ck_assert_int_eq(ir_param_set_parse(tok, a, &ov[n++], &err), TN_OK);
  ir_workload_t *w = NULL;
  ck_assert_msg(ir_workload_load(path, ov, n, &w, &err) == TN_OK, "%s", err.msg);
  tn_arena_free(a);
  return w;
}

static sch_trace_t *load_trace(const char *name) {
  char path[512], *text = NULL;
  size_t len;
  tn_err_t err = {0};
  snprintf(path, sizeof path, SRC("workloads/schedules/%s.json"), name);
  ck_assert_msg(tn_read_file(path, 1 << 20, &text, &len, &err) == TN_OK, "%s", err.msg);
  sch_trace_t *t = NULL;
  ck_assert_msg(sch_trace_from_json(text, len, &t, &err) == TN_OK, "%s: %s", name, err.msg);
  free(text);
  return t;
}

static sch_t *replay(const ir_workload_t *w, const sch_trace_t *t, const char *name) {
  sch_t *s = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_replay(w->func, t, 1, &s, &err) == TN_OK, "%s: %s", name, err.msg);
  return s;
}

static void compare_golden(const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, SRC("tests/golden/course_%s.txt"), name);
  if (getenv("TUNED_UPDATE_GOLDEN")) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return;
  }
  char *want = NULL;
  size_t len;
  tn_err_t err = {0};
  ck_assert_msg(tn_read_file(path, 1 << 20, &want, &len, &err) == TN_OK,
                "%s (create it with TUNED_UPDATE_GOLDEN=1)", err.msg);
  ck_assert_msg(strcmp(want, text) == 0, "%s: printed IR differs from %s:\n%s", name, path, text);
  free(want);
}

START_TEST(t_golden) {
  ir_workload_t *w = load(course[_i].workload, NULL);
  sch_trace_t *t = load_trace(course[_i].trace);
  sch_t *s = replay(w, t, course[_i].trace);
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(sch_func(s), &b);
  compare_golden(course[_i].trace, tn_buf_str(&b));
  /* The replayed trace serialises to a trace that replays to the same IR. */
  char *json = sch_trace_to_json(sch_get_trace(s));
  sch_trace_t *t2 = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(sch_trace_from_json(json, strlen(json), &t2, &err), TN_OK);
  sch_t *s2 = replay(w, t2, course[_i].trace);
  tn_buf_t b2;
  tn_buf_init(&b2);
  ir_print_func(sch_func(s2), &b2);
  ck_assert_str_eq(tn_buf_str(&b), tn_buf_str(&b2));
  free(json);
  tn_buf_free(&b);
  tn_buf_free(&b2);
  sch_free(s);
  sch_free(s2);
  sch_trace_free(t);
  sch_trace_free(t2);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_equivalent) {
  ir_workload_t *w = load(course[_i].workload, course[_i].small);
  sch_trace_t *t = load_trace(course[_i].trace);
  sch_t *s = replay(w, t, course[_i].trace);
  tn_err_t err = {0};
  ir_data_t *ref = NULL, *got = NULL;
  ck_assert_int_eq(ir_data_new(w->func, 7, 1 << 28, &ref, &err), TN_OK);
  ck_assert_int_eq(ir_data_new(sch_func(s), 7, 1 << 28, &got, &err), TN_OK);
  ck_assert_msg(ir_eval(w->func, ref, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ir_eval(sch_func(s), got, &err) == TN_OK, "%s: %s", course[_i].trace, err.msg);
  for (int i = 0; i < w->func->nparams; i++) {
    if (w->func->params[i]->role != IR_BUF_OUTPUT) continue;
    double e = ir_rel_l2_error(ref->vals[i], got->vals[i], ref->sizes[i]);
    ck_assert_msg(e <= 1e-12, "%s: output %s differs (relative L2 error %g)", course[_i].trace,
                  w->func->params[i]->name, e);
  }
  ir_data_free(ref);
  ir_data_free(got);
  sch_free(s);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("course");
  TCase *tc = tcase_create("course");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, t_golden, 0, (int)TN_ARRAY_LEN(course));
  tcase_add_loop_test(tc, t_equivalent, 0, (int)TN_ARRAY_LEN(course));
  suite_add_tcase(s, tc);
  return s;
}

TN_TEST_MAIN(make)
