/* front.h — the workload language front end's insides, shared by its
 * files and no others: lex.c (tokens, errors, symbols, the lexer), parse.c
 * (the recursive-descent parser of expressions and declarations), lower.c
 * (lowering expressions to tensor IR with their checks) and workload.c
 * (statements, the whole workload's checks and assembly, and the public
 * API declared in ir/ir.h: ir_workload_parse and its kin).  The front end
 * is built into the ir library (ir/intrin.c parses intrinsic descriptions
 * with it). */
#ifndef TUNED_FRONTEND_FRONT_H
#define TUNED_FRONTEND_FRONT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/affine.h"
#include "ir/ir.h"

#define MAX_PARAMS  1024
#define MAX_ARGS    64
#define MAX_LITERAL ((INT64_C(1) << 62) - 1) /* integer literals fit in 62 bits */
#define MAX_NARROW  64                       /* narrowed terms per select branch */

/* ======================================================================
 * Tokens and parser state
 * ====================================================================== */

/* clang-format off */
typedef enum tok_kind {
  T_EOF, T_NL, T_IDENT, T_INT, T_FLOAT,
  T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_COMMA, T_COLON, T_ASSIGN,
  T_PLUS, T_MINUS, T_STAR, T_SLASH, T_DSLASH, T_PERCENT,
  T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_AND, T_OR, T_NOT,
} tok_kind_t;
/* clang-format on */

/* What each token kind is called in messages (lex.c). */
extern const char *const fe_tok_names[];

typedef struct tok {
  tok_kind_t kind;
  int line, col;
  uint32_t off, len; /* the token's text in the source */
  int64_t ival;      /* T_INT */
  double fval;       /* T_FLOAT */
  bool colon;        /* T_LPAREN: a ':' sits directly inside (a reduction) */
} tok_t;

/* Expression syntax tree of one declaration or statement. */
typedef enum ast_kind { A_INT, A_FLOAT, A_NAME, A_INDEX, A_CALL, A_REDUCE, A_UNARY, A_BINARY } ast_kind_t;

typedef struct ast ast_t;

typedef struct rvar { /* `k < K` in a reduction */
  const char *name;
  int line, col;
  ast_t *extent;
} rvar_t;

struct ast {
  ast_kind_t kind;
  tok_kind_t op;       /* A_UNARY, A_BINARY */
  int line, col;       /* where the expression starts */
  int op_line, op_col; /* A_BINARY: the operator */
  uint32_t off, end;   /* source span, for messages */
  int depth;           /* height of the tree */
  const char *name;    /* A_NAME, A_INDEX, A_CALL, A_REDUCE */
  int64_t ival;
  double fval;
  ast_t **args; /* indices, call arguments, operands, reduction body */
  int nargs;
  rvar_t *rvars; /* A_REDUCE */
  int nrvars;
};

typedef struct tensor {
  const char *name; /* buf->name */
  int line, col;
  ir_buffer_t *buf;
  int stmt;     /* statement computing it, -1 until one does */
  bool hoisted; /* the temp of a reduction inside an expression (at line:col) */
} tensor_t;

typedef struct dep { /* a tensor read by a statement, at its first access */
  int tensor;
  int line, col;
} dep_t;

typedef struct stmt {
  int tensor;
  int line, col; /* the left side */
  ir_stmt_t *nest;
  dep_t *deps; /* in the parser's tmp arena, grown by doubling */
  int ndeps, capdeps;
} stmt_t;

typedef struct parser {
  const char *path;
  const char *src;
  size_t len;
  tn_err_t *err;
  const ir_param_set_t *ovr;
  int novr;
  bool *ovr_used;
  tok_t *toks;
  int ntoks, captoks, pos;
  int depth;       /* current expression nesting while parsing */
  tn_arena_t *ast; /* syntax tree of the current line */
  tn_arena_t *tmp; /* bookkeeping that lives until the end of the parse */
  ir_workload_t *w;
  ir_func_t *f;
  ir_param_t *params;
  int nparams;
  tensor_t *tensors; /* grown as declared (at most IR_MAX_TENSORS) */
  int ntensors, captensors;
  stmt_t *stmts;
  int nstmts, capstmts;
} parser_t;

/* ---- the lowering of one statement (lower.c, workload.c) ---- */

typedef struct svar { /* an index or reduction variable of the current statement */
  const char *name;
  ir_var_t *loop, *iter;
  int64_t extent;
  bool reduce;
} svar_t;

typedef struct lower {
  parser_t *p;
  ir_func_t *f;
  svar_t *vars; /* grows; freed with the statement */
  int nvars, capvars;
  ir_bounds_t bounds;  /* iterator ranges, narrowed inside select branches */
  ir_dtype_t fdefault; /* type of a float literal with no float context */
  struct {             /* E in iv, from enclosing select conditions */
    ir_affine_t lin;   /* E's affine form, compared with others' by ir_affine_const_diff */
    ir_interval_t iv;
  } facts[MAX_NARROW];
  int nfacts;
  int unreachable; /* > 0 inside a select branch that is never taken */
  int in_index;    /* > 0 while lowering an index */
  stmt_t *st;
} lower_t;

/* ---- lex.c: errors, small helpers, symbols, the lexer ------------------------ */

__attribute__((format(printf, 4, 5))) int fe_perr(parser_t *p, int line, int col, const char *fmt, ...);
bool fe_is_alpha(int c);
bool fe_is_digit(int c);
bool fe_is_alnum(int c);
const char *fe_plural(int64_t n, const char *one, const char *many);
bool fe_lang_dtype(const char *s, ir_dtype_t *out);
const char *fe_snippet(const parser_t *p, uint32_t off, uint32_t end, char *buf, size_t cap);
/* The source text of a syntax tree, shortened, for messages. */
#define SNIP(p, a, buf) fe_snippet((p), (a)->off, (a)->end, (buf), sizeof(buf))
const char *fe_tok_desc(const parser_t *p, const tok_t *t, char *buf, size_t cap);
char *fe_tok_dup(const parser_t *p, tn_arena_t *a, const tok_t *t);
bool fe_tok_is(const parser_t *p, const tok_t *t, const char *word);
void fe_fmt_bound(int64_t v, char *buf, size_t cap);
ir_param_t *fe_find_param(parser_t *p, const char *name);
tensor_t *fe_find_tensor(parser_t *p, const char *name);
void fe_list_params(parser_t *p, tn_buf_t *b, const char *none);
int fe_unknown_tensor(parser_t *p, int line, int col, const char *name);
int fe_check_name(parser_t *p, const char *name, int line, int col, const char *what);
int fe_check_new_name(parser_t *p, const char *name, const tok_t *t, const char *what);
int fe_check_bytes(parser_t *p);
int fe_lex(parser_t *p);

/* ---- parse.c: expressions, constant integers, declarations ------------------- */

tok_t *fe_peek(parser_t *p);
tok_t *fe_next(parser_t *p);
__attribute__((format(printf, 3, 4))) int fe_expect(parser_t *p, tok_kind_t k, const char *fmt, ...);
ast_t *fe_parse_expr(parser_t *p);
ast_t *fe_parse_name(parser_t *p, const tok_t *t);
int fe_eval_extent(parser_t *p, const ast_t *a, const char *what, int64_t *out);
int fe_expect_eol(parser_t *p, const char *what);
int fe_parse_params(parser_t *p);
int fe_parse_tensor(parser_t *p, ir_buf_role_t role);

/* ---- lower.c: lowering expressions to tensor IR ------------------------------ */

ir_expr_t *fe_lower(lower_t *L, const ast_t *a, ir_dtype_t hint);
svar_t *fe_find_var(lower_t *L, const char *name);
ir_expr_t *fe_convert(lower_t *L, ir_expr_t *e, ir_dtype_t t);
int fe_need_num(lower_t *L, const ir_expr_t *e, const ast_t *a, const char *what);

#endif
