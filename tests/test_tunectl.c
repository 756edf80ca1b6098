/* test_tunectl.c — suite "tunectl": runs the real tunectl binary (path in
 * $TUNECTL) and checks its output, exit codes and error messages. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "testutil.h"

typedef struct run {
  int status;
  char out[65536];
  char err[8192];
} run_t;

/* Runs `tunectl ARGS` through the shell; captures stdout, stderr, exit code. */
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

#define W(name) SRC("workloads/" name ".tw")

START_TEST(t_help) {
  run_t *r = tunectl("--help");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "show"));
  ck_assert_ptr_nonnull(strstr(r->out, "check"));
  ck_assert_ptr_nonnull(strstr(r->out, "eval"));
  const char *cmds[] = {"show --help", "check --help", "eval -h", "help eval"};
  for (size_t i = 0; i < TN_ARRAY_LEN(cmds); i++) {
    r = tunectl(cmds[i]);
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "usage: tunectl "));
    ck_assert_ptr_nonnull(strstr(r->out, "--set NAME=VALUE"));
  }
  r = tunectl("eval --help");
  ck_assert_ptr_nonnull(strstr(r->out, "--seed S"));
  r = tunectl("");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "usage: tunectl"));
  r = tunectl("frobnicate");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "unknown command 'frobnicate'"));
  r = tunectl("--version");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "tunectl 0.1.0"));
}
END_TEST

START_TEST(t_show) {
  run_t *r = tunectl("show " W("matmul"));
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "@T.prim_func"));
  ck_assert_ptr_nonnull(strstr(r->out, "for i, j, k in T.grid(1024, 1024, 1024):"));
  ck_assert_ptr_nonnull(strstr(r->out, "with T.block(\"C\"):"));
  ck_assert_ptr_nonnull(strstr(r->out, "T.axis.remap(\"SSR\", [i, j, k])"));
  ck_assert_ptr_nonnull(strstr(r->out, "with T.init():"));
  r = tunectl("show " W("matmul") " --set M=64 --set=K=32");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "for i, j, k in T.grid(64, 1024, 32):"));
  ck_assert_ptr_nonnull(strstr(r->out, "A: T.Buffer((64, 32), \"float32\")"));
}
END_TEST

START_TEST(t_check) {
  run_t *r = tunectl("check " W("matmul"));
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "workload  matmul"));
  ck_assert_ptr_nonnull(strstr(r->out, "flops     2147483648 "));
  ck_assert_ptr_nonnull(strstr(r->out, "bytes     12582912 "));
  const char *h = strstr(r->out, "hash      ");
  ck_assert_ptr_nonnull(h);
  h += 10;
  for (int i = 0; i < 16; i++) ck_assert_msg(strchr("0123456789abcdef", h[i]), "hash digit %d", i);
  char hash1[17];
  memcpy(hash1, h, 16);
  hash1[16] = 0;
  /* Overriding a parameter with its default value keeps the hash. */
  r = tunectl("check " W("matmul") " --set M=1024 --json");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, hash1));
  ck_assert_ptr_nonnull(strstr(r->out, "\"flops\":\t2147483648"));
  r = tunectl("check " W("matmul") " --set M=512");
  ck_assert_ptr_null(strstr(r->out, hash1));
  ck_assert_ptr_nonnull(strstr(r->out, "M=512*"));
}
END_TEST

START_TEST(t_eval) {
  run_t *r = tunectl("eval " W("vector_add"));
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_nonnull(strstr(r->out, "evaluated vector_add with seed 1"));
  const char *c = strstr(r->out, "checksum ");
  ck_assert_ptr_nonnull(c);
  char first[64];
  snprintf(first, sizeof first, "%.25s", c);
  r = tunectl("eval " W("vector_add") " --seed 1");
  ck_assert_ptr_nonnull(strstr(r->out, first));
  r = tunectl("eval " W("vector_add") " --seed 2");
  ck_assert_int_eq(r->status, 0);
  ck_assert_ptr_null(strstr(r->out, first));
  r = tunectl("eval " W("softmax") " --set M=4 --set N=8 --json");
  ck_assert_int_eq(r->status, 0);
  /* Softmax rows sum to one: 4 rows -> total 4. */
  const char *s = strstr(r->out, "\"sum\":\t");
  ck_assert_ptr_nonnull(s);
  ck_assert_double_eq_tol(atof(s + 7), 4.0, 1e-9);
}
END_TEST

START_TEST(t_errors) {
  run_t *r = tunectl("show /nonexistent/x.tw");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "cannot open '/nonexistent/x.tw'"));
  r = tunectl("show " W("matmul") " --set M");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "--set M"));
  r = tunectl("show " W("matmul") " --set Q=4");
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "Q"));
  r = tunectl("show");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "missing FILE"));
  r = tunectl("eval " W("matmul") " --seed -3");
  ck_assert_int_eq(r->status, 2);
  r = tunectl("check " W("matmul") " --bogus");
  ck_assert_int_eq(r->status, 2);
  ck_assert_ptr_nonnull(strstr(r->err, "unknown option '--bogus'"));

  char path[] = "/tmp/tunectl-bad-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = "param N = 8\ninput A: float32[N]\noutput B: float32[N]\nB[i] = D[i]\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  char args[256];
  snprintf(args, sizeof args, "check %s", path);
  r = tunectl(args);
  ck_assert_int_eq(r->status, 1);
  char where[128];
  snprintf(where, sizeof where, ":4:8:");
  ck_assert_msg(strstr(r->err, where) && strstr(r->err, "'D'"), "got: %s", r->err);
  unlink(path);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("tunectl");
  TCase *tc = tcase_create("cli");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, t_help);
  tcase_add_test(tc, t_show);
  tcase_add_test(tc, t_check);
  tcase_add_test(tc, t_eval);
  tcase_add_test(tc, t_errors);
  suite_add_tcase(s, tc);
  return s;
}

TN_TEST_MAIN(make)
