/* sampling.c — the random draws behind the sampling instructions: perfect
 * tiles (prime exponents spread over the slots, stars and bars), their repair
 * on replay, and categorical indices.  Integer-only except the categorical
 * cumulative sum, so the same seed gives the same samples everywhere. */
#include "sch_internal.h"

/* Factorises n into primes: p[i]^e[i]; returns the count. */
static int factorize(int64_t n, int64_t *p, int *e) {
  int k = 0;
  for (int64_t d = 2; d * d <= n; d += d == 2 ? 1 : 2) {
    if (n % d) continue;
    p[k] = d;
    e[k] = 0;
    while (n % d == 0) n /= d, e[k]++;
    k++;
  }
  if (n > 1) p[k] = n, e[k++] = 1;
  return k;
}

/* One uniform draw among the compositions of `e` into n ordered parts:
 * choose n-1 bar positions among e+n-1 places. */
static void spread(tn_rng_t *rng, int e, int n, int *parts) {
  int places = e + n - 1;
  char bar[96] = {0};
  for (int chosen = 0; chosen < n - 1;) { /* places <= 63 + 16 */
    int at = (int)tn_rng_below(rng, (uint64_t)places);
    if (!bar[at]) bar[at] = 1, chosen++;
  }
  int slot = 0;
  for (int i = 0; i < n; i++) parts[i] = 0;
  for (int i = 0; i < places; i++) {
    if (bar[i]) slot++;
    else parts[slot]++;
  }
}

static void draw(tn_rng_t *rng, int64_t extent, int n, int64_t *out) {
  int64_t p[64];
  int e[64], parts[16];
  int k = factorize(extent, p, e);
  for (int i = 0; i < n; i++) out[i] = 1;
  for (int i = 0; i < k; i++) {
    if (e[i] == 1) {
      out[tn_rng_below(rng, (uint64_t)n)] *= p[i];
      continue;
    }
    spread(rng, e[i], n, parts);
    for (int s = 0; s < n; s++)
      for (int r = 0; r < parts[s]; r++) out[s] *= p[i];
  }
}

int sch_sample_tile(tn_rng_t *rng, int64_t extent, int n, int64_t max_innermost, int64_t *out) {
  if (n < 1 || n > 16 || extent < 1) return TN_EINVAL;
  for (int tries = 0; tries < 1000; tries++) {
    draw(rng, extent, n, out);
    if (max_innermost <= 0 || out[n - 1] <= max_innermost) return TN_OK;
  }
  /* Rejection keeps failing (a large prime, say): move prime factors out of
   * the innermost slot until it fits. */
  if (n == 1) return TN_EINVAL;
  while (out[n - 1] > max_innermost) {
    int64_t q = out[n - 1], d = 2;
    while (q % d) d++;
    out[n - 1] /= d;
    out[n - 2] *= d;
  }
  return TN_OK;
}

void sch_repair_tile(int64_t extent, int64_t *dec, int n) {
  int64_t remaining = extent;
  for (int i = n - 1; i >= 1; i--) {
    if (dec[i] < 1 || remaining % dec[i] != 0) dec[i] = remaining;
    remaining /= dec[i];
  }
  dec[0] = remaining;
}

int sch_sample_index(tn_rng_t *rng, const double *probs, int n) {
  double total = 0;
  for (int i = 0; i < n; i++) total += probs[i];
  if (!(total > 0)) return (int)tn_rng_below(rng, (uint64_t)n);
  double x = tn_rng_double(rng) * total, acc = 0;
  for (int i = 0; i < n; i++) {
    acc += probs[i];
    if (x < acc) return i;
  }
  return n - 1;
}
