/* build_opencl.c — OpenCL builds: the source is validated with
 * clBuildProgram on the first OpenCL device and kept as the artifact; the
 * worker rebuilds it, fast through the shared PoCL cache.  clBuildProgram
 * (LLVM, in PoCL) runs only in the build process (build_server.c), never in
 * the builder's: there it can be killed at the time limit, and a crash takes
 * only that process.  The device's type, probed there too, decides which
 * measurer times OpenCL candidates (a CPU device is the host CPU).  Local
 * memory and work-group limits are checked by the caller because PoCL
 * accepts tiles no GPU would.
 *
 * The build process's requests (framed JSON, see build_server.c):
 *   {"op": "opencl", "source": "...", "kernels": ["k0", "k1"]}
 *     -> {"code": 0, "version": "OpenCL 3.0 PoCL ...", "log": "...",
 *         "kernels": [{"local_bytes": 4096, "max_work_group": 4096}, ...]}
 *      | {"code": -22, "error": "OpenCL build failed (error -11): ...", ...}
 *   {"op": "opencl_probe"}
 *     -> {"available": true, "detail": "Portable Computing Language: cpu-...", "cpu": true} */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_internal.h"
#include "tuned_config.h"

/* How long the probe's build process may take to answer (PoCL's first
 * start compiles its kernel library). */
#define PROBE_TIMEOUT_S 60.0

#if TUNED_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

/* ---- in the build process ------------------------------------------------- */

static pthread_once_t cl_once = PTHREAD_ONCE_INIT;
static cl_context cl_ctx;
static cl_device_id cl_dev;
static char cl_version[128], cl_error[256], cl_name[256];

/* First device of the first platform that has one (as the worker picks). */
static void cl_init(void) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  cl_int rc = clGetPlatformIDs(8, plats, &np);
  if (rc != CL_SUCCESS || np == 0) {
    snprintf(cl_error, sizeof cl_error,
             "no OpenCL platform (clGetPlatformIDs returned %d); install an ICD such as pocl-opencl-icd", (int)rc);
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
    char pname[96] = "", dname[128] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetDeviceInfo(cl_dev, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
    snprintf(cl_name, sizeof cl_name, "%s: %s", pname, dname);
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

/* The reply's failure (code < 0), with the build log when there is one. */
static cJSON *fail_reply(cJSON *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cJSON *fail_reply(cJSON *r, int code, const char *fmt, ...) {
  char msg[MS_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON_AddNumberToObject(r, "code", code);
  cJSON_AddStringToObject(r, "error", msg);
  return r;
}

/* Builds the source and looks up every kernel's local memory and largest
 * work-group size. */
static cJSON *serve_build(const cJSON *req) {
  cJSON *r = cJSON_CreateObject();
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(req, "source"),
              *names = cJSON_GetObjectItemCaseSensitive(req, "kernels");
  if (!cJSON_IsString(src) || !cJSON_IsArray(names))
    return fail_reply(r, TN_EINVAL, "opencl: needs \"source\" and \"kernels\"");
  pthread_once(&cl_once, cl_init);
  if (!cl_ctx) return fail_reply(r, TN_EUNSUPPORTED, "OpenCL: %s", cl_error);
  cJSON_AddStringToObject(r, "version", cl_version);
  const char *text = src->valuestring;
  cl_int rc;
  cl_program prog = clCreateProgramWithSource(cl_ctx, 1, &text, NULL, &rc);
  if (!prog) return fail_reply(r, TN_EINVAL, "clCreateProgramWithSource failed with error %d", (int)rc);
  rc = clBuildProgram(prog, 1, &cl_dev, "", NULL, NULL);
  char *log = build_log(prog);
  cJSON_AddStringToObject(r, "log", log);
  if (rc != CL_SUCCESS) fail_reply(r, TN_EINVAL, "OpenCL build failed (error %d):\n%s", (int)rc, log);
  free(log);
  cJSON *ks = cJSON_AddArrayToObject(r, "kernels");
  const cJSON *name;
  cJSON_ArrayForEach(name, names) {
    if (rc != CL_SUCCESS) break;
    cl_kernel kk = cJSON_IsString(name) ? clCreateKernel(prog, name->valuestring, &rc) : NULL;
    if (!kk) {
      fail_reply(r, TN_EINVAL, "kernel %s is not in the program (clCreateKernel error %d)",
                 cJSON_IsString(name) ? name->valuestring : "(not a string)", (int)rc);
      break;
    }
    cl_ulong local = 0;
    size_t wg = 0;
    clGetKernelWorkGroupInfo(kk, cl_dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetKernelWorkGroupInfo(kk, cl_dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    clReleaseKernel(kk);
    cJSON *k = cJSON_CreateObject();
    cJSON_AddNumberToObject(k, "local_bytes", (double)local);
    cJSON_AddNumberToObject(k, "max_work_group", (double)wg);
    cJSON_AddItemToArray(ks, k);
  }
  clReleaseProgram(prog);
  if (rc == CL_SUCCESS) cJSON_AddNumberToObject(r, "code", TN_OK);
  return r;
}

static cJSON *serve_probe(void) {
  pthread_once(&cl_once, cl_init);
  cJSON *r = cJSON_CreateObject();
  cl_device_type type = 0;
  cJSON_AddBoolToObject(r, "available", cl_ctx != NULL);
  cJSON_AddStringToObject(r, "detail", cl_ctx ? cl_name : cl_error);
  cJSON_AddBoolToObject(r, "cpu", cl_ctx && clGetDeviceInfo(cl_dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) ==
                                                  CL_SUCCESS && (type & CL_DEVICE_TYPE_CPU));
  return r;
}

cJSON *ms_opencl_serve(const cJSON *req) {
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(req, "op");
  if (cJSON_IsString(op) && strcmp(op->valuestring, "opencl_probe") == 0) return serve_probe();
  return serve_build(req);
}
#else
cJSON *ms_opencl_serve(const cJSON *req) {
  (void)req;
  cJSON *r = cJSON_CreateObject();
  cJSON_AddNumberToObject(r, "code", TN_EUNSUPPORTED);
  cJSON_AddStringToObject(r, "error", "this build has no OpenCL support");
  return r;
}
#endif

/* ---- in the builder ------------------------------------------------------- */

/* Checks every kernel's local memory and work-group size (from the reply)
 * against the target and the device. */
static int check_kernels(const ms_candidate_t *c, const cJSON *reply, ms_result_t *res) {
  const cJSON *ks = cJSON_GetObjectItemCaseSensitive(reply, "kernels");
  res->build.shared_bytes = 0;
  if (cJSON_GetArraySize(ks) != c->nkernels) {
    ms_result_fail(res, MS_BUILD_ERROR, "the OpenCL build process answered for %d of %d kernels",
                   cJSON_GetArraySize(ks), c->nkernels);
    return -1;
  }
  for (int i = 0; i < c->nkernels; i++) {
    const cg_kernel_t *k = &c->kernels[i];
    const cJSON *kr = cJSON_GetArrayItem(ks, i);
    int64_t local = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(kr, "local_bytes"));
    int64_t wg = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(kr, "max_work_group"));
    int64_t threads = k->block[0] * k->block[1] * k->block[2];
    res->build.shared_bytes = TN_MAX(res->build.shared_bytes, local);
    int64_t limit = tn_target_shared_limit(&c->target); /* the limit the verify postprocessor checked */
    if (limit > 0 && local > limit) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s uses %lld bytes of local memory; %s allows %lld", k->name,
                     (long long)local, c->target.name, (long long)limit);
      return -1;
    }
    if (wg > 0 && threads > wg) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s has %lld work-items per group; the device allows %lld",
                     k->name, (long long)threads, (long long)wg);
      return -1;
    }
  }
  return 0;
}

void ms_build_opencl(const ms_candidate_t *cand, const char *dir, ms_build_proc_t *proc, double timeout_s,
                     ms_result_t *res) {
  if (!TUNED_HAVE_OPENCL) {
    ms_result_fail(res, MS_BUILD_ERROR, "this build has no OpenCL support (install ocl-icd-opencl-dev and rebuild)");
    return;
  }
  if (ms_check_block_limits(cand, res) < 0) return;
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(req, "op", "opencl");
  cJSON_AddStringToObject(req, "source", cand->source);
  cJSON *names = cJSON_AddArrayToObject(req, "kernels");
  for (int i = 0; i < cand->nkernels; i++) cJSON_AddItemToArray(names, cJSON_CreateString(cand->kernels[i].name));
  tn_err_t err = {0};
  int rc = ms_build_proc_call(proc, req, "OpenCL", timeout_s, &reply, &err);
  cJSON_Delete(req);
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(reply, "code"),
              *version = cJSON_GetObjectItemCaseSensitive(reply, "version"),
              *error = cJSON_GetObjectItemCaseSensitive(reply, "error");
  if (cJSON_IsString(version))
    snprintf(res->build.compiler, sizeof res->build.compiler, "%s", version->valuestring);
  char path[MS_PATH_MAX];
  snprintf(path, sizeof path, "%s/cand.cl", dir);
  if (rc == TN_ERANGE)
    ms_result_fail(res, MS_TIMEOUT, "build timed out: %s", err.msg);
  else if (rc < 0)
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
  else if (!cJSON_IsNumber(code) || code->valueint < 0)
    ms_result_fail(res, MS_BUILD_ERROR, "%s",
                   cJSON_IsString(error) ? error->valuestring : "the OpenCL build process failed without saying why");
  else if (check_kernels(cand, reply, res) == 0 && ms_write_file(path, cand->source, strlen(cand->source), &err) < 0)
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
  else if (res->status == MS_OK)
    snprintf(res->artifact, sizeof res->artifact, "%s", path);
  cJSON_Delete(reply);
}

/* Asks a build process of its own (it exits afterwards). */
void ms_opencl_probe(ms_backend_status_t *st, bool *cpu) {
  bool is_cpu = false;
  st->compiled = TUNED_HAVE_OPENCL;
  st->available = false;
  ms_build_proc_t *p = NULL;
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(req, "op", "opencl_probe");
  tn_err_t err = {0};
  if (!TUNED_HAVE_OPENCL) {
    snprintf(st->detail, sizeof st->detail, "built without OpenCL (install ocl-icd-opencl-dev and rebuild)");
  } else if (ms_build_proc_new(NULL, NULL, &p, &err) < 0 ||
             ms_build_proc_call(p, req, "OpenCL", PROBE_TIMEOUT_S, &reply, &err) < 0) {
    snprintf(st->detail, sizeof st->detail, "the OpenCL probe failed: %.*s", (int)sizeof st->detail - 32, err.msg);
  } else {
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(reply, "detail");
    st->available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "available"));
    is_cpu = st->available && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "cpu"));
    snprintf(st->detail, sizeof st->detail, "%s", cJSON_IsString(detail) ? detail->valuestring : "?");
  }
  cJSON_Delete(req);
  cJSON_Delete(reply);
  ms_build_proc_free(p);
  if (cpu) *cpu = is_cpu;
}

static pthread_once_t type_once = PTHREAD_ONCE_INIT;
static bool device_is_cpu;

static void probe_type(void) {
  ms_backend_status_t st;
  ms_opencl_probe(&st, &device_is_cpu);
}

bool ms_opencl_device_is_cpu(void) {
  pthread_once(&type_once, probe_type);
  return device_is_cpu;
}
