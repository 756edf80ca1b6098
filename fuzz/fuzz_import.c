/* fuzz_import.c — libFuzzer entry point for JSON-lines import: each input
 * is a file for `tunectl import`, merged by the daemon's checked import
 * (td_import_jsonl: workload hashes checked, traces replayed) into a
 * temporary SQLite database created once per process.  Each input runs in
 * a transaction that is rolled back afterwards, so every input meets the
 * same empty database.  Checked: a refusal names its line; an accepted file
 * imported again, and the export of what it added, are all duplicates. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/td.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static db_t *db;
static char dir[64];

static void remove_db(void) {
  db_close(db);
  char path[128];
  static const char *const files[] = {"fuzz.db", "fuzz.db-wal", "fuzz.db-shm"};
  for (size_t i = 0; i < TN_ARRAY_LEN(files); i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%.40s/fuzz-import-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  char path[128];
  tn_err_t err = {0};
  if (!mkdtemp(dir) || (snprintf(path, sizeof path, "%s/fuzz.db", dir), db_open(path, &db, &err)) != 0) {
    fprintf(stderr, "fuzz_import: cannot create a database in %s: %s\n", dir, err.msg);
    abort();
  }
  atexit(remove_db);
  return 0;
}

static void fail(const char *what, const tn_err_t *err, const db_import_stats_t *a, const db_import_stats_t *b) {
  fprintf(stderr, "fuzz_import: FAILURE: %s (%s)\n", what, err->msg);
  if (a) fprintf(stderr, "  first:  lines=%zu inserted=%zu duplicates=%zu\n", a->lines, a->inserted, a->duplicates);
  if (b) fprintf(stderr, "  second: lines=%zu inserted=%zu duplicates=%zu workloads_added=%zu targets_added=%zu\n",
                 b->lines, b->inserted, b->duplicates, b->workloads_added, b->targets_added);
  abort();
}

/* Importing `text` again adds nothing: every record is a duplicate. */
static void check_again(const char *what, const char *text, size_t len, size_t records,
                        const db_import_stats_t *first) {
  db_import_stats_t st;
  tn_err_t err = {0};
  if (td_import_jsonl(db, text, len, &st, &err) != 0) fail(what, &err, first, NULL);
  if (st.inserted != 0 || st.duplicates != records || st.workloads_added || st.targets_added)
    fail(what, &err, first, &st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tn_err_t err = {0};
  if (db_tx_begin(db, &err) != 0) fail("cannot start the outer transaction", &err, NULL, NULL);
  db_import_stats_t st;
  const char *text = (const char *)data;
  int rc = td_import_jsonl(db, text, size, &st, &err);
  if (rc == 0) {
    if (st.inserted + st.duplicates != st.lines) fail("records do not add up to the lines", &err, &st, NULL);
    check_again("importing the same lines again", text, size, st.lines, &st);
    tn_buf_t out;
    tn_buf_init(&out);
    if (db_export_jsonl(db, NULL, &out, &err) != 0) fail("export after an import", &err, &st, NULL);
    check_again("importing the export", out.data ? out.data : "", out.len, st.inserted, &st);
    tn_buf_free(&out);
  } else {
    char prefix[48];
    snprintf(prefix, sizeof prefix, "line %d: ", err.line);
    if (rc > 0 || err.line < 1 || strncmp(err.msg, prefix, strlen(prefix)) != 0 || st.lines || st.inserted)
      fail("a refusal that does not name its line", &err, NULL, NULL);
  }
  db_tx_rollback(db);
  return 0;
}
