/* cupti.c — CUPTI, loaded with dlopen as the driver is: kernel durations
 * from the activity API (the worker records every timed launch's kernels
 * beside its CUDA-event time), the profiler's host side (metric
 * configurations and their evaluation, which needs no GPU) and the range
 * profiler that `tunectl profile` runs in the worker.  libcupti is never
 * linked: a machine without it still measures, with event times alone. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_internal.h"
#include "tuned_config.h"

const char *const ms_profile_metrics[MS_PROFILE_NMETRICS] = {
    "gpu__time_duration.sum",
    "dram__bytes.sum.per_second",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
};

bool ms_times_disagree(double event_secs, double cupti_secs) {
  if (!(event_secs > 0) || !(cupti_secs > 0)) return false;
  return fabs(cupti_secs - event_secs) > MS_TIMES_DISAGREE * event_secs;
}

void ms_result_set_cupti(ms_result_t *r, const double *secs, int n) {
  r->cupti_median_secs = n > 0 ? ms_median(secs, n) : 0;
  r->times_disagree = ms_times_disagree(r->median_secs, r->cupti_median_secs);
}

void ms_cupti_text(const ms_result_t *r, char *buf, size_t size) {
  if (r->cupti_median_secs > 0 && r->median_secs > 0) {
    double d = (r->cupti_median_secs - r->median_secs) / r->median_secs * 100;
    snprintf(buf, size, "%.6f ms kernel time (CUPTI), %.1f %% %s the CUDA events%s", r->cupti_median_secs * 1e3,
             fabs(d), d < 0 ? "below" : "above",
             r->times_disagree ? ": DISAGREE by over 10 % (launch gaps, or the events are off)" : "");
  } else if (r->cupti_error[0]) {
    snprintf(buf, size, "no kernel times: %s (the CUDA events alone)", r->cupti_error);
  } else {
    buf[0] = '\0';
  }
}

static int cmp_span(const void *a, const void *b) {
  const ms_span_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

int ms_cupti_launch_secs(ms_span_t *spans, int nspans, int per_launch, int want, double *out, char *why,
                         size_t whysize) {
  if (per_launch < 1 || want < 0) return snprintf(why, whysize, "bad grouping of kernel records"), -1;
  /* every launch runs all its kernels: a count that is no multiple lost some */
  if (nspans < want * per_launch || nspans % per_launch != 0)
    return snprintf(why, whysize,
                    "CUPTI recorded %d kernels, not whole launches of %d kernel%s covering the %d timed ones "
                    "(records lost)", nspans, per_launch, per_launch > 1 ? "s" : "", want),
           -1;
  qsort(spans, (size_t)nspans, sizeof *spans, cmp_span);
  /* The timed repeats are the last launches: earlier records belong to the
   * checked run and the warm-up. */
  const ms_span_t *s = spans + nspans - want * per_launch;
  for (int i = 0; i < want; i++) {
    uint64_t ns = 0;
    for (int k = 0; k < per_launch; k++) {
      const ms_span_t *x = &s[i * per_launch + k];
      if (x->end < x->start) return snprintf(why, whysize, "CUPTI gave a kernel record that ends before it starts"), -1;
      ns += x->end - x->start;
    }
    out[i] = (double)ns * 1e-9;
  }
  return want;
}

#if TUNED_HAVE_CUDA
#include <cupti_activity.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <nvrtc.h>

/* The entry points used, resolved with dlsym. */
#define CUPTI_FUNCS(X)                                                                                          \
  X(error_message, cuptiGetErrorMessage)                                                                        \
  X(act_register, cuptiActivityRegisterCallbacks)                                                               \
  X(act_enable, cuptiActivityEnable)                                                                            \
  X(act_disable, cuptiActivityDisable)                                                                          \
  X(act_flush, cuptiActivityFlushAll)                                                                           \
  X(act_next, cuptiActivityGetNextRecord)                                                                       \
  X(host_init, cuptiProfilerHostInitialize)                                                                     \
  X(host_deinit, cuptiProfilerHostDeinitialize)                                                                 \
  X(host_chips, cuptiProfilerHostGetSupportedChips)                                                             \
  X(host_add, cuptiProfilerHostConfigAddMetrics)                                                                \
  X(host_image_size, cuptiProfilerHostGetConfigImageSize)                                                       \
  X(host_image, cuptiProfilerHostGetConfigImage)                                                                \
  X(host_passes, cuptiProfilerHostGetNumOfPasses)                                                               \
  X(host_eval, cuptiProfilerHostEvaluateToGpuValues)                                                            \
  X(prof_init, cuptiProfilerInitialize)                                                                         \
  X(prof_deinit, cuptiProfilerDeInitialize)                                                                     \
  X(chip_name, cuptiDeviceGetChipName)                                                                          \
  X(availability, cuptiProfilerGetCounterAvailability)                                                          \
  X(rp_enable, cuptiRangeProfilerEnable)                                                                        \
  X(rp_disable, cuptiRangeProfilerDisable)                                                                      \
  X(rp_set_config, cuptiRangeProfilerSetConfig)                                                                 \
  X(rp_start, cuptiRangeProfilerStart)                                                                          \
  X(rp_stop, cuptiRangeProfilerStop)                                                                            \
  X(rp_decode, cuptiRangeProfilerDecodeData)                                                                    \
  X(rp_data_size, cuptiRangeProfilerGetCounterDataSize)                                                         \
  X(rp_data_init, cuptiRangeProfilerCounterDataImageInitialize)                                                 \
  X(rp_data_info, cuptiRangeProfilerGetCounterDataInfo)

static struct {
#define FIELD(f, name) __typeof__(name) *f;
  CUPTI_FUNCS(FIELD)
#undef FIELD
  void *lib;
  char path[MS_PATH_MAX];
  char error[1024]; /* why it did not load */
} cp;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* Candidates for libcupti: $TUNED_CUPTI alone when set ("off": none); else beside the
 * libnvrtc this process uses, in that toolkit's extras/CUPTI/lib64, under
 * $CUDA_HOME and the configured toolkit root, then the loader's path. */
static int cupti_candidates(char paths[][MS_PATH_MAX], int max) {
  const char *env = getenv("TUNED_CUPTI");
  if (env && *env) {
    snprintf(paths[0], MS_PATH_MAX, "%s", env);
    return 1;
  }
  int major = 0, minor = 0, n = 0;
  nvrtcVersion(&major, &minor);
  char roots[3][MS_PATH_MAX];
  int nroots = 0;
  Dl_info info;
  if (dladdr((void *)nvrtcVersion, &info) && info.dli_fname) {
    snprintf(roots[nroots], MS_PATH_MAX, "%s", info.dli_fname);
    char *slash = strrchr(roots[nroots], '/');
    if (slash) {
      *slash = '\0';
      snprintf(paths[n++], MS_PATH_MAX, "%.*s/libcupti.so.%d", MS_PATH_MAX - 32, roots[nroots], major);
      if ((slash = strrchr(roots[nroots], '/'))) *slash = '\0', nroots++; /* the toolkit root */
    }
  }
  const char *home = getenv("CUDA_HOME");
  if (home && *home) snprintf(roots[nroots++], MS_PATH_MAX, "%.*s", MS_PATH_MAX - 64, home);
  snprintf(roots[nroots++], MS_PATH_MAX, "%s", TUNED_CTK_ROOT);
  static const char *const subdirs[] = {"extras/CUPTI/lib64", "lib64", "lib"};
  for (int r = 0; r < nroots; r++)
    for (int s = 0; s < 3 && n < max - 1; s++)
      snprintf(paths[n++], MS_PATH_MAX, "%.*s/%s/libcupti.so.%d", MS_PATH_MAX - 64, roots[r], subdirs[s], major);
  snprintf(paths[n++], MS_PATH_MAX, "libcupti.so.%d", major);
  return n;
}

static void load_cupti(void) {
  const char *env = getenv("TUNED_CUPTI");
  if (env && strcmp(env, "off") == 0) {
    snprintf(cp.error, sizeof cp.error, "CUPTI is off (TUNED_CUPTI=off)");
    return;
  }
  char paths[12][MS_PATH_MAX];
  int n = cupti_candidates(paths, 12);
  for (int i = 0; i < n && !cp.lib; i++)
    if ((cp.lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL))) snprintf(cp.path, sizeof cp.path, "%.*s", MS_PATH_MAX - 1, paths[i]);
  if (!cp.lib) {
    snprintf(cp.error, sizeof cp.error, "CUPTI not found: %.600s (set TUNED_CUPTI to libcupti.so's path)",
             n == 1 ? dlerror() : "no libcupti in the CUDA toolkit's lib, lib64 or extras/CUPTI/lib64");
    return;
  }
  void *p;
#define LOAD(f, name)                                                                                    \
  if (!(p = dlsym(cp.lib, #name))) {                                                                     \
    snprintf(cp.error, sizeof cp.error, "CUPTI %.512s lacks %s (CUDA 13 or newer needed)", cp.path, #name); \
    dlclose(cp.lib);                                                                                     \
    cp.lib = NULL;                                                                                       \
    return;                                                                                              \
  }                                                                                                      \
  memcpy(&cp.f, &p, sizeof p);
  CUPTI_FUNCS(LOAD)
#undef LOAD
}

/* Loads CUPTI once per process; -1 with the reason in why. */
static int cupti_load(char *why, size_t size) {
  pthread_once(&load_once, load_cupti);
  if (cp.lib) return 0;
  snprintf(why, size, "%s", cp.error);
  return -1;
}

static const char *cupti_msg(CUptiResult rc) {
  const char *s = NULL;
  if (cp.error_message) cp.error_message(rc, &s);
  return s ? s : "unknown CUPTI error";
}

/* Fails with what and CUPTI's message for rc. */
#define CP_TRY(call, what)                                                                               \
  do {                                                                                                   \
    CUptiResult rc_ = (call);                                                                            \
    if (rc_ != CUPTI_SUCCESS)                                                                            \
      return snprintf(why, whysize, "%s failed: %s (CUPTI error %d)", what, cupti_msg(rc_), (int)rc_), -1; \
  } while (0)

/* ---- the profiler's host side --------------------------------------------- */

/* A host object for chip with the metrics added, one at a time so that an
 * unknown one is named. */
static int host_new(const char *chip, const uint8_t *availability, const char *const *metrics, int n,
                    CUpti_Profiler_Host_Object **out, char *why, size_t whysize) {
  *out = NULL;
  if (cupti_load(why, whysize) < 0) return -1;
  CUpti_Profiler_Host_Initialize_Params ip = {.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
                                              .profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER,
                                              .pChipName = chip,
                                              .pCounterAvailabilityImage = availability};
  CUptiResult rc = cp.host_init(&ip);
  if (rc != CUPTI_SUCCESS) {
    CUpti_Profiler_Host_GetSupportedChips_Params sc = {.structSize =
                                                           CUpti_Profiler_Host_GetSupportedChips_Params_STRUCT_SIZE};
    int k = snprintf(why, whysize, "CUPTI cannot profile chip \"%s\": %s", chip, cupti_msg(rc));
    if (cp.host_chips(&sc) == CUPTI_SUCCESS && sc.numChips > 0) {
      k += snprintf(why + k, whysize - (size_t)TN_MIN(k, (int)whysize), " (chips it knows:");
      for (size_t i = 0; i < sc.numChips && k < (int)whysize; i++)
        k += snprintf(why + k, whysize - (size_t)k, " %s", sc.ppChipNames[i]);
      if (k < (int)whysize) snprintf(why + k, whysize - (size_t)k, ")");
    }
    return -1;
  }
  for (int i = 0; i < n; i++) {
    CUpti_Profiler_Host_ConfigAddMetrics_Params ap = {.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
                                                      .pHostObject = ip.pHostObject,
                                                      .ppMetricNames = (const char **)&metrics[i],
                                                      .numMetrics = 1};
    if ((rc = cp.host_add(&ap)) != CUPTI_SUCCESS) {
      snprintf(why, whysize, "unknown metric \"%s\" for chip %s (CUPTI: %s); metric names are Nsight Compute's, "
               "e.g. %s", metrics[i], chip, cupti_msg(rc), ms_profile_metrics[2]);
      CUpti_Profiler_Host_Deinitialize_Params dp = {.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
                                                    .pHostObject = ip.pHostObject};
      cp.host_deinit(&dp);
      return -1;
    }
  }
  *out = ip.pHostObject;
  return 0;
}

static void host_free(CUpti_Profiler_Host_Object *h) {
  if (!h) return;
  CUpti_Profiler_Host_Deinitialize_Params dp = {.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
                                                .pHostObject = h};
  cp.host_deinit(&dp);
}

/* The config image of host object h into c. */
static int host_image(CUpti_Profiler_Host_Object *h, ms_cupti_config_t *c, char *why, size_t whysize) {
  CUpti_Profiler_Host_GetConfigImageSize_Params sp = {
      .structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE, .pHostObject = h};
  CP_TRY(cp.host_image_size(&sp), "cuptiProfilerHostGetConfigImageSize");
  c->size = sp.configImageSize;
  c->image = tn_xmalloc(TN_MAX(c->size, 1));
  CUpti_Profiler_Host_GetConfigImage_Params gp = {.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
                                                  .pHostObject = h,
                                                  .configImageSize = c->size,
                                                  .pConfigImage = c->image};
  CP_TRY(cp.host_image(&gp), "cuptiProfilerHostGetConfigImage");
  CUpti_Profiler_Host_GetNumOfPasses_Params pp = {.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
                                                  .configImageSize = c->size,
                                                  .pConfigImage = c->image};
  CP_TRY(cp.host_passes(&pp), "cuptiProfilerHostGetNumOfPasses");
  c->passes = (int)pp.numOfPasses;
  return 0;
}

int ms_cupti_config(const char *chip, const char *const *metrics, int n, ms_cupti_config_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  char why[1024];
  CUpti_Profiler_Host_Object *h = NULL;
  if (!chip || !*chip) return tn_err_set(err, TN_EINVAL, "profile: no chip name (e.g. GH100, AD102, GA100)");
  if (n < 1) return tn_err_set(err, TN_EINVAL, "profile: no metrics");
  int rc = host_new(chip, NULL, metrics, n, &h, why, sizeof why);
  if (rc == 0) rc = host_image(h, out, why, sizeof why);
  host_free(h);
  if (rc < 0) {
    ms_cupti_config_free(out);
    return tn_err_set(err, cp.lib ? TN_EINVAL : TN_EUNSUPPORTED, "%s", why);
  }
  return TN_OK;
}

/* ---- kernel durations (the activity API, in the worker) ------------------- */

#define ACT_BUFFER_BYTES ((size_t)4 << 20)

/* Kernel records so far; CUPTI may hand buffers over from its own thread. */
static struct {
  pthread_mutex_t lock;
  ms_span_t *spans;
  int n, cap;
  bool on;
} act = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *buf = aligned_alloc(8, ACT_BUFFER_BYTES);
  *size = *buf ? ACT_BUFFER_BYTES : 0;
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  pthread_mutex_lock(&act.lock);
  while (cp.act_next(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    if (act.n == act.cap) act.spans = tn_xrealloc(act.spans, sizeof *act.spans * (size_t)(act.cap = act.cap * 2 + 256));
    act.spans[act.n++] = (ms_span_t){k->start, k->end};
  }
  pthread_mutex_unlock(&act.lock);
  free(buf);
}

int ms_cupti_trace_start(char *why, size_t whysize) {
  if (act.on) return 0;
  if (cupti_load(why, whysize) < 0) return -1;
  static bool registered; /* once per process; the profiler stops and restarts tracing */
  if (!registered) CP_TRY(cp.act_register(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  registered = true;
  CP_TRY(cp.act_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable (CONCURRENT_KERNEL)");
  act.on = true;
  return 0;
}

void ms_cupti_trace_stop(void) {
  if (!act.on) return;
  cp.act_disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cp.act_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&act.lock);
  act.n = 0;
  pthread_mutex_unlock(&act.lock);
  act.on = false;
}

void ms_cupti_trace_reset(void) {
  if (!act.on) return;
  cp.act_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&act.lock);
  act.n = 0;
  pthread_mutex_unlock(&act.lock);
}

int ms_cupti_trace_take(int per_launch, int want, double *out, char *why, size_t whysize) {
  if (!act.on) return snprintf(why, whysize, "CUPTI kernel tracing is off"), -1;
  /* The launches were synchronised: a forced flush hands over every record. */
  CP_TRY(cp.act_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  pthread_mutex_lock(&act.lock);
  int n = ms_cupti_launch_secs(act.spans, act.n, per_launch, want, out, why, whysize);
  act.n = 0;
  pthread_mutex_unlock(&act.lock);
  return n;
}

/* ---- the range profiler (in the worker) ----------------------------------- */

typedef struct profile_state {
  CUpti_Profiler_Host_Object *host;
  CUpti_RangeProfiler_Object *rp;
  ms_cupti_config_t config;
  uint8_t *data, *availability;
  size_t data_size;
  bool prof_inited;
} profile_state_t;

static void profile_end(profile_state_t *s) {
  if (s->rp) {
    CUpti_RangeProfiler_Disable_Params dp = {.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
                                             .pRangeProfilerObject = s->rp};
    cp.rp_disable(&dp);
  }
  host_free(s->host);
  ms_cupti_config_free(&s->config);
  free(s->data);
  free(s->availability);
  if (s->prof_inited) {
    CUpti_Profiler_DeInitialize_Params dp = {.structSize = CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
    cp.prof_deinit(&dp);
  }
}

/* Enables the range profiler on ctx with a counter data image for up to
 * max_ranges kernels, one range per kernel (auto ranges, kernel replay). */
static int profile_begin(profile_state_t *s, void *ctx, const char *const *metrics, int n, int max_ranges, char *chip,
                         size_t chipsize, char *why, size_t whysize) {
  CUpti_Profiler_Initialize_Params ip = {.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  CP_TRY(cp.prof_init(&ip), "cuptiProfilerInitialize");
  s->prof_inited = true;
  CUpti_Device_GetChipName_Params cn = {.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE, .deviceIndex = 0};
  CP_TRY(cp.chip_name(&cn), "cuptiDeviceGetChipName");
  snprintf(chip, chipsize, "%s", cn.pChipName ? cn.pChipName : "?");
  /* which counters this device can collect now, so the config uses only those */
  CUpti_Profiler_GetCounterAvailability_Params ca = {
      .structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE, .ctx = (CUcontext)ctx};
  CP_TRY(cp.availability(&ca), "cuptiProfilerGetCounterAvailability (size)");
  s->availability = tn_xcalloc(1, TN_MAX(ca.counterAvailabilityImageSize, 1));
  ca.pCounterAvailabilityImage = s->availability;
  CP_TRY(cp.availability(&ca), "cuptiProfilerGetCounterAvailability");
  if (host_new(chip, s->availability, metrics, n, &s->host, why, whysize) < 0 ||
      host_image(s->host, &s->config, why, whysize) < 0)
    return -1;
  CUpti_RangeProfiler_Enable_Params ep = {.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE,
                                          .ctx = (CUcontext)ctx};
  CP_TRY(cp.rp_enable(&ep), "cuptiRangeProfilerEnable");
  s->rp = ep.pRangeProfilerObject;
  CUpti_RangeProfiler_GetCounterDataSize_Params ds = {
      .structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
      .pRangeProfilerObject = s->rp,
      .pMetricNames = (const char **)metrics,
      .numMetrics = (size_t)n,
      .maxNumOfRanges = (size_t)max_ranges,
      .maxNumRangeTreeNodes = (uint32_t)max_ranges};
  CP_TRY(cp.rp_data_size(&ds), "cuptiRangeProfilerGetCounterDataSize");
  s->data_size = ds.counterDataSize;
  s->data = tn_xcalloc(1, TN_MAX(s->data_size, 1));
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params di = {
      .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
      .pRangeProfilerObject = s->rp,
      .counterDataSize = s->data_size,
      .pCounterData = s->data};
  CP_TRY(cp.rp_data_init(&di), "cuptiRangeProfilerCounterDataImageInitialize");
  CUpti_RangeProfiler_SetConfig_Params sc = {.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE,
                                             .pRangeProfilerObject = s->rp,
                                             .configSize = s->config.size,
                                             .pConfig = s->config.image,
                                             .counterDataImageSize = s->data_size,
                                             .pCounterDataImage = s->data,
                                             .range = CUPTI_AutoRange,
                                             .replayMode = CUPTI_KernelReplay,
                                             .maxRangesPerPass = (size_t)max_ranges,
                                             .numNestingLevels = 1,
                                             .minNestingLevel = 1,
                                             .passIndex = 0,
                                             .targetNestingLevel = 1};
  CP_TRY(cp.rp_set_config(&sc), "cuptiRangeProfilerSetConfig");
  return 0;
}

/* Runs launch once between start and stop, decodes the counters and
 * evaluates every metric of every range. */
static int profile_collect(profile_state_t *s, const char *const *metrics, int n, int (*launch)(void *arg),
                           void *arg, int max_ranges, double *values, int *nranges, char *why, size_t whysize) {
  /* Kernel replay collects every pass within one launch; were it to need
   * more (a replay mode that cannot), the launch is repeated per pass. */
  CUpti_RangeProfiler_Stop_Params sp = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE,
                                        .pRangeProfilerObject = s->rp};
  for (int pass = 0; pass <= s->config.passes && !sp.isAllPassSubmitted; pass++) {
    CUpti_RangeProfiler_Start_Params st = {.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE,
                                           .pRangeProfilerObject = s->rp};
    CP_TRY(cp.rp_start(&st), "cuptiRangeProfilerStart");
    int lrc = launch(arg);
    CP_TRY(cp.rp_stop(&sp), "cuptiRangeProfilerStop");
    if (lrc < 0) return snprintf(why, whysize, "the kernels failed to run under the profiler"), -1;
  }
  if (!sp.isAllPassSubmitted)
    return snprintf(why, whysize, "the range profiler still wants passes after %d launches", s->config.passes + 1), -1;
  CUpti_RangeProfiler_DecodeData_Params dd = {.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE,
                                              .pRangeProfilerObject = s->rp};
  CP_TRY(cp.rp_decode(&dd), "cuptiRangeProfilerDecodeData");
  CUpti_RangeProfiler_GetCounterDataInfo_Params ci = {
      .structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE,
      .pCounterDataImage = s->data,
      .counterDataImageSize = s->data_size};
  CP_TRY(cp.rp_data_info(&ci), "cuptiRangeProfilerGetCounterDataInfo");
  *nranges = (int)TN_MIN(ci.numTotalRanges, (size_t)max_ranges);
  for (int r = 0; r < *nranges; r++) {
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {
        .structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
        .pHostObject = s->host,
        .pCounterDataImage = s->data,
        .counterDataImageSize = s->data_size,
        .rangeIndex = (size_t)r,
        .ppMetricNames = (const char **)metrics,
        .numMetrics = (size_t)n,
        .pMetricValues = values + (size_t)r * (size_t)n};
    CP_TRY(cp.host_eval(&ev), "cuptiProfilerHostEvaluateToGpuValues");
  }
  return 0;
}

int ms_cupti_profile(void *ctx, const char *const *metrics, int n, int (*launch)(void *arg), void *arg,
                     int max_ranges, double *values, int *nranges, char *chip, size_t chipsize, char *why,
                     size_t whysize) {
  *nranges = 0;
  if (cupti_load(why, whysize) < 0) return -1;
  bool tracing = act.on;
  ms_cupti_trace_stop(); /* the activity API and the profiler do not share a context */
  profile_state_t s = {0};
  int rc = profile_begin(&s, ctx, metrics, n, max_ranges, chip, chipsize, why, whysize);
  if (rc == 0) rc = profile_collect(&s, metrics, n, launch, arg, max_ranges, values, nranges, why, whysize);
  profile_end(&s);
  char ignored[256];
  if (tracing) ms_cupti_trace_start(ignored, sizeof ignored);
  return rc;
}

#else /* !TUNED_HAVE_CUDA */

int ms_cupti_config(const char *chip, const char *const *metrics, int n, ms_cupti_config_t *out, tn_err_t *err) {
  (void)chip, (void)metrics, (void)n;
  memset(out, 0, sizeof *out);
  return tn_err_set(err, TN_EUNSUPPORTED, "this build has no CUDA support, so no CUPTI (see -Dctk_root)");
}

int ms_cupti_trace_start(char *why, size_t whysize) {
  return snprintf(why, whysize, "this build has no CUDA support"), -1;
}
void ms_cupti_trace_stop(void) {}
void ms_cupti_trace_reset(void) {}
int ms_cupti_trace_take(int per_launch, int want, double *out, char *why, size_t whysize) {
  (void)per_launch, (void)want, (void)out;
  return snprintf(why, whysize, "this build has no CUDA support"), -1;
}
int ms_cupti_profile(void *ctx, const char *const *metrics, int n, int (*launch)(void *arg), void *arg,
                     int max_ranges, double *values, int *nranges, char *chip, size_t chipsize, char *why,
                     size_t whysize) {
  (void)ctx, (void)metrics, (void)n, (void)launch, (void)arg, (void)max_ranges, (void)values, (void)chip, (void)chipsize;
  *nranges = 0;
  return snprintf(why, whysize, "this build has no CUDA support"), -1;
}
#endif

void ms_cupti_config_free(ms_cupti_config_t *c) {
  free(c->image);
  memset(c, 0, sizeof *c);
}
