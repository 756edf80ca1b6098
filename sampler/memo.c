/* memo.c — what the mutators learn by replaying a trace (the parallel
 * extents of its blocks, the valid compute locations of a sampler), kept by
 * the trace's content hash so that mutating one parent many times replays it
 * once.  Thread-safe: the search mutates a population on several threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

struct smp_memo {
  pthread_mutex_t mu;
  uint64_t *keys; /* 0 = empty (key 0 is stored as 1) */
  int64_t **vals;
  size_t cap, n;
};

smp_memo_t *smp_memo_new(void) {
  smp_memo_t *m = tn_xcalloc(1, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  return m;
}

void smp_memo_free(smp_memo_t *m) {
  if (!m) return;
  for (size_t i = 0; i < m->cap; i++) free(m->vals[i]);
  free(m->keys);
  free(m->vals);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

static size_t slot_of(const smp_memo_t *m, uint64_t key) {
  size_t i = (size_t)(key * 0x9e3779b97f4a7c15ULL) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

int64_t *smp_memo_get(smp_memo_t *m, uint64_t key) {
  if (!m) return NULL;
  key = key ? key : 1;
  pthread_mutex_lock(&m->mu);
  int64_t *v = m->cap ? m->vals[slot_of(m, key)] : NULL;
  pthread_mutex_unlock(&m->mu);
  return v;
}

static void grow(smp_memo_t *m) {
  smp_memo_t big = {.cap = m->cap ? 2 * m->cap : 64};
  big.keys = tn_xcalloc(big.cap, sizeof *big.keys);
  big.vals = tn_xcalloc(big.cap, sizeof *big.vals);
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i]) {
      size_t j = slot_of(&big, m->keys[i]);
      big.keys[j] = m->keys[i], big.vals[j] = m->vals[i];
    }
  free(m->keys);
  free(m->vals);
  m->keys = big.keys, m->vals = big.vals, m->cap = big.cap;
}

int64_t *smp_memo_put(smp_memo_t *m, uint64_t key, int64_t *val) {
  if (!m) return val;
  key = key ? key : 1;
  pthread_mutex_lock(&m->mu);
  if ((m->n + 1) * 2 > m->cap) grow(m);
  size_t i = slot_of(m, key);
  if (m->keys[i]) { /* another thread got there first: the values are equal */
    free(val);
    val = m->vals[i];
  } else {
    m->keys[i] = key, m->vals[i] = val, m->n++;
  }
  pthread_mutex_unlock(&m->mu);
  return val;
}
