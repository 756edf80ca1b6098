/* hash.c — structural hash of a function: its identity (BLAKE2b-256 in
 * the TN_ID_WORKLOAD domain, common/ident.c) over a canonical byte stream,
 * so equal programs get equal identities on every machine and run and
 * nobody can make two programs share one.  The same stream through FNV-1a
 * 64 gives the hash older versions stored (the migration's check). */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tags that keep the byte stream unambiguous. */
enum {
  TAG_FUNC = 1, TAG_BUF_DECL, TAG_BUF_REF, TAG_VAR_DECL, TAG_VAR_REF, TAG_NULL,
  TAG_ANNOTS, TAG_REGION, TAG_ITER, TAG_PREDICATE, TAG_INIT, TAG_ALLOCS, TAG_CONST,
  TAG_EXPR = 0x100, /* + ir_expr_kind_t */
  TAG_STMT = 0x200, /* + ir_stmt_kind_t */
};

/* Numbers objects (vars or buffers) by first appearance.  Lookup goes through
 * the object's function-unique id; objects whose id is out of range or
 * shared with another object fall back to a linear scan. */
typedef struct numbering {
  const void **objs;
  int n, cap;
  int *by_id; /* id -> number, -1 if none */
  int nids;
} numbering_t;

/* The stream goes to the identity, or (fnv) to the old 64-bit hash. */
typedef struct hasher {
  bool fnv;
  uint64_t h;
  tn_id_ctx_t id;
  numbering_t vars, bufs;
} hasher_t;

static void numbering_init(numbering_t *m, int nids) {
  m->objs = NULL;
  m->n = m->cap = 0;
  m->nids = nids > 0 ? nids : 0;
  m->by_id = tn_xmalloc(sizeof(int) * (size_t)(m->nids + 1));
  for (int i = 0; i < m->nids; i++) m->by_id[i] = -1;
}

static void numbering_free(numbering_t *m) {
  free(m->objs);
  free(m->by_id);
}

/* Returns the object's number; *fresh tells whether it was just given. */
static int numbering_get(numbering_t *m, const void *obj, int id, bool *fresh) {
  bool id_ok = id >= 0 && id < m->nids;
  *fresh = false;
  if (id_ok && m->by_id[id] >= 0 && m->objs[m->by_id[id]] == obj) return m->by_id[id];
  if (!id_ok || m->by_id[id] >= 0)
    for (int i = 0; i < m->n; i++)
      if (m->objs[i] == obj) return i;
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 32;
    m->objs = tn_xrealloc(m->objs, sizeof(*m->objs) * (size_t)m->cap);
  }
  if (id_ok && m->by_id[id] < 0) m->by_id[id] = m->n;
  m->objs[m->n] = obj;
  *fresh = true;
  return m->n++;
}

/* ---- primitive feeds --------------------------------------------------- */

static void put_bytes(hasher_t *hs, const void *p, size_t n) {
  if (hs->fnv)
    hs->h = tn_fnv1a(hs->h, p, n);
  else
    tn_id_update(&hs->id, p, n);
}

/* 8 little-endian bytes, on every machine */
static void put_u64(hasher_t *hs, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  put_bytes(hs, b, sizeof b);
}
static void put_i64(hasher_t *hs, int64_t v) { put_u64(hs, (uint64_t)v); }

/* the bytes and the NUL: "ab"+"c" differs from "a"+"bc" */
static void put_str(hasher_t *hs, const char *s) {
  put_u64(hs, s != NULL);
  if (s) put_bytes(hs, s, strlen(s) + 1);
}

/* IEEE bits, with -0.0 as 0.0 and every NaN as the quiet NaN. */
static void put_double(hasher_t *hs, double v) {
  uint64_t bits;
  if (isnan(v)) {
    bits = UINT64_C(0x7ff8000000000000);
  } else {
    if (v == 0) v = 0.0;
    memcpy(&bits, &v, sizeof bits);
  }
  put_u64(hs, bits);
}

/* ---- variables and buffers --------------------------------------------- */

static void put_var(hasher_t *hs, const ir_var_t *v) {
  bool fresh;
  int n = numbering_get(&hs->vars, v, v->id, &fresh);
  put_u64(hs, fresh ? TAG_VAR_DECL : TAG_VAR_REF);
  put_i64(hs, n);
  if (fresh) put_u64(hs, v->dtype);
}

/* A buffer's first appearance (its declaration: params, then allocs) hashes
 * its whole description; later ones its number. */
static void put_buf(hasher_t *hs, const ir_buffer_t *b) {
  bool fresh;
  int n = numbering_get(&hs->bufs, b, b->id, &fresh);
  put_u64(hs, fresh ? TAG_BUF_DECL : TAG_BUF_REF);
  put_i64(hs, n);
  if (!fresh) return;
  put_str(hs, b->name);
  put_u64(hs, b->dtype);
  put_i64(hs, b->ndim);
  for (int i = 0; i < b->ndim; i++) put_i64(hs, b->shape[i]);
  put_u64(hs, b->scope);
  put_u64(hs, b->role);
  put_double(hs, b->init_lo);
  put_double(hs, b->init_hi);
  /* only when set, so that the hashes of workloads without it stay as they
   * were; when set, the records may hold kernels with a hoisted packing
   * (an extra argument), which must not answer the plain workload */
  if (b->is_const) put_u64(hs, TAG_CONST);
}

/* ---- expressions ------------------------------------------------------- */

static void put_expr(hasher_t *hs, const ir_expr_t *e) {
  if (!e) {
    put_u64(hs, TAG_NULL);
    return;
  }
  put_u64(hs, TAG_EXPR + (uint64_t)e->kind);
  put_u64(hs, e->dtype);
  switch (e->kind) {
  case IR_E_INT: put_i64(hs, e->u.ival); break;
  case IR_E_FLOAT: put_double(hs, e->u.fval); break;
  case IR_E_VAR: put_var(hs, e->u.var); break;
  case IR_E_LOAD:
    put_buf(hs, e->u.load.buf);
    put_i64(hs, e->u.load.n);
    for (int i = 0; i < e->u.load.n; i++) put_expr(hs, e->u.load.idx[i]);
    break;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: put_expr(hs, e->u.un); break;
  case IR_E_SELECT:
    put_expr(hs, e->u.sel.cond);
    put_expr(hs, e->u.sel.t);
    put_expr(hs, e->u.sel.f);
    break;
  case IR_E_CALL:
    put_u64(hs, e->u.call.fn);
    put_i64(hs, e->u.call.n);
    for (int i = 0; i < e->u.call.n; i++) put_expr(hs, e->u.call.args[i]);
    break;
  default:
    put_expr(hs, e->u.bin.a);
    put_expr(hs, e->u.bin.b);
    break;
  }
}

/* ---- statements -------------------------------------------------------- */

/* Annotations in key order, so insertion order does not matter. */
static void put_annots(hasher_t *hs, const ir_annot_t *a, int n) {
  put_u64(hs, TAG_ANNOTS);
  put_i64(hs, n);
  int *order = tn_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  ir_annot_order(a, n, order);
  for (int i = 0; i < n; i++) {
    const ir_annot_t *an = &a[order[i]];
    put_str(hs, an->key);
    put_u64(hs, an->is_str);
    if (an->is_str)
      put_str(hs, an->sval);
    else
      put_i64(hs, an->ival);
  }
  free(order);
}

static void put_regions(hasher_t *hs, const ir_region_t *rs, int n) {
  put_i64(hs, n);
  for (int i = 0; i < n; i++) {
    put_u64(hs, TAG_REGION);
    put_buf(hs, rs[i].buf);
    for (int d = 0; d < rs[i].buf->ndim; d++) {
      put_expr(hs, rs[i].dims[d].min);
      put_expr(hs, rs[i].dims[d].extent);
    }
  }
}

static void put_stmt(hasher_t *hs, const ir_stmt_t *s);

/* Allocations come first so that buffers are numbered where declared. */
static void put_block(hasher_t *hs, const ir_block_t *b) {
  put_str(hs, b->name);
  put_u64(hs, TAG_ALLOCS);
  put_i64(hs, b->nallocs);
  for (int i = 0; i < b->nallocs; i++) put_buf(hs, b->allocs[i]);
  put_i64(hs, b->niters);
  for (int i = 0; i < b->niters; i++) {
    put_u64(hs, TAG_ITER);
    put_u64(hs, b->iters[i].kind);
    put_i64(hs, b->iters[i].extent);
    put_var(hs, b->iters[i].var);
    put_expr(hs, b->iters[i].binding);
  }
  put_u64(hs, TAG_PREDICATE);
  put_expr(hs, b->predicate);
  put_regions(hs, b->reads, b->nreads);
  put_regions(hs, b->writes, b->nwrites);
  put_annots(hs, b->annots, b->nannots);
  put_u64(hs, TAG_INIT);
  put_stmt(hs, b->init);
  put_stmt(hs, b->body);
}

static void put_stmt(hasher_t *hs, const ir_stmt_t *s) {
  if (!s) {
    put_u64(hs, TAG_NULL);
    return;
  }
  put_u64(hs, TAG_STMT + (uint64_t)s->kind);
  switch (s->kind) {
  case IR_S_SEQ:
    put_i64(hs, s->u.seq.n);
    for (int i = 0; i < s->u.seq.n; i++) put_stmt(hs, s->u.seq.items[i]);
    break;
  case IR_S_LOOP: {
    const ir_loop_t *l = &s->u.loop;
    put_var(hs, l->var);
    put_i64(hs, l->extent);
    put_u64(hs, l->kind);
    put_str(hs, l->kind == IR_LOOP_THREAD ? ir_thread_tag_name(l->tag) : NULL);
    put_annots(hs, l->annots, l->nannots);
    put_stmt(hs, l->body);
    break;
  }
  case IR_S_BLOCK: put_block(hs, &s->u.block); break;
  case IR_S_STORE:
    put_buf(hs, s->u.store.buf);
    put_i64(hs, s->u.store.n);
    for (int i = 0; i < s->u.store.n; i++) put_expr(hs, s->u.store.idx[i]);
    put_expr(hs, s->u.store.value);
    break;
  }
}

static void put_func(hasher_t *hs, const ir_func_t *f) {
  numbering_init(&hs->vars, f->next_var_id);
  numbering_init(&hs->bufs, f->next_buf_id);
  put_u64(hs, TAG_FUNC);
  put_str(hs, f->name);
  put_i64(hs, f->nparams);
  for (int i = 0; i < f->nparams; i++) put_buf(hs, f->params[i]);
  put_stmt(hs, f->root);
  numbering_free(&hs->vars);
  numbering_free(&hs->bufs);
}

void ir_func_hash(const ir_func_t *f, char out[TN_ID_SIZE]) {
  hasher_t hs = {.fnv = false};
  tn_id_init(&hs.id, TN_ID_WORKLOAD);
  put_func(&hs, f);
  tn_id_final(&hs.id, out);
}

uint64_t ir_func_hash_fnv(const ir_func_t *f) {
  hasher_t hs = {.fnv = true, .h = TN_FNV_INIT};
  put_func(&hs, f);
  return hs.h;
}
