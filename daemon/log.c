/* log.c — structured log lines on stderr, one event per line:
 *   ts=2025-01-31T12:00:00.123Z level=info msg="job started" job=3 target=cpu */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "daemon/td.h"

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static _Atomic int min_level = TD_INFO;

int td_log_level_parse(const char *s) {
  for (int i = 0; s && i < (int)TN_ARRAY_LEN(level_names); i++)
    if (strcmp(s, level_names[i]) == 0) return i;
  return -1;
}

void td_log_set_level(td_log_level_t lvl) { min_level = (int)lvl; }

bool td_log_enabled(td_log_level_t lvl) { return (int)lvl >= min_level; }

const char *td_q(const char *s) {
  static __thread char bufs[8][1024];
  static __thread int next;
  char *b = bufs[next++ & 7];
  size_t n = 0, cap = sizeof bufs[0] - 6; /* room for an escape, "...", '"' and NUL */
  b[n++] = '"';
  for (; s && *s && n < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') b[n++] = '\\', b[n++] = (char)ch;
    else if (ch == '\n') b[n++] = '\\', b[n++] = 'n';
    else if (ch < 0x20) b[n++] = ' ';
    else b[n++] = (char)ch;
  }
  if (s && *s) memcpy(b + n, "...", 3), n += 3;
  b[n++] = '"';
  b[n] = 0;
  return b;
}

void td_log(td_log_level_t lvl, const char *msg, const char *kvfmt, ...) {
  if (!td_log_enabled(lvl)) return;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char line[4096];
  int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s msg=%s",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (int)(tv.tv_usec / 1000), level_names[lvl], td_q(msg));
  if (kvfmt && *kvfmt && n < (int)sizeof line - 2) {
    line[n++] = ' ';
    va_list ap;
    va_start(ap, kvfmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, kvfmt, ap);
    va_end(ap);
    n = m < 0 ? n : TN_MIN(n + m, (int)sizeof line - 2);
  }
  line[n++] = '\n';
  /* One write per line: lines from several threads never interleave. */
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}
