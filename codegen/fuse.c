/* fuse.c — a producer loop run inside the loop that consumes it (C target).
 *
 * Softmax's row, as the search schedules it, is four loops over the same
 * 1024 columns: the max, E[j] = exp(A[i, j] - max), the sum of E, and
 * S[i, j] = E[j] / sum.  The exponentials' loop and the sum's loop walk the
 * same j, and the sum reads exactly the E[j] that the loop before wrote:
 * printed as one loop (E[j] computed, stored and added in the same
 * iteration), the sum reads no E back from memory and the loop overhead is
 * paid once — 7-9 % of the whole kernel at 8192 x 1024 on two threads.
 * A schedule cannot say this (compute_at puts a producer under a loop that
 * encloses all of its consumers, and S reads E too; TVM's reverse_compute_at
 * refuses a reduction under part of its range), so the C code generator
 * does it, as it keeps accumulators in registers (promote.c).
 *
 * Conditions: the C target; in a sequence, an item that is (inside loops of
 * extent 1) a serial, unrolled or vectorized loop P of N >= 2 iterations
 * around one leaf block that has only spatial iterators, no init, predicate
 * or annotation, writes one buffer Y and reads no Y; the next item is
 * (inside loops of extent 1, after plain blocks) such a loop C of N
 * iterations around one leaf block likewise plain (a reduction over C's
 * variable only where its accumulator is a scalar and C an `omp simd`
 * reduction, promote.c: a sum into memory would keep the fused loop, P's
 * work included, from vectorising) that reads Y and writes nothing P reads
 * or writes;
 * the blocks between them neither touch Y nor write what P reads; every
 * load of Y in C's block has, with P's variable taken as C's and the loops of
 * extent 1 as 0, the same indices as P's store, one of them C's variable
 * itself (so iteration j reads what iteration j wrote, and nothing else);
 * no buffer is allocated at those loops.  P's block is then printed at the
 * top of C's body with P's variable declared as C's. */
#include "cg_internal.h"

#include <stdlib.h>
#include <string.h>

/* Down through loops of extent 1 (collected into units); the statement under them. */
static const ir_stmt_t *skip_units(const ir_stmt_t *s, const ir_loop_t **units, int *n) {
  s = cg_strip_seq(s);
  while (s && s->kind == IR_S_LOOP && s->u.loop.extent == 1) {
    if (*n == CG_FUSE_MAX_UNITS) return NULL;
    units[(*n)++] = &s->u.loop;
    s = cg_strip_seq(s->u.loop.body);
  }
  return s;
}

/* A loop of at least 2 iterations around one plain leaf block: the block's statement. */
static const ir_stmt_t *plain_loop_block(const ir_stmt_t *s, bool spatial_only) {
  if (!s || s->kind != IR_S_LOOP) return NULL;
  const ir_loop_t *l = &s->u.loop;
  if (l->extent < 2 || (l->kind != IR_LOOP_SERIAL && l->kind != IR_LOOP_UNROLLED && l->kind != IR_LOOP_VECTORIZED) ||
      ir_annot_get(l->annots, l->nannots, IR_ANN_PIPELINE_STAGES))
    return NULL;
  const ir_stmt_t *t = cg_strip_seq(l->body);
  if (!t || t->kind != IR_S_BLOCK) return NULL;
  const ir_block_t *b = &t->u.block;
  if (b->init || b->predicate || b->nallocs || b->nannots || !b->body || b->body->kind != IR_S_STORE) return NULL;
  for (int i = 0; spatial_only && i < b->niters; i++)
    if (b->iters[i].kind != IR_ITER_SPATIAL) return NULL;
  return t;
}

static bool allocates_at(const cg_ctx_t *c, const ir_loop_t *l) {
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].b && (c->bufs[i].alloc_at == l || c->bufs[i].par_at == l)) return true;
  return false;
}

/* e with block b's iterators replaced by their bindings, and the loops in
 * from[] by to[] (in c's scratch arena). */
static ir_expr_t *resolved(cg_ctx_t *c, const ir_block_t *b, const ir_expr_t *e, ir_var_t *const *from,
                           ir_expr_t *const *to, int n) {
  ir_var_t **iv = tn_xmalloc(sizeof *iv * (size_t)(b->niters + 1));
  ir_expr_t **bind = tn_xmalloc(sizeof *bind * (size_t)(b->niters + 1));
  int k = 0;
  for (int i = 0; i < b->niters; i++) {
    if (!b->iters[i].binding) continue;
    iv[k] = b->iters[i].var;
    bind[k++] = ir_expr_subst(c->scratch, b->iters[i].binding, from, to, n);
  }
  ir_expr_t *r = ir_expr_subst(c->scratch, (ir_expr_t *)e, iv, bind, k);
  free(iv);
  free(bind);
  return r;
}

typedef struct {
  cg_ctx_t *c;
  const ir_buffer_t *y;
  ir_expr_t *want[IR_MAX_DIMS]; /* P's store indices, resolved */
  const ir_block_t *rb;
  ir_var_t *from[CG_FUSE_MAX_UNITS];
  ir_expr_t *to[CG_FUSE_MAX_UNITS];
  int n;
  bool ok;
} match_t;

static void match_loads(match_t *m, const ir_expr_t *e) {
  if (!m->ok) return;
  if (e->kind == IR_E_LOAD && e->u.load.buf == m->y) {
    for (int d = 0; d < e->u.load.n && m->ok; d++)
      m->ok = ir_expr_equal(resolved(m->c, m->rb, e->u.load.idx[d], m->from, m->to, m->n), m->want[d]);
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++) match_loads(m, kids[i]);
}

/* Whether the accesses allow moving P's iterations into C's loop, past the
 * statements between them (mids). */
static bool accesses_allow(cg_ctx_t *c, const ir_stmt_t *pblk, const ir_stmt_t *rblk, const ir_stmt_t *const *mids,
                           int nmids, int y) {
  cg_access_t p, r;
  cg_access_get(c, pblk, &p);
  cg_access_get(c, rblk, &r);
  bool ok = r.r[y] && !p.r[y];
  for (int i = 0; i < c->nbufs && ok; i++) ok = (!p.w[i] || i == y) && !(r.w[i] && (p.r[i] || p.w[i]));
  for (int k = 0; k < nmids && ok; k++) {
    cg_access_t m;
    cg_access_get(c, mids[k], &m);
    ok = !m.r[y] && !m.w[y];
    for (int i = 0; i < c->nbufs && ok; i++) ok = !(m.w[i] && p.r[i]);
    cg_access_free(&m);
  }
  cg_access_free(&p);
  cg_access_free(&r);
  return ok;
}

bool cg_fuse_find(cg_ctx_t *c, const ir_stmt_t *const *items, int k, int n, cg_fuse_t *f) {
  if (c->fuse) return false; /* one pending at a time (it may be f) */
  memset(f, 0, sizeof *f);
  if (c->d->target != CG_TARGET_C || c->d->gpu || k + 1 >= n) return false;
  const ir_stmt_t *ps = skip_units(items[k], f->units, &f->nunits);
  const ir_stmt_t *pblk = plain_loop_block(ps, true);
  if (!pblk) return false;
  const ir_loop_t *cunits[CG_FUSE_MAX_UNITS];
  int ncunits = 0;
  const ir_stmt_t *cs = skip_units(items[k + 1], cunits, &ncunits);
  const ir_stmt_t *const *mids = NULL;
  int nmids = 0;
  if (cs && cs->kind == IR_S_SEQ) { /* plain blocks (a decomposed init), then the loop */
    const ir_stmt_t *seq = cs;
    cs = NULL;
    for (int i = 0; i < seq->u.seq.n && !cs; i++) {
      const ir_stmt_t *it = cg_strip_seq(seq->u.seq.items[i]);
      if (it && it->kind == IR_S_LOOP) cs = it;
      else if (!it || it->kind != IR_S_BLOCK) return false;
      else nmids = i + 1;
    }
    mids = (const ir_stmt_t *const *)seq->u.seq.items;
  }
  const ir_stmt_t *rblk = plain_loop_block(cs, false);
  if (!rblk || cs->u.loop.extent != ps->u.loop.extent) return false;
  const ir_loop_t *lp = &ps->u.loop, *lc = &cs->u.loop;
  if (allocates_at(c, lp) || allocates_at(c, lc)) return false;
  for (int i = 0; i < f->nunits; i++)
    if (allocates_at(c, f->units[i])) return false;
  for (int i = 0; i < ncunits; i++)
    if (allocates_at(c, cunits[i])) return false;
  const ir_block_t *pb = &pblk->u.block, *rb = &rblk->u.block;
  /* a sum into memory keeps gcc from vectorising the loop, and the
   * producer's work with it: only into a loop that stays vectorisable */
  bool reduces = false;
  for (int i = 0; i < rb->niters; i++)
    reduces = reduces || (rb->iters[i].kind == IR_ITER_REDUCE && rb->iters[i].binding &&
                          ir_expr_uses_var(rb->iters[i].binding, lc->var));
  cg_promo_t pr;
  if (reduces && !(cg_promo_find(c, cs, &pr) && pr.simd)) return false;
  const ir_stmt_t *st = pb->body;
  const ir_buffer_t *y = st->u.store.buf;
  if (y->id < 0 || y->id >= c->nbufs || !accesses_allow(c, pblk, rblk, mids, nmids, y->id)) return false;

  /* P's store indices with P's variable as C's and P's units as 0 */
  match_t m = {.c = c, .y = y, .rb = rb, .ok = true};
  ir_var_t *pfrom[CG_FUSE_MAX_UNITS + 1];
  ir_expr_t *pto[CG_FUSE_MAX_UNITS + 1];
  int np = 0;
  pfrom[np] = lp->var, pto[np++] = ir_varref(c->scratch, lc->var);
  for (int i = 0; i < f->nunits; i++) pfrom[np] = f->units[i]->var, pto[np++] = ir_int(c->scratch, 0);
  bool loop_index = false;
  for (int d = 0; d < st->u.store.n; d++) {
    m.want[d] = resolved(c, pb, st->u.store.idx[d], pfrom, pto, np);
    loop_index = loop_index || (m.want[d]->kind == IR_E_VAR && m.want[d]->u.var == lc->var);
  }
  if (!loop_index) return false;
  for (int i = 0; i < ncunits; i++) m.from[m.n] = cunits[i]->var, m.to[m.n++] = ir_int(c->scratch, 0);
  match_loads(&m, rb->body->u.store.value);
  for (int d = 0; d < rb->body->u.store.n && m.ok; d++) match_loads(&m, rb->body->u.store.idx[d]);
  if (!m.ok) return false;
  f->lp = lp;
  f->pblk = pblk;
  f->lc = lc;
  return true;
}

void cg_fuse_emit(cg_ctx_t *c, const cg_fuse_t *f) {
  cg_line(c, "{  /* loop %s, fused: its iteration %s runs here */", cg_var(c, f->lp->var), cg_var(c, f->lc->var));
  c->ind++;
  for (int i = 0; i < f->nunits; i++) {
    cg_line(c, "int %s = 0;", cg_var(c, f->units[i]->var));
    cg_stack_push(c, f->units[i]);
  }
  cg_line(c, "int %s = %s;", cg_var(c, f->lp->var), cg_var(c, f->lc->var));
  cg_stack_push(c, f->lp);
  cg_emit_stmt(c, f->pblk);
  for (int i = 0; i <= f->nunits; i++) cg_stack_pop(c);
  c->ind--;
  cg_line(c, "}");
}
