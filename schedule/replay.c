/* replay.c — replays a trace on a fresh schedule of a function: the trace's
 * handles are mapped to the new schedule's, decisions come from an override,
 * the trace or fresh sampling, and a failure names the instruction. */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* Trace RV id -> RV of the new schedule (SCH_RV_INVALID: not defined yet).
 * Trace ids are dense (recorded and parsed traces number RVs 0, 1, 2...);
 * no instruction has more than SCH_MAX_RVS_OUT outputs, which bounds them. */
typedef struct rv_map {
  sch_rv_t *to;
  int cap;
} rv_map_t;

static void map_init(rv_map_t *m, const sch_trace_t *t) {
  int64_t max = -1, limit = (int64_t)SCH_MAX_RVS_OUT * t->n;
  for (int i = 0; i < t->n; i++)
    for (int j = 0; j < t->insts[i].noutputs; j++)
      if (t->insts[i].outputs[j] > max && t->insts[i].outputs[j] < limit) max = t->insts[i].outputs[j];
  m->cap = (int)max + 1;
  m->to = tn_xmalloc(sizeof *m->to * (size_t)(m->cap + 1));
  for (int i = 0; i < m->cap; i++) m->to[i] = SCH_RV_INVALID;
}

static sch_rv_t map_get(const rv_map_t *m, sch_rv_t rv) {
  return rv >= 0 && rv < m->cap ? m->to[rv] : SCH_RV_INVALID;
}

/* Copies args into `a` with every RV translated (inside lists too). */
static int translate(const rv_map_t *m, tn_arena_t *a, const sch_arg_t *src, int n, sch_arg_t **dst,
                     tn_err_t *err) {
  *dst = n ? TN_NEWN(a, sch_arg_t, n) : NULL;
  for (int i = 0; i < n; i++) {
    (*dst)[i] = src[i];
    if (src[i].kind == SCH_ARG_RV && ((*dst)[i].rv = map_get(m, src[i].rv)) == SCH_RV_INVALID)
      return tn_err_set(err, TN_EINVAL, "input %d: handle %d is not an output of an earlier instruction", i, src[i].rv);
    if (src[i].kind == SCH_ARG_LIST) {
      int rc = translate(m, a, src[i].items, src[i].n, &(*dst)[i].items, err);
      if (rc < 0) {
        tn_err_prefix(err, "list %d", i);
        return rc;
      }
    }
  }
  return TN_OK;
}

/* Applies one recorded instruction to s and maps its outputs. */
static int replay_one(sch_t *s, rv_map_t *m, tn_arena_t *a, const sch_inst_t *in, const int64_t *dec, int ndec,
                      tn_err_t *err) {
  sch_inst_t tr = *in;
  int rc = translate(m, a, in->inputs, in->ninputs, &tr.inputs, err);
  if (rc < 0) return rc;
  sch_rv_t outs[SCH_MAX_RVS_OUT];
  int nout = 0;
  if ((rc = sch_apply(s, &tr, dec, ndec, outs, &nout, err)) < 0) return rc;
  if (nout != in->noutputs)
    return tn_err_set(err, TN_EINVAL, "the trace expects %d outputs, replay produced %d", in->noutputs, nout);
  for (int j = 0; j < nout; j++) {
    sch_rv_t id = in->outputs[j];
    if (id < 0 || id >= m->cap)
      return tn_err_set(err, TN_EINVAL, "output %d: handle id %d is out of range (a trace's ids are dense, from 0)", j, id);
    m->to[id] = outs[j];
  }
  return TN_OK;
}

int sch_replay_with(const ir_func_t *func, const sch_trace_t *trace, uint64_t seed, int64_t *const *decisions,
                    const int *ndecisions, bool remove_postproc, sch_t **out, tn_err_t *err) {
  *out = NULL;
  sch_t *s = sch_create(func, seed);
  rv_map_t m;
  map_init(&m, trace);
  tn_arena_t *a = tn_arena_new();
  int rc = TN_OK;
  s->no_backup = true; /* on failure s is freed below */
  for (int i = 0; i < trace->n && rc == TN_OK; i++) {
    const sch_inst_t *in = &trace->insts[i];
    if (remove_postproc && in->kind == SCH_ENTER_POSTPROC) break;
    bool override = decisions && ndecisions && ndecisions[i] > 0;
    const int64_t *dec = override ? decisions[i] : in->ndecision > 0 ? in->decision : NULL;
    int ndec = override ? ndecisions[i] : dec ? in->ndecision : 0;
    rc = replay_one(s, &m, a, in, dec, ndec, err);
    if (rc < 0) tn_err_prefix(err, "instruction %d (%s)", i, sch_inst_name(in->kind));
  }
  tn_arena_free(a);
  free(m.to);
  if (rc < 0) {
    sch_free(s);
    return rc;
  }
  s->no_backup = false;
  /* Primitives leave the nodes they replaced in the function's arena
   * (inlining a chain of n blocks leaves O(n^2) of them): a copy keeps only
   * the live tree.  Handles name statements by uid, which copies keep. */
  ir_func_t *live = ir_func_copy(s->f);
  sch_index_drop(s);
  ir_func_free(s->f);
  s->f = live;
  *out = s;
  return TN_OK;
}

int sch_replay(const ir_func_t *func, const sch_trace_t *trace, uint64_t seed, sch_t **out, tn_err_t *err) {
  return sch_replay_with(func, trace, seed, NULL, NULL, false, out, err);
}
