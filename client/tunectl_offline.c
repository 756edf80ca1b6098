/* tunectl_offline.c — tunectl's offline commands: show, check, eval,
 * trace-check, emit, run, profile, space and tune work on workload files in this
 * process, without a daemon.  Their options are parsed in tunectl.c. */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/tunectl.h"
#include "client/tunectl_tune.h"
#include "codegen/codegen.h"
#include "db/db.h"
#include "common/target.h"
#include "ir/ir.h"
#include "measure/measure.h"
#include "sampler/sampler.h"
#include "schedule/schedule.h"
#include "search/search.h"
#include "tuned_config.h"

#define EVAL_MAX_BYTES ((size_t)8 << 30) /* doubles the reference evaluator may allocate */

static ir_workload_t *load_workload(const char *cmd, tc_args_t *o) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  if (ir_workload_load(o->pos[0], o->sets, o->nsets, &w, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", cmd, err.msg);
    return NULL;
  }
  return w;
}

static void print_shape(FILE *out, const ir_buffer_t *b) {
  fprintf(out, "%s[", ir_dtype_name(b->dtype));
  for (int d = 0; d < b->ndim; d++) fprintf(out, "%s%lld", d ? ", " : "", (long long)b->shape[d]);
  fputc(']', out);
}

static cJSON *json_shape(const ir_buffer_t *b) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < b->ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)b->shape[d]));
  return a;
}

static void print_json(cJSON *j) {
  char *s = cJSON_Print(j);
  puts(s);
  free(s);
  cJSON_Delete(j);
}

/* Replays trace text (named label in messages) on w; prints the error and
 * returns NULL on failure.  With a target, the replay is the tuner's: up to
 * the trace's EnterPostproc, then that target's postprocessors (annotations
 * such as meta_schedule.parallel become loops, reductions are decomposed,
 * GPU limits are verified). */
static sch_t *replay_text(const char *cmd, tc_args_t *o, ir_workload_t *w, const tn_target_t *post, const char *label,
                          const char *text, size_t len, int *ninsts) {
  tn_err_t err = {0};
  sch_trace_t *t = NULL;
  sch_t *s = NULL;
  if (sch_trace_from_json(text, len, &t, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s: %s\n", cmd, label, err.msg);
  } else if (post ? srch_schedule(w->func, post, t, tc_seed(o), &s, NULL, &err) < 0
                  : sch_replay(w->func, t, tc_seed(o), &s, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s does not apply to %s%s%s: %s\n", cmd, label, o->pos[0], post ? " on " : "",
            post ? post->name : "", err.msg);
  } else if (ninsts) {
    *ninsts = t->n;
  }
  sch_trace_free(t);
  return s;
}

/* Reads and replays o->trace on w (see replay_text). */
static sch_t *replay_trace(const char *cmd, tc_args_t *o, ir_workload_t *w, const tn_target_t *post, int *ninsts) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  sch_t *s = NULL;
  if (tn_read_file(o->trace, (size_t)16 << 20, &text, &len, &err) < 0)
    fprintf(stderr, "tunectl %s: %s: %s\n", cmd, o->trace, err.msg);
  else
    s = replay_text(cmd, o, w, post, o->trace, text, len, ninsts);
  free(text);
  return s;
}

int tco_show(tc_args_t *o) {
  ir_workload_t *w = load_workload("show", o);
  if (!w) return 1;
  sch_t *s = NULL;
  if (o->trace && !(s = replay_trace("show", o, w, NULL, NULL))) {
    ir_workload_free(w);
    return 1;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  (o->tvmscript ? ir_print_tvmscript : ir_print_func)(s ? sch_func(s) : w->func, &b);
  fputs(tn_buf_str(&b), stdout);
  tn_buf_free(&b);
  sch_free(s);
  ir_workload_free(w);
  return 0;
}

int tco_import_tvmscript(tc_args_t *o) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  tn_buf_t b;
  tn_buf_init(&b);
  FILE *out = NULL;
  int rc = 1;
  if (tn_read_file(o->pos[0], IR_MAX_SOURCE_BYTES + 1, &text, &len, &err) < 0 ||
      ir_tvmscript_import(o->pos[0], text, len, &b, &err) < 0 || !(out = o->out ? tn_open_out(o->out, false, &err) : stdout)) {
    fprintf(stderr, "tunectl import-tvmscript: %s\n", err.msg);
  } else {
    bool ok = fputs(tn_buf_str(&b), out) >= 0;
    ok = (out == stdout ? fflush(out) : fclose(out)) == 0 && ok;
    if (!ok) fprintf(stderr, "tunectl import-tvmscript: cannot write %s\n", o->out ? o->out : "stdout");
    rc = ok ? 0 : 1;
  }
  free(text);
  tn_buf_free(&b);
  return rc;
}

int tco_trace_check(tc_args_t *o) {
  o->trace = o->pos[1];
  ir_workload_t *w = load_workload("trace-check", o);
  if (!w) return 1;
  int n = 0;
  sch_t *s = replay_trace("trace-check", o, w, NULL, &n);
  if (s) {
    const sch_trace_t *t = sch_get_trace(s);
    printf("%s: ok, %d instructions replay on %s\n", o->trace, n, w->name);
    for (int i = 0; i < t->n; i++) {
      if (!t->insts[i].ndecision) continue;
      printf("  decision of instruction %d (%s):", i, sch_inst_name(t->insts[i].kind));
      for (int d = 0; d < t->insts[i].ndecision; d++) printf(" %lld", (long long)t->insts[i].decision[d]);
      printf("\n");
    }
  }
  sch_free(s);
  ir_workload_free(w);
  return s ? 0 : 1;
}

int tco_check(tc_args_t *o) {
  ir_workload_t *w = load_workload("check", o);
  if (!w) return 1;
  const ir_func_t *f = w->func;
  char hex[TN_ID_SIZE];
  ir_func_hash(f, hex);
  double flops = ir_func_flops(f), bytes = ir_func_bytes(f);
  if (o->json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "workload", w->name);
    cJSON_AddStringToObject(j, "file", o->pos[0]);
    cJSON_AddStringToObject(j, "hash", hex);
    cJSON *params = cJSON_AddObjectToObject(j, "params");
    for (int i = 0; i < w->nparams; i++)
      cJSON_AddNumberToObject(params, w->params[i].name, (double)w->params[i].value);
    cJSON *tensors = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < f->nparams; i++) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "name", f->params[i]->name);
      cJSON_AddStringToObject(t, "role", f->params[i]->role == IR_BUF_INPUT ? "input" : "output");
      cJSON_AddStringToObject(t, "dtype", ir_dtype_name(f->params[i]->dtype));
      cJSON_AddItemToObject(t, "shape", json_shape(f->params[i]));
      cJSON_AddItemToArray(tensors, t);
    }
    cJSON_AddNumberToObject(j, "flops", flops);
    cJSON_AddNumberToObject(j, "bytes", bytes);
    print_json(j);
  } else {
    printf("workload  %s (%s): ok\n", w->name, o->pos[0]);
    printf("hash      %s\n", hex);
    printf("params   ");
    for (int i = 0; i < w->nparams; i++)
      printf(" %s=%lld%s", w->params[i].name, (long long)w->params[i].value,
             w->params[i].value != w->params[i].def ? "*" : "");
    if (!w->nparams) printf(" (none)");
    printf("\n");
    for (int i = 0; i < f->nparams; i++) {
      printf("%-9s %s: ", f->params[i]->role == IR_BUF_INPUT ? "input" : "output", f->params[i]->name);
      print_shape(stdout, f->params[i]);
      printf("\n");
    }
    printf("flops     %.0f (%.3f GFLOP per run)\n", flops, flops * 1e-9);
    printf("bytes     %.0f (%.3f MB per run)\n", bytes, bytes * 1e-6);
  }
  ir_workload_free(w);
  return 0;
}

/* Checksum of an output: FNV-1a over the values rounded to the buffer's
 * dtype, so it compares like-for-like with kernels that store that dtype. */
static uint64_t output_checksum(const ir_buffer_t *b, const double *v, int64_t n) {
  uint64_t h = TN_FNV_INIT;
  for (int64_t i = 0; i < n; i++) {
    uint64_t bits;
    if (b->dtype == IR_FLOAT32 || ir_dtype_is_16bit_float(b->dtype)) {
      float x = (float)v[i];
      if (b->dtype == IR_FLOAT16) x = tn_half_to_float(tn_float_to_half(x));
      if (b->dtype == IR_BFLOAT16) x = tn_bf16_to_float(tn_float_to_bf16(x));
      uint32_t u;
      memcpy(&u, &x, 4);
      bits = u;
    } else if (b->dtype == IR_FLOAT64) {
      memcpy(&bits, &v[i], 8);
    } else {
      bits = (uint64_t)(int64_t)v[i];
    }
    h = tn_fnv1a_u64(h, bits);
  }
  return h;
}

int tco_eval(tc_args_t *o) {
  ir_workload_t *w = load_workload("eval", o);
  if (!w) return 1;
  const ir_func_t *f = w->func;
  ir_data_t *d = NULL;
  tn_err_t err = {0};
  int rc = 1;
  double t0 = tn_now();
  if (ir_eval_check_work(f, &err) < 0 || ir_data_new(f, tc_seed(o), EVAL_MAX_BYTES, &d, &err) < 0 ||
      ir_eval(f, d, &err) < 0) {
    fprintf(stderr, "tunectl eval: %s: %s\n", o->pos[0], err.msg);
    goto out;
  }
  double secs = tn_now() - t0;
  cJSON *j = o->json ? cJSON_CreateObject() : NULL;
  cJSON *outs = NULL;
  if (j) {
    cJSON_AddStringToObject(j, "workload", w->name);
    cJSON_AddNumberToObject(j, "seed", (double)tc_seed(o));
    cJSON_AddNumberToObject(j, "seconds", secs);
    outs = cJSON_AddArrayToObject(j, "outputs");
  } else {
    printf("evaluated %s with seed %llu in %.2f s\n", w->name, (unsigned long long)tc_seed(o), secs);
  }
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    if (b->role != IR_BUF_OUTPUT) continue;
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < d->sizes[i]; k++) {
      sum += d->vals[i][k];
      sq += d->vals[i][k] * d->vals[i][k];
    }
    char hex[17]; /* a checksum to compare outputs by, not an identity */
    snprintf(hex, sizeof hex, "%016" PRIx64, output_checksum(b, d->vals[i], d->sizes[i]));
    if (j) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "name", b->name);
      cJSON_AddStringToObject(t, "dtype", ir_dtype_name(b->dtype));
      cJSON_AddItemToObject(t, "shape", json_shape(b));
      cJSON_AddNumberToObject(t, "sum", sum);
      cJSON_AddNumberToObject(t, "l2", sqrt(sq));
      cJSON_AddStringToObject(t, "checksum", hex);
      cJSON_AddItemToArray(outs, t);
    } else {
      printf("%s ", b->name);
      print_shape(stdout, b);
      printf("  sum %.9e  l2 %.9e  checksum %s\n", sum, sqrt(sq), hex);
    }
  }
  if (j) print_json(j);
  rc = 0;
out:
  ir_data_free(d);
  ir_workload_free(w);
  return rc;
}

/* Looks the target up in the config directory ("opencl" stands for
 * opencl/pocl-cpu). */
/* The target by name, with --cc (when given) as its compiler. */
/* --target (and --cc) read; -1 after a message: the caller exits 2, as for
 * any bad command line. */
static int lookup_target(const char *cmd, const tc_args_t *o, tn_target_t *t) {
  tn_err_t err = {0};
  if (tn_target_lookup(o->target, NULL, t, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", cmd, err.msg);
    return -1;
  }
  if (o->cc && tn_target_set_cc(t, o->cc, &err) < 0) {
    fprintf(stderr, "tunectl %s: --cc: %s\n", cmd, err.msg);
    return -1;
  }
  return 0;
}

/* Replays the trace text if any (named label) on w with t's postprocessors
 * and lowers for t's language, as the tuner does (srch_schedule, then
 * srch_lower_schedule); without a trace the program is lowered as written. */
static cg_module_t *lower_with(const char *cmd, tc_args_t *o, const tn_target_t *t, ir_workload_t *w,
                               const char *trace, const char *label) {
  cg_target_t lang = ms_language_of(t->kind);
  sch_t *s = NULL;
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  if (!trace) s = sch_create(w->func, tc_seed(o));
  else s = replay_text(cmd, o, w, t, label, trace, strlen(trace), NULL);
  if (s && srch_lower_schedule(s, t, cg_entry_for(w->name), &m, &err) < 0)
    fprintf(stderr, "tunectl %s: cannot generate %s code for %s%s%s: %s\n", cmd, cg_target_name(lang), o->pos[0],
            trace ? " with " : "", trace ? label : "", err.msg);
  sch_free(s);
  return m;
}

/* Loads the workload file and lowers it with o->trace if any (lower_with). */
static cg_module_t *lower(const char *cmd, tc_args_t *o, const tn_target_t *t, ir_workload_t **wout) {
  ir_workload_t *w = load_workload(cmd, o);
  if (!w) return NULL;
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  cg_module_t *m = NULL;
  if (o->trace && tn_read_file(o->trace, (size_t)16 << 20, &text, &len, &err) < 0)
    fprintf(stderr, "tunectl %s: %s: %s\n", cmd, o->trace, err.msg);
  else
    m = lower_with(cmd, o, t, w, text, o->trace);
  free(text);
  if (m && wout) *wout = w;
  else ir_workload_free(w);
  return m;
}

/* The CUBIN's SASS (nvdisasm, ms_cuda_sass), after ptxas's report of each
 * kernel's registers, shared memory and spills from the NVRTC log, as
 * comments. */
static int print_sass(const ms_cuda_output_t *out, tn_err_t *err) {
  const char *dir = getenv("TMPDIR");
  char path[MS_PATH_MAX];
  snprintf(path, sizeof path, "%s/tunectl-sass-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return tn_err_set(err, TN_EIO, "cannot create %s: %s", path, strerror(errno));
  bool ok = write(fd, out->cubin, out->cubin_size) == (ssize_t)out->cubin_size;
  close(fd);
  tn_buf_t sass;
  tn_buf_init(&sass);
  int rc = ok ? ms_cuda_sass(path, 60, &sass, err) : tn_err_set(err, TN_EIO, "cannot write %s", path);
  unlink(path);
  if (rc == 0) {
    const char *l = out->log;
    while (l && *l) {
      size_t len = strcspn(l, "\n");
      if (!strncmp(l, "ptxas info", 10)) {
        fputs("// ", stdout);
        fwrite(l, 1, len, stdout);
        fputc('\n', stdout);
      }
      l += len + (l[len] != 0);
    }
    fputs(tn_buf_str(&sass), stdout);
  }
  tn_buf_free(&sass);
  return rc;
}

int tco_emit(tc_args_t *o) {
  static const char *const kinds[] = {"cuda", "ptx", "opencl", "c", "launch", "sass"};
  size_t kind = 0;
  while (kind < TN_ARRAY_LEN(kinds) && strcmp(kinds[kind], o->emit) != 0) kind++;
  if (kind == TN_ARRAY_LEN(kinds)) {
    fprintf(stderr, "tunectl emit: unknown --emit '%s' (cuda, ptx, sass, opencl, c or launch)\n", o->emit);
    return 2;
  }
  tn_target_t t;
  if (lookup_target("emit", o, &t) < 0) return 2; /* a bad --target or --cc: the command line */
  cg_target_t lang = ms_language_of(t.kind);
  cg_target_t want = kind <= 1 || kind == 5 ? CG_TARGET_CUDA
                     : kind == 2        ? CG_TARGET_OPENCL
                     : kind == 3        ? CG_TARGET_C
                                        : lang;
  if (want != lang) {
    fprintf(stderr, "tunectl emit: target %s runs %s code; --emit %s needs a %s target\n", t.name,
            cg_target_name(lang), o->emit,
            want == CG_TARGET_CUDA ? "CUDA (nvidia/...)" : want == CG_TARGET_OPENCL ? "OpenCL" : "CPU");
    return 1;
  }
  cg_module_t *m = lower("emit", o, &t, NULL);
  if (!m) return 1;
  int rc = 0;
  if (kind == 1 || kind == 5) {
    ms_cuda_output_t out;
    tn_err_t err = {0};
    if (ms_cuda_compile(m->source, ms_cuda_arch(&t, m->sm90a), &out, &err) < 0 ||
        (kind == 5 && print_sass(&out, &err) < 0)) {
      fprintf(stderr, "tunectl emit: %s\n", err.msg);
      rc = 1;
    } else if (kind == 1) {
      fputs(out.ptx, stdout);
    }
    ms_cuda_output_free(&out);
  } else if (kind == 4) {
    char *j = cg_module_launch_json(m);
    puts(j);
    free(j);
  } else {
    fputs(m->source, stdout);
  }
  cg_module_free(m);
  return rc;
}

/* The kernel that ran against the target's peaks (false: no peaks, or it
 * did not run). */
static bool run_roofline(const ms_result_t *r, const ir_workload_t *w, const tn_target_t *t, tn_roofline_t *rl) {
  return r->status == MS_OK && tn_target_roofline(t, ir_func_flops(w->func), ir_func_bytes(w->func), r->median_secs, rl);
}

static void print_run_text(const ms_result_t *r, const ir_workload_t *w, const tn_target_t *t, const tc_args_t *o) {
  printf("workload  %s (%s)%s%s\n", w->name, o->pos[0], o->trace ? ", trace " : "", o->trace ? o->trace : "");
  printf("target    %s (%s)\n", t->name, t->device);
  printf("status    %s\n", ms_status_name(r->status));
  if (r->nrepeats > 0) {
    double lo = r->run_secs[0], hi = r->run_secs[0];
    for (int i = 1; i < r->nrepeats; i++) lo = fmin(lo, r->run_secs[i]), hi = fmax(hi, r->run_secs[i]);
    printf("median    %.6f ms over %d repeats (min %.6f ms, max %.6f ms)\n", r->median_secs * 1e3, r->nrepeats,
           lo * 1e3, hi * 1e3);
    if (r->shared)
      printf("shared    other processes preempted the kernel in %d of %d repeats: the time is the shared "
             "machine's\n", r->disturbed, r->nrepeats);
    else if (r->disturbed)
      printf("shared    %d repeats that other processes preempted were set aside\n", r->disturbed);
    char cupti[512];
    ms_cupti_text(r, cupti, sizeof cupti);
    if (cupti[0]) printf("cupti     %s\n", cupti);
    printf("speed     %.3f GFLOP/s, %.3f GB/s\n", r->gflops, r->gbps);
    tn_roofline_t rl;
    char line[256];
    if (run_roofline(r, w, t, &rl)) {
      tn_roofline_text(&rl, line, sizeof line);
      printf("roofline  %s\n", line);
    }
  }
  if (r->verify_error >= 0)
    printf("verified  %s: relative L2 error %.3g against the reference evaluator\n",
           r->status == MS_WRONG_RESULT ? "WRONG" : "ok", r->verify_error);
  else
    printf("verified  no (the candidate did not run)\n");
  printf("build     %s, arch %s, %.3f s", r->build.compiler[0] ? r->build.compiler : "?",
         r->build.arch[0] ? r->build.arch : "-", r->build.build_secs);
  if (r->build.registers >= 0) printf(", %d registers", r->build.registers);
  if (r->build.shared_bytes >= 0) printf(", %lld B shared", (long long)r->build.shared_bytes);
  if (r->build.spill_bytes >= 0) printf(", %lld B spilled", (long long)r->build.spill_bytes);
  printf("\n");
  if (r->error[0]) printf("error     %s\n", r->error);
}

int tco_run(tc_args_t *o) {
  tn_target_t t;
  if (lookup_target("run", o, &t) < 0) return 2; /* a bad --target or --cc: the command line */
  ir_workload_t *w = NULL;
  cg_module_t *m = lower("run", o, &t, &w);
  if (!m) return 1;
  ms_options_t mo = {.seed = tc_seed(o)};
  mo.run.min_secs = o->repeat_ms > 0 ? o->repeat_ms * 1e-3 : 0;
  mo.run.flush_l2 = ms_flush_by_default(t.kind) && !o->no_flush;
  ms_result_t r;
  tn_err_t err = {0};
  int rc = 1;
  if (ms_measure(w->func, &t, &m, 1, &mo, &r, &err) < 0) {
    fprintf(stderr, "tunectl run: %s\n", err.msg);
  } else {
    if (o->json) {
      char *text = ms_result_to_json(&r);
      cJSON *j = cJSON_Parse(text);
      free(text);
      cJSON_AddStringToObject(j, "workload", w->name);
      cJSON_AddStringToObject(j, "target", t.name);
      tn_roofline_t rl;
      if (run_roofline(&r, w, &t, &rl)) tn_roofline_add_json(&rl, cJSON_AddObjectToObject(j, "roofline"));
      print_json(j);
    } else {
      print_run_text(&r, w, &t, o);
    }
    rc = r.status == MS_OK ? 0 : 1;
    ms_result_clear(&r);
  }
  cg_module_free(m);
  ir_workload_free(w);
  return rc;
}

/* Prints n valid samples of space i (replayed with seeds seed, seed + 1,
 * ..., post-processed and lowered; the rejected ones skipped, 64 tries a
 * sample at most); 1 when fewer than n came, after saying so. */
static int print_samples(const ir_func_t *f, const tn_target_t *t, const smp_space_t *sp, int i, int n,
                         uint64_t seed) {
  int got = 0, rejected = 0, tries = 0;
  char last[sizeof ((tn_err_t *)0)->msg] = "";
  for (; got < n && tries < 64 * n; tries++, seed++) {
    sch_t *s = NULL;
    cg_module_t *m = NULL;
    tn_err_t err = {0};
    int rc = srch_schedule(f, t, sp->traces[i], seed, &s, NULL, &err);
    if (rc == TN_OK) rc = srch_lower_schedule(s, t, NULL, &m, &err);
    if (rc == TN_OK) {
      char *json = sch_trace_to_json(sch_get_trace(s));
      printf("# space %d of %d, sample %d (seed %" PRIu64 ", %d rejected before it; rules: %s)\n%s\n", i + 1,
             sp->n, ++got, seed, rejected, sp->descs[i], json);
      free(json);
      rejected = 0;
    } else {
      rejected++;
      snprintf(last, sizeof last, "%s", err.msg);
    }
    cg_module_free(m);
    sch_free(s);
  }
  if (got == n) return 0;
  fprintf(stderr, "tunectl space: space %d of %d: %d of %d samples valid in %d tries; the last rejection: %s\n",
          i + 1, sp->n, got, n, tries, last);
  return 1;
}

/* Prints the design spaces of the workload for the target, as traces. */
int tco_space(tc_args_t *o) {
  tn_target_t t;
  if (lookup_target("space", o, &t) < 0) return 2; /* a bad --target or --cc: the command line */
  ir_workload_t *w = load_workload("space", o);
  if (!w) return 1;
  smp_space_t sp;
  tn_err_t err = {0};
  if (smp_generate(w->func, &t, 1, &sp, &err) < 0) {
    fprintf(stderr, "tunectl space: %s\n", err.msg);
    ir_workload_free(w);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < sp.n; i++) {
    if (o->limit > 0) {
      rc |= print_samples(w->func, &t, &sp, i, (int)o->limit, tc_seed(o));
      continue;
    }
    char *json = sch_trace_to_json(sp.traces[i]);
    printf("# space %d of %d (rules: %s)\n%s\n", i + 1, sp.n, sp.descs[i], json);
    free(json);
  }
  smp_space_free(&sp);
  ir_workload_free(w);
  return rc;
}

/* Whether this machine can run t's candidates; says why not.  A tune
 * without the device would fill the database with run errors that count as
 * measured for good. */
bool tc_can_measure(const char *cmd, const tn_target_t *t) {
  ms_backend_t b = ms_backend_of(t->kind);
  ms_backend_status_t st;
  ms_backend_probe(b, &st);
  if (st.available) return true;
  fprintf(stderr,
          "tunectl %s: cannot measure on %s here: the %s backend is %s (%s); tune on a machine with the "
          "device, or look at kernels without it with `tunectl emit` and `tunectl space`\n",
          cmd, t->name, ms_backend_name(b), st.compiled ? "unavailable" : "not in this build", st.detail);
  return false;
}

int tco_tune(tc_args_t *o) {
  tn_target_t t;
  if (lookup_target("tune", o, &t) < 0) return 2; /* a bad --target or --cc: the command line */
  if (!tc_can_measure("tune", &t)) return 2;
  ir_workload_t *w = load_workload("tune", o);
  if (!w) return 1;
  tn_err_t werr = {0};
  if (ir_eval_check_work(w->func, &werr) < 0) { /* before anything is stored */
    fprintf(stderr, "tunectl tune: %s: %s\n", o->pos[0], werr.msg);
    ir_workload_free(w);
    return 1;
  }
  if (o->no_remeasure && o->remeasure > 0) {
    fprintf(stderr, "tunectl tune: --remeasure %lld and --no-remeasure contradict each other\n",
            (long long)o->remeasure);
    ir_workload_free(w);
    return 2;
  }
  tct_args_t a = {.workload = w, .target = &t, .trials = (int)o->trials, .db = o->db, .strategy = o->strategy,
                  .model = o->model, .seed = tc_seed(o), .json = o->json, .no_flush = o->no_flush,
                  .remeasure = o->no_remeasure ? 0 : (int)o->remeasure, .no_baseline = o->no_baseline,
                  .repeat_ms = o->repeat_ms, .top = (int)o->k};
  int rc = tct_tune(&a);
  ir_workload_free(w);
  return rc;
}

/* ---- profile ---------------------------------------------------------------- */

/* What `tunectl profile` profiles: a workload (a file, or rebuilt from a
 * record's stored text and parameters), the trace text if any (the file of
 * --trace, or the record's) and the target. */
typedef struct profile_src {
  ir_workload_t *w;
  char *trace;
  char label[64]; /* the trace's name in messages */
  tn_target_t t;
  int64_t record; /* 0: a workload file */
} profile_src_t;

static bool is_record_id(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

/* The record's workload, trace and (unless --target) target from --db. */
static int profile_record(tc_args_t *o, profile_src_t *src) {
  if (!o->db) {
    fprintf(stderr, "tunectl profile: %s is a record id: give the database it is in with --db PATH (or give a "
            "workload file)\n", o->pos[0]);
    return 2;
  }
  if (o->trace || o->nsets) {
    fprintf(stderr, "tunectl profile: a record brings its own trace and parameters: --trace and --set are for "
            "workload files\n");
    return 2;
  }
  db_t *db = NULL;
  tn_err_t err = {0};
  tn_arena_t *a = tn_arena_new();
  db_record_t r;
  db_workload_t wl;
  int rc = 1;
  src->record = strtoll(o->pos[0], NULL, 10);
  if (access(o->db, R_OK) != 0) /* db_open would create it */
    tn_err_set(&err, TN_EIO, "no such database: %s", strerror(errno));
  bool found = !err.msg[0] && db_open(o->db, &db, &err) == 0 && db_record_get(db, src->record, &r, a, &err) == 0 &&
               db_workload_get(db, r.workload_hash, &wl, a, &err) == 0;
  if (!found) {
    fprintf(stderr, "tunectl profile: %s: %s\n", o->db, err.msg);
  } else if (tn_target_lookup(o->target ? o->target : r.target_name, NULL, &src->t, &err) < 0) {
    fprintf(stderr, "tunectl profile: record %s: %s\n", o->pos[0], err.msg);
  } else {
    if (ir_workload_parse_stored(wl.name, wl.source, wl.params, &src->w, &err) < 0) {
      fprintf(stderr, "tunectl profile: record %s: its workload does not parse: %s\n", o->pos[0], err.msg);
    } else {
      src->trace = tn_xstrdup(r.trace);
      snprintf(src->label, sizeof src->label, "the trace of record %s", o->pos[0]);
      rc = 0;
    }
  }
  db_close(db);
  tn_arena_free(a);
  return rc;
}

static int profile_source(tc_args_t *o, profile_src_t *src) {
  if (is_record_id(o->pos[0])) return profile_record(o, src);
  if (!o->target) {
    fprintf(stderr, "tunectl profile: a workload file needs --target T\n");
    return 2;
  }
  tn_err_t err = {0};
  if (lookup_target("profile", o, &src->t) < 0) return 2;
  if (!(src->w = load_workload("profile", o))) return 1;
  if (o->trace && tn_read_file(o->trace, (size_t)16 << 20, &src->trace, NULL, &err) < 0) {
    fprintf(stderr, "tunectl profile: %s: %s\n", o->trace, err.msg);
    return 1;
  }
  snprintf(src->label, sizeof src->label, "%.63s", o->trace ? o->trace : "");
  return 0;
}

/* Only an NVIDIA GPU has the counters: says why not when this is no such
 * target, or (profile_check_device) no such machine. */
static int profile_check_target(const tn_target_t *t) {
  if (t->kind != TN_TARGET_CUDA) {
    fprintf(stderr, "tunectl profile: target %s runs %s: profiling reads an NVIDIA GPU's hardware counters "
            "(CUPTI's range profiler), so it needs a CUDA target (nvidia/...)%s\n", t->name,
            t->kind == TN_TARGET_CUDA_HOST ? "CUDA C on the CPU" : t->kind == TN_TARGET_CPU ? "C on the CPU" : "OpenCL",
            t->kind == TN_TARGET_CUDA_HOST ? "; `tunectl run` checks and times kernels on the host harness" : "");
    return 1;
  }
  return 0;
}

static int profile_check_device(const tn_target_t *t) {
  ms_backend_status_t st;
  ms_backend_probe(MS_BACKEND_CUDA, &st);
  if (!st.available) {
    fprintf(stderr, "tunectl profile: no GPU to profile %s on: %s. CUPTI's range profiler needs an NVIDIA GPU and "
            "its driver; on this machine `tunectl run --target cuda-host` checks the kernel on the CPU\n", t->name,
            st.detail);
    return 1;
  }
  return 0;
}

/* A metric of kernel k from the profile (NAN when absent). */
static double metric(const cJSON *kernel, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(kernel, "metrics"), name);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Nsight Compute's "GPU Speed Of Light" and "Launch Statistics" lines for
 * one kernel: CUPTI's metrics, then what NVRTC and the launch configuration
 * say. */
static void print_profile_kernel(const cJSON *k, const cg_kernel_t *ck, const ms_result_t *r, const tn_target_t *t) {
  double gbps = metric(k, ms_profile_metrics[1]) * 1e-9;
  printf("  %-34s %-16s %14.2f\n", "Duration", "usecond", metric(k, ms_profile_metrics[0]) * 1e-3);
  printf("  %-34s %-16s %14.2f", "DRAM Throughput", "Gbyte/second", gbps);
  if (t->peak_gbps > 0) printf("   (%.1f %% of the target's %.0f GB/s)", gbps / t->peak_gbps * 100, t->peak_gbps);
  printf("\n  %-34s %-16s %14.2f\n", "DRAM Throughput", "%", metric(k, ms_profile_metrics[2]));
  printf("  %-34s %-16s %14.2f\n", "Compute (SM) Throughput", "%", metric(k, ms_profile_metrics[3]));
  printf("  %-34s %-16s %14.2f\n", "Achieved Occupancy", "%", metric(k, ms_profile_metrics[4]));
  double tensor = metric(k, ms_profile_metrics[5]);
  if (isnan(tensor))
    printf("  %-34s %-16s %14s   (CUPTI gave no value for %s)\n", "Tensor Pipe Utilization", "%", "n/a",
           ms_profile_metrics[5]);
  else
    printf("  %-34s %-16s %14.2f\n", "Tensor Pipe Utilization", "%", tensor);
  if (r->build.registers >= 0) printf("  %-34s %-16s %14d\n", "Registers Per Thread", "register/thread", r->build.registers);
  if (ck) {
    int64_t shared = ck->static_shared_bytes + ck->dyn_shared_bytes;
    printf("  %-34s %-16s %14.2f\n", "Shared Memory Per Block", "Kbyte/block", (double)shared / 1024);
    printf("  %-34s %-16s %14lld\n", "Grid Size", "", (long long)(ck->grid[0] * ck->grid[1] * ck->grid[2]));
    printf("  %-34s %-16s %14lld\n", "Block Size", "", (long long)(ck->block[0] * ck->block[1] * ck->block[2]));
    printf("    grid (%lld, %lld, %lld), block (%lld, %lld, %lld)\n", (long long)ck->grid[0], (long long)ck->grid[1],
           (long long)ck->grid[2], (long long)ck->block[0], (long long)ck->block[1], (long long)ck->block[2]);
  }
}

/* The table, or the JSON record with the launch configuration added. */
static int print_profile(const ms_result_t *r, const cg_module_t *m, const profile_src_t *src, const tc_args_t *o) {
  cJSON *p = r->profile ? cJSON_Parse(r->profile) : NULL;
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(p, "error");
  const cJSON *ks = cJSON_GetObjectItemCaseSensitive(p, "kernels"), *k;
  int rc = 0;
  if (r->status != MS_OK) {
    fprintf(stderr, "tunectl profile: the kernel did not run correctly (%s): %s\n", ms_status_name(r->status), r->error);
    rc = 1;
  } else if (!p || cJSON_IsString(e) || cJSON_GetArraySize(ks) == 0) {
    fprintf(stderr, "tunectl profile: the profiler gave nothing: %s\n",
            cJSON_IsString(e) ? e->valuestring : "no profile in the worker's reply");
    rc = 1;
  } else if (o->json) {
    char *text = ms_result_to_json(r);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON_AddStringToObject(j, "workload", src->w->name);
    cJSON_AddStringToObject(j, "target", src->t.name);
    if (src->record) cJSON_AddNumberToObject(j, "record", (double)src->record);
    char *launch = cg_module_launch_json(m);
    cJSON_AddItemToObject(j, "launch", cJSON_Parse(launch));
    free(launch);
    print_json(j);
  } else {
    const cJSON *chip = cJSON_GetObjectItemCaseSensitive(p, "chip");
    int i = 0;
    cJSON_ArrayForEach(k, ks) {
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "name");
      const char *kn = cJSON_IsString(name) ? name->valuestring : "?";
      const cg_kernel_t *ck = NULL;
      for (int j = 0; j < m->nkernels; j++)
        if (strcmp(m->kernels[j].name, kn) == 0) ck = &m->kernels[j];
      printf("%s%s (%s, %s", i++ ? "\n" : "", kn, src->w->name, cJSON_IsString(chip) ? chip->valuestring : "?");
      if (src->record) printf(", record %lld", (long long)src->record);
      printf(")\n");
      print_profile_kernel(k, ck, r, &src->t);
    }
    printf("\nCUDA events: median %.6f ms over %d repeats", r->median_secs * 1e3, r->nrepeats);
    char cupti[512];
    ms_cupti_text(r, cupti, sizeof cupti);
    printf("%s%s\n", cupti[0] ? "; " : "", cupti);
  }
  cJSON_Delete(p);
  return rc;
}

int tco_profile(tc_args_t *o) {
  profile_src_t src = {0};
  int rc = profile_source(o, &src);
  if (rc == 0) rc = profile_check_target(&src.t);
  /* lowered before the device is looked at: a bad trace is reported anywhere */
  cg_module_t *m = NULL;
  if (rc == 0 && !(m = lower_with("profile", o, &src.t, src.w, src.trace, src.label))) rc = 1;
  if (rc == 0) rc = profile_check_device(&src.t);
  if (rc == 0) {
    ms_options_t mo = {.seed = tc_seed(o)};
    mo.run.flush_l2 = ms_flush_by_default(src.t.kind) && !o->no_flush;
    mo.run.profile_metrics = ms_profile_metrics;
    mo.run.profile_nmetrics = MS_PROFILE_NMETRICS;
    ms_result_t r;
    tn_err_t err = {0};
    if (ms_measure(src.w->func, &src.t, &m, 1, &mo, &r, &err) < 0) {
      fprintf(stderr, "tunectl profile: %s\n", err.msg);
      rc = 1;
    } else {
      rc = print_profile(&r, m, &src, o);
      ms_result_clear(&r);
    }
  }
  cg_module_free(m);
  ir_workload_free(src.w);
  free(src.trace);
  return rc;
}
