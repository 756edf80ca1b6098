/* test_common.c — suite "common": errors, arena, string buffers, RNG, hashing,
 * half floats and the identifier rules that keep generated code safe. */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "testutil.h"

START_TEST(t_err) {
  tn_err_t e = {0};
  ck_assert_int_eq(tn_err_set(&e, TN_EINVAL, "bad %s at %d", "thing", 7), TN_EINVAL);
  ck_assert_str_eq(e.msg, "bad thing at 7");
  tn_err_prefix(&e, "while %s", "parsing");
  ck_assert_str_eq(e.msg, "while parsing: bad thing at 7");
  ck_assert_int_eq(e.code, TN_EINVAL);
  ck_assert_int_eq(tn_err_set(NULL, TN_EIO, "ignored"), TN_EIO);
  ck_assert_str_eq(tn_strerror(TN_ENOMEM), "out of memory or over a size limit");
}
END_TEST

START_TEST(t_arena) {
  tn_arena_t *a = tn_arena_new();
  char *s = tn_arena_printf(a, "%s-%d", "x", 42);
  ck_assert_str_eq(s, "x-42");
  /* Large and many allocations: zeroed, aligned, distinct. */
  unsigned char *big = tn_arena_alloc(a, 100000);
  for (int i = 0; i < 100000; i++) ck_assert_int_eq(big[i], 0);
  void *prev = NULL;
  for (int i = 0; i < 5000; i++) {
    void *p = tn_arena_alloc(a, 24);
    ck_assert_int_eq((uintptr_t)p % 16, 0);
    ck_assert_ptr_ne(p, prev);
    prev = p;
  }
  ck_assert_str_eq(tn_arena_strndup(a, "abcdef", 3), "abc");
  ck_assert_uint_ge(tn_arena_used(a), 100000 + 5000 * 32);
  tn_arena_free(a);
}
END_TEST

START_TEST(t_buf) {
  tn_buf_t b;
  tn_buf_init(&b);
  ck_assert_str_eq(tn_buf_str(&b), "");
  for (int i = 0; i < 1000; i++) tn_buf_printf(&b, "%d,", i % 10);
  ck_assert_uint_eq(b.len, 2000);
  ck_assert(strncmp(tn_buf_str(&b), "0,1,2,", 6) == 0);
  tn_buf_reset(&b);
  tn_buf_indent(&b, 2);
  tn_buf_put(&b, "x");
  tn_buf_putc(&b, '!');
  char *s = tn_buf_take(&b);
  ck_assert_str_eq(s, "  x!");
  free(s);
  ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(t_rng) {
  tn_rng_t a, b;
  tn_rng_seed(&a, 42);
  tn_rng_seed(&b, 42);
  for (int i = 0; i < 100; i++) ck_assert_uint_eq(tn_rng_next(&a), tn_rng_next(&b));
  /* Pinned value: the stream must be the same on every machine. */
  tn_rng_seed(&a, 1);
  ck_assert_uint_eq(tn_rng_next(&a), 0xb3f2af6d0fc710c5ULL);
  int counts[6] = {0};
  for (int i = 0; i < 60000; i++) counts[tn_rng_below(&a, 6)]++;
  for (int i = 0; i < 6; i++) ck_assert(counts[i] > 9000 && counts[i] < 11000);
  for (int i = 0; i < 1000; i++) {
    double d = tn_rng_double(&a);
    ck_assert(d >= 0.0 && d < 1.0);
  }
  ck_assert_uint_eq(tn_rng_below(&a, 1), 0);
}
END_TEST

START_TEST(t_hash) {
  ck_assert_uint_eq(tn_fnv1a(TN_FNV_INIT, "", 0), 0xcbf29ce484222325ULL);
  ck_assert_uint_eq(tn_fnv1a(TN_FNV_INIT, "a", 1), 0xaf63dc4c8601ec8cULL);
  ck_assert_uint_ne(tn_fnv1a_str(tn_fnv1a_str(TN_FNV_INIT, "ab"), "c"),
                    tn_fnv1a_str(tn_fnv1a_str(TN_FNV_INIT, "a"), "bc"));
  ck_assert_uint_eq(tn_fnv1a_u64(TN_FNV_INIT, 0x0102030405060708ULL),
                    tn_fnv1a(TN_FNV_INIT, "\x08\x07\x06\x05\x04\x03\x02\x01", 8));
}
END_TEST

START_TEST(t_half) {
  ck_assert_uint_eq(tn_float_to_half(1.0f), 0x3c00);
  ck_assert_uint_eq(tn_float_to_half(-2.0f), 0xc000);
  ck_assert_uint_eq(tn_float_to_half(65504.0f), 0x7bff);
  ck_assert_uint_eq(tn_float_to_half(1e6f), 0x7c00);          /* overflow -> inf */
  ck_assert_uint_eq(tn_float_to_half(5.9604645e-8f), 0x0001); /* smallest subnormal */
  ck_assert_uint_eq(tn_float_to_half(1.00048828125f), 0x3c00); /* tie -> even */
  ck_assert(isnan(tn_half_to_float(tn_float_to_half(NAN))));
  /* Every finite half round-trips exactly. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ck_assert_uint_eq(tn_float_to_half(tn_half_to_float((uint16_t)h)), h);
  }
  ck_assert(tn_half_to_float(0x3555) > 0.333f && tn_half_to_float(0x3555) < 0.3334f);
}
END_TEST

START_TEST(t_bf16) {
  ck_assert_uint_eq(tn_float_to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(tn_float_to_bf16(-2.0f), 0xc000);
  ck_assert_uint_eq(tn_float_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie -> even (1) */
  ck_assert_uint_eq(tn_float_to_bf16(1.01171875f), 0x3f82); /* 1 + 3 * 2^-8: tie -> even (1 + 2^-6) */
  ck_assert_uint_eq(tn_float_to_bf16(1.005f), 0x3f81);      /* above the tie: up */
  ck_assert_uint_eq(tn_float_to_bf16(3.4e38f), 0x7f80);     /* rounds past the largest: inf */
  ck_assert_uint_eq(tn_float_to_bf16(INFINITY), 0x7f80);
  ck_assert(isnan(tn_bf16_to_float(tn_float_to_bf16(NAN))));
  ck_assert(isnan(tn_bf16_to_float(tn_float_to_bf16(-NAN))));
  ck_assert_float_eq(tn_bf16_to_float(0x7f7f), 3.3895313892515355e38f);
  /* Every bfloat16 that is not NaN round-trips exactly. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
    ck_assert_uint_eq(tn_float_to_bf16(tn_bf16_to_float((uint16_t)h)), h);
  }
}
END_TEST

START_TEST(t_identifiers) {
  ck_assert(tn_is_identifier("A"));
  ck_assert(tn_is_identifier("x_1"));
  ck_assert(tn_is_identifier("_t"));
  ck_assert(!tn_is_identifier(""));
  ck_assert(!tn_is_identifier("1a"));
  ck_assert(!tn_is_identifier("a-b"));
  ck_assert(!tn_is_identifier("A;system"));
  ck_assert(!tn_is_identifier("int"));
  ck_assert(!tn_is_identifier("float4"));
  ck_assert(!tn_is_identifier("threadIdx"));
  ck_assert(!tn_is_identifier("kernel"));
  ck_assert(!tn_is_identifier("__x"));
  ck_assert(!tn_is_identifier("tuned_buf"));
  ck_assert(tn_is_reserved_word("while"));
  ck_assert(!tn_is_reserved_word("whilst"));
}
END_TEST

START_TEST(t_read_file) {
  char *s = NULL;
  size_t n = 0;
  tn_err_t e = {0};
  ck_assert_int_eq(tn_read_file(SRC("workloads/matmul.tw"), 1 << 20, &s, &n, &e), TN_OK);
  ck_assert_uint_eq(strlen(s), n);
  ck_assert_ptr_nonnull(strstr(s, "param M"));
  free(s);
  ck_assert_int_eq(tn_read_file(SRC("workloads/matmul.tw"), 10, &s, &n, &e), TN_ENOMEM);
  ck_assert_ptr_nonnull(strstr(e.msg, "larger than the limit"));
  ck_assert_int_eq(tn_read_file("/nonexistent/x.tw", 100, &s, &n, &e), TN_EIO);
  ck_assert_ptr_nonnull(strstr(e.msg, "cannot open '/nonexistent/x.tw'"));
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("common");
  TU_TCASE(s, "core", 0, t_err, t_arena, t_buf, t_rng, t_hash, t_half, t_bf16, t_identifiers, t_read_file);
  return s;
}

TN_TEST_MAIN(make)
