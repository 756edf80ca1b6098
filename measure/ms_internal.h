/* ms_internal.h — measure/ internals shared by the builder, the runner and
 * the worker: files and directories, the framed pipe protocol, dtype
 * conversion, child processes.  Not a public header. */
#ifndef TUNED_MS_INTERNAL_H
#define TUNED_MS_INTERNAL_H

#include <cJSON.h>
#include <sys/types.h>

#include "measure.h"

/* ---- files and directories (util.c) --------------------------------------- */

/* Longest run directory: files under it (".../b000001/cand.cubin") fit MS_PATH_MAX. */
#define MS_DIR_MAX 384

/* mkdir -p. */
int ms_mkdirs(const char *path, tn_err_t *err);
/* rm -rf (best effort; never follows symlinks out of the tree). */
void ms_remove_tree(const char *path);
int ms_write_file(const char *path, const void *data, size_t n, tn_err_t *err);

/* Sets POCL_CACHE_DIR once per process (when the environment has none) to
 * the per-user cache (~/.cache/tuned/pocl), else to fallback; returns the
 * value in effect afterwards. */
const char *ms_pocl_cache_init(const char *fallback);

/* ---- child processes (util.c) --------------------------------------------- */

/* Seconds on a clock that stands still while commands are paused
 * (ms_commands_pause): timeouts of commands, and of cc builds, use it. */
double ms_active_clock(void);
/* Keeps a started worker's pid (add) or forgets a reaped one, for
 * ms_kill_children. */
void ms_track_worker(pid_t pid, bool add);
/* Runs argv (PATH search) in its own process group with stdout+stderr
 * captured into log (cut to max_log bytes), killing the group after
 * timeout_s of unpaused time; with tmpdir, TMPDIR is set to it (a
 * compiler's temp files then go with the build's directory, also when the
 * compiler is killed before it removes them).  Returns 0 when the child ran
 * to completion (then *status is its wait status), TN_ERANGE on timeout,
 * TN_EIO when it could not start. */
int ms_run_command(char *const argv[], const char *tmpdir, double timeout_s, tn_buf_t *log, size_t max_log,
                   int *status, tn_err_t *err);
/* environ with NAME=value in place of any NAME entry; entry (size bytes)
 * holds the new entry.  The caller frees the array (not its strings). */
char **ms_environ_with(const char *name, const char *value, char *entry, size_t size);
/* Reaps a process spawned by ms_spawn_worker that failed its hello and
 * returns true when it had died by a signal of its own accord (waited for
 * 0.2 s: its socket can close before it can be waited for); otherwise it is
 * killed and reaped here, and false returned.  Such a process (killed while
 * it started, by an operator or the OOM killer) is started again, up to
 * MS_START_TRIES starts in all (the worker's and the build process's). */
#define MS_START_TRIES 3
bool ms_reap_failed_start(pid_t pid);
/* Starts a helper process (tuned-worker) with exec: fd 0 is sock (one end
 * of a socketpair), fds 1 and 2 append to log_path (NULL: /dev/null), no
 * other file of the caller is inherited, signals unblocked and SIGPIPE at
 * its default; env NULL is this process's environment.  TN_EIO when it
 * cannot start. */
int ms_spawn_worker(char *const argv[], char *const env[], int sock, const char *log_path, pid_t *pid,
                    tn_err_t *err);
/* "SIGSEGV (Segmentation fault)". */
void ms_signal_text(int sig, char *buf, size_t size);

/* ---- dtypes (util.c) ------------------------------------------------------- */

/* Converts doubles to a parameter's storage (float16 as IEEE half bits,
 * bool as one byte) and back. */
void ms_to_dtype(ir_dtype_t t, const double *src, int64_t n, void *dst);
void ms_from_dtype(ir_dtype_t t, const void *src, int64_t n, double *dst);

/* ---- framed protocol (proto.c; format documented in worker.c) -------------- */

#define MS_FRAME_MAX ((size_t)64 << 20)

/* Writes one frame: 4-byte little-endian length, then the JSON text. */
int ms_frame_send(int fd, const cJSON *msg, tn_err_t *err);
/* Reads one frame; deadline is tn_now() seconds (<= 0: wait forever).
 * TN_ERANGE on timeout, TN_EIO on EOF or a broken frame (err says which). */
int ms_frame_recv(int fd, double deadline, cJSON **out, tn_err_t *err);
/* The same for raw bytes (a frame whose length a JSON message announced):
 * *out is malloc'ed, NUL-terminated after its *len bytes. */
int ms_frame_send_bytes(int fd, const void *data, size_t n, tn_err_t *err);
int ms_frame_recv_bytes(int fd, double deadline, char **out, size_t *len, tn_err_t *err);
/* A message's string member; NULL when absent or not a string. */
const char *ms_frame_str(const cJSON *msg, const char *key);

/* ---- builder backends (build_*.c) ----------------------------------------- */

/* One build: cand into dir (which exists), facts and artifact into res.
 * `abandoned` is polled where possible (after the compiler returns). */
void ms_build_c(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res);
/* cuda-host: the CUDA source as C++ with the harness header and a launcher. */
void ms_build_cuda_host(const ms_candidate_t *cand, const char *dir, double timeout_s, ms_result_t *res);
/* cuda: NVRTC in the build process proc (killed at timeout_s). */
void ms_build_cuda(const ms_candidate_t *cand, const char *dir, ms_build_proc_t *proc, double timeout_s,
                   ms_result_t *res);
/* opencl: clBuildProgram in the build process proc (killed at timeout_s). */
void ms_build_opencl(const ms_candidate_t *cand, const char *dir, ms_build_proc_t *proc, double timeout_s,
                     ms_result_t *res);

/* The main loop of `tuned-worker --build PARENT_PID` (build_server.c). */
int ms_build_serve(int argc, char **argv);
/* One request to the build process (started, or replaced after it died, as
 * needed), what being "NVRTC" or "OpenCL" (for the messages): TN_OK with
 * *reply, TN_ERANGE when no reply came within timeout_s (the process was
 * killed), TN_EIO when the process died or could not start. */
int ms_build_proc_call(ms_build_proc_t *p, const cJSON *req, const char *what, double timeout_s, cJSON **reply,
                       tn_err_t *err);
/* Whether the last call's process died of a SIGKILL that the caller did
 * not send (the OOM killer, a user): not the compile's fault by itself. */
bool ms_build_proc_killed(const ms_build_proc_t *p);
/* In the build process: answers an "opencl" or "opencl_probe" request
 * (build_opencl.c). */
cJSON *ms_opencl_serve(const cJSON *req);
/* The OpenCL probe, asked of a build process (build_opencl.c); cpu: whether
 * the device is a CPU. */
void ms_opencl_probe(ms_backend_status_t *st, bool *cpu);

/* Whether the OpenCL device the builder and the worker use (the first one of
 * the first platform that has one) is a CPU, as PoCL's is; false without
 * OpenCL or a device.  Decides the device an OpenCL candidate is timed on.
 * Probed once per process, in a build process. */
bool ms_opencl_device_is_cpu(void);

/* Checks threads per block against the target (GPU kernels); 0 or sets res. */
int ms_check_block_limits(const ms_candidate_t *cand, ms_result_t *res);

/* ---- CUPTI in the worker (cupti.c) ---------------------------------------- */

/* Loads CUPTI and records every kernel's duration from now on (the activity
 * API's concurrent-kernel records); -1 with the reason in why. */
int ms_cupti_trace_start(char *why, size_t whysize);
void ms_cupti_trace_stop(void);
/* Forgets the records so far (call with the device idle). */
void ms_cupti_trace_reset(void);
/* After a synchronise: the last `want` launches' device seconds since the
 * reset (see ms_cupti_launch_secs), into out; then forgets the records. */
int ms_cupti_trace_take(int per_launch, int want, double *out, char *why, size_t whysize);
/* Runs launch(arg) once under the range profiler on CUDA context ctx (one
 * auto range per kernel, kernel replay) and evaluates metrics[0..n) for
 * each kernel: values[k * n + m], *nranges kernels (at most max_ranges).
 * chip gets CUPTI's chip name.  -1 with why filled on failure. */
int ms_cupti_profile(void *ctx, const char *const *metrics, int n, int (*launch)(void *arg), void *arg,
                     int max_ranges, double *values, int *nranges, char *chip, size_t chipsize, char *why,
                     size_t whysize);

#endif
