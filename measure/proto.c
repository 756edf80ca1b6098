/* proto.c — the framed messages between the runner and tuned-worker: a
 * 4-byte little-endian length followed by that many bytes of JSON (the
 * format and the messages are documented at the top of worker.c), or of
 * raw data where a message announces it (build_server.c's CUBIN). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ms_internal.h"

static int write_all(int fd, const void *data, size_t n, tn_err_t *err) {
  const char *p = data;
  while (n > 0) {
    /* MSG_NOSIGNAL: a dead peer is an error here, not a SIGPIPE. */
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return tn_err_set(err, TN_EIO, "worker connection: %s", strerror(errno));
    p += k, n -= (size_t)k;
  }
  return TN_OK;
}

int ms_frame_send_bytes(int fd, const void *data, size_t n, tn_err_t *err) {
  if (n == 0 || n > MS_FRAME_MAX)
    return tn_err_set(err, TN_ENOMEM, "a %zu-byte message is outside what a frame holds (1..%zu bytes)", n,
                      MS_FRAME_MAX);
  unsigned char hdr[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 24)};
  int rc = write_all(fd, hdr, 4, err);
  return rc == TN_OK ? write_all(fd, data, n, err) : rc;
}

int ms_frame_send(int fd, const cJSON *msg, tn_err_t *err) {
  char *text = cJSON_PrintUnformatted(msg);
  if (!text) return tn_err_set(err, TN_ENOMEM, "out of memory printing a worker message");
  int rc = ms_frame_send_bytes(fd, text, strlen(text), err);
  free(text);
  return rc;
}

/* Reads exactly n bytes before the deadline. */
static int read_all(int fd, void *data, size_t n, double deadline, tn_err_t *err) {
  char *p = data;
  while (n > 0) {
    if (deadline > 0) {
      double left = deadline - tn_now();
      if (left <= 0) return tn_err_set(err, TN_ERANGE, "timed out waiting for the worker");
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      int k = poll(&pf, 1, (int)(left * 1000) + 1);
      if (k < 0 && errno != EINTR) return tn_err_set(err, TN_EIO, "poll: %s", strerror(errno));
      if (k <= 0) continue;
    }
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return tn_err_set(err, TN_EIO, "worker connection: %s", strerror(errno));
    if (k == 0) return tn_err_set(err, TN_EIO, "worker connection closed");
    p += k, n -= (size_t)k;
  }
  return TN_OK;
}

int ms_frame_recv_bytes(int fd, double deadline, char **out, size_t *len, tn_err_t *err) {
  unsigned char hdr[4];
  *out = NULL;
  *len = 0;
  int rc = read_all(fd, hdr, 4, deadline, err);
  if (rc < 0) return rc;
  size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
  if (n == 0 || n > MS_FRAME_MAX)
    return tn_err_set(err, TN_EIO, "broken worker message: length %zu (1..%zu)", n, MS_FRAME_MAX);
  char *data = malloc(n + 1);
  if (!data) return tn_err_set(err, TN_ENOMEM, "out of memory for a %zu-byte worker message", n);
  rc = read_all(fd, data, n, deadline, err);
  if (rc < 0) {
    free(data);
    return rc;
  }
  data[n] = 0;
  *out = data;
  *len = n;
  return TN_OK;
}

int ms_frame_recv(int fd, double deadline, cJSON **out, tn_err_t *err) {
  char *text;
  size_t n;
  *out = NULL;
  int rc = ms_frame_recv_bytes(fd, deadline, &text, &n, err);
  if (rc < 0) return rc;
  *out = cJSON_ParseWithLength(text, n);
  if (!*out || !cJSON_IsObject(*out)) {
    cJSON_Delete(*out);
    *out = NULL;
    rc = tn_err_set(err, TN_EIO, "broken worker message: not a JSON object: %.80s", text);
  }
  free(text);
  return rc;
}

const char *ms_frame_str(const cJSON *msg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
