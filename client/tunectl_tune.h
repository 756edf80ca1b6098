/* tunectl_tune.h — `tunectl tune` (tunectl_tune.c): in-process tuning with a
 * live progress line, Ctrl-C handling and a summary.  Internal to client/;
 * prefix tct_. */
#ifndef TUNED_TUNECTL_TUNE_H
#define TUNED_TUNECTL_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/target.h"
#include "ir/ir.h"

/* The command line as tunectl parsed it (--trials checked, --strategy and
 * --model not yet). */
typedef struct tct_args {
  const ir_workload_t *workload;
  const tn_target_t *target;
  int trials;           /* --trials N (1 to 1000000) */
  const char *db;       /* --db PATH or NULL */
  const char *strategy; /* evolutionary (default) | replay */
  const char *model;    /* xgb (default) | random */
  uint64_t seed;
  bool json;
  bool no_flush;    /* --no-flush */
  double repeat_ms; /* --repeat-ms N; 0: the default (100) */
  int remeasure;    /* --remeasure N (0 also for --no-remeasure); -1: the default (8) */
  bool no_baseline; /* --no-baseline */
  int top;          /* --top K: the fastest verified candidates --json lists; <= 0: the default (5) */
} tct_args_t;

/* Runs the command; returns the exit status (0: a verified kernel was
 * found, 1: none or an error, 2: a bad option, 130: stopped by Ctrl-C). */
int tct_tune(const tct_args_t *a);

#endif
