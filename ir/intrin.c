/* intrin.c — the registry of tensor intrinsics and the structural match of a
 * block nest against an intrinsic's description (see intrin.h). */
#include "ir/intrin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/analysis.h"

/* ---- the registry ---------------------------------------------------------- */

/* C[MR, NR] += A[MR, K] B[K, NR]: the outer product over vector registers that
 * BLIS-style micro-kernels are built from.  The reduction is a nest of up to
 * four levels (k3 k2 k1 k, outermost first), each free (its extent given at
 * run time) and each with its own strides in A and B: a matmul uses k alone,
 * a convolution read in place its filter window and channels (rh rw rc), so
 * the call runs the whole inner reduction with the accumulators in
 * registers whatever the operands' layout.  Only C and B must be contiguous
 * along j. */
#define MM_DESC(MR, NR)                                                                                  \
  "# C[MR, NR] += A[MR, K] * B[K, NR], the reduction a nest of up to 4 levels given at run time\n"     \
  "param MR = " #MR ", NR = " #NR ", K3 = 1, K2 = 1, K1 = 1, K = 4\n"                                  \
  "input A: float32[MR, K3, K2, K1, K]\n"                                                              \
  "input B: float32[K3, K2, K1, K, NR]\n"                                                              \
  "output C: float32[MR, NR]\n"                                                                        \
  "C[i, j] = sum(k3 < K3, k2 < K2, k1 < K1, k < K: A[i, k3, k2, k1, k] * B[k3, k2, k1, k, j])\n"

#define MM_AVX2(MR, NR)                                                                                  \
  {"f32_fma_" #MR "x" #NR "_avx2",                                                                      \
   "float32 C[" #MR "x" #NR "] += A[" #MR "xK] B[Kx" #NR "], accumulators in ymm registers (AVX2+FMA)",  \
   MM_DESC(MR, NR), "k3 k2 k1 k", "C.j B.j", "avx2 fma", MR, NR, 8, IR_INTRIN_CPU_MM, 0, 0, 0, 0, IR_FLOAT32}
#define MM_AVX512(MR, NR)                                                                                \
  {"f32_fma_" #MR "x" #NR "_avx512",                                                                    \
   "float32 C[" #MR "x" #NR "] += A[" #MR "xK] B[Kx" #NR "], accumulators in zmm registers (AVX-512F)",  \
   MM_DESC(MR, NR), "k3 k2 k1 k", "C.j B.j", "avx512f", MR, NR, 16, IR_INTRIN_CPU_MM, 0, 0, 0, 0, IR_FLOAT32}

/* C[MR, NR] += A[MR, K.., NR] B[K.., NR] elementwise along j: a depthwise
 * convolution's output pixels (i) times channels (j), its window (k levels)
 * inside.  Every operand is contiguous along j; A is loaded as vectors, not
 * broadcast: one load per FMA. */
#define DW_DESC(MR, NR)                                                                                  \
  "# C[MR, NR] += A[MR, K, NR] * B[K, NR] elementwise along NR, the reduction up to 4 levels\n"         \
  "param MR = " #MR ", NR = " #NR ", K3 = 1, K2 = 1, K1 = 1, K = 4\n"                                  \
  "input A: float32[MR, K3, K2, K1, K, NR]\n"                                                          \
  "input B: float32[K3, K2, K1, K, NR]\n"                                                              \
  "output C: float32[MR, NR]\n"                                                                        \
  "C[i, j] = sum(k3 < K3, k2 < K2, k1 < K1, k < K: A[i, k3, k2, k1, k, j] * B[k3, k2, k1, k, j])\n"
#define DW(MR, NR, ISA, LANES, FEAT)                                                                     \
  {"f32_dw_" #MR "x" #NR "_" #ISA,                                                                      \
   "float32 C[" #MR "x" #NR "] += A[" #MR "xKx" #NR "] * B[Kx" #NR "] elementwise along " #NR           \
   " (depthwise), accumulators in vector registers (" #ISA ")",                                          \
   DW_DESC(MR, NR), "k3 k2 k1 k", "C.j B.j A.j", FEAT, MR, NR, LANES, IR_INTRIN_CPU_DW, 0, 0, 0, 0, IR_FLOAT32}

/* AVX-512 has 32 zmm registers: MR * NR / 16 accumulators plus NR / 16 for
 * a row of B (the broadcast of A is an operand of the FMA).  AVX2 has 16 ymm
 * registers: MR * NR / 8 accumulators plus NR / 8 for B and one broadcast of
 * A: 6x16 (12 accumulators) is the classic shape, 4x24 the other; the
 * smaller ones fit extents that 6 and 24 do not divide.  FMA latency x 2
 * ports needs ~10 accumulators in flight: 8 cap the speed.  Hosts with
 * AVX-512 take its shapes first (the rule picks the first two that fit). */
/* Warp-level tensor-core intrinsics (nvcuda::wmma): C[16, 16] float32 +=
 * A[16, K] B[K, 16] with the products in float32.  Every iterator has a fixed
 * extent: one call is one mma_sync of the warp.  tf32 takes float32 data
 * and rounds it to tf32 (10 bits of mantissa) as it enters the fragments: its
 * results differ from float32 arithmetic, which is why a job must ask for it. */
#define WMMA_DESC(T, CAST, K)                                                                            \
  "# C[16, 16] += A[16, " #K "] * B[" #K ", 16] on tensor cores\n"                                   \
  "param M = 16, N = 16, K = " #K "\n"                                                                \
  "input A: " #T "[M, K]\n"                                                                           \
  "input B: " #T "[K, N]\n"                                                                           \
  "output C: float32[M, N]\n"                                                                         \
  "C[i, j] = sum(k < K: " CAST "(A[i, k]) * " CAST "(B[k, j]))\n"
#define WMMA_MMA(NAME, T, CAST, K, SM, DT, WHAT)                                                         \
  {NAME, "float32 C[16x16] += A[16x" #K "] B[" #K "x16], " WHAT " on a warp's tensor cores (wmma, sm_" #SM "+)", \
   WMMA_DESC(T, CAST, K), "", "", "", 0, 0, 0, IR_INTRIN_WMMA_MMA, SM, 16, 16, K, DT}

static const ir_intrin_t registry[] = {
    MM_AVX512(12, 32),
    MM_AVX512(6, 64),
    MM_AVX512(8, 32),
    MM_AVX512(4, 64),
    MM_AVX2(6, 16),
    MM_AVX2(4, 24),
    MM_AVX2(4, 16),
    MM_AVX2(8, 8),
    MM_AVX2(2, 32),
    /* depthwise: MR x NR / lanes accumulators, a row of B, one A vector at a time */
    DW(8, 32, avx512, 16, "avx512f"),
    DW(4, 64, avx512, 16, "avx512f"),
    DW(8, 16, avx512, 16, "avx512f"),
    DW(6, 16, avx2, 8, "avx2 fma"),
    DW(12, 8, avx2, 8, "avx2 fma"),
    DW(6, 8, avx2, 8, "avx2 fma"),
    WMMA_MMA("wmma_f16_f32_16x16x16", float16, "float32", 16, 70, IR_FLOAT16, "float16 inputs"),
    WMMA_MMA("wmma_bf16_f32_16x16x16", bfloat16, "float32", 16, 80, IR_BFLOAT16, "bfloat16 inputs"),
    WMMA_MMA("wmma_tf32_f32_16x16x8", float32, "", 8, 80, IR_FLOAT32, "float32 inputs rounded to tf32"),
    {"wmma_fill_f32_16x16", "float32 C[16x16] = 0 in a warp's accumulator fragment (wmma fill_fragment, sm_70+)",
     "# C[16, 16] = 0 (the init of a tensor-core reduction)\n"
     "param M = 16, N = 16\n"
     "output C: float32[M, N]\n"
     "C[i, j] = 0.0\n",
     "", "", "", 0, 0, 0, IR_INTRIN_WMMA_FILL, 70, 16, 16, 0, IR_FLOAT32},
    {"wmma_store_f32_16x16", "float32 D[16x16] = C: a warp's accumulator fragment to memory (wmma store_matrix_sync, sm_70+)",
     "# D[16, 16] = C (an accumulator fragment stored)\n"
     "param M = 16, N = 16\n"
     "input C: float32[M, N]\n"
     "output D: float32[M, N]\n"
     "D[i, j] = C[i, j]\n",
     "", "", "", 0, 0, 0, IR_INTRIN_WMMA_STORE, 70, 16, 16, 0, IR_FLOAT32},
};

int ir_intrin_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const ir_intrin_t *ir_intrin_at(int i) { return i >= 0 && i < ir_intrin_count() ? &registry[i] : NULL; }

const ir_intrin_t *ir_intrin_find(const char *name) {
  for (int i = 0; name && i < ir_intrin_count(); i++)
    if (!strcmp(registry[i].name, name)) return &registry[i];
  return NULL;
}

static bool host_has(const char *feat) {
#if defined(__x86_64__) || defined(__i386__)
  if (!strcmp(feat, "avx2")) return __builtin_cpu_supports("avx2");
  if (!strcmp(feat, "fma")) return __builtin_cpu_supports("fma");
  if (!strcmp(feat, "avx512f")) return __builtin_cpu_supports("avx512f");
#endif
  (void)feat;
  return false;
}

bool ir_intrin_is_cpu(const ir_intrin_t *in) { return in->kind == IR_INTRIN_CPU_MM || in->kind == IR_INTRIN_CPU_DW; }

bool ir_intrin_is_wmma(const ir_intrin_t *in) { return !ir_intrin_is_cpu(in); }

bool ir_intrin_host_supports(const ir_intrin_t *in) {
  if (ir_intrin_is_wmma(in)) return false;
  const char *p = in->features;
  while (*p) {
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ");
    if (!n) break;
    char feat[32];
    if (n >= sizeof feat) return false;
    memcpy(feat, p, n);
    feat[n] = 0;
    if (!host_has(feat)) return false;
    p += n;
  }
  return true;
}

int ir_intrin_desc(const ir_intrin_t *in, ir_workload_t **out, tn_err_t *err) {
  char path[96];
  snprintf(path, sizeof path, "intrinsic %s", in->name);
  return ir_workload_parse(path, in->desc, strlen(in->desc), NULL, 0, out, err);
}

/* ---- matching ---------------------------------------------------------------- */

static const ir_stmt_t *strip_seq(const ir_stmt_t *s) {
  while (s && s->kind == IR_S_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s;
}

/* The description's buffers bound to the program's, with the index list of
 * the (single) access of each on both sides. */
typedef struct binding {
  int n;                  /* description buffer ids 0 .. n */
  ir_buffer_t **to;
  ir_expr_t *const **didx, *const **aidx;
  bool swap;              /* commutative operators: try the other order first */
  bool in_mul;            /* matching a product's factors */
  /* A factor select(gate, X, 0.0) matched as X: the product is zero where
   * gate fails, so the call may skip those points (gate must not vary
   * inside the tile: match_predicate makes it the call's guard). */
  const ir_expr_t *gate;
} binding_t;

static bool idx_equal(ir_expr_t *const *a, ir_expr_t *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

static bool bind_access(binding_t *bd, const ir_buffer_t *d, ir_expr_t *const *didx, ir_buffer_t *a,
                        ir_expr_t *const *aidx) {
  if (d->id < 0 || d->id >= bd->n || d->dtype != a->dtype) return false;
  if (bd->to[d->id]) /* the same buffer, the same element on both sides */
    return bd->to[d->id] == a && idx_equal(bd->didx[d->id], didx, d->ndim) && idx_equal(bd->aidx[d->id], aidx, a->ndim);
  for (int i = 0; i < bd->n; i++)
    if (bd->to[i] == a) return false; /* two operands cannot share a buffer */
  bd->to[d->id] = a;
  bd->didx[d->id] = didx;
  bd->aidx[d->id] = aidx;
  return true;
}

static void bind_save(const binding_t *bd, binding_t *copy) {
  memcpy(copy->to, bd->to, sizeof bd->to[0] * (size_t)bd->n);
  memcpy(copy->didx, bd->didx, sizeof bd->didx[0] * (size_t)bd->n);
  memcpy(copy->aidx, bd->aidx, sizeof bd->aidx[0] * (size_t)bd->n);
}

static bool match_expr(binding_t *bd, const ir_expr_t *d, const ir_expr_t *a);

/* Commutative operators match either way round. */
static bool match_commuted(binding_t *bd, const ir_expr_t *d, const ir_expr_t *a) {
  binding_t saved = {bd->n, NULL, NULL, NULL, false, false, NULL};
  ir_buffer_t *to[IR_INTRIN_MAX_OPERANDS * 4];
  ir_expr_t *const *di[IR_INTRIN_MAX_OPERANDS * 4], *const *ai[IR_INTRIN_MAX_OPERANDS * 4];
  if (bd->n > (int)(sizeof to / sizeof to[0])) return false;
  saved.to = to, saved.didx = di, saved.aidx = ai;
  bind_save(bd, &saved);
  const ir_expr_t *gate = bd->gate;
  bool in_mul = bd->in_mul;
  bd->in_mul = d->kind == IR_E_MUL;
  for (int order = 0; order < 2; order++) {
    bool swap = (order == 0) == bd->swap;
    const ir_expr_t *x = swap ? a->u.bin.b : a->u.bin.a, *y = swap ? a->u.bin.a : a->u.bin.b;
    if (match_expr(bd, d->u.bin.a, x) && match_expr(bd, d->u.bin.b, y)) {
      bd->in_mul = in_mul;
      return true;
    }
    bind_save(&saved, bd);
    bd->gate = gate;
  }
  bd->in_mul = in_mul;
  return false;
}

/* Whether e is the float constant 0. */
static bool is_zero(const ir_expr_t *e) { return e->kind == IR_E_FLOAT && e->u.fval == 0.0; }

static bool match_expr(binding_t *bd, const ir_expr_t *d, const ir_expr_t *a) {
  if (d && a && d->kind == IR_E_LOAD && a->kind == IR_E_SELECT && bd->in_mul && !bd->gate && is_zero(a->u.sel.f) &&
      a->u.sel.t->kind == IR_E_LOAD) {
    bd->gate = a->u.sel.cond;
    if (match_expr(bd, d, a->u.sel.t)) return true;
    bd->gate = NULL;
    return false;
  }
  if (!d || !a || d->kind != a->kind || d->dtype != a->dtype) return false;
  switch (d->kind) {
  case IR_E_INT: return d->u.ival == a->u.ival;
  case IR_E_FLOAT: return d->u.fval == a->u.fval;
  case IR_E_VAR: return false; /* iterators in values: not in any description */
  case IR_E_LOAD: return bind_access(bd, d->u.load.buf, d->u.load.idx, a->u.load.buf, a->u.load.idx);
  case IR_E_ADD:
  case IR_E_MUL:
  case IR_E_MIN:
  case IR_E_MAX: return match_commuted(bd, d, a);
  default: break;
  }
  const ir_expr_t *dk[IR_EXPR_MAX_CHILDREN], *ak[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(d, dk);
  if (ir_expr_children(a, ak) != n) return false;
  if (d->kind == IR_E_CALL && d->u.call.fn != a->u.call.fn) return false;
  for (int i = 0; i < n; i++)
    if (!match_expr(bd, dk[i], ak[i])) return false;
  return true;
}

/* Row-major element strides of a buffer. */
static void row_strides(const ir_buffer_t *b, int64_t *st) {
  int64_t s = 1;
  for (int d = b->ndim - 1; d >= 0; d--) {
    st[d] = s;
    s *= b->shape[d];
  }
}

typedef struct nest {
  const ir_loop_t **loops;
  int n;
} nest_t;

/* outer's body: loops down to one compute block. */
static int inner_nest(const ir_block_t *outer, const ir_intrin_t *in, nest_t *ns, const ir_block_t **inner,
                      tn_err_t *err) {
  int cap = 8;
  ns->loops = tn_xmalloc(sizeof ns->loops[0] * (size_t)cap);
  ns->n = 0;
  const ir_stmt_t *s = strip_seq(outer->body);
  while (s && s->kind == IR_S_LOOP) {
    const ir_loop_t *l = &s->u.loop;
    if (l->kind == IR_LOOP_PARALLEL || l->kind == IR_LOOP_THREAD)
      return tn_err_set(err, TN_EINVAL,
                        "block \"%s\" cannot take intrinsic %s: loop %s inside it is %s (the call runs the nest "
                        "on one thread)",
                        outer->name, in->name, l->var->name, l->kind == IR_LOOP_PARALLEL ? "parallel" : "bound to a thread");
    if (ns->n == cap) ns->loops = tn_xrealloc(ns->loops, sizeof ns->loops[0] * (size_t)(cap *= 2));
    ns->loops[ns->n++] = l;
    s = strip_seq(l->body);
  }
  if (!s || s->kind != IR_S_BLOCK || !s->u.block.body || s->u.block.body->kind != IR_S_STORE)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" cannot take intrinsic %s: its body must be a perfect loop nest around one "
                      "compute block (blockize the loop above the tile)",
                      outer->name, in->name);
  *inner = &s->u.block;
  if ((*inner)->init)
    return tn_err_set(err, TN_EINVAL,
                      "block \"%s\" cannot take intrinsic %s: block \"%s\" still has its init (decompose the "
                      "reduction first)",
                      outer->name, in->name, (*inner)->name);
  return TN_OK;
}

/* Whether the name is in a space-separated list. */
static bool in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ' || p[n] == '.')) return true;
  return false;
}

/* Splits conjunctions. */
static void conjuncts(ir_expr_t *e, ir_expr_t ***out, int *n, int *cap) {
  if (!e) return;
  if (e->kind == IR_E_AND) {
    conjuncts(e->u.bin.a, out, n, cap);
    conjuncts(e->u.bin.b, out, n, cap);
    return;
  }
  if (*n == *cap) *out = tn_xrealloc(*out, sizeof (*out)[0] * (size_t)(*cap = *cap ? *cap * 2 : 8));
  (*out)[(*n)++] = e;
}

static ir_expr_t *and_expr(ir_func_t *f, ir_expr_t *a, ir_expr_t *b) { return a ? ir_bin(f, IR_E_AND, a, b) : b; }

/* One conjunct over an inner loop x: `P > 0` with P = R + c x, c < 0, gives
 * x < ceil(R / -c), the count of x's values that run. */
static int predicate_count(ir_func_t *f, ir_expr_t *p, const ir_var_t *x, int64_t extent, ir_expr_t **count,
                           const ir_bounds_t *bounds) {
  ir_expr_t *pos;
  switch (p->kind) {
  case IR_E_LT: pos = ir_bin(f, IR_E_SUB, p->u.bin.b, p->u.bin.a); break;
  case IR_E_LE: pos = ir_bin(f, IR_E_ADD, ir_bin(f, IR_E_SUB, p->u.bin.b, p->u.bin.a), ir_int(f, 1)); break;
  case IR_E_GT: pos = ir_bin(f, IR_E_SUB, p->u.bin.a, p->u.bin.b); break;
  case IR_E_GE: pos = ir_bin(f, IR_E_ADD, ir_bin(f, IR_E_SUB, p->u.bin.a, p->u.bin.b), ir_int(f, 1)); break;
  default: return TN_EINVAL;
  }
  int64_t c = 0;
  if (!ir_affine_coef_of(pos, x, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &c) || c >= 0) return TN_EINVAL;
  ir_var_t *from[1] = {(ir_var_t *)x};
  ir_expr_t *zero[1] = {ir_int(f, 0)};
  ir_expr_t *rest = ir_expr_subst(f, pos, from, zero, 1);
  if (ir_expr_uses_var(rest, x)) return TN_EINVAL;
  int64_t m = -c;
  ir_expr_t *n = ir_bin(f, IR_E_FLOORDIV, ir_bin(f, IR_E_ADD, rest, ir_int(f, m - 1)), ir_int(f, m));
  n = ir_bin(f, IR_E_MIN, ir_int(f, extent), ir_bin(f, IR_E_MAX, ir_int(f, 0), n));
  if (*count) n = ir_bin(f, IR_E_MIN, *count, n);
  *count = ir_simplify(f, n, bounds);
  return TN_OK;
}

/* The operand access's element offset, as a coefficient per inner loop
 * (and, where dimcoef is not NULL, each index's: dimcoef[d * ns->n + l],
 * *dims_ok false where some index is not affine alone).
 * The offset is taken whole (the indices times the row strides, simplified
 * over the loops' ranges): loops fused across two dimensions (a filter's
 * rw and rc as one loop f: (x + f / C) * C + f % C) have a stride there
 * that neither index has alone. */
static int access_strides(const ir_intrin_operand_t *op, const ir_block_t *inner, const nest_t *ns,
                          const ir_bounds_t *bounds, int64_t *coef, int64_t *dimcoef, bool *dims_ok, ir_func_t *f) {
  int64_t rs[IR_MAX_DIMS];
  row_strides(op->buf, rs);
  ir_var_t **from = tn_xmalloc(sizeof from[0] * (size_t)(inner->niters + 1));
  ir_expr_t **to = tn_xmalloc(sizeof to[0] * (size_t)(inner->niters + 1));
  for (int i = 0; i < inner->niters; i++) from[i] = inner->iters[i].var, to[i] = inner->iters[i].binding;
  int rc = TN_OK;
  ir_expr_t *flat = ir_int(f, 0);
  if (dims_ok) *dims_ok = true;
  for (int d = 0; d < op->buf->ndim; d++) {
    ir_expr_t *e = ir_expr_subst(f, op->idx[d], from, to, inner->niters);
    flat = ir_bin(f, IR_E_ADD, flat, ir_bin(f, IR_E_MUL, e, ir_int(f, rs[d])));
    for (int l = 0; l < ns->n && dimcoef; l++)
      if (!ir_affine_coef_of(e, ns->loops[l]->var, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &dimcoef[d * ns->n + l]))
        *dims_ok = false;
  }
  flat = ir_simplify(f, flat, bounds);
  for (int l = 0; l < ns->n && rc == TN_OK; l++)
    if (!ir_affine_coef_of(flat, ns->loops[l]->var, IR_AFFINE_ATOMS | IR_AFFINE_CASTS, &coef[l])) rc = TN_EINVAL;
  free(from);
  free(to);
  return rc;
}

typedef struct span {
  int64_t stride, extent;
} span_t;

static int span_cmp(const void *a, const void *b) {
  int64_t x = ((const span_t *)a)->stride, y = ((const span_t *)b)->stride;
  return x < y ? -1 : x > y;
}

/* Whether the spans (a stride and an extent each) reach distinct offsets:
 * each stride past what the smaller ones reach together. */
static bool spans_distinct(span_t *sp, int n) {
  qsort(sp, (size_t)n, sizeof sp[0], span_cmp);
  int64_t reach = 0; /* largest value reached by the smaller coefficients */
  for (int i = 0; i < n; i++) {
    if (sp[i].stride <= reach) return false;
    reach += sp[i].stride * (sp[i].extent - 1);
  }
  return true;
}

/* Distinct points of the output's iterators land on distinct elements:
 * each iterator moves one index, and the iterators of one index do not
 * overlap (index by index, as the indices of the elements that run are in
 * range: a tail past the buffer's edge is masked by the predicate); where
 * an index is not affine alone (a fused iterator's f / W and f % W), the
 * offset's strides as a whole. */
static bool injective(ir_func_t *f, const ir_intrin_match_t *m, const ir_intrin_operand_t *op, const nest_t *ns,
                      const ir_bounds_t *bounds) {
  int64_t *dc = tn_xcalloc((size_t)(op->buf->ndim * ns->n + 1), sizeof *dc), *flat = tn_xmalloc(sizeof *flat * (size_t)(ns->n + 1));
  bool dims_ok, ok = access_strides(op, m->inner, ns, bounds, flat, dc, &dims_ok, f) == TN_OK;
  int ndims = dims_ok ? op->buf->ndim : 1;
  for (int d = 0; d < ndims && ok; d++) {
    span_t sp[IR_INTRIN_MAX_ITERS];
    int n = 0;
    for (int t = 0; t < m->niters && ok; t++) {
      if (!m->loop[t] || m->extent[t] <= 1) continue;
      int l = 0;
      while (ns->loops[l] != m->loop[t]) l++;
      int64_t c = dims_ok ? dc[d * ns->n + l] : flat[l];
      if (!c) continue;
      for (int e = 0; e < op->buf->ndim && ok && dims_ok; e++) ok = e == d || !dc[e * ns->n + l]; /* one index only */
      if (c < 0) ok = false;
      sp[n++] = (span_t){c, m->extent[t]};
    }
    ok = ok && spans_distinct(sp, n);
  }
  free(dc);
  free(flat);
  return ok;
}

typedef struct mstate {
  ir_workload_t *desc;
  nest_t ns;
  ir_buffer_t *to[IR_INTRIN_MAX_OPERANDS * 4];
  ir_expr_t *const *didx[IR_INTRIN_MAX_OPERANDS * 4], *const *aidx[IR_INTRIN_MAX_OPERANDS * 4];
  int64_t *coef; /* per operand, per inner loop */
  ir_expr_t **conj;
  int nconj, capconj;
  ir_bounds_t bounds;
  const ir_expr_t *gate; /* binding_t's: the condition of a factor matched through a select */
} mstate_t;

/* The description's last line (its statement), for messages. */
static const char *desc_statement(const char *desc) {
  static __thread char line[160];
  size_t n = strlen(desc);
  while (n && desc[n - 1] == '\n') n--;
  size_t start = n;
  while (start && desc[start - 1] != '\n') start--;
  snprintf(line, sizeof line, "%.*s", (int)(n - start), desc + start);
  return line;
}

static int match_body(ir_func_t *f, const ir_block_t *outer, const ir_intrin_t *in, ir_intrin_match_t *m,
                      mstate_t *st, bool swap, tn_err_t *err) {
  (void)f;
  const ir_func_t *df = st->desc->func;
  ir_block_t **dblocks = NULL;
  int ndb = ir_blocks(df, &dblocks);
  const ir_block_t *db = ndb == 1 ? dblocks[0] : NULL;
  free(dblocks);
  if (!db || db->body->kind != IR_S_STORE || db->niters > IR_INTRIN_MAX_ITERS || df->nparams > IR_INTRIN_MAX_OPERANDS ||
      df->next_buf_id > (int)(sizeof st->to / sizeof st->to[0]))
    return tn_err_set(err, TN_EINVAL, "intrinsic %s: its description must be one compute block of at most %d "
                      "iterators and %d tensors", in->name, IR_INTRIN_MAX_ITERS, IR_INTRIN_MAX_OPERANDS);
  binding_t bd = {df->next_buf_id, st->to, st->didx, st->aidx, swap, false, NULL};
  memset(st->to, 0, sizeof st->to);
  const ir_stmt_t *ds = db->body, *as = m->inner->body;
  if (!bind_access(&bd, ds->u.store.buf, ds->u.store.idx, as->u.store.buf, as->u.store.idx) ||
      !match_expr(&bd, ds->u.store.value, as->u.store.value))
    return tn_err_set(err, TN_EINVAL, "block \"%s\" does not compute what intrinsic %s does (%s, one access per tensor)",
                      m->inner->name, in->name, desc_statement(in->desc));
  st->gate = bd.gate;
  m->niters = db->niters;
  for (int t = 0; t < db->niters; t++) {
    const char *nm = db->iters[t].var->name; /* the parser's iterators are v_<index> */
    snprintf(m->iter_name[t], sizeof m->iter_name[t], "%s", strncmp(nm, "v_", 2) ? nm : nm + 2);
    m->extent[t] = 1;
  }
  m->noperands = df->nparams;
  /* the indices simplified over the iterators' domains: a grouped conv's
   * co // (CO / G) with one group is 0 for every co < CO, which the loops
   * alone no longer show once a padded tile runs past CO */
  ir_bounds_t dom;
  ir_bounds_init(&dom);
  for (int i = 0; i < m->inner->niters; i++)
    ir_bounds_set(&dom, m->inner->iters[i].var, 0, m->inner->iters[i].extent - 1);
  for (int p = 0; p < df->nparams; p++) {
    const ir_buffer_t *dbuf = df->params[p];
    ir_intrin_operand_t *op = &m->op[p];
    snprintf(op->name, sizeof op->name, "%s", dbuf->name);
    op->buf = st->to[dbuf->id];
    op->output = dbuf->role == IR_BUF_OUTPUT;
    if (!op->buf) {
      ir_bounds_free(&dom);
      return tn_err_set(err, TN_EINVAL, "intrinsic %s: tensor %s is not used", in->name, dbuf->name);
    }
    op->idx = tn_arena_alloc(f->arena, sizeof *op->idx * (size_t)op->buf->ndim);
    for (int d = 0; d < op->buf->ndim; d++) op->idx[d] = ir_simplify(f, st->aidx[dbuf->id][d], &dom);
    op->nuse = dbuf->ndim;
    for (int d = 0; d < dbuf->ndim; d++) {
      const ir_expr_t *e = st->didx[dbuf->id][d];
      op->use[d] = -1;
      for (int t = 0; t < db->niters; t++)
        if (e->kind == IR_E_VAR && e->u.var == db->iters[t].var) op->use[d] = t;
      if (op->use[d] < 0) {
        ir_bounds_free(&dom);
        return tn_err_set(err, TN_EINVAL, "intrinsic %s: %s's index %d is not one iterator", in->name, dbuf->name, d);
      }
    }
  }
  ir_bounds_free(&dom);
  (void)outer;
  return TN_OK;
}

/* The operands whose offset inner loop l moves, as a bit set. */
static unsigned loop_sig(const ir_intrin_match_t *m, const mstate_t *st, int l) {
  unsigned sig = 0;
  for (int p = 0; p < m->noperands; p++)
    if (st->coef[p * st->ns.n + l]) sig |= 1u << p;
  return sig;
}

/* The description iterator that inner loop l plays: the one used by the
 * same operands.  Where several are free iterators (the levels of one
 * reduction nest), the loops with that signature take them in order, the
 * innermost loop the last level.  Where several others are (a copy D[i, j] =
 * C[i, j] uses i and j alike), the one whose index dimension the loop moves,
 * the description's dimensions aligned with the buffer's last ones.
 * m->niters: none. */
static int pick_iter(ir_func_t *f, const ir_intrin_t *in, ir_intrin_match_t *m, mstate_t *st, const unsigned *dsig,
                     unsigned sig, int l) {
  int found = m->niters, nfound = 0, nfree = 0, level[IR_INTRIN_MAX_ITERS];
  for (int t = 0; t < m->niters; t++)
    if (dsig[t] == sig) {
      found = nfound++ ? found : t;
      if (in_list(in->free_iters, m->iter_name[t])) level[nfree++] = t;
    }
  if (nfound <= 1) return found;
  if (nfree == nfound) {
    int inner = 0; /* loops inside l (l too) with the same signature */
    for (int q = l; q < st->ns.n; q++) inner += st->ns.loops[q]->extent > 1 && loop_sig(m, st, q) == sig;
    return inner <= nfree ? level[nfree - inner] : m->niters;
  }
  for (int p = 0; p < m->noperands; p++) {
    const ir_intrin_operand_t *op = &m->op[p];
    if (!(sig >> p & 1u)) continue;
    int64_t *flat = tn_xmalloc(sizeof *flat * (size_t)(st->ns.n + 1));
    int64_t *dc = tn_xcalloc((size_t)(op->buf->ndim * st->ns.n + 1), sizeof *dc);
    int pick = m->niters;
    bool dims_ok;
    if (access_strides(op, m->inner, &st->ns, &st->bounds, flat, dc, &dims_ok, f) == TN_OK && dims_ok)
      for (int u = 0; u < op->nuse && pick == m->niters; u++) {
        int d = op->buf->ndim - op->nuse + u;
        if (d >= 0 && dsig[op->use[u]] == sig && dc[d * st->ns.n + l] && !m->loop[op->use[u]]) pick = op->use[u];
      }
    free(flat);
    free(dc);
    if (pick < m->niters) return pick;
  }
  return found;
}

/* Binds every inner loop of extent > 1 to the description iterator used by
 * the same operands. */
static int bind_loops(ir_func_t *f, const ir_intrin_t *in, ir_intrin_match_t *m, mstate_t *st, tn_err_t *err) {
  const nest_t *ns = &st->ns;
  st->coef = tn_xmalloc(sizeof st->coef[0] * (size_t)(m->noperands * (ns->n + 1)));
  for (int p = 0; p < m->noperands; p++)
    if (access_strides(&m->op[p], m->inner, ns, &st->bounds, st->coef + p * ns->n, NULL, NULL, f) < 0)
      return tn_err_set(err, TN_EINVAL, "block \"%s\": %s's index is not affine in the loops inside \"%s\"",
                        m->inner->name, m->op[p].buf->name, m->outer->name);
  unsigned dsig[IR_INTRIN_MAX_ITERS] = {0};
  for (int p = 0; p < m->noperands; p++)
    for (int u = 0; u < m->op[p].nuse; u++) dsig[m->op[p].use[u]] |= 1u << p;
  for (int l = 0; l < ns->n; l++) {
    if (ns->loops[l]->extent == 1) continue;
    int t = pick_iter(f, in, m, st, dsig, loop_sig(m, st, l), l);
    if (t == m->niters)
      return tn_err_set(err, TN_EINVAL, "block \"%s\": loop %s (extent %lld) plays no role of intrinsic %s's iterators",
                        m->outer->name, ns->loops[l]->var->name, (long long)ns->loops[l]->extent, in->name);
    if (m->loop[t])
      return tn_err_set(err, TN_EINVAL, "block \"%s\": loops %s and %s both play %s's iterator %s (fuse them first)",
                        m->outer->name, m->loop[t]->var->name, ns->loops[l]->var->name, in->name, m->iter_name[t]);
    m->loop[t] = ns->loops[l];
    m->extent[t] = ns->loops[l]->extent;
    for (int p = 0; p < m->noperands; p++) m->op[p].stride[t] = st->coef[p * ns->n + l];
  }
  /* fixed extents */
  const ir_block_t *db = NULL;
  ir_block_t **dblocks = NULL;
  if (ir_blocks(st->desc->func, &dblocks) == 1) db = dblocks[0];
  free(dblocks);
  for (int t = 0; t < m->niters && db; t++)
    if (!in_list(in->free_iters, m->iter_name[t]) && m->extent[t] != db->iters[t].extent)
      return tn_err_set(err, TN_EINVAL, "block \"%s\": intrinsic %s needs iterator %s of extent %lld, the loop %s%s has %lld",
                        m->outer->name, in->name, m->iter_name[t], (long long)db->iters[t].extent,
                        m->loop[t] ? "" : "(none)", m->loop[t] ? m->loop[t]->var->name : "", (long long)m->extent[t]);
  return TN_OK;
}

static int check_strides(ir_func_t *f, const ir_intrin_t *in, ir_intrin_match_t *m, const nest_t *ns,
                         const ir_bounds_t *bounds, tn_err_t *err) {
  for (int p = 0; p < m->noperands; p++) {
    const ir_intrin_operand_t *op = &m->op[p];
    for (int u = 0; u < op->nuse; u++) {
      int t = op->use[u];
      char pair[64];
      snprintf(pair, sizeof pair, "%s.%s", op->name, m->iter_name[t]);
      if (m->extent[t] > 1 && in_list(in->unit, pair) && op->stride[t] != 1)
        return tn_err_set(err, TN_EINVAL,
                          "block \"%s\": intrinsic %s needs %s (%s) contiguous along %s, its stride is %lld",
                          m->outer->name, in->name, op->name, op->buf->name, m->iter_name[t], (long long)op->stride[t]);
    }
    if (op->output && !injective(f, m, op, ns, bounds))
      return tn_err_set(err, TN_EINVAL, "block \"%s\": intrinsic %s would write an element of %s twice",
                        m->outer->name, in->name, op->buf->name);
  }
  return TN_OK;
}

static int match_predicate(ir_func_t *f, const ir_intrin_t *in, ir_intrin_match_t *m, mstate_t *st, tn_err_t *err) {
  if (st->gate) { /* over the loops; it must not vary inside the tile */
    ir_var_t **from = tn_xmalloc(sizeof from[0] * (size_t)(m->inner->niters + 1));
    ir_expr_t **to = tn_xmalloc(sizeof to[0] * (size_t)(m->inner->niters + 1));
    for (int i = 0; i < m->inner->niters; i++) from[i] = m->inner->iters[i].var, to[i] = m->inner->iters[i].binding;
    ir_expr_t *g = ir_simplify(f, ir_expr_subst(f, (ir_expr_t *)st->gate, from, to, m->inner->niters), &st->bounds);
    free(from);
    free(to);
    for (int l = 0; l < st->ns.n; l++)
      if (st->ns.loops[l]->extent > 1 && ir_expr_uses_var(g, st->ns.loops[l]->var))
        return tn_err_set(err, TN_EINVAL,
                          "block \"%s\": intrinsic %s cannot skip the zeros of a select that varies along loop %s "
                          "inside the tile", m->outer->name, in->name, st->ns.loops[l]->var->name);
    m->guard = and_expr(f, m->guard, g);
  }
  if (!m->inner->predicate) return TN_OK;
  const nest_t *ns = &st->ns;
  /* extent-1 loops inside are 0 */
  int nz = 0;
  ir_var_t **zv = tn_xmalloc(sizeof zv[0] * (size_t)(ns->n + 1));
  ir_expr_t **zs = tn_xmalloc(sizeof zs[0] * (size_t)(ns->n + 1));
  for (int l = 0; l < ns->n; l++)
    if (ns->loops[l]->extent == 1) zv[nz] = ns->loops[l]->var, zs[nz++] = ir_int(f, 0);
  ir_expr_t *p = ir_expr_subst(f, m->inner->predicate, zv, zs, nz);
  free(zv);
  free(zs);
  conjuncts(p, &st->conj, &st->nconj, &st->capconj);
  for (int i = 0; i < st->nconj; i++) {
    ir_expr_t *c = st->conj[i];
    int t = -1, uses = 0;
    for (int u = 0; u < m->niters; u++)
      if (m->loop[u] && ir_expr_uses_var(c, m->loop[u]->var)) t = u, uses++;
    if (!uses) {
      m->guard = and_expr(f, m->guard, c);
      continue;
    }
    if (uses > 1 || predicate_count(f, c, m->loop[t]->var, m->extent[t], &m->count[t], &st->bounds) < 0) {
      tn_buf_t txt;
      tn_buf_init(&txt);
      ir_print_expr(c, &txt);
      int rc = tn_err_set(err, TN_EINVAL,
                          "block \"%s\": intrinsic %s takes predicates that bound one loop from above, not %s",
                          m->outer->name, in->name, tn_buf_str(&txt));
      tn_buf_free(&txt);
      return rc;
    }
  }
  return TN_OK;
}

/* One attempt, with the operands of commutative operators bound in their
 * order or (swap) the other first. */
static int match_once(ir_func_t *f, const ir_block_t *outer, const ir_intrin_t *in, ir_intrin_match_t *m, bool swap,
                      tn_err_t *err) {
  memset(m, 0, sizeof *m);
  m->intrin = in;
  m->outer = outer;
  mstate_t st;
  memset(&st, 0, sizeof st);
  ir_bounds_init(&st.bounds);
  int rc = inner_nest(outer, in, &st.ns, &m->inner, err);
  if (rc == TN_OK) rc = ir_intrin_desc(in, &st.desc, err);
  if (rc == TN_OK) {
    for (int l = 0; l < st.ns.n; l++) ir_bounds_set(&st.bounds, st.ns.loops[l]->var, 0, st.ns.loops[l]->extent - 1);
    rc = match_body(f, outer, in, m, &st, swap, err);
  }
  if (rc == TN_OK) rc = bind_loops(f, in, m, &st, err);
  if (rc == TN_OK) rc = check_strides(f, in, m, &st.ns, &st.bounds, err);
  if (rc == TN_OK) rc = match_predicate(f, in, m, &st, err);
  ir_workload_free(st.desc);
  free(st.ns.loops);
  free(st.coef);
  free(st.conj);
  ir_bounds_free(&st.bounds);
  return rc;
}

/* The program's product may name the operands in either order (a NCHW
 * convolution's X * W has the vector operand, B, first): a binding that
 * fails past the body's shape is tried the other way round, and the first
 * attempt's error is the one reported. */
int ir_intrin_match(ir_func_t *f, const ir_block_t *outer, const ir_intrin_t *in, ir_intrin_match_t *m,
                    tn_err_t *err) {
  int rc = match_once(f, outer, in, m, false, err);
  if (rc < 0) {
    tn_err_t again = {0};
    if (match_once(f, outer, in, m, true, &again) == TN_OK) return TN_OK;
    match_once(f, outer, in, m, false, &again); /* m as the first attempt left it */
  }
  return rc;
}

/* ---- Hopper warpgroup GEMM -------------------------------------------------- */

static bool annot_int(const ir_block_t *b, const char *key, int lo, int hi, int *v, char *why, size_t n) {
  const ir_annot_t *a = ir_annot_get(b->annots, b->nannots, key);
  if (!a || a->is_str || a->ival < lo || a->ival > hi) {
    if (why) snprintf(why, n, "block \"%s\": annotation %s %s (expected an integer from %d to %d)", b->name, key,
                      a ? "out of range" : "missing", lo, hi);
    return false;
  }
  *v = (int)a->ival;
  return true;
}

bool ir_hopper_gemm_get(const ir_block_t *b, ir_hopper_gemm_t *g, char *why, size_t why_len) {
  if (why && why_len) why[0] = 0;
  if (!ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_GEMM)) return false;
  if (!annot_int(b, IR_ANN_HOPPER_WARPGROUPS, 1, 2, &g->warpgroups, why, why_len) ||
      !annot_int(b, IR_ANN_HOPPER_M_FRAGS, 1, 2, &g->m_frags, why, why_len) ||
      !annot_int(b, IR_ANN_HOPPER_N_TILE, 8, 256, &g->n_tile, why, why_len) ||
      !annot_int(b, IR_ANN_HOPPER_STAGES, 2, 6, &g->stages, why, why_len) ||
      !annot_int(b, IR_ANN_HOPPER_GROUP, 1, 64, &g->group, why, why_len) ||
      !annot_int(b, IR_ANN_HOPPER_PRODUCER, 0, 1, &g->producer, why, why_len))
    return false;
  g->tma = g->ctas = 0; /* blocks annotated before these decisions existed */
  g->cluster = 1;
  g->reg_file = 0;
  const ir_annot_t *rf = ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_REG_FILE);
  if (rf && (rf->is_str || rf->ival < 0 || rf->ival > ((int64_t)1 << 30))) {
    if (why) snprintf(why, why_len, "block \"%s\": annotation %s out of range (expected a register count)", b->name,
                      IR_ANN_HOPPER_REG_FILE);
    return false;
  }
  if (rf) g->reg_file = rf->ival;
  if ((ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_TMA) &&
       !annot_int(b, IR_ANN_HOPPER_TMA, 0, 1, &g->tma, why, why_len)) ||
      (ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_CTAS) &&
       !annot_int(b, IR_ANN_HOPPER_CTAS, 0, 1 << 16, &g->ctas, why, why_len)) ||
      (ir_annot_get(b->annots, b->nannots, IR_ANN_HOPPER_CLUSTER) &&
       !annot_int(b, IR_ANN_HOPPER_CLUSTER, -4, 4, &g->cluster, why, why_len)))
    return false;
  int cs = ir_hopper_gemm_cluster_size(g);
  if ((cs != 1 && cs != 2 && cs != 4) || g->cluster == -1) {
    if (why) snprintf(why, why_len, "block \"%s\": %s %d is not 1, 2, 4, -2 or -4", b->name, IR_ANN_HOPPER_CLUSTER,
                      g->cluster);
    return false;
  }
  if (g->n_tile % 8) {
    if (why) snprintf(why, why_len, "block \"%s\": %s %d is not a multiple of 8", b->name, IR_ANN_HOPPER_N_TILE,
                      g->n_tile);
    return false;
  }
  return true;
}

int ir_hopper_gemm_threads(const ir_hopper_gemm_t *g) { return 128 * (g->warpgroups + g->producer); }

int ir_hopper_gemm_rows(const ir_hopper_gemm_t *g) { return 64 * g->warpgroups * g->m_frags; }

int64_t ir_hopper_gemm_stage_bytes(const ir_hopper_gemm_t *g) {
  return (int64_t)(ir_hopper_gemm_rows(g) + g->n_tile) * IR_HOPPER_K_TILE * 2;
}

int64_t ir_hopper_gemm_out_stage_bytes(const ir_hopper_gemm_t *g) {
  return (int64_t)IR_HOPPER_OUT_STAGE_WARP_BYTES * 4 * g->warpgroups;
}

int64_t ir_hopper_gemm_smem(const ir_hopper_gemm_t *g) {
  return ir_hopper_gemm_stage_bytes(g) * g->stages + 16 * g->stages + ir_hopper_gemm_out_stage_bytes(g) + 1024;
}

int ir_hopper_gemm_acc_regs(const ir_hopper_gemm_t *g) { return g->m_frags * g->n_tile / 2; }

int ir_launch_regs(int64_t reg_file, int64_t threads, int max_per_thread) {
  if (reg_file <= 0 || threads <= 0) return 0;
  int64_t cap = max_per_thread > 0 ? TN_MIN(max_per_thread, IR_REGS_PER_THREAD_MAX) : IR_REGS_PER_THREAD_MAX;
  int64_t per = TN_MIN(reg_file / threads, cap);
  return (int)(per / IR_REG_ALLOC_UNIT * IR_REG_ALLOC_UNIT);
}

/* The consumers' share is capped at 240: the accumulators (at most 128)
 * and the loops' state fit without spilling, and a few registers stay in
 * the pool. */
#define CONSUMER_REGS_MAX 240

void ir_hopper_gemm_reg_plan(const ir_hopper_gemm_t *g, bool tma_producer, ir_hopper_regs_t *r) {
  int threads = ir_hopper_gemm_threads(g), w = g->warpgroups;
  memset(r, 0, sizeof *r);
  r->fixed = g->reg_file <= 0;
  r->launch = ir_launch_regs(g->reg_file, threads, 0);
  if (r->fixed) { /* what kernels were printed with before the register file was annotated */
    static const int producer_regs[2] = {152, 96}, consumer_regs[2] = {240, 208};
    r->producer = g->producer ? producer_regs[w == 2] : 0;
    r->consumer = g->producer ? consumer_regs[w == 2] : 0;
  } else if (g->producer) {
    r->producer = w == 1 ? 152 : tma_producer ? 40 : 96;
    int left = (r->launch * (w + 1) - r->producer) / w / IR_REG_ALLOC_UNIT * IR_REG_ALLOC_UNIT;
    r->consumer = TN_MIN(CONSUMER_REGS_MAX, left);
  } else {
    r->consumer = r->launch;
  }
  r->pool = (int64_t)r->launch * threads;
  r->need = g->producer ? 128 * ((int64_t)r->producer + (int64_t)w * r->consumer) : r->pool;
}

void ir_hopper_gemm_tma_ops(const ir_hopper_gemm_t *g, bool a_k_inner, bool b_k_inner, bool *a, bool *b) {
  *a = a_k_inner && (g->tma || g->cluster < -1);
  *b = b_k_inner && (g->tma || g->cluster > 1);
}

int64_t ir_hopper_gemm_tma_bytes(const ir_hopper_gemm_t *g, bool a_k_inner, bool b_k_inner) {
  bool a, b;
  ir_hopper_gemm_tma_ops(g, a_k_inner, b_k_inner, &a, &b);
  return (int64_t)((a ? ir_hopper_gemm_rows(g) : 0) + (b ? g->n_tile : 0)) * IR_HOPPER_K_TILE * 2;
}

int64_t ir_hopper_gemm_grid(const ir_hopper_gemm_t *g, int64_t tiles) {
  int64_t cs = ir_hopper_gemm_cluster_size(g), ctas = g->ctas / cs * cs;
  return ctas > 0 && ctas < tiles ? ctas : tiles;
}

int ir_hopper_gemm_cluster_size(const ir_hopper_gemm_t *g) { return g->cluster < 0 ? -g->cluster : g->cluster; }

bool ir_hopper_gemm_cluster_ok(const ir_hopper_gemm_t *g, const ir_hopper_shape_t *sh, const char **why) {
  int cs = ir_hopper_gemm_cluster_size(g), bm = ir_hopper_gemm_rows(g);
  bool along_n = g->cluster < 0;
  if (cs == 1) return true;
  if (!(along_n ? sh->a_k_inner : sh->b_k_inner))
    *why = "a cluster shares its operand by TMA multicast, which needs it K-major";
  else if (along_n ? (sh->n / g->n_tile) % cs : (sh->m / bm) % cs)
    *why = "the cluster does not divide the tiles along its dimension";
  else if ((along_n ? bm : g->n_tile) / cs % 8)
    *why = "the cluster's slices of the shared tile are not whole 8-row swizzle atoms";
  else
    return true;
  return false;
}

static bool is_var(const ir_expr_t *e, const ir_var_t *v) { return e->kind == IR_E_VAR && e->u.var == v; }

/* Every load of acc in e is acc[*row, *col] over two distinct variables (set by the first). */
static bool acc_loads(const ir_expr_t *e, const ir_buffer_t *acc, const ir_var_t **row, const ir_var_t **col, int *n) {
  if (e->kind == IR_E_LOAD && e->u.load.buf == acc) {
    ir_expr_t *const *ix = e->u.load.idx;
    if (e->u.load.n != 2 || ix[0]->kind != IR_E_VAR || ix[1]->kind != IR_E_VAR || ix[0]->u.var == ix[1]->u.var)
      return false;
    if (!(*n)++) *row = ix[0]->u.var, *col = ix[1]->u.var;
    return *row == ix[0]->u.var && *col == ix[1]->u.var;
  }
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int k = ir_expr_children(e, kids);
  for (int i = 0; i < k; i++)
    if (!acc_loads(kids[i], acc, row, col, n)) return false;
  return true;
}

bool ir_hopper_epilogue(const ir_block_t *cons, const ir_buffer_t *acc, const ir_var_t **row, const ir_var_t **col) {
  const ir_stmt_t *st = cons->body;
  if (cons->niters != 2 || cons->init || !st || st->kind != IR_S_STORE || st->u.store.buf == acc) return false;
  for (int i = 0; i < 2; i++)
    if (cons->iters[i].kind != IR_ITER_SPATIAL) return false;
  const ir_var_t *r = NULL, *c = NULL;
  int n = 0;
  if (!acc_loads(st->u.store.value, acc, &r, &c, &n) || n == 0) return false;
  /* stored with the column read as its last index, over a last dimension as
     wide as acc's, the other indices a function of the row alone (acc's own
     shape, or the [n, y, x, f] output of a conv fused to [m, f]), of 2-, 4- or
     8-byte elements: the kernel stages rows of the tile and stores 16-byte
     vectors of consecutive columns */
  const ir_buffer_t *out = st->u.store.buf;
  int bytes = ir_dtype_bytes(out->dtype), nd = st->u.store.n;
  if (nd < 2 || nd != out->ndim || !is_var(st->u.store.idx[nd - 1], c) ||
      out->shape[nd - 1] != acc->shape[acc->ndim - 1] || (bytes != 2 && bytes != 4 && bytes != 8))
    return false;
  for (int d = 0; d < nd - 1; d++)
    if (ir_expr_uses_var(st->u.store.idx[d], c) || (out->shape[d] > 1 && !ir_expr_uses_var(st->u.store.idx[d], r)))
      return false;
  bool iters = (r == cons->iters[0].var && c == cons->iters[1].var) || (r == cons->iters[1].var && c == cons->iters[0].var);
  if (iters && row) *row = r;
  if (iters && col) *col = c;
  return iters;
}

static const ir_expr_t *strip_cast(const ir_expr_t *e) { return e->kind == IR_E_CAST ? e->u.un : e; }

bool ir_mac_parts(const ir_stmt_t *st, const ir_expr_t **acc, const ir_expr_t **a, const ir_expr_t **b) {
  if (!st || st->kind != IR_S_STORE || st->u.store.value->kind != IR_E_ADD) return false;
  const ir_expr_t *v = st->u.store.value, *mul = v->u.bin.b->kind == IR_E_MUL ? v->u.bin.b : v->u.bin.a;
  if (mul->kind != IR_E_MUL) return false;
  *acc = mul == v->u.bin.b ? v->u.bin.a : v->u.bin.b;
  *a = strip_cast(mul->u.bin.a), *b = strip_cast(mul->u.bin.b);
  return true;
}

/* The operand load x: its last two indices (row, k) or (k, row) after the
 * batch's (nb of them, over bv); *k_inner says which. */
static bool gemm_operand(const ir_expr_t *x, int nb, const ir_var_t *bv, const ir_var_t *row, const ir_var_t *k,
                         bool *k_inner) {
  if (x->kind != IR_E_LOAD || x->u.load.n != 2 + nb || (nb && !is_var(x->u.load.idx[0], bv))) return false;
  ir_expr_t *const *ix = x->u.load.idx + nb;
  *k_inner = is_var(ix[0], row) && is_var(ix[1], k);
  return *k_inner || (is_var(ix[0], k) && is_var(ix[1], row));
}

static int64_t iter_extent(const ir_block_t *b, const ir_var_t *v) {
  for (int t = 0; t < b->niters; t++)
    if (b->iters[t].var == v) return b->iters[t].extent;
  return -1;
}

/* Whether buf's shape is (batch,) rows x cols. */
static bool shaped(const ir_buffer_t *buf, int nb, int64_t batch, int64_t rows, int64_t cols) {
  return buf->ndim == 2 + nb && (!nb || buf->shape[0] == batch) && buf->shape[nb] == rows && buf->shape[nb + 1] == cols;
}

bool ir_hopper_gemm_shape(const ir_block_t *b, ir_hopper_shape_t *sh, const char **why) {
  const ir_stmt_t *st = b->body;
  const ir_var_t *k = NULL;
  memset(sh, 0, sizeof *sh);
  for (int t = 0; t < b->niters; t++)
    if (b->iters[t].kind == IR_ITER_REDUCE) k = b->iters[t].var;
  int n = st && st->kind == IR_S_STORE ? st->u.store.n : 0, nb = n - 2;
  if ((n != 2 && n != 3) || st->u.store.buf->dtype != IR_FLOAT32 || !k || b->niters != n + 1) {
    *why = "not a float32 2-D (or batched) store with one reduction";
    return false;
  }
  const ir_expr_t *acc, *x, *y;
  bool mac = ir_mac_parts(st, &acc, &x, &y);
  ir_expr_t *const *ci = st->u.store.idx;
  for (int d = 0; d < n; d++)
    if (ci[d]->kind != IR_E_VAR) mac = false;
  if (!mac) {
    *why = "not an accumulation of a product into out[(b,) i, j]";
    return false;
  }
  const ir_var_t *bv = nb ? ci[0]->u.var : NULL, *iv = ci[nb]->u.var, *jv = ci[nb + 1]->u.var;
  if (x->kind == IR_E_LOAD && x->u.load.n == n && (is_var(x->u.load.idx[nb], jv) || is_var(x->u.load.idx[nb + 1], jv))) {
    const ir_expr_t *t = x;
    x = y, y = t;
  }
  if (!gemm_operand(x, nb, bv, iv, k, &sh->a_k_inner) || !gemm_operand(y, nb, bv, jv, k, &sh->b_k_inner)) {
    *why = "its operands are not A[(b,) i, k] (or [k, i]) and B[(b,) k, j] (or [j, k]) over the output's [(b,) i, j]";
    return false;
  }
  sh->a = x->u.load.buf, sh->b = y->u.load.buf, sh->out = st->u.store.buf;
  sh->batch = nb ? iter_extent(b, bv) : 1;
  sh->m = iter_extent(b, iv), sh->n = iter_extent(b, jv), sh->k = iter_extent(b, k);
  if (sh->a->dtype != sh->b->dtype || (sh->a->dtype != IR_FLOAT16 && sh->a->dtype != IR_BFLOAT16)) {
    *why = "its operands are not both float16 or both bfloat16";
    return false;
  }
  if (!shaped(sh->out, nb, sh->batch, sh->m, sh->n) ||
      !shaped(sh->a, nb, sh->batch, sh->a_k_inner ? sh->m : sh->k, sh->a_k_inner ? sh->k : sh->m) ||
      !shaped(sh->b, nb, sh->batch, sh->b_k_inner ? sh->n : sh->k, sh->b_k_inner ? sh->k : sh->n)) {
    *why = "its buffers are not exactly (B x) M x K, K x N and M x N";
    return false;
  }
  return true;
}
