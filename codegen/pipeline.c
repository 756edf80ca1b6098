/* pipeline.c — software pipelining of shared-memory copies on GPUs (TVM's
 * InjectSoftwarePipeline for the common two-part case).
 *
 * A loop annotated software_pipeline_stages = S (S >= 2) whose body is
 *
 *     copies of global data into shared buffers     (cooperative fetches)
 *     the computation that reads them
 *
 * is printed with S copies of each such buffer, slice k % S holding the data
 * of iteration k:
 *
 *     copies of iterations 0 .. S - 2                       (prologue)
 *     for k:  wait for the copies of iteration k
 *             barrier
 *             copies of iteration k + S - 1 into slice (k + S - 1) % S
 *             the computation of iteration k on slice k % S
 *
 * One barrier per iteration instead of two, and the copies of later
 * iterations are in flight while this one computes.  On CUDA the copies are
 * cp.async (sm_80 and later; plain loads and stores before) with one commit
 * group per iteration, so the wait is `cp.async.wait_group S - 2`; elsewhere
 * they are ordinary copies.  The slice read by iteration k was last written
 * before the barrier of iteration k - S + 1 ... k; the slice written at k was
 * last read by iteration k - 1, which every thread finished at the barrier.
 *
 * The copies are printed with the loop's variable standing for the iteration
 * they fetch ("(k + 1)"): their global indices, their shared slices and their
 * bases over the loop variable all follow from that one substitution. */
#include "cg_internal.h"

#include <stdlib.h>
#include <string.h>

const char cg_cp_async_helpers[] =
    "#ifndef TUNED_CUDA_HOST_H\n"
    "/* cp.async: global -> shared copies that bypass the registers, waited for by\n"
    "   commit group (sm_80 and later; a plain copy before) */\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "__device__ __forceinline__ void tuned_cp_async4(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_cp_async8(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_cp_async16(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void tuned_cp_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\"); }\n"
    "template <int N> __device__ __forceinline__ void tuned_cp_wait() {\n"
    "  asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "}\n"
    "#else\n"
    "__device__ __forceinline__ void tuned_cp_async4(void *d, const void *s) { *(float *)d = *(const float *)s; }\n"
    "__device__ __forceinline__ void tuned_cp_async8(void *d, const void *s) { *(float2 *)d = *(const float2 *)s; }\n"
    "__device__ __forceinline__ void tuned_cp_async16(void *d, const void *s) { *(float4 *)d = *(const float4 *)s; }\n"
    "__device__ __forceinline__ void tuned_cp_commit() {}\n"
    "template <int N> __device__ __forceinline__ void tuned_cp_wait() {}\n"
    "#endif\n"
    "#endif\n";

/* ---- analysis ------------------------------------------------------------ */

static bool writes_only_shared(const cg_ctx_t *c, const cg_access_t *a, bool *any) {
  *any = false;
  for (int i = 0; i < c->nbufs; i++)
    if (a->w[i]) {
      if (c->bufs[i].b->scope != IR_SCOPE_SHARED) return false;
      *any = true;
    }
  return true;
}

static bool reads_shared(const cg_ctx_t *c, const cg_access_t *a) {
  for (int i = 0; i < c->nbufs; i++)
    if (a->r[i] && c->bufs[i].b->scope == IR_SCOPE_SHARED) return true;
  return false;
}

/* Is every access of buffer b under loop l? */
static bool only_under(const cg_ctx_t *c, const ir_buffer_t *b, const ir_loop_t *l) {
  for (int i = 0; i < c->nsites; i++) {
    const cg_site_t *s = &c->sites[i];
    if (s->buf != b) continue;
    bool under = false;
    for (int j = 0; j < s->nloops && !under; j++) under = s->loops[j] == l;
    if (!under) return false;
  }
  return true;
}

static int pipe_fail(cg_ctx_t *c, const ir_loop_t *l, int stages, const char *why) {
  return cg_fail(c, TN_EUNSUPPORTED, "loop %s is annotated %s = %d, but %s", l->var->name,
                 IR_ANN_PIPELINE_STAGES, stages, why);
}

static void add_pipe(cg_ctx_t *c, const ir_loop_t *l, int stages) {
  const ir_stmt_t *body = cg_strip_seq(l->body);
  if (!body || body->kind != IR_S_SEQ || body->u.seq.n < 2) {
    pipe_fail(c, l, stages, "its body is not copies into shared memory followed by the computation on them");
    return;
  }
  cg_pipe_t p = {.loop = l, .stages = stages, .items = body->u.seq.items, .nitems = body->u.seq.n};
  /* one pass: the copies are a prefix of statements that write shared
   * buffers only and read none; the rest is the computation.  cp and comp
   * gather what each part reads and writes. */
  size_t nb = (size_t)c->nbufs + 1;
  cg_access_t cp = {tn_xcalloc(nb, 1), tn_xcalloc(nb, 1)}, comp = {tn_xcalloc(nb, 1), tn_xcalloc(nb, 1)};
  bool in_copies = true;
  for (int k = 0; k < p.nitems; k++) {
    cg_access_t a;
    cg_access_get(c, p.items[k], &a);
    bool any;
    in_copies = in_copies && writes_only_shared(c, &a, &any) && any && !reads_shared(c, &a);
    cg_access_t *to = in_copies ? &cp : &comp;
    for (int i = 0; i < c->nbufs; i++) to->r[i] |= a.r[i], to->w[i] |= a.w[i];
    p.ncopies += in_copies;
    cg_access_free(&a);
  }
  const char *why = NULL;
  if (p.ncopies == 0)
    why = "its body does not begin with copies into shared memory (statements that write shared buffers and "
          "read no shared data)";
  else if (p.ncopies == p.nitems)
    why = "its body has no computation after the copies into shared memory";
  for (int i = 0; i < c->nbufs && !why; i++) {
    if (cp.r[i] && comp.w[i])
      why = tn_arena_printf(c->scratch->arena, "its copies read %s, which the computation after them writes",
                            c->bufs[i].b->name);
    else if (cp.w[i] && comp.w[i])
      why = tn_arena_printf(c->scratch->arena, "the computation writes %s, which the copies fill",
                            c->bufs[i].b->name);
    else if (cp.w[i] && !only_under(c, c->bufs[i].b, l))
      why = tn_arena_printf(c->scratch->arena, "shared buffer %s is also used outside the loop",
                            c->bufs[i].b->name);
    p.global_barrier |= comp.w[i] && c->bufs[i].b->scope == IR_SCOPE_GLOBAL;
  }
  for (int i = 0; i < c->nbufs && !why; i++) /* the copies' buffers get a slice per stage */
    if (cp.w[i]) {
      c->bufs[i].pipe = l;
      c->bufs[i].pipe_stages = stages;
    }
  cg_access_free(&cp);
  cg_access_free(&comp);
  if (why) {
    pipe_fail(c, l, stages, why);
    return;
  }
  if (c->npipes == c->cappipes) {
    c->cappipes = c->cappipes ? 2 * c->cappipes : 4;
    c->pipes = tn_xrealloc(c->pipes, sizeof(*c->pipes) * (size_t)c->cappipes);
  }
  c->pipes[c->npipes++] = p;
}

static void find_pipes(cg_ctx_t *c, const ir_stmt_t *s) {
  if (!s || c->rc) return;
  switch (s->kind) {
  case IR_S_SEQ:
    for (int i = 0; i < s->u.seq.n; i++) find_pipes(c, s->u.seq.items[i]);
    return;
  case IR_S_LOOP: {
    const ir_loop_t *l = &s->u.loop;
    const ir_annot_t *a = ir_annot_get(l->annots, l->nannots, IR_ANN_PIPELINE_STAGES);
    if (a && (a->is_str || a->ival < 1 || a->ival > IR_PIPELINE_MAX_STAGES)) {
      cg_fail(c, TN_EINVAL, "loop %s: %s must be an integer from 1 to %d", l->var->name,
              IR_ANN_PIPELINE_STAGES, IR_PIPELINE_MAX_STAGES);
      return;
    }
    if (a && a->ival >= 2 && l->extent >= 2) {
      int axis;
      if (cg_loop_tag(l, &axis) != IR_TAG_CLASS_NONE || l->kind != IR_LOOP_SERIAL) {
        cg_fail(c, TN_EINVAL, "loop %s is annotated %s but is not a serial loop", l->var->name,
                IR_ANN_PIPELINE_STAGES);
        return;
      }
      add_pipe(c, l, (int)a->ival);
    }
    find_pipes(c, l->body);
    return;
  }
  case IR_S_BLOCK:
    find_pipes(c, s->u.block.init);
    find_pipes(c, s->u.block.body);
    return;
  case IR_S_STORE: return;
  }
}

int cg_pipe_analyse(cg_ctx_t *c) {
  for (int k = 0; k < c->nroots && !c->rc; k++) find_pipes(c, c->roots[k]);
  return c->rc;
}

const cg_pipe_t *cg_pipe_at(const cg_ctx_t *c, const ir_loop_t *l) {
  for (int i = 0; i < c->npipes; i++)
    if (c->pipes[i].loop == l) return &c->pipes[i];
  return NULL;
}

/* ---- printing -------------------------------------------------------------- */

static bool cp_async(const cg_ctx_t *c) { return c->d->target == CG_TARGET_CUDA; }

/* The copies with the loop variable standing for `iter`; afterwards the
 * stage buffers do not count as pending writes (the computation reads
 * another slice). */
static void emit_copies(cg_ctx_t *c, const cg_pipe_t *p, const char *iter) {
  c->shift_var = p->loop->var;
  c->shift_text = iter;
  c->async_copy = cp_async(c);
  for (int k = 0; k < p->ncopies; k++) cg_emit_stmt(c, p->items[k]);
  c->shift_var = NULL;
  c->async_copy = false;
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].pipe == p->loop) c->pend_w[i] = 0;
}

void cg_emit_pipelined(cg_ctx_t *c, const ir_stmt_t *s, const cg_pipe_t *p) {
  const ir_loop_t *l = &s->u.loop;
  const char *v = cg_var(c, l->var);
  int S = p->stages;
  bool async = cp_async(c);
  if (async) c->need_cp_async = true;
  cg_line(c, "/* loop %s: software pipeline of %d stages (the copies of iteration %s + %d are in flight "
             "while %s computes) */", v, S, v, S - 1, v);
  for (int st = 0; st < S - 1; st++) {
    if (st < l->extent) {
      cg_line(c, "{  /* the copies of %s = %d */", v, st);
      c->ind++;
      emit_copies(c, p, tn_arena_printf(c->scratch->arena, "%d", st));
      c->ind--;
      cg_line(c, "}");
    }
    if (async) cg_line(c, "tuned_cp_commit();");
  }
  cg_line(c, "for (int %s = 0; %s < %lld; ++%s) {", v, v, (long long)l->extent, v);
  c->ind++;
  cg_stack_push(c, l);
  cg_emit_allocs(c, l); /* GPU: local arrays, never heap */
  if (async) cg_line(c, "tuned_cp_wait<%d>();", S - 2);
  cg_barrier(c, p->global_barrier);
  cg_line(c, "if (%s + %d < %lld) {", v, S - 1, (long long)l->extent);
  c->ind++;
  emit_copies(c, p, tn_arena_printf(c->scratch->arena, "(%s + %d)", v, S - 1));
  c->ind--;
  cg_line(c, "}");
  if (async) cg_line(c, "tuned_cp_commit();");
  for (int k = p->ncopies; k < p->nitems; k++) cg_emit_stmt(c, p->items[k]);
  cg_stack_pop(c);
  c->ind--;
  cg_line(c, "}");
  /* what follows the loop sees the stage buffers read and written */
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].pipe == l) c->pend_w[i] = c->read_since[i] = 1;
}

bool cg_try_async_store(cg_ctx_t *c, const ir_stmt_t *s) {
  const ir_buffer_t *dst = s->u.store.buf;
  const ir_expr_t *v = s->u.store.value;
  if (dst->scope != IR_SCOPE_SHARED || v->kind != IR_E_LOAD) return false;
  const ir_buffer_t *src = v->u.load.buf;
  if (src->scope != IR_SCOPE_GLOBAL || src->dtype != dst->dtype || dst->dtype != IR_FLOAT32 ||
      cg_promo_ref(c, dst))
    return false;
  const char *di = cg_expr_str(c, cg_flat_index(c, dst, s->u.store.idx));
  const char *si = cg_expr_str(c, cg_flat_index(c, src, v->u.load.idx));
  cg_line(c, "tuned_cp_async4(%s + (%s), %s + (%s));", c->bufs[dst->id].name, di, c->bufs[src->id].name, si);
  return true;
}
