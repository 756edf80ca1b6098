/* util.c — small system helpers of the measure module: temp directories,
 * files, the POCL cache setting, finding and spawning tuned-worker, running a
 * compiler with a timeout, signal names and dtype conversion. */
#include <dirent.h>
#include <libgen.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

extern char **environ;

/* ---- temporary directories ----------------------------------------------
 * Each holds ".owner", a file that the process which made the directory
 * keeps open under an exclusive flock for the directory's life.  A SIGKILL
 * releases the lock and removes nothing; the next temp directory made on
 * this machine by any process of the same user removes every tuned-* dir
 * in $TMPDIR whose .owner it can lock (its maker is gone).  The lock file is
 * locked before it gets its name, so a sweep never sees it unlocked. */

typedef struct held_dir {
  char *path;
  int fd;
} held_dir_t;

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static held_dir_t *held;
static int nheld, held_cap;

static const char *temp_root(void) {
  const char *tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

int ms_temp_dirs_sweep(void) {
  const char *tmp = temp_root();
  DIR *d = opendir(tmp);
  if (!d) return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "tuned-", 6) != 0) continue;
    char dir[MS_PATH_MAX], lock[MS_PATH_MAX + 8];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name) >= sizeof dir) continue;
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    snprintf(lock, sizeof lock, "%s/.owner", dir);
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue; /* not ours to judge: no owner file */
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ms_remove_tree(dir);
      removed++;
    }
    close(fd);
  }
  closedir(d);
  return removed;
}

int ms_temp_dir_new(const char *stem, char *out, size_t size, tn_err_t *err) {
  const char *tmp = temp_root();
  ms_temp_dirs_sweep();
  if ((size_t)snprintf(out, size, "%s/%s-XXXXXX", tmp, stem) >= size)
    return tn_err_set(err, TN_EINVAL, "temp dir path under %s is too long", tmp);
  if (!mkdtemp(out)) return tn_err_set(err, TN_EIO, "cannot create a temp dir %s: %s", out, strerror(errno));
  char part[MS_PATH_MAX + 16], lock[MS_PATH_MAX + 16];
  snprintf(part, sizeof part, "%s/.owner.new", out);
  snprintf(lock, sizeof lock, "%s/.owner", out);
  int fd = open(part, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || rename(part, lock) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    ms_remove_tree(out);
    return tn_err_set(err, TN_EIO, "cannot mark the temp dir %s as ours: %s", out, strerror(e));
  }
  pthread_mutex_lock(&held_mu);
  if (nheld == held_cap) held = tn_xrealloc(held, sizeof *held * (size_t)(held_cap = held_cap ? 2 * held_cap : 8));
  held[nheld++] = (held_dir_t){tn_xstrdup(out), fd};
  pthread_mutex_unlock(&held_mu);
  return TN_OK;
}

void ms_temp_dir_remove(const char *path) {
  ms_remove_tree(path);
  pthread_mutex_lock(&held_mu);
  for (int i = 0; i < nheld; i++)
    if (strcmp(held[i].path, path) == 0) {
      close(held[i].fd);
      free(held[i].path);
      held[i] = held[--nheld];
      break;
    }
  pthread_mutex_unlock(&held_mu);
}

int ms_mkdirs(const char *path, tn_err_t *err) { return tn_mkdirs(path, 0755, err); }

void ms_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < sizeof sub) ms_remove_tree(sub);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

int ms_write_file(const char *path, const void *data, size_t n, tn_err_t *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tn_err_set(err, TN_EIO, "cannot create %s: %s", path, strerror(errno));
  const char *p = data;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      int e = errno;
      close(fd);
      return tn_err_set(err, TN_EIO, "cannot write %s: %s", path, strerror(e));
    }
    p += k, n -= (size_t)k;
  }
  if (close(fd) < 0) return tn_err_set(err, TN_EIO, "cannot write %s: %s", path, strerror(errno));
  return TN_OK;
}

static pthread_mutex_t pocl_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether dir (created 0700 where missing, parents included) is a real
 * directory of ours that nobody else can write to or read. */
static bool private_dir(const char *dir) {
  if (tn_mkdirs(dir, 0700, NULL) < 0) return false;
  struct stat st;
  return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0;
}

/* PoCL reads POCL_CACHE_DIR once per process, so the cache must outlive
 * every build pool and runner of the process: a cache in a pool's run
 * directory (removed with the pool) failed every later OpenCL build.  The
 * per-user cache $XDG_CACHE_HOME/tuned/pocl (else ~/.cache/tuned/pocl; a
 * kernel's cache entry is keyed by its source and device), or where that is
 * not a private directory of ours, `fallback`, which the caller keeps. */
const char *ms_pocl_cache_init(const char *fallback) {
  pthread_mutex_lock(&pocl_lock);
  const char *cur = getenv("POCL_CACHE_DIR");
  if (!cur || !*cur) {
    char dir[MS_PATH_MAX];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = -1;
    if (xdg && xdg[0] == '/') n = snprintf(dir, sizeof dir, "%s/tuned/pocl", xdg);
    else if (home && home[0] == '/') n = snprintf(dir, sizeof dir, "%s/.cache/tuned/pocl", home);
    if (n < 0 || n >= (int)sizeof dir || !private_dir(dir)) {
      ms_mkdirs(fallback, NULL);
      snprintf(dir, sizeof dir, "%s", fallback);
    }
    setenv("POCL_CACHE_DIR", dir, 1);
    cur = getenv("POCL_CACHE_DIR");
  }
  pthread_mutex_unlock(&pocl_lock);
  return cur;
}

void ms_signal_text(int sig, char *buf, size_t size) {
  const char *abbrev = sigabbrev_np(sig);
  const char *desc = strsignal(sig);
  if (abbrev) snprintf(buf, size, "SIG%s (%s)", abbrev, desc ? desc : "?");
  else snprintf(buf, size, "signal %d", sig);
}

/* Appends what is readable on fd to log (up to max bytes kept); returns
 * false at EOF. */
static bool drain(int fd, tn_buf_t *log, size_t max) {
  char buf[4096];
  ssize_t k = read(fd, buf, sizeof buf);
  if (k < 0) return errno == EINTR || errno == EAGAIN;
  if (k == 0) return false;
  if (log->len < max) tn_buf_putn(log, buf, TN_MIN((size_t)k, max - log->len));
  return true;
}

char **ms_environ_with(const char *name, const char *value, char *entry, size_t size) {
  snprintf(entry, size, "%s=%s", name, value);
  size_t len = strlen(name), n = 0, k = 0;
  while (environ[n]) n++;
  char **env = tn_xcalloc(n + 2, sizeof *env);
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], name, len) != 0 || environ[i][len] != '=') env[k++] = environ[i];
  env[k] = entry;
  return env;
}

/* ---- finding the worker ---------------------------------------------------- */

int ms_worker_path(char *buf, size_t size, tn_err_t *err) {
  const char *env = getenv("TUNED_WORKER");
  if (env && *env) {
    if (access(env, X_OK) == 0 && (size_t)snprintf(buf, size, "%s", env) < size) return TN_OK;
    return tn_err_set(err, TN_EIO, "TUNED_WORKER=%s is not an executable file", env);
  }
  char self[MS_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return tn_err_set(err, TN_EIO, "cannot find tuned-worker: /proc/self/exe: %s (set TUNED_WORKER)", strerror(errno));
  self[n] = 0;
  const char *places[] = {"%s/tuned-worker", "%s/../measure/tuned-worker", "%s/../libexec/tuned/tuned-worker",
                          "%s/../bin/tuned-worker"};
  char lib[MS_PATH_MAX], dirs[2][MS_PATH_MAX];
  snprintf(dirs[0], sizeof dirs[0], "%s", dirname(self));
  /* a library of tuned's loaded by another program (python): next to it */
  bool have_lib = tn_self_object(lib, sizeof lib) == TN_OK;
  snprintf(dirs[1], sizeof dirs[1], "%s", have_lib ? dirname(lib) : dirs[0]);
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < TN_ARRAY_LEN(places); i++) {
      snprintf(buf, size, places[i], dirs[d]);
      if (access(buf, X_OK) == 0) return TN_OK;
    }
  if ((size_t)snprintf(buf, size, "%s/tuned-worker", TUNED_BIN_INSTALL_DIR) < size && access(buf, X_OK) == 0)
    return TN_OK; /* where `meson install` put it */
  return tn_err_set(err, TN_EIO,
                    "cannot find tuned-worker in %s, %s/../measure, %s/../libexec/tuned, %s/../bin, the same places "
                    "next to %s or %s (set TUNED_WORKER to its path)", dirs[0], dirs[0], dirs[0], dirs[0], dirs[1],
                    TUNED_BIN_INSTALL_DIR);
}

static int spawn_grouped(char *const argv[], const char *tmpdir, int out_fd, pid_t *pid, tn_err_t *err) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* none of the caller's other files */
  posix_spawnattr_init(&at);
  posix_spawnattr_setpgroup(&at, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  char entry[MS_PATH_MAX + 8];
  char **env = tmpdir ? ms_environ_with("TMPDIR", tmpdir, entry, sizeof entry) : environ;
  int rc = posix_spawnp(pid, argv[0], &fa, &at, argv, env);
  if (tmpdir) free(env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) return tn_err_set(err, TN_EIO, "cannot run %s: %s", argv[0], strerror(rc));
  return TN_OK;
}

bool ms_reap_failed_start(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 20; i++) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFSIGNALED(st);
    if (w < 0 && errno != EINTR) return false;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return false;
}

int ms_spawn_worker(char *const argv[], char *const env[], int sock, const char *log_path, pid_t *pid,
                    tn_err_t *err) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sock, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* not the caller's sockets, databases, ... */
  posix_spawnattr_init(&at);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dfl);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawn(pid, argv[0], &fa, &at, argv, env ? env : environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    *pid = 0;
    return tn_err_set(err, TN_EIO, "cannot start %s: %s", argv[0], strerror(rc));
  }
  return TN_OK;
}

/* ---- pausing compiler processes ------------------------------------------
 *
 * While a CPU candidate is timed, compilers of the next batch must not share
 * its cores: ms_commands_pause stops every running command's process group
 * (SIGSTOP) and any command started meanwhile; resuming continues them.
 * Paused time does not count against a command's timeout. */

#define MAX_COMMANDS 256

static pthread_mutex_t cmd_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t cmd_pids[MAX_COMMANDS];
static int ncmds, pause_depth;
static double paused_since, paused_total;

double ms_active_clock(void) {
  pthread_mutex_lock(&cmd_mu);
  double now = tn_now(), p = paused_total + (pause_depth > 0 ? now - paused_since : 0);
  pthread_mutex_unlock(&cmd_mu);
  return now - p;
}

void ms_commands_pause(bool pause) {
  pthread_mutex_lock(&cmd_mu);
  if (pause ? pause_depth++ == 0 : pause_depth > 0 && --pause_depth == 0) {
    if (pause) paused_since = tn_now();
    else paused_total += tn_now() - paused_since;
    for (int i = 0; i < ncmds; i++) kill(-cmd_pids[i], pause ? SIGSTOP : SIGCONT);
  }
  pthread_mutex_unlock(&cmd_mu);
}

#define MAX_WORKERS 256
static pid_t worker_pids[MAX_WORKERS];
static int nworkers;

void ms_track_worker(pid_t pid, bool add) {
  pthread_mutex_lock(&cmd_mu);
  if (add && nworkers < MAX_WORKERS) worker_pids[nworkers++] = pid;
  for (int i = 0; !add && i < nworkers; i++)
    if (worker_pids[i] == pid) {
      worker_pids[i] = worker_pids[--nworkers];
      break;
    }
  pthread_mutex_unlock(&cmd_mu);
}

void ms_kill_children(void) {
  /* a thread may hold the lock for a moment; one that died holding it must
   * not keep a process that is about to exit from killing the rest */
  bool locked = false;
  for (int i = 0; i < 100 && !(locked = pthread_mutex_trylock(&cmd_mu) == 0); i++) usleep(1000);
  for (int i = 0; i < ncmds; i++) kill(-cmd_pids[i], SIGKILL);
  for (int i = 0; i < nworkers; i++) kill(worker_pids[i], SIGKILL);
  if (locked) pthread_mutex_unlock(&cmd_mu);
}

static void track_command(pid_t pid, bool add) {
  pthread_mutex_lock(&cmd_mu);
  if (add) {
    if (ncmds < MAX_COMMANDS) cmd_pids[ncmds++] = pid;
    if (pause_depth > 0) kill(-pid, SIGSTOP);
  } else {
    for (int i = 0; i < ncmds; i++)
      if (cmd_pids[i] == pid) {
        cmd_pids[i] = cmd_pids[--ncmds];
        break;
      }
  }
  pthread_mutex_unlock(&cmd_mu);
}

int ms_run_command(char *const argv[], const char *tmpdir, double timeout_s, tn_buf_t *log, size_t max_log,
                   int *status, tn_err_t *err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return tn_err_set(err, TN_EIO, "pipe: %s", strerror(errno));
  pid_t pid;
  int rc = spawn_grouped(argv, tmpdir, p[1], &pid, err);
  close(p[1]);
  if (rc < 0) {
    close(p[0]);
    return rc;
  }
  track_command(pid, true);
  double deadline = ms_active_clock() + timeout_s;
  bool open_ = true, timed_out = false;
  while (open_) {
    double left = deadline - ms_active_clock();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    /* short waits: a pause stretches the deadline */
    int n = poll(&pf, 1, (int)(TN_MIN(left, 0.25) * 1000) + 1);
    if (n > 0) open_ = drain(p[0], log, max_log);
  }
  close(p[0]);
  if (timed_out) kill(-pid, SIGKILL);
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  track_command(pid, false);
  if (timed_out) return tn_err_set(err, TN_ERANGE, "%s timed out after %.1f s (killed)", argv[0], timeout_s);
  return TN_OK;
}

void ms_to_dtype(ir_dtype_t t, const double *src, int64_t n, void *dst) {
  for (int64_t i = 0; i < n; i++) {
    switch (t) {
    case IR_BOOL: ((uint8_t *)dst)[i] = src[i] != 0; break;
    case IR_INT32: ((int32_t *)dst)[i] = (int32_t)src[i]; break;
    case IR_INT64: ((int64_t *)dst)[i] = (int64_t)src[i]; break;
    case IR_FLOAT16: ((uint16_t *)dst)[i] = tn_float_to_half((float)src[i]); break;
    case IR_BFLOAT16: ((uint16_t *)dst)[i] = tn_float_to_bf16((float)src[i]); break;
    case IR_FLOAT32: ((float *)dst)[i] = (float)src[i]; break;
    case IR_FLOAT64: ((double *)dst)[i] = src[i]; break;
    }
  }
}

void ms_from_dtype(ir_dtype_t t, const void *src, int64_t n, double *dst) {
  for (int64_t i = 0; i < n; i++) {
    switch (t) {
    case IR_BOOL: dst[i] = ((const uint8_t *)src)[i]; break;
    case IR_INT32: dst[i] = ((const int32_t *)src)[i]; break;
    case IR_INT64: dst[i] = (double)((const int64_t *)src)[i]; break;
    case IR_FLOAT16: dst[i] = tn_half_to_float(((const uint16_t *)src)[i]); break;
    case IR_BFLOAT16: dst[i] = tn_bf16_to_float(((const uint16_t *)src)[i]); break;
    case IR_FLOAT32: dst[i] = ((const float *)src)[i]; break;
    case IR_FLOAT64: dst[i] = ((const double *)src)[i]; break;
    }
  }
}
