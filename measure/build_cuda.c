/* build_cuda.c — CUDA builds with NVRTC: CUBIN and PTX for the target's
 * sm_XX, ptxas -v output parsed into registers, shared memory, spills and
 * stack, and kernels over the target's limits rejected at build time.  The
 * builder's compiles run in a build process (build_client.c), which calls
 * NVRTC itself (nvrtc.c). */
#include <ctype.h>
#include <glob.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

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
