/* methods_jobs.c — tune.submit (parsing and storing on the thread pool),
 * tune.status, tune.list, tune.cancel, tune.watch and tune.trials: the
 * answers with a job object (read on a reader thread, the registry's live
 * counters added on the loop), a watch's notifications from then on, and a
 * cancel answered once the job has stopped (or from memory when its thread
 * takes too long). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/jobs.h"
#include "ir/ir.h"
#include "search/search.h"

static const char *const strategies[] = {"evolutionary", "replay", NULL};
static const char *const models[] = {"xgb", "random", NULL};

typedef struct submit {
  char name[64];
  char *text;
  cJSON *overrides;     /* {"M": 64} or NULL */
  td_target_info_t target;
  int64_t trials, seed, batch_size, population, remeasure;
  double seconds;
  int strategy, model;
  bool baseline;
  int64_t job;          /* out */
  char hash[TN_ID_SIZE]; /* out */
} submit_t;

static void submit_free(void *p) {
  submit_t *s = p;
  free(s->text);
  cJSON_Delete(s->overrides);
  free(s);
}

static char *options_json(const submit_t *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "strategy", strategies[s->strategy]);
  cJSON_AddStringToObject(o, "model", models[s->model]);
  if (s->batch_size) cJSON_AddNumberToObject(o, "batch_size", (double)s->batch_size);
  if (s->population) cJSON_AddNumberToObject(o, "population", (double)s->population);
  cJSON_AddNumberToObject(o, "remeasure", (double)s->remeasure);
  cJSON_AddBoolToObject(o, "baseline", s->baseline);
  char *t = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return t;
}

/* Stores workload, target and job in one transaction: the job thread
 * finds the workload registered (srch_task_t.workload_id). */
static int store(td_server_t *srv, submit_t *s, const ir_workload_t *w, tn_err_t *err) {
  char *target_json = tn_target_to_json(&s->target.t), *options = options_json(s);
  db_target_t tr = {.name = s->target.t.name, .kind = tn_target_kind_name(s->target.t.kind),
                    .arch = s->target.t.arch, .json = target_json};
  db_job_t job = {.budget_trials = s->trials, .budget_seconds = s->seconds, .seed = (uint64_t)s->seed,
                  .options = options, .owner = td_job_owner(srv)};
  uv_mutex_lock(&srv->wdb_lock);
  int rc = db_tx_begin(srv->wdb, err);
  if (!rc) rc = srch_workload_register(srv->wdb, w, s->hash, &job.workload_id, err);
  if (!rc) rc = db_target_upsert(srv->wdb, &tr, &job.target_id, err);
  if (!rc) rc = db_job_create(srv->wdb, &job, err);
  if (!rc) rc = db_tx_commit(srv->wdb, err);
  else db_tx_rollback(srv->wdb);
  uv_mutex_unlock(&srv->wdb_lock);
  s->job = job.id;
  free(target_json);
  free(options);
  return rc;
}

static void submit_work(td_req_t *req) {
  submit_t *s = req->data;
  tn_err_t err = {0};
  ir_workload_t *w = NULL;
  char *params = s->overrides ? cJSON_PrintUnformatted(s->overrides) : NULL;
  if (ir_workload_parse_stored(s->name, s->text, params, &w, &err) != 0 || ir_eval_check_work(w->func, &err) != 0) {
    td_req_error(req, TD_E_WORKLOAD, "%s", err.msg);
  } else {
    ir_func_hash(w->func, s->hash);
    if (store(req->srv, s, w, &err) != 0) td_req_tn_error(req, TD_E_INTERNAL, &err);
  }
  free(params);
  ir_workload_free(w);
}

static void submit_done(td_req_t *req) {
  submit_t *s = req->data;
  if (req->code) return;
  td_log(TD_INFO, "job submitted", "job=%lld workload=%s name=%s target=%s trials=%lld", (long long)s->job,
         s->hash, s->name, s->target.t.name, (long long)s->trials);
  req->result = cJSON_CreateObject();
  cJSON_AddNumberToObject(req->result, "job", (double)s->job);
  cJSON_AddStringToObject(req->result, "workload", s->hash);
  td_jobs_add(req->srv, s->job, s->target.t.name);
}

/* A workload name becomes NAME.tw in parser messages: keep it a plain file stem. */
static bool valid_name(const char *s) {
  if (!s[0] || strlen(s) > 47) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '-' || *s == '.'))
      return false;
  return true;
}

td_reply_t td_m_tune_submit(td_req_t *req) {
  submit_t *s = tn_xcalloc(1, sizeof *s);
  req->data = s;
  req->free_data = submit_free;
  const char *text, *name;
  bool tf32;
  if (td_param_str(req, "workload", true, TUNED_MAX_MESSAGE, &text) ||
      td_param_str(req, "name", false, 47, &name) ||
      td_param_overrides(req, "params", &s->overrides) ||
      td_param_bool(req, "allow_tf32", false, &tf32) ||
      /* a shared queue takes any target: its own daemons measure it */
      td_param_target_tf32(req, "target", !db_is_url(req->srv->cfg.db_path), tf32, &s->target) ||
      td_param_int(req, "trials", false, 64, 1, 1000000, &s->trials) ||
      td_param_num(req, "seconds", 0, 0, 1e9, &s->seconds) ||
      td_param_int(req, "seed", false, 1, 0, (INT64_C(1) << 53), &s->seed) ||
      td_param_enum(req, "strategy", strategies, 0, &s->strategy) ||
      td_param_enum(req, "model", models, 0, &s->model) ||
      td_param_int(req, "batch_size", false, 0, 1, 4096, &s->batch_size) ||
      /* below 64 the search's fresh-sample round can spin once records exist
       * (init_min_unmeasured 50 + 20 % seeds); see the search module */
      td_param_int(req, "population", false, 0, 64, 100000, &s->population) ||
      td_param_int(req, "remeasure", false, 8, 0, 64, &s->remeasure) ||
      td_param_bool(req, "baseline", true, &s->baseline))
    return TD_REPLY;
  if (name && !valid_name(name))
    return td_req_error(req, TD_E_PARAMS, "invalid param \"name\": \"%s\" must be a file stem of letters, "
                        "digits, '_', '-' or '.' (at most 47), e.g. \"matmul\"", name);
  snprintf(s->name, sizeof s->name, "%s", name ? name : "workload");
  s->text = tn_xstrdup(text);
  return td_req_queue_work(req, submit_work, submit_done);
}

/* ---- answers with a job object ------------------------------------------------------- */

static void job_answer_read(td_req_t *req, db_t *db) {
  tn_err_t err = {0};
  req->result = td_job_read(db, *(int64_t *)req->data, &err);
  if (!req->result) td_req_tn_error(req, TD_E_NOT_FOUND, &err);
}

static void job_answer_done(td_req_t *req) {
  if (req->result) td_job_live(req->srv, req->result);
}

static void set_job_id(td_req_t *req, int64_t id) {
  if (req->free_data) req->free_data(req->data);
  int64_t *p = tn_xmalloc(sizeof *p);
  *p = id;
  req->data = p;
  req->free_data = free;
}

static td_reply_t answer_job(td_req_t *req, int64_t id) {
  set_job_id(req, id);
  return td_req_queue_read(req, job_answer_read, job_answer_done);
}

/* tune.watch: the answer, then notifications.  The watcher is added once the
 * answer is read, so that every notification it gets is newer; a job that
 * ended meanwhile is read once more, so its answer is the last word. */
typedef struct watch_req {
  int64_t id;
  bool reread;
} watch_req_t;

static void watch_read(td_req_t *req, db_t *db) {
  watch_req_t *w = req->data;
  tn_err_t err = {0};
  req->result = td_job_read(db, w->id, &err);
  if (!req->result) td_req_tn_error(req, TD_E_NOT_FOUND, &err);
}

/* Shared queue: a job unfinished in the database that this daemon neither
 * runs nor has run (another target's, or one its poll has not joined) is
 * followed from the database for the watcher (on_follow_timer). */
static bool follow_new(td_server_t *srv, int64_t id, const cJSON *job) {
  td_jobs_t *m = srv->jobs;
  const cJSON *target = cJSON_GetObjectItemCaseSensitive(job, "target");
  if (!m || srv->stopping || !db_is_url(srv->cfg.db_path) || td_job_find(m->ended, id) || !cJSON_IsString(target))
    return false;
  td_job_new(m, id, target->valuestring)->remote = true; /* a poll makes it this daemon's work when it is */
  td_log(TD_DEBUG, "following a job for a watcher", "job=%lld target=%s", (long long)id, target->valuestring);
  return true;
}

static void watch_done(td_req_t *req) {
  watch_req_t *w = req->data;
  if (!req->result) return;
  td_job_live(req->srv, req->result);
  bool final = td_job_over(req->result);
  if (req->conn && !req->conn->closing) {
    if (td_jobs_watch(req->srv, w->id, req->conn)) return;
    if (!final && follow_new(req->srv, w->id, req->result) && td_jobs_watch(req->srv, w->id, req->conn)) return;
  }
  if (final || w->reread) return;
  w->reread = true;
  cJSON_Delete(req->result);
  req->result = NULL;
  td_req_queue_read(req, watch_read, watch_done);
}

static td_reply_t answer_watch(td_req_t *req, int64_t id) {
  watch_req_t *w = tn_xcalloc(1, sizeof *w);
  w->id = id;
  req->data = w;
  req->free_data = free;
  return td_req_queue_read(req, watch_read, watch_done);
}

/* ---- cancel ----------------------------------------------------------------------------- */

/* A running job that has not ended this long after tune.cancel (in work
 * that polls nothing: training the cost model, a commit waiting for another
 * process's lock on the database) is answered cancelled by the loop itself,
 * from memory, whatever the thread is doing; the row is written in the
 * background, and the thread ends when it next polls. */
#define TD_CANCEL_WAIT_S 0.5

typedef struct cancel_work {
  int64_t id;
  tn_err_t err;
  int rc;
} cancel_work_t;

/* On a shared database another daemon's batch commit may move the row
 * between the update's read and write (TN_ESTATE while it is not final):
 * tried again. */
static void cancel_queued_work(td_req_t *req) {
  cancel_work_t *cw = req->data;
  td_server_t *srv = req->srv;
  uv_mutex_lock(&srv->wdb_lock);
  db_job_progress_t pr = {DB_JOB_CANCELLED, -1, 0, NULL};
  for (int i = 0; i < 10; i++) {
    cw->rc = db_job_update(srv->wdb, cw->id, &pr, &cw->err);
    if (cw->rc != TN_ESTATE) break;
    tn_arena_t *a = tn_arena_new();
    db_job_t row;
    bool over = db_job_get(srv->wdb, cw->id, &row, a, NULL) != 0 || db_job_state_final(row.state);
    tn_arena_free(a);
    if (over) break;
  }
  uv_mutex_unlock(&srv->wdb_lock);
}

static void cancel_queued_done(td_req_t *req) {
  cancel_work_t *cw = req->data;
  td_server_t *srv = req->srv;
  td_job_t *j = srv->jobs ? td_job_find(srv->jobs->active, cw->id) : NULL;
  bool failed = cw->rc && cw->err.code != TN_ESTATE;
  if (failed) td_req_tn_error(req, TD_E_INTERNAL, &cw->err);
  else td_log(TD_INFO, "job cancelled while queued", "job=%lld", (long long)cw->id);
  if (j && !failed) { /* answered with the job's last read, after its watchers' notification */
    if (j->ncancel == j->capcancel)
      j->cancels = tn_xrealloc(j->cancels, sizeof *j->cancels * (size_t)(j->capcancel = j->capcancel * 2 + 2));
    j->cancels[j->ncancel++] = req;
    req->requeued = true;
  }
  if (j) td_job_finish(srv, j);
  else if (!failed) answer_job(req, cw->id);
}

/* The row of a job answered cancelled from memory, written off the loop
 * (it may wait for a lock): the thread's own end writes it too, whichever
 * comes first. */
typedef struct mark_work {
  uv_work_t w;
  td_server_t *srv;
  int64_t id;
} mark_work_t;

static void mark_cancelled_work(uv_work_t *w) {
  mark_work_t *mw = w->data;
  tn_err_t err = {0};
  db_job_progress_t pr = {DB_JOB_CANCELLED, -1, 0, NULL};
  uv_mutex_lock(&mw->srv->wdb_lock);
  if (db_job_update(mw->srv->wdb, mw->id, &pr, &err) != 0 && err.code != TN_ESTATE)
    td_log(TD_WARN, "cannot write a cancelled job's state (its thread will)", "job=%lld err=%s", (long long)mw->id,
           td_q(err.msg));
  uv_mutex_unlock(&mw->srv->wdb_lock);
}

static void mark_cancelled_done(uv_work_t *w, int status) {
  (void)status;
  mark_work_t *mw = w->data;
  td_server_t *srv = mw->srv;
  free(mw);
  srv->inflight_work--;
  td_server_maybe_exit(srv);
}

/* Every 100 ms while a cancelled job's thread runs on: past
 * TD_CANCEL_WAIT_S the loop answers the waiting cancels itself (the job
 * shows `cancelled` from then on) and writes the row in the background. */
static void on_cancel_timer(uv_timer_t *t) {
  td_server_t *srv = t->data;
  td_jobs_t *m = srv->jobs;
  bool waiting = false;
  for (td_job_t *j = m->active; j; j = j->next) {
    if (!j->running || j->cancel_at <= 0 || j->cancel_answered) continue;
    if (tn_now() - j->cancel_at < TD_CANCEL_WAIT_S) {
      waiting = true;
      continue;
    }
    j->cancel_answered = true;
    td_log(TD_WARN, "a cancelled job has not stopped yet: answered cancelled now (it ends when it next polls)",
           "job=%lld waited_s=%.2f", (long long)j->id, tn_now() - j->cancel_at);
    for (int i = 0; i < j->ncancel; i++) { /* each answered by a read (td_job_live says cancelled) */
      td_req_t *req = j->cancels[i];
      if (answer_job(req, j->id) != TD_PENDING) td_req_finish(req);
    }
    j->ncancel = 0;
    td_job_refresh(srv, j, false); /* the watchers see `cancelled` too */
    mark_work_t *mw = tn_xcalloc(1, sizeof *mw);
    mw->srv = srv;
    mw->id = j->id;
    mw->w.data = mw;
    if (uv_queue_work(srv->loop, &mw->w, mark_cancelled_work, mark_cancelled_done) == 0) srv->inflight_work++;
    else free(mw); /* the thread's end writes it */
  }
  if (!waiting) uv_timer_stop(t);
}

static td_reply_t answer_cancel(td_server_t *srv, int64_t id, td_req_t *req) {
  td_job_t *j = srv->jobs ? td_job_find(srv->jobs->active, id) : NULL;
  if (j && j->running && j->cancel_answered) /* answered already; the thread is on its way out */
    return answer_job(req, id);
  if (j && j->running) {
    atomic_store(&j->stop, STOP_CANCEL);
    if (j->ncancel == j->capcancel)
      j->cancels = tn_xrealloc(j->cancels, sizeof *j->cancels * (size_t)(j->capcancel = j->capcancel * 2 + 2));
    j->cancels[j->ncancel++] = req;
    if (j->cancel_at <= 0) j->cancel_at = tn_now();
    if (!uv_is_active((uv_handle_t *)&srv->jobs->cancel_timer))
      uv_timer_start(&srv->jobs->cancel_timer, on_cancel_timer, 100, 100);
    td_log(TD_INFO, "cancelling a running job", "job=%lld", (long long)id);
    return TD_PENDING;
  }
  if (j && !j->cancelling) j->cancelling = true; /* the scheduler leaves it alone from now on */
  else if (j || !db_is_url(srv->cfg.db_path)) return answer_job(req, id); /* already over: a no-op */
  /* queued here, or maybe another daemon's (shared queue): its row says */
  cancel_work_t *cw = tn_xcalloc(1, sizeof *cw);
  cw->id = id;
  req->data = cw;
  req->free_data = free;
  return td_req_queue_work(req, cancel_queued_work, cancel_queued_done);
}

static int job_param(td_req_t *req, int64_t *id) {
  return td_param_int(req, "job", true, 0, 1, INT64_C(1) << 53, id);
}

td_reply_t td_m_tune_status(td_req_t *req) {
  int64_t id;
  if (job_param(req, &id)) return TD_REPLY;
  return answer_job(req, id);
}

typedef struct list_req {
  int state;
  int64_t limit, offset;
} list_req_t;

static void list_read(td_req_t *req, db_t *db) {
  const list_req_t *l = req->data;
  db_jobs_t jobs;
  tn_err_t err = {0};
  /* Without a filter the database pages; with one, filter the newest-first list. */
  int rc = l->state < 0 ? db_job_list(db, (size_t)l->limit, (size_t)l->offset, &jobs, &err)
                        : db_job_list(db, 0, 0, &jobs, &err);
  if (rc) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "jobs");
  int64_t skipped = 0, added = 0;
  for (size_t i = 0; i < jobs.n && added < l->limit; i++) {
    if (l->state >= 0 && (int)jobs.items[i].state != l->state) continue;
    if (l->state >= 0 && skipped++ < l->offset) continue;
    cJSON *j = td_job_read(db, jobs.items[i].id, &err);
    if (j) cJSON_AddItemToArray(arr, j), added++;
  }
  db_jobs_free(&jobs);
  req->result = o;
}

static void list_done(td_req_t *req) {
  cJSON *j;
  cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(req->result, "jobs")) td_job_live(req->srv, j);
}

td_reply_t td_m_tune_list(td_req_t *req) {
  static const char *const states[] = {"queued", "running", "done", "cancelled", "failed", NULL};
  list_req_t *l = tn_xcalloc(1, sizeof *l);
  req->data = l;
  req->free_data = free;
  if (td_param_enum(req, "state", states, -1, &l->state) ||
      td_param_int(req, "limit", false, 50, 1, 1000, &l->limit) ||
      td_param_int(req, "offset", false, 0, 0, INT64_C(1) << 40, &l->offset))
    return TD_REPLY;
  return td_req_queue_read(req, list_read, list_done);
}

td_reply_t td_m_tune_cancel(td_req_t *req) {
  int64_t id;
  if (job_param(req, &id)) return TD_REPLY;
  return answer_cancel(req->srv, id, req);
}

td_reply_t td_m_tune_watch(td_req_t *req) {
  int64_t id;
  if (job_param(req, &id)) return TD_REPLY;
  return answer_watch(req, id);
}

/* The job's measured candidates in order, with the GFLOP/s the search saw
 * and the seconds since the job started: its tuning curve. */
static void trials_read(td_req_t *req, db_t *db) {
  int64_t id = *(int64_t *)req->data;
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  db_job_t job;
  db_workload_t w;
  db_job_trials_t ts = {0};
  if (db_job_get(db, id, &job, a, &err) != 0) {
    td_req_error(req, TD_E_NOT_FOUND, "no job %lld (tune.list shows the jobs)", (long long)id);
  } else if (db_workload_get(db, job.workload_hash, &w, a, &err) != 0 || db_job_trials_get(db, id, &ts, &err) != 0) {
    td_req_tn_error(req, TD_E_INTERNAL, &err);
  } else {
    req->result = cJSON_CreateObject();
    cJSON_AddNumberToObject(req->result, "job", (double)id);
    cJSON *arr = cJSON_AddArrayToObject(req->result, "trials");
    for (size_t i = 0; i < ts.n; i++) {
      const db_job_trial_t *t = &ts.items[i];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "trial", (double)t->trial);
      if (t->record_id > 0) cJSON_AddNumberToObject(o, "record", (double)t->record_id);
      else cJSON_AddNullToObject(o, "record");
      cJSON_AddStringToObject(o, "status", db_status_name(t->status));
      td_json_num(o, "median_secs", t->median_secs);
      td_json_num(o, "gflops", w.flops > 0 && t->median_secs > 0 ? w.flops / t->median_secs * 1e-9 : NAN);
      cJSON_AddNumberToObject(o, "measured", t->measured);
      td_json_num(o, "elapsed_s", job.started > 0 ? t->measured - job.started : NAN);
      cJSON_AddItemToArray(arr, o);
    }
  }
  db_job_trials_free(&ts);
  tn_arena_free(a);
}

td_reply_t td_m_tune_trials(td_req_t *req) {
  int64_t *id = tn_xmalloc(sizeof *id);
  req->data = id;
  req->free_data = free;
  if (job_param(req, id)) return TD_REPLY;
  return td_req_queue_read(req, trials_read, NULL);
}
