/* schedule.h — TensorIR-style schedule primitives, instruction records and
 * traces.  A schedule wraps its own copy of a function; every primitive is
 * recorded as an instruction so the whole schedule can be serialised as a
 * trace and replayed on the unscheduled function.  Prefix: sch_. */
#ifndef TUNED_SCHEDULE_H
#define TUNED_SCHEDULE_H

#include "common/common.h"
#include "ir/ir.h"

/* ======================================================================
 * Random variables (handles)
 * ====================================================================== */

/* A handle: index into the schedule's table of random variables.  Block and
 * loop RVs name IR nodes by uid (so they survive the function being copied);
 * expr RVs hold an integer (a sampled tile factor, a categorical value). */
typedef int sch_rv_t;
#define SCH_RV_INVALID (-1)

typedef enum sch_rv_kind { SCH_RV_BLOCK, SCH_RV_LOOP, SCH_RV_EXPR } sch_rv_kind_t;

/* Loop RVs with these values are the special compute-at locations. */
#define SCH_LOC_ROOT (-1)   /* stay at the root: compute_at is a no-op */
#define SCH_LOC_INLINE (-2) /* compute_inline instead */

/* Most inputs or outputs of one instruction (the loops of a nest, ...): the
 * one depth limit, IR_MAX_LOOP_DEPTH; more is an error naming the block. */
#define SCH_MAX_RVS_OUT IR_MAX_LOOP_DEPTH

/* ======================================================================
 * Instruction arguments
 * ====================================================================== */

typedef enum sch_arg_kind {
  SCH_ARG_NONE,  /* "None" (e.g. the inferred split factor) */
  SCH_ARG_INT,
  SCH_ARG_FLOAT,
  SCH_ARG_STR,
  SCH_ARG_RV,
  SCH_ARG_LIST,
} sch_arg_kind_t;

typedef struct sch_arg {
  sch_arg_kind_t kind;
  int64_t i;
  double f;
  const char *s;
  sch_rv_t rv;
  struct sch_arg *items; /* SCH_ARG_LIST */
  int n;
} sch_arg_t;

sch_arg_t sch_arg_none(void);
sch_arg_t sch_arg_int(int64_t v);
sch_arg_t sch_arg_float(double v);
sch_arg_t sch_arg_str(const char *s); /* not copied: the caller keeps it alive for the call */
sch_arg_t sch_arg_rv(sch_rv_t rv);

/* ======================================================================
 * Instructions and traces
 * ====================================================================== */

typedef enum sch_inst_kind {
  SCH_GET_BLOCK,             /* [] [name] -> b */
  SCH_GET_LOOPS,             /* [b] [] -> l... */
  SCH_GET_CHILD_BLOCKS,      /* [b|l] [] -> b... */
  SCH_GET_PRODUCERS,         /* [b] [] -> b... */
  SCH_GET_CONSUMERS,         /* [b] [] -> b... */
  SCH_SPLIT,                 /* [l, f1..fn] [preserve_unit_iters, disable_predication] -> l1..ln;
                                each f: expr RV, int, or None (at most one None) */
  SCH_FUSE,                  /* [l1..ln] [preserve_unit_iters] -> l */
  SCH_REORDER,               /* [l1..ln] [] -> */
  SCH_PARALLEL,              /* [l] [] -> */
  SCH_VECTORIZE,             /* [l] [] -> */
  SCH_UNROLL,                /* [l] [] -> */
  SCH_BIND,                  /* [l] [thread] -> */
  SCH_ANNOTATE,              /* [b|l, value (int, str or expr RV)] [key] -> */
  SCH_UNANNOTATE,            /* [b|l] [key] -> */
  SCH_CACHE_READ,            /* [b, [consumers]] [read_buffer_index, scope] -> b */
  SCH_CACHE_WRITE,           /* [b, [consumers]] [write_buffer_index, scope] -> b */
  SCH_COMPUTE_AT,            /* [b, l] [preserve_unit_loops, index] -> */
  SCH_REVERSE_COMPUTE_AT,    /* [b, l] [preserve_unit_loops, index] -> */
  SCH_COMPUTE_INLINE,        /* [b] [] -> */
  SCH_REVERSE_COMPUTE_INLINE,/* [b] [] -> */
  SCH_DECOMPOSE_REDUCTION,   /* [b, l] [] -> b (the init block) */
  SCH_RFACTOR,               /* [l] [factor_axis] -> b (the rfactor block) */
  SCH_BLOCKIZE,              /* [l] [] -> b (the new outer block) */
  SCH_TENSORIZE,             /* [b|l] [intrinsic name] -> (a loop is blockized first) */
  SCH_STORAGE_ALIGN,         /* [b] [buffer_index, axis, factor, offset] -> */
  SCH_TRANSFORM_LAYOUT,      /* [b] [buffer_index, "read"|"write", [permutation]] -> */
  SCH_HOIST_PACKING,         /* [b] [] -> */
  SCH_REINDEX,               /* [b] [buffer_index, 0 read | 1 write] -> b (the copy block) */
  SCH_FUSE_BLOCK_ITERS,      /* [b] [first, n] -> */
  SCH_PAD_EINSUM,            /* [b] [[padding per iterator]] -> b.. (the copy blocks) */
  SCH_SAMPLE_PERFECT_TILE,   /* [l] [n, max_innermost_factor] -> v1..vn; decision: n ints */
  SCH_SAMPLE_CATEGORICAL,    /* [] [[candidates], [probs]] -> v; decision: index */
  SCH_SAMPLE_COMPUTE_LOCATION,/* [b] [] -> l; decision: -2 inline, -1 root, k >= 0 loop index */
  SCH_ENTER_POSTPROC,        /* [] [] -> (marker) */
  SCH_INST__COUNT
} sch_inst_kind_t;

/* TVM's names ("GetBlock", "Split", "SamplePerfectTile", ...). */
const char *sch_inst_name(sch_inst_kind_t k);
int sch_inst_parse_name(const char *name, sch_inst_kind_t *out);
bool sch_inst_is_pure(sch_inst_kind_t k);     /* queries and samplers */
bool sch_inst_is_sampling(sch_inst_kind_t k); /* carries a decision */
/* Every instruction's outputs are of one kind (blocks, loops or exprs). */
sch_rv_kind_t sch_inst_output_kind(sch_inst_kind_t k);

typedef struct sch_inst {
  sch_inst_kind_t kind;
  sch_arg_t *inputs;
  int ninputs;
  sch_arg_t *attrs;
  int nattrs;
  sch_rv_t *outputs;
  int noutputs;
  int64_t *decision; /* sampling instructions only (NULL otherwise) */
  int ndecision;
} sch_inst_t;

/* An instruction list; RV ids inside refer to the schedule the trace was
 * recorded on (or to a parse-local numbering for parsed traces). */
typedef struct sch_trace {
  tn_arena_t *arena;
  sch_inst_t *insts;
  int n, cap;
} sch_trace_t;

sch_trace_t *sch_trace_new(void);
void sch_trace_free(sch_trace_t *t);
sch_trace_t *sch_trace_copy(const sch_trace_t *t);
/* Appends a deep copy of inst (args, strings, lists, decision). */
void sch_trace_append(sch_trace_t *t, const sch_inst_t *inst);
/* A 64-bit hash of the first n instructions (kinds, arguments, handles and
 * decisions): equal prefixes hash equal, so it keys what replaying them
 * gives. */
uint64_t sch_trace_hash(const sch_trace_t *t, int n);

/* JSON form (see metaschedule.md §2.4): [instructions, decisions] wrapped in
 * {"version": 1, "trace": [...]} — `sch_trace_to_json` writes the wrapped form;
 * the parser also accepts the bare 2-element array.  RVs are named b0, l1,
 * v2, ... in order of first appearance; string inputs carry extra quotes. */
char *sch_trace_to_json(const sch_trace_t *t);            /* malloc'ed, pretty, deterministic */
int sch_trace_from_json(const char *text, size_t len, sch_trace_t **out, tn_err_t *err);

/* ======================================================================
 * Schedules
 * ====================================================================== */

typedef struct sch sch_t;

/* Creates a schedule on a private copy of func; sampling draws from an RNG
 * seeded with seed. */
sch_t *sch_create(const ir_func_t *func, uint64_t seed);
void sch_free(sch_t *s);
const ir_func_t *sch_func(const sch_t *s);   /* the current (scheduled) function */
const sch_trace_t *sch_get_trace(const sch_t *s);
sch_rv_kind_t sch_rv_kind(const sch_t *s, sch_rv_t rv);
/* The value of an expr RV; the uid a block/loop RV names (SCH_LOC_* for the
 * special locations). */
int64_t sch_rv_value(const sch_t *s, sch_rv_t rv);
/* Resolves a block/loop RV to its statement, NULL if it no longer exists. */
ir_stmt_t *sch_rv_stmt(const sch_t *s, sch_rv_t rv);

/* Applies one instruction (inputs name RVs of this schedule), records it and
 * returns the outputs.  For sampling instructions `decision` (may be NULL)
 * replaces sampling; a stale decision is repaired (perfect tile: §2.3 of the
 * reference; compute location: nearest smaller valid index, else root).  On
 * error returns < 0, the schedule is unchanged and nothing is recorded; the
 * message names the instruction, the block or loop, and the reason. */
int sch_apply(sch_t *s, const sch_inst_t *inst, const int64_t *decision, int ndecision,
              sch_rv_t *outputs, int *noutputs, tn_err_t *err);

/* Replays a trace on a fresh schedule of func.  `decisions_override` (may be
 * NULL) gives, per instruction index, a replacement decision (ndec[i] > 0).
 * Fails with the index and name of the instruction that could not apply. */
int sch_replay(const ir_func_t *func, const sch_trace_t *trace, uint64_t seed, sch_t **out,
               tn_err_t *err);
int sch_replay_with(const ir_func_t *func, const sch_trace_t *trace, uint64_t seed,
                    int64_t *const *decisions, const int *ndecisions, bool remove_postproc,
                    sch_t **out, tn_err_t *err);

/* ---- typed front ends (each builds an instruction and calls sch_apply) -- */

int sch_get_block(sch_t *s, const char *name, sch_rv_t *out, tn_err_t *err);
int sch_get_loops(sch_t *s, sch_rv_t block, sch_rv_t *out, int *n, tn_err_t *err);
int sch_get_child_blocks(sch_t *s, sch_rv_t block_or_loop, sch_rv_t *out, int *n, tn_err_t *err);
int sch_get_producers(sch_t *s, sch_rv_t block, sch_rv_t *out, int *n, tn_err_t *err);
int sch_get_consumers(sch_t *s, sch_rv_t block, sch_rv_t *out, int *n, tn_err_t *err);

/* factors: SCH_ARG_INT, SCH_ARG_RV (expr) or SCH_ARG_NONE (inferred, at most one). */
int sch_split(sch_t *s, sch_rv_t loop, const sch_arg_t *factors, int nfactors, sch_rv_t *out,
              tn_err_t *err);
int sch_fuse(sch_t *s, const sch_rv_t *loops, int n, sch_rv_t *out, tn_err_t *err);
int sch_reorder(sch_t *s, const sch_rv_t *loops, int n, tn_err_t *err);
int sch_parallel(sch_t *s, sch_rv_t loop, tn_err_t *err);
int sch_vectorize(sch_t *s, sch_rv_t loop, tn_err_t *err);
int sch_unroll(sch_t *s, sch_rv_t loop, tn_err_t *err);
int sch_bind(sch_t *s, sch_rv_t loop, const char *thread, tn_err_t *err);
int sch_annotate(sch_t *s, sch_rv_t block_or_loop, const char *key, sch_arg_t value, tn_err_t *err);
int sch_unannotate(sch_t *s, sch_rv_t block_or_loop, const char *key, tn_err_t *err);

int sch_cache_read(sch_t *s, sch_rv_t block, int read_buffer_index, const char *scope,
                   sch_rv_t *out, tn_err_t *err);
int sch_cache_write(sch_t *s, sch_rv_t block, int write_buffer_index, const char *scope,
                    sch_rv_t *out, tn_err_t *err);
int sch_compute_at(sch_t *s, sch_rv_t block, sch_rv_t loop, bool preserve_unit_loops, tn_err_t *err);
int sch_reverse_compute_at(sch_t *s, sch_rv_t block, sch_rv_t loop, bool preserve_unit_loops,
                           tn_err_t *err);
int sch_compute_inline(sch_t *s, sch_rv_t block, tn_err_t *err);
int sch_reverse_compute_inline(sch_t *s, sch_rv_t block, tn_err_t *err);
int sch_decompose_reduction(sch_t *s, sch_rv_t block, sch_rv_t loop, sch_rv_t *out, tn_err_t *err);
int sch_rfactor(sch_t *s, sch_rv_t loop, int factor_axis, sch_rv_t *out, tn_err_t *err);
/* The perfect loop nest under `loop` (down to one compute block) becomes the
 * body of a new block ("<name>_o") whose iterators are the inner block's
 * divided by the extent the loops inside cover (its regions are over them);
 * the inner block's bindings stay as they were, over the loops. */
int sch_blockize(sch_t *s, sch_rv_t loop, sch_rv_t *out, tn_err_t *err);
/* Marks a block (or the block blockize makes of a loop) for replacement by a
 * tensor intrinsic's call (ir/intrin.h) after checking that its nest
 * computes exactly the intrinsic's description. */
int sch_tensorize(sch_t *s, sch_rv_t block_or_loop, const char *intrin, tn_err_t *err);
/* Permutes the dimensions of a temporary the block reads or writes (its
 * buffer `buffer_index` of that side): new dimension d is old dimension
 * perm[d], in every access, region and the shape (TVM's transform_layout
 * for index maps that are permutations). */
int sch_transform_layout(sch_t *s, sch_rv_t block, int buffer_index, bool write, const int *perm, int n,
                         tn_err_t *err);
/* Pads the stride of dimension `axis` of the temporary the block writes
 * (its write buffer `buffer_index`) to factor * n + offset elements. */
int sch_storage_align(sch_t *s, sch_rv_t block, int buffer_index, int axis, int64_t factor, int64_t offset,
                      tn_err_t *err);
/* Marks the block, a copy of a constant input (`const` in the workload)
 * alone in a loop nest at the root (cache_read's block, not moved under the
 * kernel's loops), as packing hoisted out of the kernel: generated code
 * gets a function <entry>_pack_<input> that fills the copy, run once per
 * weight, and the kernel takes the copy as an argument (role "packed").
 * TN_EINVAL, naming the block, for anything else (a copy of an input not
 * declared const, a copy under loops of the kernel). */
int sch_hoist_packing(sch_t *s, sch_rv_t block, tn_err_t *err);
/* TVM's ReIndex: the block's read (write) buffer `buffer_index`, accessed at
 * one index tuple affine in its iterators (X[n, h + rh, w + rw, ci]), is
 * staged through a new temporary "<buf>_reindex" whose dimensions are the
 * iterators that tuple uses, in the block's order (X_reindex[n, h, w, rh,
 * rw, ci]: the im2col of a convolution); a copy block before (after) the
 * block's loop nest fills it (writes it back), and the block accesses it at
 * its plain iterators.  *out gets the copy block. */
int sch_reindex(sch_t *s, sch_rv_t block, int buffer_index, bool write, sch_rv_t *out, tn_err_t *err);
/* The block's iterators first .. first + n - 1, all spatial or all
 * reduction, each bound to a loop of its own with those loops nested
 * directly in that order, become one iterator over the product of their
 * extents, bound to the loops fused (the part of TVM's
 * transform_block_layout that a GEMM's M and K need).  An iterator of
 * extent 1 may be bound to 0 instead (unit loops directly above the first
 * loop, bound by nothing of the block, are then fused in too).  A temporary whose
 * every access by the block has those iterators as consecutive plain
 * indices, and that only compute blocks access, has those dimensions merged
 * into one (its other accesses linearised), so the block's accesses stay
 * plain; every other use of the iterators becomes a floordiv/floormod of the
 * new one. */
int sch_fuse_block_iters(sch_t *s, sch_rv_t block, int first, int n, tn_err_t *err);
/* TVM's PadEinsum: the block's iterator t gets its extent rounded up to a
 * multiple of padding[t] (1: unchanged), its loops with it.  The block must
 * access every buffer at plain iterators (reindex first), use them nowhere
 * else, sit alone in a serial loop nest of its own, and, where a reduction
 * iterator is padded, accumulate a product of two loads from an init.
 * Each read buffer with a padded dimension is read from a copy
 * "<buf>_pad" of the padded shape with zeros outside (a copy block before
 * the block's nest); a padded output is computed into "<buf>_pad" and its
 * valid part copied back after the nest.  out[0 .. *n) get those copy
 * blocks, the reads' in read order, then the output's; nothing when no
 * extent changes. */
int sch_pad_einsum(sch_t *s, sch_rv_t block, const int64_t *padding, int npad, sch_rv_t *out, int *n, tn_err_t *err);

int sch_sample_perfect_tile(sch_t *s, sch_rv_t loop, int n, int max_innermost_factor,
                            sch_rv_t *out, tn_err_t *err);
int sch_sample_categorical(sch_t *s, const int64_t *candidates, const double *probs, int n,
                           sch_rv_t *out, tn_err_t *err);
int sch_sample_compute_location(sch_t *s, sch_rv_t block, sch_rv_t *out, tn_err_t *err);
int sch_enter_postproc(sch_t *s, tn_err_t *err);

#endif
