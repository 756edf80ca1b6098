/* parallel.c — the search's parallel-for: replays, mutations and feature
 * extraction of a population spread over threads, with CPU-time accounting.
 * Results depend on the item index only, never on the thread. */
#include <pthread.h>
#include <time.h>

#include "search/srch_internal.h"

typedef struct pf {
  void (*fn)(void *ctx, int i);
  void *ctx;
  int n;
  int next; /* atomic */
  double cpu; /* atomic-added (under mu) */
  pthread_mutex_t mu;
} pf_t;

static double clock_secs(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double srch_thread_cpu(void) { return clock_secs(CLOCK_THREAD_CPUTIME_ID); }
double srch_process_cpu(void) { return clock_secs(CLOCK_PROCESS_CPUTIME_ID); }

uint64_t srch_seed_for(uint64_t base, uint64_t i) {
  tn_rng_t r;
  tn_rng_seed(&r, tn_fnv1a_u64(tn_fnv1a_u64(TN_FNV_INIT, base), i));
  return tn_rng_next(&r);
}

static void *worker(void *arg) {
  pf_t *p = arg;
  double t0 = srch_thread_cpu();
  for (;;) {
    int i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
    if (i >= p->n) break;
    p->fn(p->ctx, i);
  }
  double used = srch_thread_cpu() - t0;
  pthread_mutex_lock(&p->mu);
  p->cpu += used;
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

double srch_parallel_for(int nthreads, int n, void (*fn)(void *ctx, int i), void *ctx) {
  if (n <= 0) return 0;
  pf_t p = {.fn = fn, .ctx = ctx, .n = n};
  pthread_mutex_init(&p.mu, NULL);
  int extra = TN_MIN(nthreads, n) - 1;
  pthread_t th[256];
  int started = 0;
  for (int k = 0; k < extra && k < (int)TN_ARRAY_LEN(th); k++)
    if (pthread_create(&th[started], NULL, worker, &p) == 0) started++;
  worker(&p); /* the caller works too (and alone when threads cannot start) */
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  pthread_mutex_destroy(&p.mu);
  return p.cpu;
}
