/* inst.c — the instruction set: one entry per kind (TVM name, arity, output
 * kind, how to apply it), sch_apply which runs an instruction on a schedule
 * and records it, and the typed front ends (sch_split, sch_bind, ...). */
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

/* What applying an instruction produced: output RVs (kind + value) and the
 * decision actually used by a sampling instruction. */
typedef struct apply_out {
  int64_t values[SCH_MAX_RVS_OUT];
  int n;
  int64_t decision[SCH_MAX_RVS_OUT];
  int ndecision;
} apply_out_t;

typedef int (*apply_fn)(sch_t *s, const sch_inst_t *in, const int64_t *dec, int ndec, apply_out_t *o,
                        tn_err_t *err);

typedef struct kind_info {
  const char *name; /* TVM's instruction name */
  const char *api;  /* the primitive's name in messages */
  int min_in, max_in, min_attrs, max_attrs;
  sch_rv_kind_t out_kind;
  bool pure, sampling;
  apply_fn apply;
  /* Leaves the loops, blocks, names and regions as they were (or, for
   * compute_inline, updates the lookup index itself): sch_apply keeps the
   * index after it. */
  bool keeps_index;
  /* Checks everything before its first edit: no snapshot is needed to leave
   * the function unchanged on error (one per inlined block made generating
   * the design space of a long chain quadratic). */
  bool checks_first;
} kind_info_t;

/* ---- argument decoding ------------------------------------------------- */

static int arg_rv(sch_t *s, const sch_inst_t *in, int i, sch_rv_kind_t want, int64_t *value,
                  tn_err_t *err) {
  static const char *const kind_names[] = {"a block", "a loop", "an integer"};
  const sch_arg_t *a = &in->inputs[i];
  if (a->kind != SCH_ARG_RV || a->rv < 0 || a->rv >= s->nrvs)
    return tn_err_set(err, TN_EINVAL, "input %d must be %s handle", i, kind_names[want]);
  if (s->rvs[a->rv].kind != want)
    return tn_err_set(err, TN_EINVAL, "input %d must be %s handle, got %s handle", i, kind_names[want],
                      kind_names[s->rvs[a->rv].kind]);
  *value = s->rvs[a->rv].value;
  return TN_OK;
}

/* A block or loop handle (annotate, get_child_blocks). */
static int arg_node(sch_t *s, const sch_inst_t *in, int i, int64_t *uid, tn_err_t *err) {
  const sch_arg_t *a = &in->inputs[i];
  if (a->kind != SCH_ARG_RV || a->rv < 0 || a->rv >= s->nrvs || s->rvs[a->rv].kind == SCH_RV_EXPR)
    return tn_err_set(err, TN_EINVAL, "input %d must be a block or loop handle", i);
  *uid = s->rvs[a->rv].value;
  return TN_OK;
}

/* An integer: a constant or an expr RV. */
static int arg_intval(sch_t *s, const sch_arg_t *a, int64_t *v) {
  if (a->kind == SCH_ARG_INT) {
    *v = a->i;
    return TN_OK;
  }
  if (a->kind == SCH_ARG_RV && a->rv >= 0 && a->rv < s->nrvs && s->rvs[a->rv].kind == SCH_RV_EXPR) {
    *v = s->rvs[a->rv].value;
    return TN_OK;
  }
  return TN_EINVAL;
}

static int attr_int(const sch_inst_t *in, int i, int64_t def, int64_t *v, tn_err_t *err) {
  if (i >= in->nattrs) {
    *v = def;
    return TN_OK;
  }
  if (in->attrs[i].kind != SCH_ARG_INT) return tn_err_set(err, TN_EINVAL, "attribute %d must be an integer", i);
  *v = in->attrs[i].i;
  return TN_OK;
}

static int attr_str(const sch_inst_t *in, int i, const char **v, tn_err_t *err) {
  if (i >= in->nattrs || in->attrs[i].kind != SCH_ARG_STR)
    return tn_err_set(err, TN_EINVAL, "attribute %d must be a string", i);
  *v = in->attrs[i].s;
  return TN_OK;
}

static int take_uids(apply_out_t *o, const int *uids, int n) {
  for (int i = 0; i < n; i++) o->values[i] = uids[i];
  o->n = n;
  return TN_OK;
}

/* Reads all loop handles of the inputs (fuse, reorder). */
static int arg_loops(sch_t *s, const sch_inst_t *in, int *uids, tn_err_t *err) {
  for (int i = 0; i < in->ninputs; i++) {
    int64_t v = 0;
    int rc = arg_rv(s, in, i, SCH_RV_LOOP, &v, err);
    if (rc < 0) return rc;
    uids[i] = (int)v;
  }
  return TN_OK;
}

/* ---- apply functions --------------------------------------------------- */

static int ap_get_block(sch_t *s, const sch_inst_t *in, const int64_t *dec, int ndec, apply_out_t *o,
                        tn_err_t *err) {
  (void)dec, (void)ndec;
  const char *name = NULL;
  int rc = attr_str(in, 0, &name, err);
  if (rc < 0) return rc;
  /* "root" names the root block, as in TVM: the sampler's ParallelizeVectorizeUnroll
   * rule annotates it (primitives that cannot take it say so). */
  ir_stmt_t *b = sch_index_block_named(s, name);
  if (!b) {
    tn_buf_t names;
    tn_buf_init(&names);
    ir_block_t **all;
    int n = ir_blocks_under(s->f->root, false, &all), shown = TN_MIN(n, 32);
    for (int i = 0; i < shown; i++) tn_buf_printf(&names, "%s%s", i ? ", " : "", all[i]->name);
    if (n > shown) tn_buf_printf(&names, " and %d more", n - shown);
    free(all);
    tn_err_set(err, TN_EINVAL, "no block named \"%s\" (%d blocks: %s)", name, n, tn_buf_str(&names));
    tn_buf_free(&names);
    return TN_EINVAL;
  }
  o->values[0] = b->u.block.uid;
  o->n = 1;
  return TN_OK;
}

typedef int (*query_fn)(sch_t *, int, int *, int *, tn_err_t *);

static int ap_query(sch_t *s, const sch_inst_t *in, apply_out_t *o, sch_rv_kind_t want, query_fn q,
                    tn_err_t *err) {
  int64_t uid = 0;
  int rc = want == SCH_RV_BLOCK ? arg_rv(s, in, 0, SCH_RV_BLOCK, &uid, err) : arg_node(s, in, 0, &uid, err);
  if (rc < 0) return rc;
  int uids[SCH_MAX_RVS_OUT], n = 0;
  if ((rc = q(s, (int)uid, uids, &n, err)) < 0) return rc;
  return take_uids(o, uids, n);
}

static int ap_get_loops(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return ap_query(s, in, o, SCH_RV_BLOCK, sch_prim_get_loops, err);
}
static int ap_get_children(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return ap_query(s, in, o, SCH_RV_LOOP /* block or loop */, sch_prim_get_child_blocks, err);
}
static int ap_get_producers(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return ap_query(s, in, o, SCH_RV_BLOCK, sch_prim_get_producers, err);
}
static int ap_get_consumers(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return ap_query(s, in, o, SCH_RV_BLOCK, sch_prim_get_consumers, err);
}

static int ap_split(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t loop = 0, nopred = 0;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_LOOP, &loop, err)) < 0 || (rc = attr_int(in, 1, 0, &nopred, err)) < 0)
    return rc;
  int64_t factors[SCH_MAX_RVS_OUT];
  int n = in->ninputs - 1;
  for (int i = 0; i < n; i++) {
    const sch_arg_t *a = &in->inputs[i + 1];
    if (a->kind == SCH_ARG_NONE) factors[i] = 0;
    else if (arg_intval(s, a, &factors[i]) < 0)
      return tn_err_set(err, TN_EINVAL, "factor %d must be an integer, an integer handle or None", i);
    else if (factors[i] < 1)
      return tn_err_set(err, TN_EINVAL, "factor %d is %lld; factors must be >= 1", i, (long long)factors[i]);
  }
  int uids[SCH_MAX_RVS_OUT];
  if ((rc = sch_prim_split(s, (int)loop, factors, n, nopred != 0, uids, err)) < 0) return rc;
  return take_uids(o, uids, n);
}

static int ap_fuse(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int uids[SCH_MAX_RVS_OUT], out, rc;
  if ((rc = arg_loops(s, in, uids, err)) < 0 || (rc = sch_prim_fuse(s, uids, in->ninputs, &out, err)) < 0)
    return rc;
  return take_uids(o, &out, 1);
}

static int ap_reorder(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int uids[SCH_MAX_RVS_OUT], rc;
  if ((rc = arg_loops(s, in, uids, err)) < 0) return rc;
  return sch_prim_reorder(s, uids, in->ninputs, err);
}

static int loop_kind_apply(sch_t *s, const sch_inst_t *in, ir_loop_kind_t kind, const char *thread,
                           tn_err_t *err) {
  int64_t loop = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_LOOP, &loop, err);
  return rc < 0 ? rc : sch_prim_loop_kind(s, (int)loop, kind, thread, err);
}

static int ap_parallel(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  return loop_kind_apply(s, in, IR_LOOP_PARALLEL, NULL, err);
}
static int ap_vectorize(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  return loop_kind_apply(s, in, IR_LOOP_VECTORIZED, NULL, err);
}
static int ap_unroll(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  return loop_kind_apply(s, in, IR_LOOP_UNROLLED, NULL, err);
}
static int ap_bind(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  const char *thread = NULL;
  int rc = attr_str(in, 0, &thread, err);
  return rc < 0 ? rc : loop_kind_apply(s, in, IR_LOOP_THREAD, thread, err);
}

static int ap_annotate(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t uid = 0;
  const char *key = NULL;
  int rc;
  if ((rc = arg_node(s, in, 0, &uid, err)) < 0 || (rc = attr_str(in, 0, &key, err)) < 0) return rc;
  ir_annot_t v = {.key = key};
  if (in->inputs[1].kind == SCH_ARG_STR) {
    v.is_str = true;
    v.sval = in->inputs[1].s;
  } else if (arg_intval(s, &in->inputs[1], &v.ival) < 0) {
    return tn_err_set(err, TN_EINVAL, "the value must be an integer, an integer handle or a string");
  }
  return sch_prim_annotate(s, (int)uid, key, &v, err);
}

static int ap_unannotate(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t uid = 0;
  const char *key = NULL;
  int rc;
  if ((rc = arg_node(s, in, 0, &uid, err)) < 0 || (rc = attr_str(in, 0, &key, err)) < 0) return rc;
  return sch_prim_unannotate(s, (int)uid, key, err);
}

static int cache_apply(sch_t *s, const sch_inst_t *in, apply_out_t *o, bool write, tn_err_t *err) {
  int64_t blk = 0, index = 0;
  const char *scope_name = NULL;
  ir_scope_t scope;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = attr_int(in, 0, 0, &index, err)) < 0 ||
      (rc = attr_str(in, 1, &scope_name, err)) < 0)
    return rc;
  if (in->ninputs > 1 && (in->inputs[1].kind != SCH_ARG_LIST || in->inputs[1].n != 0))
    return tn_err_set(err, TN_EUNSUPPORTED, "an explicit consumer list is not supported (use [])");
  if (ir_scope_parse(scope_name, &scope) < 0)
    return tn_err_set(err, TN_EINVAL, "unknown storage scope \"%s\" (expected global, shared or local)", scope_name);
  if (index < 0 || index > 1000) return tn_err_set(err, TN_EINVAL, "buffer index %lld out of range", (long long)index);
  int out;
  rc = write ? sch_prim_cache_write(s, (int)blk, (int)index, scope, &out, err)
             : sch_prim_cache_read(s, (int)blk, (int)index, scope, &out, err);
  return rc < 0 ? rc : take_uids(o, &out, 1);
}

static int ap_cache_read(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return cache_apply(s, in, o, false, err);
}
static int ap_cache_write(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  return cache_apply(s, in, o, true, err);
}

static int compute_at_apply(sch_t *s, const sch_inst_t *in, bool reverse, tn_err_t *err) {
  int64_t blk = 0, loop = 0, preserve = 0;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = arg_rv(s, in, 1, SCH_RV_LOOP, &loop, err)) < 0 ||
      (rc = attr_int(in, 0, 1, &preserve, err)) < 0)
    return rc;
  if (loop == SCH_LOC_ROOT) return TN_OK;
  if (loop == SCH_LOC_INLINE)
    return reverse ? sch_prim_reverse_compute_inline(s, (int)blk, err) : sch_prim_compute_inline(s, (int)blk, err);
  return sch_prim_compute_at(s, (int)blk, (int)loop, reverse, preserve != 0, err);
}

static int ap_compute_at(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  return compute_at_apply(s, in, false, err);
}
static int ap_rcompute_at(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  return compute_at_apply(s, in, true, err);
}

static int ap_inline(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err);
  return rc < 0 ? rc : sch_prim_compute_inline(s, (int)blk, err);
}
static int ap_rinline(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err);
  return rc < 0 ? rc : sch_prim_reverse_compute_inline(s, (int)blk, err);
}

static int ap_decompose(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t blk = 0, loop = 0;
  int rc, out;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = arg_rv(s, in, 1, SCH_RV_LOOP, &loop, err)) < 0 ||
      (rc = sch_prim_decompose_reduction(s, (int)blk, (int)loop, &out, err)) < 0)
    return rc;
  return take_uids(o, &out, 1);
}

static int ap_rfactor(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t loop = 0, axis = 0;
  int rc, out;
  if ((rc = arg_rv(s, in, 0, SCH_RV_LOOP, &loop, err)) < 0 || (rc = attr_int(in, 0, 0, &axis, err)) < 0 ||
      (rc = sch_prim_rfactor(s, (int)loop, (int)axis, &out, err)) < 0)
    return rc;
  return take_uids(o, &out, 1);
}

static int ap_blockize(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t loop = 0;
  int rc, out;
  if ((rc = arg_rv(s, in, 0, SCH_RV_LOOP, &loop, err)) < 0 || (rc = sch_prim_blockize(s, (int)loop, &out, err)) < 0)
    return rc;
  return take_uids(o, &out, 1);
}

static int ap_tensorize(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t uid = 0;
  const char *name = NULL;
  int rc;
  if ((rc = arg_node(s, in, 0, &uid, err)) < 0 || (rc = attr_str(in, 0, &name, err)) < 0) return rc;
  return sch_prim_tensorize(s, (int)uid, name, err);
}

static int ap_storage_align(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o,
                            tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0, index = 0, axis = 0, factor = 0, offset = 0;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = attr_int(in, 0, 0, &index, err)) < 0 ||
      (rc = attr_int(in, 1, 0, &axis, err)) < 0 || (rc = attr_int(in, 2, 0, &factor, err)) < 0 ||
      (rc = attr_int(in, 3, 0, &offset, err)) < 0)
    return rc;
  if (index < 0 || index > INT32_MAX || axis < 0 || axis > INT32_MAX)
    return tn_err_set(err, TN_EINVAL, "buffer index and axis must be small non-negative integers");
  return sch_prim_storage_align(s, (int)blk, (int)index, (int)axis, factor, offset, err);
}

static int ap_hoist_packing(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o,
                            tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err);
  return rc < 0 ? rc : sch_prim_hoist_packing(s, (int)blk, err);
}

static int ap_reindex(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t blk = 0, index = 0, type = 0;
  int rc, out;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = attr_int(in, 0, 0, &index, err)) < 0 ||
      (rc = attr_int(in, 1, 0, &type, err)) < 0)
    return rc;
  if (type != 0 && type != 1)
    return tn_err_set(err, TN_EINVAL, "attribute 1 must be 0 (a read buffer) or 1 (a write buffer), got %lld",
                      (long long)type);
  if (index < 0 || index > INT32_MAX) return tn_err_set(err, TN_EINVAL, "buffer index %lld", (long long)index);
  if ((rc = sch_prim_reindex(s, (int)blk, (int)index, type == 1, &out, err)) < 0) return rc;
  return take_uids(o, &out, 1);
}

static int ap_fuse_block_iters(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o,
                               tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0, first = 0, n = 0;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = attr_int(in, 0, 0, &first, err)) < 0 ||
      (rc = attr_int(in, 1, 0, &n, err)) < 0)
    return rc;
  if (first < 0 || first > SCH_MAX_RVS_OUT || n < 1 || n > SCH_MAX_RVS_OUT) /* either may be any int64 */
    return tn_err_set(err, TN_EINVAL, "first iterator %lld, count %lld: need 0 <= first <= %d and 1 <= count <= %d",
                      (long long)first, (long long)n, SCH_MAX_RVS_OUT, SCH_MAX_RVS_OUT);
  return sch_prim_fuse_block_iters(s, (int)blk, (int)first, (int)n, err);
}

static int ap_pad_einsum(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)d, (void)nd;
  int64_t blk = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err);
  if (rc < 0) return rc;
  if (in->nattrs < 1 || in->attrs[0].kind != SCH_ARG_LIST || in->attrs[0].n < 1 || in->attrs[0].n > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EINVAL, "attribute 0 must be the paddings, a list of 1 .. %d integers", SCH_MAX_RVS_OUT);
  int64_t pad[SCH_MAX_RVS_OUT];
  for (int i = 0; i < in->attrs[0].n; i++) {
    const sch_arg_t *a = &in->attrs[0].items[i];
    if (a->kind != SCH_ARG_INT) return tn_err_set(err, TN_EINVAL, "padding %d must be an integer", i);
    pad[i] = a->i;
  }
  int out[SCH_MAX_RVS_OUT], n = 0;
  if ((rc = sch_prim_pad_einsum(s, (int)blk, pad, in->attrs[0].n, out, &n, err)) < 0) return rc;
  return take_uids(o, out, n);
}

static int ap_transform_layout(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o,
                               tn_err_t *err) {
  (void)d, (void)nd, (void)o;
  int64_t blk = 0, index = 0;
  const char *side = NULL;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err)) < 0 || (rc = attr_int(in, 0, 0, &index, err)) < 0 ||
      (rc = attr_str(in, 1, &side, err)) < 0)
    return rc;
  if (strcmp(side, "read") && strcmp(side, "write"))
    return tn_err_set(err, TN_EINVAL, "attribute 1 must be \"read\" or \"write\", got \"%s\"", side);
  if (in->nattrs < 3 || in->attrs[2].kind != SCH_ARG_LIST || in->attrs[2].n > IR_MAX_DIMS)
    return tn_err_set(err, TN_EINVAL, "attribute 2 must be the permutation, a list of at most %d integers", IR_MAX_DIMS);
  int perm[IR_MAX_DIMS];
  for (int i = 0; i < in->attrs[2].n; i++) {
    const sch_arg_t *a = &in->attrs[2].items[i];
    if (a->kind != SCH_ARG_INT || a->i < 0 || a->i >= IR_MAX_DIMS)
      return tn_err_set(err, TN_EINVAL, "permutation entry %d must be an integer in 0 .. %d", i, IR_MAX_DIMS - 1);
    perm[i] = (int)a->i;
  }
  if (index < 0 || index > INT32_MAX) return tn_err_set(err, TN_EINVAL, "buffer index %lld", (long long)index);
  return sch_prim_transform_layout(s, (int)blk, (int)index, !strcmp(side, "write"), perm, in->attrs[2].n, err);
}

static int ap_sample_tile(sch_t *s, const sch_inst_t *in, const int64_t *dec, int ndec, apply_out_t *o,
                          tn_err_t *err) {
  int64_t uid = 0, n = 0, maxi = 0;
  int rc;
  if ((rc = arg_rv(s, in, 0, SCH_RV_LOOP, &uid, err)) < 0 || (rc = attr_int(in, 0, 0, &n, err)) < 0 ||
      (rc = attr_int(in, 1, -1, &maxi, err)) < 0)
    return rc;
  ir_loop_t *l = sch_find_loop(s->f, (int)uid);
  if (!l) return tn_err_set(err, TN_EINVAL, "the loop no longer exists");
  if (n < 1 || n > 16) return tn_err_set(err, TN_EINVAL, "n = %lld; expected 1..16 tiles", (long long)n);
  if (dec && ndec != n)
    return tn_err_set(err, TN_EINVAL, "decision has %d factors, expected %lld", ndec, (long long)n);
  if (dec) {
    memcpy(o->decision, dec, sizeof(int64_t) * (size_t)n);
    sch_repair_tile(l->extent, o->decision, (int)n);
  } else if (sch_sample_tile(&s->rng, l->extent, (int)n, maxi, o->decision) < 0) {
    return tn_err_set(err, TN_EINVAL, "cannot tile loop %s (extent %lld) into %lld factors", sch_loop_name(l),
                      (long long)l->extent, (long long)n);
  }
  o->ndecision = o->n = (int)n;
  memcpy(o->values, o->decision, sizeof(int64_t) * (size_t)n);
  return TN_OK;
}

static int ap_sample_cat(sch_t *s, const sch_inst_t *in, const int64_t *dec, int ndec, apply_out_t *o,
                         tn_err_t *err) {
  if (in->nattrs != 2 || in->attrs[0].kind != SCH_ARG_LIST || in->attrs[1].kind != SCH_ARG_LIST ||
      in->attrs[0].n != in->attrs[1].n || in->attrs[0].n < 1 || in->attrs[0].n > SCH_MAX_RVS_OUT)
    return tn_err_set(err, TN_EINVAL, "attributes must be [candidates] and [probabilities] of equal, non-zero length");
  int n = in->attrs[0].n;
  double probs[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) {
    const sch_arg_t *c = &in->attrs[0].items[i], *p = &in->attrs[1].items[i];
    if (c->kind != SCH_ARG_INT) return tn_err_set(err, TN_EINVAL, "candidate %d must be an integer", i);
    probs[i] = p->kind == SCH_ARG_FLOAT ? p->f : p->kind == SCH_ARG_INT ? (double)p->i : -1;
    if (!(probs[i] >= 0)) return tn_err_set(err, TN_EINVAL, "probability %d must be a number >= 0", i);
  }
  int64_t idx = 0;
  if (dec) {
    if (ndec != 1 || dec[0] < 0 || dec[0] >= n)
      return tn_err_set(err, TN_EINVAL, "decision must be one index in [0, %d)", n);
    idx = dec[0];
  } else {
    idx = sch_sample_index(&s->rng, probs, n);
  }
  o->decision[0] = idx;
  o->ndecision = 1;
  o->values[0] = in->attrs[0].items[idx].i;
  o->n = 1;
  return TN_OK;
}

static int ap_sample_loc(sch_t *s, const sch_inst_t *in, const int64_t *dec, int ndec, apply_out_t *o,
                         tn_err_t *err) {
  int64_t blk = 0;
  int rc = arg_rv(s, in, 0, SCH_RV_BLOCK, &blk, err);
  if (rc < 0) return rc;
  int *cands = NULL, n = 0;
  bool can_inline = false;
  if ((rc = sch_compute_location_candidates(s, (int)blk, &cands, &n, &can_inline, err)) < 0) return rc;
  int64_t d = 0;
  if (dec) {
    if (ndec != 1) {
      free(cands);
      return tn_err_set(err, TN_EINVAL, "decision must be one integer");
    }
    d = dec[0];
    if (d >= n) d = n - 1; /* nearest smaller valid location (or root) */
    if (d < -2 || (d == -2 && !can_inline)) d = -1;
  } else {
    int64_t choices = n + 1 + can_inline; /* loops, root, inline */
    d = (int64_t)tn_rng_below(&s->rng, (uint64_t)choices) - 1 - can_inline;
  }
  o->decision[0] = d;
  o->ndecision = 1;
  o->values[0] = d == -2 ? SCH_LOC_INLINE : d == -1 ? SCH_LOC_ROOT : cands[d];
  o->n = 1;
  free(cands);
  return TN_OK;
}

static int ap_nothing(sch_t *s, const sch_inst_t *in, const int64_t *d, int nd, apply_out_t *o, tn_err_t *err) {
  (void)s, (void)in, (void)d, (void)nd, (void)o, (void)err;
  return TN_OK;
}

/* ---- the table --------------------------------------------------------- */

#define MANY SCH_MAX_RVS_OUT
static const kind_info_t kinds[SCH_INST__COUNT] = {
    [SCH_GET_BLOCK] = {"GetBlock", "get_block", 0, 0, 1, 2, SCH_RV_BLOCK, true, false, ap_get_block, .keeps_index = true},
    [SCH_GET_LOOPS] = {"GetLoops", "get_loops", 1, 1, 0, 0, SCH_RV_LOOP, true, false, ap_get_loops, .keeps_index = true},
    [SCH_GET_CHILD_BLOCKS] = {"GetChildBlocks", "get_child_blocks", 1, 1, 0, 0, SCH_RV_BLOCK, true, false, ap_get_children, .keeps_index = true},
    [SCH_GET_PRODUCERS] = {"GetProducers", "get_producers", 1, 1, 0, 0, SCH_RV_BLOCK, true, false, ap_get_producers, .keeps_index = true},
    [SCH_GET_CONSUMERS] = {"GetConsumers", "get_consumers", 1, 1, 0, 0, SCH_RV_BLOCK, true, false, ap_get_consumers, .keeps_index = true},
    [SCH_SPLIT] = {"Split", "split", 2, MANY, 0, 2, SCH_RV_LOOP, false, false, ap_split},
    [SCH_FUSE] = {"Fuse", "fuse", 1, MANY, 0, 1, SCH_RV_LOOP, false, false, ap_fuse},
    [SCH_REORDER] = {"Reorder", "reorder", 1, MANY, 0, 0, SCH_RV_LOOP, false, false, ap_reorder},
    [SCH_PARALLEL] = {"Parallel", "parallel", 1, 1, 0, 0, SCH_RV_LOOP, false, false, ap_parallel},
    [SCH_VECTORIZE] = {"Vectorize", "vectorize", 1, 1, 0, 0, SCH_RV_LOOP, false, false, ap_vectorize},
    [SCH_UNROLL] = {"Unroll", "unroll", 1, 1, 0, 0, SCH_RV_LOOP, false, false, ap_unroll},
    [SCH_BIND] = {"Bind", "bind", 1, 1, 1, 1, SCH_RV_LOOP, false, false, ap_bind},
    [SCH_ANNOTATE] = {"Annotate", "annotate", 2, 2, 1, 1, SCH_RV_LOOP, false, false, ap_annotate, .keeps_index = true, .checks_first = true},
    [SCH_UNANNOTATE] = {"Unannotate", "unannotate", 1, 1, 1, 1, SCH_RV_LOOP, false, false, ap_unannotate, .keeps_index = true, .checks_first = true},
    [SCH_CACHE_READ] = {"CacheRead", "cache_read", 1, 2, 2, 2, SCH_RV_BLOCK, false, false, ap_cache_read},
    [SCH_CACHE_WRITE] = {"CacheWrite", "cache_write", 1, 2, 2, 2, SCH_RV_BLOCK, false, false, ap_cache_write},
    [SCH_COMPUTE_AT] = {"ComputeAt", "compute_at", 2, 2, 0, 2, SCH_RV_LOOP, false, false, ap_compute_at},
    [SCH_REVERSE_COMPUTE_AT] = {"ReverseComputeAt", "reverse_compute_at", 2, 2, 0, 2, SCH_RV_LOOP, false, false, ap_rcompute_at},
    [SCH_COMPUTE_INLINE] = {"ComputeInline", "compute_inline", 1, 1, 0, 0, SCH_RV_LOOP, false, false, ap_inline, .keeps_index = true, .checks_first = true},
    [SCH_REVERSE_COMPUTE_INLINE] = {"ReverseComputeInline", "reverse_compute_inline", 1, 1, 0, 0, SCH_RV_LOOP, false, false, ap_rinline, .checks_first = true},
    [SCH_DECOMPOSE_REDUCTION] = {"DecomposeReduction", "decompose_reduction", 2, 2, 0, 0, SCH_RV_BLOCK, false, false, ap_decompose},
    [SCH_RFACTOR] = {"RFactor", "rfactor", 1, 1, 1, 1, SCH_RV_BLOCK, false, false, ap_rfactor},
    [SCH_BLOCKIZE] = {"Blockize", "blockize", 1, 1, 0, 0, SCH_RV_BLOCK, false, false, ap_blockize},
    [SCH_TENSORIZE] = {"Tensorize", "tensorize", 1, 1, 1, 1, SCH_RV_BLOCK, false, false, ap_tensorize},
    [SCH_STORAGE_ALIGN] = {"StorageAlign", "storage_align", 1, 1, 4, 4, SCH_RV_BLOCK, false, false, ap_storage_align},
    [SCH_TRANSFORM_LAYOUT] = {"TransformLayout", "transform_layout", 1, 1, 3, 3, SCH_RV_BLOCK, false, false, ap_transform_layout},
    [SCH_HOIST_PACKING] = {"HoistPacking", "hoist_packing", 1, 1, 0, 0, SCH_RV_BLOCK, false, false, ap_hoist_packing},
    [SCH_REINDEX] = {"ReIndex", "reindex", 1, 1, 2, 2, SCH_RV_BLOCK, false, false, ap_reindex},
    [SCH_FUSE_BLOCK_ITERS] = {"FuseBlockIters", "fuse_block_iters", 1, 1, 2, 2, SCH_RV_BLOCK, false, false, ap_fuse_block_iters},
    [SCH_PAD_EINSUM] = {"PadEinsum", "pad_einsum", 1, 1, 1, 1, SCH_RV_BLOCK, false, false, ap_pad_einsum},
    [SCH_SAMPLE_PERFECT_TILE] = {"SamplePerfectTile", "sample_perfect_tile", 1, 1, 2, 2, SCH_RV_EXPR, true, true, ap_sample_tile, .keeps_index = true},
    [SCH_SAMPLE_CATEGORICAL] = {"SampleCategorical", "sample_categorical", 0, 0, 2, 2, SCH_RV_EXPR, true, true, ap_sample_cat, .keeps_index = true},
    [SCH_SAMPLE_COMPUTE_LOCATION] = {"SampleComputeLocation", "sample_compute_location", 1, 1, 0, 0, SCH_RV_LOOP, true, true, ap_sample_loc, .keeps_index = true},
    [SCH_ENTER_POSTPROC] = {"EnterPostproc", "enter_postproc", 0, 0, 0, 0, SCH_RV_LOOP, false, false, ap_nothing, .keeps_index = true},
};

const char *sch_inst_name(sch_inst_kind_t k) {
  return (unsigned)k < SCH_INST__COUNT ? kinds[k].name : "?";
}

int sch_inst_parse_name(const char *name, sch_inst_kind_t *out) {
  for (int k = 0; k < SCH_INST__COUNT; k++)
    if (strcmp(kinds[k].name, name) == 0) {
      *out = (sch_inst_kind_t)k;
      return TN_OK;
    }
  return TN_EINVAL;
}

bool sch_inst_is_pure(sch_inst_kind_t k) { return (unsigned)k < SCH_INST__COUNT && kinds[k].pure; }
bool sch_inst_is_sampling(sch_inst_kind_t k) { return (unsigned)k < SCH_INST__COUNT && kinds[k].sampling; }
sch_rv_kind_t sch_inst_output_kind(sch_inst_kind_t k) {
  return (unsigned)k < SCH_INST__COUNT ? kinds[k].out_kind : SCH_RV_EXPR;
}

/* ---- sch_apply --------------------------------------------------------- */

int sch_apply(sch_t *s, const sch_inst_t *inst, const int64_t *decision, int ndecision, sch_rv_t *outputs,
              int *noutputs, tn_err_t *err) {
  if ((unsigned)inst->kind >= SCH_INST__COUNT) return tn_err_set(err, TN_EINVAL, "unknown instruction kind %d", inst->kind);
  const kind_info_t *k = &kinds[inst->kind];
  if (inst->ninputs < k->min_in || inst->ninputs > k->max_in)
    return tn_err_set(err, TN_EINVAL, "%s: takes %d..%d inputs, got %d", k->api, k->min_in, k->max_in, inst->ninputs);
  if (inst->nattrs < k->min_attrs || inst->nattrs > k->max_attrs)
    return tn_err_set(err, TN_EINVAL, "%s: takes %d..%d attributes, got %d", k->api, k->min_attrs, k->max_attrs,
                      inst->nattrs);
  /* Primitives check before they edit, but a snapshot makes "unchanged on
   * error" hold even for a check a primitive missed. */
  ir_func_t *backup = k->pure || k->checks_first || s->no_backup ? NULL : ir_func_copy(s->f);
  apply_out_t o; /* 16 KB: only the counts are cleared (instructions fill what they report) */
  o.n = o.ndecision = 0;
  int rc = k->apply(s, inst, decision, ndecision, &o, err);
  if (rc < 0 || !k->keeps_index) sch_index_drop(s);
  if (rc < 0) {
    if (backup) {
      ir_func_free(s->f);
      s->f = backup;
    }
    return tn_err_prefix(err, "%s", k->api);
  }
  ir_func_free(backup);
  sch_inst_t rec = *inst;
  sch_rv_t outs[SCH_MAX_RVS_OUT];
  for (int i = 0; i < o.n; i++) outs[i] = sch_new_rv(s, k->out_kind, o.values[i]);
  rec.outputs = outs;
  rec.noutputs = o.n;
  rec.decision = k->sampling ? o.decision : NULL;
  rec.ndecision = k->sampling ? o.ndecision : 0;
  sch_trace_append(s->trace, &rec);
  if (outputs) memcpy(outputs, outs, sizeof(sch_rv_t) * (size_t)o.n);
  if (noutputs) *noutputs = o.n;
  return TN_OK;
}

/* ---- typed front ends -------------------------------------------------- */

static int run(sch_t *s, sch_inst_kind_t kind, sch_arg_t *in, int nin, sch_arg_t *attrs, int nattrs,
               sch_rv_t *out, int *nout, tn_err_t *err) {
  sch_inst_t inst = {.kind = kind, .inputs = in, .ninputs = nin, .attrs = attrs, .nattrs = nattrs};
  return sch_apply(s, &inst, NULL, 0, out, nout, err);
}

int sch_get_block(sch_t *s, const char *name, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t a[2] = {sch_arg_str(name), sch_arg_str("main")};
  return run(s, SCH_GET_BLOCK, NULL, 0, a, 2, out, NULL, err);
}

static int query1(sch_t *s, sch_inst_kind_t k, sch_rv_t rv, sch_rv_t *out, int *n, tn_err_t *err) {
  sch_arg_t in = sch_arg_rv(rv);
  return run(s, k, &in, 1, NULL, 0, out, n, err);
}

int sch_get_loops(sch_t *s, sch_rv_t b, sch_rv_t *out, int *n, tn_err_t *err) { return query1(s, SCH_GET_LOOPS, b, out, n, err); }
int sch_get_child_blocks(sch_t *s, sch_rv_t b, sch_rv_t *out, int *n, tn_err_t *err) { return query1(s, SCH_GET_CHILD_BLOCKS, b, out, n, err); }
int sch_get_producers(sch_t *s, sch_rv_t b, sch_rv_t *out, int *n, tn_err_t *err) { return query1(s, SCH_GET_PRODUCERS, b, out, n, err); }
int sch_get_consumers(sch_t *s, sch_rv_t b, sch_rv_t *out, int *n, tn_err_t *err) { return query1(s, SCH_GET_CONSUMERS, b, out, n, err); }

int sch_split(sch_t *s, sch_rv_t loop, const sch_arg_t *factors, int nfactors, sch_rv_t *out, tn_err_t *err) {
  if (nfactors < 1 || nfactors >= SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "split: 1..%d factors", SCH_MAX_RVS_OUT - 1);
  sch_arg_t in[SCH_MAX_RVS_OUT];
  in[0] = sch_arg_rv(loop);
  memcpy(in + 1, factors, sizeof(sch_arg_t) * (size_t)nfactors);
  sch_arg_t attrs[2] = {sch_arg_int(1), sch_arg_int(0)};
  return run(s, SCH_SPLIT, in, nfactors + 1, attrs, 2, out, NULL, err);
}

static int loops_inst(sch_t *s, sch_inst_kind_t k, const sch_rv_t *loops, int n, sch_arg_t *attrs, int nattrs,
                      sch_rv_t *out, tn_err_t *err) {
  if (n < 1 || n > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "%s: 1..%d loops", kinds[k].api, SCH_MAX_RVS_OUT);
  sch_arg_t in[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) in[i] = sch_arg_rv(loops[i]);
  return run(s, k, in, n, attrs, nattrs, out, NULL, err);
}

int sch_fuse(sch_t *s, const sch_rv_t *loops, int n, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t attrs[1] = {sch_arg_int(1)};
  return loops_inst(s, SCH_FUSE, loops, n, attrs, 1, out, err);
}

int sch_reorder(sch_t *s, const sch_rv_t *loops, int n, tn_err_t *err) {
  return loops_inst(s, SCH_REORDER, loops, n, NULL, 0, NULL, err);
}

int sch_parallel(sch_t *s, sch_rv_t l, tn_err_t *err) { return loops_inst(s, SCH_PARALLEL, &l, 1, NULL, 0, NULL, err); }
int sch_vectorize(sch_t *s, sch_rv_t l, tn_err_t *err) { return loops_inst(s, SCH_VECTORIZE, &l, 1, NULL, 0, NULL, err); }
int sch_unroll(sch_t *s, sch_rv_t l, tn_err_t *err) { return loops_inst(s, SCH_UNROLL, &l, 1, NULL, 0, NULL, err); }

int sch_bind(sch_t *s, sch_rv_t l, const char *thread, tn_err_t *err) {
  sch_arg_t attrs[1] = {sch_arg_str(thread)};
  return loops_inst(s, SCH_BIND, &l, 1, attrs, 1, NULL, err);
}

int sch_annotate(sch_t *s, sch_rv_t node, const char *key, sch_arg_t value, tn_err_t *err) {
  sch_arg_t in[2] = {sch_arg_rv(node), value}, attrs[1] = {sch_arg_str(key)};
  return run(s, SCH_ANNOTATE, in, 2, attrs, 1, NULL, NULL, err);
}

int sch_unannotate(sch_t *s, sch_rv_t node, const char *key, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(node)}, attrs[1] = {sch_arg_str(key)};
  return run(s, SCH_UNANNOTATE, in, 1, attrs, 1, NULL, NULL, err);
}

static int cache_inst(sch_t *s, sch_inst_kind_t k, sch_rv_t b, int index, const char *scope, sch_rv_t *out,
                      tn_err_t *err) {
  sch_arg_t consumers = {.kind = SCH_ARG_LIST};
  sch_arg_t in[2] = {sch_arg_rv(b), consumers}, attrs[2] = {sch_arg_int(index), sch_arg_str(scope)};
  return run(s, k, in, 2, attrs, 2, out, NULL, err);
}

int sch_cache_read(sch_t *s, sch_rv_t b, int index, const char *scope, sch_rv_t *out, tn_err_t *err) {
  return cache_inst(s, SCH_CACHE_READ, b, index, scope, out, err);
}

int sch_cache_write(sch_t *s, sch_rv_t b, int index, const char *scope, sch_rv_t *out, tn_err_t *err) {
  return cache_inst(s, SCH_CACHE_WRITE, b, index, scope, out, err);
}

static int at_inst(sch_t *s, sch_inst_kind_t k, sch_rv_t b, sch_rv_t l, bool preserve, tn_err_t *err) {
  sch_arg_t in[2] = {sch_arg_rv(b), sch_arg_rv(l)}, attrs[2] = {sch_arg_int(preserve), sch_arg_int(-1)};
  return run(s, k, in, 2, attrs, 2, NULL, NULL, err);
}

int sch_compute_at(sch_t *s, sch_rv_t b, sch_rv_t l, bool preserve, tn_err_t *err) {
  return at_inst(s, SCH_COMPUTE_AT, b, l, preserve, err);
}

int sch_reverse_compute_at(sch_t *s, sch_rv_t b, sch_rv_t l, bool preserve, tn_err_t *err) {
  return at_inst(s, SCH_REVERSE_COMPUTE_AT, b, l, preserve, err);
}

int sch_compute_inline(sch_t *s, sch_rv_t b, tn_err_t *err) { return query1(s, SCH_COMPUTE_INLINE, b, NULL, NULL, err); }
int sch_reverse_compute_inline(sch_t *s, sch_rv_t b, tn_err_t *err) {
  return query1(s, SCH_REVERSE_COMPUTE_INLINE, b, NULL, NULL, err);
}

int sch_decompose_reduction(sch_t *s, sch_rv_t b, sch_rv_t l, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t in[2] = {sch_arg_rv(b), sch_arg_rv(l)};
  return run(s, SCH_DECOMPOSE_REDUCTION, in, 2, NULL, 0, out, NULL, err);
}

int sch_rfactor(sch_t *s, sch_rv_t l, int factor_axis, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(l)}, attrs[1] = {sch_arg_int(factor_axis)};
  return run(s, SCH_RFACTOR, in, 1, attrs, 1, out, NULL, err);
}

int sch_blockize(sch_t *s, sch_rv_t l, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(l)};
  return run(s, SCH_BLOCKIZE, in, 1, NULL, 0, out, NULL, err);
}

int sch_tensorize(sch_t *s, sch_rv_t b, const char *intrin, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(b)}, attrs[1] = {sch_arg_str(intrin)};
  return run(s, SCH_TENSORIZE, in, 1, attrs, 1, NULL, NULL, err);
}

int sch_storage_align(sch_t *s, sch_rv_t b, int buffer_index, int axis, int64_t factor, int64_t offset,
                      tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(b)},
            attrs[4] = {sch_arg_int(buffer_index), sch_arg_int(axis), sch_arg_int(factor), sch_arg_int(offset)};
  return run(s, SCH_STORAGE_ALIGN, in, 1, attrs, 4, NULL, NULL, err);
}

int sch_hoist_packing(sch_t *s, sch_rv_t b, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(b)};
  return run(s, SCH_HOIST_PACKING, in, 1, NULL, 0, NULL, NULL, err);
}

int sch_transform_layout(sch_t *s, sch_rv_t b, int buffer_index, bool write, const int *perm, int n, tn_err_t *err) {
  if (n < 0 || n > IR_MAX_DIMS) return tn_err_set(err, TN_EINVAL, "transform_layout: at most %d dimensions", IR_MAX_DIMS);
  sch_arg_t items[IR_MAX_DIMS];
  for (int i = 0; i < n; i++) items[i] = sch_arg_int(perm[i]);
  sch_arg_t in[1] = {sch_arg_rv(b)},
            attrs[3] = {sch_arg_int(buffer_index), sch_arg_str(write ? "write" : "read"),
                        {.kind = SCH_ARG_LIST, .items = items, .n = n}};
  return run(s, SCH_TRANSFORM_LAYOUT, in, 1, attrs, 3, NULL, NULL, err);
}

int sch_reindex(sch_t *s, sch_rv_t b, int buffer_index, bool write, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(b)}, attrs[2] = {sch_arg_int(buffer_index), sch_arg_int(write)};
  return run(s, SCH_REINDEX, in, 1, attrs, 2, out, NULL, err);
}

int sch_fuse_block_iters(sch_t *s, sch_rv_t b, int first, int n, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(b)}, attrs[2] = {sch_arg_int(first), sch_arg_int(n)};
  return run(s, SCH_FUSE_BLOCK_ITERS, in, 1, attrs, 2, NULL, NULL, err);
}

int sch_pad_einsum(sch_t *s, sch_rv_t b, const int64_t *padding, int npad, sch_rv_t *out, int *n, tn_err_t *err) {
  if (npad < 1 || npad > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "pad_einsum: 1..%d paddings", SCH_MAX_RVS_OUT);
  sch_arg_t items[SCH_MAX_RVS_OUT];
  for (int i = 0; i < npad; i++) items[i] = sch_arg_int(padding[i]);
  sch_arg_t in[1] = {sch_arg_rv(b)}, attrs[1] = {{.kind = SCH_ARG_LIST, .items = items, .n = npad}};
  return run(s, SCH_PAD_EINSUM, in, 1, attrs, 1, out, n, err);
}

int sch_sample_perfect_tile(sch_t *s, sch_rv_t l, int n, int max_innermost, sch_rv_t *out, tn_err_t *err) {
  sch_arg_t in[1] = {sch_arg_rv(l)}, attrs[2] = {sch_arg_int(n), sch_arg_int(max_innermost)};
  return run(s, SCH_SAMPLE_PERFECT_TILE, in, 1, attrs, 2, out, NULL, err);
}

int sch_sample_categorical(sch_t *s, const int64_t *cands, const double *probs, int n, sch_rv_t *out,
                           tn_err_t *err) {
  if (n < 1 || n > SCH_MAX_RVS_OUT) return tn_err_set(err, TN_EINVAL, "sample_categorical: 1..%d candidates", SCH_MAX_RVS_OUT);
  sch_arg_t c[SCH_MAX_RVS_OUT], p[SCH_MAX_RVS_OUT];
  for (int i = 0; i < n; i++) c[i] = sch_arg_int(cands[i]), p[i] = sch_arg_float(probs[i]);
  sch_arg_t attrs[2] = {{.kind = SCH_ARG_LIST, .items = c, .n = n}, {.kind = SCH_ARG_LIST, .items = p, .n = n}};
  return run(s, SCH_SAMPLE_CATEGORICAL, NULL, 0, attrs, 2, out, NULL, err);
}

int sch_sample_compute_location(sch_t *s, sch_rv_t b, sch_rv_t *out, tn_err_t *err) {
  return query1(s, SCH_SAMPLE_COMPUTE_LOCATION, b, out, NULL, err);
}

int sch_enter_postproc(sch_t *s, tn_err_t *err) { return run(s, SCH_ENTER_POSTPROC, NULL, 0, NULL, 0, NULL, NULL, err); }
