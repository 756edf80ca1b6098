/* worker.h — internals of tuned-worker: the mapped workload and the
 * interface every execution backend (CPU, OpenCL, CUDA) implements.  Only
 * the worker's files include this. */
#ifndef TUNED_WORKER_H
#define TUNED_WORKER_H

#include "ms_internal.h"

#define WK_MAX_KERNELS 64
#define WK_MAX_ARGS 128

/* An error of one request; fatal = the device context is unusable (a sticky
 * CUDA error): the worker replies, then exits so the runner restarts it. */
typedef struct wk_err {
  char msg[MS_ERROR_MAX];
  bool fatal;
} wk_err_t;

int wk_fail(wk_err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One workload parameter: inputs point at their data in the mapped file,
 * outputs at the reference there and own a host buffer for the results. */
typedef struct wk_param {
  char name[64];
  ir_dtype_t dtype;
  int64_t numel;
  size_t bytes;
  bool output;
  double tolerance; /* outputs: the largest relative L2 error accepted */
  const void *data; /* input values, or the reference output */
  void *host;       /* outputs: where results are compared (64-byte aligned) */
} wk_param_t;

typedef struct wk_workload {
  void *map;
  size_t map_size;
  wk_param_t *params;
  int nparams;
  int gen; /* changes with every load, so backends rebind their buffers */
} wk_workload_t;

/* A TMA tensor map the kernel takes after the arguments (cg_tensor_map_t):
 * made by cuTensorMapEncodeTiled from argument `arg`'s device address. */
typedef struct wk_tensor_map {
  int arg, elem_bytes;
  int64_t dims[2], stride_bytes;
  int box[2], swizzle;
} wk_tensor_map_t;

typedef struct wk_kernel {
  char name[64];
  int64_t grid[3], block[3];
  int64_t dyn_shared_bytes;
  wk_tensor_map_t maps[2];
  int nmaps;
} wk_kernel_t;

/* Argument i of every kernel: a workload parameter or a workspace. */
typedef struct wk_arg {
  int param;               /* >= 0: index into the workload's params */
  int64_t workspace_bytes; /* param < 0: scratch of this size */
} wk_arg_t;

typedef struct wk_run {
  char artifact[MS_PATH_MAX];
  wk_kernel_t kernels[WK_MAX_KERNELS];
  int nkernels;
  wk_arg_t args[WK_MAX_ARGS];
  int nargs;
  /* "" or the function that fills the packed copies of constant inputs
   * (tuned_pack_<entry>(void **args)): run once when the candidate is
   * loaded, before the checked run and the timed repeats */
  char pack[80];
} wk_run_t;

/* A backend.  Every call returns 0 or -1 with e filled. */
typedef struct wk_backend {
  const char *name;
  int (*init)(wk_err_t *e);                        /* idempotent; retried until it succeeds */
  int (*bind)(const wk_workload_t *w, wk_err_t *e); /* device buffers for a (new) workload */
  int (*load)(const wk_run_t *r, wk_err_t *e);      /* the artifact and the arguments */
  int (*prepare)(wk_err_t *e);                      /* inputs in place, outputs poisoned (0xFF bytes) */
  int (*launch)(double *secs, wk_err_t *e);         /* every kernel once; device time in secs */
  int (*fetch)(wk_err_t *e);                        /* outputs into the params' host buffers */
  void (*flush)(void);                              /* evict caches between repeats */
  void (*unload)(void);                             /* forget the artifact */
  /* Optional (NULL: the backend has none).  Device times: trace_begin
   * starts recording the kernels' own durations (-1 with why: none this
   * time); traced, after the launches, gives the last `want` launches'
   * durations in out (-1 with why). */
  int (*trace_begin)(char *why, size_t whysize);
  int (*traced)(int want, double *out, char *why, size_t whysize);
  /* Runs every kernel once under the hardware profiler and evaluates
   * metrics[0..n) per kernel into values[k * n + m]; *nkernels of them, and
   * the chip's name.  -1 with why. */
  int (*profile)(const char *const *metrics, int n, double *values, int *nkernels, char *chip, size_t chipsize,
                 char *why, size_t whysize);
} wk_backend_t;

extern const wk_backend_t wk_cpu_backend, wk_opencl_backend, wk_cuda_backend;

/* Overwrites a 64 MiB host buffer (the host backends' cache flush). */
void wk_flush_host_cache(void);

int wk_main(int argc, char **argv);

#endif
