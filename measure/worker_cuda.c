/* worker_cuda.c — the worker's CUDA backend: the driver API loaded with
 * dlopen ($TUNED_CUDA_DRIVER or libcuda.so.1) and cuGetProcAddress (ABI
 * 12000), the primary context of device 0, device buffers per workload,
 * cuModuleLoadData of the CUBIN, TMA tensor maps (cuTensorMapEncodeTiled)
 * over the arguments' buffers, cuLaunchKernel, timing with CUDA events.
 * A sticky error (illegal address, launch failure, ...) is fatal: the worker
 * replies and exits, and the runner starts a fresh one. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned_config.h"
#include "worker.h"

#if TUNED_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>

#define FLUSH_BYTES ((size_t)256 << 20)

/* Driver entry points (fields are not named cuXxx: cuda.h macro-renames those). */
#define CU_FUNCS(X)                                                 \
  X(init, "cuInit", PFN_cuInit_v2000)                               \
  X(driver_version, "cuDriverGetVersion", PFN_cuDriverGetVersion_v2020) \
  X(device_get, "cuDeviceGet", PFN_cuDeviceGet_v2000)               \
  X(ctx_retain, "cuDevicePrimaryCtxRetain", PFN_cuDevicePrimaryCtxRetain_v7000) \
  X(ctx_set, "cuCtxSetCurrent", PFN_cuCtxSetCurrent_v4000)          \
  X(ctx_sync, "cuCtxSynchronize", PFN_cuCtxSynchronize_v2000)       \
  X(mem_alloc, "cuMemAlloc", PFN_cuMemAlloc_v3020)                  \
  X(mem_free, "cuMemFree", PFN_cuMemFree_v3020)                     \
  X(htod, "cuMemcpyHtoD", PFN_cuMemcpyHtoD_v3020)                   \
  X(dtoh, "cuMemcpyDtoH", PFN_cuMemcpyDtoH_v3020)                   \
  X(memset8, "cuMemsetD8", PFN_cuMemsetD8_v3020)                    \
  X(module_load, "cuModuleLoadData", PFN_cuModuleLoadData_v2000)    \
  X(module_unload, "cuModuleUnload", PFN_cuModuleUnload_v2000)      \
  X(module_func, "cuModuleGetFunction", PFN_cuModuleGetFunction_v2000) \
  X(launch, "cuLaunchKernel", PFN_cuLaunchKernel_v4000)             \
  X(func_attr, "cuFuncSetAttribute", PFN_cuFuncSetAttribute_v9000)  \
  X(event_create, "cuEventCreate", PFN_cuEventCreate_v2000)         \
  X(event_record, "cuEventRecord", PFN_cuEventRecord_v2000)         \
  X(event_sync, "cuEventSynchronize", PFN_cuEventSynchronize_v2000) \
  X(event_elapsed, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000) \
  X(error_name, "cuGetErrorName", PFN_cuGetErrorName_v6000)         \
  X(tensor_map_tiled, "cuTensorMapEncodeTiled", PFN_cuTensorMapEncodeTiled_v12000)

static struct {
#define FIELD(f, name, type) type f;
  CU_FUNCS(FIELD)
#undef FIELD
  void *lib;
  CUcontext ctx;
  const wk_workload_t *w;
  CUdeviceptr *bufs;
  int nbufs;
  CUdeviceptr ws[WK_MAX_ARGS];
  int64_t ws_size[WK_MAX_ARGS];
  CUmodule mod;
  CUfunction fns[WK_MAX_KERNELS];
  CUdeviceptr argv[WK_MAX_ARGS];
  CUtensorMap maps[WK_MAX_KERNELS][2];
  void *argp[WK_MAX_KERNELS][WK_MAX_ARGS + 2]; /* kernel k's: &argv[i], then &maps[k][m] */
  const wk_run_t *run;
  CUevent ev0, ev1;
  CUdeviceptr flush;
} cu;

static const char *err_name(CUresult rc) {
  const char *s = NULL;
  if (cu.error_name) cu.error_name(rc, &s);
  return s ? s : rc == 34 ? "CUDA_ERROR_STUB_LIBRARY" : "unknown CUDA error";
}

/* Errors after which the context is unusable. */
static bool sticky(CUresult rc) {
  return rc == CUDA_ERROR_ILLEGAL_ADDRESS || rc == CUDA_ERROR_LAUNCH_FAILED || rc == CUDA_ERROR_MISALIGNED_ADDRESS ||
         rc == CUDA_ERROR_ILLEGAL_INSTRUCTION || rc == CUDA_ERROR_HARDWARE_STACK_ERROR || rc == CUDA_ERROR_ASSERT ||
         rc == CUDA_ERROR_INVALID_ADDRESS_SPACE || rc == CUDA_ERROR_INVALID_PC || rc == CUDA_ERROR_LAUNCH_TIMEOUT ||
         rc == CUDA_ERROR_ECC_UNCORRECTABLE || rc == CUDA_ERROR_UNKNOWN;
}

/* Fails e with what, the error code and name; fatal for sticky errors. */
static int cu_fail(wk_err_t *e, CUresult rc, const char *what) {
  e->fatal = sticky(rc);
  return wk_fail(e, "%s failed: %s (CUDA error %d)%s", what, err_name(rc), (int)rc,
                 e->fatal ? "; the context is unusable, the worker restarts" : "");
}

#define CU_TRY(call, what)              \
  do {                                  \
    CUresult rc_ = (call);              \
    if (rc_ != CUDA_SUCCESS) return cu_fail(e, rc_, what); \
  } while (0)

static int load_driver(wk_err_t *e) {
  const char *path = getenv("TUNED_CUDA_DRIVER");
  if (!path || !*path) path = "libcuda.so.1";
  if (!(cu.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
    return wk_fail(e, "no CUDA driver: %s (install the NVIDIA driver, or set TUNED_CUDA_DRIVER to libcuda.so.1's path)",
                   dlerror());
  PFN_cuGetProcAddress_v12000 gpa;
  void *p = dlsym(cu.lib, "cuGetProcAddress_v2");
  if (!p) return wk_fail(e, "CUDA driver %s is too old: no cuGetProcAddress_v2 (CUDA 12 or newer needed)", path);
  memcpy(&gpa, &p, sizeof p);
  CUdriverProcAddressQueryResult q;
  CUresult rc;
#define LOAD(f, name, type)                                                                        \
  p = NULL;                                                                                        \
  if ((rc = gpa(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q)) != CUDA_SUCCESS || !p)          \
    return wk_fail(e, "CUDA driver %s: cuGetProcAddress(%s) failed with error %d%s", path, name, (int)rc, \
                   rc == 34 ? " (CUDA_ERROR_STUB_LIBRARY: a stub, not a real driver)" : "");       \
  memcpy(&cu.f, &p, sizeof p);
  CU_FUNCS(LOAD)
#undef LOAD
  return 0;
}

static int cuda_init(wk_err_t *e) {
  if (cu.ctx) return 0;
  if (!cu.lib && load_driver(e) < 0) {
    if (cu.lib) dlclose(cu.lib);
    cu.lib = NULL;
    return -1;
  }
  CUdevice dev;
  CU_TRY(cu.init(0), "cuInit");
  CU_TRY(cu.device_get(&dev, 0), "cuDeviceGet");
  CU_TRY(cu.ctx_retain(&cu.ctx, dev), "cuDevicePrimaryCtxRetain");
  CU_TRY(cu.ctx_set(cu.ctx), "cuCtxSetCurrent");
  CU_TRY(cu.event_create(&cu.ev0, CU_EVENT_DEFAULT), "cuEventCreate");
  CU_TRY(cu.event_create(&cu.ev1, CU_EVENT_DEFAULT), "cuEventCreate");
  return 0;
}

static int cuda_bind(const wk_workload_t *w, wk_err_t *e) {
  for (int i = 0; i < cu.nbufs; i++)
    if (cu.bufs[i]) cu.mem_free(cu.bufs[i]);
  free(cu.bufs);
  cu.w = w;
  cu.bufs = tn_xcalloc((size_t)TN_MAX(w->nparams, 1), sizeof *cu.bufs);
  cu.nbufs = w->nparams;
  for (int i = 0; i < w->nparams; i++) CU_TRY(cu.mem_alloc(&cu.bufs[i], w->params[i].bytes), "cuMemAlloc");
  return 0;
}

/* A 2-D tiled tensor map over argument t->arg's device buffer (zero fill,
 * no interleave or L2 promotion); the data type only sizes the elements. */
static int encode_map(const wk_tensor_map_t *t, CUtensorMap *out, wk_err_t *e) {
  CUtensorMapDataType type = t->elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                             : t->elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                             : t->elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                                  : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  CUtensorMapSwizzle sw = t->swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                          : t->swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                          : t->swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                             : CU_TENSOR_MAP_SWIZZLE_NONE;
  if ((t->elem_bytes != 1 && t->elem_bytes != 2 && t->elem_bytes != 4 && t->elem_bytes != 8) ||
      (t->swizzle && sw == CU_TENSOR_MAP_SWIZZLE_NONE))
    return wk_fail(e, "tensor map of argument %d: %d-byte elements, %d-byte swizzle (1/2/4/8 and 0/32/64/128 "
                   "expected)", t->arg, t->elem_bytes, t->swizzle);
  cuuint64_t dims[2] = {(cuuint64_t)t->dims[0], (cuuint64_t)t->dims[1]}, strides[1] = {(cuuint64_t)t->stride_bytes};
  cuuint32_t box[2] = {(cuuint32_t)t->box[0], (cuuint32_t)t->box[1]}, unit[2] = {1, 1};
  CU_TRY(cu.tensor_map_tiled(out, type, 2, (void *)(uintptr_t)cu.argv[t->arg], dims, strides, box, unit,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
         "cuTensorMapEncodeTiled");
  return 0;
}

static int cuda_load(const wk_run_t *r, wk_err_t *e) {
  char *image = NULL;
  size_t len;
  tn_err_t err = {0};
  cu.run = r;
  if (tn_read_file(r->artifact, (size_t)256 << 20, &image, &len, &err) < 0) return wk_fail(e, "%s", err.msg);
  CUresult rc = cu.module_load(&cu.mod, image);
  free(image);
  if (rc != CUDA_SUCCESS) return cu_fail(e, rc, "cuModuleLoadData");
  for (int k = 0; k < r->nkernels; k++) {
    if ((rc = cu.module_func(&cu.fns[k], cu.mod, r->kernels[k].name)) != CUDA_SUCCESS)
      return cu_fail(e, rc, r->kernels[k].name);
    /* dynamic shared memory is opted into per kernel (what is over the static limit needs it; the rest may) */
    if (r->kernels[k].dyn_shared_bytes > 0 &&
        (rc = cu.func_attr(cu.fns[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           (int)r->kernels[k].dyn_shared_bytes)) != CUDA_SUCCESS)
      return cu_fail(e, rc, "cuFuncSetAttribute (MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  for (int i = 0; i < r->nargs; i++) {
    const wk_arg_t *a = &r->args[i];
    if (a->param >= 0) {
      cu.argv[i] = cu.bufs[a->param];
    } else {
      if (cu.ws_size[i] < a->workspace_bytes) {
        if (cu.ws[i]) cu.mem_free(cu.ws[i]);
        cu.ws_size[i] = 0;
        CU_TRY(cu.mem_alloc(&cu.ws[i], (size_t)a->workspace_bytes), "cuMemAlloc (workspace)");
        cu.ws_size[i] = a->workspace_bytes;
      }
      cu.argv[i] = cu.ws[i];
    }
  }
  for (int k = 0; k < r->nkernels; k++) {
    for (int i = 0; i < r->nargs; i++) cu.argp[k][i] = &cu.argv[i];
    for (int m = 0; m < r->kernels[k].nmaps; m++) {
      if (encode_map(&r->kernels[k].maps[m], &cu.maps[k][m], e) < 0) return -1;
      cu.argp[k][r->nargs + m] = &cu.maps[k][m];
    }
  }
  return 0;
}

/* Inputs are uploaded for every candidate: one that scribbled over its
 * inputs cannot spoil the next. */
static int cuda_prepare(wk_err_t *e) {
  for (int i = 0; i < cu.w->nparams; i++) {
    const wk_param_t *p = &cu.w->params[i];
    if (p->output) CU_TRY(cu.memset8(cu.bufs[i], 0xFF, p->bytes), "cuMemsetD8 (poison)");
    else CU_TRY(cu.htod(cu.bufs[i], p->data, p->bytes), "cuMemcpyHtoD");
  }
  CU_TRY(cu.ctx_sync(), "cuCtxSynchronize");
  return 0;
}

static int cuda_launch(double *secs, wk_err_t *e) {
  const wk_run_t *r = cu.run;
  CU_TRY(cu.event_record(cu.ev0, NULL), "cuEventRecord");
  for (int k = 0; k < r->nkernels; k++) {
    const wk_kernel_t *kk = &r->kernels[k];
    CU_TRY(cu.launch(cu.fns[k], (unsigned)kk->grid[0], (unsigned)kk->grid[1], (unsigned)kk->grid[2],
                     (unsigned)kk->block[0], (unsigned)kk->block[1], (unsigned)kk->block[2],
                     (unsigned)kk->dyn_shared_bytes, NULL, cu.argp[k], NULL),
           kk->name);
  }
  CU_TRY(cu.event_record(cu.ev1, NULL), "cuEventRecord");
  CU_TRY(cu.event_sync(cu.ev1), "running the kernels");
  float ms = 0;
  CU_TRY(cu.event_elapsed(&ms, cu.ev0, cu.ev1), "cuEventElapsedTime");
  *secs = ms * 1e-3;
  return 0;
}

static int cuda_fetch(wk_err_t *e) {
  for (int i = 0; i < cu.w->nparams; i++)
    if (cu.w->params[i].output)
      CU_TRY(cu.dtoh(cu.w->params[i].host, cu.bufs[i], cu.w->params[i].bytes), "cuMemcpyDtoH");
  return 0;
}

/* Overwrites a 256 MiB device buffer (more than any L2 today). */
static void cuda_flush(void) {
  static unsigned char round;
  if (!cu.flush && cu.mem_alloc(&cu.flush, FLUSH_BYTES) != CUDA_SUCCESS) {
    cu.flush = 0;
    return;
  }
  cu.memset8(cu.flush, ++round, FLUSH_BYTES);
  cu.ctx_sync();
}

static void cuda_unload(void) {
  if (cu.mod) cu.module_unload(cu.mod);
  cu.mod = NULL;
}

/* Kernel durations from CUPTI's activity records, beside the events. */
static int cuda_trace_begin(char *why, size_t whysize) {
  if (ms_cupti_trace_start(why, whysize) < 0) return -1;
  ms_cupti_trace_reset(); /* the device is idle: earlier candidates' records go */
  return 0;
}

static int cuda_traced(int want, double *out, char *why, size_t whysize) {
  return ms_cupti_trace_take(cu.run->nkernels, want, out, why, whysize);
}

static int launch_once(void *arg) {
  double secs;
  return cuda_launch(&secs, arg);
}

static int cuda_profile(const char *const *metrics, int n, double *values, int *nkernels, char *chip, size_t chipsize,
                        char *why, size_t whysize) {
  wk_err_t e = {0};
  int rc = ms_cupti_profile(cu.ctx, metrics, n, launch_once, &e, cu.run->nkernels, values, nkernels, chip, chipsize,
                            why, whysize);
  if (rc < 0 && e.msg[0]) snprintf(why, whysize, "%s", e.msg); /* the launch's own error says more */
  return rc;
}

const wk_backend_t wk_cuda_backend = {"cuda", cuda_init, cuda_bind, cuda_load, cuda_prepare,
                                      cuda_launch, cuda_fetch, cuda_flush, cuda_unload,
                                      cuda_trace_begin, cuda_traced, cuda_profile};
#else
static int no_cuda(wk_err_t *e) { return wk_fail(e, "this build has no CUDA support"); }
static int no_bind(const wk_workload_t *w, wk_err_t *e) { return (void)w, no_cuda(e); }
static int no_load(const wk_run_t *r, wk_err_t *e) { return (void)r, no_cuda(e); }
static int no_launch(double *s, wk_err_t *e) { return (void)s, no_cuda(e); }
static void no_op(void) {}
const wk_backend_t wk_cuda_backend = {"cuda", no_cuda, no_bind, no_load, no_cuda, no_launch, no_cuda, no_op, no_op,
                                      NULL, NULL, NULL};
#endif
