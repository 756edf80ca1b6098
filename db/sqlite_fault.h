/* sqlite_fault.h — a test-only SQLite VFS that fails the Nth open, write or
 * fsync (sqlite_fault.c); tuned installs it when $TUNED_TEST_SQLITE_FAULT
 * is set, for the fault-injection tests. */
#ifndef TUNED_DB_SQLITE_FAULT_H
#define TUNED_DB_SQLITE_FAULT_H

#include "common/common.h"

/* Makes the fault VFS SQLite's default (before any database is opened).
 * spec: "OP:N[+][:CODE]": OP open, write or sync; the Nth such call of the
 * process (1-based; 0: none, only count) fails, and with "+" every later
 * one too; CODE ioerr (SQLITE_IOERR_WRITE, _FSYNC; SQLITE_CANTOPEN for an
 * open; the default) or full (SQLITE_FULL).  counts_path (NULL: none) gets
 * the number of calls of each kind, and of failed ones, at exit. */
int db_fault_vfs_install(const char *spec, const char *counts_path, tn_err_t *err);

#endif
