/* cand.c — search candidates: a post-processed schedule with its trace JSON,
 * the trace hash used for dedup, and cached cost-model features; and a memo
 * of the candidates fully decided traces gave. */
#include <pthread.h>
#include <stdlib.h>

#include "search/srch_internal.h"

uint64_t srch_trace_hash(const char *json) {
  char id[TN_ID_SIZE];
  db_trace_hash(json, id);
  return tn_id_key(id);
}

srch_cand_t *srch_cand_make(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace,
                            uint64_t seed, smp_stage_t *stage, tn_err_t *err) {
  sch_t *s = NULL;
  if (srch_schedule(f, t, trace, seed, &s, stage, err) < 0) return NULL;
  srch_cand_t *c = tn_xcalloc(1, sizeof *c);
  c->refs = 1;
  c->space = -1;
  c->sch = s;
  c->json = sch_trace_to_json(sch_get_trace(s));
  c->hash = srch_trace_hash(c->json);
  return c;
}

srch_cand_t *srch_cand_ref(srch_cand_t *c) {
  __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  return c;
}

void srch_cand_unref(srch_cand_t *c) {
  if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  sch_free(c->sch);
  free(c->json);
  cm_feature_rows_free(&c->feat);
  free(c);
}

/* ---- made once ---------------------------------------------------------- */

void srch_cand_memo_init(srch_cand_memo_t *m) {
  *m = (srch_cand_memo_t){0};
  pthread_mutex_init(&m->mu, NULL);
}

void srch_cand_memo_free(srch_cand_memo_t *m) {
  for (size_t i = 0; i < m->cap; i++) srch_cand_unref(m->cands[i]);
  free(m->keys), free(m->cands);
  pthread_mutex_destroy(&m->mu);
}

static size_t memo_slot(const srch_cand_memo_t *m, uint64_t key) {
  size_t i = (size_t)(key * 0x9e3779b97f4a7c15ULL) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

static void memo_grow(srch_cand_memo_t *m) {
  size_t cap = m->cap ? 2 * m->cap : 256;
  uint64_t *keys = m->keys;
  srch_cand_t **cands = m->cands;
  size_t old = m->cap;
  m->keys = tn_xcalloc(cap, sizeof *m->keys);
  m->cands = tn_xcalloc(cap, sizeof *m->cands);
  m->cap = cap;
  for (size_t i = 0; i < old; i++)
    if (keys[i]) {
      size_t j = memo_slot(m, keys[i]);
      m->keys[j] = keys[i], m->cands[j] = cands[i];
    }
  free(keys), free(cands);
}

/* The key of a fully decided trace, 0 for one that still samples. */
static uint64_t memo_key(const sch_trace_t *tr) {
  for (int i = 0; i < tr->n; i++)
    if (sch_inst_is_sampling(tr->insts[i].kind) && tr->insts[i].ndecision == 0) return 0;
  uint64_t k = sch_trace_hash(tr, tr->n);
  return k ? k : 1;
}

srch_cand_t *srch_cand_memo_make(srch_cand_memo_t *m, const ir_func_t *f, const tn_target_t *t,
                                 const sch_trace_t *trace, uint64_t seed, int space) {
  uint64_t key = memo_key(trace);
  srch_cand_t *c = NULL;
  if (key) {
    pthread_mutex_lock(&m->mu);
    size_t i = m->cap ? memo_slot(m, key) : 0;
    bool known = m->cap && m->keys[i] == key;
    if (known && m->cands[i]) c = srch_cand_ref(m->cands[i]);
    pthread_mutex_unlock(&m->mu);
    if (known) return c;
  }
  /* A fully decided trace takes its seed from its hash, not from the caller:
   * whichever thread makes a memoised trace first, the candidate is the same
   * (the search is deterministic for any number of threads).  A trace that
   * still samples is not memoised and samples with the caller's seed: one
   * seed for all of them made every fresh sample of a space the same. */
  c = srch_cand_make(f, t, trace, key ? key : seed, NULL, NULL);
  if (c) c->space = space; /* before another thread can see it */
  if (!key) return c;
  pthread_mutex_lock(&m->mu);
  if ((m->n + 1) * 2 > m->cap) memo_grow(m);
  size_t i = memo_slot(m, key);
  if (!m->keys[i]) {
    m->keys[i] = key, m->cands[i] = c ? srch_cand_ref(c) : NULL, m->n++;
  } else { /* another thread made the same candidate first: take that one, as a later call would */
    if (c) srch_cand_unref(c);
    c = m->cands[i] ? srch_cand_ref(m->cands[i]) : NULL;
  }
  pthread_mutex_unlock(&m->mu);
  return c;
}
