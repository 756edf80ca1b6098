/* build_cc.c — CPU builds: the generated C goes to cand.c in the build dir
 * and the target's host compiler (gcc, clang or the system's cc; $TUNED_CC
 * replaces it) makes cand.so with OpenMP, under a timeout that kills the
 * compiler's process group.  cuda-host builds are the same in C++. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_internal.h"

#define CC_MAX_ARGS 48
#define CC_LOG_MAX (64 << 10)

/* The command that builds a target's candidates, into buf: $TUNED_CC (C)
 * or $TUNED_CXX (C++, cuda-host) when set, else the target's "cc" family. */
static const char *compiler_command(const tn_target_t *t, char *buf, size_t size) {
  bool cxx = t->kind == TN_TARGET_CUDA_HOST;
  const char *env = getenv(cxx ? "TUNED_CXX" : "TUNED_CC");
  if (env && *env) snprintf(buf, size, "%s", env);
  else if (strcmp(t->cc, "gcc") == 0) snprintf(buf, size, "%s", cxx ? "g++" : "gcc");
  else if (strcmp(t->cc, "clang") == 0) snprintf(buf, size, "%s", cxx ? "clang++" : "clang");
  else snprintf(buf, size, "%s", cxx ? "c++" : "cc");
  return buf;
}

/* Splits the command on blanks into argv; returns the count. */
static int compiler_argv(const tn_target_t *t, char *buf, size_t size, char **argv, int max) {
  compiler_command(t, buf, size);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok && n < max; tok = strtok_r(NULL, " \t", &save))
    argv[n++] = tok;
  return n;
}

/* Where the command's program is: itself when it names a path, else the
 * first executable of that name in $PATH. */
static bool find_program(const char *prog, char *out, size_t size) {
  if (!prog || !*prog) return false; /* (gcc -fsanitize=undefined cannot tell that callers never pass NULL) */
  if (strchr(prog, '/')) {
    snprintf(out, size, "%s", prog);
    return access(prog, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(out, size, "%s/%s", *d ? d : ".", prog);
    if (access(out, X_OK) == 0) return true;
  }
  return false;
}

int ms_compiler_check(const tn_target_t *t, tn_err_t *err) {
  if (!tn_target_uses_cc(t->kind)) return TN_OK;
  char buf[256], *argv[CC_MAX_ARGS], where[1024];
  bool cxx = t->kind == TN_TARGET_CUDA_HOST, env = getenv(cxx ? "TUNED_CXX" : "TUNED_CC") && *getenv(cxx ? "TUNED_CXX" : "TUNED_CC");
  if (compiler_argv(t, buf, sizeof buf, argv, CC_MAX_ARGS) == 0)
    return tn_err_set(err, TN_EINVAL, "$%s is blank; unset it or name a compiler", cxx ? "TUNED_CXX" : "TUNED_CC");
  if (find_program(argv[0], where, sizeof where)) return TN_OK;
  if (env)
    return tn_err_set(err, TN_EINVAL, "target %s builds with $%s = \"%s\", and %s is not an executable file or in $PATH",
                      t->name, cxx ? "TUNED_CXX" : "TUNED_CC", getenv(cxx ? "TUNED_CXX" : "TUNED_CC"), argv[0]);
  return tn_err_set(err, TN_EINVAL, "target %s builds with %s (\"cc\": \"%s\"), which is not installed (not in $PATH); "
                    "install it (scripts/install-deps), or choose another compiler with --cc gcc|clang|auto or "
                    "$%s", t->name, argv[0], t->cc, cxx ? "TUNED_CXX" : "TUNED_CC");
}

static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct version {
  char cc[256], text[128];
  bool clang;
  char ubsan_dir[MS_PATH_MAX]; /* clang: where its UBSan runtime is ("" for gcc, which links libubsan itself) */
} version_t;

/* What a build needs to know of its compiler besides the command. */
typedef struct cc_facts {
  bool clang;
  char ubsan_dir[MS_PATH_MAX];
} cc_facts_t;
static version_t versions[4]; /* the last few commands asked about */
static int version_next;

/* The first line of what argv (NULL-terminated) prints, "" if it fails. */
static void first_line(char **argv, double timeout_s, char *out, size_t size) {
  tn_buf_t log;
  tn_buf_init(&log);
  int st = 0;
  out[0] = 0;
  if (ms_run_command(argv, NULL, TN_MIN(timeout_s, 10.0), &log, 4096, &st, NULL) == TN_OK && WIFEXITED(st) &&
      WEXITSTATUS(st) == 0) {
    const char *s = tn_buf_str(&log);
    snprintf(out, size, "%.*s", (int)strcspn(s, "\n"), s);
  }
  tn_buf_free(&log);
}

/* Asks clang where its UBSan runtime is: a shared library built with
 * -fsanitize needs it at run time (-shared-libsan and an rpath to it). */
static void find_ubsan_dir(char **argv, int n, double timeout_s, version_t *v) {
  argv[n] = "-print-file-name=libclang_rt.ubsan_standalone-x86_64.so";
  argv[n + 1] = NULL;
  char path[MS_PATH_MAX];
  first_line(argv, timeout_s, path, sizeof path);
  char *slash = strrchr(path, '/');
  if (slash) *slash = 0;
  snprintf(v->ubsan_dir, sizeof v->ubsan_dir, "%s", slash ? path : "");
}

/* First line of `COMMAND --version`, cached per command, and whether it is
 * clang (with its UBSan runtime's directory) into facts when asked. */
static void compiler_version(const tn_target_t *t, double timeout_s, char *out, size_t size, cc_facts_t *facts) {
  char buf[256], key[256], *argv[CC_MAX_ARGS];
  compiler_command(t, key, sizeof key);
  int n = compiler_argv(t, buf, sizeof buf, argv, CC_MAX_ARGS - 2);
  pthread_mutex_lock(&version_lock);
  version_t *v = NULL;
  for (int i = 0; i < (int)TN_ARRAY_LEN(versions) && !v; i++)
    if (strcmp(versions[i].cc, key) == 0 && versions[i].text[0]) v = &versions[i];
  if (!v) {
    v = &versions[version_next++ % (int)TN_ARRAY_LEN(versions)];
    v->ubsan_dir[0] = 0;
    if (n) {
      argv[n] = "--version";
      argv[n + 1] = NULL;
      first_line(argv, timeout_s, v->text, sizeof v->text);
      v->clang = strstr(v->text, "clang") != NULL;
      if (v->clang) find_ubsan_dir(argv, n, timeout_s, v);
    }
    if (!v->text[0]) snprintf(v->text, sizeof v->text, "%s", n ? argv[0] : "?");
    snprintf(v->cc, sizeof v->cc, "%s", key);
  }
  snprintf(out, size, "%s", v->text);
  if (facts) {
    facts->clang = v->clang;
    snprintf(facts->ubsan_dir, sizeof facts->ubsan_dir, "%s", v->ubsan_dir);
  }
  pthread_mutex_unlock(&version_lock);
}

/* Compiles src into so with the compiler and flags; the artifact or the
 * failure into res. */
static void compile(const tn_target_t *t, const char *const *flags, int nflags, const char *src, const char *so,
                    const char *libs, double timeout_s, ms_result_t *res) {
  char buf[256], *argv[CC_MAX_ARGS];
  tn_err_t err = {0};
  int n = compiler_argv(t, buf, sizeof buf, argv, CC_MAX_ARGS - nflags - 5);
  if (n == 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "build: no compiler ($%s is blank)",
                   t->kind == TN_TARGET_CUDA_HOST ? "TUNED_CXX" : "TUNED_CC");
    return;
  }
  for (int i = 0; i < nflags; i++) argv[n++] = (char *)flags[i];
  argv[n++] = "-o";
  argv[n++] = (char *)so;
  argv[n++] = (char *)src;
  if (libs) argv[n++] = (char *)libs;
  argv[n] = NULL;
  tn_buf_t log;
  tn_buf_init(&log);
  int st = 0, rc = TN_OK;
  char dir[MS_PATH_MAX]; /* the compiler's temp files: removed with the build's directory */
  const char *slash = strrchr(so, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - so) : 1, slash ? so : ".");
  for (int life = 0; life < 2; life++) { /* a SIGKILL we did not send: once more (see build_in_proc) */
    tn_buf_free(&log);
    tn_buf_init(&log);
    rc = ms_run_command(argv, dir, timeout_s, &log, CC_LOG_MAX, &st, &err);
    if (rc != TN_OK || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) break;
  }
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
  cc_facts_t cc;
  compiler_version(&cand->target, timeout_s, res->build.compiler, sizeof res->build.compiler, &cc);
  if (ms_write_file(src, cand->source, strlen(cand->source), &err) < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    return;
  }
  /* clang stops at 256 nested parentheses; an inlined chain of elementwise
   * blocks nests its value deeper (gcc has no such limit).  -Bsymbolic: the
   * library's calls of its own functions stay its own, even where the
   * worker's libraries export the same name (an entry point named
   * cJSON_Delete would otherwise call libcjson's).  -fno-math-errno: no
   * kernel reads errno, and with it sqrtf is one vector instruction instead
   * of a scalar call per element (the values are the same). */
  const char *flags[] = {"-O3", march, "-fno-math-errno", "-fopenmp", "-shared", "-fPIC", "-Wl,-Bsymbolic",
                         "-fbracket-depth=1000000"};
  int nflags = (int)TN_ARRAY_LEN(flags) - (cc.clang ? 0 : 1); /* the last is clang's */
  compile(&cand->target, flags, nflags, src, so, "-lm", timeout_s, res);
}

/* ---- cuda-host --------------------------------------------------------------- */

extern const char ms_cuda_host_header[]; /* measure/cuda_host.h (cuda_host_header.c) */

/* Element types of the CUDA kernels' pointer parameters, by ir_dtype_t. */
static const char *const cuda_ptr_type[] = {"unsigned char", "int", "long long", "__half", "float", "double",
                                            "__nv_bfloat16"};

/* The launcher: tuned_entry_<first kernel's name> runs the candidate's
 * kernels in order over their grids, as the CUDA worker would launch them:
 * a kernel's tensor maps made by the harness's cuTensorMapEncodeTiled from
 * the arguments' addresses, passed after them. */
static void launcher(const ms_candidate_t *cand, tn_buf_t *o) {
  tn_buf_printf(o, "\nextern \"C\" int tuned_entry_%s(void **args) {\n", cand->kernels[0].name);
  for (int k = 0; k < cand->nkernels; k++) {
    const cg_kernel_t *kd = &cand->kernels[k];
    tn_buf_put(o, "  {\n");
    for (int i = 0; i < kd->nmaps; i++) {
      const cg_tensor_map_t *t = &kd->maps[i];
      tn_buf_printf(o, "    static tuned_tensor_map %s;\n    tuned_host::kernel_name = \"%s\";\n"
                    "    tuned_host::tensor_map_2d(&%s, args[%d], %d, %lldu, %lldu, %lldu, %du, %du, %d);\n",
                    t->name, kd->name, t->name, t->param, ir_dtype_bytes(cand->params[t->param].dtype),
                    (long long)t->dims[0], (long long)t->dims[1], (long long)t->stride_bytes, t->box[0], t->box[1],
                    t->swizzle);
    }
    tn_buf_printf(o, "    tuned_host::launch(\"%s\", dim3{%lldu, %lldu, %lldu}, dim3{%lldu, %lldu, %lldu}, [&] {\n      %s(",
                  kd->name, (long long)kd->grid[0], (long long)kd->grid[1], (long long)kd->grid[2],
                  (long long)kd->block[0], (long long)kd->block[1], (long long)kd->block[2], kd->name);
    for (int i = 0; i < cand->nparams; i++) {
      int t = (int)cand->params[i].dtype;
      tn_buf_printf(o, "%s(%s *)args[%d]", i ? ", " : "",
                    t >= 0 && t < (int)TN_ARRAY_LEN(cuda_ptr_type) ? cuda_ptr_type[t] : "void", i);
    }
    for (int i = 0; i < kd->nmaps; i++) tn_buf_printf(o, ", %s", kd->maps[i].name);
    tn_buf_put(o, ");\n    }");
    if (kd->cluster > 1) tn_buf_printf(o, ", %d", kd->cluster); /* the kernel's __cluster_dims__ */
    tn_buf_put(o, ");\n  }\n");
  }
  tn_buf_put(o, "  return 0;\n}\n");
}

void ms_build_cuda_host(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res) {
  char src[MS_PATH_MAX], so[MS_PATH_MAX], header[MS_PATH_MAX], fp16[MS_PATH_MAX], bf16[MS_PATH_MAX], mma[MS_PATH_MAX];
  char inc[MS_PATH_MAX + 4];
  tn_err_t err = {0};
  snprintf(src, sizeof src, "%s/cand.cc", dir);
  snprintf(so, sizeof so, "%s/cand.so", dir);
  snprintf(header, sizeof header, "%s/tuned_cuda_host.h", dir);
  snprintf(fp16, sizeof fp16, "%s/cuda_fp16.h", dir); /* the harness defines __half */
  snprintf(bf16, sizeof bf16, "%s/cuda_bf16.h", dir); /* and __nv_bfloat16 */
  snprintf(mma, sizeof mma, "%s/mma.h", dir);         /* and nvcuda::wmma */
  snprintf(inc, sizeof inc, "-I%s", dir);
  snprintf(res->build.arch, sizeof res->build.arch, "host");
  if (ms_check_block_limits(cand, res) < 0) return; /* Hopper's kernels on a harness that is not Hopper */
  char rpath[MS_PATH_MAX + 16];
  cc_facts_t cc;
  compiler_version(&cand->target, timeout_s, res->build.compiler, sizeof res->build.compiler, &cc);
  tn_buf_t text;
  tn_buf_init(&text);
  /* the register file a CTA draws on (the harness's setmaxnreg pool): the target's */
  tn_buf_printf(&text, "#define TUNED_HOST_REG_FILE %lld\n", (long long)cand->target.max_registers_per_block);
  tn_buf_put(&text, "#include \"tuned_cuda_host.h\"\n");
  tn_buf_put(&text, cand->source);
  launcher(cand, &text);
  static const char fp16_text[] = "/* cuda-host: __half, __nv_bfloat16 and nvcuda::wmma come from tuned_cuda_host.h */\n";
  if (ms_write_file(header, ms_cuda_host_header, strlen(ms_cuda_host_header), &err) < 0 ||
      ms_write_file(fp16, fp16_text, strlen(fp16_text), &err) < 0 ||
      ms_write_file(bf16, fp16_text, strlen(fp16_text), &err) < 0 ||
      ms_write_file(mma, fp16_text, strlen(fp16_text), &err) < 0 ||
      ms_write_file(src, tn_buf_str(&text), text.len, &err) < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    tn_buf_free(&text);
    return;
  }
  tn_buf_free(&text);
  /* UBSan: a misaligned vector access, or an index past a shared or local
   * array, stops the run with its place (reported as a run error). */
  const char *flags[12] = {"-std=c++17", "-O1", "-fsanitize=alignment,bounds", "-fno-sanitize-recover=all",
                           "-Wno-unknown-pragmas", "-shared", "-fPIC", "-Wl,-Bsymbolic", inc};
  int nflags = 9;
  if (cc.clang) flags[nflags++] = "-fbracket-depth=1000000";
  if (cc.ubsan_dir[0]) { /* clang does not link its UBSan runtime into a shared library by itself */
    snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s", cc.ubsan_dir);
    flags[nflags++] = "-shared-libsan";
    flags[nflags++] = rpath;
  }
  compile(&cand->target, flags, nflags, src, so, "-lm", timeout_s, res);
}
