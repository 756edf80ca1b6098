/* tunectl.c — the command-line client's front: the one table of commands
 * (offline ones that work on workload files in this process, daemon ones that
 * talk to tuned), the options they accept, getopt_long parsing from that
 * table, the help texts it prints, and main(). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/tunectl.h"
#include "common/target.h"
#include "tuned_config.h"

/* ---- options ----------------------------------------------------------------- */

/* Every option of every command; a command names the ones it takes as a
 * mask of OPT() bits.  Options that mean different things to different
 * commands (--seed, --target, --emit, --json) have one entry per meaning. */
enum {
  O_SET, O_TARGET, O_DAEMON_TARGET, O_TRACE, O_EMIT, O_KERNEL_EMIT, O_TRIALS, O_SECONDS, O_DATA_SEED,
  O_SEARCH_SEED, O_REPEAT_MS, O_NO_FLUSH, O_DB, O_STRATEGY, O_MODEL, O_WAIT, O_STATE, O_STATUS, O_LIMIT, O_K,
  O_OUT, O_BASELINE, O_MAX_REGRESSION, O_COMPARE, O_DAEMON, O_JSON, O_JSON_OUT, O_SOCKET, O_REMEASURE,
  O_NO_REMEASURE, O_NO_BASELINE, O_CC, O_PROFILE_DB, O_ALLOW_TF32, O_TOP, O_FALLBACK, O_PLOT_OUT, O_REPORT,
  O_ROOFLINE, O_PEAKS, O_TVMSCRIPT, O_KERNEL_DB, O_JUNIT, O_BENCH_DB, O_PING_WAIT, O_SAMPLES, O_COUNT
};
#define OPT(name) (UINT64_C(1) << O_##name)
_Static_assert(O_COUNT <= 64, "a command's options are a 64-bit mask");

/* How an option's value is read. */
typedef enum opt_kind {
  K_FLAG, /* no value: sets a bool */
  K_TEXT, /* any text */
  K_INT,  /* an integer in [min, max] (max 0: no bound) */
  K_NUM,  /* a number > 0 and <= max (max 0: no bound) */
  K_SET,  /* NAME=VALUE, appended to the --set list */
} opt_kind_t;

typedef struct opt_spec {
  const char *name; /* long name, or NULL for a short-only option */
  char letter;      /* short name, or 0 */
  const char *arg;  /* the value's name in help (NULL for a flag) */
  opt_kind_t kind;
  size_t field; /* where the value goes in tc_args_t */
  int64_t min, max;
  const char *help; /* lines after the first are indented under it */
} opt_spec_t;

#define F(field) offsetof(tc_args_t, field)

static const opt_spec_t options[O_COUNT] = {
    [O_SET] = {"set", 0, "NAME=VALUE", K_SET, F(sets), 0, 0, "override a workload parameter (repeatable)"},
    [O_TARGET] = {"target", 0, "T", K_TEXT, F(target), 0, 0,
                  "a target file's name (the list: target_help)"},
    [O_DAEMON_TARGET] = {"target", 0, "T", K_TEXT, F(target), 0, 0, "target name (default: the daemon's)"},
    [O_TRACE] = {"trace", 0, "T.json", K_TEXT, F(trace), 0, 0, "replay this schedule trace first"},
    [O_EMIT] = {"emit", 0, "KIND", K_TEXT, F(emit), 0, 0, "cuda, ptx, sass, opencl, c or launch"},
    [O_KERNEL_EMIT] = {"emit", 0, "KIND", K_TEXT, F(emit), 0, 0, "cuda, ptx, cubin, header, json or source"},
    [O_TRIALS] = {"trials", 0, "N", K_INT, F(trials), 1, 1000000, "candidates to measure"},
    [O_SECONDS] = {"seconds", 0, "S", K_NUM, F(seconds), 0, 0, "wall-time budget in seconds (default: none)"},
    [O_DATA_SEED] = {"seed", 0, "S", K_INT, F(seed), 0, 0, "input data seed (default 1)"},
    [O_SEARCH_SEED] = {"seed", 0, "S", K_INT, F(seed), 0, 0,
                       "search seed (default 1; the same seed proposes the same first\ncandidates)"},
    [O_REPEAT_MS] = {"repeat-ms", 0, "N", K_NUM, F(repeat_ms), 0, 1000000,
                     "time repeats until they add up to N ms (default 100, at most\n"
                     "1000000); at least 3 and at most 1000 repeats, after one\n"
                     "untimed warm-up run"},
    [O_CC] = {"cc", 0, "C", K_TEXT, F(cc), 0, 0,
              "cpu and cuda-host builds: gcc, clang or auto (the system's cc / c++);\n"
              "default: the target file's \"cc\" ($TUNED_CC / $TUNED_CXX, when set,\n"
              "name any other compiler command instead)"},
    [O_ALLOW_TF32] = {"allow-tf32", 0, NULL, K_FLAG, F(allow_tf32), 0, 0,
                      "CUDA: float32 matmuls may run on TF32 tensor cores (off by\n"
                      "default, as in PyTorch): the target becomes T+tf32, whose records\n"
                      "are kept apart and whose float32 outputs are checked at 2e-3"},
    [O_FALLBACK] = {"fallback", 0, "HOW", K_TEXT, F(fallback), 0, 0,
                    "none (default), or nearest: without a record for this shape, the\n"
                    "best record of the nearest shape of the same workload text,\n"
                    "replayed, built, verified and timed on this shape (a fallback)"},
    [O_NO_FLUSH] = {"no-flush", 0, NULL, K_FLAG, F(no_flush), 0, 0,
                    "GPUs: do not flush the L2 cache between timed repeats"},
    [O_DB] = {"db", 0, "PATH", K_TEXT, F(db), 0, 0, "tuning database (SQLite) to record into and dedup against"},
    [O_PROFILE_DB] = {"db", 0, "PATH", K_TEXT, F(db), 0, 0, "the tuning database (SQLite) RECORD_ID is in"},
    [O_PING_WAIT] = {"wait", 0, NULL, K_FLAG, F(wait), 0, 0,
                      "retry until the daemon answers, for at most --seconds S\n"
                      "(default 30): for scripts that have just started it"},
    [O_JUNIT] = {"junit", 0, "FILE", K_TEXT, F(junit), 0, 0,
                 "also write the outcome as JUnit XML (a testcase per workload)"},
    [O_BENCH_DB] = {"db", 0, "PATH", K_TEXT, F(db), 0, 0,
                    "in-process: keep the records in this database (their ids go\n"
                    "into the results)"},
    [O_KERNEL_DB] = {"db", 0, "PATH", K_TEXT, F(db), 0, 0,
                     "serve the kernel from this tuning database (SQLite) in this\n"
                     "process, without a daemon (target default: cpu)"},
    [O_STRATEGY] = {"strategy", 0, "S", K_TEXT, F(strategy), 0, 0, "evolutionary (default) or replay (random replays)"},
    [O_MODEL] = {"model", 0, "M", K_TEXT, F(model), 0, 0, "cost model: xgb (default) or random"},
    [O_WAIT] = {"wait", 0, NULL, K_FLAG, F(wait), 0, 0, "follow the job until it ends"},
    [O_STATE] = {"state", 0, "S", K_TEXT, F(state), 0, 0, "queued, running, done, cancelled or failed"},
    [O_STATUS] = {"status", 0, "S", K_TEXT, F(status), 0, 0,
                  "ok, build_error, run_error, timeout, wrong_result or too_slow"},
    [O_LIMIT] = {"limit", 0, "N", K_INT, F(limit), 1, 0, "at most N rows"},
    [O_SAMPLES] = {"samples", 0, "N", K_INT, F(limit), 1, 10000,
                   "print N valid sampled traces of each space (decisions set)\n"
                   "instead of the spaces"},
    [O_K] = {NULL, 'k', "K", K_INT, F(k), 1, 0, "how many records (default 1)"},
    [O_TOP] = {"top", 0, "K", K_INT, F(k), 1, 1000, "--json: list the K fastest verified candidates (default 5)"},
    [O_OUT] = {NULL, 'o', "OUT", K_TEXT, F(out), 0, 0, "write to OUT instead of stdout"},
    [O_PLOT_OUT] = {NULL, 'o', "FILE", K_TEXT, F(out), 0, 0, "the picture to write: FILE.png or FILE.svg (by its suffix)"},
    [O_REPORT] = {"report", 0, "BENCH.json", K_TEXT, F(report), 0, 0,
                  "a bench result: GFLOP/s against size (with JOB: its library\n"
                  "baselines of the job's workload drawn as lines; with --roofline:\n"
                  "the ceilings measured in it)"},
    [O_TVMSCRIPT] = {"tvmscript", 0, NULL, K_FLAG, F(tvmscript), 0, 0,
                      "exact TVMScript of TVM 0.27 (`tirx`, T.sblock) that its parser reads"},
    [O_ROOFLINE] = {"roofline", 0, NULL, K_FLAG, F(roofline), 0, 0,
                    "the best record of every workload against the target's peaks"},
    [O_PEAKS] = {"peaks", 0, "GFLOPS,GBPS", K_TEXT, F(peaks), 0, 0,
                 "--roofline: these peaks instead of the target file's"},
    [O_BASELINE] = {"baseline", 0, "BASE.json", K_TEXT, F(baseline), 0, 0, "compare with these results"},
    [O_MAX_REGRESSION] = {"max-regression", 0, "P", K_TEXT, F(max_regression), 0, 0,
                          "allowed GFLOP/s drop in percent (default 5%)"},
    [O_COMPARE] = {"compare", 0, "OUT", K_TEXT, F(compare), 0, 0,
                   "compare the results in OUT with --baseline (no tuning)"},
    [O_DAEMON] = {"daemon", 0, NULL, K_FLAG, F(daemon), 0, 0, "tune through the daemon instead of in this process"},
    [O_JSON] = {"json", 0, NULL, K_FLAG, F(json), 0, 0, "print JSON instead of text"},
    [O_JSON_OUT] = {"json", 0, "OUT", K_TEXT, F(json_out), 0, 0, "write the results to OUT"},
    [O_REMEASURE] = {"remeasure", 0, "N", K_INT, F(remeasure), 0, 64,
                     "re-measure the best N candidates at the end (default 8; 0: off)"},
    [O_NO_REMEASURE] = {"no-remeasure", 0, NULL, K_FLAG, F(no_remeasure), 0, 0,
                        "keep the first measurements: no re-measure at the end"},
    [O_NO_BASELINE] = {"no-baseline", 0, NULL, K_FLAG, F(no_baseline), 0, 0,
                       "do not measure the unscheduled program"},
    [O_SOCKET] = {"socket", 0, "PATH", K_TEXT, F(socket), 0, 0,
                  "the daemon's socket (default: $TUNED_SOCKET, else\n"
                  "$XDG_RUNTIME_DIR/tuned/tuned.sock, else /tmp/tuned-$UID/tuned.sock)"},
};

/* getopt_long's value for options[i] given by its long name (above any
 * character, so that short names keep their own). */
#define LONG_VAL(i) (256 + (i))

/* ---- the command table --------------------------------------------------------- */

typedef struct command {
  const char *name;
  const char *usage;   /* the arguments after the name, as `usage:` shows them */
  int min_pos, max_pos; /* how many positional arguments */
  uint64_t opts;       /* the options it takes (OPT bits) */
  uint64_t need;       /* the options it cannot do without */
  bool needs_daemon;   /* talks to tuned: listed apart, takes --socket */
  const char *summary; /* its line in `tunectl --help` */
  const char *help;    /* what `tunectl CMD --help` says above the options */
  int (*run)(tc_args_t *a);
} command_t;

#define WORKLOAD_HELP                                                                      \
  "FILE|HASH|NAME is a workload file (parsed here to compute its structural hash,\n"     \
  "with the --set overrides), a hash as `tunectl check` prints it (64 hex digits)\n"    \
  "or its first 32 or more as `tunectl workloads` shows them, or the name of\n"         \
  "workloads in the database: those whose shapes agree with the --set overrides\n"      \
  "(records takes all of them; the others need exactly one, and list the shapes\n"      \
  "there are otherwise).\n"

static const command_t commands[] = {
    /* offline */
    {.name = "show", .usage = "FILE [--set NAME=VALUE ...] [--trace T.json] [--tvmscript]", .min_pos = 1,
     .max_pos = 1, .opts = OPT(SET) | OPT(TRACE) | OPT(TVMSCRIPT), .summary = "print the tensor IR of a workload",
     .help = "Parses the workload and prints its tensor IR in TVMScript form, as\n"
             "`sch.mod.show()` would.  With --trace, the schedule trace is replayed on\n"
             "the workload first and the scheduled IR is printed.  With --tvmscript the\n"
             "text is exact TVMScript of TVM 0.27 (`from tvm.script import tirx as T`,\n"
             "T.sblock, @T.prim_func(s_tir=True)): tvm.script.from_source parses it, and\n"
             "`tunectl import-tvmscript` reads an unscheduled one back.\n",
     .run = tco_show},
    {.name = "import-tvmscript", .usage = "FILE.py [-o OUT.tw]", .min_pos = 1, .max_pos = 1, .opts = OPT(OUT),
     .summary = "convert a TVMScript PrimFunc into a workload (.tw)",
     .help = "Reads a TVMScript PrimFunc (as `tunectl show --tvmscript` or TVM's own\n"
             "printer writes it, alone or the one function of an @I.ir_module class) and\n"
             "prints the equivalent workload.  The subset: T.Buffer (or T.handle with\n"
             "T.match_buffer) parameters and T.alloc_buffer temps of static shape and a\n"
             "dtype of the language; nests of T.grid / range / T.serial loops, each\n"
             "around one T.block (or T.sblock) named after the buffer it writes, whose\n"
             "T.axis iterators are bound to the loops in order, spatial then reduce;\n"
             "T.init with the identity of a sum, max or min; one store of arithmetic,\n"
             "comparisons, and/or/not, T.if_then_else, T.Cast, T.max/T.min and\n"
             "T.exp/log/sqrt/tanh/abs/fabs/pow.  T.reads/T.writes and T.func_attr are\n"
             "ignored.  Anything else (schedules: split loops, T.parallel, shared\n"
             "buffers, T.where) is an error at FILE:LINE:COL.  The workload is checked\n"
             "by parsing it; `tunectl check` on it prints the same hash as on the\n"
             "workload that `show --tvmscript` printed.\n",
     .run = tco_import_tvmscript},
    {.name = "check", .usage = "FILE [--set NAME=VALUE ...] [--json]", .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(JSON), .summary = "validate a workload; print its hash, FLOPs and bytes",
     .help = "Parses and validates the workload, then prints its structural hash (the key\n"
             "under which tuning records are stored: BLAKE2b-256 of the parsed program, 64\n"
             "hex digits), parameters, tensors, floating-point operations per run and the\n"
             "bytes every run must move (all inputs and outputs once).\n",
     .run = tco_check},
    {.name = "eval", .usage = "FILE [--set NAME=VALUE ...] [--seed S] [--json]", .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(DATA_SEED) | OPT(JSON), .summary = "run the reference evaluator and print checksums",
     .help = "Fills the inputs with deterministic values from the seed (default 1), runs\n"
             "the reference evaluator in double precision and prints, per output, the sum,\n"
             "the L2 norm and a checksum of the values rounded to the output's dtype.  The\n"
             "same file, parameters and seed give the same numbers on every machine.\n",
     .run = tco_eval},
    {.name = "trace-check", .usage = "FILE T.json [--set NAME=VALUE ...]", .min_pos = 2, .max_pos = 2,
     .opts = OPT(SET), .summary = "validate a schedule trace against a workload",
     .help = "Parses the trace and replays it on the workload.  On success prints the\n"
             "number of instructions and the trace's sampling decisions; on failure\n"
             "says which instruction failed and why, and exits 1.\n",
     .run = tco_trace_check},
    {.name = "emit", .usage = "FILE --target T --emit cuda|ptx|sass|opencl|c|launch [--trace T.json] [--set NAME=VALUE ...]",
     .min_pos = 1, .max_pos = 1, .opts = OPT(SET) | OPT(TARGET) | OPT(TRACE) | OPT(EMIT),
     .need = OPT(TARGET) | OPT(EMIT), .summary = "print the generated kernel source or launch configuration",
     .help = "Replays the trace (if any) as the tuner does (up to its EnterPostproc, then\n"
             "the target's postprocessors) and lowers the workload to the language of\n"
             "--emit: `cuda` prints CUDA C, `opencl` OpenCL C, `c` C with OpenMP for the\n"
             "CPU, `ptx` compiles the CUDA C with NVRTC for the target's architecture and\n"
             "prints the PTX, `sass` compiles it to a CUBIN and prints its SASS (by\n"
             "nvdisasm, on PATH or from PyPI's nvidia-cuda-nvdisasm, which\n"
             "scripts/install-deps installs) after ptxas's register, shared-memory and\n"
             "spill report, `launch` prints the launch configuration (kernels, grid,\n"
             "block, shared memory, parameters) as JSON for the target's language.\n"
             "GPU targets need a trace that binds every loop nest to threads.\n",
     .run = tco_emit},
    {.name = "run",
     .usage = "FILE --target T [--trace T.json] [--set NAME=VALUE ...] [--seed S] [--repeat-ms N] [--no-flush] "
              "[--cc C] [--json]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(TARGET) | OPT(TRACE) | OPT(DATA_SEED) | OPT(REPEAT_MS) | OPT(NO_FLUSH) | OPT(CC) |
             OPT(JSON),
     .need = OPT(TARGET), .summary = "build, run, verify and time a scheduled workload",
     .help = "Replays the trace (if any) as the tuner does (up to its EnterPostproc, then\n"
             "the target's postprocessors), lowers the workload for the target (cpu: C,\n"
             "opencl: OpenCL C on the first OpenCL device, nvidia/...: CUDA C through\n"
             "NVRTC and the CUDA driver), builds it (cpu: with the target's compiler,\n"
             "see --cc; CUDA and OpenCL: NVRTC or the OpenCL compiler in a build\n"
             "process, tuned-worker --build; 30 s at most, a compiler past that is\n"
             "killed), runs it in a separate worker\n"
             "process, compares the output with the reference evaluator's and times it.\n"
             "Measurement: the checked run, one untimed warm-up run, then timed repeats\n"
             "until they add up to --repeat-ms (default 100 ms), at least 3 and at most\n"
             "1000 of them; the median is reported.  The run (checked run, warm-up and\n"
             "repeats) has 30 s; past that it is stopped as a timeout.  On GPUs the L2\n"
             "cache is flushed before every timed repeat unless --no-flush (never on\n"
             "the CPU).\n"
             "Prints the status, median time, GFLOP/s, GB/s, the verification result\n"
             "and what the compiler reported.  Exits 1 unless the status is ok.\n",
     .run = tco_run},
    {.name = "profile",
     .usage = "RECORD_ID --db PATH [--target T] | FILE --target T [--trace T.json] [--set NAME=VALUE ...] "
              "[--seed S] [--no-flush] [--json]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(PROFILE_DB) | OPT(TARGET) | OPT(TRACE) | OPT(SET) | OPT(DATA_SEED) | OPT(NO_FLUSH) |
             OPT(JSON),
     .summary = "profile a kernel on the GPU with CUPTI (a table like Nsight Compute's)",
     .help = "Builds the kernel for a CUDA target (a record of the database given by --db,\n"
             "with its stored workload, parameters, trace and target, which --target\n"
             "overrides; or a workload file with --trace), runs, verifies and times it\n"
             "as `tunectl run` does, then\n"
             "runs it once more under CUPTI's range profiler (one range per kernel,\n"
             "kernel replay: a kernel is replayed as many passes as its counters need)\n"
             "and prints, per kernel, a table like Nsight Compute's: Duration\n"
             "(gpu__time_duration.sum), DRAM Throughput in GB/s (dram__bytes.sum.per_second;\n"
             "with the share of the target's bandwidth) and in % of peak\n"
             "(dram__throughput.avg.pct_of_peak_sustained_elapsed), Compute (SM)\n"
             "Throughput (sm__throughput.avg.pct_of_peak_sustained_elapsed), Achieved\n"
             "Occupancy (sm__warps_active.avg.pct_of_peak_sustained_active), Tensor Pipe\n"
             "Utilization (sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active:\n"
             "HMMA and Hopper's warpgroup MMA), then from\n"
             "NVRTC and the launch configuration: registers per thread, shared memory per\n"
             "block (static + dynamic), grid and block.  A last line gives the CUDA-event\n"
             "median and CUPTI's kernel time beside it.  --json prints the measurement\n"
             "record with the raw metrics (\"profile\") and the launch configuration.\n"
             "CUPTI is loaded as tunectl run loads it ($TUNED_CUPTI or the toolkit's).\n"
             "Needs an NVIDIA GPU with its driver: without one, or for a target that is\n"
             "not CUDA (cpu, opencl, cuda-host), it says so and exits 1.\n",
     .run = tco_profile},
    {.name = "space", .usage = "FILE --target T [--samples N [--seed S]] [--allow-tf32] [--set NAME=VALUE ...]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(TARGET) | OPT(ALLOW_TF32) | OPT(SAMPLES) | OPT(SEARCH_SEED), .need = OPT(TARGET),
     .summary = "print the design spaces of a workload as traces",
     .help = "Applies the target's schedule rules (multi-level tiling, inlining, rfactor or\n"
             "cross-thread reduction, parallel/vectorize/unroll, auto-bind, compute\n"
             "location) to every block and prints each resulting design space: a line\n"
             "`# space K of N (rules: ...)` naming the rules that shaped it, then its\n"
             "trace as JSON, without decisions (every replay samples them afresh).\n"
             "With --samples N, N valid candidates of each space instead, as MetaSchedule\n"
             "resamples: the space replayed with seeds S, S+1, ... (--seed, default 1),\n"
             "each sample post-processed (for GPU targets: verified against the\n"
             "target's limits) and lowered for the target, the rejected ones skipped,\n"
             "up to 64 tries per sample; each printed as `# space K of N, sample J\n"
             "(seed X, R rejected before it)` and its trace with its decisions, which\n"
             "`tunectl run --trace` and `emit --trace` replay as it is.  Exits 1 when a\n"
             "space gives fewer than N, saying how many and the last rejection.\n",
     .run = tco_space},
    {.name = "tune",
     .usage = "FILE --target T --trials N [--seed S] [--db PATH] [--strategy evolutionary|replay] "
              "[--model xgb|random] [--remeasure N | --no-remeasure] [--no-baseline] [--repeat-ms N] [--no-flush] "
              "[--cc C] [--allow-tf32] [--set NAME=VALUE ...] [--json [--top K]]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(TARGET) | OPT(TRIALS) | OPT(SEARCH_SEED) | OPT(DB) | OPT(STRATEGY) | OPT(MODEL) |
             OPT(REMEASURE) | OPT(NO_REMEASURE) | OPT(NO_BASELINE) | OPT(REPEAT_MS) | OPT(NO_FLUSH) | OPT(CC) |
             OPT(ALLOW_TF32) | OPT(JSON) | OPT(TOP),
     .need = OPT(TARGET) | OPT(TRIALS), .summary = "tune a workload in this process (no daemon)",
     .help = "Searches the target's design spaces for the fastest verified kernel: an\n"
             "evolutionary search ranked by the cost model (XGBoost, or random), or random\n"
             "replays of the design spaces (--strategy replay).  Every candidate is built\n"
             "(cpu: with the target's compiler, see --cc; CUDA and OpenCL: NVRTC or the\n"
             "OpenCL compiler in a build process, tuned-worker --build; 30 s at most, a\n"
             "compiler past that is killed), run in\n"
             "a worker process, verified and timed as `tunectl run` times: the checked\n"
             "run, one untimed warm-up run, then timed repeats until they add up to\n"
             "--repeat-ms (default 100 ms), at least 3 and at most 1000; the median\n"
             "counts; 30 s for the whole run.  On GPUs the L2 cache is flushed before\n"
             "every timed repeat unless --no-flush.  A candidate whose checked run is\n"
             "over 10x the fastest verified run so far (and 10 ms) is timed by that run\n"
             "alone; one whose checked run is still going at 100x the fastest (and 2 s)\n"
             "is stopped early and counted as too_slow (before any verified run, nothing\n"
             "is stopped before the 30 s timeout).  --seed seeds the search (the same seed\n"
             "proposes the same first candidates).\n"
             "With --db, records go to that SQLite database as each batch completes;\n"
             "traces recorded there for the workload and target are never measured again\n"
             "as trials, the fastest recorded run bounds the first candidates, and the\n"
             "XGBoost model starts trained on every record of the target there (it is\n"
             "saved there after the run); without it nothing is kept after the run.\n"
             "At the end the best --remeasure candidates (default 8; this run's and the\n"
             "database's) are measured again in 3 interleaved rounds and the winner is\n"
             "chosen on those times (the first time of the luckiest candidate is biased\n"
             "fast); their records get the re-measured times.  --no-remeasure keeps the\n"
             "first times.  Then the unscheduled program is measured, once per workload\n"
             "and target with --db (later runs read it from there); --no-baseline skips it.\n"
             "Progress goes to stderr after every measured batch (a live line on a\n"
             "terminal, one line per batch otherwise).  Ctrl-C stops after the current\n"
             "candidate (no re-measure, no new baseline) and still prints the summary (a\n"
             "second Ctrl-C quits at once).  The summary counts trials by status, gives\n"
             "the best kernel (re-measured and first time) and its speed-up over the\n"
             "unscheduled program, then prints the best trace.  --json prints the summary\n"
             "as one JSON object instead, with the --top K fastest verified candidates\n"
             "(their times and traces), the state after every batch (\"batches\") and every\n"
             "candidate in order (\"candidates\": the tuning curve).  Exits 0 when a\n"
             "verified kernel was found, 130 after Ctrl-C, 1 otherwise (with no kernel,\n"
             "after naming the first failed trial and its error on stderr; --json:\n"
             "\"first_failure\").\n",
     .run = tco_tune},
    {.name = "bench",
     .usage = "SUITE.json --trials N --json OUT [--baseline BASE.json] [--max-regression P] [--target T] [--seed S] "
              "[--daemon | --db PATH] [--junit FILE]",
     .min_pos = 0, .max_pos = 1,
     .opts = OPT(TRIALS) | OPT(JSON_OUT) | OPT(BASELINE) | OPT(MAX_REGRESSION) | OPT(TARGET) | OPT(SEARCH_SEED) |
             OPT(DAEMON) | OPT(COMPARE) | OPT(SOCKET) | OPT(JUNIT) | OPT(BENCH_DB),
     .summary = "tune a benchmark suite; compare with a baseline (CI)",
     .help = "Tunes every workload of SUITE.json ({\"name\": ..., \"workloads\": [{\"file\":\n"
             "\"../../workloads/matmul.tw\", \"params\": {\"M\": 128}}, ...]}; files relative to\n"
             "the suite file) with N trials each, in this process (or through the daemon\n"
             "with --daemon; target default cpu), and writes per workload the best GFLOP/s,\n"
             "median seconds, trials, hash, job and record ids to OUT (also when the run\n"
             "stops early, marked \"error\").  Exits 1 when a workload ends with no\n"
             "verified kernel (named on stderr with its first failure, which OUT holds as\n"
             "\"first_failure\" and \"error\").  In-process, the best kernel is timed again\n"
             "in 5 separate runs: the figure is the fastest (load only slows a run), the\n"
             "\"noise\" how far the median run is above it (at most 100%).\n"
             "Through the daemon the figure is the job's own best trial, never an earlier\n"
             "job's record.  With --baseline (a previous OUT of the same trials, mode and\n"
             "seed: another is refused), exits 1 when a workload's GFLOP/s dropped by more\n"
             "than P percent (default 5%) plus twice the two runs' noise, found no kernel,\n"
             "or is missing; OUT gets the comparison (\"comparison\").  --junit FILE writes\n"
             "a JUnit XML testcase per workload for CI systems.\n"
             "  tunectl bench --compare OUT --baseline BASE.json [--max-regression P] [--json CMP]\n"
             "compares two result files without tuning (--json: the comparison as JSON).\n",
     .run = tcd_bench},

    /* daemon */
    {.name = "submit",
     .usage = "FILE [--set NAME=VALUE ...] [--target T] [--trials N] [--seconds S] [--seed S] "
              "[--remeasure N | --no-remeasure] [--no-baseline] [--allow-tf32] [--wait] [--json]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(DAEMON_TARGET) | OPT(TRIALS) | OPT(SECONDS) | OPT(SEARCH_SEED) | OPT(REMEASURE) |
             OPT(NO_REMEASURE) | OPT(NO_BASELINE) | OPT(ALLOW_TF32) | OPT(WAIT) | OPT(JSON),
     .needs_daemon = true, .summary = "submit a tuning job to the daemon",
     .help = "Checks the workload here, sends its text and the --set overrides to the\n"
             "daemon and prints the job id and the workload hash.  --trials is the number\n"
             "of candidates to measure, --seconds an optional wall-time budget (the\n"
             "re-measure of the best --remeasure candidates, default 8, and the\n"
             "measurement of the unscheduled program come after it; see `tunectl tune\n"
             "--help`).  With --wait, follows the job on stdout (a progress bar on a\n"
             "terminal, one line per batch otherwise; --json: JSON lines, the job id and\n"
             "hash, then the daemon's job objects) and exits 1 unless it ends `done`\n"
             "with a verified kernel (else it names the job's first failure on stderr).\n",
     .run = tcd_submit},
    {.name = "status", .usage = "[JOB] [--json]", .min_pos = 0, .max_pos = 1, .opts = OPT(JSON), .needs_daemon = true,
     .summary = "show the daemon's state, or one job's",
     .help = "Without JOB: the daemon's version, target, database, socket, uptime and\n"
             "backends, and the jobs by state.  With JOB: that job's state, progress,\n"
             "best kernel so far, failures and the first failed trial's error.\n",
     .run = tcd_status},
    {.name = "watch", .usage = "JOB [--json]", .min_pos = 1, .max_pos = 1, .opts = OPT(JSON), .needs_daemon = true,
     .summary = "follow a job until it ends",
     .help = "Prints the job's progress on stdout after every measured batch until it\n"
             "is done, cancelled or failed: a progress bar on a terminal, one line per\n"
             "batch otherwise (--json: the daemon's job objects unchanged, one per\n"
             "line).  Exits 1 unless it ends `done` with a verified kernel.\n",
     .run = tcd_watch},
    {.name = "cancel", .usage = "JOB [--json]", .min_pos = 1, .max_pos = 1, .opts = OPT(JSON), .needs_daemon = true,
     .summary = "cancel a queued or running job",
     .help = "Asks the daemon to stop the job; what it measured so far is kept.\n", .run = tcd_cancel},
    {.name = "jobs", .usage = "[--state S] [--limit N] [--json]", .opts = OPT(STATE) | OPT(LIMIT) | OPT(JSON),
     .needs_daemon = true, .summary = "list tuning jobs",
     .help = "Lists jobs, newest first; --state keeps one state (queued, running, done,\n"
             "cancelled, failed).\n",
     .run = tcd_jobs},
    {.name = "workloads", .usage = "[--limit N] [--json]", .opts = OPT(LIMIT) | OPT(JSON), .needs_daemon = true,
     .summary = "list the workloads in the database",
     .help = "Lists every workload the database has records for: hash, name, number\n"
             "of records and work per run (FLOPs, with a unit).\n",
     .run = tcd_workloads},
    {.name = "records", .usage = "[FILE|HASH|NAME] [--set NAME=VALUE ...] [--target T] [--status S] [--limit N] [--json]",
     .min_pos = 0, .max_pos = 1, .opts = OPT(SET) | OPT(DAEMON_TARGET) | OPT(STATUS) | OPT(LIMIT) | OPT(JSON),
     .needs_daemon = true, .summary = "list tuning records",
     .help = "Lists measured candidates (all workloads, or one), optionally of one target\n"
             "and one status (ok, build_error, run_error, timeout, wrong_result, too_slow).\n" WORKLOAD_HELP,
     .run = tcd_records},
    {.name = "best", .usage = "FILE|HASH|NAME [--set NAME=VALUE ...] [--target T] [-k K] [--json]", .min_pos = 1,
     .max_pos = 1, .opts = OPT(SET) | OPT(DAEMON_TARGET) | OPT(K) | OPT(JSON), .needs_daemon = true,
     .summary = "show the fastest verified records of a workload",
     .help = "Prints the K (default 1) fastest verified records of the workload on the\n"
             "target (default: the daemon's target).\n" WORKLOAD_HELP,
     .run = tcd_best},
    {.name = "kernel",
     .usage = "FILE|HASH|NAME [--set NAME=VALUE ...] [--target T] [--fallback nearest | --db PATH] "
              "--emit cuda|ptx|cubin|header|json|source [-o OUT]",
     .min_pos = 1, .max_pos = 1,
     .opts = OPT(SET) | OPT(DAEMON_TARGET) | OPT(KERNEL_EMIT) | OPT(OUT) | OPT(FALLBACK) | OPT(KERNEL_DB),
     .need = OPT(KERNEL_EMIT), .needs_daemon = true, .summary = "print the best kernel of a workload",
     .help = "Fetches the best kernel of the workload on the target and prints it:\n"
             "  source  the kernel source in its language (C, CUDA C or OpenCL C)\n"
             "  cuda    the CUDA C source (CUDA targets only)\n"
             "  ptx     the PTX (CUDA targets only)\n"
             "  cubin   the CUBIN bytes (CUDA targets only; needs -o or a redirected stdout)\n"
             "  header  a self-contained header: the kernel and an inline launch function\n"
             "          tuned_launch_NAME(A, B, ..., stream) with the tuned grid, block and\n"
             "          shared memory (CUDA); a C header for CPU kernels; for OpenCL the\n"
             "          source as a string with the global and local sizes\n"
             "  json    everything kernel.get returns (source, launch configuration, trace)\n"
             "With --fallback nearest, a shape that was never tuned gets the record of\n"
             "the nearest tuned shape of the same workload text (by the parameters'\n"
             "ratios), replayed on the requested shape, built, verified and timed there\n"
             "(at most 2 minutes); stderr says which record, the JSON has \"fallback\".\n"
             "With --db PATH the kernel comes from that database file, served here\n"
             "without a daemon (a FILE or HASH; `tunectl tune --db PATH` fills it).\n"
             "A best record slower than the unscheduled program measured on the same\n"
             "target is never served: the unscheduled program is (stderr says so).\n"
             "By NAME, --set must then give every parameter of the requested shape.\n" WORKLOAD_HELP,
     .run = tcd_kernel},
    {.name = "export", .usage = "[FILE|HASH|NAME] [--set NAME=VALUE ...] [--target T] [-o OUT]", .min_pos = 0,
     .max_pos = 1, .opts = OPT(SET) | OPT(DAEMON_TARGET) | OPT(OUT), .needs_daemon = true,
     .summary = "export records as JSON lines",
     .help = "Writes the records (all, or of one workload and/or target) as JSON lines,\n"
             "one self-contained record per line, to OUT or stdout.  `tunectl import`\n"
             "merges them into another database.\n",
     .run = tcd_export},
    {.name = "import", .usage = "FILE [--json]", .min_pos = 1, .max_pos = 1, .opts = OPT(JSON), .needs_daemon = true,
     .summary = "import records from JSON lines",
     .help = "Merges the records of a `tunectl export` file into the daemon's database,\n"
             "skipping records it already has; prints how many were new.\n",
     .run = tcd_import},
    {.name = "plot",
     .usage = "JOB -o FILE.png|FILE.svg [--report BENCH.json] | --report BENCH.json -o FILE | --roofline [--target T] "
              "[--peaks GFLOPS,GBPS | --report BENCH.json] -o FILE",
     .min_pos = 0, .max_pos = 1, .opts = OPT(PLOT_OUT) | OPT(REPORT) | OPT(ROOFLINE) | OPT(PEAKS) | OPT(DAEMON_TARGET),
     .need = OPT(PLOT_OUT), .needs_daemon = true, .summary = "draw a tuning curve, a bench report or a roofline (PNG, SVG)",
     .help = "Draws a picture with matplotlib (through the Python package in python/, on\n"
             "$TUNED_PYTHON, else the first of python3 and /usr/bin/python3 that has\n"
             "matplotlib) into FILE, a PNG or an SVG by its suffix:\n"
             "  JOB         the job's tuning curve: every measured candidate's GFLOP/s (failed\n"
             "              ones as crosses along the bottom; a log scale when they span over\n"
             "              30x) and the best so far, against the trial and against the\n"
             "              wall time since the job started, with the unscheduled program's\n"
             "              GFLOP/s as a line, and with --report the library baselines of the\n"
             "              job's workload (its row in BENCH.json, by hash).  The times are\n"
             "              those the search measured (tune.trials), before the re-measure.\n"
             "  --report    GFLOP/s against size for tuned and its baselines (unscheduled,\n"
             "              library, TVM), a panel per workload, from bench/cpu/run's\n"
             "              results.json, `tunectl bench --json` output or bench/gpu's\n"
             "              baselines.json; needs no daemon.\n"
             "  --roofline  the best verified record of every workload on the target (default:\n"
             "              the daemon's) at its arithmetic intensity (FLOP per byte), under\n"
             "              min(peak GFLOP/s, bandwidth x intensity): the target file's peaks,\n"
             "              --peaks, or with --report the ceilings measured in BENCH.json (its\n"
             "              STREAM or device-copy bandwidth, and the fastest GFLOP/s in it).\n",
     .run = tcd_plot},
    {.name = "targets", .usage = "[--json]", .opts = OPT(JSON), .needs_daemon = true,
     .summary = "list the targets the daemon knows",
     .help = "Lists targets with their kind, architecture and whether this daemon can\n"
             "measure for them (and if not, why).\n",
     .run = tcd_targets},
    {.name = "ping", .usage = "[--wait [--seconds S]] [--json]", .opts = OPT(JSON) | OPT(PING_WAIT) | OPT(SECONDS),
     .needs_daemon = true, .summary = "check that the daemon answers",
     .help = "Calls server.info and prints the round-trip time, version and target.\n"
             "With --wait, a daemon that does not answer yet is asked again every 0.1 s\n"
             "for up to S seconds (default 30); exits 1 when it never does.\n", .run = tcd_ping},
    {.name = "shutdown", .usage = "[--json]", .opts = OPT(JSON), .needs_daemon = true, .summary = "stop the daemon",
     .help = "Asks the daemon to stop: it takes no more work, checkpoints running jobs\n"
             "(they resume when it starts again) and exits.\n",
     .run = tcd_shutdown},
};

static const command_t *find_command(const char *name) {
  for (size_t i = 0; i < TN_ARRAY_LEN(commands); i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

/* The options c takes: its own, and --socket for every daemon command. */
static uint64_t accepted(const command_t *c) {
  return c->opts | (c->needs_daemon ? OPT(SOCKET) : 0);
}

/* "--name" or "-k", as a user writes the option. */
static const char *spelling(const opt_spec_t *o, char buf[32]) {
  if (o->name) snprintf(buf, 32, "--%s", o->name);
  else snprintf(buf, 32, "-%c", o->letter);
  return buf;
}

/* ---- help ------------------------------------------------------------------------ */

static void usage(FILE *out) {
  int width = 0;
  for (size_t i = 0; i < TN_ARRAY_LEN(commands); i++)
    if ((int)strlen(commands[i].name) > width) width = (int)strlen(commands[i].name);
  fprintf(out, "usage: tunectl COMMAND [ARGS]\n"
               "\n"
               "tunectl drives tuned, the kernel auto-tuner.  Commands (in this process, no daemon needed):\n\n");
  for (int daemon = 0; daemon <= 1; daemon++) {
    if (daemon) fprintf(out, "\nDaemon commands (talk to tuned over its socket; global option --socket PATH):\n\n");
    for (const command_t *c = commands; c < commands + TN_ARRAY_LEN(commands); c++)
      if (c->needs_daemon == daemon) fprintf(out, "  %-*s  %s\n", width, c->name, c->summary);
  }
  fprintf(out, "\n"
               "Run `tunectl COMMAND --help` (or `tunectl help COMMAND`) for a command's options.\n"
               "  --version          print the version and the backends this build has\n"
               "  --markdown         print every command's help as Markdown (docs/cli.md)\n"
               "  --completion bash|zsh  print a bash (or zsh) completion script for tunectl\n");
}

/* One option's help line(s): its spelling and value, then the text. */
/* --target's help: the target files of the config directory, listed. */
/* Set while printing docs/cli.md: the config directory is named as the
 * source tree's configs/, not this machine's path. */
static bool doc_mode;

static void target_help(FILE *out) {
  char dir[PATH_MAX], **names = NULL;
  int n = 0;
  tn_err_t err = {0};
  fprintf(out, "  %-16s  a target file's name (\"opencl\" = opencl/pocl-cpu)", "--target T");
  if (tn_config_dir(dir, sizeof dir, &err) < 0 || tn_target_names(dir, &names, &n, &err) < 0) {
    fprintf(out, ": %s\n", err.msg);
    return;
  }
  fprintf(out, "; in %s:\n%20s", doc_mode ? "configs/" : dir, "");
  for (int i = 0, col = 20; i < n; i++) {
    int w = (int)strlen(names[i]) + (i + 1 < n);
    if (col + w + 1 > 100) fprintf(out, "\n%20s", ""), col = 20;
    col += fprintf(out, " %s%s", names[i], i + 1 < n ? "," : "");
  }
  fprintf(out, "\n");
  tn_target_names_free(names, n);
}

static void print_option(FILE *out, const opt_spec_t *o) {
  if (o == &options[O_TARGET]) {
    target_help(out);
    return;
  }
  char name[32], head[64];
  snprintf(head, sizeof head, "%s%s%s", spelling(o, name), o->arg ? " " : "", o->arg ? o->arg : "");
  fprintf(out, "  %-16s  ", head);
  for (const char *p = o->help; *p; p++) {
    fputc(*p, out);
    if (*p == '\n') fprintf(out, "%20s", "");
  }
  fputc('\n', out);
}

static void command_help(const command_t *c, FILE *out) {
  fprintf(out, "usage: tunectl %s %s\n\n%s\noptions:\n", c->name, c->usage, c->help);
  for (int i = 0; i < O_COUNT; i++)
    if (accepted(c) & (UINT64_C(1) << i)) print_option(out, &options[i]);
  fprintf(out, "  %-16s  show this help\n", "-h, --help");
}

/* ---- generated documents: docs/cli.md and the bash completion --------------------- */

/* Every command's --help as Markdown: docs/cli.md is this output (a test
 * compares the two, so the page cannot drift from the command table). */
static void markdown(FILE *out) {
  doc_mode = true;
  fprintf(out, "# tunectl commands\n\n"
               "Generated from tunectl's command table by `tunectl --markdown` (the test suite checks that\n"
               "this file is its output: regenerate it with `build/client/tunectl --markdown > docs/cli.md`).\n"
               "Global options, before the command: `--socket PATH` (the daemon's socket), `--version`,\n"
               "`--help`, `--markdown`, `--completion bash`.\n\n");
  for (int daemon = 0; daemon <= 1; daemon++) {
    fprintf(out, "## %s\n\n", daemon ? "Daemon commands (over tuned's socket)" : "Commands that need no daemon");
    for (const command_t *c = commands; c < commands + TN_ARRAY_LEN(commands); c++)
      if (c->needs_daemon == daemon) fprintf(out, "- [`%s`](#tunectl-%s): %s\n", c->name, c->name, c->summary);
    fprintf(out, "\n");
  }
  for (const command_t *c = commands; c < commands + TN_ARRAY_LEN(commands); c++) {
    fprintf(out, "## tunectl %s\n\n```\n", c->name);
    command_help(c, out);
    fprintf(out, "```\n\n");
  }
  doc_mode = false;
}

/* The values an option takes from a fixed set (completed instead of files). */
static const char *const option_choices[O_COUNT] = {
    [O_EMIT] = "cuda ptx sass opencl c launch",
    [O_KERNEL_EMIT] = "cuda ptx cubin header json source",
    [O_CC] = "gcc clang auto",
    [O_FALLBACK] = "none nearest",
    [O_STRATEGY] = "evolutionary replay",
    [O_MODEL] = "xgb random",
    [O_STATE] = "queued running done cancelled failed",
    [O_STATUS] = "ok build_error run_error timeout wrong_result too_slow",
};

/* A bash completion script for the command table: commands, each one's
 * options, the values of options that take one of a few (--emit, --state,
 * ...), the target names after --target, files elsewhere.  zsh: the same
 * through bashcompinit. */
static void bash_completion(FILE *out, bool zsh) {
  if (zsh)
    fprintf(out, "#compdef tunectl\n# zsh completion for tunectl, generated by `tunectl --completion zsh`: the bash\n"
                 "# completion through zsh's bashcompinit\nautoload -U +X bashcompinit && bashcompinit\n");
  fprintf(out, "# bash completion for tunectl, generated by `tunectl --completion %s`\n"
               "_tunectl() {\n", zsh ? "zsh" : "bash");
  fprintf(out, "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i opts\n"
               "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
               "    case ${COMP_WORDS[i]} in\n"
               "      --socket) ((i++)) ;;\n"
               "      -*) ;;\n"
               "      *) cmd=${COMP_WORDS[i]}; break ;;\n"
               "    esac\n"
               "  done\n"
               "  if [ -z \"$cmd\" ]; then\n"
               "    COMPREPLY=($(compgen -W \"");
  for (size_t i = 0; i < TN_ARRAY_LEN(commands); i++) fprintf(out, "%s ", commands[i].name);
  fprintf(out, "help --socket --version --help --markdown --completion\" -- \"$cur\"))\n"
               "    return\n"
               "  fi\n"
               "  case $prev in\n"
               "    --target)\n"
               "      COMPREPLY=($(compgen -W \"");
  char dir[PATH_MAX], **names = NULL;
  int n = 0;
  if (tn_config_dir(dir, sizeof dir, NULL) == 0 && tn_target_names(dir, &names, &n, NULL) == 0) {
    for (int i = 0; i < n; i++) fprintf(out, "%s ", names[i]);
    tn_target_names_free(names, n);
  }
  fprintf(out, "opencl\" -- \"$cur\"))\n"
               "      return ;;\n"
               "  esac\n"
               "  case $cmd in\n");
  for (const command_t *c = commands; c < commands + TN_ARRAY_LEN(commands); c++) {
    fprintf(out, "    %s) opts=\"", c->name);
    for (int i = 0; i < O_COUNT; i++) {
      if (!(accepted(c) & (UINT64_C(1) << i))) continue;
      char name[32];
      fprintf(out, "%s ", spelling(&options[i], name));
    }
    fprintf(out, "--help\"\n        case $prev in\n");
    for (int i = 0; i < O_COUNT; i++) {
      char name[32];
      if ((accepted(c) & (UINT64_C(1) << i)) && option_choices[i])
        fprintf(out, "          %s) COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return ;;\n",
                spelling(&options[i], name), option_choices[i]);
    }
    fprintf(out, "        esac ;;\n");
  }
  fprintf(out, "    *) opts=\"--help\" ;;\n"
               "  esac\n"
               "  if [[ $cur == -* ]]; then\n"
               "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
               "  else\n"
               "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
               "  fi\n"
               "}\n"
               "complete -o filenames -F _tunectl tunectl\n");
}

/* ---- parsing ----------------------------------------------------------------------- */

int tc_parse_int(const tc_args_t *a, const char *what, const char *text, int64_t min, int64_t max, int64_t *out) {
  char *end, range[64];
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || !*text || v < min || (max && v > max)) {
    if (max) snprintf(range, sizeof range, "from %lld to %lld", (long long)min, (long long)max);
    else snprintf(range, sizeof range, ">= %lld", (long long)min);
    fprintf(stderr, "tunectl %s: %s wants an integer %s, got '%s'\n", a->name, what, range, text);
    return -1;
  }
  *out = v;
  return 0;
}

void tc_no_kernel_text(char *buf, size_t size, int64_t trials, const char *status, int64_t trial) {
  int n = snprintf(buf, size, "no verified kernel in %lld trial%s", (long long)trials, trials == 1 ? "" : "s");
  if (n < 0 || (size_t)n >= size) return;
  if (status && *status)
    snprintf(buf + n, size - (size_t)n, "; the first failure (trial %lld) was a %s", (long long)trial, status);
  else if (trials > 0)
    snprintf(buf + n, size - (size_t)n, "; none failed (stopped before one verified)");
}

void tc_say_no_kernel(const char *cmd, const char *workload, int64_t trials, const char *status, int64_t trial,
                      const char *error) {
  char what[256];
  tc_no_kernel_text(what, sizeof what, trials, status, trial);
  fprintf(stderr, "tunectl %s: %s: %s%s\n", cmd, workload, what, error && *error ? ":" : "");
  const int max_lines = 20;
  int line = 0;
  for (const char *p = error; p && *p && line < max_lines; line++) {
    size_t len = strcspn(p, "\n");
    fprintf(stderr, "  %.*s\n", (int)len, p);
    p += len + (p[len] == '\n');
    if (line == max_lines - 1 && *p) fprintf(stderr, "  ... (cut; the rest is in the record's error)\n");
  }
}

static int add_set(tc_args_t *a, const char *val) {
  tn_err_t err = {0};
  if (a->nsets >= (int)TN_ARRAY_LEN(a->sets)) {
    fprintf(stderr, "tunectl %s: too many --set options (at most %zu)\n", a->name, TN_ARRAY_LEN(a->sets));
    return -1;
  }
  if (ir_param_set_parse(val, a->arena, &a->sets[a->nsets], &err) < 0) {
    fprintf(stderr, "tunectl %s: --set %s: %s\n", a->name, val, err.msg);
    return -1;
  }
  a->nsets++;
  return 0;
}

static int take_number(tc_args_t *a, const opt_spec_t *o, const char *name, const char *val, double *field) {
  char *end, bound[40] = "";
  double v = strtod(val, &end);
  if (*end || !*val || !(v > 0) || (o->max && v > (double)o->max)) {
    if (o->max) snprintf(bound, sizeof bound, " up to %lld", (long long)o->max);
    fprintf(stderr, "tunectl %s: %s wants a positive number%s, got '%s'\n", a->name, name, bound, val);
    return -1;
  }
  *field = v;
  return 0;
}

/* Stores option o's value in a; -1 after a message. */
static int take_option(tc_args_t *a, const opt_spec_t *o, const char *val) {
  void *field = (char *)a + o->field;
  char name[32];
  switch (o->kind) {
  case K_FLAG: *(bool *)field = true; return 0;
  case K_TEXT: *(const char **)field = val; return 0;
  case K_INT: return tc_parse_int(a, spelling(o, name), val, o->min, o->max, field);
  case K_NUM: return take_number(a, o, spelling(o, name), val, field);
  case K_SET: return add_set(a, val);
  }
  return 0;
}

/* Says what was wrong with the option getopt_long just refused (ch is '?'
 * or ':'): unknown, ambiguous, taken by other commands only, missing its
 * value or given one it does not take.  cmd is NULL before the command. */
static void bad_option(const char *cmd, int ch, char **argv, const struct option *longs) {
  char who[64], hint[64], text[64];
  snprintf(who, sizeof who, "tunectl%s%s", cmd ? " " : "", cmd ? cmd : "");
  snprintf(hint, sizeof hint, "see tunectl%s%s --help", cmd ? " " : "", cmd ? cmd : "");
  const struct option *l = longs;
  while (l->name && (!optopt || l->val != optopt)) l++;
  if (ch == ':' || (optopt && l->name && l->has_arg == no_argument)) {
    if (l->name) snprintf(text, sizeof text, "--%s", l->name);
    else snprintf(text, sizeof text, "-%c", optopt);
    fprintf(stderr, "%s: %s %s (%s)\n", who, text, ch == ':' ? "needs a value" : "takes no value", hint);
    return;
  }
  if (optopt) snprintf(text, sizeof text, "-%c", optopt);
  else snprintf(text, sizeof text, "%.*s", (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
  /* getopt_long takes unambiguous abbreviations; name the candidates of an ambiguous one */
  char cands[256] = "";
  int ncands = 0;
  for (l = longs; !optopt && l->name; l++) {
    if (strncmp(l->name, text + 2, strlen(text + 2)) != 0) continue;
    size_t n = strlen(cands);
    snprintf(cands + n, sizeof cands - n, "%s--%s", ncands++ ? ", " : "", l->name);
  }
  if (ncands > 1) {
    fprintf(stderr, "%s: option '%s' is ambiguous: %s (%s)\n", who, text, cands, hint);
    return;
  }
  for (int i = 0; cmd && i < O_COUNT; i++) {
    char name[32];
    if (strcmp(spelling(&options[i], name), text) == 0) {
      fprintf(stderr, "%s: %s is not an option of %s (%s)\n", who, text, cmd, hint);
      return;
    }
  }
  fprintf(stderr, "%s: unknown option '%s' (%s)\n", who, text, hint);
}

/* The name of c's positional argument i, from its usage line: the usage
 * starts with the positional arguments ("FILE T.json [--set ...]"). */
static const char *positional_name(const command_t *c, int i, tn_arena_t *arena) {
  const char *p = c->usage;
  for (; i > 0 && *p; i--) p += strcspn(p, " "), p += strspn(p, " ");
  return tn_arena_strndup(arena, p, strcspn(p, " "));
}

/* The entry of the option getopt_long returned as ch (a LONG_VAL or a
 * short name). */
static int option_index(const command_t *c, int ch) {
  int i = 0;
  if (ch >= LONG_VAL(0)) return ch - LONG_VAL(0);
  /* a letter may name different options of different commands (-o) */
  while (i < O_COUNT && (options[i].letter != ch || !(accepted(c) & (UINT64_C(1) << i)))) i++;
  return i;
}

static int add_positional(const command_t *c, tc_args_t *a, const char *arg) {
  if (a->npos == c->max_pos) {
    fprintf(stderr, "tunectl %s: unexpected argument '%s' (usage: tunectl %s %s)\n", c->name, arg, c->name, c->usage);
    return -1;
  }
  a->pos[a->npos++] = arg;
  return 0;
}

/* Parses c's command line (argv[0] is the command's name) into a with
 * getopt_long: options and positional arguments in any order, `--` ends
 * the options.  Returns 0, 1 for --help, or -1 after a message. */
static int parse_command_line(const command_t *c, int argc, char **argv, tc_args_t *a) {
  struct option longs[O_COUNT + 2];
  char shorts[2 * O_COUNT + 4] = "-:h"; /* '-': positional arguments in order; ':': report a missing value */
  int n = 0;
  size_t ns = strlen(shorts);
  for (int i = 0; i < O_COUNT; i++) {
    if (!(accepted(c) & (UINT64_C(1) << i))) continue;
    const opt_spec_t *o = &options[i];
    int has_arg = o->kind == K_FLAG ? no_argument : required_argument;
    if (o->name) longs[n++] = (struct option){o->name, has_arg, NULL, LONG_VAL(i)};
    if (o->letter) shorts[ns++] = o->letter;
    if (o->letter && has_arg) shorts[ns++] = ':';
  }
  shorts[ns] = 0;
  longs[n++] = (struct option){"help", no_argument, NULL, 'h'};
  longs[n] = (struct option){0};
  uint64_t given = 0;
  optind = 0; /* start afresh: main() read the options before the command */
  opterr = 0;
  for (int ch; (ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1;) {
    if (ch == 'h') return 1;
    if (ch == '?' || ch == ':') {
      bad_option(c->name, ch, argv, longs);
      return -1;
    }
    if (ch == 1) {
      if (add_positional(c, a, optarg) < 0) return -1;
    } else {
      int i = option_index(c, ch);
      if (take_option(a, &options[i], optarg) < 0) return -1;
      given |= UINT64_C(1) << i;
    }
  }
  while (optind < argc) /* the arguments after `--` */
    if (add_positional(c, a, argv[optind++]) < 0) return -1;
  char name[32];
  const char *missing = a->npos < c->min_pos ? positional_name(c, a->npos, a->arena) : NULL;
  for (int i = 0; !missing && i < O_COUNT; i++)
    if (c->need & ~given & (UINT64_C(1) << i)) missing = spelling(&options[i], name);
  if (missing) {
    fprintf(stderr, "tunectl %s: missing %s (usage: tunectl %s %s)\n", c->name, missing, c->name, c->usage);
    return -1;
  }
  return 0;
}

/* ---- main ---------------------------------------------------------------------------- */

static int run_command(const command_t *c, int argc, char **argv, const char *socket) {
  tc_args_t a = {.name = c->name, .socket = socket, .trials = -1, .seed = -1, .limit = -1, .k = -1, .remeasure = -1,
                 .arena = tn_arena_new()};
  int rc = parse_command_line(c, argc, argv, &a);
  if (rc == 1) {
    command_help(c, stdout);
    rc = 0;
  } else if (rc < 0) {
    rc = 2;
  } else {
    /* TF32: the target T+tf32 (a daemon's default target: the daemon appends it) */
    size_t n = a.target ? strlen(a.target) : 0;
    if (a.allow_tf32 && a.target && !(n >= 5 && !strcmp(a.target + n - 5, "+tf32"))) {
      char *t = tn_arena_alloc(a.arena, n + 6);
      snprintf(t, n + 6, "%s+tf32", a.target);
      a.target = t;
    }
    rc = c->run(&a);
  }
  tn_arena_free(a.arena);
  return rc;
}

int main(int argc, char **argv) {
  enum { G_SOCKET = 256, G_VERSION, G_MARKDOWN, G_COMPLETION };
  static const struct option globals[] = {{"socket", required_argument, NULL, G_SOCKET},
                                          {"version", no_argument, NULL, G_VERSION},
                                          {"markdown", no_argument, NULL, G_MARKDOWN},
                                          {"completion", required_argument, NULL, G_COMPLETION},
                                          {"help", no_argument, NULL, 'h'},
                                          {0}};
  const char *socket = NULL;
  opterr = 0;
  /* '+': the options before the command only; the command parses the rest */
  for (int ch; (ch = getopt_long(argc, argv, "+:h", globals, NULL)) != -1;) {
    if (ch == G_SOCKET) {
      socket = optarg;
    } else if (ch == 'h') {
      usage(stdout);
      return 0;
    } else if (ch == G_MARKDOWN) {
      markdown(stdout);
      return 0;
    } else if (ch == G_COMPLETION) {
      if (strcmp(optarg, "bash") != 0 && strcmp(optarg, "zsh") != 0) {
        fprintf(stderr, "tunectl: --completion knows bash and zsh, not '%s'\n", optarg);
        return 2;
      }
      bash_completion(stdout, strcmp(optarg, "zsh") == 0);
      return 0;
    } else if (ch == G_VERSION) {
      printf("tunectl %s (built with CUDA/NVRTC: %s, OpenCL: %s, XGBoost: %s)\n", TUNED_VERSION,
             TUNED_HAVE_CUDA ? "yes" : "no", TUNED_HAVE_OPENCL ? "yes" : "no", TUNED_HAVE_XGBOOST ? "yes" : "no");
      return 0;
    } else {
      bad_option(NULL, ch, argv, globals);
      return 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  const char *name = argv[optind];
  bool help = strcmp(name, "help") == 0;
  if (help && optind + 1 >= argc) {
    usage(stdout);
    return 0;
  }
  if (help) name = argv[optind + 1];
  const command_t *c = find_command(name);
  if (!c) {
    fprintf(stderr, "tunectl: unknown command '%s'\n\n", name);
    usage(stderr);
    return 2;
  }
  if (help) {
    command_help(c, stdout);
    return 0;
  }
  return run_command(c, argc - optind, argv + optind, socket);
}
