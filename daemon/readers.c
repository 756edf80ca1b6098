/* readers.c — the database's read path, off the loop thread: a few reader
 * threads, each with its own read-only SQLite connection, answer the queries
 * (db.best, db.records, tune.status, progress notifications, ...).  In WAL
 * mode their reads never wait on the tuner's write transactions, and with
 * threads of their own they never queue behind libuv's thread-pool work
 * (workload parsing, imports, kernel lowering).  Finished reads go back to
 * the loop through a uv_async_t.  Also a spare list of read-only connections
 * for thread-pool work that reads at length. */
#include <stdlib.h>

#include "daemon/td.h"

#define TD_SPARE_RDB 4 /* read-only connections kept for thread-pool work */

typedef struct td_reader {
  td_readers_t *rs;
  db_t *db;
  uv_thread_t thread;
  bool started;
} td_reader_t;

struct td_readers {
  td_server_t *srv;
  td_reader_t *threads;
  int n;
  uv_mutex_t lock;          /* guards everything below */
  uv_cond_t cond;
  td_read_t *queue, **qtail; /* waiting, oldest first */
  td_read_t *done, **dtail;  /* finished, for the loop */
  bool quit;
  bool async_open;
  uv_async_t async;
  db_t *spare[TD_SPARE_RDB];
  int nspare;
};

static void reader_main(void *arg) {
  td_reader_t *t = arg;
  td_readers_t *rs = t->rs;
  for (;;) {
    uv_mutex_lock(&rs->lock);
    while (!rs->queue && !rs->quit) uv_cond_wait(&rs->cond, &rs->lock);
    td_read_t *r = rs->queue;
    if (!r) { /* quit, and nothing is left to read */
      uv_mutex_unlock(&rs->lock);
      return;
    }
    rs->queue = r->next;
    if (!rs->queue) rs->qtail = &rs->queue;
    uv_mutex_unlock(&rs->lock);
    r->next = NULL;
    r->work(r, t->db);
    uv_mutex_lock(&rs->lock);
    *rs->dtail = r;
    rs->dtail = &r->next;
    uv_mutex_unlock(&rs->lock);
    uv_async_send(&rs->async);
  }
}

static void on_done(uv_async_t *h) {
  td_readers_t *rs = h->data;
  td_server_t *srv = rs->srv;
  uv_mutex_lock(&rs->lock);
  td_read_t *r = rs->done;
  rs->done = NULL;
  rs->dtail = &rs->done;
  uv_mutex_unlock(&rs->lock);
  while (r) {
    td_read_t *next = r->next;
    srv->inflight_work--;
    r->done(r); /* may free r */
    r = next;
  }
  td_server_maybe_exit(srv);
}

int td_readers_start(td_server_t *srv, int n, tn_err_t *err) {
  td_readers_t *rs = tn_xcalloc(1, sizeof *rs);
  rs->srv = srv;
  rs->qtail = &rs->queue;
  rs->dtail = &rs->done;
  uv_mutex_init(&rs->lock);
  uv_cond_init(&rs->cond);
  rs->threads = tn_xcalloc((size_t)n, sizeof *rs->threads);
  srv->readers = rs;
  uv_async_init(srv->loop, &rs->async, on_done);
  rs->async.data = rs;
  rs->async_open = true;
  for (int i = 0; i < n; i++) {
    td_reader_t *t = &rs->threads[i];
    t->rs = rs;
    int rc = db_open_readonly(srv->cfg.db_path, &t->db, err);
    if (rc) return tn_err_prefix(err, "reader %d", i);
    db_set_run_secs_text(t->db, true); /* answers pass the stored run times on as JSON */
    rs->n++;
    if (uv_thread_create(&t->thread, reader_main, t) != 0)
      return tn_err_set(err, TN_EIO, "cannot start reader thread %d", i);
    t->started = true;
  }
  return 0;
}

static void on_async_closed(uv_handle_t *h) { (void)h; }

void td_readers_close(td_server_t *srv) {
  td_readers_t *rs = srv->readers;
  if (!rs || !rs->async_open) return;
  rs->async_open = false;
  uv_close((uv_handle_t *)&rs->async, on_async_closed);
}

void td_readers_free(td_server_t *srv) {
  td_readers_t *rs = srv->readers;
  if (!rs) return;
  srv->readers = NULL;
  uv_mutex_lock(&rs->lock);
  rs->quit = true;
  uv_cond_broadcast(&rs->cond);
  uv_mutex_unlock(&rs->lock);
  for (int i = 0; i < rs->n; i++) {
    if (rs->threads[i].started) uv_thread_join(&rs->threads[i].thread);
    db_close(rs->threads[i].db);
  }
  for (int i = 0; i < rs->nspare; i++) db_close(rs->spare[i]);
  uv_cond_destroy(&rs->cond);
  uv_mutex_destroy(&rs->lock);
  free(rs->threads);
  free(rs);
}

int td_read_queue(td_server_t *srv, td_read_t *r, void (*work)(td_read_t *, db_t *), void (*done)(td_read_t *)) {
  td_readers_t *rs = srv->readers;
  if (!rs || !rs->async_open) return -1;
  r->work = work;
  r->done = done;
  r->next = NULL;
  uv_mutex_lock(&rs->lock);
  *rs->qtail = r;
  rs->qtail = &r->next;
  uv_mutex_unlock(&rs->lock);
  uv_cond_signal(&rs->cond); /* after the unlock: the reader it wakes does not wait for the lock */
  srv->inflight_work++;
  return 0;
}

db_t *td_rdb_acquire(td_server_t *srv, tn_err_t *err) {
  td_readers_t *rs = srv->readers;
  db_t *db = NULL;
  uv_mutex_lock(&rs->lock);
  if (rs->nspare > 0) db = rs->spare[--rs->nspare];
  uv_mutex_unlock(&rs->lock);
  if (!db && db_open_readonly(srv->cfg.db_path, &db, err) != 0) return NULL;
  return db;
}

void td_rdb_release(td_server_t *srv, db_t *db) {
  td_readers_t *rs = srv->readers;
  uv_mutex_lock(&rs->lock);
  if (rs->nspare < TD_SPARE_RDB) rs->spare[rs->nspare++] = db, db = NULL;
  uv_mutex_unlock(&rs->lock);
  db_close(db); /* more than the list keeps */
}
