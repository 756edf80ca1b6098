/* test_trace.c — the "trace" suite: trace JSON (exact text, round trips,
 * malformed input), replay (identical IR, decision overrides, stale
 * decisions, determinism) and random schedules on small workloads checked
 * with the reference evaluator and a JSON round trip. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule/schedule.h"
#include "testir.h"

/* ---- helpers --------------------------------------------------------------- */

static sch_trace_t *parse_ok(const char *json) {
  sch_trace_t *t = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_trace_from_json(json, strlen(json), &t, &err) == 0, "%s\n--- in:\n%s", err.msg, json);
  return t;
}

/* Parsing must fail with TN_EINVAL and a message containing `want`. */
static void parse_fails(const char *json, const char *want) {
  sch_trace_t *t = (sch_trace_t *)1;
  tn_err_t err = {0};
  int rc = sch_trace_from_json(json, strlen(json), &t, &err);
  ck_assert_msg(rc == TN_EINVAL, "expected TN_EINVAL for\n%s\ngot %d", json, rc);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

/* to_json -> from_json -> to_json is a fixed point, and replaying the parsed
 * trace on `func` prints the same IR as the schedule and records the same
 * trace.  Returns the JSON (free it). */
static char *assert_round_trip(const ir_func_t *func, const sch_t *s) {
  tn_err_t err = {0};
  char *j1 = sch_trace_to_json(sch_get_trace(s));
  sch_trace_t *t = parse_ok(j1);
  char *j2 = sch_trace_to_json(t);
  ck_assert_str_eq(j1, j2);
  sch_t *r = NULL;
  ck_assert_msg(sch_replay(func, t, 987654321, &r, &err) == 0, "replay: %s\n--- trace:\n%s", err.msg, j1);
  char *p1 = tu_ir_text(sch_func(s)), *p2 = tu_ir_text(sch_func(r));
  ck_assert_str_eq(p1, p2);
  char *j3 = sch_trace_to_json(sch_get_trace(r));
  ck_assert_str_eq(j1, j3);
  free(j2), free(j3), free(p1), free(p2);
  sch_free(r);
  sch_trace_free(t);
  return j1;
}

/* Names of every block under the root, in tree order. */
typedef struct names {
  char v[64][64];
  int n;
} names_t;

static bool collect_block(ir_stmt_t *st, void *ctx) {
  names_t *nm = ctx;
  if (st->kind == IR_S_BLOCK && strcmp(st->u.block.name, "root") != 0 && nm->n < 64)
    snprintf(nm->v[nm->n++], sizeof nm->v[0], "%s", st->u.block.name);
  return true;
}

static names_t block_names(const ir_func_t *f) {
  names_t nm = {.n = 0};
  ir_stmt_walk(f->root, collect_block, &nm);
  return nm;
}

/* Splits loop `l` by n sampled factors. */
static void tile_loop(sch_t *s, sch_rv_t l, int n) {
  tn_err_t err = {0};
  sch_rv_t v[4], out[4];
  sch_arg_t f[4];
  ck_assert_msg(sch_sample_perfect_tile(s, l, n, 0, v, &err) == 0, "%s", err.msg);
  for (int i = 0; i < n; i++) f[i] = sch_arg_rv(v[i]);
  ck_assert_msg(sch_split(s, l, f, n, out, &err) == 0, "%s", err.msg);
}

/* Samples a perfect tile for every loop of every block and splits by it. */
static sch_t *generic_schedule(const ir_func_t *f, uint64_t seed) {
  sch_t *s = sch_create(f, seed);
  names_t nm = block_names(f);
  tn_err_t err = {0};
  for (int b = 0; b < nm.n; b++) {
    sch_rv_t blk, loops[16];
    int n = 0;
    ck_assert_msg(sch_get_block(s, nm.v[b], &blk, &err) == 0, "%s", err.msg);
    ck_assert_msg(sch_get_loops(s, blk, loops, &n, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++) tile_loop(s, loops[i], 2 + (i % 2));
  }
  return s;
}

/* An instruction applied with a fixed decision. */
static void apply_with(sch_t *s, sch_inst_kind_t k, sch_arg_t *in, int nin, sch_arg_t *attrs, int nattrs,
                       const int64_t *dec, int ndec, sch_rv_t *out) {
  sch_inst_t inst = {.kind = k, .inputs = in, .ninputs = nin, .attrs = attrs, .nattrs = nattrs};
  tn_err_t err = {0};
  int nout = 0;
  ck_assert_msg(sch_apply(s, &inst, dec, ndec, out, &nout, &err) == 0, "%s", err.msg);
}

/* matmul 16x16x16 with split i by a fixed [4, 4] tile, j by [None, 4],
 * an unroll annotation from a categorical with decision 1, a string
 * annotation, a binding and a postprocessing part. */
static sch_t *small_schedule(const ir_func_t *f) {
  tn_err_t err = {0};
  sch_t *s = sch_create(f, 1);
  sch_rv_t b, l[3], v[2], sp[4], cv;
  int n;
  ck_assert(sch_get_block(s, "C", &b, &err) == 0);
  ck_assert(sch_get_loops(s, b, l, &n, &err) == 0 && n == 3);
  sch_arg_t tin[1] = {sch_arg_rv(l[0])}, tattr[2] = {sch_arg_int(2), sch_arg_int(16)};
  int64_t tdec[2] = {4, 4};
  apply_with(s, SCH_SAMPLE_PERFECT_TILE, tin, 1, tattr, 2, tdec, 2, v);
  sch_arg_t f1[2] = {sch_arg_rv(v[0]), sch_arg_rv(v[1])}, f2[2] = {sch_arg_none(), sch_arg_int(4)};
  ck_assert_msg(sch_split(s, l[0], f1, 2, sp, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_split(s, l[1], f2, 2, sp + 2, &err) == 0, "%s", err.msg);
  sch_arg_t c[3] = {sch_arg_int(0), sch_arg_int(16), sch_arg_int(64)};
  sch_arg_t p[3] = {sch_arg_float(0.5), sch_arg_float(0.25), sch_arg_float(0.25)};
  sch_arg_t cattr[2] = {{.kind = SCH_ARG_LIST, .items = c, .n = 3}, {.kind = SCH_ARG_LIST, .items = p, .n = 3}};
  int64_t cdec = 1;
  apply_with(s, SCH_SAMPLE_CATEGORICAL, NULL, 0, cattr, 2, &cdec, 1, &cv);
  ck_assert_msg(sch_annotate(s, b, "pragma_auto_unroll_max_step", sch_arg_rv(cv), &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_annotate(s, sp[0], "note", sch_arg_str("say \"hi\"\\"), &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_bind(s, sp[0], "blockIdx.x", &err) == 0, "%s", err.msg);
  ck_assert(sch_enter_postproc(s, &err) == 0);
  ck_assert_msg(sch_parallel(s, sp[2], &err) == 0, "%s", err.msg);
  return s;
}

static const char small_json[] =
    "{\n"
    "  \"version\": 1,\n"
    "  \"trace\": [\n"
    "    [\n"
    "      [\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]],\n"
    "      [\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\", \"l3\"]],\n"
    "      [\"SamplePerfectTile\", [\"l1\"], [2, 16], [\"v4\", \"v5\"]],\n"
    "      [\"Split\", [\"l1\", \"v4\", \"v5\"], [1, 0], [\"l6\", \"l7\"]],\n"
    "      [\"Split\", [\"l2\", \"None\", 4], [1, 0], [\"l8\", \"l9\"]],\n"
    "      [\"SampleCategorical\", [], [[0, 16, 64], [0.5, 0.25, 0.25]], [\"v10\"]],\n"
    "      [\"Annotate\", [\"b0\", \"v10\"], [\"pragma_auto_unroll_max_step\"], []],\n"
    "      [\"Annotate\", [\"l6\", \"\\\"say \\\"hi\\\"\\\\\\\"\"], [\"note\"], []],\n"
    "      [\"Bind\", [\"l6\"], [\"blockIdx.x\"], []],\n"
    "      [\"EnterPostproc\", [], [], []],\n"
    "      [\"Parallel\", [\"l8\"], [], []]\n"
    "    ],\n"
    "    [\n"
    "      [2, [4, 4]],\n"
    "      [5, 1]\n"
    "    ]\n"
    "  ]\n"
    "}\n";

static const ir_param_set_t mm16[] = {{"M", 16}, {"N", 16}, {"K", 16}};

/* ---- JSON text ----------------------------------------------------------- */

START_TEST(t_json_exact_text) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  sch_t *s = small_schedule(w->func);
  char *j = sch_trace_to_json(sch_get_trace(s));
  ck_assert_str_eq(j, small_json);
  free(j);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_json_empty_trace) {
  sch_trace_t *t = sch_trace_new();
  char *j = sch_trace_to_json(t);
  ck_assert_str_eq(j, "{\n  \"version\": 1,\n  \"trace\": [\n    [],\n    []\n  ]\n}\n");
  sch_trace_t *u = parse_ok(j);
  ck_assert_int_eq(u->n, 0);
  sch_trace_t *v = parse_ok("[[], []]");
  ck_assert_int_eq(v->n, 0);
  free(j);
  sch_trace_free(t), sch_trace_free(u), sch_trace_free(v);
}
END_TEST

/* The bare form with TVM-style spelling: parsed values and ids. */
START_TEST(t_json_parse_fields) {
  static const char bare[] =
      "[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b7\"]],"
      "  [\"GetLoops\", [\"b7\"], [], [\"l3\", \"l1\"]],"
      "  [\"SampleCategorical\", [], [[1, 2], [0.5, 1.0]], [\"v0\"]],"
      "  [\"Annotate\", [\"l1\", \"\\\"x y\\\"\"], [\"k\"], []],"
      "  [\"Split\", [\"l3\", \"None\", \"v0\", [\"b7\", 3, [true]]], [1, false], [\"l9\", \"l10\", \"l11\"]]],"
      " [[2, 1]]]";
  sch_trace_t *t = parse_ok(bare);
  ck_assert_int_eq(t->n, 5);
  const sch_inst_t *in = t->insts;
  ck_assert_int_eq(in[0].kind, SCH_GET_BLOCK);
  ck_assert_int_eq(in[0].noutputs, 1);
  ck_assert_int_eq(in[0].outputs[0], 0);
  ck_assert_str_eq(in[0].attrs[1].s, "main");
  ck_assert_int_eq(in[1].inputs[0].kind, SCH_ARG_RV);
  ck_assert_int_eq(in[1].inputs[0].rv, 0);
  ck_assert_int_eq(in[1].outputs[0], 1);
  ck_assert_int_eq(in[1].outputs[1], 2);
  ck_assert_int_eq(in[2].attrs[1].items[1].kind, SCH_ARG_FLOAT); /* 1.0 stays a float */
  ck_assert(in[2].attrs[1].items[1].f == 1.0);
  ck_assert_int_eq(in[2].ndecision, 1);
  ck_assert_int_eq(in[2].decision[0], 1);
  ck_assert_int_eq(in[3].inputs[0].rv, 2);
  ck_assert_int_eq(in[3].inputs[1].kind, SCH_ARG_STR);
  ck_assert_str_eq(in[3].inputs[1].s, "x y");
  ck_assert_int_eq(in[3].attrs[0].kind, SCH_ARG_STR);
  const sch_arg_t *sp = in[4].inputs;
  ck_assert_int_eq(in[4].ninputs, 4);
  ck_assert_int_eq(sp[1].kind, SCH_ARG_NONE);
  ck_assert_int_eq(sp[2].rv, 3);
  ck_assert_int_eq(sp[3].kind, SCH_ARG_LIST);
  ck_assert_int_eq(sp[3].n, 3);
  ck_assert_int_eq(sp[3].items[0].rv, 0);
  ck_assert_int_eq(sp[3].items[1].i, 3);
  ck_assert_int_eq(sp[3].items[2].items[0].kind, SCH_ARG_INT); /* true -> 1 */
  ck_assert_int_eq(sp[3].items[2].items[0].i, 1);
  ck_assert_int_eq(in[4].attrs[1].i, 0);
  ck_assert_int_eq(in[4].outputs[2], 6);
  char *j = sch_trace_to_json(t);
  ck_assert_str_eq(j, "{\n  \"version\": 1,\n  \"trace\": [\n    [\n"
                      "      [\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]],\n"
                      "      [\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\"]],\n"
                      "      [\"SampleCategorical\", [], [[1, 2], [0.5, 1.0]], [\"v3\"]],\n"
                      "      [\"Annotate\", [\"l2\", \"\\\"x y\\\"\"], [\"k\"], []],\n"
                      "      [\"Split\", [\"l1\", \"None\", \"v3\", [\"b0\", 3, [1]]], [1, 0], [\"l4\", \"l5\", \"l6\"]]\n"
                      "    ],\n    [\n      [2, 1]\n    ]\n  ]\n}\n");
  free(j);
  sch_trace_free(t);
}
END_TEST

/* Floats read back bit for bit; int64 extremes stay exact. */
START_TEST(t_json_numbers_exact) {
  static const double fs[] = {0.1, 1.0 / 3, 1e-300, 5e-324, 1.0, -0.0, 1.7976931348623157e308, 123456.789,
                              -2.5e-7, INFINITY, -INFINITY};
  static const int64_t is[] = {0, -1, INT64_MAX, INT64_MIN, (INT64_C(1) << 53) + 1};
  sch_arg_t fa[TN_ARRAY_LEN(fs)], ia[TN_ARRAY_LEN(is)];
  for (size_t i = 0; i < TN_ARRAY_LEN(fs); i++) fa[i] = sch_arg_float(fs[i]);
  for (size_t i = 0; i < TN_ARRAY_LEN(is); i++) ia[i] = sch_arg_int(is[i]);
  sch_arg_t attrs[2] = {{.kind = SCH_ARG_LIST, .items = fa, .n = TN_ARRAY_LEN(fs)},
                        {.kind = SCH_ARG_LIST, .items = ia, .n = TN_ARRAY_LEN(is)}};
  sch_inst_t inst = {.kind = SCH_ENTER_POSTPROC, .attrs = attrs, .nattrs = 2};
  sch_trace_t *t = sch_trace_new();
  sch_trace_append(t, &inst);
  char *j = sch_trace_to_json(t);
  ck_assert_ptr_nonnull(strstr(j, "[0, -1, 9223372036854775807, -9223372036854775808, 9007199254740993]"));
  ck_assert_ptr_nonnull(strstr(j, "[0.1, 0.3333333333333333, 1e-300, 4.94065645841247e-324, 1.0, -0.0, "
                                  "1.7976931348623157e+308, 123456.789, -2.5e-07, 1e999, -1e999]"));
  sch_trace_t *u = parse_ok(j);
  const sch_arg_t *a = u->insts[0].attrs;
  for (size_t i = 0; i < TN_ARRAY_LEN(fs); i++) {
    ck_assert_int_eq(a[0].items[i].kind, SCH_ARG_FLOAT);
    ck_assert_msg(memcmp(&a[0].items[i].f, &fs[i], sizeof(double)) == 0, "float %zu: %.17g != %.17g", i,
                  a[0].items[i].f, fs[i]);
  }
  for (size_t i = 0; i < TN_ARRAY_LEN(is); i++) {
    ck_assert_int_eq(a[1].items[i].kind, SCH_ARG_INT);
    ck_assert_msg(a[1].items[i].i == is[i], "int %zu", i);
  }
  char *j2 = sch_trace_to_json(u);
  ck_assert_str_eq(j, j2);
  free(j), free(j2);
  sch_trace_free(t), sch_trace_free(u);
}
END_TEST

/* Strings with quotes, backslashes, control characters and UTF-8, as inputs
 * (extra quotes) and attributes (plain). */
START_TEST(t_json_strings) {
  static const char *const strs[] = {"", "None", "b0", "\"", "a\"b\\c", "tab\there\nnl\x01\x1f", "h\xc3\xa9llo", "\"q\""};
  for (size_t i = 0; i < TN_ARRAY_LEN(strs); i++) {
    sch_arg_t in = sch_arg_str(strs[i]), at = sch_arg_str(strs[i]);
    sch_inst_t inst = {.kind = SCH_ENTER_POSTPROC, .inputs = &in, .ninputs = 1, .attrs = &at, .nattrs = 1};
    sch_trace_t *t = sch_trace_new();
    sch_trace_append(t, &inst);
    char *j = sch_trace_to_json(t);
    sch_trace_t *u = parse_ok(j);
    ck_assert_int_eq(u->insts[0].inputs[0].kind, SCH_ARG_STR);
    ck_assert_str_eq(u->insts[0].inputs[0].s, strs[i]);
    ck_assert_int_eq(u->insts[0].attrs[0].kind, SCH_ARG_STR);
    ck_assert_str_eq(u->insts[0].attrs[0].s, strs[i]);
    free(j);
    sch_trace_free(t), sch_trace_free(u);
  }
}
END_TEST

/* A handle no instruction defined: written under a name that the parser
 * reports, instead of a valid-looking one. */
START_TEST(t_json_dangling_handle) {
  sch_arg_t in = sch_arg_rv(5);
  sch_rv_t out = 0;
  sch_inst_t inst = {.kind = SCH_GET_LOOPS, .inputs = &in, .ninputs = 1, .outputs = &out, .noutputs = 1};
  sch_trace_t *t = sch_trace_new();
  sch_trace_append(t, &inst);
  char *j = sch_trace_to_json(t);
  ck_assert_ptr_nonnull(strstr(j, "[\"GetLoops\", [\"dangling_rv5\"], [], [\"l0\"]]"));
  parse_fails(j, "instruction 0 (GetLoops): input 0: unknown handle 'dangling_rv5'");
  free(j);
  sch_trace_free(t);
}
END_TEST

/* ---- malformed JSON ------------------------------------------------------- */

#define INSTS                                                   \
  "[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], "           \
  "[\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\", \"l3\"]], "    \
  "[\"SamplePerfectTile\", [\"l1\"], [2, 16], [\"v4\", \"v5\"]]"

static const struct bad {
  const char *json, *want;
} bad_cases[] = {
    {"", "invalid JSON at line 1, column 1"},
    {"[[], []", "invalid JSON at line 1"},
    {"[[],\n []]  x", "unexpected text after the value at line 2, column 7"},
    {"[[], [], []]", "expected {\"version\": 1, \"trace\": [instructions, decisions]} or [instructions, decisions], got an array of 3 elements"},
    {"\"trace\"", "got the string \"trace\""},
    {"{\"version\": 2, \"trace\": [[], []]}", "unsupported version 2 (this build reads version 1)"},
    {"{\"version\": \"1\", \"trace\": [[], []]}", "\"version\" must be the integer 1, got the string \"1\""},
    {"{\"trace\": [[], []]}", "missing \"version\""},
    {"{\"version\": 1}", "missing \"trace\""},
    {"[{}, []]", "the instruction list must be an array, got an object"},
    {"[[], {}]", "the decision list must be an array, got an object"},
    {"[[5], []]", "instruction 0: expected [name, [inputs], [attributes], [outputs]], got an integer"},
    {"[[[\"GetBlock\", [], []]], []]", "instruction 0 (GetBlock): expected [name, [inputs], [attributes], [outputs]], got an array of 3 elements"},
    {"[[[7, [], [], []]], []]", "instruction 0: the instruction name must be a string, got an integer"},
    {"[[[\"GetBlock\", {}, [], []]], []]", "instruction 0 (GetBlock): the inputs must be an array, got an object"},
    {"[[[\"GetBlock\", [], \"C\", []]], []]", "instruction 0 (GetBlock): the attributes must be an array, got the string \"C\""},
    {"[[[\"GetBlock\", [], [], null]], []]", "instruction 0 (GetBlock): the outputs must be an array, got null"},
    {"[[" INSTS ", [\"Splitt\", [\"l1\"], [], []]], []]", "instruction 3: unknown instruction 'Splitt' (did you mean 'Split'?)"},
    {"[[[\"Frobnicate\", [], [], []]], []]", "instruction 0: unknown instruction 'Frobnicate'"},
    {"[[" INSTS ", [\"Split\", [\"l1\", \"v4\", \"l9\"], [1, 0], [\"l6\", \"l7\"]]], []]",
     "instruction 3 (Split): input 2: unknown handle 'l9'"},
    {"[[" INSTS ", [\"Split\", [\"l1\", [\"v4\", [\"v5\", \"x\"]]], [1, 0], []]], []]",
     "instruction 3 (Split): input 1[1][1]: unknown handle 'x'"},
    {"[[" INSTS ", [\"Split\", [\"l1\", null], [1, 0], []]], []]",
     "instruction 3 (Split): input 1: expected a number, a string or an array, got null"},
    {"[[" INSTS ", [\"Split\", [\"l1\", {}], [1, 0], []]], []]", "input 1: expected a number, a string or an array, got an object"},
    {"[[[\"GetBlock\", [], [\"C\"], [\"l0\"]]], []]",
     "instruction 0 (GetBlock): output 0: 'l0' is not a valid name for a block handle (expected b<number>, e.g. b0)"},
    {"[[[\"GetBlock\", [], [\"C\"], [\"b\"]]], []]", "output 0: 'b' is not a valid name for a block handle"},
    {"[[[\"GetBlock\", [], [\"C\"], [\"b0x\"]]], []]", "output 0: 'b0x' is not a valid name"},
    {"[[[\"GetBlock\", [], [\"C\"], [3]]], []]", "instruction 0 (GetBlock): output 0: expected a handle name, got an integer"},
    {"[[" INSTS ", [\"GetLoops\", [\"b0\"], [], [\"l7\", \"l2\"]]], []]",
     "instruction 3 (GetLoops): output 1: duplicate handle name 'l2' (already defined by instruction 1)"},
    {"[[" INSTS ", [\"GetLoops\", [\"b0\"], [], [\"l8\", \"l8\"]]], []]", "output 1: duplicate handle name 'l8' (already defined by instruction 3)"},
    {"[[" INSTS "], [[1, 2]]]", "decision 0: instruction 1 (GetLoops) is not a sampling instruction and takes no decision"},
    {"[[" INSTS "], [[3, [4, 4]]]]", "decision 0: instruction index 3 is out of range (the trace has 3 instructions)"},
    {"[[" INSTS "], [[-1, [4, 4]]]]", "decision 0: instruction index -1 is out of range"},
    {"[[" INSTS "], [[2.0, [4, 4]]]]", "decision 0: the instruction index must be an integer, got a float"},
    {"[[" INSTS "], [[2, 16]]]", "decision 0 (instruction 2, SamplePerfectTile): expected an array of 2 integers (one per output), got an integer"},
    {"[[" INSTS "], [[2, [4, 4, 1]]]]", "expected an array of 2 integers (one per output), got an array of 3 elements"},
    {"[[" INSTS "], [[2, [4, \"4\"]]]]", "decision 0 (instruction 2, SamplePerfectTile): factor 1 must be an integer, got the string \"4\""},
    {"[[" INSTS "], [[2, [4, 4.0]]]]", "factor 1 must be an integer, got a float"},
    {"[[" INSTS "], [[2, [4, 4]], [2, [2, 8]]]]", "decision 1: instruction 2 (SamplePerfectTile) already has a decision"},
    {"[[" INSTS "], [[2]]]", "decision 0: expected [instruction index, value], got an array of 1 elements"},
    {"[[" INSTS "], [5]]", "decision 0: expected [instruction index, value], got an integer"},
    {"[[[\"SampleCategorical\", [], [[1, 2], [0.5, 0.5]], [\"v0\"]]], [[0, [1]]]]",
     "decision 0 (instruction 0, SampleCategorical): expected an integer, got an array of 1 elements"},
    {"[[[\"SampleCategorical\", [], [[1, 2], [0.5, 0.5]], [\"v0\"]]], [[0, 99999999999999999999]]]",
     "expected an integer, got an integer out of the 64-bit range"},
    {"[[[\"SampleCategorical\", [], [[1, 99999999999999999999], [0.5, 0.5]], [\"v0\"]]], []]",
     "instruction 0 (SampleCategorical): attribute 0[1]: integer 100000000000000000000 is out of the 64-bit range"},
    {"[[[\"EnterPostproc\", [], [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]], []]], []]",
     "instruction 0 (EnterPostproc): attribute 0" "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: lists nested deeper than 16 levels"},
};

START_TEST(t_json_malformed) {
  for (size_t i = 0; i < TN_ARRAY_LEN(bad_cases); i++) parse_fails(bad_cases[i].json, bad_cases[i].want);
  /* the position of a syntax error */
  sch_trace_t *t = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(sch_trace_from_json("[[],\n  [}]", 10, &t, &err), TN_EINVAL);
  ck_assert_int_eq(err.line, 2);
  ck_assert_int_eq(err.col, 4);
  /* a NULL error is fine */
  ck_assert_int_eq(sch_trace_from_json("[", 1, &t, NULL), TN_EINVAL);
  /* the length is respected: a valid prefix of a longer buffer */
  ck_assert_int_eq(sch_trace_from_json("[[], []] garbage", 8, &t, &err), 0);
  sch_trace_free(t);
}
END_TEST

START_TEST(t_json_limits) {
  size_t big = (1u << 20) + 1;
  char *text = malloc(big + 1);
  memset(text, ' ', big);
  memcpy(text, "[[], []]", 8);
  text[big] = 0;
  parse_fails(text, "trace JSON: 1048577 bytes; at most 1048576 are accepted");
  /* 100001 instructions (as tiny non-instructions: the count is checked first) */
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "[[");
  for (int i = 0; i <= 100000; i++) tn_buf_put(&b, i ? ",0" : "0");
  tn_buf_put(&b, "], []]");
  parse_fails(tn_buf_str(&b), "trace: 100001 instructions; at most 100000 are accepted");
  /* more than SCH_MAX_RVS_OUT outputs */
  tn_buf_reset(&b);
  tn_buf_put(&b, "[[[\"GetBlock\", [], [\"C\"], [\"b0\"]], [\"GetLoops\", [\"b0\"], [], [");
  for (int i = 0; i <= SCH_MAX_RVS_OUT; i++) tn_buf_printf(&b, "%s\"l%d\"", i ? ", " : "", i + 1);
  tn_buf_put(&b, "]]], []]");
  char msg[96];
  snprintf(msg, sizeof msg, "instruction 1 (GetLoops): %d outputs; at most %d are possible", SCH_MAX_RVS_OUT + 1,
           SCH_MAX_RVS_OUT);
  parse_fails(tn_buf_str(&b), msg);
  tn_buf_free(&b);
  free(text);
}
END_TEST

/* ---- replay ----------------------------------------------------------------- */

START_TEST(t_replay_identical) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  sch_t *s = small_schedule(w->func);
  char *j = assert_round_trip(w->func, s);
  ck_assert_str_eq(j, small_json);
  tu_assert_same_outputs(w->func, sch_func(s), 11);
  /* the printed IR has the tiles, the binding and the annotations */
  char *p = tu_ir_text(sch_func(s));
  ck_assert_ptr_nonnull(strstr(p, "for i_0 in T.thread_binding(4, thread=\"blockIdx.x\""));
  ck_assert_ptr_nonnull(strstr(p, "for j_0 in T.parallel(4):"));
  ck_assert_ptr_nonnull(strstr(p, "\"pragma_auto_unroll_max_step\": 16"));
  free(p), free(j);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Replaying the same trace twice with one seed: same IR and same JSON;
 * the JSON text parsed back also replays to it. */
START_TEST(t_replay_deterministic) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  sch_trace_t *t = parse_ok(small_json);
  sch_t *a = NULL, *b = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_replay(w->func, t, 3, &a, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_replay(w->func, t, 3, &b, &err) == 0, "%s", err.msg);
  char *pa = tu_ir_text(sch_func(a)), *pb = tu_ir_text(sch_func(b));
  ck_assert_str_eq(pa, pb);
  char *ja = sch_trace_to_json(sch_get_trace(a)), *jb = sch_trace_to_json(sch_get_trace(b));
  ck_assert_str_eq(ja, jb);
  ck_assert_str_eq(ja, small_json);
  free(pa), free(pb), free(ja), free(jb);
  sch_free(a), sch_free(b);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

/* A trace without decisions samples at replay: the seed decides. */
START_TEST(t_replay_samples_without_decisions) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  static const char json[] =
      "[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]],"
      "  [\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\", \"l3\"]],"
      "  [\"SamplePerfectTile\", [\"l1\"], [3, 0], [\"v4\", \"v5\", \"v6\"]],"
      "  [\"Split\", [\"l1\", \"v4\", \"v5\", \"v6\"], [1, 0], [\"l7\", \"l8\", \"l9\"]]], []]";
  sch_trace_t *t = parse_ok(json);
  char *first = NULL;
  bool differs = false;
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sch_t *a = NULL, *b = NULL;
    tn_err_t err = {0};
    ck_assert_msg(sch_replay(w->func, t, seed, &a, &err) == 0, "%s", err.msg);
    ck_assert_msg(sch_replay(w->func, t, seed, &b, &err) == 0, "%s", err.msg);
    char *ja = sch_trace_to_json(sch_get_trace(a)), *jb = sch_trace_to_json(sch_get_trace(b));
    ck_assert_str_eq(ja, jb);
    ck_assert_ptr_nonnull(strstr(ja, "[\n      [2, ["));
    if (!first) {
      first = ja;
    } else {
      differs |= strcmp(first, ja) != 0;
      free(ja);
    }
    tu_assert_same_outputs(w->func, sch_func(a), 11);
    free(jb);
    sch_free(a), sch_free(b);
  }
  ck_assert_msg(differs, "8 seeds sampled the same tiles");
  free(first);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

/* Overriding the tile decision [4, 4] -> [2, 8] and [8, 2]. */
START_TEST(t_replay_override) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  sch_trace_t *t = parse_ok(small_json);
  int64_t d28[2] = {2, 8}, d82[2] = {8, 2};
  int64_t *decs[11] = {0};
  int ndecs[11] = {0};
  decs[2] = d28, ndecs[2] = 2;
  sch_t *a = NULL, *b = NULL, *c = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_replay_with(w->func, t, 1, decs, ndecs, false, &a, &err) == 0, "%s", err.msg);
  decs[2] = d82;
  ck_assert_msg(sch_replay_with(w->func, t, 1, decs, ndecs, false, &b, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_replay(w->func, t, 1, &c, &err) == 0, "%s", err.msg);
  char *pa = tu_ir_text(sch_func(a)), *pb = tu_ir_text(sch_func(b)), *pc = tu_ir_text(sch_func(c));
  ck_assert_str_ne(pa, pc);
  ck_assert_str_ne(pb, pc);
  ck_assert_ptr_nonnull(strstr(pa, "for i_0 in T.thread_binding(2, thread=\"blockIdx.x\""));
  ck_assert_ptr_nonnull(strstr(pa, "v_i = T.axis.spatial(16, i_0 * 8 + i_1)"));
  ck_assert_ptr_nonnull(strstr(pb, "for i_0 in T.thread_binding(8, thread=\"blockIdx.x\""));
  ck_assert_ptr_nonnull(strstr(pb, "v_i = T.axis.spatial(16, i_0 * 2 + i_1)"));
  char *ja = sch_trace_to_json(sch_get_trace(a));
  ck_assert_ptr_nonnull(strstr(ja, "[2, [2, 8]],\n      [5, 1]"));
  tu_assert_same_outputs(w->func, sch_func(a), 11);
  tu_assert_same_outputs(w->func, sch_func(b), 11);
  /* the categorical decision: index 2 -> 64 */
  int64_t d2 = 2;
  decs[2] = NULL, ndecs[2] = 0;
  decs[5] = &d2, ndecs[5] = 1;
  sch_t *d = NULL;
  ck_assert_msg(sch_replay_with(w->func, t, 1, decs, ndecs, false, &d, &err) == 0, "%s", err.msg);
  char *pd = tu_ir_text(sch_func(d));
  ck_assert_ptr_nonnull(strstr(pd, "\"pragma_auto_unroll_max_step\": 64"));
  /* an invalid override names the instruction */
  int64_t d9 = 9;
  decs[5] = &d9;
  sch_t *e = (sch_t *)1;
  ck_assert_int_eq(sch_replay_with(w->func, t, 1, decs, ndecs, false, &e, &err), TN_EINVAL);
  ck_assert_ptr_null(e);
  ck_assert_str_eq(err.msg, "instruction 5 (SampleCategorical): sample_categorical: decision must be one index in [0, 3)");
  free(pa), free(pb), free(pc), free(pd), free(ja);
  sch_free(a), sch_free(b), sch_free(c), sch_free(d);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

START_TEST(t_replay_remove_postproc) {
  ir_workload_t *w = tu_load("matmul", mm16, 3);
  sch_trace_t *t = parse_ok(small_json);
  sch_t *a = NULL;
  tn_err_t err = {0};
  ck_assert_msg(sch_replay_with(w->func, t, 1, NULL, NULL, true, &a, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(sch_get_trace(a)->n, 9);
  char *p = tu_ir_text(sch_func(a));
  ck_assert_ptr_null(strstr(p, "T.parallel"));
  ck_assert_ptr_nonnull(strstr(p, "blockIdx.x"));
  tu_assert_same_outputs(w->func, sch_func(a), 11);
  free(p);
  sch_free(a);
  sch_trace_free(t);
  ir_workload_free(w);
}
END_TEST

/* A tile decision recorded for extent 1024 replayed where the extent is
 * 1000: repaired from the innermost factor outwards. */
START_TEST(t_replay_stale_decision) {
  static const struct {
    int64_t old[3], repaired[3];
    int n;
    const char *loops;
  } cases[] = {
      {{128, 8}, {125, 8}, 2, "for i_0, i_1 in T.grid(125, 8):"},
      {{8, 128}, {1, 1000}, 2, "for i_0, i_1 in T.grid(1, 1000):"},
      {{4, 32, 8}, {1, 125, 8}, 3, "for i_0, i_1, i_2 in T.grid(1, 125, 8):"},
  };
  ir_param_set_t n1024 = {"N", 1024}, n1000 = {"N", 1000};
  ir_workload_t *big = tu_load("vector_add", &n1024, 1), *small = tu_load("vector_add", &n1000, 1);
  for (size_t c = 0; c < TN_ARRAY_LEN(cases); c++) {
    int n = cases[c].n;
    sch_t *s = sch_create(big->func, 1);
    tn_err_t err = {0};
    sch_rv_t b, l, v[3], out[3];
    int nl;
    ck_assert(sch_get_block(s, "C", &b, &err) == 0 && sch_get_loops(s, b, &l, &nl, &err) == 0);
    sch_arg_t in[1] = {sch_arg_rv(l)}, attrs[2] = {sch_arg_int(n), sch_arg_int(0)};
    apply_with(s, SCH_SAMPLE_PERFECT_TILE, in, 1, attrs, 2, cases[c].old, n, v);
    sch_arg_t f[3] = {sch_arg_rv(v[0]), sch_arg_rv(v[1]), sch_arg_rv(v[2])};
    ck_assert_msg(sch_split(s, l, f, n, out, &err) == 0, "%s", err.msg);
    char *j = sch_trace_to_json(sch_get_trace(s));
    sch_trace_t *t = parse_ok(j);
    sch_t *r = NULL;
    ck_assert_msg(sch_replay(small->func, t, 1, &r, &err) == 0, "%s", err.msg);
    const sch_inst_t *tile = &sch_get_trace(r)->insts[2];
    ck_assert_int_eq(tile->ndecision, n);
    int64_t prod = 1;
    for (int i = 0; i < n; i++) {
      ck_assert_int_eq(tile->decision[i], cases[c].repaired[i]);
      prod *= tile->decision[i];
    }
    ck_assert_int_eq(prod, 1000);
    char *p = tu_ir_text(sch_func(r));
    ck_assert_msg(strstr(p, cases[c].loops), "case %zu lacks \"%s\":\n%s", c, cases[c].loops, p);
    tu_assert_same_outputs(small->func, sch_func(r), 11);
    free(j), free(p);
    sch_free(s), sch_free(r);
    sch_trace_free(t);
  }
  ir_workload_free(big), ir_workload_free(small);
}
END_TEST

START_TEST(t_replay_errors) {
  ir_workload_t *mm = tu_load("matmul", mm16, 3), *va = tu_load("vector_add", NULL, 0);
  static const struct {
    const char *json, *want;
    int code;
  } cases[] = {
      /* the block does not exist in vector_add */
      {"[[[\"GetBlock\", [], [\"D\", \"main\"], [\"b0\"]]], []]",
       "instruction 0 (GetBlock): get_block: no block named \"D\"", TN_EINVAL},
      /* matmul's C has 3 loops; vector_add's 1 */
      {"[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], [\"GetLoops\", [\"b0\"], [], [\"l1\", \"l2\", \"l3\"]]], []]",
       "instruction 1 (GetLoops): the trace expects 3 outputs, replay produced 1", TN_EINVAL},
      /* arity */
      {"[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], [\"GetLoops\", [\"b0\", \"b0\"], [], [\"l1\"]]], []]",
       "instruction 1 (GetLoops): get_loops: takes 1..1 inputs, got 2", TN_EINVAL},
      /* a loop handle where a block handle belongs */
      {"[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], [\"GetLoops\", [\"b0\"], [], [\"l1\"]],"
       "  [\"GetLoops\", [\"l1\"], [], [\"l2\"]]], []]",
       "instruction 2 (GetLoops): get_loops: input 0 must be a block handle, got a loop handle", TN_EINVAL},
      /* a split whose factors do not multiply to the extent */
      {"[[[\"GetBlock\", [], [\"C\", \"main\"], [\"b0\"]], [\"GetLoops\", [\"b0\"], [], [\"l1\"]],"
       "  [\"Split\", [\"l1\", 0, 4], [1, 0], [\"l2\", \"l3\"]]], []]",
       "instruction 2 (Split): split: factor 0 is 0; factors must be >= 1", TN_EINVAL},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    sch_trace_t *t = parse_ok(cases[i].json);
    sch_t *s = (sch_t *)1;
    tn_err_t err = {0};
    ck_assert_int_eq(sch_replay(va->func, t, 1, &s, &err), cases[i].code);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].want);
    sch_trace_free(t);
  }
  /* a hand-built trace with an input nobody defined */
  sch_arg_t in = sch_arg_rv(7);
  sch_rv_t out[3] = {0, 1, 2};
  sch_inst_t inst = {.kind = SCH_GET_LOOPS, .inputs = &in, .ninputs = 1, .outputs = out, .noutputs = 3};
  sch_trace_t *t = sch_trace_new();
  sch_trace_append(t, &inst);
  sch_t *s = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(sch_replay(mm->func, t, 1, &s, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "instruction 0 (GetLoops): input 0: handle 7 is not an output of an earlier instruction");
  sch_trace_free(t);
  ir_workload_free(mm), ir_workload_free(va);
}
END_TEST

/* ReIndex and FuseBlockIters in TVM's JSON form (ReIndex's attributes:
 * buffer index, 0 read / 1 write) round-trip and replay to the same IR. */
START_TEST(t_replay_reindex) {
  static const ir_param_set_t cv[] = {{"N", 1}, {"H", 4}, {"W", 4}, {"C", 8}, {"F", 8}};
  ir_workload_t *w = tu_load("conv2d_nhwc", cv, 5);
  tn_err_t err = {0};
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t y, c;
  ck_assert(sch_get_block(s, "Y", &y, &err) == 0);
  ck_assert_msg(sch_reindex(s, y, 1, false, &c, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_reindex(s, y, 0, true, &c, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_fuse_block_iters(s, y, 4, 3, &err) == 0, "%s", err.msg);
  char *j = assert_round_trip(w->func, s);
  ck_assert_msg(strstr(j, "[\"ReIndex\", [\"b0\"], [1, 0], [\"b1\"]],\n"
                          "      [\"ReIndex\", [\"b0\"], [0, 1], [\"b2\"]],\n"
                          "      [\"FuseBlockIters\", [\"b0\"], [4, 3], []]"),
                "%s", j);
  tu_assert_same_outputs(w->func, sch_func(s), 5);
  free(j);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* PadEinsum's paddings (one list attribute) round-trip, and its copy
 * blocks are handles the trace uses afterwards. */
START_TEST(t_replay_pad_einsum) {
  static const ir_param_set_t mm[] = {{"M", 12}, {"N", 20}, {"K", 9}};
  ir_workload_t *w = tu_load("matmul", mm, 3);
  tn_err_t err = {0};
  sch_t *s = sch_create(w->func, 1);
  sch_rv_t c, copies[4];
  int n = 0;
  int64_t pad[3] = {16, 16, 16};
  ck_assert(sch_get_block(s, "C", &c, &err) == 0);
  ck_assert_msg(sch_pad_einsum(s, c, pad, 3, copies, &n, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(n, 3);
  ck_assert_msg(sch_compute_inline(s, copies[0], &err) == 0, "%s", err.msg); /* A_pad into C */
  char *j = assert_round_trip(w->func, s);
  ck_assert_msg(strstr(j, "[\"PadEinsum\", [\"b0\"], [[16, 16, 16]], [\"b1\", \"b2\", \"b3\"]],\n"
                          "      [\"ComputeInline\", [\"b1\"], [], []]"),
                "%s", j);
  tu_assert_same_outputs(w->func, sch_func(s), 5);
  free(j);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ---- every workload --------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The workload stems under workloads/, sorted. */
static int workload_names(char names[][64], int max) {
  DIR *d = opendir(TUNED_SOURCE_ROOT "/workloads");
  ck_assert_ptr_nonnull(d);
  char *v[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    size_t len = strlen(e->d_name);
    if (len > 3 && len < 60 && strcmp(e->d_name + len - 3, ".tw") == 0) v[n++] = strndup(e->d_name, len - 3);
  }
  closedir(d);
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  for (int i = 0; i < n; i++) snprintf(names[i], 64, "%s", v[i]), free(v[i]);
  return n;
}

/* Every parameter at most 12, so the evaluator is quick. */
static ir_workload_t *load_small(const char *name) {
  ir_workload_t *w = tu_load(name, NULL, 0);
  ir_param_set_t ovr[16];
  int n = 0;
  for (int i = 0; i < w->nparams && n < 16; i++)
    if (w->params[i].def > 12) ovr[n++] = (ir_param_set_t){w->params[i].name, 12};
  ir_workload_t *small = tu_load(name, ovr, n);
  ir_workload_free(w);
  return small;
}

START_TEST(t_every_workload_round_trip) {
  char names[64][64];
  int n = workload_names(names, 64);
  ck_assert_int_ge(n, 10);
  for (int i = 0; i < n; i++) {
    ir_workload_t *w = load_small(names[i]);
    sch_t *s = generic_schedule(w->func, 42 + (uint64_t)i);
    ck_assert_int_gt(sch_get_trace(s)->n, 3);
    free(assert_round_trip(w->func, s));
    tu_assert_same_outputs(w->func, sch_func(s), 11);
    sch_free(s);
    ir_workload_free(w);
  }
}
END_TEST

START_TEST(t_seed_determinism) {
  ir_param_set_t ovr[3] = {{"M", 24}, {"N", 36}, {"K", 48}};
  ir_workload_t *w = tu_load("matmul", ovr, 3);
  char *j[6];
  for (int seed = 0; seed < 6; seed++) {
    sch_t *a = generic_schedule(w->func, (uint64_t)seed + 1), *b = generic_schedule(w->func, (uint64_t)seed + 1);
    j[seed] = sch_trace_to_json(sch_get_trace(a));
    char *jb = sch_trace_to_json(sch_get_trace(b));
    ck_assert_str_eq(j[seed], jb);
    char *pa = tu_ir_text(sch_func(a)), *pb = tu_ir_text(sch_func(b));
    ck_assert_str_eq(pa, pb);
    free(jb), free(pa), free(pb);
    sch_free(a), sch_free(b);
  }
  int distinct = 0;
  for (int i = 0; i < 6; i++) {
    bool seen = false;
    for (int k = 0; k < i; k++) seen |= strcmp(j[i], j[k]) == 0;
    distinct += !seen;
  }
  ck_assert_int_ge(distinct, 4);
  for (int i = 0; i < 6; i++) free(j[i]);
  ir_workload_free(w);
}
END_TEST

/* ---- random schedules ----------------------------------------------------- */

enum {
  P_SPLIT, P_FUSE, P_REORDER, P_PARALLEL, P_VECTORIZE, P_UNROLL, P_BIND, P_ANNOTATE, P_CACHE_READ,
  P_CACHE_WRITE, P_INLINE, P_REVERSE_INLINE, P_REINDEX, P_FUSE_BLOCK_ITERS, P_PAD_EINSUM, P_DECOMPOSE, P_RFACTOR,
  P__COUNT
};
static const char *const prim_names[P__COUNT] = {
    "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind", "annotate", "cache_read+compute_at",
    "cache_write+reverse_compute_at", "compute_inline", "reverse_compute_inline", "reindex", "fuse_block_iters",
    "pad_einsum", "decompose_reduction", "rfactor"};

typedef struct prim_stats {
  int tried[P__COUNT], ok[P__COUNT];
} prim_stats_t;

static int pick(tn_rng_t *r, int n) { return n > 0 ? (int)tn_rng_below(r, (uint64_t)n) : 0; }

/* The loop-level primitives on a block's loops. */
static int random_loop_prim(sch_t *s, tn_rng_t *r, int prim, sch_rv_t blk, const sch_rv_t *loops, int nl,
                            tn_err_t *err) {
  static const char *const threads[] = {"blockIdx.x", "threadIdx.x", "vthread.x", "threadIdx.y"};
  int a = pick(r, nl), b = pick(r, nl);
  sch_rv_t out[4];
  switch (prim) {
  case P_SPLIT: {
    int n = 2 + pick(r, 2);
    sch_rv_t v[3];
    sch_arg_t f[3];
    int rc = sch_sample_perfect_tile(s, loops[a], n, pick(r, 2) ? 0 : 4, v, err);
    if (rc < 0) return rc;
    for (int i = 0; i < n; i++) f[i] = sch_arg_rv(v[i]);
    return sch_split(s, loops[a], f, n, out, err);
  }
  case P_FUSE: return nl < 2 ? TN_EINVAL : sch_fuse(s, loops + TN_MIN(a, nl - 2), 2, out, err);
  case P_REORDER: {
    sch_rv_t two[2] = {loops[TN_MAX(a, b)], loops[TN_MIN(a, b)]};
    return sch_reorder(s, two, 2, err);
  }
  case P_PARALLEL: return sch_parallel(s, loops[a], err);
  case P_VECTORIZE: return sch_vectorize(s, loops[a], err);
  case P_UNROLL: return sch_unroll(s, loops[a], err);
  case P_BIND: return sch_bind(s, loops[a], threads[pick(r, 4)], err);
  case P_DECOMPOSE: return sch_decompose_reduction(s, blk, loops[a], out, err);
  case P_RFACTOR: return sch_rfactor(s, loops[a], 0, out, err);
  default: return TN_EINVAL;
  }
}

/* The block-level primitives. */
static int random_block_prim(sch_t *s, tn_rng_t *r, int prim, sch_rv_t blk, const sch_rv_t *loops, int nl,
                             tn_err_t *err) {
  static const char *const scopes[] = {"global", "shared", "local"};
  sch_rv_t cache, loc, v;
  int rc;
  switch (prim) {
  case P_ANNOTATE: {
    int64_t cands[3] = {0, 16, 64};
    double probs[3] = {0.25, 0.25, 0.5};
    if ((rc = sch_sample_categorical(s, cands, probs, 3, &v, err)) < 0) return rc;
    return sch_annotate(s, blk, "pragma_auto_unroll_max_step", sch_arg_rv(v), err);
  }
  case P_CACHE_READ:
    if ((rc = sch_cache_read(s, blk, pick(r, 2), scopes[pick(r, 3)], &cache, err)) < 0 ||
        (rc = sch_sample_compute_location(s, cache, &loc, err)) < 0)
      return rc;
    return sch_compute_at(s, cache, loc, pick(r, 2), err);
  case P_CACHE_WRITE:
    if ((rc = sch_cache_write(s, blk, 0, scopes[pick(r, 3)], &cache, err)) < 0) return rc;
    return nl ? sch_reverse_compute_at(s, cache, loops[pick(r, nl)], pick(r, 2), err) : TN_OK;
  case P_INLINE: return sch_compute_inline(s, blk, err);
  case P_REVERSE_INLINE: return sch_reverse_compute_inline(s, blk, err);
  case P_REINDEX: return sch_reindex(s, blk, pick(r, 2), pick(r, 3) == 0, &cache, err);
  case P_FUSE_BLOCK_ITERS:
    return sch_fuse_block_iters(s, blk, pick(r, sch_rv_stmt(s, blk)->u.block.niters), 2 + pick(r, 2), err);
  case P_PAD_EINSUM: {
    int64_t pad[SCH_MAX_RVS_OUT];
    sch_rv_t copies[SCH_MAX_RVS_OUT];
    int niters = sch_rv_stmt(s, blk)->u.block.niters, n = 0;
    for (int i = 0; i < niters && i < SCH_MAX_RVS_OUT; i++) pad[i] = 1 + pick(r, 8);
    return niters ? sch_pad_einsum(s, blk, pad, TN_MIN(niters, SCH_MAX_RVS_OUT), copies, &n, err) : TN_EINVAL;
  }
  default: return TN_EINVAL;
  }
}

/* One random primitive on a random block; an error must leave the IR as it was. */
static void random_step(sch_t *s, tn_rng_t *r, prim_stats_t *st) {
  names_t nm = block_names(sch_func(s));
  tn_err_t err = {0};
  sch_rv_t blk, loops[64];
  int nl = 0;
  if (!nm.n) return;
  ck_assert_msg(sch_get_block(s, nm.v[pick(r, nm.n)], &blk, &err) == 0, "%s", err.msg);
  ck_assert_msg(sch_get_loops(s, blk, loops, &nl, &err) == 0, "%s", err.msg);
  int prim = pick(r, P__COUNT);
  char *before = tu_ir_text(sch_func(s));
  int rc = prim >= P_ANNOTATE && prim <= P_PAD_EINSUM ? random_block_prim(s, r, prim, blk, loops, nl, &err)
           : nl ? random_loop_prim(s, r, prim, blk, loops, nl, &err)
                : TN_EINVAL;
  st->tried[prim]++;
  if (rc == 0) {
    st->ok[prim]++;
  } else if (prim != P_CACHE_READ && prim != P_CACHE_WRITE) {
    /* (two-step primitives may have applied their first step) */
    char *after = tu_ir_text(sch_func(s));
    ck_assert_msg(strcmp(before, after) == 0, "%s failed (%s) but changed the IR", prim_names[prim], err.msg);
    free(after);
  }
  free(before);
}

static void random_schedules(const char *name, const ir_param_set_t *ovr, int novr, prim_stats_t *st) {
  ir_workload_t *w = tu_load(name, ovr, novr);
  tn_rng_t r;
  tn_rng_seed(&r, tn_fnv1a_str(TN_FNV_INIT, name));
  for (int k = 0; k < 100; k++) {
    sch_t *s = sch_create(w->func, (uint64_t)k);
    for (int steps = 3 + pick(&r, 8); steps > 0; steps--) random_step(s, &r, st);
    double e = tu_output_error(w->func, sch_func(s), 11);
    if (e > 1e-12) {
      char *j = sch_trace_to_json(sch_get_trace(s)), *p = tu_ir_text(sch_func(s));
      ck_abort_msg("%s schedule %d: rel. L2 error %g\n--- trace:\n%s\n--- IR:\n%s", name, k, e, j, p);
    }
    free(assert_round_trip(w->func, s));
    sch_free(s);
  }
  ir_workload_free(w);
}

START_TEST(t_random_schedules) {
  static const ir_param_set_t mm[] = {{"M", 8}, {"N", 12}, {"K", 6}}, ws[] = {{"N", 24}},
                              sm[] = {{"M", 3}, {"N", 16}}, rs[] = {{"M", 4}, {"N", 24}},
                              cv[] = {{"N", 1}, {"C", 3}, {"H", 6}, {"W", 6}, {"F", 4}},
                              nhwc[] = {{"N", 2}, {"C", 3}, {"H", 4}, {"W", 4}, {"F", 4}};
  prim_stats_t st = {{0}, {0}};
  random_schedules("matmul", mm, 3, &st);
  random_schedules("window_sum", ws, 1, &st);
  random_schedules("softmax", sm, 2, &st);
  random_schedules("row_sum", rs, 2, &st);
  random_schedules("conv2d", cv, 5, &st);
  random_schedules("conv2d_nhwc", nhwc, 5, &st);
  tn_buf_t b;
  tn_buf_init(&b);
  for (int p = 0; p < P__COUNT; p++) tn_buf_printf(&b, " %s %d/%d", prim_names[p], st.ok[p], st.tried[p]);
  fprintf(stderr, "random schedules (ok/tried):%s\n", tn_buf_str(&b));
  tn_buf_free(&b);
  ck_assert_int_gt(st.ok[P_SPLIT], 50);
  ck_assert_int_gt(st.ok[P_REINDEX], 10);
  ck_assert_int_gt(st.ok[P_PAD_EINSUM], 5);
  ck_assert_int_gt(st.ok[P_FUSE_BLOCK_ITERS], 5);
}
END_TEST

static Suite *make(void) {
  Suite *s = suite_create("trace");
  TU_TCASE(s, "json", 0, t_json_exact_text, t_json_empty_trace, t_json_parse_fields, t_json_numbers_exact,
           t_json_strings, t_json_dangling_handle, t_json_malformed, t_json_limits);
  TU_TCASE(s, "replay", 0, t_replay_identical, t_replay_deterministic, t_replay_samples_without_decisions,
           t_replay_override, t_replay_remove_postproc, t_replay_stale_decision, t_replay_errors,
           t_replay_reindex, t_replay_pad_einsum, t_every_workload_round_trip, t_seed_determinism);
  TU_TCASE(s, "random", 240, t_random_schedules);
  return s;
}

TN_TEST_MAIN(make)
