/* test_measure.c — suite "measure": real builds (cc, NVRTC, PoCL) and real
 * runs in the tuned-worker process: the course schedules verify on the C
 * and OpenCL backends and compile with NVRTC; planted bad candidates (crash,
 * hang, wrong or partial output, compile errors, over-limit shared memory,
 * missing CUDA driver) get the right status while the next candidate still
 * measures; one measurer per device (first come, first served, stoppable
 * waits, runners in two threads never timing at once); tunectl run and
 * emit. */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "db/db.h"
#include "measure/measure.h"
#include "schedule/schedule.h"
#include "testir.h"
#include "testutil.h"
#include "tuned_config.h"
#include "wmma_sched.h"

/* Backends this build lacks are tested for their "no support" error only. */
#define WITH_CUDA TUNED_HAVE_CUDA
#define WITH_OPENCL TUNED_HAVE_OPENCL

/* ---- fixtures ---------------------------------------------------------------- */


/* Lowers workload w (scheduled by the named course trace, or not) for lang. */
static cg_module_t *lower(const ir_workload_t *w, const char *trace, cg_target_t lang) {
  tn_err_t err = {0};
  sch_t *s = NULL;
  if (trace) {
    char path[512], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, SRC("workloads/schedules/%s.json"), trace);
    ck_assert_msg(tn_read_file(path, 1 << 20, &text, &len, &err) == TN_OK, "%s", err.msg);
    sch_trace_t *t = NULL;
    ck_assert_msg(sch_trace_from_json(text, len, &t, &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(sch_replay(w->func, t, 1, &s, &err) == TN_OK, "%s: %s", trace, err.msg);
    free(text);
    sch_trace_free(t);
  }
  cg_module_t *m = NULL;
  ck_assert_msg(cg_lower(s ? sch_func(s) : w->func, lang, NULL, &m, &err) == TN_OK, "%s", err.msg);
  sch_free(s);
  return m;
}

static tn_target_t target(const char *name) {
  tn_target_t t;
  tn_err_t err = {0};
  ck_assert_msg(tn_target_lookup(name, NULL, &t, &err) == TN_OK, "%s", err.msg);
  return t;
}

static ms_candidate_t *from_module(const tn_target_t *t, const cg_module_t *m) {
  ms_candidate_t *c = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_candidate_from_module(t, m, &c, &err) == TN_OK, "%s", err.msg);
  return c;
}

/* A hand-written candidate with m's kernels and parameters. */
static ms_candidate_t *planted(const tn_target_t *t, const cg_module_t *m, const char *src) {
  ms_candidate_t *c = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_candidate_new(t, src, m->kernels, m->nkernels, m->params, m->nparams, &c, &err) == TN_OK, "%s",
                err.msg);
  return c;
}

static ms_builder_t *builder(double timeout_s, int nthreads) {
  ms_build_opts_t o = {.timeout_s = timeout_s, .nthreads = nthreads};
  ms_builder_t *b = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_builder_new(&o, &b, &err) == TN_OK, "%s", err.msg);
  return b;
}

static void teardown(ms_builder_t *b, ms_candidate_t *c, cg_module_t *m, ir_workload_t *w) {
  ms_builder_free(b);
  ms_candidate_free(c);
  cg_module_free(m);
  ir_workload_free(w);
}

static ms_runner_t *runner(const ir_workload_t *w, double timeout_s) {
  ms_run_opts_t o = {.timeout_s = timeout_s, .min_secs = 0.01};
  ms_runner_t *r = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 1, &err) == TN_OK, "%s", err.msg);
  return r;
}

/* Builds and runs n candidates; results must be cleared by the caller. */
static void build_and_run(ms_runner_t *r, ms_builder_t *b, ms_candidate_t **cs, ms_result_t *res, int n) {
  tn_err_t err = {0};
  ck_assert_int_eq(ms_build_batch(b, cs, n, res, &err), TN_OK);
  if (r) ck_assert_msg(ms_runner_run_batch(r, cs, res, n, &err) == TN_OK, "%s", err.msg);
}

static void assert_measured_ok(const ms_result_t *r, const char *what) {
  ck_assert_msg(r->status == MS_OK, "%s: %s: %s", what, ms_status_name(r->status), r->error);
  ck_assert_msg(r->ran, "%s did not run", what);
  ck_assert_int_ge(r->nrepeats, 3);
  ck_assert(r->median_secs > 0);
  ck_assert(r->gflops > 0 && r->gbps > 0);
  ck_assert(r->verify_error >= 0 && r->verify_error <= 1e-4);
  ck_assert_str_eq(r->error, "");
}

/* ---- records ------------------------------------------------------------------ */

START_TEST(t_status_json) {
  ck_assert_str_eq(ms_status_name(MS_OK), "ok");
  ck_assert_str_eq(ms_status_name(MS_BUILD_ERROR), "build_error");
  ck_assert_str_eq(ms_status_name(MS_RUN_ERROR), "run_error");
  ck_assert_str_eq(ms_status_name(MS_TIMEOUT), "timeout");
  ck_assert_str_eq(ms_status_name(MS_WRONG_RESULT), "wrong_result");
  ms_status_t s;
  ck_assert_int_eq(ms_status_parse("timeout", &s), TN_OK);
  ck_assert_int_eq(s, MS_TIMEOUT);
  ck_assert_int_eq(ms_status_parse("fine", &s), TN_EINVAL);
  double xs[] = {3, 1, 2, 10};
  ck_assert_double_eq(ms_median(xs, 3), 2);
  ck_assert_double_eq(ms_median(xs, 4), 2.5);
  ck_assert_double_eq(ms_median(xs, 0), 0);

  ms_result_t r, back;
  ms_result_init(&r);
  ck_assert_int_eq(r.build.registers, -1);
  r.run_secs = malloc(3 * sizeof(double));
  r.run_secs[0] = 0.5, r.run_secs[1] = 0.25, r.run_secs[2] = 0.125;
  r.nrepeats = 3;
  r.median_secs = 0.25, r.gflops = 12.5, r.gbps = 3.0, r.verify_error = 1e-7;
  r.build.registers = 40, r.build.shared_bytes = 4096, r.build.spill_bytes = 0, r.build.build_secs = 0.125;
  snprintf(r.build.compiler, sizeof r.build.compiler, "NVRTC 13.0");
  snprintf(r.build.arch, sizeof r.build.arch, "sm_90");
  char *j = ms_result_to_json(&r);
  ck_assert_ptr_nonnull(strstr(j, "\"status\":\t\"ok\""));
  ck_assert_ptr_nonnull(strstr(j, "\"registers\":\t40"));
  ck_assert_ptr_null(strstr(j, "stack_bytes")); /* unknown: left out */
  tn_err_t err = {0};
  ck_assert_int_eq(ms_result_from_json(j, strlen(j), &back, &err), TN_OK);
  ck_assert_int_eq(back.nrepeats, 3);
  ck_assert_double_eq(back.run_secs[2], 0.125);
  ck_assert_double_eq(back.median_secs, 0.25);
  ck_assert_double_eq(back.verify_error, 1e-7);
  ck_assert_int_eq(back.build.registers, 40);
  ck_assert_int_eq(back.build.shared_bytes, 4096);
  ck_assert_int_eq(back.build.stack_bytes, -1);
  ck_assert_str_eq(back.build.compiler, "NVRTC 13.0");
  ck_assert_ptr_null(strstr(j, "window_ns")); /* never ran: no window */
  free(j);
  ms_result_clear(&back);
  /* the window the candidate had its device for (monotonic nanoseconds) */
  r.window_start_ns = 987654321012345, r.window_end_ns = 987654421012345;
  j = ms_result_to_json(&r);
  ck_assert_int_eq(ms_result_from_json(j, strlen(j), &back, &err), TN_OK);
  ck_assert_int_eq(back.window_start_ns, 987654321012345);
  ck_assert_int_eq(back.window_end_ns, 987654421012345);
  free(j);
  ms_result_clear(&back);

  /* Errors are cut at MS_ERROR_MAX with "..." and survive the round trip. */
  char big[MS_ERROR_MAX * 2];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  ms_result_fail(&r, MS_WRONG_RESULT, "%s", big);
  ck_assert_int_eq((int)strlen(r.error), MS_ERROR_MAX - 1);
  ck_assert_str_eq(r.error + MS_ERROR_MAX - 4, "...");
  r.verify_error = INFINITY;
  j = ms_result_to_json(&r);
  ck_assert_int_eq(ms_result_from_json(j, strlen(j), &back, &err), TN_OK);
  ck_assert_int_eq(back.status, MS_WRONG_RESULT);
  ck_assert(isinf(back.verify_error));
  ck_assert_str_eq(back.error, r.error);
  free(j);
  ms_result_clear(&back);
  ms_result_clear(&r);
  ck_assert_int_eq(ms_result_from_json("{\"status\": \"meh\"}", 17, &back, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "unknown status \"meh\""));
}
END_TEST

START_TEST(t_ptxas_parse) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k1' for 'sm_75'\n"
      "ptxas info    : Function properties for k1\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 72 registers, used 1 barriers, 8192 bytes smem, 388 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'k0' for 'sm_75'\n"
      "ptxas info    : Function properties for k0\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, 356 bytes cmem[0]\n";
  ms_ptxas_kernel_t ks[4];
  ck_assert_int_eq(ms_ptxas_parse(log, ks, 4), 2);
  ck_assert_str_eq(ks[0].name, "k1");
  ck_assert_int_eq(ks[0].registers, 72);
  ck_assert_int_eq(ks[0].shared_bytes, 8192);
  ck_assert_int_eq(ks[0].stack_bytes, 16);
  ck_assert_int_eq(ks[0].spill_store_bytes, 8);
  ck_assert_int_eq(ks[0].spill_load_bytes, 12);
  ck_assert_str_eq(ks[1].name, "k0");
  ck_assert_int_eq(ks[1].registers, 8);
  ck_assert_int_eq(ks[1].shared_bytes, 0); /* omitted when 0 */
  ck_assert_int_eq(ms_ptxas_parse(log, ks, 1), 1);
  ck_assert_int_eq(ms_ptxas_parse("", ks, 4), 0);
}
END_TEST

/* ---- course schedules --------------------------------------------------------- */

static const struct {
  const char *trace, *workload, *sets;
} gpu_course[] = {
    {"vector_add_gpu", "vector_add", "N=2048"},
    {"window_sum_shared", "window_sum", "N=512"},
    {"matmul_local", "matmul", "M=128,N=128,K=128"},
    {"matmul_shared", "matmul", "M=128,N=128,K=128"},
    {"matmul_pipelined", "matmul", "M=128,N=128,K=128"},
};

/* Shared bytes of a course schedule: matmul_shared's A and B tiles are 2 KiB
 * each; the pipelined one keeps three of each. */
static int64_t course_shared_bytes(const char *trace) {
  if (strstr(trace, "pipelined")) return 3 * 4096;
  return strstr(trace, "matmul_shared") ? 4096 : -1;
}

/* Course schedule i lowered to lang, built and run for the target, verified. */
static void run_course(int i, cg_target_t lang, const char *target_name, ms_result_t *res) {
  ir_workload_t *w = tu_load_sets(gpu_course[i].workload, gpu_course[i].sets);
  cg_module_t *m = lower(w, gpu_course[i].trace, lang);
  tn_target_t t = target(target_name);
  ms_candidate_t *c = from_module(&t, m);
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  build_and_run(r, b, &c, res, 1);
  assert_measured_ok(res, gpu_course[i].trace);
  ck_assert(res->build.build_secs > 0);
  ms_runner_free(r);
  teardown(b, c, m, w);
}

/* The GPU-style schedules run on PoCL and verify. */
START_TEST(t_course_opencl) {
  ms_result_t res;
  run_course(_i, CG_TARGET_OPENCL, "opencl/pocl-cpu", &res);
  ck_assert_ptr_nonnull(strstr(res.build.compiler, "OpenCL"));
  if (strstr(gpu_course[_i].trace, "shared")) ck_assert_int_gt(res.build.shared_bytes, 0);
  if (course_shared_bytes(gpu_course[_i].trace) > 0)
    ck_assert_int_eq(res.build.shared_bytes, course_shared_bytes(gpu_course[_i].trace));
  ms_result_clear(&res);
}
END_TEST

/* Their CUDA source compiles with NVRTC for sm_75 and sm_90 (build only). */
START_TEST(t_course_nvrtc) {
  ir_workload_t *w = tu_load_sets(gpu_course[_i].workload, gpu_course[_i].sets);
  cg_module_t *m = lower(w, gpu_course[_i].trace, CG_TARGET_CUDA);
  const char *targets[] = {"nvidia/tesla-t4", "nvidia/h100"}, *arch[] = {"sm_75", "sm_90"};
  ms_candidate_t *cs[2];
  ms_result_t res[2];
  for (int i = 0; i < 2; i++) {
    tn_target_t t = target(targets[i]);
    cs[i] = from_module(&t, m);
  }
  ms_builder_t *b = builder(0, 0);
  build_and_run(NULL, b, cs, res, 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(res[i].status == MS_OK, "%s %s: %s", gpu_course[_i].trace, arch[i], res[i].error);
    ck_assert_str_eq(res[i].build.arch, arch[i]);
    ck_assert_ptr_nonnull(strstr(res[i].build.compiler, "NVRTC"));
    ck_assert_int_gt(res[i].build.registers, 0);
    ck_assert_int_ge(res[i].build.spill_bytes, 0);
    ck_assert(!res[i].ran);
    struct stat st;
    ck_assert_int_eq(stat(res[i].artifact, &st), 0);
    ck_assert_int_gt(st.st_size, 0);
    ck_assert_ptr_nonnull(strstr(res[i].artifact, ".cubin"));
    if (strstr(gpu_course[_i].trace, "shared")) ck_assert_int_gt(res[i].build.shared_bytes, 0);
    if (course_shared_bytes(gpu_course[_i].trace) > 0)
      ck_assert_int_eq(res[i].build.shared_bytes, course_shared_bytes(gpu_course[_i].trace));
    ms_candidate_free(cs[i]);
    ms_result_clear(&res[i]);
  }
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* The CPU schedule on the C backend, and a second workload on the same
 * runner (its worker reloads the new data). */
START_TEST(t_course_cpu) {
  ir_workload_t *w = tu_load_sets("matmul", "M=128,N=256,K=64");
  cg_module_t *m = lower(w, "matmul_cpu", CG_TARGET_C), *plain = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  ms_candidate_t *cs[2] = {from_module(&t, m), from_module(&t, plain)};
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  ms_result_t res[2];
  build_and_run(r, b, cs, res, 2);
  assert_measured_ok(&res[0], "matmul_cpu");
  assert_measured_ok(&res[1], "unscheduled matmul");
  ck_assert_str_eq(res[0].build.arch, "native");
  ck_assert_int_eq(res[0].build.registers, -1);
  /* 2*M*N*K flops per run. */
  ck_assert_double_eq_tol(res[0].gflops, 2.0 * 128 * 256 * 64 / res[0].median_secs * 1e-9, 1e-6);
  ck_assert_int_eq(ms_runner_worker_starts(r), 1);
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  cg_module_free(m);
  cg_module_free(plain);

  ir_workload_t *w2 = tu_load_sets("vector_add", "N=4096");
  tn_err_t err = {0};
  ck_assert_int_eq(ms_runner_set_workload(r, w2->func, 7, &err), TN_OK);
  m = lower(w2, NULL, CG_TARGET_C);
  cs[0] = from_module(&t, m);
  build_and_run(r, b, cs, res, 1);
  assert_measured_ok(&res[0], "vector_add");
  ck_assert_double_eq(res[0].verify_error, 0); /* one float add: exact */
  ck_assert_int_eq(ms_runner_worker_starts(r), 1);
  ms_result_clear(&res[0]);
  ms_candidate_free(cs[0]);
  cg_module_free(m);
  ms_runner_free(r);
  ms_builder_free(b);
  ir_workload_free(w);
  ir_workload_free(w2);
}
END_TEST

/* ---- planted bad candidates ----------------------------------------------------- */

#define ENTRY "int tuned_entry_default_function(void **args) {\n  const float *A = args[0], *B = args[1];\n  float *C = args[2];\n"

static const char *const bad_c[] = {
    /* out-of-bounds write: 16 GiB past the output */
    ENTRY "  (void)A, (void)B;\n  volatile float *p = C + (1L << 32);\n  *p = 1;\n  return 0;\n}\n",
    /* infinite loop */
    ENTRY "  (void)A, (void)B, (void)C;\n  volatile int spin = 1;\n  while (spin) {}\n  return 0;\n}\n",
    /* wrong result: zeros */
    ENTRY "  (void)A, (void)B;\n  for (int i = 0; i < 1024; i++) C[i] = 0;\n  return 0;\n}\n",
    /* partial write: only the first half */
    ENTRY "  for (int i = 0; i < 512; i++) C[i] = A[i] + B[i];\n  return 0;\n}\n",
    /* compile error */
    ENTRY "  return undefined_thing + A[0] + B[0] + C[0];\n}\n",
    /* writes into an input (mapped read-only) */
    ENTRY "  ((float *)A)[0] = 1;\n  for (int i = 0; i < 1024; i++) C[i] = A[i] + B[i];\n  return 0;\n}\n",
    /* abort() with a message */
    "#include <stdio.h>\n#include <stdlib.h>\n" ENTRY
    "  (void)A, (void)B, (void)C;\n  fprintf(stderr, \"planted: giving up\\n\");\n  abort();\n}\n",
};

/* A worker SIGKILLed from outside (the OOM killer) is not blamed on the
 * candidate at once: it runs again in a fresh worker.  One candidate is
 * killed on its first run only (a marker file) and measures fine; one is
 * killed every time and gets a run_error that says it happened twice. */
START_TEST(t_outside_kill) {
  char marker[] = "/tmp/tuned-outside-kill-XXXXXX";
  int mfd = mkstemp(marker);
  ck_assert_int_ge(mfd, 0);
  close(mfd);
  unlink(marker); /* the candidate creates it on its first run */
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  char once[2048];
  snprintf(once, sizeof once,
           "#include <fcntl.h>\n#include <signal.h>\n#include <unistd.h>\n" ENTRY
           "  if (access(\"%s\", F_OK) != 0) {\n    close(open(\"%s\", O_CREAT | O_WRONLY, 0600));\n"
           "    kill(getpid(), SIGKILL);\n  }\n  for (int i = 0; i < 1024; i++) C[i] = A[i] + B[i];\n  return 0;\n}\n",
           marker, marker);
  const char *always = "#include <signal.h>\n#include <unistd.h>\n" ENTRY
                       "  (void)A, (void)B, (void)C;\n  kill(getpid(), SIGKILL);\n  return 0;\n}\n";
  ms_candidate_t *cs[3] = {planted(&t, m, once), planted(&t, m, always), from_module(&t, m)};
  ms_result_t res[3];
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 5.0);
  build_and_run(r, b, cs, res, 3);
  assert_measured_ok(&res[0], "killed once from outside, then run again");
  ck_assert_int_eq(res[1].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[1].error, "killed by SIGKILL (Killed) twice"), "%s", res[1].error);
  assert_measured_ok(&res[2], "a good candidate after it");
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
  unlink(marker);
}
END_TEST

/* Each bad candidate is followed by a good one in the same batch: the bad
 * one gets its status, the good one measures normally. */
START_TEST(t_planted_cpu) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  enum { NBAD = (int)TN_ARRAY_LEN(bad_c), N = 2 * NBAD };
  ms_candidate_t *cs[N];
  ms_result_t res[N];
  for (int i = 0; i < NBAD; i++) {
    cs[2 * i] = planted(&t, m, bad_c[i]);
    cs[2 * i + 1] = from_module(&t, m);
  }
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 2.0);
  double t0 = tn_now();
  build_and_run(r, b, cs, res, N);
  double secs = tn_now() - t0;
  for (int i = 0; i < NBAD; i++) assert_measured_ok(&res[2 * i + 1], "good candidate after a bad one");

  ck_assert_int_eq(res[0].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[0].error, "SIGSEGV"), "%s", res[0].error);
  ck_assert_ptr_nonnull(strstr(res[0].error, "restarted"));
  ck_assert_int_eq(res[0].nrepeats, 0);

  ck_assert_int_eq(res[2].status, MS_TIMEOUT);
  ck_assert_msg(strstr(res[2].error, "timed out after 2.0 s"), "%s", res[2].error);

  ck_assert_int_eq(res[4].status, MS_WRONG_RESULT);
  ck_assert_msg(strstr(res[4].error, "output C differs"), "%s", res[4].error);
  ck_assert_ptr_null(strstr(res[4].error, "never written"));
  ck_assert_double_eq_tol(res[4].verify_error, 1.0, 1e-12); /* all zeros: relative error 1 */
  ck_assert_int_eq(res[4].nrepeats, 0);
  ck_assert_double_eq(res[4].median_secs, 0);

  ck_assert_int_eq(res[6].status, MS_WRONG_RESULT);
  ck_assert_msg(strstr(res[6].error, "512 of 1024 elements were never written"), "%s", res[6].error);
  ck_assert(isinf(res[6].verify_error));

  ck_assert_int_eq(res[8].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[8].error, "undefined_thing") && strstr(res[8].error, "cand.c"), "%s", res[8].error);
  ck_assert(!res[8].ran);

  ck_assert_int_eq(res[10].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[10].error, "SIGSEGV"), "%s", res[10].error);

  ck_assert_int_eq(res[12].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[12].error, "SIGABRT") && strstr(res[12].error, "planted: giving up"), "%s",
                res[12].error);

  /* Started once, restarted after the segfault, the timeout, the write into
   * an input and the abort. */
  ck_assert_int_eq(ms_runner_worker_starts(r), 5);
  ck_assert_msg(secs < 30, "batch took %.1f s", secs);
  for (int i = 0; i < N; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* The same on OpenCL: a kernel that writes zeros, then a good one. */
START_TEST(t_planted_opencl) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, "vector_add_gpu", CG_TARGET_OPENCL);
  tn_target_t t = target("opencl/pocl-cpu");
  char src[1024];
  snprintf(src, sizeof src,
           "__kernel void %s(__global float *A, __global float *B, __global float *C) {\n"
           "  C[get_global_id(0)] = 0.0f;\n}\n", m->kernels[0].name);
  ms_candidate_t *cs[3] = {planted(&t, m, src), planted(&t, m, "__kernel void broken( {"), from_module(&t, m)};
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  ms_result_t res[3];
  build_and_run(r, b, cs, res, 3);
  ck_assert_int_eq(res[0].status, MS_WRONG_RESULT);
  ck_assert_int_eq(res[1].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[1].error, "OpenCL build failed"), "%s", res[1].error);
  assert_measured_ok(&res[2], "good OpenCL candidate");
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* The same schedules' CUDA C runs on the host through the cuda-host harness
 * and verifies. */
START_TEST(t_course_cuda_host) {
  ms_result_t res;
  run_course(_i, CG_TARGET_CUDA, "cuda-host", &res);
  ck_assert_str_eq(res.build.arch, "host");
  ck_assert_ptr_nonnull(strstr(res.artifact, "cand.so"));
  ms_result_clear(&res);
}
END_TEST

/* A kernel for vector_add's launch (8 blocks of 128 threads): `body` after
 * i = the global index. */
static char *host_kernel(const cg_module_t *m, const char *body) {
  tn_buf_t o;
  tn_buf_init(&o);
  tn_buf_printf(&o,
                "extern \"C\" __global__ void %s(float *__restrict__ A, float *__restrict__ B, float *__restrict__ C) {\n"
                "  int i = (int)blockIdx.x * 128 + (int)threadIdx.x;\n%s\n}\n",
                m->kernels[0].name, body);
  return tn_buf_take(&o);
}

/* What the harness catches: a missing barrier (wrong result, the threads run
 * in shuffled order and shared memory starts poisoned), an index past a
 * shared array, a misaligned float4, a barrier only some threads reach, a
 * shuffle from a lane outside its mask, a cp.async waited for too weakly or
 * never; each followed by a good kernel. */
START_TEST(t_planted_cuda_host) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, "vector_add_gpu", CG_TARGET_CUDA);
  ck_assert_int_eq(m->kernels[0].block[0], 128);
  tn_target_t t = target("cuda-host");
  static const char *const bodies[] = {
      /* reversed through shared memory, without the barrier */
      "  __shared__ float a[128], b[128];\n  a[threadIdx.x] = A[i];\n  b[threadIdx.x] = B[i];\n"
      "  int j = 127 - (int)threadIdx.x;\n  C[(int)blockIdx.x * 128 + j] = a[j] + b[j];",
      "  __shared__ float a[128];\n  a[threadIdx.x + 1] = A[i];\n  __syncthreads();\n  C[i] = A[i] + B[i];",
      "  float4 v = *(const float4 *)(A + 1);\n  C[i] = A[i] + B[i] + v.x * 0.0f;",
      "  if (threadIdx.x < 64) __syncthreads();\n  C[i] = A[i] + B[i];",
      "  float v = __shfl_down_sync(0xffffu, A[i], 1, 32);\n  C[i] = A[i] + B[i] + 0.0f * v;",
      /* cp.async waited for too weakly (its group may be in flight at the barrier) */
      "  __shared__ float a[128];\n  tuned_cp_async4(a + threadIdx.x, A + i);\n  tuned_cp_commit();\n"
      "  tuned_cp_wait<1>();\n  __syncthreads();\n  int j = 127 - (int)threadIdx.x;\n  float x = a[j];\n"
      "  tuned_cp_wait<0>();\n  C[(int)blockIdx.x * 128 + j] = x + B[(int)blockIdx.x * 128 + j];",
      /* cp.async never waited for */
      "  __shared__ float a[128];\n  tuned_cp_async4(a + threadIdx.x, A + i);\n  tuned_cp_commit();\n"
      "  C[i] = A[i] + B[i];",
      /* and right: wait, barrier, read another thread's element */
      "  __shared__ float a[128];\n  tuned_cp_async4(a + threadIdx.x, A + i);\n  tuned_cp_commit();\n"
      "  tuned_cp_wait<0>();\n  __syncthreads();\n  int j = 127 - (int)threadIdx.x;\n"
      "  C[(int)blockIdx.x * 128 + j] = a[j] + B[(int)blockIdx.x * 128 + j];",
      /* the good one: the reversal with its barrier */
      "  __shared__ float a[128], b[128];\n  a[threadIdx.x] = A[i];\n  b[threadIdx.x] = B[i];\n  __syncthreads();\n"
      "  int j = 127 - (int)threadIdx.x;\n  C[(int)blockIdx.x * 128 + j] = a[j] + b[j];",
  };
  enum { N = (int)TN_ARRAY_LEN(bodies) };
  ms_candidate_t *cs[N];
  for (int k = 0; k < N; k++) {
    char *src = host_kernel(m, bodies[k]);
    cs[k] = planted(&t, m, src);
    free(src);
  }
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  ms_result_t res[N];
  build_and_run(r, b, cs, res, N);
  ck_assert_msg(res[0].status == MS_WRONG_RESULT, "%s: %s", ms_status_name(res[0].status), res[0].error);
  ck_assert_int_eq(res[1].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[1].error, "index 128 out of bounds"), "%s", res[1].error);
  ck_assert_int_eq(res[2].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[2].error, "misaligned address"), "%s", res[2].error);
  ck_assert_int_eq(res[3].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[3].error, "__syncthreads reached by some threads of the block after others exited"), "%s",
                res[3].error);
  ck_assert_int_eq(res[4].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[4].error, "__shfl_down_sync called by a lane outside its mask"), "%s", res[4].error);
  ck_assert_msg(res[5].status == MS_WRONG_RESULT, "%s: %s", ms_status_name(res[5].status), res[5].error);
  ck_assert_int_eq(res[6].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[6].error, "cp.async copies it never waited for"), "%s", res[6].error);
  assert_measured_ok(&res[7], "cp.async waited for");
  assert_measured_ok(&res[8], "the reversal with its barrier");
  for (int k = 0; k < N; k++) ms_result_clear(&res[k]), ms_candidate_free(cs[k]);
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* float16 matmul with the shared-memory schedule: NVRTC finds
 * <cuda_fp16.h> by itself (no include path from the caller), and the same
 * source runs and verifies on the host harness. */
START_TEST(t_fp16_cuda) {
  char path[] = "/tmp/tuned-fp16-XXXXXX";
  tu_write_temp(path, "param M = 128, N = 128, K = 128\ninput A: float16[M, K]\ninput B: float16[K, N]\n"
                      "output C: float16[M, N]\nC[i, j] = sum(k < K: A[i, k] * B[k, j])\n");
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_load(path, NULL, 0, &w, &err) == TN_OK, "%s", err.msg);
  unlink(path);
  cg_module_t *m = lower(w, "matmul_shared", CG_TARGET_CUDA);
  ck_assert_ptr_nonnull(strstr(m->source, "#include <cuda_fp16.h>"));
  tn_target_t host = target("cuda-host");
  ms_candidate_t *cs[2] = {from_module(&host, m), NULL};
  int n = 1;
#if WITH_CUDA
  tn_target_t h100 = target("nvidia/h100");
  cs[n++] = from_module(&h100, m);
#endif
  ms_builder_t *b = builder(0, 0);
  ms_result_t res[2];
  ck_assert_int_eq(ms_build_batch(b, cs, n, res, &err), TN_OK);
  if (n == 2) {
    ck_assert_msg(res[1].status == MS_OK, "NVRTC: %s", res[1].error);
    ck_assert_int_gt(res[1].build.registers, 0);
  }
  ms_runner_t *r = runner(w, 0);
  ck_assert_int_eq(ms_runner_run_batch(r, cs, res, 1, &err), TN_OK);
  ck_assert_msg(res[0].status == MS_OK, "float16 on cuda-host: %s", res[0].error); /* within float16's tolerance */
  ck_assert(res[0].verify_error > 0 && res[0].verify_error < 1e-2);
  for (int i = 0; i < n; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_runner_free(r);
  teardown(b, NULL, m, w);
}
END_TEST

static const char *const big_smem_cuda =
    "extern \"C\" __global__ void default_function_kernel0(float *A, float *B, float *C) {\n"
    "  __shared__ float tile[16384];\n" /* 64 KiB */
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  tile[threadIdx.x] = A[i];\n"
    "  __syncthreads();\n"
    "  C[i] = tile[(threadIdx.x * 7) % 16384] + B[i];\n"
    "}\n";

/* ptxas rejects 64 KiB of static shared memory for sm_75; our own limit
 * check rejects what the target forbids; the good candidate still builds. */
START_TEST(t_planted_cuda_build) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, "vector_add_gpu", CG_TARGET_CUDA);
  tn_target_t t4 = target("nvidia/tesla-t4"), small = t4, p100 = target("nvidia/tesla-p100");
  small.max_shared_memory_per_block = 4096;
  small.max_shared_memory_per_block_optin = 0;
  snprintf(small.name, sizeof small.name, "test/small-smem");
  tn_target_t fewregs = t4;
  fewregs.max_registers_per_block = 1024; /* 128 threads x >= 8 registers does not fit */
  snprintf(fewregs.name, sizeof fewregs.name, "test/few-registers");
  tn_target_t narrow = t4;
  narrow.max_threads_per_block = 64;
  snprintf(narrow.name, sizeof narrow.name, "test/narrow");
  char mid_smem[1024];
  snprintf(mid_smem, sizeof mid_smem,
           "extern \"C\" __global__ void default_function_kernel0(float *A, float *B, float *C) {\n"
           "  __shared__ float tile[2048];\n" /* 8 KiB */
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  tile[threadIdx.x] = A[i];\n  __syncthreads();\n  C[i] = tile[threadIdx.x ^ 1] + B[i];\n}\n");
  ms_candidate_t *cs[] = {planted(&t4, m, big_smem_cuda), from_module(&t4, m), planted(&small, m, mid_smem),
                          from_module(&fewregs, m), from_module(&narrow, m), from_module(&p100, m),
                          planted(&t4, m, "extern \"C\" __global__ void default_function_kernel0(float *A) {y = 1;}")};
  enum { N = (int)TN_ARRAY_LEN(cs) };
  ms_result_t res[N];
  ms_builder_t *b = builder(0, 0);
  build_and_run(NULL, b, cs, res, N);
  ck_assert_int_eq(res[0].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[0].error, "uses too much shared data"), "%s", res[0].error);
  ck_assert_int_eq(res[0].build.shared_bytes, 65536); /* the -v facts are kept */
  ck_assert_msg(res[1].status == MS_OK, "%s", res[1].error);
  ck_assert_int_eq(res[2].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[2].error, "uses 8192 bytes of shared memory; test/small-smem allows 4096"), "%s",
                res[2].error);
  ck_assert_int_eq(res[2].build.shared_bytes, 8192);
  ck_assert_int_eq(res[3].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[3].error, "x 128 threads") && strstr(res[3].error, "test/few-registers allows 1024"), "%s",
                res[3].error);
  ck_assert_int_eq(res[4].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[4].error, "has 128 threads per block (128 x 1 x 1); test/narrow allows 64"), "%s",
                res[4].error);
  ck_assert_int_eq(res[5].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[5].error, "sm_60 is not supported by NVRTC") && strstr(res[5].error, "supported: sm_75"),
                "%s", res[5].error);
  ck_assert_int_eq(res[6].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[6].error, "identifier \"y\" is undefined"), "%s", res[6].error);
  for (int i = 0; i < N; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* Tensor-core kernels are refused early for a GPU older than their
 * intrinsics (bf16 and tf32 need sm_80): the T4 (sm_75) takes float16's
 * (sm_70) and not bfloat16's, the A100 takes both (NVRTC builds them). */
START_TEST(t_wmma_arch) {
  tn_target_t t4 = target("nvidia/tesla-t4"), a100 = target("nvidia/a100");
  const char *wl[2] = {"matmul_f16", "matmul_bf16"}, *in[2] = {"wmma_f16_f32_16x16x16", "wmma_bf16_f32_16x16x16"};
  cg_module_t *m[2];
  ir_workload_t *w[2];
  for (int i = 0; i < 2; i++) {
    w[i] = tu_load_sets(wl[i], "M=64,N=64,K=32");
    sch_t *s = ws_tensorized(w[i]->func, "Acc", "C", in[i], 16);
    tn_err_t err = {0};
    ck_assert_msg(cg_lower(sch_func(s), CG_TARGET_CUDA, NULL, &m[i], &err) == 0, "%s", err.msg);
    sch_free(s);
  }
  ms_candidate_t *cs[] = {from_module(&t4, m[0]), from_module(&t4, m[1]), from_module(&a100, m[1])};
  enum { N = (int)TN_ARRAY_LEN(cs) };
  ms_result_t res[N];
  ms_builder_t *b = builder(0, 0);
  build_and_run(NULL, b, cs, res, N);
  ck_assert_msg(res[0].status == MS_OK, "%s", res[0].error);
  ck_assert_int_eq(res[1].status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res[1].error, "the kernels use tensor-core intrinsics that need sm_80 or newer; target "
                                     "nvidia/tesla-t4 is sm_75"),
                "%s", res[1].error);
  ck_assert_msg(res[2].status == MS_OK, "%s", res[2].error);
  for (int i = 0; i < N; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_builder_free(b);
  for (int i = 0; i < 2; i++) cg_module_free(m[i]), ir_workload_free(w[i]);
}
END_TEST

/* Without a usable CUDA driver the CUDA runner says so clearly; the worker
 * keeps serving CPU candidates. */
START_TEST(t_cuda_no_driver) {
  static const struct {
    const char *driver, *want1, *want2;
  } cases[] = {
      {"/nonexistent/libcuda.so.1", "no CUDA driver", "/nonexistent/libcuda.so.1"},
      {"/usr/local/cuda/lib64/stubs/libcuda.so", "error 34", "STUB"},
  };
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *mc = lower(w, "vector_add_gpu", CG_TARGET_CUDA), *mcpu = lower(w, NULL, CG_TARGET_C);
  tn_target_t h100 = target("nvidia/h100"), cpu = target("cpu");
  for (size_t k = 0; k < TN_ARRAY_LEN(cases); k++) {
    if (k == 1 && access(cases[k].driver, R_OK) != 0) continue; /* no stub on this machine */
    setenv("TUNED_CUDA_DRIVER", cases[k].driver, 1);
    ms_candidate_t *cs[2] = {from_module(&h100, mc), from_module(&cpu, mcpu)};
    ms_builder_t *b = builder(0, 0);
    ms_runner_t *r = runner(w, 0);
    ms_result_t res[2];
    build_and_run(r, b, cs, res, 2);
    ck_assert_int_eq(res[0].status, MS_RUN_ERROR);
    ck_assert_msg(strstr(res[0].error, cases[k].want1) && strstr(res[0].error, cases[k].want2), "%s", res[0].error);
    ck_assert_int_gt(res[0].build.registers, 0); /* it did build */
    assert_measured_ok(&res[1], "CPU candidate after the CUDA one");
    ck_assert_int_eq(ms_runner_worker_starts(r), 1);
    for (int i = 0; i < 2; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
    ms_runner_free(r);
    ms_builder_free(b);
  }
  cg_module_free(mc);
  cg_module_free(mcpu);
  ir_workload_free(w);
}
END_TEST

/* A backend this build lacks gives a clear build error, and the C backend
 * still works in the same batch. */
START_TEST(t_missing_backend) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *mc = lower(w, "vector_add_gpu", CG_TARGET_CUDA), *mo = lower(w, "vector_add_gpu", CG_TARGET_OPENCL);
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t4 = target("nvidia/tesla-t4"), ocl = target("opencl/pocl-cpu"), cpu = target("cpu");
  ms_candidate_t *cs[3] = {from_module(&t4, mc), from_module(&ocl, mo), from_module(&cpu, m)};
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  ms_result_t res[3];
  build_and_run(r, b, cs, res, 3);
  if (!WITH_CUDA) {
    ck_assert_int_eq(res[0].status, MS_BUILD_ERROR);
    ck_assert_ptr_nonnull(strstr(res[0].error, "this build has no CUDA support"));
  }
  if (!WITH_OPENCL) {
    ck_assert_int_eq(res[1].status, MS_BUILD_ERROR);
    ck_assert_ptr_nonnull(strstr(res[1].error, "this build has no OpenCL support"));
  }
  assert_measured_ok(&res[2], "C candidate");
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(mc);
  cg_module_free(mo);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* ---- builder behaviour ------------------------------------------------------------ */

/* vector add (64) as a C candidate and a one-thread builder with that timeout. */
static ms_builder_t *small_cpu_build(double timeout_s, ir_workload_t **w, cg_module_t **m, ms_candidate_t **c) {
  *w = tu_load_sets("vector_add", "N=64");
  *m = lower(*w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  *c = from_module(&t, *m);
  return builder(timeout_s, 1);
}

/* A compiler that hangs is killed at the build timeout, and the temp file
 * it made in $TMPDIR goes with the build's directory (a killed compiler
 * never removes its own: the soak counted one per kill); with $TUNED_CC
 * back to normal the same builder builds again. */
START_TEST(t_build_timeout_cc) {
  ir_workload_t *w;
  cg_module_t *m;
  ms_candidate_t *c;
  ms_builder_t *b = small_cpu_build(0.5, &w, &m, &c);
  ms_result_t res;
  char script[] = "/tmp/tuned-slow-cc-XXXXXX";
  int fd = mkstemp(script);
  ck_assert_int_ge(fd, 0);
  const char *text = "#!/bin/sh\n[ \"$1\" = --version ] && exit 1\ntouch \"${TMPDIR:-/tmp}/tuned-cc-temp-$$\"\n"
                     "exec sleep 30\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  fchmod(fd, 0755);
  close(fd);
  setenv("TUNED_CC", script, 1);
  double t0 = tn_now();
  build_and_run(NULL, b, &c, &res, 1);
  ck_assert(tn_now() - t0 < 5);
  ck_assert_int_eq(res.status, MS_TIMEOUT);
  ck_assert_msg(strstr(res.error, "timed out after 0.5 s"), "%s", res.error);
  unlink(script);
  char pattern[600];
  const char *tmp = getenv("TMPDIR");
  snprintf(pattern, sizeof pattern, "%s/tuned-cc-temp-*", tmp && *tmp ? tmp : "/tmp");
  glob_t g;
  int found = glob(pattern, 0, NULL, &g);
  ck_assert_msg(found == GLOB_NOMATCH, "the killed compiler's temp file is left: %s", g.gl_pathv[0]);
  if (found == 0) globfree(&g);
  setenv("TUNED_CC", "no-such-compiler-xyz", 1);
  build_and_run(NULL, b, &c, &res, 1);
  ck_assert_int_eq(res.status, MS_BUILD_ERROR);
  ck_assert_msg(strstr(res.error, "no-such-compiler-xyz"), "%s", res.error);
  unsetenv("TUNED_CC");
  build_and_run(NULL, b, &c, &res, 1);
  ck_assert_msg(res.status == MS_OK, "%s", res.error);
  ms_result_clear(&res);
  teardown(b, c, m, w);
}
END_TEST

/* Whether a program is in $PATH. */
static bool installed(const char *prog) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
  return system(cmd) == 0;
}

/* The target's "cc" picks the compiler, for real: the CPU matmul schedule
 * built by gcc and by clang (each where installed; clang's OpenMP is
 * LLVM's libomp), run in one worker in turn — gcc, clang, gcc — and each
 * verified and timed; the build record names the compiler.  cuda-host
 * builds with the family's C++ compiler. */
START_TEST(t_compilers) {
  static const char *const fams[] = {"gcc", "clang", "gcc"}, *const words[] = {"gcc", "clang", "gcc"};
  ir_workload_t *w = tu_load_sets("matmul", "M=64,N=96,K=32");
  cg_module_t *m = lower(w, "matmul_cpu", CG_TARGET_C);
  ms_builder_t *b = builder(0, 1);
  ms_runner_t *r = runner(w, 0);
  int built = 0;
  for (int i = 0; i < 3; i++) {
    if (!installed(fams[i])) {
      fprintf(stderr, "t_compilers: %s is not installed; its build is skipped\n", fams[i]);
      continue;
    }
    tn_target_t t = target("cpu");
    tn_err_t err = {0};
    ck_assert_int_eq(tn_target_set_cc(&t, fams[i], &err), TN_OK);
    ck_assert_msg(ms_compiler_check(&t, &err) == TN_OK, "%s", err.msg);
    ms_candidate_t *c = from_module(&t, m);
    ms_result_t res;
    build_and_run(r, b, &c, &res, 1);
    assert_measured_ok(&res, fams[i]);
    ck_assert_msg(strstr(res.build.compiler, words[i]), "%s built by %s", fams[i], res.build.compiler);
    ms_result_clear(&res);
    ms_candidate_free(c);
    built++;
  }
  ck_assert_int_gt(built, 0);
  ck_assert_int_eq(ms_runner_worker_starts(r), 1); /* one worker ran both compilers' kernels */
  ms_runner_free(r);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
  if (installed("clang")) { /* a chain of 300 blocks inlined: parentheses 600 deep (clang's default stops at 256) */
    tn_buf_t text;
    tn_buf_init(&text);
    tn_buf_put(&text, "param N = 8\ninput A: float32[N]\noutput B: float32[N]\n");
    for (int i = 1; i < 300; i++) tn_buf_printf(&text, "temp T%d: float32[N]\n", i);
    for (int i = 1; i < 300; i++) tn_buf_printf(&text, "T%d[i] = %s%d[i] * 0.5 + 1.0\n", i, i == 1 ? "A" : "T", i - 1);
    tn_buf_put(&text, "B[i] = T299[i] + 1.0\n");
    char *src = tn_buf_take(&text), *a0 = strstr(src, "A0[i]");
    memmove(a0 + 1, a0 + 2, strlen(a0 + 2) + 1); /* "A0" names the input A */
    ir_workload_t *cw = tu_parse(src);
    free(src);
    sch_t *sc = sch_create(cw->func, 1);
    tn_err_t err = {0};
    for (int i = 299; i >= 1; i--) {
      char name[16];
      sch_rv_t rv;
      snprintf(name, sizeof name, "T%d", i);
      ck_assert_int_eq(sch_get_block(sc, name, &rv, &err), TN_OK);
      ck_assert_msg(sch_compute_inline(sc, rv, &err) == TN_OK, "%s", err.msg);
    }
    cg_module_t *cm = NULL;
    ck_assert_msg(cg_lower(sch_func(sc), CG_TARGET_C, NULL, &cm, &err) == TN_OK, "%s", err.msg);
    tn_target_t t = target("cpu");
    ck_assert_int_eq(tn_target_set_cc(&t, "clang", &err), TN_OK);
    ms_candidate_t *c = from_module(&t, cm);
    ms_builder_t *cb = builder(0, 1);
    ms_runner_t *cr = runner(cw, 0);
    ms_result_t res;
    build_and_run(cr, cb, &c, &res, 1);
    assert_measured_ok(&res, "inlined chain, clang");
    ms_result_clear(&res);
    ms_runner_free(cr);
    sch_free(sc);
    teardown(cb, c, cm, cw);
  }
  if (installed("clang++")) {
    ir_workload_t *v = tu_load_sets("vector_add", "N=256");
    cg_module_t *g = lower(v, "vector_add_gpu", CG_TARGET_CUDA);
    tn_target_t t = target("cuda-host");
    tn_err_t err = {0};
    ck_assert_int_eq(tn_target_set_cc(&t, "clang", &err), TN_OK);
    ms_candidate_t *c = from_module(&t, g);
    ms_builder_t *bb = builder(0, 1);
    ms_runner_t *rr = runner(v, 0);
    ms_result_t res;
    build_and_run(rr, bb, &c, &res, 1);
    ck_assert_msg(res.status == MS_OK, "%s", res.error);
    ck_assert_msg(strstr(res.build.compiler, "clang"), "%s", res.build.compiler);
    ms_result_clear(&res);
    teardown(bb, c, g, v);
    ms_runner_free(rr);
  } else {
    fprintf(stderr, "t_compilers: clang++ is not installed; the cuda-host build with it is skipped\n");
  }
}
END_TEST

/* A compiler that is not installed is one clear error before any build:
 * naming the compiler, the target's "cc" and the ways to choose another;
 * $TUNED_CC names any command and is checked the same way. */
START_TEST(t_compiler_missing) {
  tn_target_t t = target("cpu");
  tn_err_t err = {0};
  ck_assert_int_eq(tn_target_set_cc(&t, "clang", &err), TN_OK);
  char *path = getenv("PATH") ? tn_xstrdup(getenv("PATH")) : NULL;
  setenv("PATH", "/nonexistent", 1);
  ck_assert_int_eq(ms_compiler_check(&t, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "target cpu builds with clang (\"cc\": \"clang\"), which is not installed (not in $PATH); "
                            "install it (scripts/install-deps), or choose another compiler with --cc gcc|clang|auto "
                            "or $TUNED_CC");
  tn_target_t h = target("cuda-host");
  ck_assert_int_eq(ms_compiler_check(&h, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "target cuda-host builds with ") && strstr(err.msg, "$TUNED_CXX"), "%s", err.msg);
  if (path) setenv("PATH", path, 1);
  else unsetenv("PATH");
  free(path);
  setenv("TUNED_CC", "no-such-compiler-xyz -O1", 1);
  ck_assert_int_eq(ms_compiler_check(&t, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "target cpu builds with $TUNED_CC = \"no-such-compiler-xyz -O1\", and no-such-compiler-xyz "
                            "is not an executable file or in $PATH");
  /* measuring says so before building anything */
  ir_workload_t *w = tu_load_sets("vector_add", "N=64");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  ms_result_t res;
  ck_assert_int_eq(ms_measure(w->func, &t, &m, 1, NULL, &res, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "no-such-compiler-xyz"), "%s", err.msg);
  ms_result_clear(&res);
  setenv("TUNED_CC", "sh", 1); /* any command found in $PATH passes the check */
  ck_assert_int_eq(ms_compiler_check(&t, &err), TN_OK);
  unsetenv("TUNED_CC");
  tn_target_t g = target("nvidia/h100"); /* no host compiler: nothing to check */
  ck_assert_int_eq(ms_compiler_check(&g, &err), TN_OK);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* While paused (the search times a CPU candidate), a cc build stands still:
 * it does not finish, and the paused time does not count against its
 * timeout. */
START_TEST(t_build_pause) {
  ir_workload_t *w;
  cg_module_t *m;
  ms_candidate_t *c;
  ms_builder_t *b = small_cpu_build(2.0, &w, &m, &c);
  char script[] = "/tmp/tuned-paused-cc-XXXXXX";
  tu_write_temp(script, "#!/bin/sh\nsleep 0.2\nexec cc \"$@\"\n");
  chmod(script, 0755);
  setenv("TUNED_CC", script, 1);
  ms_result_t res;
  double t0 = tn_now();
  ms_commands_pause(true);
  int64_t tk = ms_build_submit(b, c, &res);
  ck_assert_int_ge(tk, 0);
  usleep(2500 * 1000); /* longer than the timeout */
  ck_assert(!ms_build_done(b, tk));
  ms_commands_pause(false);
  ms_build_wait(b, tk);
  unsetenv("TUNED_CC");
  ck_assert(tn_now() - t0 > 2.5);
  ck_assert_msg(res.status == MS_OK, "%s", res.error);
  ck_assert_msg(res.build.build_secs < 2.0, "build_secs %.3f counts the pause", res.build.build_secs);
  unlink(script);
  ms_result_clear(&res);
  teardown(b, c, m, w);
}
END_TEST

/* A cc killed by a SIGKILL the builder did not send (the OOM killer, a
 * user) is not the candidate's fault by itself: the build runs once more,
 * and only a second such death is a BUILD_ERROR naming the signal.  The
 * compiler here is a script that SIGKILLs itself on its first `kills`
 * compiles. */
START_TEST(t_build_cc_killed) {
  for (int kills = 1; kills <= 2; kills++) {
    ir_workload_t *w;
    cg_module_t *m;
    ms_candidate_t *c;
    ms_builder_t *b = small_cpu_build(30.0, &w, &m, &c);
    char script[] = "/tmp/tuned-killed-cc-XXXXXX", counter[64], text[512];
    tu_write_temp(script, "");
    snprintf(counter, sizeof counter, "%s.n", script);
    snprintf(text, sizeof text,
             "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) ;; *) exec cc \"$@\";; esac\n"
             "n=$(cat %s 2>/dev/null || echo 0)\necho $((n + 1)) > %s\n"
             "[ \"$n\" -lt %d ] && kill -KILL $$\nexec cc \"$@\"\n",
             counter, counter, kills);
    FILE *f = fopen(script, "w");
    fputs(text, f);
    fclose(f);
    chmod(script, 0755);
    setenv("TUNED_CC", script, 1);
    ms_result_t res;
    ms_build_wait(b, ms_build_submit(b, c, &res));
    unsetenv("TUNED_CC");
    char *n = NULL;
    size_t len;
    tn_err_t err = {0};
    ck_assert_int_eq(tn_read_file(counter, 64, &n, &len, &err), 0);
    ck_assert_int_eq(atoi(n), 2); /* compiled twice either way */
    free(n);
    if (kills == 1) {
      ck_assert_msg(res.status == MS_OK, "%s", res.error);
    } else {
      ck_assert_int_eq(res.status, MS_BUILD_ERROR);
      ck_assert_msg(strstr(res.error, "SIGKILL"), "%s", res.error);
    }
    unlink(script);
    unlink(counter);
    ms_result_clear(&res);
    teardown(b, c, m, w);
  }
}
END_TEST

/* CUDA that keeps NVRTC busy for minutes (113 s on a 2-core VM): 4096
 * distinct instantiations, all inlined into one kernel. */
static const char *slow_cuda =
    "template <int N, int M> struct T {\n"
    "  static __device__ float f(float x) { return T<N - 1, 2 * M>::f(x) * 1.01f + T<N - 1, 2 * M + 1>::f(x + 1); }\n"
    "};\n"
    "template <int M> struct T<0, M> {\n"
    "  static __device__ float f(float x) { return x * (float)M; }\n"
    "};\n"
    "extern \"C\" __global__ void slow(float *o) { o[threadIdx.x] = T<12, 0>::f(o[threadIdx.x]); }\n";

/* The pid in "... (pid 1234) ...", or 0. */
static pid_t pid_in(const char *msg) {
  const char *p = strstr(msg, "(pid ");
  return p ? (pid_t)atoi(p + 5) : 0;
}

/* Waits up to 30 s for a child of this process whose command line has
 * "--build" (the builder's build process); 0 when none appears. */
static pid_t build_process(void) {
  for (int tries = 0; tries < 3000; tries++) {
    pid_t pids[16];
    tu_cmdline_t cmds[16];
    int n = tu_children(getpid(), pids, cmds, 16);
    for (int i = 0; i < n; i++)
      if (strstr(cmds[i], " --build ")) return pids[i];
    usleep(10000);
  }
  return 0;
}

/* Hopper candidates (cg_module_t's sm90a): built for sm_90a; refused on a
 * target that is not Hopper before the build; after it, refused when the
 * SASS (nvdisasm, when installed) has no HGMMA.  The same kernel without
 * the flag builds for the target's sm_90. */
START_TEST(t_build_hopper) {
  tn_buf_t src;
  tn_buf_init(&src);
  tn_err_t err = {0};
  static const int ns[] = {64};
  ck_assert_int_eq(cg_hopper_helpers(&src, ns, 1, &err), TN_OK);
  tn_buf_put(&src, "extern \"C\" __global__ void __launch_bounds__(128) hopper_mma(float *out) {\n"
                   "  __shared__ __align__(1024) unsigned short s[2 * 64 * 64];\n"
                   "  tuned_wgmma_acc<64> acc;\n  tuned_wgmma_fence();\n"
                   "  tuned_wgmma_f16(acc, tuned_wgmma_desc(s, 128, 1024, TUNED_SWIZZLE_128B),\n"
                   "                  tuned_wgmma_desc(s + 4096, 128, 1024, TUNED_SWIZZLE_128B), 0);\n"
                   "  tuned_wgmma_commit();\n  tuned_wgmma_wait<0>();\n"
                   "  for (int i = 0; i < 32; i++) out[threadIdx.x * 32 + i] = acc[i];\n}\n");
  static const char plain_src[] = "extern \"C\" __global__ void hopper_mma(float *out) { out[threadIdx.x] = 1.0f; }\n";
  cg_kernel_t k = {.name = "hopper_mma", .grid = {1, 1, 1}, .block = {128, 1, 1}};
  tn_target_t h100 = target("nvidia/h100"), a100 = target("nvidia/a100");
  const struct {
    const tn_target_t *t;
    const char *src;
    bool sm90a;
    const char *want; /* NULL: built */
  } cases[] = {
      {&h100, tn_buf_str(&src), true, NULL},
      {&h100, plain_src, true, "SASS has no HGMMA"},
      {&h100, plain_src, false, NULL},
      {&a100, tn_buf_str(&src), true, "warpgroup MMA (sm_90a); target nvidia/a100 is cuda sm_80"},
  };
  /* where the builder looks for nvdisasm (build_cuda.c) */
  bool nvdisasm = system("command -v nvdisasm >/dev/null 2>&1 || "
                         "ls \"$HOME\"/.local/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm >/dev/null 2>&1") == 0;
  ms_builder_t *b = builder(60, 1);
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    ms_candidate_t *c = NULL;
    ck_assert_int_eq(ms_candidate_new(cases[i].t, cases[i].src, &k, 1, NULL, 0, &c, &err), TN_OK);
    c->sm90a = cases[i].sm90a;
    ms_result_t res;
    ms_build_wait(b, ms_build_submit(b, c, &res));
    if (i == 1 && !nvdisasm) {
      ck_assert_msg(res.status == MS_OK, "%s", res.error);
      printf("t_build_hopper: nvdisasm not installed, SASS not checked\n");
    } else if (cases[i].want) {
      ck_assert_msg(res.status == MS_BUILD_ERROR && strstr(res.error, cases[i].want), "case %zu: %s: %s", i,
                    ms_status_name(res.status), res.error);
    } else {
      ck_assert_msg(res.status == MS_OK, "case %zu: %s", i, res.error);
      ck_assert_str_eq(res.build.arch, cases[i].sm90a ? "sm_90a" : "sm_90");
      ck_assert_int_eq(res.build.spill_bytes, 0);
    }
    ms_result_clear(&res);
    ms_candidate_free(c);
  }
  /* a tensor map must name one of the parameters (the launchers pass its buffer's address) */
  cg_param_t out = {.name = "out", .dtype = IR_FLOAT32, .ndim = 1, .shape = {4096}, .role = IR_BUF_OUTPUT};
  cg_kernel_t km = k;
  km.nmaps = 1;
  km.maps[0] = (cg_tensor_map_t){"tuned_map_a", 1, {64, 64}, 128, {64, 64}, 128};
  ms_candidate_t *c = NULL;
  ck_assert_int_eq(ms_candidate_new(&h100, plain_src, &km, 1, &out, 1, &c, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "tensor map 0 needs a name and one of the 1 parameters"), "%s", err.msg);
  km.maps[0].param = 0;
  ck_assert_int_eq(ms_candidate_new(&h100, plain_src, &km, 1, &out, 1, &c, &err), TN_OK);
  ck_assert_int_eq(c->kernels[0].nmaps, 1);
  ck_assert_str_eq(c->kernels[0].maps[0].name, "tuned_map_a");
  ms_candidate_free(c);
  ms_builder_free(b);
  tn_buf_free(&src);
}
END_TEST

/* OpenCL C that keeps PoCL's compiler busy (10 s on a 2-core VM): 16384
 * statements in one kernel.  The nonce keeps PoCL's cache from answering a
 * second run at once. */
static char *slow_opencl(void) {
  static const char *text =
      "#define A(x) x x x x\n#define B(x) A(A(x))\n#define C(x) B(B(x))\n"
      "__kernel void slow(__global float *o) {\n"
      "  float s = o[get_global_id(0)] + %d.0f;\n"
      "  C(A(B(s = s * 1.0001f + (float)get_local_id(0); if (s > 3.0f) s = s - o[(int)s & 7];)))\n"
      "  o[get_global_id(0)] = s;\n}\n";
  char *src = malloc(strlen(text) + 64);
  sprintf(src, text, (int)(tn_now() * 1000) % 1000000 + getpid());
  return src;
}

/* The two compilers that run in a build process: what a test of one needs. */
typedef struct slow_case {
  const char *target, *schedule, *compiler, *artifact;
  cg_target_t lang;
} slow_case_t;
static const slow_case_t slow_cases[] = {
    {"nvidia/h100", "matmul_shared", "NVRTC", ".cubin", CG_TARGET_CUDA},
    {"opencl/pocl-cpu", "matmul_shared", "OpenCL", ".cl", CG_TARGET_OPENCL},
};

static bool slow_case_usable(int i) { return i == 0 ? WITH_CUDA : WITH_OPENCL; }

/* A slow candidate (CUDA or OpenCL) with m's kernels. */
static ms_candidate_t *slow_candidate(const slow_case_t *sc, const tn_target_t *t, const cg_module_t *m) {
  if (sc->lang == CG_TARGET_CUDA) return planted(t, m, slow_cuda);
  char *src = slow_opencl();
  ms_candidate_t *c = planted(t, m, src);
  free(src);
  return c;
}

/* A CUDA or OpenCL build past its timeout is killed (its build process,
 * with SIGKILL): TIMEOUT within the timeout and a little, the process gone,
 * and the next build in the same pool succeeds.  (An NVRTC or
 * clBuildProgram call in a thread could only be abandoned: it went on
 * compiling, and allocating, in the caller.) */
START_TEST(t_build_timeout_in_proc) {
  const slow_case_t *sc = &slow_cases[_i];
  if (!slow_case_usable(_i)) return;
  ir_workload_t *w = tu_load_sets("matmul", "M=128,N=128,K=128");
  cg_module_t *m = lower(w, sc->schedule, sc->lang);
  tn_target_t t = target(sc->target);
  ms_candidate_t *slow = slow_candidate(sc, &t, m), *good = from_module(&t, m);
  ms_builder_t *b = builder(1.5, 1);
  ms_result_t res[3];
  ms_candidate_t *order[3] = {good, slow, good}; /* the first starts the build process */
  char want[128];
  snprintf(want, sizeof want, "%s was still compiling after 1.5 s: its build process (pid ",
           sc->lang == CG_TARGET_CUDA ? "NVRTC" : "the OpenCL compiler");
  for (int i = 0; i < 3; i++) {
    double t0 = tn_now();
    int64_t tk = ms_build_submit(b, order[i], &res[i]);
    ck_assert_int_ge(tk, 0);
    ms_build_wait(b, tk);
    double secs = tn_now() - t0;
    if (order[i] == slow) {
      ck_assert_int_eq(res[i].status, MS_TIMEOUT);
      ck_assert_msg(strstr(res[i].error, want), "%s", res[i].error);
      ck_assert_msg(strstr(res[i].error, ") was killed"), "%s", res[i].error);
      ck_assert_msg(secs >= 1.5 && secs < 1.5 + 1.0, "timed out after %.2f s", secs); /* slack for a busy machine */
      pid_t pid = pid_in(res[i].error);
      ck_assert_int_gt(pid, 0);
      ck_assert_int_eq(kill(pid, 0), -1); /* killed and reaped */
      ck_assert_int_eq(errno, ESRCH);
    } else {
      ck_assert_msg(res[i].status == MS_OK, "build %d: %s", i, res[i].error);
      ck_assert_msg(strstr(res[i].artifact, sc->artifact), "%s", res[i].artifact);
      if (sc->lang == CG_TARGET_CUDA) ck_assert_int_gt(res[i].build.registers, 0);
      else ck_assert_msg(strstr(res[i].build.compiler, "OpenCL"), "%s", res[i].build.compiler);
    }
  }
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]);
  ms_candidate_free(slow);
  teardown(b, good, m, w);
}
END_TEST

/* A --build child of this process other than `not` (0: any); 0 when none
 * appears within 30 s. */
static pid_t build_process_other_than(pid_t not) {
  for (int i = 0; i < 100; i++) {
    pid_t pid = build_process();
    if (pid != not) return pid;
    usleep(50 * 1000);
  }
  return 0;
}

/* The build process killed from outside in the middle of a build (as the
 * OOM killer would): not the candidate's fault by itself, so the build
 * runs again in a fresh process; killed there too, the build is a
 * BUILD_ERROR naming the signal, the caller carries on, and the next build
 * gets a new process and succeeds. */
START_TEST(t_build_process_killed) {
  const slow_case_t *sc = &slow_cases[_i];
  if (!slow_case_usable(_i)) return;
  ir_workload_t *w = tu_load_sets("matmul", "M=128,N=128,K=128");
  cg_module_t *m = lower(w, sc->schedule, sc->lang);
  tn_target_t t = target(sc->target);
  ms_candidate_t *slow = slow_candidate(sc, &t, m), *good = from_module(&t, m);
  ms_builder_t *b = builder(120, 1);
  ms_result_t res[2];
  int64_t tk = ms_build_submit(b, slow, &res[0]);
  ck_assert_int_ge(tk, 0);
  pid_t pid = 0;
  for (int kill_no = 0; kill_no < 2; kill_no++) {
    pid = build_process_other_than(pid);
    ck_assert_msg(pid > 0, "no build process (a child with --build) appeared for kill %d", kill_no + 1);
    usleep(300 * 1000); /* well inside the compiler by now */
    ck_assert_msg(!ms_build_done(b, tk), "the build ended before kill %d", kill_no + 1);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
  }
  double t0 = tn_now();
  ms_build_wait(b, tk);
  ck_assert_msg(tn_now() - t0 < 5.0, "the death was noticed after %.1f s", tn_now() - t0);
  ck_assert_int_eq(res[0].status, MS_BUILD_ERROR);
  char want[128];
  snprintf(want, sizeof want, "the %s build process (pid %d) was killed by SIGKILL (Killed) during the build",
           sc->compiler, (int)pid);
  ck_assert_msg(strstr(res[0].error, want), "%s", res[0].error);
  tk = ms_build_submit(b, good, &res[1]);
  ms_build_wait(b, tk);
  ck_assert_msg(res[1].status == MS_OK, "%s", res[1].error);
  ck_assert_msg(strstr(res[1].artifact, sc->artifact), "%s", res[1].artifact);
  pid_t next = build_process();
  ck_assert_int_gt(next, 0);
  ck_assert_int_ne(next, pid);
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]);
  ms_candidate_free(slow);
  teardown(b, good, m, w);
  ck_assert_int_eq(kill(next, 0), -1); /* the pool stops its process when freed */
}
END_TEST

/* Whether pid is gone or a zombie (dead, not yet reaped by its new parent). */
static bool dead(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')');
  return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

/* A caller SIGKILLed in the middle of a compile leaves no compile behind:
 * its build process dies with it (before, an orphaned NVRTC compile ran on
 * for minutes). */
START_TEST(t_nvrtc_proc_orphan) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t caller = fork(); /* no threads here yet: a plain fork is safe */
  ck_assert_int_ge(caller, 0);
  if (caller == 0) {
    close(fds[0]);
    ms_build_proc_t *p = NULL;
    ms_cuda_output_t o;
    tn_err_t err = {0};
    if (ms_build_proc_new(NULL, NULL, &p, &err) < 0 ||
        ms_nvrtc_compile(p, "extern \"C\" __global__ void k() {}\n", "sm_90", 60, &o, &err) < 0)
      _exit(1);
    pid_t pid = ms_build_proc_pid(p);
    if (write(fds[1], &pid, sizeof pid) != sizeof pid) _exit(1);
    ms_nvrtc_compile(p, slow_cuda, "sm_90", 600, &o, &err); /* killed in here */
    _exit(0);
  }
  close(fds[1]);
  pid_t pid = 0;
  ck_assert_int_eq(read(fds[0], &pid, sizeof pid), sizeof pid);
  close(fds[0]);
  ck_assert_int_gt(pid, 0);
  usleep(300 * 1000); /* the slow compile is under way */
  ck_assert(!dead(pid));
  kill(caller, SIGKILL);
  waitpid(caller, NULL, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !(gone = dead(pid)); i++) usleep(10000);
  if (!gone) kill(pid, SIGKILL); /* do not leave it running on failure */
  ck_assert_msg(gone, "the build process %d still runs 5 s after its caller was killed", (int)pid);
}
END_TEST

/* The build process on its own: it serves one compile after another, one
 * killed while idle is replaced without failing the next compile, and a
 * compile error comes back as it would from NVRTC in this process. */
START_TEST(t_nvrtc_proc) {
  ms_build_proc_t *p = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_build_proc_new(NULL, NULL, &p, &err) == TN_OK, "%s", err.msg);
  ck_assert_int_eq(ms_build_proc_pid(p), 0); /* started at the first compile */
  const char *ok = "extern \"C\" __global__ void k(float *o) { o[threadIdx.x] = 2.0f; }\n";
  ms_cuda_output_t o, here;
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(ms_nvrtc_compile(p, ok, "sm_90", 30, &o, &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(strstr(o.ptx, ".entry k("), "%.200s", o.ptx);
    ck_assert_int_gt(o.cubin_size, 0);
    ck_assert_msg(strstr(o.log, "Compiling entry function 'k' for 'sm_90'"), "%s", o.log);
    ck_assert_int_eq(ms_cuda_compile(ok, "sm_90", &here, &err), TN_OK); /* the same bytes as in this process */
    ck_assert_str_eq(o.ptx, here.ptx);
    ck_assert_str_eq(o.version, here.version);
    ck_assert_uint_eq(o.cubin_size, here.cubin_size);
    ck_assert_int_eq(memcmp(o.cubin, here.cubin, o.cubin_size), 0);
    ms_cuda_output_free(&o);
    ms_cuda_output_free(&here);
  }
  ck_assert_int_eq(ms_build_proc_starts(p), 1);
  pid_t pid = ms_build_proc_pid(p);
  ck_assert_int_gt(pid, 0);
  kill(pid, SIGKILL);
  usleep(100 * 1000);
  ck_assert_msg(ms_nvrtc_compile(p, ok, "sm_90", 30, &o, &err) == TN_OK, "%s", err.msg);
  ms_cuda_output_free(&o);
  ck_assert_int_eq(ms_build_proc_starts(p), 2);
  ck_assert_int_ne(ms_build_proc_pid(p), pid);
  ck_assert_int_eq(ms_nvrtc_compile(p, "extern \"C\" __global__ void k() { undeclared(); }\n", "sm_90", 30, &o, &err),
                   TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "identifier \"undeclared\" is undefined"), "%s", err.msg);
  ck_assert_ptr_null(o.cubin);
  ms_cuda_output_free(&o);
  ck_assert_int_eq(ms_nvrtc_compile(p, ok, "sm_1", 30, &o, &err), TN_EUNSUPPORTED); /* checked in the process */
  ck_assert_msg(strstr(err.msg, "sm_1 is not supported by NVRTC "), "%s", err.msg);
  ms_cuda_output_free(&o);
  ck_assert_int_eq(ms_build_proc_starts(p), 2);
  pid = ms_build_proc_pid(p);
  ms_build_proc_free(p);
  ck_assert_int_eq(kill(pid, 0), -1); /* asked to exit, and reaped */
}
END_TEST

/* Submit / done / wait; the builder sets POCL_CACHE_DIR. */
START_TEST(t_build_async) {
  unsetenv("POCL_CACHE_DIR");
  ir_workload_t *w = tu_load_sets("vector_add", "N=2048");
  tn_target_t cpu = target("cpu"), ocl = target("opencl/pocl-cpu");
  cg_module_t *mc = lower(w, NULL, CG_TARGET_C), *mo = lower(w, "vector_add_gpu", CG_TARGET_OPENCL);
  ms_candidate_t *cs[4];
  for (int i = 0; i < 4; i++) /* C and OpenCL alternately; all C without OpenCL */
    cs[i] = i % 2 && WITH_OPENCL ? from_module(&ocl, mo) : from_module(&cpu, mc);
  ms_builder_t *b = builder(0, 2);
  ms_result_t res[4];
  int64_t tk[4];
  for (int i = 0; i < 4; i++) tk[i] = ms_build_submit(b, cs[i], &res[i]);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(tk[i], i);
  while (!ms_build_done(b, tk[3])) usleep(1000);
  for (int i = 0; i < 4; i++) {
    ms_build_wait(b, tk[i]);
    ck_assert_msg(res[i].status == MS_OK, "%d: %s", i, res[i].error);
    ck_assert_ptr_nonnull(strstr(res[i].artifact, i % 2 && WITH_OPENCL ? "cand.cl" : "cand.so"));
    ck_assert_ptr_nonnull(strstr(res[i].artifact, ms_builder_run_dir(b)));
  }
  ck_assert(ms_build_done(b, tk[0])); /* waited tickets count as done */
  ck_assert_ptr_nonnull(getenv("POCL_CACHE_DIR"));
  for (int i = 0; i < 4; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ms_builder_free(b);
  cg_module_free(mc);
  cg_module_free(mo);
  ir_workload_free(w);
}
END_TEST

/* OpenCL builds of one process after its first build pool is gone: PoCL
 * reads POCL_CACHE_DIR once per process, and it pointed into the first
 * pool's run directory, removed with the pool, so every later OpenCL build
 * failed (tunectl bench --target opencl: the second workload was all build
 * errors).  The cache now lives as long as the process needs it. */
START_TEST(t_build_opencl_after_pool) {
  if (!WITH_OPENCL) return;
  unsetenv("POCL_CACHE_DIR");
  ir_workload_t *w = tu_load_sets("vector_add", "N=2048");
  tn_target_t ocl = target("opencl/pocl-cpu");
  cg_module_t *mo = lower(w, "vector_add_gpu", CG_TARGET_OPENCL);
  ms_candidate_t *c = from_module(&ocl, mo);
  char first_dir[MS_PATH_MAX];
  for (int round = 0; round < 2; round++) {
    ms_builder_t *b = builder(0, 1);
    if (round == 0) snprintf(first_dir, sizeof first_dir, "%s", ms_builder_run_dir(b));
    ms_result_t res;
    ms_build_wait(b, ms_build_submit(b, c, &res));
    ck_assert_msg(res.status == MS_OK, "round %d: %s", round, res.error);
    ms_result_clear(&res);
    ms_builder_free(b);
  }
  const char *cache = getenv("POCL_CACHE_DIR");
  ck_assert_ptr_nonnull(cache);
  ck_assert_msg(strncmp(cache, first_dir, strlen(first_dir)) != 0, "the PoCL cache %s is inside a pool's run dir", cache);
  struct stat st;
  ck_assert_int_eq(stat(cache, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ms_candidate_free(c);
  cg_module_free(mo);
  ir_workload_free(w);
}
END_TEST

/* A temp dir whose process was SIGKILLed (nothing removed it) is removed by
 * the next sweep; a live process's dir and a foreign tuned-* dir without an
 * owner file are left alone; ms_temp_dir_remove removes one's own. */
static pid_t temp_dir_child(int fd, bool die) {
  pid_t pid = fork();
  if (pid == 0) {
    char dir[MS_PATH_MAX];
    tn_err_t err = {0};
    if (ms_temp_dir_new("tuned-sweeptest", dir, sizeof dir, &err) < 0) _exit(2);
    if (write(fd, dir, sizeof dir) != (ssize_t)sizeof dir) _exit(3);
    if (die) raise(SIGKILL);
    pause();
    _exit(0);
  }
  return pid;
}

START_TEST(t_temp_dir_sweep) {
  char tmp[] = "/tmp/tuned-sweep-root-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  setenv("TMPDIR", tmp, 1);
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  char dead[MS_PATH_MAX], alive[MS_PATH_MAX], bare[MS_PATH_MAX + 16], mine[MS_PATH_MAX];
  pid_t a = temp_dir_child(p[1], false);
  ck_assert_int_eq(read(p[0], alive, sizeof alive), (ssize_t)sizeof alive);
  pid_t d = temp_dir_child(p[1], true);
  ck_assert_int_eq(read(p[0], dead, sizeof dead), (ssize_t)sizeof dead);
  int st;
  ck_assert_int_eq(waitpid(d, &st, 0), d);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  snprintf(bare, sizeof bare, "%s/tuned-bare", tmp); /* no .owner: not ours to judge */
  ck_assert_int_eq(mkdir(bare, 0700), 0);
  struct stat sb;
  ck_assert_int_eq(stat(dead, &sb), 0); /* the SIGKILL left it behind... */
  tn_err_t err = {0};
  ck_assert_msg(ms_temp_dir_new("tuned-mine", mine, sizeof mine, &err) == TN_OK, "%s", err.msg);
  ck_assert_int_ne(stat(dead, &sb), 0); /* ...the next new temp dir swept it */
  ck_assert_int_eq(stat(alive, &sb), 0);
  ck_assert_int_eq(stat(bare, &sb), 0);
  ck_assert_int_eq(ms_temp_dirs_sweep(), 0); /* ours is held too */
  ck_assert_int_eq(stat(mine, &sb), 0);
  kill(a, SIGKILL);
  ck_assert_int_eq(waitpid(a, &st, 0), a);
  ck_assert_int_eq(ms_temp_dirs_sweep(), 1);
  ck_assert_int_ne(stat(alive, &sb), 0);
  ms_temp_dir_remove(mine);
  ck_assert_int_ne(stat(mine, &sb), 0);
  ck_assert_int_eq(rmdir(bare), 0);
  ck_assert_int_eq(rmdir(tmp), 0);
  unsetenv("TMPDIR");
  close(p[0]);
  close(p[1]);
}
END_TEST

/* A queued build withdrawn with ms_build_cancel finishes at once; one that
 * is compiling is left alone. */
START_TEST(t_build_cancel) {
  ir_workload_t *w;
  cg_module_t *m;
  ms_candidate_t *c;
  ms_builder_t *b = small_cpu_build(30.0, &w, &m, &c); /* one thread */
  ms_result_t res[2];
  ms_commands_pause(true); /* the first build stops inside cc; the second stays queued */
  int64_t tk[2] = {ms_build_submit(b, c, &res[0]), ms_build_submit(b, c, &res[1])};
  usleep(200 * 1000);
  ms_build_cancel(b, tk[1]);
  ms_build_cancel(b, tk[0]);
  ck_assert(ms_build_done(b, tk[1]));
  ck_assert(!ms_build_done(b, tk[0]));
  ms_build_wait(b, tk[1]);
  ck_assert_int_eq(res[1].status, MS_BUILD_ERROR);
  ck_assert_str_eq(res[1].error, "build cancelled before it started");
  ms_commands_pause(false);
  ms_build_wait(b, tk[0]);
  ck_assert_msg(res[0].status == MS_OK, "%s", res[0].error);
  ms_build_cancel(b, tk[0]); /* waited: nothing to withdraw */
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]);
  teardown(b, c, m, w);
}
END_TEST

/* ---- one measurer per device ---------------------------------------------------- */

START_TEST(t_device_names) {
  char name[MS_DEVICE_NAME_MAX];
  tn_target_t t = target("cpu");
  ms_device_name(&t, name, sizeof name);
  ck_assert_str_eq(name, "cpu");
  t = target("cuda-host");
  ms_device_name(&t, name, sizeof name);
  ck_assert_str_eq(name, "cpu"); /* the emulated CUDA runs on the host's cores */
  t = target("nvidia/h100");
  ms_device_name(&t, name, sizeof name);
  ck_assert_str_eq(name, "cuda:0");
  ms_backend_status_t st;
  ms_backend_probe(MS_BACKEND_OPENCL, &st);
  t = target("opencl/pocl-cpu");
  ms_device_name(&t, name, sizeof name);
  /* PoCL's device is the host CPU: one measurer with the cpu target's */
  ck_assert_str_eq(name, st.available && strstr(st.detail, "Portable Computing Language") ? "cpu" : "opencl:0");
  ck_assert_ptr_eq(ms_device_get("cuda:0"), ms_device_get("cuda:0"));
  ck_assert_ptr_ne(ms_device_get("cuda:0"), ms_device_get("cpu"));
}
END_TEST

typedef struct holder {
  ms_device_t *dev;
  int id;
  double hold_s;
  double stop_at;         /* > 0: stop waiting at this tn_now() */
  bool got;
  double start, end;      /* the hold */
  double waited;          /* seconds in ms_device_acquire */
  int *order, *norder;    /* ids in the order they got the device */
  pthread_mutex_t *mu;
} holder_t;

static bool stop_at(void *ctx) {
  holder_t *h = ctx;
  return h->stop_at > 0 && tn_now() >= h->stop_at;
}

static void *hold(void *arg) {
  holder_t *h = arg;
  double t0 = tn_now();
  h->got = ms_device_acquire(h->dev, stop_at, h);
  h->waited = tn_now() - t0;
  if (!h->got) return NULL;
  h->start = tn_now();
  pthread_mutex_lock(h->mu);
  h->order[(*h->norder)++] = h->id;
  pthread_mutex_unlock(h->mu);
  usleep((useconds_t)(h->hold_s * 1e6));
  h->end = tn_now();
  ms_device_release(h->dev);
  return NULL;
}

/* Waiters get the device in the order they asked, one at a time. */
START_TEST(t_device_fifo) {
  ms_device_t *d = ms_device_get("test:fifo");
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  int order[4], norder = 0;
  holder_t h[4];
  pthread_t th[4];
  ck_assert(ms_device_acquire(d, NULL, NULL));
  for (int i = 0; i < 4; i++) {
    h[i] = (holder_t){.dev = d, .id = i, .hold_s = 0.03, .order = order, .norder = &norder, .mu = &mu};
    pthread_create(&th[i], NULL, hold, &h[i]);
    usleep(50 * 1000); /* queued in index order */
  }
  ck_assert_int_eq(norder, 0);
  ms_device_release(d);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  ck_assert_int_eq(norder, 4);
  for (int i = 0; i < 4; i++) {
    ck_assert(h[i].got);
    ck_assert_int_eq(order[i], i);
    if (i > 0) ck_assert_msg(h[i].start >= h[i - 1].end, "holds %d and %d overlap", i - 1, i);
  }
}
END_TEST

/* A waiter whose stop says so leaves the queue promptly, and the waiter
 * behind it is not held up by the gap. */
START_TEST(t_device_stop) {
  ms_device_t *d = ms_device_get("test:stop");
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  int order[2], norder = 0;
  holder_t quitter = {.dev = d, .id = 0, .stop_at = tn_now() + 0.2, .order = order, .norder = &norder, .mu = &mu};
  holder_t patient = {.dev = d, .id = 1, .hold_s = 0.01, .order = order, .norder = &norder, .mu = &mu};
  pthread_t a, b;
  ck_assert(ms_device_acquire(d, NULL, NULL));
  pthread_create(&a, NULL, hold, &quitter);
  usleep(50 * 1000);
  pthread_create(&b, NULL, hold, &patient);
  pthread_join(a, NULL);
  ck_assert(!quitter.got);
  ck_assert_msg(quitter.waited < 1.0, "the stopped waiter left after %.2f s", quitter.waited);
  ck_assert_int_eq(norder, 0); /* still ours */
  double released = tn_now();
  ms_device_release(d);
  pthread_join(b, NULL);
  ck_assert(patient.got);
  ck_assert_int_eq(order[0], 1);
  ck_assert_msg(patient.start - released < 0.5, "the next waiter got the device %.2f s after the release",
                patient.start - released);
  ck_assert(ms_device_acquire(d, NULL, NULL)); /* free again */
  ms_device_release(d);
}
END_TEST

typedef struct run_thread {
  ms_runner_t *r;
  ms_candidate_t **cs;
  ms_result_t *res;
  int n;
  pthread_barrier_t *go;
} run_thread_t;

static void *run_batch(void *arg) {
  run_thread_t *t = arg;
  tn_err_t err = {0};
  pthread_barrier_wait(t->go);
  ck_assert_msg(ms_runner_run_batch(t->r, t->cs, t->res, t->n, &err) == TN_OK, "%s", err.msg);
  return NULL;
}

/* Two runners (two workers) in two threads time CPU candidates at once:
 * their windows never overlap, and they take turns. */
START_TEST(t_runners_share_device) {
  enum { N = 4 };
  ir_workload_t *w = tu_load_sets("vector_add", "N=4096");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  ms_candidate_t *cs[N];
  ms_result_t built[N], res[2][N];
  for (int i = 0; i < N; i++) cs[i] = from_module(&t, m);
  ms_builder_t *b = builder(0, 0);
  tn_err_t err = {0};
  ck_assert_int_eq(ms_build_batch(b, cs, N, built, &err), TN_OK);
  ms_runner_t *r[2];
  run_thread_t rt[2];
  pthread_t th[2];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  for (int k = 0; k < 2; k++) {
    ms_run_opts_t o = {.min_secs = 0.03, .max_repeats = 50};
    ck_assert_msg(ms_runner_new(&o, &r[k], &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(ms_runner_set_workload(r[k], w->func, 1, &err) == TN_OK, "%s", err.msg);
    for (int i = 0; i < N; i++) {
      ck_assert_msg(built[i].status == MS_OK, "%s", built[i].error);
      ms_result_init(&res[k][i]);
      snprintf(res[k][i].artifact, sizeof res[k][i].artifact, "%s", built[i].artifact);
    }
    rt[k] = (run_thread_t){r[k], cs, res[k], N, &go};
    pthread_create(&th[k], NULL, run_batch, &rt[k]);
  }
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  ck_assert_int_ne(ms_runner_worker_pid(r[0]), ms_runner_worker_pid(r[1]));
  int64_t first[2], last[2];
  for (int k = 0; k < 2; k++) {
    first[k] = INT64_MAX, last[k] = 0;
    for (int i = 0; i < N; i++) {
      const ms_result_t *x = &res[k][i];
      assert_measured_ok(x, "candidate");
      ck_assert(x->window_start_ns > 0 && x->window_end_ns > x->window_start_ns);
      first[k] = TN_MIN(first[k], x->window_start_ns);
      last[k] = TN_MAX(last[k], x->window_end_ns);
      for (int k2 = 0; k2 < 2; k2++)
        for (int j = 0; j < N; j++) {
          const ms_result_t *y = &res[k2][j];
          if (y != x)
            ck_assert_msg(x->window_end_ns <= y->window_start_ns || y->window_end_ns <= x->window_start_ns,
                          "windows [%lld, %lld] and [%lld, %lld] overlap", (long long)x->window_start_ns,
                          (long long)x->window_end_ns, (long long)y->window_start_ns, (long long)y->window_end_ns);
        }
    }
  }
  /* not one after the other: the two batches ran during the same interval */
  ck_assert(TN_MAX(first[0], first[1]) < TN_MIN(last[0], last[1]));

  /* The device held elsewhere: a runner whose stop says so gives up the
   * wait and leaves the candidate unrun. */
  holder_t h = {.stop_at = tn_now() + 0.2};
  ms_run_opts_t o = {.min_secs = 0.01, .stop = stop_at, .stop_ctx = &h};
  ms_runner_t *q;
  ck_assert_msg(ms_runner_new(&o, &q, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(q, w->func, 1, &err) == TN_OK, "%s", err.msg);
  ms_result_t one;
  ms_result_init(&one);
  snprintf(one.artifact, sizeof one.artifact, "%s", built[0].artifact);
  ms_device_t *cpu = ms_device_get("cpu");
  ck_assert(ms_device_acquire(cpu, NULL, NULL));
  double t0 = tn_now();
  ck_assert_int_eq(ms_runner_run_batch(q, cs, &one, 1, &err), TN_OK);
  ck_assert_msg(tn_now() - t0 < 1.0, "the stopped wait took %.2f s", tn_now() - t0);
  ck_assert(!one.ran && one.status == MS_OK && one.window_start_ns == 0);
  ms_device_release(cpu);
  ms_runner_free(q);

  for (int k = 0; k < 2; k++) {
    ms_runner_free(r[k]);
    for (int i = 0; i < N; i++) ms_result_clear(&res[k][i]);
  }
  for (int i = 0; i < N; i++) ms_result_clear(&built[i]), ms_candidate_free(cs[i]);
  pthread_barrier_destroy(&go);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

/* Mismatched parameters, the worker lookup, ms_measure. */
/* slow_factor: once a fast candidate is measured, a correct candidate whose
 * checked run takes over 10x its time is timed by that run alone; before any
 * is measured (and with slow_factor 0) it is timed as usual. */
START_TEST(t_slow_cutoff) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  /* the generated kernel, 20 ms slower */
  tn_buf_t src;
  tn_buf_init(&src);
  const char *entry = strstr(m->source, "int tuned_entry_default_function(void **args) {");
  ck_assert_ptr_nonnull(entry);
  tn_buf_put(&src, "#include <unistd.h>\n");
  tn_buf_printf(&src, "%.*s", (int)(entry - m->source), m->source);
  tn_buf_printf(&src, "int tuned_entry_default_function(void **args) {\n  usleep(20000);%s", entry + strlen("int tuned_entry_default_function(void **args) {"));
  ms_candidate_t *cs[3] = {planted(&t, m, tn_buf_str(&src)), from_module(&t, m), planted(&t, m, tn_buf_str(&src))};
  ms_builder_t *b = builder(0, 0);
  ms_run_opts_t o = {.timeout_s = 10, .min_secs = 0.01, .slow_factor = 10};
  ms_runner_t *r = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 1, &err) == TN_OK, "%s", err.msg);
  ms_result_t res[3];
  build_and_run(r, b, cs, res, 3);
  assert_measured_ok(&res[0], "slow candidate before any fast one"); /* >= 3 repeats */
  ck_assert(res[0].median_secs >= 0.02);
  assert_measured_ok(&res[1], "fast candidate");
  ck_assert(res[1].median_secs < 0.002);
  ck_assert_msg(res[2].status == MS_OK && res[2].verify_error <= 1e-4, "%s", res[2].error);
  ck_assert_int_eq(res[2].nrepeats, 1); /* its checked run */
  ck_assert(res[2].median_secs >= 0.02);
  /* a new workload forgets the fastest time */
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 2, &err) == TN_OK, "%s", err.msg);
  build_and_run(r, b, &cs[2], &res[2], 1);
  assert_measured_ok(&res[2], "slow candidate of a new workload");
  ms_result_clear(&res[2]);
  ms_runner_free(r);

  /* one still running at 100 x the fastest (and the 0.05 s floor) is stopped;
   * the restarted worker measures the next */
  tn_buf_reset(&src);
  tn_buf_put(&src, "#include <unistd.h>\n");
  tn_buf_printf(&src, "%.*s", (int)(entry - m->source), m->source);
  tn_buf_printf(&src, "int tuned_entry_default_function(void **args) {\n  usleep(3000000);%s", entry + strlen("int tuned_entry_default_function(void **args) {"));
  ms_candidate_t *hopeless = planted(&t, m, tn_buf_str(&src));
  ms_candidate_t *run2[3] = {cs[1], hopeless, cs[1]};
  o.stop_min_s = 0.05;
  ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 3, &err) == TN_OK, "%s", err.msg);
  build_and_run(r, b, run2, res, 3);
  assert_measured_ok(&res[0], "fast candidate");
  ck_assert_int_eq(res[1].status, MS_TOO_SLOW); /* stopped early, not a timeout */
  ck_assert_msg(strstr(res[1].error, "stopped early") && strstr(res[1].error, "times the fastest verified run so far"),
                "%s", res[1].error);
  ck_assert_msg(res[2].status == MS_OK && res[2].verify_error <= 1e-4, "after the stop: %s", res[2].error);
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]);
  ms_runner_free(r);

  /* A fresh runner has no best: nothing is stopped early, not even the
   * first candidate (it is measured in full, one that sleeps 0.3 s too).
   * A best noted from elsewhere (the database's) bounds the first
   * candidate already; set_best(0) lifts the bounds again. */
  tn_buf_reset(&src);
  tn_buf_put(&src, "#include <unistd.h>\n");
  tn_buf_printf(&src, "%.*s", (int)(entry - m->source), m->source);
  tn_buf_printf(&src, "int tuned_entry_default_function(void **args) {\n  usleep(300000);%s", entry + strlen("int tuned_entry_default_function(void **args) {"));
  ms_candidate_t *slowish = planted(&t, m, tn_buf_str(&src));
  ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 4, &err) == TN_OK, "%s", err.msg);
  ck_assert(ms_runner_best(r) == 0);
  build_and_run(r, b, &slowish, &res[0], 1);
  assert_measured_ok(&res[0], "a slow first candidate without a best");
  ck_assert_int_ge(res[0].nrepeats, 1);
  ck_assert(res[0].median_secs >= 0.3);
  ms_runner_set_best(r, 0); /* forget it again */
  ms_runner_note_best(r, 1e-4);
  ck_assert(ms_runner_best(r) == 1e-4);
  ms_runner_note_best(r, 1.0); /* slower: no change */
  ck_assert(ms_runner_best(r) == 1e-4);
  build_and_run(r, b, &hopeless, &res[1], 1);
  ck_assert_int_eq(res[1].status, MS_TOO_SLOW);
  ms_runner_set_best(r, 0);
  build_and_run(r, b, &slowish, &res[2], 1);
  assert_measured_ok(&res[2], "a slow candidate with the bounds lifted");
  for (int i = 0; i < 3; i++) ms_result_clear(&res[i]);
  /* the timing of later candidates (the re-measure's rounds): at most 5 repeats, never below min_repeats (3) */
  double old_secs = 0;
  int old_max = 0;
  ms_runner_set_timing(r, 1e-6, 5, &old_secs, &old_max);
  ck_assert(old_secs == 0.01 && old_max == 1000);
  build_and_run(r, b, &cs[1], &res[0], 1);
  assert_measured_ok(&res[0], "fast candidate, few repeats");
  ck_assert_int_le(res[0].nrepeats, 5);
  ms_runner_set_timing(r, 0, 1, &old_secs, &old_max);
  ck_assert(old_secs == 1e-6 && old_max == 5);
  ms_runner_set_best(r, 0); /* (its own time as the best could make a cold checked run the only sample) */
  build_and_run(r, b, &cs[1], &res[1], 1);
  ck_assert_int_eq(res[1].nrepeats, 3);
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]);
  ms_runner_free(r);
  ms_candidate_free(slowish);
  ms_candidate_free(hopeless);
  for (int i = 0; i < 3; i++) ms_candidate_free(cs[i]);
  tn_buf_free(&src);
  teardown(b, NULL, m, w);
}
END_TEST

/* A worker killed while it starts (before its hello: an operator, the OOM
 * killer, the soak's kills) is started again rather than failing the
 * candidate (4 of the soak's 450 jobs failed so); one killed at every start
 * fails after three tries, saying so. */
START_TEST(t_worker_killed_at_start) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  ms_builder_t *b = builder(0, 0);
  char real[512], dir[] = "/tmp/tuned-killstart-XXXXXX", script[600], text[2000];
  tn_err_t err = {0};
  ck_assert_int_eq(ms_worker_path(real, sizeof real, &err), TN_OK);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  for (int always = 0; always < 2; always++) {
    snprintf(script, sizeof script, "%s/worker-%d", dir, always);
    /* a count of starts in a file; SIGKILL at the first (or every) start */
    snprintf(text, sizeof text,
             "#!/bin/sh\necho x >> %s/starts-%d\nif [ %d = 1 ] || [ $(wc -l < %s/starts-%d) = 1 ]; then kill -KILL $$; fi\n"
             "exec %s \"$@\"\n", dir, always, always, dir, always, real);
    FILE *fp = fopen(script, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
    chmod(script, 0755);
    ms_run_opts_t o = {.timeout_s = 10, .min_secs = 0.01, .worker = script};
    ms_runner_t *r = NULL;
    ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
    ck_assert_msg(ms_runner_set_workload(r, w->func, 1, &err) == TN_OK, "%s", err.msg);
    ms_candidate_t *c = from_module(&t, m);
    ms_result_t res;
    ck_assert_int_eq(ms_build_batch(b, &c, 1, &res, &err), TN_OK);
    int rc = ms_runner_run_batch(r, &c, &res, 1, &err);
    if (!always) {
      ck_assert_msg(rc == TN_OK, "%s", err.msg);
      assert_measured_ok(&res, "after a worker killed at its start");
      ck_assert_int_eq(ms_runner_worker_starts(r), 2);
    } else {
      ck_assert_int_lt(rc, 0);
      ck_assert_int_eq(res.status, MS_RUN_ERROR);
      ck_assert_msg(strstr(res.error, "did not start") && strstr(res.error, "(killed by a signal)"), "%s", res.error);
      ck_assert_int_eq(ms_runner_worker_starts(r), 3);
    }
    ms_result_clear(&res);
    ms_candidate_free(c);
    ms_runner_free(r);
  }
  tu_remove_tree(dir);
  ms_builder_free(b);
  cg_module_free(m);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_runner_misc) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024"), *w2 = tu_load_sets("vector_add", "N=512");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C), *m2 = lower(w2, NULL, CG_TARGET_C);
  tn_target_t t = target("cpu");
  ms_candidate_t *cs[2] = {from_module(&t, m2), from_module(&t, m)};
  ms_builder_t *b = builder(0, 0);
  ms_runner_t *r = runner(w, 0);
  ms_result_t res[2];
  build_and_run(r, b, cs, res, 2);
  ck_assert_int_eq(res[0].status, MS_RUN_ERROR);
  ck_assert_msg(strstr(res[0].error, "candidate parameter 0 (A, float32, 512 elements) does not match the "
                                     "workload's A"), "%s", res[0].error);
  assert_measured_ok(&res[1], "matching candidate");
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]), ms_candidate_free(cs[i]);
  ck_assert_int_gt(ms_runner_worker_pid(r), 0);
  ms_runner_stop(r);
  ck_assert_int_eq(ms_runner_worker_pid(r), 0);
  ms_runner_free(r);
  ms_builder_free(b);

  char path[512];
  tn_err_t err = {0};
  ck_assert_int_eq(ms_worker_path(path, sizeof path, &err), TN_OK);
  ck_assert_ptr_nonnull(strstr(path, "tuned-worker"));
  setenv("TUNED_WORKER", "/nonexistent/tuned-worker", 1);
  ck_assert_int_eq(ms_worker_path(path, sizeof path, &err), TN_EIO);
  ck_assert_ptr_nonnull(strstr(err.msg, "TUNED_WORKER=/nonexistent/tuned-worker"));
  ms_runner_t *bad = NULL;
  ck_assert_int_eq(ms_runner_new(NULL, &bad, &err), TN_EIO);
  unsetenv("TUNED_WORKER");

  /* A module for the wrong language is refused; ms_measure does it all. */
  ms_candidate_t *c = NULL;
  tn_target_t ocl = target("opencl/pocl-cpu");
  ck_assert_int_eq(ms_candidate_from_module(&ocl, m, &c, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "runs opencl code, but the module is c"));
  cg_module_t *mods[2] = {m, m2};
  ms_options_t o = {.seed = 3};
  o.run.min_secs = 100; /* capped by max_repeats */
  o.run.max_repeats = 5;
  o.run.flush_l2 = true;
  ck_assert_msg(ms_measure(w->func, &t, mods, 2, &o, res, &err) == TN_OK, "%s", err.msg);
  assert_measured_ok(&res[0], "ms_measure");
  ck_assert_int_eq(res[0].nrepeats, 5);
  ck_assert_int_eq(res[1].status, MS_RUN_ERROR);
  for (int i = 0; i < 2; i++) ms_result_clear(&res[i]);
  cg_module_free(m);
  cg_module_free(m2);
  ir_workload_free(w);
  ir_workload_free(w2);
}
END_TEST

/* ---- tunectl run / emit ---------------------------------------------------------- */

typedef struct run {
  int status;
  char out[1 << 17];
  char err[8192];
} run_t;

static run_t *tunectl(const char *args) {
  static run_t r;
  memset(&r, 0, sizeof r);
  const char *exe = getenv("TUNECTL");
  ck_assert_msg(exe != NULL, "TUNECTL is not set");
  char errpath[] = "/tmp/tunectl-err-XXXXXX";
  int fd = mkstemp(errpath);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>'%s'", exe, args, errpath);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(r.out, 1, sizeof r.out - 1, p);
  r.out[n] = 0;
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  FILE *e = fopen(errpath, "r");
  n = fread(r.err, 1, sizeof r.err - 1, e);
  r.err[n] = 0;
  fclose(e);
  unlink(errpath);
  return &r;
}

#define MM SRC("workloads/matmul.tw") " --set M=128 --set N=128 --set K=128 "
#define TRACE(name) "--trace " SRC("workloads/schedules/" name ".json") " "

/* The tensor-core example trace runs from the command line on the CUDA host
 * harness and verifies; on a T4 (sm_75, float16 wmma from sm_70) NVRTC
 * builds it. */
START_TEST(t_tunectl_wmma) {
  run_t *r = tunectl("run " SRC("workloads/matmul_f16.tw") " --set M=64 --set N=128 --set K=48 "
                     TRACE("matmul_f16_wmma") "--target cuda-host --repeat-ms 1");
  ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "status    ok\n"));
  ck_assert_ptr_nonnull(strstr(r->out, "verified  ok: relative L2 error "));
  if (!WITH_CUDA) return;
  r = tunectl("run " SRC("workloads/matmul_f16.tw") " --set M=64 --set N=64 --set K=32 " TRACE("matmul_f16_wmma")
              "--target nvidia/tesla-t4");
  ck_assert_ptr_nonnull(strstr(r->out, "arch sm_75"));
  ck_assert_ptr_null(strstr(r->out, "build_error"));
}
END_TEST

START_TEST(t_tunectl_run) {
  run_t *r = tunectl("run " MM TRACE("matmul_cpu") "--target cpu --repeat-ms 20");
  ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "status    ok\n"));
  ck_assert_ptr_nonnull(strstr(r->out, "median    "));
  ck_assert_ptr_nonnull(strstr(r->out, " GFLOP/s, "));
  ck_assert_ptr_nonnull(strstr(r->out, "verified  ok: relative L2 error "));
  ck_assert_ptr_nonnull(strstr(r->out, "build     "));
  r = tunectl("run " MM TRACE("matmul_shared") "--target opencl --repeat-ms 5 --json");
  if (WITH_OPENCL) {
    ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "\"status\":\t\"ok\""));
    ck_assert_ptr_nonnull(strstr(r->out, "\"target\":\t\"opencl/pocl-cpu\""));
    ck_assert_ptr_nonnull(strstr(r->out, "\"shared_bytes\":\t4096"));
  } else {
    ck_assert_int_eq(r->status, 1);
    ck_assert_ptr_nonnull(strstr(r->out, "this build has no OpenCL support"));
  }
  /* No GPU driver here (or a real one): either way the CUDA build facts print. */
  r = tunectl("run " SRC("workloads/vector_add.tw") " " TRACE("vector_add_gpu") "--target nvidia/tesla-t4");
  if (WITH_CUDA) {
    if (r->status != 0) ck_assert_ptr_nonnull(strstr(r->out, "status    run_error"));
    if (r->status != 0) ck_assert_ptr_nonnull(strstr(r->out, "CUDA"));
    ck_assert_ptr_nonnull(strstr(r->out, "NVRTC"));
    ck_assert_ptr_nonnull(strstr(r->out, "arch sm_75"));
  } else {
    ck_assert_ptr_nonnull(strstr(r->out, "status    build_error"));
    ck_assert_ptr_nonnull(strstr(r->out, "this build has no CUDA support"));
  }
  /* Errors: a GPU target without a binding trace, an unknown target. */
  r = tunectl("run " MM "--target opencl");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "cannot generate opencl code"));
  r = tunectl("run " MM "--target nvidia/gtx-9000");
  ck_assert_int_eq(r->status, 2); /* a bad option value, as any bad command line */
  ck_assert_ptr_nonnull(strstr(r->err, "unknown target \"nvidia/gtx-9000\""));
  r = tunectl("run " MM);
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "missing --target"));
  r = tunectl("run " MM "--target cpu --repeat-ms -4");
  ck_assert_int_eq(r->status, 2);
  r = tunectl("run " MM "--target cpu --cc icc");
  ck_assert_int_eq(r->status, 2); /* a bad --cc: the command line */
  ck_assert_str_eq(r->err, "tunectl run: --cc: target cpu: unknown compiler \"icc\" for \"cc\" (expected gcc, "
                           "clang or auto)\n");
  r = tunectl("run " MM TRACE("vector_add_gpu") "--target nvidia/h100 --cc gcc");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "\"cc\" applies to cpu and cuda-host targets, not cuda"));
  if (installed("clang")) {
    r = tunectl("run " MM TRACE("matmul_cpu") "--target cpu --repeat-ms 5 --cc clang");
    ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
    const char *line = strstr(r->out, "build     ");
    ck_assert_msg(line && strstr(line, "clang version"), "%s", r->out);
  } else {
    fprintf(stderr, "t_tunectl_run: clang is not installed; tunectl run --cc clang is skipped\n");
  }
  r = tunectl("run --help"); /* every measurement setting, with its default and bounds */
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "--repeat-ms N"));
  ck_assert_ptr_nonnull(strstr(r->out, "default 100, at most\n                    1000000"));
  ck_assert_ptr_nonnull(strstr(r->out, "at least 3 and at most 1000 repeats"));
  ck_assert_ptr_nonnull(strstr(r->out, "untimed warm-up"));
  ck_assert_ptr_nonnull(strstr(r->out, "30 s"));
  ck_assert_ptr_nonnull(strstr(r->out, "--no-flush"));
  ck_assert_ptr_nonnull(strstr(r->out, "--cc C"));
  r = tunectl("tune --help");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "[--repeat-ms N] [--no-flush] [--cc C]"));
  ck_assert_ptr_nonnull(strstr(r->out, "at least 3 and at most 1000"));
}
END_TEST

START_TEST(t_tunectl_emit) {
  run_t *r = tunectl("emit " MM TRACE("matmul_shared") "--target nvidia/h100 --emit cuda");
  ck_assert_msg(r->status == 0, "%s", r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "extern \"C\" __global__"));
  ck_assert_ptr_nonnull(strstr(r->out, "__shared__"));
  r = tunectl("emit " MM TRACE("matmul_shared") "--target nvidia/h100 --emit ptx");
  if (WITH_CUDA) {
    ck_assert_msg(r->status == 0, "%s", r->err);
    ck_assert_ptr_nonnull(strstr(r->out, ".target sm_90"));
    ck_assert_ptr_nonnull(strstr(r->out, ".entry matmul_kernel0")); /* named after the workload, as kernel.get does */
  } else {
    ck_assert_int_eq(r->status, 1);
    ck_assert_ptr_nonnull(strstr(r->err, "this build has no CUDA support"));
  }
  /* software pipelining: cp.async in the PTX for sm_90 (plain copies for sm_75) */
  r = tunectl("emit " MM TRACE("matmul_pipelined") "--target nvidia/h100 --emit ptx");
  if (WITH_CUDA) {
    ck_assert_msg(r->status == 0, "%s", r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "cp.async.cg.shared.global"));
    ck_assert_ptr_nonnull(strstr(r->out, "cp.async.wait_group 1"));
    r = tunectl("emit " MM TRACE("matmul_pipelined") "--target nvidia/tesla-t4 --emit ptx");
    ck_assert_msg(r->status == 0, "%s", r->err);
    ck_assert_ptr_null(strstr(r->out, "cp.async"));
  }
  /* SASS by nvdisasm (scripts/install-deps installs it), after ptxas's report */
  r = tunectl("emit " MM TRACE("matmul_pipelined") "--target nvidia/h100 --emit sass");
  if (WITH_CUDA && r->status == 0) {
    ck_assert_ptr_nonnull(strstr(r->out, "// ptxas info    : Used "));
    ck_assert_msg(strstr(r->out, "LDGSTS") && strstr(r->out, "FFMA"), "%.2000s", r->out); /* cp.async, FMAs */
  } else {
    ck_assert_int_eq(r->status, 1);
    ck_assert_msg(strstr(r->err, WITH_CUDA ? "no nvdisasm on PATH nor from PyPI's nvidia-cuda-nvdisasm" : "no CUDA support"),
                  "%s", r->err);
  }
  r = tunectl("emit " MM TRACE("matmul_shared") "--target cpu --emit sass");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "target cpu runs c code; --emit sass needs a CUDA"));
  r = tunectl("emit " MM TRACE("matmul_shared") "--target opencl --emit opencl");
  ck_assert_msg(r->status == 0, "%s", r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "__kernel "));
  ck_assert_ptr_nonnull(strstr(r->out, " matmul_kernel0(__global float"));
  ck_assert_ptr_nonnull(strstr(r->out, "barrier(CLK_LOCAL_MEM_FENCE)"));
  r = tunectl("emit " MM TRACE("matmul_cpu") "--target cpu --emit c");
  ck_assert_msg(r->status == 0, "%s", r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "#pragma omp parallel for"));
  ck_assert_ptr_nonnull(strstr(r->out, "int tuned_entry_matmul(void **args)"));
  r = tunectl("emit " MM TRACE("matmul_shared") "--target nvidia/tesla-t4 --emit launch");
  ck_assert_msg(r->status == 0, "%s", r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "\"grid\":\t[2, 2, 1]"));
  ck_assert_ptr_nonnull(strstr(r->out, "\"block\":\t[64, 1, 1]"));
  r = tunectl("emit " MM TRACE("matmul_shared") "--target cpu --emit cuda");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "target cpu runs c code; --emit cuda needs a CUDA"));
  r = tunectl("emit " MM TRACE("matmul_shared") "--target nvidia/tesla-p100 --emit ptx");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, WITH_CUDA ? "sm_60 is not supported" : "no CUDA support"));
  /* A design-space trace (no EnterPostproc): emit and run apply the target's
   * postprocessors, so the root's meta_schedule annotations become pragmas. */
  char path[] = "/tmp/tunectl-space-XXXXXX", args[512];
  tu_write_temp(path, "[[[\"GetBlock\", [], [\"root\", \"main\"], [\"b0\"]],"
                      "  [\"Annotate\", [\"b0\", 16], [\"meta_schedule.parallel\"], []],"
                      "  [\"Annotate\", [\"b0\", 64], [\"meta_schedule.vectorize\"], []]], []]");
  snprintf(args, sizeof args, "emit %s --trace %s --target cpu --emit c --set M=64 --set N=64 --set K=64", SRC("workloads/matmul.tw"), path);
  r = tunectl(args);
  ck_assert_msg(r->status == 0, "%s", r->err);
  ck_assert_msg(strstr(r->out, "#pragma omp parallel for num_threads(tuned_team())\n  for (int i = 0; i < 64; ++i) {"), "%s",
                r->out);
  unlink(path);
  r = tunectl("emit " MM "--target cpu --emit asm");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "unknown --emit 'asm'"));
  r = tunectl("emit " MM "--target cpu");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "missing --emit"));
}
END_TEST

/* ---- CUPTI ------------------------------------------------------------------- */

/* The flag: CUPTI's kernel time more than 10 % away from the event time, in
 * either direction; an unknown time never disagrees. */
START_TEST(t_times_disagree) {
  ck_assert(!ms_times_disagree(1e-3, 1.05e-3));
  ck_assert(!ms_times_disagree(1e-3, 0.95e-3));
  ck_assert(ms_times_disagree(1e-3, 1.11e-3));
  ck_assert(ms_times_disagree(1e-3, 0.85e-3));
  ck_assert(ms_times_disagree(2.0, 0.5));
  ck_assert(!ms_times_disagree(0, 1e-3));
  ck_assert(!ms_times_disagree(1e-3, 0));
  ck_assert(!ms_times_disagree(NAN, 1e-3));

  ms_result_t r;
  ms_result_init(&r);
  r.median_secs = 2e-3;
  double far[] = {2.6e-3, 2.4e-3, 2.5e-3}, near[] = {1.95e-3, 1.9e-3, 2.1e-3, 1.99e-3};
  ms_result_set_cupti(&r, far, 3); /* 25 % slower than the events say */
  ck_assert_double_eq(r.cupti_median_secs, 2.5e-3);
  ck_assert(r.times_disagree);
  ms_result_set_cupti(&r, near, 4);
  ck_assert_double_eq_tol(r.cupti_median_secs, 1.97e-3, 1e-12);
  ck_assert(!r.times_disagree);
  char line[512];
  ms_cupti_text(&r, line, sizeof line);
  ck_assert_str_eq(line, "1.970000 ms kernel time (CUPTI), 1.5 % below the CUDA events");
  ms_result_set_cupti(&r, far, 3);
  ms_cupti_text(&r, line, sizeof line);
  ck_assert_msg(strstr(line, "2.500000 ms kernel time (CUPTI), 25.0 % above the CUDA events: DISAGREE"), "%s", line);
  ms_result_set_cupti(&r, NULL, 0); /* no CUPTI: the event time alone */
  ck_assert_double_eq(r.cupti_median_secs, 0);
  ck_assert(!r.times_disagree);
  ms_cupti_text(&r, line, sizeof line);
  ck_assert_str_eq(line, "");

  /* both kept in the JSON record, and read back */
  r.status = MS_OK;
  ms_result_set_cupti(&r, far, 3);
  char *j = ms_result_to_json(&r);
  ck_assert_ptr_nonnull(strstr(j, "\"cupti_median_secs\":\t0.0025"));
  ck_assert_ptr_nonnull(strstr(j, "\"times_disagree\":\ttrue"));
  ms_result_t back;
  tn_err_t err = {0};
  ck_assert_int_eq(ms_result_from_json(j, strlen(j), &back, &err), TN_OK);
  ck_assert_double_eq(back.cupti_median_secs, 2.5e-3);
  ck_assert(back.times_disagree);
  free(j);
  ms_result_clear(&back);
  ms_result_set_cupti(&r, NULL, 0);
  snprintf(r.cupti_error, sizeof r.cupti_error, "CUPTI not found: libcupti.so.13");
  j = ms_result_to_json(&r);
  ck_assert_ptr_null(strstr(j, "cupti_median_secs"));
  ck_assert_ptr_null(strstr(j, "times_disagree"));
  ck_assert_int_eq(ms_result_from_json(j, strlen(j), &back, &err), TN_OK);
  ck_assert_double_eq(back.cupti_median_secs, 0);
  ck_assert_str_eq(back.cupti_error, "CUPTI not found: libcupti.so.13");
  free(j);
  ms_result_clear(&back);
  ms_result_clear(&r);
}
END_TEST

/* Kernel records (in CUPTI's order, not necessarily by start) into per-launch
 * times: the last launches are the timed ones, a launch's kernels add up. */
START_TEST(t_cupti_launch_secs) {
  /* 3 launches of 2 kernels: the checked run, the warm-up, one sample */
  ms_span_t spans[] = {{5000, 5600}, {1000, 1400}, {9000, 9250}, {1500, 1900}, {9300, 9700}, {5700, 6000}};
  double out[3]; /* room for `want` times: the third call asks for 3 */
  char why[256] = "";
  ck_assert_int_eq(ms_cupti_launch_secs(spans, 6, 2, 1, out, why, sizeof why), 1);
  ck_assert_double_eq_tol(out[0], 650e-9, 1e-15);
  ck_assert_int_eq(ms_cupti_launch_secs(spans, 6, 2, 2, out, why, sizeof why), 2);
  ck_assert_double_eq_tol(out[0], 900e-9, 1e-15);
  ck_assert_double_eq_tol(out[1], 650e-9, 1e-15);
  ck_assert_int_eq(ms_cupti_launch_secs(spans, 6, 1, 3, out, why, sizeof why), 3);
  ck_assert_int_eq(ms_cupti_launch_secs(spans, 6, 2, 4, out, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "recorded 6 kernels, not whole launches of 2 kernels covering the 4 timed"), "%s", why);
  why[0] = '\0';
  ck_assert_int_eq(ms_cupti_launch_secs(spans, 5, 2, 1, out, why, sizeof why), -1); /* one record lost */
  ck_assert_msg(strstr(why, "recorded 5 kernels") && strstr(why, "records lost"), "%s", why);
}
END_TEST

/* The range profiler's configuration for the profile metrics, built by
 * CUPTI's host API (no GPU needed) for Hopper, Ampere and Ada chips; an
 * unknown metric or chip is a clear error. */
START_TEST(t_cupti_config) {
#if defined(__SANITIZE_ADDRESS__)
  /* CUPTI loads libnvperf_host.so with RTLD_DEEPBIND, which ASan cannot
   * follow (it ends the process): this case runs in the plain build only. */
  return;
#endif
  static const char *const chips[] = {"GH100", "GA100", "AD102"};
  tn_err_t err = {0};
  ms_cupti_config_t c;
  for (size_t i = 0; i < TN_ARRAY_LEN(chips); i++) {
    ck_assert_msg(ms_cupti_config(chips[i], ms_profile_metrics, MS_PROFILE_NMETRICS, &c, &err) == TN_OK, "%s: %s",
                  chips[i], err.msg);
    ck_assert_uint_gt(c.size, 64);
    ck_assert_ptr_nonnull(c.image);
    ck_assert_int_ge(c.passes, 1);
    ms_cupti_config_free(&c);
  }
  const char *bad[] = {"gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elpased"};
  ck_assert_int_eq(ms_cupti_config("GH100", bad, 2, &c, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "unknown metric \"dram__throughput.avg.pct_of_peak_sustained_elpased\"") &&
                    strstr(err.msg, "GH100"),
                "%s", err.msg);
  ck_assert_ptr_null(c.image);
  ck_assert_int_eq(ms_cupti_config("GX999", ms_profile_metrics, 1, &c, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "\"GX999\"") && strstr(err.msg, "GH100"), "%s", err.msg); /* lists the known chips */
  ck_assert_int_eq(ms_cupti_config("", ms_profile_metrics, 1, &c, &err), TN_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "no chip name"));
}
END_TEST

/* tunectl profile: documented; on a machine without a GPU (this one) a clear
 * error and exit 1, on one with a GPU the Nsight-Compute-like table; a target
 * that is not CUDA, a record without --db, an unknown record or database are
 * clear errors too. */
START_TEST(t_tunectl_profile) {
  run_t *r = tunectl("profile --help");
  ck_assert_int_eq(r->status, 0);
  for (int i = 0; i < MS_PROFILE_NMETRICS; i++) ck_assert_ptr_nonnull(strstr(r->out, ms_profile_metrics[i]));
  ck_assert_ptr_nonnull(strstr(r->out, "RECORD_ID --db PATH"));
  ms_backend_status_t st;
  ms_backend_probe(MS_BACKEND_CUDA, &st);
  r = tunectl("profile " SRC("workloads/vector_add.tw") " --set N=4096 " TRACE("vector_add_gpu") "--target nvidia/h100");
  if (st.available) {
    ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "Duration"));
    ck_assert_ptr_nonnull(strstr(r->out, "Achieved Occupancy"));
    ck_assert_ptr_nonnull(strstr(r->out, "Block Size"));
  } else {
    ck_assert_int_eq(r->status, 1);
    ck_assert_msg(strstr(r->err, "tunectl profile: no GPU to profile nvidia/h100 on: ") &&
                      strstr(r->err, st.detail) && strstr(r->err, "needs an NVIDIA GPU"),
                  "%s", r->err);
    ck_assert_str_eq(r->out, "");
  }
  r = tunectl("profile " MM "--target cuda-host");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "target cuda-host runs CUDA C on the CPU"));
  ck_assert_ptr_nonnull(strstr(r->err, "needs a CUDA target"));
  r = tunectl("profile " MM);
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "a workload file needs --target T"));
  r = tunectl("profile 7");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "7 is a record id: give the database it is in with --db PATH"));
  r = tunectl("profile 7 --db /nonexistent/tuned.db");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "/nonexistent/tuned.db: no such database"));
  /* a record of a CPU tune: found, rebuilt, refused for its target */
  char dir[] = "/tmp/tuned-profile-XXXXXX", cmd[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "tune " SRC("workloads/vector_add.tw") " --set N=1024 --target cpu --trials 1 "
           "--no-remeasure --no-baseline --db %s/t.db", dir);
  r = tunectl(cmd);
  ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
  snprintf(cmd, sizeof cmd, "profile 1 --db %s/t.db", dir);
  r = tunectl(cmd);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->err, "target cpu runs C on the CPU"), "%s", r->err);
  snprintf(cmd, sizeof cmd, "profile 99 --db %s/t.db", dir);
  r = tunectl(cmd);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->err, "no record with id 99 in the database"), "%s", r->err);
  snprintf(cmd, sizeof cmd, "profile 1 --db %s/t.db --trace x.json", dir);
  r = tunectl(cmd);
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "a record brings its own trace"));
  /* a real H100 record (the pre-tuned database): its workload is rebuilt and
   * its trace lowered to CUDA C before the device is asked for */
  char path[128], *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  db_t *db = NULL;
  snprintf(path, sizeof path, "%s/h.db", dir);
  ck_assert_msg(tn_read_file(SRC("configs/pretuned/nvidia-h100.jsonl"), 1 << 24, &text, &len, &err) == TN_OK, "%s",
                err.msg);
  ck_assert_msg(db_open(path, &db, &err) == TN_OK && db_import_jsonl(db, text, len, NULL, &err) == TN_OK, "%s",
                err.msg);
  db_close(db);
  free(text);
  snprintf(cmd, sizeof cmd, "profile 1 --db %s", path);
  r = tunectl(cmd);
  if (st.available) {
    ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "record 1)"));
  } else {
    ck_assert_int_eq(r->status, 1);
    ck_assert_msg(strstr(r->err, "tunectl profile: no GPU to profile nvidia/h100 on: "), "%s", r->err);
  }
  /* the same record on the CPU harness: refused for its target, not its data */
  snprintf(cmd, sizeof cmd, "profile 1 --db %s --target cuda-host", path);
  r = tunectl(cmd);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->err, "target cuda-host runs CUDA C on the CPU"), "%s", r->err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A profile request travels runner -> worker -> result: on the CPU backend,
 * which has no hardware profiler, the timing stands and the profile says
 * why it is empty; no CUPTI time is claimed. */
START_TEST(t_profile_request_cpu) {
  ir_workload_t *w = tu_load_sets("vector_add", "N=1024");
  cg_module_t *m = lower(w, NULL, CG_TARGET_C);
  tn_target_t cpu = target("cpu");
  ms_candidate_t *c = from_module(&cpu, m);
  ms_builder_t *b = builder(0, 0);
  ms_run_opts_t o = {.min_secs = 0.01, .profile_metrics = ms_profile_metrics, .profile_nmetrics = MS_PROFILE_NMETRICS};
  ms_runner_t *r = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ms_runner_new(&o, &r, &err) == TN_OK, "%s", err.msg);
  ck_assert_msg(ms_runner_set_workload(r, w->func, 1, &err) == TN_OK, "%s", err.msg);
  ms_result_t res;
  build_and_run(r, b, &c, &res, 1);
  assert_measured_ok(&res, "CPU candidate with a profile request");
  ck_assert_ptr_nonnull(res.profile);
  ck_assert_msg(strstr(res.profile, "\"error\":\"the cpu backend has no hardware profiler"), "%s", res.profile);
  ck_assert_double_eq(res.cupti_median_secs, 0);
  ck_assert(!res.times_disagree);
  ck_assert_str_eq(res.cupti_error, "");
  char *j = ms_result_to_json(&res);
  ck_assert_ptr_nonnull(strstr(j, "\"profile\":"));
  free(j);
  ms_result_clear(&res);
  ck_assert_ptr_null(res.profile);
  ms_runner_free(r);
  teardown(b, c, m, w);
}
END_TEST

/* TUNED_CUPTI=off and a path that is no library: no CUPTI, said so (the
 * measurement keeps its event times). Each test runs in its own process, so
 * the library is looked up afresh. */
START_TEST(t_cupti_unavailable) {
  static const char *const cases[][2] = {{"off", "CUPTI is off (TUNED_CUPTI=off)"},
                                         {"/nonexistent/libcupti.so.13", "/nonexistent/libcupti.so.13"}};
  setenv("TUNED_CUPTI", cases[_i][0], 1);
  ms_cupti_config_t c;
  tn_err_t err = {0};
  ck_assert_int_eq(ms_cupti_config("GH100", ms_profile_metrics, MS_PROFILE_NMETRICS, &c, &err), TN_EUNSUPPORTED);
  ck_assert_msg(strstr(err.msg, cases[_i][1]), "%s", err.msg);
  ck_assert_ptr_null(c.image);
  unsetenv("TUNED_CUPTI");
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("measure");
  TCase *tc = tcase_create("records");
  tcase_add_test(tc, t_status_json);
  tcase_add_test(tc, t_ptxas_parse);
  suite_add_tcase(s, tc);
  tc = tcase_create("cupti");
  tcase_add_test(tc, t_times_disagree);
  tcase_add_test(tc, t_cupti_launch_secs);
  if (WITH_CUDA) tcase_add_test(tc, t_cupti_config);
  if (WITH_CUDA) tcase_add_loop_test(tc, t_cupti_unavailable, 0, 2);
  tcase_add_test(tc, t_profile_request_cpu);
  suite_add_tcase(s, tc);
  tc = tcase_create("course");
  tcase_set_timeout(tc, 300);
  if (WITH_OPENCL) tcase_add_loop_test(tc, t_course_opencl, 0, (int)TN_ARRAY_LEN(gpu_course));
  if (WITH_CUDA) tcase_add_loop_test(tc, t_course_nvrtc, 0, (int)TN_ARRAY_LEN(gpu_course));
  tcase_add_test(tc, t_course_cpu);
  tcase_add_loop_test(tc, t_course_cuda_host, 0, (int)TN_ARRAY_LEN(gpu_course));
  suite_add_tcase(s, tc);
  tc = tcase_create("planted");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, t_planted_cpu);
  tcase_add_test(tc, t_outside_kill);
  if (WITH_OPENCL) tcase_add_test(tc, t_planted_opencl);
  tcase_add_test(tc, t_planted_cuda_host);
  tcase_add_test(tc, t_fp16_cuda);
  if (WITH_CUDA) tcase_add_test(tc, t_planted_cuda_build);
  if (WITH_CUDA) tcase_add_test(tc, t_wmma_arch);
  if (WITH_CUDA) tcase_add_test(tc, t_cuda_no_driver);
  if (!WITH_CUDA || !WITH_OPENCL) tcase_add_test(tc, t_missing_backend);
  suite_add_tcase(s, tc);
  tc = tcase_create("builder");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, t_build_timeout_cc);
  tcase_add_test(tc, t_compilers);
  tcase_add_test(tc, t_compiler_missing);
  tcase_add_loop_test(tc, t_build_timeout_in_proc, 0, (int)TN_ARRAY_LEN(slow_cases));
  tcase_add_loop_test(tc, t_build_process_killed, 0, (int)TN_ARRAY_LEN(slow_cases));
  if (WITH_CUDA) tcase_add_test(tc, t_build_hopper);
  if (WITH_CUDA) tcase_add_test(tc, t_nvrtc_proc);
  if (WITH_CUDA) tcase_add_test(tc, t_nvrtc_proc_orphan);
  tcase_add_test(tc, t_build_pause);
  tcase_add_test(tc, t_build_cc_killed);
  tcase_add_test(tc, t_build_async);
  tcase_add_test(tc, t_build_opencl_after_pool);
  tcase_add_test(tc, t_temp_dir_sweep);
  tcase_add_test(tc, t_build_cancel);
  tcase_add_test(tc, t_runner_misc);
  tcase_add_test(tc, t_worker_killed_at_start);
  tcase_add_test(tc, t_slow_cutoff);
  suite_add_tcase(s, tc);
  tc = tcase_create("devices");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, t_device_names);
  tcase_add_test(tc, t_device_fifo);
  tcase_add_test(tc, t_device_stop);
  tcase_add_test(tc, t_runners_share_device);
  suite_add_tcase(s, tc);
  tc = tcase_create("tunectl");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, t_tunectl_run);
  tcase_add_test(tc, t_tunectl_wmma);
  tcase_add_test(tc, t_tunectl_emit);
  tcase_add_test(tc, t_tunectl_profile);
  suite_add_tcase(s, tc);
  return s;
}

TN_TEST_MAIN(make_suite)
