/* rehash.c — schema step 7 -> 8, the C between its two halves of SQL: the
 * identities of workloads and traces, once FNV-1a 64 (which anyone can make
 * collide), recomputed as BLAKE2b-256 (common/ident.c) from what each row
 * stores.  A workload's identity comes from its parsed source; a row whose
 * source no longer parses, or parses to a program whose old hash is not the
 * stored one (a row another version of tuned wrote, or one filed under a
 * forged hash), keeps its records under a "legacy" identity made from its
 * old hash and text, which no workload text hashes to. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_internal.h"
#include "ir/ir.h"

#define PAGE 256

/* The new identity of one stored workload. */
static void workload_identity(const char *old, const char *name, const char *source, const char *params,
                              char out[TN_ID_SIZE]) {
  ir_workload_t *w = NULL;
  bool ok = ir_workload_parse_stored(name, source, params, &w, NULL) == 0;
  if (ok) {
    char fnv[17];
    snprintf(fnv, sizeof fnv, "%016" PRIx64, ir_func_hash_fnv(w->func));
    ok = strcmp(fnv, old) == 0;
  }
  if (ok) {
    ir_func_hash(w->func, out);
  } else {
    const char *parts[] = {old, name, source, params};
    tn_id_ctx_t c;
    tn_id_init(&c, TN_ID_LEGACY);
    for (size_t i = 0; i < TN_ARRAY_LEN(parts); i++)
      tn_id_update(&c, parts[i] ? parts[i] : "", parts[i] ? strlen(parts[i]) + 1 : 1);
    tn_id_final(&c, out);
  }
  ir_workload_free(w);
}

/* One page of rows after id `after`: (id, new identity) pairs. */
typedef struct page {
  int64_t ids[PAGE];
  char hashes[PAGE][TN_ID_SIZE];
  int n;
} page_t;

static const char SQL_WORKLOADS[] =
    "SELECT id, hash, name, source, params FROM workloads WHERE id > ?1 ORDER BY id LIMIT ?2";
static const char SQL_RECORDS[] = "SELECT id, trace FROM records WHERE id > ?1 ORDER BY id LIMIT ?2";
static const char SQL_SET_WORKLOAD[] = "UPDATE workloads SET id_v8 = ?1 WHERE id = ?2";
static const char SQL_SET_RECORD[] = "UPDATE records SET trace_id_v8 = ?1 WHERE id = ?2";

/* Reads the page after `after` with `select` (workloads: true for the
 * workload query's columns), computing each row's identity. */
static int read_page(db_t *db, const char *select, bool workloads, int64_t after, page_t *p, tn_err_t *err) {
  db_st_t *st = db_prepare(db, select, err);
  if (!st) return err ? err->code : TN_EIO;
  db_bind_int(st, 1, after);
  db_bind_int(st, 2, PAGE);
  int rc;
  p->n = 0;
  while ((rc = db_step(st)) == DB_ROW) {
    p->ids[p->n] = db_col_int(st, 0);
    if (workloads)
      workload_identity(db_col_str(st, 1), db_col_str(st, 2), db_col_str(st, 3), db_col_str(st, 4),
                        p->hashes[p->n]);
    else
      db_trace_hash(db_col_str(st, 1), p->hashes[p->n]);
    p->n++;
  }
  int ret = rc == DB_DONE ? 0 : db_fail(db, err, workloads ? "reading workloads" : "reading records");
  db_finalize(st);
  return ret;
}

static int write_page(db_t *db, const char *update, const page_t *p, tn_err_t *err) {
  db_st_t *st = db_prepare(db, update, err);
  if (!st) return err ? err->code : TN_EIO;
  int rc = 0;
  for (int i = 0; i < p->n && !rc; i++) {
    db_bind_text(st, 1, p->hashes[i]);
    db_bind_int(st, 2, p->ids[i]);
    rc = db_step_done(db, st, "storing a new identity", err);
  }
  db_finalize(st);
  return rc;
}

/* Every row of a table, a page at a time (the pages' text never all in memory). */
static int rehash_table(db_t *db, const char *select, const char *update, bool workloads, tn_err_t *err) {
  page_t *p = tn_xmalloc(sizeof *p);
  int rc = 0;
  int64_t after = 0;
  do {
    rc = read_page(db, select, workloads, after, p, err);
    if (!rc) rc = write_page(db, update, p, err);
    if (p->n) after = p->ids[p->n - 1];
  } while (!rc && p->n == PAGE);
  free(p);
  return rc;
}

int db_rehash_v8(db_t *db, tn_err_t *err) {
  int rc = rehash_table(db, SQL_WORKLOADS, SQL_SET_WORKLOAD, true, err);
  if (!rc) rc = rehash_table(db, SQL_RECORDS, SQL_SET_RECORD, false, err);
  return rc ? tn_err_prefix(err, "recomputing identities") : 0;
}
