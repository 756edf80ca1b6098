/* eval_vector.c — the evaluator's fast path.  Where a loop heads a perfect
 * nest that ends in one compute block, the block is compiled once into a
 * linear program that evaluates up to EV_LANES iterations of the loop at a
 * time, every register classified as uniform (same for all lanes), affine in
 * the lane (integer base + stride * lane) or varying (one value per lane),
 * with lane masks for predicates and select arms.  Results are written back
 * by folding into one element in loop order (a reduction along the innermost
 * loop) or by scattering to distinct elements (lanes over an outer loop run
 * every iteration of the loops inside it in order; each lane owns its
 * element, so each element sees exactly the scalar path's sequence of
 * updates).  A chunk that fits neither pattern, or that meets an error, is
 * undone and redone by the scalar path (eval_scalar.c): both paths agree bit
 * for bit and report the same errors. */
#include "eval_internal.h"

#include <stdlib.h>
#include <string.h>

#define EV_LANES 256     /* iterations per chunk of the fast path */
/* Doubles per register: not a multiple of 4 KiB apart, where loads would
 * wait on unrelated stores. */
#define EV_REG_STRIDE (EV_LANES + 24)
#define EV_MAX_INNER 8    /* loops of a perfect nest run under one lane loop */
#define EV_NEST_MIN 16    /* smallest lane loop that gets inner loops */

enum { VC_U, VC_A, VC_V }; /* uniform, affine in the lane, varying */
enum { VOP_CONST = IR_E__COUNT, VOP_OUTER, VOP_LANE, VOP_MASK, VOP_MASKZ };
enum { VM_FOLD, VM_SCATTER };

/* One instruction; it defines the register with its own index. */
typedef struct vins {
  int op;            /* ir_expr_kind_t or VOP_* */
  uint8_t cls;       /* VC_* */
  bool isint;        /* integer semantics */
  bool lanes;        /* a lane-wise consumer reads this register's lanes */
  bool self;         /* load of the element the block stores (scatter mode) */
  ir_dtype_t dtype;  /* NOT/NEG/CAST */
  int fn;            /* CALL */
  int mask;          /* mask slot: the lanes on which this instruction counts */
  int a, b, c;       /* operands (SELECT: cond, t, f); MASK: a = cond, c = negate */
  int mdst;          /* MASK/MASKZ: mask slot written */
  int buf, arg0, n;  /* LOAD: buffer id, index registers args[arg0 .. arg0 + n) */
  double k;          /* CONST: value; OUTER: variable id */
} vins_t;

struct vprog {
  const ir_stmt_t *loop;      /* the lane loop */
  const ir_stmt_t *inner[EV_MAX_INNER]; /* perfect nest below it, outermost first */
  int ninner;
  vins_t *ins;
  int n, cap;
  int *args;
  int nargs, argcap;
  int nmasks;
  int mode;                   /* VM_* */
  int store_buf, store_arg0, store_n;
  int value;                  /* register stored (scatter) or folded (fold) */
  int fold_op;
  bool fold_left, fold_isint; /* the stored element is the left operand */
  int pred_mask, init_mask, init_val; /* init_val < 0: no init */
  /* per-chunk state */
  double *ru, *rs;            /* uniform value or affine base; affine stride */
  const double **rv;          /* lanes */
  double *own;                /* n * EV_REG_STRIDE */
  uint8_t *mact;              /* nmasks * EV_LANES */
  int *mcnt;
  int64_t *offs;
  /* nest mode: elements written in the current chunk, to undo before a redo */
  uint8_t *saved;
  int64_t *undo_off;
  double *undo_val;
  int nsaved;
};

static vprog_t prog_none; /* cache marker: loop not eligible */

typedef struct vcomp {
  ev_t *ev;
  vprog_t *p;
  const ir_block_t *blk;
  const ir_stmt_t *store;
  int loopvar; /* id */
  int lane_reg;
  int *iter_reg;
  bool allow_self;
  bool bad;
} vcomp_t;

static int emit(vcomp_t *c, vins_t in) {
  vprog_t *p = c->p;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 32;
    p->ins = tn_xrealloc(p->ins, sizeof(vins_t) * (size_t)p->cap);
  }
  p->ins[p->n] = in;
  return p->n++;
}

static int push_arg(vcomp_t *c, int reg) {
  vprog_t *p = c->p;
  if (p->nargs == p->argcap) {
    p->argcap = p->argcap ? 2 * p->argcap : 16;
    p->args = tn_xrealloc(p->args, sizeof(int) * (size_t)p->argcap);
  }
  p->args[p->nargs] = reg;
  return p->nargs++;
}

/* A register's class.  Once compilation has failed (c->bad) operands are
 * placeholders that may name no register yet, and the program is dropped. */
static int cls_of(const vcomp_t *c, int reg) {
  if (c->bad) return VC_U;
  assert(reg >= 0 && reg < c->p->n);
  return c->p->ins[reg].cls;
}

static int emit_mask(vcomp_t *c, int op, int parent, int cond, bool negate) {
  vins_t in = {.op = op, .cls = VC_U, .mask = parent, .a = cond, .c = negate,
               .mdst = c->p->nmasks++};
  emit(c, in);
  return in.mdst;
}

static int cexpr(vcomp_t *c, const ir_expr_t *e, int mask);

static int cvar(vcomp_t *c, const ir_var_t *v) {
  if (v->id == c->loopvar) {
    if (c->lane_reg < 0)
      c->lane_reg = emit(c, (vins_t){.op = VOP_LANE, .cls = VC_A, .isint = true});
    return c->lane_reg;
  }
  for (int i = 0; i < c->blk->niters; i++)
    if (c->blk->iters[i].var->id == v->id) {
      if (c->iter_reg[i] < 0) c->bad = true; /* a binding that uses an iterator */
      return c->iter_reg[i] < 0 ? 0 : c->iter_reg[i];
    }
  if (v->id < 0 || v->id >= c->ev->nvars) c->bad = true;
  return emit(c, (vins_t){.op = VOP_OUTER, .cls = VC_U, .isint = true, .k = v->id});
}

static bool usable_buf(vcomp_t *c, const ir_buffer_t *b, int n) {
  ev_t *ev = c->ev;
  return b->id >= 0 && b->id < ev->nbufs && ev->bufs[b->id].data && ev->bufs[b->id].b == b &&
         n == b->ndim;
}

static int cload(vcomp_t *c, const ir_expr_t *e, int mask) {
  const ir_buffer_t *b = e->u.load.buf;
  const ir_stmt_t *st = c->store;
  bool self = false;
  if (!usable_buf(c, b, e->u.load.n)) c->bad = true;
  if (b == st->u.store.buf) {
    self = c->allow_self && same_indices(e->u.load.idx, st->u.store.idx, st->u.store.n);
    if (!self) c->bad = true;
  }
  if (c->bad) return 0;
  assert(e->u.load.n <= IR_MAX_DIMS); /* usable_buf: the rank of a bound buffer */
  int regs[IR_MAX_DIMS], cls = VC_U;
  for (int d = 0; d < e->u.load.n; d++) {
    regs[d] = cexpr(c, e->u.load.idx[d], mask);
    cls = TN_MAX(cls, cls_of(c, regs[d]));
  }
  int arg0 = c->p->nargs;
  for (int d = 0; d < e->u.load.n; d++) push_arg(c, regs[d]);
  return emit(c, (vins_t){.op = IR_E_LOAD, .cls = cls == VC_U ? VC_U : VC_V, .self = self,
                          .mask = mask, .buf = b->id, .arg0 = arg0, .n = e->u.load.n});
}

static int cselect(vcomp_t *c, const ir_expr_t *e, int mask) {
  int cond = cexpr(c, e->u.sel.cond, mask);
  int mt = emit_mask(c, VOP_MASK, mask, cond, false);
  int mf = emit_mask(c, VOP_MASK, mask, cond, true);
  int t = cexpr(c, e->u.sel.t, mt), f = cexpr(c, e->u.sel.f, mf);
  bool uni = cls_of(c, cond) == VC_U && cls_of(c, t) == VC_U && cls_of(c, f) == VC_U;
  return emit(c, (vins_t){.op = IR_E_SELECT, .cls = uni ? VC_U : VC_V, .mask = mask, .a = cond,
                          .b = t, .c = f});
}

/* Class of a binary result: integer +, - and * by a uniform keep the affine form. */
static int bin_class(int op, bool isint, int ca, int cb) {
  if (ca == VC_U && cb == VC_U) return VC_U;
  if (!isint || ca == VC_V || cb == VC_V) return VC_V;
  if (op == IR_E_ADD || op == IR_E_SUB) return VC_A;
  if (op == IR_E_MUL && (ca == VC_U || cb == VC_U)) return VC_A;
  return VC_V;
}

/* The float operations with tight loops, where a uniform operand is used as
 * a scalar instead of being spread over lanes. */
static bool hot_float_op(const vins_t *in) {
  return !in->isint && (in->op == IR_E_ADD || in->op == IR_E_SUB || in->op == IR_E_MUL ||
                        in->op == IR_E_DIV || in->op == IR_E_MIN || in->op == IR_E_MAX);
}

static int cexpr(vcomp_t *c, const ir_expr_t *e, int mask) {
  if (c->bad) return 0;
  switch (e->kind) {
  case IR_E_INT: return emit(c, (vins_t){.op = VOP_CONST, .cls = VC_U, .k = (double)e->u.ival});
  case IR_E_FLOAT: return emit(c, (vins_t){.op = VOP_CONST, .cls = VC_U, .k = e->u.fval});
  case IR_E_VAR: return cvar(c, e->u.var);
  case IR_E_LOAD: return cload(c, e, mask);
  case IR_E_SELECT: return cselect(c, e, mask);
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: {
    int a = cexpr(c, e->u.un, mask), ca = cls_of(c, a);
    bool isint = intlike(e->dtype);
    int cls = ca == VC_U ? VC_U : (ca == VC_A && e->kind == IR_E_NEG && isint) ? VC_A : VC_V;
    return emit(c, (vins_t){.op = e->kind, .cls = cls, .isint = isint, .dtype = e->dtype,
                            .mask = mask, .a = a});
  }
  case IR_E_CALL: {
    int a = cexpr(c, e->u.call.args[0], mask);
    int b = e->u.call.n > 1 ? cexpr(c, e->u.call.args[1], mask) : a;
    int cls = cls_of(c, a) == VC_U && cls_of(c, b) == VC_U ? VC_U : VC_V;
    return emit(c, (vins_t){.op = IR_E_CALL, .cls = cls, .fn = e->u.call.fn, .mask = mask,
                            .a = a, .b = b});
  }
  default: {
    if (!ir_expr_is_binary(e->kind)) {
      c->bad = true;
      return 0;
    }
    int a = cexpr(c, e->u.bin.a, mask), b = cexpr(c, e->u.bin.b, mask);
    bool isint = intlike(e->dtype);
    int cls = bin_class(e->kind, isint, cls_of(c, a), cls_of(c, b));
    return emit(c, (vins_t){.op = e->kind, .cls = cls, .isint = isint, .mask = mask, .a = a,
                            .b = b});
  }
  }
}

static const ir_stmt_t *strip_seq(const ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

/* The compute block at the bottom of a perfect loop nest below `loop` (each
 * loop's body just the next loop, through one-item sequences): a single
 * store with an optional init.  Fills the loops in between, outermost first. */
static const ir_block_t *nest_leaf(const ir_stmt_t *loop, const ir_stmt_t **inner, int *ninner) {
  const ir_stmt_t *s = strip_seq(loop->u.loop.body);
  *ninner = 0;
  while (s && s->kind == IR_S_LOOP) {
    if (*ninner == EV_MAX_INNER) return NULL;
    inner[(*ninner)++] = s;
    s = strip_seq(s->u.loop.body);
  }
  if (!s || s->kind != IR_S_BLOCK) return NULL;
  const ir_block_t *b = &s->u.block;
  if (!b->body || b->body->kind != IR_S_STORE) return NULL;
  if (b->init && b->init->kind != IR_S_STORE) return NULL;
  return b;
}

/* Fold mode: the value must be `C[idx] op rest` or `rest op C[idx]`. */
static void compile_fold(vcomp_t *c) {
  const ir_expr_t *v = c->store->u.store.value;
  vprog_t *p = c->p;
  if (!ir_expr_is_binary(v->kind)) {
    c->bad = true;
    return;
  }
  p->mode = VM_FOLD;
  p->fold_op = v->kind;
  p->fold_isint = intlike(v->dtype);
  p->fold_left = is_self_load(v->u.bin.a, c->store);
  if (!p->fold_left && !is_self_load(v->u.bin.b, c->store)) {
    c->bad = true;
    return;
  }
  p->value = cexpr(c, p->fold_left ? v->u.bin.b : v->u.bin.a, p->pred_mask);
}

static void compile_init(vcomp_t *c) {
  const ir_block_t *b = c->blk;
  const ir_stmt_t *init = b->init, *st = c->store;
  vprog_t *p = c->p;
  p->init_val = -1;
  if (!init) return;
  if (init->u.store.buf != st->u.store.buf || init->u.store.n != st->u.store.n ||
      !same_indices(init->u.store.idx, st->u.store.idx, st->u.store.n)) {
    c->bad = true;
    return;
  }
  int m = p->pred_mask;
  for (int i = 0; i < b->niters; i++)
    if (b->iters[i].kind == IR_ITER_REDUCE) m = emit_mask(c, VOP_MASKZ, m, c->iter_reg[i], false);
  p->init_mask = m;
  p->init_val = cexpr(c, init->u.store.value, m);
}

static void need_lanes(vprog_t *p, int reg) {
  if (reg >= 0) p->ins[reg].lanes = true;
}

static void mark_lanes(vprog_t *p) {
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    if (in->op == VOP_MASK || in->op == VOP_MASKZ) {
      if (p->ins[in->a].cls == VC_V) need_lanes(p, in->a);
    } else if (in->cls == VC_V && in->op == IR_E_SELECT) {
      if (p->ins[in->a].cls != VC_U) need_lanes(p, in->a);
      need_lanes(p, in->b);
      need_lanes(p, in->c);
    } else if (in->cls == VC_V && hot_float_op(in)) {
      if (p->ins[in->a].cls != VC_U) need_lanes(p, in->a);
      if (p->ins[in->b].cls != VC_U) need_lanes(p, in->b);
    } else if (in->cls == VC_V && in->op != IR_E_LOAD) {
      need_lanes(p, in->a);
      if (ir_expr_is_binary(in->op) || in->op == IR_E_CALL) need_lanes(p, in->b);
    }
  }
  need_lanes(p, p->value); /* the init value is read through lane_val */
}

void ev_prog_free(vprog_t *p) {
  if (!p || p == &prog_none) return;
  free(p->ins);
  free(p->args);
  free(p->ru);
  free(p->rs);
  free(p->rv);
  free(p->own);
  free(p->mact);
  free(p->mcnt);
  free(p->offs);
  free(p->saved);
  free(p->undo_off);
  free(p->undo_val);
  free(p);
}

static void prog_alloc_state(vprog_t *p) {
  p->ru = tn_xcalloc((size_t)p->n, sizeof(double));
  p->rs = tn_xcalloc((size_t)p->n, sizeof(double));
  p->rv = tn_xcalloc((size_t)p->n, sizeof(double *));
  p->own = tn_xcalloc((size_t)p->n * EV_REG_STRIDE, sizeof(double));
  p->mact = tn_xcalloc((size_t)p->nmasks * EV_LANES, 1);
  p->mcnt = tn_xcalloc((size_t)p->nmasks, sizeof(int));
  p->offs = tn_xcalloc(EV_LANES, sizeof(int64_t));
  p->saved = tn_xcalloc(EV_LANES, 1);
  p->undo_off = tn_xcalloc(EV_LANES, sizeof(int64_t));
  p->undo_val = tn_xcalloc(EV_LANES, sizeof(double));
  for (int i = 0; i < p->n; i++) p->rv[i] = p->own + (size_t)i * EV_REG_STRIDE;
}

/* Whether an expression (through the block's iterator bindings) uses a loop
 * variable of the nest below the lane loop. */
static bool uses_inner(const vcomp_t *c, const ir_expr_t *e, int depth) {
  if (!e || depth > 64) return depth > 64;
  if (e->kind == IR_E_VAR) {
    for (int i = 0; i < c->p->ninner; i++)
      if (c->p->inner[i]->u.loop.var->id == e->u.var->id) return true;
    for (int i = 0; i < c->blk->niters; i++)
      if (c->blk->iters[i].var->id == e->u.var->id)
        return uses_inner(c, c->blk->iters[i].binding, depth + 1);
    return false;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (uses_inner(c, kids[i], depth + 1)) return true;
  return false;
}

/* Store indices; returns their joint class. */
static int compile_store_idx(vcomp_t *c) {
  const ir_stmt_t *st = c->store;
  vprog_t *p = c->p;
  int regs[IR_MAX_DIMS], cls = VC_U;
  if (!usable_buf(c, st->u.store.buf, st->u.store.n)) c->bad = true;
  assert(c->bad || st->u.store.n <= IR_MAX_DIMS);
  for (int d = 0; d < st->u.store.n && !c->bad; d++) {
    regs[d] = cexpr(c, st->u.store.idx[d], p->pred_mask);
    cls = TN_MAX(cls, cls_of(c, regs[d]));
    if (p->ninner && uses_inner(c, st->u.store.idx[d], 0)) c->bad = true;
  }
  p->store_buf = st->u.store.buf->id;
  p->store_arg0 = p->nargs;
  p->store_n = st->u.store.n;
  for (int d = 0; d < st->u.store.n && !c->bad; d++) push_arg(c, regs[d]);
  return cls;
}

#ifndef NDEBUG
static bool buf_bound(const ev_t *ev, int id) {
  return id >= 0 && id < ev->nbufs && ev->bufs[id].data;
}

/* What the chunk runner relies on without checking, so that debug builds
 * verify it once per program instead of on every chunk: operands defined
 * before use, masks, variables, buffers and argument lists in range. */
static bool prog_valid(const ev_t *ev, const vprog_t *p) {
  bool ok = p->value >= 0 && p->value < p->n && p->init_val < p->n &&
            p->pred_mask < p->nmasks && p->init_mask < p->nmasks && buf_bound(ev, p->store_buf) &&
            p->store_n <= IR_MAX_DIMS && p->store_arg0 + p->store_n <= p->nargs;
  for (int i = 0; i < p->ninner; i++)
    ok &= p->inner[i]->u.loop.var->id >= 0 && p->inner[i]->u.loop.var->id < ev->nvars;
  for (int i = 0; i < p->n && ok; i++) {
    const vins_t *in = &p->ins[i];
    ok = in->mask >= 0 && in->mask < p->nmasks;
    switch (in->op) {
    case VOP_CONST: case VOP_LANE: break;
    case VOP_OUTER: ok &= in->k >= 0 && in->k < ev->nvars; break;
    case VOP_MASK: case VOP_MASKZ: ok &= in->a < i && in->mdst < p->nmasks; break;
    case IR_E_SELECT: ok &= in->a < i && in->b < i && in->c < i; break;
    case IR_E_LOAD:
      ok &= buf_bound(ev, in->buf) && in->n <= IR_MAX_DIMS && in->arg0 + in->n <= p->nargs;
      for (int d = 0; d < in->n && ok; d++) ok &= p->args[in->arg0 + d] < i;
      break;
    default: ok &= in->a < i && in->b < i; break; /* unary: b is 0 */
    }
  }
  return ok;
}
#endif

/* Compiles the block under a lane loop; NULL when the loop must run on the
 * scalar path.  With no loops in between, the block may fold into one element
 * (store independent of the lane) or scatter to distinct elements.  With a
 * nest in between (lanes over an outer loop, the inner loops iterated for
 * each chunk), the store must be affine in the lane and independent of the
 * inner loops, so that lanes own disjoint elements and each element still
 * sees its updates in loop order. */
static vprog_t *vcompile(ev_t *ev, const ir_stmt_t *loop) {
  vprog_t *p = tn_xcalloc(1, sizeof *p);
  const ir_block_t *b = nest_leaf(loop, p->inner, &p->ninner);
  if (!b || (p->ninner && loop->u.loop.extent < EV_NEST_MIN)) {
    free(p);
    return NULL;
  }
  p->loop = loop;
  p->nmasks = 1;
  vcomp_t c = {.ev = ev, .p = p, .blk = b, .store = b->body, .loopvar = loop->u.loop.var->id,
               .lane_reg = -1, .iter_reg = tn_xmalloc(sizeof(int) * (size_t)(b->niters + 1))};
  for (int i = 0; i < p->ninner; i++)
    if (p->inner[i]->u.loop.var->id < 0 || p->inner[i]->u.loop.var->id >= ev->nvars) c.bad = true;
  for (int i = 0; i < b->niters; i++) c.iter_reg[i] = -1;
  for (int i = 0; i < b->niters && !c.bad; i++) {
    if (!b->iters[i].binding) c.bad = true;
    else c.iter_reg[i] = cexpr(&c, b->iters[i].binding, 0);
  }
  if (b->predicate && !c.bad)
    p->pred_mask = emit_mask(&c, VOP_MASK, 0, cexpr(&c, b->predicate, 0), false);
  if (!c.bad) compile_init(&c);
  int cls = c.bad ? VC_U : compile_store_idx(&c);
  if (!c.bad && cls == VC_U && !p->ninner) {
    compile_fold(&c);
  } else if (!c.bad && cls != VC_U && !(p->ninner && cls == VC_V)) {
    p->mode = VM_SCATTER;
    c.allow_self = true;
    p->value = cexpr(&c, b->body->u.store.value, p->pred_mask);
  } else {
    c.bad = true;
  }
  free(c.iter_reg);
  if (c.bad) {
    ev_prog_free(p);
    return NULL;
  }
  assert(prog_valid(ev, p));
  mark_lanes(p);
  prog_alloc_state(p);
  return p;
}

/* Loads that gather from scattered addresses: a lane-dependent index in any
 * but the last dimension, or a non-affine one. */
static int strided_loads(const vprog_t *p) {
  int n = 0;
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    if (in->op != IR_E_LOAD || in->cls == VC_U) continue;
    for (int d = 0; d < in->n; d++) {
      int cls = p->ins[p->args[in->arg0 + d]].cls;
      if (cls == VC_V || (cls == VC_A && d < in->n - 1)) {
        n++;
        break;
      }
    }
  }
  return n;
}

static vprog_t *prog_for(ev_t *ev, const ir_stmt_t *s);

/* The program for a lane loop: lanes over an outer loop of a nest avoid the
 * serial fold of the innermost one, unless they gather more scattered data
 * (as B[j, k] does with lanes over j). */
static vprog_t *vchoose(ev_t *ev, const ir_stmt_t *loop) {
  vprog_t *p = vcompile(ev, loop);
  if (!p || !p->ninner) return p;
  vprog_t *leaf = prog_for(ev, p->inner[p->ninner - 1]);
  if (leaf && strided_loads(leaf) < strided_loads(p)) {
    ev_prog_free(p);
    return NULL;
  }
  return p;
}

/* ---- running a program on one chunk ------------------------------------ */

/* RUN_SCALAR: redo the chunk on the scalar path; RUN_STOP: the stop callback said so */
enum { RUN_OK = 0, RUN_SCALAR = 1, RUN_STOP = 2 };

static inline double lane_val(const vprog_t *p, int r, int l) {
  switch (p->ins[r].cls) {
  case VC_U: return p->ru[r];
  case VC_A: return p->ru[r] + p->rs[r] * l;
  default: return p->rv[r][l];
  }
}

static void fill_lanes(vprog_t *p, int i, int L) {
  double *o = p->own + (size_t)i * EV_REG_STRIDE, u = p->ru[i], s = p->rs[i];
  if (p->ins[i].cls == VC_U)
    for (int l = 0; l < L; l++) o[l] = u;
  else
    for (int l = 0; l < L; l++) o[l] = u + s * l;
  p->rv[i] = o;
}

/* Uniform and affine instructions: one value (and a stride) per chunk. */
static int vstep_scalar(ev_t *ev, vprog_t *p, int i, int64_t x0) {
  const vins_t *in = &p->ins[i];
  double *ru = p->ru, *rs = p->rs;
  rs[i] = 0;
  switch (in->op) {
  case VOP_CONST: ru[i] = in->k; break;
  case VOP_OUTER: ru[i] = ev->vars[(int)in->k]; break;
  case VOP_LANE: ru[i] = (double)x0; rs[i] = 1; break;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    ru[i] = apply_un(in->op, in->dtype, ru[in->a]);
    if (in->cls == VC_A) rs[i] = -rs[in->a] + 0.0;
    break;
  case IR_E_SELECT: ru[i] = ru[in->a] != 0 ? ru[in->b] : ru[in->c]; break;
  case IR_E_CALL: ru[i] = apply_call(in->fn, ru[in->a], ru[in->b]); break;
  default:
    if (can_fail(in->op, in->isint) && p->mcnt[in->mask] == 0) {
      ru[i] = 0;
      break;
    }
    if (!apply_bin(in->op, in->isint, ru[in->a], ru[in->b], &ru[i])) return RUN_SCALAR;
    if (in->cls != VC_A) break;
    if (in->op == IR_E_ADD) rs[i] = rs[in->a] + rs[in->b];
    else if (in->op == IR_E_SUB) rs[i] = rs[in->a] - rs[in->b];
    else rs[i] = rs[in->a] * ru[in->b] + ru[in->a] * rs[in->b];
    rs[i] += 0.0;
    break;
  }
  return RUN_OK;
}

/* One loop per operand shape (varying/uniform) for an operator or function. */
#define LANE_LOOPS(EXPR_VV, EXPR_UV, EXPR_VU)                          \
  do {                                                                 \
    if (xu) for (int l = 0; l < L; l++) o[l] = EXPR_UV;                \
    else if (yu) for (int l = 0; l < L; l++) o[l] = EXPR_VU;           \
    else for (int l = 0; l < L; l++) o[l] = EXPR_VV;                   \
  } while (0)
/* Two lanes at a time with SSE2-sized vectors (element-wise IEEE operations,
 * so each lane gets exactly the scalar loop's result), then the tail. */
typedef double v2d_t __attribute__((vector_size(16)));
static inline v2d_t v2_load(const double *p) {
  v2d_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
#define V2_LOOP(EXPR2, EXPR1)                                   \
  do {                                                          \
    int l = 0;                                                  \
    for (; l + 2 <= L; l += 2) {                                \
      v2d_t r_ = EXPR2;                                         \
      memcpy(o + l, &r_, sizeof r_);                            \
    }                                                           \
    for (; l < L; l++) o[l] = EXPR1;                            \
  } while (0)
#define OP_LOOPS(OP)                                                     \
  do {                                                                   \
    v2d_t xv = {xs, xs}, yv = {ys, ys};                                  \
    if (xu) V2_LOOP(xv OP v2_load(y + l), xs OP y[l]);                   \
    else if (yu) V2_LOOP(v2_load(x + l) OP yv, x[l] OP ys);              \
    else V2_LOOP(v2_load(x + l) OP v2_load(y + l), x[l] OP y[l]);        \
  } while (0)
#define FN_LOOPS(FN) LANE_LOOPS(FN(x[l], y[l]), FN(xs, y[l]), FN(x[l], ys))

static void vbin_hot(const vprog_t *p, const vins_t *in, double *o, int L) {
  bool xu = p->ins[in->a].cls == VC_U, yu = p->ins[in->b].cls == VC_U;
  const double *x = p->rv[in->a], *y = p->rv[in->b];
  double xs = p->ru[in->a], ys = p->ru[in->b];
  switch (in->op) {
  case IR_E_ADD: OP_LOOPS(+); break;
  case IR_E_SUB: OP_LOOPS(-); break;
  case IR_E_MUL: OP_LOOPS(*); break;
  case IR_E_DIV: OP_LOOPS(/); break;
  case IR_E_MIN: FN_LOOPS(v_min); break;
  default: FN_LOOPS(v_max); break;
  }
}

static int vbin_lanes(vprog_t *p, const vins_t *in, double *o, int L) {
  if (hot_float_op(in)) {
    vbin_hot(p, in, o, L);
    return RUN_OK;
  }
  const double *x = p->rv[in->a], *y = p->rv[in->b];
  const uint8_t *act = p->mact + (size_t)in->mask * EV_LANES;
  for (int l = 0; l < L; l++)
    if (!apply_bin(in->op, in->isint, x[l], y[l], &o[l])) {
      if (act[l]) return RUN_SCALAR;
      o[l] = 0;
    }
  return RUN_OK;
}

/* Varying instructions other than loads: one value per lane. */
static int vstep_lanes(vprog_t *p, int i, int L) {
  const vins_t *in = &p->ins[i];
  double *o = p->own + (size_t)i * EV_REG_STRIDE;
  const double *x = p->rv[in->a];
  p->rv[i] = o;
  switch (in->op) {
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    for (int l = 0; l < L; l++) o[l] = apply_un(in->op, in->dtype, x[l]);
    return RUN_OK;
  case IR_E_CALL: {
    const double *y = p->rv[in->b];
    for (int l = 0; l < L; l++) o[l] = apply_call(in->fn, x[l], y[l]);
    return RUN_OK;
  }
  case IR_E_SELECT: {
    const double *t = p->rv[in->b], *f = p->rv[in->c];
    if (p->ins[in->a].cls == VC_U)
      p->rv[i] = p->ru[in->a] != 0 ? t : f;
    else
      for (int l = 0; l < L; l++) o[l] = x[l] != 0 ? t[l] : f[l];
    return RUN_OK;
  }
  default: return vbin_lanes(p, in, o, L);
  }
}

/* Whether lane l of register a passes a MASK (non-zero, or zero if negated)
 * or MASKZ (zero) test. */
static void vmask(vprog_t *p, const vins_t *in, int L) {
  const uint8_t *par = p->mact + (size_t)in->mask * EV_LANES;
  uint8_t *dst = p->mact + (size_t)in->mdst * EV_LANES;
  const vins_t *ci = &p->ins[in->a];
  bool zero = in->op == VOP_MASKZ, neg = in->c;
  double u = p->ru[in->a], s = p->rs[in->a];
  if (ci->cls == VC_U || (ci->cls == VC_A && s == 0)) {
    bool on = zero ? u == 0 : (u != 0) != neg;
    if (on) memcpy(dst, par, (size_t)L);
    else memset(dst, 0, (size_t)L);
    p->mcnt[in->mdst] = on ? p->mcnt[in->mask] : 0;
    return;
  }
  int cnt = 0;
  if (ci->cls == VC_A && zero) { /* an affine integer is zero on at most one lane */
    memset(dst, 0, (size_t)L);
    double l = -u / s;
    if (l >= 0 && l < L && l == floor(l) && par[(int)l]) dst[(int)l] = 1, cnt = 1;
    p->mcnt[in->mdst] = cnt;
    return;
  }
  for (int l = 0; l < L; l++) {
    double x = lane_val(p, in->a, l);
    bool on = zero ? x == 0 : (x != 0) != neg;
    dst[l] = par[l] & on;
    cnt += dst[l];
  }
  p->mcnt[in->mdst] = cnt;
}

/* Addresses of a load or store on the active lanes of `mask`: affine (base,
 * stride) when every index is, else per-lane offsets in p->offs.  RUN_SCALAR
 * when an active lane is out of bounds. */
typedef struct vaddr {
  bool affine;
  int64_t base, stride;
} vaddr_t;

static int vaddr(const ev_buf_t *eb, vprog_t *p, const int *idx, int n, int mask, int L,
                 vaddr_t *out) {
  const uint8_t *act = p->mact + (size_t)mask * EV_LANES;
  bool all = p->mcnt[mask] == L;
  double base = 0, stride = 0;
  out->affine = true;
  for (int d = 0; d < n; d++) {
    int r = idx[d], cls = p->ins[r].cls;
    int64_t ext = eb->b->shape[d];
    if (cls == VC_U && !in_range(p->ru[r], ext)) return RUN_SCALAR;
    if (cls == VC_A && all && !(in_range(p->ru[r], ext) && in_range(lane_val(p, r, L - 1), ext)))
      return RUN_SCALAR;
    if (cls == VC_V || (cls == VC_A && !all))
      for (int l = 0; l < L; l++)
        if (act[l] && !in_range(lane_val(p, r, l), ext)) return RUN_SCALAR;
    out->affine &= cls != VC_V;
    base += p->ru[r] * (double)eb->rstride[d];
    stride += p->rs[r] * (double)eb->rstride[d];
  }
  if (out->affine) {
    out->base = (int64_t)base;
    out->stride = (int64_t)stride;
    return RUN_OK;
  }
  for (int l = 0; l < L; l++) {
    int64_t off = 0;
    for (int d = 0; act[l] && d < n; d++) off += (int64_t)lane_val(p, idx[d], l) * eb->rstride[d];
    p->offs[l] = off;
  }
  return RUN_OK;
}

static void init_override(vprog_t *p, double *o, int L) {
  const uint8_t *im = p->mact + (size_t)p->init_mask * EV_LANES;
  for (int l = 0; l < L; l++)
    if (im[l]) o[l] = lane_val(p, p->init_val, l);
}

static int vload(ev_t *ev, vprog_t *p, int i, int L) {
  const vins_t *in = &p->ins[i];
  const ev_buf_t *eb = &ev->bufs[in->buf];
  const int *idx = p->args ? p->args + in->arg0 : NULL; /* (no index arguments at all: a 0-d buffer) */
  int cnt = p->mcnt[in->mask];
  double *o = p->own + (size_t)i * EV_REG_STRIDE;
  p->rv[i] = o;
  if (in->cls == VC_U) {
    p->ru[i] = p->rs[i] = 0;
    if (cnt) {
      int64_t off = 0;
      for (int d = 0; d < in->n; d++) {
        if (!in_range(p->ru[idx[d]], eb->b->shape[d])) return RUN_SCALAR;
        off += (int64_t)p->ru[idx[d]] * eb->rstride[d];
      }
      p->ru[i] = eb->data[off];
    }
    if (in->lanes) fill_lanes(p, i, L);
    return RUN_OK;
  }
  if (!cnt) return RUN_OK;
  vaddr_t a;
  if (vaddr(eb, p, idx, in->n, in->mask, L, &a)) return RUN_SCALAR;
  const uint8_t *act = p->mact + (size_t)in->mask * EV_LANES;
  const double *data = eb->data;
  bool override = in->self && p->init_val >= 0 && p->mcnt[p->init_mask] > 0;
  if (a.affine && cnt == L && a.stride == 1 && !override)
    p->rv[i] = data + a.base; /* read in place: stores come after every load */
  else if (a.affine && cnt == L && a.stride == 1)
    memcpy(o, data + a.base, sizeof(double) * (size_t)L);
  else if (a.affine && cnt == L)
    for (int l = 0; l < L; l++) o[l] = data[a.base + a.stride * l];
  else if (a.affine)
    for (int l = 0; l < L; l++) o[l] = act[l] ? data[a.base + a.stride * l] : 0;
  else
    for (int l = 0; l < L; l++) o[l] = act[l] ? data[p->offs[l]] : 0;
  if (override) init_override(p, o, L);
  return RUN_OK;
}

/* Folds lanes [l0, l1) into *acc in loop order: the common float cases as
 * tight loops, everything else through apply_bin.  False on integer division
 * by zero. */
static bool fold_run(const vprog_t *p, const double *r, int l0, int l1, double *acc) {
  double s = *acc;
  switch (p->fold_isint ? -1 : p->fold_op * 2 + p->fold_left) {
  case IR_E_ADD * 2 + 1: for (int l = l0; l < l1; l++) s = s + r[l]; break;
  case IR_E_ADD * 2: for (int l = l0; l < l1; l++) s = r[l] + s; break;
  case IR_E_MUL * 2 + 1: for (int l = l0; l < l1; l++) s = s * r[l]; break;
  case IR_E_MUL * 2: for (int l = l0; l < l1; l++) s = r[l] * s; break;
  case IR_E_MAX * 2 + 1: for (int l = l0; l < l1; l++) s = v_max(s, r[l]); break;
  case IR_E_MAX * 2: for (int l = l0; l < l1; l++) s = v_max(r[l], s); break;
  case IR_E_MIN * 2 + 1: for (int l = l0; l < l1; l++) s = v_min(s, r[l]); break;
  case IR_E_MIN * 2: for (int l = l0; l < l1; l++) s = v_min(r[l], s); break;
  default:
    for (int l = l0; l < l1; l++) {
      double a = p->fold_left ? s : r[l], b = p->fold_left ? r[l] : s;
      if (!apply_bin(p->fold_op, p->fold_isint, a, b, &s)) return false;
    }
  }
  *acc = s;
  return true;
}

/* Fold mode: the element is read once, updated lane by lane (restarting from
 * the init value on init lanes) and written once. */
static int vfold(ev_t *ev, vprog_t *p, int L) {
  int pm = p->pred_mask;
  if (!p->mcnt[pm]) return RUN_OK;
  const ev_buf_t *eb = &ev->bufs[p->store_buf];
  const int *idx = p->args ? p->args + p->store_arg0 : NULL;
  int64_t off = 0;
  for (int d = 0; d < p->store_n; d++) {
    if (!in_range(p->ru[idx[d]], eb->b->shape[d])) return RUN_SCALAR;
    off += (int64_t)p->ru[idx[d]] * eb->rstride[d];
  }
  double acc = eb->data[off];
  const double *r = p->rv[p->value];
  bool init = p->init_val >= 0 && p->mcnt[p->init_mask] > 0;
  const uint8_t *act = p->mact + (size_t)pm * EV_LANES;
  const uint8_t *im = init ? p->mact + (size_t)p->init_mask * EV_LANES : NULL;
  bool all = p->mcnt[pm] == L;
  for (int l = 0; l < L;) {
    if (!all && !act[l]) {
      l++;
      continue;
    }
    if (im && im[l]) acc = lane_val(p, p->init_val, l);
    int e = l + 1; /* the run of lanes up to the next init lane or inactive lane */
    if (all) {
      const uint8_t *next = im ? memchr(im + e, 1, (size_t)(L - e)) : NULL;
      e = next ? (int)(next - im) : L;
    } else {
      while (e < L && act[e] && !(im && im[e])) e++;
    }
    if (!fold_run(p, r, l, e, &acc)) return RUN_SCALAR;
    l = e;
  }
  eb->data[off] = acc;
  return RUN_OK;
}

/* True when the active lanes' offsets are strictly monotonic (all distinct). */
static bool offsets_distinct(const vprog_t *p, const uint8_t *act, int L) {
  int dir = 0;
  int64_t prev = 0;
  bool have = false;
  for (int l = 0; l < L; l++) {
    if (!act[l]) continue;
    if (have) {
      int d = p->offs[l] > prev ? 1 : p->offs[l] < prev ? -1 : 0;
      if (d == 0 || (dir && d != dir)) return false;
      dir = d;
    }
    prev = p->offs[l];
    have = true;
  }
  return true;
}

/* Nest mode: remembers the old value of each element before its lane first
 * writes it in this chunk. */
static void save_for_undo(vprog_t *p, const double *data, const vaddr_t *a, const uint8_t *act,
                          int L) {
  for (int l = 0; l < L && p->nsaved < L; l++) {
    if (!act[l] || p->saved[l]) continue;
    int64_t off = a->affine ? a->base + a->stride * l : p->offs[l];
    p->saved[l] = 1;
    p->undo_off[p->nsaved] = off;
    p->undo_val[p->nsaved++] = data[off];
  }
}

static void undo_chunk(vprog_t *p, double *data) {
  while (p->nsaved > 0) {
    p->nsaved--;
    data[p->undo_off[p->nsaved]] = p->undo_val[p->nsaved];
  }
}

/* Scatter mode: every active lane writes its own element. */
static int vscatter(ev_t *ev, vprog_t *p, int L) {
  int pm = p->pred_mask, cnt = p->mcnt[pm];
  if (!cnt) return RUN_OK;
  const ev_buf_t *eb = &ev->bufs[p->store_buf];
  const uint8_t *act = p->mact + (size_t)pm * EV_LANES;
  vaddr_t a;
  if (vaddr(eb, p, p->args ? p->args + p->store_arg0 : NULL, p->store_n, pm, L, &a)) return RUN_SCALAR;
  bool distinct = a.affine ? a.stride != 0 || cnt == 1 : offsets_distinct(p, act, L);
  if (p->ninner) distinct = a.affine && (a.stride != 0 || L == 1); /* for every inner iteration */
  if (!distinct) return RUN_SCALAR;
  const double *v = p->rv[p->value];
  double *data = eb->data;
  if (p->ninner) save_for_undo(p, data, &a, act, L);
  if (a.affine && a.stride == 1 && cnt == L)
    memmove(data + a.base, v, sizeof(double) * (size_t)L);
  else if (a.affine)
    for (int l = 0; l < L; l++) {
      if (act[l]) data[a.base + a.stride * l] = v[l];
    }
  else
    for (int l = 0; l < L; l++)
      if (act[l]) data[p->offs[l]] = v[l];
  return RUN_OK;
}

/* Runs iterations [x0, x0 + L) of the program's loop; nothing is written
 * unless the whole chunk succeeds. */
static int vrun(ev_t *ev, vprog_t *p, int64_t x0, int L) {
  memset(p->mact, 1, (size_t)L);
  p->mcnt[0] = L;
  for (int i = 0; i < p->n; i++) {
    const vins_t *in = &p->ins[i];
    int rc = RUN_OK;
    if (in->op == VOP_MASK || in->op == VOP_MASKZ)
      vmask(p, in, L);
    else if (in->op == IR_E_LOAD)
      rc = vload(ev, p, i, L);
    else if (in->cls == VC_V)
      rc = vstep_lanes(p, i, L);
    else if (!(rc = vstep_scalar(ev, p, i, x0)) && in->lanes)
      fill_lanes(p, i, L);
    if (rc) return rc;
  }
  return p->mode == VM_FOLD ? vfold(ev, p, L) : vscatter(ev, p, L);
}

static vprog_t *prog_for(ev_t *ev, const ir_stmt_t *s) {
  int uid = s->u.loop.uid;
  if (uid < 0 || uid >= ev->nprogs) return NULL;
  vprog_t *p = ev->progs[uid];
  if (!p) {
    p = vchoose(ev, s);
    ev->progs[uid] = p ? p : &prog_none;
  }
  return p && p != &prog_none && p->loop == s ? p : NULL;
}

/* Runs one chunk of lanes through every iteration of the inner loops, in
 * loop order (an odometer over their variables). */
static int run_chunk(ev_t *ev, vprog_t *p, int64_t x0, int L) {
  double *slot[EV_MAX_INNER];
  int64_t it[EV_MAX_INNER];
  for (int i = 0; i < p->ninner; i++) {
    if (p->inner[i]->u.loop.extent <= 0) return RUN_OK;
    slot[i] = &ev->vars[p->inner[i]->u.loop.var->id];
    *slot[i] = 0;
    it[i] = 0;
  }
  p->nsaved = 0;
  memset(p->saved, 0, EV_LANES);
  for (;;) {
    if (ev_should_stop(ev)) return RUN_STOP;
    if (vrun(ev, p, x0, L) != RUN_OK) return RUN_SCALAR;
    ev->st.fast_iters += p->mcnt[p->pred_mask];
    int i = p->ninner - 1;
    while (i >= 0 && ++it[i] == p->inner[i]->u.loop.extent) {
      it[i] = 0;
      *slot[i] = 0;
      i--;
    }
    if (i < 0) return RUN_OK;
    *slot[i] = (double)it[i];
  }
}

/* Iterations [lo, hi) of loop s: lane-wise chunks where the fast path
 * applies, one at a time otherwise. */
int ev_loop_span(ev_t *ev, const ir_stmt_t *s, int64_t lo, int64_t hi) {
  const ir_loop_t *l = &s->u.loop;
  double *slot = var_slot(ev, l->var);
  if (!slot) return ev_bad_var(ev, l->var);
  vprog_t *p = ev->force_scalar ? NULL : prog_for(ev, s);
  if (!p) return ev_loop_range(ev, l, slot, lo, hi);
  for (int64_t x0 = lo; x0 < hi; x0 += EV_LANES) {
    int L = (int)TN_MIN(EV_LANES, hi - x0);
    int run = run_chunk(ev, p, x0, L);
    if (run == RUN_OK) continue;
    if (run == RUN_STOP) return ev->err ? ev->err->code : TN_ESTOPPED;
    /* put back what the chunk wrote and redo it in loop order, so that
     * values and errors are those of the scalar path */
    undo_chunk(p, ev->bufs[p->store_buf].data);
    ev->st.fallback_chunks++;
    int rc = ev_loop_range(ev, l, slot, x0, x0 + L);
    if (rc) return rc;
  }
  return TN_OK;
}
