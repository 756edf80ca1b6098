/* build_server.c — compilers in a separate process, so that a compile can be
 * stopped and nothing of them runs in the caller.  NVRTC and PoCL's
 * clBuildProgram (both LLVM) cannot be interrupted: a build abandoned at
 * its time limit kept compiling (and allocating) in the caller, which LLVM
 * then aborted ("LLVM ERROR: out of memory") with the whole daemon, and an
 * abandoned OpenCL build was still inside LLVM when the daemon exited.
 * Here each compile runs in `tuned-worker --build`, started with exec (never
 * a bare fork: a child forked after XGBoost's OpenMP threads ran hangs),
 * which serves one build after another; past the time limit it is killed
 * with SIGKILL, and a process that dies (crash, OOM kill) is reaped and
 * replaced at the next build.  The caller only ever waits on a socket.
 * This file is the build process's side; build_client.c the caller's.
 *
 * Protocol: fd 0 of the build process is a Unix stream socket to its
 * parent, fds 1 and 2 a log file (the compilers' own fatal messages land
 * there).  Frames as tuned-worker's (proto.c): a 4-byte little-endian
 * length, then a JSON object, or raw bytes where the previous message
 * announced them.
 *   {"op": "hello"} -> {"ok": true, "pid": 1234}
 *   {"op": "compile", "source": "...", "arch": "sm_90"}
 *     -> {"code": 0, "version": "NVRTC 13.0", "log": "...", "ptx": "...",
 *         "cubin_bytes": 5120, "secs": 0.12}, then (cubin_bytes > 0) one raw
 *        frame of the CUBIN
 *      | {"code": -1, "error": "NVRTC (...): ...", "version": ..., "log": ...}
 *     code and error are ms_cuda_compile's; secs is NVRTC's time.
 *   {"op": "opencl", ...} and {"op": "opencl_probe"}: build_opencl.c.
 *   {"op": "exit"}, or EOF -> the process exits 0.
 * The build process also dies with the thread that started it
 * (PR_SET_PDEATHSIG), so a compile never outlives its caller. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "ms_internal.h"

/* Compiles one request and replies (false: the parent is gone). */
static bool serve_compile(const cJSON *req) {
  const char *source = ms_frame_str(req, "source"), *arch = ms_frame_str(req, "arch");
  ms_cuda_output_t o;
  memset(&o, 0, sizeof o);
  tn_err_t err = {0};
  int rc = source && arch ? ms_cuda_compile(source, arch, &o, &err)
                          : tn_err_set(&err, TN_EINVAL, "compile: needs \"source\" and \"arch\"");
  if (rc == TN_OK && o.cubin_size > MS_FRAME_MAX)
    rc = tn_err_set(&err, TN_ENOMEM, "NVRTC made a %zu-byte CUBIN; at most %zu bytes are passed on", o.cubin_size,
                    MS_FRAME_MAX);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddNumberToObject(r, "code", rc);
  if (rc < 0) cJSON_AddStringToObject(r, "error", err.msg);
  cJSON_AddStringToObject(r, "version", o.version);
  if (o.log) cJSON_AddStringToObject(r, "log", o.log);
  if (rc == TN_OK) {
    cJSON_AddStringToObject(r, "ptx", o.ptx ? o.ptx : "");
    cJSON_AddNumberToObject(r, "cubin_bytes", (double)o.cubin_size);
  }
  cJSON_AddNumberToObject(r, "secs", o.nvrtc_secs);
  tn_err_t serr = {0};
  int sent = ms_frame_send(0, r, &serr);
  cJSON_Delete(r);
  if (sent == TN_ENOMEM) { /* the reply is over a frame: say so instead */
    r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "code", TN_ENOMEM);
    cJSON_AddStringToObject(r, "error", "NVRTC's output (PTX and log) is over the 64 MiB a build may pass on");
    cJSON_AddStringToObject(r, "version", o.version);
    sent = ms_frame_send(0, r, &serr);
    cJSON_Delete(r);
  } else if (sent == TN_OK && rc == TN_OK && o.cubin_size > 0) {
    sent = ms_frame_send_bytes(0, o.cubin, o.cubin_size, &serr);
  }
  ms_cuda_output_free(&o);
  return sent == TN_OK;
}

int ms_build_serve(int argc, char **argv) {
  /* Die with the thread that started us; a parent already gone (between
   * its spawn and this call) is caught by comparing with the pid it gave. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (argc > 2 && getppid() != (pid_t)strtol(argv[2], NULL, 10)) return 1;
  for (;;) {
    cJSON *req = NULL, *r = NULL;
    tn_err_t err = {0};
    if (ms_frame_recv(0, 0, &req, &err) < 0) break;
    const char *op = ms_frame_str(req, "op");
    bool ok = true;
    if (op && strcmp(op, "exit") == 0) {
      cJSON_Delete(req);
      break;
    } else if (op && strcmp(op, "compile") == 0) {
      ok = serve_compile(req);
    } else if (op && strncmp(op, "opencl", 6) == 0) {
      r = ms_opencl_serve(req);
    } else {
      r = cJSON_CreateObject();
      bool hello = op && strcmp(op, "hello") == 0;
      cJSON_AddBoolToObject(r, "ok", hello);
      if (hello) cJSON_AddNumberToObject(r, "pid", (double)getpid());
      else
        cJSON_AddStringToObject(r, "error", "unknown op (hello, compile, opencl, opencl_probe, exit)");
    }
    if (r) ok = ms_frame_send(0, r, &err) == TN_OK;
    cJSON_Delete(r);
    cJSON_Delete(req);
    if (!ok) break;
  }
  return 0;
}
