/* matmul_host.c — a host program that uses a tuned kernel: it asks the tuned
 * daemon (through libtuned) for the best matmul kernel, tuning it first when
 * there is none yet, then runs it — through the CUDA driver API for a CUDA
 * kernel, or compiled with cc and dlopen()ed for a CPU kernel — and checks
 * the result against a plain CPU loop.  See examples/README.md. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tuned.h>

static const char matmul_text[] =
    "# C = A B\n"
    "param M = 256, N = 256, K = 256\n"
    "input  A: float32[M, K]\n"
    "input  B: float32[K, N]\n"
    "output C: float32[M, N]\n"
    "C[i, j] = sum(k < K: A[i, k] * B[k, j])\n";

typedef struct options {
  const char *socket, *target;
  int n, trials;
} options_t;

/* The host's data: inputs, the kernel's output and the reference. */
typedef struct problem {
  int n;
  float *a, *b, *c, *ref;
} problem_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- getting the kernel -------------------------------------------------- */

static void show_progress(const tuned_job_t *j, void *ctx) {
  (void)ctx;
  fprintf(stderr, "  job %lld: %s, %lld/%lld trials", (long long)j->id, j->state_name, (long long)j->trials_done,
          (long long)j->trials);
  if (j->best_record) fprintf(stderr, ", best %.3f GFLOP/s", j->best_gflops);
  fprintf(stderr, "\n");
}

/* Fetches the best kernel, submitting a tuning job first when there is none. */
static tuned_kernel_t *get_kernel(tuned_client_t *c, const options_t *o) {
  char params[128];
  snprintf(params, sizeof params, "{\"M\": %d, \"N\": %d, \"K\": %d}", o->n, o->n, o->n);
  tuned_kernel_t *k = NULL;
  tuned_error_t err = {0};
  if (tuned_kernel_get_text(c, matmul_text, params, o->target, &k, &err) == 0) {
    printf("reusing the tuned kernel of record %lld\n", (long long)k->record);
    return k;
  }
  if (err.rpc_code != TUNED_RPC_NO_KERNEL && err.rpc_code != TUNED_RPC_NOT_FOUND) {
    fprintf(stderr, "matmul_host: kernel.get: %s\n", err.message);
    return NULL;
  }
  tuned_submit_t s = tuned_submit_defaults();
  s.workload = matmul_text;
  s.name = "matmul";
  s.params_json = params;
  s.target = o->target;
  s.trials = o->trials;
  int64_t job;
  tuned_job_t final;
  if (tuned_submit(c, &s, &job, NULL, &err) < 0 || tuned_wait(c, job, 0, show_progress, NULL, &final, &err) < 0) {
    fprintf(stderr, "matmul_host: %s\n", err.message);
    return NULL;
  }
  printf("tuned matmul %dx%dx%d in job %lld: %s\n", o->n, o->n, o->n, (long long)job, final.state_name);
  if (tuned_kernel_get_text(c, matmul_text, params, o->target, &k, &err) < 0) {
    fprintf(stderr, "matmul_host: kernel.get after tuning: %s\n", err.message);
    return NULL;
  }
  return k;
}

/* The host buffer for a kernel parameter, by name. */
static float *host_buffer(problem_t *p, const tuned_param_t *prm) {
  if (strcmp(prm->name, "A") == 0) return p->a;
  if (strcmp(prm->name, "B") == 0) return p->b;
  if (strcmp(prm->name, "C") == 0) return p->c;
  return NULL;
}

/* ---- a C kernel: cc -shared, dlopen, call --------------------------------- */

static int run_c(const tuned_kernel_t *k, problem_t *p) {
  char dir[] = "/tmp/matmul_host.XXXXXX", src[64], lib[64], cmd[512];
  if (!mkdtemp(dir)) {
    perror("matmul_host: mkdtemp");
    return -1;
  }
  snprintf(src, sizeof src, "%s/kernel.c", dir);
  snprintf(lib, sizeof lib, "%s/kernel.so", dir);
  FILE *f = fopen(src, "w");
  if (!f || fputs(k->source, f) < 0 || fclose(f) != 0) {
    perror("matmul_host: writing the kernel source");
    return -1;
  }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  snprintf(cmd, sizeof cmd, "%s -O3 -march=native -fno-math-errno -fopenmp -fPIC -shared -o %s %s -lm", cc, lib, src);
  int rc = system(cmd);
  /* RTLD_NODELETE: OpenMP worker threads of the kernel outlive dlclose. */
  void *h = rc == 0 ? dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) : NULL;
  int (*entry)(void **) = NULL;
  char name[128]; /* the wrapper is named after the kernel's entry */
  snprintf(name, sizeof name, "tuned_entry_%s", k->entry);
  void *sym = h ? dlsym(h, name) : NULL;
  memcpy(&entry, &sym, sizeof sym);
  if (!entry) {
    fprintf(stderr, "matmul_host: cannot build or load the kernel (%s): %s\n", cmd, rc ? "cc failed" : dlerror());
  } else {
    void *args[8] = {0};
    for (int i = 0; i < k->nparams && i < 8; i++) args[i] = host_buffer(p, &k->params[i]);
    if (k->nparams != 3 || !args[0] || !args[1] || !args[2]) {
      fprintf(stderr, "matmul_host: expected the parameters A, B, C, got %d parameters\n", k->nparams);
      rc = -1;
      goto out;
    }
    double t0 = now();
    rc = entry(args);
    printf("ran %s (C, compiled with %s) in %.3f ms\n", k->entry, cc, (now() - t0) * 1e3);
  }
out:
  if (h) dlclose(h);
  unlink(src);
  unlink(lib);
  rmdir(dir);
  return entry && rc == 0 ? 0 : -1;
}

/* ---- a CUDA kernel: the driver API through dlopen ------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

static struct cuda {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*ctx_retain)(CUcontext *, CUdevice);
  CUresult (*ctx_release)(CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*ctx_sync)(void);
  CUresult (*module_load)(CUmodule *, const void *);
  CUresult (*module_unload)(CUmodule);
  CUresult (*get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                     void **, void **);
  CUresult (*error_name)(CUresult, const char **);
} cu;

static int load_cuda(void) {
  const char *path = getenv("TUNED_CUDA_DRIVER") && *getenv("TUNED_CUDA_DRIVER") ? getenv("TUNED_CUDA_DRIVER")
                                                                                  : "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "matmul_host: no CUDA driver: %s\n", dlerror());
    return -1;
  }
  static const struct { const char *name; size_t off; } syms[] = {
#define SYM(f, n) {n, offsetof(struct cuda, f)}
      SYM(init, "cuInit"),           SYM(device_get, "cuDeviceGet"),
      SYM(ctx_retain, "cuDevicePrimaryCtxRetain"), SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2"),
      SYM(ctx_set, "cuCtxSetCurrent"), SYM(ctx_sync, "cuCtxSynchronize"),
      SYM(module_load, "cuModuleLoadData"), SYM(module_unload, "cuModuleUnload"),
      SYM(get_function, "cuModuleGetFunction"), SYM(mem_alloc, "cuMemAlloc_v2"),
      SYM(mem_free, "cuMemFree_v2"), SYM(htod, "cuMemcpyHtoD_v2"),
      SYM(dtoh, "cuMemcpyDtoH_v2"),  SYM(launch, "cuLaunchKernel"),
      SYM(error_name, "cuGetErrorName"),
#undef SYM
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f) {
      fprintf(stderr, "matmul_host: %s has no %s\n", path, syms[i].name);
      return -1;
    }
    memcpy((char *)&cu + syms[i].off, &f, sizeof f);
  }
  return 0;
}

static int cu_check(CUresult rc, const char *what) {
  if (rc == 0) return 0;
  const char *name = "?";
  cu.error_name(rc, &name);
  fprintf(stderr, "matmul_host: %s failed: %s (%d)\n", what, name, rc);
  return -1;
}

/* Launches every kernel of k in order with the tuned grid/block/shared memory. */
static int launch_all(const tuned_kernel_t *k, CUmodule mod, void **args) {
  for (int i = 0; i < k->nkernels; i++) {
    const tuned_launch_t *l = &k->kernels[i];
    CUfunction fn;
    if (l->ntensor_maps) { /* Hopper GEMMs that copy by TMA: docs/protocol.md says how to make them */
      fprintf(stderr, "matmul_host: kernel %s takes %d TMA tensor maps (cuTensorMapEncodeTiled), which this example "
              "does not make\n", l->name, l->ntensor_maps);
      return -1;
    }
    if (cu_check(cu.get_function(&fn, mod, l->name), "cuModuleGetFunction") < 0 ||
        cu_check(cu.launch(fn, (unsigned)l->grid[0], (unsigned)l->grid[1], (unsigned)l->grid[2],
                           (unsigned)l->block[0], (unsigned)l->block[1], (unsigned)l->block[2],
                           (unsigned)l->shared_bytes, NULL, args, NULL), "cuLaunchKernel") < 0)
      return -1;
  }
  return cu_check(cu.ctx_sync(), "cuCtxSynchronize");
}

static int run_cuda(const tuned_kernel_t *k, problem_t *p) {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod = NULL;
  CUdeviceptr d[8] = {0};
  void *args[8];
  const void *image = k->cubin ? (const void *)k->cubin : (const void *)k->ptx;
  if (k->nparams > 8 || !image) {
    fprintf(stderr, "matmul_host: the kernel has %d parameters and %s\n", k->nparams, image ? "a module" : "no module");
    return -1;
  }
  if (load_cuda() < 0 || cu_check(cu.init(0), "cuInit") < 0 || cu_check(cu.device_get(&dev, 0), "cuDeviceGet") < 0 ||
      cu_check(cu.ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain") < 0 || cu_check(cu.ctx_set(ctx), "cuCtxSetCurrent") < 0)
    return -1;
  int rc = cu_check(cu.module_load(&mod, image), k->cubin ? "cuModuleLoadData (CUBIN)" : "cuModuleLoadData (PTX)");
  for (int i = 0; rc == 0 && i < k->nparams; i++) {
    const tuned_param_t *prm = &k->params[i];
    float *host = host_buffer(p, prm);
    size_t bytes = (size_t)prm->elements * (size_t)prm->elem_bytes;
    rc = cu_check(cu.mem_alloc(&d[i], bytes), "cuMemAlloc");
    if (rc == 0 && host && strcmp(prm->role, "input") == 0) rc = cu_check(cu.htod(d[i], host, bytes), "cuMemcpyHtoD");
    args[i] = &d[i];
  }
  double t0 = now();
  if (rc == 0) rc = launch_all(k, mod, args);
  if (rc == 0) printf("ran %d CUDA kernel(s) of %s in %.3f ms (first launch)\n", k->nkernels, k->entry, (now() - t0) * 1e3);
  for (int i = 0; rc == 0 && i < k->nparams; i++)
    if (strcmp(k->params[i].name, "C") == 0)
      rc = cu_check(cu.dtoh(p->c, d[i], (size_t)k->params[i].elements * sizeof(float)), "cuMemcpyDtoH");
  for (int i = 0; i < k->nparams; i++)
    if (d[i]) cu.mem_free(d[i]);
  if (mod) cu.module_unload(mod);
  cu.ctx_release(dev);
  return rc;
}

/* ---- checking ------------------------------------------------------------ */

static void make_problem(problem_t *p, int n) {
  size_t sz = (size_t)n * (size_t)n;
  p->n = n;
  p->a = malloc(sz * sizeof(float));
  p->b = malloc(sz * sizeof(float));
  p->c = malloc(sz * sizeof(float));
  p->ref = malloc(sz * sizeof(float));
  unsigned s = 12345;
  for (size_t i = 0; i < sz; i++) {
    s = s * 1103515245u + 12345u;
    p->a[i] = (float)((s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    s = s * 1103515245u + 12345u;
    p->b[i] = (float)((s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    p->c[i] = NAN;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double acc = 0;
      for (int k = 0; k < n; k++) acc += (double)p->a[i * n + k] * p->b[k * n + j];
      p->ref[i * n + j] = (float)acc;
    }
}

/* Relative L2 error of C against the reference; prints it. */
static int check(const problem_t *p) {
  double num = 0, den = 0, worst = 0;
  size_t sz = (size_t)p->n * (size_t)p->n;
  for (size_t i = 0; i < sz; i++) {
    double d = (double)p->c[i] - p->ref[i];
    num += d * d, den += (double)p->ref[i] * p->ref[i];
    if (!(fabs(d) <= worst)) worst = fabs(d);
  }
  double rel = sqrt(num / (den > 0 ? den : 1));
  bool ok = rel < 1e-4;
  printf("check: C[0][0] = %.6f (reference %.6f), max |error| %.3g, relative L2 error %.3g: %s\n", p->c[0], p->ref[0],
         worst, rel, ok ? "ok" : "WRONG");
  return ok ? 0 : -1;
}

/* ---- main ------------------------------------------------------------------ */

static int usage(void) {
  fprintf(stderr, "usage: matmul_host [--socket PATH] [--target T] [--size N] [--trials N]\n"
                  "Fetches (tuning first if needed) the best N x N x N matmul kernel from the tuned\n"
                  "daemon, runs it and checks the result.  Defaults: the daemon's socket and\n"
                  "target, N = 256, 32 trials.\n");
  return 2;
}

static int parse(int argc, char **argv, options_t *o) {
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return -1;
    if (strcmp(argv[i], "--socket") == 0) o->socket = argv[++i];
    else if (strcmp(argv[i], "--target") == 0) o->target = argv[++i];
    else if (strcmp(argv[i], "--size") == 0) o->n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--trials") == 0) o->trials = atoi(argv[++i]);
    else return -1;
  }
  return o->n >= 1 && o->n <= 4096 && o->trials >= 1 ? 0 : -1;
}

int main(int argc, char **argv) {
  options_t o = {.n = 256, .trials = 32};
  if (parse(argc, argv, &o) < 0) return usage();
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  if (tuned_connect(o.socket, &c, &err) < 0) {
    fprintf(stderr, "matmul_host: %s\nmatmul_host: start the daemon first, e.g. `tuned --target cpu &`\n", err.message);
    return 1;
  }
  tuned_kernel_t *k = get_kernel(c, &o);
  tuned_close(c);
  if (!k) return 1;
  printf("best kernel: record %lld on %s, %s, median %.3f ms, %.2f GFLOP/s, %d launch(es)\n", (long long)k->record,
         k->target, k->language, k->median_secs * 1e3, k->gflops, k->nkernels);
  for (int i = 0; i < k->nkernels; i++)
    printf("  %s grid (%lld, %lld, %lld) block (%lld, %lld, %lld) shared %lld B\n", k->kernels[i].name,
           (long long)k->kernels[i].grid[0], (long long)k->kernels[i].grid[1], (long long)k->kernels[i].grid[2],
           (long long)k->kernels[i].block[0], (long long)k->kernels[i].block[1], (long long)k->kernels[i].block[2],
           (long long)(k->kernels[i].shared_bytes + k->kernels[i].static_shared_bytes));
  problem_t p;
  make_problem(&p, o.n);
  int rc = -1;
  if (strcmp(k->language, "cuda") == 0) rc = run_cuda(k, &p);
  else if (strcmp(k->language, "c") == 0) rc = run_c(k, &p);
  else fprintf(stderr, "matmul_host: this example runs C and CUDA kernels; the daemon's target gives %s\n", k->language);
  if (rc == 0) rc = check(&p);
  tuned_kernel_free(k);
  free(p.a), free(p.b), free(p.c), free(p.ref);
  return rc == 0 ? 0 : 1;
}
