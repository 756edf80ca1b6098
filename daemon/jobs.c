/* jobs.c — the job registry, on the loop: jobs persisted in the database,
 * at most --jobs of them running, each on its own thread (job_thread.c)
 * running srch_tune with one build pool shared by all (candidates take
 * turns on each device: measure/'s ms_device_acquire); the threads post
 * progress and ends as events (td_job_post) that reach the loop through a
 * uv_async_t and the watchers as tune.progress notifications.  Unfinished
 * jobs resume after a restart; on a shared database a poll joins other
 * daemons' jobs.  The RPC answers about jobs are methods_jobs.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/jobs.h"

/* ---- the loop side ----------------------------------------------------------------- */

td_job_t *td_job_find(td_job_t *list, int64_t id) {
  for (; list; list = list->next)
    if (list->id == id) return list;
  return NULL;
}

static void unlink_job(td_job_t **list, td_job_t *j) {
  for (td_job_t **p = list; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      j->next = NULL;
      return;
    }
}

static void drop_watchers(td_job_t *j) {
  for (int i = 0; i < j->nwatch; i++) td_conn_unref(j->watch[i]);
  j->nwatch = 0;
}

static td_job_t *find_known(td_jobs_t *m, int64_t id) {
  td_job_t *j = td_job_find(m->active, id);
  return j ? j : td_job_find(m->ended, id);
}

/* The job's object read for its watchers (tune.progress) and, once the job
 * ended, for its cancel requests: on a reader thread, one read per job at a
 * time so that notifications go out in order. */
typedef struct job_read {
  td_read_t read;
  td_server_t *srv;
  int64_t id;
  bool last;          /* read after the job ended: the last word */
  bool follow;        /* a follow's read: sent only if it changed */
  cJSON *job;         /* out (NULL: err) */
  tn_err_t err;
} job_read_t;

/* A read that fails on a connection the server dropped (a restart) is
 * tried once more, on the new connection the next statement opens; one
 * that fails still because the database is away is tried again by the
 * follow timer (the watchers' last word must not be lost to it). */
static void job_read_work(td_read_t *rd, db_t *db) {
  job_read_t *r = (job_read_t *)rd;
  r->job = td_job_read(db, r->id, &r->err);
  if (!r->job && r->err.code == TN_EAGAIN) r->job = td_job_read(db, r->id, &r->err);
}

/* Sends the job object to the watchers (a follow's: only when it differs
 * from the last one sent). */
static void send_to_watchers(td_job_t *j, const cJSON *job, bool changes_only) {
  if (j->nwatch == 0) return;
  char *text = cJSON_PrintUnformatted(job);
  bool same = text && j->last_sent && strcmp(text, j->last_sent) == 0;
  free(j->last_sent);
  j->last_sent = text;
  if (same && changes_only) return;
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "jsonrpc", "2.0");
  cJSON_AddStringToObject(n, "method", "tune.progress");
  cJSON_AddItemReferenceToObject(n, "params", (cJSON *)job);
  char *s = cJSON_PrintUnformatted(n);
  cJSON_Delete(n);
  /* td_conn_send may drop a slow watcher (and so edit the list): copy it. */
  int nw = j->nwatch;
  td_conn_t **ws = tn_xmalloc(sizeof *ws * (size_t)nw);
  memcpy(ws, j->watch, sizeof *ws * (size_t)nw);
  for (int i = 0; i < nw; i++) td_conn_ref(ws[i]);
  for (int i = 0; i < nw; i++) td_conn_send(ws[i], s, strlen(s), true);
  for (int i = 0; i < nw; i++) td_conn_unref(ws[i]);
  free(ws);
  free(s);
}

/* Whether a job object's state is final. */
bool td_job_over(const cJSON *job) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(job, "state");
  db_job_state_t state;
  return cJSON_IsString(st) && db_job_state_parse(st->valuestring, &state, NULL) == 0 && db_job_state_final(state);
}

/* The watchers' connections closed: the job cannot be followed (its last
 * read failed for good), and a watcher must not wait for a word that never
 * comes. */
static void close_watchers(td_job_t *j, const tn_err_t *err) {
  td_log(TD_ERROR, "cannot read a watched job: closing its watchers' connections", "job=%lld watchers=%d err=%s",
         (long long)j->id, j->nwatch, td_q(err->msg));
  for (int i = 0; i < j->nwatch; i++) td_conn_close_graceful(j->watch[i]);
}

static void job_read_done(td_read_t *rd) {
  job_read_t *r = (job_read_t *)rd;
  td_server_t *srv = r->srv;
  td_job_t *j = srv->jobs ? find_known(srv->jobs, r->id) : NULL;
  if (j) j->reading = false;
  if (j && !r->job && r->err.code == TN_EAGAIN && !srv->stopping) {
    td_log(TD_DEBUG, "cannot read a watched job: the database is away (tried again)", "job=%lld err=%s",
           (long long)j->id, td_q(r->err.msg));
  } else if (j) {
    if (r->job) {
      td_job_live(srv, r->job);
      send_to_watchers(j, r->job, r->follow);
    }
    if (r->last) {
      if (!r->job && j->nwatch > 0) close_watchers(j, &r->err);
      drop_watchers(j);
      for (int i = 0; i < j->ncancel; i++) {
        td_req_t *req = j->cancels[i];
        if (r->job) req->result = cJSON_Duplicate(r->job, true);
        else td_req_tn_error(req, TD_E_NOT_FOUND, &r->err);
        td_req_finish(req);
      }
      j->ncancel = 0;
      j->finished = true;
    } else if (r->job && !j->running && !j->ended && !j->cancelling && td_job_over(r->job)) {
      td_job_finish(srv, j); /* over on another daemon (done, cancelled, failed): the last word follows */
    } else if (j->again || j->ended) {
      j->again = false;
      td_job_refresh(srv, j, false);
    }
  }
  cJSON_Delete(r->job);
  free(r);
}

void td_job_refresh(td_server_t *srv, td_job_t *j, bool follow) {
  if (j->finished) return;
  if (j->reading) {
    j->again |= !follow;
    return;
  }
  if (!j->ended && j->nwatch == 0) return;
  if (j->ended && j->nwatch == 0 && j->ncancel == 0) {
    j->finished = true; /* nobody to tell */
    return;
  }
  job_read_t *r = tn_xcalloc(1, sizeof *r);
  r->srv = srv;
  r->id = j->id;
  r->last = j->ended;
  r->follow = follow && !j->ended;
  if (td_read_queue(srv, &r->read, job_read_work, job_read_done) != 0) {
    free(r); /* the daemon has closed: nobody waits any more */
    return;
  }
  j->reading = true;
}

static void free_job(td_job_t *j) {
  drop_watchers(j);
  free(j->watch);
  free(j->cancels);
  free(j->last_sent);
  free(j);
}

/* The ended jobs kept for what only memory says of them (this daemon's
 * failure counts, an end the database could not take): the newest
 * TD_ENDED_KEEP, and any whose last word has not gone out yet.  A daemon
 * that runs for months runs as many jobs. */
#define TD_ENDED_KEEP 256

static void prune_ended(td_jobs_t *m) {
  int n = 0;
  for (td_job_t **p = &m->ended; *p;) {
    td_job_t *j = *p;
    if (++n > TD_ENDED_KEEP && j->finished && !j->end_unsaved) {
      *p = j->next;
      free_job(j);
    } else {
      p = &j->next;
    }
  }
}

/* The job is over (ended, cancelled while queued, ended on another daemon):
 * it moves to the ended list; the last notification and the cancel
 * answers follow its last read. */
void td_job_finish(td_server_t *srv, td_job_t *j) {
  td_jobs_t *m = srv->jobs;
  unlink_job(&m->active, j);
  j->ended = true;
  j->next = m->ended;
  m->ended = j;
  td_job_refresh(srv, j, false);
  prune_ended(m);
}

/* Shared queue: every TD_FOLLOW_MS the watched jobs are read again (their
 * progress on other daemons, an end written there), and a last read that
 * found the database away is tried again. */
#define TD_FOLLOW_MS 1000

static void on_follow_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping) return;
  for (td_job_t *j = m->active; j; j = j->next)
    if (j->nwatch > 0) td_job_refresh(srv, j, true);
  for (td_job_t *j = m->ended; j; j = j->next)
    if (!j->finished) td_job_refresh(srv, j, false);
}

static void handle_event(td_server_t *srv, td_event_t *e) {
  td_job_t *j = td_job_find(srv->jobs->active, e->job);
  if (!j) return;
  if (e->kind != EV_START && e->trials_done >= 0) j->trials_done = e->trials_done;
  if (e->kind == EV_PROGRESS) memcpy(j->failures, e->failures, sizeof j->failures);
  if (e->kind != EV_END) {
    td_job_refresh(srv, j, false);
    return;
  }
  uv_thread_join(&j->thread); /* it has posted its last event and is returning */
  j->running = false;
  srv->jobs->nrunning--;
  td_job_finish(srv, j);
}

static void on_async(uv_async_t *h) {
  td_server_t *srv = h->data;
  td_jobs_t *m = srv->jobs;
  uv_mutex_lock(&m->lock);
  td_event_t *e = m->events;
  m->events = NULL;
  m->tail = &m->events;
  uv_mutex_unlock(&m->lock);
  bool ended = false;
  while (e) {
    td_event_t *next = e->next;
    ended |= e->kind == EV_END;
    handle_event(srv, e);
    free(e);
    e = next;
  }
  if (ended) {
    td_jobs_schedule(srv);
    td_server_maybe_exit(srv);
  }
}

/* Whether this daemon measures jobs of the target: on a shared queue only
 * its own target's (with or without TF32), elsewhere any it can stand in
 * for (target_usable decides). */
static bool serves(const td_server_t *srv, const char *target) {
  if (!db_is_url(srv->cfg.db_path)) return true;
  size_t n = strlen(srv->cfg.target);
  return strncmp(target, srv->cfg.target, n) == 0 && (!target[n] || strcmp(target + n, "+tf32") == 0);
}

td_job_t *td_job_new(td_jobs_t *m, int64_t id, const char *target) {
  td_job_t *j = tn_xcalloc(1, sizeof *j);
  j->id = id;
  j->mgr = m;
  snprintf(j->target, sizeof j->target, "%s", target);
  j->remote = !serves(m->srv, target);
  atomic_init(&j->stop, STOP_NONE);
  td_job_t **p = &m->active;
  while (*p) p = &(*p)->next;
  *p = j;
  return j;
}

/* ---- the shared queue's poll ----------------------------------------------------------- */

/* Jobs of this daemon's target with a batch to lease, submitted to any
 * daemon: each gets a job thread here too (when a slot is free), which
 * leases their batches beside the other daemons. */
typedef struct poll_work {
  uv_work_t w;
  td_server_t *srv;
  int64_t ids[16];
  size_t n;
} poll_work_t;

static void poll_run(uv_work_t *w) {
  poll_work_t *pw = w->data;
  td_server_t *srv = pw->srv;
  tn_err_t err = {0};
  uv_mutex_lock(&srv->wdb_lock);
  int rc = db_batch_jobs_open(srv->wdb, srv->cfg.target, pw->ids, TN_ARRAY_LEN(pw->ids), &pw->n, &err);
  uv_mutex_unlock(&srv->wdb_lock);
  if (rc) td_log(TD_WARN, "cannot look for batches to lease", "err=%s", td_q(err.msg));
}

static void poll_done(uv_work_t *w, int status) {
  (void)status;
  poll_work_t *pw = w->data;
  td_server_t *srv = pw->srv;
  td_jobs_t *m = srv->jobs;
  srv->inflight_work--;
  if (m && !srv->stopping) {
    m->polling = false;
    bool added = false;
    for (size_t i = 0; i < pw->n; i++) {
      td_job_t *known = td_job_find(m->active, pw->ids[i]);
      if (known && known->remote && !known->cancelling) { /* followed for a watcher until now: measured here too */
        known->remote = false;
        added = true;
      }
      if (known) continue;
      td_log(TD_INFO, "joining a shared job: its batches are leasable", "job=%lld target=%s", (long long)pw->ids[i],
             srv->cfg.target);
      td_job_new(m, pw->ids[i], srv->cfg.target);
      added = true;
    }
    if (added) td_jobs_schedule(srv);
  }
  free(pw);
  td_server_maybe_exit(srv);
}

static void on_poll_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping || m->polling || m->nrunning >= srv->cfg.max_jobs) return;
  poll_work_t *pw = tn_xcalloc(1, sizeof *pw);
  pw->srv = srv;
  pw->w.data = pw;
  if (uv_queue_work(srv->loop, &pw->w, poll_run, poll_done) != 0) {
    free(pw);
    return;
  }
  m->polling = true;
  srv->inflight_work++;
}

typedef struct builder_start {
  int nice;
  ms_builder_t *builder;
  int rc;
  tn_err_t *err;
} builder_start_t;

static void builder_start(void *arg) {
  builder_start_t *bs = arg;
  td_job_lower_priority(bs->nice);
  bs->rc = ms_builder_new(NULL, &bs->builder, bs->err);
}

int td_jobs_init(td_server_t *srv, tn_err_t *err) {
  td_jobs_t *m = tn_xcalloc(1, sizeof *m);
  m->srv = srv;
  m->tail = &m->events;
  uv_mutex_init(&m->lock);
  uv_async_init(srv->loop, &m->async, on_async);
  m->async.data = srv;
  uv_timer_init(srv->loop, &m->cancel_timer);
  m->cancel_timer.data = srv;
  uv_timer_init(srv->loop, &m->poll_timer);
  m->poll_timer.data = srv;
  uv_timer_init(srv->loop, &m->follow_timer);
  m->follow_timer.data = srv;
  m->open_handles = 4;
  bool queue = db_is_url(srv->cfg.db_path);
  if (queue) { /* a few polls per lease: a dead daemon's batch waits little longer than its lease */
    uint64_t every = (uint64_t)(TN_MIN(TN_MAX(srv->cfg.lease_s / 4, 0.25), 2.0) * 1000);
    uv_timer_start(&m->poll_timer, on_poll_timer, every, every);
    uv_timer_start(&m->follow_timer, on_follow_timer, TD_FOLLOW_MS, TD_FOLLOW_MS);
  }
  srv->jobs = m;
  /* Before any thread of ours: the pool sets POCL_CACHE_DIR for the
   * daemon's life (its temp dir outlives every job's worker).  Made on a
   * thread of its own at the tuning priority, which its threads (and the
   * compilers they run) inherit. */
  builder_start_t bs = {.nice = srv->cfg.tune_nice, .err = err};
  uv_thread_t th;
  if (uv_thread_create(&th, builder_start, &bs) != 0) return tn_err_set(err, TN_EIO, "cannot start a thread");
  uv_thread_join(&th);
  m->builder = bs.builder;
  int rc = bs.rc;
  if (rc) return tn_err_prefix(err, "build pool");
  db_jobs_t jobs;
  rc = db_jobs_unfinished(srv->wdb, td_job_owner(srv), &jobs, err);
  if (rc) return rc;
  for (size_t i = 0; i < jobs.n && !rc; i++) {
    const db_job_t *jb = &jobs.items[i];
    if (!serves(srv, jb->target_name)) continue; /* submitted here, measured by its target's daemons */
    if (jb->state == DB_JOB_RUNNING && !queue) { /* shared: others may be measuring it; it stays running */
      db_job_progress_t pr = {DB_JOB_QUEUED, -1, 0, NULL};
      rc = db_job_update(srv->wdb, jb->id, &pr, err);
    }
    td_log(TD_INFO, "resuming an unfinished job", "job=%lld was=%s trials_done=%lld budget=%lld target=%s",
           (long long)jb->id, db_job_state_name(jb->state), (long long)jb->trials_done,
           (long long)jb->budget_trials, jb->target_name);
    td_job_new(m, jb->id, jb->target_name)->trials_done = jb->trials_done;
  }
  db_jobs_free(&jobs);
  return rc;
}

static void free_list(td_job_t *j) {
  while (j) {
    td_job_t *next = j->next;
    free_job(j);
    j = next;
  }
}

static void on_handle_closed(uv_handle_t *h) {
  td_jobs_t *m = h->data;
  if (--m->open_handles == 0) free(m);
}

void td_jobs_free(td_server_t *srv) {
  td_jobs_t *m = srv->jobs;
  if (!m) return;
  srv->jobs = NULL;
  free_list(m->active);
  free_list(m->ended);
  ms_builder_free(m->builder); /* no job runs any more: nothing is queued */
  for (td_event_t *e = m->events, *next; e; e = next) next = e->next, free(e);
  uv_mutex_destroy(&m->lock);
  /* the handles live in m: freed once all closed */
  m->async.data = m->cancel_timer.data = m->poll_timer.data = m->follow_timer.data = m;
  uv_close((uv_handle_t *)&m->async, on_handle_closed);
  uv_close((uv_handle_t *)&m->cancel_timer, on_handle_closed);
  uv_close((uv_handle_t *)&m->poll_timer, on_handle_closed);
  uv_close((uv_handle_t *)&m->follow_timer, on_handle_closed);
}

void td_jobs_add(td_server_t *srv, int64_t id, const char *target) {
  if (!srv->jobs) return;
  if (!serves(srv, target)) { /* followed here only while someone watches it */
    td_log(TD_INFO, "job left to the daemons of its target", "job=%lld target=%s", (long long)id, target);
    return;
  }
  td_job_new(srv->jobs, id, target);
  td_jobs_schedule(srv);
}

static bool target_usable(td_server_t *srv, td_job_t *j) {
  for (int i = 0; i < srv->ntargets; i++)
    if (strcmp(srv->targets[i].t.name, j->target) == 0) return srv->targets[i].usable;
  td_target_info_t ti;
  tn_err_t err;
  return td_target_check(&srv->machine, j->target, &ti, &err) == 0 && ti.usable;
}

void td_jobs_schedule(td_server_t *srv) {
  td_jobs_t *m = srv->jobs;
  if (!m || srv->stopping) return;
  for (td_job_t *j = m->active; j && m->nrunning < srv->cfg.max_jobs; j = j->next) {
    if (j->running || j->cancelling || j->remote) continue;
    if (!target_usable(srv, j)) {
      if (!j->skip_logged)
        td_log(TD_WARN, "job stays queued: its target cannot be measured here", "job=%lld target=%s",
               (long long)j->id, j->target);
      j->skip_logged = true;
      continue;
    }
    if (uv_thread_create(&j->thread, td_job_main, j) != 0) {
      td_log(TD_ERROR, "cannot start a job thread", "job=%lld", (long long)j->id);
      return;
    }
    j->running = true;
    m->nrunning++;
  }
}

int td_jobs_running(const td_server_t *srv) { return srv->jobs ? srv->jobs->nrunning : 0; }

int td_jobs_queued(const td_server_t *srv) {
  int n = 0;
  for (td_job_t *j = srv->jobs ? srv->jobs->active : NULL; j; j = j->next) n += !j->running && !j->remote;
  return n;
}

void td_jobs_stop_all(td_server_t *srv) {
  for (td_job_t *j = srv->jobs ? srv->jobs->active : NULL; j; j = j->next) {
    int none = STOP_NONE;
    if (j->running) atomic_compare_exchange_strong(&j->stop, &none, STOP_SHUTDOWN);
  }
}

void td_job_live(td_server_t *srv, cJSON *job) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "job");
  td_job_t *live = srv->jobs && cJSON_IsNumber(id) ? find_known(srv->jobs, (int64_t)id->valuedouble) : NULL;
  if (!live) return;
  /* the thread's count may be ahead of the last committed row */
  cJSON *done = cJSON_GetObjectItemCaseSensitive(job, "trials_done");
  if (cJSON_IsNumber(done) && (double)live->trials_done > done->valuedouble)
    cJSON_SetNumberValue(done, (double)live->trials_done);
  cJSON *f = cJSON_GetObjectItemCaseSensitive(job, "failures");
  for (int s = MS_BUILD_ERROR; s < MS_STATUS__COUNT; s++) {
    cJSON *n = cJSON_GetObjectItemCaseSensitive(f, ms_status_name((ms_status_t)s));
    if (n) cJSON_SetNumberValue(n, live->failures[s]);
  }
  /* what the row cannot say yet: a cancel already answered, or an end the
   * database could not take (a full disk) */
  db_job_state_t st;
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(job, "state");
  if (!cJSON_IsString(state) || db_job_state_parse(state->valuestring, &st, NULL) != 0 || db_job_state_final(st))
    return;
  if (live->ended && live->end_unsaved) {
    cJSON_ReplaceItemInObjectCaseSensitive(job, "state", cJSON_CreateString(db_job_state_name(live->end_state)));
    if (live->end_error[0])
      cJSON_ReplaceItemInObjectCaseSensitive(job, "error", cJSON_CreateString(live->end_error));
  } else if (live->cancel_answered) {
    cJSON_ReplaceItemInObjectCaseSensitive(job, "state", cJSON_CreateString(db_job_state_name(DB_JOB_CANCELLED)));
  }
}

/* ---- watch and cancel -------------------------------------------------------------- */

bool td_jobs_watch(td_server_t *srv, int64_t id, td_conn_t *c) {
  td_job_t *j = srv->jobs ? td_job_find(srv->jobs->active, id) : NULL;
  if (!j) return false; /* over already: the answer is the last word */
  for (int i = 0; i < j->nwatch; i++)
    if (j->watch[i] == c) return true;
  if (j->nwatch == j->capwatch)
    j->watch = tn_xrealloc(j->watch, sizeof *j->watch * (size_t)(j->capwatch = j->capwatch * 2 + 4));
  j->watch[j->nwatch++] = c;
  td_conn_ref(c);
  return true;
}

/* Watchers stay on an ended job until its last notification went out. */
static bool watches(const td_job_t *list, const td_conn_t *c) {
  for (const td_job_t *j = list; j; j = j->next)
    for (int i = 0; i < j->nwatch; i++)
      if (j->watch[i] == c) return true;
  return false;
}

bool td_jobs_conn_watching(const td_server_t *srv, const td_conn_t *c) {
  return srv->jobs && (watches(srv->jobs->active, c) || watches(srv->jobs->ended, c));
}

static void forget_watcher(td_job_t *list, td_conn_t *c) {
  for (td_job_t *j = list; j; j = j->next)
    for (int i = 0; i < j->nwatch; i++)
      if (j->watch[i] == c) {
        j->watch[i] = j->watch[--j->nwatch];
        td_conn_unref(c);
        break;
      }
}

void td_jobs_conn_closed(td_server_t *srv, td_conn_t *c) {
  if (!srv->jobs) return;
  forget_watcher(srv->jobs->active, c);
  forget_watcher(srv->jobs->ended, c);
}
