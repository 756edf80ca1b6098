/* tuned_local.h — libtuned_local: tuning and serving kernels in the caller's
 * process, without a daemon.  It links the tuner (search, measure, codegen,
 * db) and runs candidates in tuned-worker processes, as `tunectl tune` does;
 * records go to a SQLite file the caller names.  Kernels come back as the
 * same JSON object the daemon's kernel.get answers (tuned_kernel_parse of
 * libtuned reads it).  Prefix: tuned_local_.
 *
 * tuned-worker and the target files are found next to the library (a wheel's
 * or a build tree's layout: ../libexec/tuned/tuned-worker,
 * ../share/tuned/configs), then where `meson install` put them;
 * $TUNED_WORKER and $TUNED_CONFIG_DIR override both. */
#ifndef TUNED_LOCAL_H
#define TUNED_LOCAL_H

#include <stdint.h>

#include "tuned.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called after every measured batch with {"trials_done", "trials_total",
 * "best_median_secs" (null: none yet), "elapsed_s"}. */
typedef void (*tuned_local_progress_fn)(const char *progress_json, void *ctx);

typedef struct tuned_local_tune {
  const char *workload_text; /* the workload (required) */
  const char *name;          /* its name (NULL: "workload") */
  const char *params_json;   /* parameter overrides, {"M": 64} (NULL: none) */
  const char *target;        /* a target name (NULL: "cpu") */
  const char *db_path;       /* the SQLite file the records go to (NULL: none: nothing is kept) */
  int trials;                /* measured candidates (>= 1) */
  double seconds;            /* wall-time budget; 0: none */
  int64_t seed;              /* 0: 1 */
  int remeasure;             /* the best N re-measured at the end; -1: the default (8), 0: off */
  tuned_local_progress_fn progress; /* may be NULL */
  void *ctx;
} tuned_local_tune_t;

/* A tune_t with the defaults (remeasure -1, the rest zero). */
TUNED_API tuned_local_tune_t tuned_local_tune_defaults(void);

/* Tunes one workload in this process; *result_json (free with
 * tuned_local_free) is {"workload": HASH, "name", "target", "trials",
 * "status_counts": {...}, "best": {"median_secs", "gflops", "record_id",
 * "first_median_secs"} or null, "naive": {"status", "median_secs"} or null
 * (the unscheduled program), "speedup", "elapsed_s"}.  Errors:
 * TUNED_E_INVALID (a bad argument or target: the message says which),
 * TUNED_E_RPC with TUNED_RPC_BAD_WORKLOAD (the parser's FILE:LINE:COL
 * message) or TUNED_RPC_TARGET_REFUSED (this machine cannot run the
 * target's kernels), TUNED_E_IO (the database, the worker). */
TUNED_API int tuned_local_tune(const tuned_local_tune_t *opts, char **result_json, tuned_error_t *err);

/* The best verified kernel of a workload (its text with parameter
 * overrides, or workload_hash: its first 32 to 64 hex digits) on a target (NULL: "cpu") from
 * database db_path, as kernel.get's JSON in *kernel_json (free with
 * tuned_local_free).  Never a record slower than the unscheduled program
 * measured there (that program is served instead, "record": 0).  TUNED_E_RPC
 * with TUNED_RPC_NO_KERNEL when nothing verified is there. */
TUNED_API int tuned_local_kernel(const char *db_path, const char *workload_text, const char *name,
                                 const char *params_json, const char *workload_hash, const char *target,
                                 char **kernel_json, tuned_error_t *err);

TUNED_API void tuned_local_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
