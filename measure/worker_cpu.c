/* worker_cpu.c — the worker's CPU backend: dlopen of the candidate's .so,
 * `int tuned_entry_<entry>(void **args)` called on the mapped inputs (read-only, so
 * a write into an input faults) and the worker's output buffers, timed with
 * CLOCK_MONOTONIC; a candidate's packing function (hoisted packing of
 * constant inputs) runs once at load, untimed. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.h"

typedef int (*entry_fn)(void **args);

static const wk_workload_t *cpu_w;
static void *cpu_lib;
static entry_fn cpu_entry;
static void *cpu_args[WK_MAX_ARGS];
static void *cpu_ws[WK_MAX_ARGS];
static int64_t cpu_ws_size[WK_MAX_ARGS];

static int cpu_init(wk_err_t *e) {
  (void)e;
  return 0;
}

static int cpu_bind(const wk_workload_t *w, wk_err_t *e) {
  (void)e;
  cpu_w = w;
  return 0;
}

/* Workspace i of at least n bytes, kept across candidates. */
static void *workspace(void **ws, int64_t *sizes, int i, int64_t n) {
  if (sizes[i] >= n) return ws[i];
  free(ws[i]);
  ws[i] = aligned_alloc(64, (size_t)(n + 63) / 64 * 64);
  sizes[i] = ws[i] ? n : 0;
  return ws[i];
}

/* Keeps loaded for good whichever OpenMP runtime a candidate brought in
 * (libgomp from gcc, libomp from clang): closing the candidate must not
 * unload a runtime under its idle threads.  The worker's own reference
 * covers the runtime it was linked with; this covers the others. */
static void pin_openmp_runtimes(void) {
  static const char *const names[] = {"libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (h) dlclose(h); /* RTLD_NODELETE stays */
  }
}

/* Runs the candidate's packing function once (hoisted packing of constant
 * inputs), untimed, into workspaces poisoned first: a previous candidate's
 * copy must not pass for this one's. */
static int cpu_pack(const wk_run_t *r, wk_err_t *e) {
  void *p = dlsym(cpu_lib, r->pack);
  if (!p) return wk_fail(e, "%s has no %s function (its packing)", r->artifact, r->pack);
  entry_fn pack;
  memcpy(&pack, &p, sizeof p);
  for (int i = 0; i < r->nargs; i++)
    if (r->args[i].param < 0) memset(cpu_args[i], 0xFF, (size_t)r->args[i].workspace_bytes);
  int rc = pack(cpu_args);
  if (rc != 0) return wk_fail(e, "the packing function %s returned %d", r->pack, rc);
  return 0;
}

static int cpu_load(const wk_run_t *r, wk_err_t *e) {
  cpu_lib = dlopen(r->artifact, RTLD_NOW | RTLD_LOCAL);
  if (!cpu_lib) return wk_fail(e, "cannot load %s: %s", r->artifact, dlerror());
  pin_openmp_runtimes();
  /* tuned_entry_<entry>: C modules have one "kernel", named as the entry;
   * the cuda-host launcher is named after the first kernel */
  char sym[sizeof r->kernels[0].name + 16];
  snprintf(sym, sizeof sym, "tuned_entry_%s", r->nkernels > 0 ? r->kernels[0].name : "");
  void *p = dlsym(cpu_lib, sym);
  if (!p) {
    wk_fail(e, "%s has no %s function", r->artifact, sym);
    dlclose(cpu_lib);
    cpu_lib = NULL;
    return -1;
  }
  memcpy(&cpu_entry, &p, sizeof p);
  for (int i = 0; i < r->nargs; i++) {
    const wk_arg_t *a = &r->args[i];
    if (a->param >= 0) {
      const wk_param_t *wp = &cpu_w->params[a->param];
      cpu_args[i] = wp->output ? wp->host : (void *)wp->data;
    } else if (!(cpu_args[i] = workspace(cpu_ws, cpu_ws_size, i, a->workspace_bytes))) {
      return wk_fail(e, "out of memory for a %lld-byte workspace", (long long)a->workspace_bytes);
    }
  }
  return r->pack[0] ? cpu_pack(r, e) : 0;
}

static int cpu_prepare(wk_err_t *e) {
  (void)e;
  for (int i = 0; i < cpu_w->nparams; i++)
    if (cpu_w->params[i].output) memset(cpu_w->params[i].host, 0xFF, cpu_w->params[i].bytes);
  return 0;
}

static int cpu_launch(double *secs, wk_err_t *e) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = cpu_entry(cpu_args);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (rc != 0) return wk_fail(e, "the kernel returned %d (a temporary buffer could not be allocated)", rc);
  return 0;
}

static int cpu_fetch(wk_err_t *e) {
  (void)e;
  return 0;
}

static void cpu_unload(void) {
  if (cpu_lib) dlclose(cpu_lib);
  cpu_lib = NULL;
  cpu_entry = NULL;
}

const wk_backend_t wk_cpu_backend = {"cpu", cpu_init, cpu_bind, cpu_load, cpu_prepare,
                                     cpu_launch, cpu_fetch, wk_flush_host_cache, cpu_unload, NULL, NULL, NULL};
