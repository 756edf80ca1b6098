/* eval_scalar.c — the evaluator's scalar path: a tree walker that runs the
 * statement tree one iteration at a time.  It is the reference the fast path
 * (eval_vector.c) must match bit for bit, and the path it falls back to; its
 * errors name the block, the buffer and the offending indices or values. */
#include "eval_internal.h"

#include <stdio.h>
#include <string.h>

int ev_bad_var(ev_t *ev, const ir_var_t *v) {
  return tn_err_set(ev->err, TN_EINVAL,
                    "block \"%s\": variable %s has id %d, outside the function's %d variables",
                    ev->block, v->name, v->id, ev->nvars);
}

/* The buffer's storage, or NULL with an error naming the access. */
static const ev_buf_t *buf_of(ev_t *ev, const ir_buffer_t *b, int n, const char *what) {
  if (b->id < 0 || b->id >= ev->nbufs || !ev->bufs[b->id].data) {
    tn_err_set(ev->err, TN_EINVAL,
               "block \"%s\": %s of buffer \"%s\", which is neither a parameter nor allocated "
               "by any block",
               ev->block, what, b->name);
    return NULL;
  }
  if (ev->bufs[b->id].b != b && strcmp(ev->bufs[b->id].b->name, b->name) != 0) {
    tn_err_set(ev->err, TN_EINVAL, "block \"%s\": buffers \"%s\" and \"%s\" share id %d",
               ev->block, b->name, ev->bufs[b->id].b->name, b->id);
    return NULL;
  }
  if (n != b->ndim) {
    tn_err_set(ev->err, TN_EINVAL,
               "block \"%s\": %s of \"%s\" has %d indices, the buffer has %d dimensions", ev->block,
               what, b->name, n, b->ndim);
    return NULL;
  }
  return &ev->bufs[b->id];
}

static int index_error(ev_t *ev, const char *what, const ir_buffer_t *b, const double *iv) {
  char idx[256], shape[256];
  size_t len = 0;
  idx[0] = 0;
  for (int d = 0; d < b->ndim && len < sizeof idx; d++)
    len += (size_t)snprintf(idx + len, sizeof idx - len, "%s%.17g", d ? ", " : "", iv[d]);
  ev_shape_text(b, shape, sizeof shape);
  return tn_err_set(ev->err, TN_ERANGE, "block \"%s\": %s %s[%s] is out of bounds (shape [%s])",
                    ev->block, what, b->name, idx, shape);
}

static int ev_expr(ev_t *ev, const ir_expr_t *e, double *out);

/* Evaluates indices, checks them and returns the element's address. */
static int ev_addr(ev_t *ev, const char *what, const ir_buffer_t *b, ir_expr_t *const *idx, int n,
                   double **out) {
  const ev_buf_t *eb = buf_of(ev, b, n, what);
  if (!eb) return ev->err ? ev->err->code : TN_EINVAL;
  assert(n <= IR_MAX_DIMS); /* buf_of: n is the rank of a bound buffer */
  double iv[IR_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    int rc = ev_expr(ev, idx[d], &iv[d]);
    if (rc) return rc;
  }
  int64_t off = 0;
  for (int d = 0; d < n; d++) {
    if (!in_range(iv[d], b->shape[d])) return index_error(ev, what, b, iv);
    off += (int64_t)iv[d] * eb->rstride[d];
  }
  *out = eb->data + off;
  return TN_OK;
}

static const char *const op_names[] = {
    [IR_E_DIV] = "div", [IR_E_FLOORDIV] = "floordiv", [IR_E_FLOORMOD] = "floormod"};

static int ev_binary(ev_t *ev, const ir_expr_t *e, double *out) {
  double a, b;
  int rc = ev_expr(ev, e->u.bin.a, &a);
  if (!rc) rc = ev_expr(ev, e->u.bin.b, &b);
  if (rc) return rc;
  if (apply_bin(e->kind, intlike(e->dtype), a, b, out)) return TN_OK;
  assert(can_fail(e->kind, true)); /* the only refusals, all named in op_names */
  return tn_err_set(ev->err, TN_EINVAL,
                    "block \"%s\": integer division by zero in %s(%.17g, %.17g)", ev->block,
                    op_names[e->kind], a, b);
}

static int ev_expr(ev_t *ev, const ir_expr_t *e, double *out) {
  double a, b = 0;
  int rc;
  switch (e->kind) {
  case IR_E_INT: *out = (double)e->u.ival; return TN_OK;
  case IR_E_FLOAT: *out = e->u.fval; return TN_OK;
  case IR_E_VAR: {
    double *slot = var_slot(ev, e->u.var);
    if (!slot) return ev_bad_var(ev, e->u.var);
    *out = *slot;
    return TN_OK;
  }
  case IR_E_LOAD: {
    double *p;
    if ((rc = ev_addr(ev, "load", e->u.load.buf, e->u.load.idx, e->u.load.n, &p))) return rc;
    *out = *p;
    return TN_OK;
  }
  case IR_E_NOT: case IR_E_NEG: case IR_E_CAST:
    if ((rc = ev_expr(ev, e->u.un, &a))) return rc;
    *out = apply_un(e->kind, e->dtype, a);
    return TN_OK;
  case IR_E_SELECT:
    if ((rc = ev_expr(ev, e->u.sel.cond, &a))) return rc;
    return ev_expr(ev, a != 0 ? e->u.sel.t : e->u.sel.f, out);
  case IR_E_CALL:
    if ((rc = ev_expr(ev, e->u.call.args[0], &a))) return rc;
    if (e->u.call.n > 1 && (rc = ev_expr(ev, e->u.call.args[1], &b))) return rc;
    *out = apply_call(e->u.call.fn, a, b);
    return TN_OK;
  default:
    if (ir_expr_is_binary(e->kind)) return ev_binary(ev, e, out);
    return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": unknown expression kind %d", ev->block,
                      (int)e->kind);
  }
}

static int ev_store(ev_t *ev, const ir_stmt_t *s) {
  double v, *p;
  int rc = ev_expr(ev, s->u.store.value, &v);
  if (!rc) rc = ev_addr(ev, "store", s->u.store.buf, s->u.store.idx, s->u.store.n, &p);
  if (rc) return rc;
  *p = v;
  return TN_OK;
}

/* One block instance: bind iterators, test the predicate, init, body. */
static int ev_block_instance(ev_t *ev, const ir_block_t *b) {
  bool at_init = true;
  for (int i = 0; i < b->niters; i++) {
    const ir_iter_t *it = &b->iters[i];
    double v, *slot = var_slot(ev, it->var);
    if (!slot) return ev_bad_var(ev, it->var);
    if (!it->binding)
      return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": iterator %s has no binding", b->name,
                        it->var->name);
    int rc = ev_expr(ev, it->binding, &v);
    if (rc) return rc;
    *slot = v;
    if (it->kind == IR_ITER_REDUCE && v != 0) at_init = false;
  }
  if (b->predicate) {
    double p;
    int rc = ev_expr(ev, b->predicate, &p);
    if (rc || p == 0) return rc;
  }
  if (b->body && b->body->kind == IR_S_STORE) ev->st.scalar_iters++;
  if (b->init && at_init) {
    int rc = ev_stmt(ev, b->init);
    if (rc) return rc;
  }
  return ev_stmt(ev, b->body);
}

static int ev_block(ev_t *ev, const ir_block_t *b) {
  const char *outer = ev->block;
  ev->block = b->name;
  int rc = ev_block_instance(ev, b);
  ev->block = outer;
  return rc;
}

int ev_loop_range(ev_t *ev, const ir_loop_t *l, double *slot, int64_t lo, int64_t hi) {
  for (int64_t x = lo; x < hi; x++) {
    if (ev_should_stop(ev)) return ev->err ? ev->err->code : TN_ESTOPPED;
    *slot = (double)x;
    int rc = ev_stmt(ev, l->body);
    if (rc) return rc;
  }
  return TN_OK;
}

int ev_stmt(ev_t *ev, const ir_stmt_t *s) {
  if (!s) return TN_OK;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) {
      int rc = ev_stmt(ev, s->u.seq.items[i]);
      if (rc) return rc;
    }
    return TN_OK;
  case IR_S_LOOP: return ev_loop(ev, s);
  case IR_S_BLOCK: return ev_block(ev, &s->u.block);
  case IR_S_STORE: return ev_store(ev, s);
  }
  return tn_err_set(ev->err, TN_EINVAL, "block \"%s\": unknown statement kind %d", ev->block,
                    (int)s->kind);
}
