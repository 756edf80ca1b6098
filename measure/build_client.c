/* build_client.c — the caller's side of the build process (build_server.c,
 * where the protocol is): starts `tuned-worker --build` with exec at the
 * first compile, sends it one request at a time and waits on its socket,
 * kills it with SIGKILL past the time limit, and reaps and replaces a
 * process that died, saying how it ended and what it wrote to its log. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

#define HELLO_TIMEOUT_S 30.0
#define LOG_TAIL 1024

struct ms_build_proc {
  char worker[MS_PATH_MAX], log_path[MS_PATH_MAX];
  pid_t pid; /* 0: none running */
  int fd;
  int starts;
  off_t log_from; /* the log's size when the current process started */
  /* the current call's: "NVRTC" (build process) and "NVRTC" (still compiling),
   * or "OpenCL" and "the OpenCL compiler" */
  const char *what, *compiler;
  bool killed; /* the current call's process died of a SIGKILL we did not send */
};

int ms_build_proc_new(const char *worker, const char *log_path, ms_build_proc_t **out, tn_err_t *err) {
  *out = NULL;
  ms_build_proc_t *p = tn_xcalloc(1, sizeof *p);
  p->fd = -1;
  int rc = worker ? (snprintf(p->worker, sizeof p->worker, "%s", worker), TN_OK)
                  : ms_worker_path(p->worker, sizeof p->worker, err);
  if (rc == TN_OK && access(p->worker, X_OK) < 0)
    rc = tn_err_set(err, TN_EIO, "the build process %s is not an executable file", p->worker);
  if (rc == TN_OK && log_path &&
      (size_t)snprintf(p->log_path, sizeof p->log_path, "%s", log_path) >= sizeof p->log_path)
    rc = tn_err_set(err, TN_EINVAL, "build process log path longer than %d bytes", MS_PATH_MAX - 1);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *out = p;
  return TN_OK;
}

static off_t log_size(const ms_build_proc_t *p) {
  struct stat st;
  return p->log_path[0] && stat(p->log_path, &st) == 0 ? st.st_size : 0;
}

/* "; it said: ..." with what the process wrote to its log, or "". */
static void log_tail(const ms_build_proc_t *p, char *out, size_t size) {
  out[0] = 0;
  int fd = p->log_path[0] ? open(p->log_path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0) return;
  off_t from = p->log_from, end = log_size(p);
  if (end - from > LOG_TAIL) from = end - LOG_TAIL;
  char buf[LOG_TAIL + 1];
  ssize_t n = end > from ? pread(fd, buf, (size_t)(end - from), from) : 0;
  close(fd);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) n--;
  buf[n > 0 ? n : 0] = 0;
  if (n > 0) snprintf(out, size, "; it said: %s", buf);
}

/* Reaps the process, killing it first if asked, else after 2 s of waiting
 * for it to exit; returns its wait status. */
static int reap(ms_build_proc_t *p, bool kill_it) {
  int st = 0;
  if (kill_it) kill(p->pid, SIGKILL);
  for (int i = 0; !kill_it && i < 200; i++) {
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid || (r < 0 && errno != EINTR)) goto done;
    usleep(10000);
  }
  kill(p->pid, SIGKILL);
  while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
  }
done:
  close(p->fd);
  p->pid = 0;
  p->fd = -1;
  return st;
}

static int start_once(ms_build_proc_t *p, bool *killed, tn_err_t *err) {
  *killed = false;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return tn_err_set(err, TN_EIO, "socketpair: %s", strerror(errno));
  char ppid[24];
  snprintf(ppid, sizeof ppid, "%d", (int)getpid());
  char *argv[] = {p->worker, "--build", ppid, NULL};
  p->log_from = log_size(p);
  int rc = ms_spawn_worker(argv, NULL, sv[1], p->log_path[0] ? p->log_path : NULL, &p->pid, err);
  close(sv[1]);
  if (rc < 0) {
    close(sv[0]);
    return rc;
  }
  p->fd = sv[0];
  p->starts++;
  cJSON *hello = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(hello, "op", "hello");
  rc = ms_frame_send(p->fd, hello, err);
  if (rc == TN_OK) rc = ms_frame_recv(p->fd, tn_now() + HELLO_TIMEOUT_S, &reply, err);
  if (rc == TN_OK && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")))
    rc = tn_err_set(err, TN_EIO, "it answered hello with %s", ms_frame_str(reply, "error") ? ms_frame_str(reply, "error") : "no");
  cJSON_Delete(hello);
  cJSON_Delete(reply);
  if (rc < 0) {
    char tail[LOG_TAIL + 32];
    *killed = ms_reap_failed_start(p->pid);
    close(p->fd);
    p->pid = 0, p->fd = -1;
    log_tail(p, tail, sizeof tail);
    return tn_err_set(err, TN_EIO, "the build process %s --build did not start: %s%s%s", p->worker,
                      err ? err->msg : "", *killed ? " (killed by a signal)" : "", tail);
  }
  return TN_OK;
}

/* Started again when killed while it starts, as the worker (runner.c). */
static int start(ms_build_proc_t *p, tn_err_t *err) {
  bool killed = false;
  int rc = TN_OK;
  for (int i = 0; i < MS_START_TRIES; i++) {
    rc = start_once(p, &killed, err);
    if (rc == TN_OK || !killed) break;
  }
  return rc;
}

/* The process died during a build (its socket closed or spoke nonsense):
 * reaps it and says how it ended. */
static int died(ms_build_proc_t *p, const char *why, tn_err_t *err) {
  pid_t pid = p->pid;
  int st = reap(p, false);
  char how[128], tail[LOG_TAIL + 32];
  p->killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
  if (WIFSIGNALED(st)) {
    char sig[96];
    ms_signal_text(WTERMSIG(st), sig, sizeof sig);
    snprintf(how, sizeof how, "was killed by %s", sig);
  } else if (WIFEXITED(st)) {
    snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
  } else {
    snprintf(how, sizeof how, "stopped answering (%s)", why);
  }
  log_tail(p, tail, sizeof tail);
  return tn_err_set(err, TN_EIO, "the %s build process (pid %d) %s during the build%s; it is replaced for the next "
                    "build", p->what, (int)pid, how, tail);
}

/* Reaps a process that ended while idle (killed from outside between
 * builds): that is no build's fault, so the next one simply starts anew. */
static void reap_if_gone(ms_build_proc_t *p) {
  int st;
  if (p->pid > 0 && waitpid(p->pid, &st, WNOHANG) == p->pid) {
    close(p->fd);
    p->pid = 0;
    p->fd = -1;
  }
}

/* Reads the reply (and the CUBIN after it) into out. */
static int take_reply(ms_build_proc_t *p, const cJSON *reply, double deadline, const char *arch, ms_cuda_output_t *out,
                      tn_err_t *err) {
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(reply, "code");
  const char *version = ms_frame_str(reply, "version"), *log = ms_frame_str(reply, "log"), *ptx = ms_frame_str(reply, "ptx");
  snprintf(out->version, sizeof out->version, "%s", version ? version : "NVRTC");
  out->nvrtc_secs = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(reply, "secs"));
  if (!(out->nvrtc_secs >= 0)) out->nvrtc_secs = 0;
  if (log) out->log = tn_xstrdup(log);
  if (!cJSON_IsNumber(code)) return died(p, "a reply without a code", err);
  if (code->valueint < 0) { /* TN_ERANGE means a timeout here, which the process cannot know of */
    const char *e = ms_frame_str(reply, "error");
    return tn_err_set(err, code->valueint == TN_ERANGE ? TN_EIO : code->valueint, "%s",
                      e ? e : "NVRTC failed without saying why");
  }
  double n = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(reply, "cubin_bytes"));
  out->ptx = tn_xstrdup(ptx ? ptx : "");
  if (!(n > 0)) return tn_err_set(err, TN_EINVAL, "NVRTC produced no CUBIN for %s", arch);
  char *cubin = NULL;
  size_t len = 0;
  tn_err_t ferr = {0};
  int rc = ms_frame_recv_bytes(p->fd, deadline, &cubin, &len, &ferr);
  if (rc == TN_ERANGE) return rc;
  if (rc < 0) return died(p, ferr.msg, err);
  if ((double)len != n) {
    free(cubin);
    return died(p, "a CUBIN of another size than announced", err);
  }
  out->cubin = cubin;
  out->cubin_size = len;
  return TN_OK;
}

/* The compile ran past its time limit: kills the process. */
static int overran(ms_build_proc_t *p, double timeout_s, tn_err_t *err) {
  pid_t pid = p->pid;
  reap(p, true);
  return tn_err_set(err, TN_ERANGE, "%s was still compiling after %.1f s: its build process (pid %d) was killed",
                    p->compiler, timeout_s, (int)pid);
}

int ms_build_proc_call(ms_build_proc_t *p, const cJSON *req, const char *what, double timeout_s, cJSON **reply,
                       tn_err_t *err) {
  *reply = NULL;
  bool nvrtc = strcmp(what, "NVRTC") == 0;
  p->what = nvrtc ? "NVRTC" : "OpenCL";
  p->compiler = nvrtc ? "NVRTC" : "the OpenCL compiler";
  p->killed = false;
  reap_if_gone(p);
  int rc = p->pid > 0 ? TN_OK : start(p, err);
  if (rc < 0) return rc;
  tn_err_t ferr = {0};
  double deadline = tn_now() + timeout_s;
  rc = ms_frame_send(p->fd, req, &ferr);
  if (rc == TN_ENOMEM) return tn_err_set(err, TN_ENOMEM, "the %s source is too large to compile: %s", what, ferr.msg);
  if (rc == TN_OK) rc = ms_frame_recv(p->fd, deadline, reply, &ferr);
  if (rc == TN_ERANGE) return overran(p, timeout_s, err);
  if (rc < 0) return died(p, ferr.msg, err);
  return TN_OK;
}

int ms_nvrtc_compile(ms_build_proc_t *p, const char *source, const char *arch, double timeout_s,
                     ms_cuda_output_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  if (!TUNED_HAVE_CUDA) return ms_cuda_compile(source, arch, out, err); /* says this build has none */
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(req, "op", "compile");
  cJSON_AddStringToObject(req, "source", source);
  cJSON_AddStringToObject(req, "arch", arch);
  double deadline = tn_now() + timeout_s;
  int rc = ms_build_proc_call(p, req, "NVRTC", timeout_s, &reply, err);
  cJSON_Delete(req);
  if (rc == TN_OK) rc = take_reply(p, reply, deadline, arch, out, err);
  cJSON_Delete(reply);
  if (rc == TN_ERANGE && p->pid > 0) rc = overran(p, timeout_s, err); /* during the CUBIN */
  if (rc == TN_ERANGE) {
    ms_cuda_output_free(out);
    snprintf(out->version, sizeof out->version, "NVRTC");
  }
  return rc;
}

bool ms_build_proc_killed(const ms_build_proc_t *p) { return p && p->killed; }

int ms_build_proc_pid(const ms_build_proc_t *p) { return p && p->pid > 0 ? (int)p->pid : 0; }
int ms_build_proc_starts(const ms_build_proc_t *p) { return p ? p->starts : 0; }

void ms_build_proc_free(ms_build_proc_t *p) {
  if (!p) return;
  if (p->pid > 0) {
    cJSON *bye = cJSON_CreateObject();
    cJSON_AddStringToObject(bye, "op", "exit");
    ms_frame_send(p->fd, bye, NULL);
    cJSON_Delete(bye);
    reap(p, false);
  }
  free(p);
}
