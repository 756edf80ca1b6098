/* tunectl_daemon.c — tunectl's commands that talk to the tuned daemon over
 * its socket (through libtuned): submit, status, watch, cancel, jobs,
 * workloads, records, best, kernel, export, import, targets, ping, shutdown.
 * Their options are parsed from the command table in tunectl.c. */
#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/tuned.h"
#include "client/tunectl.h"
#include "codegen/codegen.h"
#include "search/search.h"

/* ---- talking to the daemon ------------------------------------------------ */

static tuned_client_t *connect_daemon(const tc_args_t *o) {
  tuned_client_t *c = NULL;
  tuned_error_t err = {0};
  if (tuned_connect(o->socket, &c, &err) < 0) {
    /* the hint fits the cause: no daemon there, or a socket we may not use */
    const char *hint = "";
    if (err.code == TUNED_E_CONNECT && (err.sys_errno == ENOENT || err.sys_errno == ECONNREFUSED))
      hint = " — start it with `tuned --target cpu`";
    else if (err.code == TUNED_E_CONNECT && (err.sys_errno == EACCES || err.sys_errno == EPERM))
      hint = " — the socket or its directory is not yours to use; start your own daemon, or pass --socket";
    fprintf(stderr, "tunectl %s: %s%s\n", o->name, err.message, hint);
    return NULL;
  }
  return c;
}

/* Prints a libtuned error: the daemon's message and its JSON-RPC code. */
static void print_error(const tc_args_t *o, const tuned_error_t *err) {
  if (err->code == TUNED_E_RPC) fprintf(stderr, "tunectl %s: %s (error %d)\n", o->name, err->message, err->rpc_code);
  else fprintf(stderr, "tunectl %s: %s\n", o->name, err->message);
}

/* Calls method with params (consumed); prints the error and returns NULL on
 * failure. */
static cJSON *rpc(const tc_args_t *o, tuned_client_t *c, const char *method, cJSON *params) {
  char *text = params ? cJSON_PrintUnformatted(params) : NULL;
  cJSON_Delete(params);
  char *result = NULL;
  tuned_error_t err = {0};
  int rc = tuned_call(c, method, text, &result, &err);
  free(text);
  if (rc < 0) {
    print_error(o, &err);
    return NULL;
  }
  cJSON *r = cJSON_Parse(result);
  free(result);
  return r;
}

/* Connects, calls one method and closes: what most query commands do. */
static cJSON *rpc_once(const tc_args_t *o, const char *method, cJSON *params) {
  tuned_client_t *c = connect_daemon(o);
  if (!c) {
    cJSON_Delete(params);
    return NULL;
  }
  cJSON *r = rpc(o, c, method, params);
  tuned_close(c);
  return r;
}

static void print_json(const cJSON *j) {
  char *s = cJSON_Print(j);
  puts(s);
  free(s);
}

static const char *jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *key, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static bool jbool(const cJSON *o, const char *key) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* A workload named on the command line: its hash, name and (files only) text
 * and parameter overrides. */
typedef struct workload_ref {
  char hash[TN_ID_SIZE]; /* or a prefix of one, as given */
  const char *name;  /* file stem; NULL for a bare hash */
  const char *text;  /* NULL for a bare hash */
  cJSON *params;     /* the --set overrides as {"M": 64}; NULL when none */
} workload_ref_t;

/* A workload hash or a prefix of one (TN_ID_SHOWN to TN_ID_HEX hex
 * digits, either case). */
static bool is_hash(const char *s) {
  size_t n = strlen(s);
  if (n < TN_ID_SHOWN || n > TN_ID_HEX) return false;
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i])) return false;
  return true;
}

static cJSON *sets_json(const tc_args_t *o) {
  if (!o->nsets) return NULL;
  cJSON *p = cJSON_CreateObject();
  for (int i = 0; i < o->nsets; i++) {
    cJSON_DeleteItemFromObjectCaseSensitive(p, o->sets[i].name);
    cJSON_AddNumberToObject(p, o->sets[i].name, (double)o->sets[i].value);
  }
  return p;
}

/* A workload name as the database keeps it (a file stem: letters, digits,
 * '_', '-', '.'), not a path. */
static bool is_name(const char *s) {
  if (!*s || strlen(s) > 47) return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return false;
  return true;
}

/* The shape of a listed workload, as "M=64, N=64" (its stored overrides). */
static const char *shape_text(const tc_args_t *o, const cJSON *e) {
  tn_buf_t b;
  tn_buf_init(&b);
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(e, "params"))
    if (cJSON_IsNumber(it)) tn_buf_printf(&b, "%s%s=%lld", b.len ? ", " : "", it->string, (long long)it->valuedouble);
  char *s = tn_arena_strdup(o->arena, b.len ? tn_buf_str(&b) : "its defaults");
  tn_buf_free(&b);
  return s;
}

/* NAME [--set K=V ...]: the workloads of that name in the daemon's database
 * whose shapes agree with the overrides (each one's source re-parsed with its
 * own overrides and then these must give its hash).  With `all` (records),
 * every match is returned there (a cJSON array of hashes); else exactly one
 * must match.  Prints the error and returns -1 on failure. */
static int resolve_name(const tc_args_t *o, const char *name, workload_ref_t *ref, cJSON **all) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "name", name);
  cJSON_AddNumberToObject(p, "limit", 100000);
  cJSON *r = rpc_once(o, "db.workloads", p);
  if (!r) return -1;
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(r, "workloads"), *e;
  cJSON *found = cJSON_CreateArray();
  tn_buf_t shapes;
  tn_buf_init(&shapes);
  const char *hash = NULL;
  /* kernel --fallback nearest: the first text of the name at the requested
   * shape, for the daemon to look for a nearby one */
  workload_ref_t near = {0};
  cJSON_ArrayForEach(e, list) {
    const char *h = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "hash")),
               *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "source"));
    if (!h || !src) continue;
    tn_buf_printf(&shapes, "\n  %.*s  %s", TN_ID_SHOWN, h, shape_text(o, e));
    ir_param_set_t sets[96];
    int n = 0;
    bool all_given = true; /* a fallback's shape is the command line's alone */
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(e, "params")) {
      bool given = false; /* the command line's value decides, once */
      for (int i = 0; i < o->nsets; i++) given |= !strcmp(o->sets[i].name, it->string);
      all_given &= given;
      if (cJSON_IsNumber(it) && !given && n < 32) sets[n++] = (ir_param_set_t){it->string, (int64_t)it->valuedouble};
    }
    for (int i = 0; i < o->nsets && n < (int)TN_ARRAY_LEN(sets); i++) sets[n++] = o->sets[i];
    ir_workload_t *w = NULL;
    tn_err_t err = {0};
    char hx[TN_ID_SIZE];
    bool parsed = ir_workload_parse(name, src, strlen(src), sets, n, &w, &err) == 0,
         match = parsed && (ir_func_hash(w->func, hx), strcmp(hx, h) == 0);
    ir_workload_free(w);
    if (parsed && !match && !near.text && o->fallback && all_given) {
      snprintf(near.hash, sizeof near.hash, "%s", hx);
      near.text = tn_arena_strdup(o->arena, src);
      near.params = cJSON_CreateObject();
      for (int i = 0; i < n; i++) cJSON_AddNumberToObject(near.params, sets[i].name, (double)sets[i].value);
    }
    if (!match) continue;
    cJSON_AddItemToArray(found, cJSON_CreateString(h));
    hash = h;
  }
  int nfound = cJSON_GetArraySize(found), rc = 0;
  if (nfound == 0 && near.text) {
    *ref = near;
    ref->name = tn_arena_strdup(o->arena, name);
    near.params = NULL;
  } else if (nfound == 0 || (nfound > 1 && !all)) {
    char *sets = NULL;
    cJSON *sj = sets_json(o);
    if (sj) sets = cJSON_PrintUnformatted(sj);
    cJSON_Delete(sj);
    if (!cJSON_GetArraySize((cJSON *)list))
      fprintf(stderr, "tunectl %s: %s is not a workload file, a hash, or the name of a workload in the database "
                      "(see `tunectl workloads`)\n", o->name, name);
    else if (nfound == 0)
      fprintf(stderr, "tunectl %s: no workload named %s with %s in the database; it has:%s\n", o->name, name,
              sets ? sets : "these parameters", tn_buf_str(&shapes));
    else
      fprintf(stderr, "tunectl %s: %d workloads named %s in the database; choose one with --set or its hash:%s\n",
              o->name, nfound, name, tn_buf_str(&shapes));
    free(sets);
    rc = -1;
  } else {
    snprintf(ref->hash, sizeof ref->hash, "%s", hash);
    ref->name = tn_arena_strdup(o->arena, name);
  }
  tn_buf_free(&shapes);
  cJSON_Delete(near.params);
  if (rc == 0 && all) *all = found;
  else cJSON_Delete(found);
  cJSON_Delete(r);
  return rc;
}

/* Resolves FILE|HASH|NAME; prints the error and returns -1 on failure. */
static int resolve_workload(const tc_args_t *o, const char *spec, workload_ref_t *ref) {
  memset(ref, 0, sizeof *ref);
  if (is_hash(spec) && access(spec, F_OK) != 0) {
    for (size_t i = 0; spec[i]; i++) ref->hash[i] = (char)tolower((unsigned char)spec[i]);
    if (o->nsets) {
      fprintf(stderr, "tunectl %s: --set needs a workload FILE; %s is a hash (its parameters are fixed)\n",
              o->name, spec);
      return -1;
    }
    return 0;
  }
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  if (access(spec, F_OK) != 0) {
    size_t n = strlen(spec);
    bool file_like = strchr(spec, '/') || (n > 3 && strcmp(spec + n - 3, ".tw") == 0);
    if (file_like) { /* a path the user meant: no name lookup hides the missing file */
      fprintf(stderr, "tunectl %s: %s: no such file (%s)\n", o->name, spec, strerror(errno));
      return -1;
    }
    if (is_name(spec)) return resolve_name(o, spec, ref, NULL);
    fprintf(stderr, "tunectl %s: %s is neither a workload file (%s) nor a workload hash (its first %d to %d hex "
                    "digits; see `tunectl workloads`)\n", o->name, spec, strerror(errno), TN_ID_SHOWN, TN_ID_HEX);
    return -1;
  }
  if (ir_workload_load(spec, o->sets, o->nsets, &w, &err) < 0) {
    fprintf(stderr, "tunectl %s: %s\n", o->name, err.msg);
    return -1;
  }
  ir_func_hash(w->func, ref->hash);
  ref->name = tn_arena_strdup(o->arena, w->name);
  ref->text = tn_arena_strdup(o->arena, w->source);
  ref->params = sets_json(o);
  ir_workload_free(w);
  return 0;
}

/* A job id from the command line; -1 after a message. */
static int64_t job_arg(const tc_args_t *o, const char *s) {
  int64_t id;
  return tc_parse_int(o, "JOB", s, 1, 0, &id) < 0 ? -1 : id;
}

static cJSON *job_params(int64_t job) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(p, "job", (double)job);
  return p;
}

/* ---- printing ------------------------------------------------------------ */

static void print_secs(FILE *out, double secs) {
  if (secs >= 1) fprintf(out, "%.3f s", secs);
  else if (secs >= 1e-3) fprintf(out, "%.3f ms", secs * 1e3);
  else fprintf(out, "%.2f us", secs * 1e6);
}

static void print_job_line(FILE *out, const tuned_job_t *j) {
  fprintf(out, "job %lld: %s, %lld/%lld trials", (long long)j->id, j->state_name, (long long)j->trials_done,
          (long long)j->trials);
  if (j->best_record) {
    fprintf(out, ", best ");
    print_secs(out, j->best_median_secs);
    fprintf(out, " (%.2f GFLOP/s, record %lld)", j->best_gflops, (long long)j->best_record);
  }
  if (j->error[0]) fprintf(out, ", error: %s", j->error);
  fputc('\n', out);
}

/* Progress display of submit --wait and watch, on stdout: a bar redrawn in
 * place on a terminal, one line per change otherwise; with --json the job
 * objects as the daemon sent them, one per line. */
typedef struct progress {
  bool tty, drawn;
  int64_t last_done;
  const char *last_state;
  double t0;
} progress_t;

static void draw_bar(const tuned_job_t *j, progress_t *p) {
  const int width = 30;
  int fill = j->trials > 0 ? (int)(width * j->trials_done / j->trials) : 0;
  if (fill > width) fill = width;
  printf("\r\033[Kjob %lld [%.*s%*s] %lld/%lld", (long long)j->id, fill, "##############################",
         width - fill, "", (long long)j->trials_done, (long long)j->trials);
  if (j->best_record) {
    printf("  best ");
    print_secs(stdout, j->best_median_secs);
    printf(" %.2f GFLOP/s", j->best_gflops);
  }
  printf("  %.0fs %s", tn_now() - p->t0, tuned_job_finished(j) ? "\n" : "");
  p->drawn = !tuned_job_finished(j);
}

static void on_progress(const tuned_job_t *j, void *ctx) {
  progress_t *p = ctx;
  if (p->tty) {
    draw_bar(j, p);
  } else if (j->trials_done != p->last_done || !p->last_state ||
             strcmp(p->last_state, tuned_job_state_name(j->state)) != 0) {
    p->last_done = j->trials_done;
    p->last_state = tuned_job_state_name(j->state);
    print_job_line(stdout, j);
  }
  fflush(stdout);
}

static void on_progress_json(const tuned_job_t *j, const char *json, void *ctx) {
  (void)j, (void)ctx;
  printf("%s\n", json);
  fflush(stdout);
}

/* Follows job until it ends; returns the exit code (0 when done with a
 * verified kernel; 1 when it failed, was cancelled or found no kernel). */
static int follow_job(const tc_args_t *o, tuned_client_t *c, int64_t job) {
  progress_t p = {.tty = isatty(1), .last_done = -1, .t0 = tn_now()};
  tuned_job_t final;
  tuned_error_t err = {0};
  int rc = o->json ? tuned_wait_json(c, job, 0, on_progress_json, NULL, &final, &err)
                   : tuned_wait(c, job, 0, on_progress, &p, &final, &err);
  if (p.drawn) {
    fputc('\n', stdout);
    fflush(stdout);
  }
  if (rc < 0) {
    print_error(o, &err);
    return 1;
  }
  if (p.tty) print_job_line(stdout, &final);
  if (final.state == TUNED_JOB_DONE && !final.best_record) {
    char what[160];
    snprintf(what, sizeof what, "job %lld (%s %s)", (long long)job, final.name[0] ? final.name : "workload",
             final.workload);
    tc_say_no_kernel(o->name, what, final.trials_done, final.first_failure_status, final.first_failure_trial,
                     final.first_failure);
  }
  return final.state == TUNED_JOB_DONE && final.best_record ? 0 : 1;
}

static void print_job(const cJSON *r) {
  tuned_job_t j;
  char *text = cJSON_PrintUnformatted(r);
  int rc = tuned_job_parse(text, &j, NULL);
  free(text);
  if (rc < 0) {
    print_json(r);
    return;
  }
  printf("job       %lld\n", (long long)j.id);
  printf("workload  %s (%s)\n", j.name[0] ? j.name : "?", j.workload);
  printf("target    %s\n", j.target);
  printf("state     %s\n", j.state_name);
  printf("trials    %lld of %lld", (long long)j.trials_done, (long long)j.trials);
  if (j.seconds > 0) printf(" (budget %.0f s)", j.seconds);
  printf("\nbest      ");
  if (j.best_record) {
    print_secs(stdout, j.best_median_secs);
    printf(", %.3f GFLOP/s (record %lld)\n", j.best_gflops, (long long)j.best_record);
  } else {
    printf("none yet\n");
  }
  if (j.baseline_median_secs > 0) {
    printf("baseline  unscheduled program ");
    print_secs(stdout, j.baseline_median_secs);
    printf(", %.3f GFLOP/s", j.baseline_gflops);
    if (j.best_record && j.best_median_secs > 0) printf(" (best: %.1fx faster)", j.baseline_median_secs / j.best_median_secs);
    printf("\n");
  }
  printf("failures  %lld build_error, %lld run_error, %lld timeout, %lld wrong_result, %lld too_slow\n",
         (long long)j.build_errors, (long long)j.run_errors, (long long)j.timeouts, (long long)j.wrong_results,
         (long long)j.too_slow);
  if (j.first_failure_trial) { /* the error text's lines under each other */
    printf("failed    first: trial %lld, %s", (long long)j.first_failure_trial, j.first_failure_status);
    for (const char *p = j.first_failure, *sep = ": "; *p; sep = "\n          ") {
      size_t len = strcspn(p, "\n");
      printf("%s%.*s", sep, (int)len, p);
      p += len + (p[len] == '\n');
    }
    printf("\n");
  }
  if (j.error[0]) printf("error     %s\n", j.error);
}

/* ---- commands -------------------------------------------------------------- */

int tcd_submit(tc_args_t *o) {
  workload_ref_t w;
  if (resolve_workload(o, o->pos[0], &w) < 0) return 1;
  if (!w.text) {
    fprintf(stderr, "tunectl submit: needs a workload FILE, not a hash\n");
    return 1;
  }
  char *params = w.params ? cJSON_PrintUnformatted(w.params) : NULL;
  cJSON_Delete(w.params);
  tuned_submit_t s = tuned_submit_defaults();
  s.workload = w.text;
  s.name = w.name;
  s.params_json = params;
  s.target = o->target;
  s.trials = o->trials > 0 ? (int)o->trials : 0;
  s.seconds = o->seconds;
  s.seed = o->seed;
  if (o->no_remeasure && o->remeasure > 0) {
    fprintf(stderr, "tunectl submit: --remeasure %lld and --no-remeasure contradict each other\n",
            (long long)o->remeasure);
    free(params);
    return 2;
  }
  s.remeasure = o->no_remeasure ? 0 : (int)o->remeasure;
  s.baseline = o->no_baseline ? 0 : -1;
  s.allow_tf32 = o->allow_tf32; /* with --target, T+tf32 already */
  tuned_client_t *c = connect_daemon(o);
  int rc = 1;
  int64_t job = 0;
  char hash[TUNED_HASH_SIZE] = "";
  tuned_error_t err = {0};
  if (!c) goto out;
  if (tuned_submit(c, &s, &job, hash, &err) < 0) {
    print_error(o, &err);
    goto out;
  }
  /* --wait --json: a stream of JSON lines, this first and then the job objects */
  if (o->json)
    printf("{\"job\": %lld, \"workload\": \"%s\"}\n", (long long)job, hash);
  else {
    printf("job %lld: %s (%s) on %s%s", (long long)job, w.name, hash, o->target ? o->target : "the daemon's target",
           o->allow_tf32 && !o->target ? " (+tf32)" : "");
    tuned_job_t j;
    if (o->trials <= 0 && tuned_job_status(c, job, &j, NULL) == 0) /* say what no --trials means */
      printf(", %lld trials (the daemon's default; --trials N to choose)", (long long)j.trials);
    printf("\n");
  }
  fflush(stdout);
  rc = o->wait ? follow_job(o, c, job) : 0;
out:
  free(params);
  tuned_close(c);
  return rc;
}

/* The width of a table's text column: its header's or its widest value's
 * (names are never cut short). */
static int col_width(const cJSON *rows, const char *key, const char *header) {
  int w = (int)strlen(header);
  const cJSON *r;
  cJSON_ArrayForEach(r, rows) w = TN_MAX(w, (int)strlen(jstr(r, key)));
  return w;
}

static bool job_active(const cJSON *j) {
  return strcmp(jstr(j, "state"), "queued") == 0 || strcmp(jstr(j, "state"), "running") == 0;
}

/* The jobs (active_only: the queued and running ones) as a table. */
static void print_jobs_table(const cJSON *jobs, bool active_only) {
  int nw = col_width(jobs, "name", "NAME"), tw = col_width(jobs, "target", "TARGET");
  printf("%5s  %-9s  %-*s  %-*s  %-*s  %11s  %10s\n", "JOB", "STATE", nw, "NAME", TN_ID_SHOWN, "WORKLOAD", tw,
         "TARGET", "TRIALS", "GFLOP/s");
  const cJSON *j;
  cJSON_ArrayForEach(j, jobs) {
    if (active_only && !job_active(j)) continue;
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(j, "best");
    printf("%5lld  %-9s  %-*s  %-*.*s  %-*s  %5.0f/%-5.0f", (long long)jnum(j, "job", 0), jstr(j, "state"), nw,
           jstr(j, "name"), TN_ID_SHOWN, TN_ID_SHOWN, jstr(j, "workload"), tw, jstr(j, "target"),
           jnum(j, "trials_done", 0), jnum(j, "trials", 0));
    if (cJSON_IsObject(best)) printf("  %10.3f", jnum(best, "gflops", 0));
    printf("\n");
  }
}

static int status_server(tc_args_t *o) {
  tuned_client_t *c = connect_daemon(o);
  if (!c) return 1;
  cJSON *info = rpc(o, c, "server.info", NULL);
  cJSON *lp = cJSON_CreateObject();
  cJSON_AddNumberToObject(lp, "limit", 1000);
  cJSON *jobs = info ? rpc(o, c, "tune.list", lp) : (cJSON_Delete(lp), NULL);
  tuned_close(c);
  if (!info || !jobs) {
    cJSON_Delete(info);
    return 1;
  }
  if (o->json) {
    cJSON *all = cJSON_CreateObject();
    cJSON_AddItemToObject(all, "server", info);
    cJSON_AddItemToObject(all, "jobs", cJSON_DetachItemFromObjectCaseSensitive(jobs, "jobs"));
    print_json(all);
    cJSON_Delete(all);
    cJSON_Delete(jobs);
    return 0;
  }
  printf("tuned     %s, pid %.0f, up %.0f s\n", jstr(info, "version"), jnum(info, "pid", 0), jnum(info, "uptime_s", 0));
  printf("target    %s\n", jstr(info, "target"));
  printf("database  %s\n", jstr(info, "db"));
  printf("socket    %s\n", jstr(info, "socket"));
  const cJSON *b;
  cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(info, "backends"))
    printf("backend   %-7s %s%s%s\n", jstr(b, "name"), jbool(b, "available") ? "available" : "unavailable",
           *jstr(b, "detail") ? ": " : "", jstr(b, "detail"));
  static const char *const states[] = {"queued", "running", "done", "cancelled", "failed"};
  int counts[5] = {0};
  const cJSON *all = cJSON_GetObjectItemCaseSensitive(jobs, "jobs"), *j;
  cJSON_ArrayForEach(j, all)
    for (int s = 0; s < 5; s++) counts[s] += strcmp(jstr(j, "state"), states[s]) == 0;
  printf("jobs      %d queued, %d running, %d done, %d cancelled, %d failed\n", counts[0], counts[1], counts[2],
         counts[3], counts[4]);
  if (counts[0] + counts[1]) {
    printf("\n");
    print_jobs_table(all, true);
  }
  cJSON_Delete(info);
  cJSON_Delete(jobs);
  return 0;
}

int tcd_status(tc_args_t *o) {
  if (!o->npos) return status_server(o);
  int64_t job = job_arg(o, o->pos[0]);
  if (job < 0) return 2;
  cJSON *r = rpc_once(o, "tune.status", job_params(job));
  if (!r) return 1;
  if (o->json) print_json(r);
  else print_job(r);
  cJSON_Delete(r);
  return 0;
}

int tcd_watch(tc_args_t *o) {
  int64_t job = job_arg(o, o->pos[0]);
  if (job < 0) return 2;
  tuned_client_t *c = connect_daemon(o);
  if (!c) return 1;
  int rc = follow_job(o, c, job);
  tuned_close(c);
  return rc;
}

int tcd_cancel(tc_args_t *o) {
  int64_t job = job_arg(o, o->pos[0]);
  if (job < 0) return 2;
  cJSON *r = rpc_once(o, "tune.cancel", job_params(job));
  if (!r) return 1;
  if (o->json) print_json(r);
  else printf("job %lld: %s (%.0f of %.0f trials measured)\n", (long long)job, jstr(r, "state"),
              jnum(r, "trials_done", 0), jnum(r, "trials", 0));
  cJSON_Delete(r);
  return 0;
}

int tcd_jobs(tc_args_t *o) {
  cJSON *p = cJSON_CreateObject();
  if (o->state) cJSON_AddStringToObject(p, "state", o->state);
  if (o->limit > 0) cJSON_AddNumberToObject(p, "limit", (double)o->limit);
  cJSON *r = rpc_once(o, "tune.list", p);
  if (!r) return 1;
  if (o->json) print_json(r);
  else print_jobs_table(cJSON_GetObjectItemCaseSensitive(r, "jobs"), false);
  cJSON_Delete(r);
  return 0;
}

/* FLOPs with a unit that keeps three significant digits: "14 kFLOP", "2.15 GFLOP". */
static const char *flops_text(double f, char *buf, size_t size) {
  static const char *const units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  int u = 0;
  while (f >= 1000 && u + 1 < (int)TN_ARRAY_LEN(units)) f /= 1000, u++;
  snprintf(buf, size, "%.3g %s", f, units[u]);
  return buf;
}

int tcd_workloads(tc_args_t *o) {
  cJSON *p = cJSON_CreateObject();
  if (o->limit > 0) cJSON_AddNumberToObject(p, "limit", (double)o->limit);
  cJSON *r = rpc_once(o, "db.workloads", p);
  if (!r) return 1;
  if (o->json) {
    print_json(r);
  } else {
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(r, "workloads"), *w;
    int nw = col_width(ws, "name", "NAME");
    printf("%-*s  %-*s  %8s  %12s\n", TN_ID_SHOWN, "HASH", nw, "NAME", "RECORDS", "WORK/RUN");
    cJSON_ArrayForEach(w, ws) {
      char work[32];
      printf("%-*.*s  %-*s  %8.0f  %12s\n", TN_ID_SHOWN, TN_ID_SHOWN, jstr(w, "hash"), nw, jstr(w, "name"),
             jnum(w, "records", 0), flops_text(jnum(w, "flops", 0), work, sizeof work));
    }
  }
  cJSON_Delete(r);
  return 0;
}

static void print_records(const cJSON *records) {
  int tw = TN_MAX(col_width(records, "target", "TARGET"), 16);
  printf("%7s  %-*s  %-*s  %-12s  %12s  %10s  %s\n", "RECORD", TN_ID_SHOWN, "WORKLOAD", tw, "TARGET", "STATUS",
         "MEDIAN(ms)", "GFLOP/s", "VERIFIED");
  const cJSON *r;
  cJSON_ArrayForEach(r, records) {
    printf("%7.0f  %-*.*s  %-*s  %-12s  ", jnum(r, "id", 0), TN_ID_SHOWN, TN_ID_SHOWN, jstr(r, "workload"), tw,
           jstr(r, "target"), jstr(r, "status"));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "median_secs");
    if (cJSON_IsNumber(m)) printf("%12.6f  %10.3f", m->valuedouble * 1e3, jnum(r, "gflops", 0));
    else printf("%12s  %10s", "-", "-");
    printf("  %s\n", jbool(r, "verified") ? "yes" : "no");
  }
}

/* The query commands on records: db.records and db.best. */
static int query_records(tc_args_t *o, const char *method) {
  workload_ref_t w = {0};
  /* records NAME: every workload of that name (each shape's records, in turn) */
  cJSON *hashes = NULL;
  if (o->npos && strcmp(method, "db.records") == 0 && access(o->pos[0], F_OK) != 0 && !is_hash(o->pos[0]) &&
      is_name(o->pos[0])) {
    if (resolve_name(o, o->pos[0], &w, &hashes) < 0) return 1;
    if (cJSON_GetArraySize(hashes) > 1) {
      int rc = 0;
      const cJSON *h;
      cJSON *all = cJSON_CreateArray();
      cJSON_ArrayForEach(h, hashes) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "workload", h->valuestring);
        if (o->target) cJSON_AddStringToObject(p, "target", o->target);
        if (o->status) cJSON_AddStringToObject(p, "status", o->status);
        if (o->limit > 0) cJSON_AddNumberToObject(p, "limit", (double)o->limit);
        cJSON *r = rpc_once(o, method, p);
        if (!r) {
          rc = 1;
          break;
        }
        const cJSON *rec;
        cJSON_ArrayForEach(rec, cJSON_GetObjectItemCaseSensitive(r, "records"))
          cJSON_AddItemToArray(all, cJSON_Duplicate(rec, true));
        cJSON_Delete(r);
      }
      if (rc == 0) {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddItemToObject(out, "records", all);
        if (o->json) print_json(out);
        else print_records(all);
        cJSON_Delete(out);
      } else {
        cJSON_Delete(all);
      }
      cJSON_Delete(hashes);
      return rc;
    }
    cJSON_Delete(hashes);
  } else if (o->npos && resolve_workload(o, o->pos[0], &w) < 0) {
    return 1;
  }
  cJSON_Delete(w.params);
  cJSON *p = cJSON_CreateObject();
  if (o->npos) cJSON_AddStringToObject(p, "workload", w.hash);
  if (o->target) cJSON_AddStringToObject(p, "target", o->target);
  if (o->status) cJSON_AddStringToObject(p, "status", o->status);
  if (o->limit > 0) cJSON_AddNumberToObject(p, "limit", (double)o->limit);
  if (o->k > 0) cJSON_AddNumberToObject(p, "k", (double)o->k);
  cJSON *r = rpc_once(o, method, p);
  if (!r) return 1;
  const cJSON *records = cJSON_GetObjectItemCaseSensitive(r, "records");
  int rc = 0;
  if (o->json) {
    print_json(r);
  } else if (strcmp(method, "db.best") == 0 && cJSON_GetArraySize(records) == 0) {
    fprintf(stderr, "tunectl best: no verified record of %s%s%s on %s yet (submit it with `tunectl submit`)\n",
            w.name ? w.name : w.hash, w.name ? " " : "", w.name ? w.hash : "",
            o->target ? o->target : "the daemon's target");
    rc = 1;
  } else {
    print_records(records);
  }
  cJSON_Delete(r);
  return rc;
}

int tcd_records(tc_args_t *o) {
  return query_records(o, "db.records");
}

int tcd_best(tc_args_t *o) {
  return query_records(o, "db.best");
}

/* ---- kernel --emit ------------------------------------------------------- */

/* The C type of a parameter's elements in the kernel's language. */
static const char *c_type(const char *dtype, bool cuda) {
  static const struct { const char *dtype, *c, *cuda; } t[] = {
      {"bool", "uint8_t", "unsigned char"}, {"int32", "int32_t", "int"}, {"int64", "int64_t", "long long"},
      {"float16", "uint16_t", "__half"},   {"float32", "float", "float"}, {"float64", "double", "double"}};
  for (size_t i = 0; i < TN_ARRAY_LEN(t); i++)
    if (strcmp(dtype, t[i].dtype) == 0) return cuda ? t[i].cuda : t[i].c;
  return "void";
}

/* A C identifier made of s (non-identifier characters become '_'). */
static char *ident(tn_arena_t *a, const char *s, bool upper) {
  char *id = tn_arena_printf(a, "%s%s", isdigit((unsigned char)s[0]) || !s[0] ? "_" : "", s);
  for (char *p = id; *p; p++) {
    if (!isalnum((unsigned char)*p)) *p = '_';
    if (upper) *p = (char)toupper((unsigned char)*p);
  }
  return id;
}

static void print_header_comment(FILE *out, const tuned_kernel_t *k, const char *name, const char *hash) {
  fprintf(out, "/* %s.h — the tuned kernel of workload %s (%s) for target %s: record %lld,\n"
               " * median ", name, name, hash, k->target, (long long)k->record);
  print_secs(out, k->median_secs);
  fprintf(out, ", %.3f GFLOP/s.  Written by `tunectl kernel --emit header`.\n"
               " * Include it in one translation unit.  Arguments (device pointers for GPUs):\n", k->gflops);
  for (int i = 0; i < k->nparams; i++) {
    const tuned_param_t *p = &k->params[i];
    fprintf(out, " *   %-10s %s[", p->name, p->dtype);
    for (int d = 0; d < p->ndim; d++) fprintf(out, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
    fprintf(out, "] %s%s\n", p->role,
            strcmp(p->role, "workspace") == 0 ? " (scratch the caller allocates; contents do not matter)" : "");
    if (p->packs)
      fprintf(out, " *              %s packed once, outside the kernel: allocate %lld elements, fill them with\n"
                   " *              %s(%s, %s) once per weight, then pass %s to every call\n",
              p->packs, (long long)p->elements, p->pack_function, p->packs, p->name, p->name);
  }
  fprintf(out, " */\n");
}

static void print_launch_params(FILE *out, const tuned_kernel_t *k, bool cuda) {
  for (int i = 0; i < k->nparams; i++)
    fprintf(out, "%s%s *%s", i ? ", " : "", c_type(k->params[i].dtype, cuda), k->params[i].name);
}

static void print_args(FILE *out, const tuned_kernel_t *k) {
  for (int i = 0; i < k->nparams; i++) fprintf(out, "%s%s", i ? ", " : "", k->params[i].name);
}

static void header_cuda(FILE *out, const tuned_kernel_t *k, const char *fn) {
  fprintf(out, "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n\n%s\n", k->source);
  fprintf(out, "/* Launches the tuned kernels in order on stream with their tuned grid,\n"
               " * block and shared memory; returns the first launch error. */\n"
               "inline cudaError_t tuned_launch_%s(", fn);
  print_launch_params(out, k, true);
  fprintf(out, ", cudaStream_t stream = 0) {\n  cudaError_t err;\n");
  for (int i = 0; i < k->nkernels; i++) {
    const tuned_launch_t *l = &k->kernels[i];
    fprintf(out, "  %s<<<dim3(%lld, %lld, %lld), dim3(%lld, %lld, %lld), %lld, stream>>>(", l->name,
            (long long)l->grid[0], (long long)l->grid[1], (long long)l->grid[2], (long long)l->block[0],
            (long long)l->block[1], (long long)l->block[2], (long long)l->shared_bytes);
    print_args(out, k);
    fprintf(out, ");\n  if ((err = cudaGetLastError()) != cudaSuccess) return err;\n");
  }
  fprintf(out, "  return cudaSuccess;\n}\n");
}

static void header_c(FILE *out, const tuned_kernel_t *k, const char *fn) {
  fprintf(out, "%s\n/* Runs the tuned kernel; returns 0, or -1 when a temporary buffer could\n"
               " * not be allocated. */\nstatic inline int tuned_launch_%s(", k->source, fn);
  print_launch_params(out, k, false);
  fprintf(out, ") {\n  return %s(", k->kernels[0].name);
  print_args(out, k);
  fprintf(out, ");\n}\n");
}

static void header_opencl(FILE *out, const tuned_kernel_t *k, const char *fn, const char *guard) {
  fprintf(out, "#include <stddef.h>\n\n/* OpenCL C source: build it with clBuildProgram. */\n"
               "static const char tuned_%s_source[] =\n  \"", fn);
  for (const char *p = k->source; *p; p++) {
    if (*p == '\n') fprintf(out, "\\n\"\n  \"");
    else if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else fputc(*p, out);
  }
  fprintf(out, "\";\n\n/* Enqueue these kernels in order, each with the arguments listed at the top,\n"
               " * global size = grid * block and local size = block. */\n"
               "#define TUNED_%s_NKERNELS %d\n", guard, k->nkernels);
  fprintf(out, "static const char *const tuned_%s_kernels[] = {", fn);
  for (int i = 0; i < k->nkernels; i++) fprintf(out, "%s\"%s\"", i ? ", " : "", k->kernels[i].name);
  fprintf(out, "};\nstatic const size_t tuned_%s_global[][3] = {", fn);
  for (int i = 0; i < k->nkernels; i++) {
    const tuned_launch_t *l = &k->kernels[i];
    fprintf(out, "%s{%lld, %lld, %lld}", i ? ", " : "", (long long)(l->grid[0] * l->block[0]),
            (long long)(l->grid[1] * l->block[1]), (long long)(l->grid[2] * l->block[2]));
  }
  fprintf(out, "};\nstatic const size_t tuned_%s_local[][3] = {", fn);
  for (int i = 0; i < k->nkernels; i++)
    fprintf(out, "%s{%lld, %lld, %lld}", i ? ", " : "", (long long)k->kernels[i].block[0],
            (long long)k->kernels[i].block[1], (long long)k->kernels[i].block[2]);
  fprintf(out, "};\n");
}

static void write_header(FILE *out, const tuned_kernel_t *k, const char *name, const char *hash, tn_arena_t *a) {
  const char *fn = ident(a, name, false), *guard = ident(a, name, true);
  print_header_comment(out, k, name, hash);
  fprintf(out, "#ifndef TUNED_KERNEL_%s_%s_H\n#define TUNED_KERNEL_%s_%s_H\n\n", guard, hash, guard, hash);
  if (strcmp(k->language, "cuda") == 0) header_cuda(out, k, fn);
  else if (strcmp(k->language, "opencl") == 0) header_opencl(out, k, fn, guard);
  else header_c(out, k, fn);
  fprintf(out, "\n#endif\n");
}

static FILE *open_out(const tc_args_t *o, bool binary) {
  if (!o->out || strcmp(o->out, "-") == 0) {
    if (binary && isatty(1)) {
      fprintf(stderr, "tunectl %s: will not write binary data to a terminal; use -o FILE or redirect stdout\n",
              o->name);
      return NULL;
    }
    return stdout;
  }
  tn_err_t err = {0};
  FILE *f = tn_open_out(o->out, binary, &err);
  if (!f) fprintf(stderr, "tunectl %s: %s\n", o->name, err.msg);
  return f;
}

static int close_out(const tc_args_t *o, FILE *f) {
  int bad = ferror(f);
  if (f != stdout) bad |= fclose(f) != 0;
  else bad |= fflush(f) != 0;
  if (bad) fprintf(stderr, "tunectl %s: writing %s failed: %s\n", o->name, o->out ? o->out : "stdout", strerror(errno));
  return bad ? 1 : 0;
}

static const char *const emit_kinds[] = {"source", "cuda", "ptx", "cubin", "header", "json"};

/* Writes kernel k (result JSON r) as o->emit to out. */
static int emit_kernel(tc_args_t *o, FILE *out, const tuned_kernel_t *k, const cJSON *r, const char *name,
                       const char *hash) {
  bool cuda = strcmp(k->language, "cuda") == 0;
  const char *e = o->emit;
  if ((strcmp(e, "cuda") == 0 || strcmp(e, "ptx") == 0 || strcmp(e, "cubin") == 0) && !cuda) {
    fprintf(stderr, "tunectl kernel: the best kernel on %s is %s code; --emit %s needs a CUDA target "
                    "(--emit source or header work for every target)\n", k->target, k->language, e);
    return 1;
  }
  if (strcmp(e, "ptx") == 0 && !k->ptx) {
    fprintf(stderr, "tunectl kernel: the daemon sent no PTX for record %lld\n", (long long)k->record);
    return 1;
  }
  if (strcmp(e, "cubin") == 0 && !k->cubin) {
    fprintf(stderr, "tunectl kernel: the daemon sent no CUBIN for record %lld (no CUDA driver/ptxas where it "
                    "runs?); --emit ptx gives the PTX\n", (long long)k->record);
    return 1;
  }
  if (strcmp(e, "source") == 0 || strcmp(e, "cuda") == 0) fputs(k->source, out);
  else if (strcmp(e, "ptx") == 0) fputs(k->ptx, out);
  else if (strcmp(e, "cubin") == 0) fwrite(k->cubin, 1, k->cubin_size, out);
  else if (strcmp(e, "header") == 0) write_header(out, k, name, hash, o->arena);
  else {
    char *s = cJSON_Print(r);
    fprintf(out, "%s\n", s);
    free(s);
  }
  return 0;
}

/* kernel.get's answer from the daemon (NULL after a message). */
static cJSON *kernel_from_daemon(const tc_args_t *o, workload_ref_t *w, bool fallback) {
  cJSON *p = cJSON_CreateObject();
  if (fallback && w->text) {
    /* the text: the daemon may not know this shape */
    cJSON_AddStringToObject(p, "workload_text", w->text);
    cJSON_AddStringToObject(p, "name", w->name);
    if (w->params) cJSON_AddItemToObject(p, "params", w->params);
    w->params = NULL;
  } else {
    cJSON_AddStringToObject(p, "workload", w->hash);
  }
  cJSON_Delete(w->params);
  w->params = NULL;
  if (fallback) cJSON_AddStringToObject(p, "fallback", "nearest");
  if (o->target) cJSON_AddStringToObject(p, "target", o->target);
  return rpc_once(o, "kernel.get", p);
}

/* kernel.get's answer served from the database file --db in this process
 * (srch_kernel_from_db, the daemon's own code), or NULL after a message. */
static cJSON *kernel_from_db(const tc_args_t *o, workload_ref_t *w) {
  cJSON_Delete(w->params);
  w->params = NULL;
  tn_target_t t;
  tn_err_t err = {0};
  db_t *db = NULL;
  cJSON *r = NULL;
  if (tn_target_lookup(o->target ? o->target : "cpu", NULL, &t, &err) < 0 ||
      db_open_readonly(o->db, &db, &err) < 0 || srch_kernel_from_db(db, w->hash, NULL, &t, NULL, &r, &err) < 0)
    fprintf(stderr, "tunectl kernel: %s\n", err.msg);
  db_close(db);
  return r;
}

int tcd_kernel(tc_args_t *o) {
  size_t kind = 0;
  while (kind < TN_ARRAY_LEN(emit_kinds) && strcmp(o->emit, emit_kinds[kind]) != 0) kind++;
  if (kind == TN_ARRAY_LEN(emit_kinds)) {
    fprintf(stderr, "tunectl kernel: unknown --emit '%s' (cuda, ptx, cubin, header, json or source)\n", o->emit);
    return 2;
  }
  bool fallback = o->fallback && strcmp(o->fallback, "none") != 0;
  if (fallback && strcmp(o->fallback, "nearest") != 0) {
    fprintf(stderr, "tunectl kernel: unknown --fallback '%s' (none or nearest)\n", o->fallback);
    return 2;
  }
  if (fallback && o->db) {
    fprintf(stderr, "tunectl kernel: --fallback nearest needs the daemon (it measures in a worker); not with --db\n");
    return 2;
  }
  if (o->db && !is_hash(o->pos[0]) && access(o->pos[0], F_OK) != 0) {
    fprintf(stderr, "tunectl kernel: with --db, name the workload by its FILE or HASH (%s is neither)\n", o->pos[0]);
    return 1;
  }
  workload_ref_t w;
  if (resolve_workload(o, o->pos[0], &w) < 0) return 1;
  cJSON *r = o->db ? kernel_from_db(o, &w) : kernel_from_daemon(o, &w, fallback);
  if (!r) return 1;
  tuned_kernel_t *k = NULL;
  tuned_error_t err = {0};
  char *text = cJSON_PrintUnformatted(r);
  int rc = 1;
  const cJSON *fb = cJSON_GetObjectItemCaseSensitive(r, "fallback");
  if (fb) {
    char *params = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(fb, "params"));
    fprintf(stderr, "tunectl kernel: no record for this shape; fallback: record %lld of workload %s %s, verified "
                    "on this shape and timed at ", (long long)jnum(fb, "record", 0), jstr(fb, "workload"),
            params ? params : "{}");
    print_secs(stderr, jnum(r, "median_secs", 0));
    fprintf(stderr, " (");
    print_secs(stderr, jnum(fb, "median_secs", 0));
    fprintf(stderr, " at its own shape)\n");
    if (jnum(fb, "unscheduled_median_secs", 0) > 0 && jnum(r, "median_secs", 0) > jnum(fb, "unscheduled_median_secs", 0)) {
      fprintf(stderr, "tunectl kernel: warning: the fallback is slower than this shape's unscheduled program (");
      print_secs(stderr, jnum(fb, "unscheduled_median_secs", 0));
      fprintf(stderr, "): tune this shape\n");
    }
    free(params);
  }
  const cJSON *un = cJSON_GetObjectItemCaseSensitive(r, "unscheduled");
  if (un) {
    fprintf(stderr, "tunectl kernel: the unscheduled program (");
    print_secs(stderr, jnum(un, "median_secs", 0));
    fprintf(stderr, ") is served: the best record, %lld (", (long long)jnum(un, "best_record", 0));
    print_secs(stderr, jnum(un, "best_median_secs", 0));
    fprintf(stderr, "), is slower\n");
  }
  if (tuned_kernel_parse(text, &k, &err) < 0) {
    fprintf(stderr, "tunectl kernel: %s\n", err.message);
  } else {
    FILE *out = open_out(o, strcmp(o->emit, "cubin") == 0);
    if (out) {
      const char *name = w.name ? w.name : k->name[0] ? k->name : k->entry[0] ? k->entry : "kernel";
      rc = emit_kernel(o, out, k, r, name, k->workload[0] ? k->workload : w.hash); /* the whole hash */
      rc |= close_out(o, out);
    }
  }
  free(text);
  tuned_kernel_free(k);
  cJSON_Delete(r);
  return rc;
}

/* ---- export / import -------------------------------------------------------- */

int tcd_export(tc_args_t *o) {
  workload_ref_t w = {0};
  if (o->npos && resolve_workload(o, o->pos[0], &w) < 0) return 1;
  cJSON_Delete(w.params);
  cJSON *p = cJSON_CreateObject();
  if (o->npos) cJSON_AddStringToObject(p, "workload", w.hash);
  if (o->target) cJSON_AddStringToObject(p, "target", o->target);
  cJSON *r = rpc_once(o, "db.export", p);
  if (!r) return 1;
  const char *jsonl = jstr(r, "jsonl");
  FILE *out = open_out(o, false);
  int rc = 1;
  if (out) {
    fputs(jsonl, out);
    rc = close_out(o, out);
    if (rc == 0 && out != stdout) {
      size_t n = 0;
      for (const char *s = jsonl; *s; s++) n += *s == '\n';
      fprintf(stderr, "exported %zu records to %s\n", n, o->out);
    }
  }
  cJSON_Delete(r);
  return rc;
}

/* Bytes s takes once escaped as a JSON string. */
static size_t escaped_len(const char *s, size_t n) {
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    len += ch == '"' || ch == '\\' ? 2 : ch < 0x20 ? 6 : 1;
  }
  return len;
}

/* The daemon refuses lines over 1 MiB: imports go in chunks of whole lines
 * that stay below this once escaped. */
#define IMPORT_CHUNK ((size_t)900 << 10)

static int import_chunk(tc_args_t *o, tuned_client_t *c, const char *text, size_t n, double *inserted,
                        double *dups) {
  cJSON *p = cJSON_CreateObject();
  char *chunk = tn_arena_strndup(o->arena, text, n);
  cJSON_AddStringToObject(p, "jsonl", chunk);
  cJSON *r = rpc(o, c, "db.import", p);
  if (!r) return -1;
  *inserted += jnum(r, "inserted", 0);
  *dups += jnum(r, "duplicates", 0);
  cJSON_Delete(r);
  return 0;
}

int tcd_import(tc_args_t *o) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  if (tn_read_file(o->pos[0], (size_t)1 << 30, &text, &len, &err) < 0) {
    fprintf(stderr, "tunectl import: %s\n", err.msg);
    return 1;
  }
  tuned_client_t *c = connect_daemon(o);
  double inserted = 0, dups = 0;
  int rc = c ? 0 : 1;
  size_t start = 0, esc = 0, line = 1;
  for (size_t i = 0; rc == 0 && i < len; line++) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) + 1 : len, l = escaped_len(text + i, end - i);
    if (l + 64 > IMPORT_CHUNK) {
      fprintf(stderr, "tunectl import: %s:%zu: the line is %zu bytes; the daemon takes at most 1 MiB per message\n",
              o->pos[0], line, end - i);
      rc = 1;
    } else if (esc + l + 64 > IMPORT_CHUNK) {
      rc = import_chunk(o, c, text + start, i - start, &inserted, &dups) < 0;
      start = i, esc = 0;
      continue;
    }
    esc += l;
    i = end;
  }
  if (rc == 0 && len > start) rc = import_chunk(o, c, text + start, len - start, &inserted, &dups) < 0;
  if (rc == 0) {
    if (o->json) printf("{\"inserted\": %.0f, \"duplicates\": %.0f}\n", inserted, dups);
    else printf("imported %.0f records from %s (%.0f already there)\n", inserted, o->pos[0], dups);
  }
  tuned_close(c);
  free(text);
  return rc;
}

/* ---- server ------------------------------------------------------------------ */

int tcd_targets(tc_args_t *o) {
  cJSON *r = rpc_once(o, "target.list", NULL);
  if (!r) return 1;
  if (o->json) {
    print_json(r);
  } else {
    const cJSON *t, *ts = cJSON_GetObjectItemCaseSensitive(r, "targets");
    int wn = col_width(ts, "name", "TARGET"), wk = col_width(ts, "kind", "KIND"), wa = col_width(ts, "arch", "ARCH");
    printf("%-*s  %-*s  %-*s  %-6s  %s\n", wn, "TARGET", wk, "KIND", wa, "ARCH", "USABLE", "DEVICE / REASON");
    cJSON_ArrayForEach(t, ts) {
      bool usable = jbool(t, "usable");
      printf("%-*s  %-*s  %-*s  %-6s  %s\n", wn, jstr(t, "name"), wk, jstr(t, "kind"), wa, jstr(t, "arch"),
             usable ? "yes" : "no", usable || !*jstr(t, "reason") ? jstr(t, "device") : jstr(t, "reason"));
    }
  }
  cJSON_Delete(r);
  return 0;
}

int tcd_ping(tc_args_t *o) {
  if (o->seconds && !o->wait) {
    fprintf(stderr, "tunectl ping: --seconds goes with --wait\n");
    return 2;
  }
  double deadline = tn_now() + (o->seconds > 0 ? o->seconds : 30);
  tuned_client_t *c = NULL;
  while (o->wait && tuned_connect(o->socket, &c, NULL) < 0 && tn_now() < deadline) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!c) c = connect_daemon(o); /* the last try says why */
  if (!c) return 1;
  double t0 = tn_now();
  cJSON *r = rpc(o, c, "server.info", NULL);
  double ms = (tn_now() - t0) * 1e3;
  if (r && o->json) {
    print_json(r);
  } else if (r) {
    printf("tuned %s answers on %s in %.2f ms: target %s, pid %.0f, up %.0f s, %.0f jobs running\n",
           jstr(r, "version"), tuned_socket_path(c), ms, jstr(r, "target"), jnum(r, "pid", 0), jnum(r, "uptime_s", 0),
           jnum(r, "jobs_running", 0));
  }
  tuned_close(c);
  cJSON_Delete(r);
  return r ? 0 : 1;
}

int tcd_shutdown(tc_args_t *o) {
  cJSON *r = rpc_once(o, "server.shutdown", NULL);
  if (!r) return 1;
  if (o->json) print_json(r);
  else printf("tuned is shutting down\n");
  cJSON_Delete(r);
  return 0;
}
