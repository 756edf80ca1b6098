/* find_collision.c — how tests/fnv-collision's pair was found (kept for the
 * record; not built by meson): a distinguished-point birthday search for an
 * FNV-1a-64 collision across two workloads (README.md).
 *
 * The two workloads differ before their second tensor's name (one declares
 * W const), so the FNV state just before that name differs: hA, hB (read
 * from ir/hash.c's stream).  We want names a, b with
 * FNV(hA, "\x01\0\0\0\0\0\0\0" a "\0") == FNV(hB, "\x01\0\0\0\0\0\0\0" b "\0")
 * (the 8 bytes: put_str's "not NULL").  Everything after the name is the
 * same in both, so their whole hashes are then equal.  F(x) hashes the name
 * that x spells after the state that x's low bit picks; chains walk
 * x -> F(x) until the low D bits are zero (a distinguished point); two
 * chains that reach the same point merged, and re-walking them finds two
 * inputs with one output: half the time one of each side.
 *
 *   cc -O3 -march=native find_collision.c -o find_collision
 *   ./find_collision 4670f3ed4fe6a0af dfca1f660887f822 22 777
 * prints "A q4hmki04cnnhze B q1etwwmjxjrxbk ..." after about 2.0e9 F's. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define P 0x100000001b3ULL
#define CHAINS 8 /* walked side by side */

static uint64_t side[2];
static const char alpha[] = "abcdefghijklmnopqrstuvwxyz012345";

/* "q" and 13 characters of 5 bits each: 65 bits, so every x spells a name of its own. */
static void name_of(uint64_t x, char out[15]) {
  out[0] = 'q';
  for (int i = 1; i < 14; i++, x >>= 5) out[i] = alpha[x & 31];
  out[14] = 0;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 255)) * P;
  return h;
}

static uint64_t F(uint64_t x) {
  uint64_t h = side[x & 1];
  h = (h ^ 'q') * P;
  for (int i = 1; i < 14; i++, x >>= 5) h = (h ^ (unsigned char)alpha[x & 31]) * P;
  return h * P; /* the NUL */
}

typedef struct point {
  uint64_t dp, start, len;
} point_t;

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_random(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Two chains (s1 walked n1 steps, s2 n2) that end at one point: the first
 * x1 != x2 on them with F(x1) == F(x2); 1 when they are of the two sides. */
static int merge(uint64_t s1, uint64_t n1, uint64_t s2, uint64_t n2) {
  for (; n1 > n2; n1--) s1 = F(s1);
  for (; n2 > n1; n2--) s2 = F(s2);
  if (s1 == s2) return 0; /* one chain started on the other */
  for (;; s1 = F(s1), s2 = F(s2)) {
    if (F(s1) != F(s2)) continue;
    if ((s1 & 1) == (s2 & 1)) return 0; /* two names on one side: not the pair we want */
    uint64_t a = s1 & 1 ? s2 : s1, b = s1 & 1 ? s1 : s2;
    char na[15], nb[15];
    name_of(a, na), name_of(b, nb);
    printf("A %s B %s F %016" PRIx64 "\n", na, nb, F(a));
    return 1;
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s STATE_A STATE_B D SEED\n", argv[0]);
    return 2;
  }
  side[0] = fnv_u64(strtoull(argv[1], NULL, 16), 1);
  side[1] = fnv_u64(strtoull(argv[2], NULL, 16), 1);
  int d = atoi(argv[3]);
  rng ^= strtoull(argv[4], NULL, 10);
  uint64_t dmask = (1ULL << d) - 1, maxlen = 30ULL << d, evals = 0;
  point_t *seen = NULL;
  size_t nseen = 0, cap = 0;
  uint64_t x[CHAINS], s[CHAINS], n[CHAINS];
  for (int j = 0; j < CHAINS; j++) x[j] = s[j] = next_random(), n[j] = 0;
  for (;;) {
    for (int j = 0; j < CHAINS; j++) x[j] = F(x[j]), n[j]++;
    for (int j = 0; j < CHAINS; j++) {
      if ((x[j] & dmask) && n[j] < maxlen) continue;
      evals += n[j];
      if (!(x[j] & dmask)) {
        size_t i = 0;
        while (i < nseen && seen[i].dp != x[j]) i++;
        if (i < nseen && merge(seen[i].start, seen[i].len, s[j], n[j])) {
          fprintf(stderr, "%.3g evaluations of F, %zu distinguished points\n", (double)evals, nseen);
          return 0;
        }
        if (i == nseen) {
          if (nseen == cap) seen = realloc(seen, (cap = 2 * cap + 64) * sizeof *seen);
          seen[nseen++] = (point_t){x[j], s[j], n[j]};
        }
      }
      x[j] = s[j] = next_random(), n[j] = 0; /* a new chain (also after one too long: a cycle) */
    }
  }
}
