/* space.c — design-space generation (PostOrderApply, §3.1): the target's rule
 * list applied rule-major to every block in post-order, each rule possibly
 * forking the schedule; the resulting traces are simplified (dead queries
 * dropped, handles renumbered) and lose their decisions.  Also smp_sample,
 * which turns a trace into a postprocessed candidate. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "smp_internal.h"

/* Spaces kept at most: forks multiply, and a few dozen spaces are already
 * more than a search uses well (TVM's defaults give 1–6). */
#define MAX_SPACES 64

/* ---- states ---------------------------------------------------------------- */

void smp_states_push(smp_states_t *v, smp_state_t st) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 8;
    v->v = tn_xrealloc(v->v, sizeof *v->v * (size_t)v->cap);
  }
  v->v[v->n++] = st;
}

void smp_state_free(smp_state_t *st) {
  sch_free(st->s);
  tn_buf_free(&st->desc);
  st->s = NULL;
}

int smp_fork(smp_ctx_t *c, const smp_state_t *st, smp_state_t *out, tn_err_t *err) {
  tn_buf_init(&out->desc);
  tn_buf_put(&out->desc, tn_buf_str(&st->desc));
  int rc = sch_replay(c->f, sch_get_trace(st->s), tn_rng_next(&c->rng), &out->s, err);
  if (rc < 0) tn_buf_free(&out->desc);
  return rc;
}

void smp_note(smp_state_t *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (st->desc.len) tn_buf_put(&st->desc, ", ");
  tn_buf_vprintf(&st->desc, fmt, ap);
  va_end(ap);
}

/* ---- rule sets (§3.3 and §3.6) ------------------------------------------- */

typedef struct rule {
  const char *name;
  smp_rule_fn apply;
} rule_t;

/* "cuda" minus ApplyCustomRule (no custom rules are registered), with the
 * tensor-core tiling of "cuda-tensorcore" first: it takes the blocks it can
 * tensorize and leaves the others to the SIMT tiling.  Before it, on Hopper
 * targets, the warpgroup-MMA tiling (rules_hopper.c), which forks, and
 * before that, on targets with either, the rewrite of a convolution-like
 * block into a GEMM for them (ReIndex and TransformBlockLayout:
 * rules_implicit_gemm.c), which forks too. */
static const rule_t gpu_rules[] = {
    {"implicit-gemm", smp_rule_implicit_gemm},
    {"multi-level-tiling-hopper", smp_rule_multi_level_tiling_hopper},
    {"multi-level-tiling-tensor-core", smp_rule_multi_level_tiling_tensor_core},
    {"multi-level-tiling", smp_rule_multi_level_tiling},
    {"inline-constant-scalars", smp_rule_inline_const_scalars},
    {"auto-inline", smp_rule_auto_inline},
    {"cross-thread-reduction", smp_rule_cross_thread_reduction},
    {"parallel-vectorize-unroll", smp_rule_parallel_vectorize_unroll},
    {"auto-bind", smp_rule_auto_bind},
};

static const rule_t cpu_rules[] = {
    {"inline-constant-scalars", smp_rule_inline_const_scalars},
    {"auto-inline", smp_rule_auto_inline},
    {"add-rfactor", smp_rule_add_rfactor},
    {"multi-level-tiling-with-intrinsic", smp_rule_multi_level_tiling_intrin},
    {"multi-level-tiling", smp_rule_multi_level_tiling},
    {"parallel-vectorize-unroll", smp_rule_parallel_vectorize_unroll},
    {"random-compute-location", smp_rule_random_compute_location},
};

/* ---- post-order apply ------------------------------------------------------ */

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Block names in post-order (children before parents, the root last), in a
 * malloc'ed array (*out); names must be unique since rules find blocks by
 * name.  Returns the count or < 0. */
static int collect_names(const ir_func_t *f, const char ***out, tn_err_t *err) {
  ir_block_t **all;
  int n = ir_blocks(f, &all);
  const char **names = tn_xmalloc(sizeof *names * (size_t)(n + 1)), **sorted = tn_xmalloc(sizeof *names * (size_t)(n + 1));
  for (int i = 0; i < n; i++) names[i] = sorted[i] = all[i]->name;
  free(all);
  qsort(sorted, (size_t)n, sizeof *sorted, name_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(sorted[i], sorted[i - 1]) == 0) {
      tn_err_set(err, TN_EINVAL, "two blocks are named \"%s\"; design-space rules need unique block names", sorted[i]);
      free(sorted);
      free(names);
      return TN_EINVAL;
    }
  free(sorted);
  names[n] = "root";
  *out = names;
  return n + 1;
}

/* Applies one rule to one state; a rule that fails (a primitive refused
 * something the rule's checks did not foresee) leaves the state as it was,
 * with a "!" note saying what happened. */
static int apply_rule(smp_ctx_t *c, const rule_t *r, smp_state_t *st, const char *block, smp_states_t *out,
                      tn_err_t *err) {
  bool exists = strcmp(block, "root") == 0 || ir_func_find_block(sch_func(st->s), block);
  if (!exists) { /* inlined by an earlier rule */
    smp_states_push(out, *st);
    return TN_OK;
  }
  int n0 = out->n;
  sch_trace_t *saved = sch_trace_copy(sch_get_trace(st->s));
  tn_buf_t desc;
  tn_buf_init(&desc);
  tn_buf_put(&desc, tn_buf_str(&st->desc));
  tn_err_t e = {0};
  int rc = r->apply(c, st, block, out, &e);
  if (rc == TN_OK) {
    sch_trace_free(saved);
    tn_buf_free(&desc);
    return TN_OK;
  }
  for (int i = n0; i < out->n; i++) smp_state_free(&out->v[i]);
  out->n = n0;
  smp_state_t back = {.desc = desc};
  rc = sch_replay(c->f, saved, tn_rng_next(&c->rng), &back.s, err);
  sch_trace_free(saved);
  if (rc < 0) {
    tn_buf_free(&back.desc);
    tn_err_prefix(err, "restoring the schedule after %s failed on block \"%s\"", r->name, block);
    return rc;
  }
  smp_note(&back, "!%s(%s): %s", r->name, block, e.msg);
  smp_states_push(out, back);
  return TN_OK;
}

static void states_free(smp_states_t *v) {
  for (int i = 0; i < v->n; i++) smp_state_free(&v->v[i]);
  free(v->v);
  v->v = NULL;
  v->n = v->cap = 0;
}

static int post_order_apply(smp_ctx_t *c, const rule_t *rules, int nrules, smp_states_t *states, tn_err_t *err) {
  const char **names = NULL;
  int nb = collect_names(c->f, &names, err);
  if (nb < 0) return nb;
  long dropped = 0; /* states past the cap: said in the first space's description */
  for (int r = 0; r < nrules; r++) {
    for (int b = nb - 1; b >= 0; b--) {
      smp_states_t next = {0};
      for (int i = 0; i < states->n; i++) {
        if (next.n >= MAX_SPACES) dropped++;
        int rc = next.n >= MAX_SPACES ? (smp_state_free(&states->v[i]), TN_OK)
                                      : apply_rule(c, &rules[r], &states->v[i], names[b], &next, err);
        if (rc < 0) {
          for (int k = i + 1; k < states->n; k++) smp_state_free(&states->v[k]);
          free(states->v);
          *states = next;
          free(names);
          return rc;
        }
      }
      free(states->v);
      *states = next;
      while (states->n > MAX_SPACES) {
        smp_state_free(&states->v[--states->n]);
        dropped++;
      }
    }
  }
  free(names);
  if (dropped && states->n)
    smp_note(&states->v[0], "!design spaces: the rules forked past %d spaces; %ld forks were dropped", MAX_SPACES,
             dropped);
  return TN_OK;
}

/* ---- trace simplification -------------------------------------------------- */

typedef struct rv_set {
  bool *used;
  int *renum;
  int cap;
} rv_set_t;

static void mark_args(rv_set_t *u, const sch_arg_t *a, int n) {
  for (int i = 0; i < n; i++) {
    if (a[i].kind == SCH_ARG_RV && a[i].rv >= 0 && a[i].rv < u->cap) u->used[a[i].rv] = true;
    if (a[i].kind == SCH_ARG_LIST) mark_args(u, a[i].items, a[i].n);
  }
}

/* Copies args with every handle renumbered (lists too), from arena a. */
static sch_arg_t *renum_args(const rv_set_t *u, tn_arena_t *a, const sch_arg_t *src, int n) {
  sch_arg_t *dst = n ? TN_NEWN(a, sch_arg_t, n) : NULL;
  for (int i = 0; i < n; i++) {
    dst[i] = src[i];
    if (src[i].kind == SCH_ARG_RV && src[i].rv >= 0 && src[i].rv < u->cap) dst[i].rv = u->renum[src[i].rv];
    if (src[i].kind == SCH_ARG_LIST) dst[i].items = renum_args(u, a, src[i].items, src[i].n);
  }
  return dst;
}

/* Drops pure instructions whose outputs nothing uses (backwards), numbers the
 * remaining handles 0, 1, 2... in order of definition, and removes every
 * decision, so that replays draw fresh samples. */
static sch_trace_t *simplify(const sch_trace_t *t) {
  rv_set_t u = {.cap = 0};
  for (int i = 0; i < t->n; i++)
    for (int j = 0; j < t->insts[i].noutputs; j++) u.cap = TN_MAX(u.cap, t->insts[i].outputs[j] + 1);
  u.used = tn_xcalloc((size_t)u.cap + 1, sizeof *u.used);
  u.renum = tn_xcalloc((size_t)u.cap + 1, sizeof *u.renum);
  bool *keep = tn_xcalloc((size_t)t->n + 1, sizeof *keep);
  for (int i = t->n - 1; i >= 0; i--) {
    const sch_inst_t *in = &t->insts[i];
    keep[i] = !sch_inst_is_pure(in->kind);
    for (int j = 0; j < in->noutputs && !keep[i]; j++) keep[i] = u.used[in->outputs[j]];
    if (keep[i]) mark_args(&u, in->inputs, in->ninputs);
  }
  int next = 0;
  for (int i = 0; i < t->n; i++)
    for (int j = 0; keep[i] && j < t->insts[i].noutputs; j++) u.renum[t->insts[i].outputs[j]] = next++;
  sch_trace_t *out = sch_trace_new();
  tn_arena_t *a = tn_arena_new();
  for (int i = 0; i < t->n; i++) {
    if (!keep[i]) continue;
    sch_inst_t in = t->insts[i];
    in.inputs = renum_args(&u, a, in.inputs, in.ninputs);
    sch_rv_t *outs = in.noutputs ? TN_NEWN(a, sch_rv_t, in.noutputs) : NULL;
    for (int j = 0; j < in.noutputs; j++) outs[j] = u.renum[in.outputs[j]];
    in.outputs = outs;
    in.decision = NULL;
    in.ndecision = 0;
    sch_trace_append(out, &in);
  }
  tn_arena_free(a);
  free(keep), free(u.used), free(u.renum);
  return out;
}

/* ---- public API ------------------------------------------------------------- */

int smp_generate(const ir_func_t *f, const tn_target_t *t, uint64_t seed, smp_space_t *out, tn_err_t *err) {
  memset(out, 0, sizeof *out);
  smp_ctx_t c = {.f = f, .t = t, .gpu = t->kind != TN_TARGET_CPU, .allow_tf32 = t->allow_tf32};
  if (c.gpu && (t->max_threads_per_block <= 0 || t->warp_size <= 0))
    return tn_err_set(err, TN_EINVAL, "target %s (%s) needs max_threads_per_block and warp_size for the GPU rules",
                      t->name, tn_target_kind_name(t->kind));
  tn_rng_seed(&c.rng, seed);
  smp_states_t states = {0};
  smp_state_t first = {.s = sch_create(f, tn_rng_next(&c.rng))};
  tn_buf_init(&first.desc);
  smp_states_push(&states, first);
  const rule_t *rules = c.gpu ? gpu_rules : cpu_rules;
  int nrules = c.gpu ? (int)TN_ARRAY_LEN(gpu_rules) : (int)TN_ARRAY_LEN(cpu_rules);
  int rc = post_order_apply(&c, rules, nrules, &states, err);
  if (rc < 0) {
    states_free(&states);
    tn_err_prefix(err, "design space of %s for %s", f->name, t->name);
    return rc;
  }
  out->n = states.n;
  out->traces = tn_xcalloc((size_t)states.n, sizeof *out->traces);
  out->descs = tn_xcalloc((size_t)states.n, sizeof *out->descs);
  for (int i = 0; i < states.n; i++) {
    out->traces[i] = simplify(sch_get_trace(states.v[i].s));
    out->descs[i] = tn_xstrdup(states.v[i].desc.len ? tn_buf_str(&states.v[i].desc) : "none");
  }
  states_free(&states);
  return TN_OK;
}

void smp_space_free(smp_space_t *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    sch_trace_free(s->traces[i]);
    free(s->descs[i]);
  }
  free(s->traces);
  free(s->descs);
  memset(s, 0, sizeof *s);
}

static const char *const stage_names[SMP_STAGE__COUNT] = {
    [SMP_STAGE_OK] = "ok",
    [SMP_STAGE_REPLAY] = "replay",
    [SMP_STAGE_COOP_FETCH] = "rewrite-cooperative-fetch",
    [SMP_STAGE_UNBOUND_BLOCK] = "rewrite-unbound-block",
    [SMP_STAGE_PARALLEL_VECTORIZE_UNROLL] = "rewrite-parallel-vectorize-unroll",
    [SMP_STAGE_REDUCTION_BLOCK] = "rewrite-reduction-block",
    [SMP_STAGE_VERIFY] = "verify",
    [SMP_STAGE_TENSORIZE] = "rewrite-tensorize",
};

const char *smp_stage_name(smp_stage_t st) { return (unsigned)st < SMP_STAGE__COUNT ? stage_names[st] : "?"; }

int smp_sample(const ir_func_t *f, const tn_target_t *t, const sch_trace_t *trace, uint64_t seed, sch_t **out,
               smp_stage_t *stage, tn_err_t *err) {
  smp_stage_t dummy;
  if (!stage) stage = &dummy;
  *out = NULL;
  *stage = SMP_STAGE_OK;
  sch_t *s = NULL;
  int rc = sch_replay_with(f, trace, seed, NULL, NULL, true, &s, err);
  if (rc < 0) {
    *stage = SMP_STAGE_REPLAY;
    tn_err_prefix(err, "replay");
    return rc;
  }
  if ((rc = smp_postprocess(s, t, stage, err)) < 0) {
    sch_free(s);
    return rc;
  }
  *out = s;
  return TN_OK;
}
