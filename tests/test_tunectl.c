/* test_tunectl.c — suite "tunectl": runs the real tunectl binary (path in
 * $TUNECTL) and checks its output, exit codes and error messages. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/common.h"
#include "testutil.h"

typedef tu_run_t run_t;

/* Runs `tunectl ARGS` through the shell; captures stdout, stderr, exit code. */
static run_t *tunectl(const char *args) {
  static run_t r;
  const char *exe = getenv("TUNECTL");
  ck_assert_msg(exe != NULL, "TUNECTL is not set");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s", exe, args);
  return tu_run_capture(cmd, &r);
}

/* Runs `tunectl ARGS` and expects exit code `status` and, where not NULL,
 * `out` in its stdout and `err` in its stderr. */
static run_t *expect(const char *args, int status, const char *out, const char *err) {
  run_t *r = tunectl(args);
  ck_assert_msg(r->status == status, "tunectl %s: exit %d, expected %d\n%s", args, r->status, status, r->err);
  if (out) ck_assert_msg(strstr(r->out, out), "tunectl %s: stdout lacks \"%s\":\n%s", args, out, r->out);
  if (err) ck_assert_msg(strstr(r->err, err), "tunectl %s: stderr lacks \"%s\":\n%s", args, err, r->err);
  return r;
}

#define W(name) SRC("workloads/" name ".tw")

START_TEST(t_help) {
  run_t *r = expect("--help", 0, "show", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "check"));
  ck_assert_ptr_nonnull(strstr(r->out, "eval"));
  const char *cmds[] = {"show --help", "check --help", "eval -h", "help eval"};
  for (size_t i = 0; i < TN_ARRAY_LEN(cmds); i++) {
    r = expect(cmds[i], 0, "usage: tunectl ", NULL);
    ck_assert_ptr_nonnull(strstr(r->out, "--set NAME=VALUE"));
  }
  r = tunectl("eval --help");
  ck_assert_ptr_nonnull(strstr(r->out, "--seed S"));
  /* --seed means the input data or the search, each with its default said once */
  ck_assert_msg(strstr(r->out, "  --seed S          input data seed (default 1)\n"), "%s", r->out);
  r = tunectl("help submit");
  ck_assert_msg(strstr(r->out, "  --seed S          search seed (default 1; the same seed proposes the same first\n"),
                "%s", r->out);
  ck_assert_ptr_null(strstr(r->out, "input data"));
  expect("", 2, NULL, "usage: tunectl");
  expect("frobnicate", 2, NULL, "unknown command 'frobnicate'");
  expect("--version", 0, "tunectl 0.1.0", NULL);
}
END_TEST

START_TEST(t_show) {
  run_t *r = expect("show " W("matmul"), 0, "@T.prim_func", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "for i, j, k in T.grid(1024, 1024, 1024):"));
  ck_assert_ptr_nonnull(strstr(r->out, "with T.block(\"C\"):"));
  ck_assert_ptr_nonnull(strstr(r->out, "T.axis.remap(\"SSR\", [i, j, k])"));
  ck_assert_ptr_nonnull(strstr(r->out, "with T.init():"));
  r = expect("show " W("matmul") " --set M=64 --set=K=32", 0, "for i, j, k in T.grid(64, 1024, 32):", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "A: T.Buffer((64, 32), \"float32\")"));
}
END_TEST

/* The hash `tunectl check ARGS` prints. */
static void check_hash(const char *args, char hash[TN_ID_SIZE]) {
  run_t *r = expect(args, 0, "hash      ", NULL);
  const char *h = strstr(r->out, "hash      ") + 10;
  snprintf(hash, TN_ID_SIZE, "%.64s", h);
}

/* show --tvmscript, then import-tvmscript -o: the same workload hash; the
 * scheduled text is refused with its position. */
START_TEST(t_tvmscript) {
  char dir[] = "/tmp/tunectl-tvms-XXXXXX", args[PATH_MAX + 256], want[TN_ID_SIZE], got[TN_ID_SIZE];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(args, sizeof args, "show --tvmscript " W("softmax") " > %s/s.py", dir);
  expect(args, 0, NULL, NULL);
  snprintf(args, sizeof args, "import-tvmscript %s/s.py -o %s/s.tw", dir, dir);
  expect(args, 0, NULL, NULL);
  snprintf(args, sizeof args, "check %s/s.tw", dir);
  check_hash(args, got);
  check_hash("check " W("softmax"), want);
  ck_assert_str_eq(got, want);
  snprintf(args, sizeof args, "import-tvmscript %s/s.py", dir);
  expect(args, 0, "S[i, j] = E[i, j] / rsum[i]\n", NULL);
  run_t *r = expect("show --tvmscript " W("matmul") " --trace " SRC("workloads/schedules/matmul_cpu.json"), 0,
                    "with T.sblock(\"C_update\"):", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "@T.prim_func(s_tir=True)\n"));
  snprintf(args, sizeof args, "show --tvmscript " W("matmul") " --trace " SRC("workloads/schedules/matmul_cpu.json")
           " > %s/m.py", dir);
  expect(args, 0, NULL, NULL);
  snprintf(args, sizeof args, "import-tvmscript %s/m.py", dir);
  char want_err[PATH_MAX + 64];
  snprintf(want_err, sizeof want_err, "tunectl import-tvmscript: %s/m.py:7:16: loop kind 'parallel'", dir);
  expect(args, 1, NULL, want_err);
  expect("import-tvmscript /nonexistent/x.py", 1, NULL, "tunectl import-tvmscript: cannot open '/nonexistent/x.py'");
  snprintf(args, sizeof args, "rm -r '%s'", dir);
  ck_assert_int_eq(system(args), 0);
}
END_TEST

START_TEST(t_check) {
  run_t *r = expect("check " W("matmul"), 0, "workload  matmul", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "flops     2147483648 "));
  ck_assert_ptr_nonnull(strstr(r->out, "bytes     12582912 "));
  const char *h = strstr(r->out, "hash      ");
  ck_assert_ptr_nonnull(h);
  h += 10;
  char hash1[TN_ID_SIZE];
  snprintf(hash1, sizeof hash1, "%.*s", (int)strcspn(h, "\n"), h);
  ck_assert_msg(tn_id_valid(hash1), "the whole hash (64 hex digits) is shown: %s", hash1);
  /* Overriding a parameter with its default value keeps the hash. */
  r = expect("check " W("matmul") " --set M=1024 --json", 0, NULL, NULL);
  ck_assert_ptr_nonnull(strstr(r->out, hash1));
  ck_assert_ptr_nonnull(strstr(r->out, "\"flops\":\t2147483648"));
  r = tunectl("check " W("matmul") " --set M=512");
  ck_assert_ptr_null(strstr(r->out, hash1));
  ck_assert_ptr_nonnull(strstr(r->out, "M=512*"));
}
END_TEST

START_TEST(t_eval) {
  run_t *r = expect("eval " W("vector_add"), 0, "evaluated vector_add with seed 1", NULL);
  const char *c = strstr(r->out, "checksum ");
  ck_assert_ptr_nonnull(c);
  char first[64];
  snprintf(first, sizeof first, "%.25s", c);
  r = tunectl("eval " W("vector_add") " --seed 1");
  ck_assert_ptr_nonnull(strstr(r->out, first));
  r = expect("eval " W("vector_add") " --seed 2", 0, NULL, NULL);
  ck_assert_ptr_null(strstr(r->out, first));
  expect("eval " W("softmax") " --set M=4 --set N=8 --json", 0, NULL, NULL);
  /* Softmax rows sum to one: 4 rows -> total 4. */
  const char *s = strstr(r->out, "\"sum\":\t");
  ck_assert_ptr_nonnull(s);
  ck_assert_double_eq_tol(atof(s + 7), 4.0, 1e-9);
}
END_TEST

START_TEST(t_errors) {
  expect("show /nonexistent/x.tw", 1, NULL, "cannot open '/nonexistent/x.tw'");
  expect("show " W("matmul") " --set M", 2, NULL, "--set M");
  expect("show " W("matmul") " --set Q=4", 1, NULL, "Q");
  expect("show", 2, NULL, "missing FILE");
  expect("eval " W("matmul") " --seed -3", 2, NULL, NULL);
  expect("check " W("matmul") " --bogus", 2, NULL, "unknown option '--bogus'");

  char path[] = "/tmp/tunectl-bad-XXXXXX";
  tu_write_temp(path, "param N = 8\ninput A: float32[N]\noutput B: float32[N]\nB[i] = D[i]\n");
  char args[256];
  snprintf(args, sizeof args, "check %s", path);
  run_t *r = expect(args, 1, NULL, NULL);
  char where[128];
  snprintf(where, sizeof where, ":4:8:");
  ck_assert_msg(strstr(r->err, where) && strstr(r->err, "'D'"), "got: %s", r->err);
  unlink(path);
}
END_TEST

START_TEST(t_trace) {
  run_t *r = expect("show " W("vector_add") " --trace " SRC("workloads/schedules/vector_add_gpu.json"), 0,
                    "for i_0 in T.thread_binding(8, thread=\"blockIdx.x\"):", NULL);
  ck_assert_ptr_nonnull(strstr(r->out, "for i_1 in T.thread_binding(128, thread=\"threadIdx.x\"):"));
  expect("trace-check " W("matmul") " " SRC("workloads/schedules/matmul_shared.json"), 0,
         "ok, 27 instructions replay on matmul", NULL);

  /* A trace that reorders loops of two different nests fails at that instruction. */
  char path[] = "/tmp/tunectl-trace-XXXXXX";
  tu_write_temp(path, "[[[\"GetBlock\", [], [\"rmax\", \"main\"], [\"b0\"]],"
                      "  [\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\"]],"
                      "  [\"GetBlock\", [], [\"S\", \"main\"], [\"b3\"]],"
                      "  [\"GetLoops\", [\"b3\"], [], [\"l4\", \"l5\"]],"
                      "  [\"Reorder\", [\"l5\", \"l1\"], [], []]], []]");
  char args[512];
  snprintf(args, sizeof args, "trace-check %s %s", W("softmax"), path);
  r = expect(args, 1, NULL, NULL);
  ck_assert_msg(strstr(r->err, "instruction 4 (Reorder)") && strstr(r->err, "reorder: ") &&
                    strstr(r->err, "not nested"), "got: %s", r->err);
  snprintf(args, sizeof args, "show %s --trace %s", W("vector_add"), path);
  r = expect(args, 1, NULL, NULL); /* block rmax does not exist in vector_add */
  ck_assert_msg(strstr(r->err, "instruction 0 (GetBlock)") && strstr(r->err, "no block named \"rmax\""), "got: %s",
                r->err);
  unlink(path);
  expect("trace-check " W("matmul"), 2, NULL, "missing T.json");
}
END_TEST

/* Bad options: each is named with its command, with a pointer to the
 * command's help, and exits 2 -- on offline commands, on daemon commands
 * (refused before any connection) and before the command. */
START_TEST(t_bad_options) {
  static const struct {
    const char *args, *err;
  } cases[] = {
      {"show " W("matmul") " --bogus", "tunectl show: unknown option '--bogus' (see tunectl show --help)"},
      {"show " W("matmul") " --bogus=3", "tunectl show: unknown option '--bogus' ("},
      {"--socket /nonexistent/x.sock jobs --bogus", "tunectl jobs: unknown option '--bogus'"},
      {"--socket /nonexistent/x.sock best ffffffffffffffff -x", "tunectl best: unknown option '-x'"},
      {"bench --compare a.json --frobnicate", "tunectl bench: unknown option '--frobnicate'"},
      {"--bogus show", "tunectl: unknown option '--bogus'"},
      /* options of other commands */
      {"show " W("matmul") " --trials 3", "tunectl show: --trials is not an option of show"},
      {"--socket /nonexistent/x.sock status --emit cuda", "tunectl status: --emit is not an option of status"},
      {"check " W("matmul") " -k 3", "tunectl check: -k is not an option of check"},
      {"show " W("matmul") " --socket /tmp/x.sock", "tunectl show: --socket is not an option of show"},
      /* missing values, values for flags, ambiguous abbreviations */
      {"show " W("matmul") " --trace", "tunectl show: --trace needs a value (see tunectl show --help)"},
      {"show " W("matmul") " --set", "tunectl show: --set needs a value"},
      {"--socket /nonexistent/x.sock jobs --limit", "tunectl jobs: --limit needs a value"},
      {"--socket /nonexistent/x.sock best ffffffffffffffff -k", "tunectl best: -k needs a value"},
      {"bench x.json --trials 1 --json", "tunectl bench: --json needs a value"},
      {"--socket", "tunectl: --socket needs a value"},
      {"check " W("matmul") " --json=yes", "tunectl check: --json takes no value"},
      {"eval " W("vector_add") " --se 2", "tunectl eval: option '--se' is ambiguous: --set, --seed"},
      /* values out of range, options a command cannot do without */
      {"tune " W("vector_add") " --target cpu --trials 0",
       "tunectl tune: --trials wants an integer from 1 to 1000000, got '0'"},
      {"--socket /nonexistent/x.sock jobs --limit 0", "tunectl jobs: --limit wants an integer >= 1, got '0'"},
      {"run " W("vector_add") " --target cpu --repeat-ms 0", "tunectl run: --repeat-ms wants a positive"},
      {"tune " W("vector_add") " --target cpu", "tunectl tune: missing --trials (usage: tunectl tune "},
      {"--socket /nonexistent/x.sock kernel ffffffffffffffff", "tunectl kernel: missing --emit"},
      {"--socket /nonexistent/x.sock ping extra", "tunectl ping: unexpected argument 'extra'"},
      {"help frobnicate", "unknown command 'frobnicate'"},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) expect(cases[i].args, 2, NULL, cases[i].err);
}
END_TEST

/* GNU command lines: arguments before, between and after options, `--`,
 * `--opt=value`, repeated --set, unique abbreviations, --socket after a
 * daemon command. */
START_TEST(t_gnu_options) {
  run_t *r = expect("show --set M=64 " W("matmul") " --set=K=32", 0, "for i, j, k in T.grid(64, 1024, 32):", NULL);
  expect("show --set M=64 -- " W("matmul"), 0, "for i, j, k in T.grid(64, 1024, 1024):", NULL);
  expect("trace-check --set M=64 " W("matmul") " --set N=64 " SRC("workloads/schedules/matmul_shared.json"), 0,
         "ok, 27 instructions replay on matmul", NULL);
  r = expect("eval " W("vector_add") " --seed 2", 0, NULL, NULL);
  char seeded[256];
  snprintf(seeded, sizeof seeded, "%s", strstr(r->out, "checksum "));
  expect("eval --see=2 " W("vector_add"), 0, seeded, NULL);
  expect("ping --socket /nonexistent/x.sock", 1, NULL, "tunectl ping: cannot connect to /nonexistent/x.sock");
  expect("--socket=/nonexistent/y.sock ping", 1, NULL, "cannot connect to /nonexistent/y.sock");
}
END_TEST

/* The commands `tunectl --help` lists (both groups), in names[]; returns
 * how many, and how many of them are in the daemon group. */
static int listed_commands(char names[][32], int max, int *ndaemon) {
  run_t *r = expect("--help", 0, "Daemon commands", NULL);
  const char *p = strstr(r->out, "Commands"), *daemon = strstr(r->out, "Daemon commands"),
             *end = strstr(r->out, "Run `tunectl");
  ck_assert_msg(p && daemon && end, "%s", r->out);
  int n = 0;
  *ndaemon = 0;
  for (p = strchr(p, '\n'); p && p < end; p = strchr(p + 1, '\n')) {
    if (strncmp(p, "\n  ", 3) != 0 || p[3] == ' ') continue;
    ck_assert_int_lt(n, max);
    snprintf(names[n], 32, "%.*s", (int)strcspn(p + 3, " "), p + 3);
    *ndaemon += p > daemon;
    n++;
  }
  return n;
}

/* Every command of the table answers CMD --help, CMD -h and help CMD with the
 * same text: its usage line first, then an option line for every option the
 * usage line names (and --socket for daemon commands); and refuses an
 * unknown option with exit 2, naming both. */
START_TEST(t_every_command_help) {
  char names[64][32], args[128], want[128];
  int ndaemon, n = listed_commands(names, 64, &ndaemon);
  ck_assert_int_ge(n, 23);
  ck_assert_int_ge(ndaemon, 14);
  for (int i = 0; i < n; i++) {
    const char *name = names[i];
    for (int j = 0; j < i; j++) ck_assert_msg(strcmp(names[j], name) != 0, "%s listed twice", name);
    snprintf(args, sizeof args, "%.31s --help", name);
    run_t *r = expect(args, 0, NULL, NULL);
    snprintf(want, sizeof want, "usage: tunectl %.31s ", name);
    ck_assert_msg(strncmp(r->out, want, strlen(want)) == 0, "tunectl %s: %s", args, r->out);
    char *help = strdup(r->out);
    const char *opts = strstr(help, "\noptions:\n");
    ck_assert_msg(opts, "tunectl %s: no options:\n%s", args, help);
    /* each option of the usage line has its line under options: */
    size_t len = strcspn(help, "\n");
    for (const char *p = help; p < help + len; p += strcspn(p, " ") + 1) {
      const char *opt = p + (*p == '[');
      if (opt[0] != '-') continue;
      snprintf(want, sizeof want, "\n  %.*s ", (int)strcspn(opt, " ]"), opt);
      ck_assert_msg(strstr(opts, want), "tunectl %s lacks the line of %s:\n%s", args, want + 3, help);
    }
    if (i >= n - ndaemon) ck_assert_msg(strstr(opts, "\n  --socket PATH "), "%s: no --socket", name);
    snprintf(args, sizeof args, "%.31s -h", name);
    ck_assert_str_eq(expect(args, 0, NULL, NULL)->out, help);
    snprintf(args, sizeof args, "help %.31s", name);
    ck_assert_str_eq(expect(args, 0, NULL, NULL)->out, help);
    snprintf(args, sizeof args, "--socket /nonexistent/x.sock %.31s --no-such-option", name);
    snprintf(want, sizeof want, "tunectl %.31s: unknown option '--no-such-option' (see tunectl %.31s --help)", name,
             name);
    expect(args, 2, NULL, want);
    free(help);
  }
}
END_TEST

/* The pre-tuned records shipped for the H100 still fit this build: each
 * record's workload (file, parameters) hashes to the record's hash, and the
 * fastest record's trace of every workload lowers to CUDA (and through NVRTC
 * to PTX for sm_90 where the build has NVRTC). */
START_TEST(t_pretuned) {
  char *text = NULL;
  size_t len;
  tn_err_t err = {0};
  ck_assert_msg(tn_read_file(SRC("configs/pretuned/nvidia-h100.jsonl"), 1 << 24, &text, &len, &err) == TN_OK, "%s",
                err.msg);
  bool nvrtc = strstr(tunectl("--version")->out, "CUDA/NVRTC: yes") != NULL;
  char seen[16][TN_ID_SIZE];
  int nseen = 0, nrec = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), nrec++) {
    cJSON *rec = cJSON_Parse(line);
    ck_assert_msg(rec, "record %d does not parse", nrec);
    const cJSON *wl = cJSON_GetObjectItemCaseSensitive(rec, "workload");
    const char *name = cJSON_GetObjectItemCaseSensitive(wl, "name")->valuestring;
    const char *hash = cJSON_GetObjectItemCaseSensitive(wl, "hash")->valuestring;
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "target"), "name")->valuestring,
                     "nvidia/h100");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rec, "status")->valuestring, "ok");
    char sets[512] = "";
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(wl, "params")) {
      size_t n = strlen(sets);
      snprintf(sets + n, sizeof sets - n, " --set %s=%lld", p->string, (long long)p->valuedouble);
    }
    char args[1024];
    snprintf(args, sizeof args, "check %s/workloads/%s.tw%s", TUNED_SOURCE_ROOT, name, sets);
    expect(args, 0, hash, NULL);
    const char *trace = cJSON_GetObjectItemCaseSensitive(rec, "trace")->valuestring;
    char th[TN_ID_SIZE];
    tn_id_of(TN_ID_TRACE, trace, strlen(trace), th);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rec, "trace_hash")->valuestring, th);
    bool first = true; /* records of a workload come fastest first */
    for (int i = 0; i < nseen; i++) first &= strcmp(seen[i], hash) != 0;
    if (first && nseen < 16) {
      snprintf(seen[nseen++], TN_ID_SIZE, "%s", hash);
      char path[] = "/tmp/tunectl-pretuned-XXXXXX";
      tu_write_temp(path, cJSON_GetObjectItemCaseSensitive(rec, "trace")->valuestring);
      /* (the PTX is megabytes: the output capture keeps one line of it) */
      snprintf(args, sizeof args, "emit %s/workloads/%s.tw%s --target nvidia/h100 --trace %s --emit %s | grep -m1 %s",
               TUNED_SOURCE_ROOT, name, sets, path, nvrtc ? "ptx" : "cuda", nvrtc ? "'^.target'" : "__global__");
      expect(args, 0, nvrtc ? ".target sm_90" : "__global__", NULL);
      unlink(path);
    }
    cJSON_Delete(rec);
  }
  ck_assert_int_ge(nseen, 7); /* fp32 matmul 1024, 2048 and 4096, fp16 and bf16 matmul, softmax, conv2d */
  ck_assert_int_eq(nrec, 48);
  free(text);
}
END_TEST

/* Occurrences of needle in the file PATH.out (removed afterwards). */
static int count_in_file(const char *path, const char *needle) {
  char out[256], *text = NULL;
  size_t len;
  tn_err_t err = {0};
  snprintf(out, sizeof out, "%s.out", path);
  ck_assert_msg(tn_read_file(out, 1 << 26, &text, &len, &err) == TN_OK, "%s", err.msg);
  int n = 0;
  for (const char *q = strstr(text, needle); q; q = strstr(q + 1, needle)) n++;
  free(text);
  unlink(out);
  return n;
}

/* A program of 1,000 chained elementwise blocks (small extents) goes
 * through check, show, space and tune on the CPU: no fixed table of blocks
 * or tensors truncates it, and nothing crashes. */
START_TEST(t_thousand_blocks) {
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "param N = 8\ninput A: float32[N]\noutput B: float32[N]\n");
  for (int i = 1; i < 1000; i++) tn_buf_printf(&b, "temp T%d: float32[N]\n", i);
  for (int i = 1; i < 1000; i++) tn_buf_printf(&b, "T%d[i] = %s%d[i] * 0.5 + 1.0\n", i, i == 1 ? "A" : "T", i - 1);
  tn_buf_put(&b, "B[i] = T999[i] + 1.0\n");
  /* "A0" above names the input A: fix the first statement */
  char *text = tn_buf_take(&b), *first = strstr(text, "A0[i]");
  memmove(first + 1, first + 2, strlen(first + 2) + 1);
  char path[] = "/tmp/tunectl-chain-XXXXXX", args[256];
  tu_write_temp(path, text);
  free(text);
  snprintf(args, sizeof args, "check %s", path);
  expect(args, 0, ": ok", NULL);
  /* (the outputs are long: written to a file and counted there) */
  snprintf(args, sizeof args, "show %s > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "with T.block(\""), 1000 + 1); /* and the root */
  snprintf(args, sizeof args, "space %s --target cpu > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "[\"ComputeInline\""), 999); /* every temp into B, in the one space */
  /* the default (evolutionary) search: a population of 512 fresh samples
   * and four generations of mutations, each a replay of 2,000 instructions
   * unless made before (they are: this space samples nothing) */
  snprintf(args, sizeof args, "tune %s --target cpu --trials 2 --seed 1 > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "\ntrials     2: ok 2,"), 1);
  unlink(path);
}
END_TEST

/* space --samples: N valid candidates of every space, decisions set, for a
 * target without its GPU here.  The float16 GEMM on a T4 (whose shared
 * memory a fixed replay of its tensor-core space exceeds): 3 samples of each
 * space, each replayed by emit as it is, within the T4's 64 KiB of shared
 * memory; the same seed gives the same samples. */
START_TEST(t_space_samples) {
  char path[] = "/tmp/tunectl-samples-XXXXXX", args[1024];
  tu_write_temp(path, "");
  snprintf(args, sizeof args, "space %s --target nvidia/tesla-t4 --set M=512 --set N=512 --set K=512 --samples 3 "
           "--seed 5 > %s", W("matmul_f16"), path);
  expect(args, 0, NULL, NULL);
  FILE *fp = fopen(path, "r");
  ck_assert_ptr_nonnull(fp);
  static char text[1 << 22];
  size_t len = fread(text, 1, sizeof text - 1, fp);
  fclose(fp);
  text[len] = 0;
  int n = 0, spaces = 0;
  static char body[1 << 20];
  for (const char *p = text; (p = strstr(p, "# space ")); n++) {
    const char *start = strchr(p, '\n') + 1, *next = strstr(start, "\n# space ");
    ck_assert_msg(strstr(p, ", sample ") && strstr(p, "rejected before it"), "%.200s", p);
    if (n == 0) ck_assert_int_eq(sscanf(p, "# space 1 of %d", &spaces), 1);
    size_t blen = next ? (size_t)(next - start + 1) : strlen(start);
    ck_assert_uint_lt(blen, sizeof body);
    memcpy(body, start, blen);
    body[blen] = 0;
    ck_assert_ptr_nonnull(strstr(body, "\"EnterPostproc\""));
    char trace[] = "/tmp/tunectl-sample-XXXXXX";
    tu_write_temp(trace, body);
    snprintf(args, sizeof args, "emit %s --target nvidia/tesla-t4 --set M=512 --set N=512 --set K=512 --emit launch "
             "--trace %s", W("matmul_f16"), trace);
    run_t *r = expect(args, 0, "\"kernels\"", NULL);
    cJSON *j = cJSON_Parse(r->out);
    ck_assert_ptr_nonnull(j);
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItem(j, "kernels")) {
      double shared = cJSON_GetNumberValue(cJSON_GetObjectItem(k, "static_shared_bytes")) +
                      cJSON_GetNumberValue(cJSON_GetObjectItem(k, "dyn_shared_bytes"));
      ck_assert_msg(shared <= 65536, "sample %d: %.0f bytes of shared memory on a T4", n + 1, shared);
    }
    cJSON_Delete(j);
    unlink(trace);
    p = start;
  }
  ck_assert_int_ge(spaces, 1);
  ck_assert_int_eq(n, 3 * spaces);
  /* the same seed, the same samples */
  snprintf(args, sizeof args, "space %s --target nvidia/tesla-t4 --set M=512 --set N=512 --set K=512 --samples 3 "
           "--seed 5", W("matmul_f16"));
  run_t *again = expect(args, 0, "# space 1 of", NULL);
  ck_assert_msg(strcmp(again->out, text) == 0, "a second run with the same seed printed other samples");
  unlink(path);
}
END_TEST

/* A loop nest 200 deep (one index and 199 reduction variables, most of
 * extent 1) through check, show, space and tune, on the CPU and the CUDA
 * harness: no depth limit below the parser's IR_MAX_LOOP_DEPTH. */
START_TEST(t_deep_nest) {
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "param N = 8\ninput A: float32[N, 4]\noutput B: float32[N]\nB[i] = sum(");
  for (int r = 0; r < 199; r++) tn_buf_printf(&b, "%sr%d < %d", r ? ", " : "", r, r == 0 || r == 7 ? 2 : 1);
  tn_buf_put(&b, ": A[i, r0 * 2 + r7])\n");
  char *text = tn_buf_take(&b), path[] = "/tmp/tunectl-deep-XXXXXX", args[256];
  tu_write_temp(path, text);
  free(text);
  snprintf(args, sizeof args, "check %s", path);
  expect(args, 0, ": ok", NULL);
  snprintf(args, sizeof args, "show %s > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  char kinds[256] = "T.axis.remap(\"S"; /* one spatial and 199 reduction iterators */
  memset(kinds + strlen(kinds), 'R', 199);
  ck_assert_int_eq(count_in_file(path, kinds), 1);
  snprintf(args, sizeof args, "space %s --target cpu > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "add-rfactor(B at its"), 2); /* at either reduction loop (and none) */
  snprintf(args, sizeof args, "space %s --target cuda-host > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "auto-bind(B))"), 1);
  snprintf(args, sizeof args, "tune %s --target cpu --trials 4 > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "\ntrials     4: ok 4,"), 1);
  snprintf(args, sizeof args, "tune %s --target cuda-host --trials 2 --seed 1 > %s.out", path, path);
  expect(args, 0, NULL, NULL);
  ck_assert_int_eq(count_in_file(path, "\ntrials     2: ok 2,"), 1);
  unlink(path);
}
END_TEST

/* Runs `ENV tunectl ARGS` (ENV: shell assignments or `env -u NAME`). */
static run_t *tunectl_env(const char *env, const char *args) {
  static run_t r;
  char cmd[8192];
  int n = snprintf(cmd, sizeof cmd, "%s '%s' %s", env, getenv("TUNECTL"), args);
  ck_assert_msg(n > 0 && n < (int)sizeof cmd, "command too long: %s", args);
  return tu_run_capture(cmd, &r);
}

/* Targets come from $TUNED_CONFIG_DIR when set: a CPU target with peaks
 * gets a roofline line in run's and tune's reports (and a "roofline" object
 * in their JSON), the shipped cpu target (no peaks) none; unknown names list
 * the directory's targets, and so does --help. */
START_TEST(t_targets) {
  char dir[] = "/tmp/tunectl-targets-XXXXXX", env[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  tu_put_file(dir, "lab/cpu.json", "{\"name\": \"lab/cpu\", \"kind\": \"cpu\", \"arch\": \"native\", \"device\": \"lab CPU\", "
                           "\"max_vector_bytes\": 32, \"peak_gflops\": 100, \"peak_gbps\": 10}");
  snprintf(env, sizeof env, "TUNED_CONFIG_DIR='%s'", dir);
  run_t *r = tunectl_env(env, "run " W("vector_add") " --target lab/cpu --repeat-ms 5");
  ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
  ck_assert_msg(strstr(r->out, "target    lab/cpu (lab CPU)\n"), "%s", r->out);
  ck_assert_msg(strstr(r->out, "\nroofline  ") && strstr(r->out, "% of the peak 10 GB/s (memory-bound: 0.0833 FLOP/B, "
                                                                  "ridge 10 FLOP/B)\n"), "%s", r->out);
  r = tunectl_env(env, "run " W("vector_add") " --target lab/cpu --repeat-ms 5 --json");
  cJSON *j = cJSON_Parse(r->out), *rl = cJSON_GetObjectItemCaseSensitive(j, "roofline");
  ck_assert_msg(cJSON_IsObject(rl), "%s", r->out);
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rl, "bound")->valuestring, "memory");
  ck_assert_double_eq(cJSON_GetObjectItemCaseSensitive(rl, "peak")->valuedouble, 10);
  ck_assert(cJSON_GetObjectItemCaseSensitive(rl, "percent_of_peak")->valuedouble > 0);
  cJSON_Delete(j);
  r = tunectl_env(env, "tune " W("vector_add") " --target lab/cpu --trials 1 --strategy replay");
  ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
  ck_assert_msg(strstr(r->out, "\nroofline   ") && strstr(r->out, "% of the peak 10 GB/s (memory-bound"), "%s", r->out);
  r = tunectl_env(env, "tune " W("vector_add") " --target lab/cpu --trials 1 --strategy replay --json");
  j = cJSON_Parse(r->out);
  rl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "best"), "roofline");
  ck_assert_msg(cJSON_IsObject(rl), "%s", r->out);
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rl, "peak_unit")->valuestring, "GB/s");
  cJSON_Delete(j);
  r = tunectl_env(env, "run " W("vector_add") " --target cpu");
  ck_assert_int_eq(r->status, 2); /* a bad --target: the command line */
  ck_assert_msg(strstr(r->err, "unknown target \"cpu\"; did you mean \"lab/cpu\"? (known: lab/cpu;") &&
                    strstr(r->err, dir), "%s", r->err);
  r = tunectl_env(env, "run --help");
  ck_assert_msg(strstr(r->out, dir) && strstr(r->out, " lab/cpu\n"), "%s", r->out);
  r = tunectl_env("", "run " W("vector_add") " --target cpu --repeat-ms 5");
  ck_assert_msg(r->status == 0 && !strstr(r->out, "roofline"), "%s%s", r->out, r->err); /* cpu has no peaks */
  tu_remove_tree(dir);
}
END_TEST

/* A copy of tunectl outside the build tree reads the targets next to it,
 * in ../share/tuned/configs (an installed or bundled layout). */
START_TEST(t_relocated) {
  char dir[] = "/tmp/tunectl-reloc-XXXXXX", cmd[PATH_MAX * 2], configs[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(configs, sizeof configs, "%s/share/tuned/configs", dir);
  tu_put_file(configs, "reloc.json", "{\"name\": \"reloc\", \"kind\": \"cpu\", \"arch\": \"native\"}");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/bin' && cp '%s' '%s/bin/tunectl'", dir, getenv("TUNECTL"), dir);
  ck_assert_int_eq(system(cmd), 0);
  run_t r;
  snprintf(cmd, sizeof cmd, "env -u TUNED_CONFIG_DIR '%s/bin/tunectl' emit %s --target reloc --emit c", dir,
           W("vector_add"));
  tu_run_capture(cmd, &r);
  ck_assert_msg(r.status == 0 && strstr(r.out, "void "), "%s%s", r.out, r.err);
  snprintf(cmd, sizeof cmd, "env -u TUNED_CONFIG_DIR '%s/bin/tunectl' emit %s --target cpu --emit c", dir,
           W("vector_add"));
  tu_run_capture(cmd, &r);
  ck_assert_int_eq(r.status, 2); /* a bad --target: the command line */
  ck_assert_msg(strstr(r.err, "(known: reloc;") && strstr(r.err, configs), "%s", r.err);
  tu_remove_tree(dir);
}
END_TEST

/* tune with a database: the best candidates are re-measured and the
 * summary gives both figures; the unscheduled program is measured once and
 * read from the database the second time; --no-remeasure and --no-baseline
 * leave them out; --remeasure N counts; contradicting options are refused. */
/* A tune for a device this machine cannot run (here: the CUDA driver
 * pointed at nothing) is refused before anything is measured or stored:
 * the run errors it would record would count as measured for good. */
START_TEST(t_tune_no_device) {
  char dir[] = "/tmp/tunectl-nodev-XXXXXX", args[PATH_MAX * 2], db[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/t.db", dir);
  snprintf(args, sizeof args, "tune " W("vector_add") " --target nvidia/h100 --trials 2 --db %s", db);
  run_t *r = tunectl_env("TUNED_CUDA_DRIVER=/nonexistent/libcuda.so.1", args);
  ck_assert_msg(r->status == 2, "exit %d\n%s", r->status, r->err);
  ck_assert_msg(strstr(r->err, "tunectl tune: cannot measure on nvidia/h100 here: the cuda backend is "), "%s", r->err);
  /* the driver's path, unless this build has no CUDA at all */
  ck_assert_msg(strstr(r->err, "/nonexistent/libcuda.so.1") || strstr(r->err, "not in this build"), "%s", r->err);
  struct stat st;
  ck_assert_int_ne(stat(db, &st), 0); /* no database made, no row written */
  rmdir(dir);
}
END_TEST

/* A workload whose reference result would take hours (2^31 x 2^31 reduction
 * steps per output) is refused before anything runs or is stored, by eval,
 * tune and run; the cap can be raised. */
START_TEST(t_eval_work_cap) {
  char dir[] = "/tmp/tunectl-cap-XXXXXX", wl[PATH_MAX], args[PATH_MAX * 2], db[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(wl, sizeof wl, "%s/huge.tw", dir);
  snprintf(db, sizeof db, "%s/t.db", dir);
  tu_put_file(dir, "huge.tw", "param N = 4, R = 2147483647\ninput A: float32[N, N]\noutput B: float32[N]\n"
                  "B[i] = sum(j < R, k < R: A[i, 0])\n");
  const char *cmds[3] = {"eval %s", "tune %s --target cpu --trials 2 --db %s", "run %s --target cpu"};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof args, cmds[i], wl, db);
    double t0 = tn_now();
    run_t *r = expect(args, 1, NULL, "needs 3.69e+19 element updates to compute its reference result, over the cap");
    ck_assert_msg(tn_now() - t0 < 30, "%s took %.1f s", args, tn_now() - t0);
    ck_assert_msg(strstr(r->err, "$TUNED_EVAL_MAX_UPDATES"), "%s", r->err);
  }
  struct stat st;
  ck_assert_int_ne(stat(db, &st), 0);
  /* under the cap (4 x 64 x 64 updates) with a lowered cap: refused too */
  tu_put_file(dir, "huge.tw", "param N = 4, R = 64\ninput A: float32[N, N]\noutput B: float32[N]\n"
                  "B[i] = sum(j < R, k < R: A[i, 0])\n");
  snprintf(args, sizeof args, "eval %s", wl);
  ck_assert_int_eq(tunectl(args)->status, 0);
  run_t *r = tunectl_env("TUNED_EVAL_MAX_UPDATES=1000", args);
  ck_assert_msg(r->status == 1 && strstr(r->err, "over the cap of 1e+03"), "%d %s", r->status, r->err);
  unlink(wl);
  rmdir(dir);
}
END_TEST

START_TEST(t_tune_db) {
  char dir[] = "/tmp/tunectl-tunedb-XXXXXX", args[PATH_MAX * 2];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *base = "tune " W("matmul") " --set M=32 --set N=32 --set K=32 --target cpu --trials 4";
  snprintf(args, sizeof args, "%s --db %s/t.db --seed 1", base, dir);
  run_t *r = expect(args, 0, "(re-measured; first measured ", "measuring the unscheduled matmul\n");
  ck_assert_msg(strstr(r->out, "\nremeasure  ") && strstr(r->out, " candidates, 3 rounds (re-measured/first ms): "),
                "%s", r->out);
  ck_assert_msg(strstr(r->out, "\nnaive      ") && !strstr(r->out, "from the database"), "%s", r->out);
  ck_assert_msg(strstr(r->err, "re-measuring the best "), "%s", r->err);
  snprintf(args, sizeof args, "%s --db %s/t.db --seed 2", base, dir);
  r = expect(args, 0, " median, ", "unscheduled matmul: measured before (from the database)");
  ck_assert_msg(strstr(r->out, "(measured before, from the database)\nspeed-up   "), "%s", r->out);
  ck_assert_msg(strstr(r->err, "cost model: 4 samples from 4 records of target cpu (4 features reused"), "%s", r->err);
  snprintf(args, sizeof args, "%s --db %s/t.db --seed 3 --remeasure 2 --json", base, dir);
  r = expect(args, 0, NULL, NULL);
  cJSON *j = cJSON_Parse(r->out), *best = cJSON_GetObjectItemCaseSensitive(j, "best");
  cJSON *rm = cJSON_GetObjectItemCaseSensitive(j, "remeasure"), *nv = cJSON_GetObjectItemCaseSensitive(j, "naive");
  ck_assert_msg(cJSON_IsObject(best) && cJSON_IsObject(rm) && cJSON_IsObject(nv), "%s", r->out);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(best, "remeasured")));
  ck_assert(cJSON_GetObjectItemCaseSensitive(best, "first_median_secs")->valuedouble > 0);
  ck_assert(cJSON_GetObjectItemCaseSensitive(best, "first_gflops")->valuedouble > 0);
  ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(rm, "rounds")->valueint, 3);
  cJSON *cands = cJSON_GetObjectItemCaseSensitive(rm, "candidates"), *first = cJSON_GetArrayItem(cands, 0);
  ck_assert_int_eq(cJSON_GetArraySize(cands), 2);
  ck_assert_double_eq(cJSON_GetObjectItemCaseSensitive(first, "median_secs")->valuedouble,
                      cJSON_GetObjectItemCaseSensitive(best, "median_secs")->valuedouble);
  ck_assert_double_eq(cJSON_GetObjectItemCaseSensitive(first, "record_id")->valuedouble,
                      cJSON_GetObjectItemCaseSensitive(best, "record_id")->valuedouble);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(nv, "cached")));
  ck_assert(cJSON_GetObjectItemCaseSensitive(j, "speedup")->valuedouble > 0);
  ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "status_counts"),
                                                            "too_slow")));
  cJSON_Delete(j);
  snprintf(args, sizeof args, "%s --seed 4 --no-remeasure --no-baseline --json --top 2", base);
  r = expect(args, 0, NULL, NULL);
  j = cJSON_Parse(r->out);
  ck_assert_msg(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "remeasure")) &&
                    cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "naive")) &&
                    !cJSON_GetObjectItemCaseSensitive(j, "speedup"),
                "%s", r->out);
  best = cJSON_GetObjectItemCaseSensitive(j, "best");
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(best, "remeasured")));
  /* every candidate in order (the tuning curve), the state after each batch, the top 2 with traces */
  cands = cJSON_GetObjectItemCaseSensitive(j, "candidates");
  ck_assert_int_eq(cJSON_GetArraySize(cands), 4);
  for (int i = 0; i < 4; i++) {
    cJSON *c = cJSON_GetArrayItem(cands, i);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(c, "trial")->valueint, i + 1);
    ck_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "status")));
    ck_assert(cJSON_GetObjectItemCaseSensitive(c, "elapsed_s")->valuedouble > 0);
  }
  cJSON *batches = cJSON_GetObjectItemCaseSensitive(j, "batches");
  cJSON *last = cJSON_GetArrayItem(batches, cJSON_GetArraySize(batches) - 1);
  ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(last, "trials_done")->valueint, 4);
  ck_assert_double_eq(cJSON_GetObjectItemCaseSensitive(last, "best_median_secs")->valuedouble,
                      cJSON_GetObjectItemCaseSensitive(best, "median_secs")->valuedouble);
  cJSON *top = cJSON_GetObjectItemCaseSensitive(j, "top");
  ck_assert_int_eq(cJSON_GetArraySize(top), 2);
  double t0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 0), "median_secs")->valuedouble;
  double t1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 1), "median_secs")->valuedouble;
  ck_assert(t0 <= t1);
  ck_assert_double_eq(t0, cJSON_GetObjectItemCaseSensitive(best, "median_secs")->valuedouble);
  ck_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 0), "trace")));
  cJSON_Delete(j);
  snprintf(args, sizeof args, "%s --seed 4 --no-remeasure --no-baseline", base);
  r = expect(args, 0, "\nnaive      not measured (--no-baseline)\n", NULL);
  ck_assert_msg(!strstr(r->out, "\nremeasure") && !strstr(r->out, "re-measured"), "%s", r->out);
  snprintf(args, sizeof args, "%s --remeasure 3 --no-remeasure", base);
  expect(args, 2, NULL, "tunectl tune: --remeasure 3 and --no-remeasure contradict each other");
  snprintf(args, sizeof args, "%s --remeasure 65", base);
  expect(args, 2, NULL, "--remeasure");
  tu_remove_tree(dir);
}
END_TEST

/* Every build failing: tune exits 1 naming the workload and its first
 * failure (trial, kind, the compiler's words), in its summary and --json. */
START_TEST(t_tune_no_kernel) {
  const char *args = "tune " W("matmul") " --set M=32 --set N=32 --set K=32 --target cpu --trials 3 --no-baseline";
  run_t *r = tunectl_env("TUNED_CC=/bin/false", args);
  ck_assert_msg(r->status == 1, "exit %d\n%s", r->status, r->err);
  ck_assert_msg(strstr(r->out, "\nbest       none (no verified candidate)\nfailed     first: trial 1, build_error\n"),
                "%s", r->out);
  ck_assert_msg(strstr(r->err, "tunectl tune: matmul: no verified kernel in 3 trials; the first failure (trial 1) was a "
                               "build_error:\n  /bin/false failed (status 1) compiling "),
                "%s", r->err);
  char json[1024];
  snprintf(json, sizeof json, "%s --json", args);
  r = tunectl_env("TUNED_CC=/bin/false", json);
  ck_assert_int_eq(r->status, 1);
  cJSON *j = cJSON_Parse(r->out), *ff = cJSON_GetObjectItemCaseSensitive(j, "first_failure");
  ck_assert_msg(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "best")) && cJSON_IsObject(ff), "%s", r->out);
  ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(ff, "trial")->valueint, 1);
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(ff, "status")->valuestring, "build_error");
  ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItemCaseSensitive(ff, "error")->valuestring, "/bin/false failed"));
  cJSON_Delete(j);
  /* a run that found a kernel exits 0; its JSON has the key too (null, or a failure that did not stop it) */
  r = tunectl("tune " W("vector_add") " --target cpu --trials 2 --no-baseline --json");
  ck_assert_int_eq(r->status, 0);
  j = cJSON_Parse(r->out);
  ck_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "best")));
  ck_assert(cJSON_GetObjectItemCaseSensitive(j, "first_failure") != NULL);
  cJSON_Delete(j);
}
END_TEST

/* A workload's name becomes its C entry point unless the reserved table
 * has it: `pipe` (POSIX) gets default_function; a name the worker's own
 * libraries export (cJSON_Delete) stays, and the candidate's call of it
 * binds to itself (-Bsymbolic), not to libcjson's (it crashed the worker). */
START_TEST(t_entry_names) {
  char dir[] = "/tmp/tunectl-entry-XXXXXX", args[PATH_MAX * 2];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  static const char *const names[] = {"pipe", "cJSON_Delete", "read"};
  static const char *const entries[] = {"default_function", "cJSON_Delete", "default_function"};
  for (int i = 0; i < 3; i++) {
    char file[64];
    snprintf(file, sizeof file, "%s.tw", names[i]);
    tu_put_file(dir, file, "param N = 64\ninput A: float32[N]\ninput B: float32[N]\noutput C: float32[N]\n"
                           "C[i] = A[i] + B[i]\n");
    snprintf(args, sizeof args, "emit %s/%s --target cpu --emit c", dir, file);
    char want[96];
    snprintf(want, sizeof want, "\nint %s(float *restrict A", entries[i]);
    expect(args, 0, want, NULL);
    snprintf(args, sizeof args, "run %s/%s --target cpu --repeat-ms 1", dir, file);
    expect(args, 0, "verified  ok", NULL);
  }
  tu_remove_tree(dir);
}
END_TEST

/* --allow-tf32: the target T+tf32, where float32 matmuls get the TF32
 * tensor-core space and their outputs are checked at TF32's tolerance; not
 * for targets without tensor cores. */
START_TEST(t_allow_tf32) {
  const char *mm = "matmul " W("matmul") " --set M=32 --set N=32 --set K=32";
  char args[1024];
  snprintf(args, sizeof args, "space %s --target nvidia/h100 --allow-tf32", strchr(mm, ' ') + 1);
  expect(args, 0, "multi-level-tiling-tensor-core(C: wmma_tf32_f32_16x16x8, A and B in shared memory)", NULL);
  snprintf(args, sizeof args, "space %s --target nvidia/h100", strchr(mm, ' ') + 1);
  run_t *r = expect(args, 0, "multi-level-tiling(C: SSSRRSRS", NULL);
  ck_assert_msg(!strstr(r->out, "tensor-core"), "%s", r->out);
  snprintf(args, sizeof args, "space %s --target cpu --allow-tf32", strchr(mm, ' ') + 1);
  expect(args, 2, NULL, "target \"cpu+tf32\": TF32 (+tf32) is a tensor-core mode of CUDA targets; cpu is of kind cpu");
  snprintf(args, sizeof args, "tune %s --target cuda-host --allow-tf32 --trials 2 --no-remeasure --no-baseline",
           strchr(mm, ' ') + 1);
  r = expect(args, 0, "target     cuda-host+tf32\n", NULL);
  ck_assert_msg(strstr(r->out, "trials     2: ok 2,"), "%s", r->out);
}
END_TEST

/* docs/cli.md is `tunectl --markdown`: every command's --help from the
 * command table (the page fails this test when a help text changes and the
 * page was not regenerated). */
START_TEST(t_cli_doc) {
  run_t *r = tunectl_env("env -u TUNED_CONFIG_DIR", "--markdown");
  ck_assert_int_eq(r->status, 0);
  char *doc;
  size_t len;
  tn_err_t err = {0};
  ck_assert_int_eq(tn_read_file(SRC("docs/cli.md"), 1 << 22, &doc, &len, &err), 0);
  ck_assert_msg(strcmp(doc, r->out) == 0,
                "docs/cli.md is not `tunectl --markdown`: regenerate it with build/client/tunectl --markdown > "
                "docs/cli.md");
  ck_assert_msg(strstr(doc, "## tunectl tune\n\n```\nusage: tunectl tune FILE --target T --trials N"), "%.300s", doc);
  ck_assert_msg(strstr(doc, "--allow-tf32") && !strstr(doc, TUNED_SOURCE_ROOT), "machine paths in the page");
  free(doc);
  r = tunectl("--completion fish");
  ck_assert_int_eq(r->status, 2);
  ck_assert_msg(strstr(r->err, "tunectl: --completion knows bash and zsh, not 'fish'"), "%s", r->err);
  r = tunectl("--completion zsh"); /* the bash script through bashcompinit */
  ck_assert_msg(r->status == 0 && strncmp(r->out, "#compdef tunectl\n", 17) == 0 &&
                    strstr(r->out, "bashcompinit") && strstr(r->out, "complete -o filenames -F _tunectl tunectl"),
                "%.300s", r->out);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("tunectl");
  TU_TCASE(s, "cli", 120, t_help, t_show, t_tvmscript, t_check, t_eval, t_errors, t_trace, t_bad_options, t_gnu_options,
           t_every_command_help, t_cli_doc);
  TU_TCASE(s, "pretuned", 240, t_pretuned);
  TU_TCASE(s, "targets", 240, t_targets, t_relocated, t_space_samples);
  TU_TCASE(s, "limits", 600, t_thousand_blocks, t_deep_nest);
  TU_TCASE(s, "tune", 300, t_tune_db, t_tune_no_device, t_eval_work_cap, t_allow_tf32, t_tune_no_kernel,
           t_entry_names);
  return s;
}

TN_TEST_MAIN(make)
