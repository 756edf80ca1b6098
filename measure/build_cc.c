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

/* Splits $CC (or "cc") on blanks into argv; returns the count. */
static int compiler_argv(char *buf, size_t size, char **argv, int max) {
  const char *cc = getenv("CC");
  snprintf(buf, size, "%s", cc && *cc ? cc : "cc");
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok && n < max; tok = strtok_r(NULL, " \t", &save))
    argv[n++] = tok;
  return n;
}

static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
static char version_cc[256], version_text[128];

/* First line of `$CC --version`, cached per $CC value. */
static void compiler_version(double timeout_s, char *out, size_t size) {
  char buf[256], *argv[CC_MAX_ARGS];
  int n = compiler_argv(buf, sizeof buf, argv, CC_MAX_ARGS - 2);
  const char *key = getenv("CC") ? getenv("CC") : "cc";
  pthread_mutex_lock(&version_lock);
  if (strcmp(version_cc, key) != 0 || !version_text[0]) {
    argv[n++] = "--version";
    argv[n] = NULL;
    tn_buf_t log;
    tn_buf_init(&log);
    int st = 0;
    snprintf(version_text, sizeof version_text, "%s", argv[0]);
    if (ms_run_command(argv, TN_MIN(timeout_s, 10.0), &log, 4096, &st, NULL) == TN_OK && WIFEXITED(st) &&
        WEXITSTATUS(st) == 0) {
      const char *s = tn_buf_str(&log);
      snprintf(version_text, sizeof version_text, "%.*s", (int)strcspn(s, "\n"), s);
    }
    tn_buf_free(&log);
    snprintf(version_cc, sizeof version_cc, "%s", key);
  }
  snprintf(out, size, "%s", version_text);
  pthread_mutex_unlock(&version_lock);
}

void ms_build_c(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res) {
  char src[MS_PATH_MAX], so[MS_PATH_MAX], march[64], buf[256];
  tn_err_t err = {0};
  snprintf(src, sizeof src, "%s/cand.c", dir);
  snprintf(so, sizeof so, "%s/cand.so", dir);
  snprintf(march, sizeof march, "-march=%s", cand->target.arch[0] ? cand->target.arch : "native");
  snprintf(res->build.arch, sizeof res->build.arch, "%s", cand->target.arch[0] ? cand->target.arch : "native");
  compiler_version(timeout_s, res->build.compiler, sizeof res->build.compiler);
  if (ms_write_file(src, cand->source, strlen(cand->source), &err) < 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    return;
  }
  char *argv[CC_MAX_ARGS];
  int n = compiler_argv(buf, sizeof buf, argv, CC_MAX_ARGS - 12);
  const char *flags[] = {"-O3", march, "-fopenmp", "-shared", "-fPIC", "-o", so, src, "-lm"};
  for (size_t i = 0; i < TN_ARRAY_LEN(flags); i++) argv[n++] = (char *)flags[i];
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
