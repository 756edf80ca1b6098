/* test_course.c — suite "course": the course schedules in workloads/schedules
 * replay on their workloads, print exactly their golden text (tests/golden/
 * course_*.txt; regenerate with TUNED_UPDATE_GOLDEN=1), and compute the same
 * outputs as the unscheduled program on small sizes. */
#include <stdio.h>
#include <string.h>

#include "schedule/schedule.h"
#include "testir.h"

static const struct {
  const char *trace, *workload, *small; /* small: overrides for the evaluator check */
} course[] = {
    {"vector_add_gpu", "vector_add", "N=1000"},
    {"window_sum_shared", "window_sum", "N=300"},
    {"matmul_local", "matmul", "M=64,N=64,K=64"},
    {"matmul_shared", "matmul", "M=64,N=128,K=32"},
    {"matmul_pipelined", "matmul", "M=64,N=128,K=32"},
    {"matmul_cpu", "matmul", "M=64,N=128,K=16"},
};

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
  tu_check_golden(path, text);
}

START_TEST(t_golden) {
  ir_workload_t *w = tu_load_sets(course[_i].workload, NULL);
  sch_trace_t *t = load_trace(course[_i].trace);
  sch_t *s = replay(w, t, course[_i].trace);
  char *text = tu_ir_text(sch_func(s));
  compare_golden(course[_i].trace, text);
  /* The replayed trace serialises to a trace that replays to the same IR. */
  char *json = sch_trace_to_json(sch_get_trace(s));
  sch_trace_t *t2 = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(sch_trace_from_json(json, strlen(json), &t2, &err), TN_OK);
  sch_t *s2 = replay(w, t2, course[_i].trace);
  char *text2 = tu_ir_text(sch_func(s2));
  ck_assert_str_eq(text, text2);
  free(json);
  free(text);
  free(text2);
  sch_free(s);
  sch_free(s2);
  sch_trace_free(t);
  sch_trace_free(t2);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_equivalent) {
  ir_workload_t *w = tu_load_sets(course[_i].workload, course[_i].small);
  sch_trace_t *t = load_trace(course[_i].trace);
  sch_t *s = replay(w, t, course[_i].trace);
  tu_assert_same_outputs(w->func, sch_func(s), 7);
  sch_free(s);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("course");
  TCase *tc = tu_tcase_add(s, "course", 120, NULL, 0);
  tcase_add_loop_test(tc, t_golden, 0, (int)TN_ARRAY_LEN(course));
  tcase_add_loop_test(tc, t_equivalent, 0, (int)TN_ARRAY_LEN(course));
  return s;
}

TN_TEST_MAIN(make)
