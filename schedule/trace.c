/* trace.c — traces as data: creation, deep copies and appending instructions.
 * JSON serialisation and replay live in trace_json.c and replay.c. */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

sch_trace_t *sch_trace_new(void) {
  sch_trace_t *t = tn_xcalloc(1, sizeof *t);
  t->arena = tn_arena_new();
  return t;
}

void sch_trace_free(sch_trace_t *t) {
  if (!t) return;
  tn_arena_free(t->arena);
  free(t->insts);
  free(t);
}

static void copy_args(tn_arena_t *a, sch_arg_t **dst, const sch_arg_t *src, int n) {
  *dst = n ? TN_NEWN(a, sch_arg_t, n) : NULL;
  for (int i = 0; i < n; i++) {
    (*dst)[i] = src[i];
    if (src[i].s) (*dst)[i].s = tn_arena_strdup(a, src[i].s);
    if (src[i].kind == SCH_ARG_LIST) copy_args(a, &(*dst)[i].items, src[i].items, src[i].n);
  }
}

void sch_trace_append(sch_trace_t *t, const sch_inst_t *inst) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 32;
    t->insts = tn_xrealloc(t->insts, sizeof *t->insts * (size_t)t->cap);
  }
  sch_inst_t *r = &t->insts[t->n++];
  *r = *inst;
  copy_args(t->arena, &r->inputs, inst->inputs, inst->ninputs);
  copy_args(t->arena, &r->attrs, inst->attrs, inst->nattrs);
  r->outputs = inst->noutputs ? tn_arena_memdup(t->arena, inst->outputs, sizeof(sch_rv_t) * (size_t)inst->noutputs) : NULL;
  r->decision = inst->ndecision ? tn_arena_memdup(t->arena, inst->decision, sizeof(int64_t) * (size_t)inst->ndecision) : NULL;
}

sch_trace_t *sch_trace_copy(const sch_trace_t *t) {
  sch_trace_t *c = sch_trace_new();
  for (int i = 0; i < t->n; i++) sch_trace_append(c, &t->insts[i]);
  return c;
}
