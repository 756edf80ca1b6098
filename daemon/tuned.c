/* tuned.c — the tuning daemon's entry point: command line, backend report
 * (--backends), target choice and refusal, default paths, then the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/td.h"
#include "db/sqlite_fault.h"
#include "measure/measure.h"
#include "tuned_config.h"

#if TUNED_HAVE_XGBOOST
#include <xgboost/c_api.h>
#endif

static void usage(FILE *out) {
  fprintf(out,
          "usage: tuned [--target NAME|auto] [--db PATH|URL] [--name NAME] [--socket PATH] [--jobs N]\n"
          "             [--log-level debug|info|warn|error] [--configs DIR] [--stop-timeout S]\n"
          "             [--idle-timeout S] [--tune-nice N] [--deadline-grace S] [--lease S]\n"
          "             [--cc gcc|clang|auto]\n"
          "             [--foreground]\n"
          "       tuned --backends | --version | --help\n"
          "\n"
          "tuned is the auto-tuning daemon: it serves JSON-RPC 2.0 (one message per line) on a\n"
          "unix socket, runs tuning jobs on worker threads and keeps every measured record in a\n"
          "SQLite database.  Talk to it with tunectl (see docs/protocol.md).\n"
          "\n"
          "  --target NAME   default target of jobs: a target file's name (cpu, opencl/pocl-cpu,\n"
          "                  nvidia/tesla-t4, nvidia/a100, nvidia/h100, nvidia/h200, ...), or auto\n"
          "                  (default: auto = this machine's GPU if tuned knows it, else cpu).\n"
          "                  A target this machine cannot measure for is refused, with the reason.\n"
          "  --db PATH       database (default $XDG_DATA_HOME/tuned/tuned.db, else\n"
          "                  ~/.local/share/tuned/tuned.db)\n"
          "  --db postgresql://[USER[:PASSWORD]@][HOST][:PORT]/DBNAME[?PARAM=VALUE...]\n"
          "                  a PostgreSQL database that several daemons share (docs/scale-out.md);\n"
          "                  the database must exist, tuned creates its tables\n"
          "  --name NAME     this daemon on a shared database: it resumes only the jobs it\n"
          "                  started under this name (default HOSTNAME:SOCKET); one daemon per name\n"
          "  --socket PATH   socket (default $TUNED_SOCKET, else $XDG_RUNTIME_DIR/tuned/tuned.sock,\n"
          "                  else /tmp/tuned-$UID/tuned.sock; directory 0700, socket 0600)\n"
          "  --lease S       on a shared database, how long a daemon holds a job's batch without\n"
          "                  renewing it (default 30; renewed every S/3): a daemon that dies loses\n"
          "                  its batch this long after, and another daemon of the target takes it\n"
          "  --jobs N        tuning jobs running at once (default 1; the others wait queued); they\n"
          "                  share one build pool and take turns timing candidates on each device\n"
          "  --log-level L   least severe log lines written to stderr (default info)\n"
          "  --configs DIR   the directory of target files NAME.json (default: $TUNED_CONFIG_DIR,\n"
          "                  else the source tree's configs/ for a tuned in the build tree, else\n"
          "                  ../share/tuned/configs next to the executable, else the installed one)\n"
          "  --stop-timeout S  on SIGTERM, wait at most S seconds (default 10) for running\n"
          "                  jobs to stop (they abandon the running candidate or reference\n"
          "                  evaluation within a second), then kill the workers and compilers and\n"
          "                  exit anyway (status 1); either way the jobs resume at the next start\n"
          "  --deadline-grace S  every job's deadline is its `seconds` budget (24 h without one)\n"
          "                  plus S seconds (default 60): the re-measure, the unscheduled program\n"
          "                  and a long reference evaluation must fit in it.  A job past its\n"
          "                  deadline is stopped and failed (its records are kept)\n"
          "  --idle-timeout S  close a connection that sent nothing for S seconds and waits for\n"
          "                  nothing (no answer pending, no job watched); default 600, 0 = never\n"
          "  --tune-nice N   the tuning work (job threads, the build pool, compilers, the\n"
          "                  measure worker) runs N nice levels below the threads that answer\n"
          "                  clients, so queries stay quick while a job tunes (0 to 19; default 10)\n"
          "  --cc C          the compiler of cpu and cuda-host jobs: gcc, clang or auto (the\n"
          "                  system's cc / c++); default: each target file's \"cc\"\n"
          "  --foreground    accepted for compatibility: tuned always runs in the foreground\n"
          "  --backends      probe cpu, opencl and cuda (and the XGBoost cost model) and exit\n"
          "  --version       print the version\n"
          "\n"
          "SIGTERM or SIGINT (or the server.shutdown method) stop it cleanly: running jobs\n"
          "commit what they measured, abandon the candidate or reference evaluation under way\n"
          "and are resumed at the next start.  tune.cancel stops a job within a second in any\n"
          "state.\n"
          "\n"
          "Measurement (every job): each candidate is built (at most 30 s; a compiler past\n"
          "that is killed), then run in a worker process: a checked run compared with the\n"
          "reference evaluator, one untimed warm-up run, and timed repeats until they add\n"
          "up to 100 ms, at least 3 and at most 1000 of them; the median is recorded.  The\n"
          "run has 30 s (past it: timeout).  A candidate whose checked run is over 10x the\n"
          "fastest so far (and 10 ms) is timed by that run alone; one still running at 100x\n"
          "the fastest (and 2 s) is stopped and recorded as too_slow, not as a timeout.  On\n"
          "CUDA the L2 cache is flushed before every timed repeat, never on the CPU.  Jobs\n"
          "time one candidate at a time per device.\n"
          "\n"
          "environment:\n"
          "  TUNED_SOCKET       the socket when --socket is not given (tunectl reads it too)\n"
          "  TUNED_CONFIG_DIR   the target files when --configs is not given (tunectl reads it too)\n"
          "  TUNED_CUDA_DRIVER  path of the CUDA driver library to dlopen (default libcuda.so.1)\n"
          "  TUNED_CC, TUNED_CXX  a compiler command for cpu (C) / cuda-host (C++) builds instead\n"
          "                     of the target's \"cc\" or --cc, e.g. \"ccache clang\"\n");
}

static int print_backends(void) {
  int usable = 0;
  for (int b = 0; b < MS_BACKEND__COUNT; b++) {
    ms_backend_status_t st;
    ms_backend_probe((ms_backend_t)b, &st);
    printf("%-8s %-12s %s\n", ms_backend_name((ms_backend_t)b),
           st.available ? "available" : "unavailable", st.detail);
    usable += st.available;
  }
#if TUNED_HAVE_XGBOOST
  int major, minor, patch;
  XGBoostVersion(&major, &minor, &patch);
  printf("%-8s %-12s XGBoost %d.%d.%d cost model\n", "xgboost", "available", major, minor, patch);
#else
  printf("%-8s %-12s built without XGBoost (install libxgboost-dev and rebuild); a random model "
         "will be used\n", "xgboost", "unavailable");
#endif
  return usable ? 0 : 1;
}

typedef struct args {
  const char *target, *db, *name, *socket, *log_level, *configs, *cc;
  int jobs, tune_nice;
  double stop_timeout, idle_timeout, deadline_grace, lease;
} args_t;

/* "--name value" or "--name=value"; advances *i past what it used. */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != 0) return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "tuned: %s needs a value (see tuned --help)\n", name);
    exit(2);
  }
  return argv[++*i];
}

static int parse_args(int argc, char **argv, args_t *a) {
  *a = (args_t){.target = "auto", .log_level = "info", .jobs = 1, .stop_timeout = 10, .idle_timeout = 600,
              .tune_nice = 10, .deadline_grace = 60, .lease = 30};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if ((v = opt_value(argc, argv, &i, "--target"))) a->target = v;
    else if ((v = opt_value(argc, argv, &i, "--db"))) a->db = v;
    else if ((v = opt_value(argc, argv, &i, "--socket"))) a->socket = v;
    else if ((v = opt_value(argc, argv, &i, "--name"))) a->name = v;
    else if ((v = opt_value(argc, argv, &i, "--log-level"))) a->log_level = v;
    else if ((v = opt_value(argc, argv, &i, "--configs"))) a->configs = v;
    else if ((v = opt_value(argc, argv, &i, "--cc"))) {
      if (strcmp(v, "gcc") != 0 && strcmp(v, "clang") != 0 && strcmp(v, "auto") != 0) {
        fprintf(stderr, "tuned: --cc must be gcc, clang or auto, got '%s'\n", v);
        return 2;
      }
      a->cc = v;
    }
    else if ((v = opt_value(argc, argv, &i, "--jobs"))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || n < 1 || n > 64) {
        fprintf(stderr, "tuned: --jobs must be an integer from 1 to 64, got '%s'\n", v);
        return 2;
      }
      a->jobs = (int)n;
    } else if ((v = opt_value(argc, argv, &i, "--tune-nice"))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || !*v || n < 0 || n > 19) {
        fprintf(stderr, "tuned: --tune-nice must be an integer from 0 to 19, got '%s'\n", v);
        return 2;
      }
      a->tune_nice = (int)n;
    } else if ((v = opt_value(argc, argv, &i, "--idle-timeout"))) {
      char *end;
      a->idle_timeout = strtod(v, &end);
      if (*end || !(a->idle_timeout >= 0 && a->idle_timeout <= 86400 * 7)) {
        fprintf(stderr, "tuned: --idle-timeout must be a number of seconds from 0 (never) to 604800, got '%s'\n",
                v);
        return 2;
      }
    } else if ((v = opt_value(argc, argv, &i, "--stop-timeout"))) {
      char *end;
      a->stop_timeout = strtod(v, &end);
      if (*end || !(a->stop_timeout > 0 && a->stop_timeout <= 86400)) {
        fprintf(stderr, "tuned: --stop-timeout must be a number of seconds above 0 and at most 86400, got '%s'\n", v);
        return 2;
      }
    } else if ((v = opt_value(argc, argv, &i, "--deadline-grace"))) {
      char *end;
      a->deadline_grace = strtod(v, &end);
      if (*end || !(a->deadline_grace >= 0 && a->deadline_grace <= 86400)) {
        fprintf(stderr, "tuned: --deadline-grace must be a number of seconds from 0 to 86400, got '%s'\n", v);
        return 2;
      }
    } else if ((v = opt_value(argc, argv, &i, "--lease"))) {
      char *end;
      a->lease = strtod(v, &end);
      if (*end || !(a->lease >= 1 && a->lease <= 3600)) {
        fprintf(stderr, "tuned: --lease must be a number of seconds from 1 to 3600, got '%s'\n", v);
        return 2;
      }
    } else if (strcmp(argv[i], "--foreground") != 0) {
      fprintf(stderr, "tuned: unknown option '%s' (see tuned --help)\n", argv[i]);
      return 2;
    }
  }
  if (td_log_level_parse(a->log_level) < 0) {
    fprintf(stderr, "tuned: --log-level must be debug, info, warn or error, got '%s'\n", a->log_level);
    return 2;
  }
  return 0;
}


/* Resolves --target (auto, refusal) into cfg->target; exit status or 0. */
static int choose_target(const args_t *a, const td_machine_t *m, td_config_t *cfg) {
  char name[64], why[512] = "";
  if (strcmp(a->target, "auto") == 0) {
    td_target_auto(m, name, sizeof name, why, sizeof why);
    td_log(TD_INFO, "target auto", "target=%s why=%s", name, td_q(why));
  } else {
    snprintf(name, sizeof name, "%s", a->target);
  }
  td_target_info_t ti;
  tn_err_t err = {0};
  if (td_target_check(m, name, &ti, &err) != 0) {
    fprintf(stderr, "tuned: %s\n", err.msg);
    return 2;
  }
  if (!ti.usable) {
    fprintf(stderr, "tuned: target %s refused: %s\n", ti.t.name, ti.reason);
    return 1;
  }
  snprintf(cfg->target, sizeof cfg->target, "%s", ti.t.name);
  return 0;
}

static int fit_url(const char *url, char *buf, size_t size, tn_err_t *err) {
  if (strlen(url) >= size) return tn_err_set(err, TN_EINVAL, "the --db URL is over %zu bytes", size - 1);
  snprintf(buf, size, "%s", url);
  return 0;
}

/* Job threads and clients see the same file whatever the working directory. */
static int absolute(const char *path, char *buf, size_t size, tn_err_t *err) {
  char cwd[PATH_MAX];
  int n = path[0] == '/' || !getcwd(cwd, sizeof cwd) ? snprintf(buf, size, "%s", path)
                                                     : snprintf(buf, size, "%s/%s", cwd, path);
  if (n < 0 || (size_t)n >= size)
    return tn_err_set(err, TN_EINVAL, "path %s is too long (at most %zu bytes; unix sockets allow 107)", path,
                      size - 1);
  return 0;
}

static int fill_paths(const args_t *a, td_config_t *cfg) {
  tn_err_t err = {0};
  int rc = 0;
  const char *sock = a->socket ? a->socket : getenv("TUNED_SOCKET"); /* tunectl reads it too */
  if (sock && *sock) {
    if (strlen(sock) >= sizeof cfg->socket_path) {
      fprintf(stderr, "tuned: socket path %s is %zu bytes; unix sockets allow at most %zu\n", sock, strlen(sock),
              sizeof cfg->socket_path - 1);
      return 2;
    }
    rc = absolute(sock, cfg->socket_path, sizeof cfg->socket_path, &err);
  } else {
    rc = td_default_socket(cfg->socket_path, sizeof cfg->socket_path, &err);
  }
  if (!rc && a->db && db_is_url(a->db)) rc = fit_url(a->db, cfg->db_path, sizeof cfg->db_path, &err);
  else if (!rc && a->db) rc = absolute(a->db, cfg->db_path, sizeof cfg->db_path, &err);
  else if (!rc) rc = td_default_db(cfg->db_path, sizeof cfg->db_path, &err);
  if (rc) fprintf(stderr, "tuned: %s\n", err.msg);
  if (rc) return 1;
  db_redact(cfg->db_path, cfg->db_shown, sizeof cfg->db_shown);
  char host[200] = "localhost";
  gethostname(host, sizeof host - 1);
  int n = a->name ? snprintf(cfg->name, sizeof cfg->name, "%s", a->name)
                  : snprintf(cfg->name, sizeof cfg->name, "%s:%s", host, cfg->socket_path);
  if (n <= 0 || (size_t)n >= sizeof cfg->name) {
    fprintf(stderr, "tuned: --name must be 1 to %zu bytes\n", sizeof cfg->name - 1);
    return 2;
  }
  return 0;
}

/* PoCL reads its cache directory once per process: give the long-running
 * daemon one that outlives every tuning run (beside an SQLite file; the
 * build pool makes one for a daemon on PostgreSQL).  Set before the
 * backends' probe, whose build process runs PoCL too: under the systemd
 * unit's read-only home, PoCL's default ~/.cache/pocl would fail it ("no
 * device") and take OpenCL away. */
static void set_pocl_cache(const td_config_t *cfg) {
  if (getenv("POCL_CACHE_DIR") || db_is_url(cfg->db_path)) return;
  char dir[PATH_MAX + 16], base[PATH_MAX];
  td_dirname(cfg->db_path, base, sizeof base);
  snprintf(dir, sizeof dir, "%s/pocl-cache", base);
  tn_err_t err;
  if (tn_mkdirs(dir, 0700, &err) == 0) setenv("POCL_CACHE_DIR", dir, 0);
}

/* Fault-injection tests only: $TUNED_TEST_SQLITE_FAULT makes SQLite fail
 * the chosen I/O call (db/sqlite_fault.h), $TUNED_TEST_SQLITE_FAULT_COUNTS
 * gets how many such calls the process made. */
static int test_faults(void) {
  const char *spec = getenv("TUNED_TEST_SQLITE_FAULT");
  tn_err_t err = {0};
  if (!spec || !*spec) return 0;
  if (db_fault_vfs_install(spec, getenv("TUNED_TEST_SQLITE_FAULT_COUNTS"), &err) == 0) return 0;
  fprintf(stderr, "tuned: TUNED_TEST_SQLITE_FAULT: %s\n", err.msg);
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("tuned %s\n", TUNED_VERSION);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--backends") == 0) return print_backends();
  args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc || (rc = test_faults())) return rc;
  td_log_set_level((td_log_level_t)td_log_level_parse(a.log_level));
  char configs[PATH_MAX];
  tn_err_t err = {0};
  if (!a.configs && tn_config_dir(configs, sizeof configs, &err) < 0) {
    fprintf(stderr, "tuned: %s\n", err.msg);
    return 2;
  }
  td_config_t cfg = {.max_jobs = a.jobs, .stop_timeout = a.stop_timeout, .idle_timeout = a.idle_timeout,
                     .tune_nice = a.tune_nice, .deadline_grace = a.deadline_grace, .lease_s = a.lease,
                     .config_dir = a.configs ? a.configs : configs};
  td_log(TD_INFO, "target files", "dir=%s", td_q(cfg.config_dir));
  if ((rc = fill_paths(&a, &cfg))) return rc;
  set_pocl_cache(&cfg);
  td_machine_t m;
  td_machine_probe(&m, cfg.config_dir);
  m.cc = a.cc;
  if ((rc = choose_target(&a, &m, &cfg))) return rc;
  return td_server_run(&cfg, &m);
}
