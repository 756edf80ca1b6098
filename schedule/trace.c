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

/* A word at a time (FNV-1a's byte loop made hashing long traces cost more
 * than the replays it saves); strings go through FNV-1a. */
static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

static uint64_t hash_args(uint64_t h, const sch_arg_t *a, int n) {
  h = mix(h, (uint64_t)n);
  for (int i = 0; i < n; i++) {
    h = mix(h, (uint64_t)a[i].kind);
    switch (a[i].kind) {
    case SCH_ARG_INT: h = mix(h, (uint64_t)a[i].i); break;
    case SCH_ARG_FLOAT: {
      uint64_t bits;
      memcpy(&bits, &a[i].f, sizeof bits);
      h = mix(h, bits);
      break;
    }
    case SCH_ARG_STR: h = mix(h, tn_fnv1a_str(TN_FNV_INIT, a[i].s ? a[i].s : "")); break;
    case SCH_ARG_RV: h = mix(h, (uint64_t)(int64_t)a[i].rv); break;
    case SCH_ARG_LIST: h = hash_args(h, a[i].items, a[i].n); break;
    default: break;
    }
  }
  return h;
}

uint64_t sch_trace_hash(const sch_trace_t *t, int n) {
  uint64_t h = TN_FNV_INIT;
  for (int i = 0; i < n && i < t->n; i++) {
    const sch_inst_t *in = &t->insts[i];
    h = mix(h, (uint64_t)in->kind);
    h = hash_args(h, in->inputs, in->ninputs);
    h = hash_args(h, in->attrs, in->nattrs);
    h = mix(h, (uint64_t)in->noutputs);
    for (int k = 0; k < in->noutputs; k++) h = mix(h, (uint64_t)(int64_t)in->outputs[k]);
    h = mix(h, (uint64_t)in->ndecision);
    for (int k = 0; k < in->ndecision; k++) h = mix(h, (uint64_t)in->decision[k]);
  }
  return h;
}
