/* task_scheduler.c — the gradient-based task scheduler of metaschedule.md
 * §11 (alpha 0.2, window 3): every task gets one batch round-robin, then the
 * task whose best latency is expected to drop the most gets the next one. */
#include <stdlib.h>

#include "search/srch_internal.h"

#define NO_BEST 1e9 /* seconds standing for "no valid measurement yet" */

void srch_sched_init(srch_sched_t *s, int ntasks, uint64_t seed) {
  *s = (srch_sched_t){.ntasks = ntasks, .alpha = 0.2, .window = 3};
  tn_rng_seed(&s->rng, seed);
}

void srch_sched_joined(srch_task_state_t *ts) {
  ts->history = tn_xrealloc(ts->history, (size_t)(ts->nhistory + 1) * sizeof *ts->history);
  ts->history[ts->nhistory++] = ts->best.found ? ts->best.median_secs : NO_BEST;
}

/* The expected gain of one more batch: alpha * (recent improvement per
 * round over the window) + (1 - alpha) * best / rounds, times the weight. */
static double gradient(const srch_sched_t *s, const srch_task_state_t *ts) {
  int n = ts->nhistory;
  if (n == 0 || ts->history[n - 1] >= NO_BEST) return -1e9;
  double last = ts->history[n - 1];
  double g1 = n >= s->window + 1 ? (ts->history[n - 1 - s->window] - last) / s->window : 0;
  double g2 = last / n;
  return (s->alpha * g1 + (1 - s->alpha) * g2) * ts->weight;
}

int srch_sched_next(srch_sched_t *s, const srch_task_state_t *tasks) {
  int live = 0;
  for (int i = 0; i < s->ntasks; i++) live += !tasks[i].done;
  if (live == 0) return -1;
  if (s->picks < s->ntasks) { /* round-robin first */
    for (int k = 0; k < s->ntasks; k++) {
      int i = (s->picks + k) % s->ntasks;
      if (!tasks[i].done) {
        s->picks = i + 1;
        return i;
      }
    }
  }
  s->picks++;
  double best = 0;
  int nbest = 0, *ties = tn_xmalloc((size_t)s->ntasks * sizeof *ties);
  for (int i = 0; i < s->ntasks; i++) {
    if (tasks[i].done) continue;
    double g = gradient(s, &tasks[i]);
    if (nbest == 0 || g > best) best = g, nbest = 0;
    if (g == best) ties[nbest++] = i;
  }
  int pick = ties[nbest == 1 ? 0 : (int)tn_rng_below(&s->rng, (uint64_t)nbest)];
  free(ties);
  return pick;
}
