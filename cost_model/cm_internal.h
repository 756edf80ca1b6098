/* cm_internal.h — the model object shared by model.c (data, save/load,
 * dispatch), xgb_model.c (training and prediction with XGBoost) and
 * random_model.c.  Not a public header. */
#ifndef TUNED_CM_INTERNAL_H
#define TUNED_CM_INTERNAL_H

#include "cost_model/cost_model.h"

typedef enum cm_kind {
  CM_KIND_XGB,
  CM_KIND_RANDOM,
  CM_KIND_RANDOM_NO_XGB, /* asked for XGBoost in a build without it */
} cm_kind_t;

struct cm_model {
  cm_kind_t kind;
  cm_xgb_config_t cfg;
  tn_rng_t rng; /* random scores (random model, XGBoost warm-up) */
  /* Training data: one entry per sample, rows packed in `rows`. */
  uint64_t *wl;
  double *secs;
  size_t *row0; /* first row of each sample */
  int *nrows;
  int n, cap;
  float *rows; /* nrows_total * CM_NUM_FEATURES */
  size_t nrows_total, caprows;
  /* Training state. */
  void *booster; /* BoosterHandle; NULL until trained or loaded */
  int ntrainings, trained_on, rounds;
  double last_train_secs, last_prmse;
};

/* model.c */
cm_model_t *cmi_model_new(cm_kind_t kind, const cm_xgb_config_t *cfg);
/* Per-sample labels: min successful cost in the sample's workload / its cost,
 * 0 for failures (labels[n]).  Returns how many labels are > 0. */
int cmi_labels(const cm_model_t *m, float *labels);
bool cmi_sample_ok(double secs);

/* random_model.c: n uniform [0, 1) scores from m->rng. */
void cmi_random_scores(cm_model_t *m, int n, double *scores);

/* xgb_model.c (stubs returning TN_EUNSUPPORTED without XGBoost). */
int cmi_xgb_train(cm_model_t *m, tn_err_t *err);
int cmi_xgb_predict(cm_model_t *m, const cm_feature_rows_t *cands, int n, double *scores, tn_err_t *err);
int cmi_xgb_save(const cm_model_t *m, char **data, size_t *len, tn_err_t *err); /* malloc'ed JSON */
int cmi_xgb_load(cm_model_t *m, const char *data, size_t len, tn_err_t *err);
void cmi_xgb_free(cm_model_t *m);

#endif
