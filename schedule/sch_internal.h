/* sch_internal.h — what the schedule module's files share: the schedule
 * state, tree utilities, and the primitives themselves, which work on node
 * uids (the instruction layer in inst.c maps RVs to uids and back). */
#ifndef TUNED_SCH_INTERNAL_H
#define TUNED_SCH_INTERNAL_H

#include "ir/analysis.h"
#include "schedule.h"

/* ---- state -------------------------------------------------------------- */

typedef struct sch_rv_entry {
  sch_rv_kind_t kind;
  int64_t value; /* uid for blocks/loops (or SCH_LOC_*), the integer for exprs */
} sch_rv_entry_t;

typedef struct sch_index sch_index_t;

struct sch {
  ir_func_t *f; /* owned; primitives edit it in place after their checks */
  sch_index_t *idx; /* lookups over f (index.c), NULL until asked for */
  sch_rv_entry_t *rvs;
  int nrvs, rvcap;
  sch_trace_t *trace;
  tn_rng_t rng;
  /* set while a trace is replayed: a failing instruction discards the whole
   * schedule, so no instruction needs a snapshot to roll back to (a copy of
   * the function per instruction made replays quadratic in its size) */
  bool no_backup;
};

sch_rv_t sch_new_rv(sch_t *s, sch_rv_kind_t kind, int64_t value);

/* ---- the lookup index (index.c) ------------------------------------------ */

/* Blocks in a list that grows (each at most once). */
typedef struct sch_blist {
  ir_block_t **v;
  int n, cap;
} sch_blist_t;

/* The blocks whose regions read / write one buffer, in tree order as built. */
typedef struct sch_buf_users {
  sch_blist_t readers, writers;
} sch_buf_users_t;

struct sch_index {
  const ir_func_t *f;     /* the function described; another one (a trial copy) rebuilds */
  ir_stmt_t **by_uid;     /* loop or block by uid, NULL when gone */
  int nuid;
  const ir_stmt_t **pkeys; /* statement -> parent statement (open addressing) */
  ir_stmt_t **pvals;
  size_t pcap;
  ir_stmt_t **names; /* blocks by name (open addressing) */
  size_t ncap;
  bool dup_names;    /* two blocks share a name: lookups by name walk, as ir_func_find_block */
  sch_buf_users_t *bufs; /* by buffer id */
  int nbufs;
};

/* The index of s->f, built by one walk when absent or built for another
 * function.  Valid until the tree changes: sch_apply drops it after every
 * instruction that may change the tree (sch_inst keeps_index says which do
 * not), and compute_inline, which keeps it, updates it with the calls below. */
sch_index_t *sch_index_get(sch_t *s);
void sch_index_drop(sch_t *s);
ir_stmt_t *sch_index_find(const sch_index_t *x, int uid);
ir_stmt_t *sch_index_parent(const sch_index_t *x, const ir_stmt_t *s);
/* The pointer in the tree holding s (in its parent), NULL for the root. */
ir_stmt_t **sch_index_slot(const sch_index_t *x, ir_stmt_t *s);
/* The first block named so in tree order, NULL if none. */
ir_stmt_t *sch_index_block_named(sch_t *s, const char *name);
const sch_buf_users_t *sch_index_users(sch_index_t *x, const ir_buffer_t *buf);
/* b's regions changed (it reads more buffers): adds it to their readers. */
void sch_index_block_rewritten(sch_index_t *x, ir_block_t *b);
/* s was unlinked from the tree: forgets its loops and blocks. */
void sch_index_subtree_removed(sch_index_t *x, ir_stmt_t *s);
/* s now hangs under `parent`. */
void sch_index_reparent(sch_index_t *x, const ir_stmt_t *s, ir_stmt_t *parent);

/* ---- tree utilities (tree.c) ------------------------------------------- */

/* The chain from f->root down to a statement (ir/analysis.h): zero-initialise,
 * release with ir_path_free. */
typedef ir_path_t sch_path_t;

/* Finds the loop or block with this uid; false if it no longer exists. */
bool sch_find_path(const ir_func_t *f, int uid, sch_path_t *p);
ir_stmt_t *sch_find(const ir_func_t *f, int uid);
/* A block / loop by uid, or NULL (also NULL if the uid names the other kind). */
ir_block_t *sch_find_block(const ir_func_t *f, int uid);
ir_loop_t *sch_find_loop(const ir_func_t *f, int uid);

/* Replaces loop variables in the bindings and predicates of every block
 * under s (TensorIR keeps loop variables out of block bodies, so this is the
 * whole rewrite a loop transformation needs), then simplifies them with the
 * bounds of all loops enclosing and inside s. */
void sch_rebind(ir_func_t *f, ir_stmt_t *s, ir_var_t *const *from, ir_expr_t *const *to, int n);
/* Simplifies bindings and predicates of every block in the function using
 * the extents of their enclosing loops; drops predicates proven true. */
void sch_simplify_all(ir_func_t *f);
/* Fills b with [0, extent-1] for every loop on the path to uid (inclusive if
 * it is a loop) and every loop inside the subtree s (if s is non-NULL). */
void sch_bounds_for(const ir_func_t *f, int uid, ir_stmt_t *s, ir_bounds_t *b);


/* A printable name for a loop (its variable) / block, for error messages. */
const char *sch_loop_name(const ir_loop_t *l);

/* Rebuilds e bottom-up with fn applied to each load (inline.c); unchanged
 * subtrees are shared, so a pure observer fn leaves e as it is. */
typedef ir_expr_t *(*sch_load_fn)(ir_func_t *f, ir_expr_t *load, void *ctx);
ir_expr_t *sch_map_loads(ir_func_t *f, ir_expr_t *e, sch_load_fn fn, void *ctx);

/* ---- primitives (one concern per file, uid-based, checks first) -------- */

/* queries (tree.c) */
int sch_prim_get_loops(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err);
int sch_prim_get_child_blocks(sch_t *s, int uid, int *out, int *n, tn_err_t *err);
int sch_prim_get_producers(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err);
int sch_prim_get_consumers(sch_t *s, int block_uid, int *out, int *n, tn_err_t *err);

/* loops (loops.c).  factors[i] == 0 means "infer" (at most one). */
int sch_prim_split(sch_t *s, int loop_uid, const int64_t *factors, int n, bool disable_predication,
                   int *out, tn_err_t *err);
int sch_prim_fuse(sch_t *s, const int *loop_uids, int n, int *out, tn_err_t *err);
int sch_prim_reorder(sch_t *s, const int *loop_uids, int n, tn_err_t *err);
/* parallel / vectorize / unroll / bind (thread != NULL only for IR_LOOP_THREAD) */
int sch_prim_loop_kind(sch_t *s, int loop_uid, ir_loop_kind_t kind, const char *thread, tn_err_t *err);
int sch_prim_annotate(sch_t *s, int uid, const char *key, const ir_annot_t *value, tn_err_t *err);
int sch_prim_unannotate(sch_t *s, int uid, const char *key, tn_err_t *err);

/* data movement (cache.c, compute_at.c, inline.c) */
int sch_prim_cache_read(sch_t *s, int block_uid, int read_index, ir_scope_t scope, int *out,
                        tn_err_t *err);
int sch_prim_cache_write(sch_t *s, int block_uid, int write_index, ir_scope_t scope, int *out,
                         tn_err_t *err);
/* reindex: the block's read (or write) buffer `index` staged through a new
 * temporary over the iterators its index uses; *out gets the copy block. */
int sch_prim_reindex(sch_t *s, int block_uid, int index, bool write, int *out, tn_err_t *err);
int sch_prim_compute_at(sch_t *s, int block_uid, int loop_uid, bool reverse, bool preserve_unit_loops,
                        tn_err_t *err);
int sch_prim_compute_inline(sch_t *s, int block_uid, tn_err_t *err);
int sch_prim_reverse_compute_inline(sch_t *s, int block_uid, tn_err_t *err);
/* The loops of the block's first consumer where compute_at(block, loop) is
 * legal, outermost first (SampleComputeLocation's candidates besides root and
 * inline), in a malloc'ed array (*out, NULL when none; freed by the caller).
 * *can_inline says whether compute_inline would apply. */
int sch_compute_location_candidates(sch_t *s, int block_uid, int **out, int *n, bool *can_inline,
                                    tn_err_t *err);

/* reductions (reduction.c) */
int sch_prim_decompose_reduction(sch_t *s, int block_uid, int loop_uid, int *out, tn_err_t *err);
int sch_prim_rfactor(sch_t *s, int loop_uid, int factor_axis, int *out, tn_err_t *err);

/* tensorization (blockize.c) */
int sch_prim_blockize(sch_t *s, int loop_uid, int *out, tn_err_t *err);
int sch_prim_tensorize(sch_t *s, int uid, const char *intrin, tn_err_t *err);
/* layout.c */
int sch_prim_transform_layout(sch_t *s, int block_uid, int buffer_index, bool write, const int *perm, int n,
                              tn_err_t *err);
int sch_prim_hoist_packing(sch_t *s, int block_uid, tn_err_t *err);
/* block_layout.c */
int sch_prim_fuse_block_iters(sch_t *s, int block_uid, int first, int n, tn_err_t *err);
int sch_prim_pad_einsum(sch_t *s, int block_uid, const int64_t *padding, int npad, int *out, int *nout,
                        tn_err_t *err);
int sch_prim_storage_align(sch_t *s, int block_uid, int buffer_index, int axis, int64_t factor, int64_t offset,
                           tn_err_t *err);

/* sampling (sampling.c): pure functions of the RNG */
/* Draws n factors whose product is extent, innermost <= max_innermost (<= 0:
 * unbounded).  Returns TN_EINVAL if impossible. */
int sch_sample_tile(tn_rng_t *rng, int64_t extent, int n, int64_t max_innermost, int64_t *out);
/* Repairs a stale decision in place (walk from innermost outwards). */
void sch_repair_tile(int64_t extent, int64_t *dec, int n);
int sch_sample_index(tn_rng_t *rng, const double *probs, int n); /* categorical */

#endif
