/* targets.c — which targets this machine can stand in for: a CUDA target
 * needs an architecture NVRTC compiles, a driver, and that very GPU; OpenCL
 * needs a platform; the CPU always works.  Also what `--target auto` means. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/td.h"
#include "tuned_config.h"

/* GPU names as the driver reports them -> our target names. */
static const struct {
  const char *needle;
  const char *target;
} gpu_map[] = {
    {"H200", "nvidia/h200"},      {"H100", "nvidia/h100"},      {"A100", "nvidia/a100"},
    {"Tesla T4", "nvidia/tesla-t4"}, {" T4", "nvidia/tesla-t4"}, {"P100", "nvidia/tesla-p100"},
};

void td_machine_probe(td_machine_t *m, const char *config_dir) {
  memset(m, 0, sizeof *m);
  m->config_dir = config_dir;
  for (int b = 0; b < MS_BACKEND__COUNT; b++) ms_backend_probe((ms_backend_t)b, &m->backends[b]);
  const ms_backend_status_t *cu = &m->backends[MS_BACKEND_CUDA];
  if (!cu->available) return;
  /* detail: "NVIDIA H100 80GB HBM3 (1 device), NVRTC 13.0" */
  const char *paren = strstr(cu->detail, " (");
  size_t n = paren ? (size_t)(paren - cu->detail) : strlen(cu->detail);
  snprintf(m->gpu_name, sizeof m->gpu_name, "%.*s", (int)n, cu->detail);
  for (size_t i = 0; i < TN_ARRAY_LEN(gpu_map); i++)
    if (strstr(m->gpu_name, gpu_map[i].needle)) {
      snprintf(m->gpu_target, sizeof m->gpu_target, "%s", gpu_map[i].target);
      break;
    }
}

/* Whether NVRTC compiles for arch; the reason when not.  Results are cached
 * (one tiny compile per architecture). */
static bool nvrtc_arch_ok(const char *arch, char *why, size_t size) {
  static struct {
    char arch[16];
    bool ok;
    char why[TN_ERR_MSG_MAX];
  } cache[16];
  static int ncache;
  for (int i = 0; i < ncache; i++)
    if (strcmp(cache[i].arch, arch) == 0) {
      snprintf(why, size, "%s", cache[i].why);
      return cache[i].ok;
    }
  ms_cuda_output_t out = {0};
  tn_err_t err = {0};
  ms_build_proc_t *p = NULL; /* NVRTC (LLVM) never runs in the daemon */
  int rc = ms_build_proc_new(NULL, NULL, &p, &err);
  if (rc == 0) rc = ms_nvrtc_compile(p, "extern \"C\" __global__ void tuned_probe() {}\n", arch, 60, &out, &err);
  ms_build_proc_free(p);
  ms_cuda_output_free(&out);
  bool ok = rc == 0;
  snprintf(why, size, "%s", ok ? "" : err.msg);
  if (ncache < (int)TN_ARRAY_LEN(cache)) {
    snprintf(cache[ncache].arch, sizeof cache[ncache].arch, "%s", arch);
    cache[ncache].ok = ok;
    snprintf(cache[ncache].why, sizeof cache[ncache].why, "%s", why);
    ncache++;
  }
  return ok;
}

static const char ALTERNATIVES[] = "use --target cpu or opencl/pocl-cpu, or --target auto";

static void check_cuda(const td_machine_t *m, td_target_info_t *ti) {
  const ms_backend_status_t *cu = &m->backends[MS_BACKEND_CUDA];
  const tn_target_t *t = &ti->t;
  char why[TN_ERR_MSG_MAX];
  if (!cu->compiled) {
    snprintf(ti->reason, sizeof ti->reason, "%s needs CUDA, and this tuned was %s; %s", t->name,
             cu->detail[0] ? cu->detail : "built without CUDA", ALTERNATIVES);
  } else if (!nvrtc_arch_ok(t->arch, why, sizeof why)) {
    snprintf(ti->reason, sizeof ti->reason,
             "%s is %s: %s; tune for a GPU of compute capability 7.5 or newer "
             "(nvidia/tesla-t4, nvidia/a100, nvidia/h100, nvidia/h200), or %s",
             t->name, t->arch, why, ALTERNATIVES + 4);
  } else if (!cu->available) {
    snprintf(ti->reason, sizeof ti->reason, "no CUDA device here: %s; %s", cu->detail, ALTERNATIVES);
  } else if (strcmp(m->gpu_target, t->name) != 0 && strcasecmp(m->gpu_name, t->device) != 0) {
    if (m->gpu_target[0])
      snprintf(ti->reason, sizeof ti->reason,
               "the GPU here is %s (target %s), not %s: timings would be for the wrong device; "
               "use --target %s or --target auto", m->gpu_name, m->gpu_target, t->device, m->gpu_target);
    else
      snprintf(ti->reason, sizeof ti->reason,
               "the GPU here is %s, not %s; write a target file nvidia/NAME.json in %s whose "
               "\"device\" is \"%s\" (see configs/README.md), or %s",
               m->gpu_name, t->device, m->config_dir, m->gpu_name, ALTERNATIVES + 4);
  } else {
    ti->usable = true;
  }
}

int td_target_lookup(const td_machine_t *m, const char *name, tn_target_t *t, tn_err_t *err) {
  int rc = tn_target_lookup(name, m->config_dir, t, err);
  if (!rc && m->cc && tn_target_uses_cc(t->kind)) rc = tn_target_set_cc(t, m->cc, err);
  return rc;
}

/* A host-compiled target is usable where its compiler is installed. */
static void check_cc(td_target_info_t *ti) {
  tn_err_t why = {0};
  ti->usable = ms_compiler_check(&ti->t, &why) == 0;
  if (!ti->usable) snprintf(ti->reason, sizeof ti->reason, "%s", why.msg);
}

int td_target_check(const td_machine_t *m, const char *name, td_target_info_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  int rc = td_target_lookup(m, name, &out->t, err);
  if (rc) return rc;
  switch (out->t.kind) {
  case TN_TARGET_CPU:
    check_cc(out);
    break;
  case TN_TARGET_OPENCL:
    out->usable = m->backends[MS_BACKEND_OPENCL].available;
    if (!out->usable)
      snprintf(out->reason, sizeof out->reason, "no OpenCL platform here (%s); use --target cpu instead",
               m->backends[MS_BACKEND_OPENCL].detail);
    break;
  case TN_TARGET_CUDA:
    check_cuda(m, out);
    break;
  case TN_TARGET_CUDA_HOST:
    check_cc(out);
    break;
  }
  return 0;
}

void td_target_auto(const td_machine_t *m, char *name, size_t size, char *why, size_t whysize) {
  const ms_backend_status_t *cu = &m->backends[MS_BACKEND_CUDA];
  td_target_info_t ti;
  tn_err_t err;
  if (cu->available && m->gpu_target[0] && td_target_check(m, m->gpu_target, &ti, &err) == 0 &&
      ti.usable) {
    snprintf(name, size, "%s", m->gpu_target);
    snprintf(why, whysize, "CUDA device %s", m->gpu_name);
    return;
  }
  snprintf(name, size, "cpu");
  if (!cu->available) snprintf(why, whysize, "no usable CUDA device (%s)", cu->detail);
  else if (!m->gpu_target[0]) snprintf(why, whysize, "no target file for the GPU %s", m->gpu_name);
  else snprintf(why, whysize, "%s", ti.reason);
}

int td_target_list(const td_machine_t *m, td_target_info_t **out, int *n) {
  char **names;
  int count;
  tn_err_t err = {0};
  *n = 0;
  *out = NULL;
  if (tn_target_names(m->config_dir, &names, &count, &err) < 0) {
    td_log(TD_WARN, "no targets", "err=%s", td_q(err.msg));
    return -1;
  }
  *out = tn_xmalloc(sizeof **out * (size_t)TN_MAX(count, 1));
  for (int i = 0; i < count; i++) {
    if (td_target_check(m, names[i], &(*out)[*n], &err) == 0) (*n)++;
    else td_log(TD_WARN, "target file skipped", "target=%s err=%s", names[i], td_q(err.msg));
  }
  tn_target_names_free(names, count);
  return 0;
}
