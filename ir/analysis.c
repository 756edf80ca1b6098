/* analysis.c — paths, enclosing loops, scopes, block lists and data flow
 * over a function's tree. */
#include "ir/analysis.h"

#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static void path_push(ir_path_t *p, ir_stmt_t **slot) {
  if (!p->stmts) {
    p->stmts = p->stmts_in, p->slots = p->slots_in, p->cap = IR_PATH_INLINE;
  } else if (p->n == p->cap) {
    p->cap *= 2;
    if (p->stmts == p->stmts_in) {
      p->stmts = memcpy(tn_xmalloc(sizeof p->stmts[0] * (size_t)p->cap), p->stmts_in, sizeof p->stmts_in);
      p->slots = memcpy(tn_xmalloc(sizeof p->slots[0] * (size_t)p->cap), p->slots_in, sizeof p->slots_in);
    } else {
      p->stmts = tn_xrealloc(p->stmts, sizeof p->stmts[0] * (size_t)p->cap);
      p->slots = tn_xrealloc(p->slots, sizeof p->slots[0] * (size_t)p->cap);
    }
  }
  p->stmts[p->n] = *slot;
  p->slots[p->n] = slot;
  p->n++;
}

static bool path_rec(ir_stmt_t **slot, int uid, ir_path_t *p) {
  ir_stmt_t *s = *slot;
  if (!s) return false;
  path_push(p, slot);
  if ((s->kind == IR_S_LOOP && s->u.loop.uid == uid) || (s->kind == IR_S_BLOCK && s->u.block.uid == uid))
    return true;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++)
      if (path_rec(&s->u.seq.items[i], uid, p)) return true;
    break;
  case IR_S_LOOP:
    if (path_rec(&s->u.loop.body, uid, p)) return true;
    break;
  case IR_S_BLOCK:
    if (path_rec(&s->u.block.body, uid, p)) return true;
    break;
  case IR_S_STORE: break;
  }
  p->n--;
  return false;
}

bool ir_path_find(const ir_func_t *f, int uid, ir_path_t *p) {
  p->n = 0;
  return path_rec((ir_stmt_t **)&f->root, uid, p);
}

void ir_path_free(ir_path_t *p) {
  if (p->stmts != p->stmts_in) {
    free(p->stmts);
    free(p->slots);
  }
  p->stmts = NULL, p->slots = NULL, p->n = p->cap = 0;
}

int ir_path_scope(const ir_path_t *p) {
  for (int i = p->n - 2; i >= 0; i--)
    if (p->stmts[i]->kind == IR_S_BLOCK) return i;
  return -1;
}

void ir_bounds_add_path(ir_bounds_t *b, const ir_path_t *p, int upto) {
  for (int i = 0; i < upto && i < p->n; i++)
    if (p->stmts[i]->kind == IR_S_LOOP) ir_bounds_set(b, p->stmts[i]->u.loop.var, 0, p->stmts[i]->u.loop.extent - 1);
}

int ir_enclosing_loops(const ir_func_t *f, int uid, ir_loop_t ***out) {
  ir_path_t p = {0};
  *out = NULL;
  int n = 0;
  if (ir_path_find(f, uid, &p)) {
    int start = ir_path_scope(&p) + 1;
    for (int i = start; i < p.n - 1; i++)
      if (p.stmts[i]->kind == IR_S_LOOP) n++;
    if (n) {
      *out = tn_xmalloc(sizeof(ir_loop_t *) * (size_t)n);
      n = 0;
      for (int i = start; i < p.n - 1; i++)
        if (p.stmts[i]->kind == IR_S_LOOP) (*out)[n++] = &p.stmts[i]->u.loop;
    }
  }
  ir_path_free(&p);
  return n;
}

ir_block_t *ir_scope_block(const ir_func_t *f, int uid) {
  ir_path_t p = {0};
  int at = ir_path_find(f, uid, &p) ? ir_path_scope(&p) : -1;
  ir_block_t *b = at >= 0 ? &p.stmts[at]->u.block : NULL;
  ir_path_free(&p);
  return b;
}

/* ---- blocks ---------------------------------------------------------------- */

typedef struct collect {
  ir_block_t **out;
  int max, n, cap; /* cap > 0: out grows (ir_blocks) */
  bool shallow;
  const ir_stmt_t *top;
} collect_t;

static bool collect_visit(ir_stmt_t *s, void *p) {
  collect_t *c = p;
  if (s->kind != IR_S_BLOCK || s == c->top) return s->kind != IR_S_STORE;
  if (c->cap && c->n == c->cap) {
    c->cap *= 2;
    c->out = tn_xrealloc(c->out, sizeof c->out[0] * (size_t)c->cap);
    c->max = c->cap;
  }
  if (c->n < c->max) c->out[c->n] = &s->u.block;
  c->n++;
  return !c->shallow;
}

/* Blocks under s in pre-order, top excluded, into a growing array. */
static int blocks_grown(ir_stmt_t *s, bool shallow, const ir_stmt_t *top, ir_block_t ***out) {
  collect_t c = {.out = tn_xmalloc(sizeof(ir_block_t *) * 16), .max = 16, .cap = 16, .shallow = shallow, .top = top};
  if (s) ir_stmt_walk(s, collect_visit, &c);
  *out = c.out;
  return c.n;
}

int ir_blocks(const ir_func_t *f, ir_block_t ***out) { return blocks_grown(f->root, false, f->root, out); }

int ir_blocks_under(ir_stmt_t *s, bool shallow, ir_block_t ***out) { return blocks_grown(s, shallow, NULL, out); }

int ir_collect_blocks(ir_stmt_t *s, bool shallow, ir_block_t **out, int max) {
  collect_t c = {.out = out, .max = max, .shallow = shallow};
  ir_stmt_walk(s, collect_visit, &c);
  return c.n;
}

/* ---- data flow ------------------------------------------------------------- */

static bool regions_have(const ir_region_t *r, int n, const ir_buffer_t *buf) {
  for (int i = 0; i < n; i++)
    if (r[i].buf == buf) return true;
  return false;
}

bool ir_block_reads(const ir_block_t *b, const ir_buffer_t *buf) { return regions_have(b->reads, b->nreads, buf); }

bool ir_block_writes(const ir_block_t *b, const ir_buffer_t *buf) { return regions_have(b->writes, b->nwrites, buf); }

static int related(const ir_func_t *f, const ir_block_t *blk, bool producers, ir_block_t **out, int max) {
  ir_block_t *scope = ir_scope_block(f, blk->uid);
  if (!scope || !scope->body) return 0;
  int na = ir_collect_blocks(scope->body, false, NULL, 0), n = 0;
  ir_block_t **all = tn_xmalloc(sizeof *all * (size_t)(na + 1));
  ir_collect_blocks(scope->body, false, all, na);
  for (int i = 0; i < na; i++) {
    const ir_block_t *o = all[i];
    bool rel = false;
    if (o == blk) continue;
    if (producers)
      for (int r = 0; r < blk->nreads && !rel; r++) rel = ir_block_writes(o, blk->reads[r].buf);
    else
      for (int w = 0; w < blk->nwrites && !rel; w++) rel = ir_block_reads(o, blk->writes[w].buf);
    if (rel) {
      if (n < max) out[n] = all[i];
      n++;
    }
  }
  free(all);
  return n;
}

int ir_producers(const ir_func_t *f, const ir_block_t *blk, ir_block_t **out, int max) {
  return related(f, blk, true, out, max);
}

int ir_consumers(const ir_func_t *f, const ir_block_t *blk, ir_block_t **out, int max) {
  return related(f, blk, false, out, max);
}
