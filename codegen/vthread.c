/* vthread.c — virtual threads on GPU targets, after TVM's InjectVirtualThread.
 *
 * A loop bound to vthread.x/y/z splits a thread's work into interleaved
 * slices that behave like threads of their own: they are independent, and a
 * statement that does not depend on the virtual thread is executed once for
 * all of them (the cooperative fetch into shared memory that multi-level
 * tiling places under the vthread loop fills the tile every virtual thread
 * reads).  Printed as a plain loop around its body, the vthread loop would
 * repeat the whole reduction loop, shared-memory staging and barriers
 * included, once per virtual thread.
 *
 * cg_inject_vthreads rewrites a copy of the function before lowering: each
 * vthread loop is pushed down the tree through serial, unrolled, threadIdx
 * and other vthread loops and through sequences; a statement that does not
 * use its variable is left alone (run once), and every other leaf (a block, a
 * store, a vectorized loop, a threadIdx loop that a reduction runs over) gets
 * its own copy of the vthread loop, printed unrolled.  The copies share the
 * loop variable.  Local buffers used only under copies of a vthread loop get
 * one slice per virtual thread (analysis.c, size_buffer), as TVM expands the
 * allocations inside a vthread scope. */
#include "cg_internal.h"

/* A search for one statement under s (s included) that satisfies a test. */
typedef struct find {
  bool (*test)(const ir_stmt_t *s, const ir_var_t *v);
  const ir_var_t *v;
  bool found;
} find_t;

static bool find_visit(ir_stmt_t *s, void *ctx) {
  find_t *f = ctx;
  if (!f->found && f->test(s, f->v)) f->found = true;
  return !f->found;
}

static bool any_stmt(const ir_stmt_t *s, bool (*test)(const ir_stmt_t *, const ir_var_t *), const ir_var_t *v) {
  find_t f = {test, v, false};
  ir_stmt_walk((ir_stmt_t *)s, find_visit, &f);
  return f.found;
}

static bool expr_uses(const ir_expr_t *e, const ir_var_t *v) { return e && ir_expr_uses_var(e, v); }

/* v in a binding, predicate, index or stored value of this statement (its
 * children are tested by any_stmt). */
static bool uses_here(const ir_stmt_t *s, const ir_var_t *v) {
  if (s->kind == IR_S_STORE) {
    for (int i = 0; i < s->u.store.n; i++)
      if (expr_uses(s->u.store.idx[i], v)) return true;
    return expr_uses(s->u.store.value, v);
  }
  if (s->kind != IR_S_BLOCK) return false;
  const ir_block_t *b = &s->u.block;
  for (int i = 0; i < b->niters; i++)
    if (expr_uses(b->iters[i].binding, v)) return true;
  return expr_uses(b->predicate, v);
}

/* A block with a reduce iterator bound through v. */
static bool reduces_here(const ir_stmt_t *s, const ir_var_t *v) {
  if (s->kind != IR_S_BLOCK) return false;
  for (int i = 0; i < s->u.block.niters; i++)
    if (s->u.block.iters[i].kind == IR_ITER_REDUCE && expr_uses(s->u.block.iters[i].binding, v)) return true;
  return false;
}

static bool is_vthread(const ir_stmt_t *s, const ir_var_t *v) {
  (void)v;
  int axis;
  return s->kind == IR_S_LOOP && cg_loop_tag(&s->u.loop, &axis) == IR_TAG_CLASS_VTHREAD;
}

static bool stmt_uses(const ir_stmt_t *s, const ir_var_t *v) { return any_stmt(s, uses_here, v); }

/* Loops a vthread loop may be moved inside of: they do not depend on the
 * virtual thread (extents are constants) and run the same way for every
 * thread of the block. */
static bool can_sink_through(const ir_loop_t *l) {
  int axis;
  switch (l->kind) {
  case IR_LOOP_SERIAL:
  case IR_LOOP_UNROLLED: return true;
  case IR_LOOP_THREAD:
    switch (cg_loop_tag(l, &axis)) {
    case IR_TAG_CLASS_VTHREAD: return true;
    case IR_TAG_CLASS_THREAD: return !any_stmt(l->body, reduces_here, l->var); /* a cross-thread reduction */
    default: return false;
    }
  default: return false;
  }
}

static ir_stmt_t *wrap(ir_func_t *f, const ir_loop_t *vt, ir_stmt_t *s) {
  ir_stmt_t *w = ir_loop_new(f, vt->var, vt->extent, s);
  w->u.loop.kind = IR_LOOP_THREAD;
  w->u.loop.tag = vt->tag;
  w->u.loop.annots = vt->annots;
  w->u.loop.nannots = vt->nannots;
  return w;
}

static ir_stmt_t *sink(ir_func_t *f, const ir_loop_t *vt, ir_stmt_t *s) {
  if (!stmt_uses(s, vt->var)) return s;
  if (s->kind == IR_S_SEQ) {
    for (int i = 0; i < s->u.seq.n; i++) s->u.seq.items[i] = sink(f, vt, s->u.seq.items[i]);
    return s;
  }
  if (s->kind == IR_S_LOOP && can_sink_through(&s->u.loop)) {
    s->u.loop.body = sink(f, vt, s->u.loop.body);
    return s;
  }
  return wrap(f, vt, s);
}

static ir_stmt_t *inject(ir_func_t *f, ir_stmt_t *s) {
  if (!s) return s;
  int axis;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) s->u.seq.items[i] = inject(f, s->u.seq.items[i]);
    return s;
  case IR_S_LOOP:
    s->u.loop.body = inject(f, s->u.loop.body);
    if (cg_loop_tag(&s->u.loop, &axis) == IR_TAG_CLASS_VTHREAD) return sink(f, &s->u.loop, s->u.loop.body);
    return s;
  case IR_S_BLOCK:
    if (s->u.block.body && s->u.block.body->kind != IR_S_STORE) s->u.block.body = inject(f, s->u.block.body);
    return s;
  case IR_S_STORE: return s;
  }
  return s;
}

ir_func_t *cg_inject_vthreads(const ir_func_t *f) {
  if (!any_stmt(f->root, is_vthread, NULL)) return NULL;
  ir_func_t *g = ir_func_copy(f);
  g->root = inject(g, g->root);
  return g;
}
