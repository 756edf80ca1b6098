/* dedup.c — an open-addressing set of 64-bit trace hashes: which traces were
 * measured (this run or the database) or are in flight, so none is measured
 * twice. */
#include <stdlib.h>

#include "search/srch_internal.h"

void srch_hashset_init(srch_hashset_t *s) { *s = (srch_hashset_t){0}; }

void srch_hashset_free(srch_hashset_t *s) {
  free(s->keys);
  *s = (srch_hashset_t){0};
}

static size_t slot_of(const srch_hashset_t *s, uint64_t key) {
  size_t i = (size_t)(key * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);
  while (s->keys[i] && s->keys[i] != key) i = (i + 1) & (s->cap - 1);
  return i;
}

bool srch_hashset_has(const srch_hashset_t *s, uint64_t key) {
  if (!s->cap) return false;
  key = key ? key : 1;
  return s->keys[slot_of(s, key)] == key;
}

static void grow(srch_hashset_t *s) {
  srch_hashset_t big = {.cap = s->cap ? s->cap * 2 : 64};
  big.keys = tn_xcalloc(big.cap, sizeof *big.keys);
  for (size_t i = 0; i < s->cap; i++)
    if (s->keys[i]) big.keys[slot_of(&big, s->keys[i])] = s->keys[i], big.n++;
  free(s->keys);
  *s = big;
}

bool srch_hashset_add(srch_hashset_t *s, uint64_t key) {
  key = key ? key : 1;
  if ((s->n + 1) * 2 > s->cap) grow(s);
  size_t i = slot_of(s, key);
  if (s->keys[i]) return false;
  s->keys[i] = key;
  s->n++;
  return true;
}
