/* test_common.c — suite "common": errors, arena, string buffers, RNG, hashing,
 * half floats, the identifier rules that keep generated code safe, and
 * targets: the shipped files, the config directory, untrusted files and the
 * roofline. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "common/target.h"
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

/* Identities: BLAKE2b-256 of the domain, its NUL and the data, as Python's
 * hashlib.blake2b(..., digest_size=32) gives them; streamed in pieces the
 * same; the checks of whole identities and prefixes; the 64-bit key. */
START_TEST(t_ident) {
  char h[TN_ID_SIZE], g[TN_ID_SIZE];
  tn_id_of("", "abc", 3, h);
  ck_assert_str_eq(h, "4b44b5a5f9e6fafead231e4d609a8e88053a6053c087b68e24e31faf0fb8dfe7");
  tn_id_of(TN_ID_TRACE, "{}", 2, h);
  ck_assert_str_eq(h, "a100384f47378538ec82fb3ee06effbbab2fada9a3f42e3c47061deba13feb71");
  char x[1000];
  memset(x, 'x', sizeof x);
  tn_id_ctx_t c;
  tn_id_init(&c, TN_ID_WORKLOAD);
  for (size_t i = 0; i < sizeof x; i += 7) tn_id_update(&c, x + i, TN_MIN(7, sizeof x - i));
  tn_id_update(&c, x, 0);
  tn_id_final(&c, g);
  ck_assert_str_eq(g, "f53f353acaf102c54017db380d7e2a73c151ecae3ccda14a11570b7259c07e77");
  tn_id_of(TN_ID_WORKLOAD, x, sizeof x, h);
  ck_assert_str_eq(h, g);
  tn_id_of(TN_ID_TRACE, x, sizeof x, h); /* domains keep kinds apart */
  ck_assert_str_ne(h, g);
  ck_assert(tn_id_valid(g) && tn_id_prefix_valid(g));
  ck_assert_uint_eq(tn_id_key(g), UINT64_C(0xf53f353acaf102c5));
  g[TN_ID_SHOWN] = 0;
  ck_assert(!tn_id_valid(g) && tn_id_prefix_valid(g));
  g[TN_ID_SHOWN - 1] = 0;
  ck_assert(!tn_id_prefix_valid(g));
  tn_id_of(TN_ID_WORKLOAD, x, sizeof x, g);
  g[5] = 'A';
  ck_assert(!tn_id_valid(g) && !tn_id_prefix_valid(g));
  ck_assert(!tn_id_valid(NULL) && !tn_id_prefix_valid(NULL) && !tn_id_valid(""));
  ck_assert_uint_eq(tn_id_key("12"), 0);
  ck_assert_uint_eq(tn_id_key(NULL), 0);
}
END_TEST

START_TEST(t_gcd) {
  ck_assert_int_eq(tn_gcd64(12, 18), 6);
  ck_assert_int_eq(tn_gcd64(-12, 18), 6);
  ck_assert_int_eq(tn_gcd64(0, -7), 7);
  ck_assert_int_eq(tn_gcd64(0, 0), 0);
  ck_assert_int_eq(tn_gcd64(INT64_MIN, 6), 2);
  ck_assert_int_eq(tn_gcd64(INT64_MIN, 0), INT64_C(1) << 62); /* 2^63 does not fit: clamped */
  ck_assert_int_eq(tn_gcd64(INT64_MAX, INT64_MAX - 1), 1);
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
  ck_assert(!tn_is_identifier("_Float16")); /* C reserves _X names */
  ck_assert(!tn_is_identifier("typeof"));
  ck_assert(tn_is_reserved_word("while"));
  ck_assert(!tn_is_reserved_word("whilst"));
}
END_TEST

/* -o FILE: written, truncated on a rewrite; a symbolic link there is
 * refused (its target untouched), a missing directory said. */
START_TEST(t_open_out) {
  char dir[] = "/tmp/tuned-open-out-XXXXXX", path[64], link_path[64], victim[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/out.json", dir);
  snprintf(link_path, sizeof link_path, "%s/link.json", dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  tn_err_t e = {0};
  for (int round = 0; round < 2; round++) {
    FILE *f = tn_open_out(path, false, &e);
    ck_assert_msg(f, "%s", e.msg);
    fputs(round ? "two\n" : "first and longer\n", f);
    ck_assert_int_eq(fclose(f), 0);
  }
  char *s = NULL;
  size_t n = 0;
  ck_assert_int_eq(tn_read_file(path, 100, &s, &n, &e), TN_OK);
  ck_assert_str_eq(s, "two\n");
  free(s);
  FILE *v = fopen(victim, "w");
  fputs("precious\n", v);
  fclose(v);
  ck_assert_int_eq(symlink(victim, link_path), 0);
  ck_assert_ptr_null(tn_open_out(link_path, true, &e));
  ck_assert_int_eq(e.code, TN_EINVAL);
  ck_assert_msg(strstr(e.msg, "link.json is a symbolic link: not written through"), "%s", e.msg);
  ck_assert_int_eq(tn_read_file(victim, 100, &s, &n, &e), TN_OK);
  ck_assert_str_eq(s, "precious\n");
  free(s);
  char missing[96];
  snprintf(missing, sizeof missing, "%s/no/such/dir.json", dir);
  ck_assert_ptr_null(tn_open_out(missing, false, &e));
  ck_assert_msg(e.code == TN_EIO && strstr(e.msg, "No such file or directory"), "%s", e.msg);
  unlink(link_path);
  unlink(victim);
  unlink(path);
  rmdir(dir);
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


/* ---- targets ---------------------------------------------------------------- */

/* The values of the table that was built into the binaries before the
 * targets became files only: the files must give exactly these. */
static const struct {
  const char *name, *arch;
  tn_target_kind_t kind;
  int threads, warp, vec;
  int64_t shared, optin, regs_block;
  double gflops, gbps;
  int sms;   /* sm_count */
  int warps, blocks; /* max_warps_per_sm, max_blocks_per_sm (added with the kernel plan; the register files of
                        the GPU stand-ins too) */
} shipped[] = {
    {"nvidia/tesla-t4", "sm_75", TN_TARGET_CUDA, 1024, 32, 16, 49152, 65536, 65536, 8100, 320, 40, 32, 16},
    {"nvidia/tesla-p100", "sm_60", TN_TARGET_CUDA, 1024, 32, 16, 49152, 0, 65536, 10600, 732, 56, 64, 32},
    {"nvidia/a100", "sm_80", TN_TARGET_CUDA, 1024, 32, 16, 49152, 166912, 65536, 19500, 1555, 108, 64, 32},
    {"nvidia/h100", "sm_90", TN_TARGET_CUDA, 1024, 32, 16, 49152, 232448, 65536, 66900, 3350, 132, 64, 32},
    {"nvidia/h200", "sm_90", TN_TARGET_CUDA, 1024, 32, 16, 49152, 232448, 65536, 66900, 4800, 132, 64, 32},
    {"opencl/pocl-cpu", "", TN_TARGET_OPENCL, 1024, 32, 16, 49152, 0, 65536, 0, 0, 0, 64, 32},
    {"cpu", "native", TN_TARGET_CPU, 0, 1, 32, 0, 0, 0, 0, 0, 0, 0, 0},
    {"cuda-host", "", TN_TARGET_CUDA_HOST, 1024, 32, 16, 49152, 232448, 65536, 0, 0, 0, 64, 32},
    {"cuda-host/hopper", "sm_90a", TN_TARGET_CUDA_HOST, 1024, 32, 16, 49152, 232448, 65536, 0, 0, 132, 64, 32},
};

#define CPU_CC "gcc" /* configs/cpu.json and cpu/local.json */

START_TEST(t_target_shipped) {
  tn_err_t e = {0};
  char **names;
  int n;
  ck_assert_msg(tn_target_names(NULL, &names, &n, &e) == TN_OK, "%s", e.msg);
  for (size_t i = 0; i < TN_ARRAY_LEN(shipped); i++) {
    tn_target_t t;
    ck_assert_msg(tn_target_lookup(shipped[i].name, NULL, &t, &e) == TN_OK, "%s: %s", shipped[i].name, e.msg);
    ck_assert_str_eq(t.name, shipped[i].name);
    ck_assert_str_eq(t.arch, shipped[i].arch);
    ck_assert_int_eq(t.kind, shipped[i].kind);
    ck_assert_int_eq(t.max_threads_per_block, shipped[i].threads);
    ck_assert_int_eq(t.warp_size, shipped[i].warp);
    ck_assert_int_eq(t.max_vector_bytes, shipped[i].vec);
    ck_assert_int_eq(t.max_shared_memory_per_block, shipped[i].shared);
    ck_assert_int_eq(t.max_shared_memory_per_block_optin, shipped[i].optin);
    ck_assert_int_eq(t.max_registers_per_block, shipped[i].regs_block);
    ck_assert_double_eq(t.peak_gflops, shipped[i].gflops);
    ck_assert_double_eq(t.peak_gbps, shipped[i].gbps);
    ck_assert_int_eq(t.sm_count, shipped[i].sms);
    ck_assert_int_eq(t.max_warps_per_sm, shipped[i].warps);
    ck_assert_int_eq(t.max_blocks_per_sm, shipped[i].blocks);
    if (t.kind == TN_TARGET_CPU) ck_assert_int_ge(t.num_cores, 1); /* detected */
    /* Hopper: the H100/H200 and the harness configured as one (the warpgroup-MMA design space) */
    bool hopper = !strcmp(t.name, "nvidia/h100") || !strcmp(t.name, "nvidia/h200") || !strcmp(t.name, "cuda-host/hopper");
    ck_assert_msg(tn_target_is_hopper(&t) == hopper, "%s", t.name);
    bool listed = false;
    for (int k = 0; k < n; k++) listed |= strcmp(names[k], shipped[i].name) == 0;
    ck_assert_msg(listed, "%s is not listed", shipped[i].name);
  }
  for (int k = 1; k < n; k++) ck_assert_int_lt(strcmp(names[k - 1], names[k]), 0); /* sorted */
  tn_target_names_free(names, n);
  tn_target_t t;
  ck_assert_int_eq(tn_target_lookup("opencl", NULL, &t, &e), TN_OK); /* the alias */
  ck_assert_str_eq(t.name, "opencl/pocl-cpu");
  ck_assert_str_eq(t.cc, ""); /* no host compiler */
  /* the host compilers: the cpu target's is the one measured faster (README, "Targets") */
  ck_assert_int_eq(tn_target_lookup("cpu", NULL, &t, &e), TN_OK);
  ck_assert_str_eq(t.cc, CPU_CC);
  ck_assert_int_eq(tn_target_lookup("cpu/local", NULL, &t, &e), TN_OK);
  ck_assert_str_eq(t.cc, CPU_CC);
  ck_assert_int_eq(tn_target_lookup("cuda-host", NULL, &t, &e), TN_OK);
  ck_assert_str_eq(t.cc, "gcc");
  ck_assert(!t.allow_tf32);
  /* TF32: a CUDA target of its own name; not for the others */
  ck_assert_int_eq(tn_target_lookup("nvidia/h100", NULL, &t, &e), TN_OK);
  ck_assert(!t.allow_tf32);
  ck_assert_int_eq(tn_target_lookup("nvidia/h100+tf32", NULL, &t, &e), TN_OK);
  ck_assert_str_eq(t.name, "nvidia/h100+tf32");
  ck_assert_str_eq(t.arch, "sm_90");
  ck_assert(t.allow_tf32);
  ck_assert_int_eq(tn_target_lookup("cuda-host+tf32", NULL, &t, &e), TN_OK);
  ck_assert(t.allow_tf32 && t.kind == TN_TARGET_CUDA_HOST);
  ck_assert_int_eq(tn_target_lookup("opencl+tf32", NULL, &t, &e), TN_EINVAL);
  ck_assert_msg(strstr(e.msg, "\"opencl+tf32\": TF32 (+tf32) is a tensor-core mode of CUDA targets; opencl/pocl-cpu "
                       "is of kind opencl"), "%s", e.msg);
  ck_assert_int_eq(tn_target_lookup("nvidia/h999+tf32", NULL, &t, &e), TN_EINVAL);
  ck_assert_msg(strstr(e.msg, "unknown target \"nvidia/h999\""), "%s", e.msg);
  ck_assert_int_eq(tn_target_lookup("+tf32", NULL, &t, &e), TN_EINVAL);
}
END_TEST

/* An unknown target name suggests the nearest known one: a typo, the last
 * part of a name, the start of one, the alias; none when nothing is near. */
START_TEST(t_target_did_you_mean) {
  static const struct { const char *name, *near; } cases[] = {
      {"cpux", "cpu"},          {"h100", "nvidia/h100"},        {"tesla-t4", "nvidia/tesla-t4"},
      {"cuda_host", "cuda-host"}, {"opencl/pocl", "opencl/pocl-cpu"}, {"openc", "opencl"},
      {"nvidia/h10", "nvidia/h100"}, {"zzzz", NULL},          {"nvidia/zz-9000", NULL},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    tn_target_t t;
    tn_err_t e = {0};
    char want[128];
    ck_assert_int_eq(tn_target_lookup(cases[i].name, NULL, &t, &e), TN_EINVAL);
    snprintf(want, sizeof want, "unknown target \"%s\"%s%s%s (known: cpu, ", cases[i].name,
             cases[i].near ? "; did you mean \"" : "", cases[i].near ? cases[i].near : "", cases[i].near ? "\"?" : "");
    ck_assert_msg(strstr(e.msg, want), "%s: %s", cases[i].name, e.msg);
  }
  ck_assert_int_eq(tn_edit_distance("Splitt", "Split"), 1);
  ck_assert_int_eq(tn_edit_distance("", "abc"), 3);
  ck_assert_int_eq(tn_edit_distance("kitten", "sitting"), 3);
}
END_TEST

/* A fresh directory for target files (0700, this user's). */
static void temp_dir(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/tuned-targets-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(buf));
}

#define LAB_CPU "{\"name\": \"lab/cpu\", \"kind\": \"cpu\", \"num_cores\": 2, \"peak_gflops\": 100, \"peak_gbps\": 10}"

START_TEST(t_target_config_dir) {
  char dir[PATH_MAX], got[PATH_MAX], exe[PATH_MAX + 32];
  tn_err_t e = {0};
  unsetenv("TUNED_CONFIG_DIR");
  /* this test runs from the build tree: the source tree's configs/ */
  ck_assert_int_eq(tn_config_dir(got, sizeof got, &e), TN_OK);
  ck_assert_str_eq(got, SRC("configs"));
  ck_assert_int_eq(tn_config_dir_for(TUNED_BUILD_ROOT "/client/tunectl", got, sizeof got, &e), TN_OK);
  ck_assert_str_eq(got, SRC("configs"));
  /* an installed or relocated copy: ../share/tuned/configs next to it, else the configured one */
  temp_dir(dir, sizeof dir);
  snprintf(exe, sizeof exe, "%s/bin/tunectl", dir);
  ck_assert_int_eq(tn_config_dir_for(exe, got, sizeof got, &e), TN_OK);
  ck_assert_str_eq(got, TUNED_CONFIG_INSTALL_DIR);
  tu_put_file(dir, "share/tuned/configs/lab/cpu.json", LAB_CPU);
  ck_assert_int_eq(tn_config_dir_for(exe, got, sizeof got, &e), TN_OK);
  snprintf(exe, sizeof exe, "%s/share/tuned/configs", dir);
  ck_assert_str_eq(got, exe);
  ck_assert_int_eq(tn_config_dir_for(NULL, got, sizeof got, &e), TN_OK);
  ck_assert_str_eq(got, TUNED_CONFIG_INSTALL_DIR);
  /* $TUNED_CONFIG_DIR wins: its targets only, and an unknown name lists them */
  setenv("TUNED_CONFIG_DIR", exe, 1);
  ck_assert_int_eq(tn_config_dir(got, sizeof got, &e), TN_OK);
  ck_assert_str_eq(got, exe);
  tn_target_t t;
  ck_assert_msg(tn_target_lookup("lab/cpu", NULL, &t, &e) == TN_OK, "%s", e.msg);
  ck_assert_int_eq(t.num_cores, 2);
  ck_assert_double_eq(t.peak_gflops, 100);
  ck_assert_int_eq(tn_target_lookup("cpu", NULL, &t, &e), TN_EINVAL);
  ck_assert_msg(strstr(e.msg, "unknown target \"cpu\"; did you mean \"lab/cpu\"? (known: lab/cpu;") &&
                    strstr(e.msg, exe), "%s", e.msg);
  tu_put_file(exe, "lab/gpu.json", "{}");
  tu_put_file(exe, "pretuned/lab-cpu.jsonl", "{}\n");
  tu_put_file(exe, ".hidden.json", "{}");
  char **names;
  int n;
  ck_assert_int_eq(tn_target_names(NULL, &names, &n, &e), TN_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(names[0], "lab/cpu");
  ck_assert_str_eq(names[1], "lab/gpu");
  tn_target_names_free(names, n);
  unsetenv("TUNED_CONFIG_DIR");
  tu_remove_tree(dir);
  /* a config directory that is not there says so, and how to point at one */
  ck_assert_int_eq(tn_target_lookup("cpu", "/nonexistent/configs", &t, &e), TN_EIO);
  ck_assert_msg(strstr(e.msg, "/nonexistent/configs") && strstr(e.msg, "TUNED_CONFIG_DIR"), "%s", e.msg);
  ck_assert_int_eq(tn_target_names("/nonexistent/configs", &names, &n, &e), TN_EIO);
}
END_TEST

/* Looks name up in dir and expects failure with every needle in the message. */
static void refused(const char *dir, const char *name, const char *needle1, const char *needle2) {
  tn_target_t t;
  tn_err_t e = {0};
  ck_assert_msg(tn_target_lookup(name, dir, &t, &e) < 0, "%s was accepted", name);
  ck_assert_msg(strstr(e.msg, needle1) && (!needle2 || strstr(e.msg, needle2)), "%s: %s", name, e.msg);
}

START_TEST(t_target_bad_files) {
  char dir[PATH_MAX], path[PATH_MAX + 32];
  temp_dir(dir, sizeof dir);
  tu_put_file(dir, "lab/cpu.json", LAB_CPU);
  tu_put_file(dir, "broken.json", "{\n  \"name\": \"broken\",\n  \"kind\": \"cpu\"\n  \"warp_size\": 1\n}\n");
  snprintf(path, sizeof path, "%s/broken.json", dir);
  refused(dir, "broken", path, "not valid JSON (line 4)");
  tu_put_file(dir, "other.json", "{\"name\": \"lab/cpu\", \"kind\": \"cpu\"}");
  refused(dir, "other", "\"name\" is \"lab/cpu\"", "(\"other\")");
  tu_put_file(dir, "old.json", "{\"name\": \"old\", \"kind\": \"cpu\", \"l2_bytes\": 4}");
  refused(dir, "old", "unknown field \"l2_bytes\"", "peak_gflops");
  tu_put_file(dir, "huge.json", "{\"name\": \"huge\", \"kind\": \"cpu\", \"num_cores\": 1e12}");
  refused(dir, "huge", "\"num_cores\" must be a non-negative number", NULL);
  /* the host compiler: one of three, and only where there is one */
  tu_put_file(dir, "icc.json", "{\"name\": \"icc\", \"kind\": \"cpu\", \"cc\": \"icc\"}");
  refused(dir, "icc", "target icc: unknown compiler \"icc\" for \"cc\" (expected gcc, clang or auto)", NULL);
  tu_put_file(dir, "gpu.json", "{\"name\": \"gpu\", \"kind\": \"cuda\", \"arch\": \"sm_90\", \"cc\": \"gcc\", "
                               "\"max_threads_per_block\": 1024, \"max_shared_memory_per_block\": 49152}");
  refused(dir, "gpu", "target gpu: \"cc\" applies to cpu and cuda-host targets, not cuda", NULL);
  tu_put_file(dir, "num.json", "{\"name\": \"num\", \"kind\": \"cpu\", \"cc\": 3}");
  refused(dir, "num", "\"cc\" must be a string", NULL);
  /* names that climb out or are not names */
  refused(dir, "../etc/passwd", "bad target name", NULL);
  refused(dir, "lab/../lab/cpu", "bad target name", NULL);
  refused(dir, "/etc/passwd", "bad target name", NULL);
  refused(dir, "lab/.cpu", "bad target name", NULL);
  refused(dir, "", "bad target name", NULL);
  /* a symbolic link, as the file or as a directory on the way, is refused */
  snprintf(path, sizeof path, "%s/link.json", dir);
  ck_assert_int_eq(symlink("lab/cpu.json", path), 0);
  refused(dir, "link", path, "symbolic link");
  snprintf(path, sizeof path, "%s/linked", dir);
  ck_assert_int_eq(symlink("lab", path), 0);
  refused(dir, "linked/cpu", path, "symbolic link");
  char **names;
  int n;
  tn_err_t e = {0};
  ck_assert_int_eq(tn_target_names(dir, &names, &n, &e), TN_OK);
  for (int i = 0; i < n; i++) ck_assert_msg(strncmp(names[i], "link", 4) != 0, "%s listed", names[i]);
  tn_target_names_free(names, n);
  /* a file everyone may write, or another user's */
  snprintf(path, sizeof path, "%s/lab/cpu.json", dir);
  ck_assert_int_eq(chmod(path, 0666), 0);
  refused(dir, "lab/cpu", path, "writable by every user");
  ck_assert_int_eq(chmod(path, 0644), 0);
  if (geteuid() == 0) { /* only root can give a file away */
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    refused(dir, "lab/cpu", path, "belongs to uid 4242");
  }
  tu_remove_tree(dir);
}
END_TEST

/* "cc" is read, defaults to auto where a host compiler builds, goes back out
 * in the target's JSON (records keep it) and can be set by name. */
START_TEST(t_target_cc) {
  tn_target_t t;
  tn_err_t e = {0};
  const char *x = "{\"name\": \"x\", \"kind\": \"cpu\"}";
  ck_assert_int_eq(tn_target_from_json(x, strlen(x), &t, &e), TN_OK);
  ck_assert_str_eq(t.cc, "auto");
  ck_assert_int_eq(tn_target_set_cc(&t, "gcc", &e), TN_OK);
  char *json = tn_target_to_json(&t);
  ck_assert_msg(strstr(json, "\"cc\":\t\"gcc\""), "%s", json);
  tn_target_t back;
  ck_assert_int_eq(tn_target_from_json(json, strlen(json), &back, &e), TN_OK);
  ck_assert_str_eq(back.cc, "gcc");
  free(json);
  ck_assert_int_eq(tn_target_set_cc(&t, "cl", &e), TN_EINVAL);
  ck_assert_str_eq(t.cc, "gcc"); /* unchanged */
  const char *h = "{\"name\": \"h\", \"kind\": \"cuda-host\", \"cc\": \"clang\", \"max_threads_per_block\": 1024, "
                  "\"max_shared_memory_per_block\": 49152}";
  ck_assert_msg(tn_target_from_json(h, strlen(h), &t, &e) == TN_OK, "%s", e.msg);
  ck_assert_str_eq(t.cc, "clang");
  ck_assert(tn_target_uses_cc(TN_TARGET_CPU) && tn_target_uses_cc(TN_TARGET_CUDA_HOST));
  ck_assert(!tn_target_uses_cc(TN_TARGET_CUDA) && !tn_target_uses_cc(TN_TARGET_OPENCL));
  ck_assert_int_eq(tn_target_lookup("nvidia/h100", NULL, &t, &e), TN_OK);
  ck_assert_int_eq(tn_target_set_cc(&t, "gcc", &e), TN_EINVAL);
  json = tn_target_to_json(&t);
  ck_assert_ptr_null(strstr(json, "\"cc\""));
  free(json);
}
END_TEST

START_TEST(t_roofline) {
  tn_target_t t = {.peak_gflops = 1000, .peak_gbps = 100}; /* ridge 10 FLOP/B */
  tn_roofline_t r;
  /* 2e9 FLOP over 1e8 B (20 FLOP/B) in 10 ms: 200 GFLOP/s, compute-bound, 20% */
  ck_assert(tn_target_roofline(&t, 2e9, 1e8, 0.01, &r));
  ck_assert(r.compute_bound);
  ck_assert_double_eq_tol(r.intensity, 20, 1e-9);
  ck_assert_double_eq_tol(r.ridge, 10, 1e-9);
  ck_assert_double_eq_tol(r.achieved, 200, 1e-9);
  ck_assert_double_eq_tol(r.percent, 20, 1e-9);
  char line[256];
  tn_roofline_text(&r, line, sizeof line);
  ck_assert_str_eq(line, "20.0% of the peak 1000 GFLOP/s (compute-bound: 20 FLOP/B, ridge 10 FLOP/B)");
  /* 1e8 FLOP over 4e8 B in 5 ms: 80 GB/s of 100, memory-bound */
  ck_assert(tn_target_roofline(&t, 1e8, 4e8, 0.005, &r));
  ck_assert(!r.compute_bound);
  ck_assert_double_eq_tol(r.achieved, 80, 1e-9);
  ck_assert_double_eq_tol(r.percent, 80, 1e-9);
  cJSON *j = cJSON_CreateObject();
  tn_roofline_add_json(&r, j);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "bound")->valuestring, "memory");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "peak_unit")->valuestring, "GB/s");
  ck_assert_double_eq_tol(cJSON_GetObjectItem(j, "percent_of_peak")->valuedouble, 80, 1e-9);
  cJSON_Delete(j);
  /* no peaks (the CPU files), no time: nothing to report */
  ck_assert(!tn_target_roofline(&(tn_target_t){.peak_gflops = 1000}, 2e9, 1e8, 0.01, &r));
  ck_assert(!tn_target_roofline(&t, 2e9, 1e8, 0, &r));
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("common");
  TU_TCASE(s, "core", 0, t_err, t_arena, t_buf, t_rng, t_hash, t_ident, t_gcd, t_half, t_bf16, t_identifiers, t_read_file,
           t_open_out);
  TU_TCASE(s, "targets", 0, t_target_shipped, t_target_did_you_mean, t_target_config_dir, t_target_bad_files, t_target_cc,
           t_roofline);
  return s;
}

TN_TEST_MAIN(make)
