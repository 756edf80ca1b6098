/* tunectl_plot.c — `tunectl plot`: pictures are drawn by matplotlib through
 * the Python package's tuned.plot (python/tuned/plot.py), which fetches the
 * daemon's data through libtuned.  This file checks the command line, finds
 * a Python that has matplotlib and runs the module in it (exec). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/tunectl.h"
#include "tuned_config.h"

extern char **environ;

/* Run by the Python found: imports the package (saying what to install when
 * it cannot) and hands it the arguments. */
static const char boot[] =
    "import sys\n"
    "try:\n"
    "    from tuned import plot\n"
    "except ImportError as e:\n"
    "    sys.exit(f'tunectl plot: cannot import the tuned Python package ({e}): install it (pip install ./python in '\n"
    "             'the source tree), or run this tunectl from its build directory')\n"
    "sys.exit(plot.main(sys.argv[1:], prog='tunectl plot'))\n";

/* Whether `py` runs and imports matplotlib (its output is dropped). */
static bool has_matplotlib(const char *py) {
  char *argv[] = {(char *)py, "-c", "import matplotlib", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, py, &fa, NULL, argv, environ), status = 0;
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* $TUNED_PYTHON, else the first of python3 and /usr/bin/python3 with
 * matplotlib; NULL after a message. */
static const char *find_python(void) {
  const char *env = getenv("TUNED_PYTHON");
  if (env && *env) {
    if (has_matplotlib(env)) return env;
    fprintf(stderr, "tunectl plot: $TUNED_PYTHON (%s) does not run, or has no matplotlib: install it there "
            "(pip install matplotlib)\n", env);
    return NULL;
  }
  static const char *const tries[] = {"python3", "/usr/bin/python3"};
  for (size_t i = 0; i < TN_ARRAY_LEN(tries); i++)
    if (has_matplotlib(tries[i])) return tries[i];
  fprintf(stderr, "tunectl plot: no Python 3 with matplotlib (tried python3 and /usr/bin/python3): install it "
          "(Debian: apt-get install python3-matplotlib; else: pip install matplotlib), or name a Python that has it "
          "in $TUNED_PYTHON\n");
  return NULL;
}

/* Puts dir on PYTHONPATH (first) when dir/tuned/plot.py is there. */
static bool add_pythonpath(const char *dir) {
  char path[PATH_MAX + 32];
  struct stat st;
  snprintf(path, sizeof path, "%s/tuned/plot.py", dir);
  if (stat(path, &st) != 0) return false;
  const char *old = getenv("PYTHONPATH");
  char *v = NULL;
  if (asprintf(&v, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "") >= 0) setenv("PYTHONPATH", v, 1);
  free(v);
  return true;
}

/* The package that belongs to this tunectl: a build directory's tunectl
 * imports the source tree's python/ and loads the libtuned beside it; a
 * wheel's (site-packages/tuned/_native/bin/tunectl) the package around it;
 * an installed one the package installed with it (on python3's path). */
static void set_paths(void) {
  char exe[PATH_MAX], dir[PATH_MAX + 32];
  struct stat st;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0; /* exe is its directory now */
  size_t nb = strlen(TUNED_BUILD_ROOT);
  if (strncmp(exe, TUNED_BUILD_ROOT, nb) == 0 && (exe[nb] == '/' || !exe[nb])) {
    snprintf(dir, sizeof dir, "%s/python", TUNED_SOURCE_ROOT);
    add_pythonpath(dir);
    snprintf(dir, sizeof dir, "%s/libtuned.so", exe);
    if (!getenv("TUNED_LIB") && stat(dir, &st) == 0) setenv("TUNED_LIB", dir, 1);
    return;
  }
  snprintf(dir, sizeof dir, "%s/../../..", exe); /* site-packages of a wheel's tuned/_native/bin */
  add_pythonpath(dir);
}

/* The module's arguments for the picture the options ask for; -1 after a message. */
static int module_args(tc_args_t *o, const char **argv, int *n) {
  int k = *n;
  bool job = o->npos == 1;
  /* --report is a picture of its own, the library lines of JOB's, or the
   * measured ceilings of --roofline's */
  if (job + o->roofline + (o->report && !job && !o->roofline) != 1) {
    fprintf(stderr, "tunectl plot: %s (usage: tunectl plot %s)\n",
            job || o->report ? "JOB or --report, and --roofline, are different pictures: give one"
                             : "nothing to plot: give a JOB, --report BENCH.json or --roofline",
            "JOB | --report BENCH.json | --roofline, with -o FILE.png|FILE.svg");
    return -1;
  }
  if ((o->target || o->peaks) && !o->roofline) {
    fprintf(stderr, "tunectl plot: %s applies to --roofline only\n", o->target ? "--target" : "--peaks");
    return -1;
  }
  if (o->peaks && o->report) {
    fprintf(stderr, "tunectl plot: --peaks and --report are two sources of the roofline's ceilings: give one\n");
    return -1;
  }
  int64_t id;
  if (job && tc_parse_int(o, "JOB", o->pos[0], 1, INT64_C(1) << 53, &id) < 0) return -1;
  if (job) {
    argv[k++] = "job", argv[k++] = o->pos[0];
    if (o->report) argv[k++] = "--report", argv[k++] = o->report;
  } else if (!o->roofline) {
    argv[k++] = "report", argv[k++] = o->report;
  } else {
    argv[k++] = "roofline";
    if (o->target) argv[k++] = "--target", argv[k++] = o->target;
    if (o->peaks) argv[k++] = "--peaks", argv[k++] = o->peaks;
    if (o->report) argv[k++] = "--report", argv[k++] = o->report;
  }
  argv[k++] = "-o", argv[k++] = o->out;
  if (o->socket && (job || o->roofline)) argv[k++] = "--socket", argv[k++] = o->socket;
  *n = k;
  return 0;
}

int tcd_plot(tc_args_t *o) {
  const char *argv[24];
  int n = 3;
  if (module_args(o, argv, &n) < 0) return 2;
  const char *py = find_python();
  if (!py) return 1;
  argv[0] = py, argv[1] = "-c", argv[2] = boot, argv[n] = NULL;
  set_paths();
  fflush(stdout);
  execvp(py, (char *const *)argv);
  fprintf(stderr, "tunectl plot: cannot run %s: %s\n", py, strerror(errno));
  return 1;
}
