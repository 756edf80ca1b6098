/* common.c — errors, arena, string buffers, files, clock and identifiers. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ------------------------------------------------------------ */

int tn_err_vset(tn_err_t *err, int code, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    err->line = err->col = 0;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  }
  return code;
}

int tn_err_set(tn_err_t *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tn_err_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

int tn_err_prefix(tn_err_t *err, const char *fmt, ...) {
  if (!err) return TN_EINVAL;
  char head[TN_ERR_MSG_MAX], old[TN_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  size_t n = strlen(head);
  if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
  memcpy(err->msg, head, n);
  memcpy(err->msg + n, ": ", 2);
  size_t rest = sizeof err->msg - n - 3;
  strncpy(err->msg + n + 2, old, rest);
  err->msg[sizeof err->msg - 1] = 0;
  return err->code;
}

void tn_err_clear(tn_err_t *err) {
  if (err) memset(err, 0, sizeof *err);
}

const char *tn_strerror(int code) {
  switch (code) {
  case TN_OK: return "ok";
  case TN_EINVAL: return "invalid input";
  case TN_ENOMEM: return "out of memory or over a size limit";
  case TN_EIO: return "input/output error";
  case TN_EUNSUPPORTED: return "not supported";
  case TN_ERANGE: return "value out of range";
  case TN_ESTATE: return "not applicable in this state";
  case TN_ESTOPPED: return "stopped on request";
  case TN_EAGAIN: return "unavailable for now";
  default: return "unknown error";
  }
}

/* ---- allocation -------------------------------------------------------- */

static void oom(void) {
  fputs("tuned: out of memory\n", stderr);
  abort();
}

void *tn_xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) oom();
  return p;
}

void *tn_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) oom();
  return p;
}

void *tn_xrealloc(void *p, size_t size) {
  p = realloc(p, size ? size : 1);
  if (!p) oom();
  return p;
}

char *tn_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(tn_xmalloc(n), s, n);
}

/* ---- arena ------------------------------------------------------------- */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk_t;

struct tn_arena {
  chunk_t *head;
  size_t total;
};

tn_arena_t *tn_arena_new(void) { return tn_xcalloc(1, sizeof(tn_arena_t)); }

void tn_arena_free(tn_arena_t *a) {
  if (!a) return;
  for (chunk_t *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *tn_arena_alloc(tn_arena_t *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < size) {
    size_t cap = size > 16384 ? size : 16384;
    chunk_t *c = malloc(sizeof(chunk_t) + cap);
    if (!c) oom();
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += size;
  a->total += size;
  memset(p, 0, size);
  return p;
}

char *tn_arena_strndup(tn_arena_t *a, const char *s, size_t n) {
  char *p = tn_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *tn_arena_strdup(tn_arena_t *a, const char *s) { return tn_arena_strndup(a, s, strlen(s)); }

void *tn_arena_memdup(tn_arena_t *a, const void *p, size_t size) {
  void *q = tn_arena_alloc(a, size);
  if (size) memcpy(q, p, size);
  return q;
}

char *tn_arena_printf(tn_arena_t *a, const char *fmt, ...) {
  /* Formatted into a stack buffer first: short strings take one pass (and
   * gcc with -fsanitize=undefined rejects vsnprintf(NULL, 0, ...) as a
   * "null format string" under -Werror). */
  char small[256];
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0, small[0] = 0;
  char *p = tn_arena_alloc(a, (size_t)n + 1);
  if ((size_t)n < sizeof small) memcpy(p, small, (size_t)n + 1);
  else vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

size_t tn_arena_used(const tn_arena_t *a) { return a->total; }

/* ---- string buffer ----------------------------------------------------- */

void tn_buf_init(tn_buf_t *b) { memset(b, 0, sizeof *b); }

void tn_buf_free(tn_buf_t *b) {
  free(b->data);
  tn_buf_init(b);
}

void tn_buf_reset(tn_buf_t *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

static void buf_reserve(tn_buf_t *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  b->data = tn_xrealloc(b->data, cap);
  b->cap = cap;
}

void tn_buf_putn(tn_buf_t *b, const char *s, size_t n) {
  buf_reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

void tn_buf_put(tn_buf_t *b, const char *s) { tn_buf_putn(b, s, strlen(s)); }
void tn_buf_putc(tn_buf_t *b, char c) { tn_buf_putn(b, &c, 1); }

void tn_buf_vprintf(tn_buf_t *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n > 0) {
    buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

void tn_buf_printf(tn_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tn_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void tn_buf_indent(tn_buf_t *b, int spaces) {
  for (int i = 0; i < spaces; i++) tn_buf_putc(b, ' ');
}

const char *tn_buf_str(const tn_buf_t *b) { return b->data ? b->data : ""; }

char *tn_buf_take(tn_buf_t *b) {
  char *s = b->data ? b->data : tn_xstrdup("");
  tn_buf_init(b);
  return s;
}

/* ---- files ------------------------------------------------------------- */

int tn_edit_distance(const char *a, const char *b) {
  int la = (int)TN_MIN(strlen(a), 64), lb = (int)TN_MIN(strlen(b), 64), row[65];
  for (int j = 0; j <= la; j++) row[j] = j;
  for (int i = 1; i <= lb; i++) { /* row: distances of a's prefixes to b[0..i) */
    int diag = row[0];
    row[0] = i;
    for (int j = 1; j <= la; j++) {
      int up = row[j];
      row[j] = TN_MIN(TN_MIN(row[j] + 1, row[j - 1] + 1), diag + (a[j - 1] != b[i - 1]));
      diag = up;
    }
  }
  return row[la];
}

int tn_mkdirs(const char *path, unsigned mode, tn_err_t *err) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
    return tn_err_set(err, TN_EINVAL, "path too long: %.80s...", path);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char saved = *s;
    *s = 0;
    if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
      return tn_err_set(err, TN_EIO, "cannot create directory %s: %s", p, strerror(errno));
    *s = saved;
    if (!saved) break;
  }
  struct stat st;
  if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return tn_err_set(err, TN_EIO, "%s exists and is not a directory", p);
  return TN_OK;
}

FILE *tn_open_out(const char *path, bool binary, tn_err_t *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) {
    tn_err_set(err, TN_EINVAL, "%s is a symbolic link: not written through (remove it, or name the file it points to)",
               path);
    return NULL;
  }
  if (fd < 0) {
    tn_err_set(err, TN_EIO, "cannot write %s: %s", path, strerror(errno));
    return NULL;
  }
  FILE *f = fdopen(fd, binary ? "wb" : "w");
  if (!f) {
    tn_err_set(err, TN_EIO, "cannot write %s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

int tn_read_file(const char *path, size_t max_bytes, char **out, size_t *len, tn_err_t *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return tn_err_set(err, TN_EIO, "cannot open '%s': %s", path, strerror(errno));
  tn_buf_t b;
  tn_buf_init(&b);
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (b.len + n > max_bytes) {
      fclose(f);
      tn_buf_free(&b);
      return tn_err_set(err, TN_ENOMEM, "'%s' is larger than the limit of %zu bytes", path, max_bytes);
    }
    tn_buf_putn(&b, chunk, n);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    tn_buf_free(&b);
    return tn_err_set(err, TN_EIO, "cannot read '%s'", path);
  }
  if (len) *len = b.len;
  *out = tn_buf_take(&b);
  return TN_OK;
}

/* ---- clock ------------------------------------------------------------- */

double tn_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- identifiers ------------------------------------------------------- */

bool tn_is_identifier(const char *s) {
  if (!s || !*s) return false;
  if (!(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'))) return false;
  for (const char *p = s + 1; *p; p++)
    if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
      return false;
  return !tn_is_reserved_word(s);
}

int64_t tn_gcd64(int64_t a, int64_t b) {
  uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
  while (y) {
    uint64_t t = x % y;
    x = y, y = t;
  }
  return x > (uint64_t)INT64_MAX ? INT64_C(1) << 62 : (int64_t)x;
}
