/* test_daemon.c — suite "daemon": a real tuned process ($TUNED, started with
 * posix_spawn on a temporary socket and database) driven with raw JSON-RPC
 * lines: info and targets, submit/watch/best/kernel, cancel, restart and
 * resume, SIGKILL while tuning, 32 concurrent clients, jobs at once taking
 * turns on the CPU, every kind of bad input, refused targets, socket and
 * database locking, XDG defaults; deadlines, cancel latency and SIGTERM
 * during a long reference evaluation, a huge generation or a locked
 * database, a full disk (RLIMIT_FSIZE), clients vanishing mid-message. */
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <sqlite3.h>

#include "db/db.h"
#include "measure/measure.h"
#include "pgtest.h"
#include "testutil.h"

extern char **environ;

/* A whole workload hash that no workload of the tests has. */
#define OTHER_HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* ---- daemons ------------------------------------------------------------------ */

typedef struct daemon {
  pid_t pid;
  char dir[64];
  char sock[128], db[128], log[128];
} daemon_t;

static pid_t spawned[16];
static int nspawned;

static void kill_spawned(void) {
  for (int i = 0; i < nspawned; i++)
    if (spawned[i] > 0) kill(spawned[i], SIGKILL), waitpid(spawned[i], NULL, 0);
  nspawned = 0;
}

static void track(pid_t pid) {
  static bool registered;
  if (!registered) atexit(kill_spawned), registered = true;
  if (nspawned < 16) spawned[nspawned++] = pid;
}

static void untrack(pid_t pid) {
  for (int i = 0; i < nspawned; i++)
    if (spawned[i] == pid) spawned[i] = -1;
}

static void tmp_daemon(daemon_t *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->dir, sizeof d->dir, "/tmp/tuned-dtest-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(d->dir));
  snprintf(d->sock, sizeof d->sock, "%s/tuned.sock", d->dir);
  snprintf(d->db, sizeof d->db, "%s/tuned.db", d->dir);
  snprintf(d->log, sizeof d->log, "%s/tuned.log", d->dir);
}

static const char *tuned_path(void) {
  const char *p = getenv("TUNED");
  ck_assert_msg(p && *p, "set TUNED to the tuned executable (meson test does)");
  return p;
}

/* Spawns tuned with argv (NULL-terminated, without argv[0]) and extra
 * environment entries; stdout and stderr go to d->log. */
static pid_t spawn_tuned(daemon_t *d, const char *const *args, const char *const *env) {
  const char *argv[32] = {"tuned"};
  int n = 1;
  for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
  argv[n] = NULL;
  const char *envp[256];
  int ne = 0;
  for (int i = 0; env && env[i]; i++) envp[ne++] = env[i];
  /* the caller's entries replace the inherited ones of the same name: with
   * both, which one counts is up to the program (a shell keeps the last) */
  for (char **e = environ; *e && ne < 255; e++) {
    bool replaced = false;
    for (int i = 0; env && env[i] && !replaced; i++) {
      const char *eq = strchr(env[i], '=');
      size_t n = eq ? (size_t)(eq - env[i]) + 1 : strlen(env[i]);
      replaced = strncmp(*e, env[i], n) == 0;
    }
    if (!replaced) envp[ne++] = *e;
  }
  envp[ne] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, tuned_path(), &fa, NULL, (char *const *)argv, (char *const *)envp);
  posix_spawn_file_actions_destroy(&fa);
  ck_assert_msg(rc == 0, "posix_spawn %s: %s", tuned_path(), strerror(rc));
  track(pid);
  return pid;
}

static char *read_log(const daemon_t *d) {
  FILE *f = fopen(d->log, "r");
  if (!f) return strdup("");
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return strdup(buf);
}

static int try_connect(const char *sock) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Waits for a child to exit; its exit status, or -1 on timeout. */
static int wait_exit(pid_t pid, double timeout_s) {
  timeout_s *= tu_slowdown();
  for (double t = 0; t < timeout_s; t += 0.02) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      untrack(pid);
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    usleep(20000);
  }
  return -1;
}

/* Starts tuned with extra arguments and environment entries; true once it
 * listens, false (with its wait status in *st) when it exited first. */
static bool launch_daemon(daemon_t *d, const char *const *extra, const char *const *env, int *st) {
  const char *args[24] = {"--target", "cpu", "--db", d->db, "--socket", d->sock, "--log-level", "debug"};
  int n = 8;
  bool stop_timeout = false;
  for (int i = 0; extra && extra[i]; i++) stop_timeout |= strcmp(extra[i], "--stop-timeout") == 0, args[n++] = extra[i];
  char slow_stop[32]; /* a slowed-down tuned (valgrind) finishes its batch at a stop that much later */
  snprintf(slow_stop, sizeof slow_stop, "%.0f", 300 * tu_slowdown());
  if (tu_slowdown() > 1 && !stop_timeout) args[n++] = "--stop-timeout", args[n++] = slow_stop;
  args[n] = NULL;
  d->pid = spawn_tuned(d, args, env);
  for (int i = 0; i < 6000 * tu_slowdown(); i++) { /* 60 s (a loaded machine), times the slowdown (valgrind) */
    int fd = try_connect(d->sock);
    if (fd >= 0) {
      close(fd);
      return true;
    }
    if (waitpid(d->pid, st, WNOHANG) == d->pid) {
      untrack(d->pid);
      d->pid = 0;
      return false;
    }
    usleep(10000);
  }
  ck_abort_msg("tuned did not listen on %s within %.0f s: %s", d->sock, 60 * tu_slowdown(), read_log(d));
  return false;
}

/* Starts tuned on d's socket and database (target cpu unless extra says). */
static void start_daemon(daemon_t *d, const char *const *extra) {
  int st;
  if (!launch_daemon(d, extra, NULL, &st)) ck_abort_msg("tuned exited at start (status %d): %s", st, read_log(d));
}

static void stop_daemon(daemon_t *d) {
  if (d->pid <= 0) return;
  kill(d->pid, SIGTERM);
  int st = wait_exit(d->pid, 300);
  ck_assert_msg(st == 0, "tuned exit status %d after SIGTERM: %s", st, read_log(d));
  d->pid = 0;
}

static void rm_tree(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* ---- a raw JSON-lines client ------------------------------------------------------ */

typedef struct client {
  int fd;
  char *buf;
  size_t len, cap;
  int next_id;
} client_t;

static void cl_open(client_t *c, const char *sock) {
  memset(c, 0, sizeof *c);
  c->fd = try_connect(sock);
  ck_assert_msg(c->fd >= 0, "connect %s: %s", sock, strerror(errno));
  c->next_id = 1;
}

static void cl_close(client_t *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->buf);
  c->fd = -1;
  c->buf = NULL;
}

static void cl_write(client_t *c, const char *data, size_t n) {
  while (n > 0) {
    ssize_t w = write(c->fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    ck_assert_msg(w > 0, "write: %s", strerror(errno));
    data += w, n -= (size_t)w;
  }
}

static void cl_send_line(client_t *c, const char *line) {
  cl_write(c, line, strlen(line));
  cl_write(c, "\n", 1);
}

/* Next line as parsed JSON; NULL at EOF; fails after timeout_s. */
static cJSON *cl_recv(client_t *c, double timeout_s) {
  timeout_s *= tu_slowdown();
  for (;;) {
    char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
    if (nl) {
      *nl = 0;
      cJSON *j = cJSON_Parse(c->buf);
      ck_assert_msg(j, "unparsable line from tuned: %.200s", c->buf);
      size_t used = (size_t)(nl - c->buf) + 1;
      memmove(c->buf, c->buf + used, c->len - used);
      c->len -= used;
      return j;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int r = poll(&p, 1, (int)(timeout_s * 1000));
    ck_assert_msg(r > 0, "no answer from tuned within %.0f s", timeout_s);
    if (c->cap - c->len < 65536) c->buf = realloc(c->buf, c->cap = c->cap * 2 + 65536);
    ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (n <= 0) return NULL;
    c->len += (size_t)n;
  }
}

/* Sends a request (params: JSON text or NULL) and returns its response,
 * skipping notifications (handed to keep, when given, else dropped). */
static cJSON *rpc(client_t *c, const char *method, const char *params) {
  char head[256];
  int id = c->next_id++;
  snprintf(head, sizeof head, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\"%s", id, method,
           params ? ",\"params\":" : "}");
  cl_write(c, head, strlen(head));
  if (params) cl_write(c, params, strlen(params)), cl_write(c, "}", 1);
  cl_write(c, "\n", 1);
  for (;;) {
    cJSON *j = cl_recv(c, 120);
    ck_assert_msg(j, "connection closed while waiting for %s", method);
    const cJSON *jid = cJSON_GetObjectItem(j, "id");
    if (jid && cJSON_IsNumber(jid)) {
      ck_assert_int_eq(jid->valueint, id);
      return j;
    }
    cJSON_Delete(j);
  }
}

static const cJSON *result(const cJSON *resp) {
  const cJSON *r = cJSON_GetObjectItem(resp, "result");
  if (!r) {
    char *s = cJSON_PrintUnformatted(resp);
    ck_abort_msg("expected a result, got %s", s);
  }
  return r;
}

static int error_code(const cJSON *resp) {
  const cJSON *e = cJSON_GetObjectItem(resp, "error");
  return e ? cJSON_GetObjectItem(e, "code")->valueint : 0;
}

static const char *error_message(const cJSON *resp) {
  const cJSON *e = cJSON_GetObjectItem(resp, "error");
  return e ? cJSON_GetObjectItem(e, "message")->valuestring : "";
}

static double num(const cJSON *o, const char *key) {
  const cJSON *j = cJSON_GetObjectItem(o, key);
  ck_assert_msg(cJSON_IsNumber(j), "field %s is not a number", key);
  return j->valuedouble;
}

static const char *str(const cJSON *o, const char *key) {
  const cJSON *j = cJSON_GetObjectItem(o, key);
  ck_assert_msg(cJSON_IsString(j), "field %s is not a string", key);
  return j->valuestring;
}

/* Expects an error response with code and a message containing `needle`. */
static void expect_error(client_t *c, const char *method, const char *params, int code, const char *needle) {
  cJSON *r = rpc(c, method, params);
  ck_assert_msg(error_code(r) == code, "%s %s: expected error %d, got %s", method, params ? params : "", code,
                cJSON_PrintUnformatted(r));
  ck_assert_msg(strstr(error_message(r), needle), "%s: message \"%s\" lacks \"%s\"", method, error_message(r),
                needle);
  cJSON_Delete(r);
}

/* ---- workloads and jobs --------------------------------------------------------------- */

/* tune.submit params for workloads/matmul.tw at size^3 on target (NULL:
 * the daemon's), as JSON text (static). */
static const char *matmul_submit_on(int size, const char *target, int trials, int batch) {
  static char buf[8192];
  char *text;
  size_t len;
  tn_err_t err = {0};
  ck_assert_int_eq(tn_read_file(SRC("workloads/matmul.tw"), 1 << 20, &text, &len, &err), 0);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload", text);
  cJSON_AddStringToObject(p, "name", "matmul");
  cJSON *ov = cJSON_AddObjectToObject(p, "params");
  cJSON_AddNumberToObject(ov, "M", size);
  cJSON_AddNumberToObject(ov, "N", size);
  cJSON_AddNumberToObject(ov, "K", size);
  if (target) cJSON_AddStringToObject(p, "target", target);
  cJSON_AddNumberToObject(p, "trials", trials);
  cJSON_AddNumberToObject(p, "batch_size", batch);
  cJSON_AddNumberToObject(p, "population", 64); /* the smallest tune.submit accepts */
  char *s = cJSON_PrintUnformatted(p);
  snprintf(buf, sizeof buf, "%s", s);
  free(s);
  free(text);
  cJSON_Delete(p);
  return buf;
}

/* The same at 32^3 on the daemon's target. */
static const char *matmul_submit(int trials, int batch) { return matmul_submit_on(32, NULL, trials, batch); }

typedef struct submitted {
  int job;
  char hash[TN_ID_SIZE];
} submitted_t;

static submitted_t submit_on(client_t *c, int size, const char *target, int trials, int batch) {
  cJSON *r = rpc(c, "tune.submit", matmul_submit_on(size, target, trials, batch));
  submitted_t s;
  s.job = (int)num(result(r), "job");
  snprintf(s.hash, sizeof s.hash, "%s", str(result(r), "workload"));
  ck_assert_msg(tn_id_valid(s.hash), "%s", s.hash);
  cJSON_Delete(r);
  return s;
}

static submitted_t submit(client_t *c, int trials, int batch) { return submit_on(c, 32, NULL, trials, batch); }

static cJSON *watch(client_t *c, int job) {
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", job);
  return rpc(c, "tune.watch", p);
}

/* Reads notifications until one satisfies trials_done >= min_done or the job
 * is in a final state; returns it (caller frees). */
static cJSON *wait_progress(client_t *c, int job, int min_done, double timeout_s) {
  double t0 = tn_now(), limit = timeout_s * tu_slowdown();
  for (;;) {
    ck_assert_msg(tn_now() - t0 < limit, "job %d: no progress to %d trials within %.0f s", job, min_done, limit);
    cJSON *n = cl_recv(c, timeout_s);
    ck_assert_msg(n, "watch connection closed");
    const cJSON *m = cJSON_GetObjectItem(n, "method");
    if (!m || strcmp(m->valuestring, "tune.progress") != 0) {
      cJSON_Delete(n);
      continue;
    }
    const cJSON *p = cJSON_GetObjectItem(n, "params");
    ck_assert_int_eq((int)num(p, "job"), job);
    const char *state = str(p, "state");
    bool final = strcmp(state, "done") == 0 || strcmp(state, "cancelled") == 0 || strcmp(state, "failed") == 0;
    if (final || num(p, "trials_done") >= min_done) return n;
    cJSON_Delete(n);
  }
}

static cJSON *status(client_t *c, int job) {
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", job);
  return rpc(c, "tune.status", p);
}

/* Records of a workload in the database file (the daemon may be stopped). */
static size_t count_records(const char *db_path, const char *hash, bool check_unique) {
  db_t *db;
  tn_err_t err = {0};
  ck_assert_msg(db_open(db_path, &db, &err) == 0, "%s", err.msg);
  ck_assert_msg(db_check(db, &err) == 0, "integrity: %s", err.msg);
  db_query_t q = db_query_all();
  q.workload_hash = hash;
  db_records_t rs;
  ck_assert_int_eq(db_records_query(db, &q, &rs, &err), 0);
  for (size_t i = 0; check_unique && i < rs.n; i++)
    for (size_t j = i + 1; j < rs.n; j++)
      ck_assert_msg(strcmp(rs.items[i].trace_hash, rs.items[j].trace_hash) != 0,
                    "trace %s measured twice (records %lld and %lld)", rs.items[i].trace_hash,
                    (long long)rs.items[i].id, (long long)rs.items[j].id);
  size_t n = rs.n;
  db_records_free(&rs);
  db_close(db);
  return n;
}

static db_job_t job_row(const char *db_path, int id, db_job_state_t *state) {
  db_t *db;
  tn_err_t err = {0};
  ck_assert_int_eq(db_open(db_path, &db, &err), 0);
  db_job_t j;
  tn_arena_t *a = tn_arena_new();
  ck_assert_int_eq(db_job_get(db, id, &j, a, &err), 0);
  *state = j.state;
  tn_arena_free(a);
  db_close(db);
  return j;
}

/* ---- tests ----------------------------------------------------------------------------- */

START_TEST(info_and_targets) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  cJSON *r = rpc(&c, "server.info", NULL);
  const cJSON *info = result(r);
  ck_assert_str_eq(str(info, "target"), "cpu");
  ck_assert_str_eq(str(info, "socket"), d.sock);
  ck_assert_str_eq(str(info, "db"), d.db);
  ck_assert_int_eq((int)num(info, "pid"), d.pid);
  ck_assert_int_eq((int)num(info, "jobs_running"), 0);
  ck_assert_int_eq((int)num(info, "max_message_bytes"), 1 << 20);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(info, "backends")), 3);
  cJSON_Delete(r);

  r = rpc(&c, "target.list", NULL);
  const cJSON *t;
  bool saw_cpu = false, saw_p100 = false;
  cJSON_ArrayForEach(t, cJSON_GetObjectItem(result(r), "targets")) {
    const char *name = str(t, "name");
    if (strcmp(name, "cpu") == 0) {
      saw_cpu = true;
      ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(t, "usable")));
      ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(t, "default")));
    }
    if (strcmp(name, "nvidia/tesla-p100") == 0) {
      saw_p100 = true;
      ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(t, "usable")));
      ck_assert_str_eq(str(t, "arch"), "sm_60");
#if TUNED_HAVE_CUDA
      ck_assert_msg(strstr(str(t, "reason"), "sm_60 is not supported by NVRTC"), "%s", str(t, "reason"));
#endif
    }
  }
  ck_assert(saw_cpu && saw_p100);
  cJSON_Delete(r);

  /* socket 0600 */
  struct stat st;
  ck_assert_int_eq(stat(d.sock, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_int_ne(access(d.sock, F_OK), 0); /* removed at exit */
  char *log = read_log(&d);
  ck_assert_msg(strstr(log, "level=info msg=\"listening\"") && strstr(log, "msg=\"stopped\""), "%s", log);
  free(log);
  rm_tree(d.dir);
}
END_TEST

/* Compiles the C kernel kernel.get returned. */
static void compile_c(const char *dir, const char *source) {
  char path[160], cmd[512];
  snprintf(path, sizeof path, "%s/kernel.c", dir);
  FILE *f = fopen(path, "w");
  fputs(source, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "${CC:-cc} -std=gnu11 -O1 -fopenmp -c -o %s/kernel.o %s 2>&1", dir, path);
  ck_assert_msg(system(cmd) == 0, "the kernel does not compile: %s", cmd);
}

/* A db.import of one line; the response (caller frees). */
static cJSON *import_line(client_t *c, const cJSON *line) {
  char *text = cJSON_PrintUnformatted(line);
  cJSON *ip = cJSON_CreateObject();
  cJSON_AddStringToObject(ip, "jsonl", text);
  char *ips = cJSON_PrintUnformatted(ip);
  cJSON *r = rpc(c, "db.import", ips);
  free(ips), free(text);
  cJSON_Delete(ip);
  return r;
}

#if TUNED_HAVE_CUDA
/* A record tuned on another machine for a GPU (imported: this machine has no
 * GPU to measure it) still yields its kernel: CUDA source, PTX and CUBIN. */
static void kernel_for_imported_gpu_record(client_t *c, const char *cpu_line, const char *hash) {
  static const char trace[] =
      "{\"version\": 1, \"trace\": [[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], "
      "[\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\", \"l3\"]], [\"Bind\", [\"l1\"], [\"blockIdx.x\"], []], "
      "[\"Bind\", [\"l2\"], [\"threadIdx.x\"], []]], []]}";
  cJSON *line = cJSON_Parse(cpu_line);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "name", "nvidia/tesla-t4");
  cJSON_AddStringToObject(t, "kind", "cuda");
  cJSON_AddStringToObject(t, "arch", "sm_75");
  cJSON_AddItemToObject(t, "json", cJSON_CreateObject());
  cJSON_ReplaceItemInObject(line, "target", t);
  cJSON_ReplaceItemInObject(line, "trace", cJSON_CreateString(trace));
  char th[TN_ID_SIZE];
  db_trace_hash(trace, th);
  cJSON_ReplaceItemInObject(line, "trace_hash", cJSON_CreateString(th));
  cJSON *r = import_line(c, line);
  ck_assert_int_eq((int)num(result(r), "inserted"), 1);
  cJSON_Delete(r);
  char p[128];
  snprintf(p, sizeof p, "{\"workload\":\"%s\",\"target\":\"nvidia/tesla-t4\"}", hash);
  r = rpc(c, "kernel.get", p);
  const cJSON *k = result(r);
  ck_assert_str_eq(str(k, "language"), "cuda");
  ck_assert_str_eq(str(k, "target"), "nvidia/tesla-t4");
  ck_assert_ptr_nonnull(strstr(str(k, "source"), "__global__"));
  ck_assert_ptr_nonnull(strstr(str(k, "ptx"), ".target sm_75"));
  size_t n64 = strlen(str(k, "cubin_base64"));
  ck_assert(n64 > 100 && n64 % 4 == 0);
  const cJSON *k0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "launch"), "kernels"), 0);
  ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(k0, "grid"), 0)->valueint, 32);
  ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(k0, "block"), 0)->valueint, 32);
  cJSON_Delete(r);
  /* querying is fine for any known target; tuning for it here is refused */
  expect_error(c, "tune.submit", "{\"workload\":\"x\",\"target\":\"nvidia/tesla-t4\"}", -32003, "refused");
  cJSON_Delete(line);
}
#endif

/* kernel.get's nearest-shape fallback: a matmul at 48 x 40 x 32 was never
 * tuned; with "fallback": "nearest" it gets the 32^3 record (hash32, id
 * best_id), replayed, built, verified and timed at 48 x 40 x 32 in a worker. */
static void check_fallback(client_t *c, const char *hash32, int best_id, double best_secs, const char *dir) {
  cJSON *kp = cJSON_Parse(matmul_submit_on(48, NULL, 1, 1));
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(kp, "params"), "N", cJSON_CreateNumber(40));
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(kp, "params"), "K", cJSON_CreateNumber(32));
  cJSON *q = cJSON_CreateObject();
  cJSON_AddItemToObject(q, "workload_text", cJSON_DetachItemFromObject(kp, "workload"));
  cJSON_AddItemToObject(q, "params", cJSON_DetachItemFromObject(kp, "params"));
  cJSON_AddStringToObject(q, "name", "matmul");
  char *plain = cJSON_PrintUnformatted(q);
  expect_error(c, "kernel.get", plain, -32004, "never tuned");
  cJSON_AddStringToObject(q, "fallback", "closest");
  char *bad = cJSON_PrintUnformatted(q);
  expect_error(c, "kernel.get", bad, -32602, "\"none\" or \"nearest\"");
  cJSON_ReplaceItemInObject(q, "fallback", cJSON_CreateString("nearest"));
  char *qs = cJSON_PrintUnformatted(q);
  cJSON *r = rpc(c, "kernel.get", qs);
  const cJSON *k = result(r), *fb = cJSON_GetObjectItem(k, "fallback");
  ck_assert_msg(cJSON_IsObject(fb), "no fallback in %s", cJSON_PrintUnformatted(r));
  ck_assert_int_eq((int)num(k, "record"), best_id);
  ck_assert_str_ne(str(k, "workload"), hash32); /* the requested shape's hash */
  ck_assert_str_eq(str(fb, "workload"), hash32);
  ck_assert_int_eq((int)num(fb, "record"), best_id);
  ck_assert_double_eq(num(fb, "median_secs"), best_secs);
  ck_assert_int_eq((int)num(cJSON_GetObjectItem(fb, "params"), "M"), 32);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(fb, "verified")));
  ck_assert_double_gt(num(k, "median_secs"), 0); /* timed at 48 x 40 x 32 */
  ck_assert_double_eq(num(k, "flops"), 2.0 * 48 * 40 * 32);
  /* lowered at the requested shape: C is 48 x 40 */
  const cJSON *cp = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "launch"), "params"), 2);
  const cJSON *shape = cJSON_GetObjectItem(cp, "shape");
  ck_assert_int_eq(cJSON_GetArraySize(shape), 2);
  ck_assert_int_eq(cJSON_GetArrayItem(shape, 0)->valueint, 48);
  ck_assert_int_eq(cJSON_GetArrayItem(shape, 1)->valueint, 40);
  compile_c(dir, str(k, "source"));
  cJSON_Delete(r);
  /* another text (a different computation) has no family to fall back on */
  cJSON_ReplaceItemInObject(q, "workload_text", cJSON_CreateString("param N = 8\ninput A: float32[N]\n"
                                                                     "output B: float32[N]\nB[i] = A[i] * 3.0\n"));
  cJSON_DeleteItemFromObject(q, "params");
  char *other = cJSON_PrintUnformatted(q);
  expect_error(c, "kernel.get", other, -32004, "no verified record of the same workload text");
  free(other);
  free(qs);
  free(bad);
  free(plain);
  cJSON_Delete(q);
  cJSON_Delete(kp);
}

/* ---- identities that cannot be forged (tests/fnv-collision) ------------------- */

/* The text of a workload of the collision fixture ("dense_const" or "dense_plain"). */
static char *fixture_text(const char *name) {
  char path[PATH_MAX], *text;
  size_t len;
  tn_err_t err = {0};
  snprintf(path, sizeof path, "%s/tests/fnv-collision/%s.tw", TUNED_SOURCE_ROOT, name);
  ck_assert_msg(tn_read_file(path, 1 << 20, &text, &len, &err) == 0, "%s", err.msg);
  return text;
}

/* Params naming a fixture workload by its text: {"<key>": text, "name": name}
 * plus `more` (a JSON object's members, or ""); JSON text (free it). */
static char *fixture_params(const char *name, const char *key, const char *more) {
  char *text = fixture_text(name);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, key, text);
  cJSON_AddStringToObject(p, "name", name);
  char *s = cJSON_PrintUnformatted(p), *out = tn_xmalloc(strlen(s) + strlen(more) + 4);
  s[strlen(s) - 1] = 0; /* the closing brace */
  sprintf(out, "%s%s%s}", s, *more ? "," : "", more);
  free(s), free(text);
  cJSON_Delete(p);
  return out;
}

/* Tunes a fixture workload to the end; its hash (as tune.submit says) in hash. */
static void tune_fixture(client_t *c, client_t *w, const char *name, char hash[TN_ID_SIZE]) {
  char *p = fixture_params(name, "workload", "\"trials\":4,\"batch_size\":4,\"population\":64,\"remeasure\":0");
  cJSON *r = rpc(c, "tune.submit", p);
  int job = (int)num(result(r), "job");
  snprintf(hash, TN_ID_SIZE, "%s", str(result(r), "workload"));
  cJSON_Delete(r);
  free(p);
  cJSON_Delete(watch(w, job));
  cJSON *n = wait_progress(w, job, 1 << 30, 600);
  ck_assert_str_eq(str(cJSON_GetObjectItem(n, "params"), "state"), "done");
  cJSON_Delete(n);
}

/* The record kernel.get serves for a fixture workload (by text), checking
 * that the answer names the workload by its own hash. */
static int served_record(client_t *c, const char *name, const char *hash) {
  char *p = fixture_params(name, "workload_text", "");
  cJSON *r = rpc(c, "kernel.get", p);
  ck_assert_str_eq(str(result(r), "workload"), hash);
  int id = (int)num(result(r), "record");
  cJSON_Delete(r);
  free(p);
  return id;
}

/* dense_const and dense_plain (tests/fnv-collision) had one 64-bit FNV-1a
 * hash, so under it a record of one was filed under, and its kernel served
 * for, the other.  Through a real daemon: their identities differ; tuning
 * dense_const serves nothing for dense_plain (by text, by hash, by prefix);
 * an imported line that files dense_plain's source under dense_const's
 * hash, or dense_const's under dense_plain's, is refused; once both are
 * tuned, each is served its own record. */
START_TEST(fnv_collision) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c, w;
  cl_open(&c, d.sock);
  cl_open(&w, d.sock);
  char hc[TN_ID_SIZE], hp[TN_ID_SIZE], p[256];
  const char *names[2] = {"dense_const", "dense_plain"};
  char *hashes[2] = {hc, hp};
  for (int i = 0; i < 2; i++) {
    char *cp = fixture_params(names[i], "workload_text", "");
    cJSON *r = rpc(&c, "workload.check", cp);
    snprintf(hashes[i], TN_ID_SIZE, "%s", str(result(r), "workload"));
    ck_assert_msg(tn_id_valid(hashes[i]), "%s", hashes[i]);
    cJSON_Delete(r);
    free(cp);
  }
  ck_assert_str_ne(hc, hp);
  /* the old hash is not taken for a workload's */
  expect_error(&c, "db.best", "{\"workload\":\"6e44248031b14ae9\"}", -32602,
               "must be a workload hash: 64 lower-case hex digits, or its first 32 or more");

  char got[TN_ID_SIZE];
  tune_fixture(&c, &w, "dense_const", got);
  ck_assert_str_eq(got, hc);
  int rc_const = served_record(&c, "dense_const", hc);
  /* nothing of dense_const's is served for dense_plain */
  char *pp = fixture_params("dense_plain", "workload_text", "");
  expect_error(&c, "kernel.get", pp, -32004, "never tuned");
  snprintf(p, sizeof p, "{\"workload\":\"%s\"}", hp);
  expect_error(&c, "kernel.get", p, -32001, "no workload");
  expect_error(&c, "db.best", p, -32001, "no workload");
  snprintf(p, sizeof p, "{\"workload\":\"%.32s\"}", hp);
  expect_error(&c, "kernel.get", p, -32001, "no workload");
  snprintf(p, sizeof p, "{\"workload\":\"%.32s\"}", hc); /* the prefix a table shows finds dense_const */
  cJSON *r = rpc(&c, "kernel.get", p);
  ck_assert_int_eq((int)num(result(r), "record"), rc_const);
  ck_assert_str_eq(str(result(r), "workload"), hc);
  cJSON_Delete(r);

  /* import: a line of dense_const's record, made to carry the other's source or hash */
  snprintf(p, sizeof p, "{\"workload\":\"%s\"}", hc);
  r = rpc(&c, "db.export", p);
  const char *jsonl = str(result(r), "jsonl");
  cJSON *line = cJSON_ParseWithLength(jsonl, strcspn(jsonl, "\n"));
  ck_assert_ptr_nonnull(line);
  cJSON_Delete(r);
  cJSON *wl = cJSON_GetObjectItem(line, "workload");
  ck_assert_str_eq(str(wl, "hash"), hc);
  char *plain_text = fixture_text("dense_plain"), *const_text = tn_xstrdup(str(wl, "source"));
  cJSON_ReplaceItemInObject(wl, "source", cJSON_CreateString(plain_text));
  cJSON_ReplaceItemInObject(wl, "name", cJSON_CreateString("dense_plain"));
  r = import_line(&c, line); /* what the FNV-1a check let through */
  ck_assert_int_eq(error_code(r), -32602);
  char want[300];
  snprintf(want, sizeof want, "line 1: workload hash %s does not match its source and parameters (which hash to %s)",
           hc, hp);
  ck_assert_msg(strstr(error_message(r), want), "%s", error_message(r));
  cJSON_Delete(r);
  cJSON_ReplaceItemInObject(wl, "source", cJSON_CreateString(const_text));
  cJSON_ReplaceItemInObject(wl, "name", cJSON_CreateString("dense_const"));
  cJSON_ReplaceItemInObject(wl, "hash", cJSON_CreateString(hp));
  r = import_line(&c, line);
  ck_assert_int_eq(error_code(r), -32602);
  ck_assert_msg(strstr(error_message(r), "does not match its source"), "%s", error_message(r));
  cJSON_Delete(r);
  expect_error(&c, "kernel.get", pp, -32004, "never tuned");
  r = rpc(&c, "db.workloads", NULL);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result(r), "workloads")), 1);
  cJSON_Delete(r);

  /* both tuned: each is served its own record */
  tune_fixture(&c, &w, "dense_plain", got);
  ck_assert_str_eq(got, hp);
  int rc_plain = served_record(&c, "dense_plain", hp);
  ck_assert_int_ne(rc_plain, rc_const);
  ck_assert_int_eq(served_record(&c, "dense_const", hc), rc_const);
  snprintf(p, sizeof p, "{\"workload\":\"%s\"}", hp);
  r = rpc(&c, "db.records", p);
  const cJSON *rec;
  cJSON_ArrayForEach(rec, cJSON_GetObjectItem(result(r), "records")) {
    ck_assert_str_eq(str(rec, "workload"), hp);
    ck_assert_int_ne((int)num(rec, "id"), rc_const);
  }
  cJSON_Delete(r);
  free(pp), free(plain_text), free(const_text);
  cJSON_Delete(line);
  cl_close(&w);
  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(submit_watch_best_kernel) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c, w;
  cl_open(&c, d.sock);
  cl_open(&w, d.sock);
  submitted_t s = submit(&c, 8, 4);
  cJSON *r = watch(&w, s.job);
  ck_assert_int_eq((int)num(result(r), "trials"), 8);
  cJSON_Delete(r);
  /* notifications: trials_done grows by batches, then a final one */
  int last = -1, notes = 0;
  for (;;) {
    cJSON *n = wait_progress(&w, s.job, last + 1, 240);
    const cJSON *p = cJSON_GetObjectItem(n, "params");
    int done = (int)num(p, "trials_done");
    ck_assert_int_ge(done, last);
    /* after a measured batch: the best so far travels with the progress */
    if (done > 0) ck_assert_msg(cJSON_IsObject(cJSON_GetObjectItem(p, "best")), "no best at %d trials", done);
    last = done, notes++;
    bool final = strcmp(str(p, "state"), "running") != 0;
    if (final) ck_assert_str_eq(str(p, "state"), "done");
    cJSON_Delete(n);
    if (final) break;
  }
  ck_assert_int_eq(last, 8);
  ck_assert_int_ge(notes, 2);

  r = status(&c, s.job);
  const cJSON *job = result(r);
  ck_assert_str_eq(str(job, "state"), "done");
  ck_assert_int_eq((int)num(job, "trials_done"), 8);
  ck_assert_str_eq(str(job, "name"), "matmul");
  ck_assert_str_eq(str(job, "target"), "cpu");
  ck_assert(cJSON_IsObject(cJSON_GetObjectItem(job, "best")));
  ck_assert(cJSON_IsObject(cJSON_GetObjectItem(job, "failures")));
  ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(job, "failures"), "too_slow")));
  /* the job re-measured its best (default 8) and timed the unscheduled program */
  const cJSON *opts = cJSON_GetObjectItem(job, "options");
  ck_assert_int_eq((int)num(opts, "remeasure"), 8);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(opts, "baseline")));
  const cJSON *base = cJSON_GetObjectItem(job, "baseline");
  ck_assert_msg(cJSON_IsObject(base), "no baseline in the job");
  ck_assert_str_eq(str(base, "status"), "ok");
  ck_assert(num(base, "median_secs") > 0 && num(base, "gflops") > 0 && num(base, "speedup") > 0);
  cJSON_Delete(r);

  char p[128];
  snprintf(p, sizeof p, "{\"workload\":\"%s\",\"k\":3}", s.hash);
  r = rpc(&c, "db.best", p);
  const cJSON *recs = cJSON_GetObjectItem(result(r), "records");
  ck_assert_int_ge(cJSON_GetArraySize(recs), 1);
  double prev = 0;
  const cJSON *rec;
  cJSON_ArrayForEach(rec, recs) {
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(rec, "verified")));
    ck_assert_str_eq(str(rec, "status"), "ok");
    ck_assert_str_eq(str(rec, "workload"), s.hash);
    ck_assert_double_ge(num(rec, "median_secs"), prev); /* fastest first */
    prev = num(rec, "median_secs");
    ck_assert_double_gt(num(rec, "gflops"), 0);
    ck_assert(cJSON_IsObject(cJSON_GetObjectItem(rec, "trace")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(rec, "cupti_median_secs"))); /* not CUDA: no CUPTI time */
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(rec, "times_disagree")));
  }
  int best_id = (int)num(cJSON_GetArrayItem(recs, 0), "id");
  double best_secs = num(cJSON_GetArrayItem(recs, 0), "median_secs");
  cJSON_Delete(r);
  /* a misspelt target: an error, not an empty list; a known one without records: empty */
  snprintf(p, sizeof p, "{\"workload\":\"%s\",\"target\":\"cpuu\"}", s.hash);
  expect_error(&c, "db.best", p, -32602, "cpuu");
  snprintf(p, sizeof p, "{\"workload\":\"%s\",\"target\":\"opencl/pocl-cpu\"}", s.hash);
  r = rpc(&c, "db.best", p);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result(r), "records")), 0);
  cJSON_Delete(r);

  snprintf(p, sizeof p, "{\"workload\":\"%s\"}", s.hash);
  r = rpc(&c, "db.records", p);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result(r), "records")), 8);
  cJSON_Delete(r);
  r = rpc(&c, "db.workloads", NULL);
  const cJSON *wl = cJSON_GetArrayItem(cJSON_GetObjectItem(result(r), "workloads"), 0);
  ck_assert_str_eq(str(wl, "hash"), s.hash);
  ck_assert_int_eq((int)num(wl, "records"), 8);
  ck_assert_double_eq(num(wl, "flops"), 2.0 * 32 * 32 * 32);
  cJSON_Delete(r);

  r = rpc(&c, "kernel.get", p);
  const cJSON *k = result(r);
  ck_assert_int_eq((int)num(k, "record"), best_id);
  ck_assert_double_eq(num(k, "median_secs"), best_secs);
  ck_assert_str_eq(str(k, "language"), "c");
  ck_assert_str_eq(str(k, "entry"), "matmul");
  ck_assert_ptr_nonnull(strstr(str(k, "source"), "int matmul("));
  ck_assert_ptr_nonnull(strstr(str(k, "source"), "tuned_entry"));
  const cJSON *launch = cJSON_GetObjectItem(k, "launch");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(launch, "params")), 3);
  ck_assert_ptr_null(cJSON_GetObjectItem(k, "ptx"));
  compile_c(d.dir, str(k, "source"));
  cJSON_Delete(r);

  /* the same kernel found from the workload's text */
  cJSON *kp = cJSON_Parse(matmul_submit(8, 4));
  cJSON *q = cJSON_CreateObject();
  cJSON_AddItemToObject(q, "workload_text", cJSON_DetachItemFromObject(kp, "workload"));
  cJSON_AddItemToObject(q, "params", cJSON_DetachItemFromObject(kp, "params"));
  char *qs = cJSON_PrintUnformatted(q);
  r = rpc(&c, "kernel.get", qs);
  ck_assert_int_eq((int)num(result(r), "record"), best_id);
  cJSON_Delete(r);
  free(qs);
  cJSON_Delete(q);
  cJSON_Delete(kp);

  check_fallback(&c, s.hash, best_id, best_secs, d.dir);

  /* export and import into the same database: all duplicates */
  r = rpc(&c, "db.export", p);
  char *jsonl = strdup(str(result(r), "jsonl"));
  char *jsonl_line = strndup(jsonl, strcspn(jsonl, "\n"));
  cJSON_Delete(r);
  cJSON *ip = cJSON_CreateObject();
  cJSON_AddStringToObject(ip, "jsonl", jsonl);
  char *ips = cJSON_PrintUnformatted(ip);
  r = rpc(&c, "db.import", ips);
  ck_assert_int_eq((int)num(result(r), "inserted"), 0);
  ck_assert_int_eq((int)num(result(r), "duplicates"), 8);
  cJSON_Delete(r);
  free(ips);
  free(jsonl);
  cJSON_Delete(ip);

  /* imported lines are checked, not trusted: a record filed under another
   * workload's hash, and a trace that does not replay on its workload (with
   * its trace_hash left out so that only the replay can catch it) */
  for (int k = 0; k < 2; k++) {
    cJSON *line = cJSON_Parse(jsonl_line);
    if (k == 0) {
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(line, "workload"), "hash", cJSON_CreateString(OTHER_HASH));
    } else {
      cJSON_DeleteItemFromObject(line, "trace_hash");
      cJSON_ReplaceItemInObject(line, "trace", cJSON_CreateString("{\"version\": 1, \"trace\": [[[\"GetBlock\", [], "
                                                                   "[\"nosuch\", \"main\"], [\"b0\"]]], []]}"));
      cJSON_ReplaceItemInObject(line, "median_secs", cJSON_CreateNumber(1e-12));
    }
    char *bad = cJSON_PrintUnformatted(line);
    cJSON *bp = cJSON_CreateObject();
    cJSON_AddStringToObject(bp, "jsonl", bad);
    char *bps = cJSON_PrintUnformatted(bp);
    expect_error(&c, "db.import", bps, -32602,
                 k == 0 ? "line 1: workload hash " OTHER_HASH " does not match its source and parameters"
                        : "line 1: the trace does not replay on workload");
    free(bps);
    cJSON_Delete(bp);
    free(bad);
    cJSON_Delete(line);
  }

#if TUNED_HAVE_CUDA
  kernel_for_imported_gpu_record(&c, jsonl_line, s.hash);
#endif
  free(jsonl_line);
  cl_close(&w);
  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(cancel_jobs) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c, w;
  cl_open(&c, d.sock);
  cl_open(&w, d.sock);
  submitted_t a = submit(&c, 400, 4);
  submitted_t b = submit(&c, 400, 4); /* --jobs 1: waits queued */
  cJSON *r = status(&c, b.job);
  ck_assert_str_eq(str(result(r), "state"), "queued");
  cJSON_Delete(r);
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", b.job);
  r = rpc(&c, "tune.cancel", p);
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 0);
  cJSON_Delete(r);

  cJSON_Delete(watch(&w, a.job));
  cJSON_Delete(wait_progress(&w, a.job, 4, 240));
  snprintf(p, sizeof p, "{\"job\":%d}", a.job);
  r = rpc(&c, "tune.cancel", p); /* answers once the job stopped, within a second */
  const cJSON *job = result(r);
  ck_assert_str_eq(str(job, "state"), "cancelled");
  int done = (int)num(job, "trials_done");
  ck_assert_int_ge(done, 4);
  ck_assert_int_lt(done, 400);
  cJSON_Delete(r);
  cJSON *n = wait_progress(&w, a.job, 1 << 30, 60); /* the watcher's last word */
  ck_assert_str_eq(str(cJSON_GetObjectItem(n, "params"), "state"), "cancelled");
  cJSON_Delete(n);

  r = rpc(&c, "tune.cancel", p); /* again: a no-op */
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  cJSON_Delete(r);
  r = rpc(&c, "tune.list", "{\"state\":\"cancelled\"}");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result(r), "jobs")), 2);
  cJSON_Delete(r);
  /* a job busy past half a second in work that polls nothing is answered
   * cancelled by the daemon itself; its thread, and slot, end at its next poll */
  int running = -1;
  for (int i = 0; i < 300 && running != 0; i++, usleep(100000)) {
    r = rpc(&c, "server.info", NULL);
    running = (int)num(result(r), "jobs_running");
    cJSON_Delete(r);
  }
  ck_assert_int_eq(running, 0);
  r = status(&c, a.job); /* the row now, written by the loop or the thread */
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(result(r), "finished")));
  int final_done = (int)num(result(r), "trials_done");
  ck_assert_int_ge(final_done, done);
  cJSON_Delete(r);
  ck_assert_uint_eq(count_records(d.db, a.hash, true), (size_t)final_done);
  cl_close(&w);
  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(restart_and_resume) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit(&c, 24, 4);
  cJSON_Delete(watch(&c, s.job));
  cJSON *n = wait_progress(&c, s.job, 4, 240);
  ck_assert_str_eq(str(cJSON_GetObjectItem(n, "params"), "state"), "running");
  cJSON_Delete(n);
  cl_close(&c);
  stop_daemon(&d); /* SIGTERM: the running batch is committed, the job requeued */
  db_job_state_t state;
  db_job_t row = job_row(d.db, s.job, &state);
  ck_assert_int_eq(state, DB_JOB_QUEUED);
  ck_assert_int_ge(row.trials_done, 4);
  ck_assert_int_lt(row.trials_done, 24);
  ck_assert_uint_eq(count_records(d.db, s.hash, true), (size_t)row.trials_done);
  char *log = read_log(&d);
  ck_assert_msg(strstr(log, "why=\"SIGTERM\"") && strstr(log, "state=queued"), "%s", log);
  free(log);

  start_daemon(&d, NULL);
  cl_open(&c, d.sock);
  cJSON *r = watch(&c, s.job);
  const char *st = str(result(r), "state");
  bool over = strcmp(st, "done") == 0;
  ck_assert_msg(over || strcmp(st, "running") == 0 || strcmp(st, "queued") == 0, "state %s", st);
  cJSON_Delete(r);
  if (!over) cJSON_Delete(wait_progress(&c, s.job, 1 << 30, 240));
  r = status(&c, s.job);
  ck_assert_str_eq(str(result(r), "state"), "done");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 24);
  double started = num(result(r), "started"), finished = num(result(r), "finished");
  cJSON_Delete(r);
  /* tune.trials: both runs' candidates, numbered on across the restart,
   * each with its own record, measured while the job ran */
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%lld}", (long long)s.job);
  r = rpc(&c, "tune.trials", p);
  const cJSON *trials = cJSON_GetObjectItem(result(r), "trials");
  ck_assert_int_eq(cJSON_GetArraySize(trials), 24);
  double seen[24];
  for (int i = 0; i < 24; i++) {
    const cJSON *t = cJSON_GetArrayItem(trials, i);
    ck_assert_int_eq((int)num(t, "trial"), i + 1);
    seen[i] = num(t, "record");
    for (int k = 0; k < i; k++)
      ck_assert_msg(seen[k] != seen[i], "trials %d and %d share record %g", k + 1, i + 1, seen[i]);
    double at = num(t, "measured");
    ck_assert_msg(at >= started - 1e-3 && at <= finished + 1e-3, "trial %d measured at %f, the job ran %f..%f", i + 1,
                  at, started, finished);
    ck_assert_double_eq_tol(num(t, "elapsed_s"), at - started, 1e-6);
    if (strcmp(str(t, "status"), "ok") == 0) ck_assert(num(t, "gflops") > 0 && num(t, "median_secs") > 0);
  }
  cJSON_Delete(r);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_eq(count_records(d.db, s.hash, true), 24); /* nothing measured twice */
  log = read_log(&d);
  ck_assert_msg(strstr(log, "resuming an unfinished job"), "%s", log);
  free(log);
  rm_tree(d.dir);
}
END_TEST

/* Submits a 16-trial job (batches of 4) to d, SIGKILLs d once a batch is
 * reported, and checks what the database kept: every batch reported, at
 * most the one being measured more, whole traces once each, the job still
 * running.  Returns the trials reported before the kill. */
static int kill_mid_job(daemon_t *d, submitted_t *s) {
  client_t c;
  cl_open(&c, d->sock);
  *s = submit(&c, 16, 4);
  cJSON_Delete(watch(&c, s->job));
  cJSON *n = wait_progress(&c, s->job, 4, 240);
  int notified = (int)num(cJSON_GetObjectItem(n, "params"), "trials_done");
  cJSON_Delete(n);
  kill(d->pid, SIGKILL);
  ck_assert_int_eq(wait_exit(d->pid, 10), 128 + SIGKILL);
  d->pid = 0;
  cl_close(&c);
  size_t nrec = count_records(d->db, s->hash, true); /* also db_check: the file is intact */
  ck_assert_uint_ge(nrec, (size_t)notified);
  ck_assert_uint_le(nrec, (size_t)notified + 4);
  db_job_state_t state;
  db_job_t row = job_row(d->db, s->job, &state);
  ck_assert_int_eq(state, DB_JOB_RUNNING);
  ck_assert_int_ge(row.trials_done, notified);
  return notified;
}

START_TEST(sigkill_while_tuning) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  submitted_t s;
  kill_mid_job(&d, &s);
  client_t c;

  /* the stale socket is removed, the job resumes and completes */
  start_daemon(&d, NULL);
  cl_open(&c, d.sock);
  cJSON *r = watch(&c, s.job);
  if (strcmp(str(result(r), "state"), "done") != 0) cJSON_Delete(wait_progress(&c, s.job, 1 << 30, 240));
  cJSON_Delete(r);
  r = status(&c, s.job);
  ck_assert_str_eq(str(result(r), "state"), "done");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 16);
  cJSON_Delete(r);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), 16);
  char *log = read_log(&d);
  ck_assert_msg(strstr(log, "removed a stale socket"), "%s", log);
  free(log);
  rm_tree(d.dir);
}
END_TEST

/* ---- 32 concurrent clients ------------------------------------------------------------------ */

typedef struct worker_arg {
  const char *sock;
  const char *hash;
  int job, index, answered;
  char failure[256];
} worker_arg_t;

/* Raw client without Check assertions (threads must not abort the suite). */
static void *query_worker(void *p) {
  worker_arg_t *a = p;
  int fd = try_connect(a->sock);
  if (fd < 0) {
    snprintf(a->failure, sizeof a->failure, "connect: %s", strerror(errno));
    return NULL;
  }
  FILE *in = fdopen(dup(fd), "r");
  char *line = NULL;
  size_t cap = 0;
  for (int i = 0; i < 20; i++) {
    int id = a->index * 1000 + i;
    char req[256];
    int n = i % 2 ? snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tune.status\",\"params\":"
                                              "{\"job\":%d}}\n", id, a->job)
                  : snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"db.best\",\"params\":"
                                              "{\"workload\":\"%s\"}}\n", id, a->hash);
    if (write(fd, req, (size_t)n) != n || getline(&line, &cap, in) <= 0) {
      snprintf(a->failure, sizeof a->failure, "request %d: no answer", id);
      break;
    }
    cJSON *r = cJSON_Parse(line);
    const cJSON *res = cJSON_GetObjectItem(r, "result");
    const cJSON *jid = cJSON_GetObjectItem(r, "id");
    bool ok = res && cJSON_IsNumber(jid) && jid->valueint == id &&
              (i % 2 ? cJSON_GetObjectItem(res, "job")->valueint == a->job
                     : cJSON_IsArray(cJSON_GetObjectItem(res, "records")));
    cJSON_Delete(r);
    if (!ok) {
      snprintf(a->failure, sizeof a->failure, "request %d: bad answer %.150s", id, line);
      break;
    }
    a->answered++;
  }
  free(line);
  fclose(in);
  close(fd);
  return NULL;
}

START_TEST(concurrent_clients) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit(&c, 400, 4);
  cJSON_Delete(watch(&c, s.job));
  cJSON_Delete(wait_progress(&c, s.job, 4, 240)); /* tuning is under way */
  enum { N = 32 };
  pthread_t th[N];
  worker_arg_t args[N];
  double t0 = tn_now();
  for (int i = 0; i < N; i++) {
    args[i] = (worker_arg_t){.sock = d.sock, .hash = s.hash, .job = s.job, .index = i + 1};
    ck_assert_int_eq(pthread_create(&th[i], NULL, query_worker, &args[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  double secs = tn_now() - t0;
  for (int i = 0; i < N; i++) {
    ck_assert_msg(!args[i].failure[0], "client %d: %s", i, args[i].failure);
    ck_assert_int_eq(args[i].answered, 20);
  }
  ck_assert_msg(secs < 30 * tu_slowdown(), "640 queries took %.1f s", secs);
  cJSON *r = status(&c, s.job);
  ck_assert_str_eq(str(result(r), "state"), "running"); /* still tuning meanwhile */
  cJSON_Delete(r);
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", s.job);
  cJSON_Delete(rpc(&c, "tune.cancel", p));
  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

/* Holds (or releases) write locks on SQLite's WAL read-mark bytes of DB-shm
 * (offsets 123-127: WAL_READ_LOCK(0..4) at 120 + 3 + i, the WAL-index lock
 * layout of SQLite's file-format document) from this process: until released,
 * no connection of tuned can start a read transaction, as when a read must
 * wait.  Retries briefly while one of tuned's reads holds a mark. */
static bool hold_read_marks(int fd, bool hold) {
  struct flock fl = {.l_type = hold ? F_WRLCK : F_UNLCK, .l_whence = SEEK_SET, .l_start = 123, .l_len = 5};
  for (int i = 0; i < 500; i++) {
    if (fcntl(fd, F_SETLK, &fl) == 0) return true;
    usleep(2000);
  }
  return false;
}

/* Whether a line arrives within timeout_s (without Check's abort). */
static bool answered_within(client_t *c, double timeout_s) {
  if (c->len && memchr(c->buf, '\n', c->len)) return true;
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  return poll(&p, 1, (int)(timeout_s * 1000)) > 0;
}

/* No SQLite call on the loop thread: while a database read cannot proceed,
 * the loop still answers everything that needs no database.  Before the
 * read path moved to reader threads, db.workloads ran on the loop and
 * server.info waited for it.  Every wait is bounded: the locks are released
 * before anything is asserted. */
START_TEST(reads_off_the_loop) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t a, b;
  cl_open(&a, d.sock);
  cl_open(&b, d.sock);
  cJSON_Delete(rpc(&a, "db.workloads", NULL)); /* the WAL index exists */
  char shm[160];
  snprintf(shm, sizeof shm, "%s-shm", d.db);
  int fd = open(shm, O_RDWR | O_CLOEXEC);
  ck_assert_msg(fd >= 0, "open %s: %s", shm, strerror(errno));
  ck_assert_msg(hold_read_marks(fd, true), "cannot lock %s: %s", shm, strerror(errno));
  cl_send_line(&a, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"db.workloads\"}");
  usleep(200000); /* the read has started and waits */
  bool read_waits = !answered_within(&a, 0);
  double t0 = tn_now();
  cl_send_line(&b, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"server.info\"}");
  bool info_answered = answered_within(&b, 2.0);
  double info_secs = tn_now() - t0;
  ck_assert(hold_read_marks(fd, false));
  close(fd);
  ck_assert_msg(read_waits, "db.workloads answered while its read could not start: the test holds no lock");
  ck_assert_msg(info_answered, "server.info waited %.1f s for a database read on the loop thread", info_secs);
  cJSON *r = cl_recv(&b, 10);
  ck_assert_int_eq(cJSON_GetObjectItem(r, "id")->valueint, 8);
  ck_assert_int_eq((int)num(result(r), "pid"), d.pid);
  cJSON_Delete(r);
  r = cl_recv(&a, 30); /* the read goes on once the locks are gone */
  ck_assert_int_eq(cJSON_GetObjectItem(r, "id")->valueint, 7);
  ck_assert(cJSON_IsArray(cJSON_GetObjectItem(result(r), "workloads")));
  cJSON_Delete(r);
  cl_close(&a);
  cl_close(&b);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------------ */

static void expect_raw(client_t *c, const char *line, int code, const char *needle) {
  cl_send_line(c, line);
  cJSON *r = cl_recv(c, 30);
  ck_assert_msg(r, "connection closed after %.60s", line);
  ck_assert_msg(error_code(r) == code, "%.60s: expected %d, got %s", line, code, cJSON_PrintUnformatted(r));
  ck_assert_msg(strstr(error_message(r), needle), "%.60s: message \"%s\" lacks \"%s\"", line, error_message(r),
                needle);
  ck_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "id")) || cJSON_IsNumber(cJSON_GetObjectItem(r, "id")));
  cJSON_Delete(r);
}

/* The submit params with key set to the JSON value (static buffer). */
static const char *with(const char *params, const char *key, const char *value) {
  static char buf[8192];
  cJSON *p = cJSON_Parse(params);
  cJSON_DeleteItemFromObject(p, key);
  cJSON_AddItemToObject(p, key, cJSON_Parse(value));
  char *s = cJSON_PrintUnformatted(p);
  snprintf(buf, sizeof buf, "%s", s);
  free(s);
  cJSON_Delete(p);
  return buf;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

static void alive(client_t *c) {
  cJSON *r = rpc(c, "server.info", NULL);
  ck_assert_str_eq(str(result(r), "target"), "cpu");
  cJSON_Delete(r);
}

/* --idle-timeout: a connection that sent nothing for the timeout is closed;
 * one that keeps asking is kept. */
START_TEST(idle_connections) {
  daemon_t d;
  tmp_daemon(&d);
  const char *extra[] = {"--idle-timeout", "1", NULL};
  start_daemon(&d, extra);
  client_t quiet, busy;
  cl_open(&quiet, d.sock);
  cl_open(&busy, d.sock);
  double t0 = tn_now();
  while (tn_now() - t0 < 2.5) {
    cJSON *r = rpc(&busy, "server.info", NULL);
    ck_assert_ptr_nonnull(result(r));
    cJSON_Delete(r);
    usleep(300 * 1000);
  }
  ck_assert_ptr_null(cl_recv(&quiet, 10)); /* closed: EOF, no message */
  ck_assert_msg(tn_now() - t0 < 6, "the idle connection was closed after %.1f s", tn_now() - t0);
  cJSON *r = rpc(&busy, "server.info", NULL);
  ck_assert_ptr_nonnull(result(r));
  cJSON_Delete(r);
  cl_close(&quiet);
  cl_close(&busy);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

/* One client process may hold 128 connections (bench_daemon's 64 clients
 * fit): the 129th gets an error and is closed, and the others are served as
 * before. */
START_TEST(connections_per_process) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  usleep(300 * 1000); /* start_daemon's probe connection is closed and gone */
  client_t cs[129];
  cJSON *r;
  for (int i = 0; i < 128; i++) { /* each answered: accepted */
    cl_open(&cs[i], d.sock);
    r = rpc(&cs[i], "server.info", NULL);
    ck_assert_msg(result(r), "connection %d: %s", i, cJSON_PrintUnformatted(r));
    cJSON_Delete(r);
  }
  cl_open(&cs[128], d.sock);
  r = cl_recv(&cs[128], 10);
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(error_code(r), -32600);
  ck_assert_msg(strstr(error_message(r), "too many connections from this process (128 at most)"), "%s",
                error_message(r));
  cJSON_Delete(r);
  ck_assert_ptr_null(cl_recv(&cs[128], 10)); /* then EOF */
  r = rpc(&cs[127], "server.info", NULL);
  ck_assert_ptr_nonnull(result(r));
  cJSON_Delete(r);
  cl_close(&cs[0]);
  usleep(200 * 1000);
  client_t again;
  cl_open(&again, d.sock);
  r = rpc(&again, "server.info", NULL);
  ck_assert_ptr_nonnull(result(r));
  cJSON_Delete(r);
  cl_close(&again);
  for (int i = 1; i < 129; i++) cl_close(&cs[i]);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(bad_input) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  expect_raw(&c, "this is not json", -32700, "parse error");
  expect_raw(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.info\"} trailing", -32700, "extra bytes");
  expect_raw(&c, "\x01\x02\xff{", -32700, "parse error");
  expect_raw(&c, "[1,2]", -32600, "batch");
  expect_raw(&c, "42", -32600, "JSON object");
  expect_raw(&c, "{\"jsonrpc\":\"2.0\",\"id\":5}", -32600, "method");
  expect_raw(&c, "{\"jsonrpc\":\"1.0\",\"id\":6,\"method\":\"server.info\"}", -32600, "jsonrpc");
  expect_raw(&c, "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"server.info\"}", -32600, "id");
  /* nesting deeper than the parser allows is a parse error, not a stack overflow */
  static char deep[200001];
  memset(deep, '[', 100000);
  memset(deep + 100000, ']', 100000);
  expect_raw(&c, deep, -32700, "parse error");
  alive(&c);

  expect_error(&c, "no.such.method", NULL, -32601, "tune.submit");
  expect_error(&c, "tune.status", "{\"job\":\"x\"}", -32602, "\"job\"");
  expect_error(&c, "tune.status", "{}", -32602, "missing param \"job\"");
  expect_error(&c, "tune.status", "{\"job\":1.5}", -32602, "\"job\"");
  expect_error(&c, "tune.status", "[1]", -32602, "params");
  expect_error(&c, "tune.status", "{\"job\":999}", -32001, "no job 999");
  expect_error(&c, "tune.trials", "{\"job\":999}", -32001, "no job 999");
  expect_error(&c, "tune.trials", "{}", -32602, "missing param \"job\"");
  expect_error(&c, "tune.status", "{\"job\":1,\"verbose\":true}", -32602, "unknown param \"verbose\"");
  const char *sub = matmul_submit(8, 4);
  expect_error(&c, "tune.submit", with(sub, "trials", "-1"), -32602, "\"trials\"");
  expect_error(&c, "tune.submit", with(sub, "trails", "10"), -32602, "unknown param \"trails\"");
  expect_error(&c, "tune.submit", with(sub, "strategy", "\"greedy\""), -32602, "\"strategy\"");
  expect_error(&c, "tune.submit", with(sub, "population", "8"), -32602, "\"population\"");
  expect_error(&c, "tune.submit", with(sub, "params", "{\"Q\":3}"), -32002, "Q");
  expect_error(&c, "tune.submit", with(sub, "params", "{\"M\":\"big\"}"), -32602, "\"params\"");
  expect_error(&c, "tune.submit", with(sub, "target", "\"nvidia/tesla-p100\""), -32003, "refused");
  expect_error(&c, "tune.submit", with(sub, "target", "\"bogus\""), -32602, "unknown target");
  /* TF32 is for CUDA targets (the daemon's here is cpu: cpu+tf32 is refused by name) */
  expect_error(&c, "tune.submit", with(sub, "allow_tf32", "true"), -32602,
               "\"cpu+tf32\": TF32 (+tf32) is a tensor-core mode of CUDA targets");
  expect_error(&c, "tune.submit", with(sub, "allow_tf32", "1"), -32602, "\"allow_tf32\"");
  /* remeasure and baseline are tune.submit params (tunectl submit --remeasure N, --no-baseline) */
  expect_error(&c, "tune.submit", with(sub, "remeasure", "65"), -32602, "invalid param \"remeasure\"");
  expect_error(&c, "tune.submit", with(sub, "baseline", "1"), -32602, "invalid param \"baseline\"");
  expect_error(&c, "tune.submit",
               "{\"workload\":\"param N = 4, R = 2147483647\\ninput A: float32[N, N]\\noutput B: float32[N]\\n"
               "B[i] = sum(j < R, k < R: A[i, 0])\\n\",\"name\":\"huge\"}",
               -32002, "element updates to compute its reference result, over the cap");
  expect_error(&c, "tune.submit", "{\"workload\":\"x\",\"trials\":8,\"trials\":9}", -32602, "duplicate param");
  expect_error(&c, "tune.submit", "{\"workload\":\"input A: float32[M]\\n\",\"name\":\"mm\"}", -32002, "mm.tw:1:");
  expect_error(&c, "tune.submit", "{\"workload\":42}", -32602, "\"workload\"");
  /* \u0000 would cut the workload short in C: refused; an escaped backslash before u0000 is text */
  expect_error(&c, "tune.submit", "{\"workload\":\"param N = 8\\u0000input X\",\"trials\":1}", -32600,
               "strings may not contain NUL characters");
  expect_error(&c, "tune.submit", "{\"workload\":\"a\\\\u0000\"}", -32002, "workload.tw:1:");
  expect_error(&c, "tune.submit", "{\"name\":\"x\"}", -32602, "missing param \"workload\"");
  expect_error(&c, "db.best", "{\"workload\":\"zzz\"}", -32602, "\"workload\"");
  expect_error(&c, "db.best", "{\"workload\":\"" OTHER_HASH "\"}", -32001, "no workload");
  expect_error(&c, "db.records", "{\"status\":\"great\"}", -32602, "\"status\"");
  expect_error(&c, "db.records", "{\"limit\":0}", -32602, "\"limit\"");
  /* a misspelt target is an error, not an empty list */
  expect_error(&c, "db.records", "{\"target\":\"nvidia/h1000\"}", -32602, "nvidia/h1000");
  expect_error(&c, "db.export", "{\"target\":\"bogus\"}", -32602, "(nor is it in the database)");
  expect_error(&c, "kernel.get", "{\"workload\":\"" OTHER_HASH "\"}", -32001, "no workload");
  expect_error(&c, "kernel.get", "{}", -32602, "exactly one");
  expect_error(&c, "kernel.get", "{\"workload_text\":\"param N = 8\\ninput A: float32[N]\\noutput B: float32[N]\\n"
                                 "B[i] = A[i] * 2\\n\"}", -32004, "no tuned kernel yet");
  expect_error(&c, "db.import", "{\"jsonl\":\"{not json}\\n\"}", -32602, "line 1");
  /* a notification (no id) gets no answer: the next line read is the request's */
  cl_send_line(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"server.info\"}");
  alive(&c);

  /* a client that disconnects mid-request */
  client_t half;
  cl_open(&half, d.sock);
  cl_write(&half, "{\"jsonrpc\":\"2.0\",\"id\":1,\"meth", 30);
  cl_close(&half);
  alive(&c);

  /* clients that leave while their answer is being computed on the thread pool */
  for (int i = 0; i < 8; i++) {
    cl_open(&half, d.sock);
    cl_send_line(&half, i % 2 ? "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"kernel.get\",\"params\":"
                                "{\"workload_text\":\"param N = 8\\ninput A: float32[N]\\noutput B: float32[N]\\n"
                                "B[i] = A[i] * 2\\n\"}}"
                              : "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"db.export\"}");
    cl_close(&half);
  }
  alive(&c);

  /* half-close after the request: the answer still arrives, then EOF */
  cl_open(&half, d.sock);
  cl_send_line(&half, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server.info\"}");
  shutdown(half.fd, SHUT_WR);
  cJSON *r = cl_recv(&half, 30);
  ck_assert_int_eq(cJSON_GetObjectItem(r, "id")->valueint, 7);
  cJSON_Delete(r);
  ck_assert_ptr_null(cl_recv(&half, 30));
  cl_close(&half);

  /* an oversized line: error, then the connection is closed */
  client_t big;
  cl_open(&big, d.sock);
  size_t n = (1u << 20) + 100;
  char *huge = malloc(n);
  memset(huge, 'x', n);
  signal(SIGPIPE, SIG_IGN);
  ssize_t sent = 0;
  while (sent < (ssize_t)n) { /* the daemon may close before it has read it all */
    ssize_t w = write(big.fd, huge + sent, n - (size_t)sent);
    if (w <= 0) break;
    sent += w;
  }
  free(huge);
  r = cl_recv(&big, 30);
  ck_assert_msg(r && error_code(r) == -32600, "oversized line: %s", r ? cJSON_PrintUnformatted(r) : "EOF");
  ck_assert_ptr_nonnull(strstr(error_message(r), "longer than 1048576"));
  cJSON_Delete(r);
  ck_assert_ptr_null(cl_recv(&big, 30));
  cl_close(&big);
  alive(&c);

  /* a flood: 200k requests written without reading any answer; the daemon
   * stops reading that client (bounded memory) and keeps answering others */
  long kib0 = rss_kib(d.pid);
  client_t flood;
  cl_open(&flood, d.sock);
  fcntl(flood.fd, F_SETFL, O_NONBLOCK);
  const char *req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"target.list\"}\n";
  size_t rl = strlen(req), written = 0;
  double t0 = tn_now();
  for (int i = 0; i < 200000 && tn_now() - t0 < 5; i++) {
    ssize_t w = write(flood.fd, req, rl);
    if (w < 0 && errno == EAGAIN) {
      usleep(1000);
      continue;
    }
    ck_assert_int_eq((int)w, (int)rl); /* lines are small: written whole or not at all */
    written += (size_t)w;
  }
  double q0 = tn_now();
  alive(&c);
  ck_assert_msg(tn_now() - q0 < 2, "server.info took %.2f s during a flood", tn_now() - q0);
  long kib = rss_kib(d.pid);
  ck_assert_msg(kib0 > 0 && kib - kib0 < 64 * 1024, "tuned grew from %ld to %ld KiB during a flood", kib0, kib);
  cl_close(&flood);
  alive(&c);
  ck_assert_uint_gt(written, 0);

  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

/* ---- start-up refusals, locking, defaults, shutdown ---------------------------------------------- */

/* Runs tuned with args to completion; returns its exit status, log in *log. */
static int run_tuned(daemon_t *d, const char *const *args, char **log) {
  unlink(d->log);
  pid_t pid = spawn_tuned(d, args, NULL);
  int st = wait_exit(pid, 60);
  *log = read_log(d);
  return st;
}

/* One datagram from the notify socket fd within timeout_s (times the
 * slowdown), into buf; false when none came. */
static bool notify_recv(int fd, char *buf, size_t size, double timeout_s) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, (int)(timeout_s * tu_slowdown() * 1000)) != 1) return false;
  ssize_t n = recv(fd, buf, size - 1, 0);
  if (n < 0) return false;
  buf[n] = 0;
  return true;
}

/* Readiness for the systemd unit (Type=notify): under $NOTIFY_SOCKET tuned
 * sends READY=1, with its pid and a STATUS line, once its socket listens
 * (a client connects at once), and STOPPING=1 at SIGTERM.  Built without
 * libsystemd (the unit is then Type=simple) it sends nothing and runs all
 * the same. */
START_TEST(systemd_notify) {
  daemon_t d;
  tmp_daemon(&d);
  char env[160], msg[1024];
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify.sock", d.dir); /* d.dir: 24 bytes */
  snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", sa.sun_path);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  const char *args[] = {"--target", "cpu", "--db", d.db, "--socket", d.sock, "--log-level", "debug", NULL};
  const char *envs[] = {env, NULL};
  d.pid = spawn_tuned(&d, args, envs);
#if TUNED_HAVE_SYSTEMD
  ck_assert_msg(notify_recv(fd, msg, sizeof msg, 60), "no READY=1 from tuned: %s", read_log(&d));
  char want[256];
  snprintf(want, sizeof want, "READY=1\nMAINPID=%d\nSTATUS=listening on %s; target cpu; database ", (int)d.pid,
           d.sock);
  ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "got \"%s\", expected \"%s...\"", msg, want);
  int c = try_connect(d.sock); /* ready means listening */
  ck_assert_int_ge(c, 0);
  close(c);
  kill(d.pid, SIGTERM);
  ck_assert_msg(notify_recv(fd, msg, sizeof msg, 30), "no STOPPING=1 from tuned: %s", read_log(&d));
  ck_assert_msg(strncmp(msg, "STOPPING=1\nSTATUS=stopping (SIGTERM)", 36) == 0, "%s", msg);
#else
  for (int i = 0; i < 6000 * tu_slowdown() && try_connect(d.sock) < 0; i++) usleep(10000);
  ck_assert_msg(!notify_recv(fd, msg, sizeof msg, 1), "a build without libsystemd sent \"%s\"", msg);
  kill(d.pid, SIGTERM);
#endif
  ck_assert_int_eq(wait_exit(d.pid, 60), 0);
  d.pid = 0;
  close(fd);
  rm_tree(d.dir);
}
END_TEST

/* PoCL's kernel cache is beside the database from the start: the backends'
 * probe builds with PoCL too, and under the systemd unit's read-only home
 * PoCL's default ~/.cache/pocl made it fail ("no device"), so that the
 * daemon lost OpenCL. */
START_TEST(pocl_cache_beside_db) {
  ms_backend_status_t cl;
  ms_backend_probe(MS_BACKEND_OPENCL, &cl);
  if (!cl.available) {
    fprintf(stderr, "pocl_cache_beside_db: no OpenCL here (%s); not run\n", cl.detail);
    return;
  }
  daemon_t d;
  tmp_daemon(&d);
  char home[96], env_home[128], path[160];
  snprintf(home, sizeof home, "%s/home", d.dir);
  ck_assert_int_eq(mkdir(home, 0700), 0);
  snprintf(env_home, sizeof env_home, "HOME=%s", home);
  unsetenv("POCL_CACHE_DIR"); /* (this test's process only) */
  unsetenv("XDG_CACHE_HOME");
  const char *env[] = {env_home, NULL};
  int st;
  ck_assert_msg(launch_daemon(&d, NULL, env, &st), "tuned exited at start (status %d): %s", st, read_log(&d));
  struct stat sb;
  snprintf(path, sizeof path, "%s/pocl-cache", d.dir);
  ck_assert_msg(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode), "no %s", path);
  snprintf(path, sizeof path, "%s/.cache/pocl", home);
  ck_assert_msg(stat(path, &sb) != 0, "the probe wrote PoCL's cache into the home: %s", path);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(refused_targets) {
  daemon_t d;
  tmp_daemon(&d);
  char *log;
  const char *p100[] = {"--target", "nvidia/tesla-p100", "--db", d.db, "--socket", d.sock, NULL};
  ck_assert_int_eq(run_tuned(&d, p100, &log), 1);
  ck_assert_msg(strstr(log, "target nvidia/tesla-p100 refused"), "%s", log);
#if TUNED_HAVE_CUDA
  ck_assert_msg(strstr(log, "sm_60 is not supported by NVRTC") && strstr(log, "supported: sm_75"), "%s", log);
#endif
  ck_assert_msg(strstr(log, "--target cpu"), "no alternative offered: %s", log);
  free(log);

  ms_backend_status_t cu;
  ms_backend_probe(MS_BACKEND_CUDA, &cu);
  const char *gpu = cu.available && strstr(cu.detail, "H100") ? "nvidia/tesla-t4" : "nvidia/h100";
  const char *h100[] = {"--target", gpu, "--db", d.db, "--socket", d.sock, NULL};
  ck_assert_int_eq(run_tuned(&d, h100, &log), 1);
  if (!cu.available) /* no device, or (a build without CUDA) no CUDA at all */
    ck_assert_msg((strstr(log, "no CUDA device here") || strstr(log, "built without CUDA")) &&
                      strstr(log, "--target cpu"), "%s", log);
  else ck_assert_msg(strstr(log, "the GPU here is"), "%s", log);
  free(log);

  /* no OpenCL platform: the ICD loader finds no vendor files */
  const char *ocl[] = {"--target", "opencl/pocl-cpu", "--db", d.db, "--socket", d.sock, NULL};
  const char *no_icd[] = {"OCL_ICD_VENDORS=/nonexistent", NULL};
  unlink(d.log);
  pid_t pid = spawn_tuned(&d, ocl, no_icd);
  ck_assert_int_eq(wait_exit(pid, 60), 1);
  log = read_log(&d);
  ck_assert_msg(strstr(log, "no OpenCL platform here") && strstr(log, "--target cpu"), "%s", log);
  free(log);
  const char *bogus[] = {"--target", "bogus", "--db", d.db, "--socket", d.sock, NULL};
  ck_assert_int_eq(run_tuned(&d, bogus, &log), 2);
  ck_assert_msg(strstr(log, "unknown target \"bogus\"") && strstr(log, "nvidia/tesla-t4"), "%s", log);
  free(log);
  const char *badopt[] = {"--jobs", "0", NULL};
  ck_assert_int_eq(run_tuned(&d, badopt, &log), 2);
  ck_assert_msg(strstr(log, "--jobs"), "%s", log);
  free(log);
  const char *badcc[] = {"--cc", "icc", NULL};
  ck_assert_int_eq(run_tuned(&d, badcc, &log), 2);
  ck_assert_msg(strstr(log, "tuned: --cc must be gcc, clang or auto, got 'icc'"), "%s", log);
  free(log);
  /* the CPU target's compiler is not installed: refused, saying which and how to choose another */
  const char *cpu[] = {"--target", "cpu", "--cc", "clang", "--db", d.db, "--socket", d.sock, NULL};
  const char *no_path[] = {"PATH=/nonexistent", NULL};
  unlink(d.log);
  pid = spawn_tuned(&d, cpu, no_path);
  ck_assert_int_eq(wait_exit(pid, 60), 1);
  log = read_log(&d);
  ck_assert_msg(strstr(log, "target cpu refused: target cpu builds with clang") && strstr(log, "--cc gcc|clang|auto"),
                "%s", log);
  free(log);
  ck_assert_int_ne(access(d.db, F_OK), 0); /* nothing was created */
  rm_tree(d.dir);
}
END_TEST

/* The nice value of a thread or process from its /proc stat line (field 19,
 * counted after the parenthesised name, which may hold spaces); -100 when
 * it cannot be read. */
static int proc_nice(const char *stat_path) {
  FILE *f = fopen(stat_path, "r");
  if (!f) return -100;
  char line[1024];
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char *p = ok ? strrchr(line, ')') : NULL;
  int nice = -100;
  /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
   * cstime priority nice */
  if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %d", &nice) != 1)
    nice = -100;
  return nice;
}

/* The parent pid of a process (field 4), -1 when it cannot be read. */
static int proc_ppid(const char *stat_path, char *comm, size_t size) {
  FILE *f = fopen(stat_path, "r");
  if (!f) return -1;
  char line[1024];
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char *open_ = ok ? strchr(line, '(') : NULL, *close_ = ok ? strrchr(line, ')') : NULL;
  int ppid = -1;
  if (!open_ || !close_ || sscanf(close_ + 1, " %*c %d", &ppid) != 1) return -1;
  snprintf(comm, size, "%.*s", (int)(close_ - open_ - 1), open_ + 1);
  return ppid;
}

/* Counts tuned's threads at nice `base` (the level it started at) and at
 * `tune` (base + --tune-nice), and its measure worker processes (children
 * named tuned-worker) at `tune`. */
static void count_nice(pid_t pid, int base, int tune, int *serving, int *tuning, int *workers) {
  *serving = *tuning = *workers = 0;
  char path[300], comm[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *dir = opendir(path);
  ck_assert_ptr_nonnull(dir);
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
    int n = proc_nice(path);
    *serving += n == base;
    *tuning += n == tune;
  }
  closedir(dir);
  dir = opendir("/proc");
  ck_assert_ptr_nonnull(dir);
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    if (proc_ppid(path, comm, sizeof comm) == pid && strcmp(comm, "tuned-worker") == 0 && proc_nice(path) == tune)
      (*workers)++;
  }
  closedir(dir);
}

/* --tune-nice: the tuning work (job thread, build pool, measure worker) runs
 * 10 levels below the loop and the reader threads that answer clients
 * (relative to the level tuned starts at, which it inherits from this test;
 * at most 19, so a test run at nice 19 cannot tell them apart). */
START_TEST(tuning_priority) {
  errno = 0;
  int base = getpriority(PRIO_PROCESS, 0);
  ck_assert_int_eq(errno, 0);
  if (base >= 19) {
    fprintf(stderr, "tuning_priority: skipped at nice %d (the tuning work can be no lower)\n", base);
    return;
  }
  int tune = TN_MIN(base + 10, 19);
  daemon_t d;
  tmp_daemon(&d);
  char *log;
  const char *const bad[] = {"--target", "cpu", "--db", d.db, "--socket", d.sock, "--tune-nice", "20", NULL};
  ck_assert_int_eq(run_tuned(&d, bad, &log), 2);
  ck_assert_msg(strstr(log, "--tune-nice must be an integer from 0 to 19, got '20'"), "%s", log);
  free(log);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit(&c, 400, 4);
  cJSON_Delete(watch(&c, s.job));
  cJSON_Delete(wait_progress(&c, s.job, 4, 240)); /* the job thread, its builds and its worker exist */
  int serving, tuning, workers;
  count_nice(d.pid, base, tune, &serving, &tuning, &workers);
  ck_assert_msg(serving >= 5, "%d threads at nice %d (the loop and 4 readers at least)", serving, base);
  ck_assert_msg(tuning >= 2, "%d threads at nice %d (the job thread and the build pool)", tuning, tune);
  ck_assert_msg(workers == 1, "%d measure workers at nice %d", workers, tune);
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", s.job);
  cJSON_Delete(rpc(&c, "tune.cancel", p));
  cl_close(&c);
  stop_daemon(&d);
  rm_tree(d.dir);
}
END_TEST

START_TEST(socket_and_db_in_use) {
  daemon_t d, e;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  tmp_daemon(&e);
  char *log;
  const char *same_sock[] = {"--target", "cpu", "--db", e.db, "--socket", d.sock, NULL};
  ck_assert_int_eq(run_tuned(&e, same_sock, &log), 1);
  ck_assert_msg(strstr(log, "already listening on"), "%s", log);
  free(log);
  const char *same_db[] = {"--target", "cpu", "--db", d.db, "--socket", e.sock, NULL};
  ck_assert_int_eq(run_tuned(&e, same_db, &log), 1);
  ck_assert_msg(strstr(log, "another tuned is using the database"), "%s", log);
  free(log);
  client_t c;
  cl_open(&c, d.sock); /* the first one is unaffected */
  alive(&c);
  cJSON *r = rpc(&c, "server.shutdown", NULL);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(result(r), "ok")));
  cJSON_Delete(r);
  ck_assert_ptr_null(cl_recv(&c, 30)); /* then the daemon closes the connection */
  cl_close(&c);
  ck_assert_int_eq(wait_exit(d.pid, 30), 0);
  ck_assert_int_ne(access(d.sock, F_OK), 0);
  rm_tree(d.dir);
  rm_tree(e.dir);
}
END_TEST

START_TEST(xdg_defaults) {
  daemon_t d;
  tmp_daemon(&d);
  char run[160], data[160], env_run[200], env_data[200], sock[200], db[200];
  snprintf(run, sizeof run, "%s/run", d.dir);
  snprintf(data, sizeof data, "%s/data", d.dir);
  mkdir(run, 0700);
  snprintf(env_run, sizeof env_run, "XDG_RUNTIME_DIR=%s", run);
  snprintf(env_data, sizeof env_data, "XDG_DATA_HOME=%s", data);
  snprintf(sock, sizeof sock, "%s/tuned/tuned.sock", run);
  snprintf(db, sizeof db, "%s/tuned/tuned.db", data);
  const char *args[] = {"--target", "cpu", NULL};
  const char *env[] = {env_run, env_data, "TUNED_SOCKET=", NULL}; /* replace the inherited ones */
  pid_t pid = spawn_tuned(&d, args, env);
  int fd = -1;
  for (int i = 0; i < 1500 * tu_slowdown() && fd < 0; i++) fd = try_connect(sock), usleep(fd < 0 ? 10000 : 0);
  ck_assert_msg(fd >= 0, "no socket at %s: %s", sock, read_log(&d));
  close(fd);
  struct stat st;
  ck_assert_int_eq(stat(sock, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  char dir[200];
  snprintf(dir, sizeof dir, "%s/tuned", run);
  ck_assert_int_eq(stat(dir, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ck_assert_int_eq(access(db, F_OK), 0);
  client_t c;
  cl_open(&c, sock);
  cJSON *r = rpc(&c, "server.info", NULL);
  ck_assert_str_eq(str(result(r), "socket"), sock);
  ck_assert_str_eq(str(result(r), "db"), db);
  cJSON_Delete(r);
  cl_close(&c);
  kill(pid, SIGINT);
  ck_assert_int_eq(wait_exit(pid, 30), 0);
  rm_tree(d.dir);
}
END_TEST

/* ---- jobs at once: one measurer per device -------------------------------------------- */

typedef struct window {
  int job;
  char device[32];
  long long start, end;
} window_t;

/* The windows of every measured candidate in the daemon's debug log. */
static window_t *candidate_windows(const daemon_t *d, int *n) {
  char *text = NULL;
  size_t len;
  tn_err_t err = {0};
  ck_assert_msg(tn_read_file(d->log, 64 << 20, &text, &len, &err) == 0, "%s", err.msg);
  int cap = 64;
  window_t *ws = malloc(sizeof *ws * (size_t)cap);
  *n = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strstr(line, "msg=\"candidate measured\"")) continue;
    window_t w;
    const char *job = strstr(line, " job="), *dev = strstr(line, " device="), *ws_ = strstr(line, " window_start_ns="),
               *we = strstr(line, " window_end_ns=");
    ck_assert_msg(job && dev && ws_ && we, "a candidate line without its window: %s", line);
    w.job = atoi(job + 5);
    ck_assert_int_eq(sscanf(dev + 8, "%31s", w.device), 1);
    w.start = atoll(ws_ + 17);
    w.end = atoll(we + 15);
    if (w.start == 0) continue; /* not run (a build error) */
    ck_assert_msg(w.end > w.start, "%s", line);
    if (*n == cap) ws = realloc(ws, sizeof *ws * (size_t)(cap *= 2));
    ws[(*n)++] = w;
  }
  free(text);
  return ws;
}

static bool target_usable(client_t *c, const char *name) {
  cJSON *r = rpc(c, "target.list", NULL);
  const cJSON *t;
  bool usable = false;
  cJSON_ArrayForEach(t, cJSON_GetObjectItem(result(r), "targets"))
    if (strcmp(str(t, "name"), name) == 0) usable = cJSON_IsTrue(cJSON_GetObjectItem(t, "usable"));
  cJSON_Delete(r);
  return usable;
}

/* Nothing of PoCL (nor the LLVM in it) was ever loaded into process pid:
 * OpenCL's probe and builds run in build processes, where an overrunning
 * or crashing compile can be killed without taking the daemon along. */
static void assert_no_llvm(pid_t pid) {
  char path[64], *maps = NULL;
  size_t len;
  tn_err_t err = {0};
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  ck_assert_msg(tn_read_file(path, 64 << 20, &maps, &len, &err) == 0, "%s", err.msg);
  ck_assert_msg(!strstr(maps, "libpocl") && !strstr(maps, "libLLVM"), "the daemon loaded PoCL or LLVM:\n%s", maps);
  free(maps);
}

/* tuned --jobs 3: two jobs on the CPU (and, with PoCL, one on
 * opencl/pocl-cpu, whose device is the same CPU) run at once with one build
 * pool; no two candidates are ever timed at once on a device, and the jobs
 * took turns: each job's candidates were timed while the others' were. */
START_TEST(jobs_share_devices) {
  daemon_t d;
  tmp_daemon(&d);
  const char *extra[] = {"--jobs", "3", NULL};
  start_daemon(&d, extra);
  client_t c;
  cl_open(&c, d.sock);
  bool pocl = target_usable(&c, "opencl/pocl-cpu");
  submitted_t jobs[3] = {submit_on(&c, 96, "cpu", 12, 4), submit_on(&c, 128, "cpu", 12, 4)};
  int njobs = 2;
  if (pocl) jobs[njobs++] = submit_on(&c, 32, "opencl/pocl-cpu", 8, 4);
  cJSON *r = rpc(&c, "server.info", NULL);
  ck_assert_int_eq((int)num(result(r), "jobs_running"), njobs); /* all at once */
  cJSON_Delete(r);
  client_t wc[3];
  bool over[3];
  for (int k = 0; k < njobs; k++) { /* one watcher each: notifications name one job */
    cl_open(&wc[k], d.sock);
    r = watch(&wc[k], jobs[k].job);
    over[k] = strcmp(str(result(r), "state"), "done") == 0;
    cJSON_Delete(r);
  }
  for (int k = 0; k < njobs; k++) {
    if (!over[k]) cJSON_Delete(wait_progress(&wc[k], jobs[k].job, 1 << 30, 600));
    cl_close(&wc[k]);
    r = status(&c, jobs[k].job);
    ck_assert_str_eq(str(result(r), "state"), "done");
    cJSON_Delete(r);
  }
  cl_close(&c);
  if (pocl) assert_no_llvm(d.pid);
  stop_daemon(&d);

  int n = 0;
  window_t *ws = candidate_windows(&d, &n);
  long long first[3] = {LLONG_MAX, LLONG_MAX, LLONG_MAX}, last[3] = {0, 0, 0};
  int count[3] = {0, 0, 0};
  for (int i = 0; i < n; i++) {
    int k = 0;
    while (k < njobs && jobs[k].job != ws[i].job) k++;
    ck_assert_msg(k < njobs, "a window of an unknown job %d", ws[i].job);
    ck_assert_str_eq(ws[i].device, "cpu"); /* PoCL runs on the host's cores too */
    count[k]++;
    first[k] = first[k] < ws[i].start ? first[k] : ws[i].start;
    last[k] = last[k] > ws[i].end ? last[k] : ws[i].end;
    for (int j = 0; j < i; j++)
      ck_assert_msg(strcmp(ws[i].device, ws[j].device) != 0 || ws[i].end <= ws[j].start || ws[j].end <= ws[i].start,
                    "jobs %d and %d timed candidates at once on %s: [%lld, %lld] and [%lld, %lld]", ws[i].job,
                    ws[j].job, ws[i].device, ws[i].start, ws[i].end, ws[j].start, ws[j].end);
  }
  for (int k = 0; k < njobs; k++) {
    /* a loaded machine loses some PoCL builds to their time limit (3 of 8
     * timed at load 13): two windows a job are enough to check sharing */
    ck_assert_msg(count[k] >= 2, "job %d timed %d candidates", jobs[k].job, count[k]);
    for (int l = 0; l < k; l++)
      ck_assert_msg(first[k] < last[l] && first[l] < last[k], "jobs %d and %d did not run during the same interval",
                    jobs[l].job, jobs[k].job);
  }
  free(ws);
  rm_tree(d.dir);
}
END_TEST

/* ---- deadlines, cancel latency, SIGTERM, faults -------------------------------------------- */

/* tune.submit params for C[i] = sum(k < K: A[i]) over 16 outputs: 2^32
 * element updates at K = 2^28, under the evaluator's cap (2^38) but about a
 * minute of reference evaluation (tiny data, so candidates build at once). */
static const char *heavy_submit(double seconds) {
  static char buf[1024];
  snprintf(buf, sizeof buf,
           "{\"workload\":\"param N = 16, K = 268435456\\ninput A: float32[N]\\noutput C: float32[N]\\n"
           "C[i] = sum(k < K: A[i])\\n\",\"name\":\"heavy\",\"trials\":4,\"batch_size\":2,\"population\":64,"
           "\"seconds\":%g}",
           seconds);
  return buf;
}

/* Waits until the daemon's log holds needle (after byte `from`); fails after timeout_s. */
static void wait_log(const daemon_t *d, const char *needle, double timeout_s) {
  for (double t0 = tn_now(); tn_now() - t0 < timeout_s; usleep(20000)) {
    char *text = NULL;
    size_t len;
    tn_err_t err = {0};
    if (tn_read_file(d->log, 64 << 20, &text, &len, &err) == 0) {
      bool found = strstr(text, needle) != NULL;
      free(text);
      if (found) return;
    }
  }
  ck_abort_msg("no \"%s\" in the log within %.0f s: %s", needle, timeout_s, read_log(d));
}

/* How long tune.cancel takes to answer, and its state. */
static double timed_cancel(client_t *c, int job, char *state, size_t cap) {
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", job);
  double t0 = tn_now();
  cJSON *r = rpc(c, "tune.cancel", p);
  double took = tn_now() - t0;
  snprintf(state, cap, "%s", str(result(r), "state"));
  cJSON_Delete(r);
  return took;
}

/* A cancel during a reference evaluation of about a minute answers
 * `cancelled` within a second: the evaluator polls the job's stop flag.
 * The bound asserted is 3 s, not 1 s: a machine loaded by parallel builds
 * may deschedule the evaluating thread or the loop for a while; the
 * measured latency is printed (tens of milliseconds when quiet). */
START_TEST(cancel_during_reference) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  cJSON *r = rpc(&c, "tune.submit", heavy_submit(0));
  int job = (int)num(result(r), "job");
  cJSON_Delete(r);
  wait_log(&d, "evaluating the reference outputs of heavy", 120);
  usleep(300000); /* well inside it */
  char state[32];
  double took = timed_cancel(&c, job, state, sizeof state);
  fprintf(stderr, "cancel_during_reference: tune.cancel answered in %.3f s\n", took);
  ck_assert_str_eq(state, "cancelled");
  /* under memcheck every thread runs 20-50x slower (3.78 s seen at load 13): its own bound */
  double bound = tu_slowdown() > 1 ? 10.0 : 3.0;
  ck_assert_msg(took < bound, "tune.cancel took %.2f s during the reference evaluation (bound %.0f s)", took, bound);
  /* the job's thread is gone within seconds too (the evaluation stopped;
   * the daemon does not answer for a thread that never ends) */
  int running = -1;
  for (int i = 0; i < 30 && running != 0; i++, usleep(100000)) {
    r = rpc(&c, "server.info", NULL);
    running = (int)num(result(r), "jobs_running");
    cJSON_Delete(r);
  }
  ck_assert_int_eq(running, 0);
  cl_close(&c);
  double t0 = tn_now();
  stop_daemon(&d);
  ck_assert_msg(tn_now() - t0 < 5, "stopping took %.1f s", tn_now() - t0);
  rm_tree(d.dir);
}
END_TEST

/* A cancel while the job generates a population of 100000 candidates
 * (seconds of sampling): the sampling and mutation slots ask the stop, so
 * the job ends within a second and the daemon stops cleanly. */
START_TEST(cancel_while_generating) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  const char *params = with(matmul_submit_on(256, NULL, 64, 64), "population", "100000");
  cJSON *r = rpc(&c, "tune.submit", params);
  int job = (int)num(result(r), "job");
  cJSON_Delete(r);
  wait_log(&d, "msg=\"job started\"", 60);
  usleep(300000);
  char state[32];
  double took = timed_cancel(&c, job, state, sizeof state);
  fprintf(stderr, "cancel_while_generating: tune.cancel answered in %.3f s\n", took);
  ck_assert_str_eq(state, "cancelled");
  ck_assert_msg(took < 3.0, "tune.cancel took %.2f s while generating", took);
  int running = -1;
  for (int i = 0; i < 30 && running != 0; i++, usleep(100000)) {
    r = rpc(&c, "server.info", NULL);
    running = (int)num(result(r), "jobs_running");
    cJSON_Delete(r);
  }
  ck_assert_int_eq(running, 0); /* the thread is gone too, within 3 s */
  cl_close(&c);
  stop_daemon(&d);
  db_job_state_t st;
  job_row(d.db, job, &st);
  ck_assert_int_eq(st, DB_JOB_CANCELLED);
  rm_tree(d.dir);
}
END_TEST

/* Another process holds the database's write lock while the job commits a
 * batch (SQLite waits up to 10 s for it: work that polls nothing): the
 * cancel is answered `cancelled` by the daemon itself after half a second,
 * from memory; once the lock is gone the job ends and its row says
 * cancelled, with every record it committed. */
START_TEST(cancel_while_db_locked) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c, w;
  cl_open(&c, d.sock);
  cl_open(&w, d.sock);
  submitted_t s = submit_on(&c, 16, NULL, 400, 2);
  cJSON_Delete(watch(&w, s.job));
  cJSON_Delete(wait_progress(&w, s.job, 2, 240));
  sqlite3 *h;
  ck_assert_int_eq(sqlite3_open(d.db, &h), SQLITE_OK);
  sqlite3_busy_timeout(h, 10000);
  ck_assert_int_eq(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  sleep(4); /* the next batch (2 candidates of 16^3) is measured and waits to commit */
  char state[32];
  double took = timed_cancel(&c, s.job, state, sizeof state);
  fprintf(stderr, "cancel_while_db_locked: tune.cancel answered in %.3f s\n", took);
  ck_assert_str_eq(state, "cancelled");
  ck_assert_msg(took < 1.5, "tune.cancel took %.2f s while the job waited for the lock", took);
  wait_log(&d, "a cancelled job has not stopped yet", 0.1);
  cJSON *r = status(&c, s.job);
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  cJSON_Delete(r);
  ck_assert_int_eq(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(h);
  int running = -1;
  for (int i = 0; i < 300 && running != 0; i++, usleep(100000)) {
    r = rpc(&c, "server.info", NULL);
    running = (int)num(result(r), "jobs_running");
    cJSON_Delete(r);
  }
  ck_assert_int_eq(running, 0);
  cl_close(&w);
  cl_close(&c);
  stop_daemon(&d);
  db_job_state_t st;
  db_job_t row = job_row(d.db, s.job, &st);
  ck_assert_int_eq(st, DB_JOB_CANCELLED);
  ck_assert_uint_eq(count_records(d.db, s.hash, true), (size_t)row.trials_done);
  ck_assert_int_ge(row.trials_done, 2);
  rm_tree(d.dir);
}
END_TEST

/* A job's deadline (its seconds + --deadline-grace) covers the reference
 * evaluation: 1 s + 10 s (time for the evaluation to start: the time budget
 * ends the search at 1 s, the unscheduled program's measurement after it
 * evaluates the reference), then the job is failed with the reason instead
 * of running for the minute the evaluation would take. */
START_TEST(deadline_covers_reference) {
  daemon_t d;
  tmp_daemon(&d);
  const char *extra[] = {"--deadline-grace", "10", NULL};
  start_daemon(&d, extra);
  client_t c;
  cl_open(&c, d.sock);
  double t0 = tn_now();
  cJSON *r = rpc(&c, "tune.submit", heavy_submit(1));
  int job = (int)num(result(r), "job");
  cJSON_Delete(r);
  r = watch(&c, job);
  cJSON_Delete(r);
  cJSON *n = wait_progress(&c, job, 1 << 30, 120);
  const cJSON *p = cJSON_GetObjectItem(n, "params");
  double took = tn_now() - t0;
  fprintf(stderr, "deadline_covers_reference: the job ended %.2f s after submit (deadline 11 s)\n", took);
  ck_assert_str_eq(str(p, "state"), "failed");
  ck_assert_msg(strstr(str(p, "error"), "deadline: stopped") && strstr(str(p, "error"), "time budget of 1 s") &&
                    strstr(str(p, "error"), "--deadline-grace of 10 s"), "%s", str(p, "error"));
  cJSON_Delete(n);
  wait_log(&d, "evaluating the reference outputs of heavy", 0.1); /* the deadline fell inside it */
  ck_assert_msg(took > 10.5 && took < 25, "the job ended %.1f s after submit (deadline 11 s)", took);
  cl_close(&c);
  stop_daemon(&d);
  db_job_state_t state;
  job_row(d.db, job, &state);
  ck_assert_int_eq(state, DB_JOB_FAILED);
  rm_tree(d.dir);
}
END_TEST

/* SIGTERM during a long reference evaluation: the daemon exits 0 at once
 * (the job requeued); the restarted daemon resumes the job, serves requests
 * while it evaluates again, cancels it within seconds and stops at once
 * again. */
START_TEST(sigterm_during_reference) {
  daemon_t d;
  tmp_daemon(&d);
  const char *extra[] = {"--stop-timeout", "20", NULL};
  start_daemon(&d, extra);
  client_t c;
  cl_open(&c, d.sock);
  cJSON *r = rpc(&c, "tune.submit", heavy_submit(0));
  int job = (int)num(result(r), "job");
  cJSON_Delete(r);
  wait_log(&d, "evaluating the reference outputs of heavy", 120);
  usleep(300000);
  cl_close(&c);
  double t0 = tn_now();
  kill(d.pid, SIGTERM);
  /* The reference is evaluated on the job's thread: natively over 11 s, under
   * memcheck (one thread at a time, 20-50x slower) many minutes, so the
   * bounds under memcheck (15.7 s seen for the exit on a loaded CI machine)
   * still tell a stop that waited for it from one that did not. */
  bool slow = tu_slowdown() > 1;
  int st = wait_exit(d.pid, slow ? 120 : 30);
  double took = tn_now() - t0;
  fprintf(stderr, "sigterm_during_reference: exited %.3f s after SIGTERM\n", took);
  ck_assert_msg(st == 0, "exit status %d: %s", st, read_log(&d));
  ck_assert_msg(took < (slow ? 60 : 5), "SIGTERM took %.1f s during the reference evaluation", took);
  db_job_state_t state;
  job_row(d.db, job, &state);
  ck_assert_int_eq(state, DB_JOB_QUEUED);

  unlink(d.log);
  start_daemon(&d, extra);
  wait_log(&d, "evaluating the reference outputs of heavy", 120);
  cl_open(&c, d.sock);
  t0 = tn_now();
  r = rpc(&c, "server.info", NULL);
  ck_assert_int_eq((int)num(result(r), "jobs_running"), 1);
  cJSON_Delete(r);
  ck_assert_msg(tn_now() - t0 < (slow ? 20 : 2), "server.info took %.1f s", tn_now() - t0);
  char s[32];
  took = timed_cancel(&c, job, s, sizeof s);
  ck_assert_str_eq(s, "cancelled");
  ck_assert_msg(took < (slow ? 20 : 3), "tune.cancel took %.2f s", took);
  cl_close(&c);
  t0 = tn_now();
  stop_daemon(&d);
  ck_assert_msg(tn_now() - t0 < (slow ? 60 : 5), "stopping took %.1f s", tn_now() - t0);
  rm_tree(d.dir);
}
END_TEST

/* A full disk: the daemon may write files of at most 320 KiB
 * (RLIMIT_FSIZE; tuned ignores SIGXFSZ, so that writes fail with EFBIG), so
 * that the write-ahead log fills after some batches.  The job ends `failed` with
 * the reason in tune.status (not `running`), tune.cancel answers at once,
 * and every batch committed before the fault is in the database, also after
 * a restart without the limit. */
START_TEST(disk_full_fails_the_job) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL); /* the schema, written without the limit */
  stop_daemon(&d);
  struct rlimit old, lim;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = (struct rlimit){320 << 10, old.rlim_max};
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0); /* inherited by tuned */
  const char *quiet[] = {"--log-level", "info", NULL};
  start_daemon(&d, quiet);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);

  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit(&c, 4000, 4);
  cJSON_Delete(watch(&c, s.job));
  cJSON *n = wait_progress(&c, s.job, 1 << 30, 600);
  cJSON_Delete(n);
  cJSON *r = status(&c, s.job);
  const cJSON *job = result(r);
  const char *error = cJSON_IsString(cJSON_GetObjectItem(job, "error")) ? str(job, "error") : "(none)";
  ck_assert_msg(strcmp(str(job, "state"), "failed") == 0, "state %s, error %s", str(job, "state"), error);
  ck_assert_msg(strstr(error, "could not be written") && strstr(error, "disk"), "%s", error);
  int done = (int)num(job, "trials_done");
  fprintf(stderr, "disk_full_fails_the_job: failed after %d trials: %s\n", done, error);
  ck_assert_int_ge(done, 4);
  ck_assert_int_lt(done, 4000);
  cJSON_Delete(r);
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", s.job);
  double t0 = tn_now();
  r = rpc(&c, "tune.cancel", p);
  ck_assert_str_eq(str(result(r), "state"), "failed");
  ck_assert_msg(tn_now() - t0 < 1, "tune.cancel took %.2f s", tn_now() - t0);
  cJSON_Delete(r);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), (size_t)done); /* while it runs */
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), (size_t)done);

  /* room again: the daemon starts, and the job is resumed or stays failed */
  start_daemon(&d, quiet);
  cl_open(&c, d.sock);
  r = rpc(&c, "tune.cancel", p);
  const char *st = str(result(r), "state");
  ck_assert_msg(strcmp(st, "cancelled") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "done") == 0, "%s", st);
  cJSON_Delete(r);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), (size_t)done);
  rm_tree(d.dir);
}
END_TEST

/* SIGTERM while the job's commit waits for another process's lock on the
 * database (work that polls nothing, up to SQLite's 10 s): tuned exits
 * within --stop-timeout 1 all the same (status 1, its workers and
 * compilers killed), and the job resumes at the next start, where a cancel
 * and another stop work too. */
START_TEST(sigterm_within_stop_timeout) {
  if (tu_slowdown() > 1) { /* the forced exit leaves the job's state allocated on purpose: memcheck's leaks */
    fprintf(stderr, "sigterm_within_stop_timeout: skipped in a slowed-down run (TUNED_TEST_SLOWDOWN)\n");
    return;
  }
  daemon_t d;
  tmp_daemon(&d);
  const char *extra[] = {"--stop-timeout", "1", NULL};
  start_daemon(&d, extra);
  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit_on(&c, 16, NULL, 400, 2);
  cJSON_Delete(watch(&c, s.job));
  cJSON_Delete(wait_progress(&c, s.job, 2, 240));
  cl_close(&c);
  sqlite3 *h;
  ck_assert_int_eq(sqlite3_open(d.db, &h), SQLITE_OK);
  sqlite3_busy_timeout(h, 10000);
  ck_assert_int_eq(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  sleep(4); /* the next batch is measured and waits to commit */
  double t0 = tn_now();
  kill(d.pid, SIGTERM);
  int st = wait_exit(d.pid, 30);
  double took = tn_now() - t0;
  fprintf(stderr, "sigterm_within_stop_timeout: exited (status %d) %.3f s after SIGTERM\n", st, took);
  ck_assert_int_eq(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(h);
  ck_assert_msg(st == 1, "exit status %d: %s", st, read_log(&d));
  ck_assert_msg(took < 4, "SIGTERM with --stop-timeout 1 took %.1f s", took);
  wait_log(&d, "running jobs did not stop in time", 0.1);
  db_job_state_t state;
  job_row(d.db, s.job, &state);
  ck_assert_int_eq(state, DB_JOB_RUNNING); /* resumes */

  start_daemon(&d, extra);
  wait_log(&d, "resuming an unfinished job", 10);
  cl_open(&c, d.sock);
  char s2[32];
  took = timed_cancel(&c, s.job, s2, sizeof s2);
  ck_assert_str_eq(s2, "cancelled");
  ck_assert_msg(took < 3, "tune.cancel took %.2f s", took);
  cl_close(&c);
  t0 = tn_now();
  kill(d.pid, SIGTERM);
  st = wait_exit(d.pid, 30);
  ck_assert_msg(st == 0 && tn_now() - t0 < 4, "status %d after %.1f s", st, tn_now() - t0);
  job_row(d.db, s.job, &state);
  ck_assert_int_eq(state, DB_JOB_CANCELLED);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), 2);
  rm_tree(d.dir);
}
END_TEST

/* Clients that write half a request and vanish, again and again while a
 * job tunes: the others are served, the job completes. */
START_TEST(client_vanishes_mid_message) {
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  submitted_t s = submit(&c, 8, 4);
  static const char *const halves[] = {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.in",
                                       "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tune.submit\",\"params\":{\"workl",
                                       "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tune.cancel\",\"params\":{\"job\":",
                                       "{\"jsonrpc\""};
  for (int i = 0; i < 40; i++) {
    client_t v;
    cl_open(&v, d.sock);
    cl_write(&v, halves[i % 4], strlen(halves[i % 4]));
    if (i % 2) shutdown(v.fd, SHUT_WR); /* half-closed, then gone */
    cl_close(&v);
    cJSON *r = rpc(&c, "server.info", NULL);
    ck_assert_int_eq((int)num(result(r), "pid"), d.pid);
    cJSON_Delete(r);
  }
  /* and their connections are gone: ours is the only one left */
  int conns = -1;
  for (int i = 0; i < 100 && conns != 1; i++, usleep(20000)) {
    cJSON *r = rpc(&c, "server.info", NULL);
    conns = (int)num(result(r), "connections");
    cJSON_Delete(r);
  }
  ck_assert_int_eq(conns, 1);
  cJSON *r = watch(&c, s.job);
  if (strcmp(str(result(r), "state"), "done") != 0) cJSON_Delete(wait_progress(&c, s.job, 1 << 30, 240));
  cJSON_Delete(r);
  r = status(&c, s.job);
  ck_assert_str_eq(str(result(r), "state"), "done");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 8);
  cJSON_Delete(r);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_eq(count_records(d.db, s.hash, true), 8);
  rm_tree(d.dir);
}
END_TEST

/* ---- two daemons, one PostgreSQL database ------------------------------------------------- */

static pgt_server_t pg; /* started by main when the pg_ cases run */

static void start_named(daemon_t *d, const char *url, const char *name) {
  ck_assert_uint_lt(strlen(url), sizeof d->db);
  snprintf(d->db, sizeof d->db, "%s", url);
  start_daemon(d, (const char *const[]){"--name", name, NULL});
}

/* Two daemons on this machine (sockets, worker pools and logs of their
 * own) share one PostgreSQL database: a job submitted to a is tuned by a;
 * a dies by SIGKILL mid-job without losing a committed record; b never
 * takes a's job; a restarted under its name resumes it; b answers for a's
 * job, records, best and kernel through tunectl. */
START_TEST(pg_two_daemons) {
  daemon_t a, b, a2;
  tmp_daemon(&a), tmp_daemon(&b), tmp_daemon(&a2);
  char url[128];
  ck_assert_msg(pgt_createdb(&pg, "shared", url, sizeof url) == 0, "%s", pg.skip);
  start_named(&a, url, "host-a");

  /* one daemon per name */
  pid_t dup = spawn_tuned(&a2, (const char *const[]){"--target", "cpu", "--db", url, "--socket", a2.sock, "--name",
                                                    "host-a", NULL}, NULL);
  ck_assert_int_eq(wait_exit(dup, 60), 1);
  char *log = read_log(&a2);
  ck_assert_msg(strstr(log, "another tuned named 'host-a' is using this database"), "%s", log);
  ck_assert_msg(!strstr(log, "password"), "%s", log);
  free(log);

  submitted_t s;
  int notified = kill_mid_job(&a, &s);
  start_named(&b, url, "host-b"); /* after a's death: it joins a's job (its queued batches) */
  db_t *db = NULL;
  tn_err_t err = {0};
  tn_arena_t *ar = tn_arena_new();
  db_job_t row;
  ck_assert_msg(db_open(url, &db, &err) == 0 && db_job_get(db, s.job, &row, ar, &err) == 0, "%s", err.msg);
  ck_assert_str_eq(row.owner, "host-a"); /* a's to resume, nobody else's */
  db_close(db);
  tn_arena_free(ar);
  client_t ca, cb;

  /* b sees a's job as the database has it */
  cl_open(&cb, b.sock);
  cJSON *r = status(&cb, s.job);
  ck_assert_str_ne(str(result(r), "state"), "failed");
  ck_assert_int_ge((int)num(result(r), "trials_done"), notified);
  cJSON_Delete(r);

  /* a, restarted under its name, resumes its job, and with b completes it */
  start_named(&a, url, "host-a");
  cl_open(&ca, a.sock);
  r = watch(&ca, s.job);
  if (strcmp(str(result(r), "state"), "done") != 0) cJSON_Delete(wait_progress(&ca, s.job, 1 << 30, 240));
  cJSON_Delete(r);
  cl_close(&ca);
  r = status(&cb, s.job);
  ck_assert_str_eq(str(result(r), "state"), "done");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 16);
  cJSON_Delete(r);
  cl_close(&cb);
  /* Every trial committed a record, except one whose trace the other daemon
   * had measured (both sampled it at once from the same records; the trial
   * stays, without a record of its own): none was lost to the kill. */
  ck_assert_msg(db_open(url, &db, &err) == 0, "%s", err.msg);
  db_job_trials_t trials;
  ck_assert_msg(db_job_trials_get(db, s.job, &trials, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(trials.n, 16);
  size_t shared_traces = 0;
  for (size_t i = 0; i < trials.n; i++) shared_traces += trials.items[i].record_id == 0;
  db_job_trials_free(&trials);
  db_close(db);
  if (shared_traces) fprintf(stderr, "pg_two_daemons: %zu trial(s) measured a trace the other daemon had\n", shared_traces);
  ck_assert_uint_le(shared_traces, 4);
  ck_assert_uint_eq(count_records(url, s.hash, true), 16 - shared_traces);

  /* tunectl through b: the records, the best one and its kernel */
  const char *tunectl = getenv("TUNECTL");
  ck_assert_msg(tunectl && *tunectl, "set TUNECTL (meson test does)");
  char cmd[1024];
  tu_run_t *out = malloc(sizeof *out);
  snprintf(cmd, sizeof cmd, "%s best %s --target cpu --json --socket %s", tunectl, s.hash, b.sock);
  tu_run_capture(cmd, out);
  ck_assert_msg(out->status == 0 && strstr(out->out, "\"median_secs\"") && strstr(out->out, s.hash), "%s\n%s",
                out->out, out->err);
  snprintf(cmd, sizeof cmd, "%s kernel %s --target cpu --emit source --socket %s", tunectl, s.hash, b.sock);
  tu_run_capture(cmd, out);
  ck_assert_msg(out->status == 0 && strstr(out->out, "void"), "%s\n%s", out->out, out->err);
  snprintf(cmd, sizeof cmd, "%s records %s --target cpu --socket %s", tunectl, s.hash, b.sock);
  tu_run_capture(cmd, out);
  ck_assert_msg(out->status == 0, "%s\n%s", out->out, out->err);
  free(out);
  stop_daemon(&a);
  stop_daemon(&b);
  log = read_log(&b);
  ck_assert_msg(!strstr(log, "resuming an unfinished job"), "b resumed a's job as its own: %s", log);
  ck_assert_msg(strstr(log, "db=\"postgresql:///shared"), "%s", log);
  free(log);
  rm_tree(a.dir), rm_tree(b.dir), rm_tree(a2.dir);
}
END_TEST

/* ---- the shared job queue: three daemons, one job ------------------------------------------ */

/* The job's batches as the database has them. */
static db_batches_t batches_of(const char *url, int job) {
  db_t *db = NULL;
  tn_err_t err = {0};
  db_batches_t bs;
  ck_assert_msg(db_open(url, &db, &err) == 0 && db_job_batches_get(db, job, &bs, &err) == 0, "%s", err.msg);
  db_close(db);
  return bs;
}

/* Waits until `holder` holds a lease on one of the job's batches; its index. */
static int64_t wait_leased_by(const char *url, int job, const char *holder, double timeout_s) {
  double t0 = tn_now();
  for (;;) {
    db_batches_t bs = batches_of(url, job);
    int64_t got = -1;
    for (size_t i = 0; i < bs.n && got < 0; i++)
      if (bs.items[i].state == DB_BATCH_LEASED && bs.items[i].trials > 0 && strcmp(bs.items[i].leased_by, holder) == 0)
        got = bs.items[i].batch;
    db_batches_free(&bs);
    if (got >= 0) return got;
    ck_assert_msg(tn_now() - t0 < timeout_s * tu_slowdown(), "%s leased no batch of job %d in %.0f s", holder, job,
                  timeout_s);
    usleep(50 * 1000);
  }
}

/* Every trial of the job counted once: trials 1..n in job_trials, every
 * batch done with the trials it planned, by one of `holders`. */
static void check_counted_once(const char *url, int job, int64_t n, const char *const *holders) {
  db_t *db = NULL;
  tn_err_t err = {0};
  db_job_trials_t ts;
  ck_assert_msg(db_open(url, &db, &err) == 0 && db_job_trials_get(db, job, &ts, &err) == 0, "%s", err.msg);
  ck_assert_msg(db_check(db, &err) == 0, "db_check: %s", err.msg);
  db_close(db);
  ck_assert_int_eq((int64_t)ts.n, n);
  for (size_t i = 0; i < ts.n; i++) ck_assert_int_eq(ts.items[i].trial, (int64_t)i + 1);
  db_job_trials_free(&ts);
  db_batches_t bs = batches_of(url, job);
  for (size_t i = 0; i < bs.n; i++) {
    const db_batch_t *b = &bs.items[i];
    ck_assert_msg(b->state == DB_BATCH_DONE, "batch %lld is %s", (long long)b->batch, db_batch_state_name(b->state));
    ck_assert_int_eq(b->trials_done, b->trials);
    bool known = false;
    for (int h = 0; holders[h]; h++) known |= strcmp(b->leased_by, holders[h]) == 0;
    ck_assert_msg(known, "batch %lld done by %s", (long long)b->batch, b->leased_by);
  }
  db_batches_free(&bs);
}

/* All of d's log (read_log stops at 64 KiB; a debug log of a job is longer). */
static char *whole_log(const daemon_t *d) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  if (tn_read_file(d->log, 64 << 20, &text, &len, &err) != 0) return strdup("");
  return text;
}

static bool log_has(const daemon_t *d, const char *what) {
  char *log = whole_log(d);
  bool has = strstr(log, what) != NULL;
  free(log);
  return has;
}

/* The most records a cost model of d's warm-started from ("cost model: N
 * samples from M records of target ..."). */
static long most_model_records(const daemon_t *d) {
  char *log = whole_log(d);
  long most = 0;
  for (const char *p = log; (p = strstr(p, "cost model: ")) != NULL; p++) {
    long samples, records;
    if (sscanf(p, "cost model: %ld samples from %ld records", &samples, &records) == 2 && records > most)
      most = records;
  }
  free(log);
  return most;
}

/* Whether a line of d's log says `what` of job `job`. */
static bool log_line_has(const daemon_t *d, const char *what, int job) {
  char *log = whole_log(d), tag[32];
  snprintf(tag, sizeof tag, "job=%d", job);
  bool has = false;
  for (char *line = strtok(log, "\n"); line && !has; line = strtok(NULL, "\n")) {
    const char *t = strstr(line, tag);
    has = strstr(line, what) && t && !isdigit((unsigned char)t[strlen(tag)]);
  }
  free(log);
  return has;
}

/* Three daemons (own sockets, worker pools and names) on one database: a
 * and b of target cpu, c of cpu/local.  A job submitted to a is measured
 * by a and b batch by batch; b is SIGKILLed holding a batch's lease, which
 * lapses and a takes over; the job completes with every trial counted
 * once and every record stored once; c never touches the job.  A second
 * job, cancelled through c, stops a within seconds. */
START_TEST(pg_queue_three_daemons) {
  daemon_t a, b, c;
  tmp_daemon(&a), tmp_daemon(&b), tmp_daemon(&c);
  char url[128];
  ck_assert_msg(pgt_createdb(&pg, "queue3", url, sizeof url) == 0, "%s", pg.skip);
  snprintf(a.db, sizeof a.db, "%s", url), snprintf(b.db, sizeof b.db, "%s", url), snprintf(c.db, sizeof c.db, "%s", url);
  start_daemon(&a, (const char *const[]){"--name", "q-a", "--lease", "2", NULL});
  start_daemon(&b, (const char *const[]){"--name", "q-b", "--lease", "2", NULL});
  start_daemon(&c, (const char *const[]){"--name", "q-c", "--lease", "2", "--target", "cpu/local", NULL});
  client_t ca;
  cl_open(&ca, a.sock);
  submitted_t s = submit(&ca, 24, 4); /* 6 batches of 4, then the last */
  cJSON_Delete(watch(&ca, s.job));

  /* b works on a's job; killed while it holds a batch */
  int64_t held = wait_leased_by(url, s.job, "q-b", 120);
  kill(b.pid, SIGKILL);
  ck_assert_int_eq(wait_exit(b.pid, 10), 128 + SIGKILL);
  b.pid = 0;

  cJSON *r = status(&ca, s.job);
  if (strcmp(str(result(r), "state"), "done") != 0) cJSON_Delete(wait_progress(&ca, s.job, 1 << 30, 170));
  cJSON_Delete(r);
  r = status(&ca, s.job);
  ck_assert_str_eq(str(result(r), "state"), "done");
  ck_assert_int_eq((int)num(result(r), "trials_done"), 24);
  cJSON_Delete(r);
  cl_close(&ca);

  /* b's batch went to a once its lease lapsed */
  db_batches_t bs = batches_of(url, s.job);
  ck_assert_int_eq((int)bs.n, 7);
  ck_assert_int_ge(bs.items[held].leases, 2);
  ck_assert_str_eq(bs.items[held].leased_by, "q-a");
  db_batches_free(&bs);
  check_counted_once(url, s.job, 24, (const char *const[]){"q-a", "q-b", NULL});
  ck_assert_uint_ge(count_records(url, s.hash, true), 1);
  ck_assert_msg(log_has(&b, "batch done") || log_has(&b, "batch leased"), "b never worked on the job");
  /* a's batches warm-started its cost model from the shared records (b's among them) */
  ck_assert_int_gt(most_model_records(&a), 4);

  /* a job that a measures, cancelled through c (which does not run it): a stops */
  cl_open(&ca, a.sock);
  submitted_t s2 = submit(&ca, 400, 4);
  wait_leased_by(url, s2.job, "q-a", 120);
  client_t cc;
  cl_open(&cc, c.sock);
  char p[64];
  snprintf(p, sizeof p, "{\"job\":%d}", s2.job);
  r = rpc(&cc, "tune.cancel", p);
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  cJSON_Delete(r);
  cl_close(&cc);
  double t0 = tn_now();
  while (!log_line_has(&a, "job left to the other daemons", s2.job)) {
    ck_assert_msg(tn_now() - t0 < 60 * tu_slowdown(), "a still measures the cancelled job");
    usleep(100 * 1000);
  }
  r = status(&ca, s2.job);
  ck_assert_str_eq(str(result(r), "state"), "cancelled");
  ck_assert_int_lt((int)num(result(r), "trials_done"), 400);
  cJSON_Delete(r);
  cl_close(&ca);
  stop_daemon(&a);
  stop_daemon(&c);
  ck_assert_msg(!log_has(&c, "joining a shared job") && !log_has(&c, "batch leased"), "c took a batch of cpu");
  rm_tree(a.dir), rm_tree(b.dir), rm_tree(c.dir);
}
END_TEST

/* A fresh database `name` (url receives its URL) and two daemons of target
 * cpu on it, named PREFIX-a and PREFIX-b, with leases of 2 s. */
static void two_daemons_on(const char *name, const char *prefix, daemon_t *a, daemon_t *b, char *url, size_t size) {
  tmp_daemon(a), tmp_daemon(b);
  ck_assert_msg(pgt_createdb(&pg, name, url, size) == 0, "%s", pg.skip);
  snprintf(a->db, sizeof a->db, "%s", url), snprintf(b->db, sizeof b->db, "%s", url);
  char na[32], nb[32];
  snprintf(na, sizeof na, "%s-a", prefix), snprintf(nb, sizeof nb, "%s-b", prefix);
  start_daemon(a, (const char *const[]){"--name", na, "--lease", "2", NULL});
  start_daemon(b, (const char *const[]){"--name", nb, "--lease", "2", NULL});
}

/* The database restarts (pg_ctl restart, every connection dropped) while
 * two daemons measure one job: their job threads ride it out (the failed
 * statements are tried again on new connections) and the job completes
 * with every trial counted once. */
START_TEST(pg_queue_db_restart) {
  daemon_t a, b;
  char url[128];
  two_daemons_on("queuerestart", "r", &a, &b, url, sizeof url);
  client_t ca;
  cl_open(&ca, a.sock);
  submitted_t s = submit(&ca, 24, 4);
  cJSON_Delete(watch(&ca, s.job));
  cJSON_Delete(wait_progress(&ca, s.job, 4, 120));
  wait_leased_by(url, s.job, "r-b", 120);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -m fast -w restart >/dev/null 2>&1", pg.bin, pg.dir);
  ck_assert_int_eq(pgt_sh(&pg, cmd), 0);

  cJSON *n = wait_progress(&ca, s.job, 1 << 30, 170);
  cJSON_Delete(n);
  cl_close(&ca);
  db_job_state_t state;
  db_job_t row = job_row(url, s.job, &state);
  ck_assert_msg(state == DB_JOB_DONE, "job %d is %s: %s", s.job, db_job_state_name(state), whole_log(&a));
  ck_assert_int_eq(row.trials_done, 24);
  check_counted_once(url, s.job, 24, (const char *const[]){"r-a", "r-b", NULL});
  ck_assert_uint_ge(count_records(url, s.hash, true), 1);
  /* the restart reached them: a statement on a dropped connection failed and was tried again */
  bool rode = false;
  const daemon_t *ds[] = {&a, &b};
  for (int i = 0; i < 2; i++)
    rode |= log_has(ds[i], "the database is away") || log_has(ds[i], "cannot renew a batch's lease");
  ck_assert_msg(rode, "no daemon saw the restart: %s", whole_log(&a));
  stop_daemon(&a);
  stop_daemon(&b);
  rm_tree(a.dir), rm_tree(b.dir);
}
END_TEST

/* Whether a job state is final. */
static bool final_state(const char *state) {
  return strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0;
}

/* ---- a daemon measures for its own target only --------------------------------------------- */

/* Fails if daemon d runs a process (a compiler, a build or measure worker:
 * any measurement); `why` names the moment. */
static void assert_no_children(const daemon_t *d, const char *why, int job) {
  pid_t pids[8];
  tu_cmdline_t cmds[8];
  int n = tu_children(d->pid, pids, cmds, 8);
  ck_assert_msg(n == 0, "%s: the daemon in %s runs `%s` during job %d", why, d->dir, cmds[0], job);
}

/* Reads c's notifications of the job until its end, checking every 20 ms
 * that daemon `idle` starts no process; the last job object (caller
 * frees). */
static cJSON *follow_while_idle(client_t *c, int job, const daemon_t *idle, double timeout_s) {
  double t0 = tn_now();
  for (;;) {
    ck_assert_msg(tn_now() - t0 < timeout_s * tu_slowdown(), "job %d did not end within %.0f s", job, timeout_s);
    assert_no_children(idle, "another target's job", job);
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (c->len == 0 && poll(&p, 1, 20) == 0) continue;
    cJSON *n = cl_recv(c, 60);
    ck_assert_msg(n, "watch connection closed");
    const cJSON *m = cJSON_GetObjectItem(n, "method"), *params = cJSON_GetObjectItem(n, "params");
    if (m && strcmp(m->valuestring, "tune.progress") == 0 && (int)num(params, "job") == job &&
        final_state(str(params, "state"))) {
      cJSON *end = cJSON_Duplicate(params, true);
      cJSON_Delete(n);
      return end;
    }
    cJSON_Delete(n);
  }
}

/* Waits until d has no process left (a job's worker exiting). */
static void wait_no_children(const daemon_t *d) {
  pid_t pids[8];
  tu_cmdline_t cmds[8];
  double t0 = tn_now();
  while (tu_children(d->pid, pids, cmds, 8) > 0) {
    ck_assert_msg(tn_now() - t0 < 30 * tu_slowdown(), "the daemon in %s still runs `%s`", d->dir, cmds[0]);
    usleep(50 * 1000);
  }
}

/* Two daemons of two targets on one database (issue 33: an opencl daemon
 * took a cpu job submitted through it and built its candidates).  A cpu
 * job submitted through c (opencl/pocl-cpu where PoCL is usable, else
 * cpu/local) while no cpu daemon runs stays queued, unplanned, and c starts
 * no process; a, of cpu, started later, finds it and measures every batch,
 * the re-measure and the unscheduled program; c's watcher sees it through
 * to `done`, and c never starts a process.  The other way round: c's
 * target's job submitted through a is c's alone, and a stays idle. */
START_TEST(pg_queue_own_target) {
  daemon_t a, c;
  tmp_daemon(&a), tmp_daemon(&c);
  char url[128];
  ck_assert_msg(pgt_createdb(&pg, "owntarget", url, sizeof url) == 0, "%s", pg.skip);
  snprintf(a.db, sizeof a.db, "%s", url), snprintf(c.db, sizeof c.db, "%s", url);
  const char *other = "opencl/pocl-cpu";
  int st;
  if (!launch_daemon(&c, (const char *const[]){"--name", "o-c", "--lease", "2", "--target", other, NULL}, NULL, &st)) {
    other = "cpu/local";
    start_daemon(&c, (const char *const[]){"--name", "o-c", "--lease", "2", "--target", other, NULL});
  }
  client_t cc;
  cl_open(&cc, c.sock);
  submitted_t s = submit_on(&cc, 32, "cpu", 8, 4);
  cJSON *r = watch(&cc, s.job);
  ck_assert_str_eq(str(result(r), "state"), "queued");
  cJSON_Delete(r);
  for (double t0 = tn_now(); tn_now() - t0 < 3;) { /* several polls of c */
    assert_no_children(&c, "no cpu daemon yet", s.job);
    usleep(20 * 1000);
  }
  db_batches_t bs = batches_of(url, s.job);
  ck_assert_int_eq((int)bs.n, 0); /* nobody planned it */
  db_batches_free(&bs);

  start_daemon(&a, (const char *const[]){"--name", "o-a", "--lease", "2", NULL});
  cJSON *end = follow_while_idle(&cc, s.job, &c, 240);
  ck_assert_str_eq(str(end, "state"), "done");
  ck_assert_int_eq((int)num(end, "trials_done"), 8);
  cJSON_Delete(end);
  cl_close(&cc);
  check_counted_once(url, s.job, 8, (const char *const[]){"o-a", NULL}); /* the last batch too: re-measure, baseline */
  ck_assert_msg(!log_line_has(&c, "batch leased", s.job) && !log_line_has(&c, "job started", s.job),
                "c worked on a cpu job");
  ck_assert_msg(log_line_has(&c, "job left to the daemons of its target", s.job), "c's log says nothing of job %d",
                s.job);
  ck_assert_uint_ge(count_records(url, s.hash, true), 1);

  wait_no_children(&a);
  client_t ca;
  cl_open(&ca, a.sock);
  submitted_t s2 = submit_on(&ca, 32, other, 8, 4);
  cJSON_Delete(watch(&ca, s2.job));
  end = follow_while_idle(&ca, s2.job, &a, 300);
  ck_assert_msg(strcmp(str(end, "state"), "done") == 0, "job %d on %s: %s", s2.job, other, cJSON_PrintUnformatted(end));
  cJSON_Delete(end);
  cl_close(&ca);
  check_counted_once(url, s2.job, 8, (const char *const[]){"o-c", NULL});
  ck_assert_msg(!log_line_has(&a, "batch leased", s2.job), "a worked on a job of %s", other);
  stop_daemon(&a);
  stop_daemon(&c);
  rm_tree(a.dir), rm_tree(c.dir);
}
END_TEST

/* ---- the database away ------------------------------------------------------------------------ */

/* Runs SQL on the test server as its superuser (its rows dropped). */
static void pg_admin(const char *sql) { ck_assert_msg(pgt_admin(&pg, sql) == 0, "%s", pg.skip); }

static void pg_ctl(const char *what) {
  ck_assert_msg(pgt_ctl(&pg, what) == 0, "pg_ctl %s failed (see %s/server.log)", what, pg.dir);
}

/* The job's notifications on c for `secs` seconds (none may be final),
 * answering nothing; the connection must stay open. */
static void drain_for(client_t *c, int job, double secs) {
  for (double t0 = tn_now(); tn_now() - t0 < secs;) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (c->len == 0 && poll(&p, 1, 100) == 0) continue;
    cJSON *n = cl_recv(c, 10);
    ck_assert_msg(n, "the watch connection closed while the database was away");
    const cJSON *params = cJSON_GetObjectItem(n, "params");
    if (params && (int)num(params, "job") == job)
      ck_assert_msg(!final_state(str(params, "state")), "job %d ended while the database was away: %s", job,
                    cJSON_PrintUnformatted(params));
    cJSON_Delete(n);
  }
}

/* Issue 33: two daemons measure one job while PostgreSQL restarts, every
 * backend is terminated, and the server is down for a minute: the daemons
 * live on, the job pauses (never reported failed) and resumes, and ends
 * done with every trial counted once; `tunectl watch` through the daemon
 * it was submitted to, and a tune.watch there, follow it to its end. */
START_TEST(pg_queue_db_outage) {
  daemon_t a, b;
  char url[128];
  two_daemons_on("outage", "x", &a, &b, url, sizeof url);
  client_t ca;
  cl_open(&ca, a.sock);
  submitted_t s = submit(&ca, 32, 4);
  cJSON_Delete(watch(&ca, s.job));
  const char *tunectl = getenv("TUNECTL");
  ck_assert_msg(tunectl && *tunectl, "set TUNECTL (meson test does)");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s watch %d --json --socket %s 2>&1", tunectl, s.job, a.sock);
  FILE *tw = popen(cmd, "r");
  ck_assert_ptr_nonnull(tw);
  cJSON_Delete(wait_progress(&ca, s.job, 4, 120));
  wait_leased_by(url, s.job, "x-b", 120);

  pg_ctl("restart");
  cJSON_Delete(wait_progress(&ca, s.job, 12, 120));
  pg_admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'outage'");
  cJSON_Delete(wait_progress(&ca, s.job, 16, 120));
  pg_ctl("stop");
  drain_for(&ca, s.job, 60);
  pg_ctl("start");

  cJSON *n = wait_progress(&ca, s.job, 1 << 30, 240);
  ck_assert_msg(strcmp(str(cJSON_GetObjectItem(n, "params"), "state"), "done") == 0, "job %d: %s", s.job,
                cJSON_PrintUnformatted(n));
  ck_assert_int_eq((int)num(cJSON_GetObjectItem(n, "params"), "trials_done"), 32);
  cJSON_Delete(n);
  cl_close(&ca);
  /* tunectl watch ended too, with the job's end */
  struct pollfd p = {.fd = fileno(tw), .events = POLLIN};
  char out[1 << 16];
  size_t len = 0;
  for (double t0 = tn_now(); tn_now() - t0 < 30 * tu_slowdown();) {
    if (poll(&p, 1, 1000) <= 0) continue;
    ssize_t got = read(fileno(tw), out + len, sizeof out - 1 - len);
    if (got <= 0) break;
    len += (size_t)got;
    if (len == sizeof out - 1) len = 0; /* only the end matters */
  }
  out[len] = 0;
  int wst = pclose(tw);
  ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "tunectl watch: status %d: %s", wst, out);
  ck_assert_msg(strstr(out, "\"state\":\"done\""), "%s", out);

  db_job_state_t state;
  db_job_t row = job_row(url, s.job, &state);
  ck_assert_int_eq(state, DB_JOB_DONE);
  ck_assert_int_eq(row.trials_done, 32);
  check_counted_once(url, s.job, 32, (const char *const[]){"x-a", "x-b", NULL});
  ck_assert_uint_ge(count_records(url, s.hash, true), 1);
  const daemon_t *ds[] = {&a, &b};
  bool paused = false;
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(!log_has(ds[i], "state=failed"), "a job failed: %s", whole_log(ds[i]));
    paused |= log_has(ds[i], "the database is away");
    ck_assert_int_eq(kill(ds[i]->pid, 0), 0); /* alive */
  }
  ck_assert_msg(paused, "no daemon saw the database away: %s", whole_log(&a));
  stop_daemon(&a);
  stop_daemon(&b);
  rm_tree(a.dir), rm_tree(b.dir);
}
END_TEST

/* Daemons started at the same instant on a fresh database all come up
 * (the schema made once: a second one used to die on "relation already
 * exists"). */
START_TEST(pg_start_together) {
  enum { N = 4 };
  for (int round = 0; round < 2; round++) {
    daemon_t d[N];
    char url[128];
    ck_assert_msg(pgt_createdb(&pg, "together", url, sizeof url) == 0, "%s", pg.skip);
    char names[N][16];
    for (int i = 0; i < N; i++) {
      tmp_daemon(&d[i]);
      snprintf(d[i].db, sizeof d[i].db, "%s", url);
      snprintf(names[i], sizeof names[i], "t-%d", i);
    }
    for (int i = 0; i < N; i++)
      d[i].pid = spawn_tuned(&d[i], (const char *const[]){"--target", "cpu", "--db", url, "--socket", d[i].sock,
                                                          "--name", names[i], NULL}, NULL);
    for (int i = 0; i < N; i++) {
      double t0 = tn_now();
      int fd;
      while ((fd = try_connect(d[i].sock)) < 0) {
        int st;
        ck_assert_msg(waitpid(d[i].pid, &st, WNOHANG) != d[i].pid, "round %d: daemon %d exited (status %d): %s",
                      round, i, st, read_log(&d[i]));
        ck_assert_msg(tn_now() - t0 < 60 * tu_slowdown(), "daemon %d did not listen: %s", i, read_log(&d[i]));
        usleep(10 * 1000);
      }
      close(fd);
    }
    for (int i = 0; i < N; i++) {
      stop_daemon(&d[i]);
      rm_tree(d[i].dir);
    }
  }
}
END_TEST

/* ---- SQLite I/O faults (tuned's test VFS, db/sqlite_fault.c) ------------------------------------ */

typedef struct vfs_counts {
  long long open, write, sync, failed;
} vfs_counts_t;

/* Whether an error message says what SQLite's fault was. */
static bool names_io_fault(const char *msg) {
  return strstr(msg, "disk I/O error") || strstr(msg, "database or disk is full") ||
         strstr(msg, "unable to open database file");
}

/* The job's end: its trials as its last notifications said (committed
 * batches), and its final status. */
static cJSON *follow_job(client_t *c, int job, int *notified) {
  cJSON *w = watch(c, job);
  bool over = final_state(str(result(w), "state")); /* ended before the watch */
  cJSON_Delete(w);
  *notified = 0;
  while (!over) {
    cJSON *n = cl_recv(c, 300);
    ck_assert_msg(n, "watch connection closed");
    const cJSON *m = cJSON_GetObjectItem(n, "method"), *p = cJSON_GetObjectItem(n, "params");
    bool progress = m && strcmp(m->valuestring, "tune.progress") == 0;
    const char *state = progress ? str(p, "state") : "";
    if (progress && strcmp(state, "running") == 0 && num(p, "trials_done") > *notified)
      *notified = (int)num(p, "trials_done");
    over = final_state(state);
    cJSON_Delete(n);
  }
  return status(c, job);
}

/* One daemon under the fault spec (and, with_job, one 6-trial job): tuned
 * either refuses to start, with the fault in its message, or serves; the
 * job is done, or failed with the fault as its reason, or its submit is
 * refused with it; tuned still answers and exits by itself at SIGTERM; and
 * the database, reopened without faults, passes its integrity check and
 * holds every record whose batch was reported committed.  Returns the
 * VFS's counts. */
static vfs_counts_t fault_run(const char *spec, bool with_job) {
  daemon_t d;
  tmp_daemon(&d);
  char fenv[96], cenv[192], counts[128];
  snprintf(counts, sizeof counts, "%s/vfs-counts", d.dir);
  snprintf(fenv, sizeof fenv, "TUNED_TEST_SQLITE_FAULT=%s", spec);
  snprintf(cenv, sizeof cenv, "TUNED_TEST_SQLITE_FAULT_COUNTS=%s", counts);
  const char *env[] = {fenv, cenv, NULL}, *quiet[] = {"--log-level", "info", NULL};
  char outcome[600] = "";
  int st, committed = 0;
  char hash[TN_ID_SIZE] = "";
  if (!launch_daemon(&d, quiet, env, &st)) {
    char *log = read_log(&d);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "%s: tuned ended with wait status %d at start: %s", spec,
                  st, log);
    ck_assert_msg(names_io_fault(log), "%s: tuned exited at start without naming the fault: %s", spec, log);
    snprintf(outcome, sizeof outcome, "refused to start (exit %d)", WEXITSTATUS(st));
    free(log);
  } else {
    client_t c;
    cl_open(&c, d.sock);
    cJSON *r = with_job ? rpc(&c, "tune.submit", matmul_submit(6, 2)) : NULL;
    if (r && error_code(r)) {
      ck_assert_msg(names_io_fault(error_message(r)), "%s: tune.submit failed without naming the fault: %s", spec,
                    error_message(r));
      snprintf(outcome, sizeof outcome, "tune.submit refused: %.400s", error_message(r));
    } else if (r) {
      int job = (int)num(result(r), "job");
      snprintf(hash, sizeof hash, "%s", str(result(r), "workload"));
      cJSON *s = follow_job(&c, job, &committed);
      const cJSON *j = result(s);
      const char *state = str(j, "state"), *error = cJSON_IsString(cJSON_GetObjectItem(j, "error")) ?
                                                        str(j, "error") : "";
      int done = (int)num(j, "trials_done");
      if (strcmp(state, "done") == 0) ck_assert_int_eq(done, 6);
      else ck_assert_msg(names_io_fault(error), "%s: job %s without naming the fault: '%s'", spec, state, error);
      committed = committed > done ? committed : done;
      snprintf(outcome, sizeof outcome, "job %s after %d trials%s%.400s", state, done, *error ? ": " : "", error);
      cJSON_Delete(s);
    }
    cJSON_Delete(r);
    cJSON *info = rpc(&c, "server.info", NULL); /* still serving */
    result(info);
    cJSON_Delete(info);
    cl_close(&c);
    kill(d.pid, SIGTERM);
    st = wait_exit(d.pid, 120);
    ck_assert_msg(st >= 0 && st < 128, "%s: tuned ended with status %d after SIGTERM: %s", spec, st, read_log(&d));
  }
  /* reopened without faults: intact, and nothing reported committed is lost */
  size_t n = count_records(d.db, hash[0] ? hash : NULL, true);
  ck_assert_msg(n >= (size_t)committed, "%s: %zu records in the database, %d reported committed", spec, n, committed);
  vfs_counts_t k = {0};
  FILE *f = fopen(counts, "r");
  ck_assert_msg(f, "%s: tuned left no VFS counts", spec);
  ck_assert_int_eq(fscanf(f, "open %lld write %lld sync %lld failed %lld", &k.open, &k.write, &k.sync, &k.failed), 4);
  fclose(f);
  fprintf(stderr, "sqlite_faults %-16s %lld opens, %lld writes, %lld syncs, %lld failed: %s\n", spec, k.open, k.write,
          k.sync, k.failed, outcome);
  rm_tree(d.dir);
  return k;
}

/* SQLite failing the Nth open, write or fsync, with SQLITE_IOERR or
 * SQLITE_FULL, once or from then on: N swept over the start and over a
 * job's commits (positions from a first run that only counts). */
START_TEST(sqlite_faults) {
  if (tu_slowdown() > 1) { /* under valgrind: some 20 daemons and 8 jobs would take most of an hour */
    fprintf(stderr, "sqlite_faults: skipped in a slowed-down run (TUNED_TEST_SLOWDOWN)\n");
    return;
  }
  vfs_counts_t idle = fault_run("write:0", false), job = fault_run("write:0", true);
  ck_assert_int_eq(idle.failed + job.failed, 0);
  ck_assert_msg(job.write > idle.write, "the job wrote nothing?");
  fault_run("open:1", false);
  fault_run("write:1:full", false);
  char spec[64];
  /* the fsyncs of a new database's first transactions: one failed left it
   * in rollback mode without a word, and the readers then refused it with
   * "PRAGMA journal_mode: got 'delete', need 'wal'" */
  for (int k = 1; k <= 4; k++) {
    snprintf(spec, sizeof spec, "sync:%d", k);
    fault_run(spec, false);
  }
  /* a job's writes vary from run to run (336 to 384 seen for the same job:
     WAL frames of records and of the cost model's blob); a position the
     run never reached injected nothing and says so, and most must hit */
  int hit = 0;
  for (int k = 1; k <= 4; k++) {
    long long at = idle.write + (job.write - idle.write) * k / 5;
    snprintf(spec, sizeof spec, "write:%lld%s:%s", at, k % 2 ? "" : "+", k <= 2 ? "ioerr" : "full");
    vfs_counts_t got = fault_run(spec, true);
    ck_assert_msg(got.failed >= 1 || got.write < at, "%s: %lld writes, none failed", spec, got.write);
    hit += got.failed >= 1;
  }
  ck_assert_msg(hit >= 3, "only %d of 4 write faults were reached", hit);
  for (int k = 1; k <= 2; k++) { /* WAL with synchronous=NORMAL: fsyncs at the start and at checkpoints */
    snprintf(spec, sizeof spec, "sync:%lld%s", job.sync * k / 3 + 1, k == 2 ? "+" : "");
    ck_assert_int_ge(fault_run(spec, true).failed, 1);
  }
  if (job.open > idle.open) { /* connections opened while the job runs */
    snprintf(spec, sizeof spec, "open:%lld+", idle.open + 1);
    ck_assert_int_ge(fault_run(spec, true).failed, 1);
  }
}
END_TEST

/* ---- workers and build processes killed at random moments -------------------------------- */

/* Records of a workload whose error blames a SIGKILL on the candidate. */
static int blamed_kills(const char *db_path, const char *hash) {
  db_t *db;
  tn_err_t err = {0};
  ck_assert_msg(db_open(db_path, &db, &err) == 0, "%s", err.msg);
  db_query_t q = db_query_all();
  q.workload_hash = hash;
  db_records_t rs;
  ck_assert_int_eq(db_records_query(db, &q, &rs, &err), 0);
  int n = 0;
  for (size_t i = 0; i < rs.n; i++)
    if (rs.items[i].error && strstr(rs.items[i].error, "SIGKILL")) {
      fprintf(stderr, "random_kills: record %lld blames a SIGKILL: %s\n", (long long)rs.items[i].id,
              rs.items[i].error);
      n++;
    }
  db_records_free(&rs);
  db_close(db);
  return n;
}

/* A real tune (on PoCL where it is usable, so that both kinds of
 * tuned-worker run, else on the CPU with cc) while the test SIGKILLs the
 * daemon's workers, build processes and compilers at seeded random moments,
 * at most one per two batches (so that no candidate is hit twice): the
 * daemon lives on, the job completes with all its trials, no record blames
 * a kill on its candidate (each killed build or run ran again in a fresh
 * process), and the database is intact with no trace measured twice. */
START_TEST(random_kills) {
  enum { TRIALS = 12, BATCH = 2, MAX_KILLS = 3 };
  if (tu_slowdown() > 1) { /* under valgrind: a real 12-trial tune on PoCL takes too long for CI */
    fprintf(stderr, "random_kills: skipped in a slowed-down run (TUNED_TEST_SLOWDOWN)\n");
    return;
  }
  daemon_t d;
  tmp_daemon(&d);
  start_daemon(&d, NULL);
  client_t c;
  cl_open(&c, d.sock);
  const char *target = target_usable(&c, "opencl/pocl-cpu") ? "opencl/pocl-cpu" : "cpu";
  submitted_t s = submit_on(&c, 32, target, TRIALS, BATCH);
  tn_rng_t rng;
  tn_rng_seed(&rng, 16);
  int kills = 0, done = 0, next_kill_at = 0;
  double t0 = tn_now(), kill_time = -1;
  const char *state = "queued";
  cJSON *r = NULL;
  for (;;) {
    cJSON_Delete(r);
    r = status(&c, s.job);
    state = str(result(r), "state");
    done = (int)num(result(r), "trials_done");
    if (final_state(state)) break;
    ck_assert_msg(tn_now() - t0 < 600 * tu_slowdown(), "job %d still %s after 600 s", s.job, state);
    if (kills < MAX_KILLS && done >= next_kill_at && done < TRIALS) {
      if (kill_time < 0) kill_time = tn_now() + (double)tn_rng_below(&rng, 1000) / 1000.0; /* 0 to 1 s from now */
      pid_t pids[16];
      tu_cmdline_t cmds[16];
      int n = tn_now() >= kill_time ? tu_children(d.pid, pids, cmds, 16) : 0; /* workers, builders, compilers */
      if (n > 0) {
        int k = (int)tn_rng_below(&rng, (uint64_t)n);
        fprintf(stderr, "random_kills: at %d trials, SIGKILL to %d (%s)\n", done, (int)pids[k], cmds[k]);
        kill(pids[k], SIGKILL);
        kills++;
        next_kill_at = done + 2 * BATCH;
        kill_time = -1;
      }
    }
    usleep(20 * 1000);
  }
  ck_assert_msg(strcmp(state, "done") == 0, "job %s: %s", state,
                cJSON_IsString(cJSON_GetObjectItem(result(r), "error")) ? str(result(r), "error") : "");
  ck_assert_int_eq(done, TRIALS);
  cJSON_Delete(r);
  ck_assert_msg(kills >= 2, "only %d kills landed", kills);
  r = rpc(&c, "server.info", NULL); /* alive and serving */
  result(r);
  cJSON_Delete(r);
  cl_close(&c);
  stop_daemon(&d);
  ck_assert_uint_ge(count_records(d.db, s.hash, true), TRIALS); /* integrity, no trace twice */
  ck_assert_int_eq(blamed_kills(d.db, s.hash), 0);
  fprintf(stderr, "random_kills: %d kills on %s, job done with %d trials in %.1f s\n", kills, target, done,
          tn_now() - t0);
  rm_tree(d.dir);
}
END_TEST

#define ADD_CASE(s, fn, secs)          \
  do {                                 \
    TCase *tc_ = tcase_create(#fn);    \
    tcase_set_timeout(tc_, secs);      \
    tcase_add_test(tc_, fn);           \
    suite_add_tcase(s, tc_);           \
  } while (0)

static Suite *make_suite(void) {
  Suite *s = suite_create("daemon");
  ADD_CASE(s, info_and_targets, 60);
  ADD_CASE(s, refused_targets, 120);
  ADD_CASE(s, systemd_notify, 120);
  ADD_CASE(s, pocl_cache_beside_db, 120);
  ADD_CASE(s, socket_and_db_in_use, 60);
  ADD_CASE(s, xdg_defaults, 60);
  ADD_CASE(s, bad_input, 240);
  ADD_CASE(s, connections_per_process, 120);
  ADD_CASE(s, idle_connections, 120);
  ADD_CASE(s, submit_watch_best_kernel, 600);
  ADD_CASE(s, fnv_collision, 600);
  ADD_CASE(s, cancel_jobs, 600);
  ADD_CASE(s, restart_and_resume, 900);
  ADD_CASE(s, sigkill_while_tuning, 900);
  ADD_CASE(s, concurrent_clients, 600);
  ADD_CASE(s, reads_off_the_loop, 120);
  ADD_CASE(s, tuning_priority, 600);
  ADD_CASE(s, jobs_share_devices, 900);
  ADD_CASE(s, cancel_during_reference, 300);
  ADD_CASE(s, cancel_while_generating, 300);
  ADD_CASE(s, cancel_while_db_locked, 300);
  ADD_CASE(s, deadline_covers_reference, 300);
  ADD_CASE(s, sigterm_during_reference, 300);
  ADD_CASE(s, sigterm_within_stop_timeout, 300);
  ADD_CASE(s, client_vanishes_mid_message, 300);
  ADD_CASE(s, disk_full_fails_the_job, 900);
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_two_daemons, 900); /* not under valgrind: minutes of libpq */
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_queue_three_daemons, 300);
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_queue_db_restart, 300);
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_queue_own_target, 600);
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_queue_db_outage, 600);
  if (pg.running && tu_slowdown() == 1) ADD_CASE(s, pg_start_together, 300);
  ADD_CASE(s, sqlite_faults, 900);
  ADD_CASE(s, random_kills, 900);
  return s;
}

/* Starts the PostgreSQL server of the pg_ cases (unless CK_RUN_CASE picks
 * another case), or says why they are skipped. */
int main(void) {
  const char *only = getenv("CK_RUN_CASE");
  if (!only || strncmp(only, "pg_", 3) == 0) {
    if (pgt_start(&pg) != 0) printf("daemon: PostgreSQL cases SKIPPED: %s\n", pg.skip);
    fflush(stdout);
  }
  int rc = tu_run_suite(make_suite());
  pgt_stop(&pg);
  return rc;
}
