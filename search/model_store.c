/* model_store.c — the cost model kept per target in the tuning database, so
 * that a tune starts with a model trained on everything measured before on
 * its target: at the start, every record of the target becomes a training
 * sample (features of records the stored model already holds are reused,
 * the others computed by replaying their traces on their workloads); at the
 * end the model is saved with the record id of each of its samples. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/srch_internal.h"

void srch_log(const srch_ctx_t *c, srch_log_level_t level, const char *fmt, ...) {
  if (!c->cb || !c->cb->on_log) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->cb->on_log(level, msg, c->cb->ctx);
}

bool srch_stopped(const srch_ctx_t *c) { return c->cb && c->cb->should_stop && c->cb->should_stop(c->cb->ctx); }

void srch_model_note_samples(srch_ctx_t *c, const int64_t *ids, int n) {
  if (n <= 0) return; /* (ids and model_ids may both be NULL then: memcpy must not see them) */
  if (c->nmodel_ids + n > c->cap_model_ids) {
    c->cap_model_ids = TN_MAX(c->cap_model_ids * 2, c->nmodel_ids + n + 64);
    c->model_ids = tn_xrealloc(c->model_ids, (size_t)c->cap_model_ids * sizeof *c->model_ids);
  }
  memcpy(c->model_ids + c->nmodel_ids, ids, (size_t)n * sizeof *ids);
  c->nmodel_ids += n;
}

/* ---- the stored model ---------------------------------------------------- */

typedef struct id_idx {
  int64_t id;
  int idx;
} id_idx_t;

typedef struct stored {
  bool usable;
  cm_model_t *data;     /* its samples (a random model: the booster is not loaded) */
  const void *blob;
  size_t len;
  const int64_t *ids;   /* per sample */
  int n;
  id_idx_t *by_id;      /* (record id, sample) sorted by id */
} stored_t;

static int cmp_id_idx(const void *a, const void *b) {
  const id_idx_t *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The stored sample holding record `id`'s features, -1 when none. */
static int stored_find(const stored_t *s, int64_t id) {
  int lo = 0, hi = s->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (s->by_id[mid].id == id) return s->by_id[mid].idx;
    if (s->by_id[mid].id < id) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Reads the target's stored model; anything this build cannot use is a
 * warning and leaves s unusable. */
static int stored_read(srch_ctx_t *c, stored_t *s, tn_arena_t *a, tn_err_t *err) {
  db_cost_model_t row;
  bool found = false;
  tn_err_t e = {0};
  if (db_cost_model_get(c->db, c->target_id, CM_MODEL_FORMAT, &row, &found, a, &e) < 0) {
    if (e.code != TN_EINVAL) return tn_err_set(err, e.code, "%s", e.msg);
    srch_log(c, SRCH_LOG_WARN, "the stored cost model of target %s is damaged (%s): not used, retraining from the "
             "records", c->target->name, e.msg);
    return 0;
  }
  if (!found) return 0;
  if (row.format != CM_MODEL_FORMAT) {
    srch_log(c, SRCH_LOG_WARN, "the stored cost model of target %s has format %d; this build reads format %d: not "
             "used, retraining from the records", c->target->name, row.format, CM_MODEL_FORMAT);
    return 0;
  }
  s->data = cm_model_new_random(1);
  if (cm_model_load_buffer(s->data, row.model, row.model_len, &e) < 0) {
    srch_log(c, SRCH_LOG_WARN, "the stored cost model of target %s cannot be read (%s): not used, retraining from "
             "the records", c->target->name, e.msg);
    return 0;
  }
  s->n = cm_model_nsamples(s->data);
  if ((size_t)s->n != row.nrecord_ids) {
    srch_log(c, SRCH_LOG_WARN, "the stored cost model of target %s has %d samples but %zu record ids: not used, "
             "retraining from the records", c->target->name, s->n, row.nrecord_ids);
    return 0;
  }
  s->blob = row.model, s->len = row.model_len, s->ids = row.record_ids;
  s->by_id = tn_xmalloc((size_t)TN_MAX(s->n, 1) * sizeof *s->by_id);
  for (int i = 0; i < s->n; i++) s->by_id[i] = (id_idx_t){s->ids[i], i};
  qsort(s->by_id, (size_t)s->n, sizeof *s->by_id, cmp_id_idx);
  s->usable = true;
  return 0;
}

static void stored_free(stored_t *s) {
  cm_model_free(s->data);
  free(s->by_id);
}

/* ---- the records' workloads ---------------------------------------------- */

typedef struct wl_entry {
  char hash[TN_ID_SIZE];
  const ir_func_t *func; /* NULL: cannot be rebuilt */
  ir_workload_t *owned;
} wl_entry_t;

typedef struct wl_cache {
  wl_entry_t *v;
  int n, cap;
} wl_cache_t;

/* Parses a stored workload; its structural hash must be the stored one. */
static const ir_func_t *rebuild(srch_ctx_t *c, wl_entry_t *e, tn_arena_t *a) {
  db_workload_t w;
  tn_err_t err = {0};
  if (db_workload_get(c->db, e->hash, &w, a, &err) < 0 ||
      ir_workload_parse_stored(w.name, w.source, w.params, &e->owned, &err) < 0) {
    srch_log(c, SRCH_LOG_DEBUG, "cost model: workload %s cannot be rebuilt (%s): its records are skipped", e->hash,
             err.msg);
    return NULL;
  }
  char got[TN_ID_SIZE];
  ir_func_hash(e->owned->func, got);
  if (strcmp(got, e->hash) != 0) {
    srch_log(c, SRCH_LOG_DEBUG, "cost model: workload %s rebuilds with hash %s (another version of tuned stored "
             "it): its records are skipped", e->hash, got);
    return NULL;
  }
  return e->owned->func;
}

/* The workload of hash: one of the tasks', or rebuilt from the database once. */
static const ir_func_t *workload_func(srch_ctx_t *c, wl_cache_t *wc, const char *hash, tn_arena_t *a) {
  for (int i = 0; i < c->ntasks; i++)
    if (strcmp(c->tasks[i].hash_hex, hash) == 0) return c->tasks[i].func;
  for (int i = 0; i < wc->n; i++)
    if (strcmp(wc->v[i].hash, hash) == 0) return wc->v[i].func;
  if (wc->n == wc->cap) wc->v = tn_xrealloc(wc->v, (size_t)(wc->cap = wc->cap * 2 + 8) * sizeof *wc->v);
  wl_entry_t *e = &wc->v[wc->n++];
  *e = (wl_entry_t){0};
  snprintf(e->hash, sizeof e->hash, "%s", hash);
  e->func = rebuild(c, e, a);
  return e->func;
}

static void wl_cache_free(wl_cache_t *wc) {
  for (int i = 0; i < wc->n; i++) ir_workload_free(wc->v[i].owned);
  free(wc->v);
}

/* ---- warm start ------------------------------------------------------------ */

/* One record on its way to a training sample. */
typedef struct item {
  const db_record_t *rec;
  uint64_t workload;
  double secs;
  int stored;             /* index of the stored sample with its features, -1: compute them */
  const ir_func_t *func;  /* when computing */
  cm_feature_rows_t feat; /* computed */
  bool ok;
} item_t;

typedef struct compute {
  srch_ctx_t *c;
  item_t *items;
  int *todo;
} compute_t;

static void compute_one(void *ctx, int k) {
  compute_t *cp = ctx;
  item_t *it = &cp->items[cp->todo[k]];
  sch_trace_t *tr = NULL;
  if (sch_trace_from_json(it->rec->trace, strlen(it->rec->trace), &tr, NULL) < 0) return;
  srch_cand_t *cand = srch_cand_make(it->func, cp->c->target, tr, 1, NULL, NULL);
  sch_trace_free(tr);
  if (!cand) return; /* the postprocessors (verify included) reject it now: not a sample */
  cm_features(sch_func(cand->sch), cp->c->target, &it->feat);
  it->ok = true;
  srch_cand_unref(cand);
}

/* Labels and feature sources of every record; ok records that are not
 * verified (an import may carry such) are not trusted. */
static int plan_items(srch_ctx_t *c, const db_records_t *recs, const stored_t *st, item_t *items, int *todo,
                      int *ntodo, wl_cache_t *wc, tn_arena_t *a) {
  int n = 0, untrusted = 0;
  *ntodo = 0;
  for (size_t i = 0; i < recs->n; i++) {
    const db_record_t *r = &recs->items[i];
    if (r->status == DB_STATUS_OK && !(r->verified && r->median_secs > 0)) {
      untrusted++;
      continue;
    }
    item_t *it = &items[n];
    *it = (item_t){.rec = r, .workload = tn_id_key(r->workload_hash), .stored = -1,
                   .secs = r->status == DB_STATUS_OK ? r->median_secs : CM_FAILED};
    if (st->usable) it->stored = stored_find(st, r->id);
    if (it->stored >= 0) {
      cm_sample_t s;
      cm_feature_rows_t rows;
      cm_model_sample(st->data, it->stored, &s, &rows);
      if (s.workload != it->workload) it->stored = -1;
    }
    if (it->stored < 0 && !(it->func = workload_func(c, wc, r->workload_hash, a))) continue;
    if (it->stored < 0) todo[(*ntodo)++] = n;
    else it->ok = true;
    n++;
  }
  if (untrusted) srch_log(c, SRCH_LOG_DEBUG, "cost model: %d ok records of target %s are not verified: not used",
                          untrusted, c->target->name);
  return n;
}

/* True when the stored model holds exactly these samples (the same records
 * with the same times, in whatever order): then it is loaded as it is,
 * booster included, and nothing is trained. */
static bool same_as_stored(const stored_t *st, const item_t *items, int n) {
  if (!st->usable || st->n != n) return false;
  for (int i = 0; i < n; i++) {
    if (items[i].stored < 0) return false;
    cm_sample_t s;
    cm_feature_rows_t rows;
    cm_model_sample(st->data, items[i].stored, &s, &rows);
    if (s.run_secs != items[i].secs) return false;
  }
  return true;
}

static int train_on(srch_ctx_t *c, const stored_t *st, item_t *items, int n, int *used, tn_err_t *err) {
  cm_sample_t *s = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *s);
  cm_feature_rows_t *views = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *views);
  int64_t *ids = tn_xcalloc((size_t)TN_MAX(n, 1), sizeof *ids);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!items[i].ok) continue;
    if (items[i].stored >= 0) {
      cm_sample_t got;
      cm_model_sample(st->data, items[i].stored, &got, &views[k]);
    } else {
      views[k] = items[i].feat;
    }
    s[k] = (cm_sample_t){.workload = items[i].workload, .features = &views[k], .run_secs = items[i].secs};
    ids[k++] = items[i].rec->id;
  }
  int rc = cm_model_update(c->model, s, k, err);
  if (rc == 0) srch_model_note_samples(c, ids, k);
  *used = k;
  free(s);
  free(views);
  free(ids);
  return rc;
}

int srch_model_warm_start(srch_ctx_t *c, tn_err_t *err) {
  c->model_store = c->db && !c->opts.no_model_store && !c->opts.model_path && c->opts.model == SRCH_MODEL_XGB &&
                   c->opts.strategy == SRCH_EVOLUTIONARY && cm_have_xgboost();
  if (!c->model_store) return 0;
  double t0 = tn_now();
  tn_arena_t *a = tn_arena_new();
  stored_t st = {0};
  db_records_t recs = {0};
  wl_cache_t wc = {0};
  db_query_t q = db_query_all();
  q.target_name = c->target->name;
  int rc = stored_read(c, &st, a, err);
  if (rc == 0) rc = db_records_query(c->db, &q, &recs, err);
  item_t *items = tn_xcalloc(recs.n + 1, sizeof *items);
  int *todo = tn_xcalloc(recs.n + 1, sizeof *todo);
  int ntodo = 0, n = rc == 0 ? plan_items(c, &recs, &st, items, todo, &ntodo, &wc, a) : 0;
  compute_t cp = {c, items, todo};
  c->phase_s[SRCH_PHASE_FEATURES] += srch_parallel_for(c->nthreads, ntodo, compute_one, &cp);
  int used = 0, computed = 0;
  for (int k = 0; k < ntodo; k++) computed += items[todo[k]].ok;
  if (rc == 0 && same_as_stored(&st, items, n) && cm_model_load_buffer(c->model, st.blob, st.len, NULL) == 0) {
    srch_model_note_samples(c, st.ids, st.n);
    used = st.n;
  } else if (rc == 0) {
    rc = train_on(c, &st, items, n, &used, err);
  }
  if (rc == 0 && recs.n > 0) {
    cm_model_stats_t ms;
    cm_model_get_stats(c->model, &ms);
    srch_log(c, SRCH_LOG_INFO, "cost model: %d samples from %zu records of target %s (%d features reused, %d "
             "computed, %zu records skipped), trained on %d, %.1f s", used, recs.n, c->target->name,
             used - computed, computed, recs.n - (size_t)used, ms.trained_on, tn_now() - t0);
  }
  for (int i = 0; i < n; i++) cm_feature_rows_free(&items[i].feat);
  free(items);
  free(todo);
  wl_cache_free(&wc);
  db_records_free(&recs);
  stored_free(&st);
  tn_arena_free(a);
  return rc < 0 ? tn_err_prefix(err, "search: the cost model of target %s", c->target->name) : 0;
}

void srch_model_save(srch_ctx_t *c) {
  if (!c->model_store) return;
  int n = cm_model_nsamples(c->model);
  if (n != c->nmodel_ids) {
    srch_log(c, SRCH_LOG_WARN, "cost model: %d samples but %d record ids: not saved", n, c->nmodel_ids);
    return;
  }
  char *blob = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  db_cost_model_t m = {.target_id = c->target_id, .format = CM_MODEL_FORMAT, .record_ids = c->model_ids,
                       .nrecord_ids = (size_t)c->nmodel_ids};
  int rc = cm_model_save_buffer(c->model, &blob, &len, &err);
  m.model = blob, m.model_len = len;
  if (rc == 0) rc = db_cost_model_put(c->db, &m, &err);
  if (rc < 0) srch_log(c, SRCH_LOG_WARN, "cost model: not saved in the database: %s", err.msg);
  else srch_log(c, SRCH_LOG_DEBUG, "cost model: saved for target %s (%d samples, %zu bytes)", c->target->name, n, len);
  free(blob);
}
