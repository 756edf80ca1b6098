/* tuned.h — libtuned, the C client library of the tuned daemon: connect to
 * its unix socket, call JSON-RPC methods, submit tuning jobs, wait for them
 * and fetch the best kernel with its launch configuration.  Prefix: tuned_.
 *
 * Depends only on libc (and cJSON inside the library).  A tuned_client_t is
 * one connection; use it from one thread at a time (open one per thread).
 * Every function returns 0 or a negative TUNED_E* code and, when err is not
 * NULL, fills it with a message that says what went wrong.  The protocol is
 * docs/protocol.md: JSON-RPC 2.0, one message per line. */
#ifndef TUNED_CLIENT_H
#define TUNED_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TUNED_API __attribute__((visibility("default")))
#else
#define TUNED_API
#endif

#define TUNED_VERSION_STRING "0.1.0"

/* A workload's hash (its identity: BLAKE2b-256 of its structure) is 64
 * lower-case hex digits; TUNED_HASH_SIZE holds them and a NUL.  Where a
 * hash is taken, a prefix of at least TUNED_HASH_SHOWN digits (128 bits,
 * as tables show it) names the one workload that starts with it. */
#define TUNED_HASH_SIZE 65
#define TUNED_HASH_SHOWN 32

/* TUNED_HASH_SIZE of the library loaded: bindings (Python's ctypes) check it,
 * since the structs that hold a hash grew with it (libtuned.so.1). */
TUNED_API int tuned_hash_size(void);

/* Error codes returned by every function (0 is success). */
enum {
  TUNED_E_CONNECT = -1,  /* the socket cannot be reached (no daemon?) */
  TUNED_E_IO = -2,       /* reading or writing the socket failed / the daemon hung up */
  TUNED_E_PROTOCOL = -3, /* the daemon's answer is not what the protocol says */
  TUNED_E_RPC = -4,      /* the daemon answered with a JSON-RPC error (see rpc_code) */
  TUNED_E_INVALID = -5,  /* bad argument */
  TUNED_E_TIMEOUT = -6,  /* no answer within the client's timeout */
  TUNED_E_NOMEM = -7,
};

/* JSON-RPC error codes the daemon uses (tuned_error_t.rpc_code). */
enum {
  TUNED_RPC_PARSE_ERROR = -32700,
  TUNED_RPC_INVALID_REQUEST = -32600,
  TUNED_RPC_METHOD_NOT_FOUND = -32601,
  TUNED_RPC_INVALID_PARAMS = -32602,
  TUNED_RPC_INTERNAL = -32603,
  TUNED_RPC_NOT_FOUND = -32001,      /* job, workload or record */
  TUNED_RPC_BAD_WORKLOAD = -32002,   /* the workload text does not parse */
  TUNED_RPC_TARGET_REFUSED = -32003,
  TUNED_RPC_NO_KERNEL = -32004,      /* nothing tuned yet for the workload/target */
  TUNED_RPC_SHUTTING_DOWN = -32005,
};

typedef struct tuned_error {
  int code;          /* a TUNED_E_* code, 0 when none */
  int rpc_code;      /* with TUNED_E_RPC: the JSON-RPC error code; else 0 */
  char message[1024];
  int sys_errno;     /* with TUNED_E_CONNECT: connect()'s errno (ENOENT, ECONNREFUSED: no daemon; EACCES:
                        not allowed), 0 when the daemon was reached but refused (another user's) */
} tuned_error_t;

typedef struct tuned_client tuned_client_t;

/* The socket path a client uses when given none, as the daemon resolves it:
 * $TUNED_SOCKET, else $XDG_RUNTIME_DIR/tuned/tuned.sock, else
 * /tmp/tuned-$UID/tuned.sock.  Writes at most size bytes (with the NUL);
 * TUNED_E_INVALID when it does not fit. */
TUNED_API int tuned_default_socket(char *buf, size_t size);

/* Connects to the daemon at socket_path (NULL or "": the default above).
 * TUNED_E_CONNECT when nothing listens there, or when the process that
 * listens runs as another user (root excepted); the message names the path. */
TUNED_API int tuned_connect(const char *socket_path, tuned_client_t **out, tuned_error_t *err);
TUNED_API void tuned_close(tuned_client_t *c); /* NULL is fine */
TUNED_API const char *tuned_socket_path(const tuned_client_t *c);

/* Seconds to wait for each answer (0, the default: wait forever).  A call
 * that times out leaves the connection unusable: close it. */
TUNED_API void tuned_set_timeout(tuned_client_t *c, double seconds);

/* Calls `method` with params (a JSON object or array text; NULL: none) and
 * sets *result_json to the result's JSON text (malloc'ed; free() it).  A
 * JSON-RPC error answer returns TUNED_E_RPC with err->rpc_code and the
 * daemon's message.  Notifications arriving meanwhile are skipped. */
TUNED_API int tuned_call(tuned_client_t *c, const char *method, const char *params_json,
                         char **result_json, tuned_error_t *err);

/* ---- workloads ---------------------------------------------------------- */

/* The structural hash of a workload text with its parameter overrides
 * (params_json, e.g. {"M": 64}; NULL: none), as the daemon computes it
 * (workload.check): the key its records are stored under, for calls that
 * take a hash (db.best, db.records, tuned_kernel_get).  Writes 64 hex digits
 * + NUL.  A text that does not parse is TUNED_E_RPC with rpc_code
 * TUNED_RPC_BAD_WORKLOAD and the parser's message. */
TUNED_API int tuned_workload_hash(tuned_client_t *c, const char *workload_text, const char *params_json,
                                  char hash[TUNED_HASH_SIZE], tuned_error_t *err);

/* ---- jobs --------------------------------------------------------------- */

typedef struct tuned_submit {
  const char *workload;    /* workload-language text (required) */
  const char *name;        /* NULL: the daemon's default */
  const char *params_json; /* parameter overrides, e.g. {"M": 64}; NULL: none */
  const char *target;      /* NULL: the daemon's target */
  int trials;              /* 0: the daemon's default */
  double seconds;          /* wall-time budget; 0: none */
  int64_t seed;            /* < 0: the daemon's default */
  const char *strategy;    /* "evolutionary" | "replay"; NULL: default */
  const char *model;       /* "xgb" | "random"; NULL: default */
  int remeasure;           /* best candidates re-measured at the end; < 0: the daemon's default (8), 0: none */
  int baseline;            /* measure the unscheduled program: < 0 default (yes), 0 no, > 0 yes */
  int allow_tf32;          /* non-zero: the target (given or the daemon's) + "+tf32": float32 matmuls may use
                              TF32 tensor cores */
} tuned_submit_t;

/* A tuned_submit_t with the defaults above (seed, remeasure and baseline -1,
 * everything else 0/NULL). */
TUNED_API tuned_submit_t tuned_submit_defaults(void);

/* Submits a tuning job; sets *job to its id and, when hash is not NULL, the
 * workload's structural hash (64 hex digits + NUL). */
TUNED_API int tuned_submit(tuned_client_t *c, const tuned_submit_t *s, int64_t *job, char hash[TUNED_HASH_SIZE],
                           tuned_error_t *err);

typedef enum tuned_job_state {
  TUNED_JOB_QUEUED,
  TUNED_JOB_RUNNING,
  TUNED_JOB_DONE,
  TUNED_JOB_CANCELLED,
  TUNED_JOB_FAILED,
  TUNED_JOB_UNKNOWN, /* a state this library does not know */
} tuned_job_state_t;

typedef struct tuned_job {
  int64_t id;
  tuned_job_state_t state;
  char state_name[16];
  char workload[TUNED_HASH_SIZE]; /* hash */
  char name[64];
  char target[64];
  int64_t trials, trials_done;
  double seconds;
  int64_t best_record;     /* 0: no verified kernel yet */
  double best_median_secs, best_gflops;
  int64_t build_errors, run_errors, timeouts, wrong_results;
  char error[512];         /* "" when none */
  int64_t too_slow;        /* candidates stopped early, far slower than the best so far */
  double baseline_median_secs, baseline_gflops; /* the unscheduled program; 0: not measured (yet) */
  /* The job's first failed trial (0: none failed), its kind ("build_error",
   * "run_error", "timeout", "wrong_result") and error text (cut to fit):
   * why a job that ended done with no best_record found no kernel. */
  int64_t first_failure_trial;
  char first_failure_status[16];
  char first_failure[1024];
} tuned_job_t;

/* True for done, cancelled and failed. */
TUNED_API int tuned_job_finished(const tuned_job_t *j);
TUNED_API const char *tuned_job_state_name(tuned_job_state_t s);

/* Fills out from a job object's JSON text (as tune.status returns). */
TUNED_API int tuned_job_parse(const char *json, tuned_job_t *out, tuned_error_t *err);

TUNED_API int tuned_job_status(tuned_client_t *c, int64_t job, tuned_job_t *out, tuned_error_t *err);
TUNED_API int tuned_cancel(tuned_client_t *c, int64_t job, tuned_job_t *out, tuned_error_t *err);

/* Called with the job after every measured batch (and once at the start). */
typedef void (*tuned_progress_fn)(const tuned_job_t *job, void *ctx);

/* Waits until the job is done, cancelled or failed (through tune.watch; by
 * polling tune.status every half second when the daemon has no tune.watch)
 * and fills final (may be NULL).  timeout_s 0 waits forever; otherwise
 * TUNED_E_TIMEOUT after that long (the connection is then unusable).
 * Returns 0 whatever the final state is: check final->state. */
TUNED_API int tuned_wait(tuned_client_t *c, int64_t job, double timeout_s, tuned_progress_fn progress,
                         void *ctx, tuned_job_t *final, tuned_error_t *err);

/* Called with the job and its JSON object's text as the daemon sent it. */
typedef void (*tuned_progress_json_fn)(const tuned_job_t *job, const char *job_json, void *ctx);

/* tuned_wait, with each job object's JSON text as well (the daemon's
 * unchanged: `tunectl watch --json` prints them as JSON lines). */
TUNED_API int tuned_wait_json(tuned_client_t *c, int64_t job, double timeout_s, tuned_progress_json_fn progress,
                              void *ctx, tuned_job_t *final, tuned_error_t *err);

/* ---- kernels ------------------------------------------------------------ */

/* A TMA tensor map that a CUDA kernel takes after the params, by value
 * (Hopper GEMMs that copy by TMA): make it with cuTensorMapEncodeTiled over
 * param `param`'s device buffer, rank 2, unit element strides, no
 * interleave or L2 promotion, zero fill (docs/protocol.md, "A kernel"). */
typedef struct tuned_tensor_map {
  char *name;               /* the kernel parameter's name */
  int param;                /* index into the kernel's params */
  int64_t dims[2];          /* elements: the contiguous dimension, then the rows */
  int64_t stride_bytes;     /* from one row to the next */
  int box[2];               /* elements a copy brings along dims[0] and dims[1] */
  int swizzle;              /* bytes: 0 (none), 32, 64 or 128 */
} tuned_tensor_map_t;

typedef struct tuned_launch {
  char *name;               /* kernel (CUDA/OpenCL) or function (C) name */
  int64_t grid[3], block[3];
  int64_t shared_bytes;     /* dynamic shared memory to pass at launch */
  int64_t static_shared_bytes;
  tuned_tensor_map_t *tensor_maps; /* arguments after the params, in order (NULL: none) */
  int ntensor_maps;
} tuned_launch_t;

#define TUNED_MAX_DIMS 8

typedef struct tuned_param {
  char *name;
  char *dtype;              /* "float32", "float16", "int32", ... */
  int ndim;
  int64_t shape[TUNED_MAX_DIMS];
  char *role;               /* "input", "output", "workspace" (scratch the caller allocates) or "packed" */
  int64_t elements;         /* elements to allocate: the product of the shape, or more for a packed copy whose
                               rows are padded */
  int elem_bytes;           /* size of one element, 0 for an unknown dtype */
  /* role "packed" (a hoisted packing of a const input): the input it holds
   * and the source's function int <pack_function>(const T *input, T *packed)
   * that fills it; call it once per weight (again only when the weight
   * changes) and pass the copy to every call of the kernel.  NULL for other
   * roles. */
  char *packs;
  char *pack_function;
} tuned_param_t;

typedef struct tuned_kernel {
  int64_t record;           /* the tuning record it comes from */
  char *workload;           /* hash, "" when the daemon did not say */
  char *name;               /* the workload's name, "" when the daemon did not say */
  char *target;
  char *language;           /* "c", "cuda" or "opencl" */
  char *entry;              /* the C function / the kernels' common prefix */
  char *source;
  double median_secs, gflops;
  tuned_launch_t *kernels;  /* launch these in order, all with the same arguments */
  int nkernels;
  tuned_param_t *params;    /* the arguments of every kernel, in order */
  int nparams;
  char *ptx;                /* CUDA: PTX text; NULL otherwise */
  unsigned char *cubin;     /* CUDA: the CUBIN, decoded; NULL otherwise */
  size_t cubin_size;
  char *launch_json;        /* the launch configuration as the daemon sent it */
  char *trace_json;         /* the schedule trace; NULL when absent */
  char *fallback_json;      /* NULL, or a fallback's origin: {"workload": HASH, "params": {...},
                               "record": ID, "median_secs": its time at its own shape, "verified": true,
                               "unscheduled_median_secs", "slower_than_unscheduled"} */
  char *unscheduled_json;   /* NULL, or (record 0: the unscheduled program served because the best record
                               is slower) {"median_secs", "best_record": ID, "best_median_secs"} */
} tuned_kernel_t;

/* The best kernel of a workload (by hash, or a prefix of at least
 * TUNED_HASH_SHOWN digits) on target (NULL: the daemon's). */
TUNED_API int tuned_kernel_get(tuned_client_t *c, const char *workload_hash, const char *target,
                               tuned_kernel_t **out, tuned_error_t *err);
/* The same, naming the workload by its text and parameter overrides. */
TUNED_API int tuned_kernel_get_text(tuned_client_t *c, const char *workload_text, const char *params_json,
                                    const char *target, tuned_kernel_t **out, tuned_error_t *err);
/* The same; with nearest, a shape without a verified record gets the best
 * record of the nearest tuned shape of the same text (nearest != 0), replayed, built,
 * verified and timed on this shape by the daemon (fallback_json says so). */
TUNED_API int tuned_kernel_get_nearest(tuned_client_t *c, const char *workload_text, const char *params_json,
                                       const char *target, int nearest, tuned_kernel_t **out,
                                       tuned_error_t *err);
/* Builds a kernel from kernel.get's result JSON text. */
TUNED_API int tuned_kernel_parse(const char *json, tuned_kernel_t **out, tuned_error_t *err);
TUNED_API void tuned_kernel_free(tuned_kernel_t *k); /* NULL is fine */

/* Decodes base64 (RFC 4648, padding optional, whitespace ignored) into a
 * malloc'ed buffer; TUNED_E_INVALID on a bad character. */
TUNED_API int tuned_base64_decode(const char *text, unsigned char **out, size_t *len, tuned_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
