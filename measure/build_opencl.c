/* build_opencl.c — OpenCL builds: the source is validated with
 * clBuildProgram on the first OpenCL device (one context per process) and
 * kept as the artifact; the worker rebuilds it, fast through the shared PoCL
 * cache.  The device's type also decides which measurer times OpenCL
 * candidates (a CPU device is the host CPU).  Local memory and work-group limits are checked here because PoCL
 * accepts tiles no GPU would. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_internal.h"
#include "tuned_config.h"

#if TUNED_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

static pthread_once_t cl_once = PTHREAD_ONCE_INIT;
static cl_context cl_ctx;
static cl_device_id cl_dev;
static char cl_version[128], cl_error[256];

/* First device of the first platform that has one (as the worker picks). */
static void cl_init(void) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  cl_int rc = clGetPlatformIDs(8, plats, &np);
  if (rc != CL_SUCCESS || np == 0) {
    snprintf(cl_error, sizeof cl_error, "no OpenCL platform (clGetPlatformIDs returned %d)", (int)rc);
    return;
  }
  for (cl_uint p = 0; p < TN_MIN(np, 8u); p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 1, &cl_dev, &nd) != CL_SUCCESS || nd == 0) continue;
    cl_ctx = clCreateContext(NULL, 1, &cl_dev, NULL, NULL, &rc);
    if (!cl_ctx) {
      snprintf(cl_error, sizeof cl_error, "clCreateContext failed with error %d", (int)rc);
      return;
    }
    clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof cl_version - 1, cl_version, NULL);
    return;
  }
  snprintf(cl_error, sizeof cl_error, "%u OpenCL platform(s) but no device", (unsigned)np);
}

static char *build_log(cl_program prog) {
  size_t n = 0;
  clGetProgramBuildInfo(prog, cl_dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char *log = tn_xcalloc(1, n + 1);
  if (n) clGetProgramBuildInfo(prog, cl_dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
  return log;
}

/* Looks up every kernel and checks its local memory and work-group size. */
static int check_kernels(const ms_candidate_t *c, cl_program prog, ms_result_t *res) {
  res->build.shared_bytes = 0;
  for (int i = 0; i < c->nkernels; i++) {
    const cg_kernel_t *k = &c->kernels[i];
    cl_int rc;
    cl_kernel kk = clCreateKernel(prog, k->name, &rc);
    if (!kk) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s is not in the program (clCreateKernel error %d)", k->name,
                     (int)rc);
      return -1;
    }
    cl_ulong local = 0;
    size_t wg = 0;
    clGetKernelWorkGroupInfo(kk, cl_dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetKernelWorkGroupInfo(kk, cl_dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    clReleaseKernel(kk);
    int64_t threads = k->block[0] * k->block[1] * k->block[2];
    res->build.shared_bytes = TN_MAX(res->build.shared_bytes, (int64_t)local);
    if (c->target.max_shared_memory_per_block > 0 && (int64_t)local > c->target.max_shared_memory_per_block) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s uses %llu bytes of local memory; %s allows %lld", k->name,
                     (unsigned long long)local, c->target.name, (long long)c->target.max_shared_memory_per_block);
      return -1;
    }
    if (wg > 0 && threads > (int64_t)wg) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s has %lld work-items per group; the device allows %zu",
                     k->name, (long long)threads, wg);
      return -1;
    }
  }
  return 0;
}

void ms_build_opencl(const ms_candidate_t *cand, const char *dir, ms_result_t *res) {
  if (ms_check_block_limits(cand, res) < 0) return;
  pthread_once(&cl_once, cl_init);
  if (!cl_ctx) {
    ms_result_fail(res, MS_BUILD_ERROR, "OpenCL: %s", cl_error);
    return;
  }
  snprintf(res->build.compiler, sizeof res->build.compiler, "%s", cl_version);
  const char *src = cand->source;
  cl_int rc;
  cl_program prog = clCreateProgramWithSource(cl_ctx, 1, &src, NULL, &rc);
  if (!prog) {
    ms_result_fail(res, MS_BUILD_ERROR, "clCreateProgramWithSource failed with error %d", (int)rc);
    return;
  }
  rc = clBuildProgram(prog, 1, &cl_dev, "", NULL, NULL);
  char *log = build_log(prog);
  char path[MS_PATH_MAX];
  tn_err_t err = {0};
  snprintf(path, sizeof path, "%s/cand.cl", dir);
  if (rc != CL_SUCCESS) {
    ms_result_fail(res, MS_BUILD_ERROR, "OpenCL build failed (error %d):\n%s", (int)rc, log);
  } else if (check_kernels(cand, prog, res) == 0) {
    if (ms_write_file(path, cand->source, strlen(cand->source), &err) < 0)
      ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
    else
      snprintf(res->artifact, sizeof res->artifact, "%s", path);
  }
  free(log);
  clReleaseProgram(prog);
}

bool ms_opencl_device_is_cpu(void) {
  pthread_once(&cl_once, cl_init);
  cl_device_type type = 0;
  return cl_ctx && clGetDeviceInfo(cl_dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
         (type & CL_DEVICE_TYPE_CPU);
}
#else
void ms_build_opencl(const ms_candidate_t *cand, const char *dir, ms_result_t *res) {
  (void)cand, (void)dir;
  ms_result_fail(res, MS_BUILD_ERROR, "this build has no OpenCL support (install ocl-icd-opencl-dev and rebuild)");
}

bool ms_opencl_device_is_cpu(void) { return false; }
#endif
