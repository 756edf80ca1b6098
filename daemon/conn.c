/* conn.c — the daemon's connections: accepting them (a cap in all and per
 * client process), reading with backpressure, framing lines (one JSON-RPC
 * message each, TUNED_MAX_MESSAGE at most), bounded write queues, and
 * closing.  Networking only: a framed line goes to srv->on_line (the
 * JSON-RPC dispatch, rpc.c) and a closed connection to srv->on_conn_closed
 * (the job registry), so this file calls nothing above it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
  srv->on_conn_closed(srv, c); /* the job registry forgets its watches */
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
  c->srv->on_conn_closed(c->srv, c);
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
    c->srv->on_line(c, line, len);
  }
  size_t rest = c->in.len - c->in_off;
  if (!c->closing && rest > TUNED_MAX_MESSAGE && c->scan_off == c->in.len) oversized(c);
  if (!c->closing && c->eof && !c->busy && c->wpending < TD_WRITE_SOFT && c->scan_off == c->in.len) {
    /* The client closed its side: a last line without '\n' still counts. */
    if (rest > 0) {
      line = c->in.data + c->in_off;
      c->in_off = c->scan_off = c->in.len;
      c->srv->on_line(c, line, rest);
    }
    if (!c->busy) td_conn_close_graceful(c);
  }
  if (!c->closing) compact(c);
  c->processing = false;
  if (!c->closing) update_reading(c);
}

void td_conn_accept(uv_stream_t *server, int status) {
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
