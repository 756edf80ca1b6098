/* tunectl_daemon.h — tunectl's daemon commands (submit, status, watch, ...,
 * tunectl_daemon.c) and `bench` (tunectl_bench.c), which parse their own
 * arguments.  Internal to client/; prefix tcd_. */
#ifndef TUNED_TUNECTL_DAEMON_H
#define TUNED_TUNECTL_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "ir/ir.h"

typedef struct tcd_command tcd_command_t;

/* Parsed options of one command (unset numbers are -1). */
typedef struct tcd_opts {
  const tcd_command_t *cmd;
  const char *name;           /* the command's name, for messages */
  const char *pos[2];         /* positional arguments */
  int npos;
  ir_param_set_t sets[64];
  int nsets;
  const char *target, *emit, *out, *state, *status, *baseline, *max_regression, *compare, *json_out;
  int64_t trials, seed, limit, k;
  double seconds;
  bool json, wait, daemon;
  tn_arena_t *arena;
} tcd_opts_t;

/* Looks a daemon command up by name; NULL when it is not one. */
const tcd_command_t *tcd_find(const char *name);
/* Lists the daemon commands (one line each) for tunectl's usage text. */
void tcd_usage(FILE *out);
/* Prints the command's help. */
void tcd_help(const tcd_command_t *c, FILE *out);
/* Parses argv (the arguments after the command name) and runs the command;
 * returns the exit code (0 ok, 1 failure, 2 bad command line). */
int tcd_main(const tcd_command_t *c, int argc, char **argv);
/* Takes a leading global `--socket PATH` off *argv; returns -1 (after a
 * message) when it has no value, else 0. */
int tcd_global_options(int *argc, char ***argv);

/* The socket given with --socket (NULL: libtuned's default). */
extern const char *tcd_socket;

/* `tunectl bench` (tunectl_bench.c). */
int tcd_bench(tcd_opts_t *o);

/* Compares bench results with a baseline (both as tunectl bench writes them):
 * prints one line per workload to out and returns the number of
 * regressions (GFLOP/s below baseline * (1 - max_regression), a workload
 * that found no kernel, or one missing from the results), or -1 with a
 * message in err when the files do not fit together. */
int tcd_bench_compare(const char *results_json, const char *baseline_json, double max_regression, FILE *out,
                      tn_err_t *err);

#endif
