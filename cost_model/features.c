/* features.c — per-store feature extraction (TVM's "per-store-feature", see
 * metaschedule.md §8.2 and cost_model/FEATURES.md) from a scheduled function,
 * by interval analysis of the index expressions: no lowering, no compiling. */
#include "cost_model/cost_model.h"
#include "ir/intrin.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * Layout
 * ====================================================================== */

enum {
  F_OPS = 0,             /* 16 op counts */
  F_VEC = 16,            /* vectorize: num, prod, len, pos[8] */
  F_UNROLL = 27,
  F_PAR = 38,
  F_IS_GPU = 49,
  F_THREAD = 50,         /* blockIdx.xyz, threadIdx.xyz, vthread */
  F_BUF = 57,            /* 5 x 18 */
  F_CURVE = 147,         /* 10 */
  F_ALLOC = 157,         /* size, prod, outer_prod, inner_prod */
  F_NEST = 161,          /* outer_prod, num_loops, auto_unroll_max_step */
  F_STORE_SCOPE = 164,   /* shared, local */
  F_BUF_SCOPE = 166,     /* 5 */
  F_IS_REDUCTION = 171,
  F_REDUCE_PROD = 172,
  F_INNERMOST_LEN = 173,
  F_KERNEL = 174,        /* shared bytes, local bytes, pipeline stages, occupancy estimate */
  F_HOPPER = 178,        /* the decisions of a Hopper warpgroup-MMA kernel (hopper_names) */
  F_CPU = 199,           /* the CPU micro-kernel call the store is part of (cpu_names) */
  F_END = 209,
};
#define BUF_FEATS 18
_Static_assert(F_BUF + CM_BUFFERS_PER_STORE * BUF_FEATS == F_CURVE, "group 2 size");
_Static_assert(F_CURVE + CM_CURVE_SAMPLES == F_ALLOC, "group 3 size");
_Static_assert(F_END == CM_NUM_FEATURES, "layout size");

enum { OP_MAD, OP_ADDSUB, OP_MUL, OP_DIVMOD, OP_CMP, OP_MATH, OP_OTHER }; /* + 7 for ints */
enum { OP_INT = 7, OP_BOOL = 14, OP_SELECT = 15, NUM_OPS = 16 };

static const char *const op_names[NUM_OPS] = {
    "float_mad", "float_addsub", "float_mul", "float_divmod", "float_cmp", "float_math_func",
    "float_other_func", "int_mad", "int_addsub", "int_mul", "int_divmod", "int_cmp",
    "int_math_func", "int_other_func", "bool_op", "select_op"};
static const char *const ann_names[3] = {"vec", "unroll", "par"};
static const char *const thread_names[7] = {"blockIdx_x",  "blockIdx_y",  "blockIdx_z", "threadIdx_x",
                                            "threadIdx_y", "threadIdx_z", "vthread"};
static const char *const buf_names[BUF_FEATS] = {
    "acc_read",  "acc_write",    "acc_readwrite", "bytes",          "unique_bytes",
    "lines",     "unique_lines", "reuse_loop",    "reuse_serial",   "reuse_none",
    "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct", "bytes_d_reuse_ct",
    "unique_bytes_d_reuse_ct", "lines_d_reuse_ct", "unique_lines_d_reuse_ct", "stride"};
static const char *const tail_names[] = {
    "alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod", "outer_prod", "num_loops",
    "auto_unroll_max_step", "store_scope_shared", "store_scope_local"};

static const char *const hopper_names[] = {
    "hopper_wgmma",      "hopper_stages", "hopper_warpgroups", "hopper_tile_m", "hopper_tile_n",
    "hopper_stage_bytes", "hopper_regs",  "hopper_producer",   "hopper_group",  "hopper_acc_regs",
    "hopper_tiles",
    /* format 3: the copies and the grid */
    "hopper_tma", "hopper_tma_bytes", "hopper_thread_bytes", "hopper_persistent", "hopper_ctas",
    "hopper_tiles_per_cta", "hopper_last_wave",
    /* format 4: the cluster */
    "hopper_cluster", "hopper_cluster_n", "hopper_multicast_bytes"};
_Static_assert(F_HOPPER + TN_ARRAY_LEN(hopper_names) == F_CPU, "Hopper columns");

/* A store inside a block tensorized with a CPU micro-kernel (IR_ANN_TENSORIZE):
 * the loops inside the block are one call, vectorized and register-blocked
 * by the intrinsic whatever their annotations say, so the other groups alone
 * cannot tell a call of a 6x16 tile from a scalar loop nest. */
static const char *const cpu_names[] = {
    "cpu_intrin",    /* 1: the store is computed by a CPU micro-kernel call */
    "cpu_intrin_dw", /* 1: a depthwise (elementwise along the columns) one */
    "cpu_mr",        /* its register tile: rows */
    "cpu_nr",        /* columns */
    "cpu_tile_use",  /* the call's output points over mr x nr (under 1: a partial tile) */
    "cpu_k_call",    /* reduction steps per call (log) */
    "cpu_calls",     /* calls (log) */
    "cpu_fma_call",  /* vector FMAs per call (log) */
    "cpu_packed",    /* operands read from a temp (a packed panel), 0 to 2 */
    "cpu_call_bytes", /* bytes the call reads (log): its panels */
};
_Static_assert(F_CPU + TN_ARRAY_LEN(cpu_names) == F_END, "CPU columns");

static char name_tab[CM_NUM_FEATURES][32];
static pthread_once_t name_tab_once = PTHREAD_ONCE_INIT;

static void names_fill(void) {
  int k = 0;
  for (int i = 0; i < NUM_OPS; i++) snprintf(name_tab[k++], 32, "%s", op_names[i]);
  for (int a = 0; a < 3; a++) {
    snprintf(name_tab[k++], 32, "%s_num", ann_names[a]);
    snprintf(name_tab[k++], 32, "%s_prod", ann_names[a]);
    snprintf(name_tab[k++], 32, "%s_len", ann_names[a]);
    for (int p = 0; p < 8; p++) snprintf(name_tab[k++], 32, "%s_pos%d", ann_names[a], p);
  }
  snprintf(name_tab[k++], 32, "is_gpu");
  for (int i = 0; i < 7; i++) snprintf(name_tab[k++], 32, "%s", thread_names[i]);
  for (int b = 0; b < CM_BUFFERS_PER_STORE; b++)
    for (int i = 0; i < BUF_FEATS; i++) snprintf(name_tab[k++], 32, "buf%d_%s", b, buf_names[i]);
  for (int i = 0; i < CM_CURVE_SAMPLES; i++) snprintf(name_tab[k++], 32, "curve%d", i);
  for (size_t i = 0; i < TN_ARRAY_LEN(tail_names); i++) snprintf(name_tab[k++], 32, "%s", tail_names[i]);
  for (int b = 0; b < CM_BUFFERS_PER_STORE; b++) snprintf(name_tab[k++], 32, "buf%d_scope", b);
  snprintf(name_tab[k++], 32, "is_reduction");
  snprintf(name_tab[k++], 32, "reduce_prod");
  snprintf(name_tab[k++], 32, "innermost_len");
  snprintf(name_tab[k++], 32, "kernel_shared_bytes");
  snprintf(name_tab[k++], 32, "kernel_local_bytes");
  snprintf(name_tab[k++], 32, "pipeline_stages");
  snprintf(name_tab[k++], 32, "occupancy_est");
  for (size_t i = 0; i < TN_ARRAY_LEN(hopper_names); i++) snprintf(name_tab[k++], 32, "%s", hopper_names[i]);
  for (size_t i = 0; i < TN_ARRAY_LEN(cpu_names); i++) snprintf(name_tab[k++], 32, "%s", cpu_names[i]);
}

static void names_init(void) { pthread_once(&name_tab_once, names_fill); }

const char *cm_feature_name(int i) {
  if (i < 0 || i >= CM_NUM_FEATURES) return NULL;
  names_init();
  return name_tab[i];
}

int cm_feature_index(const char *name) {
  names_init();
  for (int i = 0; name && i < CM_NUM_FEATURES; i++)
    if (!strcmp(name_tab[i], name)) return i;
  return -1;
}

double cm_slog(double x) { return log2(fabs(x) + 1.0); }

void cm_feature_rows_free(cm_feature_rows_t *r) {
  if (!r) return;
  free(r->data);
  memset(r, 0, sizeof *r);
}

void cm_feature_rows_copy(cm_feature_rows_t *dst, const cm_feature_rows_t *src) {
  size_t n = (size_t)src->nrows * (size_t)src->ncols;
  dst->nrows = src->nrows;
  dst->ncols = src->ncols;
  dst->data = n ? tn_xmalloc(n * sizeof(float)) : NULL;
  if (n) memcpy(dst->data, src->data, n * sizeof(float));
}

float cm_feature_at(const cm_feature_rows_t *r, int row, int col) {
  if (!r || row < 0 || row >= r->nrows || col < 0 || col >= r->ncols) return 0;
  return r->data[(size_t)row * (size_t)r->ncols + (size_t)col];
}

/* ======================================================================
 * Extraction state
 * ====================================================================== */

/* Loops at stack positions >= 64 get no dependence bit (such nests do not
 * occur in practice; their loops then count as "not used by the access"). */
#define MASK_LOOPS 64

typedef struct access {
  const ir_buffer_t *buf;
  ir_expr_t *const *idx; /* buf->ndim index expressions */
  bool read, write;
  int slot;              /* index of its buffer in the store's buffer list */
  uint64_t mask;         /* loop stack positions the indices depend on */
} access_t;

typedef struct box {
  int64_t lo[IR_MAX_DIMS], hi[IR_MAX_DIMS];
} box_t;

/* The compacted allocation of a temp buffer: allocated under the deepest loop
 * enclosing every access (as TVM's plan/compact passes would place it). */
typedef struct alloc_info {
  bool seen, has_box;
  int depth;                /* loops in the common prefix of the accessing nests */
  const ir_loop_t **prefix; /* the first accessing nest (its first `depth` loops count) */
  box_t box;                /* region touched under the prefix */
} alloc_info_t;

typedef struct fx {
  const ir_func_t *f;
  const tn_target_t *t;
  bool is_gpu;
  const ir_loop_t **loops; /* enclosing loops, outermost first */
  int nloops, caploops;
  const ir_block_t **blocks; /* enclosing blocks, outermost first */
  int *block_depth;          /* per enclosing block: the loops enclosing it */
  int nblocks, capblocks;
  ir_bounds_t bounds;
  alloc_info_t *alloc; /* by buffer id */
  int nalloc;
  access_t *acc;
  int nacc, capacc;
  float *rows;
  int nrows, caprows;
  const ir_buffer_t **row_buf; /* the buffer each row stores to */
  double *row_prod;  /* loop product of each row */
  const ir_loop_t **row_top; /* the outermost loop of each row's nest (its kernel on GPUs) */
  /* The expression walks' own stack (an inlined chain nests thousands deep):
   * a walk pushes above where it found it and returns it there, so a walk
   * started inside another (expr_mask inside collect_loads) shares it. */
  const ir_expr_t **stk;
  int nstk, capstk;
} fx_t;

#define GROW(arr, n, cap)                                                   \
  do {                                                                      \
    if ((n) == (cap)) {                                                     \
      (cap) = (cap) ? 2 * (cap) : 16;                                       \
      (arr) = tn_xrealloc((arr), sizeof(*(arr)) * (size_t)(cap));           \
    }                                                                       \
  } while (0)

/* Stack position of a loop variable, -1 if v is not a loop variable. */
static int loop_pos(const fx_t *x, const ir_var_t *v) {
  for (int k = x->nloops - 1; k >= 0; k--)
    if (x->loops[k]->var == v) return k;
  return -1;
}

/* The block iterator named by v (innermost block first), NULL if none. */
static const ir_iter_t *find_iter(const fx_t *x, const ir_var_t *v) {
  for (int b = x->nblocks - 1; b >= 0; b--)
    for (int i = 0; i < x->blocks[b]->niters; i++)
      if (x->blocks[b]->iters[i].var == v) return &x->blocks[b]->iters[i];
  return NULL;
}

static void push(fx_t *x, const ir_expr_t *e) {
  if (!e) return;
  GROW(x->stk, x->nstk, x->capstk);
  x->stk[x->nstk++] = e;
}

/* Pushes e's children so that they pop in order. */
static void push_children(fx_t *x, const ir_expr_t *e) {
  const ir_expr_t *ch[IR_EXPR_MAX_CHILDREN];
  for (int i = ir_expr_children(e, ch) - 1; i >= 0; i--) push(x, ch[i]);
}

/* Loops (bits by stack position) an expression depends on, through the
 * bindings of the block iterators it uses. */
static uint64_t expr_mask(fx_t *x, const ir_expr_t *root) {
  uint64_t m = 0;
  int base = x->nstk;
  push(x, root);
  while (x->nstk > base) {
    const ir_expr_t *e = x->stk[--x->nstk];
    if (e->kind != IR_E_VAR) {
      push_children(x, e);
      continue;
    }
    int k = loop_pos(x, e->u.var);
    if (k >= 0) {
      m |= k < MASK_LOOPS ? UINT64_C(1) << k : 0;
    } else {
      const ir_iter_t *it = find_iter(x, e->u.var);
      if (it) push(x, it->binding);
    }
  }
  return m;
}

/* ======================================================================
 * Group 1: arithmetic op counts
 * ====================================================================== */

static int op_class(ir_dtype_t t) { return ir_dtype_is_float(t) ? 0 : OP_INT; }

/* The slot an operator counts in, -1 for nodes that are not counted. */
static int op_slot(const ir_expr_t *e) {
  switch (e->kind) {
  case IR_E_ADD: case IR_E_SUB: case IR_E_NEG: return op_class(e->dtype) + OP_ADDSUB;
  case IR_E_MUL: return op_class(e->dtype) + OP_MUL;
  case IR_E_DIV: case IR_E_FLOORDIV: case IR_E_FLOORMOD: return op_class(e->dtype) + OP_DIVMOD;
  case IR_E_MIN: case IR_E_MAX: return op_class(e->dtype) + OP_CMP;
  case IR_E_EQ: case IR_E_NE: case IR_E_LT: case IR_E_LE: case IR_E_GT: case IR_E_GE:
    return op_class(e->u.bin.a->dtype) + OP_CMP;
  case IR_E_AND: case IR_E_OR: case IR_E_NOT: return OP_BOOL;
  case IR_E_SELECT: return OP_SELECT;
  case IR_E_CALL: return op_class(e->dtype) + OP_MATH;
  default: return -1;
  }
}

static bool is_mul_of(const ir_expr_t *e, ir_dtype_t t) { return e->kind == IR_E_MUL && e->dtype == t; }

/* a*b + c (or c - a*b) counts as one multiply-add: pushes a, b and c. */
static bool count_mad(fx_t *x, const ir_expr_t *e, double *c) {
  if (e->kind != IR_E_ADD && e->kind != IR_E_SUB) return false;
  const ir_expr_t *a = e->u.bin.a, *b = e->u.bin.b;
  const ir_expr_t *mul = is_mul_of(a, e->dtype) ? a : is_mul_of(b, e->dtype) ? b : NULL;
  if (!mul) return false;
  c[op_class(e->dtype) + OP_MAD] += 1;
  push(x, mul == a ? b : a);
  push(x, mul->u.bin.b);
  push(x, mul->u.bin.a);
  return true;
}

/* Adds the operators of e (and of the bindings of the iterators it uses,
 * which lowering would substitute into the indices) to c[NUM_OPS]. */
static void count_ops(fx_t *x, const ir_expr_t *root, double *c) {
  int base = x->nstk;
  push(x, root);
  while (x->nstk > base) {
    const ir_expr_t *e = x->stk[--x->nstk];
    if (e->kind == IR_E_VAR) {
      const ir_iter_t *it = loop_pos(x, e->u.var) < 0 ? find_iter(x, e->u.var) : NULL;
      if (it) push(x, it->binding);
      continue;
    }
    if (count_mad(x, e, c)) continue;
    int slot = op_slot(e);
    if (slot >= 0) c[slot] += 1;
    push_children(x, e);
  }
}

/* Ops of one execution of the block's body store (value, indices, predicate). */
static void block_ops(fx_t *x, const ir_block_t *blk, double *c) {
  const ir_stmt_t *st = blk->body;
  count_ops(x, st->u.store.value, c);
  for (int d = 0; d < st->u.store.n; d++) count_ops(x, st->u.store.idx[d], c);
  count_ops(x, blk->predicate, c);
}

/* ======================================================================
 * Accesses and their regions
 * ====================================================================== */

static bool same_indices(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int d = 0; d < n; d++)
    if (!ir_expr_equal(a[d], b[d])) return false;
  return true;
}

/* Records an access unless the same buffer was accessed at the same indices
 * (a read-modify-write of C[i, j] is one access to a read-write buffer). */
static void add_access(fx_t *x, const ir_buffer_t *b, ir_expr_t *const *idx, int n, bool write) {
  if (n != b->ndim) return; /* malformed; the verifier reports it elsewhere */
  for (int i = 0; i < x->nacc; i++)
    if (x->acc[i].buf == b && same_indices(x->acc[i].idx, idx, n)) {
      x->acc[i].write |= write;
      x->acc[i].read |= !write;
      return;
    }
  GROW(x->acc, x->nacc, x->capacc);
  uint64_t m = 0;
  for (int d = 0; d < n; d++) m |= expr_mask(x, idx[d]);
  x->acc[x->nacc++] = (access_t){.buf = b, .idx = idx, .read = !write, .write = write, .mask = m};
}

/* The loads of e in pre-order (the order the accesses are listed in). */
static void collect_loads(fx_t *x, const ir_expr_t *root) {
  int base = x->nstk;
  push(x, root);
  while (x->nstk > base) {
    const ir_expr_t *e = x->stk[--x->nstk];
    if (e->kind == IR_E_LOAD) add_access(x, e->u.load.buf, e->u.load.idx, e->u.load.n, false);
    push_children(x, e);
  }
}

static void collect_store(fx_t *x, const ir_stmt_t *st) {
  if (!st || st->kind != IR_S_STORE) return;
  add_access(x, st->u.store.buf, st->u.store.idx, st->u.store.n, true);
  collect_loads(x, st->u.store.value);
  for (int d = 0; d < st->u.store.n; d++) collect_loads(x, st->u.store.idx[d]);
}

/* All accesses of a compute block: its store first, then loads, init. */
static void collect_accesses(fx_t *x, const ir_block_t *blk) {
  x->nacc = 0;
  collect_store(x, blk->body);
  collect_loads(x, blk->predicate);
  collect_store(x, blk->init);
}

/* Sets loop variables: stack positions >= from range over their extent, the
 * others are 0, except `point` (if >= 0) which is fixed at `val`; then every
 * enclosing block iterator to the interval of its binding. */
static void set_bounds(fx_t *x, int from, int point, int64_t val) {
  for (int k = 0; k < x->nloops; k++) {
    int64_t hi = k >= from ? x->loops[k]->extent - 1 : 0;
    if (k == point) ir_bounds_set(&x->bounds, x->loops[k]->var, val, val);
    else ir_bounds_set(&x->bounds, x->loops[k]->var, 0, hi);
  }
  for (int b = 0; b < x->nblocks; b++)
    for (int i = 0; i < x->blocks[b]->niters; i++) {
      const ir_iter_t *it = &x->blocks[b]->iters[i];
      ir_interval_t iv = ir_interval_of(it->binding, &x->bounds);
      int64_t lo = TN_MAX(iv.lo, 0), hi = TN_MIN(iv.hi, it->extent - 1);
      if (hi < lo) hi = lo = TN_MIN(lo, it->extent - 1);
      ir_bounds_set(&x->bounds, it->var, lo, hi);
    }
}

/* The box an access touches under the current bounds, clamped to the shape. */
static void access_box(const fx_t *x, const access_t *a, box_t *out) {
  for (int d = 0; d < a->buf->ndim; d++) {
    ir_interval_t iv = ir_interval_of(a->idx[d], &x->bounds);
    int64_t last = a->buf->shape[d] - 1;
    int64_t lo = TN_MAX(iv.lo, 0), hi = TN_MIN(iv.hi, last);
    if (hi < lo) hi = lo = TN_MIN(lo, last);
    out->lo[d] = lo, out->hi[d] = hi;
  }
}

static void box_union(box_t *acc, const box_t *b, int ndim, bool first) {
  for (int d = 0; d < ndim; d++) {
    acc->lo[d] = first ? b->lo[d] : TN_MIN(acc->lo[d], b->lo[d]);
    acc->hi[d] = first ? b->hi[d] : TN_MAX(acc->hi[d], b->hi[d]);
  }
}

static double box_numel(const box_t *b, int ndim) {
  double n = 1;
  for (int d = 0; d < ndim; d++) n *= (double)(b->hi[d] - b->lo[d] + 1);
  return n;
}

/* Row-major element offset of an access at the current (point) bounds. */
static double access_offset(const fx_t *x, const access_t *a) {
  double off = 0, stride = 1;
  for (int d = a->buf->ndim - 1; d >= 0; d--) {
    ir_interval_t iv = ir_interval_of(a->idx[d], &x->bounds);
    double v = (iv.lo == IR_INF_NEG || iv.lo == IR_INF_POS) ? 0 : (double)iv.lo;
    off += v * stride;
    stride *= (double)a->buf->shape[d];
  }
  return off;
}

/* ======================================================================
 * One store: the loop nest above it and its buffers
 * ====================================================================== */

typedef struct bufinfo {
  const ir_buffer_t *buf;
  bool read, write;
  int nacc;        /* distinct accesses */
  uint64_t mask;   /* loops any access depends on */
  box_t box0;      /* region under the outermost loop */
  double feat[BUF_FEATS];
  double lines, bytes; /* sort keys */
} bufinfo_t;

typedef struct store {
  const ir_block_t *blk;
  int *nest;          /* stack positions of the loops with extent > 1 */
  int n;
  double prod;        /* product of all enclosing loop extents */
  bufinfo_t *bufs;
  int nbuf;
  double *numel_acc;  /* (n + 1) x nacc: elements an access touches under nest loop i */
  double *numel_buf;  /* (n + 1) x nbuf: union per buffer; level n = one iteration */
  double *stride;     /* n x nbuf: smallest non-zero element stride of nest loop i */
  uint64_t wmask;     /* loops the written index depends on */
} store_t;

static bool uses_loop(uint64_t mask, int k) { return k < MASK_LOOPS && ((mask >> k) & 1); }
static double ext_of(const fx_t *x, const store_t *s, int i) { return (double)x->loops[s->nest[i]]->extent; }

/* Stack position from which loops are relaxed at level i (level n: none). */
static int level_from(const fx_t *x, const store_t *s, int i) { return i < s->n ? s->nest[i] : x->nloops; }

static void group_buffers(fx_t *x, store_t *s) {
  s->bufs = tn_xcalloc((size_t)x->nacc + 1, sizeof *s->bufs);
  for (int a = 0; a < x->nacc; a++) {
    access_t *ac = &x->acc[a];
    int b = 0;
    while (b < s->nbuf && s->bufs[b].buf != ac->buf) b++;
    if (b == s->nbuf) s->bufs[s->nbuf++].buf = ac->buf;
    ac->slot = b;
    s->bufs[b].nacc++;
    s->bufs[b].mask |= ac->mask;
    s->bufs[b].write |= ac->write;
    s->bufs[b].read |= ac->read;
  }
  s->wmask = x->nacc ? x->acc[0].mask : 0; /* collect_store records the store first */
}

/* Elements touched per access and per buffer at every level of the nest. */
static void compute_regions(fx_t *x, store_t *s) {
  int levels = s->n + 1;
  s->numel_acc = tn_xcalloc((size_t)levels * (size_t)(x->nacc + 1), sizeof(double));
  s->numel_buf = tn_xcalloc((size_t)levels * (size_t)(s->nbuf + 1), sizeof(double));
  box_t *ub = tn_xcalloc((size_t)s->nbuf + 1, sizeof *ub);
  bool *seen = tn_xcalloc((size_t)s->nbuf + 1, sizeof *seen);
  for (int i = 0; i < levels; i++) {
    set_bounds(x, level_from(x, s, i), -1, 0);
    memset(seen, 0, sizeof *seen * (size_t)s->nbuf);
    for (int a = 0; a < x->nacc; a++) {
      box_t bx;
      access_t *ac = &x->acc[a];
      access_box(x, ac, &bx);
      s->numel_acc[i * x->nacc + a] = box_numel(&bx, ac->buf->ndim);
      box_union(&ub[ac->slot], &bx, ac->buf->ndim, !seen[ac->slot]);
      seen[ac->slot] = true;
    }
    for (int b = 0; b < s->nbuf; b++) {
      s->numel_buf[i * s->nbuf + b] = box_numel(&ub[b], s->bufs[b].buf->ndim);
      if (i == 0) s->bufs[b].box0 = ub[b];
    }
  }
  free(ub);
  free(seen);
}

/* Element stride of nest loop i for every access: the first non-zero change
 * of the flattened offset over the loop's first 16 steps (affine indices
 * change at step 1 already; i // 8 changes at step 8). */
#define STRIDE_SCAN 16
static void loop_strides(fx_t *x, store_t *s, int i, const double *off0, double *prev, double *st) {
  int k = s->nest[i];
  int64_t last = TN_MIN(x->loops[k]->extent - 1, STRIDE_SCAN);
  bool pending = false;
  for (int a = 0; a < x->nacc; a++) {
    st[a] = 0, prev[a] = off0[a];
    pending |= k >= MASK_LOOPS || uses_loop(x->acc[a].mask, k);
  }
  for (int64_t step = 1; step <= last && pending; step++) {
    set_bounds(x, x->nloops, k, step);
    pending = false;
    for (int a = 0; a < x->nacc; a++) {
      if (st[a] > 0 || !(k >= MASK_LOOPS || uses_loop(x->acc[a].mask, k))) continue;
      double off = access_offset(x, &x->acc[a]);
      if (off != prev[a]) st[a] = fabs(off - prev[a]);
      else prev[a] = off, pending = true;
    }
  }
  for (int a = 0; a < x->nacc; a++) {
    double *dst = &s->stride[i * s->nbuf + x->acc[a].slot];
    if (st[a] > 0 && (*dst == 0 || st[a] < *dst)) *dst = st[a];
  }
}

static void compute_strides(fx_t *x, store_t *s) {
  s->stride = tn_xcalloc((size_t)s->n * (size_t)s->nbuf + 1, sizeof(double));
  double *tmp = tn_xcalloc(3 * (size_t)x->nacc + 1, sizeof(double));
  double *off0 = tmp, *prev = tmp + x->nacc, *st = tmp + 2 * x->nacc;
  set_bounds(x, x->nloops, -1, 0);
  for (int a = 0; a < x->nacc; a++) off0[a] = access_offset(x, &x->acc[a]);
  for (int i = 0; i < s->n; i++) loop_strides(x, s, i, off0, prev, st);
  free(tmp);
}

/* ======================================================================
 * Group 2: per-buffer memory features
 * ====================================================================== */

enum { REUSE_LOOP, REUSE_SERIAL, REUSE_NONE };

typedef struct reuse {
  int type;
  double dis_iter, dis_bytes, ct;
} reuse_t;

/* Bytes all accesses of the store touch at a level (TVM sums per access). */
static double level_bytes(const fx_t *x, const store_t *s, int level) {
  double sum = 0;
  for (int a = 0; a < x->nacc; a++)
    sum += s->numel_acc[level * x->nacc + a] * ir_dtype_bytes(x->acc[a].buf->dtype);
  return sum;
}

/* TVM's reuse analysis: from the innermost loop outwards, the first loop the
 * buffer does not depend on gives loop-invariant reuse; failing that, a
 * buffer accessed at several places gives serial reuse at that loop. */
static reuse_t buffer_reuse(const fx_t *x, const store_t *s, int b) {
  const bufinfo_t *bi = &s->bufs[b];
  double inner = 1;
  for (int i = s->n - 1; i >= 0; i--) {
    double ext = ext_of(x, s, i);
    if (!uses_loop(bi->mask, s->nest[i]))
      return (reuse_t){REUSE_LOOP, inner, level_bytes(x, s, i + 1), ext};
    if (bi->nacc >= 2) {
      double least = INFINITY;
      for (int a = 0; a < x->nacc; a++)
        if (x->acc[a].slot == b) least = TN_MIN(least, s->numel_acc[i * x->nacc + a]);
      return (reuse_t){REUSE_SERIAL, least / ext, level_bytes(x, s, i) / ext, bi->nacc - 1};
    }
    inner *= ext;
  }
  return (reuse_t){REUSE_NONE, 0, 0, 0};
}

/* Bytes contiguous in memory in the region under the outermost loop: the
 * innermost dimensions the region covers fully, times the next one's extent. */
static double continuous_bytes(const bufinfo_t *bi) {
  double cont = 1;
  for (int d = bi->buf->ndim - 1; d >= 0; d--) {
    int64_t e = bi->box0.hi[d] - bi->box0.lo[d] + 1;
    cont *= (double)e;
    if (e != bi->buf->shape[d]) break;
  }
  return cont * ir_dtype_bytes(bi->buf->dtype);
}

static void buffer_features(const fx_t *x, const store_t *s, int b) {
  bufinfo_t *bi = &s->bufs[b];
  double db = ir_dtype_bytes(bi->buf->dtype);
  int found = -1;
  double min_stride = 0, non_strided = 1;
  for (int i = s->n - 1; i >= 0 && found < 0; i--) {
    if (s->stride[i * s->nbuf + b] > 0) found = i, min_stride = s->stride[i * s->nbuf + b];
    else non_strided *= ext_of(x, s, i);
  }
  double bytes = db * s->prod;
  double unique_bytes = s->numel_buf[b] * db; /* level 0 */
  double lines = 1, unique_lines = 1;
  if (s->n > 0) {
    lines = TN_MAX(1.0, s->prod / non_strided * TN_MIN(1.0, min_stride * db / CM_CACHE_LINE_BYTES));
    unique_lines = TN_MAX(1.0, unique_bytes / TN_MIN((double)CM_CACHE_LINE_BYTES, continuous_bytes(bi)));
  }
  reuse_t r = buffer_reuse(x, s, b);
  double proxy = r.ct > 0 ? r.ct : 0.5;
  double *f = bi->feat;
  f[0] = bi->read && !bi->write, f[1] = bi->write && !bi->read, f[2] = bi->read && bi->write;
  f[3] = cm_slog(bytes), f[4] = cm_slog(unique_bytes), f[5] = cm_slog(lines), f[6] = cm_slog(unique_lines);
  f[7 + r.type] = 1;
  f[10] = cm_slog(r.dis_iter), f[11] = cm_slog(r.dis_bytes), f[12] = cm_slog(r.ct);
  f[13] = cm_slog(bytes / proxy), f[14] = cm_slog(unique_bytes / proxy);
  f[15] = cm_slog(lines / proxy), f[16] = cm_slog(unique_lines / proxy);
  f[17] = cm_slog(found == s->n - 1 ? min_stride : 0);
  bi->lines = lines, bi->bytes = bytes;
}

/* Most cache lines first, then most bytes, then by name and id. */
static int bufinfo_cmp(const void *pa, const void *pb) {
  const bufinfo_t *a = pa, *b = pb;
  if (a->lines != b->lines) return a->lines > b->lines ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  int c = strcmp(a->buf->name, b->buf->name);
  return c ? c : (a->buf->id > b->buf->id) - (a->buf->id < b->buf->id);
}

/* ======================================================================
 * Groups 1, 3, 5 and our extras
 * ====================================================================== */

/* Position code of the annotated loops: 1-3 inner/middle/outer spatial,
 * 4-6 the same for reduction loops (the written index does not use them),
 * 7 mixed, 0 none. */
static int ann_position(const fx_t *x, const store_t *s, ir_loop_kind_t kind) {
  int code = 0;
  for (int i = 0; i < s->n; i++) {
    if (x->loops[s->nest[i]]->kind != kind) continue;
    int where = i == s->n - 1 ? 0 : i == 0 ? 2 : 1;
    int c = (uses_loop(s->wmask, s->nest[i]) ? 1 : 4) + where;
    code = code == 0 || code == c ? c : 7;
  }
  return code;
}

/* Count, product of extents, innermost extent and position of the loops of
 * one kind (vectorized, unrolled, parallel). */
static void ann_features(const fx_t *x, const store_t *s, ir_loop_kind_t kind, double *v) {
  double num = 0, prod = 1, len = 0;
  for (int i = 0; i < s->n; i++)
    if (x->loops[s->nest[i]]->kind == kind) num += 1, prod *= ext_of(x, s, i), len = ext_of(x, s, i);
  v[0] = cm_slog(num), v[1] = cm_slog(num ? prod : 0), v[2] = cm_slog(len);
  v[3 + ann_position(x, s, kind)] = 1;
}

/* Column of a thread binding among blockIdx.xyz, threadIdx.xyz, vthread. */
static int thread_slot(const ir_loop_t *l) {
  if (l->kind != IR_LOOP_THREAD) return -1;
  switch (ir_thread_tag_class(l->tag)) {
  case IR_TAG_CLASS_BLOCK: return ir_thread_tag_axis(l->tag);
  case IR_TAG_CLASS_THREAD: return 3 + ir_thread_tag_axis(l->tag);
  case IR_TAG_CLASS_VTHREAD: return 6;
  default: return -1;
  }
}

static void group1(fx_t *x, const store_t *s, double *v, double *float_ops) {
  double c[NUM_OPS] = {0};
  block_ops(x, s->blk, c);
  *float_ops = 0;
  for (int i = 0; i < NUM_OPS; i++) v[F_OPS + i] = cm_slog(c[i] * s->prod);
  for (int i = 0; i < OP_INT; i++) *float_ops += c[i] * s->prod;
  ann_features(x, s, IR_LOOP_VECTORIZED, v + F_VEC);
  ann_features(x, s, IR_LOOP_UNROLLED, v + F_UNROLL);
  ann_features(x, s, IR_LOOP_PARALLEL, v + F_PAR);
  v[F_IS_GPU] = x->is_gpu;
  double th[7] = {0};
  for (int i = 0; i < s->n; i++) {
    const ir_loop_t *l = x->loops[s->nest[i]];
    int t = thread_slot(l);
    if (t >= 0) th[t] = (th[t] ? th[t] : 1) * (double)l->extent;
  }
  for (int t = 0; t < 7; t++) v[F_THREAD + t] = cm_slog(th[t]);
}

/* FLOPs / touched bytes (both log2) as loops are added from the innermost
 * outwards, sampled at CM_CURVE_SAMPLES even fractions of the total FLOPs. */
static void group3(const fx_t *x, const store_t *s, double float_ops, double *v) {
  if (float_ops <= 0 || s->n == 0) return;
  double ops[s->n], mem[s->n], total = float_ops / s->prod;
  for (int j = 0; j < s->n; j++) {
    int i = s->n - 1 - j;
    double bytes = 0;
    for (int b = 0; b < s->nbuf; b++) bytes += s->numel_buf[i * s->nbuf + b] * ir_dtype_bytes(s->bufs[b].buf->dtype);
    total *= ext_of(x, s, i);
    ops[j] = log2(total);
    mem[j] = log2(TN_MAX(bytes, 2.0));
  }
  int p = 0;
  for (int k = 0; k < CM_CURVE_SAMPLES; k++) {
    double want = ops[s->n - 1] * (k + 1) / CM_CURVE_SAMPLES;
    while (p < s->n - 1 && ops[p] < want - 1e-4) p++;
    double r;
    if (p == 0 || ops[p] == ops[p - 1]) {
      r = ops[p] / mem[p];
    } else {
      double base = ops[p - 1] / mem[p - 1];
      double slope = (ops[p] / mem[p] - base) / (ops[p] - ops[p - 1]);
      r = base + slope * (want - ops[p - 1]);
    }
    v[F_CURVE + k] = r;
  }
}

static int64_t annot_unroll(const ir_annot_t *a, int n) {
  static const char *const keys[] = {"pragma_auto_unroll_max_step", "meta_schedule.unroll_explicit",
                                     "meta_schedule.unroll_implicit"};
  int64_t best = 0;
  for (size_t k = 0; k < TN_ARRAY_LEN(keys); k++) {
    const ir_annot_t *x = ir_annot_get(a, n, keys[k]);
    if (x && !x->is_str) best = TN_MAX(best, x->ival);
  }
  return best;
}

static void group5_extras(const fx_t *x, const store_t *s, double *v) {
  int64_t unroll = 0;
  for (int k = 0; k < x->nloops; k++) unroll = TN_MAX(unroll, annot_unroll(x->loops[k]->annots, x->loops[k]->nannots));
  for (int b = 0; b < x->nblocks; b++)
    unroll = TN_MAX(unroll, annot_unroll(x->blocks[b]->annots, x->blocks[b]->nannots));
  v[F_NEST] = cm_slog(s->prod), v[F_NEST + 1] = cm_slog(s->n), v[F_NEST + 2] = cm_slog((double)unroll);
  ir_scope_t sc = s->blk->body->u.store.buf->scope;
  v[F_STORE_SCOPE] = sc == IR_SCOPE_SHARED, v[F_STORE_SCOPE + 1] = sc == IR_SCOPE_LOCAL;
  for (int b = 0; b < s->nbuf && b < CM_BUFFERS_PER_STORE; b++) v[F_BUF_SCOPE + b] = s->bufs[b].buf->scope;
  for (int i = 0; i < s->blk->niters; i++) v[F_IS_REDUCTION] = v[F_IS_REDUCTION] || s->blk->iters[i].kind == IR_ITER_REDUCE;
  double rprod = 0;
  for (int i = 0; i < s->n; i++)
    if (!uses_loop(s->wmask, s->nest[i])) rprod = (rprod ? rprod : 1) * ext_of(x, s, i);
  v[F_REDUCE_PROD] = cm_slog(rprod);
  v[F_INNERMOST_LEN] = s->n ? cm_slog(ext_of(x, s, s->n - 1)) : 0;
}

/* The CPU micro-kernel columns: the innermost enclosing block that a CPU
 * intrinsic replaces, its register tile, and what one call does (the
 * counted loops inside that block) against how often it runs (those
 * outside). */
static void cpu_intrin_features(const fx_t *x, const store_t *s, double *v) {
  const ir_intrin_t *in = NULL;
  int depth = 0;
  for (int b = x->nblocks - 1; b >= 0 && !in; b--) {
    const ir_annot_t *an = ir_annot_get(x->blocks[b]->annots, x->blocks[b]->nannots, IR_ANN_TENSORIZE);
    const ir_intrin_t *cand = an && an->is_str ? ir_intrin_find(an->sval) : NULL;
    if (cand && ir_intrin_is_cpu(cand)) in = cand, depth = x->block_depth[b];
  }
  if (!in) return;
  double out = 1, red = 1, calls = 1;
  for (int i = 0; i < s->n; i++) {
    if (s->nest[i] < depth) calls *= ext_of(x, s, i);
    else if (uses_loop(s->wmask, s->nest[i])) out *= ext_of(x, s, i);
    else red *= ext_of(x, s, i);
  }
  double bytes = 0;
  int packed = 0;
  for (int a = 0; a < x->nacc; a++) { /* the reads: their elements under the call's loops */
    const access_t *ac = &x->acc[a];
    if (!ac->read || ac->write) continue;
    double n = 1;
    for (int i = 0; i < s->n; i++)
      if (s->nest[i] >= depth && uses_loop(ac->mask, s->nest[i])) n *= ext_of(x, s, i);
    bytes += n * ir_dtype_bytes(ac->buf->dtype);
    packed += ac->buf->role == IR_BUF_TEMP;
  }
  double *c = v + F_CPU;
  c[0] = 1, c[1] = in->kind == IR_INTRIN_CPU_DW;
  c[2] = in->mr, c[3] = in->nr;
  c[4] = in->mr * in->nr > 0 ? out / (double)(in->mr * in->nr) : 0;
  c[5] = cm_slog(red), c[6] = cm_slog(calls);
  c[7] = cm_slog(out * red / TN_MAX(in->lanes, 1));
  c[8] = TN_MIN(packed, 2), c[9] = cm_slog(bytes);
}

/* ======================================================================
 * Group 4: allocations of temp buffers
 * ====================================================================== */

static bool loop_counts(const ir_loop_t *const *loops, int k);

static alloc_info_t *alloc_of(const fx_t *x, const ir_buffer_t *b) {
  if (b->role != IR_BUF_TEMP || b->id < 0 || b->id >= x->nalloc) return NULL;
  return &x->alloc[b->id];
}

/* First walk: the common loop prefix of every block that accesses a temp. */
static void note_alloc_scope(fx_t *x, const ir_block_t *blk) {
  collect_accesses(x, blk);
  for (int a = 0; a < x->nacc; a++) {
    alloc_info_t *ai = alloc_of(x, x->acc[a].buf);
    if (!ai) continue;
    if (!ai->seen) {
      ai->seen = true;
      ai->depth = x->nloops;
      ai->prefix = x->nloops ? tn_xmalloc(sizeof *ai->prefix * (size_t)x->nloops) : NULL;
      if (x->nloops) memcpy(ai->prefix, x->loops, sizeof *ai->prefix * (size_t)x->nloops);
      continue;
    }
    int d = 0;
    while (d < ai->depth && d < x->nloops && ai->prefix[d] == x->loops[d]) d++;
    ai->depth = d;
  }
}

/* Second walk: grows each temp's region under its allocation point. */
static void note_alloc_region(fx_t *x, const store_t *s) {
  for (int b = 0; b < s->nbuf; b++) {
    alloc_info_t *ai = alloc_of(x, s->bufs[b].buf);
    if (!ai || !ai->seen) continue;
    set_bounds(x, ai->depth, -1, 0);
    for (int a = 0; a < x->nacc; a++) {
      if (x->acc[a].slot != b) continue;
      box_t bx;
      access_box(x, &x->acc[a], &bx);
      box_union(&ai->box, &bx, s->bufs[b].buf->ndim, !ai->has_box);
      ai->has_box = true;
    }
  }
}

/* Fills group 4 of every row that stores to a temp (after the second walk). */
static void fill_alloc_features(fx_t *x) {
  const ir_buffer_t *const *row_buf = x->row_buf;
  for (int r = 0; r < x->nrows; r++) {
    alloc_info_t *ai = alloc_of(x, row_buf[r]);
    if (!ai || !ai->has_box) continue;
    double size = box_numel(&ai->box, row_buf[r]->ndim) * ir_dtype_bytes(row_buf[r]->dtype);
    double outer = 1;
    for (int d = 0; d < ai->depth; d++) outer *= loop_counts(ai->prefix, d) ? (double)ai->prefix[d]->extent : 1;
    float *row = x->rows + (size_t)r * CM_NUM_FEATURES;
    row[F_ALLOC] = (float)cm_slog(size);
    row[F_ALLOC + 1] = (float)cm_slog(size * outer);
    row[F_ALLOC + 2] = (float)cm_slog(outer);
    row[F_ALLOC + 3] = (float)cm_slog(x->row_prod[r] / outer);
  }
}

/* ======================================================================
 * Ours: the GPU kernel a row belongs to
 * ====================================================================== */

/* What a walk of a kernel finds: threads per block (the largest extent
 * bound to each threadIdx axis), its deepest software-pipeline stage count,
 * and the block the Hopper rule decided (NULL: none), whose kernel the code
 * generator prints from the decisions rather than from the loops. */
typedef struct kinfo {
  int64_t threads[3], stages;
  const ir_block_t *hopper;
} kinfo_t;

static void kernel_walk(const ir_stmt_t *s, kinfo_t *k);

static void kernel_loop(const ir_loop_t *l, kinfo_t *k) {
  int slot = thread_slot(l);
  if (slot >= 3 && slot <= 5) k->threads[slot - 3] = TN_MAX(k->threads[slot - 3], l->extent);
  const ir_annot_t *a = ir_annot_get(l->annots, l->nannots, IR_ANN_PIPELINE_STAGES);
  if (a && !a->is_str && l->extent > 1) k->stages = TN_MAX(k->stages, TN_MIN(a->ival, IR_PIPELINE_MAX_STAGES));
  kernel_walk(l->body, k);
}

static void kernel_walk(const ir_stmt_t *s, kinfo_t *k) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) kernel_walk(s->u.seq.items[i], k);
    return;
  case IR_S_LOOP: kernel_loop(&s->u.loop, k); return;
  case IR_S_BLOCK:
    if (!k->hopper && ir_annot_get(s->u.block.annots, s->u.block.nannots, IR_ANN_HOPPER_GEMM)) k->hopper = &s->u.block;
    kernel_walk(s->u.block.init, k);
    kernel_walk(s->u.block.body, k);
    return;
  case IR_S_STORE: return;
  }
}

/* Stages of a pipelined loop among a temp's allocation prefix (1 if none). */
static int64_t alloc_stages(const alloc_info_t *ai) {
  for (int d = ai->depth - 1; d >= 0; d--) {
    const ir_annot_t *a = ir_annot_get(ai->prefix[d]->annots, ai->prefix[d]->nannots, IR_ANN_PIPELINE_STAGES);
    if (a && !a->is_str && a->ival > 1 && ai->prefix[d]->extent > 1) return TN_MIN(a->ival, IR_PIPELINE_MAX_STAGES);
  }
  return 1;
}

/* Warps an SM of the target holds (its file's max_warps_per_sm; 0: unknown). */
static int max_warps_per_sm(const tn_target_t *t) { return t ? t->max_warps_per_sm : 0; }

/* Warps of a block of `threads` threads (0 where the target gives no warp size). */
static int warps_of(const tn_target_t *t, int64_t threads) {
  return t && t->warp_size > 0 ? (int)((threads + t->warp_size - 1) / t->warp_size) : 0;
}

/* Registers per thread where ptxas decides: 32 plus the local buffers
 * (accumulators), which live in registers; at most 255. */
static double regs_est(double local_bytes) { return TN_MIN(255.0, 32.0 + local_bytes / 4.0); }

/* Resident warps over the SM's maximum, from the block's threads, its
 * shared memory (against what one block may use) and its registers (the
 * target's register file); 0 where the target does not say how many warps
 * an SM holds. */
static double occupancy_est(const tn_target_t *t, int64_t threads, double shared, double block_regs) {
  int wmax = max_warps_per_sm(t), warps = warps_of(t, threads);
  if (warps < 1 || warps > wmax || t->max_blocks_per_sm <= 0) return 0;
  double blocks = TN_MIN(wmax / warps, t->max_blocks_per_sm);
  int64_t smem = tn_target_shared_limit(t);
  if (shared > 0 && smem > 0) blocks = TN_MIN(blocks, floor((double)smem / shared));
  if (t->max_registers_per_block > 0) blocks = TN_MIN(blocks, floor((double)t->max_registers_per_block / block_regs));
  return TN_MAX(0.0, blocks * warps / wmax);
}

#define KERNEL_COLS (F_END - F_KERNEL)

/* The columns of a kernel the Hopper rule decided, from its decisions (what
 * codegen/hopper_gemm.c prints: its own threads, shared memory and register
 * split) rather than from the loops, which only a SIMT lowering would run.
 * False for decisions out of range (the verifier refuses such a candidate). */
static bool hopper_columns(const fx_t *x, const ir_block_t *b, float col[KERNEL_COLS]) {
  ir_hopper_gemm_t g;
  if (!ir_hopper_gemm_get(b, &g, NULL, 0)) return false;
  int bm = ir_hopper_gemm_rows(&g), acc = ir_hopper_gemm_acc_regs(&g), creg;
  int64_t threads = ir_hopper_gemm_threads(&g);
  double smem = (double)ir_hopper_gemm_smem(&g), regs;
  ir_hopper_shape_t sh;
  const char *why;
  bool shaped = ir_hopper_gemm_shape(b, &sh, &why);
  if (g.producer) { /* setmaxnreg moves registers from the producer to the consumers */
    bool ta = false, tb = false;
    if (shaped) ir_hopper_gemm_tma_ops(&g, sh.a_k_inner, sh.b_k_inner, &ta, &tb);
    ir_hopper_regs_t rp;
    ir_hopper_gemm_reg_plan(&g, ta && tb, &rp);
    creg = rp.consumer;
    regs = (double)rp.need;
  } else {
    creg = (int)regs_est(acc * 4.0);
    regs = (double)creg * (double)threads;
  }
  int64_t tiles = shaped ? sh.batch * (sh.m / bm) * (sh.n / g.n_tile) : 0;
  int64_t tma_bytes = shaped ? ir_hopper_gemm_tma_bytes(&g, sh.a_k_inner, sh.b_k_inner) : 0;
  /* a persistent grid's CTAs loop over the tiles in rounds, the last maybe
     partly idle; a grid as large as the tiles is a CTA per tile */
  int64_t ctas = ir_hopper_gemm_grid(&g, tiles), rounds = ctas ? (tiles + ctas - 1) / ctas : 0;
  float *h = col + (F_HOPPER - F_KERNEL);
  col[0] = (float)cm_slog(smem);
  col[1] = (float)cm_slog(acc * 4.0);
  col[2] = (float)g.stages;
  col[3] = (float)occupancy_est(x->t, threads, smem, regs);
  h[0] = 1, h[1] = (float)g.stages, h[2] = (float)g.warpgroups, h[3] = (float)bm, h[4] = (float)g.n_tile;
  h[5] = (float)cm_slog((double)ir_hopper_gemm_stage_bytes(&g)), h[6] = (float)creg, h[7] = (float)g.producer;
  h[8] = (float)g.group, h[9] = (float)acc, h[10] = (float)cm_slog((double)tiles);
  h[11] = (float)(tma_bytes > 0), h[12] = (float)cm_slog((double)tma_bytes);
  h[13] = (float)cm_slog((double)(ir_hopper_gemm_stage_bytes(&g) - tma_bytes));
  h[14] = (float)(ctas < tiles), h[15] = (float)cm_slog((double)ctas), h[16] = (float)cm_slog((double)rounds);
  h[17] = ctas ? (float)((double)(tiles - (rounds - 1) * ctas) / (double)ctas) : 0;
  /* a cluster's CTAs each bring 1/cs of the shared tile: the rest of it comes from their peers' multicasts */
  int cs = ir_hopper_gemm_cluster_size(&g), shared_rows = g.cluster < 0 ? bm : g.n_tile;
  h[18] = (float)cs, h[19] = (float)(g.cluster < -1);
  h[20] = cs > 1 ? (float)cm_slog((double)shared_rows * IR_HOPPER_K_TILE * 2 * (cs - 1) / cs) : 0;
  return true;
}

/* The kernel columns of the kernel whose outermost loop is top; buf_of_id
 * maps temp ids to the buffers the rows store to. */
static void kernel_columns(const fx_t *x, const ir_loop_t *top, const ir_buffer_t *const *buf_of_id,
                           float col[KERNEL_COLS]) {
  kinfo_t k = {.threads = {1, 1, 1}};
  kernel_loop(top, &k);
  memset(col, 0, sizeof(float) * KERNEL_COLS);
  if (k.hopper && hopper_columns(x, k.hopper, col)) return;
  double shared = 0, local = 0;
  for (int b = 0; b < x->nalloc; b++) {
    const alloc_info_t *ai = &x->alloc[b];
    const ir_buffer_t *buf = buf_of_id[b];
    if (!buf || !ai->has_box || ai->depth < 1 || ai->prefix[0] != top || buf->scope == IR_SCOPE_GLOBAL) continue;
    double bytes = box_numel(&ai->box, buf->ndim) * ir_dtype_bytes(buf->dtype);
    if (buf->scope == IR_SCOPE_SHARED) {
      shared += bytes * (double)alloc_stages(ai);
    } else {
      for (int d = 0; d < ai->depth; d++) /* one slice per virtual thread above the allocation */
        if (thread_slot(ai->prefix[d]) == 6) bytes *= (double)ai->prefix[d]->extent;
      local += bytes;
    }
  }
  col[0] = (float)cm_slog(shared);
  col[1] = (float)cm_slog(local);
  col[2] = (float)k.stages;
  int64_t threads = k.threads[0] * k.threads[1] * k.threads[2];
  double warp = x->t && x->t->warp_size > 0 ? (double)x->t->warp_size : 0.0; /* registers are allocated per warp */
  col[3] = (float)occupancy_est(x->t, threads, shared, regs_est(local) * warp * (double)warps_of(x->t, threads));
}

/* Fills the kernel columns of every row (GPU targets; after the walks).  A
 * kernel's rows are consecutive (program order): its columns are computed
 * once. */
static void fill_kernel_features(fx_t *x) {
  if (!x->is_gpu) return;
  const ir_buffer_t **buf_of_id = tn_xcalloc((size_t)x->nalloc + 1, sizeof *buf_of_id);
  for (int r = 0; r < x->nrows; r++) /* a temp is known by the rows that store to it */
    if (x->row_buf[r]->id >= 0 && x->row_buf[r]->id < x->nalloc) buf_of_id[x->row_buf[r]->id] = x->row_buf[r];
  const ir_loop_t *done = NULL;
  float col[KERNEL_COLS] = {0};
  for (int r = 0; r < x->nrows; r++) {
    const ir_loop_t *top = x->row_top[r];
    if (!top) continue;
    if (top != done) kernel_columns(x, top, buf_of_id, col), done = top;
    memcpy(x->rows + (size_t)r * CM_NUM_FEATURES + F_KERNEL, col, sizeof col);
  }
  free(buf_of_id);
}

/* ======================================================================
 * Driver
 * ====================================================================== */

/* Whether loop k of a nest counts: unit loops do not (TVM drops them), nor
 * does a loop bound to a thread an enclosing loop is already bound to (the
 * cooperative fetch under threadIdx.x: both are the same hardware index). */
static bool loop_counts(const ir_loop_t *const *loops, int k) {
  if (loops[k]->extent <= 1) return false;
  if (loops[k]->kind != IR_LOOP_THREAD) return true;
  for (int j = 0; j < k; j++)
    if (loops[j]->kind == IR_LOOP_THREAD && loops[j]->tag == loops[k]->tag) return false;
  return true;
}

static float *new_row(fx_t *x) {
  if (x->nrows == x->caprows) {
    x->caprows = x->caprows ? 2 * x->caprows : 4;
    x->rows = tn_xrealloc(x->rows, sizeof(float) * CM_NUM_FEATURES * (size_t)x->caprows);
    x->row_prod = tn_xrealloc(x->row_prod, sizeof(double) * (size_t)x->caprows);
    x->row_buf = tn_xrealloc(x->row_buf, sizeof(*x->row_buf) * (size_t)x->caprows);
    x->row_top = tn_xrealloc(x->row_top, sizeof(*x->row_top) * (size_t)x->caprows);
  }
  return x->rows + (size_t)x->nrows++ * CM_NUM_FEATURES;
}

static void store_free(store_t *s) {
  free(s->nest);
  free(s->bufs);
  free(s->numel_acc);
  free(s->numel_buf);
  free(s->stride);
}

/* Second walk: one feature row for a compute block. */
static void extract_store(fx_t *x, const ir_block_t *blk) {
  store_t s = {.blk = blk, .prod = 1};
  s.nest = tn_xmalloc(sizeof(int) * (size_t)(x->nloops + 1));
  for (int k = 0; k < x->nloops; k++)
    if (loop_counts(x->loops, k)) s.nest[s.n++] = k, s.prod *= (double)x->loops[k]->extent;
  collect_accesses(x, blk);
  group_buffers(x, &s);
  compute_regions(x, &s);
  compute_strides(x, &s);
  double v[CM_NUM_FEATURES] = {0}, float_ops = 0;
  group1(x, &s, v, &float_ops);
  group3(x, &s, float_ops, v);
  for (int b = 0; b < s.nbuf; b++) buffer_features(x, &s, b);
  note_alloc_region(x, &s);
  qsort(s.bufs, (size_t)s.nbuf, sizeof *s.bufs, bufinfo_cmp);
  for (int b = 0; b < s.nbuf && b < CM_BUFFERS_PER_STORE; b++)
    memcpy(v + F_BUF + b * BUF_FEATS, s.bufs[b].feat, sizeof s.bufs[b].feat);
  group5_extras(x, &s, v);
  cpu_intrin_features(x, &s, v);
  float *row = new_row(x);
  for (int i = 0; i < CM_NUM_FEATURES; i++) row[i] = (float)v[i];
  x->row_prod[x->nrows - 1] = s.prod;
  x->row_buf[x->nrows - 1] = blk->body->u.store.buf;
  x->row_top[x->nrows - 1] = x->nloops ? x->loops[0] : NULL;
  store_free(&s);
}

typedef void (*block_fn)(fx_t *x, const ir_block_t *blk);

/* Visits every compute block (a block whose body is a store) with the
 * enclosing loops and blocks on x's stacks. */
static void walk(fx_t *x, const ir_stmt_t *s, block_fn fn) {
  if (!s) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) walk(x, s->u.seq.items[i], fn);
    break;
  case IR_S_LOOP:
    GROW(x->loops, x->nloops, x->caploops);
    x->loops[x->nloops++] = &s->u.loop;
    walk(x, s->u.loop.body, fn);
    x->nloops--;
    break;
  case IR_S_BLOCK:
    if (x->nblocks == x->capblocks) {
      x->capblocks = x->capblocks ? 2 * x->capblocks : 16;
      x->blocks = tn_xrealloc(x->blocks, sizeof *x->blocks * (size_t)x->capblocks);
      x->block_depth = tn_xrealloc(x->block_depth, sizeof *x->block_depth * (size_t)x->capblocks);
    }
    x->block_depth[x->nblocks] = x->nloops;
    x->blocks[x->nblocks++] = &s->u.block;
    if (s->u.block.body && s->u.block.body->kind == IR_S_STORE) fn(x, &s->u.block);
    else walk(x, s->u.block.body, fn);
    x->nblocks--;
    break;
  case IR_S_STORE:
    break; /* stores live in blocks */
  }
}

int cm_features(const ir_func_t *f, const tn_target_t *t, cm_feature_rows_t *out) {
  fx_t x = {.f = f, .t = t, .is_gpu = t && t->kind != TN_TARGET_CPU};
  ir_bounds_init(&x.bounds);
  x.nalloc = f->next_buf_id;
  x.alloc = tn_xcalloc((size_t)x.nalloc + 1, sizeof *x.alloc);
  walk(&x, f->root, note_alloc_scope);
  walk(&x, f->root, extract_store);
  fill_alloc_features(&x);
  fill_kernel_features(&x);
  out->nrows = x.nrows;
  out->ncols = CM_NUM_FEATURES;
  out->data = x.nrows ? x.rows : NULL;
  if (!x.nrows) free(x.rows);
  for (int i = 0; i < x.nalloc; i++) free(x.alloc[i].prefix);
  free(x.alloc);
  free(x.loops);
  free(x.blocks);
  free(x.block_depth);
  free(x.acc);
  free(x.stk);
  free(x.row_prod);
  free(x.row_buf);
  free(x.row_top);
  ir_bounds_free(&x.bounds);
  return 0;
}
