/* worker_opencl.c — the worker's OpenCL backend: one context and profiling
 * queue on the first OpenCL device, device buffers per workload, the
 * candidate's source rebuilt (a PoCL cache hit after the builder's build)
 * and timed with event profiling from the first kernel's start to the last
 * kernel's end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned_config.h"
#include "worker.h"

#if TUNED_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

static struct {
  cl_context ctx;
  cl_device_id dev;
  cl_command_queue q;
  const wk_workload_t *w;
  cl_mem *bufs; /* per workload parameter */
  int nbufs;
  cl_mem ws[WK_MAX_ARGS];
  int64_t ws_size[WK_MAX_ARGS];
  cl_program prog;
  cl_kernel kernels[WK_MAX_KERNELS];
  const wk_run_t *run;
} ocl;

static int ocl_init(wk_err_t *e) {
  if (ocl.q) return 0;
  cl_platform_id plats[8];
  cl_uint np = 0, nd = 0;
  cl_int rc = clGetPlatformIDs(8, plats, &np);
  if (rc != CL_SUCCESS || np == 0) return wk_fail(e, "no OpenCL platform (clGetPlatformIDs returned %d)", (int)rc);
  for (cl_uint p = 0; p < TN_MIN(np, 8u) && !nd; p++)
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 1, &ocl.dev, &nd) != CL_SUCCESS) nd = 0;
  if (!nd) return wk_fail(e, "no OpenCL device");
  if (!(ocl.ctx = clCreateContext(NULL, 1, &ocl.dev, NULL, NULL, &rc)))
    return wk_fail(e, "clCreateContext failed with error %d", (int)rc);
  if (!(ocl.q = clCreateCommandQueue(ocl.ctx, ocl.dev, CL_QUEUE_PROFILING_ENABLE, &rc)))
    return wk_fail(e, "clCreateCommandQueue failed with error %d", (int)rc);
  return 0;
}

static void release_bufs(void) {
  for (int i = 0; i < ocl.nbufs; i++)
    if (ocl.bufs[i]) clReleaseMemObject(ocl.bufs[i]);
  free(ocl.bufs);
  ocl.bufs = NULL;
  ocl.nbufs = 0;
}

static int ocl_bind(const wk_workload_t *w, wk_err_t *e) {
  release_bufs();
  ocl.w = w;
  ocl.bufs = tn_xcalloc((size_t)TN_MAX(w->nparams, 1), sizeof *ocl.bufs);
  ocl.nbufs = w->nparams;
  for (int i = 0; i < w->nparams; i++) {
    cl_int rc;
    if (!(ocl.bufs[i] = clCreateBuffer(ocl.ctx, CL_MEM_READ_WRITE, w->params[i].bytes, NULL, &rc)))
      return wk_fail(e, "clCreateBuffer of %zu bytes for %s failed with error %d", w->params[i].bytes,
                     w->params[i].name, (int)rc);
  }
  return 0;
}

static cl_mem workspace(int i, int64_t n, wk_err_t *e) {
  if (ocl.ws_size[i] >= n) return ocl.ws[i];
  if (ocl.ws[i]) clReleaseMemObject(ocl.ws[i]);
  cl_int rc;
  ocl.ws[i] = clCreateBuffer(ocl.ctx, CL_MEM_READ_WRITE, (size_t)n, NULL, &rc);
  ocl.ws_size[i] = ocl.ws[i] ? n : 0;
  if (!ocl.ws[i]) wk_fail(e, "clCreateBuffer of a %lld-byte workspace failed with error %d", (long long)n, (int)rc);
  return ocl.ws[i];
}

static int build(const char *path, wk_err_t *e) {
  char *src = NULL;
  size_t len;
  tn_err_t err = {0};
  if (tn_read_file(path, (size_t)16 << 20, &src, &len, &err) < 0) return wk_fail(e, "%s", err.msg);
  cl_int rc;
  const char *s = src;
  ocl.prog = clCreateProgramWithSource(ocl.ctx, 1, &s, &len, &rc);
  free(src);
  if (!ocl.prog) return wk_fail(e, "clCreateProgramWithSource failed with error %d", (int)rc);
  if ((rc = clBuildProgram(ocl.prog, 1, &ocl.dev, "", NULL, NULL)) != CL_SUCCESS) {
    char log[2048] = "";
    clGetProgramBuildInfo(ocl.prog, ocl.dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    return wk_fail(e, "OpenCL build of %s failed (error %d):\n%s", path, (int)rc, log);
  }
  return 0;
}

static int ocl_load(const wk_run_t *r, wk_err_t *e) {
  ocl.run = r;
  if (build(r->artifact, e) < 0) return -1;
  for (int k = 0; k < r->nkernels; k++) {
    cl_int rc;
    if (!(ocl.kernels[k] = clCreateKernel(ocl.prog, r->kernels[k].name, &rc)))
      return wk_fail(e, "kernel %s: clCreateKernel failed with error %d", r->kernels[k].name, (int)rc);
    for (int i = 0; i < r->nargs; i++) {
      cl_mem m = r->args[i].param >= 0 ? ocl.bufs[r->args[i].param] : workspace(i, r->args[i].workspace_bytes, e);
      if (!m) return -1;
      if ((rc = clSetKernelArg(ocl.kernels[k], (cl_uint)i, sizeof m, &m)) != CL_SUCCESS)
        return wk_fail(e, "kernel %s: argument %d: clSetKernelArg failed with error %d", r->kernels[k].name, i,
                       (int)rc);
    }
  }
  return 0;
}

static int ocl_prepare(wk_err_t *e) {
  const wk_workload_t *w = ocl.w;
  unsigned char poison = 0xFF;
  for (int i = 0; i < w->nparams; i++) {
    const wk_param_t *p = &w->params[i];
    cl_int rc = p->output ? clEnqueueFillBuffer(ocl.q, ocl.bufs[i], &poison, 1, 0, p->bytes, 0, NULL, NULL)
                          : clEnqueueWriteBuffer(ocl.q, ocl.bufs[i], CL_FALSE, 0, p->bytes, p->data, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return wk_fail(e, "preparing %s failed with OpenCL error %d", p->name, (int)rc);
  }
  cl_int rc = clFinish(ocl.q);
  return rc == CL_SUCCESS ? 0 : wk_fail(e, "clFinish failed with error %d", (int)rc);
}

static int ocl_launch(double *secs, wk_err_t *e) {
  const wk_run_t *r = ocl.run;
  cl_event first = NULL, last = NULL;
  for (int k = 0; k < r->nkernels; k++) {
    size_t global[3], local[3];
    for (int d = 0; d < 3; d++) {
      local[d] = (size_t)r->kernels[k].block[d];
      global[d] = (size_t)(r->kernels[k].grid[d] * r->kernels[k].block[d]);
    }
    cl_event ev;
    cl_int rc = clEnqueueNDRangeKernel(ocl.q, ocl.kernels[k], 3, NULL, global, local, 0, NULL, &ev);
    if (rc != CL_SUCCESS) {
      if (first) clReleaseEvent(first);
      if (last && last != first) clReleaseEvent(last);
      return wk_fail(e, "kernel %s: clEnqueueNDRangeKernel failed with error %d", r->kernels[k].name, (int)rc);
    }
    if (!first) first = ev;
    else if (last && last != first) clReleaseEvent(last);
    last = ev;
  }
  cl_int rc = clFinish(ocl.q);
  cl_ulong t0 = 0, t1 = 0;
  clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
  clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  if (last != first) clReleaseEvent(last);
  clReleaseEvent(first);
  if (rc != CL_SUCCESS) return wk_fail(e, "running the kernels failed with OpenCL error %d", (int)rc);
  *secs = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0;
  return 0;
}

static int ocl_fetch(wk_err_t *e) {
  const wk_workload_t *w = ocl.w;
  for (int i = 0; i < w->nparams; i++) {
    if (!w->params[i].output) continue;
    cl_int rc = clEnqueueReadBuffer(ocl.q, ocl.bufs[i], CL_TRUE, 0, w->params[i].bytes, w->params[i].host, 0, NULL,
                                    NULL);
    if (rc != CL_SUCCESS) return wk_fail(e, "reading %s back failed with OpenCL error %d", w->params[i].name, (int)rc);
  }
  return 0;
}

static void ocl_unload(void) {
  for (int k = 0; k < WK_MAX_KERNELS; k++)
    if (ocl.kernels[k]) clReleaseKernel(ocl.kernels[k]), ocl.kernels[k] = NULL;
  if (ocl.prog) clReleaseProgram(ocl.prog);
  ocl.prog = NULL;
}

const wk_backend_t wk_opencl_backend = {"opencl", ocl_init, ocl_bind, ocl_load, ocl_prepare,
                                        ocl_launch, ocl_fetch, wk_flush_host_cache, ocl_unload, NULL, NULL, NULL};
#else
static int no_ocl(wk_err_t *e) { return wk_fail(e, "this build has no OpenCL support"); }
static int no_bind(const wk_workload_t *w, wk_err_t *e) { return (void)w, no_ocl(e); }
static int no_load(const wk_run_t *r, wk_err_t *e) { return (void)r, no_ocl(e); }
static int no_launch(double *s, wk_err_t *e) { return (void)s, no_ocl(e); }
static void no_op(void) {}
const wk_backend_t wk_opencl_backend = {"opencl", no_ocl, no_bind, no_load, no_ocl, no_launch, no_ocl, no_op, no_op,
                                        NULL, NULL, NULL};
#endif
