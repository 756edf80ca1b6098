/* rules_bind.c — AutoBind (§3.5): on GPUs a block left unbound by the other
 * rules gets its leading spatial loops fused and split over blockIdx.x and
 * threadIdx.x.  The same binding, with a fixed thread count, is what the
 * rewrite-unbound-block postprocessor applies. */
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

#define MAX_THREADBLOCKS 256 /* AutoBind's max_threadblocks */

static const int64_t thread_extents[] = {32, 64, 128, 256, 512, 1024};

/* Where the block's loops stand: the first blockIdx / threadIdx loop, the
 * last leading data-parallel loop, and the first loop that cannot be fused
 * further (non-serial, or after a loop with several children). */
typedef struct bind_scan {
  int block_idx, thread_idx, spatial, multi;
  int64_t *extents; /* malloc'ed: scan_free */
  int n;
} bind_scan_t;

static void scan_loops(const ir_func_t *f, const ir_block_t *b, bind_scan_t *sc) {
  ir_loop_t **loops;
  sc->n = smp_block_loops(f, b, &loops);
  sc->extents = tn_xmalloc(sizeof sc->extents[0] * (size_t)(sc->n + 1));
  sc->block_idx = sc->thread_idx = sc->spatial = sc->multi = -1;
  for (int i = 0; i < sc->n; i++) {
    const ir_loop_t *l = loops[i];
    sc->extents[i] = l->extent;
    bool thread = l->kind == IR_LOOP_THREAD;
    ir_tag_class_t cls = thread ? ir_thread_tag_class(l->tag) : IR_TAG_CLASS_NONE;
    if (cls == IR_TAG_CLASS_BLOCK && sc->block_idx < 0) sc->block_idx = i;
    if (cls == IR_TAG_CLASS_THREAD && sc->thread_idx < 0) sc->thread_idx = i;
    if ((l->kind != IR_LOOP_SERIAL || l->nannots > 0) && sc->multi < 0) sc->multi = i;
    if (!smp_single_child(l) && sc->multi < 0) sc->multi = i + 1;
    if (smp_loop_iter_type(l) == SMP_DATA_PAR && sc->spatial == i - 1) sc->spatial = i;
  }
  if (sc->multi < 0) sc->multi = sc->n;
  free(loops);
}

static void scan_free(bind_scan_t *sc) { free(sc->extents); }

/* The thread extent: sampled among the candidates that fit, or fixed. */
static int thread_factor(sch_t *s, const tn_target_t *t, int64_t extent, bool sample, sch_arg_t *out, tn_err_t *err) {
  int64_t limit = TN_MIN(extent, (int64_t)t->max_threads_per_block), cands[TN_ARRAY_LEN(thread_extents)];
  double probs[TN_ARRAY_LEN(thread_extents)];
  int n = 0;
  for (size_t i = 0; i < TN_ARRAY_LEN(thread_extents) && sample; i++)
    if (thread_extents[i] <= limit) cands[n++] = thread_extents[i];
  if (n <= 1) {
    *out = sch_arg_int(n == 1 ? cands[0] : limit);
    return TN_OK;
  }
  for (int i = 0; i < n; i++) probs[i] = 1.0 / n;
  sch_rv_t v;
  SMP_TRY(sch_sample_categorical(s, cands, probs, n, &v, err));
  *out = sch_arg_rv(v);
  return TN_OK;
}

/* Splits the fused loop over blocks and threads and binds both parts. */
static int split_and_bind(sch_t *s, const tn_target_t *t, sch_rv_t fused, int64_t extent, bool sample,
                          tn_err_t *err) {
  sch_rv_t parts[3];
  int64_t maxt = t->max_threads_per_block;
  if (extent <= MAX_THREADBLOCKS * maxt) {
    sch_arg_t f[2] = {sch_arg_none(), sch_arg_none()};
    SMP_TRY(thread_factor(s, t, extent, sample, &f[1], err));
    SMP_TRY(sch_split(s, fused, f, 2, parts, err));
    SMP_TRY(sch_bind(s, parts[0], ir_thread_tag_name(IR_TAG_BLOCK_X), err));
    return sch_bind(s, parts[1], ir_thread_tag_name(IR_TAG_THREAD_X), err);
  }
  /* Too much work for one wave: a fixed grid that loops over the rest. */
  sch_arg_t f[3] = {sch_arg_none(), sch_arg_int(MAX_THREADBLOCKS), sch_arg_int(maxt)};
  SMP_TRY(sch_split(s, fused, f, 3, parts, err));
  sch_rv_t order[3] = {parts[1], parts[2], parts[0]};
  SMP_TRY(sch_reorder(s, order, 3, err));
  SMP_TRY(sch_bind(s, parts[1], ir_thread_tag_name(IR_TAG_BLOCK_X), err));
  return sch_bind(s, parts[2], ir_thread_tag_name(IR_TAG_THREAD_X), err);
}

static int bind_scanned(sch_t *s, const tn_target_t *t, const char *block, const bind_scan_t *scp, bool sample,
                        bool *done, tn_err_t *err) {
  bind_scan_t sc = *scp;
  if (sc.block_idx >= 0 && sc.thread_idx >= 0) return TN_OK;
  if (sc.block_idx >= 0)
    return tn_err_set(err, TN_EUNSUPPORTED, "block \"%s\" is bound to blockIdx but not to threadIdx", block);
  int last = TN_MIN(sc.spatial, sc.multi - 1);
  if (sc.thread_idx >= 0) last = TN_MIN(last, sc.thread_idx - 1);
  if (last < 0)
    return tn_err_set(err, TN_ESTATE, "block \"%s\" has no leading data-parallel serial loop to bind to blockIdx.x "
                      "(its outermost loop reduces, is bound, or the block has no loops)", block);
  int64_t extent = 1;
  for (int i = 0; i <= last; i++) extent *= sc.extents[i];
  sch_rv_t rv, loops[SCH_MAX_RVS_OUT], fused;
  int nl = 0;
  SMP_TRY(sch_get_block(s, block, &rv, err));
  SMP_TRY(sch_get_loops(s, rv, loops, &nl, err));
  SMP_TRY(sch_fuse(s, loops, last + 1, &fused, err));
  *done = true;
  if (sc.thread_idx >= 0) /* threads bound by a reduction rule */
    return sch_bind(s, fused, ir_thread_tag_name(IR_TAG_BLOCK_X), err);
  return split_and_bind(s, t, fused, extent, sample, err);
}

int smp_bind_block(sch_t *s, const tn_target_t *t, const char *block, bool sample, bool *done, tn_err_t *err) {
  *done = false;
  const ir_func_t *f = sch_func(s);
  const ir_block_t *b = smp_block(f, block);
  if (!b || b == &f->root->u.block || smp_is_tiled(b)) return TN_OK;
  bind_scan_t sc;
  scan_loops(f, b, &sc);
  int rc = bind_scanned(s, t, block, &sc, sample, done, err);
  scan_free(&sc);
  return rc;
}

int smp_bind_copy(sch_t *s, const tn_target_t *t, sch_rv_t copy, tn_err_t *err) {
  bool bound = false;
  const char *name = sch_rv_stmt(s, copy)->u.block.name;
  SMP_TRY(smp_bind_block(s, t, name, false, &bound, err));
  return bound ? TN_OK : tn_err_set(err, TN_EINVAL, "the copy block \"%s\" was not bound to threads", name);
}

int smp_rule_auto_bind(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out, tn_err_t *err) {
  bool done = false;
  if (strcmp(block, "root") != 0) {
    tn_err_t skipped = {0};
    int rc = smp_bind_block(st->s, c->t, block, true, &done, &skipped);
    if (rc < 0 && rc != TN_ESTATE) {
      if (err) *err = skipped;
      smp_state_free(st);
      return rc;
    }
  }
  if (done) smp_note(st, "auto-bind(%s)", block);
  smp_states_push(out, *st);
  return TN_OK;
}
