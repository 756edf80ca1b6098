/* stmt.c — printing the loop tree: loops with their pragmas, thread-bound
 * loops as thread indices, blocks (iterators, predicate, init, store),
 * buffer declarations at their allocation points and barriers between
 * statements that share memory across threads. */
#include "cg_internal.h"

#include <stdlib.h>
#include <string.h>

void cg_line(cg_ctx_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tn_buf_indent(c->o, 2 * c->ind);
  tn_buf_vprintf(c->o, fmt, ap);
  tn_buf_putc(c->o, '\n');
  va_end(ap);
}

/* ---- barriers ------------------------------------------------------------ */

void cg_barrier(cg_ctx_t *c, bool global) {
  cg_line(c, "%s", global ? c->d->barrier_all : c->d->barrier_local);
  memset(c->pend_w, 0, (size_t)c->nbufs);
  memset(c->read_since, 0, (size_t)c->nbufs);
}

static bool is_global(const cg_ctx_t *c, int id) {
  return c->bufs[id].b && c->bufs[id].b->scope == IR_SCOPE_GLOBAL;
}

/* Blocks writing b in s. */
static int count_writers(const ir_stmt_t *s, const ir_buffer_t *b) {
  if (!s) return 0;
  switch (s->kind) {
  case IR_S_SEQ: {
    int n = 0;
    for (int i = 0; i < s->u.seq.n; i++) n += count_writers(s->u.seq.items[i], b);
    return n;
  }
  case IR_S_LOOP: return count_writers(s->u.loop.body, b);
  case IR_S_STORE: return s->u.store.buf == b;
  case IR_S_BLOCK: {
    const ir_stmt_t *body = s->u.block.body, *init = s->u.block.init;
    if (body && body->kind != IR_S_STORE) return count_writers(body, b);
    return (body && body->u.store.buf == b) || (init && init->u.store.buf == b);
  }
  }
  return 0;
}

/* Whether an access of `a` conflicts with unsynchronised accesses: reads of
 * pending writes, writes over pending reads, writes over pending writes (all
 * when waw, else only of buffers with two writer blocks in body).  *global:
 * a conflicting buffer is in global memory. */
static bool hazard(const cg_ctx_t *c, const cg_access_t *a, bool waw, const ir_stmt_t *body,
                   bool *global) {
  bool any = false;
  *global = false;
  for (int i = 0; i < c->nbufs; i++) {
    bool ww = a->w[i] && c->pend_w[i] && (waw || (body && count_writers(body, c->bufs[i].b) > 1));
    if ((a->r[i] && c->pend_w[i]) || (a->w[i] && c->read_since[i]) || ww) {
      any = true;
      *global = *global || is_global(c, i);
    }
  }
  return any;
}

/* Emits a barrier when s would read data other threads wrote, or overwrite
 * data they read or wrote, since the last barrier. */
void cg_sync_before(cg_ctx_t *c, const ir_stmt_t *s) {
  if (!c->d->gpu) return;
  cg_access_t a;
  cg_access_get(c, s, &a);
  bool global;
  if (hazard(c, &a, true, NULL, &global)) cg_barrier(c, global);
  cg_access_free(&a);
}

void cg_sync_note(cg_ctx_t *c, const ir_stmt_t *s) {
  if (!c->d->gpu) return;
  cg_access_t a;
  cg_access_get(c, s, &a);
  for (int i = 0; i < c->nbufs; i++) {
    c->pend_w[i] |= a.w[i];
    c->read_since[i] |= a.r[i];
  }
  cg_access_free(&a);
}

/* At the end of a loop body: the next iteration must not read what this
 * one wrote, nor overwrite what it read, before every thread got there.
 * Rewrites by one block are by the same thread (bindings are bijective), so
 * only buffers with two writer blocks count as write-after-write. */
static void sync_loop_end(cg_ctx_t *c, const ir_loop_t *l) {
  if (!c->d->gpu || l->extent <= 1) return;
  cg_access_t a;
  cg_access_get(c, l->body, &a);
  bool global;
  if (hazard(c, &a, false, l->body, &global)) cg_barrier(c, global);
  cg_access_free(&a);
}

/* ---- allocations ------------------------------------------------------------ */

static bool allocated_here(const cg_ctx_t *c, const cg_buf_t *cb, const ir_loop_t *l) {
  if (!cb->b || !cb->sized || !cb->used || cb->alloc_at != l) return false;
  if (c->d->gpu) return cb->kernel == c->kernel && cb->b->scope == IR_SCOPE_LOCAL;
  return !cb->heap && !cb->par_at;
}

int cg_emit_allocs(cg_ctx_t *c, const ir_loop_t *l) {
  tn_buf_t cond;
  tn_buf_init(&cond);
  int nheap = 0;
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (!allocated_here(c, cb, l)) continue;
    const char *t = cg_storage_type(c, cb->b);
    if (cb->wmma_k) {
      cg_wmma_acc_decl(c, cb);
      continue;
    }
    if (cb->heap_at_loop) {
      cg_line(c, "%s *%s = (%s *)malloc(sizeof(%s) * %lld);", t, cb->name, t, t,
              (long long)cg_buf_numel(cb));
      tn_buf_printf(&cond, "%s%s", nheap++ ? " && " : "", cb->name);
    } else {
      cg_line(c, "%s %s[%lld];", t, cb->name, (long long)cg_buf_numel(cb));
    }
  }
  if (nheap) {
    cg_line(c, "if (%s) {", tn_buf_str(&cond));
    c->ind++;
  }
  tn_buf_free(&cond);
  return nheap;
}

void cg_emit_frees(cg_ctx_t *c, const ir_loop_t *l) {
  c->ind--;
  cg_line(c, "} else {");
  if (c->in_parallel) cg_line(c, "#pragma omp atomic write"); /* threads may fail at once */
  cg_line(c, "  tuned_status = -1;");
  cg_line(c, "}");
  for (int i = 0; i < c->nbufs; i++)
    if (allocated_here(c, &c->bufs[i], l) && c->bufs[i].heap_at_loop)
      cg_line(c, "free(%s);", c->bufs[i].name);
}

static void body_with_allocs(cg_ctx_t *c, const ir_loop_t *l) {
  int nheap = cg_emit_allocs(c, l);
  if (c->fuse && c->fuse->lc == l) {
    const cg_fuse_t *f = c->fuse;
    c->fuse = NULL;
    cg_fuse_emit(c, f);
  }
  cg_emit_stmt(c, l->body);
  if (nheap) cg_emit_frees(c, l);
}

/* ---- loops ------------------------------------------------------------------ */

void cg_stack_push(cg_ctx_t *c, const ir_loop_t *l) {
  if (c->depth == c->capstack) {
    c->capstack = c->capstack ? 2 * c->capstack : 32;
    c->stack = tn_xrealloc(c->stack, sizeof c->stack[0] * (size_t)c->capstack);
  }
  c->stack[c->depth++] = l;
}

void cg_stack_pop(cg_ctx_t *c) { c->depth--; }

/* Iterations of a subtree once unrolled (TVM's auto-unroll step count);
 * thread-bound loops vanish on GPUs. */
static int64_t steps(const cg_ctx_t *c, const ir_stmt_t *s) {
  const int64_t cap = INT64_C(1) << 40;
  if (!s) return 0;
  switch (s->kind) {
  case IR_S_SEQ: {
    int64_t n = 0;
    for (int i = 0; i < s->u.seq.n; i++) n = TN_MIN(cap, n + steps(c, s->u.seq.items[i]));
    return n;
  }
  case IR_S_LOOP: {
    int axis;
    ir_tag_class_t k = cg_loop_tag(&s->u.loop, &axis);
    int64_t ext = c->d->gpu && (k == IR_TAG_CLASS_BLOCK || k == IR_TAG_CLASS_THREAD) ? 1 : s->u.loop.extent;
    int64_t inner = steps(c, s->u.loop.body);
    return inner > cap / TN_MAX(ext, 1) ? cap : ext * inner;
  }
  case IR_S_BLOCK:
    return s->u.block.body && s->u.block.body->kind != IR_S_STORE ? steps(c, s->u.block.body) : 1;
  case IR_S_STORE: return 1;
  }
  return 1;
}

static void emit_pragmas(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_loop_t *l = &s->u.loop;
  if (!c->d->gpu) {
    if (l->kind == IR_LOOP_PARALLEL && !c->in_parallel) {
      cg_line(c, "#pragma omp parallel for num_threads(tuned_team())");
      c->need_team = true;
      return;
    }
    if (l->kind == IR_LOOP_VECTORIZED) {
      cg_line(c, "#pragma omp simd");
      return;
    }
    if (cg_promo_pragma(c, l)) return;
  }
  int axis;
  bool unroll = l->kind == IR_LOOP_UNROLLED ||
                (c->d->gpu && (l->kind == IR_LOOP_VECTORIZED || cg_loop_tag(l, &axis) == IR_TAG_CLASS_VTHREAD)) ||
                (c->auto_unroll > 0 && steps(c, s) <= c->auto_unroll);
  if (!unroll) return;
  if (c->d->unroll) cg_line(c, "%s", c->d->unroll);
  else cg_line(c, "#pragma GCC unroll %lld", (long long)TN_MIN(l->extent, 64));
}

/* C: opens the OpenMP region of parallel loop l when temporaries are
 * malloc'ed once per thread in it (cb->par_at, see analysis.c); *cond gets
 * the test that they all exist.  A thread whose malloc failed makes the
 * function return -1 and skips its iterations (every thread must still
 * reach the `omp for`). */
static bool open_thread_heap(cg_ctx_t *c, const ir_loop_t *l, tn_buf_t *cond) {
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (!cb->b || !cb->used || cb->par_at != l) continue;
    if (!cond->len) {
      cg_line(c, "#pragma omp parallel num_threads(tuned_team())");
      c->need_team = true;
      cg_line(c, "{");
      c->ind++;
    }
    const char *t = cg_storage_type(c, cb->b);
    cg_line(c, "%s *%s = (%s *)malloc(sizeof(%s) * %lld);  /* one per thread */", t, cb->name, t, t,
            (long long)cg_buf_numel(cb));
    tn_buf_printf(cond, "%s%s", cond->len ? " && " : "", cb->name);
  }
  if (!cond->len) return false;
  cg_line(c, "if (!(%s)) {", tn_buf_str(cond));
  cg_line(c, "#pragma omp atomic write");
  cg_line(c, "  tuned_status = -1;");
  cg_line(c, "}");
  cg_line(c, "#pragma omp for");
  return true;
}

static void close_thread_heap(cg_ctx_t *c, const ir_loop_t *l) {
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (cb->b && cb->used && cb->par_at == l) cg_line(c, "free(%s);", cb->name);
  }
  c->ind--;
  cg_line(c, "}");
}

static void emit_for(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_loop_t *l = &s->u.loop;
  const char *v = cg_var(c, l->var);
  bool par = !c->d->gpu && l->kind == IR_LOOP_PARALLEL && !c->in_parallel && l->extent > 1;
  tn_buf_t cond;
  tn_buf_init(&cond);
  bool region = par && open_thread_heap(c, l, &cond);
  if (l->extent == 1) {
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "int %s = 0;", v);
  } else {
    if (!region) emit_pragmas(c, s);
    cg_line(c, "for (int %s = 0; %s < %lld; ++%s) {", v, v, (long long)l->extent, v);
    c->ind++;
  }
  c->in_parallel += par;
  cg_stack_push(c, l);
  if (region) {
    cg_line(c, "if (%s) {", tn_buf_str(&cond));
    c->ind++;
  }
  body_with_allocs(c, l);
  if (region) {
    c->ind--;
    cg_line(c, "}");
  }
  sync_loop_end(c, l);
  cg_stack_pop(c);
  c->in_parallel -= par;
  c->ind--;
  cg_line(c, "}");
  if (region) close_thread_heap(c, l);
  tn_buf_free(&cond);
}

/* A loop bound to blockIdx/threadIdx: its variable is the hardware index
 * (every loop of a tag has the launch extent, so no guard is needed). */
static void emit_bound(cg_ctx_t *c, const ir_loop_t *l, ir_tag_class_t k, int axis) {
  const char *idx = k == IR_TAG_CLASS_BLOCK ? c->d->block_idx[axis] : c->d->thread_idx[axis];
  cg_line(c, "{");
  c->ind++;
  cg_line(c, "int %s = %s;  /* %s, extent %lld */", cg_var(c, l->var), idx,
          ir_thread_tag_name(l->tag), (long long)l->extent);
  cg_stack_push(c, l);
  body_with_allocs(c, l);
  cg_stack_pop(c);
  c->ind--;
  cg_line(c, "}");
}

/* A tile loop of a lanes promotion (promote.c), unrolled here: each copy
 * declares the loop's value, which picks its accumulator. */
static void emit_lane_copies(cg_ctx_t *c, const ir_loop_t *l, int t) {
  for (int64_t k = 0; k < l->extent; k++) {
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "int %s = %lld;", cg_var(c, l->var), (long long)k);
    c->promo->cur[t] = k;
    cg_stack_push(c, l);
    body_with_allocs(c, l);
    cg_stack_pop(c);
    c->ind--;
    cg_line(c, "}");
  }
}

static void emit_loop(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_loop_t *l = &s->u.loop;
  cg_sync_before(c, s);
  int64_t saved = c->auto_unroll;
  const ir_annot_t *a = ir_annot_get(l->annots, l->nannots, "pragma_auto_unroll_max_step");
  if (a && !a->is_str) c->auto_unroll = a->ival;
  int axis;
  ir_tag_class_t k = cg_loop_tag(l, &axis);
  const cg_xred_t *x = c->d->gpu ? cg_xred_at(c, l) : NULL;
  const cg_pipe_t *p = c->d->gpu ? cg_pipe_at(c, l) : NULL;
  int lane_tile = cg_promo_tile(c, l);
  if (x) cg_emit_xreduce(c, x);
  else if (p) cg_emit_pipelined(c, s, p);
  else if (c->d->gpu && (k == IR_TAG_CLASS_BLOCK || k == IR_TAG_CLASS_THREAD)) emit_bound(c, l, k, axis);
  else if (lane_tile >= 0) emit_lane_copies(c, l, lane_tile);
  else if (!(c->d->gpu && l->kind == IR_LOOP_VECTORIZED && cg_try_vectorize(c, l))) {
    cg_promo_t p;
    bool promo = cg_promo_find(c, s, &p);
    cg_recip_t r;
    bool recip = cg_recip_find(c, s, &r);
    if (promo) cg_promo_open(c, &p);
    if (recip) cg_recip_open(c, &r);
    emit_for(c, s);
    if (recip) cg_recip_close(c, &r);
    if (promo) cg_promo_close(c, &p);
  }
  c->auto_unroll = saved;
}

/* ---- blocks ------------------------------------------------------------------- */

void cg_emit_iters(cg_ctx_t *c, const ir_block_t *b, bool spatial_only) {
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    if (spatial_only && it->kind == IR_ITER_REDUCE) continue;
    const char *val = it->binding ? cg_expr_str(c, it->binding) : "0";
    cg_line(c, "int %s = %s;", cg_var(c, it->var), val);
  }
}

static bool bound_in_stack(const cg_ctx_t *c, ir_tag_class_t kind, int axis) {
  for (int i = 0; i < c->depth; i++) {
    int a;
    if (cg_loop_tag(c->stack[i], &a) == kind && a == axis) return true;
  }
  return false;
}

void cg_thread_guard(cg_ctx_t *c, tn_buf_t *o) {
  for (int a = 0; a < 3; a++)
    if (c->block[a] > 1 && !bound_in_stack(c, IR_TAG_CLASS_THREAD, a))
      tn_buf_printf(o, "%s%s == 0", o->len ? " && " : "", c->d->thread_idx[a]);
}

/* GPU: what the block writes decides whether threads that run it
 * redundantly must be masked (shared/global writes) or cannot be (global
 * writes from every thread block). */
static void block_guard(cg_ctx_t *c, const ir_stmt_t *s, tn_buf_t *g) {
  if (!c->d->gpu) return;
  cg_access_t acc;
  cg_access_get(c, s, &acc);
  bool any = false, global = false;
  for (int i = 0; i < c->nbufs; i++)
    if (acc.w[i]) {
      any = true;
      global = global || is_global(c, i);
    }
  cg_access_free(&acc);
  for (int a = 0; a < 3 && global; a++)
    if (c->grid[a] > 1 && !bound_in_stack(c, IR_TAG_CLASS_BLOCK, a))
      cg_fail(c, TN_EINVAL,
              "block \"%s\" writes global memory but is not under a loop bound to blockIdx.%c, "
              "which its kernel launches %lld of: every thread block would run it",
              s->u.block.name, 'x' + a, (long long)c->grid[a]);
  if (any) {
    tn_buf_t t;
    tn_buf_init(&t);
    cg_thread_guard(c, &t);
    if (t.len) tn_buf_printf(g, "%s%s", g->len ? " && " : "", tn_buf_str(&t));
    tn_buf_free(&t);
  }
}

static void emit_init(cg_ctx_t *c, const ir_block_t *b) {
  tn_buf_t cond;
  tn_buf_init(&cond);
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE)
      tn_buf_printf(&cond, "%s%s == 0", cond.len ? " && " : "", cg_var(c, b->iters[i].var));
  if (cond.len) {
    cg_line(c, "if (%s) {", tn_buf_str(&cond));
    c->ind++;
  }
  cg_emit_stmt(c, b->init);
  if (cond.len) {
    c->ind--;
    cg_line(c, "}");
  }
  tn_buf_free(&cond);
}

static void emit_block(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_block_t *b = &s->u.block;
  bool leaf = b->body && b->body->kind == IR_S_STORE;
  if (cg_intrin_emit(c, s)) return;
  cg_sync_before(c, s);
  cg_line(c, "{  /* block %s */", cg_comment_name(c, b->name));
  c->ind++;
  cg_emit_iters(c, b, false);
  const ir_block_t *outer = c->blk;
  c->blk = b;
  tn_buf_t g;
  tn_buf_init(&g);
  if (b->predicate) cg_print_expr(c, b->predicate, &g);
  if (leaf) block_guard(c, s, &g);
  if (g.len) {
    cg_line(c, "if (%s) {", tn_buf_str(&g));
    c->ind++;
  }
  if (b->init) emit_init(c, b);
  cg_emit_stmt(c, b->body);
  if (g.len) {
    c->ind--;
    cg_line(c, "}");
  }
  tn_buf_free(&g);
  c->blk = outer;
  c->ind--;
  cg_line(c, "}");
  if (leaf) cg_sync_note(c, s);
}

void cg_emit_stmt(cg_ctx_t *c, const ir_stmt_t *s) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ: {
    cg_fuse_t f;
    const ir_stmt_t *const *items = (const ir_stmt_t *const *)s->u.seq.items;
    for (int i = 0; i < s->u.seq.n; i++) {
      if (cg_fuse_find(c, items, i, s->u.seq.n, &f)) {
        c->fuse = &f; /* printed by the next item's loop */
        continue;
      }
      cg_emit_stmt(c, items[i]);
      if (c->fuse == &f) {
        c->fuse = NULL;
        cg_fail(c, TN_EINVAL, "internal: the loop of %s was fused into a loop that was not printed",
                cg_var(c, f.lp->var));
      }
    }
    return;
  }
  case IR_S_LOOP: emit_loop(c, s); return;
  case IR_S_BLOCK: emit_block(c, s); return;
  case IR_S_STORE:
    if (c->async_copy && cg_try_async_store(c, s)) return;
    cg_emit_store_text(c, s->u.store.buf, s->u.store.idx, cg_expr_str(c, s->u.store.value));
    return;
  }
}
