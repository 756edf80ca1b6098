/* parse.c — the workload language front end (docs/workload-language.md):
 * lexer, recursive-descent parser, checks (names, types, index ranges,
 * dependencies) and lowering of each statement to a loop nest of tensor IR. */
#include "ir.h"
#include "affine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

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

static const char *const tok_names[] = {
    [T_EOF] = "end of file", [T_NL] = "end of line", [T_IDENT] = "a name",
    [T_INT] = "an integer", [T_FLOAT] = "a number", [T_LPAREN] = "'('", [T_RPAREN] = "')'",
    [T_LBRACK] = "'['", [T_RBRACK] = "']'", [T_COMMA] = "','", [T_COLON] = "':'",
    [T_ASSIGN] = "'='", [T_PLUS] = "'+'", [T_MINUS] = "'-'", [T_STAR] = "'*'",
    [T_SLASH] = "'/'", [T_DSLASH] = "'//'", [T_PERCENT] = "'%'", [T_EQ] = "'=='",
    [T_NE] = "'!='", [T_LT] = "'<'", [T_LE] = "'<='", [T_GT] = "'>'", [T_GE] = "'>='",
    [T_AND] = "'&&'", [T_OR] = "'||'", [T_NOT] = "'!'",
};
/* clang-format on */

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

/* ======================================================================
 * Errors and small helpers
 * ====================================================================== */

int ir_src_verr(tn_err_t *err, const char *path, int line, int col, const char *fmt, va_list ap) {
  char msg[TN_ERR_MSG_MAX];
  vsnprintf(msg, sizeof msg, fmt, ap);
  tn_err_set(err, TN_EINVAL, "%s:%d:%d: %s", path, line, col, msg);
  if (err) {
    err->line = line;
    err->col = col;
  }
  return TN_EINVAL;
}

/* Reports "PATH:LINE:COL: message" and returns TN_EINVAL. */
__attribute__((format(printf, 4, 5))) static int perr(parser_t *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = ir_src_verr(p->err, p->path, line, col, fmt, ap);
  va_end(ap);
  return rc;
}

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_alnum(int c) { return is_alpha(c) || is_digit(c); }

static const char *plural(int64_t n, const char *one, const char *many) { return n == 1 ? one : many; }

/* clang-format off */
/* The words of the language itself: never names. */
static const char *const keywords[] = {
    "param", "input", "output", "temp", "sum", "max", "min", "select", "exp", "log", "sqrt",
    "tanh", "abs", "pow", "float16", "bfloat16", "float32", "float64", "int32", "int64", "in",
    "const",
};
/* clang-format on */

static bool is_keyword(const char *s) {
  for (size_t i = 0; i < TN_ARRAY_LEN(keywords); i++)
    if (strcmp(s, keywords[i]) == 0) return true;
  return false;
}

/* Dtypes a workload may name (bool is internal). */
static bool lang_dtype(const char *s, ir_dtype_t *out) {
  static const ir_dtype_t types[] = {IR_FLOAT16, IR_BFLOAT16, IR_FLOAT32, IR_FLOAT64, IR_INT32, IR_INT64};
  for (size_t i = 0; i < TN_ARRAY_LEN(types); i++)
    if (strcmp(s, ir_dtype_name(types[i])) == 0) {
      *out = types[i];
      return true;
    }
  return false;
}

/* Source text of [off, end) for messages: whitespace runs and comments become
 * one space, long text is cut with "...". */
static const char *snippet(const parser_t *p, uint32_t off, uint32_t end, char *buf, size_t cap) {
  size_t n = 0;
  bool space = false;
  for (uint32_t i = off; i < end && i < p->len; i++) {
    char c = p->src[i];
    if (c == '#') {
      while (i + 1 < end && p->src[i + 1] != '\n') i++;
      space = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      space = true;
      continue;
    }
    size_t need = (space && n > 0) + 1;
    if (n + need + 4 > cap) { /* keep room for "..." and the NUL */
      memcpy(buf + n, "...", 3);
      n += 3;
      break;
    }
    if (need == 2) buf[n++] = ' ';
    space = false;
    buf[n++] = c;
  }
  buf[n] = 0;
  return buf;
}

#define SNIP(p, a, buf) snippet((p), (a)->off, (a)->end, (buf), sizeof(buf))

/* "'text'", "end of line" or "end of file", for "found ..." messages. */
static const char *tok_desc(const parser_t *p, const tok_t *t, char *buf, size_t cap) {
  if (t->kind == T_EOF || t->kind == T_NL) return tok_names[t->kind];
  char s[64];
  snprintf(buf, cap, "'%s'", snippet(p, t->off, t->off + t->len, s, sizeof s));
  return buf;
}

static char *tok_dup(const parser_t *p, tn_arena_t *a, const tok_t *t) {
  return tn_arena_strndup(a, p->src + t->off, t->len);
}

static bool tok_is(const parser_t *p, const tok_t *t, const char *word) {
  return t->kind == T_IDENT && t->len == strlen(word) && memcmp(p->src + t->off, word, t->len) == 0;
}

static void fmt_bound(int64_t v, char *buf, size_t cap) {
  if (v == IR_INF_POS)
    snprintf(buf, cap, "+inf");
  else if (v == IR_INF_NEG)
    snprintf(buf, cap, "-inf");
  else
    snprintf(buf, cap, "%lld", (long long)v);
}

/* ======================================================================
 * Symbols
 * ====================================================================== */

static ir_param_t *find_param(parser_t *p, const char *name) {
  for (int i = 0; i < p->nparams; i++)
    if (strcmp(p->params[i].name, name) == 0) return &p->params[i];
  return NULL;
}

static tensor_t *find_tensor(parser_t *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i].name, name) == 0) return &p->tensors[i];
  return NULL;
}

/* "A, B, C" or `none`. */
static void list_tensors(parser_t *p, tn_buf_t *b, const char *none) {
  for (int i = 0; i < p->ntensors; i++) tn_buf_printf(b, "%s%s", i ? ", " : "", p->tensors[i].name);
  if (!p->ntensors) tn_buf_put(b, none);
}

static void list_params(parser_t *p, tn_buf_t *b, const char *none) {
  for (int i = 0; i < p->nparams; i++) tn_buf_printf(b, "%s%s", i ? ", " : "", p->params[i].name);
  if (!p->nparams) tn_buf_put(b, none);
}

static int unknown_tensor(parser_t *p, int line, int col, const char *name) {
  tn_buf_t b;
  tn_buf_init(&b);
  list_tensors(p, &b, "none yet");
  perr(p, line, col, "unknown tensor '%s' (declared: %s)", name, tn_buf_str(&b));
  tn_buf_free(&b);
  return TN_EINVAL;
}

/* A name that reaches generated code must be a plain identifier that is no
 * keyword of the language or of C, CUDA and OpenCL, and none of the prefixes
 * generated code keeps for itself. */
bool ir_workload_name_ok(const char *name) {
  return !is_keyword(name) && strncmp(name, "__", 2) != 0 && strncmp(name, "tuned_", 6) != 0 &&
         strncmp(name, "v_", 2) != 0 && tn_is_identifier(name);
}

static int check_name(parser_t *p, const char *name, int line, int col, const char *what) {
  const char *an = strchr("aeiou", what[0]) ? "an" : "a";
  if (is_keyword(name))
    return perr(p, line, col, "'%s' is a keyword of the workload language and cannot name %s %s", name, an,
                what);
  if (strncmp(name, "__", 2) == 0 || strncmp(name, "tuned_", 6) == 0 || strncmp(name, "v_", 2) == 0)
    return perr(p, line, col,
                "'%s' cannot name %s %s: names starting with '__', 'tuned_' or 'v_' are reserved "
                "for generated code; choose another name",
                name, an, what);
  if (!tn_is_identifier(name)) {
    char langs[96];
    tn_reserved_langs_text(tn_reserved_langs(name) >> TN_RW_WORDS, langs, sizeof langs);
    return perr(p, line, col, "'%s' is a reserved word of %s and cannot name %s %s; choose another name", name,
                langs, an, what);
  }
  return TN_OK;
}

/* Checks a new parameter or tensor name: valid and not declared before. */
static int check_new_name(parser_t *p, const char *name, const tok_t *t, const char *what) {
  int rc = check_name(p, name, t->line, t->col, what);
  if (rc) return rc;
  const ir_param_t *pm = find_param(p, name);
  if (pm)
    return perr(p, t->line, t->col, "'%s' is already declared as a parameter at %d:%d; names must be unique",
                name, pm->line, pm->col);
  const tensor_t *tt = find_tensor(p, name);
  if (tt && tt->hoisted)
    return perr(p, t->line, t->col, "'%s' is the temp of the reduction at %d:%d (a reduction inside an expression "
                "is computed into a temp of that name); choose another name", name, tt->line, tt->col);
  if (tt)
    return perr(p, t->line, t->col, "'%s' is already declared as a tensor at %d:%d; names must be unique",
                name, tt->line, tt->col);
  return TN_OK;
}

/* ======================================================================
 * Lexer
 * ====================================================================== */

/* Rejects what the language never contains (NUL, control characters other
 * than tab, CR and LF, non-ASCII bytes, oversized input) before lexing. */
static int check_bytes(parser_t *p) {
  int line = 1, col = 1;
  for (size_t i = 0; i < p->len; i++) {
    unsigned char c = (unsigned char)p->src[i];
    if (i >= IR_MAX_SOURCE_BYTES) {
      perr(p, line, col, "the workload is larger than the limit of %u bytes", IR_MAX_SOURCE_BYTES);
      if (p->err) p->err->code = TN_ENOMEM;
      return TN_ENOMEM;
    }
    if (c == 0) return perr(p, line, col, "NUL byte in the workload; expected ASCII text");
    if (c >= 0x80) return perr(p, line, col, "non-ASCII byte 0x%02x; workload files are ASCII text", c);
    if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f)
      return perr(p, line, col, "control character 0x%02x; expected ASCII text", c);
    if (c == '\n')
      line++, col = 1;
    else
      col++;
  }
  return TN_OK;
}

static tok_t *push_tok(parser_t *p, tok_kind_t k, int line, int col, size_t off, size_t len) {
  if (p->ntoks == p->captoks) {
    p->captoks = p->captoks ? 2 * p->captoks : 256;
    p->toks = tn_xrealloc(p->toks, sizeof(tok_t) * (size_t)p->captoks);
  }
  tok_t *t = &p->toks[p->ntoks++];
  memset(t, 0, sizeof *t);
  t->kind = k;
  t->line = line;
  t->col = col;
  t->off = (uint32_t)off;
  t->len = (uint32_t)len;
  return t;
}

/* Lexes the number at s[i] (a digit); returns its length or -1. */
static int64_t lex_number(parser_t *p, size_t i, int line, int col) {
  const char *s = p->src;
  size_t n = p->len, j = i;
  bool is_float = false;
  while (j < n && is_digit(s[j])) j++;
  if (j < n && s[j] == '.') {
    is_float = true;
    for (j++; j < n && is_digit(s[j]); j++) {
    }
  }
  if (j < n && (s[j] == 'e' || s[j] == 'E')) {
    size_t k = j + 1;
    if (k < n && (s[k] == '+' || s[k] == '-')) k++;
    if (k < n && is_digit(s[k])) {
      is_float = true;
      for (j = k; j < n && is_digit(s[j]); j++) {
      }
    }
  }
  if (j < n && (is_alnum(s[j]) || s[j] == '.')) {
    size_t k = j;
    while (k < n && (is_alnum(s[k]) || s[k] == '.')) k++;
    return perr(p, line, col,
                "malformed number '%.*s'; expected an integer (1024) or a decimal (0.5, 1e-3, 2.)",
                (int)TN_MIN(k - i, 40), s + i),
           -1;
  }
  tok_t *t = push_tok(p, is_float ? T_FLOAT : T_INT, line, col, i, j - i);
  if (!is_float) {
    for (size_t k = i; k < j; k++) {
      int d = s[k] - '0';
      if (t->ival > (MAX_LITERAL - d) / 10)
        return perr(p, line, col, "integer literal '%.*s' does not fit in 62 bits (the largest is %lld)",
                    (int)TN_MIN(j - i, 40), s + i, (long long)MAX_LITERAL),
               -1;
      t->ival = t->ival * 10 + d;
    }
    return (int64_t)(j - i);
  }
  char buf[401];
  if (j - i >= sizeof buf)
    return perr(p, line, col, "number '%.40s...' is too long (more than %zu characters)", s + i,
                sizeof buf - 1),
           -1;
  memcpy(buf, s + i, j - i);
  buf[j - i] = 0;
  t->fval = strtod(buf, NULL);
  if (!isfinite(t->fval))
    return perr(p, line, col, "number '%.40s' is out of range (the largest is about 1.8e308)", buf), -1;
  return (int64_t)(j - i);
}

/* Lexes an operator at s[i]; returns its length or -1. */
static int lex_operator(parser_t *p, size_t i, int line, int col) {
  static const struct {
    const char *text;
    tok_kind_t kind;
  } ops[] = {
      {"//", T_DSLASH}, {"==", T_EQ},    {"!=", T_NE},    {"<=", T_LE},    {">=", T_GE},    {"&&", T_AND},
      {"||", T_OR},     {"(", T_LPAREN}, {")", T_RPAREN}, {"[", T_LBRACK}, {"]", T_RBRACK}, {",", T_COMMA},
      {":", T_COLON},   {"=", T_ASSIGN}, {"+", T_PLUS},   {"-", T_MINUS},  {"*", T_STAR},   {"/", T_SLASH},
      {"%", T_PERCENT}, {"<", T_LT},     {">", T_GT},     {"!", T_NOT},
  };
  for (size_t k = 0; k < TN_ARRAY_LEN(ops); k++) {
    size_t n = strlen(ops[k].text);
    if (i + n <= p->len && memcmp(p->src + i, ops[k].text, n) == 0) {
      push_tok(p, ops[k].kind, line, col, i, n);
      return (int)n;
    }
  }
  char c = p->src[i];
  if (c == '&' || c == '|')
    return perr(p, line, col, "unexpected character '%c' (did you mean '%c%c'?)", c, c, c), -1;
  return perr(p, line, col, "unexpected character '%c'; expected a name, a number or an operator", c), -1;
}

/* Newlines end a line except inside parentheses or brackets; each '(' learns
 * whether a ':' sits directly inside it (the reduction form). */
static void track_nesting(parser_t *p, int **open, int *nopen, int *cap) {
  tok_t *t = &p->toks[p->ntoks - 1];
  if (t->kind == T_LPAREN || t->kind == T_LBRACK) {
    if (*nopen == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      *open = tn_xrealloc(*open, sizeof(int) * (size_t)*cap);
    }
    (*open)[(*nopen)++] = p->ntoks - 1;
  } else if ((t->kind == T_RPAREN || t->kind == T_RBRACK) && *nopen > 0) {
    (*nopen)--;
  } else if (t->kind == T_COLON && *nopen > 0) {
    p->toks[(*open)[*nopen - 1]].colon = true;
  }
}

static int lex(parser_t *p) {
  int line = 1, col = 1, nopen = 0, cap = 0, *open = NULL;
  size_t i = 0;
  while (i < p->len) {
    char c = p->src[i];
    int64_t n;
    if (c == '\n') {
      if (nopen == 0 && p->ntoks > 0 && p->toks[p->ntoks - 1].kind != T_NL)
        push_tok(p, T_NL, line, col, i, 1);
      line++, col = 1, i++;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      col++, i++;
      continue;
    }
    if (c == '#') {
      while (i < p->len && p->src[i] != '\n') i++, col++;
      continue;
    }
    if (is_alpha(c)) {
      for (n = 1; i + (size_t)n < p->len && is_alnum(p->src[i + (size_t)n]); n++) {
      }
      push_tok(p, T_IDENT, line, col, i, (size_t)n);
    } else if (is_digit(c)) {
      n = lex_number(p, i, line, col);
    } else {
      n = lex_operator(p, i, line, col);
      if (n > 0) track_nesting(p, &open, &nopen, &cap);
    }
    if (n < 0) {
      free(open);
      return TN_EINVAL;
    }
    i += (size_t)n, col += (int)n;
  }
  if (nopen > 0) { /* said where it opened, not past the end of the file */
    const tok_t *o = &p->toks[open[nopen - 1]];
    char c = p->src[o->off];
    free(open);
    return perr(p, o->line, o->col, "'%c' is never closed (expected '%c' before the end of the file)", c,
                c == '(' ? ')' : ']');
  }
  free(open);
  if (p->ntoks > 0 && p->toks[p->ntoks - 1].kind != T_NL) push_tok(p, T_NL, line, col, i, 0);
  push_tok(p, T_EOF, line, col, i, 0);
  return TN_OK;
}

/* ======================================================================
 * Parser: expressions
 * ====================================================================== */

static tok_t *peek(parser_t *p) { return &p->toks[p->pos]; }

static tok_t *next(parser_t *p) {
  tok_t *t = &p->toks[p->pos];
  if (t->kind != T_EOF) p->pos++;
  return t;
}

static bool accept(parser_t *p, tok_kind_t k) {
  if (peek(p)->kind != k) return false;
  next(p);
  return true;
}

static uint32_t prev_end(const parser_t *p) {
  const tok_t *t = &p->toks[p->pos > 0 ? p->pos - 1 : 0];
  return t->off + t->len;
}

/* Consumes a token of kind k or reports "expected K CONTEXT, found X". */
__attribute__((format(printf, 3, 4))) static int expect(parser_t *p, tok_kind_t k, const char *fmt, ...) {
  if (accept(p, k)) return TN_OK;
  char ctx[256], found[80];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  tok_t *t = peek(p);
  return perr(p, t->line, t->col, "expected %s %s, found %s", tok_names[k], ctx,
              tok_desc(p, t, found, sizeof found));
}

static ast_t *ast_new(parser_t *p, ast_kind_t k, const tok_t *t) {
  ast_t *a = TN_NEW(p->ast, ast_t);
  a->kind = k;
  a->line = t->line;
  a->col = t->col;
  a->off = t->off;
  a->end = t->off + t->len;
  a->depth = 1;
  return a;
}

/* Sets a node's children and height; deep trees are an error (every later
 * pass over the IR recurses). */
static ast_t *ast_children(parser_t *p, ast_t *a, ast_t **args, int n) {
  a->args = n ? tn_arena_memdup(p->ast, args, sizeof(ast_t *) * (size_t)n) : NULL;
  a->nargs = n;
  for (int i = 0; i < n; i++) a->depth = TN_MAX(a->depth, args[i]->depth + 1);
  if (a->depth > IR_MAX_EXPR_DEPTH) {
    perr(p, a->line, a->col, "expression is too deep (more than %d levels of operators); split it into temps",
         IR_MAX_EXPR_DEPTH);
    return NULL;
  }
  return a;
}

static ast_t *parse_expr(parser_t *p);

/* Guards the parser's own recursion. */
static bool enter(parser_t *p) {
  if (++p->depth <= IR_MAX_EXPR_DEPTH) return true;
  tok_t *t = peek(p);
  perr(p, t->line, t->col, "expression is nested too deeply (more than %d levels)", IR_MAX_EXPR_DEPTH);
  return false;
}

/* Parses "e1, e2, ...)" after the opening token; `close` ends the list. */
static int parse_list(parser_t *p, tok_kind_t close, const char *what, ast_t **args, int *n) {
  *n = 0;
  if (accept(p, close)) return TN_OK;
  for (;;) {
    if (*n == MAX_ARGS) {
      tok_t *t = peek(p);
      return perr(p, t->line, t->col, "too many %s (more than %d)", what, MAX_ARGS);
    }
    ast_t *e = parse_expr(p);
    if (!e) return TN_EINVAL;
    args[(*n)++] = e;
    if (accept(p, T_COMMA)) continue;
    return expect(p, close, "or ',' in the %s", what);
  }
}

/* `sum(k < K, r < R: body)` after "sum(". */
static ast_t *parse_reduce(parser_t *p, ast_t *a) {
  a->kind = A_REDUCE;
  rvar_t *rv = NULL;
  int n = 0, cap = 0;
  char found[80];
  for (;;) {
    tok_t *t = next(p);
    if (t->kind != T_IDENT) {
      perr(p, t->line, t->col, "expected a reduction variable in %s(...), found %s (e.g. %s(k < K: EXPR))",
           a->name, tok_desc(p, t, found, sizeof found), a->name);
      return NULL;
    }
    if (n == IR_MAX_LOOP_DEPTH - IR_MAX_DIMS) {
      perr(p, t->line, t->col, "too many reduction variables (at most %d)", IR_MAX_LOOP_DEPTH - IR_MAX_DIMS);
      return NULL;
    }
    if (n == cap) { /* the AST arena owns the list; the old copy stays until the line ends */
      cap = cap ? 2 * cap : 8;
      rvar_t *grown = TN_NEWN(p->ast, rvar_t, cap);
      if (n) memcpy(grown, rv, sizeof rv[0] * (size_t)n);
      rv = grown;
    }
    rv[n] = (rvar_t){.name = tok_dup(p, p->ast, t), .line = t->line, .col = t->col};
    if (expect(p, T_LT, "after reduction variable '%s' (e.g. %s < K)", rv[n].name, rv[n].name)) return NULL;
    if (!(rv[n].extent = parse_expr(p))) return NULL;
    n++;
    if (accept(p, T_COMMA)) continue;
    if (expect(p, T_COLON, "or ',' after the reduction variables of %s(...)", a->name)) return NULL;
    break;
  }
  ast_t *body = parse_expr(p);
  if (!body || expect(p, T_RPAREN, "to close %s(...)", a->name)) return NULL;
  a->rvars = rv;
  a->nrvars = n;
  a->end = prev_end(p);
  return ast_children(p, a, &body, 1);
}

/* NAME, NAME[indices], NAME(args) or a reduction, after the name token. */
static ast_t *parse_name(parser_t *p, const tok_t *t) {
  ast_t *a = ast_new(p, A_NAME, t);
  a->name = tok_dup(p, p->ast, t);
  ast_t *args[MAX_ARGS];
  int n = 0;
  if (accept(p, T_LBRACK)) {
    a->kind = A_INDEX;
    if (parse_list(p, T_RBRACK, "indices", args, &n)) return NULL;
  } else if (peek(p)->kind == T_LPAREN) {
    if (next(p)->colon) {
      if (strcmp(a->name, "sum") && strcmp(a->name, "max") && strcmp(a->name, "min")) {
        perr(p, t->line, t->col,
             "'%s(...)' contains ':', but only the reductions sum, max and min "
             "declare variables (e.g. sum(k < K: EXPR))",
             a->name);
        return NULL;
      }
      return parse_reduce(p, a);
    }
    a->kind = A_CALL;
    if (parse_list(p, T_RPAREN, "arguments", args, &n)) return NULL;
  }
  a->end = prev_end(p);
  return ast_children(p, a, args, n);
}

static ast_t *parse_primary(parser_t *p) {
  tok_t *t = next(p);
  char found[80];
  ast_t *a;
  switch (t->kind) {
  case T_INT:
    a = ast_new(p, A_INT, t);
    a->ival = t->ival;
    return a;
  case T_FLOAT:
    a = ast_new(p, A_FLOAT, t);
    a->fval = t->fval;
    return a;
  case T_IDENT: return parse_name(p, t);
  case T_LPAREN:
    a = parse_expr(p);
    if (!a || expect(p, T_RPAREN, "to close the '(' at %d:%d", t->line, t->col)) return NULL;
    return a;
  default:
    perr(p, t->line, t->col, "expected an expression, found %s", tok_desc(p, t, found, sizeof found));
    return NULL;
  }
}

static ast_t *parse_unary(parser_t *p) {
  tok_t *t = peek(p);
  if (t->kind != T_MINUS && t->kind != T_NOT) return parse_primary(p);
  next(p);
  if (!enter(p)) return NULL;
  ast_t *x = parse_unary(p);
  p->depth--;
  if (!x) return NULL;
  ast_t *a = ast_new(p, A_UNARY, t);
  a->op = t->kind;
  a->end = x->end;
  return ast_children(p, a, &x, 1);
}

/* Binary precedence levels, loosest first. */
static const tok_kind_t levels[][7] = {
    {T_OR},
    {T_AND},
    {T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE},
    {T_PLUS, T_MINUS},
    {T_STAR, T_SLASH, T_DSLASH, T_PERCENT},
};

static bool at_level(tok_kind_t k, int level) {
  for (int i = 0; i < 7 && levels[level][i] != T_EOF; i++)
    if (levels[level][i] == k) return true;
  return false;
}

static ast_t *parse_binary(parser_t *p, int level) {
  if (level == (int)TN_ARRAY_LEN(levels)) return parse_unary(p);
  ast_t *x = parse_binary(p, level + 1);
  while (x && at_level(peek(p)->kind, level)) {
    tok_t *op = next(p);
    ast_t *y = parse_binary(p, level + 1);
    if (!y) return NULL;
    ast_t *a = ast_new(p, A_BINARY, op);
    a->op = op->kind;
    a->line = x->line, a->col = x->col, a->off = x->off, a->end = y->end;
    a->op_line = op->line, a->op_col = op->col;
    ast_t *xy[2] = {x, y};
    x = ast_children(p, a, xy, 2);
  }
  return x;
}

static ast_t *parse_expr(parser_t *p) {
  if (!enter(p)) return NULL;
  ast_t *a = parse_binary(p, 0);
  p->depth--;
  return a;
}

/* ======================================================================
 * Constant integer expressions (shapes, extents)
 * ====================================================================== */

static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t floormod64(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static int const_binary(parser_t *p, const ast_t *a, const char *what, int64_t x, int64_t y, int64_t *out) {
  char s[96];
  bool ovf = false;
  switch (a->op) {
  case T_PLUS: ovf = __builtin_add_overflow(x, y, out); break;
  case T_MINUS: ovf = __builtin_sub_overflow(x, y, out); break;
  case T_STAR: ovf = __builtin_mul_overflow(x, y, out); break;
  case T_SLASH:
  case T_DSLASH:
  case T_PERCENT:
    if (y == 0) return perr(p, a->op_line, a->op_col, "division by zero in %s ('%s')", what, SNIP(p, a, s));
    ovf = x == INT64_MIN && y == -1;
    if (!ovf) *out = a->op == T_PERCENT ? floormod64(x, y) : floordiv64(x, y);
    break;
  default:
    return perr(p, a->op_line, a->op_col,
                "%s may only use integer literals, parameters, parentheses and "
                "+ - * / // %% (found '%s')",
                what, SNIP(p, a, s));
  }
  if (ovf) return perr(p, a->op_line, a->op_col, "integer overflow in %s ('%s')", what, SNIP(p, a, s));
  return TN_OK;
}

/* Evaluates an integer expression over parameters and literals. */
static int const_eval(parser_t *p, const ast_t *a, const char *what, int64_t *out) {
  char s[96];
  int64_t x, y;
  int rc;
  switch (a->kind) {
  case A_INT: *out = a->ival; return TN_OK;
  case A_NAME: {
    const ir_param_t *pm = find_param(p, a->name);
    if (pm) return *out = pm->value, TN_OK;
    if (find_tensor(p, a->name))
      return perr(p, a->line, a->col, "'%s' is a tensor, but %s may only use parameters and integer literals",
                  a->name, what);
    tn_buf_t b;
    tn_buf_init(&b);
    list_params(p, &b, "none yet");
    perr(p, a->line, a->col, "unknown parameter '%s' in %s (declared: %s)", a->name, what, tn_buf_str(&b));
    tn_buf_free(&b);
    return TN_EINVAL;
  }
  case A_UNARY:
    if (a->op != T_MINUS) break;
    if ((rc = const_eval(p, a->args[0], what, &x))) return rc;
    if (x == INT64_MIN) return perr(p, a->line, a->col, "integer overflow in %s ('%s')", what, SNIP(p, a, s));
    return *out = -x, TN_OK;
  case A_BINARY:
    if ((rc = const_eval(p, a->args[0], what, &x)) || (rc = const_eval(p, a->args[1], what, &y))) return rc;
    return const_binary(p, a, what, x, y, out);
  default: break;
  }
  return perr(p, a->line, a->col,
              "%s may only use integer literals, parameters, parentheses and "
              "+ - * / // %% (found '%s')",
              what, SNIP(p, a, s));
}

/* An extent (shape dimension or reduction domain): 1 .. INT32_MAX. */
static int eval_extent(parser_t *p, const ast_t *a, const char *what, int64_t *out) {
  char s[96];
  int rc = const_eval(p, a, what, out);
  if (rc) return rc;
  if (*out < 1)
    return perr(p, a->line, a->col, "%s is %lld ('%s'); expected a value >= 1", what, (long long)*out,
                SNIP(p, a, s));
  if (*out > INT32_MAX)
    return perr(p, a->line, a->col, "%s is %lld ('%s'); expected at most %d (indices are int32)", what,
                (long long)*out, SNIP(p, a, s), INT32_MAX);
  return TN_OK;
}

/* ======================================================================
 * Declarations
 * ====================================================================== */

static int expect_eol(parser_t *p, const char *what) {
  tok_t *t = peek(p);
  char found[80];
  if (t->kind == T_EOF || accept(p, T_NL)) return TN_OK;
  return perr(p, t->line, t->col, "expected end of line after the %s, found %s", what,
              tok_desc(p, t, found, sizeof found));
}

static const ir_param_set_t *find_override(parser_t *p, const char *name) {
  for (int i = 0; i < p->novr; i++)
    if (strcmp(p->ovr[i].name, name) == 0) {
      p->ovr_used[i] = true;
      return &p->ovr[i];
    }
  return NULL;
}

/* An integer with an optional leading '-'. */
static int parse_signed_int(parser_t *p, const char *what, int64_t *out) {
  bool neg = accept(p, T_MINUS);
  tok_t *t = next(p);
  char found[80];
  if (t->kind != T_INT)
    return perr(p, t->line, t->col, "expected an integer %s, found %s", what,
                tok_desc(p, t, found, sizeof found));
  *out = neg ? -t->ival : t->ival;
  return TN_OK;
}

/* param NAME = INT [, NAME = INT ...] */
static int parse_params(parser_t *p) {
  next(p);
  char found[80];
  do {
    tok_t *t = next(p);
    if (t->kind != T_IDENT)
      return perr(p, t->line, t->col, "expected a parameter name, found %s (e.g. param N = 1024)",
                  tok_desc(p, t, found, sizeof found));
    char *name = tok_dup(p, p->w->arena, t);
    int64_t v = 0;
    int rc = check_new_name(p, name, t, "parameter");
    if (!rc && p->nparams == MAX_PARAMS)
      rc = perr(p, t->line, t->col, "too many parameters (the limit is %d)", MAX_PARAMS);
    if (rc || (rc = expect(p, T_ASSIGN, "after parameter '%s' (e.g. %s = 1024)", name, name)) ||
        (rc = parse_signed_int(p, "value for the parameter", &v)))
      return rc;
    if (p->nparams % 16 == 0)
      p->params = tn_xrealloc(p->params, sizeof(ir_param_t) * (size_t)(p->nparams + 16));
    const ir_param_set_t *o = find_override(p, name);
    p->params[p->nparams++] =
        (ir_param_t){.name = name, .def = v, .value = o ? o->value : v, .line = t->line, .col = t->col};
  } while (accept(p, T_COMMA));
  return expect_eol(p, "parameters");
}

/* A number with an optional leading '-' (value ranges). */
static int parse_signed_number(parser_t *p, double *out) {
  bool neg = accept(p, T_MINUS);
  tok_t *t = next(p);
  char found[80];
  if (t->kind != T_INT && t->kind != T_FLOAT)
    return perr(p, t->line, t->col, "expected a number in the value range, found %s",
                tok_desc(p, t, found, sizeof found));
  *out = (t->kind == T_INT ? (double)t->ival : t->fval) * (neg ? -1 : 1);
  return TN_OK;
}

/* `in [lo, hi)` after an input's shape. */
static int parse_value_range(parser_t *p, const tok_t *in, ir_buf_role_t role, double *lo, double *hi) {
  if (role != IR_BUF_INPUT)
    return perr(p, in->line, in->col,
                "only inputs take a value range ('in [lo, hi)'); outputs and temps "
                "are computed");
  int rc;
  if ((rc = expect(p, T_LBRACK, "after 'in' (e.g. in [0, 1))")) || (rc = parse_signed_number(p, lo)) ||
      (rc = expect(p, T_COMMA, "between the bounds of the value range")) ||
      (rc = parse_signed_number(p, hi)) ||
      (rc = expect(p, T_RPAREN, "to close the value range (it is half-open: [lo, hi))")))
    return rc;
  if (!(*lo < *hi))
    return perr(p, in->line, in->col, "empty value range [%g, %g); expected lo < hi", *lo, *hi);
  return TN_OK;
}

/* The shape list after '[': dimensions evaluated over the parameters. */
static int parse_shape(parser_t *p, const char *name, int64_t *shape, int *ndim) {
  ast_t *dims[MAX_ARGS];
  int n, rc = parse_list(p, T_RBRACK, "dimensions", dims, &n);
  if (rc) return rc;
  if (n > IR_MAX_DIMS)
    return perr(p, dims[IR_MAX_DIMS]->line, dims[IR_MAX_DIMS]->col,
                "tensor '%s' has %d dimensions; at most %d are supported", name, n, IR_MAX_DIMS);
  int64_t numel = 1;
  for (int d = 0; d < n; d++) {
    char what[128];
    snprintf(what, sizeof what, "dimension %d of '%s'", d, name);
    if ((rc = eval_extent(p, dims[d], what, &shape[d]))) return rc;
    if (__builtin_mul_overflow(numel, shape[d], &numel) || numel > IR_MAX_ELEMENTS)
      return perr(p, dims[d]->line, dims[d]->col,
                  "tensor '%s' has more than %lld elements (the limit per tensor)", name,
                  (long long)IR_MAX_ELEMENTS);
  }
  *ndim = n;
  return TN_OK;
}

/* input|output|temp NAME: DTYPE[SHAPE] [in [lo, hi)] [const] (the last two in either order) */
static int parse_tensor(parser_t *p, ir_buf_role_t role) {
  tok_t *kw = next(p), *t = next(p);
  char found[80], kws[16];
  snprintf(kws, sizeof kws, "%.*s", (int)kw->len, p->src + kw->off);
  if (t->kind != T_IDENT)
    return perr(p, t->line, t->col, "expected a tensor name after '%s', found %s (e.g. %s A: float32[M, K])",
                kws, tok_desc(p, t, found, sizeof found), kws);
  char *name = tok_dup(p, p->ast, t);
  int rc = check_new_name(p, name, t, "tensor");
  if (rc) return rc;
  if (p->ntensors == IR_MAX_TENSORS)
    return perr(p, t->line, t->col, "too many tensors (the limit is %d)", IR_MAX_TENSORS);
  if ((rc = expect(p, T_COLON, "after tensor name '%s' (e.g. %s: float32[M, K])", name, name))) return rc;
  tok_t *dt = next(p);
  ir_dtype_t dtype;
  char *dname = tok_dup(p, p->ast, dt);
  if (dt->kind != T_IDENT)
    return perr(p, dt->line, dt->col,
                "expected a dtype (float16, bfloat16, float32, float64, int32 or int64) after "
                "'%s:', found %s",
                name, tok_desc(p, dt, found, sizeof found));
  if (!lang_dtype(dname, &dtype))
    return perr(p, dt->line, dt->col,
                "unknown dtype '%s' (expected float16, bfloat16, float32, float64, int32 or int64)", dname);
  int64_t shape[IR_MAX_DIMS];
  int ndim = 0;
  if ((rc = expect(p, T_LBRACK, "after the dtype (the shape, e.g. %s[M, K]; [] for a scalar)", dname)) ||
      (rc = parse_shape(p, name, shape, &ndim)))
    return rc;
  double lo = ir_dtype_is_float(dtype) ? -1.0 : -8.0, hi = -lo;
  bool ranged = false, is_const = false;
  for (tok_t *in = peek(p); tok_is(p, in, "in") || tok_is(p, in, "const"); in = peek(p)) {
    next(p);
    if (tok_is(p, in, "const")) {
      if (role != IR_BUF_INPUT)
        return perr(p, in->line, in->col, "only inputs can be 'const' (values that do not change between calls); "
                    "'%s' is computed", name);
      if (is_const) return perr(p, in->line, in->col, "'const' given twice for '%s'", name);
      is_const = true;
    } else {
      if (ranged) return perr(p, in->line, in->col, "a second value range for '%s'", name);
      if ((rc = parse_value_range(p, in, role, &lo, &hi))) return rc;
      ranged = true;
    }
  }
  if ((rc = expect_eol(p, "tensor declaration"))) return rc;
  ir_buffer_t *b = ir_buffer_new(p->f, name, dtype, ndim, shape, IR_SCOPE_GLOBAL, role);
  b->init_lo = lo, b->init_hi = hi;
  b->is_const = is_const;
  if (p->ntensors == p->captensors) {
    p->captensors = p->captensors ? 2 * p->captensors : 16;
    p->tensors = tn_xrealloc(p->tensors, sizeof *p->tensors * (size_t)p->captensors);
  }
  p->tensors[p->ntensors++] =
      (tensor_t){.name = b->name, .line = t->line, .col = t->col, .buf = b, .stmt = -1};
  return TN_OK;
}

/* ======================================================================
 * Lowering expressions: types, names, accesses and range checks
 * ====================================================================== */

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

static ir_expr_t *lower(lower_t *L, const ast_t *a, ir_dtype_t hint);

static svar_t *find_var(lower_t *L, const char *name) {
  for (int i = 0; i < L->nvars; i++)
    if (strcmp(L->vars[i].name, name) == 0) return &L->vars[i];
  return NULL;
}

/* Literals, parameters and arithmetic on them take the type of their context
 * (the other operand, or the hint) instead of int32/float32. */
static bool is_untyped(lower_t *L, const ast_t *a) {
  switch (a->kind) {
  case A_INT:
  case A_FLOAT: return true;
  case A_NAME: return !find_var(L, a->name) && find_param(L->p, a->name);
  case A_UNARY: return a->op == T_MINUS && is_untyped(L, a->args[0]);
  case A_BINARY:
    return (a->op == T_PLUS || a->op == T_MINUS || a->op == T_STAR || a->op == T_SLASH || a->op == T_DSLASH ||
            a->op == T_PERCENT) &&
           is_untyped(L, a->args[0]) && is_untyped(L, a->args[1]);
  default: return false;
  }
}

static ir_expr_t *float_const(lower_t *L, const ast_t *a, double v, ir_dtype_t t) {
  char s[96];
  if (fabs(v) > ir_dtype_max_value(t)) {
    perr(L->p, a->line, a->col, "constant '%s' (%g) is out of range for %s (largest finite value %g)",
         SNIP(L->p, a, s), v, ir_dtype_name(t), ir_dtype_max_value(t));
    return NULL;
  }
  return ir_float(L->f, t, v);
}

static ir_expr_t *int_const(lower_t *L, const ast_t *a, int64_t v, ir_dtype_t hint) {
  char s[96];
  if (ir_dtype_is_float(hint)) return float_const(L, a, (double)v, hint);
  if (hint == IR_INT64) return ir_const_int(L->f, IR_INT64, v);
  if (v < INT32_MIN || v > INT32_MAX) {
    perr(L->p, a->line, a->col, "integer constant '%s' = %lld does not fit in int32, the type it has here",
         SNIP(L->p, a, s), (long long)v);
    return NULL;
  }
  return ir_int(L->f, v);
}

/* Converts to dtype t, folding constants. */
static ir_expr_t *convert(lower_t *L, ir_expr_t *e, ir_dtype_t t) {
  if (e->dtype == t) return e;
  if (e->kind == IR_E_INT && e->dtype != IR_BOOL) {
    int64_t v = e->u.ival;
    if (ir_dtype_is_float(t) && fabs((double)v) <= ir_dtype_max_value(t)) return ir_float(L->f, t, (double)v);
    if (t == IR_INT64 || (t == IR_INT32 && v >= INT32_MIN && v <= INT32_MAX)) return ir_const_int(L->f, t, v);
  }
  if (e->kind == IR_E_FLOAT && ir_dtype_is_float(t) && fabs(e->u.fval) <= ir_dtype_max_value(t))
    return ir_float(L->f, t, e->u.fval);
  return ir_cast(L->f, t, e);
}

static int need_num(lower_t *L, const ir_expr_t *e, const ast_t *a, const char *what) {
  char s[96];
  if (e->dtype != IR_BOOL) return TN_OK;
  return perr(L->p, a->line, a->col, "expected a number for %s, but '%s' is boolean", what, SNIP(L->p, a, s));
}

static int need_bool(lower_t *L, const ir_expr_t *e, const ast_t *a, const char *what) {
  char s[96];
  if (e->dtype == IR_BOOL) return TN_OK;
  return perr(L->p, a->line, a->col,
              "expected a boolean for %s, but '%s' is %s (a comparison such as "
              "'x > 0' is boolean)",
              what, SNIP(L->p, a, s), ir_dtype_name(e->dtype));
}

/* Wider of two numeric types: floats beat ints, wider beats narrower. */
static ir_dtype_t promote(ir_dtype_t a, ir_dtype_t b) {
  bool fa = ir_dtype_is_float(a), fb = ir_dtype_is_float(b);
  if (fa != fb) return fa ? a : b;
  if (a != b && ir_dtype_is_16bit_float(a) && ir_dtype_is_16bit_float(b)) return IR_FLOAT32; /* f16 with bf16 */
  return ir_dtype_bytes(a) >= ir_dtype_bytes(b) ? a : b;
}

/* Brings two numeric operands to a common type. */
static int unify(lower_t *L, const ast_t *x, const ast_t *y, const char *what, ir_expr_t **ex,
                 ir_expr_t **ey) {
  int rc;
  if ((rc = need_num(L, *ex, x, what)) || (rc = need_num(L, *ey, y, what))) return rc;
  ir_dtype_t t = promote((*ex)->dtype, (*ey)->dtype);
  *ex = convert(L, *ex, t);
  *ey = convert(L, *ey, t);
  return TN_OK;
}

static int64_t sat_add_const(int64_t v, int64_t c) {
  int64_t r;
  if (v == IR_INF_POS || v == IR_INF_NEG) return v;
  if (__builtin_add_overflow(v, c, &r)) return c > 0 ? IR_INF_POS : IR_INF_NEG;
  return r;
}

/* Interval of an integer expression from the variable bounds and from the
 * facts (`E in [lo, hi]`) that enclosing select conditions establish. */
static ir_interval_t known_interval(const lower_t *L, const ir_expr_t *e) {
  ir_interval_t iv = ir_interval_of(e, &L->bounds);
  if (!L->nfacts) return iv;
  ir_affine_t le = {0};
  ir_affine_of(e, 0, &le); /* an expression that is not affine matches no fact */
  for (int i = 0; i < L->nfacts; i++) {
    int64_t c;
    if (!ir_affine_const_diff(&le, &L->facts[i].lin, &c)) continue;
    iv.lo = TN_MAX(iv.lo, sat_add_const(L->facts[i].iv.lo, c));
    iv.hi = TN_MIN(iv.hi, sat_add_const(L->facts[i].iv.hi, c));
  }
  ir_affine_free(&le);
  return iv;
}

typedef struct saved { /* what narrowing changed, to undo it */
  const ir_var_t *var[MAX_NARROW];
  ir_interval_t iv[MAX_NARROW];
  int n, nfacts;
  bool empty;
} saved_t;

/* Learns `e OP other`: narrows a variable's bounds, or records a fact about
 * a linear expression. */
static void narrow_term(lower_t *L, const ir_expr_t *e, ir_expr_kind_t op, const ir_expr_t *other,
                        saved_t *sv) {
  ir_interval_t cur = known_interval(L, e), o = known_interval(L, other);
  if (op == IR_E_LT && o.hi != IR_INF_POS && o.hi != IR_INF_NEG) cur.hi = TN_MIN(cur.hi, o.hi - 1);
  if (op == IR_E_LE || op == IR_E_EQ) cur.hi = TN_MIN(cur.hi, o.hi);
  if (op == IR_E_GT && o.lo != IR_INF_NEG && o.lo != IR_INF_POS) cur.lo = TN_MAX(cur.lo, o.lo + 1);
  if (op == IR_E_GE || op == IR_E_EQ) cur.lo = TN_MAX(cur.lo, o.lo);
  if (cur.lo > cur.hi) sv->empty = true;
  ir_interval_t old;
  if (e->kind == IR_E_VAR && sv->n < MAX_NARROW && ir_bounds_get(&L->bounds, e->u.var, &old)) {
    sv->var[sv->n] = e->u.var, sv->iv[sv->n++] = old;
    ir_bounds_set(&L->bounds, e->u.var, cur.lo, cur.hi);
  } else if (e->kind != IR_E_VAR && L->nfacts < MAX_NARROW && ir_affine_of(e, 0, &L->facts[L->nfacts].lin)) {
    L->facts[L->nfacts++].iv = cur;
  }
}

static ir_expr_kind_t mirror(ir_expr_kind_t k) {
  switch (k) {
  case IR_E_LT: return IR_E_GT;
  case IR_E_LE: return IR_E_GE;
  case IR_E_GT: return IR_E_LT;
  case IR_E_GE: return IR_E_LE;
  default: return k;
  }
}

/* Learns from a condition's integer comparisons joined with &&. */
static void narrow(lower_t *L, const ir_expr_t *c, saved_t *sv) {
  if (c->kind == IR_E_AND) {
    narrow(L, c->u.bin.a, sv);
    narrow(L, c->u.bin.b, sv);
    return;
  }
  if (!ir_expr_is_compare(c->kind) || c->kind == IR_E_NE || !ir_dtype_is_int(c->u.bin.a->dtype)) return;
  narrow_term(L, c->u.bin.a, c->kind, c->u.bin.b, sv);
  narrow_term(L, c->u.bin.b, mirror(c->kind), c->u.bin.a, sv);
}

/* Lowers `a` where `cond` (may be NULL) is known to hold. */
static ir_expr_t *lower_under(lower_t *L, const ast_t *a, ir_dtype_t hint, const ir_expr_t *cond) {
  if (!cond) return lower(L, a, hint);
  saved_t sv = {.nfacts = L->nfacts};
  narrow(L, cond, &sv);
  L->unreachable += sv.empty;
  ir_expr_t *e = lower(L, a, hint);
  L->unreachable -= sv.empty;
  L->nfacts = sv.nfacts;
  while (sv.n-- > 0) ir_bounds_set(&L->bounds, sv.var[sv.n], sv.iv[sv.n].lo, sv.iv[sv.n].hi);
  return e;
}

/* Lowers two operands; an untyped one takes the other's type (x is lowered
 * under `cond`, the taken branch of a select). */
static int lower_pair(lower_t *L, const ast_t *x, const ast_t *y, ir_dtype_t hint, const ir_expr_t *cond,
                      ir_expr_t **ex, ir_expr_t **ey) {
  bool ux = is_untyped(L, x), uy = is_untyped(L, y);
  if (ux && !uy) {
    if (!(*ey = lower(L, y, hint))) return TN_EINVAL;
    ir_dtype_t h = (*ey)->dtype != IR_BOOL ? (*ey)->dtype : hint;
    return (*ex = lower_under(L, x, h, cond)) ? TN_OK : TN_EINVAL;
  }
  if (!(*ex = lower_under(L, x, hint, cond))) return TN_EINVAL;
  ir_dtype_t h = uy && (*ex)->dtype != IR_BOOL ? (*ex)->dtype : hint;
  return (*ey = lower(L, y, h)) ? TN_OK : TN_EINVAL;
}

static void add_dep(lower_t *L, const tensor_t *T, const ast_t *a) {
  int ti = (int)(T - L->p->tensors);
  stmt_t *st = L->st;
  for (int i = 0; i < st->ndeps; i++)
    if (st->deps[i].tensor == ti) return;
  if (st->ndeps == st->capdeps) {
    dep_t *grown = TN_NEWN(L->p->tmp, dep_t, st->capdeps ? 2 * st->capdeps : 4);
    if (st->ndeps) memcpy(grown, st->deps, sizeof *grown * (size_t)st->ndeps);
    st->deps = grown;
    st->capdeps = st->capdeps ? 2 * st->capdeps : 4;
  }
  st->deps[st->ndeps++] = (dep_t){.tensor = ti, .line = a->line, .col = a->col};
}

/* Every index must stay inside its dimension for every iteration. */
static int check_range(lower_t *L, const ast_t *access, int d, const ast_t *ia, const ir_expr_t *idx,
                       int64_t extent) {
  ir_interval_t iv = known_interval(L, idx);
  if (L->unreachable || (iv.lo >= 0 && iv.hi <= extent - 1)) return TN_OK;
  char s[96], lo[24], hi[24], bad[24];
  fmt_bound(iv.lo, lo, sizeof lo);
  fmt_bound(iv.hi, hi, sizeof hi);
  fmt_bound(iv.hi > extent - 1 ? iv.hi : iv.lo, bad, sizeof bad);
  return perr(L->p, ia->line, ia->col,
              "access %s can reach index %s in dimension %d of extent %lld (index "
              "range [%s, %s]); expected indices in [0, %lld]",
              SNIP(L->p, access, s), bad, d, (long long)extent, lo, hi, (long long)extent - 1);
}

/* T[e1, ...] (or a bare tensor name for 0 indices). */
static ir_expr_t *lower_access(lower_t *L, const ast_t *a) {
  parser_t *p = L->p;
  tensor_t *T = find_tensor(p, a->name);
  char s[96];
  if (!T) return unknown_tensor(p, a->line, a->col, a->name), NULL;
  ir_buffer_t *b = T->buf;
  if (L->in_index)
    return perr(p, a->line, a->col,
                "tensor access '%s' inside an index; indices are integer expressions "
                "over index variables and parameters",
                SNIP(p, a, s)),
           NULL;
  if (a->nargs != b->ndim)
    return perr(p, a->line, a->col, "tensor '%s' has %d %s but %d %s given", b->name, b->ndim,
                plural(b->ndim, "dimension", "dimensions"), a->nargs,
                plural(a->nargs, "index was", "indices were")),
           NULL;
  ir_expr_t *idx[IR_MAX_DIMS];
  L->in_index++;
  for (int d = 0; d < b->ndim; d++) {
    const ast_t *ia = a->args[d];
    if (!(idx[d] = lower(L, ia, IR_INT32))) return NULL;
    if (idx[d]->dtype != IR_INT32)
      return perr(p, ia->line, ia->col, "index %d of '%s' must be an int32 expression, but '%s' is %s", d,
                  b->name, SNIP(p, ia, s), ir_dtype_name(idx[d]->dtype)),
             NULL;
    if (check_range(L, a, d, ia, idx[d], b->shape[d])) return NULL;
  }
  L->in_index--;
  add_dep(L, T, a);
  return ir_load(L->f, b, idx, b->ndim);
}

static ir_expr_t *lower_name(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  parser_t *p = L->p;
  svar_t *v = find_var(L, a->name);
  if (v) return ir_varref(L->f, v->iter);
  const ir_param_t *pm = find_param(p, a->name);
  if (pm) return int_const(L, a, pm->value, hint);
  if (find_tensor(p, a->name)) return lower_access(L, a);
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = 0; i < L->nvars; i++) tn_buf_printf(&b, "%s%s", i ? ", " : "", L->vars[i].name);
  if (!L->nvars) tn_buf_put(&b, "none");
  tn_buf_put(&b, "; parameters: ");
  list_params(p, &b, "none");
  perr(p, a->line, a->col, "unknown variable or parameter '%s' (variables here: %s)", a->name,
       tn_buf_str(&b));
  tn_buf_free(&b);
  return NULL;
}

/* Integer division and modulo need a divisor that is always >= 1. */
static int check_divisor(lower_t *L, const ast_t *a, const ir_expr_t *d) {
  ir_interval_t iv = known_interval(L, d);
  if (L->unreachable || iv.lo >= 1) return TN_OK;
  char s[96], lo[24], hi[24];
  fmt_bound(iv.lo, lo, sizeof lo);
  fmt_bound(iv.hi, hi, sizeof hi);
  return perr(L->p, a->line, a->col,
              "integer divisor '%s' can be %s (range [%s, %s]); expected a divisor "
              "that is always >= 1",
              SNIP(L->p, a, s), iv.lo <= 0 && iv.hi >= 0 ? "0" : "negative", lo, hi);
}

/* Integer arithmetic whose known range leaves int32 would wrap in generated
 * code (the evaluator computes in double): an error wherever the range is
 * known (unknown ends, from loaded values, are the data's business). */
static ir_expr_t *check_int32(lower_t *L, const ast_t *a, ir_expr_t *e) {
  if (!e || e->dtype != IR_INT32 || L->unreachable) return e;
  ir_interval_t iv = ir_interval_of(e, &L->bounds);
  bool lo_bad = iv.lo != IR_INF_NEG && iv.lo < INT32_MIN, hi_bad = iv.hi != IR_INF_POS && iv.hi > INT32_MAX;
  if (!lo_bad && !hi_bad) return e;
  char s[96], lo[24], hi[24];
  fmt_bound(iv.lo, lo, sizeof lo);
  fmt_bound(iv.hi, hi, sizeof hi);
  return perr(L->p, a->line, a->col,
              "int32 expression '%s' can overflow (range [%s, %s]); expected values in "
              "[%d, %d]",
              SNIP(L->p, a, s), lo, hi, INT32_MIN, INT32_MAX),
         NULL;
}

static ir_expr_t *lower_arith(lower_t *L, const ast_t *a, ir_expr_t *x, ir_expr_t *y) {
  bool fl = ir_dtype_is_float(x->dtype);
  switch (a->op) {
  case T_PLUS: return check_int32(L, a, ir_bin(L->f, IR_E_ADD, x, y));
  case T_MINUS: return check_int32(L, a, ir_bin(L->f, IR_E_SUB, x, y));
  case T_STAR: return check_int32(L, a, ir_bin(L->f, IR_E_MUL, x, y));
  case T_SLASH:
    if (fl) return ir_bin(L->f, IR_E_DIV, x, y);
    __attribute__((fallthrough)); /* '/' on integers is floor division */
  default:
    if (fl)
      return perr(L->p, a->op_line, a->op_col, "%s needs integer operands, but they are %s%s",
                  tok_names[a->op], ir_dtype_name(x->dtype),
                  a->op == T_DSLASH ? "; use '/' for floating-point division" : ""),
             NULL;
    if (check_divisor(L, a->args[1], y)) return NULL;
    return check_int32(L, a, ir_bin(L->f, a->op == T_PERCENT ? IR_E_FLOORMOD : IR_E_FLOORDIV, x, y));
  }
}

static ir_expr_t *lower_binary(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  static const ir_expr_kind_t cmp[] = {[T_EQ] = IR_E_EQ, [T_NE] = IR_E_NE, [T_LT] = IR_E_LT,
                                       [T_LE] = IR_E_LE, [T_GT] = IR_E_GT, [T_GE] = IR_E_GE};
  const ast_t *x = a->args[0], *y = a->args[1];
  ir_expr_t *ex, *ey;
  char what[32];
  snprintf(what, sizeof what, "the operands of %s", tok_names[a->op]);
  if (a->op == T_AND || a->op == T_OR) {
    if (!(ex = lower(L, x, hint)) || need_bool(L, ex, x, tok_names[a->op]) || !(ey = lower(L, y, hint)) ||
        need_bool(L, ey, y, tok_names[a->op]))
      return NULL;
    return ir_bin(L->f, a->op == T_AND ? IR_E_AND : IR_E_OR, ex, ey);
  }
  if (lower_pair(L, x, y, hint, NULL, &ex, &ey) || unify(L, x, y, what, &ex, &ey)) return NULL;
  if (a->op >= T_EQ && a->op <= T_GE) return ir_bin(L->f, cmp[a->op], ex, ey);
  return lower_arith(L, a, ex, ey);
}

static ir_expr_t *lower_unary(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  const ast_t *x = a->args[0];
  ir_expr_t *e;
  if (a->op == T_NOT) {
    if (!(e = lower(L, x, hint)) || need_bool(L, e, x, "'!'")) return NULL;
    return ir_unary(L->f, IR_E_NOT, e);
  }
  if (x->kind == A_INT) return int_const(L, a, -x->ival, hint);
  if (x->kind == A_FLOAT) return float_const(L, a, -x->fval, ir_dtype_is_float(hint) ? hint : L->fdefault);
  if (!(e = lower(L, x, hint)) || need_num(L, e, x, "'-'")) return NULL;
  if (e->kind == IR_E_INT && e->u.ival != (e->dtype == IR_INT32 ? INT32_MIN : INT64_MIN))
    return ir_const_int(L->f, e->dtype, -e->u.ival);
  if (e->kind == IR_E_FLOAT) return ir_float(L->f, e->dtype, -e->u.fval);
  return check_int32(L, a, ir_unary(L->f, IR_E_NEG, e));
}

static int check_arity(lower_t *L, const ast_t *a, int n, const char *usage) {
  if (a->nargs == n) return TN_OK;
  return perr(L->p, a->line, a->col, "%s takes %d %s, got %d (%s)", a->name, n,
              plural(n, "argument", "arguments"), a->nargs, usage);
}

/* exp log sqrt tanh abs (x), pow(x, y): floating point. */
static ir_expr_t *lower_math(lower_t *L, const ast_t *a, ir_math_fn_t fn, ir_dtype_t hint) {
  int n = ir_math_fn_arity(fn);
  if (check_arity(L, a, n, n == 2 ? "e.g. pow(x, 2.0)" : "e.g. exp(x)")) return NULL;
  ir_dtype_t fh = ir_dtype_is_float(hint) ? hint : L->fdefault;
  ir_expr_t *args[2];
  char what[48];
  snprintf(what, sizeof what, "the argument of %s", a->name);
  if (n == 1 ? (!(args[0] = lower(L, a->args[0], fh)) || need_num(L, args[0], a->args[0], what))
             : (lower_pair(L, a->args[0], a->args[1], fh, NULL, &args[0], &args[1]) ||
                unify(L, a->args[0], a->args[1], what, &args[0], &args[1])))
    return NULL;
  for (int i = 0; i < n; i++)
    if (!ir_dtype_is_float(args[i]->dtype)) args[i] = convert(L, args[i], fh);
  return ir_call(L->f, fn, args, n);
}

static ir_expr_t *lower_select(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  if (check_arity(L, a, 3, "select(cond, a, b)")) return NULL;
  ir_expr_t *c, *t, *e;
  if (!(c = lower(L, a->args[0], hint)) || need_bool(L, c, a->args[0], "the condition of select") ||
      lower_pair(L, a->args[1], a->args[2], hint, c, &t, &e) ||
      unify(L, a->args[1], a->args[2], "the values of select", &t, &e))
    return NULL;
  return ir_select(L->f, c, t, e);
}

static ir_expr_t *lower_call(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  parser_t *p = L->p;
  ir_dtype_t t;
  if (strcmp(a->name, "select") == 0) return lower_select(L, a, hint);
  if (strcmp(a->name, "min") == 0 || strcmp(a->name, "max") == 0) {
    ir_expr_t *x, *y;
    if (check_arity(L, a, 2, "binary min/max; a reduction is max(k < K: EXPR)") ||
        lower_pair(L, a->args[0], a->args[1], hint, NULL, &x, &y) ||
        unify(L, a->args[0], a->args[1], "the arguments of min/max", &x, &y))
      return NULL;
    return ir_bin(L->f, a->name[1] == 'i' ? IR_E_MIN : IR_E_MAX, x, y);
  }
  if (strcmp(a->name, "sum") == 0)
    return perr(p, a->line, a->col, "sum needs reduction variables: sum(k < K: EXPR)"), NULL;
  for (int fn = 0; fn < IR_FN__COUNT; fn++)
    if (strcmp(a->name, ir_math_fn_name((ir_math_fn_t)fn)) == 0)
      return lower_math(L, a, (ir_math_fn_t)fn, hint);
  if (lang_dtype(a->name, &t)) {
    ir_expr_t *x;
    if (check_arity(L, a, 1, "a conversion such as float32(x)") || !(x = lower(L, a->args[0], t)))
      return NULL;
    return convert(L, x, t);
  }
  if (find_tensor(p, a->name))
    return perr(p, a->line, a->col, "'%s' is a tensor: index it with [...], e.g. %s[i]", a->name, a->name),
           NULL;
  return perr(p, a->line, a->col,
              "unknown function '%s' (expected exp, log, sqrt, tanh, abs, pow, min, max, "
              "select or a conversion such as float32(x))",
              a->name),
         NULL;
}

/* Lowers an expression to IR over the block iterators; `hint` is the type
 * untyped constants take when nothing else decides it. */
static ir_expr_t *lower(lower_t *L, const ast_t *a, ir_dtype_t hint) {
  switch (a->kind) {
  case A_INT: return int_const(L, a, a->ival, hint);
  case A_FLOAT: return float_const(L, a, a->fval, ir_dtype_is_float(hint) ? hint : L->fdefault);
  case A_NAME: return lower_name(L, a, hint);
  case A_INDEX: return lower_access(L, a);
  case A_CALL: return lower_call(L, a, hint);
  case A_UNARY: return lower_unary(L, a, hint);
  case A_BINARY: return lower_binary(L, a, hint);
  case A_REDUCE: break;
  }
  return perr(L->p, a->line, a->col,
              "reduction '%s' must be the whole right side of a statement (e.g. "
              "C[i] = sum(k < K: A[i, k])); compute it into a temp first",
              a->name),
         NULL;
}

/* ======================================================================
 * Statements
 * ====================================================================== */

/* Declares an index or reduction variable: loop var NAME, iterator v_NAME. */
static int declare_var(lower_t *L, const char *name, int line, int col, int64_t extent, bool reduce) {
  parser_t *p = L->p;
  const char *what = reduce ? "reduction variable" : "index variable";
  int rc = check_name(p, name, line, col, what);
  if (rc) return rc;
  const svar_t *prev = find_var(L, name);
  if (prev)
    return perr(p, line, col, "%s '%s' is already used as %s", what, name,
                prev->reduce ? "a reduction variable" : "an index variable");
  const ir_param_t *pm = find_param(p, name);
  const tensor_t *T = find_tensor(p, name);
  if (pm || T)
    return perr(p, line, col, "%s '%s' has the same name as the %s declared at %d:%d; choose another name",
                what, name, pm ? "parameter" : "tensor", pm ? pm->line : T->line, pm ? pm->col : T->col);
  if (L->nvars == L->capvars) {
    L->capvars = L->capvars ? 2 * L->capvars : 16;
    L->vars = tn_xrealloc(L->vars, sizeof L->vars[0] * (size_t)L->capvars);
  }
  svar_t *v = &L->vars[L->nvars++];
  v->name = name;
  v->extent = extent;
  v->reduce = reduce;
  v->loop = ir_var_new(L->f, name, IR_INT32);
  v->iter = ir_var_new(L->f, tn_arena_printf(p->ast, "v_%s", name), IR_INT32);
  ir_bounds_set(&L->bounds, v->iter, 0, extent - 1);
  return TN_OK;
}

/* Resolves and checks the left side `T[i, j]`. */
static int lhs_target(parser_t *p, const ast_t *lhs, tensor_t **out) {
  char s[96];
  tensor_t *T = find_tensor(p, lhs->name);
  if (!T) {
    if (find_param(p, lhs->name))
      return perr(p, lhs->line, lhs->col, "'%s' is a parameter; only tensors can be assigned", lhs->name);
    return unknown_tensor(p, lhs->line, lhs->col, lhs->name);
  }
  const ir_buffer_t *b = T->buf;
  if (b->role == IR_BUF_INPUT)
    return perr(p, lhs->line, lhs->col,
                "cannot assign to input '%s'; inputs are read-only (declare it as "
                "output or temp to compute it)",
                lhs->name);
  if (T->stmt >= 0)
    return perr(p, lhs->line, lhs->col,
                "tensor '%s' is assigned twice (first at %d:%d); every output and "
                "temp is computed by exactly one statement",
                lhs->name, p->stmts[T->stmt].line, p->stmts[T->stmt].col);
  if (lhs->nargs != b->ndim)
    return perr(p, lhs->line, lhs->col, "tensor '%s' has %d %s but %d %s given", b->name, b->ndim,
                plural(b->ndim, "dimension", "dimensions"), lhs->nargs,
                plural(lhs->nargs, "index was", "indices were"));
  for (int d = 0; d < lhs->nargs; d++)
    if (lhs->args[d]->kind != A_NAME)
      return perr(p, lhs->args[d]->line, lhs->args[d]->col,
                  "the left side indexes '%s' with variable names "
                  "only (e.g. %s[i, j]), found '%s'",
                  b->name, b->name, SNIP(p, lhs->args[d], s));
  *out = T;
  return TN_OK;
}

static ir_expr_t *identity(ir_func_t *f, const char *red, ir_dtype_t t) {
  bool lowest = strcmp(red, "max") == 0;
  if (strcmp(red, "sum") == 0) return ir_dtype_is_float(t) ? ir_float(f, t, 0.0) : ir_const_int(f, t, 0);
  if (t == IR_INT32) return ir_const_int(f, t, lowest ? INT32_MIN : INT32_MAX);
  if (t == IR_INT64) return ir_const_int(f, t, lowest ? INT64_MIN : INT64_MAX);
  return ir_float(f, t, lowest ? ir_dtype_min_value(t) : ir_dtype_max_value(t));
}

/* Loops (index variables, then reduction variables) around block T. */
static ir_stmt_t *build_nest(lower_t *L, const ir_buffer_t *cb, const char *red, ir_expr_t *value) {
  ir_func_t *f = L->f;
  ir_buffer_t *buf = (ir_buffer_t *)cb;
  ir_stmt_t **loops = TN_NEWN(L->p->ast, ir_stmt_t *, L->nvars);
  for (int i = 0; i < L->nvars; i++) loops[i] = ir_loop_new(f, L->vars[i].loop, L->vars[i].extent, NULL);
  ir_stmt_t *bs = ir_block_new(f, buf->name);
  ir_block_t *b = &bs->u.block;
  b->niters = L->nvars;
  b->iters = TN_NEWN(f->arena, ir_iter_t, L->nvars);
  ir_expr_t *idx[IR_MAX_DIMS];
  for (int i = 0; i < L->nvars; i++) {
    const svar_t *v = &L->vars[i];
    b->iters[i] = (ir_iter_t){.var = v->iter,
                              .extent = v->extent,
                              .kind = v->reduce ? IR_ITER_REDUCE : IR_ITER_SPATIAL,
                              .binding = ir_varref(f, v->loop)};
    if (i < buf->ndim) idx[i] = ir_varref(f, v->iter);
  }
  /* Fold parameter arithmetic (`H + P` -> 57) so the IR states constants;
   * no variable bounds, so unit-extent iterators stay symbolic. */
  value = ir_simplify(f, value, NULL);
  if (red) {
    b->init = ir_store(f, buf, idx, buf->ndim, identity(f, red, buf->dtype));
    ir_expr_kind_t k = red[1] == 'u' ? IR_E_ADD : red[1] == 'a' ? IR_E_MAX : IR_E_MIN;
    value = ir_bin(f, k, ir_load(f, buf, idx, buf->ndim), value);
  }
  b->body = ir_store(f, buf, idx, buf->ndim, value);
  ir_block_infer_regions(f, b);
  ir_stmt_t *inner = bs;
  for (int i = L->nvars - 1; i >= 0; i--) {
    loops[i]->u.loop.body = inner;
    inner = loops[i];
  }
  return inner;
}

/* Checks and lowers `T[i, ...] = rhs` to its loop nest. */
static int lower_statement(lower_t *L, const ast_t *lhs, const ast_t *rhs, tensor_t *T, ir_stmt_t **nest) {
  parser_t *p = L->p;
  const ir_buffer_t *b = T->buf;
  int rc;
  for (int d = 0; d < b->ndim; d++) {
    const ast_t *ia = lhs->args[d];
    if ((rc = declare_var(L, ia->name, ia->line, ia->col, b->shape[d], false))) return rc;
  }
  const char *red = NULL;
  const ast_t *val = rhs;
  if (rhs->kind == A_REDUCE) {
    for (int r = 0; r < rhs->nrvars; r++) {
      const rvar_t *rv = &rhs->rvars[r];
      char what[128];
      int64_t ext;
      snprintf(what, sizeof what, "the extent of reduction variable '%s'", rv->name);
      if ((rc = eval_extent(p, rv->extent, what, &ext)) ||
          (rc = declare_var(L, rv->name, rv->line, rv->col, ext, true)))
        return rc;
    }
    red = rhs->name;
    val = rhs->args[0];
  }
  ir_expr_t *e = lower(L, val, b->dtype);
  if (!e || (rc = need_num(L, e, val, "the value of a statement"))) return TN_EINVAL;
  *nest = build_nest(L, b, red, convert(L, e, b->dtype));
  return TN_OK;
}

/* Adds the statement `lhs = rhs` computing T and lowers it. */
static int add_statement(parser_t *p, const ast_t *lhs, const ast_t *rhs, tensor_t *T) {
  if (p->nstmts == p->capstmts) {
    p->capstmts = p->capstmts ? 2 * p->capstmts : 16;
    p->stmts = tn_xrealloc(p->stmts, sizeof *p->stmts * (size_t)p->capstmts);
  }
  stmt_t *st = &p->stmts[p->nstmts];
  *st = (stmt_t){.tensor = (int)(T - p->tensors), .line = lhs->line, .col = lhs->col};
  lower_t L = {
      .p = p, .f = p->f, .st = st, .fdefault = ir_dtype_is_float(T->buf->dtype) ? T->buf->dtype : IR_FLOAT32};
  ir_bounds_init(&L.bounds);
  int rc = lower_statement(&L, lhs, rhs, T, &st->nest);
  ir_bounds_free(&L.bounds);
  free(L.vars);
  for (int i = 0; i < MAX_NARROW; i++) ir_affine_free(&L.facts[i].lin);
  if (rc) return rc;
  T->stmt = p->nstmts++;
  return TN_OK;
}

/* ---- reductions inside expressions ------------------------------------------ */

/* Reductions written inside an expression (`S[i, j] = exp(A[i, j] -
 * max(k < N: A[i, k]))`) are computed first into temporaries of their own:
 * T_max0[i] = max(k < N: A[i, k]), indexed by the left side's variables the
 * reduction uses, and read back where they stood.  Identical reductions
 * (the same text) share one temporary; inner ones are hoisted first. */
typedef struct hoist {
  const ast_t *lhs;
  const ir_buffer_t *lbuf; /* the left side's (tensors may move as temps are added; buffers do not) */
  const ast_t *outer; /* the statement's own reduction (its variables are not the left side's), or NULL */
  struct {
    const ast_t *red;
    const char *temp;
  } seen[16];
  int nseen;
} hoist_t;

/* Whether a names variable `name` (in an index, an argument, a body). */
static bool names_var(const ast_t *a, const char *name) {
  if (a->kind == A_NAME && !strcmp(a->name, name)) return true;
  for (int i = 0; i < a->nargs; i++)
    if (names_var(a->args[i], name)) return true;
  return false;
}

static bool same_text(const parser_t *p, const ast_t *a, const ast_t *b) {
  return a->end - a->off == b->end - b->off && !memcmp(p->src + a->off, p->src + b->off, a->end - a->off);
}

/* `name[v, ...]` (a bare name when nv is 0) at r's place in the source. */
static ast_t *access_ast(parser_t *p, const ast_t *r, const char *name, const ast_t *const *vars, int nv) {
  ast_t *a = TN_NEW(p->ast, ast_t);
  *a = (ast_t){.kind = nv ? A_INDEX : A_NAME, .line = r->line, .col = r->col, .off = r->off, .end = r->end,
               .depth = 2, .name = name};
  a->args = nv ? tn_arena_memdup(p->ast, vars, sizeof vars[0] * (size_t)nv) : NULL;
  a->nargs = nv;
  return a;
}

/* Hoists reduction r (whose inner reductions are hoisted already): its
 * temp (a new one, or the one of an identical reduction) and the access
 * `temp[i, ...]` that replaces it; NULL after an error. */
static ast_t *hoist_one(parser_t *p, hoist_t *h, const ast_t *r) {
  const ir_buffer_t *lb = h->lbuf;
  const ast_t *vars[IR_MAX_DIMS];
  int nv = 0;
  int64_t shape[IR_MAX_DIMS];
  for (int d = 0; d < h->lhs->nargs; d++)
    if (names_var(r, h->lhs->args[d]->name)) shape[nv] = lb->shape[d], vars[nv++] = h->lhs->args[d];
  for (int k = 0; h->outer && k < h->outer->nrvars; k++)
    if (names_var(r, h->outer->rvars[k].name))
      return perr(p, r->line, r->col,
                  "this %s(...) inside %s(...) uses the outer reduction's variable '%s'; a reduction inside an "
                  "expression may use only the left side's index variables (compute it into a temp first)",
                  r->name, h->outer->name, h->outer->rvars[k].name),
             NULL;
  const char *temp = NULL;
  for (int i = 0; i < h->nseen && !temp; i++)
    if (same_text(p, h->seen[i].red, r)) temp = h->seen[i].temp;
  if (!temp) {
    if (h->nseen == (int)TN_ARRAY_LEN(h->seen) || p->ntensors == IR_MAX_TENSORS)
      return perr(p, r->line, r->col, "too many reductions inside this statement's expressions"), NULL;
    char name[96];
    for (int n = 0;; n++) {
      snprintf(name, sizeof name, "%s_%s%d", lb->name, r->name, n);
      if (!find_tensor(p, name) && !find_param(p, name)) break;
    }
    ir_dtype_t dt = lb->dtype == IR_FLOAT64 || ir_dtype_is_int(lb->dtype) ? lb->dtype : IR_FLOAT32;
    ir_buffer_t *b = ir_buffer_new(p->f, name, dt, nv, shape, IR_SCOPE_GLOBAL, IR_BUF_TEMP);
    if (p->ntensors == p->captensors) {
      p->captensors = p->captensors ? 2 * p->captensors : 16;
      p->tensors = tn_xrealloc(p->tensors, sizeof *p->tensors * (size_t)p->captensors);
    }
    tensor_t *T = &p->tensors[p->ntensors++];
    *T = (tensor_t){.name = b->name, .line = r->line, .col = r->col, .buf = b, .stmt = -1, .hoisted = true};
    /* its statement: temp[i, ...] = r */
    ast_t *lhs = access_ast(p, r, b->name, vars, nv);
    lhs->kind = A_INDEX; /* a left side is always indexed, [] for a scalar */
    if (add_statement(p, lhs, r, T)) return NULL;
    h->seen[h->nseen].red = r;
    h->seen[h->nseen++].temp = b->name;
    temp = b->name;
  }
  return access_ast(p, r, find_tensor(p, temp)->name, vars, nv);
}

/* Hoists every reduction below a (innermost first) and replaces it by its
 * access; the node a itself stays. */
static int hoist_below(parser_t *p, hoist_t *h, ast_t *a) {
  for (int i = 0; i < a->nargs; i++) {
    ast_t *c = a->args[i];
    int rc = hoist_below(p, h, c);
    if (rc) return rc;
    if (c->kind == A_REDUCE && !(a->args[i] = hoist_one(p, h, c))) return TN_EINVAL;
  }
  return TN_OK;
}

static int parse_statement(parser_t *p) {
  tok_t *t = next(p);
  char s[96];
  ast_t *lhs = parse_name(p, t), *rhs;
  if (!lhs) return TN_EINVAL;
  if (lhs->kind != A_NAME && lhs->kind != A_INDEX)
    return perr(p, t->line, t->col,
                "expected a statement 'T[i, ...] = EXPR' with a tensor on the left, "
                "found '%s'",
                SNIP(p, lhs, s));
  int rc = expect(p, T_ASSIGN, "after '%s' (a statement is 'T[i, ...] = EXPR')", SNIP(p, lhs, s));
  if (rc || !(rhs = parse_expr(p)) || (rc = expect_eol(p, "statement"))) return rc ? rc : TN_EINVAL;
  tensor_t *T = NULL;
  if ((rc = lhs_target(p, lhs, &T))) return rc;
  int ti = (int)(T - p->tensors); /* hoisting may grow p->tensors */
  hoist_t h = {.lhs = lhs, .lbuf = T->buf, .outer = rhs->kind == A_REDUCE ? rhs : NULL};
  if ((rc = hoist_below(p, &h, rhs))) return rc;
  return add_statement(p, lhs, rhs, &p->tensors[ti]);
}

/* One declaration or statement. */
static int parse_line(parser_t *p) {
  tok_t *t = peek(p);
  char found[80];
  if (t->kind != T_IDENT)
    return perr(p, t->line, t->col,
                "expected a declaration (param, input, output, temp) or a statement such "
                "as 'C[i] = A[i]', found %s",
                tok_desc(p, t, found, sizeof found));
  if (tok_is(p, t, "param")) return parse_params(p);
  if (tok_is(p, t, "input")) return parse_tensor(p, IR_BUF_INPUT);
  if (tok_is(p, t, "output")) return parse_tensor(p, IR_BUF_OUTPUT);
  if (tok_is(p, t, "temp")) return parse_tensor(p, IR_BUF_TEMP);
  if (p->toks[p->pos + 1].kind == T_IDENT)
    return perr(p, t->line, t->col,
                "unknown declaration %s (expected param, input, output or temp, or a "
                "statement such as 'C[i] = A[i]')",
                tok_desc(p, t, found, sizeof found));
  return parse_statement(p);
}

static int parse_file(parser_t *p) {
  for (;;) {
    tok_t *t = peek(p);
    if (t->kind == T_EOF) return TN_OK;
    if (t->kind == T_NL) {
      next(p);
      continue;
    }
    tn_arena_free(p->ast);
    p->ast = tn_arena_new();
    int rc = parse_line(p);
    if (rc) return rc;
  }
}

/* ======================================================================
 * Whole-workload checks, statement order, assembly
 * ====================================================================== */

/* First not-yet-emitted statement whose inputs are all computed, or -1. */
static int first_ready(const parser_t *p, const bool *done) {
  for (int s = 0; s < p->nstmts; s++) {
    if (done[s]) continue;
    bool ready = true;
    for (int d = 0; d < p->stmts[s].ndeps && ready; d++) {
      int producer = p->tensors[p->stmts[s].deps[d].tensor].stmt;
      ready = producer < 0 || done[producer];
    }
    if (ready) return s;
  }
  return -1;
}

/* The first pending dependency of statement s (its index into deps). */
static int pending_dep(const parser_t *p, int s, const bool *done) {
  for (int d = 0; d < p->stmts[s].ndeps; d++) {
    int producer = p->tensors[p->stmts[s].deps[d].tensor].stmt;
    if (producer >= 0 && !done[producer]) return d;
  }
  return -1;
}

/* Every pending statement waits on another: walk the waits to a cycle. */
static int report_cycle(parser_t *p, const bool *done) {
  int *seen_at = TN_NEWN(p->tmp, int, p->nstmts), *path = TN_NEWN(p->tmp, int, p->nstmts + 1), len = 0, s = 0;
  for (int i = 0; i < p->nstmts; i++) seen_at[i] = -1;
  while (done[s]) s++;
  while (seen_at[s] < 0) {
    seen_at[s] = len;
    path[len++] = s;
    s = p->tensors[p->stmts[s].deps[pending_dep(p, s, done)].tensor].stmt;
  }
  tn_buf_t b;
  tn_buf_init(&b);
  for (int i = seen_at[s]; i < len; i++)
    tn_buf_printf(&b, "%s -> ", p->tensors[p->stmts[path[i]].tensor].name);
  tn_buf_put(&b, p->tensors[p->stmts[s].tensor].name);
  const dep_t *d = &p->stmts[s].deps[pending_dep(p, s, done)];
  perr(p, d->line, d->col,
       "cyclic definition: %s (each tensor is computed from the next); a tensor cannot "
       "depend on itself, directly or through temps",
       tn_buf_str(&b));
  tn_buf_free(&b);
  return TN_EINVAL;
}

/* Dependency order, source order among statements that are ready together. */
static int order_statements(parser_t *p, ir_stmt_t **order) {
  bool *done = TN_NEWN(p->tmp, bool, p->nstmts);
  for (int k = 0; k < p->nstmts; k++) {
    int s = first_ready(p, done);
    if (s < 0) return report_cycle(p, done);
    done[s] = true;
    order[k] = p->stmts[s].nest;
  }
  return TN_OK;
}

static int check_complete(parser_t *p) {
  for (int i = 0; i < p->novr; i++)
    if (!p->ovr_used[i]) {
      tn_buf_t b;
      tn_buf_init(&b);
      list_params(p, &b, "none");
      tn_err_set(p->err, TN_EINVAL,
                 "%s: --set %s=%lld: '%s' is not a parameter of this workload (declared: %s)", p->path,
                 p->ovr[i].name, (long long)p->ovr[i].value, p->ovr[i].name, tn_buf_str(&b));
      tn_buf_free(&b);
      return TN_EINVAL;
    }
  int noutputs = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const tensor_t *T = &p->tensors[i];
    noutputs += T->buf->role == IR_BUF_OUTPUT;
    if (T->buf->role != IR_BUF_INPUT && T->stmt < 0)
      return perr(p, T->line, T->col, "%s '%s' is never assigned; expected a statement '%s[...] = ...'",
                  T->buf->role == IR_BUF_OUTPUT ? "output" : "temp", T->name, T->name);
  }
  if (!noutputs) {
    const tok_t *t = &p->toks[p->ntoks - 1];
    return perr(p, t->line, t->col,
                "the workload has no output; expected a declaration such as "
                "'output C: float32[N]' and a statement computing it");
  }
  return TN_OK;
}

static int assemble(parser_t *p) {
  ir_func_t *f = p->f;
  ir_stmt_t **order = TN_NEWN(p->tmp, ir_stmt_t *, p->nstmts);
  int rc = order_statements(p, order);
  if (rc) return rc;
  ir_block_t *root = ir_func_root(f);
  root->body = p->nstmts == 1 ? order[0] : ir_seq(f, order, p->nstmts);
  f->params = TN_NEWN(f->arena, ir_buffer_t *, p->ntensors);
  root->allocs = TN_NEWN(f->arena, ir_buffer_t *, p->ntensors);
  for (int i = 0; i < p->ntensors; i++) {
    ir_buffer_t *b = p->tensors[i].buf;
    if (b->role == IR_BUF_TEMP)
      root->allocs[root->nallocs++] = b;
    else
      f->params[f->nparams++] = b;
  }
  ir_workload_t *w = p->w;
  w->nparams = p->nparams;
  w->params =
      p->nparams ? tn_arena_memdup(w->arena, p->params, sizeof(ir_param_t) * (size_t)p->nparams) : NULL;
  return TN_OK;
}

/* ======================================================================
 * Public API
 * ====================================================================== */

static int check_overrides(parser_t *p) {
  for (int i = 0; i < p->novr; i++) {
    if (!p->ovr[i].name)
      return tn_err_set(p->err, TN_EINVAL, "%s: --set override %d has no name", p->path, i + 1);
    for (int j = 0; j < i; j++)
      if (strcmp(p->ovr[i].name, p->ovr[j].name) == 0)
        return tn_err_set(p->err, TN_EINVAL,
                          "%s: --set %s is given twice; expected each parameter at most once", p->path,
                          p->ovr[i].name);
  }
  return TN_OK;
}

/* "dir/matmul.tw" -> "matmul". */
static const char *file_stem(tn_arena_t *a, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 3 && strcmp(base + n - 3, ".tw") == 0) n -= 3;
  return n ? tn_arena_strndup(a, base, n) : "workload";
}

static ir_workload_t *workload_new(const char *path, const char *text, size_t len) {
  tn_arena_t *a = tn_arena_new();
  ir_workload_t *w = TN_NEW(a, ir_workload_t);
  w->arena = a;
  w->path = tn_arena_strdup(a, path);
  w->name = file_stem(a, path);
  char *src = tn_arena_alloc(a, len + 1);
  if (len) memcpy(src, text, len);
  w->source = src;
  w->func = ir_func_new("main");
  return w;
}

int ir_workload_parse(const char *path, const char *text, size_t len, const ir_param_set_t *overrides,
                      int noverrides, ir_workload_t **out, tn_err_t *err) {
  if (out) *out = NULL;
  if (!path) path = "<workload>";
  if (!out || (!text && len) || noverrides < 0 || (noverrides && !overrides))
    return tn_err_set(err, TN_EINVAL, "%s: ir_workload_parse: invalid arguments", path);
  parser_t *p = tn_xcalloc(1, sizeof *p);
  p->path = path;
  p->src = text ? text : "";
  p->len = len;
  p->err = err;
  p->ovr = overrides;
  p->novr = noverrides;
  p->ovr_used = tn_xcalloc((size_t)noverrides + 1, sizeof(bool));
  p->ast = tn_arena_new();
  p->tmp = tn_arena_new();
  p->w = workload_new(path, p->src, len);
  p->f = p->w->func;
  int rc = check_overrides(p);
  if (!rc) rc = check_bytes(p);
  if (!rc) rc = lex(p);
  if (!rc) rc = parse_file(p);
  if (!rc) rc = check_complete(p);
  if (!rc) rc = assemble(p);
  if (rc)
    ir_workload_free(p->w);
  else
    *out = p->w;
  tn_arena_free(p->ast);
  tn_arena_free(p->tmp);
  free(p->toks);
  free(p->tensors);
  free(p->stmts);
  free(p->params);
  free(p->ovr_used);
  free(p);
  return rc;
}

int ir_workload_load(const char *path, const ir_param_set_t *overrides, int noverrides, ir_workload_t **out,
                     tn_err_t *err) {
  char *text;
  size_t len;
  if (out) *out = NULL;
  int rc = tn_read_file(path, IR_MAX_SOURCE_BYTES, &text, &len, err);
  if (rc) return rc;
  rc = ir_workload_parse(path, text, len, overrides, noverrides, out, err);
  free(text);
  return rc;
}

/* {"M": 64, ...} as overrides in the arena. */
static int overrides_from_json(const char *json, tn_arena_t *a, ir_param_set_t **out, int *n, tn_err_t *err) {
  *out = NULL;
  *n = 0;
  cJSON *j = cJSON_Parse(json && *json ? json : "{}");
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return tn_err_set(err, TN_EINVAL, "workload parameters are not a JSON object: %.80s", json);
  }
  int cap = cJSON_GetArraySize(j);
  *out = TN_NEWN(a, ir_param_set_t, cap ? cap : 1);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 9.0e15) {
      cJSON_Delete(j);
      return tn_err_set(err, TN_EINVAL, "workload parameter %s must be an integer", it->string);
    }
    (*out)[*n].name = tn_arena_strdup(a, it->string);
    (*out)[*n].value = (int64_t)it->valuedouble;
    (*n)++;
  }
  cJSON_Delete(j);
  return 0;
}

int ir_workload_parse_stored(const char *name, const char *text, const char *params_json, ir_workload_t **out,
                             tn_err_t *err) {
  *out = NULL;
  if (!text) return tn_err_set(err, TN_EINVAL, "workload %s has no source text", name ? name : "(unnamed)");
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t *ov;
  int nov;
  char path[96];
  snprintf(path, sizeof path, "%.80s.tw", name && name[0] ? name : "workload");
  int rc = overrides_from_json(params_json, a, &ov, &nov, err);
  if (!rc) rc = ir_workload_parse(path, text, strlen(text), ov, nov, out, err);
  tn_arena_free(a);
  return rc;
}

void ir_workload_free(ir_workload_t *w) {
  if (!w) return;
  ir_func_free(w->func);
  tn_arena_free(w->arena);
}

int ir_param_set_parse(const char *arg, tn_arena_t *a, ir_param_set_t *out, tn_err_t *err) {
  const char *eq = arg ? strchr(arg, '=') : NULL;
  if (!eq) return tn_err_set(err, TN_EINVAL, "--set '%s': expected NAME=VALUE (e.g. M=64)", arg ? arg : "");
  size_t n = (size_t)(eq - arg);
  bool ok = n > 0 && is_alpha(arg[0]);
  for (size_t i = 1; i < n && ok; i++) ok = is_alnum(arg[i]);
  if (!ok)
    return tn_err_set(err, TN_EINVAL,
                      "--set '%s': '%.*s' is not a parameter name (expected letters, digits "
                      "and '_', not starting with a digit)",
                      arg, (int)n, arg);
  const char *s = eq + 1;
  bool neg = *s == '-';
  s += neg || *s == '+';
  int64_t v = 0;
  ok = is_digit(*s);
  for (; *s && ok; s++) {
    ok = is_digit(*s) && v <= (MAX_LITERAL - (*s - '0')) / 10;
    if (ok) v = v * 10 + (*s - '0');
  }
  if (!ok)
    return tn_err_set(err, TN_EINVAL, "--set '%s': '%s' is not an integer of at most 62 bits (e.g. %.*s=64)",
                      arg, eq + 1, (int)n, arg);
  out->name = tn_arena_strndup(a, arg, n);
  out->value = neg ? -v : v;
  return TN_OK;
}
