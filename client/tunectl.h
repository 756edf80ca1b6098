/* tunectl.h — what tunectl's files share: the command line as tunectl.c
 * parses it from the one command table, and the commands' handlers (offline
 * ones in tunectl_offline.c, daemon ones in tunectl_daemon.c, bench in
 * tunectl_bench.c).  Internal to client/; prefix tc_ (tco_ offline, tcd_
 * daemon and bench). */
#ifndef TUNED_TUNECTL_H
#define TUNED_TUNECTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "ir/ir.h"

struct cJSON;

/* One command's parsed command line.  Options the command was not given
 * stay NULL, false, 0 or (the integers) -1; which options a command takes,
 * and which it cannot do without, its table entry says (tunectl.c). */
typedef struct tc_args {
  const char *name;   /* the command's name, for messages */
  const char *pos[2]; /* positional arguments, in order */
  int npos;
  ir_param_set_t sets[64]; /* --set, in order */
  int nsets;
  const char *socket; /* --socket, before or after the command (NULL: libtuned's default) */
  const char *trace, *target, *emit, *out, *state, *status, *baseline, *max_regression, *compare, *json_out, *junit;
  const char *report, *peaks;
  const char *db, *strategy, *model, *cc, *fallback;
  int64_t trials, seed, limit, k, remeasure;
  double seconds, repeat_ms;
  bool json, wait, daemon, no_flush, no_remeasure, no_baseline, allow_tf32, roofline, tvmscript;
  tn_arena_t *arena;
} tc_args_t;

/* The seed of input data, replays and searches: --seed, else 1. */
static inline uint64_t tc_seed(const tc_args_t *a) {
  return a->seed >= 0 ? (uint64_t)a->seed : 1;
}

/* Reads an integer in [min, max] (max 0: no bound) from text for option or
 * argument `what`; -1 after a message that names the command, `what`, the
 * range and the text. */
int tc_parse_int(const tc_args_t *a, const char *what, const char *text, int64_t min, int64_t max, int64_t *out);
/* Whether this machine can run the candidates of target t (whose backend
 * is probed); says why not on stderr, as `tunectl CMD: ...`. */
struct tn_target;
bool tc_can_measure(const char *cmd, const struct tn_target *t);

/* "no verified kernel in N trials; the first failure (trial T) was a
 * build_error" (status NULL or "": none failed) into buf; and that on
 * stderr as `tunectl CMD: WORKLOAD: ...:` followed by the failure's error
 * text (its first 20 lines), for the commands that end without a kernel. */
void tc_no_kernel_text(char *buf, size_t size, int64_t trials, const char *status, int64_t trial);
void tc_say_no_kernel(const char *cmd, const char *workload, int64_t trials, const char *status, int64_t trial,
                      const char *error);

/* Every handler runs one command on its parsed command line and returns the
 * exit code: 0 ok, 1 failure, 2 a bad command line. */

/* Offline commands (tunectl_offline.c): workload files, no daemon. */
int tco_show(tc_args_t *a);
int tco_check(tc_args_t *a);
int tco_import_tvmscript(tc_args_t *a);
int tco_eval(tc_args_t *a);
int tco_trace_check(tc_args_t *a);
int tco_emit(tc_args_t *a);
int tco_run(tc_args_t *a);
int tco_profile(tc_args_t *a);
int tco_space(tc_args_t *a);
int tco_tune(tc_args_t *a);

/* Daemon commands (tunectl_daemon.c): talk to tuned through libtuned. */
int tcd_submit(tc_args_t *a);
int tcd_status(tc_args_t *a);
int tcd_watch(tc_args_t *a);
int tcd_cancel(tc_args_t *a);
int tcd_jobs(tc_args_t *a);
int tcd_workloads(tc_args_t *a);
int tcd_records(tc_args_t *a);
int tcd_best(tc_args_t *a);
int tcd_kernel(tc_args_t *a);
int tcd_export(tc_args_t *a);
int tcd_import(tc_args_t *a);
int tcd_targets(tc_args_t *a);
int tcd_ping(tc_args_t *a);
int tcd_shutdown(tc_args_t *a);

/* `tunectl bench` (tunectl_bench.c): in this process, or through the daemon
 * with --daemon. */
int tcd_bench(tc_args_t *a);
/* `tunectl plot` (tunectl_plot.c): runs the Python package's tuned.plot. */
int tcd_plot(tc_args_t *a);

/* Compares bench results with a baseline (both as tunectl bench writes them):
 * prints one line per workload to out, adds "max_regression",
 * "regressions" and "rows" (per workload: name, hash, job, record,
 * baseline_gflops, gflops, change, allowed, status) to report (may be NULL)
 * and returns the number of regressions (GFLOP/s below baseline * (1 -
 * max_regression - 2 * (the two results' noise)), a workload that found no
 * kernel, or one missing from the results), or -1 with a message in err
 * when the files do not fit together (another target, or other trials,
 * mode or seed). */
int tcd_bench_compare(const char *results_json, const char *baseline_json, double max_regression, FILE *out,
                      struct cJSON *report, tn_err_t *err);

#endif
