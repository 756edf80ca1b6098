/* ir.h — the tensor IR (functions, buffers, loops, blocks, expressions), the
 * workload language front end, the TVMScript-shaped printer, the arithmetic
 * simplifier and interval analysis, the structural hash and the reference
 * evaluator.  This is the ir/ module's only public header.  Prefix: ir_. */
#ifndef TUNED_IR_H
#define TUNED_IR_H

#include <stdarg.h>

#include "common/common.h"

/* ======================================================================
 * Data types
 * ====================================================================== */

typedef enum ir_dtype {
  IR_BOOL,
  IR_INT32, /* every index, loop variable and extent expression is int32 */
  IR_INT64,
  IR_FLOAT16,
  IR_FLOAT32,
  IR_FLOAT64,
  IR_BFLOAT16, /* after the others: dtype numbers are part of structural hashes */
} ir_dtype_t;

const char *ir_dtype_name(ir_dtype_t t);                   /* "float32" */
int ir_dtype_parse(const char *s, ir_dtype_t *out);        /* 0 or TN_EINVAL */
int ir_dtype_bytes(ir_dtype_t t);                          /* 1,4,8,2,4,8,2 */
/* float16 or bfloat16: stored in 16 bits, computed in float32. */
bool ir_dtype_is_16bit_float(ir_dtype_t t);
bool ir_dtype_is_float(ir_dtype_t t);
bool ir_dtype_is_int(ir_dtype_t t);                        /* int32/int64 */
/* Finite lowest/highest values (max-reduction identity is the lowest, as TVM's
 * T.min_value): float32 -> -3.4028234663852886e+38, float16 -65504, int32 INT32_MIN... */
double ir_dtype_min_value(ir_dtype_t t);
double ir_dtype_max_value(ir_dtype_t t);

/* ======================================================================
 * Nodes.  Every node lives in the arena of the function that owns it.
 * Expressions are immutable once built and may be shared within a function.
 * Statements are mutable (schedule primitives rewrite the tree in place on
 * their own copy of the function).
 * ====================================================================== */

typedef struct ir_expr ir_expr_t;
typedef struct ir_stmt ir_stmt_t;
typedef struct ir_func ir_func_t;

/* A variable: loop variable, block iterator variable.  `id` is unique within
 * its function (ir_func_t.next_var_id) and survives ir_func_copy. */
typedef struct ir_var {
  const char *name;
  ir_dtype_t dtype; /* always IR_INT32 today */
  int id;
} ir_var_t;

typedef enum ir_scope { IR_SCOPE_GLOBAL, IR_SCOPE_SHARED, IR_SCOPE_LOCAL } ir_scope_t;
const char *ir_scope_name(ir_scope_t s); /* "global", "shared", "local" */
int ir_scope_parse(const char *s, ir_scope_t *out);

typedef enum ir_buf_role {
  IR_BUF_INPUT,  /* function parameter, read only */
  IR_BUF_OUTPUT, /* function parameter, written */
  IR_BUF_TEMP,   /* allocated inside the function (workload temps, caches) */
} ir_buf_role_t;

#define IR_MAX_DIMS 8

typedef struct ir_buffer {
  const char *name;
  ir_dtype_t dtype;
  int ndim;          /* 0 .. IR_MAX_DIMS; 0 = scalar */
  int64_t *shape;    /* ndim constant extents, each >= 1 */
  ir_scope_t scope;
  ir_buf_role_t role;
  int id;            /* unique within the function, survives ir_func_copy */
  /* Input data distribution for the reference evaluator: uniform in
   * [init_lo, init_hi).  Defaults: floats [-1, 1), ints [-8, 8). */
  double init_lo, init_hi;
  /* An input whose values do not change between calls (a layer's weights:
   * `input W: float32[N, K] const`): a schedule may pack it once, outside
   * the kernel (schedule's hoist_packing). */
  bool is_const;
} ir_buffer_t;

int64_t ir_buffer_numel(const ir_buffer_t *b); /* product of shape (1 for 0-d) */

typedef enum ir_expr_kind {
  IR_E_INT,      /* u.ival */
  IR_E_FLOAT,    /* u.fval */
  IR_E_VAR,      /* u.var */
  IR_E_LOAD,     /* u.load */
  /* binary, u.bin: */
  IR_E_ADD, IR_E_SUB, IR_E_MUL,
  IR_E_DIV,      /* float division only */
  IR_E_FLOORDIV, IR_E_FLOORMOD, /* integers; divisor > 0 in well-formed IR */
  IR_E_MIN, IR_E_MAX,
  IR_E_EQ, IR_E_NE, IR_E_LT, IR_E_LE, IR_E_GT, IR_E_GE, /* result IR_BOOL */
  IR_E_AND, IR_E_OR,                                   /* bool operands */
  /* unary, u.un: */
  IR_E_NOT, IR_E_NEG,
  IR_E_CAST,     /* u.un converted to the node's dtype (float->int truncates) */
  IR_E_SELECT,   /* u.sel: cond ? t : f, only the chosen side is evaluated */
  IR_E_CALL,     /* u.call: math function */
  IR_E__COUNT
} ir_expr_kind_t;

typedef enum ir_math_fn {
  IR_FN_EXP, IR_FN_LOG, IR_FN_SQRT, IR_FN_TANH, IR_FN_ABS, IR_FN_POW, /* pow has 2 args */
  IR_FN__COUNT
} ir_math_fn_t;
const char *ir_math_fn_name(ir_math_fn_t f); /* "exp", ... */
int ir_math_fn_arity(ir_math_fn_t f);

struct ir_expr {
  ir_expr_kind_t kind;
  ir_dtype_t dtype;
  union {
    int64_t ival;
    double fval;
    ir_var_t *var;
    struct { ir_buffer_t *buf; ir_expr_t **idx; int n; } load;
    struct { ir_expr_t *a, *b; } bin;
    ir_expr_t *un;
    struct { ir_expr_t *cond, *t, *f; } sel;
    struct { ir_math_fn_t fn; ir_expr_t *args[2]; int n; } call;
  } u;
};

bool ir_expr_is_binary(ir_expr_kind_t k);  /* ADD..OR */
bool ir_expr_is_compare(ir_expr_kind_t k); /* EQ..GE */
bool ir_expr_is_const_int(const ir_expr_t *e, int64_t *v); /* v may be NULL */

/* A region of a buffer: per dimension [min, min + extent). */
typedef struct ir_range {
  ir_expr_t *min;
  ir_expr_t *extent; /* constant in every IR built today */
} ir_range_t;

typedef struct ir_region {
  ir_buffer_t *buf;
  ir_range_t *dims; /* buf->ndim entries */
} ir_region_t;

typedef struct ir_annot {
  const char *key;
  bool is_str;
  int64_t ival;
  const char *sval;
} ir_annot_t;

typedef enum ir_loop_kind {
  IR_LOOP_SERIAL,
  IR_LOOP_PARALLEL,
  IR_LOOP_VECTORIZED,
  IR_LOOP_UNROLLED,
  IR_LOOP_THREAD, /* bound to the hardware index loop.tag */
} ir_loop_kind_t;
const char *ir_loop_kind_name(ir_loop_kind_t k);

/* What a thread-bound loop is bound to.  One table (ir.c) holds the names
 * ("blockIdx.x", ..., "vthread.z") used for printing, traces and code; no
 * other code compares tag names. */
typedef enum ir_thread_tag {
  IR_TAG_NONE,
  IR_TAG_BLOCK_X, IR_TAG_BLOCK_Y, IR_TAG_BLOCK_Z,
  IR_TAG_THREAD_X, IR_TAG_THREAD_Y, IR_TAG_THREAD_Z,
  IR_TAG_VTHREAD_X, IR_TAG_VTHREAD_Y, IR_TAG_VTHREAD_Z,
  IR_TAG__COUNT
} ir_thread_tag_t;
typedef enum ir_tag_class { IR_TAG_CLASS_NONE, IR_TAG_CLASS_BLOCK, IR_TAG_CLASS_THREAD, IR_TAG_CLASS_VTHREAD } ir_tag_class_t;

const char *ir_thread_tag_name(ir_thread_tag_t t);           /* "threadIdx.x"; "" for none */
int ir_thread_tag_parse(const char *s, ir_thread_tag_t *out); /* 0 or TN_EINVAL (not a tag) */
ir_tag_class_t ir_thread_tag_class(ir_thread_tag_t t);
int ir_thread_tag_axis(ir_thread_tag_t t);                   /* 0..2 (x, y, z) */
/* "blockIdx.x/y/z, threadIdx.x/y/z, vthread.x/y/z", for messages. */
const char *ir_thread_tag_list(void);

/* A loop `for var in range(extent)`; loops always start at 0. */
typedef struct ir_loop {
  int uid; /* unique within the function among loops and blocks; survives copy */
  ir_var_t *var;
  int64_t extent; /* >= 1 */
  ir_loop_kind_t kind;
  ir_thread_tag_t tag; /* IR_LOOP_THREAD only (else IR_TAG_NONE) */
  ir_annot_t *annots;
  int nannots;
  ir_stmt_t *body;
} ir_loop_t;

typedef enum ir_iter_kind { IR_ITER_SPATIAL, IR_ITER_REDUCE } ir_iter_kind_t;

/* A block iterator: `v = T.axis.spatial(extent, binding)`. */
typedef struct ir_iter {
  ir_var_t *var;
  int64_t extent;
  ir_iter_kind_t kind;
  ir_expr_t *binding; /* over enclosing loop variables */
} ir_iter_t;

/* A block (TVM's Block + BlockRealize in one): iterators with bindings, an
 * optional predicate, read/write regions, optional init, and a body.  Compute
 * blocks have a STORE body; the root block (name "root", no iterators) holds
 * the whole loop tree.  Semantics: for each point of the enclosing loops, bind
 * the iterators; if the predicate holds: if init != NULL and every REDUCE
 * iterator is 0, run init; then run body. */
typedef struct ir_block {
  int uid;
  const char *name;
  ir_iter_t *iters;
  int niters;
  ir_expr_t *predicate; /* NULL = always */
  ir_region_t *reads;
  int nreads;
  ir_region_t *writes;
  int nwrites;
  ir_stmt_t *init; /* NULL or a STORE */
  ir_stmt_t *body;
  ir_buffer_t **allocs; /* buffers allocated in this block (root: temps) */
  int nallocs;
  ir_annot_t *annots;
  int nannots;
} ir_block_t;

typedef enum ir_stmt_kind { IR_S_SEQ, IR_S_LOOP, IR_S_BLOCK, IR_S_STORE } ir_stmt_kind_t;

struct ir_stmt {
  ir_stmt_kind_t kind;
  union {
    struct { ir_stmt_t **items; int n; } seq;
    ir_loop_t loop;
    ir_block_t block;
    struct { ir_buffer_t *buf; ir_expr_t **idx; int n; ir_expr_t *value; } store;
  } u;
};

/* A function: parameter buffers (inputs and outputs in declaration order) and
 * a root block. */
struct ir_func {
  tn_arena_t *arena;
  const char *name; /* "main" */
  ir_buffer_t **params;
  int nparams;
  ir_stmt_t *root; /* IR_S_BLOCK named "root", no iterators; allocs = temps */
  int next_uid, next_var_id, next_buf_id;
};

/* ======================================================================
 * Construction (ir.c).  Constructors allocate from f->arena and never fail
 * on valid arguments; they do not validate types beyond what is documented.
 * ====================================================================== */

ir_func_t *ir_func_new(const char *name);
void ir_func_free(ir_func_t *f);
/* Deep copy into a fresh arena.  uids, var ids and buffer ids are preserved,
 * so handles (uids) taken on the original resolve on the copy. */
ir_func_t *ir_func_copy(const ir_func_t *f);

ir_var_t *ir_var_new(ir_func_t *f, const char *name, ir_dtype_t dtype);
ir_buffer_t *ir_buffer_new(ir_func_t *f, const char *name, ir_dtype_t dtype, int ndim,
                           const int64_t *shape, ir_scope_t scope, ir_buf_role_t role);

ir_expr_t *ir_int(ir_func_t *f, int64_t v);              /* IR_INT32 constant */
ir_expr_t *ir_const_int(ir_func_t *f, ir_dtype_t t, int64_t v);
ir_expr_t *ir_float(ir_func_t *f, ir_dtype_t t, double v);
ir_expr_t *ir_bool(ir_func_t *f, bool v);
ir_expr_t *ir_varref(ir_func_t *f, ir_var_t *v);
ir_expr_t *ir_load(ir_func_t *f, ir_buffer_t *b, ir_expr_t *const *idx, int n);
/* Binary node; dtype is a's dtype, or IR_BOOL for comparisons/AND/OR. */
ir_expr_t *ir_bin(ir_func_t *f, ir_expr_kind_t k, ir_expr_t *a, ir_expr_t *b);
ir_expr_t *ir_unary(ir_func_t *f, ir_expr_kind_t k, ir_expr_t *a); /* NOT, NEG */
ir_expr_t *ir_cast(ir_func_t *f, ir_dtype_t t, ir_expr_t *a);
ir_expr_t *ir_select(ir_func_t *f, ir_expr_t *cond, ir_expr_t *t, ir_expr_t *e);
ir_expr_t *ir_call(ir_func_t *f, ir_math_fn_t fn, ir_expr_t *const *args, int n);

ir_stmt_t *ir_seq(ir_func_t *f, ir_stmt_t *const *items, int n);
ir_stmt_t *ir_loop_new(ir_func_t *f, ir_var_t *var, int64_t extent, ir_stmt_t *body);
ir_stmt_t *ir_block_new(ir_func_t *f, const char *name); /* fill fields afterwards */
ir_stmt_t *ir_store(ir_func_t *f, ir_buffer_t *b, ir_expr_t *const *idx, int n, ir_expr_t *value);

/* Loop annotation (integer >= 1): the loop's body is copies into shared
 * memory followed by the computation on them; with S >= 2 stages the GPU
 * code generator keeps S copies of each such buffer and issues the copies of
 * iteration i + S - 1 while iteration i computes (codegen/pipeline.c). */
#define IR_ANN_PIPELINE_STAGES "software_pipeline_stages"
#define IR_PIPELINE_MAX_STAGES 8

/* Block annotation "AXIS:FACTOR:OFFSET" (schedule's storage_align): the
 * buffer the block writes is laid out with the stride of dimension AXIS
 * padded to FACTOR * n + OFFSET elements.  Only the code generators read it. */
#define IR_ANN_STORAGE_ALIGN "storage_align"

/* Block annotation naming a constant input (schedule's hoist_packing): the
 * block, alone in a root loop nest, copies that input into the temporary it
 * writes; the code generators put the nest in a packing function of its own
 * (run once per weight, not per call) and pass the temporary to the kernel
 * as an argument of role "packed". */
#define IR_ANN_HOIST_PACKING "hoist_packing"

/* Sets or replaces an annotation on a loop or block. */
void ir_annot_set_int(ir_func_t *f, ir_annot_t **annots, int *n, const char *key, int64_t v);
void ir_annot_set_str(ir_func_t *f, ir_annot_t **annots, int *n, const char *key, const char *v);
const ir_annot_t *ir_annot_get(const ir_annot_t *annots, int n, const char *key);
bool ir_annot_remove(ir_annot_t *annots, int *n, const char *key);

/* Structural equality of expressions (same vars by identity). */
bool ir_expr_equal(const ir_expr_t *a, const ir_expr_t *b);
/* Structural total order of expressions that never depends on node
 * addresses (arith.c): the order of terms in simplified sums. */
int ir_expr_cmp(const ir_expr_t *a, const ir_expr_t *b);
/* Rebuilds `e` with every variable found in `from` replaced by the matching
 * expression in `to`; shares unchanged subtrees. */
ir_expr_t *ir_expr_subst(ir_func_t *f, ir_expr_t *e, ir_var_t *const *from,
                         ir_expr_t *const *to, int n);
bool ir_expr_uses_var(const ir_expr_t *e, const ir_var_t *v);
/* The direct children of e, in order (a load's indices, the operand of a
 * unary, a select's condition and arms, a call's arguments, a binary's
 * operands): fills kids and returns their count.  The one switch over
 * expression shapes for walkers that only visit children. */
#define IR_EXPR_MAX_CHILDREN IR_MAX_DIMS
int ir_expr_children(const ir_expr_t *e, const ir_expr_t *kids[IR_EXPR_MAX_CHILDREN]);

/* Tree queries (used by schedules, evaluator and printer). */
ir_block_t *ir_func_root(const ir_func_t *f);
/* Calls fn for every statement in pre-order; return false from fn to skip
 * that statement's children. */
typedef bool (*ir_visit_fn)(ir_stmt_t *s, void *ctx);
void ir_stmt_walk(ir_stmt_t *s, ir_visit_fn fn, void *ctx);
/* Finds a block by name (NULL if absent) / a loop or block by uid. */
ir_stmt_t *ir_func_find_block(const ir_func_t *f, const char *name);
ir_stmt_t *ir_func_find_uid(const ir_func_t *f, int uid);

/* ======================================================================
 * Arithmetic (arith.c): integer interval analysis and simplification.
 * ====================================================================== */

#define IR_INF_POS INT64_MAX
#define IR_INF_NEG INT64_MIN

/* A closed integer interval [lo, hi]; lo = IR_INF_NEG / hi = IR_INF_POS for
 * unbounded ends. */
typedef struct ir_interval {
  int64_t lo, hi;
} ir_interval_t;

/* Known ranges of variables (e.g. loop variables: [0, extent - 1]). */
typedef struct ir_bounds {
  const ir_var_t **vars;
  ir_interval_t *iv;
  int n, cap;
} ir_bounds_t;

void ir_bounds_init(ir_bounds_t *b);
void ir_bounds_free(ir_bounds_t *b);
void ir_bounds_set(ir_bounds_t *b, const ir_var_t *v, int64_t lo, int64_t hi);
bool ir_bounds_get(const ir_bounds_t *b, const ir_var_t *v, ir_interval_t *out);

/* Interval of an integer expression given variable bounds (unknown vars are
 * unbounded).  Exact for constants, sound (possibly loose) otherwise. */
ir_interval_t ir_interval_of(const ir_expr_t *e, const ir_bounds_t *b);

/* Simplifies an expression: constant folding, linear normalisation (collect
 * terms, canonical order), floordiv/floormod elimination by intervals (e.g.
 * (i0*128 + i1) // 128 -> i0 when 0 <= i1 < 128, (x//c)*c + x%c -> x),
 * min/max and comparisons decided by intervals.  Never changes the value of
 * the expression for any assignment within the bounds.  `b` may be NULL. */
ir_expr_t *ir_simplify(ir_func_t *f, ir_expr_t *e, const ir_bounds_t *b);
/* Proves a boolean expression always true within the bounds. */
bool ir_prove(ir_func_t *f, ir_expr_t *cond, const ir_bounds_t *b);

/* Recomputes the read and write regions of a compute block from its body and
 * init: per accessed buffer, per dimension, the smallest [min, min+extent)
 * covering every access, expressed over the block's iterator variables (point
 * accesses give extent 1; accesses that differ by constants, as A[v], A[v+1],
 * A[v+2], give A[v:v+3]; otherwise constant bounds from the iterator domain).
 * Reads list buffers in first-access order; a buffer that is stored to and
 * loaded (the reduction update) appears in writes and also in reads only if
 * it is read somewhere other than its own update. */
void ir_block_infer_regions(ir_func_t *f, ir_block_t *blk);

/* ======================================================================
 * Workloads (frontend/): the *.tw language, see docs/workload-language.md.
 * ====================================================================== */

typedef struct ir_param {
  const char *name;
  int64_t def;   /* default in the source */
  int64_t value; /* value used (default or override) */
  int line, col;
} ir_param_t;

typedef struct ir_param_set {
  const char *name;
  int64_t value;
} ir_param_set_t;

typedef struct ir_workload {
  tn_arena_t *arena;
  const char *name;   /* file stem, e.g. "matmul" for workloads/matmul.tw */
  const char *path;   /* as given to the parser */
  const char *source; /* the full text */
  ir_param_t *params;
  int nparams;
  ir_func_t *func;    /* the unscheduled function, parameters bound */
} ir_workload_t;

/* Limits enforced by the parser (bad input gets an error, never a crash). */
#define IR_MAX_SOURCE_BYTES (1u << 20)
#define IR_MAX_TENSORS 16384 /* declared tensors (arrays grow; a guard against runaway input) */
#define IR_MAX_ELEMENTS (INT64_C(1) << 34) /* per tensor */
#define IR_MAX_EXPR_DEPTH 200
#define IR_MAX_LOOP_DEPTH 1024 /* loops around one block, index and reduction variables of a statement
                                 (lists grow; a guard against runaway input) */

/* Parses and instantiates a workload.  `path` is used for messages
 * ("mm.tw:3:14: unknown tensor 'D'") and for the workload name.  Overrides
 * must name declared params.  On error returns < 0 with err->line/col set. */
int ir_workload_parse(const char *path, const char *text, size_t len,
                      const ir_param_set_t *overrides, int noverrides,
                      ir_workload_t **out, tn_err_t *err);
/* Whether a name may name a parameter, tensor or variable of a workload: an
 * identifier that is no keyword of the language or of C, CUDA and OpenCL,
 * not starting with '__', 'tuned_' or 'v_'. */
bool ir_workload_name_ok(const char *name);
/* Sets err to "PATH:LINE:COL: message" (line and col too) and returns
 * TN_EINVAL: the error form of the workload and TVMScript parsers. */
int ir_src_verr(tn_err_t *err, const char *path, int line, int col, const char *fmt, va_list ap);
/* Reads the file and parses it. */
int ir_workload_load(const char *path, const ir_param_set_t *overrides, int noverrides,
                     ir_workload_t **out, tn_err_t *err);
/* Parses a workload as the database and the protocol keep it: its name
 * (the file stem; "" or NULL: "workload"), its text and its parameter
 * overrides as a JSON object of integers (NULL or "": none). */
int ir_workload_parse_stored(const char *name, const char *text, const char *params_json, ir_workload_t **out,
                             tn_err_t *err);
void ir_workload_free(ir_workload_t *w);
/* Parses "NAME=VALUE" (as given to --set) into a param override. */
int ir_param_set_parse(const char *arg, tn_arena_t *a, ir_param_set_t *out, tn_err_t *err);

/* ======================================================================
 * TVMScript import (frontend/tvmscript.c)
 * ====================================================================== */

/* Reads a TVMScript PrimFunc (text of `path`, as `tunectl show --tvmscript`
 * or TVM's own printer writes it; alone or the one function of an
 * @I.ir_module class) in the subset the workload language covers: buffer
 * parameters (T.Buffer or T.handle + T.match_buffer) and T.alloc_buffer temps
 * of static shape, nests of T.grid / range / T.serial loops each around one
 * block (T.block or T.sblock) whose iterators are bound to those loops in
 * order, spatial then reduce, with T.init for reductions (sum, max, min) and
 * one store, arithmetic, comparisons, T.if_then_else, T.Cast, T.max/min and
 * the language's math functions.  Appends the equivalent workload (*.tw
 * text, checked by parsing it) to out.  Anything else is TN_EINVAL with
 * "PATH:LINE:COL: ..." in err. */
int ir_tvmscript_import(const char *path, const char *text, size_t len, tn_buf_t *out, tn_err_t *err);

/* ======================================================================
 * Printing and hashing (print.c, hash.c)
 * ====================================================================== */

/* Appends TVMScript-shaped text of the function ("@T.prim_func ...") to out. */
void ir_print_func(const ir_func_t *f, tn_buf_t *out);
/* Appends the function as TVMScript in TVM 0.27's dialect (`tirx`, T.sblock,
 * @T.prim_func(s_tir=True), root allocations without the root block), text
 * that tvm.script.from_source parses and ir_tvmscript_import reads back. */
void ir_print_tvmscript(const ir_func_t *f, tn_buf_t *out);
void ir_print_expr(const ir_expr_t *e, tn_buf_t *out);
/* The shortest decimal that reads back as v, Python-repr style ("1.0", not
 * "1"; "1e-05"); inf and nan as the quoted strings TVMScript accepts. */
void ir_print_double(double v, tn_buf_t *out);
/* Fills order[0..n) with annotation indices sorted by key (stable), the order
 * in which the printer shows and the hash reads annotations (as TVM sorts
 * string-keyed maps). */
void ir_annot_order(const ir_annot_t *a, int n, int *order);

/* Structural hash of a function: its identity (TN_ID_HEX hex digits and a
 * NUL, common.h), stable across machines and runs: depends on structure,
 * dtypes, shapes, constants, buffer and block names and loop kinds,
 * annotations; not on variable names or node addresses.  It names the
 * workload's records, jobs and kernels; two programs with one identity
 * cannot be made (BLAKE2b-256). */
void ir_func_hash(const ir_func_t *f, char out[TN_ID_SIZE]);
/* The same structure's FNV-1a 64 hash: what tuned before schema version 8
 * stored as the identity.  For recognising such rows only (db/'s migration);
 * collisions are easy to make, so it must never name anything. */
uint64_t ir_func_hash_fnv(const ir_func_t *f);

/* ======================================================================
 * Reference evaluator and data (eval.c, eval_data.c, eval_metrics.c)
 * ====================================================================== */

/* One array of doubles per function parameter (index = param position). */
typedef struct ir_data {
  int n;
  double **vals;
  int64_t *sizes;
} ir_data_t;

/* Allocates parameter arrays; inputs get deterministic values from `seed`
 * (uniform in [init_lo, init_hi), rounded to the buffer's dtype), outputs are
 * filled with NaN.  Fails with TN_ENOMEM over `max_bytes` of doubles. */
int ir_data_new(const ir_func_t *f, uint64_t seed, size_t max_bytes, ir_data_t **out,
                tn_err_t *err);
void ir_data_free(ir_data_t *d);

/* Runs the function in double precision on d (writes outputs).  Works on any
 * well-formed IR, scheduled or not.  Out-of-bounds loads/stores are reported
 * as TN_ERANGE naming the block and buffer, never performed. */
int ir_eval(const ir_func_t *f, ir_data_t *d, tn_err_t *err);
/* ir_eval that can be stopped midway: stop(ctx) is asked before it starts
 * and then every few thousand loop iterations of any loop (microseconds to a
 * millisecond of work apart, whatever the extents); once it returns true
 * the evaluation gives up with TN_ESTOPPED and d's outputs are partial.
 * stop is called from the evaluation's threads at once, so it must be
 * thread-safe (an atomic flag, a clock), and should stay true once true. */
int ir_eval_stoppable(const ir_func_t *f, ir_data_t *d, bool (*stop)(void *ctx), void *ctx, tn_err_t *err);

/* Most bytes of temporaries (allocated as doubles) one evaluation may use;
 * more is TN_ENOMEM naming the buffer. */
#define IR_EVAL_MAX_TEMP_BYTES ((size_t)4 << 30)

/* Counters of one evaluation (tests and benchmarks look at them). */
typedef struct ir_eval_stats {
  int64_t fast_iters;      /* block instances run lane-wise (also those of chunks later redone) */
  int64_t scalar_iters;    /* compute block instances run one at a time */
  int64_t fallback_chunks; /* fast-path chunks redone one iteration at a time */
  int64_t parallel_loops;  /* outermost loops split over threads ($TUNED_EVAL_THREADS, default
                              the online cores): independent iterations, 2^22+ instances */
} ir_eval_stats_t;

/* ir_eval with options: force_scalar runs every iteration through the plain
 * tree-walking interpreter (the fast path must match it bit for bit); stats
 * may be NULL. */
int ir_eval_opts(const ir_func_t *f, ir_data_t *d, bool force_scalar, ir_eval_stats_t *stats,
                 tn_err_t *err);

/* Relative L2 error ||got - ref|| / ||ref|| (absolute when ||ref|| = 0);
 * +inf if got has a NaN where ref does not. */
double ir_rel_l2_error(const double *ref, const double *got, int64_t n);
/* Tolerance per dtype: float32 1e-4, float16 1e-2, float64 1e-10, ints 0. */
double ir_dtype_tolerance(ir_dtype_t t);
/* float32 outputs of a kernel whose float32 products ran in TF32 (operands
 * rounded to 10 bits of mantissa: a relative error of up to 2^-11 each, about
 * 4e-4 in the L2 norm of a long dot product) are checked at 2e-3. */
#define IR_TF32_TOLERANCE 2e-3

/* Floating-point operations of one run (arithmetic on values, not indices:
 * matmul M*N*K -> 2*M*N*K) and compulsory bytes (all parameters once). */
double ir_func_flops(const ir_func_t *f);
/* Element updates (stores, inits included) one evaluation performs. */
double ir_func_updates(const ir_func_t *f);
/* The most element updates a reference evaluation may take: the reference
 * evaluator runs at about 1e9 updates/s on a few cores, so larger problems
 * are refused before it starts (2^38, minutes of work: matmul 4096^3 is
 * 2^36; $TUNED_EVAL_MAX_UPDATES overrides).  Work under the cap can still
 * be stopped midway (ir_eval_stoppable: a cancel, a job's deadline). */
#define IR_EVAL_MAX_UPDATES 274877906944.0
double ir_eval_max_updates(void);
/* TN_ERANGE, naming the function, the count and the cap, when f is over it. */
int ir_eval_check_work(const ir_func_t *f, tn_err_t *err);
double ir_func_bytes(const ir_func_t *f);

#endif
