/* sqlite_fault.c — a test-only SQLite VFS that fails chosen I/O calls, for
 * fault-injection tests of everything that writes the database (tuned
 * installs it when $TUNED_TEST_SQLITE_FAULT is set).  It wraps the default
 * VFS, counts every xOpen, xWrite and xSync of every file SQLite opens
 * through it (database, WAL, journal), and fails the Nth call of one kind
 * with SQLITE_IOERR or SQLITE_FULL: that call only, or from it on (a disk
 * gone bad for good).  Nothing else about the default VFS changes. */
#include "db/sqlite_fault.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OP_OPEN, OP_WRITE, OP_SYNC, OP__COUNT } fault_op_t;
static const char *const op_names[OP__COUNT] = {"open", "write", "sync"};

static struct {
  pthread_mutex_t mu;
  sqlite3_vfs vfs;    /* ours: the default's functions, our xOpen */
  sqlite3_vfs *real;  /* the default VFS it wraps */
  fault_op_t op;      /* the kind of call that fails */
  long long nth;      /* the first failing call of that kind (1-based; 0: none) */
  bool sticky;        /* every later call of that kind fails too */
  int code;           /* SQLITE_IOERR or SQLITE_FULL */
  long long count[OP__COUNT];
  long long failed;   /* calls failed so far */
  char counts_path[512];
} fv = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A file of ours: the wrapped file follows it in the same allocation. */
typedef struct fault_file {
  sqlite3_file base;
  sqlite3_file *real;
} fault_file_t;

/* Counts one call of kind op; whether it must fail. */
static bool hit(fault_op_t op) {
  pthread_mutex_lock(&fv.mu);
  long long n = ++fv.count[op];
  bool fail = op == fv.op && fv.nth > 0 && (n == fv.nth || (fv.sticky && n > fv.nth));
  if (fail) fv.failed++;
  pthread_mutex_unlock(&fv.mu);
  return fail;
}

static int io_error(fault_op_t op) {
  if (fv.code == SQLITE_FULL) return SQLITE_FULL;
  return op == OP_WRITE ? SQLITE_IOERR_WRITE : op == OP_SYNC ? SQLITE_IOERR_FSYNC : SQLITE_IOERR;
}

#define REAL(f) (((fault_file_t *)(f))->real)

static int f_close(sqlite3_file *f) {
  int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
  f->pMethods = NULL;
  return rc;
}
static int f_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
  return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}
static int f_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
  return hit(OP_WRITE) ? io_error(OP_WRITE) : REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size) { return REAL(f)->pMethods->xTruncate(REAL(f), size); }
static int f_sync(sqlite3_file *f, int flags) {
  return hit(OP_SYNC) ? io_error(OP_SYNC) : REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size) { return REAL(f)->pMethods->xFileSize(REAL(f), size); }
static int f_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_reserved(sqlite3_file *f, int *out) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out); }
static int f_control(sqlite3_file *f, int op, void *arg) { return REAL(f)->pMethods->xFileControl(REAL(f), op, arg); }
static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_chars(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **out) {
  return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, extend, out);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags) {
  return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shm_unmap(sqlite3_file *f, int del) { return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out) {
  return REAL(f)->pMethods->xFetch(REAL(f), off, n, out);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) { return REAL(f)->pMethods->xUnfetch(REAL(f), off, p); }

/* Version 3 methods for files whose real methods are version 3 (the unix
 * VFS's), version 1 (no shared memory, no mmap) for the others. */
#define METHODS(v)                                                                                         \
  {.iVersion = v, .xClose = f_close, .xRead = f_read, .xWrite = f_write, .xTruncate = f_truncate, .xSync = f_sync, \
   .xFileSize = f_size, .xLock = f_lock, .xUnlock = f_unlock, .xCheckReservedLock = f_reserved,                  \
   .xFileControl = f_control, .xSectorSize = f_sector, .xDeviceCharacteristics = f_chars,                        \
   .xShmMap = v >= 2 ? f_shm_map : NULL, .xShmLock = v >= 2 ? f_shm_lock : NULL,                                 \
   .xShmBarrier = v >= 2 ? f_shm_barrier : NULL, .xShmUnmap = v >= 2 ? f_shm_unmap : NULL,                      \
   .xFetch = v >= 3 ? f_fetch : NULL, .xUnfetch = v >= 3 ? f_unfetch : NULL}
static const sqlite3_io_methods methods3 = METHODS(3), methods1 = METHODS(1);

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags) {
  (void)vfs;
  fault_file_t *ff = (fault_file_t *)f;
  ff->real = (sqlite3_file *)(ff + 1);
  f->pMethods = NULL;
  if (hit(OP_OPEN)) return fv.code == SQLITE_FULL ? SQLITE_FULL : SQLITE_CANTOPEN;
  int rc = fv.real->xOpen(fv.real, name, ff->real, flags, out_flags);
  if (ff->real->pMethods) f->pMethods = ff->real->pMethods->iVersion >= 3 ? &methods3 : &methods1;
  return rc;
}

/* Writes how many calls of each kind were made (and failed) to the counts
 * file: at exit, so that a test learns how many writes a run makes. */
static void write_counts(void) {
  FILE *f = fopen(fv.counts_path, "w");
  if (!f) return;
  pthread_mutex_lock(&fv.mu);
  fprintf(f, "open %lld\nwrite %lld\nsync %lld\nfailed %lld\n", fv.count[OP_OPEN], fv.count[OP_WRITE],
          fv.count[OP_SYNC], fv.failed);
  pthread_mutex_unlock(&fv.mu);
  fclose(f);
}

/* "write:12:full", "sync:3+:ioerr", "open:0" (count only). */
static int parse_spec(const char *spec, tn_err_t *err) {
  char op[16] = "", code[16] = "ioerr", plus = 0;
  long long n = -1;
  int k = sscanf(spec, "%15[a-z]:%lld%c", op, &n, &plus);
  const char *rest = strchr(spec, ':') ? strchr(strchr(spec, ':') + 1, ':') : NULL;
  if (rest) sscanf(rest + 1, "%15s", code);
  fv.op = OP__COUNT;
  for (int i = 0; i < OP__COUNT; i++)
    if (strcmp(op, op_names[i]) == 0) fv.op = (fault_op_t)i;
  fv.sticky = k == 3 && plus == '+';
  fv.code = strcmp(code, "full") == 0 ? SQLITE_FULL : strcmp(code, "ioerr") == 0 ? SQLITE_IOERR : -1;
  if (k < 2 || fv.op == OP__COUNT || n < 0 || fv.code < 0 || (k == 3 && plus != '+' && plus != ':'))
    return tn_err_set(err, TN_EINVAL,
                      "SQLite fault spec '%s': expected OP:N[+][:CODE] with OP open, write or sync, N >= 0 "
                      "(0: count only), + for every call from the Nth on, CODE ioerr (default) or full",
                      spec);
  fv.nth = n;
  return TN_OK;
}

int db_fault_vfs_install(const char *spec, const char *counts_path, tn_err_t *err) {
  if (fv.real) return tn_err_set(err, TN_ESTATE, "the SQLite fault VFS is installed already");
  int rc = parse_spec(spec, err);
  if (rc) return rc;
  if (sqlite3_initialize() != SQLITE_OK || !(fv.real = sqlite3_vfs_find(NULL)))
    return tn_err_set(err, TN_EIO, "SQLite has no default VFS to wrap");
  fv.vfs = *fv.real;
  fv.vfs.zName = "tuned-fault";
  fv.vfs.pNext = NULL;
  fv.vfs.szOsFile = (int)sizeof(fault_file_t) + fv.real->szOsFile;
  fv.vfs.xOpen = f_open;
  if (sqlite3_vfs_register(&fv.vfs, 1) != SQLITE_OK) {
    fv.real = NULL;
    return tn_err_set(err, TN_EIO, "sqlite3_vfs_register failed");
  }
  if (counts_path && *counts_path) {
    snprintf(fv.counts_path, sizeof fv.counts_path, "%s", counts_path);
    atexit(write_counts);
  }
  return TN_OK;
}
