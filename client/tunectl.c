/* tunectl.c — the command-line client.  Offline commands (show, check, eval,
 * trace-check, emit, run) work on workload files directly; daemon commands
 * arrive with the service. */
#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/tunectl_daemon.h"
#include "client/tunectl_tune.h"
#include "codegen/codegen.h"
#include "common/target.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "sampler/sampler.h"
#include "schedule/schedule.h"
#include "tuned_config.h"

#define EVAL_MAX_BYTES ((size_t)8 << 30) /* doubles the reference evaluator may allocate */

/* Options shared by the offline commands. */
typedef struct opts {
  const char *file;
  const char *trace; /* --trace T.json, or trace-check's second argument */
  ir_param_set_t sets[64];
  int nsets;
  uint64_t seed;
  bool json;
  const char *target; /* --target NAME (run, emit) */
  const char *emit;   /* --emit KIND (emit) */
  double repeat_ms;   /* --repeat-ms N (run): minimum total timed milliseconds */
  bool no_flush;      /* --no-flush (run, tune): keep L2 between timed repeats on GPUs */
  const char *trials, *db, *strategy, *model; /* tune: --trials, --db, --strategy, --model */
  tn_arena_t *arena;
} opts_t;

typedef struct command {
  const char *name;
  const char *args;
  const char *summary;
  const char *help;
  int (*run)(opts_t *o);
} command_t;

static int cmd_show(opts_t *o);
static int cmd_check(opts_t *o);
static int cmd_eval(opts_t *o);
static int cmd_trace_check(opts_t *o);
static int cmd_emit(opts_t *o);
static int cmd_run(opts_t *o);
static int cmd_space(opts_t *o);
static int cmd_tune(opts_t *o);

static const command_t commands[] = {
    {"show", "FILE [--set NAME=VALUE ...] [--trace T.json]", "print the tensor IR of a workload",
     "Parses the workload and prints its tensor IR in TVMScript form, as\n"
     "`sch.mod.show()` would.  With --trace, the schedule trace is replayed on\n"
     "the workload first and the scheduled IR is printed.\n",
     cmd_show},
    {"check", "FILE [--set NAME=VALUE ...] [--json]",
     "validate a workload; print its hash, FLOPs and bytes",
     "Parses and validates the workload, then prints its structural hash (the key\n"
     "under which tuning records are stored), parameters, tensors, floating-point\n"
     "operations per run and the bytes every run must move (all inputs and outputs\n"
     "once).\n",
     cmd_check},
    {"eval", "FILE [--set NAME=VALUE ...] [--seed S] [--json]",
     "run the reference evaluator and print checksums",
     "Fills the inputs with deterministic values from the seed (default 1), runs\n"
     "the reference evaluator in double precision and prints, per output, the sum,\n"
     "the L2 norm and a checksum of the values rounded to the output's dtype.  The\n"
     "same file, parameters and seed give the same numbers on every machine.\n",
     cmd_eval},
    {"trace-check", "FILE T.json [--set NAME=VALUE ...]", "validate a schedule trace against a workload",
     "Parses the trace and replays it on the workload.  On success prints the\n"
     "number of instructions and the trace's sampling decisions; on failure\n"
     "says which instruction failed and why, and exits 1.\n",
     cmd_trace_check},
    {"emit", "FILE --target T --emit cuda|ptx|opencl|c|launch [--trace T.json] [--set NAME=VALUE ...]",
     "print the generated kernel source or launch configuration",
     "Replays the trace (if any) as the tuner does (up to its EnterPostproc, then\n"
     "the target's postprocessors) and lowers the workload to the language of\n"
     "--emit: `cuda` prints CUDA C, `opencl` OpenCL C, `c` C with OpenMP for the\n"
     "CPU, `ptx` compiles the CUDA C with NVRTC for the target's architecture and\n"
     "prints the PTX, `launch` prints the launch configuration (kernels, grid,\n"
     "block, shared memory, parameters) as JSON for the target's language.\n"
     "GPU targets need a trace that binds every loop nest to threads.\n",
     cmd_emit},
    {"run", "FILE --target T [--trace T.json] [--set NAME=VALUE ...] [--seed S] [--repeat-ms N] [--no-flush] [--json]",
     "build, run, verify and time a scheduled workload",
     "Replays the trace (if any) as the tuner does (up to its EnterPostproc, then\n"
     "the target's postprocessors), lowers the workload for the target (cpu: C,\n"
     "opencl: OpenCL C on the first OpenCL device, nvidia/...: CUDA C through\n"
     "NVRTC and the CUDA driver), builds it, runs it in a separate worker\n"
     "process, compares the output with the reference evaluator's and times\n"
     "it: one warm-up, then repeats until N milliseconds in total (default 100);\n"
     "on GPUs the L2 cache is flushed before every timed repeat unless --no-flush.\n"
     "Prints the status, median time, GFLOP/s, GB/s, the verification result\n"
     "and what the compiler reported.  Exits 1 unless the status is ok.\n",
     cmd_run},
    {"space", "FILE --target T [--set NAME=VALUE ...]", "print the design spaces of a workload as traces",
     "Applies the target's schedule rules (multi-level tiling, inlining, rfactor or\n"
     "cross-thread reduction, parallel/vectorize/unroll, auto-bind, compute\n"
     "location) to every block and prints each resulting design space: a line\n"
     "`# space K of N (rules: ...)` naming the rules that shaped it, then its\n"
     "trace as JSON, without decisions (every replay samples them afresh).\n",
     cmd_space},
    {"tune",
     "FILE --target T --trials N [--seed S] [--db PATH] [--strategy evolutionary|replay] [--model xgb|random] "
     "[--no-flush] [--set NAME=VALUE ...] [--json]",
     "tune a workload in this process (no daemon)",
     "Searches the target's design spaces for the fastest verified kernel: an\n"
     "evolutionary search ranked by the cost model (XGBoost, or random), or random\n"
     "replays of the design spaces (--strategy replay).  Every candidate is built,\n"
     "run in a worker process, verified and timed (on GPUs with the L2 cache\n"
     "flushed before every timed repeat unless --no-flush; a candidate whose\n"
     "checked run is over 10x the fastest so far is timed by that run alone, and\n"
     "one still running at 100x the fastest (and 2 s) is stopped as a timeout).\n"
     "--seed seeds the search (the same seed proposes the same first candidates).\n"
     "With --db, records go to that SQLite database as each batch completes, and\n"
     "traces recorded there for the workload and target are never measured again;\n"
     "without it nothing is kept after the run (dedup within the run only).\n"
     "Progress goes to stderr (a live line on a terminal, one line per batch\n"
     "otherwise).  Ctrl-C stops after the current candidate and still prints the\n"
     "summary (a second Ctrl-C quits at once).  The summary counts trials by\n"
     "status and compares the best kernel with the unscheduled program measured in\n"
     "the same run, then prints the best trace.  Exits 0 when a verified kernel was\n"
     "found, 130 after Ctrl-C.\n",
     cmd_tune},
};

static const command_t *find_command(const char *name) {
  for (size_t i = 0; i < TN_ARRAY_LEN(commands); i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: tunectl COMMAND [ARGS]\n"
          "\n"
          "tunectl drives tuned, the kernel auto-tuner.  Commands:\n\n");
  for (size_t i = 0; i < TN_ARRAY_LEN(commands); i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  tcd_usage(out);
  fprintf(out,
          "\n"
          "Run `tunectl COMMAND --help` for a command's options.\n"
          "  --version    print the version and the backends this build has\n");
}

/* --target's help: the target files of the config directory, listed. */
static void target_help(FILE *out) {
  char dir[PATH_MAX], **names = NULL;
  int n = 0;
  tn_err_t err = {0};
  fprintf(out, "  --target T        a target file's name (\"opencl\" = opencl/pocl-cpu)");
  if (tn_config_dir(dir, sizeof dir, &err) < 0 || tn_target_names(dir, &names, &n, &err) < 0) {
    fprintf(out, ": %s\n", err.msg);
    return;
  }
  fprintf(out, "; in %s:\n                   ", dir);
  for (int i = 0, col = 19; i < n; i++) {
    int w = (int)strlen(names[i]) + (i + 1 < n);
    if (col + w + 1 > 100) fprintf(out, "\n                   "), col = 19;
    col += fprintf(out, " %s%s", names[i], i + 1 < n ? "," : "");
  }
  fprintf(out, "\n");
  tn_target_names_free(names, n);
}

static void command_help(const command_t *c, FILE *out) {
  fprintf(out, "usage: tunectl %s %s\n\n%s", c->name, c->args, c->help);
  fprintf(out,
          "\noptions:\n"
          "  --set NAME=VALUE  override a workload parameter (repeatable)\n");
  if (strstr(c->args, "--seed")) fprintf(out, "  --seed S          input data seed (default 1)\n");
  if (strstr(c->args, "--trace")) fprintf(out, "  --trace T.json    replay this schedule trace first\n");
  if (strstr(c->args, "--json")) fprintf(out, "  --json            print JSON instead of text\n");
  if (strstr(c->args, "--target")) target_help(out);
  if (strstr(c->args, "--emit")) fprintf(out, "  --emit KIND       cuda, ptx, opencl, c or launch\n");
  if (strstr(c->args, "--repeat-ms"))
    fprintf(out, "  --repeat-ms N     time repeats until N ms in total (default 100)\n");
  if (strstr(c->args, "--no-flush"))
    fprintf(out, "  --no-flush        GPUs: do not flush the L2 cache between timed repeats\n");
  if (strstr(c->args, "--trials"))
    fprintf(out, "  --trials N        candidates to measure\n"
                 "  --db PATH         tuning database (SQLite) to record into and dedup against\n"
                 "  --strategy S      evolutionary (default) or replay (random replays)\n"
                 "  --model M         cost model: xgb (default) or random\n");
  fprintf(out, "  -h, --help        show this help\n");
}

/* Parses the command's arguments into o; returns 0, 1 for --help, or -1. */
static int parse_args(const command_t *c, int argc, char **argv, opts_t *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return 1;
    static const char *const valued[] = {"--set", "--seed", "--trace", "--target", "--emit", "--repeat-ms",
                                         "--trials", "--db", "--strategy", "--model"};
    for (size_t k = 0; k < TN_ARRAY_LEN(valued) && !val; k++) {
      size_t n = strlen(valued[k]);
      if (strcmp(a, valued[k]) == 0) {
        if (i + 1 >= argc) {
          fprintf(stderr, "tunectl %s: %s needs a value\n", c->name, a);
          return -1;
        }
        a = valued[k], val = argv[++i];
      } else if (strncmp(a, valued[k], n) == 0 && a[n] == '=') {
        a = valued[k], val = argv[i] + n + 1;
      }
    }
    if (val && strcmp(a, "--set") == 0) {
      tn_err_t err = {0};
      if (o->nsets >= (int)TN_ARRAY_LEN(o->sets)) {
        fprintf(stderr, "tunectl %s: too many --set options (at most %zu)\n", c->name,
                TN_ARRAY_LEN(o->sets));
        return -1;
      }
      if (ir_param_set_parse(val, o->arena, &o->sets[o->nsets], &err) < 0) {
        fprintf(stderr, "tunectl %s: --set %s: %s\n", c->name, val, err.msg);
        return -1;
      }
      o->nsets++;
    } else if (val && strcmp(a, "--seed") == 0 && strstr(c->args, "--seed")) {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(val, &end, 10);
      if (errno || *end || !*val || val[0] == '-') {
        fprintf(stderr, "tunectl %s: --seed wants a non-negative integer, got '%s'\n", c->name, val);
        return -1;
      }
      o->seed = s;
    } else if (val && strcmp(a, "--trace") == 0 && strstr(c->args, "--trace")) {
      o->trace = val;
    } else if (val && strcmp(a, "--target") == 0 && strstr(c->args, "--target")) {
      o->target = val;
    } else if (val && strcmp(a, "--emit") == 0 && strstr(c->args, "--emit")) {
      o->emit = val;
    } else if (val && strcmp(a, "--repeat-ms") == 0 && strstr(c->args, "--repeat-ms")) {
      char *end;
      o->repeat_ms = strtod(val, &end);
      if (*end || !*val || !(o->repeat_ms > 0) || o->repeat_ms > 1e6) {
        fprintf(stderr, "tunectl %s: --repeat-ms wants a positive number of milliseconds, got '%s'\n", c->name, val);
        return -1;
      }
    } else if (val && strstr(c->args, "--trials") &&
               (!strcmp(a, "--trials") || !strcmp(a, "--db") || !strcmp(a, "--strategy") || !strcmp(a, "--model"))) {
      *(a[2] == 't' ? &o->trials : a[2] == 'd' ? &o->db : a[2] == 's' ? &o->strategy : &o->model) = val;
    } else if (strcmp(a, "--no-flush") == 0 && strstr(c->args, "--no-flush")) {
      o->no_flush = true;
    } else if (strcmp(a, "--json") == 0 && strstr(c->args, "--json")) {
      o->json = true;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "tunectl %s: unknown option '%s' (see tunectl %s --help)\n", c->name, a, c->name);
      return -1;
    } else if (!o->file) {
      o->file = a;
    } else if (!o->trace && strstr(c->args, "T.json ")) {
      o->trace = a;
    } else {
      fprintf(stderr, "tunectl %s: unexpected argument '%s'\n", c->name, a);
      return -1;
    }
  }
  if (!o->file || (!o->trace && strstr(c->args, "T.json "))) {
    fprintf(stderr, "tunectl %s: missing %s (usage: tunectl %s %s)\n", c->name, o->file ? "T.json" : "FILE",
            c->name, c->args);
    return -1;
  }
  const char *need = strstr(c->args, "FILE --target") && !o->target ? "--target" :
                     strstr(c->args, "--emit ") && !o->emit ? "--emit" : NULL;
  if (need) {
    fprintf(stderr, "tunectl %s: missing %s (usage: tunectl %s %s)\n", c->name, need, c->name, c->args);
    return -1;
  }
  return 0;
}

static ir_workload_t *load_workload(const char *cmd, opts_t *o) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  if (ir_workload_load(o->file, o->sets, o->nsets, &w, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", cmd, err.msg);
    return NULL;
  }
  return w;
}

static void print_shape(FILE *out, const ir_buffer_t *b) {
  fprintf(out, "%s[", ir_dtype_name(b->dtype));
  for (int d = 0; d < b->ndim; d++) fprintf(out, "%s%lld", d ? ", " : "", (long long)b->shape[d]);
  fputc(']', out);
}

static cJSON *json_shape(const ir_buffer_t *b) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < b->ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)b->shape[d]));
  return a;
}

static void print_json(cJSON *j) {
  char *s = cJSON_Print(j);
  puts(s);
  free(s);
  cJSON_Delete(j);
}

/* Reads and replays o->trace on w; prints the error and returns NULL on
 * failure.  With a target, the replay is the tuner's: up to the trace's
 * EnterPostproc, then that target's postprocessors (annotations such as
 * meta_schedule.parallel become loops, reductions are decomposed, GPU limits
 * are verified). */
static sch_t *replay_trace(const char *cmd, opts_t *o, ir_workload_t *w, const tn_target_t *post, int *ninsts) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  sch_trace_t *t = NULL;
  sch_t *s = NULL;
  if (tn_read_file(o->trace, (size_t)16 << 20, &text, &len, &err) < 0 ||
      sch_trace_from_json(text, len, &t, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s: %s\n", cmd, o->trace, err.msg);
  } else if (post ? smp_sample(w->func, post, t, o->seed, &s, NULL, &err) < 0
                  : sch_replay(w->func, t, o->seed, &s, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s does not apply to %s%s%s: %s\n", cmd, o->trace, o->file,
            post ? " on " : "", post ? post->name : "", err.msg);
  } else if (ninsts) {
    *ninsts = t->n;
  }
  free(text);
  sch_trace_free(t);
  return s;
}

static int cmd_show(opts_t *o) {
  ir_workload_t *w = load_workload("show", o);
  if (!w) return 1;
  sch_t *s = NULL;
  if (o->trace && !(s = replay_trace("show", o, w, NULL, NULL))) {
    ir_workload_free(w);
    return 1;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  ir_print_func(s ? sch_func(s) : w->func, &b);
  fputs(tn_buf_str(&b), stdout);
  tn_buf_free(&b);
  sch_free(s);
  ir_workload_free(w);
  return 0;
}

static int cmd_trace_check(opts_t *o) {
  ir_workload_t *w = load_workload("trace-check", o);
  if (!w) return 1;
  int n = 0;
  sch_t *s = replay_trace("trace-check", o, w, NULL, &n);
  if (s) {
    const sch_trace_t *t = sch_get_trace(s);
    printf("%s: ok, %d instructions replay on %s\n", o->trace, n, w->name);
    for (int i = 0; i < t->n; i++) {
      if (!t->insts[i].ndecision) continue;
      printf("  decision of instruction %d (%s):", i, sch_inst_name(t->insts[i].kind));
      for (int d = 0; d < t->insts[i].ndecision; d++) printf(" %lld", (long long)t->insts[i].decision[d]);
      printf("\n");
    }
  }
  sch_free(s);
  ir_workload_free(w);
  return s ? 0 : 1;
}

static int cmd_check(opts_t *o) {
  ir_workload_t *w = load_workload("check", o);
  if (!w) return 1;
  const ir_func_t *f = w->func;
  char hex[17];
  ir_hash_hex(ir_func_hash(f), hex);
  double flops = ir_func_flops(f), bytes = ir_func_bytes(f);
  if (o->json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "workload", w->name);
    cJSON_AddStringToObject(j, "file", o->file);
    cJSON_AddStringToObject(j, "hash", hex);
    cJSON *params = cJSON_AddObjectToObject(j, "params");
    for (int i = 0; i < w->nparams; i++)
      cJSON_AddNumberToObject(params, w->params[i].name, (double)w->params[i].value);
    cJSON *tensors = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < f->nparams; i++) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "name", f->params[i]->name);
      cJSON_AddStringToObject(t, "role", f->params[i]->role == IR_BUF_INPUT ? "input" : "output");
      cJSON_AddStringToObject(t, "dtype", ir_dtype_name(f->params[i]->dtype));
      cJSON_AddItemToObject(t, "shape", json_shape(f->params[i]));
      cJSON_AddItemToArray(tensors, t);
    }
    cJSON_AddNumberToObject(j, "flops", flops);
    cJSON_AddNumberToObject(j, "bytes", bytes);
    print_json(j);
  } else {
    printf("workload  %s (%s): ok\n", w->name, o->file);
    printf("hash      %s\n", hex);
    printf("params   ");
    for (int i = 0; i < w->nparams; i++)
      printf(" %s=%lld%s", w->params[i].name, (long long)w->params[i].value,
             w->params[i].value != w->params[i].def ? "*" : "");
    if (!w->nparams) printf(" (none)");
    printf("\n");
    for (int i = 0; i < f->nparams; i++) {
      printf("%-9s %s: ", f->params[i]->role == IR_BUF_INPUT ? "input" : "output", f->params[i]->name);
      print_shape(stdout, f->params[i]);
      printf("\n");
    }
    printf("flops     %.0f (%.3f GFLOP per run)\n", flops, flops * 1e-9);
    printf("bytes     %.0f (%.3f MB per run)\n", bytes, bytes * 1e-6);
  }
  ir_workload_free(w);
  return 0;
}

/* Checksum of an output: FNV-1a over the values rounded to the buffer's
 * dtype, so it compares like-for-like with kernels that store that dtype. */
static uint64_t output_checksum(const ir_buffer_t *b, const double *v, int64_t n) {
  uint64_t h = TN_FNV_INIT;
  for (int64_t i = 0; i < n; i++) {
    uint64_t bits;
    if (b->dtype == IR_FLOAT32 || ir_dtype_is_16bit_float(b->dtype)) {
      float x = (float)v[i];
      if (b->dtype == IR_FLOAT16) x = tn_half_to_float(tn_float_to_half(x));
      if (b->dtype == IR_BFLOAT16) x = tn_bf16_to_float(tn_float_to_bf16(x));
      uint32_t u;
      memcpy(&u, &x, 4);
      bits = u;
    } else if (b->dtype == IR_FLOAT64) {
      memcpy(&bits, &v[i], 8);
    } else {
      bits = (uint64_t)(int64_t)v[i];
    }
    h = tn_fnv1a_u64(h, bits);
  }
  return h;
}

static int cmd_eval(opts_t *o) {
  ir_workload_t *w = load_workload("eval", o);
  if (!w) return 1;
  const ir_func_t *f = w->func;
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  int rc = 1;
  double t0 = tn_now();
  if (ir_data_new(f, o->seed, EVAL_MAX_BYTES, &d, &err) < 0 || ir_eval(f, d, &err) < 0) {
    fprintf(stderr, "tunectl eval: %s: %s\n", o->file, err.msg);
    goto out;
  }
  double secs = tn_now() - t0;
  cJSON *j = o->json ? cJSON_CreateObject() : NULL;
  cJSON *outs = NULL;
  if (j) {
    cJSON_AddStringToObject(j, "workload", w->name);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "seconds", secs);
    outs = cJSON_AddArrayToObject(j, "outputs");
  } else {
    printf("evaluated %s with seed %llu in %.2f s\n", w->name, (unsigned long long)o->seed, secs);
  }
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    if (b->role != IR_BUF_OUTPUT) continue;
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < d->sizes[i]; k++) {
      sum += d->vals[i][k];
      sq += d->vals[i][k] * d->vals[i][k];
    }
    char hex[17];
    ir_hash_hex(output_checksum(b, d->vals[i], d->sizes[i]), hex);
    if (j) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "name", b->name);
      cJSON_AddStringToObject(t, "dtype", ir_dtype_name(b->dtype));
      cJSON_AddItemToObject(t, "shape", json_shape(b));
      cJSON_AddNumberToObject(t, "sum", sum);
      cJSON_AddNumberToObject(t, "l2", sqrt(sq));
      cJSON_AddStringToObject(t, "checksum", hex);
      cJSON_AddItemToArray(outs, t);
    } else {
      printf("%s ", b->name);
      print_shape(stdout, b);
      printf("  sum %.9e  l2 %.9e  checksum %s\n", sum, sqrt(sq), hex);
    }
  }
  if (j) print_json(j);
  rc = 0;
out:
  ir_data_free(d);
  ir_workload_free(w);
  return rc;
}

/* Looks the target up in the config directory ("opencl" stands for
 * opencl/pocl-cpu). */
static int lookup_target(const char *cmd, const char *name, tn_target_t *t) {
  tn_err_t err = {0};
  if (tn_target_lookup(name, NULL, t, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", cmd, err.msg);
    return -1;
  }
  return 0;
}

/* Loads the workload, replays the trace if any with t's postprocessors and
 * lowers for t's language. */
static cg_module_t *lower(const char *cmd, opts_t *o, const tn_target_t *t, ir_workload_t **wout) {
  cg_target_t lang = ms_language_of(t->kind);
  ir_workload_t *w = load_workload(cmd, o);
  if (!w) return NULL;
  sch_t *s = NULL;
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  if (!o->trace || (s = replay_trace(cmd, o, w, t, NULL))) {
    if (cg_lower(s ? sch_func(s) : w->func, lang, NULL, &m, &err) < 0)
      fprintf(stderr, "tunectl %s: cannot generate %s code for %s%s%s: %s\n", cmd, cg_target_name(lang), o->file,
              o->trace ? " with " : "", o->trace ? o->trace : "", err.msg);
  }
  sch_free(s);
  if (m && wout) *wout = w;
  else ir_workload_free(w);
  return m;
}

static int cmd_emit(opts_t *o) {
  static const char *const kinds[] = {"cuda", "ptx", "opencl", "c", "launch"};
  size_t kind = 0;
  while (kind < TN_ARRAY_LEN(kinds) && strcmp(kinds[kind], o->emit) != 0) kind++;
  if (kind == TN_ARRAY_LEN(kinds)) {
    fprintf(stderr, "tunectl emit: unknown --emit '%s' (cuda, ptx, opencl, c or launch)\n", o->emit);
    return 2;
  }
  tn_target_t t;
  if (lookup_target("emit", o->target, &t) < 0) return 1;
  cg_target_t lang = ms_language_of(t.kind);
  cg_target_t want = kind <= 1 ? CG_TARGET_CUDA : kind == 2 ? CG_TARGET_OPENCL : kind == 3 ? CG_TARGET_C : lang;
  if (want != lang) {
    fprintf(stderr, "tunectl emit: target %s runs %s code; --emit %s needs a %s target\n", t.name,
            cg_target_name(lang), o->emit,
            want == CG_TARGET_CUDA ? "CUDA (nvidia/...)" : want == CG_TARGET_OPENCL ? "OpenCL" : "CPU");
    return 1;
  }
  cg_module_t *m = lower("emit", o, &t, NULL);
  if (!m) return 1;
  int rc = 0;
  if (kind == 1) {
    ms_cuda_output_t out;
    tn_err_t err = {0};
    if (ms_cuda_compile(m->source, t.arch, &out, &err) < 0) {
      fprintf(stderr, "tunectl emit: %s\n", err.msg);
      rc = 1;
    } else {
      fputs(out.ptx, stdout);
    }
    ms_cuda_output_free(&out);
  } else if (kind == 4) {
    char *j = cg_module_launch_json(m);
    puts(j);
    free(j);
  } else {
    fputs(m->source, stdout);
  }
  cg_module_free(m);
  return rc;
}

/* The kernel that ran against the target's peaks (false: no peaks, or it
 * did not run). */
static bool run_roofline(const ms_result_t *r, const ir_workload_t *w, const tn_target_t *t, tn_roofline_t *rl) {
  return r->status == MS_OK && tn_target_roofline(t, ir_func_flops(w->func), ir_func_bytes(w->func), r->median_secs, rl);
}

static void print_run_text(const ms_result_t *r, const ir_workload_t *w, const tn_target_t *t, const opts_t *o) {
  printf("workload  %s (%s)%s%s\n", w->name, o->file, o->trace ? ", trace " : "", o->trace ? o->trace : "");
  printf("target    %s (%s)\n", t->name, t->device);
  printf("status    %s\n", ms_status_name(r->status));
  if (r->nrepeats > 0) {
    double lo = r->run_secs[0], hi = r->run_secs[0];
    for (int i = 1; i < r->nrepeats; i++) lo = fmin(lo, r->run_secs[i]), hi = fmax(hi, r->run_secs[i]);
    printf("median    %.6f ms over %d repeats (min %.6f ms, max %.6f ms)\n", r->median_secs * 1e3, r->nrepeats,
           lo * 1e3, hi * 1e3);
    printf("speed     %.3f GFLOP/s, %.3f GB/s\n", r->gflops, r->gbps);
    tn_roofline_t rl;
    char line[256];
    if (run_roofline(r, w, t, &rl)) {
      tn_roofline_text(&rl, line, sizeof line);
      printf("roofline  %s\n", line);
    }
  }
  if (r->verify_error >= 0)
    printf("verified  %s: relative L2 error %.3g against the reference evaluator\n",
           r->status == MS_WRONG_RESULT ? "WRONG" : "ok", r->verify_error);
  else
    printf("verified  no (the candidate did not run)\n");
  printf("build     %s, arch %s, %.3f s", r->build.compiler[0] ? r->build.compiler : "?",
         r->build.arch[0] ? r->build.arch : "-", r->build.build_secs);
  if (r->build.registers >= 0) printf(", %d registers", r->build.registers);
  if (r->build.shared_bytes >= 0) printf(", %lld B shared", (long long)r->build.shared_bytes);
  if (r->build.spill_bytes >= 0) printf(", %lld B spilled", (long long)r->build.spill_bytes);
  printf("\n");
  if (r->error[0]) printf("error     %s\n", r->error);
}

static int cmd_run(opts_t *o) {
  tn_target_t t;
  if (lookup_target("run", o->target, &t) < 0) return 1;
  ir_workload_t *w = NULL;
  cg_module_t *m = lower("run", o, &t, &w);
  if (!m) return 1;
  ms_options_t mo = {.seed = o->seed};
  mo.run.min_secs = o->repeat_ms > 0 ? o->repeat_ms * 1e-3 : 0;
  mo.run.flush_l2 = ms_flush_by_default(t.kind) && !o->no_flush;
  ms_result_t r;
  tn_err_t err = {0};
  int rc = 1;
  if (ms_measure(w->func, &t, &m, 1, &mo, &r, &err) < 0) {
    fprintf(stderr, "tunectl run: %s\n", err.msg);
  } else {
    if (o->json) {
      char *text = ms_result_to_json(&r);
      cJSON *j = cJSON_Parse(text);
      free(text);
      cJSON_AddStringToObject(j, "workload", w->name);
      cJSON_AddStringToObject(j, "target", t.name);
      tn_roofline_t rl;
      if (run_roofline(&r, w, &t, &rl)) tn_roofline_add_json(&rl, cJSON_AddObjectToObject(j, "roofline"));
      print_json(j);
    } else {
      print_run_text(&r, w, &t, o);
    }
    rc = r.status == MS_OK ? 0 : 1;
    ms_result_clear(&r);
  }
  cg_module_free(m);
  ir_workload_free(w);
  return rc;
}

/* Prints the design spaces of the workload for the target, as traces. */
static int cmd_space(opts_t *o) {
  tn_target_t t;
  if (lookup_target("space", o->target, &t) < 0) return 1;
  ir_workload_t *w = load_workload("space", o);
  if (!w) return 1;
  smp_space_t sp;
  tn_err_t err = {0};
  if (smp_generate(w->func, &t, 1, &sp, &err) < 0) {
    fprintf(stderr, "tunectl space: %s\n", err.msg);
    ir_workload_free(w);
    return 1;
  }
  for (int i = 0; i < sp.n; i++) {
    char *json = sch_trace_to_json(sp.traces[i]);
    printf("# space %d of %d (rules: %s)\n%s\n", i + 1, sp.n, sp.descs[i], json);
    free(json);
  }
  smp_space_free(&sp);
  ir_workload_free(w);
  return 0;
}

static int cmd_tune(opts_t *o) {
  tn_target_t t;
  if (lookup_target("tune", o->target, &t) < 0) return 1;
  ir_workload_t *w = load_workload("tune", o);
  if (!w) return 1;
  tct_args_t a = {.workload = w, .target = &t, .trials = o->trials, .db = o->db, .strategy = o->strategy,
                  .model = o->model, .seed = o->seed, .json = o->json, .no_flush = o->no_flush};
  int rc = tct_tune(&a);
  ir_workload_free(w);
  return rc;
}

int main(int argc, char **argv) {
  if (tcd_global_options(&argc, &argv) < 0) return 2;
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    if (argc >= 3 && strcmp(argv[1], "help") == 0 && find_command(argv[2])) {
      command_help(find_command(argv[2]), stdout);
      return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "help") == 0 && tcd_find(argv[2])) {
      tcd_help(tcd_find(argv[2]), stdout);
      return 0;
    }
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("tunectl %s (built with CUDA/NVRTC: %s, OpenCL: %s, XGBoost: %s)\n", TUNED_VERSION,
           TUNED_HAVE_CUDA ? "yes" : "no", TUNED_HAVE_OPENCL ? "yes" : "no",
           TUNED_HAVE_XGBOOST ? "yes" : "no");
    return 0;
  }
  if (tcd_find(argv[1])) return tcd_main(tcd_find(argv[1]), argc - 2, argv + 2);
  const command_t *c = find_command(argv[1]);
  if (!c) {
    fprintf(stderr, "tunectl: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
  }
  opts_t o = {.seed = 1, .arena = tn_arena_new()};
  int rc = parse_args(c, argc - 2, argv + 2, &o);
  if (rc == 1) {
    command_help(c, stdout);
    rc = 0;
  } else if (rc < 0) {
    rc = 2;
  } else {
    rc = c->run(&o);
  }
  tn_arena_free(o.arena);
  return rc;
}
