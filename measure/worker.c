/* worker.c — tuned-worker, the process that runs candidate kernels, so that
 * a crash, a hang or a sticky device error never takes down the caller.
 *
 * Started by the runner (runner.c) with posix_spawn: fd 0 is a Unix stream
 * socket to the runner, fds 1 and 2 go to a log file (candidates that print
 * cannot disturb the protocol).  The worker serves requests one at a time
 * and exits at EOF, on {"op": "exit"}, or after replying to a request that
 * left the device unusable.
 *
 * Framing, both directions: a 4-byte little-endian length N (1 .. 64 MiB),
 * then N bytes of one JSON object.
 *
 * Requests and replies:
 *   {"op": "hello"}
 *     -> {"ok": true, "pid": 1234, "version": "0.1.0"}
 *   {"op": "load", "data": "/run/dir/workload-1.bin",
 *    "params": [{"name": "A", "dtype": "float32", "numel": 16384,
 *                "role": "input" | "output", "offset": 0,
 *                "tolerance": 1e-4 (outputs; default: the dtype's)}, ...]}
 *     The data file (written by the runner, mapped read-only here) holds at
 *     `offset` each input's values, or each output's reference values, in
 *     the parameter's dtype (float16 as IEEE half bits, bool as bytes);
 *     offsets are page-aligned, so a candidate writing into an input faults.
 *     -> {"ok": true} | {"ok": false, "error": "..."}
 *   {"op": "run", "backend": "cpu" | "opencl" | "cuda",
 *    "artifact": "/run/dir/b000001/cand.so" (| cand.cl | cand.cubin),
 *    "kernels": [{"name": "...", "grid": [x, y, z], "block": [x, y, z],
 *                 "dyn_shared_bytes": 0,
 *                 "tensor_maps": [{"arg": 0, "elem_bytes": 2, "dims": [K, M], "stride_bytes": 2K,
 *                                  "box": [64, 128], "swizzle": 128}] (optional: TMA tensor maps made
 *                   from the argument's device buffer, passed after the arguments)}, ...],
 *    "args": [{"param": 0}, ..., {"workspace": 65536}],
 *    "pack": "tuned_pack_<entry>" (optional, cpu: run once at load, on the
 *      same arguments, to fill the packed copies of constant inputs; the
 *      workspaces are poisoned first, so a copy it leaves unwritten fails
 *      verification),
 *    "min_secs": 0.1, "min_repeats": 3, "max_repeats": 1000, "flush_l2": false,
 *    "slow_secs": 0.05 (optional), "notify_start": true (optional),
 *    "profile": ["gpu__time_duration.sum", ...] (optional)}
 *     Poisons the outputs (0xFF bytes: NaN for floats, -1 for ints), runs
 *     every kernel once, compares each output with its reference (relative
 *     L2 error within the parameter's tolerance), then runs once more untimed
 *     (warm-up) and times repeats until min_secs in total and at least
 *     min_repeats, at most max_repeats.  When the checked run took longer
 *     than slow_secs, its time is the only sample (no warm-up, no repeats).
 *     With notify_start, {"started": true} comes first, once the candidate
 *     is loaded (dlopen, OpenCL program build, CUDA module load) and before
 *     its checked run: the runner's early stop counts from there.
 *     With profile, a verified candidate is then run once more under the
 *     hardware profiler (CUDA: CUPTI's range profiler, one range per
 *     kernel) and the metrics are evaluated.
 *     A repeat during which a thread of the worker was preempted by another
 *     process is set aside (and more are run, within 4 min_secs): run_secs
 *     holds the undisturbed repeats, "disturbed" (when any) counts the
 *     others, and "shared": true says too few were undisturbed to tell, so
 *     run_secs holds every repeat.
 *     -> {"status": "ok", "verify_error": 1e-7, "run_secs": [...],
 *         "disturbed": 3, "shared": true,
 *         "window_ns": [start, end],
 *         "cupti_secs": [...] (CUDA: the kernels' own durations of the same
 *           samples, from CUPTI's activity records)
 *         | "cupti_error": "why there are none" (CUDA),
 *         "profile": {"chip": "GH100", "kernels": [{"name": ..., "metrics":
 *           {"gpu__time_duration.sum": ..., ...}}]} | {"error": "..."}}
 *      | {"status": "wrong_result", "verify_error": 0.5, "error": "...", "window_ns": [...]}
 *     window_ns: CLOCK_MONOTONIC nanoseconds from the checked run's launch
 *     to the end of the last timed repeat (or of the verification).
 *      | {"status": "run_error", "error": "...", "fatal": true|false}
 *   {"op": "exit"} -> (no reply) the worker exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tuned_config.h"
#include "worker.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define FLUSH_BYTES ((size_t)64 << 20)

int wk_fail(wk_err_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

void wk_flush_host_cache(void) {
  static unsigned char *buf;
  static unsigned char round;
  if (!buf && !(buf = malloc(FLUSH_BYTES))) return;
  memset(buf, ++round, FLUSH_BYTES);
  __asm__ volatile("" : : "r"(buf) : "memory"); /* keep the stores */
}

static wk_workload_t W;
static int backend_bound_gen[MS_BACKEND__COUNT];
static bool backend_ready[MS_BACKEND__COUNT];

static const wk_backend_t *backend_named(const char *name, ms_backend_t *which) {
  static const wk_backend_t *const all[] = {&wk_cpu_backend, &wk_opencl_backend, &wk_cuda_backend};
  for (int i = 0; i < MS_BACKEND__COUNT; i++)
    if (strcmp(all[i]->name, name) == 0) {
      *which = (ms_backend_t)i;
      return all[i];
    }
  return NULL;
}

/* ---- messages ------------------------------------------------------------ */

static double jnum(const cJSON *o, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void reply(cJSON *msg) {
  tn_err_t err = {0};
  if (ms_frame_send(0, msg, &err) < 0) exit(2); /* the runner is gone */
  cJSON_Delete(msg);
}

static void reply_error(const char *status, const wk_err_t *e) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "status", status);
  cJSON_AddStringToObject(r, "error", e->msg);
  cJSON_AddBoolToObject(r, "fatal", e->fatal);
  reply(r);
  if (e->fatal) exit(3);
}

/* ---- load ------------------------------------------------------------------ */

static void unload_workload(void) {
  for (int i = 0; i < W.nparams; i++) free(W.params[i].host);
  free(W.params);
  if (W.map) munmap(W.map, W.map_size);
  int gen = W.gen;
  memset(&W, 0, sizeof W);
  W.gen = gen;
}

static int parse_param(const cJSON *p, wk_param_t *out, wk_err_t *e) {
  const char *name = ms_frame_str(p, "name"), *dtype = ms_frame_str(p, "dtype"), *role = ms_frame_str(p, "role");
  double numel = jnum(p, "numel", -1), off = jnum(p, "offset", -1);
  if (!name || !dtype || !role || ir_dtype_parse(dtype, &out->dtype) < 0 || numel < 1 || off < 0)
    return wk_fail(e, "load: parameter needs name, dtype, role, numel >= 1 and offset >= 0");
  snprintf(out->name, sizeof out->name, "%s", name);
  out->numel = (int64_t)numel;
  out->bytes = (size_t)out->numel * (size_t)ir_dtype_bytes(out->dtype);
  out->output = strcmp(role, "output") == 0;
  /* the runner's tolerance (TF32 targets relax float32's), at most 1 */
  out->tolerance = jnum(p, "tolerance", ir_dtype_tolerance(out->dtype));
  if (!(out->tolerance >= 0 && out->tolerance <= 1))
    return wk_fail(e, "load: parameter %s: tolerance must be in [0, 1]", name);
  if (off + (double)out->bytes > (double)W.map_size)
    return wk_fail(e, "load: parameter %s (%zu bytes at %.0f) lies outside the %zu-byte data file", name,
                   out->bytes, off, W.map_size);
  out->data = (const char *)W.map + (size_t)off;
  if (out->output && !(out->host = aligned_alloc(64, (out->bytes + 63) / 64 * 64)))
    return wk_fail(e, "load: out of memory for output %s (%zu bytes)", name, out->bytes);
  return 0;
}

static int load_workload(const cJSON *req, wk_err_t *e) {
  unload_workload();
  W.gen++;
  const char *path = ms_frame_str(req, "data");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(req, "params"), *p;
  if (!path || !cJSON_IsArray(params)) return wk_fail(e, "load: needs \"data\" and \"params\"");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
    if (fd >= 0) close(fd);
    return wk_fail(e, "load: cannot open %s: %s", path, fd < 0 ? strerror(errno) : "empty file");
  }
  W.map_size = (size_t)st.st_size;
  W.map = mmap(NULL, W.map_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (W.map == MAP_FAILED) {
    W.map = NULL;
    return wk_fail(e, "load: cannot map %s: %s", path, strerror(errno));
  }
  W.params = tn_xcalloc((size_t)TN_MAX(cJSON_GetArraySize(params), 1), sizeof *W.params);
  cJSON_ArrayForEach(p, params) {
    if (parse_param(p, &W.params[W.nparams], e) < 0) return -1;
    W.nparams++;
  }
  return 0;
}

/* ---- run ------------------------------------------------------------------- */

static int parse_dims(const cJSON *k, const char *key, int64_t out[3]) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(k, key);
  if (cJSON_GetArraySize(a) != 3) return -1;
  for (int d = 0; d < 3; d++) {
    const cJSON *v = cJSON_GetArrayItem(a, d);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > INT32_MAX) return -1;
    out[d] = (int64_t)v->valuedouble;
  }
  return 0;
}

/* A kernel's "tensor_maps": each names an argument, its element size and
 * the 2-D geometry; the driver checks the rest when it encodes the map. */
static int parse_maps(const cJSON *kj, wk_kernel_t *k, wk_err_t *e) {
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(kj, "tensor_maps"), *x;
  if (!ms) return 0;
  if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) > (int)TN_ARRAY_LEN(k->maps))
    return wk_fail(e, "run: kernel %s: \"tensor_maps\" must be an array of at most %d", k->name,
                   (int)TN_ARRAY_LEN(k->maps));
  cJSON_ArrayForEach(x, ms) {
    wk_tensor_map_t *t = &k->maps[k->nmaps++];
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(x, "dims"), *box = cJSON_GetObjectItemCaseSensitive(x, "box");
    t->arg = (int)jnum(x, "arg", -1);
    t->elem_bytes = (int)jnum(x, "elem_bytes", 0);
    t->stride_bytes = (int64_t)jnum(x, "stride_bytes", 0);
    t->swizzle = (int)jnum(x, "swizzle", 0);
    bool ok = cJSON_GetArraySize(dims) == 2 && cJSON_GetArraySize(box) == 2 && t->arg >= 0 && t->elem_bytes > 0 &&
              t->stride_bytes > 0;
    for (int d = 0; ok && d < 2; d++) {
      const cJSON *a = cJSON_GetArrayItem(dims, d), *b = cJSON_GetArrayItem(box, d);
      ok = cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble >= 1 && b->valuedouble >= 1 &&
           b->valuedouble <= 256;
      if (ok) t->dims[d] = (int64_t)a->valuedouble, t->box[d] = (int)b->valuedouble;
    }
    if (!ok)
      return wk_fail(e, "run: kernel %s: tensor map %d needs arg, elem_bytes, dims [2], stride_bytes and box [2] "
                     "(sides 1 to 256)", k->name, k->nmaps - 1);
  }
  return 0;
}

static int parse_run(const cJSON *req, wk_run_t *r, wk_err_t *e) {
  const char *art = ms_frame_str(req, "artifact");
  const cJSON *ks = cJSON_GetObjectItemCaseSensitive(req, "kernels");
  const cJSON *as = cJSON_GetObjectItemCaseSensitive(req, "args"), *x;
  if (!art || !cJSON_IsArray(ks) || !cJSON_IsArray(as)) return wk_fail(e, "run: needs artifact, kernels and args");
  snprintf(r->artifact, sizeof r->artifact, "%s", art);
  const char *pack = ms_frame_str(req, "pack");
  if (pack && strlen(pack) >= sizeof r->pack) return wk_fail(e, "run: pack function name \"%.40s...\" is too long", pack);
  snprintf(r->pack, sizeof r->pack, "%s", pack ? pack : "");
  cJSON_ArrayForEach(x, ks) {
    if (r->nkernels >= WK_MAX_KERNELS) return wk_fail(e, "run: more than %d kernels", WK_MAX_KERNELS);
    wk_kernel_t *k = &r->kernels[r->nkernels++];
    const char *name = ms_frame_str(x, "name");
    if (!name || parse_dims(x, "grid", k->grid) < 0 || parse_dims(x, "block", k->block) < 0)
      return wk_fail(e, "run: kernel %d needs a name, grid and block", r->nkernels - 1);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->dyn_shared_bytes = (int64_t)jnum(x, "dyn_shared_bytes", 0);
    if (parse_maps(x, k, e) < 0) return -1;
  }
  cJSON_ArrayForEach(x, as) {
    if (r->nargs >= WK_MAX_ARGS) return wk_fail(e, "run: more than %d arguments", WK_MAX_ARGS);
    wk_arg_t *a = &r->args[r->nargs++];
    a->param = (int)jnum(x, "param", -1);
    a->workspace_bytes = (int64_t)jnum(x, "workspace", 0);
    if (a->param >= W.nparams || (a->param < 0 && a->workspace_bytes < 1))
      return wk_fail(e, "run: argument %d is neither a workload parameter (0..%d) nor a workspace", r->nargs - 1,
                     W.nparams - 1);
  }
  for (int k = 0; k < r->nkernels; k++)
    for (int m = 0; m < r->kernels[k].nmaps; m++)
      if (r->kernels[k].maps[m].arg >= r->nargs)
        return wk_fail(e, "run: kernel %s: tensor map %d describes argument %d of %d", r->kernels[k].name, m,
                       r->kernels[k].maps[m].arg, r->nargs);
  return 0;
}

/* Elements of an output that still hold the poison (every byte 0xFF). */
static int64_t poisoned(const wk_param_t *p) {
  int sz = ir_dtype_bytes(p->dtype);
  int64_t n = 0;
  for (int64_t i = 0; i < p->numel; i++) {
    const unsigned char *b = (const unsigned char *)p->host + i * sz;
    int k = 0;
    while (k < sz && b[k] == 0xFF) k++;
    n += k == sz;
  }
  return n;
}

/* Compares every output with its reference; returns the largest error and
 * fills e when one is over its dtype's tolerance. */
static double verify(wk_err_t *e, bool *ok) {
  double worst = 0;
  *ok = true;
  for (int i = 0; i < W.nparams; i++) {
    const wk_param_t *p = &W.params[i];
    if (!p->output) continue;
    double *ref = malloc(sizeof(double) * (size_t)p->numel), *got = malloc(sizeof(double) * (size_t)p->numel);
    if (!ref || !got) {
      free(ref), free(got);
      *ok = false;
      wk_fail(e, "out of memory verifying %s", p->name);
      return INFINITY;
    }
    ms_from_dtype(p->dtype, p->data, p->numel, ref);
    ms_from_dtype(p->dtype, p->host, p->numel, got);
    double err = ir_rel_l2_error(ref, got, p->numel), tol = p->tolerance;
    free(ref), free(got);
    if (!(err <= worst)) worst = err;
    if (*ok && !(err <= tol)) {
      *ok = false;
      int64_t np = poisoned(p);
      wk_fail(e, "output %s differs from the reference: relative L2 error %.3g (tolerance %g)", p->name, err, tol);
      if (np > 0)
        snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                 "; %lld of %lld elements were never written (still the poison pattern)", (long long)np,
                 (long long)p->numel);
    }
  }
  return worst;
}

typedef struct timing {
  double slow_secs; /* > 0: a checked run slower than this is the only sample */
  bool notify_start; /* send {"started": true} once loaded, before the checked run */
  double min_secs;
  int min_repeats, max_repeats;
  bool flush;
  const cJSON *profile; /* metric names: profile the candidate after timing it */
  bool keep_disturbed;  /* $TUNED_KEEP_DISTURBED: every repeat counts (how a shared machine runs it) */
} timing_t;

/* Involuntary context switches of the process so far, every thread's. */
static long preemptions(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_nivcsw : 0;
}

/* Warm-up, then timed repeats into secs (grown as needed).  A repeat during
 * which a thread of the worker was preempted (another process took its
 * core) is set aside: its time says how the machine was shared, not how
 * fast the candidate is (a kernel's team waits a scheduler slice for a
 * preempted thread).  Repeats go on until min_repeats undisturbed ones and
 * min_secs in all, or max_repeats, or 4 min_secs in all; secs holds the
 * undisturbed ones, *disturbed counts the others, and where fewer than
 * min_repeats were undisturbed secs holds every repeat and *shared says
 * the machine was never quiet enough to tell (with
 * t->keep_disturbed, always: a benchmark of a shared machine wants every
 * call as it ran). */
static int time_runs(const wk_backend_t *b, const timing_t *t, double **secs, int *n, int *disturbed, bool *shared,
                     wk_err_t *e) {
  double s = 0, total = 0;
  if (b->launch(&s, e) < 0) return -1;
  int cap = 64, clean = 0, all = 0;
  double *every = tn_xmalloc(sizeof(double) * (size_t)cap);
  bool *quiet = tn_xmalloc(sizeof(bool) * (size_t)cap);
  while (all < t->max_repeats && ((t->keep_disturbed ? all : clean) < t->min_repeats || total < t->min_secs) &&
         (all < t->min_repeats || total < 4 * t->min_secs)) {
    if (t->flush) b->flush();
    long before = preemptions();
    if (b->launch(&s, e) < 0) {
      free(every);
      free(quiet);
      return -1;
    }
    bool q = preemptions() == before;
    if (all == cap) {
      every = tn_xrealloc(every, sizeof(double) * (size_t)(cap *= 2));
      quiet = tn_xrealloc(quiet, sizeof(bool) * (size_t)cap);
    }
    quiet[all] = q;
    every[all++] = s;
    clean += q;
    total += s;
  }
  *shared = clean < t->min_repeats || t->keep_disturbed;
  *disturbed = all - clean;
  *n = 0;
  for (int i = 0; i < all; i++)
    if (*shared || quiet[i]) every[(*n)++] = every[i];
  *secs = every;
  free(quiet);
  return 0;
}

/* CLOCK_MONOTONIC in nanoseconds: the runner compares windows of several
 * workers, and this clock is one for the whole machine. */
static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define MAX_METRICS 64

/* Profiles the loaded candidate: {"chip": "GH100", "kernels": [{"name":
 * ..., "metrics": {"gpu__time_duration.sum": ..., ...}}, ...]}, or
 * {"error": "..."} (the timing stands either way). */
static cJSON *profile_candidate(const wk_backend_t *b, const wk_run_t *r, const cJSON *metrics) {
  cJSON *p = cJSON_CreateObject(), *x;
  const char *names[MAX_METRICS];
  int n = 0;
  char chip[64] = "", why[MS_ERROR_MAX] = "";
  cJSON_ArrayForEach(x, metrics) {
    if (cJSON_IsString(x) && n < MAX_METRICS) names[n++] = x->valuestring;
  }
  double *values = tn_xcalloc((size_t)TN_MAX(r->nkernels * n, 1), sizeof *values);
  int nk = 0;
  if (!b->profile)
    snprintf(why, sizeof why, "the %s backend has no hardware profiler (CUPTI profiles CUDA kernels only)", b->name);
  else if (n == 0)
    snprintf(why, sizeof why, "profile: no metric names");
  else if (b->profile(names, n, values, &nk, chip, sizeof chip, why, sizeof why) == 0)
    why[0] = '\0';
  if (why[0]) {
    cJSON_AddStringToObject(p, "error", why);
  } else {
    cJSON_AddStringToObject(p, "chip", chip);
    cJSON *ks = cJSON_AddArrayToObject(p, "kernels");
    for (int k = 0; k < nk; k++) {
      cJSON *kj = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(kj, "metrics");
      cJSON_AddStringToObject(kj, "name", k < r->nkernels ? r->kernels[k].name : "?");
      for (int i = 0; i < n; i++) cJSON_AddNumberToObject(m, names[i], values[k * n + i]);
      cJSON_AddItemToArray(ks, kj);
    }
  }
  free(values);
  return p;
}

/* Runs, verifies and times one candidate on backend b. */
static void run_candidate(const wk_backend_t *b, ms_backend_t which, const wk_run_t *r, const timing_t *t) {
  wk_err_t e = {0};
  double s = 0, *secs = NULL, verr = -1;
  int n = 0, rc = 0, disturbed = 0;
  bool shared = false;
  int64_t window[2] = {0, 0}; /* the checked run's launch .. the last timed repeat's end */
  bool ok = false, tracing = false;
  char dev_why[256] = "";
  double *dev = NULL; /* the device's own times of the samples (CUPTI) */
  int ndev = 0;
  cJSON *prof = NULL;
  if (r->pack[0] && which != MS_BACKEND_CPU)
    rc = wk_fail(&e, "run: a packing function (%s) runs on the cpu backend only, not %s", r->pack, b->name);
  if (rc == 0 && !backend_ready[which] && (rc = b->init(&e)) == 0) backend_ready[which] = true;
  if (rc == 0 && backend_bound_gen[which] != W.gen && (rc = b->bind(&W, &e)) == 0)
    backend_bound_gen[which] = W.gen;
  if (rc == 0) {
    rc = b->load(r, &e);
    if (rc == 0) rc = b->prepare(&e);
    if (rc == 0 && t->notify_start) { /* loaded and compiled: the runner's early-stop clock starts now */
      cJSON *m = cJSON_CreateObject();
      cJSON_AddBoolToObject(m, "started", true);
      reply(m);
    }
    if (rc == 0 && b->trace_begin) tracing = b->trace_begin(dev_why, sizeof dev_why) == 0;
    window[0] = mono_ns();
    if (rc == 0) rc = b->launch(&s, &e);
    if (rc == 0) rc = b->fetch(&e);
    if (rc == 0) verr = verify(&e, &ok);
    if (rc == 0 && ok && t->slow_secs > 0 && s > t->slow_secs) {
      secs = tn_xmalloc(sizeof *secs); /* hopeless: the checked run is the sample */
      secs[n++] = s;
    } else if (rc == 0 && ok) {
      rc = time_runs(b, t, &secs, &n, &disturbed, &shared, &e);
    }
    window[1] = mono_ns();
    if (rc == 0 && ok && tracing && n > 0) {
      dev = tn_xmalloc(sizeof *dev * (size_t)n);
      ndev = TN_MAX(b->traced(n, dev, dev_why, sizeof dev_why), 0);
    }
    if (rc == 0 && ok && t->profile) prof = profile_candidate(b, r, t->profile);
    b->unload();
  }
  if (rc < 0) {
    free(secs);
    free(dev);
    cJSON_Delete(prof);
    reply_error("run_error", &e);
    return;
  }
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "status", ok ? "ok" : "wrong_result");
  cJSON_AddNumberToObject(m, "verify_error", isfinite(verr) ? verr : 1e308);
  if (!ok) cJSON_AddStringToObject(m, "error", e.msg);
  cJSON *win = cJSON_AddArrayToObject(m, "window_ns");
  for (int i = 0; i < 2; i++) cJSON_AddItemToArray(win, cJSON_CreateNumber((double)window[i]));
  cJSON *a = cJSON_AddArrayToObject(m, "run_secs");
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(secs[i]));
  if (disturbed) cJSON_AddNumberToObject(m, "disturbed", disturbed);
  if (shared) cJSON_AddBoolToObject(m, "shared", true);
  if (ndev > 0) {
    cJSON *d = cJSON_AddArrayToObject(m, "cupti_secs");
    for (int i = 0; i < ndev; i++) cJSON_AddItemToArray(d, cJSON_CreateNumber(dev[i]));
  } else if (b->trace_begin && ok) {
    cJSON_AddStringToObject(m, "cupti_error", dev_why[0] ? dev_why : "CUPTI recorded no kernel");
  }
  if (prof) cJSON_AddItemToObject(m, "profile", prof);
  free(secs);
  free(dev);
  reply(m);
}

static void handle_run(const cJSON *req) {
  static wk_run_t r;
  wk_err_t e = {0};
  memset(&r, 0, sizeof r);
  ms_backend_t which = MS_BACKEND_CPU;
  const char *name = ms_frame_str(req, "backend");
  const wk_backend_t *b = backend_named(name ? name : "", &which);
  if (!b) wk_fail(&e, "run: unknown backend \"%s\" (cpu, opencl, cuda)", name ? name : "");
  else if (!W.map) wk_fail(&e, "run: no workload loaded");
  else parse_run(req, &r, &e);
  if (e.msg[0]) {
    reply_error("run_error", &e);
    return;
  }
  timing_t t = {jnum(req, "slow_secs", 0), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "notify_start")),
                jnum(req, "min_secs", 0.1), (int)jnum(req, "min_repeats", 3), (int)jnum(req, "max_repeats", 1000),
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "flush_l2")),
                cJSON_GetObjectItemCaseSensitive(req, "profile"), false};
  if (t.profile && !cJSON_IsArray(t.profile)) t.profile = NULL;
  t.min_repeats = TN_MAX(t.min_repeats, 1);
  t.max_repeats = TN_MAX(t.max_repeats, t.min_repeats);
  const char *keep = getenv("TUNED_KEEP_DISTURBED");
  t.keep_disturbed = keep && *keep && strcmp(keep, "0") != 0;
  run_candidate(b, which, &r, &t);
}

static void handle(const cJSON *req) {
  const char *op = ms_frame_str(req, "op");
  cJSON *r;
  wk_err_t e = {0};
  if (op && strcmp(op, "run") == 0) {
    handle_run(req);
    return;
  }
  r = cJSON_CreateObject();
  if (op && strcmp(op, "hello") == 0) {
    cJSON_AddBoolToObject(r, "ok", true);
    cJSON_AddNumberToObject(r, "pid", (double)getpid());
    cJSON_AddStringToObject(r, "version", TUNED_VERSION);
#ifdef _OPENMP
    cJSON_AddNumberToObject(r, "omp_threads", omp_get_max_threads());
#endif
  } else if (op && strcmp(op, "load") == 0) {
    bool ok = load_workload(req, &e) == 0;
    cJSON_AddBoolToObject(r, "ok", ok);
    if (!ok) cJSON_AddStringToObject(r, "error", e.msg);
  } else {
    cJSON_AddBoolToObject(r, "ok", false);
    cJSON_AddStringToObject(r, "error", "unknown op (hello, load, run, exit)");
  }
  reply(r);
}

int wk_main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: tuned-worker\n       tuned-worker --build PARENT_PID\n\n"
           "Runs candidate kernels for tuned's measurement runner, or with --build\n"
           "compiles CUDA and OpenCL candidates for its builder.  It talks a framed\n"
           "JSON protocol on fd 0 (a socket) and is not meant to be run by hand.\n");
    return 0;
  }
  struct stat st;
  if (fstat(0, &st) < 0 || !S_ISSOCK(st.st_mode)) {
    fprintf(stderr, "tuned-worker: fd 0 must be the runner's socket (this program is started by tuned)\n");
    return 2;
  }
  if (argc > 1 && strcmp(argv[1], "--build") == 0) return ms_build_serve(argc, argv);
#ifdef _OPENMP
  /* Referencing the OpenMP runtime keeps it loaded for good: candidates'
   * .so files use it, and closing one must not unload it under its threads. */
  (void)omp_get_max_threads();
#endif
  for (;;) {
    cJSON *req = NULL;
    tn_err_t err = {0};
    if (ms_frame_recv(0, 0, &req, &err) < 0) break;
    const char *op = ms_frame_str(req, "op");
    bool quit = op && strcmp(op, "exit") == 0;
    if (!quit) handle(req);
    cJSON_Delete(req);
    if (quit) break;
  }
  unload_workload();
  return 0;
}
