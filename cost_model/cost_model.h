/* cost_model.h — per-store features of a scheduled function (no compiling)
 * and the cost models that rank candidates from them: XGBoost "pack-sum"
 * gradient-boosted trees and a random model.  Prefix: cm_.
 * The feature layout (index -> meaning) is documented in cost_model/FEATURES.md. */
#ifndef TUNED_COST_MODEL_H
#define TUNED_COST_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "common/target.h"
#include "ir/ir.h"

/* ======================================================================
 * Features (features.c)
 * ====================================================================== */

/* Columns of one feature row: TVM's 164 per-store features in TVM's order
 * (groups 1-5) followed by 35 of our own (scopes, reduction shape, the GPU
 * kernel's shared and local memory, pipeline stages and an occupancy
 * estimate, and the decisions of a Hopper warpgroup-MMA kernel: its tile,
 * ring, copies (TMA), grid and cluster). */
#define CM_NUM_FEATURES 209

/* Buffers described per store, cache-line size and samples of the
 * arithmetic-intensity curve (TVM's defaults). */
#define CM_BUFFERS_PER_STORE 5
#define CM_CACHE_LINE_BYTES 64
#define CM_CURVE_SAMPLES 10

/* The features of one candidate: one row per store (one per compute block,
 * in program order), CM_NUM_FEATURES floats each, row-major. */
typedef struct cm_feature_rows {
  int nrows;
  int ncols;   /* CM_NUM_FEATURES */
  float *data; /* nrows * ncols, malloc'ed; NULL when nrows == 0 */
} cm_feature_rows_t;

/* Extracts the features of a scheduled function for a target (NULL = CPU).
 * Deterministic; reads the IR only (never compiles or runs it).  `out` is
 * overwritten (free it with cm_feature_rows_free).  Returns 0. */
int cm_features(const ir_func_t *scheduled, const tn_target_t *t, cm_feature_rows_t *out);
void cm_feature_rows_free(cm_feature_rows_t *r);
/* Deep copy (dst is overwritten). */
void cm_feature_rows_copy(cm_feature_rows_t *dst, const cm_feature_rows_t *src);
/* Row r, column c (0 outside the rows). */
float cm_feature_at(const cm_feature_rows_t *r, int row, int col);

/* Name of column i ("vec_len_prod", "buf0_bytes", "curve3", ...), NULL out
 * of range; cm_feature_index is the inverse (-1 for unknown names). */
const char *cm_feature_name(int i);
int cm_feature_index(const char *name);

/* slog(x) = log2(|x| + 1), the transform most features use. */
double cm_slog(double x);

/* ======================================================================
 * Models (xgb_model.c, random_model.c)
 * ====================================================================== */

typedef struct cm_model cm_model_t;

/* A measured candidate.  run_secs > 0 and finite is a success; anything else
 * (CM_FAILED, 0, NaN, inf) is a failed build or run. */
#define CM_FAILED (-1.0)
typedef struct cm_sample {
  uint64_t workload;                 /* workload key: labels are normalised per key */
  const cm_feature_rows_t *features; /* copied by cm_model_update */
  double run_secs;
} cm_sample_t;

/* XGBoost model settings; cm_xgb_config_default gives the defaults below. */
typedef struct cm_xgb_config {
  int nthread;            /* XGBoost threads (>= 1) */
  uint64_t seed;          /* XGBoost seed and the warm-up RNG */
  int warmup_samples;     /* random predictions until this many samples: 64 */
  double retrain_growth;  /* retrain when data grew by this fraction: 0.2 ... */
  int retrain_samples;    /* ... or by this many samples (a batch): 64 */
  int max_rounds;         /* boosting rounds at most: 300 */
  int early_stop_rounds;  /* stop when training p-rmse did not improve: 50 */
  int max_depth;          /* 10 */
  double eta;             /* 0.2 */
  double gamma;           /* 0.001 */
  double min_child_weight;/* 0 */
} cm_xgb_config_t;

void cm_xgb_config_default(cm_xgb_config_t *c, int nthread, uint64_t seed);

/* XGBoost pack-sum model with default settings.  In a build without XGBoost
 * this returns a random model whose kind name says so. */
cm_model_t *cm_model_new_xgb(int nthread, uint64_t seed);
cm_model_t *cm_model_new_xgb_config(const cm_xgb_config_t *c);
/* Uniform [0, 1) scores from an RNG seeded with seed; update only stores data. */
cm_model_t *cm_model_new_random(uint64_t seed);
void cm_model_free(cm_model_t *m);

/* "xgboost", "random" or "random (built without XGBoost)". */
const char *cm_model_kind_name(const cm_model_t *m);
/* True when built with XGBoost (cm_model_new_xgb gives a real XGBoost model). */
bool cm_have_xgboost(void);

/* Adds measured samples (features are copied) and, for XGBoost, retrains
 * from scratch on all data when at least warmup_samples exist and the data
 * grew by retrain_growth or by retrain_samples since the last training (so a
 * model warm-started on thousands of records still learns from every batch).
 * Not thread-safe. */
int cm_model_update(cm_model_t *m, const cm_sample_t *samples, int n, tn_err_t *err);

/* Scores n candidates (higher = predicted faster: normalised throughput).
 * XGBoost: the sum of the candidate's row predictions (0 for a candidate
 * without rows); random numbers in [0, 1) before the first training. */
int cm_model_predict(cm_model_t *m, const cm_feature_rows_t *cands, int n, double *scores,
                     tn_err_t *err);

/* Training statistics (tests, logs). */
typedef struct cm_model_stats {
  int nsamples;          /* stored samples */
  int ntrainings;        /* trainings done by this object (loads do not count) */
  int trained_on;        /* samples in the last training, 0 if none */
  int rounds;            /* trees of the current booster */
  double last_train_secs;
  double last_prmse;     /* training p-rmse of the current booster */
} cm_model_stats_t;

void cm_model_get_stats(const cm_model_t *m, cm_model_stats_t *out);

/* The stored samples: how many, and sample i (its features point into the
 * model's storage, valid until the next update or load). */
int cm_model_nsamples(const cm_model_t *m);
void cm_model_sample(const cm_model_t *m, int i, cm_sample_t *out, cm_feature_rows_t *rows);

/* The save format's identity: bump it whenever the file layout or the
 * meaning of any feature column changes, so that models saved by another
 * build (their rows mean something else) are told apart, never mixed. */
#define CM_MODEL_FORMAT 5

/* Saves the model state — training data, RNG state and (XGBoost) the booster
 * as JSON — in one file / one malloc'ed buffer.  Loading replaces the state of
 * an existing model of either kind (a random model ignores the booster; an
 * XGBoost model given data without a booster trains on it), so a reloaded
 * model keeps learning. */
int cm_model_save(const cm_model_t *m, const char *path, tn_err_t *err);
int cm_model_save_buffer(const cm_model_t *m, char **data, size_t *len, tn_err_t *err);
int cm_model_load(cm_model_t *m, const char *path, tn_err_t *err);
int cm_model_load_buffer(cm_model_t *m, const char *data, size_t len, tn_err_t *err);

#endif
