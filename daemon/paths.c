/* paths.c — where the daemon keeps its socket and database by default
 * (XDG base directories), and creating private directories for them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/td.h"

void td_dirname(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(buf, size, ".");
  } else if (slash == path) {
    snprintf(buf, size, "/");
  } else {
    snprintf(buf, size, "%.*s", (int)(slash - path), path);
  }
}

/* A directory only this user may enter: created 0700, or an existing one that
 * belongs to us (its mode is then tightened to 0700). */
static int private_dir(const char *dir, tn_err_t *err) {
  int rc = tn_mkdirs(dir, 0700, err);
  if (rc) return rc;
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return tn_err_set(err, TN_EIO, "%s is not a directory (a symbolic link?); remove it or pass --socket",
                      dir);
  if (st.st_uid != getuid())
    return tn_err_set(err, TN_EIO, "%s belongs to uid %u, not to this user (uid %u); remove it or pass --socket",
                      dir, (unsigned)st.st_uid, (unsigned)getuid());
  if ((st.st_mode & 0777) != 0700 && chmod(dir, 0700) != 0)
    return tn_err_set(err, TN_EIO, "cannot make %s private (chmod 0700): %s", dir, strerror(errno));
  return 0;
}

static int fit(size_t size, int n, const char *what, tn_err_t *err) {
  if (n < 0 || (size_t)n >= size)
    return tn_err_set(err, TN_EINVAL, "default %s path is too long (%d bytes, at most %zu); pass it explicitly",
                      what, n, size - 1);
  return 0;
}

int td_default_socket(char *buf, size_t size, tn_err_t *err) {
  const char *rt = getenv("XDG_RUNTIME_DIR");
  char dir[PATH_MAX];
  if (rt && rt[0] == '/') snprintf(dir, sizeof dir, "%s/tuned", rt);
  else snprintf(dir, sizeof dir, "/tmp/tuned-%u", (unsigned)getuid());
  int rc = private_dir(dir, err);
  if (rc) return rc;
  return fit(size, snprintf(buf, size, "%s/tuned.sock", dir), "socket", err);
}

int td_default_db(char *buf, size_t size, tn_err_t *err) {
  const char *data = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
  char dir[PATH_MAX];
  if (data && data[0] == '/') snprintf(dir, sizeof dir, "%s/tuned", data);
  else if (home && home[0] == '/') snprintf(dir, sizeof dir, "%s/.local/share/tuned", home);
  else return tn_err_set(err, TN_EINVAL, "neither XDG_DATA_HOME nor HOME is set: pass --db PATH");
  int rc = tn_mkdirs(dir, 0700, err);
  if (rc) return rc;
  return fit(size, snprintf(buf, size, "%s/tuned.db", dir), "database", err);
}
