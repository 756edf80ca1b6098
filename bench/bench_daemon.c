/* bench_daemon.c — db.best round-trip latency (p50/p99/p99.9/max) through a
 * real tuned with 1, 8 and 64 concurrent clients, first while a tuning job
 * runs on the same daemon, then idle.  Clients either send back to back
 * (closed loop: the throughput limit) or each at a fixed rate (--rate: the
 * latency a polling client sees).  See README.md. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "common/common.h"
#include "tuned_config.h"

extern char **environ;

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "bench_daemon: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

static int usage(void) {
  fprintf(stderr, "usage: bench_daemon [--tuned PATH] [--requests N] [--trials N] [--rate R] [--clients LIST]\n"
                  "  N db.best requests per level, split over the clients (default 2000); the\n"
                  "  tuning job is workloads/matmul.tw at 64^3 on cpu with a budget of --trials\n"
                  "  (default 100000: it runs for the whole benchmark and is cancelled at the end).\n"
                  "  --rate R: each client sends R requests per second (open loop; latency counts\n"
                  "  from when a request was due, so a late send is not hidden); default: back to back.\n"
                  "  --clients LIST: the levels, comma-separated (default 1,8,64)\n");
  return 2;
}

/* ---- a line client ----------------------------------------------------------- */

typedef struct conn {
  int fd;
  char buf[1 << 16];
  size_t len;
  char *line;     /* the last line (malloc'ed) */
} conn_t;

static int conn_open(conn_t *c, const char *sock) {
  memset(c, 0, sizeof *c);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0) return 0;
  close(c->fd);
  return -1;
}

/* Reads one line into c->line; -1 at EOF. */
static int conn_line(conn_t *c) {
  tn_buf_t b;
  tn_buf_init(&b);
  for (;;) {
    char *nl = memchr(c->buf, '\n', c->len);
    size_t take = nl ? (size_t)(nl - c->buf) + 1 : c->len;
    tn_buf_putn(&b, c->buf, nl ? take - 1 : take);
    memmove(c->buf, c->buf + take, c->len - take);
    c->len -= take;
    if (nl) break;
    ssize_t n = read(c->fd, c->buf, sizeof c->buf);
    if (n <= 0) {
      tn_buf_free(&b);
      return -1;
    }
    c->len = (size_t)n;
  }
  free(c->line);
  c->line = tn_buf_take(&b);
  return 0;
}

/* Sends a request and reads lines until the answer (notifications skipped). */
static cJSON *call(conn_t *c, const char *method, const char *params) {
  char *req = malloc(strlen(params) + 128);
  int n = sprintf(req, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}\n", method, params);
  if (write(c->fd, req, (size_t)n) != n) die("write failed: %s", strerror(errno));
  free(req);
  for (;;) {
    if (conn_line(c) < 0) die("tuned closed the connection during %s", method);
    cJSON *j = cJSON_Parse(c->line);
    if (cJSON_GetObjectItem(j, "id")) {
      if (!cJSON_GetObjectItem(j, "result")) die("error answer: %s", c->line);
      return j;
    }
    cJSON_Delete(j);
  }
}

/* The measured call: the answer line is read whole but only its head is
 * checked (id and result), so that the client, on the same cores as the
 * daemon, spends no time parsing the 5-10 KB of record JSON. */
static size_t call_timed(conn_t *c, const char *method, const char *params) {
  char req[512];
  int n = snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}\n", method, params);
  if (write(c->fd, req, (size_t)n) != n) die("write failed: %s", strerror(errno));
  static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":";
  for (;;) {
    if (conn_line(c) < 0) die("tuned closed the connection during %s", method);
    if (strncmp(c->line, head, sizeof head - 1) == 0) return strlen(c->line);
    if (strstr(c->line, "\"id\":")) die("error answer: %s", c->line);
  }
}

/* ---- the daemon ----------------------------------------------------------------- */

static const char *tuned_path(const char *given) {
  static char path[4096];
  if (given) return given;
  if (getenv("TUNED")) return getenv("TUNED");
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
  if (n <= 0) return "tuned";
  path[n] = 0;
  char *slash = strrchr(path, '/');
  strcpy(slash + 1, "../daemon/tuned");
  return path;
}

static pid_t spawn(const char *tuned, const char *dir, const char *sock, const char *db) {
  char log[512];
  snprintf(log, sizeof log, "%s/tuned.log", dir);
  const char *argv[] = {"tuned", "--target", "cpu", "--socket", sock, "--db", db, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  if (posix_spawn(&pid, tuned, &fa, NULL, (char *const *)argv, environ) != 0) die("cannot start %s", tuned);
  posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 6000; i++) {
    conn_t c;
    if (conn_open(&c, sock) == 0) {
      close(c.fd);
      return pid;
    }
    usleep(10000);
  }
  die("tuned did not start (see %s)", log);
  return -1;
}

/* ---- the measurement ----------------------------------------------------------- */

typedef struct worker {
  const char *sock;
  const char *params;
  int n;
  double period;         /* seconds between requests (0: back to back) */
  double phase;          /* this client's offset into the period */
  double *lat;           /* n round trips, seconds */
  pthread_barrier_t *start;
  size_t bytes;          /* of the last answer */
} worker_t;

static void sleep_until(double t) {
  double d = t - tn_now();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
  nanosleep(&ts, NULL);
}

static void *client_main(void *p) {
  worker_t *w = p;
  conn_t c;
  if (conn_open(&c, w->sock) != 0) die("connect: %s", strerror(errno));
  for (int i = 0; i < 3; i++) { /* warm-up, and the answer checked once */
    cJSON *r = call(&c, "db.best", w->params);
    if (cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "records")) != 1)
      die("db.best answered without the record: %s", c.line);
    cJSON_Delete(r);
  }
  pthread_barrier_wait(w->start);
  double base = tn_now() + w->phase;
  for (int i = 0; i < w->n; i++) {
    /* open loop: the clock starts when the request was due, even if the
     * previous answer came late (no coordinated omission) */
    double t0 = w->period > 0 ? base + w->period * i : tn_now();
    sleep_until(t0);
    w->bytes = call_timed(&c, "db.best", w->params);
    w->lat[i] = tn_now() - t0;
  }
  close(c.fd);
  free(c.line);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *sorted, size_t n, double q) {
  return sorted[(size_t)(q * (double)(n - 1))];
}

static void level(const char *sock, const char *params, int clients, int total, double rate, const char *label) {
  int per = TN_MAX(total / clients, 20);
  worker_t *ws = calloc((size_t)clients, sizeof *ws);
  pthread_t *th = calloc((size_t)clients, sizeof *th);
  double *lat = calloc((size_t)clients * (size_t)per, sizeof *lat);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)clients + 1);
  for (int i = 0; i < clients; i++) {
    double period = rate > 0 ? 1.0 / rate : 0;
    ws[i] = (worker_t){sock, params, per, period, period * i / clients, lat + (size_t)i * (size_t)per, &start, 0};
    pthread_create(&th[i], NULL, client_main, &ws[i]);
  }
  pthread_barrier_wait(&start);
  double t0 = tn_now();
  for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
  double wall = tn_now() - t0;
  size_t n = (size_t)clients * (size_t)per;
  qsort(lat, n, sizeof *lat, cmp_double);
  printf("| %s | %d | %zu | %.3f | %.3f | %.3f | %.3f | %.0f | %zu |\n", label, clients, n, pct(lat, n, 0.5) * 1e3,
         pct(lat, n, 0.99) * 1e3, pct(lat, n, 0.999) * 1e3, lat[n - 1] * 1e3, (double)n / wall, ws[0].bytes);
  fflush(stdout);
  pthread_barrier_destroy(&start);
  free(ws);
  free(th);
  free(lat);
}

static char *submit_params(int trials) {
  char *text;
  size_t len;
  tn_err_t err = {0};
  if (tn_read_file(TUNED_SOURCE_ROOT "/workloads/matmul.tw", 1 << 20, &text, &len, &err)) die("%s", err.msg);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload", text);
  cJSON_AddStringToObject(p, "name", "matmul");
  cJSON *ov = cJSON_AddObjectToObject(p, "params");
  cJSON_AddNumberToObject(ov, "M", 64);
  cJSON_AddNumberToObject(ov, "N", 64);
  cJSON_AddNumberToObject(ov, "K", 64);
  cJSON_AddNumberToObject(p, "trials", trials);
  cJSON_AddNumberToObject(p, "batch_size", 16);
  free(text);
  char *s = cJSON_PrintUnformatted(p);
  cJSON_Delete(p);
  return s;
}

int main(int argc, char **argv) {
  const char *tuned = NULL;
  int total = 2000, trials = 100000;
  double rate = 0;
  int levels[16] = {1, 8, 64}, nlevels = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tuned") == 0 && i + 1 < argc) tuned = argv[++i];
    else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc) total = atoi(argv[++i]);
    else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc) trials = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc) rate = atof(argv[++i]);
    else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc) {
      nlevels = 0;
      for (char *s = argv[++i], *end; *s && nlevels < 16; s = *end ? end + 1 : end) {
        levels[nlevels] = (int)strtol(s, &end, 10);
        if (end == s || levels[nlevels] < 1 || levels[nlevels] > 1000 || (*end && *end != ',')) return usage();
        nlevels++;
      }
    } else return usage();
  }
  if (total < 1 || trials < 1 || rate < 0 || nlevels == 0) return usage();
  signal(SIGPIPE, SIG_IGN);
  char dir[] = "/tmp/tuned-bench-XXXXXX", sock[256], db[256];
  if (!mkdtemp(dir)) die("mkdtemp: %s", strerror(errno));
  snprintf(sock, sizeof sock, "%s/tuned.sock", dir);
  snprintf(db, sizeof db, "%s/tuned.db", dir);
  pid_t pid = spawn(tuned_path(tuned), dir, sock, db);

  conn_t c;
  if (conn_open(&c, sock) != 0) die("connect: %s", strerror(errno));
  char *sp = submit_params(trials);
  cJSON *r = call(&c, "tune.submit", sp);
  free(sp);
  int job = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "job")->valueint;
  char params[128], jp[64];
  snprintf(params, sizeof params, "{\"workload\":\"%s\",\"k\":1}",
           cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "workload")->valuestring);
  cJSON_Delete(r);
  snprintf(jp, sizeof jp, "{\"job\":%d}", job);
  /* The "running" rows start once the job's first batch is committed; the
   * "idle" rows follow after it is cancelled. */
  cJSON_Delete(call(&c, "tune.watch", jp));
  for (;;) { /* the first committed batch: records exist, the search is under way */
    if (conn_line(&c) < 0) die("%s", "tuned closed the watch connection");
    cJSON *n = cJSON_Parse(c.line);
    const cJSON *p = cJSON_GetObjectItem(n, "params");
    bool started = p && cJSON_GetObjectItem(p, "trials_done")->valueint > 0;
    const cJSON *state = cJSON_GetObjectItem(p, "state");
    if (!started && cJSON_IsString(state) && strcmp(state->valuestring, "running") != 0 &&
        strcmp(state->valuestring, "queued") != 0)
      die("the tuning job ended before its first batch (see tuned.log): %s", c.line);
    cJSON_Delete(n);
    if (started) break;
  }
  printf("db.best round trips (k=1, one record with its trace) through tuned on %s, %s\n", sock,
         rate > 0 ? "each client at a fixed rate" : "each client back to back");
  if (rate > 0) printf("(%g requests per second per client)\n", rate);
  printf("| tuning | clients | requests | p50 ms | p99 ms | p99.9 ms | max ms | req/s | answer bytes |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < nlevels; i++) level(sock, params, levels[i], total, rate, "running");
  cJSON *st = call(&c, "tune.cancel", jp);
  int done = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "result"), "trials_done")->valueint;
  cJSON_Delete(st);
  for (int i = 0; i < nlevels; i++) level(sock, params, levels[i], total, rate, "idle");
  printf("(the job measured %d candidates meanwhile, then was cancelled for the idle rows)\n", done);
  cJSON_Delete(call(&c, "server.shutdown", "{}"));
  close(c.fd);
  free(c.line);
  int status;
  waitpid(pid, &status, 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_daemon: could not remove %s\n", dir);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
