/* xreduce.c — cross-thread reductions on GPUs: a block whose reduce
 * iterator is bound to threadIdx.x accumulates its share in a register, the
 * threads combine their partials (warp shuffles where the dialect has them,
 * else a tree in shared memory) and one thread writes the result. */
#include "cg_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int compute_bytes(ir_dtype_t t) { return ir_dtype_is_16bit_float(t) ? 4 : ir_dtype_bytes(t); }

/* acc = combine(acc, rhs); */
static void emit_combine(cg_ctx_t *c, const cg_xred_t *x, ir_dtype_t t, const char *acc,
                         const char *rhs) {
  tn_buf_t b;
  tn_buf_init(&b);
  cg_combine(c, x->op, t, acc, rhs, &b);
  cg_line(c, "%s = %s;", acc, tn_buf_str(&b));
  tn_buf_free(&b);
}

/* ---- the partial sum of one thread -------------------------------------------- */

static void open_chain_loop(cg_ctx_t *c, const ir_loop_t *l) {
  int axis;
  const char *v = cg_var(c, l->var);
  ir_tag_class_t k = cg_loop_tag(l, &axis);
  if (k == IR_TAG_CLASS_THREAD) {
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "int %s = %s;  /* threadIdx.x, extent %lld */", v, c->d->thread_idx[0],
            (long long)l->extent);
  } else if (l->extent == 1) {
    cg_line(c, "{");
    c->ind++;
    cg_line(c, "int %s = 0;", v);
  } else {
    if (l->kind == IR_LOOP_UNROLLED || k == IR_TAG_CLASS_VTHREAD) cg_line(c, "%s", c->d->unroll);
    cg_line(c, "for (int %s = 0; %s < %lld; ++%s) {", v, v, (long long)l->extent, v);
    c->ind++;
  }
  cg_stack_push(c, l);
  cg_emit_allocs(c, l);
}

static void emit_partial(cg_ctx_t *c, const cg_xred_t *x, const char *acc) {
  const ir_block_t *b = x->blk;
  for (int i = 0; i < x->nchain; i++) open_chain_loop(c, x->chain[i]);
  cg_line(c, "{  /* block %s */", cg_comment_name(c, b->name));
  c->ind++;
  cg_emit_iters(c, b, false);
  const ir_block_t *outer = c->blk;
  c->blk = b;
  if (b->predicate) {
    cg_line(c, "if (%s) {", cg_expr_str(c, b->predicate));
    c->ind++;
  }
  emit_combine(c, x, b->body->u.store.buf->dtype, acc, cg_expr_str(c, x->value));
  if (b->predicate) {
    c->ind--;
    cg_line(c, "}");
  }
  c->blk = outer;
  c->ind--;
  cg_line(c, "}");
  for (int i = 0; i < x->nchain; i++) {
    c->depth--;
    c->ind--;
    cg_line(c, "}");
  }
}

/* ---- combining the partials across threadIdx.x --------------------------------- */

/* Index of the group of threads that reduce together (threadIdx.y/z). */
static const char *group_index(cg_ctx_t *c) {
  if (c->block[1] * c->block[2] == 1) return "0";
  if (c->block[2] == 1) return c->d->thread_idx[1];
  return tn_arena_printf(c->scratch->arena, "(%s + %lld * %s)", c->d->thread_idx[1],
                         (long long)c->block[1], c->d->thread_idx[2]);
}

/* tuned_base: the first slot of this thread's group in a per-group array. */
static void base_line(cg_ctx_t *c, int64_t per_group) {
  if (c->block[1] * c->block[2] == 1) cg_line(c, "int tuned_base = 0;");
  else cg_line(c, "int tuned_base = %s * %lld;", group_index(c), (long long)per_group);
}

static const char *shared_array(cg_ctx_t *c, ir_dtype_t t, int64_t n) {
  const char *name = tn_arena_printf(c->scratch->arena, "tuned_red_buf%d", c->tmp++);
  tn_buf_printf(&c->shared, "  %s%s %s[%lld];\n", c->d->shared_decl, c->d->compute[t], name,
                (long long)n);
  c->shared_bytes += n * compute_bytes(t);
  return name;
}

/* Shared-memory tree: every step halves the live partials; works for any
 * thread count (the first step folds the part beyond a power of two). */
static void tree_reduce(cg_ctx_t *c, const cg_xred_t *x, ir_dtype_t t, const char *acc) {
  int64_t T = x->threads, G = c->block[1] * c->block[2], P = 1;
  while (P < T) P *= 2;
  const char *buf = shared_array(c, t, G * T);
  cg_line(c, "{");
  c->ind++;
  cg_line(c, "int tuned_t = %s;", c->d->thread_idx[0]);
  base_line(c, T);
  cg_line(c, "%s[tuned_base + tuned_t] = %s;", buf, acc);
  cg_barrier(c, false);
  cg_line(c, "for (int tuned_s = %lld; tuned_s > 0; tuned_s >>= 1) {", (long long)(P / 2));
  c->ind++;
  char *lhs = tn_arena_printf(c->scratch->arena, "%s[tuned_base + tuned_t]", buf);
  char *rhs = tn_arena_printf(c->scratch->arena, "%s[tuned_base + tuned_t + tuned_s]", buf);
  cg_line(c, "if (tuned_t < tuned_s && tuned_t + tuned_s < %lld) {", (long long)T);
  c->ind++;
  emit_combine(c, x, t, lhs, rhs);
  c->ind--;
  cg_line(c, "}");
  cg_barrier(c, false);
  c->ind--;
  cg_line(c, "}");
  cg_line(c, "%s = %s[tuned_base];", acc, buf);
  cg_barrier(c, false); /* the buffer may be reused by the next reduction */
  c->ind--;
  cg_line(c, "}");
}

/* Lanes present in this thread's warp (a partial last warp when the block
 * is not a multiple of 32 threads). */
static void emit_mask(cg_ctx_t *c) {
  int64_t n = c->block[0] * c->block[1] * c->block[2];
  if (n % 32 == 0) {
    cg_line(c, "const unsigned tuned_mask = 0xffffffffu;");
    return;
  }
  cg_line(c, "const int tuned_lin = %s + %lld * (%s + %lld * %s);", c->d->thread_idx[0],
          (long long)c->block[0], c->d->thread_idx[1], (long long)c->block[1], c->d->thread_idx[2]);
  cg_line(c, "const int tuned_left = %lld - (tuned_lin & ~31);", (long long)n);
  cg_line(c, "const unsigned tuned_mask = tuned_left >= 32 ? 0xffffffffu : (1u << tuned_left) - 1u;");
}

/* Warp shuffles within segments of min(T, 32) lanes, then (T > 32) one
 * partial per warp through shared memory. */
static void warp_reduce(cg_ctx_t *c, const cg_xred_t *x, ir_dtype_t t, const char *acc) {
  int64_t T = x->threads, G = c->block[1] * c->block[2], W = TN_MIN(T, 32);
  cg_line(c, "{");
  c->ind++;
  emit_mask(c);
  cg_line(c, "for (int tuned_off = %lld; tuned_off > 0; tuned_off >>= 1) {", (long long)(W / 2));
  c->ind++;
  char *shfl = tn_arena_printf(c->scratch->arena, "__shfl_down_sync(tuned_mask, %s, tuned_off, %lld)",
                               acc, (long long)W);
  emit_combine(c, x, t, acc, shfl);
  c->ind--;
  cg_line(c, "}");
  if (T <= 32) {
    cg_line(c, "%s = __shfl_sync(tuned_mask, %s, 0, %lld);", acc, acc, (long long)W);
  } else {
    int64_t NW = T / 32;
    const char *buf = shared_array(c, t, G * NW);
    base_line(c, NW);
    cg_line(c, "if ((%s & 31) == 0) %s[tuned_base + (%s >> 5)] = %s;", c->d->thread_idx[0], buf,
            c->d->thread_idx[0], acc);
    cg_barrier(c, false);
    cg_line(c, "%s = %s[tuned_base];", acc, buf);
    cg_line(c, "for (int tuned_w = 1; tuned_w < %lld; ++tuned_w) {", (long long)NW);
    char *elem = tn_arena_printf(c->scratch->arena, "%s[tuned_base + tuned_w]", buf);
    c->ind++;
    emit_combine(c, x, t, acc, elem);
    c->ind--;
    cg_line(c, "}");
    cg_barrier(c, false);
  }
  c->ind--;
  cg_line(c, "}");
}

static void all_reduce(cg_ctx_t *c, const cg_xred_t *x, ir_dtype_t t, const char *acc) {
  int64_t T = x->threads;
  if (T <= 1) return;
  bool pow2 = (T & (T - 1)) == 0;
  if (c->d->shuffle && ((T <= 32 && pow2) || T % 32 == 0)) warp_reduce(c, x, t, acc);
  else tree_reduce(c, x, t, acc);
}

/* ---- the result ------------------------------------------------------------------- */

static bool uses_chain(const cg_xred_t *x, const ir_expr_t *e) {
  for (int i = 0; i < x->nchain; i++)
    if (ir_expr_uses_var(e, x->chain[i]->var)) return true;
  return false;
}

/* The predicate's conjuncts that do not depend on the reduction loops:
 * they decide whether the element is written at all. */
static void outer_conjuncts(cg_ctx_t *c, const cg_xred_t *x, const ir_expr_t *e, tn_buf_t *o) {
  if (!e) return;
  if (e->kind == IR_E_AND) {
    outer_conjuncts(c, x, e->u.bin.a, o);
    outer_conjuncts(c, x, e->u.bin.b, o);
    return;
  }
  ir_expr_t *bound = cg_subst_bindings(c, x->blk, (ir_expr_t *)e);
  if (uses_chain(x, bound)) return;
  tn_buf_printf(o, "%s(", o->len ? " && " : "");
  cg_print_expr(c, e, o);
  tn_buf_putc(o, ')');
}

static void emit_result(cg_ctx_t *c, const cg_xred_t *x, const char *acc) {
  const ir_block_t *b = x->blk;
  const ir_stmt_t *st = b->body;
  const ir_buffer_t *dst = st->u.store.buf;
  cg_line(c, "{");
  c->ind++;
  cg_emit_iters(c, b, true);
  const ir_block_t *outer = c->blk;
  c->blk = b;
  tn_buf_t g;
  tn_buf_init(&g);
  outer_conjuncts(c, x, b->predicate, &g);
  if (dst->scope != IR_SCOPE_LOCAL) cg_thread_guard(c, &g);
  if (g.len) {
    cg_line(c, "if (%s) {", tn_buf_str(&g));
    c->ind++;
  }
  const ir_expr_t *start = b->init ? b->init->u.store.value
                                   : ir_load(c->scratch, (ir_buffer_t *)dst, st->u.store.idx, st->u.store.n);
  tn_buf_t v;
  tn_buf_init(&v);
  cg_combine(c, x->op, dst->dtype, cg_expr_str(c, start), acc, &v);
  cg_emit_store_text(c, dst, st->u.store.idx, tn_buf_str(&v));
  tn_buf_free(&v);
  if (g.len) {
    c->ind--;
    cg_line(c, "}");
  }
  tn_buf_free(&g);
  c->blk = outer;
  c->ind--;
  cg_line(c, "}");
}

/* Barrier bookkeeping: the partial sums read what the block reads; the
 * result writes the element. */
static void note(cg_ctx_t *c, const cg_xred_t *x, bool writes) {
  cg_access_t a;
  cg_access_get(c, cg_block_stmt(x->blk), &a);
  for (int i = 0; i < c->nbufs; i++) {
    if (writes) c->pend_w[i] |= a.w[i];
    else c->read_since[i] |= a.r[i];
  }
  cg_access_free(&a);
}

void cg_emit_xreduce(cg_ctx_t *c, const cg_xred_t *x) {
  ir_dtype_t t = x->blk->body->u.store.buf->dtype;
  const char *acc = tn_arena_printf(c->scratch->arena, "tuned_red%d", c->tmp++);
  tn_buf_t id;
  tn_buf_init(&id);
  cg_identity(c, x->op, t, &id);
  cg_line(c, "{  /* block %s: reduction across threadIdx.x (%lld threads) */", cg_comment_name(c, x->blk->name),
          (long long)x->threads);
  c->ind++;
  cg_line(c, "%s %s = %s;", c->d->compute[t], acc, tn_buf_str(&id));
  tn_buf_free(&id);
  emit_partial(c, x, acc);
  note(c, x, false);
  all_reduce(c, x, t, acc);
  emit_result(c, x, acc);
  note(c, x, true);
  c->ind--;
  cg_line(c, "}");
}
