/* runner.c — the parent side of measurement: prepares a workload's inputs
 * and reference outputs in a file, starts tuned-worker with posix_spawn,
 * sends it one candidate at a time while holding the candidate's device
 * (device.c), and turns timeouts, crashes and sticky device errors into
 * error records, restarting the worker as needed. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_internal.h"

extern char **environ;

#define HELLO_TIMEOUT_S 30.0
#define LOAD_TIMEOUT_S 120.0
#define LOG_TAIL 1024
/* A checked run under this is never the only sample (slow_factor): timing
 * repeats of it costs little, and a microsecond kernel's cold first run is
 * easily 10x its warm time. */
#define SLOW_MIN_S 0.01
#define PAGE 4096
#define EVAL_MAX_BYTES ((size_t)8 << 30)

typedef struct wl_param {
  char name[64];
  ir_dtype_t dtype;
  int64_t numel;
  bool output;
} wl_param_t;

struct ms_runner {
  ms_run_opts_t o;
  char worker[MS_PATH_MAX], run_dir[MS_DIR_MAX], log_path[MS_PATH_MAX];
  bool own_dir;
  pid_t pid;
  int fd;
  int starts;
  /* the workload */
  int gen, loaded_gen;
  cJSON *load_msg;
  char data_path[MS_PATH_MAX];
  wl_param_t *params;
  int nparams;
  double flops, bytes;
  double best; /* fastest verified median of this workload so far (slow_factor) */
  bool cupti_said; /* why CUPTI gave no times went into a result once */
};

/* ---- the worker process ---------------------------------------------------- */

static int log_size(const ms_runner_t *r) {
  struct stat st;
  return stat(r->log_path, &st) == 0 ? (int)st.st_size : 0;
}

/* What the worker wrote to its log since `from` (the last LOG_TAIL bytes). */
static void log_tail(const ms_runner_t *r, int from, char *out, size_t size) {
  out[0] = 0;
  int fd = open(r->log_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  int end = log_size(r);
  if (end - from > LOG_TAIL) from = end - LOG_TAIL;
  ssize_t n = end > from ? pread(fd, out, TN_MIN(size - 1, (size_t)(end - from)), from) : 0;
  out[n > 0 ? n : 0] = 0;
  close(fd);
}

/* Reaps the worker (killing it first if asked); returns the wait status. */
static int reap(ms_runner_t *r, bool kill_it) {
  int st = 0;
  if (r->pid <= 0) return 0;
  if (kill_it) kill(r->pid, SIGKILL);
  while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR) {
  }
  ms_track_worker(r->pid, false);
  close(r->fd);
  r->pid = 0;
  r->fd = -1;
  r->loaded_gen = 0;
  return st;
}

/* Reaps a worker that should be exiting on its own; kills it after 2 s. */
static int reap_exiting(ms_runner_t *r) {
  for (int i = 0; i < 200 && r->pid > 0; i++) {
    int st;
    pid_t p = waitpid(r->pid, &st, WNOHANG);
    if (p == r->pid) {
      ms_track_worker(r->pid, false);
      close(r->fd);
      r->pid = 0, r->fd = -1, r->loaded_gen = 0;
      return st;
    }
    usleep(10000);
  }
  return reap(r, true);
}

/* environ with POCL_CACHE_DIR set to the process's value (the builder's,
 * or ours: ms_runner_new sets it when the environment had none). */
static char **worker_env(char *pocl, size_t size) {
  const char *cache = getenv("POCL_CACHE_DIR");
  return ms_environ_with("POCL_CACHE_DIR", cache ? cache : "", pocl, size);
}

static int start_once(ms_runner_t *r, bool *killed, tn_err_t *err) {
  *killed = false;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return tn_err_set(err, TN_EIO, "socketpair: %s", strerror(errno));
  char pocl[MS_PATH_MAX + 32];
  char **env = worker_env(pocl, sizeof pocl);
  char *argv[] = {r->worker, NULL};
  int rc = ms_spawn_worker(argv, env, sv[1], r->log_path, &r->pid, err);
  free(env);
  close(sv[1]);
  if (rc < 0) {
    close(sv[0]);
    return rc;
  }
  r->fd = sv[0];
  r->starts++;
  ms_track_worker(r->pid, true);
  int from = log_size(r);
  cJSON *hello = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(hello, "op", "hello");
  rc = ms_frame_send(r->fd, hello, err);
  if (rc == TN_OK) rc = ms_frame_recv(r->fd, tn_now() + HELLO_TIMEOUT_S, &reply, err);
  cJSON_Delete(hello);
  cJSON_Delete(reply);
  if (rc < 0) {
    char tail[LOG_TAIL + 1];
    *killed = ms_reap_failed_start(r->pid);
    ms_track_worker(r->pid, false);
    close(r->fd);
    r->pid = 0, r->fd = -1, r->loaded_gen = 0;
    log_tail(r, from, tail, sizeof tail);
    return tn_err_set(err, TN_EIO, "the worker %s did not start: %s%s%s%s", r->worker, err ? err->msg : "",
                      *killed ? " (killed by a signal)" : "", tail[0] ? "; it said: " : "", tail);
  }
  return TN_OK;
}

/* A worker killed while it starts (by an operator, the OOM killer) is
 * started again, up to MS_START_TRIES in all, as a worker killed later is; one
 * that exits, or does not answer, fails at once. */
int ms_runner_start(ms_runner_t *r, tn_err_t *err) {
  if (r->pid > 0) return TN_OK;
  bool killed = false;
  int rc = TN_OK;
  for (int i = 0; i < MS_START_TRIES; i++) {
    rc = start_once(r, &killed, err);
    if (rc == TN_OK || !killed) break;
  }
  return rc;
}

void ms_runner_stop(ms_runner_t *r) {
  if (r->pid <= 0) return;
  cJSON *bye = cJSON_CreateObject();
  cJSON_AddStringToObject(bye, "op", "exit");
  ms_frame_send(r->fd, bye, NULL);
  cJSON_Delete(bye);
  reap_exiting(r);
}

int ms_runner_worker_pid(const ms_runner_t *r) { return r->pid > 0 ? (int)r->pid : 0; }
int ms_runner_worker_starts(const ms_runner_t *r) { return r->starts; }

/* ---- set-up ---------------------------------------------------------------- */

int ms_runner_new(const ms_run_opts_t *o, ms_runner_t **out, tn_err_t *err) {
  ms_run_opts_t def = {0};
  if (!o) o = &def;
  *out = NULL;
  if (o->timeout_s < 0 || o->min_secs < 0 || o->min_repeats < 0 || o->max_repeats < 0 || o->stop_min_s < 0)
    return tn_err_set(err, TN_EINVAL, "runner: timeout, minimum time and repeat counts must not be negative");
  ms_runner_t *r = tn_xcalloc(1, sizeof *r);
  r->o = *o;
  r->o.timeout_s = o->timeout_s > 0 ? o->timeout_s : 30.0;
  r->o.stop_min_s = o->stop_min_s > 0 ? o->stop_min_s : 2.0;
  r->o.min_secs = o->min_secs > 0 ? o->min_secs : 0.1;
  r->o.min_repeats = o->min_repeats > 0 ? o->min_repeats : 3;
  r->o.max_repeats = TN_MAX(o->max_repeats > 0 ? o->max_repeats : 1000, r->o.min_repeats);
  r->o.worker = r->o.run_dir = NULL;
  r->fd = -1;
  int rc = o->worker ? (snprintf(r->worker, sizeof r->worker, "%s", o->worker), TN_OK)
                     : ms_worker_path(r->worker, sizeof r->worker, err);
  if (rc == TN_OK && access(r->worker, X_OK) < 0)
    rc = tn_err_set(err, TN_EIO, "the worker %s is not an executable file", r->worker);
  if (rc == TN_OK && o->run_dir && strlen(o->run_dir) >= sizeof r->run_dir) {
    rc = tn_err_set(err, TN_EINVAL, "runner: run directory path longer than %d bytes", MS_DIR_MAX - 1);
  } else if (rc == TN_OK && o->run_dir) {
    snprintf(r->run_dir, sizeof r->run_dir, "%s", o->run_dir);
    rc = ms_mkdirs(r->run_dir, err);
  } else if (rc == TN_OK) {
    rc = ms_temp_dir_new("tuned-run", r->run_dir, sizeof r->run_dir, err);
    r->own_dir = rc == TN_OK;
  }
  if (rc < 0) {
    free(r);
    return rc;
  }
  snprintf(r->log_path, sizeof r->log_path, "%s/worker.log", r->run_dir);
  char cache[MS_PATH_MAX];
  snprintf(cache, sizeof cache, "%s/pocl-cache", r->run_dir);
  ms_pocl_cache_init(cache);
  *out = r;
  return TN_OK;
}

void ms_runner_free(ms_runner_t *r) {
  if (!r) return;
  ms_runner_stop(r);
  cJSON_Delete(r->load_msg);
  free(r->params);
  if (r->data_path[0]) unlink(r->data_path);
  if (r->own_dir) ms_temp_dir_remove(r->run_dir);
  free(r);
}

/* Writes inputs and reference outputs of d, converted to the dtypes, at
 * page-aligned offsets; fills the load message. */
static int write_data(ms_runner_t *r, const ir_func_t *f, const ir_data_t *d, tn_err_t *err) {
  int fd = open(r->data_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tn_err_set(err, TN_EIO, "cannot create %s: %s", r->data_path, strerror(errno));
  cJSON *params = cJSON_AddArrayToObject(r->load_msg, "params");
  off_t off = 0;
  int rc = TN_OK;
  for (int i = 0; i < f->nparams && rc == TN_OK; i++) {
    const ir_buffer_t *b = f->params[i];
    size_t bytes = (size_t)d->sizes[i] * (size_t)ir_dtype_bytes(b->dtype);
    void *buf = malloc(bytes);
    if (!buf) {
      rc = tn_err_set(err, TN_ENOMEM, "out of memory converting %s (%zu bytes)", b->name, bytes);
      break;
    }
    ms_to_dtype(b->dtype, d->vals[i], d->sizes[i], buf);
    if (pwrite(fd, buf, bytes, off) != (ssize_t)bytes)
      rc = tn_err_set(err, TN_EIO, "cannot write %s: %s", r->data_path, strerror(errno));
    free(buf);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", b->name);
    cJSON_AddStringToObject(p, "dtype", ir_dtype_name(b->dtype));
    cJSON_AddNumberToObject(p, "numel", (double)d->sizes[i]);
    cJSON_AddStringToObject(p, "role", b->role == IR_BUF_OUTPUT ? "output" : "input");
    cJSON_AddNumberToObject(p, "offset", (double)off);
    if (b->role == IR_BUF_OUTPUT)
      cJSON_AddNumberToObject(p, "tolerance", r->o.tf32 && b->dtype == IR_FLOAT32 ? IR_TF32_TOLERANCE
                                                                                      : ir_dtype_tolerance(b->dtype));
    cJSON_AddItemToArray(params, p);
    wl_param_t *w = &r->params[i];
    snprintf(w->name, sizeof w->name, "%s", b->name);
    w->dtype = b->dtype, w->numel = d->sizes[i], w->output = b->role == IR_BUF_OUTPUT;
    off = (off + (off_t)bytes + PAGE - 1) / PAGE * PAGE;
  }
  if (close(fd) < 0 && rc == TN_OK) rc = tn_err_set(err, TN_EIO, "cannot write %s: %s", r->data_path, strerror(errno));
  return rc;
}

int ms_runner_set_workload(ms_runner_t *r, const ir_func_t *f, uint64_t seed, tn_err_t *err) {
  ir_data_t *d = NULL;
  int rc = ir_eval_check_work(f, err);
  if (rc == TN_OK) rc = ir_data_new(f, seed, EVAL_MAX_BYTES, &d, err);
  if (rc == TN_OK) rc = ir_eval_stoppable(f, d, r->o.cancel, r->o.cancel_ctx, err);
  if (rc < 0) {
    ir_data_free(d);
    return tn_err_prefix(err, "reference evaluation");
  }
  if (r->data_path[0]) unlink(r->data_path);
  cJSON_Delete(r->load_msg);
  r->best = 0;
  free(r->params);
  r->gen++;
  snprintf(r->data_path, sizeof r->data_path, "%s/workload-%d.bin", r->run_dir, r->gen);
  r->load_msg = cJSON_CreateObject();
  cJSON_AddStringToObject(r->load_msg, "op", "load");
  cJSON_AddStringToObject(r->load_msg, "data", r->data_path);
  r->params = tn_xcalloc((size_t)TN_MAX(f->nparams, 1), sizeof *r->params);
  r->nparams = f->nparams;
  rc = write_data(r, f, d, err);
  ir_data_free(d);
  r->flops = ir_func_flops(f);
  r->bytes = ir_func_bytes(f);
  if (rc < 0) r->nparams = 0;
  return rc;
}

/* ---- running --------------------------------------------------------------- */

/* Starts the worker and loads the workload into it when needed. */
static int ensure_worker(ms_runner_t *r, tn_err_t *err) {
  int rc = ms_runner_start(r, err);
  if (rc < 0 || r->loaded_gen == r->gen) return rc;
  cJSON *reply = NULL;
  rc = ms_frame_send(r->fd, r->load_msg, err);
  if (rc == TN_OK) rc = ms_frame_recv(r->fd, tn_now() + LOAD_TIMEOUT_S, &reply, err);
  if (rc == TN_OK && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
    rc = tn_err_set(err, TN_EIO, "the worker could not load the workload: %s",
                    cJSON_IsString(e) ? e->valuestring : "?");
  }
  cJSON_Delete(reply);
  if (rc < 0) reap(r, true);
  else r->loaded_gen = r->gen;
  return rc;
}

/* A kernel's tensor maps as the worker makes them: argument (= candidate
 * parameter) `arg`, its element size, and cg_tensor_map_t's geometry. */
static cJSON *tensor_maps_request(const ms_candidate_t *c, const cg_kernel_t *k) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < k->nmaps; i++) {
    const cg_tensor_map_t *t = &k->maps[i];
    cJSON *o = cJSON_CreateObject(), *dims = cJSON_AddArrayToObject(o, "dims"), *box = cJSON_AddArrayToObject(o, "box");
    cJSON_AddNumberToObject(o, "arg", t->param);
    cJSON_AddNumberToObject(o, "elem_bytes", ir_dtype_bytes(c->params[t->param].dtype));
    for (int d = 0; d < 2; d++) {
      cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)t->dims[d]));
      cJSON_AddItemToArray(box, cJSON_CreateNumber(t->box[d]));
    }
    cJSON_AddNumberToObject(o, "stride_bytes", (double)t->stride_bytes);
    cJSON_AddNumberToObject(o, "swizzle", t->swizzle);
    cJSON_AddItemToArray(a, o);
  }
  return a;
}

/* The run request for cand; fails the result when its parameters do not
 * match the workload's. */
static cJSON *run_request(const ms_runner_t *r, const ms_candidate_t *c, const ms_result_t *res, ms_result_t *out) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "op", "run");
  cJSON_AddStringToObject(m, "backend", ms_backend_name(ms_backend_of(c->target.kind)));
  cJSON_AddStringToObject(m, "artifact", res->artifact);
  cJSON *ks = cJSON_AddArrayToObject(m, "kernels"), *args = cJSON_AddArrayToObject(m, "args");
  for (int k = 0; k < c->nkernels; k++) {
    cJSON *kj = cJSON_CreateObject();
    cJSON_AddStringToObject(kj, "name", c->kernels[k].name);
    cJSON_AddItemToObject(kj, "grid", cJSON_CreateArray());
    cJSON_AddItemToObject(kj, "block", cJSON_CreateArray());
    for (int d = 0; d < 3; d++) {
      cJSON_AddItemToArray(cJSON_GetObjectItem(kj, "grid"), cJSON_CreateNumber((double)c->kernels[k].grid[d]));
      cJSON_AddItemToArray(cJSON_GetObjectItem(kj, "block"), cJSON_CreateNumber((double)c->kernels[k].block[d]));
    }
    cJSON_AddNumberToObject(kj, "dyn_shared_bytes", (double)c->kernels[k].dyn_shared_bytes);
    if (c->kernels[k].nmaps) cJSON_AddItemToObject(kj, "tensor_maps", tensor_maps_request(c, &c->kernels[k]));
    cJSON_AddItemToArray(ks, kj);
  }
  int next = 0;
  for (int i = 0; i < c->nparams; i++) {
    const cg_param_t *p = &c->params[i];
    int64_t numel = 1;
    for (int d = 0; d < p->ndim; d++) numel *= p->shape[d];
    cJSON *a = cJSON_CreateObject();
    cJSON_AddItemToArray(args, a);
    if (p->role == IR_BUF_TEMP) {
      /* a packed copy's rows may be padded: its elements say how many */
      int64_t n = p->elements > numel ? p->elements : numel;
      cJSON_AddNumberToObject(a, "workspace", (double)(n * ir_dtype_bytes(p->dtype)));
      if (p->packs && !cJSON_GetObjectItem(m, "pack")) {
        char sym[sizeof c->kernels[0].name + 16];
        snprintf(sym, sizeof sym, "tuned_pack_%s", c->kernels[0].name);
        cJSON_AddStringToObject(m, "pack", sym);
      }
      continue;
    }
    const wl_param_t *w = next < r->nparams ? &r->params[next] : NULL;
    if (!w || w->dtype != p->dtype || w->numel != numel || w->output != (p->role == IR_BUF_OUTPUT)) {
      ms_result_fail(out, MS_RUN_ERROR,
                     "candidate parameter %d (%s, %s, %lld elements) does not match the workload's %s", i, p->name,
                     ir_dtype_name(p->dtype), (long long)numel,
                     w ? w->name : "parameter list (it has fewer parameters)");
      cJSON_Delete(m);
      return NULL;
    }
    cJSON_AddNumberToObject(a, "param", next++);
  }
  if (next != r->nparams) {
    ms_result_fail(out, MS_RUN_ERROR, "candidate has %d workload parameters; the workload has %d", next, r->nparams);
    cJSON_Delete(m);
    return NULL;
  }
  cJSON_AddNumberToObject(m, "min_secs", r->o.min_secs);
  cJSON_AddNumberToObject(m, "min_repeats", r->o.min_repeats);
  cJSON_AddNumberToObject(m, "max_repeats", r->o.max_repeats);
  cJSON_AddBoolToObject(m, "flush_l2", r->o.flush_l2);
  if (r->o.slow_factor > 0 && r->best > 0)
    cJSON_AddNumberToObject(m, "slow_secs", TN_MAX(r->o.slow_factor * r->best, SLOW_MIN_S));
  cJSON_AddBoolToObject(m, "notify_start", true);
  if (r->o.profile_nmetrics > 0) {
    cJSON *p = cJSON_AddArrayToObject(m, "profile");
    for (int i = 0; i < r->o.profile_nmetrics; i++)
      cJSON_AddItemToArray(p, cJSON_CreateString(r->o.profile_metrics[i]));
  }
  return m;
}

/* The reply's CUPTI times (or why there are none: once per runner) and
 * profile into res. */
static void take_device_times(ms_runner_t *r, const cJSON *reply, ms_result_t *res) {
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(reply, "cupti_secs"), *x;
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(reply, "cupti_error");
  int n = cJSON_GetArraySize(dev), k = 0;
  double *secs = tn_xmalloc(sizeof *secs * (size_t)TN_MAX(n, 1));
  cJSON_ArrayForEach(x, dev) {
    if (cJSON_IsNumber(x) && x->valuedouble > 0) secs[k++] = x->valuedouble;
  }
  ms_result_set_cupti(res, secs, k);
  free(secs);
  if (k == 0 && cJSON_IsString(why) && !r->cupti_said) {
    snprintf(res->cupti_error, sizeof res->cupti_error, "%s", why->valuestring);
    r->cupti_said = true;
  }
  const cJSON *prof = cJSON_GetObjectItemCaseSensitive(reply, "profile");
  if (cJSON_IsObject(prof)) res->profile = cJSON_PrintUnformatted(prof);
}

/* Fills res from the worker's reply. */
static void take_reply(ms_runner_t *r, const cJSON *reply, ms_result_t *res) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(reply, "status");
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
  const cJSON *secs = cJSON_GetObjectItemCaseSensitive(reply, "run_secs"), *x;
  const cJSON *ve = cJSON_GetObjectItemCaseSensitive(reply, "verify_error");
  ms_status_t s = MS_RUN_ERROR;
  if (!cJSON_IsString(st) || ms_status_parse(st->valuestring, &s) < 0) s = MS_RUN_ERROR;
  const cJSON *win = cJSON_GetObjectItemCaseSensitive(reply, "window_ns");
  res->ran = true;
  res->verify_error = cJSON_IsNumber(ve) ? (ve->valuedouble >= 1e308 ? INFINITY : ve->valuedouble) : -1;
  if (cJSON_GetArraySize(win) == 2 && cJSON_IsNumber(cJSON_GetArrayItem(win, 0)) &&
      cJSON_IsNumber(cJSON_GetArrayItem(win, 1))) {
    res->window_start_ns = (int64_t)cJSON_GetArrayItem(win, 0)->valuedouble;
    res->window_end_ns = (int64_t)cJSON_GetArrayItem(win, 1)->valuedouble;
  }
  if (s != MS_OK) {
    ms_result_fail(res, s, "%s", cJSON_IsString(e) ? e->valuestring : "the worker sent a reply without a status");
    return;
  }
  int n = cJSON_GetArraySize(secs);
  res->run_secs = tn_xmalloc(sizeof(double) * (size_t)TN_MAX(n, 1));
  res->nrepeats = 0;
  cJSON_ArrayForEach(x, secs) res->run_secs[res->nrepeats++] = cJSON_IsNumber(x) ? x->valuedouble : 0;
  res->median_secs = ms_median(res->run_secs, res->nrepeats);
  const cJSON *dist = cJSON_GetObjectItemCaseSensitive(reply, "disturbed");
  res->disturbed = cJSON_IsNumber(dist) ? (int)dist->valuedouble : 0;
  res->shared = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "shared"));
  if (res->median_secs > 0) {
    res->gflops = r->flops / res->median_secs * 1e-9;
    res->gbps = r->bytes / res->median_secs * 1e-9;
    if (r->best <= 0 || res->median_secs < r->best) r->best = res->median_secs;
  }
  take_device_times(r, reply, res);
}

/* The worker died during a request (EOF; st: its wait status): says how,
 * with its last words.  again: it was the second SIGKILL of this candidate. */
static void record_crash(ms_runner_t *r, int st, int from, bool again, ms_result_t *res) {
  char how[256], tail[LOG_TAIL + 1];
  if (WIFSIGNALED(st)) {
    char sig[96];
    ms_signal_text(WTERMSIG(st), sig, sizeof sig);
    snprintf(how, sizeof how, "the worker was killed by %s%s", sig,
             again ? " twice (run again in a fresh worker: out of memory, or killed from outside?)" : "");
  } else {
    snprintf(how, sizeof how, "the worker exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  log_tail(r, from, tail, sizeof tail);
  ms_result_fail(res, MS_RUN_ERROR, "%s while running the candidate (restarted for the next one)%s%s", how,
                 tail[0] ? "; its output: " : "", tail);
}

/* How long a candidate may run once loaded before it is stopped early:
 * 10 x slow_factor times the fastest verified run, at least stop_min_s;
 * INFINITY before any verified run (or with slow_factor 0). */
static double stop_secs(const ms_runner_t *r) {
  return r->o.slow_factor > 0 && r->best > 0 ? TN_MAX(r->o.stop_min_s, 10 * r->o.slow_factor * r->best) : INFINITY;
}

static bool cancelled(const ms_runner_t *r) { return r->o.cancel && r->o.cancel(r->o.cancel_ctx); }

/* Waits until the worker has something to say, the deadline passes
 * (TN_ERANGE) or the run is cancelled (TN_ESTOPPED), asking cancel every
 * MS_CANCEL_POLL_S: a candidate may run for its whole timeout. */
static int await_readable(ms_runner_t *r, double deadline) {
  for (;;) {
    if (cancelled(r)) return TN_ESTOPPED;
    double left = deadline - tn_now();
    if (left <= 0) return TN_ERANGE;
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    int n = poll(&p, 1, (int)ceil(TN_MIN(left, r->o.cancel ? MS_CANCEL_POLL_S : left) * 1e3));
    if (n > 0 || (n < 0 && errno != EINTR)) return TN_OK; /* the read says what it was */
  }
}

/* Waits for the worker's reply to a run request: the timeout counts from
 * the request, the early stop from the worker's {"started": true} (loading
 * and compiling the candidate do not count against it).  TN_ERANGE when
 * either passed first (*stopped says it was the early stop); TN_ESTOPPED
 * when cancelled meanwhile. */
static int await_reply(ms_runner_t *r, cJSON **reply, bool *stopped, tn_err_t *e) {
  double end = tn_now() + r->o.timeout_s, stop_at = INFINITY;
  for (;;) {
    double deadline = TN_MIN(end, stop_at);
    int rc = await_readable(r, deadline);
    if (rc == TN_ESTOPPED) return rc;
    if (rc == TN_OK) rc = ms_frame_recv(r->fd, deadline, reply, e);
    if (rc == TN_ERANGE) *stopped = stop_at < end;
    if (rc < 0 || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*reply, "started"))) return rc;
    cJSON_Delete(*reply);
    *reply = NULL;
    stop_at = tn_now() + stop_secs(r);
  }
}

/* Runs one built candidate. Returns < 0 only when the worker cannot start.
 * A worker killed by SIGKILL that we did not send (the OOM killer, a user)
 * is not the candidate's fault by itself: the candidate runs once more in a
 * fresh worker, and only a second SIGKILL is recorded against it (a
 * run_error is never retried later). */
static int run_one(ms_runner_t *r, const ms_candidate_t *c, ms_result_t *res, tn_err_t *err) {
  cJSON *req = run_request(r, c, res, res), *reply = NULL;
  if (!req) return TN_OK;
  int rc = TN_EIO, from = log_size(r), st = 0;
  tn_err_t e = {0};
  bool stopped = false;
  for (int life = 0; life < 2; life++) {
    rc = TN_EIO;
    for (int attempt = 0; attempt < 2 && rc == TN_EIO; attempt++) {
      if ((rc = ensure_worker(r, err)) < 0) {
        ms_result_fail(res, MS_RUN_ERROR, "%s", err ? err->msg : "the worker cannot start");
        cJSON_Delete(req);
        return rc;
      }
      rc = ms_frame_send(r->fd, req, &e);
      if (rc < 0) reap(r, true); /* died between requests: start a fresh one */
    }
    if (rc == TN_OK) rc = await_reply(r, &reply, &stopped, &e);
    if (rc >= 0 || rc == TN_ERANGE || rc == TN_ESTOPPED) break;
    st = reap(r, false);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || life == 1) break;
    from = log_size(r); /* killed from outside: once more, in a fresh worker */
  }
  if (rc == TN_ESTOPPED) {
    reap(r, true); /* cancelled: the candidate stays unrun (status OK, ran false) */
  } else if (rc == TN_ERANGE) {
    reap(r, true);
    if (stopped)
      ms_result_fail(res, MS_TOO_SLOW, "stopped early: still running %.1f s after it started, %g times the fastest "
                     "verified run so far (%.3g ms): the worker was killed (restarted for the next candidate)",
                     stop_secs(r), 10 * r->o.slow_factor, r->best * 1e3);
    else
      ms_result_fail(res, MS_TIMEOUT, "run timed out after %.1f s: the worker was killed (restarted for the next "
                     "candidate)", r->o.timeout_s);
    res->ran = true;
  } else if (rc < 0) {
    record_crash(r, st, from, WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, res);
    res->ran = true;
  } else {
    take_reply(r, reply, res);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "fatal"))) reap_exiting(r);
  }
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return TN_OK;
}

double ms_runner_best(const ms_runner_t *r) { return r->best; }

void ms_runner_note_best(ms_runner_t *r, double secs) {
  if (secs > 0 && isfinite(secs) && (r->best <= 0 || secs < r->best)) r->best = secs;
}

void ms_runner_set_best(ms_runner_t *r, double secs) { r->best = secs > 0 && isfinite(secs) ? secs : 0; }

void ms_runner_set_timing(ms_runner_t *r, double min_secs, int max_repeats, double *old_min_secs,
                          int *old_max_repeats) {
  if (old_min_secs) *old_min_secs = r->o.min_secs;
  if (old_max_repeats) *old_max_repeats = r->o.max_repeats;
  if (min_secs > 0 && isfinite(min_secs)) r->o.min_secs = min_secs;
  if (max_repeats > 0) r->o.max_repeats = TN_MAX(max_repeats, r->o.min_repeats);
}

int ms_runner_run_batch(ms_runner_t *r, ms_candidate_t *const *cands, ms_result_t *results, int n,
                        tn_err_t *err) {
  if (!r->load_msg) return tn_err_set(err, TN_ESTATE, "runner: no workload set (ms_runner_set_workload)");
  for (int i = 0; i < n; i++) {
    if (results[i].status != MS_OK || !results[i].artifact[0]) continue;
    char name[MS_DEVICE_NAME_MAX];
    ms_device_name(&cands[i]->target, name, sizeof name);
    ms_device_t *d = ms_device_get(name);
    if (cancelled(r) || !ms_device_acquire(d, r->o.stop, r->o.stop_ctx))
      return TN_OK; /* cancelled, or stopped while waiting: the rest stays unrun */
    int rc = run_one(r, cands[i], &results[i], err);
    ms_device_release(d);
    if (rc < 0) return err ? err->code : TN_EIO;
  }
  return TN_OK;
}
