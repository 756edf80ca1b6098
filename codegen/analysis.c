/* analysis.c — what the printers need to know before printing: names and
 * ranges of variables, thread tags and launch extents, cross-thread
 * reductions, and the place and size of every temporary (TVM's compact
 * buffer allocation: allocated at the innermost loop holding all its uses,
 * with the shape of the region one iteration of it touches, rebased to
 * start at 0; GPU workspaces excepted). */
#include "cg_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

int cg_fail(cg_ctx_t *c, int code, const char *fmt, ...) {
  if (c->rc) return c->rc;
  va_list ap;
  va_start(ap, fmt);
  c->rc = code;
  if (c->err) tn_err_vset(c->err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- small tree helpers ------------------------------------------------- */

const ir_stmt_t *cg_loop_stmt(const ir_loop_t *l) {
  return (const ir_stmt_t *)(const void *)((const char *)l - offsetof(ir_stmt_t, u.loop));
}

const ir_stmt_t *cg_block_stmt(const ir_block_t *b) {
  return (const ir_stmt_t *)(const void *)((const char *)b - offsetof(ir_stmt_t, u.block));
}

const ir_stmt_t *cg_strip_seq(const ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

int64_t cg_buf_numel(const cg_buf_t *cb) {
  int64_t st[IR_MAX_DIMS];
  int64_t n = cg_buf_strides(cb, st);
  for (int i = 0; i < cb->nvt; i++) n *= cb->vt[i]->extent;
  return cb->pipe ? n * cb->pipe_stages : n;
}

ir_tag_class_t cg_loop_tag(const ir_loop_t *l, int *axis) {
  bool bound = l->kind == IR_LOOP_THREAD;
  *axis = bound ? ir_thread_tag_axis(l->tag) : 0;
  return bound ? ir_thread_tag_class(l->tag) : IR_TAG_CLASS_NONE;
}

static const char *first_block_name(const ir_stmt_t *s) {
  while (s) {
    switch (s->kind) {
    case IR_S_BLOCK: return s->u.block.name;
    case IR_S_LOOP: s = s->u.loop.body; break;
    case IR_S_SEQ:
      for (int i = 0; i < s->u.seq.n; i++) {
        const char *n = first_block_name(s->u.seq.items[i]);
        if (n) return n;
      }
      return NULL;
    default: return NULL;
    }
  }
  return NULL;
}

/* ---- types -------------------------------------------------------------- */

static bool half_as_float(const cg_ctx_t *c, const ir_buffer_t *b) {
  return b->dtype == IR_FLOAT16 && b->scope != IR_SCOPE_GLOBAL && !c->d->half_arrays;
}

bool cg_half_storage(const cg_ctx_t *c, const ir_buffer_t *b) {
  return b->dtype == IR_FLOAT16 && !half_as_float(c, b);
}

bool cg_bf16_storage(const ir_buffer_t *b) { return b->dtype == IR_BFLOAT16; }

const char *cg_storage_type(const cg_ctx_t *c, const ir_buffer_t *b) {
  return half_as_float(c, b) ? "float" : c->d->storage[b->dtype];
}

int cg_elem_bytes(const cg_ctx_t *c, const ir_buffer_t *b) {
  return half_as_float(c, b) ? 4 : ir_dtype_bytes(b->dtype);
}

/* ---- access sets (barriers) --------------------------------------------- */

static bool is_self_load(const ir_expr_t *e, const ir_stmt_t *st) {
  if (!st || st->kind != IR_S_STORE || e->u.load.buf != st->u.store.buf) return false;
  for (int i = 0; i < e->u.load.n; i++)
    if (!ir_expr_equal(e->u.load.idx[i], st->u.store.idx[i])) return false;
  return true;
}

static void mark(const cg_ctx_t *c, const ir_buffer_t *b, uint8_t *set) {
  if (b->scope != IR_SCOPE_LOCAL && b->id >= 0 && b->id < c->nbufs) set[b->id] = 1;
}

static void expr_reads(const cg_ctx_t *c, const ir_expr_t *e, const ir_stmt_t *self, uint8_t *r) {
  if (!e) return;
  if (e->kind == IR_E_LOAD && !is_self_load(e, self)) mark(c, e->u.load.buf, r);
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++) expr_reads(c, kids[i], self, r);
}

static void stmt_access(const cg_ctx_t *c, const ir_stmt_t *s, uint8_t *r, uint8_t *w) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) stmt_access(c, s->u.seq.items[i], r, w);
    return;
  case IR_S_LOOP: stmt_access(c, s->u.loop.body, r, w); return;
  case IR_S_STORE:
    mark(c, s->u.store.buf, w);
    expr_reads(c, s->u.store.value, s, r);
    return;
  case IR_S_BLOCK: {
    const ir_block_t *b = &s->u.block;
    expr_reads(c, b->predicate, NULL, r);
    stmt_access(c, b->init, r, w);
    stmt_access(c, b->body, r, w);
    return;
  }
  }
}

void cg_access_get(const cg_ctx_t *c, const ir_stmt_t *s, cg_access_t *a) {
  a->r = tn_xcalloc((size_t)c->nbufs + 1, 1);
  a->w = tn_xcalloc((size_t)c->nbufs + 1, 1);
  stmt_access(c, s, a->r, a->w);
}

void cg_access_free(cg_access_t *a) {
  free(a->r);
  free(a->w);
}

/* ---- the walk: names, bounds, tags, sites, cross-thread reductions ------ */

typedef struct walk {
  const ir_loop_t **loops; /* the loops above, outermost first (grows) */
  int n, cap;
  int kernel;
} walk_t;

static void name_var(cg_ctx_t *c, const ir_var_t *v) {
  if (v->id < 0 || v->id >= c->nvars) {
    cg_fail(c, TN_EINVAL, "variable %s has id %d, outside the function's %d variables", v->name,
            v->id, c->nvars);
    return;
  }
  if (!c->var_name[v->id]) c->var_name[v->id] = cg_name_unique(c, v->name);
}

static cg_buf_t *buf_info(cg_ctx_t *c, const ir_buffer_t *b) {
  if (b->id < 0 || b->id >= c->nbufs || !c->bufs[b->id].b) {
    cg_fail(c, TN_EINVAL, "buffer \"%s\" is neither a parameter nor allocated by any block",
            b->name);
    return NULL;
  }
  return &c->bufs[b->id];
}

static void add_site(cg_ctx_t *c, walk_t *w, const ir_block_t *blk, const ir_buffer_t *b,
                     ir_expr_t *const *idx) {
  cg_buf_t *cb = buf_info(c, b);
  if (!cb) return;
  cb->used = true;
  if (!cb->sized) return;
  if (c->nsites == c->capsites) {
    c->capsites = c->capsites ? 2 * c->capsites : 32;
    c->sites = tn_xrealloc(c->sites, sizeof(*c->sites) * (size_t)c->capsites);
  }
  cg_site_t *s = &c->sites[c->nsites++];
  s->buf = b;
  s->blk = blk;
  s->idx = idx;
  s->nloops = w->n;
  s->loops = tn_arena_memdup(c->scratch->arena, w->loops, sizeof(*w->loops) * (size_t)(w->n + 1));
  s->kernel = w->kernel;
}

static void expr_sites(cg_ctx_t *c, walk_t *w, const ir_block_t *blk, const ir_expr_t *e) {
  if (!e) return;
  if (e->kind == IR_E_LOAD) add_site(c, w, blk, e->u.load.buf, e->u.load.idx);
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++) expr_sites(c, w, blk, kids[i]);
}

static void find_xred(cg_ctx_t *c, walk_t *w, const ir_stmt_t *bs);

static void register_allocs(cg_ctx_t *c, const ir_block_t *b) {
  for (int i = 0; i < b->nallocs; i++) {
    const ir_buffer_t *buf = b->allocs[i];
    if (buf->id < 0 || buf->id >= c->nbufs) {
      cg_fail(c, TN_EINVAL, "buffer \"%s\" has id %d, outside the function's %d buffers",
              buf->name, buf->id, c->nbufs);
      return;
    }
    cg_buf_t *cb = &c->bufs[buf->id];
    if (cb->b) continue;
    cb->b = buf;
    cb->name = cg_name_unique(c, buf->name);
    cb->kernel = -1;
    for (int d = 0; d < buf->ndim; d++) cb->ext[d] = buf->shape[d];
    /* GPU kernels take global temporaries as workspace arguments (they live
     * across kernels), every kernel its hoisted packed copies; everything else, and on the C target every temporary,
     * is sized to the region used under its allocation point. */
    if ((buf->scope == IR_SCOPE_GLOBAL && c->d->gpu) || cb->packs) cb->param = true;
    else cb->sized = true;
  }
}

static void walk_stmt(cg_ctx_t *c, walk_t *w, const ir_stmt_t *s);

static void walk_block(cg_ctx_t *c, walk_t *w, const ir_stmt_t *bs) {
  const ir_block_t *b = &bs->u.block;
  register_allocs(c, b);
  for (int i = 0; i < b->niters; i++) {
    name_var(c, b->iters[i].var);
    ir_bounds_set(&c->bounds, b->iters[i].var, 0, b->iters[i].extent - 1);
    expr_sites(c, w, b, b->iters[i].binding);
  }
  expr_sites(c, w, b, b->predicate);
  const ir_stmt_t *parts[2] = {b->init, b->body};
  for (int i = 0; i < 2; i++) {
    const ir_stmt_t *st = parts[i];
    if (st && st->kind == IR_S_STORE) {
      add_site(c, w, b, st->u.store.buf, st->u.store.idx);
      expr_sites(c, w, b, st->u.store.value);
    } else if (st) {
      walk_stmt(c, w, st);
    }
  }
  if (c->d->gpu && b->niters) find_xred(c, w, bs);
}

static void walk_loop(cg_ctx_t *c, walk_t *w, const ir_loop_t *l) {
  name_var(c, l->var);
  ir_bounds_set(&c->bounds, l->var, 0, l->extent - 1);
  int axis;
  if (l->kind == IR_LOOP_THREAD && cg_loop_tag(l, &axis) == IR_TAG_CLASS_NONE)
    cg_fail(c, TN_EINVAL, "loop %s is bound to no thread tag (valid: %s)", l->var->name, ir_thread_tag_list());
  if (l->extent < 1)
    cg_fail(c, TN_EINVAL, "loop %s has extent %lld; extents must be >= 1", l->var->name,
            (long long)l->extent);
  if (w->n + 1 >= w->cap) { /* one spare slot: sites copy n + 1 entries */
    w->cap = w->cap ? 2 * w->cap : 32;
    w->loops = tn_xrealloc(w->loops, sizeof w->loops[0] * (size_t)w->cap);
  }
  w->loops[w->n++] = l;
  walk_stmt(c, w, l->body);
  w->n--;
}

static void walk_stmt(cg_ctx_t *c, walk_t *w, const ir_stmt_t *s) {
  if (!s || c->rc) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) walk_stmt(c, w, s->u.seq.items[i]);
    return;
  case IR_S_LOOP: walk_loop(c, w, &s->u.loop); return;
  case IR_S_BLOCK: walk_block(c, w, s); return;
  case IR_S_STORE:
    add_site(c, w, NULL, s->u.store.buf, s->u.store.idx);
    expr_sites(c, w, NULL, s->u.store.value);
    return;
  }
}

/* ---- cross-thread reductions -------------------------------------------- */

/* Does a reduce iterator of b use a thread-bound loop?  Errors for bindings
 * that cannot be lowered. */
static bool reduce_on_threads(cg_ctx_t *c, walk_t *w, const ir_block_t *b) {
  bool cross = false;
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    if (it->kind != IR_ITER_REDUCE || !it->binding) continue;
    for (int j = 0; j < w->n; j++) {
      int axis;
      ir_tag_class_t k = cg_loop_tag(w->loops[j], &axis);
      if ((k != IR_TAG_CLASS_BLOCK && k != IR_TAG_CLASS_THREAD) || !ir_expr_uses_var(it->binding, w->loops[j]->var))
        continue;
      if (k == IR_TAG_CLASS_BLOCK || axis != 0) {
        cg_fail(c, TN_EUNSUPPORTED,
                "block \"%s\": reduction iterator %s is bound to %s through loop %s; only "
                "reductions across threadIdx.x can be lowered",
                b->name, it->var->name, ir_thread_tag_name(w->loops[j]->tag), w->loops[j]->var->name);
        return false;
      }
      cross = true;
    }
  }
  return cross;
}

static bool uses_reduce_iter(const ir_block_t *b, const ir_expr_t *e) {
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE && ir_expr_uses_var(e, b->iters[i].var)) return true;
  return false;
}

static bool same_store_target(const ir_stmt_t *a, const ir_stmt_t *b) {
  if (a->u.store.buf != b->u.store.buf) return false;
  for (int i = 0; i < a->u.store.n; i++)
    if (!ir_expr_equal(a->u.store.idx[i], b->u.store.idx[i])) return false;
  return true;
}

/* The combiner and contribution of `C[idx] = C[idx] op x`. */
static bool reduce_form(const ir_stmt_t *st, ir_expr_kind_t *op, ir_expr_t **value) {
  const ir_expr_t *v = st->u.store.value;
  if (v->kind != IR_E_ADD && v->kind != IR_E_MAX && v->kind != IR_E_MIN) return false;
  *op = v->kind;
  if (v->u.bin.a->kind == IR_E_LOAD && is_self_load(v->u.bin.a, st)) *value = v->u.bin.b;
  else if (v->u.bin.b->kind == IR_E_LOAD && is_self_load(v->u.bin.b, st)) *value = v->u.bin.a;
  else return false;
  return true;
}

/* Checks the block's own form: a reduce update with optional matching init,
 * indices over spatial iterators only. */
static bool xred_form(cg_ctx_t *c, const ir_block_t *b, cg_xred_t *x) {
  const ir_stmt_t *st = b->body;
  if (!st || st->kind != IR_S_STORE || !reduce_form(st, &x->op, &x->value)) {
    cg_fail(c, TN_EUNSUPPORTED,
            "block \"%s\": a reduction across threadIdx.x needs a body of the form "
            "X[...] = X[...] + v (or max/min)",
            b->name);
    return false;
  }
  for (int i = 0; i < st->u.store.n; i++)
    if (uses_reduce_iter(b, st->u.store.idx[i])) {
      cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": the reduced element's index uses a reduction iterator",
              b->name);
      return false;
    }
  if (b->init && (b->init->kind != IR_S_STORE || !same_store_target(b->init, st) ||
                  uses_reduce_iter(b, b->init->u.store.value))) {
    cg_fail(c, TN_EUNSUPPORTED,
            "block \"%s\": the init must store a value independent of the reduction iterators "
            "to the element the body updates",
            b->name);
    return false;
  }
  return true;
}

static bool used_by_spatial(const ir_block_t *b, const ir_var_t *v) {
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_SPATIAL && b->iters[i].binding &&
        ir_expr_uses_var(b->iters[i].binding, v))
      return true;
  return false;
}

static bool used_by_reduce(const ir_block_t *b, const ir_var_t *v) {
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE && b->iters[i].binding &&
        ir_expr_uses_var(b->iters[i].binding, v))
      return true;
  return false;
}

/* The reduce-only perfect nest above the block: loops whose variables feed
 * no spatial iterator, each holding exactly the next. */
static int chain_top(const walk_t *w, const ir_stmt_t *bs) {
  const ir_block_t *b = &bs->u.block;
  const ir_stmt_t *inner = bs;
  int top = w->n;
  for (int j = w->n - 1; j >= 0; j--) {
    const ir_loop_t *l = w->loops[j];
    int axis;
    ir_tag_class_t k = cg_loop_tag(l, &axis);
    bool serial_like = k == IR_TAG_CLASS_NONE || k == IR_TAG_CLASS_VTHREAD || (k == IR_TAG_CLASS_THREAD && axis == 0);
    if (!serial_like || cg_strip_seq(l->body) != inner || used_by_spatial(b, l->var)) break;
    top = j;
    inner = cg_loop_stmt(l);
  }
  return top;
}

static void find_xred(cg_ctx_t *c, walk_t *w, const ir_stmt_t *bs) {
  const ir_block_t *b = &bs->u.block;
  if (!reduce_on_threads(c, w, b)) return;
  cg_xred_t x = {.blk = b};
  if (!xred_form(c, b, &x)) return;
  int top = chain_top(w, bs);
  for (int j = 0; j < top; j++)
    if (used_by_reduce(b, w->loops[j]->var)) {
      cg_fail(c, TN_EUNSUPPORTED,
              "block \"%s\": reduction loop %s is outside the perfect nest of reduce-only loops "
              "that holds the threadIdx.x loop; a reduction across threads must cover all of its "
              "reduction loops",
              b->name, w->loops[j]->var->name);
      return;
    }
  if (w->n - top > (int)TN_ARRAY_LEN(x.chain)) {
    cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": too many reduction loops (%d)", b->name, w->n - top);
    return;
  }
  for (int j = top; j < w->n; j++) {
    const ir_loop_t *l = w->loops[j];
    int axis;
    x.chain[x.nchain++] = l;
    if (cg_loop_tag(l, &axis) == IR_TAG_CLASS_THREAD) {
      if (x.threads) {
        cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": two threadIdx.x loops in one reduction", b->name);
        return;
      }
      x.threads = l->extent;
    }
  }
  x.top = x.chain[0];
  if (c->nxreds == c->capxreds) {
    c->capxreds = c->capxreds ? 2 * c->capxreds : 4;
    c->xreds = tn_xrealloc(c->xreds, sizeof(*c->xreds) * (size_t)c->capxreds);
  }
  c->xreds[c->nxreds++] = x;
}

const cg_xred_t *cg_xred_at(const cg_ctx_t *c, const ir_loop_t *top) {
  for (int i = 0; i < c->nxreds; i++)
    if (c->xreds[i].top == top) return &c->xreds[i];
  return NULL;
}

/* ---- buffer sizing ------------------------------------------------------- */

/* C target: temporaries allocated under a loop and bigger than this live on
 * the heap (OpenMP threads' stacks are a few MiB, and allocation points
 * nest); smaller ones are arrays on the stack, which also lets the compiler
 * keep small ones in registers. */
#define CG_STACK_MAX_BYTES (64 * 1024)
/* Local memory of a CUDA thread: 512 KiB on every architecture since
 * sm_20, the stack included. */
#define CG_GPU_LOCAL_MAX_BYTES (512 * 1024)

enum { VC_FIXED = 1, VC_VARYING = 2, VC_UNKNOWN = 4 };

/* Which loops of a site are fixed while the buffer lives: those enclosing
 * the allocation point (the first nfixed) and the vthread loops that give
 * the buffer a slice per virtual thread, except threadIdx loops for shared
 * memory on GPUs, whose threads all share one copy. */
typedef struct size_env {
  const cg_site_t *s;
  const cg_buf_t *cb;
  int nfixed;
  bool shared_gpu;
} size_env_t;

static bool is_vt_slice(const cg_buf_t *cb, const ir_var_t *v) {
  for (int i = 0; i < cb->nvt; i++)
    if (cb->vt[i]->var == v) return true;
  return false;
}

static int var_class(const size_env_t *env, const ir_var_t *v) {
  for (int i = 0; i < env->s->nloops; i++) {
    if (env->s->loops[i]->var != v) continue;
    int axis;
    if (is_vt_slice(env->cb, v)) return VC_FIXED;
    if (i >= env->nfixed) return VC_VARYING;
    if (env->shared_gpu && cg_loop_tag(env->s->loops[i], &axis) == IR_TAG_CLASS_THREAD) return VC_VARYING;
    return VC_FIXED;
  }
  return VC_UNKNOWN;
}

static int expr_class(const size_env_t *env, const ir_expr_t *e) {
  if (e->kind == IR_E_VAR) return var_class(env, e->u.var);
  if (e->kind == IR_E_FLOAT || e->kind == IR_E_LOAD || e->kind == IR_E_CALL) return VC_UNKNOWN;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids), k = 0;
  for (int i = 0; i < n; i++) k |= expr_class(env, kids[i]);
  return k;
}

static ir_expr_t *add_term(cg_ctx_t *c, ir_expr_t *acc, const ir_affine_term_t *t) {
  ir_expr_t *x = t->e;
  int64_t k = acc && t->coef < 0 ? -t->coef : t->coef;
  if (k != 1) x = ir_bin(c->scratch, IR_E_MUL, x, ir_const_int(c->scratch, x->dtype, k));
  if (!acc) return x;
  return ir_bin(c->scratch, t->coef < 0 ? IR_E_SUB : IR_E_ADD, acc, x);
}

/* e = fixed + varying over the terms of e's affine form (atoms such as
 * floordiv(i, 4) taken whole), the constant in the varying part; false when
 * a term mixes fixed and varying variables (or uses something else). */
static bool split_fixed(cg_ctx_t *c, const size_env_t *env, ir_expr_t *e, ir_expr_t **fixed,
                        ir_expr_t **varying) {
  ir_affine_t a = {0};
  bool ok = ir_affine_of(e, IR_AFFINE_ATOMS, &a);
  *fixed = *varying = NULL;
  for (int i = 0; ok && i < a.n; i++) {
    int k = expr_class(env, a.terms[i].e);
    ok = !(k & VC_UNKNOWN) && k != (VC_FIXED | VC_VARYING);
    if (ok && k == VC_FIXED) *fixed = add_term(c, *fixed, &a.terms[i]);
    else if (ok) *varying = add_term(c, *varying, &a.terms[i]);
  }
  if (ok && a.constant) {
    ir_expr_t *k = ir_const_int(c->scratch, e->dtype, a.constant);
    *varying = *varying ? ir_bin(c->scratch, IR_E_ADD, *varying, k) : k;
  }
  ir_affine_free(&a);
  return ok;
}

/* The range of a - b over the fixed variables' bounds (NULL stands for 0). */
static bool diff_range(cg_ctx_t *c, ir_expr_t *a, ir_expr_t *b, ir_interval_t *out) {
  ir_expr_t *zero = ir_int(c->scratch, 0);
  ir_expr_t *d = ir_simplify(c->scratch, ir_bin(c->scratch, IR_E_SUB, a ? a : zero, b ? b : zero),
                             &c->bounds);
  *out = ir_interval_of(d, &c->bounds);
  return out->lo != IR_INF_NEG && out->hi != IR_INF_POS;
}

/* One site's index split: fixed part and the range of the varying part. */
typedef struct dim_site {
  ir_expr_t *fixed;
  ir_interval_t var;
} dim_site_t;

/* Range of every site relative to site `base`'s fixed part; false when a
 * difference of fixed parts is unbounded. */
static bool range_from(cg_ctx_t *c, const dim_site_t *ds, int ns, int base, int64_t *lo, int64_t *hi) {
  *lo = IR_INF_POS;
  *hi = IR_INF_NEG;
  for (int i = 0; i < ns; i++) {
    ir_interval_t off = {0, 0};
    if (i != base && !diff_range(c, ds[i].fixed, ds[base].fixed, &off)) return false;
    *lo = TN_MIN(*lo, off.lo + ds[i].var.lo);
    *hi = TN_MAX(*hi, off.hi + ds[i].var.hi);
  }
  return true;
}

/* Extent and base of dimension d over every site: the index of each site is
 * fixed part (outer loops) + varying part; the base is one site's fixed part
 * (the one giving the smallest extent) plus a constant.  Leaves the full
 * shape (base 0) when no constant extent within the shape is found. */
static void size_dim(cg_ctx_t *c, cg_buf_t *cb, int d, const cg_site_t *const *S, int ns,
                     int nfixed) {
  bool shared_gpu = c->d->gpu && cb->b->scope == IR_SCOPE_SHARED;
  dim_site_t *ds = tn_xcalloc((size_t)ns, sizeof *ds);
  for (int i = 0; i < ns; i++) {
    size_env_t env = {S[i], cb, nfixed, shared_gpu};
    ir_expr_t *e = ir_simplify(c->scratch, cg_subst_bindings(c, S[i]->blk, S[i]->idx[d]), &c->bounds);
    ir_expr_t *vy;
    if (!split_fixed(c, &env, e, &ds[i].fixed, &vy)) goto done;
    ds[i].var = vy ? ir_interval_of(vy, &c->bounds) : (ir_interval_t){0, 0};
    if (ds[i].var.lo == IR_INF_NEG || ds[i].var.hi == IR_INF_POS) goto done;
  }
  int best = -1;
  int64_t blo = 0, bext = cb->b->shape[d] + 1;
  for (int base = 0; base < ns; base++) {
    int64_t lo, hi;
    if (range_from(c, ds, ns, base, &lo, &hi) && hi - lo + 1 < bext) {
      best = base;
      blo = lo;
      bext = hi - lo + 1;
    }
  }
  if (best < 0) goto done;
  cb->ext[d] = bext;
  ir_expr_t *m = ir_int(c->scratch, blo);
  if (ds[best].fixed) m = ir_simplify(c->scratch, ir_bin(c->scratch, IR_E_ADD, ds[best].fixed, m), &c->bounds);
  int64_t mv;
  cb->min[d] = ir_expr_is_const_int(m, &mv) && mv == 0 ? NULL : m;
done:
  free(ds);
}

static int common_prefix(const cg_site_t *const *S, int ns) {
  int n = S[0]->nloops;
  for (int i = 1; i < ns; i++) {
    n = TN_MIN(n, S[i]->nloops);
    for (int j = 0; j < n; j++)
      if (S[i]->loops[j] != S[0]->loops[j]) {
        n = j;
        break;
      }
  }
  return n;
}

/* A local buffer on a GPU whose every site is under a copy of a vthread loop
 * (below the allocation point) gets a slice per virtual thread of it. */
static void find_vt_slices(cg_ctx_t *c, cg_buf_t *cb, const cg_site_t *const *S, int ns, int np) {
  cb->nvt = 0;
  for (int j = np; j < S[0]->nloops; j++) {
    const ir_loop_t *l = S[0]->loops[j];
    int axis;
    if (cg_loop_tag(l, &axis) != IR_TAG_CLASS_VTHREAD || is_vt_slice(cb, l->var)) continue;
    bool all = true;
    for (int i = 1; i < ns && all; i++) {
      bool found = false;
      for (int k = np; k < S[i]->nloops && !found; k++) found = S[i]->loops[k]->var == l->var;
      all = found;
    }
    if (!all) continue;
    if (cb->nvt == CG_MAX_VTHREADS) {
      cg_fail(c, TN_EUNSUPPORTED, "local buffer \"%s\" is used under more than %d vthread loops (%s is one more)",
              cb->b->name, CG_MAX_VTHREADS, l->var->name);
      return;
    }
    cb->vt[cb->nvt++] = l;
  }
}

static bool writes_buf(const ir_block_t *b, const ir_buffer_t *buf) {
  const ir_stmt_t *parts[2] = {b->init, b->body};
  for (int i = 0; i < 2; i++)
    if (parts[i] && parts[i]->kind == IR_S_STORE && parts[i]->u.store.buf == buf) return true;
  return false;
}

/* C target: a block that updates the buffer in a reduction over a loop
 * enclosing the allocation point carries values from one iteration of that
 * loop to the next, which a copy per iteration would lose; the buffer then
 * lives above the outermost such loop.  Returns the loops that stay fixed. */
static int lift_above_reductions(const cg_buf_t *cb, const cg_site_t *const *S, int ns, int np) {
  for (int i = 0; i < ns; i++) {
    const ir_block_t *b = S[i]->blk;
    if (!b || !writes_buf(b, cb->b)) continue;
    for (int j = 0; j < np; j++)
      if (used_by_reduce(b, S[i]->loops[j]->var)) {
        np = j;
        break;
      }
  }
  return np;
}

/* C target: where a temporary too big for the stack is malloc'ed.  Its
 * storage has the same size at every iteration of the loops that enclose
 * its allocation point and every iteration is done with it before the next
 * starts, so one buffer per thread serves them all: at the entry when no
 * parallel loop encloses it, else at the start of the OpenMP region of the
 * parallel loop that does (par_at) -- a malloc per thread and call, not one
 * per iteration.  Not past a vectorized loop: its SIMD lanes would share the
 * buffer; it is then malloc'ed and freed at every iteration (heap_at_loop). */
static void place_heap(cg_buf_t *cb, const cg_site_t *s, int np) {
  const ir_loop_t *par = NULL;
  for (int j = 0; j < np; j++) {
    const ir_loop_t *l = s->loops[j];
    if (l->kind == IR_LOOP_VECTORIZED) {
      cb->heap_at_loop = true;
      return;
    }
    if (!par && l->kind == IR_LOOP_PARALLEL && l->extent > 1) par = l;
  }
  cb->heap = par == NULL;
  cb->par_at = par;
}

static void size_buffer(cg_ctx_t *c, cg_buf_t *cb) {
  const cg_site_t **S = tn_xmalloc(sizeof(*S) * (size_t)(c->nsites ? c->nsites : 1));
  int ns = 0;
  for (int i = 0; i < c->nsites; i++)
    if (c->sites[i].buf == cb->b) S[ns++] = &c->sites[i];
  if (ns == 0) goto done;
  cb->kernel = S[0]->kernel;
  for (int i = 1; i < ns && c->d->gpu; i++)
    if (S[i]->kernel != cb->kernel) {
      cg_fail(c, TN_EINVAL,
              "buffer \"%s\" (%s scope) is used by blocks \"%s\" and \"%s\", which are in "
              "different kernels; give it global scope or move both under one kernel",
              cb->b->name, ir_scope_name(cb->b->scope), S[0]->blk ? S[0]->blk->name : "?",
              S[i]->blk ? S[i]->blk->name : "?");
      goto done;
    }
  int np = common_prefix(S, ns);
  if (!c->d->gpu) np = lift_above_reductions(cb, S, ns, np);
  cb->alloc_at = np ? S[0]->loops[np - 1] : NULL;
  if (c->d->gpu && cb->b->scope == IR_SCOPE_SHARED) cb->alloc_at = NULL; /* kernel top */
  if (c->d->gpu && cb->b->scope == IR_SCOPE_LOCAL) find_vt_slices(c, cb, S, ns, np);
  for (int d = 0; d < cb->b->ndim; d++) size_dim(c, cb, d, S, ns, np);
  int64_t bytes = cg_buf_numel(cb) * cg_elem_bytes(c, cb->b);
  if (c->d->gpu && cb->b->scope == IR_SCOPE_LOCAL && bytes >= CG_GPU_LOCAL_MAX_BYTES)
    cg_fail(c, TN_EINVAL,
            "local buffer \"%s\" needs %lld bytes per thread%s; a GPU thread has less than %d KiB of "
            "local memory (the launch would fail)",
            cb->b->name, (long long)bytes, cb->nvt ? " (one slice per virtual thread)" : "",
            CG_GPU_LOCAL_MAX_BYTES / 1024);
  if (!c->d->gpu) {
    cb->heap = cb->alloc_at == NULL;
    if (!cb->heap && bytes > CG_STACK_MAX_BYTES) place_heap(cb, S[0], np);
  }
done:
  free(S);
}

/* ---- launch extents -------------------------------------------------------- */

static void dims_walk(cg_ctx_t *c, const ir_stmt_t *s, const ir_loop_t *first[2][3]) {
  if (!s || c->rc) return;
  if (s->kind == IR_S_SEQ) {
    for (int i = 0; i < s->u.seq.n; i++) dims_walk(c, s->u.seq.items[i], first);
    return;
  }
  if (s->kind == IR_S_BLOCK) {
    if (s->u.block.body && s->u.block.body->kind != IR_S_STORE) dims_walk(c, s->u.block.body, first);
    return;
  }
  if (s->kind != IR_S_LOOP) return;
  const ir_loop_t *l = &s->u.loop;
  int axis;
  ir_tag_class_t k = cg_loop_tag(l, &axis);
  if (k == IR_TAG_CLASS_BLOCK || k == IR_TAG_CLASS_THREAD) {
    const ir_loop_t **slot = &first[k == IR_TAG_CLASS_THREAD][axis];
    if (!*slot) *slot = l;
    else if ((*slot)->extent != l->extent)
      cg_fail(c, TN_EINVAL,
              "loops %s and %s are both bound to %s but have extents %lld and %lld; loops bound "
              "to one thread tag in a kernel must have equal extents",
              (*slot)->var->name, l->var->name, ir_thread_tag_name(l->tag), (long long)(*slot)->extent,
              (long long)l->extent);
  }
  dims_walk(c, l->body, first);
}

int cg_kernel_dims(cg_ctx_t *c, int k, int64_t grid[3], int64_t block[3]) {
  const ir_loop_t *first[2][3] = {{NULL}};
  dims_walk(c, c->roots[k], first);
  if (c->rc) return c->rc;
  bool bound = false;
  for (int a = 0; a < 3; a++) {
    grid[a] = first[0][a] ? first[0][a]->extent : 1;
    block[a] = first[1][a] ? first[1][a]->extent : 1;
    bound = bound || first[0][a] || first[1][a];
  }
  if (cg_wmma_kernel(c, k)) { /* tensor-core intrinsics: threadIdx.x is a warp's lanes */
    if (first[1][0] && first[1][0]->extent != 32)
      return cg_fail(c, TN_EINVAL,
                     "kernel %d runs tensor-core intrinsics, whose warps take threadIdx.x as their 32 lanes, but "
                     "loop %s binds threadIdx.x with extent %lld",
                     k, first[1][0]->var->name, (long long)first[1][0]->extent);
    block[0] = 32;
  }
  if (!bound) {
    const char *name = first_block_name(c->roots[k]);
    return cg_fail(c, TN_EINVAL,
                   "block \"%s\" is not bound to blockIdx/threadIdx; bind it or use the c (CPU) "
                   "target",
                   name ? name : "?");
  }
  return TN_OK;
}

/* ---- entry --------------------------------------------------------------- */

static void collect_roots(cg_ctx_t *c, const ir_stmt_t *s) {
  if (!s) return;
  if (s->kind == IR_S_SEQ) {
    for (int i = 0; i < s->u.seq.n; i++) collect_roots(c, s->u.seq.items[i]);
    return;
  }
  c->roots = tn_xrealloc(c->roots, sizeof(*c->roots) * (size_t)(c->nroots + 1));
  c->roots[c->nroots++] = s;
}

static void register_params(cg_ctx_t *c) {
  for (int i = 0; i < c->f->nparams; i++) {
    const ir_buffer_t *p = c->f->params[i];
    if (p->id < 0 || p->id >= c->nbufs) {
      cg_fail(c, TN_EINVAL, "parameter \"%s\" has id %d, outside the function's %d buffers",
              p->name, p->id, c->nbufs);
      return;
    }
    cg_buf_t *cb = &c->bufs[p->id];
    cb->b = p;
    cb->name = cg_name_unique(c, p->name);
    cb->param = true;
    cb->kernel = -1;
    for (int d = 0; d < p->ndim; d++) cb->ext[d] = p->shape[d];
  }
}

int cg_analyse(cg_ctx_t *c) {
  const ir_func_t *f = c->f;
  if (!f->root || f->root->kind != IR_S_BLOCK)
    return cg_fail(c, TN_EINVAL, "function %s has no root block", f->name);
  c->nvars = f->next_var_id;
  c->var_name = tn_xcalloc((size_t)(c->nvars ? c->nvars : 1), sizeof(*c->var_name));
  c->nbufs = f->next_buf_id;
  c->bufs = tn_xcalloc((size_t)(c->nbufs ? c->nbufs : 1), sizeof(*c->bufs));
  collect_roots(c, f->root->u.block.body);
  /* The entry and kernel names first, so that no buffer or variable takes them. */
  if (strcmp(cg_name_unique(c, c->entry), c->entry) != 0)
    return cg_fail(c, TN_EINVAL, "entry name \"%s\" is used by the generated code itself; pick another",
                   c->entry);
  for (int k = 0; k < c->nroots && c->d->gpu; k++)
    cg_name_unique(c, tn_arena_printf(c->scratch->arena, "%s_kernel%d", c->entry, k));
  cg_packing_analyse(c);
  register_params(c);
  register_allocs(c, &f->root->u.block);
  cg_layout_analyse(c);
  walk_t w = {.loops = tn_xmalloc(sizeof *w.loops * 32), .cap = 32};
  for (int k = 0; k < c->nroots && !c->rc; k++) {
    w.kernel = k;
    walk_stmt(c, &w, c->roots[k]);
  }
  free(w.loops);
  for (int i = 0; i < c->nbufs && !c->rc; i++)
    if (c->bufs[i].b && c->bufs[i].sized && c->bufs[i].used) size_buffer(c, &c->bufs[i]);
  if (!c->rc && c->d->gpu) cg_pipe_analyse(c);
  if (!c->rc && c->d->gpu) cg_wmma_analyse(c);
  if (!c->rc && c->d->gpu) cg_hopper_gemm_workspaces(c);
  return c->rc;
}
