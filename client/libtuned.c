/* libtuned.c — the client library of the tuned daemon (tuned.h): a blocking
 * unix-socket connection that speaks JSON-RPC 2.0, one message per line. */
#include "tuned.h"

#include <cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The longest answer line accepted: exports and CUBINs can be large, but a
 * runaway peer must not make the client allocate without bound. */
#define MAX_ANSWER ((size_t)512 << 20)

struct tuned_client {
  int fd;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  int64_t next_id;
  double timeout_s;
  char *buf; /* received bytes not yet consumed */
  size_t len, cap;
};

/* Called with every notification that arrives while a call waits. */
typedef void (*notify_fn)(cJSON *msg, void *ctx);

static int set_err(tuned_error_t *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int set_err(tuned_error_t *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    err->rpc_code = 0;
    err->sys_errno = 0;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *xstrdup(const char *s) {
  return s ? strdup(s) : NULL;
}

/* ---- connection --------------------------------------------------------- */

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

int tuned_default_socket(char *buf, size_t size) {
  const char *s = env_nonempty("TUNED_SOCKET");
  const char *run = env_nonempty("XDG_RUNTIME_DIR"); /* relative values are ignored, as the daemon does */
  if (run && run[0] != '/') run = NULL;
  int n = s     ? snprintf(buf, size, "%s", s)
          : run ? snprintf(buf, size, "%s/tuned/tuned.sock", run)
                : snprintf(buf, size, "/tmp/tuned-%u/tuned.sock", (unsigned)getuid());
  return n < 0 || (size_t)n >= size ? TUNED_E_INVALID : 0;
}

int tuned_connect(const char *socket_path, tuned_client_t **out, tuned_error_t *err) {
  char path[4096];
  *out = NULL;
  if (socket_path && *socket_path) snprintf(path, sizeof path, "%s", socket_path);
  else if (tuned_default_socket(path, sizeof path) < 0)
    return set_err(err, TUNED_E_INVALID, "the default socket path is too long");
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path)
    return set_err(err, TUNED_E_INVALID, "socket path %s is %zu bytes; unix sockets allow at most %zu", path,
                   strlen(path), sizeof addr.sun_path - 1);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return set_err(err, TUNED_E_CONNECT, "cannot create a unix socket: %s", strerror(errno));
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    int e = errno;
    close(fd);
    set_err(err, TUNED_E_CONNECT, "cannot connect to %s: %s", path, strerror(e));
    if (err) err->sys_errno = e;
    return TUNED_E_CONNECT;
  }
  /* Only a daemon of ours (or root's) gets our workloads and serves us
   * kernels: whoever made the socket's directory (/tmp/tuned-$UID can be
   * made by anyone first), the process that answers is what counts. */
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    int e = errno;
    close(fd);
    return set_err(err, TUNED_E_CONNECT, "cannot tell who serves %s: %s", path, strerror(e));
  }
  if (cred.uid != getuid() && cred.uid != 0) {
    close(fd);
    return set_err(err, TUNED_E_CONNECT,
                   "refusing %s: the process serving it (pid %d) runs as uid %u, not as you (uid %u); "
                   "start your own daemon, or pass --socket/TUNED_SOCKET",
                   path, (int)cred.pid, (unsigned)cred.uid, (unsigned)getuid());
  }
  tuned_client_t *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return set_err(err, TUNED_E_NOMEM, "out of memory");
  }
  c->fd = fd;
  c->next_id = 1;
  memcpy(c->path, path, strlen(path) + 1);
  *out = c;
  return 0;
}

void tuned_close(tuned_client_t *c) {
  if (!c) return;
  close(c->fd);
  free(c->buf);
  free(c);
}

const char *tuned_socket_path(const tuned_client_t *c) {
  return c->path;
}

void tuned_set_timeout(tuned_client_t *c, double seconds) {
  c->timeout_s = seconds > 0 ? seconds : 0;
}

static int send_all(tuned_client_t *c, const char *data, size_t n, tuned_error_t *err) {
  while (n > 0) {
    ssize_t w = send(c->fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return set_err(err, TUNED_E_IO, "cannot write to %s: %s", c->path, strerror(errno));
    data += w, n -= (size_t)w;
  }
  return 0;
}

/* Waits until the socket is readable or the deadline (0: none) passes. */
static int wait_readable(tuned_client_t *c, double deadline, tuned_error_t *err) {
  for (;;) {
    int ms = -1;
    if (deadline > 0) {
      double left = deadline - now_s();
      if (left <= 0) return set_err(err, TUNED_E_TIMEOUT, "no answer from %s in time", c->path);
      ms = (int)(left * 1e3) + 1;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int r = poll(&p, 1, ms);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return set_err(err, TUNED_E_IO, "poll on %s: %s", c->path, strerror(errno));
  }
}

/* Reads the next line (without its '\n') into a malloc'ed string. */
static int read_line(tuned_client_t *c, double deadline, char **line, tuned_error_t *err) {
  for (;;) {
    char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - c->buf);
      *line = malloc(n + 1);
      if (!*line) return set_err(err, TUNED_E_NOMEM, "out of memory");
      memcpy(*line, c->buf, n);
      (*line)[n] = 0;
      memmove(c->buf, nl + 1, c->len - n - 1);
      c->len -= n + 1;
      return 0;
    }
    if (c->len >= MAX_ANSWER)
      return set_err(err, TUNED_E_PROTOCOL, "an answer from %s is longer than %zu MiB", c->path, MAX_ANSWER >> 20);
    if (c->cap - c->len < 65536) {
      size_t cap = c->cap ? c->cap * 2 : 131072;
      char *b = realloc(c->buf, cap);
      if (!b) return set_err(err, TUNED_E_NOMEM, "out of memory");
      c->buf = b, c->cap = cap;
    }
    int rc = wait_readable(c, deadline, err);
    if (rc < 0) return rc;
    ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return set_err(err, TUNED_E_IO, "cannot read from %s: %s", c->path, strerror(errno));
    if (r == 0) return set_err(err, TUNED_E_IO, "%s closed the connection", c->path);
    c->len += (size_t)r;
  }
}

/* Reads the next message; NULL-free and an object on success. */
static int read_message(tuned_client_t *c, double deadline, cJSON **msg, tuned_error_t *err) {
  char *line = NULL;
  int rc = read_line(c, deadline, &line, err);
  if (rc < 0) return rc;
  *msg = cJSON_Parse(line);
  if (!cJSON_IsObject(*msg)) {
    cJSON_Delete(*msg);
    *msg = NULL;
    rc = set_err(err, TUNED_E_PROTOCOL, "the daemon sent a line that is not a JSON object: %.200s", line);
  }
  free(line);
  return rc;
}

static double deadline_of(const tuned_client_t *c) {
  return c->timeout_s > 0 ? now_s() + c->timeout_s : 0;
}

/* Sends one request; params is consumed (NULL: no params). */
static int send_request(tuned_client_t *c, const char *method, cJSON *params, int64_t *id, tuned_error_t *err) {
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "jsonrpc", "2.0");
  *id = c->next_id++;
  cJSON_AddNumberToObject(req, "id", (double)*id);
  cJSON_AddStringToObject(req, "method", method);
  if (params) cJSON_AddItemToObject(req, "params", params);
  char *text = cJSON_PrintUnformatted(req);
  cJSON_Delete(req);
  if (!text) return set_err(err, TUNED_E_NOMEM, "out of memory");
  size_t n = strlen(text);
  text[n] = '\n'; /* overwrites the NUL: send n + 1 bytes */
  int rc = send_all(c, text, n + 1, err);
  free(text);
  return rc;
}

/* Turns a response into its result (detached) or an error. */
static int take_result(cJSON *msg, const char *method, cJSON **result, tuned_error_t *err) {
  cJSON *e = cJSON_GetObjectItemCaseSensitive(msg, "error");
  if (e) {
    cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    set_err(err, TUNED_E_RPC, "%s", cJSON_IsString(m) ? m->valuestring : "(the error has no message)");
    if (err) err->rpc_code = cJSON_IsNumber(code) ? code->valueint : TUNED_RPC_INTERNAL;
    return TUNED_E_RPC;
  }
  *result = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
  if (!*result) return set_err(err, TUNED_E_PROTOCOL, "the answer to %s has neither result nor error", method);
  return 0;
}

/* Calls method and waits for its response, handing notifications to notify.
 * params is consumed. */
static int call_json(tuned_client_t *c, const char *method, cJSON *params, notify_fn notify, void *ctx,
                     cJSON **result, tuned_error_t *err) {
  int64_t id;
  *result = NULL;
  int rc = send_request(c, method, params, &id, err);
  double deadline = deadline_of(c);
  while (rc == 0) {
    cJSON *msg = NULL;
    if ((rc = read_message(c, deadline, &msg, err)) < 0) break;
    cJSON *mid = cJSON_GetObjectItemCaseSensitive(msg, "id");
    if (!mid && cJSON_GetObjectItemCaseSensitive(msg, "method")) {
      if (notify) notify(msg, ctx);
    } else if (cJSON_IsNumber(mid) && mid->valuedouble == (double)id) {
      rc = take_result(msg, method, result, err);
      cJSON_Delete(msg);
      return rc;
    } else if (cJSON_IsNull(mid) || !mid) {
      /* An error the daemon could not tie to a request (e.g. our line was
       * unreadable to it): it answers this call. */
      rc = take_result(msg, method, result, err);
      if (rc == 0) rc = set_err(err, TUNED_E_PROTOCOL, "the daemon answered %s without an id", method);
    }
    cJSON_Delete(msg);
  }
  return rc;
}

int tuned_call(tuned_client_t *c, const char *method, const char *params_json, char **result_json,
               tuned_error_t *err) {
  *result_json = NULL;
  if (!method || !*method) return set_err(err, TUNED_E_INVALID, "tuned_call needs a method name");
  cJSON *params = NULL;
  if (params_json && *params_json) {
    params = cJSON_Parse(params_json);
    if (!cJSON_IsObject(params) && !cJSON_IsArray(params)) {
      cJSON_Delete(params);
      return set_err(err, TUNED_E_INVALID, "params of %s must be a JSON object or array, got: %.100s", method,
                     params_json);
    }
  }
  cJSON *result = NULL;
  int rc = call_json(c, method, params, NULL, NULL, &result, err);
  if (rc < 0) return rc;
  *result_json = cJSON_PrintUnformatted(result);
  cJSON_Delete(result);
  return *result_json ? 0 : set_err(err, TUNED_E_NOMEM, "out of memory");
}

/* ---- workloads ---------------------------------------------------------- */

/* Parses params_json (NULL or "": none) into a params object; *out NULL when none. */
static int params_of(const char *params_json, cJSON **out, tuned_error_t *err) {
  *out = NULL;
  if (!params_json || !*params_json) return 0;
  *out = cJSON_Parse(params_json);
  if (cJSON_IsObject(*out)) return 0;
  cJSON_Delete(*out);
  *out = NULL;
  return set_err(err, TUNED_E_INVALID, "params must be a JSON object such as {\"M\": 64}, got: %.100s", params_json);
}

int tuned_hash_size(void) { return TUNED_HASH_SIZE; }

/* Whether s is a whole hash: 64 lower-case hex digits. */
static bool is_hash(const char *s) {
  size_t n = strspn(s, "0123456789abcdef");
  return n == TUNED_HASH_SIZE - 1 && !s[n];
}

int tuned_workload_hash(tuned_client_t *c, const char *workload_text, const char *params_json,
                        char hash[TUNED_HASH_SIZE], tuned_error_t *err) {
  hash[0] = 0;
  if (!workload_text) return set_err(err, TUNED_E_INVALID, "tuned_workload_hash needs the workload text");
  cJSON *params, *r = NULL;
  int rc = params_of(params_json, &params, err);
  if (rc < 0) return rc;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload_text", workload_text);
  if (params) cJSON_AddItemToObject(p, "params", params);
  rc = call_json(c, "workload.check", p, NULL, NULL, &r, err);
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(r, "workload");
  if (rc == 0 && !(cJSON_IsString(h) && is_hash(h->valuestring)))
    rc = set_err(err, TUNED_E_PROTOCOL, "workload.check answered without a 64-digit \"workload\" hash");
  if (rc == 0) memcpy(hash, h->valuestring, TUNED_HASH_SIZE);
  cJSON_Delete(r);
  return rc;
}

/* ---- jobs --------------------------------------------------------------- */

static const char *const state_names[] = {"queued", "running", "done", "cancelled", "failed", "unknown"};

const char *tuned_job_state_name(tuned_job_state_t s) {
  return (unsigned)s <= TUNED_JOB_UNKNOWN ? state_names[s] : "unknown";
}

int tuned_job_finished(const tuned_job_t *j) {
  return j->state == TUNED_JOB_DONE || j->state == TUNED_JOB_CANCELLED || j->state == TUNED_JOB_FAILED;
}

static double num_of(const cJSON *o, const char *key, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static void str_of(const cJSON *o, const char *key, char *dst, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  snprintf(dst, size, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

static int job_from(const cJSON *o, tuned_job_t *j, tuned_error_t *err) {
  memset(j, 0, sizeof *j);
  if (!cJSON_IsObject(o) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "job")))
    return set_err(err, TUNED_E_PROTOCOL, "a job object must be a JSON object with a numeric \"job\"");
  j->id = (int64_t)num_of(o, "job", 0);
  str_of(o, "state", j->state_name, sizeof j->state_name);
  j->state = TUNED_JOB_UNKNOWN;
  for (int s = 0; s < TUNED_JOB_UNKNOWN; s++)
    if (strcmp(j->state_name, state_names[s]) == 0) j->state = (tuned_job_state_t)s;
  str_of(o, "workload", j->workload, sizeof j->workload);
  str_of(o, "name", j->name, sizeof j->name);
  str_of(o, "target", j->target, sizeof j->target);
  str_of(o, "error", j->error, sizeof j->error);
  j->trials = (int64_t)num_of(o, "trials", 0);
  j->trials_done = (int64_t)num_of(o, "trials_done", 0);
  j->seconds = num_of(o, "seconds", 0);
  const cJSON *best = cJSON_GetObjectItemCaseSensitive(o, "best");
  if (cJSON_IsObject(best)) {
    j->best_record = (int64_t)num_of(best, "record", 0);
    j->best_median_secs = num_of(best, "median_secs", 0);
    j->best_gflops = num_of(best, "gflops", 0);
  }
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "failures");
  j->build_errors = (int64_t)num_of(f, "build_error", 0);
  j->run_errors = (int64_t)num_of(f, "run_error", 0);
  j->timeouts = (int64_t)num_of(f, "timeout", 0);
  j->wrong_results = (int64_t)num_of(f, "wrong_result", 0);
  j->too_slow = (int64_t)num_of(f, "too_slow", 0);
  const cJSON *base = cJSON_GetObjectItemCaseSensitive(o, "baseline");
  if (cJSON_IsObject(base)) {
    j->baseline_median_secs = num_of(base, "median_secs", 0);
    j->baseline_gflops = num_of(base, "gflops", 0);
  }
  const cJSON *ff = cJSON_GetObjectItemCaseSensitive(o, "first_failure");
  if (cJSON_IsObject(ff)) {
    j->first_failure_trial = (int64_t)num_of(ff, "trial", 0);
    str_of(ff, "status", j->first_failure_status, sizeof j->first_failure_status);
    str_of(ff, "error", j->first_failure, sizeof j->first_failure);
  }
  return 0;
}

int tuned_job_parse(const char *json, tuned_job_t *out, tuned_error_t *err) {
  cJSON *o = cJSON_Parse(json ? json : "");
  int rc = job_from(o, out, err);
  cJSON_Delete(o);
  return rc;
}

static cJSON *job_params(int64_t job) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(p, "job", (double)job);
  return p;
}

/* Calls a method that takes {"job": ID} and answers a job object. */
static int job_call(tuned_client_t *c, const char *method, int64_t job, notify_fn notify, void *ctx,
                    tuned_job_t *out, tuned_error_t *err) {
  cJSON *r = NULL;
  int rc = call_json(c, method, job_params(job), notify, ctx, &r, err);
  tuned_job_t tmp;
  if (rc == 0) rc = job_from(r, out ? out : &tmp, err);
  cJSON_Delete(r);
  return rc;
}

int tuned_job_status(tuned_client_t *c, int64_t job, tuned_job_t *out, tuned_error_t *err) {
  return job_call(c, "tune.status", job, NULL, NULL, out, err);
}

int tuned_cancel(tuned_client_t *c, int64_t job, tuned_job_t *out, tuned_error_t *err) {
  return job_call(c, "tune.cancel", job, NULL, NULL, out, err);
}

tuned_submit_t tuned_submit_defaults(void) {
  return (tuned_submit_t){.seed = -1, .remeasure = -1, .baseline = -1};
}

int tuned_submit(tuned_client_t *c, const tuned_submit_t *s, int64_t *job, char hash[TUNED_HASH_SIZE],
                 tuned_error_t *err) {
  if (!s || !s->workload) return set_err(err, TUNED_E_INVALID, "tuned_submit needs the workload text");
  cJSON *params;
  int rc = params_of(s->params_json, &params, err);
  if (rc < 0) return rc;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload", s->workload);
  if (s->name) cJSON_AddStringToObject(p, "name", s->name);
  if (params) cJSON_AddItemToObject(p, "params", params);
  if (s->target) cJSON_AddStringToObject(p, "target", s->target);
  if (s->trials > 0) cJSON_AddNumberToObject(p, "trials", s->trials);
  if (s->seconds > 0) cJSON_AddNumberToObject(p, "seconds", s->seconds);
  if (s->seed >= 0) cJSON_AddNumberToObject(p, "seed", (double)s->seed);
  if (s->strategy) cJSON_AddStringToObject(p, "strategy", s->strategy);
  if (s->model) cJSON_AddStringToObject(p, "model", s->model);
  if (s->remeasure >= 0) cJSON_AddNumberToObject(p, "remeasure", s->remeasure);
  if (s->baseline >= 0) cJSON_AddBoolToObject(p, "baseline", s->baseline > 0);
  if (s->allow_tf32) cJSON_AddBoolToObject(p, "allow_tf32", true);
  cJSON *r = NULL;
  rc = call_json(c, "tune.submit", p, NULL, NULL, &r, err);
  if (rc == 0) {
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r, "job")))
      rc = set_err(err, TUNED_E_PROTOCOL, "tune.submit answered without a job id");
    *job = (int64_t)num_of(r, "job", 0);
    if (hash) str_of(r, "workload", hash, TUNED_HASH_SIZE);
  }
  cJSON_Delete(r);
  return rc;
}

/* State of one tuned_wait. */
typedef struct waiter {
  int64_t job;
  tuned_progress_fn progress;
  tuned_progress_json_fn progress_json;
  void *ctx;
  tuned_job_t last;
  bool finished;
} waiter_t;

/* Takes a job object (as the daemon sent it) as the latest state. */
static void waiter_update(waiter_t *w, const tuned_job_t *j, const cJSON *obj) {
  w->last = *j;
  w->finished = tuned_job_finished(j);
  if (w->progress) w->progress(j, w->ctx);
  if (w->progress_json) {
    char *text = cJSON_PrintUnformatted(obj);
    if (text) w->progress_json(j, text, w->ctx);
    free(text);
  }
}

static void on_progress(cJSON *msg, void *ctx) {
  waiter_t *w = ctx;
  cJSON *m = cJSON_GetObjectItemCaseSensitive(msg, "method");
  cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  tuned_job_t j;
  if (!cJSON_IsString(m) || strcmp(m->valuestring, "tune.progress") != 0) return;
  if (job_from(params, &j, NULL) < 0 || j.id != w->job) return;
  waiter_update(w, &j, params);
}

/* Calls method {"job": ID} and takes its answer, a job object, as the latest state. */
static int waiter_call(tuned_client_t *c, const char *method, waiter_t *w, notify_fn notify, bool always,
                       tuned_error_t *err) {
  cJSON *r = NULL;
  tuned_job_t j;
  int rc = call_json(c, method, job_params(w->job), notify, w, &r, err);
  if (rc == 0) rc = job_from(r, &j, err);
  /* always: the first answer (unless a notification read meanwhile ended the job); else changes only */
  if (rc == 0 && ((always && !w->finished) || j.trials_done != w->last.trials_done || j.state != w->last.state))
    waiter_update(w, &j, r);
  cJSON_Delete(r);
  return rc;
}

/* Polls tune.status: for daemons without tune.watch. */
static int wait_polling(tuned_client_t *c, waiter_t *w, double deadline, tuned_error_t *err) {
  while (!w->finished) {
    if (deadline > 0 && now_s() >= deadline)
      return set_err(err, TUNED_E_TIMEOUT, "job %lld did not finish in time", (long long)w->job);
    struct timespec ts = {0, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int rc = waiter_call(c, "tune.status", w, NULL, false, err);
    if (rc < 0) return rc;
  }
  return 0;
}

static int wait_job(tuned_client_t *c, waiter_t *w, double timeout_s, tuned_job_t *final, tuned_error_t *err) {
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  int rc = waiter_call(c, "tune.watch", w, on_progress, true, err);
  if (rc == TUNED_E_RPC && err && err->rpc_code == TUNED_RPC_METHOD_NOT_FOUND) {
    if ((rc = waiter_call(c, "tune.status", w, NULL, true, err)) == 0) rc = wait_polling(c, w, deadline, err);
  }
  while (rc == 0 && !w->finished) {
    cJSON *msg = NULL;
    if (deadline > 0 && now_s() >= deadline) {
      rc = set_err(err, TUNED_E_TIMEOUT, "job %lld did not finish in %.0f s", (long long)w->job, timeout_s);
      break;
    }
    if ((rc = read_message(c, deadline, &msg, err)) < 0) break;
    if (!cJSON_GetObjectItemCaseSensitive(msg, "id")) on_progress(msg, w);
    cJSON_Delete(msg);
  }
  if (rc == 0 && final) *final = w->last;
  return rc;
}

int tuned_wait(tuned_client_t *c, int64_t job, double timeout_s, tuned_progress_fn progress, void *ctx,
               tuned_job_t *final, tuned_error_t *err) {
  waiter_t w = {.job = job, .progress = progress, .ctx = ctx};
  return wait_job(c, &w, timeout_s, final, err);
}

int tuned_wait_json(tuned_client_t *c, int64_t job, double timeout_s, tuned_progress_json_fn progress, void *ctx,
                    tuned_job_t *final, tuned_error_t *err) {
  waiter_t w = {.job = job, .progress_json = progress, .ctx = ctx};
  return wait_job(c, &w, timeout_s, final, err);
}

/* ---- kernels ------------------------------------------------------------ */

static int dtype_bytes(const char *dtype) {
  static const struct { const char *name; int bytes; } t[] = {
      {"bool", 1}, {"int32", 4}, {"int64", 8}, {"float16", 2}, {"float32", 4}, {"float64", 8}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(dtype, t[i].name) == 0) return t[i].bytes;
  return 0;
}

static char *dup_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return xstrdup(cJSON_IsString(v) ? v->valuestring : "");
}

/* x, y, z from an array of up to 3 numbers (missing ones are 1). */
static void dim3_of(const cJSON *o, const char *key, int64_t d[3]) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetArrayItem(a, i);
    d[i] = cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 1;
  }
}

/* A launch's "tensor_maps" (after k's params are known: each names one). */
static int tensor_maps_from(const cJSON *o, const tuned_kernel_t *k, tuned_launch_t *t, tuned_error_t *err) {
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "tensor_maps");
  if (!ms) return 0;
  int n = cJSON_GetArraySize(ms);
  if (!cJSON_IsArray(ms) || n == 0) return set_err(err, TUNED_E_PROTOCOL, "kernel %s: \"tensor_maps\" is not a "
                                                  "non-empty array", t->name ? t->name : "?");
  if (!(t->tensor_maps = calloc((size_t)n, sizeof *t->tensor_maps))) return set_err(err, TUNED_E_NOMEM, "out of memory");
  t->ntensor_maps = n;
  for (int i = 0; i < n; i++) {
    const cJSON *m = cJSON_GetArrayItem(ms, i), *param = cJSON_GetObjectItemCaseSensitive(m, "param");
    tuned_tensor_map_t *x = &t->tensor_maps[i];
    x->name = dup_str(m, "name");
    x->param = -1;
    for (int p = 0; cJSON_IsString(param) && p < k->nparams; p++)
      if (k->params[p].name && !strcmp(k->params[p].name, param->valuestring)) x->param = p;
    int64_t dims[3], box[3];
    dim3_of(m, "dims", dims);
    dim3_of(m, "box", box);
    x->dims[0] = dims[0], x->dims[1] = dims[1], x->box[0] = (int)box[0], x->box[1] = (int)box[1];
    x->stride_bytes = (int64_t)num_of(m, "stride_bytes", 0);
    x->swizzle = (int)num_of(m, "swizzle", 0);
    if (!x->name || x->param < 0)
      return set_err(err, TUNED_E_PROTOCOL, "kernel %s: tensor map %d needs a name and a param among the params",
                     t->name ? t->name : "?", i);
  }
  return 0;
}

static int launch_from(const cJSON *l, tuned_kernel_t *k, tuned_error_t *err) {
  const cJSON *ks = cJSON_GetObjectItemCaseSensitive(l, "kernels");
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(l, "params");
  if (!cJSON_IsArray(ks) || !cJSON_IsArray(ps) || cJSON_GetArraySize(ks) == 0)
    return set_err(err, TUNED_E_PROTOCOL, "the launch configuration needs a non-empty \"kernels\" and a \"params\" array");
  k->entry = dup_str(l, "entry");
  k->nkernels = cJSON_GetArraySize(ks);
  k->kernels = calloc((size_t)k->nkernels, sizeof *k->kernels);
  k->nparams = cJSON_GetArraySize(ps);
  k->params = calloc((size_t)k->nparams + 1, sizeof *k->params);
  if (!k->kernels || !k->params) return set_err(err, TUNED_E_NOMEM, "out of memory");
  for (int i = 0; i < k->nkernels; i++) {
    const cJSON *o = cJSON_GetArrayItem(ks, i);
    tuned_launch_t *t = &k->kernels[i];
    t->name = dup_str(o, "name");
    dim3_of(o, "grid", t->grid);
    dim3_of(o, "block", t->block);
    t->shared_bytes = (int64_t)num_of(o, "dyn_shared_bytes", num_of(o, "shared_bytes", 0));
    t->static_shared_bytes = (int64_t)num_of(o, "static_shared_bytes", 0);
  }
  for (int i = 0; i < k->nparams; i++) {
    const cJSON *o = cJSON_GetArrayItem(ps, i);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    tuned_param_t *p = &k->params[i];
    p->name = dup_str(o, "name");
    p->dtype = dup_str(o, "dtype");
    p->role = dup_str(o, "role");
    p->elem_bytes = p->dtype ? dtype_bytes(p->dtype) : 0;
    p->ndim = cJSON_GetArraySize(shape);
    if (p->ndim > TUNED_MAX_DIMS)
      return set_err(err, TUNED_E_PROTOCOL, "parameter %s has %d dimensions; at most %d are supported", p->name,
                     p->ndim, TUNED_MAX_DIMS);
    p->elements = 1;
    for (int d = 0; d < p->ndim; d++) {
      p->shape[d] = (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
      p->elements *= p->shape[d];
    }
    p->elements = (int64_t)num_of(o, "elements", (double)p->elements); /* padded rows count */
    p->packs = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "packs")) ? dup_str(o, "packs") : NULL;
    p->pack_function =
        cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "pack_function")) ? dup_str(o, "pack_function") : NULL;
    if (p->role && strcmp(p->role, "packed") == 0 && (!p->packs || !p->pack_function))
      return set_err(err, TUNED_E_PROTOCOL, "packed parameter %s does not say what it packs and how (packs, "
                     "pack_function)", p->name);
  }
  for (int i = 0; i < k->nkernels; i++)
    if (tensor_maps_from(cJSON_GetArrayItem(ks, i), k, &k->kernels[i], err) < 0) return -1;
  return 0;
}

/* The text of key: a string as is, anything else printed as JSON. */
static char *text_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return NULL;
  return cJSON_IsString(v) ? xstrdup(v->valuestring) : cJSON_PrintUnformatted(v);
}

static int kernel_from(const cJSON *r, tuned_kernel_t *k, tuned_error_t *err) {
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(r, "source");
  if (!cJSON_IsObject(r) || !cJSON_IsString(src))
    return set_err(err, TUNED_E_PROTOCOL, "kernel.get answered without a \"source\" text");
  k->record = (int64_t)num_of(r, "record", 0);
  k->median_secs = num_of(r, "median_secs", 0);
  k->gflops = num_of(r, "gflops", 0);
  k->workload = dup_str(r, "workload");
  k->name = dup_str(r, "name");
  k->target = dup_str(r, "target");
  k->language = dup_str(r, "language");
  k->source = xstrdup(src->valuestring);
  k->ptx = text_of(r, "ptx");
  k->trace_json = text_of(r, "trace");
  k->launch_json = text_of(r, "launch");
  k->fallback_json = text_of(r, "fallback");
  k->unscheduled_json = text_of(r, "unscheduled");
  cJSON *launch = k->launch_json ? cJSON_Parse(k->launch_json) : NULL;
  int rc = launch_from(launch, k, err);
  cJSON_Delete(launch);
  const cJSON *cubin = cJSON_GetObjectItemCaseSensitive(r, "cubin_base64");
  if (rc == 0 && cJSON_IsString(cubin) && tuned_base64_decode(cubin->valuestring, &k->cubin, &k->cubin_size, err) < 0)
    rc = set_err(err, TUNED_E_PROTOCOL, "kernel.get's cubin_base64 is not valid base64");
  return rc;
}

int tuned_kernel_parse(const char *json, tuned_kernel_t **out, tuned_error_t *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) return set_err(err, TUNED_E_NOMEM, "out of memory");
  cJSON *r = cJSON_Parse(json ? json : "");
  int rc = kernel_from(r, *out, err);
  cJSON_Delete(r);
  if (rc < 0) {
    tuned_kernel_free(*out);
    *out = NULL;
  }
  return rc;
}

static int kernel_call(tuned_client_t *c, cJSON *p, tuned_kernel_t **out, tuned_error_t *err) {
  cJSON *r = NULL;
  *out = NULL;
  int rc = call_json(c, "kernel.get", p, NULL, NULL, &r, err);
  if (rc == 0 && !(*out = calloc(1, sizeof **out))) rc = set_err(err, TUNED_E_NOMEM, "out of memory");
  if (rc == 0 && (rc = kernel_from(r, *out, err)) < 0) {
    tuned_kernel_free(*out);
    *out = NULL;
  }
  cJSON_Delete(r);
  return rc;
}

int tuned_kernel_get(tuned_client_t *c, const char *workload_hash, const char *target, tuned_kernel_t **out,
                     tuned_error_t *err) {
  *out = NULL;
  if (!workload_hash) return set_err(err, TUNED_E_INVALID, "tuned_kernel_get needs a workload hash");
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload", workload_hash);
  if (target) cJSON_AddStringToObject(p, "target", target);
  return kernel_call(c, p, out, err);
}

int tuned_kernel_get_text(tuned_client_t *c, const char *workload_text, const char *params_json,
                          const char *target, tuned_kernel_t **out, tuned_error_t *err) {
  return tuned_kernel_get_nearest(c, workload_text, params_json, target, 0, out, err);
}

int tuned_kernel_get_nearest(tuned_client_t *c, const char *workload_text, const char *params_json,
                             const char *target, int nearest, tuned_kernel_t **out, tuned_error_t *err) {
  *out = NULL;
  if (!workload_text) return set_err(err, TUNED_E_INVALID, "tuned_kernel_get_text needs the workload text");
  cJSON *params;
  int rc = params_of(params_json, &params, err);
  if (rc < 0) return rc;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "workload_text", workload_text);
  if (params) cJSON_AddItemToObject(p, "params", params);
  if (target) cJSON_AddStringToObject(p, "target", target);
  if (nearest) cJSON_AddStringToObject(p, "fallback", "nearest");
  return kernel_call(c, p, out, err);
}

void tuned_kernel_free(tuned_kernel_t *k) {
  if (!k) return;
  for (int i = 0; k->kernels && i < k->nkernels; i++) {
    free(k->kernels[i].name);
    for (int m = 0; m < k->kernels[i].ntensor_maps; m++) free(k->kernels[i].tensor_maps[m].name);
    free(k->kernels[i].tensor_maps);
  }
  for (int i = 0; k->params && i < k->nparams; i++) {
    free(k->params[i].name);
    free(k->params[i].dtype);
    free(k->params[i].role);
    free(k->params[i].packs);
    free(k->params[i].pack_function);
  }
  free(k->kernels);
  free(k->params);
  free(k->workload);
  free(k->name);
  free(k->target);
  free(k->language);
  free(k->entry);
  free(k->source);
  free(k->ptx);
  free(k->cubin);
  free(k->launch_json);
  free(k->trace_json);
  free(k->fallback_json);
  free(k->unscheduled_json);
  free(k);
}

/* ---- base64 ------------------------------------------------------------- */

static int b64_value(int ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+' || ch == '-') return 62;
  if (ch == '/' || ch == '_') return 63;
  return -1;
}

int tuned_base64_decode(const char *text, unsigned char **out, size_t *len, tuned_error_t *err) {
  size_t n = strlen(text);
  unsigned char *b = malloc(n / 4 * 3 + 3);
  if (!b) return set_err(err, TUNED_E_NOMEM, "out of memory");
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  bool padded = false;
  for (size_t i = 0; i < n; i++) {
    int ch = (unsigned char)text[i];
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
    int v = ch == '=' ? -2 : b64_value(ch);
    if (v == -2) {
      padded = true;
      continue;
    }
    if (v < 0 || padded) {
      free(b);
      return set_err(err, TUNED_E_INVALID, "base64: unexpected character '%c' at offset %zu", ch, i);
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      b[o++] = (unsigned char)(acc >> bits);
    }
  }
  *out = b;
  *len = o;
  return 0;
}
