/* eval.c — the reference evaluator's driver: a double precision
 * interpreter for any well-formed IR.  It binds parameters, allocates
 * temporaries, splits independent outermost loops over threads and runs the
 * rest through the scalar path (eval_scalar.c: one iteration at a time) and
 * the fast path (eval_vector.c: lane-wise, bit-identical to the scalar path).
 * The parameter data are made in eval_data.c, error metrics and op counts in
 * eval_metrics.c; eval_internal.h holds what these files share. */
#include "eval_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ======================================================================
 * Independent outermost loops on several threads
 * ====================================================================== */

/* Below this many block instances a nest runs on one thread. */
#define EV_PAR_MIN_WORK (1 << 22)
#define EV_MAX_THREADS 32

/* Does e load an element of st's buffer other than the one st stores? */
static bool reads_other_element(const ir_expr_t *e, const ir_stmt_t *st) {
  if (!e) return false;
  if (e->kind == IR_E_LOAD && e->u.load.buf == st->u.store.buf && !is_self_load(e, st)) return true;
  const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN];
  int n = ir_expr_children(e, kids);
  for (int i = 0; i < n; i++)
    if (reads_other_element(kids[i], st)) return true;
  return false;
}

/* An outermost loop whose iterations touch disjoint data: its body is a
 * perfect nest around one block, the loop variable is the whole binding of
 * one spatial iterator, that iterator is the whole index of some dimension
 * of the block's one store, and the stored buffer is read only at the
 * stored element (a reduction's update).  Returns the nest's instance count,
 * 0 when the loop does not qualify. */
static int64_t independent_work(const ir_stmt_t *s) {
  const ir_loop_t *l = &s->u.loop;
  int64_t work = l->extent;
  const ir_stmt_t *b = l->body;
  while (b && b->kind == IR_S_LOOP) {
    work = work > INT64_MAX / b->u.loop.extent ? INT64_MAX : work * b->u.loop.extent;
    b = b->u.loop.body;
  }
  if (!b || b->kind != IR_S_BLOCK) return 0;
  const ir_block_t *blk = &b->u.block;
  const ir_stmt_t *st = blk->body;
  if (!st || st->kind != IR_S_STORE || (blk->init && blk->init->kind != IR_S_STORE)) return 0;
  const ir_var_t *it = NULL;
  for (int i = 0; i < blk->niters; i++) {
    const ir_expr_t *e = blk->iters[i].binding;
    if (!e || !ir_expr_uses_var(e, l->var)) continue;
    if (it || blk->iters[i].kind != IR_ITER_SPATIAL || e->kind != IR_E_VAR || e->u.var != l->var) return 0;
    it = blk->iters[i].var;
  }
  if (!it) return 0;
  const ir_stmt_t *stores[2] = {st, blk->init};
  for (int k = 0; k < 2; k++) {
    const ir_stmt_t *x = stores[k];
    if (!x) continue;
    if (x->u.store.buf != st->u.store.buf) return 0;
    bool keyed = false;
    for (int d = 0; d < x->u.store.n; d++)
      keyed |= x->u.store.idx[d]->kind == IR_E_VAR && x->u.store.idx[d]->u.var == it;
    if (!keyed || !same_indices(x->u.store.idx, st->u.store.idx, st->u.store.n)) return 0;
  }
  /* every load of the stored buffer is of the stored element */
  if (reads_other_element(st->u.store.value, st) || (blk->predicate && reads_other_element(blk->predicate, st)) ||
      (blk->init && reads_other_element(blk->init->u.store.value, st)))
    return 0;
  for (int i = 0; i < blk->niters; i++)
    if (blk->iters[i].binding && reads_other_element(blk->iters[i].binding, st)) return 0;
  return work;
}

typedef struct par_job {
  ev_t ev;
  const ir_stmt_t *loop;
  int64_t lo, hi;
  tn_err_t err;
  int rc;
} par_job_t;

static void *par_main(void *arg) {
  par_job_t *j = arg;
  j->rc = ev_loop_span(&j->ev, j->loop, j->lo, j->hi);
  return NULL;
}

/* Splits the loop's range over threads, each with its own variables and
 * fast-path programs; the first error in loop order is the one reported. */
static int ev_loop_parallel(ev_t *ev, const ir_stmt_t *s, int nthreads) {
  assert(nthreads >= 2 && nthreads <= EV_MAX_THREADS && nthreads <= s->u.loop.extent);
  int64_t n = s->u.loop.extent;
  par_job_t *jobs = tn_xcalloc((size_t)nthreads, sizeof *jobs);
  pthread_t *th = tn_xcalloc((size_t)nthreads, sizeof *th);
  bool *started = tn_xcalloc((size_t)nthreads, sizeof *started);
  for (int t = 0; t < nthreads; t++) {
    par_job_t *j = &jobs[t];
    j->ev = *ev;
    j->ev.err = &j->err;
    j->ev.st = (ir_eval_stats_t){0};
    j->ev.depth = ev->depth + 1;
    j->ev.vars = tn_xmalloc(sizeof(double) * (size_t)(ev->nvars + 1));
    memcpy(j->ev.vars, ev->vars, sizeof(double) * (size_t)(ev->nvars + 1));
    j->ev.progs = tn_xcalloc((size_t)ev->nprogs + 1, sizeof(vprog_t *));
    j->loop = s;
    j->lo = n * t / nthreads;
    j->hi = n * (t + 1) / nthreads;
    started[t] = t > 0 && pthread_create(&th[t], NULL, par_main, j) == 0;
  }
  par_main(&jobs[0]);
  for (int t = 1; t < nthreads; t++) {
    if (started[t]) pthread_join(th[t], NULL);
    else par_main(&jobs[t]); /* no thread: run it here */
  }
  int rc = TN_OK;
  ev->st.parallel_loops++;
  for (int t = 0; t < nthreads; t++) {
    par_job_t *j = &jobs[t];
    if (!rc && j->rc) {
      rc = j->rc;
      if (ev->err) *ev->err = j->err;
    }
    ev->st.fast_iters += j->ev.st.fast_iters;
    ev->st.scalar_iters += j->ev.st.scalar_iters;
    ev->st.fallback_chunks += j->ev.st.fallback_chunks;
    for (int i = 0; i < ev->nprogs; i++) ev_prog_free(j->ev.progs[i]);
    free(j->ev.progs);
    free(j->ev.vars);
  }
  free(jobs);
  free(th);
  free(started);
  return rc;
}

int ev_loop(ev_t *ev, const ir_stmt_t *s) {
  int64_t work;
  if (ev->depth == 0 && ev->nthreads > 1 && s->u.loop.extent > 1 && (work = independent_work(s)) >= EV_PAR_MIN_WORK)
    return ev_loop_parallel(ev, s, (int)TN_MIN(ev->nthreads, s->u.loop.extent));
  ev->depth++;
  int rc = ev_loop_span(ev, s, 0, s->u.loop.extent);
  ev->depth--;
  return rc;
}

/* ======================================================================
 * Set-up: parameters, temporaries
 * ====================================================================== */

static int bind_buf(ev_t *ev, const ir_buffer_t *b, const char *where) {
  if (b->id < 0 || b->id >= ev->nbufs)
    return tn_err_set(ev->err, TN_EINVAL,
                      "%s: buffer \"%s\" has id %d, outside the function's %d buffers", where,
                      b->name, b->id, ev->nbufs);
  if (b->ndim < 0 || b->ndim > IR_MAX_DIMS)
    return tn_err_set(ev->err, TN_EINVAL, "%s: buffer \"%s\" has %d dimensions (at most %d)", where,
                      b->name, b->ndim, IR_MAX_DIMS);
  ev_buf_t *eb = &ev->bufs[b->id];
  eb->b = b;
  uint64_t s = 1; /* unsigned: absurd shapes wrap instead of overflowing (refused later) */
  for (int d = b->ndim - 1; d >= 0; d--) {
    eb->rstride[d] = (int64_t)s;
    s *= (uint64_t)b->shape[d];
  }
  return TN_OK;
}

static int bind_params(ev_t *ev, ir_data_t *d) {
  const ir_func_t *f = ev->f;
  if (!d || d->n != f->nparams)
    return tn_err_set(ev->err, TN_EINVAL, "data has %d arrays, function \"%s\" has %d parameters",
                      d ? d->n : 0, f->name, f->nparams);
  for (int i = 0; i < f->nparams; i++) {
    const ir_buffer_t *b = f->params[i];
    int64_t n = ev_numel_checked(b);
    int rc = bind_buf(ev, b, "parameters");
    if (rc) return rc;
    if (!d->vals[i] || d->sizes[i] != n)
      return tn_err_set(ev->err, TN_EINVAL,
                        "data for parameter \"%s\" has %lld elements, expected %lld", b->name,
                        (long long)d->sizes[i], (long long)n);
    ev->bufs[b->id].data = d->vals[i];
  }
  return TN_OK;
}

typedef struct alloc_list {
  const ir_block_t **blk;
  const ir_buffer_t **buf;
  int n, cap;
} alloc_list_t;

static bool collect_allocs(ir_stmt_t *s, void *ctx) {
  alloc_list_t *al = ctx;
  if (s->kind != IR_S_BLOCK) return true;
  for (int i = 0; i < s->u.block.nallocs; i++) {
    if (al->n == al->cap) {
      al->cap = al->cap ? 2 * al->cap : 8;
      al->blk = tn_xrealloc(al->blk, sizeof(*al->blk) * (size_t)al->cap);
      al->buf = tn_xrealloc(al->buf, sizeof(*al->buf) * (size_t)al->cap);
    }
    al->blk[al->n] = &s->u.block;
    al->buf[al->n++] = s->u.block.allocs[i];
  }
  return true;
}

static int alloc_temp(ev_t *ev, const ir_block_t *blk, const ir_buffer_t *b) {
  char where[300];
  snprintf(where, sizeof where, "block \"%s\"", blk->name);
  int rc = bind_buf(ev, b, where);
  if (rc || ev->bufs[b->id].data) return rc; /* allocated once per buffer */
  int64_t n = ev_numel_checked(b);
  assert(ev->temp_bytes <= IR_EVAL_MAX_TEMP_BYTES); /* the check below keeps it there */
  size_t left = IR_EVAL_MAX_TEMP_BYTES - ev->temp_bytes;
  if (n < 0 || (uint64_t)n > left / sizeof(double)) {
    char shape[256];
    ev_shape_text(b, shape, sizeof shape);
    return tn_err_set(ev->err, TN_ENOMEM,
                      "block \"%s\": temporary buffer \"%s\" (%s[%s]) needs %.1f MiB as doubles; "
                      "the evaluator allows %.1f MiB of temporaries (%.1f MiB already used)",
                      blk->name, b->name, ir_dtype_name(b->dtype), shape,
                      n < 0 ? INFINITY : (double)n * 8 / 1048576.0,
                      (double)IR_EVAL_MAX_TEMP_BYTES / 1048576.0,
                      (double)ev->temp_bytes / 1048576.0);
  }
  double *v = malloc((size_t)n * sizeof(double));
  if (!v)
    return tn_err_set(ev->err, TN_ENOMEM,
                      "block \"%s\": cannot allocate %.1f MiB for buffer \"%s\"", blk->name,
                      (double)n * 8 / 1048576.0, b->name);
  for (int64_t k = 0; k < n; k++) v[k] = NAN; /* unwritten elements read as NaN */
  ev->bufs[b->id].data = v;
  ev->bufs[b->id].owned = true;
  ev->temp_bytes += (size_t)n * sizeof(double);
  return TN_OK;
}

static int alloc_temps(ev_t *ev) {
  alloc_list_t al = {0};
  ir_stmt_walk(ev->f->root, collect_allocs, &al);
  int rc = TN_OK;
  for (int i = 0; i < al.n && !rc; i++) rc = alloc_temp(ev, al.blk[i], al.buf[i]);
  free(al.blk);
  free(al.buf);
  return rc;
}

static int ev_setup(ev_t *ev, const ir_func_t *f, ir_data_t *d) {
  if (!f->root || f->root->kind != IR_S_BLOCK)
    return tn_err_set(ev->err, TN_EINVAL, "function \"%s\" has no root block", f->name);
  ev->nvars = TN_MAX(f->next_var_id, 0);
  ev->vars = tn_xmalloc(sizeof(double) * (size_t)(ev->nvars + 1));
  for (int i = 0; i < ev->nvars; i++) ev->vars[i] = NAN; /* unbound variables show up */
  ev->nbufs = TN_MAX(f->next_buf_id, 0);
  ev->bufs = tn_xcalloc((size_t)ev->nbufs + 1, sizeof(ev_buf_t));
  ev->nprogs = TN_MAX(f->next_uid, 0);
  ev->progs = tn_xcalloc((size_t)ev->nprogs + 1, sizeof(vprog_t *));
  int rc = bind_params(ev, d);
  return rc ? rc : alloc_temps(ev);
}

static void ev_teardown(ev_t *ev) {
  for (int i = 0; i < ev->nbufs; i++)
    if (ev->bufs[i].owned) free(ev->bufs[i].data);
  for (int i = 0; i < ev->nprogs; i++) ev_prog_free(ev->progs[i]);
  free(ev->bufs);
  free(ev->vars);
  free(ev->progs);
}

/* Threads for independent outermost loops: $TUNED_EVAL_THREADS, else the
 * online cores (at most EV_MAX_THREADS). */
static int eval_threads(void) {
  const char *env = getenv("TUNED_EVAL_THREADS");
  long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  return (int)TN_MAX(1, TN_MIN(n, EV_MAX_THREADS));
}

bool ev_poll_stop(ev_t *ev) {
  ev->poll_left = EV_POLL_EVERY;
  if (!ev->stop(ev->stop_ctx)) return false;
  tn_err_set(ev->err, TN_ESTOPPED, "stopped on request in block \"%s\" of \"%s\"", ev->block, ev->f->name);
  return true;
}

static int eval_with(const ir_func_t *f, ir_data_t *d, bool force_scalar, bool (*stop)(void *), void *stop_ctx,
                     ir_eval_stats_t *stats, tn_err_t *err) {
  ev_t ev = {.f = f, .block = "root", .force_scalar = force_scalar, .err = err, .nthreads = eval_threads(),
             .stop = stop, .stop_ctx = stop_ctx, .poll_left = 1};
  int rc = stop && stop(stop_ctx) ? tn_err_set(err, TN_ESTOPPED, "stopped on request before evaluating \"%s\"", f->name)
                                  : ev_setup(&ev, f, d);
  if (!rc) rc = ev_stmt(&ev, f->root);
  if (stats) *stats = ev.st;
  ev_teardown(&ev);
  return rc;
}

int ir_eval_opts(const ir_func_t *f, ir_data_t *d, bool force_scalar, ir_eval_stats_t *stats,
                 tn_err_t *err) {
  return eval_with(f, d, force_scalar, NULL, NULL, stats, err);
}

int ir_eval_stoppable(const ir_func_t *f, ir_data_t *d, bool (*stop)(void *ctx), void *ctx, tn_err_t *err) {
  return eval_with(f, d, false, stop, ctx, NULL, err);
}

int ir_eval(const ir_func_t *f, ir_data_t *d, tn_err_t *err) {
  return ir_eval_opts(f, d, false, NULL, err);
}
