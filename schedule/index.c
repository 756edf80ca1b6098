/* index.c — a lookup index over a schedule's function: statements by uid
 * with their parents, blocks by name, and the blocks reading and writing
 * each buffer.  One walk builds it when first asked; every instruction that
 * changes the tree drops it, except compute_inline, which keeps it current.
 * Replaying a trace that gets and inlines n blocks one after another (a
 * chain of elementwise blocks) then costs n lookups instead of n walks of
 * the whole tree per block. */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* ---- open-addressing maps ------------------------------------------------- */

static size_t ptr_hash(const void *p) { return (size_t)tn_fnv1a_u64(TN_FNV_INIT, (uint64_t)(uintptr_t)p); }

/* stmt -> parent (NULL for the root); capacity a power of two, at most half full. */
static void parent_put(sch_index_t *x, const ir_stmt_t *s, ir_stmt_t *parent) {
  size_t mask = x->pcap - 1;
  for (size_t i = ptr_hash(s) & mask;; i = (i + 1) & mask)
    if (!x->pkeys[i] || x->pkeys[i] == s) {
      x->pkeys[i] = s;
      x->pvals[i] = parent;
      return;
    }
}

ir_stmt_t *sch_index_parent(const sch_index_t *x, const ir_stmt_t *s) {
  size_t mask = x->pcap - 1;
  for (size_t i = ptr_hash(s) & mask; x->pkeys[i]; i = (i + 1) & mask)
    if (x->pkeys[i] == s) return x->pvals[i];
  return NULL;
}

static void name_put(sch_index_t *x, ir_stmt_t *b) {
  size_t mask = x->ncap - 1;
  for (size_t i = tn_fnv1a_str(TN_FNV_INIT, b->u.block.name) & mask;; i = (i + 1) & mask) {
    if (!x->names[i]) {
      x->names[i] = b;
      return;
    }
    if (strcmp(x->names[i]->u.block.name, b->u.block.name) == 0) {
      x->dup_names = true; /* the first in tree order stays, as ir_func_find_block finds it */
      return;
    }
  }
}

/* The slot of the named block, or of the empty entry where it would go. */
static size_t name_slot(const sch_index_t *x, const char *name) {
  size_t mask = x->ncap - 1, i = tn_fnv1a_str(TN_FNV_INIT, name) & mask;
  while (x->names[i] && strcmp(x->names[i]->u.block.name, name) != 0) i = (i + 1) & mask;
  return i;
}

/* Removes the entry at slot i and re-places the entries of its run after it
 * (linear probing has no tombstones). */
static void name_del(sch_index_t *x, size_t i) {
  size_t mask = x->ncap - 1;
  x->names[i] = NULL;
  for (size_t j = (i + 1) & mask; x->names[j]; j = (j + 1) & mask) {
    ir_stmt_t *b = x->names[j];
    x->names[j] = NULL;
    name_put(x, b);
  }
}

/* ---- the blocks using each buffer ----------------------------------------- */

static void list_add(sch_blist_t *l, ir_block_t *b) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == b) return;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 4;
    l->v = tn_xrealloc(l->v, sizeof *l->v * (size_t)l->cap);
  }
  l->v[l->n++] = b;
}

static void list_del(sch_blist_t *l, const ir_block_t *b) {
  int k = 0;
  for (int i = 0; i < l->n; i++)
    if (l->v[i] != b) l->v[k++] = l->v[i];
  l->n = k;
}

static sch_buf_users_t *users_of(sch_index_t *x, const ir_buffer_t *buf) {
  if (buf->id >= x->nbufs) { /* a buffer made since the build (none today: such instructions drop the index) */
    int n = TN_MAX(buf->id + 1, 2 * x->nbufs);
    x->bufs = tn_xrealloc(x->bufs, sizeof *x->bufs * (size_t)n);
    memset(x->bufs + x->nbufs, 0, sizeof *x->bufs * (size_t)(n - x->nbufs));
    x->nbufs = n;
  }
  return &x->bufs[buf->id];
}

const sch_buf_users_t *sch_index_users(sch_index_t *x, const ir_buffer_t *buf) { return users_of(x, buf); }

/* Records the buffers block b reads and writes (by its regions). */
static void add_uses(sch_index_t *x, ir_block_t *b) {
  for (int r = 0; r < b->nreads; r++) list_add(&users_of(x, b->reads[r].buf)->readers, b);
  for (int w = 0; w < b->nwrites; w++) list_add(&users_of(x, b->writes[w].buf)->writers, b);
}

static void drop_uses(sch_index_t *x, const ir_block_t *b) {
  for (int r = 0; r < b->nreads; r++) list_del(&users_of(x, b->reads[r].buf)->readers, b);
  for (int w = 0; w < b->nwrites; w++) list_del(&users_of(x, b->writes[w].buf)->writers, b);
}

/* ---- build ---------------------------------------------------------------- */

static int count_stmts(const ir_stmt_t *s) {
  if (!s || s->kind == IR_S_STORE) return 0;
  switch (s->kind) {
  case IR_S_SEQ: {
    int n = 1;
    for (int i = 0; i < s->u.seq.n; i++) n += count_stmts(s->u.seq.items[i]);
    return n;
  }
  case IR_S_LOOP: return 1 + count_stmts(s->u.loop.body);
  default: return 1 + count_stmts(s->u.block.body);
  }
}

static void build_rec(sch_index_t *x, ir_stmt_t *s, ir_stmt_t *parent) {
  if (!s || s->kind == IR_S_STORE) return;
  parent_put(x, s, parent);
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) build_rec(x, s->u.seq.items[i], s);
    break;
  case IR_S_LOOP:
    if (s->u.loop.uid >= 0 && s->u.loop.uid < x->nuid) x->by_uid[s->u.loop.uid] = s;
    build_rec(x, s->u.loop.body, s);
    break;
  default:
    if (s->u.block.uid >= 0 && s->u.block.uid < x->nuid) x->by_uid[s->u.block.uid] = s;
    name_put(x, s);
    add_uses(x, &s->u.block);
    build_rec(x, s->u.block.body, s);
    break;
  }
}

static size_t pow2_above(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

sch_index_t *sch_index_get(sch_t *s) {
  if (s->idx && s->idx->f == s->f) return s->idx;
  sch_index_drop(s);
  sch_index_t *x = tn_xcalloc(1, sizeof *x);
  x->f = s->f;
  x->nuid = s->f->next_uid;
  x->by_uid = tn_xcalloc((size_t)x->nuid + 1, sizeof *x->by_uid);
  size_t nstmts = (size_t)count_stmts(s->f->root);
  x->pcap = pow2_above(nstmts);
  x->pkeys = tn_xcalloc(x->pcap, sizeof *x->pkeys);
  x->pvals = tn_xcalloc(x->pcap, sizeof *x->pvals);
  x->ncap = pow2_above(nstmts);
  x->names = tn_xcalloc(x->ncap, sizeof *x->names);
  x->nbufs = s->f->next_buf_id;
  x->bufs = tn_xcalloc((size_t)x->nbufs + 1, sizeof *x->bufs);
  build_rec(x, s->f->root, NULL);
  return s->idx = x;
}

void sch_index_drop(sch_t *s) {
  sch_index_t *x = s->idx;
  if (!x) return;
  for (int i = 0; i < x->nbufs; i++) {
    free(x->bufs[i].readers.v);
    free(x->bufs[i].writers.v);
  }
  free(x->bufs);
  free(x->by_uid);
  free(x->pkeys);
  free(x->pvals);
  free(x->names);
  free(x);
  s->idx = NULL;
}

/* ---- queries -------------------------------------------------------------- */

ir_stmt_t *sch_index_find(const sch_index_t *x, int uid) { return uid >= 0 && uid < x->nuid ? x->by_uid[uid] : NULL; }

ir_stmt_t *sch_index_block_named(sch_t *s, const char *name) {
  sch_index_t *x = sch_index_get(s);
  if (x->dup_names) return ir_func_find_block(s->f, name);
  return x->names[name_slot(x, name)];
}

ir_stmt_t **sch_index_slot(const sch_index_t *x, ir_stmt_t *s) {
  ir_stmt_t *p = sch_index_parent(x, s);
  if (!p) return NULL;
  switch (p->kind) {
  case IR_S_LOOP: return &p->u.loop.body;
  case IR_S_BLOCK: return &p->u.block.body;
  case IR_S_SEQ:
    for (int i = 0; i < p->u.seq.n; i++)
      if (p->u.seq.items[i] == s) return &p->u.seq.items[i];
    return NULL;
  default: return NULL;
  }
}

/* ---- updates by compute_inline --------------------------------------------- */

void sch_index_block_rewritten(sch_index_t *x, ir_block_t *b) { add_uses(x, b); }

void sch_index_subtree_removed(sch_index_t *x, ir_stmt_t *s) {
  if (!s || s->kind == IR_S_STORE) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) sch_index_subtree_removed(x, s->u.seq.items[i]);
    break;
  case IR_S_LOOP:
    if (sch_index_find(x, s->u.loop.uid) == s) x->by_uid[s->u.loop.uid] = NULL;
    sch_index_subtree_removed(x, s->u.loop.body);
    break;
  default: {
    ir_block_t *b = &s->u.block;
    if (sch_index_find(x, b->uid) == s) x->by_uid[b->uid] = NULL;
    size_t i = name_slot(x, b->name);
    if (x->names[i] == s) name_del(x, i);
    drop_uses(x, b);
    sch_index_subtree_removed(x, b->body);
    break;
  }
  }
}

void sch_index_reparent(sch_index_t *x, const ir_stmt_t *s, ir_stmt_t *parent) { parent_put(x, s, parent); }
