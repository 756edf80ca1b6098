/* xgb_model.c — the XGBoost cost model (metaschedule.md §8.1) through the C
 * API: all rows of all candidates in one DMatrix, a candidate's score is the
 * sum of its rows' predictions ("pack-sum"), trained with a custom objective
 * (squared error on the sums weighted by the label) computed here in C. */
#include "tuned_config.h"

#include "cost_model/cm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cm_model_t *cm_model_new_xgb(int nthread, uint64_t seed) {
  cm_xgb_config_t c;
  cm_xgb_config_default(&c, nthread, seed);
  return cm_model_new_xgb_config(&c);
}

#if TUNED_HAVE_XGBOOST

#include <xgboost/c_api.h>

bool cm_have_xgboost(void) { return true; }

cm_model_t *cm_model_new_xgb_config(const cm_xgb_config_t *c) {
  cm_xgb_config_t cfg = *c;
  cfg.nthread = TN_MAX(cfg.nthread, 1);
  cfg.max_rounds = TN_MAX(cfg.max_rounds, 1);
  cfg.early_stop_rounds = TN_MAX(cfg.early_stop_rounds, 1);
  cfg.warmup_samples = TN_MAX(cfg.warmup_samples, 1);
  return cmi_model_new(CM_KIND_XGB, &cfg);
}

/* Reports the first line of XGBoost's message (the rest is a C++ trace). */
static int xgb_fail(tn_err_t *err, const char *what) {
  const char *msg = XGBGetLastError();
  if (!msg) msg = "";
  int n = (int)TN_MIN(strcspn(msg, "\n"), (size_t)600);
  return tn_err_set(err, TN_EIO, "XGBoost %s failed: %.*s", what, n, msg);
}

#define XGB(call, what)                        \
  do {                                         \
    if ((call) != 0) return xgb_fail(err, what); \
  } while (0)

static int set_params(BoosterHandle b, const cm_xgb_config_t *c, tn_err_t *err) {
  char v[7][40];
  snprintf(v[0], 40, "%d", c->max_depth);
  snprintf(v[1], 40, "%.17g", c->gamma);
  snprintf(v[2], 40, "%.17g", c->min_child_weight);
  snprintf(v[3], 40, "%.17g", c->eta);
  snprintf(v[4], 40, "%d", (int)(c->seed % 2147483647u));
  snprintf(v[5], 40, "%d", c->nthread);
  const char *kv[][2] = {
      {"max_depth", v[0]}, {"gamma", v[1]},   {"min_child_weight", v[2]}, {"eta", v[3]},
      {"seed", v[4]},      {"nthread", v[5]}, {"verbosity", "0"},         {"tree_method", "hist"},
      {"base_score", "0"}, {"disable_default_eval_metric", "1"},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(kv); i++) XGB(XGBoosterSetParam(b, kv[i][0], kv[i][1]), "setting a parameter");
  return 0;
}

/* The training set: every stored row, the sample each row belongs to, labels. */
typedef struct trainset {
  DMatrixHandle dm;
  int *owner;   /* per row */
  float *label; /* per sample */
  float *grad, *hess;
  double *sum;  /* per sample */
} trainset_t;

static void trainset_free(trainset_t *t) {
  if (t->dm) XGDMatrixFree(t->dm);
  free(t->owner);
  free(t->label);
  free(t->grad);
  free(t->hess);
  free(t->sum);
}

/* Sums the row predictions per sample; returns the p-rmse over samples with rows. */
static double pack_sum(const cm_model_t *m, trainset_t *t, const float *pred) {
  memset(t->sum, 0, sizeof *t->sum * (size_t)m->n);
  for (size_t r = 0; r < m->nrows_total; r++) t->sum[t->owner[r]] += pred[r];
  double se = 0;
  int cnt = 0;
  for (int i = 0; i < m->n; i++)
    if (m->nrows[i] > 0) se += (t->sum[i] - t->label[i]) * (t->sum[i] - t->label[i]), cnt++;
  return cnt ? sqrt(se / cnt) : 0;
}

/* Gradient of sum_i y_i (sum_pred_i - y_i)^2 / 2 spread to each row. */
static void pack_gradients(const cm_model_t *m, trainset_t *t) {
  for (size_t r = 0; r < m->nrows_total; r++) {
    float y = t->label[t->owner[r]];
    t->grad[r] = (float)((t->sum[t->owner[r]] - y) * y);
    t->hess[r] = y;
  }
}

/* Boosting rounds until max_rounds or early stopping; *done = trees built,
 * *best_round = the tree count with the lowest training p-rmse. */
static int boost(cm_model_t *m, BoosterHandle b, trainset_t *t, int *done, int *best_round, double *best,
                 tn_err_t *err) {
  *best = INFINITY, *best_round = 0;
  for (int r = 0;; r++) {
    *done = r;
    bst_ulong len = 0;
    const float *pred = NULL;
    XGB(XGBoosterPredict(b, t->dm, 1, 0, 1, &len, &pred), "prediction on the training data");
    if (len != m->nrows_total) return tn_err_set(err, TN_EIO, "XGBoost returned %llu predictions for %zu rows",
                                                 (unsigned long long)len, m->nrows_total);
    double rmse = pack_sum(m, t, pred);
    if (r > 0 && rmse < *best) *best = rmse, *best_round = r;
    if (r >= m->cfg.max_rounds || (r > 0 && r - *best_round >= m->cfg.early_stop_rounds)) return 0;
    pack_gradients(m, t);
    XGB(XGBoosterBoostOneIter(b, t->dm, t->grad, t->hess, (bst_ulong)m->nrows_total), "a boosting round");
  }
}

static int trainset_init(const cm_model_t *m, trainset_t *t, tn_err_t *err) {
  t->owner = tn_xmalloc(sizeof *t->owner * m->nrows_total);
  for (int i = 0; i < m->n; i++)
    for (int k = 0; k < m->nrows[i]; k++) t->owner[m->row0[i] + (size_t)k] = i;
  t->grad = tn_xmalloc(sizeof *t->grad * m->nrows_total);
  t->hess = tn_xmalloc(sizeof *t->hess * m->nrows_total);
  t->sum = tn_xmalloc(sizeof *t->sum * (size_t)m->n);
  XGB(XGDMatrixCreateFromMat(m->rows, (bst_ulong)m->nrows_total, CM_NUM_FEATURES, NAN, &t->dm),
      "creating the training matrix");
  return 0;
}

/* Trains a fresh booster on all data; keeps the rounds up to the best p-rmse. */
int cmi_xgb_train(cm_model_t *m, tn_err_t *err) {
  double t0 = tn_now();
  trainset_t t = {0};
  t.label = tn_xmalloc(sizeof *t.label * (size_t)(m->n + 1));
  if (cmi_labels(m, t.label) == 0 || m->nrows_total == 0) {
    trainset_free(&t); /* nothing succeeded yet: nothing to learn */
    return 0;
  }
  BoosterHandle b = NULL;
  int done = 0, best_round = 0, rc = trainset_init(m, &t, err);
  double best = 0;
  if (!rc) rc = XGBoosterCreate(&t.dm, 1, &b) ? xgb_fail(err, "creating a booster") : 0;
  if (!rc) rc = set_params(b, &m->cfg, err);
  if (!rc) rc = boost(m, b, &t, &done, &best_round, &best, err);
  if (best_round == 0) best_round = done;
  BoosterHandle cut = NULL;
  if (!rc && best_round < done)
    rc = XGBoosterSlice(b, 0, best_round, 1, &cut) ? xgb_fail(err, "keeping the best rounds") : 0;
  if (cut) XGBoosterFree(b), b = cut;
  trainset_free(&t);
  if (rc) {
    if (b) XGBoosterFree(b);
    return rc;
  }
  cmi_xgb_free(m);
  m->booster = b;
  m->rounds = best_round;
  m->last_prmse = best;
  m->trained_on = m->n;
  m->ntrainings++;
  m->last_train_secs = tn_now() - t0;
  return 0;
}

int cmi_xgb_predict(cm_model_t *m, const cm_feature_rows_t *cands, int n, double *scores, tn_err_t *err) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (size_t)cands[i].nrows, scores[i] = 0;
  if (total == 0) return 0;
  float *x = tn_xmalloc(sizeof(float) * CM_NUM_FEATURES * total);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    size_t k = (size_t)cands[i].nrows * CM_NUM_FEATURES;
    if (k) memcpy(x + at, cands[i].data, sizeof(float) * k);
    at += k;
  }
  DMatrixHandle dm = NULL;
  bst_ulong len = 0;
  const float *pred = NULL;
  int rc = XGDMatrixCreateFromMat(x, (bst_ulong)total, CM_NUM_FEATURES, NAN, &dm) ? xgb_fail(err, "creating the prediction matrix") : 0;
  if (!rc) rc = XGBoosterPredict(m->booster, dm, 1, 0, 0, &len, &pred) ? xgb_fail(err, "prediction") : 0;
  if (!rc && len != total) rc = tn_err_set(err, TN_EIO, "XGBoost returned %llu predictions for %zu rows", (unsigned long long)len, total);
  for (int i = 0, r = 0; !rc && i < n; i++)
    for (int k = 0; k < cands[i].nrows; k++) scores[i] += pred[r++];
  if (dm) XGDMatrixFree(dm);
  free(x);
  return rc;
}

int cmi_xgb_save(const cm_model_t *m, char **data, size_t *len, tn_err_t *err) {
  bst_ulong n = 0;
  const char *p = NULL;
  XGB(XGBoosterSaveModelToBuffer(m->booster, "{\"format\": \"json\"}", &n, &p), "saving the booster");
  *data = tn_xmalloc((size_t)n + 1);
  memcpy(*data, p, (size_t)n);
  *len = (size_t)n;
  return 0;
}

int cmi_xgb_load(cm_model_t *m, const char *data, size_t len, tn_err_t *err) {
  BoosterHandle b = NULL;
  XGB(XGBoosterCreate(NULL, 0, &b), "creating a booster");
  int rounds = 0;
  int rc = XGBoosterLoadModelFromBuffer(b, data, (bst_ulong)len) ? xgb_fail(err, "loading the booster") : 0;
  if (!rc) rc = set_params(b, &m->cfg, err);
  if (!rc) rc = XGBoosterBoostedRounds(b, &rounds) ? xgb_fail(err, "reading the booster") : 0;
  if (rc) {
    XGBoosterFree(b);
    return rc;
  }
  cmi_xgb_free(m);
  m->booster = b;
  m->rounds = rounds;
  return 0;
}

void cmi_xgb_free(cm_model_t *m) {
  if (m->booster) XGBoosterFree(m->booster);
  m->booster = NULL;
}

#else /* !TUNED_HAVE_XGBOOST */

bool cm_have_xgboost(void) { return false; }

/* Without XGBoost the request gets the random model, and its name says so. */
cm_model_t *cm_model_new_xgb_config(const cm_xgb_config_t *c) { return cmi_model_new(CM_KIND_RANDOM_NO_XGB, c); }

static int no_xgb(tn_err_t *err) {
  return tn_err_set(err, TN_EUNSUPPORTED, "this build of tuned has no XGBoost (install libxgboost-dev and reconfigure)");
}

int cmi_xgb_train(cm_model_t *m, tn_err_t *err) { (void)m; return no_xgb(err); }
int cmi_xgb_predict(cm_model_t *m, const cm_feature_rows_t *c, int n, double *s, tn_err_t *err) {
  (void)m, (void)c, (void)n, (void)s;
  return no_xgb(err);
}
int cmi_xgb_save(const cm_model_t *m, char **d, size_t *l, tn_err_t *err) { (void)m, (void)d, (void)l; return no_xgb(err); }
int cmi_xgb_load(cm_model_t *m, const char *d, size_t l, tn_err_t *err) { (void)m, (void)d, (void)l; return no_xgb(err); }
void cmi_xgb_free(cm_model_t *m) { (void)m; }

#endif
