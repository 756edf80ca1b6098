/* fuzz_rpc.c — libFuzzer entry point for the daemon's request path: each
 * input is what a client sends on one connection (JSON-RPC lines), framed
 * and dispatched by the daemon's own code (td_conn_process -> td_rpc_line ->
 * the methods) on a server built as td_server_run builds it, without the
 * listening socket: the connection is one end of a socketpair and the
 * answers are read from the other.  Jobs are accepted and queued but never
 * started (max_jobs 0); the database is a temporary file, renewed every
 * RENEW_EVERY inputs and after server.shutdown, which really stops the
 * server.  Checked: every line written is a JSON-RPC 2.0 response or
 * notification.  FUZZ_RPC_PRINT=1 prints the answers (to see what a seed
 * reaches). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/td.h"

#define RENEW_EVERY 2000

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], db_path[128];
static td_machine_t machine;
static char target[64];
static td_target_info_t *targets;
static int ntargets;
static td_server_t *srv;
static long inputs_on_server;
static bool print_answers; /* FUZZ_RPC_PRINT=1: the daemon's answers go to stderr */

static void remove_db(void) {
  static const char *const suffixes[] = {"", "-wal", "-shm", ".lock"};
  char path[160];
  for (size_t i = 0; i < TN_ARRAY_LEN(suffixes); i++) {
    snprintf(path, sizeof path, "%s%s", db_path, suffixes[i]);
    unlink(path);
  }
}

/* td_server_run's start() without the socket and signals: td_server_open
 * (database, job manager, readers), and the handles unstarted, so that a
 * stop can close them. */
static void server_new(void) {
  srv = tn_xcalloc(1, sizeof *srv);
  snprintf(srv->cfg.target, sizeof srv->cfg.target, "%s", target);
  snprintf(srv->cfg.db_path, sizeof srv->cfg.db_path, "%s", db_path);
  snprintf(srv->cfg.socket_path, sizeof srv->cfg.socket_path, "%s/unused.sock", dir);
  srv->cfg.max_jobs = 0;
  srv->cfg.stop_timeout = 60;
  srv->cfg.config_dir = machine.config_dir;
  srv->machine = machine;
  srv->targets = targets;
  srv->ntargets = ntargets;
  srv->lock_fd = -1;
  srv->loop = tn_xmalloc(sizeof *srv->loop);
  uv_loop_init(srv->loop);
  srv->started = tn_now();
  uv_mutex_init(&srv->wdb_lock);
  remove_db();
  tn_err_t err = {0};
  if (td_server_open(srv, &err)) {
    fprintf(stderr, "fuzz_rpc: cannot start the server: %s\n", err.msg);
    abort();
  }
  uv_timer_init(srv->loop, &srv->stop_timer);
  uv_timer_init(srv->loop, &srv->idle_timer);
  srv->stop_timer.data = srv->idle_timer.data = srv;
  uv_pipe_init(srv->loop, &srv->listener, 0);
  srv->listening = true;
  uv_signal_init(srv->loop, &srv->sig_term);
  uv_signal_init(srv->loop, &srv->sig_int);
  inputs_on_server = 0;
}

/* After td_server_stop has closed everything (or to renew the database). */
static void server_free(void) {
  if (!srv->stopping) td_server_stop(srv, "fuzz_rpc: renewing the database");
  while (!srv->closed || uv_loop_alive(srv->loop)) uv_run(srv->loop, UV_RUN_ONCE);
  uv_loop_close(srv->loop);
  free(srv->loop);
  td_server_release(srv);
  uv_mutex_destroy(&srv->wdb_lock);
  free(srv);
  srv = NULL;
}

static void at_exit(void) {
  if (srv) server_free();
  remove_db();
  rmdir(dir);
  free(targets);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  signal(SIGPIPE, SIG_IGN);
  td_log_set_level(TD_ERROR);
  print_answers = getenv("FUZZ_RPC_PRINT") && strcmp(getenv("FUZZ_RPC_PRINT"), "1") == 0;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%.40s/fuzz-rpc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  static char configs[PATH_MAX];
  tn_err_t err = {0};
  if (!mkdtemp(dir) || tn_config_dir(configs, sizeof configs, &err) < 0) {
    fprintf(stderr, "fuzz_rpc: cannot set up: %s\n", err.msg[0] ? err.msg : dir);
    abort();
  }
  snprintf(db_path, sizeof db_path, "%s/fuzz.db", dir);
  char pocl[96];
  snprintf(pocl, sizeof pocl, "%s/pocl-cache", dir); /* as tuned's set_pocl_cache */
  setenv("POCL_CACHE_DIR", pocl, 0);
  td_machine_probe(&machine, configs);
  char why[512];
  td_target_auto(&machine, target, sizeof target, why, sizeof why);
  td_target_list(&machine, &targets, &ntargets);
  atexit(at_exit);
  return 0;
}

/* ---- one connection ---------------------------------------------------------- */

typedef struct reader {
  uv_pipe_t pipe;
  tn_buf_t got;
  char chunk[65536];
  bool closed;
} reader_t;

static void reader_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  reader_t *r = h->data;
  *buf = uv_buf_init(r->chunk, sizeof r->chunk);
}

static void reader_closed(uv_handle_t *h) { ((reader_t *)h->data)->closed = true; }

static void reader_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  reader_t *r = s->data;
  if (n > 0) tn_buf_putn(&r->got, buf->base, (size_t)n);
  else if (n < 0) uv_close((uv_handle_t *)s, reader_closed);
}

static void bad_answer(const char *why, const char *line, size_t len) {
  fprintf(stderr, "fuzz_rpc: FAILURE: %s: %.*s\n", why, (int)TN_MIN(len, 2000), line);
  abort();
}

/* tune.watch's tune.progress: a method, an object of params and no id. */
static bool is_notification(const cJSON *j) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "method");
  if (!m) return false;
  return cJSON_IsString(m) && strcmp(m->valuestring, "tune.progress") == 0 &&
         cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "params")) && !cJSON_GetObjectItemCaseSensitive(j, "id");
}

/* Every line the daemon wrote is one JSON-RPC 2.0 response or notification. */
static void check_answers(const tn_buf_t *got) {
  for (size_t pos = 0; pos < got->len;) {
    const char *line = got->data + pos, *nl = memchr(line, '\n', got->len - pos);
    if (!nl) bad_answer("an answer without its newline", line, got->len - pos);
    size_t len = (size_t)(nl - line);
    cJSON *j = cJSON_ParseWithLength(line, len);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "jsonrpc");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!cJSON_IsObject(j)) bad_answer("an answer that is not a JSON object", line, len);
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0) bad_answer("no \"jsonrpc\": \"2.0\"", line, len);
    if (is_notification(j)) {
      cJSON_Delete(j);
      pos += len + 1;
      continue;
    }
    if (!id || !(cJSON_IsNumber(id) || cJSON_IsString(id) || cJSON_IsNull(id))) bad_answer("a bad \"id\"", line, len);
    if (!res == !e) bad_answer("not exactly one of \"result\" and \"error\"", line, len);
    if (e && (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "code")) ||
              !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message"))))
      bad_answer("an error without a code and a message", line, len);
    cJSON_Delete(j);
    pos += len + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!srv) server_new();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) abort();
  /* the daemon's side, as on_connection sets it up */
  td_conn_t *c = tn_xcalloc(1, sizeof *c);
  c->srv = srv;
  c->id = ++srv->next_conn_id;
  c->refs = 2; /* the handle's and ours: c->closed is read after the close */
  tn_buf_init(&c->in);
  uv_pipe_init(srv->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_pipe_open(&c->pipe, fds[0]) != 0) abort();
  c->last_active = tn_now();
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  srv->nconns++;
  /* the client's side */
  reader_t *r = tn_xcalloc(1, sizeof *r);
  tn_buf_init(&r->got);
  uv_pipe_init(srv->loop, &r->pipe, 0);
  r->pipe.data = r;
  if (uv_pipe_open(&r->pipe, fds[1]) != 0) abort();
  uv_read_start((uv_stream_t *)&r->pipe, reader_alloc, reader_read);
  /* All the input has arrived and the client closed its side: every line is
   * answered, then the daemon closes the connection. */
  tn_buf_putn(&c->in, (const char *)data, size);
  c->eof = true;
  td_conn_process(c);
  while (!(c->closed && r->closed && srv->inflight_work == 0)) uv_run(srv->loop, UV_RUN_ONCE);
  if (print_answers) fprintf(stderr, "%s", r->got.data ? r->got.data : "");
  check_answers(&r->got);
  td_conn_unref(c);
  tn_buf_free(&r->got);
  free(r);
  if (srv->stopping || ++inputs_on_server >= RENEW_EVERY) server_free();
  return 0;
}
