/* testutil.h — shared scaffolding for the Check suites: a main() that runs one
 * suite, paths to the source tree's fixtures, test-case tables and running a
 * subprocess with its output captured. */
#ifndef TUNED_TESTUTIL_H
#define TUNED_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tuned_config.h"

/* How much longer the processes a test starts may take: $TUNED_TEST_SLOWDOWN
 * (default 1; the valgrind test setup runs tuned many times slower).  Waits
 * for those processes are multiplied by it. */
static inline double tu_slowdown(void) {
  const char *s = getenv("TUNED_TEST_SLOWDOWN");
  double f = s && *s ? atof(s) : 1;
  return f > 1 ? f : 1;
}

/* Absolute path of a file in the source tree: SRC("workloads/matmul.tw"). */
#define SRC(rel) TUNED_SOURCE_ROOT "/" rel

/* Runs every test of suite s; the exit status for main. */
static inline int tu_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define TN_TEST_MAIN(make_suite) \
  int main(void) { return tu_run_suite(make_suite()); }

/* Adds test case `name` (timeout in seconds; 0 keeps Check's default) with
 * the tests of `tests[0..n)` to suite `s`. */
static inline TCase *tu_tcase_add(Suite *s, const char *name, double timeout, const TTest *const *tests, int n) {
  TCase *tc = tcase_create(name);
  if (timeout > 0) tcase_set_timeout(tc, timeout);
  for (int i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return tc;
}

/* TU_TCASE(s, "name", 120, t_a, t_b, ...): a test case with those tests. */
#define TU_TCASE(s, name, timeout, ...)                                                   \
  tu_tcase_add((s), (name), (timeout), (const TTest *const[]){__VA_ARGS__},            \
               (int)(sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *)))

/* What a command run through the shell printed, and how it exited. */
typedef struct tu_run {
  int status; /* exit code, -1 when killed by a signal */
  char out[262144];
  char err[8192];
} tu_run_t;

/* Runs `cmd` through the shell into *r: stdout, stderr (through a temporary
 * file) and the exit code; output beyond the buffers is read and dropped. */
static inline tu_run_t *tu_run_capture(const char *cmd, tu_run_t *r) {
  memset(r, 0, sizeof *r);
  char errpath[] = "/tmp/tuned-test-err-XXXXXX";
  int fd = mkstemp(errpath);
  ck_assert_int_ge(fd, 0);
  close(fd);
  size_t len = strlen(cmd) + sizeof errpath + 16;
  char *full = malloc(len);
  snprintf(full, len, "%s 2>'%s'", cmd, errpath);
  FILE *p = popen(full, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(r->out, 1, sizeof r->out - 1, p);
  r->out[n] = 0;
  char sink[4096]; /* drain what does not fit: the command must not die of SIGPIPE */
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  int st = pclose(p);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  FILE *e = fopen(errpath, "r");
  ck_assert_ptr_nonnull(e);
  n = fread(r->err, 1, sizeof r->err - 1, e);
  r->err[n] = 0;
  fclose(e);
  unlink(errpath);
  free(full);
  return r;
}

/* Writes `text` to a new temporary file named from `tmpl` (ends in XXXXXX,
 * rewritten in place); the caller unlinks it. */
/* The live (not zombie) children of parent: pids and command lines (NULs
 * as blanks, cut to 255 bytes), at most max; returns how many. */
typedef char tu_cmdline_t[256];
static inline int tu_children(pid_t parent, pid_t *pids, tu_cmdline_t *cmds, int max) {
  DIR *dir = opendir("/proc");
  struct dirent *e;
  int n = 0;
  while (dir && n < max && (e = readdir(dir))) {
    pid_t pid = (pid_t)atoi(e->d_name), ppid = 0;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = 0;
    /* "pid (comm) state ppid": comm may hold blanks, so parse after the last ')' */
    const char *rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1 || ppid != parent) continue;
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i < len; i++) buf[i] = buf[i] ? buf[i] : ' ';
    buf[len] = 0;
    if (!len) continue; /* a zombie */
    pids[n] = pid;
    snprintf(cmds[n], sizeof cmds[n], "%.255s", buf);
    n++;
  }
  if (dir) closedir(dir);
  return n;
}

static inline void tu_write_temp(char *tmpl, const char *text) {
  int fd = mkstemp(tmpl);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* Writes dir/rel (a new file), making the directories above it. */
static inline void tu_put_file(const char *dir, const char *rel, const char *text) {
  char path[3 * PATH_MAX], cmd[3 * PATH_MAX + 32]; /* (dir and rel are paths each) */
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  *strrchr(path, '/') = 0;
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Removes a directory the test made, with everything in it. */
static inline void tu_remove_tree(const char *dir) {
  char cmd[2 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* cuobjdump -sass of a CUBIN, with the PyPI tools' directory on PATH; NULL
 * when cuobjdump is not installed. */
static inline char *tu_cubin_sass(const void *cubin, size_t n) {
  char path[] = "/tmp/tuned-hopper-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, cubin, n), (ssize_t)n);
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "PATH=\"$PATH:$(python3 -c 'import glob, nvidia; print(\":\".join(glob.glob(nvidia."
           "__path__[0] + \"/cu*/bin\")))' 2>/dev/null)\"; command -v cuobjdump >/dev/null && cuobjdump -sass %s",
           path);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t len = 0, cap = 1 << 16;
  char *b = malloc(cap);
  ck_assert_ptr_nonnull(b);
  size_t got;
  while ((got = fread(b + len, 1, cap - len - 1, p)) > 0)
    if ((len += got) + 1 == cap) ck_assert_ptr_nonnull(b = realloc(b, cap *= 2));
  b[len] = 0;
  int rc = pclose(p);
  unlink(path);
  if (rc != 0) {
    free(b);
    return NULL;
  }
  return b;
}

#endif
