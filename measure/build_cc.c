/* build_cc.c — CPU builds: the generated C goes to cand.c in the build dir
 * and the system compiler ($CC, default cc) makes cand.so with OpenMP, under
 * a timeout that kills the compiler's process group. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ms_internal.h"

#define CC_MAX_ARGS 48
#define CC_LOG_MAX (64 << 10)

/* The compilers: C for the cpu target, C++ for cuda-host. */
typedef struct compiler {
  const char *env, *fallback;
} compiler_t;
static const compiler_t cc_c = {"CC", "cc"}, cc_cxx = {"CXX", "c++"};

/* Splits $CC (or "cc"; $CXX or "c++") on blanks into argv; returns the count. */
static int compiler_argv(const compiler_t *k, char *buf, size_t size, char **argv, int max) {
  const char *cc = getenv(k->env);
  snprintf(buf, size, "%s", cc && *cc ? cc : k->fallback);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok && n < max; tok = strtok_r(NULL, " \t", &save))
    argv[n++] = tok;
  return n;
}

static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct version {
  char cc[256], text[128];
} version_t;
static version_t versions[2]; /* C, C++ */

/* First line of `$CC --version` (`$CXX --version`), cached per command. */
static void compiler_version(const compiler_t *k, double timeout_s, char *out, size_t size) {
  char buf[256], *argv[CC_MAX_ARGS];
  int n = compiler_argv(k, buf, sizeof buf, argv, CC_MAX_ARGS - 2);
  char key[256];
  snprintf(key, sizeof key, "%s", getenv(k->env) && *getenv(k->env) ? getenv(k->env) : k->fallback);
  version_t *v = &versions[k == &cc_cxx];
  pthread_mutex_lock(&version_lock);
  if (strcmp(v->cc, key) != 0 || !v->text[0]) {
    argv[n++] = "--version";
    argv[n] = NULL;
    tn_buf_t log;
    tn_buf_init(&log);
    int st = 0;
    snprintf(v->text, sizeof v->text, "%s", argv[0]);
    if (ms_run_command(argv, TN_MIN(timeout_s, 10.0), &log, 4096, &st, NULL) == TN_OK && WIFEXITED(st) &&
        WEXITSTATUS(st) == 0) {
      const char *s = tn_buf_str(&log);
      snprintf(v->text, sizeof v->text, "%.*s", (int)strcspn(s, "\n"), s);
    }
    tn_buf_free(&log);
    snprintf(v->cc, sizeof v->cc, "%s", key);
  }
  snprintf(out, size, "%s", v->text);
  pthread_mutex_unlock(&version_lock);
}

/* Compiles src into so with the compiler and flags; the artifact or the
 * failure into res. */
static void compile(const compiler_t *k, const char *const *flags, int nflags, const char *src, const char *so,
                    const char *libs, double timeout_s, ms_result_t *res) {
  char buf[256], *argv[CC_MAX_ARGS];
  tn_err_t err = {0};
  int n = compiler_argv(k, buf, sizeof buf, argv, CC_MAX_ARGS - nflags - 5);
  for (int i = 0; i < nflags; i++) argv[n++] = (char *)flags[i];
  argv[n++] = "-o";
  argv[n++] = (char *)so;
  argv[n++] = (char *)src;
  if (libs) argv[n++] = (char *)libs;
  argv[n] = NULL;
  tn_buf_t log;
  tn_buf_init(&log);
  int st = 0;
  int rc = ms_run_command(argv, timeout_s, &log, CC_LOG_MAX, &st, &err);
  struct stat sb;
  if (rc == TN_ERANGE) {
    ms_result_fail(res, MS_TIMEOUT, "build: %s\n%s", err.msg, tn_buf_str(&log));
  } else if (rc < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "build: %s", err.msg);
  } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || stat(so, &sb) < 0) {
    char how[96];
    if (WIFSIGNALED(st)) ms_signal_text(WTERMSIG(st), how, sizeof how);
    else snprintf(how, sizeof how, "status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    ms_result_fail(res, MS_BUILD_ERROR, "%s failed (%s) compiling %s:\n%s", argv[0], how, src, tn_buf_str(&log));
  } else {
    snprintf(res->artifact, sizeof res->artifact, "%s", so);
  }
  tn_buf_free(&log);
}

void ms_build_c(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res) {
  char src[MS_PATH_MAX], so[MS_PATH_MAX], march[64];
  tn_err_t err = {0};
  snprintf(src, sizeof src, "%s/cand.c", dir);
  snprintf(so, sizeof so, "%s/cand.so", dir);
  snprintf(march, sizeof march, "-march=%s", cand->target.arch[0] ? cand->target.arch : "native");
  snprintf(res->build.arch, sizeof res->build.arch, "%s", cand->target.arch[0] ? cand->target.arch : "native");
  compiler_version(&cc_c, timeout_s, res->build.compiler, sizeof res->build.compiler);
  if (ms_write_file(src, cand->source, strlen(cand->source), &err) < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    return;
  }
  const char *flags[] = {"-O3", march, "-fopenmp", "-shared", "-fPIC"};
  compile(&cc_c, flags, (int)TN_ARRAY_LEN(flags), src, so, "-lm", timeout_s, res);
}

/* ---- cuda-host --------------------------------------------------------------- */

extern const char ms_cuda_host_header[]; /* measure/cuda_host.h (cuda_host_header.c) */

/* Element types of the CUDA kernels' pointer parameters, by ir_dtype_t. */
static const char *const cuda_ptr_type[] = {"unsigned char", "int", "long long", "__half", "float", "double",
                                            "__nv_bfloat16"};

/* The launcher: tuned_entry runs the candidate's kernels in order over
 * their grids, as the CUDA worker would launch them. */
static void launcher(const ms_candidate_t *cand, tn_buf_t *o) {
  tn_buf_put(o, "\nextern \"C\" int tuned_entry(void **args) {\n");
  for (int k = 0; k < cand->nkernels; k++) {
    const cg_kernel_t *kd = &cand->kernels[k];
    tn_buf_printf(o, "  tuned_host::launch(\"%s\", dim3{%lldu, %lldu, %lldu}, dim3{%lldu, %lldu, %lldu}, [&] {\n    %s(",
                  kd->name, (long long)kd->grid[0], (long long)kd->grid[1], (long long)kd->grid[2],
                  (long long)kd->block[0], (long long)kd->block[1], (long long)kd->block[2], kd->name);
    for (int i = 0; i < cand->nparams; i++) {
      int t = (int)cand->params[i].dtype;
      tn_buf_printf(o, "%s(%s *)args[%d]", i ? ", " : "",
                    t >= 0 && t < (int)TN_ARRAY_LEN(cuda_ptr_type) ? cuda_ptr_type[t] : "void", i);
    }
    tn_buf_put(o, ");\n  });\n");
  }
  tn_buf_put(o, "  return 0;\n}\n");
}

void ms_build_cuda_host(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res) {
  char src[MS_PATH_MAX], so[MS_PATH_MAX], header[MS_PATH_MAX], fp16[MS_PATH_MAX], bf16[MS_PATH_MAX];
  char inc[MS_PATH_MAX + 4];
  tn_err_t err = {0};
  snprintf(src, sizeof src, "%s/cand.cc", dir);
  snprintf(so, sizeof so, "%s/cand.so", dir);
  snprintf(header, sizeof header, "%s/tuned_cuda_host.h", dir);
  snprintf(fp16, sizeof fp16, "%s/cuda_fp16.h", dir); /* the harness defines __half */
  snprintf(bf16, sizeof bf16, "%s/cuda_bf16.h", dir); /* and __nv_bfloat16 */
  snprintf(inc, sizeof inc, "-I%s", dir);
  snprintf(res->build.arch, sizeof res->build.arch, "host");
  compiler_version(&cc_cxx, timeout_s, res->build.compiler, sizeof res->build.compiler);
  tn_buf_t text;
  tn_buf_init(&text);
  tn_buf_put(&text, "#include \"tuned_cuda_host.h\"\n");
  tn_buf_put(&text, cand->source);
  launcher(cand, &text);
  static const char fp16_text[] = "/* cuda-host: __half and __nv_bfloat16 come from tuned_cuda_host.h */\n";
  if (ms_write_file(header, ms_cuda_host_header, strlen(ms_cuda_host_header), &err) < 0 ||
      ms_write_file(fp16, fp16_text, strlen(fp16_text), &err) < 0 ||
      ms_write_file(bf16, fp16_text, strlen(fp16_text), &err) < 0 ||
      ms_write_file(src, tn_buf_str(&text), text.len, &err) < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    tn_buf_free(&text);
    return;
  }
  tn_buf_free(&text);
  /* UBSan: a misaligned vector access, or an index past a shared or local
   * array, stops the run with its place (reported as a run error). */
  const char *flags[] = {"-std=c++17", "-O1", "-fsanitize=alignment,bounds", "-fno-sanitize-recover=all",
                         "-Wno-unknown-pragmas", "-shared", "-fPIC", inc};
  compile(&cc_cxx, flags, (int)TN_ARRAY_LEN(flags), src, so, "-lm", timeout_s, res);
}
