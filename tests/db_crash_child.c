/* db_crash_child.c — helper for the db suite's crash test: commits batches of
 * records in a loop and prints "committed N" after each COMMIT, until the
 * parent SIGKILLs it.  Usage: db_crash_child DB RUN BATCH_SIZE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

static int fail(const char *what, const tn_err_t *err) {
  fprintf(stderr, "db_crash_child: %s: %s\n", what, err->msg);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: db_crash_child DB RUN BATCH_SIZE\n");
    return 2;
  }
  int run = atoi(argv[2]), size = atoi(argv[3]);
  if (size <= 0 || size > 100000) return 2;
  tn_err_t err = {0};
  db_t *db = NULL;
  if (db_open(argv[1], &db, &err)) return fail("open", &err);
  int64_t wid = 0, tid = 0;
  db_workload_t w = {.hash = "00000000000000000000000000000000000000000000000000000000000c0a5e", .name = "crash", .source = "x"};
  db_target_t t = {.name = "cpu", .kind = "cpu"};
  if (db_workload_upsert(db, &w, &wid, &err)) return fail("workload", &err);
  if (db_target_upsert(db, &t, &tid, &err)) return fail("target", &err);

  db_record_t *recs = calloc((size_t)size, sizeof *recs);
  char (*traces)[320] = calloc((size_t)size, sizeof *traces);
  double runs[3];
  char pad[257];
  memset(pad, 'p', 256);
  pad[256] = 0;
  for (int batch = 0; batch < 1000000; batch++) {
    for (int i = 0; i < size; i++) {
      snprintf(traces[i], sizeof traces[i], "{\"run\":%d,\"batch\":%d,\"i\":%d,\"pad\":\"%s\"}",
               run, batch, i, pad);
      db_record_init(&recs[i]);
      recs[i].workload_id = wid;
      recs[i].target_id = tid;
      recs[i].trace = traces[i];
      runs[0] = runs[1] = runs[2] = 1e-3 * (i + 1);
      recs[i].run_secs = runs;
      recs[i].n_runs = 3;
      recs[i].median_secs = runs[1];
      recs[i].verified = true;
    }
    if (db_record_add_batch(db, recs, (size_t)size, NULL, &err)) return fail("batch", &err);
    printf("committed %d\n", batch);
    fflush(stdout);
  }
  db_close(db);
  return 0;
}
