/* measure.h — builders, runners and verification of candidate kernels, and
 * probing which execution backends this build and this machine offer.
 * The measure/ module's only public header.  Prefix: ms_.
 *
 * Pipeline: a candidate (target + generated source + launch configuration)
 * is built by an ms_builder_t (thread pool: cc, NVRTC or the OpenCL compiler)
 * into an artifact file, then run by an ms_runner_t in a separate worker
 * process (`tuned-worker`, spawned with exec): outputs are poisoned, the
 * kernel runs once and is verified against the reference evaluator, then
 * timed.  A crash, hang or sticky device error kills only the worker, which is
 * restarted; the candidate gets an error record and the batch goes on.  One
 * ms_result_t per candidate travels through both stages.  Runners of one
 * process time one candidate at a time per device (ms_device_t), whichever
 * job or thread they belong to. */
#ifndef TUNED_MEASURE_H
#define TUNED_MEASURE_H

#include "codegen/codegen.h"
#include "common/common.h"
#include "common/target.h"
#include "ir/ir.h"

/* ======================================================================
 * Backends (probe.c)
 * ====================================================================== */

typedef enum ms_backend {
  MS_BACKEND_CPU,    /* C compiled with the system compiler, run on the host */
  MS_BACKEND_OPENCL, /* OpenCL C (PoCL on machines without a GPU) */
  MS_BACKEND_CUDA,   /* CUDA C through NVRTC and the driver API */
  MS_BACKEND__COUNT
} ms_backend_t;

typedef struct ms_backend_status {
  bool compiled;  /* this build has the backend's code */
  bool available; /* and the machine can run it now */
  char detail[256]; /* device or reason, e.g. "libcuda.so.1: cannot open shared object file" */
} ms_backend_status_t;

const char *ms_backend_name(ms_backend_t b); /* "cpu", "opencl", "cuda" */
/* The backend that runs a target of this kind (CPU -> cpu, ...). */
ms_backend_t ms_backend_of(tn_target_kind_t k);
/* Whether runs on this kind of target flush L2 between timed repeats unless
 * asked not to: CUDA (as Triton's do_bench does); not the host, where a
 * 64 MiB flush per repeat would cost more than most candidates. */
bool ms_flush_by_default(tn_target_kind_t k);
/* The language a target of this kind is generated in (cpu -> C, ...). */
cg_target_t ms_language_of(tn_target_kind_t k);

/* Probes a backend without side effects beyond loading libraries; OpenCL
 * is probed in a build process (tuned-worker --build), so that its
 * platform's libraries (PoCL: LLVM) never load in the caller.  The CUDA
 * driver is loaded with dlopen (path from $TUNED_CUDA_DRIVER, default
 * "libcuda.so.1"); libcuda is never linked. */
void ms_backend_probe(ms_backend_t b, ms_backend_status_t *st);

/* Temporary directories "<$TMPDIR or /tmp>/<stem>-XXXXXX" that a process
 * owns (an flock'ed .owner file inside) until ms_temp_dir_remove; a
 * directory whose maker died without removing it (SIGKILL) is removed by
 * the next ms_temp_dir_new of the same user, or by ms_temp_dirs_sweep, which
 * returns how many it removed. */
int ms_temp_dir_new(const char *stem, char *out, size_t size, tn_err_t *err);
void ms_temp_dir_remove(const char *path);
int ms_temp_dirs_sweep(void);

/* ======================================================================
 * Candidates (candidate.c)
 * ====================================================================== */

/* What gets built and run: the target, the source in the target's language
 * (C for cpu, OpenCL C for opencl, CUDA C for cuda), the kernels to launch in
 * order and the parameters every kernel takes (the workload's inputs and
 * outputs in order, then workspaces).  Owns deep copies of everything. */
typedef struct ms_candidate {
  tn_target_t target;
  char *source;
  cg_kernel_t *kernels;
  int nkernels;
  cg_param_t *params;
  int nparams;
  int min_sm;          /* CUDA: the lowest architecture the source is for (cg_module_t's); 0 any */
  bool sm90a;          /* CUDA: built for sm_90a (Hopper's wgmma kernels, cg_module_t's); the build refuses
                          such a candidate that spills or whose SASS has no HGMMA */
} ms_candidate_t;

/* From a lowered module; its language must be the target's (TN_EINVAL
 * otherwise, naming both). */
int ms_candidate_from_module(const tn_target_t *t, const cg_module_t *m, ms_candidate_t **out,
                             tn_err_t *err);
/* From raw parts (hand-written or planted sources).  C sources must define
 * `int tuned_entry_<kernels[0].name>(void **args)`; GPU sources the kernels named in kernels. */
int ms_candidate_new(const tn_target_t *t, const char *source, const cg_kernel_t *kernels,
                     int nkernels, const cg_param_t *params, int nparams, ms_candidate_t **out,
                     tn_err_t *err);
void ms_candidate_free(ms_candidate_t *c);

/* ======================================================================
 * Results (result.c)
 * ====================================================================== */

typedef enum ms_status {
  MS_OK,           /* built (and, after the runner, ran and verified) */
  MS_BUILD_ERROR,  /* the compiler failed or the kernel breaks a target limit */
  MS_RUN_ERROR,    /* launch failure, crash (signal named), device error */
  MS_TIMEOUT,      /* build or run exceeded its time limit */
  MS_WRONG_RESULT, /* output differs from the reference (or was not fully written) */
  MS_TOO_SLOW,     /* stopped early: its checked run passed the bound set by the fastest
                      verified run so far (ms_run_opts_t.slow_factor); not verified */
  MS_STATUS__COUNT
} ms_status_t;

/* "ok", "build_error", "run_error", "timeout", "wrong_result", "too_slow". */
const char *ms_status_name(ms_status_t s);
int ms_status_parse(const char *s, ms_status_t *out);

#define MS_ERROR_MAX 4096 /* error text is cut (with "...") beyond this */
#define MS_PATH_MAX 512

/* What the compiler said about the kernels. Numeric facts are -1 when the
 * backend does not report them (the C compiler reports none). */
typedef struct ms_build_facts {
  int registers;        /* per thread, most over the kernels (CUDA) */
  int64_t shared_bytes; /* static shared / local memory per block, most over the kernels */
  int64_t spill_bytes;  /* spill stores + loads, summed over the kernels (CUDA) */
  int64_t stack_bytes;  /* stack frame, most over the kernels (CUDA) */
  char compiler[128];   /* "gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "NVRTC 13.0", "OpenCL 3.0 PoCL ..." */
  char arch[16];        /* "sm_90", "native", "" */
  double build_secs;    /* wall seconds of the build */
} ms_build_facts_t;

/* One candidate's record.  The builder fills status (OK or an error),
 * build and artifact; the runner (only for status OK) fills the rest. */
typedef struct ms_result {
  ms_status_t status;
  ms_build_facts_t build;
  char artifact[MS_PATH_MAX]; /* built file the worker loads: .so, .cubin or .cl */
  bool ran;                   /* the runner measured it (status OK or WRONG_RESULT after a run) */
  double *run_secs;           /* every timed repeat (malloc'ed; NULL when not timed) */
  int nrepeats;
  /* CPU workers: repeats set aside because another process preempted a
   * thread of the worker during them (run_secs has the others); shared:
   * too few were undisturbed, run_secs has them all and the time says how
   * the machine was shared as much as how fast the candidate is. */
  int disturbed;
  bool shared;
  double median_secs;         /* 0 when not timed */
  double gflops, gbps;        /* from ir_func_flops / ir_func_bytes and the median */
  double verify_error;        /* largest relative L2 error over the outputs; -1 if not verified */
  /* When the candidate had the device: CLOCK_MONOTONIC nanoseconds (one
   * clock for every process of the machine) from the checked run's launch
   * through the warm-up to the end of the last timed repeat; 0 when it
   * never ran (or crashed).  Windows on one device never overlap. */
  int64_t window_start_ns, window_end_ns;
  /* CUDA: the median of the kernels' own durations as CUPTI's activity API
   * recorded them for the same timed launches (summed over a launch's
   * kernels); 0 when CUPTI gave none (not CUDA, not loadable).  The CUDA
   * events also count launch gaps between kernels; a difference over
   * MS_TIMES_DISAGREE of the event median sets times_disagree. */
  double cupti_median_secs;
  bool times_disagree;
  char cupti_error[256]; /* why there is no CUPTI time (said once per runner; empty otherwise) */
  /* With ms_run_opts_t.profile_metrics: JSON text (malloc'ed), {"chip":
   * "GH100", "kernels": [{"name": ..., "metrics": {NAME: value, ...}}, ...]}
   * or {"error": "why not"}; NULL otherwise. */
  char *profile;
  char error[MS_ERROR_MAX];   /* empty when OK */
} ms_result_t;

void ms_result_init(ms_result_t *r);  /* status OK, numeric facts -1, nothing owned */
void ms_result_clear(ms_result_t *r); /* frees run_secs and re-initialises */
/* Sets status and the error text (printf-style; cut to MS_ERROR_MAX). */
void ms_result_fail(ms_result_t *r, ms_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Median of xs[0..n) (mean of the middle two for even n); 0 for n == 0. */
double ms_median(const double *xs, int n);

/* The record as a JSON object (malloc'ed text, free() it):
 * {"status": "ok", "error": "", "median_secs": ..., "run_secs": [...],
 *  "gflops": ..., "gbps": ..., "verify_error": ...,
 *  "disturbed": N, "shared": true (when some repeats were disturbed; see ms_result_t),
 *  "cupti_median_secs": ..., "times_disagree": true (when CUPTI timed it),
 *  "cupti_error": "..." (when CUPTI could not, said once),
 *  "window_ns": [start, end] (when it ran),
 *  "build": {"compiler": ..., "arch": ..., "seconds": ..., "registers": ...,
 *            "shared_bytes": ..., "spill_bytes": ..., "stack_bytes": ...}}
 * Unknown numeric facts (-1) are left out.  NULL only when out of memory. */
char *ms_result_to_json(const ms_result_t *r);
/* Parses that form back (the artifact path is not part of it). */
int ms_result_from_json(const char *text, size_t len, ms_result_t *out, tn_err_t *err);

/* ======================================================================
 * CUPTI (cupti.c)
 * ====================================================================== */

/* libcupti is loaded with dlopen like the driver, never linked: $TUNED_CUPTI
 * when set ("off": CUPTI is not used), else libcupti.so.<CUDA major> beside the libnvrtc in use, in the
 * toolkit's extras/CUPTI/lib64, lib64 or lib (the toolkit of libnvrtc,
 * $CUDA_HOME, -Dctk_root), else on the loader's path. */

/* A CUPTI kernel time that differs from the CUDA-event time by more than
 * this fraction of the event time is flagged. */
#define MS_TIMES_DISAGREE 0.10
/* Whether the two medians disagree; false when either is unknown (<= 0). */
bool ms_times_disagree(double event_secs, double cupti_secs);
/* r's CUPTI median from the CUPTI times secs[0..n) of its timed launches
 * (n == 0: none) and the flag against r->median_secs, which must be set. */
void ms_result_set_cupti(ms_result_t *r, const double *secs, int n);
/* One line on r's CUPTI time for people: "0.512 ms kernel time (CUPTI),
 * 3.1 % below the CUDA events", with "DISAGREE" when flagged, or why there
 * is none; "" when there is nothing to say (not CUDA, said before). */
void ms_cupti_text(const ms_result_t *r, char *buf, size_t size);

/* One kernel's execution as CUPTI recorded it (device nanoseconds). */
typedef struct ms_span {
  uint64_t start, end;
} ms_span_t;
/* The device seconds of the last `want` launches of per_launch kernels each
 * from the kernel records spans[0..n) (any order; sorted here), into
 * out[0..want): each launch's kernels' durations summed.  Returns want, or
 * -1 with why filled when there are too few records. */
int ms_cupti_launch_secs(ms_span_t *spans, int n, int per_launch, int want, double *out, char *why,
                         size_t whysize);

/* The metrics of `tunectl profile`, with Nsight Compute's names: duration,
 * DRAM bytes per second, DRAM and SM throughput in % of peak, achieved
 * occupancy (active warps in % of the maximum), and the tensor pipe's
 * utilization (cycles it was active in % of its peak over the SMs' active
 * cycles: HMMA and, on Hopper, warpgroup MMA alike; CUPTI knows it for
 * every chip from Volta to Blackwell). */
#define MS_PROFILE_NMETRICS 6
extern const char *const ms_profile_metrics[MS_PROFILE_NMETRICS];

/* A range-profiler configuration for a metric list on one chip. */
typedef struct ms_cupti_config {
  uint8_t *image; /* the config image the range profiler is set up with */
  size_t size;
  int passes;     /* replays of a kernel it takes to collect the metrics */
} ms_cupti_config_t;
/* Builds the configuration with CUPTI's profiler host API, which needs no
 * GPU: chip is CUPTI's name ("GH100", "AD102", "GA100").  An unknown chip
 * (the message lists the known ones) or metric (named) is TN_EINVAL; no
 * CUPTI, TN_EUNSUPPORTED saying why. */
int ms_cupti_config(const char *chip, const char *const *metrics, int n, ms_cupti_config_t *out, tn_err_t *err);
void ms_cupti_config_free(ms_cupti_config_t *c);

/* ======================================================================
 * Builders (builder.c, build_cc.c, build_cuda.c, build_opencl.c)
 * ====================================================================== */

/* One pool can serve several searches at once (the daemon's jobs share
 * one): its FIFO interleaves their builds in the order they are queued. */
typedef struct ms_build_opts {
  int nthreads;       /* pool size; 0: one per online core */
  double timeout_s;   /* per build; 0: 30 s */
  const char *run_dir; /* artifacts go to run_dir/bNNNNNN/; NULL: a fresh temp dir, removed on free */
} ms_build_opts_t;

typedef struct ms_builder ms_builder_t;

/* Starts the pool.  A cpu candidate is built by its target's "cc" (gcc,
 * clang, or auto: the system's cc), a cuda-host one by the C++ compiler of
 * that family (g++, clang++, c++); $TUNED_CC ($TUNED_CXX), split on blanks
 * (e.g. "ccache gcc"), replaces either.  When the environment has no POCL_CACHE_DIR, it is set here (and
 * by ms_runner_new) to run_dir/pocl-cache, before the first OpenCL call of
 * the process, and the worker gets the same value, so its rebuild of a
 * source the builder compiled hits PoCL's cache.  PoCL reads the variable
 * once per process: long-running callers should set it themselves (or pass
 * a run_dir that outlives every builder), since a removed run dir's cache is
 * recreated by PoCL. */
int ms_builder_new(const ms_build_opts_t *o, ms_builder_t **out, tn_err_t *err);
/* Whether the compiler that builds target t's candidates is installed (cpu
 * and cuda-host; TN_OK for the other kinds): a missing one is an error
 * naming it, where it was chosen, and how to choose another. */
int ms_compiler_check(const tn_target_t *t, tn_err_t *err);
/* Waits for queued builds and for builds still compiling after they were
 * abandoned (their compilers are killed at the build timeout), then stops
 * the pool, its threads and its build processes. */
void ms_builder_free(ms_builder_t *b);
const char *ms_builder_run_dir(const ms_builder_t *b);

/* Builds n candidates in parallel and waits: results[i] (overwritten: clear
 * earlier records first) gets status OK with
 * the artifact, or BUILD_ERROR / TIMEOUT with the compiler log.  Build errors
 * are never returned as errors: the call fails only on bad arguments.
 *
 * Timeouts: a cc build is killed (its whole process group) at the timeout,
 * and so are CUDA and OpenCL builds: NVRTC and clBuildProgram run in a
 * build process per pool thread (ms_build_proc_t), killed with SIGKILL at
 * the timeout (TIMEOUT, "NVRTC was still compiling after ..." or "the
 * OpenCL compiler was ...") and started anew for the next build; one that
 * dies during a build (a crash, the OOM killer) makes that build a
 * BUILD_ERROR naming the signal.  Should a kill not end a build, a
 * watchdog thread marks it TIMEOUT a little after its deadline, completes
 * it for the waiter, and gives the pool a replacement thread. */
int ms_build_batch(ms_builder_t *b, ms_candidate_t *const *cands, int n, ms_result_t *results,
                   tn_err_t *err);

/* Asynchronous form: queues one build (cand is copied; res is overwritten
 * and must stay valid until the matching wait or ms_builder_free).  Returns a ticket (>= 0) or a negative error. */
int64_t ms_build_submit(ms_builder_t *b, const ms_candidate_t *cand, ms_result_t *res);
/* Blocks until that build is finished (or abandoned at its timeout). */
void ms_build_wait(ms_builder_t *b, int64_t ticket);
/* Waits at most max_s seconds for that build; true once it is finished
 * (still wait for the ticket: that releases it). */
bool ms_build_wait_for(ms_builder_t *b, int64_t ticket, double max_s);
/* Non-blocking: true once the build is finished. */
bool ms_build_done(ms_builder_t *b, int64_t ticket);
/* Withdraws a build that is still queued: it finishes at once as a
 * BUILD_ERROR ("cancelled before it started"), so that a stopped search
 * does not wait behind other jobs' builds in a shared pool.  A build already
 * compiling is left to finish.  Wait for the ticket either way. */
void ms_build_cancel(ms_builder_t *b, int64_t ticket);
/* Withdraws a queued build, or abandons one compiling (BUILD_ERROR "build
 * abandoned": its thread finishes the compile in the background, discards
 * it and is replaced), so that a stopped search waits for no compiler.
 * Wait for the ticket either way (it returns at once). */
void ms_build_abandon(ms_builder_t *b, int64_t ticket);
/* Stops (pause) or continues every compiler process the builders run (cc
 * builds: SIGSTOP/SIGCONT to their process groups), nesting; builds started
 * while paused stop at once, and paused time does not count against build
 * timeouts.  The host CPU's measurer pauses builds while it holds the
 * device (ms_device_acquire), whose cores the compilers would otherwise
 * share.  NVRTC and OpenCL builds are not paused. */
void ms_commands_pause(bool pause);
/* SIGKILLs every worker process, build process and compiler command this
 * process started and has not reaped: for a process about to exit without
 * waiting for the threads that own them (tuned past --stop-timeout). */
void ms_kill_children(void);

/* NVRTC directly (tunectl emit --emit ptx, the builder): compiles CUDA source
 * for arch ("sm_90") and returns PTX (NUL-terminated), the CUBIN and the
 * program log, all malloc'ed.  TN_EUNSUPPORTED without NVRTC in this build or
 * for an architecture NVRTC cannot compile (the message lists those it can);
 * TN_EINVAL with the log for compile errors. */
typedef struct ms_cuda_output {
  char *ptx;
  void *cubin;
  size_t cubin_size;
  char *log;
  char version[32]; /* "NVRTC 13.0" */
  double nvrtc_secs; /* NVRTC's own time (in the build process: without the round trip) */
} ms_cuda_output_t;
int ms_cuda_compile(const char *source, const char *arch, ms_cuda_output_t *out, tn_err_t *err);
/* The architecture a module is built for on target t: sm_90a for Hopper's
 * warpgroup-MMA kernels (cg_module_t's sm90a), else the target's. */
const char *ms_cuda_arch(const tn_target_t *t, bool sm90a);
void ms_cuda_output_free(ms_cuda_output_t *o);
/* The SASS of a CUBIN file by nvdisasm (on PATH, or PyPI's
 * nvidia-cuda-nvdisasm under ~/.local), appended to *sass: TN_EUNSUPPORTED,
 * saying how to install it, when there is none; TN_EIO when it fails. */
int ms_cuda_sass(const char *cubin, double timeout_s, tn_buf_t *sass, tn_err_t *err);

/* NVRTC and the OpenCL compiler in a separate process (build_client.c, build_server.c):
 * `tuned-worker --build`, started with exec at the first compile and
 * serving one compile after another, so that a compile past its time limit
 * can be killed (neither NVRTC nor clBuildProgram can be interrupted), one
 * that crashes or is OOM-killed takes only that process, and nothing of
 * LLVM runs in the caller.  The builder gives each pool thread one; the
 * OpenCL probe (ms_backend_probe) starts one of its own.  Not thread-safe:
 * one thread uses a handle, and the process dies with the thread that
 * started it.  worker NULL: ms_worker_path(); log_path NULL: the process's
 * stderr (NVRTC's fatal messages, such as "LLVM ERROR: out of memory") is
 * dropped, else appended there and quoted when the process dies. */
typedef struct ms_build_proc ms_build_proc_t;
int ms_build_proc_new(const char *worker, const char *log_path, ms_build_proc_t **out, tn_err_t *err);
/* ms_cuda_compile in the process (started, or replaced after it died, as
 * needed): its results and errors, and TN_ERANGE when NVRTC was still
 * compiling after timeout_s (the process was killed with SIGKILL), TN_EIO
 * when the process died during the compile (the message says how: the
 * signal or exit status, and what it printed) or could not start. */
int ms_nvrtc_compile(ms_build_proc_t *p, const char *source, const char *arch, double timeout_s,
                     ms_cuda_output_t *out, tn_err_t *err);
/* The running process's id (0: none), and how many were started. */
int ms_build_proc_pid(const ms_build_proc_t *p);
int ms_build_proc_starts(const ms_build_proc_t *p);
/* Asks the process to exit (killing it if it does not within 2 s). */
void ms_build_proc_free(ms_build_proc_t *p);

/* Facts ptxas printed (--ptxas-options=-v) for one kernel. */
typedef struct ms_ptxas_kernel {
  char name[64];
  int registers;
  int64_t shared_bytes, spill_store_bytes, spill_load_bytes, stack_bytes;
} ms_ptxas_kernel_t;
/* Parses the per-entry blocks of a ptxas -v log into ks (at most max);
 * returns how many kernels were found.  Tolerant of missing fields (0). */
int ms_ptxas_parse(const char *log, ms_ptxas_kernel_t *ks, int max);

/* ======================================================================
 * Runners (runner.c; the worker side is worker.c)
 * ====================================================================== */

typedef struct ms_run_opts {
  double timeout_s;     /* per candidate (verification run + timing); 0: 30 s */
  double min_secs;      /* timed repeats continue until this total; 0: 0.1 s */
  int min_repeats;      /* 0: 3 */
  int max_repeats;      /* 0: 1000 */
  bool flush_l2;        /* overwrite a large buffer between repeats (CUDA 256 MiB, host 64 MiB) */
  bool tf32;            /* float32 outputs checked at IR_TF32_TOLERANCE (a target with allow_tf32) */
  double slow_factor;   /* > 0: a candidate whose checked run takes over slow_factor times the
                           fastest verified run of this workload so far (and over 10 ms: a
                           microsecond kernel's cold first run is easily 10x its warm time) is
                           timed by that run alone (one sample, no warm-up): it cannot win, and repeating a
                           seconds-long kernel costs the search seconds.  A candidate still
                           running at 10 x slow_factor times that fastest run (and at least
                           stop_min_s) after the worker loaded it (its checked run began;
                           loading and compiling do not count) is stopped: its worker is
                           killed and restarted, the candidate reported as MS_TOO_SLOW.  Before any verified run
                           (ms_runner_note_best) neither applies: nothing is stopped before
                           the timeout.  0: off */
  double stop_min_s;    /* floor of that stop; 0: 2 s */
  /* n > 0: every verified candidate is also profiled with these metrics
   * (CUDA: CUPTI's range profiler; ms_result_t.profile) */
  const char *const *profile_metrics;
  int profile_nmetrics;
  const char *worker;   /* worker executable; NULL: ms_worker_path() */
  const char *run_dir;  /* workload data and the worker's log; NULL: a fresh temp dir */
  /* Polled (with stop_ctx) while a candidate waits for its device, which
   * another runner of the process holds: true ends the batch there, that
   * candidate and the later ones not run (ran false).  A cancelled job or a
   * spent time budget stops waiting at once.  NULL: wait as long as it takes. */
  bool (*stop)(void *ctx);
  void *stop_ctx;
  /* Polled during the reference evaluation (ms_runner_set_workload, from the
   * evaluator's threads at once: it must be thread-safe) and every
   * MS_CANCEL_POLL_S while a candidate runs: true abandons the work at once
   * (the evaluation fails with TN_ESTOPPED; the running candidate's worker
   * is killed and the candidate left unrun, ran false, like one that never
   * got its device).  A cancelled job or a daemon shutting down ends here
   * within a fraction of a second.  NULL: nothing is abandoned. */
  bool (*cancel)(void *ctx);
  void *cancel_ctx;
} ms_run_opts_t;

/* How often a running candidate's wait asks ms_run_opts_t.cancel. */
#define MS_CANCEL_POLL_S 0.05

typedef struct ms_runner ms_runner_t;

/* Finds tuned-worker: $TUNED_WORKER, else next to the running executable
 * (same directory, ../measure/ in the build tree, ../libexec/tuned/,
 * ../bin/), then the same places next to the shared library this code is in
 * (libtuned_local loaded by python: a wheel's tuned/_native/lib/), then the
 * installed bindir.  Fills buf; TN_EIO naming the places looked at when
 * absent. */
int ms_worker_path(char *buf, size_t size, tn_err_t *err);

int ms_runner_new(const ms_run_opts_t *o, ms_runner_t **out, tn_err_t *err);
/* Stops the worker and removes the temp dir it created. */
void ms_runner_free(ms_runner_t *r);
/* Starts the worker now (otherwise it starts at the first run). */
int ms_runner_start(ms_runner_t *r, tn_err_t *err);
/* Asks the worker to exit (kills it if it does not within a second). */
void ms_runner_stop(ms_runner_t *r);
/* Process id of the current worker, 0 when none runs. */
int ms_runner_worker_pid(const ms_runner_t *r);
/* How many times a worker was started (tests count restarts). */
int ms_runner_worker_starts(const ms_runner_t *r);

/* Prepares the workload: inputs from ir_data_new(f, seed), reference outputs
 * from ir_eval (in this process: the evaluator never runs candidate code;
 * stopped with TN_ESTOPPED when the run options' cancel says so),
 * both in the parameters' dtypes in one file the worker maps.  Keeps the
 * workload's FLOP and byte counts for GFLOP/s and GB/s. */
int ms_runner_set_workload(ms_runner_t *r, const ir_func_t *f, uint64_t seed, tn_err_t *err);

/* The fastest verified median of the workload so far, which slow_factor's
 * bounds derive from (0: none yet).  The runner lowers it with every
 * verified run; note_best lowers it with a time measured elsewhere (the
 * database's best of an earlier run) and set_best replaces it (0: no
 * bounds, e.g. for the unscheduled program, which is expected to be slow).
 * ms_runner_set_workload resets it to 0. */
double ms_runner_best(const ms_runner_t *r);
void ms_runner_note_best(ms_runner_t *r, double secs);
void ms_runner_set_best(ms_runner_t *r, double secs);

/* How long later candidates are timed: repeats until min_secs in total, at
 * most max_repeats (never below min_repeats); the previous values go to
 * *old_min_secs and *old_max_repeats (may be NULL).  The search's
 * re-measure spreads one candidate's timing over its rounds with it. */
void ms_runner_set_timing(ms_runner_t *r, double min_secs, int max_repeats, double *old_min_secs,
                          int *old_max_repeats);

/* Runs every candidate whose result has status OK (built), one after the
 * other in the worker, filling the run part of results[i].  Each candidate
 * holds its device (ms_device_acquire) from its request to the worker's
 * reply, so its timing never overlaps another runner's on that device; a
 * stop while waiting for it ends the call (TN_OK, the rest not run).
 * Candidate failures (crash, hang, wrong output, parameter mismatch) are
 * recorded in the result and the batch continues; the call fails only when
 * no workload is set or the worker cannot be started at all. */
int ms_runner_run_batch(ms_runner_t *r, ms_candidate_t *const *cands, ms_result_t *results, int n,
                        tn_err_t *err);

/* ======================================================================
 * Devices (device.c): one measurer per device
 * ====================================================================== */

/* A kernel timed while another runs on the same device shares its cores,
 * caches or SMs, and both times are wrong.  So the process keeps one
 * measurer per device, and every runner (every job of the daemon, each with
 * its own worker process) takes the device before a candidate's request and
 * gives it back after the reply: candidates are timed one at a time per
 * device, waiters served first come, first served.  While the host CPU is
 * held, the builders' compiler processes are paused (ms_commands_pause):
 * they would share its cores.
 *
 * Devices: "cpu" (cpu and cuda-host targets, and OpenCL when its device is
 * a CPU, as PoCL's is: it runs on the same cores), "opencl:0" (another
 * OpenCL device: the first one of the first platform, which the worker
 * uses) and "cuda:0" (the worker's CUDA device). */

#define MS_DEVICE_NAME_MAX 32

typedef struct ms_device ms_device_t;

/* The device that runs candidates of target t, into buf ("cpu", ...). */
void ms_device_name(const tn_target_t *t, char *buf, size_t size);
/* The process's measurer of the named device: created at first use, kept
 * until exit (names are cut to MS_DEVICE_NAME_MAX - 1 bytes). */
ms_device_t *ms_device_get(const char *name);
/* Waits until the calling thread holds d, first come, first served.  While
 * waiting, stop(ctx) (stop may be NULL) is polled every 10 ms outside any
 * lock; when it returns true the thread leaves the queue and false is
 * returned.  Not re-entrant: a holder must not ask for d again. */
bool ms_device_acquire(ms_device_t *d, bool (*stop)(void *ctx), void *ctx);
/* Gives d to the next waiter. */
void ms_device_release(ms_device_t *d);

/* ======================================================================
 * All at once (measure.c)
 * ====================================================================== */

typedef struct ms_options {
  ms_build_opts_t build;
  ms_run_opts_t run;
  uint64_t seed; /* input data seed */
} ms_options_t;

/* Builds and runs modules lowered from `f` for target t (one builder, one
 * runner, one temp dir, all freed on return).  results[i] is each module's
 * record (ms_result_clear them).  Fails only when nothing can be measured
 * (no worker, the reference evaluation fails); candidate errors are records. */
int ms_measure(const ir_func_t *f, const tn_target_t *t, cg_module_t *const *mods, int n,
               const ms_options_t *o, ms_result_t *results, tn_err_t *err);

#endif
