/* ident.c — identities: BLAKE2b-256 digests (libsodium's crypto_generichash)
 * in named domains, as hex, and the checks of hex identities and prefixes.
 * The one place where tuned makes the names of workloads and traces. */
#include "common.h"

#include <string.h>

#include <sodium.h>

_Static_assert(sizeof(crypto_generichash_state) <= sizeof(((tn_id_ctx_t *)0)->state),
               "tn_id_ctx_t too small for libsodium's crypto_generichash_state");
_Static_assert(_Alignof(crypto_generichash_state) <= 64, "tn_id_ctx_t under-aligned");
_Static_assert(TN_ID_BYTES >= crypto_generichash_BYTES_MIN && TN_ID_BYTES <= crypto_generichash_BYTES_MAX,
               "BLAKE2b cannot give TN_ID_BYTES");

#define ST(c) ((crypto_generichash_state *)(void *)(c)->state)

/* No sodium_init(): it only picks a faster BLAKE2b compression function
 * for this CPU (same digests) and would seed libsodium's random generator,
 * which tuned does not use. */
void tn_id_init(tn_id_ctx_t *c, const char *domain) {
  crypto_generichash_init(ST(c), NULL, 0, TN_ID_BYTES);
  crypto_generichash_update(ST(c), (const unsigned char *)domain, strlen(domain) + 1);
}

void tn_id_update(tn_id_ctx_t *c, const void *data, size_t n) {
  if (n) crypto_generichash_update(ST(c), data, n);
}

void tn_id_final(tn_id_ctx_t *c, char out[TN_ID_SIZE]) {
  unsigned char d[TN_ID_BYTES];
  crypto_generichash_final(ST(c), d, sizeof d);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < TN_ID_BYTES; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[TN_ID_HEX] = 0;
}

void tn_id_of(const char *domain, const void *data, size_t n, char out[TN_ID_SIZE]) {
  tn_id_ctx_t c;
  tn_id_init(&c, domain);
  tn_id_update(&c, data, n);
  tn_id_final(&c, out);
}

/* The number of leading lower-case hex digits of s, and whether that is all of it. */
static size_t hex_run(const char *s, bool *whole) {
  size_t n = 0;
  while (s[n] && ((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) n++;
  *whole = s[n] == 0;
  return n;
}

bool tn_id_valid(const char *s) {
  bool whole = false;
  return s && hex_run(s, &whole) == TN_ID_HEX && whole;
}

bool tn_id_prefix_valid(const char *s) {
  bool whole = false;
  size_t n = s ? hex_run(s, &whole) : 0;
  return s && whole && n >= TN_ID_SHOWN && n <= TN_ID_HEX;
}

uint64_t tn_id_key(const char *hex) {
  uint64_t k = 0;
  for (int i = 0; i < 16; i++) {
    char c = hex ? hex[i] : 0;
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return 0;
    k = k << 4 | (uint64_t)v;
  }
  return k;
}
