/* build_cuda.c — CUDA builds with NVRTC: CUBIN and PTX for the target's
 * sm_XX, ptxas -v output parsed into registers, shared memory, spills and
 * stack, and kernels over the target's limits rejected at build time.  The
 * builder's compiles run in a build process (build_proc.c). */
#include <ctype.h>
#include <dlfcn.h>
#include <glob.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

#if TUNED_HAVE_CUDA
#include <nvrtc.h>
#endif

#define MAX_KERNELS 64

/* The number written just before `suffix` in line ("Used 32 registers"), or 0. */
static int64_t number_before(const char *line, const char *suffix) {
  const char *p = strstr(line, suffix);
  if (!p) return 0;
  while (p > line && p[-1] == ' ') p--;
  const char *e = p;
  while (p > line && isdigit((unsigned char)p[-1])) p--;
  return p < e ? strtoll(p, NULL, 10) : 0;
}

static ms_ptxas_kernel_t *find_kernel(ms_ptxas_kernel_t *ks, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(ks[i].name) == len && strncmp(ks[i].name, name, len) == 0) return &ks[i];
  return NULL;
}

int ms_ptxas_parse(const char *log, ms_ptxas_kernel_t *ks, int max) {
  int n = 0;
  ms_ptxas_kernel_t *cur = NULL;
  for (const char *line = log; line && *line;) {
    const char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)TN_MIN(len, sizeof buf - 1), line);
    const char *p;
    if ((p = strstr(buf, "Compiling entry function '"))) {
      p += strlen("Compiling entry function '");
      size_t nl = strcspn(p, "'");
      cur = find_kernel(ks, n, p, nl);
      if (!cur && n < max) {
        cur = &ks[n++];
        memset(cur, 0, sizeof *cur);
        snprintf(cur->name, sizeof cur->name, "%.*s", (int)nl, p);
      }
    } else if ((p = strstr(buf, "Function properties for "))) {
      p += strlen("Function properties for ");
      cur = find_kernel(ks, n, p, strcspn(p, " \r"));
    } else if (cur && strstr(buf, "bytes stack frame")) {
      cur->stack_bytes = number_before(buf, "bytes stack frame");
      cur->spill_store_bytes = number_before(buf, "bytes spill stores");
      cur->spill_load_bytes = number_before(buf, "bytes spill loads");
    } else if (cur && strstr(buf, "Used ")) {
      cur->registers = (int)number_before(buf, "registers");
      cur->shared_bytes = number_before(buf, "bytes smem");
    }
    line = eol ? eol + 1 : NULL;
  }
  return n;
}

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

/* Rejects kernels over the target's register and shared-memory limits. */
static int check_limits(const ms_candidate_t *c, const ms_ptxas_kernel_t *ks, int nks, ms_result_t *res) {
  const tn_target_t *t = &c->target;
  for (int i = 0; i < c->nkernels; i++) {
    const cg_kernel_t *k = &c->kernels[i];
    const ms_ptxas_kernel_t *p = find_kernel((ms_ptxas_kernel_t *)ks, nks, k->name, strlen(k->name));
    if (!p) continue;
    int64_t threads = k->block[0] * k->block[1] * k->block[2];
    if (t->max_registers_per_thread > 0 && p->registers > t->max_registers_per_thread) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s uses %d registers per thread; %s allows %d", k->name,
                     p->registers, t->name, t->max_registers_per_thread);
      return -1;
    }
    if (t->max_registers_per_block > 0 && p->registers * threads > t->max_registers_per_block) {
      ms_result_fail(res, MS_BUILD_ERROR,
                     "kernel %s uses %d registers per thread x %lld threads = %lld registers per block; %s "
                     "allows %lld", k->name, p->registers, (long long)threads, (long long)(p->registers * threads),
                     t->name, (long long)t->max_registers_per_block);
      return -1;
    }
    if (t->max_shared_memory_per_block > 0 && p->shared_bytes + k->dyn_shared_bytes > tn_target_shared_limit(t)) {
      ms_result_fail(res, MS_BUILD_ERROR, "kernel %s uses %lld bytes of shared memory; %s allows %lld", k->name,
                     (long long)(p->shared_bytes + k->dyn_shared_bytes), t->name,
                     (long long)tn_target_shared_limit(t));
      return -1;
    }
  }
  return 0;
}

static void record_facts(const ms_ptxas_kernel_t *ks, int n, ms_build_facts_t *f) {
  if (n == 0) return;
  f->registers = 0;
  f->shared_bytes = f->spill_bytes = f->stack_bytes = 0;
  for (int i = 0; i < n; i++) {
    f->registers = TN_MAX(f->registers, ks[i].registers);
    f->shared_bytes = TN_MAX(f->shared_bytes, ks[i].shared_bytes);
    f->stack_bytes = TN_MAX(f->stack_bytes, ks[i].stack_bytes);
    f->spill_bytes += ks[i].spill_store_bytes + ks[i].spill_load_bytes;
  }
}

/* Writes name in dir; false (with res failed) on error. */
static bool save(const char *dir, const char *name, const void *data, size_t n, ms_result_t *res, char *path) {
  char buf[MS_PATH_MAX];
  tn_err_t err = {0};
  snprintf(path ? path : buf, MS_PATH_MAX, "%s/%s", dir, name);
  if (ms_write_file(path ? path : buf, data, n, &err) == TN_OK) return true;
  ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
  return false;
}

/* ---- Hopper candidates: no spills, HGMMA in the SASS ---------------------------- */

const char *ms_cuda_arch(const tn_target_t *t, bool sm90a) { return sm90a ? "sm_90a" : t->arch; }

/* nvdisasm on PATH, else PyPI's nvidia-cuda-nvdisasm (scripts/install-deps
 * installs it with pip --user); false when neither is there. */
static bool find_nvdisasm(char *out, size_t n) {
  const char *path = getenv("PATH"), *home = getenv("HOME");
  for (const char *p = path; p && *p;) {
    size_t len = strcspn(p, ":");
    snprintf(out, n, "%.*s/nvdisasm", (int)len, p);
    if (len && access(out, X_OK) == 0) return true;
    p += len + (p[len] == ':');
  }
  char pat[MS_PATH_MAX];
  snprintf(pat, sizeof pat, "%s/.local/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm", home ? home : "");
  glob_t g;
  bool found = home && glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
  if (found) snprintf(out, n, "%s", g.gl_pathv[g.gl_pathc - 1]);
  if (home) globfree(&g);
  return found;
}

int ms_cuda_sass(const char *cubin, double timeout_s, tn_buf_t *sass, tn_err_t *err) {
  char tool[MS_PATH_MAX];
  if (!find_nvdisasm(tool, sizeof tool))
    return tn_err_set(err, TN_EUNSUPPORTED, "no nvdisasm on PATH nor from PyPI's nvidia-cuda-nvdisasm "
                      "(scripts/install-deps installs it: python3 -m pip install --user nvidia-cuda-nvdisasm)");
  char *argv[] = {tool, (char *)cubin, NULL};
  int status = 0;
  tn_buf_t log;
  tn_buf_init(&log);
  int rc = ms_run_command(argv, NULL, timeout_s, &log, (size_t)64 << 20, &status, err);
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    rc = tn_err_set(err, TN_EIO, "%s %s failed (%s %d): %.500s", tool, cubin,
                    WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                    tn_buf_str(&log));
  if (rc == 0) tn_buf_put(sass, tn_buf_str(&log));
  tn_buf_free(&log);
  return rc;
}

/* A kernel built for sm_90a that spills, or whose SASS (by nvdisasm, when
 * installed) has no HGMMA, would run on a slower path than the one it was
 * scheduled for: refused with the reason.  -1 when refused. */
static int check_hopper_build(const ms_candidate_t *cand, const ms_build_facts_t *f, const char *cubin,
                              double timeout_s, ms_result_t *res) {
  if (!cand->sm90a) return 0;
  if (f->spill_bytes > 0) {
    ms_result_fail(res, MS_BUILD_ERROR, "the Hopper kernel spills %lld bytes to local memory (ptxas); refused",
                   (long long)f->spill_bytes);
    return -1;
  }
  tn_buf_t sass;
  tn_buf_init(&sass);
  tn_err_t err = {0};
  bool ran = ms_cuda_sass(cubin, timeout_s, &sass, &err) == 0; /* no nvdisasm, or it failed: not checked */
  bool hgmma = ran && strstr(tn_buf_str(&sass), "HGMMA");
  tn_buf_free(&sass);
  if (ran && !hgmma) {
    ms_result_fail(res, MS_BUILD_ERROR, "the Hopper kernel's SASS has no HGMMA (nvdisasm %s): ptxas did not keep the "
                   "warpgroup MMA; refused", cubin);
    return -1;
  }
  return 0;
}

void ms_build_cuda(const ms_candidate_t *cand, const char *dir, ms_build_proc_t *proc, double timeout_s,
                   ms_result_t *res) {
  const char *arch = ms_cuda_arch(&cand->target, cand->sm90a);
  snprintf(res->build.arch, sizeof res->build.arch, "%s", arch);
  if (ms_check_block_limits(cand, res) < 0) return;
  ms_cuda_output_t o;
  tn_err_t err = {0};
  int rc = ms_nvrtc_compile(proc, cand->source, arch, timeout_s, &o, &err);
  snprintf(res->build.compiler, sizeof res->build.compiler, "%s", o.version[0] ? o.version : "NVRTC");
  if (o.log) save(dir, "build.log", o.log, strlen(o.log), res, NULL);
  ms_ptxas_kernel_t ks[MAX_KERNELS];
  int n = o.log ? ms_ptxas_parse(o.log, ks, MAX_KERNELS) : 0;
  record_facts(ks, n, &res->build);
  for (int i = 0; i < cand->nkernels; i++) /* ptxas counts static shared memory; the launch adds the dynamic */
    res->build.shared_bytes = TN_MAX(res->build.shared_bytes, cand->kernels[i].static_shared_bytes +
                                                                  cand->kernels[i].dyn_shared_bytes);
  char cubin[MS_PATH_MAX];
  if (rc == TN_ERANGE)
    ms_result_fail(res, MS_TIMEOUT, "build timed out: %s", err.msg);
  else if (rc < 0)
    ms_result_fail(res, MS_BUILD_ERROR, "%s", err.msg);
  else if (check_limits(cand, ks, n, res) == 0 && save(dir, "cand.cu", cand->source, strlen(cand->source), res, NULL) &&
           save(dir, "cand.ptx", o.ptx, strlen(o.ptx), res, NULL) &&
           save(dir, "cand.cubin", o.cubin, o.cubin_size, res, cubin) &&
           check_hopper_build(cand, &res->build, cubin, timeout_s, res) == 0)
    snprintf(res->artifact, sizeof res->artifact, "%s", cubin);
  ms_cuda_output_free(&o);
}
