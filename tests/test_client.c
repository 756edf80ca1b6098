/* test_client.c — suite "client": tunectl's daemon commands, libtuned and
 * the example host program against a real tuned daemon on a temporary socket
 * and database ($TUNED, $TUNECTL, $MATMUL_HOST); libtuned's protocol handling
 * against a scripted fake server; the pkg-config file; bench comparisons. */
#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/tuned.h"
#include "testutil.h"

typedef tu_run_t run_t;

/* The shared daemon: started once for the "daemon" test case. */
static char g_dir[64];
static char g_sock[128];
static pid_t g_pid;
static char g_hash[TUNED_HASH_SIZE];      /* matmul 32^3, tuned by the fixture */
static char g_shown[TUNED_HASH_SHOWN + 1]; /* its first digits, as tables show them */
static long g_job;
static run_t g_submit;   /* what `submit --wait` printed */

#define MM32 SRC("workloads/matmul.tw") " --set M=32 --set N=32 --set K=32"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  ck_assert_msg(v && *v, "%s is not set (run the suite through meson test)", name);
  return v;
}

/* Runs a shell command built from fmt; captures its output. */
static run_t *sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_t *sh(const char *fmt, ...) {
  static run_t r;
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return tu_run_capture(cmd, &r);
}

/* `tunectl --socket SOCK ARGS`, expecting exit code status. */
static run_t *ctl(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static run_t *ctl(int status, const char *fmt, ...) {
  char args[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  run_t *r = sh("'%s' --socket '%s' %s", env("TUNECTL"), g_sock, args);
  ck_assert_msg(r->status == status, "tunectl %s: exit %d, expected %d\nstdout: %.2000s\nstderr: %s", args, r->status,
                status, r->out, r->err);
  return r;
}

static cJSON *parse_json(const char *text) {
  cJSON *j = cJSON_Parse(text);
  ck_assert_msg(j != NULL, "not JSON: %.500s", text);
  return j;
}

static double jnum(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsNumber(v), "no number \"%s\"", key);
  return v->valuedouble;
}

static const char *jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsString(v), "no string \"%s\"", key);
  return v->valuestring;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* ---- a real daemon ---------------------------------------------------------- */

/* Starts `tuned --target cpu` on dir/NAME.sock and dir/NAME.db; waits until
 * it answers.  Returns its pid. */
static pid_t start_daemon(const char *dir, const char *name, char *sock, size_t socksize) {
  snprintf(sock, socksize, "%s/%s.sock", dir, name);
  char db[256], log[256];
  snprintf(db, sizeof db, "%s/%s.db", dir, name);
  snprintf(log, sizeof log, "%s/%s.log", dir, name);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    FILE *l = freopen(log, "w", stderr);
    (void)l;
    execl(env("TUNED"), "tuned", "--target", "cpu", "--socket", sock, "--db", db, "--log-level", "info", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 400 * tu_slowdown(); i++) {
    tuned_client_t *c = NULL;
    if (tuned_connect(sock, &c, NULL) == 0) {
      tuned_close(c);
      return pid;
    }
    ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "tuned exited at start-up:\n%s", slurp(log));
    usleep(50 * 1000);
  }
  ck_abort_msg("tuned did not answer on %s within %.0f s:\n%s", sock, 20 * tu_slowdown(), slurp(log));
  return -1;
}

/* Waits for tuned to exit by itself (after a shutdown); its exit status, or
 * -1 if it is still running after 10 s (times the slowdown). */
static int wait_daemon(pid_t pid) {
  for (int i = 0; i < 200 * tu_slowdown(); i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(50 * 1000);
  }
  return -1;
}

static void stop_daemon(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 200 * tu_slowdown(); i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid) return;
    usleep(50 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void daemon_setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tuned-client-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_pid = start_daemon(g_dir, "main", g_sock, sizeof g_sock);
  run_t *r = sh("'%s' check " MM32 " --json", env("TUNECTL"));
  ck_assert_int_eq(r->status, 0);
  cJSON *j = parse_json(r->out);
  snprintf(g_hash, sizeof g_hash, "%s", jstr(j, "hash"));
  ck_assert_int_eq((int)strlen(g_hash), TUNED_HASH_SIZE - 1);
  snprintf(g_shown, sizeof g_shown, "%s", g_hash);
  cJSON_Delete(j);
  g_submit = *ctl(0, "submit " MM32 " --trials 8 --wait");
  ck_assert_int_eq(sscanf(g_submit.out, "job %ld:", &g_job), 1);
}

static void daemon_teardown(void) {
  stop_daemon(g_pid);
  sh("rm -rf '%s'", g_dir);
}

/* ---- tunectl against the daemon ------------------------------------------------ */

START_TEST(t_ping_targets) {
  run_t *r = ctl(0, "ping");
  ck_assert_msg(strstr(r->out, "answers on ") && strstr(r->out, g_sock) && strstr(r->out, "target cpu"), "%s", r->out);
  cJSON *j = parse_json(ctl(0, "ping --json")->out);
  ck_assert_str_eq(jstr(j, "target"), "cpu");
  ck_assert_str_eq(jstr(j, "socket"), g_sock);
  ck_assert_int_eq((int)jnum(j, "pid"), g_pid);
  cJSON_Delete(j);
  r = ctl(0, "targets");
  ck_assert_ptr_nonnull(strstr(r->out, "TARGET"));
  ck_assert_ptr_nonnull(strstr(r->out, "nvidia/tesla-t4"));
  j = parse_json(ctl(0, "targets --json")->out);
  const cJSON *t;
  bool cpu_usable = false;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(j, "targets"))
    if (strcmp(jstr(t, "name"), "cpu") == 0) cpu_usable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "usable"));
  ck_assert(cpu_usable);
  cJSON_Delete(j);
}
END_TEST

START_TEST(t_submit_wait_jobs_status) {
  char want[128];
  snprintf(want, sizeof want, "job %ld: matmul (%s)", g_job, g_hash);
  ck_assert_msg(strstr(g_submit.out, want), "%s", g_submit.out);
  /* not a terminal: one plain progress line per batch on stdout, nothing on stderr */
  snprintf(want, sizeof want, "job %ld: done, 8/8 trials, best ", g_job);
  ck_assert_msg(strstr(g_submit.out, want), "%s", g_submit.out);
  ck_assert_msg(g_submit.err[0] == 0, "%s", g_submit.err);
  cJSON *j = parse_json(ctl(0, "jobs --json")->out);
  const cJSON *job = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "jobs"), 0);
  ck_assert_int_eq((long)jnum(job, "job"), g_job);
  ck_assert_str_eq(jstr(job, "state"), "done");
  ck_assert_str_eq(jstr(job, "workload"), g_hash);
  ck_assert_int_eq((int)jnum(job, "trials_done"), 8);
  cJSON_Delete(j);
  run_t *r = ctl(0, "jobs --state done");
  ck_assert_msg(strstr(r->out, "JOB") && strstr(r->out, g_shown) && strstr(r->out, "8/8"), "%s", r->out);
  r = ctl(0, "status %ld", g_job);
  ck_assert_msg(strstr(r->out, "state     done") && strstr(r->out, "trials    8 of 8"), "%s", r->out);
  /* the job timed the unscheduled program; failures include too_slow */
  ck_assert_msg(strstr(r->out, "\nbaseline  unscheduled program ") && strstr(r->out, "x faster)\n") &&
                    strstr(r->out, " wrong_result, ") && strstr(r->out, " too_slow\n"),
                "%s", r->out);
  j = parse_json(ctl(0, "status %ld --json", g_job)->out);
  ck_assert_str_eq(jstr(j, "state"), "done");
  double gflops = jnum(cJSON_GetObjectItemCaseSensitive(j, "best"), "gflops");
  ck_assert(gflops > 0);
  cJSON_Delete(j);
  r = ctl(0, "status");
  ck_assert_msg(strstr(r->out, "target    cpu") && strstr(r->out, " done,"), "%s", r->out);
  j = parse_json(ctl(0, "status --json")->out);
  ck_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(j, "server"), "target"), "cpu");
  ck_assert(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "jobs")) >= 1);
  cJSON_Delete(j);
  /* watching a finished job prints its final line and exits 0 */
  r = ctl(0, "watch %ld", g_job);
  ck_assert_msg(strstr(r->out, "done, 8/8 trials") && !r->err[0], "%s%s", r->out, r->err);
  /* on a terminal (script(1) gives it one) a bar redrawn in place, then the final line */
  r = sh("script -qec \"'%s' --socket '%s' watch %ld\" /dev/null", env("TUNECTL"), g_sock, g_job);
  ck_assert_int_eq(r->status, 0);
  snprintf(want, sizeof want, "\r\033[Kjob %ld [##############################] 8/8  best ", g_job);
  ck_assert_msg(strstr(r->out, want), "%s", r->out);
  snprintf(want, sizeof want, "job %ld: done, 8/8 trials, best ", g_job);
  ck_assert_msg(strstr(r->out, want), "%s", r->out);
  r = ctl(0, "workloads");
  ck_assert_msg(strstr(r->out, g_shown) && strstr(r->out, "matmul"), "%s", r->out);
}
END_TEST

/* Every line of s is a JSON object; returns the last one (the caller deletes it) and the count. */
static cJSON *json_lines(const char *s, int *n) {
  cJSON *last = NULL;
  *n = 0;
  for (const char *line = s; *line; (*n)++) {
    const char *nl = strchr(line, '\n');
    ck_assert_msg(nl != NULL, "the last line is not terminated: %s", line);
    cJSON_Delete(last);
    last = cJSON_ParseWithLength(line, (size_t)(nl - line));
    ck_assert_msg(cJSON_IsObject(last), "not a JSON object: %.*s", (int)(nl - line), line);
    line = nl + 1;
  }
  return last;
}

/* --json streams are JSON lines: watch prints the daemon's job objects
 * unchanged (with fields libtuned does not parse, such as options), submit
 * --wait its answer and then those. */
START_TEST(t_json_streams) {
  int n;
  run_t *r = ctl(0, "watch %ld --json", g_job);
  cJSON *j = json_lines(r->out, &n);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(jstr(j, "state"), "done");
  ck_assert_int_eq((int)jnum(cJSON_GetObjectItemCaseSensitive(j, "options"), "remeasure"), 8);
  ck_assert(jnum(j, "created") > 0);
  cJSON_Delete(j);
  r = ctl(0, "submit %s --set N=3000 --trials 4 --wait --json", SRC("workloads/vector_add.tw"));
  ck_assert_msg(!r->err[0], "%s", r->err);
  j = json_lines(r->out, &n);
  ck_assert_int_ge(n, 3);
  ck_assert_str_eq(jstr(j, "state"), "done");
  ck_assert_str_eq(jstr(j, "name"), "vector_add");
  ck_assert(jnum(cJSON_GetObjectItemCaseSensitive(j, "best"), "record") > 0);
  long job = (long)jnum(j, "job");
  cJSON_Delete(j);
  j = cJSON_ParseWithLength(r->out, (size_t)(strchr(r->out, '\n') - r->out));
  ck_assert_int_eq((long)jnum(j, "job"), job);
  ck_assert_int_eq((int)strlen(jstr(j, "workload")), TUNED_HASH_SIZE - 1);
  ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "state"));
  cJSON_Delete(j);
}
END_TEST

/* Tables never cut names short: a long workload name in jobs, status and workloads. */
START_TEST(t_tables_full_names) {
  char path[256];
  snprintf(path, sizeof path, "%s/vector_add_with_a_rather_long_name.tw", g_dir);
  write_file(path, slurp(SRC("workloads/vector_add.tw")));
  ctl(0, "submit '%s' --set N=1000 --trials 2 --wait", path);
  run_t *r = ctl(0, "jobs");
  ck_assert_msg(strstr(r->out, " vector_add_with_a_rather_long_name  "), "%s", r->out);
  char header[64]; /* the header as wide as the name */
  snprintf(header, sizeof header, "  %-34s  WORKLOAD", "NAME");
  ck_assert_msg(strstr(r->out, header), "%s", r->out);
  r = ctl(0, "workloads");
  ck_assert_msg(strstr(r->out, "  vector_add_with_a_rather_long_name  "), "%s", r->out);
}
END_TEST

START_TEST(t_best_records) {
  cJSON *j = parse_json(ctl(0, "best " MM32 " --json")->out);
  const cJSON *recs = cJSON_GetObjectItemCaseSensitive(j, "records");
  ck_assert_int_eq(cJSON_GetArraySize(recs), 1);
  const cJSON *best = cJSON_GetArrayItem(recs, 0);
  ck_assert_str_eq(jstr(best, "workload"), g_hash);
  ck_assert_str_eq(jstr(best, "target"), "cpu");
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(best, "verified")));
  long id = (long)jnum(best, "id");
  double median = jnum(best, "median_secs");
  cJSON_Delete(j);
  /* the hash names the same workload; -k 3 lists up to 3, fastest first */
  j = parse_json(ctl(0, "best %s -k 3 --target cpu --json", g_hash)->out);
  recs = cJSON_GetObjectItemCaseSensitive(j, "records");
  ck_assert_int_ge(cJSON_GetArraySize(recs), 2);
  ck_assert_int_eq((long)jnum(cJSON_GetArrayItem(recs, 0), "id"), id);
  for (int i = 1; i < cJSON_GetArraySize(recs); i++)
    ck_assert(jnum(cJSON_GetArrayItem(recs, i), "median_secs") >= median);
  cJSON_Delete(j);
  char want[128];
  snprintf(want, sizeof want, "%7ld  %s  cpu", id, g_shown); /* the table shows 128 bits */
  run_t *r = ctl(0, "best %s", g_hash);
  ck_assert_msg(strstr(r->out, want) && strstr(r->out, "yes"), "%s", r->out);
  /* what the table shows names the workload (a prefix of 32 or more digits, either case) */
  r = ctl(0, "best %s", g_shown);
  ck_assert_msg(strstr(r->out, want) && strstr(r->out, "yes"), "%s", r->out);
  char upper[TUNED_HASH_SIZE];
  for (int i = 0; i < TUNED_HASH_SIZE; i++) upper[i] = (char)toupper((unsigned char)g_hash[i]);
  j = parse_json(ctl(0, "best %.40s --json", upper)->out);
  ck_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "records"), 0), "workload"), g_hash);
  cJSON_Delete(j);
  j = parse_json(ctl(0, "kernel %s --emit json", g_shown)->out);
  ck_assert_str_eq(jstr(j, "workload"), g_hash);
  ck_assert_int_eq((long)jnum(j, "record"), id);
  cJSON_Delete(j);
  /* fewer digits are not a hash (nor a file or a name in the database) */
  r = ctl(1, "best %.31s", g_hash);
  ck_assert_msg(strstr(r->err, "is not a workload file, a hash, or the name of a workload"), "%s", r->err);
  char path[128];
  snprintf(path, sizeof path, "%s/records.json", g_dir);
  ctl(0, "records " MM32 " --json > %s", path);
  j = parse_json(slurp(path));
  recs = cJSON_GetObjectItemCaseSensitive(j, "records");
  ck_assert_int_eq(cJSON_GetArraySize(recs), 8);
  const cJSON *rec;
  cJSON_ArrayForEach(rec, recs) ck_assert_str_eq(jstr(rec, "workload"), g_hash);
  cJSON_Delete(j);
  j = parse_json(ctl(0, "records --status ok --limit 2 --json")->out);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "records")), 2);
  cJSON_Delete(j);
}
END_TEST

/* A workload by its name (and shape): the database's workloads of that name
 * whose shapes agree with --set; one must match for best and kernel, every
 * match counts for records; errors list the shapes there are. */
START_TEST(t_by_name) {
  cJSON *j = parse_json(ctl(0, "best matmul --set M=32 --set N=32 --set K=32 --json")->out);
  const cJSON *recs = cJSON_GetObjectItemCaseSensitive(j, "records");
  ck_assert_int_eq(cJSON_GetArraySize(recs), 1);
  ck_assert_str_eq(jstr(cJSON_GetArrayItem(recs, 0), "workload"), g_hash);
  cJSON_Delete(j);
  run_t *r = ctl(1, "best matmul --set M=31");
  ck_assert_msg(strstr(r->err, "tunectl best: no workload named matmul with {\"M\":31} in the database; it has:") &&
                    strstr(r->err, g_shown) && strstr(r->err, "M=32, N=32, K=32"),
                "%s", r->err);
  r = ctl(0, "kernel matmul --set K=32 --set M=32 --set N=32 --emit source");
  ck_assert_msg(strstr(r->out, "matmul"), "%s", r->out);
  /* a shape never tuned: an error, or with --fallback nearest the record of
   * the nearest tuned matmul verified at 24 x 40 x 32 (by name and by file) */
  r = ctl(1, "kernel matmul --set M=24 --set N=40 --emit source");
  ck_assert_msg(strstr(r->err, "no workload named matmul with"), "%s", r->err);
  r = ctl(1, "kernel matmul --set M=24 --fallback nearest --emit source"); /* N and K not given */
  ck_assert_msg(strstr(r->err, "no workload named matmul with"), "%s", r->err);
  r = ctl(2, "kernel matmul --set M=24 --fallback closest --emit source");
  ck_assert_msg(strstr(r->err, "unknown --fallback 'closest' (none or nearest)"), "%s", r->err);
  const char *fb[] = {"matmul --set M=24 --set N=40 --set K=32", SRC("workloads/matmul.tw") " --set M=24 --set N=40 --set K=32"};
  for (int i = 0; i < 2; i++) {
    j = parse_json(ctl(0, "kernel %s --fallback nearest --emit json", fb[i])->out);
    const char *from = jstr(cJSON_GetObjectItemCaseSensitive(j, "fallback"), "workload");
    ck_assert_int_eq(strlen(from), TUNED_HASH_SIZE - 1);
    ck_assert_str_ne(from, jstr(j, "workload"));
    ck_assert_double_eq(jnum(j, "flops"), 2.0 * 24 * 40 * 32);
    cJSON_Delete(j);
    r = ctl(0, "kernel %s --fallback nearest --emit source", fb[i]);
    ck_assert_msg(strstr(r->err, "no record for this shape; fallback: record") &&
                      strstr(r->err, "verified on this shape and timed at"), "%s", r->err);
  }
  /* the daemon's list by name carries each workload's source */
  j = parse_json(ctl(0, "workloads --json")->out);
  int named = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "workloads")) named += !strcmp(jstr(e, "name"), "matmul");
  cJSON_Delete(j);
  ck_assert_int_ge(named, 1);
  r = ctl(named > 1 ? 1 : 0, "best matmul");
  if (named > 1) ck_assert_msg(strstr(r->err, "workloads named matmul in the database; choose one with --set or its "
                                              "hash:"), "%s", r->err);
  /* records NAME: the records of every shape of that name */
  j = parse_json(ctl(0, "records matmul --json")->out);
  recs = cJSON_GetObjectItemCaseSensitive(j, "records");
  int mine = 0;
  cJSON_ArrayForEach(e, recs) mine += !strcmp(jstr(e, "workload"), g_hash);
  ck_assert_int_ge(mine, 8);
  cJSON_Delete(j);
}
END_TEST

/* Compiles `code` as g_dir/NAME.c beside the headers written there, runs
 * it, and expects it to print `ok`. */
static void run_host_program(const char *name, const char *code, const char *ok) {
  char prog[128], exe[128];
  snprintf(prog, sizeof prog, "%s/%s.c", g_dir, name);
  snprintf(exe, sizeof exe, "%s/%s", g_dir, name);
  write_file(prog, code);
  run_t *r = sh("cc -std=gnu11 -O1 -fopenmp -o '%s' '%s' -lm && '%s'", exe, prog, exe);
  ck_assert_msg(r->status == 0 && strstr(r->out, ok), "%s\n%s", r->out, r->err);
}

START_TEST(t_kernel) {
  run_t *r = ctl(0, "kernel %s --emit source", g_hash);
  ck_assert_msg(strstr(r->out, "int matmul(float *restrict A, float *restrict B, float *restrict C)") &&
                    strstr(r->out, "int tuned_entry_matmul(void **args)"),
                "%s", r->out);
  cJSON *j = parse_json(ctl(0, "kernel " MM32 " --emit json")->out);
  ck_assert_str_eq(jstr(j, "language"), "c");
  ck_assert_str_eq(jstr(j, "workload"), g_hash);
  const cJSON *launch = cJSON_GetObjectItemCaseSensitive(j, "launch");
  ck_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(launch, "kernels"), 0), "name"), "matmul");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(launch, "params")), 3);
  cJSON_Delete(j);
  /* CUDA-only kinds are refused for a C kernel, with the reason */
  r = ctl(1, "kernel %s --emit ptx", g_hash);
  ck_assert_ptr_nonnull(strstr(r->err, "needs a CUDA target"));
  ctl(2, "kernel %s --emit bogus", g_hash);
  ctl(2, "kernel %s", g_hash);
  /* the header compiles into a host program and computes C = A B */
  char hdr[128];
  snprintf(hdr, sizeof hdr, "%s/matmul_tuned.h", g_dir);
  ctl(0, "kernel " MM32 " --emit header -o %s", hdr);
  const char *text = slurp(hdr);
  ck_assert_ptr_nonnull(strstr(text, "static inline int tuned_launch_matmul(float *A, float *B, float *C)"));
  ck_assert_ptr_nonnull(strstr(text, "#ifndef TUNED_KERNEL_MATMUL_"));
  run_host_program("use_header", "#include <math.h>\n#include <stdio.h>\n#include \"matmul_tuned.h\"\n"
                   "int main(void) {\n"
                   "  static float A[32 * 32], B[32 * 32], C[32 * 32];\n"
                   "  for (int i = 0; i < 32 * 32; i++) A[i] = (float)(i % 7) - 3, B[i] = (float)(i % 5) * 0.5f;\n"
                   "  if (tuned_launch_matmul(A, B, C) != 0) return 2;\n"
                   "  for (int i = 0; i < 32; i++) for (int j = 0; j < 32; j++) {\n"
                   "    double s = 0; for (int k = 0; k < 32; k++) s += A[i * 32 + k] * B[k * 32 + j];\n"
                   "    if (fabs(s - C[i * 32 + j]) > 1e-3) { printf(\"C[%d][%d] = %g, want %g\\n\", i, j, C[i * 32 + j], s); return 1; }\n"
                   "  }\n  printf(\"header ok\\n\");\n  return 0;\n}\n", "header ok");
}
END_TEST

/* A record whose trace hoists the packing of a const weight (imported,
 * as from another machine): kernel.get's launch says so (role "packed",
 * pack_entry), and the header's kernel, with its packing function called
 * once, computes the dense layer in a host program. */
START_TEST(t_kernel_packed) {
  char wl[128], line_path[128], hdr[128];
  snprintf(wl, sizeof wl, "%s/dense_const.tw", g_dir);
  write_file(wl, "param B = 12, IN = 24, OUT = 48\ninput  X: float32[B, IN]\ninput  W: float32[OUT, IN] const\n"
                 "input  bias: float32[OUT]\ntemp   D: float32[B, OUT]\noutput Y: float32[B, OUT]\n"
                 "D[b, o] = sum(k < IN: X[b, k] * W[o, k])\nY[b, o] = max(D[b, o] + bias[o], 0.0)\n");
  char *check = strdup(ctl(0, "check %s", wl)->out), *hash = strstr(check, "hash      ");
  ck_assert_ptr_nonnull(hash);
  hash[10 + TUNED_HASH_SIZE - 1] = '\0';
  hash += 10;
  char *space = strdup(ctl(0, "space %s --target cpu", wl)->out), *at = strstr(space, "(hoisted)");
  if (!at) {
    fprintf(stderr, "t_kernel_packed: skipped, no intrinsic fits this CPU (AVX2+FMA)\n");
    return;
  }
  char *trace = strchr(at, '\n') + 1, *end = strstr(trace, "\n# space");
  if (end) *end = '\0';
  /* one of our records, carried over to the dense layer with the hoisting trace */
  char *exported = strdup(ctl(0, "export %s -o -", g_hash)->out);
  *strchr(exported, '\n') = '\0';
  cJSON *line = parse_json(exported), *w = cJSON_GetObjectItemCaseSensitive(line, "workload");
  cJSON_ReplaceItemInObject(w, "hash", cJSON_CreateString(hash));
  cJSON_ReplaceItemInObject(w, "name", cJSON_CreateString("dense_const"));
  cJSON_ReplaceItemInObject(w, "source", cJSON_CreateString(slurp(wl)));
  cJSON_ReplaceItemInObject(w, "params", cJSON_CreateObject());
  cJSON_ReplaceItemInObject(line, "trace", cJSON_CreateString(trace));
  cJSON_ReplaceItemInObject(line, "trace_hash", cJSON_CreateNull());
  char *text = cJSON_PrintUnformatted(line);
  snprintf(line_path, sizeof line_path, "%s/packed.jsonl", g_dir);
  write_file(line_path, text);
  run_t *r = ctl(0, "import %s", line_path);
  ck_assert_msg(strstr(r->out, "imported 1 records"), "%s", r->out);
  cJSON *j = parse_json(ctl(0, "kernel %s --emit json", wl)->out);
  const cJSON *launch = cJSON_GetObjectItemCaseSensitive(j, "launch");
  ck_assert_str_eq(jstr(launch, "pack_entry"), "tuned_pack_dense_const");
  const cJSON *packed = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(launch, "params"), 4);
  ck_assert_str_eq(jstr(packed, "role"), "packed");
  ck_assert_str_eq(jstr(packed, "packs"), "W");
  ck_assert_str_eq(jstr(packed, "pack_function"), "dense_const_pack_W");
  ck_assert_int_eq((int)jnum(packed, "elements"), 24 * 80); /* rows of 48 padded to 64 n + 16 */
  cJSON_Delete(j);
  snprintf(hdr, sizeof hdr, "%s/dense_tuned.h", g_dir);
  ctl(0, "kernel %s --emit header -o %s", wl, hdr);
  const char *h = slurp(hdr);
  ck_assert_msg(strstr(h, "W packed once, outside the kernel: allocate 1920 elements, fill them with") &&
                    strstr(h, "dense_const_pack_W(W, W_local) once per weight"),
                "%s", h);
  run_host_program("use_packed", "#include <math.h>\n#include <stdio.h>\n#include \"dense_tuned.h\"\n"
                   "int main(void) {\n"
                   "  static float X[12 * 24], W[48 * 24], bias[48], Y[12 * 48], W_local[1920];\n"
                   "  for (int i = 0; i < 12 * 24; i++) X[i] = (float)(i % 7) - 3;\n"
                   "  for (int i = 0; i < 48 * 24; i++) W[i] = (float)(i % 5) * 0.5f - 1;\n"
                   "  for (int i = 0; i < 48; i++) bias[i] = (float)(i % 3) - 1;\n"
                   "  if (dense_const_pack_W(W, W_local) != 0) return 2;\n"
                   "  for (int call = 0; call < 2; call++) {\n"
                   "    if (tuned_launch_dense_const(X, W, bias, Y, W_local) != 0) return 2;\n"
                   "    for (int b = 0; b < 12; b++) for (int o = 0; o < 48; o++) {\n"
                   "      double s = bias[o]; for (int k = 0; k < 24; k++) s += X[b * 24 + k] * W[o * 24 + k];\n"
                   "      s = s > 0 ? s : 0;\n"
                   "      if (fabs(s - Y[b * 48 + o]) > 1e-3) { printf(\"Y[%d][%d] = %g, want %g\\n\", b, o, Y[b * 48 + o], s); return 1; }\n"
                   "    }\n  }\n  printf(\"packed header ok\\n\");\n  return 0;\n}\n", "packed header ok");
  free(text);
  cJSON_Delete(line);
  free(exported);
  free(space);
  free(check);
}
END_TEST

START_TEST(t_export_import) {
  char out[128], sock2[128];
  snprintf(out, sizeof out, "%s/export.jsonl", g_dir);
  run_t *r = ctl(0, "export %s -o %s", g_hash, out);
  ck_assert_msg(strstr(r->err, "exported 8 records to "), "%s", r->err);
  const char *text = slurp(out);
  int lines = 0;
  for (const char *p = text; *p; p++) lines += *p == '\n';
  ck_assert_int_eq(lines, 8);
  cJSON *line = parse_json(strtok(strdup(text), "\n"));
  ck_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(line, "workload"), "hash"), g_hash);
  cJSON_Delete(line);
  /* into the same database: everything is already there */
  r = ctl(0, "import %s", out);
  ck_assert_msg(strstr(r->out, "imported 0 records") && strstr(r->out, "(8 already there)"), "%s", r->out);
  /* a file over the daemon's 1 MiB message limit goes in several calls */
  char big[128];
  snprintf(big, sizeof big, "%s/big.jsonl", g_dir);
  r = sh("for i in $(seq 60); do cat %s; done > %s && test $(stat -c %%s %s) -gt 1100000", out, big, big);
  ck_assert_int_eq(r->status, 0);
  r = ctl(0, "import %s", big);
  ck_assert_msg(strstr(r->out, "imported 0 records") && strstr(r->out, "(480 already there)"), "%s", r->out);
  /* into a fresh daemon: all new, and its best equals ours */
  pid_t pid2 = start_daemon(g_dir, "second", sock2, sizeof sock2);
  r = sh("'%s' --socket '%s' import %s --json", env("TUNECTL"), sock2, out);
  ck_assert_int_eq(r->status, 0);
  cJSON *j = parse_json(r->out);
  ck_assert_int_eq((int)jnum(j, "inserted"), 8);
  ck_assert_int_eq((int)jnum(j, "duplicates"), 0);
  cJSON_Delete(j);
  cJSON *a = parse_json(ctl(0, "best %s --json", g_hash)->out);
  r = sh("'%s' --socket '%s' best %s --json", env("TUNECTL"), sock2, g_hash);
  ck_assert_int_eq(r->status, 0);
  cJSON *b = parse_json(r->out);
  ck_assert_double_eq(jnum(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "records"), 0), "median_secs"),
                      jnum(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, "records"), 0), "median_secs"));
  cJSON_Delete(a);
  cJSON_Delete(b);
  r = sh("'%s' --socket '%s' shutdown", env("TUNECTL"), sock2);
  ck_assert_msg(r->status == 0 && strstr(r->out, "shutting down"), "%s", r->err);
  /* it exits by itself, cleanly (a SIGTERM now would be a second stop: exit at once) */
  int st = wait_daemon(pid2);
  if (st < 0) stop_daemon(pid2);
  ck_assert_int_eq(st, 0);
}
END_TEST

START_TEST(t_cancel) {
  run_t *r = ctl(0, "submit %s --set M=128 --set N=128 --set K=128 --trials 2000 --json", SRC("workloads/matmul.tw"));
  cJSON *j = parse_json(r->out);
  long job = (long)jnum(j, "job");
  cJSON_Delete(j);
  r = ctl(0, "cancel %ld", job);
  char want[64];
  snprintf(want, sizeof want, "job %ld: ", job);
  ck_assert_msg(strstr(r->out, want), "%s", r->out);
  /* watch follows it until the running batch is committed; cancelled exits 1 */
  r = ctl(1, "watch %ld", job);
  ck_assert_msg(strstr(r->out, "cancelled"), "%s", r->out);
  j = parse_json(ctl(0, "status %ld --json", job)->out);
  ck_assert_str_eq(jstr(j, "state"), "cancelled");
  ck_assert(jnum(j, "trials_done") < 2000);
  cJSON_Delete(j);
}
END_TEST

START_TEST(t_errors) {
  run_t *r = ctl(1, "status 99999");
  ck_assert_msg(strstr(r->err, "tunectl status: ") && strstr(r->err, "99999") && strstr(r->err, "(error -32001)"),
                "%s", r->err);
  r = ctl(1, "cancel 99999");
  ck_assert_ptr_nonnull(strstr(r->err, "(error -32001)"));
  r = ctl(1, "watch 99999");
  ck_assert_ptr_nonnull(strstr(r->err, "99999"));
  r = ctl(1, "kernel ffffffffffffffff --emit source");
  ck_assert_msg(strstr(r->err, "ffffffffffffffff"), "%s", r->err);
  r = ctl(1, "best ffffffffffffffff");
  ck_assert_msg(strstr(r->err, "ffffffffffffffff"), "%s", r->err);
  r = ctl(1, "best not-a-file");
  ck_assert_msg(strstr(r->err, "tunectl best: not-a-file is not a workload file, a hash, or the name of a workload in "
                               "the database"), "%s", r->err);
  r = ctl(1, "best ./no/such/file.tw"); /* a path: said missing, not looked up as a name */
  ck_assert_msg(strstr(r->err, "tunectl best: ./no/such/file.tw: no such file (No such file or directory)"), "%s",
                r->err);
  r = ctl(1, "submit nosuch.tw");
  ck_assert_msg(strstr(r->err, "tunectl submit: nosuch.tw: no such file"), "%s", r->err);
  r = ctl(1, "kernel %064d --emit source", 0); /* a whole hash that no workload has */
  ck_assert_msg(strstr(r->err, "no workload 0000000000000000000000000000000000000000000000000000000000000000 in the "
                               "database"), "%s", r->err);
  r = ctl(1, "best %s --set M=4", g_hash);
  ck_assert_ptr_nonnull(strstr(r->err, "--set needs a workload FILE"));
  r = ctl(1, "submit %s --set Q=3", SRC("workloads/matmul.tw"));
  ck_assert_msg(strstr(r->err, "Q"), "%s", r->err);
  r = ctl(1, "submit %s --target nvidia/tesla-p100", SRC("workloads/vector_add.tw"));
  ck_assert_msg((strstr(r->err, "sm_60") || strstr(r->err, "built without CUDA")) && strstr(r->err, "(error -32003)"),
                "%s", r->err);
  /* usage errors exit 2 */
  r = ctl(2, "submit");
  ck_assert_ptr_nonnull(strstr(r->err, "missing FILE"));
  ctl(2, "jobs --bogus");
  ctl(2, "status abc");
  ctl(2, "submit %s --trials 0", SRC("workloads/matmul.tw"));
  ctl(2, "ping extra");
  r = ctl(0, "submit --help");
  ck_assert_ptr_nonnull(strstr(r->out, "--trials N"));
  r = sh("'%s' help kernel", env("TUNECTL"));
  ck_assert_ptr_nonnull(strstr(r->out, "--emit KIND"));
}
END_TEST

START_TEST(t_example_host) {
  run_t *r = sh("'%s' --socket '%s' --size 48 --trials 4", env("MATMUL_HOST"), g_sock);
  ck_assert_msg(r->status == 0, "matmul_host: %d\n%s\n%s", r->status, r->out, r->err);
  ck_assert_msg(strstr(r->out, "tuned matmul 48x48x48 in job") && strstr(r->out, "best kernel: record ") &&
                    strstr(r->out, "check: ") && strstr(r->out, ": ok"),
                "%s", r->out);
  /* the second run reuses the kernel without tuning */
  r = sh("'%s' --socket '%s' --size 48", env("MATMUL_HOST"), g_sock);
  ck_assert_msg(r->status == 0 && strstr(r->out, "reusing the tuned kernel of record"), "%s\n%s", r->out, r->err);
}
END_TEST

/* ---- libtuned against the daemon ----------------------------------------------- */

static void count_progress(const tuned_job_t *j, void *ctx) {
  int *n = ctx;
  ck_assert(j->trials_done <= j->trials);
  (*n)++;
}

START_TEST(t_libtuned) {
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  ck_assert_int_eq(tuned_connect(g_sock, &c, &err), 0);
  ck_assert_str_eq(tuned_socket_path(c), g_sock);
  tuned_set_timeout(c, 120);
  char *res = NULL;
  ck_assert_int_eq(tuned_call(c, "server.info", NULL, &res, &err), 0);
  cJSON *j = parse_json(res);
  ck_assert_str_eq(jstr(j, "version"), TUNED_VERSION_STRING);
  cJSON_Delete(j);
  free(res);
  ck_assert_int_eq(tuned_call(c, "no.such.method", "{}", &res, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_METHOD_NOT_FOUND);
  ck_assert_ptr_null(res);
  ck_assert_int_eq(tuned_call(c, "tune.status", "[1,", &res, &err), TUNED_E_INVALID);
  /* submit + wait with progress */
  char *text = strdup(slurp(SRC("workloads/vector_add.tw")));
  tuned_submit_t s = tuned_submit_defaults();
  s.workload = text;
  s.name = "vector_add";
  s.params_json = "{\"N\": 2048}";
  s.trials = 4;
  s.remeasure = 0;
  s.baseline = 0;
  int64_t job = 0;
  char hash[TUNED_HASH_SIZE];
  ck_assert_msg(tuned_submit(c, &s, &job, hash, &err) == 0, "%s", err.message);
  ck_assert(job > g_job);
  ck_assert_int_eq((int)strlen(hash), TUNED_HASH_SIZE - 1);
  /* the options reached the job (tune.submit once refused remeasure and baseline) */
  char params[64];
  snprintf(params, sizeof params, "{\"job\": %lld}", (long long)job);
  ck_assert_int_eq(tuned_call(c, "tune.status", params, &res, &err), 0);
  j = parse_json(res);
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "options");
  ck_assert_int_eq((int)jnum(opts, "remeasure"), 0);
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(opts, "baseline")));
  cJSON_Delete(j);
  free(res);
  /* the workload's hash from its text, as submit gave it */
  char h2[TUNED_HASH_SIZE];
  ck_assert_msg(tuned_workload_hash(c, text, "{\"N\": 2048}", h2, &err) == 0, "%s", err.message);
  ck_assert_str_eq(h2, hash);
  ck_assert_int_eq(tuned_workload_hash(c, text, "{\"N\": 1024}", h2, &err), 0);
  ck_assert_str_ne(h2, hash);
  ck_assert_int_eq(tuned_workload_hash(c, "input A: float32[Q]\n", NULL, h2, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_BAD_WORKLOAD);
  ck_assert_msg(strstr(err.message, "workload.tw:1:18: ") != NULL, "%s", err.message);
  ck_assert_int_eq(tuned_workload_hash(c, text, "{\"Q\": 1}", h2, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_BAD_WORKLOAD);
  ck_assert_int_eq(tuned_workload_hash(c, text, "[1]", h2, &err), TUNED_E_INVALID);
  ck_assert_int_eq(tuned_call(c, "workload.check", "{\"workload_text\": \"input A: float32[N]\\n"
                              "output B: float32[N]\\nB[i] = A[i] * 2.0\\n\", \"name\": \"dbl\"}", &res, &err),
                   TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_BAD_WORKLOAD);
  ck_assert_msg(strstr(err.message, "dbl.tw:1:") != NULL, "%s", err.message);
  ck_assert_int_eq(tuned_call(c, "workload.check", "{\"workload_text\": \"param N = 8\\ninput A: float32[N]\\n"
                              "output B: float32[N, 2]\\nB[i, j] = A[i] * 2.0\\n\", \"params\": {\"N\": 6}}",
                              &res, &err), 0);
  j = parse_json(res);
  ck_assert_int_eq((int)strlen(jstr(j, "workload")), TUNED_HASH_SIZE - 1);
  ck_assert_int_eq((int)jnum(cJSON_GetObjectItemCaseSensitive(j, "params"), "N"), 6);
  ck_assert_int_eq((int)jnum(j, "flops"), 12);
  const cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tensors"), 1);
  ck_assert_str_eq(jstr(out, "name"), "B");
  ck_assert_str_eq(jstr(out, "role"), "output");
  ck_assert_str_eq(jstr(out, "dtype"), "float32");
  ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "shape"), 1)->valueint, 2);
  cJSON_Delete(j);
  free(res);
  int calls = 0;
  tuned_job_t final;
  ck_assert_msg(tuned_wait(c, job, 120, count_progress, &calls, &final, &err) == 0, "%s", err.message);
  ck_assert_int_ge(calls, 1);
  ck_assert_int_eq(final.state, TUNED_JOB_DONE);
  ck_assert(tuned_job_finished(&final));
  ck_assert_str_eq(final.workload, hash);
  ck_assert(final.best_record > 0 && final.best_gflops > 0);
  tuned_job_t st;
  ck_assert_int_eq(tuned_job_status(c, job, &st, &err), 0);
  ck_assert_int_eq(st.best_record, final.best_record);
  ck_assert_str_eq(st.state_name, "done");
  /* the best kernel, by hash and by text */
  tuned_kernel_t *k = NULL;
  ck_assert_msg(tuned_kernel_get(c, hash, "cpu", &k, &err) == 0, "%s", err.message);
  ck_assert_int_eq(k->record, final.best_record);
  ck_assert_str_eq(k->language, "c");
  ck_assert_str_eq(k->target, "cpu");
  ck_assert_str_eq(k->workload, hash);
  ck_assert_str_eq(k->name, "vector_add");
  ck_assert_ptr_nonnull(strstr(k->source, "tuned_entry"));
  ck_assert_int_eq(k->nkernels, 1);
  ck_assert_str_eq(k->kernels[0].name, "vector_add");
  ck_assert_int_eq(k->nparams, 3);
  ck_assert_str_eq(k->params[2].name, "C");
  ck_assert_str_eq(k->params[2].role, "output");
  ck_assert_str_eq(k->params[2].dtype, "float32");
  ck_assert_int_eq(k->params[2].elements, 2048);
  ck_assert_int_eq(k->params[2].elem_bytes, 4);
  ck_assert_ptr_null(k->cubin);
  ck_assert_ptr_null(k->ptx);
  ck_assert(k->median_secs > 0 && k->gflops > 0);
  tuned_kernel_free(k);
  ck_assert_int_eq(tuned_kernel_get_text(c, text, "{\"N\": 2048}", NULL, &k, &err), 0);
  ck_assert_int_eq(k->record, final.best_record);
  tuned_kernel_free(k);
  /* errors: no kernel for an untuned size, unknown job */
  ck_assert_int_eq(tuned_kernel_get_text(c, text, "{\"N\": 999}", NULL, &k, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_NO_KERNEL);
  ck_assert_ptr_null(k);
  /* ... unless the nearest tuned shape's kernel verifies at N = 999 */
  ck_assert_msg(tuned_kernel_get_nearest(c, text, "{\"N\": 999}", NULL, 1, &k, &err) == 0, "%s", err.message);
  ck_assert_int_eq(k->params[2].elements, 999);
  ck_assert_ptr_nonnull(k->fallback_json);
  ck_assert_ptr_nonnull(strstr(k->fallback_json, "\"verified\":true"));
  ck_assert(k->median_secs > 0);
  tuned_kernel_free(k);
  ck_assert_int_eq(tuned_kernel_get_text(c, text, "{\"N\": 2048}", NULL, &k, &err), 0);
  ck_assert_ptr_null(k->fallback_json);
  tuned_kernel_free(k);
  ck_assert_int_eq(tuned_job_status(c, 424242, &st, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, TUNED_RPC_NOT_FOUND);
  ck_assert_int_eq(tuned_kernel_get_text(c, text, "[1]", NULL, &k, &err), TUNED_E_INVALID);
  free(text);
  tuned_close(c);
}
END_TEST

/* ---- no daemon -------------------------------------------------------------------- */

START_TEST(t_no_daemon) {
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  ck_assert_int_eq(tuned_connect("/tmp/tuned-client-no-such/x.sock", &c, &err), TUNED_E_CONNECT);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.message, "cannot connect to /tmp/tuned-client-no-such/x.sock: No such file or directory");
  run_t *r = sh("'%s' --socket /tmp/tuned-client-no-such/x.sock ping", env("TUNECTL"));
  ck_assert_int_eq(r->status, 1);
  ck_assert_str_eq(r->err, "tunectl ping: cannot connect to /tmp/tuned-client-no-such/x.sock: No such file or "
                           "directory — start it with `tuned --target cpu`\n");
  r = sh("TUNED_SOCKET=/tmp/tuned-client-no-such/y.sock '%s' jobs", env("TUNECTL"));
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "cannot connect to /tmp/tuned-client-no-such/y.sock"));
  r = sh("'%s' --socket /tmp/tuned-client-no-such/x.sock --size 32", env("MATMUL_HOST"));
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "start the daemon first"));
  r = sh("'%s' --socket", env("TUNECTL"));
  ck_assert_int_eq(r->status, 2);
}
END_TEST

START_TEST(t_default_socket) {
  char buf[256];
  setenv("TUNED_SOCKET", "/x/y.sock", 1);
  ck_assert_int_eq(tuned_default_socket(buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "/x/y.sock");
  unsetenv("TUNED_SOCKET");
  setenv("XDG_RUNTIME_DIR", "/run/user/77", 1);
  ck_assert_int_eq(tuned_default_socket(buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "/run/user/77/tuned/tuned.sock");
  setenv("XDG_RUNTIME_DIR", "relative", 1);
  ck_assert_int_eq(tuned_default_socket(buf, sizeof buf), 0);
  char want[64];
  snprintf(want, sizeof want, "/tmp/tuned-%u/tuned.sock", (unsigned)getuid());
  ck_assert_str_eq(buf, want);
  unsetenv("XDG_RUNTIME_DIR");
  ck_assert_int_eq(tuned_default_socket(buf, sizeof buf), 0);
  ck_assert_str_eq(buf, want);
  ck_assert_int_eq(tuned_default_socket(buf, 8), TUNED_E_INVALID);
}
END_TEST

START_TEST(t_parse_kernel_job) {
  const char *json =
      "{\"record\": 12, \"median_secs\": 2e-5, \"gflops\": 210.5, \"target\": \"nvidia/tesla-t4\", "
      "\"workload\": \"0123456789abcdef\", \"name\": \"mm\", \"language\": \"cuda\", \"source\": \"__global__ ...\", "
      "\"ptx\": \".version 8.0\", \"cubin_base64\": \"f0VMRgIB\\nAQ==\", \"trace\": [[], []], "
      "\"launch\": {\"entry\": \"mm\", \"kernels\": [{\"name\": \"mm_kernel0\", \"grid\": [16, 8, 1], "
      "\"block\": [64, 2, 1], \"dyn_shared_bytes\": 128, \"static_shared_bytes\": 4096, \"tensor_maps\": [{\"name\": "
      "\"tuned_map_a\", \"param\": \"A\", \"dims\": [32, 64], \"stride_bytes\": 64, \"box\": [32, 64], \"swizzle\": "
      "64}]}, {\"name\": \"mm_kernel1\", "
      "\"grid\": [4], \"block\": [32]}], \"params\": [{\"name\": \"A\", \"dtype\": \"float16\", \"shape\": [64, 32], "
      "\"role\": \"input\"}, {\"name\": \"T\", \"dtype\": \"float32\", \"shape\": [7], \"role\": \"workspace\"}]}}";
  tuned_kernel_t *k = NULL;
  tuned_error_t err = {0};
  ck_assert_msg(tuned_kernel_parse(json, &k, &err) == 0, "%s", err.message);
  ck_assert_int_eq(k->record, 12);
  ck_assert_str_eq(k->entry, "mm");
  ck_assert_str_eq(k->ptx, ".version 8.0");
  ck_assert_uint_eq(k->cubin_size, 7);
  ck_assert_mem_eq(k->cubin, "\x7f" "ELF\x02\x01\x01", 7);
  ck_assert_str_eq(k->trace_json, "[[],[]]");
  ck_assert_int_eq(k->nkernels, 2);
  ck_assert_int_eq(k->kernels[0].grid[1], 8);
  ck_assert_int_eq(k->kernels[0].block[0], 64);
  ck_assert_int_eq(k->kernels[0].shared_bytes, 128);
  ck_assert_int_eq(k->kernels[0].static_shared_bytes, 4096);
  ck_assert_int_eq(k->kernels[0].ntensor_maps, 1);
  ck_assert_str_eq(k->kernels[0].tensor_maps[0].name, "tuned_map_a");
  ck_assert_int_eq(k->kernels[0].tensor_maps[0].param, 0);
  ck_assert(k->kernels[0].tensor_maps[0].dims[0] == 32 && k->kernels[0].tensor_maps[0].dims[1] == 64);
  ck_assert(k->kernels[0].tensor_maps[0].stride_bytes == 64 && k->kernels[0].tensor_maps[0].box[1] == 64);
  ck_assert_int_eq(k->kernels[0].tensor_maps[0].swizzle, 64);
  ck_assert_int_eq(k->kernels[1].ntensor_maps, 0);
  ck_assert_int_eq(k->kernels[1].grid[0], 4);
  ck_assert_int_eq(k->kernels[1].grid[2], 1);
  ck_assert_int_eq(k->params[0].elements, 64 * 32);
  ck_assert_int_eq(k->params[0].elem_bytes, 2);
  ck_assert_int_eq(k->params[0].ndim, 2);
  ck_assert_str_eq(k->params[1].role, "workspace");
  ck_assert_ptr_null(k->params[1].packs);
  tuned_kernel_free(k);
  /* a hoisted packing: the packed copy's padded size, the input it holds and its function */
  const char *packed = "{\"language\": \"c\", \"source\": \"int d(...)\", \"launch\": {\"entry\": \"d\", "
                       "\"pack_entry\": \"tuned_pack_d\", \"kernels\": [{\"name\": \"d\"}], \"params\": [{\"name\": \"W\", "
                       "\"dtype\": \"float32\", \"shape\": [48, 64], \"role\": \"input\", \"elements\": 3072}, "
                       "{\"name\": \"W_local\", \"dtype\": \"float32\", \"shape\": [64, 48], \"role\": \"packed\", "
                       "\"elements\": 5120%s}]}}";
  char text[1024];
  snprintf(text, sizeof text, packed, ", \"packs\": \"W\", \"pack_function\": \"d_pack_W\"");
  ck_assert_msg(tuned_kernel_parse(text, &k, &err) == 0, "%s", err.message);
  ck_assert_str_eq(k->params[1].role, "packed");
  ck_assert_int_eq(k->params[1].elements, 5120);
  ck_assert_str_eq(k->params[1].packs, "W");
  ck_assert_str_eq(k->params[1].pack_function, "d_pack_W");
  ck_assert_ptr_null(k->params[0].pack_function);
  tuned_kernel_free(k);
  snprintf(text, sizeof text, packed, "");
  ck_assert_int_eq(tuned_kernel_parse(text, &k, &err), TUNED_E_PROTOCOL);
  ck_assert_msg(strstr(err.message, "packed parameter W_local does not say what it packs"), "%s", err.message);
  ck_assert_int_eq(tuned_kernel_parse("{\"source\": \"x\", \"launch\": {}}", &k, &err), TUNED_E_PROTOCOL);
  ck_assert_ptr_null(k);
  ck_assert_int_eq(tuned_kernel_parse("{\"language\": \"c\"}", &k, &err), TUNED_E_PROTOCOL);
  unsigned char *b = NULL;
  size_t n = 0;
  ck_assert_int_eq(tuned_base64_decode("SGVsbG8sIHdvcmxk", &b, &n, &err), 0);
  ck_assert_uint_eq(n, 12);
  ck_assert_mem_eq(b, "Hello, world", 12);
  free(b);
  ck_assert_int_eq(tuned_base64_decode("SGV*", &b, &n, &err), TUNED_E_INVALID);
  tuned_job_t j;
  ck_assert_int_eq(tuned_job_parse("{\"job\": 4, \"state\": \"running\", \"workload\": \"0123456789abcdef\", "
                                   "\"trials\": 64, \"trials_done\": 12, \"best\": {\"record\": 9, \"median_secs\": "
                                   "0.5, \"gflops\": 3}, \"failures\": {\"build_error\": 2, \"wrong_result\": 1, "
                                   "\"too_slow\": 5}, \"baseline\": {\"status\": \"ok\", \"median_secs\": 2.5, "
                                   "\"gflops\": 0.6, \"speedup\": 5}, \"error\": null}", &j, &err), 0);
  ck_assert_int_eq(j.id, 4);
  ck_assert_int_eq(j.state, TUNED_JOB_RUNNING);
  ck_assert(!tuned_job_finished(&j));
  ck_assert_int_eq(j.trials_done, 12);
  ck_assert_int_eq(j.best_record, 9);
  ck_assert_int_eq(j.build_errors, 2);
  ck_assert_int_eq(j.wrong_results, 1);
  ck_assert_int_eq(j.too_slow, 5);
  ck_assert_double_eq(j.baseline_median_secs, 2.5);
  ck_assert_double_eq(j.baseline_gflops, 0.6);
  ck_assert_str_eq(j.error, "");
  ck_assert_int_eq(tuned_job_parse("{\"state\": \"done\"}", &j, &err), TUNED_E_PROTOCOL);
}
END_TEST

/* ---- libtuned against a scripted server ------------------------------------------- */

/* The fake daemon answers tune.watch with "method not found" (so tuned_wait
 * polls), reports the job running then done, sends a notification before
 * each response, and answers one request without an id. */
typedef struct fake {
  int listen_fd;
  int status_calls;
  char path[108];
} fake_t;

static void fake_send(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fake_send(int fd, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  buf[n++] = '\n';
  ck_assert_int_eq(write(fd, buf, (size_t)n), n);
}

static void *fake_main(void *arg) {
  fake_t *f = arg;
  int fd = accept(f->listen_fd, NULL, NULL);
  FILE *in = fdopen(fd, "r");
  char line[4096];
  while (fgets(line, sizeof line, in)) {
    cJSON *m = cJSON_Parse(line);
    int id = (int)cJSON_GetObjectItem(m, "id")->valuedouble;
    const char *method = cJSON_GetObjectItem(m, "method")->valuestring;
    fake_send(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"tune.progress\",\"params\":{\"job\":99,\"state\":\"running\"}}");
    if (strcmp(method, "tune.watch") == 0) {
      fake_send(fd, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"error\":{\"code\":-32601,\"message\":\"no tune.watch\"}}", id);
    } else if (strcmp(method, "tune.status") == 0) {
      bool done = ++f->status_calls >= 3;
      fake_send(fd, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"job\":5,\"state\":\"%s\",\"trials\":4,"
                    "\"trials_done\":%d,\"best\":null}}", id, done ? "done" : "running", done ? 4 : 2);
    } else if (strcmp(method, "bad.line") == 0) {
      fake_send(fd, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse error\"}}");
    } else if (strcmp(method, "garbage") == 0) {
      fake_send(fd, "this is not json");
    } else {
      char *params = cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "params"));
      fake_send(fd, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"echo\":%s}}", id, params);
      free(params);
    }
    cJSON_Delete(m);
  }
  fclose(in);
  return NULL;
}

static void record_state(const tuned_job_t *j, void *ctx) {
  char *log = ctx;
  strcat(log, j->state_name);
  strcat(log, j->trials_done == 4 ? "4 " : "2 ");
}

static void record_json(const tuned_job_t *j, const char *json, void *ctx) {
  ck_assert_int_eq(j->id, 5);
  snprintf((char *)ctx + strlen(ctx), 256 - strlen(ctx), "%s\n", json);
}

START_TEST(t_fake_server) {
  fake_t f = {0};
  snprintf(f.path, sizeof f.path, "/tmp/tuned-client-fake-%d.sock", (int)getpid());
  unlink(f.path);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", f.path);
  f.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_eq(bind(f.listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
  ck_assert_int_eq(listen(f.listen_fd, 1), 0);
  pthread_t th;
  pthread_create(&th, NULL, fake_main, &f);
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  ck_assert_int_eq(tuned_connect(f.path, &c, &err), 0);
  char *res = NULL;
  /* a notification before the response is skipped */
  ck_assert_int_eq(tuned_call(c, "echo", "{\"a\":[1,2]}", &res, &err), 0);
  ck_assert_str_eq(res, "{\"echo\":{\"a\":[1,2]}}");
  free(res);
  /* without tune.watch, tuned_wait polls tune.status */
  char log[256] = "";
  tuned_job_t final;
  ck_assert_int_eq(tuned_wait(c, 5, 30, record_state, log, &final, &err), 0);
  ck_assert_str_eq(log, "running2 done4 ");
  ck_assert_int_eq(final.state, TUNED_JOB_DONE);
  ck_assert_int_eq(final.trials_done, 4);
  /* tuned_wait_json hands over the job objects as the daemon sent them */
  char json[256] = "";
  ck_assert_int_eq(tuned_wait_json(c, 5, 30, record_json, json, &final, &err), 0);
  ck_assert_str_eq(json, "{\"job\":5,\"state\":\"done\",\"trials\":4,\"trials_done\":4,\"best\":null}\n");
  ck_assert_int_eq(final.state, TUNED_JOB_DONE);
  /* an error without an id answers the pending call */
  ck_assert_int_eq(tuned_call(c, "bad.line", NULL, &res, &err), TUNED_E_RPC);
  ck_assert_int_eq(err.rpc_code, -32700);
  ck_assert_str_eq(err.message, "parse error");
  ck_assert_int_eq(tuned_call(c, "garbage", NULL, &res, &err), TUNED_E_PROTOCOL);
  ck_assert_ptr_nonnull(strstr(err.message, "this is not json"));
  tuned_close(c);
  pthread_join(th, NULL);
  close(f.listen_fd);
  unlink(f.path);
}
END_TEST

/* A server that never answers: the client's timeout ends the call. */
START_TEST(t_timeout) {
  char path[108];
  snprintf(path, sizeof path, "/tmp/tuned-client-mute-%d.sock", (int)getpid());
  unlink(path);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  ck_assert_int_eq(listen(fd, 1), 0);
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  ck_assert_int_eq(tuned_connect(path, &c, &err), 0);
  tuned_set_timeout(c, 0.2);
  char *res = NULL;
  double t0 = now_s();
  ck_assert_int_eq(tuned_call(c, "server.info", NULL, &res, &err), TUNED_E_TIMEOUT);
  ck_assert(now_s() - t0 < 5);
  ck_assert_ptr_nonnull(strstr(err.message, path));
  tuned_close(c);
  close(fd);
  unlink(path);
}
END_TEST

/* A socket served by another user's process (here: a child that became
 * nobody) is refused before anything is sent, whoever owns its directory.
 * Needs root to become another user; skipped otherwise. */
START_TEST(t_foreign_daemon) {
  if (geteuid() != 0) {
    fprintf(stderr, "t_foreign_daemon: skipped (not root: cannot run a server as another user)\n");
    return;
  }
  char dir[] = "/tmp/tuned-client-foreign-XXXXXX", path[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(chmod(dir, 0777), 0);
  snprintf(path, sizeof path, "%s/tuned.sock", dir);
  int ready[2];
  ck_assert_int_eq(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 4)) _exit(3);
    if (write(ready[1], "x", 1) != 1) _exit(4);
    int c = accept(fd, NULL, NULL);
    char buf[256];
    ssize_t n = c >= 0 ? read(c, buf, sizeof buf) : -1; /* 0: the client closed without a word */
    _exit(n == 0 ? 0 : 5);
  }
  char x;
  ck_assert_int_eq(read(ready[0], &x, 1), 1);
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  ck_assert_int_eq(tuned_connect(path, &c, &err), TUNED_E_CONNECT);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(err.message, "runs as uid 65534, not as you (uid 0)") && strstr(err.message, path), "%s",
                err.message);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the foreign server saw a message or failed: %d", st);
  unlink(path);
  rmdir(dir);
  close(ready[0]);
  close(ready[1]);
}
END_TEST

/* A socket that is there but not ours to use (EACCES: a 0700 directory of
 * another user) gets a hint that says so, not "start it". Needs root to
 * run tunectl as another user; skipped otherwise. */
START_TEST(t_socket_not_ours) {
  if (geteuid() != 0) {
    fprintf(stderr, "t_socket_not_ours: skipped (not root)\n");
    return;
  }
  char dir[] = "/tmp/tuned-client-private-XXXXXX", path[64], out[] = "/tmp/tuned-client-out-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir)); /* 0700, root's */
  snprintf(path, sizeof path, "%s/tuned.sock", dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  ck_assert_int_eq(listen(fd, 1), 0);
  int ofd = mkstemp(out);
  ck_assert_int_ge(ofd, 0);
  ck_assert_int_eq(fchmod(ofd, 0666), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    dup2(ofd, 2);
    execl(env("TUNECTL"), "tunectl", "--socket", path, "ping", (char *)NULL);
    _exit(4);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
  const char *text = slurp(out);
  ck_assert_msg(strstr(text, "Permission denied — the socket or its directory is not yours to use") &&
                    !strstr(text, "start it with"),
                "%s", text);
  close(ofd);
  unlink(out);
  close(fd);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* ---- pkg-config and bench ----------------------------------------------------------- */

START_TEST(t_pkgconfig) {
  char pc[512];
  snprintf(pc, sizeof pc, "%s/libtuned.pc", env("LIBTUNED_PC_DIR"));
  const char *text = slurp(pc);
  ck_assert_msg(strstr(text, "Name: libtuned\n") && strstr(text, "Version: 0.1.0\n") &&
                    strstr(text, "Libs: -L${libdir} -ltuned\n") && strstr(text, "Cflags: -I${includedir}\n") &&
                    strstr(text, "Requires.private: libcjson"),
                "%s", text);
  /* a program built with the uninstalled pkg-config file links and runs */
  char dir[] = "/tmp/tuned-client-pc-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char src[128];
  snprintf(src, sizeof src, "%s/user.c", dir);
  write_file(src, "#include <stdio.h>\n#include <tuned.h>\n"
                  "int main(void) {\n  tuned_client_t *c; tuned_error_t e;\n"
                  "  int rc = tuned_connect(\"/nonexistent/tuned.sock\", &c, &e);\n"
                  "  printf(\"%d %s\\n\", rc, e.message);\n  return rc == TUNED_E_CONNECT ? 0 : 1;\n}\n");
  /* $TUNED_TEST_CFLAGS: a sanitizer build's libtuned needs the program built with the same -fsanitize */
  const char *cflags = getenv("TUNED_TEST_CFLAGS") ? getenv("TUNED_TEST_CFLAGS") : "";
  run_t *r = sh("cd '%s' && PKG_CONFIG_PATH='%s' cc -Wall -Werror %s -o user user.c $(PKG_CONFIG_PATH='%s' pkg-config "
                "--cflags --libs libtuned-uninstalled) && LD_LIBRARY_PATH='%s' ./user",
                dir, env("LIBTUNED_UNINSTALLED_DIR"), cflags, env("LIBTUNED_UNINSTALLED_DIR"), env("LIBTUNED_DIR"));
  ck_assert_msg(r->status == 0, "%s\n%s", r->out, r->err);
  ck_assert_str_eq(r->out, "-1 cannot connect to /nonexistent/tuned.sock: No such file or directory\n");
  sh("rm -rf '%s'", dir);
}
END_TEST

/* Writes a bench result file with (name, hash, gflops or <0 for "not found"). */
static void bench_file(const char *path, const char *target, int n, const char *const *names,
                       const char *const *hashes, const double *gflops) {
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "suite", "hand-made");
  cJSON_AddStringToObject(doc, "target", target);
  cJSON *rs = cJSON_AddArrayToObject(doc, "results");
  for (int i = 0; i < n; i++) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", names[i]);
    cJSON_AddStringToObject(r, "hash", hashes[i]);
    cJSON_AddBoolToObject(r, "found", gflops[i] >= 0);
    cJSON_AddNumberToObject(r, "gflops", gflops[i] >= 0 ? gflops[i] : 0);
    cJSON_AddNumberToObject(r, "median_secs", 1e-3);
    cJSON_AddNumberToObject(r, "trials", 16);
    cJSON_AddItemToArray(rs, r);
  }
  char *text = cJSON_Print(doc);
  write_file(path, text);
  free(text);
  cJSON_Delete(doc);
}

/* A made-up workload hash: 64 times digit d. */
#define H16(d) d d d d d d d d d d d d d d d d
#define H64(d) H16(d) H16(d) H16(d) H16(d)

/* Adds the run's trials and mode to a bench result file. */
static void bench_setup(const char *path, int trials, const char *mode) {
  cJSON *doc = parse_json(slurp(path));
  cJSON_AddNumberToObject(doc, "trials", trials);
  cJSON_AddStringToObject(doc, "mode", mode);
  char *text = cJSON_Print(doc);
  write_file(path, text);
  free(text);
  cJSON_Delete(doc);
}

START_TEST(t_bench_compare) {
  static const char *const names[] = {"vector_add", "matmul", "softmax"};
  static const char *const hashes[] = {H64("1"), H64("2"), H64("3")};
  char dir[] = "/tmp/tuned-client-bench-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char base[128], cur[128];
  snprintf(base, sizeof base, "%s/base.json", dir);
  snprintf(cur, sizeof cur, "%s/cur.json", dir);
  bench_file(base, "cpu", 3, names, hashes, (const double[]){10, 100, 5});
  const char *tc = env("TUNECTL");
  /* within 5%: -3% on matmul, faster elsewhere */
  bench_file(cur, "cpu", 3, names, hashes, (const double[]){12, 97, 5});
  run_t *r = sh("'%s' bench --compare %s --baseline %s --max-regression 5%%", tc, cur, base);
  ck_assert_msg(r->status == 0, "%s\n%s", r->out, r->err);
  ck_assert_msg(strstr(r->out, "-3.0%     0.0%  ok"), "%s", r->out);
  ck_assert_ptr_nonnull(strstr(r->out, "+20.0%     0.0%  ok"));
  ck_assert_ptr_nonnull(strstr(r->out, "no regression beyond 5.0% (3 workloads)"));
  /* -10% on matmul is a regression at 5% (the default), not at 15% */
  bench_file(cur, "cpu", 3, names, hashes, (const double[]){10, 90, 5});
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->out, "matmul") && strstr(r->out, "-10.0%     0.0%  REGRESSION: more than 5.0% slower"), "%s",
                r->out);
  ck_assert_ptr_nonnull(strstr(r->out, "1 of 3 workloads regressed"));
  r = sh("'%s' bench --compare %s --baseline %s --max-regression 15", tc, cur, base);
  ck_assert_msg(r->status == 0, "%s", r->out);
  /* a workload that found no kernel, and one missing from the results */
  bench_file(cur, "cpu", 2, names, hashes, (const double[]){-1, 100});
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->out, "REGRESSION: no verified kernel found"));
  ck_assert_ptr_nonnull(strstr(r->out, "REGRESSION: missing from the results"));
  ck_assert_ptr_nonnull(strstr(r->out, "2 of 3 workloads regressed"));
  /* a new workload is reported, not a failure */
  bench_file(cur, "cpu", 3, (const char *const[]){"vector_add", "matmul", "conv2d"},
             (const char *const[]){H64("1"), H64("2"), H64("4")},
             (const double[]){10, 100, 1});
  bench_file(base, "cpu", 2, names, hashes, (const double[]){10, 100});
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_msg(r->status == 0 && strstr(r->out, "new (not in the baseline)"), "%s", r->out);
  /* noise: -10% is within 5% plus twice a 4% noise on each side, and the
   * comparison goes to --json as JSON, the outcome to --junit as XML */
  bench_file(base, "cpu", 2, names, hashes, (const double[]){10, 100});
  bench_file(cur, "cpu", 2, names, hashes, (const double[]){10, 90});
  cJSON *doc = parse_json(slurp(cur));
  cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "results"), 1);
  cJSON_AddNumberToObject(m, "noise", 0.04);
  cJSON_AddNumberToObject(m, "job", 7);
  cJSON_AddNumberToObject(m, "record", 42);
  char *text = cJSON_Print(doc);
  write_file(cur, text);
  free(text);
  cJSON_Delete(doc);
  char cmp[160], junit[160];
  snprintf(cmp, sizeof cmp, "%s/cmp.json", dir);
  snprintf(junit, sizeof junit, "%s/junit.xml", dir);
  r = sh("'%s' bench --compare %s --baseline %s --json %s --junit %s", tc, cur, base, cmp, junit);
  ck_assert_msg(r->status == 0 && strstr(r->out, "-10.0%     4.0%  ok"), "%s\n%s", r->out, r->err);
  doc = parse_json(slurp(cmp));
  ck_assert_int_eq((int)jnum(doc, "regressions"), 0);
  const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "rows"), 1);
  ck_assert_str_eq(jstr(row, "status"), "ok");
  ck_assert_int_eq((int)jnum(row, "job"), 7);
  ck_assert_int_eq((int)jnum(row, "record"), 42);
  ck_assert(fabs(jnum(row, "allowed") - 0.13) < 1e-9);
  cJSON_Delete(doc);
  const char *xml = slurp(junit);
  ck_assert_msg(strstr(xml, "<testsuite name=\"tunectl bench hand-made\" tests=\"2\" failures=\"0\"") &&
                strstr(xml, "<testcase classname=\"bench\" name=\"matmul 2222222222222222222222222222222222222222222222222222222222222222\"") &&
                strstr(xml, "job 7, record 42"), "%s", xml);
  /* past the noise: a regression, a JUnit failure */
  r = sh("'%s' bench --compare %s --baseline %s --max-regression 1 --junit %s", tc, cur, base, junit);
  ck_assert_msg(r->status == 1 && strstr(r->out, "REGRESSION: more than 9.0% slower"), "%s", r->out);
  xml = slurp(junit);
  ck_assert_msg(strstr(xml, "failures=\"1\"") && strstr(xml, "<failure message=\"slower than allowed\">"), "%s", xml);
  /* a machine too noisy to tell: said, not failed */
  bench_file(cur, "cpu", 2, names, hashes, (const double[]){10, 50});
  doc = parse_json(slurp(cur));
  cJSON_AddNumberToObject(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "results"), 1), "noise", 0.6);
  text = cJSON_Print(doc);
  write_file(cur, text);
  free(text);
  cJSON_Delete(doc);
  r = sh("'%s' bench --compare %s --baseline %s --junit %s", tc, cur, base, junit);
  ck_assert_msg(r->status == 0 && strstr(r->out, "-50.0%    60.0%  ok (too noisy to tell"), "%s", r->out);
  ck_assert_ptr_nonnull(strstr(slurp(junit), "failures=\"0\""));
  /* a baseline of other trials or mode is refused */
  bench_setup(base, 8, "in-process");
  bench_setup(cur, 4, "daemon");
  r = sh("'%s' bench --compare %s --baseline %s --json %s", tc, cur, base, cmp);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->err, "the baseline was tuned with trials 8 and the results with trials 4"), "%s", r->err);
  doc = parse_json(slurp(cmp)); /* the JSON is written all the same, with the error */
  ck_assert_msg(strstr(jstr(doc, "error"), "trials 8"), "%s", jstr(doc, "error"));
  cJSON_Delete(doc);
  /* another target, bad files, bad options */
  bench_file(base, "nvidia/a100", 2, names, hashes, (const double[]){10, 100});
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "measured on target nvidia/a100 and the results on cpu"));
  /* a baseline an older tuned wrote (16-digit hashes) is refused, saying so */
  bench_file(base, "cpu", 3, names, (const char *const[]){"1111111111111111", "2222222222222222", "3333333333333333"},
             (const double[]){10, 100, 5});
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_int_eq(r->status, 1);
  ck_assert_msg(strstr(r->err, "the baseline holds 16-digit hashes: an older tuned wrote it"), "%s", r->err);
  write_file(base, "{\"results\": 3}");
  r = sh("'%s' bench --compare %s --baseline %s", tc, cur, base);
  ck_assert_int_eq(r->status, 1);
  ck_assert_ptr_nonnull(strstr(r->err, "the baseline is not a `tunectl bench` result"));
  r = sh("'%s' bench --compare %s --baseline %s --max-regression lots", tc, cur, base);
  ck_assert_int_eq(r->status, 2);
  ck_assert_int_eq(sh("'%s' bench --compare %s", tc, cur)->status, 2);
  ck_assert_int_eq(sh("'%s' bench %s --json out.json", tc, SRC("bench/suites/ci-small.json"))->status, 2);
  sh("rm -rf '%s'", dir);
}
END_TEST

/* The real thing, small: tune ci-small in process, compare with itself. */
START_TEST(t_bench_run) {
  char dir[] = "/tmp/tuned-client-benchrun-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  run_t *r = sh("cd '%s' && '%s' bench %s --trials 4 --json out.json --baseline out.json", dir, env("TUNECTL"),
                SRC("bench/suites/ci-small.json"));
  ck_assert_msg(r->status == 0, "%s\n%s", r->out, r->err);
  ck_assert_ptr_nonnull(strstr(r->out, "no regression beyond 5.0% (3 workloads)"));
  char path[128];
  snprintf(path, sizeof path, "%s/out.json", dir);
  cJSON *doc = parse_json(slurp(path));
  ck_assert_str_eq(jstr(doc, "suite"), "ci-small");
  ck_assert_str_eq(jstr(doc, "target"), "cpu");
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(doc, "results"), *x;
  ck_assert_int_eq(cJSON_GetArraySize(rs), 3);
  cJSON_ArrayForEach(x, rs) {
    ck_assert_msg(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "found")), "%s found nothing", jstr(x, "name"));
    ck_assert(jnum(x, "gflops") > 0 && jnum(x, "median_secs") > 0);
    ck_assert(jnum(x, "trials") >= 1 && jnum(x, "trials") <= 4);
    /* the best re-timed in 5 runs: the figure is their median, the noise half their spread */
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(x, "remeasure_secs");
    ck_assert_msg(cJSON_GetArraySize(rounds) >= 3, "%s: %d rounds", jstr(x, "name"), cJSON_GetArraySize(rounds));
    ck_assert(jnum(x, "noise") >= 0 && jnum(x, "noise") <= 1); /* 1: too noisy to tell */
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(x, "job")));
  }
  const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(doc, "comparison");
  ck_assert_int_eq((int)jnum(cmp, "regressions"), 0);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cmp, "rows")), 3);
  r = sh("'%s' check %s --set M=128 --set N=128 --set K=128 --json", env("TUNECTL"), SRC("workloads/matmul.tw"));
  cJSON *chk = parse_json(r->out);
  ck_assert_str_eq(jstr(cJSON_GetArrayItem(rs, 1), "hash"), jstr(chk, "hash"));
  ck_assert_str_eq(jstr(cJSON_GetArrayItem(rs, 1), "name"), "matmul");
  cJSON_Delete(chk);
  cJSON_Delete(doc);
  sh("rm -rf '%s'", dir);
}
END_TEST

/* Every build failing (TUNED_CC=/bin/false): bench's results say so per
 * workload; submit --wait, watch and bench, in process and through a
 * daemon, exit 1 naming the workload and its first failure: a CI gate
 * never passes on nothing. */
static void check_no_kernel_results(const char *path) {
  cJSON *doc = parse_json(slurp(path));
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(doc, "results"), *x;
  ck_assert_int_eq(cJSON_GetArraySize(rs), 3);
  cJSON_ArrayForEach(x, rs) {
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(x, "found")));
    ck_assert_msg(strstr(jstr(x, "error"), "no verified kernel in ") &&
                      strstr(jstr(x, "error"), " trials; the first failure (trial 1) was a build_error"),
                  "%s", jstr(x, "error"));
    const cJSON *ff = cJSON_GetObjectItemCaseSensitive(x, "first_failure");
    ck_assert_int_eq((int)jnum(ff, "trial"), 1);
    ck_assert_str_eq(jstr(ff, "status"), "build_error");
    ck_assert_msg(strstr(jstr(ff, "error"), "/bin/false failed (status 1) compiling "), "%s", jstr(ff, "error"));
    ck_assert(jnum(cJSON_GetObjectItemCaseSensitive(x, "failures"), "build_error") >= 1);
  }
  cJSON_Delete(doc);
}

static void check_no_kernel_stderr(const run_t *r) {
  ck_assert_msg(r->status == 1, "exit %d\n%s", r->status, r->err);
  static const char *const names[] = {"vector_add", "matmul", "softmax"};
  for (int i = 0; i < 3; i++) {
    char want[96];
    snprintf(want, sizeof want, "tunectl bench: %s: no verified kernel in ", names[i]);
    ck_assert_msg(strstr(r->err, want), "%s", r->err);
  }
  ck_assert_msg(strstr(r->err, "the first failure (trial 1) was a build_error:\n  /bin/false failed (status 1) "
                               "compiling ") &&
                    strstr(r->err, "tunectl bench: 3 of 3 workloads ended with no verified kernel: vector_add matmul "
                                   "softmax"),
                "%s", r->err);
}

START_TEST(t_no_kernel) {
  char dir[] = "/tmp/tuned-client-nokernel-XXXXXX", sock[128], out[160];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *tc = env("TUNECTL");
  snprintf(out, sizeof out, "%s/out.json", dir);
  /* in process; with a baseline that had no kernel either, the comparison passes and bench still fails */
  run_t *r = sh("cd '%s' && TUNED_CC=/bin/false '%s' bench %s --trials 3 --json out.json", dir, tc,
                SRC("bench/suites/ci-small.json"));
  check_no_kernel_stderr(r);
  check_no_kernel_results(out);
  r = sh("cd '%s' && cp out.json base.json && TUNED_CC=/bin/false '%s' bench %s --trials 3 --json out.json "
         "--baseline base.json", dir, tc, SRC("bench/suites/ci-small.json"));
  ck_assert_msg(strstr(r->out, "no regression beyond 5.0%"), "%s", r->out);
  check_no_kernel_stderr(r);

  /* through a daemon whose every build fails */
  setenv("TUNED_CC", "/bin/false", 1);
  pid_t pid = start_daemon(dir, "nk", sock, sizeof sock);
  unsetenv("TUNED_CC");
  r = sh("'%s' --socket '%s' submit " MM32 " --trials 3 --wait", tc, sock);
  long job = 0;
  ck_assert_msg(r->status == 1 && sscanf(r->out, "job %ld:", &job) == 1, "exit %d\n%s\n%s", r->status, r->out, r->err);
  char want[160];
  snprintf(want, sizeof want, "tunectl submit: job %ld (matmul ", job);
  ck_assert_msg(strstr(r->out, "done, 3/3 trials") && strstr(r->err, want) &&
                    strstr(r->err, "): no verified kernel in 3 trials; the first failure (trial 1) was a build_error:\n"
                                   "  /bin/false failed (status 1) compiling "),
                "%s\n%s", r->out, r->err);
  r = sh("'%s' --socket '%s' watch %ld", tc, sock, job);
  ck_assert_msg(r->status == 1 && strstr(r->err, "tunectl watch: job "), "%d %s", r->status, r->err);
  r = sh("'%s' --socket '%s' status %ld", tc, sock, job);
  ck_assert_msg(r->status == 0 && strstr(r->out, "\nfailed    first: trial 1, build_error: /bin/false failed "),
                "%s", r->out);
  cJSON *j = parse_json(sh("'%s' --socket '%s' status %ld --json", tc, sock, job)->out);
  ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "best")));
  const cJSON *ff = cJSON_GetObjectItemCaseSensitive(j, "first_failure");
  ck_assert_int_eq((int)jnum(ff, "trial"), 1);
  ck_assert_str_eq(jstr(ff, "status"), "build_error");
  ck_assert_msg(strstr(jstr(ff, "error"), "/bin/false failed (status 1) compiling "), "%s", jstr(ff, "error"));
  cJSON_Delete(j);
  /* libtuned hands it on */
  tuned_client_t *c = NULL;
  tuned_job_t st;
  tuned_error_t err = {0};
  ck_assert_msg(tuned_connect(sock, &c, &err) == 0 && tuned_job_status(c, job, &st, &err) == 0, "%s", err.message);
  ck_assert(st.state == TUNED_JOB_DONE && st.best_record == 0 && st.first_failure_trial == 1);
  ck_assert_str_eq(st.first_failure_status, "build_error");
  ck_assert_ptr_nonnull(strstr(st.first_failure, "/bin/false failed (status 1) compiling "));
  tuned_close(c);
  r = sh("cd '%s' && '%s' --socket '%s' bench %s --trials 3 --json out.json --daemon", dir, tc, sock,
         SRC("bench/suites/ci-small.json"));
  check_no_kernel_stderr(r);
  check_no_kernel_results(out);
  stop_daemon(pid);
  sh("rm -rf '%s'", dir);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("client");
  TU_TCASE(s, "offline", 60, t_no_daemon, t_default_socket, t_parse_kernel_job, t_fake_server, t_timeout, t_foreign_daemon, t_socket_not_ours,
           t_pkgconfig, t_bench_compare);
  TCase *tc = TU_TCASE(s, "daemon", 300, t_ping_targets, t_submit_wait_jobs_status, t_json_streams,
                       t_tables_full_names, t_best_records, t_kernel, t_kernel_packed, t_export_import, t_libtuned, t_example_host,
                       t_errors, t_cancel, t_by_name);
  tcase_add_unchecked_fixture(tc, daemon_setup, daemon_teardown);
  TU_TCASE(s, "bench", 600, t_bench_run, t_no_kernel);
  return s;
}

TN_TEST_MAIN(make_suite)
