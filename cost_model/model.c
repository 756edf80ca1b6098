/* model.c — what every cost model shares: the stored training data, labels
 * normalised per workload, the retraining rule, prediction dispatch and the
 * one-file save/load format (data + RNG state + XGBoost booster JSON). */
#include "cost_model/cm_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cm_xgb_config_default(cm_xgb_config_t *c, int nthread, uint64_t seed) {
  *c = (cm_xgb_config_t){
      .nthread = nthread < 1 ? 1 : nthread,
      .seed = seed,
      .warmup_samples = 64,
      .retrain_growth = 0.2,
      .retrain_samples = 64,
      .max_rounds = 300,
      .early_stop_rounds = 50,
      .max_depth = 10,
      .eta = 0.2,
      .gamma = 0.001,
      .min_child_weight = 0,
  };
}

cm_model_t *cmi_model_new(cm_kind_t kind, const cm_xgb_config_t *cfg) {
  cm_model_t *m = tn_xcalloc(1, sizeof *m);
  m->kind = kind;
  m->cfg = *cfg;
  tn_rng_seed(&m->rng, cfg->seed);
  return m;
}

static void clear_data(cm_model_t *m) {
  free(m->wl);
  free(m->secs);
  free(m->row0);
  free(m->nrows);
  free(m->rows);
  m->wl = NULL, m->secs = NULL, m->row0 = NULL, m->nrows = NULL, m->rows = NULL;
  m->n = m->cap = 0;
  m->nrows_total = m->caprows = 0;
}

void cm_model_free(cm_model_t *m) {
  if (!m) return;
  cmi_xgb_free(m);
  clear_data(m);
  free(m);
}

const char *cm_model_kind_name(const cm_model_t *m) {
  switch (m->kind) {
  case CM_KIND_XGB: return "xgboost";
  case CM_KIND_RANDOM: return "random";
  case CM_KIND_RANDOM_NO_XGB: return "random (built without XGBoost)";
  }
  return "?";
}

void cm_model_get_stats(const cm_model_t *m, cm_model_stats_t *out) {
  *out = (cm_model_stats_t){.nsamples = m->n, .ntrainings = m->ntrainings, .trained_on = m->trained_on,
                            .rounds = m->rounds, .last_train_secs = m->last_train_secs,
                            .last_prmse = m->last_prmse};
}

bool cmi_sample_ok(double secs) { return secs > 0 && isfinite(secs); }

/* ---- data ---------------------------------------------------------------- */

static void reserve_samples(cm_model_t *m, int more) {
  if (m->n + more <= m->cap) return;
  int cap = m->cap ? m->cap : 64;
  while (cap < m->n + more) cap *= 2;
  m->wl = tn_xrealloc(m->wl, sizeof *m->wl * (size_t)cap);
  m->secs = tn_xrealloc(m->secs, sizeof *m->secs * (size_t)cap);
  m->row0 = tn_xrealloc(m->row0, sizeof *m->row0 * (size_t)cap);
  m->nrows = tn_xrealloc(m->nrows, sizeof *m->nrows * (size_t)cap);
  m->cap = cap;
}

static void reserve_rows(cm_model_t *m, size_t more) {
  if (m->nrows_total + more <= m->caprows) return;
  size_t cap = m->caprows ? m->caprows : 256;
  while (cap < m->nrows_total + more) cap *= 2;
  m->rows = tn_xrealloc(m->rows, sizeof(float) * CM_NUM_FEATURES * cap);
  m->caprows = cap;
}

static void append_sample(cm_model_t *m, uint64_t wl, double secs, int nrows, const float *rows) {
  reserve_samples(m, 1);
  reserve_rows(m, (size_t)nrows);
  m->wl[m->n] = wl;
  m->secs[m->n] = secs;
  m->row0[m->n] = m->nrows_total;
  m->nrows[m->n] = nrows;
  if (nrows) memcpy(m->rows + m->nrows_total * CM_NUM_FEATURES, rows, sizeof(float) * CM_NUM_FEATURES * (size_t)nrows);
  m->nrows_total += (size_t)nrows;
  m->n++;
}

static int check_rows(const cm_feature_rows_t *r, int i, const char *what, tn_err_t *err) {
  if (!r) return tn_err_set(err, TN_EINVAL, "%s %d has no feature rows (NULL)", what, i);
  if (r->nrows < 0 || (r->nrows > 0 && (r->ncols != CM_NUM_FEATURES || !r->data)))
    return tn_err_set(err, TN_EINVAL, "%s %d: feature rows have %d columns (%d rows); expected %d from cm_features",
                      what, i, r->ncols, r->nrows, CM_NUM_FEATURES);
  return 0;
}

/* Labels: per workload, min cost / cost (1 = best seen), 0 for failures. */
typedef struct wl_idx {
  uint64_t wl;
  int i;
} wl_idx_t;

static int wl_idx_cmp(const void *pa, const void *pb) {
  const wl_idx_t *a = pa, *b = pb;
  if (a->wl != b->wl) return a->wl < b->wl ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

int cmi_labels(const cm_model_t *m, float *labels) {
  wl_idx_t *ix = tn_xmalloc(sizeof *ix * (size_t)(m->n + 1));
  for (int i = 0; i < m->n; i++) ix[i] = (wl_idx_t){m->wl[i], i};
  qsort(ix, (size_t)m->n, sizeof *ix, wl_idx_cmp);
  int positive = 0;
  for (int lo = 0, hi; lo < m->n; lo = hi) {
    double best = INFINITY;
    for (hi = lo; hi < m->n && ix[hi].wl == ix[lo].wl; hi++)
      if (cmi_sample_ok(m->secs[ix[hi].i])) best = TN_MIN(best, m->secs[ix[hi].i]);
    for (int k = lo; k < hi; k++) {
      double s = m->secs[ix[k].i];
      labels[ix[k].i] = cmi_sample_ok(s) ? (float)(best / s) : 0.0f;
      positive += cmi_sample_ok(s);
    }
  }
  free(ix);
  return positive;
}

/* The retraining rule: enough samples, and grown by retrain_growth since the
 * last training. */
static bool wants_training(const cm_model_t *m) {
  if (m->kind != CM_KIND_XGB || m->n < m->cfg.warmup_samples) return false;
  if (!m->booster || m->trained_on == 0) return true;
  if (m->cfg.retrain_samples > 0 && m->n - m->trained_on >= m->cfg.retrain_samples) return true;
  return (double)m->n >= (double)m->trained_on * (1.0 + m->cfg.retrain_growth) - 1e-9;
}

int cm_model_nsamples(const cm_model_t *m) { return m->n; }

void cm_model_sample(const cm_model_t *m, int i, cm_sample_t *out, cm_feature_rows_t *rows) {
  *rows = (cm_feature_rows_t){.nrows = m->nrows[i], .ncols = CM_NUM_FEATURES,
                              .data = m->nrows[i] ? m->rows + m->row0[i] * CM_NUM_FEATURES : NULL};
  *out = (cm_sample_t){.workload = m->wl[i], .features = rows, .run_secs = m->secs[i]};
}

int cm_model_update(cm_model_t *m, const cm_sample_t *samples, int n, tn_err_t *err) {
  if (n < 0) return tn_err_set(err, TN_EINVAL, "cm_model_update: negative sample count %d", n);
  for (int i = 0; i < n; i++) {
    int rc = check_rows(samples[i].features, i, "sample", err);
    if (rc) return rc;
  }
  for (int i = 0; i < n; i++) {
    const cm_feature_rows_t *r = samples[i].features;
    append_sample(m, samples[i].workload, samples[i].run_secs, r->nrows, r->data);
  }
  return wants_training(m) ? cmi_xgb_train(m, err) : 0;
}

int cm_model_predict(cm_model_t *m, const cm_feature_rows_t *cands, int n, double *scores, tn_err_t *err) {
  if (n < 0) return tn_err_set(err, TN_EINVAL, "cm_model_predict: negative candidate count %d", n);
  for (int i = 0; i < n; i++) {
    int rc = check_rows(&cands[i], i, "candidate", err);
    if (rc) return rc;
  }
  if (m->kind == CM_KIND_XGB && m->booster) return cmi_xgb_predict(m, cands, n, scores, err);
  cmi_random_scores(m, n, scores);
  return 0;
}

/* ======================================================================
 * Save / load.  Little-endian binary:
 *   "TNCMODL1", u32 version (1), u32 columns, u32 kind, u32 trained_on,
 *   u64 rng[4], u64 samples, u64 rows,
 *   per sample: u64 workload, f64 run_secs, u32 rows,
 *   rows * columns f32, u64 booster bytes, booster JSON (may be empty).
 * ====================================================================== */

#define MAGIC "TNCMODL1"
#define FORMAT_VERSION CM_MODEL_FORMAT
#define MAX_FILE_BYTES ((size_t)1 << 32)

static void put_u64(tn_buf_t *b, uint64_t v) {
  char c[8];
  for (int i = 0; i < 8; i++) c[i] = (char)(v >> (8 * i));
  tn_buf_putn(b, c, 8);
}

static void put_u32(tn_buf_t *b, uint32_t v) {
  char c[4];
  for (int i = 0; i < 4; i++) c[i] = (char)(v >> (8 * i));
  tn_buf_putn(b, c, 4);
}

static void put_f64(tn_buf_t *b, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  put_u64(b, u);
}

static void put_f32(tn_buf_t *b, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  put_u32(b, u);
}

int cm_model_save_buffer(const cm_model_t *m, char **data, size_t *len, tn_err_t *err) {
  char *booster = NULL;
  size_t blen = 0;
  if (m->kind == CM_KIND_XGB && m->booster) {
    int rc = cmi_xgb_save(m, &booster, &blen, err);
    if (rc) return rc;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_putn(&b, MAGIC, 8);
  put_u32(&b, FORMAT_VERSION);
  put_u32(&b, CM_NUM_FEATURES);
  put_u32(&b, (uint32_t)m->kind);
  put_u32(&b, (uint32_t)(booster ? m->trained_on : 0));
  for (int i = 0; i < 4; i++) put_u64(&b, m->rng.s[i]);
  put_u64(&b, (uint64_t)m->n);
  put_u64(&b, (uint64_t)m->nrows_total);
  for (int i = 0; i < m->n; i++) {
    put_u64(&b, m->wl[i]);
    put_f64(&b, m->secs[i]);
    put_u32(&b, (uint32_t)m->nrows[i]);
  }
  for (size_t i = 0; i < m->nrows_total * CM_NUM_FEATURES; i++) put_f32(&b, m->rows[i]);
  put_u64(&b, (uint64_t)blen);
  if (blen) tn_buf_putn(&b, booster, blen);
  free(booster);
  *len = b.len;
  *data = tn_buf_take(&b);
  return 0;
}

int cm_model_save(const cm_model_t *m, const char *path, tn_err_t *err) {
  char *data = NULL;
  size_t len = 0;
  int rc = cm_model_save_buffer(m, &data, &len, err);
  if (rc) return rc;
  char *tmp = tn_xmalloc(strlen(path) + 8);
  sprintf(tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) rc = tn_err_set(err, TN_EIO, "cannot write cost model '%s': %s", tmp, strerror(errno));
  else {
    bool ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
      rc = tn_err_set(err, TN_EIO, "cannot write cost model '%s': %s", path, strerror(errno));
      remove(tmp);
    }
  }
  free(tmp);
  free(data);
  return rc;
}

/* A bounds-checked reader over the loaded bytes. */
typedef struct reader {
  const unsigned char *p;
  size_t len, pos;
  bool bad;
} reader_t;

static uint64_t get_u(reader_t *r, int bytes) {
  if (r->bad || r->len - r->pos < (size_t)bytes) {
    r->bad = true;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->pos + i] << (8 * i);
  r->pos += (size_t)bytes;
  return v;
}

static double get_f64(reader_t *r) {
  uint64_t u = get_u(r, 8);
  double v;
  memcpy(&v, &u, 8);
  return v;
}

static float get_f32(reader_t *r) {
  uint32_t u = (uint32_t)get_u(r, 4);
  float v;
  memcpy(&v, &u, 4);
  return v;
}

static int read_header(reader_t *r, uint64_t *nsamples, uint64_t *nrows, uint32_t *trained_on,
                       uint64_t rng[4], tn_err_t *err) {
  if (r->len < 8 || memcmp(r->p, MAGIC, 8) != 0)
    return tn_err_set(err, TN_EINVAL, "not a tuned cost-model file (no \"" MAGIC "\" header)");
  r->pos = 8;
  uint32_t version = (uint32_t)get_u(r, 4), cols = (uint32_t)get_u(r, 4);
  (void)get_u(r, 4); /* kind: any kind's state loads into any model */
  *trained_on = (uint32_t)get_u(r, 4);
  for (int i = 0; i < 4; i++) rng[i] = get_u(r, 8);
  *nsamples = get_u(r, 8);
  *nrows = get_u(r, 8);
  if (r->bad) return tn_err_set(err, TN_EINVAL, "cost-model file is truncated in its header");
  if (version != FORMAT_VERSION)
    return tn_err_set(err, TN_EUNSUPPORTED, "cost-model file format version %u; this build reads version %d",
                      version, FORMAT_VERSION);
  if (cols != CM_NUM_FEATURES)
    return tn_err_set(err, TN_EUNSUPPORTED,
                      "cost-model file has %u features per row; this build extracts %d (retrain from the records)",
                      cols, CM_NUM_FEATURES);
  size_t left = r->len - r->pos;
  if (*nsamples > left / 20 || *nrows > left / (4 * CM_NUM_FEATURES))
    return tn_err_set(err, TN_EINVAL, "cost-model file is truncated: %llu samples and %llu rows do not fit in %zu bytes",
                      (unsigned long long)*nsamples, (unsigned long long)*nrows, left);
  return 0;
}

/* Parses the data into a fresh model `t` (so a bad file leaves m unchanged). */
static int read_body(reader_t *r, cm_model_t *t, uint64_t nsamples, uint64_t nrows, tn_err_t *err) {
  reserve_samples(t, (int)nsamples);
  reserve_rows(t, (size_t)nrows);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < nsamples; i++) {
    t->wl[i] = get_u(r, 8);
    t->secs[i] = get_f64(r);
    t->nrows[i] = (int)get_u(r, 4);
    t->row0[i] = (size_t)sum;
    sum += (uint64_t)(uint32_t)t->nrows[i];
  }
  if (r->bad || sum != nrows)
    return tn_err_set(err, TN_EINVAL, "cost-model file is inconsistent: samples list %llu rows, header says %llu",
                      (unsigned long long)sum, (unsigned long long)nrows);
  t->n = (int)nsamples;
  t->nrows_total = (size_t)nrows;
  for (size_t i = 0; i < (size_t)nrows * CM_NUM_FEATURES; i++) t->rows[i] = get_f32(r);
  if (r->bad) return tn_err_set(err, TN_EINVAL, "cost-model file is truncated in its feature rows");
  return 0;
}

/* Moves the data of t into m (replacing m's). */
static void take_data(cm_model_t *m, cm_model_t *t) {
  clear_data(m);
  m->wl = t->wl, m->secs = t->secs, m->row0 = t->row0, m->nrows = t->nrows, m->rows = t->rows;
  m->n = t->n, m->cap = t->cap, m->nrows_total = t->nrows_total, m->caprows = t->caprows;
  t->wl = NULL, t->secs = NULL, t->row0 = NULL, t->nrows = NULL, t->rows = NULL;
  t->n = t->cap = 0;
}

int cm_model_load_buffer(cm_model_t *m, const char *data, size_t len, tn_err_t *err) {
  reader_t r = {.p = (const unsigned char *)data, .len = len};
  uint64_t ns = 0, nr = 0, rng[4] = {0};
  uint32_t trained_on = 0;
  int rc = read_header(&r, &ns, &nr, &trained_on, rng, err);
  if (rc) return rc;
  cm_model_t *t = cmi_model_new(m->kind, &m->cfg);
  rc = read_body(&r, t, ns, nr, err);
  uint64_t blen = rc ? 0 : get_u(&r, 8);
  if (!rc && (r.bad || blen > r.len - r.pos))
    rc = tn_err_set(err, TN_EINVAL, "cost-model file is truncated in its booster (%llu bytes announced)",
                    (unsigned long long)blen);
  if (!rc && blen && m->kind == CM_KIND_XGB) rc = cmi_xgb_load(t, data + r.pos, (size_t)blen, err);
  if (rc) {
    cm_model_free(t);
    tn_err_prefix(err, "loading the cost model");
    return rc;
  }
  take_data(m, t);
  cmi_xgb_free(m);
  m->booster = t->booster, t->booster = NULL;
  m->trained_on = m->booster ? (int)trained_on : 0;
  m->rounds = t->rounds;
  memcpy(m->rng.s, rng, sizeof rng);
  cm_model_free(t);
  return wants_training(m) && !m->booster ? cmi_xgb_train(m, err) : 0;
}

int cm_model_load(cm_model_t *m, const char *path, tn_err_t *err) {
  char *data = NULL;
  size_t len = 0;
  int rc = tn_read_file(path, MAX_FILE_BYTES, &data, &len, err);
  if (rc) {
    tn_err_prefix(err, "loading the cost model");
    return rc;
  }
  rc = cm_model_load_buffer(m, data, len, err);
  free(data);
  return rc;
}
