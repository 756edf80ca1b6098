/* rules_tiling.c — the MultiLevelTiling rule (§3.4): split every loop of a
 * reduction block with data reuse into sampled tiles, reorder them level by
 * level, bind the outer levels to GPU threads, then stage the output through
 * a write cache and (GPU) the inputs through shared-memory read caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

#define MAX_LEVELS 8

typedef enum reuse { REUSE_NO, REUSE_MAY, REUSE_MUST } reuse_t;

typedef struct mlt_config {
  const char *structure; /* "S" and "R" per tile level */
  const ir_thread_tag_t *binds;
  int nbinds;
  int max_innermost;
  reuse_t read_req;
  int read_level;        /* 1-based: the caches go under the last loop of level read_level - 1 */
  const char *read_scope;
  reuse_t write_req;
  int write_levels[2];
  int nwrite_levels;
  const char *write_scope;
} mlt_config_t;

static const ir_thread_tag_t gpu_binds[] = {IR_TAG_BLOCK_X, IR_TAG_VTHREAD_X, IR_TAG_THREAD_X};

static const mlt_config_t gpu_config = {"SSSRRSRS", gpu_binds, 3, 64, REUSE_MUST, 4, "shared",
                                        REUSE_MUST, {3, 0}, 1, "local"};
static const mlt_config_t cpu_config = {"SSRSRS", NULL, 0, 64, REUSE_NO, 0, NULL, REUSE_MAY, {1, 2}, 2, "global"};

/* Widths a cooperative fetch may load at once (TVM's vector_load_lens). */
static const int64_t vector_lens[] = {1, 2, 3, 4, 8, 16};

/* The tile loops of one tiled block: loops[level][k], level by level. */
typedef struct tiles {
  sch_rv_t block;
  sch_rv_t loops[MAX_LEVELS][SCH_MAX_RVS_OUT];
  int n[MAX_LEVELS];
  int nlevels;
} tiles_t;

static sch_rv_t last_loop(const tiles_t *tl, int level) { return tl->loops[level][tl->n[level] - 1]; }

/* ---- step 1-2: tile, reorder, bind --------------------------------------- */

/* Splits loop `loop` into the levels listed in idx (sampled factors). */
static int split_into(sch_t *s, const mlt_config_t *cfg, sch_rv_t loop, const int *idx, int n, tiles_t *tl,
                      tn_err_t *err) {
  if (n == 1) {
    tl->loops[idx[0]][tl->n[idx[0]]++] = loop;
    return TN_OK;
  }
  sch_rv_t fac[MAX_LEVELS], pieces[MAX_LEVELS];
  sch_arg_t args[MAX_LEVELS];
  SMP_TRY(sch_sample_perfect_tile(s, loop, n, cfg->max_innermost, fac, err));
  for (int j = 0; j < n; j++) args[j] = sch_arg_rv(fac[j]);
  SMP_TRY(sch_split(s, loop, args, n, pieces, err));
  for (int j = 0; j < n; j++) tl->loops[idx[j]][tl->n[idx[j]]++] = pieces[j];
  return TN_OK;
}

/* Fuses and binds the first levels (GPU), and annotates the thread bounds. */
static int bind_levels(smp_ctx_t *c, sch_t *s, const mlt_config_t *cfg, tiles_t *tl, tn_err_t *err) {
  for (int i = 0; i < cfg->nbinds && i < tl->nlevels; i++) {
    if (tl->n[i] == 0) continue;
    sch_rv_t fused;
    SMP_TRY(sch_fuse(s, tl->loops[i], tl->n[i], &fused, err));
    SMP_TRY(sch_bind(s, fused, ir_thread_tag_name(cfg->binds[i]), err));
    tl->loops[i][0] = fused;
    tl->n[i] = 1;
  }
  if (!c->gpu) return TN_OK;
  /* TVM sets the low bound to the warp size when the block has more than two
   * warps of spatial work.  We keep 1: verify then only rejects what the
   * device cannot run, and small blocks (which small workloads mostly sample)
   * are left to the cost model instead of being dropped. */
  SMP_TRY(sch_annotate(s, tl->block, SMP_ANN_THREAD_LOW, sch_arg_int(1), err));
  return sch_annotate(s, tl->block, SMP_ANN_THREAD_HIGH, sch_arg_int(c->t->max_threads_per_block), err);
}

static int tile(smp_ctx_t *c, sch_t *s, const mlt_config_t *cfg, const char *block, tiles_t *tl, tn_err_t *err) {
  memset(tl, 0, sizeof *tl);
  int sidx[MAX_LEVELS], ridx[MAX_LEVELS], ns = 0, nr = 0;
  tl->nlevels = (int)strlen(cfg->structure);
  for (int i = 0; i < tl->nlevels; i++) {
    if (cfg->structure[i] == 'S') sidx[ns++] = i;
    else ridx[nr++] = i;
  }
  SMP_TRY(sch_get_block(s, block, &tl->block, err));
  /* Iterator kinds first: a primitive may replace the nodes we look at. */
  const ir_block_t *b = &sch_rv_stmt(s, tl->block)->u.block;
  bool spatial[SCH_MAX_RVS_OUT];
  int niters = TN_MIN(b->niters, SCH_MAX_RVS_OUT);
  for (int i = 0; i < niters; i++) spatial[i] = b->iters[i].kind == IR_ITER_SPATIAL;
  SMP_TRY(sch_annotate(s, tl->block, SMP_ANN_TILING, sch_arg_str(cfg->structure), err));
  sch_rv_t loops[SCH_MAX_RVS_OUT];
  int nl = 0;
  SMP_TRY(sch_get_loops(s, tl->block, loops, &nl, err));
  if (nl != niters) return tn_err_set(err, TN_EINVAL, "block \"%s\" has %d loops for %d iterators", block, nl, niters);
  for (int i = 0; i < nl; i++)
    SMP_TRY(split_into(s, cfg, loops[i], spatial[i] ? sidx : ridx, spatial[i] ? ns : nr, tl, err));
  sch_rv_t order[SCH_MAX_RVS_OUT];
  int n = 0;
  for (int l = 0; l < tl->nlevels; l++) {
    if (n + tl->n[l] > SCH_MAX_RVS_OUT)
      return tn_err_set(err, TN_ERANGE, "block \"%s\": tiling gives more than %d loops (IR_MAX_LOOP_DEPTH)", block,
                        SCH_MAX_RVS_OUT);
    for (int k = 0; k < tl->n[l]; k++) order[n++] = tl->loops[l][k];
  }
  SMP_TRY(sch_reorder(s, order, n, err));
  return bind_levels(c, s, cfg, tl, err);
}

/* ---- step 3: write reuse --------------------------------------------------- */

/* Moves `stage` under the last loop of each write level, one state per
 * level: forks for all but the last, st itself for the last.  On success st
 * has been pushed to out; on failure it has not (the caller frees it). */
static int stage_at_levels(smp_ctx_t *c, smp_state_t *st, const mlt_config_t *cfg, const tiles_t *tl,
                           sch_rv_t stage, const char *what, smp_states_t *out, tn_err_t *err) {
  for (int k = 0; k < cfg->nwrite_levels; k++) {
    bool last = k == cfg->nwrite_levels - 1;
    int level = cfg->write_levels[k];
    smp_state_t fork, *ns = st;
    if (!last) {
      SMP_TRY(smp_fork(c, st, &fork, err));
      ns = &fork;
    }
    int rc = sch_reverse_compute_at(ns->s, stage, last_loop(tl, level - 1), true, err);
    if (rc < 0) {
      if (!last) smp_state_free(&fork);
      return rc;
    }
    smp_note(ns, "%s at level %d", what, level);
    smp_states_push(out, *ns);
  }
  return TN_OK;
}

static int write_reuse(smp_ctx_t *c, smp_state_t *st, const mlt_config_t *cfg, const tiles_t *tl,
                       smp_states_t *out, tn_err_t *err) {
  if (cfg->write_req == REUSE_NO) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  const ir_func_t *f = sch_func(st->s);
  const ir_block_t *b = &sch_rv_stmt(st->s, tl->block)->u.block;
  ir_block_t *cons[2];
  if (cfg->write_req == REUSE_MAY) {
    /* An elementwise consumer already is a write cache: move it (epilogue fusion). */
    if (ir_consumers(f, b, cons, 2) == 1 && smp_is_write_cache_like(cons[0])) {
      sch_rv_t stage;
      char what[96];
      snprintf(what, sizeof what, "consumer %s", cons[0]->name);
      SMP_TRY(sch_get_block(st->s, cons[0]->name, &stage, err));
      smp_state_t keep;
      SMP_TRY(smp_fork(c, st, &keep, err));
      int rc = stage_at_levels(c, st, cfg, tl, stage, what, out, err);
      if (rc < 0) {
        smp_state_free(&keep);
        return rc;
      }
      smp_note(&keep, "%s not moved", what);
      smp_states_push(out, keep);
      return TN_OK;
    }
    smp_state_t plain;
    SMP_TRY(smp_fork(c, st, &plain, err));
    smp_note(&plain, "no write cache");
    smp_states_push(out, plain);
  }
  sch_rv_t cache;
  SMP_TRY(sch_cache_write(st->s, tl->block, 0, cfg->write_scope, &cache, err));
  char what[64];
  snprintf(what, sizeof what, "%s write cache", cfg->write_scope);
  return stage_at_levels(c, st, cfg, tl, cache, what, out, err);
}

/* ---- step 4: read reuse (cooperative fetch) -------------------------------- */

/* Vector widths a cache of this dtype may fetch (TVM filters float32 to
 * <= 4 lanes, float16 to 1 or even <= 8, int8 to <= 16: we apply the same
 * bound through the target's widest vector access). */
static int fetch_widths(const tn_target_t *t, ir_dtype_t dt, int64_t *out) {
  int bytes = ir_dtype_bytes(dt), maxb = t->max_vector_bytes > 0 ? t->max_vector_bytes : 16, n = 0;
  for (size_t i = 0; i < TN_ARRAY_LEN(vector_lens); i++) {
    int64_t w = vector_lens[i];
    if (w > 1 && (w * bytes > maxb || (bytes == 2 && w % 2))) continue;
    out[n++] = w;
  }
  return n;
}

int smp_cache_read_fetch(smp_ctx_t *c, sch_t *s, sch_rv_t block, const char *buf, sch_rv_t at, const char *scope,
                         sch_rv_t *out, tn_err_t *err) {
  const ir_block_t *b = &sch_rv_stmt(s, block)->u.block;
  int index = smp_read_index(b, buf);
  if (index < 0) return tn_err_set(err, TN_EINVAL, "block \"%s\" no longer reads %s", b->name, buf);
  int ndim = b->reads[index].buf->ndim;
  ir_dtype_t dt = b->reads[index].buf->dtype;
  sch_rv_t cache, loops[SCH_MAX_RVS_OUT], fused, width;
  int nl = 0;
  SMP_TRY(sch_cache_read(s, block, index, scope, &cache, err));
  SMP_TRY(sch_compute_at(s, cache, at, true, err));
  SMP_TRY(sch_get_loops(s, cache, loops, &nl, err));
  if (nl < ndim) return tn_err_set(err, TN_EINVAL, "the cache of %s has %d loops for %d dimensions", buf, nl, ndim);
  SMP_TRY(sch_fuse(s, loops + nl - ndim, ndim, &fused, err));
  int64_t widths[TN_ARRAY_LEN(vector_lens)];
  double probs[TN_ARRAY_LEN(vector_lens)];
  int nw = fetch_widths(c->t, dt, widths);
  for (int i = 0; i < nw; i++) probs[i] = 1.0 / nw;
  SMP_TRY(sch_sample_categorical(s, widths, probs, nw, &width, err));
  if (out) *out = cache;
  return sch_annotate(s, cache, SMP_ANN_COOP_FETCH, sch_arg_rv(width), err);
}

int smp_sample_pipeline(sch_t *s, sch_rv_t loop, tn_err_t *err) {
  static const int64_t stages[] = {1, 2, 3};
  static const double probs[] = {0.2, 0.4, 0.4};
  sch_rv_t v;
  SMP_TRY(sch_sample_categorical(s, stages, probs, 3, &v, err));
  return sch_annotate(s, loop, IR_ANN_PIPELINE_STAGES, sch_arg_rv(v), err);
}

/* Caches every buffer the block reads but does not write, at the read level. */
static int read_reuse(smp_ctx_t *c, smp_state_t *st, const mlt_config_t *cfg, const tiles_t *tl, tn_err_t *err) {
  if (cfg->read_req == REUSE_NO) return TN_OK;
  const ir_block_t *b = &sch_rv_stmt(st->s, tl->block)->u.block;
  char names[IR_MAX_DIMS * 4][64];
  int n = 0;
  for (int r = 0; r < b->nreads && n < (int)TN_ARRAY_LEN(names); r++) {
    const ir_buffer_t *buf = b->reads[r].buf;
    bool written = false;
    for (int w = 0; w < b->nwrites; w++) written |= b->writes[w].buf == buf;
    if (!written && buf->ndim > 0) snprintf(names[n++], sizeof names[0], "%s", buf->name);
  }
  sch_rv_t at = last_loop(tl, cfg->read_level - 1);
  for (int i = 0; i < n; i++) SMP_TRY(smp_cache_read_fetch(c, st->s, tl->block, names[i], at, cfg->read_scope, NULL, err));
  if (n) smp_note(st, "%s read caches of %d inputs", cfg->read_scope, n);
  if (n && c->gpu) SMP_TRY(smp_sample_pipeline(st->s, at, err));
  return TN_OK;
}

/* ---- the rule -------------------------------------------------------------- */

int smp_rule_multi_level_tiling(smp_ctx_t *c, smp_state_t *st, const char *block, smp_states_t *out,
                                tn_err_t *err) {
  const mlt_config_t *cfg = c->gpu ? &gpu_config : &cpu_config;
  const ir_block_t *b = strcmp(block, "root") ? smp_block(sch_func(st->s), block) : NULL;
  if (!b || !smp_needs_multi_level_tiling(sch_func(st->s), b)) {
    smp_states_push(out, *st);
    return TN_OK;
  }
  tiles_t tl;
  smp_states_t tiled = {0};
  int rc = tile(c, st->s, cfg, block, &tl, err);
  if (rc == TN_OK) {
    smp_note(st, "multi-level-tiling(%s: %s", block, cfg->structure);
    rc = write_reuse(c, st, cfg, &tl, &tiled, err); /* on success st moved into tiled */
  }
  if (rc < 0) {
    for (int i = 0; i < tiled.n; i++) smp_state_free(&tiled.v[i]);
    free(tiled.v);
    smp_state_free(st);
    return rc;
  }
  for (int i = 0; i < tiled.n; i++) {
    if (rc == TN_OK) rc = read_reuse(c, &tiled.v[i], cfg, &tl, err);
    if (rc < 0) {
      smp_state_free(&tiled.v[i]);
      continue;
    }
    tn_buf_put(&tiled.v[i].desc, ")");
    smp_states_push(out, tiled.v[i]);
  }
  free(tiled.v);
  return rc;
}
