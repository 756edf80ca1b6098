/* configs.c — where targets come from: the config directory (chosen at run
 * time), one target file read by name without trusting the file system
 * (no symbolic links, no other user's files, no name that climbs out), and
 * the names of every target file there. */
#include "target.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuned_config.h"

#define MAX_FILE (1 << 20)
#define MAX_DEPTH 4 /* dir/a/b/c/NAME.json at most */

static const struct {
  const char *alias, *name;
} aliases[] = {{"opencl", "opencl/pocl-cpu"}};

static int fits(int n, size_t size, const char *what, tn_err_t *err) {
  if (n < 0 || (size_t)n >= size)
    return tn_err_set(err, TN_EINVAL, "%s is too long (at most %zu bytes)", what, size - 1);
  return TN_OK;
}

/* Whether the resolved path lies inside dir. */
static bool inside(const char *path, const char *dir) {
  char real[PATH_MAX];
  if (!realpath(dir, real)) return false;
  size_t n = strlen(real);
  return strncmp(path, real, n) == 0 && path[n] == '/';
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The config directory that belongs to the binary at `exe` (in the build
 * tree, or <exe dir>/../share/tuned/configs); false when neither applies. */
static bool config_dir_near(const char *exe, char *buf, size_t size) {
  if (!exe) return false;
  if (inside(exe, TUNED_BUILD_ROOT)) return (size_t)snprintf(buf, size, "%s/configs", TUNED_SOURCE_ROOT) < size;
  char prefix[PATH_MAX] = "";
  const char *slash = strrchr(exe, '/');
  if (!slash) return false;
  snprintf(prefix, sizeof prefix, "%.*s", (int)(slash - exe), exe); /* <prefix>/bin/tunectl -> <prefix> */
  char *up = strrchr(prefix, '/');
  if (up) *up = 0;
  else prefix[0] = 0;
  char rel[PATH_MAX + 32];
  snprintf(rel, sizeof rel, "%s/share/tuned/configs", prefix);
  return is_dir(rel) && (size_t)snprintf(buf, size, "%s", rel) < size;
}

int tn_config_dir_for(const char *exe, char *buf, size_t size, tn_err_t *err) {
  if (config_dir_near(exe, buf, size)) return TN_OK;
  return fits(snprintf(buf, size, "%s", TUNED_CONFIG_INSTALL_DIR), size, "the config directory", err);
}

int tn_self_object(char *buf, size_t size) {
  Dl_info info;
  char real[PATH_MAX];
  if (!dladdr((void *)tn_self_object, &info) || !info.dli_fname || !strchr(info.dli_fname, '/') ||
      !realpath(info.dli_fname, real))
    return TN_EIO;
  return (size_t)snprintf(buf, size, "%s", real) < size ? TN_OK : TN_ENOMEM;
}

int tn_config_dir(char *buf, size_t size, tn_err_t *err) {
  const char *env = getenv("TUNED_CONFIG_DIR");
  if (env && *env) return fits(snprintf(buf, size, "%s", env), size, "TUNED_CONFIG_DIR", err);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = 0;
  if (n > 0 && config_dir_near(exe, buf, size)) return TN_OK;
  char self[PATH_MAX]; /* a library of tuned's loaded by another program (python) */
  if (tn_self_object(self, sizeof self) == TN_OK && config_dir_near(self, buf, size)) return TN_OK;
  return tn_config_dir_for(NULL, buf, size, err);
}

/* A target name: '/'-separated parts of [A-Za-z0-9_.+-], none empty or
 * starting with '.' (so nothing climbs out of the config directory). */
static int check_name(const char *name, tn_err_t *err) {
  size_t n = strlen(name);
  bool ok = n > 0 && n < sizeof((tn_target_t *)0)->name && !strstr(name, "..");
  for (size_t i = 0; ok && i < n; i++) {
    char c = name[i];
    bool start = i == 0 || name[i - 1] == '/';
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '+' || (c == '.' && !start) || (c == '/' && !start && i + 1 < n);
  }
  if (!ok)
    return tn_err_set(err, TN_EINVAL,
                      "bad target name \"%s\": names are 1 to %zu characters, '/'-separated parts of letters, "
                      "digits, '_', '-', '+' and '.', none empty or starting with '.'",
                      name, sizeof((tn_target_t *)0)->name - 1);
  return TN_OK;
}

/* Refuses what someone else could have planted or changed: the entry must be
 * a directory or regular file (as wanted) of this user or root, and not
 * writable by every user. */
static int trusted(int fd, const char *path, bool want_dir, tn_err_t *err) {
  struct stat st;
  if (fstat(fd, &st) != 0) return tn_err_set(err, TN_EIO, "cannot stat %s: %s", path, strerror(errno));
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return tn_err_set(err, TN_EIO, "%s is not a %s", path, want_dir ? "directory" : "regular file");
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return tn_err_set(err, TN_EIO, "%s belongs to uid %u, neither this user (uid %u) nor root: not trusted", path,
                      (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & S_IWOTH)
    return tn_err_set(err, TN_EIO, "%s is writable by every user: not trusted (chmod o-w it)", path);
  return TN_OK;
}

/* Opens comp under the directory fd (no symbolic link); *missing when it is
 * not there. */
static int open_part(int dfd, const char *comp, bool dir, const char *path, bool *missing, tn_err_t *err) {
  int fd = openat(dfd, comp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : O_NONBLOCK));
  if (fd >= 0) return fd;
  int e = errno;
  struct stat st;
  if (fstatat(dfd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return tn_err_set(err, TN_EIO, "%s is a symbolic link: target files and their directories must be the real "
                      "thing under the config directory (copy it there)", path);
  if (e == ENOENT || e == ENOTDIR) *missing = true;
  return tn_err_set(err, TN_EIO, "cannot open %s: %s", path, strerror(e));
}

static int read_fd(int fd, const char *path, char **text, size_t *len, tn_err_t *err) {
  tn_buf_t b;
  tn_buf_init(&b);
  char chunk[8192];
  ssize_t n;
  while ((n = read(fd, chunk, sizeof chunk)) > 0 && b.len + (size_t)n <= MAX_FILE) tn_buf_putn(&b, chunk, (size_t)n);
  if (n != 0) {
    tn_buf_free(&b);
    return n < 0 ? tn_err_set(err, TN_EIO, "cannot read %s: %s", path, strerror(errno))
                 : tn_err_set(err, TN_ENOMEM, "%s is larger than the limit of %d bytes", path, MAX_FILE);
  }
  *len = b.len;
  *text = b.len ? tn_buf_take(&b) : tn_xstrdup("");
  return TN_OK;
}

/* Reads dir/NAME.json into *text, checking every part on the way down; the
 * file's path into path (*missing: no such file). */
static int read_target(const char *dir, const char *name, char *path, size_t size, char **text, size_t *len,
                       bool *missing, tn_err_t *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return tn_err_set(err, TN_EIO, "cannot open the config directory %s: %s (set TUNED_CONFIG_DIR to a directory "
                      "of target files, see configs/README.md)", dir, strerror(errno));
  int rc = trusted(fd, dir, true, err);
  for (const char *part = name; rc == 0;) {
    const char *slash = strchr(part, '/'), *end = slash ? slash : part + strlen(part);
    char comp[80];
    snprintf(comp, sizeof comp, "%.*s%s", (int)(end - part), part, slash ? "" : ".json");
    snprintf(path, size, "%s/%.*s%s", dir, (int)(end - name), name, slash ? "" : ".json");
    int next = open_part(fd, comp, slash != NULL, path, missing, err);
    close(fd);
    if ((fd = next) < 0) return TN_EIO;
    if ((rc = trusted(fd, path, slash != NULL, err)) < 0 || !slash) break;
    part = slash + 1;
  }
  if (rc == 0) rc = read_fd(fd, path, text, len, err);
  close(fd);
  return rc;
}

/* ---- listing ------------------------------------------------------------- */

typedef struct names {
  char **v;
  int n, cap;
} names_t;

/* Adds the target files under dir/prefix (prefix "" or "nvidia/"). */
static void scan(const char *dir, const char *prefix, int depth, names_t *out) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, prefix);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    char name[PATH_MAX], full[PATH_MAX * 2];
    struct stat st;
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    if (e->d_name[0] == '.' || lstat(full, &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth + 1 < MAX_DEPTH) {
      snprintf(name, sizeof name, "%s%s/", prefix, e->d_name);
      scan(dir, name, depth + 1, out);
    } else if (S_ISREG(st.st_mode) && len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) {
      snprintf(name, sizeof name, "%s%.*s", prefix, (int)(len - 5), e->d_name);
      if (check_name(name, NULL) < 0) continue;
      if (out->n == out->cap) out->v = tn_xrealloc(out->v, sizeof *out->v * (size_t)(out->cap = out->cap * 2 + 8));
      out->v[out->n++] = tn_xstrdup(name);
    }
  }
  closedir(d);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tn_target_names(const char *config_dir, char ***names, int *n, tn_err_t *err) {
  char dir[PATH_MAX];
  *names = NULL;
  *n = 0;
  if (!config_dir && tn_config_dir(dir, sizeof dir, err) < 0) return TN_EINVAL;
  if (!config_dir) config_dir = dir;
  if (!is_dir(config_dir))
    return tn_err_set(err, TN_EIO, "the config directory %s is missing (set TUNED_CONFIG_DIR to a directory of "
                      "target files, see configs/README.md)", config_dir);
  names_t v = {0};
  scan(config_dir, "", 0, &v);
  if (v.n) qsort(v.v, (size_t)v.n, sizeof *v.v, by_name);
  *names = v.v;
  *n = v.n;
  return TN_OK;
}

void tn_target_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* ---- lookup -------------------------------------------------------------- */

/* How far name is from the known name cand: its edit distance to the whole
 * name or to its last part ("h100" is 0 from "nvidia/h100"); 1 when it is
 * the start of cand ("opencl/pocl" of "opencl/pocl-cpu"). */
static int target_distance(const char *name, const char *cand) {
  const char *last = strrchr(cand, '/');
  int d = tn_edit_distance(name, cand);
  if (last && !strchr(name, '/')) d = TN_MIN(d, tn_edit_distance(name, last + 1));
  return strlen(name) >= 3 && strncmp(cand, name, strlen(name)) == 0 ? TN_MIN(d, 1) : d;
}

/* An unknown name's error: the nearest known name when one is near (a third
 * of the name's length in edits, at least 2), then every known name. */
static int unknown(const char *name, const char *dir, tn_err_t *err) {
  char **v;
  int n, bestd = (int)TN_MAX(2, strlen(name) / 3) + 1;
  const char *best = NULL;
  tn_buf_t b;
  tn_buf_init(&b);
  char near[80] = "";
  if (tn_target_names(dir, &v, &n, NULL) == 0) {
    for (size_t i = 0; i < TN_ARRAY_LEN(aliases); i++) /* first: a tie goes to the short name */
      if (target_distance(name, aliases[i].alias) < bestd)
        bestd = target_distance(name, aliases[i].alias), best = aliases[i].alias;
    for (int i = 0; i < n; i++) {
      tn_buf_printf(&b, "%s%s", i ? ", " : "", v[i]);
      int d = target_distance(name, v[i]);
      if (d < bestd) bestd = d, best = v[i];
    }
    if (best) snprintf(near, sizeof near, "; did you mean \"%s\"?", best);
    tn_target_names_free(v, n);
  }
  tn_err_set(err, TN_EINVAL, "unknown target \"%s\"%s (known: %s; \"%s\" stands for %s; each is NAME.json under %s)",
             name, near, b.len ? tn_buf_str(&b) : "none", aliases[0].alias, aliases[0].name, dir);
  tn_buf_free(&b);
  return TN_EINVAL;
}

static int lookup_file(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err);

/* "<name>+tf32": the CUDA target <name> with TF32 tensor cores allowed for
 * float32 matmuls, a target of its own (its records are kept apart). */
#define TF32_SUFFIX "+tf32"

int tn_target_lookup(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err) {
  size_t n = strlen(name), ns = strlen(TF32_SUFFIX);
  if (n <= ns || strcmp(name + n - ns, TF32_SUFFIX) != 0) return lookup_file(name, config_dir, out, err);
  char base[sizeof out->name];
  if (n - ns >= sizeof base) return tn_err_set(err, TN_EINVAL, "target name \"%s\" is too long", name);
  memcpy(base, name, n - ns);
  base[n - ns] = 0;
  int rc = lookup_file(base, config_dir, out, err);
  if (rc < 0) return rc;
  if (out->kind != TN_TARGET_CUDA && out->kind != TN_TARGET_CUDA_HOST)
    return tn_err_set(err, TN_EINVAL, "target \"%s\": TF32 (%s) is a tensor-core mode of CUDA targets; %s is of kind %s",
                      name, TF32_SUFFIX, out->name, tn_target_kind_name(out->kind));
  if (fits(snprintf(out->name, sizeof out->name, "%s%s", base, TF32_SUFFIX), sizeof out->name, "the target name", err) < 0)
    return TN_EINVAL;
  out->allow_tf32 = true;
  return TN_OK;
}

static int lookup_file(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err) {
  char dir[PATH_MAX], path[PATH_MAX + 80], *text = NULL;
  size_t len = 0;
  bool missing = false;
  if (!config_dir && tn_config_dir(dir, sizeof dir, err) < 0) return TN_EINVAL;
  if (!config_dir) config_dir = dir;
  for (size_t i = 0; i < TN_ARRAY_LEN(aliases); i++)
    if (strcmp(name, aliases[i].alias) == 0) name = aliases[i].name;
  int rc = check_name(name, err);
  if (rc == 0) rc = read_target(config_dir, name, path, sizeof path, &text, &len, &missing, err);
  if (rc < 0 && missing) return unknown(name, config_dir, err);
  if (rc == 0 && (rc = tn_target_from_json(text, len, out, err)) < 0) tn_err_prefix(err, "%s", path);
  free(text);
  if (rc == 0 && strcmp(out->name, name) != 0)
    rc = tn_err_set(err, TN_EINVAL, "%s: \"name\" is \"%s\"; a target file's name must be its path under the "
                    "config directory without .json (\"%s\")", path, out->name, name);
  return rc;
}
