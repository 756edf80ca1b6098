/* bench_measure.c — times the measurement pipeline: build time per candidate
 * (NVRTC CUBIN, cc, OpenCL) for the course matmul schedules, what NVRTC's
 * build process adds per compile, and the
 * worker's per-candidate overhead (a batch of trivial candidates, minus the
 * kernel time they measured).  See README.md. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "measure/measure.h"
#include "schedule/schedule.h"
#include "tuned_config.h"

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--builds N] [--candidates K]\n"
          "  build time: N builds (default 5) of each course candidate, one at a time\n"
          "  worker overhead: a batch of K trivial candidates (default 50) per backend\n",
          argv0);
  return 2;
}

static void die(const char *what, const tn_err_t *err) {
  fprintf(stderr, "bench_measure: %s: %s\n", what, err->msg);
  exit(1);
}

/* Lowers workloads/<wl>.tw (with sets) scheduled by the course trace (or
 * not) for lang. */
static cg_module_t *lower(const char *wl, const char *sets, const char *trace, cg_target_t lang, ir_workload_t **wout) {
  char path[512], buf[128];
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t ov[8];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", sets);
  for (char *tok = strtok(buf, ","); tok && n < 8; tok = strtok(NULL, ","))
    if (ir_param_set_parse(tok, a, &ov[n++], &err) < 0) die(tok, &err);
  snprintf(path, sizeof path, TUNED_SOURCE_ROOT "/workloads/%s.tw", wl);
  ir_workload_t *w = NULL;
  if (ir_workload_load(path, ov, n, &w, &err) < 0) die(path, &err);
  tn_arena_free(a);
  sch_t *s = NULL;
  if (trace) {
    char *text = NULL;
    size_t len;
    sch_trace_t *t = NULL;
    snprintf(path, sizeof path, TUNED_SOURCE_ROOT "/workloads/schedules/%s.json", trace);
    if (tn_read_file(path, 1 << 20, &text, &len, &err) < 0 || sch_trace_from_json(text, len, &t, &err) < 0 ||
        sch_replay(w->func, t, 1, &s, &err) < 0)
      die(path, &err);
    free(text);
    sch_trace_free(t);
  }
  cg_module_t *m = NULL;
  if (cg_lower(s ? sch_func(s) : w->func, lang, NULL, &m, &err) < 0) die("cg_lower", &err);
  sch_free(s);
  if (wout) *wout = w;
  else ir_workload_free(w);
  return m;
}

static ms_candidate_t *candidate(const char *target, const cg_module_t *m) {
  tn_target_t t;
  ms_candidate_t *c = NULL;
  tn_err_t err = {0};
  if (tn_target_lookup(target, NULL, &t, &err) < 0 || ms_candidate_from_module(&t, m, &c, &err) < 0) die(target, &err);
  return c;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* ---- build time ------------------------------------------------------------- */

static void bench_build(const char *label, const char *how, ms_candidate_t *c, int nbuilds) {
  ms_build_opts_t o = {.nthreads = 1};
  ms_builder_t *b = NULL;
  tn_err_t err = {0};
  if (ms_builder_new(&o, &b, &err) < 0) die("builder", &err);
  double first = 0, sum = 0, lo = 1e30, hi = 0;
  for (int i = 0; i < nbuilds; i++) {
    ms_result_t r;
    ms_build_batch(b, &c, 1, &r, &err);
    if (r.status != MS_OK) {
      printf("%-30s %-22s  %s: %.200s\n", label, how, ms_status_name(r.status), r.error);
      ms_builder_free(b);
      return;
    }
    double s = r.build.build_secs * 1e3;
    if (i == 0) first = s;
    else sum += s, lo = TN_MIN(lo, s), hi = TN_MAX(hi, s);
    ms_result_clear(&r);
  }
  if (nbuilds > 1)
    printf("%-30s %-22s %6d %9.1f %9.1f %9.1f %9.1f\n", label, how, nbuilds, first, sum / (nbuilds - 1), lo, hi);
  else
    printf("%-30s %-22s %6d %9.1f %9s %9s %9s\n", label, how, nbuilds, first, "-", "-", "-");
  ms_builder_free(b);
}

/* Throughput of the pool (one thread per core) on n copies of c. */
static void bench_pool(const char *label, ms_candidate_t *c, int n) {
  ms_builder_t *b = NULL;
  tn_err_t err = {0};
  if (ms_builder_new(NULL, &b, &err) < 0) die("builder", &err);
  ms_candidate_t **cs = calloc((size_t)n, sizeof *cs);
  ms_result_t *rs = calloc((size_t)n, sizeof *rs);
  for (int i = 0; i < n; i++) cs[i] = c;
  double t0 = tn_now();
  ms_build_batch(b, cs, n, rs, &err);
  double secs = tn_now() - t0;
  int ok = 0;
  for (int i = 0; i < n; i++) ok += rs[i].status == MS_OK, ms_result_clear(&rs[i]);
  printf("%-30s pool of %ld threads: %d builds (%d ok) in %.2f s = %.1f builds/s\n", label,
         sysconf(_SC_NPROCESSORS_ONLN), n, ok, secs, n / secs);
  free(cs);
  free(rs);
  ms_builder_free(b);
}

/* ---- NVRTC build process ------------------------------------------------------ */

/* What compiling in the build process (ms_nvrtc_compile) adds to NVRTC in
 * this process (ms_cuda_compile): the same source n times each way,
 * alternating (and which goes first) so that load changes hit both alike;
 * the first compile of each way (NVRTC's set-up, and the process start) is
 * reported apart.  'round trip' is the build process's wall time minus
 * NVRTC's own time in it: the request, the reply and the CUBIN. */
static void bench_nvrtc_proc(const char *label, const char *source, int n) {
  ms_build_proc_t *p = NULL;
  tn_err_t err = {0};
  if (ms_build_proc_new(NULL, NULL, &p, &err) < 0) die("build process", &err);
  double here = 0, there = 0, trip = 0, first_here = 0, first_there = 0;
  for (int i = 0; i < 2 * n + 2; i++) {
    ms_cuda_output_t o;
    bool in_proc = (i % 2 == 1) != (i / 2 % 2 == 1); /* pairs here-proc, then proc-here */
    double t0 = tn_now();
    int rc = in_proc ? ms_nvrtc_compile(p, source, "sm_90", 60, &o, &err) : ms_cuda_compile(source, "sm_90", &o, &err);
    if (rc < 0) die(in_proc ? "NVRTC in the build process" : "NVRTC", &err);
    double t = tn_now() - t0;
    if (i < 2) *(in_proc ? &first_there : &first_here) = t;
    else if (in_proc) there += t, trip += t - o.nvrtc_secs;
    else here += t;
    ms_cuda_output_free(&o);
  }
  printf("%-24s %4d %11.1f %11.1f %9.2f %9.2f %9.2f %10.2f\n", label, n, first_here * 1e3, first_there * 1e3,
         here * 1e3 / n, there * 1e3 / n, (there - here) * 1e3 / n, trip * 1e3 / n);
  ms_build_proc_free(p);
}

/* ---- worker overhead -------------------------------------------------------- */

/* Runs k copies of a trivial built candidate in one batch; the overhead per
 * candidate is the batch's wall time minus the kernel time spent in it
 * (timed repeats plus the untimed verification and warm-up runs, estimated
 * from the median). */
static void bench_worker(const char *label, const char *target, cg_target_t lang, const char *trace, int k) {
  ir_workload_t *w = NULL;
  cg_module_t *m = lower("vector_add", "N=1024", trace, lang, &w);
  ms_candidate_t *c = candidate(target, m);
  ms_builder_t *b = NULL;
  ms_runner_t *r = NULL;
  ms_run_opts_t ro = {.min_secs = 1e-6, .min_repeats = 3, .max_repeats = 3};
  tn_err_t err = {0};
  if (ms_builder_new(NULL, &b, &err) < 0 || ms_runner_new(&ro, &r, &err) < 0 ||
      ms_runner_set_workload(r, w->func, 1, &err) < 0)
    die(label, &err);
  ms_candidate_t **cs = calloc((size_t)k, sizeof *cs);
  ms_result_t *rs = calloc((size_t)k, sizeof *rs);
  for (int i = 0; i < k; i++) cs[i] = c;
  ms_build_batch(b, cs, 1, rs, &err);
  if (rs[0].status != MS_OK) {
    printf("%-12s not measured: %s: %.200s\n", label, ms_status_name(rs[0].status), rs[0].error);
    goto out;
  }
  for (int i = 1; i < k; i++) rs[i] = rs[0], rs[i].run_secs = NULL, rs[i].profile = NULL;
  double t0 = tn_now();
  if (ms_runner_start(r, &err) < 0) die("worker", &err);
  double start = tn_now() - t0;
  t0 = tn_now();
  if (ms_runner_run_batch(r, cs, rs, k, &err) < 0) die("run", &err);
  double wall = tn_now() - t0, kernel = 0;
  int ok = 0;
  for (int i = 0; i < k; i++) {
    ok += rs[i].status == MS_OK;
    for (int j = 0; j < rs[i].nrepeats; j++) kernel += rs[i].run_secs[j];
    kernel += 2 * rs[i].median_secs;
  }
  if (ok < k) printf("%-12s %d of %d candidates failed: %.200s\n", label, k - ok, k, rs[0].error);
  printf("%-12s %6d %12.2f %12.3f %12.3f %14.3f\n", label, k, start * 1e3, wall * 1e3 / k, kernel * 1e3 / k,
         (wall - kernel) * 1e3 / k);
out:
  for (int i = 0; i < k; i++) ms_result_clear(&rs[i]);
  free(cs);
  free(rs);
  ms_runner_free(r);
  ms_builder_free(b);
  ms_candidate_free(c);
  cg_module_free(m);
  ir_workload_free(w);
}

int main(int argc, char **argv) {
  int nbuilds = 5, k = 50;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--builds") == 0 && i + 1 < argc) nbuilds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--candidates") == 0 && i + 1 < argc) k = atoi(argv[++i]);
    else return usage(argv[0]);
  }
  if (nbuilds < 1 || k < 1) return usage(argv[0]);
  /* A fresh PoCL cache, so the first OpenCL build is a cold one. */
  char cache[] = "/tmp/tuned-bench-pocl-XXXXXX";
  bool own_cache = !getenv("POCL_CACHE_DIR") && mkdtemp(cache);
  if (own_cache) setenv("POCL_CACHE_DIR", cache, 1);

  const char *mm = "M=1024,N=1024,K=1024";
  cg_module_t *cuda = lower("matmul", mm, "matmul_shared", CG_TARGET_CUDA, NULL);
  cg_module_t *c = lower("matmul", mm, "matmul_cpu", CG_TARGET_C, NULL);
  cg_module_t *ocl = lower("matmul", mm, "matmul_shared", CG_TARGET_OPENCL, NULL);
  ms_candidate_t *ccuda = candidate("nvidia/h100", cuda), *cc = candidate("cpu", c),
                 *cocl = candidate("opencl/pocl-cpu", ocl);

  printf("Build time per candidate (one build at a time, ms; 'rest' = builds 2..N)\n\n");
  printf("%-30s %-22s %6s %9s %9s %9s %9s\n", "candidate", "builder", "builds", "first", "rest avg", "rest min",
         "rest max");
  bench_build("matmul_shared CUDA sm_90", "NVRTC -> PTX + CUBIN", ccuda, nbuilds);
  bench_build("matmul_cpu C", "cc -O3 -fopenmp", cc, nbuilds);
  bench_build("matmul_shared OpenCL", "clBuildProgram (PoCL)", cocl, nbuilds);
  printf("\n");
  bench_pool("matmul_shared CUDA sm_90", ccuda, 4 * nbuilds);
  bench_pool("matmul_cpu C", cc, 4 * nbuilds);

  if (TUNED_HAVE_CUDA) {
    printf("\nNVRTC in this process vs in the build process (tuned-worker --build), ms; 'first' = the first "
           "compile\n(NVRTC set-up; the build process's start), then the average of N more each way\n\n");
    printf("%-24s %4s %11s %11s %9s %9s %9s %10s\n", "source", "N", "first here", "first proc", "here", "in proc",
           "overhead", "round trip");
    bench_nvrtc_proc("empty kernel", "extern \"C\" __global__ void k(float *o) { o[threadIdx.x] = 1.0f; }\n",
                     4 * nbuilds);
    bench_nvrtc_proc("matmul_shared 1024^3", ccuda->source, 4 * nbuilds);
  }

  printf("\nWorker overhead per candidate (vector_add N=1024, 3 timed repeats each, ms)\n\n");
  printf("%-12s %6s %12s %12s %12s %14s\n", "backend", "cands", "worker start", "wall/cand", "kernel/cand",
         "overhead/cand");
  bench_worker("cpu", "cpu", CG_TARGET_C, NULL, k);
  bench_worker("opencl", "opencl/pocl-cpu", CG_TARGET_OPENCL, "vector_add_gpu", k);
  ms_backend_status_t st;
  ms_backend_probe(MS_BACKEND_CUDA, &st);
  if (st.available) bench_worker("cuda", "nvidia/h100", CG_TARGET_CUDA, "vector_add_gpu", k);
  else printf("%-12s skipped: %s\n", "cuda", st.detail);

  ms_candidate_free(ccuda);
  ms_candidate_free(cc);
  ms_candidate_free(cocl);
  cg_module_free(cuda);
  cg_module_free(c);
  cg_module_free(ocl);
  if (own_cache) nftw(cache, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
