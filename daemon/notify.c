/* notify.c — telling the service manager how the daemon is (sd_notify):
 * READY=1 once the socket listens, STOPPING=1 when a stop begins, and a
 * STATUS= line with each.  Outside systemd ($NOTIFY_SOCKET unset), and in a
 * build without libsystemd (whose unit is then Type=simple), it does
 * nothing. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon/td.h"
#include "tuned_config.h"
#if TUNED_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

void td_notify(const char *fmt, ...) {
#if TUNED_HAVE_SYSTEMD
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rc = sd_notify(0, msg);
  if (rc < 0) td_log(TD_WARN, "cannot notify the service manager", "err=%s", td_q(strerror(-rc)));
  else if (rc > 0) td_log(TD_DEBUG, "service manager notified", "msg=%s", td_q(msg));
#else
  (void)fmt;
#endif
}
