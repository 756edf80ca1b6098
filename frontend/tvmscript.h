/* tvmscript.h — the TVMScript importer's insides, shared by its two files
 * and no others: tvmscript_syntax.c (a small Python lexer, with
 * indentation and brackets, and the parser of its syntax tree) and
 * tvmscript.c (the interpretation of the tree against the workload
 * language's subset, and ir_tvmscript_import of ir/ir.h). */
#ifndef TUNED_FRONTEND_TVMSCRIPT_H
#define TUNED_FRONTEND_TVMSCRIPT_H

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

typedef enum { T_NAME, T_INT, T_FLOAT, T_STR, /* leaves first */ T_OP, T_NEWLINE, T_INDENT, T_DEDENT, T_EOF } tkind_t;

typedef struct token {
  tkind_t kind;
  const char *text; /* NAME, OP (one of ops[]), STR (unescaped) */
  int64_t ival;
  double fval;
  int line, col;
} token_t;

#define MAX_INDENT 100

#define MAX_DEPTH 200 /* nesting of expressions and statements */

typedef struct imp {
  const char *path;
  tn_err_t *err;
  tn_arena_t *arena;
  token_t *toks;
  int ntoks, cap, pos;
  int depth;
} imp_t;

typedef enum {
  E_NAME, E_INT, E_FLOAT, E_STR, E_ATTR, E_CALL, E_INDEX, E_SLICE, E_TUPLE, E_LIST, E_DICT,
  E_BIN,  /* text: the operator (+ - * / // % == != < <= > >= and or) */
  E_NEG, E_NOT,
} ekind_t;

typedef struct expr expr_t;

struct expr {
  ekind_t kind;
  int line, col;
  const char *text; /* NAME, STR, ATTR's attribute, BIN's operator */
  int64_t ival;
  double fval;
  expr_t *a, *b;      /* ATTR: a; INDEX: a = value; BIN, SLICE: a, b; NEG/NOT: a; CALL: a = callee */
  expr_t **items;     /* CALL args, INDEX indices, TUPLE/LIST/DICT items (DICT: key, value, ...) */
  int n;
  const char **kwnames; /* CALL: keyword arguments, kwvals[] */
  expr_t **kwvals;
  int nkw;
};

typedef enum { S_EXPR, S_ASSIGN, S_FOR, S_WITH, S_DEF, S_CLASS, S_SKIP } skind_t;

typedef struct stmt stmt_t;

struct stmt {
  skind_t kind;
  int line, col;
  expr_t **targets; /* ASSIGN, FOR: the names (or one subscript) on the left */
  int ntargets;
  expr_t *value;    /* EXPR, ASSIGN: value; FOR: the iterable; WITH: the context */
  const char *name; /* DEF, CLASS */
  expr_t **decos;   /* DEF, CLASS: decorators */
  int ndecos;
  const char **params; /* DEF: parameter names and annotations */
  expr_t **annots;
  int nparams;
  stmt_t **body;
  int nbody;
};

#define APPEND(p, arr, n, item)                                                 \
  do {                                                                          \
    __typeof__(item) it_ = (item);                                              \
    (arr) = ts_append((p), (arr), (n), sizeof(it_), &it_);                         \
    (n)++;                                                                      \
  } while (0)

/* ---- tvmscript_syntax.c ---------------------------------------------------- */

__attribute__((format(printf, 4, 5))) int ts_ierr(imp_t *p, int line, int col, const char *fmt, ...);
int ts_lex(imp_t *p, const char *s, size_t len);
token_t *ts_peek(imp_t *p);
void *ts_append(imp_t *p, void *arr, int n, size_t size, const void *item);
stmt_t *ts_parse_stmt(imp_t *p);

#endif
