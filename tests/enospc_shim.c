/* enospc_shim — an LD_PRELOAD library that makes a PostgreSQL server's disk
 * look full: while the file named by $TUNED_ENOSPC_FLAG exists, a write that
 * would grow a file under a database directory (".../base/...": a table or
 * index gaining a page) fails with ENOSPC, as it would on a full disk, where
 * rewriting pages already allocated still succeeds.  The WAL is left alone
 * (the server preallocates its segments).  test_db builds it with the
 * system compiler and starts its server with it (t_pg_disk_full). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static bool full(int fd, off_t end) {
  const char *flag = getenv("TUNED_ENOSPC_FLAG");
  struct stat st;
  if (!flag || stat(flag, &st) != 0) return false;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || end <= st.st_size) return false;
  char link[64], path[1024];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = 0;
  return strstr(path, "/base/") != NULL;
}

static size_t iov_bytes(const struct iovec *iov, int n) {
  size_t sum = 0;
  for (int i = 0; i < n; i++) sum += iov[i].iov_len;
  return sum;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*fallocate_fn)(int, off_t, off_t);

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name, type) \
  static type real_; \
  if (!real_) real_ = (type)dlsym(RTLD_NEXT, name)

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  REAL("pwrite", pwrite_fn);
  if (full(fd, off + (off_t)n)) return errno = ENOSPC, -1;
  return real_(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
  REAL("pwrite64", pwrite_fn);
  if (full(fd, off + (off_t)n)) return errno = ENOSPC, -1;
  return real_(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
  REAL("pwritev", pwritev_fn);
  if (full(fd, off + (off_t)iov_bytes(iov, cnt))) return errno = ENOSPC, -1;
  return real_(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) {
  REAL("pwritev64", pwritev_fn);
  if (full(fd, off + (off_t)iov_bytes(iov, cnt))) return errno = ENOSPC, -1;
  return real_(fd, iov, cnt, off);
}

ssize_t write(int fd, const void *buf, size_t n) {
  REAL("write", write_fn);
  off_t at = lseek(fd, 0, SEEK_CUR);
  if (at >= 0 && full(fd, at + (off_t)n)) return errno = ENOSPC, -1;
  return real_(fd, buf, n);
}

int posix_fallocate(int fd, off_t off, off_t len) {
  REAL("posix_fallocate", fallocate_fn);
  if (full(fd, off + len)) return ENOSPC;
  return real_(fd, off, len);
}
