/* ir.c — IR node construction, deep copy, substitution, equality and tree
 * queries.  Everything is allocated from the owning function's arena. */
#include "ir.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes, scopes, names -------------------------------------------- */

static const char *const dtype_names[] = {"bool", "int32", "int64", "float16", "float32", "float64", "bfloat16"};

const char *ir_dtype_name(ir_dtype_t t) {
  return (unsigned)t < TN_ARRAY_LEN(dtype_names) ? dtype_names[t] : "?";
}

int ir_dtype_parse(const char *s, ir_dtype_t *out) {
  for (size_t i = 0; i < TN_ARRAY_LEN(dtype_names); i++)
    if (strcmp(s, dtype_names[i]) == 0) {
      *out = (ir_dtype_t)i;
      return TN_OK;
    }
  return TN_EINVAL;
}

int ir_dtype_bytes(ir_dtype_t t) {
  switch (t) {
  case IR_BOOL: return 1;
  case IR_INT32: return 4;
  case IR_INT64: return 8;
  case IR_FLOAT16: return 2;
  case IR_BFLOAT16: return 2;
  case IR_FLOAT32: return 4;
  case IR_FLOAT64: return 8;
  }
  return 0;
}

bool ir_dtype_is_float(ir_dtype_t t) {
  return t == IR_FLOAT16 || t == IR_BFLOAT16 || t == IR_FLOAT32 || t == IR_FLOAT64;
}

bool ir_dtype_is_16bit_float(ir_dtype_t t) { return t == IR_FLOAT16 || t == IR_BFLOAT16; }
bool ir_dtype_is_int(ir_dtype_t t) { return t == IR_INT32 || t == IR_INT64; }

double ir_dtype_min_value(ir_dtype_t t) {
  switch (t) {
  case IR_BOOL: return 0;
  case IR_INT32: return (double)INT32_MIN;
  case IR_INT64: return (double)INT64_MIN;
  case IR_FLOAT16: return -65504.0;
  case IR_BFLOAT16: return -3.3895313892515355e38;
  case IR_FLOAT32: return -(double)FLT_MAX;
  case IR_FLOAT64: return -DBL_MAX;
  }
  return 0;
}

double ir_dtype_max_value(ir_dtype_t t) {
  switch (t) {
  case IR_BOOL: return 1;
  case IR_INT32: return (double)INT32_MAX;
  case IR_INT64: return (double)INT64_MAX;
  case IR_FLOAT16: return 65504.0;
  case IR_BFLOAT16: return 3.3895313892515355e38;
  case IR_FLOAT32: return (double)FLT_MAX;
  case IR_FLOAT64: return DBL_MAX;
  }
  return 0;
}

static const char *const scope_names[] = {"global", "shared", "local"};

const char *ir_scope_name(ir_scope_t s) {
  return (unsigned)s < TN_ARRAY_LEN(scope_names) ? scope_names[s] : "?";
}

int ir_scope_parse(const char *s, ir_scope_t *out) {
  for (size_t i = 0; i < TN_ARRAY_LEN(scope_names); i++)
    if (strcmp(s, scope_names[i]) == 0) {
      *out = (ir_scope_t)i;
      return TN_OK;
    }
  return TN_EINVAL;
}

const char *ir_loop_kind_name(ir_loop_kind_t k) {
  static const char *const names[] = {"serial", "parallel", "vectorized", "unroll", "thread_binding"};
  return (unsigned)k < TN_ARRAY_LEN(names) ? names[k] : "?";
}

static const struct {
  const char *name;
  ir_tag_class_t cls;
  int axis;
} tag_table[IR_TAG__COUNT] = {
    [IR_TAG_NONE] = {"", IR_TAG_CLASS_NONE, 0},
    [IR_TAG_BLOCK_X] = {"blockIdx.x", IR_TAG_CLASS_BLOCK, 0},
    [IR_TAG_BLOCK_Y] = {"blockIdx.y", IR_TAG_CLASS_BLOCK, 1},
    [IR_TAG_BLOCK_Z] = {"blockIdx.z", IR_TAG_CLASS_BLOCK, 2},
    [IR_TAG_THREAD_X] = {"threadIdx.x", IR_TAG_CLASS_THREAD, 0},
    [IR_TAG_THREAD_Y] = {"threadIdx.y", IR_TAG_CLASS_THREAD, 1},
    [IR_TAG_THREAD_Z] = {"threadIdx.z", IR_TAG_CLASS_THREAD, 2},
    [IR_TAG_VTHREAD_X] = {"vthread.x", IR_TAG_CLASS_VTHREAD, 0},
    [IR_TAG_VTHREAD_Y] = {"vthread.y", IR_TAG_CLASS_VTHREAD, 1},
    [IR_TAG_VTHREAD_Z] = {"vthread.z", IR_TAG_CLASS_VTHREAD, 2},
};

const char *ir_thread_tag_name(ir_thread_tag_t t) {
  return (unsigned)t < IR_TAG__COUNT ? tag_table[t].name : "?";
}

int ir_thread_tag_parse(const char *s, ir_thread_tag_t *out) {
  for (int t = IR_TAG_NONE + 1; s && t < IR_TAG__COUNT; t++)
    if (strcmp(s, tag_table[t].name) == 0) {
      *out = (ir_thread_tag_t)t;
      return 0;
    }
  return TN_EINVAL;
}

ir_tag_class_t ir_thread_tag_class(ir_thread_tag_t t) {
  return (unsigned)t < IR_TAG__COUNT ? tag_table[t].cls : IR_TAG_CLASS_NONE;
}

int ir_thread_tag_axis(ir_thread_tag_t t) { return (unsigned)t < IR_TAG__COUNT ? tag_table[t].axis : 0; }

const char *ir_thread_tag_list(void) { return "blockIdx.x/y/z, threadIdx.x/y/z, vthread.x/y/z"; }

static const char *const fn_names[] = {"exp", "log", "sqrt", "tanh", "abs", "pow"};

const char *ir_math_fn_name(ir_math_fn_t f) {
  return (unsigned)f < TN_ARRAY_LEN(fn_names) ? fn_names[f] : "?";
}

int ir_math_fn_arity(ir_math_fn_t f) { return f == IR_FN_POW ? 2 : 1; }

int64_t ir_buffer_numel(const ir_buffer_t *b) {
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++) n *= b->shape[i];
  return n;
}

bool ir_expr_is_binary(ir_expr_kind_t k) { return k >= IR_E_ADD && k <= IR_E_OR; }
bool ir_expr_is_compare(ir_expr_kind_t k) { return k >= IR_E_EQ && k <= IR_E_GE; }

bool ir_expr_is_const_int(const ir_expr_t *e, int64_t *v) {
  if (!e || e->kind != IR_E_INT) return false;
  if (v) *v = e->u.ival;
  return true;
}

/* ---- functions, vars, buffers ----------------------------------------- */

ir_func_t *ir_func_new(const char *name) {
  tn_arena_t *a = tn_arena_new();
  ir_func_t *f = TN_NEW(a, ir_func_t);
  f->arena = a;
  f->name = tn_arena_strdup(a, name);
  f->root = ir_block_new(f, "root");
  return f;
}

void ir_func_free(ir_func_t *f) {
  if (f) tn_arena_free(f->arena);
}

ir_var_t *ir_var_new(ir_func_t *f, const char *name, ir_dtype_t dtype) {
  ir_var_t *v = TN_NEW(f->arena, ir_var_t);
  v->name = tn_arena_strdup(f->arena, name);
  v->dtype = dtype;
  v->id = f->next_var_id++;
  return v;
}

ir_buffer_t *ir_buffer_new(ir_func_t *f, const char *name, ir_dtype_t dtype, int ndim,
                           const int64_t *shape, ir_scope_t scope, ir_buf_role_t role) {
  ir_buffer_t *b = TN_NEW(f->arena, ir_buffer_t);
  b->name = tn_arena_strdup(f->arena, name);
  b->dtype = dtype;
  b->ndim = ndim;
  b->shape = tn_arena_memdup(f->arena, shape, sizeof(int64_t) * (size_t)ndim);
  b->scope = scope;
  b->role = role;
  b->id = f->next_buf_id++;
  b->init_lo = ir_dtype_is_float(dtype) ? -1.0 : -8.0;
  b->init_hi = ir_dtype_is_float(dtype) ? 1.0 : 8.0;
  return b;
}

/* ---- expressions ------------------------------------------------------ */

static ir_expr_t *expr_new(ir_func_t *f, ir_expr_kind_t k, ir_dtype_t t) {
  ir_expr_t *e = TN_NEW(f->arena, ir_expr_t);
  e->kind = k;
  e->dtype = t;
  return e;
}

ir_expr_t *ir_const_int(ir_func_t *f, ir_dtype_t t, int64_t v) {
  ir_expr_t *e = expr_new(f, IR_E_INT, t);
  e->u.ival = v;
  return e;
}

ir_expr_t *ir_int(ir_func_t *f, int64_t v) { return ir_const_int(f, IR_INT32, v); }
ir_expr_t *ir_bool(ir_func_t *f, bool v) { return ir_const_int(f, IR_BOOL, v); }

ir_expr_t *ir_float(ir_func_t *f, ir_dtype_t t, double v) {
  ir_expr_t *e = expr_new(f, IR_E_FLOAT, t);
  e->u.fval = v;
  return e;
}

ir_expr_t *ir_varref(ir_func_t *f, ir_var_t *v) {
  ir_expr_t *e = expr_new(f, IR_E_VAR, v->dtype);
  e->u.var = v;
  return e;
}

ir_expr_t *ir_load(ir_func_t *f, ir_buffer_t *b, ir_expr_t *const *idx, int n) {
  ir_expr_t *e = expr_new(f, IR_E_LOAD, b->dtype);
  e->u.load.buf = b;
  e->u.load.n = n;
  e->u.load.idx = tn_arena_memdup(f->arena, idx, sizeof(ir_expr_t *) * (size_t)n);
  return e;
}

ir_expr_t *ir_bin(ir_func_t *f, ir_expr_kind_t k, ir_expr_t *a, ir_expr_t *b) {
  bool boolean = ir_expr_is_compare(k) || k == IR_E_AND || k == IR_E_OR;
  ir_expr_t *e = expr_new(f, k, boolean ? IR_BOOL : a->dtype);
  e->u.bin.a = a;
  e->u.bin.b = b;
  return e;
}

ir_expr_t *ir_unary(ir_func_t *f, ir_expr_kind_t k, ir_expr_t *a) {
  ir_expr_t *e = expr_new(f, k, k == IR_E_NOT ? IR_BOOL : a->dtype);
  e->u.un = a;
  return e;
}

ir_expr_t *ir_cast(ir_func_t *f, ir_dtype_t t, ir_expr_t *a) {
  ir_expr_t *e = expr_new(f, IR_E_CAST, t);
  e->u.un = a;
  return e;
}

ir_expr_t *ir_select(ir_func_t *f, ir_expr_t *cond, ir_expr_t *t, ir_expr_t *el) {
  ir_expr_t *e = expr_new(f, IR_E_SELECT, t->dtype);
  e->u.sel.cond = cond;
  e->u.sel.t = t;
  e->u.sel.f = el;
  return e;
}

ir_expr_t *ir_call(ir_func_t *f, ir_math_fn_t fn, ir_expr_t *const *args, int n) {
  ir_expr_t *e = expr_new(f, IR_E_CALL, args[0]->dtype);
  e->u.call.fn = fn;
  e->u.call.n = n > 2 ? 2 : n;
  for (int i = 0; i < e->u.call.n; i++) e->u.call.args[i] = args[i];
  return e;
}

/* ---- statements ------------------------------------------------------- */

static ir_stmt_t *stmt_new(ir_func_t *f, ir_stmt_kind_t k) {
  ir_stmt_t *s = TN_NEW(f->arena, ir_stmt_t);
  s->kind = k;
  return s;
}

ir_stmt_t *ir_seq(ir_func_t *f, ir_stmt_t *const *items, int n) {
  ir_stmt_t *s = stmt_new(f, IR_S_SEQ);
  s->u.seq.n = n;
  s->u.seq.items = tn_arena_memdup(f->arena, items, sizeof(ir_stmt_t *) * (size_t)n);
  return s;
}

ir_stmt_t *ir_loop_new(ir_func_t *f, ir_var_t *var, int64_t extent, ir_stmt_t *body) {
  ir_stmt_t *s = stmt_new(f, IR_S_LOOP);
  s->u.loop.uid = f->next_uid++;
  s->u.loop.var = var;
  s->u.loop.extent = extent;
  s->u.loop.kind = IR_LOOP_SERIAL;
  s->u.loop.body = body;
  return s;
}

ir_stmt_t *ir_block_new(ir_func_t *f, const char *name) {
  ir_stmt_t *s = stmt_new(f, IR_S_BLOCK);
  s->u.block.uid = f->next_uid++;
  s->u.block.name = tn_arena_strdup(f->arena, name);
  return s;
}

ir_stmt_t *ir_store(ir_func_t *f, ir_buffer_t *b, ir_expr_t *const *idx, int n, ir_expr_t *value) {
  ir_stmt_t *s = stmt_new(f, IR_S_STORE);
  s->u.store.buf = b;
  s->u.store.n = n;
  s->u.store.idx = tn_arena_memdup(f->arena, idx, sizeof(ir_expr_t *) * (size_t)n);
  s->u.store.value = value;
  return s;
}

/* ---- annotations ------------------------------------------------------ */

static ir_annot_t *annot_slot(ir_func_t *f, ir_annot_t **annots, int *n, const char *key) {
  for (int i = 0; i < *n; i++)
    if (strcmp((*annots)[i].key, key) == 0) return &(*annots)[i];
  ir_annot_t *na = TN_NEWN(f->arena, ir_annot_t, *n + 1);
  if (*n) memcpy(na, *annots, sizeof(ir_annot_t) * (size_t)*n);
  *annots = na;
  ir_annot_t *slot = &na[(*n)++];
  slot->key = tn_arena_strdup(f->arena, key);
  return slot;
}

void ir_annot_set_int(ir_func_t *f, ir_annot_t **annots, int *n, const char *key, int64_t v) {
  ir_annot_t *a = annot_slot(f, annots, n, key);
  a->is_str = false;
  a->ival = v;
  a->sval = NULL;
}

void ir_annot_set_str(ir_func_t *f, ir_annot_t **annots, int *n, const char *key, const char *v) {
  ir_annot_t *a = annot_slot(f, annots, n, key);
  a->is_str = true;
  a->ival = 0;
  a->sval = tn_arena_strdup(f->arena, v);
}

const ir_annot_t *ir_annot_get(const ir_annot_t *annots, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(annots[i].key, key) == 0) return &annots[i];
  return NULL;
}

bool ir_annot_remove(ir_annot_t *annots, int *n, const char *key) {
  for (int i = 0; i < *n; i++)
    if (strcmp(annots[i].key, key) == 0) {
      memmove(&annots[i], &annots[i + 1], sizeof(ir_annot_t) * (size_t)(*n - i - 1));
      (*n)--;
      return true;
    }
  return false;
}

/* ---- equality, substitution ------------------------------------------- */

bool ir_expr_equal(const ir_expr_t *a, const ir_expr_t *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  switch (a->kind) {
  case IR_E_INT: return a->u.ival == b->u.ival;
  case IR_E_FLOAT: return a->u.fval == b->u.fval || (isnan(a->u.fval) && isnan(b->u.fval));
  case IR_E_VAR: return a->u.var == b->u.var;
  case IR_E_LOAD:
    if (a->u.load.buf != b->u.load.buf || a->u.load.n != b->u.load.n) return false;
    for (int i = 0; i < a->u.load.n; i++)
      if (!ir_expr_equal(a->u.load.idx[i], b->u.load.idx[i])) return false;
    return true;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: return ir_expr_equal(a->u.un, b->u.un);
  case IR_E_SELECT:
    return ir_expr_equal(a->u.sel.cond, b->u.sel.cond) && ir_expr_equal(a->u.sel.t, b->u.sel.t) &&
           ir_expr_equal(a->u.sel.f, b->u.sel.f);
  case IR_E_CALL:
    if (a->u.call.fn != b->u.call.fn || a->u.call.n != b->u.call.n) return false;
    for (int i = 0; i < a->u.call.n; i++)
      if (!ir_expr_equal(a->u.call.args[i], b->u.call.args[i])) return false;
    return true;
  default:
    return ir_expr_equal(a->u.bin.a, b->u.bin.a) && ir_expr_equal(a->u.bin.b, b->u.bin.b);
  }
}

_Static_assert(IR_EXPR_MAX_CHILDREN >= 3, "a select has three children");

/* The body of ir_expr_children, inlined into the hot walkers of this file. */
static inline int expr_children(const ir_expr_t *e, const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN]) {
  int n;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: case IR_E_VAR: return 0;
  case IR_E_LOAD:
    assert(e->u.load.n >= 0 && e->u.load.n <= IR_MAX_DIMS); /* the rank of a buffer */
    n = TN_MIN(e->u.load.n, IR_MAX_DIMS);
    for (int i = 0; i < n; i++) kids[i] = e->u.load.idx[i];
    return n;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: kids[0] = e->u.un; return 1;
  case IR_E_SELECT:
    kids[0] = e->u.sel.cond;
    kids[1] = e->u.sel.t;
    kids[2] = e->u.sel.f;
    return 3;
  case IR_E_CALL:
    assert(e->u.call.n >= 0 && e->u.call.n <= 2); /* ir_call keeps at most two */
    n = TN_MIN(e->u.call.n, 2);
    for (int i = 0; i < n; i++) kids[i] = e->u.call.args[i];
    return n;
  default:
    if (!ir_expr_is_binary(e->kind)) return 0;
    kids[0] = e->u.bin.a;
    kids[1] = e->u.bin.b;
    return 2;
  }
}

int ir_expr_children(const ir_expr_t *e, const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN]) {
  return expr_children(e, kids);
}

bool ir_expr_uses_var(const ir_expr_t *e, const ir_var_t *v) {
  /* hot (sampler, schedule checks): leaves answer without the visitor, and
   * the last child is walked in the loop rather than by recursion */
  while (e) {
    if (e->kind == IR_E_VAR) return e->u.var == v;
    if (e->kind == IR_E_INT || e->kind == IR_E_FLOAT) return false;
    const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
    int n = expr_children(e, kids);
    if (n == 0) return false;
    for (int i = 0; i < n - 1; i++)
      if (ir_expr_uses_var(kids[i], v)) return true;
    e = kids[n - 1];
  }
  return false;
}

ir_expr_t *ir_expr_subst(ir_func_t *f, ir_expr_t *e, ir_var_t *const *from, ir_expr_t *const *to,
                         int n) {
  if (!e) return NULL;
  ir_expr_t *r;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: return e;
  case IR_E_VAR:
    for (int i = 0; i < n; i++)
      if (from[i] == e->u.var) return to[i];
    return e;
  case IR_E_LOAD: {
    ir_expr_t *idx[IR_MAX_DIMS];
    bool same = true;
    for (int i = 0; i < e->u.load.n && i < IR_MAX_DIMS; i++) {
      idx[i] = ir_expr_subst(f, e->u.load.idx[i], from, to, n);
      same &= idx[i] == e->u.load.idx[i];
    }
    return same ? e : ir_load(f, e->u.load.buf, idx, e->u.load.n);
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: {
    ir_expr_t *a = ir_expr_subst(f, e->u.un, from, to, n);
    if (a == e->u.un) return e;
    r = TN_NEW(f->arena, ir_expr_t);
    *r = *e;
    r->u.un = a;
    return r;
  }
  case IR_E_SELECT: {
    ir_expr_t *c = ir_expr_subst(f, e->u.sel.cond, from, to, n);
    ir_expr_t *t = ir_expr_subst(f, e->u.sel.t, from, to, n);
    ir_expr_t *el = ir_expr_subst(f, e->u.sel.f, from, to, n);
    if (c == e->u.sel.cond && t == e->u.sel.t && el == e->u.sel.f) return e;
    return ir_select(f, c, t, el);
  }
  case IR_E_CALL: {
    ir_expr_t *args[2] = {NULL, NULL};
    bool same = true;
    for (int i = 0; i < e->u.call.n; i++) {
      args[i] = ir_expr_subst(f, e->u.call.args[i], from, to, n);
      same &= args[i] == e->u.call.args[i];
    }
    if (same) return e;
    r = ir_call(f, e->u.call.fn, args, e->u.call.n);
    r->dtype = e->dtype;
    return r;
  }
  default: {
    ir_expr_t *a = ir_expr_subst(f, e->u.bin.a, from, to, n);
    ir_expr_t *b = ir_expr_subst(f, e->u.bin.b, from, to, n);
    if (a == e->u.bin.a && b == e->u.bin.b) return e;
    r = TN_NEW(f->arena, ir_expr_t);
    *r = *e;
    r->u.bin.a = a;
    r->u.bin.b = b;
    return r;
  }
  }
}

/* ---- deep copy -------------------------------------------------------- */

/* Maps old vars/buffers to new ones by id while copying. */
typedef struct copy_ctx {
  ir_func_t *dst;
  ir_var_t **vars;   /* indexed by var id */
  ir_buffer_t **bufs; /* indexed by buffer id */
  int nvars, nbufs;
} copy_ctx_t;

static ir_var_t *copy_var(copy_ctx_t *c, const ir_var_t *v) {
  if (v->id < 0 || v->id >= c->nvars) return (ir_var_t *)v; /* foreign: keep */
  if (!c->vars[v->id]) {
    ir_var_t *nv = TN_NEW(c->dst->arena, ir_var_t);
    *nv = *v;
    nv->name = tn_arena_strdup(c->dst->arena, v->name);
    c->vars[v->id] = nv;
  }
  return c->vars[v->id];
}

static ir_buffer_t *copy_buf(copy_ctx_t *c, const ir_buffer_t *b) {
  if (b->id < 0 || b->id >= c->nbufs) return (ir_buffer_t *)b;
  if (!c->bufs[b->id]) {
    tn_arena_t *a = c->dst->arena;
    ir_buffer_t *nb = TN_NEW(a, ir_buffer_t);
    *nb = *b;
    nb->name = tn_arena_strdup(a, b->name);
    nb->shape = tn_arena_memdup(a, b->shape, sizeof(int64_t) * (size_t)b->ndim);
    c->bufs[b->id] = nb;
  }
  return c->bufs[b->id];
}

static ir_expr_t *copy_expr(copy_ctx_t *c, const ir_expr_t *e) {
  if (!e) return NULL;
  ir_expr_t *r = TN_NEW(c->dst->arena, ir_expr_t);
  *r = *e;
  switch (e->kind) {
  case IR_E_INT: case IR_E_FLOAT: break;
  case IR_E_VAR: r->u.var = copy_var(c, e->u.var); break;
  case IR_E_LOAD:
    r->u.load.buf = copy_buf(c, e->u.load.buf);
    r->u.load.idx = TN_NEWN(c->dst->arena, ir_expr_t *, e->u.load.n);
    for (int i = 0; i < e->u.load.n; i++) r->u.load.idx[i] = copy_expr(c, e->u.load.idx[i]);
    break;
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST: r->u.un = copy_expr(c, e->u.un); break;
  case IR_E_SELECT:
    r->u.sel.cond = copy_expr(c, e->u.sel.cond);
    r->u.sel.t = copy_expr(c, e->u.sel.t);
    r->u.sel.f = copy_expr(c, e->u.sel.f);
    break;
  case IR_E_CALL:
    for (int i = 0; i < e->u.call.n; i++) r->u.call.args[i] = copy_expr(c, e->u.call.args[i]);
    break;
  default:
    r->u.bin.a = copy_expr(c, e->u.bin.a);
    r->u.bin.b = copy_expr(c, e->u.bin.b);
    break;
  }
  return r;
}

static ir_annot_t *copy_annots(copy_ctx_t *c, const ir_annot_t *src, int n) {
  if (!n) return NULL;
  ir_annot_t *a = TN_NEWN(c->dst->arena, ir_annot_t, n);
  for (int i = 0; i < n; i++) {
    a[i] = src[i];
    a[i].key = tn_arena_strdup(c->dst->arena, src[i].key);
    if (src[i].sval) a[i].sval = tn_arena_strdup(c->dst->arena, src[i].sval);
  }
  return a;
}

static ir_region_t *copy_regions(copy_ctx_t *c, const ir_region_t *src, int n) {
  if (!n) return NULL;
  ir_region_t *r = TN_NEWN(c->dst->arena, ir_region_t, n);
  for (int i = 0; i < n; i++) {
    r[i].buf = copy_buf(c, src[i].buf);
    r[i].dims = TN_NEWN(c->dst->arena, ir_range_t, src[i].buf->ndim);
    for (int d = 0; d < src[i].buf->ndim; d++) {
      r[i].dims[d].min = copy_expr(c, src[i].dims[d].min);
      r[i].dims[d].extent = copy_expr(c, src[i].dims[d].extent);
    }
  }
  return r;
}

static ir_stmt_t *copy_stmt(copy_ctx_t *c, const ir_stmt_t *s) {
  if (!s) return NULL;
  tn_arena_t *a = c->dst->arena;
  ir_stmt_t *r = TN_NEW(a, ir_stmt_t);
  *r = *s;
  switch (s->kind) {
  case IR_S_SEQ:
    r->u.seq.items = TN_NEWN(a, ir_stmt_t *, s->u.seq.n);
    for (int i = 0; i < s->u.seq.n; i++) r->u.seq.items[i] = copy_stmt(c, s->u.seq.items[i]);
    break;
  case IR_S_LOOP: {
    ir_loop_t *l = &r->u.loop;
    l->var = copy_var(c, s->u.loop.var);
    l->annots = copy_annots(c, s->u.loop.annots, s->u.loop.nannots);
    l->body = copy_stmt(c, s->u.loop.body);
    break;
  }
  case IR_S_BLOCK: {
    const ir_block_t *ob = &s->u.block;
    ir_block_t *b = &r->u.block;
    b->name = tn_arena_strdup(a, ob->name);
    b->iters = TN_NEWN(a, ir_iter_t, ob->niters);
    for (int i = 0; i < ob->niters; i++) {
      b->iters[i] = ob->iters[i];
      b->iters[i].var = copy_var(c, ob->iters[i].var);
      b->iters[i].binding = copy_expr(c, ob->iters[i].binding);
    }
    b->predicate = copy_expr(c, ob->predicate);
    b->reads = copy_regions(c, ob->reads, ob->nreads);
    b->writes = copy_regions(c, ob->writes, ob->nwrites);
    b->allocs = TN_NEWN(a, ir_buffer_t *, ob->nallocs);
    for (int i = 0; i < ob->nallocs; i++) b->allocs[i] = copy_buf(c, ob->allocs[i]);
    b->annots = copy_annots(c, ob->annots, ob->nannots);
    b->init = copy_stmt(c, ob->init);
    b->body = copy_stmt(c, ob->body);
    break;
  }
  case IR_S_STORE:
    r->u.store.buf = copy_buf(c, s->u.store.buf);
    r->u.store.idx = TN_NEWN(a, ir_expr_t *, s->u.store.n);
    for (int i = 0; i < s->u.store.n; i++) r->u.store.idx[i] = copy_expr(c, s->u.store.idx[i]);
    r->u.store.value = copy_expr(c, s->u.store.value);
    break;
  }
  return r;
}

ir_func_t *ir_func_copy(const ir_func_t *f) {
  tn_arena_t *a = tn_arena_new();
  ir_func_t *d = TN_NEW(a, ir_func_t);
  *d = *f;
  d->arena = a;
  d->name = tn_arena_strdup(a, f->name);
  copy_ctx_t c = {.dst = d, .nvars = f->next_var_id, .nbufs = f->next_buf_id};
  c.vars = tn_xcalloc((size_t)c.nvars + 1, sizeof(ir_var_t *));
  c.bufs = tn_xcalloc((size_t)c.nbufs + 1, sizeof(ir_buffer_t *));
  d->params = TN_NEWN(a, ir_buffer_t *, f->nparams);
  for (int i = 0; i < f->nparams; i++) d->params[i] = copy_buf(&c, f->params[i]);
  d->root = copy_stmt(&c, f->root);
  free(c.vars);
  free(c.bufs);
  return d;
}

/* ---- tree queries ----------------------------------------------------- */

ir_block_t *ir_func_root(const ir_func_t *f) { return &f->root->u.block; }

void ir_stmt_walk(ir_stmt_t *s, ir_visit_fn fn, void *ctx) {
  if (!s || !fn(s, ctx)) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) ir_stmt_walk(s->u.seq.items[i], fn, ctx);
    break;
  case IR_S_LOOP: ir_stmt_walk(s->u.loop.body, fn, ctx); break;
  case IR_S_BLOCK:
    ir_stmt_walk(s->u.block.init, fn, ctx);
    ir_stmt_walk(s->u.block.body, fn, ctx);
    break;
  case IR_S_STORE: break;
  }
}

typedef struct find_ctx {
  const char *name;
  int uid;
  ir_stmt_t *found;
} find_ctx_t;

static bool find_visit(ir_stmt_t *s, void *p) {
  find_ctx_t *c = p;
  if (c->found) return false;
  if (s->kind == IR_S_BLOCK &&
      (c->name ? strcmp(s->u.block.name, c->name) == 0 : s->u.block.uid == c->uid))
    c->found = s;
  else if (!c->name && s->kind == IR_S_LOOP && s->u.loop.uid == c->uid)
    c->found = s;
  return !c->found;
}

ir_stmt_t *ir_func_find_block(const ir_func_t *f, const char *name) {
  find_ctx_t c = {.name = name};
  ir_stmt_walk(f->root, find_visit, &c);
  return c.found;
}

ir_stmt_t *ir_func_find_uid(const ir_func_t *f, int uid) {
  find_ctx_t c = {.uid = uid};
  ir_stmt_walk(f->root, find_visit, &c);
  return c.found;
}
