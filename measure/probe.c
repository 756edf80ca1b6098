/* probe.c — finds out which execution backends are usable on this machine:
 * the host CPU, an OpenCL platform (asked of a build process, build_opencl.c,
 * so that PoCL's LLVM never loads here), and the CUDA driver (dlopen'ed). */
#include "ms_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tuned_config.h"

#if TUNED_HAVE_CUDA
#include <nvrtc.h>
#endif

const char *ms_backend_name(ms_backend_t b) {
  static const char *const names[] = {"cpu", "opencl", "cuda"};
  return (unsigned)b < MS_BACKEND__COUNT ? names[b] : "?";
}

static void probe_cpu(ms_backend_status_t *st) {
  st->compiled = st->available = true;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(st->detail, sizeof st->detail, "host CPU, %ld cores", n);
}

/* cuInit and friends through dlopen: the three calls below have had one ABI
 * since CUDA 2.0, so plain dlsym is safe for the probe. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  return p;
}

static void probe_cuda(ms_backend_status_t *st) {
#if TUNED_HAVE_CUDA
  st->compiled = true;
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  const char *path = getenv("TUNED_CUDA_DRIVER");
  if (!path || !*path) path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(st->detail, sizeof st->detail, "no CUDA driver: %s (NVRTC %d.%d can still compile)",
             dlerror(), major, minor);
    return;
  }
  cu_init_fn init;
  cu_count_fn count;
  cu_get_fn get;
  cu_name_fn name;
  void *p;
  p = sym(h, "cuInit"), memcpy(&init, &p, sizeof p);
  p = sym(h, "cuDeviceGetCount"), memcpy(&count, &p, sizeof p);
  p = sym(h, "cuDeviceGet"), memcpy(&get, &p, sizeof p);
  p = sym(h, "cuDeviceGetName"), memcpy(&name, &p, sizeof p);
  int rc, n = 0, dev = 0;
  char dname[128] = "";
  if (!init || !count || !get || !name) {
    snprintf(st->detail, sizeof st->detail, "CUDA driver %s lacks cuInit/cuDeviceGet*", path);
  } else if ((rc = init(0)) != 0) {
    snprintf(st->detail, sizeof st->detail, "CUDA driver %s: cuInit failed with error %d%s", path, rc,
             rc == 34 ? " (CUDA_ERROR_STUB_LIBRARY: a stub, not a real driver)"
                      : rc == 100 ? " (CUDA_ERROR_NO_DEVICE)" : "");
  } else if ((rc = count(&n)) != 0 || n == 0) {
    snprintf(st->detail, sizeof st->detail, "CUDA driver loaded but no device (error %d)", rc);
  } else if (get(&dev, 0) == 0 && name(dname, (int)sizeof dname - 1, dev) == 0) {
    st->available = true;
    snprintf(st->detail, sizeof st->detail, "%s (%d device%s), NVRTC %d.%d", dname, n, n > 1 ? "s" : "",
             major, minor);
  }
  dlclose(h);
#else
  (void)sym;
  snprintf(st->detail, sizeof st->detail, "built without CUDA (NVRTC not found at setup; see -Dctk_root)");
#endif
}

void ms_backend_probe(ms_backend_t b, ms_backend_status_t *st) {
  memset(st, 0, sizeof *st);
  switch (b) {
  case MS_BACKEND_CPU: probe_cpu(st); break;
  case MS_BACKEND_OPENCL: ms_opencl_probe(st, NULL); break; /* in a build process: PoCL is LLVM */
  case MS_BACKEND_CUDA: probe_cuda(st); break;
  default: snprintf(st->detail, sizeof st->detail, "unknown backend"); break;
  }
}
