/* nvrtc.c — NVRTC in this process: one CUDA source to PTX and CUBIN for an
 * sm_XX, with ptxas -v's log.  The build process (build_server.c) calls it;
 * the builder never does (an NVRTC compile cannot be interrupted). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

#if TUNED_HAVE_CUDA
#include <nvrtc.h>
#endif

void ms_cuda_output_free(ms_cuda_output_t *o) {
  free(o->ptx);
  free(o->cubin);
  free(o->log);
  memset(o, 0, sizeof *o);
}

#if TUNED_HAVE_CUDA
/* Checks "sm_XX" against what this NVRTC can compile. */
static int check_arch(const char *arch, const char *version, tn_err_t *err) {
  int num = 0, nsup = 0;
  char tail[8] = "";
  if (sscanf(arch, "sm_%d%7s", &num, tail) < 1 || (tail[0] && strcmp(tail, "a") && strcmp(tail, "f")))
    return tn_err_set(err, TN_EINVAL, "CUDA architecture \"%s\" is not of the form sm_XX (e.g. sm_75, sm_90)",
                      arch);
  int sup[64];
  if (nvrtcGetNumSupportedArchs(&nsup) != NVRTC_SUCCESS || nsup > 64 || nvrtcGetSupportedArchs(sup) != NVRTC_SUCCESS)
    return TN_OK; /* cannot tell: let the compiler decide */
  tn_buf_t list;
  tn_buf_init(&list);
  bool found = false;
  for (int i = 0; i < nsup; i++) {
    found |= sup[i] == num;
    tn_buf_printf(&list, "%ssm_%d", i ? " " : "", sup[i]);
  }
  int rc = found ? TN_OK
                 : tn_err_set(err, TN_EUNSUPPORTED, "%s is not supported by %s (supported: %s)", arch, version,
                              tn_buf_str(&list));
  tn_buf_free(&list);
  return rc;
}

/* The toolkit's include directory (for <cuda_fp16.h>), found once: beside
 * the libnvrtc this process loaded (<root>/lib64 or
 * <root>/targets/<arch>/lib, whose ../include has the headers), else under
 * $CUDA_HOME or /usr/local/cuda.  "" when none has cuda_fp16.h. */
static char include_opt[2 * MS_PATH_MAX];
static pthread_once_t include_once = PTHREAD_ONCE_INIT;

static bool has_fp16_header(const char *dir) {
  char path[2 * MS_PATH_MAX];
  snprintf(path, sizeof path, "%.*s/cuda_fp16.h", MS_PATH_MAX, dir);
  return access(path, R_OK) == 0;
}

static void find_include_dir(void) {
  char dirs[3][MS_PATH_MAX];
  int n = 0;
  Dl_info info;
  if (dladdr((void *)nvrtcVersion, &info) && info.dli_fname) {
    char lib[MS_PATH_MAX];
    snprintf(lib, sizeof lib, "%s", info.dli_fname);
    char *slash = strrchr(lib, '/');
    if (slash) {
      *slash = '\0';
      snprintf(dirs[n++], MS_PATH_MAX, "%.*s/../include", MS_PATH_MAX - 16, lib);
    }
  }
  const char *home = getenv("CUDA_HOME");
  if (home && *home) snprintf(dirs[n++], MS_PATH_MAX, "%.*s/include", MS_PATH_MAX - 16, home);
  snprintf(dirs[n++], MS_PATH_MAX, "/usr/local/cuda/include");
  for (int i = 0; i < n; i++)
    if (has_fp16_header(dirs[i])) {
      snprintf(include_opt, sizeof include_opt, "--include-path=%.*s", MS_PATH_MAX, dirs[i]);
      return;
    }
}

/* Compiles once; the program log goes to *log (malloc'ed). */
static nvrtcResult compile(const char *source, const char **opts, int nopts, nvrtcProgram *prog, char **log) {
  *log = NULL;
  nvrtcResult nr = nvrtcCreateProgram(prog, source, "cand.cu", 0, NULL, NULL);
  if (nr != NVRTC_SUCCESS) return nr;
  nr = nvrtcCompileProgram(*prog, nopts, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(*prog, &n);
  *log = tn_xcalloc(1, n + 1);
  if (n) nvrtcGetProgramLog(*prog, *log);
  return nr;
}

int ms_cuda_compile(const char *source, const char *arch, ms_cuda_output_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  snprintf(out->version, sizeof out->version, "NVRTC %d.%d", major, minor);
  int rc = check_arch(arch, out->version, err);
  if (rc < 0) return rc;
  char archopt[40];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  pthread_once(&include_once, find_include_dir);
  const char *opts[] = {archopt, "--ptxas-options=-v", include_opt};
  int nopts = include_opt[0] ? 3 : 2;
  nvrtcProgram prog = NULL;
  double t0 = tn_now();
  nvrtcResult nr = compile(source, opts, nopts, &prog, &out->log);
  if (nr != NVRTC_SUCCESS && out->log && !strstr(out->log, "error")) {
    /* NVRTC 13 drops ptxas' error line ("uses too much shared data") from
     * the log when ptxas runs with -v: compile again without it for the
     * reason, and keep the -v facts after it. */
    nvrtcProgram again = NULL;
    char *why = NULL;
    const char *plain[] = {archopt, include_opt};
    compile(source, plain, include_opt[0] ? 2 : 1, &again, &why);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_printf(&b, "%s%s", why ? why : "", out->log);
    free(out->log);
    free(why);
    out->log = tn_buf_take(&b);
    nvrtcDestroyProgram(&again);
  }
  if (nr != NVRTC_SUCCESS) {
    rc = tn_err_set(err, nr == NVRTC_ERROR_COMPILATION ? TN_EINVAL : TN_EIO, "NVRTC (%s, %s): %s:\n%s", out->version,
                    arch, nvrtcGetErrorString(nr), out->log ? out->log : "");
  } else {
    size_t n = 0;
    if (nvrtcGetPTXSize(prog, &n) != NVRTC_SUCCESS || !(out->ptx = tn_xcalloc(1, n + 1)) ||
        nvrtcGetPTX(prog, out->ptx) != NVRTC_SUCCESS) {
      rc = tn_err_set(err, TN_EINVAL, "NVRTC: no PTX for %s", arch);
    } else if (nvrtcGetCUBINSize(prog, &out->cubin_size) != NVRTC_SUCCESS || out->cubin_size == 0) {
      rc = tn_err_set(err, TN_EINVAL, "NVRTC produced no CUBIN for %s (only real sm_XX architectures give one)", arch);
    } else {
      out->cubin = tn_xmalloc(out->cubin_size);
      nvrtcGetCUBIN(prog, out->cubin);
    }
  }
  nvrtcDestroyProgram(&prog);
  out->nvrtc_secs = tn_now() - t0;
  return rc;
}
#else
int ms_cuda_compile(const char *source, const char *arch, ms_cuda_output_t *out, tn_err_t *err) {
  (void)source, (void)arch;
  memset(out, 0, sizeof *out);
  return tn_err_set(err, TN_EUNSUPPORTED, "this build has no CUDA support (NVRTC was not found at setup; see "
                    "-Dctk_root)");
}
#endif
