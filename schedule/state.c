/* state.c — the schedule object: its function copy, the table of random
 * variables, and sch_apply, which decodes an instruction's arguments, runs the
 * primitive, and records the instruction (with its decision) in the trace. */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* ---- arguments --------------------------------------------------------- */

sch_arg_t sch_arg_none(void) { return (sch_arg_t){.kind = SCH_ARG_NONE, .rv = SCH_RV_INVALID}; }
sch_arg_t sch_arg_int(int64_t v) { return (sch_arg_t){.kind = SCH_ARG_INT, .i = v, .rv = SCH_RV_INVALID}; }
sch_arg_t sch_arg_float(double v) { return (sch_arg_t){.kind = SCH_ARG_FLOAT, .f = v, .rv = SCH_RV_INVALID}; }
sch_arg_t sch_arg_str(const char *s) { return (sch_arg_t){.kind = SCH_ARG_STR, .s = s, .rv = SCH_RV_INVALID}; }
sch_arg_t sch_arg_rv(sch_rv_t rv) { return (sch_arg_t){.kind = SCH_ARG_RV, .rv = rv}; }

/* ---- schedule ---------------------------------------------------------- */

sch_t *sch_create(const ir_func_t *func, uint64_t seed) {
  sch_t *s = tn_xcalloc(1, sizeof *s);
  s->f = ir_func_copy(func);
  s->trace = sch_trace_new();
  tn_rng_seed(&s->rng, seed);
  return s;
}

void sch_free(sch_t *s) {
  if (!s) return;
  sch_index_drop(s);
  ir_func_free(s->f);
  sch_trace_free(s->trace);
  free(s->rvs);
  free(s);
}

const ir_func_t *sch_func(const sch_t *s) { return s->f; }
const sch_trace_t *sch_get_trace(const sch_t *s) { return s->trace; }

sch_rv_t sch_new_rv(sch_t *s, sch_rv_kind_t kind, int64_t value) {
  if (s->nrvs == s->rvcap) {
    s->rvcap = s->rvcap ? 2 * s->rvcap : 64;
    s->rvs = tn_xrealloc(s->rvs, sizeof *s->rvs * (size_t)s->rvcap);
  }
  s->rvs[s->nrvs] = (sch_rv_entry_t){kind, value};
  return s->nrvs++;
}

sch_rv_kind_t sch_rv_kind(const sch_t *s, sch_rv_t rv) {
  return rv >= 0 && rv < s->nrvs ? s->rvs[rv].kind : SCH_RV_EXPR;
}

int64_t sch_rv_value(const sch_t *s, sch_rv_t rv) { return rv >= 0 && rv < s->nrvs ? s->rvs[rv].value : 0; }

ir_stmt_t *sch_rv_stmt(const sch_t *s, sch_rv_t rv) {
  if (rv < 0 || rv >= s->nrvs || s->rvs[rv].kind == SCH_RV_EXPR || s->rvs[rv].value < 0) return NULL;
  return sch_find(s->f, (int)s->rvs[rv].value);
}
