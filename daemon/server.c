/* server.c — the libuv loop on one thread: the unix socket (0600 in a private
 * directory; its connections are conn.c's), signals, idle connections, and
 * the orderly shutdown that waits for running jobs.  It wires the layers
 * together: the hooks through which connections, requests, readers and the
 * job registry reach the dispatch and the shutdown (td_server_open). */
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

/* Reader threads (readers.c): queries are short, so a few keep every core
 * busy and one slow query (a db.records page of 1,000) does not hold the
 * others up. */
#define TD_READERS 4

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
  if (!uerr) uerr = uv_listen((uv_stream_t *)&srv->listener, 128, td_conn_accept);
  if (uerr) return tn_err_set(err, TN_EIO, "cannot listen on %s: %s", path, uv_strerror(uerr));
  return 0;
}

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

static void maybe_exit(td_server_t *srv) {
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

static void stop(td_server_t *srv, const char *why) {
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
  srv->on_line = td_rpc_line;
  srv->on_conn_closed = td_jobs_conn_closed;
  srv->on_settled = maybe_exit;
  srv->on_stop = stop;
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
