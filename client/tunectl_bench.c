/* tunectl_bench.c — `tunectl bench`: tunes a suite of workloads (in this
 * process through the search module, or through the daemon), writes the
 * results as JSON and compares them with a baseline for CI.  A workload
 * that ends with no verified kernel fails the run (exit 1), named with its
 * first failure: a gate must not pass on nothing. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/tuned.h"
#include "client/tunectl.h"
#include "common/target.h"
#include "search/search.h"
#include "tuned_config.h"

#define DEFAULT_MAX_REGRESSION 0.05

static const char *jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *key, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* "5%", "5" and "2.5%" are percent; the result is a fraction. */
static int parse_regression(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || (*end && strcmp(end, "%") != 0) || !(v >= 0 && v < 100)) return -1;
  *out = v / 100;
  return 0;
}

/* ---- comparison ---------------------------------------------------------- */

static const cJSON *find_result(const cJSON *results, const char *hash) {
  const cJSON *r;
  cJSON_ArrayForEach(r, results)
    if (strcmp(jstr(r, "hash"), hash) == 0) return r;
  return NULL;
}

static int results_of(const cJSON *doc, const char *what, const cJSON **out, tn_err_t *err) {
  *out = cJSON_GetObjectItemCaseSensitive(doc, "results");
  if (!cJSON_IsObject(doc) || !cJSON_IsArray(*out))
    return tn_err_set(err, TN_EINVAL, "the %s is not a `tunectl bench` result (a JSON object with a \"results\" array)",
                      what);
  const cJSON *r;
  cJSON_ArrayForEach(r, *out) {
    if (strlen(jstr(r, "hash")) == 16)
      return tn_err_set(err, TN_EINVAL, "the %s holds 16-digit hashes: an older tuned wrote it (before workload hashes "
                        "became %d-digit BLAKE2b identities); run the suite again for a new one", what, TN_ID_HEX);
    if (!tn_id_valid(jstr(r, "hash")))
      return tn_err_set(err, TN_EINVAL, "a result in the %s has no %d-digit \"hash\"", what, TN_ID_HEX);
  }
  return 0;
}

/* How far apart two results may be by noise alone: the re-measure's
 * spread of each (0 when a file has none), twice over. */
static double noise_of(const cJSON *r) {
  double n = r ? jnum(r, "noise", 0) : 0;
  return n > 0 ? TN_MIN(n, 1.0) : 0;
}

static void add_id(cJSON *o, const char *key, const cJSON *from) {
  double v = from ? jnum(from, key, 0) : 0;
  if (v > 0) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

/* Compares one baseline entry; prints its line, adds its row to rows and
 * returns 1 for a regression.  A drop counts past max_reg plus twice the
 * two results' noise (so a noisy machine does not flap). */
static int compare_one(const cJSON *b, const cJSON *now, double max_reg, FILE *out, cJSON *rows) {
  double base = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "found")) ? jnum(b, "gflops", 0) : 0;
  double allowed = max_reg + 2 * (noise_of(b) + noise_of(now));
  cJSON *row = cJSON_CreateObject();
  cJSON_AddItemToArray(rows, row);
  cJSON_AddStringToObject(row, "name", jstr(b, "name"));
  cJSON_AddStringToObject(row, "hash", jstr(b, "hash"));
  cJSON_AddNumberToObject(row, "baseline_gflops", base);
  add_id(row, "job", now);
  add_id(row, "record", now);
  cJSON_AddNumberToObject(row, "allowed", allowed);
  fprintf(out, "%-16.16s  %.*s  %16.3f  ", jstr(b, "name"), TN_ID_SHOWN, jstr(b, "hash"), base);
  const char *status = "ok", *why = "";
  int bad = 0;
  if (!now) {
    fprintf(out, "%12s  %8s  %7s  REGRESSION: missing from the results\n", "-", "", "");
    status = "missing", why = "missing from the results", bad = 1;
  } else {
    bool found = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(now, "found"));
    double cur = found ? jnum(now, "gflops", 0) : 0, change = base > 0 ? cur / base - 1 : 0;
    cJSON_AddNumberToObject(row, "gflops", cur);
    fprintf(out, "%12.3f  ", cur);
    if (base <= 0) {
      fprintf(out, "%8s  %7s  ok (the baseline has no kernel)\n", "", "");
    } else {
      cJSON_AddNumberToObject(row, "change", change);
      fprintf(out, "%+7.1f%%  %6.1f%%  ", change * 100, (noise_of(b) + noise_of(now)) * 100);
      if (!found) {
        fprintf(out, "REGRESSION: no verified kernel found\n");
        status = "no kernel", why = "no verified kernel found", bad = 1;
      } else if (cur < base * (1 - allowed)) {
        fprintf(out, "REGRESSION: more than %.1f%% slower\n", allowed * 100);
        status = "regression", why = "slower than allowed", bad = 1;
      } else if (allowed >= 1 && change < -max_reg) {
        fprintf(out, "ok (too noisy to tell: rerun on a quieter machine)\n");
        status = "noisy";
      } else {
        fprintf(out, "ok\n");
      }
    }
  }
  cJSON_AddStringToObject(row, "status", status);
  if (*why) cJSON_AddStringToObject(row, "why", why);
  return bad;
}

/* The baseline must have been tuned like the results: the same trial count,
 * mode and search seed (files without them are taken as they are). */
static int same_setup(const cJSON *cur, const cJSON *base, tn_err_t *err) {
  static const char *const keys[] = {"trials", "mode", "seed"};
  for (size_t i = 0; i < TN_ARRAY_LEN(keys); i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cur, keys[i]), *b = cJSON_GetObjectItemCaseSensitive(base, keys[i]);
    if (!a || !b) continue;
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    bool same = strcmp(x, y) == 0;
    if (!same)
      tn_err_set(err, TN_EINVAL, "the baseline was tuned with %s %s and the results with %s %s: a bench compares "
                                 "runs of the same trials, mode and seed (make a new baseline)", keys[i], y,
                 keys[i], x);
    free(x);
    free(y);
    if (!same) return -1;
  }
  return 0;
}

int tcd_bench_compare(const char *results_json, const char *baseline_json, double max_regression, FILE *out,
                      cJSON *report, tn_err_t *err) {
  cJSON *cur = cJSON_Parse(results_json), *base = cJSON_Parse(baseline_json);
  const cJSON *cr = NULL, *br = NULL;
  int n = -1;
  if (results_of(cur, "results", &cr, err) < 0 || results_of(base, "baseline", &br, err) < 0) goto out;
  const char *ct = jstr(cur, "target"), *bt = jstr(base, "target");
  if (*ct && *bt && strcmp(ct, bt) != 0) {
    tn_err_set(err, TN_EINVAL, "the baseline was measured on target %s and the results on %s; compare results of "
                               "the same target", bt, ct);
    goto out;
  }
  if (same_setup(cur, base, err) < 0) goto out;
  cJSON *rows = cJSON_CreateArray();
  fprintf(out, "%-16s  %-*s  %16s  %12s  %8s  %7s\n", "WORKLOAD", TN_ID_SHOWN, "HASH", "BASELINE GFLOP/s", "NOW GFLOP/s", "CHANGE",
          "NOISE");
  n = 0;
  const cJSON *b, *r;
  cJSON_ArrayForEach(b, br) n += compare_one(b, find_result(cr, jstr(b, "hash")), max_regression, out, rows);
  cJSON_ArrayForEach(r, cr)
    if (!find_result(br, jstr(r, "hash"))) {
      fprintf(out, "%-16.16s  %.*s  %16s  %12.3f  %8s  %7s  new (not in the baseline)\n", jstr(r, "name"),
              TN_ID_SHOWN, jstr(r, "hash"), "-", jnum(r, "gflops", 0), "", "");
      cJSON *row = cJSON_CreateObject();
      cJSON_AddStringToObject(row, "name", jstr(r, "name"));
      cJSON_AddStringToObject(row, "hash", jstr(r, "hash"));
      add_id(row, "job", r);
      add_id(row, "record", r);
      cJSON_AddNumberToObject(row, "gflops", jnum(r, "gflops", 0));
      cJSON_AddStringToObject(row, "status", "new");
      cJSON_AddItemToArray(rows, row);
    }
  if (n) fprintf(out, "%d of %d workloads regressed (allowed: %.1f%% slower, plus twice the noise)\n", n,
                 cJSON_GetArraySize(br), max_regression * 100);
  else fprintf(out, "no regression beyond %.1f%% (%d workloads)\n", max_regression * 100, cJSON_GetArraySize(br));
  if (report) {
    cJSON_AddNumberToObject(report, "max_regression", max_regression);
    cJSON_AddNumberToObject(report, "regressions", n);
    cJSON_AddItemToObject(report, "rows", rows);
  } else {
    cJSON_Delete(rows);
  }
out:
  cJSON_Delete(cur);
  cJSON_Delete(base);
  return n;
}

static char *read_text(const tc_args_t *o, const char *path) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  if (tn_read_file(path, (size_t)64 << 20, &text, &len, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", o->name, err.msg);
    return NULL;
  }
  return text;
}

static int write_json(const tc_args_t *o, const char *path, const cJSON *doc);
static int write_junit(const tc_args_t *o, const char *suite, const cJSON *results, const cJSON *rows);

/* Compares the files at paths (the comparison's rows go into doc's
 * "comparison" when doc is given); returns the exit code. */
static int compare_files(const tc_args_t *o, const char *results, const char *baseline, double max_reg,
                         cJSON *doc) {
  char *a = read_text(o, results), *b = a ? read_text(o, baseline) : NULL;
  tn_err_t err = {0};
  cJSON *report = cJSON_CreateObject();
  cJSON_AddStringToObject(report, "results", results);
  cJSON_AddStringToObject(report, "baseline", baseline);
  int n = b ? tcd_bench_compare(a, b, max_reg, stdout, report, &err) : -1;
  if (b && n < 0) {
    fprintf(stderr, "tunectl bench: %s vs %s: %s\n", results, baseline, err.msg);
    cJSON_AddStringToObject(report, "error", err.msg);
  } else if (!b) {
    cJSON_AddStringToObject(report, "error", "cannot read the results or the baseline");
  }
  int rc = n == 0 ? 0 : 1;
  cJSON *cur = a ? cJSON_Parse(a) : NULL;
  if (o->junit && write_junit(o, cur ? jstr(cur, "suite") : results, cur ? cJSON_GetObjectItemCaseSensitive(cur, "results")
                              : NULL, cJSON_GetObjectItemCaseSensitive(report, "rows")) < 0)
    rc = 1;
  cJSON_Delete(cur);
  if (doc) cJSON_AddItemToObject(doc, "comparison", report);
  else if (o->json_out && write_json(o, o->json_out, report) < 0) rc = 1; /* --compare --json: the comparison */
  if (!doc) cJSON_Delete(report);
  free(a);
  free(b);
  return rc;
}

/* ---- JUnit XML (for CI systems) ------------------------------------------------------ */

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
      if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
    }
  }
}

/* Whether a workload's testcase fails: its result found no verified kernel
 * (whatever the comparison says: a baseline without one passes it), or its
 * comparison row is a regression or a missing workload (ok, new and noisy
 * pass).  res: the row's result (NULL when missing; r itself without rows). */
static bool case_failed(const cJSON *r, const cJSON *res, bool is_row) {
  if (res && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "found"))) return true;
  if (!is_row) return false;
  const char *st = jstr(r, "status");
  return strcmp(st, "regression") == 0 || strcmp(st, "missing") == 0 || strcmp(st, "no kernel") == 0;
}

/* One testcase per workload: failed as case_failed says. */
static int write_junit(const tc_args_t *o, const char *suite, const cJSON *results, const cJSON *rows) {
  tn_err_t err = {0};
  FILE *f = tn_open_out(o->junit, false, &err);
  if (!f) {
    fprintf(stderr, "tunectl bench: --junit: %s\n", err.msg);
    return -1;
  }
  const cJSON *list = rows ? rows : results, *r;
  int n = 0, failed = 0;
  cJSON_ArrayForEach(r, list) {
    n++;
    failed += case_failed(r, rows ? find_result(results, jstr(r, "hash")) : r, rows != NULL);
  }
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"tunectl bench ");
  xml_text(f, suite ? suite : "");
  fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"0\">\n", n, failed);
  cJSON_ArrayForEach(r, list) {
    const cJSON *res = rows ? find_result(results, jstr(r, "hash")) : r;
    fprintf(f, "  <testcase classname=\"bench\" name=\"");
    xml_text(f, jstr(r, "name"));
    fprintf(f, " %s\" time=\"%.3f\">\n", jstr(r, "hash"), res ? jnum(res, "seconds", 0) : 0.0);
    bool nokernel = res && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "found"));
    bool bad = case_failed(r, res, rows != NULL);
    char line[512];
    snprintf(line, sizeof line, "%.3f GFLOP/s (baseline %.3f, change %+.1f%%, allowed -%.1f%%); job %.0f, record %.0f",
             jnum(r, "gflops", 0), jnum(r, "baseline_gflops", 0), jnum(r, "change", 0) * 100,
             jnum(r, "allowed", 0) * 100, res ? jnum(res, "job", 0) : 0, res ? jnum(res, "record", 0) : 0);
    if (bad) {
      fprintf(f, "    <failure message=\"");
      xml_text(f, nokernel && *jstr(res, "error") ? jstr(res, "error") : rows ? jstr(r, "why") : "no verified kernel found");
      fprintf(f, "\">");
      xml_text(f, line);
      fprintf(f, "</failure>\n");
    } else {
      fprintf(f, "    <system-out>");
      xml_text(f, line);
      fprintf(f, "</system-out>\n");
    }
    fprintf(f, "  </testcase>\n");
  }
  fprintf(f, "</testsuite>\n</testsuites>\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "tunectl bench: cannot write %s: %s\n", o->junit, strerror(errno));
    return -1;
  }
  return 0;
}

/* ---- running a suite --------------------------------------------------------- */

/* One workload of the suite, loaded. */
typedef struct bench_item {
  const cJSON *spec;      /* {"file", "params", "name"?} */
  ir_workload_t *w;
  char hash[TN_ID_SIZE];
  const char *params;     /* the params as JSON text ("{}" when none) */
} bench_item_t;

/* Rounds of the re-measure of the best kernel (in-process): the noise. */
#define BENCH_ROUNDS 5

/* The outcome of tuning one workload. */
typedef struct bench_out {
  bool found;
  double gflops, median_secs, seconds;
  int64_t trials;
  int64_t failures[5]; /* build_error, run_error, timeout, wrong_result, too_slow */
  int64_t job, record;  /* 0: none (in-process without --db; a trace another job recorded) */
  double rounds[BENCH_ROUNDS]; /* the best kernel's median in each re-measure round */
  int nrounds;
  double noise;         /* half the rounds' spread over their median; 0: not measured */
  /* the first failed trial (0: none failed), its kind and error text */
  int64_t first_trial;
  const char *first_status, *first_error;
} bench_out_t;

static int load_item(const tc_args_t *o, const char *suite_dir, const cJSON *spec, bench_item_t *it) {
  const char *file = jstr(spec, "file");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(spec, "params"), *p;
  ir_param_set_t sets[64];
  int n = 0;
  tn_err_t err = {0};
  it->spec = spec;
  if (!*file) {
    fprintf(stderr, "tunectl bench: every suite entry needs a \"file\"\n");
    return -1;
  }
  cJSON_ArrayForEach(p, params) {
    if (!cJSON_IsNumber(p) || n == (int)TN_ARRAY_LEN(sets)) {
      fprintf(stderr, "tunectl bench: %s: params must be an object of at most 64 integers\n", file);
      return -1;
    }
    sets[n++] = (ir_param_set_t){.name = p->string, .value = (int64_t)p->valuedouble};
  }
  const char *path = file[0] == '/' ? file : tn_arena_printf(o->arena, "%s/%s", suite_dir, file);
  if (ir_workload_load(path, sets, n, &it->w, &err) < 0) {
    fprintf(stderr, "tunectl bench: %s\n", err.msg);
    return -1;
  }
  ir_func_hash(it->w->func, it->hash);
  char *text = params ? cJSON_PrintUnformatted(params) : NULL;
  it->params = tn_arena_strdup(o->arena, text ? text : "{}");
  free(text);
  return 0;
}

static void on_search_progress(const srch_progress_t *p, void *ctx) {
  const bench_item_t *it = ctx;
  if (isatty(2))
    fprintf(stderr, "\r\033[K  %s: %d/%d trials, best %.3f GFLOP/s", it->w->name, p->trials_done, p->trials_total,
            p->best_gflops);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Times the best kernel again in BENCH_ROUNDS separate runs (a worker each):
 * the figure is their median and the noise half their spread over it, so
 * that a comparison can tell a regression from a noisy machine. */
static void remeasure(const tn_target_t *t, const bench_item_t *it, const char *trace, bench_out_t *out) {
  cg_module_t *mod = NULL;
  tn_err_t err = {0};
  if (srch_kernel_lower(it->w->func, t, trace, NULL, &mod, &err) < 0) {
    fprintf(stderr, "tunectl bench: %s: the best trace does not lower again (%s): no noise estimate\n", it->w->name,
            err.msg);
    return;
  }
  ms_options_t mo = {.seed = 1};
  mo.run.flush_l2 = ms_flush_by_default(t->kind);
  for (int i = 0; i < BENCH_ROUNDS; i++) {
    ms_result_t r;
    if (ms_measure(it->w->func, t, &mod, 1, &mo, &r, &err) == 0 && r.status == MS_OK && r.median_secs > 0)
      out->rounds[out->nrounds++] = r.median_secs;
    ms_result_clear(&r);
  }
  cg_module_free(mod);
  if (out->nrounds < 3) return;
  double v[BENCH_ROUNDS];
  memcpy(v, out->rounds, sizeof v);
  qsort(v, (size_t)out->nrounds, sizeof *v, by_value);
  /* the load of a shared machine only slows a run: the fastest round is the
   * kernel's figure, and how far the median round is above it the noise */
  out->noise = TN_MIN((v[out->nrounds / 2] - v[0]) / v[0], 1.0);
  out->gflops *= out->median_secs / v[0];
  out->median_secs = v[0];
}

static int tune_local(const tc_args_t *o, const tn_target_t *t, bench_item_t *it, bench_out_t *out) {
  srch_opts_t so;
  srch_opts_default(&so);
  so.max_trials = (int)o->trials;
  so.seed = tc_seed(o);
  so.db_path = o->db;
  srch_task_t task = {.workload = it->w, .weight = 1};
  srch_callbacks_t cb = {.on_progress = on_search_progress, .ctx = it};
  srch_result_t r = {0};
  tn_err_t err = {0};
  if (srch_tune(&task, 1, t, &so, &cb, &r, &err) < 0) {
    fprintf(stderr, "%stunectl bench: %s: %s\n", isatty(2) ? "\n" : "", it->w->name, err.msg);
    return -1;
  }
  if (isatty(2)) fputc('\n', stderr);
  out->found = r.best[0].found;
  out->gflops = r.best[0].found ? r.best[0].gflops : 0;
  out->median_secs = r.best[0].found ? r.best[0].median_secs : 0;
  out->record = r.best[0].db_id;
  out->trials = r.trials_done;
  static const ms_status_t fails[5] = {MS_BUILD_ERROR, MS_RUN_ERROR, MS_TIMEOUT, MS_WRONG_RESULT, MS_TOO_SLOW};
  for (int i = 0; i < 5; i++) out->failures[i] = r.failures[fails[i]];
  const srch_failure_t *ff = &r.first_failure[0];
  if (ff->status != MS_OK) {
    out->first_trial = ff->trial;
    out->first_status = ms_status_name(ff->status);
    out->first_error = tn_arena_strdup(o->arena, ff->error ? ff->error : "");
  }
  if (out->found) remeasure(t, it, r.best[0].trace_json, out);
  srch_result_free(&r);
  return 0;
}

/* The fastest verified candidate this job measured itself (tune.trials):
 * the job's best may be an earlier job's record, which says nothing of this
 * run.  false when it measured none. */
static bool best_of_job(tuned_client_t *c, int64_t job, bench_out_t *out) {
  char params[64], *text = NULL;
  tuned_error_t err = {0};
  snprintf(params, sizeof params, "{\"job\": %lld}", (long long)job);
  if (tuned_call(c, "tune.trials", params, &text, &err) < 0) return false;
  cJSON *r = cJSON_Parse(text), *t;
  free(text);
  double best = 0;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "trials")) {
    double secs = jnum(t, "median_secs", 0);
    if (strcmp(jstr(t, "status"), "ok") != 0 || !(secs > 0) || (best > 0 && secs >= best)) continue;
    best = secs;
    out->gflops = jnum(t, "gflops", 0);
    out->record = (int64_t)jnum(t, "record", 0);
  }
  cJSON_Delete(r);
  out->median_secs = best;
  return best > 0;
}

static int tune_daemon(const tc_args_t *o, tuned_client_t *c, const char *target, bench_item_t *it,
                       bench_out_t *out) {
  tuned_submit_t s = tuned_submit_defaults();
  s.workload = it->w->source;
  s.name = it->w->name;
  s.params_json = it->params;
  s.target = target;
  s.trials = (int)o->trials;
  s.seed = (int64_t)tc_seed(o);
  s.baseline = 0; /* the results have no use for the unscheduled program */
  int64_t job;
  tuned_job_t j;
  tuned_error_t err = {0};
  if (tuned_submit(c, &s, &job, NULL, &err) < 0 || tuned_wait(c, job, 0, NULL, NULL, &j, &err) < 0) {
    fprintf(stderr, "tunectl bench: %s: %s\n", it->w->name, err.message);
    return -1;
  }
  if (j.state != TUNED_JOB_DONE) {
    fprintf(stderr, "tunectl bench: %s: job %lld ended %s%s%s\n", it->w->name, (long long)job, j.state_name,
            j.error[0] ? ": " : "", j.error);
    return -1;
  }
  out->job = job;
  out->found = best_of_job(c, job, out); /* this run's figure, not the database's best */
  out->trials = j.trials_done;
  out->failures[0] = j.build_errors, out->failures[1] = j.run_errors;
  out->failures[2] = j.timeouts, out->failures[3] = j.wrong_results, out->failures[4] = j.too_slow;
  if (j.first_failure_trial) {
    out->first_trial = j.first_failure_trial;
    out->first_status = tn_arena_strdup(o->arena, j.first_failure_status);
    out->first_error = tn_arena_strdup(o->arena, j.first_failure);
  }
  return 0;
}

static cJSON *result_json(const bench_item_t *it, const bench_out_t *r) {
  cJSON *j = cJSON_CreateObject();
  const char *name = jstr(it->spec, "name");
  cJSON_AddStringToObject(j, "name", *name ? name : it->w->name);
  cJSON_AddStringToObject(j, "file", jstr(it->spec, "file"));
  cJSON_AddItemToObject(j, "params", cJSON_Parse(it->params));
  cJSON_AddStringToObject(j, "hash", it->hash);
  cJSON_AddBoolToObject(j, "found", r->found);
  cJSON_AddNumberToObject(j, "gflops", r->gflops);
  cJSON_AddNumberToObject(j, "median_secs", r->median_secs);
  cJSON_AddNumberToObject(j, "trials", (double)r->trials);
  cJSON *f = cJSON_AddObjectToObject(j, "failures");
  static const char *const names[5] = {"build_error", "run_error", "timeout", "wrong_result", "too_slow"};
  for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(f, names[i], (double)r->failures[i]);
  if (r->first_trial) {
    cJSON *ff = cJSON_AddObjectToObject(j, "first_failure");
    cJSON_AddNumberToObject(ff, "trial", (double)r->first_trial);
    cJSON_AddStringToObject(ff, "status", r->first_status);
    cJSON_AddStringToObject(ff, "error", r->first_error);
  } else {
    cJSON_AddNullToObject(j, "first_failure");
  }
  if (r->found) {
    cJSON_AddNullToObject(j, "error");
  } else {
    char what[256];
    tc_no_kernel_text(what, sizeof what, r->trials, r->first_status, r->first_trial);
    cJSON_AddStringToObject(j, "error", what);
  }
  cJSON_AddNumberToObject(j, "seconds", r->seconds);
  if (r->job > 0) cJSON_AddNumberToObject(j, "job", (double)r->job);
  else cJSON_AddNullToObject(j, "job");
  if (r->record > 0) cJSON_AddNumberToObject(j, "record", (double)r->record);
  else cJSON_AddNullToObject(j, "record");
  cJSON *rounds = cJSON_AddArrayToObject(j, "remeasure_secs");
  for (int i = 0; i < r->nrounds; i++) cJSON_AddItemToArray(rounds, cJSON_CreateNumber(r->rounds[i]));
  cJSON_AddNumberToObject(j, "noise", r->noise);
  return j;
}

static int write_json(const tc_args_t *o, const char *path, const cJSON *doc) {
  tn_err_t err = {0};
  FILE *f = tn_open_out(path, false, &err);
  if (!f) {
    fprintf(stderr, "tunectl %s: %s\n", o->name, err.msg);
    return -1;
  }
  char *text = cJSON_Print(doc);
  int bad = fprintf(f, "%s\n", text) < 0;
  bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "tunectl %s: cannot write %s: %s\n", o->name, path, strerror(errno));
  free(text);
  return bad ? -1 : 0;
}

/* Loads and tunes every workload of the suite into doc's results; *nokernel
 * counts those that ended with no verified kernel. */
static int run_suite(const tc_args_t *o, const cJSON *suite, const char *dir, const char *target, cJSON *results,
                     int *nokernel) {
  tn_target_t t;
  tn_err_t err = {0};
  tuned_client_t *c = NULL;
  tuned_error_t terr = {0};
  if (o->daemon && tuned_connect(o->socket, &c, &terr) < 0) {
    fprintf(stderr, "tunectl bench: %s — start it with `tuned --target cpu`, or drop --daemon\n", terr.message);
    return -1;
  }
  if (!o->daemon && tn_target_lookup(target, NULL, &t, &err) < 0) {
    fprintf(stderr, "tunectl bench: %s\n", err.msg);
    return -1;
  }
  if (!o->daemon && !tc_can_measure("bench", &t)) return -1;
  const cJSON *spec;
  int rc = 0;
  cJSON_ArrayForEach(spec, cJSON_GetObjectItemCaseSensitive(suite, "workloads")) {
    bench_item_t it = {0};
    bench_out_t r = {0};
    double t0 = tn_now();
    rc = load_item(o, dir, spec, &it);
    if (rc == 0) fprintf(stderr, "bench: tuning %s (%s) with %lld trials\n", it.w->name, it.hash, (long long)o->trials);
    if (rc == 0) rc = c ? tune_daemon(o, c, target, &it, &r) : tune_local(o, &t, &it, &r);
    r.seconds = tn_now() - t0;
    if (rc == 0 && r.found)
      fprintf(stderr, "bench: %s: %.3f GFLOP/s (noise %.1f%%), %lld trials, %.1f s\n", it.w->name, r.gflops,
              r.noise * 100, (long long)r.trials, r.seconds);
    else if (rc == 0)
      tc_say_no_kernel(o->name, it.w->name, r.trials, r.first_status, r.first_trial, r.first_error);
    if (rc == 0) {
      *nokernel += !r.found;
      cJSON_AddItemToArray(results, result_json(&it, &r));
    }
    ir_workload_free(it.w);
    if (rc < 0) break;
  }
  tuned_close(c);
  return rc;
}

static int check_bench_opts(const tc_args_t *o, double *max_reg) {
  *max_reg = DEFAULT_MAX_REGRESSION;
  if (o->max_regression && parse_regression(o->max_regression, max_reg) < 0) {
    fprintf(stderr, "tunectl bench: --max-regression wants a percentage in [0, 100) such as 5%%, got '%s'\n",
            o->max_regression);
    return -1;
  }
  if (o->compare) {
    if (!o->baseline || o->npos) {
      fprintf(stderr, "tunectl bench: --compare OUT.json needs --baseline BASE.json and no SUITE\n");
      return -1;
    }
    return 0;
  }
  if (o->daemon && o->db) {
    fprintf(stderr, "tunectl bench: --db is for in-process runs; the daemon keeps its own database (drop one)\n");
    return -1;
  }
  const char *missing = !o->npos ? "SUITE.json" : o->trials < 0 ? "--trials N" : !o->json_out ? "--json OUT" : NULL;
  if (missing) {
    fprintf(stderr, "tunectl bench: missing %s (usage: tunectl bench SUITE.json --trials N --json OUT "
                    "[--baseline BASE.json] [--max-regression P] [--target T])\n", missing);
    return -1;
  }
  return 0;
}

int tcd_bench(tc_args_t *o) {
  double max_reg;
  if (check_bench_opts(o, &max_reg) < 0) return 2;
  if (o->compare) return compare_files(o, o->compare, o->baseline, max_reg, NULL);
  char *text = read_text(o, o->pos[0]);
  if (!text) return 1;
  cJSON *suite = cJSON_Parse(text);
  free(text);
  if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(suite, "workloads"))) {
    fprintf(stderr, "tunectl bench: %s is not a suite: expected {\"name\": ..., \"workloads\": [{\"file\": ..., "
                    "\"params\": {...}}, ...]}\n", o->pos[0]);
    cJSON_Delete(suite);
    return 1;
  }
  const char *slash = strrchr(o->pos[0], '/');
  const char *dir = slash ? tn_arena_strndup(o->arena, o->pos[0], (size_t)(slash - o->pos[0])) : ".";
  const char *target = o->target ? o->target : "cpu";
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "suite", *jstr(suite, "name") ? jstr(suite, "name") : o->pos[0]);
  cJSON_AddStringToObject(doc, "target", target);
  cJSON_AddNumberToObject(doc, "trials", (double)o->trials);
  cJSON_AddNumberToObject(doc, "seed", (double)tc_seed(o));
  cJSON_AddStringToObject(doc, "mode", o->daemon ? "daemon" : "in-process");
  cJSON_AddStringToObject(doc, "tuned_version", TUNED_VERSION);
  cJSON_AddNumberToObject(doc, "created", (double)time(NULL));
  cJSON *results = cJSON_AddArrayToObject(doc, "results");
  int rc = 0, nokernel = 0;
  if (run_suite(o, suite, dir, target, results, &nokernel) < 0) {
    rc = 1; /* what was tuned is still written, marked */
    cJSON_AddStringToObject(doc, "error", "the run stopped early (see the messages); these results are partial");
  }
  if (write_json(o, o->json_out, doc) < 0) rc = 1;
  else fprintf(stderr, "bench: wrote %d results to %s\n", cJSON_GetArraySize(results), o->json_out);
  if (rc == 0 && o->baseline) {
    rc = compare_files(o, o->json_out, o->baseline, max_reg, doc);
    if (write_json(o, o->json_out, doc) < 0) rc = 1; /* with its "comparison" */
  } else if (o->junit && write_junit(o, jstr(doc, "suite"), results, NULL) < 0) {
    rc = 1;
  }
  if (nokernel) {
    fprintf(stderr, "tunectl bench: %d of %d workloads ended with no verified kernel:", nokernel,
            cJSON_GetArraySize(results));
    const cJSON *r;
    cJSON_ArrayForEach(r, results)
      if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "found"))) fprintf(stderr, " %s", jstr(r, "name"));
    fprintf(stderr, " (the failure of the run; %s says why for each)\n", o->json_out);
    rc = 1;
  }
  cJSON_Delete(doc);
  cJSON_Delete(suite);
  return rc;
}
