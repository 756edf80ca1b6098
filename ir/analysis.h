/* analysis.h — questions every pass asks of a program's tree: the chain of
 * statements from the root to a loop or block, the loops that enclose it
 * within its scope, the scope itself, the blocks of a subtree, and who
 * produces and consumes a block's buffers.  TVM's sref tree and block scope
 * answer the same questions; here they are answered by walks of the tree,
 * with lists that grow (no limit on depth or on the number of blocks). */
#ifndef TUNED_IR_ANALYSIS_H
#define TUNED_IR_ANALYSIS_H

#include "ir/affine.h"
#include "ir/ir.h"

/* The chain from f->root down to a statement: stmts[0] is f->root, stmts[n-1]
 * the target; slots[i] is the pointer in the tree that holds stmts[i], so
 * `*p.slots[i] = replacement` swaps a subtree.  Zero-initialise, reuse for
 * several finds, release with ir_path_free. */
#define IR_PATH_INLINE 32 /* entries held in the struct itself; deeper paths go to the heap */
typedef struct ir_path {
  ir_stmt_t **stmts;
  ir_stmt_t ***slots;
  int n, cap;
  ir_stmt_t *stmts_in[IR_PATH_INLINE]; /* the first storage: do not copy a path by value once used */
  ir_stmt_t **slots_in[IR_PATH_INLINE];
} ir_path_t;

/* Finds the loop or block with this uid; false (p->n == 0) if it is not in f. */
bool ir_path_find(const ir_func_t *f, int uid, ir_path_t *p);
void ir_path_free(ir_path_t *p);
/* Index in p of the closest block strictly above the target (0: the root
 * block), or -1 when the target is the root. */
int ir_path_scope(const ir_path_t *p);

/* Iterator ranges: sets every loop among p->stmts[0 .. upto) to [0, extent). */
void ir_bounds_add_path(ir_bounds_t *b, const ir_path_t *p, int upto);

/* Loops enclosing the loop or block `uid`, outermost first, up to (not
 * crossing) the closest enclosing block, in a malloc'ed array (*out, NULL
 * when none; freed by the caller).  Returns the count, 0 when uid is absent. */
int ir_enclosing_loops(const ir_func_t *f, int uid, ir_loop_t ***out);

/* The closest block strictly enclosing uid (the root block at the top);
 * NULL when uid is absent or is the root. */
ir_block_t *ir_scope_block(const ir_func_t *f, int uid);

/* Every block of f except the root, in tree order, in a malloc'ed array
 * (*out, freed by the caller); returns the count. */
int ir_blocks(const ir_func_t *f, ir_block_t ***out);
/* The same for s and the blocks under it, as ir_collect_blocks counts them
 * (s included when it is a block). */
int ir_blocks_under(ir_stmt_t *s, bool shallow, ir_block_t ***out);
/* s (when it is a block) and the blocks under it, in pre-order (not descending into found
 * blocks when `shallow`): the first max are stored; returns the count, which
 * may exceed max (call with max 0 to size an array). */
int ir_collect_blocks(ir_stmt_t *s, bool shallow, ir_block_t **out, int max);

/* Whether a block's regions read / write the buffer. */
bool ir_block_reads(const ir_block_t *b, const ir_buffer_t *buf);
bool ir_block_writes(const ir_block_t *b, const ir_buffer_t *buf);
/* Producers (blocks of blk's scope, blk excluded, that write a buffer blk
 * reads) and consumers (that read a buffer blk writes), in tree order: the
 * first max are stored; returns the count, which may exceed max. */
int ir_producers(const ir_func_t *f, const ir_block_t *blk, ir_block_t **out, int max);
int ir_consumers(const ir_func_t *f, const ir_block_t *blk, ir_block_t **out, int max);

#endif
