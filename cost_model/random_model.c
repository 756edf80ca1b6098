/* random_model.c — the random cost model (metaschedule.md §8.3): uniform
 * scores in [0, 1) from a seeded RNG, deterministic per seed; it stores the
 * measured data (so its file can seed an XGBoost model) but learns nothing. */
#include "cost_model/cm_internal.h"

void cmi_random_scores(cm_model_t *m, int n, double *scores) {
  for (int i = 0; i < n; i++) scores[i] = tn_rng_double(&m->rng);
}

cm_model_t *cm_model_new_random(uint64_t seed) {
  cm_xgb_config_t c;
  cm_xgb_config_default(&c, 1, seed);
  return cmi_model_new(CM_KIND_RANDOM, &c);
}
