/* server.c — the libuv loop on one thread: the unix socket (0600 in a private
 * directory), connections with line framing and bounded buffers, signals, and
 * the orderly shutdown that waits for running jobs. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/td.h"

#define TD_READ_CHUNK (64u << 10)
/* Above this many queued response bytes a connection is not read from (the
 * client is not reading its answers: backpressure). */
#define TD_WRITE_SOFT (1u << 20)
/* A watcher that lets notifications pile up past this is disconnected. */
#define TD_WRITE_HARD (16u << 20)
#define TD_MAX_CONNS 1024
/* Connections one client process may hold: a single client cannot take all
 * TD_MAX_CONNS and lock the others out. */
#define TD_MAX_CONNS_PER_PROCESS 128
/* Reader threads (readers.c): queries are short, so a few keep every core
 * busy and one slow query (a db.records page of 1,000) does not hold the
 * others up. */
#define TD_READERS 4

typedef struct td_wreq {
  uv_write_t req;
  td_conn_t *c;
  size_t len;
  char data[];
} td_wreq_t;

/* ---- connections ----------------------------------------------------------- */

void td_conn_ref(td_conn_t *c) { c->refs++; }

void td_conn_unref(td_conn_t *c) {
  if (--c->refs > 0) return;
  free(c->rbuf);
  tn_buf_free(&c->in);
  free(c);
}

static void on_conn_closed(uv_handle_t *h) {
  td_conn_t *c = h->data;
  c->closed = true;
  td_conn_unref(c);
}

/* Closes the handle now (pending writes are cancelled). */
static void conn_release(td_conn_t *c) {
  if (uv_is_closing((uv_handle_t *)&c->pipe)) return;
  c->closing = true;
  td_server_t *srv = c->srv;
  td_jobs_conn_closed(srv, c);
  if (c->prev) c->prev->next = c->next;
  else srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  srv->nconns--;
  td_log(TD_DEBUG, "connection closed", "conn=%llu", (unsigned long long)c->id);
  uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  conn_release(req->data);
  free(req);
}

void td_conn_close_graceful(td_conn_t *c) {
  if (c->closing) return;
  c->closing = true;
  uv_read_stop((uv_stream_t *)&c->pipe);
  td_jobs_conn_closed(c->srv, c);
  uv_shutdown_t *req = tn_xmalloc(sizeof *req);
  req->data = c;
  if (uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) != 0) {
    free(req);
    conn_release(c);
  }
}

static void on_write(uv_write_t *req, int status) {
  td_wreq_t *w = (td_wreq_t *)req;
  td_conn_t *c = w->c;
  c->wpending -= w->len;
  free(w);
  if (status < 0 && !c->closing) {
    td_log(TD_DEBUG, "write failed", "conn=%llu err=%s", (unsigned long long)c->id, td_q(uv_strerror(status)));
    conn_release(c);
  } else if (!c->closing) {
    td_conn_process(c); /* the client reads again: resume framing and reading */
  }
  td_conn_unref(c);
}

void td_conn_send(td_conn_t *c, const char *line, size_t len, bool notification) {
  if (c->closing) return;
  if (notification && c->wpending > TD_WRITE_HARD) {
    td_log(TD_WARN, "client does not read its notifications; disconnecting", "conn=%llu queued_bytes=%zu",
           (unsigned long long)c->id, c->wpending);
    conn_release(c);
    return;
  }
  td_wreq_t *w = tn_xmalloc(sizeof *w + len + 1);
  memcpy(w->data, line, len);
  w->data[len] = '\n';
  w->len = len + 1;
  w->c = c;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
  td_conn_ref(c);
  c->wpending += w->len;
  int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write);
  if (rc != 0) {
    c->wpending -= w->len;
    free(w);
    td_conn_unref(c);
    conn_release(c);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  td_conn_t *c = h->data;
  *buf = uv_buf_init(c->rbuf, TD_READ_CHUNK);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  td_conn_t *c = s->data;
  if (n == UV_EOF) {
    c->eof = true;
    uv_read_stop(s);
    c->reading = false;
  } else if (n < 0) {
    td_log(TD_DEBUG, "read failed", "conn=%llu err=%s", (unsigned long long)c->id, td_q(uv_strerror((int)n)));
    conn_release(c);
    return;
  } else if (n > 0) {
    tn_buf_putn(&c->in, buf->base, (size_t)n);
    c->last_active = tn_now();
  }
  td_conn_process(c);
}

/* Reads only while the connection can take more: not busy with an
 * asynchronous answer, its answers being read, no oversized line pending. */
static void update_reading(td_conn_t *c) {
  bool want = !c->eof && !c->closing && !c->busy && c->wpending < TD_WRITE_SOFT &&
              c->in.len - c->in_off <= TUNED_MAX_MESSAGE;
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0) c->reading = true;
  } else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = false;
  }
}

static void oversized(td_conn_t *c) {
  char msg[256];
  int n = snprintf(msg, sizeof msg,
                   "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":\"message longer "
                   "than %u bytes (the line limit); send one JSON-RPC message per line; closing the "
                   "connection\"}}", TD_E_REQUEST, TUNED_MAX_MESSAGE);
  td_log(TD_WARN, "oversized message; closing the connection", "conn=%llu limit=%u", (unsigned long long)c->id,
         TUNED_MAX_MESSAGE);
  td_conn_send(c, msg, (size_t)n, false);
  td_conn_close_graceful(c);
}

/* Drops the processed prefix of the input buffer when it is large. */
static void compact(td_conn_t *c) {
  if (c->in_off == 0 || (c->in_off < c->in.len && c->in_off < TD_READ_CHUNK)) return;
  size_t rest = c->in.len - c->in_off;
  memmove(c->in.data, c->in.data + c->in_off, rest);
  c->in.len = rest;
  if (c->in.data) c->in.data[rest] = 0;
  c->scan_off -= c->in_off;
  c->in_off = 0;
}

/* Frames the next complete line: true with line and len set, or false. */
static bool next_line(td_conn_t *c, const char **line, size_t *len) {
  if (c->in_off >= c->in.len) return false;
  char *base = c->in.data;
  if (c->scan_off < c->in_off) c->scan_off = c->in_off;
  char *nl = memchr(base + c->scan_off, '\n', c->in.len - c->scan_off);
  if (!nl) {
    c->scan_off = c->in.len;
    return false;
  }
  *line = base + c->in_off;
  *len = (size_t)(nl - *line);
  c->in_off = c->scan_off = (size_t)(nl - base) + 1;
  return true;
}

void td_conn_process(td_conn_t *c) {
  if (c->processing || c->closing) return;
  c->processing = true;
  const char *line;
  size_t len;
  while (!c->busy && !c->closing && c->wpending < TD_WRITE_SOFT && next_line(c, &line, &len)) {
    if (len > TUNED_MAX_MESSAGE) {
      oversized(c);
      break;
    }
    td_rpc_line(c, line, len);
  }
  size_t rest = c->in.len - c->in_off;
  if (!c->closing && rest > TUNED_MAX_MESSAGE && c->scan_off == c->in.len) oversized(c);
  if (!c->closing && c->eof && !c->busy && c->wpending < TD_WRITE_SOFT && c->scan_off == c->in.len) {
    /* The client closed its side: a last line without '\n' still counts. */
    if (rest > 0) {
      line = c->in.data + c->in_off;
      c->in_off = c->scan_off = c->in.len;
      td_rpc_line(c, line, rest);
    }
    if (!c->busy) td_conn_close_graceful(c);
  }
  if (!c->closing) compact(c);
  c->processing = false;
  if (!c->closing) update_reading(c);
}

static void on_connection(uv_stream_t *server, int status) {
  td_server_t *srv = server->data;
  if (status < 0) {
    td_log(TD_WARN, "accept failed", "err=%s", td_q(uv_strerror(status)));
    return;
  }
  td_conn_t *c = tn_xcalloc(1, sizeof *c);
  c->srv = srv;
  c->id = ++srv->next_conn_id;
  c->refs = 1;
  c->rbuf = tn_xmalloc(TD_READ_CHUNK);
  tn_buf_init(&c->in);
  uv_pipe_init(srv->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0) {
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
    return;
  }
  c->last_active = tn_now();
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  srv->nconns++;
  if (srv->nconns > TD_MAX_CONNS) {
    td_log(TD_WARN, "too many connections; refusing one", "limit=%d", TD_MAX_CONNS);
    conn_release(c);
    return;
  }
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t clen = sizeof cred;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0)
    c->peer_pid = cred.pid;
  int same = 0;
  for (td_conn_t *o = srv->conns; o && c->peer_pid > 0; o = o->next) same += o->peer_pid == c->peer_pid;
  if (same > TD_MAX_CONNS_PER_PROCESS) {
    td_log(TD_WARN, "too many connections from one process; refusing one", "pid=%d limit=%d", c->peer_pid,
           TD_MAX_CONNS_PER_PROCESS);
    char line[256];
    int n = snprintf(line, sizeof line, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
                     "\"too many connections from this process (%d at most): close some\"}}", TD_E_REQUEST,
                     TD_MAX_CONNS_PER_PROCESS);
    td_conn_send(c, line, (size_t)n, false);
    td_conn_close_graceful(c);
    return;
  }
  td_log(TD_DEBUG, "connection accepted", "conn=%llu conns=%d", (unsigned long long)c->id, srv->nconns);
  update_reading(c);
}

/* ---- the socket ------------------------------------------------------------- */

/* Refuses a socket a live daemon answers on; removes a stale one. */
static int check_socket_free(const char *path, tn_err_t *err) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (!S_ISSOCK(st.st_mode))
    return tn_err_set(err, TN_EIO, "%s exists and is not a socket; remove it or pass another --socket", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
  int e = errno;
  if (fd >= 0) close(fd);
  if (rc == 0)
    return tn_err_set(err, TN_ESTATE, "another tuned is already listening on %s; stop it first "
                      "(tunectl shutdown, or kill its pid from `tunectl ping`) or pass another --socket", path);
  if (e != ECONNREFUSED && e != ENOENT)
    return tn_err_set(err, TN_EIO, "cannot tell whether %s is in use: %s", path, strerror(e));
  if (unlink(path) != 0 && errno != ENOENT)
    return tn_err_set(err, TN_EIO, "cannot remove the stale socket %s: %s", path, strerror(errno));
  td_log(TD_INFO, "removed a stale socket", "socket=%s", td_q(path));
  return 0;
}

static int open_socket(td_server_t *srv, tn_err_t *err) {
  const char *path = srv->cfg.socket_path;
  char dir[PATH_MAX];
  td_dirname(path, dir, sizeof dir);
  int rc = tn_mkdirs(dir, 0700, err);
  if (rc) return rc;
  struct stat st;
  if (stat(dir, &st) == 0 && (st.st_mode & 077))
    td_log(TD_WARN, "the socket's directory is open to other users; the socket itself is 0600", "dir=%s mode=%o",
           td_q(dir), (unsigned)(st.st_mode & 0777));
  if ((rc = check_socket_free(path, err))) return rc;
  uv_pipe_init(srv->loop, &srv->listener, 0);
  srv->listener.data = srv;
  srv->listening = true;
  mode_t old = umask(0177); /* the socket is born 0600: no window with wider access */
  int uerr = uv_pipe_bind(&srv->listener, path);
  umask(old);
  if (!uerr && chmod(path, 0600) != 0) uerr = uv_translate_sys_error(errno);
  if (!uerr) uerr = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
  if (uerr) return tn_err_set(err, TN_EIO, "cannot listen on %s: %s", path, uv_strerror(uerr));
  return 0;
}

const char *td_job_owner(const td_server_t *srv) { return db_is_url(srv->cfg.db_path) ? srv->cfg.name : NULL; }

/* One daemon per SQLite file: an flock on DB.lock (released when we exit,
 * even by SIGKILL).  A PostgreSQL database is shared, one daemon per name:
 * a lock the server holds for the write connection's life (released when
 * the connection ends, SIGKILL included). */
static int lock_db(td_server_t *srv, tn_err_t *err) {
  if (db_is_url(srv->cfg.db_path)) return db_claim_name(srv->wdb, srv->cfg.name, err);
  char path[PATH_MAX + 8];
  snprintf(path, sizeof path, "%s.lock", srv->cfg.db_path);
  srv->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (srv->lock_fd < 0) return tn_err_set(err, TN_EIO, "cannot open %s: %s", path, strerror(errno));
  if (flock(srv->lock_fd, LOCK_EX | LOCK_NB) != 0)
    return tn_err_set(err, TN_ESTATE, "another tuned is using the database %s (%s is locked); stop it "
                      "or pass another --db", srv->cfg.db_path, path);
  return 0;
}

/* ---- idle connections -------------------------------------------------------- */

/* Closes connections that sent nothing for cfg.idle_timeout seconds and wait
 * for nothing: no request being answered, no answer still being written, no
 * job watched.  A client that forgot its connection cannot hold a slot of
 * the connection cap for good. */
static void on_idle_check(uv_timer_t *t) {
  td_server_t *srv = t->data;
  double now = tn_now();
  for (td_conn_t *c = srv->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing || c->busy || c->wpending > 0 || now - c->last_active < srv->cfg.idle_timeout ||
        td_jobs_conn_watching(srv, c))
      continue;
    td_log(TD_DEBUG, "closing an idle connection", "conn=%llu idle_s=%.1f", (unsigned long long)c->id,
           now - c->last_active);
    td_conn_close_graceful(c);
  }
}

/* ---- shutdown --------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) { (void)h; }

void td_server_maybe_exit(td_server_t *srv) {
  if (!srv->stopping || srv->closed || td_jobs_running(srv) > 0 || srv->inflight_work > 0) return;
  srv->closed = true;
  td_log(TD_INFO, "jobs stopped; closing", "connections=%d", srv->nconns);
  uv_close((uv_handle_t *)&srv->stop_timer, on_handle_closed);
  uv_close((uv_handle_t *)&srv->idle_timer, on_handle_closed);
  uv_close((uv_handle_t *)&srv->listener, on_handle_closed);
  uv_close((uv_handle_t *)&srv->sig_term, on_handle_closed);
  uv_close((uv_handle_t *)&srv->sig_int, on_handle_closed);
  td_readers_close(srv);
  td_jobs_free(srv);
  for (td_conn_t *c = srv->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing) continue;
    td_conn_close_graceful(c);
  }
}

/* A job that does not come to a stop must not keep the daemon forever: what
 * it committed is safe, and it resumes at the next start. */
static void on_stop_timeout(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_log(TD_ERROR, "running jobs did not stop in time; exiting without them (they resume at the next start)",
         "stop_timeout_s=%g running=%d", srv->cfg.stop_timeout, td_jobs_running(srv));
  ms_kill_children(); /* no worker or compiler outlives us, running on */
  unlink(srv->cfg.socket_path);
  _exit(1);
}

void td_server_stop(td_server_t *srv, const char *why) {
  if (srv->stopping) return;
  srv->stopping = true;
  td_log(TD_INFO, "stopping: no new jobs; running jobs stop and are requeued", "why=%s running=%d queued=%d",
         td_q(why), td_jobs_running(srv), td_jobs_queued(srv));
  td_notify("STOPPING=1\nSTATUS=stopping (%s): running jobs stop and resume at the next start", why);
  td_jobs_stop_all(srv);
  uv_timer_start(&srv->stop_timer, on_stop_timeout, (uint64_t)(srv->cfg.stop_timeout * 1e3), 0);
  td_server_maybe_exit(srv);
}

static void on_signal(uv_signal_t *h, int signum) {
  td_server_t *srv = h->data;
  const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
  if (srv->stopping) {
    td_log(TD_WARN, "second signal while stopping: exiting now (running jobs resume at the next start)",
           "signal=%s", name);
    ms_kill_children();
    _exit(1);
  }
  td_server_stop(srv, name);
}

/* ---- run --------------------------------------------------------------------- */

int td_server_open(td_server_t *srv, tn_err_t *err) {
  int rc = db_is_url(srv->cfg.db_path) ? 0 : lock_db(srv, err);
  if (!rc) rc = db_open(srv->cfg.db_path, &srv->wdb, err); /* creates and migrates: before the readers */
  if (!rc && db_is_url(srv->cfg.db_path)) rc = lock_db(srv, err);
  if (!rc) rc = td_jobs_init(srv, err); /* the build pool: before our other threads (it sets the environment) */
  if (!rc) rc = td_readers_start(srv, TD_READERS, err);
  return rc;
}

void td_server_release(td_server_t *srv) {
  td_readers_free(srv);
  db_close(srv->wdb);
  srv->wdb = NULL;
  if (srv->lock_fd >= 0) close(srv->lock_fd);
  srv->lock_fd = -1;
}

static int start(td_server_t *srv, tn_err_t *err) {
  int rc = td_server_open(srv, err);
  if (rc) return rc;
  /* Before the socket listens: a SIGTERM as soon as a client can connect
   * (a service stopped right after its start) stops the daemon, instead of
   * killing it by the signal's default action. */
  uv_signal_init(srv->loop, &srv->sig_term);
  uv_signal_init(srv->loop, &srv->sig_int);
  srv->sig_term.data = srv->sig_int.data = srv;
  uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
  uv_signal_start(&srv->sig_int, on_signal, SIGINT);
  rc = open_socket(srv, err);
  if (rc) return rc;
  uv_timer_init(srv->loop, &srv->stop_timer);
  srv->stop_timer.data = srv;
  uv_timer_init(srv->loop, &srv->idle_timer);
  srv->idle_timer.data = srv;
  if (srv->cfg.idle_timeout > 0) { /* checked a few times per timeout, at least every 10 s */
    uint64_t every = (uint64_t)(TN_MIN(srv->cfg.idle_timeout / 4, 10.0) * 1e3);
    uv_timer_start(&srv->idle_timer, on_idle_check, TN_MAX(every, 50), TN_MAX(every, 50));
  }
  return 0;
}

int td_server_run(const td_config_t *cfg, const td_machine_t *machine) {
  signal(SIGPIPE, SIG_IGN); /* a client that went away is an error code, not a signal */
  /* A write past a file size limit (ulimit -f) is an error (EFBIG) the job
   * reports, not a signal that kills the daemon.  Set after the backends'
   * probe: LLVM (PoCL's, NVRTC's) installs handlers for SIGXFSZ among others
   * and, when one fires, puts back the dispositions it found, SIGTERM's
   * default among them, leaving a daemon that SIGTERM kills outright. */
  signal(SIGXFSZ, SIG_IGN);
  td_server_t *srv = tn_xcalloc(1, sizeof *srv);
  srv->cfg = *cfg;
  srv->machine = *machine;
  srv->lock_fd = -1;
  srv->loop = uv_default_loop();
  srv->started = tn_now();
  srv->started_unix = (double)time(NULL);
  uv_mutex_init(&srv->wdb_lock);
  td_target_list(&srv->machine, &srv->targets, &srv->ntargets);
  tn_err_t err = {0};
  int rc = start(srv, &err);
  int status = 0;
  if (rc) {
    td_log(TD_ERROR, "cannot start", "err=%s", td_q(err.msg));
    fprintf(stderr, "tuned: %s\n", err.msg);
    status = 1;
    if (srv->jobs) td_jobs_free(srv);
    td_readers_close(srv);
    if (srv->listening) uv_close((uv_handle_t *)&srv->listener, on_handle_closed);
    if (srv->sig_term.loop) { /* started before the socket failed */
      uv_close((uv_handle_t *)&srv->sig_term, on_handle_closed);
      uv_close((uv_handle_t *)&srv->sig_int, on_handle_closed);
    }
  } else {
    td_log(TD_INFO, "listening", "socket=%s db=%s target=%s jobs=%d pid=%d", td_q(cfg->socket_path),
           td_q(cfg->db_shown), cfg->target, cfg->max_jobs, (int)getpid());
    td_notify("READY=1\nMAINPID=%d\nSTATUS=listening on %s; target %s; database %s", (int)getpid(),
              cfg->socket_path, cfg->target, cfg->db_shown);
    td_jobs_schedule(srv);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    unlink(cfg->socket_path);
    td_log(TD_INFO, "stopped", "uptime_s=%.1f", tn_now() - srv->started);
  }
  uv_run(srv->loop, UV_RUN_NOWAIT); /* close callbacks of a failed start */
  uv_loop_close(srv->loop);
  td_server_release(srv);
  uv_mutex_destroy(&srv->wdb_lock);
  free(srv->targets);
  free(srv);
  return status;
}
